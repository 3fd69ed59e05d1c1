"""Integration test: launcher faults against the simulator and real agents: a failing clone (and HTTP 500s) then
success; a clone done by its config (no lock) without a task poll, or by its task with a resource pool; a clone
that times out, then clean-up, an Event and a back-off with no create-destroy loop; a node that
never registers; an agent that is down (Proxmox accounting instead); watch disconnects in the middle of a launch."""
# SPDX-License-Identifier: Apache-2.0
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launchlib  # noqa: E402
from launchlib import wait_for  # noqa: E402


def step(w, name):
    c = w.claim(name)
    return c.get("status", {}).get("launchStep") if c else None


class LauncherFaultTest(unittest.TestCase):
    """On one real control plane (../shared/k8s) shared by the class's tests: each test's World attaches to it."""

    @classmethod
    def setUpClass(cls):
        cls.cp = launchlib.coordlib.ControlPlane.start_for(cls)

    def world(self, **kw):
        w = launchlib.World(kube=self.cp, **kw)
        self.addCleanup(w.stop)
        return w

    def assert_clean(self, w, host="pve1"):
        """No VM, reservation, token or ISO left behind."""
        self.assertEqual(w.vms(host), {})
        self.assertEqual([r for r in w.reservations(host) if r["owner"].startswith("nodeclaim/")], [])
        self.assertEqual(w.secrets(), [])
        self.assertEqual([f for f in w.isos(host) if f.startswith("pvescale-")], [])

    def test_clone_failure_then_success(self):
        # The clone request answers 500, then the retried clone's task fails, then the launch succeeds.
        w = self.world(knobs=["clone_error_next=1", "clone_fail_next=1"])
        w.create_claim("retry")
        rc, log = w.run_driver()
        self.assertEqual(rc, 0, log)
        self.assertRegex(log, r"clone \d+ to \d+ on pve1: .*HTTP 500.*got lock request timeout")
        # Both failures are attempts at the same step (the clone): the task's failure is the second.
        self.assertRegex(log, r"clone failed \(attempt 2\): clone failed: simulated storage error")
        calls = w.sim.admin("GET", "/calls").json["pve"]
        self.assertEqual(calls["POST /nodes/{node}/qemu/{vmid}/clone"], 3)
        claim = w.claim("retry")
        self.assertEqual(claim["status"]["launchStep"], "Initialized")
        self.assertEqual(list(w.vms("pve1")), [claim["status"]["vmid"]])
        w.check_no_orphans(self)

    def test_clone_timeout_cleans_up_and_backs_off(self):
        w = self.world(knobs=["clone_seconds=3"])
        w.create_claim("slow")
        p = w.start_driver(options={"clone_timeout_ms": 1000, "backoff_base_ms": 600000}, exit_when="never")
        wait_for(lambda: w.claim("slow") is None, 60, what="the timed-out claim deleted")
        events = [e for e in w.events("CloneTimeout") if e["involvedObject"]["name"] == "slow"]
        self.assertEqual(len(events), 1, events)
        self.assertEqual(events[0]["type"], "Warning")
        self.assert_clean(w)
        # The (node pool, host) pair is paused: a new claim there waits instead of launching.
        w.create_claim("next")
        wait_for(lambda: "NodeClaim next: node pool default on pve1 is backed off" in w.driver_log(p), 15,
                 what="back-off honoured")
        self.assertIsNone(step(w, "next"))
        self.assertEqual(w.vms("pve1"), {})
        p.kill()
        p.wait()
        self.assertIn("paused for 600000 ms after 1 failed launch", w.driver_log(p))

    def test_clone_done_by_its_config_or_its_task(self):
        # qemu-server drops the clone lock before the task ends (then joins the resource pool, which can still
        # fail). A clone whose config shows no lock is done: its task is not polled. With a resourcePool the
        # launcher polls the task to its end, and the VM is in the pool.
        w = self.world(knobs=["clone_seconds=0", "clone_finish_seconds=4"])
        self.assertIsNone(w.pve("POST", "/pools", {"poolid": "k8s"}))
        w.kcreate(launchlib.API + "/proxmoxnodeclasses", launchlib.node_class("pooled", resourcePool="k8s"))
        w.kcreate(launchlib.API + "/nodepools", launchlib.node_pool("pooled", "pooled"))
        w.create_claim("free")
        w.create_claim("pooled", pool="pooled", nodeclass="pooled")
        rc, log = w.run_driver()
        self.assertEqual(rc, 0, log)
        vmids = {}
        for name in ("free", "pooled"):
            st = w.claim(name)["status"]
            self.assertEqual(st["launchStep"], "Initialized")
            vmids[name] = st["vmid"]
        # Both clones come from the same template, so their tasks (id = the template) are told apart by polls.
        polls = sorted(t["polls"] for t in w.sim.admin("GET", "/tasks").json if t["type"] == "qmclone")
        self.assertEqual(len(polls), 2, polls)
        # Polled to its end, a 4 s task takes several polls; one whose config is read first takes none (one when
        # the first read came before the simulator's clone thread ran).
        self.assertLessEqual(polls[0], 1, "the clone whose config showed no lock was polled to its end")
        self.assertGreaterEqual(polls[1], 3, "the pooled clone's task was not polled to its end")
        members = [m["vmid"] for m in w.pve("GET", "/pools/k8s")["members"]]
        self.assertEqual(members, [vmids["pooled"]])
        w.check_no_orphans(self)

    def test_registration_timeout(self):
        w = self.world(knobs=['never_join=["late"]'])
        w.create_claim("late")
        p = w.start_driver(options={"registration_timeout_ms": 1500}, exit_when="never")
        wait_for(lambda: step(w, "late") == "Launched", 30)
        vmid = w.claim("late")["status"]["vmid"]
        self.assertEqual(w.pve("GET", "/nodes/pve1/qemu/%d/status/current" % vmid)["status"], "running")
        wait_for(lambda: w.claim("late") is None, 30, what="claim deleted after the registration timeout")
        p.kill()
        p.wait()
        self.assertEqual(len([e for e in w.events("RegistrationTimeout") if e["involvedObject"]["name"] == "late"]), 1)
        self.assert_clean(w)  # a running VM: stopped first, then deleted

    def test_agent_down_uses_proxmox_accounting(self):
        w = self.world(agents={"pve2"})  # no agent on pve1
        w.create_claim("fallback", "c1.2VCPU-4GB", "pve1")
        rc, log = w.run_driver(agents={"pve1": {"url": "https://127.0.0.1:1", "token": "x", "ca_file": w.ca},
                                       "pve2": {"url": w.agents["pve2"].url, "token": w.token, "ca_file": w.ca}},
                               node_policy="simple")
        self.assertEqual(rc, 0, log)
        self.assertIn("agent on pve1 unreachable", log)
        st = w.claim("fallback")["status"]
        self.assertEqual((st["launchStep"], st["reservationMode"]), ("Initialized", "pve"))
        self.assertNotIn("reservationID", st)
        cfg = w.vm_config("pve1", st["vmid"])
        self.assertEqual((cfg["cores"], cfg["memory"], cfg["numa"]), (2, "4096", 1))
        self.assertEqual([k for k in cfg if re.fullmatch(r"numa\d", k)], [])
        self.assertNotIn("affinity", cfg)

    def test_agent_down_under_static_policy_no_fallback(self):
        w = self.world(agents={"pve2"})  # pve1's agent cannot be reached
        w.create_claim("pinned", "c1.2VCPU-4GB", "pve1")
        rc, log = w.run_driver(agents={"pve1": {"url": "https://127.0.0.1:1", "token": "x", "ca_file": w.ca}},
                               timeout_ms=3000)
        self.assertEqual(rc, 1, log)  # never initialized: the claim waits for its agent
        self.assertIn("agent on pve1 unreachable", log)
        self.assertIn("no fallback", log)
        st = w.claim("pinned").get("status") or {}
        self.assertNotEqual(st.get("reservationMode"), "pve", st)
        self.assertEqual(w.vms(), {}, "no unpinned VM")

    def test_watch_disconnects_during_launch(self):
        w = self.world(knobs=["join_delay_seconds=1", "watch_disconnect_seconds=0.3"])
        w.create_claim("w1")
        w.create_claim("w2", host="pve2")
        p = w.start_driver()
        wait_for(lambda: step(w, "w1") in ("Launched", "Registered", "Initialized"), 30)
        self.assertEqual(w.sim.admin("POST", "/actions/disconnect-watches").status, 200)
        rc, log = w.wait_driver(p)
        self.assertEqual(rc, 0, log)
        m = re.search(r"node informer: lists=(\d+) watches=(\d+) resumes=(\d+)", log)
        self.assertIsNotNone(m, log)
        self.assertGreaterEqual(int(m.group(3)), 1, "the Node watch was never cut and resumed")
        for name in ("w1", "w2"):
            self.assertEqual(step(w, name), "Initialized")
        w.check_no_orphans(self)


if __name__ == "__main__":
    unittest.main()
