#!/usr/bin/env python3
"""demo: pending pods become pinned VMs, then half of them go and the nodes consolidate. A simulated Proxmox
cluster of 3 hosts (real topologies from ../shared/topologies), a real Kubernetes control plane (kube-apiserver,
kube-controller-manager, kube-scheduler from ../shared/k8s) with simulated kubelets, a real pvescale-agent per host,
and the real pvescale-coordinator. Prints a live progress view, a summary and how the coordinator's plan met the
scheduler (pods that needed a second provisioning round, pods running elsewhere than their claim's Node), then stops
everything it started, or, with --keep, leaves them running and prints where to look (a KUBECONFIG for kubectl, the
agents' topology pages, the coordinator's metrics) until Ctrl-C."""
# SPDX-License-Identifier: Apache-2.0
import argparse
import hashlib
import json
import os
import random
import signal
import ssl
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "integration"))
import coordlib as cl  # noqa: E402
from simlib import imageserv  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

HOSTS = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga,pve3=64amd64-4s2n4ca2co"
PODS = "/api/v1/namespaces/default/pods"
REPLICASETS = "/apis/apps/v1/namespaces/default/replicasets"
# Generous deadlines (a loaded 2-core CI machine runs it beside other tests); the demo checks behaviour, not speed.
TIMEOUT_S = int(os.environ.get("DEMO_TIMEOUT_S", "180"))
SETTLE_S = int(os.environ.get("DEMO_SETTLE_S", "240"))  # consolidation steps one disruption pass (10 s) apart
# Consolidate a few seconds after a node is Initialized, half of a pool's nodes at a time.
CONSOLIDATE = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
               "budgets": [{"nodes": "50%"}]}
# Static node addresses (no DHCP): the NodeClass's pool, as Proxmox's ipconfig0 and the cloud-init network-config.
IPAM = {"ipconfig": [{"interface": "net0", "ip": "10.0.0.0/24", "gw": "10.0.0.1", "range": "10.0.0.100-10.0.0.199",
                      "ip6": "fd00:1::/64", "gw6": "fd00:1::1"}],
        "nameservers": ["10.0.0.1"], "searchDomains": ["cluster.local"]}
# The nodes' template: a ProxmoxTemplate the coordinator builds on every host from a cloud image (download-url,
# import-from, template), served by this process (a qcow2 header: all the simulated Proxmox reads of an image).
IMAGE_PATH = "/noble-server-cloudimg-amd64.img"
IMAGE = imageserv.qcow2(3 * 2**30)
TEMPLATES = cl.GROUP + "/proxmoxtemplates"
# The simulated kubelet stops a pod at once on SIGTERM, as a pause container does.
EXIT = {"sim.pvescale.io/exit-on-term": "true"}
# Fast but not instant Proxmox and kubelets, so that every stage is visible.
KNOBS = ("clone_seconds=0.5", "start_seconds=0.2", "join_delay_seconds=1", "ready_delay_seconds=0.5",
         "pod_start_seconds=0.3")


def demo_pods():
    """About 40 pods of mixed sizes: generic ones, some that need an SSD node, a zone-spread set and a
    hostname anti-affinity set."""
    rnd = random.Random(7)
    pods = []
    for i in range(24):
        cpu = rnd.choice(["250m", "500m", "1", "1500m", "2"])
        mem = rnd.choice(["256Mi", "512Mi", "1Gi", "2Gi", "4Gi"])
        pods.append(cl.pod("web-%02d" % i, cpu=cpu, memory=mem, labels={"app": "web"}))
    for i in range(6):
        pods.append(cl.pod("db-%d" % i, cpu="2", memory="4Gi", labels={"app": "db"}, nodeSelector={"disk": "ssd"}))
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "api"}}}]
    for i in range(6):
        pods.append(cl.pod("api-%d" % i, cpu="1", memory="1Gi", labels={"app": "api"},
                           topologySpreadConstraints=spread))
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    for i in range(4):
        pods.append(cl.pod("cache-%d" % i, cpu="500m", memory="1Gi", labels={"app": "cache"}, affinity=anti))
    return pods


def replicaset(p):
    """Each demo pod is a ReplicaSet of one, so that a pod evicted by a consolidation is made again (and runs on
    another node), as a workload's pods are."""
    name = p["metadata"]["name"]
    labels = dict(p["metadata"]["labels"], demo=name)
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"demo": name}},
                     "template": {"metadata": {"labels": labels, "annotations": EXIT}, "spec": p["spec"]}}}


class Agents:
    """Read-only views of each host's agent (its reservations and VMs)."""

    def __init__(self, cluster):
        self.c = cluster
        self.ctx = ssl.create_default_context(cafile=cluster.ca)

    def get(self, host, path):
        a = self.c.agents[host]
        req = urllib.request.Request("https://%s:%d%s" % (a["ip"], self.c.agent_port, path),
                                     headers={"Authorization": "Bearer " + self.c.token})
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
            return json.load(r)

    def bound(self, host):
        return [r for r in self.get(host, "/v1/reservations")["reservations"] if r["state"] == "bound"]


def cpu_count(cpulist):
    n = 0
    for part in filter(None, (cpulist or "").split(",")):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def demo_pods_by_name(c):
    """The live pod of each demo ReplicaSet (one being deleted counts as gone), by the ReplicaSet's name."""
    return {(p["metadata"].get("labels") or {}).get("demo"): p for p in c.items(PODS)
            if not p["metadata"].get("deletionTimestamp")}


def initialized(claim):
    return any(k.get("type") == "Initialized" and k.get("status") == "True"
               for k in (claim.get("status") or {}).get("conditions", []))


def snapshot(c, agents, names):
    pods = demo_pods_by_name(c)
    phases = [(pods[n].get("status") or {}).get("phase") for n in names if n in pods]
    running, pending = phases.count("Running"), phases.count("Pending")
    claims = c.claims()
    joined = sum(1 for x in claims if initialized(x))
    pinned = {h: sum(cpu_count(r["cpus"]) for r in agents.bound(h)) for h in sorted(c.agents)}
    return {"pending": pending, "claims": len(claims), "joined": joined, "vms": len(c.vms()),
            "pinned": pinned, "running": running}


def line(t, s, total):
    pinned = " ".join("%s:%-3d" % (h, n) for h, n in s["pinned"].items())
    return ("t+%5.1fs  pending %2d -> claims %2d (joined %2d) -> VMs %2d -> pinned CPUs %s -> running %2d/%d"
            % (t, s["pending"], s["claims"], s["joined"], s["vms"], pinned, s["running"], total))


def summary(c, agents, elapsed):
    print("\nVMs per host (the agent's placement: host CPUs, and memory per NUMA node)")
    print("%-5s %-6s %-14s %-6s %-12s %-22s %s" % ("host", "vmid", "shape", "vCPUs", "address", "host CPUs",
                                                     "NUMA memory"))
    claims = {x["status"].get("vmid"): x for x in c.claims()}
    for host in sorted(c.agents):
        for r in sorted(agents.bound(host), key=lambda r: r["vmid"]):
            claim = claims.get(r["vmid"], {})
            numa = ", ".join("node%d %d MiB" % (n["node"], n["memory_bytes"] >> 20) for n in r["numa"])
            ipconfig = (claim.get("status") or {}).get("ipconfig", "")  # ipconfig0=ip=10.0.0.100/24,...
            address = ipconfig.split("ip=")[1].split("/")[0] if "ip=" in ipconfig else "dhcp"
            print("%-5s %-6d %-14s %-6d %-12s %-22s %s" % (host, r["vmid"],
                                                            claim.get("spec", {}).get("instanceType", "?"), r["vcpus"],
                                                            address, r["cpus"], numa))
    print("\nAll pods Running %.1f s after the first pending pod." % elapsed)


def explain_pending(c, names):
    pods = demo_pods_by_name(c)
    for n in names:
        if (pods.get(n, {}).get("status") or {}).get("phase") == "Running":
            continue
        if n not in pods:
            print("  %-10s no pod" % n)
            continue
        events = sorted(c.pod_events(pods[n]["metadata"]["name"]), key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        why = events[-1]["reason"] + ": " + events[-1]["message"] if events else "no event"
        print("  %-10s %s" % (n, why))


def claim_of(event):
    """The claim a Nominated event names ("Pod should schedule on: nodeclaim/NAME (...)")."""
    msg = event.get("message") or ""
    at = msg.find("nodeclaim/")
    return msg[at + 10:].split(" ")[0] if at >= 0 else None


def plan_vs_binding(c, names):
    """How the coordinator's plan met the real scheduler, from its Nominated events: per demo pod, the claims it was
    nominated to (in order) and the node it runs on. A pod nominated to a second claim needed a second
    provisioning round; a pod that runs elsewhere than the Node of the claim it was last nominated to was bound by
    the scheduler to a node the plan gave it no room on (or had room for it after all)."""
    pods = demo_pods_by_name(c)
    node_of = {x["metadata"]["name"]: (x.get("status") or {}).get("nodeName") for x in c.claims()}
    evs = c.items("/api/v1/namespaces/default/events?fieldSelector=reason=Nominated")
    by_pod = {}
    for e in sorted(evs, key=lambda e: int(e["metadata"]["resourceVersion"])):  # etcd orders them
        claim = claim_of(e)
        seq = by_pod.setdefault(e["involvedObject"]["name"], [])
        if claim and claim not in seq:
            seq.append(claim)
    first_round = {seq[0] for seq in by_pod.values() if seq}
    out = {"second_round": [], "misbound": [], "claims": len(node_of), "first_round_claims": len(first_round)}
    for n in names:
        pod = pods.get(n)
        if not pod:
            continue
        seq = by_pod.get(pod["metadata"]["name"], [])
        bound = (pod.get("spec") or {}).get("nodeName")
        if len(seq) > 1:
            out["second_round"].append(n)
            out.setdefault("why", {})[n] = scheduler_said(c, pod["metadata"]["name"])
        if seq and bound and node_of.get(seq[-1]) != bound:
            out["misbound"].append("%s (nominated to %s, runs on %s)" % (n, seq[-1], bound))
    return out


def scheduler_said(c, pod):
    """kube-scheduler's last FailedScheduling message on the pod (why it went pending again), or ""."""
    evs = [e for e in c.pod_events(pod) if e.get("reason") == "FailedScheduling"]
    evs.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return evs[-1].get("message", "") if evs else ""


def report_plan(c, names):
    r = plan_vs_binding(c, names)
    print("\nThe plan against the scheduler: %d claims (%d in the first round); %d pods needed a second provisioning "
          "round%s; %d pods run on a node other than their claim's%s."
          % (r["claims"], r["first_round_claims"], len(r["second_round"]),
             (" (" + ", ".join(r["second_round"]) + ")") if r["second_round"] else "", len(r["misbound"]),
             (":\n  " + "\n  ".join(r["misbound"])) if r["misbound"] else ""))
    for n, why in sorted(r.get("why", {}).items()):
        print("  %s: the scheduler said: %s" % (n, why or "nothing"))
    print("RESULT second_round_pods=%d misbound_pods=%d claims=%d first_round_claims=%d"
          % (len(r["second_round"]), len(r["misbound"]), r["claims"], r["first_round_claims"]), flush=True)
    return r


def template(image_url):
    return {"apiVersion": "pvescale.io/v1alpha1", "kind": "ProxmoxTemplate", "metadata": {"name": "ubuntu-noble"},
            "spec": {"sourceImage": {"url": image_url, "imageName": "noble.qcow2",
                                     "checksum": hashlib.sha256(IMAGE).hexdigest(), "checksumType": "sha256"},
                     "storageIDs": ["local", "local-lvm"], "machine": "q35", "agent": {"enabled": True},
                     "tags": ["k8s"]}}


def setup_objects(c, image_url):
    c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
    c.create(TEMPLATES, template(image_url))
    c.create(cl.GROUP + "/proxmoxnodeclasses",
             cl.nodeclass(instanceTemplateRef={"kind": "ProxmoxTemplate", "name": "ubuntu-noble"},
                          metadataOptions={"type": "cdrom"}, ipam=IPAM))
    c.create(cl.GROUP + "/nodepools", cl.nodepool("general", disruption=CONSOLIDATE))
    c.create(cl.GROUP + "/nodepools", cl.nodepool("ssd", labels={"disk": "ssd"}, disruption=CONSOLIDATE))


def template_ready(c):
    """Waits until the coordinator has built the ProxmoxTemplate on every host, and says where."""
    start = time.time()
    print("Building the ProxmoxTemplate ubuntu-noble on every host (download-url, import-from, template) ...")
    while True:
        t = c.sim.kube("GET", TEMPLATES + "/ubuntu-noble").json
        st = t.get("status") or {}
        hosts = [h for h in st.get("hosts") or [] if h.get("state") == "Ready"]
        if len(hosts) == len(c.agents):
            built = ["%s VM %d from %s" % (h["host"], h["vmid"], h["image"])
                     for h in sorted(hosts, key=lambda h: h["host"])]
            print("  built in %.1f s: %s\n" % (time.time() - start, ", ".join(built)))
            return True
        if time.time() - start > TIMEOUT_S:
            print("  not built after %d s: %s" % (TIMEOUT_S, json.dumps(st)))
            return False
        time.sleep(0.5)


def progress(c, agents, names, start, done, timeout):
    """Prints a line whenever the view changes, until done(view) holds (True) or timeout s pass (False)."""
    last = None
    while True:
        s = snapshot(c, agents, names)
        if s != last:
            print(line(time.time() - start, s, len(names)), flush=True)
            last = s
        if done(s):
            return True
        if time.time() - start > timeout:
            return False
        time.sleep(0.5)


def scale_up(c, agents, names):
    print("Coordinator ready. Creating %d pending pods (generic, nodeSelector disk=ssd, zone spread, "
          "hostname anti-affinity), each a ReplicaSet of one.\n" % len(names))
    start = time.time()
    for p in demo_pods():
        c.create(REPLICASETS, replicaset(p))
    if not progress(c, agents, names, start, lambda s: s["running"] == len(names), TIMEOUT_S):
        print("\nNot every pod is Running after %d s:" % TIMEOUT_S)
        explain_pending(c, names)
        return False
    summary(c, agents, time.time() - start)
    report_plan(c, names)
    return True


def decisions(co):
    return sum(v for k, v in co.metrics().items() if k.startswith("pvescale_coordinator_disruption_decisions_total"))


def settled(c, co, history):
    """No disruption decision for 11 s (a whole pass decided nothing, consolidateAfter being shorter than a pass)
    and nothing launching or terminating."""
    history.append((time.time(), decisions(co)))
    recent = [h for h in history if h[0] > history[-1][0] - 11]
    claims = c.claims()
    return (history[-1][0] - history[0][0] > 11 and len({h[1] for h in recent}) == 1 and
            len(claims) == len(c.vms()) and all(initialized(x) and not x["metadata"].get("deletionTimestamp")
                                                for x in claims))


def scale_down(c, co, agents, names):
    """Deletes every other ReplicaSet (its pod goes with it), then shows the nodes consolidate."""
    before = snapshot(c, agents, names)
    gone, kept = names[1::2], names[0::2]
    print("\nDeleting half the pods (%d of %d); the NodePools consolidate (WhenEmptyOrUnderutilized, "
          "consolidateAfter 5s).\n" % (len(gone), len(names)))
    start = time.time()
    for n in gone:
        r = c.sim.kube("DELETE", REPLICASETS + "/" + n)
        assert r.status == 200, r
    history = []
    ok = progress(c, agents, kept, start, lambda s: s["running"] == len(kept) and settled(c, co, history), SETTLE_S)
    after = snapshot(c, agents, kept)
    print("\n%-8s %6s %6s" % ("", "before", "after"))
    for k in ("claims", "vms", "running"):
        print("%-8s %6d %6d" % (k, before[k], after[k]))
    print("%-8s %6d %6d" % ("pinned", sum(before["pinned"].values()), sum(after["pinned"].values())))
    if not ok:
        print("\nNot settled after %d s:" % SETTLE_S)
        explain_pending(c, kept)
        return False
    print("\nSettled %.1f s after the deletion." % (time.time() - start))
    return True


def keep_running(c, co):
    """Prints where to look at the running demo, then waits for Ctrl-C (or SIGTERM)."""
    kubeconfig = c.sim.ep["kube"]["kubeconfig"]
    print("\nLeft running; Ctrl-C stops everything.\n")
    print("  kubectl (%s):" % ("the real kube-apiserver, as its admin" if c.sim.real else "the simulated API server"))
    print("    export KUBECONFIG=%s" % kubeconfig)
    print("    kubectl get nodepools,nodeclaims,proxmoxnodeclasses,proxmoxtemplates")
    print("    kubectl get nodes -L node.kubernetes.io/instance-type,topology.kubernetes.io/zone")
    print("    kubectl describe nodeclaims; kubectl get events")
    print("  The agents' topology pages (certificates from the CA %s; paste the token when asked):" % c.ca)
    for host, a in sorted(c.agents.items()):
        print("    %-5s https://%s:%d/ui" % (host, a["ip"], c.agent_port))
    print("    token: %s" % c.token)
    print("    curl --cacert %s -H 'Authorization: Bearer %s' https://%s:%d/v1/topology"
          % (c.ca, c.token, c.agents[sorted(c.agents)[0]]["ip"], c.agent_port))
    print("  The coordinator: http://127.0.0.1:%d/metrics, its log %s" % (co.metrics_port, co.log_path))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def runs_on(c):
    """What the demo's Kubernetes side is: the real control plane's version and address."""
    url = c.sim.ep["kube"]["url"]
    r = c.sim.kube("GET", "/version")
    assert r.status == 200, r
    return ("Kubernetes %s control plane: kube-apiserver, kube-controller-manager, kube-scheduler on %s; "
            "simulated kubelets" % (r.json["gitVersion"], url.split("//")[1]))


def run(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true",
                    help="leave the simulator, the agents and the coordinator running and print where to look")
    args = ap.parse_args(argv)
    print("Starting the simulated Proxmox cluster (%s), %s and one pvescale-agent per host ..."
          % (HOSTS, "a Kubernetes control plane"))
    c = cl.Cluster(HOSTS, knobs=KNOBS)
    co = images = None
    try:
        print(runs_on(c))
        images = imageserv.ImageServer({IMAGE_PATH: IMAGE})
        setup_objects(c, images.base + IMAGE_PATH)
        co = cl.Coordinator(c)
        agents = Agents(c)
        names = [p["metadata"]["name"] for p in demo_pods()]
        ok = template_ready(c) and scale_up(c, agents, names) and scale_down(c, co, agents, names)
        if args.keep:
            keep_running(c, co)
        return 0 if ok else 1
    finally:
        if co:
            co.stop()
        if images:
            images.stop()
        c.stop()
        print("Stopped the coordinator, the agents and the simulator.")


if __name__ == "__main__":
    sys.exit(run())
