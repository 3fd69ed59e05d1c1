/* stats: the coordinator's Prometheus metrics: counters and gauges any thread may update, rendered as text. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "prom.h"

enum stats_counter {
        STATS_BATCHES,            /* provisioning rounds run */
        STATS_CLAIMS_CREATED,     /* NodeClaims created */
        STATS_PODS_NOMINATED,     /* Nominated events sent */
        STATS_PODS_UNPLACED,      /* Warning events sent for pods left pending */
        STATS_SCHEDULER_DISAGREEMENTS, /* pods kube-scheduler kept refusing on Nodes the simulation fit them on */
        STATS_LAUNCH_INITIALIZED, /* claims that reached Initialized=True */
        STATS_LAUNCH_FAILED,      /* claims deleted before they were Initialized */
        STATS_RECONCILE_OK,       /* launcher_reconcile calls that returned 0 */
        STATS_RECONCILE_ERROR,    /* ... that returned an error */
        STATS_KUBE_ERRORS,        /* failed Kubernetes API calls (outside informers) */
        STATS_PVE_ERRORS,         /* failed Proxmox API calls */
        STATS_AGENT_ERRORS,       /* failed agent calls */
        STATS_AGENT_FALLBACKS,    /* hosts accounted from Proxmox data because the agent did not answer */
        STATS_HOSTS_LEFT_OUT_UNREACHABLE,  /* hosts left out of a round: the agent did not answer */
        STATS_HOSTS_LEFT_OUT_UNAUTHORIZED, /* ... it refused the token (401/403) */
        STATS_HOSTS_LEFT_OUT_ERROR,        /* ... it answered with an error */
        STATS_GC_RUNS,            /* launcher_collect_garbage calls */
        STATS_DISRUPTION_HOST_ROOM, /* scale-down passes that fetched host room (for a possible replacement) */
        STATS_N_COUNTERS,
};

enum stats_gauge {
        STATS_PENDING_PODS,  /* intake candidates in the cache */
        STATS_UNPLACED_PODS, /* pods the last round left pending */
        STATS_NODECLAIMS,    /* NodeClaims in the cache */
        STATS_LEADER,        /* 1 while this replica leads */
        STATS_READY,         /* 1 once every informer has listed */
        STATS_AGENTS_UNAVAILABLE, /* hosts whose agent did not answer in the last round */
        STATS_N_GAUGES,
};

#define STATS_MAX_WATCHES 10
#define STATS_N_BUCKETS 12

enum stats_histogram_kind {
        STATS_H_SIMULATE,    /* simulate_run per round */
        STATS_H_START,       /* a claim's first pending pod to its VM's start call */
        STATS_H_START_OWN,   /* the same minus the time spent waiting for API answers on its way */
        STATS_H_POD_STARTUP, /* Karpenter's pods_startup_duration_seconds: a pod's creation to its Ready */
        STATS_N_HISTOGRAMS,
};

/* Why a VM was created; a new reason is one more value here and its label in stats.c. */
enum stats_vm_created_reason {
        STATS_VM_CREATED_PROVISIONING, /* for pending pods (a provisioning round's claim) */
        STATS_VM_CREATED_REPLACEMENT,  /* for a disruption's replacement claim (it replaces others) */
        STATS_N_VM_CREATED,
};

/* Why a VM was deleted; likewise. */
enum stats_vm_deleted_reason {
        STATS_VM_DELETED_LAUNCH_FAILED,     /* its claim's launch failed for good */
        STATS_VM_DELETED_GARBAGE_COLLECTED, /* no claim owns it */
        STATS_VM_DELETED_TERMINATED,        /* its claim was deleted */
        STATS_N_VM_DELETED,
};

/* How the disruption controller found a candidate (Karpenter's methods). */
enum stats_disruption_method {
        STATS_DISRUPTION_EMPTINESS,
        STATS_DISRUPTION_DRIFT,
        STATS_DISRUPTION_CONSOLIDATION,            /* single node: delete, or replace by a cheaper shape */
        STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION,
        STATS_DISRUPTION_EXPIRY,
        STATS_DISRUPTION_REPAIR,
        STATS_N_DISRUPTION_METHODS,
};

/* What was decided about a candidate, and why: the first values disrupt it, the others are the reasons not to.
 * Keep the disrupting ones before STATS_DISRUPTION_N_DISRUPTING. */
enum stats_disruption_reason {
        STATS_DISRUPTION_DELETE,             /* delete the node */
        STATS_DISRUPTION_REPLACE,            /* launch a replacement, then delete the node */
        STATS_DISRUPTION_N_DISRUPTING,
        STATS_DISRUPTION_DO_NOT_DISRUPT = STATS_DISRUPTION_N_DISRUPTING, /* do-not-disrupt on a pod or the node */
        STATS_DISRUPTION_PDB_BLOCKED,        /* a PodDisruptionBudget allows no eviction */
        STATS_DISRUPTION_BUDGET,             /* the NodePool's disruption budget is used up */
        STATS_DISRUPTION_CONSOLIDATE_AFTER,  /* initialized or changed within consolidateAfter */
        STATS_DISRUPTION_PENDING_PODS,       /* pods are pending that it could take */
        STATS_DISRUPTION_STALE,              /* the re-check against fresh state no longer holds */
        STATS_N_DISRUPTION_REASONS,
};

enum stats_eviction_result {
        STATS_EVICTION_OK,          /* the Eviction API accepted it (201) */
        STATS_EVICTION_PDB_BLOCKED, /* 429: a PodDisruptionBudget forbids it now */
        STATS_EVICTION_ERROR,       /* any other failure */
        STATS_N_EVICTION_RESULTS,
};

/* A NodeClaim's phase, as Karpenter's: from status.launchStep and metadata.deletionTimestamp. */
enum stats_claim_phase {
        STATS_PHASE_LAUNCHING,   /* not yet Registered (Failed ones too, until their deletion begins) */
        STATS_PHASE_REGISTERED,  /* its Node joined, not yet Initialized */
        STATS_PHASE_INITIALIZED,
        STATS_PHASE_TERMINATING, /* deletionTimestamp set */
        STATS_N_PHASES,
};

enum stats_resource {
        STATS_RESOURCE_CPU,    /* millicores (rendered in cores) */
        STATS_RESOURCE_MEMORY, /* bytes */
        STATS_N_RESOURCES,
};

/* One NodePool's gauges, computed from the informers' cache when /metrics is read. */
struct stats_pool {
        char *name;
        uint64_t claims[STATS_N_PHASES];
        uint64_t nodes;
        int64_t capacity[STATS_N_RESOURCES], allocatable[STATS_N_RESOURCES];
        int64_t requested[STATS_N_RESOURCES]; /* the pods bound to its nodes and not terminated */
};

struct stats_cluster {
        struct stats_pool *pools; /* in the order they were added */
        size_t n, cap;
};

/* The pool of that name, added (zeroed) when missing; NULL on ENOMEM. */
struct stats_pool *stats_cluster_pool(struct stats_cluster *cl, const char *name);
void stats_cluster_done(struct stats_cluster *cl);

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

/* Karpenter's nodeclaims_disrupted_total and pods_disruption_initiated_total: one label set each
 * (stats_nodeclaim_disrupted). */
#define STATS_MAX_DISRUPTED 64
struct stats_disrupted {
        char labels[PROM_LABELS_MAX]; /* reason, nodepool, capacity_type, consolidation_policy, termination_mode */
        uint64_t claims, pods;
};

struct stats {
        atomic_uint_fast64_t counters[STATS_N_COUNTERS];
        atomic_int_fast64_t gauges[STATS_N_GAUGES];
        struct stats_watch watches[STATS_MAX_WATCHES];
        atomic_uint n_watches;
        struct stats_histogram histograms[STATS_N_HISTOGRAMS]; /* seconds */
        atomic_uint_fast64_t vms_created[STATS_N_VM_CREATED];
        atomic_uint_fast64_t vms_deleted[STATS_N_VM_DELETED];
        atomic_uint_fast64_t decisions[STATS_N_DISRUPTION_METHODS][STATS_N_DISRUPTION_REASONS];
        atomic_uint_fast64_t actions[STATS_N_DISRUPTION_METHODS][STATS_DISRUPTION_N_DISRUPTING];
        atomic_uint_fast64_t evictions[STATS_N_EVICTION_RESULTS];
        atomic_flag disrupted_lock; /* guards disrupted */
        struct stats_disrupted disrupted[STATS_MAX_DISRUPTED];
        size_t n_disrupted;
};

void stats_init(struct stats *s);
void stats_add(struct stats *s, enum stats_counter c, uint64_t n);
void stats_set(struct stats *s, enum stats_gauge g, int64_t v);
void stats_observe(struct stats *s, enum stats_histogram_kind h, double seconds);
void stats_vm_created(struct stats *s, enum stats_vm_created_reason reason);
void stats_vm_deleted(struct stats *s, enum stats_vm_deleted_reason reason);
/* A decision about a candidate: to disrupt it (delete, replace) or not, and why not. */
void stats_disruption_decision(struct stats *s, enum stats_disruption_method m, enum stats_disruption_reason r);
/* A decision to disrupt carried out after its re-check; r is delete or replace (others are ignored). */
void stats_disruption_action(struct stats *s, enum stats_disruption_method m, enum stats_disruption_reason r);
void stats_eviction(struct stats *s, enum stats_eviction_result result);
/* Karpenter's labels of one NodeClaim disrupted (snake_case, "" when none applies). */
struct stats_disruption_labels {
        const char *reason;               /* underutilized, empty, drifted, expired, unhealthy, registration_timeout */
        const char *nodepool;
        const char *capacity_type;        /* on-demand: a Proxmox VM is never reclaimed */
        const char *consolidation_policy; /* when_empty, when_empty_or_underutilized, balanced; "" but consolidation */
        const char *termination_mode;     /* graceful, eventual, forceful */
};
/* One NodeClaim disrupted, with pods its reschedulable pods (not a DaemonSet's, not mirror pods). */
void stats_nodeclaim_disrupted(struct stats *s, const struct stats_disruption_labels *l, uint64_t pods);
/* A method's name as the metrics label it ("emptiness", "multi_node_consolidation", ...); and back: -1 when name
 * is none of them. */
const char *stats_disruption_method_name(enum stats_disruption_method m);
int stats_disruption_method_parse(const char *name);
/* Register a watched resource before its informer thread starts; returns its slot (or NULL when full). */
struct stats_watch *stats_watch_add(struct stats *s, const char *resource);

/* The Prometheus text exposition (version 0.0.4), with the NodePools' gauges from cluster (NULL: none).
 * Malloc'd; NULL on ENOMEM. */
char *stats_render(const struct stats *s, const struct stats_cluster *cluster);
