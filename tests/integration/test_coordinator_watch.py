#!/usr/bin/env python3
# pvescale-coordinator keeps an exact picture of the cluster through watch disconnects (resume from the last
# resource version) and expired resource versions (410 Gone: relist): while every watch is cut again and again
# (first with a long watch history, then with almost none), pods created and deleted meanwhile are all seen: the
# coordinator's pending-pod count matches the API, every pending pod is nominated, deleted pods are forgotten.
# On a real control plane (../shared/k8s), the coordinator's connections cut by the simulator's fault proxy in
# front of kube-apiserver; for the relists, a control plane without the watch cache whose etcd history is compacted
# while the coordinator cannot reach kube-apiserver (real 410s: the watch cache would keep every event of the last
# 75 s).
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"


class Churn:
    """What both tests do: start the coordinator, cut every watch while pods come and go, compare pictures."""

    def pending_in_api(self):
        return sorted(p["metadata"]["name"] for p in self.c.items(PODS) if cl.unschedulable(p))

    def nominated(self, name):
        return any(e["reason"] == "Nominated" for e in self.c.pod_events(name))

    def churn(self, phase, waves):
        """Each wave: cut every watch, create 3 pods, delete an earlier one."""
        c = self.c
        for wave in range(waves):
            r = c.sim.admin("POST", "/actions/disconnect-watches")
            self.assertEqual(r.status, 200, r)
            for i in range(3):
                name = "%s%d-%d" % (phase, wave, i)
                c.create(PODS, cl.pod(name, cpu="250m", memory="256Mi"))
                self.created.append(name)
            victim = next(n for n in self.created if n not in self.deleted)
            r = c.sim.kube("DELETE", PODS + "/" + victim)
            self.assertIn(r.status, (200, 202), r)
            self.deleted.append(victim)
            time.sleep(0.4)
        c.sim.admin("POST", "/actions/disconnect-watches")

    def settled(self):
        """The coordinator's picture equals the API's."""
        want = sorted(set(self.created) - set(self.deleted))
        cl.wait_for(lambda: self.pending_in_api() == want, 20, what="the scheduler's verdicts")
        cl.wait_for(lambda: self.co.metric("pending_pods") == len(want), 20, what="coordinator pending count")
        cl.wait_for(lambda: all(self.nominated(n) for n in want), 30, what="every pending pod nominated")
        cl.wait_for(lambda: self.co.metric("nodeclaims") == len(self.c.claims()), 10, what="claim count")

    def start(self):
        c = self.c
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        self.co = cl.Coordinator(c, ["--launch=false", "--batch-idle-duration=300ms", "--batch-max-duration=2s"])
        # The first watches are open (for 5 to 10 minutes) and already counted.
        for res in ("pods", "nodes", "nodeclaims", "nodepools"):
            cl.wait_for(lambda: self.co.metric('watch_requests_total{resource="%s"}' % res) == 1, 5,
                        what="the open watch of %s counted" % res)


class WatchTest(Churn, cl.SharedControlPlaneTest):
    agents = False

    def setUp(self):
        super().setUp()
        self.created, self.deleted = [], []

    def test_no_event_lost_across_disconnects(self):
        self.start()
        # The history is long, so every cut watch resumes from its resource version.
        self.churn("a", 4)
        self.settled()
        self.assertEqual(self.co.metric('watch_relists_410_total{resource="pods"}'), 0)
        self.assertGreater(self.co.metric('watch_resumes_total{resource="pods"}'), 0)
        self.assertEqual(self.co.metric('watch_lists_total{resource="pods"}'), 1)
        self.assertGreaterEqual(self.co.metric('watch_requests_total{resource="pods"}'),
                                1 + self.co.metric('watch_resumes_total{resource="pods"}'))


class WatchRelistTest(Churn, cl.SharedControlPlaneTest):
    """A control plane of its own whose kube-apiserver has no watch cache, so that a watch is served from etcd and
    one from a compacted resourceVersion ends in 410 Gone (the cache would keep the last 75 s of events)."""
    agents = False
    apiserver_flags = {"watch-cache": "false"}

    def setUp(self):
        super().setUp()
        self.created, self.deleted = [], []

    def relists(self):
        return self.co.metric('watch_relists_410_total{resource="pods"}')

    def churn_gone(self, phase, waves):
        """Each wave: kube-apiserver unreachable through the fault proxy (every connection dropped, new ones
        reset), 3 pods created and an earlier one deleted meanwhile, two more writes and etcd's history compacted
        past every resourceVersion the coordinator has, kube-apiserver reachable again: each watch resumes from a
        compacted resourceVersion, gets 410 Gone and lists again; the deletion comes out of the difference."""
        c = self.c
        for wave in range(waves):
            before = self.relists()
            lists = self.co.metric('watch_lists_total{resource="pods"}')
            c.sim.knobs(kube_unreachable=True)
            r = c.sim.admin("POST", "/actions/disconnect-watches")
            self.assertEqual(r.status, 200, r)
            for i in range(3):
                name = "%s%d-%d" % (phase, wave, i)
                c.create(PODS, cl.pod(name, cpu="250m", memory="256Mi"))
                self.created.append(name)
            victim = next(n for n in self.created if n not in self.deleted)
            r = c.sim.kube("DELETE", PODS + "/" + victim)
            self.assertIn(r.status, (200, 202), r)
            self.deleted.append(victim)
            for i in range(2):  # the pods' last event is then older than the compacted revision, not equal to it
                c.create("/api/v1/namespaces/default/configmaps", {
                    "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump-%s%d-%d" % (phase, wave, i)}})
            self.cp.compact_etcd()
            c.sim.knobs(kube_unreachable=False)
            cl.wait_for(lambda: self.relists() > before, 60, interval=0.2,
                        what="the coordinator's pods watch relisted after a 410 (wave %d)" % wave)
            # the 410 is counted when it comes, the list when it is done: the next wave's outage must not fall
            # between them, or the list would be made after the compaction and the next watch would not be stale
            cl.wait_for(lambda: self.co.metric('watch_lists_total{resource="pods"}') > lists, 60, interval=0.2,
                        what="the coordinator's pods list after the 410 done (wave %d)" % wave)

    def test_no_event_lost_across_relists(self):
        self.start()
        self.churn_gone("b", 5)
        self.settled()
        self.assertGreater(self.co.metric('watch_relists_410_total{resource="pods"}'), 0)
        m = self.co.metrics()
        relists = sum(v for k, v in m.items() if k.startswith("pvescale_coordinator_watch_relists_410_total"))
        self.assertGreaterEqual(relists, 5)
        # kube-apiserver's 410s, as the coordinator logged them
        self.assertRegex(self.co.logtext(), r"watch pods: resource version \d+ expired \(410 Gone\); listing again")


if __name__ == "__main__":
    unittest.main()
