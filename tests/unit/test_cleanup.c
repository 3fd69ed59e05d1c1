/* Tests for shared/cleanup.h: each cleanup runs on every way out of its scope, in reverse order, and TAKE_PTR /
 * TAKE_FD hand a value over so that it is not released. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cleanup.h"

enum way { WAY_EARLY, WAY_LOOP, WAY_END };

/* ---- a counted resource: its release logs its name, so order and count are visible ---- */

static char released[64];

struct token {
        char name;
};

static void token_releasep(struct token **t) {
        if (!*t)
                return;
        size_t n = strlen(released);
        released[n] = (*t)->name;
        released[n + 1] = '\0';
        free(*t);
}

static struct token *token_new(char name) {
        struct token *t = malloc(sizeof *t);
        assert_non_null(t);
        t->name = name;
        return t;
}

/* Three ways out: an early return, a return from inside a loop, and the end of the function. */
static int hold_two(enum way way) {
        _cleanup_(token_releasep) struct token *a = token_new('a');
        _cleanup_(token_releasep) struct token *b = token_new('b');
        if (way == WAY_EARLY)
                return -EINVAL;
        for (int i = 0; i < 3; i++) {
                _cleanup_(token_releasep) struct token *inner = token_new('i');
                if (way == WAY_LOOP && i == 1)
                        return -EAGAIN;
        }
        return 0;
}

static struct token *hand_over(bool keep) {
        _cleanup_(token_releasep) struct token *t = token_new('t');
        return keep ? TAKE_PTR(t) : NULL;
}

/* ---- fds and FILEs ---- */

static bool fd_open(int fd) {
        return fcntl(fd, F_GETFD) >= 0;
}

/* Opens /dev/null, reports its number, and leaves by the given way. */
static int open_and_leave(enum way way, int *ret_fd, bool keep) {
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        *ret_fd = fd;
        if (way == WAY_EARLY)
                return -EIO;
        if (keep)
                return TAKE_FD(fd);
        return 0;
}

static int fclosed; /* closes of the FILE below */

static int count_close(void *cookie) {
        (void)cookie;
        fclosed++;
        return 0;
}

static int read_and_leave(enum way way) {
        _cleanup_fclose_ FILE *f = fopencookie(NULL, "r", (cookie_io_functions_t){ .close = count_close });
        _cleanup_free_ char *buf = malloc(32); /* a leak here would fail the sanitizer build */
        assert_non_null(f);
        if (way == WAY_EARLY)
                return -ENOENT;
        return 0;
}

/* ---- jansson ---- */

static int parse_and_leave(json_t *borrowed, enum way way) {
        _cleanup_(json_decrefp) json_t *held = json_incref(borrowed);
        _cleanup_(json_decrefp) json_t *none = NULL;
        if (way == WAY_EARLY)
                return -EBADMSG;
        return 0;
}

/* ---- tests ---- */

static void test_every_return_path_releases(void **state) {
        (void)state;
        released[0] = '\0';
        assert_int_equal(hold_two(WAY_EARLY), -EINVAL);
        assert_string_equal(released, "ba"); /* reverse order of declaration */
        released[0] = '\0';
        assert_int_equal(hold_two(WAY_LOOP), -EAGAIN);
        assert_string_equal(released, "iiba"); /* the inner one per pass, then the outer ones */
        released[0] = '\0';
        assert_int_equal(hold_two(WAY_END), 0);
        assert_string_equal(released, "iiiba");
}

static void test_take_ptr_hands_over(void **state) {
        (void)state;
        released[0] = '\0';
        struct token *t = hand_over(true);
        assert_non_null(t);
        assert_string_equal(released, ""); /* not released: the caller owns it now */
        assert_int_equal(t->name, 't');
        token_releasep(&t);
        released[0] = '\0';
        assert_null(hand_over(false));
        assert_string_equal(released, "t");
        char *s = strdup("x"), *p = s;
        char *taken = TAKE_PTR(p);
        assert_null(p);
        assert_ptr_equal(taken, s);
        free(taken);
}

static void test_close_on_every_path_and_take_fd(void **state) {
        (void)state;
        int fd = -1;
        assert_int_equal(open_and_leave(WAY_EARLY, &fd, false), -EIO);
        assert_false(fd_open(fd));
        assert_int_equal(open_and_leave(WAY_END, &fd, false), 0);
        assert_false(fd_open(fd));
        int kept = open_and_leave(WAY_END, &fd, true);
        assert_int_equal(kept, fd);
        assert_true(fd_open(kept));
        close(kept);
        _cleanup_close_ int none = -1; /* -1: nothing to close, no error */
        (void)none;
}

static void test_fclose_on_every_path(void **state) {
        (void)state;
        fclosed = 0;
        assert_int_equal(read_and_leave(WAY_EARLY), -ENOENT);
        assert_int_equal(fclosed, 1);
        assert_int_equal(read_and_leave(WAY_END), 0);
        assert_int_equal(fclosed, 2);
}

static void test_cleanup_keeps_errno(void **state) {
        (void)state;
        int fd;
        errno = ENOSPC;
        open_and_leave(WAY_EARLY, &fd, false); /* close() succeeds, and must not reset errno */
        assert_int_equal(errno, ENOSPC);
}

static void test_json_decref_on_every_path(void **state) {
        (void)state;
        json_t *doc = json_object();
        assert_int_equal(parse_and_leave(doc, WAY_EARLY), -EBADMSG);
        assert_int_equal(doc->refcount, 1);
        assert_int_equal(parse_and_leave(doc, WAY_END), 0);
        assert_int_equal(doc->refcount, 1);
        json_decref(doc);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_return_path_releases),
                cmocka_unit_test(test_take_ptr_hands_over),
                cmocka_unit_test(test_close_on_every_path_and_take_fd),
                cmocka_unit_test(test_fclose_on_every_path),
                cmocka_unit_test(test_cleanup_keeps_errno),
                cmocka_unit_test(test_json_decref_on_every_path),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
