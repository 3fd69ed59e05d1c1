/* Tests for shared/auth: token file rules and bearer header checks. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"

static void write_file(const char *path, const char *text, mode_t mode) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(chmod(path, mode), 0);
}

static void test_token_file_modes(void **state) {
        (void)state;
        char dir[] = "/tmp/pvescale-auth-XXXXXX", path[64];
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/token", dir);
        char *token = NULL;
        write_file(path, "  s3cret-token \n second line\n", 0600);
        assert_int_equal(auth_token_load(path, &token), 0);
        assert_string_equal(token, "s3cret-token");
        free(token);
        write_file(path, "s3cret\n", 0640);
        assert_int_equal(auth_token_load(path, &token), -EPERM);
        write_file(path, "s3cret\n", 0604);
        assert_int_equal(auth_token_load(path, &token), -EPERM);
        write_file(path, " \n", 0600);
        assert_int_equal(auth_token_load(path, &token), -EINVAL);
        unlink(path);
        assert_int_equal(auth_token_load(path, &token), -ENOENT);
        assert_int_equal(auth_token_load(dir, &token), -EPERM); /* a directory is not a token file */
        rmdir(dir);
}

static void test_bearer(void **state) {
        (void)state;
        assert_true(auth_bearer_ok("Bearer abc123", "abc123"));
        assert_true(auth_bearer_ok("bearer abc123", "abc123"));
        assert_false(auth_bearer_ok("Bearer abc124", "abc123"));
        assert_false(auth_bearer_ok("Bearer abc12", "abc123"));
        assert_false(auth_bearer_ok("Bearer abc1234", "abc123"));
        assert_false(auth_bearer_ok("Bearer ", "abc123"));
        assert_false(auth_bearer_ok("Basic abc123", "abc123"));
        assert_false(auth_bearer_ok("abc123", "abc123"));
        assert_false(auth_bearer_ok(NULL, "abc123"));
        assert_true(auth_equal("", ""));
        assert_false(auth_equal("a", ""));
        assert_false(auth_equal("", "a"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_token_file_modes),
                cmocka_unit_test(test_bearer),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
