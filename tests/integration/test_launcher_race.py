"""Integration test: launches that race. Two claims for the last free cores of a host (with the agent, and with the
Proxmox-accounting fallback) never double-book: one launches, the other fails with InsufficientCapacity. VMIDs are
never shared: a VMID taken by someone else between pick and clone is given up (and the other VM left alone), and two
launcher processes launching at once on a Proxmox whose nextid reserves nothing end with distinct VMIDs."""
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launchlib  # noqa: E402
from launchlib import GIB, cpulist, wait_for  # noqa: E402

ONE_HOST = "pve1=32intel64-2p8co2t+8ve"


class LauncherRaceTest(unittest.TestCase):
    """On one real control plane (../shared/k8s) shared by the class's tests: each test's World attaches to it."""

    @classmethod
    def setUpClass(cls):
        cls.cp = launchlib.coordlib.ControlPlane.start_for(cls)

    def world(self, **kw):
        w = launchlib.World(kube=self.cp, **kw)
        self.addCleanup(w.stop)
        return w

    def assert_one_winner(self, w, names, log):
        left = [c for c in w.claims() if c["metadata"]["name"] in names]
        self.assertEqual(len(left), 1, log[-3000:])
        self.assertEqual(left[0]["status"]["launchStep"], "Initialized")
        lost = [e for e in w.events("InsufficientCapacity") if e["involvedObject"]["name"] in names]
        self.assertEqual(len(lost), 1, lost)
        self.assertNotEqual(lost[0]["involvedObject"]["name"], left[0]["metadata"]["name"])
        return left[0]

    def test_last_cores_with_agent(self):
        w = self.world(hosts=ONE_HOST)
        status, filler = w.agents["pve1"].client.request(
            "POST", "/v1/reservations", {"vcpus": 28, "memory_bytes": 8 * GIB, "owner": "test/filler", "ttl_seconds": 3600})
        self.assertEqual(status, 201, filler)
        names = ("race-a", "race-b")
        for n in names:
            w.create_claim(n, "c1.4VCPU-8GB", "pve1")
        rc, log = w.run_driver(workers=4)
        self.assertEqual(rc, 0, log)
        winner = self.assert_one_winner(w, names, log)
        res = {r["id"]: r for r in w.reservations("pve1")}
        self.assertEqual(set(res), {filler["id"], winner["status"]["reservationID"]})
        a, b = (cpulist(r["cpus"]) for r in res.values())
        self.assertEqual(a & b, set(), "double-booked CPUs")
        self.assertEqual(len(a | b), 32)
        self.assertEqual(list(w.vms("pve1")), [winner["status"]["vmid"]])

    def test_last_cores_without_agent(self):
        w = self.world(hosts=ONE_HOST, agents=set())
        # Someone else's VM takes 8 of the 32 CPUs: 24 left, room for one 16-vCPU VM only.
        w.sim.clone(500, "other")
        w.pve("PUT", "/nodes/pve1/qemu/500/config", {"cores": 8, "memory": "4096"})
        names = ("race-c", "race-d")
        for n in names:
            w.create_claim(n, "c1.16VCPU-32GB", "pve1")
        rc, log = w.run_driver(workers=4)
        self.assertEqual(rc, 0, log)
        winner = self.assert_one_winner(w, names, log)
        self.assertEqual(winner["status"]["reservationMode"], "pve")
        self.assertEqual(sorted(w.vms("pve1")), sorted([500, winner["status"]["vmid"]]))

    def test_vmid_taken_between_pick_and_clone(self):
        w = self.world(knobs=["nextid_reserve_seconds=0"])
        w.create_claim("pick-a", "c1.1VCPU-2GB", "pve1")
        rc, log = w.run_driver(crash_at="VMIDAllocated:after")
        self.assertEqual(rc, -9, log)
        taken = w.claim("pick-a")["status"]["vmid"]
        # Another client clones to that VMID before the launcher comes back.
        w.sim.clone(taken, "not-ours", description="someone else's VM")
        rc, log = w.run_driver()
        self.assertEqual(rc, 0, log)
        self.assertIn("VMID %d is taken by another VM" % taken, log)
        st = w.claim("pick-a")["status"]
        self.assertNotEqual(st["vmid"], taken)
        self.assertEqual(st["launchStep"], "Initialized")
        self.assertEqual(w.vm_config("pve1", taken)["description"], "someone else's VM")

    def test_vmid_being_cloned_by_someone_else(self):
        w = self.world(knobs=["nextid_reserve_seconds=0", "clone_seconds=1.5"])
        w.create_claim("pick-b", "c1.1VCPU-2GB", "pve1")
        rc, log = w.run_driver(crash_at="VMIDAllocated:after")
        self.assertEqual(rc, -9, log)
        taken = w.claim("pick-b")["status"]["vmid"]
        tmpl = w.sim.ep["pve"][w.region]["templates"]["pve1"]
        r = w.sim.pve("POST", "/nodes/pve1/qemu/%d/clone" % tmpl, {"newid": taken, "name": "foreign",
                                                                   "description": "foreign clone"})
        self.assertEqual(r.status, 200, r)  # still running (locked) when the launcher looks
        rc, log = w.run_driver()
        self.assertEqual(rc, 0, log)
        self.assertIn("VMID %d is taken by another VM" % taken, log)
        st = w.claim("pick-b")["status"]
        self.assertNotEqual(st["vmid"], taken)
        self.assertEqual(w.vm_config("pve1", taken)["description"], "foreign clone")

    def test_two_launchers_at_once(self):
        w = self.world(knobs=["nextid_reserve_seconds=0"])
        for i in range(8):
            w.create_claim("two-%d" % i, "c1.1VCPU-2GB", "pve2", labels={"driver": "ab"[i % 2]})
        pa = w.start_driver(selector="driver=a", workers=4)
        pb = w.start_driver(selector="driver=b", workers=4)
        conflicts = 0
        for p in (pa, pb):
            rc, log = w.wait_driver(p)
            self.assertEqual(rc, 0, log)
            conflicts += log.count("is taken by another VM")
        print("VMID conflicts resolved: %d" % conflicts, file=sys.stderr)
        claims = w.claims()
        self.assertEqual(len(claims), 8)
        vmids = [c["status"]["vmid"] for c in claims]
        self.assertEqual(len(set(vmids)), 8, "VMIDs shared: %s" % vmids)
        self.assertTrue(all(c["status"]["launchStep"] == "Initialized" for c in claims))
        w.check_no_orphans(self)
        wait_for(lambda: len(w.vms("pve2")) == 8, 5)


if __name__ == "__main__":
    unittest.main()
