# Simulated Proxmox VE 8.4 REST API (/api2/json) for one region (= one PVE cluster).
# SPDX-License-Identifier: Apache-2.0
import contextlib
import email.parser
import email.policy
import json
import os
import random
import re
import threading
import time
import urllib.parse
import uuid

from . import hosts as hostsmod
from . import pveacl
from . import pveimage
from . import pveschema
from . import util

PREFIX = "/api2/json"
ROOT_ONLY = ("affinity", "hookscript", "args")
FAST_PLUG = {"name", "description", "tags", "onboot", "protection", "startup", "hookscript",
             "lock", "boot", "bootdisk", "ciuser", "cipassword", "sshkeys", "nameserver",
             "searchdomain", "citype", "ciupgrade", "cicustom", "agent", "meta"}
HOTPLUG_RE = re.compile(r"^(net\d+|ide\d+|scsi\d+|sata\d+|virtio\d+|usb\d+|ipconfig\d+|unused\d+)$")
DISK_RE = re.compile(r"^(ide|scsi|sata|virtio)(\d+)$|^efidisk0$|^tpmstate0$")
ISO_STORAGE = "local"
DISK_STORAGE = "local-lvm"


class ApiError(Exception):
    def __init__(self, code, msg, errors=None):
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.errors = errors


class TaskError(Exception):
    pass


def param_error(param, msg):
    return ApiError(400, "Parameter verification failed.", {param: msg})


class Task:
    _pid = random.randint(0x10000, 0x7FFFF)
    _pid_lock = threading.Lock()

    def __init__(self, node, ttype, tid, user):
        with Task._pid_lock:
            Task._pid += 1
            pid = Task._pid
        self.node = node
        self.type = ttype
        self.id = "" if tid is None else str(tid)
        self.user = user
        self.pid = pid
        self.pstart = int(time.monotonic() * 100) & 0xFFFFFFFF
        self.starttime = int(time.time())
        self.upid = "UPID:%s:%08X:%08X:%08X:%s:%s:%s:" % (node, pid, self.pstart, self.starttime,
                                                          ttype, self.id, user)
        self.status = "running"
        self.exitstatus = None
        self.endtime = None
        self.log = []
        self.done = threading.Event()
        self.polls = 0  # GET .../status calls, for the admin API's /tasks

    def status_obj(self):
        o = {"upid": self.upid, "node": self.node, "pid": self.pid, "pstart": self.pstart,
             "starttime": self.starttime, "type": self.type, "id": self.id, "status": self.status}
        user = self.user
        if "!" in user:
            user, tok = user.split("!", 1)
            o["tokenid"] = tok
        o["user"] = user
        if self.status == "stopped":
            o["exitstatus"] = self.exitstatus
        return o


UPID_RE = re.compile(r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):"
                     r"([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$")


class Region:
    """One Proxmox cluster: its hosts, VMs, tasks, pools and firewall groups."""

    def __init__(self, name, world):
        self.name = name
        self.w = world
        self.hosts = {}
        self.vms = {}
        self.tasks = {}
        self.reserved = {}
        self.pools = {}
        self.fw_groups = {}
        self.pci_mappings = {}  # /cluster/mapping/pci: {id: {"description": str, "map": [entry strings]}}
        self.token_id = "pvescale@pve!coordinator"
        self.token_secret = str(uuid.uuid4())
        self.ro_token_id = "pvescale@pve!readonly"
        self.ro_token_secret = str(uuid.uuid4())
        self.access = pveacl.Access(self.pools)  # user.cfg: users, tokens, roles, ACLs (see pveacl.py)
        self.access.install_defaults(self.token_id, self.token_secret, self.ro_token_id, self.ro_token_secret)
        self.server = None
        self.storage_locks = {}  # (host, storage) -> lock: pve-storage's /var/lock/pve-manager/pve-storage-<id>

    def storage_lock(self, host, storage):
        with self.w.lock:
            return self.storage_locks.setdefault((host, storage), threading.Lock())

    # ---- tasks -------------------------------------------------------------
    def start_task(self, node, ttype, tid, user, fn):
        t = Task(node, ttype, tid, user)
        with self.w.lock:
            self.tasks[t.upid] = t
            if len(self.tasks) > 5000:
                for k in list(self.tasks)[:1000]:
                    if self.tasks[k].status == "stopped":
                        del self.tasks[k]

        def run():
            try:
                fn(t)
                status = "OK"
            except TaskError as e:
                status = str(e)
            except ApiError as e:
                status = e.msg
            except pveacl.Error as e:  # a check of the worker, as in update_vm_api's or resize's
                status = e.msg.strip()
                self.access.note_denial(user, "task %s %s" % (ttype, t.id), status)
            except Exception as e:  # simulator bug: still end the task
                util.log("task %s crashed: %r" % (t.upid, e))
                status = "simulator error: %s" % e
            with self.w.lock:
                if status != "OK":
                    t.log.append("TASK ERROR: %s" % status)
                else:
                    t.log.append("TASK OK")
                t.exitstatus = status
                t.status = "stopped"
                t.endtime = time.time()
            self._write_task_log(t)
            t.done.set()
        threading.Thread(target=run, name="task-" + ttype, daemon=True).start()
        return t.upid

    def _write_task_log(self, t):
        h = self.hosts.get(t.node)
        if not h:
            return
        d = os.path.join(h.root, "var", "log", "pve", "tasks", t.upid.split(":")[5][-1])
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, t.upid.replace("/", "_")), "w") as f:
                f.write("\n".join(t.log) + "\n")
        except OSError:
            pass

    # ---- ids ---------------------------------------------------------------
    def vmid_taken(self, vmid):
        return vmid in self.vms

    def next_free_id(self):
        now = time.time()
        for k in [k for k, exp in self.reserved.items() if exp < now]:
            del self.reserved[k]
        vmid = 100
        while vmid in self.vms or vmid in self.reserved:
            vmid += 1
        self.reserved[vmid] = now + float(self.w.knob("nextid_reserve_seconds"))
        return vmid


class PveApp(pveimage.ImageMixin):
    def __init__(self, world, region):
        self.w = world
        self.r = region
        self.v = world.pve_validator
        self._tls = threading.local()

    # ---- request entry -----------------------------------------------------
    def handle(self, req):
        path = req.raw_path
        if not path.startswith(PREFIX + "/") and path != PREFIX:
            return self._not_impl(req, req.method, req.path)
        tpl, pathp = self.v.lookup(path[len(PREFIX):] or "/")
        sub = req.path[len(PREFIX):] or "/"
        self.w.count("pve", req.method, tpl or "<unknown>")
        fault = self.w.pve_fault()
        user = self._auth(req)
        if user is None:
            time.sleep(float(self.w.knob("auth_delay_seconds")))
            return req.reply(401, b"", reason="authentication failure")
        if fault == "timeout":
            time.sleep(float(self.w.knob("timeout_hold_seconds")))
            return req.drop()
        if tpl is None:
            return self._not_impl(req, req.method, sub)
        info = self.v.method_info(tpl, req.method)
        if info is None:
            return self._not_impl(req, req.method, sub)
        if req.method in ("GET", "DELETE") and req.body:
            return req.reply(501, "Unexpected content for method '%s'" % req.method,
                             ctype="text/plain", reason="Unexpected content for method '%s'" % req.method)
        if not info.get("allowtoken"):
            return self._error(req, ApiError(403, "URI '%s' not available with API token, need proper ticket.\n" % sub))
        if fault == "error":
            self.w.count("pve", "FAULT", "500")  # /calls shows how many answers the knobs made 5xx
            return self._error(req, ApiError(500, "simulated internal server error (fault injection)\n"))
        self._tls.upload = None
        try:
            params = self._params(req, pathp)
            self.r.access.check_api2(info.get("permissions"), user, params)
        except ApiError as e:
            return self._error(req, e)
        except pveacl.Error as e:
            return self._acl_error(req, user, e)
        node = pathp.get("node")
        if node and node in self.w.hosts and self.w.hosts[node].down and self.r.hosts.get(node):
            return self._error(req, ApiError(595, "No route to host\n"))
        errors = self.v.validate(info, params)
        if errors:
            return self._error(req, ApiError(400, "Parameter verification failed.\n", errors))
        fn = getattr(self, "h_%s_%s" % (req.method, _fn_name(tpl)), None)
        if fn is None:
            return self._error(req, ApiError(501, "Method '%s %s' not implemented (by the simulator)\n" % (
                req.method, sub)))
        try:
            with self.w.lock:
                data = fn(params, user)
            if callable(data):  # handlers may return work to do outside the lock
                data = data()
        except ApiError as e:
            return self._error(req, e)
        except pveacl.Error as e:
            return self._acl_error(req, user, e)
        req.reply_json(200, {"data": data})

    def _not_impl(self, req, method, path):
        msg = "Method '%s %s' not implemented" % (method, path)
        req.reply_json(501, {"data": None, "message": msg + "\n"}, reason=msg)

    def _error(self, req, e):
        body = {"data": None, "message": e.msg if e.msg.endswith("\n") else e.msg + "\n"}
        if e.errors:
            body["errors"] = e.errors
        req.reply_json(e.code, body, reason=e.msg.strip().split("\n")[0])

    def _acl_error(self, req, user, e):
        if e.code == 403:
            self.r.access.note_denial(user, "%s %s" % (req.method, req.path), e.msg)
        return self._error(req, ApiError(e.code, e.msg))

    def _auth(self, req):
        h = req.headers.get("Authorization") or ""
        m = re.match(r"^PVEAPIToken[= ]([^;]*)", h.strip())
        if not m:
            return None
        val = urllib.parse.unquote(m.group(1)).strip()
        if "=" not in val:
            return None
        tok, secret = val.rsplit("=", 1)
        return self.r.access.authenticate(tok, secret)

    def _params(self, req, pathp):
        params = {}
        if req.method in ("POST", "PUT") and req.body:
            ctype = (req.headers.get("Content-Type") or "").lower()
            if ctype.startswith("application/json"):
                try:
                    obj = json.loads(req.body)
                except ValueError:
                    raise ApiError(400, "malformed JSON body\n")
                if not isinstance(obj, dict):
                    raise ApiError(400, "JSON body must be an object\n")
                for k, v in obj.items():
                    if isinstance(v, bool):
                        v = int(v)
                    params[k] = v if isinstance(v, str) else json.dumps(v) if isinstance(v, (list, dict)) else str(v)
            elif ctype.startswith("multipart/form-data"):
                params.update(self._multipart(req))
            else:
                for k, v in urllib.parse.parse_qsl(req.body.decode(errors="replace"), keep_blank_values=True):
                    params[k] = v
        for k, v in req.query.items():
            params[k] = v[-1]
        for k, v in pathp.items():
            params[k] = v
        return params

    def _multipart(self, req):
        ctype = req.headers.get("Content-Type")
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + req.body)
        out = {}
        if not msg.is_multipart():
            raise ApiError(400, "malformed multipart body\n")
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fname = part.get_filename()
            payload = part.get_payload(decode=True) or b""
            if fname is not None:
                out["filename"] = fname
                self._tls.upload = payload
            elif name:
                out[name] = payload.decode(errors="replace")
        return out

    # ---- helpers -----------------------------------------------------------
    def host(self, node):
        h = self.r.hosts.get(node)
        if h is None:
            raise ApiError(500, "no such cluster node '%s'\n" % node)
        return h

    def vm(self, node, vmid):
        vm = self.r.vms.get(int(vmid))
        if vm is None or vm.host.name != node:
            raise ApiError(500, "Configuration file 'nodes/%s/qemu-server/%s.conf' does not exist\n" % (node, vmid))
        return vm

    def _check_root_only(self, params, user):
        for k in ROOT_ONLY:
            if k in params or k in _split(params.get("delete", "")):
                raise ApiError(500, "only root can set '%s' config\n" % k)
        if "skiplock" in params:
            raise param_error("skiplock", "Only root may use this option.")

    # ---- version / cluster -------------------------------------------------
    def h_GET_version(self, p, u):
        return {"version": "8.4.1", "release": "8.4", "repoid": "2a5fa54a8503f96d"}

    def h_GET_cluster_status(self, p, u):
        out = [{"type": "cluster", "id": "cluster", "name": self.r.name, "nodes": len(self.r.hosts),
                "quorate": 1, "version": len(self.r.hosts) + 2}]
        for i, h in enumerate(self.r.hosts.values()):
            out.append({"type": "node", "id": "node/" + h.name, "name": h.name, "ip": "127.0.0.1",
                        "nodeid": i + 1, "online": 0 if h.down else 1, "local": 1 if i == 0 else 0,
                        "level": ""})
        return out

    def h_GET_cluster_nextid(self, p, u):
        if "vmid" in p:
            vmid = int(p["vmid"])
            if self.r.vmid_taken(vmid):
                raise param_error("vmid", "VM %d already exists" % vmid)
            return str(vmid)
        return str(self.r.next_free_id())

    def h_GET_cluster_resources(self, p, u):
        t = p.get("type")
        out = []
        if t in (None, "node"):
            out.extend(self._node_res(h) for h in self.r.hosts.values())
        if t in (None, "vm"):
            out.extend(self._vm_res(vm) for vm in sorted(self.r.vms.values(), key=lambda v: v.vmid))
        if t in (None, "storage"):
            for h in self.r.hosts.values():
                for s in self._storages(h):
                    out.append({"id": "storage/%s/%s" % (h.name, s["storage"]), "type": "storage",
                                "storage": s["storage"], "node": h.name, "status": "available",
                                "content": s["content"], "plugintype": s["type"], "shared": 0,
                                "maxdisk": s["total"], "disk": s["used"]})
        if t in (None, "pool"):
            for pid in sorted(self.r.pools):
                out.append({"id": "/pool/" + pid, "type": "pool", "pool": pid})
        return pveacl.filter_resources(self.r.access, u, out)

    def _node_res(self, h):
        used = sum(v.memory_mib() * 2**20 for v in self.r.vms.values()
                   if v.host is h and v.status == "running")
        return {"id": "node/" + h.name, "type": "node", "node": h.name,
                "status": "offline" if h.down else "online", "maxcpu": h.topo.cpus,
                "maxmem": h.topo.memory, "mem": used, "cpu": 0.01, "uptime": int(time.time() - h.started),
                "level": "", "maxdisk": 100 * 2**30, "disk": 10 * 2**30, "cgroup-mode": 2}

    def _vm_res(self, vm):
        base = {"id": "qemu/%d" % vm.vmid, "type": "qemu", "vmid": vm.vmid, "node": vm.host.name}
        if time.time() - vm.created_at < float(self.w.knob("stats_delay_seconds")) or vm.host.down:
            base["status"] = "unknown"
            return base
        base.update(self._vm_stats(vm))
        pool = self._pool_of(vm.vmid)
        if pool:
            base["pool"] = pool
        return base

    def _vm_stats(self, vm):
        running = vm.status == "running"
        o = {"name": vm.name(), "status": vm.status, "template": 1 if vm.is_template() else 0,
             "maxcpu": vm.vcpus(), "maxmem": vm.memory_mib() * 2**20,
             "mem": vm.memory_mib() * 2**19 if running else 0, "cpu": 0.02 if running else 0,
             "maxdisk": self._disk_bytes(vm), "disk": 0, "netin": 0, "netout": 0,
             "diskread": 0, "diskwrite": 0,
             "uptime": int(time.time() - vm.started_at) if running and vm.started_at else 0}
        if vm.conf.get("tags"):
            o["tags"] = vm.conf["tags"]
        if vm.conf.get("lock"):
            o["lock"] = vm.conf["lock"]
        return o

    def _disk_bytes(self, vm):
        for k in ("scsi0", "virtio0", "sata0", "ide0"):
            m = re.search(r"size=(\d+)([KMGT]?)", vm.conf.get(k, ""))
            if m:
                return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m.group(2)]
        return 0

    def _pool_of(self, vmid):
        for pid, pool in self.r.pools.items():
            if vmid in pool["vms"]:
                return pid
        return None

    def h_GET_cluster_ha_resources(self, p, u):
        return []

    def h_GET_cluster_ha_status_current(self, p, u):
        return [{"id": "quorum", "type": "quorum", "status": "OK", "quorate": 1, "node": next(iter(self.r.hosts))}]

    def h_GET_access_permissions(self, p, u):
        return pveacl.access_permissions(self.r.access, u, p)

    # ---- nodes -------------------------------------------------------------
    def h_GET_nodes(self, p, u):
        out = []
        for h in self.r.hosts.values():
            r = self._node_res(h)
            out.append({"node": h.name, "status": r["status"], "cpu": r["cpu"], "maxcpu": r["maxcpu"],
                        "mem": r["mem"], "maxmem": r["maxmem"], "uptime": r["uptime"], "id": r["id"],
                        "type": "node", "level": "", "ssl_fingerprint": self.w.ssl_fingerprint,
                        "disk": r["disk"], "maxdisk": r["maxdisk"]})
        return [pveacl.node_entry(self.r.access, u, o) for o in out]

    def h_GET_nodes_node(self, p, u):
        self.host(p["node"])
        return [{"name": n} for n in ("qemu", "storage", "tasks", "status", "version", "firewall")]

    def h_GET_nodes_node_status(self, p, u):
        h = self.host(p["node"])
        t = h.topo
        used = self._node_res(h)["mem"]
        return {"cpuinfo": {"cpus": t.cpus, "cores": t.cores, "sockets": t.sockets, "model": t.model,
                            "mhz": "2400.000", "hvm": "1", "user_hz": 100,
                            "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov"},
                "memory": {"total": t.memory, "used": used, "free": t.memory - used, "available": t.memory - used},
                "swap": {"total": 0, "used": 0, "free": 0},
                "rootfs": {"total": 100 * 2**30, "used": 10 * 2**30, "free": 90 * 2**30, "avail": 90 * 2**30},
                "ksm": {"shared": 0}, "cpu": 0.01, "wait": 0, "loadavg": ["0.10", "0.12", "0.09"],
                "uptime": int(time.time() - h.started), "idle": 0,
                "kversion": "Linux 6.8.12-9-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-9 (2025-03-16T19:18Z) x86_64",
                "pveversion": "pve-manager/8.4.1/2a5fa54a8503f96d",
                "current-kernel": {"sysname": "Linux", "release": "6.8.12-9-pve", "machine": "x86_64",
                                   "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-9"},
                "boot-info": {"mode": "efi", "secureboot": 0}}

    def h_GET_nodes_node_qemu(self, p, u):
        h = self.host(p["node"])
        out = []
        for vm in sorted(self.r.vms.values(), key=lambda v: v.vmid):
            if vm.host is not h:
                continue
            o = {"vmid": vm.vmid}
            o.update(self._vm_stats(vm))
            if vm.status == "running":
                o["pid"] = vm.pid
            o.pop("template", None)
            if vm.is_template():
                o["template"] = 1
            out.append(o)
        return pveacl.filter_vms(self.r.access, u, out)

    def h_GET_nodes_node_qemu_vmid(self, p, u):
        self.vm(p["node"], p["vmid"])
        return [{"subdir": s} for s in ("config", "pending", "status", "firewall", "clone")]

    # ---- VM config ---------------------------------------------------------
    def h_GET_nodes_node_qemu_vmid_config(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        conf = dict(vm.conf)
        if str(p.get("current", "0")) != "1":
            conf.update(vm.pending)
            for k in vm.pending_delete:
                conf.pop(k, None)
        out = {k: self._typed(k, v) for k, v in conf.items()}
        out["digest"] = vm.digest()
        return out

    def h_GET_nodes_node_qemu_vmid_pending(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        keys = sorted(set(vm.conf) | set(vm.pending) | set(vm.pending_delete))
        out = []
        for k in keys:
            o = {"key": k}
            if k in vm.conf:
                o["value"] = self._typed(k, vm.conf[k])
            if k in vm.pending:
                o["pending"] = self._typed(k, vm.pending[k])
            if k in vm.pending_delete:
                o["delete"] = 1
            out.append(o)
        return out

    def _typed(self, k, v):
        info = self.v.method_info("/nodes/{node}/qemu/{vmid}/config", "PUT")
        prop = self.v.find_prop(self.v.props(info), k) or {}
        t = prop.get("type")
        try:
            if t in ("integer", "boolean"):
                return int(v)
            if t == "number":
                f = float(v)
                return int(f) if f.is_integer() else f
        except ValueError:
            pass
        return v

    def h_POST_nodes_node_qemu_vmid_config(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        self._check_root_only(p, u)
        pveacl.check_update_pre(self.r.access, u, vm.vmid, p)
        self._prepare_update(vm, p)

        def work(t):
            with self.w.lock:
                pveacl.check_update_worker(self.r.access, u, vm.vmid, vm.conf, p)
                self._apply_update(vm, p)
            t.log.append("update VM %d: %s" % (vm.vmid, _describe(p)))
        return self.r.start_task(vm.host.name, "qmconfig", vm.vmid, u, work)

    def h_PUT_nodes_node_qemu_vmid_config(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        self._check_root_only(p, u)
        pveacl.check_update_pre(self.r.access, u, vm.vmid, p)
        self._prepare_update(vm, p)
        pveacl.check_update_worker(self.r.access, u, vm.vmid, vm.conf, p)
        self._apply_update(vm, p)
        return None

    def _prepare_update(self, vm, p):
        if p.get("digest") and p["digest"] != vm.digest():
            raise ApiError(500, "detected modified configuration - file changed by other user? Try again.\n")
        if vm.conf.get("lock") and "lock" not in p:
            raise ApiError(500, "VM is locked (%s)\n" % vm.conf["lock"])
        for k, v in p.items():
            if DISK_RE.match(k):
                self._check_volume(vm, k, v)
        if not any(k not in ("node", "vmid", "digest", "background_delay") for k in p):
            raise ApiError(400, "no options specified\n")

    def _check_volume(self, vm, key, value):
        file = value.split(",")[0]
        if file.startswith("file="):
            file = file[5:]
        m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.*)$", file, re.I)
        if m and m.group(1) not in (ISO_STORAGE, DISK_STORAGE):
            raise ApiError(500, "storage '%s' does not exist\n" % m.group(1))

    def _apply_update(self, vm, p):
        newconf = {}
        for k, v in p.items():
            if k in ("node", "vmid", "digest", "delete", "revert", "background_delay", "force", "skiplock"):
                continue
            if k == "tags":
                v = ";".join(sorted(set(t.lower() for t in pveschema._split_list(v))))
            if DISK_RE.match(k):
                v = self._alloc_volume(vm, k, v, newconf)
            newconf[k] = v
        deletes = _split(p.get("delete", ""))
        running = vm.status == "running"
        for k, v in newconf.items():
            if running and k not in FAST_PLUG and not HOTPLUG_RE.match(k):
                vm.pending[k] = v
                if k in vm.pending_delete:
                    vm.pending_delete.remove(k)
            else:
                vm.conf[k] = v
                vm.pending.pop(k, None)
        for k in deletes:
            if running and k not in FAST_PLUG and not HOTPLUG_RE.match(k):
                if k not in vm.pending_delete:
                    vm.pending_delete.append(k)
                vm.pending.pop(k, None)
            else:
                vm.conf.pop(k, None)
                vm.pending.pop(k, None)
        vm.save()

    def _alloc_volume(self, vm, key, value, allocated=None):
        """A <storage>:<size> value as the volume qemu-server allocates for it, named with the first free
        vm-<vmid>-disk-<n> (not one of the config's, nor one allocated earlier in the same update)."""
        parts = value.split(",")
        file = parts[0][5:] if parts[0].startswith("file=") else parts[0]
        m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?)$", file, re.I)
        if m and "media=cdrom" not in parts:
            used = set()
            for v in list(vm.conf.values()) + list(vm.pending.values()) + list((allocated or {}).values()):
                used.update(int(x) for x in re.findall(r"vm-%d-disk-(\d+)" % vm.vmid, str(v)))
            n = next(i for i in range(len(used) + 1) if i not in used)
            if any(x.startswith("import-from=") for x in parts):
                return self.import_volume(vm, value, n)
            rest = [x for x in parts[1:] if not x.startswith("size=")]
            return ",".join(["%s:vm-%d-disk-%d" % (m.group(1), vm.vmid, n)] + rest + [_new_size(key, rest, m)])
        if re.match(r"^[a-z][a-z0-9\-_.]*[a-z0-9]:cloudinit$", file, re.I):
            st = file.split(":")[0]
            rest = [x for x in parts[1:] if x != "media=cdrom"]
            return ",".join(["%s:vm-%d-cloudinit" % (st, vm.vmid)] + rest + ["media=cdrom"])
        return value

    def h_PUT_nodes_node_qemu_vmid_resize(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        if "skiplock" in p:
            raise param_error("skiplock", "Only root may use this option.")
        disk = p["disk"]
        if disk not in vm.conf:
            raise ApiError(500, "disk '%s' does not exist\n" % disk)
        try:
            pveacl.check_resize(self.r.access, u, vm.conf[disk])
        except pveacl.Error as e:
            return self.r.start_task(vm.host.name, "resize", vm.vmid, u, lambda t, e=e: _raise(e))
        m = re.match(r"^(\+?)(\d+(?:\.\d+)?)([KMGT]?)$", p["size"])
        if not m:
            raise param_error("size", "value does not match the regex pattern")
        unit = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        cur = 0
        mm = re.search(r"size=(\d+(?:\.\d+)?)([KMGT]?)", vm.conf[disk])
        if mm:
            cur = float(mm.group(1)) * unit[mm.group(2)]
        new = float(m.group(2)) * unit[m.group(3)] + (cur if m.group(1) else 0)
        if new < cur:
            raise ApiError(500, "shrinking disks is not supported\n")
        gib = new / 2**30
        size = ("%dG" % gib) if gib.is_integer() else "%dM" % (new / 2**20)
        parts = [x for x in vm.conf[disk].split(",") if not x.startswith("size=")] + ["size=" + size]
        vm.conf[disk] = ",".join(parts)
        vm.save()
        return self.r.start_task(vm.host.name, "resize", vm.vmid, u, lambda t: t.log.append("resized"))

    # ---- create / clone / delete -------------------------------------------
    def h_POST_nodes_node_qemu(self, p, u):
        h = self.host(p["node"])
        vmid = int(p["vmid"])
        self._check_root_only(p, u)
        pveacl.check_create(self.r.access, u, vmid, p)
        if vmid in self.r.vms:
            raise ApiError(500, "unable to create VM %d: config file already exists\n" % vmid)
        self.r.reserved.pop(vmid, None)
        vm = hostsmod.VM(h, vmid, {"lock": "create"})
        self.r.vms[vmid] = vm
        vm.save()
        conf = {k: v for k, v in p.items() if k not in ("node", "vmid", "start", "pool", "unique",
                                                         "force", "live-restore", "archive", "storage")}

        def work(t):
            time.sleep(float(self.w.knob("create_seconds")))
            with self.w.lock:
                vm.conf = {"smbios1": "uuid=%s" % uuid.uuid4(), "vmgenid": str(uuid.uuid4()),
                           "meta": "creation-qemu=9.2.0,ctime=%d" % int(time.time())}
                with self.create_failed_removes(vm):
                    self._apply_update(vm, conf)
                if p.get("pool") in self.r.pools:
                    self.r.pools[p["pool"]]["vms"].add(vmid)
            if str(p.get("start", "0")) == "1":
                self._do_start(vm, t)
        return self.r.start_task(h.name, "qmcreate", vmid, u, work)

    def h_POST_nodes_node_qemu_vmid_clone(self, p, u):
        src = self.vm(p["node"], p["vmid"])
        newid = int(p["newid"])
        if self.w.take_fault("clone_error_next"):  # the request itself fails, as on a cluster lock timeout
            raise ApiError(500, "clone failed: cfs-lock 'storage-local-lvm' error: got lock request timeout\n")
        if newid in self.r.vms:
            raise ApiError(500, "unable to create VM %d: config file already exists\n" % newid)
        target = p.get("target", src.host.name)
        if target not in self.r.hosts:
            raise ApiError(500, "no such cluster node '%s'\n" % target)
        if target != src.host.name:
            raise ApiError(500, "Can't clone VM to node '%s' (VM uses local storage)\n" % target)
        full = p.get("full")
        full = (not src.is_template()) if full is None else pveschema.parse_bool(full) == 1
        if not src.is_template() and not full:
            raise param_error("full", "Linked clone feature is not supported for a VM that is no template")
        if "storage" in p and not full:
            raise param_error("storage", "parameter 'storage' not allowed for linked clones")
        pveacl.check_clone(self.r.access, u, src.conf, p)
        if src.conf.get("lock"):
            raise ApiError(500, "VM is locked (%s)\n" % src.conf["lock"])
        self.r.reserved.pop(newid, None)
        new = hostsmod.VM(src.host, newid, {"lock": "clone"})
        self.r.vms[newid] = new
        new.save()
        srcconf = dict(src.conf)
        fw = (dict(src.firewall_options), [dict(r) for r in src.firewall_rules])
        fail = self.w.take_fault("clone_fail_next") or random.random() < float(self.w.knob("clone_fail_rate"))

        def work(t):
            t.log.append("create %s clone of drive scsi0" % ("full" if full else "linked"))
            self._clone_copy(t, src, full, p.get("storage"))
            with self.w.lock:
                if fail:
                    new.remove_file()
                    new.deleted = True
                    if self.r.vms.get(newid) is new:
                        del self.r.vms[newid]
                    raise TaskError("clone failed: simulated storage error (fault injection)")
                new.conf = self._clone_conf(srcconf, newid, p, full, src)
                new.firewall_options, new.firewall_rules = fw
                new.created_at = time.time()
                new.save()
                self.w.vm_event("created", new)
            # As in qemu-server's clone worker, the lock goes first; the VM joins its pool after, and the task
            # ends only then (clone_finish_seconds stands for that tail).
            time.sleep(float(self.w.knob("clone_finish_seconds")))
            if p.get("pool"):
                with self.w.lock:
                    self.r.pools[p["pool"]]["vms"].add(newid)
        return self.r.start_task(src.host.name, "qmclone", src.vmid, u, work)

    # ---- clone delays: the copy's time and the storage lock (knobs clone_seconds, full_clone_seconds_per_gib,
    # storage_lock; tests/sim/README.md "Delay profiles") ------------------------------------------------------------
    def _clone_copy(self, t, src, full, storage):
        """The clone's storage work: clone_seconds, plus for a full clone the template's disk at
        full_clone_seconds_per_gib; with storage_lock, under the target storage's lock on that host, so parallel
        clones onto one storage take turns."""
        seconds = float(self.w.knob("clone_seconds"))
        if full:
            seconds += self._disk_bytes(src) / 2**30 * float(self.w.knob("full_clone_seconds_per_gib"))
        if not self.w.knob("storage_lock"):
            time.sleep(seconds)
            return
        storage = storage or self._disk_storage(src)
        lk = self.r.storage_lock(src.host.name, storage)
        if not lk.acquire(blocking=False):
            t.log.append("waiting for lock on storage '%s'" % storage)
            lk.acquire()
        try:
            time.sleep(seconds)
        finally:
            lk.release()

    @staticmethod
    def _disk_storage(vm):
        for k in ("scsi0", "virtio0", "sata0", "ide0"):
            m = re.match(r"^(?:file=)?([^:,]+):", vm.conf.get(k, ""))
            if m:
                return m.group(1)
        return DISK_STORAGE

    def _clone_conf(self, src, newid, p, full, srcvm):
        conf = {}
        for k, v in src.items():
            if k in ("template", "lock", "parent"):
                continue
            if re.match(r"^net\d+$", k):
                v = re.sub(r"([=])([0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5})", lambda m: m.group(1) + _mac(), v)
            elif DISK_RE.match(k) and "media=cdrom" not in v:
                parts = v.split(",")
                m = re.match(r"^([^:]+):(?:base-\d+-disk-\d+/)?(?:base|vm)-\d+-disk-(\d+)$", parts[0])
                if m:
                    if full:
                        parts[0] = "%s:vm-%d-disk-%s" % (p.get("storage", m.group(1)), newid, m.group(2))
                    else:
                        parts[0] = "%s:base-%d-disk-%s/vm-%d-disk-%s" % (m.group(1), srcvm.vmid, m.group(2),
                                                                       newid, m.group(2))
                v = ",".join(parts)
            elif DISK_RE.match(k) and "cloudinit" in v:
                v = re.sub(r"vm-\d+-cloudinit", "vm-%d-cloudinit" % newid, v)
            conf[k] = v
        conf["name"] = p.get("name") or "Copy-of-VM-%s" % src.get("name", srcvm.vmid)
        if "description" in p:
            conf["description"] = p["description"]
        conf["smbios1"] = "uuid=%s" % uuid.uuid4()
        conf["vmgenid"] = str(uuid.uuid4())
        return conf

    def h_DELETE_nodes_node_qemu_vmid(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        if "skiplock" in p:
            raise param_error("skiplock", "Only root may use this option.")
        if vm.status == "running":
            raise ApiError(500, "VM %d is running - destroy failed\n" % vm.vmid)
        if str(vm.conf.get("protection", "0")) == "1":
            raise ApiError(500, "can't remove VM %d - protection mode enabled\n" % vm.vmid)
        if vm.conf.get("lock"):
            raise ApiError(500, "VM is locked (%s)\n" % vm.conf["lock"])
        purge = str(p.get("purge", "0")) == "1"

        def work(t):
            with self._config_locked(vm):  # as destroy_vm's worker: the checks again under the lock, then destroy
                time.sleep(float(self.w.knob("destroy_seconds")))
                self._destroy(vm, t, purge)
        return self.r.start_task(vm.host.name, "qmdestroy", vm.vmid, u, work)

    def _destroy(self, vm, t, purge):
        if self.w.take_fault("destroy_fail_next") or random.random() < float(self.w.knob("destroy_fail_rate")):
            raise TaskError("lvremove 'pve/vm-%d-disk-0' error: Logical volume pve/vm-%d-disk-0 in use. "
                            "(fault injection)" % (vm.vmid, vm.vmid))
        with self.w.lock:
            if vm.deleted:  # another destroy went first while this one waited for the lock
                raise TaskError("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist"
                                % (vm.host.name, vm.vmid))
            if vm.status == "running":
                raise TaskError("VM %d is running - destroy failed" % vm.vmid)
            self.check_base_unused(vm)
            vm.remove_file()
            vm.deleted = True
            vm.history["deleted"] = time.time()
            if self.r.vms.get(vm.vmid) is vm:
                del self.r.vms[vm.vmid]
            for pool in self.r.pools.values():
                if purge:
                    pool["vms"].discard(vm.vmid)
            t.log.append("destroyed VM %d" % vm.vmid)
            self.w.vm_event("deleted", vm)

    @contextlib.contextmanager
    def _config_locked(self, vm):
        """qemu-server's lock_config (AbstractConfig lock_config_full): a flock of the VMID's lock file, waited for
        config_lock_timeout_seconds (10 in qemu-server), then the task fails with PVE's message."""
        lk = vm.host.config_lock(vm.vmid)
        if not lk.acquire(timeout=float(self.w.knob("config_lock_timeout_seconds"))):
            raise TaskError("can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout" % vm.vmid)
        try:
            yield
        finally:
            lk.release()

    # ---- power -------------------------------------------------------------
    def h_GET_nodes_node_qemu_vmid_status(self, p, u):
        self.vm(p["node"], p["vmid"])
        return [{"subdir": s} for s in ("current", "start", "stop", "shutdown", "reboot")]

    def h_GET_nodes_node_qemu_vmid_status_current(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        o = {"vmid": vm.vmid, "qmpstatus": "paused" if _paused(vm) else vm.status, "cpus": vm.vcpus(),
             "ha": {"managed": 0}}
        o.update(self._vm_stats(vm))
        if vm.status == "running":
            o["pid"] = vm.pid
            o["running-machine"] = "pc-i440fx-9.2+pve1"
            o["running-qemu"] = "9.2.0"
        if vm.is_template():
            o["template"] = 1
        else:
            o.pop("template", None)
        return o

    def h_POST_nodes_node_qemu_vmid_status_start(self, p, u):
        if "skiplock" in p:
            raise param_error("skiplock", "Only root may use this option.")
        node, vmid = p["node"], int(p["vmid"])
        self.host(node)
        vm = self.r.vms.get(vmid)
        if vm is not None and vm.host.name != node:
            vm = None

        def work(t):
            if vm is None or vm.deleted:
                raise TaskError("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist" % (node, vmid))
            self._do_start(vm, t)
        return self.r.start_task(node, "qmstart", vmid, u, work)

    def _do_start(self, vm, t):
        with self._config_locked(vm):  # vm_start runs under the VMID's config lock too
            self._do_start_locked(vm, t)

    def _do_start_locked(self, vm, t):
        with self.w.lock:
            if vm.is_template():
                raise TaskError("you can't start a vm if it's a template")
            if vm.status == "running" or vm.stopping:
                raise TaskError("VM %d already running" % vm.vmid)
            if vm.conf.get("lock") and vm.conf["lock"] != "suspended":  # suspended: resumed from its vmstate
                raise TaskError("VM is locked (%s)" % vm.conf["lock"])
            if vm.host.down:
                raise TaskError("node '%s' is offline" % vm.host.name)
            self._apply_pending(vm)
            self._check_start(vm)
            vm.pci_paths = self._check_hostpci(vm)
            if self.w.take_fault("start_fail_next"):
                raise TaskError("start failed: QEMU exited with code 1 (fault injection)")
            vm.status = "starting"
        t.log.append("starting VM %d" % vm.vmid)
        time.sleep(self._start_seconds(vm, t))
        try:
            pid = self.w.procs.start(vm)
        except Exception as e:
            with self.w.lock:
                vm.status = "stopped"
            raise TaskError(str(e))
        with self.w.lock:
            if vm.deleted:
                self.w.procs.stop(vm, pid)
                raise TaskError("VM %d was destroyed while starting" % vm.vmid)
            vm.pid = pid
            vm.status = "running"
            vm.started_at = time.time()
            vm.incarnation = uuid.uuid4().hex
            vm.history["started"].append(vm.started_at)
            self._drop_vmstate(vm)
            self.w.vm_event("started", vm)

    def _apply_pending(self, vm):
        if not vm.pending and not vm.pending_delete:
            return
        vm.conf.update(vm.pending)
        for k in vm.pending_delete:
            vm.conf.pop(k, None)
        vm.pending, vm.pending_delete = {}, []
        vm.save()

    def _check_start(self, vm):
        c = vm.conf
        mem = vm.memory_mib()
        for k, v in c.items():
            if DISK_RE.match(k):
                m = re.match(r"^(?:file=)?([^:,]+):(iso/[^,]+)", v)
                if m:
                    path = os.path.join(vm.host.iso_dir, m.group(2)[4:])
                    if m.group(1) != ISO_STORAGE or not os.path.exists(path):
                        raise TaskError("volume '%s:%s' does not exist" % (m.group(1), m.group(2)))
        if str(c.get("numa", "0")) != "1":
            return
        numas = sorted((int(k[4:]), v) for k, v in c.items() if re.match(r"^numa\d+$", k))
        if not numas:
            return
        total = 0
        host_nodes = set(vm.host.topo.numa_ids())
        maxcpu = vm.vcpus()
        for i, v in numas:
            opts, _ = self.v.parse_property_string(
                self.v.props(self.v.method_info("/nodes/{node}/qemu/{vmid}/config", "PUT"))["numa[n]"]["format"], v)
            if "memory" not in opts:
                raise TaskError("missing NUMA node%d memory value" % i)
            for cid in _idlist(opts.get("cpus", "")):
                if cid >= maxcpu:
                    raise TaskError("numa%d: cpu ids out of range" % i)
            if "hostnodes" in opts:
                for hn in _idlist(opts["hostnodes"]):
                    if hn not in host_nodes:
                        raise TaskError("host NUMA node%d doesn't exist" % hn)
                if "policy" not in opts:
                    raise TaskError("you need to define a policy for hostnode %s" % opts["hostnodes"])
            total += float(opts["memory"])
        if total != mem:
            raise TaskError("total memory for NUMA nodes must be equal to vm static memory")

    def h_POST_nodes_node_qemu_vmid_status_stop(self, p, u):
        return self._stop(p, u, "qmstop", 0.0)

    def h_POST_nodes_node_qemu_vmid_status_shutdown(self, p, u):
        if "skiplock" in p:
            raise param_error("skiplock", "Only root may use this option.")
        return self._stop(p, u, "qmshutdown", self._shutdown_seconds(self.vm(p["node"], p["vmid"]), p))

    def h_POST_nodes_node_qemu_vmid_status_reboot(self, p, u):
        vm = self.vm(p["node"], p["vmid"])

        def work(t):
            self._do_stop(vm, t, 0)
            self._do_start(vm, t)
        return self.r.start_task(vm.host.name, "qmreboot", vm.vmid, u, work)

    def _stop(self, p, u, ttype, delay):
        if "skiplock" in p:
            raise param_error("skiplock", "Only root may use this option.")
        vm = self.vm(p["node"], p["vmid"])
        return self.r.start_task(vm.host.name, ttype, vm.vmid, u, lambda t: self._do_stop(vm, t, delay))

    def _do_stop(self, vm, t, delay):
        with self._config_locked(vm):  # vm_stop holds the lock while QEMU goes down and while it cleans up after
            self._do_stop_locked(vm, t, delay)

    def _do_stop_locked(self, vm, t, delay):
        if delay:
            time.sleep(delay)
        with self.w.lock:
            if vm.status != "running":
                t.log.append("VM %d not running" % vm.vmid)
                return
            pid = vm.pid
            vm.stopping = True
            vm.last_pinning = hostsmod.thread_pinning(pid) if pid else None
        time.sleep(float(self.w.knob("stop_seconds")))  # QEMU takes this long to exit: the VM still runs
        self.w.procs.stop(vm, pid)
        with self.w.lock:
            vm.stopping = False
            vm.status = "stopped"
            vm.pid = None
            vm.history["stopped"].append(time.time())
            self._apply_pending(vm)
            self.w.vm_event("stopped", vm)
        time.sleep(float(self.w.knob("stop_cleanup_seconds")))  # vm_stop_cleanup: stopped, the lock still held

    # ---- suspend / resume (qemu-server's vm_suspend, vm_resume; knobs vmstate_write_seconds_per_gib,
    # vmstate_read_seconds_per_gib; tests/sim/README.md "Suspend and resume") -----------------------------------
    def h_POST_nodes_node_qemu_vmid_status_suspend(self, p, u):
        if "skiplock" in p:
            raise param_error("skiplock", "Only root may use this option.")
        vm = self.vm(p["node"], p["vmid"])
        if vm.status != "running":
            raise ApiError(500, "VM %d not running\n" % vm.vmid)
        todisk = pveschema.parse_bool(p.get("todisk", "0")) == 1
        storage = None
        if todisk:
            self.r.access.check_vm_perm(u, vm.vmid, None, ["VM.Config.Disk"])
            if any(re.match(r"^hostpci\d+$", k) for k in vm.conf):
                raise ApiError(500, "cannot suspend VM to disk due to passed-through PCI device(s), which lack the "
                               "possibility to save/restore their internal state\n")
            storage = p.get("statestorage") or vm.conf.get("vmstatestorage") or self._disk_storage(vm)
            self.r.access.check(u, "/storage/" + storage, ["Datastore.AllocateSpace"])
            self._storage(vm.host, storage)
        work = (lambda t: self._hibernate(vm, t, storage)) if todisk else (lambda t: self._pause(vm, t))
        return self.r.start_task(vm.host.name, "qmsuspend" if todisk else "qmpause", vm.vmid, u, work)

    def h_POST_nodes_node_qemu_vmid_status_resume(self, p, u):
        for k in ("skiplock", "nocheck"):
            if k in p:
                raise param_error(k, "Only root may use this option.")
        vm = self.vm(p["node"], p["vmid"])
        from_disk = vm.conf.get("lock") == "suspended"
        if not from_disk and vm.status != "running":
            raise ApiError(500, "VM %d not running\n" % vm.vmid)
        work = (lambda t: self._do_start(vm, t)) if from_disk else (lambda t: self._unpause(vm, t))
        return self.r.start_task(vm.host.name, "qmresume", vm.vmid, u, work)

    def _pause(self, vm, t):
        """QMP stop: the guest is frozen, its QEMU process and memory stay (status running, qmpstatus paused)."""
        with self._config_locked(vm), self.w.lock:
            if vm.status != "running":
                raise TaskError("VM %d not running" % vm.vmid)
            if vm.conf.get("lock"):
                raise TaskError("VM is locked (%s)" % vm.conf["lock"])
            vm.paused_boot = vm.started_at

    def _unpause(self, vm, t):
        with self._config_locked(vm), self.w.lock:
            if vm.is_template():
                raise TaskError("VM %d is a template and cannot be resumed!" % vm.vmid)
            if not _paused(vm):
                return
            if vm.conf.get("lock"):
                raise TaskError("VM is locked (%s)" % vm.conf["lock"])
            vm.paused_boot = None

    def _hibernate(self, vm, t, storage):
        """qm suspend --todisk: the lock 'suspending' and a vmstate volume, the RAM written to it (outside the config
        lock, memory x vmstate_write_seconds_per_gib), then QEMU quits and the lock becomes 'suspended'."""
        with self._config_locked(vm), self.w.lock:
            if vm.status != "running":
                raise TaskError("VM %d not running" % vm.vmid)
            if vm.conf.get("lock"):
                raise TaskError("VM is locked (%s)" % vm.conf["lock"])
            vm.conf["lock"] = "suspending"
            vm.conf["vmstate"] = "%s:vm-%d-state-suspend-%s" % (storage, vm.vmid, time.strftime("%Y-%m-%d"))
            vm.conf["runningmachine"] = "pc-i440fx-9.2+pve1"
            vm.save()
            boot = vm.started_at
        time.sleep(vm.memory_mib() / 1024 * float(self.w.knob("vmstate_write_seconds_per_gib")))
        with self._config_locked(vm), self.w.lock:
            if vm.status != "running" or vm.started_at != boot:  # PVE leaves the lock 'suspending' to show it
                for k in ("vmstate", "runningmachine"):
                    vm.conf.pop(k, None)
                vm.save()
                raise TaskError("savevm not active")
            t.log.append("State saved, quitting")
            vm.last_pinning = hostsmod.thread_pinning(vm.pid) if vm.pid else None
            self.w.procs.stop(vm, vm.pid)
            vm.status, vm.pid, vm.paused_boot = "stopped", None, None
            vm.history["stopped"].append(time.time())
            vm.conf["lock"] = "suspended"
            vm.save()
            self.w.vm_event("stopped", vm)

    def _shutdown_seconds(self, vm, p):
        """A paused guest cannot shut down: refused, or with forceStop a stop (vm_shutdown's check)."""
        if not _paused(vm):
            return float(self.w.knob("shutdown_seconds"))
        if pveschema.parse_bool(p.get("forceStop", "0")) != 1:
            raise ApiError(500, "VM is paused - cannot shutdown\n")
        return 0.0

    def _start_seconds(self, vm, t):
        """QEMU's start; from a vmstate (a hibernated VM) also its RAM read back: memory x
        vmstate_read_seconds_per_gib."""
        seconds = float(self.w.knob("start_seconds"))
        if vm.conf.get("lock") == "suspended" and vm.conf.get("vmstate"):
            t.log.append("resuming VM %d from %s" % (vm.vmid, vm.conf["vmstate"]))
            seconds += vm.memory_mib() / 1024 * float(self.w.knob("vmstate_read_seconds_per_gib"))
        return seconds

    def _drop_vmstate(self, vm):
        """After a start from the vmstate: its volume freed, the lock and the state's keys gone (vm_start_nolock)."""
        if vm.conf.get("lock") != "suspended":
            return
        for k in ("lock", "vmstate", "runningmachine", "runningcpu"):
            vm.conf.pop(k, None)
        vm.save()

    # ---- tasks -------------------------------------------------------------
    def _task(self, p):
        upid = p["upid"]
        t = self.r.tasks.get(upid)
        if not UPID_RE.match(upid):
            raise param_error("upid", "unable to parse worker upid '%s'" % upid)
        if t is None or t.node != p["node"]:
            raise param_error("upid", "no such task")
        return t

    def h_GET_nodes_node_tasks_upid_status(self, p, u):
        t = self._task(p)
        pveacl.check_task(self.r.access, u, t.node, t.user)
        with self.w.lock:
            t.polls += 1
            return t.status_obj()

    def h_GET_nodes_node_tasks_upid_log(self, p, u):
        t = self._task(p)
        pveacl.check_task(self.r.access, u, t.node, t.user)
        start = int(p.get("start", 0))
        limit = int(p.get("limit", 50))
        lines = t.log[start:start + limit]
        return [{"n": start + i + 1, "t": l} for i, l in enumerate(lines)]

    def h_GET_nodes_node_tasks_upid(self, p, u):
        self._task(p)
        return [{"name": "log"}, {"name": "status"}]

    def h_DELETE_nodes_node_tasks_upid(self, p, u):
        self._task(p)
        return None

    def h_GET_nodes_node_tasks(self, p, u):
        out = []
        for t in self.r.tasks.values():
            if t.node == p["node"]:
                o = t.status_obj()
                if t.status == "stopped":
                    o["status"] = t.exitstatus
                    o["endtime"] = int(t.endtime)
                out.append(o)
        return pveacl.filter_tasks(self.r.access, u, p["node"], out)[-int(p.get("limit", 50)):]

    # ---- storage -----------------------------------------------------------
    @staticmethod
    def _dir_bytes(d):
        """Bytes of the files in d; a file deleted between listdir and stat (an ISO being removed) counts 0."""
        used = 0
        for f in os.listdir(d):
            try:
                used += os.path.getsize(os.path.join(d, f))
            except FileNotFoundError:
                pass
        return used

    def _storages(self, h):
        used = self._dir_bytes(h.iso_dir)
        if os.path.isdir(pveimage.import_dir(h)):
            used += self._dir_bytes(pveimage.import_dir(h))
        return [{"storage": ISO_STORAGE, "type": "dir", "content": "backup,import,iso,vztmpl,snippets",
                 "shared": 0, "active": 1, "enabled": 1, "total": 100 * 2**30, "used": used,
                 "avail": 100 * 2**30 - used, "used_fraction": used / (100 * 2**30)},
                {"storage": DISK_STORAGE, "type": "lvmthin", "content": "images,rootdir", "shared": 0,
                 "active": 1, "enabled": 1, "total": 1000 * 2**30, "used": 0, "avail": 1000 * 2**30,
                 "used_fraction": 0.0}]

    def h_GET_storage(self, p, u):
        return pveacl.filter_storages(self.r.access, u, [
            {"storage": ISO_STORAGE, "type": "dir", "content": "backup,import,iso,vztmpl,snippets",
             "path": "/var/lib/vz", "digest": "0" * 40},
            {"storage": DISK_STORAGE, "type": "lvmthin", "content": "images,rootdir",
             "thinpool": "data", "vgname": "pve", "digest": "0" * 40}])

    def h_GET_nodes_node_storage(self, p, u):
        h = self.host(p["node"])
        out = self._storages(h)
        if p.get("content"):
            out = [s for s in out if p["content"] in s["content"].split(",")]
        if p.get("storage"):
            out = [s for s in out if s["storage"] == p["storage"]]
        return pveacl.filter_storages(self.r.access, u, out)

    def _storage(self, h, name):
        for s in self._storages(h):
            if s["storage"] == name:
                return s
        raise ApiError(500, "storage '%s' does not exist\n" % name)

    def h_GET_nodes_node_storage_storage_status(self, p, u):
        return self._storage(self.host(p["node"]), p["storage"])

    def h_POST_nodes_node_storage_storage_upload(self, p, u):
        h = self.host(p["node"])
        s = self._storage(h, p["storage"])
        if s["type"] != "dir":
            raise ApiError(500, "can't upload to storage type '%s'\n" % s["type"])
        if p["content"] not in s["content"].split(","):
            raise ApiError(500, "storage '%s' does not support '%s' content\n" % (p["storage"], p["content"]))
        fname = re.sub(r"[^-a-zA-Z0-9_.]", "_", p["filename"])
        if p["content"] == "iso" and not re.search(r"\.(iso|img)$", fname, re.I):
            raise param_error("filename", "wrong file extension")
        data = getattr(self._tls, "upload", None)
        if data is None:
            raise ApiError(500, "upload failed: no file part named 'filename' in the request\n")
        return self._finish_upload(h, fname, p, u, data)

    def _finish_upload(self, h, fname, p, u, data):
        if p.get("checksum"):
            import hashlib
            got = hashlib.new(p["checksum-algorithm"], data).hexdigest()
            if got.lower() != p["checksum"].lower():
                upid = self.r.start_task(h.name, "imgcopy", "", u, lambda t: (_ for _ in ()).throw(
                    TaskError("checksum mismatch: got '%s' != expected '%s'" % (got, p["checksum"]))))
                return upid
        if self.w.take_fault("upload_fail_next"):
            return self.r.start_task(h.name, "imgcopy", "", u, lambda t: (_ for _ in ()).throw(
                TaskError("import failed: simulated failure (fault injection)")))
        sub = {"iso": h.iso_dir}.get(p["content"], os.path.join(h.root, "var", "lib", "vz", "template", "cache"))
        os.makedirs(sub, exist_ok=True)
        util.atomic_write(os.path.join(sub, fname), data, 0o644)

        def work(t):
            t.log.append("target file: %s" % os.path.join(sub, fname))
            t.log.append("file size is: %d" % len(data))
        return self.r.start_task(h.name, "imgcopy", "", u, work)

    def h_GET_nodes_node_storage_storage_content(self, p, u):
        h = self.host(p["node"])
        s = self._storage(h, p["storage"])
        out = []
        if s["storage"] == ISO_STORAGE:
            for f in sorted(os.listdir(h.iso_dir)):
                if f.startswith(".tmp-"):
                    continue
                st = os.stat(os.path.join(h.iso_dir, f))
                out.append({"volid": "%s:iso/%s" % (ISO_STORAGE, f), "format": "iso", "content": "iso",
                            "size": st.st_size, "ctime": int(st.st_mtime)})
            out += self.import_content(h)
        else:
            for vm in sorted(self.r.vms.values(), key=lambda v: v.vmid):
                if vm.host is not h:
                    continue
                for k, v in sorted(vm.conf.items()):
                    if DISK_RE.match(k) and v.startswith(DISK_STORAGE + ":") and "media=cdrom" not in v:
                        vol = v.split(",")[0]
                        out.append({"volid": vol, "format": "raw", "content": "images", "vmid": vm.vmid,
                                    "size": self._disk_bytes(vm), "ctime": int(vm.created_at)})
        if p.get("content"):
            out = [o for o in out if o["content"] == p["content"]]
        if p.get("vmid"):
            out = [o for o in out if o.get("vmid") == int(p["vmid"])]
        return out

    def h_DELETE_nodes_node_storage_storage_content_volume(self, p, u):
        h = self.host(p["node"])
        st = p.get("storage")
        vol = p["volume"]
        if ":" in vol:
            st, vol = vol.split(":", 1)
        if st is None:
            raise param_error("storage", "property is missing and it is not optional")
        self._storage(h, st)
        pveacl.check_content_delete(self.r.access, u, st)
        path = os.path.join(h.iso_dir, vol[4:]) if st == ISO_STORAGE and vol.startswith("iso/") else None
        if st == ISO_STORAGE and vol.startswith("import/"):
            path = os.path.join(pveimage.import_dir(h), vol[7:])

        def work(t):
            if path is None or not os.path.exists(path):
                raise TaskError("unable to delete volume '%s:%s' - file does not exist" % (st, vol))
            os.unlink(path)
            t.log.append("Removed volume '%s:%s'" % (st, vol))
        upid = self.r.start_task(h.name, "imgdel", st, u, work)
        delay = int(p.get("delay", 0) or 0)
        if delay:
            def wait():
                t = self.r.tasks[upid]
                if t.done.wait(delay) and t.exitstatus == "OK":
                    return None
                return upid
            return wait
        return upid

    # ---- firewall ----------------------------------------------------------
    def h_GET_cluster_firewall_groups(self, p, u):
        return [{"group": g, "comment": v.get("comment", ""), "digest": _digest(v)}
                for g, v in sorted(self.r.fw_groups.items())]

    def h_POST_cluster_firewall_groups(self, p, u):
        g = p["group"]
        if not re.match(r"^[A-Za-z][A-Za-z0-9\-_]+$", g):
            raise param_error("group", "invalid security group name")
        if p.get("rename"):
            if p["rename"] not in self.r.fw_groups:
                raise ApiError(500, "Security group '%s' does not exist\n" % p["rename"])
            self.r.fw_groups[g] = self.r.fw_groups.pop(p["rename"])
        elif g in self.r.fw_groups:
            raise ApiError(500, "Security group '%s' already exists\n" % g)
        else:
            self.r.fw_groups[g] = {"comment": p.get("comment", ""), "rules": []}
        return None

    def _group(self, g):
        if g not in self.r.fw_groups:
            raise ApiError(500, "no such security group '%s'\n" % g)
        return self.r.fw_groups[g]

    def h_GET_cluster_firewall_groups_group(self, p, u):
        return _rules_out(self._group(p["group"])["rules"])

    def h_POST_cluster_firewall_groups_group(self, p, u):
        _add_rule(self._group(p["group"])["rules"], p, ("group",))
        return None

    def h_DELETE_cluster_firewall_groups_group(self, p, u):
        grp = self._group(p["group"])
        if grp["rules"]:
            raise ApiError(500, "Security group '%s' is not empty\n" % p["group"])
        del self.r.fw_groups[p["group"]]
        return None

    def h_GET_nodes_node_qemu_vmid_firewall_rules(self, p, u):
        return _rules_out(self.vm(p["node"], p["vmid"]).firewall_rules)

    def h_POST_nodes_node_qemu_vmid_firewall_rules(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        if p.get("digest") and p["digest"] != _digest(vm.firewall_rules):
            raise ApiError(500, "detected modified configuration - file changed by other user? Try again.\n")
        _add_rule(vm.firewall_rules, p, ("node", "vmid"))
        return None

    def _rule(self, vm, pos):
        pos = int(pos)
        if pos < 0 or pos >= len(vm.firewall_rules):
            raise ApiError(400, "Parameter verification failed.\n", {"pos": "no rule at position %d" % pos})
        return pos

    def h_GET_nodes_node_qemu_vmid_firewall_rules_pos(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        pos = self._rule(vm, p["pos"])
        return _rules_out(vm.firewall_rules)[pos]

    def h_PUT_nodes_node_qemu_vmid_firewall_rules_pos(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        pos = self._rule(vm, p["pos"])
        rule = vm.firewall_rules[pos]
        for k, v in p.items():
            if k not in ("node", "vmid", "pos", "digest", "delete", "moveto"):
                rule[k] = v
        for k in _split(p.get("delete", "")):
            rule.pop(k, None)
        if "moveto" in p:
            r = vm.firewall_rules.pop(pos)
            vm.firewall_rules.insert(min(int(p["moveto"]), len(vm.firewall_rules)), r)
        return None

    def h_DELETE_nodes_node_qemu_vmid_firewall_rules_pos(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        pos = self._rule(vm, p["pos"])
        del vm.firewall_rules[pos]
        return None

    def h_GET_nodes_node_qemu_vmid_firewall_options(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        out = {k: _int_or(v) for k, v in vm.firewall_options.items()}
        out["digest"] = _digest(vm.firewall_options)
        return out

    def h_PUT_nodes_node_qemu_vmid_firewall_options(self, p, u):
        vm = self.vm(p["node"], p["vmid"])
        if p.get("digest") and p["digest"] != _digest(vm.firewall_options):
            raise ApiError(500, "detected modified configuration - file changed by other user? Try again.\n")
        for k, v in p.items():
            if k not in ("node", "vmid", "digest", "delete"):
                vm.firewall_options[k] = v
        for k in _split(p.get("delete", "")):
            vm.firewall_options.pop(k, None)
        return None

    # ---- pools -------------------------------------------------------------
    # ---- PCI resource mappings (pve-manager's PVE::API2::Cluster::Mapping::PCI over mapping/pci.cfg) ----------------
    def _pci_digest(self):
        """The digest of mapping/pci.cfg: every mapping's settings, so any change changes it."""
        import hashlib  # here: this section's own, kept apart from the module's imports
        return hashlib.sha1(json.dumps(self.r.pci_mappings, sort_keys=True).encode()).hexdigest()

    def _pci_entry(self, k, v):
        out = {"id": k, "description": v["description"], "map": list(v["map"]), "digest": self._pci_digest()}
        if v.get("mdev"):
            out["mdev"] = 1
        return out

    def h_GET_cluster_mapping_pci(self, p, u):
        return [self._pci_entry(k, v) for k, v in sorted(self.r.pci_mappings.items())
                if pveacl.can(self.r.access, u, "/mapping/pci/" + k, ["Mapping.Modify", "Mapping.Use", "Mapping.Audit"],
                              True)]

    def h_GET_cluster_mapping_pci_id(self, p, u):
        m = self.r.pci_mappings.get(p["id"])
        if m is None:
            raise ApiError(500, "mapping '%s' not found\n" % p["id"])
        return dict(self._pci_entry(p["id"], m), type="pci")

    def _pci_map(self, p, method, path):
        """The map entries of a POST or PUT, checked against the schema's entry format."""
        raw = p.get("map", "[]")
        entries = json.loads(raw) if raw.startswith("[") else [raw]
        fmt = self.v.props(self.v.method_info(path, method))["map"]["items"]["format"]
        for e in entries:
            err = self.v.check_property_string(fmt, e, "map")
            if err:
                raise param_error("map", "invalid format - format error\n" + err)
        return entries

    def h_POST_cluster_mapping_pci(self, p, u):
        entries = self._pci_map(p, "POST", "/cluster/mapping/pci")
        if p["id"] in self.r.pci_mappings:
            raise ApiError(500, "create hardware mapping failed: pci ID '%s' already defined\n" % p["id"])
        self.r.pci_mappings[p["id"]] = {"description": p.get("description", ""), "map": entries,
                                        "mdev": pveschema.parse_bool(p.get("mdev", "0")) == 1}
        return None

    def h_PUT_cluster_mapping_pci_id(self, p, u):
        entries = self._pci_map(p, "PUT", "/cluster/mapping/pci/{id}") if "map" in p else None
        if p.get("digest") and p["digest"] != self._pci_digest():
            raise ApiError(500, "update hardware mapping failed: detected modified configuration - file changed by "
                           "other user? Try again.\n")
        m = self.r.pci_mappings.get(p["id"])
        if m is None:
            raise ApiError(500, "update hardware mapping failed: pci ID '%s' does not exist\n" % p["id"])
        for k in _split(p.get("delete", "")):
            if k in ("description", "mdev"):
                m[k] = "" if k == "description" else False
        if entries is not None:
            m["map"] = entries
        if "description" in p:
            m["description"] = p["description"]
        if "mdev" in p:
            m["mdev"] = pveschema.parse_bool(p["mdev"]) == 1
        return None

    def h_DELETE_cluster_mapping_pci_id(self, p, u):
        self.r.pci_mappings.pop(p["id"], None)  # a mapping that is not there: nothing to do, no error
        return None

    def _pci_paths(self, mapping, node):
        """The device paths a mapping has on node (an entry's path may list several, ';'-separated)."""
        out = []
        for e in self.r.pci_mappings.get(mapping, {}).get("map", []):
            opts = dict(x.split("=", 1) for x in e.split(",") if "=" in x)
            if opts.get("node") == node:
                out += opts.get("path", "").split(";")
        return out

    def _pci_in_use(self, vm):
        """{device path: VMID} of the running VMs on vm's host other than vm."""
        used = {}
        for other in self.r.vms.values():
            if other is vm or other.host is not vm.host or other.status not in ("starting", "running"):
                continue
            used.update({path: other.vmid for path in getattr(other, "pci_paths", [])})
        return used

    def _check_hostpci(self, vm):
        """qemu-server's start: each mapped hostpciN gets the first free device of its mapping on this node;
        pcie=1 needs a q35 machine. Returns the device paths the VM takes."""
        taken, used = [], self._pci_in_use(vm)
        for k, v in sorted(vm.conf.items()):
            if not re.match(r"^hostpci\d+$", k):
                continue
            opts = dict(x.split("=", 1) for x in v.split(",") if "=" in x)
            if opts.get("pcie") == "1" and "q35" not in vm.conf.get("machine", ""):
                raise TaskError("q35 machine model is not enabled")
            paths = self._pci_paths(opts.get("mapping", ""), vm.host.name)
            if not paths:
                raise TaskError("PCI device mapping not found for '%s'" % opts.get("mapping", ""))
            free = [x for x in paths if x not in used and x not in taken]
            if not free:
                raise TaskError("PCI device '%s' already in use by VMID '%d'" % (paths[0], used.get(paths[0], 0)))
            taken.append(free[0])
        return taken

    def h_GET_pools(self, p, u):
        if p.get("poolid"):
            pool = self._pool(p["poolid"])
            return [{"poolid": p["poolid"], "comment": pool["comment"], "members": self._members(pool)}]
        return pveacl.filter_pools(self.r.access, u, [{"poolid": k, "comment": v["comment"]}
                                                      for k, v in sorted(self.r.pools.items())])

    def h_POST_pools(self, p, u):
        pid = p["poolid"]
        if pid in self.r.pools:
            raise ApiError(500, "pool '%s' already exists\n" % pid)
        self.r.pools[pid] = {"comment": p.get("comment", ""), "vms": set()}
        return None

    def _pool(self, pid):
        if pid not in self.r.pools:
            raise ApiError(500, "pool '%s' does not exist\n" % pid)
        return self.r.pools[pid]

    def _members(self, pool):
        return [self._vm_res(self.r.vms[v]) for v in sorted(pool["vms"]) if v in self.r.vms]

    def h_GET_pools_poolid(self, p, u):
        pool = self._pool(p["poolid"])
        return {"comment": pool["comment"], "members": self._members(pool)}

    def h_PUT_pools_poolid(self, p, u):
        pool = self._pool(p["poolid"])
        if "comment" in p:
            pool["comment"] = p["comment"]
        vms = [int(x) for x in _split(p.get("vms", ""))]
        remove = str(p.get("delete", "0")) == "1"
        for v in vms:
            # update_pool: check_perm_modify on each VM, and no VM added twice or removed when not a member
            self.r.access.check_any(u, "/vms/%d" % v, ["Permissions.Modify", "VM.Allocate"])
            if remove:
                if v not in pool["vms"]:
                    raise ApiError(500, "VM %d is not a pool member\n" % v)
                pool["vms"].discard(v)
                continue
            if v not in self.r.vms:
                raise ApiError(500, "no such VMID '%d'\n" % v)
            if v in pool["vms"]:
                raise ApiError(500, "VM %d is already a pool member\n" % v)
            other = self._pool_of(v)
            if other and other != p["poolid"] and str(p.get("allow-move", "0")) != "1":
                raise ApiError(500, "VM %d belongs already to pool '%s'\n" % (v, other))
            for pl in self.r.pools.values():
                pl["vms"].discard(v)
            pool["vms"].add(v)
        return None

    h_PUT_pools = h_PUT_pools_poolid

    def h_DELETE_pools_poolid(self, p, u):
        pool = self._pool(p["poolid"])
        if any(v in self.r.vms for v in pool["vms"]):
            raise ApiError(500, "pool '%s' is not empty\n" % p["poolid"])
        del self.r.pools[p["poolid"]]
        return None

    h_DELETE_pools = h_DELETE_pools_poolid


# ---- module helpers --------------------------------------------------------
def _fn_name(tpl):
    return re.sub(r"[^a-zA-Z0-9]+", "_", tpl.replace("{", "").replace("}", "")).strip("_")


def _raise(e):
    raise e


def _new_size(key, opts, m):
    """The size= of a volume allocated as <storage>:<GiB>: qemu-server sizes the EFI vars disk by its efitype
    (the OVMF vars file: 128K for 2m, the default, 528K for 4m) and the TPM state at 4M, whatever size is asked."""
    if key == "efidisk0":
        return "size=528K" if "efitype=4m" in opts else "size=128K"
    if key == "tpmstate0":
        return "size=4M"
    return "size=%sG" % m.group(2)


def _paused(vm):
    """Paused by status/suspend (not to disk) in this run of its QEMU process."""
    return vm.status == "running" and vm.started_at is not None and getattr(vm, "paused_boot", None) == vm.started_at


def _split(s):
    return [x for x in re.split(r"[;,\s]+", s or "") if x]


def _idlist(s):
    return util.cpulist_parse(s, ";")


def _mac():
    return "BC:24:11:%02X:%02X:%02X" % (random.randint(0, 255), random.randint(0, 255), random.randint(0, 255))


def _digest(obj):
    import hashlib
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _int_or(v):
    return int(v) if isinstance(v, str) and re.match(r"^-?\d+$", v) else v


def _describe(p):
    return ", ".join("%s=%s" % (k, v) for k, v in sorted(p.items()) if k not in ("node", "vmid"))


def _add_rule(rules, p, skip):
    rule = {k: v for k, v in p.items() if k not in skip + ("pos", "digest")}
    rule.setdefault("enable", "0")
    pos = int(p["pos"]) if "pos" in p else 0
    rules.insert(min(pos, len(rules)), rule)


def _rules_out(rules):
    out = []
    for i, r in enumerate(rules):
        o = {k: _int_or(v) for k, v in r.items()}
        o["pos"] = i
        out.append(o)
    return out
