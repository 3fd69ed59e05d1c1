# A real Kubernetes control plane for tests (etcd, kube-apiserver, kube-controller-manager, kube-scheduler from
# ../shared/k8s) on loopback, set up as kubeadm sets up a cluster; started, restarted and stopped by PID.
# SPDX-License-Identifier: Apache-2.0
import base64
import ctypes
import fcntl
import hashlib
import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request

from . import kubeclient
from . import util

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ETCD = "/usr/bin/etcd"
BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# Short periods for tests (the defaults are 5 s, 40 s and 12500 pods); callers may override any flag.
KCM_TEST_FLAGS = {"node-monitor-period": "1s", "node-monitor-grace-period": "16s", "terminated-pod-gc-threshold": "100"}
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""


class ControlPlaneError(Exception):
    pass


def shared_k8s_dir():
    """../shared/k8s of the checkout (or $PVESCALE_SHARED/k8s)."""
    shared = os.environ.get("PVESCALE_SHARED")
    if not shared:
        here = os.path.dirname(os.path.abspath(__file__))
        repo = os.path.normpath(os.path.join(here, "..", "..", ".."))
        shared = os.path.join(os.path.dirname(repo), "shared")
    return os.path.join(shared, "k8s")


def cache_dir():
    """Where the unpacked binaries live: the build's cache, else $XDG_CACHE_HOME, else a per-uid /tmp folder."""
    build = os.environ.get("PVESCALE_BUILD_DIR")
    if build and os.path.isdir(build):
        return os.path.join(build, "k8s-cache")
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "pvescale", "k8s")
    return os.path.join(tempfile.gettempdir(), "pvescale-k8s-%d" % os.getuid())


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack_binaries(src=None, cache=None):
    """{name: path} of the three binaries, unpacked once per checksum; a missing or bad ../shared/k8s raises
    ControlPlaneError naming the path."""
    src = src or shared_k8s_dir()
    cache = cache or cache_dir()
    sums_path = os.path.join(src, "SHA256SUMS")
    try:
        with open(sums_path) as f:
            sums = dict(reversed(line.split()) for line in f if line.strip())
    except (OSError, ValueError) as e:
        raise ControlPlaneError("cannot read %s (the Kubernetes binaries): %s" % (sums_path, e))
    out = {}
    for name in BINARIES:
        xz = os.path.join(src, name + ".xz")
        want = sums.get(name + ".xz")
        dest = os.path.join(cache, want or "none", name)
        out[name] = dest
        if os.access(dest, os.X_OK):
            continue
        try:
            got = _sha256(xz)
        except OSError as e:
            raise ControlPlaneError("cannot read %s: %s" % (xz, e))
        if got != want:
            raise ControlPlaneError("%s: sha256 %s does not match %s" % (xz, got, sums_path))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".unpack-", dir=os.path.dirname(dest))
        try:
            with os.fdopen(fd, "wb") as f:
                subprocess.run(["xz", "-dc", xz], stdout=f, check=True)
            os.chmod(tmp, 0o755)
            os.replace(tmp, dest)  # side by side runs: the last rename wins, both are the same file
        except (OSError, subprocess.CalledProcessError) as e:
            os.unlink(tmp)
            raise ControlPlaneError("cannot unpack %s: %s" % (xz, e))
    if not os.access(ETCD, os.X_OK):
        raise ControlPlaneError("%s is missing (Debian's etcd-server)" % ETCD)
    return out


def free_ports(n):
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _openssl(*commands, cwd):
    """Run the openssl commands (argument lists) side by side; ControlPlaneError naming the first that failed."""
    procs = [(args, subprocess.Popen(["openssl"] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
             for args in commands]
    failed = []
    for args, p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            failed.append("openssl %s: %s" % (" ".join(args[:2]), err.decode(errors="replace")))
    if failed:
        raise ControlPlaneError(failed[0])


def make_pki(pki):
    """The cluster CA (also the CSR signer), the API server's serving certificate, client certificates of the
    admin (O=system:masters), kube-controller-manager and kube-scheduler, the front-proxy CA and client, and the
    service-account key pair. Made once (under a lock: control planes of tests side by side share it) and kept."""
    os.makedirs(pki, mode=0o700, exist_ok=True)
    with open(os.path.join(pki, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(pki, "done")):
            _make_pki(pki)


def _make_pki(pki):
    with open(os.path.join(pki, "apiserver.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n")
    with open(os.path.join(pki, "client.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=clientAuth\n")
    # ECDSA P-256 keys: kube-apiserver signs every TLS handshake with its key (an RSA-2048 signature cost it about
    # 1.5 ms of CPU a connection, and the tests' clients connect often), and ES256 service-account tokens.
    cas = [["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", ca + ".key", "-out", ca + ".crt",
            "-days", "3650", "-subj", "/CN=" + cn, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"]
           for ca, cn in (("ca", "kubernetes-ca"), ("front-proxy-ca", "front-proxy-ca"))]
    certs = (("apiserver", "/CN=kube-apiserver", "ca", "apiserver.ext"),
             ("admin", "/O=system:masters/CN=kubernetes-admin", "ca", "client.ext"),
             ("controller-manager", "/CN=system:kube-controller-manager", "ca", "client.ext"),
             ("scheduler", "/CN=system:kube-scheduler", "ca", "client.ext"),
             ("front-proxy-client", "/CN=front-proxy-client", "front-proxy-ca", "client.ext"))
    csrs = [["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", name + ".key", "-out", name + ".csr", "-subj", subj]
            for name, subj, _, _ in certs]
    _openssl(*cas, *csrs, ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key"],
             cwd=pki)
    # one at a time: they share a CA's serial file
    for name, subj, ca, ext in certs:
        _openssl(["x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
                  "-CAcreateserial", "-days", "365", "-out", name + ".crt", "-extfile", ext], cwd=pki)
        os.unlink(os.path.join(pki, name + ".csr"))
    _openssl(["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"], cwd=pki)
    open(os.path.join(pki, "done"), "w").close()


def _b64file(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def kubeconfig_text(server, ca, user, cert=None, key=None, token=None):
    """A kubeconfig with one cluster and one user (client certificate or token)."""
    lines = ["apiVersion: v1", "kind: Config", "clusters:", "- name: local", "  cluster:",
             "    server: " + server, "    certificate-authority-data: " + _b64file(ca), "users:", "- name: " + user,
             "  user:"]
    if cert:
        lines += ["    client-certificate-data: " + _b64file(cert), "    client-key-data: " + _b64file(key)]
    if token:
        lines += ["    token: " + token]
    lines += ["contexts:", "- name: %s@local" % user, "  context: {cluster: local, user: %s}" % user,
              "current-context: %s@local" % user, ""]
    return "\n".join(lines)


def _die_with_parent():
    """In the child: SIGKILL when the thread that started it dies (no leftovers after a kill -9 of the owner)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def crb(name, role, group):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler in workdir. start() returns when all are
    ready and the default ServiceAccount exists; stop() ends every process by PID. Processes are started from a
    supervisor thread that lives as long as the control plane (their parent-death signal follows that thread),
    which also restarts the two controllers when they exit (they do when they lose their lease while
    kube-apiserver is away) and restarts kube-apiserver on request. kcm_flags and apiserver_flags add or replace
    flags (without the leading --), e.g. {"pod-eviction-timeout": "30s"} or, for the tolerations the
    DefaultTolerationSeconds admission plugin gives pods, {"default-unreachable-toleration-seconds": "30"}."""

    def __init__(self, workdir, kcm_flags=None, apiserver_flags=None, cluster_info=True, log_v=1, k8s_dir=None,
                 seed=True):
        self.dir = os.path.abspath(workdir)
        # one PKI for every control plane of the build (the RSA keys took 1.5 s of CPU at each start)
        self.pki = os.path.join(cache_dir(), "pki-ec")
        self.kcm_flags = dict(KCM_TEST_FLAGS, **(kcm_flags or {}))
        self.apiserver_flags = dict(apiserver_flags or {})
        self.cluster_info = cluster_info
        self.log_v = log_v
        self.k8s_dir = k8s_dir
        self.procs = {}
        self.times = {}
        self.stopping = False
        self.lock = threading.Lock()
        self.jobs = []
        self.wake = threading.Event()
        self.supervisor = None
        self.seed = seed  # start etcd from the seed (_seed_etcd)
        self.restart_controllers = True

    # ---- paths and clients ---------------------------------------------------------------------------------
    def path(self, *p):
        return os.path.join(self.dir, *p)

    @property
    def ca(self):
        return os.path.join(self.pki, "ca.crt")

    @property
    def url(self):
        return "https://127.0.0.1:%d" % self.ports["apiserver"]

    @property
    def admin_kubeconfig(self):
        return self.path("admin.kubeconfig")

    @property
    def audit_log(self):
        return self.path("logs", "audit.log")

    def admin(self):
        return kubeclient.Client(self.url, self.ca, os.path.join(self.pki, "admin.crt"),
                                 os.path.join(self.pki, "admin.key"))

    def info(self):
        """What a process attaching to this control plane needs (written to controlplane.json)."""
        return {"url": self.url, "ca": self.ca, "ca_key": os.path.join(self.pki, "ca.key"),
                "kubeconfig": self.admin_kubeconfig, "client_cert": os.path.join(self.pki, "admin.crt"),
                "client_key": os.path.join(self.pki, "admin.key"), "audit_log": self.audit_log,
                "ports": self.ports, "pids": {k: p.pid for k, p in self.procs.items()}, "times": self.times,
                "dir": self.dir}

    # ---- start ------------------------------------------------------------------------------------------------
    def prepare(self):
        """Binaries and certificates (the CA exists afterwards: the simulator signs its own certificates with it)."""
        t0 = time.monotonic()
        self.bins = unpack_binaries(self.k8s_dir)
        for d in ("logs", "etcd"):
            os.makedirs(self.path(d), exist_ok=True)
        make_pki(self.pki)
        self.times["prepare_s"] = round(time.monotonic() - t0, 2)

    def start(self, timeout=120):
        if not hasattr(self, "bins"):
            self.prepare()
        t0 = time.monotonic()
        names = ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler")
        self.ports = dict(zip(names, free_ports(len(names))))
        with open(self.path("audit-policy.yaml"), "w") as f:
            f.write(AUDIT_POLICY)
        server = "https://127.0.0.1:%d" % self.ports["apiserver"]
        for name, user, cert in (("admin", "kubernetes-admin", "admin"),
                                 ("controller-manager", "system:kube-controller-manager", "controller-manager"),
                                 ("scheduler", "system:kube-scheduler", "scheduler")):
            util.atomic_write(self.path(name + ".kubeconfig"), kubeconfig_text(
                server, self.ca, user, os.path.join(self.pki, cert + ".crt"), os.path.join(self.pki, cert + ".key")),
                0o600)
        if self.seed:
            self._seed_etcd()
        self.supervisor = threading.Thread(target=self._supervise, name="control-plane", daemon=True)
        self.supervisor.start()
        try:
            self._do(lambda: (self._spawn("etcd"), self._spawn("apiserver")))
            self._wait(self._readyz, timeout, "kube-apiserver /readyz")
            self.times["apiserver_ready_s"] = round(time.monotonic() - t0, 2)
            self._do(lambda: (self._spawn("kcm"), self._spawn("scheduler")))
            if self.cluster_info:
                self._kubeadm_objects(server)
            else:
                self._kubeadm_rbac()
            self._wait(lambda: self._healthz("kcm") and self._healthz("scheduler"), timeout,
                       "kube-controller-manager and kube-scheduler /healthz")
            self._wait(self._default_sa, timeout, "ServiceAccount default/default")
        except BaseException:
            self.stop()
            raise
        self.times["all_ready_s"] = round(time.monotonic() - t0, 2)
        util.write_json(self.path("controlplane.json"), self.info())
        util.log("control plane ready in %.2f s (kube-apiserver %.2f s), %s" % (
            self.times["all_ready_s"], self.times["apiserver_ready_s"], self.url))
        return self

    def _cmd(self, name):
        p, port = self.pki, self.ports
        v = "--v=%d" % self.log_v
        if name == "etcd":
            e, peer = "http://127.0.0.1:%d" % port["etcd"], "http://127.0.0.1:%d" % port["etcd_peer"]
            return [ETCD, "--name", "default", "--data-dir", self.path("etcd"), "--listen-client-urls", e,
                    "--advertise-client-urls", e, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", "default=" + peer]
        if name == "apiserver":
            flags = {"etcd-servers": "http://127.0.0.1:%d" % port["etcd"], "bind-address": "127.0.0.1",
                     "advertise-address": "127.0.0.1", "secure-port": str(port["apiserver"]),
                     "tls-cert-file": p + "/apiserver.crt", "tls-private-key-file": p + "/apiserver.key",
                     "client-ca-file": p + "/ca.crt", "cert-dir": self.path("generated", "apiserver"),
                     "authorization-mode": "Node,RBAC", "enable-admission-plugins": "NodeRestriction",
                     "enable-bootstrap-token-auth": "true",
                     "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
                     "service-account-key-file": p + "/sa.pub", "service-account-signing-key-file": p + "/sa.key",
                     "service-cluster-ip-range": "10.0.0.0/24", "allow-privileged": "true",
                     "endpoint-reconciler-type": "none",
                     "requestheader-client-ca-file": p + "/front-proxy-ca.crt",
                     "requestheader-allowed-names": "front-proxy-client",
                     "requestheader-username-headers": "X-Remote-User",
                     "requestheader-group-headers": "X-Remote-Group",
                     "requestheader-extra-headers-prefix": "X-Remote-Extra-",
                     "proxy-client-cert-file": p + "/front-proxy-client.crt",
                     "proxy-client-key-file": p + "/front-proxy-client.key",
                     "audit-policy-file": self.path("audit-policy.yaml"), "audit-log-path": self.audit_log}
            flags.update(self.apiserver_flags)
            return [self.bins["kube-apiserver"], v] + ["--%s=%s" % kv for kv in flags.items()]
        kc = self.path("controller-manager.kubeconfig" if name == "kcm" else "scheduler.kubeconfig")
        flags = {"kubeconfig": kc, "authentication-kubeconfig": kc, "authorization-kubeconfig": kc,
                 "bind-address": "127.0.0.1", "secure-port": str(port[name]), "leader-elect": "true",
                 "cert-dir": self.path("generated", name)}
        if name == "scheduler":
            return [self.bins["kube-scheduler"], v] + ["--%s=%s" % kv for kv in flags.items()]
        flags.update({"controllers": "*,bootstrapsigner,tokencleaner", "use-service-account-credentials": "true",
                      "service-account-private-key-file": p + "/sa.key", "root-ca-file": p + "/ca.crt",
                      "cluster-signing-cert-file": p + "/ca.crt", "cluster-signing-key-file": p + "/ca.key"})
        flags.update(self.kcm_flags)
        return [self.bins["kube-controller-manager"], v] + ["--%s=%s" % kv for kv in flags.items()]

    def _spawn(self, name):
        """In the supervisor thread only."""
        log = open(self.path("logs", name + ".log"), "ab")
        try:
            self.procs[name] = subprocess.Popen(self._cmd(name), stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        finally:
            log.close()

    def _do(self, job, timeout=60):
        """Run job in the supervisor thread and wait for it."""
        done = threading.Event()
        err = []

        def run():
            try:
                job()
            except Exception as e:  # noqa: BLE001 - handed to the caller
                err.append(e)
            finally:
                done.set()
        with self.lock:
            self.jobs.append(run)
        self.wake.set()
        if not done.wait(timeout):
            raise ControlPlaneError("control plane supervisor did not answer")
        if err:
            raise err[0]

    def _supervise(self):
        while not self.stopping:
            with self.lock:
                jobs, self.jobs = self.jobs, []
            for job in jobs:
                job()
            for name in ("kcm", "scheduler"):
                p = self.procs.get(name)
                if p is not None and p.poll() is not None and not self.stopping and self.restart_controllers:
                    # on a port of its own again: the one picked for it (free then, bound later) may have been
                    # taken meanwhile by another process, and it would exit on the same bind for ever
                    self.ports[name] = free_ports(1)[0]
                    util.log("control plane: %s (%d) exited %d; restarting it on port %d" % (
                        name, p.pid, p.returncode, self.ports[name]))
                    self._spawn(name)
            self.wake.wait(0.5)
            self.wake.clear()
        self._stop_all()

    def _wait(self, ok, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            for name, p in list(self.procs.items()):
                if p.poll() is not None and name in ("etcd", "apiserver"):
                    raise ControlPlaneError("%s exited %d; see %s" % (name, p.returncode,
                                                                     self.path("logs", name + ".log")))
            time.sleep(0.1)
        raise ControlPlaneError("timed out after %d s waiting for %s; logs in %s" % (timeout, what, self.path("logs")))

    def _readyz(self):
        try:
            return self.admin().raw("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def _healthz(self, name):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # their serving certificates are self-signed; only the answer matters
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d/healthz" % self.ports[name], context=ctx,
                                        timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def _default_sa(self):
        try:
            return self.admin().raw("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200
        except OSError:
            return False

    # ---- the etcd seed ---------------------------------------------------------------------------------------------
    def _seed_path(self):
        """The seed of this build's cache and these binaries (their checksum names the folder they are in)."""
        return os.path.join(os.path.dirname(self.bins["kube-apiserver"]), "etcd-seed")

    def _seed_etcd(self):
        """etcd's data as one control plane of these binaries and this PKI left it once it was ready (every object
        kube-apiserver and kube-controller-manager make at their first start: RBAC, API priority and fairness,
        namespaces, ServiceAccounts, kube-root-ca.crt; no lease, no event), made once per cache under a lock, then
        copied into this one's etcd folder before etcd starts: kube-apiserver finds its bootstrap objects made, as
        after a restart, and its start costs about a third less CPU (about 4 s of 12; some 35 starts in CI). A
        seed that cannot be made is logged, and the control plane starts empty as before."""
        seed = self._seed_path()
        if os.path.exists(self.path("etcd", "member")):
            return
        if not os.path.isdir(os.path.join(seed, "member")):
            try:
                with open(seed + ".lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if not os.path.isdir(os.path.join(seed, "member")):
                        self._make_seed(seed)
            except (OSError, ControlPlaneError, kubeclient.ApiError, subprocess.CalledProcessError) as e:
                util.log("control plane: no etcd seed (%s): starting empty" % e)
                return
        os.makedirs(self.path("etcd"), mode=0o700, exist_ok=True)
        subprocess.run(["cp", "-a", "--sparse=always", os.path.join(seed, "member"), self.path("etcd")], check=True)

    def _make_seed(self, seed):
        work = tempfile.mkdtemp(prefix=".etcd-seed-", dir=os.path.dirname(seed))
        try:
            cp = ControlPlane(os.path.join(work, "cp"), cluster_info=False, log_v=self.log_v, k8s_dir=self.k8s_dir,
                              seed=False)
            cp.start()
            try:
                # The controllers stopped and their leases gone: the next control plane's take them at once.
                cp.restart_controllers = False
                cp._do(lambda: [cp._end(cp.procs[n], 10) for n in ("scheduler", "kcm")])
                api = cp.admin()
                for name in ("kube-controller-manager", "kube-scheduler"):
                    api.call("DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + name,
                             ok=(200, 404))
                for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
                    api.call("DELETE", "/api/v1/namespaces/%s/events" % ns, ok=(200,))
            finally:
                cp.stop()
            if cp.procs["etcd"].returncode not in (0, -signal.SIGTERM):
                raise ControlPlaneError("etcd of the seed exited %s" % cp.procs["etcd"].returncode)
            os.rename(cp.path("etcd"), seed)
            util.log("control plane: etcd seed made in %s" % seed)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # ---- what kubeadm init creates -----------------------------------------------------------------------------
    def _kubeadm_rbac(self):
        """The ClusterRoleBindings that let bootstrap tokens of kubeadm's group ask for node client certificates and
        have them approved, and nodes renew theirs."""
        api = self.admin()
        path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
        for obj in (crb("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", BOOTSTRAP_GROUP),
                    crb("kubeadm:node-autoapprove-bootstrap",
                        "system:certificates.k8s.io:certificatesigningrequests:nodeclient", BOOTSTRAP_GROUP),
                    crb("kubeadm:node-autoapprove-certificate-rotation",
                        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes")):
            api.call("POST", path, obj, ok=(201, 409))
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cluster-info"],
                           "verbs": ["get"]}]}
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "kubeadm:bootstrap-signer-clusterinfo", "namespace": "kube-public"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                               "name": "kubeadm:bootstrap-signer-clusterinfo"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]}
        base = "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/"
        api.call("POST", base + "roles", role, ok=(201, 409))
        api.call("POST", base + "rolebindings", binding, ok=(201, 409))

    def _kubeadm_objects(self, server):
        self._kubeadm_rbac()
        self.admin().call("POST", "/api/v1/namespaces/kube-public/configmaps", cluster_info_object(server, self.ca),
                          ok=(201, 409))

    # ---- faults ---------------------------------------------------------------------------------------------------
    def restart_apiserver(self, timeout=120):
        """Stop kube-apiserver (SIGTERM, SIGKILL after 5 s) and start it again on the same port; etcd keeps the
        data. Returns the seconds until /readyz answered again."""
        t0 = time.monotonic()

        def restart():
            self._end(self.procs["apiserver"], 5)
            self._spawn("apiserver")
        self._do(restart)
        self._wait(self._readyz, timeout, "kube-apiserver /readyz after the restart")
        return round(time.monotonic() - t0, 2)

    # ---- stop -----------------------------------------------------------------------------------------------------
    @staticmethod
    def _end(p, grace):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _stop_all(self):
        for name in ("scheduler", "kcm", "apiserver", "etcd"):
            p = self.procs.get(name)
            if p is not None:
                self._end(p, 10)

    def stop(self):
        """Every process ended (SIGTERM, then SIGKILL after 10 s), by PID. Safe to call twice."""
        self.stopping = True
        self.wake.set()
        if self.supervisor is not None and self.supervisor.is_alive():
            self.supervisor.join(60)
        else:
            self._stop_all()

    def pids(self):
        return [p.pid for p in self.procs.values()]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def etcd_call(port, method, body):
    """A call to etcd's v3 JSON gateway on loopback, e.g. etcd_call(port, "kv/range", {...})."""
    req = urllib.request.Request("http://127.0.0.1:%d/v3/%s" % (port, method), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def compact_etcd(port):
    """etcd's history compacted up to its current revision (as kube-apiserver's own compaction does every 5
    minutes): a watch from an older resourceVersion then ends in 410 Gone when kube-apiserver's watch cache does not
    answer it (--watch-cache=false, or a size of 0 for the resource in --watch-cache-sizes). Returns the revision."""
    key = base64.b64encode(b"/registry/").decode()
    rev = int(etcd_call(port, "kv/range", {"key": key, "limit": 1})["header"]["revision"])
    etcd_call(port, "kv/compaction", {"revision": str(rev), "physical": True})
    return rev


def cluster_info_object(server, ca):
    """kube-public/cluster-info as kubeadm publishes it (the bootstrap signer adds a jws-kubeconfig-<id> per
    signing token)."""
    kc = ("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: %s\n"
          "    server: %s\ncontexts: null\ncurrent-context: \"\"\npreferences: {}\nusers: null\n" % (_b64file(ca), server))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": kc}}


def audit_events(path, offset=0):
    """(events, new offset) of the audit log from byte offset (complete lines only)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out, offset + end


def denial(e):
    """An audit event of a 403 as GET /kube-denials has it: time, user, verb, path, message (the
    message the client was answered, which the audit log keeps at level Metadata too; else the authorizer's reason,
    empty for RBAC)."""
    message = (e.get("responseStatus") or {}).get("message") or \
        (e.get("annotations") or {}).get("authorization.k8s.io/reason", "")
    return {"time": _epoch(e.get("stageTimestamp")), "user": (e.get("user") or {}).get("username"),
            "verb": e.get("verb"), "path": e.get("requestURI"), "message": message}


def _epoch(stamp):
    """Seconds since the epoch (as /kube-denials has them) of an audit timestamp such as
    2026-11-29T03:54:21.938123Z; None when there is none."""
    if not stamp:
        return None
    return datetime.datetime.strptime(stamp.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def denials(path, offset=0):
    """The 403 answers in the audit log."""
    evs, _ = audit_events(path, offset)
    return [denial(e) for e in evs if (e.get("responseStatus") or {}).get("code") == 403]


def main(argv=None):
    """python3 -m simlib.controlplane WORKDIR [--no-cluster-info] [--kcm-flag NAME=VALUE]...
    [--apiserver-flag NAME=VALUE]...: start one, print controlplane.json, wait for SIGTERM."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="controlplane.py")
    ap.add_argument("workdir")
    ap.add_argument("--no-cluster-info", action="store_true", help="no kube-public/cluster-info")
    ap.add_argument("--kcm-flag", action="append", default=[], metavar="NAME=VALUE",
                    help="a kube-controller-manager flag (without --), e.g. node-monitor-period=4s")
    ap.add_argument("--apiserver-flag", action="append", default=[], metavar="NAME=VALUE",
                    help="a kube-apiserver flag (without --), e.g. watch-cache=false")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    flags = {}
    for opt in ("kcm_flag", "apiserver_flag"):
        flags[opt] = dict(kv.partition("=")[::2] for kv in getattr(args, opt))
        if any(not k or not v for k, v in flags[opt].items()):
            sys.stderr.write("controlplane: --%s wants NAME=VALUE\n" % opt.replace("_", "-"))
            return 2
    cp = ControlPlane(args.workdir, kcm_flags=flags["kcm_flag"], apiserver_flags=flags["apiserver_flag"],
                      cluster_info=not args.no_cluster_info)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    try:
        cp.start()
        print(json.dumps(cp.info(), indent=1), flush=True)
        while not stop.wait(0.5):
            pass
    except ControlPlaneError as e:
        sys.stderr.write("controlplane: %s\n" % e)
        return 1
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
