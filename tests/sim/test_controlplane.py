#!/usr/bin/env python3
# The real control plane harness (simlib/controlplane.py): starts, answers as kubeadm's cluster does (bootstrap
# token -> signed cluster-info, anonymous read of it, admin by client certificate), restarts kube-apiserver alone
# keeping its data, and leaves no process behind; a missing ../shared/k8s is an error naming the path.
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simlib import controlplane, kubeclient, kubelet  # noqa: E402
import simtest  # noqa: E402
from simtest import wait_for  # noqa: E402


def bootstrap_token_secret(tid, secret):
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-" + tid, "namespace": "kube-system"},
            "stringData": {"token-id": tid, "token-secret": secret, "usage-bootstrap-authentication": "true",
                           "usage-bootstrap-signing": "true",
                           "auth-extra-groups": controlplane.BOOTSTRAP_GROUP}}


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class ControlPlaneTest(unittest.TestCase):
    def test_missing_binaries_name_the_path(self):
        with tempfile.TemporaryDirectory() as d:
            cp = controlplane.ControlPlane(os.path.join(d, "cp"), k8s_dir=os.path.join(d, "no-such-k8s"))
            with self.assertRaises(controlplane.ControlPlaneError) as e:
                cp.start()
            self.assertIn(os.path.join(d, "no-such-k8s", "SHA256SUMS"), str(e.exception))
            self.assertEqual(cp.pids(), [])

    def test_simulator_without_k8s_exits_2_naming_the_path(self):
        shared = os.path.dirname(controlplane.shared_k8s_dir())
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "shared")
            os.makedirs(fake)
            for sub in ("topologies", "data"):  # everything but k8s/
                os.symlink(os.path.join(shared, sub), os.path.join(fake, sub))
            env = dict(os.environ, PVESCALE_SHARED=fake)
            r = subprocess.run([sys.executable, simtest.RUN, "--state-dir", os.path.join(d, "state"), "--kube", "real",
                                "--hosts", "pve1=eas-tioga"], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(os.path.join(fake, "k8s", "SHA256SUMS"), r.stderr)

    def test_start_join_objects_restart_stop(self):
        d = tempfile.mkdtemp(prefix="pvescale-cp-test-")
        cp = controlplane.ControlPlane(os.path.join(d, "cp"))
        try:
            t0 = time.monotonic()
            cp.start()
            sys.stderr.write("control plane start-up: %.2f s %s\n" % (time.monotonic() - t0, cp.times))
            pids = cp.pids()
            self.assertEqual(len(pids), 4)
            admin = cp.admin()
            self.assertEqual(admin.raw("GET", "/readyz")[0], 200)
            self.assertIn("kube-system", [n["metadata"]["name"] for n in admin.get("/api/v1/namespaces")["items"]])
            # the admin kubeconfig's client certificate is of group system:masters
            subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in", cp.info()["client_cert"]],
                                     capture_output=True, text=True, check=True).stdout
            self.assertIn("O = system:masters", subject)
            with open(cp.admin_kubeconfig) as f:
                self.assertIn("client-certificate-data", f.read())
            # A bootstrap token: the bootstrap signer signs cluster-info for it; anyone may read it.
            tid, secret = "abcdef", "0123456789abcdef"
            admin.call("POST", "/api/v1/namespaces/kube-system/secrets", bootstrap_token_secret(tid, secret))
            anon = kubeclient.Client(cp.url, cp.ca)

            def signed():
                st, cm, _ = anon.raw("GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
                return st == 200 and "jws-kubeconfig-" + tid in cm["data"] and cm["data"]
            data = wait_for(signed, 60, 0.2, "cluster-info signed for the token")
            self.assertTrue(kubelet.jws_valid(data["jws-kubeconfig-" + tid], data["kubeconfig"], tid, secret))
            self.assertFalse(kubelet.jws_valid(data["jws-kubeconfig-" + tid], data["kubeconfig"], tid,
                                               "fedcba9876543210"))
            self.assertIn(cp.url, data["kubeconfig"])
            # The token authenticates as a bootstrapper: it may ask for node client certificates, not list pods.
            boot = kubeclient.Client(cp.url, cp.ca, token=tid + "." + secret)
            self.assertEqual(boot.raw("GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests")[0], 200)
            self.assertEqual(boot.raw("GET", "/api/v1/pods")[0], 403)
            self.assertTrue(any(x["path"] == "/api/v1/pods" for x in controlplane.denials(cp.audit_log)))
            # The simulator attaches to it (as a test module sharing one would), and leaves it running at its stop.
            sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", kube="real", args=["--kube-attach", cp.dir])
            try:
                self.assertEqual(sim.ep["kube"]["url"], cp.url)
                self.assertEqual(sim.kube("GET", "/api/v1/namespaces/default/serviceaccounts/default").status, 200)
                self.assertEqual(sim.pve("GET", "/nodes").status, 200)  # its PVE certificate: signed by the same CA
                r = sim.admin("POST", "/actions/kube-restart", {})
                self.assertEqual(r.status, 400, r)
                self.assertIn("attached", r.json["error"])
            finally:
                sim.stop()
            self.assertEqual(admin.raw("GET", "/readyz")[0], 200)
            # kube-apiserver alone restarts; etcd keeps the data.
            ready_after = cp.restart_apiserver()
            sys.stderr.write("kube-apiserver restart: ready after %.2f s\n" % ready_after)
            self.assertNotIn(pids[1], cp.pids())
            self.assertEqual(admin.raw("GET", "/api/v1/namespaces/kube-system/secrets/bootstrap-token-" + tid)[0],
                             200)
            pids = cp.pids()
        finally:
            cp.stop()
            shutil.rmtree(d, ignore_errors=True)
        self.assertEqual([p for p in pids if alive(p)], [], "processes left after stop()")


if __name__ == "__main__":
    unittest.main()
