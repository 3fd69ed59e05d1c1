#!/usr/bin/env python3
# pvescale-coordinator start-up errors: a bad config file, flag, environment value or kubeconfig exits with code
# 2 and one line on stderr that names the key; --help and --version exit 0; SIGTERM stops a running
# coordinator (on a real control plane, ../shared/k8s) with code 0.
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402

GOOD = """clusters:
  - url: https://127.0.0.1:8006/api2/json
    token_id: "kubernetes@pve!karpenter"
    token_secret: "secret"
    region: r1
"""


class ConfigTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-coord-cfg-")
        self.kubeconfig = self.write("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                                     "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                                     "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                                     "users: [{name: u, user: {token: t}}]\n")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_coordinator(self, args, env=None, config=GOOD):
        path = self.write("config.yaml", config)
        full_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "LAUNCH", "WORKERS")}
        full_env.update(env or {})
        return subprocess.run([cl.COORDINATOR, "--config", path, "--kubeconfig", self.kubeconfig] + list(args),
                              capture_output=True, text=True, env=full_env, timeout=30)

    def assert_exit2(self, p, *needles):
        lines = p.stderr.strip().splitlines()
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertEqual(p.stdout, "")
        for n in needles:
            self.assertIn(n, lines[0])

    def test_config_file_errors_name_the_key(self):
        cases = [
            (GOOD.replace('    token_id: "kubernetes@pve!karpenter"\n', ""), "clusters[0].token_id", "required"),
            (GOOD.replace("region: r1", "region: r1\n    colour: blue"), "clusters[0].colour", "unknown key"),
            (GOOD + "agents:\n  port: 99999\n  token_file: /x\n", "agents.port", None),
            (GOOD + "agents:\n  port: 8207\n", "agents.token_file", "required"),
            (GOOD.replace("https://127.0.0.1:8006/api2/json", "ftp://x"), "clusters[0].url", None),
            ("clusters: [", "config.yaml", None),
            ("clusters: []\n", "clusters", None),
        ]
        for text, key, why in cases:
            with self.subTest(key=key):
                p = self.run_coordinator(["--launch=false"], config=text)
                self.assert_exit2(p, key, *([why] if why else []))

    def test_flag_and_environment_errors(self):
        self.assert_exit2(self.run_coordinator(["--batch-idle-duration=soon"]), "--batch-idle-duration")
        self.assert_exit2(self.run_coordinator(["--launch=false", "--workers", "0"]), "--workers")
        self.assert_exit2(self.run_coordinator(["--launch=maybe"]), "--launch")
        self.assert_exit2(self.run_coordinator(["--frobnicate"]), "--frobnicate", "unknown flag")
        self.assert_exit2(self.run_coordinator([], env={"LAUNCH": "perhaps"}), "LAUNCH")
        self.assert_exit2(self.run_coordinator(["--launch=false"], env={"BATCH_MAX_DURATION": "-1s"}),
                          "BATCH_MAX_DURATION")
        self.assert_exit2(self.run_coordinator(["--launch=false", "--batch-idle-duration=20s"]),
                          "--batch-idle-duration", "--batch-max-duration")
        p = subprocess.run([cl.COORDINATOR, "--config", self.write("config.yaml", GOOD), "--kubeconfig",
                            os.path.join(self.tmp, "missing")], capture_output=True, text=True, timeout=30)
        self.assert_exit2(p, "missing")

    def test_help_and_version(self):
        p = subprocess.run([cl.COORDINATOR, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0)
        for flag in ("--batch-idle-duration", "--launch", "--leader-elect", "--workers", "--kubeconfig"):
            self.assertIn(flag, p.stdout)
        p = subprocess.run([cl.COORDINATOR, "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0)
        self.assertTrue(p.stdout.startswith("pvescale-coordinator "), p.stdout)

    def test_sigterm_exits_0(self):
        c = cl.Cluster("pve1=32intel64-2p8co2t+8ve", agents=False, kube="real")  # a control plane of its own
        try:
            co = cl.Coordinator(c, ["--launch=false"])
            self.assertEqual(co.get(co.health_port, "/healthz")[0], 200)
            self.assertEqual(co.get(co.health_port, "/nope")[0], 404)
            self.assertEqual(co.stop(), 0)
            self.assertIn("stopped", co.logtext())
        finally:
            c.stop()


if __name__ == "__main__":
    unittest.main()
