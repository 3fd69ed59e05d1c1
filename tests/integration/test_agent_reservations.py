"""Integration test: reservations over HTTPS: concurrency without double booking, kill -9, corrupt state, TTL,
bind and release, strict request validation, and offers."""
# SPDX-License-Identifier: Apache-2.0
import glob
import http.client
import json
import os
import shutil
import signal
import ssl
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import agentlib  # noqa: E402

GIB = 1 << 30


def cpulist(text):
    """Parse a cpulist such as "0-2,5" into a set of ints."""
    out = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


class Client:
    def __init__(self, port, ca, token):
        self.port, self.token = port, token
        self.ctx = ssl.create_default_context(cafile=ca)

    def request(self, method, path, body=None, token=True):
        conn = http.client.HTTPSConnection("localhost", self.port, context=self.ctx, timeout=30)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = "Bearer " + self.token
        data = body if isinstance(body, (str, bytes)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, (json.loads(text) if text else None)


class ReservationTest(unittest.TestCase):
    def setUp(self):
        agentlib.static_agent_setup(self, "pvescale-resv-")
        self.agent = None
        self.start()

    def start(self):
        self.agent = agentlib.Agent(self.args)
        self.client = Client(self.agent.port, self.ca, self.token)

    def tearDown(self):
        if self.agent:
            self.agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def reserve(self, vcpus=2, mem=GIB, ttl=600, owner="claim-a"):
        return self.client.request("POST", "/v1/reservations",
                                   {"vcpus": vcpus, "memory_bytes": mem, "ttl_seconds": ttl, "owner": owner})

    def test_200_concurrent_requests_never_overlap(self):
        results, lock = [], threading.Lock()

        def worker(i):
            status, body = self.reserve(vcpus=1 + i % 2, mem=GIB, owner="claim-%d" % i)
            with lock:
                results.append((status, body))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        granted = [b for s, b in results if s == 201]
        refused = [b for s, b in results if s == 409]
        self.assertEqual(len(granted) + len(refused), 200, [s for s, _ in results if s not in (201, 409)])
        seen = set()
        for r in granted:
            cpus = cpulist(r["cpus"])
            self.assertEqual(len(cpus), r["vcpus"])
            self.assertFalse(cpus & seen, "CPU handed out twice: %s" % (cpus & seen))
            seen |= cpus
        self.assertEqual(sum(r["vcpus"] for r in granted), len(seen))
        self.assertLessEqual(len(seen), 32)
        self.assertGreaterEqual(len(seen), 31, "the host should fill up before refusing")  # 1- and 2-vCPU mix
        self.assertTrue(all(b["error"] == "insufficient capacity" for b in refused))
        status, listing = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200)
        self.assertEqual(sorted(r["id"] for r in listing["reservations"]), sorted(r["id"] for r in granted))

    def test_kill_9_keeps_reservations(self):
        ids = [self.reserve(vcpus=4, owner="claim-%d" % i)[1]["id"] for i in range(3)]
        status, before = self.client.request("GET", "/v1/reservations")
        self.agent.stop(signal.SIGKILL)
        self.start()
        status, after = self.client.request("GET", "/v1/reservations")
        self.assertEqual(status, 200)
        self.assertEqual(after["reservations"], before["reservations"])
        self.assertEqual([r["id"] for r in after["reservations"]], ids)
        # The restored reservations still hold their CPUs: the capacity excludes them.
        status, cap = self.client.request("GET", "/v1/capacity")
        held = set().union(*(cpulist(r["cpus"]) for r in after["reservations"]))
        self.assertFalse(held & cpulist(cap["free_cpus"]))

    def test_corrupt_state_is_moved_aside(self):
        # The state file is written whole at the first change and when a start replays the journal (the changes
        # since, fdatasynced in reservations.journal): the restart makes [claim-1] the previous generation, and
        # claim-3's record takes the place of claim-2's in the journal.
        first = self.reserve(owner="claim-1")[1]["id"]
        self.reserve(owner="claim-2")
        self.agent.stop()
        self.start()
        self.reserve(owner="claim-3")
        self.agent.stop()
        path = os.path.join(self.state_dir, "reservations.json")
        with open(path, "r+b") as f:
            f.seek(5)
            f.write(b"#")
        self.start()
        status, listing = self.client.request("GET", "/v1/reservations")
        self.assertEqual([r["id"] for r in listing["reservations"]], [first])  # the previous generation
        aside = glob.glob(path + ".corrupt-*")
        self.assertEqual(len(aside), 1)
        self.assertTrue(any("damaged" in line for line in self.agent.lines), "".join(self.agent.lines))

    def test_ttl_expiry(self):
        status, r = self.reserve(ttl=1)
        self.assertEqual(status, 201)
        deadline = time.time() + 6
        while time.time() < deadline:
            if self.client.request("GET", "/v1/reservations/" + r["id"])[0] == 404:
                break
            time.sleep(0.2)
        self.assertEqual(self.client.request("GET", "/v1/reservations/" + r["id"])[0], 404)

    def test_owner_retry_gets_the_same_reservation(self):
        status, first = self.reserve(vcpus=2, owner="claim-retry")
        self.assertEqual(status, 201, first)
        status, again = self.reserve(vcpus=2, owner="claim-retry")
        self.assertEqual(status, 200, again)
        self.assertEqual(again["id"], first["id"])
        self.assertEqual(again["cpus"], first["cpus"])
        status, body = self.reserve(vcpus=4, owner="claim-retry")
        self.assertEqual(status, 409, body)
        self.assertTrue(body["detail"].startswith("owner: "), body)
        status, listing = self.client.request("GET", "/v1/reservations")
        mine = [r for r in listing["reservations"] if r["owner"] == "claim-retry"]
        self.assertEqual([r["id"] for r in mine], [first["id"]])

    def counter(self, name):
        status, text = agentlib.curl("https://localhost:%d/metrics" % self.agent.port, self.ca)
        self.assertEqual(status, 200, text)
        line = [l for l in text.splitlines() if l.startswith(name + " ")]
        return int(float(line[0].split()[1]))

    def inventory_reads(self):
        return self.counter("pvescale_agent_inventory_reads_total")

    def vm_config_reads(self):
        return self.counter("pvescale_agent_vm_config_reads_total")

    def test_bind_of_a_known_vm_reads_no_config(self):
        """The bind handler runs on the loop that serialises reservations: a VM the agent already knows (inotify told
        it) is bound without reading /etc/pve again; for one it does not know, the bind reads that VM's config alone
        (not the whole inventory) and refuses the bind when there is none."""
        self.agent.stop()
        self.args += ["--rescan-interval", "3600"]  # no safety rescan in the middle of the count
        self.start()
        staged = os.path.join(self.tmp, "301.conf")  # renamed in: one inotify event, so one read of it
        with open(staged, "w") as f:
            f.write("name: k8s-b\ncores: 2\nmemory: 1024\n")
        os.rename(staged, os.path.join(self.conf_dir, "301.conf"))
        deadline = time.time() + 5
        while time.time() < deadline and self.client.request("GET", "/v1/vms/301")[0] != 200:
            time.sleep(0.05)
        # known from inotify (or the read right after the watches were set, should it have come before them)
        self.assertEqual(self.client.request("GET", "/v1/vms/301")[0], 200)
        ids = [self.reserve(owner="claim-%d" % i)[1]["id"] for i in range(3)]
        before, one_before = self.inventory_reads(), self.vm_config_reads()
        settled = time.time() + 1.0  # the config's write may still bring a second (coalesced) read: let it come
        while time.time() < settled:
            time.sleep(0.2)
            now = self.inventory_reads()
            if now != before:
                before, settled = now, time.time() + 1.0
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % ids[0], {"vmid": 301})
        self.assertEqual(status, 200, body)
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % ids[1], {"vmid": 301})
        self.assertEqual(status, 409, body)  # bound already: still refused
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % ids[2], {"vmid": 302})
        self.assertEqual(status, 409, body)  # no config: its config looked for once, then refused
        self.assertIn("VM 302 has no config", body["detail"])
        self.assertEqual(self.inventory_reads() - before, 0)
        self.assertEqual(self.vm_config_reads() - one_before, 1)

    def test_bind_of_a_vm_written_a_moment_ago(self):
        """A config written just before the bind, ahead of inotify's news (the agent reads the inventory once the
        directory has been quiet for 20 ms): the bind reads that VM's config alone, and the VM is bound and known,
        with its CPUs counted once (the reservation's), whichever came first."""
        self.agent.stop()
        self.args += ["--rescan-interval", "3600"]
        self.start()
        status, r = self.reserve(vcpus=2, owner="claim-quick")
        self.assertEqual(status, 201, r)
        free_before = self.client.request("GET", "/v1/capacity")[1]["cpus_free"]
        reads, one = self.inventory_reads(), self.vm_config_reads()
        staged = os.path.join(self.tmp, "303.conf")
        with open(staged, "w") as f:
            f.write("name: k8s-quick\ncores: 2\nmemory: 1024\n")
        os.rename(staged, os.path.join(self.conf_dir, "303.conf"))
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": 303})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["vmid"], 303)
        self.assertEqual(self.client.request("GET", "/v1/vms/303")[0], 200)
        # either path read it: the bind (one VM) or the loop (the inventory) first
        self.assertGreaterEqual(self.vm_config_reads() - one + self.inventory_reads() - reads, 1)
        deadline = time.time() + 5
        while time.time() < deadline and self.inventory_reads() == reads:
            time.sleep(0.05)  # the loop's own read comes too; it must find the same VM
        self.assertEqual(self.client.request("GET", "/v1/capacity")[1]["cpus_free"], free_before)

    def test_bind_and_release(self):
        status, r = self.reserve()
        self.assertEqual(status, 201)
        self.assertIsNotNone(r["expires_at"])
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": 300})
        self.assertEqual(status, 409, body)  # no such VM on this host yet
        with open(os.path.join(self.conf_dir, "300.conf"), "w") as f:
            f.write("name: k8s-a\ncores: 2\nmemory: 1024\n")
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % r["id"], {"vmid": 300})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["vmid"], 300)
        self.assertIsNone(body["expires_at"])
        self.assertEqual(body["state"], "bound")
        status, other = self.reserve()
        status, body = self.client.request("POST", "/v1/reservations/%s/bind" % other["id"], {"vmid": 300})
        self.assertEqual(status, 409, body)
        # The bound VM is charged once: its CPUs are the reservation's, it is not also a floating VM.
        status, cap = self.client.request("GET", "/v1/capacity")
        self.assertEqual(cap["floating_vcpus"], 0)
        self.assertFalse(cpulist(r["cpus"]) & cpulist(cap["free_cpus"]))
        status, body = self.client.request("DELETE", "/v1/reservations/" + other["id"])
        self.assertEqual(status, 200)
        self.assertEqual(self.client.request("DELETE", "/v1/reservations/" + other["id"])[0], 404)
        # Removing the VM config releases its bound reservation.
        os.unlink(os.path.join(self.conf_dir, "300.conf"))
        deadline = time.time() + 5
        while time.time() < deadline and self.client.request("GET", "/v1/reservations/" + r["id"])[0] != 404:
            time.sleep(0.1)
        self.assertEqual(self.client.request("GET", "/v1/reservations/" + r["id"])[0], 404)

    def test_bad_requests_name_the_field_and_change_nothing(self):
        cases = [
            ({"vcpus": 0, "memory_bytes": GIB, "owner": "x"}, "vcpus"),
            ({"vcpus": -2, "memory_bytes": GIB, "owner": "x"}, "vcpus"),
            ({"vcpus": "2", "memory_bytes": GIB, "owner": "x"}, "vcpus"),
            ({"vcpus": 2, "memory_bytes": 0, "owner": "x"}, "memory_bytes"),
            ({"vcpus": 2, "memory_bytes": GIB, "owner": "x", "color": "red"}, "color"),
            ({"vcpus": 2, "memory_bytes": GIB}, "owner"),
            ({"vcpus": 2, "memory_bytes": GIB, "owner": "x", "ttl_seconds": 0}, "ttl_seconds"),
            ("{not json", "body"),
            ([1, 2], "body"),
        ]
        for body, field in cases:
            status, reply = self.client.request("POST", "/v1/reservations", body)
            self.assertEqual(status, 400, (body, reply))
            self.assertIn(field, reply["detail"], (body, reply))
        status, listing = self.client.request("GET", "/v1/reservations")
        self.assertEqual(listing["reservations"], [])
        self.assertFalse(os.path.exists(os.path.join(self.state_dir, "reservations.json")))
        for bad in ("nope", "r-0123456789ABCDEF", "r-0123456789abcde", "r-0123456789abcdef0", "x-0123456789abcdef",
                    "r-0123456789abcdeg", "r-" + "a" * 200):
            for method, path, body in (("GET", bad, None), ("DELETE", bad, None), ("POST", bad + "/bind", {"vmid": 150})):
                status, reply = self.client.request(method, "/v1/reservations/" + path, body)
                self.assertEqual(status, 400, (method, path, reply))
                self.assertTrue(reply["detail"].startswith("id: "), reply)
        self.assertEqual(self.client.request("GET", "/v1/reservations/r-0123456789abcdef")[0], 404)
        status, reply = self.client.request("POST", "/v1/reservations/r-0000000000000000/bind", {"vmid": "x"})
        self.assertEqual(status, 400)
        self.assertIn("vmid", reply["detail"])
        self.assertEqual(self.client.request("POST", "/v1/reservations", {"vcpus": 1}, token=False)[0], 401)

    def test_offers(self):
        status, body = self.client.request("POST", "/v1/offers", {"shapes": [
            {"vcpus": 4, "memory_bytes": 4 * GIB}, {"vcpus": 64, "memory_bytes": GIB}]})
        self.assertEqual(status, 200, body)
        small, huge = body["offers"]
        self.assertEqual(small["count"], 8)  # 32 threads / 4
        self.assertEqual(len(cpulist(small["placement"]["cpus"])), 4)
        self.assertGreater(small["score"], 0)
        self.assertEqual(huge["count"], 0)
        self.assertIsNone(huge["placement"])
        status, body = self.client.request("POST", "/v1/offers", {"shapes": [{"vcpus": 0, "memory_bytes": 1}]})
        self.assertEqual(status, 400)
        self.assertIn("shapes[0]", body["detail"])

    def test_offer_says_fallback_and_refusal_says_why(self):
        # Two 15-vCPU reservations leave one lone thread per NUMA node: a 2-vCPU VM still fits, but only
        # in the fallback layout (one vCPU per guest node, the pair broken); one vCPU fits as preferred.
        for owner in ("claim-a", "claim-b"):
            self.assertEqual(self.reserve(vcpus=15, mem=4 * GIB, owner=owner)[0], 201)
        status, body = self.client.request("POST", "/v1/offers", {"shapes": [
            {"vcpus": 2, "memory_bytes": 4 * GIB}, {"vcpus": 1, "memory_bytes": GIB}]})
        self.assertEqual(status, 200, body)
        pair, one = body["offers"]
        self.assertEqual((pair["count"], pair["preferred_count"], pair["fallback"]), (1, 0, True), pair)
        self.assertEqual(len(pair["placement"]["numa"]), 2)
        self.assertEqual((one["count"], one["preferred_count"], one["fallback"]), (2, 2, False), one)
        self.assertGreater(one["score"], pair["score"])
        status, res = self.reserve(vcpus=2, mem=4 * GIB, owner="claim-c")
        self.assertEqual(status, 201, res)
        status, reply = self.reserve(vcpus=1, mem=GIB, owner="claim-d")
        self.assertEqual(status, 409, reply)
        self.assertTrue(reply["detail"].startswith("CPUs: "), reply)
        self.assertIn("node 0 0 CPUs", reply["detail"])



class PciNearTest(unittest.TestCase):
    """A reservation naming the VM's passed-through PCI devices lies on their NUMA node: read from the captured sysfs
    tree of a two-node host (bus/pci/devices/<address>/numa_node, through the agent's --fsroot), where a network
    card (0000:02:00.0, .3) sits on node 0, a coprocessor (0000:83:00.0) and an InfiniBand card (0000:82:00.0) on
    node 1."""
    DEVICE_ON = {0: "0000:02:00.0", 1: "0000:83:00.0"}
    ALTERNATIVES = {0: ["0000:02:00.0", "0000:02:00.3"], 1: ["0000:82:00.0", "0000:83:00.0"]}

    def setUp(self):
        agentlib.static_agent_setup(self, "pvescale-pci-", topology="32em64t-2n8c+dax+nvme+mic+dimms")
        self.agent = agentlib.Agent(self.args)
        self.client = Client(self.agent.port, self.ca, self.token)

    def tearDown(self):
        self.agent.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def reserve(self, vcpus, owner, devices=None):
        body = {"vcpus": vcpus, "memory_bytes": GIB, "owner": owner}
        if devices is not None:
            body["pci_devices"] = devices
        return self.client.request("POST", "/v1/reservations", body)

    def test_vcpus_and_memory_on_the_device_node(self):
        status, first = self.reserve(4, "claim-a")
        self.assertEqual(status, 201, first)
        fuller = first["numa"][0]["node"]
        other = 1 - fuller
        # without a device, best fit takes the fuller node again: the device must move the VM
        status, near = self.reserve(2, "claim-b", [self.DEVICE_ON[other]])
        self.assertEqual(status, 201, near)
        self.assertEqual([n["node"] for n in near["numa"]], [other], near)
        self.assertEqual(near["numa"][0]["memory_bytes"], GIB)
        node_cpus = set(range(0, 8)) if other == 0 else set(range(8, 16))
        self.assertTrue(cpulist(near["cpus"]) <= node_cpus, near)
        # a device given by the paths Proxmox picks it from (a mapping's), all on one node: that node
        status, alt = self.reserve(1, "claim-c", [self.ALTERNATIVES[other]])
        self.assertEqual(status, 201, alt)
        self.assertEqual([n["node"] for n in alt["numa"]], [other], alt)
        status, plain = self.reserve(1, "claim-d")
        self.assertEqual(status, 201, plain)
        self.assertEqual([n["node"] for n in plain["numa"]], [fuller], "the checks above could have failed")
        # the device's node too full for the VM: refused, naming the node, though the host has 8 CPUs free (5 + 3)
        status, reply = self.reserve(6, "claim-h", [self.DEVICE_ON[other]])
        self.assertEqual(status, 409, reply)
        self.assertIn("NUMA node %d (the PCI device's)" % other, reply["detail"])
        # no one node: devices on both nodes, a device whose paths lie on both, a device on none (an NVMe drive,
        # numa_node -1): placed as any VM, by best fit
        for owner, devices in (("claim-e", [self.DEVICE_ON[0], self.DEVICE_ON[1]]),
                               ("claim-f", [[self.DEVICE_ON[other], self.DEVICE_ON[fuller]]]),
                               ("claim-g", ["0000:00:02.0"])):
            status, got = self.reserve(1, owner, devices)
            self.assertEqual(status, 201, (devices, got))
        # bad device lists name the field and reserve nothing
        for devices, want in ((["0000:41:00.0"], "pci_devices[0]: no PCI device 0000:41:00.0 on this host"),
                              ([["0000:83:00.0", "0000:41:00.0"]], "no PCI device 0000:41:00.0"),
                              (["41:00.0"], "pci_devices[0]: expected a PCI address"),
                              ([[]], "pci_devices[0]: expected a PCI address or an array"),
                              ("0000:83:00.0", "pci_devices: expected an array")):
            status, reply = self.reserve(1, "claim-x", devices)
            self.assertEqual(status, 400, (devices, reply))
            self.assertIn(want, reply["detail"])
        status, listing = self.client.request("GET", "/v1/reservations")
        self.assertEqual(sorted(r["owner"] for r in listing["reservations"]),
                         ["claim-%s" % x for x in "abcdefg"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
