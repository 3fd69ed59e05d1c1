#!/usr/bin/env python3
# Tests of the simulated kubelets: join with a bootstrap token from the cloud-init ISO, labels, taints, capacity; a
# kubelet that posts NotReady, and one that stops posting (its Node marked Unknown by the node lifecycle controller).
# SPDX-License-Identifier: Apache-2.0
import base64
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import pod  # noqa: E402

USER_DATA = """#cloud-config
write_files:
  - path: /etc/default/kubelet
    content: |
      KUBELET_EXTRA_ARGS="--node-labels=pvescale.io/pool=general,node.kubernetes.io/instance-type=c1.4x8 --register-with-taints=pvescale.io/unregistered=true:NoExecute,dedicated:NoSchedule --kube-reserved=cpu=100m,memory=256Mi"
runcmd:
  - kubeadm join 127.0.0.1:6443 --token {token} --discovery-token-unsafe-skip-ca-verification
"""


def b64(s):
    return base64.b64encode(s.encode()).decode()


class KubeletTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga")
        cls.tmp = tempfile.mkdtemp(prefix="sim-kubelet-")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def secret(self, tid, tsecret, expires_in=3600, usage="true"):
        exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + expires_in))
        s = {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
             "metadata": {"name": "bootstrap-token-" + tid, "namespace": "kube-system"},
             "data": {"token-id": b64(tid), "token-secret": b64(tsecret), "expiration": b64(exp),
                      "usage-bootstrap-authentication": b64(usage), "usage-bootstrap-signing": b64("true")}}
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

    def test_join_with_valid_token(self):
        self.secret("abc123", "0123456789abcdef")
        self.boot_vm(301, "k8s-worker-a", USER_DATA.format(token="abc123.0123456789abcdef"))
        simtest.wait_for(lambda: self.ready("k8s-worker-a") == "True", what="node Ready")
        n = self.node("k8s-worker-a")
        self.assertEqual(n["spec"]["providerID"], "proxmox://r1/301")
        labels = n["metadata"]["labels"]
        self.assertEqual(labels["pvescale.io/pool"], "general")
        self.assertEqual(labels["node.kubernetes.io/instance-type"], "c1.4x8")
        self.assertEqual(labels["kubernetes.io/hostname"], "k8s-worker-a")
        taints = {(t["key"], t.get("value"), t["effect"]) for t in n["spec"].get("taints", [])}
        self.assertIn(("pvescale.io/unregistered", "true", "NoExecute"), taints)
        self.assertIn(("dedicated", None, "NoSchedule"), taints)
        self.assertEqual(n["status"]["capacity"]["cpu"], "4")
        self.assertEqual(n["status"]["capacity"]["memory"], "%dKi" % (8192 * 1024))
        self.assertEqual(n["status"]["allocatable"]["cpu"], "3900m")
        self.assertEqual(n["status"]["allocatable"]["memory"], "%dKi" % ((8192 - 256 - 100) * 1024))
        # a pod that tolerates the taints runs there
        tol = [{"operator": "Exists"}]
        self.sim.kube("POST", "/api/v1/namespaces/default/pods", pod("on-worker", cpu="1", tolerations=tol))
        simtest.wait_for(lambda: self.sim.kube("GET", "/api/v1/namespaces/default/pods/on-worker").json["status"]
                         .get("phase") == "Running", what="pod running on the joined node")
        # the VM goes away: the Node becomes NotReady (Unknown) and gets the unreachable taint
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/301/status/stop").data)
        self.sim.wait_task(self.sim.pve("DELETE", "/nodes/pve1/qemu/301", {"purge": 1}).data)
        simtest.wait_for(lambda: self.ready("k8s-worker-a") == "Unknown", what="node NotReady")
        taints = {t["key"] for t in self.node("k8s-worker-a")["spec"]["taints"]}
        self.assertIn("node.kubernetes.io/unreachable", taints)

    def test_no_registration_without_valid_token(self):
        self.secret("exp123", "aaaaaaaaaaaaaaaa", expires_in=-60)
        self.secret("nou123", "bbbbbbbbbbbbbbbb", usage="false")
        cases = [(302, "no-token", "#cloud-config\nruncmd: [true]\n", "no bootstrap token"),
                 (303, "unknown-token", USER_DATA.format(token="zzz999.0123456789abcdef"), "not found"),
                 (304, "wrong-secret", USER_DATA.format(token="abc123.ffffffffffffffff"), "does not match"),
                 (305, "expired-token", USER_DATA.format(token="exp123.aaaaaaaaaaaaaaaa"), "expired"),
                 (306, "no-auth-usage", USER_DATA.format(token="nou123.bbbbbbbbbbbbbbbb"), "usage-bootstrap-authentication")]
        if not self.sim.kube("GET", "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abc123").status == 200:
            self.secret("abc123", "0123456789abcdef")
        for vmid, name, ud, _ in cases:
            self.boot_vm(vmid, name, ud, node="pve2", cores=2, memory=2048)

        def reasons():
            st = self.sim.admin("GET", "/state").json["kubelets"]
            got = {v["vm_name"]: v["reason"] for v in st.values()}
            return got if all(name in got and "waiting" not in got[name] for _, name, _, _ in cases) else None
        got = simtest.wait_for(reasons, what="kubelet verdicts")
        time.sleep(0.5)
        for vmid, name, _, text in cases:
            with self.subTest(name=name):
                self.assertIn(text, got[name])
                self.assertIsNone(self.node(name))

    def test_discovery_must_name_this_cluster(self):
        """A kubeconfig in the user-data (kubeadm's discovery file) that names another API server, or a CA that is
        not the cluster's, keeps the node from joining, as kubeadm would fail; the right ones join."""
        self.secret("dsc123", "dddddddddddddddd")
        url = self.sim.ep["kube"]["url"]
        with open(self.sim.ep["ca_file"]) as f:
            ca = b64(f.read())
        disc = ("#cloud-config\nwrite_files:\n  - path: /etc/pvescale/discovery.conf\n    content: |\n"
                "      clusters: [{{name: k, cluster: {{server: {server}, certificate-authority-data: {ca}}}}}]\n"
                "runcmd:\n  - [kubeadm, join, --discovery-file, /etc/pvescale/discovery.conf, --tls-bootstrap-token,"
                " dsc123.dddddddddddddddd]\n")
        cases = [(311, "wrong-server", disc.format(server="https://10.0.0.1:6443", ca=ca), "cannot reach the API server"),
                 (312, "wrong-ca", disc.format(server=url, ca=b64("-----BEGIN CERTIFICATE-----\nnope\n")),
                  "certificate signed by unknown authority")]
        for vmid, name, ud, _ in cases:
            self.boot_vm(vmid, name, ud, node="pve2", cores=1, memory=1024)
        self.boot_vm(313, "right-discovery", disc.format(server=url, ca=ca), node="pve2", cores=1, memory=1024)
        simtest.wait_for(lambda: self.ready("right-discovery") == "True", what="the node with the right discovery")

        def reasons():
            st = self.sim.admin("GET", "/state").json["kubelets"]
            got = {v["vm_name"]: v["reason"] for v in st.values()}
            return got if all(name in got and "waiting" not in got[name] for _, name, _, _ in cases) else None
        got = simtest.wait_for(reasons, what="kubelet verdicts")
        for _, name, _, text in cases:
            with self.subTest(name=name):
                self.assertIn(text, got[name])
                self.assertIsNone(self.node(name))

    def test_never_join_fault(self):
        self.secret("nvr123", "cccccccccccccccc")
        self.sim.knobs(never_join=["sulky"])
        self.boot_vm(307, "sulky", USER_DATA.format(token="nvr123.cccccccccccccccc"), cores=1, memory=1024)
        time.sleep(1.0)
        self.assertIsNone(self.node("sulky"))
        self.sim.knobs(never_join=[])
        simtest.wait_for(lambda: self.ready("sulky") == "True", what="sulky joins after the fault is lifted")

    def condition(self, name, ctype="Ready"):
        return next((c for c in self.node(name)["status"]["conditions"] if c["type"] == ctype), None)

    def renewed(self, name):
        r = self.sim.kube("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + name)
        return r.json["spec"]["renewTime"] if r.status == 200 else None

    def test_kubelet_not_ready_and_stopped_faults(self):
        self.secret("flk123", "dddddddddddddddd")
        self.sim.knobs(lease_interval_seconds=0.2, node_monitor_grace_seconds=1.5)
        self.addCleanup(self.sim.knobs, lease_interval_seconds=10.0, node_monitor_grace_seconds=50.0,
                        kubelet_not_ready=[], kubelet_stopped=[])
        self.boot_vm(308, "flaky", USER_DATA.format(token="flk123.dddddddddddddddd"), cores=2, memory=2048)
        simtest.wait_for(lambda: self.ready("flaky") == "True", what="flaky Ready")
        p = pod("on-flaky", nodeName="flaky", terminationGracePeriodSeconds=30)
        p["metadata"]["annotations"] = {"sim.pvescale.io/exit-on-term": "true"}
        self.assertEqual(self.sim.kube("POST", "/api/v1/namespaces/default/pods", p).status, 201)
        path = "/api/v1/namespaces/default/pods/on-flaky"
        simtest.wait_for(lambda: self.sim.kube("GET", path).json["status"].get("phase") == "Running",
                         what="the pod Running")

        # NotReady: the kubelet posts Ready=False and keeps renewing its Lease; the node gets the not-ready taint.
        self.sim.knobs(kubelet_not_ready=["flaky"])
        simtest.wait_for(lambda: self.ready("flaky") == "False", what="flaky NotReady")
        c = self.condition("flaky")
        self.assertEqual((c["reason"], c["message"]), ("KubeletNotReady", "container runtime is down"))
        simtest.wait_for(lambda: "node.kubernetes.io/not-ready" in {t["key"] for t in
                                                                   self.node("flaky")["spec"].get("taints", [])},
                         what="the not-ready taint")
        lease = self.renewed("flaky")
        simtest.wait_for(lambda: self.renewed("flaky") != lease, what="the Lease renewed while NotReady")
        time.sleep(2.0)  # longer than the grace period: a kubelet that posts is never marked Unknown
        self.assertEqual(self.ready("flaky"), "False")
        self.sim.knobs(kubelet_not_ready=[])
        simtest.wait_for(lambda: self.ready("flaky") == "True", what="flaky Ready again")

        # Stopped: no status, no Lease; the node lifecycle controller marks the Node Unknown after the grace period.
        self.sim.knobs(kubelet_stopped=["flaky"])
        stopped = time.monotonic()
        simtest.wait_for(lambda: self.ready("flaky") == "Unknown", timeout=10, what="flaky Unknown")
        self.assertGreaterEqual(time.monotonic() - stopped, 1.0, "marked Unknown before the grace period")
        for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
            c = self.condition("flaky", t)
            self.assertEqual((c["status"], c["reason"], c["message"]),
                             ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."), t)
        lease = self.renewed("flaky")
        simtest.wait_for(lambda: {t["key"] for t in self.node("flaky")["spec"].get("taints", [])} >=
                         {"node.kubernetes.io/unreachable"}, what="the unreachable taints")
        simtest.wait_for(lambda: not any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in self.sim.kube("GET", path).json["status"]["conditions"]),
                         what="the pod marked not Ready")
        # nobody stops a pod being deleted there
        self.assertEqual(self.sim.kube("DELETE", path).status, 200)
        time.sleep(1.0)
        self.assertEqual(self.sim.kube("GET", path).json["status"]["phase"], "Running")
        self.assertEqual(self.renewed("flaky"), lease, "a stopped kubelet renews no Lease")
        # The kubelet comes back: Ready again, and it stops the pod.
        self.sim.knobs(kubelet_stopped=[])
        simtest.wait_for(lambda: self.ready("flaky") == "True", what="flaky Ready after the kubelet is back")
        simtest.wait_for(lambda: self.sim.kube("GET", path).status == 404, what="the deleted pod gone")


if __name__ == "__main__":
    unittest.main()
