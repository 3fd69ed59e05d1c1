/* fileio: whole-file reads, atomic writes (temp, fsync, rename) and checksummed ("sealed") state files. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <sys/types.h>

#define SHA256_HEX_LEN 64

/* The SHA-256 of data as 64 lower-case hex digits and a NUL. 0 or -EIO. */
int fileio_sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN + 1]);

/* Read a whole file (at most max_bytes) into a NUL-terminated buffer. Returns 0, -EFBIG, or -errno. */
int fileio_read(const char *path, size_t max_bytes, char **ret_text, size_t *ret_len);

/* The prefix to put before absolute paths below root: "" for the live system (root NULL, "" or "/"). */
const char *fileio_root_prefix(const char *root);

/* Write "<root><path>" into buf (path is absolute). 0 or -ENAMETOOLONG. */
int fileio_path_under(char *buf, size_t size, const char *root, const char *path);

/* Read "<root>/<path>" (root may be NULL or "/"), trimming a trailing newline. Same errors as fileio_read. */
int fileio_read_under(const char *root, const char *path, char **ret_text);

/* Replace path atomically: write a temp file in the same directory, fsync it, rename it over path and
 * fsync the directory. Readers see the old or the new content, never a mix. Returns 0 or -errno. */
int fileio_write_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* Replace path with data sealed, through three files that trade names and never share one: spare (created when
 * absent) is overwritten in place, its data padded with spaces to keep the file's size (so fdatasync has no
 * metadata to commit; readers must allow trailing spaces, as JSON does) and fdatasynced; then spare and path
 * exchange names (renameat2 RENAME_EXCHANGE), and when prev is set, spare (now the replaced file) and prev too;
 * then the directory is fsynced. A crash leaves path old (spare maybe torn), or path new with prev one generation
 * older than before, or path new and prev the replaced file; at no instant are two of the names one file. prev
 * NULL: prev is not touched. Where the file system cannot exchange, path is renamed over prev and spare into path:
 * a crash between those leaves path absent and prev the replaced file. A failure leaves no spare behind.
 * Returns 0 or -errno. */
int fileio_write_sealed_rotate(const char *path, const char *prev, const char *spare, const void *data,
                               size_t len, mode_t mode);

/* Read a sealed file and check its trailer. Returns 0 with the data (trailer removed), -ENOENT when
 * absent, -EBADMSG when the trailer is missing or the checksum does not match, or -errno. */
int fileio_read_sealed(const char *path, size_t max_bytes, char **ret_data, size_t *ret_len);
