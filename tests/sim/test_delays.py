#!/usr/bin/env python3
# Tests of the simulator's delay profiles (fast, realistic), full clones' time per GiB and the storage lock.
# SPDX-License-Identifier: Apache-2.0
import concurrent.futures
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simlib import sim as simmod  # noqa: E402

# The knobs' fast defaults before the profiles existed: tests rely on them.
FAST_BEFORE = {"clone_seconds": 1.0, "create_seconds": 0.2, "start_seconds": 0.1, "join_delay_seconds": 1.0,
               "ready_delay_seconds": 1.0, "shutdown_seconds": 0.2, "stop_seconds": 0.0, "stop_cleanup_seconds": 0.0,
               "destroy_seconds": 0.2, "pod_start_seconds": 0.5}


class ProfileTest(unittest.TestCase):
    def test_fast_default_unchanged(self):
        for k, v in FAST_BEFORE.items():
            self.assertEqual(simmod.KNOBS[k], v, k)
        self.assertEqual(simmod.KNOBS["delays"], "fast")
        for k in ("boot_seconds", "full_clone_seconds_per_gib"):
            self.assertEqual(simmod.KNOBS[k], 0.0, k)
        self.assertIs(simmod.KNOBS["storage_lock"], False)
        self.assertEqual(set(simmod.DELAY_PROFILES["fast"]), set(simmod.REALISTIC))

    def test_realistic_values(self):
        r = simmod.REALISTIC
        self.assertAlmostEqual(r["full_clone_seconds_per_gib"], 1024 / 200)  # 200 MiB/s onto local-lvm
        # kproximate: VM start 19:15:08, node joined 19:15:48
        self.assertAlmostEqual(r["start_seconds"] + r["boot_seconds"] + r["join_delay_seconds"], 40.0)
        self.assertIs(r["storage_lock"], True)
        self.assertGreater(r["clone_seconds"], simmod.KNOBS["clone_seconds"])

    def test_flag_scenario_and_knob(self):
        s = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", kube="none", args=["--delays", "realistic"])
        try:
            k = s.admin("GET", "/knobs").json
            self.assertEqual(k["delays"], "realistic")
            for name in ("full_clone_seconds_per_gib", "boot_seconds", "storage_lock", "stop_cleanup_seconds"):
                self.assertEqual(k[name], simmod.REALISTIC[name], name)
            self.assertEqual(k["clone_seconds"], 0.2)  # simtest's --set clone_seconds=0.2 wins over the profile
            for bad in ("slow", ["realistic"]):
                r = s.admin("POST", "/knobs", {"delays": bad, "boot_seconds": 9})
                self.assertEqual(r.status, 400, r)
                self.assertIn("delays", r.json["error"])
            self.assertEqual(s.admin("GET", "/knobs").json, k)  # nothing changed
            k = s.admin("POST", "/knobs", {"delays": "fast", "boot_seconds": 0.5}).json
            self.assertEqual(k["delays"], "fast")
            for name, v in simmod.DELAY_PROFILES["fast"].items():
                self.assertEqual(k[name], 0.5 if name == "boot_seconds" else v, name)
            k = s.admin("POST", "/knobs", {"delays": "realistic"}).json
            for name, v in simmod.REALISTIC.items():
                self.assertEqual(k[name], v, name)
        finally:
            s.stop()
        s = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", kube="none",
                        scenario={"delays": "realistic", "knobs": {"boot_seconds": 3}})
        try:
            k = s.admin("GET", "/knobs").json
            self.assertEqual((k["delays"], k["boot_seconds"], k["storage_lock"]), ("realistic", 3.0, True))
        finally:
            s.stop()

    def test_bad_profile_exit_2(self):
        import subprocess
        d = os.path.join(os.path.dirname(os.path.abspath(__file__)))
        for extra in (["--delays", "slow"], ["--set", "delays=slow"]):
            p = subprocess.run([sys.executable, os.path.join(d, "run"), "--state-dir", "/nonexistent/x", "--kube",
                                "none"] + extra, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            if "--set" in extra:
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("slow", p.stderr)
            self.assertFalse(os.path.exists("/nonexistent/x"))


class CloneDelayTest(unittest.TestCase):
    CLONE = 0.6

    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", kube="none",
                              knobs=["clone_seconds=%g" % cls.CLONE, "full_clone_seconds_per_gib=0.05"])
        cls.next = 300

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def newid(self):
        CloneDelayTest.next += 1
        return CloneDelayTest.next

    def knobs(self, **kv):
        r = self.sim.admin("POST", "/knobs", kv)
        self.assertEqual(r.status, 200, r)

    def start_clone(self, node="pve1", **extra):
        tmpl = self.sim.ep["pve"]["r1"]["templates"][node]
        vmid = self.newid()
        params = {"newid": vmid, "name": "d%d" % vmid}
        params.update(extra)
        r = self.sim.pve("POST", "/nodes/%s/qemu/%d/clone" % (node, tmpl), params)
        self.assertEqual(r.status, 200, r)
        return r.data

    def finish(self, upid):
        st = self.sim.wait_task(upid, timeout=60)
        self.assertEqual(st["exitstatus"], "OK", st)
        return time.time()

    def log(self, upid):
        import urllib.parse
        r = self.sim.pve("GET", "/nodes/%s/tasks/%s/log" % (upid.split(":")[1], urllib.parse.quote(upid, safe="")))
        return [x["t"] for x in r.data]

    def parallel(self, nodes):
        t0 = time.time()
        upids = [self.start_clone(n) for n in nodes]
        with concurrent.futures.ThreadPoolExecutor(len(upids)) as ex:
            ends = list(ex.map(self.finish, upids))
        return max(ends) - t0, [self.log(u) for u in upids]

    def test_parallel_clones_on_one_storage_take_turns(self):
        self.knobs(storage_lock=True)
        try:
            t0 = time.time()
            one = self.finish(self.start_clone()) - t0
            self.assertGreaterEqual(one, self.CLONE)
            both, logs = self.parallel(["pve1", "pve1"])
            # one after the other: at least twice one clone's copy (a lower bound, so load cannot break it)
            self.assertGreaterEqual(both, 2 * self.CLONE)
            self.assertLess(both, 2 * one + 20)  # and it ends: nothing waits for ever
            waiting = [l for l in logs if "waiting for lock on storage 'local-lvm'" in l]
            self.assertEqual(len(waiting), 1, logs)
            # another host's storage is its own: clones on pve1 and pve2 do not wait for each other
            _, logs = self.parallel(["pve1", "pve2"])
            self.assertFalse([l for l in logs if any("waiting for lock" in x for x in l)], logs)
        finally:
            self.knobs(storage_lock=False)

    def test_without_storage_lock_no_turns(self):
        _, logs = self.parallel(["pve1", "pve1"])
        self.assertFalse([l for l in logs if any("waiting for lock" in x for x in l)], logs)

    def test_full_clone_per_gib(self):
        # the template's disk is 20G: a full clone copies it at 0.05 s/GiB, 1 s on top of clone_seconds
        t0 = time.time()
        full = self.finish(self.start_clone(full=1, storage="local-lvm")) - t0
        self.assertGreaterEqual(full, self.CLONE + 20 * 0.05)
        conf = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % CloneDelayTest.next).data
        self.assertTrue(conf["scsi0"].startswith("local-lvm:vm-%d-disk-0," % CloneDelayTest.next), conf)



class SuspendTest(unittest.TestCase):
    """status/suspend (pause, or hibernate with todisk) and status/resume, as qemu-server answers them."""
    READ = 0.5  # s/GiB: the template's 2048 MiB read back in 1 s

    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve", kube="none",
                              knobs=["vmstate_read_seconds_per_gib=%g" % cls.READ, "vmstate_write_seconds_per_gib=0.1"])
        cls.next = 400

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def running_vm(self):
        SuspendTest.next += 1
        vmid = SuspendTest.next
        self.sim.clone(vmid, "s%d" % vmid)
        self.ok(self.post(vmid, "start"))
        return vmid

    def post(self, vmid, action, auth=None, **params):
        return self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/%s" % (vmid, action), params or None, auth=auth)

    def ok(self, r):
        self.assertEqual(r.status, 200, r)
        st = self.sim.wait_task(r.data, timeout=60)
        self.assertEqual(st["exitstatus"], "OK", st)
        return st

    def current(self, vmid):
        return self.sim.pve("GET", "/nodes/pve1/qemu/%d/status/current" % vmid).data

    def config(self, vmid):
        return self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data

    def test_pause_and_resume(self):
        vmid = self.running_vm()
        pid = self.current(vmid)["pid"]
        r = self.post(vmid, "suspend")
        self.assertEqual(r.data.split(":")[5], "qmpause")
        self.ok(r)
        cur = self.current(vmid)
        self.assertEqual((cur["status"], cur["qmpstatus"], cur["pid"]), ("running", "paused", pid))
        self.assertNotIn("lock", cur)
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/shutdown" % vmid)
        self.assertEqual((r.status, r.json["message"]), (500, "VM is paused - cannot shutdown\n"))
        r = self.post(vmid, "resume")
        self.assertEqual(r.data.split(":")[5], "qmresume")
        self.ok(r)
        cur = self.current(vmid)
        self.assertEqual((cur["status"], cur["qmpstatus"], cur["pid"]), ("running", "running", pid))
        self.ok(self.post(vmid, "resume"))  # resuming a running VM: nothing to do, OK
        self.ok(self.post(vmid, "suspend"))
        self.ok(self.post(vmid, "shutdown", forceStop=1))  # paused: a stop instead
        self.assertEqual(self.current(vmid)["status"], "stopped")

    def test_hibernate_and_resume(self):
        vmid = self.running_vm()
        r = self.post(vmid, "suspend", todisk=1)
        self.assertEqual(r.data.split(":")[5], "qmsuspend")
        self.ok(r)
        cur = self.current(vmid)
        self.assertEqual((cur["status"], cur["qmpstatus"], cur["lock"]), ("stopped", "stopped", "suspended"))
        self.assertNotIn("pid", cur)
        conf = self.config(vmid)
        self.assertRegex(conf["vmstate"], r"^local-lvm:vm-%d-state-suspend-\d{4}-\d\d-\d\d$" % vmid)
        # locked: no config change, no destroy, no second suspend (it is not running)
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"cores": 4})
        self.assertEqual((r.status, r.json["message"]), (500, "VM is locked (suspended)\n"))
        r = self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid)
        self.assertEqual(r.status, 500, r)
        r = self.post(vmid, "suspend")
        self.assertEqual((r.status, r.json["message"]), (500, "VM %d not running\n" % vmid))
        t0 = time.time()
        st = self.ok(self.post(vmid, "resume"))
        # QEMU's start plus the VM's 2048 MiB read back at READ s/GiB (a lower bound: load cannot break it)
        self.assertGreaterEqual(time.time() - t0, 2 * self.READ)
        log = [x["t"] for x in self.sim.pve("GET", "/nodes/pve1/tasks/%s/log" % st["upid"].replace(":", "%3A")).data]
        self.assertTrue(any(l.startswith("resuming VM %d from local-lvm:vm-%d-state-" % (vmid, vmid)) for l in log),
                        log)
        cur = self.current(vmid)
        self.assertEqual((cur["status"], cur["qmpstatus"]), ("running", "running"))
        self.assertNotIn("lock", cur)
        conf = self.config(vmid)
        self.assertNotIn("vmstate", conf)
        self.assertNotIn("runningmachine", conf)
        # status/start resumes a hibernated VM too (vm_start with the 'suspended' lock)
        self.ok(self.post(vmid, "suspend", todisk=1))
        self.ok(self.post(vmid, "start"))
        self.assertNotIn("lock", self.current(vmid))

    def test_refusals(self):
        SuspendTest.next += 1
        vmid = SuspendTest.next
        self.sim.clone(vmid, "s%d" % vmid)
        for action in ("suspend", "resume"):
            r = self.post(vmid, action)
            self.assertEqual((r.status, r.json["message"]), (500, "VM %d not running\n" % vmid))
        self.ok(self.post(vmid, "start"))
        r = self.post(vmid, "suspend", todisk="maybe")
        self.assertEqual(r.status, 400, r)
        self.assertIn("todisk", r.json["errors"])
        r = self.post(vmid, "suspend", statestorage="local-lvm")  # requires todisk: PVE names the missing one
        self.assertEqual((r.status, r.json["errors"]),
                         (400, {"todisk": "missing property - 'statestorage' requires this property"}))
        r = self.post(vmid, "suspend", todisk=1, statestorage="nosuch")
        self.assertEqual((r.status, r.json["message"]), (500, "storage 'nosuch' does not exist\n"))
        for action in ("suspend", "resume"):
            r = self.post(vmid, action, skiplock=1)
            self.assertEqual((r.status, r.json["errors"]), (400, {"skiplock": "Only root may use this option."}))
        self.assertEqual(self.current(vmid)["qmpstatus"], "running")  # nothing changed

    def pveum(self, *args):
        r = self.sim.admin("POST", "/actions/pveum", {"args": list(args)})
        self.assertEqual(r.json["rc"], 0, r.json)
        return r.json["stdout"]

    def test_privileges(self):
        import json
        vmid = self.running_vm()
        self.pveum("user", "add", "ops@pve")
        tok = json.loads(self.pveum("user", "token", "add", "ops@pve", "tok", "--privsep", "0", "--output-format",
                                    "json"))
        auth = "PVEAPIToken=%s=%s" % (tok["full-tokenid"], tok["value"])
        r = self.post(vmid, "suspend", auth=auth)
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/vms/%d, VM.PowerMgmt)" % vmid))
        self.pveum("acl", "modify", "/vms/%d" % vmid, "--users", "ops@pve", "--roles", "PVEVMUser")
        self.ok(self.post(vmid, "suspend", auth=auth))  # VM.PowerMgmt is enough to pause
        self.ok(self.post(vmid, "resume", auth=auth))
        r = self.post(vmid, "suspend", auth=auth, todisk=1)  # to disk: VM.Config.Disk too
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/vms/%d, VM.Config.Disk)" % vmid))
        self.pveum("role", "add", "Hib", "--privs", "VM.Config.Disk")
        self.pveum("acl", "modify", "/vms/%d" % vmid, "--users", "ops@pve", "--roles", "Hib")
        r = self.post(vmid, "suspend", auth=auth, todisk=1)  # and Datastore.AllocateSpace on the state's storage
        self.assertEqual((r.status, r.reason), (403, "Permission check failed (/storage/local-lvm, "
                                                     "Datastore.AllocateSpace)"))
        self.assertEqual(self.current(vmid)["qmpstatus"], "running")
        self.pveum("acl", "modify", "/storage/local-lvm", "--users", "ops@pve", "--roles", "PVEDatastoreUser")
        self.ok(self.post(vmid, "suspend", auth=auth, todisk=1))
        self.assertEqual(self.current(vmid)["lock"], "suspended")


if __name__ == "__main__":
    unittest.main(verbosity=2)
