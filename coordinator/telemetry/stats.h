/* stats: the coordinator's Prometheus metrics: counters and gauges any thread may update, rendered as text. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum stats_counter {
        STATS_BATCHES,            /* provisioning rounds run */
        STATS_CLAIMS_CREATED,     /* NodeClaims created */
        STATS_PODS_NOMINATED,     /* Nominated events sent */
        STATS_PODS_UNPLACED,      /* Warning events sent for pods left pending */
        STATS_LAUNCH_INITIALIZED, /* claims that reached Initialized=True */
        STATS_LAUNCH_FAILED,      /* claims deleted before they were Initialized */
        STATS_RECONCILE_OK,       /* launcher_reconcile calls that returned 0 */
        STATS_RECONCILE_ERROR,    /* ... that returned an error */
        STATS_KUBE_ERRORS,        /* failed Kubernetes API calls (outside informers) */
        STATS_PVE_ERRORS,         /* failed Proxmox API calls */
        STATS_AGENT_ERRORS,       /* failed agent calls */
        STATS_AGENT_FALLBACKS,    /* hosts accounted from Proxmox data because the agent did not answer */
        STATS_GC_RUNS,            /* launcher_collect_garbage calls */
        STATS_N_COUNTERS,
};

enum stats_gauge {
        STATS_PENDING_PODS,  /* intake candidates in the cache */
        STATS_UNPLACED_PODS, /* pods the last round left pending */
        STATS_NODECLAIMS,    /* NodeClaims in the cache */
        STATS_LEADER,        /* 1 while this replica leads */
        STATS_READY,         /* 1 once every informer has listed */
        STATS_N_GAUGES,
};

#define STATS_MAX_WATCHES 10
#define STATS_N_BUCKETS 12

enum stats_histogram_kind {
        STATS_H_SIMULATE,    /* simulate_run per round */
        STATS_H_START,       /* a claim's first pending pod to its VM's start call */
        STATS_H_START_OWN,   /* the same minus the time spent waiting for API answers on its way */
        STATS_N_HISTOGRAMS,
};

struct stats_histogram {
        atomic_uint_fast64_t buckets[STATS_N_BUCKETS + 1]; /* last: +Inf */
        atomic_uint_fast64_t count, sum_us;
};

/* Per watched resource, copied from its informer after each step. */
struct stats_watch {
        char resource[32];
        atomic_uint lists, relists_410, watches, resumes, failures;
        atomic_uint synced;
};

struct stats {
        atomic_uint_fast64_t counters[STATS_N_COUNTERS];
        atomic_int_fast64_t gauges[STATS_N_GAUGES];
        struct stats_watch watches[STATS_MAX_WATCHES];
        atomic_uint n_watches;
        struct stats_histogram histograms[STATS_N_HISTOGRAMS]; /* seconds */
};

void stats_init(struct stats *s);
void stats_add(struct stats *s, enum stats_counter c, uint64_t n);
void stats_set(struct stats *s, enum stats_gauge g, int64_t v);
uint64_t stats_get(const struct stats *s, enum stats_counter c);
void stats_observe(struct stats *s, enum stats_histogram_kind h, double seconds);
/* Register a watched resource before its informer thread starts; returns its slot (or NULL when full). */
struct stats_watch *stats_watch_add(struct stats *s, const char *resource);

/* The Prometheus text exposition (version 0.0.4). Malloc'd; NULL on ENOMEM. */
char *stats_render(const struct stats *s);
