#!/usr/bin/env python3
# Tests of the simulated kube-apiserver: CRUD, validation, 409/410, watch resume, patches, finalizers, PDB, CRDs;
# custom resources served only once their CRD's names are accepted and listed by discovery once it is Established;
# an apiserver restart that ends every watch and answers a resumed one with 410 Gone.
# SPDX-License-Identifier: Apache-2.0
import http.client
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import pod  # noqa: E402

NS = "/api/v1/namespaces/default"


def ready_node(name, cpu="4", memory="8Gi", labels=None, taints=None):
    n = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
         "spec": {},
         "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                    "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}
    n["metadata"]["labels"].setdefault("kubernetes.io/hostname", name)
    if taints:
        n["spec"]["taints"] = taints
    return n


def read_events(resp, n, timeout=10):
    """Read n watch events (JSON lines) from a chunked response."""
    out = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


class KubeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", knobs=["watch_history_size=40",
                                                                         "bookmark_interval_seconds=0.3"])

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def k(self, *a, **kw):
        return self.sim.kube(*a, **kw)

    def test_node_admission_taint(self):
        """TaintNodesByCondition: a new Node, even posted Ready, has the not-ready NoSchedule taint; the node
        lifecycle controller takes it off at its next monitor pass."""
        self.sim.knobs(node_monitor_seconds=3600.0)
        try:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "admitted"},
                    "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            r = self.k("POST", "/api/v1/nodes", node)
            self.assertEqual(r.status, 201, r)
            self.assertEqual([(t["key"], t["effect"]) for t in r.json["spec"]["taints"]],
                             [("dedicated", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoSchedule")])
            time.sleep(0.3)
            self.assertIn("node.kubernetes.io/not-ready",
                          [t["key"] for t in self.k("GET", "/api/v1/nodes/admitted").json["spec"]["taints"]])
        finally:
            self.sim.knobs(node_monitor_seconds=0.0)
        simtest.wait_for(lambda: [t["key"] for t in self.k("GET", "/api/v1/nodes/admitted").json["spec"]
                                  .get("taints", [])] == ["dedicated"], what="not-ready taint removed once Ready")
        self.assertEqual(self.k("DELETE", "/api/v1/nodes/admitted").status, 200)

    def test_auth_and_discovery(self):
        r = self.k("GET", NS + "/pods", token="wrong")
        self.assertEqual(r.status, 401)
        self.assertEqual((r.json["kind"], r.json["reason"]), ("Status", "Unauthorized"))
        names = [g["name"] for g in self.k("GET", "/apis").json["groups"]]
        for g in ("apps", "policy", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"):
            self.assertIn(g, names)
        res = [r["name"] for r in self.k("GET", "/api/v1").json["resources"]]
        for n in ("pods", "pods/eviction", "pods/binding", "pods/status", "nodes", "secrets", "configmaps", "events"):
            self.assertIn(n, res)
        r = self.k("GET", "/api/v1/namespaces/default/widgets")
        self.assertEqual(r.status, 404)

    def test_create_get_list_selectors(self):
        for i, phase_app in enumerate(["sel-a", "sel-b", "sel-c"]):
            p = pod("sel-%d" % i)
            p["metadata"]["labels"] = {"app": phase_app, "tier": "web" if i < 2 else "db"}
            self.assertEqual(self.k("POST", NS + "/pods", p).status, 201)
        r = self.k("GET", NS + "/pods?labelSelector=tier%3Dweb")
        self.assertEqual(sorted(p["metadata"]["name"] for p in r.json["items"]), ["sel-0", "sel-1"])
        self.assertEqual(r.json["kind"], "PodList")
        r = self.k("GET", NS + "/pods?labelSelector=tier+in+(db),app!%3Dsel-a")
        self.assertEqual([p["metadata"]["name"] for p in r.json["items"]], ["sel-2"])
        r = self.k("GET", NS + "/pods?fieldSelector=metadata.name%3Dsel-1")
        self.assertEqual([p["metadata"]["name"] for p in r.json["items"]], ["sel-1"])
        r = self.k("GET", "/api/v1/pods?fieldSelector=status.phase!%3DFailed,metadata.name%3Dsel-2")
        self.assertEqual([p["metadata"]["name"] for p in r.json["items"]], ["sel-2"])
        r = self.k("GET", NS + "/pods?fieldSelector=spec.color%3Dred")
        self.assertEqual(r.status, 400)
        self.assertIn("field label not supported: spec.color", r.json["message"])
        r = self.k("GET", NS + "/pods?limit=2&labelSelector=tier")
        self.assertEqual(len(r.json["items"]), 2)
        r2 = self.k("GET", NS + "/pods?limit=2&labelSelector=tier&continue=" + r.json["metadata"]["continue"])
        self.assertEqual(len(r2.json["items"]), 1)
        r = self.k("POST", NS + "/pods", pod("sel-0"))
        self.assertEqual((r.status, r.json["reason"]), (409, "AlreadyExists"))

    def test_validation_errors_are_status_objects(self):
        r = self.k("POST", NS + "/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "v1"},
                                          "spec": {"containers": [{"image": "x"}]}})
        self.assertEqual(r.status, 422)
        self.assertEqual(r.json["reason"], "Invalid")
        self.assertEqual(r.json["details"]["causes"][0]["field"], "spec.containers[0].name")
        self.assertEqual(r.json["message"], 'Pod "v1" is invalid: spec.containers[0].name: Required value')
        r = self.k("POST", NS + "/pods", {"metadata": {"name": "v2"}, "spec": {"containers": "nope"}})
        self.assertEqual(r.status, 400)
        self.assertIn("cannot unmarshal string into Go struct field PodSpec.spec.containers", r.json["message"])
        r = self.k("POST", NS + "/pods", {"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        self.assertEqual(r.status, 422)
        self.assertEqual(r.json["details"]["causes"][0]["field"], "metadata.name")
        p = pod("v3")
        p["spec"]["colour"] = "blue"
        r = self.k("POST", NS + "/pods?fieldValidation=Strict", p)
        self.assertEqual(r.status, 400)
        self.assertIn('unknown field "spec.colour"', r.json["message"])
        r = self.k("POST", NS + "/pods", p)
        self.assertEqual(r.status, 201)
        self.assertIn("unknown field", r.headers.get("Warning", ""))
        self.assertNotIn("colour", r.json["spec"])
        r = self.k("POST", NS + "/secrets", {"metadata": {"name": "s"}, "data": {"k": "!!notbase64"}})
        self.assertEqual(r.status, 400)
        r = self.k("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases",
                   {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": "long"}})
        self.assertEqual(r.status, 400)

    def test_conflict_on_stale_resource_version(self):
        r = self.k("POST", NS + "/configmaps", {"metadata": {"name": "cm409"}, "data": {"a": "1"}})
        cm = r.json
        cm["data"]["a"] = "2"
        r1 = self.k("PUT", NS + "/configmaps/cm409", cm)
        self.assertEqual(r1.status, 200)
        self.assertNotEqual(r1.json["metadata"]["resourceVersion"], cm["metadata"]["resourceVersion"])
        cm["data"]["a"] = "3"
        r2 = self.k("PUT", NS + "/configmaps/cm409", cm)
        self.assertEqual(r2.status, 409)
        self.assertEqual(r2.json["reason"], "Conflict")
        self.assertIn("the object has been modified", r2.json["message"])
        r3 = self.k("PATCH", NS + "/configmaps/cm409", {"metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]},
                                                        "data": {"a": "4"}}, ctype="application/merge-patch+json")
        self.assertEqual(r3.status, 409)

    def test_watch_resume_bookmarks_and_gone(self):
        r = self.k("POST", NS + "/configmaps", {"metadata": {"name": "w0", "labels": {"w": "1"}}})
        rv0 = r.json["metadata"]["resourceVersion"]
        for i in (1, 2):
            self.k("POST", NS + "/configmaps", {"metadata": {"name": "w%d" % i, "labels": {"w": "1"}}})
        conn, resp = self.sim.watch(NS + "/configmaps?watch=1&labelSelector=w&allowWatchBookmarks=true&resourceVersion=" + rv0)
        evs = read_events(resp, 2)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "w1"), ("ADDED", "w2")])
        self.k("PATCH", NS + "/configmaps/w1", {"data": {"x": "y"}}, ctype="application/merge-patch+json")
        ev = read_events(resp, 1)[0]
        self.assertEqual((ev["type"], ev["object"]["metadata"]["name"]), ("MODIFIED", "w1"))
        last_rv = ev["object"]["metadata"]["resourceVersion"]
        bm = read_events(resp, 1, timeout=5)[0]
        self.assertEqual(bm["type"], "BOOKMARK")
        self.assertGreaterEqual(int(bm["object"]["metadata"]["resourceVersion"]), int(last_rv))
        conn.close()
        # changes while disconnected are delivered on resume
        self.k("DELETE", NS + "/configmaps/w2")
        self.k("PATCH", NS + "/configmaps/w0", {"metadata": {"labels": {"w": None}}}, ctype="application/merge-patch+json")
        conn, resp = self.sim.watch(NS + "/configmaps?watch=1&labelSelector=w&resourceVersion=" + last_rv)
        evs = read_events(resp, 2)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("DELETED", "w2"), ("DELETED", "w0")])
        conn.close()
        # no resourceVersion: the current state as ADDED events
        conn, resp = self.sim.watch(NS + "/configmaps?watch=1&labelSelector=w")
        evs = read_events(resp, 1)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "w1")])
        conn.close()
        # too old: push the history (40 events) past rv0
        for i in range(45):
            self.k("POST", NS + "/configmaps", {"metadata": {"name": "churn-%d" % i}})
        conn, resp = self.sim.watch(NS + "/configmaps?watch=1&resourceVersion=" + rv0)
        self.assertEqual(resp.status, 200)
        ev = read_events(resp, 1)[0]
        self.assertEqual(ev["type"], "ERROR")
        self.assertEqual((ev["object"]["code"], ev["object"]["reason"]), (410, "Expired"))
        self.assertIn("too old resource version", ev["object"]["message"])
        conn.close()
        r = self.k("GET", NS + "/configmaps?resourceVersionMatch=Exact&resourceVersion=" + rv0)
        self.assertEqual((r.status, r.json["reason"]), (410, "Expired"))

    def test_partial_object_metadata(self):
        meta = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"
        r = self.k("POST", NS + "/configmaps", {"metadata": {"name": "pom", "labels": {"p": "1"}}, "data": {"a": "1"}},
                   accept=meta)
        self.assertEqual(r.status, 201)
        self.assertEqual((r.json["kind"], r.json["apiVersion"]), ("PartialObjectMetadata", "meta.k8s.io/v1"))
        self.assertEqual((r.json["metadata"]["name"], r.json["metadata"]["labels"]), ("pom", {"p": "1"}))
        self.assertNotIn("data", r.json)
        conn, resp = self.sim.watch(NS + "/configmaps?watch=1&labelSelector=p&resourceVersion=" +
                                    r.json["metadata"]["resourceVersion"], accept=meta)
        r = self.k("PATCH", NS + "/configmaps/pom", {"data": {"a": "2"}}, ctype="application/merge-patch+json",
                   accept=meta)
        self.assertEqual((r.status, r.json["kind"]), (200, "PartialObjectMetadata"))
        rv = r.json["metadata"]["resourceVersion"]
        ev = read_events(resp, 1)[0]
        conn.close()
        self.assertEqual((ev["type"], ev["object"]["kind"], ev["object"]["metadata"]["resourceVersion"]),
                         ("MODIFIED", "PartialObjectMetadata", rv))
        self.assertEqual(self.k("GET", NS + "/configmaps/pom").json["data"], {"a": "2"})  # the write went whole
        self.assertEqual(self.k("GET", NS + "/configmaps/pom", accept=meta).json["metadata"]["resourceVersion"], rv)
        lst = self.k("GET", NS + "/configmaps?labelSelector=p",
                     accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").json
        self.assertEqual((lst["kind"], [i["kind"] for i in lst["items"]]),
                         ("PartialObjectMetadataList", ["PartialObjectMetadata"]))
        # a list asked for as a single object's representation falls back to the next type offered
        self.assertEqual(self.k("GET", NS + "/configmaps?labelSelector=p", accept=meta).json["kind"], "ConfigMapList")
        r = self.k("GET", NS + "/configmaps/pom", accept="application/json;as=Table;g=meta.k8s.io;v=v1")
        self.assertEqual((r.status, r.json["reason"]), (406, "NotAcceptable"))
        r = self.k("PATCH", NS + "/configmaps/pom", {"data": {"a": "3"}}, ctype="application/merge-patch+json",
                   accept="application/json;as=Table;g=meta.k8s.io;v=v1")
        self.assertEqual((r.status, r.json["reason"]), (406, "NotAcceptable"))
        self.assertEqual(self.k("GET", NS + "/configmaps/pom").json["data"], {"a": "2"})  # refused before the write
        self.assertEqual(self.k("GET", NS + "/configmaps/pom", accept="application/yaml, */*").json["kind"], "ConfigMap")

    def test_watch_delivers_a_burst_whole_and_in_order(self):
        # 300 pods made in one burst queue their events together: the watch must lose, repeat or reorder none of
        # them, nor the event after the burst
        conn, resp = self.sim.watch(NS + "/pods?watch=1&labelSelector=burst")
        names = ["burst-%03d" % i for i in range(300)]
        pods = [pod(n, schedulerName="elsewhere") for n in names]  # no controller of the simulator touches them
        for p in pods:
            p["metadata"]["labels"]["burst"] = "1"
        r = self.sim.admin("POST", "/actions/pods", {"namespace": "default", "pods": pods})
        self.assertEqual(r.status, 201, r)
        self.k("PATCH", NS + "/pods/burst-000", {"metadata": {"annotations": {"after": "burst"}}},
               ctype="application/merge-patch+json")
        evs = read_events(resp, 301)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("ADDED", n) for n in names] + [("MODIFIED", "burst-000")])
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
        self.assertEqual(rvs, sorted(rvs))
        conn.close()

    def test_watch_disconnect_fault(self):
        conn, resp = self.sim.watch(NS + "/secrets?watch=1")
        self.sim.admin("POST", "/actions/disconnect-watches")
        t = time.time()
        while resp.readline():
            self.assertLess(time.time() - t, 5)
        conn.close()

    def test_patches_finalizers_and_deletion(self):
        self.assertEqual(self.k("POST", "/api/v1/nodes", ready_node("patch-node")).status, 201)
        r = self.k("PATCH", "/api/v1/nodes/patch-node", {"metadata": {"labels": {"a": "1"}, "finalizers": ["x/one"]},
                                                         "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
                   ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["metadata"]["labels"]["a"], "1")
        self.assertEqual(r.json["metadata"]["finalizers"], ["x/one"])
        r = self.k("PATCH", "/api/v1/nodes/patch-node", {"metadata": {"finalizers": ["x/two"]}},
                   ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.json["metadata"]["finalizers"], ["x/one", "x/two"])  # merge strategy: union
        r = self.k("PATCH", "/api/v1/nodes/patch-node/status", {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Test"}]}}, ctype="application/strategic-merge-patch+json")
        conds = {c["type"]: c["status"] for c in r.json["status"]["conditions"]}
        self.assertEqual(conds["Ready"], "False")
        r = self.k("DELETE", "/api/v1/nodes/patch-node")
        self.assertEqual(r.status, 200)
        self.assertIn("deletionTimestamp", r.json["metadata"])
        r = self.k("PATCH", "/api/v1/nodes/patch-node", {"metadata": {"finalizers": ["x/one", "x/two", "x/three"]}},
                   ctype="application/merge-patch+json")
        self.assertEqual(r.status, 422)
        r = self.k("PATCH", "/api/v1/nodes/patch-node", [{"op": "test", "path": "/metadata/finalizers/0", "value": "x/one"},
                                                         {"op": "remove", "path": "/metadata/finalizers"}],
                   ctype="application/json-patch+json")
        self.assertEqual(r.status, 200, r)
        r = self.k("GET", "/api/v1/nodes/patch-node")
        self.assertEqual((r.status, r.json["reason"]), (404, "NotFound"))

    def test_pdb_blocks_eviction(self):
        self.k("POST", "/api/v1/nodes", ready_node("pdb-node", labels={"pdb": "yes"}))
        for i in range(2):
            p = pod("guarded-%d" % i, nodeSelector={"pdb": "yes"})
            p["metadata"]["labels"] = {"app": "guarded"}
            p["metadata"]["annotations"] = {"sim.pvescale.io/exit-on-term": "true"}
            self.k("POST", NS + "/pods", p)
        simtest.wait_for(lambda: all(self.k("GET", NS + "/pods/guarded-%d" % i).json["status"]["phase"] == "Running"
                                     for i in range(2)), what="guarded pods running")
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guarded"}}}}
        self.assertEqual(self.k("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", pdb).status, 201)
        ev = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded-0", "namespace": "default"}}
        r = self.k("POST", NS + "/pods/guarded-0/eviction", ev)
        self.assertEqual(r.status, 429)
        self.assertEqual(r.json["reason"], "TooManyRequests")
        self.assertEqual(r.json["message"], "Cannot evict pod as it would violate the pod's disruption budget.")
        self.assertEqual(r.json["details"]["causes"][0]["reason"], "DisruptionBudget")
        simtest.wait_for(lambda: self.k("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/guard")
                         .json.get("status", {}).get("currentHealthy") == 2, what="pdb status")
        self.k("PATCH", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/guard", {"spec": {"minAvailable": 1}},
               ctype="application/merge-patch+json")
        simtest.wait_for(lambda: self.k("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/guard")
                         .json["status"].get("observedGeneration") == 2, what="pdb generation 2 observed")
        r = self.k("POST", NS + "/pods/guarded-0/eviction", ev)
        self.assertEqual(r.status, 201, r)
        r = self.k("POST", NS + "/pods/guarded-1/eviction", dict(ev, metadata={"name": "guarded-1"}))
        self.assertEqual(r.status, 429)
        simtest.wait_for(lambda: self.k("GET", NS + "/pods/guarded-0").status == 404, what="evicted pod gone")

    def test_binding_and_pod_status(self):
        self.k("POST", NS + "/pods", pod("bindme", schedulerName="my-scheduler"))
        node = ready_node("bind-node")
        node["status"]["conditions"][0]["status"] = "False"  # no simulated kubelet runs the pod
        self.k("POST", "/api/v1/nodes", node)
        b = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bindme"},
             "target": {"apiVersion": "v1", "kind": "Node", "name": "bind-node"}}
        r = self.k("POST", NS + "/pods/bindme/binding", b)
        self.assertEqual(r.status, 201, r)
        r = self.k("POST", NS + "/pods/bindme/binding", b)
        self.assertEqual(r.status, 409)
        p = self.k("GET", NS + "/pods/bindme").json
        self.assertEqual(p["spec"]["nodeName"], "bind-node")
        p["status"]["message"] = "hello"
        p["spec"]["activeDeadlineSeconds"] = 5
        r = self.k("PUT", NS + "/pods/bindme/status", p)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json["status"]["message"], "hello")
        self.assertNotIn("activeDeadlineSeconds", r.json["spec"])  # /status ignores spec

    def test_crd_and_custom_resources_with_status(self):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "nodepools.pvescale.io"},
               "spec": {"group": "pvescale.io", "scope": "Cluster",
                        "names": {"plural": "nodepools", "singular": "nodepool", "kind": "NodePool", "listKind": "NodePoolList"},
                        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                          "spec": {"type": "object", "required": ["size"], "properties": {
                                              "size": {"type": "integer", "minimum": 1},
                                              "mode": {"type": "string", "enum": ["pinned", "floating"], "default": "pinned"}}},
                                          "status": {"type": "object", "properties": {"nodes": {"type": "integer"}}}}}}}]}}
        r = self.k("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        self.assertEqual(r.status, 201, r)
        self.assertEqual({c["type"]: c["status"] for c in r.json["status"]["conditions"]}["Established"], "True")
        base = "/apis/pvescale.io/v1/nodepools"
        r = self.k("POST", base, {"apiVersion": "pvescale.io/v1", "kind": "NodePool", "metadata": {"name": "a"},
                                  "spec": {"size": 2}})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.json["spec"]["mode"], "pinned")
        r = self.k("POST", base, {"apiVersion": "pvescale.io/v1", "kind": "NodePool", "metadata": {"name": "b"},
                                  "spec": {"mode": "spread"}})
        self.assertEqual(r.status, 422)
        fields = sorted(c["field"] for c in r.json["details"]["causes"])
        self.assertEqual(fields, ["spec.mode", "spec.size"])
        r = self.k("PATCH", base + "/a/status", {"status": {"nodes": 3}}, ctype="application/merge-patch+json")
        self.assertEqual(r.json["status"]["nodes"], 3)
        r = self.k("PATCH", base + "/a", {"status": {"nodes": 9}, "spec": {"size": 4}}, ctype="application/merge-patch+json")
        self.assertEqual((r.json["status"]["nodes"], r.json["spec"]["size"], r.json["metadata"]["generation"]), (3, 4, 2))
        r = self.k("PATCH", base + "/a", {"spec": {"size": 5}}, ctype="application/strategic-merge-patch+json")
        self.assertEqual(r.status, 415)
        self.assertEqual(len(self.k("GET", base).json["items"]), 1)
        self.assertEqual(self.k("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodepools.pvescale.io").status, 200)
        self.assertEqual(self.k("GET", base).status, 404)

    def test_other_kinds(self):
        r = self.k("POST", NS + "/secrets", {"metadata": {"name": "sd"}, "stringData": {"k": "v"}})
        self.assertEqual(r.json["data"], {"k": "dg=="})
        self.assertNotIn("stringData", r.json)
        lease = {"metadata": {"name": "coord"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}}
        self.assertEqual(self.k("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", lease).status, 201)
        ev = {"metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "R", "action": "A",
              "reportingController": "pvescale", "reportingInstance": "x", "type": "Normal", "note": "n",
              "regarding": {"kind": "Node", "name": "n"}}
        self.assertEqual(self.k("POST", "/apis/events.k8s.io/v1/namespaces/default/events", ev).status, 201)
        ds = {"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}},
                                                      "template": {"metadata": {"labels": {"app": "agent"}},
                                                                   "spec": {"containers": [{"name": "a", "image": "x",
                                                                            "resources": {"requests": {"cpu": "10m"}}}]}}}}
        self.assertEqual(self.k("POST", "/apis/apps/v1/namespaces/kube-system/daemonsets", ds).status, 201)
        self.k("POST", "/api/v1/nodes", ready_node("ds-node"))
        simtest.wait_for(lambda: any(p["spec"].get("nodeName") == "ds-node" for p in
                                     self.k("GET", "/api/v1/namespaces/kube-system/pods?labelSelector=app%3Dagent").json["items"]),
                         what="daemonset pod on ds-node")
        r = self.k("POST", "/api/v1/namespaces", {"metadata": {"name": "gone"}})
        self.assertEqual(r.status, 201)
        self.k("POST", "/api/v1/namespaces/gone/configmaps", {"metadata": {"name": "c"}})
        self.k("DELETE", "/api/v1/namespaces/gone")
        simtest.wait_for(lambda: self.k("GET", "/api/v1/namespaces/gone").status == 404, what="namespace deleted")
        r = self.k("POST", "/api/v1/namespaces/nowhere/configmaps", {"metadata": {"name": "c"}})
        self.assertEqual(r.status, 404)


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def widget_crd():
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.io"},
            "spec": {"group": "example.io", "scope": "Cluster",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


class ApiserverLifecycleTest(unittest.TestCase):
    """CRD establishing (crd_establish_seconds) and an apiserver restart (POST /actions/kube-restart)."""

    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", knobs=["crd_establish_seconds=0.5"])

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def k(self, *a, **kw):
        return self.sim.kube(*a, **kw)

    def test_custom_resources_are_served_once_the_crd_is_established(self):
        rv0 = self.k("GET", CRDS).json["metadata"]["resourceVersion"]
        r = self.k("POST", CRDS, widget_crd())
        self.assertEqual(r.status, 201, r)
        self.assertEqual((r.json["status"]["conditions"], r.json["status"]["acceptedNames"]),
                         ([], {"plural": "", "kind": ""}), "no controller has seen it yet")
        base = "/apis/example.io/v1/widgets"
        for method, path, body in (("GET", base, None), ("GET", base + "/a", None),
                                   ("POST", base, {"apiVersion": "example.io/v1", "kind": "Widget",
                                                   "metadata": {"name": "a"}})):
            r = self.k(method, path, body)
            self.assertEqual((r.status, r.json["reason"], r.json["message"]),
                             (404, "NotFound", "the server could not find the requested resource"), (method, path))
        self.assertNotIn("example.io", [g["name"] for g in self.k("GET", "/apis").json["groups"]])
        self.assertEqual(self.k("GET", "/apis/example.io/v1").status, 404)
        # The naming controller accepts the names (NamesAccepted, Established False "Installing"), then the
        # establishing controller establishes it: two status writes, in that order.
        conn, resp = self.sim.watch(CRDS + "?watch=1&resourceVersion=%s&fieldSelector=metadata.name%%3D%s"
                                    % (rv0, "widgets.example.io"))
        evs = read_events(resp, 3, timeout=5)
        conn.close()
        seen = [(e["type"], {c["type"]: (c["status"], c.get("reason")) for c in e["object"]["status"]["conditions"]})
                for e in evs]
        self.assertEqual(seen, [("ADDED", {}),
                                ("MODIFIED", {"NamesAccepted": ("True", "NoConflicts"),
                                              "Established": ("False", "Installing")}),
                                ("MODIFIED", {"NamesAccepted": ("True", "NoConflicts"),
                                              "Established": ("True", "InitialNamesAccepted")})])
        self.assertEqual(evs[2]["object"]["status"]["acceptedNames"]["kind"], "Widget")
        r = self.k("POST", base, {"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "a"}})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.k("GET", base + "/a").status, 200)
        self.assertIn("example.io", [g["name"] for g in self.k("GET", "/apis").json["groups"]])
        self.assertEqual([x["name"] for x in self.k("GET", "/apis/example.io/v1").json["resources"]], ["widgets"])
        self.assertEqual(self.k("DELETE", CRDS + "/widgets.example.io").status, 200)

    def test_a_restart_ends_watches_and_a_resumed_watch_gets_410(self):
        path = NS + "/configmaps"
        self.assertEqual(self.k("POST", path, {"metadata": {"name": "before"}}).status, 201)
        rv = self.k("GET", path).json["metadata"]["resourceVersion"]
        conn, resp = self.sim.watch(path + "?watch=1&resourceVersion=" + rv)
        self.assertEqual(resp.status, 200)
        r = self.sim.admin("POST", "/actions/kube-restart", {"down_seconds": 0.5})
        self.assertEqual(r.status, 200, r)
        new_rv = r.json["resourceVersion"]
        self.assertGreater(int(new_rv), int(rv))
        self.assertEqual(read_events(resp, 1, timeout=5), [], "the open watch ended without an event")
        conn.close()
        with self.assertRaises((OSError, http.client.HTTPException)):
            self.k("GET", path, timeout=5)  # not listening yet
        time.sleep(0.6)
        conn, resp = self.sim.watch(path + "?watch=1&resourceVersion=" + rv)
        self.assertEqual(resp.status, 200)
        ev = read_events(resp, 1)
        conn.close()
        self.assertEqual(ev[0]["type"], "ERROR", ev)
        self.assertEqual({k: ev[0]["object"].get(k) for k in ("kind", "status", "reason", "code", "message")},
                         {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410,
                          "message": "too old resource version: %s (%s)" % (rv, new_rv)})
        # A relist gives a resourceVersion to watch from again; changes after it are delivered.
        lst = self.k("GET", path).json
        self.assertIn("before", [o["metadata"]["name"] for o in lst["items"]])
        self.assertGreaterEqual(int(lst["metadata"]["resourceVersion"]), int(new_rv))
        conn, resp = self.sim.watch(path + "?watch=1&resourceVersion=" + lst["metadata"]["resourceVersion"])
        self.assertEqual(self.k("POST", path, {"metadata": {"name": "after"}}).status, 201)
        evs = read_events(resp, 1)
        conn.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "after")])


if __name__ == "__main__":
    unittest.main()
