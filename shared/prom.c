/* prom: the Prometheus text exposition format (0.0.4): families, samples, label sets and histograms. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "prom.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PROM_DOUBLE_MAX 32

int prom_open(struct prom *p, const char *prefix) {
        *p = (struct prom){ .prefix = prefix ? prefix : "" };
        p->f = open_memstream(&p->text, &p->len);
        return p->f ? 0 : -ENOMEM;
}

char *prom_close(struct prom *p) {
        bool failed = ferror(p->f) != 0;
        if (fclose(p->f) != 0 || failed) {
                free(p->text);
                p->text = NULL;
        }
        p->f = NULL;
        return p->text;
}

/* The shortest of %.15g, %.16g and %.17g that reads back as v, as Go's client prints floats ('g', -1); the
 * format's own spelling for NaN and the infinities. */
static const char *format_double(double v, char buf[PROM_DOUBLE_MAX]) {
        if (isnan(v))
                return "NaN";
        if (isinf(v))
                return v > 0 ? "+Inf" : "-Inf";
        for (int digits = 15; digits < 17; digits++) {
                snprintf(buf, PROM_DOUBLE_MAX, "%.*g", digits, v);
                if (strtod(buf, NULL) == v)
                        return buf;
        }
        snprintf(buf, PROM_DOUBLE_MAX, "%.17g", v);
        return buf;
}

void prom_family(struct prom *p, const char *name, const char *type, const char *help) {
        fprintf(p->f, "# HELP %s%s ", p->prefix, name);
        for (const char *c = help ? help : ""; *c; c++) {
                if (*c == '\\' || *c == '\n')
                        fputs(*c == '\\' ? "\\\\" : "\\n", p->f); /* HELP escapes these two, not quotes */
                else
                        fputc(*c, p->f);
        }
        fprintf(p->f, "\n# TYPE %s%s %s\n", p->prefix, name, type);
}

/* name{labels} or name, without the value. */
static void series(struct prom *p, const char *name, const char *suffix, const char *labels) {
        bool any = labels && *labels;
        fprintf(p->f, "%s%s%s%s%s%s", p->prefix, name, suffix, any ? "{" : "", any ? labels : "", any ? "}" : "");
}

void prom_sample_u64(struct prom *p, const char *name, const char *labels, uint64_t value) {
        series(p, name, "", labels);
        fprintf(p->f, " %" PRIu64 "\n", value);
}

void prom_sample_i64(struct prom *p, const char *name, const char *labels, int64_t value) {
        series(p, name, "", labels);
        fprintf(p->f, " %" PRId64 "\n", value);
}

void prom_sample_f64(struct prom *p, const char *name, const char *labels, double value) {
        char num[PROM_DOUBLE_MAX];
        series(p, name, "", labels);
        fprintf(p->f, " %s\n", format_double(value, num));
}

void prom_gauge_u64(struct prom *p, const char *name, const char *help, uint64_t value) {
        prom_family(p, name, "gauge", help);
        prom_sample_u64(p, name, NULL, value);
}

/* The two-character escape of c in a label value, or NULL when c stands for itself. */
static const char *label_escape(char c) {
        switch (c) {
        case '\\':
                return "\\\\";
        case '"':
                return "\\\"";
        case '\n':
                return "\\n";
        default:
                return NULL;
        }
}

int prom_escape_label(const char *value, char *out, size_t outlen) {
        size_t n = 0;
        for (const char *c = value ? value : ""; *c; c++) {
                const char *rep = label_escape(*c);
                size_t len = rep ? 2 : 1;
                if (n + len >= outlen) {
                        if (outlen)
                                out[n] = '\0';
                        return -ENOBUFS;
                }
                memcpy(out + n, rep ? rep : c, len);
                n += len;
        }
        if (outlen)
                out[n] = '\0';
        return outlen ? 0 : -ENOBUFS;
}

int prom_labels_add(struct prom_labels *l, const char *key, const char *value) {
        char escaped[PROM_LABELS_MAX];
        size_t overhead = (l->len ? 1 : 0) + strlen(key) + 3; /* [,]key="" */
        if (l->len + overhead >= sizeof l->text)
                return -ENOBUFS;
        int r = prom_escape_label(value, escaped, sizeof l->text - l->len - overhead);
        int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s=\"%s\"", l->len ? "," : "", key, escaped);
        l->len += n > 0 ? (size_t)n : 0;
        return r;
}

/* One bucket line; le is the bound's text. */
static void bucket(struct prom *p, const char *name, const char *labels, const char *le, uint64_t cumulative) {
        bool any = labels && *labels;
        fprintf(p->f, "%s%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", p->prefix, name, any ? labels : "", any ? "," : "",
                le, cumulative);
}

void prom_histogram(struct prom *p, const char *name, const char *labels, const struct prom_histogram *h) {
        char num[PROM_DOUBLE_MAX];
        uint64_t cumulative = 0;
        for (size_t i = 0; i < h->n; i++) {
                cumulative += h->buckets[i];
                bucket(p, name, labels, format_double(h->bounds[i], num), cumulative);
        }
        bucket(p, name, labels, "+Inf", h->count);
        series(p, name, "_sum", labels);
        fprintf(p->f, " %s\n", format_double(h->sum, num));
        series(p, name, "_count", labels);
        fprintf(p->f, " %" PRIu64 "\n", h->count);
}
