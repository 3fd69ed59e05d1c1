"""System test: the topology page (GET /ui) in headless Debian chromium against a real agent on a real topology."""
# SPDX-License-Identifier: Apache-2.0
#
# The agent runs on the 32intel64-2p8co2t+8ve snapshot (2 packages, 2 NUMA nodes, 16 cores, 32 threads)
# with three VMs: 101 pinned by its config affinity, 102 bound to a reservation, 103 floating; plus a
# pending reservation, host-reserved CPUs (node-setting file) and isolated CPUs; and two LXC containers: 301
# running, pinned by lxc.cgroup2.cpuset.cpus to 8-9, and 302 stopped with cores: 2. Chromium is driven
# through chromedriver's W3C WebDriver HTTP API (urllib + json, see webdriver.py); it trusts exactly the
# agent's test certificate (--ignore-certificate-errors-spki-list), so the page is loaded over real TLS.
# The page is checked as a user sees it: the token is typed into its form, then the drawing is read
# back from the DOM (data-cpu, data-vmid) and compared with what the API says. A screenshot is kept at
# $PVESCALE_BUILD_DIR/ui-screenshot.png.
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import agentlib  # noqa: E402
from checks import check, summary  # noqa: E402
import webdriver  # noqa: E402

TOPOLOGY = "32intel64-2p8co2t+8ve"
TOKEN = "ui-test-token-0123456789abcdef"


def cpus(cpulist):
    out = set()
    for part in filter(None, (cpulist or "").split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def write_vms(conf_dir):
    vms = {
        101: "name: web1\ncores: 4\nmemory: 4096\naffinity: 0-3\n",
        102: "name: db\ncores: 4\nmemory: 8192\n",
        103: "name: batch\ncores: 2\nmemory: 2048\n",
    }
    for vmid, text in vms.items():
        with open(os.path.join(conf_dir, "%d.conf" % vmid), "w") as f:
            f.write(text)


def write_containers(lxc_dir, cgroup_dir):
    with open(os.path.join(lxc_dir, "301.conf"), "w") as f:
        f.write("hostname: cache\ncores: 2\nmemory: 1024\nlxc.cgroup2.cpuset.cpus: 8-9\n")
    with open(os.path.join(lxc_dir, "302.conf"), "w") as f:
        f.write("hostname: spare\ncores: 2\nmemory: 512\n")
    os.makedirs(os.path.join(cgroup_dir, "301"))
    with open(os.path.join(cgroup_dir, "301", "cgroup.events"), "w") as f:
        f.write("populated 1\nfrozen 0\n")


def prepare(tmp):
    ca, cert, key = agentlib.make_tls(tmp)
    token_file, _ = agentlib.write_token(tmp, TOKEN)
    conf_dir, run_dir, state_dir = (os.path.join(tmp, d) for d in ("qemu-server", "run", "state"))
    for d in (conf_dir, run_dir, state_dir):
        os.makedirs(d)
    write_vms(conf_dir)
    lxc_dir, cgroup_dir = os.path.join(tmp, "lxc"), os.path.join(tmp, "cgroup-lxc")
    os.makedirs(lxc_dir)
    write_containers(lxc_dir, cgroup_dir)
    settings = os.path.join(tmp, "nodes.json")
    with open(settings, "w") as f:
        json.dump({"default": {"*": {"reservedcpus": [15, 31], "reservedmemory": 1073741824}}}, f)
    topo = agentlib.topology_args(TOPOLOGY)
    with open(os.path.join(topo[1], "sys/devices/system/cpu/isolated"), "w") as f:
        f.write("29-30\n")
    for cpu in range(32):  # cpufreq, for cpu_governors: no VM runs, so every CPU but the host's gets powersave
        d = os.path.join(topo[1], "sys/devices/system/cpu/cpu%d/cpufreq" % cpu)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "scaling_governor"), "w") as f:
            f.write("schedutil\n")
    args = topo + ["--tls-cert", cert, "--tls-key", key, "--token-file", token_file,
                   "--pve-config-dir", conf_dir, "--pve-run-dir", run_dir, "--state-dir", state_dir,
                   "--pve-lxc-dir", lxc_dir, "--lxc-cgroup-dir", cgroup_dir,
                   "--node-setting-file", settings, "--region", "default", "--node-policy", "static",
                   "--cpu-governors", "true", "--governor-free", "powersave"]
    return ca, cert, args


def api(agent, ca, path, method="GET", body=None, token=TOKEN, extra=()):
    status, text = agentlib.curl("https://localhost:%d%s" % (agent.port, path), ca=ca, token=token,
                                 method=method, body=json.dumps(body) if body is not None else None,
                                 extra=extra)
    return status, text


def make_reservations(agent, ca):
    status, text = api(agent, ca, "/v1/reservations", "POST",
                       {"vcpus": 4, "memory_bytes": 8 << 30, "ttl_seconds": 600, "owner": "ui-test"})
    check(status == 201, "reservation for VM 102 created (%d %s)" % (status, text[:200]))
    bound = json.loads(text)
    status, text = api(agent, ca, "/v1/reservations/%s/bind" % bound["id"], "POST", {"vmid": 102})
    check(status == 200, "reservation bound to VM 102 (%d %s)" % (status, text[:200]))
    status, text = api(agent, ca, "/v1/reservations", "POST",
                       {"vcpus": 2, "memory_bytes": 2 << 30, "ttl_seconds": 600, "owner": "pending-owner"})
    check(status == 201, "pending reservation created (%d)" % status)
    return bound, json.loads(text)


def check_routes(agent, ca):
    status, text = api(agent, ca, "/ui", token=None)
    check(status == 200 and "<html" in text and TOKEN not in text, "GET /ui without a token: the page, no secret")
    status, text = api(agent, ca, "/v1/topology", token=None, extra=["-H", "Accept: text/html,*/*;q=0.8"])
    check(status == 200 and "<html" in text, "GET /v1/topology with Accept: text/html: the page")
    status, _ = api(agent, ca, "/v1/topology", token=None, extra=["-H", "Accept: application/json"])
    check(status == 401, "GET /v1/topology for JSON without a token: 401 (got %d)" % status)


def page_state(browser):
    return browser.run("""
        var cells = Array.prototype.slice.call(document.querySelectorAll('#host .thread[data-cpu]'));
        return {
          cpus: cells.map(function (c) { return Number(c.dataset.cpu); }),
          vm: cells.filter(function (c) { return c.dataset.vmid; })
                   .map(function (c) { return [Number(c.dataset.cpu), Number(c.dataset.vmid), c.title]; }),
          ct: cells.filter(function (c) { return c.dataset.ctid; })
                   .map(function (c) { return [Number(c.dataset.cpu), Number(c.dataset.ctid), c.title]; }),
          ctRows: Array.prototype.slice.call(document.querySelectorAll('#containers tbody tr')).map(function (r) {
            var texts = Array.prototype.map.call(r.cells, function (td) { return td.textContent; });
            return [Number(r.dataset.ctid)].concat(texts); }),
          pending: cells.filter(function (c) { return c.dataset.reservation; }).map(function (c) { return Number(c.dataset.cpu); }),
          reserved: cells.filter(function (c) { return c.dataset.reserved; }).map(function (c) { return Number(c.dataset.cpu); }),
          isolated: cells.filter(function (c) { return c.dataset.isolated; }).map(function (c) { return Number(c.dataset.cpu); }),
          governors: cells.map(function (c) { return [Number(c.dataset.cpu), c.dataset.governor || '', c.title]; }),
          packages: document.querySelectorAll('#host .package[data-package]').length,
          numa: document.querySelectorAll('#host .numa[data-numa]').length,
          cores: document.querySelectorAll('#host .core').length,
          vmRows: Array.prototype.slice.call(document.querySelectorAll('#vms tbody tr')).map(function (r) {
            return [Number(r.dataset.vmid), r.querySelector('.wanted').textContent, r.querySelector('.numa').textContent]; }),
          url: location.href,
          session: sessionStorage.getItem('pvescale-agent-token'),
          local: localStorage.length,
          height: document.documentElement.scrollHeight
        };""")


def check_drawing(state, expected, bound, pending):
    check(len(state["cpus"]) == expected["pus"],
          "thread cells = PU count of %s (%d cells, %d PUs)" % (TOPOLOGY, len(state["cpus"]), expected["pus"]))
    check(sorted(state["cpus"]) == list(range(expected["pus"])), "each PU drawn exactly once")
    check(state["packages"] == expected["packages"]["count"], "one box per package (%d)" % state["packages"])
    check(state["numa"] == len(expected["numa_nodes"]["list"]) if isinstance(expected["numa_nodes"], dict)
          else state["numa"] > 0, "one box per NUMA node (%d)" % state["numa"])
    check(state["cores"] == expected["cores"], "one box per core (%d)" % state["cores"])
    by_vm = {}
    for cpu, vmid, title in state["vm"]:
        by_vm.setdefault(vmid, set()).add(cpu)
        check(("VM %d" % vmid) in title, "cell of CPU %d names VM %d on hover" % (cpu, vmid))
    check(by_vm.get(101) == cpus("0-3"), "VM 101's cells are its config affinity 0-3 (%s)" % sorted(by_vm.get(101, [])))
    check(by_vm.get(102) == cpus(bound["cpus"]),
          "VM 102's cells carry its VMID and are its reservation's CPUs %s (%s)" % (bound["cpus"], sorted(by_vm.get(102, []))))
    check(103 not in by_vm, "floating VM 103 holds no cell")
    check(set(state["pending"]) == cpus(pending["cpus"]), "pending reservation marked on %s" % pending["cpus"])
    check(set(state["reserved"]) == {15, 31}, "host-reserved CPUs 15,31 marked (%s)" % state["reserved"])
    check(set(state["isolated"]) == {29, 30}, "isolated CPUs 29-30 marked (%s)" % state["isolated"])
    gov = {cpu: (g, title) for cpu, g, title in state["governors"]}
    check(gov.get(0, ("",))[0] == "powersave" and "governor powersave" in gov[0][1],
          "CPU 0 shows the free governor the agent set (%r)" % (gov.get(0),))
    check(all(gov.get(c, ("",))[0] == "schedutil" for c in (15, 31)),
          "host-reserved CPUs 15, 31 keep their governor (%r)" % ([gov.get(15), gov.get(31)],))
    check_containers(state, bound)
    rows = {r[0]: r for r in state["vmRows"]}
    check(sorted(rows) == [101, 102, 103], "VM table lists 101, 102, 103")
    check(rows.get(102, [0, ""])[1] == bound["cpus"], "VM table: wanted affinity of 102 = %s" % bound["cpus"])
    check("node" in rows.get(102, [0, "", ""])[2], "VM table: NUMA binding of 102 shown (%r)" % rows.get(102))


def check_containers(state, bound):
    by_ct = {}
    for cpu, ctid, title in state["ct"]:
        by_ct.setdefault(ctid, set()).add(cpu)
        check("container %d" % ctid in title, "cell of CPU %d names container %d on hover" % (cpu, ctid))
    check(by_ct == {301: {8, 9}},
          "container 301's cells are its lxc cpuset 8-9, 302 (floating) holds none (%r)" % by_ct)
    check(not (cpus(bound["cpus"]) & {8, 9}), "VM 102's reservation avoids the container's CPUs (%s)" % bound["cpus"])
    rows = {r[0]: r[1:] for r in state["ctRows"]}
    check(sorted(rows) == [301, 302], "container table lists 301 and 302 (%r)" % sorted(rows))
    r301, r302 = rows.get(301, [""] * 8), rows.get(302, [""] * 8)
    check(r301[1] == "cache" and r301[2] == "running" and r301[5] == "8-9",
          "container table: 301 cache, running, cpuset 8-9 (%r)" % r301)
    check(r302[2].startswith("stopped") and r302[5] == "floating" and r302[3].startswith("2"),
          "container table: 302 stopped, floating, 2 CPUs (%r)" % r302)


def run_browser(agent, cert, bound, pending, expected, shot):
    flags = ["--ignore-certificate-errors-spki-list=" + webdriver.spki_sha256(cert)]
    with webdriver.Browser(flags) as b:
        url = "https://localhost:%d/ui" % agent.port
        b.get(url)
        b.wait_for("return !document.getElementById('login').classList.contains('hidden');")
        b.type_into("#token", "wrong-token")
        b.click("#login button[type=submit]")
        msg = b.wait_for("return document.getElementById('login-error').textContent;")
        check("rejected" in msg, "a wrong token brings the form back with a message (%r)" % msg)
        b.type_into("#token", TOKEN)
        b.click("#login button[type=submit]")
        b.wait_for("return document.body.dataset.loaded;")
        state = page_state(b)
        check(TOKEN not in state["url"] and state["url"] == url, "token never in the URL (%s)" % state["url"])
        check(state["session"] == TOKEN and state["local"] == 0, "token kept in sessionStorage only")
        check_drawing(state, expected, bound, pending)
        first = b.run("return document.body.dataset.loaded;")
        b.wait_for("return document.body.dataset.loaded !== arguments[0];", 20, first)
        check(True, "page refreshed on its own")
        b.set_window(1400, min(max(int(state["height"]) + 140, 800), 4000))
        b.screenshot(shot)
        check(os.path.getsize(shot) > 10000, "screenshot written to " + shot)


def main():
    expected = json.load(open(os.path.join(agentlib.TOPOLOGIES, TOPOLOGY + ".expected.json")))
    build = os.environ.get("PVESCALE_BUILD_DIR", agentlib.BUILD)
    shot = os.path.join(build, "ui-screenshot.png")
    with tempfile.TemporaryDirectory(prefix="pvescale-ui-") as tmp:
        ca, cert, args = prepare(tmp)
        with agentlib.Agent(args) as agent:
            bound, pending = make_reservations(agent, ca)
            check_routes(agent, ca)
            run_browser(agent, cert, bound, pending, expected, shot)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
