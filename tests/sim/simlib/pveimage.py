# Simulated cloud-image handling of Proxmox VE 8.4: download-url, import-from disks, conversion to a template.
# SPDX-License-Identifier: Apache-2.0
#
# Read in pve-storage (src/PVE/API2/Storage/Status.pm download_url, PVE::Tools::download_file_from_url) and
# qemu-server (PVE/API2/Qemu.pm $check_storage_access and $create_disks for `import-from`, the `template` method and
# PVE::QemuServer::template_create). The handlers are a mixin of pve.PveApp, which dispatches to h_<METHOD>_<path>.
import contextlib
import hashlib
import os
import re
import ssl
import struct
import threading
import time
import urllib.error
import urllib.request

from . import pveacl

IMPORT_EXT_RE = re.compile(r"^[-a-zA-Z0-9_.+=]+\.(qcow2|raw|vmdk|ova)$")  # UPLOAD_IMPORT_EXT_RE_1
ISO_EXT_RE = re.compile(r"^[^/]+\.(iso|img)$", re.I)
QCOW2_MAGIC = b"QFI\xfb"
SIZE_UNITS = (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10))


def TaskFailed(msg):
    """A worker's failure: the task ends with this message (pve.TaskError; imported late, pve imports this)."""
    from .pve import TaskError
    return TaskError(msg)


def import_dir(host):
    """get_import_dir of the `local` dir storage: <path>/import."""
    return os.path.join(host.root, "var", "lib", "vz", "import")


def normalize_filename(name):
    """PVE::Storage::normalize_content_filename: characters outside [-a-zA-Z0-9_.+=] become '_'."""
    return re.sub(r"[^-a-zA-Z0-9_.+=]", "_", name)


def image_size(path):
    """The volume size qemu-img reports: a qcow2 image's virtual size (its header, bytes 24..31, big-endian),
    else the file's size."""
    with open(path, "rb") as f:
        head = f.read(32)
    if head[:4] == QCOW2_MAGIC and len(head) >= 32:
        return struct.unpack(">Q", head[24:32])[0]
    return os.path.getsize(path)


def size_text(n):
    """A drive's size= as qemu-server prints it (PVE::JSONSchema::format_size: the largest whole unit)."""
    for unit, mult in SIZE_UNITS:
        if n >= mult and n % mult == 0:
            return "%d%s" % (n // mult, unit)
    return str(n)


def check_import_from(acc, user, vmid, key, value):
    """$check_storage_access for a drive with import-from: a PVE volume must be of type images or import; an image
    of another VM needs VM.Clone on it, anything else check_volume_access (an absolute path: root only)."""
    src = dict(p.split("=", 1) for p in value.split(",")[1:] if "=" in p).get("import-from")
    if not src:
        return
    m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", src, re.I)
    if m:
        vtype = _vtype(m.group(2))
        if vtype not in ("images", "import"):
            from .pve import param_error
            raise param_error(key, "%s has wrong type '%s' - needs to be 'images' or 'import'" % (src, vtype))
        owner = re.match(r"^(?:base-\d+-disk-\d+/)?(?:vm|base)-(\d+)-", m.group(2))
        if owner:
            acc.check(user, "/vms/%s" % owner.group(1), ["VM.Clone"])
            return
    pveacl.volume_access(acc, user, vmid, src)


def _vtype(volname):
    for prefix, vtype in (("iso/", "iso"), ("vztmpl/", "vztmpl"), ("import/", "import"), ("snippets/", "snippets")):
        if volname.startswith(prefix):
            return vtype
    return "images"


class ImageMixin:
    """download-url, the `import` content of `local`, import-from and POST .../template for pve.PveApp."""

    # ---- download-url ------------------------------------------------------------------------------------------
    def h_POST_nodes_node_storage_storage_download_url(self, p, u):
        from .pve import ApiError, param_error
        h = self.host(p["node"])
        s = self._storage(h, p["storage"])
        if s["type"] != "dir":
            raise ApiError(500, "can't upload to storage type '%s', not a file based storage!\n" % s["type"])
        if p["content"] not in s["content"].split(","):
            raise ApiError(500, "storage '%s' is not configured for content-type '%s'\n" % (p["storage"],
                                                                                           p["content"]))
        fname = normalize_filename(p["filename"])
        if p["content"] == "iso" and not ISO_EXT_RE.match(fname):
            raise param_error("filename", "wrong file extension")
        if p["content"] == "import" and not IMPORT_EXT_RE.match(fname):
            raise param_error("filename", "invalid filename or wrong extension")
        if p["content"] == "vztmpl":
            raise ApiError(501, "download of vztmpl content is not simulated\n")
        if p.get("compression"):
            raise param_error("compression", "value '%s' does not have a value in the enumeration ''"
                              % p["compression"])
        dest_dir = h.iso_dir if p["content"] == "iso" else import_dir(h)
        full = "%s/%s" % (h.name, p["storage"]) in (self.w.knob("storage_full") or [])
        return self.r.start_task(h.name, "download", fname, u,
                                 lambda t: self._download(t, p, os.path.join(dest_dir, fname), full))

    def _download(self, t, p, dest, full):
        """download_file_from_url: an existing file with the right checksum is kept; a mismatch of an existing file
        fails when a checksum was given; the download goes to a temporary file, is checked, then renamed."""
        algo, want = p.get("checksum-algorithm"), p.get("checksum")
        t.log.append("downloading %s to %s" % (p["url"], dest))
        if os.path.isfile(dest) and algo:
            got = _file_hash(algo, dest)
            if got == want.lower():
                t.log.append("OK, got correct file already, no need to download")
                return
            raise TaskFailed("checksum mismatch: got '%s' != expect '%s', aborting" % (got, want))
        time.sleep(float(self.w.knob("download_seconds")))
        data = self._fetch(p)
        if full:
            raise TaskFailed("download failed: write error: No space left on device")
        if algo:
            got = hashlib.new(algo, data).hexdigest()
            if got != want.lower():
                raise TaskFailed("checksum mismatch: got '%s' != expect '%s'" % (got, want))
            t.log.append("calculating checksum...OK, checksum verified")
        if dest.endswith(".qcow2") and data[:4] != QCOW2_MAGIC:  # file_size_info(..., untrusted): qemu-img info
            raise TaskFailed("image format mismatch: '%s' is not a qcow2 image" % os.path.basename(dest))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = "%s.tmp_dwnl.%d" % (dest, threading.get_ident())
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.rename(tmp, dest)
        t.log.append("download of '%s' to '%s' finished" % (p["url"], dest))

    def _fetch(self, p):
        ctx = None
        if p["url"].startswith("https:") and str(p.get("verify-certificates", "1")) == "0":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(p["url"], timeout=30, context=ctx) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raise TaskFailed("download failed: %d %s" % (e.code, e.reason))
        except (urllib.error.URLError, OSError) as e:
            raise TaskFailed("download failed: %s" % getattr(e, "reason", e))

    def import_content(self, h):
        """The `import` content of `local` (GET .../content)."""
        d = import_dir(h)
        out = []
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            m = IMPORT_EXT_RE.match(f)
            if not m:
                continue
            path = os.path.join(d, f)
            out.append({"volid": "local:import/%s" % f, "format": m.group(1), "content": "import",
                        "size": image_size(path), "ctime": int(os.stat(path).st_mtime)})
        return out

    # ---- import-from ------------------------------------------------------------------------------------------
    def import_volume(self, vm, value, n):
        """$create_disks for <storage>:0,import-from=<source>: the source's size, a new vm-<vmid>-disk-<n> on the
        target storage; import-from is not kept in the config."""
        from .pve import ApiError
        parts = value.split(",")
        file = parts[0][5:] if parts[0].startswith("file=") else parts[0]
        opts = [x for x in parts[1:] if not x.startswith(("import-from=", "size=", "format="))]
        src = [x for x in parts[1:] if x.startswith("import-from=")][0][len("import-from="):]
        m = re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?)$", file, re.I)
        if not m or float(m.group(2)) != 0:
            raise ApiError(500, "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>\n")
        size = self._source_size(vm, src)
        if "%s/%s" % (vm.host.name, m.group(1)) in (self.w.knob("storage_full") or []):
            raise ApiError(500, "lvcreate 'pve/vm-%d-disk-%d' error:   Volume group \"pve\" has insufficient free "
                                "space\n" % (vm.vmid, n))
        return ",".join(["%s:vm-%d-disk-%d" % (m.group(1), vm.vmid, n)] + opts + ["size=" + size_text(size)])

    def _source_size(self, vm, src):
        from .pve import ApiError
        m = re.match(r"^local:import/(.+)$", src)
        if m:
            path = os.path.join(import_dir(vm.host), m.group(1))
            if os.path.isfile(path):
                return image_size(path)
        for other in self.r.vms.values():
            if other.host is not vm.host:
                continue
            for k, v in other.conf.items():
                if v.split(",")[0] == src:
                    return self._disk_bytes(other)
        raise ApiError(500, "unable to import from '%s': volume does not exist\n" % src)

    @contextlib.contextmanager
    def create_failed_removes(self, vm):
        """create_vm's worker: when making the disks fails, the new VM's config is destroyed, and the task fails."""
        try:
            yield
        except Exception:
            vm.remove_file()
            vm.deleted = True
            if self.r.vms.get(vm.vmid) is vm:
                del self.r.vms[vm.vmid]
            raise

    def check_base_unused(self, vm):
        """destroy_vm of a template: a base volume a linked clone still uses stops it (volume_is_base_and_used)."""
        if not vm.is_template():
            return
        for k, v in sorted(vm.conf.items()):
            m = re.match(r"^([^:,]+):(base-%d-disk-\d+)" % vm.vmid, v)
            if not m or "media=cdrom" in v:
                continue
            for other in self.r.vms.values():
                if other is not vm and any("%s/" % m.group(2) in str(x) for x in other.conf.values()):
                    raise TaskFailed("base volume '%s:%s' is still in use by linked cloned" % (m.group(1), m.group(2)))

    # ---- template --------------------------------------------------------------------------------------------
    def h_POST_nodes_node_qemu_vmid_template(self, p, u):
        """The template method: under the config lock, refuse a locked, running or already converted VM, write
        template: 1, then the qmtemplate worker renames the disks to base-<vmid>-disk-<n> (template_create; CD
        drives, the cloud-init drive among them, stay as they are)."""
        from .pve import ApiError
        vm = self.vm(p["node"], p["vmid"])
        if vm.conf.get("lock"):
            raise ApiError(500, "VM is locked (%s)\n" % vm.conf["lock"])
        if vm.is_template() and not p.get("disk"):
            raise ApiError(500, "you can't convert a template to a template\n")
        if vm.status == "running":
            raise ApiError(500, "you can't convert a VM to template if VM is running\n")
        vm.conf["template"] = "1"
        vm.save()

        def work(t):
            with self.w.lock:
                for k, v in sorted(vm.conf.items()):
                    if p.get("disk") and k != p["disk"]:
                        continue
                    if re.match(r"^(ide|scsi|sata|virtio)\d+$|^efidisk0$|^tpmstate0$", k) and "media=cdrom" not in v:
                        vm.conf[k] = re.sub(r"^([^:]+):vm-(\d+)-disk-(\d+)", r"\1:base-\2-disk-\3", v)
                        t.log.append("renamed %s to %s" % (v.split(",")[0], vm.conf[k].split(",")[0]))
                vm.save()
        return self.r.start_task(vm.host.name, "qmtemplate", vm.vmid, u, work)


def _file_hash(algo, path):
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
