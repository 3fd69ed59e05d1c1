# JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes strategic merge patch.
# SPDX-License-Identifier: Apache-2.0
import copy


class PatchError(ValueError):
    pass


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise PatchError("unable to find path element %r" % p)
        elif isinstance(cur, dict):
            if p not in cur:
                raise PatchError("missing value at %r" % p)
            cur = cur[p]
        else:
            raise PatchError("cannot traverse %r" % p)
    return cur


def _add(doc, parts, value, replace=False):
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
            return doc
        try:
            i = int(last)
        except ValueError:
            raise PatchError("invalid array index %r" % last)
        if i < 0 or i > len(parent) or (replace and i == len(parent)):
            raise PatchError("array index %d out of bounds" % i)
        if replace:
            parent[i] = value
        else:
            parent.insert(i, value)
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError("replace operation does not apply: doc is missing key: /%s" % "/".join(parts))
        parent[last] = value
    else:
        raise PatchError("cannot add to a scalar")
    return doc


def _remove(doc, parts):
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            raise PatchError("array index %r out of bounds" % last)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    raise PatchError("remove operation does not apply: doc is missing path: /%s" % "/".join(parts))


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError("invalid operation %r" % (op,))
        parts = _ptr(op["path"])
        kind = op["op"]
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise PatchError("testing value %s failed" % op["path"])
        elif kind in ("move", "copy"):
            src = _ptr(op.get("from", ""))
            val = _remove(doc, src) if kind == "move" else copy.deepcopy(_walk(doc, src))
            doc = _add(doc, parts, val)
        else:
            raise PatchError("Unexpected kind: %s" % kind)
    return doc


def strategic_merge(orig, patch, schema, resolve):
    """Strategic merge patch of `patch` onto `orig`; `schema` is an OpenAPI schema (or None)
    and resolve(schema) follows $ref/allOf so list strategies and merge keys are known."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    schema = resolve(schema) if schema else None
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            key = k.split("/", 1)[1]
            if isinstance(result.get(key), list):
                result[key] = [x for x in result[key] if x not in (v or [])]
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            result.pop(k, None)
            continue
        sub = _prop_schema(schema, k, resolve)
        if isinstance(v, list):
            result[k] = _merge_list(result.get(k), v, sub, resolve)
        elif isinstance(v, dict):
            merged = strategic_merge(result.get(k), v, sub, resolve)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        else:
            result[k] = v
    return result


def _prop_schema(schema, key, resolve):
    if not schema:
        return None
    props = schema.get("properties")
    if props and key in props:
        return props[key]
    ap = schema.get("additionalProperties")
    if isinstance(ap, dict):
        return ap
    return None


def _merge_list(orig, patch, schema, resolve):
    rs = resolve(schema) if schema else {}
    strategy = (schema or {}).get("x-kubernetes-patch-strategy") or rs.get("x-kubernetes-patch-strategy") or ""
    key = (schema or {}).get("x-kubernetes-patch-merge-key") or rs.get("x-kubernetes-patch-merge-key")
    if "merge" not in strategy.split(",") or not isinstance(orig, list):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and x.get("$patch"))]
    items = rs.get("items") if rs else None
    if not key:
        out = list(orig)
        for x in patch:
            if x not in out:
                out.append(copy.deepcopy(x))
        return out
    out = [copy.deepcopy(x) for x in orig]
    for x in patch:
        if not isinstance(x, dict):
            continue
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == x.get(key)), None)
        if x.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: copy.deepcopy(v) for k, v in x.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge(out[idx], x, items, resolve)
    return out
