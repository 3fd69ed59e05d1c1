/* metrics: the agent's Prometheus metrics (GET /metrics): host capacity, reservations, pinning, API requests. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "pin_service.h"
#include "prom.h"

struct capacity;
struct hosttune_state;
struct inventory;
struct ledger;
struct topology;

#define METRICS_ROUTE_MAX 48     /* longest route label kept (longer ones are cut) */
#define METRICS_METHOD_MAX 8
#define METRICS_MAX_SERIES 128   /* (route, method, status) request counters; the last slot is route "other" */
#define METRICS_MAX_ROUTES 32    /* latency histograms, one per route; the last slot is route "other" */
#define METRICS_N_BUCKETS 12     /* finite histogram buckets (seconds), see metrics.c; +Inf is the count */
#define METRICS_OTHER_ROUTE "other"

struct metrics_request_series {
        char route[METRICS_ROUTE_MAX];
        char method[METRICS_METHOD_MAX];
        unsigned status;
        uint64_t count;
};

struct metrics_latency {
        char route[METRICS_ROUTE_MAX];
        uint64_t buckets[METRICS_N_BUCKETS]; /* requests that took at most bucket i's bound, not cumulative */
        uint64_t count;
        double sum_seconds;
};

/* API request counters and latency histograms. Fixed size, so that a zeroed struct is ready to use and a
 * client sending odd routes or methods cannot grow it: past the table's size requests count under the
 * route "other". Not thread-safe (the agent's event loop is single-threaded). */
struct metrics {
        size_t n_series;
        struct metrics_request_series series[METRICS_MAX_SERIES];
        size_t n_latency;
        struct metrics_latency latency[METRICS_MAX_ROUTES];
};

/* Count one API request. route is the matched route pattern of api.c (with "*" for an id segment), never
 * the raw path, so that ids do not become labels; "unmatched" for 404s. method: GET, HEAD, POST, PUT,
 * DELETE, PATCH or OPTIONS; anything else counts as "other". status: the HTTP status sent. seconds: the
 * time the handler took. */
void metrics_observe_request(struct metrics *m, const char *route, const char *method, unsigned status,
                             double seconds);

/* What a scrape shows of the agent's state, read only: the parts not loaded yet are NULL. */
struct metrics_view {
        const char *node, *region;
        const struct topology *topology;
        const struct capacity *capacity;
        const struct ledger *ledger;
        const struct inventory *inventory;
        uint64_t inventory_reads, vm_config_reads;
        const struct pin_state *pins;
        struct pin_env pin_env;
        const struct hosttune_state *tune; /* NULL: no host tuning metrics */
};

/* The Prometheus text format (version 0.0.4) of m and the agent's state: capacity and hugepages per NUMA
 * node, reservations by state, VMs, pinning counters and drift (as last looked at: no /proc read), API requests
 * and latency, build info. Parts of the agent that are not loaded yet (NULL) are left out. malloc'd; NULL when out
 * of memory. */
char *metrics_render(const struct metrics *m, const struct metrics_view *v);

#define METRICS_CONTENT_TYPE PROM_CONTENT_TYPE
