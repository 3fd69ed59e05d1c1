# Records what happened during a run (pods, VMs, nodes, API calls) for --report and GET /report.
# SPDX-License-Identifier: Apache-2.0
import re
import time

from . import hosts as hostsmod
from . import util


def _is_daemon_pod(pod):
    return any(r.get("kind") == "DaemonSet" for r in pod["metadata"].get("ownerReferences") or [])


class Report:
    def __init__(self):
        self.t0 = time.time()
        self.pods = {}
        self.vms = {}
        self.nodes = []
        self.evictions = {}
        self.last_sample = 0

    def rel(self, t=None):
        return round((t if t is not None else time.time()) - self.t0, 3)

    def _pod(self, pod):
        md = pod["metadata"]
        rec = self.pods.get(md["uid"])
        if rec is None:
            rec = {"namespace": md.get("namespace"), "name": md["name"], "uid": md["uid"],
                   "daemonset": _is_daemon_pod(pod), "created": self.rel(util.parse_rfc3339(md.get("creationTimestamp"))),
                   "pending": None, "scheduled": None, "running": None, "deleted": None, "node": None}
            self.pods[md["uid"]] = rec
        return rec

    def pod_pending(self, pod):
        rec = self._pod(pod)
        if rec["pending"] is None:
            rec["pending"] = self.rel()

    def pod_bound(self, pod, node):
        rec = self._pod(pod)
        rec["scheduled"] = self.rel()
        rec["node"] = node

    def pod_running(self, pod):
        rec = self._pod(pod)
        if rec["running"] is None:
            rec["running"] = self.rel()
        rec["node"] = pod["spec"].get("nodeName")

    def pod_deleted(self, pod):
        rec = self._pod(pod)
        if rec["deleted"] is None:
            rec["deleted"] = self.rel()

    def eviction(self, ns, name, code):
        """An Eviction call (after its body parsed) and its answer's HTTP status, by pod."""
        codes = self.evictions.setdefault("%s/%s" % (ns, name), {})
        codes[str(code)] = codes.get(str(code), 0) + 1

    def vm(self, kind, vm):
        rec = self.vms.get(vm.uid)
        if rec is None:
            rec = {"region": vm.host.region, "host": vm.host.name, "vmid": vm.vmid, "created": None,
                   "started": [], "stopped": [], "deleted": None, "pinned_cpus": {}}
            self.vms[vm.uid] = rec
        c = vm.conf
        rec.update({"name": c.get("name"), "cores": int(c.get("cores", 1)), "sockets": int(c.get("sockets", 1)),
                    "vcpus": vm.vcpus(), "memory_mib": vm.memory_mib(), "affinity": c.get("affinity"),
                    "numa": {k: v for k, v in sorted(c.items()) if re.match(r"^numa\d*$", k)},
                    "tags": c.get("tags")})
        now = self.rel()
        if kind == "created":
            rec["created"] = now
        elif kind == "started":
            rec["started"].append(now)
        elif kind == "stopped":
            rec["stopped"].append(now)
            if vm.last_pinning:
                rec["pinned_cpus"] = {str(k): util.cpulist_format(v) for k, v in vm.last_pinning.items()}
        elif kind == "deleted":
            rec["deleted"] = now

    def node_event(self, name, kind, vm):
        self.nodes.append({"t": self.rel(), "node": name, "event": kind, "region": vm.host.region, "vmid": vm.vmid})

    def sample(self, world):
        """Reads the vCPU thread affinity of running VMs (at most once a second)."""
        now = time.time()
        if now - self.last_sample < 1.0:
            return
        self.last_sample = now
        for vm in world.all_vms():
            if vm.status == "running" and vm.pid and vm.uid in self.vms:
                pin = hostsmod.thread_pinning(vm.pid)
                if pin:
                    self.vms[vm.uid]["pinned_cpus"] = {str(k): util.cpulist_format(v) for k, v in sorted(pin.items())}

    def to_json(self, world):
        self.last_sample = 0
        self.sample(world)
        pods = sorted(self.pods.values(), key=lambda r: (r["created"] or 0, r["namespace"] or "", r["name"]))
        workload = [p for p in pods if not p["daemonset"] and p["pending"] is not None]
        first = min((p["pending"] for p in workload), default=None)
        total = None
        if workload and all(p["running"] is not None or p["deleted"] is not None for p in workload):
            ran = [p["running"] for p in workload if p["running"] is not None]
            if ran:
                total = round(max(ran) - first, 3)
        return {"started_at": util.rfc3339(self.t0), "ended_at": util.rfc3339(), "duration_seconds": self.rel(),
                "pods": pods, "vms": sorted(self.vms.values(), key=lambda r: (r["region"], r["vmid"], r["created"] or 0)),
                "nodes": self.nodes, "evictions": self.evictions, "first_pending_to_all_running_seconds": total,
                "first_pending_at": first, "api_calls": world.call_counts()}
