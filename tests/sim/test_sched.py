#!/usr/bin/env python3
# Tests of the simulated kube-scheduler: fits, Unschedulable messages in kube-scheduler's wording, memoized
# re-checks, backoff, and the bulk pod creation admin endpoint.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import pod  # noqa: E402
from test_kube import read_events, ready_node  # noqa: E402

NS = "/api/v1/namespaces/default"


class SchedBase(unittest.TestCase):
    def setUp(self):
        self.sim = simtest.Sim(hosts="pve1=eas-tioga")

    def tearDown(self):
        self.sim.stop()

    def k(self, *a, **kw):
        return self.sim.kube(*a, **kw)

    def cond(self, name):
        def get():
            p = self.k("GET", NS + "/pods/" + name).json
            for c in p.get("status", {}).get("conditions", []):
                if c["type"] == "PodScheduled":
                    return c
            return None
        return get

    def unschedulable(self, name):
        return simtest.wait_for(lambda: (lambda c: c if c and c["status"] == "False" else None)(self.cond(name)()),
                                what="PodScheduled=False on %s" % name)


class SchedulerTest(SchedBase):
    def test_no_nodes(self):
        self.k("POST", NS + "/pods", pod("lonely"))
        c = self.unschedulable("lonely")
        self.assertEqual((c["reason"], c["message"]), ("Unschedulable", "no nodes available to schedule pods"))

    def test_insufficient_cpu_message(self):
        for i in range(3):
            self.assertEqual(self.k("POST", "/api/v1/nodes", ready_node("n%d" % i, cpu="2")).status, 201)
        self.k("POST", NS + "/pods", pod("big", cpu="3"))
        c = self.unschedulable("big")
        self.assertEqual(c["reason"], "Unschedulable")
        self.assertEqual(c["message"], "0/3 nodes are available: 3 Insufficient cpu.")
        evs = self.k("GET", NS + "/events?fieldSelector=involvedObject.name%3Dbig,reason%3DFailedScheduling").json["items"]
        self.assertEqual(evs[0]["message"], c["message"])
        self.assertEqual(evs[0]["type"], "Warning")

    def test_mixed_reasons_sorted(self):
        self.k("POST", "/api/v1/nodes", ready_node("small", cpu="1", memory="1Gi", labels={"pool": "a"}))
        self.k("POST", "/api/v1/nodes", ready_node("other", cpu="8", memory="16Gi", labels={"pool": "b"}))
        self.k("POST", "/api/v1/nodes", ready_node("tainted", cpu="8", memory="16Gi", labels={"pool": "a"},
                                                   taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]))
        self.k("POST", NS + "/pods", pod("picky", cpu="2", memory="2Gi", nodeSelector={"pool": "a"}))
        c = self.unschedulable("picky")
        self.assertEqual(c["message"], "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
                                       "1 node(s) didn't match Pod's node affinity/selector, "
                                       "1 node(s) had untolerated taint {dedicated: gpu}.")
        # a matching node appears: the pod gets bound and runs
        self.k("POST", "/api/v1/nodes", ready_node("fits", cpu="4", memory="4Gi", labels={"pool": "a"}))
        p = simtest.wait_for(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
            self.k("GET", NS + "/pods/picky").json), what="picky running")
        self.assertEqual(p["spec"]["nodeName"], "fits")
        self.assertEqual(self.cond("picky")()["status"], "True")

    def test_tolerations_affinity_and_hostname_anti_affinity(self):
        for n in ("h1", "h2"):
            self.k("POST", "/api/v1/nodes", ready_node(n, cpu="8", memory="16Gi",
                                                       taints=[{"key": "pvescale.io/pool", "value": "x", "effect": "NoSchedule"}]))
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        tol = [{"key": "pvescale.io/pool", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]
        for i in range(3):
            p = pod("spread-%d" % i, affinity=anti, tolerations=tol)
            p["metadata"]["labels"] = {"app": "spread"}
            self.k("POST", NS + "/pods", p)
        c = self.unschedulable("spread-2")
        self.assertEqual(c["message"], "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")
        nodes = sorted(self.k("GET", NS + "/pods/spread-%d" % i).json["spec"]["nodeName"] for i in range(2))
        self.assertEqual(nodes, ["h1", "h2"])
        req = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h2"]}]}]}}}
        self.k("POST", NS + "/pods", pod("pinned", affinity=req, tolerations=tol))
        simtest.wait_for(lambda: self.k("GET", NS + "/pods/pinned").json["spec"].get("nodeName") == "h2", what="pinned on h2")
        self.k("POST", NS + "/pods", pod("intolerant"))
        c = self.unschedulable("intolerant")
        self.assertEqual(c["message"], "0/2 nodes are available: 2 node(s) had untolerated taint {pvescale.io/pool: x}.")

    def test_not_ready_node_is_tainted(self):
        n = ready_node("sick", cpu="8")
        n["status"]["conditions"][0]["status"] = "False"
        self.k("POST", "/api/v1/nodes", n)
        self.k("POST", NS + "/pods", pod("waiting"))
        c = self.unschedulable("waiting")
        self.assertEqual(c["message"], "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.")


def anti(app, key="kubernetes.io/hostname"):
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def labelled(p, **labels):
    p["metadata"]["labels"] = labels
    return p


class MemoTest(SchedBase):
    """The scheduler re-filters only what changed: outcomes and messages must be those of a full check."""

    def node_of(self, name):
        return self.k("GET", NS + "/pods/" + name).json["spec"].get("nodeName")

    def bound(self, name):
        return simtest.wait_for(lambda: self.node_of(name), what="%s bound" % name)

    def message(self, name, msg):
        return simtest.wait_for(lambda: (lambda c: c and c["status"] == "False" and c["message"] == msg)(self.cond(name)()),
                                what="%s: %s (now %r)" % (name, msg, self.cond(name)()))

    def test_new_node(self):
        for n in ("a", "b"):
            self.k("POST", "/api/v1/nodes", ready_node(n, cpu="2"))
        self.k("POST", NS + "/pods", pod("big", cpu="3"))
        self.message("big", "0/2 nodes are available: 2 Insufficient cpu.")
        self.k("POST", "/api/v1/nodes", ready_node("c", cpu="4"))
        self.assertEqual(self.bound("big"), "c")

    def test_taint_removed(self):
        self.k("POST", "/api/v1/nodes", ready_node("t", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
        self.k("POST", NS + "/pods", pod("p"))
        self.message("p", "0/1 nodes are available: 1 node(s) had untolerated taint {k: v}.")
        r = self.k("PATCH", "/api/v1/nodes/t", {"spec": {"taints": None}}, ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.bound("p"), "t")

    def test_deleted_pod_frees_cpu(self):
        self.k("POST", "/api/v1/nodes", ready_node("n", cpu="2"))
        self.k("POST", NS + "/pods", pod("first", cpu="1500m"))
        self.assertEqual(self.bound("first"), "n")
        self.k("POST", NS + "/pods", pod("second", cpu="1"))
        self.message("second", "0/1 nodes are available: 1 Insufficient cpu.")
        self.assertEqual(self.k("DELETE", NS + "/pods/first?gracePeriodSeconds=0").status, 200)
        self.assertEqual(self.bound("second"), "n")

    def test_reasons_follow_pods_bound_later(self):
        # the node keeps its resourceVersion, but a pod bound to it changes why the waiting pod does not fit
        self.k("POST", "/api/v1/nodes", ready_node("n", cpu="2", memory="2Gi"))
        self.k("POST", NS + "/pods", pod("wide", cpu="3", memory="1Gi"))
        self.message("wide", "0/1 nodes are available: 1 Insufficient cpu.")
        self.k("POST", NS + "/pods", pod("fat", cpu="100m", memory="1536Mi"))
        self.assertEqual(self.bound("fat"), "n")
        self.message("wide", "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.")

    def test_bound_pod_label_change(self):
        self.k("POST", "/api/v1/nodes", ready_node("n"))
        self.k("POST", NS + "/pods", labelled(pod("a"), app="x"))
        self.assertEqual(self.bound("a"), "n")
        self.k("POST", NS + "/pods", labelled(pod("b", affinity=anti("x")), app="b"))
        self.message("b", "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.")
        r = self.k("PATCH", NS + "/pods/a", {"metadata": {"labels": {"app": "y"}}}, ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.bound("b"), "n")

    def test_existing_pods_anti_affinity(self):
        self.k("POST", "/api/v1/nodes", ready_node("n1"))
        self.k("POST", NS + "/pods", labelled(pod("guard", affinity=anti("x")), app="guard"))
        self.assertEqual(self.bound("guard"), "n1")
        self.k("POST", NS + "/pods", labelled(pod("x1"), app="x"))
        self.message("x1", "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules.")
        self.k("POST", "/api/v1/nodes", ready_node("n2"))
        self.assertEqual(self.bound("x1"), "n2")

    def test_zone_anti_affinity(self):
        for i, zone in enumerate(("z1", "z1", "z2", "z2")):
            self.k("POST", "/api/v1/nodes", ready_node("n%d" % i, labels={"zone": zone}))
        names = ["s%d" % i for i in range(3)]
        for name in names:
            self.k("POST", NS + "/pods", labelled(pod(name, affinity=anti("s", "zone")), app="s"))
        self.message("s2", "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules.")
        zones = sorted(self.k("GET", "/api/v1/nodes/" + self.node_of(n)).json["metadata"]["labels"]["zone"]
                       for n in names[:2])
        self.assertEqual(zones, ["z1", "z2"])
        self.k("POST", "/api/v1/nodes", ready_node("n4", labels={"zone": "z3"}))
        self.assertEqual(self.bound("s2"), "n4")

    def test_pod_leaving_a_zone_frees_the_other_nodes_of_the_zone(self):
        self.k("POST", "/api/v1/nodes", ready_node("n0", labels={"zone": "z1"},
                                                   taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
        self.k("POST", "/api/v1/nodes", ready_node("n1", labels={"zone": "z1"}))
        tol = [{"key": "k", "operator": "Exists"}]
        self.k("POST", NS + "/pods", labelled(pod("a", tolerations=tol, nodeSelector={"kubernetes.io/hostname": "n0"}),
                                              app="s"))
        self.assertEqual(self.bound("a"), "n0")
        self.k("POST", NS + "/pods", labelled(pod("b", affinity=anti("s", "zone")), app="b"))
        self.message("b", "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, "
                          "1 node(s) had untolerated taint {k: v}.")
        # only n0 changes (its pod goes away); n1 fits again because it shares n0's zone
        self.assertEqual(self.k("DELETE", NS + "/pods/a?gracePeriodSeconds=0").status, 200)
        self.assertEqual(self.bound("b"), "n1")

    def test_pod_affinity(self):
        for n in ("n1", "n2"):
            self.k("POST", "/api/v1/nodes", ready_node(n))
        aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        self.k("POST", NS + "/pods", labelled(pod("web", affinity=aff), app="web"))
        self.message("web", "0/2 nodes are available: 2 node(s) didn't match pod affinity rules.")
        req = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}
        self.k("POST", NS + "/pods", labelled(pod("db", affinity=req), app="db"))
        self.assertEqual(self.bound("db"), "n2")
        self.assertEqual(self.bound("web"), "n2")

    def test_anti_affinity_one_pod_per_node(self):
        n = 32
        pods = [labelled(pod("spread-%02d" % i, affinity=anti("spread")), app="spread") for i in range(n + 1)]
        r = self.sim.admin("POST", "/actions/pods", {"pods": pods})
        self.assertEqual(r.status, 201, r)
        self.message("spread-00", "no nodes available to schedule pods")
        for i in range(n):
            self.assertEqual(self.k("POST", "/api/v1/nodes", ready_node("n%02d" % i)).status, 201)

        def placed():
            items = self.k("GET", NS + "/pods?labelSelector=app%3Dspread").json["items"]
            on = [p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")]
            return on if len(on) == n else None
        on = simtest.wait_for(placed, 30, what="%d pods placed" % n)
        self.assertEqual(sorted(on), ["n%02d" % i for i in range(n)])
        left = [p["metadata"]["name"] for p in self.k("GET", NS + "/pods?labelSelector=app%3Dspread").json["items"]
                if not p["spec"].get("nodeName")]
        self.assertEqual(len(left), 1)
        self.message(left[0], "0/%d nodes are available: %d node(s) didn't match pod anti-affinity rules." % (n, n))


class BackoffTest(SchedBase):
    def test_backoff_delays_retry(self):
        self.sim.knobs(scheduler_backoff_seconds=600, scheduler_max_backoff_seconds=600)
        self.k("POST", NS + "/pods", pod("early"))
        self.unschedulable("early")
        self.k("POST", "/api/v1/nodes", ready_node("n"))
        # a pod created after the node is tried at once and fits; the early one waits out its backoff
        self.k("POST", NS + "/pods", pod("late"))
        simtest.wait_for(lambda: self.k("GET", NS + "/pods/late").json["spec"].get("nodeName") == "n", what="late bound")
        p = self.k("GET", NS + "/pods/early").json
        self.assertIsNone(p["spec"].get("nodeName"))
        self.assertEqual(self.cond("early")()["message"], "no nodes available to schedule pods")
        evs = self.k("GET", NS + "/events?fieldSelector=involvedObject.name%3Dearly").json["items"]
        self.assertEqual([e["reason"] for e in evs], ["FailedScheduling"])
        # backoff back to short: the next retry binds it
        self.sim.knobs(scheduler_backoff_seconds=0.05, scheduler_max_backoff_seconds=0.5)
        simtest.wait_for(lambda: self.k("GET", NS + "/pods/early").json["spec"].get("nodeName") == "n", what="early bound")
        evs = self.k("GET", NS + "/events?fieldSelector=involvedObject.name%3Dearly").json["items"]
        self.assertEqual(sorted(e["reason"] for e in evs), ["FailedScheduling", "Scheduled"])

    def test_knobs_validated(self):
        r = self.sim.admin("POST", "/knobs", {"scheduler_backoff_seconds": "soon"})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.sim.admin("GET", "/knobs").json["scheduler_max_backoff_seconds"], 0.5)


class BulkPodsTest(SchedBase):
    def test_bulk_create_watch_events(self):
        conn, resp = self.sim.watch(NS + "/pods?watch=1")
        pods = [pod("burst-%d" % i) for i in range(3)]
        gen = pod("x")
        gen["metadata"] = {"generateName": "gen-", "labels": {"app": "gen"}}
        r = self.sim.admin("POST", "/actions/pods", {"namespace": "default", "pods": pods + [gen]})
        self.assertEqual(r.status, 201, r)
        created = r.json["created"]
        self.assertEqual(created[:3], ["burst-0", "burst-1", "burst-2"])
        self.assertTrue(created[3].startswith("gen-") and len(created[3]) == 9, created)
        evs = read_events(resp, 4)
        conn.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", n) for n in created])
        p = self.k("GET", NS + "/pods/burst-1").json
        self.assertEqual((p["status"]["phase"], p["spec"]["schedulerName"]), ("Pending", "default-scheduler"))
        self.assertIn("node.kubernetes.io/not-ready", [t["key"] for t in p["spec"]["tolerations"]])

    def test_bulk_bad_pod_creates_none(self):
        bad = pod("bad")
        del bad["spec"]["containers"][0]["image"]
        r = self.sim.admin("POST", "/actions/pods", {"pods": [pod("good"), bad]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("pods[1]", r.json["error"])
        self.assertIn("spec.containers[0].image", r.json["error"])
        for name in ("good", "bad"):
            self.assertEqual(self.k("GET", NS + "/pods/" + name).status, 404)
        r = self.sim.admin("POST", "/actions/pods", {"pods": [pod("twin"), pod("twin")]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("metadata.name", r.json["error"])
        self.assertEqual(self.k("GET", NS + "/pods/twin").status, 404)
        self.k("POST", NS + "/pods", pod("old"))
        r = self.sim.admin("POST", "/actions/pods", {"pods": [pod("new"), pod("old")]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("already exists", r.json["error"])
        self.assertEqual(self.k("GET", NS + "/pods/new").status, 404)
        for body in ({"pods": "x"}, {"namespace": 3, "pods": []}, {"pods": [1]}, {"namespace": "nope", "pods": [pod("a")]}):
            r = self.sim.admin("POST", "/actions/pods", body)
            self.assertEqual(r.status, 400, (body, r))


if __name__ == "__main__":
    unittest.main()
