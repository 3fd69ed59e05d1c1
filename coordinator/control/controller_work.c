/* controller_work: the launch thread that drives the launcher (a work queue of NodeClaims with requeue times and
 * per-key exclusivity, worked by tasks of one thread, fiber.h), periodic garbage collection, and the launcher's
 * environment of per-worker clients. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "controller_internal.h"
#include "kube_types.h"
#include "fiber.h"
#include "log.h"
#include "rfc3339.h"
#include "provisioner.h"
#include "monotime.h"

#define IDLE_TICK_MS 1000
#define ERROR_RETRY_BASE_MS 1000
#define ERROR_RETRY_MAX_MS 60000

/* The worker whose task is running (NULL outside the launch thread's tasks): the launcher's callbacks find their
 * clients here. */
static struct ctl_worker *current_worker(void) {
        struct fiber *f = fiber_self();
        return f ? fiber_data(f) : NULL;
}

/* ---- the queue (c->mu held) ---- */

static struct ctl_item *find_item(struct controller *c, const char *name) {
        for (size_t i = 0; i < c->n_items; i++)
                if (strcmp(c->items[i].name, name) == 0)
                        return &c->items[i];
        return NULL;
}

static struct ctl_item *add_item(struct controller *c, const char *name) {
        if (ARRAY_GROW(&c->items, &c->cap_items, c->n_items, 16) < 0)
                return NULL;
        struct ctl_item *it = &c->items[c->n_items];
        *it = (struct ctl_item){ .name = strdup(name) };
        if (!it->name)
                return NULL;
        c->n_items++;
        return it;
}

static void remove_item(struct controller *c, struct ctl_item *it) {
        free(it->name);
        *it = c->items[--c->n_items];
}

/* One queue for all workers: a new claim starts as soon as any worker is free (claims routed to fixed workers
 * waited behind the other claims of their worker while other workers idled), and an item that is running is
 * never taken by a second worker, so no two workers ever reconcile one claim at once. */
void controller__enqueue_locked(struct controller *c, const json_t *claim) {
        const char *name = kube_meta_of(claim).name;
        if (!c->ops || !name || !c->work_init)
                return;
        struct ctl_item *it = find_item(c, name);
        if (!it) {
                if (!(it = add_item(c, name)))
                        return;
                it->due_ms = monotime_ms();
        } else if (it->running) {
                it->dirty = true;
                return; /* its worker runs it again when done */
        } else {
                it->due_ms = monotime_ms();
        }
        controller__wake_workers_locked(c);
}

void controller__forget_locked(struct controller *c, const char *name) {
        struct ctl_item *it = c->ops && name ? find_item(c, name) : NULL;
        if (it && it->running)
                it->gone = true;
        else if (it)
                remove_item(c, it);
}

/* The queue or the leadership changed: the launch thread looks at the queue again. */
void controller__wake_workers_locked(struct controller *c) {
        if (c->work_init)
                fiber_sched_wakeup(c->sched);
}

static struct ctl_item *next_due(struct controller *c, int64_t now) {
        struct ctl_item *best = NULL;
        for (size_t i = 0; i < c->n_items; i++) {
                struct ctl_item *it = &c->items[i];
                if (!it->running && it->due_ms <= now && (!best || it->due_ms < best->due_ms))
                        best = it;
        }
        return best;
}

/* How many items that are not running are due now; *ret_next is lowered to when the next other one is. */
static size_t count_due(const struct controller *c, int64_t now, int64_t *ret_next) {
        size_t n = 0;
        for (size_t i = 0; i < c->n_items; i++) {
                const struct ctl_item *it = &c->items[i];
                if (it->running)
                        continue;
                if (it->due_ms <= now)
                        n++;
                else if (it->due_ms < *ret_next)
                        *ret_next = it->due_ms;
        }
        return n;
}

/* After a reconcile: drop the item, or schedule it again. */
static void finish_locked(struct controller *c, const char *name, bool exists, int r, int64_t requeue_ms) {
        struct ctl_item *it = find_item(c, name);
        int64_t now = monotime_ms();
        if (!it)
                return;
        it->running = false;
        if (it->gone || !exists) {
                remove_item(c, it);
        } else if (it->dirty) {
                it->dirty = false;
                it->due_ms = now;
        } else if (r < 0) {
                unsigned shift = it->failures < 6 ? it->failures : 6;
                int64_t delay = (int64_t)ERROR_RETRY_BASE_MS << shift;
                it->failures++;
                it->due_ms = now + (delay < ERROR_RETRY_MAX_MS ? delay : ERROR_RETRY_MAX_MS);
                controller__wake_workers_locked(c);
        } else if (requeue_ms > 0) {
                it->failures = 0;
                it->due_ms = now + requeue_ms;
                controller__wake_workers_locked(c);
        } else {
                remove_item(c, it);
        }
}

/* ---- one piece of work ---- */

static void reconcile(struct controller *c, const char *name, const json_t *claim, int *ret_r, int64_t *ret_requeue) {
        int64_t requeue = 0;
        int r = c->ops->reconcile(c->launcher, claim, &requeue);
        stats_add(c->stats, r < 0 ? STATS_RECONCILE_ERROR : STATS_RECONCILE_OK, 1);
        if (r < 0 && r != -ECANCELED && !atomic_load(&c->stop)) /* logged by the launcher, once per change */
                log_debug("NodeClaim %s: launch step failed (%s); tried again later", name, strerror(-r));
        *ret_r = r;
        *ret_requeue = requeue;
}

static void collect_garbage(struct controller *c, json_t *claims) {
        int r = c->ops->collect_garbage(c->launcher, claims);
        stats_add(c->stats, STATS_GC_RUNS, 1);
        if (r < 0 && r != -ECANCELED && !atomic_load(&c->stop)) /* a stop cancels its calls: not an error */
                log_error_errno(r, "garbage collection");
}

static json_t *all_claims_locked(const struct controller *c) {
        json_t *arr = json_array();
        const char *key;
        json_t *v;
        json_object_foreach(c->store[K_CLAIMS], key, v) {
                json_array_append(arr, v);
        }
        return arr;
}

static bool may_work_locked(const struct controller *c) {
        return c->leader && c->synced[K_CLAIMS] && c->synced[K_NODES] && !atomic_load(&c->stop);
}

/* Run one due item or a garbage collection; false when there was nothing to do. */
static bool work_once_locked(struct ctl_worker *w) {
        struct controller *c = w->ctl;
        int64_t now = monotime_ms();
        if (!may_work_locked(c))
                return false;
        if (w->index == 0 && c->ops->collect_garbage && now >= w->next_gc_ms) {
                json_t *claims = all_claims_locked(c);
                w->next_gc_ms = now + c->o.gc_interval_ms;
                pthread_mutex_unlock(&c->mu);
                collect_garbage(c, claims);
                json_decref(claims);
                pthread_mutex_lock(&c->mu);
                return true;
        }
        struct ctl_item *it = next_due(c, now);
        if (!it)
                return false;
        char *name = strdup(it->name);
        if (!name)
                return false;
        it->running = true; /* it may move while the lock is released: find it again by name */
        json_t *claim = json_incref(json_object_get(c->store[K_CLAIMS], name));
        int r = 0;
        int64_t requeue = 0;
        pthread_mutex_unlock(&c->mu);
        if (claim)
                reconcile(c, name, claim, &r, &requeue);
        json_decref(w->held_node);
        w->held_node = NULL;
        pthread_mutex_lock(&c->mu);
        finish_locked(c, name, claim != NULL, r, requeue);
        json_decref(claim);
        free(name);
        return true;
}

/* A worker's task: due items (and, for worker 0, garbage collections) until none is left. */
static void worker_task(void *data) {
        struct ctl_worker *w = data;
        struct controller *c = w->ctl;
        pthread_mutex_lock(&c->mu);
        while (work_once_locked(w))
                ;
        w->busy = false;
        pthread_mutex_unlock(&c->mu);
}

/* A task for each idle worker, as many as there is work due; *ret_next is lowered to when more is due. */
static void start_tasks_locked(struct controller *c, int64_t now, int64_t *ret_next) {
        if (!may_work_locked(c) || c->n_workers == 0)
                return;
        size_t due = count_due(c, now, ret_next);
        struct ctl_worker *w0 = &c->workers[0];
        bool gc_idle = c->ops->collect_garbage && !w0->busy;
        if (gc_idle && now >= w0->next_gc_ms)
                due++; /* worker 0 is looked at first below */
        else if (gc_idle && w0->next_gc_ms < *ret_next)
                *ret_next = w0->next_gc_ms;
        for (size_t i = 0; i < c->n_workers && due > 0; i++) {
                struct ctl_worker *w = &c->workers[i];
                if (w->busy)
                        continue;
                w->busy = true;
                if (fiber_spawn(c->sched, worker_task, w) < 0) {
                        w->busy = false;
                        return;
                }
                due--;
        }
}

/* The launch thread: the workers' tasks run the reconciles, each one yielding to the others while it waits for
 * an answer or pauses between polls, so the workers cost a task each, not a thread each. */
static void *launch_main(void *arg) {
        struct controller *c = arg;
        size_t alive = 0;
        for (;;) {
                bool stop = atomic_load(&c->stop);
                if (stop && alive == 0)
                        break;
                int64_t now = monotime_ms(), next = now + IDLE_TICK_MS;
                pthread_mutex_lock(&c->mu);
                start_tasks_locked(c, now, &next);
                pthread_mutex_unlock(&c->mu);
                alive = fiber_sched_step(c->sched, stop ? IDLE_TICK_MS / 10 : (long)(next - now));
        }
        return NULL;
}

/* ---- the launcher's environment (called on worker threads) ---- */

static struct kube_client *kube_for_thread(void *userdata) {
        struct controller *c = userdata;
        struct ctl_worker *w = current_worker();
        return w ? w->kube : c->launcher_kube;
}

static struct pve_client *pve_for_region(void *userdata, const char *region) {
        struct controller *c = userdata;
        struct ctl_worker *w = current_worker();
        for (size_t i = 0; w && region && i < c->cfg->n_clusters; i++) {
                const struct config_cluster *cl = &c->cfg->clusters[i];
                if (strcmp(cl->region, region) != 0)
                        continue;
                struct pve_options o = { .url = cl->url, .token_id = cl->token_id, .token_secret = cl->token_secret,
                                         .ca_file = cl->ca_file, .insecure = cl->insecure, .pool = c->pve_pools[i] };
                if (!w->pve[i] && pve_client_new(&o, &w->pve[i]) == 0)
                        pve_client_set_cancel(w->pve[i], &c->stop);
                return w->pve[i];
        }
        return NULL;
}

/* The host's agent address: config agents.hosts, else its /cluster/status IP (as seen by the provisioner, or
 * asked now). Malloc'd or NULL. */
static char *agent_address(struct controller *c, const char *region, const char *host) {
        for (size_t i = 0; i < c->cfg->agents.n_hosts; i++)
                if (strcmp(c->cfg->agents.hosts[i].node, host) == 0)
                        return strdup(c->cfg->agents.hosts[i].address);
        char key[512];
        snprintf(key, sizeof key, "%s/%s", region, host);
        pthread_mutex_lock(&c->mu);
        const char *ip = json_string_value(json_object_get(c->addresses, key));
        char *out = ip ? strdup(ip) : NULL;
        pthread_mutex_unlock(&c->mu);
        struct pve_client *pve = out ? NULL : pve_for_region(c, region);
        json_t *st = NULL;
        if (pve && pve_cluster_status(pve, &st) == 0 && pve_cluster_node_ip(st, host))
                out = strdup(pve_cluster_node_ip(st, host));
        json_decref(st);
        return out;
}

static struct agents_client *agent_for_host(void *userdata, const char *region, const char *host) {
        struct controller *c = userdata;
        struct ctl_worker *w = current_worker();
        if (!w || !c->cfg->agents.enabled || !region || !host)
                return NULL;
        for (size_t i = 0; i < w->n_agents; i++)
                if (strcmp(w->agents[i].region, region) == 0 && strcmp(w->agents[i].host, host) == 0)
                        return w->agents[i].client;
        char *address = agent_address(c, region, host), *url = NULL;
        struct ctl_agent *arr = realloc(w->agents, (w->n_agents + 1) * sizeof *arr);
        struct agents_client *client = NULL;
        if (arr)
                w->agents = arr;
        struct agents_options o = { .token = c->cfg->agents.token, .ca_file = c->cfg->agents.ca_file,
                                    .pool = c->agents_pool };
        if (arr && address && agents_url(address, c->cfg->agents.port, &url) == 0 &&
            (o.url = url, agents_client_new(&o, &client) == 0)) {
                agents_client_set_cancel(client, &c->stop);
                arr[w->n_agents++] = (struct ctl_agent){ strdup(region), strdup(host), client };
        }
        free(address);
        free(url);
        return client;
}

static const json_t *node_by_provider_id(void *userdata, const char *provider_id) {
        struct controller *c = userdata;
        struct ctl_worker *w = current_worker();
        if (!w || !provider_id)
                return NULL;
        pthread_mutex_lock(&c->mu);
        json_t *found = json_incref(controller__by_provider_id_locked(c, K_NODES, provider_id));
        pthread_mutex_unlock(&c->mu);
        json_decref(w->held_node);
        w->held_node = found;
        return found;
}

/* NodeClasses, NodePools and NodeClaims from the informers' store (a new reference), once listed. */
static json_t *cached_object(void *userdata, const struct kube_resource *rt, const char *name) {
        struct controller *c = userdata;
        enum ctl_kind kind = K_N;
        if (rt == &kube_nodeclasses)
                kind = K_CLASSES;
        else if (rt == &kube_nodepools)
                kind = K_POOLS;
        else if (rt == &kube_nodeclaims)
                kind = K_CLAIMS;
        json_t *obj = NULL;
        if (kind == K_N || !name)
                return NULL;
        pthread_mutex_lock(&c->mu);
        if (c->synced[kind])
                obj = json_incref(json_object_get(c->store[kind], name));
        pthread_mutex_unlock(&c->mu);
        return obj;
}

bool controller__backoff_active(void *userdata, const char *nodepool, const char *host) {
        struct controller *c = userdata;
        int64_t until;
        return c->launcher && c->ops->backoff_active &&
               c->ops->backoff_active(c->launcher, nodepool, host, rfc3339_now_ms(), &until);
}

/* ---- lifecycle ---- */

static int worker_new(struct controller *c, struct ctl_worker *w, size_t index) {
        *w = (struct ctl_worker){ .ctl = c, .index = index };
        w->pve = calloc(c->cfg->n_clusters + 1, sizeof *w->pve);
        struct kube_client_options o = { .pool = c->kube_pool };
        if (!w->pve || kube_client_new(c->kcfg, &o, &w->kube) < 0)
                return -ENOMEM;
        kube_client_set_cancel(w->kube, &c->stop);
        return 0;
}

int controller__workers_new(struct controller *c) {
        if (fiber_sched_new(&c->sched) < 0)
                return log_error_errno(-ENOMEM, "cannot set up the launch thread's tasks");
        c->work_init = true;
        c->workers = calloc(c->o.workers, sizeof *c->workers);
        if (!c->workers)
                return -ENOMEM;
        for (size_t i = 0; i < c->o.workers; i++) {
                c->n_workers = i + 1;
                if (worker_new(c, &c->workers[i], i) < 0)
                        return log_error_errno(-ENOMEM, "cannot set up launcher worker %zu", i);
        }
        if (kube_client_new(c->kcfg, &(struct kube_client_options){ .pool = c->kube_pool }, &c->launcher_kube) < 0)
                return -ENOMEM;
        kube_client_set_cancel(c->launcher_kube, &c->stop);
        struct launcher_env env = { .kube = c->launcher_kube, .cfg = c->cfg, .pve_for_region = pve_for_region,
                                    .agent_for_host = agent_for_host, .node_by_provider_id = node_by_provider_id,
                                    .userdata = c, .kube_for_thread = kube_for_thread, .cached = cached_object,
                                    .latency = c->latency, .stats = c->stats };
        int r = c->ops->create(&env, &c->o.launcher, &c->launcher);
        return r < 0 ? log_error_errno(r, "cannot set up the launcher") : 0;
}

int controller__workers_start(struct controller *c) {
        if (pthread_create(&c->launch, NULL, launch_main, c) != 0)
                return log_error_errno(-EAGAIN, "cannot start the launch thread");
        pthread_setname_np(c->launch, "launcher");
        c->launch_started = true;
        return 0;
}

static void worker_free(struct controller *c, struct ctl_worker *w) {
        for (size_t i = 0; w->pve && i < c->cfg->n_clusters; i++)
                pve_client_free(w->pve[i]);
        free(w->pve);
        for (size_t i = 0; i < w->n_agents; i++) {
                agents_client_free(w->agents[i].client);
                free(w->agents[i].region);
                free(w->agents[i].host);
        }
        free(w->agents);
        json_decref(w->held_node);
        kube_client_free(w->kube);
}

void controller__workers_free(struct controller *c) {
        if (c->launcher && c->ops)
                c->ops->destroy(c->launcher);
        c->launcher = NULL;
        for (size_t i = 0; i < c->n_workers; i++)
                worker_free(c, &c->workers[i]);
        free(c->workers);
        c->workers = NULL;
        c->n_workers = 0;
        for (size_t i = 0; i < c->n_items; i++)
                free(c->items[i].name);
        free(c->items);
        c->items = NULL;
        c->n_items = c->cap_items = 0;
        fiber_sched_free(c->sched);
        c->sched = NULL;
        c->work_init = false;
        kube_client_free(c->launcher_kube);
        c->launcher_kube = NULL;
}
