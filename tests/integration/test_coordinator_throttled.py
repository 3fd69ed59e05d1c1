#!/usr/bin/env python3
# pvescale-coordinator throttled by kube-apiserver's API Priority and Fairness: under the chart's ServiceAccount
# (system:masters is exempt from APF and from the max-in-flight limits), a FlowSchema puts its every request on a
# priority level of one seat that rejects what does not fit (limitResponse Reject), on a kube-apiserver whose
# in-flight limits are low (20 reads, 10 writes): its informers, writers and the launcher meet real 429s with
# Retry-After from the start, the more so as three neighbours with the same ServiceAccount keep its one seat busy.
# Pending pods still become NodeClaims, VMs, Nodes and Running pods; the audit log shows
# the 429s it was answered; no call is refused for RBAC.
# SPDX-License-Identifier: Apache-2.0
import json
import os
import re
import ssl
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coordlib as cl  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1beta3"
LEVEL = "pvescale-one-seat"
SA = "system:serviceaccount:%s:%s" % (cl.CHART_NS, cl.CHART_RELEASE)

PRIORITY_LEVEL = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta3", "kind": "PriorityLevelConfiguration",
    "metadata": {"name": LEVEL},
    "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}},
}
FLOW_SCHEMA = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta3", "kind": "FlowSchema",
    "metadata": {"name": LEVEL},
    "spec": {
        "priorityLevelConfiguration": {"name": LEVEL}, "matchingPrecedence": 500,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{
            "subjects": [{"kind": "ServiceAccount",
                          "serviceAccount": {"name": cl.CHART_RELEASE, "namespace": cl.CHART_NS}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"],
                               "clusterScope": True}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }],
    },
}


def throttled(audit_log):
    """The coordinator's requests (its ServiceAccount, not the neighbours' user agent) answered 429, by verb."""
    out = {}
    with open(audit_log) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete" or (ev.get("user") or {}).get("username") != SA or \
                    (ev.get("userAgent") or "").startswith("Python-urllib"):  # the neighbours', below
                continue
            if (ev.get("responseStatus") or {}).get("code") == 429:
                out[ev.get("verb")] = out.get(ev.get("verb"), 0) + 1
    return out


class Neighbours:
    """Threads that keep the coordinator's priority level busy with its own ServiceAccount's token (lists of pods,
    as another replica or a script with the same credentials would), so that its requests meet a taken seat."""

    def __init__(self, c, threads=3):
        with open(c.kubeconfig) as f:
            self.token = re.search(r"(?m)^\s+token: (\S+)$", f.read()).group(1)
        self.url = c.sim.ep["kube"]["url"] + "/api/v1/pods?limit=500"
        self.ctx = ssl.create_default_context(cafile=c.sim.ep["kube"]["ca"])
        self.halt, self.answers = threading.Event(), {}
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(threads)]

    def run(self):
        req = urllib.request.Request(self.url, headers={"Authorization": "Bearer " + self.token})
        while not self.halt.is_set():
            try:
                with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                    code = r.status
                    r.read()
            except urllib.error.HTTPError as e:
                code = e.code
            except OSError:
                code = 0
            self.answers[code] = self.answers.get(code, 0) + 1
            time.sleep(0.005)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        for t in self.threads:
            t.join(15)


class ThrottledTest(cl.SharedControlPlaneTest):
    """On a real control plane of the class's own, with low in-flight limits."""
    hosts = "pve1=32intel64-2p8co2t+8ve,pve2=eas-tioga"
    apiserver_flags = {"max-requests-inflight": "20", "max-mutating-requests-inflight": "10"}

    def test_429s_from_priority_and_fairness_are_ridden_out(self):
        c = self.c
        c.run_as_chart()
        c.create(FLOWCONTROL + "/prioritylevelconfigurations", PRIORITY_LEVEL)
        c.create(FLOWCONTROL + "/flowschemas", FLOW_SCHEMA)
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        names = ["web-%d" % i for i in range(16)]
        with Neighbours(c) as busy:
            self.co = cl.Coordinator(c, wait_ready=False)
            cl.wait_for(self.co.ready, 120, interval=0.5, what="the coordinator ready (its informers listed)")
            for n in names:
                c.create(PODS, cl.pod(n, cpu="1500m", memory="1Gi"))
            cl.wait_for(lambda: c.pods_running(len(names)), 240, interval=1, what="every pod Running")
        self.assertGreater(busy.answers.get(429, 0), 0, busy.answers)
        claims = c.claims()
        self.assertTrue(claims)
        self.assertTrue(all(x.get("status", {}).get("launchStep") == "Initialized" for x in claims), claims)
        self.assertEqual(sorted(v["vmid"] for v in c.vms()), sorted(x["status"]["vmid"] for x in claims))
        seen = throttled(c.sim.ep["kube"]["audit_log"])
        writes = sum(n for verb, n in seen.items() if verb in ("create", "update", "patch", "delete"))
        self.assertGreater(writes, 0, "no write of the coordinator was answered 429: %s" % seen)
        self.assertEqual(c.denials(), [], "calls the chart's RBAC refused")
        self.assertIsNone(self.co.proc.poll(), "the coordinator is still running")
        self.assertTrue(self.co.ready())
        print("429s answered to the coordinator, by verb: %s" % json.dumps(seen, sort_keys=True), flush=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
