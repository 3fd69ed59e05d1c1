# Simulated kubelets against a real kube-apiserver: each booted VM joins as its cloud-init says (discovery, TLS
# bootstrap with its bootstrap token), registers its Node, renews its Lease, reports Ready and runs the pods the real
# scheduler binds to it, all with its own node client certificate.
# SPDX-License-Identifier: Apache-2.0
import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from decimal import Decimal

from . import kubeclient
from . import util

EXIT_ON_TERM = "sim.pvescale.io/exit-on-term"
RUNTIME_DOWN = "container runtime is down"
TOKEN_RE = re.compile(r"(?<![a-z0-9])([a-z0-9]{6})\.([a-z0-9]{16})(?![a-z0-9])")
CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
# Labels a kubelet may set on its own Node (the kubelet refuses other kubernetes.io/k8s.io labels at start-up and
# NodeRestriction refuses them at registration).
ALLOWED_LABELS = ("kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
                  "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
                  "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
                  "topology.kubernetes.io/region", "topology.kubernetes.io/zone")
ALLOWED_PREFIXES = ("kubelet.kubernetes.io/", "node.kubernetes.io/")


# Device plugins a guest runs, by the PCI vendor id of the devices they drive, and the extended resource each
# advertises (NVIDIA's k8s-device-plugin, AMD's k8s-device-plugin).
DEVICE_PLUGINS = {"10de": "nvidia.com/gpu", "1002": "amd.com/gpu"}


def read_user_data(iso_path):
    """Extract the ISO with xorriso and return the text of its user-data file (or None)."""
    tmp = tempfile.mkdtemp(prefix="sim-iso-")
    try:
        r = subprocess.run(["xorriso", "-abort_on", "FATAL", "-return_with", "FATAL", "0",
                            "-osirrox", "on", "-indev", iso_path, "-extract", "/", tmp],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        if r.returncode != 0:
            return None
        for dirpath, _, files in os.walk(tmp):
            for f in sorted(files):
                if re.match(r"^user[-_.]?dat", f, re.I):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        return fh.read().decode(errors="replace")
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parse_kubelet_flags(text):
    flags = {}
    for name in ("node-labels", "register-with-taints", "max-pods", "kube-reserved", "system-reserved",
                 "eviction-hard", "hostname-override"):
        m = re.search(r"--%s[= ]([^\s\"']+)" % re.escape(name), text)
        if m:
            flags[name] = m.group(1)
    return flags


def _kv_list(s):
    out = {}
    for part in (s or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def parse_taints(s):
    taints = []
    for part in [p for p in (s or "").split(",") if p]:
        kv, _, effect = part.rpartition(":")
        if not kv:
            continue
        k, _, v = kv.partition("=")
        t = {"key": k, "effect": effect}
        if v:
            t["value"] = v
        taints.append(t)
    return taints



def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jws_valid(detached, content, token_id, token_secret):
    """Is detached ("header..signature") the bootstrap signer's HS256 JWS of content for this token, as kubeadm's
    token discovery checks it: the header names HS256 and the token id, the HMAC-SHA256 with the token secret over
    header.payload matches."""
    parts = (detached or "").split(".")
    if len(parts) != 3 or parts[1] != "":
        return False
    try:
        header = json.loads(_b64url_decode(parts[0]))
    except ValueError:
        return False
    if header.get("alg") != "HS256" or header.get("kid") != token_id:
        return False
    signing_input = (parts[0] + "." + _b64url(content.encode())).encode()
    want = _b64url(hmac.new(token_secret.encode(), signing_input, hashlib.sha256).digest())
    return hmac.compare_digest(want, parts[2])


def label_allowed(key):
    """May a kubelet set this label on its own Node?"""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    if key in ALLOWED_LABELS or key.startswith(ALLOWED_PREFIXES):
        return True
    for dom in ("kubernetes.io", "k8s.io"):
        if prefix == dom or prefix.endswith("." + dom):
            return False
    return True


def microtime(t=None):
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def condition(ctype, status, reason, message):
    now = util.rfc3339()
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now,
            "lastTransitionTime": now}


def node_conditions(ready, message=None):
    out = [condition(t, "False", r, "kubelet has no pressure") for t, r in (
        ("MemoryPressure", "KubeletHasSufficientMemory"), ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"))]
    if ready:
        out.append(condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"))
    else:
        out.append(condition("Ready", "False", "KubeletNotReady", message or
                             "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady"))
    return out


class Informer:
    """A list and watch of one collection with the admin's credentials (the one admin reader of real mode: the
    kubelets read their pods from it, the report its pod timings); relists after 410 or a broken watch."""

    def __init__(self, client, path, on_event=None):
        self.client = client
        self.path = path
        self.on_event = on_event
        self.objs = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.stopping = False
        threading.Thread(target=self._run, name="informer " + path, daemon=True).start()

    def items(self):
        with self.lock:
            return list(self.objs.values())

    def _key(self, o):
        md = o["metadata"]
        return (md.get("namespace"), md["name"])

    def _run(self):
        while not self.stopping:
            try:
                rv = self._list()
                for ev in self.client.watch("%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s" % (self.path, rv)):
                    if ev.get("type") == "ERROR":
                        break
                    self._apply(ev)
            except (OSError, ValueError, kubeclient.ApiError) as e:
                if not self.stopping:
                    util.log("informer %s: %s" % (self.path, e), 2)
                time.sleep(0.5)

    def _list(self):
        lst = self.client.get(self.path)
        with self.lock:
            old, self.objs = self.objs, {self._key(o): o for o in lst["items"]}
        for o in lst["items"]:
            if self.on_event:
                self.on_event("ADDED", o)
        for k, o in old.items():  # gone while the watch was down (or made again under the same name)
            now = self.objs.get(k)
            if self.on_event and (now is None or now["metadata"]["uid"] != o["metadata"]["uid"]):
                self.on_event("DELETED", o)
        self.synced.set()
        return lst["metadata"]["resourceVersion"]

    def _apply(self, ev):
        o = ev.get("object") or {}
        if ev["type"] == "BOOKMARK":
            return
        with self.lock:
            if ev["type"] == "DELETED":
                self.objs.pop(self._key(o), None)
            else:
                self.objs[self._key(o)] = o
        if self.on_event:
            self.on_event(ev["type"], o)


class JoinError(Exception):
    pass


class Kubelet:
    """The kubelet of one VM boot: a thread that joins, registers and then runs the node until the VM stops."""

    def __init__(self, mgr, vm):
        self.mgr = mgr
        self.w = mgr.w
        self.vm = vm
        self.boot = vm.started_at
        self.state, self.reason, self.node = "booting", "waiting for boot", None
        self.api = None
        self.ready_posted = None
        self.pods = {}  # uid -> {"bound": t, "term": t}
        self.thread = threading.Thread(target=self._run, name="kubelet %d" % vm.vmid, daemon=True)
        self.thread.start()

    def knob(self, name):
        return self.w.knob(name)

    def listed(self, knob):
        names = [str(x) for x in self.knob(knob) or []]
        return str(self.vm.vmid) in names or self.vm.conf.get("name") in names

    def alive(self):
        vm = self.vm
        return (not self.w.stopping and vm.status == "running" and not vm.host.down and vm.started_at == self.boot
                and not vm.deleted)

    # ---- main loop ----------------------------------------------------------------------------------------------
    def _run(self):
        try:
            # the guest boots to cloud-init (boot_seconds), whose kubeadm join starts after join_delay_seconds
            while self.alive() and time.time() - self.vm.started_at < float(self.knob("boot_seconds")) + float(
                    self.knob("join_delay_seconds")):
                time.sleep(0.1)
            while self.alive() and self.api is None:
                self._try_join()
                if self.api is None:
                    time.sleep(0.5)
            while self.alive():
                try:
                    self._tick()
                except (OSError, ValueError, kubeclient.ApiError) as e:  # e.g. kube-apiserver restarting
                    self.reason = "API server: %s" % e
                    util.log("kubelet %s: %s" % (self.node, e), 2)
                    time.sleep(0.5)
                time.sleep(0.2)
        except Exception as e:  # noqa: BLE001 - a kubelet bug is logged, the simulator goes on
            import traceback
            util.log("kubelet %d error: %r\n%s" % (self.vm.vmid, e, traceback.format_exc()))
            self.reason = "kubelet error: %r" % e
        if self.node and self.state in ("registered", "ready"):
            self.w.report.node_event(self.node, "notready", self.vm)
        if self.state in ("registered", "ready"):
            self.state = "gone"
            self.reason = "VM %s" % ("deleted" if self.vm.deleted else "not running")
            self._ccm_delete()

    def _ccm_delete(self):
        """Knob ccm_delete_nodes: a cloud controller manager deletes the Node of a deleted VM (its own credentials:
        the admin's here)."""
        if self.vm.deleted and self.knob("ccm_delete_nodes") and self.node:
            try:
                self.mgr.admin.call("DELETE", "/api/v1/nodes/" + self.node, ok=(200, 202, 404))
            except (OSError, kubeclient.ApiError) as e:
                util.log("ccm delete of node %s: %s" % (self.node, e))

    # ---- join ---------------------------------------------------------------------------------------------------
    def _try_join(self):
        self.state = "waiting"
        if self.listed("never_join"):
            self.reason = "fault injection: never_join"
            return
        iso = self.mgr.vm_iso(self.vm)
        if not iso:
            self.reason = "no cloud-init ISO attached as CD-ROM"
            return
        ud = self.mgr.user_data(iso)
        if ud is None:
            self.reason = "no user-data in %s" % os.path.basename(iso)
            return
        m = TOKEN_RE.search(ud)
        if not m:
            self.reason = "no bootstrap token in user-data"
            return
        flags = parse_kubelet_flags(ud)
        bad = [k for k in _kv_list(flags.get("node-labels")) if not label_allowed(k)]
        if bad:
            self.reason = "kubelet: unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: %s" % bad
            return
        try:
            server, ca = self._discover(ud, m.group(1), m.group(2))
            name = self._node_name(ud)
            cert, key = self._tls_bootstrap(server, ca, name, m.group(1) + "." + m.group(2))
        except (JoinError, kubeclient.ApiError, OSError, ValueError) as e:
            self.reason = "kubeadm join: %s" % e
            return
        self.flags, self.node = flags, name
        pid = re.search(r"--provider-id[= ]([^\s\"']+)", ud)
        self.provider_id = pid.group(1) if pid else "proxmox://%s/%d" % (self.vm.host.region, self.vm.vmid)
        self.api = kubeclient.Client(server, ca, cert, key)
        while self.alive() and self.knob("register_hold"):  # a kubelet slow to start after its bootstrap
            self.reason = "fault injection: register_hold (client certificate issued)"
            time.sleep(0.2)
        try:
            self._register()
        except (OSError, ValueError, kubeclient.ApiError) as e:
            self.api = None
            self.reason = "registering node %s: %s" % (name, e)

    def _discover(self, ud, tid, secret):
        """(server URL, CA file). File discovery (the user-data's kubeconfig names the server and CA): TLS verified
        with that CA; cluster-info is read anonymously and, when signed for this token, its JWS must hold. Without a
        server in the user-data: token discovery against the cluster's endpoint, trusting only the JWS."""
        servers = re.findall(r"server:\s*[\"']?(https://[^\s\"',}]+)", ud)
        cas = re.findall(r"certificate-authority-data:\s*[\"']?([A-Za-z0-9+/=]+)", ud)
        if not servers or not cas:
            return self._token_discovery(tid, secret)
        ca_file = os.path.join(self.mgr.dir, "ca-%d-%d.crt" % (self.vm.vmid, int(self.boot * 1000)))
        with open(ca_file, "wb") as f:
            f.write(base64.b64decode(cas[0]))
        anon = kubeclient.Client(servers[0], ca_file)
        try:
            status, cm, _ = anon.raw("GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
        except OSError as e:
            raise JoinError("cannot reach the API server at %s: %s" % (servers[0], e))
        data = (cm or {}).get("data") or {} if status == 200 else {}
        sig = data.get("jws-kubeconfig-" + tid)
        if sig is not None and not jws_valid(sig, data.get("kubeconfig", ""), tid, secret):
            raise JoinError("cluster-info's JWS for token %s does not verify" % tid)
        return servers[0], ca_file

    def _token_discovery(self, tid, secret):
        anon = kubeclient.Client(self.mgr.url, None)
        anon.ctx.check_hostname = False
        anon.ctx.verify_mode = ssl.CERT_NONE  # the first fetch trusts nothing but the JWS, as kubeadm's
        status, cm, _ = anon.raw("GET", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
        if status != 200:
            raise JoinError("cluster-info: HTTP %d" % status)
        data = cm.get("data") or {}
        sig = data.get("jws-kubeconfig-" + tid)
        if sig is None:
            raise JoinError("there is no JWS signed token in the cluster-info ConfigMap for token ID %s" % tid)
        if not jws_valid(sig, data.get("kubeconfig", ""), tid, secret):
            raise JoinError("failed to verify JWS signature of received cluster info object")
        kc = data["kubeconfig"]
        server = re.search(r"server:\s*(\S+)", kc).group(1)
        ca_file = os.path.join(self.mgr.dir, "ca-%d-%d.crt" % (self.vm.vmid, int(self.boot * 1000)))
        with open(ca_file, "wb") as f:
            f.write(base64.b64decode(re.search(r"certificate-authority-data:\s*(\S+)", kc).group(1)))
        return server, ca_file

    def _node_name(self, ud):
        m = re.search(r"--hostname-override[= ]([^\s\"']+)", ud) or re.search(r"(?m)^\s+name:\s*([a-z0-9.-]+)\s*$", ud)
        return m.group(1) if m else (self.vm.conf.get("name") or "vm%d" % self.vm.vmid)

    def _tls_bootstrap(self, server, ca, name, token):
        """A key and a CSR for CN=system:node:<name>, O=system:nodes, sent with the bootstrap token; waits until the
        controller manager approves and signs it. Returns the certificate and key files."""
        base = os.path.join(self.mgr.dir, "%s-%d" % (name, int(time.time() * 1000)))
        key, csr, crt = base + ".key", base + ".csr", base + ".crt"
        r = subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", key, "-out", csr, "-subj", "/O=system:nodes/CN=system:node:" + name],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise JoinError("openssl: %s" % r.stderr.decode(errors="replace"))
        with open(csr, "rb") as f:
            request = base64.b64encode(f.read()).decode()
        boot = kubeclient.Client(server, ca, token=token)
        obj = boot.call("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", {
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"generateName": "csr-"},
            "spec": {"request": request, "signerName": CLIENT_SIGNER,
                     "usages": ["digital signature", "key encipherment", "client auth"]}})
        path = "/apis/certificates.k8s.io/v1/certificatesigningrequests/" + obj["metadata"]["name"]
        deadline = time.time() + 60
        while time.time() < deadline and self.alive():
            st = boot.get(path).get("status") or {}
            for c in st.get("conditions") or []:
                if c.get("type") in ("Denied", "Failed"):
                    raise JoinError("CSR %s %s: %s" % (obj["metadata"]["name"], c["type"], c.get("message")))
            if st.get("certificate"):
                with open(crt, "wb") as f:
                    f.write(base64.b64decode(st["certificate"]))
                return crt, key
            self.reason = "waiting for CSR %s to be approved and signed" % obj["metadata"]["name"]
            time.sleep(0.2)
        raise JoinError("CSR %s was not signed" % obj["metadata"]["name"])

    # ---- the Node ----------------------------------------------------------------------------------------------------
    def _node_object(self):
        vm, flags, name = self.vm, self.flags, self.node
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                  "topology.kubernetes.io/region": vm.host.region, "topology.kubernetes.io/zone": vm.host.name}
        labels.update(_kv_list(flags.get("node-labels")))
        cpu = Decimal(vm.vcpus())
        mem = Decimal(vm.memory_mib()) * 2**20
        disk = Decimal(20 * 2**30)
        mm = re.search(r"size=(\d+)G", vm.conf.get("scsi0", "") or vm.conf.get("virtio0", ""))
        if mm:
            disk = Decimal(int(mm.group(1)) * 2**30)
        cap = {"cpu": util.fmt_cpu(cpu), "memory": "%dKi" % (mem // 1024), "pods": str(int(flags.get("max-pods", 110))),
               "ephemeral-storage": "%dKi" % (disk // 1024), "hugepages-2Mi": "0", "hugepages-1Gi": "0"}
        rcpu, rmem = Decimal(0), Decimal(0)
        for fl in ("kube-reserved", "system-reserved"):
            kv = _kv_list(flags.get(fl))
            rcpu += util.parse_quantity(kv.get("cpu", "0"))
            rmem += util.parse_quantity(kv.get("memory", "0"))
        ev = re.search(r"memory\.available<([0-9.]+[A-Za-z]*)", flags.get("eviction-hard", "memory.available<100Mi"))
        if ev:
            rmem += util.parse_quantity(ev.group(1))
        cap.update(self._device_resources())
        alloc = dict(cap, cpu=util.fmt_cpu(max(cpu - rcpu, Decimal(0))),
                     memory="%dKi" % (max(mem - rmem, Decimal(0)) // 1024),
                     **{"ephemeral-storage": "%d" % int(disk * Decimal("0.9"))})
        sysuuid = (re.search(r"uuid=([0-9a-f-]+)", vm.conf.get("smbios1", "")) or [None, str(uuid.uuid4())])[1]
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"providerID": self.provider_id, "taints": parse_taints(flags.get("register-with-taints"))},
                "status": {"capacity": cap, "allocatable": alloc,
                           "conditions": node_conditions(bool(self.knob("register_ready"))),
                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                         {"type": "Hostname", "address": name}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": {"machineID": uuid.uuid4().hex, "systemUUID": sysuuid,
                                        "bootID": str(uuid.uuid4()), "kernelVersion": "6.8.0-sim",
                                        "osImage": "pvescale simulated node",
                                        "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.26.0",
                                        "kubeProxyVersion": "v1.26.0", "operatingSystem": "linux",
                                        "architecture": "amd64"}}}

    def _device_resources(self):
        """What a device plugin in the guest advertises: one of its extended resource per passed-through device it
        drives (the devices Proxmox gave the VM at its start, known by their mapping entry's vendor id)."""
        vm, out = self.vm, {}
        entries = [dict(x.split("=", 1) for x in e.split(",") if "=" in x)
                   for m in self.w.regions[vm.host.region].pci_mappings.values() for e in m["map"]]
        for path in getattr(vm, "pci_paths", []):
            vendor = next((e.get("id", "")[:4].lower() for e in entries
                           if e.get("node") == vm.host.name and path in e.get("path", "").split(";")), "")
            if vendor in DEVICE_PLUGINS:
                res = DEVICE_PLUGINS[vendor]
                out[res] = str(int(out.get(res, "0")) + 1)
        return out

    def _register(self):
        node = self._node_object()
        status, obj, raw = self.api.raw("POST", "/api/v1/nodes", node)
        if status not in (201, 409):
            self.api = None
            self.reason = "registering node %s: HTTP %d %s" % (self.node, status, raw[:200].decode(errors="replace"))
            return
        self.node_uid = obj["metadata"]["uid"] if status == 201 else None
        self._post_status(node["status"])
        self.registered_at = time.time()
        ready = bool(self.knob("register_ready"))
        self.ready_posted, self.message_posted, self.last_lease, self.last_status = ready, None, 0.0, time.time()
        self.state, self.reason = "registered", "registered"
        self.w.report.node_event(self.node, "registered", self.vm)
        util.log("kubelet: VM %d registered node %s" % (self.vm.vmid, self.node))

    def _post_status(self, status):
        """PATCH nodes/<name>/status; False when the Node is gone."""
        st, _, raw = self.api.raw("PATCH", "/api/v1/nodes/%s/status" % self.node, {"status": status},
                                  "application/merge-patch+json")
        if st == 404:
            return False
        if st != 200:
            util.log("kubelet %s: status: HTTP %d %s" % (self.node, st, raw[:200]), 2)
        return True

    def _tick(self):
        if self.listed("kubelet_stopped"):
            self.reason = "fault injection: kubelet_stopped"
            self.last_status = 0.0  # back, it posts its status at once
            return
        if getattr(self.vm, "paused_boot", None) == self.boot:  # status/suspend: the guest is frozen
            self.reason = "VM paused"
            self.last_status = 0.0
            return
        now = time.time()
        if now - self.last_lease >= float(self.knob("lease_interval_seconds")) and not self._status_holds():
            self.last_status = 0.0
        want_ready = not self.listed("kubelet_not_ready") and (
            self.knob("register_ready") or now - self.registered_at >= float(self.knob("ready_delay_seconds")))
        msg = RUNTIME_DOWN if self.listed("kubelet_not_ready") else None
        if (want_ready, msg) != (self.ready_posted, self.message_posted) or now - self.last_status >= 60:
            if not self._post_status({"conditions": node_conditions(want_ready, msg)}):
                return self._node_gone()
            if want_ready != self.ready_posted:
                self.w.report.node_event(self.node, "ready" if want_ready else "notready", self.vm)
            self.ready_posted, self.message_posted, self.last_status = want_ready, msg, now
            self.state = "ready" if want_ready else "registered"
        self.reason = "fault injection: kubelet_not_ready" if self.listed("kubelet_not_ready") else "registered"
        if now - self.last_lease >= float(self.knob("lease_interval_seconds")):
            self._renew_lease()
            self.last_lease = now
        self._pods(now)

    def _status_holds(self):
        """Does the Node's Ready condition say what this kubelet last posted (kube-controller-manager may have set
        it Unknown meanwhile)? Read as the node, once a Lease period, as the kubelet's status loop does."""
        st, node, _ = self.api.raw("GET", "/api/v1/nodes/" + self.node)
        if st != 200:
            return st != 404
        ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
        return bool(ready) and ready[0].get("status") == ("True" if self.ready_posted else "False")

    def _node_gone(self):
        """The Node was deleted under the running kubelet: it re-registers only with knob kubelet_reregister (as a
        restarted kubelet would)."""
        self.reason = "node %s deleted" % self.node
        if self.knob("kubelet_reregister"):
            self._register()

    def _renew_lease(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + self.node
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": microtime()}
        st, _, _ = self.api.raw("PATCH", path, {"spec": spec}, "application/merge-patch+json")
        if st == 404:
            node = self.api.raw("GET", "/api/v1/nodes/" + self.node)[1] or {}
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.node, "namespace": "kube-node-lease"}, "spec": spec}
            if node.get("metadata", {}).get("uid"):
                lease["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node,
                                                         "uid": node["metadata"]["uid"]}]
            self.api.raw("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)

    # ---- pods ----------------------------------------------------------------------------------------------------------
    def _pods(self, now):
        mine = self.mgr.pods_on(self.node)
        uids = set()
        for pod in mine:
            md = pod["metadata"]
            uids.add(md["uid"])
            rec = self.pods.setdefault(md["uid"], {"bound": now})
            phase = (pod.get("status") or {}).get("phase")
            if md.get("deletionTimestamp"):
                self._terminate(pod, rec, now)
            elif phase == "Pending" and self.ready_posted and now - rec["bound"] >= float(self.knob("pod_start_seconds")):
                self._run_pod(pod, rec, now)
            elif phase == "Running":
                self._running(pod, rec, now)
        for uid in set(self.pods) - uids:
            del self.pods[uid]

    def _patch_pod_status(self, pod, status):
        md = pod["metadata"]
        st, obj, raw = self.api.raw("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (md["namespace"], md["name"]),
                                    {"status": status}, "application/merge-patch+json")
        if st != 200:
            util.log("kubelet %s: pod %s/%s status: HTTP %d %s" % (self.node, md["namespace"], md["name"], st,
                                                                   raw[:200]), 2)
        return obj if st == 200 else None

    @staticmethod
    def _conds(pod, ready, reason=None):
        now = util.rfc3339()
        conds = [c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") not in ("Ready", "ContainersReady")]
        for t in ("Ready", "ContainersReady"):
            c = {"type": t, "status": "True" if ready else "False", "lastProbeTime": None, "lastTransitionTime": now}
            if reason:
                c["reason"] = reason
            conds.append(c)
        return conds

    def _run_pod(self, pod, rec, now):
        stamp = util.rfc3339()
        ip = "10.244.%d.%d" % (self.vm.vmid % 256, len(self.pods) % 250 + 2)
        conds = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
        conds += [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                  for t in ("Initialized", "Ready", "ContainersReady")]
        status = {"phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": stamp,
                  "conditions": conds,
                  "containerStatuses": [{"name": c.get("name"), "image": c.get("image"), "imageID": "",
                                         "containerID": "containerd://%s" % uuid.uuid4().hex, "ready": True,
                                         "started": True, "restartCount": 0,
                                         "state": {"running": {"startedAt": stamp}}}
                                        for c in (pod.get("spec") or {}).get("containers") or []]}
        if self._patch_pod_status(pod, status) is not None:
            rec["running"] = now

    def _running(self, pod, rec, now):
        md = pod["metadata"]
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        if ready != bool(self.ready_posted):
            self._patch_pod_status(pod, {"conditions": self._conds(pod, bool(self.ready_posted))})
        rs = (md.get("annotations") or {}).get("sim.pvescale.io/run-seconds")
        if rs and now - rec.setdefault("running", now) >= float(rs):
            self._patch_pod_status(pod, {"phase": "Succeeded", "conditions": self._conds(pod, False, "PodCompleted")})

    def _terminate(self, pod, rec, now):
        """Being deleted: not Ready at once; the container exits on SIGTERM (annotation sim.pvescale.io/exit-on-term,
        after pod_termination_seconds) or is killed when the grace period ends; the terminal phase is written and the
        pod deleted with grace 0 (uid precondition), all as this node."""
        md = pod["metadata"]
        started = rec.setdefault("term", now)
        graceful = (md.get("annotations") or {}).get(EXIT_ON_TERM) == "true"
        grace = float(md.get("deletionGracePeriodSeconds", 0))
        wait = min(grace, float(self.knob("pod_termination_seconds"))) if graceful else grace
        if now - started < wait:
            if not rec.get("unready"):
                self._patch_pod_status(pod, {"conditions": self._conds(pod, False)})
                rec["unready"] = True
            return
        if rec.get("deleted"):
            return
        code = 0 if graceful else 137
        stamp = util.rfc3339()
        css = [dict(cs, ready=False, started=False, state={"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": stamp,
            "containerID": cs.get("containerID", "")}}) for cs in (pod.get("status") or {}).get("containerStatuses") or []]
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            self._patch_pod_status(pod, {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": css,
                                         "conditions": self._conds(pod, False, "PodCompleted")})
        st, _, raw = self.api.raw("DELETE", "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"]),
                                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                   "preconditions": {"uid": md["uid"]}})
        if st in (200, 404, 409):
            rec["deleted"] = True
        else:
            util.log("kubelet %s: delete of pod %s/%s: HTTP %d %s" % (self.node, md["namespace"], md["name"], st,
                                                                     raw[:200]))


class Kubelets:
    """One Kubelet per running VM boot; the pods informer (admin) that they and the report read."""

    def __init__(self, world, info, workdir):
        self.w = world
        self.url = info["url"]
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.admin = kubeclient.Client(info["url"], info["ca"], info["client_cert"], info["client_key"])
        self.kubelets = {}
        self.iso_cache = {}
        self.by_node = {}  # node name -> {uid: pod}, kept by the pods informer's events
        self.by_node_lock = threading.Lock()
        self.pods = Informer(self.admin, "/api/v1/pods", self._pod_event)
        self.thread = threading.Thread(target=self._loop, name="kubelets", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _loop(self):
        while not self.w.stopping:
            with self.w.lock:
                vms = [vm for vm in self.w.all_vms() if vm.status == "running" and not vm.host.down
                       and not vm.is_template()]
                for vm in vms:
                    k = self.kubelets.get(vm.uid)
                    if k is None or k.boot != vm.started_at:
                        self.kubelets[vm.uid] = Kubelet(self, vm)
            time.sleep(0.1)

    def vm_iso(self, vm):
        for k, v in sorted(vm.conf.items()):
            if re.match(r"^(ide|sata|scsi)\d+$", k) and "media=cdrom" in v:
                m = re.match(r"^(?:file=)?([^:,]+):iso/([^,]+)", v)
                if m:
                    return os.path.join(vm.host.iso_dir, m.group(2))
        return None

    def user_data(self, iso):
        if not os.path.exists(iso):
            return None
        st = os.stat(iso)
        key = (iso, st.st_mtime, st.st_size)
        if key not in self.iso_cache:
            self.iso_cache[key] = read_user_data(iso)
        return self.iso_cache[key]

    def pods_on(self, node):
        with self.by_node_lock:
            return list(self.by_node.get(node, {}).values())

    def _index(self, kind, pod):
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        with self.by_node_lock:
            pods = self.by_node.setdefault(node, {})
            if kind == "DELETED":
                pods.pop(pod["metadata"]["uid"], None)
            else:
                pods[pod["metadata"]["uid"]] = pod

    def _pod_event(self, kind, pod):
        """The pods by node for the kubelets, and pod timings for the report, from the admin's watch of the real
        API."""
        self._index(kind, pod)
        rep = self.w.report
        with self.w.lock:
            node = (pod.get("spec") or {}).get("nodeName")
            rec = rep._pod(pod)
            if not node and rec["pending"] is None and not pod["metadata"].get("deletionTimestamp"):
                rep.pod_pending(pod)
            if node and rec["node"] is None:
                rep.pod_bound(pod, node)
            if (pod.get("status") or {}).get("phase") == "Running":
                rep.pod_running(pod)
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                rep.pod_deleted(pod)

    def state(self):
        out = {}
        for k in list(self.kubelets.values()):
            out["%s/%d" % (k.vm.host.region, k.vm.vmid)] = {"state": k.state, "reason": k.reason, "node": k.node,
                                                             "vm_name": k.vm.conf.get("name")}
        return out
