#!/usr/bin/env python3
# Tests of the simulated apiserver's RBAC authorizer (simlib/rbac.py): request attributes from URLs (verbs, list vs
# get, watch, deletecollection, subresources, fieldSelector metadata.name), rule matching (wildcards, resourceNames,
# "*/sub", nonResourceURLs), RoleBinding to a ClusterRole, ServiceAccount subjects, system:masters, and the 403 text.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import simtest  # noqa: E402
from simlib import rbac  # noqa: E402

SA = "system:serviceaccount:kube-system:pvescale"
GROUPS = rbac.sa_groups("kube-system")


def store(cr_rules, role_rules=None):
    st = {"clusterroles": {"c": {"rules": cr_rules}}, "roles": {}, "rolebindings": [],
          "clusterrolebindings": [{"metadata": {"name": "c"}, "roleRef": {"kind": "ClusterRole", "name": "c"},
                                   "subjects": [{"kind": "ServiceAccount", "name": "pvescale",
                                                 "namespace": "kube-system"}]}]}
    if role_rules is not None:
        st["roles"][("kube-system", "r")] = {"rules": role_rules}
        st["rolebindings"].append({"metadata": {"name": "r", "namespace": "kube-system"},
                                   "roleRef": {"kind": "Role", "name": "r"},
                                   "subjects": [{"kind": "ServiceAccount", "name": "pvescale"}]})
    return st


def can(st, method, path, query=None, user=SA, groups=GROUPS):
    return rbac.allowed(rbac.attrs_for(method, path, query or {}), user, groups, st)


class AttrsTest(unittest.TestCase):
    def test_verbs(self):
        cases = [("GET", "/api/v1/pods", {}, "list"), ("GET", "/api/v1/namespaces/a/pods/p", {}, "get"),
                 ("GET", "/api/v1/pods", {"watch": ["true"]}, "watch"), ("GET", "/api/v1/watch/pods", {}, "watch"),
                 ("DELETE", "/api/v1/namespaces/a/pods", {}, "deletecollection"),
                 ("DELETE", "/api/v1/nodes/n", {}, "delete"), ("PATCH", "/api/v1/nodes/n", {}, "patch"),
                 ("PUT", "/api/v1/nodes/n/status", {}, "update"), ("POST", "/api/v1/namespaces/a/pods", {}, "create")]
        for m, p, q, want in cases:
            self.assertEqual(rbac.attrs_for(m, p, q).verb, want, (m, p, q))

    def test_subresource_and_namespace(self):
        a = rbac.attrs_for("POST", "/api/v1/namespaces/a/pods/p/eviction", {})
        self.assertEqual((a.verb, a.resource, a.sub, a.ns, a.name), ("create", "pods", "eviction", "a", "p"))
        a = rbac.attrs_for("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l", {})
        self.assertEqual((a.group, a.resource, a.ns, a.name), ("coordination.k8s.io", "leases", "kube-system", "l"))

    def test_field_selector_name(self):
        a = rbac.attrs_for("GET", "/api/v1/namespaces/a/configmaps", {"fieldSelector": ["metadata.name=x"]})
        self.assertEqual((a.verb, a.name), ("list", "x"))
        a = rbac.attrs_for("GET", "/api/v1/namespaces/a/configmaps", {"fieldSelector": ["metadata.name!=x"]})
        self.assertEqual(a.name, "")

    def test_nonresource(self):
        a = rbac.attrs_for("GET", "/version", {})
        self.assertFalse(a.resource_request)


class AuthorizeTest(unittest.TestCase):
    def test_masters(self):
        self.assertTrue(can({}, "DELETE", "/api/v1/nodes/n", user="admin", groups=["system:masters"]))

    def test_nothing_bound_denies(self):
        self.assertFalse(can(store([]), "GET", "/api/v1/pods"))

    def test_verbs_groups_resources(self):
        st = store([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
        self.assertTrue(can(st, "GET", "/api/v1/pods"))
        self.assertTrue(can(st, "GET", "/api/v1/namespaces/a/pods/p"))
        self.assertFalse(can(st, "DELETE", "/api/v1/namespaces/a/pods/p"))
        self.assertFalse(can(st, "GET", "/api/v1/nodes"))
        self.assertFalse(can(st, "GET", "/apis/apps/v1/namespaces/a/pods/p"), "other group")
        self.assertFalse(can(st, "POST", "/api/v1/namespaces/a/pods/p/eviction"), "subresource needs its own rule")

    def test_subresource_rules(self):
        st = store([{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                    {"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]}])
        self.assertTrue(can(st, "POST", "/api/v1/namespaces/a/pods/p/eviction"))
        self.assertFalse(can(st, "POST", "/api/v1/namespaces/a/pods"))
        self.assertTrue(can(st, "PATCH", "/api/v1/nodes/n/status"))
        self.assertFalse(can(st, "PATCH", "/api/v1/nodes/n"))

    def test_wildcards(self):
        st = store([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
        self.assertTrue(can(st, "POST", "/api/v1/namespaces/a/pods/p/eviction"))
        self.assertTrue(can(st, "DELETE", "/apis/x.io/v1/things"))
        self.assertFalse(can(st, "GET", "/healthz"), "resource rules do not cover non-resource URLs")

    def test_resource_names(self):
        st = store([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"],
                     "resourceNames": ["cluster-info"]}])
        self.assertTrue(can(st, "GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info"))
        self.assertFalse(can(st, "GET", "/api/v1/namespaces/kube-public/configmaps/other"))
        self.assertFalse(can(st, "GET", "/api/v1/namespaces/kube-public/configmaps"), "unnamed list")
        self.assertTrue(can(st, "GET", "/api/v1/namespaces/kube-public/configmaps",
                            {"fieldSelector": ["metadata.name=cluster-info"]}))
        st = store([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"],
                     "resourceNames": ["l"]}])
        self.assertFalse(can(st, "POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases"),
                         "create has no name: a named rule never allows it")

    def test_nonresource_urls(self):
        st = store([{"nonResourceURLs": ["/healthz", "/metrics/*"], "verbs": ["get"]}])
        self.assertTrue(can(st, "GET", "/healthz"))
        self.assertTrue(can(st, "GET", "/metrics/x"))
        self.assertFalse(can(st, "GET", "/version"))
        self.assertFalse(can(st, "GET", "/api/v1/pods"))

    def test_role_binding_scope(self):
        st = store([], [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
        self.assertTrue(can(st, "GET", "/api/v1/namespaces/kube-system/secrets/s"))
        self.assertFalse(can(st, "GET", "/api/v1/namespaces/default/secrets/s"))
        self.assertFalse(can(st, "GET", "/api/v1/secrets"), "cluster-wide list is outside a RoleBinding")

    def test_rolebinding_to_clusterrole_is_namespaced(self):
        st = store([])
        st["clusterroles"]["view"] = {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}
        st["rolebindings"].append({"metadata": {"name": "v", "namespace": "a"},
                                   "roleRef": {"kind": "ClusterRole", "name": "view"},
                                   "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]})
        self.assertTrue(can(st, "GET", "/api/v1/namespaces/a/pods"))
        self.assertFalse(can(st, "GET", "/api/v1/namespaces/b/pods"))
        self.assertFalse(can(st, "GET", "/api/v1/pods"))

    def test_other_serviceaccount(self):
        st = store([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
        self.assertFalse(can(st, "GET", "/api/v1/pods", user="system:serviceaccount:default:pvescale",
                             groups=rbac.sa_groups("default")))


class MessageTest(unittest.TestCase):
    def test_forbidden_texts(self):
        a = rbac.attrs_for("POST", "/api/v1/namespaces/a/pods/p/eviction", {})
        self.assertEqual(rbac.forbidden_message(a, SA),
                         'pods "p" is forbidden: User "%s" cannot create resource "pods/eviction" '
                         'in API group "" in the namespace "a"' % SA)
        a = rbac.attrs_for("GET", "/api/v1/nodes", {})
        self.assertEqual(rbac.forbidden_message(a, SA),
                         'nodes is forbidden: User "%s" cannot list resource "nodes" in API group "" '
                         'at the cluster scope' % SA)
        a = rbac.attrs_for("GET", "/version", {})
        self.assertEqual(rbac.forbidden_message(a, SA), 'forbidden: User "%s" cannot get path "/version"' % SA)


RBAC = "/apis/rbac.authorization.k8s.io/v1"


class ServedTest(unittest.TestCase):
    """The simulator serves ServiceAccounts, the TokenRequest API and the RBAC objects, and authorizes by them."""

    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def k(self, *a, **kw):
        return self.sim.kube(*a, **kw)

    def ok(self, r, codes=(200, 201)):
        self.assertIn(r.status, codes, r)
        return r.json

    def test_token_and_authorization(self):
        k = self.k
        self.ok(k("POST", "/api/v1/namespaces/kube-system/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "pvescale"}}))
        self.assertEqual(k("POST", "/api/v1/namespaces/kube-system/serviceaccounts/nobody/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}).status, 404)
        tr = self.ok(k("POST", "/api/v1/namespaces/kube-system/serviceaccounts/pvescale/token",
                       {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}))
        tok = tr["status"]["token"]
        self.assertEqual(tr["kind"], "TokenRequest")
        r = k("GET", "/api/v1/nodes", token=tok)
        self.assertEqual(r.status, 403)
        self.assertEqual((r.json["kind"], r.json["reason"], r.json["code"]), ("Status", "Forbidden", 403))
        self.assertEqual(r.json["message"], 'nodes is forbidden: User "%s" cannot list resource "nodes" in API '
                                            'group "" at the cluster scope' % SA)
        self.ok(k("POST", RBAC + "/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                                  "metadata": {"name": "nodes-read"},
                                                  "rules": [{"apiGroups": [""], "resources": ["nodes"],
                                                             "verbs": ["get", "list", "watch"]}]}))
        self.ok(k("POST", RBAC + "/clusterrolebindings",
                  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "nodes-read"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nodes-read"},
                   "subjects": [{"kind": "ServiceAccount", "name": "pvescale", "namespace": "kube-system"}]}))
        self.assertEqual(k("GET", "/api/v1/nodes", token=tok).status, 200)
        self.assertEqual(k("DELETE", "/api/v1/nodes/x", token=tok).status, 403)
        self.assertEqual(k("GET", "/api/v1/nodes", token="bogus").status, 401)
        self.assertEqual(k("GET", "/api/v1/nodes").status, 200, "the admin token stays system:masters")
        denials = self.sim.admin("GET", "/kube-denials").json
        self.assertEqual([(d["user"], d["verb"], d["path"]) for d in denials],
                         [(SA, "list", "/api/v1/nodes"), (SA, "delete", "/api/v1/nodes/x")])


if __name__ == "__main__":
    unittest.main()
