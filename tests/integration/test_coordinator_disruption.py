#!/usr/bin/env python3
# pvescale-coordinator's scale-down pass against the simulator and real agents: nodes left empty are deleted (the
# decision re-checked a pass later, Events on the NodeClaim and the Node, the VM gone), and a Node marked
# do-not-disrupt stays, with an Event that says why.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
WHEN_EMPTY = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}


class DisruptionTest(cl.CoordinatorTest):
    def setUp(self):
        self.c = cl.Cluster("pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga")
        self.co = None

    def scale_up(self, names):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool(disruption=WHEN_EMPTY))
        for n in names:
            c.create(PODS, cl.pod(n, cpu="500m", memory="512Mi", labels={"app": "spread"}, affinity=ANTI))
        self.co = cl.Coordinator(c)

        def ready():
            pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
            claims = c.claims()
            return (all((pods[n].get("status") or {}).get("phase") == "Running" for n in names) and
                    len(claims) == len(names) and
                    all(any(x["type"] == "Initialized" and x["status"] == "True"
                            for x in (cl_.get("status") or {}).get("conditions", [])) for cl_ in claims))
        cl.wait_for(ready, 120, interval=0.5, what="every pod Running on an Initialized claim")
        return {x["metadata"]["name"]: x for x in self.c.claims()}

    def delete_pods(self, names):
        for n in names:
            self.assertEqual(self.c.sim.kube("DELETE", PODS + "/" + n, {"gracePeriodSeconds": 0}).status, 200)

    def events(self, reason):
        return [e for e in self.c.items("/api/v1/namespaces/default/events") if e.get("reason") == reason]

    def test_empty_nodes_are_deleted_with_their_vms(self):
        claims = self.scale_up(["a", "b"])
        self.assertEqual(len(self.c.vms()), 2)
        self.delete_pods(["a", "b"])
        cl.wait_for(lambda: not self.c.claims() and not self.c.vms(), 90, interval=1,
                    what="both empty nodes' claims and VMs gone")
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
