#!/usr/bin/env python3
# pvescale-coordinator terminates a deleted NodeClaim in order, against the simulator and real agents: the Node is
# tainted before its pods go, the pods leave through the Eviction API (a PodDisruptionBudget holds the node until
# it allows them), the Node is deleted before the VM, the VM is stopped then deleted, the reservation released and
# the finalizer dropped; a kill -9 of the coordinator mid-drain and a restart finish the termination, once. The
# coordinator runs as the Helm chart's ServiceAccount, and the chart's RBAC refuses none of its calls.
# SPDX-License-Identifier: Apache-2.0
import http.client
import json
import os
import signal
import ssl
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
EVICT = "POST /api/v1/namespaces/{namespace}/pods/{name}/eviction"
DISRUPTED = "pvescale.io/disrupted"
POD_GRACE_S = 3


def reservations(c, host):
    """The reservations a host's agent holds."""
    ctx = ssl.create_default_context(cafile=c.ca)
    conn = http.client.HTTPSConnection(c.agents[host]["ip"], c.agent_port, context=ctx, timeout=10)
    try:
        conn.request("GET", "/v1/reservations", headers={"Authorization": "Bearer " + c.token})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        return json.loads(resp.read())["reservations"]
    finally:
        conn.close()


class Watcher(cl.FirstSeen):
    """Polls the Node, the pods and the VM every 50 ms and keeps when each thing was first seen."""

    def __init__(self, c, node, vmid):
        super().__init__(0.05)
        self.c, self.node, self.vmid = c, node, vmid

    def poll(self):
        r = self.c.sim.kube("GET", "/api/v1/nodes/" + self.node)
        node = r.json if r.status == 200 else None
        pods = [p["metadata"]["name"] for p in self.c.items(PODS + "?fieldSelector=spec.nodeName%3D" + self.node)]
        vm = [v for v in self.c.vms() if v["vmid"] == self.vmid]
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        self.note("tainted", any(t["key"] == DISRUPTED and t["effect"] == "NoSchedule" for t in taints))
        self.note("web gone", not any(p.startswith("web-") for p in pods))
        self.note("node deleting", node is None or node["metadata"].get("deletionTimestamp"))
        self.note("vm stopped", not vm or vm[0]["status"] != "running")
        self.note("vm gone", not vm)



class TerminationTest(cl.SharedControlPlaneTest):
    """On a real control plane (../shared/k8s) shared by the class's tests."""
    hosts = "pve1=eas-tioga"

    def scale_up(self, args=()):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create("/apis/apps/v1/namespaces/kube-system/daemonsets", cl.DAEMONSET)
        for i in range(2):
            # Killed 3 s after their eviction (30 s by default): the drain waits for them to be gone.
            c.create(PODS, cl.pod("web-%d" % i, cpu="500m", memory="512Mi", labels={"app": "web"},
                                  terminationGracePeriodSeconds=POD_GRACE_S))
        self.assertEqual(c.sim.admin("POST", "/calls/reset").status, 200)  # the coordinator's calls from here
        c.run_as_chart()  # the chart's ServiceAccount and RBAC: every call is authorized by the chart's rules
        self.co = cl.Coordinator(c, args=args)
        cl.wait_for(lambda: all((p.get("status") or {}).get("phase") == "Running" for p in c.items(PODS))
                    and len(c.items(PODS)) == 2, 90, interval=0.5, what="web pods Running")
        cl.wait_for(lambda: (c.claims()[0].get("status") or {}).get("launchStep") == "Initialized", 30,
                    interval=0.5, what="claim Initialized")
        return c.claims()[0]

    def claim(self, name):
        r = self.c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + name)
        return r.json if r.status == 200 else None

    def test_drain_in_order_with_a_pdb_and_a_crash(self):
        c = self.c
        claim = self.scale_up()
        name, node, vmid = claim["metadata"]["name"], claim["status"]["nodeName"], claim["status"]["vmid"]
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
        c.create(PDBS, pdb)
        w = Watcher(c, node, vmid)
        w.start()
        self.addCleanup(w.halt.set)
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + name).status, 200)

        # The PDB allows no eviction: the Node is tainted and draining, and stays with its pods and VM.
        cl.wait_for(lambda: "tainted" in w.first, 20, what="Node tainted")
        cl.wait_for(lambda: c.sim.admin("GET", "/calls").json["kube"].get(EVICT, 0) >= 2, 20,
                    what="evictions refused")
        time.sleep(2)
        st = self.claim(name)["status"]
        self.assertEqual(st.get("terminationStep"), "Tainted", st)
        self.assertIn("terminationStartedAt", st)
        self.assertNotIn("node deleting", w.first)
        self.assertNotIn("vm stopped", w.first)
        self.assertEqual(len(c.items(PODS)), 2)
        # The DaemonSet's pod stays on the draining Node: never evicted (and the DaemonSet controller keeps it
        # there, as a NoSchedule taint does not make it leave).
        ds = [p for p in c.items("/api/v1/namespaces/kube-system/pods") if p["spec"].get("nodeName") == node]
        self.assertEqual(len(ds), 1, ds)
        self.assertNotIn("deletionTimestamp", ds[0]["metadata"])

        # kill -9 mid-drain; a new coordinator goes on from the recorded step.
        self.co.stop(sig=signal.SIGKILL)
        self.co = cl.Coordinator(c)
        time.sleep(2)
        self.assertIsNotNone(self.claim(name))
        self.assertEqual(len(c.items(PODS)), 2)
        r = c.sim.kube("PATCH", PDBS + "/web", {"spec": {"minAvailable": 0}}, ctype="application/merge-patch+json")
        self.assertEqual(r.status, 200, r)
        cl.wait_for(lambda: self.claim(name) is None, 60, interval=0.5, what="claim gone")
        m = self.co.metrics()  # the new coordinator's: it evicted both web pods once the PDB allowed it
        self.assertGreaterEqual(m.get('pvescale_coordinator_evictions_total{result="ok"}', 0), 2, m)
        self.assertEqual(m.get('pvescale_coordinator_evictions_total{result="error"}'), 0.0)
        cl.wait_for(lambda: "vm gone" in w.first, 10, what="VM gone seen")
        w.halt.set()
        w.join()

        f = w.first
        self.assertLess(f["tainted"], f["web gone"], f)
        self.assertLessEqual(f["web gone"], f["node deleting"], f)
        self.assertLess(f["node deleting"], f["vm gone"], f)
        self.assertIsNone(c.sim.kube("GET", "/api/v1/nodes/" + node).json.get("spec"))
        calls = c.sim.admin("GET", "/calls").json
        self.assertEqual(calls["kube"].get("DELETE /api/v1/namespaces/{namespace}/pods/{name}", 0), 0,
                         "a pod deleted directly, not evicted")
        # Stopped, then deleted, each once across the crash.
        vm = [v for v in c.sim.admin("GET", "/report").json["vms"] if v["vmid"] == vmid][0]
        self.assertEqual(len(vm["stopped"]), 1, vm)
        self.assertLessEqual(vm["stopped"][0], vm["deleted"], vm)
        self.assertEqual(calls["pve"].get("DELETE /nodes/{node}/qemu/{vmid}", 0), 1, calls["pve"])
        # The reservation is released.
        self.assertEqual([x for x in reservations(c, "pve1") if x["owner"].startswith("nodeclaim/")], [])
        reasons = [e["reason"] for e in c.items("/api/v1/namespaces/default/events")
                   if e["involvedObject"].get("name") == name]
        self.assertEqual(reasons.count("Terminating"), 1, reasons)
        self.assertEqual(reasons.count("Terminated"), 1, reasons)
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused")

    def test_drain_timeout_ends_a_drain_without_a_grace_period(self):
        """Neither the claim nor its NodePool sets terminationGracePeriod: --drain-timeout stands in for it, so the
        pods a PDB keeps are deleted (grace 0) once it has passed since the drain began, and the claim goes."""
        c = self.c
        claim = self.scale_up(args=["--drain-timeout=4s"])
        self.assertNotIn("terminationGracePeriod", claim["spec"])
        name = claim["metadata"]["name"]
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
        c.create(PDBS, pdb)
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + name).status, 200)
        cl.wait_for(lambda: (self.claim(name) or {}).get("status", {}).get("terminationStartedAt"), 20,
                    interval=0.2, what="the drain started")
        t0 = time.monotonic()
        cl.wait_for(lambda: c.sim.admin("GET", "/calls").json["kube"].get(EVICT, 0) >= 2, 10,
                    what="evictions refused")
        cl.wait_for(lambda: self.claim(name) is None, 60, interval=0.5, what="claim gone after the drain timeout")
        self.assertGreaterEqual(time.monotonic() - t0, 3.0, "not before the drain timeout")
        calls = c.sim.admin("GET", "/calls").json
        self.assertEqual(calls["kube"].get("DELETE /api/v1/namespaces/{namespace}/pods/{name}", 0), 2,
                         "both web pods deleted once the drain timeout passed")
        self.assertIn("(its termination grace period is over)", self.co.logtext())
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused")


if __name__ == "__main__":
    unittest.main()
