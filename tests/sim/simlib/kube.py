# Simulated kube-apiserver: object store, watch, validation, patches, subresources (HTTPS + bearer token).
# SPDX-License-Identifier: Apache-2.0
import base64
import collections
import copy
import decimal
import json
import os
import queue
import random
import re
import time
import uuid

from . import helmapi
from . import k8sschema
from . import patch as patchmod
from . import rbac
from . import selectors as sel
from . import util


class KubeError(Exception):
    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if not self.reason:
            del s["reason"]
        if self.details:
            s["details"] = self.details
        return s


def not_found(rt, name):
    d = {"name": name, "kind": rt.plural}
    if rt.group:
        d["group"] = rt.group
    return KubeError(404, "NotFound", '%s "%s" not found' % (rt.qualified(), name), d)


def invalid(rt, name, causes):
    msgs = ["%s: %s" % (f, m) if f else m for f, _, m in causes]
    text = msgs[0] if len(msgs) == 1 else "[%s]" % ", ".join(msgs)
    kind = rt.kind if not rt.group or rt.builtin else "%s.%s" % (rt.kind, rt.group)
    d = {"name": name, "kind": rt.kind,
         "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}
    if rt.group:
        d["group"] = rt.group
    return KubeError(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, text), d)


def conflict(rt, name, msg=None):
    d = {"name": name, "kind": rt.plural}
    if rt.group:
        d["group"] = rt.group
    return KubeError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (
        rt.qualified(), name, msg or "the object has been modified; please apply your changes to the "
                                     "latest version and try again"), d)


def bad_request(msg):
    return KubeError(400, "BadRequest", msg)


class ResourceType:
    def __init__(self, group, version, plural, kind, namespaced, has_status, builtin=True,
                 short=(), crd_schema=None, singular=None):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced = namespaced
        self.has_status = has_status
        self.builtin = builtin
        self.short = list(short)
        self.crd_schema = crd_schema
        self.singular = singular or kind.lower()
        self.verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

    @property
    def key(self):
        return (self.group, self.plural)

    @property
    def api_version(self):
        return "%s/%s" % (self.group, self.version) if self.group else self.version

    def qualified(self):
        return "%s.%s" % (self.plural, self.group) if self.group else self.plural


BUILTIN = [
    ResourceType("", "v1", "pods", "Pod", True, True, short=["po"]),
    ResourceType("", "v1", "nodes", "Node", False, True, short=["no"]),
    ResourceType("", "v1", "events", "Event", True, False, short=["ev"]),
    ResourceType("", "v1", "secrets", "Secret", True, False),
    ResourceType("", "v1", "namespaces", "Namespace", False, True, short=["ns"]),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, False, short=["cm"]),
    ResourceType("", "v1", "bindings", "Binding", True, False),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True, short=["pdb"]),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, True, short=["ds"]),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, True, short=["rs"]),
    ResourceType("apps", "v1", "deployments", "Deployment", True, True, short=["deploy"]),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, False),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, False, short=["ev"]),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, False, short=["sa"]),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, False),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, False),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                 False, True, short=["crd", "crds"]),
]

POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


_IMMUTABLE = frozenset((str, int, float, bool, type(None), decimal.Decimal))


def _copy(o):
    """Deep copy of a JSON-like value: dicts and lists are rebuilt, immutable scalars shared, anything else
    goes through copy.deepcopy. Several times faster than copy.deepcopy (no memo, no dispatch table)."""
    t = type(o)
    if t is dict:
        return {k: (v if type(v) in _IMMUTABLE else _copy(v)) for k, v in o.items()}
    if t is list:
        return [v if type(v) in _IMMUTABLE else _copy(v) for v in o]
    if t in _IMMUTABLE:
        return o
    return copy.deepcopy(o)


META_GROUP, META_VERSION = "meta.k8s.io", "v1"


def negotiate_as(accept, want):
    """The representation an Accept header asks for, negotiated as kube-apiserver does: the first media type that
    is JSON (or a wildcard) and either plain, giving None (the object itself), or asking for `want`
    ("PartialObjectMetadata" or "PartialObjectMetadataList") of meta.k8s.io/v1, giving `want`. Media types the
    simulator does not serve (YAML, protobuf) are passed over; when nothing is left and some type asked for another
    representation, 406 NotAcceptable."""
    asked_other = False
    for part in (accept or "*/*").split(","):
        fields = [f.strip() for f in part.split(";")]
        params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        if fields[0].lower() not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return None
        if params["as"] == want and params.get("g") == META_GROUP and params.get("v") == META_VERSION:
            return want
        asked_other = True
    if asked_other:
        raise KubeError(406, "NotAcceptable", "only the following media types are accepted: application/json, "
                        "application/yaml, application/vnd.kubernetes.protobuf")
    return None


def _same(obj):
    return obj


def partial_metadata(obj):
    """obj as PartialObjectMetadata: its metadata alone."""
    return {"kind": "PartialObjectMetadata", "apiVersion": META_GROUP + "/" + META_VERSION,
            "metadata": obj.get("metadata") or {}}


class Watcher:
    def __init__(self, rt, ns, label_reqs, field_reqs):
        self.rt = rt
        self.ns = ns
        self.label_reqs = label_reqs
        self.field_reqs = field_reqs
        self.q = queue.Queue()
        self.closed = False
        self.started = time.time()

    def matches(self, obj):
        if obj is None:
            return False
        md = obj.get("metadata", {})
        if self.ns and md.get("namespace") != self.ns:
            return False
        return sel.match_reqs(self.label_reqs, md.get("labels")) and sel.match_fields(self.field_reqs, obj)


class Store:
    """All Kubernetes objects plus a bounded event history for watches."""

    def __init__(self, world):
        self.w = world
        self.lock = world.lock
        self.rv = 0
        self.objs = collections.defaultdict(dict)
        self.history = collections.deque()
        self.compacted = 0
        self.watchers = []
        self.types = {}
        for rt in BUILTIN:
            self.types[rt.key] = rt
        helmapi.add_types(self.types, ResourceType)
        self.crd_types = {}

    # ---- basics ------------------------------------------------------------
    def next_rv(self):
        self.rv += 1
        return self.rv

    def get(self, rt, ns, name):
        o = self.objs[rt.key].get((ns or "", name))
        if o is None:
            raise not_found(rt, name)
        return o

    def find(self, plural, ns, name, group=""):
        return self.objs[(group, plural)].get((ns or "", name))

    def items(self, plural, group=""):
        return list(self.objs[(group, plural)].values())

    def emit(self, rt, etype, obj, old=None):
        rv = int(obj["metadata"]["resourceVersion"])
        snap = _copy(obj)
        self.history.append((rv, rt.key, etype, snap, _copy(old) if old is not None else None))
        limit = int(self.w.knob("watch_history_size"))
        while len(self.history) > limit:
            self.compacted = self.history.popleft()[0]
        for wt in list(self.watchers):
            if wt.rt.key != rt.key or wt.closed:
                continue
            ev = self._event_for(wt, etype, snap, old)
            if ev:
                wt.q.put(ev)
        self.w.kick()

    def _event_for(self, wt, etype, obj, old):
        now = wt.matches(obj)
        if etype == "MODIFIED" and old is not None and (wt.label_reqs or wt.field_reqs):
            before = wt.matches(old)
            if before and not now:
                return ("DELETED", obj)
            if now and not before:
                return ("ADDED", obj)
        return (etype, obj) if now else None

    # ---- create ------------------------------------------------------------
    def create(self, rt, ns, obj, dry_run=False):
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced:
            if md.get("namespace") and ns and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            ns = ns or md.get("namespace") or "default"
            nso = self.objs[("", "namespaces")].get(("", ns))
            if nso is None:
                raise KubeError(404, "NotFound", 'namespaces "%s" not found' % ns,
                                {"name": ns, "kind": "namespaces"})
            if nso["metadata"].get("deletionTimestamp"):
                raise KubeError(403, "Forbidden", '%s "%s" is forbidden: unable to create new content in namespace %s '
                                "because it is being terminated" % (rt.plural, md.get("name", ""), ns),
                                {"name": md.get("name", ""), "kind": rt.plural})
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        name = md.get("name")
        if not name:
            raise invalid(rt, "", [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")])
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        pr = self.w.kube_hooks.decode(rt, obj)
        self.w.kube_hooks.before_create(rt, obj)
        self.w.kube_hooks.validate(rt, obj, None, pr)
        key = (ns or "", name)
        if key in self.objs[rt.key]:
            d = {"name": name, "kind": rt.plural}
            if rt.group:
                d["group"] = rt.group
            raise KubeError(409, "AlreadyExists", '%s "%s" already exists' % (rt.qualified(), name), d)
        for k in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "selfLink"):
            md.pop(k, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = util.rfc3339()
        md["generation"] = 1
        if dry_run:
            md["resourceVersion"] = str(self.rv)
            return _copy(obj)
        md["resourceVersion"] = str(self.next_rv())
        self.objs[rt.key][key] = obj
        self.emit(rt, "ADDED", obj)
        self.w.kube_hooks.after_create(rt, obj)
        return _copy(obj)

    # ---- update ------------------------------------------------------------
    def update(self, rt, ns, name, new, sub="", check_rv=True, dry_run=False):
        cur = self.get(rt, ns, name)
        md = new.get("metadata")
        if not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        if md.get("name") and md["name"] != name:
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)" % (md["name"], name))
        rv = md.get("resourceVersion")
        if check_rv and rv and rv != cur["metadata"]["resourceVersion"]:
            raise conflict(rt, name)
        if check_rv and not rv and rt.crd_schema is not None and sub == "":
            raise invalid(rt, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                      "Invalid value: 0x0: must be specified for an update")])
        if md.get("uid") and md["uid"] != cur["metadata"]["uid"]:
            raise conflict(rt, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s" % (
                cur["metadata"]["uid"], md["uid"]))
        new["kind"] = rt.kind
        new["apiVersion"] = rt.api_version
        if sub == "status":
            res = _copy(cur)
            if "status" in new:
                res["status"] = new["status"]
            else:
                res.pop("status", None)
            new = res
        else:
            if rt.has_status:
                if "status" in cur:
                    new["status"] = _copy(cur["status"])
                else:
                    new.pop("status", None)
            nmd = new["metadata"]
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if k in cur["metadata"]:
                    nmd[k] = cur["metadata"][k]
                else:
                    nmd.pop(k, None)
            nmd["name"] = name
            if rt.namespaced:
                nmd["namespace"] = ns
            if cur["metadata"].get("deletionTimestamp"):
                added = set(nmd.get("finalizers") or []) - set(cur["metadata"].get("finalizers") or [])
                if added:
                    raise invalid(rt, name, [("metadata.finalizers", "FieldValueForbidden",
                                              "Forbidden: no new finalizers can be added if the object is being deleted, "
                                              "found new finalizers %s" % json.dumps(sorted(added)))])
        self.w.kube_hooks.validate(rt, new, cur)
        return self._commit(rt, ns, name, cur, new, dry_run)

    def _commit(self, rt, ns, name, cur, new, dry_run=False):
        new["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        if _strip_meta(new) == _strip_meta(cur):
            return _copy(cur)
        spec_keys = set(new) | set(cur)
        if any(new.get(k) != cur.get(k) for k in spec_keys if k not in ("metadata", "status", "kind", "apiVersion")):
            new["metadata"]["generation"] = cur["metadata"].get("generation", 1) + 1
        if dry_run:
            return _copy(new)
        new["metadata"]["resourceVersion"] = str(self.next_rv())
        self.objs[rt.key][(ns or "", name)] = new
        self.emit(rt, "MODIFIED", new, cur)
        self.w.kube_hooks.after_update(rt, new, cur)
        self._maybe_finalize(rt, new)
        return _copy(new)

    def patch(self, rt, ns, name, ctype, body, sub="", dry_run=False):
        cur = self.get(rt, ns, name)
        try:
            p = json.loads(body or b"null")
        except ValueError as e:
            raise bad_request("error decoding patch: %s" % e)
        base = _copy(cur)
        try:
            if ctype.startswith("application/merge-patch+json"):
                if not isinstance(p, dict):
                    raise bad_request("json: cannot unmarshal %s into Go value of type map[string]interface {}" % type(p).__name__)
                res = patchmod.merge_patch(base, p)
            elif ctype.startswith("application/strategic-merge-patch+json"):
                if not rt.builtin:
                    raise KubeError(415, "UnsupportedMediaType",
                                    "the body of the request was in an unknown format - accepted media types include: "
                                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
                if not isinstance(p, dict):
                    raise bad_request("unable to decode strategic merge patch")
                schema_name = self.w.kube_schemas.schema_for(rt.group, rt.version, rt.kind)
                sch = {"$ref": "#/components/schemas/" + schema_name} if schema_name else None
                res = patchmod.strategic_merge(base, p, sch, self.w.kube_schemas.resolve)
            elif ctype.startswith("application/json-patch+json"):
                res = patchmod.json_patch(base, p)
            else:
                raise KubeError(415, "UnsupportedMediaType",
                                "the body of the request was in an unknown format - accepted media types include: "
                                "application/json-patch+json, application/merge-patch+json, "
                                "application/apply-patch+yaml, application/strategic-merge-patch+json")
        except patchmod.PatchError as e:
            raise KubeError(422, "Invalid", str(e))
        if not isinstance(res, dict):
            raise bad_request("patch produced a non-object")
        prv = (p.get("metadata") or {}).get("resourceVersion") if isinstance(p, dict) else None
        if prv and prv != cur["metadata"]["resourceVersion"]:
            raise conflict(rt, name)
        res.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.update(rt, ns, name, res, sub, check_rv=False, dry_run=dry_run)

    # ---- delete ------------------------------------------------------------
    def delete(self, rt, ns, name, opts=None, dry_run=False):
        opts = opts or {}
        cur = self.get(rt, ns, name)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
            raise conflict(rt, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s" % (
                pre["uid"], cur["metadata"]["uid"]))
        if pre.get("resourceVersion") and pre["resourceVersion"] != cur["metadata"]["resourceVersion"]:
            raise conflict(rt, name, "Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in "
                                     "object meta: %s" % (pre["resourceVersion"], cur["metadata"]["resourceVersion"]))
        if dry_run:
            return _copy(cur)
        if rt.key == ("", "pods"):
            self.w.report.pod_deleted(cur)
        grace = self.w.kube_hooks.grace_period(rt, cur, opts)
        finalizers = list(cur["metadata"].get("finalizers") or [])
        if rt.key == ("", "namespaces"):
            finalizers = finalizers + ["kubernetes"]
        if (opts.get("propagationPolicy") == "Foreground") and "foregroundDeletion" not in finalizers:
            pass
        if finalizers or grace:
            if cur["metadata"].get("deletionTimestamp"):
                if grace == 0 and cur["metadata"].get("deletionGracePeriodSeconds") != 0:
                    new = _copy(cur)
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    return self._commit(rt, ns, name, cur, new)
                return _copy(cur)
            new = _copy(cur)
            new["metadata"]["deletionTimestamp"] = util.rfc3339(time.time() + (grace or 0))
            new["metadata"]["deletionGracePeriodSeconds"] = grace or 0
            if rt.key == ("", "namespaces"):
                new.setdefault("status", {})["phase"] = "Terminating"
            return self._commit(rt, ns, name, cur, new)
        return self.remove(rt, cur)

    def remove(self, rt, cur):
        key = (cur["metadata"].get("namespace", ""), cur["metadata"]["name"])
        if self.objs[rt.key].get(key) is not cur:
            return _copy(cur)
        del self.objs[rt.key][key]
        gone = _copy(cur)
        gone["metadata"]["resourceVersion"] = str(self.next_rv())
        self.emit(rt, "DELETED", gone)
        self.w.kube_hooks.after_delete(rt, gone)
        return gone

    def _maybe_finalize(self, rt, obj):
        md = obj["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and md.get("deletionGracePeriodSeconds", 0) == 0:
            if rt.key == ("", "namespaces"):
                return
            self.remove(rt, obj)

    # ---- list / watch -------------------------------------------------------
    def list(self, rt, ns, label_reqs, field_reqs):
        out = []
        for (ons, _), o in sorted(self.objs[rt.key].items()):
            if ns and ons != ns:
                continue
            if sel.match_reqs(label_reqs, o["metadata"].get("labels")) and sel.match_fields(field_reqs, o):
                out.append(o)
        return out


def _strip_meta(o):
    c = dict(o)
    md = dict(c.get("metadata") or {})
    md.pop("resourceVersion", None)
    md.pop("managedFields", None)
    c["metadata"] = md
    return c


class KubeApp:
    def __init__(self, world):
        self.w = world
        self.s = world.kube
        self.token = world.kube_token
        self.guard = world.kube_guard = rbac.Guard(world.kube_token)
        self.down_until = 0.0
        self.restarts = 0

    # ---- entry ---------------------------------------------------------------
    def handle(self, req):
        route = self._route_name(req)
        self.w.count("kube", req.method, route)
        if time.time() < self.down_until:
            return req.drop()
        who = self.guard.authenticate(req.headers.get("Authorization") or "")
        if who is None and req.path not in ("/healthz", "/readyz", "/livez", "/version"):
            return req.reply_json(401, KubeError(401, "Unauthorized", "Unauthorized").status())
        if who is not None:
            with self.w.lock:
                denied = self.guard.check(req.method, req.path, req.query, who, self.s)
            if denied:
                return req.reply_json(403, KubeError(403, "Forbidden", denied).status())
        fault = self.w.kube_fault()
        if fault == "timeout":
            time.sleep(float(self.w.knob("timeout_hold_seconds")))
            return req.drop()
        if fault == "error":
            return req.reply_json(500, KubeError(500, "InternalError", "Internal error occurred: simulated fault").status())
        try:
            self._dispatch(req)
        except KubeError as e:
            req.reply_json(e.code, e.status())

    def _route_name(self, req):
        segs = [s for s in req.path.split("/") if s]
        out = []
        i = 0
        if segs[:1] == ["api"]:
            out, i = segs[:2], 2
        elif segs[:1] == ["apis"]:
            out, i = segs[:3], 3
        else:
            return "/" + "/".join(segs)
        rest = segs[i:]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            out += ["namespaces", "{namespace}", rest[2]]
            rest = rest[3:]
        elif rest:
            out.append(rest[0])
            rest = rest[1:]
        if rest:
            out.append("{name}")
            out += rest[1:]
        name = "/" + "/".join(out)
        if req.q1("watch") in ("1", "true"):
            name += "?watch"
        return name

    def _dispatch(self, req):
        p = req.path.rstrip("/") or "/"
        if p in ("/healthz", "/readyz", "/livez"):
            return req.reply(200, "ok", ctype="text/plain")
        if p == "/version":
            return req.reply_json(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0-pvescale-sim",
                                        "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                                        "goVersion": "go1.25", "compiler": "gc", "platform": "linux/amd64"})
        if p == "/api":
            return req.reply_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                        "serverAddress": "127.0.0.1:%d" % self.w.kube_port}]})
        if p == "/apis":
            return req.reply_json(200, self._group_list())
        if p.startswith("/openapi/"):
            return self._openapi(req, p)
        segs = [s for s in p.split("/") if s]
        if segs[0] == "api" and len(segs) >= 2:
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis" and len(segs) >= 3:
            group, version, rest = segs[1], segs[2], segs[3:]
        elif segs[0] == "apis" and len(segs) == 2:
            return self._group(req, segs[1])
        else:
            raise self._404()
        with self.w.lock:
            if not rest:
                return req.reply_json(200, self._resource_list(group, version))
            watch_prefix = rest[0] == "watch"
            if watch_prefix:
                rest = rest[1:]
            ns, plural, name, sub = self._parse_rest(rest)
            rt = self.s.types.get((group, plural))
            if rt is None or rt.version != version or not self._served(rt):
                raise self._404()
        if watch_prefix:
            req.query["watch"] = ["true"]
        if rt.namespaced is False and ns and plural != "namespaces":
            raise self._404()
        return self._resource(req, rt, ns, name, sub)

    def _table(self, req, rt, objs, meta):
        """kubectl's Table: the CRD's additionalPrinterColumns for custom resources, printer columns for built-ins."""
        columns = None
        if not rt.builtin:
            with self.w.lock:
                crd = self.s.find("customresourcedefinitions", None, rt.qualified(), "apiextensions.k8s.io") or {}
            for v in crd.get("spec", {}).get("versions", []):
                if v.get("name") == rt.version:
                    columns = v.get("additionalPrinterColumns", [])
        return req.reply_json(200, helmapi.table(rt, objs, meta, columns, req.q1("includeObject", "Metadata") or "Metadata"))

    def _openapi(self, req, p):
        if not hasattr(self.w, "kube_openapi"):
            self.w.kube_openapi = helmapi.OpenAPI(os.path.dirname(self.w.kube_schemas.dir))
        if self.w.kube_openapi.serve(req, p) is False:
            raise self._404()

    def _crd(self, rt):
        return self.s.find("customresourcedefinitions", None, rt.qualified(), "apiextensions.k8s.io")

    def _served(self, rt):
        """A custom resource is served once its CRD's names are accepted (or it is Established)."""
        from .kubehooks import crd_serves  # kubehooks builds on this module
        return rt.builtin or crd_serves(self._crd(rt))

    def _discovered(self, rt):
        """Discovery lists a custom resource only once its CRD is Established (apiextensions' DiscoveryController)."""
        from .kubehooks import crd_condition
        return rt.builtin or crd_condition(self._crd(rt) or {}, "Established")

    def _404(self):
        return KubeError(404, "NotFound", "the server could not find the requested resource",
                         {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})

    def _parse_rest(self, rest):
        if rest[0] == "namespaces" and len(rest) >= 3:
            return rest[1], rest[2], (rest[3] if len(rest) > 3 else None), "/".join(rest[4:])
        if rest[0] == "namespaces":
            return None, "namespaces", (rest[1] if len(rest) > 1 else None), "/".join(rest[2:])
        return None, rest[0], (rest[1] if len(rest) > 1 else None), "/".join(rest[2:])

    # ---- discovery -----------------------------------------------------------
    def _group_versions(self):
        gv = collections.OrderedDict()
        for rt in self.s.types.values():
            if rt.group and self._discovered(rt):
                gv.setdefault(rt.group, [])
                if rt.version not in gv[rt.group]:
                    gv[rt.group].append(rt.version)
        return gv

    def _group_list(self):
        with self.w.lock:
            gv = self._group_versions()
        groups = []
        for g, vs in gv.items():
            versions = [{"groupVersion": "%s/%s" % (g, v), "version": v} for v in vs]
            groups.append({"name": g, "versions": versions, "preferredVersion": versions[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _group(self, req, group):
        with self.w.lock:
            gv = self._group_versions()
        if group not in gv:
            raise self._404()
        versions = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in gv[group]]
        req.reply_json(200, {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
                             "preferredVersion": versions[0]})

    def _resource_list(self, group, version):
        res = []
        for rt in self.s.types.values():
            if rt.group != group or rt.version != version or not self._discovered(rt):
                continue
            res.append({"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                        "kind": rt.kind, "verbs": rt.verbs, "shortNames": rt.short})
            if rt.has_status:
                res.append({"name": rt.plural + "/status", "singularName": "", "namespaced": rt.namespaced,
                            "kind": rt.kind, "verbs": ["get", "patch", "update"]})
            if rt.plural == "pods":
                res.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                            "version": "v1", "kind": "Eviction", "verbs": ["create"]})
                res.append({"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                            "verbs": ["create"]})
        if not res:
            raise self._404()
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "%s/%s" % (group, version) if group else version, "resources": res}

    # ---- resources -----------------------------------------------------------
    def _body(self, req):
        if (req.headers.get("Content-Type") or "").startswith("application/vnd.kubernetes.protobuf"):
            return self._protobuf_body(req)
        try:
            obj = json.loads(req.body or b"null")
        except ValueError as e:
            raise bad_request("couldn't get version/kind; json parse error: %s" % e)
        if not isinstance(obj, dict):
            raise bad_request("couldn't get version/kind; json parse error: json: cannot unmarshal %s into Go value "
                              "of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string "
                              "\"json:\\\"kind,omitempty\\\"\" }" % type(obj).__name__)
        return obj

    def _protobuf_body(self, req):
        try:
            return helmapi.decode_protobuf(req.body or b"")
        except ValueError as e:
            raise KubeError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - %s" % e)

    def _check_typemeta(self, rt, obj):
        if obj.get("kind") and obj["kind"] != rt.kind:
            raise bad_request("the kind in the data (%s) does not match the expected kind (%s)" % (obj["kind"], rt.kind))
        if obj.get("apiVersion") and obj["apiVersion"] != rt.api_version:
            raise bad_request("the API version in the data (%s) does not match the expected API version (%s)" % (
                obj["apiVersion"], rt.api_version))

    def _resource(self, req, rt, ns, name, sub):
        m = req.method
        dry = "All" in req.query.get("dryRun", [])
        self.w.kube_hooks.field_validation = req.q1("fieldValidation", "Warn") or "Warn"
        self.w.kube_hooks.warnings = []
        if m == "GET" and name is None:
            if req.q1("watch") in ("1", "true"):
                return self._watch(req, rt, ns)
            return self._list(req, rt, ns)
        # Negotiated before anything is done, as kube-apiserver does: a 406 changes nothing.
        want = negotiate_as(req.headers.get("Accept"), "PartialObjectMetadata")
        if rt.plural == "bindings" and m == "POST":
            obj = self._body(req)
            with self.w.lock:
                res = self.w.kube_hooks.bind(ns, (obj.get("metadata") or {}).get("name"), obj)
            return req.reply_json(201, res)
        if m == "GET":
            with self.w.lock:
                o = _copy(self.s.get(rt, ns, name))
            if helmapi.wants_table(req.headers.get("Accept")):
                return self._table(req, rt, [o], {"resourceVersion": o["metadata"].get("resourceVersion", "")})
            return req.reply_json(200, partial_metadata(o) if want else o)
        if m == "POST" and name is None:
            obj = self._body(req)
            self._check_typemeta(rt, obj)
            with self.w.lock:
                res = self.s.create(rt, ns, obj, dry)
            return self._reply_obj(req, 201, res, want)
        if m == "POST" and sub == "eviction" and rt.plural == "pods":
            obj = self._body(req)
            from . import eviction  # eviction.py builds on this module
            with self.w.lock:
                opts = eviction.parse_eviction(self.w, name, obj, req.query.get("dryRun", []))
                try:
                    res = eviction.evict(self.s, ns, name, opts)
                except KubeError as e:
                    self.w.report.eviction(ns, name, e.code)
                    raise
                self.w.report.eviction(ns, name, 201)
            return req.reply_json(201, res)
        if m == "POST" and sub == "token" and rt.plural == "serviceaccounts":
            body = self._body(req)
            with self.w.lock:
                res = self.guard.token_request(self.s, ns, name, body)
            if res is None:
                raise not_found(rt, name)
            return req.reply_json(201, res)
        if m == "POST" and sub == "binding" and rt.plural == "pods":
            obj = self._body(req)
            with self.w.lock:
                res = self.w.kube_hooks.bind(ns, name, obj)
            return req.reply_json(201, res)
        if sub and sub != "status":
            raise self._404()
        if sub == "status" and not rt.has_status:
            raise self._404()
        if m == "PUT":
            obj = self._body(req)
            self._check_typemeta(rt, obj)
            with self.w.lock:
                res = self.s.update(rt, ns, name, obj, sub, dry_run=dry)
            return self._reply_obj(req, 200, res, want)
        if m == "PATCH":
            ctype = (req.headers.get("Content-Type") or "").lower()
            with self.w.lock:
                res = self.s.patch(rt, ns, name, ctype, req.body, sub, dry_run=dry)
            return self._reply_obj(req, 200, res, want)
        if m == "DELETE" and name is not None:
            opts = {}
            if req.body:
                opts = self._body(req)
            if req.q1("gracePeriodSeconds") is not None:
                opts["gracePeriodSeconds"] = int(req.q1("gracePeriodSeconds"))
            if req.q1("propagationPolicy"):
                opts["propagationPolicy"] = req.q1("propagationPolicy")
            with self.w.lock:
                res = self.s.delete(rt, ns, name, opts, dry)
                gone = dry or self.s.objs[rt.key].get((ns or "", name)) is None
            if gone and rt.key not in (("", "pods"), ("", "namespaces")):
                d = {"name": name, "kind": rt.plural, "uid": res["metadata"].get("uid")}
                if rt.group:
                    d["group"] = rt.group
                res = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d}
            return req.reply_json(200, res)
        if m == "DELETE":
            label_reqs, field_reqs = self._selectors(req, rt)
            with self.w.lock:
                for o in self.s.list(rt, ns, label_reqs, field_reqs):
                    self.s.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"], {}, dry)
            return req.reply_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        raise KubeError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _reply_obj(self, req, code, obj, want):
        if want:
            obj = partial_metadata(obj)
        hdrs = {}
        warns = self.w.kube_hooks.warnings
        if warns:
            hdrs["Warning"] = ", ".join('299 - "%s"' % w.replace('"', '\\"') for w in warns)
        req.reply_json(code, obj, headers=hdrs)

    def _selectors(self, req, rt):
        try:
            lr = sel.parse_label_selector(req.q1("labelSelector", ""))
            fr = sel.parse_field_selector(req.q1("fieldSelector", ""), rt.plural)
        except sel.SelectorError as e:
            raise bad_request(str(e))
        return lr, fr

    def _list(self, req, rt, ns):
        want = negotiate_as(req.headers.get("Accept"), "PartialObjectMetadataList")
        lr, fr = self._selectors(req, rt)
        limit = int(req.q1("limit", "0") or 0)
        cont = req.q1("continue")
        rv_param = req.q1("resourceVersion")
        with self.w.lock:
            if rv_param and req.q1("resourceVersionMatch") == "Exact" and rv_param.isdigit() and int(rv_param) < self.s.compacted:
                raise KubeError(410, "Expired", "too old resource version: %s (%d)" % (rv_param, self.s.compacted + 1))
            items = self.s.list(rt, ns, lr, fr)
            start = 0
            if cont:
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont.encode() + b"==="))
                    start, crv = int(tok["start"]), int(tok["rv"])
                except (ValueError, KeyError, TypeError):
                    raise bad_request("continue key is not valid: illegal base64 data")
                if crv < self.s.compacted:
                    raise KubeError(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                    "list result. You can start a new list without the continue parameter, or use the "
                                    "continue token in this response to retrieve the remainder of the results. "
                                    "Continuing with the provided token results in an inconsistent list - objects that "
                                    "were created, modified, or deleted between the time the first chunk was returned "
                                    "and now may show up in the list.")
            rv = self.s.rv
            meta = {"resourceVersion": str(rv)}
            page = items[start:start + limit] if limit else items[start:]
            if limit and start + limit < len(items):
                meta["continue"] = base64.urlsafe_b64encode(json.dumps({"start": start + limit, "rv": rv}).encode()).decode().rstrip("=")
                meta["remainingItemCount"] = len(items) - start - limit
            out = []
            for o in page:
                c = _copy(o)
                if rt.builtin:
                    c.pop("kind", None)
                    c.pop("apiVersion", None)
                out.append(c)
        if helmapi.wants_table(req.headers.get("Accept")):
            return self._table(req, rt, out, meta)
        if want:
            return req.reply_json(200, {"kind": want, "apiVersion": META_GROUP + "/" + META_VERSION, "metadata": meta,
                                        "items": [partial_metadata(o) for o in out]})
        req.reply_json(200, {"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta, "items": out})

    def _watch(self, req, rt, ns):
        shape = partial_metadata if negotiate_as(req.headers.get("Accept"), "PartialObjectMetadata") else _same
        lr, fr = self._selectors(req, rt)
        rv_param = req.q1("resourceVersion") or ""
        bookmarks = req.q1("allowWatchBookmarks") in ("1", "true")
        send_initial = req.q1("sendInitialEvents") in ("1", "true")
        timeout = float(req.q1("timeoutSeconds") or self.w.knob("watch_timeout_seconds"))
        disc = self.w.knob("watch_disconnect_seconds")
        if disc:
            timeout = min(timeout, float(disc))
        wt = Watcher(rt, ns, lr, fr)
        initial = []
        expired = None
        with self.w.lock:
            if rv_param and rv_param != "0" and not send_initial:
                try:
                    rv = int(rv_param)
                except ValueError:
                    raise bad_request('invalid resource version "%s"' % rv_param)
                if rv < self.s.compacted:
                    expired = "too old resource version: %d (%d)" % (rv, self.s.compacted)
                else:
                    for (erv, key, etype, obj, old) in self.s.history:
                        if erv > rv and key == rt.key:
                            ev = self.s._event_for(wt, etype, obj, old)
                            if ev:
                                initial.append(ev)
            else:
                for o in self.s.list(rt, ns, lr, fr):
                    initial.append(("ADDED", _copy(o)))
            if expired is None:
                self.s.watchers.append(wt)
                self.w.watchers_opened += 1
            cur_rv = self.s.rv
        req.start_chunked(200)
        try:
            if expired:
                err = KubeError(410, "Expired", expired).status()
                req.write_chunk(util.json_bytes({"type": "ERROR", "object": err}) + b"\n")
                return
            for etype, obj in initial:
                req.write_chunk(util.json_bytes({"type": etype, "object": shape(obj)}) + b"\n")
            if send_initial and bookmarks:
                req.write_chunk(util.json_bytes({"type": "BOOKMARK", "object": {
                    "kind": rt.kind, "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(cur_rv),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}}) + b"\n")
            self._stream(req, wt, rt, timeout, bookmarks, shape)
        except OSError:
            pass
        finally:
            with self.w.lock:
                wt.closed = True
                if wt in self.s.watchers:
                    self.s.watchers.remove(wt)
            req.end_chunked()

    def _stream(self, req, wt, rt, timeout, bookmarks, shape):
        end = time.time() + timeout
        interval = float(self.w.knob("bookmark_interval_seconds"))
        while not self.w.stopping:
            left = end - time.time()
            if left <= 0 or wt.closed:
                return
            try:
                ev = wt.q.get(timeout=min(left, interval, 0.5))
            except queue.Empty:
                if bookmarks and time.time() - getattr(wt, "last_bm", wt.started) >= interval:
                    with self.w.lock:
                        if wt.q.empty():
                            rv = self.s.rv
                            wt.last_bm = time.time()
                        else:
                            rv = None
                    if rv is not None:
                        req.write_chunk(util.json_bytes({"type": "BOOKMARK", "object": {
                            "kind": rt.kind, "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(rv)}}}) + b"\n")
                continue
            if ev is None:
                return
            etype, obj = ev
            req.write_chunk(util.json_bytes({"type": etype, "object": shape(obj)}) + b"\n")

    def disconnect_watches(self):
        with self.w.lock:
            self._end_watches()

    def _end_watches(self):
        for wt in list(self.s.watchers):
            wt.closed = True
            wt.q.put(None)

    def restart(self, down_seconds=0.0):
        """kube-apiserver restarted: every watch ends; the new watch cache starts empty at etcd's current revision,
        which the restarted apiserver's own writes (its identity Lease, the kubernetes Service's endpoints) have
        moved past every resourceVersion a client holds, so a watch resumed from one gets 410 Gone (the cacher's
        "too old resource version") and the client must list again; for down_seconds requests are dropped
        unanswered, as by an apiserver that is not listening yet."""
        with self.w.lock:
            self.s.rv += 1
            self.s.history.clear()
            self.s.compacted = self.s.rv
            self.down_until = time.time() + float(down_seconds or 0)
            self.restarts += 1
            self._end_watches()
            return {"ok": True, "resourceVersion": str(self.s.rv), "restarts": self.restarts}
