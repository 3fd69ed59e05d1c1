#!/usr/bin/env python3
# The agent and the coordinator under valgrind (memcheck: --leak-check=full, definite and indirect leaks are errors,
# like every invalid access or use of an uninitialised value) through a scale-up: pending pods become NodeClaims,
# offers and reservations on two real agents, VMs the agents pin, Nodes, Running pods; then a claim deleted (drain, VM
# deleted, reservation released) and SIGTERM, on a real Kubernetes control plane (../shared/k8s). Every process
# must exit 0 with "ERROR SUMMARY: 0 errors". Plain build only (valgrind and ASan do not mix).
# SPDX-License-Identifier: Apache-2.0
import glob
import os
import re
import stat
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
VALGRIND = ["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
            "--show-leak-kinds=definite,indirect", "--error-exitcode=1", "--num-callers=30",
            # the coordinator's allocator (tcmalloc in the plain build) is replaced like the libc one
            "--soname-synonyms=somalloc=*tcmalloc*",
            # what is not pvescale's (tcmalloc's start-up registration)
            "--suppressions=" + os.path.join(os.path.dirname(os.path.abspath(__file__)), "valgrind.supp")]


def wrapper(tmp, name, exe):
    """A script that runs exe under valgrind, its report in tmp/valgrind-<name>-<pid>.log."""
    path = os.path.join(tmp, "vg-" + name)
    log = os.path.join(tmp, "valgrind-%s-%%p.log" % name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec %s --log-file=%s %s \"$@\"\n" % (" ".join(VALGRIND), log, exe))
    os.chmod(path, stat.S_IRWXU)
    return path


class LeakTest(cl.CoordinatorTest):
    def setUp(self):
        if not os.access("/usr/bin/valgrind", os.X_OK):
            raise unittest.SkipTest("valgrind is not installed")
        self.tmp = cl.tempfile.mkdtemp(prefix="pvescale-leaks-")
        self.real = cl.AGENT, cl.COORDINATOR
        cl.AGENT = wrapper(self.tmp, "agent", self.real[0])
        cl.COORDINATOR = wrapper(self.tmp, "coordinator", self.real[1])
        self.c = cl.Cluster("pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga", kube="real")
        self.co = None

    def tearDown(self):
        cl.AGENT, cl.COORDINATOR = self.real
        try:
            # SIGTERM, with time for valgrind's leak search: the coordinator, then the agents.
            if self.co:
                self.co.stop(timeout=90)
            for p in self.c.procs:
                p.terminate()
            for p in self.c.procs:
                p.wait(90)
            failure = None
            try:
                super().tearDown()  # the coordinator's exit code must be 0
            except AssertionError as e:
                failure = e
            for p in self.c.procs:
                self.assertEqual(p.returncode, 0, "an agent's exit code under valgrind")
            reports = sorted(glob.glob(os.path.join(self.tmp, "valgrind-*.log")))
            self.assertEqual(len(reports), 3 if self.co else 2, reports)  # two agents and the coordinator
            for path in reports:
                with open(path) as f:
                    text = f.read()
                m = re.search(r"ERROR SUMMARY: (\d+) errors", text)
                self.assertTrue(m and m.group(1) == "0", "%s:\n%s" % (path, text[-8000:]))
            if failure:
                raise failure
        finally:
            cl.shutil.rmtree(self.tmp, ignore_errors=True)

    def test_scale_up_leaks_nothing(self):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        names = ["anti-0", "anti-1", "web-0"]
        for n in names[:2]:
            c.create(PODS, cl.pod(n, cpu="1", memory="1Gi", labels={"app": "anti"}, affinity=anti,
                                  terminationGracePeriodSeconds=0))
        c.create(PODS, cl.pod("web-0", cpu="500m", memory="512Mi", terminationGracePeriodSeconds=0))
        self.co = cl.Coordinator(c)

        def running():
            pods = {p["metadata"]["name"]: p for p in c.items(PODS)}
            return all((pods[n].get("status") or {}).get("phase") == "Running" for n in names)
        cl.wait_for(running, 120, interval=0.5, what="every pod Running")
        claims = c.claims()
        self.assertGreaterEqual(len(claims), 2)
        # The agents pinned the VMs they reserved for (the simulator runs a stand-in QEMU per VM).
        # The agents pin the VMs they reserved for (the simulator runs a stand-in QEMU per VM; this machine may
        # lack the simulated host's CPUs, so a pinning may fail: its path ran all the same).
        hosts = {x["status"]["host"] for x in claims}
        cl.wait_for(lambda: all(re.search(r"pinn(ed|ing) VM", c.agent_log(h)) for h in hosts), 30,
                    what="the agents pinning the VMs")
        # Scale one node down: the claim's deletion drains it, deletes its VM and releases its reservation.
        gone = claims[0]
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + gone["metadata"]["name"]).status, 200)
        cl.wait_for(lambda: not any(x["metadata"]["name"] == gone["metadata"]["name"] for x in c.claims()), 60,
                    interval=0.5, what="the deleted claim gone")
        self.assertEqual(len(c.vms()), len(claims) - 1)
        # The agent drops a bound reservation when its VM's config goes (or on the coordinator's DELETE).
        cl.wait_for(lambda: re.search(r"released (%s|\d+ reservation)" % gone["status"]["reservationID"],
                                      c.agent_log(gone["status"]["host"])),
                    20, interval=0.5, what="the deleted claim's reservation released")


if __name__ == "__main__":
    unittest.main(verbosity=2)
