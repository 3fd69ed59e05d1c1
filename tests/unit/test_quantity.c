/* Tests for coordinator/quantity: the Kubernetes quantity grammar, rounding and formatting. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "quantity.h"

/* Expected values were computed independently with Python's decimal module (exact ceil). */
struct qcase {
        const char *text;
        int ru;
        int64_t units;
        int rm;
        int64_t milli;
};

/* Millicores, as the coordinator reads cpu quantities. */
static int parse_milli(const char *s, int64_t *ret) {
        return quantity_parse(s, QUANTITY_MILLI, ret);
}

static const struct qcase CASES[] = {
        { "0", 0, 0LL, 0, 0LL },
        { "1", 0, 1LL, 0, 1000LL },
        { "100m", 0, 1LL, 0, 100LL },
        { "1500m", 0, 2LL, 0, 1500LL },
        { "1.5", 0, 2LL, 0, 1500LL },
        { "0.5", 0, 1LL, 0, 500LL },
        { ".5", 0, 1LL, 0, 500LL },
        { "5.", 0, 5LL, 0, 5000LL },
        { "+2", 0, 2LL, 0, 2000LL },
        { "-2", 0, -2LL, 0, -2000LL },
        { "-1.5", 0, -2LL, 0, -1500LL },
        { "2e3", 0, 2000LL, 0, 2000000LL },
        { "2E3", 0, 2000LL, 0, 2000000LL },
        { "1.5e3", 0, 1500LL, 0, 1500000LL },
        { "15e-1", 0, 2LL, 0, 1500LL },
        { "1e-3", 0, 1LL, 0, 1LL },
        { "1e-4", 0, 1LL, 0, 1LL },
        { "250u", 0, 1LL, 0, 1LL },
        { "1000000n", 0, 1LL, 0, 1LL },
        { "1000001n", 0, 1LL, 0, 2LL },
        { "4Gi", 0, 4294967296LL, 0, 4294967296000LL },
        { "100Mi", 0, 104857600LL, 0, 104857600000LL },
        { "1.5Gi", 0, 1610612736LL, 0, 1610612736000LL },
        { "0.1Ki", 0, 103LL, 0, 102400LL },
        { "1Ki", 0, 1024LL, 0, 1024000LL },
        { "1k", 0, 1000LL, 0, 1000000LL },
        { "1M", 0, 1000000LL, 0, 1000000000LL },
        { "2G", 0, 2000000000LL, 0, 2000000000000LL },
        { "1T", 0, 1000000000000LL, 0, 1000000000000000LL },
        { "1Ti", 0, 1099511627776LL, 0, 1099511627776000LL },
        { "1P", 0, 1000000000000000LL, 0, 1000000000000000000LL },
        { "1Pi", 0, 1125899906842624LL, 0, 1125899906842624000LL },
        { "1E", 0, 1000000000000000000LL, -ERANGE, 0 },
        { "1Ei", 0, 1152921504606846976LL, -ERANGE, 0 },
        { "7Ei", 0, 8070450532247928832LL, -ERANGE, 0 },
        { "8Ei", -ERANGE, 0, -ERANGE, 0 },
        { "10E", -ERANGE, 0, -ERANGE, 0 },
        { "007", 0, 7LL, 0, 7000LL },
        { "0.000001", 0, 1LL, 0, 1LL },
        { "123456789012345678", 0, 123456789012345678LL, -ERANGE, 0 },
        { "9223372036854775807", 0, 9223372036854775807LL, -ERANGE, 0 },
        { "9223372036854775808", -ERANGE, 0, -ERANGE, 0 },
        { "12345678901234567890123n", 0, 12345678901235LL, 0, 12345678901234568LL },
        { "10000000000000000000m", 0, 10000000000000000LL, -ERANGE, 0 },
        { "1.00000000000000000000000", 0, 1LL, 0, 1000LL },
        { "1e19", -ERANGE, 0, -ERANGE, 0 },
        { "1e-30", 0, 1LL, 0, 1LL },
        { "99999999999999999999", -ERANGE, 0, -ERANGE, 0 },
        { "", -EINVAL, 0, -EINVAL, 0 },
        { ".", -EINVAL, 0, -EINVAL, 0 },
        { "m", -EINVAL, 0, -EINVAL, 0 },
        { "1.2.3", -EINVAL, 0, -EINVAL, 0 },
        { "1 ", -EINVAL, 0, -EINVAL, 0 },
        { " 1", -EINVAL, 0, -EINVAL, 0 },
        { "1x", -EINVAL, 0, -EINVAL, 0 },
        { "1KI", -EINVAL, 0, -EINVAL, 0 },
        { "1kb", -EINVAL, 0, -EINVAL, 0 },
        { "1e", -EINVAL, 0, -EINVAL, 0 },
        { "1e+", -EINVAL, 0, -EINVAL, 0 },
        { "1e3.5", -EINVAL, 0, -EINVAL, 0 },
        { "1Gi5", -EINVAL, 0, -EINVAL, 0 },
        { "--1", -EINVAL, 0, -EINVAL, 0 },
        { "0x10", -EINVAL, 0, -EINVAL, 0 },
        { "-", -EINVAL, 0, -EINVAL, 0 },
        { "+", -EINVAL, 0, -EINVAL, 0 },
        { "1i", -EINVAL, 0, -EINVAL, 0 },
        { "1e1e1", -EINVAL, 0, -EINVAL, 0 },
        { "1.00000000000000000000001", 0, 2LL, 0, 1001LL }, /* a dropped non-zero digit rounds up */
};

static void check_one(const char *text, int (*parse)(const char *, int64_t *), int want_r, int64_t want) {
        int64_t v = 12345;
        int r = parse(text, &v);
        if (r != want_r)
                fail_msg("\"%s\": expected r=%d, got %d", text, want_r, r);
        if (r == 0 && v != want)
                fail_msg("\"%s\": expected %lld, got %lld", text, (long long)want, (long long)v);
        if (r < 0 && v != 12345)
                fail_msg("\"%s\": output written on failure", text);
}

static void test_parse_table(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
                check_one(CASES[i].text, quantity_parse_value, CASES[i].ru, CASES[i].units);
                check_one(CASES[i].text, parse_milli, CASES[i].rm, CASES[i].milli);
        }
}

static void test_overflow_by_scale(void **state) {
        (void)state;
        int64_t v;
        assert_int_equal(parse_milli("1Pi", &v), 0);
        assert_int_equal(v, 1125899906842624000LL);
        assert_int_equal(parse_milli("1Ei", &v), -ERANGE);
        assert_int_equal(parse_milli("1E", &v), -ERANGE);
        assert_int_equal(quantity_parse_value("10E", &v), -ERANGE);
        assert_int_equal(quantity_parse_value("8Ei", &v), -ERANGE);
        assert_int_equal(quantity_parse_value("7Ei", &v), 0);
        assert_int_equal(v, 7LL << 60);
        assert_int_equal(quantity_parse_value("9223372036854775807", &v), 0);
        assert_int_equal(v, INT64_MAX);
        assert_int_equal(quantity_parse_value("9223372036854775808", &v), -ERANGE);
        assert_int_equal(quantity_parse_value(NULL, &v), -EINVAL);
}

static void test_format(void **state) {
        (void)state;
        char b[32];
        assert_string_equal(quantity_format_milli(2000, b, sizeof b), "2");
        assert_string_equal(quantity_format_milli(1500, b, sizeof b), "1500m");
        assert_string_equal(quantity_format_milli(0, b, sizeof b), "0");
        assert_string_equal(quantity_format_bytes(4LL << 30, b, sizeof b), "4Gi");
        assert_string_equal(quantity_format_bytes(1536LL << 20, b, sizeof b), "1536Mi");
        assert_string_equal(quantity_format_bytes(100, b, sizeof b), "100");
        assert_string_equal(quantity_format_bytes(0, b, sizeof b), "0");
        assert_string_equal(quantity_format_bytes_human(1536LL << 20, b, sizeof b), "1.5Gi");
        assert_string_equal(quantity_format_bytes_human(12LL << 30, b, sizeof b), "12Gi");
        assert_string_equal(quantity_format_bytes_human(1000, b, sizeof b), "1000");
        assert_string_equal(quantity_format_bytes_human(1025, b, sizeof b), "1.1Ki");
        /* round trip */
        int64_t v;
        assert_int_equal(quantity_parse_value(quantity_format_bytes(3LL << 40, b, sizeof b), &v), 0);
        assert_int_equal(v, 3LL << 40);
        assert_int_equal(parse_milli(quantity_format_milli(250, b, sizeof b), &v), 0);
        assert_int_equal(v, 250);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_table),
                cmocka_unit_test(test_overflow_by_scale),
                cmocka_unit_test(test_format),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
