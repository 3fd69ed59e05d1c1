#!/usr/bin/env python3
# pvescale-coordinator's VM hardware from the ProxmoxNodeClass, against the simulator (whose Proxmox validates every
# parameter against the PVE API schema and allocates the EFI disk and TPM state as qemu-server does) and real agents, on
# a real control plane: a class with machine q35, bios ovmf and an EFI disk, a TPM, the guest agent and onBoot gets a VM
# whose config carries them, with net0's queues = the vCPUs.
# SPDX-License-Identifier: Apache-2.0
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"


def condition(claim, kind):
    return next((x for x in (claim.get("status") or {}).get("conditions", []) if x["type"] == kind), None)


def initialized(claim):
    c = condition(claim, "Initialized")
    return bool(c and c["status"] == "True")


class VmHardwareTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s): the real API server validates the class against the CRD."""
    hosts = "pve1=32intel64-2p8co2t+8ve"

    def config(self, claim):
        st = claim["status"]
        r = self.c.sim.pve("GET", "/nodes/%s/qemu/%d/config" % (st["host"], st["vmid"]))
        self.assertEqual(r.status, 200, r)
        return r.data

    def launch(self, n, **spec):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}, **spec))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        for i in range(n):
            c.create(PODS, cl.pod("p%d" % i, cpu="1500m", memory="1Gi"))
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN)
        return cl.wait_for(lambda: (lambda cs: len(cs) == n and all(initialized(x) for x in cs) and cs)(c.claims()),
                           120, interval=0.5, what="%d Initialized claims" % n)

    def test_hardware_in_the_vm_config(self):
        c = self.c
        bad = cl.nodeclass("bad", machine="q36", bios="uefi", tpm={"version": "v3"})
        r = c.sim.kube("POST", cl.GROUP + "/proxmoxnodeclasses", bad)
        self.assertEqual(r.status, 422, r)
        for field in ("spec.machine", "spec.bios", "spec.tpm.version"):
            self.assertIn(field, r.json["message"], "the API server's refusal names %s" % field)
        t0 = time.monotonic()
        claims = self.launch(1, machine="q35", bios="ovmf", efiDisk={"preEnrolledKeys": True}, tpm={},
                             agent={"fsTrimClonedDisks": True})
        took = time.monotonic() - t0
        nc = c.sim.kube("GET", cl.GROUP + "/proxmoxnodeclasses/default").json["spec"]
        self.assertEqual((nc["efiDisk"], nc["tpm"], nc["agent"]),
                         ({"efiType": "4m", "preEnrolledKeys": True}, {"version": "v2.0"},
                          {"enabled": True, "type": "virtio", "fsTrimClonedDisks": True}),
                         "the CRD's defaults fill the objects given")
        self.assertNotIn("onBoot", nc, "no schema default at the top level: older classes keep their drift hash")
        claim = claims[0]
        conf = self.config(claim)
        vmid = claim["status"]["vmid"]
        self.assertEqual(conf["machine"], "q35")
        self.assertEqual(conf["bios"], "ovmf")
        self.assertRegex(conf["efidisk0"],
                         r"^local-lvm:vm-%d-disk-\d+,efitype=4m,pre-enrolled-keys=1,size=528K$" % vmid)
        self.assertRegex(conf["tpmstate0"], r"^local-lvm:vm-%d-disk-\d+,version=v2.0,size=4M$" % vmid)
        self.assertEqual(conf["agent"], "enabled=1,type=virtio,fstrim_cloned_disks=1")
        self.assertEqual(int(conf["onboot"]), 1, "onBoot unset: on")
        disk = re.compile(r"^(scsi|virtio|sata|ide)\d+$|^efidisk0$|^tpmstate0$")
        vols = [conf[k].split(",")[0] for k in conf if disk.match(k) and "media=cdrom" not in conf[k]]
        self.assertEqual(len(vols), len(set(vols)), "every disk its own volume: %s" % vols)
        vcpus = int(conf["cores"])
        self.assertIn("queues=%d" % vcpus, conf["net0"], "virtio-net multiqueue = the vCPUs")
        self.assertEqual(self.c.sim.pve("GET", "/nodes/pve1/qemu/%d/status/current" % vmid).data["status"], "running")
        sys.stderr.write("vmhw: hardware node Initialized in %.1f s\n" % took)


if __name__ == "__main__":
    unittest.main(verbosity=2)
