/* node_settings: the seed's node-setting JSON file (region -> node or "*" -> reserved CPUs/memory, overrides). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "node_settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"

#define WILDCARD_NODE "*"

/* Where a value sits in the file, for messages such as "r1.pve1.reservedmemory: ...". */
struct where {
        const char *region, *node, *key;
        char *err;
        size_t errlen;
};

typedef int (*setting_parser)(struct node_settings *s, const json_t *value, struct where *w);

static int fail(struct where *w, const char *suffix, const char *what) {
        snprintf(w->err, w->errlen, "%s.%s.%s%s: %s", w->region, w->node, w->key, suffix, what);
        return -EINVAL;
}

struct node_settings *node_settings_new_empty(void) {
        struct node_settings *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->reserved_cpus = cpuset_new();
        if (!s->reserved_cpus) {
                free(s);
                return NULL;
        }
        return s;
}

void node_settings_free(struct node_settings *s) {
        if (!s)
                return;
        cpuset_free(s->reserved_cpus);
        for (size_t i = 0; i < s->n_numa; i++)
                cpuset_free(s->numa[i].cpus);
        free(s->numa);
        free(s);
}

/* A non-negative JSON integer no larger than max. */
static bool get_uint(const json_t *v, uint64_t max, uint64_t *ret) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
                return false;
        *ret = (uint64_t)json_integer_value(v);
        return true;
}

/* ---- CPU lists: a cpulist string ("0-3,8") or an array of CPU numbers ([0,4]) ---- */

static int cpus_from_array(const json_t *a, struct cpuset *s, struct where *w) {
        size_t i;
        const json_t *v;
        json_array_foreach(a, i, v) {
                uint64_t cpu;
                if (!get_uint(v, CPUSET_MAX_CPU, &cpu)) {
                        char suffix[32];
                        snprintf(suffix, sizeof(suffix), "[%zu]", i);
                        return fail(w, suffix, "expected a CPU number from 0 to 8191");
                }
                if (cpuset_set(s, (unsigned)cpu) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int parse_cpus(const json_t *v, struct cpuset **ret, struct where *w) {
        if (json_is_string(v)) {
                int r = cpuset_parse(json_string_value(v), ret);
                if (r < 0 && r != -ENOMEM)
                        return fail(w, "", "expected a cpulist such as \"0-3,8\"");
                return r;
        }
        if (!json_is_array(v))
                return fail(w, "", "expected a cpulist string or an array of CPU numbers");
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        int r = cpus_from_array(v, s, w);
        if (r < 0) {
                cpuset_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* ---- settings keys ---- */

static int set_reservedcpus(struct node_settings *s, const json_t *v, struct where *w) {
        struct cpuset *cpus = NULL;
        int r = parse_cpus(v, &cpus, w);
        if (r < 0)
                return r;
        cpuset_free(s->reserved_cpus);
        s->reserved_cpus = cpus;
        return 0;
}

static int set_reservedmemory(struct node_settings *s, const json_t *v, struct where *w) {
        if (!get_uint(v, INT64_MAX, &s->reserved_memory_bytes))
                return fail(w, "", "expected a non-negative integer (bytes)");
        return 0;
}

static int set_positive(int *dst, const json_t *v, struct where *w) {
        uint64_t n;
        if (!get_uint(v, INT32_MAX, &n) || n == 0)
                return fail(w, "", "expected a positive integer");
        *dst = (int)n;
        return 0;
}

static int set_sockets(struct node_settings *s, const json_t *v, struct where *w) {
        return set_positive(&s->sockets, v, w);
}

static int set_threads(struct node_settings *s, const json_t *v, struct where *w) {
        return set_positive(&s->threads, v, w);
}

static int set_uncorecaches(struct node_settings *s, const json_t *v, struct where *w) {
        return set_positive(&s->uncorecaches, v, w);
}

/* ---- nodes{"<id>": {cpus, memory | memsize}} ---- */

/* A NUMA node id written as a plain decimal ("0", "12"), or -1. */
static int numa_id(const char *key) {
        size_t n = strspn(key, "0123456789");
        if (n == 0 || n > 4 || key[n] != '\0' || (key[0] == '0' && n > 1))
                return -1;
        return atoi(key);
}

/* The seed's docs say `memory`, its code reads `memsize` (anchors §1.7): accept both, equal if both. */
/* 1 with the value when key is present, 0 when absent, -EINVAL when it is not a byte count. */
static int numa_bytes(const json_t *obj, const char *key, struct where *w, const char *suffix, uint64_t *ret) {
        const json_t *v = json_object_get(obj, key);
        if (!v)
                return 0;
        if (get_uint(v, INT64_MAX, ret))
                return 1;
        char path[64];
        snprintf(path, sizeof(path), "%s.%s", suffix, key);
        return fail(w, path, "expected a non-negative integer (bytes)");
}

static int numa_memory(struct node_settings_numa *n, const json_t *obj, struct where *w, const char *suffix) {
        uint64_t mem = 0, memsize = 0;
        int has_mem = numa_bytes(obj, "memory", w, suffix, &mem);
        if (has_mem < 0)
                return has_mem;
        int has_memsize = numa_bytes(obj, "memsize", w, suffix, &memsize);
        if (has_memsize < 0)
                return has_memsize;
        if (has_mem && has_memsize && mem != memsize)
                return fail(w, suffix, "memory and memsize disagree");
        n->memory_bytes = has_mem ? mem : memsize;
        return 0;
}

static int parse_numa_node(struct node_settings_numa *n, const char *id, const json_t *obj, struct where *w) {
        static const char *const allowed[] = { "cpus", "memory", "memsize", NULL };
        char suffix[48];
        snprintf(suffix, sizeof(suffix), ".%s", id);
        n->id = numa_id(id);
        if (n->id < 0)
                return fail(w, suffix, "expected a NUMA node id (a decimal number)");
        const char *bad = NULL;
        if (!json_is_object(obj))
                return fail(w, suffix, "expected an object with cpus and memory");
        if (jsonutil_check_keys(obj, allowed, &bad) < 0) {
                snprintf(suffix, sizeof(suffix), ".%s.%s", id, bad);
                return fail(w, suffix, "unknown key (expected cpus, memory or memsize)");
        }
        const json_t *cpus = json_object_get(obj, "cpus");
        char cpus_path[64];
        snprintf(cpus_path, sizeof(cpus_path), "nodes.%s.cpus", id);
        struct where cw = { w->region, w->node, cpus_path, w->err, w->errlen };
        int r = cpus ? parse_cpus(cpus, &n->cpus, &cw) : 0;
        return r < 0 ? r : numa_memory(n, obj, w, suffix);
}

static int numa_cmp(const void *a, const void *b) {
        const struct node_settings_numa *x = a, *y = b;
        return (x->id > y->id) - (x->id < y->id);
}

static int set_nodes(struct node_settings *s, const json_t *v, struct where *w) {
        if (!json_is_object(v))
                return fail(w, "", "expected an object of NUMA nodes");
        size_t n = json_object_size(v);
        struct node_settings_numa *numa = calloc(n ? n : 1, sizeof(*numa));
        if (!numa)
                return -ENOMEM;
        size_t i = 0;
        const char *id;
        json_t *obj;
        int r = 0;
        json_object_foreach((json_t *)v, id, obj) {
                r = parse_numa_node(&numa[i++], id, obj, w);
                if (r < 0)
                        break;
        }
        if (r < 0) {
                for (size_t k = 0; k < i; k++)
                        cpuset_free(numa[k].cpus);
                free(numa);
                return r;
        }
        qsort(numa, n, sizeof(*numa), numa_cmp);
        s->numa = numa;
        s->n_numa = n;
        return 0;
}

static const struct {
        const char *key;
        setting_parser parse;
} setting_table[] = {
        { "reservedcpus", set_reservedcpus }, { "reservedmemory", set_reservedmemory },
        { "sockets", set_sockets },           { "threads", set_threads },
        { "uncorecaches", set_uncorecaches }, { "nodes", set_nodes },
};

static int parse_setting(struct node_settings *s, const char *key, const json_t *v, struct where *w) {
        w->key = key;
        for (size_t i = 0; i < sizeof(setting_table) / sizeof(setting_table[0]); i++)
                if (strcmp(key, setting_table[i].key) == 0)
                        return setting_table[i].parse(s, v, w);
        return fail(w, "", "unknown key (expected reservedcpus, reservedmemory, sockets, threads, uncorecaches or "
                           "nodes)");
}

static int parse_entry(const json_t *obj, struct where *w, struct node_settings **ret) {
        if (!json_is_object(obj)) {
                snprintf(w->err, w->errlen, "%s.%s: expected an object of settings", w->region, w->node);
                return -EINVAL;
        }
        struct node_settings *s = node_settings_new_empty();
        if (!s)
                return -ENOMEM;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
                int r = parse_setting(s, key, v, w);
                if (r < 0) {
                        node_settings_free(s);
                        return r;
                }
        }
        *ret = s;
        return 0;
}

/* ---- the file ---- */

/* Validate every entry of a region (so a typo anywhere is reported on every host) and keep the one that
 * applies: the exact node name, else "*". *ret stays NULL when neither is present. */
static int parse_region(const char *region, const json_t *nodes, const char *node, struct node_settings **ret,
                        char *err, size_t errlen) {
        if (!json_is_object(nodes)) {
                snprintf(err, errlen, "%s: expected an object of nodes", region);
                return -EINVAL;
        }
        struct node_settings *exact = NULL, *wildcard = NULL;
        const char *name;
        json_t *obj;
        int r = 0;
        json_object_foreach((json_t *)nodes, name, obj) {
                struct where w = { region, name, NULL, err, errlen };
                struct node_settings *s = NULL;
                r = parse_entry(obj, &w, &s);
                if (r < 0)
                        break;
                struct node_settings **slot = NULL;
                if (strcmp(name, node) == 0)
                        slot = &exact;
                else if (strcmp(name, WILDCARD_NODE) == 0)
                        slot = &wildcard;
                if (slot)
                        *slot = s;
                else
                        node_settings_free(s);
        }
        if (r == 0)
                *ret = exact ? exact : wildcard;
        if (r < 0 || exact)
                node_settings_free(wildcard);
        if (r < 0)
                node_settings_free(exact);
        return r;
}

static int pick_settings(const json_t *root, const char *region, const char *node, struct node_settings **ret,
                         char *err, size_t errlen) {
        const char *name;
        json_t *nodes;
        struct node_settings *picked = NULL;
        json_object_foreach((json_t *)root, name, nodes) {
                struct node_settings *s = NULL;
                int r = parse_region(name, nodes, node, &s, err, errlen);
                if (r < 0) {
                        node_settings_free(picked);
                        return r;
                }
                if (strcmp(name, region) == 0)
                        picked = s;
                else
                        node_settings_free(s);
        }
        *ret = picked;
        return 0;
}

int node_settings_parse(const char *json_text, const char *region, const char *node,
                        struct node_settings **ret_settings, char *err, size_t errlen) {
        json_t *root = NULL;
        int r = jsonutil_parse(json_text, strlen(json_text), &root, err, errlen);
        if (r < 0)
                return r;
        struct node_settings *s = NULL;
        if (!json_is_object(root)) {
                snprintf(err, errlen, "top level: expected an object of regions");
                r = -EINVAL;
        } else {
                r = pick_settings(root, region, node, &s, err, errlen);
        }
        json_decref(root);
        if (r == 0 && !s)
                s = node_settings_new_empty();
        if (r == 0 && !s)
                r = -ENOMEM;
        if (r < 0)
                return r;
        *ret_settings = s;
        return 0;
}
