#!/usr/bin/env python3
# pvescale-coordinator with its launcher (the default --launch=true) against the simulator and real agents: the
# controller hands the NodeClaims it creates to its worker pool, which drives them to pinned VMs that join; the
# pending pods end up Running on them, the coordinator running as the Helm chart's ServiceAccount (its token from
# the TokenRequest API): the real kube-apiserver authorizes every call by the chart's RBAC and refuses none. On a
# real control plane (../shared/k8s) shared by the tests of LaunchTest; the two tests of NotReadyTaintTest share
# another one, whose kube-controller-manager they pause (see there).
# SPDX-License-Identifier: Apache-2.0
import base64
import calendar
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from simlib.util import parse_quantity  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"


def cluster_info(sim):
    """kube-public/cluster-info, as kubeadm publishes it: the API server and its CA for joining nodes."""
    with open(sim.ep["ca_file"], "rb") as f:
        ca = base64.b64encode(f.read()).decode()
    kubeconfig = ("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n"
                  "    certificate-authority-data: %s\n    server: %s\n" % (ca, sim.ep["kube"]["url"]))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": kubeconfig}}


def claim_history(sim, rv):
    """Every NodeClaim event since resourceVersion rv, from a watch that replays them and ends after 1 s."""
    conn, resp = sim.watch(cl.GROUP + "/nodeclaims?watch=1&resourceVersion=%s&timeoutSeconds=1" % rv)
    try:
        assert resp.status == 200, resp.status
        return [json.loads(line) for line in resp.read().decode().splitlines() if line.strip()]
    finally:
        conn.close()


class LaunchTest(cl.SharedControlPlaneTest):
    """On one real control plane (kube-apiserver, kube-controller-manager, kube-scheduler v1.26 from ../shared/k8s)
    shared by the class's tests: Nodes join through kubeadm's bootstrap-token TLS bootstrap (the simulated kubelets),
    the real scheduler binds the pods."""

    def test_pending_pods_end_up_running_on_launched_nodes(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        names = ["web-%d" % i for i in range(4)] + ["anti-%d" % i for i in range(2)]
        for n in names[:4]:
            c.create(PODS, cl.pod(n, cpu="1", memory="1Gi"))
        for n in names[4:]:
            c.create(PODS, cl.pod(n, cpu="500m", memory="512Mi", labels={"app": "anti"}, affinity={"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}))
        self.assertEqual(c.sim.admin("POST", "/calls/reset").status, 200)
        rv0 = c.sim.kube("GET", cl.GROUP + "/nodeclaims").json["metadata"]["resourceVersion"]
        c.run_as_chart()  # the chart's ServiceAccount and RBAC: every call is authorized by the chart's rules
        self.co = cl.Coordinator(c)

        def running():
            pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
            return all((pods[n].get("status") or {}).get("phase") == "Running" for n in names)

        def initialized():  # the launcher records it right after the Node turns Ready (pods may run first)
            return all({x["type"]: x["status"] for x in claim.get("status", {}).get("conditions", [])}
                       .get("Initialized") == "True" for claim in c.claims())
        try:
            cl.wait_for(running, 90, interval=0.5, what="every pod Running")
        except AssertionError:
            pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status")) for p in c.items(PODS)]
            nodes = [(n["metadata"]["name"], n["spec"].get("taints"), n["status"].get("allocatable"),
                      [(x["type"], x["status"]) for x in n["status"].get("conditions", [])])
                     for n in c.items("/api/v1/nodes")]
            kubelets = c.sim.admin("GET", "/state").json.get("kubelets")
            kubelets = [kubelets, [(x["metadata"]["name"], {k: base64.b64decode(v).decode() for k, v in x.get("data", {}).items()
                                                            if k != "token-secret"})
                                   for x in c.items("/api/v1/namespaces/kube-system/secrets")]]
            self.fail("pods not Running:\n%s\nnodes:\n%s\nkubelets: %s" % (pods, nodes, kubelets))
        cl.wait_for(initialized, 30, interval=0.5, what="every claim Initialized")

        claims = {x["metadata"]["name"]: x for x in c.claims()}
        nodes = {n["metadata"]["name"]: n for n in c.items("/api/v1/nodes")}
        pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
        self.assertGreaterEqual(len(claims), 2, "hostname anti-affinity needs two nodes")
        for name, claim in claims.items():
            conds = {x["type"]: x["status"] for x in claim["status"].get("conditions", [])}
            self.assertEqual(conds.get("Initialized"), "True", claim["status"])
            node = nodes[claim["status"]["nodeName"]]
            self.assertEqual(node["spec"]["providerID"], claim["status"]["providerID"])
            self.assertEqual(node["metadata"]["labels"]["topology.kubernetes.io/zone"], claim["status"]["host"])
            # recorded by the launcher's first status write: the Node reports what the claim promised
            self.assertEqual(claim["status"]["capacity"]["cpu"], node["status"]["capacity"]["cpu"], claim["status"])
            # the kubelet is told the shape's pod capacity (--max-pods), not left at its default of 110
            self.assertEqual(claim["status"]["capacity"]["pods"], node["status"]["capacity"]["pods"], claim["status"])
            # and what the shape reserves (--kube-reserved, --system-reserved; the kubelet's own default is none):
            # the Node offers the CPU the claim promised, and at least its memory (the simulated guest kernel keeps
            # none of the VM's memory for itself)
            alloc, node_alloc = claim["status"]["allocatable"], node["status"]["allocatable"]
            self.assertEqual(parse_quantity(alloc["cpu"]), parse_quantity(node_alloc["cpu"]), (alloc, node_alloc))
            self.assertLess(parse_quantity(node_alloc["memory"]), parse_quantity(node["status"]["capacity"]["memory"]))
            self.assertGreaterEqual(parse_quantity(node_alloc["memory"]), parse_quantity(alloc["memory"]))
        # Each pod runs on the node of a claim; the two anti-affinity pods on different ones.
        on = {n: pods[n]["spec"]["nodeName"] for n in names}
        self.assertTrue(set(on.values()) <= {x["status"]["nodeName"] for x in claims.values()}, on)
        self.assertNotEqual(on["anti-0"], on["anti-1"])
        vms = c.vms()
        self.assertEqual(len(vms), len(claims))
        self.assertEqual({v["vmid"] for v in vms}, {x["status"]["vmid"] for x in claims.values()})
        m = self.co.metrics()
        self.assertEqual(m['pvescale_coordinator_launches_total{result="initialized"}'], len(claims))
        self.assertEqual(m['pvescale_coordinator_launches_total{result="failed"}'], 0)
        self.assertGreater(m['pvescale_coordinator_launcher_reconciles_total{result="ok"}'], 0)
        self.check_scale_metrics(claims, nodes, pods)
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused")
        # The writers only create the claims; their placement goes with the launcher's first status write, which
        # also records the VMID (the claims' history, replayed by a watch from before the coordinator started).
        first_write = {}
        for ev in claim_history(c.sim, rv0):
            name = ev["object"]["metadata"]["name"]
            if ev["type"] == "MODIFIED" and name not in first_write:
                first_write[name] = ev["object"].get("status") or {}
        self.assertEqual(sorted(first_write), sorted(claims))
        for name, st in first_write.items():
            self.assertTrue(st.get("host") and st.get("vmid") and st.get("placement"), (name, st))


    def check_scale_metrics(self, claims, nodes, pods):
        """The VMs created, the claims by phase, and the pool's nodes with what they offer and what their pods
        request, as the API has them (the cache may lag a moment behind); the page passes promtool."""
        ours = [n for n in nodes.values() if n["metadata"]["labels"].get("pvescale.io/nodepool") == "default"]
        self.assertEqual(len(ours), len(claims))
        names = {n["metadata"]["name"] for n in ours}

        def total(objs, field, res):
            return sum(parse_quantity(o[field][res]) for o in objs)

        def requests(pod, res):
            return sum(parse_quantity(c.get("resources", {}).get("requests", {}).get(res, "0"))
                       for c in pod["spec"]["containers"])
        on_ours = [p for p in pods.values() if p["spec"].get("nodeName") in names and
                   (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        pool = 'nodepool="default"'
        want = {'vms_created_total{reason="provisioning"}': len(claims),
                'vms_deleted_total{reason="launch_failed"}': 0,
                'nodeclaims_phase{%s,phase="Initialized"}' % pool: len(claims),
                'nodeclaims_phase{%s,phase="Launching"}' % pool: 0,
                'nodeclaims_phase{%s,phase="Terminating"}' % pool: 0,
                'nodes{%s}' % pool: len(ours)}
        for res in ("cpu", "memory"):
            want['nodes_capacity{%s,resource_type="%s"}' % (pool, res)] = total([n["status"] for n in ours],
                                                                                  "capacity", res)
            want['nodes_allocatable{%s,resource_type="%s"}' % (pool, res)] = total([n["status"] for n in ours],
                                                                                     "allocatable", res)
            want['nodes_total_pod_requests{%s,resource_type="%s"}' % (pool, res)] = sum(
                requests(p, res) for p in on_ours)
        want = {"pvescale_coordinator_" + k: float(v) for k, v in want.items()}
        self.assertGreater(want['pvescale_coordinator_nodes_total_pod_requests{%s,resource_type="cpu"}' % pool], 0)
        got = {}

        def agree():
            got.update({k: v for k, v in self.co.metrics().items() if k in want})
            return got == want
        try:
            cl.wait_for(agree, 10, interval=0.5, what="the scale metrics agreeing with the API")
        except AssertionError:
            self.assertEqual(got, want)
        status, text = self.co.get(self.co.metrics_port, "/metrics")
        self.assertEqual(status, 200)
        if os.access("/usr/bin/promtool", os.X_OK):
            p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_pod_kube_scheduler_keeps_refusing_on_a_fitting_node_gets_its_own(self):
        """A pod whose volume cannot be reached from the one Node (a local PersistentVolume whose node affinity
        leaves that Node out, which the simulation does not model) fits that Node by the simulation, and
        kube-scheduler refuses it there: after PROVISIONER_REFUSED_MS (30 s) it is planned on a claim of its own,
        once, and runs there; the disagreement is logged with kube-scheduler's words and counted."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(PODS, cl.pod("first", cpu="500m", memory="512Mi"))
        c.run_as_chart()
        self.co = cl.Coordinator(c)
        cl.wait_for(lambda: c.pods_running(1), 90, interval=0.5, what="the first pod Running")
        first_node = c.sim.kube("GET", PODS + "/first").json["spec"]["nodeName"]
        c.create("/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "disk-b"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                     "local": {"path": "/mnt/disk-b"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [first_node]}]}]}}}})
        claims = "/api/v1/namespaces/default/persistentvolumeclaims"
        c.create(claims, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "disk-b"},
                          "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                                   "volumeName": "disk-b", "resources": {"requests": {"storage": "1Gi"}}}})
        # kube-controller-manager's PV controller binds it on the claim's add event, else at its resync (15 s); in
        # an ASan run beside three other tests it once took over 30 s (CI of this stop): a generous deadline
        cl.wait_for(lambda: (c.sim.kube("GET", claims + "/disk-b").json.get("status") or {}).get("phase") == "Bound",
                    120, interval=0.5, what="the claim bound by kube-controller-manager")
        second = cl.pod("second", cpu="250m", memory="256Mi")
        second["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "disk-b"}}]
        c.create(PODS, second)
        started = time.time()
        cl.wait_for(lambda: c.pods_running(2), 150, interval=0.5, what="the second pod Running")
        pod = c.sim.kube("GET", PODS + "/second").json
        self.assertNotEqual(pod["spec"]["nodeName"], first_node)
        # it fit the first Node by the simulation until the disagreement was settled, not a claim a round
        self.assertGreaterEqual(time.time() - started, 25)
        self.assertEqual(len(c.claims()), 2)
        log = self.co.logtext()
        self.assertRegex(log, r"pod default/second: kube-scheduler refused it for \d+ s while the simulation fit it "
                              r"on Node %s \(kube-scheduler: .*volume node affinity conflict" % first_node)
        self.assertEqual(self.co.metric("scheduler_disagreements_total"), 1)
        self.assertEqual(c.denials(), [], "calls the Helm chart's RBAC refused")

    def test_karpenters_unregistered_taint_as_a_startup_taint_goes_at_registration(self):
        """A NodePool copied from a Karpenter one lists Karpenter's registration taint karpenter.sh/unregistered:
        NoExecute as a startup taint. As Karpenter's registration does, the launcher takes it off with its own
        (pvescale.io/unregistered), so the node becomes Initialized and its pod Running (issue 37, 2)."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        pool = cl.nodepool()
        startup = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
        pool["spec"]["template"]["spec"]["startupTaints"] = startup
        c.create(cl.GROUP + "/nodepools", pool)
        c.create(PODS, cl.pod("web", cpu="500m", memory="512Mi"))
        self.co = cl.Coordinator(c)

        def initialized():
            claims = c.claims()
            st = (claims[0].get("status") or {}) if claims else {}
            return st.get("launchStep") == "Initialized" and st
        st = cl.wait_for(initialized, 90, interval=0.5, what="the claim Initialized")
        node = c.sim.kube("GET", "/api/v1/nodes/" + st["nodeName"]).json
        self.assertNotIn("karpenter.sh/unregistered", [t["key"] for t in node["spec"].get("taints", [])])
        cl.wait_for(lambda: (c.sim.kube("GET", PODS + "/web").json.get("status") or {}).get("phase") == "Running", 30,
                    interval=0.5, what="web Running")

    def test_join_without_cluster_info(self):
        """k3s and Talos create no kube-public/cluster-info. Without it, and with no join section in the config, the
        claim says what to set; with join.api_server and join.ca_file the VMs get them (the simulated kubelet checks the
        discovery's server and CA as kubeadm would) and the pods run."""
        c = self.c
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(PODS, cl.pod("k3s-pod", cpu="500m", memory="512Mi"))
        self.co = cl.Coordinator(c)

        def last_error():
            claims = c.claims()
            return claims and (claims[0].get("status") or {}).get("lastError", "")
        err = cl.wait_for(lambda: "join.api_server" in (last_error() or "") and last_error(), 60, interval=0.5,
                          what="the claim naming the join settings")
        self.assertIn("cluster-info is not there", err)
        self.assertEqual(c.items("/api/v1/nodes"), [])
        self.assertEqual([v.get("status") for v in c.vms()], ["stopped"])  # cloned, not started without join data
        self.co.stop()
        c.config = c.write_config(["join:", "  api_server: %s" % c.sim.ep["kube"]["url"],
                                   "  ca_file: %s" % c.sim.ep["ca_file"]])
        self.co = cl.Coordinator(c)
        cl.wait_for(lambda: all((p.get("status") or {}).get("phase") == "Running" for p in c.items(PODS)), 90,
                    interval=0.5, what="the pod Running on a node that joined through the config's join section")
        self.assertEqual(len(c.vms()), 1)

    def test_launch_timeouts_are_flags(self):
        """--clone-timeout and --registration-timeout reach the launcher: a clone slower than the one and a VM that
        never joins within the other fail their launches, with the Events that name the timeouts, and nothing is
        left behind."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        self.assertEqual(c.sim.admin("POST", "/knobs", {"clone_seconds": 4}).status, 200)
        c.create(PODS, cl.pod("slow", cpu="500m", memory="512Mi"))
        self.co = cl.Coordinator(c, ["--clone-timeout=1s", "--registration-timeout=2s", "--task-timeout=30s"])

        def reasons():
            evs = c.items("/api/v1/namespaces/default/events")
            return {e["reason"] for e in evs if e.get("involvedObject", {}).get("kind") == "NodeClaim"}
        cl.wait_for(lambda: "CloneTimeout" in reasons(), 60, interval=0.5, what="a CloneTimeout Event")
        # Clones are quick again, but no VM ever joins: the registration timeout fails the next launches.
        self.assertEqual(c.sim.admin("POST", "/knobs", {"clone_seconds": 0, "join_delay_seconds": 3600}).status, 200)
        cl.wait_for(lambda: "RegistrationTimeout" in reasons(), 90, interval=0.5, what="a RegistrationTimeout Event")
        self.assertIn("within 1 s", [e["message"] for e in c.items("/api/v1/namespaces/default/events")
                                     if e["reason"] == "CloneTimeout"][0])
        self.co.stop()
        self.co = None
        cl.wait_for(lambda: all(v["vmid"] in [(x.get("status") or {}).get("vmid") for x in c.claims()]
                                for v in c.vms()), 30, what="no VM but those of live claims")

    def test_sigterm_mid_launch_is_no_error_and_the_launch_resumes(self):
        """SIGTERM while launches wait on Proxmox: the stop cancels the calls in flight, which is not an error (no
        error line, no attempt counted), and a restarted coordinator takes the claims on from their status to
        Running, one VM each."""
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        names = ["anti-%d" % i for i in range(3)]
        for n in names:
            c.create(PODS, cl.pod(n, cpu="500m", memory="512Mi", labels={"app": "anti"}, affinity=anti))
        self.assertEqual(c.sim.admin("POST", "/knobs", {"clone_seconds": 4}).status, 200)
        first = cl.Coordinator(c)

        def cloning():
            claims = c.claims()
            return len(claims) == 3 and all((x.get("status") or {}).get("launchStep") == "Cloning" for x in claims)
        try:
            cl.wait_for(cloning, 60, interval=0.2, what="three claims Cloning")
            # From now on every Proxmox request hangs: the task polls are in flight when the signal comes.
            self.assertEqual(c.sim.admin("POST", "/knobs", {"pve_timeout_rate": 1}).status, 200)
            time.sleep(2)
        finally:
            rc = first.stop()
        log = first.logtext()
        self.assertEqual(rc, 0, log[-3000:])
        after = log[log.index("stopping"):]
        self.assertNotIn("error:", after)
        for claim in c.claims():
            st = claim["status"]
            self.assertEqual(st["launchStep"], "Cloning", st)
            self.assertNotIn("attempts", st)
            self.assertNotIn("lastError", st)

        self.assertEqual(c.sim.admin("POST", "/knobs", {"pve_timeout_rate": 0}).status, 200)
        self.co = cl.Coordinator(c)

        def running():
            pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
            return all((pods[n].get("status") or {}).get("phase") == "Running" for n in names)
        cl.wait_for(running, 90, interval=0.5, what="every pod Running after the restart")
        claims = c.claims()
        self.assertEqual(len(claims), 3)
        self.assertEqual(sorted(v["vmid"] for v in c.vms()), sorted(x["status"]["vmid"] for x in claims))



class NotReadyTaintTest(cl.SharedControlPlaneTest):
    """A Node that is Ready and still has node.kubernetes.io/not-ready:NoSchedule (which the TaintNodesByCondition
    admission plugin puts on every new Node): a real kube-controller-manager takes it off on the very Node update
    that reports Ready, so the window exists only while the node lifecycle controller lags. Here it is made real:
    the kubelets hold Ready back (ready_delay_seconds) until their Nodes are registered, kube-controller-manager is
    stopped (SIGSTOP), the kubelets report Ready, and it is continued (SIGCONT) after the assertions. Two tests, one
    control plane of their own (kube-controller-manager paused would hold up LaunchTest's)."""

    def hold_ready(self):
        """Nodes register NotReady and stay so until ready_now()."""
        self.assertEqual(self.c.sim.admin("POST", "/knobs", {"ready_delay_seconds": 3600}).status, 200)

    def ready_now(self):
        self.assertEqual(self.c.sim.admin("POST", "/knobs", {"ready_delay_seconds": 0}).status, 200)

    def registered_nodes(self, n):
        def nodes():
            items = self.c.items("/api/v1/nodes")
            return len(items) == n and items
        return cl.wait_for(nodes, 120, interval=0.3, what="%d Nodes registered" % n)

    def test_no_second_claim_while_the_not_ready_taint_lingers(self):
        """Ready comes before the node lifecycle controller takes its not-ready taint off. A claim is Initialized
        only once that taint is gone too, as in Karpenter, so a round in that window keeps the waiting pods on their
        claims instead of making new ones."""
        c = self.c
        self.hold_ready()
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        for i in range(2):
            c.create(PODS, cl.pod("anti-%d" % i, cpu="500m", memory="512Mi", labels={"app": "anti"}, affinity=anti))
        self.co = cl.Coordinator(c)
        self.registered_nodes(2)
        with self.cp.paused("kube-controller-manager"):
            self.ready_now()

            def lingering():  # every Node Ready, each still with the not-ready taint
                nodes = c.items("/api/v1/nodes")
                return len(nodes) == 2 and all(
                    {x["type"]: x["status"] for x in n["status"].get("conditions", [])}.get("Ready") == "True" and
                    "node.kubernetes.io/not-ready" in [t["key"] for t in n["spec"].get("taints", [])] for n in nodes)
            cl.wait_for(lingering, 90, interval=0.2, what="two Nodes Ready with the not-ready taint")
            for claim in c.claims():
                conds = {x["type"]: x["status"] for x in claim["status"].get("conditions", [])}
                self.assertNotEqual(conds.get("Initialized"), "True", claim["status"])
            # A new pod opens a round while the anti-affinity pods wait for the taint to go.
            batches = self.co.metric("batches_total")
            c.create(PODS, cl.pod("small", cpu="100m", memory="64Mi"))
            cl.wait_for(lambda: self.co.metric("batches_total") > batches, 60, interval=0.3,
                        what="a provisioning round with the small pod pending")
            self.assertTrue(lingering(), "the window closed before the round")
            claims = c.claims()
            self.assertEqual(len(claims), 2, [x["metadata"]["name"] for x in claims])

        def running():
            return all((p.get("status") or {}).get("phase") == "Running" for p in c.items(PODS))
        cl.wait_for(running, 120, interval=0.5, what="every pod Running")
        claims = c.claims()
        self.assertEqual(len(claims), 2, [x["metadata"]["name"] for x in claims])
        self.assertEqual(len(c.vms()), 2)

    def test_registered_when_the_not_ready_taint_never_goes(self):
        """A Ready Node whose not-ready taint stays (a node lifecycle controller that does not run) does not keep
        its claim short of Registered for ever: after 10 s Ready the claim is recorded Registered and waits for
        Initialized, still in flight, so the pod gets no second claim."""
        c = self.c
        # Ready as it registers, so the launcher first sees it Ready with the taint: the kubelet waits after its TLS
        # bootstrap (which needs kube-controller-manager) until kube-controller-manager is paused.
        self.assertEqual(c.sim.admin("POST", "/knobs", {"register_hold": True, "register_ready": True}).status, 200)
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(PODS, cl.pod("stuck", cpu="500m", memory="512Mi"))
        self.co = cl.Coordinator(c)

        def issued():
            return any((x.get("status") or {}).get("certificate")
                       for x in c.items("/apis/certificates.k8s.io/v1/certificatesigningrequests"))
        cl.wait_for(issued, 120, interval=0.3, what="the kubelet's client certificate issued")
        with self.cp.paused("kube-controller-manager"):
            self.assertEqual(c.sim.admin("POST", "/knobs", {"register_hold": False}).status, 200)

            def registered():
                claims = c.claims()
                st = (claims[0].get("status") or {}) if claims else {}  # none yet between create and first write
                conds = {x["type"]: x["status"] for x in st.get("conditions", [])}
                return conds.get("Registered") == "True" and claims[0]
            claim = cl.wait_for(registered, 90, interval=0.5, what="the claim Registered")
            st = claim["status"]
            conds = {x["type"]: x["status"] for x in st["conditions"]}
            self.assertEqual((st["launchStep"], conds.get("Initialized")), ("Registered", "Unknown"), st)
            node = c.sim.kube("GET", "/api/v1/nodes/" + st["nodeName"]).json
            ready = [x for x in node["status"]["conditions"] if x["type"] == "Ready"][0]
            self.assertEqual(ready["status"], "True", node["status"])
            waited = time.time() - calendar.timegm(time.strptime(ready["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))
            self.assertGreaterEqual(waited, 9, "recorded before the settle window ended: %s %s" % (
                node, self.co.logtext()[-3000:]))
            self.assertIn("node.kubernetes.io/not-ready", [t["key"] for t in node["spec"]["taints"]])
            time.sleep(3)  # a round or two more: the pod stays on its claim
            self.assertEqual(len(c.claims()), 1)


if __name__ == "__main__":
    unittest.main()
