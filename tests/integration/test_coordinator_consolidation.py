#!/usr/bin/env python3
# pvescale-coordinator's consolidation and replacement against the simulator, real agents and a real control plane
# (../shared/k8s, shared by the module's tests), with the short periods (--disruption-interval=1s, --gc-interval=2s):
# three under-used nodes go down to one by a multi-node consolidation; a big node is replaced by a cheaper shape
# (launched and Initialized first, counted as vms_created_total{reason="replacement"}); a replacement whose launch
# fails, or that does not join within --replacement-timeout, drops the decision (a Warning, the old node untouched);
# a kill -9 of the coordinator mid-replace is finished by the next one from the claims' annotations, once; a claim
# carries its NodePool's terminationGracePeriod and its drain deletes a pod that a PodDisruptionBudget holds once that
# period is over; a joined claim whose Node is deleted is collected (not drained: its pods are PodGC's).
# SPDX-License-Identifier: Apache-2.0
import base64
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info, claim_history  # noqa: E402
from test_coordinator_replace import ReplaceWatcher, deployment, initialized  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
SECRETS = "/api/v1/namespaces/kube-system/secrets"
EXIT = {"sim.pvescale.io/exit-on-term": "true"}
FAST = ["--disruption-interval=1s", "--gc-interval=2s"]
CONSOLIDATE = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}
SMALL, BIG = "c1.2VCPU-4GB", "c1.4VCPU-8GB"  # allocatable cpu 1920m and 3910m; prices 3 and 6


def shapes(*names):
    return [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(names)}]


class ConsolidationTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s) shared by the class's tests."""
    hosts = "pve1=32intel64-2p8co2t+8ve"

    # ---- helpers ----
    def start(self, pool, nodeclass=None, args=()):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", nodeclass or cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", pool)
        self.args = FAST + list(args)
        self.co = cl.Coordinator(c, args=self.args)

    def live(self, app=None):
        return self.c.live_pods(app)

    def running(self, n, app=None):
        return self.c.pods_running(n, app)

    def claims_initialized(self, n):
        claims = self.c.claims()
        return len(claims) == n and all(initialized(x) for x in claims)

    def patch(self, path, body):
        r = self.c.sim.kube("PATCH", path, body, ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        return r.json

    def consolidate_now(self):
        self.patch(cl.GROUP + "/nodepools/default", {"spec": {"disruption": CONSOLIDATE}})

    def delete_pods(self, names):
        for n in names:
            self.assertEqual(self.c.sim.kube("DELETE", PODS + "/" + n, {"gracePeriodSeconds": 0}).status, 200)

    def events(self, reason, kind=None, name=None):
        return [e for e in self.c.items("/api/v1/namespaces/default/events") if e.get("reason") == reason and
                (kind is None or e["involvedObject"]["kind"] == kind) and
                (name is None or e["involvedObject"]["name"] == name)]

    def node(self, name):
        r = self.c.sim.kube("GET", "/api/v1/nodes/" + name)
        return r.json if r.status == 200 else None

    def claim(self, name):
        r = self.c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + name)
        return r.json if r.status == 200 else None

    def one_big_node(self, nodeclass=None, args=()):
        """One BIG node holding web's one pod after the pod that needed BIG is gone: its pods fit one SMALL (the
        pool offers both shapes), and there is no other node. Consolidation is turned on by the caller. The claim."""
        c = self.c
        self.start(cl.nodepool(requirements=shapes(SMALL, BIG)), nodeclass=nodeclass, args=args)
        c.create(PODS, cl.pod("big", cpu="2500m", memory="512Mi"))
        c.create(DEPLOYS, deployment("web", 1))
        cl.wait_for(lambda: self.running(2) and self.claims_initialized(1), 90, interval=0.5,
                    what="big and web Running on one Initialized claim")
        claim = c.claims()[0]
        self.assertEqual(claim["spec"]["instanceType"], BIG)
        self.delete_pods(["big"])
        cl.wait_for(lambda: self.running(1), 30, interval=0.5, what="big gone")
        return claim

    def untouched(self, claim, web):
        """The old claim, Node, VM and web's pod are as before a decision."""
        name, node, vmid = claim["metadata"]["name"], claim["status"]["nodeName"], claim["status"]["vmid"]
        now = self.claim(name)
        self.assertIsNotNone(now)
        self.assertNotIn("deletionTimestamp", now["metadata"])
        taints = (self.node(node).get("spec") or {}).get("taints") or []
        self.assertNotIn("pvescale.io/disrupted", [t["key"] for t in taints])
        self.assertIn(vmid, [v["vmid"] for v in self.c.vms() if v["status"] == "running"])
        pods = self.live("web")
        self.assertEqual([(p["metadata"]["uid"], p["spec"]["nodeName"], p["status"]["phase"]) for p in pods],
                         [(web["metadata"]["uid"], node, "Running")], "web's pod still serves from the old node")

    # ---- 1. multi-node consolidation ----
    def test_three_underused_nodes_become_one(self):
        c = self.c
        self.start(cl.nodepool(requirements=shapes(SMALL)))
        fill = ["fill-%d" % i for i in range(3)]
        for n in fill:  # 1300m each: one per node, and room for one of web's 500m pods beside it
            c.create(PODS, cl.pod(n, cpu="1300m", memory="512Mi"))
        cl.wait_for(lambda: self.running(3) and self.claims_initialized(3), 90, interval=0.5,
                    what="3 fillers Running on 3 Initialized claims")
        c.create(DEPLOYS, deployment("web", 3))  # then web, so that no two of its pods share a node
        cl.wait_for(lambda: self.running(6), 30, interval=0.5, what="web's 3 pods Running beside them")
        self.assertEqual(len(c.claims()), 3)
        self.delete_pods(fill)
        cl.wait_for(lambda: self.running(3), 30, interval=0.5, what="the fillers gone")
        self.assertEqual(len({p["spec"]["nodeName"] for p in self.live()}), 3, "one web pod a node")
        names = sorted(x["metadata"]["name"] for x in c.claims())
        self.consolidate_now()
        # Cheapest to disrupt first (one pod each, the same price: by name): the first two go, their pods fit the
        # third; the three into one new node of the same shape is no better than that (filterOutSameInstanceType).
        cl.wait_for(lambda: [x["metadata"]["name"] for x in c.claims()] == names[2:] and len(c.vms()) == 1, 90,
                    interval=1, what="two claims and their VMs gone")
        left = c.claims()[0]["status"]["nodeName"]
        cl.wait_for(lambda: self.running(3, "web"), 30, interval=0.5, what="web's 3 pods Running")
        self.assertEqual({p["spec"]["nodeName"] for p in self.live()}, {left})
        self.assertEqual(sorted(n["metadata"]["name"] for n in c.items("/api/v1/nodes")), [left])
        told = {e["involvedObject"]["name"]: e["message"] for e in self.events("DisruptionTerminating", "NodeClaim")}
        self.assertEqual(sorted(told), names[:2], told)
        for msg in told.values():
            self.assertEqual(msg, "Consolidation: 2 nodes into 0, their 2 pods fit on " + left)
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="multi_node_consolidation",'
                               'reason="delete"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_vms_deleted_total{reason="terminated"}'), 2.0)
        self.assertEqual(m.get('pvescale_coordinator_evictions_total{result="ok"}'), 2.0,
                         "both Nodes tainted before either was drained: no pod evicted twice")
        # A disrupted taint whose claim is not being deleted (as a coordinator stopped between taint and delete
        # leaves it) is taken off at the next pass; the node and web's pods stay.
        taints = (self.node(left).get("spec") or {}).get("taints") or []
        self.patch("/api/v1/nodes/" + left, {"spec": {"taints": taints + [
            {"key": "pvescale.io/disrupted", "effect": "NoSchedule"}]}})
        cl.wait_for(lambda: "pvescale.io/disrupted" not in [t["key"] for t in
                                                             (self.node(left).get("spec") or {}).get("taints") or []],
                    15, interval=0.5, what="the stale disrupted taint taken off")
        self.assertEqual([x["metadata"]["name"] for x in c.claims()], names[2:])
        self.assertTrue(self.running(3, "web"))

    # ---- 2. replacement by a cheaper shape; 4. its VM counted as a replacement ----
    def test_a_big_node_is_replaced_by_a_cheaper_shape(self):
        c = self.c
        old = self.one_big_node()
        name, node, vmid = old["metadata"]["name"], old["status"]["nodeName"], old["status"]["vmid"]
        w = ReplaceWatcher(c, node, vmid, name)
        w.start()
        self.addCleanup(w.halt.set)
        self.consolidate_now()

        def replaced():
            claims = c.claims()
            return (len(claims) == 1 and claims[0]["metadata"]["name"] != name and initialized(claims[0]) and
                    self.running(1, "web") and
                    self.live("web")[0]["spec"]["nodeName"] == claims[0]["status"]["nodeName"] and
                    [v["vmid"] for v in c.vms()] == [claims[0]["status"]["vmid"]])
        cl.wait_for(replaced, 90, interval=1, what="web Running on the new claim, the old claim and VM gone")
        w.halt.set()
        w.join(5)
        self.assertLessEqual(w.first["tainted"], w.first["new created"], "tainted, then the replacement launched")
        self.assertLess(w.first["new initialized"], w.first["web gone"], "and drained once it is Initialized")
        new = c.claims()[0]
        self.assertEqual(new["spec"]["instanceType"], SMALL)
        self.assertEqual((new["metadata"].get("annotations") or {}).get("pvescale.io/replaces"), name)
        self.assertEqual((new["metadata"].get("annotations") or {}).get("pvescale.io/disruption-method"),
                         "consolidation")
        msg = "Consolidation: replace %s, its 1 pods fit on one cheaper %s" % (name, SMALL)
        launching = self.events("DisruptionLaunchingReplacement", "NodeClaim", name)
        self.assertEqual([e["message"] for e in launching],
                         ["%s; launching the replacement first: nodeclaim/%s" % (msg, new["metadata"]["name"])])
        self.assertEqual([e["message"] for e in self.events("DisruptionTerminating", "NodeClaim", name)], [msg])
        self.assertEqual([e["message"] for e in self.events("DisruptionTerminating", "Node", node)], [msg])
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_vms_created_total{reason="replacement"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_vms_created_total{reason="provisioning"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="consolidation",'
                               'reason="replace"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_vms_deleted_total{reason="terminated"}'), 1.0)

    # ---- 3a. the replacement's launch fails ----
    def test_a_failed_replacement_drops_the_decision(self):
        c = self.c
        ref = {"name": "ci-templates", "namespace": "kube-system"}  # none yet: the default templates
        old = self.one_big_node(nodeclass=cl.nodeclass(metadataOptions={"type": "cdrom", "templatesRef": ref}))
        web = self.live("web")[0]
        # An operator's broken user-data template: every launch from now on fails (InvalidCloudInit), after its clone.
        broken = base64.b64encode(b"#cloud-config\n{{ .Nope \n").decode()
        c.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ci-templates"},
                           "data": {"user-data": broken}})
        self.consolidate_now()
        name, node = old["metadata"]["name"], old["status"]["nodeName"]
        cl.wait_for(lambda: self.events("DisruptionReplacementFailed", "NodeClaim", name) and
                    self.events("DisruptionReplacementFailed", "Node", node), 60, interval=0.5,
                    what="a Warning on the old claim and Node")
        self.untouched(old, web)
        ev = self.events("DisruptionReplacementFailed", "NodeClaim", name)[0]
        self.assertEqual(ev["type"], "Warning")
        self.assertTrue(ev["message"].startswith("Consolidation: replace %s, its 1 pods fit on one cheaper %s: not "
                                                 "carried out: its replacement nodeclaim/" % (name, SMALL)), ev)
        self.assertTrue(ev["message"].endswith(" is gone") or "failed to launch (InvalidCloudInit)" in ev["message"],
                        ev)
        self.assertEqual(self.events("DisruptionTerminating"), [])
        m = self.co.metrics()
        self.assertGreaterEqual(m.get('pvescale_coordinator_vms_deleted_total{reason="launch_failed"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="consolidation",'
                               'reason="replace"}'), 0.0, m)

    # ---- 3b. the replacement never joins within --replacement-timeout ----
    def test_a_replacement_that_does_not_join_in_time_is_deleted(self):
        c = self.c
        old = self.one_big_node(args=["--replacement-timeout=4s"])
        web = self.live("web")[0]
        name, node = old["metadata"]["name"], old["status"]["nodeName"]
        halt, seen, vmids = threading.Event(), set(), {}

        def never_join():  # each new claim's VM never registers (its name is the claim's)
            while not halt.is_set():
                try:
                    claims = c.claims()
                    new = {x["metadata"]["name"] for x in claims} - {name} - seen
                    if new:
                        seen.update(new)
                        c.sim.knobs(never_join=sorted(seen))
                    vmids.update({x["metadata"]["name"]: x["status"]["vmid"] for x in claims
                                  if (x.get("status") or {}).get("vmid")})
                except Exception:  # noqa: BLE001 - a failed poll is tried again
                    pass
                time.sleep(0.05)
        t = threading.Thread(target=never_join, daemon=True)
        t.start()
        self.addCleanup(halt.set)
        self.consolidate_now()
        cl.wait_for(lambda: self.events("DisruptionReplacementFailed", "NodeClaim", name), 60, interval=0.5,
                    what="a Warning on the old claim")
        ev = self.events("DisruptionReplacementFailed", "NodeClaim", name)[0]
        self.assertTrue(ev["message"].endswith(": not carried out: its replacements are not Initialized after 4 s"),
                        ev)
        self.untouched(old, web)
        self.assertTrue(self.events("DisruptionReplacementFailed", "Node", node))
        first = sorted(seen)[0]
        cl.wait_for(lambda: self.claim(first) is None, 30, interval=0.5, what="the replacement claim deleted")
        halt.set()
        self.assertIn(first, vmids, "the replacement got a VM")
        self.assertNotIn(vmids[first], [v["vmid"] for v in c.vms()], "the replacement's VM gone with it")
        t.join(5)
        self.assertEqual(self.events("DisruptionTerminating", "NodeClaim", name), [])
        self.assertEqual(self.co.metric('disruption_actions_total{method="consolidation",reason="replace"}'), 0.0)

    # ---- 3c. kill -9 while a replacement is under way ----
    def test_a_restart_finishes_the_replace_once(self):
        c = self.c
        old = self.one_big_node()
        name, vmid = old["metadata"]["name"], old["status"]["vmid"]
        rv0 = c.sim.kube("GET", cl.GROUP + "/nodeclaims").json["metadata"]["resourceVersion"]
        self.assertEqual(c.sim.admin("POST", "/calls/reset").status, 200)
        self.consolidate_now()

        def replacement():
            return [x for x in c.claims() if x["metadata"]["name"] != name]
        new = cl.wait_for(replacement, 30, interval=0.05, what="the replacement claim")[0]
        self.assertFalse(initialized(new))
        self.co.stop(sig=signal.SIGKILL)
        self.co = cl.Coordinator(c, args=self.args)
        cl.wait_for(lambda: self.claim(name) is None and self.claims_initialized(1) and self.running(1, "web") and
                    len(c.vms()) == 1, 90, interval=1, what="the old claim and VM gone, web Running on the new one")
        self.assertEqual([x["metadata"]["name"] for x in c.claims()], [new["metadata"]["name"]])
        self.assertEqual(self.live("web")[0]["spec"]["nodeName"], c.claims()[0]["status"]["nodeName"])
        added = [e["object"]["metadata"]["name"] for e in claim_history(c.sim, rv0) if e["type"] == "ADDED"]
        self.assertEqual(added, [new["metadata"]["name"]], "one replacement claim across the restart")
        self.assertIn("NodeClaim %s replaces %s, as before the restart" % (new["metadata"]["name"], name),
                      self.co.logtext())
        # The old Node keeps its taint from the decision to its end: the new leader did not take it off as a stale
        # one when it deleted the claim (issue 37, 6).
        self.assertNotIn("its claim %s is not being disrupted" % name, self.co.logtext())
        self.assertEqual(len(self.events("DisruptionTerminating", "NodeClaim", name)), 1)
        self.assertEqual(self.co.metric('disruption_actions_total{method="consolidation",reason="replace"}'), 1.0)
        calls = c.sim.admin("GET", "/calls").json
        self.assertEqual(calls["pve"].get("DELETE /nodes/{node}/qemu/{vmid}", 0), 1, calls["pve"])
        self.assertNotIn(vmid, [v["vmid"] for v in c.vms()])

    # ---- 5. terminationGracePeriod: from the pool onto the claim, and the drain's end ----
    def test_the_claims_grace_period_ends_a_drain_a_pdb_holds(self):
        c = self.c
        pool = cl.nodepool()
        pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "3s"
        self.start(pool)
        stuck = cl.pod("stuck", cpu="500m", memory="512Mi", labels={"app": "stuck"})
        stuck["metadata"]["annotations"] = EXIT  # once deleted, it goes at once
        c.create(PODS, stuck)
        c.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "stuck"},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "stuck"}}}})
        cl.wait_for(lambda: self.running(1) and self.claims_initialized(1), 90, interval=0.5,
                    what="stuck Running on an Initialized claim")
        claim = c.claims()[0]
        name, vmid = claim["metadata"]["name"], claim["status"]["vmid"]
        self.assertEqual(claim["spec"].get("terminationGracePeriod"), "3s", claim["spec"])
        # The pool's period changes (not a drift: Karpenter's hash ignores it); the claim keeps its own.
        self.patch(cl.GROUP + "/nodepools/default", {"spec": {"template": {"spec": {"terminationGracePeriod": "1h"}}}})
        cl.wait_for(lambda: (c.sim.kube("GET", PDBS + "/stuck").json.get("status") or {}).get("currentHealthy") == 1,
                    20, interval=0.5, what="the PDB's status")
        t0 = time.monotonic()
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + name).status, 200)
        cl.wait_for(lambda: not self.live(), 30, interval=0.2, what="stuck deleted")
        held = time.monotonic() - t0
        cl.wait_for(lambda: self.claim(name) is None and vmid not in [v["vmid"] for v in c.vms()], 30, interval=0.5,
                    what="the claim and its VM gone")
        self.assertGreaterEqual(held, 2.5, "the PDB held the pod until the grace period's end")
        self.assertLess(held, 20, "the claim's 3s, not the pool's 1h")
        self.assertGreaterEqual(self.co.metric('evictions_total{result="pdb_blocked"}'), 1.0)
        self.assertIn("deleted pod default/stuck (its termination grace period is over)", self.co.logtext())

    # ---- 6. garbage collection: a joined claim whose Node is deleted behind its back ----
    def test_a_claim_whose_node_was_deleted_is_collected(self):
        c = self.c
        self.start(cl.nodepool())
        c.create(PODS, cl.pod("a", cpu="500m", memory="512Mi"))
        cl.wait_for(lambda: self.running(1) and self.claims_initialized(1), 90, interval=0.5,
                    what="a Running on an Initialized claim")
        claim = c.claims()[0]
        name, node, vmid = claim["metadata"]["name"], claim["status"]["nodeName"], claim["status"]["vmid"]
        self.assertEqual(c.sim.kube("DELETE", "/api/v1/nodes/" + node).status, 200)
        self.assertIn(vmid, [v["vmid"] for v in c.vms() if v["status"] == "running"], "its VM still runs")
        cl.wait_for(lambda: self.claim(name) is None and vmid not in [v["vmid"] for v in c.vms()], 30, interval=0.5,
                    what="the claim and its VM gone")
        evs = self.events("GarbageCollected", "NodeClaim", name)
        self.assertEqual([(e["type"], e["message"]) for e in evs], [("Warning", "its Node %s is gone" % node)])
        # The coordinator's Events on the claim and its Node (the real node lifecycle controller's RegisteredNode and
        # RemovingNode on the Node are not the coordinator's).
        order = sorted((int(e["metadata"]["resourceVersion"]), e["reason"]) for e in
                       c.items("/api/v1/namespaces/default/events") if e["involvedObject"]["name"] == name and
                       (e.get("source") or {}).get("component", "").startswith("pvescale-"))
        reasons = [r for _, r in order if r != "DisruptionBlocked"]  # consolidateAfter is Never
        self.assertEqual(reasons, ["GarbageCollected", "Terminating", "Terminated"], order)
        self.assertEqual(self.co.metric('vms_deleted_total{reason="terminated"}'), 1.0)
        self.assertIsNone(self.node(node))


if __name__ == "__main__":
    unittest.main(verbosity=2)
