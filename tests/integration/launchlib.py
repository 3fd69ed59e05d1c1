"""launchlib: a world for launcher tests: the simulator (PVE + kubelets) on a real Kubernetes control plane
(../shared/k8s), the pvescale CRDs, a real pvescale-agent per host, a NodeClass and NodePool, and the launcher_driver
(a stand-in controller around launcher_reconcile)."""
# SPDX-License-Identifier: Apache-2.0
import base64
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("PVESCALE_SOURCE_DIR") or os.path.join(HERE, "..", "..")
BUILD = os.environ.get("PVESCALE_BUILD_DIR") or os.path.join(SRC, "build")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "sim"))
import agentlib  # noqa: E402
import coordlib  # noqa: E402
import simtest  # noqa: E402
from test_agent_reservations import Client  # noqa: E402

DRIVER = os.path.join(BUILD, "tests", "integration", "launcher_driver")
API = "/apis/pvescale.io/v1alpha1"
GIB = 1 << 30
MIB = 1 << 20
STEPS = ["VMIDAllocated", "Cloning", "Configured", "Launched", "Registered", "Initialized"]

wait_for = simtest.wait_for


def cpulist(text):
    out = set()
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def node_class(name="default", **spec):
    s = {"instanceTemplateRef": {"name": "k8s-template"}, "bootDevice": {"size": "30Gi"},
         "metadataOptions": {"type": "cdrom"}, "securityGroups": [{"name": "kubernetes", "interface": "net0"}],
         "tags": ["k8s"]}
    s.update(spec)
    return {"apiVersion": "pvescale.io/v1alpha1", "kind": "ProxmoxNodeClass", "metadata": {"name": name}, "spec": s}


def node_pool(name="default", node_class_name="default"):
    return {"apiVersion": "pvescale.io/v1alpha1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {"team": "a", "node-role.kubernetes.io/worker": ""}},
                                  "spec": {"nodeClassRef": {"name": node_class_name},
                                           "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}}}


class World:
    """Simulator + CRDs + agents. agents: None = one per host, or a set of host names that get one. kube: "real" (a
    control plane of the World's own, started without kube-public/cluster-info: the World publishes it) or a
    coordlib.ControlPlane the World attaches to (it must be clean; stop() deletes what the test made on it)."""

    def __init__(self, hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", knobs=(), agents=None, nodeclass=None,
                 kube="real"):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-launch-")
        self.shared = kube if isinstance(kube, coordlib.ControlPlane) else None
        self.agents = {}
        self.procs = []
        if self.shared:
            left = self.shared.leftovers()
            assert not left, "the shared control plane is not clean: %s" % left
            args = ["--kube-attach", self.shared.dir]
        else:
            args = ["--no-cluster-info"]
        try:
            self.sim = simtest.Sim(hosts=hosts, knobs=list(knobs), kube="real", args=args)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        try:
            self._setup(agents, nodeclass)
        except BaseException:
            self.stop()
            raise

    # ---- set-up ----
    def _setup(self, agents, nodeclass):
        ep = self.sim.ep
        self.region = self.sim.region
        self.kubeconfig = ep["kube"]["kubeconfig"]
        crds = sorted(glob.glob(os.path.join(SRC, "deploy", "crds", "*.yaml")))
        r = subprocess.run([DRIVER, "apply", self.kubeconfig] + crds, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        for kind in ("nodeclaims", "nodepools", "proxmoxnodeclasses"):  # a real API server serves them a moment later
            wait_for(lambda: self.sim.kube("GET", API + "/" + kind).status == 200, 30, 0.1, what=kind + " served")
        self._cluster_info()
        self.ca, cert, key = agentlib.make_tls(self.tmp)
        self.token_file, self.token = agentlib.write_token(self.tmp)
        for host, h in ep["hosts"].items():
            if agents is None or host in agents:
                self.agents[host] = self._start_agent(host, h, cert, key)
        self.kcreate(API + "/proxmoxnodeclasses", nodeclass or node_class())
        self.kcreate(API + "/nodepools", node_pool())

    def _cluster_info(self):
        ep = self.sim.ep
        with open(ep["ca_file"], "rb") as f:
            ca = base64.b64encode(f.read()).decode()
        kc = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": "", "cluster": {"server": ep["kube"]["url"], "certificate-authority-data": ca}}]}
        self.kcreate("/api/v1/namespaces/kube-public/configmaps",
                     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info",
                                                                           "namespace": "kube-public"},
                      "data": {"kubeconfig": json.dumps(kc)}})

    def _start_agent(self, host, h, cert, key):
        state = os.path.join(self.tmp, "agent-" + host)
        os.makedirs(state)
        args = ["--config", os.devnull, "--tls-cert", cert, "--tls-key", key, "--token-file", self.token_file,
                "--node-name", host, "--pve-config-dir", h["pve_config_dir"], "--pve-run-dir", h["pve_run_dir"],
                "--corosync-conf", h["corosync_conf"], "--state-dir", state, "--node-policy", "static"]
        args += ["--fsroot", h["fsroot"]] if "fsroot" in h else ["--topology-xml", h["topology_xml"]]
        args += ["--pve-lxc-dir", h["pve_lxc_dir"], "--lxc-cgroup-dir", h["lxc_cgroup_dir"]]  # not this machine's
        a = agentlib.Agent(args)
        a.client = Client(a.port, self.ca, self.token)
        a.url = "https://127.0.0.1:%d" % a.port
        return a

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.logfile.close()
        for a in self.agents.values():
            a.stop()
        try:
            self.sim.stop()
        finally:
            try:
                if self.shared:  # the simulator's kubelets are gone: what they and the test made goes too
                    self.shared.clean()
            finally:
                shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- Kubernetes ----
    def kcreate(self, path, obj):
        r = self.sim.kube("POST", path, obj)
        assert r.status in (200, 201), r
        return r.json

    def kget(self, path):
        r = self.sim.kube("GET", path)
        return r.json if r.status == 200 else None

    def create_claim(self, name, instance_type="c1.2VCPU-4GB", host="pve1", labels=None, pool="default",
                     nodeclass="default", finalizer=True, spec=None):
        meta = {"name": name, "labels": dict(labels or {})}
        if finalizer:
            meta["finalizers"] = ["pvescale.io/termination"]
        s = {"nodePool": pool, "nodeClassRef": {"name": nodeclass}, "instanceType": instance_type,
             "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [host]},
                              {"key": "topology.kubernetes.io/region", "operator": "In", "values": [self.region]},
                              {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]}]}
        s.update(spec or {})
        obj = self.kcreate(API + "/nodeclaims", {"apiVersion": "pvescale.io/v1alpha1", "kind": "NodeClaim",
                                                 "metadata": meta, "spec": s})
        obj["status"] = {"host": host, "region": self.region}
        r = self.sim.kube("PUT", API + "/nodeclaims/%s/status" % name, obj)
        assert r.status == 200, r
        return r.json

    def claim(self, name):
        return self.kget(API + "/nodeclaims/" + name)

    def claims(self, selector=None):
        q = "?labelSelector=" + urllib.parse.quote(selector) if selector else ""
        return self.kget(API + "/nodeclaims" + q)["items"]

    def delete_claim(self, name):
        return self.sim.kube("DELETE", API + "/nodeclaims/" + name)

    def node(self, name):
        return self.kget("/api/v1/nodes/" + name)

    def secrets(self, selector="pvescale.io/nodeclaim-uid"):
        q = "?labelSelector=" + urllib.parse.quote(selector)
        return self.kget("/api/v1/namespaces/kube-system/secrets" + q)["items"]

    def events(self, reason=None):
        items = self.kget("/api/v1/events")["items"]
        return [e for e in items if reason is None or e.get("reason") == reason]

    # ---- Proxmox ----
    def pve(self, method, path, params=None):
        r = self.sim.pve(method, path, params)
        assert r.status == 200, r
        return r.data

    def vms(self, host=None):
        """Non-template VMs: {vmid: entry} over the given host or every host."""
        out = {}
        for h in ([host] if host else self.sim.ep["hosts"]):
            for vm in self.pve("GET", "/nodes/%s/qemu" % h):
                if not vm.get("template"):
                    vm["node"] = h
                    out[vm["vmid"]] = vm
        return out

    def vm_config(self, host, vmid):
        return self.pve("GET", "/nodes/%s/qemu/%d/config" % (host, vmid))

    def isos(self, host):
        return sorted(os.listdir(self.sim.ep["hosts"][host]["iso_dir"]))

    def reservations(self, host):
        status, body = self.agents[host].client.request("GET", "/v1/reservations")
        assert status == 200, body
        return body["reservations"]

    # ---- the driver ----
    def driver_config(self, **over):
        ep = self.sim.ep
        e = ep["pve"][self.region]
        conf = {"kubeconfig": self.kubeconfig,
                "regions": {self.region: {"url": e["url"], "token_id": e["token_id"],
                                          "token_secret": e["token_secret"], "ca_file": ep["ca_file"]}},
                "agents": {h: {"url": a.url, "token": self.token, "ca_file": self.ca} for h, a in self.agents.items()},
                "options": {"clone_timeout_ms": 30000, "registration_timeout_ms": 30000, "backoff_base_ms": 60000},
                "workers": 4, "exit_when": "initialized", "timeout_ms": 90000}
        for k, v in over.items():
            if isinstance(v, dict) and isinstance(conf.get(k), dict):
                conf[k] = dict(conf[k], **v)
            else:
                conf[k] = v
        fd, path = tempfile.mkstemp(prefix="driver-", suffix=".json", dir=self.tmp)
        with os.fdopen(fd, "w") as f:
            json.dump(conf, f)
        return path

    def start_driver(self, **over):
        log = open(os.path.join(self.tmp, "driver-%d.log" % len(self.procs)), "w+")
        p = subprocess.Popen([DRIVER, self.driver_config(**over)], stdout=log, stderr=subprocess.STDOUT)
        p.logfile = log
        self.procs.append(p)
        return p

    @staticmethod
    def driver_log(p):
        p.logfile.flush()
        p.logfile.seek(0)
        return p.logfile.read()

    def wait_driver(self, p, timeout=120):
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            raise AssertionError("driver hung:\n" + self.driver_log(p)[-6000:])
        return rc, self.driver_log(p)

    def run_driver(self, timeout=120, **over):
        return self.wait_driver(self.start_driver(**over), timeout)

    # ---- checks shared by tests ----
    def check_no_orphans(self, test):
        """Every pvescale VM belongs to exactly one live claim, VMIDs are unique, and every agent reservation
        belongs to a live claim that records it."""
        claims = self.claims()
        by_vmid = {}
        for c in claims:
            st = c.get("status", {})
            if st.get("vmid"):
                test.assertNotIn(st["vmid"], by_vmid, "duplicate VMID %s" % st["vmid"])
                by_vmid[st["vmid"]] = c
        for vmid, vm in self.vms().items():
            test.assertIn(vmid, by_vmid, "orphan VM %d (%s)" % (vmid, vm))
            desc = self.vm_config(vm["node"], vmid).get("description", "")
            test.assertIn("uid: " + by_vmid[vmid]["metadata"]["uid"], desc)
        ids = {c.get("status", {}).get("reservationID") for c in claims}
        for host in self.agents:
            for res in self.reservations(host):
                if not res["owner"].startswith("nodeclaim/"):
                    continue
                test.assertIn(res["id"], ids, "leaked reservation %s" % res)


def read_iso(path):
    """{name: text} of the files in the root of an ISO image (xorriso)."""
    out = tempfile.mkdtemp(prefix="iso-")
    try:
        subprocess.run(["xorriso", "-osirrox", "on", "-indev", path, "-extract", "/", out], check=True,
                       capture_output=True, timeout=60)
        files = {}
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                files[name] = f.read()
        label = subprocess.run(["xorriso", "-indev", path, "-pvd_info"], capture_output=True, text=True).stdout
        files["__volume_id__"] = next((line.split(":", 1)[1].strip() for line in label.splitlines()
                                       if line.startswith("Volume Id")), "")
        return files
    finally:
        shutil.rmtree(out, ignore_errors=True)
