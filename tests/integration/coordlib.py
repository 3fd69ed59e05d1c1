"""coordlib: helpers for tests that run pvescale-coordinator against the simulator and real agents."""
# SPDX-License-Identifier: Apache-2.0
import contextlib
import ctypes
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("PVESCALE_SOURCE_DIR") or os.path.join(HERE, "..", "..")
BUILD = os.environ.get("PVESCALE_BUILD_DIR") or os.path.join(SRC, "build")
sys.path.insert(0, os.path.join(SRC, "tests", "sim"))
sys.path.insert(0, HERE)
import agentlib  # noqa: E402
import simtest  # noqa: E402
from simlib import controlplane  # noqa: E402
from simlib import kubeclient  # noqa: E402


def wait_for(fn, timeout=15.0, interval=0.25, what="condition"):
    """simtest.wait_for, every 0.25 s unless told: most conditions here are lists from kube-apiserver, whose CPU the
    tests running side by side share."""
    return simtest.wait_for(fn, timeout, interval, what)

COORDINATOR = os.path.join(BUILD, "coordinator", "pvescale-coordinator")
AGENT = os.path.join(BUILD, "agent", "pvescale-agent")
YAML2JSON = os.path.join(BUILD, "tests", "integration", "yaml2json")
HELM_RENDER = os.path.join(BUILD, "tests", "unit", "helm_render")
CHART = os.path.join(SRC, "deploy", "helm", "pvescale-coordinator")
CRDS = [os.path.join(SRC, "deploy", "crds", f) for f in
        ("pvescale.io_nodepools.yaml", "pvescale.io_proxmoxnodeclasses.yaml", "pvescale.io_nodeclaims.yaml",
         "pvescale.io_proxmoxtemplates.yaml")]
GROUP = "/apis/pvescale.io/v1alpha1"
# Coordinator flags for tests of scale-down: a pass every second (a decision is carried out a pass after it is
# made) instead of every 10 s.
FAST_SCALE_DOWN = ["--disruption-interval=1s"]


def yaml_docs(*paths):
    """The YAML files as JSON objects (read by the repository's own YAML reader)."""
    out = subprocess.run([YAML2JSON] + list(paths), check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free_on(port, hosts):
    for h in hosts:
        with socket.socket() as s:
            try:
                s.bind((h, port))
            except OSError:
                return False
    return True


def make_tls(dirpath, ips):
    """A CA and one server certificate valid for localhost and every IP in ips. Returns (ca, cert, key)."""
    return agentlib.make_tls(dirpath, ips)


# ---- a real control plane shared by the tests of a module -----------------------------------------------------

# What tests (and the coordinator and kubelets they run) create, as (API prefix, resource), listed over every
# namespace; owners before what they own, namespaces last.
CLEANED = [("/apis/apps/v1", "deployments"), ("/apis/apps/v1", "daemonsets"), ("/apis/apps/v1", "statefulsets"),
           ("/apis/apps/v1", "replicasets"), ("/apis/batch/v1", "jobs"), ("/apis/policy/v1", "poddisruptionbudgets"),
           ("/api/v1", "pods"), ("/api/v1", "persistentvolumeclaims"), ("/api/v1", "persistentvolumes"),
           ("/api/v1", "configmaps"), ("/api/v1", "secrets"), ("/api/v1", "serviceaccounts"),
           ("/api/v1", "services"), ("/apis/rbac.authorization.k8s.io/v1", "roles"),
           ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
           ("/apis/rbac.authorization.k8s.io/v1", "clusterroles"),
           ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings"), ("/apis/coordination.k8s.io/v1", "leases"),
           ("/apis/scheduling.k8s.io/v1", "priorityclasses"), (GROUP, "nodeclaims"), (GROUP, "nodepools"),
           (GROUP, "proxmoxnodeclasses"), (GROUP, "proxmoxtemplates"), ("/api/v1", "nodes"),
           ("/apis/certificates.k8s.io/v1", "certificatesigningrequests"),
           ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions"), ("/api/v1", "namespaces")]
# The CRDs every Cluster creates stay from one test to the next.
KEPT_CRDS = {"nodepools.pvescale.io", "proxmoxnodeclasses.pvescale.io", "nodeclaims.pvescale.io",
             "proxmoxtemplates.pvescale.io"}


def _kept(resource, ns, name):
    """Objects the control plane makes and remakes itself: every namespace's default ServiceAccount and CA bundle,
    the controllers' and kube-apiserver's Leases, and the CRDs all tests use."""
    return ((resource, name) in (("serviceaccounts", "default"), ("configmaps", "kube-root-ca.crt")) or
            (resource == "leases" and ns == "kube-system" and
             (name in ("kube-controller-manager", "kube-scheduler") or name.startswith("kube-apiserver-"))) or
            (resource == "customresourcedefinitions" and name in KEPT_CRDS))


def _term_with_parent():
    """In the child: SIGTERM when the thread that started it dies (PR_SET_PDEATHSIG)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class ControlPlane:
    """A real Kubernetes control plane (../shared/k8s: `python3 -m simlib.controlplane DIR --no-cluster-info`) that
    the tests of a module or class share: each test's Cluster(kube=cp) attaches its simulator to it (--kube-attach)
    and, when it stops, deletes what the test made (clean()), so the next test starts on what the control plane had
    when it was ready (checked: leftovers fail the next Cluster). kcm_flags: kube-controller-manager flags fixed for
    its life, e.g. {"node-monitor-period": "4s"}; apiserver_flags likewise for kube-apiserver, e.g.
    {"watch-cache": "false"}. Stopped by PID (stop()); use start_for() in setUpClass."""

    def __init__(self, kcm_flags=None, apiserver_flags=None):
        self.dir = tempfile.mkdtemp(prefix="pvescale-cp-")
        cmd = [sys.executable, "-m", "simlib.controlplane", self.dir, "--no-cluster-info"]
        for k, v in sorted((kcm_flags or {}).items()):
            cmd += ["--kcm-flag", "%s=%s" % (k, v)]
        for k, v in sorted((apiserver_flags or {}).items()):
            cmd += ["--apiserver-flag", "%s=%s" % (k, v)]
        self.log_path = os.path.join(self.dir, "controlplane.log")
        with open(self.log_path, "w") as log:  # it stops its processes when the test is killed too
            self.proc = subprocess.Popen(cmd, cwd=os.path.join(SRC, "tests", "sim"), stdout=log,
                                         stderr=subprocess.STDOUT, preexec_fn=_term_with_parent)
        info = os.path.join(self.dir, "controlplane.json")
        try:  # 8-10 s on an idle machine, several times that under load (or with the binaries still to unpack)
            wait_for(lambda: os.path.exists(info) or self.proc.poll() is not None, 240, what="control plane ready")
            assert self.proc.poll() is None, "control plane exited: " + self.logtext()[-3000:]
            with open(info) as f:
                self.info = json.load(f)
            self.admin = kubeclient.Client(self.info["url"], self.info["ca"], self.info["client_cert"],
                                           self.info["client_key"])
            self.baseline = self.objects()
        except BaseException:
            self.stop()
            raise

    @classmethod
    def start_for(cls, test_class, **kw):
        """Start one for test_class's tests (call from setUpClass): stopped at the class's end even when a test or
        setUpClass fails."""
        cp = cls(**kw)
        test_class.addClassCleanup(cp.stop)
        return cp

    def logtext(self):
        with open(self.log_path) as f:
            return f.read()

    def objects(self):
        """{(resource, namespace, name): object} of every listed resource, leaving out what _kept() names."""
        out = {}
        for prefix, resource in CLEANED:
            status, body, _ = self.admin.raw("GET", "%s/%s" % (prefix, resource))
            if status == 404 and prefix == GROUP:  # the CRDs are not there (yet)
                continue
            assert status == 200, (prefix, resource, status, body)
            for o in body["items"]:
                md = o["metadata"]
                if not _kept(resource, md.get("namespace"), md["name"]):
                    out[(resource, md.get("namespace"), md["name"])] = (prefix, o)
        return out

    def leftovers(self):
        """What is there now and was not when the control plane was ready: "resource ns/name" strings."""
        return sorted("%s %s/%s" % (r, ns or "", n) for (r, ns, n) in self.objects() if (r, ns, n) not in
                      self.baseline)

    def clean(self, timeout=60):
        """Delete everything made since the control plane was ready (finalizers removed first: the coordinator that
        would take its own off is gone; pods at once: their kubelets are gone) and every Event; wait until it is
        gone. AssertionError naming what stays."""
        deadline = time.monotonic() + timeout
        while True:
            left = [(k, v) for k, v in self.objects().items() if k not in self.baseline]
            if not left:
                break
            assert time.monotonic() < deadline, "left after the test: %s" % self.leftovers()
            for (resource, ns, name), (prefix, obj) in left:
                path = "%s/%s%s/%s" % (prefix, "namespaces/%s/" % ns if ns else "", resource, name)
                if obj["metadata"].get("finalizers"):
                    self.admin.raw("PATCH", path, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
                if not obj["metadata"].get("deletionTimestamp") or resource == "pods":
                    self.admin.raw("DELETE", path + "?gracePeriodSeconds=0")
            time.sleep(0.3)
        for ns in self.admin.get("/api/v1/namespaces")["items"]:
            self.admin.call("DELETE", "/api/v1/namespaces/%s/events" % ns["metadata"]["name"])

    def compact_etcd(self):
        """etcd's history compacted up to its current revision (simlib.controlplane.compact_etcd): a watch from an
        older resourceVersion then ends in 410 Gone when the watch cache does not answer it (apiserver_flags
        {"watch-cache": "false"}). Returns that revision."""
        return controlplane.compact_etcd(self.info["ports"]["etcd"])

    def component_pids(self, binary):
        """PIDs of the control plane's processes running binary (e.g. "kube-controller-manager") now: its supervisor
        restarts the controllers when they exit, so their PIDs are looked up each time (children of the supervisor)."""
        out = []
        for children in glob.glob("/proc/%d/task/*/children" % self.proc.pid):
            try:
                with open(children) as f:
                    pids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            for pid in pids:
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        argv0 = f.read().split(b"\0")[0].decode()
                except OSError:
                    continue
                if os.path.basename(argv0) == binary:
                    out.append(pid)
        return out

    @contextlib.contextmanager
    def paused(self, binary="kube-controller-manager"):
        """The component stopped (SIGSTOP) for the with block and continued (SIGCONT) after it, even when the block
        fails: a controller that lags, e.g. a node lifecycle controller that has not yet taken a Ready Node's
        not-ready taint off."""
        pids = self.component_pids(binary)
        assert pids, "no %s under the control plane (%d)" % (binary, self.proc.pid)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield pids
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def stop(self):
        """SIGTERM to the control plane's supervisor (which ends its processes by PID), SIGKILL after 60 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not os.environ.get("PVESCALE_KEEP_TMP"):
            shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """The simulator with the pvescale CRDs, optionally one real agent per host (HTTPS, each on its own
    loopback address and a shared port), and config.yaml for the coordinator. kube="real" (the default): the
    simulator runs a real control plane of its own (../shared/k8s) and its kubelets, without kube-public/cluster-info
    (the tests publish it); the coordinator uses the admin's client certificate until run_as_chart(). kube=a
    ControlPlane: the simulator attaches to that shared one (which must be as clean as when it was ready), and stop()
    cleans it for the next test."""

    def __init__(self, hosts, agents=True, knobs=(), kube="real", crds=True):
        self.tmp = tempfile.mkdtemp(prefix="pvescale-coord-")
        self.shared = kube if isinstance(kube, ControlPlane) else None
        args = ["--no-cluster-info"] if kube == "real" else []
        if self.shared:
            left = self.shared.leftovers()
            assert not left, "the shared control plane is not clean: %s" % left
            args, kube = ["--kube-attach", self.shared.dir], "real"
        self.sim = simtest.Sim(hosts=hosts, knobs=knobs, kube=kube, args=args)
        self.agents = {}
        self.procs = []
        try:
            if crds:
                self.create_crds()
            if agents:
                self._start_agents()
            self.config = self.write_config()
            # The coordinator's credentials: the simulator's admin (system:masters) until run_as_chart().
            self.kubeconfig, self.coordinator_env = self.sim.ep["kube"]["kubeconfig"], {}
        except BaseException:
            self.stop()
            raise

    def create_crds(self):
        """The pvescale CRDs (done at start unless crds=False); with a real control plane, until they are served."""
        real = self.sim.real
        for crd in yaml_docs(*CRDS):
            r = self.sim.kube("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            assert r.status == 201 or (self.shared and r.status == 409), r
        if real:  # a real API server serves the new kinds a moment later
            for crd in yaml_docs(*CRDS):
                path = "/apis/%s/%s/%s" % (crd["spec"]["group"], crd["spec"]["versions"][0]["name"],
                                           crd["spec"]["names"]["plural"])
                wait_for(lambda: self.sim.kube("GET", path).status == 200, 30, 0.1, what="CRD served: " + path)

    # ---- agents ----------------------------------------------------------------------------
    def _start_agents(self):
        names = sorted(self.sim.ep["hosts"])
        ips = ["127.0.0.%d" % (i + 2) for i in range(len(names))]
        self.ca, cert, key = make_tls(self.tmp, ips)
        self.token_file, self.token = agentlib.write_token(self.tmp)
        port = free_port()
        while not port_free_on(port, ips):
            port = free_port()
        self.agent_port = port
        for name, ip in zip(names, ips):
            h = self.sim.ep["hosts"][name]
            state = os.path.join(self.tmp, "agent-" + name)
            os.makedirs(state)
            args = [AGENT, "serve", "--config", os.devnull, "--port", str(port), "--bind-address", ip,
                    "--tls-cert", cert, "--tls-key", key, "--token-file", self.token_file,
                    "--node-name", name, "--pve-config-dir", h["pve_config_dir"], "--pve-run-dir", h["pve_run_dir"],
                    "--corosync-conf", h["corosync_conf"], "--state-dir", state, "--node-policy", "static"]
            args += ["--fsroot", h["fsroot"]] if "fsroot" in h else ["--topology-xml", h["topology_xml"]]
            args += ["--pve-lxc-dir", h["pve_lxc_dir"], "--lxc-cgroup-dir", h["lxc_cgroup_dir"]]  # not this machine's
            log_path = os.path.join(self.tmp, "agent-%s.log" % name)
            with open(log_path, "w") as log:
                p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.agents[name] = {"ip": ip, "proc": p, "log": log_path}
        for name, a in self.agents.items():
            wait_for(lambda: "listening on port" in self.agent_log(name) or a["proc"].poll() is not None, 20,
                     what="agent %s" % name)
            assert a["proc"].poll() is None, self.agent_log(name)

    def agent_log(self, name):
        with open(self.agents[name]["log"]) as f:
            return f.read()

    def stop_agent(self, name):
        p = self.agents[name]["proc"]
        p.terminate()
        p.wait(15)

    # ---- config -------------------------------------------------------------------------------
    def write_config(self, extra=None, name="config.yaml"):
        lines = ["clusters:"]
        for region, e in sorted(self.sim.ep["pve"].items()):
            lines += ["  - url: %s" % e["url"], "    token_id: \"%s\"" % e["token_id"],
                      "    token_secret: \"%s\"" % e["token_secret"], "    region: %s" % region,
                      "    ca_file: %s" % self.sim.ep["ca_file"]]
        if self.agents:
            lines += ["agents:", "  port: %d" % self.agent_port, "  token_file: %s" % self.token_file,
                      "  ca_file: %s" % self.ca, "  hosts:"]
            lines += ["    %s: %s" % (n, a["ip"]) for n, a in sorted(self.agents.items())]
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("\n".join(lines + list(extra or [])) + "\n")
        return path

    # ---- the chart's RBAC ---------------------------------------------------------------------------
    def run_as_chart(self):
        """Create the ServiceAccount, Roles, ClusterRoles and bindings the chart renders (default values, release
        pvescale in kube-system), and from here run the coordinator with a token of that ServiceAccount from the
        TokenRequest API, so the simulator authorizes its every call by exactly the chart's rules (a refused call
        is a 403 and a line of GET /kube-denials). Returns the objects."""
        objs = chart_rbac_objects()
        for o in objs:
            self.create(rbac_path(o), o)
        r = self.sim.kube("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (CHART_NS, CHART_RELEASE),
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        assert r.status == 201, r
        path = os.path.join(self.tmp, "kubeconfig-sa")
        with open(self.sim.ep["kube"]["kubeconfig"]) as f:
            text = f.read()
        if self.sim.real:  # the admin's client certificate gives way to the token
            text = re.sub(r"(?m)^\s+client-(certificate|key)-data: .*\n", "", text)
            text = re.sub(r"(?m)^(\s+)user:\s*$", lambda m: m.group(0) + "\n" + m.group(1) + "  token: x", text)
        text = re.sub(r"(?m)^(\s+token: ).*$", lambda m: m.group(1) + r.json["status"]["token"], text)
        with open(path, "w") as f:
            f.write(text)
        # The Deployment's downward-API env: the Lease lives in the release namespace, where its Role is.
        self.kubeconfig, self.coordinator_env = path, {"POD_NAMESPACE": CHART_NS}
        return objs

    def denials(self):
        """kube-apiserver's 403s (GET /kube-denials: the audit log's 403s to clients other than the control plane
        and the simulated kubelets)."""
        r = self.sim.admin("GET", "/kube-denials")
        assert r.status == 200, r
        return r.json

    # ---- Kubernetes helpers ------------------------------------------------------------------------
    def create(self, path, obj):
        r = self.sim.kube("POST", path, obj)
        assert r.status == 201, r
        return r.json

    def items(self, path):
        r = self.sim.kube("GET", path)
        assert r.status == 200, r
        return r.json["items"]

    def claims(self):
        return self.items(GROUP + "/nodeclaims")

    def live_pods(self, app=None, ns="default"):
        """The pods of ns not being deleted (of the app label's value, when given)."""
        return [p for p in self.items("/api/v1/namespaces/%s/pods" % ns) if not p["metadata"].get("deletionTimestamp")
                and (app is None or (p["metadata"].get("labels") or {}).get("app") == app)]

    def pods_running(self, n, app=None):
        """Exactly n live pods (of app), all Running."""
        pods = self.live_pods(app)
        return len(pods) == n and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

    def pod_events(self, name, ns="default"):
        evs = self.items("/api/v1/namespaces/%s/events?fieldSelector=involvedObject.name=%s" % (ns, name))
        return [e for e in evs if e.get("involvedObject", {}).get("kind") == "Pod"]

    def vms(self):
        """Every non-template VM of every region."""
        out = []
        for region, e in self.sim.ep["pve"].items():
            for node in e["nodes"]:
                r = self.sim.pve("GET", "/nodes/%s/qemu" % node, region=region)
                assert r.status == 200, r
                out += [vm for vm in r.data if not vm.get("template")]
        return out

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        try:
            return self.sim.stop() if hasattr(self, "sim") else None
        finally:
            try:
                if self.shared:  # the simulator's kubelets are gone: what they and the test made goes too
                    self.shared.clean()
            finally:
                if not os.environ.get("PVESCALE_KEEP_TMP"):  # set it to look at the logs after a failure
                    shutil.rmtree(self.tmp, ignore_errors=True)


class Coordinator:
    """A running pvescale-coordinator with its own metrics and health ports."""

    def __init__(self, cluster, args=(), env=None, wait_ready=True):
        full_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "LAUNCH", "LEADER_ELECT")}
        full_env.update(cluster.coordinator_env)
        full_env.update(env or {})
        for attempt in range(5):  # a port free_port() found may be taken before the coordinator binds it
            if self._launch(cluster, args, full_env) or attempt == 4:
                break
            self.log.close()
        if wait_ready:
            try:
                wait_for(lambda: self.ready() or self.proc.poll() is not None, 30, what="coordinator /readyz")
                assert self.proc.poll() is None, "coordinator exited: " + self.logtext()
            except BaseException:
                self.stop()
                raise

    def _launch(self, cluster, args, env):
        """Start it on two fresh ports; False when it could not listen on one (another process took it)."""
        self.metrics_port, self.health_port = free_port(), free_port()
        while self.health_port == self.metrics_port:
            self.health_port = free_port()
        self.log_path = os.path.join(cluster.tmp, "coordinator-%d.log" % time.time_ns())
        self.log = open(self.log_path, "w")
        cmd = [COORDINATOR, "--config", cluster.config, "--kubeconfig", cluster.kubeconfig,
               "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port)] + list(args)
        self.started = time.time()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None and \
                self.logtext().count("listening on port") < 2:
            time.sleep(0.02)
        if self.proc.poll() is not None and "cannot listen on port" in self.logtext():
            self.proc.wait()
            return False
        return True

    def logtext(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def get(self, port, path):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def ready(self):
        return self.get(self.health_port, "/readyz")[0] == 200

    def metrics(self):
        """{"name{labels}": value} from /metrics."""
        status, text = self.get(self.metrics_port, "/metrics")
        assert status == 200, (status, text)
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def metric(self, name):
        return self.metrics().get("pvescale_coordinator_" + name, 0.0)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("coordinator did not stop within %ds:\n%s" % (timeout, self.logtext()))
        self.log.close()
        return self.proc.returncode


class CoordinatorTest(unittest.TestCase):
    """Base for tests that set self.c (a Cluster) and maybe self.co (a Coordinator): stops both, shows the
    coordinator's log tail, and asserts it exited 0 on SIGTERM."""

    def tearDown(self):
        co = getattr(self, "co", None)
        try:
            rc = co.stop() if co else 0
            if co:  # for the test log
                sys.stderr.write("coordinator log (tail):\n" + "".join(co.logtext().splitlines(True)[-80:]))
        finally:
            self.c.stop()
        self.assertEqual(rc, 0, "coordinator exit code after SIGTERM")


class SharedControlPlaneTest(CoordinatorTest):
    """Base for a class whose tests share one real control plane (ControlPlane, started in setUpClass with the class's
    kcm_flags, stopped at its end): each test gets self.c, a Cluster of the class's hosts attached to it."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"
    agents = True
    kcm_flags = None
    apiserver_flags = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cp = ControlPlane.start_for(cls, kcm_flags=cls.kcm_flags, apiserver_flags=cls.apiserver_flags)

    def setUp(self):
        self.c = Cluster(self.hosts, agents=self.agents, kube=self.cp)
        self.co = None


# ---- objects ---------------------------------------------------------------------------------------

def nodeclass(name="default", **spec):
    s = {"instanceTemplateRef": {"name": "k8s-template"}}
    s.update(spec)
    return {"apiVersion": "pvescale.io/v1alpha1", "kind": "ProxmoxNodeClass", "metadata": {"name": name}, "spec": s}


# A DaemonSet in kube-system whose pods request 100m and 128Mi on every node.
DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"app": "node-agent"}},
                      "template": {"metadata": {"labels": {"app": "node-agent"}},
                                   "spec": {"containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10",
                                                            "resources": {"requests": {"cpu": "100m",
                                                                                       "memory": "128Mi"}}}]}}}}


def nodepool(name="default", nodeclass_name="default", labels=None, requirements=None, limits=None, weight=None,
             taints=None, disruption=None):
    """A NodePool. Without disruption settings its nodes are never consolidated (consolidateAfter: Never), as
    Karpenter's own e2e suites keep scale-down out of the tests that are not about it."""
    spec = {"template": {"spec": {"nodeClassRef": {"group": "pvescale.io", "kind": "ProxmoxNodeClass",
                                                   "name": nodeclass_name}}},
            "disruption": disruption or {"consolidateAfter": "Never"}}
    if labels:
        spec["template"]["metadata"] = {"labels": labels}
    if requirements:
        spec["template"]["spec"]["requirements"] = requirements
    if taints:
        spec["template"]["spec"]["taints"] = taints
    if limits:
        spec["limits"] = limits
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "pvescale.io/v1alpha1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def pod(name, cpu="500m", memory="512Mi", labels=None, **spec):
    p = simtest.pod(name, cpu=cpu, memory=memory, **spec)
    if labels is not None:
        p["metadata"]["labels"] = labels
    return p


CHART_RELEASE, CHART_NS = "pvescale", "kube-system"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_rbac_objects():
    """The chart's ServiceAccount and RBAC objects, rendered with default values by the in-house renderer (which the
    system test `helm` proves renders exactly what `helm template` does)."""
    out = subprocess.run([HELM_RENDER, CHART, CHART_NS], check=True, capture_output=True, text=True).stdout
    return [d["object"] for d in json.loads(out) if d["object"]["kind"] in RBAC_KINDS]


def rbac_path(obj):
    """The collection URL an object is created at."""
    group, _, version = obj["apiVersion"].rpartition("/")
    base = "/apis/%s/%s" % (group, version) if group else "/api/" + version
    plural = obj["kind"].lower() + "s"
    ns = obj["metadata"].get("namespace")
    return base + ("/namespaces/%s/%s" % (ns, plural) if ns else "/" + plural)


def unschedulable(p):
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return c.get("status") == "False" and c.get("reason") == "Unschedulable"
    return False


class FirstSeen(threading.Thread):
    """A thread that calls poll() every interval seconds until halt is set, and keeps in first when each thing
    note()d was first seen (time.monotonic()). A failed poll is tried again."""

    def __init__(self, interval):
        super().__init__(daemon=True)
        self.interval = interval
        self.first = {}
        self.halt = threading.Event()

    def note(self, what, seen):
        if seen and what not in self.first:
            self.first[what] = time.monotonic()

    def poll(self):
        raise NotImplementedError

    def run(self):
        while not self.halt.is_set():
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a failed poll is tried again
                pass
            time.sleep(self.interval)
