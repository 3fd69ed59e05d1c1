# Kubernetes label selectors (string and LabelSelector objects), field selectors, node affinity terms.
# SPDX-License-Identifier: Apache-2.0
import re


class SelectorError(ValueError):
    pass


_TOKEN = re.compile(r"\s*(!=|==|=|!|,|\(|\)|notin\b|in\b|[^\s,()!=]+)")


def parse_label_selector(s):
    """'a=b,c!=d,e in (x,y),!f,g' -> list of (key, op, values)."""
    reqs = []
    s = (s or "").strip()
    if not s:
        return reqs
    toks = []
    pos = 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m or m.end() == pos:
            raise SelectorError("unable to parse requirement: %s" % s)
        toks.append(m.group(1))
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    i = 0
    while i < len(toks):
        if toks[i] == "!":
            if i + 1 >= len(toks):
                raise SelectorError("unable to parse requirement: %s" % s)
            reqs.append((toks[i + 1], "DoesNotExist", []))
            i += 2
        else:
            key = toks[i]
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append((key, "Exists", []))
            elif toks[i] in ("=", "==", "!="):
                op = "NotIn" if toks[i] == "!=" else "In"
                i += 1
                val = ""
                if i < len(toks) and toks[i] != ",":
                    val = toks[i]
                    i += 1
                reqs.append((key, op, [val]))
            elif toks[i] in ("in", "notin"):
                op = "In" if toks[i] == "in" else "NotIn"
                i += 1
                if i >= len(toks) or toks[i] != "(":
                    raise SelectorError("found '%s', expected: '('" % (toks[i] if i < len(toks) else ""))
                i += 1
                vals = []
                while i < len(toks) and toks[i] != ")":
                    if toks[i] != ",":
                        vals.append(toks[i])
                    i += 1
                if i >= len(toks):
                    raise SelectorError("found '', expected: ')'")
                i += 1
                reqs.append((key, op, vals))
            else:
                raise SelectorError("found '%s', expected: '=', '!=', '==', 'in', notin'" % toks[i])
        if i < len(toks):
            if toks[i] != ",":
                raise SelectorError("found '%s', expected: ','" % toks[i])
            i += 1
    for k, _, _ in reqs:
        if not re.match(r"^([a-z0-9A-Z.\-]+/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$", k):
            raise SelectorError("invalid label key \"%s\"" % k)
    return reqs


def match_reqs(reqs, labels):
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        v = labels.get(key)
        if op == "In" and not (has and v in vals):
            return False
        if op == "NotIn" and has and v in vals:
            return False
        if op == "Exists" and not has:
            return False
        if op == "DoesNotExist" and has:
            return False
        if op in ("Gt", "Lt"):
            try:
                a, b = int(v), int(vals[0])
            except (TypeError, ValueError, IndexError):
                return False
            if op == "Gt" and not a > b or op == "Lt" and not a < b:
                return False
    return True


def label_selector_obj_reqs(sel):
    """metav1.LabelSelector -> reqs. None selects nothing, {} selects everything."""
    reqs = []
    for k, v in (sel.get("matchLabels") or {}).items():
        reqs.append((k, "In", [v]))
    for e in sel.get("matchExpressions") or []:
        reqs.append((e.get("key"), e.get("operator"), e.get("values") or []))
    return reqs


def match_label_selector_obj(sel, labels):
    if sel is None:
        return False
    return match_reqs(label_selector_obj_reqs(sel), labels)


FIELDS = {
    "pods": {"spec.nodeName", "status.phase", "spec.schedulerName", "spec.restartPolicy",
             "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName", "spec.hostNetwork"},
    "nodes": {"spec.unschedulable"},
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    "secrets": {"type"},
    "namespaces": {"status.phase"},
}


def parse_field_selector(s, plural):
    reqs = []
    for part in [x for x in (s or "").split(",") if x.strip()]:
        m = re.match(r"^\s*([^!=\s]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (s, part))
        field = m.group(1)
        if field not in ("metadata.name", "metadata.namespace") and field not in FIELDS.get(plural, set()):
            raise SelectorError("field label not supported: %s" % field)
        reqs.append((field, m.group(2) != "!=", m.group(3)))
    return reqs


def field_value(obj, field):
    cur = obj
    for p in field.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict) and field == "source":
        return cur.get("component", "")
    return str(cur)


def match_fields(reqs, obj):
    for field, eq, val in reqs:
        if (field_value(obj, field) == val) != eq:
            return False
    return True


def match_node_selector_term(term, node):
    """One NodeSelectorTerm (matchExpressions on labels, matchFields on metadata.name)."""
    labels = node.get("metadata", {}).get("labels") or {}
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    reqs = [(e["key"], e["operator"], e.get("values") or []) for e in exprs]
    if not match_reqs(reqs, labels):
        return False
    for f in fields:
        if f.get("key") != "metadata.name":
            return False
        name = node["metadata"]["name"]
        vals = f.get("values") or []
        if f.get("operator") == "In" and name not in vals or f.get("operator") == "NotIn" and name in vals:
            return False
    return True
