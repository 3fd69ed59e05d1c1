/* launcher_state: the launcher object and what it remembers across reconciles: the back-off of (node pool, host)
 * pairs, the VMIDs this process is about to use, and its last status write of each claim. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "array.h"
#include "backoff.h"
#include "cloudinit.h"
#include "log.h"
#include "rfc3339.h"

#define DEFAULT_CLONE_TIMEOUT_MS (10L * 60 * 1000)
#define DEFAULT_REGISTRATION_TIMEOUT_MS (15L * 60 * 1000)
#define DEFAULT_RESERVATION_TTL_S 900
#define DEFAULT_ORPHAN_AGE_MS (10L * 60 * 1000)
#define DEFAULT_BACKOFF_BASE_MS (30L * 1000)
#define DEFAULT_BACKOFF_MAX_MS (30L * 60 * 1000)
#define DEFAULT_TOKEN_TTL_S 3600

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
        o.task_timeout_ms = or_default(o.task_timeout_ms, LAUNCHER__TASK_TIMEOUT_MS);
        o.reservation_ttl_s = or_default(o.reservation_ttl_s, DEFAULT_RESERVATION_TTL_S);
        o.orphan_vm_age_ms = or_default(o.orphan_vm_age_ms, DEFAULT_ORPHAN_AGE_MS);
        o.backoff_base_ms = or_default(o.backoff_base_ms, DEFAULT_BACKOFF_BASE_MS);
        o.backoff_max_ms = or_default(o.backoff_max_ms, DEFAULT_BACKOFF_MAX_MS);
        o.token_ttl_s = or_default(o.token_ttl_s, DEFAULT_TOKEN_TTL_S);
        l->o = o;
        pthread_mutex_init(&l->mu, NULL);
        pthread_mutex_init(&l->iso_mu, NULL);
        launcher__cache_init(&l->cache);
        l->written = json_object();
        l->failing = json_object();
        l->held_addresses = json_object();
        l->downloads = json_object();
        if (!l->written || !l->failing || !l->held_addresses || !l->downloads) {
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
        for (size_t i = 0; i < l->n_health; i++)
                free(l->health[i].nodepool);
        free(l->health);
        free(l->vmids);
        free(l->seen);
        pthread_mutex_destroy(&l->mu);
        pthread_mutex_destroy(&l->iso_mu);
        for (size_t i = 0; i < LAUNCHER__TEMPLATE_SETS; i++) {
                free(l->templates[i].key);
                cloudinit_set_free(l->templates[i].set);
        }
        launcher__cache_done(&l->cache);
        json_decref(l->written);
        json_decref(l->failing);
        json_decref(l->held_addresses);
        json_decref(l->downloads);
        free(l);
}

int64_t launcher__now(const struct launcher *l) {
        if (l->env.now_ms)
                return l->env.now_ms(l->env.userdata);
        return rfc3339_now_ms();
}

/* ---- back-off of (node pool, host) ---- */

static struct launcher__backoff_entry *backoff_find(const struct launcher *l, const char *nodepool,
                                                    const char *host) {
        for (size_t i = 0; i < l->n_backoffs; i++)
                if (strcmp(l->backoffs[i].nodepool, nodepool) == 0 && strcmp(l->backoffs[i].host, host) == 0)
                        return &l->backoffs[i];
        return NULL;
}

static struct launcher__backoff_entry *backoff_add(struct launcher *l, const char *nodepool, const char *host) {
        if (ARRAY_GROW(&l->backoffs, &l->cap_backoffs, l->n_backoffs, 8) < 0)
                return NULL;
        struct launcher__backoff_entry *e = &l->backoffs[l->n_backoffs];
        *e = (struct launcher__backoff_entry){ strdup(nodepool), strdup(host), 0, 0 };
        if (!e->nodepool || !e->host) {
                free(e->nodepool);
                free(e->host);
                return NULL;
        }
        l->n_backoffs++;
        return e;
}

void launcher__backoff_note(struct launcher *l, const char *nodepool, const char *host, int64_t now_ms) {
        pthread_mutex_lock(&l->mu);
        struct launcher__backoff_entry *e = backoff_find(l, nodepool, host);
        if (!e)
                e = backoff_add(l, nodepool, host);
        if (e) {
                e->failures++;
                e->until_ms = now_ms + backoff_ceiling_ms(e->failures - 1, l->o.backoff_base_ms, l->o.backoff_max_ms);
                log_info("launcher: node pool %s on host %s paused for %lld ms after %u failed launch(es)", nodepool,
                         host, (long long)(e->until_ms - now_ms), e->failures);
        }
        pthread_mutex_unlock(&l->mu);
}

void launcher__backoff_clear(struct launcher *l, const char *nodepool, const char *host) {
        pthread_mutex_lock(&l->mu);
        struct launcher__backoff_entry *e = backoff_find(l, nodepool, host);
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
        const struct launcher__backoff_entry *e = backoff_find(l, nodepool, host);
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

int launcher__vmid_hold(struct launcher *l, uint32_t vmid) {
        int r = 0;
        pthread_mutex_lock(&l->mu);
        if (vmid_held(l, vmid))
                r = -EEXIST;
        else if (ARRAY_GROW(&l->vmids, &l->cap_vmids, l->n_vmids, 16) < 0)
                r = -ENOMEM;
        else
                l->vmids[l->n_vmids++] = vmid;
        pthread_mutex_unlock(&l->mu);
        return r;
}

void launcher__vmid_release(struct launcher *l, uint32_t vmid) {
        pthread_mutex_lock(&l->mu);
        for (size_t i = 0; i < l->n_vmids; i++) {
                if (l->vmids[i] == vmid) {
                        l->vmids[i] = l->vmids[--l->n_vmids];
                        break;
                }
        }
        pthread_mutex_unlock(&l->mu);
}

/* ---- the last status writes ---- */

static const char *claim_rv(const json_t *claim) {
        return kube_meta_of(claim).resource_version;
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

void launcher__note_written(struct launcher *l, const char *name, const json_t *stored) {
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

bool launcher__wrote(struct launcher *l, const char *name, const char *rv, json_t **ret_last) {
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

bool launcher__wrote_any(struct launcher *l, const char *name) {
        pthread_mutex_lock(&l->mu);
        bool any = json_object_get(l->written, name ? name : "") != NULL;
        pthread_mutex_unlock(&l->mu);
        return any;
}

bool launcher_wrote(struct launcher *l, const char *name, const char *rv) {
        return launcher__wrote(l, name, rv, NULL);
}
