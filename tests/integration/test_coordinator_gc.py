#!/usr/bin/env python3
# pvescale-coordinator's garbage collection against the simulator and real agents: a claim that joined and whose VM
# is then deleted behind its back through Proxmox's API is deleted (a GarbageCollected Event naming why) and its
# termination removes its Node and releases its reservation; a VM tagged pvescale that no claim owns is collected
# when its SMBIOS UUID is the UID of its description, and kept when it is not (a VM made by hand with a copy).
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_termination import reservations  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
GC_S = 2  # the collection's period (1m by default)
ORPHAN = 4242
NOT_OURS = 4243
OLD_ORPHAN = 4244
ORPHAN_UID = "00000000-dead-beef-0000-000000000000"
ORPHAN_DESC = "pvescale-nodeclaim: long-gone\nuid: %s\ncreated: 2020-01-01T00:00:00Z\nsmbios-uuid: uid\n" % ORPHAN_UID
# An orphan an older coordinator described (no smbios-uuid line: its UUID is the clone's, random): collected by its
# description, as then, so an upgrade leaks no VM.
OLD_ORPHAN_UID = "2c1d5e3f-0000-4000-8000-0000000000aa"
OLD_ORPHAN_DESC = "pvescale-nodeclaim: gone-before\nuid: %s\ncreated: 2020-01-01T00:00:00Z\n" % OLD_ORPHAN_UID


def initialized(claim):
    return any(x["type"] == "Initialized" and x["status"] == "True"
               for x in (claim.get("status") or {}).get("conditions", []))


class GarbageCollectionTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s) shared by the class's tests."""
    hosts = "pve1=32intel64-2p8co2t+8ve"

    def orphan_vm(self, vmid, smbios1, desc=ORPHAN_DESC):
        sim = self.c.sim
        sim.clone(vmid, "long-gone", node="pve1")
        r = sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"description": desc, "tags": "pvescale",
                                                                  "smbios1": smbios1})
        self.assertEqual(r.status, 200, r)

    def delete_vm(self, vmid):
        sim = self.c.sim
        sim.wait_task(sim.pve("POST", "/nodes/pve1/qemu/%d/status/stop" % vmid).data)
        sim.wait_task(sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid, {"purge": 1}).data)

    def test_a_claim_whose_vm_was_deleted_is_cleaned_up_and_an_orphan_vm_collected(self):
        c = self.c
        self.orphan_vm(ORPHAN, "uuid=" + ORPHAN_UID)  # a claim's: its SMBIOS UUID is the UID of its description
        self.orphan_vm(NOT_OURS, "uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf5")  # a copy of its description only
        self.orphan_vm(OLD_ORPHAN, "uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf6", OLD_ORPHAN_DESC)
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(PODS, cl.pod("a"))
        self.co = cl.Coordinator(c, args=["--gc-interval=%ds" % GC_S])
        cl.wait_for(lambda: len(c.claims()) == 1 and initialized(c.claims()[0]), 120, interval=0.5,
                    what="an Initialized claim")
        cl.wait_for(lambda: not {ORPHAN, OLD_ORPHAN} & {vm["vmid"] for vm in c.vms()}, 30, interval=0.5,
                    what="the orphan VMs collected (the collection runs every %d s)" % GC_S)
        claim = c.claims()[0]
        name, st = claim["metadata"]["name"], claim["status"]
        self.assertEqual(len(c.sim.kube("GET", "/api/v1/nodes").json["items"]), 1)
        self.assertTrue(st.get("reservationID"), st)
        self.delete_vm(st["vmid"])
        # the next collection finds it; its termination takes the Node and the reservation
        cl.wait_for(lambda: not [x for x in c.claims() if x["metadata"]["name"] == name], 30, interval=0.5,
                    what="the claim whose VM is gone deleted")
        self.assertEqual(c.sim.kube("GET", "/api/v1/nodes/" + st["nodeName"]).status, 404, "its Node is gone")
        self.assertNotIn(st["reservationID"], [r["id"] for r in reservations(c, "pve1")], "its reservation released")
        evs = [e for e in c.items("/api/v1/namespaces/default/events")
               if e.get("reason") == "GarbageCollected" and e["involvedObject"]["name"] == name]
        self.assertEqual(len(evs), 1, evs)
        # gone, or, when its pod's new claim got the freed VMID before the collection, another's
        self.assertIn(evs[0]["message"], ["its VM %d in %s is %s" % (st["vmid"], st["region"], how)
                                          for how in ("gone", "another's now")])
        others = [e for e in c.items("/api/v1/namespaces/default/events")
                  if e.get("reason") == "GarbageCollected" and e["involvedObject"]["name"] != name]
        self.assertEqual(others, [], "a claim whose VM is its own is never collected")
        for x in c.claims():  # the pod's new claim, if there is one, keeps its VM
            self.assertIn(x["status"].get("vmid"), [vm["vmid"] for vm in c.vms()] + [None])
        self.assertIn("launcher: GC: VM %d on" % ORPHAN, self.co.logtext())
        self.assertIn(NOT_OURS, [vm["vmid"] for vm in c.vms()], "a VM whose SMBIOS UUID is not its claim's is kept")
        self.assertNotIn("launcher: GC: VM %d on" % NOT_OURS, self.co.logtext())


if __name__ == "__main__":
    unittest.main(verbosity=2)
