#!/usr/bin/env python3
# pvescale-coordinator carries out replace decisions against the simulator and real agents: after a change of the
# ProxmoxNodeClass a drifted node's replacement claim is launched and Initialized before the old Node is tainted,
# the Deployment's pods end Running on the new node, the old claim and VM go, and the Events and metrics say Drift.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_termination import Watcher  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
EXIT = {"sim.pvescale.io/exit-on-term": "true"}  # the simulated kubelet stops the pod at once on SIGTERM


def initialized(claim):
    return any(x["type"] == "Initialized" and x["status"] == "True"
               for x in (claim.get("status") or {}).get("conditions", []))


def deployment(name, replicas):
    tmpl = cl.pod("x", cpu="500m", memory="512Mi")
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": EXIT},
                                  "spec": tmpl["spec"]}}}


class ReplaceWatcher(Watcher):
    """The termination test's watcher of the old Node and VM, and when a claim other than the old one is first seen
    Initialized."""

    def __init__(self, c, node, vmid, old_claim):
        super().__init__(c, node, vmid)
        self.old_claim = old_claim

    def poll(self):
        # The claims are read before the Node (in super().poll()) and noted after it: a replacement seen here was
        # created after the taint, which the Node read then shows.
        claims = self.c.claims()
        super().poll()
        self.note("new created", any(x["metadata"]["name"] != self.old_claim for x in claims))
        self.note("new initialized", any(initialized(x) and x["metadata"]["name"] != self.old_claim for x in claims))


class ReplaceTest(cl.CoordinatorTest):
    def setUp(self):
        self.c = cl.Cluster("pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga")
        self.co = None

    def events(self, reason):
        return [e for e in self.c.items("/api/v1/namespaces/default/events") if e.get("reason") == reason]

    def running_on(self, app):
        pods = [p for p in self.c.items(PODS) if (p["metadata"].get("labels") or {}).get("app") == app
                and not p["metadata"].get("deletionTimestamp")]
        return {p["spec"].get("nodeName") for p in pods
                if (p.get("status") or {}).get("phase") == "Running"}, len(pods)

    def scale_up(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(DEPLOYMENTS, deployment("web", 2))
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN)

        def ready():
            nodes, n = self.running_on("web")
            claims = c.claims()
            return n == 2 and len(nodes) == 1 and None not in nodes and len(claims) == 1 and initialized(claims[0])
        cl.wait_for(ready, 120, interval=0.5, what="both web pods Running on one Initialized claim")
        return c.claims()[0]

    def test_drift_launches_the_replacement_before_the_drain(self):
        c = self.c
        old = self.scale_up()
        name, node, vmid = old["metadata"]["name"], old["status"]["nodeName"], old["status"]["vmid"]
        w = ReplaceWatcher(c, node, vmid, name)
        w.start()
        self.addCleanup(w.halt.set)
        patch = {"spec": {"tags": ["drifted"]}}
        self.assertEqual(c.sim.kube("PATCH", cl.GROUP + "/proxmoxnodeclasses/default", patch,
                                    ctype="application/merge-patch+json").status, 200)

        def replaced():
            claims = c.claims()
            nodes, n = self.running_on("web")
            new = [x for x in claims if x["metadata"]["name"] != name]
            return (len(claims) == 1 and new and initialized(new[0]) and n == 2 and
                    nodes == {new[0]["status"].get("nodeName")} and
                    all(v["vmid"] != vmid for v in c.vms()) and len(c.vms()) == 1)
        cl.wait_for(replaced, 240, interval=1, what="the old claim and VM gone, the pods Running on the new node")
        w.halt.set()
        w.join(5)
        self.assertLessEqual(w.first["tainted"], w.first["new created"],
                             "the old Node is tainted before the replacement is launched (Karpenter's order)")
        self.assertLess(w.first["new initialized"], w.first["web gone"],
                        "web's pods leave the old Node only once the replacement is Initialized")
        new = c.claims()[0]
        ann = new["metadata"].get("annotations") or {}
        self.assertEqual(ann.get("pvescale.io/replaces"), name)
        self.assertIn("Drift", ann.get("pvescale.io/disruption", ""))
        self.assertEqual(ann.get("pvescale.io/disruption-method"), "drift")
        launching = [e for e in self.events("DisruptionLaunchingReplacement")
                     if e["involvedObject"]["kind"] == "NodeClaim" and e["involvedObject"]["name"] == name]
        self.assertEqual(len(launching), 1, launching)
        self.assertIn("Drift", launching[0]["message"])
        self.assertIn("nodeclaim/" + new["metadata"]["name"], launching[0]["message"])
        told = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]): e["message"]
                for e in self.events("DisruptionTerminating")}
        self.assertIn("Drift", told.get(("NodeClaim", name), ""), told)
        self.assertIn("Drift", told.get(("Node", node), ""), told)
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="drift",reason="replace"}'), 1.0)
        self.assertEqual(m.get('pvescale_coordinator_vms_deleted_total{reason="terminated"}'), 1.0)
        # The replacement needed host room: the passes that decided it asked for it.
        self.assertGreaterEqual(m.get("pvescale_coordinator_disruption_host_room_fetches_total"), 1.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
