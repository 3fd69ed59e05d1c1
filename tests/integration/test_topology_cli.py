#!/usr/bin/env python3
# test_topology_cli: `pvescale-agent topology` on every reference topology in ../shared/topologies vs its .expected.json.
# SPDX-License-Identifier: Apache-2.0
"""Runs the real binary with --fsroot (sysfs tarballs) or --topology-xml (hwloc XML) and checks what it
prints against the facts hwloc's own tools produced (the .expected.json files):

* the agent shows the whole machine (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED), so where a snapshot was
  cgroup-restricted the counts, CPUs and NUMA ids come from `complete_view_with_disallowed` and the
  default-view facts must hold for the allowed part;
* NUMA node ids, CPUs and memory; packages with CPU model; cores (smt_siblings_all); L3 groups and sizes;
* online/isolated and per-node MemTotal/MemFree/hugepages against the raw sysfs facts of the snapshot;
* every `cpus` value is a canonical cpulist, and the core -> package/numa_node/l3 links are right.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SHARED = os.environ.get("PVESCALE_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
REFDIR = os.path.join(SHARED, "topologies")
BUILD = os.environ.get("PVESCALE_BUILD_DIR", "build")
AGENT = os.path.join(BUILD, "agent", "pvescale-agent")
KIB = 1024


def parse_cpulist(text):
    cpus = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus):
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
        run = [c]
    if run:
        out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(out)


def scratch_base():
    if os.environ.get("TMPDIR"):
        return os.environ["TMPDIR"]
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else "/tmp"


class TopologyCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(AGENT, os.X_OK):
            raise RuntimeError("no agent binary at %s (PVESCALE_BUILD_DIR)" % AGENT)
        with open(os.path.join(REFDIR, "manifest.json")) as f:
            cls.manifest = json.load(f)["topologies"]
        cls.tmp = tempfile.mkdtemp(prefix="pvescale-topology-cli-", dir=scratch_base())
        for entry in cls.manifest:  # one extraction per run
            for tarball in entry.get("load", {}).get("unpack", []):
                subprocess.run(["tar", "xjf", os.path.join(REFDIR, tarball), "-C", cls.tmp], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---------- running the CLI ----------

    def source_args(self, entry):
        if entry["format"] == "linux-sysfs-tarball":
            return ["--fsroot", os.path.join(self.tmp, entry["load"]["fsroot_subdir"])]
        xml = entry["load"]["env"]["HWLOC_XMLFILE"].replace("${HERE}", REFDIR)
        return ["--topology-xml", xml]

    def run_agent(self, args):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HWLOC_", "PVESCALE_AGENT_"))}
        return subprocess.run([AGENT, "topology"] + args, capture_output=True, text=True, env=env, timeout=120)

    def topology(self, entry):
        p = self.run_agent(self.source_args(entry))
        self.assertEqual(p.returncode, 0, "%s: %s" % (entry["name"], p.stderr))
        return json.loads(p.stdout)

    # ---------- checks ----------

    def check_canonical(self, doc, where="doc"):
        """Every "cpus"-like value is a canonical cpulist (ascending, ranges merged)."""
        if isinstance(doc, dict):
            for k, v in doc.items():
                if k in ("cpus", "online", "isolated", "allowed"):
                    self.assertIsInstance(v, str, where + "." + k)
                    self.assertEqual(v, format_cpulist(parse_cpulist(v)), where + "." + k)
                else:
                    self.check_canonical(v, where + "." + k)
        elif isinstance(doc, list):
            for i, v in enumerate(doc):
                self.check_canonical(v, "%s[%d]" % (where, i))

    def check_schema(self, doc):
        for key, typ in (("node", str), ("region", str), ("cpu_model", str), ("online", str), ("isolated", str),
                         ("packages", list), ("numa_nodes", list), ("l3_caches", list), ("cores", list)):
            self.assertIsInstance(doc.get(key), typ, key)
        for n in doc["numa_nodes"]:
            for key in ("id", "cpus", "memory_bytes", "memory_free_bytes", "hugepages"):
                self.assertIn(key, n)
            for size, hp in n["hugepages"].items():
                self.assertTrue(size.endswith("kB") and size[:-2].isdigit(), size)
                self.assertLessEqual(hp["free"], hp["total"])

    def check_counts(self, doc, exp, cv):
        counts = (cv or exp)["object_counts"]
        self.assertEqual(len(doc["packages"]), counts.get("Package", 0))
        self.assertEqual(len(doc["numa_nodes"]), counts.get("NUMANode", 0))
        self.assertEqual(len(doc["l3_caches"]), counts.get("L3Cache", 0))
        self.assertEqual(len(doc["cores"]), counts.get("Core", 0))
        self.assertEqual(len(parse_cpulist(doc["cpus"])), counts.get("PU", 0))
        self.assertEqual(parse_cpulist(doc["allowed"]), parse_cpulist(exp["machine"]["allowed_cpus"]))
        if cv:
            self.assertEqual(parse_cpulist(doc["cpus"]), parse_cpulist(cv["cpus"]))

    def check_numa(self, doc, exp, cv):
        ids = [n["id"] for n in doc["numa_nodes"]]
        want = cv["numa_nodes_os_index"] if cv else [n["os_index"] for n in exp["numa_nodes"]]
        self.assertEqual(ids, want)
        by_id = {n["id"]: n for n in doc["numa_nodes"]}
        for en in exp["numa_nodes"]:
            got = by_id[en["os_index"]]
            self.assertEqual(got["memory_bytes"], en["memory_bytes"], "node %d" % en["os_index"])
            if cv:
                self.assertLessEqual(parse_cpulist(en["cpus"]), parse_cpulist(got["cpus"]))
            else:
                self.assertEqual(parse_cpulist(got["cpus"]), parse_cpulist(en["cpus"]), "node %d" % en["os_index"])
            if len(en["packages"]) == 1:
                self.assertEqual(got["package"], en["packages"][0])

    def check_packages(self, doc, exp, cv):
        by_id = {p["id"]: p for p in doc["packages"]}
        listed = exp["packages"]["list"]
        for ep in listed:
            got = by_id[ep["os_index"]]
            self.assertEqual(got["cpu_model"], ep["cpu_model"])
            if cv:
                self.assertLessEqual(parse_cpulist(ep["cpus"]), parse_cpulist(got["cpus"]))
            else:
                self.assertEqual(parse_cpulist(got["cpus"]), parse_cpulist(ep["cpus"]))
        first = min(listed, key=lambda p: p["os_index"])
        self.assertEqual(doc["cpu_model"], first["cpu_model"])

    def check_cores(self, doc, exp, cv):
        got = [frozenset(parse_cpulist(c["cpus"])) for c in doc["cores"]]
        want = [frozenset(pus) for pus in exp["smt_siblings_all"]]
        if cv:
            self.assertLessEqual(set(want), set(got))
        else:
            self.assertEqual(sorted(got, key=min), sorted(want, key=min))
        self.assertEqual([min(c) for c in got], sorted(min(c) for c in got), "cores sorted by first CPU")

    def check_l3(self, doc, exp, cv):
        got = [(parse_cpulist(c["cpus"]), c["size_bytes"]) for c in doc["l3_caches"]]
        for el in exp["l3_caches"]:
            want = parse_cpulist(el["cpus"])
            if cv and not want:
                continue  # disallowed in the reference view; it has CPUs in ours
            match = [size for cpus, size in got if (want <= cpus if cv else want == cpus)]
            self.assertEqual(match, [el["size_bytes"]], "L3 %s" % el["cpus"])

    def check_core_links(self, doc, exp, cv):
        packages = {p["id"]: parse_cpulist(p["cpus"]) for p in doc["packages"]}
        nodes = {n["id"]: n for n in doc["numa_nodes"]}
        exp_nodes = {n["os_index"]: parse_cpulist(n["cpus"]) for n in exp["numa_nodes"]}
        l3 = [parse_cpulist(c["cpus"]) for c in doc["l3_caches"]]
        for core in doc["cores"]:
            cpus = parse_cpulist(core["cpus"])
            self.assertLessEqual(cpus, packages[core["package"]])
            if core["l3"] is None:
                self.assertFalse(any(cpus & c for c in l3))
            else:
                self.assertLessEqual(cpus, l3[core["l3"]])
            holders = [n for n in nodes.values() if cpus <= parse_cpulist(n["cpus"])]
            if core["numa_node"] is None:
                self.assertEqual(holders, [], "core %s" % core["cpus"])
                continue
            self.assertLessEqual(cpus, parse_cpulist(nodes[core["numa_node"]]["cpus"]))
            if any(n["memory_bytes"] > 0 for n in holders):
                self.assertGreater(nodes[core["numa_node"]]["memory_bytes"], 0)
            if not cv:
                self.assertLessEqual(cpus, exp_nodes[core["numa_node"]])

    def check_raw_sysfs(self, doc, exp, root):
        cpu = exp["raw_sysfs"]["cpu"]
        all_cpus = parse_cpulist(doc["cpus"])
        online = all_cpus if cpu["online"] is None else parse_cpulist(cpu["online"]) & all_cpus
        self.assertEqual(parse_cpulist(doc["online"]), online)
        self.assertEqual(parse_cpulist(doc["isolated"]), parse_cpulist(cpu["isolated"] or ""))
        nodes = {n["id"]: n for n in doc["numa_nodes"]}
        for rn in exp["raw_sysfs"]["nodes"]:
            got = nodes[rn["id"]]  # the whole machine: every node sysfs knows
            self.assertEqual(got["memory_bytes"], rn["MemTotal_kB"] * KIB)
            self.assertEqual(got["memory_free_bytes"], rn["MemFree_kB"] * KIB)
            if rn["cpulist"] is not None:
                self.assertEqual(parse_cpulist(got["cpus"]), parse_cpulist(rn["cpulist"]) & online)
            want = {k[len("hugepages-"):]: v for k, v in rn["nr_hugepages"].items()}
            self.assertEqual({k: v["total"] for k, v in got["hugepages"].items()}, want, "node %d" % rn["id"])
            for size, hp in got["hugepages"].items():
                path = os.path.join(root, "sys/devices/system/node/node%d/hugepages/hugepages-%s/free_hugepages"
                                    % (rn["id"], size))
                with open(path) as f:
                    self.assertEqual(hp["free"], int(f.read()))

    def check_xml(self, doc):
        self.assertEqual(doc["online"], doc["cpus"])
        self.assertEqual(doc["isolated"], "")
        for n in doc["numa_nodes"]:
            self.assertEqual(n["memory_free_bytes"], n["memory_bytes"])

    # ---------- tests ----------

    def test_every_reference_topology(self):
        self.assertGreater(len(self.manifest), 0)
        for entry in self.manifest:
            with self.subTest(topology=entry["name"]):
                with open(os.path.join(REFDIR, entry["name"] + ".expected.json")) as f:
                    exp = json.load(f)
                cv = exp.get("complete_view_with_disallowed")
                doc = self.topology(entry)
                self.check_schema(doc)
                self.check_canonical(doc)
                self.check_counts(doc, exp, cv)
                self.check_numa(doc, exp, cv)
                self.check_packages(doc, exp, cv)
                self.check_cores(doc, exp, cv)
                self.check_l3(doc, exp, cv)
                self.check_core_links(doc, exp, cv)
                if entry["format"] == "linux-sysfs-tarball":
                    self.check_raw_sysfs(doc, exp, self.source_args(entry)[1])
                else:
                    self.check_xml(doc)

    def test_hugepages_reported(self):
        """At least one snapshot has reserved hugepages, and the CLI reports them per node."""
        seen = 0
        for entry in self.manifest:
            if entry["format"] != "linux-sysfs-tarball":
                continue
            doc = self.topology(entry)
            seen += sum(hp["total"] for n in doc["numa_nodes"] for hp in n["hugepages"].values())
        self.assertGreater(seen, 0)

    def test_wrong_fsroot_is_a_clear_error(self):
        p = self.run_agent(["--fsroot", self.tmp])  # the parent of the top directories
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(p.stdout, "")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(self.tmp, lines[0])
        self.assertIn("sys/devices/system/cpu", lines[0])

    def test_this_machine(self):
        p = self.run_agent([])
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.check_schema(doc)
        self.check_canonical(doc)
        self.assertEqual(doc["source"], "host")
        self.assertTrue(parse_cpulist(doc["online"]))
        self.assertLessEqual(parse_cpulist(doc["online"]), parse_cpulist(doc["cpus"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
