"""Integration test: the launcher process is killed with SIGKILL at every launch step, just before and just after the
step is recorded in the NodeClaim, and restarted: every claim still ends Initialized, with no orphan VM, no leaked
reservation, token or ISO, and no VMID or static address (the class's spec.ipam pool) used twice; deleting the claims
then leaves nothing behind."""
# SPDX-License-Identifier: Apache-2.0
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launchlib  # noqa: E402
from launchlib import STEPS  # noqa: E402


class LauncherCrashTest(unittest.TestCase):
    @staticmethod
    def pve_calls(w, route):
        return w.sim.admin("GET", "/calls").json["pve"].get(route, 0)

    def test_sigkill_at_every_step(self):
        # Clones take a second and Nodes stay NotReady for a while, so that Cloning and Registered are steps of
        # their own (a clone done within 400 ms is not recorded as Cloning, and a Node that is Ready when it is
        # found is registered and initialized in one write).
        ipam = {"ipconfig": [{"ip": "10.30.0.0/24", "gw": "10.30.0.1", "ip6": "fd00:30::/64"}]}
        w = launchlib.World(knobs=["clone_seconds=1", "ready_delay_seconds=3"],
                            nodeclass=launchlib.node_class(ipam=ipam))
        self.addCleanup(w.stop)
        points = [(s, phase) for s in STEPS for phase in ("before", "after")]
        for i, (step, phase) in enumerate(points):
            name = "k%d-%s-%s" % (i, step.lower(), phase)
            host = "pve1" if i % 2 == 0 else "pve2"
            w.create_claim(name, "c1.1VCPU-2GB", host, labels={"crash": str(i)})
            selector = "crash=%d" % i
            rc, log = w.run_driver(selector=selector, crash_at="%s:%s" % (step, phase))
            self.assertEqual(rc, -signal.SIGKILL, "%s: the driver did not crash at %s:%s\n%s" % (name, step, phase,
                                                                                                log[-3000:]))
            self.assertIn("driver: crash at %s:%s" % (step, phase), log)
            starts = self.pve_calls(w, "POST /nodes/{node}/qemu/{vmid}/status/start")
            configs = self.pve_calls(w, "PUT /nodes/{node}/qemu/{vmid}/config")
            rc, log = w.run_driver(selector=selector)
            self.assertEqual(rc, 0, "%s: no recovery after a crash at %s:%s\n%s" % (name, step, phase, log[-4000:]))
            if (step, phase) == ("Launched", "before"):
                # Started, not recorded: the rerun finds the VM running and neither configures nor starts it again
                # (the one config call is the ISO's eject after the join).
                self.assertIn("runs already", log)
                self.assertEqual(self.pve_calls(w, "POST /nodes/{node}/qemu/{vmid}/status/start"), starts)
                self.assertEqual(self.pve_calls(w, "PUT /nodes/{node}/qemu/{vmid}/config"), configs + 1)
            self.assertEqual(w.claim(name)["status"]["launchStep"], "Initialized")
            w.check_no_orphans(self)
        claims = w.claims()
        self.assertEqual(len(claims), len(points))
        vmids = [c["status"]["vmid"] for c in claims]
        self.assertEqual(len(set(vmids)), len(vmids), "a VMID was used twice")
        ipconfigs = [c["status"]["ipconfig"] for c in claims]
        addrs = [v.split("ip=")[1].split("/")[0] for v in ipconfigs] + [v.split("ip6=")[1].split("/")[0]
                                                                       for v in ipconfigs]
        self.assertEqual(len(set(addrs)), len(addrs), "an address was handed out twice: %s" % ipconfigs)
        for c in claims:  # each VM carries its claim's addresses
            conf = w.vm_config(c["status"]["host"], c["status"]["vmid"])
            self.assertEqual("ipconfig0=" + conf.get("ipconfig0", ""), c["status"]["ipconfig"], conf)
        self.assertEqual(len(w.vms()), len(points), "orphan VMs")
        for host in w.agents:
            mine = [r for r in w.reservations(host) if r["owner"].startswith("nodeclaim/")]
            self.assertEqual(len(mine), len([c for c in claims if c["status"]["host"] == host]))
            self.assertTrue(all(r["state"] == "bound" for r in mine))
        self.assertEqual(w.secrets(), [])
        # Tear everything down.
        for c in claims:
            w.delete_claim(c["metadata"]["name"])
        rc, log = w.run_driver(exit_when="empty")
        self.assertEqual(rc, 0, log[-4000:])
        self.assertEqual(w.vms(), {})
        for host in w.agents:
            self.assertEqual([r for r in w.reservations(host) if r["owner"].startswith("nodeclaim/")], [])
            self.assertEqual([f for f in w.isos(host) if f.startswith("pvescale-")], [])


if __name__ == "__main__":
    unittest.main()
