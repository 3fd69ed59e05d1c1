/* Tests for shared/repeat: a repeating failure is told when it starts, changes cause and ends. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "repeat.h"

static void test_sequence(void **state) {
        (void)state;
        struct repeat r = { 0 };
        unsigned n = 99;
        static const struct {
                int cause;
                enum repeat_event want;
                unsigned failed;
        } steps[] = {
                { 0, REPEAT_OK, 0 },           { -EPERM, REPEAT_STARTED, 1 }, { -EPERM, REPEAT_SAME, 2 },
                { -EPERM, REPEAT_SAME, 3 },    { -EINVAL, REPEAT_CHANGED, 4 }, { -EINVAL, REPEAT_SAME, 5 },
                { 0, REPEAT_ENDED, 5 },        { 0, REPEAT_OK, 0 },           { -EINVAL, REPEAT_STARTED, 1 },
                { 0, REPEAT_ENDED, 1 },
        };
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
                enum repeat_event ev = repeat_note(&r, steps[i].cause, &n);
                if (ev != steps[i].want || n != steps[i].failed)
                        fail_msg("step %zu: event %d failed %u, want %d and %u", i, ev, n, steps[i].want,
                                 steps[i].failed);
        }
        assert_int_equal(repeat_note(&r, -EIO, NULL), REPEAT_STARTED);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_sequence) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
