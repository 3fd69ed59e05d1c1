/* simulate_input: the arena and builders of a simulation input, and label/taint helpers. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "simulate.h"
#include "simulate_internal.h"

#define ARENA_CHUNK (64 * 1024)

struct arena_chunk {
        struct arena_chunk *next;
        size_t used, size;
        max_align_t data[];
};

struct sim_arena {
        struct arena_chunk *head;
};

struct sim_arena *simulate__arena_new(void) {
        return calloc(1, sizeof(struct sim_arena));
}

void simulate__arena_free(struct sim_arena *a) {
        if (!a)
                return;
        while (a->head) {
                struct arena_chunk *next = a->head->next;
                free(a->head);
                a->head = next;
        }
        free(a);
}

void *simulate__arena_alloc(struct sim_arena *a, size_t size) {
        size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
        if (size == 0)
                size = sizeof(max_align_t);
        struct arena_chunk *h = a->head;
        if (!h || h->size - h->used < size) {
                size_t csize = size > ARENA_CHUNK ? size : ARENA_CHUNK;
                h = malloc(sizeof *h + csize);
                if (!h)
                        return NULL;
                h->used = 0;
                h->size = csize;
                h->next = a->head;
                a->head = h;
        }
        void *p = (char *)h->data + h->used;
        h->used += size;
        memset(p, 0, size);
        return p;
}

char *simulate__arena_strdup(struct sim_arena *a, const char *s) {
        if (!s)
                return NULL;
        size_t n = strlen(s) + 1;
        char *p = simulate__arena_alloc(a, n);
        if (p)
                memcpy(p, s, n);
        return p;
}

int simulate__grow(void *arr, size_t *cap, size_t need, size_t elem) {
        void **p = arr;
        if (need <= *cap)
                return 0;
        size_t ncap = *cap ? *cap : 16;
        while (ncap < need)
                ncap *= 2;
        void *n = realloc(*p, ncap * elem);
        if (!n)
                return -ENOMEM;
        memset((char *)n + *cap * elem, 0, (ncap - *cap) * elem);
        *p = n;
        *cap = ncap;
        return 0;
}

struct sim_input *simulate_input_new(void) {
        struct sim_input *in = calloc(1, sizeof *in);
        if (!in)
                return NULL;
        in->arena = simulate__arena_new();
        if (!in->arena) {
                free(in);
                return NULL;
        }
        in->arch = "amd64";
        in->os = "linux";
        return in;
}

void simulate_input_free(struct sim_input *in) {
        if (!in)
                return;
        free(in->pods);
        free(in->nodes);
        free(in->pools);
        free(in->classes);
        free(in->daemonsets);
        free(in->hosts);
        simulate__arena_free(in->arena);
        free(in);
}

void *simulate_alloc(struct sim_input *in, size_t size) {
        return simulate__arena_alloc(in->arena, size);
}

char *simulate_strdup(struct sim_input *in, const char *s) {
        return simulate__arena_strdup(in->arena, s);
}

int simulate_extended_kind(struct sim_input *in, const char *name, bool add) {
        for (int i = 0; name && i < RESOURCE_EXTENDED_N; i++) {
                if (in->extended[i] && strcmp(in->extended[i], name) == 0)
                        return RESOURCE_EXTENDED_0 + i;
                if (!in->extended[i] && add) {
                        in->extended[i] = simulate_strdup(in, name);
                        return in->extended[i] ? RESOURCE_EXTENDED_0 + i : -ENOMEM;
                }
        }
        return add ? -ENOSPC : -1;
}

const char *simulate_resource_name(const struct sim_input *in, int kind) {
        if (kind >= RESOURCE_EXTENDED_0 && kind < RESOURCE_COUNT && in->extended[kind - RESOURCE_EXTENDED_0])
                return in->extended[kind - RESOURCE_EXTENDED_0];
        return resources_name((enum resource_kind)kind);
}

/* Append a zeroed element of size elem to the pointer list *list. */
static void *add_item(struct sim_input *in, void *list, size_t *n, size_t *cap, size_t elem) {
        void ***l = list;
        if (simulate__grow(l, cap, *n + 1, sizeof(void *)) < 0)
                return NULL;
        void *item = simulate__arena_alloc(in->arena, elem);
        if (item)
                (*l)[(*n)++] = item;
        return item;
}

struct sim_pod *simulate_add_pod(struct sim_input *in) {
        struct sim_pod *p = add_item(in, &in->pods, &in->n_pods, &in->cap_pods, sizeof *p);
        if (p)
                p->requests.v[RESOURCE_PODS] = 1;
        return p;
}

struct sim_node *simulate_add_node(struct sim_input *in) {
        return add_item(in, &in->nodes, &in->n_nodes, &in->cap_nodes, sizeof(struct sim_node));
}

struct sim_nodepool *simulate_add_nodepool(struct sim_input *in) {
        struct sim_nodepool *p = add_item(in, &in->pools, &in->n_pools, &in->cap_pools, sizeof *p);
        if (p)
                p->limit_cpu_milli = p->limit_memory_bytes = p->limit_nodes = -1;
        return p;
}

struct sim_nodeclass *simulate_add_nodeclass(struct sim_input *in) {
        return add_item(in, &in->classes, &in->n_classes, &in->cap_classes, sizeof(struct sim_nodeclass));
}

struct sim_pod *simulate_add_daemonset(struct sim_input *in) {
        struct sim_pod *p = add_item(in, &in->daemonsets, &in->n_daemonsets, &in->cap_daemonsets, sizeof *p);
        if (p)
                p->requests.v[RESOURCE_PODS] = 1;
        return p;
}

struct sim_host *simulate_add_host(struct sim_input *in) {
        return add_item(in, &in->hosts, &in->n_hosts, &in->cap_hosts, sizeof(struct sim_host));
}

const char *simulate_label_get(const struct sim_label *labels, size_t n, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(labels[i].key, key) == 0)
                        return labels[i].value;
        return NULL;
}

static bool toleration_matches(const struct sim_toleration *t, const struct sim_taint *taint) {
        if (t->effect != SIM_EFFECT_ANY && t->effect != taint->effect)
                return false;
        if (!t->key)
                return t->exists;
        if (strcmp(t->key, taint->key) != 0)
                return false;
        return t->exists || strcmp(t->value ? t->value : "", taint->value ? taint->value : "") == 0;
}

bool simulate_tolerates(const struct sim_toleration *tols, size_t n_tols, const struct sim_taint *taint) {
        if (taint->effect == SIM_EFFECT_PREFER_NO_SCHEDULE)
                return true; /* a preference never blocks */
        for (size_t i = 0; i < n_tols; i++)
                if (toleration_matches(&tols[i], taint))
                        return true;
        return false;
}
