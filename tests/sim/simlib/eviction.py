# The Eviction subresource and the PodDisruptionBudget status, as kube-apiserver's eviction.go and kube-controller-manager's disruption controller do them.
# SPDX-License-Identifier: Apache-2.0
import math
import time

from . import selectors as sel
from . import util
from .kube import KubeError, _copy, bad_request
from .kubehooks import pod_ready

MAX_DISRUPTED_POD_SIZE = 2000  # eviction.go MaxDisruptedPodSize
DELETE_PROPAGATION = ("Foreground", "Background", "Orphan")
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def set_metav1_condition(conds, ctype, status, reason, message, generation):
    """apimeta.SetStatusCondition: a metav1.Condition (no lastProbeTime); the transition time moves with status."""
    now = util.rfc3339()
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c["lastTransitionTime"] = now
            c.update(status=status, reason=reason, message=message, observedGeneration=generation)
            return
    conds.append({"type": ctype, "status": status, "reason": reason, "message": message,
                  "observedGeneration": generation, "lastTransitionTime": now})


def update_disruption_allowed_condition(st):
    """pdbhelper.UpdateDisruptionAllowedCondition."""
    ok = st.get("disruptionsAllowed", 0) > 0
    set_metav1_condition(st.setdefault("conditions", []), "DisruptionAllowed", "True" if ok else "False",
                         "SufficientPods" if ok else "InsufficientPods", "", st.get("observedGeneration", 0))


def too_many_requests(message, cause, retry_after=0):
    details = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return KubeError(429, "TooManyRequests", message, details)


def pdb_forbidden(name, why):
    return KubeError(403, "Forbidden", 'poddisruptionbudget.policy "%s" is forbidden: %s' % (name, why),
                     {"name": name, "group": "policy", "kind": "poddisruptionbudget"})


def still_processing(name):
    return too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.",
                             "The disruption budget %s is still being processed by the server." % name, 10)


# ---- the request ---------------------------------------------------------------------------------
def parse_eviction(w, name, body, query_dry):
    """Validates a policy/v1 Eviction (400 for a body that cannot be decoded, 422 naming the field) and returns its
    deleteOptions with dryRun merged from the query, as propagateDryRun does."""
    if body.get("kind") not in (None, "Eviction"):
        raise bad_request("the kind in the data (%s) does not match the expected kind (Eviction)" % body["kind"])
    if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
        raise bad_request("the API version in the data (%s) does not match the expected API version (policy/v1)"
                          % body["apiVersion"])
    pr = w.kube_schemas.validate_builtin(body, "io.k8s.api.policy.v1.Eviction")
    if pr.decode:
        raise bad_request('Eviction in version "v1" cannot be handled as a Eviction: %s' % pr.decode)
    if (body.get("metadata") or {}).get("name") != name:
        raise bad_request("name in URL does not match name in Eviction object")
    opts = _copy(body.get("deleteOptions") or {})
    _check_delete_options(opts)
    if query_dry and opts.get("dryRun") and opts["dryRun"] != query_dry:
        raise bad_request("Non-matching dry-run options in request and content: %s and %s" % (query_dry, opts["dryRun"]))
    if not opts.get("dryRun"):
        opts["dryRun"] = list(query_dry)
    return opts


def _check_delete_options(opts):
    causes = []
    pp = opts.get("propagationPolicy")
    if pp is not None and pp not in DELETE_PROPAGATION:
        causes.append(("propagationPolicy", "FieldValueNotSupported", 'Unsupported value: "%s": supported values: '
                       '"Foreground", "Background", "Orphan"' % pp))
    for v in opts.get("dryRun") or []:
        if v != "All":
            causes.append(("dryRun", "FieldValueNotSupported", 'Unsupported value: "%s": supported values: "All"' % v))
    if opts.get("orphanDependents") is not None and pp is not None:
        causes.append(("propagationPolicy", "FieldValueInvalid", "Invalid value: \"%s\": orphanDependents and "
                       "deletionPropagation cannot be both set" % pp))
    if causes:
        text = "; ".join("%s: %s" % (f, m) for f, _, m in causes)
        raise KubeError(422, "Invalid", 'DeleteOptions.meta.k8s.io "" is invalid: %s' % text,
                        {"group": "meta.k8s.io", "kind": "DeleteOptions",
                         "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})


# ---- eviction.go --------------------------------------------------------------------------------
def can_ignore_pdb(pod):
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def pdbs_for_eviction(store, pod):
    """The PDBs of the pod's namespace whose selector matches it (a nil or empty selector matches nothing here)."""
    rt = store.types[("policy", "poddisruptionbudgets")]
    labels = pod["metadata"].get("labels") or {}
    out = []
    for p in store.list(rt, pod["metadata"]["namespace"], [], []):
        s = (p.get("spec") or {}).get("selector")
        if s and (s.get("matchLabels") or s.get("matchExpressions")) and sel.match_label_selector_obj(s, labels):
            out.append(p)
    return out


def unhealthy_may_go(pod, pdb):
    """A not-ready pod is deleted without touching the budget: always with AlwaysAllow, with IfHealthyBudget (the
    default) when the budget is met."""
    if pod_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    st = pdb.get("status") or {}
    return st.get("currentHealthy", 0) >= st.get("desiredHealthy", 0) and st.get("desiredHealthy", 0) > 0


def check_and_decrement(store, pdb, pod_name, dry):
    """eviction.go checkAndDecrement: refuses in the real order, else writes the PDB's status with one disruption
    fewer and the pod in disruptedPods (not for a dry run)."""
    md, st = pdb["metadata"], pdb.get("status") or {}
    if st.get("observedGeneration", 0) < md.get("generation", 1):
        raise still_processing(md["name"])
    allowed = st.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise pdb_forbidden(md["name"], "pdb disruptions allowed is negative")
    if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
        raise pdb_forbidden(md["name"], "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.",
                                "The disruption budget %s needs %d healthy pods and has %d currently"
                                % (md["name"], st.get("desiredHealthy", 0), st.get("currentHealthy", 0)))
    if dry:
        return
    new = _copy(pdb)
    nst = new.setdefault("status", {})
    nst["disruptionsAllowed"] = allowed - 1
    if nst["disruptionsAllowed"] == 0:
        update_disruption_allowed_condition(nst)
    nst.setdefault("disruptedPods", {})[pod_name] = util.rfc3339()
    store._commit(store.types[("policy", "poddisruptionbudgets")], md["namespace"], md["name"], pdb, new)


def mark_disruption_target(store, pod, reason, message, phase=None):
    """The DisruptionTarget condition kube-apiserver (eviction) and PodGC (with phase Failed) set on a pod before
    deleting it."""
    new = _copy(pod)
    if phase:
        new.setdefault("status", {})["phase"] = phase
    conds = new.setdefault("status", {}).setdefault("conditions", [])
    conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
    conds.append({"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                  "lastProbeTime": None, "lastTransitionTime": util.rfc3339()})
    md = pod["metadata"]
    return store._commit(store.types[("", "pods")], md["namespace"], md["name"], pod, new)


def evict(store, ns, name, opts):
    """POST pods/{name}/eviction with validated deleteOptions; returns the Status to answer with 201."""
    prt = store.types[("", "pods")]
    pod = store.get(prt, ns, name)
    dry = "All" in (opts.get("dryRun") or [])
    delete_opts = {k: v for k, v in opts.items() if k != "dryRun"}
    if can_ignore_pdb(pod):
        if not dry:
            store.delete(prt, ns, name, delete_opts)
        return SUCCESS
    pdbs = pdbs_for_eviction(store, pod)
    if len(pdbs) > 1:
        raise KubeError(500, "", "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                 "does not support.")
    if pdbs and not unhealthy_may_go(pod, pdbs[0]):
        check_and_decrement(store, pdbs[0], name, dry)
    if not dry:
        mark_disruption_target(store, pod, "EvictionByEvictionAPI", "Eviction API: evicting")
        store.delete(prt, ns, name, delete_opts)
    return SUCCESS


# ---- the disruption controller ----------------------------------------------------------------
def _scaled(v, total):
    """intstr.GetScaledValueFromIntOrPercent, rounding up."""
    if isinstance(v, str) and v.endswith("%"):
        return int(math.ceil(float(v[:-1]) * total / 100.0))
    return int(v)


def controller_scale(store, pod, seen):
    """The scale of the pod's controller (a Deployment for a ReplicaSet it owns), counted once per controller; raises
    ValueError with the controller's words when there is none."""
    md = pod["metadata"]
    ref = next((r for r in md.get("ownerReferences") or [] if r.get("controller")), None)
    if ref is None:
        raise ValueError('found no controller ref for pod "%s"' % md["name"])
    owner = _owner(store, md["namespace"], ref)
    if owner is not None and ref.get("kind") == "ReplicaSet":
        dref = next((r for r in owner["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        if dref is not None and dref.get("kind") == "Deployment":
            owner = _owner(store, md["namespace"], dref)
    if owner is None or ref.get("kind") not in ("ReplicaSet", "ReplicationController", "StatefulSet"):
        raise ValueError('found no controllers for pod "%s"' % md["name"])
    uid = owner["metadata"]["uid"]
    if uid in seen:
        return 0
    seen.add(uid)
    return int((owner.get("spec") or {}).get("replicas", 1))


def _owner(store, ns, ref):
    plural = {"ReplicaSet": "replicasets", "Deployment": "deployments", "StatefulSet": "statefulsets"}.get(
        ref.get("kind"), "")
    rt = store.types.get(("apps", plural))
    o = store.objs[rt.key].get((ns, ref.get("name"))) if rt is not None else None
    return o if o is not None and o["metadata"]["uid"] == ref.get("uid") else None


def expected_and_desired(store, spec, pods):
    """getExpectedPodCount: (expectedPods, desiredHealthy)."""
    if "maxUnavailable" in spec and spec["maxUnavailable"] is not None:
        seen = set()
        expected = sum(controller_scale(store, p, seen) for p in pods)
        return expected, max(0, expected - _scaled(spec["maxUnavailable"], expected))
    if "minAvailable" in spec and spec["minAvailable"] is not None:
        v = spec["minAvailable"]
        if not isinstance(v, str):
            return len(pods), int(v)
        seen = set()
        expected = sum(controller_scale(store, p, seen) for p in pods)
        return expected, _scaled(v, expected)
    return 0, 0


def pods_for_pdb(store, pdb):
    """The controller's pods of a PDB: policy/v1 reads a nil selector as nothing and an empty one as everything."""
    s = (pdb.get("spec") or {}).get("selector")
    if s is None:
        return []
    prt = store.types[("", "pods")]
    return [p for p in store.list(prt, pdb["metadata"]["namespace"], [], [])
            if sel.match_label_selector_obj(s, p["metadata"].get("labels") or {})]


def disrupted_map(old, pods, now, timeout):
    """buildDisruptedPodMap: entries of pods not yet being deleted and evicted less than `timeout` ago."""
    out = {}
    for p in pods:
        name = p["metadata"]["name"]
        if p["metadata"].get("deletionTimestamp") or name not in old:
            continue
        at = util.parse_rfc3339(old[name])
        if at is not None and at + timeout > now:
            out[name] = old[name]
    return out


def pdb_status(store, pdb, now, timeout):
    """The PDB's next status (trySync), or that of failSafe when its pods' controllers cannot be found."""
    cur = pdb.get("status") or {}
    st = _copy(cur)
    pods = pods_for_pdb(store, pdb)
    try:
        expected, desired = expected_and_desired(store, pdb.get("spec") or {}, pods)
    except ValueError as e:
        st["disruptionsAllowed"] = 0
        set_metav1_condition(st.setdefault("conditions", []), "DisruptionAllowed", "False", "SyncFailed", str(e),
                             st.get("observedGeneration", 0))
        return st
    disrupted = disrupted_map(cur.get("disruptedPods") or {}, pods, now, timeout)
    healthy = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp")
                  and p["metadata"]["name"] not in disrupted and pod_ready(p))
    allowed = healthy - desired
    st.update(expectedPods=expected, currentHealthy=healthy, desiredHealthy=desired,
              disruptionsAllowed=0 if expected <= 0 or allowed <= 0 else allowed,
              observedGeneration=pdb["metadata"].get("generation", 1))
    if disrupted:
        st["disruptedPods"] = disrupted
    else:
        st.pop("disruptedPods", None)
    update_disruption_allowed_condition(st)
    return st


def sync_pdbs(store, timeout, now=None):
    """One pass of the disruption controller: every PDB whose status differs is written through /status."""
    now = time.time() if now is None else now
    rt = store.types[("policy", "poddisruptionbudgets")]
    for pdb in store.items("poddisruptionbudgets", "policy"):
        st = pdb_status(store, pdb, now, timeout)
        if st != pdb.get("status"):
            new = _copy(pdb)
            new["status"] = st
            store._commit(rt, pdb["metadata"]["namespace"], pdb["metadata"]["name"], pdb, new)
