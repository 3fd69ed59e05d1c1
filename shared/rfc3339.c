/* rfc3339: RFC 3339 UTC times ("2026-07-01T12:00:00Z", as Kubernetes writes them) to and from ms since the epoch. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "rfc3339.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

char *rfc3339_format(int64_t ms, char *buf, size_t len) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
        return buf;
}

char *rfc3339_format_ms(int64_t ms, char *buf, size_t len) {
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        char base[32];
        gmtime_r(&t, &tm);
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf, len, "%s.%03dZ", base, (int)(ms % 1000));
        return buf;
}

int rfc3339_parse(const char *s, int64_t *ret_ms) {
        struct tm tm = { 0 };
        const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
        int64_t frac = 0, scale = 1000;
        if (!end)
                return -EINVAL;
        if (*end == '.')
                for (end++; isdigit((unsigned char)*end); end++)
                        if (scale > 1) {
                                scale /= 10;
                                frac += (*end - '0') * scale;
                        }
        if (strcmp(end, "Z") != 0)
                return -EINVAL;
        *ret_ms = (int64_t)timegm(&tm) * 1000 + frac;
        return 0;
}

int64_t rfc3339_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
