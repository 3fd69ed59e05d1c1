#!/usr/bin/env python3
# The simulator with --kube real: its kubelets join a real control plane as kubeadm does (cluster-info's JWS for the
# token, TLS bootstrap through a CSR the real controller manager approves and signs), register their Nodes as
# themselves (labels, taints, providerID, capacity), run the pods the real scheduler binds, delete them when they are
# deleted, and stop heartbeating when their VM stops (the real node lifecycle controller marks the Node Unknown).
# SPDX-License-Identifier: Apache-2.0
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import pod, wait_for  # noqa: E402

USER_DATA = """#cloud-config
write_files:
  - path: /etc/default/kubelet
    content: |
      KUBELET_EXTRA_ARGS="--provider-id=proxmox://r1/{vmid} --node-labels=pvescale.io/pool=general,node.kubernetes.io/instance-type=c1.4x8 --register-with-taints=dedicated=x:NoSchedule --max-pods=20 --kube-reserved=cpu=100m,memory=256Mi"
runcmd:
  - kubeadm join 127.0.0.1:6443 --token {token} --discovery-token-unsafe-skip-ca-verification
"""
FILE_DISCOVERY = """#cloud-config
write_files:
  - path: /etc/pvescale/discovery.conf
    content: |
      clusters:
        - cluster:
            certificate-authority-data: {ca}
            server: {server}
      users:
        - user:
            token: {token}
"""
TOLERATE = [{"key": "dedicated", "operator": "Exists"}]


def b64(s):
    return base64.b64encode(s.encode()).decode()


class RealKubeletTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", kube="real")
        cls.tmp = tempfile.mkdtemp(prefix="sim-kubelet-real-")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def secret(self, tid, tsecret):
        exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        s = {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
             "metadata": {"name": "bootstrap-token-" + tid, "namespace": "kube-system"},
             "data": {"token-id": b64(tid), "token-secret": b64(tsecret), "expiration": b64(exp),
                      "usage-bootstrap-authentication": b64("true"), "usage-bootstrap-signing": b64("true"),
                      "auth-extra-groups": b64("system:bootstrappers:kubeadm:default-node-token")}}
        r = self.sim.kube("POST", "/api/v1/namespaces/kube-system/secrets", s)
        self.assertEqual(r.status, 201, r)

    def boot_vm(self, vmid, name, user_data, node="pve1", cores=4, memory=8192):
        self.sim.clone(vmid, name, node)
        iso = os.path.join(self.tmp, "%s.iso" % name)
        data = simtest.make_iso(iso, {"user-data": user_data, "meta-data": "instance-id: %s\n" % name})
        r = self.sim.upload_iso(node, "%s-cidata.iso" % name, data)
        self.assertEqual(self.sim.wait_task(r.data)["exitstatus"], "OK")
        r = self.sim.pve("PUT", "/nodes/%s/qemu/%d/config" % (node, vmid), {
            "cores": cores, "memory": str(memory), "ide2": "local:iso/%s-cidata.iso,media=cdrom" % name})
        self.assertEqual(r.status, 200, r)
        st = self.sim.wait_task(self.sim.pve("POST", "/nodes/%s/qemu/%d/status/start" % (node, vmid)).data)
        self.assertEqual(st["exitstatus"], "OK")

    def node(self, name):
        r = self.sim.kube("GET", "/api/v1/nodes/" + name)
        return r.json if r.status == 200 else None

    def ready(self, name):
        n = self.node(name)
        if not n:
            return None
        return next((c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"), None)

    def kubelet_state(self, vmid):
        return self.sim.admin("GET", "/state").json["kubelets"].get("r1/%d" % vmid) or {}

    def audit_users(self, verb, resource, name):
        """Who did verb on the object (resource: e.g. "pods/status"), by the audit log."""
        with open(self.sim.ep["kube"]["audit_log"]) as f:
            evs = [json.loads(line) for line in f if line.strip()]
        out = set()
        for e in evs:
            ref = e.get("objectRef") or {}
            res = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
            if e["verb"] == verb and res == resource and ref.get("name") == name:
                out.add(e["user"]["username"])
        return out

    def test_join_run_and_delete_a_pod_then_vm_stops(self):
        self.secret("abc123", "0123456789abcdef")
        self.boot_vm(301, "worker-a", USER_DATA.format(token="abc123.0123456789abcdef", vmid=301))
        wait_for(lambda: self.ready("worker-a") == "True", 90, 0.2, "node Ready")
        n = self.node("worker-a")
        self.assertEqual(n["spec"]["providerID"], "proxmox://r1/301")
        labels = n["metadata"]["labels"]
        self.assertEqual((labels["pvescale.io/pool"], labels["node.kubernetes.io/instance-type"]),
                         ("general", "c1.4x8"))
        self.assertEqual(labels["topology.kubernetes.io/zone"], "pve1")
        self.assertIn({"key": "dedicated", "value": "x", "effect": "NoSchedule"}, n["spec"]["taints"])
        self.assertEqual((n["status"]["capacity"]["cpu"], n["status"]["capacity"]["pods"]), ("4", "20"))
        self.assertEqual(n["status"]["allocatable"]["cpu"], "3900m")
        # The TLS bootstrap: one CSR of the bootstrap token's user, approved and signed by kube-controller-manager.
        csrs = self.sim.kube("GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests").json["items"]
        mine = [c for c in csrs if c["spec"]["username"] == "system:bootstrap:abc123"]
        self.assertEqual(len(mine), 1, csrs)
        self.assertEqual(mine[0]["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet")
        self.assertIn("Approved", [c["type"] for c in mine[0]["status"]["conditions"]])
        self.assertTrue(mine[0]["status"].get("certificate"))
        lease = self.sim.kube("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/worker-a")
        self.assertEqual((lease.status, lease.json["spec"]["holderIdentity"]), (200, "worker-a"))
        self.assertEqual(self.audit_users("create", "nodes", "worker-a"), {"system:node:worker-a"})

        # The real scheduler binds the pod; the kubelet runs it, as its node.
        p = pod("web", tolerations=TOLERATE)
        # this class's other tests leave Nodes of their own (worker-p): the pod is for this one
        p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "worker-a"}
        p["metadata"]["annotations"] = {"sim.pvescale.io/exit-on-term": "true"}
        self.assertEqual(self.sim.kube("POST", "/api/v1/namespaces/default/pods", p).status, 201)

        def running():
            got = self.sim.kube("GET", "/api/v1/namespaces/default/pods/web").json
            return (got.get("status") or {}).get("phase") == "Running" and got
        got = wait_for(running, 60, 0.2, "pod Running")
        self.assertEqual(got["spec"]["nodeName"], "worker-a")
        self.assertTrue(got["status"]["containerStatuses"][0]["ready"])
        self.assertEqual(self.audit_users("patch", "pods/status", "web"), {"system:node:worker-a"})
        rep = self.sim.admin("GET", "/report").json
        rec = [r for r in rep["pods"] if r["name"] == "web"][0]
        self.assertTrue(rec["pending"] is not None and rec["running"] >= rec["pending"], rec)
        self.assertEqual(rec["node"], "worker-a")

        # Deleted with a 30 s grace period: the container exits on SIGTERM, the kubelet deletes it at once.
        began = time.monotonic()
        self.assertEqual(self.sim.kube("DELETE", "/api/v1/namespaces/default/pods/web").status, 200)
        wait_for(lambda: self.sim.kube("GET", "/api/v1/namespaces/default/pods/web").status == 404, 20, 0.2,
                 "pod gone")
        self.assertLess(time.monotonic() - began, 20)
        wait_for(lambda: "system:node:worker-a" in self.audit_users("delete", "pods", "web"), 10, 0.2,
                 "the kubelet's delete in the audit log")

        # kube-apiserver restarts (etcd keeps the data); the kubelet rides it out and runs the next pod, created
        # through the admin endpoint.
        r = self.sim.admin("POST", "/actions/kube-restart", {})
        self.assertEqual(r.status, 200, r)
        r = self.sim.admin("POST", "/actions/pods", {"pods": [pod("web2", tolerations=TOLERATE)]})
        self.assertEqual((r.status, r.json), (201, {"created": ["web2"]}))
        wait_for(lambda: (self.sim.kube("GET", "/api/v1/namespaces/default/pods/web2").json.get("status") or {})
                 .get("phase") == "Running", 60, 0.2, "web2 Running after the restart")
        self.assertEqual(self.ready("worker-a"), "True")

        # The VM stops: no more Lease renewals; kube-controller-manager marks the Node Unknown (grace 16 s).
        st = self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/301/status/stop").data)
        self.assertEqual(st["exitstatus"], "OK")
        wait_for(lambda: self.ready("worker-a") == "Unknown", 60, 0.5, "node Unknown")
        # the node lifecycle controller taints it at its next pass (--node-monitor-period 1 s)
        wait_for(lambda: "node.kubernetes.io/unreachable" in [t["key"] for t in self.node("worker-a")["spec"]["taints"]],
                 10, 0.2, "the unreachable taint")

    def test_kubelet_knobs(self):
        """kubelet_not_ready: registered, Lease renewed, Ready=False (runtime down); once off the list, Ready.
        kubelet_stopped: no more heartbeats, so kube-controller-manager marks the Node Unknown. never_join: no Node."""
        self.secret("kno123", "0123456789abcdef")
        self.sim.knobs(kubelet_not_ready=["worker-k"], never_join=[305])
        self.boot_vm(304, "worker-k", USER_DATA.format(token="kno123.0123456789abcdef", vmid=304), node="pve2",
                     cores=2, memory=4096)
        self.boot_vm(305, "worker-n", USER_DATA.format(token="kno123.0123456789abcdef", vmid=305), node="pve2",
                     cores=2, memory=4096)
        def runtime_down():  # registered NotReady (no network yet), then the runtime's message
            n = self.node("worker-k")
            ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"] if n else []
            return ready and ready[0]["status"] == "False" and "container runtime is down" in ready[0]["message"]
        wait_for(runtime_down, 60, 0.2, "node NotReady, its runtime down")
        wait_for(lambda: self.sim.kube("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
                                               "worker-k").status == 200, 30, 0.2, "the Lease")
        self.sim.knobs(kubelet_not_ready=[])
        wait_for(lambda: self.ready("worker-k") == "True", 30, 0.2, "Ready once the runtime is back")
        self.sim.knobs(kubelet_stopped=["worker-k"])
        wait_for(lambda: self.ready("worker-k") == "Unknown", 60, 0.5, "node Unknown with its kubelet stopped")
        self.assertEqual(self.kubelet_state(305).get("reason"), "fault injection: never_join")
        self.assertIsNone(self.node("worker-n"))
        self.sim.knobs(kubelet_stopped=[])
        wait_for(lambda: self.ready("worker-k") == "True", 30, 0.2, "Ready again once the kubelet posts")

    def test_boot_seconds_and_a_paused_vm(self):
        """boot_seconds: the guest boots before cloud-init's join, so the Node registers no sooner than that after
        the VM started. A VM paused with status/suspend freezes its kubelet; resumed, it posts again."""
        self.secret("pau789", "0123456789abcdef")
        self.sim.knobs(boot_seconds=3)
        try:
            self.boot_vm(306, "worker-p", USER_DATA.format(token="pau789.0123456789abcdef", vmid=306), node="pve2",
                         cores=2, memory=2048)
            wait_for(lambda: self.ready("worker-p") == "True", 60, 0.2, "worker-p Ready")
        finally:
            self.sim.knobs(boot_seconds=0)
        rep = self.sim.admin("GET", "/report").json
        started = [v["started"][0] for v in rep["vms"] if v["vmid"] == 306][0]
        registered = [e["t"] for e in rep["nodes"] if e["node"] == "worker-p" and e["event"] == "registered"][0]
        self.assertGreaterEqual(registered - started, 3.0)
        path = "/nodes/pve2/qemu/306/status/"
        self.assertEqual(self.sim.wait_task(self.sim.pve("POST", path + "suspend").data)["exitstatus"], "OK")
        wait_for(lambda: self.kubelet_state(306).get("reason") == "VM paused", 30, 0.2, "the kubelet frozen")
        self.assertEqual(self.sim.pve("GET", path + "current").data["qmpstatus"], "paused")
        self.assertEqual(self.sim.wait_task(self.sim.pve("POST", path + "resume").data)["exitstatus"], "OK")
        wait_for(lambda: self.kubelet_state(306).get("reason") == "registered", 30, 0.2, "the kubelet back")
        self.assertEqual(self.ready("worker-p"), "True")

    def test_wrong_token_secret_fails_the_discovery(self):
        self.secret("bad456", "0123456789abcdef")
        self.boot_vm(302, "worker-b", USER_DATA.format(token="bad456.ffffffffffffffff", vmid=302), node="pve2")
        wait_for(lambda: "JWS" in (self.kubelet_state(302).get("reason") or ""), 60, 0.2, "the JWS refused")
        self.assertIsNone(self.node("worker-b"))

    def test_file_discovery_with_a_foreign_ca_fails_tls(self):
        self.secret("ccc789", "0123456789abcdef")
        key, crt = os.path.join(self.tmp, "foreign.key"), os.path.join(self.tmp, "foreign.crt")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=foreign-ca"],
                       check=True, capture_output=True)
        with open(crt) as f:
            foreign = f.read()
        ud = FILE_DISCOVERY.format(ca=b64(foreign), server=self.sim.ep["kube"]["url"], token="ccc789.0123456789abcdef")
        self.boot_vm(303, "worker-c", ud, node="pve2", cores=2, memory=2048)
        wait_for(lambda: "CERTIFICATE_VERIFY_FAILED" in (self.kubelet_state(303).get("reason") or ""), 60, 0.2,
                 "join refused")
        self.assertIsNone(self.node("worker-c"))

    def test_disconnect_watches_cuts_the_connections_through_the_proxy(self):
        """endpoints.json's kubeconfig reaches kube-apiserver through the fault proxy (TLS verified end to end):
        /actions/disconnect-watches ends a watch made through it mid-stream; the knob watch_disconnect_seconds closes
        connections older than that."""
        from simlib import kubeclient
        kube = self.sim.ep["kube"]
        with open(kube["kubeconfig"]) as f:
            self.assertIn("server: " + kube["proxy_url"], f.read())
        proxied = kubeclient.Client(kube["proxy_url"], kube["ca"], kube["client_cert"], kube["client_key"])

        def watch_ends(after):
            ended = []

            def run():
                for _ in proxied.watch("/api/v1/namespaces/kube-system/configmaps?watch=1&timeoutSeconds=60"):
                    pass
                ended.append(time.monotonic())
            t = __import__("threading").Thread(target=run, daemon=True)
            began = time.monotonic()
            t.start()
            time.sleep(1)
            after()
            t.join(10)
            self.assertTrue(ended, "the watch did not end")
            return ended[0] - began
        r = None

        def cut():
            nonlocal r
            r = self.sim.admin("POST", "/actions/disconnect-watches", {})
        self.assertLess(watch_ends(cut), 5)
        self.assertEqual(r.status, 200, r)
        self.assertGreaterEqual(r.json["dropped"], 1, r.json)
        self.assertEqual(self.sim.admin("POST", "/knobs", {"watch_disconnect_seconds": 2}).status, 200)
        try:
            self.assertLess(watch_ends(lambda: None), 6)
        finally:
            self.assertEqual(self.sim.admin("POST", "/knobs", {"watch_disconnect_seconds": 0}).status, 200)

    def test_bad_knobs_and_pods_say_so(self):
        # a kube-controller-manager flag cannot change at run time; an unknown knob (one the removed imitation had)
        # is refused; either way nothing changes
        r = self.sim.admin("POST", "/knobs", {"node_monitor_seconds": 2, "pod_start_seconds": 0.3})
        self.assertEqual(r.status, 400, r)
        self.assertIn("node_monitor_seconds", r.json["error"])
        knobs = self.sim.admin("GET", "/knobs").json
        self.assertEqual(knobs["node_monitor_seconds"], 0.0)
        self.assertNotEqual(knobs["pod_start_seconds"], 0.3)
        r = self.sim.admin("POST", "/knobs", {"kube_error_rate": 0.5})
        self.assertEqual(r.status, 400, r)
        self.assertIn("unknown knob(s): kube_error_rate", r.json["error"])
        r = self.sim.admin("POST", "/actions/pods", {"pods": [pod("burst-0"), {"metadata": {"name": "bad"}}]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("pods[1]", r.json["error"])
        self.assertEqual(self.sim.kube("GET", "/api/v1/namespaces/default/pods/burst-0").status, 404)


if __name__ == "__main__":
    unittest.main()
