/* Tests for agent/capacity: the seed's simple-policy accounting, isolated CPUs, numaN charging, overrides. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "capacity.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

/* ---- hand-built hosts (no hwloc) ---- */

static struct cpuset *cpus_of(const char *list) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(list, &s), 0);
        return s;
}

/* n_nodes NUMA nodes with ids 0..n-1, cpus_per_node consecutive CPUs each, mem_per_node bytes each. */
static struct topology *make_host(unsigned n_nodes, unsigned cpus_per_node, uint64_t mem_per_node,
                                  const char *isolated) {
        struct topology *t = calloc(1, sizeof(*t));
        assert_non_null(t);
        char list[32];
        snprintf(list, sizeof list, "0-%u", n_nodes * cpus_per_node - 1);
        t->cpus = cpus_of(list);
        t->online = cpus_of(list);
        t->isolated = cpus_of(isolated);
        t->n_numa_nodes = n_nodes;
        t->numa_nodes = calloc(n_nodes, sizeof(*t->numa_nodes));
        for (unsigned i = 0; i < n_nodes; i++) {
                snprintf(list, sizeof list, "%u-%u", i * cpus_per_node, (i + 1) * cpus_per_node - 1);
                t->numa_nodes[i].id = (int)i;
                t->numa_nodes[i].cpus = cpus_of(list);
                t->numa_nodes[i].memory_bytes = mem_per_node;
                t->numa_nodes[i].package = 0;
        }
        return t;
}

static void free_host(struct topology *t) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                cpuset_free(t->numa_nodes[i].cpus);
        free(t->numa_nodes);
        cpuset_free(t->cpus);
        cpuset_free(t->online);
        cpuset_free(t->isolated);
        free(t);
}

/* VMs 100, 101, ... from config texts, all running. */
static struct inventory *make_inventory(const char *const *confs, size_t n) {
        struct inventory *inv = calloc(1, sizeof(*inv));
        inv->vms = calloc(n ? n : 1, sizeof(*inv->vms));
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(inventory_parse_config(100 + (int)i, confs[i], &inv->vms[i]), 0);
                inv->vms[i]->running = true;
        }
        inv->n_vms = n;
        return inv;
}

static struct node_settings *settings_of(const char *json) {
        struct node_settings *s = NULL;
        char err[256];
        if (node_settings_parse(json, "r1", "pve1", &s, err, sizeof err) != 0)
                fail_msg("settings: %s", err);
        return s;
}

static struct capacity *compute(const struct topology *t, const struct node_settings *s,
                                const struct inventory *inv, bool count_stopped) {
        struct capacity_options opts = { .count_stopped_vms = count_stopped };
        struct capacity *c = NULL;
        assert_int_equal(capacity_compute(t, s, inv, &opts, &c), 0);
        assert_non_null(c);
        return c;
}

static void assert_cpus(const struct cpuset *s, const char *want) {
        char *got = cpuset_format(s);
        assert_string_equal(got, want);
        free(got);
}

/* Sum of node free memory equals the host's (holds while no node is overcommitted). */
static void assert_node_memory_adds_up(const struct capacity *c) {
        uint64_t sum = 0;
        for (size_t i = 0; i < c->n_numa; i++)
                sum += c->numa[i].memory_free_bytes;
        assert_int_equal(sum, c->memory_free_bytes);
}

/* ---- the seed's simple policy (seeds/000, anchors §1) ---- */

static void test_seed_example(void **state) {
        (void)state;
        struct topology *t = make_host(1, 16, 64 * GIB, "");
        const char *confs[] = { "affinity: 0-3\nmemory: 16384\ncores: 4\n", "affinity: 2-4\nmemory: 16384\ncores: 3\n" };
        struct inventory *inv = make_inventory(confs, 2);
        struct capacity *c = compute(t, NULL, inv, true);
        assert_int_equal(c->cpus_total, 16);
        assert_int_equal(c->cpus_free, 11);
        assert_cpus(c->free_cpus, "5-15");
        assert_cpus(c->pinned_cpus, "0-4");
        assert_int_equal(c->floating_vcpus, 0);
        assert_int_equal(c->memory_total_bytes, 64 * GIB);
        assert_int_equal(c->memory_used_bytes, 32 * GIB);
        assert_int_equal(c->memory_free_bytes, 32 * GIB);
        assert_int_equal(c->n_numa, 1);
        assert_cpus(c->numa[0].free_cpus, "5-15");
        assert_int_equal(c->numa[0].cpus_free, 11);
        assert_int_equal(c->numa[0].memory_free_bytes, 32 * GIB);

        json_t *j = capacity_to_json(c);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "cpus_free")), 11);
        assert_string_equal(json_string_value(json_object_get(j, "free_cpus")), "5-15");
        assert_string_equal(json_string_value(json_object_get(j, "pinned_cpus")), "0-4");
        assert_string_equal(json_string_value(json_object_get(j, "reserved_cpus")), "");
        assert_int_equal(json_integer_value(json_object_get(j, "memory_free_bytes")), 32 * GIB);
        json_t *n0 = json_array_get(json_object_get(j, "numa_nodes"), 0);
        assert_int_equal(json_integer_value(json_object_get(n0, "id")), 0);
        assert_string_equal(json_string_value(json_object_get(n0, "free_cpus")), "5-15");
        assert_int_equal(json_integer_value(json_object_get(n0, "cpus_free")), 11);
        assert_int_equal(json_integer_value(json_object_get(n0, "memory_total_bytes")), 64 * GIB);
        assert_int_equal(json_integer_value(json_object_get(n0, "memory_free_bytes")), 32 * GIB);
        json_decref(j);
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

static void test_empty_host(void **state) {
        (void)state;
        struct topology *t = make_host(2, 4, 8 * GIB, "");
        struct capacity *c = compute(t, NULL, NULL, true);
        assert_int_equal(c->cpus_free, 8);
        assert_cpus(c->free_cpus, "0-7");
        assert_int_equal(c->memory_free_bytes, 16 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 8 * GIB);
        capacity_free(c);
        /* NULL options mean the defaults (stopped VMs counted). */
        const char *confs[] = { "memory: 1024\n" };
        struct inventory *inv = make_inventory(confs, 1);
        inv->vms[0]->running = false;
        assert_int_equal(capacity_compute(t, NULL, inv, NULL, &c), 0);
        assert_int_equal(c->memory_used_bytes, 1024 * MIB);
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

static void test_reserved_and_floating(void **state) {
        (void)state;
        struct topology *t = make_host(1, 16, 64 * GIB, "");
        struct node_settings *s = settings_of("{\"r1\": {\"*\": {\"reservedcpus\": [0, 15],"
                                              " \"reservedmemory\": 4294967296}}}");
        const char *confs[] = {
                "affinity: 0-3\nmemory: 8192\n",     /* overlaps reserved CPU 0: counted once */
                "cores: 2\nsockets: 2\nmemory: 4096\n", /* floating, 4 vCPUs */
                "cores: 4\nvcpus: 2\nmemory: 2048\n",   /* floating, 2 vCPUs online */
        };
        struct inventory *inv = make_inventory(confs, 3);
        struct capacity *c = compute(t, s, inv, true);
        assert_cpus(c->usable_cpus, "1-14");
        assert_cpus(c->free_cpus, "4-14");
        assert_int_equal(c->floating_vcpus, 6);
        assert_int_equal(c->cpus_free, 11 - 6);
        assert_int_equal(c->memory_reserved_bytes, 4 * GIB);
        assert_int_equal(c->memory_used_bytes, 14 * GIB);
        assert_int_equal(c->memory_free_bytes, 64 * GIB - 4 * GIB - 14 * GIB);
        json_t *j = capacity_to_json(c);
        assert_string_equal(json_string_value(json_object_get(j, "reserved_cpus")), "0,15");
        assert_int_equal(json_integer_value(json_object_get(j, "floating_vcpus")), 6);
        json_decref(j);
        capacity_free(c);
        inventory_free(inv);
        node_settings_free(s);
        free_host(t);
}

/* ---- isolated CPUs: pinned placements only ---- */

static void test_floating_never_takes_isolated(void **state) {
        (void)state;
        struct topology *t = make_host(2, 8, 16 * GIB, "12-15");
        const char *confs[] = { "cores: 6\n" };
        struct inventory *inv = make_inventory(confs, 1);
        struct capacity *c = compute(t, NULL, inv, true);
        assert_cpus(c->free_cpus, "0-15");
        assert_int_equal(c->cpus_free, 10);
        /* Shared in proportion to non-isolated free CPUs: node0 has 8, node1 has 4 (8-11). */
        assert_int_equal(c->numa[0].cpus_free, 8 - 4);
        assert_int_equal(c->numa[1].cpus_free, 8 - 2);
        json_t *j = capacity_to_json(c);
        assert_string_equal(json_string_value(json_object_get(j, "isolated_cpus")), "12-15");
        json_decref(j);
        capacity_free(c);
        inventory_free(inv);

        /* More floating vCPUs than non-isolated CPUs: the isolated CPUs still stay free for pinning. */
        const char *big[] = { "cores: 10\n", "cores: 4\n" };
        inv = make_inventory(big, 2);
        c = compute(t, NULL, inv, true);
        assert_int_equal(c->floating_vcpus, 14);
        assert_int_equal(c->cpus_free, 4);
        assert_int_equal(c->numa[0].cpus_free, 0);
        assert_int_equal(c->numa[1].cpus_free, 4);
        capacity_free(c);
        inventory_free(inv);

        /* A pinned VM may sit on isolated CPUs. */
        const char *pinned[] = { "affinity: 12-13\n", "cores: 2\n" };
        inv = make_inventory(pinned, 2);
        c = compute(t, NULL, inv, true);
        assert_cpus(c->free_cpus, "0-11,14-15");
        assert_int_equal(c->cpus_free, 14 - 2);
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

/* ---- stopped and template VMs (the Go provider counted only running VMs: anchors §1.3) ---- */

static void test_stopped_vms(void **state) {
        (void)state;
        struct topology *t = make_host(1, 8, 32 * GIB, "");
        const char *confs[] = { "affinity: 0-1\nmemory: 4096\n", "affinity: 2-3\nmemory: 8192\n",
                                "cores: 2\nmemory: 2048\n", "template: 1\naffinity: 4-7\nmemory: 16384\ncores: 8\n" };
        struct inventory *inv = make_inventory(confs, 4);
        inv->vms[1]->running = false;
        inv->vms[2]->running = false;
        inv->vms[3]->running = false;

        struct capacity *c = compute(t, NULL, inv, true);
        assert_cpus(c->pinned_cpus, "0-3");
        assert_int_equal(c->floating_vcpus, 2);
        assert_int_equal(c->cpus_free, 2);
        assert_int_equal(c->memory_used_bytes, 14 * GIB);
        capacity_free(c);

        c = compute(t, NULL, inv, false);
        assert_cpus(c->pinned_cpus, "0-1");
        assert_int_equal(c->floating_vcpus, 0);
        assert_int_equal(c->cpus_free, 6);
        assert_int_equal(c->memory_used_bytes, 4 * GIB);
        capacity_free(c);

        /* A running template (impossible in Proxmox, but never trust input) is not counted either. */
        inv->vms[3]->running = true;
        c = compute(t, NULL, inv, false);
        assert_cpus(c->free_cpus, "2-7");
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

/* ---- memory per NUMA node ---- */

static void test_numa_hostnodes_charging(void **state) {
        (void)state;
        struct topology *t = make_host(2, 8, 32 * GIB, "");
        struct node_settings *s = settings_of("{\"r1\": {\"pve1\": {\"reservedmemory\": 2147483648}}}");
        const char *confs[] = {
                "memory: 12288\nnuma: 1\n"
                "numa0: cpus=0-1,hostnodes=1,memory=8192,policy=bind\n"
                "numa1: cpus=2-3,hostnodes=0;1,memory=4096,policy=interleave\n",
                "memory: 4096\n", /* floating and unbound */
        };
        struct inventory *inv = make_inventory(confs, 2);
        struct capacity *c = compute(t, s, inv, true);
        /* Unbound = 2 GiB reserved + 4 GiB: 3 GiB to each equal node. Bound: node0 2 GiB, node1 8+2 GiB. */
        assert_int_equal(c->memory_free_bytes, 64 * GIB - 2 * GIB - 16 * GIB);
        assert_int_equal(c->numa[0].memory_free_bytes, 32 * GIB - 2 * GIB - 3 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 32 * GIB - 10 * GIB - 3 * GIB);
        assert_node_memory_adds_up(c);
        capacity_free(c);
        inventory_free(inv);
        node_settings_free(s);
        free_host(t);
}

static void test_numa_binding_not_honoured(void **state) {
        (void)state;
        struct topology *t = make_host(2, 8, 32 * GIB, "");
        const char *confs[] = {
                /* numaN memories exceed the VM memory (the Go provider's defect 1): Proxmox will not start it. */
                "memory: 8192\nnuma: 1\n"
                "numa0: cpus=0,hostnodes=0,memory=8192,policy=bind\n"
                "numa1: cpus=1,hostnodes=0,memory=8192,policy=bind\n",
                /* A host node this host does not have. */
                "memory: 8192\nnuma: 1\nnuma0: cpus=0,hostnodes=5,memory=8192,policy=bind\n",
                /* numa: 0 turns numaN off. */
                "memory: 8192\nnuma: 0\nnuma0: cpus=0,hostnodes=0,memory=8192,policy=bind\n",
                /* numaN without hostnodes: guest topology only. */
                "memory: 8192\nnuma: 1\nnuma0: cpus=0,memory=8192\n",
        };
        struct inventory *inv = make_inventory(confs, 4);
        struct capacity *c = compute(t, NULL, inv, true);
        /* All 32 GiB is unbound and spread 16/16. */
        assert_int_equal(c->memory_free_bytes, 32 * GIB);
        assert_int_equal(c->numa[0].memory_free_bytes, 16 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 16 * GIB);
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

static void test_unbound_spread_by_node_size(void **state) {
        (void)state;
        struct topology *t = make_host(2, 4, 16 * GIB, "");
        t->numa_nodes[1].memory_bytes = 48 * GIB;
        struct node_settings *s = settings_of("{\"r1\": {\"pve1\": {\"reservedmemory\": 4294967296}}}");
        const char *confs[] = { "memory: 8192\n" };
        struct inventory *inv = make_inventory(confs, 1);
        struct capacity *c = compute(t, s, inv, true);
        assert_int_equal(c->numa[0].memory_free_bytes, 16 * GIB - 3 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 48 * GIB - 9 * GIB);
        assert_node_memory_adds_up(c);
        capacity_free(c);
        node_settings_free(s);
        inventory_free(inv);

        /* Odd amounts over three equal nodes still add up exactly. */
        free_host(t);
        t = make_host(3, 2, 1000, "");
        s = settings_of("{\"r1\": {\"pve1\": {\"reservedmemory\": 5}}}");
        c = compute(t, s, NULL, true);
        assert_int_equal(c->numa[0].memory_free_bytes, 998);
        assert_int_equal(c->numa[1].memory_free_bytes, 998);
        assert_int_equal(c->numa[2].memory_free_bytes, 999);
        assert_node_memory_adds_up(c);
        capacity_free(c);
        node_settings_free(s);
        free_host(t);
}

static void test_memory_overcommitted(void **state) {
        (void)state;
        struct topology *t = make_host(1, 4, 4 * GIB, "");
        const char *confs[] = { "memory: 4096\n", "memory: 2048\n" };
        struct inventory *inv = make_inventory(confs, 2);
        struct capacity *c = compute(t, NULL, inv, true);
        assert_int_equal(c->memory_used_bytes, 6 * GIB);
        assert_int_equal(c->memory_free_bytes, 0);
        assert_int_equal(c->numa[0].memory_free_bytes, 0);
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

static void test_sparse_node_ids(void **state) {
        (void)state;
        struct topology *t = make_host(2, 4, 8 * GIB, "");
        t->numa_nodes[1].id = 33;
        const char *confs[] = { "memory: 2048\nnuma: 1\nnuma0: cpus=0,hostnodes=33,memory=2048,policy=bind\n" };
        struct inventory *inv = make_inventory(confs, 1);
        struct capacity *c = compute(t, NULL, inv, true);
        assert_int_equal(c->numa[1].id, 33);
        assert_int_equal(c->numa[0].memory_free_bytes, 8 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 6 * GIB);
        capacity_free(c);
        inventory_free(inv);
        free_host(t);
}

/* ---- node-setting nodes{} override ---- */

static void test_topology_override(void **state) {
        (void)state;
        struct topology *t = make_host(1, 16, 64 * GIB, "");
        struct node_settings *s = settings_of("{\"r1\": {\"pve1\": {\"nodes\": {"
                                              "\"0\": {\"cpus\": \"0-7\", \"memory\": 17179869184},"
                                              "\"1\": {\"cpus\": \"8-15\", \"memsize\": 17179869184}}}}}");
        const char *confs[] = { "affinity: 6-9\nmemory: 4096\nnuma: 1\n"
                                "numa0: cpus=0-3,hostnodes=1,memory=4096,policy=bind\n" };
        struct inventory *inv = make_inventory(confs, 1);
        struct capacity *c = compute(t, s, inv, true);
        assert_int_equal(c->n_numa, 2);
        assert_int_equal(c->memory_total_bytes, 32 * GIB);
        assert_int_equal(c->memory_free_bytes, 28 * GIB);
        assert_cpus(c->numa[0].free_cpus, "0-5");
        assert_cpus(c->numa[1].free_cpus, "10-15");
        assert_int_equal(c->numa[0].memory_free_bytes, 16 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 12 * GIB);
        capacity_free(c);
        node_settings_free(s);

        /* Fields left out fall back to the detected node with the same id. */
        s = settings_of("{\"r1\": {\"pve1\": {\"nodes\": {\"0\": {\"memory\": 1073741824}, \"1\": {\"cpus\": \"8-15\"}}}}}");
        c = compute(t, s, NULL, true);
        assert_cpus(c->numa[0].free_cpus, "0-15");
        assert_int_equal(c->numa[0].memory_total_bytes, GIB);
        assert_int_equal(c->numa[1].memory_total_bytes, 0);
        assert_int_equal(c->memory_total_bytes, GIB);
        capacity_free(c);
        node_settings_free(s);
        inventory_free(inv);
        free_host(t);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_seed_example),
                cmocka_unit_test(test_empty_host),
                cmocka_unit_test(test_reserved_and_floating),
                cmocka_unit_test(test_floating_never_takes_isolated),
                cmocka_unit_test(test_stopped_vms),
                cmocka_unit_test(test_numa_hostnodes_charging),
                cmocka_unit_test(test_numa_binding_not_honoured),
                cmocka_unit_test(test_unbound_spread_by_node_size),
                cmocka_unit_test(test_memory_overcommitted),
                cmocka_unit_test(test_sparse_node_ids),
                cmocka_unit_test(test_topology_override),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
