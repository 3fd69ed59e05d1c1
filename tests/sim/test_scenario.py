#!/usr/bin/env python3
# Tests of the simulator process: endpoints.json contract, scenarios, --report, admin faults, clean SIGTERM. The
# Proxmox side without Kubernetes (--kube none); the Kubernetes side of scenarios, /calls and endpoints.json on one
# real control plane (../shared/k8s) that KubeTest's simulators attach to.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simlib import controlplane  # noqa: E402
from simtest import read  # noqa: E402

TEN_HOSTS = ("pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga,pve3=memorysidecaches,pve4=64amd64-4s2n4ca2co,"
             "pve5=offline-cpu0-node0,pve6=20em64t-hybrid-1p6c2t+2ca4co1t,pve7=32amd64-4s2n4c-cgroup2,"
             "r2/pve8=fakememinitiators-1np2c+1npp+gi,r2/pve9=AMD-19h-Zen4-2xEpyc-9654,"
             "r2/pve10=32em64t-2n8c+dax+nvme+mic+dimms")


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


class ProcessTest(unittest.TestCase):
    def test_endpoints_contract_ten_hosts(self):
        sim = simtest.Sim(hosts=TEN_HOSTS, kube="none")
        try:
            ep = sim.ep
            self.assertTrue(os.path.exists(ep["ca_file"]))
            self.assertEqual(sorted(ep["pve"]), ["r1", "r2"])
            self.assertEqual(ep["pve"]["r2"]["nodes"], ["pve8", "pve9", "pve10"])
            self.assertTrue(ep["pve"]["r1"]["url"].startswith("https://127.0.0.1:"))
            self.assertTrue(ep["pve"]["r1"]["url"].endswith("/api2/json"))
            self.assertEqual(ep["pve"]["r1"]["token_id"], "pvescale@pve!coordinator")
            self.assertIsNone(ep["kube"])  # --kube none: KubeTest has the Kubernetes side
            for name, h in ep["hosts"].items():
                self.assertTrue(os.path.isdir(h["pve_config_dir"]), name)
                self.assertTrue(os.path.isdir(h["pve_run_dir"]), name)
                self.assertEqual(h["ip"], "127.0.0.1")
                if "fsroot" in h:
                    self.assertTrue(os.path.isdir(os.path.join(h["fsroot"], "sys", "devices", "system", "cpu")), h)
                else:
                    self.assertTrue(os.path.isfile(h["topology_xml"]), h)
            self.assertTrue(ep["hosts"]["pve3"]["fsroot"].endswith("/memorysidecaches"))
            self.assertTrue(ep["hosts"]["pve10"]["fsroot"].endswith("/32em64t-2n8c+1mic"))
            self.assertEqual(ep["hosts"]["pve2"]["topology"], "eas-tioga")
            # each host has its template as a real config file
            tmpl = ep["pve"]["r2"]["templates"]["pve9"]
            text = read(os.path.join(ep["hosts"]["pve9"]["pve_config_dir"], "%d.conf" % tmpl))
            self.assertIn("\ntemplate: 1\n", text)
            self.assertIn("\nname: k8s-template\n", text)
            cpus = sim.pve("GET", "/nodes/pve9/status", region="r2").data["cpuinfo"]
            self.assertEqual((cpus["cpus"], cpus["sockets"]), (384, 2))
        finally:
            sim.stop()

    def test_bad_cli_exits_2(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "endpoints.json"), "w") as f:
            f.write("{}")
        for args in (["--hosts", "pve1=no-such-topology"], ["--hosts", "garbage"], ["--set", "nope=1"],
                     ["--standin", os.path.join(d, "no-such-standin")]):
            r = subprocess.run([sys.executable, simtest.RUN, "--state-dir", d] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.decode().strip().splitlines()), 1, r.stderr)
            self.assertTrue(os.path.exists(os.path.join(d, "endpoints.json")), args)  # an earlier run's state stays

    def test_sigterm_kills_vms_and_keeps_files(self):
        sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", kube="none")
        pids = []
        for vmid in (101, 102):
            sim.clone(vmid, "vm%d" % vmid)
            st = sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid).data)
            self.assertEqual(st["exitstatus"], "OK")
            pids.append(int(read(os.path.join(sim.ep["hosts"]["pve1"]["pve_run_dir"], "%d.pid" % vmid))))
        self.assertTrue(all(alive(p) for p in pids))
        self.assertEqual(sim.stop(cleanup=False), 0)
        try:
            simtest.wait_for(lambda: not any(alive(p) for p in pids), 5, what="VM processes gone")
            conf = os.path.join(sim.ep["hosts"]["pve1"]["pve_config_dir"], "101.conf")
            self.assertTrue(os.path.exists(conf))
            self.assertFalse(os.path.exists(os.path.join(sim.ep["hosts"]["pve1"]["pve_run_dir"], "101.pid")))
        finally:
            shutil.rmtree(sim.dir, ignore_errors=True)

    def test_crashed_vm_process_is_noticed(self):
        sim = simtest.Sim(hosts="pve1=eas-tioga", kube="none")
        try:
            sim.clone(101, "crashy")
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/start").data)
            pid = int(read(os.path.join(sim.ep["hosts"]["pve1"]["pve_run_dir"], "101.pid")))
            os.kill(pid, signal.SIGKILL)
            simtest.wait_for(lambda: sim.pve("GET", "/nodes/pve1/qemu/101/status/current").data["status"] == "stopped",
                             what="VM stopped after its process died")
        finally:
            sim.stop()


class FaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", knobs=["timeout_hold_seconds=1"],
                              kube="none")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def test_error_and_timeout_knobs(self):
        self.sim.knobs(pve_error_next=1)
        r = self.sim.pve("GET", "/version")
        self.assertEqual(r.status, 500)
        self.assertIn("fault injection", r.json["message"])
        self.assertEqual(self.sim.pve("GET", "/version").status, 200)
        self.sim.knobs(pve_timeout_next=1)
        t = time.time()
        with self.assertRaises(Exception):
            self.sim.pve("GET", "/version")
        self.assertGreaterEqual(time.time() - t, 0.9)
        r = self.sim.admin("POST", "/knobs", {"no_such_knob": 1})
        self.assertEqual(r.status, 400)

    def test_host_down(self):
        self.sim.clone(150, "on-pve2", node="pve2")
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve2/qemu/150/status/start").data)
        pid = int(read(os.path.join(self.sim.ep["hosts"]["pve2"]["pve_run_dir"], "150.pid")))
        r = self.sim.admin("POST", "/actions/host", {"host": "pve2", "down": True})
        self.assertEqual(r.status, 200)
        simtest.wait_for(lambda: not alive(pid), 5, what="VM killed with its host")
        nodes = {n["node"]: n["status"] for n in self.sim.pve("GET", "/nodes").data}
        self.assertEqual(nodes["pve2"], "offline")
        self.assertEqual(self.sim.pve("GET", "/nodes/pve2/qemu").status, 595)
        self.sim.admin("POST", "/actions/host", {"host": "pve2", "down": False})
        self.assertEqual(self.sim.pve("GET", "/nodes/pve2/qemu").status, 200)

    def test_calls_are_counted(self):
        self.sim.admin("POST", "/calls/reset")
        for _ in range(3):
            self.sim.pve("GET", "/nodes/pve1/qemu/9000/config")
        calls = self.sim.admin("GET", "/calls").json
        self.assertEqual(calls["pve"]["GET /nodes/{node}/qemu/{vmid}/config"], 3)


class KubeTest(unittest.TestCase):
    """The Kubernetes side of the simulator process: one real control plane, each test's simulator attached."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sim-scenario-cp-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.cp = controlplane.ControlPlane(os.path.join(cls.tmp, "cp"))
        cls.addClassCleanup(cls.cp.stop)
        cls.cp.start()

    def test_endpoints_and_calls(self):
        sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", args=["--kube-attach", self.cp.dir])
        try:
            ep = sim.ep
            self.assertTrue(os.path.exists(ep["kube"]["kubeconfig"]))
            self.assertIn(ep["kube"]["proxy_url"], read(ep["kube"]["kubeconfig"]))
            self.assertEqual(ep["kube"]["url"], self.cp.url)
            sim.admin("POST", "/calls/reset")
            sim.pve("GET", "/nodes/pve1/qemu/9000/config")
            sim.kube("GET", "/api/v1/namespaces/default/pods")  # a client other than the simulator: counted

            def counted():
                calls = sim.admin("GET", "/calls").json
                return calls["kube"].get("GET /api/v1/namespaces/{namespace}/pods") == 1 and calls
            calls = simtest.wait_for(counted, 30, 0.2, what="the pods list in /calls (the audit log)")
            self.assertEqual(calls["pve"]["GET /nodes/{node}/qemu/{vmid}/config"], 1)
        finally:
            sim.stop()

    def test_scenario_and_report(self):
        """Objects, pods at their times, pods leaving, knob events, the end condition and --report. A pod runs only
        on a Node with a kubelet (a VM that joined), so these stay Pending on the real scheduler: the scenario ends
        by its timeout (the imitation ran them on a Node object alone)."""
        scenario = {
            "hosts": [{"name": "pve1", "region": "r1", "topology": "32intel64-2p8co2t+8ve"}],
            "knobs": {"pod_start_seconds": 0.1},
            "template": {"vmid": 9100, "name": "k8s-template", "tags": "k8s-template;pvescale"},
            "objects": [{"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "scenario-object", "namespace": "default"}, "data": {"a": "1"}}],
            "pods": [{"at": 0.2, "name": "web", "count": 2, "cpu": "500m", "memory": "256Mi"},
                     {"at": 0.4, "name": "batch", "cpu": "250m", "leave_after": 0.6}],
            "events": [{"at": 0.3, "knobs": {"clone_seconds": 0.1}}],
            "end": {"when": "all_running", "timeout": 4},
        }
        d = tempfile.mkdtemp(prefix="sim-scenario-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "scenario.json")
        with open(path, "w") as f:
            json.dump(scenario, f)
        out = os.path.join(d, "report.json")
        r = subprocess.run([sys.executable, simtest.RUN, "--state-dir", os.path.join(d, "state"), "--scenario", path,
                            "--report", out, "--kube-attach", self.cp.dir],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn("scenario finished", r.stderr.decode() + r.stdout.decode())
        rep = json.loads(read(out))
        pods = {p["name"]: p for p in rep["pods"]}
        self.assertEqual(sorted(pods), ["batch", "web-0", "web-1"])
        for p in pods.values():
            self.assertIsNotNone(p["pending"], p)  # the real scheduler found no node for it
            self.assertIsNone(p["running"], p)
        self.assertIsNotNone(pods["batch"]["deleted"])
        self.assertIsNone(pods["web-0"]["deleted"])
        self.assertIn("api_calls", rep)
        self.assertIn("vms", rep)
        ep = json.loads(read(os.path.join(d, "state", "endpoints.json")))
        self.assertEqual(ep["pve"]["r1"]["templates"], {"pve1": 9100})
        admin = self.cp.admin()
        self.assertEqual(admin.get("/api/v1/namespaces/default/configmaps/scenario-object")["data"], {"a": "1"})
        names = sorted(p["metadata"]["name"] for p in admin.get("/api/v1/namespaces/default/pods")["items"])
        self.assertEqual(names, ["web-0", "web-1"])
        for n in names:
            admin.call("DELETE", "/api/v1/namespaces/default/pods/%s?gracePeriodSeconds=0" % n, ok=(200, 202, 404))
        admin.call("DELETE", "/api/v1/namespaces/default/configmaps/scenario-object", ok=(200, 404))


class ScenarioTest(unittest.TestCase):
    def test_report_has_vms(self):
        sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", kube="none")
        try:
            sim.clone(120, "rep-vm")
            sim.pve("PUT", "/nodes/pve1/qemu/120/config", {"cores": 2, "memory": "4096", "numa": 1,
                                                           "numa0": "cpus=0-1,hostnodes=1,memory=4096,policy=bind"})
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/120/status/start").data)
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/120/status/stop").data)
            sim.wait_task(sim.pve("DELETE", "/nodes/pve1/qemu/120").data)
            rep = sim.admin("GET", "/report").json
            vm = [v for v in rep["vms"] if v["vmid"] == 120][0]
            self.assertEqual((vm["host"], vm["vcpus"], vm["memory_mib"]), ("pve1", 2, 4096))
            self.assertEqual(vm["numa"]["numa0"], "cpus=0-1,hostnodes=1,memory=4096,policy=bind")
            self.assertEqual(len(vm["started"]), 1)
            self.assertIsNotNone(vm["deleted"])
            self.assertEqual(sorted(vm["pinned_cpus"]), ["0", "1"])
            self.assertGreater(rep["api_calls"]["pve"]["POST /nodes/{node}/qemu/{vmid}/clone"], 0)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
