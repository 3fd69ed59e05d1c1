"""Integration test: LXC containers count in a real agent's capacity, offers and reservations (issue 40 item 6).

The agent reads pve-container configs from --pve-lxc-dir and the running state from --lxc-cgroup-dir (a directory
laid out like /sys/fs/cgroup/lxc: <vmid>/cgroup.events says "populated 1" while the container runs). Host:
32intel64-2p8co2t+8ve (32 threads; node 0 = 0-7,16-23). Containers: 301 running with cores: 4 (floating),
302 running and pinned by lxc.cgroup2.cpuset.cpus: 0-3, 303 stopped with cores: 8."""
# SPDX-License-Identifier: Apache-2.0
import json
import os
import shutil
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
CONTAINERS = {
    301: "arch: amd64\nhostname: web\ncores: 4\nmemory: 2048\nrootfs: local-lvm:vm-301-disk-0,size=8G\n",
    302: "arch: amd64\nhostname: db\ncores: 4\nmemory: 1024\nlxc.cgroup2.cpuset.cpus: 0-3\n",
    303: "arch: amd64\nhostname: batch\ncores: 8\nmemory: 4096\n",
}


def cpulist(text):
    out = set()
    for part in filter(None, (text or "").split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


class ContainerAgent:
    """One agent (own directories) on the containers above; extra flags pick the policy and stopped rule."""

    def __init__(self, case, prefix, extra):
        agentlib.static_agent_setup(case, prefix)
        case.lxc_dir = os.path.join(case.tmp, "lxc")
        case.cgroup_dir = os.path.join(case.tmp, "cgroup-lxc")
        os.makedirs(case.lxc_dir)
        os.makedirs(case.cgroup_dir)
        for vmid, text in CONTAINERS.items():
            write(os.path.join(case.lxc_dir, "%d.conf" % vmid), text)
        for vmid in (301, 302):
            start_container(case.cgroup_dir, vmid)
        # rescan once an hour: a change seen within seconds came through inotify
        try:
            case.agent = agentlib.Agent(case.args + ["--pve-lxc-dir", case.lxc_dir, "--lxc-cgroup-dir",
                                                     case.cgroup_dir, "--rescan-interval", "3600"] + extra)
        except Exception:
            shutil.rmtree(case.tmp, ignore_errors=True)  # tearDownClass does not run when setUpClass fails
            raise
        case.base = "https://localhost:%d" % case.agent.port


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)  # as pmxcfs shows a finished file


def start_container(cgroup_dir, vmid, effective=None):
    d = os.path.join(cgroup_dir, str(vmid))
    os.makedirs(d, exist_ok=True)
    if effective:
        write(os.path.join(d, "cpuset.cpus.effective"), effective + "\n")
    write(os.path.join(d, "cgroup.events"), "populated 1\nfrozen 0\n")


class Base(unittest.TestCase):
    def request(self, method, path, body=None):
        status, text = agentlib.curl(self.base + path, ca=self.ca, token=self.token, method=method,
                                     body=json.dumps(body) if body is not None else None)
        return status, (json.loads(text) if text.strip().startswith(("{", "[")) else text)

    def get(self, path):
        status, doc = self.request("GET", path)
        self.assertEqual(status, 200, doc)
        return doc

    def wait_capacity(self, done, what):
        deadline, cap = time.time() + 5, None
        while time.time() < deadline:
            cap = self.get("/v1/capacity")
            if done(cap):
                return cap
            time.sleep(0.05)
        self.fail("%s not seen within 5 s: %r" % (what, cap))


class StaticPolicyTest(Base):
    """static, count_stopped_vms false: 302 takes CPUs 0-3 out of pinning, 301 floats 4 CPUs, 303 is not counted."""

    @classmethod
    def setUpClass(cls):
        ContainerAgent(cls, "pvescale-ct-static-", ["--count-stopped-vms=false"])

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_1_capacity(self):
        cap = self.get("/v1/capacity")
        self.assertEqual(cap["pinned_cpus"], "0-3")
        self.assertEqual(cpulist(cap["free_cpus"]), set(range(4, 32)))
        self.assertEqual(cap["floating_vcpus"], 4)
        self.assertEqual(cap["cpus_free"], 28 - 4)
        self.assertEqual(cap["memory_used_bytes"], (2048 + 1024) * MIB)
        self.assertEqual(cap["containers"], {"count": 2, "pinned_cpus": "0-3", "floating_cpus": 4,
                                             "memory_bytes": 3072 * MIB})
        self.assertNotIn(0, cpulist(cap["numa_nodes"][0]["free_cpus"]))

    def test_2_containers_listing(self):
        doc = self.get("/v1/containers")
        self.assertEqual(doc["node"], "pve1")
        rows = {c["vmid"]: c for c in doc["containers"]}
        self.assertEqual(sorted(rows), [301, 302, 303])
        self.assertEqual((rows[301]["running"], rows[301]["cores"], rows[301]["cpuset"], rows[301]["counted"]),
                         (True, 4, None, True))
        self.assertEqual((rows[302]["running"], rows[302]["cpuset"], rows[302]["pinned"]), (True, "0-3", True))
        self.assertEqual((rows[303]["running"], rows[303]["counted"]), (False, False))
        self.assertEqual(rows[301]["memory_bytes"], 2048 * MIB)
        status, body = self.request("GET", "/v1/vms/301")  # a container is not a VM, and the answer says so
        self.assertEqual((status, body["detail"]), (404, "301 is an LXC container: see /v1/containers"))

    def test_3_offers_and_reservations_avoid_the_container(self):
        status, body = self.request("POST", "/v1/offers", {"shapes": [{"vcpus": 4, "memory_bytes": 4 * GIB}]})
        self.assertEqual(status, 200, body)
        offer = body["offers"][0]
        # 28 CPUs outside the pinned container, 4 of them kept for the floating one: 6 VMs of 4 (8 without them)
        self.assertEqual(offer["count"], 6)
        self.assertFalse(cpulist(offer["placement"]["cpus"]) & {0, 1, 2, 3})
        status, body = self.request("POST", "/v1/reservations",
                                    {"vcpus": 2, "memory_bytes": GIB, "ttl_seconds": 60, "owner": "ct-test"})
        self.assertEqual(status, 201, body)
        self.assertFalse(cpulist(body["cpus"]) & {0, 1, 2, 3}, body["cpus"])
        self.assertEqual(self.request("DELETE", "/v1/reservations/" + body["id"])[0], 200)

    def test_4_inotify_sees_container_changes(self):
        start_container(self.cgroup_dir, 304, effective="4-7")
        write(os.path.join(self.lxc_dir, "304.conf"), "cores: 4\nmemory: 512\nlxc.cgroup2.cpuset.cpus: 4-7\n")
        self.wait_capacity(lambda c: c["pinned_cpus"] == "0-7", "container 304 pinned to 4-7")
        os.unlink(os.path.join(self.lxc_dir, "302.conf"))
        cap = self.wait_capacity(lambda c: c["pinned_cpus"] == "4-7", "container 302 removed")
        self.assertEqual(cap["containers"]["count"], 2)

    def test_5_bad_config_logged_once_and_skipped(self):
        write(os.path.join(self.lxc_dir, "305.conf"), "cores: many\nmemory: 1024\nthis is not a key\n")
        os.makedirs(os.path.join(self.lxc_dir, "306.conf"))  # cannot be read as a file
        deadline, rows = time.time() + 5, {}
        while time.time() < deadline and not {305, 306} <= set(rows):
            rows = {c["vmid"]: c for c in self.get("/v1/containers")["containers"]}
            time.sleep(0.05)
        self.assertEqual(len(rows[305]["errors"]), 2, rows[305])
        self.assertFalse(rows[306]["counted"])
        # another change: the agent reads every config again, and does not log 305 again
        write(os.path.join(self.lxc_dir, "307.conf"), "cores: 1\nmemory: 256\n")
        self.wait_capacity(lambda c: c["containers"]["memory_bytes"] >= 256 * MIB, "container 307")
        time.sleep(0.3)
        self.assertEqual(self.get("/healthz")["status"], "ok")
        self.agent.stop()
        logged = [line for line in self.agent.lines if "container 305" in line]
        self.assertEqual(len(logged), 1, "".join(self.agent.lines[-30:]))
        self.assertEqual(len([line for line in self.agent.lines if "container 306" in line]), 1)


class SimplePolicyTest(Base):
    """simple, stopped containers counted (the default, as for VMs): 4 + 8 floating, 0-3 pinned."""

    @classmethod
    def setUpClass(cls):
        ContainerAgent(cls, "pvescale-ct-simple-", ["--node-policy", "simple"])

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_count_based_reservations(self):
        cap = self.get("/v1/capacity")
        self.assertEqual(cap["cpus_free"], 32 - 4 - 4 - 8)
        self.assertEqual(cap["containers"]["count"], 3)
        self.assertEqual(cap["memory_used_bytes"], (2048 + 1024 + 4096) * MIB)
        status, body = self.request("POST", "/v1/reservations",
                                    {"vcpus": 17, "memory_bytes": GIB, "ttl_seconds": 60, "owner": "too-big"})
        self.assertEqual(status, 409, body)
        status, body = self.request("POST", "/v1/reservations",
                                    {"vcpus": 16, "memory_bytes": GIB, "ttl_seconds": 60, "owner": "fits"})
        self.assertEqual(status, 201, body)


class UnreadableDirectoryTest(Base):
    """The container directory cannot be listed (here: a file stands in its place): the containers last read stay
    counted, the VMs are still read, and the error is logged once."""

    @classmethod
    def setUpClass(cls):
        ContainerAgent(cls, "pvescale-ct-unreadable-", ["--node-policy", "simple", "--count-stopped-vms=false"])

    @classmethod
    def tearDownClass(cls):
        cls.agent.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def wait_vm(self, vmid):
        deadline = time.time() + 5
        while time.time() < deadline:
            if vmid in [vm["vmid"] for vm in self.get("/v1/vms")["vms"]]:
                return
            time.sleep(0.05)
        self.fail("VM %d not seen" % vmid)

    def test_containers_kept_and_vms_still_read(self):
        before = self.get("/v1/capacity")
        self.assertEqual((before["pinned_cpus"], before["containers"]["count"]), ("0-3", 2))
        os.rename(self.lxc_dir, self.lxc_dir + ".away")
        write(self.lxc_dir, "not a directory\n")
        for vmid in (101, 102):  # two reads of everything
            write(os.path.join(self.conf_dir, "%d.conf" % vmid), "cores: 1\nmemory: 256\n")
            self.wait_vm(vmid)
        cap = self.get("/v1/capacity")
        self.assertEqual((cap["pinned_cpus"], cap["containers"]), ("0-3", before["containers"]))
        self.assertEqual(cap["cpus_free"], before["cpus_free"])  # nothing released (the VMs are stopped)
        self.assertEqual(sorted(c["vmid"] for c in self.get("/v1/containers")["containers"]), [301, 302, 303])
        os.unlink(self.lxc_dir)
        os.rename(self.lxc_dir + ".away", self.lxc_dir)
        os.unlink(os.path.join(self.lxc_dir, "302.conf"))
        write(os.path.join(self.conf_dir, "103.conf"), "cores: 1\nmemory: 256\n")
        self.wait_vm(103)
        self.wait_capacity(lambda c: c["pinned_cpus"] == "", "the directory read again (302 gone)")
        self.agent.stop()
        failed = [line for line in self.agent.lines if "cannot read the container configs" in line]
        self.assertEqual(len(failed), 1, "".join(self.agent.lines[-20:]))
        self.assertEqual(len([line for line in self.agent.lines if "readable again" in line]), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
