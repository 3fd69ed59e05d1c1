/* Tests for shared/procself: /proc/self figures parsed from the kernel's text, read under a root, and rendered as
 * the process_* metrics. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proctree.h"
#include "procself.h"
#include "prom.h"
#include "testutil.h"

/* A comm with spaces and parentheses; utime 250, stime 150 ticks; starttime 12345 ticks; vsize; rss 1000 pages. */
static const char STAT[] = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 150 0 0 20 0 3 0 12345 "
                           "104857600 1000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0\n";
static const char LIMITS[] = "Limit                     Soft Limit           Hard Limit           Units     \n"
                             "Max cpu time              unlimited            unlimited            seconds   \n"
                             "Max open files            1024                 524288               files     \n";
static const char PROC_STAT[] = "cpu  1 2 3 4\nintr 5\nctxt 6\nbtime 1700000000\nprocesses 7\n";

static void test_parse(void **state) {
        (void)state;
        struct procself s;
        assert_int_equal(procself_parse(STAT, LIMITS, PROC_STAT, 100, 4096, &s), 0);
        assert_true(s.cpu_seconds > 3.999 && s.cpu_seconds < 4.001);
        assert_int_equal(s.virtual_bytes, 104857600);
        assert_int_equal(s.resident_bytes, 1000 * 4096);
        assert_int_equal(s.max_fds, 1024);
        assert_true(s.start_time_seconds > 1700000123.44 && s.start_time_seconds < 1700000123.46);
        const char unlimited[] = "Max open files            unlimited            unlimited            files\n";
        assert_int_equal(procself_parse(STAT, unlimited, PROC_STAT, 100, 4096, &s), 0);
        assert_int_equal(s.max_fds, 0);
}

static void test_parse_refuses_short_texts(void **state) {
        (void)state;
        struct procself s = { .max_fds = 99 };
        assert_int_equal(procself_parse("4242 (x) S 1 2 3", LIMITS, PROC_STAT, 100, 4096, &s), -EINVAL);
        assert_int_equal(procself_parse("4242 no parenthesis", LIMITS, PROC_STAT, 100, 4096, &s), -EINVAL);
        assert_int_equal(procself_parse(STAT, "Max cpu time unlimited\n", PROC_STAT, 100, 4096, &s), -EINVAL);
        assert_int_equal(procself_parse(STAT, LIMITS, "cpu 1 2 3\n", 100, 4096, &s), -EINVAL);
        assert_int_equal(procself_parse(STAT, LIMITS, PROC_STAT, 0, 4096, &s), -EINVAL);
        assert_int_equal(s.max_fds, 99); /* untouched */
}

static void test_read_under_root(void **state) {
        (void)state;
        char *root = proctree_new();
        proctree_write(root, "/proc/self/stat", STAT);
        proctree_write(root, "/proc/self/limits", LIMITS);
        proctree_write(root, "/proc/stat", PROC_STAT);
        for (int fd = 0; fd < 5; fd++)
                proctree_write(root, "/proc/self/fd/%d", "", fd);
        struct procself s;
        assert_int_equal(procself_read(root, &s), 0);
        assert_int_equal(s.open_fds, 5);
        assert_int_equal(s.virtual_bytes, 104857600);
        assert_int_equal(s.resident_bytes, 1000 * (uint64_t)sysconf(_SC_PAGESIZE));
        proctree_write(root, "/proc/stat", "cpu 1\n"); /* no btime */
        assert_int_equal(procself_read(root, &s), -EINVAL);
        test_rmtree(root);
        free(root);
}

/* The live process: it started moments ago, holds stdin/stdout/stderr and some memory. */
static void test_read_live_and_render(void **state) {
        (void)state;
        struct procself s;
        assert_int_equal(procself_read(NULL, &s), 0);
        assert_true(s.open_fds >= 3);
        assert_true(s.resident_bytes > 0 && s.virtual_bytes >= s.resident_bytes);
        double now = (double)time(NULL);
        assert_true(s.start_time_seconds > now - 600 && s.start_time_seconds < now + 2);
        struct prom p;
        assert_int_equal(prom_open(&p, "pvescale_x_"), 0);
        prom_gauge_u64(&p, "one", "One.", 1);
        procself_render(&p, NULL);
        prom_gauge_u64(&p, "two", "Two.", 2);
        char *text = prom_close(&p);
        assert_non_null(text);
        /* No prefix on the process_* names, and the page's prefix back afterwards. */
        assert_non_null(strstr(text, "\nprocess_cpu_seconds_total "));
        assert_non_null(strstr(text, "# TYPE process_cpu_seconds_total counter\n"));
        assert_non_null(strstr(text, "\nprocess_resident_memory_bytes "));
        assert_non_null(strstr(text, "\nprocess_open_fds "));
        assert_non_null(strstr(text, "\nprocess_max_fds "));
        assert_non_null(strstr(text, "\nprocess_start_time_seconds "));
        assert_non_null(strstr(text, "\npvescale_x_two 2\n"));
        assert_null(strstr(text, "pvescale_x_process"));
        free(text);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_parse_refuses_short_texts),
                cmocka_unit_test(test_read_under_root),
                cmocka_unit_test(test_read_live_and_render),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
