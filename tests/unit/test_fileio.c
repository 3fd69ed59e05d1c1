/* Tests for shared/fileio: atomic replacement, sealed (checksummed) state files and their rotation. */
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
        char path[128], spare[140], *data;
        size_t len;
        snprintf(path, sizeof path, "%s/s.state", dir);
        snprintf(spare, sizeof spare, "%s.spare", path);
        assert_int_equal(fileio_read_sealed(path, 1000, &data, &len), -ENOENT);
        assert_int_equal(fileio_write_sealed_rotate(path, NULL, spare, "{\"x\":1}\n", 8, 0600), 0);
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

static char *read_back(const char *path) {
        char *data;
        size_t len;
        assert_int_equal(fileio_read_sealed(path, 1 << 20, &data, &len), 0);
        return data;
}

static off_t size_of(const char *path) {
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        return st.st_size;
}

/* Rotation: each name holds its generation; a shorter state reuses the spare's size (padded with spaces), one far
 * shorter shrinks it; the mode is the one asked for. Generation n + 3 is written into generation n's file. */
static void test_rotation(void **state) {
        (void)state;
        char path[128], prev[136], spare[136], big[10000], longer[200];
        snprintf(path, sizeof path, "%s/r.state", dir);
        snprintf(prev, sizeof prev, "%s.prev", path);
        snprintf(spare, sizeof spare, "%s.spare", path);
        memset(big, 'b', sizeof big);
        memset(longer, 'l', sizeof longer);
        const struct { const char *data; size_t len; } gens[] = {
                { big, sizeof big }, { longer, sizeof longer }, { "gen3", 4 }, { "gen4", 4 }, { "gen5", 4 },
        };
        for (size_t i = 0; i < 5; i++)
                assert_int_equal(fileio_write_sealed_rotate(path, prev, spare, gens[i].data, gens[i].len, 0600), 0);
        char *cur = read_back(path), *old = read_back(prev);
        assert_int_equal(strncmp(cur, "gen5", 4), 0);
        assert_int_equal(strspn(cur + 4, " "), strlen(cur + 4)); /* only the padding follows */
        assert_string_equal(old, "gen4");
        free(cur);
        free(old);
        off_t trailer = (off_t)strlen("#sha256=\n") + 64;
        assert_int_equal(size_of(path), sizeof longer + trailer); /* gen5 in gen2's file: padded to its size */
        assert_int_equal(size_of(prev), 4 + trailer); /* gen4 in gen1's 10 KB file: far shorter, so it shrank */
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        /* A spare with another link (an operator's hard-link copy) is replaced, never written through. */
        char copy[140];
        snprintf(copy, sizeof copy, "%s.copy", path);
        assert_int_equal(link(spare, copy), 0);
        char *before = read_back(copy);
        assert_int_equal(fileio_write_sealed_rotate(path, prev, spare, "gen6", 4, 0600), 0);
        char *after = read_back(copy);
        assert_string_equal(after, before);
        free(before);
        free(after);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_atomic_replace),
                cmocka_unit_test(test_sealed_roundtrip_and_corruption),
                cmocka_unit_test(test_read_under_root),
                cmocka_unit_test(test_rotation),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
