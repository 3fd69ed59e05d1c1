#!/usr/bin/env python3
"""bench/plan: the coordinator's plan against the real kube-scheduler. A burst of PLAN_PODS (150) pending pods of
mixed shapes (generic ones, a nodeSelector disk=ssd set, zone-spread sets and hostname anti-affinity sets) on a
real control plane with simulated kubelets, 3 simulated Proxmox hosts and a real agent each. Counts, from the
coordinator's Nominated events, the pods that needed a second provisioning round (nominated to a second claim) and
the pods running on a node other than their claim's, and the claims made after the first round. Prints a table
and a RESULT line."""
# SPDX-License-Identifier: Apache-2.0
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests"))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
os.environ.setdefault("PVESCALE_SOURCE_DIR", SRC)
import coordlib as cl  # noqa: E402
import demo  # noqa: E402

PODS = int(os.environ.get("PLAN_PODS", "150"))
SEED = int(os.environ.get("PLAN_SEED", "37"))
TIMEOUT_S = int(os.environ.get("PLAN_TIMEOUT_S", "400"))
HOSTS = "pve1=64amd64-4s2n4ca2co,pve2=eas-tioga,pve3=64amd64-4s2n4ca2co"


def burst(n, seed):
    """n pods: 55% generic, 15% disk=ssd, 15% in zone-spread sets of 6, 15% in hostname anti-affinity sets of 3."""
    rnd = random.Random(seed)
    pods = []
    for i in range(n):
        cpu = rnd.choice(["100m", "250m", "500m", "1"])
        mem = rnd.choice(["128Mi", "256Mi", "512Mi", "1Gi", "2Gi"])
        kind = rnd.random()
        if kind < 0.55:
            pods.append(cl.pod("web-%03d" % i, cpu=cpu, memory=mem, labels={"app": "web"}))
        elif kind < 0.70:
            pods.append(cl.pod("db-%03d" % i, cpu=cpu, memory=mem, labels={"app": "db"},
                               nodeSelector={"disk": "ssd"}))
        elif kind < 0.85:
            app = "api%d" % (i % 4)
            spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                       "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]
            pods.append(cl.pod("api-%03d" % i, cpu=cpu, memory=mem, labels={"app": app},
                               topologySpreadConstraints=spread))
        else:
            app = "cache%d" % (i % 8)
            anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}}
            pods.append(cl.pod("cache-%03d" % i, cpu=cpu, memory=mem, labels={"app": app}, affinity=anti))
    return pods


def main():
    c = cl.Cluster(HOSTS, knobs=demo.KNOBS, kube="real")
    co = None
    try:
        print(demo.runs_on(c))
        demo.setup_objects(c)
        co = cl.Coordinator(c)
        pods = burst(PODS, SEED)
        names = [p["metadata"]["name"] for p in pods]
        start = time.time()
        for p in pods:
            c.create(demo.REPLICASETS, demo.replicaset(p))
        agents = demo.Agents(c)
        ok = demo.progress(c, agents, names, start, lambda s: s["running"] == len(names), TIMEOUT_S)
        elapsed = time.time() - start
        r = demo.plan_vs_binding(c, names)
        print("\n%d pods (seed %d) on %s: %s after %.1f s"
              % (PODS, SEED, HOSTS, "all Running" if ok else "NOT all Running", elapsed))
        print("%-44s %6d" % ("claims", r["claims"]))
        print("%-44s %6d" % ("  of them named in a pod's first nomination", r["first_round_claims"]))
        print("%-44s %6d" % ("pods nominated to a second claim", len(r["second_round"])))
        print("%-44s %6d" % ("pods running elsewhere than their claim's Node", len(r["misbound"])))
        kinds = {}
        for n in r["second_round"]:
            kinds[n.split("-")[0]] = kinds.get(n.split("-")[0], 0) + 1
        print("second-round pods by kind: %s" % (", ".join("%s %d" % kv for kv in sorted(kinds.items())) or "none"))
        for n, why in sorted(r.get("why", {}).items()):
            print("  %s: the scheduler said: %s" % (n, why or "nothing"))
        print("RESULT name=plan pods=%d second_round_pods=%d misbound_pods=%d claims=%d first_round_claims=%d "
              "running_s=%.1f" % (PODS, len(r["second_round"]), len(r["misbound"]), r["claims"],
                                  r["first_round_claims"], elapsed))
        return 0 if ok else 1
    finally:
        if co:
            co.stop()
        c.stop()


if __name__ == "__main__":
    sys.exit(main())
