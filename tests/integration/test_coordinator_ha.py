#!/usr/bin/env python3
# Two pvescale-coordinator replicas with leader election against the simulator, a real agent and a real control plane:
# the leader is killed with SIGKILL mid-launch (its claim Cloning) and then mid-drain (a deleted claim held by a PDB,
# relaxed after the kill); each time the follower takes the Lease within its duration and finishes the work: every pod
# Running, one VM per claim and none without one, no claim lost, no pod evicted successfully twice.
# SPDX-License-Identifier: Apache-2.0
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_replace import DEPLOYMENTS, deployment, initialized  # noqa: E402
from test_coordinator_termination import Watcher  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/pvescale-coordinator"
# Shorter than the defaults (15 s, 10 s, 2 s), so that a takeover does not cost the suite 20 s; the renew deadline
# stays well above what a renewal takes on a busy 2-core machine.
LEASE_S, RENEW_S, RETRY_S = 8, 6, 1
LEADER_ARGS = ["--leader-elect-lease-duration=%ds" % LEASE_S, "--leader-elect-renew-deadline=%ds" % RENEW_S,
               "--leader-elect-retry-period=%ds" % RETRY_S]
# After the last renewal a follower sees the record within one retry, waits out the lease, and tries each retry.
TAKEOVER_S = LEASE_S + 2 * RETRY_S + 1


class StepWatcher(Watcher):
    """Polls the claims every 50 ms (the termination test's watcher's loop) and keeps every (claim, launchStep) seen,
    in order."""

    def __init__(self, c):
        super().__init__(c, None, None)
        self.seen = []

    def poll(self):
        for x in self.c.claims():
            step = (x["metadata"]["name"], (x.get("status") or {}).get("launchStep"))
            if step not in self.seen:
                self.seen.append(step)


class HighAvailabilityTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s): the replicas elect through a real Lease, the real Eviction API and
    disruption controller hold the drain (/report's evictions come from its audit log)."""
    hosts = "pve1=eas-tioga"

    def setUp(self):
        super().setUp()
        self.replicas = []

    def tearDown(self):
        for r in self.replicas:  # the survivor is self.co: the base class stops it and checks its exit code
            if r is not self.co:
                r.stop()
                sys.stderr.write("%s log (tail, exit %s):\n%s" % (r.name, r.proc.returncode,
                                                                    "".join(r.logtext().splitlines(True)[-40:])))
        super().tearDown()

    def replica(self, name):
        r = cl.Coordinator(self.c, args=LEADER_ARGS, env={"POD_NAME": name, "POD_NAMESPACE": "kube-system"})
        r.name = name
        self.replicas.append(r)
        return r

    def holder(self):
        r = self.c.sim.kube("GET", LEASE)
        return r.json["spec"].get("holderIdentity") if r.status == 200 else None

    def kill_and_take_over(self, leader, follower, name):
        """kill -9 the leader; the follower leads within the bound, never before the kill. Returns the seconds."""
        self.assertEqual((leader.metric("leader"), follower.metric("leader")), (1, 0))
        leader.stop(sig=signal.SIGKILL)
        killed = time.monotonic()
        cl.wait_for(lambda: follower.metric("leader") == 1, TAKEOVER_S + 5, interval=0.2, what=name + " leading")
        took = time.monotonic() - killed
        self.assertLess(took, TAKEOVER_S, "%s took the Lease %.1f s after the kill" % (name, took))
        self.assertEqual(self.holder(), name)
        sys.stderr.write("%s took the Lease %.1f s after the kill\n" % (name, took))
        return took

    def web(self):
        return [p for p in self.c.items(PODS) if (p["metadata"].get("labels") or {}).get("app") == "web"]

    def settled(self, n_pods):
        """n_pods web pods Running (none leaving) on Initialized claims, and no claim being deleted."""
        pods, claims = self.web(), self.c.claims()
        return (len(pods) == n_pods and all((p.get("status") or {}).get("phase") == "Running"
                                            and not p["metadata"].get("deletionTimestamp") for p in pods)
                and claims and all(initialized(x) and not x["metadata"].get("deletionTimestamp") for x in claims))

    def assert_one_vm_per_claim(self):
        vmids = sorted(v["vmid"] for v in self.c.vms())
        claimed = sorted(x["status"]["vmid"] for x in self.c.claims())
        self.assertEqual(vmids, claimed, "VMs %s, claims' VMs %s" % (vmids, claimed))

    def evictions(self):
        return self.c.sim.admin("GET", "/report").json["evictions"]

    def test_leader_killed_mid_launch_and_mid_drain(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.sim.knobs(clone_seconds=4)  # a launch long enough to be caught mid-way
        a = self.replica("coordinator-a")
        cl.wait_for(lambda: a.metric("leader") == 1, 20, interval=0.2, what="coordinator-a leading")
        b = self.co = self.replica("coordinator-b")
        w = StepWatcher(c)
        w.start()
        self.addCleanup(w.halt.set)

        # (a) Mid-launch: coordinator-a is killed while its claim is Cloning; coordinator-b resumes the launch.
        c.create(DEPLOYMENTS, deployment("web", 2))
        cl.wait_for(lambda: any(s == "Cloning" for _, s in w.seen), 60, interval=0.05, what="a claim Cloning")
        claim = [n for n, s in w.seen if s == "Cloning"][0]
        self.kill_and_take_over(a, b, "coordinator-b")
        cl.wait_for(lambda: self.settled(2), 90, interval=0.5, what="web pods Running after the takeover")
        self.assertEqual([x["metadata"]["name"] for x in c.claims()], [claim], "a claim lost or a second one made")
        self.assert_one_vm_per_claim()
        created = [v["vmid"] for v in c.sim.admin("GET", "/report").json["vms"]]
        self.assertEqual(len(created), 1, "VMs cloned: %s" % created)
        steps = [s for n, s in w.seen if n == claim]
        self.assertEqual(steps[-1], "Initialized", steps)
        w.halt.set()

        # (b) Mid-drain: the claim is deleted, a PDB refuses every eviction; coordinator-b is killed, the PDB
        # relaxed after the kill to one pod at a time, and coordinator-c finishes the drain; the Deployment's pods run
        # on one new claim: the pod evicted second, still on the Node being deleted when the first one's claim is
        # planned, was counted there (a real Eviction API paces evictions by the PDB's status; two claims before).
        c.sim.knobs(clone_seconds=1)
        cc = self.replica("coordinator-c")
        old = c.claims()[0]
        vmid, before = old["status"]["vmid"], {p["metadata"]["name"] for p in self.web()}
        c.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
                        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + claim).status, 200)

        def refused():
            ev = self.evictions()
            return all(ev.get("default/" + p, {}).get("429", 0) >= 1 for p in before)
        cl.wait_for(refused, 30, interval=0.5, what="both evictions refused by the PDB")
        st = c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + claim).json["status"]
        self.assertEqual(st.get("terminationStep"), "Tainted", st)
        self.co = cc
        self.kill_and_take_over(b, cc, "coordinator-c")
        r = c.sim.kube("PATCH", PDBS + "/web", {"spec": {"minAvailable": 1}}, ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        cl.wait_for(lambda: c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + claim).status == 404, 180, interval=0.5,
                    what="the deleted claim gone")
        cl.wait_for(lambda: self.settled(2), 90, interval=0.5, what="web pods Running on a new claim")
        self.assertNotIn(vmid, [v["vmid"] for v in c.vms()])
        self.assert_one_vm_per_claim()
        self.assertEqual(len(c.claims()), 1)

        # Every pod evicted successfully at most once; the two drained pods exactly once each, by coordinator-c.
        ev = self.evictions()
        self.assertEqual({p: n for p, n in ev.items() if n.get("201", 0) > 1}, {}, ev)
        self.assertEqual({p: ev["default/" + p].get("201", 0) for p in before}, {p: 1 for p in before}, ev)
        self.assertEqual(cc.metric('evictions_total{result="ok"}'), 2)
        calls = c.sim.admin("GET", "/calls").json
        self.assertEqual(calls["kube"].get("DELETE /api/v1/namespaces/{namespace}/pods/{name}", 0), 0,
                         "a pod deleted directly, not evicted")


if __name__ == "__main__":
    unittest.main()
