#!/usr/bin/env python3
# pvescale-coordinator's drift of the Proxmox template and of NodePool requirements, against the simulator and real
# agents, on a real control plane. Three NodePools, a node each, at once: the template the "tmpl" pool's node was cloned
# from is edited through the PVE API (its config digest changes), the "reqs" pool is made to require the other zone, and
# the "keep" pool too, whose Node is annotated do-not-disrupt. Each drifted claim gets the condition Drifted with the
# reason naming the drift (TemplateDrifted, RequirementsDrifted); tmpl's and reqs's are replaced first (the old Node
# tainted before the new claim is created, and deleted only once it is Initialized), by a node that matches (cloned from
# the edited template, in the required zone), and their old VMs go; keep's stays, and loses its condition once its
# requirements are put back.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
POOLS = cl.GROUP + "/nodepools/"
ZONE = "topology.kubernetes.io/zone"
EXIT = {"sim.pvescale.io/exit-on-term": "true"}  # the simulated kubelet stops the pod at once on SIGTERM
MERGE = "application/merge-patch+json"


def condition(claim, kind):
    return next((x for x in (claim.get("status") or {}).get("conditions", []) if x["type"] == kind), None)


def initialized(claim):
    c = condition(claim, "Initialized")
    return bool(c and c["status"] == "True")


def in_zone(zone):
    return [{"key": ZONE, "operator": "In", "values": [zone]}]


def deployment(pool):
    tmpl = cl.pod("x", cpu="500m", memory="512Mi", nodeSelector={"pvescale.io/nodepool": pool})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": pool},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": pool}},
                     "template": {"metadata": {"labels": {"app": pool}, "annotations": EXIT}, "spec": tmpl["spec"]}}}


class Watcher(cl.FirstSeen):
    """Polls the claims and Nodes every 200 ms and keeps when each thing was first seen: an old claim's Drifted
    reason, its replacement Initialized, its Node tainted."""

    def __init__(self, c, old):
        super().__init__(0.2)
        self.c, self.old = c, old  # {claim name: node name}
        self.drifted = {}  # claim -> the reasons of its Drifted condition seen

    def poll(self):
        claims = self.c.claims()
        nodes = {n["metadata"]["name"]: n for n in self.c.items("/api/v1/nodes")}
        for name, node in self.old.items():  # the claims were read first, noted after the Node's taint
            taints = (nodes.get(node, {}).get("spec") or {}).get("taints") or []
            self.note("tainted " + name, any(t["key"] == "pvescale.io/disrupted" for t in taints))
            for x in claims:
                ann = x["metadata"].get("annotations") or {}
                self.note("new created " + name, ann.get("pvescale.io/replaces") == name)
                self.note("new initialized " + name, ann.get("pvescale.io/replaces") == name and initialized(x))
                d = condition(x, "Drifted")
                if x["metadata"]["name"] == name and d and d["status"] == "True":
                    self.drifted.setdefault(name, set()).add(d["reason"])
            self.note("node deleting " + name, node not in nodes or nodes[node]["metadata"].get("deletionTimestamp"))



class DriftTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s): the real scheduler places the Deployments' pods, the real Eviction API
    drains the old Nodes."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"

    def events(self, reason, kind="NodeClaim"):
        return [e for e in self.c.items("/api/v1/namespaces/default/events")
                if e.get("reason") == reason and e["involvedObject"]["kind"] == kind]

    def by_pool(self):
        return {x["metadata"]["labels"]["pvescale.io/nodepool"]: x for x in self.c.claims()
                if not x["metadata"].get("deletionTimestamp")}

    def running(self, pool):
        return [p["spec"].get("nodeName") for p in self.c.items(PODS)
                if (p["metadata"].get("labels") or {}).get("app") == pool and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") == "Running"]

    def template(self, host):
        """(vmid, config digest) of the template VM on host."""
        r = self.c.sim.pve("GET", "/nodes/%s/qemu" % host)
        vmid = min(v["vmid"] for v in r.data if v.get("template"))
        return vmid, self.c.sim.pve("GET", "/nodes/%s/qemu/%d/config" % (host, vmid)).data["digest"]

    def patch(self, path, body):
        r = self.c.sim.kube("PATCH", path, body, ctype=MERGE)
        self.assertEqual(r.status, 200, r)

    def scale_up(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        for pool, zone in (("tmpl", "pve1"), ("reqs", "pve2"), ("keep", "pve2")):
            c.create(cl.GROUP + "/nodepools", cl.nodepool(pool, requirements=in_zone(zone)))
            c.create(DEPLOYMENTS, deployment(pool))
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN)

        def ready():
            claims = self.by_pool()
            return (len(claims) == 3 and all(initialized(x) for x in claims.values()) and
                    all(self.running(p) == [claims[p]["status"]["nodeName"]] for p in claims))
        cl.wait_for(ready, 120, interval=0.5, what="a pod Running on an Initialized claim of each pool")
        return self.by_pool()

    def test_template_and_requirements_drift(self):
        c = self.c
        old = self.scale_up()
        vmid, digest = self.template("pve1")
        tmpl = old["tmpl"]["status"]
        self.assertEqual((tmpl["host"], tmpl["imageID"], tmpl.get("imageDigest")), ("pve1", "pve1/%d" % vmid, digest),
                         "the claim records the template and its config digest at the clone")
        self.assertEqual(old["reqs"]["status"]["host"], "pve2")
        keep_node = old["keep"]["status"]["nodeName"]
        self.patch("/api/v1/nodes/" + keep_node, {"metadata": {"annotations": {"pvescale.io/do-not-disrupt": "true"}}})
        w = Watcher(c, {old[p]["metadata"]["name"]: old[p]["status"]["nodeName"] for p in ("tmpl", "reqs")})
        w.start()
        self.addCleanup(w.halt.set)
        t0 = time.monotonic()
        r = c.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"description": "k8s node template, v2"})
        self.assertEqual(r.status, 200, r)
        _, digest2 = self.template("pve1")
        self.assertNotEqual(digest2, digest)
        self.patch(POOLS + "reqs", {"spec": {"template": {"spec": {"requirements": in_zone("pve1")}}}})
        self.patch(POOLS + "keep", {"spec": {"template": {"spec": {"requirements": in_zone("pve1")}}}})

        # keep: drifted, held by do-not-disrupt; the condition goes once its requirements hold again
        keep = old["keep"]["metadata"]["name"]

        def keep_drifted():
            d = condition(self.by_pool()["keep"], "Drifted")
            return d and d["status"] == "True" and d["reason"] == "RequirementsDrifted" and d
        d = cl.wait_for(keep_drifted, 30, interval=0.5, what="keep's claim Drifted (RequirementsDrifted)")
        self.assertEqual(d["message"], "NodePool keep requires %s In [pve1], not %s=pve2" % (ZONE, ZONE))
        cl.wait_for(lambda: any(e["involvedObject"]["name"] == keep and "drifted (NodePool keep requires" in e["message"]
                                and "do-not-disrupt" in e["message"] for e in self.events("DisruptionBlocked")),
                    30, interval=1, what="an Event on keep's claim: drifted, but do-not-disrupt")
        self.patch(POOLS + "keep", {"spec": {"template": {"spec": {"requirements": in_zone("pve2")}}}})
        cl.wait_for(lambda: condition(self.by_pool()["keep"], "Drifted") is None, 30, interval=0.5,
                    what="keep's Drifted condition removed once its requirements hold again")

        # tmpl and reqs: replaced first, then drained, by nodes that match
        def replaced():
            now = self.by_pool()
            return (all(now[p]["metadata"]["name"] != old[p]["metadata"]["name"] and initialized(now[p])
                        for p in ("tmpl", "reqs")) and len(c.claims()) == 3 and
                    not {old[p]["status"]["vmid"] for p in ("tmpl", "reqs")} & {v["vmid"] for v in c.vms()} and
                    all(self.running(p) == [now[p]["status"]["nodeName"]] for p in ("tmpl", "reqs")))
        cl.wait_for(replaced, 120, interval=1, what="tmpl's and reqs's claims replaced, their old VMs gone")
        took = time.monotonic() - t0
        w.halt.set()
        w.join(5)
        now = self.by_pool()
        for p, reason in (("tmpl", "TemplateDrifted"), ("reqs", "RequirementsDrifted")):
            name = old[p]["metadata"]["name"]
            self.assertEqual(w.drifted.get(name), {reason}, p)
            self.assertLessEqual(w.first["tainted " + name], w.first["new created " + name],
                                 "%s: the old Node is tainted before its replacement is launched (Karpenter's order)" % p)
            self.assertLess(w.first["new initialized " + name], w.first["node deleting " + name],
                            "%s: the old Node goes only once the replacement is Initialized" % p)
            self.assertEqual((now[p]["metadata"].get("annotations") or {}).get("pvescale.io/replaces"), name)
            self.assertEqual(now[p]["status"]["host"], "pve1")
        self.assertEqual(now["tmpl"]["status"]["imageDigest"], digest2, "cloned from the edited template")
        self.assertIsNone(condition(now["tmpl"], "Drifted"))
        self.assertIsNone(condition(now["reqs"], "Drifted"))
        self.assertEqual(now["keep"]["metadata"]["name"], keep, "keep's claim stays")
        launching = {e["involvedObject"]["name"]: e["message"] for e in self.events("DisruptionLaunchingReplacement")}
        self.assertIn("Drift: the Proxmox template VM %d on pve1 changed since launch (config digest %s, was %s)" %
                      (vmid, digest2[:12], digest[:12]), launching.get(old["tmpl"]["metadata"]["name"], ""))
        self.assertIn("Drift: NodePool reqs requires %s In [pve1], not %s=pve2; replace" % (ZONE, ZONE),
                      launching.get(old["reqs"]["metadata"]["name"], ""))
        self.assertNotIn(keep, launching)
        m = self.co.metrics()
        self.assertEqual(m.get('pvescale_coordinator_disruption_actions_total{method="drift",reason="replace"}'), 2.0)
        sys.stderr.write("drift: both replaced %.1f s after the changes\n" % took)


if __name__ == "__main__":
    unittest.main(verbosity=2)
