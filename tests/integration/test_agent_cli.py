"""Integration test: the agent's one-shot commands as a user runs them: `place` (dry-run allocator over stdin),
`capacity` with a node-setting file, and `--insecure-http` (plain HTTP for local debugging, token still needed)."""
# SPDX-License-Identifier: Apache-2.0
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402

GIB = 1 << 30


def cpus(text):
    out = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


class AgentCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-cli-")
        self.conf_dir = os.path.join(self.tmp, "qemu-server")
        os.makedirs(self.conf_dir)
        self.topo = agentlib.topology_args("32intel64-2p8co2t+8ve")
        self.common = ["--config", os.devnull, "--pve-config-dir", self.conf_dir, "--pve-run-dir", self.tmp,
                       "--node-name", "pve1", "--region", "lab"]

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def place(self, lines, extra=()):
        p = subprocess.run([agentlib.AGENT, "place"] + self.topo + self.common + list(extra),
                           input="".join(json.dumps(l) + "\n" if not isinstance(l, str) else l for l in lines),
                           capture_output=True, text=True, timeout=60)
        return p.returncode, [json.loads(l) for l in p.stdout.splitlines()], p.stderr

    def test_place_is_cumulative_and_numa_local(self):
        code, out, err = self.place([{"vcpus": 4, "memory_bytes": 4 * GIB}] * 9)
        self.assertEqual(code, 0, err)
        placed = [o for o in out if o["ok"]]
        self.assertEqual(len(placed), 8)  # 32 threads / 4
        self.assertFalse(out[8]["ok"])
        self.assertIn("CPU", out[8]["reason"])
        seen = set()
        for o in placed:
            c = cpus(o["cpus"])
            self.assertFalse(c & seen)
            seen |= c
            self.assertEqual(len(o["numa"]), 1)  # one node whenever one node can hold it
            self.assertEqual(o["numa"][0]["memory_bytes"], 4 * GIB)
            # guest vCPUs 2k and 2k+1 are the SMT siblings n and n+16 of one core on this machine
            vm = o["vcpu_map"]
            self.assertEqual({vm[1] - vm[0], vm[3] - vm[2]}, {16})

    def test_place_spans_nodes_with_exact_memory(self):
        code, out, err = self.place([{"vcpus": 24, "memory_bytes": 70 * GIB}])
        self.assertEqual(code, 0, err)
        o = out[0]
        self.assertTrue(o["ok"], o)
        self.assertEqual(len(o["numa"]), 2)
        self.assertEqual(sum(n["memory_bytes"] for n in o["numa"]), 70 * GIB)
        self.assertTrue(all(n["memory_bytes"] % (1 << 20) == 0 for n in o["numa"]))

    def test_place_falls_back_before_refusing_and_says_why(self):
        # Two 15-vCPU VMs leave one lone thread on each NUMA node. A 2-vCPU VM has no preferred layout
        # (its pair cannot be siblings, each guest node gets one vCPU) but a valid one: it is placed.
        code, out, err = self.place([{"vcpus": 15, "memory_bytes": 4 * GIB}] * 2 +
                                    [{"vcpus": 2, "memory_bytes": 4 * GIB}, {"vcpus": 1, "memory_bytes": GIB}])
        self.assertEqual(code, 0, err)
        self.assertTrue(all(o["ok"] for o in out[:3]), out)
        self.assertEqual([o.get("fallback", False) for o in out[:3]], [False, False, True])
        self.assertEqual([n["guest_cpus"] for n in out[2]["numa"]], ["0", "1"])
        self.assertEqual(sum(n["memory_bytes"] for n in out[2]["numa"]), 4 * GIB)
        # The host is full: the refusal names the resource and what each NUMA node has free.
        self.assertFalse(out[3]["ok"])
        reason = out[3]["reason"]
        self.assertTrue(reason.startswith("CPUs: needs 1 vCPUs but only 0 host CPUs are free"), reason)
        self.assertIn("node 0 0 CPUs", reason)
        self.assertIn("node 1 0 CPUs", reason)

    def test_place_bad_line_names_the_field_and_goes_on(self):
        code, out, err = self.place(['{"vcpus": "four", "memory_bytes": 1073741824}\n',
                                     {"vcpus": 2, "memory_bytes": GIB}])
        self.assertEqual(code, 2)
        self.assertFalse(out[0]["ok"])
        self.assertIn("vcpus", out[0]["reason"])
        self.assertTrue(out[1]["ok"])

    def test_capacity_with_node_setting_file(self):
        settings = os.path.join(self.tmp, "nodes.json")
        with open(settings, "w") as f:
            json.dump({"lab": {"pve1": {"reservedcpus": [0, 16], "reservedmemory": 4 * GIB},
                               "*": {"reservedcpus": [1, 17, 2, 18]}}}, f)
        p = subprocess.run([agentlib.AGENT, "capacity", "--node-setting-file", settings] + self.topo + self.common,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        cap = json.loads(p.stdout)
        self.assertEqual(cap["cpus_free"], 30)  # the exact node entry wins over "*"
        self.assertNotIn(0, cpus(cap["free_cpus"]))
        self.assertIn(1, cpus(cap["free_cpus"]))
        with open(settings, "w") as f:
            f.write('{"lab": {"pve1": {"reservedmemory": "lots"}}}')
        p = subprocess.run([agentlib.AGENT, "capacity", "--node-setting-file", settings] + self.topo + self.common,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("reservedmemory", p.stderr)

    def test_bad_log_format_exits_2_with_one_line(self):
        p = subprocess.run([agentlib.AGENT, "capacity", "--log-format", "xml"] + self.topo + self.common,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertEqual(p.stderr.strip().splitlines(),
                         ["pvescale-agent: log_format: expected text, logfmt or json, got 'xml'"])

    def test_insecure_http_still_needs_the_token(self):
        token_file, token = agentlib.write_token(self.tmp)
        with agentlib.Agent(self.topo + self.common + ["--token-file", token_file, "--insecure-http",
                                                       "--state-dir", self.tmp]) as agent:
            url = "http://127.0.0.1:%d/v1/capacity" % agent.port
            self.assertEqual(agentlib.curl(url)[0], 401)
            status, body = agentlib.curl(url, token=token)
            self.assertEqual(status, 200, body)
            self.assertIn("cpus_free", json.loads(body))


if __name__ == "__main__":
    unittest.main(verbosity=2)
