# The simulator process: world model, admin/fault endpoint, scenarios, start-up and clean shutdown.
# SPDX-License-Identifier: Apache-2.0
import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

from . import hosts as hostsmod
from . import httpserv
from . import pve
from . import pveacl
from . import pveschema
from . import realkube
from . import report as reportmod
from . import tls
from . import topology
from . import util
from .kubelet import EXIT_ON_TERM

DEFAULT_HOSTS = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"

KNOBS = {
    # PVE timings
    "auth_delay_seconds": 3.0, "clone_seconds": 1.0, "clone_finish_seconds": 0.0, "create_seconds": 0.2,
    "destroy_seconds": 0.2, "stop_seconds": 0.0, "stop_cleanup_seconds": 0.0, "config_lock_timeout_seconds": 10.0,
    "start_seconds": 0.1, "shutdown_seconds": 0.2, "stats_delay_seconds": 1.0, "nextid_reserve_seconds": 30.0,
    # PVE faults
    "clone_fail_rate": 0.0, "clone_fail_next": 0, "clone_error_next": 0, "start_fail_next": 0, "upload_fail_next": 0,
    "destroy_fail_next": 0, "destroy_fail_rate": 0.0, "storage_full": [], "download_seconds": 0.0,
    "pve_error_rate": 0.0, "pve_timeout_rate": 0.0, "pve_error_next": 0, "pve_timeout_next": 0,
    "timeout_hold_seconds": 30.0,
    "hosts_down": [],
    # The fault proxy in front of kube-apiserver
    "watch_disconnect_seconds": 0.0, "kube_unreachable": False,
    # kubelets
    "join_delay_seconds": 1.0, "ready_delay_seconds": 1.0, "pod_start_seconds": 0.5, "pod_termination_seconds": 0.2,
    "lease_interval_seconds": 10.0, "never_join": [], "kubelet_reregister": False, "ccm_delete_nodes": False,
    "kubelet_not_ready": [], "kubelet_stopped": [], "register_hold": False, "register_ready": False,
    # kube-controller-manager's --node-monitor-grace-period and --node-monitor-period (at start only, --set)
    "node_monitor_grace_seconds": 50.0, "node_monitor_seconds": 0.0,
    # Delay profile and the delays only it (or --set) turns on (tests/sim/README.md "Delay profiles")
    "delays": "fast", "boot_seconds": 0.0, "full_clone_seconds_per_gib": 0.0, "storage_lock": False,
    "vmstate_write_seconds_per_gib": 0.0, "vmstate_read_seconds_per_gib": 0.0,
}

# `delays: realistic` (knob, --delays, scenario key): Proxmox VE's and a kubeadm node's own figures, each with its
# source in tests/sim/README.md. `fast` puts these knobs back to KNOBS' defaults. Knobs set explicitly win.
REALISTIC = {
    "clone_seconds": 3.0, "full_clone_seconds_per_gib": 5.12, "storage_lock": True, "create_seconds": 1.0,
    "start_seconds": 2.0, "boot_seconds": 23.0, "join_delay_seconds": 15.0, "ready_delay_seconds": 5.0,
    "shutdown_seconds": 8.0, "stop_seconds": 1.0, "stop_cleanup_seconds": 0.5, "destroy_seconds": 2.0,
    "pod_start_seconds": 1.0, "vmstate_write_seconds_per_gib": 1.0, "vmstate_read_seconds_per_gib": 1.0,
}
DELAY_PROFILES = {"fast": {k: KNOBS[k] for k in REALISTIC}, "realistic": REALISTIC}


UsageError = realkube.UsageError


def initial_profile(args, scenario, given):
    """The delay profile at start: --delays, else the last `delays` knob given (--set, scenario knobs), else the
    scenario's `"delays": "<profile>"`, else fast."""
    if getattr(args, "delays", None):
        return args.delays
    for d in reversed(given):
        if "delays" in d:
            return d["delays"]
    sd = scenario.get("delays")
    return sd if isinstance(sd, str) else "fast"


def parse_hosts(spec):
    out = []
    for part in [p.strip() for p in (spec or "").split(",") if p.strip()]:
        if "=" not in part:
            raise UsageError("bad --hosts entry '%s' (want [region/]name=topology)" % part)
        name, topo = part.split("=", 1)
        region = "r1"
        if "/" in name:
            region, name = name.split("/", 1)
        if not pveschema._RE["pve-node"].match(name) or not re.match(r"^[a-z0-9][a-z0-9-]*$", region):
            raise UsageError("bad host or region name in '%s'" % part)
        out.append({"name": name, "region": region, "topology": topo})
    names = [h["name"] for h in out]
    if len(set(names)) != len(names):
        raise UsageError("duplicate host name in --hosts")
    return out


class World:
    def __init__(self, args, scenario):
        self.args = args
        self.scenario = scenario
        self.lock = threading.RLock()
        self.stopping = False
        self.knobs = dict(KNOBS)
        given = [scenario.get(k) or {} for k in ("knobs", "faults", "delays") if not isinstance(scenario.get(k), str)]
        for kv in args.set or []:
            k, _, v = kv.partition("=")
            try:
                val = json.loads(v)
            except ValueError:
                val = v
            given.append({k: val})
        self.set_knobs({"delays": initial_profile(args, scenario, given)}, apply=False)
        for d in given:  # the profile first, then every knob given, whatever their order
            self.set_knobs({k: v for k, v in d.items() if k != "delays"}, apply=False)
        self.counts = collections.Counter()
        self.regions = collections.OrderedDict()
        self.hosts = collections.OrderedDict()
        self.report = reportmod.Report()
        self.real = None  # realkube.RealKube, without --kube none

    # ---- knobs / faults ------------------------------------------------------------
    def knob(self, name):
        return self.knobs.get(name, KNOBS.get(name))

    def set_knobs(self, d, apply=True):
        unknown = [k for k in d if k not in KNOBS]
        if unknown:
            raise UsageError("unknown knob(s): %s" % ", ".join(sorted(unknown)))
        if apply and self.real is not None:
            self.real.check_knobs(d)
        if "delays" in d and (not isinstance(d["delays"], str) or d["delays"] not in DELAY_PROFILES):
            raise UsageError("knob delays: unknown profile %r (want %s)"
                             % (d["delays"], " or ".join(sorted(DELAY_PROFILES))))
        if "delays" in d:  # the profile's values, then the other knobs of the same call
            d = dict(DELAY_PROFILES[d["delays"]], **d)
        with self.lock if hasattr(self, "lock") else _nolock():
            old_down = set(self.knobs.get("hosts_down") or [])
            for k, v in d.items():
                if isinstance(KNOBS[k], list) and not isinstance(v, list):
                    raise UsageError("knob %s must be a list" % k)
                if isinstance(KNOBS[k], bool):
                    v = bool(v)
                elif isinstance(KNOBS[k], (int, float)) and not isinstance(KNOBS[k], bool):
                    try:
                        v = float(v) if isinstance(KNOBS[k], float) else int(v)
                    except (TypeError, ValueError):
                        raise UsageError("knob %s must be a number" % k)
                self.knobs[k] = v
            if apply:
                new_down = set(self.knobs.get("hosts_down") or [])
                for h in new_down - old_down:
                    self.host_down(h, True)
                for h in old_down - new_down:
                    self.host_down(h, False)
                if self.real is not None:
                    self.real.apply_knobs(d)

    def take_fault(self, name):
        with self.lock:
            n = int(self.knobs.get(name, 0) or 0)
            if n > 0:
                self.knobs[name] = n - 1
                return True
            return False

    def _fault(self, prefix):
        if self.take_fault(prefix + "_timeout_next"):
            return "timeout"
        if self.take_fault(prefix + "_error_next"):
            return "error"
        r = random.random()
        t = float(self.knob(prefix + "_timeout_rate"))
        if r < t:
            return "timeout"
        if r < t + float(self.knob(prefix + "_error_rate")):
            return "error"
        return None

    def pve_fault(self):
        return self._fault("pve")

    def count(self, api, method, route):
        with self.lock:
            self.counts[(api, "%s %s" % (method, route))] += 1

    def call_counts(self):
        out = {"pve": {}, "kube": {}}
        with self.lock:
            for (api, k), n in sorted(self.counts.items()):
                out[api][k] = n
        return out

    def all_vms(self):
        for r in self.regions.values():
            yield from list(r.vms.values())

    def vm_event(self, kind, vm):
        self.report.vm(kind, vm)

    def host_down(self, name, down):
        h = self.hosts.get(name)
        if h is None or h.down == down:
            return
        h.down = down
        util.log("host %s is now %s" % (name, "DOWN" if down else "up"))
        if down:
            for vm in list(self.all_vms()):
                if vm.host is h and vm.status == "running":
                    vm.last_pinning = hostsmod.thread_pinning(vm.pid) if vm.pid else None
                    self.procs.stop(vm, vm.pid)
                    vm.status, vm.pid = "stopped", None
                    vm.history["stopped"].append(time.time())
                    self.vm_event("stopped", vm)

    def crash_vm(self, region, vmid):
        r = self.regions.get(region)
        vm = r.vms.get(int(vmid)) if r else None
        if vm is None or vm.status != "running":
            raise UsageError("VM %s/%s is not running" % (region, vmid))
        vm.last_pinning = hostsmod.thread_pinning(vm.pid)
        self.procs.stop(vm, vm.pid)
        vm.status, vm.pid = "stopped", None
        vm.history["stopped"].append(time.time())
        self.vm_event("stopped", vm)

    def reap(self):
        """VM processes that died on their own (killed by a test) become stopped VMs."""
        with self.lock:
            for vm in list(self.all_vms()):
                if vm.status == "running" and vm.pid and not vm.stopping and not self.procs.alive(vm.pid):
                    util.log("VM %d process %d died" % (vm.vmid, vm.pid))
                    self.procs.stop(vm, None)
                    vm.status, vm.pid = "stopped", None
                    vm.history["stopped"].append(time.time())
                    self.vm_event("stopped", vm)

    def state(self):
        with self.lock:
            regions = {}
            for rn, r in self.regions.items():
                regions[rn] = {"hosts": list(r.hosts), "vms": [
                    {"vmid": v.vmid, "host": v.host.name, "name": v.conf.get("name"), "status": v.status,
                     "pid": v.pid, "template": v.is_template(), "lock": v.conf.get("lock")}
                    for v in sorted(r.vms.values(), key=lambda v: v.vmid)],
                    "tasks_running": sum(1 for t in r.tasks.values() if t.status == "running")}
            out = {"regions": regions, "knobs": self.knobs, "hosts_down": [h for h, x in self.hosts.items() if x.down]}
            if self.real is not None:
                out.update(kubelets=self.real.kubelets.state(), kube=self.real.state())
            return out


class Created:
    """An admin answer sent with 201 Created."""

    def __init__(self, body):
        self.body = body


def pve_access_admin(world, m, p, body):
    """`pveum` on a region's user.cfg, its reset to a fresh install's, and a dump of every region's."""
    if m == "GET" and p == "/pve-access":
        return {rn: r.access.dump() for rn, r in world.regions.items()}
    if m != "POST" or not isinstance(body, dict):
        return None
    region = world.regions.get(body.get("region", "r1"))
    if region is None:
        raise UsageError("unknown region %r" % body.get("region"))
    if p == "/actions/pve-access-reset":
        region.access.reset()
        return {"ok": True}
    args = body.get("args")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UsageError("\"args\" must be a list of strings (pveum's arguments)")
    with world.lock:
        rc, out, err = pveacl.pveum(region.access, args)
    return {"rc": rc, "stdout": out, "stderr": err}


def apply_pve_access(world, scenario):
    """Scenario key pve_access: {"<region>": {"reset": bool, "pveum": ["role add X -privs ...", [argv], ...]}}."""
    import shlex
    for rn, spec in (scenario.get("pve_access") or {}).items():
        region = world.regions.get(rn)
        if region is None or not isinstance(spec, dict):
            raise UsageError("pve_access: unknown region %r or not an object" % rn)
        if spec.get("reset"):
            region.access.reset()
        for cmd in spec.get("pveum") or []:
            argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
            rc, _, err = pveacl.pveum(region.access, argv[1:] if argv[:1] == ["pveum"] else argv)
            if rc:
                raise UsageError("pve_access %s: pveum %s: %s" % (rn, " ".join(argv), err.strip()))


class _nolock:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class AdminApp:
    """Plain-HTTP loopback control endpoint for tests (knobs, actions, state, report)."""

    def __init__(self, world):
        self.w = world

    def handle(self, req):
        try:
            body = json.loads(req.body) if req.body else {}
        except ValueError:
            return req.reply_json(400, {"error": "body is not JSON"})
        p = req.path.rstrip("/")
        code = 200
        try:
            out = self._route(req.method, p, body)
        except UsageError as e:
            return req.reply_json(400, {"error": str(e)})
        if out is None:
            return req.reply_json(404, {"error": "no such admin endpoint: %s %s" % (req.method, p)})
        if isinstance(out, Created):
            code, out = 201, out.body
        req.reply_json(code, out)

    def _route(self, m, p, body):
        w = self.w
        if m == "GET" and p == "/healthz":
            return {"ok": True}
        if w.real is not None:
            out = w.real.admin_route(m, p, body)
            if isinstance(out, tuple):
                return Created(out[1])
            if out is not None:
                return out
        if m == "GET" and p in ("/knobs", "/faults"):
            with w.lock:
                return dict(w.knobs)
        if m in ("POST", "PUT", "PATCH") and p in ("/knobs", "/faults"):
            if not isinstance(body, dict):
                raise UsageError("knobs body must be an object")
            w.set_knobs(body)
            with w.lock:
                return dict(w.knobs)
        if m == "GET" and p == "/state":
            return w.state()
        if m == "GET" and p == "/report":
            with w.lock:
                return w.report.to_json(w)
        if m == "GET" and p == "/calls":
            return w.call_counts()
        if m == "GET" and p == "/tasks":
            with w.lock:
                return [{"upid": t.upid, "type": t.type, "id": t.id, "node": t.node, "status": t.status,
                         "exitstatus": t.exitstatus, "polls": t.polls}
                        for r in w.regions.values() for t in r.tasks.values()]
        if m == "POST" and p == "/calls/reset":
            with w.lock:
                w.counts.clear()
            return {"ok": True}
        if m == "POST" and p == "/actions/host":
            host = body.get("host")
            if host not in w.hosts:
                raise UsageError("unknown host %r" % host)
            down = set(w.knob("hosts_down"))
            down.add(host) if body.get("down", True) else down.discard(host)
            w.set_knobs({"hosts_down": sorted(down)})
            return {"ok": True, "hosts_down": sorted(down)}
        if m == "POST" and p == "/actions/crash-vm":
            with w.lock:
                w.crash_vm(body.get("region", "r1"), body.get("vmid"))
            return {"ok": True}
        if p in ("/actions/pveum", "/actions/pve-access-reset", "/pve-access"):
            return pve_access_admin(w, m, p, body)
        if m == "POST" and p == "/actions/stop":
            w.stop_event.set()
            return {"ok": True}
        return None


class ScenarioRunner:
    def __init__(self, world, scenario):
        self.w = world
        self.sc = scenario
        self.t0 = time.time()
        self.pod_seq = 0

    def start(self):
        threading.Thread(target=self._run, name="scenario", daemon=True).start()

    def _events(self):
        evs = []
        for p in self.sc.get("pods") or []:
            evs.append((float(p.get("at", 0)), "pods", p))
            if p.get("leave_after") is not None:
                evs.append((float(p.get("at", 0)) + float(p["leave_after"]), "leave", p))
        for e in self.sc.get("events") or []:
            evs.append((float(e.get("at", 0)), "event", e))
        evs.sort(key=lambda x: x[0])
        return evs

    def _run(self):
        for at, kind, e in self._events():
            while not self.w.stopping and time.time() - self.t0 < at:
                time.sleep(min(0.05, at - (time.time() - self.t0)))
            if self.w.stopping:
                return
            try:
                with self.w.lock:
                    getattr(self, "_do_" + kind)(e)
            except Exception as ex:
                util.log("scenario event at %.1fs failed: %s" % (at, ex))
        end = self.sc.get("end") or {}
        if not end:
            return
        deadline = self.t0 + float(end.get("after", end.get("timeout", 600)))
        while not self.w.stopping and time.time() < deadline:
            if end.get("when") == "all_running":
                with self.w.lock:
                    rep = self.w.report.to_json(self.w)
                if rep["first_pending_to_all_running_seconds"] is not None and self._all_done(rep):
                    break
            time.sleep(0.2)
        util.log("scenario finished")
        self.w.stop_event.set()

    def _all_done(self, rep):
        names = {(p.get("namespace", "default"), p["name"]) for p in self.sc.get("pods") or []}
        return all(r["running"] is not None or r["deleted"] is not None
                   for r in rep["pods"] if not r["daemonset"]) and bool(names)

    def _pod_names(self, p):
        n = int(p.get("count", 1))
        base = p.get("name") or "pod"
        return [base] if n == 1 else ["%s-%d" % (base, i) for i in range(n)]

    def _do_pods(self, p):
        if self.w.real is None:
            raise UsageError("scenario pods need Kubernetes (not --kube none)")
        for name in self._pod_names(p):
            spec = json.loads(json.dumps(p.get("spec") or {}))
            if not spec.get("containers"):
                res = {"requests": {}}
                for r in ("cpu", "memory"):
                    if p.get(r):
                        res["requests"][r] = p[r]
                spec["containers"] = [{"name": "main", "image": p.get("image", "registry.k8s.io/pause:3.10"),
                                       "resources": res}]
            for k in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
                if p.get(k) is not None:
                    spec[k] = p[k]
            labels = dict(p.get("labels") or {"app": p.get("name") or "pod"})
            obj = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": p.get("namespace", "default"), "labels": labels,
                                "annotations": dict({EXIT_ON_TERM: "true"}, **(p.get("annotations") or {}))},
                   "spec": spec}
            self.w.real.create_objects([obj])

    def _do_leave(self, p):
        for name in self._pod_names(p):
            self.w.real.admin.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (p.get("namespace", "default"), name),
                                   ok=(200, 202, 404))

    def _do_event(self, e):
        if "knobs" in e or "faults" in e:
            self.w.set_knobs(e.get("knobs") or e.get("faults"))
        if e.get("host_down"):
            self.w.set_knobs({"hosts_down": sorted(set(self.w.knob("hosts_down")) | {e["host_down"]})})
        if e.get("host_up"):
            self.w.set_knobs({"hosts_down": sorted(set(self.w.knob("hosts_down")) - {e["host_up"]})})
        kube_actions = [k for k in ("delete_pods", "objects") if e.get(k)] + (
            [e["action"]] if e.get("action") in ("disconnect-watches", "kube-restart") else [])
        if not kube_actions:
            return
        real = self.w.real
        if real is None:
            raise UsageError("scenario event %s needs Kubernetes (not --kube none)" % ", ".join(kube_actions))
        if e.get("action") == "disconnect-watches":
            real.disconnect_watches()
        if e.get("action") == "kube-restart":
            real.restart_apiserver()
        if e.get("delete_pods"):
            real.delete_pods(e["delete_pods"].get("namespace"), e["delete_pods"].get("labelSelector", ""))
        if e.get("objects"):
            real.create_objects(e["objects"])


def template_conf(region, vmid, tcfg):
    conf = {"name": tcfg.get("name", "k8s-template"), "template": "1",
            "tags": ";".join(sorted(set(t.lower() for t in re.split(r"[;, ]+", tcfg.get("tags", "k8s-template")) if t))),
            "cores": str(tcfg.get("cores", 2)), "sockets": "1", "memory": str(tcfg.get("memory", 2048)),
            "cpu": "host", "ostype": "l26", "scsihw": "virtio-scsi-single",
            "scsi0": "local-lvm:base-%d-disk-0,iothread=1,size=%s" % (vmid, tcfg.get("disk", "20G")),
            "net0": "virtio=%s,bridge=vmbr0,firewall=1" % pve._mac(), "serial0": "socket", "vga": "serial0",
            "boot": "order=scsi0", "agent": "1", "smbios1": "uuid=%s" % uuid.uuid4(),
            "vmgenid": str(uuid.uuid4()), "meta": "creation-qemu=9.2.0,ctime=%d" % int(time.time()),
            "description": tcfg.get("description", "pvescale simulator template")}
    conf.update({k: str(v) for k, v in (tcfg.get("config") or {}).items()})
    return conf


def kill_stale(state_dir):
    """Kill VM processes left by an earlier run on the same state dir (identified by their -pidfile)."""
    hosts_dir = os.path.join(state_dir, "hosts")
    if not os.path.isdir(hosts_dir):
        return
    for h in os.listdir(hosts_dir):
        run = os.path.join(hosts_dir, h, "var", "run", "qemu-server")
        if not os.path.isdir(run):
            continue
        for f in os.listdir(run):
            if not f.endswith(".pid"):
                continue
            path = os.path.join(run, f)
            try:
                pid = int(open(path).read().strip())
                cmd = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
                if path.encode() in cmd:
                    os.kill(pid, signal.SIGKILL)
                    util.log("killed stale VM process %d" % pid)
            except (OSError, ValueError):
                pass


def reset_host_dirs(state_dir):
    import shutil
    hosts_dir = os.path.join(state_dir, "hosts")
    if os.path.isdir(hosts_dir):
        shutil.rmtree(hosts_dir)


def build(args):
    scenario = {}
    if args.scenario:
        try:
            with open(args.scenario) as f:
                scenario = json.load(f)
        except (OSError, ValueError) as e:
            raise UsageError("cannot read scenario %s: %s" % (args.scenario, e))
        if not isinstance(scenario, dict):
            raise UsageError("scenario must be a JSON object")
    spec = args.hosts
    if spec is None:
        sh = scenario.get("hosts")
        if isinstance(sh, list):
            spec = ",".join("%s%s=%s" % (h.get("region", "r1") + "/", h["name"], h["topology"]) for h in sh)
        else:
            spec = sh or DEFAULT_HOSTS
    host_list = parse_hosts(spec)
    if not host_list:
        raise UsageError("no hosts given")
    w = World(args, scenario)
    lib = topology.Library()
    for h in host_list:
        try:
            lib.get(h["topology"])
        except KeyError as e:
            raise UsageError(str(e.args[0]))
    if args.standin and not (os.path.isfile(args.standin) and os.access(args.standin, os.X_OK)):
        raise UsageError("--standin: %s is not an executable file" % args.standin)
    # The input is good: only now is the state of an earlier run replaced.
    state = os.path.abspath(args.state_dir)
    os.makedirs(state, exist_ok=True)
    try:
        os.unlink(os.path.join(state, "endpoints.json"))
    except FileNotFoundError:
        pass
    kill_stale(state)
    reset_host_dirs(state)
    extract = threading.Thread(target=lib.extract, args=([h["topology"] for h in host_list],
                                                           os.path.join(state, "topologies")))
    extract.start()
    if args.kube == "real":
        w.real = realkube.RealKube(w, state, attach=args.kube_attach, cluster_info=not args.no_cluster_info,
                                   knobs_set=[kv.partition("=")[0] for kv in args.set or []])
        _PARTIAL.append(w.real)
        if w.real.cp is not None:
            w.real.start_async()
    ca_pair = (w.real.info["ca"], w.real.info["ca_key"]) if w.real is not None else None
    ca, crt, key = tls.make_certs(os.path.join(state, "tls"), ca_pair)  # runs while tar unpacks
    w.ssl_fingerprint = tls.fingerprint(crt)
    ctx = httpserv.make_ssl_ctx(crt, key)
    shared = lib.shared
    w.pve_validator = pveschema.Validator(os.path.join(shared, "data", "pve-api-schema.json"))
    w.procs = hostsmod.ProcessManager(state, use_qemu=args.qemu, standin=args.standin)
    extract.join()
    tcfg = scenario.get("template") or {}
    base_id = int(tcfg.get("vmid", 9000))
    for h in host_list:
        region = w.regions.get(h["region"])
        if region is None:
            region = w.regions[h["region"]] = pve.Region(h["region"], w)
        host = hostsmod.Host(h["name"], h["region"], os.path.join(state, "hosts", h["name"]), lib.get(h["topology"]))
        region.hosts[h["name"]] = host
        w.hosts[h["name"]] = host
        if tcfg.get("enabled", True):
            vmid = base_id + len(region.hosts) - 1
            vm = hostsmod.VM(host, vmid, template_conf(h["region"], vmid, tcfg))
            vm.created_at -= 3600
            region.vms[vmid] = vm
            vm.save()
    for rn, region in w.regions.items():
        text = corosync_conf(rn, list(region.hosts))
        for host in region.hosts.values():
            for rel in (("etc", "pve"), ("etc", "corosync")):
                d = os.path.join(host.root, *rel)
                os.makedirs(d, exist_ok=True)
                util.atomic_write(os.path.join(d, "corosync.conf"), text)
    apply_pve_access(w, scenario)
    return build_servers(w, scenario, state, ctx, ca, base_id, tcfg)


def build_servers(w, scenario, state, ctx, ca, base_id, tcfg):
    """The rest of build(): the PVE servers, the Kubernetes side (the real control plane, waited for here, with the
    simulated kubelets; none with --kube none) and the admin endpoint."""
    w.stop_event = threading.Event()
    servers = []
    for rn, region in w.regions.items():
        region.server = httpserv.Server(pve.PveApp(w, region), "pve-" + rn, ctx).start()
        servers.append(region.server)
    w.ca_file = ca
    objs = list(scenario.get("objects") or [])
    objs += list(scenario.get("nodeClasses") or []) + list(scenario.get("nodePools") or [])
    kube_ep = None
    if w.real is not None:
        try:
            kube_ep = w.real.wait()
        except UsageError:
            for s in servers:
                s.shutdown()
            raise
        realkube.log_times(w.real)
    elif objs or scenario.get("pods"):
        for s in servers:
            s.shutdown()
        raise UsageError("the scenario's objects and pods need Kubernetes (not --kube none)")
    asrv = httpserv.Server(AdminApp(w), "admin", None).start()
    w.servers = servers + [asrv]
    if w.real is not None:
        crds = [o for o in objs if o.get("kind") == "CustomResourceDefinition"]
        w.real.create_objects(crds + [o for o in objs if o.get("kind") != "CustomResourceDefinition"])
    threading.Thread(target=_reaper, args=(w,), daemon=True).start()
    ep = {"ca_file": ca, "state_dir": state, "pid": os.getpid(),
          "pve": {rn: {"url": "https://127.0.0.1:%d/api2/json" % r.server.port, "token_id": r.token_id,
                       "token_secret": r.token_secret, "readonly_token_id": r.ro_token_id,
                       "readonly_token_secret": r.ro_token_secret, "nodes": list(r.hosts),
                       "templates": {hn: base_id + i for i, hn in enumerate(r.hosts)} if tcfg.get("enabled", True) else {}}
                  for rn, r in w.regions.items()},
          "kube": kube_ep,
          "admin": {"url": "http://127.0.0.1:%d" % asrv.port},
          "hosts": {hn: h.endpoint_entry() for hn, h in w.hosts.items()}}
    util.write_json(os.path.join(state, "endpoints.json"), ep)
    ScenarioRunner(w, scenario).start()
    return w


_PARTIAL = []  # the control plane a failed build() must stop


def _stop_partial(args):
    for rk in _PARTIAL:
        if rk.started is not None:
            rk.started.join()
        rk.stop()


def _reaper(w):
    while not w.stopping:
        time.sleep(0.2)
        try:
            w.reap()
        except Exception as e:
            util.log("reaper error: %r" % e)


def corosync_conf(cluster, nodes):
    """/etc/pve/corosync.conf as PVE writes it (cluster_name = region)."""
    out = ["logging {", "  debug: off", "  to_syslog: yes", "}", "", "nodelist {"]
    for i, n in enumerate(nodes):
        out += ["  node {", "    name: %s" % n, "    nodeid: %d" % (i + 1), "    quorum_votes: 1",
                "    ring0_addr: 127.0.0.1", "  }"]
    out += ["}", "", "quorum {", "  provider: corosync_votequorum", "}", "", "totem {",
            "  cluster_name: %s" % cluster, "  config_version: %d" % (len(nodes) + 1), "  interface {",
            "    linknumber: 0", "  }", "  ip_version: ipv4-6", "  link_mode: passive", "  secauth: on",
            "  version: 2", "}", ""]
    return "\n".join(out)


def shutdown(w, report_path):
    w.stopping = True
    w.procs.kill_all()
    with w.lock:
        for vm in w.all_vms():
            if vm.status == "running":
                w.procs.stop(vm, None)
                vm.status, vm.pid = "stopped", None
        if report_path:
            util.write_json(report_path, w.report.to_json(w))
    for s in w.servers:
        try:
            s.shutdown()
            s.server_close()
        except OSError:
            pass
    if w.real is not None:
        w.real.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tests/sim/run", description="Simulated Proxmox VE cluster(s) with simulated "
                                 "kubelets joining a real Kubernetes control plane")
    ap.add_argument("--state-dir")
    ap.add_argument("--prepare", action="store_true",
                    help="only unpack every topology tarball into the shared cache, then exit")
    ap.add_argument("--scenario")
    ap.add_argument("--hosts")
    ap.add_argument("--qemu", action="store_true", help="run real tiny QEMU processes instead of stand-ins")
    ap.add_argument("--standin", metavar="PATH",
                    help="the compiled stand-in for VM processes (build/tests/sim/standin-kvm) instead of the Python one")
    ap.add_argument("--report")
    ap.add_argument("--set", action="append", metavar="KNOB=VALUE", help="set a knob (JSON value), repeatable")
    ap.add_argument("--delays", choices=sorted(DELAY_PROFILES),
                    help="delay profile: fast (the default, for tests) or realistic (Proxmox's and a node's own "
                         "figures; knobs given with --set or the scenario win)")
    ap.add_argument("--kube", choices=("real", "none"), default="real",
                    help="real: a real control plane from ../shared/k8s with simulated kubelets (default); none: "
                         "Proxmox VE only, no Kubernetes")
    ap.add_argument("--kube-attach", metavar="DIR",
                    help="with --kube real: use the running control plane whose controlplane.json is in DIR")
    ap.add_argument("--no-cluster-info", action="store_true",
                    help="with --kube real: no kube-public/cluster-info (the tests publish their own)")
    args = ap.parse_args(argv)
    if args.kube_attach:
        args.kube = "real"
    if args.prepare:
        lib = topology.Library()
        tmp = tempfile.mkdtemp(prefix="sim-prepare-")
        try:
            lib.extract(lib.names(), tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
    if not args.state_dir:
        sys.stderr.write("sim: --state-dir is required\n")
        return 2
    t0 = time.time()
    w = None
    try:
        w = build(args)
    except UsageError as e:
        sys.stderr.write("sim: %s\n" % e)
        return 2
    finally:
        if w is None and sys.exc_info()[0] is not None:
            _stop_partial(args)
    util.log("ready in %.3fs: %s" % (time.time() - t0, os.path.join(os.path.abspath(args.state_dir), "endpoints.json")))

    def on_signal(signum, frame):
        w.stop_event.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not w.stop_event.wait(0.5):
        pass
    util.log("stopping")
    shutdown(w, args.report)
    util.log("stopped")
    return 0
