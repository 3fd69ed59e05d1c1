/* launcher: the launcher object, the step machine of one NodeClaim reconcile, status writes, back-off of
 * (node pool, host) pairs and the VMIDs this process is about to use. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "cloudinit.h"
#include "log.h"
#include "nodeclaim.h"
#include "rfc3339.h"

#define DEFAULT_CLONE_TIMEOUT_MS (10L * 60 * 1000)
#define DEFAULT_REGISTRATION_TIMEOUT_MS (15L * 60 * 1000)
#define DEFAULT_RESERVATION_TTL_S 900
#define DEFAULT_ORPHAN_AGE_MS (10L * 60 * 1000)
#define DEFAULT_BACKOFF_BASE_MS (30L * 1000)
#define DEFAULT_BACKOFF_MAX_MS (30L * 60 * 1000)
#define DEFAULT_TOKEN_TTL_S 3600
#define MAX_RESTARTS 4
#define MAX_STEPS 32
#define MAX_VMID_PROBES 1000

/* ---- object ---- */

static int64_t or_default(int64_t v, int64_t def) {
        return v > 0 ? v : def;
}

int launcher_new(const struct launcher_env *env, const struct launcher_options *opts, struct launcher **ret) {
        if (!env || !env->kube || !env->pve_for_region)
                return -EINVAL;
        struct launcher *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->env = *env;
        struct launcher_options o = opts ? *opts : (struct launcher_options){ 0 };
        o.clone_timeout_ms = or_default(o.clone_timeout_ms, DEFAULT_CLONE_TIMEOUT_MS);
        o.registration_timeout_ms = or_default(o.registration_timeout_ms, DEFAULT_REGISTRATION_TIMEOUT_MS);
        o.reservation_ttl_s = or_default(o.reservation_ttl_s, DEFAULT_RESERVATION_TTL_S);
        o.orphan_vm_age_ms = or_default(o.orphan_vm_age_ms, DEFAULT_ORPHAN_AGE_MS);
        o.backoff_base_ms = or_default(o.backoff_base_ms, DEFAULT_BACKOFF_BASE_MS);
        o.backoff_max_ms = or_default(o.backoff_max_ms, DEFAULT_BACKOFF_MAX_MS);
        o.token_ttl_s = or_default(o.token_ttl_s, DEFAULT_TOKEN_TTL_S);
        l->o = o;
        pthread_mutex_init(&l->mu, NULL);
        pthread_mutex_init(&l->iso_mu, NULL);
        launcher_cache_init(&l->cache);
        l->written = json_object();
        if (!l->written) {
                launcher_free(l);
                return -ENOMEM;
        }
        *ret = l;
        return 0;
}

void launcher_free(struct launcher *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n_backoffs; i++) {
                free(l->backoffs[i].nodepool);
                free(l->backoffs[i].host);
        }
        free(l->backoffs);
        free(l->vmids);
        free(l->seen);
        pthread_mutex_destroy(&l->mu);
        pthread_mutex_destroy(&l->iso_mu);
        for (size_t i = 0; i < LAUNCHER_TEMPLATE_SETS; i++) {
                free(l->templates[i].key);
                cloudinit_set_free(l->templates[i].set);
        }
        launcher_cache_done(&l->cache);
        json_decref(l->written);
        free(l);
}

int64_t launcher_now(const struct launcher *l) {
        if (l->env.now_ms)
                return l->env.now_ms(l->env.userdata);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- back-off of (node pool, host) ---- */

static struct launcher_backoff_entry *backoff_find(const struct launcher *l, const char *nodepool, const char *host) {
        for (size_t i = 0; i < l->n_backoffs; i++)
                if (strcmp(l->backoffs[i].nodepool, nodepool) == 0 && strcmp(l->backoffs[i].host, host) == 0)
                        return &l->backoffs[i];
        return NULL;
}

static struct launcher_backoff_entry *backoff_add(struct launcher *l, const char *nodepool, const char *host) {
        if (ARRAY_GROW(&l->backoffs, &l->cap_backoffs, l->n_backoffs, 8) < 0)
                return NULL;
        struct launcher_backoff_entry *e = &l->backoffs[l->n_backoffs];
        *e = (struct launcher_backoff_entry){ strdup(nodepool), strdup(host), 0, 0 };
        if (!e->nodepool || !e->host) {
                free(e->nodepool);
                free(e->host);
                return NULL;
        }
        l->n_backoffs++;
        return e;
}

void launcher_backoff_note(struct launcher *l, const char *nodepool, const char *host, int64_t now_ms) {
        pthread_mutex_lock(&l->mu);
        struct launcher_backoff_entry *e = backoff_find(l, nodepool, host);
        if (!e)
                e = backoff_add(l, nodepool, host);
        if (e) {
                e->failures++;
                e->until_ms = now_ms + launcher_backoff_delay(e->failures, l->o.backoff_base_ms, l->o.backoff_max_ms);
                log_info("launcher: node pool %s on host %s paused for %lld ms after %u failed launch(es)", nodepool,
                         host, (long long)(e->until_ms - now_ms), e->failures);
        }
        pthread_mutex_unlock(&l->mu);
}

void launcher_backoff_clear(struct launcher *l, const char *nodepool, const char *host) {
        pthread_mutex_lock(&l->mu);
        struct launcher_backoff_entry *e = backoff_find(l, nodepool, host);
        if (e) {
                e->failures = 0;
                e->until_ms = 0;
        }
        pthread_mutex_unlock(&l->mu);
}

bool launcher_backoff_active(const struct launcher *l, const char *nodepool, const char *host, int64_t now_ms,
                             int64_t *ret_until_ms) {
        struct launcher *m = (struct launcher *)l; /* the mutex only */
        pthread_mutex_lock(&m->mu);
        const struct launcher_backoff_entry *e = backoff_find(l, nodepool, host);
        bool active = e && e->until_ms > now_ms;
        int64_t until = e ? e->until_ms : 0;
        pthread_mutex_unlock(&m->mu);
        if (active && ret_until_ms)
                *ret_until_ms = until;
        return active;
}

/* ---- VMIDs being picked ---- */

static bool vmid_held(const struct launcher *l, uint32_t vmid) {
        for (size_t i = 0; i < l->n_vmids; i++)
                if (l->vmids[i] == vmid)
                        return true;
        return false;
}

static int vmid_hold(struct launcher *l, uint32_t vmid) {
        if (vmid_held(l, vmid))
                return -EEXIST;
        if (ARRAY_GROW(&l->vmids, &l->cap_vmids, l->n_vmids, 16) < 0)
                return -ENOMEM;
        l->vmids[l->n_vmids++] = vmid;
        return 0;
}

int launcher_pick_vmid(struct lctx *c, uint32_t *ret_vmid) {
        uint32_t vmid;
        int r = pve_nextid(c->pve, &vmid);
        if (r < 0)
                return launcher_errf(c, r, "GET /cluster/nextid: %s", pve_client_error(c->pve));
        for (unsigned i = 0; i < MAX_VMID_PROBES; i++, vmid++) {
                if (i > 0 && (r = pve_nextid_check(c->pve, vmid)) == -EEXIST)
                        continue;
                if (r < 0 && r != -EEXIST)
                        return launcher_errf(c, r, "GET /cluster/nextid?vmid=%u: %s", vmid, pve_client_error(c->pve));
                pthread_mutex_lock(&c->l->mu);
                r = vmid_hold(c->l, vmid);
                pthread_mutex_unlock(&c->l->mu);
                if (r == -EEXIST)
                        continue;
                if (r < 0)
                        return r;
                launcher_unpick_vmid(c);
                c->picked_vmid = vmid;
                *ret_vmid = vmid;
                return 0;
        }
        return launcher_errf(c, -ENOSPC, "no free VMID found");
}

void launcher_unpick_vmid(struct lctx *c) {
        struct launcher *l = c->l;
        if (!c->picked_vmid)
                return;
        pthread_mutex_lock(&l->mu);
        for (size_t i = 0; i < l->n_vmids; i++) {
                if (l->vmids[i] == c->picked_vmid) {
                        l->vmids[i] = l->vmids[--l->n_vmids];
                        break;
                }
        }
        pthread_mutex_unlock(&l->mu);
        c->picked_vmid = 0;
}

/* ---- status ---- */

const json_t *launcher_status(const struct lctx *c) {
        return json_object_get(c->claim, "status");
}

const char *launcher_step_done(const struct lctx *c) {
        return c->step ? c->step : launcher_status_str(c, "launchStep");
}

static void step_hooks(struct lctx *c, const char *step, bool done) {
        const struct launcher_env *e = &c->l->env;
        if (e->on_step)
                e->on_step(e->userdata, c->name, step, done);
}

void launcher_step_unrecorded(struct lctx *c, const char *step, json_t *changes) {
        log_info("launcher: NodeClaim %s: %s (recorded with the next step)", c->name, step);
        step_hooks(c, step, false);
        if (c->pending) {
                json_object_update(c->pending, changes);
                json_decref(changes);
        } else {
                c->pending = changes;
        }
        c->step = step;
        step_hooks(c, step, true);
}

static void drop_unrecorded(struct lctx *c) {
        json_decref(c->pending);
        c->pending = NULL;
        c->step = NULL;
}

const char *launcher_status_str(const struct lctx *c, const char *key) {
        const char *s = json_string_value(json_object_get(launcher_status(c), key));
        return s ? s : "";
}

int64_t launcher_status_int(const struct lctx *c, const char *key) {
        return json_integer_value(json_object_get(launcher_status(c), key));
}

int64_t launcher_status_time(const struct lctx *c, const char *key) {
        int64_t ms;
        return rfc3339_parse(launcher_status_str(c, key), &ms) == 0 ? ms : 0;
}

static int apply_conditions(json_t *status, json_t *conds, int64_t now) {
        size_t i;
        json_t *e;
        json_array_foreach(conds, i, e) {
                int r = launcher_condition_set(status, json_string_value(json_object_get(e, "type")),
                                               json_string_value(json_object_get(e, "status")),
                                               json_string_value(json_object_get(e, "reason")),
                                               json_string_value(json_object_get(e, "message")), now);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int apply_changes(json_t *obj, json_t *changes, int64_t now) {
        json_t *status = json_object_get(obj, "status"), *v;
        const char *k;
        if (!json_is_object(status)) {
                status = json_object();
                if (!status || json_object_set_new(obj, "status", status) < 0)
                        return -ENOMEM;
        }
        json_object_foreach(changes, k, v) {
                int r = 0;
                if (strcmp(k, "conditions") == 0)
                        r = apply_conditions(status, v, now);
                else if (json_is_null(v))
                        json_object_del(status, k);
                else
                        r = json_object_set(status, k, v);
                if (r < 0)
                        return -ENOMEM;
        }
        return 0;
}

static const char *claim_rv(const json_t *claim) {
        return json_string_value(json_object_get(json_object_get(claim, "metadata"), "resourceVersion"));
}

/* Per claim, what this process last wrote: {"claim": the write as stored, "rvs": [the versions of its last
 * writes, oldest first]}. */
#define WRITTEN_RVS_KEPT 8

/* The claim's entry, made if missing. NULL on ENOMEM. */
static json_t *written_entry(struct launcher *l, const char *name) {
        json_t *w = json_object_get(l->written, name);
        if (!w && (w = json_pack("{s:[]}", "rvs")) && json_object_set_new(l->written, name, w) < 0)
                return NULL;
        return w;
}

/* Remember stored as our last write of the claim; stored NULL forgets the claim. */
static void note_written(struct launcher *l, const char *name, const json_t *stored) {
        const char *rv = stored ? claim_rv(stored) : NULL;
        if (!name || !name[0])
                return;
        pthread_mutex_lock(&l->mu);
        json_t *w = rv ? written_entry(l, name) : NULL;
        if (!rv) {
                json_object_del(l->written, name);
        } else if (w) {
                json_t *rvs = json_object_get(w, "rvs");
                if (json_array_size(rvs) >= WRITTEN_RVS_KEPT)
                        json_array_remove(rvs, 0);
                json_array_append_new(rvs, json_string(rv));
                json_object_set(w, "claim", (json_t *)stored);
        }
        pthread_mutex_unlock(&l->mu);
}

/* Ours when rv is the version of one of our last writes; then *ret_last (if asked) is a copy of the last one. */
static bool wrote(struct launcher *l, const char *name, const char *rv, json_t **ret_last) {
        bool ours = false;
        size_t i;
        json_t *v;
        pthread_mutex_lock(&l->mu);
        json_t *w = json_object_get(l->written, name ? name : "");
        json_array_foreach(json_object_get(w, "rvs"), i, v) {
                if (rv && strcmp(json_string_value(v), rv) == 0) {
                        ours = true;
                        break;
                }
        }
        if (ours && ret_last) /* claims are never changed in place: shared, not copied */
                *ret_last = json_incref(json_object_get(w, "claim"));
        pthread_mutex_unlock(&l->mu);
        return ours;
}

static bool wrote_any(struct launcher *l, const char *name) {
        pthread_mutex_lock(&l->mu);
        bool any = json_object_get(l->written, name ? name : "") != NULL;
        pthread_mutex_unlock(&l->mu);
        return any;
}

bool launcher_wrote(struct launcher *l, const char *name, const char *rv) {
        return wrote(l, name, rv, NULL);
}

void launcher_forget_written(struct launcher *l, const char *name) {
        note_written(l, name, NULL);
}

static void replace_claim(struct lctx *c, json_t *fresh) {
        json_decref(c->claim);
        c->claim = fresh;
}

static bool same_launch(const json_t *a, const json_t *b) {
        const json_t *sa = json_object_get(a, "status"), *sb = json_object_get(b, "status");
        const char *ua = json_string_value(json_object_get(json_object_get(a, "metadata"), "uid"));
        const char *ub = json_string_value(json_object_get(json_object_get(b, "metadata"), "uid"));
        const char *pa = json_string_value(json_object_get(sa, "launchStep"));
        const char *pb = json_string_value(json_object_get(sb, "launchStep"));
        return ua && ub && strcmp(ua, ub) == 0 && json_equal(json_object_get(sa, "vmid"), json_object_get(sb, "vmid")) &&
               ((!pa && !pb) || (pa && pb && strcmp(pa, pb) == 0)) &&
               !json_object_get(json_object_get(b, "metadata"), "deletionTimestamp");
}

/* On a conflict: take the fresh claim; go on only if nobody else moved the launch meanwhile. */
static int refresh_after_conflict(struct lctx *c) {
        json_t *fresh = NULL;
        int r = kube_get(c->kube, &kube_nodeclaims, NULL, c->name, &fresh);
        if (r < 0)
                return launcher_errf(c, r, "GET NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        bool same = same_launch(c->claim, fresh);
        replace_claim(c, fresh);
        return same ? 0 : -EAGAIN;
}

/* A copy of the claim whose status can be changed: the rest is shared with the claim, which stays as it is. */
static json_t *claim_for_write(const json_t *claim) {
        json_t *obj = json_copy((json_t *)claim), *status = json_object_get(claim, "status");
        if (obj && status && json_object_set_new(obj, "status", json_deep_copy(status)) < 0) {
                json_decref(obj);
                return NULL;
        }
        return obj;
}

int launcher_commit(struct lctx *c, json_t *changes) {
        int r = changes ? -ESTALE : -ENOMEM;
        if (changes && c->pending) /* what an unrecorded step did goes with this write */
                json_object_update_missing(changes, c->pending);
        for (unsigned attempt = 0; changes && r == -ESTALE && attempt < MAX_RESTARTS; attempt++) {
                json_t *obj = claim_for_write(c->claim), *stored = NULL;
                r = obj ? apply_changes(obj, changes, c->now) : -ENOMEM;
                if (r == 0)
                        r = kube_update_from_as_sent(c->kube, &kube_nodeclaims, NULL, "status", c->claim, obj, &stored);
                json_decref(obj);
                if (r == 0) {
                        note_written(c->l, c->name, stored);
                        replace_claim(c, stored);
                        drop_unrecorded(c);
                } else if (r == -ESTALE)
                        r = refresh_after_conflict(c) ?: -ESTALE;
                else
                        launcher_errf(c, r, "write NodeClaim %s status: %s", c->name, kube_client_error(c->kube));
        }
        json_decref(changes);
        return r == -ESTALE ? -EAGAIN : r;
}

int launcher_set_step(struct lctx *c, const char *step, json_t *changes) {
        if (!changes)
                changes = json_object();
        if (!changes)
                return -ENOMEM;
        json_object_set_new(changes, "launchStep", json_string(step));
        json_object_set_new(changes, "attempts", json_null());
        json_object_set_new(changes, "lastError", json_null());
        log_info("launcher: NodeClaim %s: %s", c->name, step);
        step_hooks(c, step, false);
        int r = launcher_commit(c, changes);
        if (r == 0)
                step_hooks(c, step, true);
        return r;
}

int launcher_errf(struct lctx *c, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
        return r;
}

int launcher_failf(struct lctx *c, const char *reason, const char *fmt, ...) {
        va_list ap;
        snprintf(c->fail_reason, sizeof c->fail_reason, "%s", reason);
        va_start(ap, fmt);
        vsnprintf(c->err, sizeof c->err, fmt, ap);
        va_end(ap);
        return LSTEP_FAIL;
}

int launcher_wait(struct lctx *c, int64_t ms) {
        c->requeue_ms = ms > 0 ? ms : 1;
        return LSTEP_WAIT;
}

/* ---- what steps need ---- */

/* From the controller's cache when it has the object (no request per launch step), else from the API server. */
static int need_object(struct lctx *c, const struct kube_resource *rt, const char *name, json_t **ret) {
        const struct launcher_env *e = &c->l->env;
        json_t *obj = e->cached ? e->cached(e->userdata, rt, name) : NULL;
        if (obj) {
                *ret = obj;
                return 0;
        }
        return kube_get(c->kube, rt, NULL, name, ret);
}

int launcher_need_nodeclass(struct lctx *c) {
        const char *name = json_string_value(
                json_object_get(json_object_get(json_object_get(c->claim, "spec"), "nodeClassRef"), "name"));
        if (c->nodeclass)
                return 0;
        if (!name)
                return launcher_failf(c, "InvalidNodeClaim", "spec.nodeClassRef.name: required");
        int r = need_object(c, &kube_nodeclasses, name, &c->nodeclass);
        if (r < 0)
                return launcher_errf(c, r, "ProxmoxNodeClass %s: %s", name, kube_client_error(c->kube));
        return 0;
}

int launcher_need_pool(struct lctx *c) {
        if (c->pool)
                return 0;
        int r = need_object(c, &kube_nodepools, c->nodepool, &c->pool);
        if (r < 0)
                return launcher_errf(c, r, "NodePool %s: %s", c->nodepool, kube_client_error(c->kube));
        return 0;
}

static int catalog_for(const json_t *spec, struct shape_catalog **ret, char *err, size_t errlen) {
        struct shape_options so;
        shapes_options_default(&so);
        json_t *kubelet = json_object_get(spec, "kubeletConfiguration");
        int r = kubelet ? shapes_options_from_kubelet(kubelet, &so, err, errlen) : 0;
        if (r == 0)
                r = shapes_catalog_default(&so, ret);
        json_t *custom = json_object_get(spec, "instanceTypes");
        if (r == 0 && custom)
                r = shapes_catalog_add_custom(*ret, custom, &so, err, errlen);
        return r;
}

int launcher_need_shape(struct lctx *c) {
        struct shape_catalog *cat = NULL;
        char err[256] = "";
        if (c->have_shape)
                return 0;
        int r = launcher_need_nodeclass(c);
        if (r != 0)
                return r;
        const char *type = json_string_value(json_object_get(json_object_get(c->claim, "spec"), "instanceType"));
        r = catalog_for(json_object_get(c->nodeclass, "spec"), &cat, err, sizeof err);
        const struct shape *s = r == 0 && type ? shapes_catalog_find(cat, type) : NULL;
        if (s) {
                c->shape = *s;
                c->have_shape = true;
        }
        shapes_catalog_free(cat);
        if (r < 0)
                return launcher_failf(c, "InvalidNodeClass", "ProxmoxNodeClass: %s", err);
        if (!s)
                return launcher_failf(c, "UnknownInstanceType", "instance type %s is not offered by the NodeClass",
                                      type ? type : "(none)");
        return 0;
}

int launcher_need_pve(struct lctx *c) {
        return c->pve ? 0 : launcher_failf(c, "UnknownRegion", "region %s is not configured", c->region);
}

/* ---- one reconcile ---- */

static const char *requirement_value(const json_t *claim, const char *key) {
        size_t i;
        json_t *req;
        json_array_foreach(json_object_get(json_object_get(claim, "spec"), "requirements"), i, req) {
                const char *k = json_string_value(json_object_get(req, "key"));
                const char *op = json_string_value(json_object_get(req, "operator"));
                json_t *values = json_object_get(req, "values");
                if (k && op && strcmp(k, key) == 0 && strcmp(op, "In") == 0 && json_array_size(values) == 1)
                        return json_string_value(json_array_get(values, 0));
        }
        return NULL;
}

static void copy_str(char *dst, size_t len, const char *src) {
        snprintf(dst, len, "%s", src ? src : "");
}

/* Identity and location from the claim (status first, then the zone/region requirements). */
static void ctx_identify(struct lctx *c) {
        const json_t *meta = json_object_get(c->claim, "metadata"), *status = json_object_get(c->claim, "status");
        const char *region = json_string_value(json_object_get(status, "region"));
        const char *host = json_string_value(json_object_get(status, "host"));
        copy_str(c->name, sizeof c->name, json_string_value(json_object_get(meta, "name")));
        copy_str(c->uid, sizeof c->uid, json_string_value(json_object_get(meta, "uid")));
        copy_str(c->region, sizeof c->region, region ? region : requirement_value(c->claim, "topology.kubernetes.io/region"));
        copy_str(c->host, sizeof c->host, host ? host : requirement_value(c->claim, "topology.kubernetes.io/zone"));
        copy_str(c->nodepool, sizeof c->nodepool,
                 json_string_value(json_object_get(json_object_get(c->claim, "spec"), "nodePool")));
}

static void ctx_clients(struct lctx *c) {
        const struct launcher_env *e = &c->l->env;
        c->pve = c->region[0] ? e->pve_for_region(e->userdata, c->region) : NULL;
        c->agent = c->region[0] && c->host[0] && e->agent_for_host ? e->agent_for_host(e->userdata, c->region, c->host)
                                                                    : NULL;
}

static void ctx_drop_cache(struct lctx *c) {
        drop_unrecorded(c);
        json_decref(c->nodeclass);
        json_decref(c->pool);
        c->nodeclass = c->pool = NULL;
        c->have_shape = false;
}

typedef int (*step_fn)(struct lctx *c);

static step_fn step_after(const char *done) {
        static const struct {
                const char *done;
                step_fn fn;
        } steps[] = {
                { STEP_NONE, launcher_step_reserve },     { STEP_RESERVED, launcher_step_vmid },
                { STEP_VMID, launcher_step_clone },       { STEP_CLONING, launcher_step_cloning },
                { STEP_CONFIGURED, launcher_step_start }, { STEP_STARTED, launcher_step_bind },
                { STEP_LAUNCHED, launcher_step_register }, { STEP_REGISTERED, launcher_step_initialize },
        };
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
                if (strcmp(done, steps[i].done) == 0)
                        return steps[i].fn;
        return NULL;
}

/* A step failed with a (probably transient) error: count it, and fail the launch after too many. */
static int step_error(struct lctx *c, int err) {
        int64_t attempts = launcher_status_int(c, "attempts") + 1;
        if (!c->err[0])
                snprintf(c->err, sizeof c->err, "%s", strerror(-err));
        log_error("launcher: NodeClaim %s after %s (attempt %lld): %s", c->name,
                  launcher_status_str(c, "launchStep")[0] ? launcher_status_str(c, "launchStep") : "start",
                  (long long)attempts, c->err);
        if (attempts >= LAUNCHER_MAX_ATTEMPTS) {
                snprintf(c->fail_reason, sizeof c->fail_reason, "LaunchFailed");
                return launcher_fail(c);
        }
        json_t *ch = json_pack("{s:I, s:s}", "attempts", (json_int_t)attempts, "lastError", c->err);
        int r = launcher_commit(c, ch);
        if (r < 0)
                return r;
        c->requeue_ms = launcher_backoff_delay((unsigned)attempts, 1000, LAUNCHER_RETRY_MAX_MS);
        return 0;
}

static int run_steps(struct lctx *c) {
        for (unsigned i = 0; i < MAX_STEPS; i++) {
                const char *done = launcher_step_done(c);
                if (strcmp(done, STEP_INITIALIZED) == 0)
                        return 0;
                step_fn fn = step_after(done);
                if (!fn) {
                        launcher_failf(c, "InvalidNodeClaim", "status.launchStep: unknown step \"%s\"", done);
                        return launcher_fail(c);
                }
                c->err[0] = '\0';
                int r = fn(c);
                if (r == LSTEP_WAIT)
                        return 0;
                if (r == LSTEP_FAIL)
                        return launcher_fail(c);
                if (r == -EAGAIN)
                        return r;
                if (r == -ECANCELED || (r < 0 && kube_client_canceled(c->kube)))
                        return -ECANCELED; /* a stop: the claim goes on from its status at the next start */
                if (r < 0)
                        return step_error(c, r);
        }
        c->requeue_ms = 1;
        return 0;
}

static bool deleting(const json_t *claim) {
        return json_object_get(json_object_get(claim, "metadata"), "deletionTimestamp") != NULL;
}

static int reconcile_once(struct lctx *c) {
        c->requeue_ms = 0;
        ctx_identify(c);
        ctx_clients(c);
        if (!c->name[0] || !c->uid[0])
                return -EINVAL;
        if (deleting(c->claim))
                return launcher_finalize(c);
        const char *step = launcher_status_str(c, "launchStep");
        if (strcmp(step, STEP_INITIALIZED) == 0)
                return 0;
        int r = launcher_ensure_finalizer(c);
        if (r < 0)
                return r;
        if (strcmp(step, STEP_FAILED) == 0)
                return launcher_fail(c);
        if (!c->host[0] || !c->region[0]) {
                launcher_failf(c, "InvalidNodeClaim", "status.host and status.region (or zone/region requirements) required");
                return launcher_fail(c);
        }
        return run_steps(c);
}

/* The claim as the API server has it now: the caller's copy may lag behind our own last status write, and a
 * step must never run twice from an old status. The caller's copy will do when it is our last write (a newer
 * write by someone else would fail ours with a conflict), and when this process has not begun the launch: what
 * comes before the first write (the agent's reservation, keyed by the claim, and reading the next free VMID) can
 * be done twice, and that write fails if the copy is old. NULL (with *ret_err 0) when the claim is gone. */
static json_t *fresh_claim(struct launcher *l, struct kube_client *kube, const json_t *claim, int *ret_err) {
        const json_t *meta = json_object_get(claim, "metadata");
        const char *name = json_string_value(json_object_get(meta, "name"));
        const char *step = json_string_value(json_object_get(json_object_get(claim, "status"), "launchStep"));
        bool deleting = json_object_get(meta, "deletionTimestamp") != NULL;
        json_t *fresh = NULL;
        *ret_err = 0;
        if (!deleting && step && strcmp(step, STEP_INITIALIZED) == 0)
                return json_incref((json_t *)claim); /* nothing left to do but notice a deletion (an update) */
        /* A copy that is one of our writes: our last write is newer, or the same. */
        if (!deleting && wrote(l, name, claim_rv(claim), &fresh) && fresh)
                return fresh;
        if (!deleting && !step && nodeclaim_host(claim) && !wrote_any(l, name))
                return json_incref((json_t *)claim); /* placed, not begun: the first write fails on an old copy */
        int r = name ? kube_get(kube, &kube_nodeclaims, NULL, name, &fresh) : -EINVAL;
        if (r == -ENOENT)
                note_written(l, name, NULL);
        if (r == -ECANCELED)
                *ret_err = r;
        else if (r < 0 && r != -ENOENT)
                *ret_err = log_error_errno(r, "launcher: GET NodeClaim %s: %s", name ? name : "?", kube_client_error(kube));
        return fresh;
}

int launcher_reconcile(struct launcher *l, const json_t *claim, int64_t *ret_requeue_ms) {
        struct lctx c = { .l = l };
        int r;
        c.kube = l->env.kube_for_thread ? l->env.kube_for_thread(l->env.userdata) : l->env.kube;
        if (!c.kube)
                return -EINVAL;
        c.timed = l->env.latency != NULL; /* the claim may be begun while this reconcile runs: decided at its end */
        if (c.timed)
                latency_waits_now(&c.waits0);
        c.claim = fresh_claim(l, c.kube, claim, &r);
        if (!c.claim) {
                if (r == 0)
                        *ret_requeue_ms = 0; /* gone */
                return r;
        }
        c.now = launcher_now(l);
        for (unsigned i = 0;; i++) {
                r = reconcile_once(&c);
                ctx_drop_cache(&c);
                if (r != -EAGAIN || i + 1 >= MAX_RESTARTS)
                        break;
                c.now = launcher_now(l);
        }
        launcher_unpick_vmid(&c);
        if (c.timed) {
                struct latency_waits spent;
                latency_waits_since(&c.waits0, &spent);
                latency_add_wait(l->env.latency, c.name, &spent);
        }
        int64_t requeue = c.requeue_ms;
        json_decref(c.claim);
        if (r == -ENOENT && c.err[0] == '\0')
                r = 0; /* the claim is gone */
        if (r == -EAGAIN) {
                r = 0;
                requeue = 100;
        }
        if (r == -ECANCELED)
                log_debug("launcher: NodeClaim %s: stopped (%s)", c.name, c.err[0] ? c.err : "canceled");
        else if (r < 0)
                log_error("launcher: NodeClaim %s: %s", c.name, c.err[0] ? c.err : strerror(-r));
        if (r < 0)
                return r;
        *ret_requeue_ms = requeue;
        return 0;
}
