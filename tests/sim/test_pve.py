#!/usr/bin/env python3
# Tests of the simulated Proxmox VE API: UPIDs, validation errors, auth, config, power, storage, firewall, pools.
# SPDX-License-Identifier: Apache-2.0
import concurrent.futures
import os
import re
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simtest  # noqa: E402
from simtest import read  # noqa: E402

UPID_RE = re.compile(r"^UPID:[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:"
                     r"[^:\s/]+:[^:\s/]*:[^:\s/]+:$")


class PveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim = simtest.Sim(hosts="pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga,r2/pve3=64amd64-4s2n4ca2co",
                              knobs=["clone_seconds=0.4"], kube="none")
        cls.next = 200

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def newid(self):
        PveTest.next += 1
        return PveTest.next

    def clone(self, name, node="pve1"):
        vmid = self.newid()
        self.sim.clone(vmid, name, node)
        return vmid

    # ---- UPID lifecycle ---------------------------------------------------------
    def test_clone_upid_lifecycle(self):
        vmid = self.newid()
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": vmid, "name": "upid-test"})
        self.assertEqual(r.status, 200, r)
        upid = r.data
        self.assertRegex(upid, UPID_RE)
        parts = upid.split(":")
        self.assertEqual(parts[1], "pve1")
        self.assertEqual(parts[5], "qmclone")
        self.assertEqual(parts[6], "9000")  # the source VMID
        self.assertEqual(parts[7], "pvescale@pve!coordinator")
        path = "/nodes/pve1/tasks/%s/status" % urllib.parse.quote(upid, safe="")
        st = self.sim.pve("GET", path).data
        self.assertEqual(st["status"], "running")
        self.assertNotIn("exitstatus", st)
        self.assertEqual(st["user"], "pvescale@pve")
        self.assertEqual(st["tokenid"], "coordinator")
        # the new id is taken while the clone runs
        r2 = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": vmid})
        self.assertEqual(r2.status, 500)
        self.assertIn("unable to create VM %d: config file already exists" % vmid, r2.json["message"])
        done = self.sim.wait_task(upid)
        self.assertEqual(done["status"], "stopped")
        self.assertEqual(done["exitstatus"], "OK")
        log = self.sim.pve("GET", "/nodes/pve1/tasks/%s/log" % urllib.parse.quote(upid, safe="")).data
        self.assertEqual(log[-1]["t"], "TASK OK")
        conf = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data
        self.assertEqual(conf["name"], "upid-test")
        self.assertNotIn("template", conf)

    def test_unknown_upid_is_400(self):
        r = self.sim.pve("GET", "/nodes/pve1/tasks/UPID:pve1:00000001:00000001:00000001:qmstart:1:x@pve:/status")
        self.assertEqual(r.status, 400)
        self.assertIn("upid", r.json["errors"])
        r = self.sim.pve("GET", "/nodes/pve1/tasks/garbage/status")
        self.assertEqual(r.status, 400)
        self.assertIn("upid", r.json["errors"])

    def test_clone_failure_fault(self):
        self.sim.knobs(clone_fail_next=1)
        vmid = self.newid()
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": vmid, "name": "fails"})
        st = self.sim.wait_task(r.data)
        self.assertNotEqual(st["exitstatus"], "OK")
        self.assertIn("clone failed", st["exitstatus"])
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).status, 500)
        self.assertFalse(os.path.exists(os.path.join(self.sim.ep["hosts"]["pve1"]["pve_config_dir"], "%d.conf" % vmid)))

    def test_clone_to_other_node_refused(self):
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": self.newid(), "target": "pve2"})
        self.assertEqual(r.status, 500)
        self.assertIn("local storage", r.json["message"])

    # ---- validation -------------------------------------------------------------------
    def test_schema_rejections_name_the_field(self):
        vmid = self.clone("valid")
        cases = [
            ({"cores": "two"}, "cores", "type check ('integer') failed - got 'two'"),
            ({"bogus": "1"}, "bogus", "property is not defined in schema"),
            ({"numa0": "cpus=a-b,memory=1024"}, "numa0", "numa0.cpus: value does not match the regex pattern"),
            ({"numa0": "memory=1024"}, "numa0", "numa0.cpus: property is missing and it is not optional"),
            ({"numa0": "cpus=0,policy=strict"}, "numa0", "numa0.policy: value 'strict' does not have a value in the enumeration"),
            ({"numa9": "cpus=0"}, "numa9", "property is not defined in schema"),
            ({"net0": "rtl9999=AA:BB:CC:DD:EE:FF,bridge=vmbr0"}, "net0", "invalid key in comma-separated list property"),
            ({"net0": "model=nope,bridge=vmbr0"}, "net0", "net0.model: value 'nope' does not have a value in the enumeration"),
            ({"ide2": "not a volume,media=cdrom"}, "ide2", "unable to parse volume ID"),
            ({"scsi0": "local-lvm:vm-1-disk-0,cache=fast"}, "scsi0", "scsi0.cache: value 'fast'"),
            ({"memory": "8"}, "memory", "memory.current: value must have a minimum value of 16"),
            ({"memory": "lots"}, "memory", "memory.current: type check ('integer') failed"),
            ({"sockets": "0"}, "sockets", "value must have a minimum value of 1"),
            ({"name": "bad_name!"}, "name", "invalid format"),
            ({"tags": "a;b c;!x"}, "tags", "invalid format"),
            ({"sshkeys": "ssh-rsa AAA"}, "sshkeys", "invalid format"),
        ]
        for params, field, text in cases:
            with self.subTest(params=params):
                r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, params)
                self.assertEqual(r.status, 400, r)
                self.assertEqual(r.reason, "Parameter verification failed.")
                self.assertIsNone(r.json["data"])
                self.assertEqual(list(r.json["errors"]), [field], r.json)
                self.assertIn(text, r.json["errors"][field])
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {})
        self.assertEqual(r.status, 400)
        self.assertEqual(r.json["errors"]["newid"], "property is missing and it is not optional")
        r = self.sim.pve("GET", "/cluster/resources", {"type": "vms"})
        self.assertIn("type", r.json["errors"])

    def test_affinity_refused_for_tokens(self):
        vmid = self.clone("aff")
        for method in ("PUT", "POST"):
            r = self.sim.pve(method, "/nodes/pve1/qemu/%d/config" % vmid, {"affinity": "0-3"})
            self.assertEqual(r.status, 500)
            self.assertEqual(r.reason, "only root can set 'affinity' config")
            self.assertIn("only root can set 'affinity' config", r.json["message"])
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"affinity": "0-x"})
        self.assertEqual(r.status, 400)
        self.assertIn("affinity", r.json["errors"])
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"cores": 2, "skiplock": 1})
        self.assertEqual(r.status, 400)
        self.assertIn("skiplock", r.json["errors"])
        conf = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data
        self.assertNotIn("affinity", conf)

    def test_auth_errors(self):
        t = time.time()
        r = self.sim.pve("GET", "/version", auth="PVEAPIToken=pvescale@pve!coordinator=wrong")
        self.assertEqual(r.status, 401)
        self.assertEqual(r.raw, b"")
        self.assertGreaterEqual(time.time() - t, 0.18)
        r = self.sim.pve("GET", "/version", auth="")
        self.assertEqual(r.status, 401)
        e = self.sim.ep["pve"]["r1"]
        ro = "PVEAPIToken=%s=%s" % (e["readonly_token_id"], e["readonly_token_secret"])
        self.assertEqual(self.sim.pve("GET", "/nodes", auth=ro).status, 200)
        r = self.sim.pve("POST", "/nodes/pve1/qemu/9000/clone", {"newid": self.newid()}, auth=ro)
        self.assertEqual(r.status, 403)
        self.assertTrue(r.reason.startswith("Permission check failed"))
        # tokens of another region are not valid here
        r2 = self.sim.pve("GET", "/version", auth=self.sim.pve_auth("r2"))
        self.assertEqual(r2.status, 401)

    def test_501_unknown_path_and_body_on_get(self):
        r = self.sim.pve("GET", "/nodes/pve1/frobnicate")
        self.assertEqual(r.status, 501)
        self.assertEqual(r.reason, "Method 'GET /nodes/pve1/frobnicate' not implemented")
        r = self.sim.pve("DELETE", "/nodes/pve1/qemu/9000", raw_body=b"x=1", ctype="application/x-www-form-urlencoded")
        self.assertEqual(r.status, 501)
        self.assertIn(b"Unexpected content for method 'DELETE'", r.raw)

    # ---- cluster -----------------------------------------------------------------------
    def test_nextid_string_and_atomic(self):
        r = self.sim.pve("GET", "/cluster/nextid")
        self.assertIsInstance(r.data, str)
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            ids = list(ex.map(lambda _: self.sim.pve("GET", "/cluster/nextid").data, range(16)))
        self.assertEqual(len(set(ids)), 16, ids)
        r = self.sim.pve("GET", "/cluster/nextid", {"vmid": 9000})
        self.assertEqual(r.status, 400)
        self.assertIn("vmid", r.json["errors"])
        self.assertEqual(self.sim.pve("GET", "/cluster/nextid", {"vmid": 777}).data, "777")

    def test_cluster_status_nodes_and_node_status(self):
        st = self.sim.pve("GET", "/cluster/status").data
        nodes = {x["name"]: x for x in st if x["type"] == "node"}
        self.assertEqual(set(nodes), {"pve1", "pve2"})
        self.assertEqual(nodes["pve1"]["ip"], "127.0.0.1")
        self.assertEqual({n["node"] for n in self.sim.pve("GET", "/nodes").data}, {"pve1", "pve2"})
        ns = self.sim.pve("GET", "/nodes/pve1/status").data
        self.assertEqual(ns["cpuinfo"]["cpus"], 32)
        self.assertEqual(ns["cpuinfo"]["cores"], 16)  # total over sockets
        self.assertEqual(ns["cpuinfo"]["sockets"], 2)
        self.assertIn("Xeon", ns["cpuinfo"]["model"])
        self.assertEqual(ns["memory"]["total"], 99784286208)
        ns2 = self.sim.pve("GET", "/nodes/pve2/status").data
        self.assertEqual((ns2["cpuinfo"]["cpus"], ns2["cpuinfo"]["sockets"]), (128, 1))
        ns3 = self.sim.pve("GET", "/nodes/pve3/status", region="r2").data
        self.assertEqual((ns3["cpuinfo"]["cpus"], ns3["cpuinfo"]["sockets"]), (64, 4))

    def test_resources_thin_then_full(self):
        vmid = self.clone("thin")
        res = {x["id"]: x for x in self.sim.pve("GET", "/cluster/resources", {"type": "vm"}).data}
        self.assertEqual(res["qemu/%d" % vmid]["status"], "unknown")
        self.assertNotIn("name", res["qemu/%d" % vmid])
        time.sleep(0.35)
        res = {x["id"]: x for x in self.sim.pve("GET", "/cluster/resources", {"type": "vm"}).data}
        self.assertEqual(res["qemu/%d" % vmid]["name"], "thin")
        self.assertEqual(res["qemu/9000"]["template"], 1)
        self.assertEqual(res["qemu/%d" % vmid]["maxmem"], 2048 * 2**20)

    # ---- config / power ---------------------------------------------------------------
    def test_config_post_async_put_sync_and_readback_types(self):
        vmid = self.clone("cfg")
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/config" % vmid, {"cores": 4, "memory": "8192",
                                                                       "tags": "pvescale;Pool-a;pvescale"})
        self.assertRegex(r.data, UPID_RE)
        self.assertEqual(r.data.split(":")[5], "qmconfig")
        self.assertEqual(self.sim.wait_task(r.data)["exitstatus"], "OK")
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"numa": 1, "numa0": "cpus=0-3,hostnodes=0,memory=8192,policy=bind"})
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.data)
        conf = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data
        self.assertEqual(conf["cores"], 4)
        self.assertEqual(conf["numa"], 1)
        self.assertEqual(conf["memory"], "8192")
        self.assertEqual(conf["tags"], "pool-a;pvescale")
        self.assertEqual(conf["numa0"], "cpus=0-3,hostnodes=0,memory=8192,policy=bind")
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"cores": 8, "digest": "0" * 40})
        self.assertEqual(r.status, 500)
        # JSON body and query parameters (query wins)
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config?cores=3" % vmid, json_body={"cores": 6, "onboot": True})
        self.assertEqual(r.status, 200, r)
        conf = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data
        self.assertEqual((conf["cores"], conf["onboot"]), (3, 1))

    def test_efidisk_and_tpmstate_allocated_as_qemu_server_does(self):
        vmid = self.clone("hw")
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {
            "machine": "q35", "bios": "ovmf", "efidisk0": "local-lvm:1,efitype=4m,pre-enrolled-keys=1",
            "tpmstate0": "local-lvm:1,version=v2.0", "agent": "enabled=1,type=virtio", "onboot": 1})
        self.assertEqual(r.status, 200, r)
        conf = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data
        # each new volume gets the next free name; the EFI vars and TPM state have their own sizes, not the 1G asked
        self.assertEqual(conf["efidisk0"], "local-lvm:vm-%d-disk-1,efitype=4m,pre-enrolled-keys=1,size=528K" % vmid)
        self.assertEqual(conf["tpmstate0"], "local-lvm:vm-%d-disk-2,version=v2.0,size=4M" % vmid)
        self.assertEqual((conf["machine"], conf["bios"], conf["onboot"]), ("q35", "ovmf", 1))
        for key, value, field in (("machine", "q36", "machine"), ("bios", "uefi", "bios"),
                                  ("tpmstate0", "local-lvm:1,version=v3", "tpmstate0"),
                                  ("efidisk0", "local-lvm:1,efitype=8m", "efidisk0"),
                                  ("agent", "enabled=1,type=usb", "agent")):
            r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {key: value})
            self.assertEqual(r.status, 400, (key, r))
            self.assertIn(field, r.json["errors"])
        r = self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"tpmstate0": "nosuch:1,version=v2.0"})
        self.assertEqual(r.status, 500, r)
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).data["tpmstate0"], conf["tpmstate0"])

    def test_pci_mapping_and_hostpci_start(self):
        r = self.sim.pve("POST", "/cluster/mapping/pci", json_body={
            "id": "gpu", "map": ["node=pve1,path=0000:41:00.0,id=10de:2204,iommugroup=14"]})
        self.assertEqual(r.status, 200, r)
        r = self.sim.pve("POST", "/cluster/mapping/pci", json_body={"id": "bad", "map": ["node=pve1,path=x,id=1"]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("map", r.json["errors"])
        self.assertEqual([m["id"] for m in self.sim.pve("GET", "/cluster/mapping/pci").data], ["gpu"])
        self.assertEqual(self.sim.pve("GET", "/cluster/mapping/pci/gpu").data["map"],
                         ["node=pve1,path=0000:41:00.0,id=10de:2204,iommugroup=14"])
        r = self.sim.pve("POST", "/cluster/mapping/pci",
                         json_body={"id": "gpu", "map": ["node=pve2,path=0000:01:00.0,id=10de:2204"]})
        self.assertEqual((r.status, r.json["message"]),
                         (500, "create hardware mapping failed: pci ID 'gpu' already defined\n"))
        self.assertEqual(self.sim.pve("GET", "/cluster/mapping/pci/nosuch").json["message"],
                         "mapping 'nosuch' not found\n")
        # PUT with the digest read: the mapping gets a second node; a stale digest or an unknown id is refused
        digest = self.sim.pve("GET", "/cluster/mapping/pci/gpu").data["digest"]
        two = ["node=pve1,path=0000:41:00.0,id=10de:2204,iommugroup=14", "node=pve2,path=0000:01:00.0,id=10de:2204"]
        r = self.sim.pve("PUT", "/cluster/mapping/pci/gpu",
                         json_body={"map": two, "digest": digest, "description": "A"})
        self.assertEqual(r.status, 200, r)
        got = self.sim.pve("GET", "/cluster/mapping/pci").data[0]
        self.assertEqual((got["map"], got["description"]), (two, "A"))
        self.assertNotEqual(got["digest"], digest)
        r = self.sim.pve("PUT", "/cluster/mapping/pci/gpu", json_body={"description": "B", "digest": digest})
        self.assertIn("detected modified configuration", r.json["message"])
        r = self.sim.pve("PUT", "/cluster/mapping/pci/nosuch", json_body={"description": "B"})
        self.assertIn("pci ID 'nosuch' does not exist", r.json["message"])
        r = self.sim.pve("PUT", "/cluster/mapping/pci/gpu", json_body={"map": ["node=pve1,path=x,id=1"]})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.sim.pve("GET", "/cluster/mapping/pci/gpu").data["map"], two,
                         "a refused PUT changes nothing")
        self.assertEqual(self.sim.pve("DELETE", "/cluster/mapping/pci/other").status, 200, "deleting none: no error")
        self.assertEqual(self.sim.pve("POST", "/cluster/mapping/pci", json_body={
            "id": "gone", "map": ["node=pve1,path=0000:42:00.0,id=10de:2204"]}).status, 200)
        self.assertEqual(self.sim.pve("DELETE", "/cluster/mapping/pci/gone").status, 200)
        self.assertEqual([m["id"] for m in self.sim.pve("GET", "/cluster/mapping/pci").data], ["gpu"])
        a, b = self.clone("gpu-a"), self.clone("gpu-b")

        def start(vmid):
            st = self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid).data)
            return st["exitstatus"]
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % a, {"hostpci0": "mapping=gpu,pcie=1"})
        self.assertEqual(start(a), "q35 machine model is not enabled")
        self.assertEqual(self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % a, {"machine": "q35"}).status, 200)
        self.assertEqual(start(a), "OK")
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % b, {"hostpci0": "mapping=gpu", "machine": "q35"})
        self.assertEqual(start(b), "PCI device '0000:41:00.0' already in use by VMID '%d'" % a)
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % b, {"hostpci0": "mapping=nosuch"})
        self.assertEqual(start(b), "PCI device mapping not found for 'nosuch'")
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/stop" % a).data)
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % b, {"hostpci0": "mapping=gpu"})
        self.assertEqual(start(b), "OK", "the device is free once its VM stopped")
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/stop" % b).data)

    def test_numa_sum_fails_start(self):
        vmid = self.clone("numa")
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {
            "cores": 4, "memory": "4096", "numa": 1,
            "numa0": "cpus=0-1,hostnodes=0,memory=4096,policy=bind",
            "numa1": "cpus=2-3,hostnodes=1,memory=4096,policy=bind"})
        st = self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid).data)
        self.assertEqual(st["exitstatus"], "total memory for NUMA nodes must be equal to vm static memory")
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/status/current" % vmid).data["status"], "stopped")
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"numa1": "cpus=2-3,hostnodes=1,memory=0,policy=bind",
                                                                  "numa0": "cpus=0-1,hostnodes=0,memory=4096,policy=bind"})
        st = self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid).data)
        self.assertEqual(st["exitstatus"], "OK")
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/stop" % vmid).data)

    def test_start_missing_vm_gives_upid_then_fails(self):
        r = self.sim.pve("POST", "/nodes/pve1/qemu/123456/status/start")
        self.assertEqual(r.status, 200)
        st = self.sim.wait_task(r.data)
        self.assertIn("does not exist", st["exitstatus"])

    def test_vm_process_files_and_delete(self):
        vmid = self.clone("proc")
        host = self.sim.ep["hosts"]["pve1"]
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"cores": 3, "description": "line one\nkey: val"})
        text = read(os.path.join(host["pve_config_dir"], "%d.conf" % vmid))
        self.assertTrue(text.startswith("#line one\n#key%3A val\n"), text)
        self.assertIn("\ncores: 3\n", text)
        st = self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid).data)
        self.assertEqual(st["exitstatus"], "OK")
        pidf = os.path.join(host["pve_run_dir"], "%d.pid" % vmid)
        pid = int(read(pidf))
        argv = read("/proc/%d/cmdline" % pid, "rb").split(b"\0")
        self.assertEqual(os.path.basename(argv[0]), b"kvm")
        i = argv.index(b"-id")
        self.assertEqual(argv[i + 1], str(vmid).encode())
        self.assertEqual(argv[argv.index(b"-pidfile") + 1], pidf.encode())
        names = sorted(read("/proc/%d/task/%s/comm" % (pid, t)).strip() for t in os.listdir("/proc/%d/task" % pid))
        self.assertEqual([n for n in names if n.startswith("CPU ")], ["CPU 0/KVM", "CPU 1/KVM", "CPU 2/KVM"])
        # running VM: non-hotpluggable change goes to [PENDING]
        self.sim.pve("PUT", "/nodes/pve1/qemu/%d/config" % vmid, {"cores": 4})
        text = read(os.path.join(host["pve_config_dir"], "%d.conf" % vmid))
        self.assertIn("[PENDING]\ncores: 4", text)
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid, {"current": 1}).data["cores"], 3)
        r = self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid)
        self.assertEqual(r.status, 500)
        self.assertIn("is running", r.json["message"])
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/stop" % vmid).data)
        self.assertFalse(os.path.exists(pidf))
        simtest.wait_for(lambda: not os.path.exists("/proc/%d" % pid) or
                         read("/proc/%d/stat" % pid).split(")")[1].split()[0] == "Z", 5, what="process exit")
        st = self.sim.wait_task(self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid,
                                             {"purge": 1, "destroy-unreferenced-disks": 1}).data)
        self.assertEqual(st["exitstatus"], "OK")
        r = self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid)
        self.assertEqual(r.status, 500)
        self.assertFalse(os.path.exists(os.path.join(host["pve_config_dir"], "%d.conf" % vmid)))

    def test_destroy_waits_for_the_config_lock_of_a_stop(self):
        # qemu-server's vm_stop holds the VMID's config lock until it has cleaned up after QEMU: a destroy issued
        # then is accepted (the VM is not running any more) and its task fails on the lock after its timeout
        vmid = self.clone("locked")
        self.sim.wait_task(self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/start" % vmid).data)
        self.sim.knobs(stop_cleanup_seconds=3.0, config_lock_timeout_seconds=0.5)
        try:
            stop = self.sim.pve("POST", "/nodes/pve1/qemu/%d/status/stop" % vmid).data
            simtest.wait_for(lambda: self.sim.pve("GET", "/nodes/pve1/qemu/%d/status/current" % vmid)
                             .data["qmpstatus"] == "stopped", 10, what="QEMU gone")
            r = self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid, {"purge": 1})
            self.assertEqual(r.status, 200, r)
            st = self.sim.wait_task(r.data)
            self.assertEqual(st["exitstatus"],
                             "can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout" % vmid)
            self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).status, 200)
            self.assertEqual(self.sim.wait_task(stop)["exitstatus"], "OK")
        finally:
            self.sim.knobs(stop_cleanup_seconds=0.0, config_lock_timeout_seconds=10.0)
        self.assertEqual(self.sim.wait_task(self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid).data)["exitstatus"],
                         "OK")
        self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).status, 500)

    def test_destroy_fault_fails_the_task_and_keeps_the_vm(self):
        vmid = self.clone("undeletable")
        self.sim.knobs(destroy_fail_rate=1.0)
        try:
            r = self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid, {"purge": 1})
            self.assertEqual(r.status, 200, r)
            st = self.sim.wait_task(r.data)
            self.assertIn("Logical volume pve/vm-%d-disk-0 in use" % vmid, st["exitstatus"])
            self.assertEqual(self.sim.pve("GET", "/nodes/pve1/qemu/%d/config" % vmid).status, 200)
        finally:
            self.sim.knobs(destroy_fail_rate=0.0)
        self.assertEqual(self.sim.wait_task(self.sim.pve("DELETE", "/nodes/pve1/qemu/%d" % vmid).data)["exitstatus"],
                         "OK")

    # ---- storage / firewall / pools ------------------------------------------------------
    def test_storage_upload_content_delete(self):
        data = b"ISO" * 1000
        r = self.sim.upload_iso("pve1", "ci-test.iso", data)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.data.split(":")[5:7], ["imgcopy", ""])
        self.assertEqual(self.sim.wait_task(r.data)["exitstatus"], "OK")
        path = os.path.join(self.sim.ep["hosts"]["pve1"]["iso_dir"], "ci-test.iso")
        self.assertEqual(read(path, "rb"), data)
        content = self.sim.pve("GET", "/nodes/pve1/storage/local/content", {"content": "iso"}).data
        self.assertIn("local:iso/ci-test.iso", [c["volid"] for c in content])
        r = self.sim.upload_iso("pve1", "ci-test.txt", data)
        self.assertEqual(r.status, 400)
        self.assertIn("filename", r.json["errors"])
        r = self.sim.pve("DELETE", "/nodes/pve1/storage/local/content/local:iso%2Fci-test.iso")
        self.assertEqual(r.data.split(":")[5:7], ["imgdel", "local"])
        self.assertEqual(self.sim.wait_task(r.data)["exitstatus"], "OK")
        self.assertFalse(os.path.exists(path))

    def test_firewall_and_pools(self):
        vmid = self.clone("fw")
        self.assertEqual(self.sim.pve("POST", "/cluster/firewall/groups", {"group": "k8s-nodes"}).status, 200)
        self.assertIn("k8s-nodes", [g["group"] for g in self.sim.pve("GET", "/cluster/firewall/groups").data])
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/firewall/rules" % vmid, {"type": "group", "action": "k8s-nodes"})
        self.assertEqual(r.status, 200, r)
        rules = self.sim.pve("GET", "/nodes/pve1/qemu/%d/firewall/rules" % vmid).data
        self.assertEqual(rules[0]["enable"], 0)
        self.assertEqual(rules[0]["pos"], 0)
        r = self.sim.pve("POST", "/nodes/pve1/qemu/%d/firewall/rules" % vmid, {"type": "sideways", "action": "ACCEPT"})
        self.assertIn("type", r.json["errors"])
        self.assertEqual(self.sim.pve("PUT", "/nodes/pve1/qemu/%d/firewall/options" % vmid,
                                      {"enable": 1, "policy_in": "DROP"}).status, 200)
        opts = self.sim.pve("GET", "/nodes/pve1/qemu/%d/firewall/options" % vmid).data
        self.assertEqual((opts["enable"], opts["policy_in"]), (1, "DROP"))
        self.assertEqual(self.sim.pve("POST", "/pools", {"poolid": "pvescale"}).status, 200)
        self.assertEqual(self.sim.pve("PUT", "/pools/pvescale", {"vms": str(vmid)}).status, 200)
        members = self.sim.pve("GET", "/pools/pvescale").data["members"]
        self.assertEqual([m["vmid"] for m in members], [vmid])
        r = self.sim.pve("DELETE", "/pools/pvescale")
        self.assertEqual(r.status, 500)
        # PUT /pools (8.1+): twice is refused; another pool needs allow-move; delete=1 of a non-member is refused
        r = self.sim.pve("PUT", "/pools", {"poolid": "pvescale", "vms": str(vmid)})
        self.assertEqual(r.status, 500, r)
        self.assertEqual(self.sim.pve("POST", "/pools", {"poolid": "other"}).status, 200)
        self.assertEqual(self.sim.pve("PUT", "/pools", {"poolid": "other", "vms": str(vmid)}).status, 500)
        r = self.sim.pve("PUT", "/pools", {"poolid": "other", "vms": str(vmid), "allow-move": 1})
        self.assertEqual(r.status, 200, r)
        self.assertEqual([m["vmid"] for m in self.sim.pve("GET", "/pools/other").data["members"]], [vmid])
        self.assertEqual(self.sim.pve("GET", "/pools/pvescale").data["members"], [])
        self.assertEqual(self.sim.pve("PUT", "/pools", {"poolid": "pvescale", "vms": str(vmid), "delete": 1}).status,
                         500)


if __name__ == "__main__":
    unittest.main()
