#!/usr/bin/env python3
# pvescale-coordinator's node repair (--node-repair) against the simulator and real agents. The simulated kubelet of
# one node stops posting (its VM runs on), and the real node lifecycle controller marks the Node Unknown: once it has
# been Unknown for --node-repair-after, a replacement is launched, the old claim is deleted with its termination
# grace period over at once (its pods deleted, not evicted: no kubelet would stop them), the Deployment's pods run
# on again, with Events and metrics that say Repair. While more than 20 % of a pool is not Ready nothing is
# repaired and an Event says why; once one node is back, the other is repaired. Without --node-repair nothing is.
# SPDX-License-Identifier: Apache-2.0
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_replace import initialized  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
EVICT = "POST /api/v1/namespaces/{namespace}/pods/{name}/eviction"
DELETE_POD = "DELETE /api/v1/namespaces/{namespace}/pods/{name}"
# Kubelets renew their Lease every 0.5 s; the real node lifecycle controller (kube-controller-manager) looks every
# second and marks a silent one Unknown (and taints it unreachable) after 4 s.
KNOBS = ("lease_interval_seconds=0.5",)
KCM_FLAGS = {"node-monitor-period": "1s", "node-monitor-grace-period": "4s"}
REPAIR_AFTER_S = 5
ARGS = cl.FAST_SCALE_DOWN + ["--node-repair-after=%ds" % REPAIR_AFTER_S]
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def web(replicas):
    """One pod a node (hostname anti-affinity); each exits at once when stopped."""
    tmpl = cl.pod("x", cpu="500m", memory="512Mi", affinity=ANTI)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"},
                                               "annotations": {"sim.pvescale.io/exit-on-term": "true"}},
                                  "spec": tmpl["spec"]}}}


class RepairTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s) shared by the class's tests: the real node lifecycle controller marks
    the Node of a stopped kubelet Unknown and taints it."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"
    kcm_flags = KCM_FLAGS

    def setUp(self):
        self.c = cl.Cluster(self.hosts, agents=self.agents, knobs=KNOBS, kube=self.cp)
        self.co = None

    def scale_up(self, n, args):
        """n web pods Running, one on each of n Initialized claims: {node name: claim}."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(DEPLOYMENTS, web(n))
        self.co = cl.Coordinator(c, args=args)
        cl.wait_for(lambda: self.settled(n), 120, interval=0.5, what="%d web pods Running on %d claims" % (n, n))
        return {x["status"]["nodeName"]: x for x in c.claims()}

    def settled(self, n, gone=()):
        """n web pods Running on n distinct nodes, none of them in gone, on n Initialized claims none being deleted."""
        pods = [p for p in self.c.items(PODS) if not p["metadata"].get("deletionTimestamp")]
        claims = self.c.claims()
        nodes = {p["spec"].get("nodeName") for p in pods if (p.get("status") or {}).get("phase") == "Running"}
        return (len(pods) == n and len(nodes) == n and not nodes & set(gone) and len(claims) == n and
                all(initialized(x) and not x["metadata"].get("deletionTimestamp") for x in claims))

    def ready(self, node):
        r = self.c.sim.kube("GET", "/api/v1/nodes/" + node)
        conds = (r.json.get("status") or {}).get("conditions") or [] if r.status == 200 else []
        return next((x["status"] for x in conds if x["type"] == "Ready"), None)

    def events(self, reason, name=None, kind="NodeClaim"):
        """Events of reason (on the object kind/name; a Node is named as its claim)."""
        return [e for e in self.c.items("/api/v1/namespaces/default/events") if e.get("reason") == reason and
                (name is None or (e["involvedObject"]["name"], e["involvedObject"]["kind"]) == (name, kind))]

    def assert_repaired(self, claim, node, vmid, status, n):
        """The claim was replaced by Repair: Events on it and its Node, its VM and Node gone, n pods Running."""
        cl.wait_for(lambda: self.settled(n, gone=[node]) and node not in {x["status"]["nodeName"]
                                                                          for x in self.c.claims()},
                    90, interval=0.5, what="%s replaced and the web pods Running elsewhere" % claim)
        cl.wait_for(lambda: vmid not in [v["vmid"] for v in self.c.vms()], 30, interval=0.5, what="its VM gone")
        self.assertEqual(self.c.sim.kube("GET", "/api/v1/nodes/" + node).status, 404, "its Node is gone")
        launching = self.events("DisruptionLaunchingReplacement", claim)
        self.assertEqual(len(launching), 1, launching)
        m = re.match(r"Repair: Ready is %s for (\d+)s \(%ds or more\); launching the replacement first: nodeclaim/"
                     % (status, REPAIR_AFTER_S), launching[0]["message"])
        self.assertTrue(m, launching[0]["message"])
        self.assertGreaterEqual(int(m.group(1)), REPAIR_AFTER_S)
        self.assertTrue(self.events("DisruptionLaunchingReplacement", node, "Node"), "no Event on the Node")
        for name, kind in ((claim, "NodeClaim"), (node, "Node")):
            told = [e["message"] for e in self.events("DisruptionTerminating", name, kind)]
            self.assertEqual(len(told), 1, told)
            self.assertTrue(told[0].startswith("Repair: Ready is " + status), told)

    def test_a_node_whose_kubelet_stopped_is_replaced(self):
        nodes = self.scale_up(5, ARGS + ["--node-repair"])
        node = sorted(nodes)[2]
        claim, vmid = nodes[node]["metadata"]["name"], nodes[node]["status"]["vmid"]
        self.assertEqual(self.c.sim.admin("POST", "/calls/reset").status, 200)
        self.c.sim.knobs(kubelet_stopped=[node])
        cl.wait_for(lambda: self.ready(node) == "Unknown", 20, interval=0.2, what="the Node Unknown")
        self.assert_repaired(claim, node, vmid, "Unknown", 5)
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="repair",reason="replace"}'), 1.0)
        # decided, then decided again on fresh state a pass later before it was carried out
        self.assertGreaterEqual(
            m.get('pvescale_coordinator_disruption_decisions_total{method="repair",reason="replace"}', 0), 2.0, m)
        calls = self.c.sim.admin("GET", "/calls").json["kube"]
        self.assertEqual(calls.get(EVICT, 0), 0, "a pod of the repaired node was evicted, not deleted")
        self.assertGreaterEqual(calls.get(DELETE_POD, 0), 1, "its pod was not deleted")

    def test_nothing_is_repaired_while_more_than_a_fifth_is_unhealthy(self):
        nodes = self.scale_up(5, ARGS + ["--node-repair"])
        sick, dead = sorted(nodes)[1], sorted(nodes)[3]
        # The stopped kubelet's Node turns Unknown only after the grace period (4 s), the not-ready one's False at
        # once: with both set together, the NotReady Node alone was not Ready for the repair period (5 s) before the
        # other one was Unknown, and a repair was decided (not carried out). So the kubelet stops first, and the
        # other reports NotReady as soon as that Node is Unknown: both unhealthy before either is due.
        self.c.sim.knobs(kubelet_stopped=[dead])
        cl.wait_for(lambda: self.ready(dead) == "Unknown", 20, interval=0.2, what="the stopped kubelet's Node Unknown")
        self.c.sim.knobs(kubelet_not_ready=[sick], kubelet_stopped=[dead])
        why = "not repaired: 2 of the 5 nodes of pool default are not Ready, repair acts only while at most 20% are"
        for node in (sick, dead):
            name = nodes[node]["metadata"]["name"]
            cl.wait_for(lambda: any(e["message"] == why for e in self.events("DisruptionBlocked", name)), 30,
                        interval=0.5, what="an Event on %s saying why it is not repaired" % name)
        self.assertIn(why, [e["message"] for e in self.events("DisruptionBlocked", sick, "Node")],
                      "no Event on the Node")
        time.sleep(3)  # three more passes: still nothing
        self.assertEqual(sorted(x["metadata"]["name"] for x in self.c.claims()),
                         sorted(x["metadata"]["name"] for x in nodes.values()))
        self.assertEqual(self.events("DisruptionLaunchingReplacement") + self.events("DisruptionTerminating"), [])
        self.assertEqual(self.co.metric('disruption_decisions_total{method="repair",reason="replace"}'), 0)
        # One comes back: 1 of 5 is not more than 20 %, and the NotReady one is repaired.
        self.c.sim.knobs(kubelet_stopped=[])
        cl.wait_for(lambda: self.ready(dead) == "True", 20, interval=0.2, what="the stopped kubelet back")
        self.assert_repaired(nodes[sick]["metadata"]["name"], sick, nodes[sick]["status"]["vmid"], "False", 5)
        self.assertIn(nodes[dead]["metadata"]["name"], [x["metadata"]["name"] for x in self.c.claims()])

    def test_nothing_is_repaired_without_node_repair(self):
        nodes = self.scale_up(2, ARGS)
        node = sorted(nodes)[0]
        self.c.sim.knobs(kubelet_stopped=[node])
        cl.wait_for(lambda: self.ready(node) == "Unknown", 20, interval=0.2, what="the Node Unknown")
        time.sleep(REPAIR_AFTER_S + 4)  # past the repair period, and more passes than a repair needs to start
        claims = self.c.claims()
        self.assertEqual(sorted(x["metadata"]["name"] for x in claims),
                         sorted(x["metadata"]["name"] for x in nodes.values()))
        self.assertFalse([x for x in claims if x["metadata"].get("deletionTimestamp")])
        self.assertEqual(self.events("DisruptionLaunchingReplacement") + self.events("DisruptionTerminating"), [])
        self.assertEqual(self.co.metric('disruption_decisions_total{method="repair",reason="replace"}'), 0)
        self.assertEqual(self.ready(node), "Unknown")


if __name__ == "__main__":
    unittest.main(verbosity=2)
