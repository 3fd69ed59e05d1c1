#!/usr/bin/env python3
# Tests of the simulated cloud-image path (simlib/pveimage.py): download-url with its checksum, task and storage
# content, a full storage, import-from on create and config, conversion to a template, and their privileges.
# SPDX-License-Identifier: Apache-2.0
import hashlib
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import simtest  # noqa: E402
from simlib import imageserv  # noqa: E402


IMAGE = imageserv.qcow2(2 * 2**30)
OTHER = imageserv.qcow2(3 * 2**30)
FILES = {"/cloud.qcow2": IMAGE, "/other.qcow2": OTHER, "/notqcow.qcow2": b"plain text"}


class ImageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.images = imageserv.ImageServer(FILES)
        cls.base = cls.images.base
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", kube="none")
        cls.next = 300

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()
        cls.images.stop()

    def newid(self):
        ImageTest.next += 1
        return ImageTest.next

    def download(self, node, filename, path, auth=None, **extra):
        params = {"url": self.base + path, "content": "import", "filename": filename}
        params.update(extra)
        return self.sim.pve("POST", "/nodes/%s/storage/local/download-url" % node, params, auth=auth)

    def finish(self, r):
        self.assertEqual(r.status, 200, r)
        return self.sim.wait_task(r.data)

    def content(self, node):
        return {c["volid"]: c for c in self.sim.pve("GET", "/nodes/%s/storage/local/content" % node).data}

    def pveum(self, *args):
        env = dict(os.environ, PVESCALE_SIM_STATE=self.sim.state)
        r = subprocess.run([os.path.join(HERE, "pveum")] + list(args), capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def token(self, user, *acls):
        self.pveum("user", "add", user)
        out = self.pveum("user", "token", "add", user, "tok", "--privsep", "0")
        secret = [ln.split("│")[2].strip() for ln in out.splitlines() if ln.startswith("│ value ")][0]
        for acl in acls:
            self.pveum("aclmod", *acl)
        return "PVEAPIToken=%s!tok=%s" % (user, secret)

    def test_download_with_checksum_then_kept(self):
        sha = hashlib.sha256(IMAGE).hexdigest()
        r = self.download("pve1", "noble.qcow2", "/cloud.qcow2", checksum=sha, **{"checksum-algorithm": "sha256"})
        self.assertEqual(r.data.split(":")[5:7], ["download", "noble.qcow2"])
        self.assertEqual(self.finish(r)["exitstatus"], "OK")
        vol = self.content("pve1")["local:import/noble.qcow2"]
        self.assertEqual((vol["content"], vol["format"], vol["size"]), ("import", "qcow2", 2 * 2**30))
        self.assertNotIn("local:import/noble.qcow2", self.content("pve2"))  # local storage: that host only
        storages = self.sim.pve("GET", "/nodes/pve1/storage", {"content": "import"}).data
        self.assertEqual([s["storage"] for s in storages], ["local"])
        hits = len(self.images.hits)
        self.assertEqual(self.finish(self.download("pve1", "noble.qcow2", "/cloud.qcow2", checksum=sha.upper(),
                                                   **{"checksum-algorithm": "sha256"}))["exitstatus"], "OK")
        self.assertEqual(len(self.images.hits), hits)  # the file there has the checksum: not fetched again
        # Another image under the same name with the old checksum: the existing file does not match it.
        st = self.finish(self.download("pve1", "noble.qcow2", "/other.qcow2",
                                       checksum=hashlib.sha256(OTHER).hexdigest(), **{"checksum-algorithm": "sha256"}))
        self.assertRegex(st["exitstatus"], r"^checksum mismatch: got '%s' != expect '[0-9a-f]+', aborting$" % sha)

    def test_checksum_mismatch_and_bad_requests(self):
        st = self.finish(self.download("pve1", "bad.qcow2", "/cloud.qcow2", checksum="0" * 64,
                                       **{"checksum-algorithm": "sha256"}))
        self.assertEqual(st["exitstatus"], "checksum mismatch: got '%s' != expect '%s'"
                         % (hashlib.sha256(IMAGE).hexdigest(), "0" * 64))
        self.assertNotIn("local:import/bad.qcow2", self.content("pve1"))
        st = self.finish(self.download("pve1", "missing.qcow2", "/nothing.qcow2"))
        self.assertEqual(st["exitstatus"], "download failed: 404 Not Found")
        st = self.finish(self.download("pve1", "fake.qcow2", "/notqcow.qcow2"))
        self.assertIn("not a qcow2 image", st["exitstatus"])
        r = self.download("pve1", "noble.txt", "/cloud.qcow2")
        self.assertEqual((r.status, r.json["errors"]), (400, {"filename": "invalid filename or wrong extension"}))
        r = self.download("pve1", "x.qcow2", "/cloud.qcow2", checksum="ab")  # requires checksum-algorithm
        self.assertEqual(r.status, 400)
        self.assertIn("checksum-algorithm", r.json["errors"])
        r = self.sim.pve("POST", "/nodes/pve1/storage/local-lvm/download-url",
                         {"url": self.base + "/cloud.qcow2", "content": "import", "filename": "a.qcow2"})
        self.assertEqual(r.status, 500)
        self.assertIn("not a file based storage", r.json["message"])

    def test_storage_full(self):
        self.sim.knobs(storage_full=["pve2/local"])
        try:
            st = self.finish(self.download("pve2", "full.qcow2", "/cloud.qcow2"))
            self.assertEqual(st["exitstatus"], "download failed: write error: No space left on device")
            self.assertNotIn("local:import/full.qcow2", self.content("pve2"))
        finally:
            self.sim.knobs(storage_full=[])

    def test_import_from_create_config_and_template(self):
        self.assertEqual(self.finish(self.download("pve2", "img.qcow2", "/cloud.qcow2"))["exitstatus"], "OK")
        vmid = self.newid()
        r = self.sim.pve("POST", "/nodes/pve2/qemu", {
            "vmid": vmid, "name": "tpl", "scsihw": "virtio-scsi-single",
            "scsi0": "local-lvm:0,import-from=local:import/img.qcow2,iothread=1", "ide2": "local-lvm:cloudinit"})
        self.assertEqual(self.finish(r)["exitstatus"], "OK")
        conf = self.sim.pve("GET", "/nodes/pve2/qemu/%d/config" % vmid).data
        self.assertEqual(conf["scsi0"], "local-lvm:vm-%d-disk-0,iothread=1,size=2G" % vmid)
        self.assertEqual(conf["ide2"], "local-lvm:vm-%d-cloudinit,media=cdrom" % vmid)
        # A second disk by config, from the same image.
        r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/config" % vmid,
                         {"scsi1": "local-lvm:0,import-from=local:import/img.qcow2"})
        self.assertEqual(self.finish(r)["exitstatus"], "OK")
        conf = self.sim.pve("GET", "/nodes/pve2/qemu/%d/config" % vmid).data
        self.assertEqual(conf["scsi1"], "local-lvm:vm-%d-disk-1,size=2G" % vmid)
        # A size other than 0, a missing source, a source of the wrong type.
        r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/config" % vmid,
                         {"scsi2": "local-lvm:8,import-from=local:import/img.qcow2"})
        self.assertIn("requires special syntax", self.finish(r)["exitstatus"])
        r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/config" % vmid,
                         {"scsi2": "local-lvm:0,import-from=local:import/gone.qcow2"})
        self.assertIn("does not exist", self.finish(r)["exitstatus"])
        r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/config" % vmid,
                         {"scsi2": "local-lvm:0,import-from=local:iso/x.iso"})
        self.assertEqual((r.status, r.json["errors"]), (400, {"scsi2": "local:iso/x.iso has wrong type 'iso' - "
                                                                      "needs to be 'images' or 'import'"}))
        self.sim.knobs(storage_full=["pve2/local-lvm"])
        try:
            r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/config" % vmid,
                             {"scsi3": "local-lvm:0,import-from=local:import/img.qcow2"})
            self.assertIn("insufficient free space", self.finish(r)["exitstatus"])
        finally:
            self.sim.knobs(storage_full=[])
        self.assertNotIn("scsi3", self.sim.pve("GET", "/nodes/pve2/qemu/%d/config" % vmid).data)
        # To a template: the disks become base volumes, the cloud-init drive stays; a clone of it is linked.
        r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/template" % vmid)
        self.assertEqual(r.data.split(":")[5:7], ["qmtemplate", str(vmid)])
        self.assertEqual(self.finish(r)["exitstatus"], "OK")
        conf = self.sim.pve("GET", "/nodes/pve2/qemu/%d/config" % vmid).data
        self.assertEqual(conf["template"], 1)
        self.assertEqual(conf["scsi0"], "local-lvm:base-%d-disk-0,iothread=1,size=2G" % vmid)
        self.assertEqual(conf["scsi1"], "local-lvm:base-%d-disk-1,size=2G" % vmid)
        self.assertEqual(conf["ide2"], "local-lvm:vm-%d-cloudinit,media=cdrom" % vmid)
        r = self.sim.pve("POST", "/nodes/pve2/qemu/%d/template" % vmid)
        self.assertEqual((r.status, r.json["message"]), (500, "you can't convert a template to a template\n"))
        clone = self.newid()
        self.sim.clone(clone, "from-managed", "pve2", template=vmid)
        conf = self.sim.pve("GET", "/nodes/pve2/qemu/%d/config" % clone).data
        self.assertEqual(conf["scsi0"], "local-lvm:base-%d-disk-0/vm-%d-disk-0,iothread=1,size=2G" % (vmid, clone))
        # The template stays while a linked clone uses its base volume; without the clone it goes.
        st = self.finish(self.sim.pve("DELETE", "/nodes/pve2/qemu/%d" % vmid))
        self.assertEqual(st["exitstatus"], "base volume 'local-lvm:base-%d-disk-0' is still in use by linked cloned"
                         % vmid)
        self.assertEqual(self.sim.pve("GET", "/nodes/pve2/qemu/%d/config" % vmid).status, 200)
        self.assertEqual(self.finish(self.sim.pve("DELETE", "/nodes/pve2/qemu/%d" % clone))["exitstatus"], "OK")
        self.assertEqual(self.finish(self.sim.pve("DELETE", "/nodes/pve2/qemu/%d" % vmid))["exitstatus"], "OK")

    def test_failed_create_leaves_no_vm(self):
        vmid = self.newid()
        r = self.sim.pve("POST", "/nodes/pve1/qemu",
                         {"vmid": vmid, "scsi0": "local-lvm:0,import-from=local:import/no.raw"})
        self.assertIn("does not exist", self.finish(r)["exitstatus"])
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).status, 500)

    def test_running_vm_is_not_converted(self):
        vmid = self.newid()
        self.sim.clone(vmid, "running", "pve1")
        self.assertEqual(self.finish(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid))["exitstatus"],
                         "OK")
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/template" % vmid)
        self.assertEqual((r.status, r.json["message"]),
                         (500, "you can't convert a VM to template if VM is running\n"))

    def test_privileges(self):
        self.assertEqual(self.finish(self.download("pve1", "priv.qcow2", "/cloud.qcow2"))["exitstatus"], "OK")
        # Datastore.AllocateTemplate on the storage, and Sys.AccessNetwork on the node (or Sys.Modify on /).
        auth = self.token("img@pve", ["/storage/local", "--users", "img@pve", "--roles", "PVEDatastoreAdmin"])
        r = self.download("pve1", "p.qcow2", "/cloud.qcow2", auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed"))  # the `or`: no detail
        self.pveum("role", "add", "NetAccess", "-privs", "Sys.AccessNetwork")
        self.pveum("aclmod", "/nodes/pve1", "--users", "img@pve", "--roles", "NetAccess")
        self.assertEqual(self.finish(self.download("pve1", "p.qcow2", "/cloud.qcow2", auth=auth))["exitstatus"], "OK")
        auth2 = self.token("img2@pve", ["/nodes/pve1", "--users", "img2@pve", "--roles", "NetAccess"])
        r = self.download("pve1", "p2.qcow2", "/cloud.qcow2", auth=auth2)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/storage/local, "
                                                     "Datastore.AllocateTemplate)"))
        # import-from: the source volume needs Datastore.Audit or AllocateSpace on its storage.
        vmid = self.newid()
        auth3 = self.token("vm@pve", ["/vms", "--users", "vm@pve", "--roles", "PVEVMAdmin"],
                           ["/storage/local-lvm", "--users", "vm@pve", "--roles", "PVEDatastoreUser"])
        params = {"vmid": vmid, "scsi0": "local-lvm:0,import-from=local:import/priv.qcow2"}
        r = self.sim.pve("POST", "/nodes/pve1/qemu", params, auth=auth3)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/storage/local, "
                                                     "Datastore.AllocateSpace|Datastore.Audit)"))
        self.pveum("aclmod", "/storage/local", "--users", "vm@pve", "--roles", "PVEAuditor")
        r = self.sim.pve("POST", "/nodes/pve1/qemu", params, auth=auth3)
        self.assertEqual(self.finish(r)["exitstatus"], "OK")
        # An absolute path: root only.
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/config" % vmid,
                         {"scsi1": "local-lvm:0,import-from=/var/lib/vz/import/priv.qcow2"}, auth=auth3)
        self.assertEqual(r.status, 500)
        self.assertIn("Only root can pass arbitrary filesystem paths", r.json["message"])
        # The template conversion needs VM.Allocate on the VM.
        auth4 = self.token("ops@pve", ["/vms", "--users", "ops@pve", "--roles", "PVEVMUser"])
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/template" % vmid, auth=auth4)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/vms/%d, VM.Allocate)" % vmid))
        self.assertEqual(self.finish(self.sim.pve("POST", "/nodes/pve1/qemu/%d/template" % vmid,
                                                  auth=auth3))["exitstatus"], "OK")


if __name__ == "__main__":
    unittest.main()
