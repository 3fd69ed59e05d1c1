"""Integration test: a real pvescale-agent over real TLS (curl/libcurl, test CA), auth, errors, inotify, signals."""
# SPDX-License-Identifier: Apache-2.0
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402

VM_101 = "name: web\ncores: 2\nmemory: 4096\naffinity: 0-1\n"
VM_102 = "name: db\ncores: 4\nsockets: 1\nmemory: 8192\n"


class AgentApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pvescale-api-")
        cls.ca, cls.cert, cls.key = agentlib.make_tls(cls.tmp)
        cls.token_file, cls.token = agentlib.write_token(cls.tmp)
        cls.conf_dir = os.path.join(cls.tmp, "qemu-server")
        cls.run_dir = os.path.join(cls.tmp, "run")
        os.makedirs(cls.conf_dir)
        os.makedirs(cls.run_dir)
        for vmid, text in (("101", VM_101), ("102", VM_102)):
            with open(os.path.join(cls.conf_dir, vmid + ".conf"), "w") as f:
                f.write(text)
        cls.args = agentlib.topology_args("32intel64-2p8co2t+8ve") + [
            "--tls-cert", cls.cert, "--tls-key", cls.key, "--token-file", cls.token_file,
            "--pve-config-dir", cls.conf_dir, "--pve-run-dir", cls.run_dir,
            "--state-dir", cls.tmp, "--node-name", "pve1", "--region", "lab", "--node-policy", "simple",
            "--config", os.devnull]
        cls.agent = agentlib.Agent(cls.args)
        cls.base = "https://localhost:%d" % cls.agent.port

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path, token=True, **kw):
        return agentlib.curl(self.base + path, ca=self.ca, token=self.token if token else None, **kw)

    def test_tls_handshake_and_topology(self):
        status, body = self.get("/v1/topology")
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(doc["node"], "pve1")
        self.assertEqual(doc["region"], "lab")
        self.assertEqual(doc["online"], "0-31")
        self.assertEqual([n["cpus"] for n in doc["numa_nodes"]], ["0-7,16-23", "8-15,24-31"])
        self.assertEqual(len(doc["cores"]), 16)

    def test_untrusted_certificate_is_refused(self):
        status, _ = agentlib.curl(self.base + "/healthz")  # no --cacert: the system store does not trust it
        self.assertEqual(status, 0)

    def test_plain_http_to_tls_port_fails(self):
        status, _ = agentlib.curl("http://localhost:%d/healthz" % self.agent.port)
        self.assertNotEqual(status, 200)

    def test_healthz_needs_no_token(self):
        status, body = self.get("/healthz", token=False)
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["status"], "ok")

    def test_missing_and_wrong_token_get_401(self):
        for path in ("/v1/topology", "/v1/capacity", "/v1/vms", "/v1/nope"):
            status, body = self.get(path, token=False)
            self.assertEqual(status, 401, path)
            self.assertEqual(json.loads(body)["error"], "unauthorized")
        status, _ = agentlib.curl(self.base + "/v1/capacity", ca=self.ca, token=self.token + "x")
        self.assertEqual(status, 401)
        status, _ = agentlib.curl(self.base + "/v1/capacity", ca=self.ca, token=self.token[:-1])
        self.assertEqual(status, 401)

    def test_404_405_400(self):
        status, body = self.get("/v1/nope")
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(body))
        status, body = self.get("/v1/topology", method="POST", body="{}")
        self.assertEqual(status, 405)
        self.assertEqual(json.loads(body)["error"], "method not allowed")
        status, body = self.get("/v1/vms/notanumber")
        self.assertEqual(status, 400)
        self.assertIn("vmid", json.loads(body)["detail"])
        status, body = self.get("/v1/vms/999")
        self.assertEqual(status, 404)

    def test_capacity_and_vms(self):
        status, body = self.get("/v1/capacity")
        self.assertEqual(status, 200, body)
        cap = json.loads(body)
        # VM 101 pins 0-1, VM 102 floats with 4 vCPUs: 32 - 2 - 4 = 26 free.
        self.assertEqual(cap["free_cpus"], "2-31")
        self.assertEqual(cap["cpus_free"], 26)
        status, body = self.get("/v1/vms")
        self.assertEqual(status, 200)
        vmids = [vm["vmid"] for vm in json.loads(body)["vms"]]
        self.assertIn(101, vmids)
        status, body = self.get("/v1/vms/101")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["name"], "web")

    def test_metrics_count_requests_by_route(self):
        for _ in range(3):
            self.get("/v1/capacity")
        self.get("/v1/vms/101")
        status, text = self.get("/metrics", token=False)
        self.assertEqual(status, 200)
        self.assertIn("# TYPE pvescale_agent_http_requests_total counter", text)
        lines = [l for l in text.splitlines() if l.startswith("pvescale_agent_http_requests_total{")]
        cap = [l for l in lines if 'route="/v1/capacity"' in l and 'status="200"' in l]
        self.assertEqual(len(cap), 1, lines)
        self.assertGreaterEqual(float(cap[0].rsplit(" ", 1)[1]), 3)
        self.assertTrue(any('route="/v1/vms/*"' in l for l in lines), lines)  # ids never become labels
        self.assertFalse(any("101" in l for l in lines))
        self.assertIn("pvescale_agent_build_info", text)

    def test_refused_requests_are_logged_with_the_client_address(self):
        """Every 401 is logged as pveproxy logs an authentication failure (rhost=, for fail2ban), other 4xx with the
        status, each with the client's address; --log-format logfmt gives one key=value line per event, with an RFC
        3339 time; the token is never in the log."""
        agent = agentlib.Agent(self.args + ["--log-format", "logfmt"])
        base = "https://localhost:%d" % agent.port
        try:
            self.assertEqual(agentlib.curl(base + "/v1/capacity", ca=self.ca)[0], 401)
            self.assertEqual(agentlib.curl(base + "/v1/capacity", ca=self.ca, token="wrong-" + self.token)[0], 401)
            self.assertEqual(agentlib.curl(base + "/v1/nothing", ca=self.ca, token=self.token)[0], 404)
            self.assertEqual(agentlib.curl(base + "/v1/capacity", ca=self.ca, token=self.token)[0], 200)
        finally:
            agent.stop()
        lines = "".join(agent.lines).splitlines()
        for line in lines:
            self.assertRegex(line, r'^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z level=(debug|info|warning|error) '
                                   r'logger=pvescale-agent msg=')
        failures = [l for l in lines if "authentication failure; rhost=" in l]
        self.assertEqual(len(failures), 2, lines)
        for l in failures:
            self.assertIn("level=warning", l)
            self.assertRegex(l, r'rhost=(127\.0\.0\.1|::1|::ffff:127\.0\.0\.1) method=GET path=/v1/capacity')
            self.assertRegex(l, r' client=(127\.0\.0\.1|::1|::ffff:127\.0\.0\.1) ')
        refused = [l for l in lines if "refused GET /v1/nothing from " in l]
        self.assertEqual(len(refused), 1, lines)
        self.assertIn(": 404", refused[0])
        self.assertFalse(any("/v1/capacity" in l and "refused" in l for l in lines), "a 200 was logged as refused")
        self.assertFalse(any(self.token in l for l in lines), "the token was logged")

    def test_ui_page_is_a_shell_without_secrets(self):
        status, html = self.get("/ui", token=False)
        self.assertEqual(status, 200)
        self.assertIn("<html", html.lower())
        self.assertNotIn(self.token, html)
        self.assertNotIn("http://", html.replace("http://www.w3.org", ""))  # no external assets
        status, html = agentlib.curl(self.base + "/v1/topology", ca=self.ca, extra=("-H", "Accept: text/html"))
        self.assertEqual(status, 200)
        self.assertIn("<html", html.lower())
        status, _ = agentlib.curl(self.base + "/v1/topology", ca=self.ca, extra=("-H", "Accept: application/json"))
        self.assertEqual(status, 401)

    def test_inotify_sees_new_vm_without_polling(self):
        path = os.path.join(self.conf_dir, "150.conf")
        with open(path, "w") as f:
            f.write("name: fresh\ncores: 1\nmemory: 1024\n")
        try:
            deadline, seen = time.time() + 5, False
            while time.time() < deadline and not seen:
                status, body = self.get("/v1/vms")
                seen = status == 200 and 150 in [vm["vmid"] for vm in json.loads(body)["vms"]]
                time.sleep(0.1)
            self.assertTrue(seen, "new VM config not picked up")
        finally:
            os.unlink(path)

    def inventory_reads(self):
        status, text = self.get("/metrics", token=False)
        self.assertEqual(status, 200)
        line = [l for l in text.splitlines() if l.startswith("pvescale_agent_inventory_reads_total ")]
        self.assertEqual(len(line), 1, text)
        return int(float(line[0].split()[1]))

    def wait_for_vmids(self, done):
        """Poll GET /v1/vms until done(set of vmids) holds (5 s at most), and assert it does."""
        deadline = time.time() + 5
        while True:
            status, body = self.get("/v1/vms")
            self.assertEqual(status, 200, body)
            vmids = {vm["vmid"] for vm in json.loads(body)["vms"]}
            if done(vmids) or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertTrue(done(vmids), sorted(vmids))

    def test_burst_of_config_changes_is_read_once(self):
        """40 configs written 1 ms apart (a burst of clones) are all seen, in a few reads, not one per file."""
        before = self.inventory_reads()
        paths = [os.path.join(self.conf_dir, "%d.conf" % vmid) for vmid in range(300, 340)]
        try:
            for i, path in enumerate(paths):
                with open(path, "w") as f:
                    f.write("name: burst%d\ncores: 1\nmemory: 512\n" % i)
                time.sleep(0.001)
            self.wait_for_vmids(lambda vmids: set(range(300, 340)) <= vmids)
            self.assertLessEqual(self.inventory_reads() - before, 8)
        finally:
            for path in paths:
                os.unlink(path)
            self.wait_for_vmids(lambda vmids: not vmids & set(range(300, 340)))


class AgentStartupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-start-")
        self.ca, self.cert, self.key = agentlib.make_tls(self.tmp)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, extra):
        return subprocess.run([agentlib.AGENT, "serve", "--port", "0", "--config", os.devnull,
                               "--tls-cert", self.cert, "--tls-key", self.key,
                               "--pve-config-dir", self.tmp, "--pve-run-dir", self.tmp] + extra,
                              capture_output=True, text=True, timeout=30)

    def test_world_readable_token_file_is_refused(self):
        token_file, _ = agentlib.write_token(self.tmp, mode=0o644)
        p = self.start(["--token-file", token_file])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("0600", p.stderr)

    def test_bad_flag_value_exits_2_with_one_line(self):
        p = self.start(["--node-policy", "dynamic"])
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("node_policy", p.stderr)

    def test_bad_config_file_exits_2(self):
        conf = os.path.join(self.tmp, "agent.conf")
        with open(conf, "w") as f:
            f.write("port: 8207\nbogus_key: 1\n")
        p = subprocess.run([agentlib.AGENT, "topology", "--config", conf], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("bogus_key", p.stderr)

    def test_sigterm_stops_cleanly(self):
        token_file, token = agentlib.write_token(self.tmp)
        agent = agentlib.Agent(agentlib.topology_args("eas-tioga") + [
            "--config", os.devnull, "--tls-cert", self.cert, "--tls-key", self.key, "--token-file", token_file,
            "--pve-config-dir", self.tmp, "--pve-run-dir", self.tmp])
        status, _ = agentlib.curl("https://127.0.0.1:%d/v1/topology" % agent.port, ca=self.ca, token=token)
        self.assertEqual(status, 200)
        agent.proc.send_signal(signal.SIGHUP)  # re-reads topology and keeps serving
        time.sleep(0.3)
        status, _ = agentlib.curl("https://127.0.0.1:%d/v1/topology" % agent.port, ca=self.ca, token=token)
        self.assertEqual(status, 200)
        self.assertEqual(agent.stop(signal.SIGTERM), 0, "".join(agent.lines))


if __name__ == "__main__":
    unittest.main(verbosity=2)
