# Simulated Proxmox hosts on disk: VM config files, pid files and the VM processes behind them.
# SPDX-License-Identifier: Apache-2.0
import hashlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

from . import util

HERE = os.path.dirname(os.path.abspath(__file__))


def _encode_descr(line):
    return re.sub(r"[\x00-\x1f\x7f%:]", lambda m: "%%%02X" % ord(m.group(0)), line)


def _decode_descr(line):
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), line)


def format_conf(conf, pending=None, pending_delete=None, sections=None):
    """Proxmox qemu-server file format: description comments, sorted `key: value`, [sections]."""
    out = []
    descr = conf.get("description")
    if descr is not None:
        lines = str(descr).split("\n") if descr else [""]
        out.extend("#" + _encode_descr(l) for l in lines)
    for k in sorted(conf):
        if k == "description":
            continue
        out.append("%s: %s" % (k, conf[k]))
    if pending or pending_delete:
        out.append("")
        out.append("[PENDING]")
        for k in sorted(pending or {}):
            out.append("%s: %s" % (k, pending[k]))
        if pending_delete:
            out.append("delete: %s" % ",".join(pending_delete))
    for name, sec in (sections or {}).items():
        out.append("")
        out.append("[%s]" % name)
        for k in sorted(sec):
            out.append("%s: %s" % (k, sec[k]))
    return "\n".join(out) + "\n"


def parse_conf(text):
    """Inverse of format_conf: returns (main, pending, pending_delete, sections)."""
    main, pending, pdel, sections = {}, {}, [], {}
    cur = main
    descr = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\[([^\]]+)\]\s*$", line)
        if m:
            name = m.group(1)
            cur = pending if name == "PENDING" else sections.setdefault(name, {})
            continue
        if line.startswith("#") and cur is main:
            descr.append(_decode_descr(line[1:]))
            continue
        m = re.match(r"^([a-z][a-z_\-0-9]*):\s*(.*?)\s*$", line, re.I)
        if m:
            if cur is pending and m.group(1) == "delete":
                pdel = [x for x in m.group(2).split(",") if x]
            else:
                cur[m.group(1)] = m.group(2)
    if descr:
        main["description"] = "\n".join(descr)
    return main, pending, pdel, sections


class VM:
    def __init__(self, host, vmid, conf=None):
        self.host = host
        self.vmid = int(vmid)
        self.conf = dict(conf or {})
        self.pending = {}
        self.pending_delete = []
        self.sections = {}
        self.status = "stopped"
        self.pid = None
        self.proc = None
        self.started_at = None
        self.created_at = time.time()
        self.incarnation = uuid.uuid4().hex
        self.uid = uuid.uuid4().hex
        self.firewall_options = {}
        self.firewall_rules = []
        self.deleted = False
        self.stopping = False
        self.history = {"created": time.time(), "started": [], "stopped": [], "deleted": None}
        self.last_pinning = None

    @property
    def conf_path(self):
        return os.path.join(self.host.conf_dir, "%d.conf" % self.vmid)

    @property
    def pid_path(self):
        return os.path.join(self.host.run_dir, "%d.pid" % self.vmid)

    def text(self):
        return format_conf(self.conf, self.pending, self.pending_delete, self.sections)

    def digest(self):
        return hashlib.sha1(self.text().encode()).hexdigest()

    def save(self):
        util.atomic_write(self.conf_path, self.text(), 0o640)

    def remove_file(self):
        try:
            os.unlink(self.conf_path)
        except FileNotFoundError:
            pass

    def name(self):
        return self.conf.get("name") or "VM %d" % self.vmid

    def is_template(self):
        return str(self.conf.get("template", "0")) == "1"

    def memory_mib(self):
        m = self.conf.get("memory", "512")
        mm = re.search(r"(?:^|,)(?:current=)?(\d+)(?:,|$)", str(m))
        return int(mm.group(1)) if mm else 512

    def vcpus(self):
        cores = int(self.conf.get("cores", 1))
        sockets = int(self.conf.get("sockets", 1))
        v = int(self.conf.get("vcpus", 0) or 0)
        return v if v else cores * sockets


class Host:
    def __init__(self, name, region, root, topo):
        self.name = name
        self.region = region
        self.root = root
        self.topo = topo
        self.conf_dir = os.path.join(root, "etc", "pve", "qemu-server")
        self.run_dir = os.path.join(root, "var", "run", "qemu-server")
        # LXC containers: the simulator serves none; a test may write <vmid>.conf here (and a running one's
        # <vmid>/cgroup.events under lxc_cgroup_dir) for the agent to count
        self.lxc_dir = os.path.join(root, "etc", "pve", "lxc")
        self.lxc_cgroup_dir = os.path.join(root, "sys", "fs", "cgroup", "lxc")
        self.iso_dir = os.path.join(root, "var", "lib", "vz", "template", "iso")
        self.images_dir = os.path.join(root, "var", "lib", "vz", "images")
        self.down = False
        self.started = time.time()
        self.config_locks = {}  # vmid -> lock: qemu-server's flock of /var/lock/qemu-server/lock-<vmid>.conf
        self._config_locks_mu = threading.Lock()
        for d in (os.path.join(root, "etc", "pve", "nodes", name, "qemu-server"), self.run_dir,
                  os.path.join(root, "etc", "pve", "nodes", name, "lxc"), self.lxc_cgroup_dir,
                  self.iso_dir, self.images_dir, os.path.join(root, "var", "log", "pve", "tasks")):
            os.makedirs(d, exist_ok=True)
        for link, kind in ((self.conf_dir, "qemu-server"), (self.lxc_dir, "lxc")):
            if not os.path.islink(link) and not os.path.exists(link):
                os.symlink(os.path.join("nodes", name, kind), link)

    def config_lock(self, vmid):
        """The VMID's config lock on this host; it outlives the VM (the lock file stays after a destroy)."""
        with self._config_locks_mu:
            return self.config_locks.setdefault(int(vmid), threading.Lock())

    def endpoint_entry(self):
        e = {"region": self.region, "root": self.root, "pve_config_dir": self.conf_dir,
             "pve_run_dir": self.run_dir, "iso_dir": self.iso_dir, "topology": self.topo.name,
             "pve_lxc_dir": self.lxc_dir, "lxc_cgroup_dir": self.lxc_cgroup_dir,
             "corosync_conf": os.path.join(self.root, "etc", "pve", "corosync.conf"),
             "ip": "127.0.0.1"}
        if self.topo.fsroot:
            e["fsroot"] = self.topo.fsroot
        if self.topo.xml:
            e["topology_xml"] = self.topo.xml
        return e


class ProcessManager:
    """Starts/stops the VM processes from one long-lived thread (PDEATHSIG follows the thread)."""

    def __init__(self, state_dir, use_qemu=False, standin=None):
        """standin: the compiled stand-in (about 1 ms of CPU to start); without it, the Python one (about 40 ms)."""
        self.use_qemu = use_qemu
        self.bin_dir = os.path.join(state_dir, "bin")
        os.makedirs(self.bin_dir, exist_ok=True)
        self.kvm = os.path.join(self.bin_dir, "kvm")
        if os.path.lexists(self.kvm):
            os.unlink(self.kvm)
        os.symlink(os.path.realpath(standin or sys.executable), self.kvm)
        self.script = [] if standin else ["-S", os.path.join(HERE, "standin_kvm.py")]
        self.q = queue.Queue()
        self.pids = {}  # pid -> Popen or None (daemonized)
        self.lock = threading.Lock()
        self.accel = None
        self.thread = threading.Thread(target=self._loop, name="spawner", daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            fn, box, ev = self.q.get()
            try:
                box["result"] = fn()
            except Exception as e:  # reported to the caller
                box["error"] = e
            ev.set()

    def _call(self, fn):
        box, ev = {}, threading.Event()
        self.q.put((fn, box, ev))
        ev.wait()
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _qemu_accel(self):
        if self.accel is None:
            ok = os.access("/dev/kvm", os.R_OK | os.W_OK)
            self.accel = "kvm" if ok else "tcg"
        return self.accel

    def start(self, vm):
        """Launch the VM process and wait for its pid file. Returns the pid."""
        return self._call(lambda: self._start(vm))

    def _start(self, vm):
        run = vm.host.run_dir
        pidf = vm.pid_path
        qmp = os.path.join(run, "%d.qmp" % vm.vmid)
        for p in (pidf, qmp):
            if os.path.exists(p):
                os.unlink(p)
        n = vm.vcpus()
        name = "%s,debug-threads=on" % (vm.conf.get("name") or "vm%d" % vm.vmid)
        if self.use_qemu:
            accel = self._qemu_accel()
            args = ["qemu-system-x86_64", "-name", "guest=vm%d,debug-threads=on" % vm.vmid,
                    "-smp", str(n), "-m", "64", "-nodefaults", "-display", "none",
                    "-accel", accel, "-qmp", "unix:%s,server=on,wait=off" % qmp,
                    "-pidfile", pidf, "-daemonize"]
            r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            if r.returncode != 0 and accel == "kvm":
                self.accel = "tcg"
                args[args.index("-accel") + 1] = "tcg"
                r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            if r.returncode != 0:
                raise RuntimeError("start failed: QEMU exited with code %d: %s" % (
                    r.returncode, r.stderr.decode(errors="replace").strip()))
            pid = int(open(pidf).read().strip())
            with self.lock:
                self.pids[pid] = None
            return pid
        args = [self.kvm] + self.script + ["-id", str(vm.vmid), "-name", name,
                "-no-shutdown", "-chardev", "socket,id=qmp,path=%s,server=on,wait=off" % qmp,
                "-mon", "chardev=qmp,mode=control", "-pidfile", pidf, "-daemonize",
                "-smp", "%d,sockets=%s,cores=%s,maxcpus=%d" % (n, vm.conf.get("sockets", 1),
                                                               vm.conf.get("cores", 1), n),
                "-m", str(vm.memory_mib())]
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
        with self.lock:
            self.pids[p.pid] = p
        deadline = time.time() + 10
        while time.time() < deadline:
            if os.path.exists(pidf):
                return p.pid
            if p.poll() is not None:
                raise RuntimeError("start failed: stand-in exited with code %s" % p.returncode)
            time.sleep(0.005)
        self._kill(p.pid)
        raise RuntimeError("start failed: timeout waiting for pid file")

    def alive(self, pid):
        with self.lock:
            p = self.pids.get(pid)
        if p is not None:
            return p.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def _kill(self, pid, timeout=5.0):
        with self.lock:
            p = self.pids.pop(pid, None)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.time() + timeout
        while time.time() < deadline:
            if p is not None:
                if p.poll() is not None:
                    return
            elif not self.alive(pid):
                return
            time.sleep(0.01)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if p is not None:
            p.wait()

    def stop(self, vm, pid):
        if pid:
            self._kill(pid)
        for suffix in ("pid", "qmp"):
            try:
                os.unlink(os.path.join(vm.host.run_dir, "%d.%s" % (vm.vmid, suffix)))
            except FileNotFoundError:
                pass

    def kill_all(self):
        with self.lock:
            pids = list(self.pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 3
        for pid in pids:
            while time.time() < deadline and self.alive(pid):
                time.sleep(0.01)
            if self.alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        with self.lock:
            for pid in pids:
                p = self.pids.pop(pid, None)
                if p is not None:
                    try:
                        p.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        pass


def thread_pinning(pid):
    """{vcpu index: [cpus]} read from the vCPU threads' affinity masks."""
    res = {}
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    comm = f.read().strip()
            except OSError:
                continue
            m = re.match(r"^CPU (\d+)/(KVM|TCG)$", comm)
            if m:
                res[int(m.group(1))] = sorted(os.sched_getaffinity(int(tid)))
    except OSError:
        pass
    return res
