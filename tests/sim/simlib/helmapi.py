# What helm and kubectl need from the Kubernetes API beyond what the coordinator uses: the kinds the chart
# creates that the simulator only stores (Service, ServiceAccount, the RBAC kinds; validated against
# k8s-openapi where it has them), and the OpenAPI documents (/openapi/v2 from swagger.json, /openapi/v3 from
# the v3 files) that their client-side validation and field-validation probe download.
# SPDX-License-Identifier: Apache-2.0
import hashlib
import json
import os

from . import k8sschema

STORED_KINDS = [
    ("", "v1", "services", "Service", True, ["svc"]),
    ("", "v1", "serviceaccounts", "ServiceAccount", True, ["sa"]),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, []),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, []),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, []),
]

SYNTH_V3 = [("rbac.authorization.k8s.io", "v1")]


def add_types(types, resource_type):
    """Register STORED_KINDS (those not registered yet) in the store's types."""
    for group, version, plural, kind, namespaced, short in STORED_KINDS:
        if (group, plural) not in types:
            types[(group, plural)] = resource_type(group, version, plural, kind, namespaced, False, short=short)


class OpenAPI:
    def __init__(self, openapi_dir):
        self.dir = openapi_dir
        self.cache = {}

    def _file(self, name):
        if name not in self.cache:
            with open(os.path.join(self.dir, name), "rb") as f:
                data = f.read()
            self.cache[name] = (data, hashlib.sha512(data).hexdigest()[:64].upper())
        return self.cache[name]

    def _synth_v3(self, group, version):
        """An OpenAPI v3 document for a group that only swagger.json covers (rbac): its paths (whose PATCH
        operations list fieldValidation, what kubectl's query-parameter probe looks for) and every schema."""
        key = "synth:%s/%s" % (group, version)
        if key not in self.cache:
            with open(os.path.join(self.dir, "swagger.json")) as f:
                sw = json.load(f)
            prefix = "/apis/%s/%s/" % (group, version)
            doc = {"openapi": "3.0.0", "info": sw.get("info", {}),
                   "paths": {p: v for p, v in sw["paths"].items() if p.startswith(prefix)},
                   "components": {"schemas": sw["definitions"]}}
            data = json.dumps(doc).replace('"#/definitions/', '"#/components/schemas/').encode()
            self.cache[key] = (data, hashlib.sha512(data).hexdigest()[:64].upper())
        return self.cache[key]

    def _v3_docs(self):
        out = {}
        for (group, version), name in k8sschema.FILES.items():
            path = "api/v1" if not group else "apis/%s/%s" % (group, version)
            out[path] = (lambda name=name: self._file("v3/" + name))
        for group, version in SYNTH_V3:
            out["apis/%s/%s" % (group, version)] = (lambda g=group, v=version: self._synth_v3(g, v))
        return out

    def _v3_paths(self):
        return {path: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (path, doc()[1])}
                for path, doc in self._v3_docs().items()}

    def serve(self, req, path):
        """Answer GET /openapi/v2 and /openapi/v3[/group path]; False when path is none of them."""
        if path == "/openapi/v2":
            return req.reply(200, self._file("swagger.json")[0], ctype="application/json")
        if path == "/openapi/v3":
            return req.reply(200, json.dumps({"paths": self._v3_paths()}).encode(), ctype="application/json")
        doc = self._v3_docs().get(path[len("/openapi/v3/"):]) if path.startswith("/openapi/v3/") else None
        return req.reply(200, doc()[0], ctype="application/json") if doc else False


# ---- protobuf request bodies --------------------------------------------------------------------------------
# client-go's typed clients (helm's release storage) send Secrets as application/vnd.kubernetes.protobuf: the
# "k8s\0" magic, then runtime.Unknown {1 typeMeta {1 apiVersion, 2 kind}, 2 raw}. Only Secret is decoded (the
# one kind they send); anything else is 415, as a server without that codec answers.

def _fields(buf):
    i, out = 0, []
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("protobuf: wire type %d" % wt)
        out.append((num, v))
    return out


def _varint(buf, i):
    v = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("protobuf: truncated")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _map(entries):
    out = {}
    for e in entries:
        kv = dict(_fields(e))
        out[kv.get(1, b"").decode()] = kv.get(2, b"")
    return out


def _time(raw):
    import datetime
    secs = dict(_fields(raw)).get(1, 0)
    return datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if secs else None


_META_STR = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}


def _object_meta(raw):
    meta, labels, annotations, finalizers = {}, [], [], []
    for num, v in _fields(raw):
        if num in _META_STR and v:
            meta[_META_STR[num]] = v.decode()
        elif num == 8 and _time(v):
            meta["creationTimestamp"] = _time(v)
        elif num == 11:
            labels.append(v)
        elif num == 12:
            annotations.append(v)
        elif num == 14:
            finalizers.append(v.decode())
    if labels:
        meta["labels"] = {k: x.decode() for k, x in _map(labels).items()}
    if annotations:
        meta["annotations"] = {k: x.decode() for k, x in _map(annotations).items()}
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


def decode_protobuf(body):
    """The JSON form of a protobuf-encoded Secret; ValueError when it is not one (or not protobuf)."""
    import base64
    if not body.startswith(b"k8s\x00"):
        raise ValueError("protobuf: no k8s magic")
    unknown = dict(_fields(body[4:]))
    tm = dict(_fields(unknown.get(1, b"")))
    api_version, kind = tm.get(1, b"").decode(), tm.get(2, b"").decode()
    if (api_version, kind) != ("v1", "Secret"):
        raise ValueError("protobuf: %s %s" % (api_version, kind))
    obj, data, string_data = {"apiVersion": "v1", "kind": "Secret"}, [], []
    for num, v in _fields(unknown.get(2, b"")):
        if num == 1:
            obj["metadata"] = _object_meta(v)
        elif num == 2:
            data.append(v)
        elif num == 3 and v:
            obj["type"] = v.decode()
        elif num == 4:
            string_data.append(v)
        elif num == 5:
            obj["immutable"] = bool(v)
    if data:
        obj["data"] = {k: base64.b64encode(x).decode() for k, x in _map(data).items()}
    if string_data:
        obj["stringData"] = {k: x.decode() for k, x in _map(string_data).items()}
    return obj


# ---- Tables (kubectl get / describe) -----------------------------------------------------------------------
# kubectl asks for application/json;as=Table;v=v1;g=meta.k8s.io. Custom resources get their CRD's
# additionalPrinterColumns (JSONPath), built-in kinds the columns of kube-apiserver's printers; Age cells are
# human durations as the server formats them.

def wants_table(accept):
    for part in (accept or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        if fields[0].lower() in ("application/json", "application/*", "*/*"):
            return params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") == "v1"
    return False


def human_duration(secs):
    """k8s.io/apimachinery's duration.HumanDuration."""
    import time as _t
    if secs < -1:
        return "<invalid>"
    s = int(max(secs, 0))
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm%ds" % (m, s % 60) if s % 60 else "%dm" % m
    if m < 180:
        return "%dm" % m
    h = s // 3600
    if h < 8:
        return "%dh%dm" % (h, m % 60) if m % 60 else "%dh" % h
    if h < 48:
        return "%dh" % h
    d = h // 24
    if h < 24 * 8:
        return "%dd%dh" % (d, h % 24) if h % 24 else "%dd" % d
    if d < 365 * 2:
        return "%dd" % d
    y = d // 365
    del _t
    return "%dy%dd" % (y, d % 365) if y < 8 and d % 365 else "%dy" % y


def _age(ts):
    import calendar
    import time as _t
    if not ts:
        return "<unknown>"
    try:
        then = calendar.timegm(_t.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return "<invalid>"
    return human_duration(_t.time() - then)


def jsonpath(obj, path):
    """The values of a CRD printer-column JSONPath: .a.b, .a[0], .a[*].b, .a[?(@.k=="v")].b."""
    import re
    vals = [obj]
    for tok in re.findall(r'\.([A-Za-z0-9_\-]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_\-]+)\s*==\s*["\']([^"\']*)["\']\)\]', path):
        name, idx, fk, fv = tok
        nxt = []
        for v in vals:
            if name and isinstance(v, dict) and name in v:
                nxt.append(v[name])
            elif idx and isinstance(v, list):
                nxt += v if idx == "*" else v[int(idx):int(idx) + 1]
            elif fk and isinstance(v, list):
                nxt += [x for x in v if isinstance(x, dict) and str(x.get(fk)) == fv]
        vals = nxt
    return vals


def _col(name, typ="string", fmt="", desc="", priority=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc or name, "priority": priority}


def _node_row(o):
    conds = {c.get("type"): c.get("status") for c in o.get("status", {}).get("conditions", [])}
    status = {"True": "Ready", "False": "NotReady"}.get(conds.get("Ready"), "Unknown")
    if o.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in o["metadata"].get("labels", {}) if k.startswith("node-role.kubernetes.io/"))
    return [o["metadata"]["name"], status, ",".join(roles) or "<none>", _age(o["metadata"].get("creationTimestamp")),
            o.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")]


def _pod_row(o):
    st = o.get("status", {})
    cs = st.get("containerStatuses", [])
    total = len(o.get("spec", {}).get("containers", []))
    status = "Terminating" if o["metadata"].get("deletionTimestamp") else st.get("reason") or st.get("phase", "")
    return [o["metadata"]["name"], "%d/%d" % (sum(1 for c in cs if c.get("ready")), total), status,
            sum(c.get("restartCount", 0) for c in cs), _age(o["metadata"].get("creationTimestamp"))]


def _event_row(o):
    inv = o.get("involvedObject", {})
    last = o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")
    return [_age(last), o.get("type", ""), o.get("reason", ""),
            "%s/%s" % (inv.get("kind", "").lower(), inv.get("name", "")), o.get("message", "")]


BUILTIN_COLUMNS = {
    ("", "nodes"): ([_col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version")], _node_row),
    ("", "pods"): ([_col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts", "string"), _col("Age")],
                   _pod_row),
    ("", "events"): ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], _event_row),
}


def _cell(vals, typ):
    if not vals:
        return None
    v = vals[0]
    if typ == "date":
        return _age(v) if isinstance(v, str) else None
    if isinstance(v, (dict, list)):
        import json as _j
        return _j.dumps(v, separators=(",", ":"))
    return v


def table(rt, objs, meta, printer_columns, include_object="Metadata"):
    """A meta.k8s.io/v1 Table of objs. printer_columns: the CRD version's additionalPrinterColumns, or None."""
    if printer_columns is not None:
        cols = [_col("Name", fmt="name", desc="Name must be unique within a namespace.")] + [
            _col(c["name"], c.get("type", "string"), c.get("format", ""), c.get("description", ""), c.get("priority", 0))
            for c in printer_columns]

        def row(o):
            return [o["metadata"]["name"]] + [_cell(jsonpath(o, c["jsonPath"]), c.get("type")) for c in printer_columns]
    elif (rt.group, rt.plural) in BUILTIN_COLUMNS:
        cols, row = BUILTIN_COLUMNS[(rt.group, rt.plural)]
    else:
        cols = [_col("Name", fmt="name"), _col("Age")]

        def row(o):
            return [o["metadata"]["name"], _age(o["metadata"].get("creationTimestamp"))]
    rows = []
    for o in objs:
        if include_object == "Object":
            shown = dict(o, apiVersion=rt.api_version, kind=rt.kind)
        elif include_object == "None":
            shown = None
        else:
            shown = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}
        rows.append({"cells": row(o), "object": shown})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": cols, "rows": rows}
