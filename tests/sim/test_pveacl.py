#!/usr/bin/env python3
# Tests of the simulated Proxmox VE access control (simlib/pveacl.py): ACL inheritance and propagation, the deepest
# ACL winning, groups, NoAccess, pools, privilege-separated tokens, the schema's permission objects, the checks of
# the handlers (clone, config, resize, content delete, tasks, listings), the 403 PVE answers, and `pveum`.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import subprocess
import sys
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import simtest  # noqa: E402
from simlib import pveacl  # noqa: E402


def access(*commands, pools=None):
    """An Access after a fresh install and the given pveum command lines."""
    acc = pveacl.Access(pools if pools is not None else {})
    for line in commands:
        rc, out, err = pveacl.pveum(acc, line.split())
        assert rc == 0, (line, err)
    return acc


class ModelTest(unittest.TestCase):
    """The model alone, as PVE's AccessControl.pm and RPCEnvironment.pm compute it."""

    def test_propagation_and_the_deepest_acl_wins(self):
        acc = access("user add u@pve", "aclmod /vms -users u@pve -roles PVEVMAdmin",
                     "aclmod /vms/101 -users u@pve -roles PVEAuditor",
                     "aclmod /nodes -users u@pve -roles PVEAuditor -propagate 0")
        self.assertIn("VM.Allocate", acc.permissions("u@pve", "/vms/100"))
        self.assertEqual(set(acc.permissions("u@pve", "/vms/101")),  # replaced, not added to
                         set(pveacl.BUILTIN_ROLES["PVEAuditor"]))
        self.assertIn("Sys.Audit", acc.permissions("u@pve", "/nodes"))
        self.assertEqual(acc.permissions("u@pve", "/nodes/pve1"), {})  # propagate 0: that path only
        self.assertEqual(acc.permissions("u@pve", "/"), {})
        with self.assertRaises(pveacl.Denied) as e:
            acc.check("u@pve", "/vms/101", ["VM.Config.CPU"])
        self.assertEqual(e.exception.msg, "Permission check failed (/vms/101, VM.Config.CPU)\n")
        with self.assertRaises(pveacl.Denied) as e:
            acc.check_any("u@pve", "/storage/local", ["Datastore.Audit", "Datastore.AllocateSpace"])
        self.assertEqual(e.exception.msg,
                         "Permission check failed (/storage/local, Datastore.Audit|Datastore.AllocateSpace)\n")

    def test_groups_user_entries_and_noaccess(self):
        acc = access("group add ops", "user add u@pve -groups ops", "aclmod / -groups ops -roles PVEAdmin",
                     "aclmod /storage -users u@pve -roles PVEDatastoreUser",
                     "aclmod /vms/102 -groups ops -roles NoAccess")
        self.assertIn("VM.Allocate", acc.permissions("u@pve", "/vms/100"))
        self.assertNotIn("Datastore.Allocate", acc.permissions("u@pve", "/storage/local"))  # user beats group
        self.assertEqual(acc.permissions("u@pve", "/vms/102"), {})

    def test_privilege_separated_tokens(self):
        acc = access("user add u@pve", "aclmod / -users u@pve -roles PVEAuditor",
                     "user token add u@pve sep", "user token add u@pve full -privsep 0",
                     "user token add u@pve none",
                     "aclmod / -tokens u@pve!sep -roles Administrator")
        self.assertEqual(set(acc.permissions("u@pve!sep", "/vms/100")), set(pveacl.BUILTIN_ROLES["PVEAuditor"]))
        self.assertEqual(set(acc.permissions("u@pve!full", "/vms/100")), set(pveacl.BUILTIN_ROLES["PVEAuditor"]))
        self.assertEqual(acc.permissions("u@pve!none", "/vms/100"), {})  # privsep, no ACL of its own
        self.assertEqual(acc.permissions("u@pve!gone", "/vms/100"), {})

    def test_pools_grant_on_their_vms(self):
        pools = {}
        acc = access("user add u@pve", "pool add p1", "pool modify p1 -vms 100,101",
                     "aclmod /pool/p1 -users u@pve -roles PVEVMAdmin", pools=pools)
        self.assertEqual(pools["p1"]["vms"], {100, 101})
        self.assertIn("VM.Config.CPU", acc.permissions("u@pve", "/vms/100"))
        self.assertEqual(acc.permissions("u@pve", "/vms/100")["VM.Config.CPU"], 0)  # never propagated
        self.assertEqual(acc.permissions("u@pve", "/vms/102"), {})
        self.assertTrue(acc.check_vm_perm("u@pve", 555, "p1", ["VM.Allocate"]))  # a new VM of the pool

    def test_schema_permission_objects(self):
        clone = {"check": ["and", ["perm", "/vms/{vmid}", ["VM.Clone"]],
                           ["or", ["perm", "/vms/{newid}", ["VM.Allocate"]],
                            ["perm", "/pool/{pool}", ["VM.Allocate"], "require_param", "pool"]]]}
        acc = access("user add u@pve", "pool add p1", "aclmod /vms/9000 -users u@pve -roles PVETemplateUser",
                     "aclmod /pool/p1 -users u@pve -roles PVEVMAdmin")
        with self.assertRaises(pveacl.Denied) as e:
            acc.check_api2(clone, "u@pve", {"vmid": "9000", "newid": "200"})
        self.assertEqual(e.exception.msg, "Permission check failed\n")  # an `or` names nothing
        self.assertTrue(acc.check_api2(clone, "u@pve", {"vmid": "9000", "newid": "200", "pool": "p1"}))
        with self.assertRaises(pveacl.Denied) as e:
            acc.check_api2(clone, "u@pve", {"vmid": "9001", "newid": "200", "pool": "p1"})
        self.assertEqual(e.exception.msg, "Permission check failed (/vms/9001, VM.Clone)\n")
        self.assertTrue(acc.check_api2({"user": "all"}, "u@pve", {}))
        self.assertTrue(acc.check_api2(None, "root@pam", {}))
        with self.assertRaises(pveacl.Denied):
            acc.check_api2(None, "u@pve", {})
        self.assertTrue(acc.check_api2({"check": ["userid-param", "self"]}, "u@pve", {"userid": "u@pve"}))
        with self.assertRaises(pveacl.Denied):
            acc.check_api2({"check": ["userid-param", "self"]}, "u@pve", {"userid": "root@pam"})

    def test_config_update_privileges(self):
        acc = access("user add u@pve", "role add Cfg -privs VM.Config.CPU,VM.Config.Options",
                     "aclmod /vms -users u@pve -roles Cfg")
        pveacl.check_update_pre(acc, "u@pve", 100, {"cores": "2", "numa0": "x", "description": "d"})
        with self.assertRaises(pveacl.Denied) as e:
            pveacl.check_update_pre(acc, "u@pve", 100, {"cores": "2", "memory": "1024"})
        self.assertIn("(/vms/100, VM.Config.Memory)", e.exception.msg)
        conf = {"ide2": "local:iso/a.iso,media=cdrom", "scsi0": "local-lvm:vm-100-disk-0,size=8G"}
        with self.assertRaises(pveacl.Denied) as e:  # an ISO needs its storage readable, then VM.Config.CDROM
            pveacl.check_update_pre(acc, "u@pve", 100, {"ide2": "local:iso/b.iso,media=cdrom"})
        self.assertIn("(/storage/local, Datastore.AllocateSpace|Datastore.Audit)", e.exception.msg)
        with self.assertRaises(pveacl.Denied) as e:
            pveacl.check_update_worker(acc, "u@pve", 100, conf, {"ide2": "none,media=cdrom"})
        self.assertIn("(/vms/100, VM.Config.CDROM)", e.exception.msg)
        with self.assertRaises(pveacl.Denied) as e:
            pveacl.check_update_pre(acc, "u@pve", 100, {"net0": "virtio,bridge=vmbr0"})
        self.assertIn("VM.Config.Network", e.exception.msg)
        acc2 = access("user add u@pve", "aclmod /vms -users u@pve -roles PVEVMAdmin")
        with self.assertRaises(pveacl.Denied) as e:
            pveacl.check_update_pre(acc2, "u@pve", 100, {"net0": "virtio,bridge=vmbr0,queues=2"})
        self.assertIn("(/sdn/zones/localnetwork/vmbr0, SDN.Use)", e.exception.msg)

    def test_hostpci_privileges(self):
        acc = access("user add u@pve", "role add Hw -privs VM.Config.HWType", "role add Map -privs Mapping.Use",
                     "aclmod /vms -users u@pve -roles Hw")
        with self.assertRaises(pveacl.Denied) as e:  # check_hostpci_perm: Mapping.Use on the mapping
            pveacl.check_update_pre(acc, "u@pve", 100, {"hostpci0": "mapping=gpu,pcie=1"})
        self.assertIn("(/mapping/pci/gpu, Mapping.Use)", e.exception.msg)
        acc = access("user add u@pve", "role add Hw -privs VM.Config.HWType", "role add Map -privs Mapping.Use",
                     "aclmod /vms -users u@pve -roles Hw", "aclmod /mapping/pci/gpu -users u@pve -roles Map")
        pveacl.check_update_pre(acc, "u@pve", 100, {"hostpci0": "mapping=gpu,pcie=1"})
        with self.assertRaises(pveacl.RootOnly):  # a device by host address: root only
            pveacl.check_update_pre(acc, "u@pve", 100, {"hostpci0": "host=0000:41:00.0"})
        acc2 = access("user add u@pve", "role add Map -privs Mapping.Use", "aclmod / -users u@pve -roles Map")
        with self.assertRaises(pveacl.Denied) as e:
            pveacl.check_update_pre(acc2, "u@pve", 100, {"hostpci0": "mapping=gpu"})
        self.assertIn("(/vms/100, VM.Config.HWType)", e.exception.msg)

    def test_pveum(self):
        acc = access()
        for line, msg in (("role add PVEScale -privs VM.Audit", "cannot use role ID starting with the "
                           "(case-insensitive) 'PVE' namespace"),
                          ("role add Scale -privs VM.Bogus", "invalid privilege 'VM.Bogus'"),
                          ("role modify PVEAuditor -privs VM.Audit", "auto-generated role 'PVEAuditor' cannot"),
                          ("aclmod /vms -users nobody@pve -roles PVEAuditor", "user 'nobody@pve' does not exist"),
                          ("aclmod /frob -users root@pam -roles PVEAuditor", "invalid ACL path '/frob'"),
                          ("user token add nobody@pve tok", "no such user"),
                          ("user token add root@pam t", "not look like a valid token ID"),
                          ("acl modify /vms -roles PVEAuditor", "either 'users', 'groups' or 'tokens'")):
            rc, out, err = pveacl.pveum(acc, line.split())
            self.assertEqual(rc, 255, line)
            self.assertIn(msg, err, line)
        rc, out, err = pveacl.pveum(acc, ["user", "add", "u@pve"])
        self.assertEqual((rc, err), (0, ""))
        rc, out, err = pveacl.pveum(acc, ["user", "add", "u@pve"])
        self.assertIn("user 'u@pve' already exists", err)
        rc, out, _ = pveacl.pveum(acc, ["user", "token", "add", "u@pve", "tok", "--privsep", "1"])
        self.assertEqual(rc, 0)
        secret = [ln.split("│")[2].strip() for ln in out.splitlines() if ln.startswith("│ value ")][0]
        self.assertEqual(acc.authenticate("u@pve!tok", secret), "u@pve!tok")
        self.assertIsNone(acc.authenticate("u@pve!tok", "wrong"))
        pveacl.pveum(acc, ["usermod", "u@pve", "--enable", "0"])
        self.assertIsNone(acc.authenticate("u@pve!tok", secret))


class SimTest(unittest.TestCase):
    """The simulator's PVE API under ACLs: the 403s as PVE sends them, filters, checks of the handlers."""

    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(kube="none", hosts="pve1=eas-tioga", knobs=["clone_seconds=0.1"], scenario={
            "pve_access": {"r1": {"pveum": ["pveum role add Lister -privs VM.Audit",
                                            "pveum user add lister@pve", "pveum user token add lister@pve tok",
                                            "pveum aclmod /vms/9000 -tokens lister@pve!tok -roles Lister",
                                            "pveum aclmod /vms -users lister@pve -roles Lister"]}}})
        cls.sim.clone(150, "vm-a")
        cls.sim.clone(151, "vm-b")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def pveum(self, *args):
        env = dict(os.environ, PVESCALE_SIM_STATE=self.sim.state)
        r = subprocess.run([os.path.join(HERE, "pveum")] + list(args), capture_output=True, text=True, env=env)
        return r.returncode, r.stdout, r.stderr

    def token(self, user, name, *acls, privsep="1"):
        """A new token with the given ACLs (aclmod argument lists); its Authorization header."""
        self.pveum("user", "add", user)
        rc, out, err = self.pveum("user", "token", "add", user, name, "--privsep", privsep)
        self.assertEqual(rc, 0, err)
        secret = [ln.split("│")[2].strip() for ln in out.splitlines() if ln.startswith("│ value ")][0]
        for acl in acls:
            rc, _, err = self.pveum("aclmod", *acl)
            self.assertEqual(rc, 0, err)
        return "PVEAPIToken=%s!%s=%s" % (user, name, secret)

    def test_403_as_pve_answers_it(self):
        auth = self.token("a@pve", "tok", ["/nodes", "--users", "a@pve", "--roles", "PVEAuditor"], privsep="0")
        r = self.sim.pve("GET", "/cluster/status", auth=auth)
        self.assertEqual(r.status, 403)
        self.assertEqual(r.reason, "Permission check failed (/, Sys.Audit)")
        self.assertEqual(r.json, {"data": None, "message": "Permission check failed (/, Sys.Audit)\n"})
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/status", auth=auth).status, 200)
        # The permission is checked before the parameters are (pve-http-server's order).
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": "x"}, auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/vms/9000, VM.Clone)"))
        dump = self.sim.admin("GET", "/pve-access").json["r1"]
        self.assertIn({"user": "a@pve!tok", "call": "GET /api2/json/cluster/status",
                       "message": "Permission check failed (/, Sys.Audit)"},
                      [{k: d[k] for k in ("user", "call", "message")} for d in dump["denials"]])
        # Sys.Audit on / without propagation: /cluster/status, and nothing below /.
        self.pveum("aclmod", "/", "--users", "a@pve", "--roles", "PVEAuditor", "--propagate", "0")
        self.assertEqual(self.sim.pve("GET", "/cluster/status", auth=auth).status, 200)
        perms = self.sim.pve("GET", "/access/permissions", auth=auth).data
        self.assertEqual(perms["/"]["Sys.Audit"], 0)
        self.assertNotIn("/access", perms)
        r = self.sim.pve("GET", "/access/permissions", {"userid": "root@pam"}, auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/access, Sys.Audit)"))

    def test_default_and_readonly_tokens(self):
        self.assertEqual(self.sim.pve("GET", "/cluster/status").status, 200)
        e = self.sim.ep["pve"]["r1"]
        ro = "PVEAPIToken=%s=%s" % (e["readonly_token_id"], e["readonly_token_secret"])
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": 300}, auth=ro)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/vms/9000, VM.Clone)"))
        self.assertEqual(self.sim.pve("GET", "/cluster/status", auth=ro).status, 200)

    def test_listings_are_filtered(self):
        auth = self.token("l@pve", "tok", ["/vms/150", "--tokens", "l@pve!tok", "--roles", "PVEAuditor"],
                          ["/", "--users", "l@pve", "--roles", "PVEAuditor"])
        vms = self.sim.pve("GET", "/nodes/pve1/qemu", auth=auth).data
        self.assertEqual([v["vmid"] for v in vms], [150])
        res = self.sim.pve("GET", "/cluster/resources", auth=auth).data
        self.assertEqual([x["vmid"] for x in res if x["type"] == "qemu"], [150])
        node = [x for x in res if x["type"] == "node"][0]
        self.assertNotIn("maxcpu", node)  # no Sys.Audit on /nodes/pve1 for the token itself
        self.assertEqual([x for x in res if x["type"] == "storage"], [])
        # The scenario's pveum commands ran at start.
        acl = self.sim.admin("GET", "/pve-access").json["r1"]["acl"]
        self.assertIn({"path": "/vms/9000", "type": "token", "ugid": "lister@pve!tok", "roleid": "Lister",
                       "propagate": 1}, acl)

    def test_handlers_check_what_qemu_server_checks(self):
        auth = self.token("c@pve", "tok", ["/vms", "--users", "c@pve", "--roles", "PVEVMAdmin"], privsep="0")
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": 160}, auth=auth)
        self.assertEqual((r.status, r.reason),
                         (403, "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)"))
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": 160, "pool": "nope"}, auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (pool 'nope' does not exist)"))
        self.pveum("aclmod", "/storage/local-lvm", "--users", "c@pve", "--roles", "PVEDatastoreUser")
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": 160}, auth=auth)
        self.assertEqual((r.status, r.reason),
                         (403, "Permission check failed (/sdn/zones/localnetwork/vmbr0, SDN.Use)"))
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/160/config").status, 500)  # nothing created
        self.pveum("aclmod", "/sdn/zones/localnetwork", "--users", "c@pve", "--roles", "PVESDNUser")
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": 160}, auth=auth)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sim.wait_task(r.data)["exitstatus"], "OK")  # its own task: no Sys.Audit needed
        # Resize: the worker checks the disk's storage; the task fails with the message, nothing changes.
        self.pveum("aclmod", "/storage/local-lvm", "--users", "c@pve", "--roles", "PVEDatastoreUser",
                   "--delete", "1")
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/160/resize", {"disk": "scsi0", "size": "30G"}, auth=auth)
        self.assertEqual(r.status, 200, r)
        st = self.sim.wait_task(r.data)
        self.assertEqual(st["exitstatus"], "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)")
        self.assertIn("size=20G", self.sim.pve("GET", "/nodes/pve1/qemu/160/config").data["scsi0"])
        # Another's task: Sys.Audit on the node.
        upid = self.sim.pve("POST", "/nodes/pve1/qemu/151/status/start").data
        r = self.sim.pve("GET", "/nodes/pve1/tasks/%s/status" % urllib.parse.quote(upid, safe=""), auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/nodes/pve1, Sys.Audit)"))
        # A content delete needs Datastore.Allocate.
        r = self.sim.pve("DELETE", "/nodes/pve1/storage/local/content/local:iso%2Fx.iso", auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/storage/local, Datastore.Allocate)"))
        # A PUT config checks synchronously, a POST config fails its task.
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/160/config", {"ide2": "local:iso/x.iso,media=cdrom"}, auth=auth)
        self.assertEqual((r.status, r.reason),
                         (403, "Permission check failed (/storage/local, Datastore.AllocateSpace|Datastore.Audit)"))
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/160/config", {"cores": 3, "tags": "a"}, auth=auth)
        self.assertEqual(r.status, 200, r)

    def test_z_reset_and_pveum_errors(self):
        rc, _, err = self.pveum("role", "add", "PVEScale", "-privs", "VM.Audit")
        self.assertEqual(rc, 255)
        self.assertIn("'PVE' namespace", err)
        r = self.sim.admin("POST", "/actions/pveum", {"region": "r9", "args": []})
        self.assertEqual(r.status, 400)
        rc, out, _ = self.pveum("user", "token", "add", "root@pam", "obs", "--privsep", "0", "--output-format",
                                "json")
        obs = json.loads(out)
        auth = "PVEAPIToken=%s=%s" % (obs["full-tokenid"], obs["value"])
        self.assertEqual(self.sim.pve("GET", "/cluster/status", auth=auth).status, 200)  # root@pam's privileges
        # A fresh install's user.cfg: root@pam alone, no tokens (runs last: the default token is gone).
        self.assertEqual(self.sim.admin("POST", "/actions/pve-access-reset", {"region": "r1"}).status, 200)
        self.assertEqual(self.sim.pve("GET", "/version").status, 401)
        self.assertEqual(self.sim.pve("GET", "/version", auth=auth).status, 401)
        self.assertEqual(list(self.sim.admin("GET", "/pve-access").json["r1"]["users"]), ["root@pam"])


if __name__ == "__main__":
    unittest.main()
