#!/usr/bin/env python3
# pvescale-coordinator through two things a real kube-apiserver does that the happy path never shows, each on a
# real control plane of its own (../shared/k8s):
# - started before its CRDs are Established (a real kube-apiserver Establishes a CRD a moment after it is created,
#   so the coordinator starts before they exist: until then their custom resources answer 404 and discovery leaves
#   them out), it keeps retrying the lists that 404 and, once they are served, works: a pending pod gets a NodeClaim;
# - after a kube-apiserver restart (POST /actions/kube-restart: every watch ends, nothing answers for 5-8 s, and the
#   new watch cache starts past every resourceVersion the coordinator holds), each resumed watch gets 410 Gone and
#   its informer lists again (watch_relists_410_total, the log line), and the coordinator goes on: a pod deleted
#   after the restart is forgotten (its in-flight NodeClaim takes the pod created next).
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
HOSTS = "pve1=32intel64-2p8co2t+8ve"
# One node per pod (hostname anti-affinity among app=web), so each new pod needs a NodeClaim of its own.
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def web(name):
    return cl.pod(name, cpu="500m", memory="512Mi", labels={"app": "web"}, affinity=ANTI)


class ApiserverTest(cl.CoordinatorTest):
    def nominated(self, name):
        return [e for e in self.c.pod_events(name) if e["reason"] == "Nominated"]

    def claim_of(self, name):
        """The NodeClaim a pod's Nominated event names."""
        return self.nominated(name)[-1]["message"].split("nodeclaim/")[1].split()[0]

    def test_started_before_the_crds_are_established(self):
        self.c = c = cl.Cluster(HOSTS, agents=False, kube="real", crds=False)
        self.co = None
        r = c.sim.kube("GET", cl.GROUP + "/nodepools")  # no such group yet: kube-apiserver's plain-text 404
        self.assertEqual((r.status, r.raw), (404, b"404 page not found\n"), "served before the CRDs exist")
        c.create(PODS, web("web-0"))
        self.co = cl.Coordinator(c, ["--launch=false"], wait_ready=False)
        line = "list nodepools: GET %s/nodepools: 404 Not Found" % cl.GROUP
        cl.wait_for(lambda: line in self.co.logtext(), 10, what="a failed list of nodepools")
        self.assertEqual(c.sim.kube("GET", cl.GROUP + "/nodepools").status, 404, "the coordinator ran before them")
        self.assertIsNone(self.co.proc.poll(), "the coordinator exited:\n" + self.co.logtext())
        self.assertFalse(self.co.ready(), "ready before every informer listed")
        c.create_crds()

        def established():
            crds = c.items("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            return len(crds) == len(cl.CRDS) and all(any(x["type"] == "Established" and x["status"] == "True"
                                              for x in crd["status"]["conditions"]) for crd in crds)
        cl.wait_for(established, 10, interval=0.2, what="the CRDs Established")
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        cl.wait_for(lambda: self.nominated("web-0"), 30, interval=0.5, what="web-0 nominated on a NodeClaim")
        self.assertEqual(len(c.claims()), 1)
        cl.wait_for(self.co.ready, 10, what="coordinator /readyz")
        failures = self.co.metric('watch_failures_total{resource="nodepools"}')
        self.assertGreater(failures, 0, "the 404s were counted as failed lists")

    def test_a_restarted_apiserver_expires_the_watches_and_the_informers_relist(self):
        self.c = c = cl.Cluster(HOSTS, agents=False, kube="real")
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(PODS, web("web-0"))
        c.create(PODS, web("web-1"))
        self.co = cl.Coordinator(c, ["--launch=false"])
        cl.wait_for(lambda: self.nominated("web-0") and self.nominated("web-1"), 30, interval=0.5,
                    what="web-0 and web-1 nominated")
        claim_1 = self.claim_of("web-1")
        before = self.co.metrics()
        self.assertFalse([k for k, v in before.items() if "watch_relists_410_total" in k and v], before)

        r = c.sim.admin("POST", "/actions/kube-restart", {"down_seconds": 1})
        self.assertEqual(r.status, 200, r)
        resources = ("pods", "nodes", "nodeclaims", "nodepools", "proxmoxnodeclasses")
        relisted = lambda: all(  # noqa: E731
            self.co.metric('watch_relists_410_total{resource="%s"}' % x) >= 1 for x in resources)
        cl.wait_for(relisted, 60, interval=0.5, what="every informer relisted after a 410")
        log = self.co.logtext()
        for x in resources:
            self.assertRegex(log, r"watch %s: resource version \d+ expired \(410 Gone\); listing again" % x)
        self.assertEqual(c.sim.kube("DELETE", PODS + "/web-1", {"gracePeriodSeconds": 0}).status, 200)
        c.create(PODS, web("web-2"))
        cl.wait_for(lambda: self.nominated("web-2"), 30, interval=0.5, what="web-2 nominated after the restart")
        # web-1's claim, in flight and empty since web-1 went, takes web-2: the coordinator saw the deletion.
        self.assertEqual(self.claim_of("web-2"), claim_1)
        self.assertEqual(len(c.claims()), 2)
        cl.wait_for(lambda: self.co.metric("pending_pods") == 2, 10, what="the coordinator's pending count")
        self.assertTrue(self.co.ready())


if __name__ == "__main__":
    unittest.main()
