#!/usr/bin/env python3
# coordlib.ControlPlane, the real control plane the tests of a class share: what one test makes (with a coordinator's
# finalizers, Nodes and pods whose kubelets are gone, CSRs, bootstrap tokens, RBAC, Leases, a namespace, Events) is
# gone for the next, and a Cluster refuses to attach to one that is not clean.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402

HOSTS = "pve1=32intel64-2p8co2t+8ve"
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gone-node", "finalizers": ["pvescale.io/test"]}}
LEFT = ["/api/v1/nodes/gone-node", "/api/v1/namespaces/default/pods/bound", "/api/v1/namespaces/scratch",
        "/api/v1/namespaces/kube-public/configmaps/cluster-info",
        "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/scratch",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/scratch",
        cl.GROUP + "/nodepools/default", cl.GROUP + "/proxmoxnodeclasses/default"]


class SharedControlPlaneTest(cl.SharedControlPlaneTest):
    hosts = HOSTS

    def test_a_what_a_test_makes(self):
        c, admin = self.c, self.cp.admin
        self.assertEqual(self.cp.leftovers(), [])
        c.create("/api/v1/nodes", NODE)
        c.create("/api/v1/namespaces/default/pods", cl.pod("bound", nodeName="gone-node"))
        c.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "scratch"}})
        c.create("/api/v1/namespaces/kube-public/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info"}, "data": {}})
        c.create("/api/v1/namespaces/kube-system/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap-token-abcdef"},
            "type": "bootstrap.kubernetes.io/token", "stringData": {"token-id": "abcdef", "token-secret": "0" * 16}})
        c.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "scratch"}})
        c.create("/apis/coordination.k8s.io/v1/namespaces/default/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "scratch"}, "spec": {}})
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
        pool = cl.nodepool()
        pool["metadata"]["finalizers"] = ["pvescale.io/termination"]
        c.create(cl.GROUP + "/nodepools", pool)
        c.create("/api/v1/namespaces/default/events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "bound.1"}, "reason": "Test",
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "bound"}})
        for path in LEFT:
            self.assertEqual(admin.raw("GET", path)[0], 200, path)
        self.assertGreaterEqual(len(self.cp.leftovers()), len(LEFT), self.cp.leftovers())
        # a Cluster refuses a control plane that is not clean
        with self.assertRaisesRegex(AssertionError, "not clean.*gone-node"):
            cl.Cluster(HOSTS, agents=False, kube=self.cp)

    def test_b_the_next_test_sees_none_of_it(self):
        admin = self.cp.admin
        self.assertEqual(self.cp.leftovers(), [])
        for path in LEFT:
            self.assertEqual(admin.raw("GET", path)[0], 404, path)
        self.assertEqual(self.c.items("/api/v1/namespaces/default/events"), [])
        # the kinds stay served for the next test
        self.assertEqual(self.c.items(cl.GROUP + "/nodeclaims"), [])


if __name__ == "__main__":
    unittest.main()
