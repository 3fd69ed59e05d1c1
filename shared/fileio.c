/* fileio: whole-file reads, atomic writes (temp, fsync, rename) and checksummed ("sealed") state files. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "fileio.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"

#define SEAL_PREFIX "#sha256="
#define SHA256_HEX_LEN 64

static int read_fd(int fd, size_t max_bytes, char **ret_text, size_t *ret_len) {
        size_t cap = 4096, len = 0;
        _cleanup_free_ char *buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len + 1 >= cap) {
                        char *grown = realloc(buf, cap * 2);
                        if (!grown)
                                return -ENOMEM;
                        buf = grown;
                        cap *= 2;
                }
                ssize_t n = read(fd, buf + len, cap - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len > max_bytes)
                        return -EFBIG;
        }
        buf[len] = '\0';
        if (ret_len)
                *ret_len = len;
        *ret_text = TAKE_PTR(buf);
        return 0;
}

int fileio_read(const char *path, size_t max_bytes, char **ret_text, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return read_fd(fd, max_bytes, ret_text, ret_len);
}

const char *fileio_root_prefix(const char *root) {
        return !root || !*root || strcmp(root, "/") == 0 ? "" : root;
}

int fileio_path_under(char *buf, size_t size, const char *root, const char *path) {
        int n = snprintf(buf, size, "%s%s", fileio_root_prefix(root), path);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int fileio_read_under(const char *root, const char *path, char **ret_text) {
        char full[PATH_MAX];
        int r = fileio_path_under(full, sizeof full, root, path);
        if (r < 0)
                return r;
        char *text;
        size_t len;
        r = fileio_read(full, 1 << 20, &text, &len);
        if (r < 0)
                return r;
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
                text[--len] = '\0';
        *ret_text = text;
        return 0;
}

static int write_all(int fd, const void *data, size_t len) {
        const char *p = data;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

static int fsync_parent_dir(const char *path) {
        char copy[PATH_MAX];
        snprintf(copy, sizeof copy, "%s", path);
        _cleanup_close_ int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        return fsync(dfd) < 0 ? -errno : 0;
}

/* Write data then extra (may be NULL) into a new temp file beside path (its name into tmp) and fsync it. On
 * failure the temp file is removed. */
static int write_temp(const char *path, const void *data, size_t len, const char *extra, mode_t mode,
                      char tmp[PATH_MAX]) {
        int n = snprintf(tmp, PATH_MAX, "%s.tmp.XXXXXX", path);
        if (n < 0 || n >= PATH_MAX)
                return -ENAMETOOLONG;
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = fchmod(fd, mode) < 0 ? -errno : 0;
        if (r == 0)
                r = write_all(fd, data, len);
        if (r == 0 && extra)
                r = write_all(fd, extra, strlen(extra));
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r < 0)
                unlink(tmp);
        return r;
}

static bool exchange_unsupported(int err) {
        return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP;
}

/* Put the fsynced temp file at path and the file it replaces at prev, never one file under both names: exchange
 * the two (tmp then holds the old generation), then rename tmp over prev. Without RENAME_EXCHANGE: rename path
 * over prev, then tmp into path. On failure tmp no longer exists; -errno. */
static int install_keeping(const char *tmp, const char *path, const char *prev) {
        int r = 0;
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
                if (rename(tmp, prev) < 0) /* the new file is in place; .prev stays the older generation */
                        unlink(tmp);
                return 0;
        }
        if (errno == ENOENT) /* path is gone: nothing to keep */
                r = rename(tmp, path) < 0 ? -errno : 0;
        else if (!exchange_unsupported(errno))
                r = -errno;
        else if (rename(path, prev) < 0 || rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                unlink(tmp);
        return r;
}

/* Write data and extra into a temp file beside path, fsync it, put it at path (keeping the file it replaces as
 * prev when prev is set), then fsync the directory once for all the renames. */
static int write_atomic2(const char *path, const char *prev, const void *data, size_t len, const char *extra,
                         mode_t mode) {
        char tmp[PATH_MAX];
        int r = write_temp(path, data, len, extra, mode, tmp);
        if (r < 0)
                return r;
        if (prev)
                r = install_keeping(tmp, path, prev);
        else if (rename(tmp, path) < 0) {
                r = -errno;
                unlink(tmp);
        }
        return r < 0 ? r : fsync_parent_dir(path);
}

int fileio_write_atomic(const char *path, const void *data, size_t len, mode_t mode) {
        return write_atomic2(path, NULL, data, len, NULL, mode);
}

static int sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN + 1]) {
        unsigned char digest[32];
        if (gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, digest) < 0)
                return -EIO;
        for (int i = 0; i < 32; i++)
                snprintf(hex + 2 * i, 3, "%02x", digest[i]);
        return 0;
}

int fileio_write_sealed_keep(const char *path, const char *prev, const void *data, size_t len, mode_t mode) {
        char hex[SHA256_HEX_LEN + 1];
        int r = sha256_hex(data, len, hex);
        if (r < 0)
                return r;
        char trailer[sizeof SEAL_PREFIX + SHA256_HEX_LEN + 2];
        snprintf(trailer, sizeof trailer, "%s%s\n", SEAL_PREFIX, hex);
        return write_atomic2(path, prev, data, len, trailer, mode);
}

int fileio_write_sealed(const char *path, const void *data, size_t len, mode_t mode) {
        return fileio_write_sealed_keep(path, NULL, data, len, mode);
}

int fileio_read_sealed(const char *path, size_t max_bytes, char **ret_data, size_t *ret_len) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = fileio_read(path, max_bytes, &text, &len);
        if (r < 0)
                return r;
        size_t trailer_len = strlen(SEAL_PREFIX) + SHA256_HEX_LEN + 1;
        char hex[SHA256_HEX_LEN + 1];
        if (len < trailer_len || strncmp(text + len - trailer_len, SEAL_PREFIX, strlen(SEAL_PREFIX)) != 0 ||
            text[len - 1] != '\n' || sha256_hex(text, len - trailer_len, hex) < 0 ||
            strncmp(hex, text + len - trailer_len + strlen(SEAL_PREFIX), SHA256_HEX_LEN) != 0)
                return -EBADMSG;
        len -= trailer_len;
        text[len] = '\0';
        *ret_data = TAKE_PTR(text);
        *ret_len = len;
        return 0;
}
