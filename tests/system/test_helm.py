"""System test: the Helm chart with the real helm v4 (and kubectl v1.35 from .ci/deps, in .ci/tools/bin).

`helm lint --strict` with the default values and with ci/full-values.yaml (every option set); a value the
chart's values.schema.json refuses fails lint and template; `helm template` of both values files, every object
validated against ../shared/data/k8s-openapi (unknown fields refused; rbac.authorization.k8s.io from swagger.json,
which the v3 files do not cover) or, for our custom resources, the CRDs' openAPIV3Schema; the ServiceMonitor
(monitoring.coreos.com, in neither) checked for the shape prometheus-operator needs; and the in-house renderer
(tests/unit/helmrender.c, build/tests/unit/helm_render) must render exactly what helm renders. Then helm install and
helm upgrade (changed config and setting, server-side apply, helm v4's default) into a real Kubernetes control plane
(../shared/k8s, the simulator's real mode), the CRD upgrade step of docs/install.md
(`kubectl apply -f` of the chart's crds/, which helm never upgrades), and the coordinator run with the args and
env of the Deployment helm created, the config of the Secret it created and a token of the ServiceAccount it created
(TokenRequest API), so the real RBAC authorizer checks its calls by the RBAC helm installed: ready, a pending pod
gets a NodeClaim of the chart's NodePool, and no call is refused (kube-apiserver's audit log, GET /kube-denials)."""
# SPDX-License-Identifier: Apache-2.0
import copy
import glob
import json
import os
import base64
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sim"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import coordlib  # noqa: E402
from checks import check, summary  # noqa: E402
from simlib import k8sschema  # noqa: E402

SRC = os.environ.get("PVESCALE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PVESCALE_BUILD_DIR", os.path.join(SRC, "build"))
SHARED = os.environ.get("PVESCALE_SHARED", os.path.join(SRC, "..", "shared"))
TOOLS = os.environ.get("PVESCALE_TOOLS", os.path.join(SRC, ".ci", "tools", "bin"))
CHART = os.path.join(SRC, "deploy", "helm", "pvescale-coordinator")
FULL = os.path.join(CHART, "ci", "full-values.yaml")
HELM = os.path.join(TOOLS, "helm")
RENDER = os.path.join(BUILD, "tests", "unit", "helm_render")
RELEASE, NS = "pvescale", "kube-system"


def run(*args, stdin=None):
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)


def yaml_docs(text):
    """The objects of a multi-document YAML stream, parsed by the project's libyaml reader."""
    p = run(RENDER, "--yaml-to-json", stdin=text)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout)


def helm_template(values=None, *extra):
    args = [HELM, "template", RELEASE, CHART, "--namespace", NS] + (["-f", values] if values else []) + list(extra)
    return run(*args)


def schemas():
    sch = k8sschema.Schemas(os.path.join(SHARED, "data", "k8s-openapi", "v3"))
    sch.preload()
    with open(os.path.join(SHARED, "data", "k8s-openapi", "swagger.json")) as f:
        defs = json.load(f)["definitions"]
    for name, s in defs.items():
        for g in s.get("x-kubernetes-group-version-kind", []):
            if g.get("group") == "rbac.authorization.k8s.io":
                sch.comps.setdefault(name, s)
                sch.gvk.setdefault((g["group"], g["version"], g["kind"]), name)
    crds = {}
    for path in sorted(glob.glob(os.path.join(SRC, "deploy", "crds", "*.yaml"))):
        with open(path) as f:
            for crd in yaml_docs(f.read()):
                for v in crd["spec"]["versions"]:
                    crds[(crd["spec"]["group"], v["name"], crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return sch, crds


def problems(pr):
    return ([pr.decode] if pr.decode else []) + ["%s: %s" % (f, m) for f, _, m in pr.invalid] + \
        ["unknown field %s" % u for u in pr.unknown]


def check_service_monitor(sm, objs):
    """prometheus-operator's ServiceMonitor is in no schema here: check it selects our metrics Service by its
    labels, in our namespace, through a port that Service names."""
    spec = sm.get("spec", {})
    svcs = [o for o in objs if o["kind"] == "Service"
            and all(o["metadata"].get("labels", {}).get(k) == v
                    for k, v in spec.get("selector", {}).get("matchLabels", {}).items())]
    check(len(svcs) == 1, "ServiceMonitor selects exactly one Service (%d)" % len(svcs))
    ports = {p.get("name") for s in svcs for p in s["spec"].get("ports", [])}
    check(all(e.get("port") in ports for e in spec.get("endpoints", [])) and spec.get("endpoints"),
          "ServiceMonitor endpoints name ports of that Service (%s)" % sorted(p for p in ports if p))
    check(spec.get("namespaceSelector", {}).get("matchNames") == [NS], "ServiceMonitor namespaceSelector is the release's")


def validate(objs, sch, crds, label):
    for o in objs:
        group, _, version = o["apiVersion"].rpartition("/")
        what = "%s %s/%s (%s)" % (label, o["kind"], o["metadata"]["name"], o["apiVersion"])
        if group == "monitoring.coreos.com":
            check_service_monitor(o, objs)
            continue
        name = sch.schema_for(group, version, o["kind"])
        if name:
            errs = problems(sch.validate_builtin(copy.deepcopy(o), name))
        elif (group, version, o["kind"]) in crds:
            # As kube-apiserver does: metadata is ObjectMeta, the rest is the CRD's structural schema.
            body = copy.deepcopy(o)
            meta = body.pop("metadata")
            errs = problems(sch.validate_crd(body, crds[(group, version, o["kind"])])) + problems(
                sch.validate_builtin(meta, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"))
        else:
            errs = ["no schema"]
        check(not errs, "%s is valid%s" % (what, "" if not errs else ": " + "; ".join(errs)))


def compare_inhouse(objs, values, label):
    overrides = "{}"
    if values:
        with open(values) as f:
            overrides = json.dumps(yaml_docs(f.read())[0])
    p = run(RENDER, CHART, NS, overrides)
    check(p.returncode == 0, "%s: in-house renderer runs (%s)" % (label, p.stderr.strip()[:200]))
    if p.returncode != 0:
        return
    mine = [d["object"] for d in json.loads(p.stdout)]
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    a, b = sorted(objs, key=key), sorted(mine, key=key)
    diff = [key(x) for x, y in zip(a, b) if x != y]
    check(len(a) == len(b) and not diff, "%s: in-house renderer output equals helm template's (%d vs %d objects%s)" % (
        label, len(a), len(b), ", differ: %s" % diff if diff else ""))
    for x, y in zip(a, b):
        if x != y:
            print("helm:     " + json.dumps(x, sort_keys=True)[:2000])
            print("in-house: " + json.dumps(y, sort_keys=True)[:2000])
            break


def helm_kube(kubeconfig, *args):
    """helm against the real control plane (server-side apply, helm v4's default)."""
    return run(HELM, "--kubeconfig", kubeconfig, *args)


def sa_kubeconfig(c, tmp):
    """A kubeconfig with a token of the release's ServiceAccount (TokenRequest API), as the pod would mount."""
    r = c.sim.kube("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (NS, RELEASE),
                   {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    check(r.status == 201, "a token for the ServiceAccount helm created (%d)" % r.status)
    path = os.path.join(tmp, "kubeconfig-sa")
    with open(c.sim.ep["kube"]["kubeconfig"]) as f:
        text = f.read()
    token = (r.json or {}).get("status", {}).get("token", "none")
    # the admin's client certificate gives way to the token (as coordlib.Cluster.run_as_chart does)
    sa = re.sub(r"(?m)^\s+client-(certificate|key)-data: .*\n", "", text)
    sa = re.sub(r"(?m)^(\s+)user:\s*$", lambda m: m.group(0) + "\n" + m.group(1) + "  token: " + token, sa)
    check("token: " + token in sa and "client-certificate" not in sa and "client-key" not in sa,
          "the coordinator's kubeconfig carries the ServiceAccount's token, not the admin's certificate")
    with open(path, "w") as f:
        f.write(sa)
    return path


def deployment_command(dep, config_path, kubeconfig):
    """The coordinator's command line as the Deployment runs it, with the config mounted at config_path, the
    ports moved to free ones and the in-cluster service account replaced by the simulator's kubeconfig."""
    c = dep["spec"]["template"]["spec"]["containers"][0]
    ports = {"--metrics-port": coordlib.free_port(), "--health-port": coordlib.free_port()}
    args = []
    for a in c.get("args", []):
        flag, _, value = a.partition("=")
        if flag == "--config":
            value = config_path
        args.append("%s=%s" % (flag, ports.get(flag, value)) if value else a)
    fields = {"metadata.name": RELEASE + "-0", "metadata.namespace": dep["metadata"]["namespace"]}
    env = {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
           for e in c.get("env", [])}
    return [coordlib.COORDINATOR, "--kubeconfig", kubeconfig] + args, env, ports["--health-port"]


def kubectl_table(kc, *args):
    """kubectl get ... output as [{COLUMN: value}] (columns split at the header's offsets)."""
    p = run(os.path.join(TOOLS, "kubectl"), "--kubeconfig", kc, "get", *args)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    if p.returncode != 0 or not lines:
        print(p.stderr)
        return []
    head = lines[0]
    starts = [i for i in range(len(head)) if head[i] != " " and (i == 0 or head[i - 1] == " ")]
    names = [head[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    print("     $ kubectl get " + " ".join(args) + "\n     " + "\n     ".join(lines))
    return [{n: ln[a:b].strip() if b else ln[a:].strip() for n, a, b in zip(names, starts, starts[1:] + [None])}
            for ln in lines[1:]]


def crd_upgrade(c, kc, tmp):
    """docs/install.md's CRD upgrade step: helm never upgrades crds/, so `kubectl apply -f <chart>/crds/` does. A
    changed CRD (a printer column renamed, as a new release might) applied with the real kubectl reaches the
    cluster, and applying the chart's own CRDs puts them back."""
    crds = os.path.join(CHART, "crds")
    kubectl = os.path.join(TOOLS, "kubectl")
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodeclaims.pvescale.io"
    columns = lambda: [x["name"] for x in c.sim.kube("GET", path).json["spec"]["versions"][0].get(  # noqa: E731
        "additionalPrinterColumns", [])]
    before = columns()
    newer = os.path.join(tmp, "crds")
    os.mkdir(newer)
    with open(os.path.join(crds, "pvescale.io_nodeclaims.yaml")) as f:
        text = f.read()
    with open(os.path.join(newer, "pvescale.io_nodeclaims.yaml"), "w") as f:
        f.write(text.replace("- name: Ready", "- name: Joined", 1))
    p = run(kubectl, "--kubeconfig", kc, "apply", "-f", newer)
    check(p.returncode == 0 and "configured" in p.stdout and "Joined" in columns() and "Ready" not in columns(),
          "kubectl apply -f of a changed CRD upgrades it (columns %s -> %s)%s" % (
              before, columns(), "" if p.returncode == 0 else ": " + p.stderr[-300:]))
    p = run(kubectl, "--kubeconfig", kc, "apply", "-f", crds)
    check(p.returncode == 0 and columns() == before, "kubectl apply -f %s puts the chart's CRDs back (%s)%s" % (
        os.path.relpath(crds, SRC), columns(), "" if p.returncode == 0 else ": " + p.stderr[-300:]))


def kubectl_views(c, kc, claim):
    """What an operator sees with the real kubectl: the CRDs' printer columns, built-in columns, events, describe."""
    name = claim["metadata"]["name"]
    rows = kubectl_table(kc, "nodeclaims")
    want = {"NAME": name, "TYPE": claim["spec"].get("instanceType", "?"), "HOST": claim.get("status", {}).get("host", ""),
            "NODE": "", "READY": ""}
    check(rows and all(rows[0].get(k) == v for k, v in want.items()) and rows[0].get("AGE", "").endswith("s"),
          "kubectl get nodeclaims: the CRD's columns NAME TYPE HOST VMID NODE READY AGE (%s)" % (rows[:1]))
    rows = kubectl_table(kc, "nodepools")
    check(rows and rows[0].get("NAME") == "default" and rows[0].get("NODECLASS") == "default",
          "kubectl get nodepools: NAME default, NODECLASS default (%s)" % rows[:1])
    rows = kubectl_table(kc, "proxmoxnodeclasses")
    check(rows and rows[0].get("TEMPLATE") == "k8s-template", "kubectl get proxmoxnodeclasses: TEMPLATE k8s-template")
    rows = kubectl_table(kc, "pods", "-n", "default")
    check(rows and rows[0] == {"NAME": "web-1", "READY": "0/1", "STATUS": "Pending", "RESTARTS": "0",
                               "AGE": rows[0].get("AGE")}, "kubectl get pods: NAME READY STATUS RESTARTS AGE (%s)" % rows[:1])
    rows = kubectl_table(kc, "events", "-n", "default")
    check(any(r.get("REASON") == "Nominated" and r.get("OBJECT") == "pod/web-1" and name in r.get("MESSAGE", "")
              for r in rows), "kubectl get events: LAST SEEN TYPE REASON OBJECT MESSAGE, pod/web-1 Nominated on %s" % name)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cp-1", "labels": {"node-role.kubernetes.io/control-plane": ""}}}
    c.sim.kube("POST", "/api/v1/nodes", node)
    for _ in range(5):  # kube-controller-manager's node lifecycle controller may write the status between our read and write
        node = c.sim.kube("GET", "/api/v1/nodes/cp-1").json
        node["status"] = {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": dict(
            {k: "x" for k in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                              "kubeProxyVersion", "operatingSystem", "architecture")}, kubeletVersion="v1.35.0")}
        r = c.sim.kube("PUT", "/api/v1/nodes/cp-1/status", node)
        if r.status != 409:
            break
    check(r.status == 200, "node cp-1 Ready (%d)" % r.status)
    rows = kubectl_table(kc, "nodes")
    check(rows and rows[0] == {"NAME": "cp-1", "STATUS": "Ready", "ROLES": "control-plane", "AGE": rows[0].get("AGE"),
                               "VERSION": "v1.35.0"}, "kubectl get nodes: NAME STATUS ROLES AGE VERSION (%s)" % rows[:1])
    p = run(os.path.join(TOOLS, "kubectl"), "--kubeconfig", kc, "describe", "nodeclaim", name)
    check(p.returncode == 0 and "Kind:         NodeClaim" in p.stdout and "pvescale.io/nodepool=default" in p.stdout,
          "kubectl describe nodeclaim %s" % name)


def install_phase():
    """helm install and upgrade into a real control plane, then the coordinator run as the Deployment says."""
    c = coordlib.Cluster("pve1=32intel64-2p8co2t+8ve", agents=False, kube="real")
    tmp = tempfile.mkdtemp(prefix="pvescale-helm-")
    coord = None
    try:
        kc = c.sim.ep["kube"]["kubeconfig"]
        with open(c.config) as f:
            config = yaml_docs(f.read())[0]
        values = os.path.join(tmp, "values.json")
        with open(values, "w") as f:
            json.dump({"config": config, "settings": {"launch": False, "batchIdleDuration": "200ms",
                                                      "batchMaxDuration": "1s"},
                       "customResources": {"nodeClass": {"default": {"enabled": True}},
                                           "nodePools": {"default": {"enabled": True}}}}, f)
        t0 = time.time()
        p = helm_kube(kc, "install", RELEASE, CHART, "-n", NS, "-f", values)
        check(p.returncode == 0 and "STATUS: deployed" in p.stdout, "helm install into the control plane (%.1fs)%s" % (
            time.time() - t0, "" if p.returncode == 0 else ": " + p.stderr))
        config["clusters"][0]["insecure"] = False
        changed = os.path.join(tmp, "values-2.json")
        with open(changed, "w") as f:
            json.dump({"config": config}, f)
        p = helm_kube(kc, "upgrade", RELEASE, CHART, "-n", NS, "-f", values, "-f", changed,
                      "--set", "settings.workers=8")
        check(p.returncode == 0 and "REVISION: 2" in p.stdout, "helm upgrade with a changed config and setting: revision 2%s" % (
            "" if p.returncode == 0 else ": " + p.stderr))
        r = c.sim.kube("GET", "/api/v1/namespaces/%s/secrets?labelSelector=owner%%3Dhelm,name%%3D%s" % (NS, RELEASE))
        revs = sorted(i["metadata"]["labels"].get("version") for i in r.json.get("items", []))
        check(revs == ["1", "2"], "helm's release Secrets (owner=helm) for revisions 1 and 2: %s" % revs)
        crd_upgrade(c, kc, tmp)
        p = helm_kube(kc, "status", RELEASE, "-n", NS)
        check(p.returncode == 0 and "STATUS: deployed" in p.stdout, "helm status: deployed")
        dep = c.sim.kube("GET", "/apis/apps/v1/namespaces/%s/deployments/%s" % (NS, RELEASE)).json
        args = dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [{}])[0].get("args", [])
        check("--workers=8" in args and "--launch=false" in args, "the Deployment has the upgraded args (%s)" % (
            [a for a in args if a.startswith(("--workers", "--launch"))]))
        for path in ("/apis/pvescale.io/v1alpha1/nodepools/default", "/apis/pvescale.io/v1alpha1/proxmoxnodeclasses/default",
                     "/api/v1/namespaces/%s/serviceaccounts/%s" % (NS, RELEASE),
                     "/apis/rbac.authorization.k8s.io/v1/clusterroles/%s" % RELEASE):
            check(c.sim.kube("GET", path).status == 200, "helm created %s" % path)
        secret = c.sim.kube("GET", "/api/v1/namespaces/%s/secrets/%s" % (NS, RELEASE)).json
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "wb") as f:
            f.write(base64.b64decode(secret["data"]["config.yaml"]))
        with open(cfg) as f:
            check(yaml_docs(f.read())[0] == config, "the config Secret holds the upgraded config")
        cmd, env, health = deployment_command(dep, cfg, sa_kubeconfig(c, tmp))
        log = open(os.path.join(tmp, "coordinator.log"), "w")
        coord = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env))
        ready = lambda: coordlib.Coordinator.get(None, health, "/readyz")[0] == 200  # noqa: E731
        try:
            coordlib.wait_for(lambda: ready() or coord.poll() is not None, 30, what="coordinator /readyz")
        except AssertionError:
            pass
        check(coord.poll() is None and ready(), "the coordinator, run as the Deployment says with the Secret's config, is ready")
        c.sim.kube("POST", "/api/v1/namespaces/default/pods", coordlib.pod("web-1", cpu="1", memory="1Gi"))
        claims = lambda: c.sim.kube("GET", "/apis/pvescale.io/v1alpha1/nodeclaims").json.get("items", [])  # noqa: E731
        try:
            coordlib.wait_for(lambda: claims(), 20, what="a NodeClaim")
        except AssertionError:
            pass
        got = claims()
        check(len(got) == 1 and got[0]["metadata"].get("labels", {}).get("pvescale.io/nodepool",
                                                                           got[0]["metadata"].get("labels", {}).get("karpenter.sh/nodepool")) == "default",
              "a pending pod gets a NodeClaim of the chart's NodePool 'default' (%d claims)" % len(got))
        denials = c.sim.admin("GET", "/kube-denials").json
        check(denials == [], "the RBAC helm installed refused none of the coordinator's calls (%s)" % denials[:3])
        if got:
            # The claim is created, then its status (host) written in a second call: compare kubectl's columns with
            # the claim once its status is there (with --launch=false nothing changes it after that).
            try:
                coordlib.wait_for(lambda: (claims() or [{}])[0].get("status", {}).get("host"), 20,
                                  what="the NodeClaim's status.host")
            except AssertionError:
                pass
            kubectl_views(c, kc, (claims() or got)[0])
        if coord.poll() is not None or not got:
            log.flush()
            with open(log.name) as f:
                print(f.read()[-3000:])
    finally:
        if coord and coord.poll() is None:
            coord.terminate()
            coord.wait(20)
        c.stop()


def main():
    p = run(HELM, "version", "--short")
    check(p.returncode == 0 and p.stdout.startswith("v4."), "helm v4 at %s (%s)" % (HELM, p.stdout.strip() or p.stderr.strip()))
    if p.returncode != 0:
        return summary()
    sch, crds = schemas()
    check(len(crds) == 4, "CRD schemas loaded from deploy/crds (%d)" % len(crds))
    for label, values in (("default values", None), ("ci/full-values.yaml", FULL)):
        p = run(HELM, "lint", "--strict", CHART, *(["-f", values] if values else []))
        check(p.returncode == 0, "helm lint --strict, %s%s" % (label, "" if p.returncode == 0 else ": " + p.stdout + p.stderr))
        p = helm_template(values)
        check(p.returncode == 0, "helm template, %s%s" % (label, "" if p.returncode == 0 else ": " + p.stderr))
        objs = yaml_docs(p.stdout)
        kinds = sorted({o["kind"] for o in objs})
        print("     %s: %d objects: %s" % (label, len(objs), ", ".join(kinds)))
        validate(objs, sch, crds, label)
        compare_inhouse(objs, values, label)
        if values:
            want = {"PodDisruptionBudget", "ServiceMonitor", "NodePool", "ProxmoxNodeClass", "Service", "Role"}
            check(want <= set(kinds), "full values render every optional kind (missing %s)" % sorted(want - set(kinds)))
            check(not any(o["kind"] == "Secret" for o in objs), "existingConfigSecret: the chart renders no config Secret")
    for bad, why in (("replicaCount=two", "/replicaCount"), ("logFormat=xml", "/logFormat")):
        lint = run(HELM, "lint", "--strict", CHART, "--set", bad)
        tmpl = helm_template(None, "--set", bad)
        check(lint.returncode != 0 and why in lint.stdout + lint.stderr,
              "helm lint refuses --set %s by values.schema.json" % bad)
        check(tmpl.returncode != 0 and why in tmpl.stderr, "helm template refuses --set %s (%s)" % (
            bad, tmpl.stderr.strip().splitlines()[-1] if tmpl.stderr.strip() else "no error"))
    install_phase()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
