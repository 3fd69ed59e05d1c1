#!/usr/bin/env python3
# pvescale-coordinator --launch=false against the simulator and real agents: a batch of pending pods becomes the
# expected NodeClaims (no VM launched), with Nominated events on the pods and a reason on the one that cannot be
# placed (run as the Helm chart's ServiceAccount: its RBAC refuses none of the calls); a NodePool at its limit leaves
# pods pending with the limit reason until the limit is raised. On a real control plane (../shared/k8s).
# SPDX-License-Identifier: Apache-2.0
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402

HOSTS = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga,pve3=64amd64-4s2n4ca2co"
PODS = "/api/v1/namespaces/default/pods"


def cpu_milli(q):
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def mem_bytes(q):
    q = str(q)
    for suffix, mult in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if q.endswith(suffix):
            return int(q[:-2]) * mult
    return int(q)


def spread_pod(i):
    return cl.pod("spread-%d" % i, cpu="1", memory="1Gi", labels={"app": "spread"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "spread"}}}])


def anti_pod(i):
    return cl.pod("anti-%d" % i, cpu="500m", memory="256Mi", labels={"app": "anti"}, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}})


class ProvisioningTest(cl.SharedControlPlaneTest):
    """On one real control plane shared by the tests (the real scheduler marks the pods Unschedulable)."""
    hosts = HOSTS

    def pods_pending(self, names):
        def check():
            pods = {p["metadata"]["name"]: p for p in self.c.items(PODS)}
            return all(n in pods and cl.unschedulable(pods[n]) for n in names)
        cl.wait_for(check, 20, what="pods marked Unschedulable")

    def nominations(self, names):
        """pod → the claim named by its Nominated events (exactly one claim per pod)."""
        out = {}
        for n in names:
            claims = {e["message"].split("nodeclaim/")[1].split()[0] for e in self.c.pod_events(n)
                      if e["reason"] == "Nominated"}
            if len(claims) == 1:
                out[n] = claims.pop()
            elif claims:
                self.fail("pod %s nominated to several claims: %s" % (n, claims))
        return out

    def test_batch_becomes_expected_nodeclaims(self):
        c = self.c
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
        c.create(cl.GROUP + "/nodepools", cl.nodepool("default"))
        c.create(cl.GROUP + "/nodepools", cl.nodepool("ssd", labels={"disk": "ssd"}))
        c.create("/apis/apps/v1/namespaces/kube-system/daemonsets", cl.DAEMONSET)
        pods = [cl.pod("web-%d" % i, cpu="500m", memory="512Mi") for i in range(4)]
        pods += [cl.pod("big-0", cpu="6", memory="8Gi")]
        pods += [cl.pod("db-%d" % i, cpu="1", memory="2Gi", nodeSelector={"disk": "ssd"}) for i in range(2)]
        pods += [spread_pod(i) for i in range(3)] + [anti_pod(i) for i in range(3)]
        pods += [cl.pod("huge-0", cpu="200", memory="1Gi")]
        for p in pods:
            c.create(PODS, p)
        names = [p["metadata"]["name"] for p in pods]
        placeable = [n for n in names if n != "huge-0"]
        self.pods_pending(names)

        # From here on the coordinator runs as the chart's ServiceAccount: every call is authorized by its rules.
        self.assertEqual(c.sim.admin("POST", "/calls/reset").status, 200)
        c.run_as_chart()
        self.co = cl.Coordinator(c, ["--launch=false"])
        cl.wait_for(lambda: len(self.nominations(placeable)) == len(placeable), 30, what="Nominated events")
        claims = {cl_["metadata"]["name"]: cl_ for cl_ in c.claims()}
        nominated = self.nominations(placeable)
        by_claim = {}
        for pod_name, claim in nominated.items():
            self.assertIn(claim, claims, "pod %s nominated to a claim that does not exist" % pod_name)
            by_claim.setdefault(claim, []).append(pod_name)
        self.assertEqual(set(by_claim), set(claims), "every claim holds nominated pods, and only those")
        spec_of = {p["metadata"]["name"]: p["spec"]["containers"][0]["resources"]["requests"] for p in pods}

        for name, claim in claims.items():
            spec, st, meta = claim["spec"], claim["status"], claim["metadata"]
            reqs = {r["key"]: r["values"] for r in spec["requirements"] if r["operator"] == "In"}
            self.assertIn("pvescale.io/termination", meta["finalizers"])
            self.assertEqual(meta["labels"]["pvescale.io/nodepool"], spec["nodePool"])
            self.assertEqual(spec["nodeClassRef"]["name"], "default")
            self.assertIn(st["host"], ("pve1", "pve2", "pve3"))
            self.assertEqual(reqs["topology.kubernetes.io/zone"], [st["host"]])
            self.assertEqual((st["region"], reqs["topology.kubernetes.io/region"]), ("r1", ["r1"]))
            self.assertEqual(reqs["node.kubernetes.io/instance-type"], [spec["instanceType"]])
            # The claim's requests are exactly its pods plus the DaemonSet's pod.
            mine = by_claim[name]
            want_cpu = sum(cpu_milli(spec_of[p]["cpu"]) for p in mine) + 100
            want_mem = sum(mem_bytes(spec_of[p]["memory"]) for p in mine) + 128 * 2**20
            got = spec["resources"]["requests"]
            self.assertEqual((cpu_milli(got["cpu"]), mem_bytes(got["memory"]), int(got["pods"])),
                             (want_cpu, want_mem, len(mine) + 1), name)
            self.assertLessEqual(want_cpu, cpu_milli(st["allocatable"]["cpu"]), name)
            self.assertLessEqual(want_mem, mem_bytes(st["allocatable"]["memory"]), name)

        def claim_of(pod_name):
            return claims[nominated[pod_name]]
        for p in ("db-0", "db-1"):
            self.assertEqual(claim_of(p)["spec"]["nodePool"], "ssd")
            self.assertEqual(claim_of(p)["metadata"]["labels"]["disk"], "ssd")
        self.assertEqual(len({claim_of("spread-%d" % i)["status"]["host"] for i in range(3)}), 3,
                         "zone spread maxSkew 1 over 3 hosts puts one pod in each zone")
        self.assertEqual(len({nominated["anti-%d" % i] for i in range(3)}), 3, "hostname anti-affinity")
        self.assertGreaterEqual(cpu_milli(claim_of("big-0")["status"]["allocatable"]["cpu"]), 6000)

        # The pod nothing can hold gets a Warning naming the blocker, and no nomination.
        evs = [e for e in c.pod_events("huge-0") if e["source"].get("component") == "pvescale-coordinator"]
        self.assertEqual([e["reason"] for e in evs], ["NoCompatibleNodePool"], evs)
        self.assertIn("no instance type with room for the pod's cpu 200", evs[0]["message"])
        self.assertEqual(evs[0]["type"], "Warning")

        # Launching is the next step: no VM exists yet. NodePool usage counts the claims.
        self.assertEqual(c.vms(), [])
        pools = {p["metadata"]["name"]: p for p in c.items(cl.GROUP + "/nodepools")}
        for pool in ("default", "ssd"):
            n = sum(1 for x in claims.values() if x["spec"]["nodePool"] == pool)
            self.assertEqual(pools[pool]["status"]["resources"]["nodes"], str(n), pool)
        self.assertEqual(self.co.metric("nodeclaims_created_total"), len(claims))
        self.assertEqual(self.co.metric("unplaced_pods"), 1)
        self.assertEqual(self.co.metric("leader"), 1)
        self.assertEqual(self.co.metric('api_errors_total{api="agent"}'), 0)

        # A restarted coordinator finds the claims in flight and plans no new ones.
        self.assertEqual(self.co.stop(), 0)
        self.co = cl.Coordinator(c, ["--launch=false"])
        cl.wait_for(lambda: self.co.metric("batches_total") >= 1, 20, what="a round after the restart")
        self.assertEqual(sorted(x["metadata"]["name"] for x in c.claims()), sorted(claims))
        self.assertEqual(self.co.metric("nodeclaims_created_total"), 0)
        self.assertEqual(self.nominations(placeable), nominated)
        calls = c.sim.admin("GET", "/calls").json["kube"]
        for route in ("POST /apis/pvescale.io/v1alpha1/nodeclaims", "GET /api/v1/pods?watch",
                      "PATCH /apis/pvescale.io/v1alpha1/nodeclaims/{name}/status",
                      "PUT /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"):
            self.assertIn(route, calls)
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused")
        status, text = self.co.get(self.co.metrics_port, "/metrics")
        if os.access("/usr/bin/promtool", os.X_OK):
            p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        m = self.co.metrics()
        self.assertGreater(m.get("process_resident_memory_bytes", 0), 0)
        self.assertGreaterEqual(m.get("process_open_fds", 0), 3)
        self.assertLess(abs(m.get("process_start_time_seconds", 0) - self.co.started), 5)

    def test_sigterm_gives_the_lease_up(self):
        """A leader stopped with SIGTERM gives its Lease up once its work has stopped (no holder, 1 s), as
        controller-runtime's ReleaseOnCancel does: a new replica leads at once, not after the 15 s lease."""
        c = self.c
        path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/pvescale-coordinator"
        first = cl.Coordinator(c, ["--launch=false"], env={"POD_NAME": "coordinator-a"})
        try:
            cl.wait_for(lambda: first.metric("leader") == 1, 20, what="coordinator-a leading")
        finally:
            rc = first.stop()
        self.assertEqual(rc, 0)
        self.assertIn("lease default/pvescale-coordinator: released", first.logtext())
        spec = c.sim.kube("GET", path).json["spec"]
        self.assertNotIn("holderIdentity", spec)
        self.assertEqual(spec["leaseDurationSeconds"], 1)
        self.assertEqual(spec["acquireTime"], spec["renewTime"])
        transitions = spec.get("leaseTransitions", 0)

        began = time.monotonic()
        self.co = cl.Coordinator(c, ["--launch=false"], env={"POD_NAME": "coordinator-b"})
        cl.wait_for(lambda: self.co.metric("leader") == 1, 20, interval=0.1, what="coordinator-b leading")
        self.assertLess(time.monotonic() - began, 10, "coordinator-b waited for the lease to run out")
        spec = c.sim.kube("GET", path).json["spec"]
        self.assertEqual(spec["holderIdentity"], "coordinator-b")
        self.assertEqual(spec["leaseTransitions"], transitions + 1)

    def test_nodepool_limit_leaves_pods_pending_with_the_reason(self):
        c = self.c
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
        c.create(cl.GROUP + "/nodepools", cl.nodepool("small", limits={"cpu": "4"},
                                                       requirements=[{"key": "pvescale.io/instance-family",
                                                                      "operator": "In", "values": ["c1"]}]))
        names = ["job-%d" % i for i in range(3)]
        for n in names:
            c.create(PODS, cl.pod(n, cpu="1500m", memory="1Gi"))
        self.pods_pending(names)
        self.co = cl.Coordinator(c, ["--launch=false", "--leader-elect=false"])

        def limited():
            return [n for n in names for e in c.pod_events(n) if e["reason"] == "NodePoolLimitReached"]
        cl.wait_for(lambda: limited() and len(self.nominations(names)) == 2, 30, what="limit event")
        self.assertEqual(len(limited()), 1)
        stuck = limited()[0]
        ev = [e for e in c.pod_events(stuck) if e["reason"] == "NodePoolLimitReached"][0]
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("NodePool small cpu limit 4 reached (4 in use)", ev["message"])
        claims = c.claims()
        self.assertEqual(len(claims), 1)
        self.assertEqual(claims[0]["spec"]["instanceType"], "c1.4VCPU-8GB")
        pool = c.items(cl.GROUP + "/nodepools")[0]
        self.assertEqual(pool["status"]["resources"]["cpu"], "4")
        pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
        self.assertTrue(cl.unschedulable(pods[stuck]))

        # A second round changes nothing: no new claim and no repeated event.
        time.sleep(1.5)
        self.assertEqual(len(c.claims()), 1)
        self.assertEqual(len([e for e in c.pod_events(stuck) if e["reason"] == "NodePoolLimitReached"]), 1)

        # Raising the limit (a new generation of the pool) starts a round that places it.
        r = c.sim.kube("PATCH", cl.GROUP + "/nodepools/small", {"spec": {"limits": {"cpu": "8"}}},
                       ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        cl.wait_for(lambda: stuck in self.nominations([stuck]), 20, what="nomination after raising the limit")
        self.assertEqual(len(c.claims()), 2)


if __name__ == "__main__":
    unittest.main()
