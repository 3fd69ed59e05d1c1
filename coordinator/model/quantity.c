/* quantity: exact parsing and formatting of Kubernetes resource quantities ("100m", "4Gi", "1.5", "2e3"). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "quantity.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIGITS 19          /* 10^19 < 2^64: the mantissa always fits a uint64 */
#define MAX_EXPONENT_DIGITS 4  /* "1e9999" is already far out of range */

typedef unsigned __int128 u128;

struct mantissa {
        uint64_t digits;  /* significant digits, without the decimal point */
        int frac;         /* how many of them stood after the point */
        int shift;        /* integer digits dropped beyond MAX_DIGITS (a power of ten to apply) */
        bool sticky;      /* a non-zero digit beyond MAX_DIGITS was dropped */
};

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

/* Digits of one number, "12.50" -> 1250 with frac 2. Returns the position after it or NULL. */
static const char *parse_mantissa(const char *p, struct mantissa *m) {
        int significant = 0, seen = 0;
        bool dot = false;
        *m = (struct mantissa){ 0 };
        for (;; p++) {
                if (*p == '.' && !dot) {
                        dot = true;
                        continue;
                }
                if (!is_digit(*p))
                        break;
                seen++;
                if (significant == 0 && *p == '0') {
                        m->frac += dot;
                        continue;
                }
                if (significant >= MAX_DIGITS) {
                        m->shift += !dot;
                        m->sticky |= *p != '0';
                        continue;
                }
                m->digits = m->digits * 10 + (uint64_t)(*p - '0');
                significant++;
                m->frac += dot;
        }
        return seen > 0 ? p : NULL;
}

static int parse_exponent(const char *p, int *ret_exp10) {
        bool neg = false;
        int v = 0, n = 0;
        if (*p == '+' || *p == '-')
                neg = *p++ == '-';
        for (; is_digit(*p); p++, n++) {
                if (n >= MAX_EXPONENT_DIGITS)
                        return -ERANGE;
                v = v * 10 + (*p - '0');
        }
        if (n == 0 || *p)
                return -EINVAL;
        *ret_exp10 = neg ? -v : v;
        return 0;
}

struct suffix {
        const char *text;
        int exp10, exp2;
};

static const struct suffix SUFFIXES[] = {
        { "", 0, 0 },    { "n", -9, 0 },  { "u", -6, 0 },  { "m", -3, 0 },  { "k", 3, 0 },
        { "M", 6, 0 },   { "G", 9, 0 },   { "T", 12, 0 },  { "P", 15, 0 },  { "E", 18, 0 },
        { "Ki", 0, 10 }, { "Mi", 0, 20 }, { "Gi", 0, 30 }, { "Ti", 0, 40 }, { "Pi", 0, 50 },
        { "Ei", 0, 60 },
};

static int parse_suffix(const char *p, int *ret_exp10, int *ret_exp2) {
        for (size_t i = 0; i < sizeof SUFFIXES / sizeof SUFFIXES[0]; i++)
                if (strcmp(p, SUFFIXES[i].text) == 0) {
                        *ret_exp10 = SUFFIXES[i].exp10;
                        *ret_exp2 = SUFFIXES[i].exp2;
                        return 0;
                }
        if (p[0] != 'e' && p[0] != 'E')
                return -EINVAL;
        *ret_exp2 = 0;
        return parse_exponent(p + 1, ret_exp10);
}

/* ceil(v * 10^exp10) for v < 2^124, or -ERANGE when the result exceeds INT64_MAX. */
static int scale_up(u128 v, int exp10, bool sticky, int64_t *ret) {
        bool inexact = sticky;
        for (; exp10 > 0; exp10--) {
                if (v > (u128)INT64_MAX)
                        return -ERANGE;
                v *= 10;
        }
        for (; exp10 < 0 && v > 0; exp10++) {
                inexact |= v % 10 != 0;
                v /= 10;
        }
        if (inexact)
                v++;
        if (v > (u128)INT64_MAX)
                return -ERANGE;
        *ret = (int64_t)v;
        return 0;
}

int quantity_parse(const char *s, enum quantity_scale scale, int64_t *ret_value) {
        struct mantissa m;
        int exp10, exp2, r;
        bool neg = false;
        int64_t v;
        if (!s)
                return -EINVAL;
        if (*s == '+' || *s == '-')
                neg = *s++ == '-';
        const char *p = parse_mantissa(s, &m);
        if (!p)
                return -EINVAL;
        r = parse_suffix(p, &exp10, &exp2);
        if (r < 0)
                return r;
        /* 10^19 * 2^60 < 2^124: the shift cannot overflow. */
        r = scale_up((u128)m.digits << exp2, exp10 + (int)scale - m.frac + m.shift, m.sticky, &v);
        if (r < 0)
                return r;
        *ret_value = neg ? -v : v;
        return 0;
}

int quantity_parse_value(const char *s, int64_t *ret_value) {
        return quantity_parse(s, QUANTITY_UNITS, ret_value);
}

char *quantity_format_milli(int64_t milli, char *buf, size_t len) {
        if (milli % 1000 == 0)
                snprintf(buf, len, "%" PRId64, milli / 1000);
        else
                snprintf(buf, len, "%" PRId64 "m", milli);
        return buf;
}

static const char *const BINARY[] = { "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei" };

char *quantity_format_bytes(int64_t bytes, char *buf, size_t len) {
        int unit = 0;
        while (unit < 6 && bytes != 0 && bytes % 1024 == 0) {
                bytes /= 1024;
                unit++;
        }
        snprintf(buf, len, "%" PRId64 "%s", bytes, BINARY[unit]);
        return buf;
}

char *quantity_format_bytes_human(int64_t bytes, char *buf, size_t len) {
        int unit = 0;
        int64_t div = 1;
        while (unit < 6 && (bytes < 0 ? -bytes : bytes) / div >= 1024) {
                div *= 1024;
                unit++;
        }
        if (bytes % div == 0) {
                snprintf(buf, len, "%" PRId64 "%s", bytes / div, BINARY[unit]);
                return buf;
        }
        int64_t tenths = (int64_t)(((u128)(bytes < 0 ? -bytes : bytes) * 10 + (u128)div - 1) / (u128)div);
        snprintf(buf, len, "%s%" PRId64 ".%" PRId64 "%s", bytes < 0 ? "-" : "", tenths / 10, tenths % 10,
                 BINARY[unit]);
        return buf;
}
