"""Integration test: a real agent pins a real QEMU after reserve + bind, and pins it again by itself when QEMU
restarts (inotify on the run dir), with no API call."""
# SPDX-License-Identifier: Apache-2.0
import http.client
import json
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
TCG = ["-accel", "tcg,thread=multi"]


def qemu_accel():
    """KVM when /dev/kvm opens, else multi-threaded TCG (one thread per vCPU). KVM keeps QEMU's default CPU model:
    some nested hosts refuse the host model's MSRs (QEMU aborts with "failed to set MSR 0x10a")."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
        os.close(fd)
        return ["-accel", "kvm"]
    except OSError:
        return TCG


def thread_affinity(pid):
    """{thread name: Cpus_allowed_list} for every thread of pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                cpus = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue
        out.setdefault(name, []).append(cpus)
    return out


@unittest.skipUnless(shutil.which("qemu-system-x86_64"), "qemu-system-x86_64 missing")
@unittest.skipUnless(os.cpu_count() and os.cpu_count() >= 2 and os.geteuid() == 0, "needs 2 CPUs and root")
class PinningEndToEndTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-pin-")
        self.ca, cert, key = agentlib.make_tls(self.tmp)
        token_file, token = agentlib.write_token(self.tmp)
        self.conf_dir, self.run_dir = os.path.join(self.tmp, "qemu-server"), os.path.join(self.tmp, "run")
        os.makedirs(self.conf_dir)
        os.makedirs(self.run_dir)
        self.qemu_pid = None
        # The real host is the topology here: no --fsroot.
        self.agent_args = (["--config", os.devnull, "--tls-cert", cert, "--tls-key", key,
                                     "--token-file", token_file, "--pve-config-dir", self.conf_dir,
                                     "--pve-run-dir", self.run_dir, "--state-dir", self.tmp,
                                     "--node-policy", "static", "--pin-interval", "3600"])
        self.agent = agentlib.Agent(self.agent_args)
        self.client = Client(self.agent.port, self.ca, token)

    def tearDown(self):
        self.kill_qemu()
        self.agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_qemu(self, extra=()):
        pidfile = os.path.join(self.run_dir, "%d.pid" % VMID)
        accel = qemu_accel()

        def run(how):
            return subprocess.run(["qemu-system-x86_64", "-name", "guest=vm%d,debug-threads=on" % VMID] + how + [
                                  "-smp", "2", "-m", "64", "-nodefaults", "-display", "none",
                                  "-qmp", "unix:%s/%d.qmp,server=on,wait=off" % (self.run_dir, VMID),
                                  "-pidfile", pidfile, "-daemonize"] + list(extra), timeout=30,
                                  capture_output=True, text=True)
        r = run(accel)
        if r.returncode != 0 and accel != TCG:  # /dev/kvm opens but KVM does not run this guest: as the simulator
            r = run(TCG)
        self.qemu_stderr = r.stderr
        if extra and r.returncode != 0:
            return None
        self.assertEqual(r.returncode, 0, "qemu-system-x86_64 did not start: " + r.stderr)
        with open(pidfile) as f:
            self.qemu_pid = int(f.read())
        return self.qemu_pid

    def kill_qemu(self):
        if self.qemu_pid:
            try:
                os.kill(self.qemu_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for _ in range(100):
                if not os.path.exists("/proc/%d" % self.qemu_pid):
                    break
                time.sleep(0.02)
            self.qemu_pid = None

    def wait_pinned(self, pid, vcpu_map, within):
        """True when every CPU n/KVM thread sits exactly on vcpu_map[n] and the rest on the VM's set."""
        want_all = ",".join(str(c) for c in sorted(set(vcpu_map)))
        deadline = time.time() + within
        while time.time() < deadline:
            aff = thread_affinity(pid)
            vcpus_ok = all(aff.get("CPU %d/KVM" % n, aff.get("CPU %d/TCG" % n)) == [str(cpu)]
                           for n, cpu in enumerate(vcpu_map))
            others = [c for name, cs in aff.items() if not name.startswith("CPU ") for c in cs]
            if vcpus_ok and all(c == want_all or c == _range(vcpu_map) for c in others):
                return True
            time.sleep(0.05)
        self.fail("not pinned within %.1f s: %s" % (within, json.dumps(thread_affinity(pid))))

    def pin_metrics(self):
        """(vms_to_pin, pinned_vms, affinity_drift_threads) from the agent's /metrics."""
        conn = http.client.HTTPSConnection("localhost", self.agent.port, context=self.client.ctx, timeout=30)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        values = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith("pvescale_agent_"))
        return tuple(int(float(values["pvescale_agent_" + k])) for k in ("vms_to_pin", "pinned_vms",
                                                                          "affinity_drift_threads"))

    def test_reserve_bind_pins_and_restart_repins(self):
        status, r = self.client.request("POST", "/v1/reservations", {
            "vcpus": 2, "memory_bytes": 64 << 20, "ttl_seconds": 300, "owner": "nodeclaim/e2e"})
        self.assertEqual(status, 201, r)
        vcpu_map = r["vcpu_map"]
        self.assertEqual(sorted(vcpu_map), [0, 1])
        # As the coordinator does: the VM config appears (clone), then QEMU starts, then bind.
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write("name: vm%d\ncores: 2\nsockets: 1\nmemory: 64\n" % VMID)
        pid = self.start_qemu()
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": VMID})
        self.assertEqual(status, 200, body)
        self.wait_pinned(pid, vcpu_map, within=5)
        status, vm = self.client.request("GET", "/v1/vms/%d" % VMID)
        self.assertEqual(status, 200)
        self.assertTrue(vm["running"])
        self.assertEqual(vm["pinning"]["drift"], 0, vm["pinning"])
        self.assertEqual(vm["reservation"]["id"], r["id"])
        self.assertEqual(self.pin_metrics(), (1, 1, 0))
        # Restart QEMU behind the agent's back: it must pin the new process by itself within 2 s.
        self.kill_qemu()
        new_pid = self.start_qemu()
        self.assertNotEqual(new_pid, pid)
        self.wait_pinned(new_pid, vcpu_map, within=2)
        # For 2 s after it pins a new QEMU the agent checks it again every tick, because threads QEMU creates
        # as the guest starts running (KVM's NX huge page recovery worker) inherit their creator's mask: a
        # thread moved off its CPU now is put back without being asked (--pin-interval is an hour here).
        tid = next(t for t in os.listdir("/proc/%d/task" % new_pid)
                   if _read("/proc/%d/task/%s/comm" % (new_pid, t)).startswith("CPU 0/"))
        os.sched_setaffinity(int(tid), {0, 1})
        self.wait_pinned(new_pid, vcpu_map, within=1.5)
        # Once that window is over, a change by hand stays until asked: POST /v1/vms/{vmid}/pin repairs it and
        # reports what it did.
        time.sleep(2.5)
        os.sched_setaffinity(int(tid), {0, 1})
        time.sleep(0.6)
        # A scrape reads no /proc: the metrics say what the agent last looked at (the repair scan every
        # --pin-interval, an hour here), until GET /v1/vms/{vmid} reads the VM's threads.
        self.assertEqual(self.pin_metrics(), (1, 1, 0))
        status, vm = self.client.request("GET", "/v1/vms/%d" % VMID)
        self.assertEqual(vm["pinning"]["drift"], 1)
        self.assertEqual(self.pin_metrics(), (1, 0, 1))  # wanted, not pinned now: a thread is off its CPU
        status, report = self.client.request("POST", "/v1/vms/%d/pin" % VMID)
        self.assertEqual(status, 200, report)
        self.wait_pinned(new_pid, vcpu_map, within=1)
        self.assertEqual(self.pin_metrics(), (1, 1, 0))
        # kill -9 the agent, un-pin everything, start it again: it reloads the binding and pins at start.
        self.agent.stop(signal.SIGKILL)
        for t in os.listdir("/proc/%d/task" % new_pid):
            os.sched_setaffinity(int(t), {0, 1})
        self.agent = agentlib.Agent(self.agent_args)
        self.wait_pinned(new_pid, vcpu_map, within=2)

    def test_a_pin_that_keeps_failing_is_logged_once(self):
        """On a host described as 32 CPUs (a topology file) the placement takes CPUs this 2-CPU machine lacks, so every
        pinning run of the real QEMU fails the same way. With a repair every second, the failure is logged once at
        error level, and the runs after it only at debug (with how many failed in a row)."""
        self.agent.stop()
        args = list(self.agent_args)
        args[args.index("--pin-interval") + 1] = "1"
        args += ["--log-level", "debug"]
        self.agent = agentlib.Agent(agentlib.topology_args("32intel64-2p8co2t+8ve") + args)
        self.client = Client(self.agent.port, self.ca, self.client.token)
        status, r = self.client.request("POST", "/v1/reservations", {
            "vcpus": 2, "memory_bytes": 64 << 20, "ttl_seconds": 300, "owner": "nodeclaim/e2e"})
        self.assertEqual(status, 201, r)
        self.assertTrue(any(c >= os.cpu_count() for c in r["vcpu_map"]), r["vcpu_map"])
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write("name: vm%d\ncores: 2\nsockets: 1\nmemory: 64\n" % VMID)
        self.start_qemu()
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": VMID})
        self.assertEqual(status, 200, body)
        time.sleep(4.5)  # four or more repair runs, each failing for the same cause
        self.agent.stop()
        text = "".join(self.agent.lines)
        failures = [line for line in text.splitlines() if "VM %d" % VMID in line and
                    ("cannot pin" in line or "threads failed" in line)]
        errors = [line for line in failures if ": error: " in line]
        self.assertEqual(len(errors), 1, text[-3000:])
        self.assertNotIn("runs in a row", errors[0])
        repeats = [line for line in failures if ": debug: " in line and "runs in a row; logged again" in line]
        self.assertGreaterEqual(len(repeats), 3, text[-3000:])


    def vhost_threads(self, pid):
        """{tid: Cpus_allowed_list} of the vhost workers serving QEMU pid: its tasks named vhost-<pid> (Linux
        6.4 and later) or kernel threads of that name outside the process (older kernels)."""
        out = {}
        tasks = set(os.listdir("/proc/%d/task" % pid))
        candidates = [("/proc/%d/task/%s" % (pid, t), t) for t in tasks]
        candidates += [("/proc/%s" % p, p) for p in os.listdir("/proc") if p.isdigit() and p not in tasks]
        for path, tid in candidates:
            try:
                name = _read(path + "/comm").strip()
                if not name.startswith("vhost-") or name[6:] not in tasks:
                    continue
                out[int(tid)] = next(line.split(":", 1)[1].strip() for line in _read(path + "/status").splitlines()
                                     if line.startswith("Cpus_allowed_list"))
            except (OSError, StopIteration):
                continue
        return out

    def test_vhost_threads_follow_the_vm(self):
        """A pinned VM with a vhost-net NIC: its vhost worker threads sit on the VM's CPUs (issue 32)."""
        if not os.path.exists("/dev/vhost-net"):
            self.skipTest("no /dev/vhost-net on this machine (kernel without CONFIG_VHOST_NET, or vhost_net not "
                          "loaded): there are no vhost-net threads to check")
        status, r = self.client.request("POST", "/v1/reservations", {
            "vcpus": 2, "memory_bytes": 64 << 20, "ttl_seconds": 300, "owner": "nodeclaim/e2e"})
        self.assertEqual(status, 201, r)
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write("name: vm%d\ncores: 2\nsockets: 1\nmemory: 64\nnet0: virtio=BC:24:11:00:00:01,bridge=none\n" % VMID)
        pid = self.start_qemu(["-netdev", "tap,id=n0,ifname=pvstap%d,script=no,downscript=no,vhost=on" % VMID,
                               "-device", "virtio-net-pci,netdev=n0"])
        if pid is None:
            self.skipTest("QEMU cannot open a tap device with vhost=on here: " + self.qemu_stderr.strip()[:300])
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": VMID})
        self.assertEqual(status, 200, body)
        self.wait_pinned(pid, r["vcpu_map"], within=5)
        vhost = self.vhost_threads(pid)
        self.assertTrue(vhost, "no vhost-%d worker found: %s" % (pid, json.dumps(thread_affinity(pid))))
        want = {_range(r["vcpu_map"]), ",".join(str(c) for c in sorted(set(r["vcpu_map"])))}
        for tid, cpus in vhost.items():
            self.assertIn(cpus, want, "vhost worker %d is on %s, the VM on %s" % (tid, cpus, r["cpus"]))


def _read(path):
    with open(path) as f:
        return f.read()


def _range(cpus):
    lo, hi = min(cpus), max(cpus)
    return "%d-%d" % (lo, hi) if hi == lo + 1 or len(set(cpus)) == hi - lo + 1 else ",".join(map(str, sorted(cpus)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
