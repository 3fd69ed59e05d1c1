/* errmsg: write a one-line error message into the caller's buffer and hand back the error code. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "errmsg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int errmsg_vset(char *err, size_t errlen, int r, const char *fmt, va_list ap) {
        if (err && errlen)
                vsnprintf(err, errlen, fmt, ap);
        return r;
}

int errmsg_vappend(char *err, size_t errlen, int r, const char *fmt, va_list ap) {
        size_t n = err && errlen ? strnlen(err, errlen) : 0;
        return n + 1 < errlen ? errmsg_vset(err + n, errlen - n, r, fmt, ap) : r;
}

int errmsg_set(char *err, size_t errlen, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        errmsg_vset(err, errlen, r, fmt, ap);
        va_end(ap);
        return r;
}

int errmsg_invalid(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        errmsg_vset(err, errlen, -EINVAL, fmt, ap);
        va_end(ap);
        return -EINVAL;
}
