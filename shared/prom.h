/* prom: the Prometheus text exposition format (0.0.4): families, samples, label sets and histograms. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define PROM_LABELS_MAX 512 /* a label set's text, escaped, without the braces */

/* A page being written: open, write families and their samples, close for the text. The stream points into
 * the struct, so it must not move while open. Writes after a failure are harmless: prom_close reports it. */
struct prom {
        FILE *f;
        char *text;
        size_t len;
        const char *prefix; /* put before every metric name ("" for none); kept by pointer */
};

/* 0, or -ENOMEM. */
int prom_open(struct prom *p, const char *prefix);
/* The page (malloc'd, the caller frees it), or NULL when a write or the close failed (out of memory). */
char *prom_close(struct prom *p);

/* "# HELP" and "# TYPE" lines of a family; type is "counter", "gauge" or "histogram". help is escaped
 * (backslash, newline). Write each family once, before its samples. */
void prom_family(struct prom *p, const char *name, const char *type, const char *help);

/* One sample line: name{labels} value. labels is NULL or "" for none, else a set as prom_labels builds it
 * (or a literal such as `state="bound"`). */
void prom_sample_u64(struct prom *p, const char *name, const char *labels, uint64_t value);
void prom_sample_i64(struct prom *p, const char *name, const char *labels, int64_t value);
/* The value as its shortest round-trip text (as the histograms' bounds and sums). */
void prom_sample_f64(struct prom *p, const char *name, const char *labels, double value);

/* A family with one unlabelled sample: the common gauge. */
void prom_gauge_u64(struct prom *p, const char *name, const char *help, uint64_t value);

/* A label set under construction; a zeroed struct is the empty set. */
struct prom_labels {
        char text[PROM_LABELS_MAX];
        size_t len;
};

/* Append key="value" with value escaped. 0, or -ENOBUFS when the value was cut to fit (as prom_escape_label cuts)
 * or, when not even key="" fits, left out (l is then unchanged). */
int prom_labels_add(struct prom_labels *l, const char *key, const char *value);

/* Escape a label value (backslash, double quote, newline) into out. 0, or -ENOBUFS when it does not fit: out is
 * then cut before the first character that did not fit (never inside an escape) and terminated. NULL is "". */
int prom_escape_label(const char *value, char *out, size_t outlen);

/* A histogram's state: per-bucket counts (NOT cumulative: the renderer adds them up), count including the
 * observations above the last bound (the +Inf bucket), and the sum of the observed values. */
struct prom_histogram {
        const double *bounds;    /* n finite upper bounds, ascending */
        const uint64_t *buckets; /* n counts: observations at most bounds[i] and above bounds[i - 1] */
        size_t n;
        uint64_t count;
        double sum;
};

/* The samples of one histogram (the family comes first, with prom_family): name_bucket{labels,le="..."} per
 * bound with cumulative counts, le="+Inf" with count, then name_sum and name_count. labels as for samples. */
void prom_histogram(struct prom *p, const char *name, const char *labels, const struct prom_histogram *h);
