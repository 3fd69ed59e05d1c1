#!/usr/bin/env python3
# The coordinator's plan against the real kube-scheduler (../shared/k8s v1.26, simulated kubelets, three simulated
# Proxmox hosts with a real agent each; the coordinator runs as the Helm chart's ServiceAccount): a burst of 36
# pending pods of mixed shapes (generic ones, a nodeSelector disk=ssd set for a second NodePool, zone-spread sets
# and hostname anti-affinity sets) becomes NodeClaims in one provisioning round, and, because the launcher nominates
# the pods planned on each claim to its Node (status.nominatedNodeName) as the Node becomes schedulable, the pods are
# bound as planned: at most a sixth of them nominated (Nominated events) to a second claim and at most two claims made
# after the first round (0 and 0 in quiet runs; the 0 target is bench/plan's and the demo's RESULT line, a figure of
# timing). Counted as tests/demo.py counts (plan_vs_binding), with no call refused by the chart's RBAC.
# SPDX-License-Identifier: Apache-2.0
import os
import random
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import coordlib as cl  # noqa: E402
import demo  # noqa: E402

HOSTS = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga,pve3=64amd64-4s2n4ca2co"
PODS = "/api/v1/namespaces/default/pods"
SEED = 37


def burst(n, seed):
    """n pods, each labelled demo=<name> (as the demo's): half generic, the rest in a disk=ssd set, two zone-spread
    sets (maxSkew 1, DoNotSchedule) and two hostname anti-affinity sets, of 250m-1500m CPU and 256Mi-2Gi."""
    rnd = random.Random(seed)
    pods = []
    for i in range(n):
        name, cpu = "p-%02d" % i, rnd.choice(["250m", "500m", "1", "1500m"])
        mem, kind = rnd.choice(["256Mi", "512Mi", "1Gi", "2Gi"]), i % 6
        labels = {"demo": name, "app": "web"}
        spec = {}
        if kind == 1:
            labels["app"], spec["nodeSelector"] = "db", {"disk": "ssd"}
        elif kind in (2, 3):
            labels["app"] = "api%d" % (kind - 2)
            spec["topologySpreadConstraints"] = [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": labels["app"]}}}]
        elif kind == 4:
            labels["app"] = "cache%d" % (i % 12 // 6 % 2)
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": labels["app"]}}, "topologyKey": "kubernetes.io/hostname"}]}}
        pods.append(cl.pod(name, cpu=cpu, memory=mem, labels=labels, **spec))
    return pods


class PlanTest(cl.CoordinatorTest):
    def show_pending(self, c):
        for p in c.live_pods():
            if (p.get("status") or {}).get("phase") != "Running":
                n = p["metadata"]["name"]
                print("pending %s (nominatedNodeName %s): %s" % (n, p["status"].get("nominatedNodeName"),
                                                                 demo.scheduler_said(c, n)), flush=True)

    def test_one_round(self):
        self.c = c = cl.Cluster(HOSTS, knobs=demo.KNOBS, kube="real")
        c.create("/api/v1/namespaces/kube-public/configmaps", demo.cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool("general"))
        c.create(cl.GROUP + "/nodepools", cl.nodepool("ssd", labels={"disk": "ssd"}))
        c.run_as_chart()
        self.co = cl.Coordinator(c)
        pods = burst(36, SEED)
        names = [p["metadata"]["name"] for p in pods]
        start = time.time()
        for p in pods:
            c.create(PODS, p)
        try:
            cl.wait_for(lambda: c.pods_running(len(names)), 300, what="all %d pods Running" % len(names))
        except AssertionError:
            self.show_pending(c)
            raise
        r = demo.plan_vs_binding(c, names)
        print("%d pods Running after %.1f s: %d claims (%d in the first round), %d second-round pods %s, %d pods on "
              "a node other than their claim's" % (len(names), time.time() - start, r["claims"],
                                                     r["first_round_claims"], len(r["second_round"]),
                                                     r["second_round"], len(r["misbound"])), flush=True)
        # How many pods the real scheduler bound elsewhere than planned is a figure of timing (how far apart the
        # Nodes register, how fast this build is: under ASan with other tests beside it, 3 of 36 once): the target,
        # 0, is measured by bench/plan and the demo (RESULT second_round_pods). Here, the plan must hold for most pods
        # (before the nominations, 19 % of bench/plan's 150 pods needed a second round).
        self.assertLessEqual(len(r["second_round"]), len(names) // 6,
                             "pods that needed a second provisioning round, with the scheduler's last word on each: %s"
                             % r.get("why"))
        self.assertLessEqual(r["claims"] - r["first_round_claims"], 2, "claims made after the first round")
        self.assertIn("pods nominated to the Nodes of its round", self.co.logtext(), "the launcher nominated no pod")
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused")


if __name__ == "__main__":
    unittest.main(verbosity=2)
