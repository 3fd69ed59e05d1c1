/* errmsg: write a one-line error message into the caller's buffer and hand back the error code. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdarg.h>
#include <stddef.h>

/* The one "format a message and return a code" helper: every other one in the tree (a parser's fail() that
 * puts a position first, a client's last-error setter) formats through these (docs/architecture.md, "Errors,
 * logging and cleanup"). err may be NULL or errlen 0: then only r comes back. */

/* Format the message into err (cut to errlen, always terminated) and return r (a negative errno). */
int errmsg_set(char *err, size_t errlen, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* errmsg_set with -EINVAL: the common "bad input" case. */
int errmsg_invalid(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* errmsg_set taking a va_list, for helpers with their own printf-like signature. ap is consumed. */
int errmsg_vset(char *err, size_t errlen, int r, const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));

/* errmsg_vset after what err already holds (a prefix such as "line 3: " written first); nothing is added when the
 * prefix filled err. */
int errmsg_vappend(char *err, size_t errlen, int r, const char *fmt, va_list ap)
        __attribute__((format(printf, 4, 0)));
