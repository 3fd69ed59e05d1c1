#!/usr/bin/env python3
# Static node addresses from a NodeClass's spec.ipam pools, on a real control plane (../shared/k8s) shared by the
# class's tests, the simulator and real agents: each launched VM gets its own address (past one a hand-made Proxmox
# VM holds, one a Kubernetes Node reports and an excluded one) in its ipconfig0, nameserver and searchdomain; kill -9
# of the coordinator mid-launch and a restart, or of the leader of two replicas, hand no address out twice; an address
# freed by a deleted node is handed out again; an exhausted pool fails the launch with an Event naming the pool.
# SPDX-License-Identifier: Apache-2.0
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}
OUTSIDE_VMID = 8500
HELD = {"10.20.0.10", "10.20.0.11", "10.20.0.12"}  # excluded, the hand-made VM's, the other Node's
# Leader election periods as coordinator-ha's, so that a takeover takes about 8 s, not 15-18 s.
LEADER_ARGS = ["--leader-elect-lease-duration=8s", "--leader-elect-renew-deadline=6s",
               "--leader-elect-retry-period=1s"]


def ipam(range4, exclude=()):
    return {"ipconfig": [{"interface": "net0", "ip": "10.20.0.0/24", "gw": "10.20.0.1", "range": range4,
                          "ip6": "fd00:20::/120", "gw6": "fd00:20::1", "exclude": list(exclude)}],
            "nameservers": ["10.20.0.53", "fd00:20::53"], "searchDomains": ["k8s.test"]}


def anti_pod(name):
    return cl.pod(name, cpu="500m", memory="512Mi", labels={"app": "anti"}, affinity=ANTI,
                  terminationGracePeriodSeconds=0)  # a drained node goes at once


def ipconfig_of(claim):
    return (claim.get("status") or {}).get("ipconfig")


def address(ipconfig):
    """10.20.0.13 of "ipconfig0=ip=10.20.0.13/24,gw=...". """
    value = ipconfig.split("=", 1)[1]
    return dict(kv.split("=", 1) for kv in value.split(","))["ip"].split("/")[0]


class IpamTest(cl.SharedControlPlaneTest):
    """On one real control plane: Nodes join through the simulated kubelets, the real scheduler binds the pods."""

    def setUp(self):
        super().setUp()
        self.replicas = []
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())

    def outside_holders(self):
        """A VM made by hand in Proxmox holding 10.20.0.11 and a Node (not ours) reporting 10.20.0.12."""
        c = self.c
        r = c.sim.pve("POST", "/nodes/pve1/qemu", {"vmid": OUTSIDE_VMID, "name": "outside", "cores": 1, "memory": 512,
                                                   "ipconfig0": "ip=10.20.0.11/24,gw=10.20.0.1"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(c.sim.wait_task(r.data)["exitstatus"], "OK")
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "outside"},
                "spec": {"taints": [{"key": "outside", "effect": "NoSchedule"}]},
                "status": {"addresses": [{"type": "InternalIP", "address": "10.20.0.12"}]}}
        c.create("/api/v1/nodes", node)
        got = c.sim.kube("GET", "/api/v1/nodes/outside").json
        self.assertEqual(got["status"]["addresses"], node["status"]["addresses"])

    def running(self, names):
        pods = {p["metadata"]["name"]: p for p in self.c.items(PODS)}
        return all((pods.get(n, {}).get("status") or {}).get("phase") == "Running" for n in names)

    def vm_config(self, claim):
        st = claim["status"]
        r = self.c.sim.pve("GET", "/nodes/%s/qemu/%d/config" % (st["host"], st["vmid"]))
        self.assertEqual(r.status, 200, r)
        return r.data

    def assert_distinct_and_in_vms(self, claims, held=()):
        addrs = [address(ipconfig_of(x)) for x in claims]
        self.assertEqual(len(set(addrs)), len(addrs), "an address handed out twice: %s" % addrs)
        self.assertFalse(set(held) & set(addrs), addrs)
        v6 = [ipconfig_of(x).split("ip6=")[1].split("/")[0] for x in claims]
        self.assertEqual(len(set(v6)), len(v6), v6)
        for x in claims:
            conf = self.vm_config(x)
            self.assertEqual("ipconfig0=" + conf.get("ipconfig0", ""), ipconfig_of(x), conf)
            self.assertEqual(conf.get("nameserver"), "10.20.0.53 fd00:20::53")
            self.assertEqual(conf.get("searchdomain"), "k8s.test")
        return addrs

    def test_distinct_addresses_through_kill9_and_restart_and_a_freed_one_reused(self):
        c = self.c
        self.outside_holders()
        c.create(cl.GROUP + "/proxmoxnodeclasses",
                 cl.nodeclass(metadataOptions={"type": "cdrom"}, ipam=ipam("10.20.0.10-10.20.0.40", ["10.20.0.10"])))
        names = ["anti-%d" % i for i in range(3)]
        for n in names:
            c.create(PODS, anti_pod(n))
        c.sim.knobs(clone_seconds=4)  # launches long enough to be caught mid-way
        first = cl.Coordinator(c)

        def recorded_and_cloning():
            claims = c.claims()
            return (len(claims) == 3 and all(ipconfig_of(x) for x in claims)
                    and any((x.get("status") or {}).get("launchStep") == "Cloning" for x in claims))
        try:
            cl.wait_for(recorded_and_cloning, 60, interval=0.1, what="three claims with addresses, one Cloning")
        finally:
            first.stop(sig=signal.SIGKILL)
        before = {x["metadata"]["name"]: ipconfig_of(x) for x in c.claims()}
        addrs = [address(v) for v in before.values()]
        self.assertEqual(len(set(addrs)), 3, before)

        c.sim.knobs(clone_seconds=0)
        self.co = cl.Coordinator(c)
        cl.wait_for(lambda: self.running(names), 90, interval=0.5, what="every pod Running after the restart")
        claims = c.claims()
        self.assertEqual(len(claims), 3)
        # the restart kept what the claims had recorded before the kill
        self.assertEqual({x["metadata"]["name"]: ipconfig_of(x) for x in claims}, before)
        addrs = self.assert_distinct_and_in_vms(claims, HELD)
        # the lowest free ones, past the three held elsewhere
        self.assertEqual(sorted(addrs), ["10.20.0.13", "10.20.0.14", "10.20.0.15"])
        self.assertEqual(sorted(v["vmid"] for v in c.vms() if v["vmid"] != OUTSIDE_VMID),
                         sorted(x["status"]["vmid"] for x in claims))

        # A deleted node's address is free once its claim and VM are gone, and the next launch takes it.
        lowest = min(claims, key=lambda x: address(ipconfig_of(x)))
        freed = address(ipconfig_of(lowest))
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + lowest["metadata"]["name"]).status, 200)
        cl.wait_for(lambda: lowest["metadata"]["name"] not in [x["metadata"]["name"] for x in c.claims()], 60,
                    interval=0.5, what="the deleted claim gone")
        self.assertNotIn(lowest["status"]["vmid"], [v["vmid"] for v in c.vms()])
        c.create(PODS, anti_pod("anti-3"))
        cl.wait_for(lambda: self.running(["anti-3"]), 90, interval=0.5, what="anti-3 Running")
        claims = c.claims()
        new = [x for x in claims if x["metadata"]["name"] not in before]
        self.assertEqual(len(new), 1, [x["metadata"]["name"] for x in claims])
        self.assertEqual(address(ipconfig_of(new[0])), freed)
        self.assert_distinct_and_in_vms(claims, HELD)

    def test_two_replicas_leader_killed_mid_launch(self):
        """Two replicas with leader election: the leader is killed with SIGKILL while its claims, addresses recorded,
        are Cloning; the standby takes the Lease, finishes them with the recorded addresses, and launches two more
        past them."""
        c = self.c
        c.create(cl.GROUP + "/proxmoxnodeclasses",
                 cl.nodeclass(metadataOptions={"type": "cdrom"}, ipam=ipam("10.20.0.10-10.20.0.40")))
        c.sim.knobs(clone_seconds=4)
        a = self.replica("coordinator-a")
        cl.wait_for(lambda: a.metric("leader") == 1, 30, interval=0.2, what="coordinator-a leading")
        b = self.co = self.replica("coordinator-b")
        names = ["anti-%d" % i for i in range(2)]
        for n in names:
            c.create(PODS, anti_pod(n))

        def recorded_and_cloning():
            claims = c.claims()
            return (len(claims) == 2 and all(ipconfig_of(x) for x in claims)
                    and any((x.get("status") or {}).get("launchStep") == "Cloning" for x in claims))
        cl.wait_for(recorded_and_cloning, 60, interval=0.1, what="two claims with addresses, one Cloning")
        before = {x["metadata"]["name"]: ipconfig_of(x) for x in c.claims()}
        a.stop(sig=signal.SIGKILL)
        c.sim.knobs(clone_seconds=0)
        cl.wait_for(lambda: b.metric("leader") == 1, 30, interval=0.2, what="coordinator-b leading")
        for n in ["anti-2", "anti-3"]:
            c.create(PODS, anti_pod(n))
            names.append(n)
        cl.wait_for(lambda: self.running(names), 120, interval=0.5, what="every pod Running")
        claims = c.claims()
        self.assertEqual(len(claims), 4)
        self.assertEqual({k: v for k, v in ((x["metadata"]["name"], ipconfig_of(x)) for x in claims) if k in before},
                         before)
        addrs = self.assert_distinct_and_in_vms(claims)
        self.assertEqual(sorted(addrs), ["10.20.0.10", "10.20.0.11", "10.20.0.12", "10.20.0.13"])

    def replica(self, name):
        r = cl.Coordinator(self.c, args=LEADER_ARGS, env={"POD_NAME": name, "POD_NAMESPACE": "kube-system"})
        self.replicas.append(r)
        return r

    def tearDown(self):
        for r in getattr(self, "replicas", []):  # the survivor is self.co: the base class stops it
            if r is not self.co:
                r.stop()
        super().tearDown()

    def test_the_api_server_refuses_bad_pools_naming_the_field(self):
        """The CRD's schema, enforced by the real kube-apiserver: each bad pool is refused with the field named."""
        cases = [({"ipconfig": [{"ip": "10.0.0.0"}]}, "spec.ipam.ipconfig[0].ip"),
                 ({"ipconfig": [{"interface": "eth0", "ip": "10.0.0.0/24"}]}, "spec.ipam.ipconfig[0].interface"),
                 ({"ipconfig": [{"gw": "10.0.0.1"}]}, "ipam.ipconfig[].gw and range need ip"),
                 ({"ipconfig": [{"interface": "net0"}]}, "an ipam.ipconfig entry needs ip, ip6 or both"),
                 ({"ipconfig": [{"ip": "10.0.0.0/24"}, {"ip6": "fd00::/64"}]}, "spec.ipam.ipconfig[1]: Duplicate value"),
                 ({"ipconfig": [{"ip": "10.0.0.0/24", "exclude": ["10.0.0.1/32"]}]}, "spec.ipam.ipconfig[0].exclude[0]"),
                 ({"nameservers": ["dns.example"]}, "spec.ipam.nameservers[0]")]
        for i, (pools, field) in enumerate(cases):
            r = self.c.sim.kube("POST", cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass("bad-%d" % i, ipam=pools))
            self.assertEqual(r.status, 422, (pools, r))
            self.assertIn(field, r.json["message"], pools)

    def test_exhausted_pool_fails_the_launch_naming_the_pool(self):
        c = self.c
        c.create(cl.GROUP + "/proxmoxnodeclasses",
                 cl.nodeclass(metadataOptions={"type": "cdrom"}, ipam=ipam("10.20.0.100-10.20.0.101")))
        names = ["anti-%d" % i for i in range(3)]
        for n in names:
            c.create(PODS, anti_pod(n))
        self.co = cl.Coordinator(c)

        def exhausted():
            return [e for e in c.items("/api/v1/events")
                    if e.get("reason") == "IPPoolExhausted" and e["involvedObject"].get("kind") == "NodeClaim"]
        cl.wait_for(exhausted, 90, interval=0.5, what="an IPPoolExhausted event")
        self.assertIn("ipam.ipconfig[0] (net0) IPv4 pool 10.20.0.100-10.20.0.101: no free address",
                      exhausted()[0]["message"])
        cl.wait_for(lambda: sum(self.running([n]) for n in names) == 2, 90, interval=0.5, what="two pods Running")
        claims = [x for x in c.claims() if ipconfig_of(x)]
        self.assertEqual(sorted(address(ipconfig_of(x)) for x in claims), ["10.20.0.100", "10.20.0.101"])
        self.assertEqual(len(c.vms()), 2)  # the failed launch made no VM


if __name__ == "__main__":
    unittest.main()
