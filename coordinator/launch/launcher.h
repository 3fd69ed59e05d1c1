/* launcher: turns NodeClaims into pinned VMs that join the cluster, one idempotent, resumable step at a time. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Contract between the controller (coordinator/controller.c: informers, batching, provisioning, work queue)
 * and the launcher (coordinator/launcher.c and friends). The controller creates each NodeClaim before
 * anything is created for it, then calls launcher_reconcile() whenever the claim, its Node or a requeue
 * timer fires. The launcher keeps no state that matters across a restart: everything it needs to resume
 * (reservation id, vmid, clone task, ISO volume, token id, step, attempts) lives in the claim's status. */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agents.h"
#include "config.h"
#include "kube.h"
#include "latency.h"
#include "pve.h"
#include "stats.h"

/* Everything the launcher talks to. All borrowed; every call happens on the calling (worker) thread, and
 * the clients returned by the callbacks belong to that thread. */
struct launcher_env {
        struct kube_client *kube;
        const struct config *cfg;
        /* The PVE client of a region, or NULL when the region is not configured. */
        struct pve_client *(*pve_for_region)(void *userdata, const char *region);
        /* The agent client of a host, or NULL when agents are not configured (the `simple` fallback does the
         * accounting from PVE data instead). */
        struct agents_client *(*agent_for_host)(void *userdata, const char *region, const char *host);
        /* The Node whose spec.providerID is provider_id, from the controller's cache; borrowed; NULL if none. */
        const json_t *(*node_by_provider_id)(void *userdata, const char *provider_id);
        void *userdata;
        /* The Kubernetes client of the calling thread (launcher_reconcile and launcher_collect_garbage run on
         * worker threads and a kube_client is not thread-safe). NULL = use kube, and then never call the
         * launcher from two threads at once. */
        struct kube_client *(*kube_for_thread)(void *userdata);
        /* Called just before (recorded false) and just after (recorded true) a launch step is written to a
         * claim's status.launchStep; NULL = none. For metrics, and for tests that crash the process at a step. */
        void (*on_step)(void *userdata, const char *claim, const char *step, bool recorded);
        /* Wall clock in milliseconds since the epoch; tests may fake it. NULL = the real clock. */
        int64_t (*now_ms)(void *userdata);
        /* A ProxmoxNodeClass, NodePool or NodeClaim (rt) by name from the controller's informer cache, as a new
         * reference; NULL when not cached (then it is read from the API server). NULL = always read. */
        json_t *(*cached)(void *userdata, const struct kube_resource *rt, const char *name);
        /* Where the provisioner noted when each claim's first pod was pending; the launcher adds its API waits
         * and, at the start call, logs and observes the start latency (launch_start_seconds and
         * launch_start_own_seconds in stats). Both may be NULL. */
        struct latency *latency;
        struct stats *stats;
};

/* Timeouts and back-off. 0 = the default in brackets. The clone, registration and task timeouts are flags
 * (coordinator/config/options.h); the rest are fixed. */
struct launcher_options {
        int64_t clone_timeout_ms;        /* [10 min] a clone task that runs longer is a failed launch */
        int64_t registration_timeout_ms; /* [15 min] from start to a Node with the claim's providerID */
        int64_t task_timeout_ms;         /* [2 min] config, resize, upload, start, stop and delete tasks */
        int64_t drain_timeout_ms;        /* [none] the termination grace period when neither the claim nor its
                                          * NodePool sets one (Karpenter has none: the drain waits) */
        int64_t reservation_ttl_s;       /* [900] TTL of the agent reservation until it is bound */
        int64_t orphan_vm_age_ms;        /* [10 min] a VM tagged pvescale with no claim, older than this, is deleted */
        int64_t backoff_base_ms;         /* [30 s] first pause of a (node pool, host) after a failed launch */
        int64_t backoff_max_ms;          /* [30 min] the pause doubles per consecutive failure up to this */
        int64_t token_ttl_s;             /* [3600] bootstrap token expiration */
};

/* The finalizer every NodeClaim carries from its creation (the controller sets it; the launcher adds it if it is
 * missing). The launcher removes it once the claim's VM, reservation, token and ISO are gone. */
#define LAUNCHER_FINALIZER "pvescale.io/termination"

struct launcher;

int launcher_new(const struct launcher_env *env, const struct launcher_options *opts, struct launcher **ret);
void launcher_free(struct launcher *l);

/* Advance one NodeClaim (the object as last seen) as far as it can go without waiting. Each step is recorded
 * in the claim's status before the next one starts, so a crash at any point leaves something to finish or
 * clean up. A claim with a deletionTimestamp is torn down (VM, reservation, token, ISO) and its finalizer
 * removed. On a failed launch (including timeouts) the VM is deleted, the reservation released, an Event
 * recorded, the claim deleted, and the (node pool, host) pair backed off.
 * Returns 0 with *ret_requeue_ms = how soon to call again (0 = nothing pending), or a negative errno. */
int launcher_reconcile(struct launcher *l, const json_t *claim, int64_t *ret_requeue_ms);

/* Is rv the resourceVersion of this launcher's own last status write of the claim? The controller skips the
 * watch event of such a write (the launcher already knows what it wrote and when to come back). */
bool launcher_wrote(struct launcher *l, const char *claim, const char *rv);

/* Periodic clean-up given every NodeClaim (a JSON array): delete VMs tagged `pvescale` that no claim owns and
 * that are older than orphan_vm_age_ms; release agent reservations whose owner claim is gone; delete (with a
 * GarbageCollected Event) a claim that joined and whose VM or Node is gone, so that its termination cleans up. */
int launcher_collect_garbage(struct launcher *l, const json_t *claims);

/* True while launches for this node pool on this host are paused after failures; *ret_until_ms when. The
 * provisioner leaves such hosts out, so there is never a create-destroy loop. */
bool launcher_backoff_active(const struct launcher *l, const char *nodepool, const char *host, int64_t now_ms,
                             int64_t *ret_until_ms);
