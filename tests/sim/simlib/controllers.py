# Simulated kube-scheduler, kubelets, node lifecycle, PDB, DaemonSet, namespace and pod GC controllers.
# SPDX-License-Identifier: Apache-2.0
import base64
import collections
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from decimal import Decimal

from . import eviction
from . import selectors as sel
from . import util
from . import workloads
from .kube import _copy
from .kubehooks import pod_requests, pod_ready, set_condition

EXIT_ON_TERM = "sim.pvescale.io/exit-on-term"
RUNTIME_DOWN = "container runtime is down"
UNKNOWN_TYPES = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
TOKEN_RE = re.compile(r"(?<![a-z0-9])([a-z0-9]{6})\.([a-z0-9]{16})(?![a-z0-9])")
DS_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def read_user_data(iso_path):
    """Extract the ISO with xorriso and return the text of its user-data file (or None)."""
    tmp = tempfile.mkdtemp(prefix="sim-iso-")
    try:
        r = subprocess.run(["xorriso", "-abort_on", "FATAL", "-return_with", "FATAL", "0",
                            "-osirrox", "on", "-indev", iso_path, "-extract", "/", tmp],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        if r.returncode != 0:
            return None
        for dirpath, _, files in os.walk(tmp):
            for f in sorted(files):
                if re.match(r"^user[-_.]?dat", f, re.I):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        return fh.read().decode(errors="replace")
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parse_kubelet_flags(text):
    flags = {}
    for name in ("node-labels", "register-with-taints", "max-pods", "kube-reserved", "system-reserved",
                 "eviction-hard", "hostname-override"):
        m = re.search(r"--%s[= ]([^\s\"']+)" % re.escape(name), text)
        if m:
            flags[name] = m.group(1)
    return flags


def _kv_list(s):
    out = {}
    for part in (s or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def parse_taints(s):
    taints = []
    for part in [p for p in (s or "").split(",") if p]:
        kv, _, effect = part.rpartition(":")
        if not kv:
            continue
        k, _, v = kv.partition("=")
        t = {"key": k, "effect": effect}
        if v:
            t["value"] = v
        taints.append(t)
    return taints


def tolerates(tolerations, taint):
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if not t.get("key") and op == "Exists":
            return True
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


class Controllers:
    def __init__(self, world):
        self.w = world
        self.kubelets = {}
        self.iso_cache = {}
        self.pod_bound_at = {}
        self.pod_running_at = {}
        self.node_gone_at = {}
        self.node_health = {}  # node name -> ((uid, Ready heartbeat, Lease renewTime), when it last changed)
        self.term_started = {}
        self.workloads = workloads.Workloads(self)
        # scheduler: per pending pod uid {attempts, last, gen, rv, memo: {node: (key, reasons)}}
        self.sched = {}
        self.sched_gen = 0
        self.node_snap = {}
        self.node_ver = collections.Counter()
        self.dom_ver = collections.Counter()
        self.req_cache = {}
        self.thread = threading.Thread(target=self._loop, name="controllers", daemon=True)
        self.wake = threading.Event()

    def start(self):
        self.thread.start()

    def _loop(self):
        while not self.w.stopping:
            self.wake.wait(float(self.w.knob("controller_interval_seconds")))
            self.wake.clear()
            try:
                self.tick()
            except Exception as e:  # keep the controllers alive, report the bug
                import traceback
                util.log("controller error: %r\n%s" % (e, traceback.format_exc()))

    def tick(self):
        self.kubelet_vms()
        with self.w.lock:
            self.w.kube_hooks.crd_controllers()
            self.namespaces()
            self.node_monitor()
            self.node_lifecycle()
            self.pod_gc()
            self.workloads.tick()
            self.daemonsets()
            self.pod_lifecycle()
            self.scheduler()
            self.pdbs()
            self.w.report.sample(self.w)

    # ---- helpers --------------------------------------------------------------------
    @property
    def s(self):
        return self.w.kube

    def rt(self, plural, group=""):
        return self.s.types[(group, plural)]

    def commit(self, plural, obj_old, obj_new, group=""):
        md = obj_old["metadata"]
        return self.s._commit(self.rt(plural, group), md.get("namespace"), md["name"], obj_old, obj_new)

    def event(self, obj, etype, reason, message, component="default-scheduler"):
        ns = obj["metadata"].get("namespace") or "default"
        ert = self.rt("events")
        name = "%s.%x" % (obj["metadata"]["name"], random.getrandbits(60))
        now = util.rfc3339()
        ev = {"metadata": {"name": name, "namespace": ns},
              "involvedObject": {"kind": obj.get("kind"), "namespace": obj["metadata"].get("namespace"),
                                 "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
                                 "apiVersion": obj.get("apiVersion"),
                                 "resourceVersion": obj["metadata"].get("resourceVersion")},
              "reason": reason, "message": message, "type": etype, "count": 1,
              "source": {"component": component}, "firstTimestamp": now, "lastTimestamp": now,
              "reportingComponent": component, "reportingInstance": ""}
        try:
            self.s.create(ert, ns, ev)
        except Exception as e:
            util.log("event create failed: %s" % e, 2)

    # ---- kubelets (one per running VM) ----------------------------------------------------
    def kubelet_vms(self):
        now = time.time()
        todo = []
        with self.w.lock:
            vms = list(self.w.all_vms())
            live = set()
            for vm in vms:
                if vm.status != "running" or vm.host.down or vm.is_template():
                    continue
                ks = self.kubelets.setdefault(vm.uid, {"state": "booting", "vm": vm, "reason": "waiting for boot"})
                ks["vm"] = vm
                live.add(vm.uid)
                if ks["state"] in ("booting", "waiting") and now - vm.started_at >= float(self.w.knob("join_delay_seconds")):
                    if ks.get("next_try", 0) <= now:
                        ks["next_try"] = now + 0.5
                        todo.append((vm, ks, self._vm_iso(vm)))
                elif ks["state"] in ("registered", "ready"):
                    self._kubelet_running(vm, ks, now)
            for uid, ks in self.kubelets.items():
                if uid not in live and ks["state"] in ("registered", "ready"):
                    self._kubelet_gone(ks, now)
        for vm, ks, iso in todo:
            ud = None
            if iso and os.path.exists(iso):
                st = os.stat(iso)
                key = (iso, st.st_mtime, st.st_size)
                if key not in self.iso_cache:
                    self.iso_cache[key] = read_user_data(iso)
                ud = self.iso_cache[key]
            with self.w.lock:
                if vm.status == "running":
                    self._try_register(vm, ks, iso, ud)

    def _vm_iso(self, vm):
        for k, v in sorted(vm.conf.items()):
            if re.match(r"^(ide|sata|scsi)\d+$", k) and "media=cdrom" in v:
                m = re.match(r"^(?:file=)?([^:,]+):iso/([^,]+)", v)
                if m:
                    return os.path.join(vm.host.iso_dir, m.group(2))
        return None

    def _never_joins(self, vm):
        return self._listed(vm, "never_join")

    def _listed(self, vm, knob):
        """Is the VM (by vmid or name, which is its Node's name) in the list knob?"""
        names = self.w.knob(knob) or []
        return str(vm.vmid) in [str(x) for x in names] or vm.conf.get("name") in names

    def _try_register(self, vm, ks, iso, ud):
        ks["state"] = "waiting"
        if self._never_joins(vm):
            ks["reason"] = "fault injection: never_join"
            return
        if not iso:
            ks["reason"] = "no cloud-init ISO attached as CD-ROM"
            return
        if ud is None:
            ks["reason"] = "no user-data in %s" % os.path.basename(iso)
            return
        m = TOKEN_RE.search(ud)
        if not m:
            ks["reason"] = "no bootstrap token in user-data"
            return
        err = self._check_token(m.group(1), m.group(2)) or self._check_discovery(ud)
        if err:
            ks["reason"] = err
            return
        ks["flags"] = parse_kubelet_flags(ud)
        ks["token_id"] = m.group(1)
        self._register_node(vm, ks)

    def _check_discovery(self, ud):
        """What kubeadm's discovery would hit: an API server named in the user-data (a kubeconfig's `server:`) that is
        not this cluster's cannot be reached, and a CA (`certificate-authority-data:`) that is not this cluster's fails
        the TLS handshake. User-data that names neither is left to the image (its own discovery)."""
        ca = getattr(self.w, "ca_file", None)
        for url in re.findall(r"server:\s*[\"']?(https?://[^\s\"',}]+)", ud):
            m = re.match(r"^https://(127\.0\.0\.1|localhost):(\d+)/?$", url)
            if not m or int(m.group(2)) != self.w.kube_port:
                return "kubeadm join: cannot reach the API server at %s" % url
        for data in re.findall(r"certificate-authority-data:\s*[\"']?([A-Za-z0-9+/=]+)", ud):
            try:
                got = base64.b64decode(data)
            except ValueError:
                got = b""
            if ca and got.strip() != open(ca, "rb").read().strip():
                return "kubeadm join: x509: certificate signed by unknown authority (the CA in the user-data is not the cluster's)"
        return None

    def _check_token(self, tid, tsecret):
        sec = self.s.find("secrets", "kube-system", "bootstrap-token-" + tid)
        if sec is None:
            return "bootstrap token secret kube-system/bootstrap-token-%s not found" % tid
        if sec.get("type") != "bootstrap.kubernetes.io/token":
            return "secret bootstrap-token-%s has type %s" % (tid, sec.get("type"))
        data = {}
        for k, v in (sec.get("data") or {}).items():
            try:
                data[k] = base64.b64decode(v).decode()
            except (ValueError, UnicodeDecodeError):
                data[k] = ""
        if data.get("token-id", tid) != tid or data.get("token-secret") != tsecret:
            return "bootstrap token %s: secret does not match" % tid
        if data.get("usage-bootstrap-authentication") != "true":
            return "bootstrap token %s: usage-bootstrap-authentication is not true" % tid
        exp = data.get("expiration")
        if exp:
            ts = util.parse_rfc3339(exp)
            if ts is None or ts < time.time():
                return "bootstrap token %s expired" % tid
        return None

    def _node_object(self, vm, ks):
        flags = ks.get("flags", {})
        name = vm.conf.get("name") or "vm%d" % vm.vmid
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                  "topology.kubernetes.io/region": vm.host.region, "topology.kubernetes.io/zone": vm.host.name}
        labels.update(_kv_list(flags.get("node-labels")))
        taints = parse_taints(flags.get("register-with-taints"))
        cpu = Decimal(vm.vcpus())
        mem = Decimal(vm.memory_mib()) * 2**20
        disk = Decimal(20 * 2**30)
        mm = re.search(r"size=(\d+)G", vm.conf.get("scsi0", "") or vm.conf.get("virtio0", ""))
        if mm:
            disk = Decimal(int(mm.group(1)) * 2**30)
        pods = int(flags.get("max-pods", 110))
        cap = {"cpu": util.fmt_cpu(cpu), "memory": "%dKi" % (mem // 1024), "pods": str(pods),
               "ephemeral-storage": "%dKi" % (disk // 1024), "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
        rcpu, rmem = Decimal(0), Decimal(0)
        for fl in ("kube-reserved", "system-reserved"):
            kv = _kv_list(flags.get(fl))
            rcpu += util.parse_quantity(kv.get("cpu", "0"))
            rmem += util.parse_quantity(kv.get("memory", "0"))
        ev = re.search(r"memory\.available<([0-9.]+[A-Za-z]*)", flags.get("eviction-hard", "memory.available<100Mi"))
        if ev:
            rmem += util.parse_quantity(ev.group(1))
        alloc = dict(cap)
        alloc["cpu"] = util.fmt_cpu(max(cpu - rcpu, Decimal(0)))
        alloc["memory"] = "%dKi" % (max(mem - rmem, Decimal(0)) // 1024)
        alloc["ephemeral-storage"] = "%d" % int(disk * Decimal("0.9"))
        sysuuid = (re.search(r"uuid=([0-9a-f-]+)", vm.conf.get("smbios1", "")) or [None, str(uuid.uuid4())])[1]
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"providerID": "proxmox://%s/%d" % (vm.host.region, vm.vmid), "taints": taints},
                "status": {"capacity": cap, "allocatable": alloc,
                           "conditions": self._node_conditions(False),
                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                         {"type": "Hostname", "address": name}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": {"machineID": uuid.uuid4().hex, "systemUUID": sysuuid,
                                        "bootID": str(uuid.uuid4()), "kernelVersion": "6.8.0-sim",
                                        "osImage": "pvescale simulated node", "containerRuntimeVersion": "containerd://2.0.0",
                                        "kubeletVersion": "v1.35.0", "kubeProxyVersion": "v1.35.0",
                                        "operatingSystem": "linux", "architecture": "amd64"}}}

    def _node_conditions(self, ready, unknown=False, message=None):
        conds = []
        for t, r in (("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
                     ("PIDPressure", "KubeletHasSufficientPID")):
            set_condition(conds, t, "Unknown" if unknown else "False", "NodeStatusUnknown" if unknown else r,
                          "Kubelet stopped posting node status." if unknown else "kubelet has no pressure")
        if unknown:
            set_condition(conds, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
        elif ready:
            set_condition(conds, "Ready", "True", "KubeletReady", "kubelet is posting ready status")
        else:
            set_condition(conds, "Ready", "False", "KubeletNotReady", message or
                          "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady")
        for c in conds:
            c.pop("lastProbeTime", None)
            c["lastHeartbeatTime"] = util.rfc3339()
        return conds

    def _register_node(self, vm, ks):
        nrt = self.rt("nodes")
        node = self._node_object(vm, ks)
        name = node["metadata"]["name"]
        old = self.s.find("nodes", None, name)
        if old is not None and (old.get("spec") or {}).get("providerID") != node["spec"]["providerID"]:
            self.s.remove(nrt, old)
            old = None
        if old is None:
            self.s.create(nrt, None, node)
            self.w.report.node_event(name, "registered", vm)
        ks.update(state="registered", node=name, registered_at=time.time(), reason="registered", last_lease=0)

    def _kubelet_running(self, vm, ks, now):
        if self._listed(vm, "kubelet_stopped"):
            # A hung kubelet (or a cut network): no status, no Lease, no pod started or stopped; the node lifecycle
            # controller notices (node_monitor).
            ks.update(stopped=True, reason="fault injection: kubelet_stopped")
            return
        if ks.pop("stopped", None):
            ks["reason"] = "registered"
        node = self.s.find("nodes", None, ks["node"])
        if node is None:
            if self.w.knob("kubelet_reregister"):
                self._register_node(vm, ks)
            return
        ready = _node_ready(node)
        if self._listed(vm, "kubelet_not_ready"):
            self._kubelet_not_ready(vm, ks, node, ready)
        elif ready != "True" and now - ks["registered_at"] >= float(self.w.knob("ready_delay_seconds")):
            new = _copy(node)
            new["status"]["conditions"] = self._merge_conds(node, self._node_conditions(True))
            self.commit("nodes", node, new)
            if ks["state"] != "ready":
                self.w.report.node_event(ks["node"], "ready", vm)
            ks.update(state="ready", reason="registered")
        if now - ks.get("last_lease", 0) >= float(self.w.knob("lease_interval_seconds")):
            ks["last_lease"] = now
            self._renew_lease(ks["node"])

    def _kubelet_not_ready(self, vm, ks, node, ready):
        """The kubelet runs and renews its Lease, but posts Ready=False (its container runtime is down)."""
        ks["reason"] = "fault injection: kubelet_not_ready"
        if ready == "False":
            return
        new = _copy(node)
        new["status"]["conditions"] = self._merge_conds(node, self._node_conditions(False, message=RUNTIME_DOWN))
        self.commit("nodes", node, new)
        self.w.report.node_event(ks["node"], "notready", vm)
        ks["state"] = "registered"

    def _merge_conds(self, node, fresh):
        old = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
        for c in fresh:
            o = old.get(c["type"])
            if o and o.get("status") == c["status"]:
                c["lastTransitionTime"] = o.get("lastTransitionTime", c["lastTransitionTime"])
        return fresh

    def _renew_lease(self, name):
        lrt = self.rt("leases", "coordination.k8s.io")
        t = time.time()
        now = util.rfc3339(t)[:-1] + ".%06dZ" % int((t % 1) * 1e6)
        cur = self.s.find("leases", "kube-node-lease", name, "coordination.k8s.io")
        if cur is None:
            try:
                self.s.create(lrt, "kube-node-lease", {"metadata": {"name": name, "namespace": "kube-node-lease"},
                                                       "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                                                                "renewTime": now}})
            except Exception as e:
                util.log("lease create failed: %s" % e, 2)
            return
        new = _copy(cur)
        new["spec"]["renewTime"] = now
        self.commit("leases", cur, new, "coordination.k8s.io")

    def _kubelet_gone(self, ks, now):
        vm = ks["vm"]
        gone_since = ks.setdefault("gone_at", now)
        if now - gone_since < float(self.w.knob("notready_delay_seconds")):
            return
        node = self.s.find("nodes", None, ks["node"])
        ks["state"] = "gone"
        ks["reason"] = "VM %s" % ("deleted" if vm.deleted else "not running")
        if node is None:
            return
        if (node.get("spec") or {}).get("providerID") != "proxmox://%s/%d" % (vm.host.region, vm.vmid):
            return
        if vm.deleted and self.w.knob("ccm_delete_nodes"):
            self.s.delete(self.rt("nodes"), None, ks["node"])
            return
        new = _copy(node)
        new["status"]["conditions"] = self._merge_conds(node, self._node_conditions(False, unknown=True))
        self.commit("nodes", node, new)
        self.w.report.node_event(ks["node"], "notready", vm)

    # ---- node lifecycle: health (kube-controller-manager's tryUpdateNodeHealth) ---------------------
    def node_monitor(self):
        """A Node whose kubelet neither renewed its Lease nor posted a new Ready heartbeat for
        node_monitor_grace_seconds gets Ready, MemoryPressure, DiskPressure and PIDPressure Unknown (NodeStatusUnknown,
        "Kubelet stopped posting node status."), as the node lifecycle controller does. Only Nodes with a Lease in
        kube-node-lease are watched: Nodes created through the API have no kubelet here and are left alone."""
        now = time.time()
        grace = float(self.w.knob("node_monitor_grace_seconds"))
        health = {}
        for node in self.s.items("nodes"):
            name = node["metadata"]["name"]
            lease = self.s.find("leases", "kube-node-lease", name, "coordination.k8s.io")
            if lease is None:
                continue
            ready = _condition(node, "Ready") or {}
            seen = (node["metadata"]["uid"], ready.get("lastHeartbeatTime"), (lease.get("spec") or {}).get("renewTime"))
            prev = self.node_health.get(name)
            probe = prev[1] if prev is not None and prev[0] == seen else now
            health[name] = (seen, probe)
            if now - probe > grace and ready.get("status") != "Unknown":
                self._mark_unknown(node)
        self.node_health = health

    def _mark_unknown(self, node):
        new = _copy(node)
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        stamp = util.rfc3339()
        for t in UNKNOWN_TYPES:
            c = next((c for c in conds if c.get("type") == t), None)
            if c is None:
                c = {"type": t, "lastHeartbeatTime": node["metadata"].get("creationTimestamp")}
                conds.append(c)
            elif c.get("status") == "Unknown":
                continue
            c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                     lastTransitionTime=stamp)
        self.commit("nodes", node, new)
        vm = next((ks["vm"] for ks in self.kubelets.values() if ks.get("node") == node["metadata"]["name"]), None)
        if vm is not None:
            self.w.report.node_event(node["metadata"]["name"], "notready", vm)

    # ---- node lifecycle: taints from the Ready condition -------------------------------------
    def node_lifecycle(self):
        for node in self.s.items("nodes"):
            ready = _node_ready(node)
            want = []
            if ready == "False":
                want = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
            elif ready != "True":
                want = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
            taints = (node.get("spec") or {}).get("taints") or []
            keep = [t for t in taints if t.get("key") not in ("node.kubernetes.io/not-ready",
                                                                "node.kubernetes.io/unreachable")]
            managed = [t for t in taints if t not in keep]
            if [(t["key"], t["effect"]) for t in managed] == [(t["key"], t["effect"]) for t in want]:
                continue
            if ready == "True" and _ready_for(node) < float(self.w.knob("node_monitor_seconds")):
                continue  # kube-controller-manager sees the new Ready only at its next node monitor pass
            new = _copy(node)
            stamp = util.rfc3339()
            new.setdefault("spec", {})["taints"] = keep + [dict(t, timeAdded=stamp) if t["effect"] == "NoExecute" else t
                                                           for t in want]
            if not new["spec"]["taints"]:
                del new["spec"]["taints"]
            self.commit("nodes", node, new)

    # ---- pods on nodes (kubelet side) -------------------------------------------------------
    def pod_lifecycle(self):
        now = time.time()
        nodes = {n["metadata"]["name"]: n for n in self.s.items("nodes")}
        stopped = {ks.get("node") for ks in self.kubelets.values() if ks.get("stopped")}
        prt = self.rt("pods")
        for pod in self.s.items("pods"):
            md = pod["metadata"]
            node_name = (pod.get("spec") or {}).get("nodeName")
            uid = md["uid"]
            if not node_name:
                continue
            self.pod_bound_at.setdefault(uid, now)
            node = nodes.get(node_name)
            if node_name in stopped:
                self._unattended(pod, node)
                continue
            if md.get("deletionTimestamp"):
                self._terminate(pod, node, now)
                continue
            phase = (pod.get("status") or {}).get("phase")
            if node is None or phase in ("Succeeded", "Failed"):
                continue
            nready = _node_ready(node) == "True"
            if phase == "Pending" and nready and now - self.pod_bound_at[uid] >= float(self.w.knob("pod_start_seconds")):
                self._run_pod(pod, node)
            elif phase == "Running":
                if pod_ready(pod) != nready:
                    self._set_ready(pod, nready)
                rs = (md.get("annotations") or {}).get("sim.pvescale.io/run-seconds")
                if rs and now - self.pod_running_at.get(uid, now) >= float(rs):
                    new = _copy(pod)
                    new["status"]["phase"] = "Succeeded"
                    for t in ("Ready", "ContainersReady"):
                        set_condition(new["status"]["conditions"], t, "False", "PodCompleted")
                    self.commit("pods", pod, new)

    def _unattended(self, pod, node):
        """A pod whose kubelet is stopped is neither started nor stopped; once its Node is not Ready the node
        lifecycle controller marks it not Ready (MarkPodsNotReady)."""
        if node is not None and (pod.get("status") or {}).get("phase") == "Running" and pod_ready(pod) \
                and _node_ready(node) != "True":
            self._set_ready(pod, False)

    def _terminate(self, pod, node, now):
        """The kubelet kills a pod being deleted: it is not Ready at once; its container exits on SIGTERM
        (annotation sim.pvescale.io/exit-on-term, after pod_termination_seconds) or is killed when the grace period
        ends; then the terminal phase is written and the pod deleted with grace 0. A node without a kubelet
        (gone, or Ready Unknown) leaves its pods to PodGC."""
        md = pod["metadata"]
        if node is None or _node_ready(node) not in ("True", "False"):
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        started = self.term_started.setdefault(md["uid"], now)
        graceful = (md.get("annotations") or {}).get(EXIT_ON_TERM) == "true"
        grace = float(md.get("deletionGracePeriodSeconds", 0))
        wait = min(grace, float(self.w.knob("pod_termination_seconds"))) if graceful else grace
        if now - started < wait:
            if pod_ready(pod):
                self._set_ready(pod, False)
            return
        self.term_started.pop(md["uid"], None)
        self._pod_exited(pod, 0 if graceful else 137)

    def _set_ready(self, pod, ready):
        new = _copy(pod)
        for t in ("Ready", "ContainersReady"):
            set_condition(new.setdefault("status", {}).setdefault("conditions", []), t, "True" if ready else "False")
        return self.commit("pods", pod, new)

    def _pod_exited(self, pod, code):
        """Containers terminated with `code`: phase Succeeded (0) or Failed, then the kubelet's final delete."""
        new = _copy(pod)
        st = new.setdefault("status", {})
        st["phase"] = "Succeeded" if code == 0 else "Failed"
        for t in ("Ready", "ContainersReady"):
            set_condition(st.setdefault("conditions", []), t, "False", "PodCompleted")
        now = util.rfc3339()
        for cs in st.get("containerStatuses") or []:
            cs.update(ready=False, started=False, state={"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": now,
                "containerID": cs.get("containerID", "")}})
        self.w.report.pod_deleted(pod)
        md = pod["metadata"]
        self.commit("pods", pod, new)
        self.s.delete(self.rt("pods"), md["namespace"], md["name"], {"gracePeriodSeconds": 0,
                                                                     "preconditions": {"uid": md["uid"]}})

    def _run_pod(self, pod, node):
        new = _copy(pod)
        st = new.setdefault("status", {})
        now = util.rfc3339()
        st["phase"] = "Running"
        st["hostIP"] = "127.0.0.1"
        st["hostIPs"] = [{"ip": "127.0.0.1"}]
        ip = "10.244.%d.%d" % (random.randint(0, 255), random.randint(2, 254))
        st["podIP"] = ip
        st["podIPs"] = [{"ip": ip}]
        st["startTime"] = now
        conds = st.setdefault("conditions", [])
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"):
            set_condition(conds, t, "True")
        st["containerStatuses"] = [{"name": c.get("name"), "image": c.get("image"), "imageID": "",
                                    "containerID": "containerd://%s" % uuid.uuid4().hex, "ready": True,
                                    "started": True, "restartCount": 0,
                                    "state": {"running": {"startedAt": now}}}
                                   for c in (pod.get("spec") or {}).get("containers") or []]
        self.pod_running_at[pod["metadata"]["uid"]] = time.time()
        self.w.report.pod_running(new)
        self.commit("pods", pod, new)

    def pod_gc(self):
        now = time.time()
        names = {n["metadata"]["name"] for n in self.s.items("nodes")}
        prt = self.rt("pods")
        for pod in self.s.items("pods"):
            nn = (pod.get("spec") or {}).get("nodeName")
            uid = pod["metadata"]["uid"]
            if not nn or nn in names:
                self.node_gone_at.pop(uid, None)
                continue
            first = self.node_gone_at.setdefault(uid, now)
            if now - first >= float(self.w.knob("podgc_seconds")):
                self._gc_orphan(prt, pod)

    def _gc_orphan(self, prt, pod):
        """PodGC's markFailedAndDeletePodWithCondition: Failed with DisruptionTarget (DeletionByPodGC), then a delete
        with grace 0 (a pod with finalizers stays until they are removed)."""
        md = pod["metadata"]
        self.w.report.pod_deleted(pod)
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            eviction.mark_disruption_target(self.s, pod, "DeletionByPodGC", "PodGC: node no longer exists", "Failed")
        if md.get("deletionGracePeriodSeconds", 1) != 0:
            self.s.delete(prt, md["namespace"], md["name"], {"gracePeriodSeconds": 0})

    # ---- namespaces ----------------------------------------------------------------------------
    def namespaces(self):
        nsrt = self.rt("namespaces")
        for ns in self.s.items("namespaces"):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            left = 0
            for rt in list(self.s.types.values()):
                if not rt.namespaced:
                    continue
                for o in self.s.list(rt, name, [], []):
                    left += 1
                    if not o["metadata"].get("deletionTimestamp"):
                        self.s.delete(rt, name, o["metadata"]["name"], {"gracePeriodSeconds": 0})
            if left == 0 and not ns["metadata"].get("finalizers"):
                self.s.remove(nsrt, ns)

    # ---- PDB status ----------------------------------------------------------------------------
    def pdbs(self):
        if self.w.knob("disruption_controller"):
                eviction.sync_pdbs(self.s, float(self.w.knob("pdb_disruption_timeout_seconds")))

    # ---- DaemonSets ----------------------------------------------------------------------------
    def daemonsets(self):
        nodes = self.s.items("nodes")
        prt = self.rt("pods")
        for ds in self.s.items("daemonsets", "apps"):
            md = ds["metadata"]
            if md.get("deletionTimestamp"):
                continue
            ns = md["namespace"]
            tmpl = (ds.get("spec") or {}).get("template") or {}
            tspec = tmpl.get("spec") or {}
            owned = {}
            for p in self.s.list(prt, ns, [], []):
                for ref in p["metadata"].get("ownerReferences") or []:
                    if ref.get("uid") == md["uid"]:
                        owned.setdefault(p["spec"].get("nodeName"), []).append(p)
            # As the DaemonSet controller's NodeShouldRunDaemonPod: a new pod only where every NoSchedule and
            # NoExecute taint is tolerated; a running one stays unless an untolerated NoExecute taint appears.
            want, keep = set(), set()
            tol = (tspec.get("tolerations") or []) + DS_TOLERATIONS
            for n in nodes:
                if self._ds_fits(tspec, tol, n, ("NoSchedule", "NoExecute")):
                    want.add(n["metadata"]["name"])
                if self._ds_fits(tspec, tol, n, ("NoExecute",)):
                    keep.add(n["metadata"]["name"])
            for nn in want - set(owned):
                pod = {"metadata": {"generateName": md["name"] + "-", "namespace": ns,
                                    "labels": dict((tmpl.get("metadata") or {}).get("labels") or {}),
                                    "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {}),
                                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": md["name"],
                                                         "uid": md["uid"], "controller": True,
                                                         "blockOwnerDeletion": True}]},
                       "spec": _copy(tspec)}
                pod["spec"]["nodeName"] = nn
                pod["spec"]["tolerations"] = (tspec.get("tolerations") or []) + DS_TOLERATIONS
                try:
                    self.s.create(prt, ns, pod)
                except Exception as e:
                    util.log("daemonset pod create failed: %s" % e, 1)
            for nn, pods in owned.items():
                if nn not in keep:
                    for p in pods:
                        if not p["metadata"].get("deletionTimestamp"):
                            self.s.delete(prt, ns, p["metadata"]["name"], {})
            ready = sum(1 for nn, ps in owned.items() if nn in want and any(pod_ready(p) for p in ps))
            st = {"desiredNumberScheduled": len(want), "currentNumberScheduled": len(want & set(owned)),
                  "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": len(want & set(owned)),
                  "numberMisscheduled": len(set(owned) - want), "observedGeneration": md.get("generation", 1)}
            if ready < len(want):
                st["numberUnavailable"] = len(want) - ready
            cur = ds.get("status") or {}
            if any(cur.get(k) != v for k, v in st.items()) or ("numberUnavailable" in cur) != ("numberUnavailable" in st):
                new = _copy(ds)
                new["status"] = st
                self.commit("daemonsets", ds, new, "apps")

    def _ds_fits(self, spec, tol, node, effects):
        if not _node_affinity_ok(spec, node):
            return False
        for t in (node.get("spec") or {}).get("taints") or []:
            if t.get("effect") in effects and not tolerates(tol, t):
                return False
        return True

    # ---- scheduler -----------------------------------------------------------------------------
    def scheduler(self):
        now = time.time()
        pods = self.s.items("pods")
        pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")
                   and not p["metadata"].get("deletionTimestamp")
                   and (p.get("spec") or {}).get("schedulerName", "default-scheduler") == "default-scheduler"
                   and (p.get("status") or {}).get("phase", "Pending") == "Pending"
                   and not (p.get("spec") or {}).get("schedulingGates")]
        if not pending:
            self.sched.clear()
            return
        for p in pending:
            self.w.report.pod_pending(p)
        self.sched = {p["metadata"]["uid"]: self.sched[p["metadata"]["uid"]] for p in pending
                      if p["metadata"]["uid"] in self.sched}
        if len(self.sched) == len(pending) and all(now < st["last"] + self._backoff(st["attempts"])
                                                   for st in self.sched.values()):
            return  # every pending pod is backing off
        t = _SchedTick(self.s.items("nodes"), pods, self._requests(pods))
        t.key_tks = tuple(sorted(t.anti_tks | {tm.get("topologyKey") for p in pending for tm in _anti_terms(p)},
                                 key=str))
        self._track_nodes(t)
        pending.sort(key=lambda p: (-(p["spec"].get("priority") or 0), p["metadata"].get("creationTimestamp", ""),
                                    p["metadata"]["name"]))
        interval = float(self.w.knob("scheduler_retry_seconds"))
        events = []
        for pod in pending:
            st = self.sched.get(pod["metadata"]["uid"])
            if st is not None and not self._sched_due(st, pod, now, interval):
                continue
            self._schedule_one(pod, t, st, now, events)
        # kube-scheduler's event broadcaster sends its events asynchronously, after the pods' own writes.
        for ev in events:
            self.event(*ev)

    def _requests(self, pods):
        """pod_requests per uid, cached (a pod's requests cannot change after creation)."""
        cache = {}
        for p in pods:
            uid = p["metadata"]["uid"]
            r = self.req_cache.get(uid)
            cache[uid] = r if r is not None else pod_requests(p)
        self.req_cache = cache
        return cache

    def _backoff(self, attempts):
        """kube-scheduler's per-pod backoff after `attempts` failed attempts (initial * 2^(n-1), capped)."""
        if attempts <= 0:
            return 0.0
        initial = float(self.w.knob("scheduler_backoff_seconds"))
        return min(initial * 2.0 ** min(attempts - 1, 60), float(self.w.knob("scheduler_max_backoff_seconds")))

    def _sched_due(self, st, pod, now, interval):
        if now < st["last"] + self._backoff(st["attempts"]):
            return False
        return (st["gen"] != self.sched_gen or st["rv"] != pod["metadata"]["resourceVersion"]
                or now - st["last"] >= interval)

    def _track_nodes(self, t):
        """Compare each node (resourceVersion, labels, bound pods and their labels) with the last pass: a change
        bumps the node's version; a change of the pods in a topology domain bumps that domain's version."""
        cur = {}
        for n in t.nodes:
            nn = n["metadata"]["name"]
            cur[nn] = (n["metadata"].get("resourceVersion"), n["metadata"].get("labels") or {},
                       {q["metadata"]["uid"]: q["metadata"].get("labels") for q in t.bound.get(nn, ())})
        prev = self.node_snap
        for nn in set(prev) | set(cur):
            a, b = prev.get(nn), cur.get(nn)
            if a == b:
                continue
            self.sched_gen += 1
            self.node_ver[nn] += 1
            if a is not None and b is not None and a[1:] == b[1:]:
                continue
            for snap in (a, b):
                if snap is not None and snap[2]:
                    self._bump_domains(snap[1])
        self.node_snap = cur

    def _bump_domains(self, labels):
        for kv in labels.items():
            self.dom_ver[kv] += 1

    def _node_key(self, t, node):
        """What a memoized filter result for this node depends on besides the pod itself."""
        nn = node["metadata"]["name"]
        k = t.keys.get(nn)
        if k is None:
            labels = node["metadata"].get("labels") or {}
            k = (node["metadata"].get("resourceVersion"), self.node_ver[nn], t.key_tks,
                 tuple(self.dom_ver.get((tk, labels[tk]), 0) if tk in labels else -1 for tk in t.key_tks))
            t.keys[nn] = k
        return k

    def _schedule_one(self, pod, t, st, now, events):
        md = pod["metadata"]
        uid = md["uid"]
        if st is None:
            st = self.sched[uid] = {"attempts": 0, "last": 0.0, "gen": -1, "rv": None, "memo": {}}
        req = self.req_cache[uid]
        positive = _positive_index(pod, t)
        old = st["memo"] if positive is None and st["rv"] == md["resourceVersion"] else {}
        memo = {}
        reasons = collections.Counter()
        feasible = []
        for n in t.nodes:
            nn = n["metadata"]["name"]
            key = self._node_key(t, n)
            m = old.get(nn)
            r = m[1] if m is not None and m[0] == key else self._filter(pod, n, req, t, positive)
            if r:
                memo[nn] = (key, r)
                for x in r:
                    reasons[x] += 1
            else:
                feasible.append(n)
        if feasible:
            best = min(feasible, key=lambda n: (self._score(n, t.used, req), n["metadata"]["name"]))
            self._bind(pod, best["metadata"]["name"], t, req, events)
            return
        st.update(attempts=st["attempts"] + 1, last=now, gen=self.sched_gen, memo=memo)
        if not t.nodes:
            msg = "no nodes available to schedule pods"
        else:
            parts = sorted("%d %s" % (c, r) for r, c in reasons.items())
            msg = "0/%d nodes are available: %s." % (len(t.nodes), ", ".join(parts))
        st["rv"] = self._mark_unschedulable(pod, msg, events)

    def _bind(self, pod, nn, t, req, events):
        md = pod["metadata"]
        cur = self.s.find("pods", md["namespace"], md["name"])
        newp = self.w.kube_hooks.bind_pod(cur, nn)
        t.add(newp, nn, req)
        self.sched.pop(md["uid"], None)
        self.sched_gen += 1
        self.node_ver[nn] += 1
        node = t.by_name[nn]
        self._bump_domains(node["metadata"].get("labels") or {})
        snap = self.node_snap.get(nn)
        if snap is not None:
            pods = dict(snap[2])
            pods[md["uid"]] = newp["metadata"].get("labels")
            self.node_snap[nn] = (snap[0], snap[1], pods)
        events.append((newp, "Normal", "Scheduled", "Successfully assigned %s/%s to %s" % (md["namespace"], md["name"],
                                                                                         nn)))

    def _mark_unschedulable(self, pod, msg, events):
        """Set PodScheduled=False with msg (and queue a FailedScheduling event) unless it says so already; returns
        the pod's resourceVersion afterwards."""
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("message") == msg:
                return pod["metadata"]["resourceVersion"]
        new = _copy(pod)
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        set_condition(conds, "PodScheduled", "False", "Unschedulable", msg)
        res = self.commit("pods", pod, new)
        events.append((new, "Warning", "FailedScheduling", msg))
        return res["metadata"]["resourceVersion"]

    def _score(self, node, used, req):
        alloc = (node.get("status") or {}).get("allocatable") or {}
        nn = node["metadata"]["name"]
        frac = Decimal(0)
        for r in ("cpu", "memory"):
            a = _q(alloc.get(r))
            if a > 0:
                frac += (used[nn][r] + req.get(r, 0)) / a
        return frac

    def _filter(self, pod, node, req, t, positive):
        spec = pod.get("spec") or {}
        nspec = node.get("spec") or {}
        tol = spec.get("tolerations") or []
        if nspec.get("unschedulable") and not tolerates(tol, {"key": "node.kubernetes.io/unschedulable",
                                                               "effect": "NoSchedule"}):
            return ["node(s) were unschedulable"]
        for tn in nspec.get("taints") or []:
            if tn.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tol, tn):
                return ["node(s) had untolerated taint {%s: %s}" % (tn.get("key"), tn.get("value", ""))]
        if not _node_affinity_ok(spec, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        alloc = (node.get("status") or {}).get("allocatable") or {}
        nn = node["metadata"]["name"]
        out = []
        if t.count[nn] + 1 > int(_q(alloc.get("pods", "0"))):
            out.append("Too many pods")
        for r, v in sorted(req.items()):
            if v <= 0:
                continue
            if t.used[nn][r] + v > _q(alloc.get(r)):
                out.append("Insufficient %s" % r)
        if out:
            return out
        return self._interpod(pod, node, t, positive)

    def _interpod(self, pod, node, t, positive):
        labels = node["metadata"].get("labels") or {}
        ns = pod["metadata"]["namespace"]
        for term, any_match, values in positive or ():
            tk = term.get("topologyKey")
            ok = tk in labels and labels[tk] in values
            if not ok and not (not any_match and _term_matches(term, pod, ns)):
                return ["node(s) didn't match pod affinity rules"]
        uid = pod["metadata"]["uid"]
        for term in _anti_terms(pod):
            tk = term.get("topologyKey")
            if tk not in labels:
                continue
            for q in t.domain(tk).get(labels[tk], ()):
                if q["metadata"]["uid"] != uid and _term_matches(term, q, ns):
                    return ["node(s) didn't match pod anti-affinity rules"]
        for tk in t.anti_tks:
            if tk not in labels:
                continue
            for q, term in t.anti.get((tk, labels[tk]), ()):
                if _term_matches(term, pod, q["metadata"]["namespace"]):
                    return ["node(s) didn't satisfy existing pods anti-affinity rules"]
        return None


class _SchedTick:
    """One scheduler pass: nodes, usage per node, bound pods, and the inter-pod (anti-)affinity indexes by
    topology domain, kept up to date as the pass binds pods."""

    def __init__(self, nodes, pods, requests):
        self.nodes = sorted(nodes, key=lambda n: n["metadata"]["name"])
        self.by_name = {n["metadata"]["name"]: n for n in self.nodes}
        self.used = collections.defaultdict(lambda: collections.defaultdict(Decimal))
        self.count = collections.Counter()
        self.bound = collections.defaultdict(list)  # node name -> pods (also for names that are no node)
        self.domains = {}  # topologyKey -> {value: [bound pods on nodes with that label]}, built on demand
        self.anti = {}  # (topologyKey, value) -> [(bound pod, its required anti-affinity term)]
        self.anti_tks = set()
        self.key_tks = ()
        self.keys = {}  # node name -> memo key, dropped on every bind
        for p in pods:
            nn = (p.get("spec") or {}).get("nodeName")
            if nn and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self._account(p, nn, requests[p["metadata"]["uid"]])
                if nn in self.by_name:
                    self._index_anti(p, self.by_name[nn])

    def _account(self, p, nn, req):
        for k, v in req.items():
            self.used[nn][k] += v
        self.count[nn] += 1
        self.bound[nn].append(p)

    def _index_anti(self, q, qn):
        labels = qn["metadata"].get("labels") or {}
        for term in _anti_terms(q):
            tk = term.get("topologyKey")
            self.anti_tks.add(tk)
            if tk in labels:
                self.anti.setdefault((tk, labels[tk]), []).append((q, term))

    def domain(self, tk):
        d = self.domains.get(tk)
        if d is None:
            d = {}
            for nn, qpods in self.bound.items():
                qn = self.by_name.get(nn)
                labels = (qn["metadata"].get("labels") or {}) if qn is not None else {}
                if tk in labels:
                    d.setdefault(labels[tk], []).extend(qpods)
            self.domains[tk] = d
        return d

    def add(self, p, nn, req):
        self._account(p, nn, req)
        qn = self.by_name[nn]
        labels = qn["metadata"].get("labels") or {}
        for tk, d in self.domains.items():
            if tk in labels:
                d.setdefault(labels[tk], []).append(p)
        self._index_anti(p, qn)
        self.keys.clear()


def _anti_terms(pod):
    return ((((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or [])


def _positive_index(pod, t):
    """For each required podAffinity term: (term, any bound pod matches, topology values of the matching pods'
    nodes), or None without such terms."""
    terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or [])
    if not terms:
        return None
    ns = pod["metadata"]["namespace"]
    out = []
    for term in terms:
        tk = term.get("topologyKey")
        any_match = False
        values = set()
        for nn, qpods in t.bound.items():
            qn = t.by_name.get(nn)
            if qn is None:
                continue
            qlabels = qn["metadata"].get("labels") or {}
            for q in qpods:
                if _term_matches(term, q, ns):
                    any_match = True
                    if tk in qlabels:
                        values.add(qlabels[tk])
        out.append((term, any_match, values))
    return out


def _term_matches(term, pod, owner_ns):
    nss = term.get("namespaces") or ([owner_ns] if term.get("namespaceSelector") is None else None)
    if nss is not None and pod["metadata"]["namespace"] not in nss:
        return False
    return sel.match_label_selector_obj(term.get("labelSelector"), pod["metadata"].get("labels"))


def _node_affinity_ok(spec, node):
    labels = node["metadata"].get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if req:
        terms = req.get("nodeSelectorTerms") or []
        if not any(sel.match_node_selector_term(t, node) for t in terms):
            return False
    return True


def _ready_for(node):
    """Seconds since the Node's Ready condition last changed (0 when unknown)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        since = util.parse_rfc3339(c.get("lastTransitionTime")) if c.get("type") == "Ready" else None
        if since is not None:
            return time.time() - since
    return 0.0


def _condition(node, ctype):
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _node_ready(node):
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status")
    return None


def _q(v):
    if v is None:
        return Decimal(0)
    try:
        return util.parse_quantity(v)
    except ValueError:
        return Decimal(0)
