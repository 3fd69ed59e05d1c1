"""Integration test: a real agent whose two state generations are lost rebuilds the bound reservation of a VM the
coordinator launched (its description) from the CPUs the VM's vCPU threads are pinned to, or, when they are not, from
the description's cpus and with its reservation id (then pins them), and does not hand those CPUs out again; of two
VMs whose CPUs overlap only the lower VMID is rebuilt. The VM is the simulator's stand-in QEMU (one "CPU 0/KVM"
thread); the host is the topology."""
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402
from test_agent_reservations import Client  # noqa: E402

VMID = 9001
MIB = 1 << 20
STANDIN = os.path.join(agentlib.BUILD, "tests", "sim", "standin-kvm")
# As Proxmox writes the coordinator's description: "#" lines, ":" %-encoded.
DESCR = "#pvescale-nodeclaim%3A claim-a\n#uid%3A 5f0c-uid\n#created%3A 2026-11-27T06%3A00%3A00Z\n"
CONF = DESCR + "name: vm%d\ncores: 1\nsockets: 1\nmemory: 64\n" % VMID


@unittest.skipUnless({0, 1} <= os.sched_getaffinity(0) and os.path.exists(STANDIN), "needs CPUs 0, 1 and the stand-in")
class RebuildTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-rebuild-")
        self.ca, cert, key = agentlib.make_tls(self.tmp)
        token_file, self.token = agentlib.write_token(self.tmp)
        self.conf_dir, self.run_dir = os.path.join(self.tmp, "qemu-server"), os.path.join(self.tmp, "run")
        self.state = os.path.join(self.tmp, "reservations.json")
        os.makedirs(self.conf_dir)
        os.makedirs(self.run_dir)
        self.qemu = None
        self.args = ["--config", os.devnull, "--tls-cert", cert, "--tls-key", key, "--token-file", token_file,
                     "--pve-config-dir", self.conf_dir, "--pve-run-dir", self.run_dir, "--state-dir", self.tmp,
                     "--node-policy", "static", "--pin-interval", "3600"]
        self.start()

    def start(self):
        self.agent = agentlib.Agent(self.args)
        self.client = Client(self.agent.port, self.ca, self.token)

    def tearDown(self):
        if self.qemu:
            self.qemu.kill()
            self.qemu.wait()
        self.agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def wait_for(self, cond, within, what):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.02)
        self.fail("%s: not within %.1f s" % (what, within))

    def vcpu_tid(self):
        """The stand-in's "CPU 0/KVM" thread."""
        for tid in os.listdir("/proc/%d/task" % self.qemu.pid):
            with open("/proc/%d/task/%s/comm" % (self.qemu.pid, tid)) as f:
                if f.read().strip() == "CPU 0/KVM":
                    return int(tid)
        return None

    def vcpu_cpus(self):
        """The CPUs the stand-in's "CPU 0/KVM" thread may run on."""
        tid = self.vcpu_tid()
        return os.sched_getaffinity(tid) if tid else None

    def launch_bound_vm(self, conf):
        """A reservation, the VM's config (conf, {id} and {cpus} the reservation's) and its running stand-in, bound and
        pinned."""
        status, r = self.client.request("POST", "/v1/reservations", {
            "vcpus": 1, "memory_bytes": 64 * MIB, "ttl_seconds": 300, "owner": "nodeclaim/5f0c-uid/claim-a"})
        self.assertEqual(status, 201, r)
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write(conf.replace("{id}", r["id"]).replace("{cpus}", r["cpus"]))
        kvm = os.path.join(self.tmp, "kvm")
        os.symlink(STANDIN, kvm)
        self.qemu = subprocess.Popen([kvm, "-id", str(VMID), "-smp", "1", "-pidfile",
                                      os.path.join(self.run_dir, "%d.pid" % VMID), "-chardev",
                                      "socket,id=qmp,path=%s/%d.qmp,server=on,wait=off" % (self.run_dir, VMID)])
        self.wait_for(lambda: os.path.exists(os.path.join(self.run_dir, "%d.pid" % VMID)), 10, "the stand-in")
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": VMID})
        self.assertEqual(status, 200, body)
        self.wait_for(lambda: self.vcpu_cpus() == set(r["vcpu_map"]), 5, "the vCPU pinned to %s" % r["vcpu_map"])
        return r

    def restart_without_state(self):
        """A crash, then both generations damaged: no reservations until the operator removes them."""
        self.agent.stop(signal.SIGKILL)
        for path in (self.state, self.state + ".prev"):
            with open(path, "wb") as f:
                f.write(b"damaged")
        self.start()
        self.assertFalse(self.ready())
        os.unlink(self.state)
        os.unlink(self.state + ".prev")
        self.wait_for(self.ready, 5, "ready after the operator removed the damaged files")

    def assert_not_offered(self, cpu):
        status, offer = self.client.request("POST", "/v1/offers", {"shapes": [{"vcpus": 1, "memory_bytes": MIB * 64}]})
        self.assertEqual(status, 200, offer)
        self.assertNotIn(str(cpu), offer["offers"][0]["placement"]["cpus"].split(","))

    def ready(self):
        status, text = agentlib.curl("https://localhost:%d/readyz" % self.agent.port, self.ca)
        return status == 200

    def test_lost_state_is_rebuilt_from_the_vm(self):
        r = self.launch_bound_vm(CONF)
        self.restart_without_state()

        status, body = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200, body)
        [got] = body["reservations"]
        self.assertEqual((got["state"], got["vmid"], got["owner"], got["vcpus"], got["memory_bytes"]),
                         ("bound", VMID, "nodeclaim/5f0c-uid/claim-a", 1, 64 * MIB))
        self.assertEqual(got["vcpu_map"], r["vcpu_map"])
        self.assertTrue(os.path.exists(self.state), "the rebuilt ledger is saved")
        # Its CPU is not offered again: a new reservation gets another one.
        self.assert_not_offered(r["vcpu_map"][0])
        status, other = self.client.request("POST", "/v1/reservations", {
            "vcpus": 1, "memory_bytes": 64 * MIB, "ttl_seconds": 300, "owner": "nodeclaim/other/claim-b"})
        self.assertEqual(status, 201, other)
        self.assertNotEqual(other["vcpu_map"], r["vcpu_map"])
        self.agent.stop()
        self.assertIn("rebuilt 1 bound reservations", "".join(self.agent.lines))

    def test_unpinned_vm_is_rebuilt_from_its_description_and_pinned(self):
        # The description as the coordinator writes it once the agent reserved: the id and the CPUs.
        r = self.launch_bound_vm(DESCR + "#reservation%3A {id}\n#cpus%3A {cpus}\n" +
                                 "name: vm%d\ncores: 1\nsockets: 1\nmemory: 64\n" % VMID)
        os.sched_setaffinity(self.vcpu_tid(), {0, 1})  # its vCPU thread no longer pinned (a QEMU restarted by hand)
        self.restart_without_state()

        status, body = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200, body)
        [got] = body["reservations"]
        self.assertEqual((got["id"], got["state"], got["vmid"], got["vcpu_map"]),
                         (r["id"], "bound", VMID, r["vcpu_map"]))
        self.wait_for(lambda: self.vcpu_cpus() == set(r["vcpu_map"]), 5, "the agent pins the rebuilt VM again")
        self.assert_not_offered(r["vcpu_map"][0])
        self.agent.stop()
        self.assertIn("rebuilt: CPUs %s from its description" % r["cpus"], "".join(self.agent.lines))

    def test_of_two_overlapping_vms_the_lower_vmid_is_rebuilt(self):
        self.agent.stop()
        for vmid in (VMID + 2, VMID + 1):  # stopped, both on CPU 1 (pinned by hand)
            with open(os.path.join(self.conf_dir, "%d.conf" % vmid), "w") as f:
                f.write(DESCR + "#cpus%%3A 1\nname: vm%d\ncores: 1\nsockets: 1\nmemory: 64\n" % vmid)
        self.start()
        status, body = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200, body)
        self.assertEqual([(g["vmid"], g["cpus"]) for g in body["reservations"]], [(VMID + 1, "1")])
        self.agent.stop()
        self.assertRegex("".join(self.agent.lines), r"VM %d .*not rebuilt: .*overlap those of VM %d" % (VMID + 2, VMID + 1))

if __name__ == "__main__":
    unittest.main()
