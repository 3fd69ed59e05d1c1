/* Tests for shared/cpuset: cpulist and cpumask parsing, canonical output and set algebra. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpuset.h"

static void assert_roundtrip(const char *in, const char *want) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(in, &s), 0);
        char *out = cpuset_format(s);
        assert_string_equal(out, want);
        free(out);
        cpuset_free(s);
}

static void test_parse_canonical(void **state) {
        (void)state;
        assert_roundtrip("0,2,4-6", "0,2,4-6");
        assert_roundtrip("6,5,4,2,0", "0,2,4-6");
        assert_roundtrip("0-3,2-4", "0-4");
        assert_roundtrip("", "");
        assert_roundtrip("  7\n", "7");
        assert_roundtrip("0-63,64-127", "0-127");
        assert_roundtrip("1,3,5,63,64,65", "1,3,5,63-65");
}

static void assert_parse_error(const char *in, int err) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(in, &s), err);
        assert_null(s);
}

static void test_parse_errors(void **state) {
        (void)state;
        assert_parse_error("a", -EINVAL);
        assert_parse_error("1,", -EINVAL);
        assert_parse_error(",1", -EINVAL);
        assert_parse_error("1-", -EINVAL);
        assert_parse_error("1 2", -EINVAL);
        assert_parse_error("-1", -EINVAL);
        assert_parse_error("5-3", -ERANGE);
        assert_parse_error("8192", -ERANGE);
        assert_parse_error("99999999999", -ERANGE);
}

static struct cpuset *parse(const char *list) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(list, &s), 0);
        return s;
}

static void test_algebra(void **state) {
        (void)state;
        struct cpuset *a = parse("0-3"), *b = parse("2-4,100");
        assert_true(cpuset_intersects(a, b));
        assert_int_equal(cpuset_count_and(a, b), 2);
        assert_int_equal(cpuset_or(a, b), 0);
        char *out = cpuset_format(a);
        assert_string_equal(out, "0-4,100");
        free(out);
        assert_int_equal(cpuset_count(a), 6);
        cpuset_andnot(a, b);
        out = cpuset_format(a);
        assert_string_equal(out, "0-1");
        free(out);
        assert_false(cpuset_intersects(a, b));
        struct cpuset *c = parse("0-4,100");
        cpuset_and(c, b);
        assert_true(cpuset_equal(c, b));
        cpuset_free(a);
        cpuset_free(b);
        cpuset_free(c);
}

static void test_subset_equal_next(void **state) {
        (void)state;
        struct cpuset *small = parse("1,5"), *big = parse("0-7"), *empty = parse("");
        assert_true(cpuset_is_subset(small, big));
        assert_false(cpuset_is_subset(big, small));
        assert_true(cpuset_is_subset(empty, small));
        assert_true(cpuset_is_empty(empty));
        assert_false(cpuset_equal(small, big));
        struct cpuset *grown = parse("1,5");
        assert_int_equal(cpuset_set(grown, 500), 0);
        cpuset_clear(grown, 500);
        assert_true(cpuset_equal(small, grown)); /* different word counts, same members */
        assert_int_equal(cpuset_next(small, -1), 1);
        assert_int_equal(cpuset_next(small, 1), 5);
        assert_int_equal(cpuset_next(small, 5), -1);
        assert_int_equal(cpuset_last(big), 7);
        assert_int_equal(cpuset_last(empty), -1);
        int seen = 0;
        CPUSET_FOREACH(cpu, big) seen += cpu;
        assert_int_equal(seen, 28);
        assert_int_equal(cpuset_set(big, CPUSET_MAX_CPU + 1), -ERANGE);
        cpuset_free(small);
        cpuset_free(big);
        cpuset_free(empty);
        cpuset_free(grown);
}

static void test_dup_copy(void **state) {
        (void)state;
        struct cpuset *a = parse("3,200-202"), *d = cpuset_dup(a), *c = parse("0-500");
        assert_true(cpuset_equal(a, d));
        assert_int_equal(cpuset_copy(c, a), 0);
        assert_true(cpuset_equal(c, a));
        cpuset_zero(c);
        assert_true(cpuset_is_empty(c));
        cpuset_free(a);
        cpuset_free(d);
        cpuset_free(c);
        cpuset_free(NULL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_canonical), cmocka_unit_test(test_parse_errors),
                cmocka_unit_test(test_algebra),
                cmocka_unit_test(test_subset_equal_next), cmocka_unit_test(test_dup_copy),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
