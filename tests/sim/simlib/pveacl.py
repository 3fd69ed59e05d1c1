# Proxmox VE access control for the simulator: users, API tokens, groups, roles, ACLs and pools (user.cfg), the
# permission objects of the API schema evaluated against them, the checks qemu-server and pve-storage make in
# their handlers, and `pveum` (the CLI) over the same model. Follows PVE 8.4's PVE/AccessControl.pm (roles(),
# normalize_path, check_path, the built-in roles) and PVE/RPCEnvironment.pm (permissions(), check_api2_permissions,
# exec_api2_perm_check): the deepest ACL on a path wins for a user (a token's own entries first, then the user's,
# then its groups'), an ACL propagates to the paths below it only with propagate=1, pool ACLs apply to the pool's
# VMs, and a privilege-separated token has its own privileges intersected with its user's.
# SPDX-License-Identifier: Apache-2.0
import re
import threading
import time

from . import pveimage

# ---- privileges and built-in roles ----------------------------------------------------------------
# Per category: privileges only root should hold, an administrator's, a user's, an auditor's (the split PVE's
# AccessControl.pm builds its PVE*Admin/PVE*User/PVEAuditor roles from).
_GROUPS = {
    "VM": ([], ["VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.HWType",
                "VM.Config.Options", "VM.Allocate", "VM.Clone", "VM.Migrate", "VM.Monitor", "VM.Snapshot",
                "VM.Snapshot.Rollback"],
           ["VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup", "VM.PowerMgmt"], ["VM.Audit"]),
    "Sys": (["Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"], ["Sys.Console", "Sys.Syslog"],
            [], ["Sys.Audit"]),
    "Datastore": ([], ["Datastore.Allocate", "Datastore.AllocateTemplate"], ["Datastore.AllocateSpace"],
                  ["Datastore.Audit"]),
    "SDN": ([], ["SDN.Allocate", "SDN.Audit"], ["SDN.Use"], ["SDN.Audit"]),
    "User": (["Realm.Allocate"], ["User.Modify", "Group.Allocate", "Realm.AllocateUser"], [], []),
    "Pool": ([], ["Pool.Allocate"], ["Pool.Audit"], ["Pool.Audit"]),
    "Mapping": ([], ["Mapping.Modify"], ["Mapping.Use"], ["Mapping.Audit"]),
}


def _builtin_roles():
    valid = {"Permissions.Modify"}
    roles = {"NoAccess": set()}
    for cat, (root, admin, user, audit) in _GROUPS.items():
        valid.update(root + admin + user + audit)
        roles.setdefault("PVE%sAdmin" % cat, set()).update(admin + user + audit)
        roles.setdefault("PVEAdmin", set()).update(admin + user + audit)
        if user:
            roles.setdefault("PVE%sUser" % cat, set()).update(user + audit)
        roles.setdefault("PVEAuditor", set()).update(audit)
    roles["PVEAdmin"].discard("Mapping.Modify")
    roles["PVETemplateUser"] = {"VM.Clone", "VM.Audit"}
    roles["Administrator"] = set(valid)
    return valid, {k: frozenset(v) for k, v in roles.items()}


VALID_PRIVS, BUILTIN_ROLES = _builtin_roles()

USER_RE = re.compile(r"^[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+$")
TOKEN_RE = re.compile(r"^([^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+)!([A-Za-z][A-Za-z0-9.\-_]+)$")
NAME_RE = re.compile(r"^[A-Za-z0-9.\-_]+$")
ACL_PATH_RE = re.compile(r"^(/|/access|/access/groups|/access/groups/[\w.\-]+|/access/realm|/access/realm/[\w.\-]+"
                         r"|/nodes|/nodes/[\w.\-]+|/pool|/pool/[\w.\-]+|/sdn|/sdn/zones|/sdn/zones/[\w.\-]+"
                         r"|/sdn/zones/[\w.\-]+/[\w.\-]+|/sdn/zones/[\w.\-]+/[\w.\-]+/[1-9][0-9]{0,3}|/storage"
                         r"|/storage/[\w.\-]+|/vms|/vms/[1-9][0-9]{2,}|/mapping|/mapping/[\w.\-]+"
                         r"|/mapping/[\w.\-]+/[\w.\-]+)$")
REALMS = ("pam", "pve")


class Error(Exception):
    """An API error raised by a check (the simulator answers it as pve.ApiError)."""

    def __init__(self, code, msg):
        self.code = code
        self.msg = msg
        self.errors = None
        super().__init__(msg)


class Denied(Error):
    """PVE's raise_perm_exc: HTTP 403 "Permission check failed[ (what)]"."""

    def __init__(self, what=None):
        super().__init__(403, "Permission check failed%s\n" % (" (%s)" % what if what else ""))


class RootOnly(Error):
    """A plain die of a handler for what only root@pam may do: HTTP 500."""

    def __init__(self, msg):
        super().__init__(500, msg + "\n")


class CliError(Exception):
    """A pveum failure: the text it prints (exit code 255)."""


def normalize_path(path):
    if not path:
        return None
    path = re.sub(r"/+", "/", path).rstrip("/") or "/"
    if not path.startswith("/"):
        path = "/" + path
    return path if re.match(r"^[A-Za-z0-9.\-_/]+$", path) else None


def split_tokenid(tid):
    m = TOKEN_RE.match(tid or "")
    return (m.group(1), m.group(2)) if m else (None, None)


def _split_list(s):
    return [x for x in re.split(r"[;,\s]+", s or "") if x]


def _template(tmpl, params):
    return re.sub(r"\{([^}]+)\}", lambda m: str(params.get(m.group(1)) or "-"), tmpl)


# ---- user.cfg ------------------------------------------------------------------------------------------
class Access:
    """One cluster's user.cfg, the token secrets (/etc/pve/priv/token.cfg) and the permission checks."""

    def __init__(self, pools):
        self.pools = pools  # the region's pools: {poolid: {"comment": str, "vms": set(vmids)}}
        self.lock = threading.RLock()
        self.denials = []
        self.reset()

    def reset(self):
        """user.cfg as a fresh install has it: root@pam, the built-in roles, no ACLs."""
        with self.lock:
            self.users = {"root@pam": {"enable": 1, "expire": 0, "comment": "", "groups": set(), "tokens": {}}}
            self.groups = {}
            self.roles = {}  # custom roles only; the built-in ones are BUILTIN_ROLES
            self.acl = {}  # normalized path -> {"users"|"groups"|"tokens": {id: {role: propagate}}}

    def install_defaults(self, token_id, secret, ro_token_id, ro_secret):
        """The simulator's default: a token whose user has Administrator on / (privsep 0, as root@pam's own
        privileges would be) and a privilege-separated PVEAuditor token of the same user."""
        with self.lock:
            user, tok = split_tokenid(token_id)
            self.add_user(user)
            self.acl_modify("/", "users", user, ["Administrator"], 1)
            self.add_token(user, tok, privsep=0, secret=secret)
            ruser, rtok = split_tokenid(ro_token_id)
            self.add_token(ruser, rtok, privsep=1, secret=ro_secret)
            self.acl_modify("/", "tokens", ro_token_id, ["PVEAuditor"], 1)

    # ---- changes, as the API (and pveum) make them ------------------------------------------------------
    def add_user(self, userid, enable=1, expire=0, comment="", groups=()):
        if not USER_RE.match(userid) or userid.rsplit("@", 1)[1] not in REALMS:
            raise CliError("400 Parameter verification failed.\nuserid: value '%s' does not look like a valid "
                           "user name\n" % userid)
        if userid in self.users:
            raise CliError("create user failed: user '%s' already exists\n" % userid)
        for g in groups:
            if g not in self.groups:
                raise CliError("create user failed: no such group '%s'\n" % g)
        self.users[userid] = {"enable": int(enable), "expire": int(expire), "comment": comment,
                              "groups": set(groups), "tokens": {}}

    def add_token(self, userid, tokenid, privsep=1, expire=0, comment="", secret=None):
        import uuid
        u = self.users.get(userid)
        if u is None:
            raise CliError("no such user ('%s')\n" % userid)
        if not TOKEN_RE.match("%s!%s" % (userid, tokenid)):
            raise CliError("400 Parameter verification failed.\ntokenid: invalid format - value '%s!%s' does "
                           "not look like a valid token ID\n" % (userid, tokenid))
        if tokenid in u["tokens"]:
            raise CliError("Token '%s' for user '%s' already exists\n" % (tokenid, userid))
        u["tokens"][tokenid] = {"privsep": int(privsep), "expire": int(expire), "comment": comment,
                                "secret": secret or str(uuid.uuid4())}
        return u["tokens"][tokenid]["secret"]

    def add_role(self, roleid, privs):
        if re.match(r"^PVE", roleid, re.I):
            raise CliError("400 Parameter verification failed.\nroleid: cannot use role ID starting with the "
                           "(case-insensitive) 'PVE' namespace\n")
        if not NAME_RE.match(roleid):
            raise CliError("400 Parameter verification failed.\nroleid: role name '%s' contains invalid "
                           "characters\n" % roleid)
        if roleid in self.roles or roleid in BUILTIN_ROLES:
            raise CliError("create role failed: role '%s' already exists\n" % roleid)
        self.roles[roleid] = self._privs(privs)

    def modify_role(self, roleid, privs, append=False):
        if roleid in BUILTIN_ROLES:
            raise CliError("auto-generated role '%s' cannot be modified\n" % roleid)
        if roleid not in self.roles:
            raise CliError("update role failed: role '%s' does not exist\n" % roleid)
        new = self._privs(privs)
        self.roles[roleid] = (self.roles[roleid] | new) if append else new

    @staticmethod
    def _privs(text):
        out = set()
        for p in _split_list(text):
            if p not in VALID_PRIVS:
                raise CliError("400 Parameter verification failed.\nprivs: invalid format - invalid privilege "
                               "'%s'\n" % p)
            out.add(p)
        return frozenset(out)

    def role_privs(self, role):
        return BUILTIN_ROLES.get(role) if role in BUILTIN_ROLES else self.roles.get(role, frozenset())

    def acl_modify(self, path, kind, who, roles, propagate=1, delete=False):
        norm = normalize_path(path)
        if not norm or (not delete and not ACL_PATH_RE.match(norm)):
            raise CliError("400 Parameter verification failed.\npath: invalid ACL path '%s'\n" % path)
        for role in roles:
            if role not in BUILTIN_ROLES and role not in self.roles:
                raise CliError("ACL update failed: role '%s' does not exist\n" % role)
            if kind == "users" and who not in self.users:
                raise CliError("ACL update failed: user '%s' does not exist\n" % who)
            if kind == "groups" and who not in self.groups:
                raise CliError("ACL update failed: group '%s' does not exist\n" % who)
            if kind == "tokens":
                user, tok = split_tokenid(who)
                if not user or user not in self.users or tok not in self.users[user]["tokens"]:
                    raise CliError("ACL update failed: no such token '%s' for user '%s'\n" % (tok, user))
            entry = self.acl.setdefault(norm, {"users": {}, "groups": {}, "tokens": {}})[kind].setdefault(who, {})
            if delete:
                entry.pop(role, None)
            else:
                entry[role] = 1 if propagate else 0

    # ---- authentication ----------------------------------------------------------------------------------
    def authenticate(self, tokenid, secret):
        """The token id when the token exists, its user is enabled and neither expired, and the secret matches."""
        import hmac
        user, tok = split_tokenid(tokenid)
        with self.lock:
            u = self.users.get(user) if user else None
            t = u["tokens"].get(tok) if u else None
            now = time.time()
            if not t or not u["enable"] or (u["expire"] and u["expire"] < now) or (t["expire"] and t["expire"] < now):
                return None
            return tokenid if hmac.compare_digest(secret.encode(), t["secret"].encode()) else None

    # ---- permissions (RPCEnvironment::permissions) -------------------------------------------------------
    def _roles(self, user, path):
        """AccessControl::roles: {role: propagate} of user (or token) on path; the deepest entry wins."""
        if user == "root@pam":
            return {"Administrator": 1}
        uname, tok = split_tokenid(user)
        if uname:
            t = (self.users.get(uname) or {}).get("tokens", {}).get(tok)
            if not t:
                return {}
            if not t["privsep"]:
                return self._roles(uname, path)
        parts = [""] if path == "/" else path.split("/")
        groups = (self.users.get(user) or {}).get("groups", set())
        roles = {}
        prefix = ""
        for i, p in enumerate(parts):
            final = i == len(parts) - 1
            prefix = "/" if i == 0 else (prefix.rstrip("/") + "/" + p)
            node = self.acl.get(prefix)
            if node is None:
                continue
            new = None
            for kind, ids in (("tokens", [user] if uname else []), ("users", [user]), ("groups", groups)):
                for who in ids:
                    for role, prop in (node[kind].get(who) or {}).items():
                        if final or prop:
                            new = new or {}
                            new[role] = prop
                if new:
                    break
            if new:
                roles = new
        if "NoAccess" in roles:
            return {"NoAccess": roles["NoAccess"]}
        return roles

    def permissions(self, user, path):
        """{privilege: propagate} the user or token holds on path."""
        if user == "root@pam":
            return {p: 1 for p in VALID_PRIVS}
        if path is None:
            return {}
        with self.lock:
            uname, tok = split_tokenid(user)
            user_privs = None
            if uname:
                t = (self.users.get(uname) or {}).get("tokens", {}).get(tok)
                if not t:
                    return {}
                user_privs = self.permissions(uname, path)
                if not t["privsep"]:
                    return user_privs
            elif user not in self.users:
                return {}
            roles = self._roles(user, path)
            pool_roles = self._pool_roles(user, path)
            if pool_roles and "NoAccess" not in roles:
                if "NoAccess" in pool_roles:
                    roles = {"NoAccess": 0}
                else:
                    for r in pool_roles:
                        roles.setdefault(r, 0)  # never propagated
            privs = {}
            for role, prop in roles.items():
                for p in self.role_privs(role):
                    privs[p] = privs.get(p, 0) or prop
            if user_privs is not None:
                privs = {p: (1 if user_privs[p] and v else 0) for p, v in privs.items() if p in user_privs}
            return privs

    def _pool_roles(self, user, path):
        """The roles user has on /pool/<p> of each pool whose member path is (a VM of the pool)."""
        m = re.match(r"^/vms/(\d+)$", path)
        out = set()
        if not m:
            return out
        vmid = int(m.group(1))
        for pid, pool in self.pools.items():
            if vmid in pool.get("vms", ()):
                out.update(self._roles(user, "/pool/" + pid))
        return out

    def check(self, user, path, privs, noerr=False):
        perm = self.permissions(user, path)
        for p in privs:
            if p not in perm:
                if noerr:
                    return False
                raise Denied("%s, %s" % (path, p))
        return True

    def check_any(self, user, path, privs, noerr=False):
        perm = self.permissions(user, path)
        if any(p in perm for p in privs):
            return True
        if noerr:
            return False
        raise Denied("%s, %s" % (path, "|".join(privs)))

    def check_full(self, user, path, privs, any_=False, noerr=False):
        return (self.check_any if any_ else self.check)(user, path, privs, noerr)

    def check_vm_perm(self, user, vmid, pool, privs, any_=False, noerr=False):
        if pool and self.check_full(user, "/pool/%s" % pool, privs, any_, True):
            return True
        return self.check_full(user, "/vms/%s" % vmid, privs, any_, noerr)

    def check_pool_exist(self, pool):
        if pool not in self.pools:
            raise Denied("pool '%s' does not exist" % pool)

    # ---- the API schema's permission objects -------------------------------------------------------------
    def check_api2(self, perm, user, params):
        """RPCEnvironment::check_api2_permissions for the `permissions` object of a schema method."""
        if perm and perm.get("user") == "world":
            return True  # no authentication needed, no user checked
        if user == "root@pam":
            return True
        if not perm:
            raise Denied("user != root@pam")
        if perm.get("user") == "all":
            return True
        if perm.get("check"):
            return self._exec(perm["check"], user, params, False)
        raise Denied()

    def _exec(self, check, user, params, noerr):
        test, rest = check[0], check[1:]
        if test == "and":
            for sub in rest:
                self._exec(sub, user, params, False)
            return True
        if test == "or":
            if any(self._exec(sub, user, params, True) for sub in rest):
                return True
            if noerr:
                return False
            raise Denied()
        if test == "perm":
            tmpl, privs, opts = rest[0], rest[1], dict(zip(rest[2::2], rest[3::2]))
            if opts.get("require_param") and params.get(opts["require_param"]) is None:
                if noerr:
                    return False
                raise Denied()
            path = normalize_path(_template(tmpl, params))
            return self.check_full(user, path, privs, bool(opts.get("any")), noerr)
        if test == "userid-param":
            return self._userid_param(rest[0], user, params, noerr)
        if test == "userid-group":
            return self._userid_group(rest[0], dict(zip(rest[1::2], rest[2::2])), user, params, noerr)
        if test == "perm-modify":
            path = normalize_path(_template(rest[0], params))
            if path is None:
                return False
            privs = ["Permissions.Modify"] + [p for r, p in (("/storage/", "Datastore.Allocate"),
                                                              ("/vms/", "VM.Allocate"), ("/pool/", "Pool.Allocate"))
                                              if path.startswith(r) and len(path) > len(r)]
            return self.check_any(user, path, privs, noerr)
        raise ValueError("unknown permission test %r" % test)

    def _userid_param(self, sub, user, params, noerr):
        userid = params.get("userid") or ""
        if sub == "self":
            if userid in self.users and userid == user:
                return True
            if noerr:
                return False
            raise Denied()
        realm = userid.rsplit("@", 1)[-1]
        return self.check(user, "/access/realm/%s" % realm, ["Realm.AllocateUser"], noerr)

    def _userid_group(self, privs, opts, user, params, noerr):
        if self.check_any(user, "/access/groups", privs, True):
            return True
        allowed = {g for g in self.groups if self.check_any(user, "/access/groups/" + g, privs, True)}
        if opts.get("groups_param"):
            wanted = _split_list(params.get("groups"))
            if not wanted:
                raise Denied("/access/groups, %s" % "|".join(privs))
            for g in wanted:
                if g not in allowed:
                    raise Denied("/access/groups/%s, %s" % (g, "|".join(privs)))
        if opts.get("groups_param") != "create":
            member = self.users.get(params.get("userid"), {}).get("groups", set())
            if not member & allowed:
                if noerr:
                    return False
                raise Denied()
        return True

    # ---- GET /access/permissions (RPCEnvironment::get_effective_permissions) -----------------------------
    def effective(self, user, path=None):
        if path:
            return {path: self.permissions(user, path)}
        paths = {"/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage", "/vms"}
        paths.update(self.acl)
        for pool in self.pools.values():
            paths.update("/vms/%d" % v for v in pool.get("vms", ()))
        out = {}
        for p in sorted(paths):
            perms = self.permissions(user, p)
            if perms:
                out[p] = perms
        return out

    def note_denial(self, user, call, msg):
        with self.lock:
            self.denials.append({"time": time.time(), "user": user, "call": call, "message": msg.strip()})
            del self.denials[:-200]

    def dump(self):
        """user.cfg as JSON (token secrets left out), and the recent denials."""
        with self.lock:
            return {"users": {u: {"enable": d["enable"], "groups": sorted(d["groups"]),
                                  "tokens": {t: {"privsep": x["privsep"]} for t, x in d["tokens"].items()}}
                              for u, d in self.users.items()},
                    "groups": {g: sorted(d["users"]) for g, d in self.groups.items()},
                    "roles": {r: sorted(p) for r, p in self.roles.items()},
                    "acl": [{"path": path, "type": kind[:-1], "ugid": who, "roleid": role, "propagate": prop}
                            for path, node in sorted(self.acl.items()) for kind in ("users", "groups", "tokens")
                            for who, roles in sorted(node[kind].items()) for role, prop in sorted(roles.items())],
                    "denials": list(self.denials)}


# ---- checks the handlers make (qemu-server API2/Qemu.pm, pve-storage, pve-manager) -------------------------
DRIVE_RE = re.compile(r"^(ide|scsi|sata|virtio)\d+$|^efidisk0$|^tpmstate0$")
NEW_DISK_RE = re.compile(r"^(([^/:\s]+):)?(\d+(\.\d+)?)$")
_SKIP = re.compile(r"^(cdrom|tags|(unused|serial|usb|hostpci|virtiofs)\d+)$")
_CONFIG_PRIV = {}
for _k in ("cores", "cpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus"):
    _CONFIG_PRIV[_k] = ["VM.Config.CPU"]
for _k in ("memory", "balloon", "shares"):
    _CONFIG_PRIV[_k] = ["VM.Config.Memory"]
for _k in ("acpi", "hotplug", "kvm", "machine", "scsihw", "smbios1", "tablet", "vga", "watchdog", "audio0"):
    _CONFIG_PRIV[_k] = ["VM.Config.HWType"]
for _k in ("agent", "autostart", "bios", "description", "keyboard", "localtime", "migrate_downtime",
           "migrate_speed", "name", "onboot", "ostype", "protection", "reboot", "startdate", "startup", "tdf",
           "template"):
    _CONFIG_PRIV[_k] = ["VM.Config.Options"]
for _k in ("boot", "bootdisk", "vmstatestorage"):
    _CONFIG_PRIV[_k] = ["VM.Config.Disk"]
_CONFIG_PRIV["freeze"] = ["VM.PowerMgmt"]
_CONFIG_PRIV["vmstate"] = ["VM.Config.Disk", "VM.PowerMgmt"]
_CLOUDINIT = {"cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver", "searchdomain", "sshkeys"}
_NOT_CONFIG = {"node", "vmid", "digest", "delete", "revert", "background_delay", "force", "skiplock",
               "skip_cloud_init", "pool", "storage", "start", "unique", "archive", "live-restore", "bwlimit"}


def _drive(value):
    """(file, options) of a drive property string."""
    parts = (value or "").split(",")
    file = parts[0][5:] if parts[0].startswith("file=") else parts[0]
    opts = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    if "file" in opts:
        file = opts["file"]
    return file, opts


def _is_cloudinit(file):
    return re.search(r"[:/](?:vm-\d+-)?cloudinit(?:\.(?:raw|qcow2|vmdk))?$", file or "") is not None


def _is_cdrom(value, exclude_cloudinit=False):
    file, opts = _drive(value)
    if exclude_cloudinit and _is_cloudinit(file):
        return False
    return opts.get("media") == "cdrom"


def modify_config_perm(acc, user, vmid, pool, keys):
    """$check_vm_modify_config_perm: the privilege each changed option needs (drives, tags, nets' bridges and
    devices are checked elsewhere, value by value)."""
    for k in keys:
        if DRIVE_RE.match(k) or _SKIP.match(k):
            continue
        if re.match(r"^numa\d+$", k):
            acc.check_vm_perm(user, vmid, pool, ["VM.Config.CPU"])
        elif k in _CONFIG_PRIV:
            acc.check_vm_perm(user, vmid, pool, _CONFIG_PRIV[k])
            if k == "startup":
                acc.check(user, "/", ["Sys.Modify"])
        elif re.match(r"^net\d+$", k):
            acc.check_vm_perm(user, vmid, pool, ["VM.Config.Network"])
        elif k in _CLOUDINIT or re.match(r"^ipconfig\d+$", k):
            acc.check_vm_perm(user, vmid, pool, ["VM.Config.Cloudinit", "VM.Config.Network"], True)
        # other keys: root-only ones are refused before (pve.ROOT_ONLY); the rest is not checked here


def volume_access(acc, user, vmid, volid):
    """PVE::Storage::check_volume_access."""
    if ":" not in volid:
        raise RootOnly("Only root can pass arbitrary filesystem paths.")
    sid, volname = volid.split(":", 1)
    m = re.match(r"^(?:base-\d+-disk-\d+/)?(?:vm|base)-(\d+)-", volname)  # a linked clone's: the clone's
    owner = int(m.group(1)) if m else None
    if volname.startswith(("iso/", "vztmpl/", "import/")):
        acc.check_any(user, "/storage/" + sid, ["Datastore.AllocateSpace", "Datastore.Audit"])
    elif owner is not None and vmid is not None and owner == int(vmid):
        return
    elif owner is not None:
        acc.check(user, "/storage/" + sid, ["Datastore.Allocate"])
        acc.check(user, "/vms/%d" % owner, ["VM.Config.Disk"])
    else:
        acc.check(user, "/storage/" + sid, ["Datastore.Allocate"])


def storage_access(acc, user, vmid, settings, default_storage=None):
    """$check_storage_access: new disks need Datastore.AllocateSpace on their storage, existing volumes
    check_volume_access, a physical CD drive Sys.Console."""
    for k, v in settings.items():
        if not DRIVE_RE.match(k):
            continue
        file, opts = _drive(v)
        cdrom = opts.get("media") == "cdrom"
        if not file or file == "none" or file == "cloudinit" or _is_cloudinit(file) or file.endswith(":cloudinit"):
            continue
        if cdrom and file == "cdrom":
            acc.check(user, "/", ["Sys.Console"])
        elif not cdrom and NEW_DISK_RE.match(file):
            sid = NEW_DISK_RE.match(file).group(2) or default_storage
            acc.check(user, "/storage/%s" % sid, ["Datastore.AllocateSpace"])
        else:
            volume_access(acc, user, vmid, file)
        pveimage.check_import_from(acc, user, vmid, k, v)


def bridge_access(acc, user, conf):
    """QemuServer::check_bridge_access / GuestHelpers::check_vnet_access: SDN.Use on the bridge (zone
    localnetwork for plain Linux bridges), or on its VLAN when the NIC has a tag."""
    for k in sorted(conf):
        if not re.match(r"^net\d+$", k):
            continue
        opts = dict(p.split("=", 1) for p in (conf[k] or "").split(",") if "=" in p)
        bridge = opts.get("bridge")
        if not bridge:
            continue
        path = "/sdn/zones/localnetwork/%s" % bridge
        if opts.get("tag"):
            acc.check(user, "%s/%s" % (path, opts["tag"]), ["SDN.Use"])
            continue
        if acc.check_any(user, path, ["SDN.Use"], True):
            continue
        vlans = [p for p in acc.acl if p.startswith(path + "/")]
        if any(acc.check_any(user, p, ["SDN.Use"], True) for p in vlans):
            continue
        acc.check_any(user, path, ["SDN.Use"])


def drive_perms(acc, user, vmid, value):
    """$check_drive_perms of update_vm: a cloud-init drive needs Cloudinit and CDROM, a CD drive CDROM, a disk
    Disk."""
    file, _ = _drive(value)
    if _is_cloudinit(file):
        acc.check_vm_perm(user, vmid, None, ["VM.Config.Cloudinit", "VM.Config.CDROM"])
    elif _is_cdrom(value, True):
        acc.check_vm_perm(user, vmid, None, ["VM.Config.CDROM"])
    else:
        acc.check_vm_perm(user, vmid, None, ["VM.Config.Disk"])


def check_update_pre(acc, user, vmid, params):
    """update_vm_api (POST and PUT .../config), before its worker: each option's privilege, the storages of
    drives, the bridges of NICs. Answered synchronously."""
    deletes = [("ide2" if d == "cdrom" else d) for d in _split_list(params.get("delete"))]
    keys = [k for k in params if k not in _NOT_CONFIG]
    modify_config_perm(acc, user, vmid, None, deletes)
    modify_config_perm(acc, user, vmid, None, keys)
    for k in keys:
        if re.match(r"^hostpci\d+$", k):
            hostpci_perm(acc, user, vmid, params[k])
    storage_access(acc, user, vmid, {k: params[k] for k in keys})
    bridge_access(acc, user, {k: params[k] for k in keys})


def hostpci_perm(acc, user, vmid, value):
    """qemu-server's check_hostpci_perm: VM.Config.HWType, and Mapping.Use on /mapping/pci/<mapping>; a device
    given by its host address (no mapping) only root may set."""
    acc.check_vm_perm(user, vmid, None, ["VM.Config.HWType"])
    opts = dict(x.split("=", 1) for x in value.split(",") if "=" in x)
    if not opts.get("mapping"):
        raise RootOnly("only root can set this hostpci config for non-mapped devices")
    acc.check(user, "/mapping/pci/%s" % opts["mapping"], ["Mapping.Use"])


def check_update_worker(acc, user, vmid, conf, params):
    """update_vm_api's worker: per value, drives old and new, tags, the old bridge of a changed or deleted NIC.
    Synchronous for PUT; for POST they fail the qmconfig task."""
    for k in [("ide2" if d == "cdrom" else d) for d in _split_list(params.get("delete"))]:
        val = conf.get(k)
        if val is None:
            continue
        if DRIVE_RE.match(k):
            drive_perms(acc, user, vmid, val)
        elif k == "tags":
            acc.check_vm_perm(user, vmid, None, ["VM.Config.Options"])
        elif re.match(r"^net\d+$", k):
            bridge_access(acc, user, {k: val})
    for k in [k for k in params if k not in _NOT_CONFIG]:
        if DRIVE_RE.match(k):
            if conf.get(k):
                drive_perms(acc, user, vmid, conf[k])
            drive_perms(acc, user, vmid, params[k])
        elif k == "tags":
            acc.check_vm_perm(user, vmid, None, ["VM.Config.Options"])
        elif re.match(r"^net\d+$", k) and conf.get(k):
            bridge_access(acc, user, {k: conf[k]})


def check_create(acc, user, vmid, params):
    """create_vm: VM.Allocate on /vms/<vmid> or on the pool, then the options' privileges."""
    pool = params.get("pool")
    if pool is not None:
        acc.check_pool_exist(pool)
    if params.get("storage") is not None:
        acc.check(user, "/storage/%s" % params["storage"], ["Datastore.AllocateSpace"])
    if not (acc.check(user, "/vms/%s" % vmid, ["VM.Allocate"], True)
            or (pool and acc.check(user, "/pool/%s" % pool, ["VM.Allocate"], True))):
        raise Denied()
    keys = [k for k in params if k not in _NOT_CONFIG]
    storage_access(acc, user, vmid, {k: params[k] for k in keys}, params.get("storage"))
    modify_config_perm(acc, user, vmid, pool, keys)
    bridge_access(acc, user, {k: params[k] for k in keys})


def check_clone(acc, user, src_conf, params):
    """clone_vm's load_and_check: the pool exists, Datastore.AllocateSpace on the storage of every disk (or on
    `storage` for a full clone there), SDN.Use on every bridge of the source."""
    if params.get("pool") is not None:
        acc.check_pool_exist(params["pool"])
    for k, v in src_conf.items():
        if not DRIVE_RE.match(k):
            continue
        file, opts = _drive(v)
        if not file or file == "none":
            continue
        if opts.get("media") == "cdrom":
            if file == "cdrom":
                acc.check(user, "/", ["Sys.Console"])
            continue
        sid = params.get("storage") or file.split(":", 1)[0]
        acc.check(user, "/storage/%s" % sid, ["Datastore.AllocateSpace"])
    bridge_access(acc, user, src_conf)


def can(acc, user, path, privs, any_=False):
    return acc.check_full(user, path, privs, any_, True)


# ---- what a list shows (the index handlers filter by privilege instead of refusing) ------------------------
NODE_KEEP = ("id", "type", "node", "status", "level", "cgroup-mode", "ssl_fingerprint")


def filter_resources(acc, user, entries):
    """GET /cluster/resources: VMs with VM.Audit (their pool only with Pool.Audit on it), nodes always but
    without their figures unless Sys.Audit on /nodes/<node>, storages with Datastore.Audit, pools with
    Pool.Audit."""
    out = []
    for e in entries:
        t = e.get("type")
        if t in ("qemu", "lxc"):
            if not can(acc, user, "/vms/%d" % e["vmid"], ["VM.Audit"]):
                continue
            if e.get("pool") and not can(acc, user, "/pool/" + e["pool"], ["Pool.Audit"]):
                e = {k: v for k, v in e.items() if k != "pool"}
        elif t == "node":
            e = node_entry(acc, user, e)
        elif t == "storage" and not can(acc, user, "/storage/" + e["storage"], ["Datastore.Audit"]):
            continue
        elif t == "pool" and not can(acc, user, "/pool/" + e["pool"], ["Pool.Audit"]):
            continue
        out.append(e)
    return out


def node_entry(acc, user, e):
    """A node of GET /nodes or /cluster/resources: its figures only with Sys.Audit on /nodes/<node>."""
    if can(acc, user, "/nodes/" + e["node"], ["Sys.Audit"]):
        return e
    return {k: v for k, v in e.items() if k in NODE_KEEP}


def filter_vms(acc, user, vms):
    """GET /nodes/{node}/qemu: the VMs with VM.Audit on /vms/<vmid>."""
    return [v for v in vms if can(acc, user, "/vms/%d" % v["vmid"], ["VM.Audit"])]


def filter_storages(acc, user, storages):
    """GET /storage and /nodes/{node}/storage: storages with Datastore.Audit or Datastore.AllocateSpace."""
    return [s for s in storages if can(acc, user, "/storage/" + s["storage"],
                                       ["Datastore.Audit", "Datastore.AllocateSpace"], True)]


def filter_pools(acc, user, pools):
    """GET /pools: the pools with Pool.Audit on /pool/<pool>."""
    return [p for p in pools if can(acc, user, "/pool/" + p["poolid"], ["Pool.Audit"])]


def filter_tasks(acc, user, node, tasks):
    """GET /nodes/{node}/tasks: every task with Sys.Audit on /nodes/<node>, else the user's own."""
    if can(acc, user, "/nodes/" + node, ["Sys.Audit"]):
        return tasks
    return [t for t in tasks if t.get("user") + ("!" + t["tokenid"] if t.get("tokenid") else "") == user]


def check_task(acc, user, node, owner):
    """GET .../tasks/{upid}/status and /log: Sys.Audit on /nodes/<node> unless the task is the user's."""
    if user != owner:
        acc.check(user, "/nodes/" + node, ["Sys.Audit"])


def check_content_delete(acc, user, storage):
    """DELETE .../storage/{storage}/content/{volume}: Datastore.Allocate on the storage (the backup case, with
    VM.Backup, is not simulated)."""
    acc.check(user, "/storage/" + storage, ["Datastore.Allocate"])


def check_resize(acc, user, disk_value):
    """resize_vm's worker: Datastore.AllocateSpace on the disk's storage."""
    file, _ = _drive(disk_value)
    if ":" in file:
        acc.check(user, "/storage/" + file.split(":", 1)[0], ["Datastore.AllocateSpace"])


def access_permissions(acc, user, params):
    """GET /access/permissions: one's own (or an owned token's) privileges; another's need Sys.Audit on
    /access."""
    target = params.get("userid") or user
    owner, _ = split_tokenid(target)
    if target != user and owner != user:
        acc.check(user, "/access", ["Sys.Audit"])
    return acc.effective(target, params.get("path"))


# ---- pveum --------------------------------------------------------------------------------------------------
# command words -> (positional parameter names, {option: "bool"|"str"})
_CLI = {
    ("role", "add"): (["roleid"], {"privs": "str"}),
    ("role", "modify"): (["roleid"], {"privs": "str", "append": "bool"}),
    ("role", "delete"): (["roleid"], {}),
    ("user", "add"): (["userid"], {"comment": "str", "email": "str", "enable": "bool", "expire": "str",
                                   "firstname": "str", "lastname": "str", "groups": "str", "keys": "str",
                                   "password": "str"}),
    ("user", "modify"): (["userid"], {"comment": "str", "email": "str", "enable": "bool", "expire": "str",
                                      "firstname": "str", "lastname": "str", "groups": "str", "append": "bool",
                                      "keys": "str"}),
    ("user", "delete"): (["userid"], {}),
    ("user", "token", "add"): (["userid", "tokenid"], {"comment": "str", "expire": "str", "privsep": "bool",
                                                       "output-format": "str"}),
    ("user", "token", "modify"): (["userid", "tokenid"], {"comment": "str", "expire": "str", "privsep": "bool"}),
    ("user", "token", "remove"): (["userid", "tokenid"], {}),
    ("group", "add"): (["groupid"], {"comment": "str"}),
    ("group", "delete"): (["groupid"], {}),
    ("acl", "modify"): (["path"], {"roles": "str", "users": "str", "groups": "str", "tokens": "str",
                                   "propagate": "bool", "delete": "bool"}),
    ("acl", "delete"): (["path"], {"roles": "str", "users": "str", "groups": "str", "tokens": "str"}),
    ("pool", "add"): (["poolid"], {"comment": "str"}),
    ("pool", "modify"): (["poolid"], {"comment": "str", "vms": "str", "delete": "bool", "allow-move": "bool"}),
    ("pool", "delete"): (["poolid"], {}),
}
_ALIASES = {"roleadd": ("role", "add"), "rolemod": ("role", "modify"), "roledel": ("role", "delete"),
            "useradd": ("user", "add"), "usermod": ("user", "modify"), "userdel": ("user", "delete"),
            "groupadd": ("group", "add"), "groupdel": ("group", "delete"), "aclmod": ("acl", "modify"),
            "acldel": ("acl", "delete")}


def _bool(v):
    if str(v).lower() in ("1", "true", "yes", "on"):
        return 1
    if str(v).lower() in ("0", "false", "no", "off"):
        return 0
    raise CliError("400 Parameter verification failed.\nvalue: type check ('boolean') failed - got '%s'\n" % v)


def _parse(argv):
    words = list(argv)
    if words and words[0] in _ALIASES:
        words = list(_ALIASES[words[0]]) + words[1:]
    for n in (3, 2):
        if tuple(words[:n]) in _CLI:
            cmd, rest = tuple(words[:n]), words[n:]
            break
    else:
        raise CliError("unknown command 'pveum %s'\n" % " ".join(argv[:3]))
    names, opts = _CLI[cmd]
    pos, got, i = [], {}, 0
    while i < len(rest):
        a = rest[i]
        m = re.match(r"^--?([a-z][a-z0-9-]*)(?:=(.*))?$", a)
        if not m:
            pos.append(a)
            i += 1
            continue
        name, val = m.group(1), m.group(2)
        if name not in opts:
            raise CliError("400 Parameter verification failed.\n%s: property is not defined in schema and the "
                           "schema does not allow additional properties\n" % name)
        if val is None:
            nxt = rest[i + 1] if i + 1 < len(rest) else None
            if opts[name] == "bool" and (nxt is None or nxt.lower() not in ("0", "1", "true", "false", "yes", "no")):
                val = "1"
            elif nxt is None:
                raise CliError("option %s requires an argument\n" % a)
            else:
                val, i = nxt, i + 1
        got[name] = _bool(val) if opts[name] == "bool" else val
        i += 1
    if len(pos) != len(names):
        raise CliError("400 not enough arguments\n" if len(pos) < len(names) else "400 too many arguments\n")
    got.update(zip(names, pos))
    return cmd, got


def _table(rows):
    w0 = max(len("key"), *(len(k) for k, _ in rows))
    w1 = max(len("value"), *(len(v) for _, v in rows))
    line = lambda l, m, r, c: l + c * (w0 + 2) + m + c * (w1 + 2) + r  # noqa: E731
    out = [line("┌", "┬", "┐", "─"), "│ %s │ %s │" % ("key".ljust(w0), "value".ljust(w1)), line("╞", "╪", "╡", "═")]
    for i, (k, v) in enumerate(rows):
        if i:
            out.append(line("├", "┼", "┤", "─"))
        out.append("│ %s │ %s │" % (k.ljust(w0), v.ljust(w1)))
    out.append(line("└", "┴", "┘", "─"))
    return "\n".join(out) + "\n"


def pveum(acc, argv):
    """Run one pveum command against the model: (exit code, stdout, stderr)."""
    try:
        cmd, p = _parse(argv)
        with acc.lock:
            return 0, _run(acc, cmd, p) or "", ""
    except CliError as e:
        return 255, "", str(e)


def _run(acc, cmd, p):
    import json
    if cmd == ("role", "add"):
        acc.add_role(p["roleid"], p.get("privs", ""))
    elif cmd == ("role", "modify"):
        acc.modify_role(p["roleid"], p.get("privs", ""), bool(p.get("append")))
    elif cmd == ("role", "delete"):
        if p["roleid"] in BUILTIN_ROLES:
            raise CliError("auto-generated role '%s' cannot be deleted\n" % p["roleid"])
        if acc.roles.pop(p["roleid"], None) is None:
            raise CliError("delete role failed: role '%s' does not exist\n" % p["roleid"])
    elif cmd == ("user", "add"):
        acc.add_user(p["userid"], p.get("enable", 1), int(p.get("expire", 0) or 0), p.get("comment", ""),
                     _split_list(p.get("groups")))
        for g in _split_list(p.get("groups")):
            acc.groups[g]["users"].add(p["userid"])
    elif cmd == ("user", "modify"):
        u = _user(acc, p["userid"])
        if "enable" in p:
            u["enable"] = p["enable"]
        if "expire" in p:
            u["expire"] = int(p["expire"] or 0)
        if "groups" in p:
            new = set(_split_list(p["groups"]))
            for g in new - set(acc.groups):
                raise CliError("update user failed: no such group '%s'\n" % g)
            old = u["groups"] if not p.get("append") else set()
            for g in old:
                acc.groups[g]["users"].discard(p["userid"])
            u["groups"] = (u["groups"] | new) if p.get("append") else new
            for g in u["groups"]:
                acc.groups[g]["users"].add(p["userid"])
    elif cmd == ("user", "delete"):
        _user(acc, p["userid"])
        del acc.users[p["userid"]]
        for g in acc.groups.values():
            g["users"].discard(p["userid"])
        for node in acc.acl.values():
            node["users"].pop(p["userid"], None)
            for t in [t for t in node["tokens"] if t.startswith(p["userid"] + "!")]:
                del node["tokens"][t]
    elif cmd == ("user", "token", "add"):
        _user(acc, p["userid"])
        privsep = p.get("privsep", 1)
        secret = acc.add_token(p["userid"], p["tokenid"], privsep, int(p.get("expire", 0) or 0),
                               p.get("comment", ""))
        full = "%s!%s" % (p["userid"], p["tokenid"])
        info = {"privsep": str(privsep)}
        if p.get("output-format", "text") == "text":
            return _table([("full-tokenid", full), ("info", json.dumps(info, separators=(",", ":"))),
                           ("value", secret)])
        return json.dumps({"full-tokenid": full, "info": info, "value": secret}) + "\n"
    elif cmd == ("user", "token", "modify"):
        t = _token(acc, p["userid"], p["tokenid"])
        if "privsep" in p:
            t["privsep"] = p["privsep"]
        if "expire" in p:
            t["expire"] = int(p["expire"] or 0)
    elif cmd == ("user", "token", "remove"):
        _token(acc, p["userid"], p["tokenid"])
        del acc.users[p["userid"]]["tokens"][p["tokenid"]]
        for node in acc.acl.values():
            node["tokens"].pop("%s!%s" % (p["userid"], p["tokenid"]), None)
    elif cmd == ("group", "add"):
        if p["groupid"] in acc.groups:
            raise CliError("create group failed: group '%s' already exists\n" % p["groupid"])
        acc.groups[p["groupid"]] = {"users": set(), "comment": p.get("comment", "")}
    elif cmd == ("group", "delete"):
        if acc.groups.pop(p["groupid"], None) is None:
            raise CliError("delete group failed: group '%s' does not exist\n" % p["groupid"])
        for u in acc.users.values():
            u["groups"].discard(p["groupid"])
    elif cmd[0] == "acl":
        _acl(acc, p, cmd == ("acl", "delete") or bool(p.get("delete")))
    elif cmd[0] == "pool":
        _pool(acc, cmd[1], p)
    return None


def _acl(acc, p, delete):
    whos = [("users", w) for w in _split_list(p.get("users"))] + [("groups", w) for w in _split_list(p.get("groups"))]
    whos += [("tokens", w) for w in _split_list(p.get("tokens"))]
    if not whos:
        raise CliError("400 Parameter verification failed.\ngroups: either 'users', 'groups' or 'tokens' is "
                       "required.\n")
    if "roles" not in p:
        raise CliError("400 Parameter verification failed.\nroles: property is missing and it is not optional\n")
    roles = _split_list(p["roles"])
    for kind, who in whos:
        acc.acl_modify(p["path"], kind, who, roles, p.get("propagate", 1), delete)


def _pool(acc, verb, p):
    pid = p["poolid"]
    if verb == "add":
        if not NAME_RE.match(pid):
            raise CliError("400 Parameter verification failed.\npoolid: pool name '%s' contains invalid "
                           "characters\n" % pid)
        if pid in acc.pools:
            raise CliError("create pool failed: pool '%s' already exists\n" % pid)
        acc.pools[pid] = {"comment": p.get("comment", ""), "vms": set()}
        return
    if pid not in acc.pools:
        raise CliError("pool '%s' does not exist\n" % pid)
    if verb == "delete":
        if acc.pools[pid]["vms"]:
            raise CliError("delete pool failed: pool '%s' is not empty\n" % pid)
        del acc.pools[pid]
        return
    if "comment" in p:
        acc.pools[pid]["comment"] = p["comment"]
    for v in (int(x) for x in _split_list(p.get("vms"))):
        if p.get("delete"):
            acc.pools[pid]["vms"].discard(v)
            continue
        for other in acc.pools.values():
            other["vms"].discard(v)
        acc.pools[pid]["vms"].add(v)


def _user(acc, userid):
    if userid not in acc.users:
        raise CliError("no such user ('%s')\n" % userid)
    return acc.users[userid]


def _token(acc, userid, tokenid):
    u = _user(acc, userid)
    if tokenid not in u["tokens"]:
        raise CliError("no such token '%s' for user '%s'\n" % (tokenid, userid))
    return u["tokens"][tokenid]
