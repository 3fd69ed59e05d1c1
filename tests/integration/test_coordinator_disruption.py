#!/usr/bin/env python3
# pvescale-coordinator's scale-down pass against the simulator, real agents and a real control plane (../shared/k8s,
# shared by the module's tests): nodes left empty are deleted (the decision re-checked a pass later, Events on the
# NodeClaim and the Node, the VM gone), and a Node marked do-not-disrupt stays, with an Event that says why;
# consolidation moves a Deployment's pods (evicted, Running again on the other node) and deletes a node, unless a
# PodDisruptionBudget or a do-not-disrupt pod holds it; budgets limit parallel disruption and block in their schedule;
# an expired node goes.
# SPDX-License-Identifier: Apache-2.0
import datetime
import os
import ssl
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
WHEN_EMPTY = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
CONSOLIDATE = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
               "budgets": [{"nodes": "100%"}]}
# One shape only: two 700m pods fill a node, so where the pods go is known.
ONE_SHAPE = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c1.2VCPU-4GB"]}]
# A scale-down pass runs every second (cl.FAST_SCALE_DOWN): this long is three passes or more, time for a decision
# to be made and carried out.
PASSES_S = 3.5
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def rfc3339_seconds(text):
    """Seconds since the epoch of a Kubernetes time (Time or MicroTime)."""
    return datetime.datetime.fromisoformat(text).timestamp()


class DisruptionTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s) shared by the class's tests: the real scheduler binds the pods, the
    real ReplicaSet controller recreates the evicted ones, the real disruption controller keeps the PDB's status."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"

    def scale_up(self, names, disruption=WHEN_EMPTY, pool=None):
        c = self.c
        for n in names:
            c.create(PODS, cl.pod(n, cpu="500m", memory="512Mi", labels={"app": "spread"}, affinity=ANTI))
        self.start(pool or cl.nodepool(disruption=disruption))

        def ready():
            pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
            claims = c.claims()
            return (all((pods[n].get("status") or {}).get("phase") == "Running" for n in names) and
                    len(claims) == len(names) and
                    all(any(x["type"] == "Initialized" and x["status"] == "True"
                            for x in (cl_.get("status") or {}).get("conditions", [])) for cl_ in claims))
        cl.wait_for(ready, 120, interval=0.5, what="every pod Running on an Initialized claim")
        return {x["metadata"]["name"]: x for x in self.c.claims()}

    def start(self, pool):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", pool)
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN)

    def live(self):
        """The pods not being deleted."""
        return [p for p in self.c.items(PODS) if not p["metadata"].get("deletionTimestamp")]

    def running(self, n):
        pods = self.live()
        return len(pods) == n and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

    def initialized(self, n):
        claims = self.c.claims()
        return len(claims) == n and all((x.get("status") or {}).get("launchStep") == "Initialized" for x in claims)

    def scale(self, replicas):
        r = self.c.sim.kube("PATCH", DEPLOYS + "/web", {"spec": {"replicas": replicas}},
                            ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)

    def two_half_full_nodes(self):
        """Deployment web's pods over two one-shape nodes, one pod on each, which fit one node together: the first
        node filled by web's first pod and a bare pod, the second by two more of web's; then the bare pod deleted
        and web scaled to 2 (its newest pod goes). Consolidation is turned on only then. {node: [pod]}."""
        c = self.c
        self.start(cl.nodepool(requirements=ONE_SHAPE))
        tmpl = cl.pod("x", cpu="700m", memory="512Mi", terminationGracePeriodSeconds=1)
        c.create(DEPLOYS, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": tmpl["spec"]}}})
        c.create(PODS, cl.pod("hold", cpu="700m", memory="512Mi"))
        cl.wait_for(lambda: self.running(2) and self.initialized(1), 90, interval=0.5, what="web and hold on a node")
        self.scale(3)
        cl.wait_for(lambda: self.running(4) and self.initialized(2), 90, interval=0.5, what="web's 3 pods on 2 nodes")
        self.delete_pods(["hold"])
        self.scale(2)
        cl.wait_for(lambda: self.running(2), 30, interval=0.5, what="web at 2 pods")
        on = {}
        for p in self.live():
            on.setdefault(p["spec"]["nodeName"], []).append(p["metadata"]["name"])
        self.assertEqual(sorted(len(v) for v in on.values()), [1, 1], on)
        return on

    def consolidate_now(self):
        r = self.c.sim.kube("PATCH", cl.GROUP + "/nodepools/default", {"spec": {"disruption": CONSOLIDATE}},
                            ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)

    def delete_pods(self, names):
        for n in names:
            self.assertEqual(self.c.sim.kube("DELETE", PODS + "/" + n, {"gracePeriodSeconds": 0}).status, 200)

    def pool_usage(self):
        return (self.c.sim.kube("GET", cl.GROUP + "/nodepools/default").json.get("status") or {}).get("resources") or {}

    def events(self, reason):
        return [e for e in self.c.items("/api/v1/namespaces/default/events") if e.get("reason") == reason]

    def room_asked(self):
        """GET /v1/capacity requests every agent has answered (its pvescale_agent_http_requests_total)."""
        ctx = ssl.create_default_context(cafile=self.c.ca)
        total = 0.0
        for a in self.c.agents.values():
            url = "https://%s:%d/metrics" % (a["ip"], self.c.agent_port)
            with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("pvescale_agent_http_requests_total{") and 'route="/v1/capacity"' in line \
                            and 'method="GET"' in line:
                        total += float(line.rsplit(" ", 1)[1])
        return total

    def test_empty_nodes_are_deleted_with_their_vms(self):
        claims = self.scale_up(["a", "b"])
        self.assertEqual(len(self.c.vms()), 2)
        asked = self.room_asked()
        self.assertGreater(asked, 0, "the scale-up asked the agents for room")
        self.delete_pods(["a", "b"])
        cl.wait_for(lambda: not self.c.claims() and not self.c.vms(), 90, interval=1,
                    what="both empty nodes' claims and VMs gone")
        # The pool's usage follows the scale-down, not only provisioning rounds (issue 37, 3).
        cl.wait_for(lambda: self.pool_usage().get("nodes") == "0", 10, interval=0.5,
                    what="NodePool status.resources.nodes 0 after the scale-down")
        self.assertEqual(self.pool_usage().get("cpu"), "0")
        # Deciding on empty nodes (two passes at least: the decision and its re-check) needs no host room.
        self.assertEqual(self.room_asked(), asked, "no pass asked the agents for room")
        self.assertEqual(self.co.metric("disruption_host_room_fetches_total"), 0.0)
        self.assertEqual(self.c.items("/api/v1/nodes"), [], "the Nodes are gone with their claims")
        told = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]): e["message"]
                for e in self.events("DisruptionTerminating")}
        for name, claim in claims.items():
            self.assertIn("Emptiness", told.get(("NodeClaim", name), ""), told)
            self.assertIn(("Node", claim["status"]["nodeName"]), told)
        m = self.co.metrics()
        # one decision took both (the budget allows 100 %), decided in one pass and carried out in the next
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="emptiness",reason="delete"}'),
                         1.0)
        self.assertEqual(m.get('pvescale_coordinator_disruption_decisions_total{method="emptiness",reason="delete"}'),
                         2.0)
        self.assertEqual(m.get('pvescale_coordinator_vms_deleted_total{reason="terminated"}'), 2.0)

    def test_a_do_not_disrupt_node_stays(self):
        claims = self.scale_up(["a", "b"])
        keep = sorted(claims)[0]
        node = claims[keep]["status"]["nodeName"]
        patch = {"metadata": {"annotations": {"pvescale.io/do-not-disrupt": "true"}}}
        self.assertEqual(self.c.sim.kube("PATCH", "/api/v1/nodes/" + node, patch,
                                         ctype="application/merge-patch+json").status, 200)
        self.delete_pods(["a", "b"])
        cl.wait_for(lambda: [x["metadata"]["name"] for x in self.c.claims()] == [keep], 90, interval=1,
                    what="only the do-not-disrupt node's claim left")
        cl.wait_for(lambda: any(e["involvedObject"]["name"] == keep and "do-not-disrupt" in e["message"]
                                for e in self.events("DisruptionBlocked")), 30, interval=1,
                    what="an Event on the kept claim naming do-not-disrupt")
        self.assertEqual(len(self.c.vms()), 1)

    def test_consolidation_moves_pods_and_deletes_a_node(self):
        on = self.two_half_full_nodes()
        self.consolidate_now()
        cl.wait_for(lambda: len(self.c.claims()) == 1 and len(self.c.vms()) == 1, 60, interval=1,
                    what="one claim and its VM left")
        left = self.c.claims()[0]["status"]["nodeName"]
        cl.wait_for(lambda: self.running(2), 30, interval=0.5, what="web's 2 pods Running")
        self.assertEqual({p["spec"]["nodeName"] for p in self.live()}, {left})
        moved = [n for node, names in on.items() if node != left for n in names]
        self.assertNotIn(moved[0], [p["metadata"]["name"] for p in self.live()], "evicted and replaced")
        told = [e["message"] for e in self.events("DisruptionTerminating") if e["involvedObject"]["kind"] == "NodeClaim"]
        self.assertEqual(len(told), 1, told)
        self.assertIn("Consolidation: delete", told[0])
        self.assertIn("its 1 pods fit on " + left, told[0])
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="consolidation",reason="delete"}'),
                         1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_evictions_total{result="ok"}'), 1.0)

    def test_a_pdb_blocks_until_it_allows_an_eviction(self):
        self.two_half_full_nodes()
        self.c.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                             "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
        cl.wait_for(lambda: (self.c.sim.kube("GET", PDBS + "/web").json.get("status") or {}).get("currentHealthy") == 2,
                    20, interval=0.5, what="the PDB's status")
        self.consolidate_now()
        cl.wait_for(lambda: len([e for e in self.events("DisruptionBlocked")
                                 if "pdb default/web allows 0 evictions" in e["message"]]) >= 2, 30, interval=1,
                    what="both claims blocked by the PDB")
        time.sleep(PASSES_S)  # more passes: still nothing
        self.assertEqual(len(self.c.claims()), 2)
        self.assertEqual(self.events("DisruptionTerminating"), [])
        r = self.c.sim.kube("PATCH", PDBS + "/web", {"spec": {"minAvailable": 1}}, ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        cl.wait_for(lambda: len(self.c.claims()) == 1 and len(self.c.vms()) == 1, 60, interval=1,
                    what="a node gone once the PDB allows an eviction")
        cl.wait_for(lambda: self.running(2), 30, interval=0.5, what="web's 2 pods Running")

    def test_a_do_not_disrupt_pod_keeps_its_node(self):
        self.two_half_full_nodes()
        for p in self.live():
            r = self.c.sim.kube("PATCH", PODS + "/" + p["metadata"]["name"],
                                {"metadata": {"annotations": {"pvescale.io/do-not-disrupt": "true"}}},
                                ctype="application/merge-patch+json")
            self.assertEqual(r.status, 200, r)
        self.consolidate_now()
        cl.wait_for(lambda: len([e for e in self.events("DisruptionBlocked")
                                 if "is annotated do-not-disrupt" in e["message"]]) >= 2, 30, interval=1,
                    what="both claims kept by their do-not-disrupt pods")
        time.sleep(PASSES_S)  # more passes: still nothing
        self.assertEqual(len(self.c.claims()), 2)
        self.assertEqual(self.events("DisruptionTerminating"), [])

    def test_a_do_not_disrupt_duration_runs_out(self):
        """karpenter.sh/do-not-disrupt: "<duration>" on a pod protects its node until that long after the pod started
        (Karpenter 1.14), then consolidation goes ahead: the duration ends about 20 s from now."""
        self.two_half_full_nodes()
        ends = {}
        for p in self.live():
            started = rfc3339_seconds(p["status"]["startTime"])
            seconds = int(time.time() - started) + 20
            ends[p["metadata"]["name"]] = started + seconds
            r = self.c.sim.kube("PATCH", PODS + "/" + p["metadata"]["name"],
                                {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "%ds" % seconds}}},
                                ctype="application/merge-patch+json")
            self.assertEqual(r.status, 200, r)
        self.consolidate_now()
        cl.wait_for(lambda: len([e for e in self.events("DisruptionBlocked")
                                 if "is annotated do-not-disrupt" in e["message"]]) >= 2, 30, interval=1,
                    what="both claims kept by their do-not-disrupt pods while the duration runs")
        cl.wait_for(lambda: len(self.c.claims()) == 1 and len(self.c.vms()) == 1, 120, interval=1,
                    what="one claim left once the duration has run out")
        told = [e for e in self.events("DisruptionTerminating") if e["involvedObject"]["kind"] == "NodeClaim"]
        self.assertEqual(len(told), 1, told)
        self.assertIn("Consolidation: delete", told[0]["message"])
        first = rfc3339_seconds(told[0].get("eventTime") or told[0].get("firstTimestamp"))
        self.assertGreaterEqual(first + 1, min(ends.values()), "consolidated before the protection ended")

    def test_no_consolidation_onto_a_node_not_initialized(self):
        """Node Y of pool late still has a startup taint that nothing takes off: its claim is not Initialized. X's
        pod fits Y, but no consolidation counts on Y (Karpenter's "would schedule against uninitialized"): X stays,
        with an Event that says why (issue 37, 1)."""
        c = self.c
        self.start(cl.nodepool(requirements=ONE_SHAPE, disruption=CONSOLIDATE))
        c.create(PODS, cl.pod("x", cpu="700m", memory="512Mi"))
        cl.wait_for(lambda: self.running(1) and self.initialized(1), 90, interval=0.5, what="x on node X")
        x = c.claims()[0]["metadata"]["name"]
        big = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c1.4VCPU-8GB"]}]
        late = cl.nodepool(name="late", requirements=big, weight=100)
        late["spec"]["template"]["spec"]["startupTaints"] = [{"key": "example.com/never", "effect": "NoSchedule"}]
        c.create(cl.GROUP + "/nodepools", late)
        c.create(PODS, cl.pod("y", cpu="1300m", memory="512Mi"))  # not beside x on X: a node Y of pool late

        def registered():
            ys = [cl_ for cl_ in c.claims() if cl_["spec"]["nodePool"] == "late"]
            return ys and (ys[0].get("status") or {}).get("launchStep") == "Registered" and ys[0]
        y = cl.wait_for(registered, 90, interval=0.5, what="Y Registered, its startup taint staying")["metadata"]["name"]
        cl.wait_for(lambda: any(e["involvedObject"]["name"] == x and "uninitialized nodeclaim/" + y in e["message"]
                                for e in self.events("DisruptionBlocked")), 30, interval=0.5,
                    what="X kept: its pod would go to the uninitialized claim")
        time.sleep(PASSES_S)  # more passes: still nothing
        self.assertIn(x, [cl_["metadata"]["name"] for cl_ in c.claims()])
        self.assertEqual(self.events("DisruptionTerminating"), [])
        self.assertTrue(self.running(1) or len(self.live()) == 2, "x is not evicted")

    def test_a_budget_of_one_node_takes_them_one_at_a_time(self):
        claims = self.scale_up(["a", "b", "c"], disruption=dict(WHEN_EMPTY, budgets=[{"nodes": "1"}]))
        most = [0]
        halt = threading.Event()

        def watch():
            while not halt.is_set():
                try:
                    going = [x for x in self.c.claims() if x["metadata"].get("deletionTimestamp")]
                    most[0] = max(most[0], len(going))
                except Exception:  # noqa: BLE001 - a failed poll is tried again
                    pass
                time.sleep(0.1)
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        self.addCleanup(halt.set)
        self.delete_pods(["a", "b", "c"])
        cl.wait_for(lambda: not self.c.claims() and not self.c.vms(), 120, interval=1, what="the three nodes gone")
        halt.set()
        t.join()
        self.assertEqual(most[0], 1, "never two claims terminating at once")
        self.assertEqual(len(self.events("DisruptionTerminating")), 2 * len(claims))

    def test_a_budget_schedule_blocks_while_active(self):
        now = time.gmtime()
        budget = {"nodes": "0", "schedule": "%d %d * * *" % (now.tm_min, now.tm_hour), "duration": "1h"}
        self.scale_up(["a"], disruption=dict(WHEN_EMPTY, budgets=[budget]))
        self.delete_pods(["a"])
        cl.wait_for(lambda: any("budgets of pool default allow no more Empty disruptions" in e["message"]
                                for e in self.events("DisruptionBlocked")), 30, interval=1,
                    what="an Event naming the budget")
        time.sleep(PASSES_S)  # more passes: still nothing
        self.assertEqual(len(self.c.claims()), 1)
        self.assertEqual(self.events("DisruptionTerminating"), [])

    def test_an_expired_node_goes(self):
        pool = cl.nodepool()
        # long enough for the node to be launched and its pod deleted first (about 3 s; 6 s in the ASan build)
        pool["spec"]["template"]["spec"]["expireAfter"] = "15s"
        claims = self.scale_up(["a"], pool=pool)
        self.delete_pods(["a"])  # its pods fit elsewhere (it has none left): a delete; consolidation is Never
        cl.wait_for(lambda: not self.c.claims() and not self.c.vms(), 60, interval=1, what="the expired node gone")
        told = [e["message"] for e in self.events("DisruptionTerminating") if e["involvedObject"]["kind"] == "NodeClaim"]
        self.assertEqual(len(told), 1, told)
        self.assertTrue(told[0].startswith("Expiry: created"), told)
        self.assertIn("expireAfter is 15s", told[0])
        self.assertEqual(list(claims), [e["involvedObject"]["name"] for e in self.events("DisruptionTerminating")
                                        if e["involvedObject"]["kind"] == "NodeClaim"])

    def test_expiry_keeps_a_do_not_disrupt_pod_until_the_grace_period(self):
        """Karpenter's forceful expiry: a do-not-disrupt pod is not evicted; it holds the drain until the node's
        terminationGracePeriod is over, then it is deleted (issue 37, 7)."""
        c = self.c
        keep = cl.pod("keep", cpu="500m", memory="512Mi")
        keep["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
        c.create(PODS, keep)
        pool = cl.nodepool()
        pool["spec"]["template"]["spec"]["expireAfter"] = "8s"  # expired once Initialized, or soon after
        pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "8s"
        self.start(pool)
        cl.wait_for(lambda: self.running(1) and self.initialized(1), 90, interval=0.5, what="keep on a node")
        old = self.c.claims()[0]["metadata"]["name"]

        def terminating():
            return [e for e in self.events("DisruptionTerminating") if e["involvedObject"]["name"] == old]
        cl.wait_for(terminating, 90, interval=0.5, what="the expired claim deleted (after its replacement)")
        self.assertTrue(terminating()[0]["message"].startswith("Expiry: created"), terminating())
        time.sleep(4)  # the drain runs every second or so: an eviction would have come
        pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
        self.assertIn("keep", pods, "the do-not-disrupt pod is still there")
        self.assertIsNone(pods["keep"]["metadata"].get("deletionTimestamp"), "and not being deleted")
        self.assertEqual(self.co.metric('evictions_total{result="ok"}'), 0.0)
        cl.wait_for(lambda: old not in [x["metadata"]["name"] for x in self.c.claims()], 60, interval=1,
                    what="the expired claim gone once its grace period is over")
        self.assertNotIn("keep", [p["metadata"]["name"] for p in c.items(PODS)], "deleted at the end")
        self.assertEqual(self.co.metric('evictions_total{result="ok"}'), 0.0, "never evicted")


if __name__ == "__main__":
    unittest.main(verbosity=2)
