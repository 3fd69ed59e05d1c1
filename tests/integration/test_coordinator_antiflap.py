#!/usr/bin/env python3
# pvescale-coordinator never flaps: a Deployment whose replicas (one per node, by hostname anti-affinity) follow a
# sine over 20 periods, each a trough at 0 longer than consolidateAfter and then one bump of the sine up to the peak
# and back, with consolidation on; a watch records every NodeClaim's creation, Initialized and deletion. Nodes are
# deleted in the troughs (scale down happens, in most troughs), but no more VMs are created than periods x peak
# need, no node is deleted within consolidateAfter of being Initialized, none is deleted in the period it was
# launched in (the bump that needed it), and all are gone once the load stays at 0. On a real control plane: the real
# ReplicaSet controller scales the pods, the real scheduler places them.
# SPDX-License-Identifier: Apache-2.0
import calendar
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
# A period: a trough at 0 for TROUGH_S, then one bump of the sine (BUMP_S) up to PEAK pods and back to 0. The load is
# sampled every STEP_S.
PERIODS, TROUGH_S, BUMP_S, PEAK, STEP_S = 20, 12.0, 5.5, 3, 0.2
PERIOD_S = TROUGH_S + BUMP_S
CONSOLIDATE_AFTER_S = 5
# A scale-down pass every second. A node goes 1-2 passes after it has been empty (its last pod gone: a pod leaving
# is a pod event, as Karpenter's lastPodEventTime) and Initialized for consolidateAfter (the API's whole seconds make
# that up to 1 s early): after its period's end (its bump's first pod is pending 0.7 s into the bump, and its node
# Initialized 1.2 s later at the earliest) and within the next trough (at 0 for about 13.5 s: it ends 0.7 s into the
# next bump). On the real control plane a launch takes 3-8 s from the first pending pod to Initialized on this loaded
# machine (API answers, the VM's start, the kubelet's TLS bootstrap and registration; about 1.5 s on the imitation),
# often past the bump's end: its node goes up to about 15 s after the bump began, so the trough is 12 s (8 s on the
# imitation, where a node went within 10 s).
FLAGS = cl.FAST_SCALE_DOWN + ["--batch-idle-duration=300ms"]
# Budgets at 100 % so that only the anti-flap rules (consolidateAfter, pending pods) hold nodes back.
DISRUPTION = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "%ds" % CONSOLIDATE_AFTER_S,
              "budgets": [{"nodes": "100%"}]}
KNOBS = ("clone_seconds=0.3", "start_seconds=0.1", "join_delay_seconds=0.3", "ready_delay_seconds=0.2",
         "pod_start_seconds=0.1")
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "wave"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def replicas_at(t):
    """The load: 0 through each period's trough, then a bump of the sine, 0 to PEAK and back; 0 after the last."""
    u = t % PERIOD_S - TROUGH_S
    if t >= PERIODS * PERIOD_S or u < 0:
        return 0
    return round(PEAK * (1 - math.cos(2 * math.pi * u / BUMP_S)) / 2)


def period_of(t):
    return int(t // PERIOD_S)


def deployment(replicas):
    tmpl = cl.pod("x", cpu="500m", memory="512Mi", affinity=ANTI)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "wave"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "wave"}},
                     "template": {"metadata": {"labels": {"app": "wave"},
                                               "annotations": {"sim.pvescale.io/exit-on-term": "true"}},
                                  "spec": tmpl["spec"]}}}


def initialized(claim):
    """The Initialized condition's lastTransitionTime when it is True, else None."""
    return next((x.get("lastTransitionTime") for x in (claim.get("status") or {}).get("conditions", [])
                 if x["type"] == "Initialized" and x["status"] == "True"), None)


def api_time(s):
    """Whole seconds since the epoch of an RFC 3339 UTC time, as the API writes them."""
    return calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))


class ClaimWatch(threading.Thread):
    """Watches NodeClaims from a resourceVersion and keeps, per claim, when (monotonic) it was first seen, first
    seen Initialized and first seen being deleted (deletionTimestamp) or gone; and, as the API recorded them, when it
    became Initialized (the condition's lastTransitionTime) and its deletionTimestamp."""

    def __init__(self, sim, rv):
        super().__init__(daemon=True)
        self.sim, self.rv = sim, rv
        self.seen = {}
        self.api = {}
        self.halt = threading.Event()

    def note(self, name, what):
        self.seen.setdefault(name, {}).setdefault(what, time.monotonic())

    def event(self, ev):
        obj = ev["object"]
        if ev["type"] == "ERROR":  # 410 Gone: our resourceVersion left the watch cache; list again, as an informer
            self.relist()
            return
        self.rv = obj["metadata"].get("resourceVersion", self.rv)
        if ev["type"] not in ("ADDED", "MODIFIED", "DELETED"):
            return
        name = obj["metadata"]["name"]
        self.note(name, "created")
        if initialized(obj):
            self.note(name, "initialized")
            self.api.setdefault(name, {}).setdefault("initialized", initialized(obj))
        if obj["metadata"].get("deletionTimestamp") or ev["type"] == "DELETED":
            self.note(name, "deleted")
        if obj["metadata"].get("deletionTimestamp"):
            self.api.setdefault(name, {}).setdefault("deleted", obj["metadata"]["deletionTimestamp"])

    def relist(self):
        r = self.sim.kube("GET", cl.GROUP + "/nodeclaims")
        for obj in r.json["items"]:
            self.event({"type": "ADDED", "object": obj})
        self.rv = r.json["metadata"]["resourceVersion"]

    def run(self):
        while not self.halt.is_set():
            # Bookmarks keep our resourceVersion recent while other kinds' events fill the watch cache.
            conn, resp = self.sim.watch(cl.GROUP + "/nodeclaims?watch=1&allowWatchBookmarks=true&resourceVersion=%s"
                                        "&timeoutSeconds=30" % self.rv)
            try:
                for raw in resp:
                    if raw.strip():
                        self.event(json.loads(raw))
            finally:
                conn.close()


class AntiFlapTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s): the real scheduler places the wave's pods (on nodes that are still
    there, when it can), the real ReplicaSet controller scales them."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"

    def setUp(self):
        self.c = cl.Cluster(self.hosts, agents=self.agents, knobs=KNOBS, kube=self.cp)
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
        self.co = cl.Coordinator(self.c, args=FLAGS)
        start = self.run_load()
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
        troughs = set()  # the periods in whose trough (before their bump's first pod) a node was deleted
        for name, s in self.watch.seen.items():
            self.assertIn("deleted", s, "%s never deleted\n%s" % (name, story))
            self.assertIn("initialized", s, "%s deleted before it was Initialized\n%s" % (name, story))
            # as the API recorded them (whole seconds, the times the coordinator decides on)
            api = self.watch.api[name]
            age = api_time(api["deleted"]) - api_time(api["initialized"])
            self.assertGreaterEqual(age, CONSOLIDATE_AFTER_S, "%s deleted %d s after Initialized (%s)\n%s"
                                    % (name, age, api, story))
            launched, gone = [period_of(s[k] - start) for k in ("created", "deleted")]
            self.assertNotEqual(launched, gone, "%s launched and deleted in period %d\n%s" % (name, gone, story))
            if replicas_at(s["deleted"] - start) == 0 and s["deleted"] - start < PERIODS * PERIOD_S:
                troughs.add(gone)
        # Scale down happens between the bumps, not only once the load is over: in most of the 19 troughs after one.
        sys.stderr.write("nodes deleted in the troughs of periods %s\n" % sorted(troughs))
        self.assertGreaterEqual(len(troughs & set(range(1, PERIODS))), (PERIODS - 1) * 3 // 4,
                                "scale down in the troughs of periods %s only\n%s" % (sorted(troughs), story))


if __name__ == "__main__":
    unittest.main(verbosity=2)
