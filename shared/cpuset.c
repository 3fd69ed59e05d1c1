/* cpuset: growable CPU bitmaps that parse and print Linux cpulists ("0,2,4-6") and cpumasks. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "cpuset.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORD_BITS 64u

struct cpuset {
        size_t n_words;
        uint64_t *words;
};

struct cpuset *cpuset_new(void) {
        return calloc(1, sizeof(struct cpuset));
}

void cpuset_free(struct cpuset *s) {
        if (!s)
                return;
        free(s->words);
        free(s);
}

/* Make room for cpu; new words are zero. */
static int cpuset_grow(struct cpuset *s, unsigned cpu) {
        size_t need = cpu / WORD_BITS + 1;
        if (need <= s->n_words)
                return 0;
        uint64_t *w = realloc(s->words, need * sizeof(uint64_t));
        if (!w)
                return -ENOMEM;
        memset(w + s->n_words, 0, (need - s->n_words) * sizeof(uint64_t));
        s->words = w;
        s->n_words = need;
        return 0;
}

struct cpuset *cpuset_dup(const struct cpuset *s) {
        struct cpuset *d = cpuset_new();
        if (!d)
                return NULL;
        if (cpuset_copy(d, s) < 0) {
                cpuset_free(d);
                return NULL;
        }
        return d;
}

int cpuset_set(struct cpuset *s, unsigned cpu) {
        if (cpu > CPUSET_MAX_CPU)
                return -ERANGE;
        int r = cpuset_grow(s, cpu);
        if (r < 0)
                return r;
        s->words[cpu / WORD_BITS] |= UINT64_C(1) << (cpu % WORD_BITS);
        return 0;
}

void cpuset_clear(struct cpuset *s, unsigned cpu) {
        if (cpu / WORD_BITS < s->n_words)
                s->words[cpu / WORD_BITS] &= ~(UINT64_C(1) << (cpu % WORD_BITS));
}

bool cpuset_test(const struct cpuset *s, unsigned cpu) {
        if (cpu / WORD_BITS >= s->n_words)
                return false;
        return (s->words[cpu / WORD_BITS] >> (cpu % WORD_BITS)) & 1u;
}

void cpuset_zero(struct cpuset *s) {
        if (s->n_words)
                memset(s->words, 0, s->n_words * sizeof(uint64_t));
}

unsigned cpuset_count(const struct cpuset *s) {
        unsigned n = 0;
        for (size_t i = 0; i < s->n_words; i++)
                n += (unsigned)__builtin_popcountll(s->words[i]);
        return n;
}

bool cpuset_is_empty(const struct cpuset *s) {
        for (size_t i = 0; i < s->n_words; i++)
                if (s->words[i])
                        return false;
        return true;
}

static uint64_t word_at(const struct cpuset *s, size_t i) {
        return i < s->n_words ? s->words[i] : 0;
}

static size_t max_words(const struct cpuset *a, const struct cpuset *b) {
        return a->n_words > b->n_words ? a->n_words : b->n_words;
}

bool cpuset_equal(const struct cpuset *a, const struct cpuset *b) {
        for (size_t i = 0; i < max_words(a, b); i++)
                if (word_at(a, i) != word_at(b, i))
                        return false;
        return true;
}

bool cpuset_intersects(const struct cpuset *a, const struct cpuset *b) {
        for (size_t i = 0; i < a->n_words && i < b->n_words; i++)
                if (a->words[i] & b->words[i])
                        return true;
        return false;
}

bool cpuset_is_subset(const struct cpuset *sub, const struct cpuset *super) {
        for (size_t i = 0; i < sub->n_words; i++)
                if (sub->words[i] & ~word_at(super, i))
                        return false;
        return true;
}

unsigned cpuset_count_and(const struct cpuset *a, const struct cpuset *b) {
        unsigned n = 0;
        for (size_t i = 0; i < a->n_words && i < b->n_words; i++)
                n += (unsigned)__builtin_popcountll(a->words[i] & b->words[i]);
        return n;
}

int cpuset_next(const struct cpuset *s, int prev) {
        unsigned start = (unsigned)(prev + 1);
        for (size_t i = start / WORD_BITS; i < s->n_words; i++) {
                uint64_t w = s->words[i];
                if (i == start / WORD_BITS)
                        w &= ~UINT64_C(0) << (start % WORD_BITS);
                if (w)
                        return (int)(i * WORD_BITS + (unsigned)__builtin_ctzll(w));
        }
        return -1;
}

int cpuset_last(const struct cpuset *s) {
        for (size_t i = s->n_words; i > 0; i--)
                if (s->words[i - 1])
                        return (int)((i - 1) * WORD_BITS + 63u - (unsigned)__builtin_clzll(s->words[i - 1]));
        return -1;
}

int cpuset_copy(struct cpuset *dst, const struct cpuset *src) {
        if (dst == src)
                return 0;
        cpuset_zero(dst);
        return cpuset_or(dst, src);
}

int cpuset_or(struct cpuset *dst, const struct cpuset *src) {
        if (src->n_words > dst->n_words) {
                int r = cpuset_grow(dst, (unsigned)(src->n_words * WORD_BITS - 1));
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < src->n_words; i++)
                dst->words[i] |= src->words[i];
        return 0;
}

void cpuset_and(struct cpuset *dst, const struct cpuset *src) {
        for (size_t i = 0; i < dst->n_words; i++)
                dst->words[i] &= word_at(src, i);
}

void cpuset_andnot(struct cpuset *dst, const struct cpuset *src) {
        for (size_t i = 0; i < dst->n_words && i < src->n_words; i++)
                dst->words[i] &= ~src->words[i];
}

/* Read a decimal CPU number at *p; advances *p. */
static int parse_cpu_number(const char **p, unsigned *ret_cpu) {
        if (!isdigit((unsigned char)**p))
                return -EINVAL;
        unsigned long v = 0;
        while (isdigit((unsigned char)**p)) {
                v = v * 10 + (unsigned long)(**p - '0');
                if (v > CPUSET_MAX_CPU)
                        return -ERANGE;
                (*p)++;
        }
        *ret_cpu = (unsigned)v;
        return 0;
}

static int set_range(struct cpuset *s, unsigned lo, unsigned hi) {
        for (unsigned c = lo; c <= hi; c++) {
                int r = cpuset_set(s, c);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* One "a" or "a-b" item at *p. */
static int parse_item(struct cpuset *s, const char **p) {
        unsigned lo, hi;
        int r = parse_cpu_number(p, &lo);
        if (r < 0)
                return r;
        hi = lo;
        if (**p == '-') {
                (*p)++;
                r = parse_cpu_number(p, &hi);
                if (r < 0)
                        return r;
                if (hi < lo)
                        return -ERANGE;
        }
        return set_range(s, lo, hi);
}

static const char *skip_space(const char *p) {
        while (isspace((unsigned char)*p))
                p++;
        return p;
}

int cpuset_parse(const char *list, struct cpuset **ret_set) {
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        const char *p = skip_space(list);
        int r = 0;
        while (*p && r == 0) {
                r = parse_item(s, &p);
                if (r == 0 && *p == ',' && isdigit((unsigned char)p[1]))
                        p++;
                else if (r == 0 && *skip_space(p))
                        r = -EINVAL;
                else
                        p = skip_space(p);
        }
        if (r < 0) {
                cpuset_free(s);
                return r;
        }
        *ret_set = s;
        return 0;
}

char *cpuset_format(const struct cpuset *s) {
        size_t cap = 64, len = 0;
        char *out = malloc(cap);
        if (!out)
                return NULL;
        out[0] = '\0';
        for (int c = cpuset_next(s, -1); c >= 0;) {
                int end = c;
                while (cpuset_test(s, (unsigned)end + 1))
                        end++;
                char item[32];
                const char *sep = len ? "," : "";
                int n;
                if (end == c)
                        n = snprintf(item, sizeof item, "%s%d", sep, c);
                else
                        n = snprintf(item, sizeof item, "%s%d-%d", sep, c, end);
                if (len + (size_t)n + 1 > cap) {
                        cap = (len + (size_t)n + 1) * 2;
                        char *grown = realloc(out, cap);
                        if (!grown) {
                                free(out);
                                return NULL;
                        }
                        out = grown;
                }
                memcpy(out + len, item, (size_t)n + 1);
                len += (size_t)n;
                c = cpuset_next(s, end);
        }
        return out;
}
