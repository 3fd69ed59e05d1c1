/* launcher_driver: a stand-in controller for the launcher integration tests. It lists NodeClaims, runs
 * launcher_reconcile on worker threads (requeues honoured), keeps a Node informer for node_by_provider_id, can run
 * garbage collection, fake the clock, and kill itself with SIGKILL when a chosen launch step is recorded.
 *
 * Usage: launcher_driver CONFIG.json, where CONFIG is
 *   {"kubeconfig": path, "regions": {"r1": {"url", "token_id", "token_secret", "ca_file"}},
 *    "agents": {"pve1": {"url", "token", "ca_file"}}, "options": {launcher_options fields},
 *    "workers": 2, "selector": "label selector of the claims to handle", "clock_offset_ms": 0,
 *    "node_policy": "static" | "simple" (simple: an unreachable agent falls back to Proxmox's accounting),
 *    "gc_interval_ms": 0, "crash_at": "Cloning:before" | "Cloning:after",
 *    "exit_when": "initialized" | "empty" | "gc" | "never", "timeout_ms": 120000}
 * Exit 0 when exit_when is met, 1 on timeout, 2 on bad input. Progress goes to stderr.
 *
 * launcher_driver apply KUBECONFIG FILE.yaml...: create the objects of YAML files (e.g. the CRDs; one that exists
 * already is left as it is). It does not wait for a CRD to serve its kind: the caller does (launchlib.World). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agents.h"
#include "config.h"
#include "kube.h"
#include "launcher.h"
#include "pve.h"
#include "yamlconf.h"

#define MAX_CLAIMS 256
#define MAX_WORKERS 16

struct claim_slot {
        char name[256];
        json_t *obj;        /* latest listed object */
        char rv[64];        /* resourceVersion last reconciled */
        int64_t due_ms;     /* requeue time; 0 = only on change */
        bool busy, present;
};

struct driver {
        json_t *conf;
        struct kube_config kc;
        struct config cfg;
        struct launcher *launcher;
        pthread_mutex_t mu;
        pthread_cond_t cond;
        struct claim_slot claims[MAX_CLAIMS];
        json_t *nodes; /* providerID -> Node */
        int64_t clock_offset_ms;
        char crash_step[64];
        bool crash_recorded;
        atomic_bool stop;
        atomic_int reconciles, errors;
};

/* Per-thread clients (a kube_client, pve_client or agents_client is not thread-safe). */
struct tls {
        struct kube_client *kube;
        json_t *pve;    /* region -> pointer (integer) */
        json_t *agents; /* host -> pointer */
        json_t *node;   /* the Node last returned by node_by_provider_id */
};

static __thread struct tls *tls;
static struct driver D;

static int64_t real_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_ms(void *userdata) {
        (void)userdata;
        return real_now_ms() + D.clock_offset_ms;
}

static void msleep(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}

static const char *conf_str(const char *key, const char *def) {
        const char *s = json_string_value(json_object_get(D.conf, key));
        return s ? s : def;
}

static int64_t conf_int(const char *key, int64_t def) {
        json_t *v = json_object_get(D.conf, key);
        return json_is_integer(v) ? json_integer_value(v) : def;
}

/* ---- clients ---- */

static struct tls *thread_state(void) {
        if (!tls) {
                tls = calloc(1, sizeof *tls);
                struct kube_client_options o = { .max_retries = 2, .backoff_base_ms = 50, .backoff_max_ms = 500 };
                if (!tls || kube_client_new(&D.kc, &o, &tls->kube) < 0) {
                        fprintf(stderr, "driver: cannot create a kube client\n");
                        exit(1);
                }
                tls->pve = json_object();
                tls->agents = json_object();
        }
        return tls;
}

static void thread_state_free(void) {
        const char *k;
        json_t *v;
        if (!tls)
                return;
        json_object_foreach(tls->pve, k, v)
                pve_client_free((struct pve_client *)(uintptr_t)json_integer_value(v));
        json_object_foreach(tls->agents, k, v)
                agents_client_free((struct agents_client *)(uintptr_t)json_integer_value(v));
        json_decref(tls->pve);
        json_decref(tls->agents);
        json_decref(tls->node);
        kube_client_free(tls->kube);
        free(tls);
        tls = NULL;
}

static struct kube_client *kube_for_thread(void *userdata) {
        (void)userdata;
        return thread_state()->kube;
}

static struct pve_client *pve_for_region(void *userdata, const char *region) {
        (void)userdata;
        struct tls *t = thread_state();
        json_t *have = json_object_get(t->pve, region);
        if (have)
                return (struct pve_client *)(uintptr_t)json_integer_value(have);
        json_t *r = json_object_get(json_object_get(D.conf, "regions"), region);
        if (!r)
                return NULL;
        struct pve_options o = { .url = json_string_value(json_object_get(r, "url")),
                                 .token_id = json_string_value(json_object_get(r, "token_id")),
                                 .token_secret = json_string_value(json_object_get(r, "token_secret")),
                                 .ca_file = json_string_value(json_object_get(r, "ca_file")), .timeout_ms = 20000 };
        struct pve_client *c = NULL;
        if (pve_client_new(&o, &c) < 0)
                return NULL;
        json_object_set_new(t->pve, region, json_integer((json_int_t)(uintptr_t)c));
        return c;
}

static struct agents_client *agent_for_host(void *userdata, const char *region, const char *host) {
        (void)userdata;
        (void)region;
        struct tls *t = thread_state();
        json_t *have = json_object_get(t->agents, host);
        if (have)
                return (struct agents_client *)(uintptr_t)json_integer_value(have);
        json_t *a = json_object_get(json_object_get(D.conf, "agents"), host);
        if (!a)
                return NULL;
        struct agents_options o = { .url = json_string_value(json_object_get(a, "url")),
                                    .token = json_string_value(json_object_get(a, "token")),
                                    .ca_file = json_string_value(json_object_get(a, "ca_file")),
                                    .connect_timeout_ms = 3000 };
        struct agents_client *c = NULL;
        if (agents_client_new(&o, &c) < 0)
                return NULL;
        json_object_set_new(t->agents, host, json_integer((json_int_t)(uintptr_t)c));
        return c;
}

static const json_t *node_by_provider_id(void *userdata, const char *provider_id) {
        (void)userdata;
        struct tls *t = thread_state();
        json_decref(t->node);
        pthread_mutex_lock(&D.mu);
        json_t *n = json_object_get(D.nodes, provider_id);
        t->node = n ? json_deep_copy(n) : NULL;
        pthread_mutex_unlock(&D.mu);
        return t->node;
}

static void on_step(void *userdata, const char *claim, const char *step, bool recorded) {
        (void)userdata;
        char at[96];
        snprintf(at, sizeof at, "%s:%s", step, recorded ? "after" : "before");
        if (D.crash_step[0] && strcmp(at, D.crash_step) == 0) {
                fprintf(stderr, "driver: crash at %s of %s\n", at, claim);
                raise(SIGKILL);
        }
}

/* ---- Node informer ---- */

static int node_event(enum kube_watch_event ev, const json_t *obj, void *userdata) {
        (void)userdata;
        const char *pid = json_string_value(json_object_get(json_object_get(obj, "spec"), "providerID"));
        if (ev == KUBE_EVENT_SYNCED || !pid)
                return 0;
        pthread_mutex_lock(&D.mu);
        if (ev == KUBE_EVENT_DELETED)
                json_object_del(D.nodes, pid);
        else
                json_object_set_new(D.nodes, pid, json_deep_copy(obj));
        pthread_mutex_unlock(&D.mu);
        return 0;
}

static void *node_informer(void *arg) {
        (void)arg;
        struct kube_client *c = NULL;
        struct kube_informer *inf = NULL;
        struct kube_informer_options o = { .watch_timeout_s = 30, .backoff_base_ms = 50, .backoff_max_ms = 500 };
        if (kube_client_new(&D.kc, NULL, &c) < 0 || kube_informer_new(c, &kube_nodes, NULL, &o, node_event, NULL, &inf) < 0)
                return NULL;
        kube_client_set_cancel(c, &D.stop);
        kube_informer_run(inf);
        const struct kube_informer_stats *s = kube_informer_stats(inf);
        fprintf(stderr, "driver: node informer: lists=%u watches=%u resumes=%u failures=%u\n", s->lists, s->watches,
                s->resumes, s->failures);
        kube_informer_free(inf);
        kube_client_free(c);
        return NULL;
}

/* ---- claims ---- */

static struct claim_slot *slot_for(const char *name, bool create) {
        struct claim_slot *free_slot = NULL;
        for (size_t i = 0; i < MAX_CLAIMS; i++) {
                if (D.claims[i].obj && strcmp(D.claims[i].name, name) == 0)
                        return &D.claims[i];
                if (!D.claims[i].obj && !D.claims[i].busy && !free_slot)
                        free_slot = &D.claims[i];
        }
        if (create && free_slot)
                snprintf(free_slot->name, sizeof free_slot->name, "%s", name);
        return create ? free_slot : NULL;
}

static const char *rv_of(const json_t *obj) {
        const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        return rv ? rv : "";
}

/* Take a new list: new or changed claims become due; vanished ones are dropped. */
static void update_claims(json_t *items) {
        size_t i;
        json_t *o;
        pthread_mutex_lock(&D.mu);
        for (size_t k = 0; k < MAX_CLAIMS; k++)
                D.claims[k].present = false;
        json_array_foreach(items, i, o) {
                const char *name = json_string_value(json_object_get(json_object_get(o, "metadata"), "name"));
                struct claim_slot *s = name ? slot_for(name, true) : NULL;
                if (!s)
                        continue;
                json_decref(s->obj);
                s->obj = json_incref(o);
                s->present = true;
                if (strcmp(s->rv, rv_of(o)) != 0 && !s->due_ms)
                        s->due_ms = 1;
        }
        for (size_t k = 0; k < MAX_CLAIMS; k++) {
                if (D.claims[k].obj && !D.claims[k].present) {
                        json_decref(D.claims[k].obj);
                        D.claims[k].obj = NULL;
                        D.claims[k].rv[0] = '\0';
                        D.claims[k].due_ms = 0;
                }
        }
        pthread_cond_broadcast(&D.cond);
        pthread_mutex_unlock(&D.mu);
}

static struct claim_slot *take_due(json_t **ret_obj) {
        int64_t now = real_now_ms();
        for (size_t k = 0; k < MAX_CLAIMS; k++) {
                struct claim_slot *s = &D.claims[k];
                if (s->obj && !s->busy && s->due_ms && s->due_ms <= now) {
                        s->busy = true;
                        s->due_ms = 0;
                        snprintf(s->rv, sizeof s->rv, "%s", rv_of(s->obj));
                        *ret_obj = json_incref(s->obj);
                        return s;
                }
        }
        return NULL;
}

static void *worker(void *arg) {
        (void)arg;
        while (!D.stop) {
                json_t *obj = NULL;
                pthread_mutex_lock(&D.mu);
                struct claim_slot *s = take_due(&obj);
                if (!s) {
                        struct timespec ts;
                        clock_gettime(CLOCK_REALTIME, &ts);
                        ts.tv_nsec += 50 * 1000000L;
                        if (ts.tv_nsec >= 1000000000L) {
                                ts.tv_sec++;
                                ts.tv_nsec -= 1000000000L;
                        }
                        pthread_cond_timedwait(&D.cond, &D.mu, &ts);
                        pthread_mutex_unlock(&D.mu);
                        continue;
                }
                pthread_mutex_unlock(&D.mu);
                int64_t requeue = 0;
                int r = launcher_reconcile(D.launcher, obj, &requeue);
                D.reconciles++;
                if (r < 0)
                        D.errors++;
                json_decref(obj);
                pthread_mutex_lock(&D.mu);
                s->busy = false;
                s->due_ms = real_now_ms() + (r < 0 ? 500 : requeue > 0 ? requeue : 0);
                if (r >= 0 && requeue == 0)
                        s->due_ms = 0;
                pthread_mutex_unlock(&D.mu);
        }
        thread_state_free();
        return NULL;
}

static const char *claim_step(const json_t *o) {
        const char *s = json_string_value(json_object_get(json_object_get(o, "status"), "launchStep"));
        return s ? s : "";
}

static bool exit_condition(const json_t *items) {
        const char *when = conf_str("exit_when", "initialized");
        size_t i;
        json_t *o;
        if (strcmp(when, "empty") == 0)
                return json_array_size(items) == 0;
        if (strcmp(when, "initialized") != 0 || json_array_size(items) == 0)
                return false;
        json_array_foreach(items, i, o)
                if (strcmp(claim_step(o), "Initialized") != 0)
                        return false;
        return true;
}

static int list_claims(struct kube_client *c, json_t **ret_items) {
        json_t *list = NULL;
        struct kube_list_options o = { .label_selector = conf_str("selector", NULL) };
        int r = kube_list(c, &kube_nodeclaims, NULL, &o, &list);
        if (r < 0)
                return r;
        *ret_items = json_incref(json_object_get(list, "items"));
        json_decref(list);
        return 0;
}

/* ---- set-up ---- */

static int load_conf(const char *path) {
        json_error_t e;
        char err[256];
        D.conf = json_load_file(path, 0, &e);
        if (!D.conf) {
                fprintf(stderr, "driver: %s: %s\n", path, e.text);
                return -EINVAL;
        }
        if (kube_config_load_kubeconfig(conf_str("kubeconfig", ""), &D.kc, err, sizeof err) < 0) {
                fprintf(stderr, "driver: %s\n", err);
                return -EINVAL;
        }
        config_init(&D.cfg);
        json_t *regions = json_object_get(D.conf, "regions"), *v;
        const char *k;
        D.cfg.clusters = calloc(json_object_size(regions) + 1, sizeof *D.cfg.clusters);
        json_object_foreach(regions, k, v)
                D.cfg.clusters[D.cfg.n_clusters++].region = strdup(k);
        D.cfg.node_policy = strcmp(conf_str("node_policy", "static"), "simple") == 0 ? CONFIG_NODE_POLICY_SIMPLE
                                                                                   : CONFIG_NODE_POLICY_STATIC;
        D.clock_offset_ms = conf_int("clock_offset_ms", 0);
        snprintf(D.crash_step, sizeof D.crash_step, "%s", conf_str("crash_at", ""));
        return 0;
}

static int make_launcher(void) {
        json_t *o = json_object_get(D.conf, "options");
        struct launcher_options lo = {
                .clone_timeout_ms = json_integer_value(json_object_get(o, "clone_timeout_ms")),
                .registration_timeout_ms = json_integer_value(json_object_get(o, "registration_timeout_ms")),
                .reservation_ttl_s = json_integer_value(json_object_get(o, "reservation_ttl_s")),
                .orphan_vm_age_ms = json_integer_value(json_object_get(o, "orphan_vm_age_ms")),
                .backoff_base_ms = json_integer_value(json_object_get(o, "backoff_base_ms")),
                .backoff_max_ms = json_integer_value(json_object_get(o, "backoff_max_ms")),
                .token_ttl_s = json_integer_value(json_object_get(o, "token_ttl_s")),
        };
        struct launcher_env env = { .kube = thread_state()->kube, .cfg = &D.cfg, .pve_for_region = pve_for_region,
                                    .agent_for_host = agent_for_host, .node_by_provider_id = node_by_provider_id,
                                    .kube_for_thread = kube_for_thread, .on_step = on_step, .now_ms = now_ms };
        return launcher_new(&env, &lo, &D.launcher);
}

static int run_gc_once(void) {
        json_t *items = NULL;
        int r = list_claims(thread_state()->kube, &items);
        if (r == 0)
                r = launcher_collect_garbage(D.launcher, items);
        json_decref(items);
        fprintf(stderr, "driver: gc: %d\n", r);
        return r;
}

static int main_loop(void) {
        int64_t deadline = real_now_ms() + conf_int("timeout_ms", 120000), next_gc = 0;
        int64_t gc_every = conf_int("gc_interval_ms", 0);
        while (real_now_ms() < deadline) {
                json_t *items = NULL;
                if (list_claims(thread_state()->kube, &items) < 0) {
                        msleep(100);
                        continue;
                }
                update_claims(items);
                bool done = exit_condition(items);
                if (gc_every > 0 && real_now_ms() >= next_gc) {
                        launcher_collect_garbage(D.launcher, items);
                        next_gc = real_now_ms() + gc_every;
                }
                json_decref(items);
                if (done)
                        return 0;
                msleep(100);
        }
        fprintf(stderr, "driver: timed out\n");
        return 1;
}

/* ---- apply ---- */

static const struct kube_resource *resource_of(const json_t *obj) {
        static const struct kube_resource *const known[] = { &kube_crds,        &kube_nodepools, &kube_nodeclasses,
                                                             &kube_nodeclaims,  &kube_secrets,   &kube_configmaps,
                                                             &kube_namespaces,  NULL };
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        for (size_t i = 0; kind && known[i]; i++)
                if (strcmp(known[i]->kind, kind) == 0)
                        return known[i];
        return NULL;
}

static int apply(int argc, char **argv) {
        char err[256];
        struct kube_client *c = NULL;
        if (kube_config_load_kubeconfig(argv[2], &D.kc, err, sizeof err) < 0 || kube_client_new(&D.kc, NULL, &c) < 0) {
                fprintf(stderr, "driver: %s\n", err);
                return 2;
        }
        int rc = 0;
        for (int i = 3; i < argc && rc == 0; i++) {
                json_t *obj = NULL;
                if (yamlconf_load(argv[i], &obj, err, sizeof err) < 0 || !resource_of(obj)) {
                        fprintf(stderr, "driver: %s: %s\n", argv[i], obj ? "unknown kind" : err);
                        rc = 2;
                } else {
                        const char *ns = json_string_value(json_object_get(json_object_get(obj, "metadata"), "namespace"));
                        int r = kube_create(c, resource_of(obj), ns, obj, NULL);
                        if (r < 0 && r != -EEXIST) {
                                fprintf(stderr, "driver: create %s: %s\n", argv[i], kube_client_error(c));
                                rc = 1;
                        }
                }
                json_decref(obj);
        }
        kube_client_free(c);
        kube_config_done(&D.kc);
        return rc;
}

int main(int argc, char **argv) {
        pthread_t workers[MAX_WORKERS], informer;
        if (argc >= 3 && strcmp(argv[1], "apply") == 0)
                return apply(argc, argv);
        if (argc != 2) {
                fprintf(stderr, "usage: launcher_driver CONFIG.json\n");
                return 2;
        }
        pthread_mutex_init(&D.mu, NULL);
        pthread_cond_init(&D.cond, NULL);
        D.nodes = json_object();
        if (load_conf(argv[1]) < 0 || make_launcher() < 0)
                return 2;
        if (strcmp(conf_str("exit_when", ""), "gc") == 0) {
                int r = run_gc_once();
                launcher_free(D.launcher);
                thread_state_free();
                return r < 0 ? 1 : 0;
        }
        int n = (int)conf_int("workers", 2);
        n = n < 1 ? 1 : n > MAX_WORKERS ? MAX_WORKERS : n;
        pthread_create(&informer, NULL, node_informer, NULL);
        for (int i = 0; i < n; i++)
                pthread_create(&workers[i], NULL, worker, NULL);
        int rc = main_loop();
        D.stop = true;
        pthread_cond_broadcast(&D.cond);
        for (int i = 0; i < n; i++)
                pthread_join(workers[i], NULL);
        pthread_join(informer, NULL);
        fprintf(stderr, "driver: %d reconciles, %d errors\n", (int)D.reconciles, (int)D.errors);
        launcher_free(D.launcher);
        for (size_t k = 0; k < MAX_CLAIMS; k++)
                json_decref(D.claims[k].obj);
        json_decref(D.nodes);
        json_decref(D.conf);
        config_done(&D.cfg);
        kube_config_done(&D.kc);
        thread_state_free();
        return rc;
}
