/* disrupt_cron: budget schedules: 5-field cron expressions in UTC with robfig/cron's standard semantics, as
 * Karpenter reads them, and whether a budget is active. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "disrupt.h"
#include "errmsg.h"

#define MINUTE_S 60
#define HOUR_S 3600
#define DAY_S 86400

struct range {
        const char *what;
        int min, max;
        const char *const *names; /* names[i] is min + i; NULL: numbers only */
};

static const char *const MONTHS[] = { "jan", "feb", "mar", "apr", "may", "jun",
                                      "jul", "aug", "sep", "oct", "nov", "dec", NULL };
static const char *const DAYS[] = { "sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL };
static const struct range FIELDS[5] = {
        { "minute", 0, 59, NULL }, { "hour", 0, 23, NULL }, { "day of month", 1, 31, NULL },
        { "month", 1, 12, MONTHS }, { "day of week", 0, 6, DAYS },
};

static const struct {
        const char *name, *expr;
} DESCRIPTORS[] = {
        { "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
        { "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" },    { "@midnight", "0 0 * * *" },
        { "@hourly", "0 * * * *" },
};

/* A number or a name of the field, or -1. */
static int value(const struct range *r, const char *s, size_t len) {
        char *end;
        for (int i = 0; r->names && r->names[i]; i++)
                if (len == 3 && strncasecmp(s, r->names[i], 3) == 0)
                        return r->min + i;
        if (len == 0 || s[0] < '0' || s[0] > '9')
                return -1;
        long v = strtol(s, &end, 10);
        return (size_t)(end - s) == len && v >= r->min && v <= r->max ? (int)v : -1;
}

/* One comma-separated part: "*", "?", "a", "a-b", each optionally "/step". Sets bits; *star for a bare "*". */
static int part(const struct range *r, const char *s, size_t len, uint64_t *bits, bool *star) {
        const char *slash = memchr(s, '/', len), *dash;
        size_t head = slash ? (size_t)(slash - s) : len;
        int lo, hi, step = 1;
        if (slash && (step = value(&(struct range){ "", 1, 59, NULL }, slash + 1, len - head - 1)) < 0)
                return -EINVAL;
        if (head == 1 && (s[0] == '*' || s[0] == '?')) {
                lo = r->min;
                hi = r->max;
                *star = *star || step == 1;
        } else if ((dash = memchr(s, '-', head))) {
                size_t first = (size_t)(dash - s);
                lo = value(r, s, first);
                hi = value(r, dash + 1, head - first - 1);
        } else {
                lo = value(r, s, head);
                hi = slash ? r->max : lo;
        }
        if (lo < 0 || hi < 0 || lo > hi)
                return -EINVAL;
        for (int v = lo; v <= hi; v += step)
                *bits |= UINT64_C(1) << v;
        return 0;
}

static int field(const struct range *r, const char *s, size_t len, uint64_t *bits, bool *star, char *err,
                 size_t errlen) {
        const char *p = s, *end = s + len;
        while (p < end) {
                const char *comma = memchr(p, ',', (size_t)(end - p));
                size_t n = comma ? (size_t)(comma - p) : (size_t)(end - p);
                if (part(r, p, n, bits, star) < 0)
                        return errmsg_invalid(err, errlen, "%s: '%.*s' is not valid (%d-%d)", r->what, (int)len, s,
                                              r->min, r->max);
                p += n + 1;
        }
        return 0;
}

static const char *expand(const char *text) {
        for (size_t i = 0; text[0] == '@' && i < sizeof DESCRIPTORS / sizeof DESCRIPTORS[0]; i++)
                if (strcmp(text, DESCRIPTORS[i].name) == 0)
                        return DESCRIPTORS[i].expr;
        return text;
}

int disrupt_cron_parse(const char *text, struct disrupt_cron *ret, char *err, size_t errlen) {
        uint64_t bits[5] = { 0 };
        bool star[5] = { false };
        const char *p = text ? expand(text) : NULL;
        size_t n = 0;
        if (!p)
                return errmsg_invalid(err, errlen, "a cron expression is required");
        for (p += strspn(p, " \t"); *p && n < 5; p += strspn(p, " \t"), n++) {
                size_t len = strcspn(p, " \t");
                if (field(&FIELDS[n], p, len, &bits[n], &star[n], err, errlen) < 0)
                        return -EINVAL;
                p += len;
        }
        if (n != 5 || *p)
                return errmsg_invalid(err, errlen, "'%s' must have 5 fields: minute hour day-of-month month "
                                      "day-of-week", text);
        *ret = (struct disrupt_cron){ bits[0], (uint32_t)bits[1], (uint32_t)bits[2], (uint32_t)bits[3],
                                      (uint32_t)bits[4], star[2], star[4] };
        return 0;
}

/* robfig/cron: when either day field is a bare '*', both must match; else either. */
static bool day_matches(const struct disrupt_cron *c, const struct tm *tm) {
        bool dom = c->doms >> tm->tm_mday & 1, dow = c->dows >> tm->tm_wday & 1;
        return c->dom_star || c->dow_star ? dom && dow : dom || dow;
}

/* Whether the minute tm matches every field. */
static bool cron_matches(const struct disrupt_cron *c, const struct tm *tm) {
        return (c->months >> (tm->tm_mon + 1) & 1) && day_matches(c, tm) && (c->hours >> tm->tm_hour & 1) &&
               (c->minutes >> tm->tm_min & 1);
}

/* The first minute in [from_s, to_s] (from_s on a minute) that matches, skipping whole days and hours that
 * cannot; -1 when none. */
static int64_t first_hit(const struct disrupt_cron *c, int64_t from_s, int64_t to_s) {
        int64_t t = from_s;
        while (t <= to_s) {
                time_t tt = (time_t)t;
                struct tm tm;
                gmtime_r(&tt, &tm);
                if (cron_matches(c, &tm))
                        return t;
                if (!(c->months >> (tm.tm_mon + 1) & 1) || !day_matches(c, &tm))
                        t += DAY_S - (t % DAY_S);
                else if (!(c->hours >> tm.tm_hour & 1))
                        t += HOUR_S - (t % HOUR_S);
                else
                        t += MINUTE_S;
        }
        return -1;
}

bool disrupt_budget_active(const struct disrupt_budget *b, int64_t now_ms) {
        if (!b->has_schedule)
                return true;
        /* schedule.Next(now - duration): the first minute strictly after the checkpoint. */
        int64_t check_ms = now_ms - b->duration_ms;
        int64_t from_s = check_ms / 1000 / MINUTE_S * MINUTE_S + MINUTE_S;
        return first_hit(&b->schedule, from_s, now_ms / 1000) >= 0;
}
