/* controller: the coordinator's control loop: informers feeding a cache, intake batching, provisioning rounds,
 * a worker pool that drives the launcher, garbage collection and leader election. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "controller.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller_internal.h"
#include "disruption.h"
#include "http_client.h"
#include "leader.h"
#include "latency.h"
#include "log.h"
#include "provisioner.h"
#include "rfc3339.h"
#include "monotime.h"
#include "kube_object.h"
#include "kube_types.h"

#define DEFAULT_WORKERS 64
#define DEFAULT_GC_INTERVAL_MS 60000
#define DEFAULT_RESYNC_MS 10000
#define LOOP_TICK_MS 1000
#define NOT_READY_TICK_MS 100
#define HEALTHY_WITHIN_MS 30000
#define PROVISION_WRITERS 7 /* tasks that create a round's claims besides the control loop's client */

static const struct kube_resource *const KIND_RT[K_N] = {
        [K_PODS] = &kube_pods,          [K_NODES] = &kube_nodes,           [K_CLAIMS] = &kube_nodeclaims,
        [K_POOLS] = &kube_nodepools,    [K_CLASSES] = &kube_nodeclasses,   [K_DAEMONSETS] = &kube_daemonsets,
        [K_PDBS] = &kube_pdbs,
};

static void deadline_ts(int64_t mono_ms, struct timespec *ts) {
        ts->tv_sec = mono_ms / 1000;
        ts->tv_nsec = (mono_ms % 1000) * 1000000;
}

static bool all_synced_locked(const struct controller *c) {
        for (int k = 0; k < K_N; k++)
                if (!c->synced[k])
                        return false;
        return true;
}

/* ---- reacting to watch events (c->mu held) ---- */

static void trigger_locked(struct controller *c) {
        if (json_object_size(c->candidates) > 0) {
                intake_batch_add(&c->batch, monotime_ms());
                c->wake_loop = true;
        }
}

/* A node class's spec changed: the next garbage collection, whose pass brings the class's VMs' tags, pool and
 * firewall groups in line in place (launch/launcher_sync.c), is due now rather than at its interval. */
static void class_changed_locked(struct controller *c) {
        if (c->n_workers == 0)
                return;
        c->workers[0].next_gc_ms = monotime_ms();
        c->wake_loop = true;
}

/* Karpenter's pods_startup_duration_seconds: a pod seen Pending is observed once, when it is Ready, from its
 * creation to the Ready condition's lastTransitionTime; one that ends (Succeeded, Failed, deleted) first is not. */
static void pod_startup(struct controller *c, enum kube_watch_event ev, const json_t *pod, const char *key) {
        struct kube_pod p = kube_pod_of(pod);
        const char *ready_at = kube_str(kube_condition(p.status, "Ready"), "lastTransitionTime");
        int64_t created = 0, ready_ms = 0;
        bool pending = p.phase && strcmp(p.phase, "Pending") == 0;
        bool ended = p.phase && (strcmp(p.phase, "Succeeded") == 0 || strcmp(p.phase, "Failed") == 0);
        if (ev != KUBE_EVENT_DELETED && pending) {
                json_object_set_new(c->starting, key, json_true());
                return;
        }
        if (ev == KUBE_EVENT_DELETED || ended) {
                json_object_del(c->starting, key);
                return;
        }
        if (!json_object_get(c->starting, key) || !kube_condition_true(p.status, "Ready") || !ready_at ||
            !p.meta.creation_timestamp || rfc3339_parse(ready_at, &ready_ms) < 0 ||
            rfc3339_parse(p.meta.creation_timestamp, &created) < 0)
                return;
        stats_observe(c->stats, STATS_H_POD_STARTUP, (double)(ready_ms - created) / 1000.0);
        json_object_del(c->starting, key);
}

static void pod_changed(struct controller *c, enum kube_watch_event ev, const json_t *pod) {
        char key[512];
        const char *uid = kube_meta_str(pod, "uid");
        if (uid)
                snprintf(key, sizeof key, "%s", uid);
        else
                controller__store_key(pod, key, sizeof key);
        pod_startup(c, ev, pod, key);
        if (ev != KUBE_EVENT_DELETED && intake_pod_is_candidate(pod)) {
                if (!json_object_get(c->candidates, key)) {
                        intake_batch_add(&c->batch, monotime_ms());
                        c->wake_loop = true;
                }
                json_object_set(c->candidates, key, (json_t *)pod);
        } else {
                json_object_del(c->candidates, key);
        }
        stats_set(c->stats, STATS_PENDING_PODS, (int64_t)json_object_size(c->candidates));
}

static bool placed(const json_t *claim) {
        return kube_nodeclaim_of(claim).host != NULL;
}

static bool initialized(const json_t *claim) {
        return kube_condition_true(json_object_get(claim, "status"), "Initialized");
}

/* The event of the launcher's own last status write: the launcher has already queued what comes next. */
static bool own_write(struct controller *c, enum kube_watch_event ev, const json_t *claim) {
        if (ev != KUBE_EVENT_MODIFIED || !c->launcher || !c->ops || !c->ops->wrote)
                return false;
        struct kube_meta m = kube_meta_of(claim);
        return c->ops->wrote(c->launcher, m.name, m.resource_version);
}

static void claim_changed(struct controller *c, enum kube_watch_event ev, const json_t *claim, const json_t *prev) {
        bool was = prev && initialized(prev);
        if (ev != KUBE_EVENT_MODIFIED || initialized(claim) != was)
                c->usage_stale = true;
        if (ev == KUBE_EVENT_DELETED) {
                if (!was)
                        stats_add(c->stats, STATS_LAUNCH_FAILED, 1);
                controller__forget_locked(c, kube_meta_str(claim, "name"));
                trigger_locked(c); /* its room is free again, or its launch failed */
        } else {
                if (initialized(claim) && !was)
                        stats_add(c->stats, STATS_LAUNCH_INITIALIZED, 1);
                /* A claim our provisioner is still writing comes to a worker from the writer (claim_created). */
                bool writing = json_object_get(c->writing, kube_meta_str(claim, "name") ?: "") != NULL;
                if (!writing && !own_write(c, ev, claim))
                        controller__enqueue_locked(c, claim);
        }
        stats_set(c->stats, STATS_NODECLAIMS, (int64_t)json_object_size(c->store[K_CLAIMS]));
}

/* A Node came, changed or went: reconcile the claim that launched it. */
static void node_changed(struct controller *c, enum kube_watch_event ev, const json_t *node) {
        const char *pid = kube_node_of(node).provider_id;
        if (ev != KUBE_EVENT_MODIFIED)
                c->usage_stale = true;
        if (ev == KUBE_EVENT_DELETED)
                trigger_locked(c);
        const json_t *claim = pid && *pid ? controller__by_provider_id_locked(c, K_CLAIMS, pid) : NULL;
        if (claim)
                controller__enqueue_locked(c, claim);
}

/* Added, deleted, or a new generation (status-only updates, such as our own NodePool usage, do not count). */
static bool spec_changed(enum kube_watch_event ev, const json_t *obj, const json_t *prev) {
        if (ev != KUBE_EVENT_MODIFIED || !prev)
                return true;
        struct kube_meta m = kube_meta_of(obj), pm = kube_meta_of(prev);
        return !m.has_generation || !pm.has_generation || m.generation != pm.generation;
}

static void apply_event(struct controller *c, enum ctl_kind kind, enum kube_watch_event ev, const json_t *obj) {
        json_t *prev = controller__cache_apply_locked(c, kind, ev, obj);
        if (kind == K_PODS)
                pod_changed(c, ev, obj);
        else if (kind == K_CLAIMS)
                claim_changed(c, ev, obj, prev);
        else if (kind == K_NODES)
                node_changed(c, ev, obj);
        else if ((kind == K_POOLS || kind == K_CLASSES) && c->synced[kind] && spec_changed(ev, obj, prev)) {
                trigger_locked(c);
                c->usage_stale = true; /* NodeRegistrationHealthy goes back to Unknown (update_pools) */
                if (kind == K_CLASSES && ev == KUBE_EVENT_MODIFIED)
                        class_changed_locked(c);
        }
        json_decref(prev);
}

static int on_event(enum kube_watch_event ev, const json_t *obj, void *userdata) {
        struct ctl_watcher *w = userdata;
        struct controller *c = w->ctl;
        pthread_mutex_lock(&c->mu);
        if (ev == KUBE_EVENT_SYNCED) {
                if (!c->synced[w->kind])
                        log_info("%s: listed (%zu)", KIND_RT[w->kind]->plural, json_object_size(c->store[w->kind]));
                c->synced[w->kind] = true;
                atomic_store(&w->sw->synced, 1);
                stats_set(c->stats, STATS_READY, all_synced_locked(c));
                c->wake_loop = true;
        } else if (obj) {
                apply_event(c, w->kind, ev, obj);
        }
        if (c->wake_loop) /* most events (our own writes among them) change nothing the loop waits for */
                pthread_cond_signal(&c->cond);
        c->wake_loop = false;
        pthread_mutex_unlock(&c->mu);
        return 0;
}

/* ---- informer threads ---- */

/* The informer's counters into the metrics, as they change (an open watch is counted while it is open). */
static void copy_watch_stats(const struct kube_informer_stats *s, void *userdata) {
        struct ctl_watcher *w = userdata;
        atomic_store(&w->sw->lists, s->lists);
        atomic_store(&w->sw->relists_410, s->relists_410);
        atomic_store(&w->sw->watches, s->watches);
        atomic_store(&w->sw->resumes, s->resumes);
        atomic_store(&w->sw->failures, s->failures);
}

static void *watcher_main(void *arg) {
        struct ctl_watcher *w = arg;
        int r = kube_informer_run(w->inf); /* until c->stop, the client's cancel flag; on_event never fails */
        if (r < 0)
                log_error_errno(r, "informer %s", KIND_RT[w->kind]->plural);
        return NULL;
}

static int watcher_new(struct controller *c, enum ctl_kind kind) {
        struct ctl_watcher *w = &c->watchers[kind];
        *w = (struct ctl_watcher){ .ctl = c, .kind = kind };
        w->sw = stats_watch_add(c->stats, KIND_RT[kind]->plural);
        int r = kube_client_new(c->kcfg, NULL, &w->kube);
        if (r < 0)
                return log_error_errno(r, "kubernetes client");
        kube_client_set_cancel(w->kube, &c->stop);
        struct kube_informer_options o = { .stats_changed = copy_watch_stats };
        r = kube_informer_new(w->kube, KIND_RT[kind], NULL, &o, on_event, w, &w->inf);
        return r < 0 ? log_error_errno(r, "informer") : 0;
}

/* ---- the control loop ---- */

struct snapshot {
        struct provisioner_snapshot s;
        json_t *arrays[K_N + 1]; /* per kind (pods: the bound ones), then the candidates */
};

static json_t *values(const json_t *obj) {
        json_t *arr = json_array();
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
                json_array_append(arr, v);
        }
        return arr;
}

static bool bound_and_running(const json_t *pod) {
        struct kube_pod p = kube_pod_of(pod);
        const char *node = p.node_name, *phase = p.phase;
        return node && *node && !(phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0));
}

static json_t *bound_pods(const json_t *pods) {
        json_t *arr = json_array();
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)pods, key, v) {
                if (bound_and_running(v))
                        json_array_append(arr, v);
        }
        return arr;
}

static void snapshot_take_locked(struct controller *c, struct snapshot *s) {
        for (int k = 0; k < K_N; k++)
                s->arrays[k] = k == K_PODS ? bound_pods(c->store[k]) : values(c->store[k]);
        s->arrays[K_N] = values(c->candidates);
        s->s = (struct provisioner_snapshot){ .candidates = s->arrays[K_N], .bound = s->arrays[K_PODS],
                                              .nodes = s->arrays[K_NODES], .claims = s->arrays[K_CLAIMS],
                                              .pools = s->arrays[K_POOLS], .classes = s->arrays[K_CLASSES],
                                              .daemonsets = s->arrays[K_DAEMONSETS], .pdbs = s->arrays[K_PDBS],
                                              .now_ms = rfc3339_now_ms() };
}

static void snapshot_done(struct snapshot *s) {
        for (int k = 0; k < K_N + 1; k++)
                json_decref(s->arrays[k]);
}

/* The stored claim with its status: into the cache (unless the watch brought it already, or a newer one), and
 * to a worker. */
static void claim_created(void *userdata, const json_t *claim, const struct latency_waits *waits) {
        struct controller *c = userdata;
        const char *name = kube_meta_str(claim, "name");
        if (!name)
                return;
        latency_begin(c->latency, name, c->round_origin_ms, waits);
        pthread_mutex_lock(&c->mu);
        json_object_del(c->writing, name);
        const json_t *had = json_object_get(c->store[K_CLAIMS], name);
        if (!had || (!placed(had) && placed(claim)))
                json_object_set(c->store[K_CLAIMS], name, (json_t *)claim);
        controller__enqueue_locked(c, json_object_get(c->store[K_CLAIMS], name));
        pthread_mutex_unlock(&c->mu);
}

static void claim_writing(void *userdata, const char *name, bool writing) {
        struct controller *c = userdata;
        pthread_mutex_lock(&c->mu);
        if (writing)
                json_object_set_new(c->writing, name, json_true());
        else
                json_object_del(c->writing, name);
        pthread_mutex_unlock(&c->mu);
}

static void host_address(void *userdata, const char *region, const char *host, const char *address) {
        struct controller *c = userdata;
        char key[512];
        snprintf(key, sizeof key, "%s/%s", region, host);
        pthread_mutex_lock(&c->mu);
        json_object_set_new(c->addresses, key, json_string(address));
        pthread_mutex_unlock(&c->mu);
}

static void round_locked(struct controller *c, struct provisioner *p) {
        struct snapshot s;
        struct provisioner_outcome out = { 0 };
        int64_t now = monotime_ms(), span = c->batch.open ? c->batch.last_ms - c->batch.first_ms : 0;
        c->round_origin_ms = c->batch.open ? c->batch.first_ms : now;
        size_t n = intake_batch_close(&c->batch);
        snapshot_take_locked(c, &s);
        pthread_mutex_unlock(&c->mu);
        int r = provisioner_run(p, &s.s, &out);
        if (r == 0)
                log_info("batch of %zu new (arriving over %lld ms, closed %lld ms after the first): %zu pending pods "
                         "(and %zu of nodes being deleted): %zu fit nodes, %zu in-flight claims, %zu on %zu new "
                         "claims, %zu stay pending; %zu hosts (%zu by agents); simulation %.1f ms",
                         n, (long long)span, (long long)(now - c->round_origin_ms), out.candidates, out.leaving,
                         out.on_nodes, out.on_inflight, out.on_new, out.claims_created, out.unplaced, out.hosts,
                         out.hosts_from_agents, out.simulate_seconds * 1000);
        snapshot_done(&s);
        pthread_mutex_lock(&c->mu);
        c->last_round_ms = monotime_ms();
        c->last_unplaced = r < 0 ? 1 : out.unplaced + out.failures;
        stats_set(c->stats, STATS_UNPLACED_PODS, (int64_t)out.unplaced);
}

/* A scale-down pass (leader only, every informer listed, no batch of pending pods open). */
static void disruption_locked(struct controller *c, struct disruption *dis) {
        struct snapshot s;
        struct disruption_outcome out = { 0 };
        snapshot_take_locked(c, &s);
        c->round_origin_ms = monotime_ms(); /* replacement claims start now */
        pthread_mutex_unlock(&c->mu);
        int r = disruption_pass(dis, &s.s, rfc3339_now_ms(), &out);
        if (r < 0 && !atomic_load(&c->stop))
                log_error_errno(r, "disruption pass");
        else if (out.carried_out || out.decided || out.replacing)
                log_info("disruption: %zu candidates, %zu decided, %zu carried out, %zu dropped as stale, "
                         "%zu left alone, %zu waiting for replacements", out.candidates, out.decided, out.carried_out,
                         out.stale, out.blocked, out.replacing);
        snapshot_done(&s);
        pthread_mutex_lock(&c->mu);
        c->last_disruption_ms = monotime_ms();
}

/* NodePool usage after claims or Nodes came or went (leader only; at most once a loop tick). */
static void usage_locked(struct controller *c, struct provisioner *p) {
        struct snapshot s;
        c->usage_stale = false;
        snapshot_take_locked(c, &s);
        pthread_mutex_unlock(&c->mu);
        if (provisioner_update_usage(p, &s.s) < 0) {
                pthread_mutex_lock(&c->mu);
                c->usage_stale = true; /* tried again next tick */
                pthread_mutex_unlock(&c->mu);
        }
        snapshot_done(&s);
        pthread_mutex_lock(&c->mu);
        c->last_usage_ms = monotime_ms();
}

static bool disruption_due_locked(const struct controller *c, const struct disruption *dis, int64_t now) {
        return dis && c->leader && all_synced_locked(c) && !c->batch.open &&
               now - c->last_disruption_ms >= c->o.disruption_interval_ms;
}

static int64_t loop_deadline_locked(const struct controller *c, int64_t now) {
        int64_t d = now + LOOP_TICK_MS, b = intake_batch_deadline(&c->batch);
        if (b >= 0 && b < d)
                d = b <= now ? now + NOT_READY_TICK_MS : b;
        return d;
}

static void loop_locked(struct controller *c, struct provisioner *p, struct disruption *dis) {
        while (!atomic_load(&c->stop)) {
                int64_t now = monotime_ms();
                atomic_store(&c->heartbeat_ms, now);
                if (c->leader && all_synced_locked(c) && intake_batch_due(&c->batch, now))
                        round_locked(c, p);
                now = monotime_ms();
                if (disruption_due_locked(c, dis, now))
                        disruption_locked(c, dis);
                now = monotime_ms();
                if (c->usage_stale && c->leader && all_synced_locked(c) && !c->batch.open &&
                    now - c->last_usage_ms >= LOOP_TICK_MS)
                        usage_locked(c, p);
                now = monotime_ms();
                /* Pods still pending after a round are looked at again: they may have been left unplaced, or
                 * kube-scheduler may have put other pods on the room planned for them (it does not honour
                 * nominations), so their claim became a Node that they do not fit. */
                if ((c->last_unplaced > 0 || json_object_size(c->candidates) > 0) && !c->batch.open &&
                    now - c->last_round_ms >= c->o.resync_ms)
                        trigger_locked(c);
                struct timespec ts;
                deadline_ts(loop_deadline_locked(c, now), &ts);
                pthread_cond_timedwait(&c->cond, &c->mu, &ts);
        }
}

/* Clients for the provisioner's claim writer tasks; as many as could be made. */
static size_t writers_new(struct controller *c, struct kube_client **writers) {
        size_t n = 0;
        struct kube_client_options o = { .pool = c->kube_pool };
        for (; n < PROVISION_WRITERS && kube_client_new(c->kcfg, &o, &writers[n]) == 0; n++)
                kube_client_set_cancel(writers[n], &c->stop);
        return n;
}

static void *loop_main(void *arg) {
        struct controller *c = arg;
        struct kube_client *kube = NULL, *writers[PROVISION_WRITERS] = { 0 };
        struct provisioner *p = NULL;
        struct disruption *dis = NULL;
        if (kube_client_new(c->kcfg, NULL, &kube) < 0) {
                log_error("kubernetes client for the control loop: out of memory");
                return NULL;
        }
        kube_client_set_cancel(kube, &c->stop);
        struct provisioner_env env = { .cfg = c->cfg, .kube = kube, .stats = c->stats, .claim_created = claim_created,
                                       .claim_writing = claim_writing, .host_address = host_address, .userdata = c,
                                       .writers = writers, .placement_by_launcher = c->launcher != NULL };
        env.n_writers = writers_new(c, writers);
        if (c->launcher && c->ops->backoff_active)
                env.backoff_active = controller__backoff_active;
        struct disruption_env denv = { .kube = kube,
                                       .stats = c->stats,
                                       .repair = c->o.node_repair,
                                       .period_ms = c->o.disruption_interval_ms,
                                       .repair_after_ms = c->o.node_repair_after_ms,
                                       .replace_timeout_ms = c->o.replacement_timeout_ms };
        if (provisioner_new(&env, &p) == 0) {
                denv.provisioner = p;
                if (c->o.disruption && c->launcher && disruption_new(&denv, &dis) < 0)
                        log_error("disruption: out of memory; no scale-down");
                pthread_mutex_lock(&c->mu);
                loop_locked(c, p, dis);
                pthread_mutex_unlock(&c->mu);
        }
        provisioner_free(p);
        disruption_free(dis);
        for (size_t i = 0; i < env.n_writers; i++)
                kube_client_free(writers[i]);
        kube_client_free(kube);
        return NULL;
}

/* ---- leader election (its own thread, so that a long round never delays a renewal) ---- */

/* The lease is given up with a client of its own: the thread's client is canceled by then, and a stop must not
 * wait on an API server that does not answer for longer than a renewal may take. */
static void release_lease(struct controller *c, struct leader *l) {
        struct kube_client *kube = NULL;
        struct kube_client_options o = { .timeout_ms = l->o.renew_deadline_ms, .max_retries = KUBE_NO_RETRY };
        if (!l->leading || kube_client_new(c->kcfg, &o, &kube) < 0)
                return;
        leader_release(l, kube);
        kube_client_free(kube);
}

static void *lease_main(void *arg) {
        struct controller *c = arg;
        struct kube_client *kube = NULL;
        struct leader l;
        leader_init(&l, &(struct leader_options){ .namespace = c->lease_namespace, .identity = c->identity,
                                                  .lease_duration_ms = c->o.lease_duration_ms,
                                                  .renew_deadline_ms = c->o.renew_deadline_ms,
                                                  .retry_ms = c->o.retry_period_ms });
        if (kube_client_new(c->kcfg, NULL, &kube) < 0) {
                log_error("kubernetes client for leader election: out of memory");
                return NULL;
        }
        /* The lease is held (renewed) until the work it guards has stopped, not only until the stop began. */
        kube_client_set_cancel(kube, &c->lease_stop);
        pthread_mutex_lock(&c->mu);
        while (!atomic_load(&c->lease_stop)) {
                int64_t now = monotime_ms();
                pthread_mutex_unlock(&c->mu);
                bool lead = leader_step(&l, kube, now);
                pthread_mutex_lock(&c->mu);
                if (lead != c->leader && !atomic_load(&c->stop)) {
                        c->leader = lead;
                        c->usage_stale = c->usage_stale || lead; /* the last leader may have left it behind */
                        stats_set(c->stats, STATS_LEADER, lead);
                        pthread_cond_broadcast(&c->cond);
                        controller__wake_workers_locked(c);
                }
                struct timespec ts;
                deadline_ts(now + l.o.retry_ms, &ts);
                while (!atomic_load(&c->lease_stop) && monotime_ms() < now + l.o.retry_ms)
                        pthread_cond_timedwait(&c->lease_cond, &c->mu, &ts);
        }
        pthread_mutex_unlock(&c->mu);
        kube_client_free(kube);
        release_lease(c, &l);
        return NULL;
}

/* ---- lifecycle ---- */

static void names_from_env(struct controller *c) {
        const char *ns = c->o.lease_namespace ? c->o.lease_namespace : getenv("POD_NAMESPACE");
        const char *id = c->o.identity ? c->o.identity : getenv("POD_NAME");
        char host[256] = "pvescale-coordinator";
        if (!ns || !*ns)
                ns = c->kcfg->namespace && *c->kcfg->namespace ? c->kcfg->namespace : "default";
        if (!id || !*id) {
                gethostname(host, sizeof host - 1);
                id = host;
        }
        snprintf(c->lease_namespace, sizeof c->lease_namespace, "%s", ns);
        snprintf(c->identity, sizeof c->identity, "%s", id);
}

/* Requests that run at once against the API server, against each Proxmox cluster and against all agents; the
 * other workers wait for a turn (pveproxy itself serves with three worker processes). Each request at once is
 * a connection kept open, and a new one costs a TLS handshake. */
#define KUBE_MAX_REQUESTS 16
#define PVE_MAX_REQUESTS 16
#define AGENT_MAX_REQUESTS 16

static int pools_new(struct controller *c) {
        c->pve_pools = calloc(c->cfg->n_clusters + 1, sizeof *c->pve_pools);
        int r = c->pve_pools ? http_pool_new(KUBE_MAX_REQUESTS, &c->kube_pool) : -ENOMEM;
        if (r == 0)
                r = http_pool_new(AGENT_MAX_REQUESTS, &c->agents_pool);
        for (size_t i = 0; r == 0 && i < c->cfg->n_clusters; i++)
                r = http_pool_new(PVE_MAX_REQUESTS, &c->pve_pools[i]);
        return r;
}

static void pools_free(struct controller *c) {
        for (size_t i = 0; c->pve_pools && i < c->cfg->n_clusters; i++)
                http_pool_free(c->pve_pools[i]);
        free(c->pve_pools);
        http_pool_free(c->agents_pool);
        http_pool_free(c->kube_pool);
}

int controller_new(const struct config *cfg, const struct kube_config *kube, const struct controller_options *o,
                   const struct controller_launcher_ops *ops, struct stats *stats, struct controller **ret) {
        struct controller *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        *c = (struct controller){ .cfg = cfg, .kcfg = kube, .o = *o, .ops = o->launch ? ops : NULL, .stats = stats };
        c->o.workers = o->workers ? o->workers : DEFAULT_WORKERS;
        c->o.gc_interval_ms = o->gc_interval_ms > 0 ? o->gc_interval_ms : DEFAULT_GC_INTERVAL_MS;
        c->o.resync_ms = o->resync_ms > 0 ? o->resync_ms : DEFAULT_RESYNC_MS;
        c->o.disruption_interval_ms = o->disruption_interval_ms > 0 ? o->disruption_interval_ms : DISRUPTION_PERIOD_MS;
        c->leader = !o->leader_elect;
        stats_set(stats, STATS_LEADER, c->leader);
        names_from_env(c);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cond, &ca);
        pthread_cond_init(&c->lease_cond, &ca);
        pthread_condattr_destroy(&ca);
        intake_batch_init(&c->batch, cfg->batch_idle_ms, cfg->batch_max_ms);
        int r = 0;
        for (int k = 0; k < K_N && r == 0; k++)
                r = (c->store[k] = json_object()) ? 0 : -ENOMEM;
        c->candidates = json_object();
        c->starting = json_object();
        c->addresses = json_object();
        c->by_provider_id[K_NODES] = json_object();
        c->by_provider_id[K_CLAIMS] = json_object();
        c->writing = json_object();
        if (r == 0 && (!c->candidates || !c->starting || !c->addresses || !c->by_provider_id[K_NODES] ||
                       !c->by_provider_id[K_CLAIMS] ||
                       !c->writing))
                r = -ENOMEM;
        if (r == 0)
                r = latency_new(&c->latency);
        if (r == 0)
                r = pools_new(c);
        for (int k = 0; k < K_N && r == 0; k++)
                r = watcher_new(c, (enum ctl_kind)k);
        if (r == 0 && c->ops)
                r = controller__workers_new(c);
        if (r < 0) {
                controller_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

int controller_start(struct controller *c) {
        log_info("controller: launch %s, leader election %s (lease %s/%s, identity %s), %zu workers",
                 c->ops ? "on" : "off", c->o.leader_elect ? "on" : "off", c->lease_namespace, LEADER_DEFAULT_NAME,
                 c->identity, c->ops ? c->n_workers : 0);
        for (int k = 0; k < K_N; k++) {
                if (pthread_create(&c->watchers[k].thread, NULL, watcher_main, &c->watchers[k]) != 0)
                        return log_error_errno(-EAGAIN, "cannot start an informer thread");
                char name[16];
                snprintf(name, sizeof name, "watch-%s", KIND_RT[k]->plural);
                pthread_setname_np(c->watchers[k].thread, name);
                c->watchers[k].started = true;
        }
        if (c->ops && controller__workers_start(c) < 0)
                return -EAGAIN;
        if (pthread_create(&c->loop, NULL, loop_main, c) != 0)
                return log_error_errno(-EAGAIN, "cannot start the control loop");
        pthread_setname_np(c->loop, "provisioner");
        c->loop_started = true;
        if (c->o.leader_elect && pthread_create(&c->lease, NULL, lease_main, c) != 0)
                return log_error_errno(-EAGAIN, "cannot start leader election");
        c->lease_started = c->o.leader_elect;
        return 0;
}

void controller_stop(struct controller *c) {
        atomic_store(&c->stop, true);
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->cond);
        pthread_cond_broadcast(&c->lease_cond);
        controller__wake_workers_locked(c);
        pthread_mutex_unlock(&c->mu);
        if (c->loop_started)
                pthread_join(c->loop, NULL);
        c->loop_started = false;
        if (c->launch_started)
                pthread_join(c->launch, NULL);
        c->launch_started = false;
        /* Nothing the lease guards runs any more: give it up, as controller-runtime's ReleaseOnCancel does. */
        atomic_store(&c->lease_stop, true);
        pthread_mutex_lock(&c->mu);
        pthread_cond_broadcast(&c->lease_cond);
        pthread_mutex_unlock(&c->mu);
        if (c->lease_started)
                pthread_join(c->lease, NULL);
        c->lease_started = false;
        for (int k = 0; k < K_N; k++)
                if (c->watchers[k].started) {
                        pthread_join(c->watchers[k].thread, NULL);
                        c->watchers[k].started = false;
                }
}

void controller_free(struct controller *c) {
        if (!c)
                return;
        controller_stop(c);
        controller__workers_free(c);
        for (int k = 0; k < K_N; k++) {
                kube_informer_free(c->watchers[k].inf);
                kube_client_free(c->watchers[k].kube);
                json_decref(c->store[k]);
                json_decref(c->by_provider_id[k]);
        }
        json_decref(c->candidates);
        json_decref(c->starting);
        json_decref(c->writing);
        json_decref(c->addresses);
        latency_free(c->latency);
        pools_free(c);
        pthread_cond_destroy(&c->cond);
        pthread_cond_destroy(&c->lease_cond);
        pthread_mutex_destroy(&c->mu);
        free(c);
}

void controller_get_status(struct controller *c, struct controller_status *ret) {
        pthread_mutex_lock(&c->mu);
        *ret = (struct controller_status){ .ready = all_synced_locked(c), .leader = c->leader,
                                           .pending_pods = json_object_size(c->candidates),
                                           .nodeclaims = json_object_size(c->store[K_CLAIMS]) };
        pthread_mutex_unlock(&c->mu);
        ret->healthy = monotime_ms() - atomic_load(&c->heartbeat_ms) < HEALTHY_WITHIN_MS;
}

int controller_collect_gauges(struct controller *c, struct stats_cluster *ret) {
        pthread_mutex_lock(&c->mu);
        json_t *pools = values(c->store[K_POOLS]), *claims = values(c->store[K_CLAIMS]);
        json_t *nodes = values(c->store[K_NODES]), *pods = bound_pods(c->store[K_PODS]);
        pthread_mutex_unlock(&c->mu);
        int r = pools && claims && nodes && pods ? controller_gauges(pools, claims, nodes, pods, ret) : -ENOMEM;
        json_decref(pools);
        json_decref(claims);
        json_decref(nodes);
        json_decref(pods);
        return r;
}
