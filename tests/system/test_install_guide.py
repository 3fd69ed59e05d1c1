#!/usr/bin/env python3
"""System test: docs/install.md followed step by step on the simulator, its commands run as written.

1. The agent on every host: the package's postinst on each host of a Proxmox cluster at once (a /etc/pve tree with
   an openssl cluster CA and node certificates), then each agent started with no path given (the installed
   layout: the cluster's one token, the host's Proxmox certificate).
2. The Proxmox role: the guide's `pveum` block, run by bash through tests/sim/pveum against a fresh simulated
   cluster that checks every call's privileges as Proxmox VE does.
3. The coordinator: the guide's Helm block, run by bash: `scp` of the token and the cluster CA from a host (a shim
   copies from the /etc/pve tree), `kubectl create secret` and `helm install` with the real kubectl and helm (as
   written: server-side apply) into a real Kubernetes control plane (../shared/k8s, the simulator's real mode). In
   the values heredoc only what names this test's cluster changes: the Proxmox URL and the token secret `pveum`
   printed, the region's name (the simulated kubelets' providerIDs carry it), the simulator's CA for Proxmox, the
   agents' port and their addresses (all simulated hosts say 127.0.0.1 in /cluster/status).
4. The image the guide builds (packaging/build-image, unpacked with skopeo and umoci as tests/system/test_image.py
   does) runs as the installed Deployment says, as a runtime would run the pod (its own mount and PID namespace,
   the root read-only, user 65532): its args and env, the config and agents Secrets helm and kubectl created
   mounted where the Deployment mounts them, the in-cluster account (KUBERNETES_SERVICE_HOST and a token of the
   ServiceAccount helm created, in /var/run/secrets/kubernetes.io/serviceaccount). Pending pods become VMs whose
   reservations the agents bind and pin, and the pods run. Nothing is refused by the Proxmox role or the chart's
   RBAC."""
# SPDX-License-Identifier: Apache-2.0
import base64
import json
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import coordlib as cl  # noqa: E402
from test_coordinator_agents import ClusterLayout  # noqa: E402
from test_coordinator_launch import cluster_info  # noqa: E402
from test_coordinator_pverole import PVEUM, doc_script, install_md  # noqa: E402
import test_helm  # noqa: E402
import test_image  # noqa: E402

RELEASE, NS = "pvescale-coordinator", "kube-system"
PODS = "/api/v1/namespaces/default/pods"


def helm_block():
    """The guide's shell block that installs the chart."""
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", install_md(), re.S | re.M) if "helm install" in b]
    assert len(blocks) == 1, "docs/install.md: want one ```sh block with helm install, found %d" % len(blocks)
    return blocks[0]


def write_shim(bindir, name, text):
    path = os.path.join(bindir, name)
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\nset -euo pipefail\n" + text)
    os.chmod(path, 0o755)


class InstallGuideTest(cl.CoordinatorTest):
    def setUp(self):
        self.c = ClusterLayout("pve1=eas-tioga,pve2=32intel64-2p8co2t+8ve", kube="real")
        self.co = None
        c = self.c
        self.work = os.path.join(c.tmp, "operator")
        bindir = os.path.join(c.tmp, "bin")
        os.makedirs(self.work)
        os.makedirs(bindir)
        # The guide runs from a checkout of the repository (deploy/helm/...): the operator's directory has it.
        os.symlink(os.path.join(cl.SRC, "deploy"), os.path.join(self.work, "deploy"))
        os.symlink(PVEUM, os.path.join(bindir, "pveum"))
        os.symlink(os.path.join(test_helm.TOOLS, "kubectl"), os.path.join(bindir, "kubectl"))
        # scp root@<host>:/etc/pve/<path>... <dir>: every host sees the same /etc/pve (pmxcfs).
        write_shim(bindir, "scp", 'dest="${@: -1}"\nfor src in "${@:1:$#-1}"; do\n'
                   '  cp "%s/${src#*:/etc/pve/}" "$dest"\ndone\n' % c.pve)
        os.symlink(test_helm.HELM, os.path.join(bindir, "helm"))
        self.env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], PVESCALE_SIM_STATE=c.sim.state,
                        KUBECONFIG=c.sim.ep["kube"]["kubeconfig"])
        self.assertEqual(c.sim.admin("POST", "/actions/pve-access-reset", {"region": "r1"}).status, 200)

    def sh(self, script, what):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=self.env, cwd=self.work,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, "%s failed:\n%s\n%s%s" % (what, script, r.stdout, r.stderr))
        return r.stdout

    def proxmox_role(self):
        out = self.sh(doc_script(), "the guide's pveum commands")
        rows = dict(re.findall(r"^│ (full-tokenid|value) +│ (\S+) +│$", out, re.M))
        self.assertIn("value", rows, "no token secret printed by:\n" + out)
        return rows["full-tokenid"], rows["value"]

    def values_for_this_cluster(self, block, token_id, secret):
        """The Helm block with the values that name this test's cluster (and nothing else) changed."""
        c = self.c
        url = c.sim.ep["pve"]["r1"]["url"]
        hosts = "".join("\n      %s: %s" % (n, a["ip"]) for n, a in sorted(c.agents.items()))
        for old, new in (("https://pve1.example.com:8006/api2/json", url),
                         ('token_id: "pvescale@pve!coordinator"', 'token_id: "%s"' % token_id),
                         ('token_secret: "..."', 'token_secret: "%s"' % secret),
                         ("      region: cluster-1", "      region: r1\n      ca_file: %s" % c.sim.ep["ca_file"]),
                         ("    port: 8207", "    port: %d" % c.agent_port),
                         ("    ca_file: /etc/pvescale/agents/ca.crt",
                          "    ca_file: /etc/pvescale/agents/ca.crt\n    hosts:" + hosts)):
            self.assertIn(old, block, "docs/install.md's Helm block changed: %r is gone" % old)
            block = block.replace(old, new)
        return block

    def secret_files(self, name):
        r = self.c.sim.kube("GET", "/api/v1/namespaces/%s/secrets/%s" % (NS, name))
        self.assertEqual(r.status, 200, "Secret %s/%s" % (NS, name))
        return {k: base64.b64decode(v) for k, v in r.json["data"].items()}

    def mount(self, files, where):
        """A Secret's files as the pod would see them under where (a directory of ours)."""
        os.makedirs(where, exist_ok=True)
        for k, v in files.items():
            with open(os.path.join(where, k), "wb") as f:
                f.write(v)

    def put(self, root, path, data, mode=0o444):
        full = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.chmod(full, mode)
        os.chown(full, 65532, 65532)

    def run_installed(self):
        """The guide's image, run as the installed Deployment says: the pod's mounts and in-cluster account."""
        c = self.c
        dep = c.sim.kube("GET", "/apis/apps/v1/namespaces/%s/deployments/%s" % (NS, RELEASE)).json
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        archive, _ = test_image.build(os.path.join(c.tmp, "image"))
        root, process, _ = test_image.copy_and_unpack(archive, test_image.project_version(), c.tmp)
        self.assertEqual(test_image.failures, [], "the image built and unpacked")
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        config = None
        for v in pod.get("volumes", []):
            m = mounts.get(v["name"])
            if "secret" not in v or not m:
                continue
            for name, data in self.secret_files(v["secret"]["secretName"]).items():
                if m.get("subPath") in (None, name):  # a subPath mounts that one key at mountPath itself
                    self.put(root, m["mountPath"] if m.get("subPath") else os.path.join(m["mountPath"], name), data)
                    config = data.decode() if name == "config.yaml" else config
        self.assertIsNotNone(config, "no config.yaml among the Deployment's Secrets")
        ca = open(c.sim.ep["ca_file"]).read()
        self.put(root, c.sim.ep["ca_file"], ca)  # the Proxmox CA the values name (this test's cluster)
        r = c.sim.kube("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (NS, RELEASE),
                       {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
        self.assertEqual(r.status, 201, "a token of the ServiceAccount helm created")
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        for name, data in (("token", r.json["status"]["token"]), ("ca.crt", ca), ("namespace", NS)):
            self.put(root, os.path.join(sa, name), data)
        api = re.match(r"https://([^:/]+):(\d+)", c.sim.ep["kube"]["url"])
        self.health, self.metrics_port = cl.free_port(), cl.free_port()
        ports = {"--metrics-port": self.metrics_port, "--health-port": self.health}
        args = []
        for a in container.get("args", []):
            flag, _, value = a.partition("=")
            args.append("%s=%s" % (flag, ports[flag]) if flag in ports else a)
        fields = {"metadata.name": RELEASE + "-0", "metadata.namespace": NS}
        env = {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
               for e in container.get("env", [])}
        env.update(KUBERNETES_SERVICE_HOST=api.group(1), KUBERNETES_SERVICE_PORT=api.group(2))
        self.ctr = test_image.Container(root, process, args, os.path.join(c.tmp, "coordinator.log"), extra_env=env)
        self.assertTrue(self.ctr.started(), "the image's entrypoint runs:\n" + open(self.ctr.log_path).read())
        ready = lambda: test_image.http_get(self.health, "/readyz")[0] == 200  # noqa: E731
        cl.wait_for(lambda: ready() or self.ctr.proc.poll() is not None, 30, what="/readyz")
        self.assertTrue(ready(), "the coordinator in the image is ready:\n" + self.ctr.logtext())

    def tearDown(self):
        if getattr(self, "ctr", None):
            self.stop_container()
        super().tearDown()

    def stop_container(self):
        rc = self.ctr.stop()
        with open(self.ctr.log_path) as f:
            tail = f.read().splitlines(True)[-40:]
        sys.stderr.write("coordinator (image) exit %s, log tail:\n%s\n" % (rc, "".join(tail)))

    def test_the_guide_step_by_step(self):
        c = self.c
        self.assertEqual([c.postinst[n][0] for n in sorted(c.agents)], [0, 0], c.postinst)
        token_id, secret = self.proxmox_role()
        self.sh(self.values_for_this_cluster(helm_block(), token_id, secret), "the guide's Helm block")
        c.create("/api/v1/namespaces/kube-public/configmaps", cluster_info(c.sim))
        c.create(cl.GROUP + "/proxmoxnodeclasses", cl.nodeclass(metadataOptions={"type": "cdrom"}))
        c.create(cl.GROUP + "/nodepools", cl.nodepool())
        self.run_installed()
        for i in range(2):
            c.create(PODS, cl.pod("web-%d" % i, cpu="1500m", memory="1Gi"))
        try:
            cl.wait_for(lambda: c.pods_running(2), 90, interval=0.5, what="the pods Running on new nodes")
        except AssertionError:
            rep = c.sim.admin("GET", "/report").json
            sys.stderr.write("simulator's report: %s\n" % json.dumps({k: rep[k] for k in ("pods", "vms", "nodes")}))
            raise
        claims = c.claims()
        self.assertGreaterEqual(len(claims), 1)
        def pinned():
            return {v["vmid"]: v["pinned_cpus"] for v in c.sim.admin("GET", "/report").json["vms"]}
        for claim in claims:
            st = claim["status"]
            self.assertTrue(st.get("reservationID"), "reserved with the host's agent: %s" % st)
            vm = self.agent_vm(st["host"], st["vmid"])
            self.assertEqual((vm.get("reservation") or {}).get("state"), "bound", vm)
            cl.wait_for(lambda: pinned().get(st["vmid"]), 20, interval=0.5,
                        what="VM %d's vCPU threads pinned by its host's agent" % st["vmid"])
        self.assertEqual(c.denials(), [], "calls the chart's RBAC refused")
        denied = [d for d in c.sim.admin("GET", "/pve-access").json["r1"]["denials"] if d["user"] == token_id]
        self.assertEqual(denied, [], "calls the guide's Proxmox role refused")
        status, metrics = test_image.metric_values(self.metrics_port)
        self.assertEqual(status, 200)
        self.assertEqual(metrics.get("pvescale_coordinator_agent_fallbacks_total"), 0)

    def agent_vm(self, host, vmid):
        a = self.c.agents[host]
        p = subprocess.run(["curl", "-sS", "--fail", "--cacert", self.c.ca, "--resolve",
                            "%s:%d:%s" % (host, self.c.agent_port, a["ip"]), "-H", "Authorization: Bearer " +
                            self.c.token, "https://%s:%d/v1/vms/%d" % (host, self.c.agent_port, vmid)],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)


if __name__ == "__main__":
    unittest.main()
