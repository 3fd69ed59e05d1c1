"""Integration test: NodeClaims become pinned, joined nodes through the launcher (simulated PVE + Kubernetes, real
agents), checked step by step: the PVE calls (schema-checked by the simulator), the VM config and its numaN sums,
the cloud-init ISO read back, the join token, the agent's pinning read back, the Node, the clean-up after
Initialized, and the teardown when the claim is deleted."""
# SPDX-License-Identifier: Apache-2.0
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launchlib  # noqa: E402
from launchlib import GIB, MIB, cpulist, wait_for  # noqa: E402

SMALL = ("small-a", "c1.2VCPU-4GB", "pve1", 2, 4 * GIB)
# 16 vCPUs and 128 GiB: more memory than one NUMA node of eas-tioga (~126 GiB) holds, so it spans two.
BIG = ("big-b", "m1.16VCPU-128GB", "pve2", 16, 128 * GIB)


class LauncherHappyPathTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # join_delay gives the test time to read the ISO and the token before the node joins; static addresses from
        # a pool (spec.ipam) go into the VM config and the ISO's network-config
        ipam = {"ipconfig": [{"interface": "net0", "ip": "10.40.0.0/24", "gw": "10.40.0.1", "ip6": "fd00:40::/64"}],
                "nameservers": ["10.40.0.53"]}
        cls.w = launchlib.World(knobs=["join_delay_seconds=2"], nodeclass=launchlib.node_class(ipam=ipam))

    @classmethod
    def tearDownClass(cls):
        cls.w.stop()

    def check_config(self, claim, vcpus, memory):
        st = claim["status"]
        cfg = self.w.vm_config(st["host"], st["vmid"])
        self.assertEqual((cfg["cores"], cfg["sockets"], int(cfg["memory"]), cfg["balloon"], cfg["numa"]),
                         (vcpus, 1, memory // MIB, 0, 1))
        self.assertNotIn("affinity", cfg)
        numa = sorted((k, v) for k, v in cfg.items() if re.fullmatch(r"numa\d", k))
        self.assertEqual(len(numa), len(st["placement"]["numa"]))
        total, guest = 0, set()
        for (key, value), want in zip(numa, st["placement"]["numa"]):
            kv = dict(p.split("=", 1) for p in value.split(","))
            self.assertEqual(kv["policy"], "bind")
            self.assertEqual(int(kv["hostnodes"]), want["hostNode"])
            self.assertEqual(int(kv["memory"]), want["memoryMiB"])
            total += int(kv["memory"])
            guest |= cpulist(kv["cpus"].replace(";", ","))
        self.assertEqual(total, memory // MIB, "numaN memories must add up to the VM memory")
        self.assertEqual(guest, set(range(vcpus)))
        self.assertEqual(set(cfg["tags"].split(";")), {"pvescale", "default", claim["metadata"]["name"], "k8s"})
        self.assertIn("uid: " + claim["metadata"]["uid"], cfg["description"])
        if st.get("reservationID"):  # how an agent that lost its state rebuilds the reservation (docs/agent.md)
            self.assertIn("\nreservation: %s\ncpus: %s\n" % (st["reservationID"], st["placement"]["cpus"]),
                          cfg["description"])
        self.assertIn("queues=%d" % vcpus, cfg["net0"])
        self.assertIn("size=30G", cfg["scsi0"])
        return cfg

    def check_iso_and_token(self, claim):
        st = claim["status"]
        volume = st["isoVolume"]
        self.assertTrue(volume.startswith("local:iso/pvescale-" + claim["metadata"]["name"]))
        cfg = self.w.vm_config(st["host"], st["vmid"])
        self.assertEqual(cfg["ide2"], volume + ",media=cdrom")
        iso = os.path.join(self.w.sim.ep["hosts"][st["host"]]["iso_dir"], volume.split("/", 1)[1])
        files = launchlib.read_iso(iso)
        self.assertEqual(files["__volume_id__"], "cidata")
        self.assertIn("provider-id: \"proxmox://%s/%d\"" % (self.w.region, st["vmid"]), files["meta-data"])
        self.assertIn("version: 2", files["network-config"])
        # the claim's addresses: in the VM config, and in the network-config for the interface with net0's MAC
        ip4, ip6 = (st["ipconfig"].split(k + "=")[1].split(",")[0] for k in ("ip", "ip6"))
        self.assertEqual(cfg["ipconfig0"], "ip=%s,gw=10.40.0.1,ip6=%s" % (ip4, ip6))
        self.assertEqual(cfg["nameserver"], "10.40.0.53")
        mac = re.search(r"=([0-9A-Fa-f:]{17})", cfg["net0"]).group(1).lower()
        self.assertIn('    match:\n      macaddress: "%s"\n    dhcp4: false\n    addresses:\n      - "%s"\n'
                      '      - "%s"\n    gateway4: "10.40.0.1"\n    nameservers:\n      addresses: ["10.40.0.53"]\n'
                      % (mac, ip4, ip6), files["network-config"])
        user = files["user-data"]
        self.assertTrue(user.startswith("#cloud-config"))
        self.assertIn("--register-with-taints=dedicated=x:NoSchedule,pvescale.io/unregistered=true:NoExecute", user)
        self.assertIn("team=a", user)
        self.assertNotIn("node-role.kubernetes.io", user)  # the kubelet may not set it; the launcher does
        token = re.search(r"token: ([a-z0-9]{6})\.([a-z0-9]{16})", user)
        self.assertIsNotNone(token)
        self.assertEqual(token.group(1), st["tokenID"])
        secret = self.w.kget("/api/v1/namespaces/kube-system/secrets/bootstrap-token-" + st["tokenID"])
        self.assertEqual(secret["type"], "bootstrap.kubernetes.io/token")
        data = {k: launchlib.base64.b64decode(v).decode() for k, v in secret["data"].items()}
        self.assertEqual(data["token-secret"], token.group(2))
        self.assertEqual((data["usage-bootstrap-authentication"], data["usage-bootstrap-signing"]), ("true", "true"))
        self.assertTrue(data["auth-extra-groups"].startswith("system:bootstrappers:"))
        self.assertRegex(data["expiration"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        return iso

    def check_pinning(self, claim, vcpus):
        st = claim["status"]
        status, vm = self.w.agents[st["host"]].client.request("GET", "/v1/vms/%d" % st["vmid"])
        self.assertEqual(status, 200, vm)
        res = vm["reservation"]
        self.assertEqual((res["id"], res["state"], res["vmid"]), (st["reservationID"], "bound", st["vmid"]))
        self.assertEqual(res["cpus"], st["placement"]["cpus"])
        self.assertEqual(vm["pinning"]["wanted"]["vcpu_map"], res["vcpu_map"])
        threads = {t["vcpu"]: t for t in vm["pinning"]["real"] if "vcpu" in t}
        self.assertEqual(set(threads), set(range(vcpus)))
        for v, t in threads.items():
            self.assertEqual(t["wanted"], str(res["vcpu_map"][v]))
        # Host CPUs this machine really has are really pinned (the simulated hosts are bigger than the test box).
        real_cpus = os.sched_getaffinity(0)

        def pinned():
            vm_now = self.w.agents[st["host"]].client.request("GET", "/v1/vms/%d" % st["vmid"])[1]
            mine = [t for t in vm_now["pinning"]["real"] if "vcpu" in t and int(t["wanted"]) in real_cpus]
            return mine if mine and all(t["cpus"] == t["wanted"] for t in mine) else None
        wait_for(pinned, 10, what="vCPU threads pinned to the reservation's CPUs")

    def check_node(self, claim):
        node = self.w.node(claim["status"]["nodeName"])
        labels = node["metadata"]["labels"]
        self.assertEqual(labels["team"], "a")
        self.assertIn("node-role.kubernetes.io/worker", labels)
        self.assertEqual(labels["pvescale.io/nodepool"], "default")
        self.assertEqual(labels["node.kubernetes.io/instance-type"], claim["spec"]["instanceType"])
        taints = {t["key"] for t in node["spec"].get("taints", [])}
        self.assertIn("dedicated", taints)
        self.assertNotIn("pvescale.io/unregistered", taints)
        self.assertEqual(node["spec"]["providerID"], "proxmox://%s/%d" % (self.w.region, claim["status"]["vmid"]))

    def test_launch_join_initialize_and_teardown(self):
        w = self.w
        for name, itype, host, _, _ in (SMALL, BIG):
            w.create_claim(name, itype, host)
        p = w.start_driver()
        isos = {}
        for name, _, _, vcpus, memory in (SMALL, BIG):
            claim = wait_for(lambda n=name: (lambda c: c if c.get("status", {}).get("launchStep") in
                                             ("Launched", "Registered", "Initialized") else None)(w.claim(n)), 60,
                             what="%s launched" % name)
            if claim["status"].get("isoVolume"):
                isos[name] = self.check_iso_and_token(claim)
            self.check_config(claim, vcpus, memory)
        self.assertEqual(set(isos), {SMALL[0], BIG[0]}, "the node joined before the test could read its ISO")
        rc, log = w.wait_driver(p)
        self.assertEqual(rc, 0, log)
        self.assertNotIn("Parameter verification failed", log)
        self.assertRegex(log, r"driver: \d+ reconciles, 0 errors")
        self.assertNotIn("error:", log)
        for name, _, host, vcpus, memory in (SMALL, BIG):
            claim = w.claim(name)
            st = claim["status"]
            self.assertEqual(st["launchStep"], "Initialized")
            conds = {c["type"]: c["status"] for c in st["conditions"]}
            self.assertEqual(conds, {"Launched": "True", "Registered": "True", "Initialized": "True"})
            self.assertNotIn("tokenID", st)
            self.assertNotIn("isoVolume", st)
            self.assertEqual(w.vm_config(host, st["vmid"])["ide2"], "none,media=cdrom")
            self.assertFalse(os.path.exists(isos[name]), "ISO not deleted after Initialized")
            self.check_config(claim, vcpus, memory)
            self.check_pinning(claim, vcpus)
            self.check_node(claim)
        self.assertEqual(w.secrets(), [], "join tokens not deleted after Initialized")
        self.assertGreater(len(w.claim(BIG[0])["status"]["placement"]["numa"]), 1, "128 GiB spans NUMA nodes")
        calls = w.sim.admin("GET", "/calls").json["pve"]
        for endpoint in ("POST /nodes/{node}/qemu/{vmid}/clone", "PUT /nodes/{node}/qemu/{vmid}/config",
                         "POST /nodes/{node}/storage/{storage}/upload", "POST /nodes/{node}/qemu/{vmid}/status/start",
                         "PUT /nodes/{node}/qemu/{vmid}/firewall/options", "POST /nodes/{node}/qemu/{vmid}/firewall/rules",
                         "PUT /nodes/{node}/qemu/{vmid}/resize"):
            self.assertGreaterEqual(calls.get(endpoint, 0), 2, endpoint)
        rules = w.pve("GET", "/nodes/pve1/qemu/%d/firewall/rules" % w.claim(SMALL[0])["status"]["vmid"])
        self.assertIn(("group", "kubernetes", "net0", 1), [(r["type"], r["action"], r.get("iface"), r["enable"])
                                                           for r in rules])
        w.check_no_orphans(self)

        # Deleting a claim tears everything down, then releases the finalizer.
        small = w.claim(SMALL[0])
        w.delete_claim(SMALL[0])
        p = w.start_driver(exit_when="never", timeout_ms=60000)
        wait_for(lambda: w.claim(SMALL[0]) is None, 30, what="claim gone")
        p.kill()
        p.wait()
        self.assertNotIn(small["status"]["vmid"], w.vms("pve1"))
        self.assertIsNone(w.node(small["status"]["nodeName"]))
        self.assertNotIn(small["status"]["reservationID"], [r["id"] for r in w.reservations("pve1")])
        w.check_no_orphans(self)

    def meta_data_of(self, name):
        """The meta-data file of a launched claim's ISO, read while the node has not joined yet."""
        claim = wait_for(lambda: (lambda c: c if (c.get("status") or {}).get("isoVolume") else None)(
            self.w.claim(name)), 60, what="%s has its ISO" % name)
        st = claim["status"]
        iso = os.path.join(self.w.sim.ep["hosts"][st["host"]]["iso_dir"], st["isoVolume"].split("/", 1)[1])
        return launchlib.read_iso(iso)["meta-data"]

    SECRETS = "/api/v1/namespaces/kube-system/secrets"

    @staticmethod
    def meta_data_secret(meta):
        """Secret data with a meta-data template."""
        return {"meta-data": launchlib.base64.b64encode(meta.encode()).decode()}

    def templates_class(self, name, meta):
        """A Secret name-templates with a meta-data template, and a NodeClass name whose templatesRef names it;
        returns the Secret."""
        w = self.w
        ref = {"name": name + "-templates", "namespace": "kube-system"}
        secret = w.kcreate(self.SECRETS, {"apiVersion": "v1", "kind": "Secret", "data": self.meta_data_secret(meta),
                                          "metadata": dict(ref)})
        w.kcreate(launchlib.API + "/proxmoxnodeclasses",
                  launchlib.node_class(name, metadataOptions={"type": "cdrom", "templatesRef": ref}))
        return secret

    def change_templates(self, secret, meta):
        secret["data"] = self.meta_data_secret(meta)
        r = self.w.sim.kube("PUT", self.SECRETS + "/" + secret["metadata"]["name"], secret)
        self.assertEqual(r.status, 200, r)

    def test_templates_from_a_secret_follow_its_changes(self):
        # A NodeClass's templatesRef Secret: its meta-data template renders into the ISO, and a change of the
        # Secret reaches the next launch of the same running launcher (parsed templates are kept by their text).
        w = self.w

        def meta_data(version):
            return ('instance-id: {{ .Metadata.InstanceID | quote }}\nlocal-hostname: {{ .Metadata.Hostname | quote }}'
                    '\ntemplate-version: %s\n' % version)
        secret = self.templates_class("custom", meta_data("v1"))
        w.create_claim("tmpl-a", host="pve1", nodeclass="custom")
        p = w.start_driver(exit_when="never", timeout_ms=90000)
        try:
            first = self.meta_data_of("tmpl-a")
            self.assertIn("template-version: v1", first)
            self.assertIn('local-hostname: "tmpl-a"', first)
            self.change_templates(secret, meta_data("v2"))
            w.create_claim("tmpl-b", host="pve1", nodeclass="custom")
            second = self.meta_data_of("tmpl-b")
            self.assertIn("template-version: v2", second)
            self.assertIn('local-hostname: "tmpl-b"', second)
            for name in ("tmpl-a", "tmpl-b"):
                wait_for(lambda n=name: (w.claim(n).get("status") or {}).get("launchStep") == "Initialized", 60,
                         what="%s initialized" % name)
                w.delete_claim(name)
            wait_for(lambda: w.claim("tmpl-a") is None and w.claim("tmpl-b") is None, 60, what="claims gone")
        finally:
            p.kill()
            p.wait()
        log = w.driver_log(p)
        self.assertNotIn("InvalidCloudInit", log)
        w.check_no_orphans(self)

    def test_templates_that_do_not_parse_fail_the_launch(self):
        # A broken template in the Secret fails the launch cleanly: a Warning event names file, line and column,
        # the claim is deleted and nothing it made is left. The broken set is not kept: the fixed Secret renders
        # at the next launch of the same launcher.
        w = self.w
        secret = self.templates_class("broken", "instance-id: {{ .Metadata.InstanceID | nosuchfn }}\n")
        w.create_claim("bad-tmpl", host="pve1", nodeclass="broken")
        p = w.start_driver(exit_when="never", timeout_ms=90000)
        try:
            wait_for(lambda: w.claim("bad-tmpl") is None, 60, what="the failed claim deleted")
            events = [e for e in w.events("InvalidCloudInit") if e["involvedObject"]["name"] == "bad-tmpl"]
            self.assertEqual(len(events), 1, events)
            self.assertIn('meta-data:1:', events[0]["message"])
            self.assertIn("nosuchfn", events[0]["message"])
            w.check_no_orphans(self)
            self.change_templates(secret, "instance-id: {{ .Metadata.InstanceID | quote }}\ntemplate-version: fixed\n")
            # pve2: the launcher backs pool default off pve1 after the failure (no create-destroy loop)
            w.create_claim("fixed-tmpl", host="pve2", nodeclass="broken")
            self.assertIn("template-version: fixed", self.meta_data_of("fixed-tmpl"))
            wait_for(lambda: (w.claim("fixed-tmpl").get("status") or {}).get("launchStep") == "Initialized", 60,
                     what="fixed-tmpl initialized")
            w.delete_claim("fixed-tmpl")
            wait_for(lambda: w.claim("fixed-tmpl") is None, 60, what="fixed-tmpl gone")
        finally:
            p.kill()
            p.wait()
        w.check_no_orphans(self)

if __name__ == "__main__":
    unittest.main()
