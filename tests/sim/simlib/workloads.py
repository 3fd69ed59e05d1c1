# Simulated Deployment, ReplicaSet and garbage-collector controllers: a Deployment keeps one ReplicaSet of its template, a ReplicaSet keeps its replicas of pods.
# SPDX-License-Identifier: Apache-2.0
import json

from . import selectors as sel
from . import util
from .kube import _copy
from .kubehooks import pod_ready

SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery rand.SafeEncodeString
OWNED_KINDS = {"ReplicaSet": ("apps", "replicasets"), "Deployment": ("apps", "deployments"),
               "DaemonSet": ("apps", "daemonsets")}


def template_hash(template):
    """pod-template-hash: the FNV-1a 32-bit hash of the template, its decimal digits safe-encoded."""
    h = 0x811c9dc5
    for b in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ b) * 0x01000193) & 0xffffffff
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in str(h).encode())


def controller_ref(obj):
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def owner_ref(obj):
    md = obj["metadata"]
    return {"apiVersion": obj.get("apiVersion", "apps/v1"), "kind": obj["kind"], "name": md["name"],
            "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}


def owned_by(items, owner):
    uid = owner["metadata"]["uid"]
    return [o for o in items if (controller_ref(o) or {}).get("uid") == uid]


def is_active(pod):
    """controller.FilterActivePods: not terminal and not being deleted."""
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp"))


def deletion_rank(pod):
    """The pods a ReplicaSet scales down first (controller.ActivePods order): unscheduled, pending, not ready, newest."""
    st = pod.get("status") or {}
    created = util.parse_rfc3339(pod["metadata"].get("creationTimestamp")) or 0.0
    return (bool((pod.get("spec") or {}).get("nodeName")), st.get("phase") == "Running", pod_ready(pod), -created)


class Workloads:
    def __init__(self, ctl):
        self.ctl = ctl

    @property
    def s(self):
        return self.ctl.s

    def tick(self):
        self.garbage_collect()
        for d in self.s.items("deployments", "apps"):
            if not d["metadata"].get("deletionTimestamp"):
                self.deployment(d)
        for rs in self.s.items("replicasets", "apps"):
            if not rs["metadata"].get("deletionTimestamp"):
                self.replicaset(rs)

    # ---- garbage collector: dependents whose controlling owner is gone -------------------------
    def garbage_collect(self):
        for plural, group in (("pods", ""), ("replicasets", "apps")):
            rt = self.ctl.rt(plural, group)
            for o in self.s.items(plural, group):
                ref = controller_ref(o)
                if ref is None or ref.get("kind") not in OWNED_KINDS or o["metadata"].get("deletionTimestamp"):
                    continue
                owner = self.s.find(OWNED_KINDS[ref["kind"]][1], o["metadata"]["namespace"], ref.get("name"),
                                    OWNED_KINDS[ref["kind"]][0])
                if owner is None or owner["metadata"]["uid"] != ref.get("uid"):
                    self.s.delete(rt, o["metadata"]["namespace"], o["metadata"]["name"], {})

    # ---- Deployment ----------------------------------------------------------------------------
    def deployment(self, d):
        md, spec = d["metadata"], d.get("spec") or {}
        h = template_hash(spec.get("template") or {})
        mine = owned_by(self.s.list(self.ctl.rt("replicasets", "apps"), md["namespace"], [], []), d)
        cur = next((rs for rs in mine if (rs["metadata"].get("labels") or {}).get("pod-template-hash") == h), None)
        if cur is None:
            cur = self._new_replicaset(d, h)
        for rs in mine:
            want = int(spec.get("replicas", 1)) if rs is cur else 0
            if (rs.get("spec") or {}).get("replicas") != want:
                self._scale(rs, want)
        self._deployment_status(d, [rs for rs in mine if rs is not cur] + ([cur] if cur else []), cur)

    def _new_replicaset(self, d, h):
        md, spec = d["metadata"], d.get("spec") or {}
        tmpl = _copy(spec.get("template") or {})
        tmpl.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
        selector = _copy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = h
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": "%s-%s" % (md["name"], h), "namespace": md["namespace"],
                           "labels": dict(tmpl["metadata"]["labels"]), "ownerReferences": [owner_ref(d)]},
              "spec": {"replicas": int(spec.get("replicas", 1)), "selector": selector, "template": tmpl}}
        try:
            out = self.s.create(self.ctl.rt("replicasets", "apps"), md["namespace"], rs)
        except Exception as e:
            util.log("replicaset create failed: %s" % e, 1)
            return None
        self.ctl.event(d, "Normal", "ScalingReplicaSet", "Scaled up replica set %s from 0 to %d"
                       % (rs["metadata"]["name"], rs["spec"]["replicas"]), "deployment-controller")
        return self.s.find("replicasets", md["namespace"], out["metadata"]["name"], "apps")

    def _scale(self, rs, want):
        new = _copy(rs)
        new["spec"]["replicas"] = want
        self.ctl.commit("replicasets", rs, new, "apps")

    def _deployment_status(self, d, sets, cur):
        sets = [self.s.find("replicasets", rs["metadata"]["namespace"], rs["metadata"]["name"], "apps") or rs
                for rs in sets]
        total = lambda k: sum(int((rs.get("status") or {}).get(k, 0)) for rs in sets)  # noqa: E731
        want = int((d.get("spec") or {}).get("replicas", 1))
        st = {"observedGeneration": d["metadata"].get("generation", 1), "replicas": total("replicas"),
              "updatedReplicas": int(((cur or {}).get("status") or {}).get("replicas", 0)),
              "readyReplicas": total("readyReplicas"), "availableReplicas": total("availableReplicas")}
        st["unavailableReplicas"] = max(0, want - st["availableReplicas"])
        st = {k: v for k, v in st.items() if v or k == "observedGeneration"}
        if d.get("status") != st:
            new = _copy(d)
            new["status"] = st
            self.ctl.commit("deployments", d, new, "apps")

    # ---- ReplicaSet ----------------------------------------------------------------------------
    def replicaset(self, rs):
        md, spec = rs["metadata"], rs.get("spec") or {}
        prt = self.ctl.rt("pods")
        pods = owned_by(self.s.list(prt, md["namespace"], [], []), rs)
        active = [p for p in pods if is_active(p)]
        diff = len(active) - int(spec.get("replicas", 1))
        for _ in range(-diff):
            created = self._create_pod(rs)
            if created is None:
                break
            active.append(created)
        for p in sorted(active, key=deletion_rank)[:max(diff, 0)]:
            self.s.delete(prt, md["namespace"], p["metadata"]["name"], {})
            self.ctl.event(rs, "Normal", "SuccessfulDelete", "Deleted pod: %s" % p["metadata"]["name"],
                           "replicaset-controller")
            active.remove(p)
        self._replicaset_status(rs, active)

    def _create_pod(self, rs):
        md, tmpl = rs["metadata"], (rs.get("spec") or {}).get("template") or {}
        tmd = tmpl.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": md["name"] + "-", "namespace": md["namespace"],
                            "labels": dict(tmd.get("labels") or {}), "annotations": dict(tmd.get("annotations") or {}),
                            "ownerReferences": [owner_ref(rs)]},
               "spec": _copy(tmpl.get("spec") or {})}
        try:
            out = self.s.create(self.ctl.rt("pods"), md["namespace"], pod)
        except Exception as e:
            self.ctl.event(rs, "Warning", "FailedCreate", "Error creating: %s" % e, "replicaset-controller")
            return None
        self.ctl.event(rs, "Normal", "SuccessfulCreate", "Created pod: %s" % out["metadata"]["name"],
                       "replicaset-controller")
        return out

    def _replicaset_status(self, rs, active):
        tlabels = (((rs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        ready = sum(1 for p in active if pod_ready(p))
        labelled = sum(1 for p in active if sel.match_label_selector_obj({"matchLabels": tlabels},
                                                                         p["metadata"].get("labels") or {}))
        st = {"replicas": len(active), "readyReplicas": ready, "availableReplicas": ready,
              "fullyLabeledReplicas": labelled,
              "observedGeneration": rs["metadata"].get("generation", 1)}
        st = {k: v for k, v in st.items() if v or k in ("replicas", "observedGeneration")}
        if rs.get("status") != st:
            new = _copy(rs)
            new["status"] = st
            self.ctl.commit("replicasets", rs, new, "apps")
