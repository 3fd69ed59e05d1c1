/* Tests for shared/backoff: the un-jittered ceiling, delay bounds per attempt, the cap, jitter spread, Retry-After,
 * reset. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>

#include "backoff.h"

static void test_ceiling(void **state) {
        (void)state;
        /* min(max, base * 2^attempt): the launcher's pause per failure and the task poll interval use it as is. */
        assert_int_equal(backoff_ceiling_ms(0, 30000, 1800000), 30000);
        assert_int_equal(backoff_ceiling_ms(2, 30000, 1800000), 120000);
        assert_int_equal(backoff_ceiling_ms(5, 30000, 1800000), 960000);
        assert_int_equal(backoff_ceiling_ms(6, 30000, 1800000), 1800000);
        assert_int_equal(backoff_ceiling_ms(4000000000u, 30000, 1800000), 1800000);
        assert_int_equal(backoff_ceiling_ms(3, 500, 300), 300); /* a base above the cap is cut to it */
        /* No overflow near the top of long, and a base that is not positive stays as it is (no endless loop). */
        assert_int_equal(backoff_ceiling_ms(200, 3, LONG_MAX), 3L << 61);
        assert_int_equal(backoff_ceiling_ms(4000000000u, 0, 1000), 0);
        assert_int_equal(backoff_ceiling_ms(3, -5, 1000), -5);
}

static void test_delay_bounds(void **state) {
        (void)state;
        /* attempt n: d = min(max, base * 2^n); the delay lies in [d/2, d] whatever the random number. */
        static const struct {
                unsigned attempt;
                long lo, hi;
        } want[] = { { 0, 100, 200 }, { 1, 200, 400 }, { 2, 400, 800 }, { 3, 800, 1600 },
                     { 4, 1600, 3200 }, { 7, 5000, 10000 }, { 40, 5000, 10000 } };
        static const uint32_t randoms[] = { 0, 1, 99, 12345, 0x7fffffff, 0xffffffff };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
                for (size_t j = 0; j < sizeof randoms / sizeof randoms[0]; j++) {
                        long d = backoff_delay_ms(want[i].attempt, 200, 10000, randoms[j]);
                        if (d < want[i].lo || d > want[i].hi)
                                fail_msg("attempt %u random %u: %ld not in [%ld, %ld]", want[i].attempt, randoms[j], d,
                                         want[i].lo, want[i].hi);
                }
        /* The extremes are reachable: random 0 gives d/2, random == d/2 gives d. */
        assert_int_equal(backoff_delay_ms(2, 200, 10000, 0), 400);
        assert_int_equal(backoff_delay_ms(2, 200, 10000, 400), 800);
        assert_int_equal(backoff_delay_ms(0, 0, 10000, 5), 0);
        assert_int_equal(backoff_delay_ms(3, 1000, 1500, 0), 750);
}

static void test_retry_after(void **state) {
        (void)state;
        assert_int_equal(backoff_honour_retry_after(300, -1), 300);
        assert_int_equal(backoff_honour_retry_after(300, 0), 300);
        assert_int_equal(backoff_honour_retry_after(300, 5000), 5000);
        assert_int_equal(backoff_honour_retry_after(300, 3600L * 1000), BACKOFF_RETRY_AFTER_MAX_MS);
}

static void test_sequence(void **state) {
        (void)state;
        struct backoff b;
        backoff_init(&b, 100, 1000, 42);
        long prev_hi = 0;
        for (unsigned i = 0; i < 8; i++) {
                long d = backoff_next_ms(&b);
                long cap = 100L << i > 1000 ? 1000 : 100L << i;
                assert_true(d >= cap / 2 && d <= cap);
                assert_true(cap >= prev_hi);
                prev_hi = cap;
        }
        assert_int_equal(b.attempt, 8);
        backoff_reset(&b);
        long d = backoff_next_ms(&b);
        assert_true(d >= 50 && d <= 100);
        /* Different draws: jitter really varies. */
        long first = backoff_delay_ms(5, 100, 100000, 1), other = first;
        for (uint32_t r = 2; r < 50 && other == first; r++)
                other = backoff_delay_ms(5, 100, 100000, r * 7919u);
        assert_true(other != first);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ceiling),
                cmocka_unit_test(test_delay_bounds),
                cmocka_unit_test(test_retry_after),
                cmocka_unit_test(test_sequence),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
