#!/usr/bin/env python3
# pvescale-coordinator's managed templates (ProxmoxTemplate), against the simulator (download-url with the checksum
# verified by its Proxmox, import-from, conversion to a template, their privileges) and real agents, on a real
# control plane. A ProxmoxTemplate named by a class's instanceTemplateRef {kind: ProxmoxTemplate} is built on both
# hosts from an image a local HTTP server serves; the class's node is a linked clone of its host's template; a new
# image makes a new generation on both hosts (the old one renamed, kept on the host where the node's clone uses it,
# removed on the other; the old image file deleted) and the claim becomes Drifted (TemplateDrifted). A wrong checksum
# fails each host with Proxmox's message in the status, the condition and a Warning Event, as do a full storage and a
# missing privilege; a template no class names any more is removed; a slow download does not hold the pass.
# SPDX-License-Identifier: Apache-2.0
import hashlib
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from simlib import imageserv  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
TEMPLATES = cl.GROUP + "/proxmoxtemplates"
MERGE = "application/merge-patch+json"
GC = ["--gc-interval=2s"]


IMAGES = {"/noble-1.img": imageserv.qcow2(2 * 2**30), "/noble-2.img": imageserv.qcow2(3 * 2**30)}


def condition(obj, kind):
    return next((x for x in (obj.get("status") or {}).get("conditions", []) if x["type"] == kind), None)


def initialized(claim):
    c = condition(claim, "Initialized")
    return bool(c and c["status"] == "True")


class ManagedTemplateTest(cl.SharedControlPlaneTest):
    """Two hosts of one region on a real control plane; the images come from this process's HTTP server."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.images = imageserv.ImageServer(IMAGES)
        cls.base = cls.images.base

    @classmethod
    def tearDownClass(cls):
        cls.images.stop()
        super().tearDownClass()

    def template(self, name, path, checksum=None):
        src = {"url": self.base + path, "imageName": "ubuntu.qcow2"}
        src["checksum"] = checksum or hashlib.sha256(IMAGES[path]).hexdigest()
        return {"apiVersion": "pvescale.io/v1alpha1", "kind": "ProxmoxTemplate", "metadata": {"name": name},
                "spec": {"sourceImage": src, "storageIDs": ["local", "local-lvm"], "machine": "q35",
                         "agent": {"enabled": True}, "tags": ["k8s"]}}

    def tpl(self, name):
        return self.c.sim.kube("GET", TEMPLATES + "/" + name).json

    def vms(self, node):
        return self.c.sim.pve("GET", "/nodes/%s/qemu" % node).data

    def managed(self, node, name=None):
        return [v for v in self.vms(node) if "pvescale-template" in (v.get("tags") or "").split(";")
                and (name is None or v.get("name") == name)]

    def ready(self, name, spec_hash=None):
        def check():
            t = self.tpl(name)
            st = t.get("status") or {}
            ok = (st.get("summary") == "2/2" and (condition(t, "Ready") or {}).get("status") == "True"
                  and (spec_hash is None or st.get("specHash") != spec_hash))
            return ok and t
        return cl.wait_for(check, 120, interval=0.5, what="ProxmoxTemplate %s Ready on both hosts" % name)

    def test_build_launch_and_drift(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses",
                 cl.nodeclass(instanceTemplateRef={"kind": "ProxmoxTemplate", "name": "noble"},
                              metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        c.create(PODS, cl.pod("p0", cpu="1500m", memory="1Gi"))
        self.co = cl.Coordinator(c, args=cl.FAST_SCALE_DOWN + GC)
        # The claim comes before its template exists: its launch waits (it does not fail), then goes on.
        (early,) = cl.wait_for(lambda: [x for x in c.claims() if (x.get("status") or {}).get("vmid")], 60,
                               interval=0.5, what="a claim with its VMID")
        deadline = time.monotonic() + 4  # several launch attempts: the same claim, no VM, not failed
        while time.monotonic() < deadline:
            (now,) = c.claims()
            self.assertEqual(now["metadata"]["uid"], early["metadata"]["uid"])
            self.assertIsNone(now["metadata"].get("deletionTimestamp"), "the launch did not fail")
            self.assertEqual([v for v in self.vms(now["status"]["host"]) if v["vmid"] == now["status"]["vmid"]], [])
            time.sleep(0.5)
        c.create(TEMPLATES, self.template("noble", "/noble-1.img"))
        t = self.ready("noble")
        gen = t["status"]["specHash"][:8]
        self.assertEqual(sorted(h["host"] for h in t["status"]["hosts"]), ["pve1", "pve2"])
        first = {}
        for h in t["status"]["hosts"]:
            self.assertEqual(h["state"], "Ready", h)
            self.assertRegex(h["image"], r"^local:import/ubuntu-[0-9a-f]{8}\.qcow2$")
            (vm,) = self.managed(h["host"], "noble")
            self.assertEqual((vm["vmid"], vm.get("template")), (h["vmid"], 1))
            self.assertIn("pvescale-tpl-" + gen, vm["tags"].split(";"))
            conf = c.sim.pve("GET", "/nodes/%s/qemu/%d/config" % (h["host"], h["vmid"])).data
            self.assertEqual(conf["scsi0"], "local-lvm:base-%d-disk-0,size=2G" % h["vmid"], "imported: 2 GiB")
            self.assertEqual(conf["ide2"], "local-lvm:vm-%d-cloudinit,media=cdrom" % h["vmid"])
            self.assertEqual((conf["machine"], conf["agent"]), ("q35", "enabled=1,type=virtio"))
            content = c.sim.pve("GET", "/nodes/%s/storage/local/content" % h["host"], {"content": "import"}).data
            self.assertEqual([x["volid"] for x in content], [h["image"]])
            first[h["host"]] = h["vmid"]
        claim = cl.wait_for(lambda: (lambda cs: len(cs) == 1 and initialized(cs[0]) and cs[0])(c.claims()), 120,
                            interval=0.5, what="the claim Initialized")
        self.assertEqual(claim["metadata"]["uid"], early["metadata"]["uid"], "the same claim, not a successor")
        host, vmid = claim["status"]["host"], claim["status"]["vmid"]
        conf = c.sim.pve("GET", "/nodes/%s/qemu/%d/config" % (host, vmid)).data
        self.assertTrue(conf["scsi0"].startswith("local-lvm:base-%d-disk-0/" % first[host]),
                        "a linked clone of the managed template: %s" % conf["scsi0"])
        # A new image: a new generation on both hosts; the old one keeps its clone's base volume on the claim's host.
        r = c.sim.kube("PATCH", TEMPLATES + "/noble", {"spec": {"sourceImage": {
            "url": self.base + "/noble-2.img", "checksum": hashlib.sha256(IMAGES["/noble-2.img"]).hexdigest()}}},
            ctype=MERGE)
        self.assertEqual(r.status, 200, r)
        t2 = self.ready("noble", spec_hash=t["status"]["specHash"])
        for h in t2["status"]["hosts"]:
            self.assertNotEqual(h["vmid"], first[h["host"]])
            conf = c.sim.pve("GET", "/nodes/%s/qemu/%d/config" % (h["host"], h["vmid"])).data
            self.assertEqual(conf["scsi0"], "local-lvm:base-%d-disk-0,size=3G" % h["vmid"])
            self.assertNotEqual(h["image"], t["status"]["hosts"][0]["image"])

            def images(node=h["host"]):
                return [x["volid"] for x in c.sim.pve("GET", "/nodes/%s/storage/local/content" % node,
                                                      {"content": "import"}).data]
            cl.wait_for(lambda: images() == [h["image"]], 30, interval=0.5,
                        what="only the new image left on %s" % h["host"])
        other = "pve2" if host == "pve1" else "pve1"
        now = {h["host"]: h["vmid"] for h in t2["status"]["hosts"]}
        cl.wait_for(lambda: [v["vmid"] for v in self.managed(other)] == [now[other]], 30, interval=0.5,
                    what="the old template removed on %s (no clone uses it)" % other)
        old = [v for v in self.managed(host) if v["vmid"] == first[host]]
        self.assertEqual([v["name"] for v in old], ["noble-" + gen], "retired under its generation's name")

        def drifted():
            x = c.sim.kube("GET", cl.GROUP + "/nodeclaims/" + claim["metadata"]["name"]).json
            d = condition(x, "Drifted")
            return d and d["status"] == "True" and d
        d = cl.wait_for(drifted, 120, interval=0.5, what="the claim Drifted after the new image")
        self.assertEqual(d["reason"], "TemplateDrifted")

    def test_checksum_mismatch_and_removal(self):
        c = self.c
        c.create(TEMPLATES, self.template("bad", "/noble-1.img", checksum="0" * 64))
        c.create(TEMPLATES, self.template("spare", "/noble-1.img"))
        for name in ("bad", "spare"):
            c.create(cl.GROUP + "/proxmoxnodeclasses",
                     cl.nodeclass(name, instanceTemplateRef={"kind": "ProxmoxTemplate", "name": name}))
        self.co = cl.Coordinator(c, args=GC)

        def failed():
            t = self.tpl("bad")
            st = t.get("status") or {}
            return st.get("summary") == "0/2" and t
        t = cl.wait_for(failed, 120, interval=0.5, what="ProxmoxTemplate bad failed on both hosts")
        want = "checksum mismatch: got '%s' != expect '%s'" % (hashlib.sha256(IMAGES["/noble-1.img"]).hexdigest(),
                                                               "0" * 64)
        for h in t["status"]["hosts"]:
            self.assertEqual((h["state"], h["vmid"]), ("Failed", 0))
            self.assertTrue(h["message"].startswith(h["host"] + ": download of the image: "), h["message"])
            self.assertIn(want, h["message"])
        ready = condition(t, "Ready")
        self.assertEqual((ready["status"], ready["reason"]), ("False", "BuildFailed"))
        self.assertIn(want, ready["message"])
        self.assertEqual(self.managed("pve1", "bad") + self.managed("pve2", "bad"), [], "no template without image")

        def events():
            items = c.sim.kube("GET", "/api/v1/namespaces/default/events").json["items"]
            return [e for e in items if e["involvedObject"].get("name") == "bad"
                    and e["reason"] == "TemplateBuildFailed"]
        evs = cl.wait_for(lambda: len(events()) >= 2 and events(), 30, interval=0.5, what="an Event per host")
        self.assertEqual({e["message"].split(":")[0] for e in evs}, {"pve1", "pve2"})
        self.assertTrue(all(e["type"] == "Warning" for e in evs))
        # spare is built, then removed once no class names it.
        self.ready("spare")
        r = c.sim.kube("DELETE", cl.GROUP + "/proxmoxnodeclasses/spare")
        self.assertEqual(r.status, 200, r)
        cl.wait_for(lambda: not self.managed("pve1", "spare") and not self.managed("pve2", "spare"), 60,
                    interval=0.5, what="spare's templates removed")
        t = cl.wait_for(lambda: (lambda x: (x.get("status") or {}).get("summary") == "0/0" and x)(self.tpl("spare")),
                        30, interval=0.5, what="spare's status: no host needs it")
        self.assertEqual(condition(t, "Ready")["reason"], "NotUsed")

    def host_states(self, name):
        st = self.tpl(name).get("status") or {}
        return {h["host"]: (h["state"], h.get("message", "")) for h in st.get("hosts", [])}

    def test_storage_full_and_missing_privilege(self):
        c = self.c
        c.sim.knobs(storage_full=["pve1/local"])
        c.create(TEMPLATES, self.template("noble", "/noble-1.img"))
        c.create(cl.GROUP + "/proxmoxnodeclasses",
                 cl.nodeclass(instanceTemplateRef={"kind": "ProxmoxTemplate", "name": "noble"}))
        self.co = cl.Coordinator(c, args=GC)
        states = cl.wait_for(lambda: (lambda s: s.get("pve2", ("",))[0] == "Ready" and "pve1" in s and s)(
            self.host_states("noble")), 120, interval=0.5, what="pve2 Ready, pve1 tried")
        self.assertEqual(states["pve1"], ("Failed", "pve1: download of the image: task download failed: download "
                                                    "failed: write error: No space left on device"))
        self.assertEqual(self.tpl("noble")["status"]["summary"], "1/2")
        self.assertEqual(self.managed("pve1"), [], "nothing left behind on the full host")
        c.sim.knobs(storage_full=[])
        t = self.ready("noble")
        # Without Datastore.AllocateTemplate on the import storage (the deepest ACL wins), a new image fails on both.
        r = c.sim.admin("POST", "/actions/pveum", {"region": "r1", "args": [
            "aclmod", "/storage/local", "--users", "pvescale@pve", "--roles", "PVEDatastoreUser"]})
        self.assertEqual((r.status, r.json["rc"]), (200, 0), r)
        r = c.sim.kube("PATCH", TEMPLATES + "/noble", {"spec": {"sourceImage": {
            "url": self.base + "/noble-2.img", "checksum": hashlib.sha256(IMAGES["/noble-2.img"]).hexdigest()}}},
            ctype=MERGE)
        self.assertEqual(r.status, 200, r)
        want = "Permission check failed (/storage/local, Datastore.AllocateTemplate)"
        states = cl.wait_for(lambda: (lambda s: all(v[0] == "Failed" for v in s.values()) and len(s) == 2 and s)(
            self.host_states("noble")), 60, interval=0.5, what="both hosts refused")
        for host, (_, message) in states.items():
            self.assertTrue(message.startswith(host + ": download of the image: "), message)
            self.assertIn(want, message)
        ready = condition(self.tpl("noble"), "Ready")
        self.assertEqual((ready["status"], ready["reason"]), ("False", "BuildFailed"))
        self.assertEqual(sorted(v["vmid"] for v in self.managed("pve1") + self.managed("pve2")),
                         sorted(h["vmid"] for h in t["status"]["hosts"]), "the old generation stays in use")

    def test_slow_download_goes_on_while_the_pass_ends(self):
        c = self.c
        c.sim.knobs(download_seconds=8.0)
        c.create(TEMPLATES, self.template("noble", "/noble-1.img"))
        c.create(cl.GROUP + "/proxmoxnodeclasses",
                 cl.nodeclass(instanceTemplateRef={"kind": "ProxmoxTemplate", "name": "noble"}))
        self.co = cl.Coordinator(c, args=GC)
        # The pass leaves each download running (its status written while they run), and picks them up later.
        t = cl.wait_for(lambda: (lambda x: (x.get("status") or {}).get("summary") == "0/2" and x)(self.tpl("noble")),
                        60, interval=0.2, what="both hosts Building")
        for h in t["status"]["hosts"]:
            self.assertEqual(h["state"], "Building", h)
            self.assertRegex(h["message"], r"^%s: downloading the image \(task UPID:%s:" % (h["host"], h["host"]))
        self.assertEqual(condition(t, "Ready")["reason"], "Building")
        self.ready("noble")
        downloads = [x for x in c.sim.admin("GET", "/tasks").json if x.get("type") == "download"]
        self.assertEqual(len(downloads), 2, "one download per host, not one per pass: %s" % downloads)

    def test_under_the_charts_rbac(self):
        """The chart's ClusterRole lets the coordinator read ProxmoxTemplates, write their status and their Events."""
        c = self.c
        c.run_as_chart()
        c.create(TEMPLATES, self.template("noble", "/noble-1.img"))
        c.create(TEMPLATES, self.template("bad", "/noble-1.img", checksum="0" * 64))
        for name in ("noble", "bad"):
            c.create(cl.GROUP + "/proxmoxnodeclasses",
                     cl.nodeclass(name, instanceTemplateRef={"kind": "ProxmoxTemplate", "name": name}))
        self.co = cl.Coordinator(c, args=GC)
        self.ready("noble")
        cl.wait_for(lambda: (self.tpl("bad").get("status") or {}).get("summary") == "0/2", 60, interval=0.5,
                    what="bad failed on both hosts")
        items = c.sim.kube("GET", "/api/v1/namespaces/default/events").json["items"]
        self.assertTrue([e for e in items if e["reason"] == "TemplateBuildFailed"], "the Warning Events written")
        self.assertEqual(c.denials(), [], "calls the chart's RBAC refused")


if __name__ == "__main__":
    unittest.main(verbosity=2)
