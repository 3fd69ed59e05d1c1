/* Tests for agent/ledger_rebuild: a VM config the coordinator described and the CPUs its vCPUs run on, made into
 * the bound reservation the agent had before its state was lost. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* The placement of vm from its config's affinity, as a stopped VM's is rebuilt: ledger_rebuild_vcpu_map, then
 * ledger_rebuild_placement. */
static int from_affinity(const struct topology *t, const struct vm *vm, struct placement **p, char *why, size_t len) {
        int map[PLACEMENT_MAX_VCPUS];
        int r = vm_vcpu_count(vm) <= PLACEMENT_MAX_VCPUS ? ledger_rebuild_vcpu_map(t, vm, NULL, NULL, map, why, len)
                                                         : -EINVAL;
        return r < 0 ? r : ledger_rebuild_placement(t, vm, map, p, why, len);
}

/* The owner of a config text's description: 0, or -ENOENT. */
static int owner_of(const char *text, char *owner, size_t len) {
        struct ledger_rebuild_descr d;
        int r = ledger_rebuild_describe(text, &d);
        if (r == 0)
                snprintf(owner, len, "%s", d.owner);
        ledger_rebuild_descr_done(&d);
        return r;
}

static void test_owner_from_the_coordinators_description(void **state) {
        (void)state;
        char owner[LEDGER_OWNER_MAX + 1];
        assert_int_equal(owner_of(DESCR "cores: 2\nmemory: 2048\n", owner, sizeof owner), 0);
        assert_string_equal(owner, "nodeclaim/0b5e-11/claim-a");
}

static void test_other_vms_have_no_owner(void **state) {
        (void)state;
        char owner[LEDGER_OWNER_MAX + 1];
        assert_int_equal(owner_of("cores: 2\n", owner, sizeof owner), -ENOENT);
        assert_int_equal(owner_of("#a web server\ncores: 2\n", owner, sizeof owner), -ENOENT);
        /* The mark must open the description, and the uid must be there. */
        assert_int_equal(owner_of("#note\n#pvescale-nodeclaim%3A x\n#uid%3A u\n", owner, sizeof owner),
                         -ENOENT);
        assert_int_equal(owner_of("#pvescale-nodeclaim%3A x\ncores: 2\n", owner, sizeof owner), -ENOENT);
        /* Not a description: a key of the config. */
        assert_int_equal(owner_of("pvescale-nodeclaim: x\nuid: u\n", owner, sizeof owner), -ENOENT);
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
        assert_int_equal(from_affinity(*state, vm, &p, why, sizeof why), 0);
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
        assert_int_equal(from_affinity(*state, vm, &p, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "affinity"));
        vm_free(vm);
        vm = vm_of("cores: 2\nmemory: 2048\naffinity: 0-3\n"); /* more CPUs than vCPUs */
        assert_int_equal(from_affinity(*state, vm, &p, why, sizeof why), -EINVAL);
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
        assert_int_equal(ledger_add_bound(l, NULL, "nodeclaim/u/a", 9001, &req, NULL, 100), 0);
        assert_int_equal(ledger_add_bound(l, NULL, "nodeclaim/u/b", 9001, &req, NULL, 100), -EEXIST);
        assert_int_equal(l->n, 1);
        assert_int_equal(l->items[0]->vmid, 9001);
        assert_int_equal(l->items[0]->expires_at, 0);
        assert_string_equal(l->items[0]->owner, "nodeclaim/u/a");
        ledger_free(l);
}

#define RID "r-00000000000000ab"

static void test_description_gives_reservation_id_and_cpus(void **state) {
        (void)state;
        struct ledger_rebuild_descr d;
        assert_int_equal(ledger_rebuild_describe(DESCR "#reservation%3A " RID "\n#cpus%3A 8-9,2\ncores: 3\n", &d), 0);
        assert_string_equal(d.owner, "nodeclaim/0b5e-11/claim-a");
        assert_string_equal(d.id, RID);
        assert_non_null(d.cpus);
        assert_int_equal(cpuset_count(d.cpus), 3);
        assert_true(cpuset_test(d.cpus, 2) && cpuset_test(d.cpus, 9));
        ledger_rebuild_descr_done(&d);
        /* An older description: neither. */
        assert_int_equal(ledger_rebuild_describe(DESCR "cores: 3\n", &d), 0);
        assert_string_equal(d.id, "");
        assert_null(d.cpus);
        ledger_rebuild_descr_done(&d);
        /* Not the agent's id format, not a cpulist: ignored, the VM is still the coordinator's. */
        assert_int_equal(ledger_rebuild_describe(DESCR "#reservation%3A r-00000000000000AB\n#cpus%3A 3-1\n", &d), 0);
        assert_string_equal(d.id, "");
        assert_null(d.cpus);
        ledger_rebuild_descr_done(&d);
        assert_int_equal(ledger_rebuild_describe(DESCR "#reservation%3A r-1\n", &d), 0);
        assert_string_equal(d.id, "");
        ledger_rebuild_descr_done(&d);
        assert_int_equal(ledger_rebuild_describe("#reservation%3A " RID "\ncores: 1\n", &d), -ENOENT);
}

static void test_vcpu_map_sources_in_order(void **state) {
        struct vm *vm = vm_of("cores: 3\nmemory: 3072\naffinity: 4-6\n");
        struct cpuset *descr = parse("9,8,1"), *short_descr = parse("8-9");
        int threads[] = { 7, 3, 2 }, map[3];
        char why[256] = "";
        /* Threads pinned one CPU each win. */
        assert_int_equal(ledger_rebuild_vcpu_map(*state, vm, threads, descr, map, why, sizeof why),
                         LEDGER_REBUILD_THREADS);
        assert_memory_equal(map, threads, sizeof map);
        /* Else the description's cpus, in node then CPU order. */
        assert_int_equal(ledger_rebuild_vcpu_map(*state, vm, NULL, descr, map, why, sizeof why),
                         LEDGER_REBUILD_DESCRIPTION);
        assert_int_equal(map[0], 1);
        assert_int_equal(map[1], 8);
        assert_int_equal(map[2], 9);
        /* Else (not one CPU per vCPU, or none) the affinity. */
        assert_int_equal(ledger_rebuild_vcpu_map(*state, vm, NULL, short_descr, map, why, sizeof why),
                         LEDGER_REBUILD_AFFINITY);
        assert_int_equal(map[0], 4);
        assert_int_equal(map[2], 6);
        assert_int_equal(ledger_rebuild_vcpu_map(*state, vm, NULL, NULL, map, why, sizeof why),
                         LEDGER_REBUILD_AFFINITY);
        vm_free(vm);
        /* Else none: refused, with why. */
        vm = vm_of("cores: 3\nmemory: 3072\naffinity: 0-7\n");
        assert_int_equal(ledger_rebuild_vcpu_map(*state, vm, NULL, short_descr, map, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "(2)"));
        assert_non_null(strstr(why, "(8)"));
        vm_free(vm);
        cpuset_free(descr);
        cpuset_free(short_descr);
}

/* A bound reservation of vm (its affinity as its CPUs) added to l. */
static void add_rebuilt(struct ledger *l, const struct topology *t, int vmid, const char *conf) {
        struct vm *vm = vm_of(conf);
        struct placement *p = NULL;
        char why[256] = "";
        assert_int_equal(from_affinity(t, vm, &p, why, sizeof why), 0);
        struct placement_request req = ledger_rebuild_request(vm);
        assert_int_equal(ledger_add_bound(l, NULL, "nodeclaim/u/a", vmid, &req, p, 100), 0);
        vm_free(vm);
}

static void test_overlap_and_memory_with_reservations_rebuilt_before(void **state) {
        struct ledger *l = ledger_new();
        add_rebuilt(l, *state, 9001, "cores: 2\nmemory: 12288\naffinity: 8-9\n");
        char why[256] = "";
        struct placement *p = NULL;
        struct vm *vm = vm_of("cores: 2\nmemory: 4096\naffinity: 9-10\n");
        assert_int_equal(from_affinity(*state, vm, &p, why, sizeof why), 0);
        assert_int_equal(ledger_rebuild_overlap(l, p), 9001);
        assert_true(ledger_rebuild_memory_fits(l, *state, p)); /* 12 + 4 GiB of node 1's 16 */
        placement_free(p);
        vm_free(vm);
        vm = vm_of("cores: 2\nmemory: 5120\naffinity: 10-11\n");
        assert_int_equal(from_affinity(*state, vm, &p, why, sizeof why), 0);
        assert_int_equal(ledger_rebuild_overlap(l, p), 0);
        assert_false(ledger_rebuild_memory_fits(l, *state, p)); /* 12 + 5 GiB */
        placement_free(p);
        vm_free(vm);
        ledger_free(l);
}

static void test_a_rebuilt_reservation_keeps_its_id(void **state) {
        (void)state;
        struct ledger *l = ledger_new();
        struct placement_request req = { 1, 64 * MIB, 0 };
        assert_true(ledger_id_valid(RID));
        assert_false(ledger_id_valid("r-00000000000000aB"));
        assert_false(ledger_id_valid("r-00000000000000abc"));
        assert_false(ledger_id_valid("x-00000000000000ab"));
        assert_false(ledger_id_valid(NULL));
        assert_int_equal(ledger_add_bound(l, RID, "nodeclaim/u/a", 9001, &req, NULL, 100), 0);
        assert_string_equal(l->items[0]->id, RID);
        /* Taken already, or not the agent's format: a new id. */
        assert_int_equal(ledger_add_bound(l, RID, "nodeclaim/u/b", 9002, &req, NULL, 100), 0);
        assert_string_not_equal(l->items[1]->id, RID);
        assert_true(ledger_id_valid(l->items[1]->id));
        assert_int_equal(ledger_add_bound(l, "r-1", "nodeclaim/u/c", 9003, &req, NULL, 100), 0);
        assert_true(ledger_id_valid(l->items[2]->id));
        ledger_free(l);
}

static void write_conf(const char *dir, int vmid, const char *text) {
        char path[512];
        snprintf(path, sizeof path, "%s/%d.conf", dir, vmid);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

/* Three stopped VMs: 9003 on CPUs 2-3 by its description (its id kept), 9005 (written first) on 3-4, which overlap:
 * not rebuilt; 9004 on 8 by its affinity, the description's cpus not one per vCPU. */
static void test_rebuild_in_vmid_order_skips_an_overlap(void **state) {
        char dir[] = "/tmp/test-ledger-rebuild-XXXXXX";
        assert_non_null(mkdtemp(dir));
        write_conf(dir, 9005, DESCR "#reservation%3A r-0000000000000005\n#cpus%3A 3-4\ncores: 2\nmemory: 1024\n");
        write_conf(dir, 9003, DESCR "#reservation%3A " RID "\n#cpus%3A 2-3\ncores: 2\nmemory: 1024\n");
        write_conf(dir, 9004, DESCR "#cpus%3A 8-9\ncores: 1\nmemory: 512\naffinity: 8\n");
        struct ledger *l = ledger_new();
        assert_int_equal(ledger_rebuild(l, *state, dir, dir, "/nonexistent", 100), 2);
        assert_int_equal(l->n, 2);
        assert_int_equal(l->items[0]->vmid, 9003);
        assert_string_equal(l->items[0]->id, RID);
        assert_int_equal(l->items[0]->placement->vcpu_map[0], 2);
        assert_int_equal(l->items[0]->placement->vcpu_map[1], 3);
        assert_int_equal(l->items[1]->vmid, 9004);
        assert_int_equal(l->items[1]->placement->vcpu_map[0], 8);
        assert_null(ledger_find_vmid(l, 9005));
        ledger_free(l);
        for (int vmid = 9003; vmid <= 9005; vmid++) {
                char path[512];
                snprintf(path, sizeof path, "%s/%d.conf", dir, vmid);
                unlink(path);
        }
        rmdir(dir);
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
                cmocka_unit_test(test_description_gives_reservation_id_and_cpus),
                cmocka_unit_test(test_vcpu_map_sources_in_order),
                cmocka_unit_test(test_overlap_and_memory_with_reservations_rebuilt_before),
                cmocka_unit_test(test_a_rebuilt_reservation_keeps_its_id),
                cmocka_unit_test(test_rebuild_in_vmid_order_skips_an_overlap),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
