"""agentlib: helpers for integration tests that run a real pvescale-agent (TLS material, topologies, process)."""
# SPDX-License-Identifier: Apache-2.0
import json
import os
import re
import signal
import subprocess
import tarfile
import tempfile
import time

SHARED = os.environ.get("PVESCALE_SHARED") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")
BUILD = os.environ.get("PVESCALE_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "build")
AGENT = os.path.join(BUILD, "agent", "pvescale-agent")
TOPOLOGIES = os.path.join(SHARED, "topologies")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def make_tls(dirpath, ips=("127.0.0.1",)):
    """A test CA and a server certificate for localhost and every IP in ips, signed by it. Returns (ca, cert, key)."""
    ca_key, ca = os.path.join(dirpath, "ca.key"), os.path.join(dirpath, "ca.pem")
    key, csr, cert = (os.path.join(dirpath, n) for n in ("server.key", "server.csr", "server.pem"))
    ext = os.path.join(dirpath, "san.ext")
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=pvescale test CA"])
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=localhost"])
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost," + ",".join("IP:" + ip for ip in ips) + "\n")
    run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", ext])
    return ca, cert, key


def write_token(dirpath, token="test-token-0123456789abcdef", mode=0o600):
    path = os.path.join(dirpath, "agent.token")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, mode)
    return path, token


_extracted = {}


def topology_args(name):
    """Command-line flags that load the named reference topology (--fsroot DIR or --topology-xml F)."""
    with open(os.path.join(TOPOLOGIES, "manifest.json")) as f:
        manifest = json.load(f)
    for entry in manifest["topologies"]:
        if entry["name"] != name:
            continue
        if entry["format"] == "linux-sysfs-tarball":
            if name not in _extracted:
                d = tempfile.mkdtemp(prefix="pvescale-topo-")
                with tarfile.open(os.path.join(TOPOLOGIES, entry["file"])) as t:
                    t.extractall(d)
                _extracted[name] = os.path.join(d, entry["load"]["fsroot_subdir"])
            return ["--fsroot", _extracted[name]]
        return ["--topology-xml", os.path.join(TOPOLOGIES, entry["file"])]
    raise KeyError(name)


def static_agent_setup(case, prefix, topology="32intel64-2p8co2t+8ve"):
    """Give a test case a directory of its own with a TLS certificate, a token, a qemu-server config dir, a run dir
    and a state dir, and case.args: the flags of one agent on them (static policy, node pve1, region lab)."""
    case.tmp = tempfile.mkdtemp(prefix=prefix)
    case.ca, cert, key = make_tls(case.tmp)
    case.token_file, case.token = write_token(case.tmp)
    case.conf_dir = os.path.join(case.tmp, "qemu-server")
    case.run_dir = os.path.join(case.tmp, "run")
    case.state_dir = os.path.join(case.tmp, "state")
    for d in (case.conf_dir, case.run_dir, case.state_dir):
        os.makedirs(d)
    case.args = topology_args(topology) + [
        "--config", os.devnull, "--tls-cert", cert, "--tls-key", key, "--token-file", case.token_file,
        "--pve-config-dir", case.conf_dir, "--pve-run-dir", case.run_dir, "--state-dir", case.state_dir,
        "--node-name", "pve1", "--region", "lab", "--node-policy", "static"]


def topology_names():
    with open(os.path.join(TOPOLOGIES, "manifest.json")) as f:
        return [t["name"] for t in json.load(f)["topologies"]]


class Agent:
    """A running pvescale-agent serve process; stop() or use as a context manager."""

    def __init__(self, args, env=None, wrapper=()):
        """wrapper: a command to run the agent under, such as ("prlimit", "--nofile=1024")."""
        self.proc = subprocess.Popen(list(wrapper) + [AGENT, "serve", "--port", "0", "--bind-address", "127.0.0.1"] + args,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, **(env or {})))
        self.port = None
        self.lines = []
        deadline = time.time() + 20
        while time.time() < deadline and self.port is None:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"listening on port (\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.stop()
            raise RuntimeError("agent did not start:\n" + "".join(self.lines))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout and not self.proc.stdout.closed:
            self.lines.append(self.proc.stdout.read() or "")
            self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def curl(url, ca=None, token=None, method="GET", body=None, extra=()):
    """One request through the curl CLI (libcurl). Returns (status, body text); status 0 = transport failure."""
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "--max-time", "20"]
    if ca:
        cmd += ["--cacert", ca]
    if token:
        cmd += ["-H", "Authorization: Bearer " + token]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body]
    cmd += list(extra) + [url]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout.rsplit("\n", 1)
    status = int(out[-1]) if out[-1].isdigit() else 0
    return status, (out[0] if len(out) > 1 else "") + p.stderr if status == 0 else out[0]
