/* fileio: whole-file reads, atomic writes (temp, fsync, rename) and checksummed ("sealed") state files. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <sys/types.h>

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

/* Like fileio_write_atomic, but appends a trailer line "#sha256=<hex>\n" over the data. */
int fileio_write_sealed(const char *path, const void *data, size_t len, mode_t mode);

/* Like fileio_write_sealed, and when prev is set the file being replaced becomes prev, a separate file at every
 * instant: the new file, fsynced, is exchanged with path (renameat2 RENAME_EXCHANGE), the old one renamed over
 * prev, then the directory is fsynced. A crash leaves path old with prev older, or path new with prev older
 * (and the old one under the temp name), or path new with prev old. Where the file system cannot exchange, path
 * is renamed over prev and the new file into path: a crash between those leaves path absent and prev old. A
 * failure leaves no temp file. prev NULL: prev is not touched. Returns 0 or -errno. */
int fileio_write_sealed_keep(const char *path, const char *prev, const void *data, size_t len, mode_t mode);

/* Read a sealed file and check its trailer. Returns 0 with the data (trailer removed), -ENOENT when
 * absent, -EBADMSG when the trailer is missing or the checksum does not match, or -errno. */
int fileio_read_sealed(const char *path, size_t max_bytes, char **ret_data, size_t *ret_len);
