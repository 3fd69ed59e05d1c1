/* controller_internal: the controller's state, shared by the controller*.c files only. They call each other one
 * way: controller.c (informers, control loop, leader election, lifecycle) uses controller_work.c (workers and the
 * launcher's environment), and both use controller_cache.c (the informers' cache). What they share is named
 * controller__name (as hwloc's module__name); names ending in _locked need c->mu held. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>

#include "agents.h"
#include "controller.h"
#include "intake.h"
#include "pve.h"
#include "monotime.h"

enum ctl_kind { K_PODS, K_NODES, K_CLAIMS, K_POOLS, K_CLASSES, K_DAEMONSETS, K_PDBS, K_N };

struct ctl_watcher {
        struct controller *ctl;
        enum ctl_kind kind;
        pthread_t thread;
        bool started;
        struct kube_client *kube;
        struct kube_informer *inf;
        struct stats_watch *sw;
};

struct ctl_item {
        char *name;          /* NodeClaim */
        int64_t due_ms;      /* monotonic */
        bool running, dirty, gone;
        unsigned failures;
};

struct ctl_agent {
        char *region, *host;
        struct agents_client *client;
};

/* A worker: a task of the launch thread while it has work (busy), with its own clients. */
struct ctl_worker {
        struct controller *ctl;
        size_t index;
        bool busy;
        struct kube_client *kube;
        struct pve_client **pve; /* per config cluster, lazily */
        struct ctl_agent *agents;
        size_t n_agents;
        json_t *held_node;       /* the last node_by_provider_id answer, kept alive for the launcher */
        int64_t next_gc_ms;
};

struct controller {
        const struct config *cfg;
        const struct kube_config *kcfg;
        struct controller_options o;
        const struct controller_launcher_ops *ops;
        struct stats *stats;
        atomic_bool stop;
        atomic_bool lease_stop; /* set once the work the lease guards has stopped: then the lease is given up */
        atomic_int_fast64_t heartbeat_ms;

        pthread_mutex_t mu; /* everything below */
        pthread_cond_t cond;       /* the control loop waits on this */
        pthread_cond_t lease_cond; /* the leader election thread waits on this */
        bool wake_loop;            /* an event changed what the control loop waits for */
        json_t *store[K_N];  /* "ns/name" or "name" → object (immutable once stored) */
        json_t *by_provider_id[K_N]; /* nodes (spec) and claims (status): providerID → store key */
        bool synced[K_N];
        json_t *candidates;  /* pod uid → pod */
        json_t *starting;    /* pod uid → true: seen Pending, not Ready yet (pods_startup_duration_seconds) */
        json_t *writing;     /* names of the claims our provisioner is creating → true, until claim_created */
        struct intake_batch batch;
        int64_t round_origin_ms; /* when the batch of the running round opened (its first pending pod) */
        struct latency *latency; /* start latency of the claims this process created */
        json_t *addresses;   /* "region/host" → /cluster/status IP */
        bool leader;
        size_t last_unplaced;
        int64_t last_round_ms;
        int64_t last_disruption_ms;
        bool usage_stale;          /* a claim or Node came, went or was Initialized: NodePool usage to update */
        int64_t last_usage_ms;

        struct ctl_watcher watchers[K_N];
        struct ctl_worker *workers;
        size_t n_workers;
        struct ctl_item *items;  /* the work queue: any idle worker takes the next due claim that is not running */
        size_t n_items, cap_items;
        struct fiber_sched *sched; /* the workers' tasks, run by the launch thread */
        pthread_t launch;
        bool launch_started;
        bool work_init;
        struct launcher *launcher;
        struct kube_client *launcher_kube; /* for launcher calls outside workers */
        /* The connections that the clients of the workers and of the claim writers share, per server */
        struct http_pool *kube_pool, *agents_pool;
        struct http_pool **pve_pools; /* per cluster of cfg */
        pthread_t loop, lease;
        bool loop_started, lease_started;
        char lease_namespace[254], identity[254];
};

/* controller_cache.c */
/* The store key of an object: "namespace/name", or "name" for cluster-scoped objects. */
void controller__store_key(const json_t *obj, char *buf, size_t len);
/* Store obj under its key, or delete it (ev KUBE_EVENT_DELETED), keeping the providerID index in step. The object
 * stored before: a new reference, NULL when none. */
json_t *controller__cache_apply_locked(struct controller *c, enum ctl_kind kind, enum kube_watch_event ev,
                                      const json_t *obj);
/* The stored node or claim (kind) with that providerID, borrowed; NULL when none. */
json_t *controller__by_provider_id_locked(struct controller *c, enum ctl_kind kind, const char *provider_id);

/* controller_work.c */
int controller__workers_new(struct controller *c);
int controller__workers_start(struct controller *c);
void controller__workers_free(struct controller *c);
void controller__enqueue_locked(struct controller *c, const json_t *claim);
void controller__forget_locked(struct controller *c, const char *name);
void controller__wake_workers_locked(struct controller *c);
bool controller__backoff_active(void *userdata, const char *nodepool, const char *host);
