/* errmsg: write a one-line error message into the caller's buffer and hand back the error code. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "errmsg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int errmsg_set(char *err, size_t errlen, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        if (err && errlen)
                vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return r;
}

int errmsg_invalid(char *err, size_t errlen, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        if (err && errlen)
                vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return -EINVAL;
}
