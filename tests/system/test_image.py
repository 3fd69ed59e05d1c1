"""System test: packaging/build-image builds the coordinator's OCI image; unpacked, it holds no shell and runs its
configured entrypoint as 65532 inside its own root against the simulator on a real Kubernetes control plane."""
# SPDX-License-Identifier: Apache-2.0
#
# Needs root (chroot, mount namespaces), umoci, skopeo and the build dependencies. Steps:
# packaging/build-image -> the printed size and path -> `skopeo inspect --config` (user, entrypoint, labels,
# version tag) -> `skopeo copy oci-archive:... oci:DIR:TAG` (what a push reads) -> `umoci unpack` (the runtime
# config a runtime would use: args, user, env) -> the root filesystem: no shell and no program but the
# coordinator, passwd/group with 65532, the CA bundle, at most 30 MB -> the entrypoint with --version, then
# against the simulator, run as a container runtime would (a new mount and PID namespace, the root bind-mounted
# read-only as the chart's readOnlyRootFilesystem makes it, /proc and a minimal /dev, chroot with the image's
# user): Kubernetes (a real kube-apiserver, ../shared/k8s) and Proxmox reached by the name localhost, Proxmox
# verified by the image's CA bundle (to which the test adds the simulator's CA, as an operator with a private CA
# would), one agent's name found in /etc/hosts and the other's through DNS (a stub server this test runs, named in
# /etc/resolv.conf); /readyz,
# a NodeClaim for a pending pod (--launch=false), the process's uid, gid, capabilities and PID 1, every mapped
# file inside the image, and exit 0 on SIGTERM.
import fcntl
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import coordlib as cl  # noqa: E402
from checks import check, failures, summary  # noqa: E402

SOURCE = os.path.abspath(os.environ.get("PVESCALE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", ".."))
MAX_BYTES = 30 * 1000 * 1000
ENTRYPOINT = "/usr/bin/pvescale-coordinator"
HOSTS = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"
DOMAIN = "pvescale.test"
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox"}


def sh(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def project_version():
    text = open(os.path.join(SOURCE, "meson.build")).read()
    return re.search(r"project\([^)]*?version:\s*'([^']+)'", text, re.S).group(1)


# ---- the image, as built and as a runtime reads it ----

def build(out):
    """packaging/build-image, then its archive copied into out. Its OUTDIR is the meson build's image-out/ when
    PVESCALE_BUILD_DIR names one (under a lock): this test and install-guide then share its release build of the
    coordinator (the second finds it compiled, and still makes the root filesystem, the layer and the archive)."""
    build_dir = os.environ.get("PVESCALE_BUILD_DIR")
    outdir = os.path.join(build_dir, "image-out") if build_dir and os.path.isdir(build_dir) else out
    os.makedirs(out, exist_ok=True)
    with open(outdir + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = sh([os.path.join(SOURCE, "packaging", "build-image"), outdir])
        print(p.stdout[-3000:] + p.stderr[-3000:])
        check(p.returncode == 0, "packaging/build-image succeeded")
        lines = p.stdout.strip().splitlines()
        archive = lines[-1] if lines else ""
        check(os.path.isfile(archive) and archive.endswith(".oci.tar"), "last line is the OCI archive: " + archive)
        if os.path.isfile(archive) and outdir != out:
            archive = shutil.copy(archive, out)
    m = re.search(r"(\d+) bytes uncompressed", p.stdout)
    check(m is not None and int(m.group(1)) <= MAX_BYTES, "printed uncompressed size %s <= %d" %
          (m and m.group(1), MAX_BYTES))
    return archive, int(m.group(1)) if m else None


def inspect(archive, version):
    p = sh(["skopeo", "inspect", "--config", "oci-archive:" + archive])
    check(p.returncode == 0, "skopeo reads the archive")
    cfg = json.loads(p.stdout) if p.returncode == 0 else {"config": {}}
    c = cfg.get("config") or {}
    check(c.get("User") == "65532:65532", "image config User = 65532:65532 (%r)" % c.get("User"))
    check(c.get("Entrypoint") == [ENTRYPOINT], "entrypoint = %s (%r)" % (ENTRYPOINT, c.get("Entrypoint")))
    labels = c.get("Labels") or {}
    check(labels.get("org.opencontainers.image.version") == version, "label version = %s" % version)
    for k in ("title", "source", "licenses", "revision", "created"):
        check(labels.get("org.opencontainers.image." + k), "label org.opencontainers.image.%s set" % k)
    check(cfg.get("os") == "linux" and cfg.get("architecture"), "os linux, architecture %s" % cfg.get("architecture"))
    check(len(cfg.get("rootfs", {}).get("diff_ids", [])) == 1, "one layer")


def copy_and_unpack(archive, version, tmp):
    """skopeo copies the archive to an OCI layout (the reading side of a push); umoci unpacks it as a runtime
    bundle. Returns (rootfs, runtime process config, uncompressed layer bytes)."""
    layout = os.path.join(tmp, "layout")
    p = sh(["skopeo", "copy", "oci-archive:" + archive, "oci:%s:%s" % (layout, version)])
    print(p.stdout[-1500:] + p.stderr[-1500:])
    check(p.returncode == 0, "skopeo copy oci-archive:... oci:%s:%s" % (layout, version))
    index = json.load(open(os.path.join(layout, "index.json")))
    tags = [m.get("annotations", {}).get("org.opencontainers.image.ref.name") for m in index["manifests"]]
    check(version in tags, "tagged %s in the layout (%s)" % (version, tags))
    manifest = json.load(open(blob(layout, index["manifests"][0]["digest"])))
    layer_bytes = 0
    for layer in manifest["layers"]:
        with gzip.open(blob(layout, layer["digest"])) as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                layer_bytes += len(chunk)
    check(0 < layer_bytes <= MAX_BYTES, "uncompressed layers %d bytes <= %d" % (layer_bytes, MAX_BYTES))
    bundle = os.path.join(tmp, "bundle")
    p = sh(["umoci", "unpack", "--image", "%s:%s" % (layout, version), bundle])
    check(p.returncode == 0, "umoci unpack: " + p.stderr[-500:])
    process = json.load(open(os.path.join(bundle, "config.json")))["process"]
    return os.path.join(bundle, "rootfs"), process, layer_bytes


def blob(layout, digest):
    algo, hexd = digest.split(":")
    return os.path.join(layout, "blobs", algo, hexd)


def check_rootfs(root, process, layer_bytes):
    check(process["args"] == [ENTRYPOINT], "runtime args = the entrypoint (%r)" % process["args"])
    check(process["user"].get("uid") == 65532 and process["user"].get("gid") == 65532,
          "runtime user 65532:65532 (%r)" % process["user"])
    check("HOME=/home/nonroot" in process["env"], "HOME from the image's /etc/passwd is /home/nonroot")
    check(not os.path.lexists(os.path.join(root, "bin", "sh")), "no /bin/sh")
    shells, programs, total = [], [], 0
    for d, dirs, files in os.walk(root):
        for name in files + dirs:
            path = os.path.join(d, name)
            rel = "/" + os.path.relpath(path, root)
            if name in SHELLS:
                shells.append(rel)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
                if st.st_mode & 0o111 and is_program(path):
                    programs.append(rel)
    check(not shells, "no shell or busybox anywhere (%s)" % shells)
    check(programs == [ENTRYPOINT], "the only program (ELF with an interpreter, or #! script) is %s (%s)" %
          (ENTRYPOINT, programs))
    check(total <= MAX_BYTES and total <= layer_bytes, "files add up to %d bytes <= %d" % (total, MAX_BYTES))
    passwd = open(os.path.join(root, "etc", "passwd")).read()
    group = open(os.path.join(root, "etc", "group")).read()
    check(re.search(r"^nonroot:x:65532:65532:[^:]*:/home/nonroot:", passwd, re.M) is not None, "passwd has 65532")
    check(re.search(r"^nonroot:x:65532:", group, re.M) is not None, "group has 65532")
    home = os.stat(os.path.join(root, "home", "nonroot"))
    check((home.st_uid, home.st_gid) == (65532, 65532), "/home/nonroot belongs to 65532")
    bundle = open(os.path.join(root, "etc", "ssl", "certs", "ca-certificates.crt")).read()
    check(bundle.count("BEGIN CERTIFICATE") > 100, "CA bundle with %d certificates" % bundle.count("BEGIN CERTIFICATE"))
    check(stat.S_IMODE(os.stat(os.path.join(root, "tmp")).st_mode) == 0o1777, "/tmp is 1777")
    status_d = os.path.join(root, "var", "lib", "dpkg", "status.d")
    check("libc6" in os.listdir(status_d) and "ca-certificates" in os.listdir(status_d),
          "dpkg status.d names the packages (libc6, ca-certificates, ...)")


def is_program(path):
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"#!"):
        return True
    if not head.startswith(b"\x7fELF") or head[4] != 2:
        return False
    phoff, = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    with open(path, "rb") as f:
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    # PT_INTERP = 3: an executable for the loader. libc.so.6 has one too (it prints its version): a library, by name.
    interp = any(struct.unpack_from("<I", table, i * phentsize)[0] == 3 for i in range(phnum))
    return interp and ".so" not in os.path.basename(path)


# ---- running the entrypoint as a runtime would ----

# A new mount and PID namespace: the root bind-mounted read-only, /proc and a minimal /dev, then chroot as the
# image's user. The entrypoint is PID 1 of its namespace, as in a pod.
RUNTIME = r'''
set -eu
root=$1; user=$2; shift 2
mount --bind "$root" "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,mode=0755,size=64k tmpfs "$root/dev"
for d in null:3 zero:5 full:7 random:8 urandom:9; do mknod -m 666 "$root/dev/${d%:*}" c 1 "${d#*:}"; done
mount -o remount,bind,ro "$root"
exec chroot --userspec="$user" --groups="${user#*:}" "$root" "$@"
'''


class Container:
    def __init__(self, root, process, args, log_path, extra_env=None):
        for d in ("proc", "dev"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        env = dict(e.split("=", 1) for e in process["env"])
        env.update(extra_env or {})
        user = "%d:%d" % (process["user"]["uid"], process["user"]["gid"])
        self.root = root
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = ["unshare", "--mount", "--pid", "--fork", "--", "/bin/sh", "-c", RUNTIME, "runtime", root, user]
        self.proc = subprocess.Popen(cmd + process["args"] + list(args), stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, cwd="/")
        self.pid = None

    def entry_pid(self):
        """The host PID of the entrypoint (the child of unshare, once it runs the image's binary)."""
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                ppid = int(open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1])
                exe = os.readlink("/proc/%s/exe" % d)
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.proc.pid and exe == self.root + ENTRYPOINT:
                return int(d)
        return None

    def started(self, timeout=10):
        found = poll(lambda: self.entry_pid() or (self.proc.poll() is not None and -1), timeout)
        self.pid = found if found and found > 0 else None
        return self.pid is not None

    def logtext(self):
        self.log.flush()
        return open(self.log_path).read()

    def stop(self, timeout=20):
        self.pid = self.pid or self.entry_pid()
        if self.proc.poll() is None and self.pid:
            os.kill(self.pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if self.pid:  # PID 1 of its namespace: SIGKILL from outside ends it and the namespace
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.kill()  # unshare
            rc = self.proc.wait()
        self.log.close()
        return rc


def check_version(root, process, version, tmp):
    c = Container(root, process, ["--version"], os.path.join(tmp, "version.log"))
    rc = c.proc.wait(20)
    out = c.logtext().strip()
    c.log.close()
    check(rc == 0 and out == "pvescale-coordinator " + version, "entrypoint --version: %r (exit %s)" % (out, rc))


# ---- a DNS server for one name ----

class DnsStub(threading.Thread):
    """UDP DNS on addr:53: A records from names, NOERROR without answers for other types of those names,
    NXDOMAIN for the rest. Remembers every question."""

    def __init__(self, names):
        super().__init__(daemon=True)
        self.names = names
        self.questions = []
        self.sock = None
        for _ in range(20):
            self.addr = "127.53.%d.%d" % (random.randint(0, 255), random.randint(1, 254))
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind((self.addr, 53))
                self.sock = s
                break
            except OSError:
                s.close()
        assert self.sock, "no loopback address with port 53 free"
        self.sock.settimeout(0.2)
        self.stopping = False

    def run(self):
        while not self.stopping:
            try:
                data, peer = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                self.sock.sendto(self.answer(data), peer)
            except (ValueError, IndexError, struct.error, OSError):
                continue

    def answer(self, q):
        qid, _, qd = struct.unpack_from(">HHH", q, 0)
        labels, i = [], 12
        while q[i]:
            labels.append(q[i + 1:i + 1 + q[i]].decode().lower())
            i += 1 + q[i]
        qtype, = struct.unpack_from(">H", q, i + 1)
        question = q[12:i + 5]
        name = ".".join(labels)
        self.questions.append((name, qtype))
        ip = self.names.get(name)
        rcode = 0 if ip else 3
        answers = b""
        if ip and qtype == 1:
            answers = struct.pack(">HHHIH", 0xC00C, 1, 1, 30, 4) + socket.inet_aton(ip)
        head = struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1, 1 if answers else 0, 0, 0)
        return head + question + answers

    def stop(self):
        self.stopping = True
        self.join(2)
        self.sock.close()


# ---- against the simulator ----

def make_tls_with_names(dirpath, ips):
    """The agents' CA and certificate (coordlib's), whose names also hold pveN.pvescale.test."""
    ca_key, ca = os.path.join(dirpath, "ca.key"), os.path.join(dirpath, "ca.pem")
    key, csr, cert = (os.path.join(dirpath, n) for n in ("server.key", "server.csr", "server.pem"))
    ext = os.path.join(dirpath, "san.ext")
    run = lambda args: subprocess.run(["openssl"] + args, check=True, capture_output=True)  # noqa: E731
    run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", ca_key,
         "-out", ca, "-days", "2", "-subj", "/CN=pvescale image test CA"])
    run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr,
         "-subj", "/CN=localhost"])
    names = ["DNS:localhost"] + ["DNS:pve%d.%s" % (i + 1, DOMAIN) for i in range(len(ips))]
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join(names + ["IP:" + ip for ip in ips]) + "\n")
    run(["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2",
         "-extfile", ext])
    return ca, cert, key


def put(root, path, text, mode=0o644, owner=(0, 0)):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)
    os.chmod(full, mode)
    os.chown(full, *owner)


def configure_root(root, c, dns):
    """What the pod would have mounted: config, kubeconfig, the agents' token and CA, /etc/hosts and
    /etc/resolv.conf; and the simulator's CA added to the image's bundle (Proxmox has no ca_file)."""
    sim = c.sim.ep
    kubeconfig = open(sim["kube"]["kubeconfig"]).read().replace("https://127.0.0.1:", "https://localhost:")
    put(root, "/etc/pvescale/kubeconfig", kubeconfig, 0o400, (65532, 65532))
    region, pve = sorted(sim["pve"].items())[0]
    hosts = sorted(c.agents)
    lines = ["clusters:", "  - url: %s" % pve["url"].replace("https://127.0.0.1:", "https://localhost:"),
             "    token_id: \"%s\"" % pve["token_id"], "    token_secret: \"%s\"" % pve["token_secret"],
             "    region: %s" % region,
             "agents:", "  port: %d" % c.agent_port, "  token_file: /etc/pvescale/agents/token",
             "  ca_file: /etc/pvescale/agents/ca.crt", "  hosts:"]
    lines += ["    %s: %s.%s" % (n, n, DOMAIN) for n in hosts]
    put(root, "/etc/pvescale/config.yaml", "\n".join(lines) + "\n", 0o444)
    put(root, "/etc/pvescale/agents/token", c.token + "\n", 0o400, (65532, 65532))
    put(root, "/etc/pvescale/agents/ca.crt", open(c.ca).read(), 0o444)
    # The first agent by /etc/hosts, the others by DNS.
    first = hosts[0]
    put(root, "/etc/hosts", "127.0.0.1\tlocalhost\n%s\t%s.%s\n" % (c.agents[first]["ip"], first, DOMAIN))
    put(root, "/etc/resolv.conf", "nameserver %s\noptions timeout:1 attempts:3\n" % dns.addr)
    bundle = os.path.join(root, "etc", "ssl", "certs", "ca-certificates.crt")
    with open(bundle, "a") as f:
        f.write(open(sim["ca_file"]).read())
    return first, hosts[1:]


def poll(fn, timeout):
    """fn()'s first true value within timeout seconds, else its last value (a check then says what failed)."""
    deadline = time.time() + timeout
    while True:
        last = fn()
        if last or time.time() > deadline:
            return last
        time.sleep(0.1)


def http_get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def metric_values(port):
    status, text = http_get(port, "/metrics")
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+) (\S+)$", line)
        if m and not line.startswith("#"):
            out[m.group(1)] = float(m.group(2))
    return status, out


def proc_status(pid):
    out = {}
    for line in open("/proc/%d/status" % pid):
        k, _, v = line.partition(":")
        out[k] = v.split()
    return out


def check_process(ctr):
    pid = ctr.pid
    st = proc_status(pid)
    check(st["Uid"] == ["65532"] * 4, "runs as uid 65532 (real, effective, saved, fs: %s)" % st["Uid"])
    check(st["Gid"] == ["65532"] * 4, "runs as gid 65532 (%s)" % st["Gid"])
    check(st.get("Groups") == ["65532"], "supplementary groups: 65532 (%s)" % st.get("Groups"))
    check(int(st["CapEff"][0], 16) == 0 and int(st["CapPrm"][0], 16) == 0, "no capabilities")
    check(st["NSpid"][-1] == "1", "PID 1 in its namespace, as in a pod (NSpid %s)" % st["NSpid"])
    check(os.readlink("/proc/%d/root" % pid) == ctr.root, "its root is the image's")
    mapped = set()
    for line in open("/proc/%d/maps" % pid):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and not parts[5].startswith("/memfd:"):
            mapped.add(parts[5].strip().replace(" (deleted)", ""))
    outside = sorted(p for p in mapped if not p.startswith(ctr.root + "/"))
    check(mapped and not outside, "every mapped file is the image's (%d; outside: %s)" % (len(mapped), outside))
    libs = sorted(os.path.basename(p) for p in mapped if ".so" in p)
    print("     mapped libraries: " + " ".join(libs))


def against_simulator(root, process, tmp):
    dns = None
    cl.make_tls = make_tls_with_names  # the agents' certificate names pveN.pvescale.test too
    c = cl.Cluster(HOSTS, kube="real")  # a real control plane (../shared/k8s): the image talks to kube-apiserver
    ctr = None
    try:
        # DNS knows every agent's name but the first's, which only /etc/hosts has.
        dns = DnsStub({"%s.%s" % (n, DOMAIN): c.agents[n]["ip"] for n in sorted(c.agents)[1:]})
        dns.start()
        by_hosts, by_dns = configure_root(root, c, dns)
        metrics_port, health_port = cl.free_port(), cl.free_port()
        while health_port == metrics_port:
            health_port = cl.free_port()
        args = ["--config", "/etc/pvescale/config.yaml", "--kubeconfig", "/etc/pvescale/kubeconfig",
                "--metrics-port", str(metrics_port), "--health-port", str(health_port), "--launch=false",
                "--batch-idle-duration=200ms", "--batch-max-duration=2s"]
        ctr = Container(root, process, args, os.path.join(tmp, "coordinator.log"),
                        {"POD_NAME": "pvescale-coordinator-0", "POD_NAMESPACE": "kube-system"})
        check(ctr.started(), "the entrypoint started in its root")
        ready = lambda: http_get(health_port, "/readyz")[0] == 200  # noqa: E731
        ok = poll(lambda: ready() or ctr.proc.poll() is not None, 30) and ctr.proc.poll() is None
        check(ok, "/readyz answers 200 (Kubernetes at https://localhost, its CA from the kubeconfig)")
        if ok:
            check_process(ctr)
            c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass())
            c.create(cl.GROUP + "/nodepools", cl.nodepool("default"))
            c.create("/api/v1/namespaces/default/pods", cl.pod("web-0", cpu="1", memory="1Gi"))
            claims = poll(lambda: [x for x in c.claims() if x["metadata"].get("labels", {})
                                   .get("pvescale.io/nodepool") == "default"], 30)
            check(len(claims) == 1, "a NodeClaim for the pending pod: %s" % [x["metadata"]["name"] for x in claims])
            # The round writes its Nominated events after it has created the claims: wait for it too.
            nominated = poll(lambda: [e for e in c.pod_events("web-0") if e["reason"] == "Nominated"], 30)
            check(len(nominated) >= 1, "the pod is Nominated to it")
            status, m = metric_values(metrics_port)
            check(status == 200, "/metrics answers")
            errors = {k: v for k, v in m.items() if k.startswith("pvescale_coordinator_api_errors_total") and v}
            check(not errors, "no API errors (Kubernetes, Proxmox, agents): %s" % errors)
            check(m.get("pvescale_coordinator_agent_fallbacks_total", 0) == 0,
                  "no host fell back to Proxmox accounting: every agent answered by its name")
            pve_calls = c.sim.admin("GET", "/calls").json["pve"]
            check(sum(pve_calls.values()) > 0, "Proxmox answered %d calls over TLS verified by the image's CA bundle" %
                  sum(pve_calls.values()))
            asked = {n for n, t in dns.questions}
            check(all("%s.%s" % (n, DOMAIN) in asked for n in by_dns),
                  "%s found through DNS (questions: %s)" % (by_dns, sorted(asked)))
            check("%s.%s" % (by_hosts, DOMAIN) not in asked, "%s found in /etc/hosts, not asked of DNS" % by_hosts)
            check(m.get("process_open_fds", 0) > 0, "process_* metrics read from /proc inside the root")
        rc = ctr.stop()
        ctr = None
        check(rc == 0, "exit 0 on SIGTERM as PID 1 (exit %s)" % rc)
    finally:
        if ctr:
            ctr.stop()
        log = open(os.path.join(tmp, "coordinator.log")).read() if os.path.exists(os.path.join(tmp, "coordinator.log")) else ""
        print("coordinator log (tail):\n" + "".join(log.splitlines(True)[-40:]))
        if dns:
            dns.stop()
        c.stop()


def main():
    if os.geteuid() != 0:
        print("needs root (chroot and mount namespaces)")
        return 77
    version = project_version()
    tmp = tempfile.mkdtemp(prefix="pvescale-image-")
    try:
        archive, _ = build(os.path.join(tmp, "out"))
        if failures:
            return summary()
        print("     archive sha256 %s" % hashlib.sha256(open(archive, "rb").read()).hexdigest())
        inspect(archive, version)
        root, process, layer_bytes = copy_and_unpack(archive, version, tmp)
        check_rootfs(root, process, layer_bytes)
        check_version(root, process, version, tmp)
        against_simulator(root, process, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
