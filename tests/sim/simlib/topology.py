# Loads host topologies from ../shared/topologies (facts + cached tarball extraction).
# SPDX-License-Identifier: Apache-2.0
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from . import util

DEFAULT_MEMORY = 512 * 2**30  # used when a topology has no memory size (CPUID-only XML)


def shared_dir():
    env = os.environ.get("PVESCALE_SHARED")
    if env:
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.abspath(os.path.join(here, "..", "..", "..", "..", "shared"))


class Topology:
    """Facts the simulated PVE node reports, plus the paths an agent loads."""

    def __init__(self, name, manifest_entry, expected, topo_dir):
        self.name = name
        self.format = manifest_entry["format"]
        load = manifest_entry.get("load", {})
        self.fsroot_subdir = load.get("fsroot_subdir")
        self.tarball = os.path.join(topo_dir, manifest_entry["file"]) if self.format.startswith("linux") else None
        env = load.get("env", {})
        xml = env.get("HWLOC_XMLFILE")
        self.xml = xml.replace("${HERE}", topo_dir) if xml else None
        view = expected.get("complete_view_with_disallowed") or {}
        pk = expected.get("packages", {})
        self.sockets = pk.get("count", 1) or 1
        self.model = (pk.get("list") or [{}])[0].get("cpu_model") or "Unknown CPU"
        self.cores = view.get("cores", expected.get("cores", 1))
        self.cpus = view.get("pus", expected.get("pus", 1))
        mem = expected.get("machine", {}).get("total_memory_bytes") or 0
        self.memory = mem or DEFAULT_MEMORY
        self.numa = []
        for n in view.get("numa_nodes", expected.get("numa_nodes", [])):
            self.numa.append({"id": n["os_index"], "cpus": n.get("cpus", ""),
                              "memory": n.get("memory_bytes") or 0})
        if not any(n["memory"] for n in self.numa) and self.numa:
            for n in self.numa:
                n["memory"] = self.memory // len(self.numa)
        self.fsroot = None

    def numa_ids(self):
        return [n["id"] for n in self.numa]


class Library:
    def __init__(self, shared=None):
        self.shared = shared or shared_dir()
        self.topo_dir = os.path.join(self.shared, "topologies")
        with open(os.path.join(self.topo_dir, "manifest.json")) as f:
            man = json.load(f)
        self.entries = {t["name"]: t for t in man["topologies"]}
        self.cache = {}

    def names(self):
        return sorted(self.entries)

    def get(self, name):
        if name in self.cache:
            return self.cache[name]
        if name not in self.entries:
            raise KeyError("unknown topology '%s' (known: %s)" % (name, ", ".join(self.names())))
        with open(os.path.join(self.topo_dir, name + ".expected.json")) as f:
            exp = json.load(f)
        t = Topology(name, self.entries[name], exp, self.topo_dir)
        self.cache[name] = t
        return t

    def extract(self, names, topo_root):
        """Unpack every needed tarball once (in parallel) and expose it as topo_root/<name>/.

        Unpacked trees live in a cache shared between runs (PVESCALE_SIM_CACHE, default
        $XDG_CACHE_HOME/pvescale-sim or /tmp/pvescale-sim-cache-<uid>); topo_root/<name> is a symlink
        to it. PVESCALE_SIM_CACHE=off unpacks a private copy into topo_root instead."""
        os.makedirs(topo_root, exist_ok=True)
        cache = cache_dir()
        procs = []
        for name in sorted(set(names)):
            t = self.get(name)
            if not t.tarball:
                continue
            link = os.path.join(topo_root, name)
            t.fsroot = os.path.join(link, t.fsroot_subdir)
            if os.path.exists(os.path.join(link, ".complete")):
                continue
            if cache:
                dest = os.path.join(cache, "%s-%s" % (name, _digest(t.tarball)))
            else:
                dest = link
            if not os.path.exists(os.path.join(dest, ".complete")):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                tmp = tempfile.mkdtemp(prefix=".unpack-", dir=os.path.dirname(dest))
                p = subprocess.Popen(["tar", "xjf", t.tarball, "-C", tmp],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                procs.append((p, tmp, dest, name))
            if cache and not os.path.islink(link):
                if os.path.isdir(link):
                    shutil.rmtree(link)
                os.symlink(dest, link)
        for p, tmp, dest, name in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise RuntimeError("extracting %s failed: %s" % (name, err.decode(errors="replace")))
            open(os.path.join(tmp, ".complete"), "w").close()
            try:
                os.rename(tmp, dest)
            except OSError:  # another simulator finished the same tree first
                shutil.rmtree(tmp, ignore_errors=True)
            util.log("topology %s unpacked" % name, 2)


def cache_dir():
    env = os.environ.get("PVESCALE_SIM_CACHE")
    if env == "off":
        return None
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "pvescale-sim", "topologies")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    return os.path.join(tempfile.gettempdir(), "pvescale-sim-cache-%d" % os.getuid())


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]
