#!/usr/bin/env python3
# pvescale-coordinator's planning of PCI passthrough, against the simulator (whose Proxmox keeps /cluster/mapping/pci
# and gives a starting VM the first free device of its mapping, as qemu-server does) and real agents, on a real
# control plane: a class with pciDevices [{mapping: gpu, resourceName: nvidia.com/gpu}] offers nvidia.com/gpu in its
# shapes; a pod requesting nvidia.com/gpu: 1 gets a NodeClaim on the host with a free device of the mapping (not on
# the bigger host whose device a running VM holds, not a second VM on the one free device), the agent there places
# the VM's vCPUs and memory on the device's NUMA node (the launcher's reservation names the mapping's paths), its Node
# advertises the resource (the simulated kubelet does what the device plugin in the guest would) and the pod runs
# there. Once the VM holding the other host's device stops, the pod left pending gets a claim there.
# SPDX-License-Identifier: Apache-2.0
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
GPU = "nvidia.com/gpu"
HOLDER = 900  # a VM made by hand on pve2, holding pve2's device


def gpu_pod(name):
    p = cl.pod(name, cpu="1", memory="1Gi")
    res = p["spec"]["containers"][0]["resources"]
    res["requests"][GPU] = "1"
    res["limits"] = {GPU: "1"}  # an extended resource's request must equal its limit
    return p


class DevicePlanningTest(cl.SharedControlPlaneTest):
    """pve2 is the bigger host (32 CPUs to pve1's 16): without device planning the claims would go there. The mapping's
    paths are devices of the hosts' captured sysfs trees: on pve1 a coprocessor on NUMA node 1 (0000:83:00.0), on
    pve2 one on node 0 (0000:41:00.0)."""
    hosts = "pve1=32em64t-2n8c+dax+nvme+mic+dimms,pve2=32intel64-2p8co2t+8ve"

    def live_claims(self):
        return [x for x in self.c.claims() if not x["metadata"].get("deletionTimestamp")]

    def holder_on_pve2(self):
        c = self.c
        r = c.sim.pve("POST", "/nodes/pve2/qemu", {"vmid": HOLDER, "name": "holder", "cores": 1, "memory": 512,
                                                   "hostpci0": "mapping=gpu"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(c.sim.wait_task(r.data)["exitstatus"], "OK")
        r = c.sim.pve("POST", "/nodes/pve2/qemu/%d/status/start" % HOLDER)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(c.sim.wait_task(r.data)["exitstatus"], "OK")

    def gpu_node(self):
        """The first claim's Node once it advertises nvidia.com/gpu, else None."""
        cs = self.live_claims()
        name = cs and (cs[0].get("status") or {}).get("nodeName")
        r = self.c.sim.kube("GET", "/api/v1/nodes/" + name) if name else None
        ok = r is not None and r.status == 200 and (r.json.get("status") or {}).get("allocatable", {}).get(GPU)
        return r.json if ok else None

    def pending_reason(self, name):
        evs = [e for e in self.c.pod_events(name) if e["source"].get("component") == "pvescale-coordinator"
               and e["reason"] != "Nominated"]
        return evs[-1]["message"] if evs else ""

    def test_gpu_pod_gets_the_host_with_a_free_device(self):
        c = self.c
        r = c.sim.pve("POST", "/cluster/mapping/pci", json_body={
            "id": "gpu", "map": ["node=pve1,path=0000:83:00.0,id=10de:2204,iommugroup=30",
                                 "node=pve2,path=0000:41:00.0,id=10de:2204,iommugroup=14"]})
        self.assertEqual(r.status, 200, r)
        bad = cl.nodeclass("bad", pciDevices=[{"mapping": "gpu", "resourceName": "gpu"}])
        r = c.sim.kube("POST", cl.GROUP + "/proxmoxnodeclasses", bad)
        self.assertEqual(r.status, 422, r)
        self.assertIn("spec.pciDevices[0].resourceName", r.json["message"], "an extended resource needs a domain")
        self.holder_on_pve2()
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(
            metadataOptions={"type": "cdrom"}, machine="q35",
            pciDevices=[{"mapping": "gpu", "pcie": True, "resourceName": GPU}]))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        for name in ("g0", "g1"):
            c.create(PODS, gpu_pod(name))
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN)
        claim = cl.wait_for(lambda: (lambda cs: len(cs) == 1 and cs[0].get("status", {}).get("host") and cs[0])(
            self.live_claims()), 60, interval=0.5, what="one NodeClaim placed")
        self.assertEqual(claim["status"]["host"], "pve1", "the host with a free device of the mapping")
        cl.wait_for(lambda: "no host has a free PCI device of mapping gpu" in self.pending_reason("g1"), 60,
                    interval=0.5, what="the second pod told no host has a free device")
        node = cl.wait_for(self.gpu_node, 120, interval=0.5, what="the Node advertising nvidia.com/gpu")
        self.assertEqual(node["status"]["capacity"][GPU], "1")
        self.assertEqual(node["metadata"]["labels"]["topology.kubernetes.io/zone"], "pve1")
        # the agent placed the VM's vCPUs and memory on the device's NUMA node (1; best fit on the empty host: 0)
        placed = c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + claim["metadata"]["name"]).json["status"]["placement"]
        self.assertEqual([n["hostNode"] for n in placed["numa"]], [1], placed)
        cl.wait_for(lambda: c.pods_running(1, "g0"), 120, interval=0.5, what="the GPU pod running")
        pod = c.sim.kube("GET", PODS + "/g0").json
        self.assertEqual(pod["spec"]["nodeName"], node["metadata"]["name"])
        conf = c.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % claim["status"]["vmid"]).data
        self.assertEqual(conf["hostpci0"], "mapping=gpu,pcie=1")
        # still one claim: g1 was not put on a second VM for the one device of pve1, nor on pve2's held one
        self.assertEqual(len(self.live_claims()), 1)
        self.assertNotEqual(c.sim.kube("GET", PODS + "/g1").json.get("status", {}).get("phase"), "Running")
        # the holder stops: pve2's device is free, and g1 gets a claim there
        r = c.sim.pve("POST", "/nodes/pve2/qemu/%d/status/stop" % HOLDER)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(c.sim.wait_task(r.data)["exitstatus"], "OK")
        second = cl.wait_for(lambda: (lambda cs: len(cs) == 2 and all((x.get("status") or {}).get("host") for x in cs)
                                      and cs)(self.live_claims()), 60, interval=0.5, what="a second claim")
        self.assertEqual(sorted(x["status"]["host"] for x in second), ["pve1", "pve2"])
        pve2 = next(x for x in second if x["status"]["host"] == "pve2")
        self.assertEqual([n["hostNode"] for n in pve2["status"]["placement"]["numa"]], [0], "pve2's device: node 0")
        cl.wait_for(lambda: c.pods_running(1, "g1"), 120, interval=0.5, what="the second GPU pod running on pve2")


if __name__ == "__main__":
    unittest.main(verbosity=2)
