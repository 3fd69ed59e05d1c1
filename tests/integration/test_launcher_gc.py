"""Integration test: garbage collection. A claim that vanished without its finalizer leaves a running VM, an agent
reservation, a join token and an ISO: the collector keeps the VM while it is younger than 10 minutes (ages read from
the VM description), then deletes it, releases the reservation and removes the token and the ISO, and never
touches what a live claim owns."""
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launchlib  # noqa: E402
from launchlib import API  # noqa: E402

ELEVEN_MINUTES_MS = 11 * 60 * 1000


class LauncherGcTest(unittest.TestCase):
    def test_orphans_are_collected_after_ten_minutes(self):
        w = launchlib.World(knobs=["join_delay_seconds=60"])
        self.addCleanup(w.stop)
        w.create_claim("kept", "c1.1VCPU-2GB", "pve1", labels={"set": "kept"})
        w.create_claim("lost", "c1.1VCPU-2GB", "pve1", labels={"set": "lost"})
        rc, log = w.run_driver(selector="set=lost", crash_at="Launched:after")
        self.assertEqual(rc, -9, log)
        rc, log = w.run_driver(selector="set=kept", crash_at="Launched:after")
        self.assertEqual(rc, -9, log)
        lost, kept = w.claim("lost")["status"], w.claim("kept")["status"]
        self.assertTrue(lost["isoVolume"] and lost["tokenID"])
        # The claim disappears behind the launcher's back (its finalizer removed by hand).
        r = w.sim.kube("PATCH", API + "/nodeclaims/lost", {"metadata": {"finalizers": None}},
                       ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        self.assertIn(w.delete_claim("lost").status, (200, 202))
        self.assertIsNone(w.claim("lost"))
        iso_dir = w.sim.ep["hosts"]["pve1"]["iso_dir"]
        lost_iso = os.path.join(iso_dir, lost["isoVolume"].split("/", 1)[1])

        rc, log = w.run_driver(exit_when="gc")
        self.assertEqual(rc, 0, log)
        self.assertIn(lost["vmid"], w.vms("pve1"), "a VM younger than 10 minutes was collected")
        self.assertIn(lost["reservationID"], [r["id"] for r in w.reservations("pve1")])
        self.assertTrue(os.path.exists(lost_iso))
        self.assertEqual(len(w.secrets()), 2, "tokens younger than a minute are kept")

        rc, log = w.run_driver(exit_when="gc", clock_offset_ms=ELEVEN_MINUTES_MS)
        self.assertEqual(rc, 0, log)
        self.assertIn("GC: VM %d on %s/pve1 is tagged pvescale, owned by no NodeClaim" % (lost["vmid"], w.region), log)
        vms = w.vms("pve1")
        self.assertNotIn(lost["vmid"], vms)
        self.assertIn(kept["vmid"], vms)
        ids = [r["id"] for r in w.reservations("pve1")]
        self.assertNotIn(lost["reservationID"], ids)
        self.assertIn(kept["reservationID"], ids)
        self.assertFalse(os.path.exists(lost_iso))
        self.assertTrue(os.path.exists(os.path.join(iso_dir, kept["isoVolume"].split("/", 1)[1])))
        self.assertEqual([s["metadata"]["name"] for s in w.secrets()], ["bootstrap-token-" + kept["tokenID"]],
                         "the lost claim's token collected, the live one kept")


if __name__ == "__main__":
    unittest.main()
