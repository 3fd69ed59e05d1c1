#!/usr/bin/env python3
# pvescale-coordinator carries out replace decisions against the simulator, real agents and a real control plane
# (../shared/k8s, shared by the module's tests): after a change of the ProxmoxNodeClass a drifted node's replacement
# claim is launched and Initialized before the old Node is tainted, the Deployment's pods end Running on the new node,
# the old claim and VM go, and the Events and metrics say Drift; an expired node of a pool at its node limit is
# replaced all the same (the node being replaced holds no limit against its replacement).
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_termination import Watcher  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
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


class ReplaceTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s)."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"

    def events(self, reason):
        return [e for e in self.c.items("/api/v1/namespaces/default/events") if e.get("reason") == reason]

    def running_on(self, app):
        pods = [p for p in self.c.items(PODS) if (p["metadata"].get("labels") or {}).get("app") == app
                and not p["metadata"].get("deletionTimestamp")]
        return {p["spec"].get("nodeName") for p in pods
                if (p.get("status") or {}).get("phase") == "Running"}, len(pods)

    def scale_up(self, pool=None, pdb=False):
        """web's 2 pods Running on one Initialized claim of pool (default: cl.nodepool()), under a PDB of
        minAvailable 1 when pdb. The claim."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", pool or cl.nodepool())
        if pdb:
            c.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
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
        patch = {"spec": {"onBoot": False}}  # drifts (tags, resourcePool and securityGroups change in place)
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

    def test_a_pool_at_its_node_limit_replaces_its_expired_node(self):
        """The pool allows 1 node; its node expires with web's 2 pods on it under a PDB (minAvailable 1). A node being
        replaced holds no limit against its own replacement (Karpenter counts only active nodes): the replacement is
        launched and Initialized first, web's pods move onto it, the old node goes, and no pod is ever Pending on
        NodePoolLimitReached. Before 07cb664 the old node held the pool's limit: it was deleted without a
        replacement, its first evicted pod stayed Pending on NodePoolLimitReached, the PDB then allowed 0 evictions
        and the drain was refused for as long as it was watched (issue 37, 5)."""
        c = self.c
        old = self.scale_up(pool=cl.nodepool(limits={"nodes": "1"}), pdb=True)
        name, node, vmid = old["metadata"]["name"], old["status"]["nodeName"], old["status"]["vmid"]
        cl.wait_for(lambda: (c.sim.kube("GET", PDBS + "/web").json.get("status") or {}).get("disruptionsAllowed") == 1,
                    30, interval=0.5, what="the PDB allows one eviction")
        w = ReplaceWatcher(c, node, vmid, name)
        w.start()
        self.addCleanup(w.halt.set)
        pool = cl.GROUP + "/nodepools/default"

        def expire_after(d):  # not a drift: the template's hash leaves expireAfter out, as Karpenter's
            r = c.sim.kube("PATCH", pool, {"spec": {"template": {"spec": {"expireAfter": d}}}},
                           ctype="application/merge-patch+json")
            self.assertEqual(r.status, 200, r)
        expire_after("1s")  # the node has expired
        new = cl.wait_for(lambda: [x for x in c.claims() if x["metadata"]["name"] != name], 60, interval=0.2,
                          what="the replacement claim")[0]
        expire_after("Never")  # and its replacement will not
        new_name = new["metadata"]["name"]

        def replaced():
            claims = c.claims()
            nodes, n = self.running_on("web")
            return ([x["metadata"]["name"] for x in claims] == [new_name] and initialized(claims[0]) and n == 2 and
                    nodes == {claims[0]["status"].get("nodeName")} and
                    [v["vmid"] for v in c.vms()] == [claims[0]["status"]["vmid"]])
        cl.wait_for(replaced, 120, interval=1, what="web's pods Running on the replacement, the old claim and VM gone")
        w.halt.set()
        w.join(5)
        self.assertLessEqual(w.first["tainted"], w.first["new created"], "tainted, then the replacement launched")
        self.assertLess(w.first["new initialized"], w.first["web gone"], "drained once the replacement is Initialized")
        self.assertEqual((c.claims()[0]["metadata"].get("annotations") or {}).get("pvescale.io/replaces"), name)
        launching = [e["message"] for e in self.events("DisruptionLaunchingReplacement")
                     if e["involvedObject"]["kind"] == "NodeClaim" and e["involvedObject"]["name"] == name]
        self.assertEqual(len(launching), 1, launching)
        self.assertTrue(launching[0].startswith("Expiry: created"), launching)
        self.assertTrue(launching[0].endswith("launching the replacement first: nodeclaim/" + new_name), launching)
        self.assertEqual([e["message"] for e in self.events("NodePoolLimitReached")], [],
                         "no pod waited on the pool's limit")
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="expiry",reason="replace"}'), 1.0,
                         m)
        self.assertEqual(m.get('pvescale_coordinator_vms_created_total{reason="replacement"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_vms_deleted_total{reason="terminated"}'), 1.0, m)

    def test_a_replacements_room_is_not_taken_by_a_consolidation(self):
        """Node X of pool batch holds xweb's 2 pods (700m each, nodeSelector pool batch); node D of pool default
        (consolidated when underused) holds dweb's one 700m pod, which fits nowhere else. X drifts: its replacement R
        (one node of the same shape: room for xweb's 2 pods and no more) is launched first; once R is Initialized,
        xweb's pods move onto it one at a time (a PDB, and pods that take 4 s to start). While X still holds one of
        them, R looks as if it had room for dweb's pod too; but X's pods are to go there, and Karpenter counts the pods
        of nodes marked for deletion as pending in every simulation: D is never consolidated onto R, no node beyond X,
        R and D is launched, and every pod ends Running. Before 07cb664 D was consolidated onto R, its pod took the
        room of X's last pod, which stayed Pending until a fourth node came (issue 37, 5)."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        for nc in ("default", "batch"):
            c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(nc, metadataOptions={"type": "cdrom"}))
        small = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c1.2VCPU-4GB"]}]
        consolidate = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                       "budgets": [{"nodes": "100%"}]}
        c.create(cl.GROUP + "/nodepools", cl.nodepool("default", requirements=small, weight=100,
                                                      disruption=consolidate))
        c.create(cl.GROUP + "/nodepools", cl.nodepool("batch", nodeclass_name="batch", requirements=small))
        c.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "xweb"},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "xweb"}}}})
        xweb, dweb = deployment("xweb", 2), deployment("dweb", 1)
        for d in (xweb, dweb):
            d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "700m"
        xweb["spec"]["template"]["spec"]["nodeSelector"] = {"pvescale.io/nodepool": "batch"}
        c.create(DEPLOYMENTS, xweb)
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN)
        # xweb first: while its pods are pending, X would look empty to a consolidation of D
        cl.wait_for(lambda: self.running_on("xweb")[1] == 2 and len(self.running_on("xweb")[0] - {None}) == 1, 120,
                    interval=0.5, what="xweb's 2 pods Running on one node")
        c.create(DEPLOYMENTS, dweb)

        def pool_of(claim):
            return claim["spec"]["nodePool"]

        def ready():
            claims = c.claims()
            xs, nx = self.running_on("xweb")
            ds, nd = self.running_on("dweb")
            return (nx == 2 and nd == 1 and len(xs) == 1 and len(ds) == 1 and None not in xs | ds and
                    len(claims) == 2 and all(initialized(x) for x in claims) and
                    sorted(pool_of(x) for x in claims) == ["batch", "default"])
        cl.wait_for(ready, 120, interval=0.5, what="xweb on a batch node, dweb on a default node")
        claims = {pool_of(x): x for x in c.claims()}
        x_name, d_name = claims["batch"]["metadata"]["name"], claims["default"]["metadata"]["name"]
        d_node = claims["default"]["status"]["nodeName"]
        self.assertEqual(self.running_on("dweb")[0], {d_node})
        cl.wait_for(lambda: (c.sim.kube("GET", PDBS + "/xweb").json.get("status") or {}).get("disruptionsAllowed") == 1,
                    30, interval=0.5, what="xweb's PDB allows one eviction")
        seen, halt = set(), threading.Event()

        def watch():  # every claim ever made
            while not halt.is_set():
                try:
                    seen.update(x["metadata"]["name"] for x in c.claims())
                except Exception:  # noqa: BLE001 - a failed poll is tried again
                    pass
                time.sleep(0.1)
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        self.addCleanup(halt.set)
        c.sim.knobs(pod_start_seconds=4)  # X's pods leave one at a time, slowly: X holds one of them for a while
        self.assertEqual(c.sim.kube("PATCH", cl.GROUP + "/proxmoxnodeclasses/batch", {"spec": {"onBoot": False}},
                                    ctype="application/merge-patch+json").status, 200)

        def replaced():
            claims = c.claims()
            xs, nx = self.running_on("xweb")
            ds, nd = self.running_on("dweb")
            new = [x for x in claims if pool_of(x) == "batch" and x["metadata"]["name"] != x_name]
            return (x_name not in [x["metadata"]["name"] for x in claims] and len(new) == 1 and initialized(new[0])
                    and nx == 2 and xs == {new[0]["status"].get("nodeName")} and nd == 1 and ds == {d_node})
        cl.wait_for(lambda: replaced() or len(seen) > 3, 180, interval=1,
                    what="xweb Running on X's replacement, X gone, dweb still on D (or a fourth claim)")
        halt.set()
        t.join(5)
        self.assertLessEqual(len(seen), 3, "no node beyond X, its replacement and D: %s" % sorted(seen))
        self.assertTrue(replaced())
        r_name = [x["metadata"]["name"] for x in c.claims() if pool_of(x) == "batch"][0]
        self.assertEqual(sorted(seen), sorted([x_name, r_name, d_name]), "no node beyond X, its replacement and D")
        self.assertEqual([x["metadata"]["name"] for x in c.claims() if pool_of(x) == "default"], [d_name])
        self.assertEqual([e["message"] for e in self.events("DisruptionTerminating")
                          if e["involvedObject"]["name"] in (d_name, d_node)], [], "D was never disrupted")
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_vms_created_total{reason="provisioning"}'), 2.0, m)
        self.assertEqual(m.get('pvescale_coordinator_vms_created_total{reason="replacement"}'), 1.0, m)
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="drift",reason="replace"}'), 1.0)
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="consolidation",'
                               'reason="delete"}', 0.0), 0.0, m)


if __name__ == "__main__":
    unittest.main(verbosity=2)
