"""Integration test: a real agent whose two state generations are lost rebuilds the bound reservation of a VM the
coordinator launched (its description) from the CPUs the VM's vCPU threads are pinned to, and does not hand those
CPUs out again. The VM is the simulator's stand-in QEMU (one "CPU 0/KVM" thread); the host is the topology."""
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
CONF = ("#pvescale-nodeclaim%%3A claim-a\n#uid%%3A 5f0c-uid\n#created%%3A 2026-11-27T06%%3A00%%3A00Z\n"
        "name: vm%d\ncores: 1\nsockets: 1\nmemory: 64\n" % VMID)


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

    def vcpu_cpus(self):
        """The CPUs the stand-in's "CPU 0/KVM" thread may run on."""
        for tid in os.listdir("/proc/%d/task" % self.qemu.pid):
            with open("/proc/%d/task/%s/comm" % (self.qemu.pid, tid)) as f:
                if f.read().strip() == "CPU 0/KVM":
                    return os.sched_getaffinity(int(tid))
        return None

    def ready(self):
        status, text = agentlib.curl("https://localhost:%d/readyz" % self.agent.port, self.ca)
        return status == 200

    def test_lost_state_is_rebuilt_from_the_vm(self):
        status, r = self.client.request("POST", "/v1/reservations", {
            "vcpus": 1, "memory_bytes": 64 * MIB, "ttl_seconds": 300, "owner": "nodeclaim/5f0c-uid/claim-a"})
        self.assertEqual(status, 201, r)
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write(CONF)
        kvm = os.path.join(self.tmp, "kvm")
        os.symlink(STANDIN, kvm)
        self.qemu = subprocess.Popen([kvm, "-id", str(VMID), "-smp", "1", "-pidfile",
                                      os.path.join(self.run_dir, "%d.pid" % VMID), "-chardev",
                                      "socket,id=qmp,path=%s/%d.qmp,server=on,wait=off" % (self.run_dir, VMID)])
        self.wait_for(lambda: os.path.exists(os.path.join(self.run_dir, "%d.pid" % VMID)), 10, "the stand-in")
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": VMID})
        self.assertEqual(status, 200, body)
        self.wait_for(lambda: self.vcpu_cpus() == set(r["vcpu_map"]), 5, "the vCPU pinned to %s" % r["vcpu_map"])

        # A crash, then both generations damaged: no reservations until the operator removes them.
        self.agent.stop(signal.SIGKILL)
        for path in (self.state, self.state + ".prev"):
            with open(path, "wb") as f:
                f.write(b"damaged")
        self.start()
        self.assertFalse(self.ready())
        os.unlink(self.state)
        os.unlink(self.state + ".prev")
        self.wait_for(self.ready, 5, "ready after the operator removed the damaged files")

        status, body = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200, body)
        [got] = body["reservations"]
        self.assertEqual((got["state"], got["vmid"], got["owner"], got["vcpus"], got["memory_bytes"]),
                         ("bound", VMID, "nodeclaim/5f0c-uid/claim-a", 1, 64 * MIB))
        self.assertEqual(got["vcpu_map"], r["vcpu_map"])
        self.assertTrue(os.path.exists(self.state), "the rebuilt ledger is saved")
        # Its CPU is not offered again: a new reservation gets another one.
        status, offer = self.client.request("POST", "/v1/offers", {"shapes": [{"vcpus": 1, "memory_bytes": MIB * 64}]})
        self.assertEqual(status, 200, offer)
        self.assertNotIn(str(r["vcpu_map"][0]), offer["offers"][0]["placement"]["cpus"].split(","))
        status, other = self.client.request("POST", "/v1/reservations", {
            "vcpus": 1, "memory_bytes": 64 * MIB, "ttl_seconds": 300, "owner": "nodeclaim/other/claim-b"})
        self.assertEqual(status, 201, other)
        self.assertNotEqual(other["vcpu_map"], r["vcpu_map"])
        self.agent.stop()
        self.assertIn("rebuilt 1 bound reservations", "".join(self.agent.lines))


if __name__ == "__main__":
    unittest.main()
