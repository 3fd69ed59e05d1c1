#!/usr/bin/env python3
# pvescale-coordinator's VM hardware from the ProxmoxNodeClass, against the simulator (whose Proxmox validates every
# parameter against the PVE API schema and allocates the EFI disk and TPM state as qemu-server does) and real agents, on
# a real control plane: a class with machine q35, bios ovmf and an EFI disk, a TPM, the guest agent and onBoot gets a VM
# whose config carries them, with net0's queues = the vCPUs. A change of the class's tags, resourcePool and
# securityGroups updates the existing VM in place (same claim, VM and Node, no Drifted condition), while a change of
# another field drifts it. A class with pciDevices gets hostpciN by Proxmox resource mapping, and its VM starts with
# the mapping's device.
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
CLASSES = cl.GROUP + "/proxmoxnodeclasses/"
MERGE = "application/merge-patch+json"


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

    def launch(self, n, args=(), **spec):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}, **spec))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        for i in range(n):
            c.create(PODS, cl.pod("p%d" % i, cpu="1500m", memory="1Gi"))
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN + list(args))
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

    def pool_members(self, pool):
        r = self.c.sim.pve("GET", "/pools/" + pool)
        self.assertEqual(r.status, 200, r)
        return {m["vmid"] for m in r.data["members"]}

    def test_tags_pool_and_firewall_groups_in_place(self):
        c = self.c
        for pool in ("k8s", "k8s-b"):
            self.assertEqual(c.sim.pve("POST", "/pools", {"poolid": pool}).status, 200)
        # the default --gc-interval (1m): the class's change itself brings the collection's pass forward
        claims = self.launch(1, tags=["team-a"], resourcePool="k8s")
        claim = claims[0]
        name, uid, vmid = claim["metadata"]["name"], claim["metadata"]["uid"], claim["status"]["vmid"]
        ann = claim["metadata"]["annotations"]
        self.assertEqual(ann.get("pvescale.io/nodeclass-hash-version"), "2")
        node = c.sim.kube("GET", "/api/v1/nodes/" + claim["status"]["nodeName"]).json
        self.assertEqual(sorted(self.config(claim)["tags"].split(";")), sorted(["pvescale", "default", name, "team-a"]))
        self.assertEqual(self.pool_members("k8s"), {vmid})
        t0 = time.monotonic()
        r = c.sim.kube("PATCH", CLASSES + "default", {"spec": {"tags": ["team-b", "gpu"], "resourcePool": "k8s-b",
                                                               "securityGroups": [{"name": "web"}]}}, ctype=MERGE)
        self.assertEqual(r.status, 200, r)

        def updated():
            tags = set(self.config(claim).get("tags", "").split(";"))
            rules = c.sim.pve("GET", "/nodes/pve1/qemu/%d/firewall/rules" % vmid).data
            return (tags == {"pvescale", "default", name, "team-b", "gpu"} and self.pool_members("k8s-b") == {vmid}
                    and any(x["type"] == "group" and x["action"] == "web" and x.get("iface") == "net0" for x in rules))
        cl.wait_for(updated, 30, interval=0.5, what="the VM's tags, pool and firewall group updated in place, well "
                    "before the next periodic collection")
        took = time.monotonic() - t0
        self.assertEqual(self.pool_members("k8s"), set(), "moved, not added twice")
        fw = c.sim.pve("GET", "/nodes/pve1/qemu/%d/firewall/options" % vmid).data
        self.assertEqual(int(fw.get("enable", 0)), 1)
        # several disruption passes (1 s each) later: still the same claim, VM and Node, never Drifted
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            now = [x for x in c.claims() if not x["metadata"].get("deletionTimestamp")]
            self.assertEqual([(x["metadata"]["name"], x["metadata"]["uid"], x["status"]["vmid"]) for x in now],
                             [(name, uid, vmid)])
            self.assertIsNone(condition(now[0], "Drifted"), "tags, pool and groups do not drift the node")
            time.sleep(0.5)
        self.assertEqual(c.sim.kube("GET", "/api/v1/nodes/" + node["metadata"]["name"]).json["metadata"]["uid"],
                         node["metadata"]["uid"])
        self.assertEqual(c.sim.pve("GET", "/nodes/pve1/qemu/%d/status/current" % vmid).data["status"], "running")
        # any other field still drifts it: the check above could have failed
        r = c.sim.kube("PATCH", CLASSES + "default", {"spec": {"onBoot": False}}, ctype=MERGE)
        self.assertEqual(r.status, 200, r)

        def drifted():
            x = c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + name).json
            d = condition(x, "Drifted")
            return d and d["status"] == "True" and d
        d = cl.wait_for(drifted, 30, interval=0.5, what="the claim Drifted after an onBoot change")
        self.assertEqual(d["reason"], "NodeClassDrifted")
        sys.stderr.write("vmhw: tags, pool and firewall group updated in place %.1f s after the change\n" % took)

    def test_pci_device_by_mapping(self):
        c = self.c
        r = c.sim.pve("POST", "/cluster/mapping/pci", json_body={
            "id": "gpu", "map": ["node=pve1,path=0000:41:00.0,id=10de:2204,iommugroup=14"]})
        self.assertEqual(r.status, 200, r)
        bad = cl.nodeclass("bad", pciDevices=[{"mapping": "0gpu"}, {"pcie": True}])
        r = c.sim.kube("POST", cl.GROUP + "/proxmoxnodeclasses", bad)
        self.assertEqual(r.status, 422, r)
        for field in ("spec.pciDevices[0].mapping", "spec.pciDevices[1].mapping"):
            self.assertIn(field, r.json["message"])
        claim = self.launch(1, machine="q35", pciDevices=[{"mapping": "gpu", "pcie": True}])[0]
        conf = self.config(claim)
        self.assertEqual(conf["hostpci0"], "mapping=gpu,pcie=1")
        self.assertEqual(conf["machine"], "q35")
        self.assertEqual(c.sim.pve("GET", "/nodes/pve1/qemu/%d/status/current" % claim["status"]["vmid"]).data["status"],
                         "running", "Proxmox gave it the mapping's device on pve1")


if __name__ == "__main__":
    unittest.main(verbosity=2)
