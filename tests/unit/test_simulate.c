/* Tests for coordinator/simulate and simulate_json: table tests for every scheduling constraint, node pool
 * limits and weights, host room, daemon set overhead, and the reasons of pods left pending. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "shapes.h"
#include "simulate.h"
#include "simulate_json.h"

#define GIB (1024LL * 1024 * 1024)

/* ---- fixture: one input, the node class "default", its catalog, one result ---- */

static struct sim_input *in;
static struct shape_catalog *cats[4];
static size_t n_cats;
static struct sim_result *res;

/* Test JSON is written with single quotes; turn them into double quotes. */
static json_t *j(const char *text) {
        char *s = strdup(text);
        for (char *p = s; *p; p++)
                if (*p == '\'')
                        *p = '"';
        json_error_t e;
        json_t *v = json_loads(s, 0, &e);
        if (!v)
                fail_msg("bad test JSON (%s): %s", e.text, s);
        free(s);
        return v;
}

static void add_nodeclass(const char *text) {
        struct shape_options o;
        char err[256];
        json_t *v = j(text);
        shapes_options_default(&o);
        if (simulate_json_nodeclass(in, v, &o, NULL, &cats[n_cats++], err, sizeof err) < 0)
                fail_msg("nodeclass: %s", err);
        json_decref(v);
}

static int setup(void **state) {
        (void)state;
        in = simulate_input_new();
        n_cats = 0;
        res = NULL;
        add_nodeclass("{'metadata': {'name': 'default'}, 'spec': {'region': 'r1'}}");
        return in ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        simulate_result_free(res);
        simulate_input_free(in);
        for (size_t i = 0; i < n_cats; i++)
                shapes_catalog_free(cats[i]);
        return 0;
}

static struct sim_host *add_host(const char *name, uint32_t cpus, int64_t mem_gib) {
        struct sim_host *h = simulate_add_host(in);
        h->name = name;
        h->region = "r1";
        h->free_cpus = cpus;
        h->free_memory_bytes = (uint64_t)(mem_gib * GIB);
        return h;
}

static void add_pool_json(const char *text) {
        char err[256];
        json_t *v = j(text);
        if (simulate_json_nodepool(in, v, NULL, err, sizeof err) < 0)
                fail_msg("nodepool: %s", err);
        json_decref(v);
}

/* A pool "name" with extra members of spec.template.spec (a JSON fragment, may be empty). */
static void add_pool(const char *name, const char *tspec_extra) {
        char buf[2048];
        snprintf(buf, sizeof buf,
                 "{'metadata': {'name': '%s'}, 'spec': {'template': {'spec': {'nodeClassRef': {'name': 'default'}%s%s}}}}",
                 name, *tspec_extra ? ", " : "", tspec_extra);
        add_pool_json(buf);
}

static struct sim_pod *add_pod_json(const char *text) {
        char err[256];
        struct sim_pod *p;
        json_t *v = j(text);
        if (simulate_json_pod(in, v, &p, err, sizeof err) < 0)
                fail_msg("pod: %s", err);
        json_decref(v);
        return p;
}

/* A pending pod with one container; labels and spec_extra are JSON fragments (may be empty). */
static struct sim_pod *add_pod(const char *name, const char *cpu, const char *mem, const char *labels,
                               const char *spec_extra) {
        char buf[4096];
        snprintf(buf, sizeof buf,
                 "{'metadata': {'name': '%s', 'namespace': 'default', 'labels': {%s}}, 'spec': {'containers': "
                 "[{'name': 'c', 'resources': {'requests': {'cpu': '%s', 'memory': '%s'}}}]%s%s}}",
                 name, labels, cpu, mem, *spec_extra ? ", " : "", spec_extra);
        return add_pod_json(buf);
}

static void add_node_json(const char *text) {
        char err[256];
        json_t *v = j(text);
        if (simulate_json_node(in, v, NULL, err, sizeof err) < 0)
                fail_msg("node: %s", err);
        json_decref(v);
}

/* A node with allocatable cpu/memory, zone label and extra labels/spec members. */
static void add_node(const char *name, const char *zone, const char *cpu, const char *mem, const char *labels,
                     const char *spec) {
        char buf[2048];
        snprintf(buf, sizeof buf,
                 "{'metadata': {'name': '%s', 'labels': {'kubernetes.io/hostname': '%s', "
                 "'topology.kubernetes.io/zone': '%s'%s%s}}, 'spec': {%s}, 'status': {'allocatable': "
                 "{'cpu': '%s', 'memory': '%s', 'pods': '110', 'ephemeral-storage': '50Gi'}}}",
                 name, name, zone, *labels ? ", " : "", labels, spec, cpu, mem);
        add_node_json(buf);
}

static void run(void) {
        simulate_result_free(res);
        res = NULL;
        assert_int_equal(simulate_run(in, &res), 0);
}

static size_t pod_index(const char *name) {
        for (size_t i = 0; i < in->n_pods; i++)
                if (strcmp(in->pods[i]->name, name) == 0)
                        return i;
        fail_msg("no pod %s", name);
        return 0;
}

static const struct sim_placement *pl(const char *name) {
        return &res->placements[pod_index(name)];
}

static const struct sim_claim *claim_of(const char *name) {
        const struct sim_placement *p = pl(name);
        if (p->target != SIM_TARGET_CLAIM)
                fail_msg("pod %s: not on a planned claim (target %d, reason %s)", name, p->target,
                         p->reason ? p->reason : "-");
        return &res->claims[p->index];
}

static const char *node_of(const char *name) {
        const struct sim_placement *p = pl(name);
        if (p->target != SIM_TARGET_NODE)
                fail_msg("pod %s: not on a node (target %d, reason %s)", name, p->target, p->reason ? p->reason : "-");
        return in->nodes[p->index]->name;
}

static const char *claim_label(const struct sim_claim *c, const char *key) {
        return simulate_label_get(c->labels, c->n_labels, key);
}

static void assert_reason(const char *pod, const char *want) {
        const struct sim_placement *p = pl(pod);
        if (p->target != SIM_TARGET_UNPLACED)
                fail_msg("pod %s was placed (target %d); expected reason \"%s\"", pod, p->target, want);
        if (!strstr(p->reason, want))
                fail_msg("pod %s: reason \"%s\" does not contain \"%s\"", pod, p->reason, want);
}

static void reset(void) {
        teardown(NULL);
        setup(NULL);
}

/* ---- pod requests ---- */

static void test_pod_requests(void **state) {
        (void)state;
        struct sim_pod *p = add_pod_json(
                "{'metadata': {'name': 'p'}, 'spec': {"
                " 'containers': ["
                "  {'name': 'a', 'resources': {'requests': {'cpu': '500m', 'memory': '1Gi', 'ephemeral-storage': '1Gi'}}},"
                "  {'name': 'b', 'resources': {'limits': {'cpu': '1', 'memory': '512Mi'}, 'requests': {'hugepages-2Mi': '4Mi'}}}],"
                " 'initContainers': ["
                "  {'name': 'i1', 'resources': {'requests': {'cpu': '2', 'memory': '100Mi'}}},"
                "  {'name': 's1', 'restartPolicy': 'Always', 'resources': {'requests': {'cpu': '100m', 'memory': '64Mi'}}},"
                "  {'name': 'i2', 'resources': {'requests': {'cpu': '1', 'memory': '3Gi'}}}],"
                " 'overhead': {'cpu': '50m', 'memory': '10Mi'}}}");
        /* cpu: max(init 2000, containers 1500 + sidecar 100) + 50 */
        assert_int_equal(p->requests.v[RESOURCE_CPU], 2050);
        /* memory: max(i2 3Gi + sidecar 64Mi, containers 1536Mi + 64Mi) + 10Mi */
        assert_int_equal(p->requests.v[RESOURCE_MEMORY], (3072 + 64 + 10) * 1024LL * 1024);
        assert_int_equal(p->requests.v[RESOURCE_EPHEMERAL_STORAGE], GIB);
        assert_int_equal(p->requests.v[RESOURCE_HUGEPAGES_2MI], 4 * 1024 * 1024);
        assert_int_equal(p->requests.v[RESOURCE_PODS], 1);
        assert_string_equal(p->namespace, "default");
        assert_null(p->node_name);
}

static void test_json_errors(void **state) {
        (void)state;
        static const struct {
                int kind; /* 0 pod, 1 pool, 2 node, 3 host */
                const char *json, *err;
        } T[] = {
                { 0, "{'metadata': {'name': 'p'}, 'spec': {'containers': [{'resources': {'requests': {'cpu': 'abc'}}}]}}",
                  "spec.containers[0].resources.requests.cpu: invalid quantity \"abc\"" },
                { 0, "{'metadata': {}, 'spec': {}}", "metadata.name: required" },
                { 0, "{'metadata': {'name': 'p'}, 'spec': {'nodeSelector': {'a': 1}}}", "spec.nodeSelector.a" },
                { 0, "{'metadata': {'name': 'p'}, 'spec': {'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [{'matchExpressions': [{'key': 'k', 'operator': 'Near', 'values': ['1']}]}]}}}}}",
                  "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator" },
                { 0, "{'metadata': {'name': 'p'}, 'spec': {'topologySpreadConstraints': [{'maxSkew': 0, 'topologyKey': 'kubernetes.io/hostname'}]}}",
                  "spec.topologySpreadConstraints[0].maxSkew" },
                { 0, "{'metadata': {'name': 'p'}, 'spec': {'tolerations': [{'key': 'k', 'operator': 'Maybe'}]}}",
                  "spec.tolerations[0].operator" },
                { 1, "{'metadata': {'name': 'x'}, 'spec': {'weight': 200, 'template': {'spec': {'nodeClassRef': {'name': 'default'}}}}}",
                  "spec.weight" },
                { 1, "{'metadata': {'name': 'x'}, 'spec': {'template': {'spec': {}}}}", "spec.template.spec.nodeClassRef.name" },
                { 1, "{'metadata': {'name': 'x'}, 'spec': {'limits': {'cpu': 'lots'}, 'template': {'spec': {'nodeClassRef': {'name': 'default'}}}}}",
                  "spec.limits.cpu" },
                { 2, "{'metadata': {'name': 'n'}, 'spec': {'taints': [{'key': 'k', 'effect': 'Sometimes'}]}}", "spec.taints[0].effect" },
                { 3, "{'name': 'pve1'}", "free_cpus" },
                { 3, "{'name': 'pve1', 'free_cpus': 4, 'free_memory_bytes': 1, 'offers': [{'shape': 'c', 'count': 1, 'score': 101}]}",
                  "offers[0].score: a number from 0 to 100 is required" },
                { 3, "{'name': 'pve1', 'free_cpus': 4, 'free_memory_bytes': 1, 'offers': [{'shape': 'c', 'count': 1, 'fallback': 1}]}",
                  "offers[0].fallback" },
        };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
                char err[300] = "";
                json_t *v = j(T[i].json);
                size_t before = in->n_pods + in->n_pools + in->n_nodes + in->n_hosts;
                int r = T[i].kind == 0 ? simulate_json_pod(in, v, NULL, err, sizeof err)
                      : T[i].kind == 1 ? simulate_json_nodepool(in, v, NULL, err, sizeof err)
                      : T[i].kind == 2 ? simulate_json_node(in, v, NULL, err, sizeof err)
                                       : simulate_json_host(in, v, NULL, err, sizeof err);
                json_decref(v);
                if (r != -EINVAL || !strstr(err, T[i].err))
                        fail_msg("case %zu: r=%d err \"%s\", expected \"%s\"", i, r, err, T[i].err);
                assert_int_equal(before, in->n_pods + in->n_pools + in->n_nodes + in->n_hosts);
        }
}

/* ---- basic placement and shapes ---- */

static void test_new_claim_cheapest_shape_and_labels(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_pod("a", "1", "1Gi", "", "");
        add_pod("b", "1", "1Gi", "", "");
        add_pod("c", "1", "1Gi", "", "");
        run();
        assert_int_equal(res->n_claims, 1);
        const struct sim_claim *c = claim_of("a");
        assert_ptr_equal(c, claim_of("c"));
        assert_string_equal(c->shape->name, "c1.4VCPU-8GB"); /* 3 cores do not fit 2 vCPUs (1920m) */
        assert_int_equal(c->n_pods, 3);
        assert_int_equal(c->requests.v[RESOURCE_CPU], 3000);
        assert_int_equal(c->requests.v[RESOURCE_PODS], 3);
        static const char *const want[][2] = {
                { "karpenter.sh/capacity-type", "on-demand" }, { "kubernetes.io/arch", "amd64" },
                { "kubernetes.io/os", "linux" }, { "node.kubernetes.io/instance-type", "c1.4VCPU-8GB" },
                { "pvescale.io/instance-family", "c1" }, { "pvescale.io/nodeclass", "default" },
                { "pvescale.io/nodepool", "default" }, { "topology.kubernetes.io/region", "r1" },
                { "topology.kubernetes.io/zone", "pve1" },
        };
        assert_int_equal(c->n_labels, 9);
        for (size_t i = 0; i < 9; i++) {
                assert_string_equal(c->labels[i].key, want[i][0]);
                assert_string_equal(c->labels[i].value, want[i][1]);
        }
        assert_int_equal(res->n_unplaced, 0);
}

static void test_claim_grows_to_cheapest_holding_shape(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        for (int i = 0; i < 10; i++) {
                char name[8];
                snprintf(name, sizeof name, "p%d", i);
                add_pod(name, "500m", "512Mi", "", "");
        }
        run();
        assert_int_equal(res->n_claims, 1);
        assert_int_equal(res->claims[0].n_pods, 10);
        assert_string_equal(res->claims[0].shape->name, "c1.8VCPU-16GB"); /* 5 cores: 4 vCPUs hold 3910m */
}

static void test_existing_then_inflight_then_new(void **state) {
        (void)state;
        char err[200];
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_node("n1", "pve1", "4", "8Gi", "", "");
        json_t *claim = j("{'metadata': {'name': 'default-abc', 'labels': {'pvescale.io/nodepool': 'default'}},"
                          " 'spec': {'nodePool': 'default', 'instanceType': 's1.2VCPU-8GB', 'requirements': ["
                          "  {'key': 'topology.kubernetes.io/zone', 'operator': 'In', 'values': ['pve1']}]}}");
        assert_int_equal(simulate_json_nodeclaim(in, claim, cats[0], NULL, err, sizeof err), 0);
        json_decref(claim);
        assert_true(in->nodes[1]->in_flight);
        assert_int_equal(in->nodes[1]->allocatable.v[RESOURCE_CPU], 1920);
        add_pod_json("{'metadata': {'name': 'bound'}, 'spec': {'nodeName': 'n1', 'containers': [{'resources': "
                     "{'requests': {'cpu': '2500m', 'memory': '1Gi'}}}]}}");
        add_pod("a", "1", "1Gi", "", "");    /* fits n1 (4 - 2.5 cores) */
        add_pod("b", "1500m", "1Gi", "", ""); /* n1 is full now: the in-flight claim */
        add_pod("c", "1500m", "1Gi", "", ""); /* both full: a new claim */
        run();
        assert_int_equal(pl("bound")->target, SIM_TARGET_BOUND);
        /* largest first: b and c (1.5 cores) before a */
        assert_string_equal(node_of("b"), "n1");
        assert_string_equal(node_of("c"), "default-abc");
        assert_int_equal(pl("a")->target, SIM_TARGET_CLAIM);
        assert_int_equal(res->n_claims, 1);
        assert_int_equal(res->n_on_nodes, 2);
}

static void test_unschedulable_node_skipped(void **state) {
        (void)state;
        add_node("n1", "pve1", "4", "8Gi", "", "'unschedulable': true");
        add_node("n2", "pve1", "4", "8Gi", "", "");
        add_pod("a", "1", "1Gi", "", "");
        run();
        assert_string_equal(node_of("a"), "n2");
}

/* ---- nodeSelector and node affinity ---- */

static void test_node_selector_pools(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool_json("{'metadata': {'name': 'ssd'}, 'spec': {'template': {'metadata': {'labels': {'disk': 'ssd'}},"
                      " 'spec': {'nodeClassRef': {'name': 'default'}}}}}");
        add_pool("plain", "");
        add_pod("fast", "1", "1Gi", "", "'nodeSelector': {'disk': 'ssd'}");
        add_pod("odd", "1", "1Gi", "", "'nodeSelector': {'disk': 'nvme'}");
        add_pod("any", "1", "1Gi", "", "");
        run();
        assert_string_equal(claim_label(claim_of("fast"), "disk"), "ssd");
        assert_string_equal(claim_label(claim_of("fast"), "pvescale.io/nodepool"), "ssd");
        assert_reason("odd", "no NodePool matches nodeSelector disk=nvme");
        /* "any" does not take room on the ssd claim: its home is the first pool by weight and name (plain), and
         * kube-scheduler, which knows nothing of the plan, could give the ssd node's room to it before "fast" */
        assert_string_equal(claim_label(claim_of("any"), "pvescale.io/nodepool"), "plain");
        assert_ptr_not_equal(claim_of("any"), claim_of("fast"));
        assert_int_equal(res->n_claims, 2);
        /* the ssd claim's Node should take pods after the plain one's: "any" fits an ssd node too, "fast" no plain
         * one */
        const struct sim_claim *ssd = claim_of("fast"), *plain = claim_of("any");
        assert_int_equal(plain->n_after, 0);
        assert_int_equal(ssd->n_after, 1);
        assert_ptr_equal(&res->claims[ssd->after[0]], plain);
}

static void test_node_affinity_operators(void **state) {
        (void)state;
        static const struct {
                const char *terms, *node; /* NULL node: stays pending */
        } T[] = {
                { "[{'matchExpressions': [{'key': 'disk', 'operator': 'In', 'values': ['ssd']}]}]", "a" },
                { "[{'matchExpressions': [{'key': 'disk', 'operator': 'NotIn', 'values': ['ssd']}]}]", "b" },
                { "[{'matchExpressions': [{'key': 'disk', 'operator': 'Exists'}]}]", "a" },
                { "[{'matchExpressions': [{'key': 'disk', 'operator': 'DoesNotExist'}]}]", "b" },
                { "[{'matchExpressions': [{'key': 'gen', 'operator': 'Gt', 'values': ['4']}]}]", "b" },
                { "[{'matchExpressions': [{'key': 'gen', 'operator': 'Lt', 'values': ['4']}]}]", "a" },
                { "[{'matchExpressions': [{'key': 'gen', 'operator': 'Gt', 'values': ['9']}]}]", NULL },
                { "[{'matchExpressions': [{'key': 'gen', 'operator': 'Lt', 'values': ['x']}]}]", NULL },
                { "[{'matchExpressions': [{'key': 'disk', 'operator': 'In', 'values': ['nvme']}]},"
                  " {'matchExpressions': [{'key': 'gen', 'operator': 'In', 'values': ['5']}]}]", "b" },
                { "[{'matchExpressions': [{'key': 'disk', 'operator': 'In', 'values': ['ssd']},"
                  " {'key': 'gen', 'operator': 'In', 'values': ['5']}]}]", NULL },
                { "[{'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['c']}]}]", "c" },
        };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
                char spec[1024];
                reset();
                add_node("a", "pve1", "8", "16Gi", "'disk': 'ssd', 'gen': '3'", "");
                add_node("b", "pve1", "8", "16Gi", "'gen': '5'", "");
                add_node("c", "pve1", "8", "16Gi", "", "");
                snprintf(spec, sizeof spec,
                         "'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': %s}}}",
                         T[i].terms);
                add_pod("p", "1", "1Gi", "", spec);
                run();
                if (!T[i].node) {
                        assert_reason("p", "no NodePool exists");
                        continue;
                }
                if (pl("p")->target != SIM_TARGET_NODE || strcmp(node_of("p"), T[i].node) != 0)
                        fail_msg("case %zu: expected node %s", i, T[i].node);
        }
}

static void test_node_affinity_on_shapes(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_pod("mem", "1", "1Gi", "",
                "'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': "
                "[{'matchExpressions': [{'key': 'pvescale.io/instance-family', 'operator': 'In', 'values': ['m1']}]}]}}}");
        add_pod("notc", "900m", "1Gi", "",
                "'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': "
                "[{'matchExpressions': [{'key': 'pvescale.io/instance-family', 'operator': 'NotIn', 'values': ['c1', 'm1']}]}]}}}");
        add_pod("exact", "800m", "1Gi", "", "'nodeSelector': {'node.kubernetes.io/instance-type': 's1.4VCPU-16GB'}");
        add_pod("none", "700m", "1Gi", "", "'nodeSelector': {'node.kubernetes.io/instance-type': 'z9.1VCPU-1GB'}");
        run();
        assert_string_equal(claim_of("mem")->shape->name, "m1.2VCPU-16GB");
        /* notc (t1/s1 only) opened a claim; exact (s1.4VCPU-16GB only) narrows and grows it */
        assert_ptr_equal(claim_of("notc"), claim_of("exact"));
        assert_string_equal(claim_of("exact")->shape->name, "s1.4VCPU-16GB");
        assert_reason("none", "no NodePool matches nodeSelector node.kubernetes.io/instance-type=z9.1VCPU-1GB");
        assert_int_equal(res->n_claims, 2);
}

/* ---- taints and tolerations ---- */

static void test_taints_and_tolerations(void **state) {
        (void)state;
        add_node("db", "pve1", "8", "16Gi", "", "'taints': [{'key': 'dedicated', 'value': 'db', 'effect': 'NoSchedule'}]");
        add_node("soft", "pve1", "1", "2Gi", "", "'taints': [{'key': 'slow', 'effect': 'PreferNoSchedule'}]");
        add_pod("plain", "2", "1Gi", "", "");
        add_pod("tol", "2", "1Gi", "", "'tolerations': [{'key': 'dedicated', 'operator': 'Equal', 'value': 'db', 'effect': 'NoSchedule'}]");
        add_pod("wrongval", "2", "1Gi", "", "'tolerations': [{'key': 'dedicated', 'operator': 'Equal', 'value': 'web'}]");
        add_pod("all", "2", "1Gi", "", "'tolerations': [{'operator': 'Exists'}]");
        add_pod("small", "500m", "1Gi", "", "");
        run();
        assert_reason("plain", "no NodePool exists");
        assert_string_equal(node_of("tol"), "db");
        assert_reason("wrongval", "no NodePool exists");
        assert_string_equal(node_of("all"), "db");
        assert_string_equal(node_of("small"), "soft"); /* PreferNoSchedule never blocks */
}

static void test_nodepool_taints(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("gpu", "'taints': [{'key': 'nvidia.com/gpu', 'value': 'true', 'effect': 'NoSchedule'}]");
        add_pod("plain", "1", "1Gi", "", "");
        add_pod("tol", "1", "1Gi", "", "'tolerations': [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]");
        run();
        assert_reason("plain", "NodePool gpu has taint nvidia.com/gpu=true:NoSchedule that the pod does not tolerate");
        assert_string_equal(claim_label(claim_of("tol"), "pvescale.io/nodepool"), "gpu");
}

/* ---- pod affinity and anti-affinity ---- */

#define ANTI(key, app) \
        "'affinity': {'podAntiAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': [{'topologyKey': '" key \
        "', 'labelSelector': {'matchLabels': {'app': '" app "'}}}]}}"
#define AFF(key, app) \
        "'affinity': {'podAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': [{'topologyKey': '" key \
        "', 'labelSelector': {'matchLabels': {'app': '" app "'}}}]}}"
#define SPREAD(key, skew, when, app) \
        "'topologySpreadConstraints': [{'maxSkew': " #skew ", 'topologyKey': '" key "', 'whenUnsatisfiable': '" when \
        "', 'labelSelector': {'matchLabels': {'app': '" app "'}}}]"
#define HOST "kubernetes.io/hostname"
#define ZONE "topology.kubernetes.io/zone"

static void three_hosts(void) {
        add_host("pve1", 64, 256);
        add_host("pve2", 64, 256);
        add_host("pve3", 64, 256);
}

static void add_pods(const char *prefix, int n, const char *cpu, const char *labels, const char *spec) {
        for (int i = 0; i < n; i++) {
                char name[32];
                snprintf(name, sizeof name, "%s%d", prefix, i);
                add_pod(name, cpu, "1Gi", labels, spec);
        }
}

static void test_hostname_anti_affinity(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_pods("web", 3, "500m", "'app': 'web'", ANTI(HOST, "web"));
        add_pods("other", 3, "100m", "'app': 'other'", "");
        run();
        assert_int_equal(res->n_claims, 3);
        assert_true(claim_of("web0") != claim_of("web1") && claim_of("web1") != claim_of("web2") &&
                    claim_of("web0") != claim_of("web2"));
        assert_ptr_equal(claim_of("other0"), claim_of("web0")); /* others are not selected: they pack */
}

static void test_zone_anti_affinity(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_host("pve2", 64, 256);
        add_pool("default", "");
        add_pods("z", 3, "1", "'app': 'z'", ANTI(ZONE, "z"));
        run();
        assert_string_not_equal(claim_label(claim_of("z0"), ZONE), claim_label(claim_of("z1"), ZONE));
        assert_reason("z2", "pod anti-affinity excludes every zone with room");
}

static void test_per_pod_labels_still_select(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_pod("db-0", "2", "1Gi", "'app': 'db', 'statefulset.kubernetes.io/pod-name': 'db-0'", ANTI(HOST, "db"));
        add_pod("db-1", "2", "1Gi", "'app': 'db', 'statefulset.kubernetes.io/pod-name': 'db-1'", ANTI(HOST, "db"));
        /* avoids only the node of db-0, selected by its per-pod label */
        add_pod("backup", "1", "1Gi", "'app': 'backup'",
                "'affinity': {'podAntiAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': [{'topologyKey': '" HOST
                "', 'labelSelector': {'matchLabels': {'statefulset.kubernetes.io/pod-name': 'db-0'}}}]}}");
        run();
        assert_ptr_not_equal(claim_of("db-0"), claim_of("db-1"));
        assert_ptr_equal(claim_of("backup"), claim_of("db-1"));
        assert_int_equal(res->n_claims, 2);
}

static void test_symmetric_anti_affinity(void **state) {
        (void)state;
        add_node("n1", "pve1", "8", "16Gi", "", "");
        add_node("n2", "pve1", "8", "16Gi", "", "");
        add_pod_json("{'metadata': {'name': 'guard', 'labels': {'app': 'guard'}}, 'spec': {'nodeName': 'n1', "
                     ANTI(HOST, "web") "}}");
        add_pod("web", "1", "1Gi", "'app': 'web'", "");
        add_pod("api", "1", "1Gi", "'app': 'api'", "");
        run();
        assert_string_equal(node_of("web"), "n2"); /* the running guard pod repels web pods from n1 */
        assert_string_equal(node_of("api"), "n1");
}

static void test_hostname_self_affinity(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_pods("cache", 3, "1", "'app': 'cache'", AFF(HOST, "cache"));
        run();
        assert_int_equal(res->n_claims, 1);
        assert_int_equal(res->claims[0].n_pods, 3);
}

static void test_zone_affinity_to_running_pods(void **state) {
        (void)state;
        three_hosts();
        add_pool("default", "");
        add_node("dbnode", "pve2", "1", "2Gi", "", "");
        add_pod_json("{'metadata': {'name': 'db', 'labels': {'app': 'db'}}, 'spec': {'nodeName': 'dbnode', "
                     "'containers': [{'resources': {'requests': {'cpu': '1'}}}]}}");
        add_pods("web", 2, "1", "'app': 'web'", AFF(ZONE, "db"));
        add_pod("lonely", "1", "1Gi", "'app': 'x'", AFF(ZONE, "nothing"));
        run();
        assert_string_equal(claim_label(claim_of("web0"), ZONE), "pve2");
        assert_ptr_equal(claim_of("web0"), claim_of("web1"));
        assert_reason("lonely", "pod affinity on topology.kubernetes.io/zone needs a zone already running matching pods");
}

/* Zone affinity confines a pod to the zones running its set: the first node in input order among those zones'
 * nodes with room takes it, whichever zone it is in. */
static void test_zone_affinity_takes_first_node_of_its_zones(void **state) {
        (void)state;
        three_hosts();
        add_pool("default", "");
        add_node("dbA", "pve3", "1", "2Gi", "", "");
        add_node("dbB", "pve1", "1", "2Gi", "", "");
        add_node("other", "pve2", "8", "16Gi", "", "");
        add_node("full", "pve3", "1", "16Gi", "", "");
        add_node("roomy3", "pve3", "8", "16Gi", "", "");
        add_node("roomy1", "pve1", "8", "16Gi", "", "");
        add_pod_json("{'metadata': {'name': 'db0', 'labels': {'app': 'db'}}, 'spec': {'nodeName': 'dbA', "
                     "'containers': [{'resources': {'requests': {'cpu': '1'}}}]}}");
        add_pod_json("{'metadata': {'name': 'db1', 'labels': {'app': 'db'}}, 'spec': {'nodeName': 'dbB', "
                     "'containers': [{'resources': {'requests': {'cpu': '1'}}}]}}");
        add_pods("web", 3, "3", "'app': 'web'", AFF(ZONE, "db"));
        run();
        assert_string_equal(node_of("web0"), "roomy3"); /* before roomy1, though zone pve1 comes first */
        assert_string_equal(node_of("web1"), "roomy3");
        assert_string_equal(node_of("web2"), "roomy1"); /* roomy3 has 2 CPUs left */
}

/* New claims go to the host with the fewest planned claims, then the most free CPUs, then the first; with
 * many hosts, checked claim by claim against that rule replayed here. */
static void test_many_hosts_claims_follow_host_preference(void **state) {
        enum { HOSTS = 150, PODS = 400 };
        int64_t free_cpus[HOSTS];
        uint32_t planned[HOSTS] = { 0 };
        (void)state;
        for (int h = 0; h < HOSTS; h++) {
                char name[16];
                snprintf(name, sizeof name, "pve%03d", h);
                free_cpus[h] = 64 + (h * 37) % 50; /* ties among hosts too */
                add_host(simulate_strdup(in, name), (uint32_t)free_cpus[h], 1024);
        }
        add_pool("default", "");
        add_pods("web", PODS, "1", "'app': 'web'", ANTI(HOST, "web"));
        run();
        assert_int_equal(res->n_claims, PODS);
        for (size_t k = 0; k < res->n_claims; k++) {
                size_t want = 0;
                for (size_t h = 1; h < HOSTS; h++)
                        if (planned[h] < planned[want] ||
                            (planned[h] == planned[want] && free_cpus[h] > free_cpus[want]))
                                want = h;
                assert_int_equal(res->claims[k].host, want);
                planned[want]++;
                free_cpus[want] -= res->claims[k].shape->vcpus;
        }
}

/* A claim that grows takes its host's CPUs, which moves the host down among those with as many planned claims. */
static void test_grown_claim_moves_its_host_back(void **state) {
        (void)state;
        add_host("pve1", 100, 1024);
        add_host("pve2", 90, 1024);
        add_host("pve3", 80, 1024);
        add_pool("default", "");
        add_pods("web", 3, "2", "'app': 'web'", ANTI(HOST, "web"));
        add_pods("filler", 6, "1500m", "'app': 'filler'", "");
        add_pod("last", "1", "1Gi", "'app': 'web'", ANTI(HOST, "web"));
        run();
        assert_string_equal(claim_label(claim_of("web0"), ZONE), "pve1");
        assert_ptr_equal(claim_of("filler5"), claim_of("web0"));
        assert_true(claim_of("web0")->shape->vcpus > 12); /* pve1 now has fewer free CPUs than pve2 */
        assert_string_equal(claim_label(claim_of("last"), ZONE), "pve2");
}

/* ---- topology spread ---- */

static void test_zone_spread(void **state) {
        (void)state;
        three_hosts();
        add_pool("default", "");
        add_pods("s", 6, "1", "'app': 's'", SPREAD(ZONE, 1, "DoNotSchedule", "s"));
        run();
        int per_zone[3] = { 0 };
        for (int i = 0; i < 6; i++) {
                char name[8];
                snprintf(name, sizeof name, "s%d", i);
                const char *z = claim_label(claim_of(name), ZONE);
                per_zone[z[3] - '1']++;
        }
        assert_int_equal(per_zone[0], 2);
        assert_int_equal(per_zone[1], 2);
        assert_int_equal(per_zone[2], 2);
        assert_int_equal(res->n_claims, 3);
}

static void test_hostname_spread(void **state) {
        (void)state;
        static const struct {
                const char *spread;
                size_t claims;
        } T[] = { { SPREAD(HOST, 1, "DoNotSchedule", "h"), 4 }, { SPREAD(HOST, 2, "DoNotSchedule", "h"), 2 },
                  { SPREAD(HOST, 1, "DoNotSchedule", "other"), 1 } };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
                reset();
                add_host("pve1", 64, 256);
                add_pool("default", "");
                add_pods("h", 4, "1", "'app': 'h'", T[i].spread);
                run();
                if (res->n_claims != T[i].claims)
                        fail_msg("case %zu: %zu claims, expected %zu", i, res->n_claims, T[i].claims);
        }
}

static void test_spread_schedule_anyway_is_a_preference(void **state) {
        (void)state;
        static const struct {
                const char *when;
                int placed;
        } T[] = { { "DoNotSchedule", 1 }, { "ScheduleAnyway", 4 } };
        for (size_t i = 0; i < 2; i++) {
                char spec[512];
                reset();
                add_node("a", "pve1", "8", "16Gi", "", "");
                add_node("b", "pve2", "500m", "16Gi", "", ""); /* a domain with no room */
                snprintf(spec, sizeof spec,
                         "'topologySpreadConstraints': [{'maxSkew': 1, 'topologyKey': '" ZONE "', 'whenUnsatisfiable': '%s',"
                         " 'labelSelector': {'matchLabels': {'app': 'x'}}}]",
                         T[i].when);
                add_pods("x", 4, "1", "'app': 'x'", spec);
                run();
                if ((int)res->n_on_nodes != T[i].placed)
                        fail_msg("%s: %zu placed, expected %d", T[i].when, res->n_on_nodes, T[i].placed);
        }
}

static void test_spread_min_domains(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_host("pve2", 64, 256);
        add_pool("default", "");
        add_pods("m", 3, "1", "'app': 'm'",
                 "'topologySpreadConstraints': [{'maxSkew': 1, 'minDomains': 3, 'topologyKey': '" ZONE
                 "', 'whenUnsatisfiable': 'DoNotSchedule', 'labelSelector': {'matchLabels': {'app': 'm'}}}]");
        run();
        /* 2 domains < minDomains 3: the global minimum counts as 0, so each zone takes one pod */
        assert_int_equal(res->n_claims, 2);
        assert_reason("m2", "topology spread on topology.kubernetes.io/zone (maxSkew 1) allows no zone with room");
}


static void test_zone_affine_set_anchors_where_room_is(void **state) {
        (void)state;
        add_host("pve1", 10, 64);
        add_host("pve2", 64, 256);
        add_pool("default", "");
        add_pod("g", "4", "1Gi", "", "'nodeSelector': {'" ZONE "': 'pve1'}");
        add_pods("a", 4, "1", "'app': 'a'", AFF(ZONE, "a"));
        run();
        assert_string_equal(claim_label(claim_of("g"), ZONE), "pve1");
        /* first fit would have put a0 on g's claim and the set could not all fit pve1 */
        for (int i = 0; i < 4; i++) {
                char name[8];
                snprintf(name, sizeof name, "a%d", i);
                assert_string_equal(claim_label(claim_of(name), ZONE), "pve2");
        }
}

static void test_full_host_leaves_spread_domains(void **state) {
        (void)state;
        add_host("pve1", 2, 64);
        add_host("pve2", 64, 256);
        add_host("pve3", 64, 256);
        add_pool("default", "");
        add_pods("s", 6, "1500m", "'app': 's'", SPREAD(ZONE, 1, "DoNotSchedule", "s"));
        run();
        int in_pve1 = 0;
        for (int i = 0; i < 6; i++) {
                char name[8];
                snprintf(name, sizeof name, "s%d", i);
                in_pve1 += strcmp(claim_label(claim_of(name), ZONE), "pve1") == 0;
        }
        assert_int_equal(in_pve1, 1); /* pve1 had room for one 2-vCPU node, then stopped being a domain */
        assert_int_equal(res->n_unplaced, 0);
}

/* ---- mixed constraints ---- */

static void test_mixed_constraints(void **state) {
        (void)state;
        three_hosts();
        add_pool("default", "");
        add_pool_json("{'metadata': {'name': 'edge'}, 'spec': {'template': {'metadata': {'labels': {'tier': 'edge'}},"
                      " 'spec': {'nodeClassRef': {'name': 'default'},"
                      "  'taints': [{'key': 'edge', 'value': 'true', 'effect': 'NoSchedule'}],"
                      "  'requirements': [{'key': '" ZONE "', 'operator': 'In', 'values': ['pve1', 'pve2']}]}}}}");
        add_pods("api", 4, "1", "'app': 'api'",
                 "'nodeSelector': {'tier': 'edge'}, 'tolerations': [{'key': 'edge', 'operator': 'Exists'}], "
                 SPREAD(ZONE, 1, "DoNotSchedule", "api") ", " ANTI(HOST, "api"));
        add_pods("plain", 2, "1", "'app': 'plain'", "");
        run();
        int n1 = 0, n2 = 0;
        for (int i = 0; i < 4; i++) {
                char name[8];
                snprintf(name, sizeof name, "api%d", i);
                const struct sim_claim *c = claim_of(name);
                assert_string_equal(claim_label(c, "pvescale.io/nodepool"), "edge");
                assert_string_equal(claim_label(c, "tier"), "edge");
                n1 += strcmp(claim_label(c, ZONE), "pve1") == 0;
                n2 += strcmp(claim_label(c, ZONE), "pve2") == 0;
                for (int k = 0; k < i; k++) {
                        char other[8];
                        snprintf(other, sizeof other, "api%d", k);
                        assert_ptr_not_equal(c, claim_of(other));
                }
        }
        /* pve3 is no domain: the only pool these pods can use does not reach it */
        assert_int_equal(n1, 2);
        assert_int_equal(n2, 2);
        /* plain pods do not tolerate the edge taint */
        assert_string_equal(claim_label(claim_of("plain0"), "pvescale.io/nodepool"), "default");
        assert_int_equal(res->n_unplaced, 0);
}

/* ---- daemon sets ---- */

static void add_ds(const char *text) {
        char err[256];
        json_t *v = j(text);
        if (simulate_json_daemonset(in, v, NULL, err, sizeof err) < 0)
                fail_msg("daemonset: %s", err);
        json_decref(v);
}

static void test_daemonset_overhead(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "'taints': [{'key': 'pool', 'value': 'x', 'effect': 'NoSchedule'}]");
        add_ds("{'metadata': {'name': 'agent', 'namespace': 'kube-system'}, 'spec': {'template': {'spec': {"
               "'tolerations': [{'operator': 'Exists'}], 'containers': [{'resources': {'requests': {'cpu': '500m', 'memory': '256Mi'}}}]}}}}");
        add_ds("{'metadata': {'name': 'ssd-only', 'namespace': 'kube-system'}, 'spec': {'template': {'spec': {"
               "'tolerations': [{'operator': 'Exists'}], 'nodeSelector': {'disk': 'ssd'}, 'containers': [{'resources': {'requests': {'cpu': '2'}}}]}}}}");
        add_ds("{'metadata': {'name': 'intolerant', 'namespace': 'kube-system'}, 'spec': {'template': {'spec': {"
               "'containers': [{'resources': {'requests': {'cpu': '3'}}}]}}}}");
        add_pod("p", "1", "1Gi", "", "'tolerations': [{'key': 'pool', 'operator': 'Exists'}]");
        run();
        const struct sim_claim *c = claim_of("p");
        assert_int_equal(c->daemon_overhead.v[RESOURCE_CPU], 500);
        assert_int_equal(c->daemon_overhead.v[RESOURCE_PODS], 1);
        assert_int_equal(c->requests.v[RESOURCE_CPU], 1500);
        assert_int_equal(c->requests.v[RESOURCE_PODS], 2);
        assert_string_equal(c->shape->name, "c1.2VCPU-4GB"); /* 1920m holds 1500m */
}

/* Pods any pool takes join another pool's planned claim only when their home pool cannot have another node. */
static void test_foreign_claim_when_home_pool_is_full(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool_json("{'metadata': {'name': 'ssd'}, 'spec': {'template': {'metadata': {'labels': {'disk': 'ssd'}},"
                      " 'spec': {'nodeClassRef': {'name': 'default'}}}}}");
        add_pool_json("{'metadata': {'name': 'plain'}, 'spec': {'limits': {'nodes': '1'}, 'template': {'spec':"
                      " {'nodeClassRef': {'name': 'default'}}}}}");
        add_pod("fast", "2", "2Gi", "", "'nodeSelector': {'disk': 'ssd'}");
        add_pod("any1", "1", "1Gi", "'app': 'any'", ANTI(HOST, "any"));
        add_pod("any2", "1", "1Gi", "'app': 'any'", ANTI(HOST, "any"));
        run();
        /* any1 gets the one plain node; any2 may not share it and plain may have no second node: the ssd claim */
        assert_string_equal(claim_label(claim_of("any1"), "pvescale.io/nodepool"), "plain");
        assert_ptr_equal(claim_of("any2"), claim_of("fast"));
        assert_int_equal(res->n_claims, 2);
        assert_int_equal(res->n_unplaced, 0);
}

/* A pool with a higher weight is every pod's home that it takes: the others join its claims as before. */
static void test_heavier_pool_is_home(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool_json("{'metadata': {'name': 'ssd'}, 'spec': {'weight': 10, 'template': {'metadata': {'labels':"
                      " {'disk': 'ssd'}}, 'spec': {'nodeClassRef': {'name': 'default'}}}}}");
        add_pool("plain", "");
        add_pod("fast", "1", "1Gi", "", "'nodeSelector': {'disk': 'ssd'}");
        add_pod("any", "1", "1Gi", "", "");
        run();
        assert_ptr_equal(claim_of("any"), claim_of("fast"));
        assert_int_equal(res->n_claims, 1);
        assert_int_equal(res->claims[0].n_after, 0);
}

/* Two pools that take each other's pods: neither claim waits for the other (it could wait for ever). */
static void test_interchangeable_pools_do_not_wait(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool_json("{'metadata': {'name': 'plain'}, 'spec': {'limits': {'nodes': '1'}, 'template': {'spec':"
                      " {'nodeClassRef': {'name': 'default'}}}}}");
        add_pool("spare", "");
        add_pods("a", 2, "1", "'app': 'a'", ANTI(HOST, "a"));
        run();
        assert_int_equal(res->n_claims, 2);
        assert_ptr_not_equal(claim_of("a0"), claim_of("a1"));
        assert_int_equal(res->claims[0].n_after, 0);
        assert_int_equal(res->claims[1].n_after, 0);
}

/* ---- node pools: limits, weight, requirements ---- */

static void test_nodepool_limits(void **state) {
        (void)state;
        static const struct {
                const char *limits, *cpu, *mem, *reason;
        } T[] = {
                { "{'cpu': '4'}", "3", "1Gi", "NodePool default cpu limit 4 reached (2 in use)" },
                { "{'memory': '10Gi'}", "1", "7Gi", "NodePool default memory limit 10Gi reached (4Gi in use)" },
                { "{'nodes': '1'}", "1", "1Gi", "NodePool default nodes limit 1 reached (1 in use)" },
        };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
                char buf[512];
                reset();
                add_host("pve1", 64, 256);
                snprintf(buf, sizeof buf,
                         "{'metadata': {'name': 'default'}, 'spec': {'limits': %s, 'template': {'spec': {'nodeClassRef': {'name': 'default'}}}}}",
                         T[i].limits);
                add_pool_json(buf);
                add_node_json("{'metadata': {'name': 'old', 'labels': {'pvescale.io/nodepool': 'default'}}, 'spec': "
                              "{'unschedulable': true}, 'status': {'capacity': {'cpu': '2', 'memory': '4Gi'}}}");
                add_pod("p", T[i].cpu, T[i].mem, "", "");
                run();
                assert_reason("p", T[i].reason);
        }
}

static void test_nodepool_limit_counts_planned_claims(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool_json("{'metadata': {'name': 'default'}, 'spec': {'limits': {'cpu': '8'}, 'template': {'spec': {'nodeClassRef': {'name': 'default'}}}}}");
        add_pods("a", 3, "3", "'app': 'a'", ANTI(HOST, "a"));
        run();
        assert_int_equal(res->n_claims, 2);
        assert_int_equal(res->n_unplaced, 1);
        assert_reason("a2", "NodePool default cpu limit 8 reached (8 in use)");
}

static void test_nodepool_weight_and_requirements(void **state) {
        (void)state;
        three_hosts();
        add_pool("a", "");
        add_pool_json("{'metadata': {'name': 'b'}, 'spec': {'weight': 50, 'template': {'spec': {'nodeClassRef': {'name': 'default'},"
                      " 'requirements': [{'key': 'pvescale.io/instance-family', 'operator': 'In', 'values': ['s1']},"
                      "  {'key': '" ZONE "', 'operator': 'In', 'values': ['pve2']},"
                      "  {'key': 'tier', 'operator': 'In', 'values': ['gold', 'silver']}]}}}}");
        add_pod("p", "1", "1Gi", "", "");
        add_pod("q", "3", "1Gi", "", "'nodeSelector': {'tier': 'silver'}");
        add_pod("r", "1", "1Gi", "", "'nodeSelector': {'tier': 'bronze'}");
        run();
        const struct sim_claim *c = claim_of("p");
        assert_string_equal(claim_label(c, "pvescale.io/nodepool"), "b"); /* weight 50 beats 0 */
        assert_string_equal(claim_label(c, ZONE), "pve2");
        assert_string_equal(c->shape->family, "s1");
        assert_string_equal(claim_label(claim_of("q"), "tier"), "silver");
        /* q (largest) narrowed a claim to tier=silver; p joins it and the claim grows */
        assert_ptr_equal(claim_of("p"), claim_of("q"));
        assert_string_equal(c->shape->name, "s1.8VCPU-32GB");
        assert_reason("r", "no NodePool matches nodeSelector tier=bronze");
}

static void test_generic_label_default_value(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "'requirements': [{'key': 'tier', 'operator': 'In', 'values': ['gold', 'silver']},"
                            " {'key': 'kubernetes.io/arch', 'operator': 'In', 'values': ['amd64']}]");
        add_pod("p", "1", "1Gi", "", "");
        run();
        assert_string_equal(claim_label(claim_of("p"), "tier"), "gold");
}

static void test_nodepool_config_reasons(void **state) {
        (void)state;
        static const struct {
                const char *tspec, *reason;
        } T[] = {
                { "'requirements': [{'key': 'kubernetes.io/arch', 'operator': 'In', 'values': ['arm64']}]",
                  "NodePool default requires node affinity kubernetes.io/arch In [arm64], which its nodes cannot have" },
                { "'requirements': [{'key': 'pvescale.io/instance-family', 'operator': 'In', 'values': ['q9']}]",
                  "no NodePool matches any instance type (NodePool default allows none)" },
        };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
                reset();
                add_host("pve1", 64, 256);
                add_pool("default", T[i].tspec);
                add_pod("p", "1", "1Gi", "", "");
                run();
                assert_reason("p", T[i].reason);
        }
        reset();
        add_host("pve1", 64, 256);
        add_pool_json("{'metadata': {'name': 'x'}, 'spec': {'template': {'spec': {'nodeClassRef': {'name': 'nope'}}}}}");
        add_pod("p", "1", "1Gi", "", "");
        run();
        assert_reason("p", "NodePool x refers to missing ProxmoxNodeClass nope");
        reset();
        add_pod("p", "1", "1Gi", "", "");
        run();
        assert_reason("p", "no NodePool exists");
}

/* ---- host room ---- */

static void test_host_numa_reason(void **state) {
        (void)state;
        reset();
        add_nodeclass("{'metadata': {'name': 'big'}, 'spec': {'instanceTypes': [{'name': 'c1.12VCPU-24GB',"
                      " 'capacity': {'cpu': '12', 'memory': '24Gi'}}]}}");
        add_pool_json("{'metadata': {'name': 'default'}, 'spec': {'template': {'spec': {'nodeClassRef': {'name': 'big'}}}}}");
        struct sim_host *h1 = add_host("pve1", 8, 100), *h2 = add_host("pve2", 12, 100);
        static struct sim_numa n1[] = { { 0, 2, 16, 50 * GIB }, { 1, 6, 16, 50 * GIB } };
        static struct sim_numa n2[] = { { 0, 4, 16, 50 * GIB }, { 1, 8, 16, 50 * GIB } };
        h1->region = h2->region = NULL;
        h1->numa = n1, h1->n_numa = 2;
        h2->numa = n2, h2->n_numa = 2;
        add_pod("p", "11", "4Gi", "", "");
        add_pod("q", "7", "4Gi", "", "");
        run();
        assert_reason("p", "no host has 12 free cores in one NUMA node (best: pve2 numa1 with 8)");
        /* q needs 8 vCPUs: pve2 numa1 has exactly 8 */
        assert_string_equal(claim_label(claim_of("q"), ZONE), "pve2");
}

static void test_host_room_reasons(void **state) {
        (void)state;
        static const struct {
                uint32_t cpus;
                int64_t mem_gib;
                const char *cpu, *mem, *reason;
        } T[] = {
                { 2, 256, "3", "1Gi", "no host has 4 free cores (best: pve1 with 2)" },
                { 64, 4, "1", "5Gi", "no host has 8Gi free memory (best: pve1 with 4Gi)" },
        };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
                reset();
                add_host("pve1", T[i].cpus, T[i].mem_gib);
                add_pool("default", "");
                add_pod("p", T[i].cpu, T[i].mem, "", "");
                run();
                assert_reason("p", T[i].reason);
        }
}

static void test_host_offers(void **state) {
        (void)state;
        struct sim_host *h = add_host("pve1", 64, 256);
        static struct sim_offer offers[] = { { .shape = "c1.2VCPU-4GB", .count = 1, .preferred = 1 } };
        h->offers = offers;
        h->n_offers = 1;
        h->has_offers = true;
        add_pool("default", "");
        add_pods("o", 2, "1", "'app': 'o'", ANTI(HOST, "o"));
        run();
        assert_string_equal(claim_of("o0")->shape->name, "c1.2VCPU-4GB");
        assert_reason("o1", "no agent offers room for c1.2VCPU-4GB (1 hosts asked)");
}

/* Issue 39: an agent that can hold a shape only in its fallback layout (broken pairs, unbalanced guest
 * nodes) loses to a host offering a preferred layout, whatever the other preferences; where no other host
 * has room, the poor layout is used. */
static void test_host_offer_quality(void **state) {
        (void)state;
        static struct sim_offer poor[] = { { .shape = "c1.2VCPU-4GB", .count = 4, .fallback = true, .score = 40 } };
        static struct sim_offer good[] = { { .shape = "c1.2VCPU-4GB", .count = 4, .preferred = 4, .score = 85 } };
        /* pve1 has more free CPUs (the next preference) but only a poor layout: pve2 is chosen. */
        struct sim_host *a = add_host("pve1", 64, 256), *b = add_host("pve2", 8, 256);
        a->offers = poor, a->n_offers = 1, a->has_offers = true;
        b->offers = good, b->n_offers = 1, b->has_offers = true;
        add_pool("default", "");
        add_pod("p", "1", "1Gi", "", "");
        run();
        assert_string_equal(claim_of("p")->shape->name, "c1.2VCPU-4GB");
        assert_string_equal(claim_label(claim_of("p"), ZONE), "pve2");
        /* Only pve1 has room, one lone CPU on each NUMA node: its agent's poor layout (the VM split, although
         * it would fit one node) is used rather than no node at all. */
        reset();
        a = add_host("pve1", 2, 256);
        b = add_host("pve2", 8, 256);
        static struct sim_numa lone[] = { { 0, 1, 16, 100 * GIB }, { 1, 1, 16, 100 * GIB } };
        static struct sim_offer none[] = { { .shape = "c1.2VCPU-4GB", .count = 0, .score = -1 } };
        a->numa = lone, a->n_numa = 2;
        a->offers = poor, a->n_offers = 1, a->has_offers = true;
        b->offers = none, b->n_offers = 1, b->has_offers = true;
        add_pool("default", "");
        add_pod("p", "1", "1Gi", "", "");
        run();
        assert_string_equal(claim_label(claim_of("p"), ZONE), "pve1");
        /* pve1's agent has one preferred layout left, then only its fallback; pve2 only its fallback. The
         * first claim takes pve1's preferred layout; then both are poor and the fewest planned claims
         * decides: pve2. */
        reset();
        a = add_host("pve1", 64, 256);
        b = add_host("pve2", 8, 256);
        static struct sim_offer one_good[] = { { .shape = "c1.2VCPU-4GB", .count = 4, .preferred = 1, .score = 90 } };
        a->offers = one_good, a->n_offers = 1, a->has_offers = true;
        b->offers = poor, b->n_offers = 1, b->has_offers = true;
        add_pool("default", "");
        add_pods("a", 2, "1", "'app': 'a'", ANTI(HOST, "a"));
        run();
        assert_string_equal(claim_label(claim_of("a0"), ZONE), "pve1");
        assert_string_equal(claim_label(claim_of("a1"), ZONE), "pve2");
}

static void test_host_room_is_consumed(void **state) {
        (void)state;
        add_host("pve1", 8, 256);
        add_pool("default", "");
        add_pods("a", 3, "3", "'app': 'a'", ANTI(HOST, "a"));
        run();
        assert_int_equal(res->n_claims, 2);
        assert_reason("a2", "no host has 4 free cores (best: pve1 with 0)");
}

static void test_region_must_match(void **state) {
        (void)state;
        struct sim_host *h = add_host("pve9", 64, 256);
        h->region = "r2";
        add_pool("default", "");
        add_pod("p", "1", "1Gi", "", "");
        run();
        assert_reason("p", "NodePool default: no host in a zone and region its nodes may use");
}

/* ---- PCI passthrough: devices by Proxmox resource mapping, an extended resource in the shapes ---- */

static void add_host_json(const char *text) {
        char err[256];
        json_t *v = j(text);
        if (simulate_json_host(in, v, NULL, err, sizeof err) < 0)
                fail_msg("host: %s", err);
        json_decref(v);
}

#define GPU_POD(name) \
        "{'metadata': {'name': '" name "', 'namespace': 'default'}, 'spec': {'containers': [{'resources': " \
        "{'limits': {'cpu': '1', 'memory': '1Gi', 'nvidia.com/gpu': '1'}}}]}}"

static void test_pci_devices(void **state) {
        (void)state;
        add_nodeclass("{'metadata': {'name': 'gpu'}, 'spec': {'region': 'r1', 'pciDevices': "
                      "[{'mapping': 'a100', 'resourceName': 'nvidia.com/gpu'}]}}");
        add_pool_json("{'metadata': {'name': 'gpu'}, 'spec': {'template': {'spec': "
                      "{'nodeClassRef': {'name': 'gpu'}}}}}");
        int k = simulate_extended_kind(in, "nvidia.com/gpu", false);
        assert_int_equal(k, RESOURCE_EXTENDED_0);
        assert_string_equal(simulate_resource_name(in, k), "nvidia.com/gpu");
        const struct shape *s = shapes_catalog_find(cats[1], "c1.1VCPU-2GB");
        assert_non_null(s);
        assert_int_equal(s->capacity.v[k], 1);
        assert_int_equal(s->allocatable.v[k], 1);
        assert_int_equal(shapes_catalog_find(cats[0], "c1.1VCPU-2GB")->allocatable.v[k], 0);
        /* the big host has no free device of the mapping, the small one has one */
        add_host_json("{'name': 'pve1', 'region': 'r1', 'free_cpus': 64, 'free_memory_bytes': 274877906944}");
        add_host_json("{'name': 'pve2', 'region': 'r1', 'free_cpus': 8, 'free_memory_bytes': 34359738368, "
                      "'pci_free': {'a100': 1, 'other': 3}}");
        add_node_json("{'metadata': {'name': 'n1', 'labels': {'kubernetes.io/hostname': 'n1'}}, 'spec': {}, "
                      "'status': {'allocatable': {'cpu': '4', 'memory': '8Gi', 'pods': '110', "
                      "'nvidia.com/gpu': '1'}}}");
        add_pod_json(GPU_POD("g1"));
        add_pod_json(GPU_POD("g2"));
        add_pod_json(GPU_POD("g3"));
        add_pod_json("{'metadata': {'name': 'fpga'}, 'spec': {'containers': [{'resources': "
                     "{'limits': {'example.com/fpga': '1'}}}]}}");
        run();
        assert_string_equal(node_of("g1"), "n1"); /* the Node that advertises the resource */
        const struct sim_claim *c = claim_of("g2");
        assert_string_equal(in->hosts[c->host]->name, "pve2");
        assert_string_equal(in->pools[c->nodepool]->name, "gpu");
        assert_int_equal(c->shape->allocatable.v[k], 1);
        assert_int_equal(c->requests.v[k], 1);
        /* one device, one VM: not a second claim on pve2, none on pve1 */
        assert_int_equal(res->n_claims, 1);
        assert_reason("g3", "no host has a free PCI device of mapping a100 (node class gpu, 2 hosts asked)");
        assert_reason("fpga", "requests extended resource example.com/fpga, which no instance type provides");
}

static void test_pci_devices_json_errors(void **state) {
        (void)state;
        char err[256];
        struct shape_catalog *cat = NULL;
        struct shape_options o;
        shapes_options_default(&o);
        json_t *v = j("{'metadata': {'name': 'x'}, 'spec': {'pciDevices': [{'resourceName': 'nvidia.com/gpu'}]}}");
        assert_int_equal(simulate_json_nodeclass(in, v, &o, NULL, &cat, err, sizeof err), -EINVAL);
        assert_string_equal(err, "spec.pciDevices[0].mapping: required");
        json_decref(v);
        v = j("{'name': 'pve1', 'free_cpus': 1, 'free_memory_bytes': 1, 'pci_free': {'a100': -1}}");
        assert_int_equal(simulate_json_host(in, v, NULL, err, sizeof err), -EINVAL);
        assert_string_equal(err, "pci_free.a100: a non-negative integer is required");
        json_decref(v);
}

/* ---- what the simulation cannot do, said plainly ---- */

static void test_unsupported_and_ports(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_pool("default", "");
        add_pod("rack", "1", "1Gi", "'app': 'r'", ANTI("rack", "r"));
        add_pod_json("{'metadata': {'name': 'gpu'}, 'spec': {'containers': [{'resources': {'limits': {'nvidia.com/gpu': '1'}}}]}}");
        add_pods("port", 2, "1", "",
                 "'containers': [{'resources': {'requests': {'cpu': '1'}}, 'ports': [{'containerPort': 80, 'hostPort': 8080}]}]");
        run();
        assert_reason("rack", "pod anti-affinity topologyKey rack is not supported");
        assert_reason("gpu", "requests extended resource nvidia.com/gpu, which no instance type provides");
        assert_ptr_not_equal(claim_of("port0"), claim_of("port1")); /* host ports conflict */
}

static void test_repeated_failures_share_reason_and_run_is_deterministic(void **state) {
        (void)state;
        add_host("pve1", 64, 256);
        add_host("pve2", 64, 256);
        add_pool("default", "");
        add_pods("huge", 5, "100", "", "");
        add_pods("w", 7, "700m", "'app': 'w'", SPREAD(ZONE, 1, "DoNotSchedule", "w"));
        run();
        for (int i = 0; i < 5; i++) {
                char name[8];
                snprintf(name, sizeof name, "huge%d", i);
                assert_reason(name, "NodePool default has no instance type with room for the pod's cpu 100");
        }
        size_t claims = res->n_claims;
        char first[64];
        snprintf(first, sizeof first, "%s", res->claims[0].shape->name);
        run();
        assert_int_equal(res->n_claims, claims);
        assert_string_equal(res->claims[0].shape->name, first);
        assert_int_equal(res->n_unplaced, 5);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_pod_requests, setup, teardown),
                cmocka_unit_test_setup_teardown(test_json_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_new_claim_cheapest_shape_and_labels, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_grows_to_cheapest_holding_shape, setup, teardown),
                cmocka_unit_test_setup_teardown(test_existing_then_inflight_then_new, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unschedulable_node_skipped, setup, teardown),
                cmocka_unit_test_setup_teardown(test_node_selector_pools, setup, teardown),
                cmocka_unit_test_setup_teardown(test_foreign_claim_when_home_pool_is_full, setup, teardown),
                cmocka_unit_test_setup_teardown(test_heavier_pool_is_home, setup, teardown),
                cmocka_unit_test_setup_teardown(test_interchangeable_pools_do_not_wait, setup, teardown),
                cmocka_unit_test_setup_teardown(test_node_affinity_operators, setup, teardown),
                cmocka_unit_test_setup_teardown(test_node_affinity_on_shapes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_taints_and_tolerations, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nodepool_taints, setup, teardown),
                cmocka_unit_test_setup_teardown(test_hostname_anti_affinity, setup, teardown),
                cmocka_unit_test_setup_teardown(test_zone_anti_affinity, setup, teardown),
                cmocka_unit_test_setup_teardown(test_symmetric_anti_affinity, setup, teardown),
                cmocka_unit_test_setup_teardown(test_per_pod_labels_still_select, setup, teardown),
                cmocka_unit_test_setup_teardown(test_hostname_self_affinity, setup, teardown),
                cmocka_unit_test_setup_teardown(test_zone_affinity_to_running_pods, setup, teardown),
                cmocka_unit_test_setup_teardown(test_zone_affinity_takes_first_node_of_its_zones, setup, teardown),
                cmocka_unit_test_setup_teardown(test_many_hosts_claims_follow_host_preference, setup, teardown),
                cmocka_unit_test_setup_teardown(test_grown_claim_moves_its_host_back, setup, teardown),
                cmocka_unit_test_setup_teardown(test_zone_spread, setup, teardown),
                cmocka_unit_test_setup_teardown(test_hostname_spread, setup, teardown),
                cmocka_unit_test_setup_teardown(test_spread_schedule_anyway_is_a_preference, setup, teardown),
                cmocka_unit_test_setup_teardown(test_spread_min_domains, setup, teardown),
                cmocka_unit_test_setup_teardown(test_zone_affine_set_anchors_where_room_is, setup, teardown),
                cmocka_unit_test_setup_teardown(test_full_host_leaves_spread_domains, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mixed_constraints, setup, teardown),
                cmocka_unit_test_setup_teardown(test_daemonset_overhead, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nodepool_limits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nodepool_limit_counts_planned_claims, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nodepool_weight_and_requirements, setup, teardown),
                cmocka_unit_test_setup_teardown(test_generic_label_default_value, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nodepool_config_reasons, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_numa_reason, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_room_reasons, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_offers, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_offer_quality, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_room_is_consumed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_region_must_match, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pci_devices, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pci_devices_json_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unsupported_and_ports, setup, teardown),
                cmocka_unit_test_setup_teardown(test_repeated_failures_share_reason_and_run_is_deterministic, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
