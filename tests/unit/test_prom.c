/* Tests for shared/prom: the exposition text of families, samples, label sets and histograms, byte for byte. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "prom.h"

static char *render_with(const char *prefix, void (*fn)(struct prom *p)) {
        struct prom p;
        assert_int_equal(prom_open(&p, prefix), 0);
        fn(&p);
        char *text = prom_close(&p);
        assert_non_null(text);
        return text;
}

static void families_and_samples(struct prom *p) {
        prom_family(p, "jobs_total", "counter", "Jobs by result.");
        prom_sample_u64(p, "jobs_total", "result=\"ok\"", UINT64_MAX);
        prom_sample_u64(p, "jobs_total", "", 0);
        prom_family(p, "depth", "gauge", "A back\\slash and a\nnewline; \"quotes\" stay.");
        prom_sample_i64(p, "depth", NULL, -3);
        prom_gauge_u64(p, "up", "1 when up.", 1);
}

static void test_families_and_samples(void **state) {
        (void)state;
        char *text = render_with("app_", families_and_samples);
        assert_string_equal(text, "# HELP app_jobs_total Jobs by result.\n"
                                  "# TYPE app_jobs_total counter\n"
                                  "app_jobs_total{result=\"ok\"} 18446744073709551615\n"
                                  "app_jobs_total 0\n"
                                  "# HELP app_depth A back\\\\slash and a\\nnewline; \"quotes\" stay.\n"
                                  "# TYPE app_depth gauge\n"
                                  "app_depth -3\n"
                                  "# HELP app_up 1 when up.\n"
                                  "# TYPE app_up gauge\n"
                                  "app_up 1\n");
        free(text);
}

static const double bounds[] = { 0.00025, 0.5, 1, 2.5 };

static void histograms(struct prom *p) {
        static const uint64_t buckets[] = { 1, 0, 2, 3 };
        prom_family(p, "wait_seconds", "histogram", "Waits.");
        prom_histogram(p, "wait_seconds", NULL, &(struct prom_histogram){ bounds, buckets, 4, 9, 12.1 });
        prom_histogram(p, "wait_seconds", "route=\"/x\"", &(struct prom_histogram){ bounds, buckets, 4, 6, 0.1 });
}

static void test_histogram_buckets_are_cumulative(void **state) {
        (void)state;
        char *text = render_with(NULL, histograms);
        assert_string_equal(text, "# HELP wait_seconds Waits.\n"
                                  "# TYPE wait_seconds histogram\n"
                                  "wait_seconds_bucket{le=\"0.00025\"} 1\n"
                                  "wait_seconds_bucket{le=\"0.5\"} 1\n"
                                  "wait_seconds_bucket{le=\"1\"} 3\n"
                                  "wait_seconds_bucket{le=\"2.5\"} 6\n"
                                  "wait_seconds_bucket{le=\"+Inf\"} 9\n"
                                  "wait_seconds_sum 12.1\n"
                                  "wait_seconds_count 9\n"
                                  "wait_seconds_bucket{route=\"/x\",le=\"0.00025\"} 1\n"
                                  "wait_seconds_bucket{route=\"/x\",le=\"0.5\"} 1\n"
                                  "wait_seconds_bucket{route=\"/x\",le=\"1\"} 3\n"
                                  "wait_seconds_bucket{route=\"/x\",le=\"2.5\"} 6\n"
                                  "wait_seconds_bucket{route=\"/x\",le=\"+Inf\"} 6\n"
                                  "wait_seconds_sum{route=\"/x\"} 0.1\n"
                                  "wait_seconds_count{route=\"/x\"} 6\n");
        free(text);
}

static void odd_sums(struct prom *p) {
        static const uint64_t none[] = { 0 };
        static const double one[] = { 1 };
        prom_histogram(p, "a", NULL, &(struct prom_histogram){ one, none, 1, 0, NAN });
        prom_histogram(p, "b", NULL, &(struct prom_histogram){ one, none, 1, 0, INFINITY });
        prom_histogram(p, "c", NULL, &(struct prom_histogram){ one, none, 1, 0, 0.1 + 0.2 });
}

static void test_float_spelling(void **state) {
        (void)state;
        char *text = render_with("", odd_sums);
        assert_non_null(strstr(text, "\na_sum NaN\n"));
        assert_non_null(strstr(text, "\nb_sum +Inf\n"));
        /* The shortest text that reads back as the same double: 0.1 + 0.2 is not 0.3. */
        assert_non_null(strstr(text, "\nc_sum 0.30000000000000004\n"));
        free(text);
}

static void test_escape_label(void **state) {
        (void)state;
        char out[64];
        assert_int_equal(prom_escape_label("a\\b\"c\nd", out, sizeof out), 0);
        assert_string_equal(out, "a\\\\b\\\"c\\nd");
        assert_int_equal(prom_escape_label(NULL, out, sizeof out), 0);
        assert_string_equal(out, "");
        char small[4]; /* the quote's escape does not fit: cut before it, never half of it */
        assert_int_equal(prom_escape_label("ab\"", small, sizeof small), -ENOBUFS);
        assert_string_equal(small, "ab");
}

static void test_labels_add(void **state) {
        (void)state;
        struct prom_labels l = { 0 };
        assert_string_equal(l.text, "");
        assert_int_equal(prom_labels_add(&l, "node", "pve\"1"), 0);
        assert_int_equal(prom_labels_add(&l, "region", "eu"), 0);
        assert_string_equal(l.text, "node=\"pve\\\"1\",region=\"eu\"");
        assert_int_equal(l.len, strlen(l.text));
}

static void test_labels_add_cuts_a_long_value(void **state) {
        (void)state;
        struct prom_labels l = { 0 };
        char long_value[PROM_LABELS_MAX * 2];
        memset(long_value, 'x', sizeof long_value - 1);
        long_value[sizeof long_value - 1] = '\0';
        assert_int_equal(prom_labels_add(&l, "a", "1"), 0);
        assert_int_equal(prom_labels_add(&l, "model", long_value), -ENOBUFS);
        assert_int_equal(strlen(l.text), PROM_LABELS_MAX - 1); /* filled, and still one well-formed set */
        assert_int_equal(strncmp(l.text, "a=\"1\",model=\"xxx", 16), 0);
        assert_int_equal(l.text[l.len - 1], '"');
        assert_int_equal(prom_labels_add(&l, "more", "y"), -ENOBUFS); /* no room for even more="": unchanged */
        assert_int_equal(strlen(l.text), PROM_LABELS_MAX - 1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_families_and_samples),
                cmocka_unit_test(test_histogram_buckets_are_cumulative),
                cmocka_unit_test(test_float_spelling),
                cmocka_unit_test(test_escape_label),
                cmocka_unit_test(test_labels_add),
                cmocka_unit_test(test_labels_add_cuts_a_long_value),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
