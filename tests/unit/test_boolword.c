/* Tests for shared/boolword: the boolean words every config, flag and Proxmox config reader shares. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "boolword.h"

static void test_words(void **state) {
        (void)state;
        static const char *const yes[] = { "1", "on", "yes", "true", "ON", "Yes", "TRUE", "tRuE" };
        static const char *const no[] = { "0", "off", "no", "false", "OFF", "No", "FALSE", "fAlSe" };
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
                bool t = false, f = true;
                assert_int_equal(boolword_parse(yes[i], &t), 0);
                assert_int_equal(boolword_parse(no[i], &f), 0);
                if (!t || f)
                        fail_msg("'%s' read %d, '%s' read %d", yes[i], t, no[i], f);
        }
}

static void test_other_words_leave_the_value(void **state) {
        (void)state;
        static const char *const bad[] = { "", " 1", "1 ", "2", "-1", "y", "n", "enabled", "truee", "of", "00" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                bool v = true;
                if (boolword_parse(bad[i], &v) != -EINVAL || !v)
                        fail_msg("'%s' was taken", bad[i]);
        }
        bool v = false;
        assert_int_equal(boolword_parse(NULL, &v), -EINVAL);
        assert_false(v);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_words),
                cmocka_unit_test(test_other_words_leave_the_value),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
