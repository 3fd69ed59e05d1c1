"""Integration test: the coordinator's C clients (Kubernetes, Proxmox VE, host agents) against a real kube-apiserver,
the simulator and a real pvescale-agent. Each C test program (cmocka) runs against a fresh simulator (without
Kubernetes but for the Kubernetes client's, whose control plane has no watch cache for ConfigMaps, so that its
informer's resumed watch gets a real 410 once etcd is compacted); this file starts the peers."""
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "sim"))
import agentlib  # noqa: E402
import coordlib  # noqa: E402
import http_stub  # noqa: E402
import simtest  # noqa: E402

HOSTS = "pve1=32intel64-2p8co2t+8ve"


def program(name):
    return os.path.join(agentlib.BUILD, "tests", "integration", name)


class CoordinatorClients(unittest.TestCase):
    def setUp(self):
        self.cp = None
        if self._testMethodName == "test_kube_client":
            self.cp = coordlib.ControlPlane(apiserver_flags={"watch-cache-sizes": "configmaps#0"})
            self.sim = simtest.Sim(hosts=HOSTS, args=["--kube-attach", self.cp.dir])
        else:
            self.sim = simtest.Sim(hosts=HOSTS, kube="none")
        self.env = dict(os.environ, PVESCALE_TEST_ENDPOINTS=os.path.join(self.sim.state, "endpoints.json"))
        self.agent = None
        self.tmp = tempfile.mkdtemp(prefix="pvescale-clients-")

    def tearDown(self):
        if self.agent:
            self.agent.stop()
        code = self.sim.stop()
        if self.cp:
            self.cp.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.assertEqual(code, 0)

    def run_program(self, name):
        p = subprocess.run([program(name)], env=self.env, capture_output=True, text=True, timeout=240)
        out = p.stdout + p.stderr
        if p.returncode != 0:
            out += "\n--- simulator log (tail) ---\n" + self.sim.logtext()[-4000:]
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("PASSED", out)
        self.assertNotIn("FAILED", out)
        return out

    def test_http_client(self):
        stub = http_stub.Server().start()
        try:
            self.env["PVESCALE_TEST_STUB_URL"] = stub.url
            self.run_program("test_http_client")
        finally:
            stub.stop()

    def test_kube_client(self):
        self.run_program("test_kube_client")

    def test_pve_client(self):
        self.run_program("test_pve_client")
        # Every call the client made passed the simulator's schema checks: no 400 besides the deliberate ones.
        calls = self.sim.admin("GET", "/calls").json["pve"]
        self.assertGreater(calls.get("POST /nodes/{node}/qemu/{vmid}/clone", 0), 5)
        self.assertGreater(calls.get("POST /nodes/{node}/storage/{storage}/upload", 0), 0)

    def test_agents_client(self):
        host = self.sim.ep["hosts"]["pve1"]
        ca, cert, key = agentlib.make_tls(self.tmp)
        token_file, token = agentlib.write_token(self.tmp)
        state = os.path.join(self.tmp, "state")
        os.makedirs(state)
        self.agent = agentlib.Agent([
            "--config", os.devnull, "--fsroot", host["fsroot"], "--tls-cert", cert, "--tls-key", key,
            "--token-file", token_file, "--pve-config-dir", host["pve_config_dir"], "--pve-run-dir",
            host["pve_run_dir"], "--state-dir", state, "--node-name", "pve1", "--region", "r1",
            "--node-policy", "static"])
        self.env.update(PVESCALE_TEST_AGENT_URL="https://127.0.0.1:%d" % self.agent.port,
                        PVESCALE_TEST_AGENT_TOKEN=token, PVESCALE_TEST_AGENT_CA=ca)
        self.run_program("test_agents_client")


if __name__ == "__main__":
    unittest.main()
