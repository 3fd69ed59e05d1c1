# Per-kind behaviour of the simulated kube-apiserver: defaults, validation, CRDs, eviction, binding.
# SPDX-License-Identifier: Apache-2.0
import base64
import binascii
import copy
import json
import threading
import time

from . import k8sschema
from . import selectors as sel
from . import util
from .kube import (KubeError, ResourceType, bad_request, conflict, invalid, not_found, POD_MUTABLE)

NOT_READY_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def set_condition(conds, ctype, status, reason=None, message=None):
    """Update-or-append a condition; lastTransitionTime changes only when status changes."""
    now = util.rfc3339()
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c["lastTransitionTime"] = now
            c["status"] = status
            for k, v in (("reason", reason), ("message", message)):
                if v is None:
                    c.pop(k, None)
                else:
                    c[k] = v
            return conds
    c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason is not None:
        c["reason"] = reason
    if message is not None:
        c["message"] = message
    conds.append(c)
    return conds


def pod_requests(pod):
    """Effective requests {resource: Decimal} (containers summed, init containers maxed, overhead added)."""
    spec = pod.get("spec") or {}
    total = {}
    for c in spec.get("containers") or []:
        for k, v in _container_requests(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _container_requests(c).items():
            if c.get("restartPolicy") == "Always":
                total[k] = total.get(k, 0) + v
            else:
                total[k] = max(total.get(k, 0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + util.parse_quantity(v)
    return total


def _container_requests(c):
    res = c.get("resources") or {}
    out = {}
    for k, v in (res.get("limits") or {}).items():
        out[k] = util.parse_quantity(v)
    for k, v in (res.get("requests") or {}).items():
        out[k] = util.parse_quantity(v)
    return out


def pod_ready(pod):
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


class KubeHooks:
    def __init__(self, world):
        self.w = world
        self.tls = threading.local()
        self.crd_due = {}  # CRD name -> when (time.monotonic()) the apiextensions controllers take it up

    @property
    def s(self):
        return self.w.kube

    @property
    def field_validation(self):
        return getattr(self.tls, "fv", "Warn")

    @field_validation.setter
    def field_validation(self, v):
        self.tls.fv = v

    @property
    def warnings(self):
        if not hasattr(self.tls, "warn"):
            self.tls.warn = []
        return self.tls.warn

    @warnings.setter
    def warnings(self, v):
        self.tls.warn = v

    # ---- create defaults ---------------------------------------------------------
    def before_create(self, rt, obj):
        k = rt.key
        if k == ("", "pods"):
            self._pod_defaults(obj)
        elif k == ("", "nodes"):
            self._node_admission(obj)
        elif k == ("", "namespaces"):
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
        elif k == ("", "secrets"):
            obj.setdefault("type", "Opaque")
        elif k == ("policy", "poddisruptionbudgets"):
            obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
        elif k == ("apps", "daemonsets"):
            obj["status"] = {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                             "numberReady": 0}
        elif k in (("apps", "replicasets"), ("apps", "deployments")):
            self._workload_defaults(k[1], obj)
        elif k == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_prepare(obj)
        elif k == ("", "events"):
            obj.setdefault("count", 1)

    def _node_admission(self, obj):
        """kube-apiserver's TaintNodesByCondition admission (plugin/pkg/admission/nodetaint): every new Node gets
        node.kubernetes.io/not-ready:NoSchedule, even one posted Ready; the node lifecycle controller removes it."""
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        taints = spec.get("taints") or []
        if not any(t.get("key") == "node.kubernetes.io/not-ready" and t.get("effect") == "NoSchedule"
                   for t in taints if isinstance(t, dict)):
            spec["taints"] = list(taints) + [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]

    def _workload_defaults(self, plural, obj):
        """apps/v1 SetDefaults_ReplicaSet / SetDefaults_Deployment (the fields the simulator reads)."""
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        if plural == "deployments":
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        obj["status"] = {}

    def _pod_defaults(self, pod):
        spec = pod.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("serviceAccountName", "default")
        tol = spec.setdefault("tolerations", [])
        if isinstance(tol, list):
            for t in NOT_READY_TOLERATIONS:
                if not any(isinstance(x, dict) and x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tol):
                    tol.append(dict(t))
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            if not isinstance(c, dict):
                continue
            img = c.get("image") or ""
            c.setdefault("imagePullPolicy", "Always" if img.endswith(":latest") or ":" not in img.split("/")[-1] else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            res = c.setdefault("resources", {})
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                req = res.setdefault("requests", {})
                for rk, rv in res["limits"].items():
                    req.setdefault(rk, rv)
        pod["status"] = {"phase": "Pending", "qosClass": self._qos(spec)}

    def _qos(self, spec):
        reqs, lims, any_set = [], [], False
        for c in spec.get("containers") or []:
            r = (c.get("resources") or {}) if isinstance(c, dict) else {}
            rq, lm = r.get("requests") or {}, r.get("limits") or {}
            if rq or lm:
                any_set = True
            reqs.append(rq)
            lims.append(lm)
        if not any_set:
            return "BestEffort"
        for rq, lm in zip(reqs, lims):
            for res in ("cpu", "memory"):
                if res not in lm or rq.get(res, lm.get(res)) != lm.get(res):
                    return "Burstable"
        return "Guaranteed"

    # ---- validation ----------------------------------------------------------------
    def decode(self, rt, obj):
        """Type check + unknown-field pruning (400 like a JSON decode error); returns the problems."""
        if rt.key == ("", "secrets"):
            self._secret_normalize(obj)
        if rt.builtin:
            schema_name = self.w.kube_schemas.schema_for(rt.group, rt.version, rt.kind)
            pr = self.w.kube_schemas.validate_builtin(obj, schema_name) if schema_name else k8sschema.Problems()
            if pr.decode:
                raise bad_request('%s in version "%s" cannot be handled as a %s: %s' % (rt.kind, rt.version, rt.kind, pr.decode))
        else:
            self.w.kube_schemas.apply_defaults(obj, rt.crd_schema or {})
            pr = self.w.kube_schemas.validate_crd(obj, rt.crd_schema or {"type": "object",
                                                                          "x-kubernetes-preserve-unknown-fields": True})
        if pr.unknown:
            fv = self.field_validation
            if fv == "Strict":
                raise bad_request("strict decoding error: " + ", ".join('unknown field "%s"' % u for u in pr.unknown))
            if fv != "Ignore":
                self.warnings.extend('unknown field "%s"' % u for u in pr.unknown)
        return pr

    def validate(self, rt, obj, old, pr=None):
        name = obj.get("metadata", {}).get("name", "")
        if pr is None:
            pr = self.decode(rt, obj)
        causes = list(pr.invalid)
        md = obj.get("metadata") or {}
        if old is None and name:
            err = k8sschema.check_name(name, label_only=rt.key == ("", "namespaces"))
            if err and rt.key not in (("", "events"), ("events.k8s.io", "events")):
                causes.append(("metadata.name", "FieldValueInvalid", 'Invalid value: "%s": %s' % (name, err)))
        causes.extend(k8sschema.check_labels(md.get("labels")))
        causes.extend(self._semantic(rt, obj, old))
        if causes:
            raise invalid(rt, name, causes)

    def _secret_normalize(self, obj):
        sd = obj.pop("stringData", None)
        if isinstance(sd, dict):
            data = obj.setdefault("data", {})
            for k, v in sd.items():
                data[k] = base64.b64encode(str(v).encode()).decode()

    def _semantic(self, rt, obj, old):
        out = []
        k = rt.key
        if k == ("", "pods"):
            spec = obj.get("spec") or {}
            for i, c in enumerate(spec.get("containers") or []):
                if isinstance(c, dict) and not c.get("image"):
                    out.append(("spec.containers[%d].image" % i, "FieldValueRequired", "Required value"))
                for part in ("requests", "limits"):
                    for rk, rv in (((c.get("resources") or {}).get(part) or {}) if isinstance(c, dict) else {}).items():
                        try:
                            util.parse_quantity(rv)
                        except ValueError as e:
                            raise bad_request('Pod in version "v1" cannot be handled as a Pod: %s' % e)
            if old is not None and _pod_spec_changed(old.get("spec") or {}, spec):
                out.append(("spec", "FieldValueForbidden",
                            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                            "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                            "(allow it to be set to 1 if it was previously negative)"))
        elif k == ("policy", "poddisruptionbudgets"):
            spec = obj.get("spec") or {}
            if "minAvailable" in spec and "maxUnavailable" in spec:
                out.append(("spec", "FieldValueInvalid", "Invalid value: %s: minAvailable and maxUnavailable cannot be both set"
                            % json.dumps(spec)))
        elif k in (("apps", "daemonsets"), ("apps", "replicasets"), ("apps", "deployments")):
            out.extend(_workload_semantic(obj.get("spec") or {}))
        elif k == ("", "nodes") and old is not None:
            pid_old = (old.get("spec") or {}).get("providerID")
            pid_new = (obj.get("spec") or {}).get("providerID")
            if pid_old and pid_new != pid_old:
                out.append(("spec.providerID", "FieldValueForbidden",
                            "Forbidden: node updates may not change providerID except from \"\" to valid"))
        elif k == ("apiextensions.k8s.io", "customresourcedefinitions"):
            out.extend(self._crd_semantic(obj, old))
        return out

    # ---- CRDs ------------------------------------------------------------------------
    def _crd_prepare(self, obj):
        """A new CRD's status as the registry's PrepareForCreate leaves it (no names accepted, no conditions); with
        crd_establish_seconds 0 the naming and establishing controllers act at once, else later (crd_controllers)."""
        spec = obj.get("spec") or {}
        obj["status"] = {"acceptedNames": {"plural": "", "kind": ""}, "conditions": [], "storedVersions": [
            v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]}
        delay = float(self.w.knob("crd_establish_seconds"))
        if delay > 0:
            self.crd_due[obj["metadata"].get("name", "")] = time.monotonic() + delay
            return
        crd_accept_names(obj)
        crd_establish(obj)

    def crd_controllers(self):
        """apiextensions-apiserver's naming controller (names accepted: NamesAccepted True, Established False
        "Installing"), then on its next turn the establishing controller (Established True), for CRDs whose
        crd_establish_seconds are up. Called by the simulator's controller loop under the world lock."""
        now = time.monotonic()
        rt = self.s.types[("apiextensions.k8s.io", "customresourcedefinitions")]
        for name, due in list(self.crd_due.items()):
            cur = self.s.find("customresourcedefinitions", None, name, "apiextensions.k8s.io")
            if cur is None:
                del self.crd_due[name]
                continue
            if due > now:
                continue
            new = copy.deepcopy(cur)
            if crd_condition(cur, "NamesAccepted"):
                crd_establish(new)
                del self.crd_due[name]
            else:
                crd_accept_names(new)
            self.s._commit(rt, None, name, cur, new)

    def _crd_semantic(self, obj, old):
        out = []
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        name = obj["metadata"].get("name", "")
        want = "%s.%s" % (names.get("plural", ""), spec.get("group", ""))
        if name != want:
            out.append(("metadata.name", "FieldValueInvalid", 'Invalid value: "%s": must be spec.names.plural+"."+spec.group' % name))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            out.append(("spec.scope", "FieldValueNotSupported", 'Unsupported value: "%s": supported values: "Cluster", "Namespaced"'
                        % spec.get("scope")))
        vers = spec.get("versions") or []
        if sum(1 for v in vers if isinstance(v, dict) and v.get("storage")) != 1:
            out.append(("spec.versions", "FieldValueInvalid", "Invalid value: %s: must have exactly one version marked as "
                        "storage version" % json.dumps([v.get("name") for v in vers if isinstance(v, dict)])))
        if old is None and ("", names.get("plural")) in self.s.types and spec.get("group") == "":
            out.append(("spec.group", "FieldValueInvalid", "Invalid value: \"\": should be a domain with at least one dot"))
        return out

    def after_create(self, rt, obj):
        if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_register(obj)

    def after_update(self, rt, new, old):
        if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_register(new)

    def after_delete(self, rt, obj):
        if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            spec = obj.get("spec") or {}
            key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            crt = self.s.types.get(key)
            if crt is not None and not crt.builtin:
                for o in list(self.s.objs[key].values()):
                    self.s.remove(crt, o)
                del self.s.types[key]

    def _crd_register(self, crd):
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        vers = [v for v in spec.get("versions") or [] if v.get("served", True)]
        store = next((v for v in vers if v.get("storage")), vers[0] if vers else None)
        if not store:
            return
        schema = ((store.get("schema") or {}).get("openAPIV3Schema")) or {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}
        schema = copy.deepcopy(schema)
        props = schema.setdefault("properties", {})
        props.setdefault("metadata", {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        props["metadata"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        rt = ResourceType(spec.get("group", ""), store["name"], names.get("plural"), names.get("kind"),
                          spec.get("scope") == "Namespaced", "status" in (store.get("subresources") or {}),
                          builtin=False, short=names.get("shortNames") or [], crd_schema=schema,
                          singular=names.get("singular"))
        self.s.types[rt.key] = rt

    # ---- deletion ----------------------------------------------------------------------
    def grace_period(self, rt, obj, opts):
        if rt.key != ("", "pods"):
            return 0
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        g = opts.get("gracePeriodSeconds")
        if g is None:
            g = spec.get("terminationGracePeriodSeconds", 30)
        return max(int(g), 0) if g is not None else 30

    # ---- binding ----------------------------------------------------------------------------
    def bind(self, ns, name, binding):
        prt = self.s.types[("", "pods")]
        if not name:
            raise invalid(prt, "", [("metadata.name", "FieldValueRequired", "Required value")])
        pod = self.s.get(prt, ns, name)
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise invalid(prt, name, [("target.name", "FieldValueRequired", "Required value")])
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict(prt, name, "pod %s is being deleted, cannot be assigned to a host" % name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise KubeError(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "%s": pod %s is already '
                            'assigned to node "%s"' % (name, name, pod["spec"]["nodeName"]),
                            {"name": name, "kind": "pods/binding"})
        self.bind_pod(pod, target)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind_pod(self, pod, node):
        prt = self.s.types[("", "pods")]
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node
        st = new.setdefault("status", {})
        conds = st.setdefault("conditions", [])
        set_condition(conds, "PodScheduled", "True")
        for c in conds:
            if c["type"] == "PodScheduled":
                c.pop("reason", None)
                c.pop("message", None)
        self.w.report.pod_bound(new, node)
        return self.s._commit(prt, pod["metadata"]["namespace"], pod["metadata"]["name"], pod, new)


def crd_condition(crd, ctype):
    """Whether the CRD's condition ctype is True."""
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def crd_serves(crd):
    """Whether kube-apiserver's CRD handler serves the CRD's custom resources: NamesAccepted or Established True
    (apiextensions-apiserver customresource_handler.go); before that the request goes to the 404 handler."""
    return crd is not None and (crd_condition(crd, "NamesAccepted") or crd_condition(crd, "Established"))


def _set_crd_condition(crd, ctype, status, reason, message):
    conds = crd.setdefault("status", {}).setdefault("conditions", [])
    set_condition(conds, ctype, status, reason, message)
    for c in conds:
        c.pop("lastProbeTime", None)


def crd_accept_names(crd):
    """The naming controller: the requested names accepted, NamesAccepted True, Established False (Installing)."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    if names.get("kind"):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    crd.setdefault("status", {})["acceptedNames"] = names
    _set_crd_condition(crd, "NamesAccepted", "True", "NoConflicts", "no conflicts found")
    if not crd_condition(crd, "Established"):
        _set_crd_condition(crd, "Established", "False", "Installing", "the initial names have been accepted")


def crd_establish(crd):
    """The establishing controller: Established True."""
    _set_crd_condition(crd, "Established", "True", "InitialNamesAccepted", "the initial names have been accepted")


def _workload_semantic(spec):
    """What apps/v1 validation says of a DaemonSet's, ReplicaSet's or Deployment's selector and replicas."""
    out = []
    r = spec.get("replicas")
    if isinstance(r, int) and r < 0:
        out.append(("spec.replicas", "FieldValueInvalid", "Invalid value: %d: must be greater than or equal to 0" % r))
    if not spec.get("selector"):
        out.append(("spec.selector", "FieldValueRequired", "Required value"))
        return out
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not sel.match_label_selector_obj(spec["selector"], labels):
        out.append(("spec.template.metadata.labels", "FieldValueInvalid",
                    "Invalid value: %s: `selector` does not match template `labels`" % json.dumps(labels)))
    return out


def _pod_spec_changed(old, new):
    o, n = copy.deepcopy(old), copy.deepcopy(new)
    for d in (o, n):
        for k in POD_MUTABLE:
            d.pop(k, None)
        for c in (d.get("containers") or []) + (d.get("initContainers") or []):
            if isinstance(c, dict):
                c.pop("image", None)
    return o != n
