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
