/* Tests for coordinator/latency: a claim's account from its batch's first pending pod to its start call, split
 * into API waits and own time, with the own time spent before the launcher took it up. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "latency.h"
#include "monotime.h"

static void test_account(void **state) {
        (void)state;
        struct latency *l;
        struct latency_report rep;
        assert_int_equal(latency_new(&l), 0);
        int64_t now = monotime_ms();
        /* First pod 1200 ms ago; the round and the writer waited 150 ms for API answers. */
        struct latency_waits round = { .api_us = 150000, .cpu_us = 20000 }, launch = { .api_us = 400000, .cpu_us = 5000 };
        latency_begin(l, "c-1", now - 1200, &round);
        latency_add_wait(l, "c-1", &launch);
        latency_add_wait(l, "unknown", &launch); /* ignored */
        struct latency_waits extra = { .api_us = 50000, .cpu_us = 1000 };
        assert_int_equal(latency_finish(l, "c-1", now + 300, &extra, &rep), 0);
        assert_int_equal(rep.total_ms, 1500);
        assert_int_equal(rep.api_ms, 600);
        assert_int_equal(rep.cpu_ms, 26);
        /* 1200 ms (at least: begin read the clock after `now`) minus 150 ms of waits, before the launch. */
        assert_in_range(rep.handoff_own_ms, 1050, 1100);
        /* Finished claims are forgotten; a second begin restarts the account. */
        assert_int_equal(latency_finish(l, "c-1", now, &extra, &rep), -ENOENT);
        latency_begin(l, "c-2", now - 10, &round);
        latency_begin(l, "c-2", now - 500, &(struct latency_waits){ 0 });
        assert_int_equal(latency_finish(l, "c-2", now, &(struct latency_waits){ 0 }, &rep), 0);
        assert_int_equal(rep.total_ms, 500);
        assert_int_equal(rep.api_ms, 0);
        assert_in_range(rep.handoff_own_ms, 500, 550);
        latency_free(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_account),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
