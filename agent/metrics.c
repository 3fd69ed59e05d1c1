/* metrics: the agent's Prometheus metrics (GET /metrics): host capacity, reservations, pinning, API requests. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

/* Upper bounds (seconds) of the latency buckets: reads of cached documents take microseconds, placements
 * milliseconds, a pin with a busy QMP socket up to about a second. */
static const double bucket_bounds[METRICS_N_BUCKETS] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                         0.01,   0.025,   0.05,   0.1,   0.5,    2.5 };

static const char *const known_methods[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS" };

#define LABELS_MAX 512

/* ---- counting ---- */

static const char *method_label(const char *method) {
        for (size_t i = 0; method && i < sizeof known_methods / sizeof known_methods[0]; i++)
                if (strcmp(method, known_methods[i]) == 0)
                        return known_methods[i];
        return METRICS_OTHER_ROUTE;
}

/* Keep printable ASCII only (labels must be UTF-8; a route is ASCII anyway) and cut at the field size. */
static void copy_route(char *dst, const char *route) {
        size_t i = 0;
        for (; route && route[i] && i < METRICS_ROUTE_MAX - 1; i++)
                dst[i] = route[i] >= 0x20 && route[i] < 0x7f ? route[i] : '?';
        dst[i] = '\0';
        if (i == 0)
                snprintf(dst, METRICS_ROUTE_MAX, "%s", METRICS_OTHER_ROUTE);
}

static struct metrics_request_series *series_slot(struct metrics *m, const char *route, const char *method,
                                                  unsigned status) {
        for (size_t i = 0; i < m->n_series; i++) {
                struct metrics_request_series *s = &m->series[i];
                if (s->status == status && strcmp(s->route, route) == 0 && strcmp(s->method, method) == 0)
                        return s;
        }
        if (m->n_series >= METRICS_MAX_SERIES - 1 && strcmp(route, METRICS_OTHER_ROUTE) != 0)
                return series_slot(m, METRICS_OTHER_ROUTE, method, status);
        if (m->n_series >= METRICS_MAX_SERIES)
                return &m->series[METRICS_MAX_SERIES - 1]; /* "other" with another method/status: merged */
        struct metrics_request_series *s = &m->series[m->n_series++];
        snprintf(s->route, sizeof s->route, "%s", route);
        snprintf(s->method, sizeof s->method, "%s", method);
        s->status = status;
        return s;
}

static struct metrics_latency *latency_slot(struct metrics *m, const char *route) {
        for (size_t i = 0; i < m->n_latency; i++)
                if (strcmp(m->latency[i].route, route) == 0)
                        return &m->latency[i];
        if (m->n_latency >= METRICS_MAX_ROUTES - 1 && strcmp(route, METRICS_OTHER_ROUTE) != 0)
                return latency_slot(m, METRICS_OTHER_ROUTE);
        struct metrics_latency *l = &m->latency[m->n_latency++];
        snprintf(l->route, sizeof l->route, "%s", route);
        return l;
}

void metrics_observe_request(struct metrics *m, const char *route, const char *method, unsigned status,
                             double seconds) {
        char r[METRICS_ROUTE_MAX];
        copy_route(r, route);
        if (status < 100 || status > 599)
                status = 0;
        if (!(seconds >= 0)) /* also NaN */
                seconds = 0;
        series_slot(m, r, method_label(method), status)->count++;
        struct metrics_latency *l = latency_slot(m, r);
        l->count++;
        l->sum_seconds += seconds;
        for (int i = 0; i < METRICS_N_BUCKETS; i++)
                if (seconds <= bucket_bounds[i]) {
                        l->buckets[i]++;
                        break;
                }
}

/* ---- text format ---- */

int metrics_escape_label(const char *value, char *out, size_t outlen) {
        size_t n = 0;
        for (const char *p = value ? value : ""; *p; p++) {
                const char *rep = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
                size_t len = rep ? 2 : 1;
                if (n + len >= outlen) {
                        out[n] = '\0';
                        return -ENOBUFS;
                }
                memcpy(out + n, rep ? rep : p, len);
                n += len;
        }
        out[n] = '\0';
        return 0;
}

static void family(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One label pair k="v", escaped, appended to labels (comma-separated). */
static void add_label(char *labels, const char *key, const char *value) {
        char esc[LABELS_MAX / 2];
        metrics_escape_label(value, esc, sizeof esc);
        size_t n = strlen(labels);
        snprintf(labels + n, LABELS_MAX - n, "%s%s=\"%s\"", n ? "," : "", key, esc);
}

static void sample_u64(FILE *f, const char *name, const char *labels, uint64_t v) {
        fprintf(f, "%s%s%s%s %" PRIu64 "\n", name, *labels ? "{" : "", labels, *labels ? "}" : "", v);
}

static void gauge_u64(FILE *f, const char *name, const char *help, uint64_t v) {
        family(f, name, "gauge", help);
        sample_u64(f, name, "", v);
}

static void render_info(FILE *f, const struct agent *a) {
        char labels[LABELS_MAX] = "";
        family(f, "pvescale_agent_build_info", "gauge", "Build of the running agent; the value is always 1.");
        add_label(labels, "version", PVESCALE_VERSION);
        sample_u64(f, "pvescale_agent_build_info", labels, 1);
        labels[0] = '\0';
        family(f, "pvescale_agent_host_info", "gauge", "Identity of this host; the value is always 1.");
        add_label(labels, "node", a->cfg.node_name);
        add_label(labels, "region", a->cfg.region);
        add_label(labels, "cpu_model", a->topology && a->topology->cpu_model ? a->topology->cpu_model : "");
        sample_u64(f, "pvescale_agent_host_info", labels, 1);
}

static void node_label(char *labels, int id) {
        char v[16];
        snprintf(v, sizeof v, "%d", id);
        labels[0] = '\0';
        add_label(labels, "node", v);
}

static void render_capacity_nodes(FILE *f, const struct capacity *c) {
        char labels[LABELS_MAX];
        static const char *const names[] = { "pvescale_agent_numa_node_cpus_free",
                                             "pvescale_agent_numa_node_memory_free_bytes",
                                             "pvescale_agent_numa_node_memory_bytes" };
        static const char *const helps[] = {
                "CPUs of the NUMA node still free for new placements (reserved, pinned and its share of "
                "floating vCPUs taken out).",
                "Memory of the NUMA node still free for new placements (reserved, VM and reservation memory "
                "taken out).",
                "Memory of the NUMA node.",
        };
        for (int k = 0; k < 3; k++) {
                family(f, names[k], "gauge", helps[k]);
                for (size_t i = 0; i < c->n_numa; i++) {
                        const struct capacity_numa *n = &c->numa[i];
                        node_label(labels, n->id);
                        sample_u64(f, names[k], labels,
                                   k == 0 ? n->cpus_free : k == 1 ? n->memory_free_bytes : n->memory_total_bytes);
                }
        }
}

static void render_capacity(FILE *f, const struct capacity *c) {
        gauge_u64(f, "pvescale_agent_cpus_online", "Online CPUs of the host.", c->cpus_total);
        gauge_u64(f, "pvescale_agent_cpus_free", "CPUs of the host still free for new placements.", c->cpus_free);
        gauge_u64(f, "pvescale_agent_memory_free_bytes", "Memory of the host still free for new placements.",
                  c->memory_free_bytes);
        gauge_u64(f, "pvescale_agent_floating_vcpus", "vCPUs of VMs without a CPU affinity (floating).",
                  c->floating_vcpus);
        render_capacity_nodes(f, c);
}

static void render_hugepages(FILE *f, const struct topology *t) {
        static const char *const names[] = { "pvescale_agent_numa_node_hugepages_free_pages",
                                             "pvescale_agent_numa_node_hugepages_configured_pages" };
        static const char *const helps[] = { "Free hugepages of the NUMA node, by page size.",
                                             "Hugepages set aside on the NUMA node, by page size." };
        char labels[LABELS_MAX], size[32];
        for (int k = 0; k < 2; k++) {
                family(f, names[k], "gauge", helps[k]);
                for (size_t i = 0; i < t->n_numa_nodes; i++)
                        for (size_t j = 0; j < t->numa_nodes[i].n_hugepages; j++) {
                                const struct topology_hugepages *h = &t->numa_nodes[i].hugepages[j];
                                node_label(labels, t->numa_nodes[i].id);
                                snprintf(size, sizeof size, "%" PRIu64 "kB", h->page_kib);
                                add_label(labels, "page_size", size);
                                sample_u64(f, names[k], labels, k == 0 ? h->free : h->total);
                        }
        }
}

static void render_reservations(FILE *f, const struct ledger *l) {
        uint64_t bound = 0, pending = 0;
        for (size_t i = 0; i < l->n; i++)
                *(l->items[i]->vmid ? &bound : &pending) += 1;
        family(f, "pvescale_agent_reservations", "gauge",
               "Reservations by state: pending (waiting for a VM, with a TTL) or bound (tied to a VM).");
        sample_u64(f, "pvescale_agent_reservations", "state=\"pending\"", pending);
        sample_u64(f, "pvescale_agent_reservations", "state=\"bound\"", bound);
}

static void render_vms(FILE *f, const struct inventory *inv, uint64_t reads) {
        uint64_t running = 0, stopped = 0, bad = 0;
        for (size_t i = 0; i < inv->n_vms; i++) {
                *(inv->vms[i]->running ? &running : &stopped) += 1;
                bad += inv->vms[i]->n_errors > 0;
        }
        family(f, "pvescale_agent_vms", "gauge", "VMs of this host by run state (templates included).");
        sample_u64(f, "pvescale_agent_vms", "state=\"running\"", running);
        sample_u64(f, "pvescale_agent_vms", "state=\"stopped\"", stopped);
        gauge_u64(f, "pvescale_agent_vm_config_problems", "VMs whose qemu-server config has malformed lines.", bad);
        family(f, "pvescale_agent_inventory_reads_total", "counter",
               "Times the VM configs and run files were read (a burst of changes is read once).");
        sample_u64(f, "pvescale_agent_inventory_reads_total", "", reads);
}

static void render_pinning(FILE *f, const struct agent *a) {
        unsigned pinned = 0, drift = 0;
        if (a->ledger && a->inventory)
                pin_service_totals(a, &pinned, &drift);
        gauge_u64(f, "pvescale_agent_pinned_vms", "Running VMs bound to a placed reservation that the agent pins.",
                  pinned);
        gauge_u64(f, "pvescale_agent_affinity_drift_threads",
                  "QEMU threads of pinned VMs whose real CPU affinity differs from the wanted one (or is missing).",
                  drift);
        family(f, "pvescale_agent_pins_total", "counter", "Pinning runs that pinned every thread of a VM.");
        sample_u64(f, "pvescale_agent_pins_total", "", a->pins.pins_ok);
        family(f, "pvescale_agent_pin_failures_total", "counter", "Pinning runs with failed threads or errors.");
        sample_u64(f, "pvescale_agent_pin_failures_total", "", a->pins.pin_failures);
}

static void render_requests(FILE *f, const struct metrics *m) {
        char labels[LABELS_MAX], status[8];
        family(f, "pvescale_agent_http_requests_total", "counter",
               "API requests by route pattern, method and status code.");
        for (size_t i = 0; i < m->n_series; i++) {
                const struct metrics_request_series *s = &m->series[i];
                labels[0] = '\0';
                snprintf(status, sizeof status, "%u", s->status);
                add_label(labels, "route", s->route);
                add_label(labels, "method", s->method);
                add_label(labels, "status", status);
                sample_u64(f, "pvescale_agent_http_requests_total", labels, s->count);
        }
}

static void render_histogram(FILE *f, const struct metrics_latency *l) {
        char labels[LABELS_MAX], route[LABELS_MAX / 2];
        uint64_t cumulative = 0;
        metrics_escape_label(l->route, route, sizeof route);
        for (int i = 0; i < METRICS_N_BUCKETS; i++) {
                cumulative += l->buckets[i];
                snprintf(labels, sizeof labels, "route=\"%s\",le=\"%g\"", route, bucket_bounds[i]);
                sample_u64(f, "pvescale_agent_http_request_duration_seconds_bucket", labels, cumulative);
        }
        snprintf(labels, sizeof labels, "route=\"%s\",le=\"+Inf\"", route);
        sample_u64(f, "pvescale_agent_http_request_duration_seconds_bucket", labels, l->count);
        fprintf(f, "pvescale_agent_http_request_duration_seconds_sum{route=\"%s\"} %.9g\n", route, l->sum_seconds);
        fprintf(f, "pvescale_agent_http_request_duration_seconds_count{route=\"%s\"} %" PRIu64 "\n", route,
                l->count);
}

static void render_latency(FILE *f, const struct metrics *m) {
        family(f, "pvescale_agent_http_request_duration_seconds", "histogram",
               "Time the agent took to handle an API request, by route pattern.");
        for (size_t i = 0; i < m->n_latency; i++)
                render_histogram(f, &m->latency[i]);
}

char *metrics_render(const struct metrics *m, const struct agent *a) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return NULL;
        render_info(f, a);
        if (a->capacity)
                render_capacity(f, a->capacity);
        if (a->topology)
                render_hugepages(f, a->topology);
        if (a->ledger)
                render_reservations(f, a->ledger);
        if (a->inventory)
                render_vms(f, a->inventory, a->inventory_reads);
        render_pinning(f, a);
        render_requests(f, m);
        render_latency(f, m);
        bool failed = ferror(f) != 0;
        if (fclose(f) != 0 || failed) {
                free(text);
                return NULL;
        }
        return text;
}
