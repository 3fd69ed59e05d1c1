/* launcher_cache: facts that every launch on a host asks for and that change rarely (the template's VMID, the
 * ISO storage, the join data), kept for a short time so that a burst of launches does not ask for each again. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"

static struct launcher__cache_entry *find(struct launcher__cache *c, const char *key) {
        for (size_t i = 0; i < c->n; i++)
                if (strcmp(c->items[i].key, key) == 0)
                        return &c->items[i];
        return NULL;
}

void launcher__cache_init(struct launcher__cache *c) {
        *c = (struct launcher__cache){ 0 };
        pthread_mutex_init(&c->mu, NULL);
}

void launcher__cache_done(struct launcher__cache *c) {
        for (size_t i = 0; i < c->n; i++) {
                free(c->items[i].key);
                free(c->items[i].value);
        }
        free(c->items);
        pthread_mutex_destroy(&c->mu);
}

char *launcher__cache_get(struct launcher__cache *c, const char *key, int64_t now_ms) {
        char *out = NULL;
        pthread_mutex_lock(&c->mu);
        struct launcher__cache_entry *e = find(c, key);
        if (e && now_ms >= e->at_ms && now_ms - e->at_ms < LAUNCHER__CACHE_TTL_MS)
                out = strdup(e->value);
        pthread_mutex_unlock(&c->mu);
        return out;
}

static int append(struct launcher__cache *c, const char *key, char *value, int64_t now_ms) {
        if (ARRAY_GROW(&c->items, &c->cap, c->n, 8) < 0)
                return -ENOMEM;
        char *k = strdup(key);
        if (!k)
                return -ENOMEM;
        c->items[c->n++] = (struct launcher__cache_entry){ k, value, now_ms };
        return 0;
}

void launcher__cache_put(struct launcher__cache *c, const char *key, const char *value, int64_t now_ms) {
        char *v = strdup(value);
        if (!v)
                return; /* a cache: not remembering is always correct */
        pthread_mutex_lock(&c->mu);
        struct launcher__cache_entry *e = find(c, key);
        if (e) {
                free(e->value);
                e->value = v;
                e->at_ms = now_ms;
        } else if (append(c, key, v, now_ms) < 0) {
                free(v);
        }
        pthread_mutex_unlock(&c->mu);
}

void launcher__cache_drop(struct launcher__cache *c, const char *key) {
        pthread_mutex_lock(&c->mu);
        struct launcher__cache_entry *e = find(c, key);
        if (e)
                e->at_ms = INT64_MIN / 2; /* stale from now on */
        pthread_mutex_unlock(&c->mu);
}
