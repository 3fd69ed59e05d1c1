/* Tests for shared/fileio: atomic replacement and sealed (checksummed) state files. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "fileio.h"
#include "testutil.h"

static char dir[64];

static int setup(void **state) {
        (void)state;
        snprintf(dir, sizeof dir, "/tmp/pvescale-fileio-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        return test_rmtree(dir);
}

static void test_atomic_replace(void **state) {
        (void)state;
        char path[128], *text;
        size_t len;
        snprintf(path, sizeof path, "%s/a.json", dir);
        assert_int_equal(fileio_write_atomic(path, "one", 3, 0600), 0);
        assert_int_equal(fileio_write_atomic(path, "second", 6, 0640), 0);
        assert_int_equal(fileio_read(path, 100, &text, &len), 0);
        assert_string_equal(text, "second");
        assert_int_equal(len, 6);
        free(text);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0640);
        assert_int_equal(fileio_read(path, 3, &text, &len), -EFBIG);
}

static void test_sealed_roundtrip_and_corruption(void **state) {
        (void)state;
        char path[128], *data;
        size_t len;
        snprintf(path, sizeof path, "%s/s.state", dir);
        assert_int_equal(fileio_read_sealed(path, 1000, &data, &len), -ENOENT);
        assert_int_equal(fileio_write_sealed(path, "{\"x\":1}\n", 8, 0600), 0);
        assert_int_equal(fileio_read_sealed(path, 1000, &data, &len), 0);
        assert_string_equal(data, "{\"x\":1}\n");
        free(data);
        FILE *f = fopen(path, "r+");
        assert_non_null(f);
        fputc('[', f); /* flip the first byte: the checksum no longer matches */
        fclose(f);
        assert_int_equal(fileio_read_sealed(path, 1000, &data, &len), -EBADMSG);
        assert_int_equal(fileio_write_atomic(path, "no trailer", 10, 0600), 0);
        assert_int_equal(fileio_read_sealed(path, 1000, &data, &len), -EBADMSG);
}

static void test_read_under_root(void **state) {
        (void)state;
        char path[128], *text;
        snprintf(path, sizeof path, "%s/online", dir);
        assert_int_equal(fileio_write_atomic(path, "0-3\n", 4, 0644), 0);
        assert_int_equal(fileio_read_under(dir, "/online", &text), 0);
        assert_string_equal(text, "0-3");
        free(text);
        assert_int_equal(fileio_read_under(dir, "/missing", &text), -ENOENT);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_atomic_replace),
                cmocka_unit_test(test_sealed_roundtrip_and_corruption),
                cmocka_unit_test(test_read_under_root),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
