/* Tests for agent/pinning_qmp: QMP conversations with a scripted server (greeting, events, errors, timeouts). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pinning_qmp.h"
#include "qmpscript.h"

static void test_qmp_conversation(void **state) {
        (void)state;
        struct qmp_server s;
        qmpscript_start(&s, SCRIPT_GOOD);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 5000, &tids, &n), 0);
        assert_int_equal(qmpscript_stop(&s, false), 0);
        assert_int_equal(n, 4);
        assert_int_equal(tids[0], 24433);
        assert_int_equal(tids[3], 24436);
        free(tids);
}

static void test_qmp_error_reply(void **state) {
        (void)state;
        struct qmp_server s;
        qmpscript_start(&s, SCRIPT_ERROR);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 5000, &tids, &n), -EPROTO);
        assert_int_equal(qmpscript_stop(&s, false), 0);
        assert_null(tids);
}

static void test_qmp_busy_socket_times_out(void **state) {
        (void)state;
        struct qmp_server s;
        qmpscript_start(&s, SCRIPT_SILENT);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 200, &tids, &n), -ETIMEDOUT);
        qmpscript_stop(&s, true);
        assert_null(tids);
}

static void test_qmp_not_qmp(void **state) {
        (void)state;
        struct qmp_server s;
        qmpscript_start(&s, SCRIPT_NO_GREETING);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 5000, &tids, &n), -EBADMSG);
        assert_int_equal(qmpscript_stop(&s, false), 0);
}

static void test_qmp_no_socket(void **state) {
        (void)state;
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads("/tmp/test_pinning_nonexistent/1.qmp", 200, &tids, &n), -ENOENT);
        char longpath[200];
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = '\0';
        assert_int_equal(pinning_qmp_vcpu_threads(longpath, 200, &tids, &n), -ENAMETOOLONG);
        assert_null(tids);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_qmp_conversation),
                cmocka_unit_test(test_qmp_error_reply),
                cmocka_unit_test(test_qmp_busy_socket_times_out),
                cmocka_unit_test(test_qmp_not_qmp),
                cmocka_unit_test(test_qmp_no_socket),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
