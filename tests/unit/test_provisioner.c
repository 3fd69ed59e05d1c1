/* Tests for the pure parts of coordinator/provisioner: host room from agent answers and from Proxmox accounting,
 * charges of claims the hosts do not know yet, the round's input (nominations, registered and deleting claims,
 * malformed objects, backoff exclusions), NodeClaim objects and status, pool usage, names and event reasons. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "nodeclaim.h"
#include "provisioner.h"
#include "simulate_json.h"

#define GIB (1024LL * 1024 * 1024)

static json_t *parse(const char *text) {
        json_error_t e;
        json_t *v = json_loads(text, 0, &e);
        if (!v)
                fail_msg("bad JSON in test: %s: %s", e.text, text);
        return v;
}

static int64_t int_at(const json_t *o, const char *key) {
        return (int64_t)json_integer_value(json_object_get(o, key));
}

static const json_t *offer_named(const json_t *host, const char *shape) {
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(host, "offers"), i, o) {
                if (strcmp(json_string_value(json_object_get(o, "shape")), shape) == 0)
                        return o;
        }
        return NULL;
}

/* Two VM sizes; the first stands for two shape names. */
static const char *names_a[] = { "c1.2VCPU-4GB", "x1.2VCPU-4GB" }, *names_b[] = { "m1.4VCPU-32GB" };
static struct provisioner_shape shape_items[] = {
        { 2, 4 * GIB, 0, names_a, 2 },
        { 4, 32 * GIB, 0, names_b, 1 },
};
static const struct provisioner_shapes shapes = { shape_items, 2 };

static void test_host_from_agent(void **state) {
        (void)state;
        json_t *cap = parse("{\"node\": \"pve1\", \"cpus_free\": 20, \"memory_free_bytes\": 68719476736, \"numa_nodes\": ["
                            "{\"id\": 0, \"cpus_free\": 4, \"memory_free_bytes\": 8589934592},"
                            "{\"id\": 1, \"cpus_free\": 16, \"memory_free_bytes\": 60129542144}]}");
        json_t *offers = parse("{\"offers\": [{\"count\": 7, \"preferred_count\": 5, \"score\": 81.5,"
                               " \"fallback\": false,"
                               " \"shape\": {\"vcpus\": 2, \"memory_bytes\": 4294967296}},"
                               "{\"count\": 1, \"score\": 42.0, \"fallback\": true,"
                               " \"shape\": {\"vcpus\": 4, \"memory_bytes\": 34359738368}},"
                               "{\"count\": 9, \"shape\": {\"vcpus\": 3, \"memory_bytes\": 1}}]}");
        json_t *topo = parse("{\"numa_nodes\": [{\"id\": 0, \"cpus\": \"0-7,16-23\"}, {\"id\": 1, \"cpus\": \"8-15,24-31\"}]}");
        json_t *h = provisioner_host_from_agent("pve1", "r1", cap, offers, topo, &shapes);
        assert_non_null(h);
        assert_string_equal(json_string_value(json_object_get(h, "name")), "pve1");
        assert_string_equal(json_string_value(json_object_get(h, "region")), "r1");
        assert_int_equal(int_at(h, "free_cpus"), 20);
        assert_int_equal(int_at(h, "free_memory_bytes"), 64 * GIB);
        const json_t *numa = json_object_get(h, "numa");
        assert_int_equal(json_array_size(numa), 2);
        assert_int_equal(int_at(json_array_get(numa, 0), "free_cpus"), 4);
        assert_int_equal(int_at(json_array_get(numa, 0), "total_cpus"), 16);
        assert_int_equal(int_at(json_array_get(numa, 1), "free_memory_bytes"), 56 * GIB);
        /* One VM size, two names; an offer for a size nobody asked about is dropped. */
        assert_int_equal(json_array_size(json_object_get(h, "offers")), 3);
        assert_int_equal(int_at(offer_named(h, "c1.2VCPU-4GB"), "count"), 7);
        assert_int_equal(int_at(offer_named(h, "x1.2VCPU-4GB"), "count"), 7);
        assert_int_equal(int_at(offer_named(h, "m1.4VCPU-32GB"), "count"), 1);
        /* The layout's quality goes with each name: the score, and whether it is the agent's fallback. */
        assert_true(json_real_value(json_object_get(offer_named(h, "x1.2VCPU-4GB"), "score")) == 81.5);
        assert_true(json_is_false(json_object_get(offer_named(h, "c1.2VCPU-4GB"), "fallback")));
        assert_true(json_is_true(json_object_get(offer_named(h, "m1.4VCPU-32GB"), "fallback")));
        assert_int_equal(int_at(offer_named(h, "c1.2VCPU-4GB"), "preferred_count"), 5);
        assert_int_equal(int_at(offer_named(h, "m1.4VCPU-32GB"), "preferred_count"), 0); /* fallback, none given */
        /* The result is valid simulation input. */
        struct sim_input *in = simulate_input_new();
        char err[256];
        struct sim_host *sh;
        assert_int_equal(simulate_json_host(in, h, &sh, err, sizeof err), 0);
        assert_int_equal(sh->n_numa, 2);
        assert_true(sh->has_offers);
        for (size_t i = 0; i < sh->n_offers; i++) {
                bool big = strcmp(sh->offers[i].shape, "m1.4VCPU-32GB") == 0;
                assert_int_equal(sh->offers[i].fallback, big);
                assert_int_equal(sh->offers[i].preferred, big ? 0 : 5);
                assert_true(sh->offers[i].score == (big ? 42.0 : 81.5));
        }
        simulate_input_free(in);
        json_decref(h);
        /* Without offers (the call failed) the room is still known; without capacity there is none. */
        h = provisioner_host_from_agent("pve1", NULL, cap, NULL, NULL, &shapes);
        assert_null(json_object_get(h, "offers"));
        assert_int_equal(int_at(json_array_get(json_object_get(h, "numa"), 1), "total_cpus"), 0);
        json_decref(h);
        assert_null(provisioner_host_from_agent("pve1", "r1", offers, offers, topo, &shapes));
        json_decref(cap);
        json_decref(offers);
        json_decref(topo);
}

static void test_host_from_pve(void **state) {
        (void)state;
        json_t *status = parse("{\"cpuinfo\": {\"cpus\": 32, \"cores\": 16, \"sockets\": 2}, \"memory\": {\"total\": 68719476736}}");
        json_t *vms = parse("[{\"vmid\": 9000, \"template\": 1, \"cpus\": 2, \"maxmem\": 2147483648},"
                            " {\"vmid\": 100, \"cpus\": 4, \"maxmem\": 8589934592, \"status\": \"running\"},"
                            " {\"vmid\": 101, \"maxcpu\": 2, \"maxmem\": 4294967296, \"status\": \"stopped\"}]");
        json_t *h = provisioner_host_from_pve("pve2", "r1", status, vms);
        assert_int_equal(int_at(h, "free_cpus"), 32 - 4 - 2);
        assert_int_equal(int_at(h, "free_memory_bytes"), 64 * GIB - 8 * GIB - 4 * GIB);
        assert_null(json_object_get(h, "offers"));
        json_decref(h);
        /* Overcommitted hosts have no room (not a negative one). */
        json_t *many = parse("[{\"vmid\": 100, \"cpus\": 64, \"maxmem\": 137438953472}]");
        h = provisioner_host_from_pve("pve2", "r1", status, many);
        assert_int_equal(int_at(h, "free_cpus"), 0);
        assert_int_equal(int_at(h, "free_memory_bytes"), 0);
        json_decref(h);
        json_t *bad = parse("{\"memory\": {\"total\": 1}}");
        assert_null(provisioner_host_from_pve("pve2", "r1", bad, vms));
        json_decref(bad);
        json_decref(many);
        json_decref(status);
        json_decref(vms);
}

static void test_host_charge(void **state) {
        (void)state;
        json_t *h = parse("{\"name\": \"pve1\", \"free_cpus\": 10, \"free_memory_bytes\": 40802189312,"
                          " \"offers\": [{\"shape\": \"c1.2VCPU-4GB\", \"count\": 5, \"preferred_count\": 4},"
                          " {\"shape\": \"m1.4VCPU-32GB\", \"count\": 1},"
                          " {\"shape\": \"unknown\", \"count\": 3}]}");
        provisioner_host_charge(h, 4, 8 * GIB, &shapes); /* 6 CPUs, 30 GiB left */
        assert_int_equal(int_at(h, "free_cpus"), 6);
        assert_int_equal(int_at(h, "free_memory_bytes"), 30 * GIB);
        assert_int_equal(int_at(offer_named(h, "c1.2VCPU-4GB"), "count"), 3);  /* min(5, 6/2, 30/4) */
        assert_int_equal(int_at(offer_named(h, "c1.2VCPU-4GB"), "preferred_count"), 3); /* never above count */
        assert_int_equal(int_at(offer_named(h, "m1.4VCPU-32GB"), "count"), 0); /* 30 GiB < 32 GiB */
        assert_int_equal(int_at(offer_named(h, "unknown"), "count"), 3);
        provisioner_host_charge(h, 100, 100 * GIB, &shapes);
        assert_int_equal(int_at(h, "free_cpus"), 0);
        assert_int_equal(int_at(offer_named(h, "c1.2VCPU-4GB"), "count"), 0);
        json_decref(h);
}

/* ---- rounds ---- */

#define CLASS "{\"metadata\": {\"name\": \"default\"}, \"spec\": {\"instanceTemplateRef\": {\"name\": \"t\"}}}"
#define POOL(name, extra) "{\"metadata\": {\"name\": \"" name "\"}, \"spec\": {" extra "\"template\": {\"spec\": {" \
        "\"nodeClassRef\": {\"name\": \"default\"}, \"taints\": [{\"key\": \"dedicated\", \"value\": \"x\", \"effect\": \"NoSchedule\"}]," \
        " \"startupTaints\": [{\"key\": \"boot\", \"effect\": \"NoSchedule\"}], \"expireAfter\": \"24h\"," \
        " \"terminationGracePeriod\": \"90s\"}}}}"
#define POD(name, uid, cpu) "{\"metadata\": {\"name\": \"" name "\", \"namespace\": \"default\", \"uid\": \"" uid "\"}," \
        " \"spec\": {\"tolerations\": [{\"key\": \"dedicated\", \"operator\": \"Exists\"}], \"containers\": [{\"name\": \"c\"," \
        " \"resources\": {\"requests\": {\"cpu\": \"" cpu "\", \"memory\": \"1Gi\"}}}]}}"
#define INITIALIZED "\"conditions\": [{\"type\": \"Initialized\", \"status\": \"True\"}]"
#define HOST(name) "{\"name\": \"" name "\", \"region\": \"r1\", \"free_cpus\": 64, \"free_memory_bytes\": 274877906944}"
#define CLAIM(name, host, extra) "{\"metadata\": {\"name\": \"" name "\"" extra "}, \"spec\": {\"nodePool\": \"default\"," \
        " \"nodeClassRef\": {\"name\": \"default\"}, \"instanceType\": \"c1.4VCPU-8GB\", \"requirements\": [" \
        "{\"key\": \"topology.kubernetes.io/zone\", \"operator\": \"In\", \"values\": [\"" host "\"]}," \
        "{\"key\": \"pvescale.io/nodepool\", \"operator\": \"In\", \"values\": [\"default\"]}]}"

struct fixture {
        json_t *candidates, *bound, *nodes, *claims, *pools, *classes, *daemonsets, *nominated;
        struct provisioner_snapshot snap;
};

static void fixture_init(struct fixture *f, const char *candidates, const char *nodes, const char *claims,
                         const char *pools) {
        f->candidates = parse(candidates);
        f->bound = parse("[]");
        f->nodes = parse(nodes);
        f->claims = parse(claims);
        f->pools = parse(pools);
        f->classes = parse("[" CLASS "]");
        f->daemonsets = parse("[]");
        f->nominated = parse("{}");
        f->snap = (struct provisioner_snapshot){ f->candidates, f->bound, f->nodes, f->claims, f->pools, f->classes,
                                                 f->daemonsets, f->nominated };
}

static void fixture_done(struct fixture *f) {
        json_t **all[] = { &f->candidates, &f->bound, &f->nodes, &f->claims, &f->pools, &f->classes, &f->daemonsets,
                           &f->nominated };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                json_decref(*all[i]);
}

static void add_host(struct provisioner_round *r, const char *text) {
        json_t *h = parse(text);
        char err[256];
        assert_int_equal(simulate_json_host(r->in, h, NULL, err, sizeof err), 0);
        json_decref(h);
}

static const json_t *req_values(const json_t *claim, const char *key) {
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(json_object_get(claim, "spec"), "requirements"), i, r) {
                if (strcmp(json_string_value(json_object_get(r, "key")), key) == 0)
                        return json_object_get(r, "values");
        }
        return NULL;
}

static void test_round_claim_object(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[" POD("a", "u-a", "1500m") "," POD("b", "u-b", "1") "]",
                     "[{\"metadata\": {\"name\": \"n1\", \"labels\": {\"pvescale.io/nodepool\": \"default\"}}, \"spec\": {"
                     "\"taints\": [{\"key\": \"full\", \"effect\": \"NoSchedule\"}]},"
                     " \"status\": {\"capacity\": {\"cpu\": \"2\", \"memory\": \"4Gi\", \"pods\": \"110\"}}}]",
                     "[]", "[" POOL("default", "\"limits\": {\"cpu\": \"100\"},") "]");
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(json_array_size(r->problems), 0);
        assert_int_equal(r->n_candidates, 2);
        add_host(r, HOST("pve7"));
        struct sim_result *res;
        assert_int_equal(simulate_run(r->in, &res), 0);
        assert_int_equal(res->n_claims, 1);
        json_t *claim = provisioner_claim_object(r, res, 0, "default-abcde");
        const json_t *meta = json_object_get(claim, "metadata"), *spec = json_object_get(claim, "spec");
        assert_string_equal(json_string_value(json_object_get(claim, "apiVersion")), "pvescale.io/v1alpha1");
        assert_string_equal(json_string_value(json_object_get(claim, "kind")), "NodeClaim");
        assert_string_equal(json_string_value(json_object_get(meta, "name")), "default-abcde");
        assert_string_equal(json_string_value(json_array_get(json_object_get(meta, "finalizers"), 0)),
                            PROVISIONER_CLAIM_FINALIZER);
        const json_t *labels = json_object_get(meta, "labels");
        assert_string_equal(json_string_value(json_object_get(labels, "pvescale.io/nodepool")), "default");
        assert_string_equal(json_string_value(json_object_get(labels, "topology.kubernetes.io/zone")), "pve7");
        assert_string_equal(json_string_value(json_object_get(labels, "topology.kubernetes.io/region")), "r1");
        assert_string_equal(json_string_value(json_object_get(spec, "nodePool")), "default");
        assert_string_equal(json_string_value(json_object_get(json_object_get(spec, "nodeClassRef"), "kind")),
                            "ProxmoxNodeClass");
        const char *shape = json_string_value(json_object_get(spec, "instanceType"));
        assert_string_equal(shape, res->claims[0].shape->name);
        assert_string_equal(json_string_value(json_array_get(req_values(claim, "node.kubernetes.io/instance-type"), 0)),
                            shape);
        assert_string_equal(json_string_value(json_array_get(req_values(claim, "topology.kubernetes.io/zone"), 0)), "pve7");
        /* Every label is an In requirement. */
        assert_int_equal(json_array_size(json_object_get(spec, "requirements")), json_object_size(labels));
        const json_t *req = json_object_get(json_object_get(spec, "resources"), "requests");
        assert_string_equal(json_string_value(json_object_get(req, "cpu")), "2500m");
        assert_string_equal(json_string_value(json_object_get(req, "memory")), "2Gi");
        assert_string_equal(json_string_value(json_object_get(req, "pods")), "2");
        assert_null(json_object_get(req, "hugepages-1Gi"));
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(spec, "taints"), 0), "key")),
                            "dedicated");
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(spec, "startupTaints"), 0), "key")),
                            "boot");
        assert_string_equal(json_string_value(json_object_get(spec, "expireAfter")), "24h");
        assert_string_equal(json_string_value(json_object_get(spec, "terminationGracePeriod")), "90s");
        json_t *st = provisioner_claim_status(r, res, 0);
        assert_string_equal(json_string_value(json_object_get(st, "host")), "pve7");
        assert_string_equal(json_string_value(json_object_get(st, "region")), "r1");
        assert_non_null(json_object_get(json_object_get(st, "allocatable"), "cpu"));
        /* The claim's status makes it valid in-flight input for the next round. */
        json_object_set(claim, "status", st);
        char err[256];
        assert_int_equal(simulate_json_nodeclaim(r->in, claim, NULL, NULL, err, sizeof err), 0);
        /* Usage: the node's 2 CPUs and the new claim (the in-flight copy just added counts too). */
        r->in->n_nodes--;
        json_t *usage = provisioner_pool_usage(r, res, 0);
        char want[32];
        snprintf(want, sizeof want, "%d", 2 + (int)res->claims[0].shape->vcpus);
        assert_string_equal(json_string_value(json_object_get(usage, "cpu")), want);
        assert_string_equal(json_string_value(json_object_get(usage, "nodes")), "2");
        json_decref(usage);
        json_decref(st);
        json_decref(claim);
        simulate_result_free(res);
        provisioner_round_free(r);
        fixture_done(&f);
}

/* Run the round with host pve1, then free it: pod `pod` goes onto an in-flight node, every nominated pod stays on
 * its claim, and no claim is made. */
static void expect_on_in_flight(struct provisioner_round *r, size_t pod) {
        struct sim_result *res;
        add_host(r, HOST("pve1"));
        assert_int_equal(simulate_run(r->in, &res), 0);
        for (size_t i = 0; i < r->n_candidates; i++)
                if (r->in->pods[i]->node_name)
                        assert_int_equal(res->placements[i].target, SIM_TARGET_BOUND);
        assert_int_equal(res->placements[pod].target, SIM_TARGET_NODE);
        assert_true(r->in->nodes[res->placements[pod].index]->in_flight);
        assert_int_equal(res->n_claims, 0);
        simulate_result_free(res);
        provisioner_round_free(r);
}

static void test_round_inflight_and_nominations(void **state) {
        (void)state;
        struct fixture f;
        /* c-reg has a Node (by providerID); c-del is being deleted; c-1 and c-2 are in flight. */
        fixture_init(&f, "[" POD("a", "u-a", "500m") "," POD("b", "u-b", "500m") "]",
                     "[{\"metadata\": {\"name\": \"node-r\"}, \"spec\": {\"providerID\": \"proxmox://r1/101\"},"
                     " \"status\": {\"capacity\": {\"cpu\": \"1\", \"memory\": \"1Gi\"}}}]",
                     "[" CLAIM("c-reg", "pve1", "") ", \"status\": {\"providerID\": \"proxmox://r1/101\", " INITIALIZED "}},"
                     CLAIM("c-del", "pve1", ", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"") "},"
                     CLAIM("c-1", "pve1", "") "}," CLAIM("c-2", "pve2", "") "}]",
                     "[" POOL("default", "") "]");
        json_object_set_new(f.nominated, "u-b", json_string("c-2"));
        json_object_set_new(f.nominated, "u-a", json_string("c-del")); /* gone: placed afresh */
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(r->in->n_nodes, 3); /* node-r, c-1, c-2 */
        assert_string_equal(r->in->nodes[0]->name, "node-r");
        assert_false(r->in->nodes[0]->in_flight);
        assert_string_equal(r->in->nodes[1]->name, "c-1");
        assert_true(r->in->nodes[1]->in_flight);
        assert_null(r->in->pods[0]->node_name);
        assert_string_equal(r->in->pods[1]->node_name, "c-2");
        expect_on_in_flight(r, 0);
        fixture_done(&f);
}

/* A pending pod nominated to a claim Initialized less than PROVISIONER_SETTLE_MS ago enters bound to the claim's
 * Node (kube-scheduler may still have it in its backoff), not re-planned; once the window is over, placed afresh. */
static void test_round_settling_claim(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[" POD("a", "u-a", "500m") "," POD("b", "u-b", "500m") "]",
                     "[{\"metadata\": {\"name\": \"node-r\"}, \"spec\": {\"providerID\": \"proxmox://r1/101\"},"
                     " \"status\": {\"capacity\": {\"cpu\": \"1\", \"memory\": \"1Gi\"}}}]",
                     "[" CLAIM("c-reg", "pve1", "") ", \"status\": {\"providerID\": \"proxmox://r1/101\", "
                     "\"nodeName\": \"node-r\", \"conditions\": [{\"type\": \"Initialized\", \"status\": \"True\", "
                     "\"lastTransitionTime\": \"2026-12-07T12:00:00Z\"}]}}]",
                     "[" POOL("default", "") "]");
        json_object_set_new(f.nominated, "u-a", json_string("c-reg"));
        struct provisioner_round *r;
        int64_t at = 1796644800000LL; /* 2026-12-07T12:00:00Z */
        f.snap.now_ms = at + 5000;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(r->in->n_nodes, 1);
        assert_string_equal(r->in->pods[0]->node_name, "node-r");
        assert_null(r->in->pods[1]->node_name);
        assert_string_equal(json_string_value(json_object_get(r->settling, "node-r")), "c-reg");
        provisioner_round_free(r);
        f.snap.now_ms = at + PROVISIONER_SETTLE_MS;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_null(r->in->pods[0]->node_name);
        provisioner_round_free(r);
        f.snap.now_ms = 0;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_null(r->in->pods[0]->node_name);
        provisioner_round_free(r);
        fixture_done(&f);
}

/* A claim whose Node has registered but that is not Initialized stays in flight (Karpenter's rule): its Node
 * still has the unregistered and not-ready taints, and pods that could only go there would otherwise get a new
 * claim each. Pods bound to that Node count on the claim; pods nominated to it stay nominated. */
static void test_round_registered_not_initialized(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[" POD("a", "u-a", "500m") "]",
                     "[{\"metadata\": {\"name\": \"c-reg\"}, \"spec\": {\"providerID\": \"proxmox://r1/101\", \"taints\": ["
                     "{\"key\": \"pvescale.io/unregistered\", \"effect\": \"NoExecute\"},"
                     "{\"key\": \"node.kubernetes.io/not-ready\", \"effect\": \"NoSchedule\"}]},"
                     " \"status\": {\"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\"}}}]",
                     "[" CLAIM("c-reg", "pve1", "") ", \"status\": {\"providerID\": \"proxmox://r1/101\"}}]",
                     "[" POOL("default", "") "]");
        json_decref(f.bound);
        f.bound = parse("[{\"metadata\": {\"name\": \"ds\", \"namespace\": \"default\", \"uid\": \"u-ds\"},"
                        " \"spec\": {\"nodeName\": \"c-reg\", \"containers\": [{\"name\": \"c\","
                        " \"resources\": {\"requests\": {\"cpu\": \"3\", \"memory\": \"1Gi\"}}}]}}]");
        f.snap.bound = f.bound;
        json_object_set_new(f.nominated, "u-a", json_string("c-reg"));
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(r->in->n_nodes, 1); /* the claim, standing for its Node */
        assert_true(r->in->nodes[0]->in_flight);
        assert_string_equal(r->in->pods[0]->node_name, "c-reg"); /* still nominated */
        assert_string_equal(r->in->pods[1]->node_name, "c-reg"); /* bound to the Node: counts on the claim */
        add_host(r, HOST("pve1"));
        struct sim_result *res;
        assert_int_equal(simulate_run(r->in, &res), 0);
        assert_int_equal(res->placements[0].target, SIM_TARGET_BOUND);
        assert_int_equal(res->n_claims, 0);
        simulate_result_free(res);
        provisioner_round_free(r);
        /* Without a nomination the pending pod still fits the claim (4 CPUs, 3 used): no new claim. */
        json_object_clear(f.nominated);
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        expect_on_in_flight(r, 0);
        fixture_done(&f);
}

/* A Node marked for deletion (the disrupted taint: the old node of a replace, or one being drained) does not hold its
 * pool's limit: the pod evicted from it gets a node even in a pool at its node limit, as Karpenter's scheduler counts
 * only active nodes (issue 37, 5). A Node being deleted does not either; an ordinary one does. */
static void test_round_leaving_node_holds_no_limit(void **state) {
        (void)state;
        static const char *const nodes[] = {
                "[{\"metadata\": {\"name\": \"old\", \"labels\": {\"pvescale.io/nodepool\": \"default\"}}, \"spec\": {"
                "\"taints\": [{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoSchedule\"}]},"
                " \"status\": {\"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\"}}}]",
                "[{\"metadata\": {\"name\": \"old\", \"labels\": {\"pvescale.io/nodepool\": \"default\"},"
                " \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"}, \"spec\": {},"
                " \"status\": {\"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\"}}}]",
                "[{\"metadata\": {\"name\": \"old\", \"labels\": {\"pvescale.io/nodepool\": \"default\"}}, \"spec\": {"
                "\"unschedulable\": true}, \"status\": {\"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\"}}}]",
        };
        for (size_t k = 0; k < 3; k++) {
                struct fixture f;
                fixture_init(&f, "[" POD("a", "u-a", "500m") "]", nodes[k], "[]",
                             "[" POOL("default", "\"limits\": {\"nodes\": \"1\"},") "]");
                struct provisioner_round *r;
                struct sim_result *res;
                assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
                assert_int_equal(r->in->n_nodes, 1);
                assert_int_equal(r->in->nodes[0]->leaving, k < 2);
                add_host(r, HOST("pve1"));
                assert_int_equal(simulate_run(r->in, &res), 0);
                assert_int_equal(res->n_claims, k < 2 ? 1 : 0); /* a cordoned node still counts */
                simulate_result_free(res);
                provisioner_round_free(r);
                fixture_done(&f);
        }
}

/* The pod (JSON text) bound to node, among the fixture's bound pods. */
static void bind_pod(struct fixture *f, const char *text, const char *node) {
        json_t *pod = parse(text);
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
        json_array_append_new(f->bound, pod);
}

/* Karpenter counts the pods of Nodes marked for deletion as pending when it provisions: a provisioning round
 * (reschedule_leaving) enters the pods of a leaving Node unbound after the pending ones, so the claim launched for
 * the first pod evicted from it has room for the next one too; its DaemonSet's pods and pods already going stay
 * bound. The scale-down pass's rounds (without it) keep every pod where it is. */
static void test_round_leaving_node_pods_reschedule(void **state) {
        (void)state;
        for (int reschedule = 0; reschedule < 2; reschedule++) {
                struct fixture f;
                fixture_init(&f, "[" POD("a", "u-a", "1") "]",
                             "[{\"metadata\": {\"name\": \"old\", \"labels\": {\"pvescale.io/nodepool\": \"default\"}},"
                             " \"spec\": {\"taints\": [{\"key\": \"pvescale.io/disrupted\", \"effect\": \"NoSchedule\"}]},"
                             " \"status\": {\"capacity\": {\"cpu\": \"8\", \"memory\": \"16Gi\"}}},"
                             " {\"metadata\": {\"name\": \"stays\"}, \"spec\": {},"
                             " \"status\": {\"capacity\": {\"cpu\": \"1\", \"memory\": \"2Gi\"}}}]",
                             "[]", "[" POOL("default", "") "]");
                bind_pod(&f, POD("b", "u-b", "1"), "old");
                bind_pod(&f, POD("going", "u-g", "1"), "old");
                json_object_set_new(json_object_get(json_array_get(f.bound, 1), "metadata"), "deletionTimestamp",
                                    json_string("2026-01-01T00:00:00Z"));
                bind_pod(&f, POD("ds", "u-d", "1"), "old");
                json_object_set_new(json_object_get(json_array_get(f.bound, 2), "metadata"), "ownerReferences",
                                    parse("[{\"kind\": \"DaemonSet\", \"name\": \"d\", \"controller\": true}]"));
                bind_pod(&f, POD("c", "u-c", "1"), "stays");
                f.snap.reschedule_leaving = reschedule;
                struct provisioner_round *r;
                struct sim_result *res;
                assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
                assert_int_equal(r->n_pending, 1);
                assert_int_equal(r->n_candidates, reschedule ? 2 : 1);
                assert_int_equal(r->in->n_pods, 5);
                if (reschedule) {
                        assert_string_equal(r->in->pods[1]->name, "b");
                        assert_null(r->in->pods[1]->node_name);
                }
                for (size_t i = r->n_candidates; i < r->in->n_pods; i++)
                        assert_non_null(r->in->pods[i]->node_name);
                add_host(r, HOST("pve1"));
                assert_int_equal(simulate_run(r->in, &res), 0);
                assert_int_equal(res->n_claims, 1);
                assert_int_equal(res->placements[0].target, SIM_TARGET_CLAIM);
                if (reschedule) { /* one claim for both: a and b */
                        assert_int_equal(res->placements[1].target, SIM_TARGET_CLAIM);
                        assert_int_equal(res->placements[1].index, res->placements[0].index);
                }
                assert_true(res->claims[0].shape->vcpus >= (reschedule ? 2u : 1u));
                simulate_result_free(res);
                provisioner_round_free(r);
                fixture_done(&f);
        }
}

/* The claims watch can bring Initialized before the nodes watch brings the launcher's Node update: a cached Node
 * that still carries the unregistered taint is older than its claim, and the claim stands for it until the new
 * copy arrives. Without that, a pod that only fits there gets a second claim. */
static void test_round_initialized_before_node_update(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[" POD("a", "u-a", "500m") "]",
                     "[{\"metadata\": {\"name\": \"node-1\"}, \"spec\": {\"providerID\": \"proxmox://r1/101\", \"taints\": ["
                     "{\"key\": \"pvescale.io/unregistered\", \"value\": \"true\", \"effect\": \"NoExecute\"}]},"
                     " \"status\": {\"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\"}}}]",
                     "[" CLAIM("c-1", "pve1", "") ", \"status\": {\"providerID\": \"proxmox://r1/101\", \"nodeName\": "
                     "\"node-1\", " INITIALIZED "}}]",
                     "[" POOL("default", "") "]");
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(r->in->n_nodes, 1);
        assert_string_equal(r->in->nodes[0]->name, "c-1");
        assert_true(r->in->nodes[0]->in_flight);
        expect_on_in_flight(r, 0);
        /* Once the Node's new copy (taint gone) is cached, the Node itself is the input. */
        json_object_del(json_object_get(json_array_get(f.nodes, 0), "spec"), "taints");
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(r->in->n_nodes, 1);
        assert_string_equal(r->in->nodes[0]->name, "node-1");
        assert_false(r->in->nodes[0]->in_flight);
        provisioner_round_free(r);
        fixture_done(&f);
}

static void test_round_problems_and_exclusions(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f,
                     "[" POD("a", "u-a", "1") ", {\"metadata\": {\"name\": \"bad\", \"namespace\": \"x\"}, \"spec\": {\"containers\":"
                     " [{\"name\": \"c\", \"resources\": {\"requests\": {\"cpu\": \"lots\"}}}]}}]",
                     "[]", "[]", "[" POOL("default", "") ", {\"metadata\": {\"name\": \"broken\"}, \"spec\": {\"weight\": 500,"
                     " \"template\": {\"spec\": {\"nodeClassRef\": {\"name\": \"default\"}}}}}]");
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        assert_int_equal(r->n_candidates, 1);
        assert_int_equal(r->in->n_pools, 1);
        assert_int_equal(json_array_size(r->problems), 2);
        assert_non_null(strstr(json_string_value(json_array_get(r->problems, 0)), "NodePool broken: spec.weight"));
        assert_non_null(strstr(json_string_value(json_array_get(r->problems, 1)), "Pod x/bad: "));
        assert_non_null(strstr(json_string_value(json_array_get(r->problems, 1)), "cpu"));
        add_host(r, HOST("pve1"));
        add_host(r, HOST("pve2"));
        /* Launches of the pool on pve1 are paused: the claim goes to pve2; with both paused it stays pending. */
        json_t *hosts = parse("[\"pve1\"]");
        assert_int_equal(provisioner_round_exclude_hosts(r, 0, hosts), 0);
        struct sim_result *res;
        assert_int_equal(simulate_run(r->in, &res), 0);
        assert_int_equal(res->n_claims, 1);
        assert_string_equal(r->in->hosts[res->claims[0].host]->name, "pve2");
        simulate_result_free(res);
        json_array_append_new(hosts, json_string("pve2"));
        assert_int_equal(provisioner_round_exclude_hosts(r, 0, hosts), 0);
        assert_int_equal(simulate_run(r->in, &res), 0);
        assert_int_equal(res->n_claims, 0);
        assert_int_equal(res->placements[0].target, SIM_TARGET_UNPLACED);
        assert_string_equal(provisioner_unplaced_reason(res->placements[0].reason), PROVISIONER_REASON_HOST_ROOM);
        simulate_result_free(res);
        json_decref(hosts);
        provisioner_round_free(r);
        fixture_done(&f);
}

static void test_charge_pending(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[]", "[]",
                     "[" CLAIM("new", "pve1", "") "}," CLAIM("reserved", "pve1", "") ", \"status\": {\"reservationID\": \"r-1\","
                     " \"vmid\": 105}}," CLAIM("vm", "pve1", "") ", \"status\": {\"vmid\": 106}}," CLAIM("other", "pve2", "") "},"
                     CLAIM("going", "pve1", ", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"") "}]",
                     "[" POOL("default", "") "]");
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        /* Agent view: "new" and "vm" have no reservation yet: 2 × c1.4VCPU-8GB. */
        json_t *h = parse(HOST("pve1"));
        provisioner_host_charge_pending(h, r, f.claims, true, NULL, NULL);
        assert_int_equal(int_at(h, "free_cpus"), 64 - 8);
        assert_int_equal(int_at(h, "free_memory_bytes"), 256 * GIB - 16 * GIB);
        json_decref(h);
        /* Proxmox view: VM 106 is listed (charged by PVE already); "new" and "reserved" (VM 105 not there yet). */
        h = parse(HOST("pve1"));
        json_t *vmids = parse("[100, 106]");
        provisioner_host_charge_pending(h, r, f.claims, false, vmids, NULL);
        assert_int_equal(int_at(h, "free_cpus"), 64 - 8);
        json_decref(vmids);
        json_decref(h);
        provisioner_round_free(r);
        fixture_done(&f);
        json_t *c = parse(CLAIM("x", "pve3", "") "}");
        assert_string_equal(nodeclaim_host(c), "pve3");
        json_object_set_new(c, "status", parse("{\"host\": \"pve4\"}"));
        assert_string_equal(nodeclaim_host(c), "pve4");
        json_decref(c);
}

/* PCI devices by resource mapping: a host's paths of each mapping, less the running VMs' and the pending claims'. */
static void test_pci_free(void **state) {
        (void)state;
        json_t *maps = parse("[{\"id\": \"a100\", \"map\": [\"node=pve1,path=0000:41:00.0,id=10de:20b5\","
                             " \"node=pve1,path=0000:42:00.0;0000:43:00.0,id=10de:20b5\","
                             " \"node=pve2,path=0000:41:00.0,id=10de:20b5\"]},"
                             " {\"id\": \"nic\", \"map\": [\"node=pve1,path=0000:81:00,id=8086:1572\"]},"
                             " {\"id\": \"t4\", \"map\": [\"node=pve3,path=0000:05:00.0,id=10de:1eb8\"]}]");
        json_t *none = parse("[]");
        json_t *got = provisioner_pci_free(maps, "pve1", none);
        assert_int_equal(int_at(got, "a100"), 3);
        assert_int_equal(int_at(got, "nic"), 1);
        assert_null(json_object_get(got, "t4")); /* no entry for pve1: no device here */
        json_decref(got);
        /* one VM holds an a100 by mapping, another the third path by address (short form), a third the NIC */
        json_t *configs = parse("[{\"hostpci0\": \"mapping=a100,pcie=1\", \"cores\": 4},"
                                " {\"hostpci1\": \"43:00.0,pcie=1\"}, {\"hostpci0\": \"host=0000:81:00\"},"
                                " {\"net0\": \"virtio\"}]");
        got = provisioner_pci_free(maps, "pve1", configs);
        assert_int_equal(int_at(got, "a100"), 1);
        assert_int_equal(int_at(got, "nic"), 0);
        json_decref(got);
        got = provisioner_pci_free(maps, "pve2", configs);
        assert_int_equal(int_at(got, "a100"), 0); /* both VMs said so: never below zero */
        json_decref(got);
        json_decref(configs);
        json_decref(none);
        json_decref(maps);
}

static void test_charge_devices(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[]", "[]",
                     "[" CLAIM("new", "pve1", "") "}," CLAIM("started", "pve1", "") ", \"status\": {\"vmid\": 106}},"
                     CLAIM("made", "pve1", "") ", \"status\": {\"vmid\": 107}}," CLAIM("other", "pve2", "") "},"
                     CLAIM("going", "pve1", ", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"") "}]",
                     "[" POOL("default", "") "]");
        json_decref(f.classes);
        f.classes = parse("[{\"metadata\": {\"name\": \"default\"}, \"spec\": {\"pciDevices\": [{\"mapping\": \"a100\","
                          " \"resourceName\": \"nvidia.com/gpu\"}, {\"mapping\": \"nic\"}]}}]");
        f.snap.classes = f.classes;
        struct provisioner_round *r;
        assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
        json_t *h = parse("{\"name\": \"pve1\", \"region\": \"r1\","
                          " \"pci_free\": {\"a100\": 4, \"nic\": 1, \"t4\": 1}}");
        json_t *running = parse("[100, 106]");
        /* "new" (no VM) and "made" (VM 107, not running) take theirs; VM 106 runs and was counted by its config */
        provisioner_host_charge_devices(h, r, f.claims, running);
        json_t *pci = json_object_get(h, "pci_free");
        assert_int_equal(int_at(pci, "a100"), 2);
        assert_int_equal(int_at(pci, "nic"), 0);
        assert_int_equal(int_at(pci, "t4"), 1);
        json_decref(running);
        json_decref(h);
        provisioner_round_free(r);
        fixture_done(&f);
}

/* A host whose agent does not answer: why, and what the Event says (left out, or placed unpinned). */
static void test_agent_state_messages(void **state) {
        (void)state;
        char m[512];
        assert_int_equal(provisioner_agent_state_of(0), PROVISIONER_AGENT_UNREACHABLE);
        assert_int_equal(provisioner_agent_state_of(401), PROVISIONER_AGENT_UNAUTHORIZED);
        assert_int_equal(provisioner_agent_state_of(403), PROVISIONER_AGENT_UNAUTHORIZED);
        assert_int_equal(provisioner_agent_state_of(500), PROVISIONER_AGENT_ERROR);
        provisioner_agent_message(m, sizeof m, "r1", "pve2", "https://10.0.0.2:8207", PROVISIONER_AGENT_UNREACHABLE,
                                  "GET /v1/topology: Connection refused", false);
        assert_string_equal(m, "Host pve2 (region r1) is left out of placement: its agent at https://10.0.0.2:8207 "
                               "did not answer (GET /v1/topology: Connection refused)");
        provisioner_agent_message(m, sizeof m, "r1", "pve2", "https://10.0.0.2:8207", PROVISIONER_AGENT_UNAUTHORIZED,
                                  "GET /v1/capacity: 401 unauthorized", true);
        assert_non_null(strstr(m, "placed by Proxmox's accounting, its VMs unpinned"));
        assert_non_null(strstr(m, "refused the coordinator's token"));
        provisioner_agent_message(m, sizeof m, "r1", "pve2", "https://10.0.0.2:8207", PROVISIONER_AGENT_OK, NULL, false);
        assert_string_equal(m, "Host pve2 (region r1): its agent at https://10.0.0.2:8207 answers again; placement "
                               "uses it");
}

static void test_names_and_reasons(void **state) {
        (void)state;
        char a[128], b[128];
        provisioner_claim_name("default", 12345, a, sizeof a);
        provisioner_claim_name("default", 12346, b, sizeof b);
        assert_int_equal(strlen(a), strlen("default-") + 5);
        assert_memory_equal(a, "default-", 8);
        assert_string_not_equal(a, b);
        for (const char *p = a + 8; *p; p++)
                assert_non_null(strchr("bcdfghjklmnpqrstvwxz2456789", *p));
        char longpool[100];
        memset(longpool, 'p', 99);
        longpool[99] = '\0';
        assert_int_equal(strlen(provisioner_claim_name(longpool, 1, a, sizeof a)), 63);
        static const struct {
                const char *text, *reason;
        } cases[] = {
                { "NodePool default cpu limit 64 reached (62 in use)", PROVISIONER_REASON_LIMIT },
                { "NodePool default nodes limit 3 reached (3 in use)", PROVISIONER_REASON_LIMIT },
                { "no host has 12 free cores in one NUMA node (best: pve2 numa1 with 8)", PROVISIONER_REASON_HOST_ROOM },
                { "no agent offers room for c1.2VCPU-4GB (3 hosts asked)", PROVISIONER_REASON_HOST_ROOM },
                { "NodePool gpu: no host in a zone and region its nodes may use", PROVISIONER_REASON_HOST_ROOM },
                { "topology spread on topology.kubernetes.io/zone (maxSkew 1) allows no zone with room",
                  PROVISIONER_REASON_TOPOLOGY },
                { "pod anti-affinity excludes every zone with room", PROVISIONER_REASON_TOPOLOGY },
                { "no NodePool matches nodeSelector disk=ssd", PROVISIONER_REASON_NO_POOL },
                { "NodePool gpu has taint nvidia.com/gpu=true:NoSchedule that the pod does not tolerate",
                  PROVISIONER_REASON_NO_POOL },
                { "NodePool default has no instance type with room for the pod's cpu 200 (largest allocatable 15880m)",
                  PROVISIONER_REASON_NO_POOL },
                { "requests extended resource nvidia.com/gpu, which no instance type provides", PROVISIONER_REASON_NO_POOL },
                { "no NodePool exists", PROVISIONER_REASON_NO_POOL },
                { "the cap of 10 node claims planned per round is reached", PROVISIONER_REASON_FAILED },
                { NULL, PROVISIONER_REASON_FAILED },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                if (strcmp(provisioner_unplaced_reason(cases[i].text), cases[i].reason) != 0)
                        fail_msg("%s: got %s, want %s", cases[i].text, provisioner_unplaced_reason(cases[i].text),
                                 cases[i].reason);
}

/* The after annotation names the claims a claim's Node waits for; claims that were not created are left out. */
static void test_claim_after(void **state) {
        (void)state;
        size_t after0[] = { 1, 2 }, after2[] = { 1 };
        struct sim_claim claims[3] = { { .after = after0, .n_after = 2 }, { .n_after = 0 },
                                       { .after = after2, .n_after = 1 } };
        struct sim_result res = { .claims = claims, .n_claims = 3 };
        char *names[] = { "ssd-b2c4d", "general-x7k2p", "general-q9z5m" };
        json_t *a = provisioner_claim_after(&res, 0, names);
        assert_string_equal(json_string_value(a), "general-x7k2p,general-q9z5m");
        json_decref(a);
        assert_null(provisioner_claim_after(&res, 1, names));
        names[1] = NULL;
        assert_null(provisioner_claim_after(&res, 2, names));
        a = provisioner_claim_after(&res, 0, names);
        assert_string_equal(json_string_value(a), "general-q9z5m");
        json_decref(a);
}

/* The round annotation names every other claim of the round that was created, within 1 KiB. */
static void test_claim_round(void **state) {
        (void)state;
        char *names[] = { "ssd-b2c4d", "general-x7k2p", "general-q9z5m" };
        json_t *a = provisioner_claim_round(3, 0, names);
        assert_string_equal(json_string_value(a), "general-x7k2p,general-q9z5m");
        json_decref(a);
        a = provisioner_claim_round(3, 1, names);
        assert_string_equal(json_string_value(a), "ssd-b2c4d,general-q9z5m");
        json_decref(a);
        assert_null(provisioner_claim_round(1, 0, names));
        names[1] = NULL;
        a = provisioner_claim_round(3, 2, names);
        assert_string_equal(json_string_value(a), "ssd-b2c4d");
        json_decref(a);
        char *many[100], name[100][16];
        for (int i = 0; i < 100; i++) {
                snprintf(name[i], sizeof name[i], "general-%05d", i);
                many[i] = name[i];
        }
        a = provisioner_claim_round(100, 0, many);
        assert_true(json_string_length(a) < 1024);
        assert_non_null(strstr(json_string_value(a), "general-00001,general-00002"));
        json_decref(a);
}

/* A pending pod kube-scheduler keeps refusing on the Node the simulation fits it on: after PROVISIONER_REFUSED_MS
 * it is kept off the existing Nodes until it is planned on a claim, which is reported once; never again while it
 * stays pending. */
static void test_refusals(void **state) {
        (void)state;
        json_t *refusals = json_object();
        struct provisioner_refusal was = { 0 };
        int64_t t0 = 1796644800000LL;
        assert_false(provisioner_refusal_track(refusals, "u-a", NULL, false, t0, &was)); /* unplaced: nothing */
        assert_null(provisioner_refusals_due(refusals, t0));
        assert_false(provisioner_refusal_track(refusals, "u-a", "n1", false, t0, &was));
        assert_false(provisioner_refusal_track(refusals, "u-a", "n2", false, t0 + 10000, &was));
        assert_null(provisioner_refusals_due(refusals, t0 + PROVISIONER_REFUSED_MS - 1));
        assert_null(provisioner_refusals_due(refusals, 0)); /* no clock: never due */
        json_t *skip = provisioner_refusals_due(refusals, t0 + PROVISIONER_REFUSED_MS);
        assert_non_null(skip);
        assert_int_equal(json_object_size(skip), 1);
        assert_true(json_is_true(json_object_get(skip, "u-a")));
        json_decref(skip);
        /* no room for a claim this round: kept off the Nodes still */
        assert_false(provisioner_refusal_track(refusals, "u-a", NULL, false, t0 + 31000, &was));
        skip = provisioner_refusals_due(refusals, t0 + 41000);
        assert_non_null(json_object_get(skip, "u-a"));
        json_decref(skip);
        assert_true(provisioner_refusal_track(refusals, "u-a", NULL, true, t0 + 42000, &was));
        assert_int_equal(was.since_ms, t0);
        assert_string_equal(was.node, "n1");
        assert_null(provisioner_refusals_due(refusals, t0 + 100000));
        /* refused again on its new Node: once was enough */
        assert_false(provisioner_refusal_track(refusals, "u-a", "n3", false, t0 + 60000, &was));
        assert_null(provisioner_refusals_due(refusals, t0 + 200000));
        /* a pod that fit a Node and then a claim was simply early: forgotten */
        assert_false(provisioner_refusal_track(refusals, "u-b", "n1", false, t0, &was));
        assert_false(provisioner_refusal_track(refusals, "u-b", NULL, true, t0 + 5000, &was));
        assert_null(json_object_get(refusals, "u-b"));
        json_t *pending = json_object();
        provisioner_refusals_forget(refusals, pending);
        assert_int_equal(json_object_size(refusals), 0);
        json_decref(pending);
        json_decref(refusals);
}

/* A pod kept off the existing Nodes (skip_nodes) goes onto a new claim although the Node has room; an in-flight
 * claim would still take it. */
static void test_round_skip_nodes(void **state) {
        (void)state;
        struct fixture f;
        fixture_init(&f, "[" POD("a", "u-a", "500m") "]",
                     "[{\"metadata\": {\"name\": \"n1\", \"labels\": {\"pvescale.io/nodepool\": \"default\"}}, \"spec\": {},"
                     " \"status\": {\"capacity\": {\"cpu\": \"4\", \"memory\": \"8Gi\", \"pods\": \"110\"}}}]",
                     "[]", "[" POOL("default", "") "]");
        for (int skip = 0; skip < 2; skip++) {
                json_t *set = json_pack("{s:b}", "u-a", 1);
                f.snap.skip_nodes = skip ? set : NULL;
                struct provisioner_round *r;
                assert_int_equal(provisioner_round_new(&f.snap, &r), 0);
                assert_int_equal(r->in->pods[0]->skip_nodes, skip);
                add_host(r, HOST("pve1"));
                struct sim_result *res;
                assert_int_equal(simulate_run(r->in, &res), 0);
                assert_int_equal(res->placements[0].target, skip ? SIM_TARGET_CLAIM : SIM_TARGET_NODE);
                assert_int_equal(res->n_claims, skip ? 1 : 0);
                simulate_result_free(res);
                provisioner_round_free(r);
                json_decref(set);
        }
        fixture_done(&f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_host_from_agent),
                cmocka_unit_test(test_host_from_pve),
                cmocka_unit_test(test_host_charge),
                cmocka_unit_test(test_round_claim_object),
                cmocka_unit_test(test_round_inflight_and_nominations),
                cmocka_unit_test(test_round_settling_claim),
                cmocka_unit_test(test_round_registered_not_initialized),
                cmocka_unit_test(test_round_leaving_node_holds_no_limit),
                cmocka_unit_test(test_round_leaving_node_pods_reschedule),
                cmocka_unit_test(test_round_initialized_before_node_update),
                cmocka_unit_test(test_round_problems_and_exclusions),
                cmocka_unit_test(test_charge_pending),
                cmocka_unit_test(test_pci_free),
                cmocka_unit_test(test_charge_devices),
                cmocka_unit_test(test_agent_state_messages),
                cmocka_unit_test(test_names_and_reasons),
                cmocka_unit_test(test_claim_after),
                cmocka_unit_test(test_claim_round),
                cmocka_unit_test(test_refusals),
                cmocka_unit_test(test_round_skip_nodes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
