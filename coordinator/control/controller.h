/* controller: the coordinator's control loop: informers feeding a cache, intake batching, provisioning rounds,
 * a worker pool that drives the launcher, garbage collection and leader election. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "kube.h"
#include "launcher.h"
#include "stats.h"

/* The launcher as a table of functions, set up in main: the daemon runs without one (--launch=false), and the
 * launcher (coordinator/launcher.c) plugs in without the controller naming its symbols. */
struct controller_launcher_ops {
        int (*create)(const struct launcher_env *env, const struct launcher_options *opts, struct launcher **ret);
        void (*destroy)(struct launcher *l);
        int (*reconcile)(struct launcher *l, const json_t *claim, int64_t *ret_requeue_ms);
        int (*collect_garbage)(struct launcher *l, const json_t *claims);
        bool (*wrote)(struct launcher *l, const char *claim, const char *rv); /* may be NULL */
        bool (*backoff_active)(const struct launcher *l, const char *nodepool, const char *host, int64_t now_ms,
                               int64_t *ret_until_ms);
};

struct controller_options {
        bool launch;                 /* run the launcher; false: stop once NodeClaims are created */
        bool leader_elect;           /* act only while holding the Lease */
        bool disruption;             /* run the scale-down pass (with launch) */
        bool node_repair;            /* let that pass replace nodes NotReady or Unknown too long */
        int64_t disruption_interval_ms; /* the pass's period; 0 = DISRUPTION_PERIOD_MS */
        int64_t node_repair_after_ms;   /* NotReady this long is repaired; 0 = DISRUPT_REPAIR_AFTER_MS */
        int64_t replacement_timeout_ms; /* 0 = DISRUPTION_REPLACE_TIMEOUT_MS */
        unsigned workers;            /* launcher worker threads; 0 = 4 */
        const char *lease_namespace; /* NULL: POD_NAMESPACE, else the kubeconfig's namespace */
        const char *identity;        /* NULL: POD_NAME, else the host name */
        int64_t gc_interval_ms;      /* launcher_collect_garbage period; 0 = 60 s */
        int64_t resync_ms;           /* run a round again this long after the last while pods are still pending;
                                      * 0 = 10 s */
        int64_t lease_duration_ms, renew_deadline_ms, retry_period_ms; /* leader election (leader_options); 0 =
                                                                         * the LEADER_DEFAULT_* */
        struct launcher_options launcher;
};

struct controller_status {
        bool ready;    /* every informer has listed */
        bool leader;
        bool healthy;  /* the control loop went round within the last 30 s */
        size_t pending_pods, nodeclaims;
};

struct controller;

/* cfg, kube and stats are borrowed and must outlive the controller; ops may be NULL when launch is false. */
int controller_new(const struct config *cfg, const struct kube_config *kube, const struct controller_options *o,
                   const struct controller_launcher_ops *ops, struct stats *stats, struct controller **ret);
/* Start the informer, worker and control-loop threads. 0 or a negative errno (logged). */
int controller_start(struct controller *c);
/* Stop every thread (transfers are cancelled) and wait for them. Safe to call twice. */
void controller_stop(struct controller *c);
void controller_free(struct controller *c);
void controller_get_status(struct controller *c, struct controller_status *ret);
/* The NodePools' gauges from the informers' cache (copied under the lock, computed after it). 0 or -ENOMEM. */
int controller_collect_gauges(struct controller *c, struct stats_cluster *ret);
/* The same from arrays of NodePools, NodeClaims, Nodes and the Pods bound to a node and not terminated (pure): a
 * series per NodePool named by a NodePool, a claim's spec.nodePool or a node's pvescale.io/nodepool label; nodes
 * without that label, malformed nodes and pods, and pods on other nodes are left out. 0 or -ENOMEM. */
int controller_gauges(const json_t *pools, const json_t *claims, const json_t *nodes, const json_t *pods,
                      struct stats_cluster *ret);
