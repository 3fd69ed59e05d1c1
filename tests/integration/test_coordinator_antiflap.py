#!/usr/bin/env python3
# pvescale-coordinator never flaps: a Deployment whose replicas (one per node, by hostname anti-affinity) follow a
# sine over a few periods, with consolidation on, then none; a watch records every NodeClaim's creation, Initialized
# and deletion; no more VMs than periods × peak need, no node deleted within consolidateAfter of being Initialized,
# none deleted in the period it was launched in, and all gone once the load stays at 0.
# SPDX-License-Identifier: Apache-2.0
import json
import math
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
PERIODS, PERIOD_S, PEAK, STEP_S = 4, 40.0, 3, 2.0
CONSOLIDATE_AFTER_S = 20
# Budgets at 100 % so that only the anti-flap rules (consolidateAfter, pending pods) hold nodes back.
DISRUPTION = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "%ds" % CONSOLIDATE_AFTER_S,
              "budgets": [{"nodes": "100%"}]}
KNOBS = ("clone_seconds=0.5", "start_seconds=0.2", "join_delay_seconds=1", "ready_delay_seconds=0.5",
         "pod_start_seconds=0.3")
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "wave"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def replicas_at(t):
    """The load: 0 at each period's start and end, PEAK at its middle."""
    return round(PEAK * (1 - math.cos(2 * math.pi * t / PERIOD_S)) / 2)


def deployment(replicas):
    tmpl = cl.pod("x", cpu="500m", memory="512Mi", affinity=ANTI)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "wave"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "wave"}},
                     "template": {"metadata": {"labels": {"app": "wave"},
                                               "annotations": {"sim.pvescale.io/exit-on-term": "true"}},
                                  "spec": tmpl["spec"]}}}


def initialized(claim):
    return any(x["type"] == "Initialized" and x["status"] == "True"
               for x in (claim.get("status") or {}).get("conditions", []))


class ClaimWatch(threading.Thread):
    """Watches NodeClaims from a resourceVersion and keeps, per claim, when (monotonic) it was first seen, first
    seen Initialized and first seen being deleted (deletionTimestamp) or gone."""

    def __init__(self, sim, rv):
        super().__init__(daemon=True)
        self.sim, self.rv = sim, rv
        self.seen = {}
        self.halt = threading.Event()

    def note(self, name, what):
        self.seen.setdefault(name, {}).setdefault(what, time.monotonic())

    def event(self, ev):
        obj = ev["object"]
        self.rv = obj["metadata"].get("resourceVersion", self.rv)
        if ev["type"] not in ("ADDED", "MODIFIED", "DELETED"):
            return
        name = obj["metadata"]["name"]
        self.note(name, "created")
        if initialized(obj):
            self.note(name, "initialized")
        if obj["metadata"].get("deletionTimestamp") or ev["type"] == "DELETED":
            self.note(name, "deleted")

    def run(self):
        while not self.halt.is_set():
            conn, resp = self.sim.watch(cl.GROUP + "/nodeclaims?watch=1&resourceVersion=%s&timeoutSeconds=5" % self.rv)
            try:
                for raw in resp:
                    if raw.strip():
                        self.event(json.loads(raw))
            finally:
                conn.close()


class AntiFlapTest(cl.CoordinatorTest):
    def setUp(self):
        self.c = cl.Cluster("pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", knobs=KNOBS)
        self.co = None

    def setup_objects(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool(disruption=DISRUPTION))
        c.create(DEPLOYMENTS, deployment(0))

    def run_load(self):
        """Scales the Deployment along the sine for PERIODS periods; returns the monotonic start."""
        start, last = time.monotonic(), 0
        while time.monotonic() - start < PERIODS * PERIOD_S:
            want = replicas_at(time.monotonic() - start)
            if want != last:
                r = self.c.sim.kube("PATCH", DEPLOYMENTS + "/wave", {"spec": {"replicas": want}},
                                    ctype="application/merge-patch+json")
                self.assertEqual(r.status, 200, r)
                last = want
            time.sleep(STEP_S)
        return start

    def story(self, start):
        """Every claim's times since the load's start, for a failure's message."""
        rows = []
        for name, s in sorted(self.watch.seen.items(), key=lambda kv: kv[1]["created"]):
            rows.append("%s: %s" % (name, ", ".join("%s t+%.1fs" % (k, v - start) for k, v in
                                                      sorted(s.items(), key=lambda kv: kv[1]))))
        return "\n".join(rows)

    def test_a_sine_of_load_does_not_flap(self):
        self.setup_objects()
        rv = self.c.sim.kube("GET", cl.GROUP + "/nodeclaims").json["metadata"]["resourceVersion"]
        self.watch = ClaimWatch(self.c.sim, rv)
        self.watch.start()
        self.co = cl.Coordinator(self.c)
        start = self.run_load()
        # the load's troughs (about 16 s at 0) are shorter than consolidateAfter, so its nodes are kept through
        # them; once it stays at 0 they go
        cl.wait_for(lambda: not self.c.claims(), 60, interval=1, what="every claim gone after the load ends")
        time.sleep(2)  # the watch catches up
        self.watch.halt.set()
        story = self.story(start)
        sys.stderr.write("claims (times from the load's start):\n%s\n" % story)
        created = len(self.watch.seen)
        self.assertGreaterEqual(created, PEAK, "the peak needs %d nodes\n%s" % (PEAK, story))
        self.assertLessEqual(created, PERIODS * PEAK, "more claims than periods x peak need\n" + story)
        self.assertLessEqual(self.c.sim.admin("GET", "/calls").json["pve"].get(
            "POST /nodes/{node}/qemu/{vmid}/clone", 0), PERIODS * PEAK, "VMs cloned")
        for name, s in self.watch.seen.items():
            self.assertIn("deleted", s, "%s never deleted\n%s" % (name, story))
            self.assertIn("initialized", s, "%s deleted before it was Initialized\n%s" % (name, story))
            age = s["deleted"] - s["initialized"]
            self.assertGreaterEqual(age, CONSOLIDATE_AFTER_S, "%s deleted %.1f s after Initialized\n%s"
                                    % (name, age, story))
            launched, gone = [int((s[k] - start) // PERIOD_S) for k in ("created", "deleted")]
            self.assertNotEqual(launched, gone, "%s launched and deleted in period %d\n%s" % (name, gone, story))


if __name__ == "__main__":
    unittest.main(verbosity=2)
