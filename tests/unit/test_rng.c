/* Tests for shared/rng: seeding (fixed and from the kernel), the xorshift64 sequence, bounded draws. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rng.h"

static void test_fixed_seed_repeats(void **state) {
        (void)state;
        struct rng a, b;
        rng_init(&a, 42);
        rng_init(&b, 42);
        for (int i = 0; i < 100; i++)
                assert_int_equal(rng_next(&a), rng_next(&b));
}

static void test_xorshift64_sequence(void **state) {
        (void)state;
        /* Marsaglia's xorshift64 (13, 7, 17) from 1: the first draws, computed by hand from the definition. */
        struct rng r;
        rng_init(&r, 1);
        assert_int_equal(rng_next(&r), 0x40822041ULL);
        assert_int_equal(rng_next(&r), 0x100041060c011441ULL);
}

static void test_zero_seed_draws_from_the_kernel(void **state) {
        (void)state;
        struct rng a, b;
        rng_init(&a, 0);
        rng_init(&b, 0);
        assert_true(a.state != 0 && b.state != 0);
        assert_true(a.state != b.state); /* two kernel draws of 64 bits: equal with chance 2^-64 */
}

static void test_state_never_zero(void **state) {
        (void)state;
        struct rng r;
        rng_init(&r, 7);
        for (int i = 0; i < 10000; i++)
                assert_true(rng_next(&r) != 0);
}

static void test_below_stays_in_range_and_spreads(void **state) {
        (void)state;
        struct rng r;
        unsigned seen[10] = { 0 };
        rng_init(&r, 12345);
        for (int i = 0; i < 10000; i++) {
                uint64_t v = rng_below(&r, 10);
                assert_in_range(v, 0, 9);
                seen[v]++;
        }
        for (int k = 0; k < 10; k++) /* about 1000 each: a bias or a stuck bit shows far outside this */
                assert_in_range(seen[k], 850, 1150);
        assert_int_equal(rng_below(&r, 0), 0);
        assert_int_equal(rng_below(&r, 1), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fixed_seed_repeats),
                cmocka_unit_test(test_xorshift64_sequence),
                cmocka_unit_test(test_zero_seed_draws_from_the_kernel),
                cmocka_unit_test(test_state_never_zero),
                cmocka_unit_test(test_below_stays_in_range_and_spreads),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
