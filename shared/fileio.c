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

/* Write data and extra into a temp file beside path, fsync it, rename it over path, then fsync the directory. */
static int write_atomic2(const char *path, const void *data, size_t len, const char *extra, mode_t mode) {
        char tmp[PATH_MAX];
        int r = write_temp(path, data, len, extra, mode, tmp);
        if (r < 0)
                return r;
        if (rename(tmp, path) < 0) {
                r = -errno;
                unlink(tmp);
                return r;
        }
        return fsync_parent_dir(path);
}

int fileio_write_atomic(const char *path, const void *data, size_t len, mode_t mode) {
        return write_atomic2(path, data, len, NULL, mode);
}

int fileio_sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN + 1]) {
        unsigned char digest[32];
        if (gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, digest) < 0)
                return -EIO;
        for (int i = 0; i < 32; i++)
                snprintf(hex + 2 * i, 3, "%02x", digest[i]);
        return 0;
}

#define TRAILER_LEN (sizeof SEAL_PREFIX - 1 + SHA256_HEX_LEN + 1)

/* The sealed bytes of data in size bytes (size >= len + TRAILER_LEN): data, spaces, then the trailer over both. */
static int seal_padded(const void *data, size_t len, size_t size, char **ret_buf) {
        _cleanup_free_ char *buf = malloc(size + 1);
        char hex[SHA256_HEX_LEN + 1];
        if (!buf)
                return -ENOMEM;
        memcpy(buf, data, len);
        memset(buf + len, ' ', size - TRAILER_LEN - len);
        int r = fileio_sha256_hex(buf, size - TRAILER_LEN, hex);
        if (r < 0)
                return r;
        snprintf(buf + size - TRAILER_LEN, TRAILER_LEN + 1, "%s%s\n", SEAL_PREFIX, hex);
        *ret_buf = TAKE_PTR(buf);
        return 0;
}

/* The size to write: the file's own when the sealed data fits in it and it is at most twice that plus 4 KiB (an
 * overwrite in place changes no metadata that fdatasync must commit), else just what is needed. */
static size_t spare_size(off_t file_size, size_t needed) {
        size_t have = file_size > 0 ? (size_t)file_size : 0;
        return have >= needed && have <= 2 * needed + 4096 ? have : needed;
}

static int pwrite_all(int fd, const char *p, size_t len) {
        for (off_t off = 0; len > 0;) {
                ssize_t n = pwrite(fd, p, len, off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                p += n;
                off += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Open spare for writing, created when absent. One that is not a plain file of one link (a hard link an
 * operator's copy made, say) is never written in place: it is removed and created afresh. */
static int open_spare(const char *spare, mode_t mode, struct stat *st) {
        for (int attempt = 0; attempt < 2; attempt++) {
                int fd = open(spare, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
                if (fd < 0)
                        return -errno;
                int r = fstat(fd, st) < 0 ? -errno : 0;
                if (r == 0 && S_ISREG(st->st_mode) && st->st_nlink == 1)
                        return fd;
                close(fd);
                if (r < 0)
                        return r;
                if (unlink(spare) < 0)
                        return -errno;
        }
        return -EEXIST;
}

/* Overwrite spare in place (created when absent) with data sealed, and fdatasync it. On failure spare is
 * removed: a half-written file is never left behind. */
static int write_spare(const char *spare, const void *data, size_t len, mode_t mode) {
        struct stat st;
        _cleanup_free_ char *buf = NULL;
        _cleanup_close_ int fd = open_spare(spare, mode, &st);
        if (fd < 0)
                return fd;
        int r = 0;
        size_t size = spare_size(st.st_size, len + TRAILER_LEN);
        if (r == 0 && (st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)
                r = -errno;
        if (r == 0)
                r = seal_padded(data, len, size, &buf);
        if (r == 0)
                r = pwrite_all(fd, buf, size);
        if (r == 0 && (off_t)size < st.st_size && ftruncate(fd, (off_t)size) < 0)
                r = -errno;
        if (r == 0 && fdatasync(fd) < 0)
                r = -errno;
        if (r < 0)
                unlink(spare);
        return r;
}

static int exchange(const char *a, const char *b) {
        return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) < 0 ? -errno : 0;
}

static bool exchange_unsupported(int err) {
        return err == -EINVAL || err == -ENOSYS || err == -EOPNOTSUPP;
}

/* Where the file system cannot exchange: path over prev (when kept), then spare into path. */
static int rotate_by_renames(const char *path, const char *prev, const char *spare) {
        int r = prev && rename(path, prev) < 0 && errno != ENOENT ? -errno : 0;
        if (r == 0 && rename(spare, path) < 0)
                r = -errno;
        return r;
}

/* spare (written) becomes path; path's file becomes prev when prev is set, and prev's file the new spare. */
static int rotate(const char *path, const char *prev, const char *spare) {
        int r = exchange(spare, path);
        if (r == -ENOENT) /* no current file: nothing to keep */
                return rename(spare, path) < 0 ? -errno : 0;
        if (exchange_unsupported(r))
                return rotate_by_renames(path, prev, spare);
        if (r < 0 || !prev)
                return r;
        if (exchange(spare, prev) < 0)
                rename(spare, prev); /* no prev yet; should that fail too, .prev stays a generation older */
        return 0; /* the new file is in place */
}

int fileio_write_sealed_rotate(const char *path, const char *prev, const char *spare, const void *data,
                               size_t len, mode_t mode) {
        int r = write_spare(spare, data, len, mode);
        if (r == 0 && (r = rotate(path, prev, spare)) < 0)
                unlink(spare);
        return r < 0 ? r : fsync_parent_dir(path);
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
            text[len - 1] != '\n' || fileio_sha256_hex(text, len - trailer_len, hex) < 0 ||
            strncmp(hex, text + len - trailer_len + strlen(SEAL_PREFIX), SHA256_HEX_LEN) != 0)
                return -EBADMSG;
        len -= trailer_len;
        text[len] = '\0';
        *ret_data = TAKE_PTR(text);
        *ret_len = len;
        return 0;
}
