# Kubernetes RBAC authorizer of the simulated apiserver: request attributes from a URL, the rule matching of
# pkg/apis/rbac/v1/evaluation_helpers.go, the subject/binding walk of plugin/pkg/auth/authorizer/rbac/rbac.go,
# and the apiserver's 403 message. Pure: the caller passes the Roles, ClusterRoles and bindings it stores.
# SPDX-License-Identifier: Apache-2.0
import base64
import hmac
import os
import time

VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class Attrs:
    """What the authorizer sees of a request (k8s.io/apiserver authorizer.Attributes)."""

    def __init__(self, verb, group="", resource="", sub="", ns="", name="", path="", resource_request=True):
        self.verb, self.group, self.resource, self.sub = verb, group, resource, sub
        self.ns, self.name, self.path, self.resource_request = ns, name, path, resource_request


def _segs(path):
    return [s for s in path.split("/") if s]


def attrs_for(method, path, query):
    """Request attributes as the apiserver's RequestInfoFactory derives them; query maps names to value lists."""
    segs = _segs(path)
    if segs[:1] == ["api"] and len(segs) >= 2:
        group, rest = "", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 3:
        group, rest = segs[1], segs[3:]
    else:
        return Attrs(method.lower() if method != "HEAD" else "get", path=path, resource_request=False)
    if not rest:
        return Attrs("get", path=path, resource_request=False)
    watch = rest[0] == "watch"
    if watch:
        rest = rest[1:]
    ns = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), (rest[2] if len(rest) > 2 else "")
    if resource == "namespaces" and len(rest) == 2 and not ns:
        ns = name
    verb = VERBS.get(method, method.lower())
    if verb == "get" and not name:
        verb = "list"
    if verb == "delete" and not name:
        verb = "deletecollection"
    if watch or (query.get("watch") or [""])[0] in ("1", "true"):
        verb = "watch"
    if verb in ("list", "watch") and not name:
        # metadata.name field selector narrows a list/watch to one name (rbac resourceNames apply)
        for fs in (query.get("fieldSelector") or [""])[0].split(","):
            k, _, v = fs.partition("=")
            if k.strip() == "metadata.name" and v and "!" not in k:
                name = v.lstrip("=").strip()
    return Attrs(verb, group, resource, sub, ns, name, path)


def _has(values, want):
    return "*" in values or want in values


def _resource_matches(rule, a):
    combined = a.resource + ("/" + a.sub if a.sub else "")
    for r in rule.get("resources") or []:
        if r in ("*", combined):
            return True
        if a.sub and r == "*/" + a.sub:
            return True
    return False


def _nonresource_matches(rule, path):
    for u in rule.get("nonResourceURLs") or []:
        if u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])):
            return True
    return False


def rule_allows(a, rule):
    if not _has(rule.get("verbs") or [], a.verb):
        return False
    if not a.resource_request:
        return _nonresource_matches(rule, a.path)
    if not _has(rule.get("apiGroups") or [], a.group) or not _resource_matches(rule, a):
        return False
    names = rule.get("resourceNames") or []
    return not names or a.name in names


def _subject_matches(subj, user, groups, binding_ns):
    kind = subj.get("kind")
    if kind == "User":
        return subj.get("name") == user
    if kind == "Group":
        return subj.get("name") in groups
    if kind == "ServiceAccount":
        ns = subj.get("namespace") or binding_ns
        return user == "system:serviceaccount:%s:%s" % (ns, subj.get("name"))
    return False


def _rules(ref, ns, roles, clusterroles):
    if ref.get("kind") == "ClusterRole":
        return (clusterroles.get(ref.get("name")) or {}).get("rules") or []
    return (roles.get((ns, ref.get("name"))) or {}).get("rules") or []


def allowed(a, user, groups, store):
    """store: dict with clusterroles {name: obj}, roles {(ns, name): obj}, clusterrolebindings [obj],
    rolebindings [obj]. system:masters is allowed everything, as the apiserver's privileged group authorizer."""
    if "system:masters" in groups:
        return True
    bindings = [(b, "") for b in store.get("clusterrolebindings", [])]
    if a.ns:
        bindings += [(b, a.ns) for b in store.get("rolebindings", [])
                     if (b.get("metadata") or {}).get("namespace") == a.ns]
    for b, ns in bindings:
        if not any(_subject_matches(s, user, groups, ns) for s in b.get("subjects") or []):
            continue
        if any(rule_allows(a, r) for r in _rules(b.get("roleRef") or {}, ns, store.get("roles", {}),
                                                   store.get("clusterroles", {}))):
            return True
    return False


def forbidden_message(a, user):
    """The apiserver's Forbidden text (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters)."""
    if not a.resource_request:
        return 'forbidden: User "%s" cannot %s path "%s"' % (user, a.verb, a.path)
    res = a.resource + ("/" + a.sub if a.sub else "")
    # the head names the group resource (resource.group) without the subresource, as apierrors.NewForbidden does
    gr = a.resource + ("." + a.group if a.group else "")
    head = "%s \"%s\" is forbidden" % (gr, a.name) if a.name else "%s is forbidden" % gr
    msg = '%s: User "%s" cannot %s resource "%s" in API group "%s"' % (head, user, a.verb, res, a.group)
    if a.ns:
        msg += ' in the namespace "%s"' % a.ns
    elif a.resource_request:
        msg += " at the cluster scope"
    return msg


def sa_groups(ns):
    return ["system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"]


RBAC_GROUP = "rbac.authorization.k8s.io"


class Guard:
    """Authentication and authorization of the simulated apiserver: the admin token is system:masters; tokens
    minted by the TokenRequest API are their ServiceAccount's. Denials are kept for GET /kube-denials."""

    def __init__(self, admin_token):
        self.admin_token = admin_token
        self.tokens = {}  # token -> (namespace, name, uid)
        self.denials = []

    def authenticate(self, header):
        """(user, groups) for an Authorization header, or None."""
        if not header.startswith("Bearer "):
            return None
        tok = header[7:].strip()
        if hmac.compare_digest(tok.encode(), self.admin_token.encode()):
            return "admin", ["system:masters", "system:authenticated"]
        sa = self.tokens.get(tok)
        if sa is None:
            return None
        return "system:serviceaccount:%s:%s" % sa[:2], sa_groups(sa[0])

    def _snapshot(self, store):
        def objs(plural):
            return store.objs[(RBAC_GROUP, plural)]
        return {"clusterroles": {k[1]: o for k, o in objs("clusterroles").items()},
                "roles": dict(objs("roles")),
                "clusterrolebindings": list(objs("clusterrolebindings").values()),
                "rolebindings": list(objs("rolebindings").values())}

    def check(self, method, path, query, who, store):
        """None when allowed, else the 403 message (recorded)."""
        user, groups = who
        a = attrs_for(method, path, query)
        if allowed(a, user, groups, self._snapshot(store)):
            return None
        msg = forbidden_message(a, user)
        self.denials.append({"time": time.time(), "user": user, "verb": a.verb, "path": path, "message": msg})
        del self.denials[:-200]
        return msg

    def token_request(self, store, ns, name, body):
        """POST .../serviceaccounts/{name}/token: a TokenRequest with an opaque token for the ServiceAccount."""
        sa = store.objs[("", "serviceaccounts")].get((ns, name))
        if sa is None:
            return None
        tok = base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")
        self.tokens[tok] = (ns, name, sa["metadata"].get("uid"))
        secs = int(((body or {}).get("spec") or {}).get("expirationSeconds") or 3600)
        exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + secs))
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
                "spec": {"audiences": ((body or {}).get("spec") or {}).get("audiences")
                         or ["https://kubernetes.default.svc"], "expirationSeconds": secs, "boundObjectRef": None},
                "status": {"token": tok, "expirationTimestamp": exp}}
