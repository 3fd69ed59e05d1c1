#!/usr/bin/env python3
# The coordinator's fault campaign (issue 31), at a small scale: one coordinator, two hosts with real agents, a
# real Kubernetes control plane (../shared/k8s; issue 37) and five faults in turn, each while pods are pending: every
# watch is dropped every 5 s (the simulator's fault proxy in front of kube-apiserver closes the coordinator's
# connections once 5 s old); 20% of Proxmox calls answer 5xx; one agent answers slowly (stopped 1.5 s of every
# 3 s); the Lease is held by another identity for 30 s; kube-apiserver is restarted (every watch ends, nothing
# answers for seconds, the new watch cache answers the resumed watches 410 Gone). After each, the cluster converges:
# every pod Running, one VM per claim and no VM without one, no VMID twice, no agent reservation without its claim.
# The counts of each phase are printed.
# SPDX-License-Identifier: Apache-2.0
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_termination import reservations  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/pvescale-coordinator"


class Repeater(threading.Thread):
    """Calls fn every interval seconds until halt is set or for seconds in all; then calls done (if any)."""

    def __init__(self, fn, interval, seconds=None, done=None):
        super().__init__(daemon=True)
        self.fn, self.interval, self.seconds, self.done = fn, interval, seconds, done
        self.halt = threading.Event()

    def run(self):
        end = time.monotonic() + (self.seconds or 1e9)
        try:
            while not self.halt.is_set() and time.monotonic() < end:
                self.fn()
                self.halt.wait(self.interval)
        finally:
            if self.done:
                self.done()


class FaultCampaignTest(cl.CoordinatorTest):
    def setUp(self):
        # Watches opened from the start end after 5 s (the fault proxy closes every connection of the coordinator's
        # once it is 5 s old). A control plane of its own: its kube-apiserver is restarted.
        self.c = cl.Cluster("pve1=eas-tioga,pve2=32intel64-2p8co2t+8ve", knobs=["watch_disconnect_seconds=5"],
                            kube="real")
        self.co = None
        self.n = 0

    def knobs(self, **k):
        self.assertEqual(self.c.sim.admin("POST", "/knobs", k).status, 200)

    def pods(self, prefix, n):
        names = ["%s-%d" % (prefix, i) for i in range(n)]
        for name in names:  # 1300m: a small node holds one
            self.c.create(PODS, cl.pod(name, cpu="1300m", memory="512Mi"))
        self.n += n
        return names

    def leaked(self):
        """What is wrong with the claims, VMs and reservations now (empty once converged)."""
        c = self.c
        claims = c.claims()
        by_vmid = {(x.get("status") or {}).get("vmid") for x in claims} - {None}
        vmids = [v["vmid"] for v in c.vms()]
        names = {x["metadata"]["name"] for x in claims}
        held = [r["owner"] for h in c.agents for r in reservations(c, h)]
        problems = []
        if len(set(vmids)) != len(vmids):
            problems.append("a VMID twice: %s" % sorted(vmids))
        if set(vmids) != by_vmid:
            problems.append("VMs %s, claims' VMIDs %s" % (sorted(vmids), sorted(by_vmid)))
        problems += ["reservation of %s without its claim" % o for o in held
                     if o.startswith("nodeclaim/") and o.split("/")[-1] not in names]
        return problems

    def converge(self, phase, timeout=150, end_fault=None):
        """Every pod Running under the fault; then (the fault ended, our own reads being subject to it) nothing
        leaked."""
        t0 = time.monotonic()
        cl.wait_for(lambda: self.c.pods_running(self.n), timeout, interval=0.5, what="%s: every pod Running" % phase)
        if end_fault:
            end_fault()
        left = []

        def clean():
            left[:] = self.leaked()
            return not left
        try:
            cl.wait_for(clean, 60, interval=1, what="%s: no orphan VM or reservation" % phase)
        except AssertionError:
            self.fail("%s: %s" % (phase, left))
        m = self.co.metrics()
        sys.stderr.write("%s: converged in %.1f s: %d pods Running, %d claims, %d VMs, api errors %s\n" % (
            phase, time.monotonic() - t0, self.n, len(self.c.claims()), len(self.c.vms()),
            {k.split('"')[1]: v for k, v in m.items() if k.startswith("pvescale_coordinator_api_errors_total{")}))

    def test_every_fault_converges(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        # One small shape: each 1300m pod needs a node of its own, so every phase launches VMs.
        c.create(cl.GROUP + "/nodepools", cl.nodepool(requirements=[
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c1.2VCPU-4GB"]}]))
        self.co = cl.Coordinator(c, env={"POD_NAME": "coordinator-0", "POD_NAMESPACE": "kube-system"})

        # 1. Every watch dropped after 5 s (since the start).
        watches = lambda: sum(v for k, v in self.co.metrics().items()  # noqa: E731
                              if k.startswith("pvescale_coordinator_watch_requests_total{"))
        opened = watches()
        self.pods("watch", 2)
        self.converge("watches dropped every 5 s")
        time.sleep(5.5)
        self.assertGreater(watches(), opened, "the watches were dropped and opened again")
        self.knobs(watch_disconnect_seconds=0.0)

        # 2. Proxmox answers 5xx to a fifth of the calls.
        self.knobs(pve_error_rate=0.2)
        self.pods("pve", 3)
        self.converge("20% Proxmox 5xx", end_fault=lambda: self.knobs(pve_error_rate=0.0))
        faults = c.sim.admin("GET", "/calls").json["pve"].get("FAULT 500", 0)
        sys.stderr.write("Proxmox answered 5xx %d times\n" % faults)
        self.assertGreater(faults, 0, "the faults were met")

        # 3. One agent answers slowly: stopped 1.5 s of every 3 s.
        agent = c.agents["pve2"]["proc"]
        stopped = [False]

        def toggle():
            agent.send_signal(signal.SIGCONT if stopped[0] else signal.SIGSTOP)
            stopped[0] = not stopped[0]
        slow = Repeater(toggle, 1.5, done=lambda: agent.send_signal(signal.SIGCONT))
        slow.start()
        try:
            self.pods("slow", 2)
            self.converge("agent pve2 slow")
        finally:
            slow.halt.set()
            slow.join(5)

        # 4. The Lease held by another identity for 30 s: the coordinator stops leading, pods wait, then it
        # takes the Lease back (once the intruder's renewals stop, after the lease duration) and finishes.
        def intrude():
            r = c.sim.kube("GET", LEASE)
            if r.status != 200:
                return
            lease = r.json
            lease["spec"]["holderIdentity"] = "intruder"
            lease["spec"]["renewTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            c.sim.kube("PUT", LEASE, lease)
        thief = Repeater(intrude, 2.0, seconds=30)
        thief.start()
        cl.wait_for(lambda: self.co.metric("leader") == 0, 20, interval=0.5, what="the coordinator stops leading")
        names = self.pods("lease", 2)
        time.sleep(5)
        self.assertEqual([p["spec"].get("nodeName") for p in c.live_pods() if p["metadata"]["name"] in names],
                         [None, None], "nothing launched while another identity holds the Lease")
        thief.join(40)
        self.converge("Lease lost for 30 s", timeout=120)
        self.assertEqual(self.co.metric("leader"), 1)

        # 5. kube-apiserver restarted while pods are pending: the coordinator's watches end, the API is away for
        # seconds, and each resumed watch finds its resource version gone from the new watch cache (410: relist).
        relists = lambda: sum(v for k, v in self.co.metrics().items()  # noqa: E731
                              if k.startswith("pvescale_coordinator_watch_relists_410_total{"))
        before = relists()
        self.pods("restart", 2)
        # The simulator answers once kube-apiserver is ready again (5-8 s on an idle machine, up to a minute under
        # load; it waits up to 120 s).
        r = c.sim.admin("POST", "/actions/kube-restart", {}, timeout=180)
        self.assertEqual(r.status, 200, r)
        sys.stderr.write("kube-apiserver ready %.1f s after the restart began\n" % r.json["ready_after_seconds"])
        self.converge("kube-apiserver restarted", timeout=120)
        self.assertGreater(relists(), before, "the resumed watches were answered 410 and listed again")
        self.assertEqual(self.co.metric("leader"), 1)


if __name__ == "__main__":
    unittest.main()
