/* errmsg: write a one-line error message into the caller's buffer and hand back the error code. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>

/* Format the message into err (cut to errlen, always terminated) and return r (a negative errno). */
int errmsg_set(char *err, size_t errlen, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* errmsg_set with -EINVAL: the common "bad input" case. */
int errmsg_invalid(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
