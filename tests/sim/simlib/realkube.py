# The simulator's Kubernetes side (--kube real, the default): a real control plane (started here or attached to), the
# simulated kubelets against it, and the admin endpoints about it.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import threading
import time
import urllib.parse

from . import controlplane
from . import faultproxy
from . import kubeclient
from . import kubelet
from . import util

# kube-controller-manager's flags that knobs set at start (--set): they are flags, fixed for its life (POST /knobs
# answers 400).
KCM_KNOBS = {"node_monitor_grace_seconds": "node-monitor-grace-period", "node_monitor_seconds": "node-monitor-period"}
# The knobs that become faults of the proxy in front of kube-apiserver: connections older than
# watch_disconnect_seconds are closed; kube_unreachable resets every new connection (the API server unreachable).
PROXY_KNOBS = {"watch_disconnect_seconds": "drop_after_seconds", "kube_unreachable": "refuse"}
COMPONENT_AGENTS = ("kube-controller-manager/", "kube-scheduler/", "kube-apiserver/", kubeclient.USER_AGENT)


class UsageError(Exception):
    pass


class RealKube:
    """The control plane (owned or attached), the admin client, the kubelets and the audit-log offset of
    POST /calls/reset."""

    def __init__(self, world, state_dir, attach=None, cluster_info=True, knobs_set=()):
        self.w = world
        self.cp = None
        if attach:
            path = os.path.join(attach, "controlplane.json")
            try:
                with open(path) as f:
                    self.info = json.load(f)
            except (OSError, ValueError) as e:
                raise UsageError("--kube-attach: cannot read %s: %s" % (path, e))
        else:
            kcm = {flag: "%gs" % float(world.knob(k)) for k, flag in KCM_KNOBS.items()
                   if k in knobs_set and float(world.knob(k)) > 0}
            self.cp = controlplane.ControlPlane(os.path.join(state_dir, "k8s"), kcm_flags=kcm,
                                                cluster_info=cluster_info)
            try:
                self.cp.prepare()
            except controlplane.ControlPlaneError as e:
                raise UsageError(str(e))
            self.info = {"ca": self.cp.ca, "ca_key": os.path.join(self.cp.pki, "ca.key")}
        self.state_dir = state_dir
        # An attached control plane's audit log holds earlier runs' calls: this run's calls and denials start here.
        self.audit_offset = 0
        if attach:
            try:
                self.audit_offset = os.path.getsize(self.info["audit_log"])
            except OSError:
                pass
        self.calls_offset = self.audit_offset
        self.started = None

    def start_async(self):
        """Start the owned control plane in the background (the simulator builds its PVE side meanwhile)."""
        self.error = None

        def run():
            try:
                self.cp.start()
                self.info = self.cp.info()
            except Exception as e:  # noqa: BLE001 - reported by wait()
                self.error = e
        self.started = threading.Thread(target=run, name="control-plane-start")
        self.started.start()

    def wait(self):
        """Wait for the control plane; then start the kubelets. Returns the endpoints.json "kube" entry."""
        if self.started is not None:
            self.started.join()
            if self.error is not None:
                raise UsageError("control plane: %s" % self.error)
        self.admin = kubeclient.Client(self.info["url"], self.info["ca"], self.info["client_cert"],
                                       self.info["client_key"])
        self.kubelets = kubelet.Kubelets(self.w, self.info, os.path.join(self.state_dir, "kubelets")).start()
        # The clients given endpoints.json's kubeconfig (the coordinator) reach kube-apiserver through a fault proxy,
        # which /actions/disconnect-watches and watch_disconnect_seconds act on; TLS passes through it.
        u = urllib.parse.urlsplit(self.info["url"])
        self.proxy = faultproxy.FaultProxy(u.hostname, u.port).start()
        self.apply_knobs({k: self.w.knob(k) for k in PROXY_KNOBS})
        proxy_url = "https://127.0.0.1:%d" % self.proxy.port
        kubeconfig = os.path.join(self.state_dir, "kubeconfig-proxy")
        util.atomic_write(kubeconfig, controlplane.kubeconfig_text(
            proxy_url, self.info["ca"], "kubernetes-admin", self.info["client_cert"], self.info["client_key"]), 0o600)
        return {"url": self.info["url"], "ca": self.info["ca"], "kubeconfig": kubeconfig, "proxy_url": proxy_url,
                "direct_kubeconfig": self.info["kubeconfig"], "client_cert": self.info["client_cert"],
                "client_key": self.info["client_key"], "mode": "real", "audit_log": self.info["audit_log"]}

    def apply_knobs(self, d):
        """The proxy's faults of the knobs in d that have one."""
        faults = {PROXY_KNOBS[k]: bool(v) if isinstance(faultproxy.FAULTS[PROXY_KNOBS[k]], bool) else float(v)
                  for k, v in d.items() if k in PROXY_KNOBS}
        if faults and getattr(self, "proxy", None) is not None:
            self.proxy.set_faults(**faults)

    def disconnect_watches(self):
        """Every connection through the proxy closed now (the coordinator's watches end mid-stream)."""
        return {"ok": True, "dropped": self.proxy.drop_all()}

    def stop(self):
        if getattr(self, "proxy", None) is not None:
            self.proxy.stop()
        if self.cp is not None:
            self.cp.stop()

    @staticmethod
    def check_knobs(d):
        """UsageError for a run-time change of a knob that is a kube-controller-manager flag."""
        bad = sorted(k for k in d if k in KCM_KNOBS)
        if bad:
            raise UsageError("knob(s) %s: kube-controller-manager flags, fixed at start (--set)" % ", ".join(bad))

    # ---- objects ------------------------------------------------------------------------------------------------
    def collection(self, obj):
        """The collection URL of obj's kind, from API discovery (CRDs included)."""
        api = obj.get("apiVersion", "v1")
        base = "/api/v1" if api == "v1" else "/apis/" + api
        res = self.admin.get(base)
        for r in res.get("resources") or []:
            if r.get("kind") == obj.get("kind") and "/" not in r["name"]:
                ns = (obj.get("metadata") or {}).get("namespace") or "default"
                return base + ("/namespaces/%s/%s" % (ns, r["name"]) if r.get("namespaced") else "/" + r["name"])
        raise kubeclient.ApiError(404, "no kind %s in %s" % (obj.get("kind"), api))

    def create_objects(self, objs, timeout=30):
        """Create each object (CRDs first by the caller's order); a custom resource waits for its CRD to be served."""
        for o in objs:
            deadline = time.time() + timeout
            while True:
                try:
                    self.admin.call("POST", self.collection(o), o, ok=(201,))
                    break
                except kubeclient.ApiError as e:
                    if e.status != 404 or time.time() > deadline:
                        raise UsageError("object %s/%s: %s" % (o.get("kind"), (o.get("metadata") or {}).get("name"),
                                                               e))
                    time.sleep(0.2)

    def create_pods(self, body):
        """POST /actions/pods: every pod checked first with dryRun=All (any error creates none: 400 naming the pod),
        then created through the real API."""
        if not isinstance(body, dict) or not isinstance(body.get("pods"), list):
            raise UsageError("body must be an object with a list \"pods\"")
        ns = body.get("namespace", "default")
        if not isinstance(ns, str) or not ns:
            raise UsageError("\"namespace\" must be a non-empty string")
        path = "/api/v1/namespaces/%s/pods" % urllib.parse.quote(ns)
        names = set()
        for i, obj in enumerate(body["pods"]):
            if not isinstance(obj, dict):
                raise UsageError("pods[%d]: pod is not an object" % i)
            st, res, raw = self.admin.raw("POST", path + "?dryRun=All&fieldValidation=Warn", obj)
            if st != 201:
                raise UsageError("pods[%d]: %s" % (i, (res or {}).get("message") or raw[:300].decode(errors="replace")))
            name = (obj.get("metadata") or {}).get("name")
            if name and name in names:
                raise UsageError('pods[%d]: metadata.name: Duplicate value: "%s"' % (i, name))
            names.add(name)
        created = [self.admin.call("POST", path + "?fieldValidation=Warn", obj, ok=(201,))["metadata"]["name"]
                   for obj in body["pods"]]
        return {"created": created}

    def delete_pods(self, namespace, selector=""):
        path = "/api/v1/namespaces/%s/pods" % namespace if namespace else "/api/v1/pods"
        q = "?labelSelector=" + urllib.parse.quote(selector) if selector else ""
        for p in self.admin.get(path + q)["items"]:
            md = p["metadata"]
            self.admin.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"]),
                            ok=(200, 202, 404))

    # ---- what the audit log tells ----------------------------------------------------------------------------------
    def calls(self):
        """Calls to the API by clients other than the control plane and the simulator, as "METHOD route" counts
        since the last POST /calls/reset."""
        evs, _ = controlplane.audit_events(self.info["audit_log"], self.calls_offset)
        out = {}
        for e in evs:
            if (e.get("userAgent") or "").startswith(COMPONENT_AGENTS):
                continue
            k = "%s %s" % (_method(e), route_name(e.get("requestURI", "")))
            out[k] = out.get(k, 0) + 1
        return dict(sorted(out.items()))

    def reset_calls(self):
        try:
            self.calls_offset = os.path.getsize(self.info["audit_log"])
        except OSError:
            self.calls_offset = 0

    def denials(self):
        """403 answers to clients other than the control plane's own (kube-apiserver answers 403 to them for a moment
        after it restarts, until its RBAC cache is synced), from the audit log since this run started."""
        evs, _ = controlplane.audit_events(self.info["audit_log"], self.audit_offset)
        return [controlplane.denial(e) for e in evs if (e.get("responseStatus") or {}).get("code") == 403
                and not (e.get("userAgent") or "").startswith(COMPONENT_AGENTS)]

    def evictions(self):
        """Every Eviction call since this run started, by pod and HTTP status, from the audit log."""
        evs, _ = controlplane.audit_events(self.info["audit_log"], self.audit_offset)
        out = {}
        for e in evs:
            ref = e.get("objectRef") or {}
            if (e.get("stage"), e.get("verb"), ref.get("subresource")) != ("ResponseComplete", "create", "eviction"):
                continue
            codes = out.setdefault("%s/%s" % (ref.get("namespace"), ref.get("name")), {})
            code = str((e.get("responseStatus") or {}).get("code"))
            codes[code] = codes.get(code, 0) + 1
        return out

    def restart_apiserver(self):
        if self.cp is None:
            raise UsageError("kube-restart: the control plane is attached (--kube-attach); its owner restarts it")
        return {"ok": True, "ready_after_seconds": self.cp.restart_apiserver()}

    # ---- admin endpoints -------------------------------------------------------------------------------------------
    def admin_route(self, m, p, body):
        """The real-mode answer to an admin request, or None to let the common routes answer."""
        if m == "GET" and p == "/kube-denials":
            return self.denials()
        if m == "GET" and p == "/calls":
            return {"pve": self.w.call_counts()["pve"], "kube": self.calls()}
        if m == "GET" and p == "/report":  # the report, with the Eviction calls the audit log has
            with self.w.lock:
                rep = self.w.report.to_json(self.w)
            rep["evictions"] = self.evictions()
            return rep
        if m == "POST" and p == "/calls/reset":
            with self.w.lock:
                self.w.counts.clear()
            self.reset_calls()
            return {"ok": True}
        if m == "POST" and p == "/actions/kube-restart":
            return self.restart_apiserver()
        if m == "POST" and p == "/actions/disconnect-watches":
            return self.disconnect_watches()
        if m == "POST" and p == "/actions/etcd-compact":
            return {"ok": True, "revision": controlplane.compact_etcd(self.info["ports"]["etcd"])}
        if m == "POST" and p == "/actions/pods":
            return "created", self.create_pods(body)
        return None

    def state(self):
        return {"mode": "real", "url": self.info["url"], "pids": self.info.get("pids"),
                "times": self.info.get("times")}


def _method(e):
    """The HTTP method of an audit event's verb."""
    verb = e.get("verb")
    return {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
            "delete": "DELETE", "deletecollection": "DELETE"}.get(verb, (verb or "").upper())


def route_name(uri):
    """/api/v1/namespaces/x/pods/y?watch=1 -> /api/v1/namespaces/{namespace}/pods/{name}?watch."""
    u = urllib.parse.urlsplit(uri)
    segs = [s for s in u.path.split("/") if s]
    if segs[:1] == ["api"]:
        out, rest = segs[:2], segs[2:]
    elif segs[:1] == ["apis"]:
        out, rest = segs[:3], segs[3:]
    else:
        return "/" + "/".join(segs)
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        out += ["namespaces", "{namespace}", rest[2]]
        rest = rest[3:]
    elif rest:
        out.append(rest[0])
        rest = rest[1:]
    if rest:
        out.append("{name}")
        out += rest[1:]
    name = "/" + "/".join(out)
    if urllib.parse.parse_qs(u.query).get("watch", [""])[0] in ("1", "true"):
        name += "?watch"
    return name


def log_times(rk):
    t = rk.info.get("times") or {}
    util.log("real control plane at %s (start-up: %s)" % (rk.info["url"], t))
