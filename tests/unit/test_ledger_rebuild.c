/* Tests for agent/ledger_rebuild: a VM config the coordinator described and the CPUs its vCPUs run on, made into
 * the bound reservation the agent had before its state was lost. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ledger_rebuild.h"

#define MIB PLACEMENT_MIB
#define DESCR "#pvescale-nodeclaim%3A claim-a\n#uid%3A 0b5e-11\n#created%3A 2026-11-27T06%3A00%3A00Z\n#Managed by pvescale.\n"

static struct cpuset *parse(const char *list) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(list, &s), 0);
        return s;
}

/* Two NUMA nodes: 0 = CPUs 0-7, 1 = CPUs 8-15, 16 GiB each. */
static int setup(void **state) {
        struct topology *t = calloc(1, sizeof *t);
        assert_non_null(t);
        t->cpus = parse("0-15");
        t->online = parse("0-15");
        t->isolated = cpuset_new();
        t->numa_nodes = calloc(2, sizeof *t->numa_nodes);
        assert_non_null(t->numa_nodes);
        t->n_numa_nodes = 2;
        for (int i = 0; i < 2; i++) {
                t->numa_nodes[i].id = i;
                t->numa_nodes[i].cpus = parse(i ? "8-15" : "0-7");
                t->numa_nodes[i].memory_bytes = t->numa_nodes[i].memory_free_bytes = UINT64_C(16) << 30;
        }
        *state = t;
        return 0;
}

static int teardown(void **state) {
        topology_free(*state);
        return 0;
}

static struct vm *vm_of(const char *text) {
        struct vm *vm = NULL;
        assert_int_equal(inventory_parse_config(9001, text, &vm), 0);
        return vm;
}

static void test_owner_from_the_coordinators_description(void **state) {
        (void)state;
        char owner[LEDGER_OWNER_MAX + 1];
        assert_int_equal(ledger_rebuild_owner(DESCR "cores: 2\nmemory: 2048\n", owner, sizeof owner), 0);
        assert_string_equal(owner, "nodeclaim/0b5e-11/claim-a");
}

static void test_other_vms_have_no_owner(void **state) {
        (void)state;
        char owner[LEDGER_OWNER_MAX + 1];
        assert_int_equal(ledger_rebuild_owner("cores: 2\n", owner, sizeof owner), -ENOENT);
        assert_int_equal(ledger_rebuild_owner("#a web server\ncores: 2\n", owner, sizeof owner), -ENOENT);
        /* The mark must open the description, and the uid must be there. */
        assert_int_equal(ledger_rebuild_owner("#note\n#pvescale-nodeclaim%3A x\n#uid%3A u\n", owner, sizeof owner),
                         -ENOENT);
        assert_int_equal(ledger_rebuild_owner("#pvescale-nodeclaim%3A x\ncores: 2\n", owner, sizeof owner), -ENOENT);
        /* Not a description: a key of the config. */
        assert_int_equal(ledger_rebuild_owner("pvescale-nodeclaim: x\nuid: u\n", owner, sizeof owner), -ENOENT);
}

static void test_request_counts_cores_sockets_and_memory(void **state) {
        (void)state;
        struct vm *vm = vm_of("cores: 2\nsockets: 2\nmemory: 3072\nhugepages: 2\n");
        struct placement_request req = ledger_rebuild_request(vm);
        assert_int_equal(req.vcpus, 4);
        assert_int_equal(req.memory_bytes, 3072 * MIB);
        assert_int_equal(req.hugepage_kib, 2048);
        vm_free(vm);
        vm = vm_of("cores: 4\nvcpus: 3\n");
        assert_int_equal(ledger_rebuild_request(vm).vcpus, 3);
        vm_free(vm);
}

static void test_running_vm_split_by_its_numa_lines(void **state) {
        struct vm *vm = vm_of("cores: 4\nmemory: 4096\nnuma: 1\n"
                              "numa0: cpus=0-1,hostnodes=0,memory=1024,policy=bind\n"
                              "numa1: cpus=2-3,hostnodes=1,memory=3072,policy=bind\n");
        int map[] = { 1, 0, 8, 9 };
        struct placement *p = NULL;
        char why[256] = "";
        assert_int_equal(ledger_rebuild_placement(*state, vm, map, &p, why, sizeof why), 0);
        assert_int_equal(p->n_vcpus, 4);
        assert_memory_equal(p->vcpu_map, map, sizeof map);
        assert_int_equal(p->n_numa, 2);
        assert_int_equal(p->numa[0].node, 0);
        assert_int_equal(p->numa[0].memory_bytes, 1024 * MIB);
        assert_int_equal(p->numa[1].node, 1);
        assert_int_equal(p->numa[1].first_vcpu, 2);
        assert_int_equal(p->numa[1].memory_bytes, 3072 * MIB);
        placement_free(p);
        vm_free(vm);
}

static void test_without_numa_lines_memory_follows_the_vcpus(void **state) {
        struct vm *vm = vm_of("cores: 4\nmemory: 4097\n");
        int map[] = { 2, 10, 11, 12 };
        struct placement *p = NULL;
        char why[256] = "";
        assert_int_equal(ledger_rebuild_placement(*state, vm, map, &p, why, sizeof why), 0);
        assert_int_equal(p->n_numa, 2);
        assert_int_equal(p->numa[0].memory_bytes, 1024 * MIB);
        assert_int_equal(p->numa[1].memory_bytes, 3073 * MIB);
        placement_free(p);
        vm_free(vm);
}

static void test_stopped_vm_uses_its_affinity(void **state) {
        struct vm *vm = vm_of("cores: 2\nmemory: 2048\naffinity: 9,8\n");
        struct placement *p = NULL;
        char why[256] = "";
        assert_int_equal(ledger_rebuild_placement(*state, vm, NULL, &p, why, sizeof why), 0);
        assert_int_equal(p->vcpu_map[0], 8);
        assert_int_equal(p->vcpu_map[1], 9);
        assert_int_equal(p->n_numa, 1);
        assert_int_equal(p->numa[0].node, 1);
        assert_int_equal(p->memory_bytes, 2048 * MIB);
        placement_free(p);
        vm_free(vm);
}

static void test_undetermined_cpus_are_refused(void **state) {
        char why[256] = "";
        struct placement *p = NULL;
        struct vm *vm = vm_of("cores: 2\nmemory: 2048\n"); /* stopped, no affinity */
        assert_int_equal(ledger_rebuild_placement(*state, vm, NULL, &p, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "affinity"));
        vm_free(vm);
        vm = vm_of("cores: 2\nmemory: 2048\naffinity: 0-3\n"); /* more CPUs than vCPUs */
        assert_int_equal(ledger_rebuild_placement(*state, vm, NULL, &p, why, sizeof why), -EINVAL);
        vm_free(vm);
        vm = vm_of("cores: 2\nmemory: 2048\n");
        int twice[] = { 3, 3 }, outside[] = { 3, 40 };
        assert_int_equal(ledger_rebuild_placement(*state, vm, twice, &p, why, sizeof why), -EINVAL);
        assert_int_equal(ledger_rebuild_placement(*state, vm, outside, &p, why, sizeof why), -EINVAL);
        vm_free(vm);
        vm = vm_of("cores: 4\nmemory: 2048\n");
        int interleaved[] = { 0, 8, 1, 9 }; /* a guest node's vCPUs must be contiguous */
        assert_int_equal(ledger_rebuild_placement(*state, vm, interleaved, &p, why, sizeof why), -EINVAL);
        vm_free(vm);
}

static void test_a_vm_is_held_once(void **state) {
        (void)state;
        struct ledger *l = ledger_new();
        struct placement_request req = { 2, 2048 * MIB, 0 };
        assert_int_equal(ledger_add_bound(l, "nodeclaim/u/a", 9001, &req, NULL, 100), 0);
        assert_int_equal(ledger_add_bound(l, "nodeclaim/u/b", 9001, &req, NULL, 100), -EEXIST);
        assert_int_equal(l->n, 1);
        assert_int_equal(l->items[0]->vmid, 9001);
        assert_int_equal(l->items[0]->expires_at, 0);
        assert_string_equal(l->items[0]->owner, "nodeclaim/u/a");
        ledger_free(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_owner_from_the_coordinators_description),
                cmocka_unit_test(test_other_vms_have_no_owner),
                cmocka_unit_test(test_request_counts_cores_sockets_and_memory),
                cmocka_unit_test(test_running_vm_split_by_its_numa_lines),
                cmocka_unit_test(test_without_numa_lines_memory_follows_the_vcpus),
                cmocka_unit_test(test_stopped_vm_uses_its_affinity),
                cmocka_unit_test(test_undetermined_cpus_are_refused),
                cmocka_unit_test(test_a_vm_is_held_once),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
