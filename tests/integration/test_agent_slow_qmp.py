"""Integration test: a QEMU whose QMP socket answers slowly never holds up the agent's API. A fake QEMU (a Python
process named kvm with "CPU n/KVM" threads and a QMP socket that greets after 1.5 s) is bound to a reservation;
while the agent's QMP talk with it is still going, API requests must be answered at once, and the VM must still
end up pinned (through /proc once QMP timed out; through QMP when it answers in time)."""
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
QMP_TIMEOUT_S = 1.0  # PINNING_QMP_TIMEOUT_MS
FAST_ENOUGH_S = 0.5  # an API answer that did not wait for QEMU

# The fake QEMU, run as `<tmp>/kvm -c FAKE_QEMU -id <vmid> <run dir> <greeting delay s>` (argv[0] kvm and -id <vmid>
# are how the inventory recognises a VM's QEMU).
# It logs "connect <monotonic s>" and "answered <monotonic s>" lines to <run dir>/qmp.log.
FAKE_QEMU = r'''
import ctypes, json, os, socket, sys, threading, time
vmid, run_dir, delay = sys.argv[2], sys.argv[3], float(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
tids, named = [], threading.Barrier(3)

def vcpu(n):
    libc.prctl(15, ("CPU %d/KVM" % n).encode())  # PR_SET_NAME, as QEMU's debug-threads=on names vCPU threads
    tids.append((n, threading.get_native_id()))
    named.wait()
    while True:
        time.sleep(3600)

def log(what):
    with open(os.path.join(run_dir, "qmp.log"), "a") as f:
        f.write("%s %f\n" % (what, time.monotonic()))

def serve(conn):
    log("connect")
    time.sleep(delay)
    try:
        f = conn.makefile("rwb")
        f.write(b'{"QMP": {"version": {}, "capabilities": []}}\r\n')
        f.flush()
        for line in f:
            cmd = json.loads(line)["execute"]
            ret = [{"cpu-index": n, "thread-id": t} for n, t in sorted(tids)] if cmd == "query-cpus-fast" else {}
            f.write(json.dumps({"return": ret}).encode() + b"\r\n")
            f.flush()
            if cmd == "query-cpus-fast":
                log("answered")
    except OSError:
        pass  # the agent gave up waiting and closed the connection
    conn.close()

for n in range(2):
    threading.Thread(target=vcpu, args=(n,), daemon=True).start()
named.wait()
srv = socket.socket(socket.AF_UNIX)
srv.bind(os.path.join(run_dir, vmid + ".qmp"))
srv.listen(4)
with open(os.path.join(run_dir, "pid.tmp"), "w") as f:
    f.write("%d\n" % os.getpid())
os.rename(os.path.join(run_dir, "pid.tmp"), os.path.join(run_dir, vmid + ".pid"))
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


def affinity(pid):
    """{thread name: set of CPUs} of every thread of pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                out[f.read().strip()] = os.sched_getaffinity(int(tid))
        except OSError:
            pass
    return out


@unittest.skipUnless({0, 1} <= os.sched_getaffinity(0), "needs host CPUs 0 and 1")
class SlowQmpTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-slowqmp-")
        self.ca, cert, key = agentlib.make_tls(self.tmp)
        token_file, token = agentlib.write_token(self.tmp)
        self.conf_dir, self.run_dir = os.path.join(self.tmp, "qemu-server"), os.path.join(self.tmp, "run")
        os.makedirs(self.conf_dir)
        os.makedirs(self.run_dir)
        self.qemu = None
        # The real host is the topology here (the fake QEMU's threads are really pinned).
        self.agent = agentlib.Agent(["--config", os.devnull, "--tls-cert", cert, "--tls-key", key,
                                     "--token-file", token_file, "--pve-config-dir", self.conf_dir,
                                     "--pve-run-dir", self.run_dir, "--state-dir", self.tmp,
                                     "--node-policy", "static", "--pin-interval", "3600"])
        self.client = Client(self.agent.port, self.ca, token)

    def tearDown(self):
        if self.qemu:
            self.qemu.kill()
            self.qemu.wait()
        if not self.agent.proc.stdout.closed:
            self.agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_fake_qemu(self, greeting_delay_s):
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write("name: vm%d\ncores: 2\nsockets: 1\nmemory: 64\n" % VMID)
        kvm = os.path.join(self.tmp, "kvm")  # argv[0] "kvm" through a symlink, so Python still finds its library
        os.symlink(sys.executable, kvm)
        self.qemu = subprocess.Popen([kvm, "-c", FAKE_QEMU, "-id", str(VMID), self.run_dir, str(greeting_delay_s)])
        self.wait_for(lambda: os.path.exists(os.path.join(self.run_dir, "%d.pid" % VMID)), 10, "the fake QEMU")

    def agent_log(self):
        """Stop the agent and return what it logged."""
        self.agent.stop()
        return "".join(self.agent.lines)

    def wait_for(self, cond, within, what):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.01)
        self.fail("%s: not within %.1f s" % (what, within))

    def qmp_log(self, what):
        """Monotonic times of the fake QEMU's log lines `what`."""
        try:
            with open(os.path.join(self.run_dir, "qmp.log")) as f:
                return [float(line.split()[1]) for line in f if line.split()[0] == what]
        except OSError:
            return []

    def reserve_and_bind(self, greeting_delay_s):
        status, r = self.client.request("POST", "/v1/reservations", {
            "vcpus": 2, "memory_bytes": 64 << 20, "ttl_seconds": 300, "owner": "nodeclaim/slow-qmp"})
        self.assertEqual(status, 201, r)
        self.start_fake_qemu(greeting_delay_s)
        start = time.monotonic()
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": VMID})
        self.assertEqual(status, 200, body)
        took = time.monotonic() - start
        self.assertLess(took, FAST_ENOUGH_S, "bind waited %.2f s for the pinning it starts" % took)
        return r["vcpu_map"]

    def wait_pinned(self, vcpu_map):
        want = {"CPU %d/KVM" % n: {cpu} for n, cpu in enumerate(vcpu_map)}
        self.wait_for(lambda: all(affinity(self.qemu.pid).get(k) == v for k, v in want.items()), 5,
                      "vCPU threads on %s (have %s)" % (vcpu_map, affinity(self.qemu.pid)))
        status, vm = self.client.request("GET", "/v1/vms/%d" % VMID)
        self.assertEqual(status, 200, vm)
        self.assertEqual(vm["pinning"]["drift"], 0, vm["pinning"])

    def test_api_answers_while_qmp_is_slow(self):
        vcpu_map = self.reserve_and_bind(greeting_delay_s=1.5)
        connected = self.wait_for(lambda: self.qmp_log("connect"), 5, "the agent asking QMP")[0]
        for method, path, body in (("GET", "/v1/capacity", None), ("GET", "/v1/reservations", None),
                                   ("POST", "/v1/offers", {"shapes": [{"vcpus": 1, "memory_bytes": 64 << 20}]}),
                                   ("GET", "/healthz", None)):
            start = time.monotonic()
            status, doc = self.client.request(method, path, body)
            took = time.monotonic() - start
            self.assertEqual(status, 200, doc)
            self.assertLess(took, FAST_ENOUGH_S, "%s %s waited %.2f s for QEMU" % (method, path, took))
        self.assertLess(time.monotonic() - connected, QMP_TIMEOUT_S, "the QMP talk was over before the requests")
        # QMP times out (the greeting comes too late): the threads come from /proc and the VM is pinned.
        self.wait_pinned(vcpu_map)
        self.assertIn("pinned VM %d: 2 vCPU threads (/proc)" % VMID, self.agent_log())

    def test_quick_qmp_answer_pins(self):
        vcpu_map = self.reserve_and_bind(greeting_delay_s=0)
        self.wait_pinned(vcpu_map)
        self.assertTrue(self.qmp_log("answered"))
        self.assertIn("pinned VM %d: 2 vCPU threads (QMP)" % VMID, self.agent_log())


if __name__ == "__main__":
    unittest.main(verbosity=2)
