#!/usr/bin/env python3
# pvescale-coordinator under exactly the Helm chart's RBAC: the chart's ServiceAccount, ClusterRole, Roles and
# bindings (rendered with default values) are created in the simulator, whose authorizer checks every request as
# kube-apiserver's RBAC authorizer does, and the coordinator runs with a token of that ServiceAccount from the
# TokenRequest API (not the simulator's admin token). Pending pods become NodeClaims, VMs, Nodes and Running pods
# without a single 403. Then, with `pods/eviction create` taken out of the live ClusterRole (as `kubectl edit` would),
# a consolidation's drain fails visibly: the 403 names pods/eviction, the drained node keeps its pods, Node and VM.
# Put back, the same drain completes (the node's pod evicted and Running elsewhere, Node and VM deleted) and no
# call is refused again.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_consolidation import CONSOLIDATE, FAST, SMALL, shapes  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_replace import deployment, initialized  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
CLUSTERROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/" + cl.CHART_RELEASE
SA = "system:serviceaccount:%s:%s" % (cl.CHART_NS, cl.CHART_RELEASE)


def is_eviction(rule):
    return "pods/eviction" in rule.get("resources", [])


class ChartRbacTest(cl.CoordinatorTest):
    def setUp(self):
        self.c = cl.Cluster("pve1=32intel64-2p8co2t+8ve")
        self.co = None

    def live(self, app=None):
        return self.c.live_pods(app)

    def running(self, n, app=None):
        return self.c.pods_running(n, app)

    def put_clusterrole(self, rules):
        cr = self.c.sim.kube("GET", CLUSTERROLE).json
        cr["rules"] = rules
        r = self.c.sim.kube("PUT", CLUSTERROLE, cr)
        self.assertEqual(r.status, 200, r)

    def test_the_charts_rbac_runs_scale_up_and_a_drain_needs_pods_eviction(self):
        c = self.c
        objs = c.run_as_chart()
        rules = next(o for o in objs if o["kind"] == "ClusterRole")["rules"]
        self.assertTrue(any(is_eviction(r) for r in rules), rules)
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool(requirements=shapes(SMALL)))
        self.co = cl.Coordinator(c, args=FAST)
        self.assertIn("--kubeconfig", self.co.proc.args)
        self.assertEqual(self.co.proc.args[self.co.proc.args.index("--kubeconfig") + 1], c.kubeconfig)

        # Scale-up: two fillers (1300m of a SMALL node's 1920m each) need two nodes; then web's two pods, one beside
        # each filler.
        for i in range(2):
            c.create(PODS, cl.pod("fill-%d" % i, cpu="1300m", memory="512Mi"))
        cl.wait_for(lambda: self.running(2) and len(c.claims()) == 2 and all(initialized(x) for x in c.claims()),
                    45, interval=0.5, what="2 fillers Running on 2 Initialized claims")
        c.create(DEPLOYS, deployment("web", 2))
        cl.wait_for(lambda: self.running(4), 20, interval=0.5, what="web's 2 pods Running beside them")
        claims = c.claims()
        nodes = sorted(n["metadata"]["name"] for n in c.items("/api/v1/nodes"))
        self.assertEqual(nodes, sorted(x["status"]["nodeName"] for x in claims))
        self.assertEqual(sorted(v["vmid"] for v in c.vms()), sorted(x["status"]["vmid"] for x in claims))
        self.assertEqual(len({p["spec"]["nodeName"] for p in self.live("web")}), 2, "one web pod a node")
        self.assertEqual(c.denials(), [], "calls the chart's RBAC refused during the scale-up")
        self.assertGreater(self.co.metric('launches_total{result="initialized"}'), 0)

        # Without `pods/eviction create`: the fillers go, consolidation deletes one claim and its drain is refused.
        self.put_clusterrole([r for r in rules if not is_eviction(r)])
        for i in range(2):
            self.assertEqual(c.sim.kube("DELETE", PODS + "/fill-%d" % i, {"gracePeriodSeconds": 0}).status, 200)
        cl.wait_for(lambda: self.running(2), 20, interval=0.5, what="the fillers gone")
        r = c.sim.kube("PATCH", cl.GROUP + "/nodepools/default", {"spec": {"disruption": CONSOLIDATE}},
                       ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        refused = cl.wait_for(lambda: [d for d in c.denials() if "/eviction" in d["path"]], 20, interval=0.5,
                              what="an eviction refused")
        d = refused[0]
        pod = d["path"].split("/")[-2]
        self.assertEqual((d["user"], d["verb"], d["path"]), (SA, "create", PODS + "/%s/eviction" % pod))
        self.assertEqual(d["message"], 'pods/eviction "%s" is forbidden: User "%s" cannot create resource '
                                       '"pods/eviction" in API group "" in the namespace "default"' % (pod, SA))
        deleting = [x for x in c.claims() if x["metadata"].get("deletionTimestamp")]
        self.assertEqual(len(deleting), 1, c.claims())
        node = deleting[0]["status"]["nodeName"]
        time.sleep(3)  # the drain goes on being refused: nothing leaves the node
        self.assertEqual(len(c.claims()), 2)
        self.assertEqual(sorted(n["metadata"]["name"] for n in c.items("/api/v1/nodes")), nodes)
        self.assertEqual(len(c.vms()), 2)
        on_node = [p["metadata"]["name"] for p in self.live("web") if p["spec"].get("nodeName") == node]
        self.assertEqual(on_node, [pod], "the pod whose eviction is refused stays on the draining node")
        self.assertGreaterEqual(len([x for x in c.denials() if x["path"] == d["path"]]), 2, "the drain retries")
        self.assertTrue(all("/eviction" in x["path"] for x in c.denials()), c.denials())
        refusal = "drain Node %s: POST %s: 403 Forbidden: %s" % (node, d["path"], d["message"])
        self.assertEqual(self.co.logtext().count(refusal), 1, "a refusal that repeats is logged once, when it starts")
        claim = deleting[0]["metadata"]["name"]
        errors = [ln for ln in self.co.logtext().splitlines() if ": error: " in ln and claim in ln]
        self.assertEqual(errors, [ln for ln in errors if refusal in ln],
                         "every error line about the claim is the refusal: no second layer logs it again")
        self.assertEqual(len(errors), 1, errors)

        # The rule back: the same drain completes, and nothing more is refused.
        self.put_clusterrole(rules)
        since = time.time()
        cl.wait_for(lambda: len(c.claims()) == 1 and len(c.vms()) == 1, 30, interval=0.5,
                    what="the drained claim and its VM gone")
        left = c.claims()[0]["status"]["nodeName"]
        cl.wait_for(lambda: self.running(2, "web"), 20, interval=0.5, what="web's 2 pods Running")
        self.assertEqual({p["spec"]["nodeName"] for p in self.live()}, {left})
        self.assertEqual([n["metadata"]["name"] for n in c.items("/api/v1/nodes")], [left])
        self.assertGreaterEqual(self.co.metric('evictions_total{result="ok"}'), 1)
        self.assertEqual([x for x in c.denials() if x["time"] >= since], [], "calls refused with the chart's RBAC")
        self.assertRegex(self.co.logtext(), r"NodeClaim %s: goes on after \d+ failed attempts" % deleting[0]["metadata"]["name"])


if __name__ == "__main__":
    unittest.main()
