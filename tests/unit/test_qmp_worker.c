/* Tests for agent/qmp_worker: questions never block the caller; answers arrive in order, through a readable fd. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "monotime.h"
#include "qmp_worker.h"
#include "qmpscript.h"

#define TIMEOUT_MS 300

static bool readable(int fd, int wait_ms) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, wait_ms) == 1 && (p.revents & POLLIN);
}

static void test_answer(void **state) {
        (void)state;
        struct qmp_worker *w = NULL;
        struct qmp_server s;
        qmpscript_start(&s, SCRIPT_GOOD);
        assert_int_equal(qmp_worker_start(5000, &w), 0);
        assert_int_equal(qmp_worker_ask(w, 105, 4242, s.path), 0);
        assert_true(readable(qmp_worker_fd(w), 5000));
        struct qmp_answer a;
        assert_int_equal(qmp_worker_take(w, &a), 1);
        assert_int_equal(a.vmid, 105);
        assert_int_equal(a.pid, 4242);
        assert_int_equal(a.error, 0);
        assert_int_equal(a.n, 4);
        assert_int_equal(a.tids[0], 24433);
        assert_int_equal(a.tids[3], 24436);
        free(a.tids);
        assert_int_equal(qmp_worker_take(w, &a), 0);
        assert_false(readable(qmp_worker_fd(w), 0)); /* drained */
        qmp_worker_free(w);
        assert_int_equal(qmpscript_stop(&s, false), 0);
}

/* A QEMU that never answers (another client holds its monitor): asking returns at once, nothing is readable
 * while the conversation lasts, and the answer is its timeout; the next question is answered after it. */
static void test_slow_qemu_does_not_block_the_asker(void **state) {
        (void)state;
        struct qmp_worker *w = NULL;
        struct qmp_server silent, good;
        qmpscript_start(&silent, SCRIPT_SILENT);
        qmpscript_start(&good, SCRIPT_GOOD);
        assert_int_equal(qmp_worker_start(TIMEOUT_MS, &w), 0);
        int64_t start = monotime_ms();
        assert_int_equal(qmp_worker_ask(w, 101, 1, silent.path), 0);
        assert_int_equal(qmp_worker_ask(w, 102, 2, good.path), 0);
        assert_true(monotime_ms() - start < TIMEOUT_MS / 2); /* not behind the silent QEMU */
        struct qmp_answer a;
        assert_int_equal(qmp_worker_take(w, &a), 0);
        assert_false(readable(qmp_worker_fd(w), TIMEOUT_MS / 2));
        assert_true(readable(qmp_worker_fd(w), 5000));
        assert_int_equal(qmp_worker_take(w, &a), 1);
        assert_int_equal(a.vmid, 101);
        assert_int_equal(a.error, -ETIMEDOUT);
        assert_null(a.tids);
        assert_true(monotime_ms() - start >= TIMEOUT_MS);
        assert_true(readable(qmp_worker_fd(w), 5000));
        assert_int_equal(qmp_worker_take(w, &a), 1);
        assert_int_equal(a.vmid, 102);
        assert_int_equal(a.error, 0);
        free(a.tids);
        qmp_worker_free(w);
        qmpscript_stop(&silent, true);
        assert_int_equal(qmpscript_stop(&good, false), 0);
}

static void test_missing_socket(void **state) {
        (void)state;
        struct qmp_worker *w = NULL;
        assert_int_equal(qmp_worker_start(TIMEOUT_MS, &w), 0);
        assert_int_equal(qmp_worker_ask(w, 7, 8, "/tmp/test_qmp_worker_nonexistent/7.qmp"), 0);
        assert_true(readable(qmp_worker_fd(w), 5000));
        struct qmp_answer a;
        assert_int_equal(qmp_worker_take(w, &a), 1);
        assert_int_equal(a.error, -ENOENT);
        qmp_worker_free(w);
}

/* Stopping while QEMU keeps the worker waiting takes at most the timeout, and drops what was not asked yet. */
static void test_free_while_busy(void **state) {
        (void)state;
        struct qmp_worker *w = NULL;
        struct qmp_server silent;
        qmpscript_start(&silent, SCRIPT_SILENT);
        assert_int_equal(qmp_worker_start(TIMEOUT_MS, &w), 0);
        assert_int_equal(qmp_worker_ask(w, 101, 1, silent.path), 0);
        assert_int_equal(qmp_worker_ask(w, 102, 2, silent.path), 0);
        usleep(50000);
        int64_t start = monotime_ms();
        qmp_worker_free(w);
        assert_true(monotime_ms() - start < TIMEOUT_MS + 200);
        qmpscript_stop(&silent, true);
        qmp_worker_free(NULL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_answer),
                cmocka_unit_test(test_slow_qemu_does_not_block_the_asker),
                cmocka_unit_test(test_missing_socket),
                cmocka_unit_test(test_free_while_busy),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
