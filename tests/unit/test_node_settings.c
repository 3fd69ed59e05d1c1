/* Tests for agent/node_settings: the seed's file format, wildcard versus exact node, memsize, errors. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "node_settings.h"

#define GIB (UINT64_C(1) << 30)

/* The example from seeds/000 verbatim. */
static const char seed_file[] = "{\n"
                                "\"region-1\": {\n"
                                "\"node1\": {\n"
                                "\"sockets\": 1,\n"
                                "\"threads\": 2,\n"
                                "\"uncorecaches\": 1,\n"
                                "\"nodes\": {\n"
                                "\"0\": {\n"
                                "\"cpus\": \"0-15\",\n"
                                "\"memory\": 4294967296\n"
                                "},\n"
                                "\"1\": {\n"
                                "\"cpus\": \"16-31\",\n"
                                "\"memory\": 4294967296\n"
                                "}\n"
                                "},\n"
                                "\"reservedcpus\": [0,4],\n"
                                "\"reservedmemory\": 1073741824\n"
                                "},\n"
                                "\"node2\": {\n"
                                "\"reservedcpus\": [1,5],\n"
                                "\"reservedmemory\": 4294967296\n"
                                "},\n"
                                "\"*\": {\n"
                                "\"reservedcpus\": [1,5],\n"
                                "\"reservedmemory\": 4294967296\n"
                                "}\n"
                                "},\n"
                                "\"region-2\": {\n"
                                "\"node3\": {\n"
                                "\"reservedcpus\": [0,1],\n"
                                "\"reservedmemory\": 1073741824\n"
                                "}\n"
                                "}\n"
                                "}\n";

static struct node_settings *parse_ok(const char *text, const char *region, const char *node) {
        struct node_settings *s = NULL;
        char err[256] = "";
        int r = node_settings_parse(text, region, node, &s, err, sizeof err);
        if (r != 0)
                fail_msg("parse failed (%d): %s", r, err);
        assert_non_null(s);
        assert_non_null(s->reserved_cpus);
        return s;
}

static void assert_cpus(const struct cpuset *s, const char *want) {
        assert_non_null(s);
        char *got = cpuset_format(s);
        assert_string_equal(got, want);
        free(got);
}

static void assert_parse_error(const char *text, const char *want) {
        struct node_settings *s = NULL;
        char err[256] = "";
        assert_int_equal(node_settings_parse(text, "r1", "pve1", &s, err, sizeof err), -EINVAL);
        assert_null(s);
        if (strstr(err, want) != err)
                fail_msg("error '%s' does not start with '%s'", err, want);
        assert_null(strchr(err, '\n'));
}

static void test_seed_example(void **state) {
        (void)state;
        struct node_settings *s = parse_ok(seed_file, "region-1", "node1");
        assert_cpus(s->reserved_cpus, "0,4");
        assert_int_equal(s->reserved_memory_bytes, GIB);
        assert_int_equal(s->sockets, 1);
        assert_int_equal(s->threads, 2);
        assert_int_equal(s->uncorecaches, 1);
        assert_int_equal(s->n_numa, 2);
        assert_int_equal(s->numa[0].id, 0);
        assert_cpus(s->numa[0].cpus, "0-15");
        assert_int_equal(s->numa[0].memory_bytes, 4 * GIB);
        assert_int_equal(s->numa[1].id, 1);
        assert_cpus(s->numa[1].cpus, "16-31");
        node_settings_free(s);

        s = parse_ok(seed_file, "region-2", "node3");
        assert_cpus(s->reserved_cpus, "0-1");
        assert_int_equal(s->reserved_memory_bytes, GIB);
        assert_int_equal(s->n_numa, 0);
        assert_int_equal(s->sockets, 0);
        node_settings_free(s);
}

static void test_wildcard_versus_exact(void **state) {
        (void)state;
        struct node_settings *s = parse_ok(seed_file, "region-1", "node2");
        assert_cpus(s->reserved_cpus, "1,5");
        node_settings_free(s);
        /* Not named: the wildcard applies. */
        s = parse_ok(seed_file, "region-1", "node7");
        assert_cpus(s->reserved_cpus, "1,5");
        assert_int_equal(s->reserved_memory_bytes, 4 * GIB);
        node_settings_free(s);
        /* The exact name wins even when the wildcard comes first in the file. */
        const char *text = "{\"r1\": {\"*\": {\"reservedcpus\": [7], \"reservedmemory\": 1},"
                           "          \"pve1\": {\"reservedcpus\": [2,3]}}}";
        s = parse_ok(text, "r1", "pve1");
        assert_cpus(s->reserved_cpus, "2-3");
        assert_int_equal(s->reserved_memory_bytes, 0); /* no merging with "*" */
        node_settings_free(s);
        s = parse_ok(text, "r1", "pve2");
        assert_cpus(s->reserved_cpus, "7");
        node_settings_free(s);
}

static void test_no_matching_entry(void **state) {
        (void)state;
        struct node_settings *s = parse_ok(seed_file, "region-2", "node9");
        assert_true(cpuset_is_empty(s->reserved_cpus));
        assert_int_equal(s->reserved_memory_bytes, 0);
        node_settings_free(s);
        s = parse_ok(seed_file, "default", "pve1");
        assert_true(cpuset_is_empty(s->reserved_cpus));
        node_settings_free(s);
        s = parse_ok("{}", "default", "pve1");
        assert_int_equal(s->n_numa, 0);
        node_settings_free(s);
        s = node_settings_new_empty();
        assert_true(cpuset_is_empty(s->reserved_cpus));
        node_settings_free(s);
}

static void test_memsize_and_memory(void **state) {
        (void)state;
        struct node_settings *s = parse_ok("{\"r1\": {\"pve1\": {\"nodes\": {"
                                           "\"1\": {\"cpus\": \"8-15\", \"memory\": 200},"
                                           "\"0\": {\"cpus\": \"0-7\", \"memsize\": 100},"
                                           "\"2\": {\"memsize\": 300, \"memory\": 300}}}}}",
                                           "r1", "pve1");
        assert_int_equal(s->n_numa, 3);
        assert_int_equal(s->numa[0].id, 0);
        assert_int_equal(s->numa[0].memory_bytes, 100);
        assert_int_equal(s->numa[1].memory_bytes, 200);
        assert_int_equal(s->numa[2].memory_bytes, 300);
        assert_null(s->numa[2].cpus);
        node_settings_free(s);
        assert_parse_error("{\"r1\": {\"pve1\": {\"nodes\": {\"0\": {\"memsize\": 1, \"memory\": 2}}}}}",
                           "r1.pve1.nodes.0: memory and memsize disagree");
}

static void test_reservedcpus_cpulist_string(void **state) {
        (void)state;
        struct node_settings *s = parse_ok("{\"r1\": {\"*\": {\"reservedcpus\": \"0-3,8\"}}}", "r1", "x");
        assert_cpus(s->reserved_cpus, "0-3,8");
        node_settings_free(s);
}

static void test_errors_name_the_key(void **state) {
        (void)state;
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedmemory\": \"1G\"}}}",
                           "r1.pve1.reservedmemory: expected a non-negative integer");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedmemory\": -1}}}",
                           "r1.pve1.reservedmemory: expected a non-negative integer");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedmemory\": 1.5}}}",
                           "r1.pve1.reservedmemory: expected a non-negative integer");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedcpu\": [1]}}}", "r1.pve1.reservedcpu: unknown key");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedcpus\": [0, -1]}}}", "r1.pve1.reservedcpus[1]: expected");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedcpus\": [0, \"1\"]}}}", "r1.pve1.reservedcpus[1]:");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedcpus\": \"0-\"}}}", "r1.pve1.reservedcpus: expected");
        assert_parse_error("{\"r1\": {\"pve1\": {\"reservedcpus\": 3}}}", "r1.pve1.reservedcpus: expected");
        assert_parse_error("{\"r1\": {\"pve1\": {\"sockets\": 0}}}", "r1.pve1.sockets: expected a positive integer");
        assert_parse_error("{\"r1\": {\"pve1\": {\"threads\": \"2\"}}}", "r1.pve1.threads: expected");
        assert_parse_error("{\"r1\": {\"pve1\": {\"nodes\": []}}}", "r1.pve1.nodes: expected an object");
        assert_parse_error("{\"r1\": {\"pve1\": {\"nodes\": {\"x\": {}}}}}", "r1.pve1.nodes.x: expected a NUMA");
        assert_parse_error("{\"r1\": {\"pve1\": {\"nodes\": {\"0\": {\"cpus\": \"a\"}}}}}",
                           "r1.pve1.nodes.0.cpus: expected a cpulist");
        assert_parse_error("{\"r1\": {\"pve1\": {\"nodes\": {\"0\": {\"memsize\": \"4G\"}}}}}",
                           "r1.pve1.nodes.0.memsize: expected a non-negative integer");
        assert_parse_error("{\"r1\": {\"pve1\": {\"nodes\": {\"0\": {\"mem\": 1}}}}}", "r1.pve1.nodes.0.mem: unknown");
        assert_parse_error("{\"r1\": {\"pve1\": 5}}", "r1.pve1: expected an object");
        assert_parse_error("{\"r1\": []}", "r1: expected an object");
        assert_parse_error("[]", "top level: expected an object");
        assert_parse_error("{\"r1\": {", "line 1 column");
        /* A mistake in another host's entry or region is reported too: every host sees the same file. */
        assert_parse_error("{\"r1\": {\"pve1\": {}, \"pve2\": {\"reservedmemory\": true}}}",
                           "r1.pve2.reservedmemory: expected");
        assert_parse_error("{\"r2\": {\"*\": {\"bogus\": 1}}, \"r1\": {\"pve1\": {}}}", "r2.*.bogus: unknown key");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_seed_example),
                cmocka_unit_test(test_wildcard_versus_exact),
                cmocka_unit_test(test_no_matching_entry),
                cmocka_unit_test(test_memsize_and_memory),
                cmocka_unit_test(test_reservedcpus_cpulist_string),
                cmocka_unit_test(test_errors_name_the_key),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
