/* kube_informer: list, then watch from the list's resource version; resume after disconnects, relist on 410. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "cleanup.h"
#include "kube.h"
#include "kube_internal.h"
#include "log.h"
#include "monotime.h"

#define INFORMER_DEFAULT_WATCH_TIMEOUT_S 300L
#define INFORMER_IDLE_MARGIN_MS 30000L
#define INFORMER_DEFAULT_BACKOFF_BASE_MS 200L
#define INFORMER_DEFAULT_BACKOFF_MAX_MS 30000L
#define INFORMER_MIN_QUIET_SESSION_MS 1000
#define INFORMER_FAILED 1 /* internal: the list or watch failed; back off */

struct kube_informer {
        struct kube_client *c;
        const struct kube_resource *rt;
        char *ns, *label_selector, *field_selector;
        long watch_timeout_s, idle_timeout_ms;
        unsigned page_size;
        kube_informer_fn fn;
        void *userdata;
        json_t *store;
        char rv[64];
        long retry_after_ms;
        struct backoff backoff;
        struct kube_informer_stats stats;
        void (*stats_changed)(const struct kube_informer_stats *s, void *userdata);
};

static char *dup_opt(const char *s) {
        return s && *s ? strdup(s) : NULL;
}

int kube_informer_new(struct kube_client *c, const struct kube_resource *rt, const char *ns,
                      const struct kube_informer_options *o, kube_informer_fn fn, void *userdata,
                      struct kube_informer **ret) {
        static const struct kube_informer_options defaults = { 0 };
        if (!o)
                o = &defaults;
        struct kube_informer *inf = calloc(1, sizeof *inf);
        if (!inf)
                return -ENOMEM;
        *inf = (struct kube_informer){ .c = c, .rt = rt, .fn = fn, .userdata = userdata, .page_size = o->page_size,
                                       .watch_timeout_s = o->watch_timeout_s > 0 ? o->watch_timeout_s
                                                                                 : INFORMER_DEFAULT_WATCH_TIMEOUT_S,
                                       .idle_timeout_ms = o->idle_timeout_ms, .retry_after_ms = -1,
                                       .stats_changed = o->stats_changed };
        inf->ns = dup_opt(ns);
        inf->label_selector = dup_opt(o->label_selector);
        inf->field_selector = dup_opt(o->field_selector);
        inf->store = json_object();
        backoff_init(&inf->backoff, o->backoff_base_ms > 0 ? o->backoff_base_ms : INFORMER_DEFAULT_BACKOFF_BASE_MS,
                     o->backoff_max_ms > 0 ? o->backoff_max_ms : INFORMER_DEFAULT_BACKOFF_MAX_MS,
                     kube__client_seed(c));
        if (!inf->store || (ns && *ns && !inf->ns) ||
            (o->label_selector && *o->label_selector && !inf->label_selector) ||
            (o->field_selector && *o->field_selector && !inf->field_selector)) {
                kube_informer_free(inf);
                return -ENOMEM;
        }
        *ret = inf;
        return 0;
}

void kube_informer_free(struct kube_informer *inf) {
        if (!inf)
                return;
        json_decref(inf->store);
        free(inf->ns);
        free(inf->label_selector);
        free(inf->field_selector);
        free(inf);
}

const struct kube_informer_stats *kube_informer_stats(const struct kube_informer *inf) {
        return &inf->stats;
}

/* Count one more in *counter (a field of inf->stats) and tell the owner. */
static void count(struct kube_informer *inf, unsigned *counter) {
        (*counter)++;
        if (inf->stats_changed)
                inf->stats_changed(&inf->stats, inf->userdata);
}

/* ---- helpers ---- */

static const char *meta(const json_t *obj, const char *key) {
        return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

static int store_key(const json_t *obj, char *out, size_t n) {
        const char *name = meta(obj, "name"), *ns = meta(obj, "namespace");
        if (!name)
                return -EBADMSG;
        if (ns && *ns)
                snprintf(out, n, "%s/%s", ns, name);
        else
                snprintf(out, n, "%s", name);
        return 0;
}

static void set_rv(struct kube_informer *inf, const char *rv) {
        if (rv)
                snprintf(inf->rv, sizeof inf->rv, "%s", rv);
}

/* List items come without kind and apiVersion; give them the ones watch events carry. */
static void add_type_meta(const struct kube_resource *rt, json_t *obj) {
        char api_version[128];
        snprintf(api_version, sizeof api_version, "%s%s%s", rt->group, *rt->group ? "/" : "", rt->version);
        if (!json_object_get(obj, "kind"))
                json_object_set_new(obj, "kind", json_string(rt->kind));
        if (!json_object_get(obj, "apiVersion"))
                json_object_set_new(obj, "apiVersion", json_string(api_version));
}

static int notify(struct kube_informer *inf, enum kube_watch_event ev, const json_t *obj) {
        return inf->fn ? inf->fn(ev, obj, inf->userdata) : 0;
}

/* ---- list ---- */

/* The list's items by store key. */
static json_t *index_items(const struct kube_informer *inf, json_t *items) {
        json_t *fresh = json_object();
        size_t i;
        json_t *item;
        char key[512];
        json_array_foreach(items, i, item) {
                if (store_key(item, key, sizeof key) < 0)
                        continue;
                add_type_meta(inf->rt, item);
                json_object_set(fresh, key, item);
        }
        return fresh;
}

/* What changed from old to fresh: an array of [event, object]. */
static json_t *diff(const json_t *old, const json_t *fresh) {
        json_t *events = json_array();
        const char *key;
        json_t *obj;
        json_object_foreach((json_t *)old, key, obj) {
                if (!json_object_get(fresh, key))
                        json_array_append_new(events, json_pack("[i,O]", KUBE_EVENT_DELETED, obj));
        }
        json_object_foreach((json_t *)fresh, key, obj) {
                const json_t *was = json_object_get(old, key);
                const char *rv = meta(obj, "resourceVersion"), *old_rv = was ? meta(was, "resourceVersion") : NULL;
                if (!was)
                        json_array_append_new(events, json_pack("[i,O]", KUBE_EVENT_ADDED, obj));
                else if (!rv || !old_rv || strcmp(rv, old_rv) != 0)
                        json_array_append_new(events, json_pack("[i,O]", KUBE_EVENT_MODIFIED, obj));
        }
        return events;
}

static int emit_all(struct kube_informer *inf, const json_t *events) {
        size_t i;
        json_t *e;
        json_array_foreach(events, i, e) {
                int r = notify(inf, (enum kube_watch_event)json_integer_value(json_array_get(e, 0)),
                               json_array_get(e, 1));
                if (r < 0)
                        return r;
        }
        return notify(inf, KUBE_EVENT_SYNCED, NULL);
}

static int relist(struct kube_informer *inf) {
        struct kube_list_options o = { inf->label_selector, inf->field_selector, inf->page_size };
        _cleanup_(json_decrefp) json_t *list = NULL, *events = NULL;
        int r = kube_list(inf->c, inf->rt, inf->ns, &o, &list);
        if (r == -ECANCELED)
                return r;
        if (r < 0) {
                log_error("list %s: %s", inf->rt->plural, kube_client_error(inf->c));
                return INFORMER_FAILED;
        }
        json_t *fresh = index_items(inf, json_object_get(list, "items"));
        events = diff(inf->store, fresh);
        json_decref(inf->store);
        inf->store = fresh;
        set_rv(inf, meta(list, "resourceVersion"));
        backoff_reset(&inf->backoff);
        count(inf, &inf->stats.lists);
        return emit_all(inf, events);
}

/* ---- watch ---- */

struct session {
        struct kube_informer *inf;
        unsigned lines;
        bool gone;        /* 410: the resource version is too old */
        bool errored;     /* another ERROR event or a bad line */
        int callback_err; /* fn failed */
};

static int apply_event(struct session *s, const char *type, json_t *obj) {
        struct kube_informer *inf = s->inf;
        char key[512];
        if (store_key(obj, key, sizeof key) < 0)
                return -EBADMSG;
        set_rv(inf, meta(obj, "resourceVersion"));
        bool known = json_object_get(inf->store, key) != NULL;
        enum kube_watch_event ev = known ? KUBE_EVENT_MODIFIED : KUBE_EVENT_ADDED;
        json_incref(obj);
        if (strcmp(type, "DELETED") == 0) {
                ev = KUBE_EVENT_DELETED;
                json_object_del(inf->store, key);
        } else {
                json_object_set(inf->store, key, obj);
        }
        int r = notify(inf, ev, obj);
        json_decref(obj);
        if (r < 0)
                s->callback_err = r;
        return r;
}

static int watch_error(struct session *s, json_t *status) {
        if (json_integer_value(json_object_get(status, "code")) == 410) {
                s->gone = true;
                return 0;
        }
        s->errored = true;
        kube__client_fail_status(s->inf->c, "watch", status);
        return -EPROTO;
}

static int on_line(const char *line, size_t len, void *userdata) {
        struct session *s = userdata;
        s->lines++;
        json_t *ev = json_loadb(line, len, 0, NULL);
        const char *type = json_string_value(json_object_get(ev, "type"));
        json_t *obj = json_object_get(ev, "object");
        int r = 0;
        if (!type || !json_is_object(obj))
                r = -EBADMSG;
        else if (strcmp(type, "BOOKMARK") == 0)
                set_rv(s->inf, meta(obj, "resourceVersion"));
        else if (strcmp(type, "ERROR") == 0)
                r = watch_error(s, obj);
        else if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 || strcmp(type, "DELETED") == 0)
                r = apply_event(s, type, obj);
        if (r == -EBADMSG) {
                s->errored = true;
                kube__client_set_error(s->inf->c, "watch %s: a line is not a watch event: %.200s", s->inf->rt->plural,
                                       line);
        }
        json_decref(ev);
        return r;
}

static int watch_path(struct kube_informer *inf, long timeout_s, char **ret) {
        char t[32];
        snprintf(t, sizeof t, "%ld", timeout_s);
        int r = kube_path(inf->rt, inf->ns, NULL, NULL, ret);
        if (r == 0)
                r = kube_query_add(ret, "watch", "1");
        if (r == 0)
                r = kube_query_add(ret, "allowWatchBookmarks", "true");
        if (r == 0)
                r = kube_query_add(ret, "resourceVersion", inf->rv);
        if (r == 0)
                r = kube_query_add(ret, "timeoutSeconds", t);
        if (r == 0 && inf->label_selector)
                r = kube_query_add(ret, "labelSelector", inf->label_selector);
        if (r == 0 && inf->field_selector)
                r = kube_query_add(ret, "fieldSelector", inf->field_selector);
        if (r < 0)
                free(*ret);
        return r;
}

static int expired(struct kube_informer *inf) {
        log_info("watch %s: resource version %s expired (410 Gone); listing again", inf->rt->plural, inf->rv);
        inf->rv[0] = '\0';
        count(inf, &inf->stats.relists_410);
        return 0;
}

/* How a watch that got a 2xx answer ended. */
static int session_end(struct kube_informer *inf, const struct session *s, int64_t started) {
        if (s->gone)
                return expired(inf);
        if (s->errored) {
                log_error("watch %s: %s", inf->rt->plural, kube_client_error(inf->c));
                return INFORMER_FAILED;
        }
        count(inf, &inf->stats.resumes);
        if (s->lines > 0) {
                backoff_reset(&inf->backoff);
                return 0;
        }
        /* A stream that ends at once with nothing in it would otherwise be retried in a tight loop. */
        return monotime_ms() - started < INFORMER_MIN_QUIET_SESSION_MS ? INFORMER_FAILED : 0;
}

static int watch_session(struct kube_informer *inf) {
        long timeout_s =
                inf->watch_timeout_s + (long)(kube__client_seed(inf->c) % (uint64_t)(inf->watch_timeout_s + 1));
        long idle = inf->idle_timeout_ms > 0 ? inf->idle_timeout_ms : timeout_s * 1000 + INFORMER_IDLE_MARGIN_MS;
        char *path;
        int r = watch_path(inf, timeout_s, &path);
        if (r < 0)
                return r;
        struct session s = { .inf = inf };
        struct http_client_response resp = { 0 };
        int64_t started = monotime_ms();
        count(inf, &inf->stats.watches);
        r = kube__client_stream(inf->c, path, idle, on_line, &s, &resp);
        bool answered = r == 0 && resp.status >= 200 && resp.status < 300;
        if (s.callback_err)
                r = s.callback_err;
        else if (r == -ECANCELED)
                r = -ECANCELED;
        else if (s.gone || s.errored || answered)
                r = session_end(inf, &s, started);
        else if (r < 0) {
                log_error("watch %s: %s", inf->rt->plural, kube_client_error(inf->c));
                r = INFORMER_FAILED;
        } else if (resp.status == 410) {
                r = expired(inf);
        } else {
                kube__client_fail_response(inf->c, "GET", path, &resp);
                log_error("watch %s: %s", inf->rt->plural, kube_client_error(inf->c));
                inf->retry_after_ms = resp.retry_after_ms;
                r = INFORMER_FAILED;
        }
        http_client_response_done(&resp);
        free(path);
        return r;
}

/* ---- stepping ---- */

int kube_informer_step(struct kube_informer *inf) {
        if (kube_client_canceled(inf->c))
                return -ECANCELED;
        inf->retry_after_ms = -1;
        int r = inf->rv[0] ? watch_session(inf) : relist(inf);
        if (r != INFORMER_FAILED)
                return r;
        count(inf, &inf->stats.failures);
        long delay = backoff_honour_retry_after(backoff_next_ms(&inf->backoff), inf->retry_after_ms);
        return kube__client_sleep(inf->c, delay);
}

int kube_informer_run(struct kube_informer *inf) {
        for (;;) {
                int r = kube_informer_step(inf);
                if (r == -ECANCELED || kube_client_canceled(inf->c))
                        return 0;
                if (r < 0)
                        return r;
        }
}
