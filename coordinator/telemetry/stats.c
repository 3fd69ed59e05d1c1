/* stats: the coordinator's Prometheus metrics: counters and gauges any thread may update, rendered as text. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procself.h"
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
        [STATS_H_POD_STARTUP] = { "pods_startup_duration_seconds",
                                  "Karpenter's: the time from a pod's creation until it is Ready (pods seen Pending).",
                                  { 1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300, 600 } },
};

struct metric_doc {
        const char *name, *help, *labels; /* labels: NULL or `key="value"` */
};

static const struct metric_doc COUNTERS[STATS_N_COUNTERS] = {
        [STATS_BATCHES] = { "batches_total", "Provisioning rounds run (closed batches).", NULL },
        [STATS_CLAIMS_CREATED] = { "nodeclaims_created_total", "NodeClaims created.", NULL },
        [STATS_PODS_NOMINATED] = { "pods_nominated_total", "Nominated events sent to pods.", NULL },
        [STATS_PODS_UNPLACED] = { "pods_unplaced_events_total", "Warning events sent to pods left pending.", NULL },
        [STATS_SCHEDULER_DISAGREEMENTS] = { "scheduler_disagreements_total",
                                            "Pending pods kube-scheduler kept refusing on Nodes the simulation fit "
                                            "them on, given room of their own.", NULL },
        [STATS_LAUNCH_INITIALIZED] = { "launches_total", "NodeClaims by launch result.", "result=\"initialized\"" },
        [STATS_LAUNCH_FAILED] = { "launches_total", NULL, "result=\"failed\"" },
        [STATS_RECONCILE_OK] = { "launcher_reconciles_total", "launcher_reconcile calls by result.", "result=\"ok\"" },
        [STATS_RECONCILE_ERROR] = { "launcher_reconciles_total", NULL, "result=\"error\"" },
        [STATS_KUBE_ERRORS] = { "api_errors_total", "Failed API calls by peer.", "api=\"kubernetes\"" },
        [STATS_PVE_ERRORS] = { "api_errors_total", NULL, "api=\"proxmox\"" },
        [STATS_AGENT_ERRORS] = { "api_errors_total", NULL, "api=\"agent\"" },
        [STATS_AGENT_FALLBACKS] = { "agent_fallbacks_total",
                                    "Hosts accounted from Proxmox data because their agent did not answer.", NULL },
        [STATS_HOSTS_LEFT_OUT_UNREACHABLE] = { "hosts_left_out_total",
                                               "Hosts left out of a round's placement because their agent did not "
                                               "answer (no Proxmox-accounting fallback), by why.",
                                               "reason=\"unreachable\"" },
        [STATS_HOSTS_LEFT_OUT_UNAUTHORIZED] = { "hosts_left_out_total", NULL, "reason=\"unauthorized\"" },
        [STATS_HOSTS_LEFT_OUT_ERROR] = { "hosts_left_out_total", NULL, "reason=\"error\"" },
        [STATS_GC_RUNS] = { "garbage_collections_total", "launcher_collect_garbage calls.", NULL },
        [STATS_DISRUPTION_HOST_ROOM] = { "disruption_host_room_fetches_total",
                                         "Scale-down passes that asked the hosts for room (a decision might launch "
                                         "a replacement).", NULL },
};

static const struct metric_doc GAUGES[STATS_N_GAUGES] = {
        [STATS_PENDING_PODS] = { "pending_pods", "Pods kube-scheduler marked Unschedulable (intake candidates).",
                                 NULL },
        [STATS_UNPLACED_PODS] = { "unplaced_pods", "Pods the last round could not place.", NULL },
        [STATS_NODECLAIMS] = { "nodeclaims", "NodeClaims in the cache.", NULL },
        [STATS_LEADER] = { "leader", "1 while this replica holds the leader lease.", NULL },
        [STATS_READY] = { "ready", "1 once every informer has listed its resource.", NULL },
        [STATS_AGENTS_UNAVAILABLE] = { "agents_unavailable", "Hosts whose agent did not answer in the last round.",
                                       NULL },
};

/* Label values, by enum: a new reason is a new line here. */
static const char *const VM_CREATED[STATS_N_VM_CREATED] = {
        [STATS_VM_CREATED_PROVISIONING] = "provisioning",
        [STATS_VM_CREATED_REPLACEMENT] = "replacement",
};
static const char *const VM_DELETED[STATS_N_VM_DELETED] = {
        [STATS_VM_DELETED_LAUNCH_FAILED] = "launch_failed",
        [STATS_VM_DELETED_GARBAGE_COLLECTED] = "garbage_collected",
        [STATS_VM_DELETED_TERMINATED] = "terminated",
};
static const char *const METHODS[STATS_N_DISRUPTION_METHODS] = {
        [STATS_DISRUPTION_EMPTINESS] = "emptiness",
        [STATS_DISRUPTION_DRIFT] = "drift",
        [STATS_DISRUPTION_CONSOLIDATION] = "consolidation",
        [STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION] = "multi_node_consolidation",
        [STATS_DISRUPTION_EXPIRY] = "expiry",
        [STATS_DISRUPTION_REPAIR] = "repair",
};
const char *stats_disruption_method_name(enum stats_disruption_method m) {
        return (unsigned)m < STATS_N_DISRUPTION_METHODS ? METHODS[m] : NULL;
}

int stats_disruption_method_parse(const char *name) {
        for (int m = 0; name && m < STATS_N_DISRUPTION_METHODS; m++)
                if (strcmp(METHODS[m], name) == 0)
                        return m;
        return -1;
}

static const char *const REASONS[STATS_N_DISRUPTION_REASONS] = {
        [STATS_DISRUPTION_DELETE] = "delete",
        [STATS_DISRUPTION_REPLACE] = "replace",
        [STATS_DISRUPTION_DO_NOT_DISRUPT] = "do_not_disrupt",
        [STATS_DISRUPTION_PDB_BLOCKED] = "pdb_blocked",
        [STATS_DISRUPTION_BUDGET] = "budget",
        [STATS_DISRUPTION_CONSOLIDATE_AFTER] = "consolidate_after",
        [STATS_DISRUPTION_PENDING_PODS] = "pending_pods",
        [STATS_DISRUPTION_STALE] = "stale",
};
static const char *const EVICTIONS[STATS_N_EVICTION_RESULTS] = {
        [STATS_EVICTION_OK] = "ok",
        [STATS_EVICTION_PDB_BLOCKED] = "pdb_blocked",
        [STATS_EVICTION_ERROR] = "error",
};
static const char *const PHASES[STATS_N_PHASES] = {
        [STATS_PHASE_LAUNCHING] = "Launching",
        [STATS_PHASE_REGISTERED] = "Registered",
        [STATS_PHASE_INITIALIZED] = "Initialized",
        [STATS_PHASE_TERMINATING] = "Terminating",
};
static const char *const RESOURCES[STATS_N_RESOURCES] = { [STATS_RESOURCE_CPU] = "cpu",
                                                          [STATS_RESOURCE_MEMORY] = "memory" };

void stats_init(struct stats *s) {
        memset(s, 0, sizeof *s);
        atomic_flag_clear(&s->disrupted_lock);
}

void stats_add(struct stats *s, enum stats_counter c, uint64_t n) {
        if (s && (unsigned)c < STATS_N_COUNTERS)
                atomic_fetch_add(&s->counters[c], n);
}

void stats_set(struct stats *s, enum stats_gauge g, int64_t v) {
        if (s && (unsigned)g < STATS_N_GAUGES)
                atomic_store(&s->gauges[g], v);
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

static void disrupted_labels(const struct stats_disruption_labels *l, struct prom_labels *out) {
        *out = (struct prom_labels){ 0 };
        prom_labels_add(out, "reason", l->reason);
        prom_labels_add(out, "nodepool", l->nodepool);
        prom_labels_add(out, "capacity_type", l->capacity_type);
        prom_labels_add(out, "consolidation_policy", l->consolidation_policy);
        prom_labels_add(out, "termination_mode", l->termination_mode);
}

void stats_nodeclaim_disrupted(struct stats *s, const struct stats_disruption_labels *l, uint64_t pods) {
        struct prom_labels text;
        if (!s || !l)
                return;
        disrupted_labels(l, &text);
        while (atomic_flag_test_and_set(&s->disrupted_lock))
                ;
        size_t i = 0;
        while (i < s->n_disrupted && strcmp(s->disrupted[i].labels, text.text) != 0)
                i++;
        if (i == s->n_disrupted && i < STATS_MAX_DISRUPTED) /* beyond: not counted (a bound on the label sets) */
                snprintf(s->disrupted[s->n_disrupted++].labels, sizeof s->disrupted[i].labels, "%s", text.text);
        if (i < s->n_disrupted) {
                s->disrupted[i].claims++;
                s->disrupted[i].pods += pods;
        }
        atomic_flag_clear(&s->disrupted_lock);
}

void stats_vm_created(struct stats *s, enum stats_vm_created_reason reason) {
        if (s && (unsigned)reason < STATS_N_VM_CREATED)
                atomic_fetch_add(&s->vms_created[reason], 1);
}

void stats_vm_deleted(struct stats *s, enum stats_vm_deleted_reason reason) {
        if (s && (unsigned)reason < STATS_N_VM_DELETED)
                atomic_fetch_add(&s->vms_deleted[reason], 1);
}

void stats_disruption_decision(struct stats *s, enum stats_disruption_method m, enum stats_disruption_reason r) {
        if (s && (unsigned)m < STATS_N_DISRUPTION_METHODS && (unsigned)r < STATS_N_DISRUPTION_REASONS)
                atomic_fetch_add(&s->decisions[m][r], 1);
}

void stats_disruption_action(struct stats *s, enum stats_disruption_method m, enum stats_disruption_reason r) {
        if (s && (unsigned)m < STATS_N_DISRUPTION_METHODS && (unsigned)r < STATS_DISRUPTION_N_DISRUPTING)
                atomic_fetch_add(&s->actions[m][r], 1);
}

void stats_eviction(struct stats *s, enum stats_eviction_result result) {
        if (s && (unsigned)result < STATS_N_EVICTION_RESULTS)
                atomic_fetch_add(&s->evictions[result], 1);
}

struct stats_pool *stats_cluster_pool(struct stats_cluster *cl, const char *name) {
        for (size_t i = 0; i < cl->n; i++)
                if (strcmp(cl->pools[i].name, name) == 0)
                        return &cl->pools[i];
        if (cl->n == cl->cap) {
                size_t cap = cl->cap ? cl->cap * 2 : 8;
                struct stats_pool *pools = reallocarray(cl->pools, cap, sizeof *pools);
                if (!pools)
                        return NULL;
                cl->pools = pools;
                cl->cap = cap;
        }
        struct stats_pool *p = &cl->pools[cl->n];
        *p = (struct stats_pool){ .name = strdup(name) };
        if (!p->name)
                return NULL;
        cl->n++;
        return p;
}

void stats_cluster_done(struct stats_cluster *cl) {
        for (size_t i = 0; i < cl->n; i++)
                free(cl->pools[i].name);
        free(cl->pools);
        *cl = (struct stats_cluster){ 0 };
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
        render_watch_field(p, s, "watch_lists_total", "Full lists done (first list and relists) per resource.",
                           "counter", offsetof(struct stats_watch, lists));
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

/* A counter family with one label: one sample per value of key, zeros included, so that rate() sees them start. */
static void render_by(struct prom *p, const char *name, const char *help, const char *key,
                      const char *const *values, const atomic_uint_fast64_t *v, size_t n) {
        prom_family(p, name, "counter", help);
        for (size_t i = 0; i < n; i++) {
                struct prom_labels l = { 0 };
                prom_labels_add(&l, key, values[i]);
                prom_sample_u64(p, name, l.text, atomic_load(&v[i]));
        }
}

/* A counter family by method and reason (the first n_reasons reasons). */
static void render_disruptions(struct prom *p, const char *name, const char *help, const atomic_uint_fast64_t *v,
                               size_t n_reasons) {
        prom_family(p, name, "counter", help);
        for (size_t m = 0; m < STATS_N_DISRUPTION_METHODS; m++)
                for (size_t r = 0; r < n_reasons; r++) {
                        struct prom_labels l = { 0 };
                        prom_labels_add(&l, "method", METHODS[m]);
                        prom_labels_add(&l, "reason", REASONS[r]);
                        prom_sample_u64(p, name, l.text, atomic_load(&v[m * n_reasons + r]));
                }
}

static void render_disrupted(struct prom *p, const struct stats *s) {
        static const char *const names[2] = { "nodeclaims_disrupted_total", "pods_disruption_initiated_total" };
        static const char *const help[2] = {
                "Karpenter's: NodeClaims disrupted, by reason, nodepool, capacity_type, consolidation_policy and "
                "termination_mode.",
                "Karpenter's: the reschedulable pods (not a DaemonSet's, not mirror pods) of the NodeClaims disrupted, "
                "with nodeclaims_disrupted_total's labels.",
        };
        struct stats *w = (struct stats *)s; /* the lock only */
        struct stats_disrupted copy[STATS_MAX_DISRUPTED];
        while (atomic_flag_test_and_set(&w->disrupted_lock))
                ;
        size_t n = s->n_disrupted;
        memcpy(copy, s->disrupted, n * sizeof *copy);
        atomic_flag_clear(&w->disrupted_lock);
        for (int f = 0; f < 2; f++) {
                prom_family(p, names[f], "counter", help[f]);
                for (size_t i = 0; i < n; i++)
                        prom_sample_u64(p, names[f], copy[i].labels, f == 0 ? copy[i].claims : copy[i].pods);
        }
}

static void render_scale_down(struct prom *p, const struct stats *s) {
        render_by(p, "vms_created_total", "VMs created, by reason.", "reason", VM_CREATED, s->vms_created,
                  STATS_N_VM_CREATED);
        render_by(p, "vms_deleted_total", "VMs deleted, by reason.", "reason", VM_DELETED, s->vms_deleted,
                  STATS_N_VM_DELETED);
        render_disruptions(p, "disruption_decisions_total",
                           "Disruption decisions about a candidate node by method, and reason: delete or replace it, "
                           "or why not to disrupt it.",
                           &s->decisions[0][0], STATS_N_DISRUPTION_REASONS);
        render_disruptions(p, "disruption_actions_total",
                           "Disruption decisions carried out after their re-check, by method and reason.",
                           &s->actions[0][0], STATS_DISRUPTION_N_DISRUPTING);
        render_by(p, "evictions_total", "Eviction API requests, by result.", "result", EVICTIONS, s->evictions,
                  STATS_N_EVICTION_RESULTS);
        render_disrupted(p, s);
}

/* nodepool="..." and, when key is not NULL, key="value". */
static void pool_labels(struct prom_labels *l, const struct stats_pool *pool, const char *key, const char *value) {
        *l = (struct prom_labels){ 0 };
        prom_labels_add(l, "nodepool", pool->name);
        if (key)
                prom_labels_add(l, key, value);
}

static void render_phases(struct prom *p, const struct stats_cluster *cl) {
        prom_family(p, "nodeclaims_phase", "gauge", "NodeClaims by NodePool and phase.");
        for (size_t i = 0; i < cl->n; i++)
                for (int ph = 0; ph < STATS_N_PHASES; ph++) {
                        struct prom_labels l;
                        pool_labels(&l, &cl->pools[i], "phase", PHASES[ph]);
                        prom_sample_u64(p, "nodeclaims_phase", l.text, cl->pools[i].claims[ph]);
                }
        prom_family(p, "nodes", "gauge", "Nodes by NodePool (the pvescale.io/nodepool label).");
        for (size_t i = 0; i < cl->n; i++) {
                struct prom_labels l;
                pool_labels(&l, &cl->pools[i], NULL, NULL);
                prom_sample_u64(p, "nodes", l.text, cl->pools[i].nodes);
        }
}

/* A family by NodePool and resource_type; offset picks the member of struct stats_pool. cpu in cores. */
static void render_resources(struct prom *p, const struct stats_cluster *cl, const char *name, const char *help,
                             size_t offset) {
        prom_family(p, name, "gauge", help);
        for (size_t i = 0; i < cl->n; i++) {
                const int64_t *v = (const int64_t *)((const char *)&cl->pools[i] + offset);
                for (int r = 0; r < STATS_N_RESOURCES; r++) {
                        struct prom_labels l;
                        pool_labels(&l, &cl->pools[i], "resource_type", RESOURCES[r]);
                        prom_sample_f64(p, name, l.text, r == STATS_RESOURCE_CPU ? (double)v[r] / 1000 : (double)v[r]);
                }
        }
}

static void render_cluster(struct prom *p, const struct stats_cluster *cl) {
        render_phases(p, cl);
        render_resources(p, cl, "nodes_capacity", "The nodes' capacity by NodePool (cpu in cores, memory in bytes).",
                         offsetof(struct stats_pool, capacity));
        render_resources(p, cl, "nodes_allocatable",
                         "The nodes' allocatable by NodePool (cpu in cores, memory in bytes).",
                         offsetof(struct stats_pool, allocatable));
        render_resources(p, cl, "nodes_total_pod_requests",
                         "Requests of the pods bound to the nodes and not terminated, DaemonSet pods included, by "
                         "NodePool (cpu in cores, memory in bytes).",
                         offsetof(struct stats_pool, requested));
}

char *stats_render(const struct stats *s, const struct stats_cluster *cluster) {
        static const struct stats_cluster none = { 0 };
        struct prom p;
        if (prom_open(&p, PREFIX) < 0)
                return NULL;
        render_counters(&p, s);
        for (int h = 0; h < STATS_N_HISTOGRAMS; h++)
                render_histogram(&p, s, (enum stats_histogram_kind)h);
        render_watches(&p, s);
        render_scale_down(&p, s);
        render_cluster(&p, cluster ? cluster : &none);
        procself_render(&p, NULL);
        return prom_close(&p);
}
