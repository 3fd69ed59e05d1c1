/* cloudinit_iso: the NoCloud seed image ("cidata", ISO 9660 with Rock Ridge and Joliet) built with libisofs,
 * in memory or written atomically to a file. */
/* SPDX-License-Identifier: Apache-2.0 */
#define LIBISOFS_WITHOUT_LIBBURN 1
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <libisofs/libisofs.h> /* needs stdint.h and sys/types.h first */

#include "cloudinit.h"

#define ISO_BLOCK 2048
#define FILE_MODE 0644
/* The ring buffer between libisofs's writer thread and the reader holds the whole image, so the writer ends
 * without waiting for the reader: the blocks of the files plus room for the descriptors, directories and path
 * tables of a three-file image (about 35 blocks). */
#define FIFO_SPARE_BLOCKS 64
/* At most this many pauses for the writer to end; then the reader takes what there is and waits for the rest. */
#define PAUSES_MAX 50

static int iso_fail(char *err, size_t errlen, const char *what, int code) {
        if (err && errlen)
                snprintf(err, errlen, "cloud-init ISO: %s: %s", what, iso_error_to_msg(code));
        return code == (int)ISO_OUT_OF_MEM ? -ENOMEM : -EIO;
}

/* Add one file with a copy of the text. */
static int add_file(IsoImage *image, const char *name, const char *text, size_t len, char *err, size_t errlen) {
        IsoStream *stream = NULL;
        IsoFile *file = NULL;
        unsigned char *copy = malloc(len ? len : 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, text, len);
        int r = iso_memory_stream_new(copy, len, &stream);
        if (r < 0) {
                free(copy);
                return iso_fail(err, errlen, name, r);
        }
        r = iso_image_add_new_file(image, iso_image_get_root(image), name, stream, &file);
        if (r < 0) {
                iso_stream_unref(stream); /* on success the new file took our reference */
                return iso_fail(err, errlen, name, r);
        }
        iso_node_set_permissions((IsoNode *)file, FILE_MODE);
        return 0;
}

static size_t fifo_blocks(const struct cloudinit_files *files) {
        size_t blocks = FIFO_SPARE_BLOCKS;
        for (int i = 0; i < CLOUDINIT_N_FILES; i++)
                blocks += (files->len[i] + ISO_BLOCK - 1) / ISO_BLOCK;
        return blocks;
}

static int make_opts(const struct cloudinit_files *files, IsoWriteOpts **ret, char *err, size_t errlen) {
        IsoWriteOpts *opts = NULL;
        int r = iso_write_opts_new(&opts, 0);
        if (r < 0)
                return iso_fail(err, errlen, "options", r);
        iso_write_opts_set_iso_level(opts, 2);
        iso_write_opts_set_rockridge(opts, 1);
        iso_write_opts_set_joliet(opts, 1);
        iso_write_opts_set_always_gmt(opts, 1);
        iso_write_opts_set_relaxed_vol_atts(opts, 1); /* keep the volume id "cidata" lower case */
        /* owner root, files 0644 whatever the process umask and ids */
        iso_write_opts_set_replace_mode(opts, 2, 2, 2, 2);
        iso_write_opts_set_default_dir_mode(opts, 0755);
        iso_write_opts_set_default_file_mode(opts, FILE_MODE);
        iso_write_opts_set_default_uid(opts, 0);
        iso_write_opts_set_default_gid(opts, 0);
        iso_write_opts_set_fifo_size(opts, fifo_blocks(files));
        *ret = opts;
        return 0;
}

/* Drain the image generator into a malloc'ed buffer. */
static int read_image(struct burn_source *src, unsigned char **ret_image, size_t *ret_len) {
        size_t cap = (size_t)src->get_size(src), len = 0;
        unsigned char *buf = malloc(cap > 0 ? cap : ISO_BLOCK);
        int r = buf ? 0 : -ENOMEM;
        cap = cap > 0 ? cap : ISO_BLOCK;
        while (r >= 0) {
                if (len + ISO_BLOCK > cap) {
                        unsigned char *b = realloc(buf, cap * 2);
                        if (!b) {
                                r = -ENOMEM;
                                break;
                        }
                        buf = b;
                        cap *= 2;
                }
                int n = src->read_xt(src, buf + len, ISO_BLOCK);
                if (n < 0)
                        r = -EIO;
                if (n <= 0)
                        break;
                len += (size_t)n;
        }
        if (r < 0) {
                if (src->cancel)
                        src->cancel(src);
                free(buf);
                return r;
        }
        *ret_image = buf;
        *ret_len = len;
        return 0;
}

static int build(IsoImage *image, const struct cloudinit_files *files, cloudinit_pause_fn pause, void *pause_data,
                 unsigned char **ret_image, size_t *ret_len, char *err, size_t errlen) {
        IsoWriteOpts *opts = NULL;
        struct burn_source *src = NULL;
        int r = 0;
        for (int i = 0; i < CLOUDINIT_N_FILES && r >= 0; i++)
                r = add_file(image, cloudinit_file_name(i), files->text[i] ? files->text[i] : "", files->len[i],
                             err, errlen);
        if (r >= 0)
                r = make_opts(files, &opts, err, errlen);
        if (r < 0)
                return r;
        r = iso_image_create_burn_source(image, opts, &src);
        iso_write_opts_free(opts);
        if (r < 0)
                return iso_fail(err, errlen, "write", r);
        /* Reading while the writer thread runs hands every block over with a thread wake-up; after it, at once. */
        for (int i = 0; pause && i < PAUSES_MAX && iso_image_generator_is_running(image) == 1; i++)
                pause(pause_data);
        r = read_image(src, ret_image, ret_len);
        if (r == -EIO && err && errlen)
                snprintf(err, errlen, "cloud-init ISO: image generation failed");
        src->free_data(src);
        free(src);
        return r;
}

/* libisofs's process-wide state, made once and kept: iso_init and iso_finish around each image would race with
 * the images other tasks of the thread have in progress. */
static pthread_once_t iso_once = PTHREAD_ONCE_INIT;
static int iso_init_result;

static void iso_init_once(void) {
        iso_init_result = iso_init_with_flag(1); /* bit0: leave the process locale alone */
        if (iso_init_result >= 0)
                iso_set_msgs_severities("NEVER", "NEVER", "libisofs");
}

int cloudinit_iso_build(const struct cloudinit_files *files, cloudinit_pause_fn pause, void *pause_data,
                        unsigned char **ret_image, size_t *ret_len, char *err, size_t errlen) {
        IsoImage *image = NULL;
        pthread_once(&iso_once, iso_init_once);
        if (iso_init_result < 0)
                return iso_fail(err, errlen, "init", iso_init_result);
        int r = iso_image_new(CLOUDINIT_VOLUME_ID, &image);
        if (r < 0)
                r = iso_fail(err, errlen, "image", r);
        else
                r = build(image, files, pause, pause_data, ret_image, ret_len, err, errlen);
        if (image)
                iso_image_unref(image);
        return r;
}
