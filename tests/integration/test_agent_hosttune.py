"""Integration test: a real agent sets cpufreq governors and IRQ affinity in a writable copy of a captured sysfs
tree as a VM starts and stops, shows them in /metrics (promtool-clean) and /v1/capacity, and writes the originals
back when it stops, or at its next start after it was killed."""
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

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402

TOPOLOGY = "32intel64-2p8co2t+8ve"  # CPUs 0-31, SMT siblings n and n+16
TOKEN = "hosttune-test-token-0123456789"
VMID = 101
VM_CPUS = "4-5,20-21"
OTHERS = "0-3,6-19,22-31"  # every CPU but the VM's
STATE_FILE = "hosttune.json"


def cpu_path(root, cpu, name):
    return os.path.join(root, "sys/devices/system/cpu/cpu%d/cpufreq/%s" % (cpu, name))


def irq_path(root, irq):
    return os.path.join(root, "proc/irq/%d/smp_affinity_list" % irq)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


class HostTuneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = tempfile.mkdtemp(prefix="pvescale-hosttune-")
        cls.root = shutil.copytree(agentlib.topology_args(TOPOLOGY)[1], os.path.join(cls.base, "root"), symlinks=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.base, ignore_errors=True)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="case-", dir=self.base)
        self.ca, self.cert, self.key = agentlib.make_tls(self.tmp)
        self.token_file, _ = agentlib.write_token(self.tmp, TOKEN)
        self.conf_dir, self.run_dir, self.state_dir = (os.path.join(self.tmp, d) for d in ("conf", "run", "state"))
        for d in (self.conf_dir, self.run_dir, self.state_dir):
            os.makedirs(d)
        for cpu in range(32):
            write(cpu_path(self.root, cpu, "scaling_governor"), "schedutil")
            write(cpu_path(self.root, cpu, "energy_performance_preference"), "balance_performance")
        for irq in (40, 41):
            write(os.path.join(self.root, "sys/bus/pci/devices/0000:af:00.0/msi_irqs/%d" % irq), "msi")
        for irq, cpus in ((0, "0-31"), (9, "4"), (40, "0-31"), (41, "0-31")):
            write(irq_path(self.root, irq), cpus)
        self.settings = os.path.join(self.tmp, "nodes.json")
        with open(self.settings, "w") as f:
            json.dump({"default": {"*": {"reservedcpus": [0], "reservedmemory": 0}}}, f)
        with open(os.path.join(self.conf_dir, "%d.conf" % VMID), "w") as f:
            f.write("name: nic\ncores: 4\nmemory: 64\naffinity: %s\nhostpci0: af:00.0,pcie=1\n" % VM_CPUS)
        self.qemu = None
        self.agent = None

    def tearDown(self):
        self.stop_vm()
        if self.agent:
            self.agent.stop()

    def start_agent(self, tuning=True, extra=()):
        args = ["--config", os.devnull, "--fsroot", self.root, "--tls-cert", self.cert, "--tls-key", self.key,
                "--token-file", self.token_file, "--pve-config-dir", self.conf_dir, "--pve-run-dir", self.run_dir,
                "--state-dir", self.state_dir, "--node-setting-file", self.settings, "--region", "default",
                "--node-policy", "simple", "--rescan-interval", "1", "--pin-interval", "1"]
        if tuning:
            args += ["--cpu-governors", "true", "--irq-affinity", "true"]
        self.agent = agentlib.Agent(args + list(extra))

    def start_vm(self, vmid=VMID):
        """A stand-in QEMU: argv[0] kvm and -id <vmid> are how the inventory knows a VM's process."""
        kvm = os.path.join(self.tmp, "kvm")
        if not os.path.exists(kvm):
            os.symlink(sys.executable, kvm)
        self.qemu = subprocess.Popen([kvm, "-c", "import time; time.sleep(600)", "-id", str(vmid)])
        self.qemu_vmid = vmid
        write(os.path.join(self.run_dir, "%d.pid" % vmid), str(self.qemu.pid))

    def stop_vm(self):
        if self.qemu:
            self.qemu.kill()
            self.qemu.wait()
            self.qemu = None
            os.unlink(os.path.join(self.run_dir, "%d.pid" % self.qemu_vmid))

    def get(self, path, method="GET", body=None, want=200):
        status, text = agentlib.curl("https://127.0.0.1:%d%s" % (self.agent.port, path), ca=self.ca, token=TOKEN,
                                     method=method, body=None if body is None else json.dumps(body))
        self.assertEqual(status, want, text)
        return text

    def wait_for(self, cond, what, within=15):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.05)
        self.fail("%s: not within %d s\n%s" % (what, within, "".join(self.agent.lines) if self.agent else ""))

    def assert_originals(self):
        for cpu in range(32):
            self.assertEqual(read(cpu_path(self.root, cpu, "scaling_governor")), "schedutil", "cpu%d" % cpu)
            self.assertEqual(read(cpu_path(self.root, cpu, "energy_performance_preference")), "balance_performance")
        for irq, cpus in ((0, "0-31"), (9, "4"), (40, "0-31"), (41, "0-31")):
            self.assertEqual(read(irq_path(self.root, irq)), cpus, "irq %d" % irq)
        self.assertFalse(os.path.exists(os.path.join(self.state_dir, STATE_FILE)))

    def test_follow_the_vm_show_and_restore(self):
        self.start_vm()
        self.start_agent()
        gov = lambda cpu: read(cpu_path(self.root, cpu, "scaling_governor"))  # noqa: E731
        # IRQ 9 is the last file a sync writes (the VM's IRQs first, then the others in order).
        self.wait_for(lambda: gov(4) == "performance" and read(irq_path(self.root, 9)) == OTHERS,
                      "the VM's cores busy, its IRQs on its CPUs, the others off them")
        self.assertEqual([gov(c) for c in (4, 5, 20, 21)], ["performance"] * 4)
        self.assertEqual(read(cpu_path(self.root, 4, "energy_performance_preference")), "performance")
        self.assertEqual(gov(6), "powersave")
        self.assertEqual(read(cpu_path(self.root, 6, "energy_performance_preference")), "power")
        self.assertEqual(gov(0), "schedutil", "a CPU reserved for the host is left alone")
        self.assertEqual(read(irq_path(self.root, 40)), VM_CPUS)
        self.assertEqual(read(irq_path(self.root, 0)), OTHERS)
        self.assertEqual(read(irq_path(self.root, 9)), OTHERS)
        self.assertTrue(os.path.exists(os.path.join(self.state_dir, STATE_FILE)))

        metrics = self.get("/metrics")
        self.assertIn('pvescale_agent_cpu_governor{cpu="4",governor="performance"} 1\n', metrics)
        self.assertIn('pvescale_agent_cpu_governor{cpu="6",governor="powersave"} 1\n', metrics)
        self.assertIn('pvescale_agent_vm_irqs{vmid="%d"} 2\n' % VMID, metrics)
        self.assertIn("pvescale_agent_irqs_off_pinned_cpus 2\n", metrics)
        promtool = shutil.which("promtool")
        if promtool:
            p = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        tune = json.loads(self.get("/v1/capacity"))["host_tuning"]
        self.assertEqual(tune["vms"], [{"vmid": VMID, "cpus": VM_CPUS, "irqs": [40, 41]}])
        roles = {c["cpu"]: (c["governor"], c["role"]) for c in tune["cpus"]}
        self.assertEqual(roles[4], ("performance", "busy"))
        self.assertEqual(roles[0], ("schedutil", "reserved"))

        self.stop_vm()
        self.wait_for(lambda: gov(4) == "powersave" and read(irq_path(self.root, 40)) == "0-31",
                      "the stopped VM's cores free and its IRQs back")
        self.start_vm()
        self.wait_for(lambda: gov(4) == "performance", "the VM's cores busy again")
        self.assertEqual(self.agent.stop(), 0)
        self.assert_originals()

    def test_a_bound_reservation_makes_its_cores_busy(self):
        """A running VM with no affinity in its config has no known CPUs until a reservation is bound to it; the
        bind makes the reservation's cores busy within a tick, not at the next pin_interval (an hour here)."""
        with open(os.path.join(self.conf_dir, "102.conf"), "w") as f:
            f.write("name: plain\ncores: 2\nmemory: 64\n")
        self.start_vm(102)
        self.start_agent(extra=["--node-policy", "static", "--pin-interval", "3600"])
        gov = lambda cpu: read(cpu_path(self.root, cpu, "scaling_governor"))  # noqa: E731
        self.wait_for(lambda: gov(4) == "powersave", "every core free (VM 101 is stopped)")
        r = json.loads(self.get("/v1/reservations", "POST", {"vcpus": 2, "memory_bytes": 64 << 20,
                                                             "ttl_seconds": 300, "owner": "hosttune"}, 201))
        self.get("/v1/reservations/%s/bind" % r["id"], "POST", {"vmid": 102})
        cores = [int(c) for c in r["vcpu_map"]]
        self.wait_for(lambda: all(gov(c) == "performance" for c in cores), "the bound cores %s busy" % cores, 3)
        self.get("/v1/reservations/%s" % r["id"], "DELETE")
        self.wait_for(lambda: all(gov(c) == "powersave" for c in cores), "the released cores free", 3)

    def test_a_running_pinned_container_keeps_its_cores_busy(self):
        """A container pinned by lxc.cgroup2.cpuset.cpus runs on those cores: busy while its cgroup is populated,
        free once it stops; a floating container (cores: 2) marks no core."""
        lxc, cgroup = os.path.join(self.tmp, "lxc"), os.path.join(self.tmp, "cgroup-lxc")
        write(os.path.join(lxc, "301.conf"), "cores: 2\nmemory: 64\nlxc.cgroup2.cpuset.cpus: 10-11")
        write(os.path.join(lxc, "302.conf"), "cores: 2\nmemory: 64")
        for vmid in (301, 302):
            write(os.path.join(cgroup, str(vmid), "cgroup.events"), "populated 1\nfrozen 0")
        self.start_agent(extra=["--pve-lxc-dir", lxc, "--lxc-cgroup-dir", cgroup])
        gov = lambda cpu: read(cpu_path(self.root, cpu, "scaling_governor"))  # noqa: E731
        # One sync writes the CPUs one after another (each first noting its original in the state file): wait for
        # all of them, not for the container's cores alone.
        want = ["performance"] * 2 + ["powersave"] * 3
        self.wait_for(lambda: [gov(c) for c in (10, 11, 4, 9, 12)] == want,
                      "the container's cores busy, the others (the floating container's too) free")
        time.sleep(1.5)  # a later pass (the floating container counted on some core) would change them
        self.assertEqual([gov(c) for c in (10, 11, 4, 9, 12)], want)
        write(os.path.join(cgroup, "301", "cgroup.events"), "populated 0\nfrozen 0")
        self.wait_for(lambda: gov(10) == "powersave", "the stopped container's cores free")
        self.assertEqual(self.agent.stop(), 0)
        self.assert_originals()

    def test_killed_agent_is_undone_at_next_start(self):
        self.start_vm()
        self.start_agent()
        self.wait_for(lambda: read(cpu_path(self.root, 5, "scaling_governor")) == "performance" and
                      read(irq_path(self.root, 9)) == OTHERS, "the VM's cores busy and other IRQs off them")
        self.agent.stop(signal.SIGKILL)
        self.assertEqual(read(irq_path(self.root, 40)), VM_CPUS, "a killed agent restores nothing")
        self.start_agent(tuning=False)  # the features turned off meanwhile
        self.wait_for(lambda: not os.path.exists(os.path.join(self.state_dir, STATE_FILE)), "the state file removed")
        self.assert_originals()
        self.agent.stop()
        self.assertIn("a previous run left changed", "".join(self.agent.lines))


if __name__ == "__main__":
    unittest.main()
