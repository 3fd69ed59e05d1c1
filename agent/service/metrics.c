/* metrics: the agent's Prometheus metrics (GET /metrics): host capacity, reservations, pinning, API requests. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "capacity.h"
#include "hosttune.h"
#include "inventory.h"
#include "ledger.h"
#include "topology.h"
#include "procself.h"
#include "prom.h"

/* Upper bounds (seconds) of the latency buckets: reads of cached documents take microseconds, placements
 * milliseconds, a pin with a busy QMP socket up to about a second. */
static const double bucket_bounds[METRICS_N_BUCKETS] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                         0.01,   0.025,   0.05,   0.1,   0.5,    2.5 };

static const char *const known_methods[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS" };

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

static void render_info(struct prom *p, const struct metrics_view *v) {
        struct prom_labels build = { 0 }, host = { 0 };
        prom_family(p, "pvescale_agent_build_info", "gauge", "Build of the running agent; the value is always 1.");
        prom_labels_add(&build, "version", PVESCALE_VERSION);
        prom_sample_u64(p, "pvescale_agent_build_info", build.text, 1);
        prom_family(p, "pvescale_agent_host_info", "gauge", "Identity of this host; the value is always 1.");
        prom_labels_add(&host, "node", v->node ? v->node : "");
        prom_labels_add(&host, "region", v->region ? v->region : "");
        prom_labels_add(&host, "cpu_model", v->topology && v->topology->cpu_model ? v->topology->cpu_model : "");
        prom_sample_u64(p, "pvescale_agent_host_info", host.text, 1);
}

static struct prom_labels node_label(int id) {
        struct prom_labels l = { 0 };
        char v[16];
        snprintf(v, sizeof v, "%d", id);
        prom_labels_add(&l, "node", v);
        return l;
}

static void render_capacity_nodes(struct prom *p, const struct capacity *c) {
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
                prom_family(p, names[k], "gauge", helps[k]);
                for (size_t i = 0; i < c->n_numa; i++) {
                        const struct capacity_numa *n = &c->numa[i];
                        const uint64_t values[3] = { n->cpus_free, n->memory_free_bytes, n->memory_total_bytes };
                        prom_sample_u64(p, names[k], node_label(n->id).text, values[k]);
                }
        }
}

static void render_capacity(struct prom *p, const struct capacity *c) {
        prom_gauge_u64(p, "pvescale_agent_cpus_online", "Online CPUs of the host.", c->cpus_total);
        prom_gauge_u64(p, "pvescale_agent_cpus_free", "CPUs of the host still free for new placements.", c->cpus_free);
        prom_gauge_u64(p, "pvescale_agent_memory_free_bytes", "Memory of the host still free for new placements.",
                       c->memory_free_bytes);
        prom_gauge_u64(p, "pvescale_agent_floating_vcpus",
                       "vCPUs of VMs without a CPU affinity and CPUs of containers without a cpuset (floating).",
                       c->floating_vcpus);
        render_capacity_nodes(p, c);
}

static void render_hugepages(struct prom *p, const struct topology *t) {
        static const char *const names[] = { "pvescale_agent_numa_node_hugepages_free_pages",
                                             "pvescale_agent_numa_node_hugepages_configured_pages" };
        static const char *const helps[] = { "Free hugepages of the NUMA node, by page size.",
                                             "Hugepages set aside on the NUMA node, by page size." };
        char size[32];
        for (int k = 0; k < 2; k++) {
                prom_family(p, names[k], "gauge", helps[k]);
                for (size_t i = 0; i < t->n_numa_nodes; i++)
                        for (size_t j = 0; j < t->numa_nodes[i].n_hugepages; j++) {
                                const struct topology_hugepages *h = &t->numa_nodes[i].hugepages[j];
                                struct prom_labels l = node_label(t->numa_nodes[i].id);
                                snprintf(size, sizeof size, "%" PRIu64 "kB", h->page_kib);
                                prom_labels_add(&l, "page_size", size);
                                prom_sample_u64(p, names[k], l.text, k == 0 ? h->free : h->total);
                        }
        }
}

static void render_reservations(struct prom *p, const struct ledger *l) {
        uint64_t bound = 0, pending = 0;
        for (size_t i = 0; i < l->n; i++)
                *(l->items[i]->vmid ? &bound : &pending) += 1;
        prom_family(p, "pvescale_agent_reservations", "gauge",
                    "Reservations by state: pending (waiting for a VM, with a TTL) or bound (tied to a VM).");
        prom_sample_u64(p, "pvescale_agent_reservations", "state=\"pending\"", pending);
        prom_sample_u64(p, "pvescale_agent_reservations", "state=\"bound\"", bound);
}

static void render_vms(struct prom *p, const struct inventory *inv, uint64_t reads, uint64_t vm_reads) {
        uint64_t running = 0, stopped = 0, bad = 0;
        for (size_t i = 0; i < inv->n_vms; i++) {
                *(inv->vms[i]->running ? &running : &stopped) += 1;
                bad += inv->vms[i]->n_errors > 0;
        }
        prom_family(p, "pvescale_agent_vms", "gauge", "VMs of this host by run state (templates included).");
        prom_sample_u64(p, "pvescale_agent_vms", "state=\"running\"", running);
        prom_sample_u64(p, "pvescale_agent_vms", "state=\"stopped\"", stopped);
        prom_gauge_u64(p, "pvescale_agent_vm_config_problems", "VMs whose qemu-server config has malformed lines.",
                       bad);
        uint64_t ct_running = 0, ct_stopped = 0, ct_bad = 0;
        for (size_t i = 0; i < inv->containers.n; i++) {
                *(inv->containers.items[i]->running ? &ct_running : &ct_stopped) += 1;
                ct_bad += inv->containers.items[i]->n_errors > 0;
        }
        prom_family(p, "pvescale_agent_containers", "gauge",
                    "LXC containers of this host by run state (templates included).");
        prom_sample_u64(p, "pvescale_agent_containers", "state=\"running\"", ct_running);
        prom_sample_u64(p, "pvescale_agent_containers", "state=\"stopped\"", ct_stopped);
        prom_gauge_u64(p, "pvescale_agent_container_config_problems",
                       "LXC containers whose config has malformed lines or cannot be read.", ct_bad);
        prom_family(p, "pvescale_agent_inventory_reads_total", "counter",
                    "Times the VM configs and run files were read (a burst of changes is read once).");
        prom_sample_u64(p, "pvescale_agent_inventory_reads_total", NULL, reads);
        prom_family(p, "pvescale_agent_vm_config_reads_total", "counter",
                    "Times one VM's config was read alone: a bind naming a VM the inventory did not know yet.");
        prom_sample_u64(p, "pvescale_agent_vm_config_reads_total", NULL, vm_reads);
}

static void render_pinning(struct prom *p, const struct metrics_view *v) {
        struct pin_totals t = { 0 };
        if (v->pins && v->ledger && v->inventory)
                pin_service_totals(v->pins, &v->pin_env, &t);
        prom_gauge_u64(p, "pvescale_agent_vms_to_pin", "Running VMs bound to a placed reservation: VMs the agent pins.",
                       t.wanted);
        prom_gauge_u64(p, "pvescale_agent_pinned_vms",
                       "Of those, VMs whose QEMU the agent pinned and whose every thread was on its CPUs when last "
                       "looked at.",
                       t.pinned);
        prom_gauge_u64(p, "pvescale_agent_affinity_drift_threads",
                       "QEMU threads of VMs to pin whose real CPU affinity differed from the wanted one (or was "
                       "missing) when last looked at: at each pinning run and repair scan (--pin-interval).",
                       t.drift);
        prom_family(p, "pvescale_agent_pins_total", "counter", "Pinning runs that pinned every thread of a VM.");
        prom_sample_u64(p, "pvescale_agent_pins_total", NULL, v->pins ? v->pins->pins_ok : 0);
        prom_family(p, "pvescale_agent_pin_failures_total", "counter", "Pinning runs with failed threads or errors.");
        prom_sample_u64(p, "pvescale_agent_pin_failures_total", NULL, v->pins ? v->pins->pin_failures : 0);
}

static void render_requests(struct prom *p, const struct metrics *m) {
        char status[8];
        prom_family(p, "pvescale_agent_http_requests_total", "counter",
                    "API requests by route pattern, method and status code.");
        for (size_t i = 0; i < m->n_series; i++) {
                const struct metrics_request_series *s = &m->series[i];
                struct prom_labels l = { 0 };
                snprintf(status, sizeof status, "%u", s->status);
                prom_labels_add(&l, "route", s->route);
                prom_labels_add(&l, "method", s->method);
                prom_labels_add(&l, "status", status);
                prom_sample_u64(p, "pvescale_agent_http_requests_total", l.text, s->count);
        }
}

static void render_latency(struct prom *p, const struct metrics *m) {
        prom_family(p, "pvescale_agent_http_request_duration_seconds", "histogram",
                    "Time the agent took to handle an API request, by route pattern.");
        for (size_t i = 0; i < m->n_latency; i++) {
                const struct metrics_latency *l = &m->latency[i];
                struct prom_labels route = { 0 };
                prom_labels_add(&route, "route", l->route);
                prom_histogram(p, "pvescale_agent_http_request_duration_seconds", route.text,
                               &(struct prom_histogram){ bucket_bounds, l->buckets, METRICS_N_BUCKETS, l->count,
                                                         l->sum_seconds });
        }
}

char *metrics_render(const struct metrics *m, const struct metrics_view *v) {
        struct prom p;
        if (prom_open(&p, "") < 0)
                return NULL;
        render_info(&p, v);
        if (v->capacity)
                render_capacity(&p, v->capacity);
        if (v->topology)
                render_hugepages(&p, v->topology);
        if (v->ledger)
                render_reservations(&p, v->ledger);
        if (v->inventory)
                render_vms(&p, v->inventory, v->inventory_reads, v->vm_config_reads);
        render_pinning(&p, v);
        if (v->tune)
                hosttune_render_metrics(&p, v->tune);
        render_requests(&p, m);
        render_latency(&p, m);
        procself_render(&p, NULL);
        return prom_close(&p);
}
