#!/usr/bin/env python3
# The coordinator and its host agents as installed on a Proxmox cluster, and what it does when an agent is gone.
# - Cluster layout: a fake /etc/pve (one tree, as pmxcfs shows the same files on every host) with an openssl-made
#   cluster CA (pve-root-ca.pem), each node's own pve-ssl.pem/key signed by it (the node name and address as
#   SANs, as Proxmox makes them) and the one token the package's postinst creates (run once per host, at the same
#   time). Three real agents start with no path given (their defaults are the cluster layout); the coordinator,
#   given that one token and that one CA, provisions through all three: every agent answers, none refuses the
#   token, nothing falls back to Proxmox's accounting.
# - Static policy, one of two agents stopped: VMs only on the other host, one AgentUnavailable Warning on the
#   NodePool naming the host (not one per round), hosts_left_out_total counts it.
# - Simple policy, the same: the host is placed by Proxmox's accounting as before, and the Event says so.
# On a real control plane (../shared/k8s) shared by the class's tests, each with its own simulator and agents.
# SPDX-License-Identifier: Apache-2.0
import os
import select
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
POSTINST = os.path.join(cl.SRC, "packaging", "debian", "pvescale-agent.postinst")
THREE = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga,pve3=64amd64-4s2n4ca2co"
TWO = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def make_pve_tree(pve, nodes):
    """/etc/pve as a Proxmox cluster has it: pve-root-ca.pem (its key in priv/), and per node
    nodes/<node>/pve-ssl.pem and .key signed by it, for 127.0.0.1, ::1, localhost, the node's address and names."""
    os.makedirs(os.path.join(pve, "priv"), mode=0o700)
    ca_key, ca = os.path.join(pve, "priv", "pve-root-ca.key"), os.path.join(pve, "pve-root-ca.pem")
    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=Proxmox Virtual Environment/OU=test-cluster/O=PVE Cluster Manager CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    for node, ip in nodes.items():
        d = os.path.join(pve, "nodes", node)
        os.makedirs(d)
        key, csr, cert, ext = (os.path.join(d, n) for n in ("pve-ssl.key", "pve-ssl.csr", "pve-ssl.pem", "san.ext"))
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", "/OU=PVE Cluster Node/O=Proxmox Virtual Environment/CN=%s.example.org" % node])
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:::1,"
                    "DNS:localhost,IP:%s,DNS:%s,DNS:%s.example.org\n" % (ip, node, node))
        run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", ext])
        os.remove(csr)
    return ca


def postinst_on_every_host(tmp, pve, nodes):
    """The package's postinst, once per host at the same time, each in its own root whose etc/pve is the shared
    tree. Returns their outputs."""
    outs, threads = {}, []

    def one(node):
        root = os.path.join(tmp, "root-" + node)
        os.makedirs(os.path.join(root, "etc"))
        os.symlink(pve, os.path.join(root, "etc", "pve"))
        p = subprocess.run(["sh", POSTINST, "configure"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, DPKG_ROOT=root))
        outs[node] = (p.returncode, p.stdout + p.stderr)
        outs[node + "/etc-pvescale"] = sorted(os.listdir(os.path.join(root, "etc", "pvescale")))
    for node in nodes:
        threads.append(threading.Thread(target=one, args=(node,)))
        threads[-1].start()
    for t in threads:
        t.join()
    return outs


class ClusterLayout(cl.Cluster):
    """cl.Cluster whose agents run with the installed layout of a Proxmox cluster (no token or TLS path given)."""

    def _start_agents(self):
        names = sorted(self.sim.ep["hosts"])
        ips = {n: "127.0.0.%d" % (i + 2) for i, n in enumerate(names)}
        self.pve = os.path.join(self.tmp, "pve")
        self.ca = make_pve_tree(self.pve, ips)
        self.postinst = postinst_on_every_host(self.tmp, self.pve, names)
        self.token_file = os.path.join(self.pve, "priv", "pvescale", "agent.token")
        with open(self.token_file) as f:
            self.token = f.read().strip()
        self.agent_port = cl.free_port()
        while not cl.port_free_on(self.agent_port, ips.values()):
            self.agent_port = cl.free_port()
        for name in names:
            h = self.sim.ep["hosts"][name]
            state = os.path.join(self.tmp, "agent-" + name)
            os.makedirs(state)
            args = [cl.AGENT, "serve", "--config", os.devnull, "--port", str(self.agent_port),
                    "--bind-address", ips[name], "--pve-dir", self.pve, "--node-name", name,
                    "--pve-config-dir", h["pve_config_dir"], "--pve-run-dir", h["pve_run_dir"],
                    "--corosync-conf", h["corosync_conf"], "--state-dir", state, "--node-policy", "static"]
            args += ["--fsroot", h["fsroot"]] if "fsroot" in h else ["--topology-xml", h["topology_xml"]]
            log_path = os.path.join(self.tmp, "agent-%s.log" % name)
            with open(log_path, "w") as log:
                p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.agents[name] = {"ip": ips[name], "proc": p, "log": log_path}
        for name, a in self.agents.items():
            cl.wait_for(lambda: "listening on port" in self.agent_log(name) or a["proc"].poll() is not None, 20,
                        what="agent %s" % name)
            assert a["proc"].poll() is None, self.agent_log(name)


class Tarpit(threading.Thread):
    """Listens on ip:port in place of an agent: accepts, never answers (a TLS handshake that never ends), and keeps
    each connection's (accepted, closed) monotonic times."""

    def __init__(self, ip, port):
        super().__init__(daemon=True)
        self.sock = socket.create_server((ip, port))
        self.conns, self.halt = [], threading.Event()

    def run(self):
        open_ = {}  # socket -> index in conns
        while not self.halt.is_set():
            ready, _, _ = select.select([self.sock] + list(open_), [], [], 0.05)
            for s in ready:
                if s is self.sock:
                    conn, _ = s.accept()
                    open_[conn] = len(self.conns)
                    self.conns.append([time.monotonic(), None])
                    continue
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:  # the client gave up
                    self.conns[open_.pop(s)][1] = time.monotonic()
                    s.close()
        for s in list(open_) + [self.sock]:
            s.close()


def spread_pod(name, app):
    return cl.pod(name, cpu="1", memory="1Gi", labels={"app": app}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": app}}}])


class AgentsTest(cl.SharedControlPlaneTest):
    def setUp(self):  # each test makes its own Cluster (kube=self.cp)
        self.c = self.co = None

    def start(self, cluster, pods, args=()):
        c = self.c = cluster
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        for p in pods:
            c.create(PODS, p)
        self.co = cl.Coordinator(c, list(args))
        self.wait_placed(pods)

    def add_pods(self, pods):
        for p in pods:
            self.c.create(PODS, p)
        self.wait_placed(pods)

    def wait_placed(self, pods):
        names = [p["metadata"]["name"] for p in pods]

        def placed():
            got = {p["metadata"]["name"]: p for p in self.c.items(PODS)}
            return all(got[n].get("spec", {}).get("nodeName") for n in names)
        cl.wait_for(placed, 45, interval=0.5, what="every pod bound to a launched node")

    def pool_events(self, reason):
        evs = self.c.items("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name=default")
        return [e for e in evs if e["involvedObject"].get("kind") == "NodePool" and e["reason"] == reason]

    def hosts_of_claims(self):
        return sorted(x["status"]["host"] for x in self.c.claims())

    def test_cluster_layout_one_token_one_ca(self):
        self.c = ClusterLayout(THREE, kube=self.cp)
        c = self.c
        # The postinst made the token once, on one host; the others reuse it; no host got a standalone token or
        # certificate (the agent uses the host's Proxmox certificate).
        outs = c.postinst
        self.assertEqual([outs[n][0] for n in ("pve1", "pve2", "pve3")], [0, 0, 0], outs)
        created = [n for n in ("pve1", "pve2", "pve3") if "created the cluster's API token" in outs[n][1]]
        self.assertEqual(len(created), 1, outs)
        self.assertEqual(sum("using the cluster's API token" in outs[n][1] for n in ("pve1", "pve2", "pve3")), 2)
        self.assertEqual([outs[n + "/etc-pvescale"] for n in ("pve1", "pve2", "pve3")], [[], [], []])
        self.assertEqual(os.stat(c.token_file).st_mode & 0o777, 0o600)
        self.assertRegex(c.token, r"^[0-9a-f]{64}$")
        self.assertFalse(os.path.exists(os.path.join(c.pve, "priv", "lock", "pvescale-agent-token")))
        # Each agent serves its own node's Proxmox certificate: the cluster CA verifies it by the node's name.
        for name, a in c.agents.items():
            p = subprocess.run(["curl", "-sS", "--fail", "--cacert", c.ca, "--resolve",
                                "%s:%d:%s" % (name, c.agent_port, a["ip"]), "-H", "Authorization: Bearer " + c.token,
                                "https://%s:%d/v1/capacity" % (name, c.agent_port)],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
        pods = [spread_pod("spread-%d" % i, "spread") for i in range(3)]
        self.start(c, pods)
        self.assertEqual(self.hosts_of_claims(), ["pve1", "pve2", "pve3"], "one VM per host (zone spread)")
        for claim in c.claims():
            st = claim["status"]
            self.assertTrue(st.get("reservationID"), st)  # reserved with the host's agent, not by Proxmox data
        m = self.co.metrics()
        self.assertEqual(m.get("pvescale_coordinator_agent_fallbacks_total"), 0)
        self.assertEqual(m.get('pvescale_coordinator_api_errors_total{api="agent"}'), 0)
        self.assertEqual(m.get("pvescale_coordinator_agents_unavailable"), 0)
        for reason in ("unreachable", "unauthorized", "error"):
            self.assertEqual(m.get('pvescale_coordinator_hosts_left_out_total{reason="%s"}' % reason), 0)
        self.assertEqual(self.pool_events("AgentUnavailable"), [])
        for name in c.agents:
            log = c.agent_log(name)
            self.assertNotIn("authentication failure", log)
        # Every agent pinned its VM: its reservation is bound.
        for claim in c.claims():
            host, rid = claim["status"]["host"], claim["status"]["reservationID"]
            a = c.agents[host]
            p = subprocess.run(["curl", "-sS", "--fail", "--cacert", c.ca, "--resolve",
                                "%s:%d:%s" % (host, c.agent_port, a["ip"]), "-H", "Authorization: Bearer " + c.token,
                                "https://%s:%d/v1/reservations" % (host, c.agent_port)],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(rid, p.stdout)

    def test_static_leaves_out_a_host_without_agent(self):
        c = self.c = cl.Cluster(TWO, kube=self.cp)
        c.stop_agent("pve2")
        self.start(c, [spread_pod("a-%d" % i, "a") for i in range(2)])
        self.assertEqual(set(self.hosts_of_claims()), {"pve1"})
        r = c.sim.pve("GET", "/nodes/pve2/qemu")
        self.assertEqual([vm for vm in r.data if not vm.get("template")], [], "no VM on the host without agent")
        for claim in c.claims():
            self.assertTrue(claim["status"].get("reservationID"), claim["status"])
        # A second round: still one Event (told once per change, not every round).
        self.add_pods([spread_pod("b-%d" % i, "b") for i in range(2)])
        self.assertEqual(set(self.hosts_of_claims()), {"pve1"})
        evs = self.pool_events("AgentUnavailable")
        self.assertEqual(len(evs), 1, evs)
        self.assertEqual(evs[0]["type"], "Warning")
        self.assertIn("Host pve2 (region r1) is left out of placement", evs[0]["message"])
        self.assertIn("did not answer", evs[0]["message"])
        m = self.co.metrics()
        self.assertGreaterEqual(m.get('pvescale_coordinator_hosts_left_out_total{reason="unreachable"}'), 2)
        self.assertEqual(m.get("pvescale_coordinator_agents_unavailable"), 1)
        self.assertEqual(m.get("pvescale_coordinator_agent_fallbacks_total"), 0)
        self.assertIn("is left out of placement", self.co.logtext())

    def test_hosts_are_asked_at_once(self):
        """A round asks every host's agent at once (16 at a time): two agents that never answer (their TLS
        handshake hangs until the client's 3 s connect timeout) are waited for together, not one after the other,
        and the third host gets the VMs."""
        c = self.c = cl.Cluster(THREE, kube=self.cp)
        pits = []
        for name in ("pve2", "pve3"):
            c.stop_agent(name)
            pits.append(Tarpit(c.agents[name]["ip"], c.agent_port))
            pits[-1].start()
        try:
            self.start(c, [spread_pod("a-%d" % i, "a") for i in range(2)])
        finally:
            for t in pits:
                t.halt.set()
                t.join(5)
        self.assertEqual(set(self.hosts_of_claims()), {"pve1"})
        first = [t.conns[0] if t.conns else None for t in pits]
        self.assertTrue(all(first), "both silent agents were asked: %s" % first)
        (a0, a1), (b0, b1) = first
        self.assertTrue(a1 and b1, "the coordinator gave up on both: %s" % first)
        # One after the other, the second is accepted as the first is given up (3 s each); at once, both are open
        # together for most of those 3 s.
        together = min(a1, b1) - max(a0, b0)
        self.assertGreater(together, 1.5, "asked one after the other (accepted, closed): %s" % first)

    def test_simple_falls_back_to_proxmox_accounting(self):
        c = self.c = cl.Cluster(TWO, kube=self.cp)
        c.stop_agent("pve2")
        self.start(c, [spread_pod("a-%d" % i, "a") for i in range(2)], ["--node-policy=simple"])
        self.assertEqual(self.hosts_of_claims(), ["pve1", "pve2"])
        on_pve2 = [x["status"] for x in c.claims() if x["status"]["host"] == "pve2"][0]
        self.assertEqual(on_pve2.get("reservationMode"), "pve", on_pve2)
        self.assertNotIn("reservationID", on_pve2)
        evs = self.pool_events("AgentUnavailable")
        self.assertEqual(len(evs), 1, evs)
        self.assertIn("Host pve2 (region r1) is placed by Proxmox's accounting, its VMs unpinned", evs[0]["message"])
        m = self.co.metrics()
        self.assertGreaterEqual(m.get("pvescale_coordinator_agent_fallbacks_total"), 1)
        self.assertEqual(m.get('pvescale_coordinator_hosts_left_out_total{reason="unreachable"}'), 0)


if __name__ == "__main__":
    unittest.main()
