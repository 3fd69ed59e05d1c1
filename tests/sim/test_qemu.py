#!/usr/bin/env python3
# Tests of the VM processes: the stand-ins (compiled and Python) and, with --qemu, real tiny QEMU processes, each
# with vCPU threads, a pid file and a QMP socket.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import shutil
import signal
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import read  # noqa: E402


def qmp(path, cmd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    f = s.makefile("rwb")
    json.loads(f.readline())
    for c in ({"execute": "qmp_capabilities"}, {"execute": cmd}):
        f.write(json.dumps(c).encode() + b"\n")
        f.flush()
        while True:
            msg = json.loads(f.readline())
            if "return" in msg or "error" in msg:
                break
    s.close()
    return msg


@unittest.skipUnless(shutil.which("qemu-system-x86_64"), "qemu-system-x86_64 not installed")
class QemuTest(unittest.TestCase):
    def test_real_qemu_vm(self):
        sim = simtest.Sim(kube="none", hosts="pve1=32intel64-2p8co2t+8ve", qemu=True)
        try:
            sim.clone(101, "qemu-vm")
            sim.pve("PUT", "/nodes/pve1/qemu/101/config", {"cores": 2})
            st = sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/start").data, timeout=60)
            self.assertEqual(st["exitstatus"], "OK", sim.logtext())
            run = sim.ep["hosts"]["pve1"]["pve_run_dir"]
            pid = int(read(os.path.join(run, "101.pid")))
            argv = read("/proc/%d/cmdline" % pid, "rb").split(b"\0")
            self.assertTrue(os.path.basename(argv[0]).startswith(b"qemu-system"))
            self.assertIn(os.path.join(run, "101.pid").encode(), argv)
            names = [read("/proc/%d/task/%s/comm" % (pid, t)).strip() for t in os.listdir("/proc/%d/task" % pid)]
            vcpus = sorted(n for n in names if n.startswith("CPU "))
            self.assertEqual(len(vcpus), 2, names)
            self.assertTrue(all(n.endswith("/KVM") or n.endswith("/TCG") for n in vcpus), vcpus)
            res = qmp(os.path.join(run, "101.qmp"), "query-cpus-fast")
            self.assertEqual(sorted(c["cpu-index"] for c in res["return"]), [0, 1])
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/stop").data)
            self.assertFalse(os.path.exists(os.path.join(run, "101.pid")))
            simtest.wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10, what="QEMU exit")
            # a running QEMU is killed on SIGTERM of the simulator
            sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/start").data, timeout=60)
            pid = int(read(os.path.join(run, "101.pid")))
        finally:
            sim.stop()
        simtest.wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10, what="QEMU killed at shutdown")


class StandinTest(unittest.TestCase):
    """Both stand-ins look to an agent like Proxmox's kvm: argv, vCPU thread names, QMP answers with those threads'
    ids. They die with the simulator, even when it is killed with SIGKILL."""

    def check_standin(self, kind):
        sim = simtest.Sim(kube="none", hosts="pve1=32intel64-2p8co2t+8ve", standin=kind)
        try:
            sim.clone(101, "standin-vm")
            sim.pve("PUT", "/nodes/pve1/qemu/101/config", {"cores": 3})
            st = sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/101/status/start").data)
            self.assertEqual(st["exitstatus"], "OK", sim.logtext())
            run = sim.ep["hosts"]["pve1"]["pve_run_dir"]
            pid = int(read(os.path.join(run, "101.pid")))
            argv = read("/proc/%d/cmdline" % pid, "rb").split(b"\0")
            self.assertEqual(os.path.basename(argv[0]), b"kvm")
            self.assertEqual((b"-S" in argv), kind == "python", argv)
            self.assertEqual(argv[argv.index(b"-id") + 1], b"101")
            tids = {}
            for t in os.listdir("/proc/%d/task" % pid):
                tids[read("/proc/%d/task/%s/comm" % (pid, t)).strip()] = int(t)
            vcpus = {n: t for n, t in tids.items() if n.startswith("CPU ")}
            self.assertEqual(sorted(vcpus), ["CPU 0/KVM", "CPU 1/KVM", "CPU 2/KVM"])
            res = qmp(os.path.join(run, "101.qmp"), "query-cpus-fast")["return"]
            self.assertEqual({c["cpu-index"]: c["thread-id"] for c in res},
                             {i: vcpus["CPU %d/KVM" % i] for i in range(3)})
            self.assertEqual(qmp(os.path.join(run, "101.qmp"), "query-status")["return"]["status"], "running")
            self.assertEqual(qmp(os.path.join(run, "101.qmp"), "no-such-command")["error"]["class"],
                             "CommandNotFound")
            sim.proc.send_signal(signal.SIGKILL)
            sim.proc.wait()
            simtest.wait_for(lambda: not os.path.exists("/proc/%d" % pid) or
                             read("/proc/%d/stat" % pid).split(")")[1].split()[0] == "Z", 10,
                             what="stand-in killed with the simulator")
        finally:
            sim.stop()

    @unittest.skipUnless(simtest.compiled_standin(), "the build's tests/sim/standin-kvm not found")
    def test_compiled_standin(self):
        self.check_standin("compiled")

    def test_python_standin(self):
        self.check_standin("python")


if __name__ == "__main__":
    unittest.main()
