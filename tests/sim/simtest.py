# Test helpers: start the simulator in a temp dir and talk to its PVE, Kubernetes and admin endpoints.
# SPDX-License-Identifier: Apache-2.0
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "run")

FAST = ["auth_delay_seconds=0.2", "clone_seconds=0.2", "stats_delay_seconds=0.3", "join_delay_seconds=0.2",
        "ready_delay_seconds=0.2", "pod_start_seconds=0.1", "create_seconds=0.05", "destroy_seconds=0.05",
        "start_seconds=0.0", "shutdown_seconds=0.05"]


def wait_for(fn, timeout=15.0, interval=0.05, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s (last=%r)" % (timeout, what, last))


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.raw = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    @property
    def data(self):
        return (self.json or {}).get("data")

    def __repr__(self):
        return "<%d %s %s>" % (self.status, self.reason, self.raw[:300])


def compiled_standin():
    """The compiled stand-in for VM processes when the build has it (env PVESCALE_BUILD_DIR), else None."""
    build = os.environ.get("PVESCALE_BUILD_DIR")
    path = os.path.join(build, "tests", "sim", "standin-kvm") if build else None
    return path if path and os.access(path, os.X_OK) else None


class Sim:
    def __init__(self, hosts=None, args=(), knobs=(), scenario=None, qemu=False, standin="compiled", kube="real"):
        """standin: "compiled" (the build's standin-kvm when there is one) or "python". kube: "real" (a real control
        plane; args may add --kube-attach DIR or --no-cluster-info) or "none" (Proxmox VE only)."""
        self.dir = tempfile.mkdtemp(prefix="pvescale-sim-test-")
        self.state = os.path.join(self.dir, "state")
        cmd = [sys.executable, RUN, "--state-dir", self.state]
        if hosts:
            cmd += ["--hosts", hosts]
        if scenario is not None:
            path = os.path.join(self.dir, "scenario.json")
            with open(path, "w") as f:
                json.dump(scenario, f)
            cmd += ["--scenario", path]
        if qemu:
            cmd.append("--qemu")
        compiled = compiled_standin() if standin == "compiled" else None
        if compiled:
            cmd += ["--standin", compiled]
        for k in list(FAST) + list(knobs):
            cmd += ["--set", k]
        cmd += ["--kube", kube]
        cmd += list(args)
        self.log = open(os.path.join(self.dir, "sim.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        ep = os.path.join(self.state, "endpoints.json")
        try:
            # a real control plane takes 7-10 s to start on an idle machine, several times that under load
            wait_for(lambda: os.path.exists(ep) or self.proc.poll() is not None, 30 if kube == "none" else 180,
                     what="endpoints.json")
        except AssertionError:
            self.stop()
            raise
        if self.proc.poll() is not None:
            raise AssertionError("simulator exited early: %s" % self.logtext())
        with open(ep) as f:
            self.ep = json.load(f)
        self.ctx = ssl.create_default_context(cafile=self.ep["ca_file"])
        self.kube_ctx = self.ctx
        self.real = bool(self.ep["kube"])
        if self.real:  # the admin's client certificate (O=system:masters); the one CA signs both APIs' certificates
            self.kube_ctx = ssl.create_default_context(cafile=self.ep["kube"]["ca"])
            self.kube_ctx.load_cert_chain(self.ep["kube"]["client_cert"], self.ep["kube"]["client_key"])
        r1 = next(iter(self.ep["pve"]))
        self.region = r1

    def logtext(self):
        if not self.log.closed:
            self.log.flush()
        with open(os.path.join(self.dir, "sim.log")) as f:
            return f.read()

    def stop(self, cleanup=True):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        text = self.logtext()
        if cleanup:
            shutil.rmtree(self.dir, ignore_errors=True)
        if "Traceback" in text:
            raise AssertionError("simulator logged an internal error:\n" + text[-4000:])
        return self.proc.returncode

    # ---- raw HTTP ---------------------------------------------------------------
    def _request(self, url, method, path, body=None, headers=None, timeout=30, ctx=None):
        u = urllib.parse.urlsplit(url)
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx or self.ctx, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            conn.request(method, u.path.rstrip("/") + path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            return Response(r.status, r.reason, dict(r.getheaders()), data)
        finally:
            conn.close()

    # ---- PVE ------------------------------------------------------------------------
    def pve_auth(self, region=None, token_id=None, secret=None):
        e = self.ep["pve"][region or self.region]
        return "PVEAPIToken=%s=%s" % (token_id or e["token_id"], secret or e["token_secret"])

    def pve(self, method, path, params=None, region=None, auth=None, json_body=None, raw_body=None, ctype=None):
        e = self.ep["pve"][region or self.region]
        headers = {"Authorization": auth if auth is not None else self.pve_auth(region)}
        body = None
        q = ""
        if json_body is not None:
            body = json.dumps(json_body)
            headers["Content-Type"] = "application/json"
        elif raw_body is not None:
            body = raw_body
            headers["Content-Type"] = ctype
        elif params:
            if method in ("GET", "DELETE"):
                q = "?" + urllib.parse.urlencode(params)
            else:
                body = urllib.parse.urlencode(params)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
        if not auth and auth is not None:
            headers.pop("Authorization")
        return self._request(e["url"], method, path + q, body, headers)

    def wait_task(self, upid, node=None, timeout=15):
        node = node or upid.split(":")[1]
        path = "/nodes/%s/tasks/%s/status" % (node, urllib.parse.quote(upid, safe=""))

        def done():
            r = self.pve("GET", path)
            return r.data if r.status == 200 and r.data["status"] == "stopped" else None
        return wait_for(done, timeout, what="task %s" % upid)

    def clone(self, newid, name, node="pve1", template=None, **extra):
        tmpl = template or self.ep["pve"][self.region]["templates"][node]
        params = {"newid": newid, "name": name}
        params.update(extra)
        r = self.pve("POST", "/nodes/%s/qemu/%d/clone" % (node, tmpl), params)
        assert r.status == 200, r
        st = self.wait_task(r.data)
        assert st["exitstatus"] == "OK", st
        return st

    def upload_iso(self, node, filename, data, storage="local"):
        boundary = "----sim" + uuid.uuid4().hex
        parts = []
        parts.append(b"--%s\r\nContent-Disposition: form-data; name=\"content\"\r\n\r\niso\r\n" % boundary.encode())
        parts.append(b"--%s\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"%s\"\r\n"
                     b"Content-Type: application/octet-stream\r\n\r\n" % (boundary.encode(), filename.encode()) + data + b"\r\n")
        parts.append(b"--%s--\r\n" % boundary.encode())
        return self.pve("POST", "/nodes/%s/storage/%s/upload" % (node, storage), raw_body=b"".join(parts),
                        ctype="multipart/form-data; boundary=%s" % boundary)

    # ---- Kubernetes -------------------------------------------------------------------
    def kube(self, method, path, body=None, ctype="application/json", token=None, timeout=30,
             accept="application/json"):
        headers = self._kube_auth(token)
        headers["Accept"] = accept
        data = None
        if body is not None:
            data = json.dumps(body) if not isinstance(body, (bytes, str)) else body
            headers["Content-Type"] = ctype
        return self._request(self.ep["kube"]["url"], method, path, data, headers, timeout, self.kube_ctx)

    def _kube_auth(self, token=None):
        """The Authorization header of the token given; none without, where the client certificate of kube_ctx is
        the admin's credential."""
        return {} if token is None else {"Authorization": "Bearer %s" % token}

    def kube_conn(self):
        u = urllib.parse.urlsplit(self.ep["kube"]["url"])
        return http.client.HTTPSConnection(u.hostname, u.port, context=self.kube_ctx, timeout=30)

    def watch(self, path, timeout=30, accept=None):
        """Open a watch; returns (connection, response) to read JSON lines from."""
        conn = self.kube_conn()
        headers = self._kube_auth()
        if accept:
            headers["Accept"] = accept
        conn.request("GET", path, headers=headers)
        return conn, conn.getresponse()

    # ---- admin --------------------------------------------------------------------------
    def admin(self, method, path, body=None, timeout=None):
        """An admin call. A kube-restart waits for a real kube-apiserver's /readyz (up to 120 s on a loaded machine):
        its client waits longer than that by default."""
        data = json.dumps(body) if body is not None else None
        if timeout is None:
            timeout = 180 if path == "/actions/kube-restart" else 30
        return self._request(self.ep["admin"]["url"], method, path, data, {"Content-Type": "application/json"},
                             timeout=timeout)

    def knobs(self, **kv):
        r = self.admin("POST", "/knobs", kv)
        assert r.status == 200, r
        return r.json


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def make_iso(path, files):
    """Build a cloud-init style ISO (label cidata, Joliet + Rock Ridge) with xorriso."""
    src = tempfile.mkdtemp(prefix="sim-iso-src-")
    try:
        for name, text in files.items():
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        cmd = ["xorriso", "-as", "mkisofs", "-quiet", "-o", path, "-V", "cidata", "-J", "-R", src]
        for attempt in range(2):  # xorriso once exited 1 in a CI run for no reason it printed: say why, try again
            if os.path.exists(path):
                os.unlink(path)
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if p.returncode == 0:
                break
            print("make_iso: xorriso exit %d: %s" % (p.returncode, p.stderr.strip()), file=sys.stderr, flush=True)
        p.check_returncode()
        with open(path, "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(src, ignore_errors=True)


def pod(name, cpu="100m", memory="64Mi", ns="default", **spec):
    s = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                         "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": s}
