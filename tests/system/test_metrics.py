"""System test: GET /metrics of a real agent passes `promtool check metrics` and agrees with the API."""
# SPDX-License-Identifier: Apache-2.0
#
# The agent runs on the 32intel64-2p8co2t+8ve snapshot (with hugepages on both nodes) and two VMs, with a
# bound and a pending reservation, after a mix of good and bad requests. promtool comes from Debian's
# `prometheus` package (the only bookworm package that ships it).
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import agentlib  # noqa: E402
from checks import check, summary  # noqa: E402

TOKEN = "metrics-test-token-0123456789"


def samples(text):
    """{'name{labels}': value} of every sample line."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def start(tmp):
    ca, cert, key = agentlib.make_tls(tmp)
    token_file, _ = agentlib.write_token(tmp, TOKEN)
    conf, run, state = (os.path.join(tmp, d) for d in ("qemu-server", "run", "state"))
    for d in (conf, run, state):
        os.makedirs(d)
    for vmid, text in {201: "name: a\ncores: 2\nmemory: 2048\naffinity: 0-1\n",
                       202: "name: b\ncores: 2\nmemory: 2048\n"}.items():
        with open(os.path.join(conf, "%d.conf" % vmid), "w") as f:
            f.write(text)
    args = agentlib.topology_args("32intel64-2p8co2t+8ve") + [
        "--tls-cert", cert, "--tls-key", key, "--token-file", token_file, "--pve-config-dir", conf,
        "--pve-run-dir", run, "--state-dir", state, "--node-policy", "static", "--node-name", "pve-\"metrics\""]
    return ca, agentlib.Agent(args)


def traffic(agent, ca):
    url = "https://localhost:%d" % agent.port
    status, text = agentlib.curl(url + "/v1/reservations", ca, TOKEN, "POST",
                                 json.dumps({"vcpus": 2, "memory_bytes": 1 << 30, "owner": "m"}))
    check(status == 201, "reservation created")
    rid = json.loads(text)["id"]
    check(agentlib.curl(url + "/v1/reservations/%s/bind" % rid, ca, TOKEN, "POST", '{"vmid": 202}')[0] == 200,
          "reservation bound to VM 202")
    check(agentlib.curl(url + "/v1/reservations", ca, TOKEN, "POST",
                        json.dumps({"vcpus": 4, "memory_bytes": 1 << 30, "owner": "m"}))[0] == 201,
          "pending reservation created")
    for path, token, method, want in (("/v1/capacity", TOKEN, "GET", 200), ("/v1/capacity", None, "GET", 401),
                                      ("/v1/nothing/here", TOKEN, "GET", 404), ("/v1/capacity", TOKEN, "DELETE", 405),
                                      ("/v1/reservations/r-0000000000000000", TOKEN, "GET", 404)):
        check(agentlib.curl(url + path, ca, token, method)[0] == want, "%s %s -> %d" % (method, path, want))


def main():
    promtool = shutil.which("promtool")
    check(promtool is not None, "promtool installed (Debian package prometheus)")
    if not promtool:
        return 1
    with tempfile.TemporaryDirectory(prefix="pvescale-metrics-") as tmp:
        ca, agent = start(tmp)
        with agent:
            url = "https://localhost:%d" % agent.port
            traffic(agent, ca)
            status, text = agentlib.curl(url + "/metrics", ca, None)
            check(status == 200, "GET /metrics (no token needed, like /healthz): 200")
            _, capacity = agentlib.curl(url + "/v1/capacity", ca, TOKEN)
            _, topology = agentlib.curl(url + "/v1/topology", ca, TOKEN)
    print(text)
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    print("promtool check metrics: rc %d %s%s" % (p.returncode, p.stdout, p.stderr))
    check(p.returncode == 0 and not (p.stdout + p.stderr).strip(), "promtool check metrics: no errors, no lint")
    compare(samples(text), json.loads(capacity), json.loads(topology))
    return summary()


def compare(s, capacity, topology):
    check(s.get("pvescale_agent_cpus_free") == capacity["cpus_free"], "cpus_free = /v1/capacity")
    for n in capacity["numa_nodes"]:
        key = 'pvescale_agent_numa_node_cpus_free{node="%d"}' % n["id"]
        check(s.get(key) == n["cpus_free"], "%s = %d" % (key, n["cpus_free"]))
        key = 'pvescale_agent_numa_node_memory_free_bytes{node="%d"}' % n["id"]
        check(s.get(key) == n["memory_free_bytes"], "%s = /v1/capacity" % key)
    for n in topology["numa_nodes"]:
        for size, h in n["hugepages"].items():
            key = 'pvescale_agent_numa_node_hugepages_free_pages{node="%d",page_size="%s"}' % (n["id"], size)
            check(s.get(key) == h["free"], "%s = %d" % (key, h["free"]))
    check(s.get('pvescale_agent_reservations{state="bound"}') == 1, "one bound reservation")
    check(s.get('pvescale_agent_reservations{state="pending"}') == 1, "one pending reservation")
    check(s.get('pvescale_agent_vms{state="stopped"}') == 2, "two stopped VMs")
    check(any(k.startswith("pvescale_agent_host_info{") and 'node="pve-\\"metrics\\""' in k for k in s),
          "node name label escaped")
    req = "pvescale_agent_http_requests_total"
    check(s.get(req + '{route="unauthorized",method="GET",status="401"}') == 1, "401 counted (route unauthorized)")
    check(s.get(req + '{route="unmatched",method="GET",status="404"}') == 1, "404 counted as unmatched")
    check(s.get(req + '{route="/v1/capacity",method="DELETE",status="405"}') == 1, "405 counted")
    check(s.get(req + '{route="/v1/reservations/*",method="GET",status="404"}') == 1,
          "ids are not labels: /v1/reservations/* counted")
    check(not any(re.search(r"r-0{16}", k) for k in s), "no reservation id in any label")
    dur = "pvescale_agent_http_request_duration_seconds"
    check(s.get(dur + '_count{route="/v1/capacity"}') == 2, "latency histogram counts the /v1/capacity calls (2)")
    check(s.get(dur + '_bucket{route="/v1/capacity",le="+Inf"}') == 2, "+Inf bucket = count")
    check(s.get("process_resident_memory_bytes", 0) > 0, "process_resident_memory_bytes")
    check(s.get("process_open_fds", 0) >= 3 and s.get("process_max_fds", 0) >= s.get("process_open_fds", 0),
          "process_open_fds and process_max_fds")
    check(time.time() - 600 < s.get("process_start_time_seconds", 0) <= time.time() + 1,
          "process_start_time_seconds: the agent started minutes ago at most")
    check("process_cpu_seconds_total" in s, "process_cpu_seconds_total")


if __name__ == "__main__":
    sys.exit(main())
