#!/usr/bin/env python3
# Karpenter 1.14's NodePool policies in pvescale-coordinator (issue 40 item 5) against the simulator, real agents and a
# real control plane (../shared/k8s, shared by the module's tests): NodeRegistrationHealthy on the NodePool (Unknown
# for a new pool or a changed one, False once half of the last four launches failed to join, True when one joins),
# Karpenter's metric names.
# SPDX-License-Identifier: Apache-2.0
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_disruption import rfc3339_seconds  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_replace import deployment, initialized  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
WHEN_EMPTY = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}
POOLS = cl.GROUP + "/nodepools"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
SMALL, MEM = "c1.2VCPU-4GB", "t1.2VCPU-6GB"  # allocatable 1920m each, 2600Mi and 4085Mi; prices 3 and 3.5


def condition(obj, ctype):
    for x in (obj.get("status") or {}).get("conditions") or []:
        if x.get("type") == ctype:
            return x
    return None


class RegistrationHealthTest(cl.SharedControlPlaneTest):
    """NodeRegistrationHealthy as Karpenter's registrationhealth, registration and liveness controllers keep it."""

    def pool(self):
        return self.c.sim.kube("GET", POOLS + "/default").json

    def health(self):
        return condition(self.pool(), "NodeRegistrationHealthy")

    def test_a_template_that_never_joins_is_reported_then_healed(self):
        """The seed reported a template that never joins as "0 zones" with no reason (its issues #120 and #190).
        Here the pool's NodeRegistrationHealthy is Unknown while nothing is known, False with the reason and the
        claim's message once two launches failed to join (not after the first one: Karpenter's four-place ring needs
        half of it), True as soon as a node joins, and Unknown again when the pool's spec changes."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(POOLS, cl.nodepool())
        self.assertEqual(c.sim.admin("POST", "/knobs", {"join_delay_seconds": 3600}).status, 200)
        self.co = cl.Coordinator(c, ["--registration-timeout=3s"] + cl.FAST_SCALE_DOWN)
        unknown = cl.wait_for(lambda: self.health(), 30, interval=0.3, what="NodeRegistrationHealthy on the pool")
        self.assertEqual(unknown["status"], "Unknown", unknown)
        pool = self.pool()
        self.assertEqual(unknown["observedGeneration"], pool["metadata"]["generation"])
        klass = c.sim.kube("GET", cl.GROUP + "/proxmoxnodeclasses/default").json
        self.assertEqual(pool["status"]["nodeClassObservedGeneration"], klass["metadata"]["generation"])

        web = cl.pod("web", cpu="500m", memory="512Mi")
        web["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "forever"}  # no duration: ignored, told
        c.create(PODS, web)

        def timeouts():
            return [e for e in c.items("/api/v1/namespaces/default/events")
                    if e.get("involvedObject", {}).get("kind") == "NodeClaim" and e["reason"] == "RegistrationTimeout"]
        cl.wait_for(lambda: timeouts(), 90, interval=0.3, what="a first RegistrationTimeout")
        self.assertNotEqual(self.health()["status"], "False", "one failure alone makes no verdict")
        bad = cl.wait_for(lambda: (self.health() or {}).get("status") == "False" and self.health(), 120, interval=0.3,
                          what="NodeRegistrationHealthy False")
        self.assertGreaterEqual(len(timeouts()), 2)
        self.assertEqual(bad["reason"], "RegistrationFailed")
        self.assertIn("Failed to register node: nodeclaim/", bad["message"])
        self.assertIn("within 3 s", bad["message"])
        self.assertIn("launcher: NodePool default: NodeRegistrationHealthy False", self.co.logtext())

        # The template is fixed: the next launch joins (after the pool's per-host back-off) and the pool is healthy.
        self.assertEqual(c.sim.admin("POST", "/knobs", {"join_delay_seconds": 0}).status, 200)
        good = cl.wait_for(lambda: (self.health() or {}).get("status") == "True" and self.health(), 150,
                           interval=0.5, what="NodeRegistrationHealthy True")
        self.assertEqual(good["reason"], "NodeRegistrationHealthy")
        cl.wait_for(lambda: (c.sim.kube("GET", PODS + "/web").json.get("status") or {}).get("phase") == "Running",
                    60, interval=0.5, what="web Running")

        # Its do-not-disrupt value is neither "true" nor a duration: Karpenter's Warning, once (a pass a second).
        def invalid():
            return [e for e in c.pod_events("web") if e["reason"] == "InvalidDoNotDisruptAnnotation"]
        told = cl.wait_for(invalid, 30, interval=0.5, what="the InvalidDoNotDisruptAnnotation Event")
        self.assertEqual(told[0]["type"], "Warning")
        self.assertEqual(told[0]["message"], "Invalid karpenter.sh/do-not-disrupt annotation value \"forever\", "
                         "ignoring annotation. Use 'true' or a duration like '5m', '1h'")
        time.sleep(3)  # three more passes: still one Event, sent once
        self.assertEqual(len(invalid()), 1)
        self.assertEqual(invalid()[0].get("count", 1), 1)

        # Karpenter's metrics: each failed launch a nodeclaims_disrupted_total{reason="registration_timeout"}, the
        # pod seen Pending then Ready one pods_startup_duration_seconds observation.
        m = self.co.metrics()
        failed = 'pvescale_coordinator_nodeclaims_disrupted_total{reason="registration_timeout",nodepool="default",' \
                 'capacity_type="on-demand",consolidation_policy="",termination_mode="graceful"}'
        self.assertEqual(m.get(failed), float(len(timeouts())), m)
        self.assertEqual(m.get("pvescale_coordinator_pods_startup_duration_seconds_count"), 1.0)
        web = c.sim.kube("GET", PODS + "/web").json
        ready = [x for x in web["status"]["conditions"] if x["type"] == "Ready"][0]
        took = rfc3339_seconds(ready["lastTransitionTime"]) - rfc3339_seconds(web["metadata"]["creationTimestamp"])
        self.assertAlmostEqual(m["pvescale_coordinator_pods_startup_duration_seconds_sum"], took, delta=0.01)

        # A new generation of the pool: nothing is known of it yet. It also empties its nodes at once (WhenEmpty).
        r = c.sim.kube("PATCH", POOLS + "/default", {"spec": {"disruption": WHEN_EMPTY}},
                       ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        gen = r.json["metadata"]["generation"]
        again = cl.wait_for(lambda: (self.health() or {}).get("observedGeneration") == gen and self.health(), 30,
                            interval=0.3, what="the condition recomputed for the new generation")
        self.assertEqual(again["status"], "Unknown")
        self.assertEqual(again["reason"], "AwaitingReconciliation")

        # The pod goes: emptiness deletes its node, counted with Karpenter's labels (no pod to move).
        self.assertEqual(c.sim.kube("DELETE", PODS + "/web").status, 200)
        empty = 'pvescale_coordinator_nodeclaims_disrupted_total{reason="empty",nodepool="default",' \
                'capacity_type="on-demand",consolidation_policy="when_empty",termination_mode="graceful"}'
        cl.wait_for(lambda: self.co.metrics().get(empty) == 1.0, 60, interval=0.5, what="the empty node disrupted")
        self.assertEqual(self.co.metrics().get(empty.replace("nodeclaims_disrupted_total",
                                                             "pods_disruption_initiated_total")), 0.0)
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused (NodePool status among them)")


class BalancedTest(cl.SharedControlPlaneTest):
    """consolidationPolicy: Balanced, as Karpenter 1.14 scores a consolidation: the share of the pool's cost it saves
    against the share of the pool's disruption it causes (each node 1, each pod that moves 1), taken at a score of
    0.5 or more."""
    hosts = "pve1=32intel64-2p8co2t+8ve"

    def patch_pool(self, disruption):
        r = self.c.sim.kube("PATCH", POOLS + "/default", {"spec": {"disruption": disruption}},
                            ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)

    def claims_initialized(self, n):
        claims = self.c.claims()
        return len(claims) == n and all(initialized(x) for x in claims) and claims

    def disrupted(self, reason, policy):
        labels = '{reason="%s",nodepool="default",capacity_type="on-demand",consolidation_policy="%s",' \
                 'termination_mode="graceful"}' % (reason, policy)
        m = self.co.metrics()
        return (m.get("pvescale_coordinator_nodeclaims_disrupted_total" + labels, 0.0),
                m.get("pvescale_coordinator_pods_disruption_initiated_total" + labels, 0.0))

    def test_balanced_leaves_a_marginal_replace_and_still_empties(self):
        """A node whose one pod would fit a shape 0.5 cheaper (of a pool costing 6.5: 7.7% saved) for half of the
        pool's disruption (2 of 4) scores 0.15: Balanced leaves it, with an Event that gives the score, while
        WhenEmptyOrUnderutilized replaces it at once. An empty node still goes under Balanced (its score is high:
        it moves nothing)."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        # consolidateAfter 20s: no node is a candidate before the pods planned on the others are bound to them (a pass
        # right after a node is Initialized sees it empty while its pods are only nominated to it).
        balanced = {"consolidationPolicy": "Balanced", "consolidateAfter": "20s", "budgets": [{"nodes": "100%"}]}
        pool = cl.nodepool(disruption=balanced, requirements=[
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [SMALL, MEM]}])
        c.create(POOLS, pool)
        self.co = cl.Coordinator(c, cl.FAST_SCALE_DOWN)
        c.create(PODS, cl.pod("keep", cpu="1700m", memory="512Mi"))
        first = cl.wait_for(lambda: c.pods_running(1) and self.claims_initialized(1), 90, interval=0.5,
                            what="keep Running on an Initialized claim")[0]
        self.assertEqual(first["spec"]["instanceType"], SMALL)
        # web (1500m) and a filler that needs memory share a second node, which must be the dearer MEM shape.
        web = deployment("web", 1)
        web["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1500m"
        c.create(DEPLOYS, web)
        c.create(PODS, cl.pod("filler", cpu="100m", memory="3000Mi"))
        claims = cl.wait_for(lambda: c.pods_running(3) and self.claims_initialized(2), 90, interval=0.5,
                             what="web and filler Running on a second Initialized claim")
        second = [x for x in claims if x["metadata"]["name"] != first["metadata"]["name"]][0]
        self.assertEqual(second["spec"]["instanceType"], MEM)
        self.assertEqual(c.sim.kube("DELETE", PODS + "/filler", {"gracePeriodSeconds": 0}).status, 200)

        name = second["metadata"]["name"]

        def blocked():
            return [e["message"] for e in c.items("/api/v1/namespaces/default/events")
                    if e.get("reason") == "DisruptionBlocked" and e["involvedObject"]["name"] == name and
                    "saves too little" in e["message"]]
        msg = cl.wait_for(blocked, 60, interval=0.5, what="the replace left for saving too little")[0]
        self.assertIn("a replace saves too little for its 1 pods: score 0.15 < 0.50 (Balanced: savings 7.7%, "
                      "disruption 50.0%)", msg)
        self.assertEqual(sorted(x["metadata"]["name"] for x in c.claims()),
                         sorted([first["metadata"]["name"], name]))
        self.assertEqual(self.disrupted("underutilized", "balanced"), (0.0, 0.0))

        # The same move under WhenEmptyOrUnderutilized: any saving will do.
        self.patch_pool(dict(balanced, consolidationPolicy="WhenEmptyOrUnderutilized"))
        cl.wait_for(lambda: self.disrupted("underutilized", "when_empty_or_underutilized") == (1.0, 1.0), 120,
                    interval=0.5, what="the MEM node replaced, its one pod counted")
        cl.wait_for(lambda: c.pods_running(2) and self.claims_initialized(2), 90, interval=0.5,
                    what="web Running again on the replacement")
        self.assertEqual(sorted(x["spec"]["instanceType"] for x in c.claims()), [SMALL, SMALL])

        # Balanced again; keep goes: its node is empty, and Balanced deletes it as any policy does.
        self.patch_pool(balanced)
        self.assertEqual(c.sim.kube("DELETE", PODS + "/keep", {"gracePeriodSeconds": 0}).status, 200)
        cl.wait_for(lambda: self.disrupted("empty", "balanced") == (1.0, 0.0), 60, interval=0.5,
                    what="the empty node deleted under Balanced")
        cl.wait_for(lambda: self.claims_initialized(1), 60, interval=0.5, what="one claim left")
        # Karpenter's families, with their samples, are valid Prometheus text.
        status, text = self.co.get(self.co.metrics_port, "/metrics")
        self.assertEqual(status, 200)
        if os.access("/usr/bin/promtool", os.X_OK):
            p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
