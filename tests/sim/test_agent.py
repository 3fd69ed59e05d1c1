#!/usr/bin/env python3
# Interop test: a real pvescale-agent (PVESCALE_AGENT=path) reads a simulated host like a Proxmox host.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import read  # noqa: E402

AGENT = os.environ.get("PVESCALE_AGENT")


@unittest.skipUnless(AGENT and os.access(AGENT, os.X_OK), "PVESCALE_AGENT not set")
class AgentInteropTest(unittest.TestCase):
    def agent(self, cmd, host, name):
        args = [AGENT, cmd, "--node-name", name, "--pve-config-dir", host["pve_config_dir"],
                "--pve-run-dir", host["pve_run_dir"], "--corosync-conf", host["corosync_conf"],
                "--pve-lxc-dir", host["pve_lxc_dir"], "--lxc-cgroup-dir", host["lxc_cgroup_dir"]]
        args += ["--fsroot", host["fsroot"]] if "fsroot" in host else ["--topology-xml", host["topology_xml"]]
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return json.loads(r.stdout)

    def test_agent_sees_sim_host(self):
        sim = simtest.Sim(kube="none", hosts="pve1=32intel64-2p8co2t+8ve,r2/pve2=eas-tioga")
        try:
            sim.clone(101, "agent-vm")
            sim.pve("PUT", "/nodes/pve1/qemu/101/config", {"cores": 4, "memory": "4096", "numa": 1,
                                                           "numa0": "cpus=0-3,hostnodes=1,memory=4096,policy=bind"})
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/start").data)
            host = sim.ep["hosts"]["pve1"]
            pid = int(read(os.path.join(host["pve_run_dir"], "101.pid")))
            vms = {v["vmid"]: v for v in self.agent("vms", host, "pve1")["vms"]}
            self.assertEqual((vms[101]["running"], vms[101]["pid"], vms[101]["vcpus"]), (True, pid, 4))
            self.assertEqual(vms[101]["numa_nodes"][0]["hostnodes"], "1")
            self.assertTrue(vms[9000]["template"])
            cap = self.agent("capacity", host, "pve1")
            self.assertEqual((cap["region"], cap["cpus_total"]), ("r1", 32))
            cap2 = self.agent("capacity", sim.ep["hosts"]["pve2"], "pve2")
            self.assertEqual((cap2["region"], cap2["cpus_total"]), ("r2", 128))
        finally:
            sim.stop()

    def test_agent_counts_containers_in_the_host_tree(self):
        """Containers written where pmxcfs shows them (nodes/<host>/lxc): a running one pinned to 0-3 by its raw
        cpuset, a running one with cores: 4, a stopped one; the agent counts them next to the simulator's VMs."""
        sim = simtest.Sim(kube="none", hosts="pve1=32intel64-2p8co2t+8ve")
        try:
            host = sim.ep["hosts"]["pve1"]
            node_dir = os.path.join(host["root"], "etc", "pve", "nodes", "pve1", "lxc")
            confs = {950: "hostname: pinned\ncores: 4\nmemory: 1024\nlxc.cgroup2.cpuset.cpus: 0-3\n",
                     951: "hostname: floating\ncores: 4\nmemory: 2048\n",
                     952: "hostname: stopped\ncores: 2\nmemory: 512\n"}
            for vmid, text in confs.items():
                with open(os.path.join(node_dir, "%d.conf" % vmid), "w") as f:
                    f.write(text)
            for vmid in (950, 951):
                os.makedirs(os.path.join(host["lxc_cgroup_dir"], str(vmid)))
                with open(os.path.join(host["lxc_cgroup_dir"], str(vmid), "cgroup.events"), "w") as f:
                    f.write("populated 1\nfrozen 0\n")
            cts = {c["vmid"]: c for c in self.agent("containers", host, "pve1")["containers"]}
            self.assertEqual(sorted(cts), [950, 951, 952])
            self.assertEqual([cts[v]["running"] for v in (950, 951, 952)], [True, True, False])
            cap = self.agent("capacity", host, "pve1")
            self.assertEqual(cap["pinned_cpus"], "0-3")
            self.assertEqual(cap["containers"]["floating_cpus"], 4 + 2)  # stopped ones count by default
            self.assertEqual(cap["cpus_free"], 32 - 4 - 4 - 2)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
