/* Tests for agent/placement_split: the pure split rules (quarter floor, whole / balanced / fill shapes, class). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "placement_internal.h"

#define S(lo_, hi_, free_, whole_) { .lo = (lo_), .hi = (hi_), .free = (free_), .whole = (whole_) }

static void fmt(const unsigned *u, size_t k, char *buf, size_t len) {
        size_t at = 0;
        buf[0] = 0;
        for (size_t j = 0; j < k && at < len; j++)
                at += (size_t)snprintf(buf + at, len - at, "%s%u", j ? "+" : "", u[j]);
}

static void expect(const struct placement__slot *sl, size_t k, unsigned total, enum placement__shape shape,
                   const char *want, enum placement__shape want_class) {
        unsigned u[8] = { 0 };
        char got[64];
        assert_true(placement__split(sl, k, total, shape, u));
        fmt(u, k, got, sizeof got);
        assert_string_equal(got, want);
        assert_int_equal(placement__split_class(sl, k, u), want_class);
}

static void test_quarter(void **state) {
        (void)state;
        assert_int_equal(placement__quarter_units(48, 2), 6);  /* 12 vCPUs = 6 pairs */
        assert_int_equal(placement__quarter_units(32, 2), 4);
        assert_int_equal(placement__quarter_units(24, 2), 3);
        assert_int_equal(placement__quarter_units(20, 2), 3);  /* 5 vCPUs rounds up to 3 pairs */
        assert_int_equal(placement__quarter_units(18, 1), 5);
        assert_int_equal(placement__quarter_units(2, 2), 1);
        assert_int_equal(placement__quarter_units(1, 1), 1);
}

static void test_infeasible(void **state) {
        (void)state;
        unsigned u[8];
        struct placement__slot two[] = { S(4, 15, 32, true), S(4, 15, 32, true) };
        assert_false(placement__split(two, 2, 7, PLACEMENT__BALANCED, u));  /* under 4 + 4 */
        assert_false(placement__split(two, 2, 31, PLACEMENT__WHOLE, u));    /* over 15 + 15 */
        struct placement__slot bad[] = { S(4, 3, 6, false), S(1, 15, 32, true) };
        assert_false(placement__split(bad, 2, 10, PLACEMENT__FILL, u));     /* a node below its own floor */
        assert_false(placement__split(two, 0, 0, PLACEMENT__FILL, u));
}

/* 48 vCPUs (24 pairs) on eas-tioga nodes that hold 15 pairs by memory: the whole free node first. */
static void test_whole(void **state) {
        (void)state;
        struct placement__slot sl[] = { S(6, 10, 20, false), S(6, 15, 32, true) };
        expect(sl, 2, 24, PLACEMENT__WHOLE, "9+15", PLACEMENT__WHOLE);
        /* a quarter floor stops the whole node from leaving 2 vCPUs to the other: 32 vCPUs */
        struct placement__slot q[] = { S(4, 15, 32, true), S(4, 15, 32, true) };
        expect(q, 2, 16, PLACEMENT__WHOLE, "12+4", PLACEMENT__FILL);
}

static void test_balanced(void **state) {
        (void)state;
        struct placement__slot q[] = { S(4, 15, 32, true), S(4, 15, 32, true) };
        expect(q, 2, 16, PLACEMENT__BALANCED, "8+8", PLACEMENT__BALANCED);
        /* a node that holds less gives what it has; the others share the rest evenly */
        struct placement__slot b[] = { S(1, 3, 6, false), S(1, 10, 20, false), S(1, 10, 20, false) };
        expect(b, 3, 15, PLACEMENT__BALANCED, "3+6+6", PLACEMENT__FILL);
        /* odd remainders go one each to the first nodes */
        struct placement__slot c[] = { S(1, 10, 20, false), S(1, 10, 20, false), S(1, 10, 20, false) };
        expect(c, 3, 8, PLACEMENT__BALANCED, "3+3+2", PLACEMENT__BALANCED);
        /* memory-forced small floors (lo 1): balanced gives the small node all it holds; three nodes are
         * used up, so that split also counts as whole nodes */
        struct placement__slot m[] = { S(1, 5, 32, true), S(1, 5, 32, true), S(1, 5, 32, true), S(1, 2, 32, true) };
        expect(m, 4, 16, PLACEMENT__BALANCED, "5+5+4+2", PLACEMENT__WHOLE);
        expect(m, 4, 16, PLACEMENT__WHOLE, "5+5+5+1", PLACEMENT__WHOLE);
}

/* The fill shape uses up the fullest node first (the old behaviour, now the last choice). */
static void test_fill(void **state) {
        (void)state;
        struct placement__slot sl[] = { S(1, 15, 32, true), S(1, 2, 4, false) };
        expect(sl, 2, 10, PLACEMENT__FILL, "8+2", PLACEMENT__FILL);
        expect(sl, 2, 10, PLACEMENT__WHOLE, "9+1", PLACEMENT__FILL);
        expect(sl, 2, 10, PLACEMENT__BALANCED, "8+2", PLACEMENT__FILL);
}

/* Two wholly free nodes, both taken whole: class whole; one taken whole and one not wholly free: whole. */
static void test_class(void **state) {
        (void)state;
        struct placement__slot sl[] = { S(1, 8, 16, true), S(1, 8, 16, true), S(1, 8, 10, false) };
        unsigned a[] = { 8, 8, 4 }, b[] = { 8, 6, 6 }, c[] = { 7, 7, 6 }, d[] = { 2, 8, 8 };
        assert_int_equal(placement__split_class(sl, 3, a), PLACEMENT__WHOLE);
        assert_int_equal(placement__split_class(sl, 3, b), PLACEMENT__FILL);
        assert_int_equal(placement__split_class(sl, 3, c), PLACEMENT__BALANCED);
        assert_int_equal(placement__split_class(sl, 3, d), PLACEMENT__FILL);
        assert_int_equal(placement__split_whole(sl, 3, a), 2);
        assert_int_equal(placement__split_whole(sl, 3, b), 1);
        assert_int_equal(placement__split_whole(sl, 3, c), 0);
        unsigned e[] = { 8, 8, 8 }; /* the third node is not wholly free: not taken whole */
        assert_int_equal(placement__split_whole(sl, 3, e), 2);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_quarter),  cmocka_unit_test(test_infeasible), cmocka_unit_test(test_whole),
                cmocka_unit_test(test_balanced), cmocka_unit_test(test_fill),       cmocka_unit_test(test_class),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
