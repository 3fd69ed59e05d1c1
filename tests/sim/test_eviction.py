#!/usr/bin/env python3
# Tests of the simulator's scale-down behaviour: the Eviction API and PDB status as kube-apiserver and the disruption controller keep them, ReplicaSets and Deployments, graceful pod termination, Node deletion and PodGC.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import pod  # noqa: E402
from test_kube import read_events, ready_node  # noqa: E402

NS = "/api/v1/namespaces/default"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
APPS = "/apis/apps/v1/namespaces/default"
EXIT = {"sim.pvescale.io/exit-on-term": "true"}
MERGE = "application/merge-patch+json"


def eviction(name, **extra):
    ev = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}}
    ev.update(extra)
    return ev


def pdb(name, app, **spec):
    spec["selector"] = {"matchLabels": {"app": app}}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec}


class EvictionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def setUp(self):
        self.sim.knobs(disruption_controller=True, pdb_disruption_timeout_seconds=120.0)

    def k(self, *a, **kw):
        return self.sim.kube(*a, **kw)

    def get(self, path):
        return self.k("GET", path).json

    def running(self, node, app, n, annotations=None):
        """n Running pods labelled app=<app> on a new ready node <node>."""
        self.k("POST", "/api/v1/nodes", ready_node(node, labels={"pool": node}))
        for i in range(n):
            p = pod("%s-%d" % (app, i), nodeSelector={"pool": node})
            p["metadata"]["labels"] = {"app": app}
            p["metadata"]["annotations"] = dict(annotations if annotations is not None else EXIT)
            self.assertEqual(self.k("POST", NS + "/pods", p).status, 201)
        simtest.wait_for(lambda: all(self.phase("%s-%d" % (app, i)) == "Running" and self.ready("%s-%d" % (app, i))
                                     for i in range(n)), what="%s pods running" % app)

    def phase(self, name):
        r = self.k("GET", NS + "/pods/" + name)
        return r.json["status"].get("phase") if r.status == 200 else None

    def ready(self, name):
        p = self.get(NS + "/pods/" + name)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))

    def gone(self, name, timeout=15):
        simtest.wait_for(lambda: self.k("GET", NS + "/pods/" + name).status == 404, timeout, what=name + " gone")

    def synced(self, name, **want):
        """The PDB once the disruption controller has observed its generation (and the given status fields)."""
        def ok():
            p = self.get(PDBS + "/" + name)
            st = p.get("status", {})
            return p if st.get("observedGeneration") == p["metadata"]["generation"] and all(
                st.get(k) == v for k, v in want.items()) else None
        return simtest.wait_for(ok, what="pdb %s synced %r" % (name, want))

    def evict(self, name, query="", **extra):
        return self.k("POST", NS + "/pods/%s/eviction%s" % (name, query), eviction(name, **extra))

    # ---- eviction.go ---------------------------------------------------------------------------
    def test_bad_eviction_bodies_change_nothing(self):
        self.running("val-node", "val", 1)
        before = self.get(NS + "/pods/val-0")["metadata"]["resourceVersion"]
        r = self.evict("val-0", deleteOptions={"gracePeriodSeconds": "soon"})
        self.assertEqual((r.status, r.json["reason"]), (400, "BadRequest"), r)
        self.assertIn("gracePeriodSeconds", r.json["message"])
        r = self.k("POST", NS + "/pods/val-0/eviction", eviction("other"))
        self.assertEqual((r.status, r.json["message"]), (400, "name in URL does not match name in Eviction object"))
        r = self.k("POST", NS + "/pods/val-0/eviction", dict(eviction("val-0"), kind="Pod"))
        self.assertEqual(r.status, 400, r)
        r = self.evict("val-0", deleteOptions={"propagationPolicy": "Sideways"})
        self.assertEqual((r.status, r.json["reason"]), (422, "Invalid"), r)
        self.assertEqual(r.json["details"]["causes"][0]["field"], "propagationPolicy")
        r = self.evict("val-0", query="?dryRun=All", deleteOptions={"dryRun": ["Nope"]})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json["details"]["causes"][0]["field"], "dryRun")
        self.assertEqual(self.get(NS + "/pods/val-0")["metadata"]["resourceVersion"], before)
        self.assertEqual(self.evict("missing").status, 404)

    def test_pending_pod_is_deleted_without_pdb_check(self):
        p = pod("pend-0", nodeSelector={"no": "such-node"})
        p["metadata"]["labels"] = {"app": "pend"}
        self.k("POST", NS + "/pods", p)
        self.k("POST", PDBS, pdb("pend", "pend", minAvailable=5))
        r = self.evict("pend-0")
        self.assertEqual((r.status, r.json["status"]), (201, "Success"), r)
        self.gone("pend-0", 2)

    def test_generation_not_observed_negative_and_too_many_disrupted(self):
        self.running("gen-node", "gen", 2)
        self.k("POST", PDBS, pdb("gen", "gen", minAvailable=1))
        self.synced("gen", disruptionsAllowed=1)
        self.sim.knobs(disruption_controller=False)
        self.k("PATCH", PDBS + "/gen", {"spec": {"minAvailable": 0}}, ctype=MERGE)
        r = self.evict("gen-0")
        self.assertEqual((r.status, r.json["reason"]), (429, "TooManyRequests"), r)
        self.assertEqual(r.json["details"]["causes"][0], {"reason": "DisruptionBudget", "message":
                         "The disruption budget gen is still being processed by the server."})
        self.assertEqual(r.json["details"]["retryAfterSeconds"], 10)
        cur = self.get(PDBS + "/gen")
        cur["status"].update(observedGeneration=cur["metadata"]["generation"], disruptionsAllowed=-1)
        self.assertEqual(self.k("PUT", PDBS + "/gen/status", cur).status, 200)
        r = self.evict("gen-0")
        self.assertEqual((r.status, r.json["reason"]), (403, "Forbidden"), r)
        self.assertEqual(r.json["message"], 'poddisruptionbudget.policy "gen" is forbidden: pdb disruptions allowed '
                                            'is negative')
        cur = self.get(PDBS + "/gen")
        cur["status"].update(disruptionsAllowed=5, disruptedPods={"x%d" % i: "2030-01-01T00:00:00Z" for i in range(2001)})
        self.k("PUT", PDBS + "/gen/status", cur)
        r = self.evict("gen-0")
        self.assertEqual(r.status, 403, r)
        self.assertIn("DisruptedPods map too big", r.json["message"])
        self.assertEqual(self.phase("gen-0"), "Running")

    def test_budget_exhausted_then_decremented_and_recorded(self):
        self.running("dec-node", "dec", 3)
        self.k("POST", PDBS, pdb("dec", "dec", minAvailable=1))
        before = self.synced("dec", disruptionsAllowed=2, currentHealthy=3, desiredHealthy=1, expectedPods=3)
        cond = before["status"]["conditions"][0]
        self.assertEqual((cond["type"], cond["status"], cond["reason"]), ("DisruptionAllowed", "True", "SufficientPods"))
        rv = before["metadata"]["resourceVersion"]
        conn, resp = self.sim.watch(PDBS + "?watch=1&resourceVersion=%s&fieldSelector=metadata.name%%3Ddec" % rv)
        self.sim.knobs(disruption_controller=False)  # see the eviction's own write
        r = self.evict("dec-0")
        self.assertEqual((r.status, r.json["status"]), (201, "Success"), r)
        after = self.get(PDBS + "/dec")
        self.assertEqual(after["status"]["disruptionsAllowed"], 1)
        self.assertEqual(list(after["status"]["disruptedPods"]), ["dec-0"])
        self.assertNotEqual(after["metadata"]["resourceVersion"], rv)
        ev = read_events(resp, 1)
        conn.close()
        self.assertEqual((ev[0]["type"], ev[0]["object"]["status"]["disruptionsAllowed"]), ("MODIFIED", 1))
        p = self.get(NS + "/pods/dec-0")
        self.assertIn("deletionTimestamp", p["metadata"])
        dt = [c for c in p["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        self.assertEqual((dt[0]["status"], dt[0]["reason"]), ("True", "EvictionByEvictionAPI"))
        self.assertEqual(self.evict("dec-1").status, 201)
        st = self.get(PDBS + "/dec")["status"]
        self.assertEqual(st["disruptionsAllowed"], 0)
        self.assertEqual([c["status"] for c in st["conditions"]], ["False"])
        r = self.evict("dec-2")
        self.assertEqual((r.status, r.json["message"]), (429, "Cannot evict pod as it would violate the pod's "
                                                               "disruption budget."))
        self.assertEqual(r.json["details"]["causes"][0]["message"],
                         "The disruption budget dec needs 1 healthy pods and has 3 currently")
        self.sim.knobs(disruption_controller=True)
        st = self.synced("dec", currentHealthy=1)["status"]
        self.assertEqual((st["disruptionsAllowed"], "disruptedPods" in st), (0, False))
        self.assertEqual(self.evict("dec-2").status, 429)
        ev = self.sim.admin("GET", "/report").json["evictions"]
        self.assertEqual((ev["default/dec-0"], ev["default/dec-2"]), ({"201": 1}, {"429": 2}))

    def test_disrupted_pods_count_unhealthy_until_the_timeout(self):
        self.running("tmo-node", "tmo", 2)
        self.k("POST", PDBS, pdb("tmo", "tmo", minAvailable=1))
        cur = self.synced("tmo", currentHealthy=2)
        self.sim.knobs(disruption_controller=False, pdb_disruption_timeout_seconds=1.5)
        cur["status"]["disruptedPods"] = {"tmo-0": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.k("PUT", PDBS + "/tmo/status", cur)
        self.sim.knobs(disruption_controller=True)
        st = self.synced("tmo", currentHealthy=1)["status"]
        self.assertEqual((st["disruptionsAllowed"], list(st["disruptedPods"])), (0, ["tmo-0"]))
        st = self.synced("tmo", currentHealthy=2)["status"]
        self.assertEqual((st["disruptionsAllowed"], "disruptedPods" in st), (1, False))

    def test_more_than_one_pdb_is_500(self):
        self.running("two-node", "two", 1)
        self.k("POST", PDBS, pdb("two-a", "two", maxUnavailable=1))
        self.k("POST", PDBS, pdb("two-b", "two", maxUnavailable=1))
        r = self.evict("two-0")
        self.assertEqual((r.status, r.json["status"]), (500, "Failure"), r)
        self.assertEqual(r.json["message"], "This pod has more than one PodDisruptionBudget, which the eviction "
                                            "subresource does not support.")
        self.assertEqual(self.phase("two-0"), "Running")

    def test_dry_run_changes_nothing(self):
        self.running("dry-node", "dry", 2)
        self.k("POST", PDBS, pdb("dry", "dry", minAvailable=1))
        rv = self.synced("dry", disruptionsAllowed=1)["metadata"]["resourceVersion"]
        self.assertEqual(self.evict("dry-0", query="?dryRun=All").status, 201)
        self.assertEqual(self.evict("dry-1", deleteOptions={"dryRun": ["All"]}).status, 201)
        self.assertEqual(self.get(PDBS + "/dry")["metadata"]["resourceVersion"], rv)
        self.assertNotIn("deletionTimestamp", self.get(NS + "/pods/dry-0")["metadata"])

    def test_unhealthy_pod_eviction_policy(self):
        self.running("unh-node", "unh", 2)
        self.running("alw-node", "alw", 2)
        self.k("POST", PDBS, pdb("unh", "unh", minAvailable=1))
        self.k("POST", PDBS, pdb("alw", "alw", minAvailable=2, unhealthyPodEvictionPolicy="AlwaysAllow"))
        self.synced("unh", currentHealthy=2)
        for n in ("unh-node", "alw-node"):  # the kubelet's pods follow their node's readiness
            node = self.get("/api/v1/nodes/" + n)
            node["status"]["conditions"][0]["status"] = "False"
            self.k("PUT", "/api/v1/nodes/%s/status" % n, node)
        simtest.wait_for(lambda: not self.ready("unh-0") and not self.ready("alw-0"), what="pods not ready")
        # IfHealthyBudget: 0 healthy < 1 desired, so the budget decides (and allows nothing)
        self.synced("unh", currentHealthy=0)
        self.assertEqual(self.evict("unh-0").status, 429)
        # AlwaysAllow: a not-ready pod goes whatever the budget says, which is left as it was
        before = self.synced("alw", currentHealthy=0)["status"]
        self.assertEqual(self.evict("alw-0").status, 201)
        self.assertIn("deletionTimestamp", self.get(NS + "/pods/alw-0")["metadata"])
        self.assertNotIn("disruptedPods", self.get(PDBS + "/alw")["status"])
        self.assertEqual(before["disruptionsAllowed"], 0)

    def test_unhealthy_pod_goes_when_the_budget_is_met(self):
        self.running("met-node", "met", 3)
        self.k("POST", PDBS, pdb("met", "met", minAvailable=2))
        self.synced("met", currentHealthy=3)
        self.sim.knobs(disruption_controller=False)  # the status keeps saying 3 healthy
        node = self.get("/api/v1/nodes/met-node")
        node["status"]["conditions"][0]["status"] = "False"
        self.k("PUT", "/api/v1/nodes/met-node/status", node)
        simtest.wait_for(lambda: not self.ready("met-0"), what="met-0 not ready")
        r = self.evict("met-0")  # healthy 3 >= desired 2 in the status: deleted without touching the budget
        self.assertEqual(r.status, 201, r)
        self.assertNotIn("disruptedPods", self.get(PDBS + "/met")["status"])

    # ---- the disruption controller's expected pods ------------------------------------------------
    def test_pdb_of_pods_without_controller_fails_safe(self):
        self.running("bare-node", "bare", 1)
        self.k("POST", PDBS, pdb("bare", "bare", maxUnavailable=1))

        def failed():
            st = self.get(PDBS + "/bare")["status"]
            return st if st.get("conditions") and st["conditions"][0]["reason"] == "SyncFailed" else None
        st = simtest.wait_for(failed, what="SyncFailed")
        self.assertEqual(st["conditions"][0]["message"], 'found no controller ref for pod "bare-0"')
        self.assertEqual(st["disruptionsAllowed"], 0)
        self.assertNotEqual(st.get("observedGeneration"), 1)
        self.assertEqual(self.evict("bare-0").json["details"]["causes"][0]["message"],
                         "The disruption budget bare is still being processed by the server.")

    # ---- ReplicaSet and Deployment -----------------------------------------------------------------
    def deployment(self, name, replicas, node_label):
        tmpl = pod("x", nodeSelector={"zone": node_label})
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}, "annotations": EXIT},
                                      "spec": tmpl["spec"]}}}

    def owned_pods(self, app):
        items = self.get(NS + "/pods?labelSelector=app%3D" + app)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def test_deployment_replicaset_replaces_an_evicted_pod_elsewhere(self):
        self.k("POST", "/api/v1/nodes", ready_node("web-a", labels={"zone": "web"}))
        r = self.k("POST", APPS + "/deployments", self.deployment("web", 2, "web"))
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.json["spec"]["strategy"]["type"], "RollingUpdate")
        rs = simtest.wait_for(lambda: self.get(APPS + "/replicasets")["items"], what="replicaset")
        rs = [x for x in rs if x["metadata"]["name"].startswith("web-")][0]
        h = rs["metadata"]["labels"]["pod-template-hash"]
        self.assertEqual(rs["metadata"]["name"], "web-" + h)
        self.assertEqual(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment")
        simtest.wait_for(lambda: self.get(APPS + "/deployments/web")["status"].get("readyReplicas") == 2,
                         what="deployment ready")
        pods = self.owned_pods("web")
        self.assertEqual(len(pods), 2)
        for p in pods:
            self.assertRegex(p["metadata"]["name"], r"^web-%s-[bcdfghjklmnpqrstvwxz2456789]{5}$" % h)
            ref = p["metadata"]["ownerReferences"][0]
            self.assertEqual((ref["kind"], ref["name"], ref["uid"], ref["controller"]),
                             ("ReplicaSet", rs["metadata"]["name"], rs["metadata"]["uid"], True))
        st = self.get(APPS + "/replicasets/" + rs["metadata"]["name"])["status"]
        self.assertEqual((st["replicas"], st["readyReplicas"]), (2, 2))
        # a PDB by percentage counts the Deployment's scale
        self.k("POST", PDBS, pdb("web", "web", maxUnavailable="50%"))
        self.synced("web", expectedPods=2, desiredHealthy=1, disruptionsAllowed=1)
        # cordon web-a, add web-b: the evicted pod comes back Pending and lands on web-b
        self.k("PATCH", "/api/v1/nodes/web-a", {"spec": {"unschedulable": True}}, ctype=MERGE)
        self.k("POST", "/api/v1/nodes", ready_node("web-b", labels={"zone": "web"}))
        victim = pods[0]["metadata"]["name"]
        self.assertEqual(self.evict(victim).status, 201)
        self.assertEqual(self.evict(pods[1]["metadata"]["name"]).status, 429)
        self.gone(victim)
        new = simtest.wait_for(lambda: [p for p in self.owned_pods("web")
                                        if p["metadata"]["name"] not in (pods[0]["metadata"]["name"],
                                                                         pods[1]["metadata"]["name"])],
                               what="replacement pod")
        self.assertEqual(len(new), 1)
        name = new[0]["metadata"]["name"]
        simtest.wait_for(lambda: self.get(NS + "/pods/" + name)["spec"].get("nodeName") == "web-b"
                         and self.phase(name) == "Running", what="replacement running on web-b")
        self.synced("web", currentHealthy=2, disruptionsAllowed=1)
        # scaling the Deployment down scales its ReplicaSet and deletes a pod
        self.k("PATCH", APPS + "/deployments/web", {"spec": {"replicas": 1}}, ctype=MERGE)
        simtest.wait_for(lambda: len(self.owned_pods("web")) == 1, what="scaled to 1")
        simtest.wait_for(lambda: self.get(APPS + "/deployments/web")["status"].get("replicas") == 1,
                         what="deployment status")
        # deleting the Deployment lets the garbage collector take its ReplicaSet and pods
        self.k("DELETE", APPS + "/deployments/web")
        simtest.wait_for(lambda: not self.owned_pods("web") and not [
            x for x in self.get(APPS + "/replicasets")["items"] if x["metadata"]["name"].startswith("web-")],
            what="dependents collected")

    def test_workload_validation(self):
        d = self.deployment("badsel", 1, "x")
        d["spec"]["selector"] = {"matchLabels": {"app": "other"}}
        r = self.k("POST", APPS + "/deployments", d)
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json["details"]["causes"][0]["field"], "spec.template.metadata.labels")
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "neg"},
              "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "neg"}},
                       "template": {"metadata": {"labels": {"app": "neg"}}, "spec": pod("x")["spec"]}}}
        r = self.k("POST", APPS + "/replicasets", rs)
        self.assertEqual((r.status, r.json["details"]["causes"][0]["field"]), (422, "spec.replicas"))
        self.assertEqual(self.k("GET", APPS + "/replicasets/neg").status, 404)

    # ---- kubelet: graceful termination -------------------------------------------------------------
    def test_grace_period_keeps_the_pod_running_not_ready(self):
        self.running("grace-node", "grace", 1, annotations={})
        self.running("term-node", "term", 1)
        self.assertEqual(self.k("DELETE", NS + "/pods/grace-0", {"gracePeriodSeconds": 2}).status, 200)
        t0 = time.time()
        self.assertEqual(self.k("DELETE", NS + "/pods/term-0", {"gracePeriodSeconds": 30}).status, 200)
        p = self.get(NS + "/pods/grace-0")
        self.assertEqual(p["metadata"]["deletionGracePeriodSeconds"], 2)
        self.assertIn("deletionTimestamp", p["metadata"])
        simtest.wait_for(lambda: not self.ready("grace-0"), 2, what="not ready while terminating")
        self.assertEqual(self.phase("grace-0"), "Running")
        self.gone("term-0", 3)  # exits on SIGTERM, long before its 30 s
        time.sleep(max(0.0, 1.2 - (time.time() - t0)))
        self.assertEqual(self.phase("grace-0"), "Running")
        self.gone("grace-0", 5)
        self.assertGreaterEqual(time.time() - t0, 1.9)

    def test_terminated_pod_reports_its_phase_before_it_goes(self):
        self.running("ph-node", "ph", 1, annotations={})
        rv = self.get(NS + "/pods")["metadata"]["resourceVersion"]
        conn, resp = self.sim.watch(NS + "/pods?watch=1&resourceVersion=%s&fieldSelector=metadata.name%%3Dph-0" % rv)
        self.k("DELETE", NS + "/pods/ph-0", {"gracePeriodSeconds": 1})
        evs = []
        while not evs or evs[-1]["type"] != "DELETED":
            got = read_events(resp, 1)
            self.assertTrue(got, evs)
            evs.extend(got)
        conn.close()
        phases = [e["object"]["status"]["phase"] for e in evs]
        self.assertEqual(phases[-1], "Failed")  # killed at the end of its grace period
        self.assertIn("Running", phases)
        term = evs[-1]["object"]["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual(term["exitCode"], 137)

    # ---- nodes and PodGC ---------------------------------------------------------------------------
    def test_deleted_node_goes_and_podgc_removes_its_pods(self):
        self.running("gc-node", "gc", 1, annotations={})
        self.k("PATCH", "/api/v1/nodes/gc-node", {"metadata": {"finalizers": ["example.com/hold"]}}, ctype=MERGE)
        self.assertEqual(self.k("DELETE", "/api/v1/nodes/gc-node").status, 200)
        n = self.get("/api/v1/nodes/gc-node")
        self.assertIn("deletionTimestamp", n["metadata"])
        time.sleep(0.5)
        self.assertEqual(self.phase("gc-0"), "Running")  # the Node still exists
        rv = self.get(NS + "/pods")["metadata"]["resourceVersion"]
        conn, resp = self.sim.watch(NS + "/pods?watch=1&resourceVersion=%s&fieldSelector=metadata.name%%3Dgc-0" % rv)
        self.k("PATCH", "/api/v1/nodes/gc-node", {"metadata": {"finalizers": None}}, ctype=MERGE)
        self.assertEqual(self.k("GET", "/api/v1/nodes/gc-node").status, 404)
        self.gone("gc-0", 5)
        evs = read_events(resp, 2)
        conn.close()
        self.assertEqual([e["type"] for e in evs], ["MODIFIED", "DELETED"])
        st = evs[0]["object"]["status"]
        self.assertEqual(st["phase"], "Failed")
        dt = [c for c in st["conditions"] if c["type"] == "DisruptionTarget"][0]
        self.assertEqual((dt["reason"], dt["message"]), ("DeletionByPodGC", "PodGC: node no longer exists"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
