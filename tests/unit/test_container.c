/* Tests for agent/container and the containers' part of agent/capacity: pve-container configs, running state
 * from a captured cgroup tree (tests/unit/data/lxc-host), and how containers are charged. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "capacity.h"
#include "container.h"
#include "inventory.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

static struct container *parse(const char *text) {
        struct container *ct = NULL;
        assert_int_equal(container_parse_config(300, text, &ct), 0);
        assert_non_null(ct);
        return ct;
}

static void assert_cpuset(const struct cpuset *s, const char *want) {
        assert_non_null(s);
        char *got = cpuset_format(s);
        assert_string_equal(got, want);
        free(got);
}

static void assert_error(const struct container *ct, unsigned line, const char *needle) {
        for (size_t i = 0; i < ct->n_errors; i++)
                if (ct->errors[i].line == line && strstr(ct->errors[i].reason, needle))
                        return;
        fail_msg("no error at line %u containing '%s' (%zu errors)", line, needle, ct->n_errors);
}

/* ---- parsing ---- */

static void test_defaults(void **state) {
        (void)state;
        struct container *ct = parse("arch: amd64\nostype: debian\n");
        assert_int_equal(ct->cores, 0);
        assert_int_equal(ct->cpulimit_centi, 0);
        assert_int_equal(ct->memory_mib, 512);
        assert_int_equal(ct->swap_mib, 512);
        assert_null(ct->cpuset);
        assert_null(ct->hostname);
        assert_false(ct->template_ct);
        assert_int_equal(ct->n_errors, 0);
        container_free(ct);
}

static void test_keys_and_raw_cpuset(void **state) {
        (void)state;
        struct container *ct = parse("# a comment\ncores: 6\ncpulimit: 2.5\ncpuunits: 300\nmemory: 3072\nswap: 0\n"
                                     "hostname: app\r\nlxc.cgroup2.cpuset.cpus: 4-7,12\n");
        assert_int_equal(ct->cores, 6);
        assert_int_equal(ct->cpulimit_centi, 250);
        assert_int_equal(ct->cpuunits, 300);
        assert_int_equal(ct->memory_mib, 3072);
        assert_int_equal(ct->swap_mib, 0);
        assert_string_equal(ct->hostname, "app");
        assert_cpuset(ct->cpuset, "4-7,12");
        assert_int_equal(ct->n_errors, 0);
        container_free(ct);
        /* cgroup v1 hosts, and LXC's own "key = value" form */
        ct = parse("lxc.cgroup.cpuset.cpus = 1-2\n");
        assert_cpuset(ct->cpuset, "1-2");
        container_free(ct);
}

static void test_sections_ignored(void **state) {
        (void)state;
        struct container *ct = parse("cores: 2\nmemory: 1024\n\n[snap1]\ncores: 16\nmemory: 65536\n"
                                     "lxc.cgroup2.cpuset.cpus: 0-15\n");
        assert_int_equal(ct->cores, 2);
        assert_int_equal(ct->memory_mib, 1024);
        assert_null(ct->cpuset);
        container_free(ct);
}

static void test_malformed_values(void **state) {
        (void)state;
        struct container *ct = parse("cores: 0\ncpulimit: -1\nmemory: 8\nswap: lots\ntemplate: maybe\n"
                                     "lxc.cgroup2.cpuset.cpus: 7-3\nnot a line\ncores: 3\n");
        assert_int_equal(ct->n_errors, 7);
        assert_error(ct, 1, "cores");
        assert_error(ct, 2, "cpulimit");
        assert_error(ct, 3, "memory");
        assert_error(ct, 4, "swap");
        assert_error(ct, 5, "template");
        assert_error(ct, 6, "invalid CPU list");
        assert_error(ct, 7, "cannot parse line");
        assert_int_equal(ct->cores, 3); /* the good line still counts */
        assert_int_equal(ct->memory_mib, 512);
        assert_null(ct->cpuset);
        container_free(ct);
}

/* Proxmox's vmstatus `cpus`: cores, else every host CPU; a smaller cpulimit lowers it (rounded up). */
static void test_cpu_count(void **state) {
        (void)state;
        struct container *ct = parse("memory: 512\n");
        assert_int_equal(container_cpu_count(ct, 32), 32);
        container_free(ct);
        ct = parse("cpulimit: 1.5\n");
        assert_int_equal(container_cpu_count(ct, 32), 2);
        container_free(ct);
        ct = parse("cores: 4\ncpulimit: 8\n");
        assert_int_equal(container_cpu_count(ct, 32), 4);
        container_free(ct);
        ct = parse("cores: 4\ncpulimit: 0\n");
        assert_int_equal(container_cpu_count(ct, 32), 4);
        container_free(ct);
}

/* ---- the captured tree ---- */

static char tree[4096];

static const char *tree_path(const char *sub) {
        const char *src = getenv("PVESCALE_SOURCE_DIR");
        snprintf(tree, sizeof tree, "%s/tests/unit/data/lxc-host/%s", src ? src : ".", sub);
        return tree;
}

static void load_tree(struct container_list *l) {
        char lxc[4096];
        snprintf(lxc, sizeof lxc, "%s", tree_path("etc/pve/lxc"));
        assert_int_equal(container_list_load(lxc, tree_path("sys/fs/cgroup/lxc"), l), 0);
}

static void test_load_tree(void **state) {
        (void)state;
        struct container_list l;
        load_tree(&l);
        assert_int_equal(l.n, 6);
        const int want_ids[] = { 201, 202, 203, 204, 205, 206 };
        for (size_t i = 0; i < 6; i++)
                assert_int_equal(l.items[i]->vmid, want_ids[i]);
        const struct container *web = container_list_find(&l, 201), *db = container_list_find(&l, 202);
        assert_true(web->running);
        assert_int_equal(web->cores, 4);
        assert_int_equal(web->memory_mib, 2048);
        assert_null(web->cpuset);
        assert_cpuset(web->effective, "2-5");
        assert_true(db->running);
        assert_cpuset(db->cpuset, "8-11");
        assert_cpuset(db->effective, "8-11");
        assert_false(container_list_find(&l, 203)->running);
        assert_true(container_list_find(&l, 204)->template_ct);
        const struct container *broken = container_list_find(&l, 205);
        assert_false(broken->running); /* populated 0 */
        assert_int_equal(broken->n_errors, 4);
        assert_int_equal(broken->cores, 1);
        assert_int_equal(broken->memory_mib, 512);
        const struct container *dir = container_list_find(&l, 206);
        assert_true(dir->unreadable);
        assert_int_equal(dir->n_errors, 1);
        assert_error(dir, 0, "cannot read the config file");
        struct container_list again;
        load_tree(&again);
        assert_true(container_list_equal(&l, &again));
        again.items[0]->running = false;
        assert_false(container_list_equal(&l, &again));
        container_list_done(&again);
        container_list_done(&l);
}

static void test_missing_directories(void **state) {
        (void)state;
        struct container_list l;
        assert_int_equal(container_list_load("/nonexistent/pvescale/lxc", "/nonexistent/cgroup", &l), 0);
        assert_int_equal(l.n, 0);
        char lxc[4096];
        snprintf(lxc, sizeof lxc, "%s", tree_path("etc/pve/lxc"));
        assert_int_equal(container_list_load(lxc, "/nonexistent/cgroup", &l), 0);
        for (size_t i = 0; i < l.n; i++)
                assert_false(l.items[i]->running); /* no cgroups: nothing runs */
        container_list_done(&l);
}

static void write_file(const char *dir, const char *name, const char *text) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/%s", dir, name);
        assert_true(n > 0 && (size_t)n < sizeof path);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

/* An empty cpuset.cpus.effective (a cgroup being set up) is unknown, not an empty set. */
static void test_empty_effective_is_unknown(void **state) {
        (void)state;
        char dir[] = "/tmp/pvescale-test-container-XXXXXX", sub[4096];
        assert_non_null(mkdtemp(dir));
        write_file(dir, "400.conf", "cores: 2\nlxc.cgroup2.cpuset.cpus: 1-2\n");
        snprintf(sub, sizeof sub, "%s/400", dir);
        assert_int_equal(mkdir(sub, 0755), 0);
        write_file(sub, "cgroup.events", "populated 1\n");
        write_file(sub, "cpuset.cpus.effective", "\n");
        struct container_list l;
        assert_int_equal(container_list_load(dir, dir, &l), 0);
        assert_int_equal(l.n, 1);
        assert_true(l.items[0]->running);
        assert_null(l.items[0]->effective);
        container_list_done(&l);
        unlink(strcat(strcpy(sub, dir), "/400/cgroup.events"));
        unlink(strcat(strcpy(sub, dir), "/400/cpuset.cpus.effective"));
        rmdir(strcat(strcpy(sub, dir), "/400"));
        unlink(strcat(strcpy(sub, dir), "/400.conf"));
        assert_int_equal(rmdir(dir), 0);
}

static void test_json(void **state) {
        (void)state;
        struct container_list l;
        load_tree(&l);
        json_t *a = container_list_to_json(&l);
        assert_int_equal(json_array_size(a), 6);
        json_t *db = json_array_get(a, 1);
        assert_int_equal(json_integer_value(json_object_get(db, "vmid")), 202);
        assert_string_equal(json_string_value(json_object_get(db, "hostname")), "db");
        assert_string_equal(json_string_value(json_object_get(db, "cpuset")), "8-11");
        assert_true(json_is_true(json_object_get(db, "pinned")));
        assert_true(json_is_true(json_object_get(db, "running")));
        assert_int_equal(json_integer_value(json_object_get(db, "memory_bytes")), 1024 * MIB);
        json_t *web = json_array_get(a, 0);
        assert_true(json_is_null(json_object_get(web, "cpuset")));
        assert_string_equal(json_string_value(json_object_get(web, "effective_cpus")), "2-5");
        json_t *broken = json_array_get(a, 4);
        assert_int_equal(json_array_size(json_object_get(broken, "errors")), 4);
        assert_true(json_is_null(json_object_get(broken, "cpulimit")));
        json_decref(a);
        container_list_done(&l);
}

/* ---- capacity: 2 NUMA nodes of 8 CPUs and 8 GiB ---- */

static struct cpuset *cpus_of(const char *list) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(list, &s), 0);
        return s;
}

static struct topology *make_host(void) {
        struct topology *t = calloc(1, sizeof(*t));
        t->cpus = cpus_of("0-15");
        t->online = cpus_of("0-15");
        t->isolated = cpuset_new();
        t->n_numa_nodes = 2;
        t->numa_nodes = calloc(2, sizeof(*t->numa_nodes));
        for (int i = 0; i < 2; i++) {
                t->numa_nodes[i].id = i;
                t->numa_nodes[i].cpus = cpus_of(i ? "8-15" : "0-7");
                t->numa_nodes[i].memory_bytes = 8 * GIB;
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

static struct capacity *compute(const struct inventory *inv, bool count_stopped) {
        struct topology *t = make_host();
        struct capacity_options opts = { .count_stopped_vms = count_stopped };
        struct capacity *c = NULL;
        assert_int_equal(capacity_compute(t, NULL, inv, &opts, &c), 0);
        free_host(t);
        return c;
}

static void assert_set(const struct cpuset *s, const char *want) {
        assert_cpuset(s, want);
}

/* Counted: 201 (running, 4 floating), 202 (running, pinned 8-11), 203 and 205 (stopped: 2 and 1 floating);
 * not 204 (template) nor 206 (unreadable). */
static void test_capacity_counts_containers(void **state) {
        (void)state;
        struct inventory inv = { 0 };
        load_tree(&inv.containers);
        struct capacity *c = compute(&inv, true);
        assert_set(c->pinned_cpus, "8-11");
        assert_set(c->container_pinned_cpus, "8-11");
        assert_set(c->free_cpus, "0-7,12-15");
        assert_int_equal(c->container_floating_cpus, 7);
        assert_int_equal(c->floating_vcpus, 7);
        assert_int_equal(c->cpus_free, 12 - 7);
        assert_int_equal(c->containers_counted, 4);
        assert_int_equal(c->container_memory_bytes, (2048 + 1024 + 512 + 512) * MIB);
        assert_int_equal(c->memory_used_bytes, 4096 * MIB);
        assert_int_equal(c->memory_free_bytes, 12 * GIB);
        /* 202's 1024 MiB on node 1 (8-11 is within it); the other 3072 MiB spread by node size */
        assert_int_equal(c->numa[0].memory_free_bytes, 8 * GIB - 1536 * MIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 8 * GIB - 1536 * MIB - 1024 * MIB);
        assert_int_equal(c->numa[0].cpus_free + c->numa[1].cpus_free, 5);
        json_t *j = capacity_to_json(c);
        json_t *cj = json_object_get(j, "containers");
        assert_int_equal(json_integer_value(json_object_get(cj, "count")), 4);
        assert_string_equal(json_string_value(json_object_get(cj, "pinned_cpus")), "8-11");
        assert_int_equal(json_integer_value(json_object_get(cj, "floating_cpus")), 7);
        assert_int_equal(json_integer_value(json_object_get(cj, "memory_bytes")), 4096 * MIB);
        json_decref(j);
        capacity_free(c);
        container_list_done(&inv.containers);
}

/* As for VMs, count_stopped_vms off leaves stopped containers out. */
static void test_capacity_stopped_containers_not_counted(void **state) {
        (void)state;
        struct inventory inv = { 0 };
        load_tree(&inv.containers);
        struct capacity *c = compute(&inv, false);
        assert_int_equal(c->containers_counted, 2);
        assert_int_equal(c->floating_vcpus, 4);
        assert_int_equal(c->cpus_free, 12 - 4);
        assert_int_equal(c->memory_used_bytes, 3072 * MIB);
        capacity_free(c);
        container_list_done(&inv.containers);
}

/* A pinned container spread over both nodes: its memory is not bound to one; a running one's effective set
 * counts too (it can differ from the config until the next start). */
static void test_capacity_pinned_across_nodes(void **state) {
        (void)state;
        struct inventory inv = { 0 };
        inv.containers.items = calloc(1, sizeof(struct container *));
        inv.containers.items[0] = parse("memory: 2048\nlxc.cgroup2.cpuset.cpus: 6-9\n");
        inv.containers.items[0]->running = true;
        inv.containers.items[0]->effective = cpus_of("6-10");
        inv.containers.n = 1;
        struct capacity *c = compute(&inv, true);
        assert_set(c->pinned_cpus, "6-10");
        assert_int_equal(c->floating_vcpus, 0);
        assert_int_equal(c->cpus_free, 11);
        assert_int_equal(c->numa[0].memory_free_bytes, 7 * GIB);
        assert_int_equal(c->numa[1].memory_free_bytes, 7 * GIB);
        capacity_free(c);
        container_list_done(&inv.containers);
}

/* Containers and VMs add up: a floating VM and a floating container share the unpinned pool. */
static void test_capacity_with_vms(void **state) {
        (void)state;
        struct inventory inv = { 0 };
        inv.vms = calloc(1, sizeof(struct vm *));
        assert_int_equal(inventory_parse_config(100, "cores: 3\nmemory: 1024\n", &inv.vms[0]), 0);
        inv.vms[0]->running = true;
        inv.n_vms = 1;
        inv.containers.items = calloc(1, sizeof(struct container *));
        inv.containers.items[0] = parse("cores: 2\nmemory: 1024\n");
        inv.containers.items[0]->running = true;
        inv.containers.n = 1;
        struct capacity *c = compute(&inv, true);
        assert_int_equal(c->floating_vcpus, 5);
        assert_int_equal(c->cpus_free, 11);
        assert_int_equal(c->memory_used_bytes, 2048 * MIB);
        capacity_free(c);
        vm_free(inv.vms[0]);
        free(inv.vms);
        container_list_done(&inv.containers);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_keys_and_raw_cpuset),
                cmocka_unit_test(test_sections_ignored),
                cmocka_unit_test(test_malformed_values),
                cmocka_unit_test(test_cpu_count),
                cmocka_unit_test(test_load_tree),
                cmocka_unit_test(test_missing_directories),
                cmocka_unit_test(test_empty_effective_is_unknown),
                cmocka_unit_test(test_json),
                cmocka_unit_test(test_capacity_counts_containers),
                cmocka_unit_test(test_capacity_stopped_containers_not_counted),
                cmocka_unit_test(test_capacity_pinned_across_nodes),
                cmocka_unit_test(test_capacity_with_vms),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
