/* Tests for shared/errmsg: the message lands in the caller's buffer, cut and terminated, and the code comes back. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "errmsg.h"

/* A helper of the kind errmsg_vappend serves: a position first, then the caller's message. */
static int __attribute__((format(printf, 4, 5))) at_line(char *err, size_t errlen, unsigned line, const char *fmt,
                                                            ...) {
        va_list ap;
        snprintf(err, errlen, "line %u: ", line);
        va_start(ap, fmt);
        int r = errmsg_vappend(err, errlen, -EBADMSG, fmt, ap);
        va_end(ap);
        return r;
}

static int __attribute__((format(printf, 3, 4))) wrapped(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = errmsg_vset(err, errlen, -ENOENT, fmt, ap);
        va_end(ap);
        return r;
}

static void test_set_formats_and_returns_the_code(void **state) {
        (void)state;
        char err[64];
        assert_int_equal(errmsg_set(err, sizeof err, -EIO, "%s %d", "disk", 3), -EIO);
        assert_string_equal(err, "disk 3");
        assert_int_equal(errmsg_invalid(err, sizeof err, "bad %s", "key"), -EINVAL);
        assert_string_equal(err, "bad key");
        assert_int_equal(wrapped(err, sizeof err, "no %s", "file"), -ENOENT);
        assert_string_equal(err, "no file");
}

static void test_cut_and_terminated(void **state) {
        (void)state;
        char err[8];
        memset(err, 'x', sizeof err);
        assert_int_equal(errmsg_set(err, sizeof err, -E2BIG, "%s", "a long message"), -E2BIG);
        assert_string_equal(err, "a long ");
}

static void test_no_buffer_only_the_code(void **state) {
        (void)state;
        char err[4] = "old";
        assert_int_equal(errmsg_set(NULL, 0, -EPERM, "ignored"), -EPERM);
        assert_int_equal(errmsg_set(err, 0, -EPERM, "ignored"), -EPERM);
        assert_string_equal(err, "old");
        assert_int_equal(at_line(NULL, 0, 3, "ignored"), -EBADMSG);
}

static void test_append_after_a_prefix(void **state) {
        (void)state;
        char err[64];
        assert_int_equal(at_line(err, sizeof err, 12, "unexpected %c", '}'), -EBADMSG);
        assert_string_equal(err, "line 12: unexpected }");
        char small[10]; /* the prefix fills it: nothing more is written, and it stays terminated */
        assert_int_equal(at_line(small, sizeof small, 123456, "more"), -EBADMSG);
        assert_string_equal(small, "line 1234");
        char mid[14]; /* room for part of the message */
        assert_int_equal(at_line(mid, sizeof mid, 1, "abcdefgh"), -EBADMSG);
        assert_string_equal(mid, "line 1: abcde");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_set_formats_and_returns_the_code),
                cmocka_unit_test(test_cut_and_terminated),
                cmocka_unit_test(test_no_buffer_only_the_code),
                cmocka_unit_test(test_append_after_a_prefix),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
