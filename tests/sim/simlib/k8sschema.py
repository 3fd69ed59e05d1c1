# Validates Kubernetes objects against ../shared/data/k8s-openapi (built-in kinds) and CRD schemas.
# SPDX-License-Identifier: Apache-2.0
import base64
import binascii
import json
import os
import re
import threading

from . import util

FILES = {
    ("", "v1"): "api__v1_openapi.json",
    ("apps", "v1"): "apis__apps__v1_openapi.json",
    ("policy", "v1"): "apis__policy__v1_openapi.json",
    ("coordination.k8s.io", "v1"): "apis__coordination.k8s.io__v1_openapi.json",
    ("events.k8s.io", "v1"): "apis__events.k8s.io__v1_openapi.json",
    ("apiextensions.k8s.io", "v1"): "apis__apiextensions.k8s.io__v1_openapi.json",
}

_GO_TYPES = {"string": "string", "integer": "int64", "number": "float64", "boolean": "bool",
             "object": "map[string]interface {}", "array": "[]interface {}"}


def _json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class Problems:
    def __init__(self):
        self.decode = None        # first type error (built-ins: 400 BadRequest)
        self.invalid = []         # (field, reason, message) -> 422 Invalid
        self.unknown = []         # unknown field paths


class Schemas:
    def __init__(self, openapi_dir):
        self.dir = openapi_dir
        self.comps = {}
        self.gvk = {}
        self.loaded = set()
        self.lock = threading.Lock()

    def preload(self):
        for gv in FILES:
            self._load(gv)

    def _load(self, gv):
        with self.lock:
            if gv in self.loaded or gv not in FILES:
                return
            with open(os.path.join(self.dir, FILES[gv])) as f:
                doc = json.load(f)
            for name, s in doc.get("components", {}).get("schemas", {}).items():
                self.comps.setdefault(name, s)
                for g in s.get("x-kubernetes-group-version-kind", []):
                    self.gvk.setdefault((g.get("group", ""), g["version"], g["kind"]), name)
            self.loaded.add(gv)

    def schema_for(self, group, version, kind):
        self._load((group, version))
        name = self.gvk.get((group, version, kind))
        return name

    def resolve(self, s):
        seen = 0
        while isinstance(s, dict) and seen < 20:
            seen += 1
            if "$ref" in s:
                s = self.comps.get(s["$ref"].split("/")[-1], {})
            elif "allOf" in s and len(s["allOf"]) == 1 and "type" not in s:
                s = s["allOf"][0]
            else:
                break
        return s or {}

    # ---- validation ------------------------------------------------------
    def validate_builtin(self, obj, schema_name):
        pr = Problems()
        s = self.comps.get(schema_name, {})
        self._check(obj, s, "", pr, schema_name.split(".")[-1], crd=False)
        return pr

    def validate_crd(self, obj, schema):
        pr = Problems()
        self._check(obj, schema or {}, "", pr, "", crd=True)
        return pr

    def _type_error(self, pr, path, value, want, owner, crd):
        if crd:
            pr.invalid.append((path, "FieldValueTypeInvalid",
                               "Invalid value: \"%s\": %s in body must be of type %s: \"%s\"" % (
                                   _json_type(value), path, want, _json_type(value))))
        elif pr.decode is None:
            pr.decode = "json: cannot unmarshal %s into Go struct field %s.%s of type %s" % (
                _json_type(value), owner, path, _GO_TYPES.get(want, want))

    def _check(self, v, s, path, pr, owner, crd):
        if isinstance(s, dict) and not crd:
            ref = s.get("$ref") or (s.get("allOf") or [{}])[0].get("$ref")
            if ref:
                owner = ref.split(".")[-1]
        s = self.resolve(s)
        if v is None:
            return
        if s.get("x-kubernetes-int-or-string"):
            if not isinstance(v, (int, str)) or isinstance(v, bool):
                self._type_error(pr, path, v, "string", owner, crd)
            return
        if "oneOf" in s or "anyOf" in s:
            if not isinstance(v, (int, float, str)) or isinstance(v, bool):
                if not s.get("x-kubernetes-preserve-unknown-fields"):
                    self._type_error(pr, path, v, "string", owner, crd)
            return
        t = s.get("type")
        if t == "object" or (t is None and ("properties" in s or "additionalProperties" in s)):
            if not isinstance(v, dict):
                self._type_error(pr, path, v, "object", owner, crd)
                return
            self._check_object(v, s, path, pr, owner, crd)
        elif t == "array":
            if not isinstance(v, list):
                self._type_error(pr, path, v, "array", owner, crd)
                return
            if crd:
                self._check_limits(v, s, path, pr)
            for i, item in enumerate(v):
                self._check(item, s.get("items", {}), "%s[%d]" % (path, i), pr, owner, crd)
        elif t == "string":
            if not isinstance(v, str):
                self._type_error(pr, path, v, "string", owner, crd)
                return
            if s.get("format") == "byte":
                try:
                    base64.b64decode(v, validate=True)
                except (binascii.Error, ValueError):
                    if pr.decode is None and not crd:
                        pr.decode = "illegal base64 data at input byte %d" % _bad_b64_pos(v)
            if crd:
                self._check_limits(v, s, path, pr)
        elif t == "integer":
            if isinstance(v, bool) or not (isinstance(v, int) or isinstance(v, float) and v.is_integer()):
                self._type_error(pr, path, v, "integer", owner, crd)
            elif crd:
                self._check_limits(v, s, path, pr)
        elif t == "number":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                self._type_error(pr, path, v, "number", owner, crd)
            elif crd:
                self._check_limits(v, s, path, pr)
        elif t == "boolean":
            if not isinstance(v, bool):
                self._type_error(pr, path, v, "boolean", owner, crd)

    def _check_object(self, v, s, path, pr, owner, crd):
        props = s.get("properties") or {}
        ap = s.get("additionalProperties")
        preserve = s.get("x-kubernetes-preserve-unknown-fields")
        for k in list(v):
            p = k if not path else path + "." + k
            if k in props:
                self._check(v[k], props[k], p, pr, owner, crd)
            elif isinstance(ap, dict):
                self._check(v[k], ap, p, pr, owner, crd)
            elif ap is True or preserve or (not props and ap is None and not crd and s.get("type") is None):
                continue
            elif path == "" and k in ("apiVersion", "kind", "metadata"):
                continue
            else:
                pr.unknown.append(p)
                del v[k]
        for r in s.get("required") or []:
            if r not in v or v[r] is None:
                pr.invalid.append((r if not path else path + "." + r, "FieldValueRequired", "Required value"))
        if crd:
            self._check_limits(v, s, path, pr)

    def _check_limits(self, v, s, path, pr):
        if "enum" in s and v not in s["enum"]:
            pr.invalid.append((path, "FieldValueNotSupported", "Unsupported value: %s: supported values: %s" % (
                json.dumps(v), ", ".join(json.dumps(e) for e in s["enum"]))))
        if isinstance(v, str):
            if s.get("maxLength") is not None and len(v) > s["maxLength"]:
                pr.invalid.append((path, "FieldValueTooLong", "Too long: may not be more than %d bytes" % s["maxLength"]))
            if s.get("minLength") is not None and len(v) < s["minLength"]:
                pr.invalid.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be at least %d chars long" % (
                    json.dumps(v), path, s["minLength"])))
            if s.get("pattern"):
                try:
                    if not re.search(s["pattern"], v):
                        pr.invalid.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should match '%s'" % (
                            json.dumps(v), path, s["pattern"])))
                except re.error:
                    pass
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if s.get("minimum") is not None and v < s["minimum"]:
                pr.invalid.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be greater than or equal to %s" % (
                    v, path, s["minimum"])))
            if s.get("maximum") is not None and v > s["maximum"]:
                pr.invalid.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be less than or equal to %s" % (
                    v, path, s["maximum"])))
        if isinstance(v, list):
            if s.get("maxItems") is not None and len(v) > s["maxItems"]:
                pr.invalid.append((path, "FieldValueTooMany", "Too many: %d: must have at most %d items" % (len(v), s["maxItems"])))
            if s.get("minItems") is not None and len(v) < s["minItems"]:
                pr.invalid.append((path, "FieldValueInvalid", "Invalid value: %d: %s in body should have at least %d items" % (
                    len(v), path, s["minItems"])))

    # ---- CRD defaulting --------------------------------------------------
    def apply_defaults(self, v, s):
        if not isinstance(s, dict):
            return
        if isinstance(v, dict):
            for k, ps in (s.get("properties") or {}).items():
                if k not in v and "default" in ps:
                    v[k] = json.loads(json.dumps(ps["default"]))
                if k in v:
                    self.apply_defaults(v[k], ps)
            ap = s.get("additionalProperties")
            if isinstance(ap, dict):
                for k in v:
                    self.apply_defaults(v[k], ap)
        elif isinstance(v, list) and isinstance(s.get("items"), dict):
            for item in v:
                self.apply_defaults(item, s["items"])


def _bad_b64_pos(v):
    for i, c in enumerate(v):
        if not (c.isalnum() or c in "+/="):
            return i
    return len(v)


DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def check_name(name, label_only=False):
    if label_only:
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
        return None
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    return None


def check_labels(labels, field="metadata.labels"):
    errs = []
    for k, v in (labels or {}).items():
        if not isinstance(v, str):
            continue
        name = k.split("/", 1)[-1]
        prefix = k.split("/", 1)[0] if "/" in k else None
        if len(name) > 63 or not QUALIFIED_NAME.match(name) or (prefix is not None and not DNS1123_SUBDOMAIN.match(prefix)):
            errs.append((field, "FieldValueInvalid", "Invalid value: %s: name part must consist of alphanumeric "
                         "characters, '-', '_' or '.', and must start and end with an alphanumeric character" % json.dumps(k)))
        if len(v) > 63 or not LABEL_VALUE.match(v):
            errs.append(("%s" % field, "FieldValueInvalid", "Invalid value: %s: a valid label must be an empty string or "
                         "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                         "alphanumeric character" % json.dumps(v)))
    return errs
