#!/usr/bin/env python3
# Tests of the simulated kube-scheduler: fits, Unschedulable messages in kube-scheduler's wording.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import pod  # noqa: E402
from test_kube import ready_node  # noqa: E402

NS = "/api/v1/namespaces/default"


class SchedulerTest(unittest.TestCase):
    def setUp(self):
        self.sim = simtest.Sim(hosts="pve1=eas-tioga")

    def tearDown(self):
        self.sim.stop()

    def k(self, *a, **kw):
        return self.sim.kube(*a, **kw)

    def cond(self, name):
        def get():
            p = self.k("GET", NS + "/pods/" + name).json
            for c in p.get("status", {}).get("conditions", []):
                if c["type"] == "PodScheduled":
                    return c
            return None
        return get

    def unschedulable(self, name):
        return simtest.wait_for(lambda: (lambda c: c if c and c["status"] == "False" else None)(self.cond(name)()),
                                what="PodScheduled=False on %s" % name)

    def test_no_nodes(self):
        self.k("POST", NS + "/pods", pod("lonely"))
        c = self.unschedulable("lonely")
        self.assertEqual((c["reason"], c["message"]), ("Unschedulable", "no nodes available to schedule pods"))

    def test_insufficient_cpu_message(self):
        for i in range(3):
            self.assertEqual(self.k("POST", "/api/v1/nodes", ready_node("n%d" % i, cpu="2")).status, 201)
        self.k("POST", NS + "/pods", pod("big", cpu="3"))
        c = self.unschedulable("big")
        self.assertEqual(c["reason"], "Unschedulable")
        self.assertEqual(c["message"], "0/3 nodes are available: 3 Insufficient cpu.")
        evs = self.k("GET", NS + "/events?fieldSelector=involvedObject.name%3Dbig,reason%3DFailedScheduling").json["items"]
        self.assertEqual(evs[0]["message"], c["message"])
        self.assertEqual(evs[0]["type"], "Warning")

    def test_mixed_reasons_sorted(self):
        self.k("POST", "/api/v1/nodes", ready_node("small", cpu="1", memory="1Gi", labels={"pool": "a"}))
        self.k("POST", "/api/v1/nodes", ready_node("other", cpu="8", memory="16Gi", labels={"pool": "b"}))
        self.k("POST", "/api/v1/nodes", ready_node("tainted", cpu="8", memory="16Gi", labels={"pool": "a"},
                                                   taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]))
        self.k("POST", NS + "/pods", pod("picky", cpu="2", memory="2Gi", nodeSelector={"pool": "a"}))
        c = self.unschedulable("picky")
        self.assertEqual(c["message"], "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
                                       "1 node(s) didn't match Pod's node affinity/selector, "
                                       "1 node(s) had untolerated taint {dedicated: gpu}.")
        # a matching node appears: the pod gets bound and runs
        self.k("POST", "/api/v1/nodes", ready_node("fits", cpu="4", memory="4Gi", labels={"pool": "a"}))
        p = simtest.wait_for(lambda: (lambda p: p if p["status"].get("phase") == "Running" else None)(
            self.k("GET", NS + "/pods/picky").json), what="picky running")
        self.assertEqual(p["spec"]["nodeName"], "fits")
        self.assertEqual(self.cond("picky")()["status"], "True")

    def test_tolerations_affinity_and_hostname_anti_affinity(self):
        for n in ("h1", "h2"):
            self.k("POST", "/api/v1/nodes", ready_node(n, cpu="8", memory="16Gi",
                                                       taints=[{"key": "pvescale.io/pool", "value": "x", "effect": "NoSchedule"}]))
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        tol = [{"key": "pvescale.io/pool", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]
        for i in range(3):
            p = pod("spread-%d" % i, affinity=anti, tolerations=tol)
            p["metadata"]["labels"] = {"app": "spread"}
            self.k("POST", NS + "/pods", p)
        c = self.unschedulable("spread-2")
        self.assertEqual(c["message"], "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")
        nodes = sorted(self.k("GET", NS + "/pods/spread-%d" % i).json["spec"]["nodeName"] for i in range(2))
        self.assertEqual(nodes, ["h1", "h2"])
        req = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h2"]}]}]}}}
        self.k("POST", NS + "/pods", pod("pinned", affinity=req, tolerations=tol))
        simtest.wait_for(lambda: self.k("GET", NS + "/pods/pinned").json["spec"].get("nodeName") == "h2", what="pinned on h2")
        self.k("POST", NS + "/pods", pod("intolerant"))
        c = self.unschedulable("intolerant")
        self.assertEqual(c["message"], "0/2 nodes are available: 2 node(s) had untolerated taint {pvescale.io/pool: x}.")

    def test_not_ready_node_is_tainted(self):
        n = ready_node("sick", cpu="8")
        n["status"]["conditions"][0]["status"] = "False"
        self.k("POST", "/api/v1/nodes", n)
        self.k("POST", NS + "/pods", pod("waiting"))
        c = self.unschedulable("waiting")
        self.assertEqual(c["message"], "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.")


if __name__ == "__main__":
    unittest.main()
