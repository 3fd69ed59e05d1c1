#!/usr/bin/env python3
# test_layers: the source tree keeps the shape docs/architecture.md draws: includes follow the folders' arrows, and
# no two source files call each other (../shared/reference/cycles.py over the build's object files).
# SPDX-License-Identifier: Apache-2.0
import os
import re
import subprocess
import sys

SRC = os.environ.get("PVESCALE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = os.environ.get("PVESCALE_BUILD_DIR") or os.path.join(SRC, "build")
REF = os.environ.get("PVESCALE_SHARED") or os.path.join(SRC, "..", "shared")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def program_rules(program, var):
    """For each subsystem folder of program (agent, coordinator): the folders its files may include from: itself,
    shared/, and what its meson.build declares ('# May use: a, b.') and links (<var>_<folder>_dep)."""
    rules = {}
    root = os.path.join(SRC, program)
    for d in sorted(os.listdir(root)):
        mb = os.path.join(root, d, "meson.build")
        if not os.path.isfile(mb):
            continue
        text = open(mb).read()
        m = re.search(r"^# May use: (.*)\.$", text, re.M)
        said = {u.strip() for u in (m.group(1).split(",") if m else [])} - {"shared"}
        built = set(re.findall(var + r"_(\w+)_dep", re.search(var + r"_uses = \[(.*?)\]", text, re.S).group(1)))
        check(m is not None and said == built,
              f"{program}/{d}/meson.build: '# May use' ({', '.join(sorted(said))}) is what it links")
        uses = built | {"shared"}
        rules[program + "/" + d] = {program + "/" + u if u != "shared" else u for u in uses} | {
            program + "/" + d, "shared"}
    # The files at a program's root (the coordinator's main.c and main_launcher.c) wire everything together.
    rules[program] = set(rules) | {program, "shared"}
    return rules


def folder_rules():
    """folder -> the folders its files may include from; shared/ only itself."""
    rules = {"shared": {"shared"}}
    rules.update(program_rules("agent", "agent"))
    rules.update(program_rules("coordinator", "coord"))
    return rules


def headers(rules):
    """header file name -> the folder that holds it."""
    where, twice = {}, []
    for folder in rules:
        path = os.path.join(SRC, folder)
        for f in os.listdir(path):
            if f.endswith(".h"):
                if f in where:
                    twice.append(f"{f} in {where[f]} and {folder}")
                where[f] = folder
    check(not twice, f"every header name is used once ({len(where)} headers) " + "; ".join(twice))
    return where


def check_includes(rules, where):
    bad = []
    for folder, allowed in rules.items():
        path = os.path.join(SRC, folder)
        for f in sorted(os.listdir(path)):
            if not f.endswith((".c", ".h")):
                continue
            for inc in INCLUDE.findall(open(os.path.join(path, f)).read()):
                owner = where.get(inc)
                if owner and owner not in allowed:
                    bad.append(f"{folder}/{f} includes {owner}/{inc}")
    for b in bad:
        print("      " + b)
    check(not bad, f"every include follows the arrows ({len(rules)} folders)")


def check_cycles():
    tool = os.path.join(REF, "reference", "cycles.py")
    if not os.path.isfile(tool):
        check(False, f"{tool} exists")
        return
    out = subprocess.run([sys.executable, tool, BUILD], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("cycle:"):
            print("      " + line)
    m = re.search(r"cycles=(\d+)", out)
    check(m is not None and m.group(1) == "0", "no source files call each other in a circle (" +
          (out.strip().splitlines()[-1] if out.strip() else "no output") + ")")


def main():
    rules = folder_rules()
    check({"agent/host", "agent/model", "agent/service", "agent/api", "agent/daemon"} <= set(rules),
          "the agent is cut into host, model, service, api and daemon")
    check(rules.get("agent/model") == {"agent/model", "agent/host", "shared"},
          "the agent's model uses only what host/ describes")
    check("coordinator/gotmpl" in rules and rules["coordinator/gotmpl"] == {"coordinator/gotmpl", "shared"},
          "the template engine uses nothing of the coordinator")
    check_includes(rules, headers(rules))
    check_cycles()
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
