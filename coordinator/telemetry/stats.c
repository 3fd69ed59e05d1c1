/* stats: the coordinator's Prometheus metrics: counters and gauges any thread may update, rendered as text. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"

#define PREFIX "pvescale_coordinator_"

struct histogram_doc {
        const char *name, *help;
        double bounds[STATS_N_BUCKETS];
};

static const struct histogram_doc HISTOGRAMS[STATS_N_HISTOGRAMS] = {
        [STATS_H_SIMULATE] = { "simulate_duration_seconds", "Time spent in the scheduling simulation per round.",
                               { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5 } },
        [STATS_H_START] = { "launch_start_seconds",
                            "From the first pending pod of a NodeClaim's batch to its VM's start call.",
                            { 0.5, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 30, 60, 300 } },
        [STATS_H_START_OWN] = { "launch_start_own_seconds",
                                "launch_start_seconds minus the time spent waiting for API answers on the way.",
                                { 0.5, 1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 30, 60, 300 } },
};

struct metric_doc {
        const char *name, *help, *labels; /* labels: NULL or `key="value"` */
};

static const struct metric_doc COUNTERS[STATS_N_COUNTERS] = {
        [STATS_BATCHES] = { "batches_total", "Provisioning rounds run (closed batches).", NULL },
        [STATS_CLAIMS_CREATED] = { "nodeclaims_created_total", "NodeClaims created.", NULL },
        [STATS_PODS_NOMINATED] = { "pods_nominated_total", "Nominated events sent to pods.", NULL },
        [STATS_PODS_UNPLACED] = { "pods_unplaced_events_total", "Warning events sent to pods left pending.", NULL },
        [STATS_LAUNCH_INITIALIZED] = { "launches_total", "NodeClaims by launch result.", "result=\"initialized\"" },
        [STATS_LAUNCH_FAILED] = { "launches_total", NULL, "result=\"failed\"" },
        [STATS_RECONCILE_OK] = { "launcher_reconciles_total", "launcher_reconcile calls by result.", "result=\"ok\"" },
        [STATS_RECONCILE_ERROR] = { "launcher_reconciles_total", NULL, "result=\"error\"" },
        [STATS_KUBE_ERRORS] = { "api_errors_total", "Failed API calls by peer.", "api=\"kubernetes\"" },
        [STATS_PVE_ERRORS] = { "api_errors_total", NULL, "api=\"proxmox\"" },
        [STATS_AGENT_ERRORS] = { "api_errors_total", NULL, "api=\"agent\"" },
        [STATS_AGENT_FALLBACKS] = { "agent_fallbacks_total",
                                    "Hosts accounted from Proxmox data because their agent did not answer.", NULL },
        [STATS_GC_RUNS] = { "garbage_collections_total", "launcher_collect_garbage calls.", NULL },
};

static const struct metric_doc GAUGES[STATS_N_GAUGES] = {
        [STATS_PENDING_PODS] = { "pending_pods", "Pods kube-scheduler marked Unschedulable (intake candidates).", NULL },
        [STATS_UNPLACED_PODS] = { "unplaced_pods", "Pods the last round could not place.", NULL },
        [STATS_NODECLAIMS] = { "nodeclaims", "NodeClaims in the cache.", NULL },
        [STATS_LEADER] = { "leader", "1 while this replica holds the leader lease.", NULL },
        [STATS_READY] = { "ready", "1 once every informer has listed its resource.", NULL },
};

void stats_init(struct stats *s) {
        memset(s, 0, sizeof *s);
}

void stats_add(struct stats *s, enum stats_counter c, uint64_t n) {
        if (s && (unsigned)c < STATS_N_COUNTERS)
                atomic_fetch_add(&s->counters[c], n);
}

void stats_set(struct stats *s, enum stats_gauge g, int64_t v) {
        if (s && (unsigned)g < STATS_N_GAUGES)
                atomic_store(&s->gauges[g], v);
}

uint64_t stats_get(const struct stats *s, enum stats_counter c) {
        return (unsigned)c < STATS_N_COUNTERS ? atomic_load(&s->counters[c]) : 0;
}

void stats_observe(struct stats *s, enum stats_histogram_kind h, double seconds) {
        if (!s || (unsigned)h >= STATS_N_HISTOGRAMS)
                return;
        struct stats_histogram *hist = &s->histograms[h];
        size_t b = 0;
        while (b < STATS_N_BUCKETS && seconds > HISTOGRAMS[h].bounds[b])
                b++;
        atomic_fetch_add(&hist->buckets[b], 1);
        atomic_fetch_add(&hist->count, 1);
        atomic_fetch_add(&hist->sum_us, (uint64_t)(seconds > 0 ? seconds * 1e6 : 0));
}

struct stats_watch *stats_watch_add(struct stats *s, const char *resource) {
        unsigned i = atomic_load(&s->n_watches);
        if (i >= STATS_MAX_WATCHES)
                return NULL;
        snprintf(s->watches[i].resource, sizeof s->watches[i].resource, "%s", resource);
        atomic_store(&s->n_watches, i + 1);
        return &s->watches[i];
}

/* ---- rendering ---- */

static void render_counters(struct prom *p, const struct stats *s) {
        for (int c = 0; c < STATS_N_COUNTERS; c++) {
                if (COUNTERS[c].help) /* the first label set of a family; the others follow it */
                        prom_family(p, COUNTERS[c].name, "counter", COUNTERS[c].help);
                prom_sample_u64(p, COUNTERS[c].name, COUNTERS[c].labels, atomic_load(&s->counters[c]));
        }
        for (int g = 0; g < STATS_N_GAUGES; g++) {
                prom_family(p, GAUGES[g].name, "gauge", GAUGES[g].help);
                prom_sample_i64(p, GAUGES[g].name, NULL, atomic_load(&s->gauges[g]));
        }
}

/* Buckets read once each, the count their total: the +Inf bucket and _count agree even while threads observe. */
static void render_histogram(struct prom *p, const struct stats *s, enum stats_histogram_kind h) {
        const struct histogram_doc *d = &HISTOGRAMS[h];
        const struct stats_histogram *hist = &s->histograms[h];
        uint64_t buckets[STATS_N_BUCKETS], count = atomic_load(&hist->buckets[STATS_N_BUCKETS]);
        for (int b = 0; b < STATS_N_BUCKETS; b++)
                count += buckets[b] = atomic_load(&hist->buckets[b]);
        prom_family(p, d->name, "histogram", d->help);
        prom_histogram(p, d->name, NULL,
                       &(struct prom_histogram){ d->bounds, buckets, STATS_N_BUCKETS, count,
                                                 (double)atomic_load(&hist->sum_us) / 1e6 });
}

static void render_watch_field(struct prom *p, const struct stats *s, const char *name, const char *help,
                               const char *type, size_t offset) {
        unsigned n = atomic_load(&s->n_watches);
        prom_family(p, name, type, help);
        for (unsigned i = 0; i < n; i++) {
                const atomic_uint *v = (const atomic_uint *)((const char *)&s->watches[i] + offset);
                struct prom_labels l = { 0 };
                prom_labels_add(&l, "resource", s->watches[i].resource);
                prom_sample_u64(p, name, l.text, atomic_load(v));
        }
}

static void render_watches(struct prom *p, const struct stats *s) {
        render_watch_field(p, s, "watch_lists_total", "Full lists (first list and relists) per resource.", "counter",
                           offsetof(struct stats_watch, lists));
        render_watch_field(p, s, "watch_relists_410_total", "Relists because the resource version expired (410).",
                           "counter", offsetof(struct stats_watch, relists_410));
        render_watch_field(p, s, "watch_requests_total", "Watch requests per resource.", "counter",
                           offsetof(struct stats_watch, watches));
        render_watch_field(p, s, "watch_resumes_total", "Watches resumed from the last resource version.", "counter",
                           offsetof(struct stats_watch, resumes));
        render_watch_field(p, s, "watch_failures_total", "Failed lists or watches (each backed off).", "counter",
                           offsetof(struct stats_watch, failures));
        render_watch_field(p, s, "informer_synced", "1 once the resource has been listed.", "gauge",
                           offsetof(struct stats_watch, synced));
}

char *stats_render(const struct stats *s) {
        struct prom p;
        if (prom_open(&p, PREFIX) < 0)
                return NULL;
        render_counters(&p, s);
        for (int h = 0; h < STATS_N_HISTOGRAMS; h++)
                render_histogram(&p, s, (enum stats_histogram_kind)h);
        render_watches(&p, s);
        return prom_close(&p);
}
