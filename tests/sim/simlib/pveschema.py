# Validates PVE API requests against ../shared/data/pve-api-schema.json, with PVE's error texts.
# SPDX-License-Identifier: Apache-2.0
import ipaddress
import json
import re

# How many instances an array-style key ("net[n]") has, when its description does not say.
ARRAY_MAX = {"numa": 8, "net": 32, "ide": 4, "scsi": 31, "sata": 6, "virtio": 16, "serial": 4,
             "ipconfig": 32, "unused": 256, "usb": 14, "hostpci": 16, "parallel": 3,
             "virtiofs": 10, "mp": 256, "dev": 256, "link": 8, "ring": 8}

_DNS_LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"
_RE = {
    "pve-node": re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$"),
    "dns-name": re.compile(r"^(%s\.)*%s$" % (_DNS_LABEL, _DNS_LABEL)),
    "pve-storage-id": re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.I),
    "pve-configid": re.compile(r"^[a-z][a-z_\-0-9]*$", re.I),
    "pve-poolid": re.compile(r"^[A-Za-z0-9_\-.]+$"),
    "pve-tag": re.compile(r"^[a-z0-9_][a-z0-9_\-+.]*$", re.I),
    "mac-addr": re.compile(r"^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$", re.I),
    "pve-bridge-id": re.compile(r"^[-_.\w\d]+$"),
    "pve-iface": re.compile(r"^[a-zA-Z][a-zA-Z0-9_\-.]*$"),
    "urlencoded": re.compile(r"^[-%a-zA-Z0-9_.!~*'()]*$"),
    "cpuset-part": re.compile(r"^(\d+)(?:-(\d+))?$"),
    "volid": re.compile(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", re.I),
    "disk-size": re.compile(r"^(\d+(\.\d+)?)([KMGT])?$"),
}


def perl_to_python(p):
    """Rewrite Perl-stringified regexes ((?^:..), (?^i:..)) for Python's re."""
    p = p.replace("(?^i:", "(?i:").replace("(?^:", "(?:")
    return p.replace("\\z", "\\Z")


def _split_list(s):
    return [x for x in re.split(r"[;,\s]+", s or "") if x]


def _check_named_format(fmt, value):
    """Returns an error text (PVE wording, without the 'invalid format - ' prefix) or None."""
    if fmt in ("pve-node", "dns-name", "pve-storage-id", "pve-configid", "pve-poolid",
               "mac-addr", "pve-bridge-id", "pve-iface", "urlencoded"):
        if not _RE[fmt].match(value):
            return {
                "pve-node": "value does not look like a valid node name",
                "dns-name": "value does not look like a valid DNS name",
                "pve-storage-id": "storage ID '%s' contains illegal characters" % value,
                "pve-configid": "invalid configuration ID '%s'" % value,
                "pve-poolid": "pool name '%s' contains illegal characters" % value,
                "mac-addr": "value does not look like a valid MAC address",
                "pve-bridge-id": "'%s' is not a valid bridge name" % value,
                "pve-iface": "invalid network interface name '%s'" % value,
                "urlencoded": "unable to parse urlencoded string '%s'" % value,
            }[fmt]
        return None
    if fmt == "pve-cpuset":
        return _check_cpuset(value)
    if fmt == "pve-tag-list":
        tags = _split_list(value)
        if not tags:
            return "no tags given"
        for t in tags:
            if not _RE["pve-tag"].match(t):
                return "invalid tag '%s'" % t
        return None
    if fmt == "pve-configid-list":
        for k in _split_list(value):
            if not _RE["pve-configid"].match(k):
                return "invalid configuration ID '%s'" % k
        return None
    if fmt in ("pve-volume-id", "pve-volume-id-or-qm-path", "pve-volume-id-or-absolute-path"):
        if fmt != "pve-volume-id" and (value.startswith("/") or value in ("none", "cdrom")):
            return None
        if not _RE["volid"].match(value):
            return "unable to parse volume ID '%s'" % value
        return None
    if fmt == "disk-size":
        return None if _RE["disk-size"].match(value) else "unable to parse size '%s'" % value
    if fmt in ("ip", "address", "ipv4", "ipv6"):
        try:
            a = ipaddress.ip_address(value)
        except ValueError:
            return "value does not look like a valid IP address"
        if fmt == "ipv4" and a.version != 4 or fmt == "ipv6" and a.version != 6:
            return "value does not look like a valid IP%s address" % fmt[2:]
        return None
    if fmt == "address-list":
        for a in _split_list(value):
            try:
                ipaddress.ip_address(a)
            except ValueError:
                return "unable to parse address '%s'" % a
        return None
    if fmt == "pve-storage-content":
        ok = ("images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import", "none")
        return None if value in ok else "invalid content type '%s'" % value
    return None  # other named formats are not checked by the simulator


def _check_cpuset(value):
    seen = False
    for part in value.split(","):
        m = _RE["cpuset-part"].match(part)
        if not m:
            return "unable to parse cpuset option"
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a or b >= 8192:
            return "unable to parse cpuset option"
        seen = True
    return None if seen else "unable to parse cpuset option"


def _is_number(v):
    return re.match(r"^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$", v) is not None


def parse_bool(v):
    if re.match(r"^(1|on|yes|true)$", v, re.I):
        return 1
    if re.match(r"^(0|off|no|false)$", v, re.I):
        return 0
    return None


class Validator:
    def __init__(self, schema_path):
        with open(schema_path) as f:
            roots = json.load(f)
        self.paths = {}
        self._pattern_cache = {}

        def walk(n):
            self.paths[n["path"]] = n
            for c in n.get("children", []):
                walk(c)
        for r in roots:
            walk(r)
        self.trie = {}
        for p in self.paths:
            node = self.trie
            for seg in p.strip("/").split("/"):
                key = "{}" if seg.startswith("{") else seg
                node = node.setdefault(key, {})
                if key == "{}":
                    node.setdefault("__names__", set()).add(seg[1:-1])
            node["__path__"] = p

    # ---- path lookup ------------------------------------------------------
    def lookup(self, path):
        """'/nodes/pve1/qemu/100/config' -> ('/nodes/{node}/qemu/{vmid}/config', {'node':..,'vmid':..})."""
        import urllib.parse
        segs = [urllib.parse.unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        res = self._match(self.trie, segs, [])
        if res is None:
            return None, {}
        tpl, values = res
        names = [s[1:-1] for s in tpl.strip("/").split("/") if s.startswith("{")]
        return tpl, dict(zip(names, values))

    def _match(self, node, segs, vals):
        if not segs:
            p = node.get("__path__")
            return (p, vals) if p else None
        s = segs[0]
        if s in node and s != "{}":
            r = self._match(node[s], segs[1:], vals)
            if r:
                return r
        if "{}" in node and s:
            return self._match(node["{}"], segs[1:], vals + [s])
        return None

    def method_info(self, tpl, method):
        return self.paths[tpl].get("info", {}).get(method)

    # ---- parameter validation ---------------------------------------------
    def props(self, info):
        return (info.get("parameters") or {}).get("properties") or {}

    def find_prop(self, props, key):
        if key in props:
            return props[key]
        m = re.match(r"^([a-z]+)(\d+)$", key)
        if m and (m.group(1) + "[n]") in props:
            p = props[m.group(1) + "[n]"]
            limit = ARRAY_MAX.get(m.group(1), 256)
            d = re.search(r"n is 0 to (\d+)", p.get("description", ""))
            if d:
                limit = int(d.group(1)) + 1
            if int(m.group(2)) < limit and str(int(m.group(2))) == m.group(2):
                return p
        return None

    def validate(self, info, params):
        """params: name -> str. Returns errors dict {param: msg} (empty when valid)."""
        props = self.props(info)
        errors = {}
        for k, v in params.items():
            p = self.find_prop(props, k)
            if p is None:
                errors[k] = ("property is not defined in schema and the schema does not "
                             "allow additional properties")
                continue
            err = self.check_prop(p, v, k)
            if err:
                errors[k] = err
            req = p.get("requires")
            if isinstance(req, str) and req not in params:
                errors[req] = "missing property - '%s' requires this property" % k
        for k, p in props.items():
            if "[n]" in k:
                continue
            if not p.get("optional") and k not in params:
                errors[k] = "property is missing and it is not optional"
        return errors

    def check_prop(self, p, v, path):
        if v is None:
            return None
        if not isinstance(v, str):
            v = str(v)
        t = p.get("type")
        if t == "boolean" and parse_bool(v) is None:
            return "type check ('boolean') failed - got '%s'" % v
        if t == "integer" and not re.match(r"^[+-]?\d+$", v):
            return "type check ('integer') failed - got '%s'" % v
        if t == "number" and not _is_number(v):
            return "type check ('number') failed - got '%s'" % v
        fmt = p.get("format")
        if isinstance(fmt, dict):
            err = self.check_property_string(fmt, v, path)
            if err:
                return "invalid format - format error\n" + err
        elif isinstance(fmt, str):
            err = _check_named_format(fmt, v)
            if err:
                return "invalid format - %s\n" % err
        pat = p.get("pattern")
        if pat and not self._pattern(pat).match(v):
            return "value does not match the regex pattern"
        if p.get("maxLength") is not None and len(v) > p["maxLength"]:
            return "value may only be %d characters long" % p["maxLength"]
        if p.get("minLength") is not None and len(v) < p["minLength"]:
            return "value must be at least %d characters long" % p["minLength"]
        if _is_number(v) and t in ("integer", "number"):
            if p.get("maximum") is not None and float(v) > p["maximum"]:
                return "value must have a maximum value of %s" % p["maximum"]
            if p.get("minimum") is not None and float(v) < p["minimum"]:
                return "value must have a minimum value of %s" % p["minimum"]
        if p.get("enum") and v not in [str(e) for e in p["enum"]]:
            return "value '%s' does not have a value in the enumeration '%s'" % (
                v, ", ".join(str(e) for e in p["enum"]))
        return None

    def _pattern(self, pat):
        r = self._pattern_cache.get(pat)
        if r is None:
            r = re.compile("^(?:%s)$" % perl_to_python(pat))
            self._pattern_cache[pat] = r
        return r

    def parse_property_string(self, fmt, value):
        """Returns (dict, error-text or None) like PVE::JSONSchema::parse_property_string."""
        res = {}
        default_key = None
        for part in value.split(","):
            if not part.strip():
                continue
            m = re.match(r"^([^=]+)=(.+)$", part)
            if m:
                k, v = m.group(1), m.group(2)
                if k in res:
                    return res, "duplicate key in comma-separated list property: %s" % k
                sch = fmt.get(k)
                if sch and sch.get("alias"):
                    if sch.get("keyAlias"):
                        res[sch["keyAlias"]] = k
                    k = sch["alias"]
                    sch = fmt.get(k)
                if not sch:
                    return res, "invalid key in comma-separated list property: %s" % k
                res[k] = v
            elif "=" not in part:
                if default_key:
                    return res, "duplicate key in comma-separated list property: %s" % default_key
                for k, sch in fmt.items():
                    if sch.get("default_key"):
                        default_key = k
                        break
                if not default_key:
                    return res, "value without key, but schema does not define a default key"
                if default_key in res:
                    return res, "duplicate key in comma-separated list property: %s" % default_key
                res[default_key] = part
            else:
                return res, "missing key in comma-separated list property"
        return res, None

    def check_property_string(self, fmt, value, path):
        res, err = self.parse_property_string(fmt, value)
        if err:
            return err + "\n"
        lines = []
        for k, sch in fmt.items():
            if sch.get("alias"):
                continue
            sub = "%s.%s" % (path, k)
            if k not in res:
                if not sch.get("optional"):
                    lines.append("%s: property is missing and it is not optional" % sub)
                continue
            e = self.check_prop(sch, res[k], sub)
            if e:
                lines.append("%s: %s" % (sub, e.rstrip("\n")))
        return "".join(l + "\n" for l in lines) if lines else None
