#!/usr/bin/env python3
# pvescale-coordinator with exactly the Proxmox role docs/install.md creates: the `pveum` commands of the guide run
# as written (through tests/sim/pveum) on a simulated cluster that starts as a fresh install and checks every call
# as Proxmox VE 8.4 does. A scale-up (pods -> VMs Running, pinned by the agent) and a termination then go through
# without a single 403; a role short of one privilege fails the launch with the 403's message and leaves nothing
# behind. The guide's table of calls is checked against the API schema's permissions and the calls really made.
# On a real control plane (../shared/k8s) shared by the class's tests.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_termination import reservations  # noqa: E402

INSTALL = os.path.join(cl.SRC, "docs", "install.md")
PVEUM = os.path.join(cl.SRC, "tests", "sim", "pveum")
SCHEMA = os.path.join(cl.SRC, "..", "shared", "data", "pve-api-schema.json")
PODS = "/api/v1/namespaces/default/pods"


def install_md():
    with open(INSTALL) as f:
        return f.read()


def doc_script():
    """The guide's shell block with the pveum commands, as written."""
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", install_md(), re.S | re.M) if re.search(r"^pveum ", b, re.M)]
    assert len(blocks) == 1, "docs/install.md: want one ```sh block with the pveum commands, found %d" % len(blocks)
    return blocks[0]


def doc_table():
    """{"METHOD /path": privilege cell} of the guide's table of Proxmox calls."""
    rows = {}
    for line in install_md().splitlines():
        m = re.match(r"^\| `(GET|POST|PUT|DELETE) (/[^`]*)` \| (.*?) \|", line)
        if m:
            rows["%s %s" % (m.group(1), m.group(2))] = m.group(3)
    assert rows, "docs/install.md: no table of Proxmox calls"
    return rows


def schema_permissions():
    with open(SCHEMA) as f:
        roots = json.load(f)
    out = {}

    def walk(n):
        for method, info in (n.get("info") or {}).items():
            out["%s %s" % (method, n["path"])] = info.get("permissions") or {}
        for c in n.get("children") or []:
            walk(c)
    for r in roots:
        walk(r)
    return out


def unmet(check, cell):
    """What of a schema `check` the guide's cell does not name ("`Priv` on `/path`"), or []."""
    test = check[0]
    if test == "and":
        return [x for sub in check[1:] for x in unmet(sub, cell)]
    if test == "or":
        misses = [unmet(sub, cell) for sub in check[1:]]
        return [] if any(not m for m in misses) else misses[0]
    if test == "perm":
        path, privs, opts = check[1], check[2], dict(zip(check[3::2], check[4::2]))
        named = ["`%s` on `%s`" % (p, path) for p in privs if "`%s` on `%s`" % (p, path) in cell]
        if opts.get("any"):
            return [] if named else ["one of %s on %s" % ("|".join(privs), path)]
        return ["%s on %s" % (p, path) for p in privs if "`%s` on `%s`" % (p, path) not in cell]
    return ["a check of kind %s" % test]


class PveRoleTest(cl.SharedControlPlaneTest):
    hosts = "pve1=eas-tioga"

    def setUp(self):
        super().setUp()
        try:  # a failed setUp has no tearDown: the shared control plane is cleaned for the next test here
            self.assertEqual(self.c.sim.admin("POST", "/actions/pve-access-reset", {"region": "r1"}).status, 200)
            bindir = os.path.join(self.c.tmp, "bin")
            os.makedirs(bindir)
            os.symlink(PVEUM, os.path.join(bindir, "pveum"))
        except BaseException:
            self.c.stop()
            raise
        self.env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], PVESCALE_SIM_STATE=self.c.sim.state)

    def sh(self, script):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=self.env, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, "pveum commands failed:\n%s\n%s" % (script, r.stderr))
        return r.stdout

    def install_role(self, script):
        """Run the guide's commands; the coordinator gets the token they create, the test a root@pam token."""
        out = self.sh(script)
        rows = dict(re.findall(r"^│ (full-tokenid|value) +│ (\S+) +│$", out, re.M))
        self.assertIn("value", rows, "no token secret printed by:\n" + out)
        self.token = rows["full-tokenid"]
        e = self.c.sim.ep["pve"]["r1"]
        e["token_id"], e["token_secret"] = self.token, rows["value"]
        self.c.config = self.c.write_config()
        obs = json.loads(self.sh("pveum user token add root@pam observer --privsep 0 --output-format json"))
        e["token_id"], e["token_secret"] = obs["full-tokenid"], obs["value"]

    def denials(self):
        return [d for d in self.c.sim.admin("GET", "/pve-access").json["r1"]["denials"] if d["user"] == self.token]

    def start(self, pods=2):
        c = self.c
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        for i in range(pods):
            c.create(PODS, cl.pod("web-%d" % i, cpu="500m", memory="512Mi", labels={"app": "web"}))
        self.assertEqual(c.sim.admin("POST", "/calls/reset").status, 200)  # the coordinator's calls from here
        self.co = cl.Coordinator(c)

    def vms(self):
        """The VMs of the simulator's report, templates left out: (vmid, deleted or None)."""
        return [(v["vmid"], v["deleted"]) for v in self.c.sim.admin("GET", "/report").json["vms"]
                if v["vmid"] < 9000]

    def test_guides_role_scales_up_and_down(self):
        c = self.c
        self.install_role(doc_script())
        self.start()
        try:
            cl.wait_for(lambda: len(c.items(PODS)) == 2 and all((p.get("status") or {}).get("phase") == "Running"
                                                                 for p in c.items(PODS)), 60, interval=0.5,
                        what="pods Running")
            cl.wait_for(lambda: (c.claims()[0].get("status") or {}).get("launchStep") == "Initialized", 30,
                        interval=0.5, what="claim Initialized")
        finally:
            self.assertEqual(self.denials(), [], "calls the guide's role does not allow")
        claim = c.claims()[0]
        vmid = claim["status"]["vmid"]
        vm = [v for v in c.sim.admin("GET", "/report").json["vms"] if v["vmid"] == vmid][0]
        self.assertEqual(len(vm["pinned_cpus"]), vm["vcpus"], vm)  # the agent pinned every vCPU
        self.assertEqual(c.sim.kube("DELETE", cl.GROUP + "/nodeclaims/" + claim["metadata"]["name"]).status, 200)
        cl.wait_for(lambda: not c.claims() and all(d for _, d in self.vms()), 40, interval=0.5,
                    what="claim and VM gone")
        self.assertEqual(self.denials(), [], "calls the guide's role does not allow")
        self.assertNotIn("HTTP 403", self.co.logtext())
        # Every call made is one the guide's table lists.
        table = doc_table()
        called = sorted(r for r in c.sim.admin("GET", "/calls").json["pve"])
        self.assertEqual([r for r in called if r not in table], [], "calls missing from docs/install.md's table")

    def test_a_missing_privilege_fails_the_launch_and_leaves_nothing(self):
        c = self.c
        script = doc_script()
        m = re.search(r'^pveum role add (\S+) -privs "([^"]*VM\.Config\.CPU[^"]*)"', script, re.M)
        self.assertIsNotNone(m, "the guide's role with VM.Config.CPU")
        privs = [p for p in m.group(2).split() if p != "VM.Config.CPU"]
        self.install_role(script + '\npveum role modify %s -privs "%s"\n' % (m.group(1), " ".join(privs)))
        self.start(pods=1)
        want = "Permission check failed (/vms/%d, VM.Config.CPU)"

        def refused():
            evs = [e for e in c.items("/api/v1/namespaces/default/events")
                   if e["involvedObject"].get("kind") == "NodeClaim" and e["type"] == "Warning"]
            return [e for e in evs if "Permission check failed" in e["message"]]
        evs = cl.wait_for(refused, 30, interval=0.5, what="a Warning Event with the 403")
        vmid = int(re.search(r"\(/vms/(\d+), ", evs[0]["message"]).group(1))
        self.assertIn(want % vmid, evs[0]["message"])
        self.assertEqual(evs[0]["reason"], "PermissionDenied")
        self.assertIn(want % vmid, self.co.logtext())
        self.assertIn(want % vmid, [d["message"] for d in self.denials()])
        # Nothing half-created: the claim, its VM, its ISO, its reservation and its join token are gone.
        host = c.sim.ep["hosts"]["pve1"]

        def left():
            return {"claims": [x["metadata"]["name"] for x in c.claims()],
                    "vms": [v for v, deleted in self.vms() if not deleted],
                    "isos": [f for f in os.listdir(host["iso_dir"]) if f.startswith("pvescale-")],
                    "reservations": [x["owner"] for x in reservations(c, "pve1")
                                     if x["owner"].startswith("nodeclaim/")],
                    "tokens": [s["metadata"]["name"] for s in c.items("/api/v1/namespaces/kube-system/secrets")
                               if s.get("type") == "bootstrap.kubernetes.io/token"]}
        try:
            cl.wait_for(lambda: not any(left().values()), 30, interval=0.5, what="the failed launch cleaned up")
        except AssertionError:
            self.fail("left behind by the failed launch: %s" % left())
        self.assertTrue(self.vms(), "a VM was cloned before the refused call")



class GuideTableTest(unittest.TestCase):
    def test_guides_table_matches_the_schema(self):
        perms = schema_permissions()
        bad = []
        for call, cell in doc_table().items():
            if call not in perms:
                bad.append("%s: not in the API schema" % call)
                continue
            p = perms[call]
            if p.get("check"):
                bad += ["%s: the guide does not name %s" % (call, x) for x in unmet(p["check"], cell)]
            elif p.get("user") == "all" and not re.search(r"^none\b", cell):
                bad.append("%s: the schema checks no privilege (user: all): the cell must start with 'none'" % call)
        self.assertEqual(bad, [])


if __name__ == "__main__":
    unittest.main()
