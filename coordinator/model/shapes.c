/* shapes: the instance types a node claim can get (default families c1/t1/s1/m1 plus custom shapes) and
 * their allocatable resources. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "shapes.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "quantity.h"

#define MIB (1024LL * 1024)
#define GIB (1024LL * MIB)

#define DEFAULT_DISK_BYTES (30 * GIB)
#define DEFAULT_VM_MEMORY_OVERHEAD 0.075
#define DEFAULT_SYSTEM_RESERVED_CPU_MILLI 10
#define DEFAULT_SYSTEM_RESERVED_MEMORY (64 * MIB)
#define DEFAULT_EVICTION_MEMORY (100 * MIB)
#define DEFAULT_EVICTION_NODEFS_PERCENT 10
#define SMALL_NODE_KUBE_RESERVED_MEMORY (255 * MIB)

static const uint32_t DEFAULT_VCPUS[] = { 1, 2, 4, 8, 16 };
static const struct {
        const char *family;
        uint32_t gib_per_vcpu;
} DEFAULT_FAMILIES[] = { { "c1", 2 }, { "t1", 3 }, { "s1", 4 }, { "m1", 8 } };

void shapes_options_default(struct shape_options *ret_options) {
        struct shape_options o = {
                .disk_bytes = DEFAULT_DISK_BYTES,
                .vm_memory_overhead = DEFAULT_VM_MEMORY_OVERHEAD,
                .eviction_memory_bytes = DEFAULT_EVICTION_MEMORY,
                .eviction_nodefs_percent = DEFAULT_EVICTION_NODEFS_PERCENT,
        };
        for (int k = 0; k < RESOURCE_COUNT; k++)
                o.kube_reserved.v[k] = o.system_reserved.v[k] = -1;
        *ret_options = o;
}

/* cpu tiers in units of 1/40 millicore so that 0.25% of a core (2.5m) stays an integer. */
int64_t shapes_kube_reserved_cpu(uint32_t vcpus) {
        static const struct {
                uint32_t upto;
                int64_t per_core; /* 1/40 millicores per core in this tier */
        } TIERS[] = { { 1, 60 * 40 }, { 2, 10 * 40 }, { 4, 5 * 40 }, { UINT32_MAX, 100 } };
        int64_t sum = 0;
        uint32_t done = 0;
        for (size_t i = 0; i < sizeof TIERS / sizeof TIERS[0] && done < vcpus; i++) {
                uint32_t top = vcpus < TIERS[i].upto ? vcpus : TIERS[i].upto;
                sum += (int64_t)(top - done) * TIERS[i].per_core;
                done = top;
        }
        return (sum + 39) / 40;
}

int64_t shapes_kube_reserved_memory(int64_t memory_bytes) {
        static const struct {
                int64_t upto;
                int64_t percent;
        } TIERS[] = { { 4 * GIB, 25 }, { 8 * GIB, 20 }, { 16 * GIB, 10 }, { 128 * GIB, 6 }, { INT64_MAX, 2 } };
        if (memory_bytes < GIB)
                return SMALL_NODE_KUBE_RESERVED_MEMORY;
        unsigned __int128 sum = 0;
        int64_t done = 0;
        for (size_t i = 0; i < sizeof TIERS / sizeof TIERS[0] && done < memory_bytes; i++) {
                int64_t top = memory_bytes < TIERS[i].upto ? memory_bytes : TIERS[i].upto;
                sum += (unsigned __int128)(top - done) * (unsigned __int128)TIERS[i].percent;
                done = top;
        }
        int64_t bytes = (int64_t)((sum + 99) / 100);
        return (bytes + MIB - 1) / MIB * MIB;
}

static int32_t default_max_pods(uint64_t vm_memory_bytes) {
        if (vm_memory_bytes <= (uint64_t)GIB)
                return 32;
        if (vm_memory_bytes <= 2 * (uint64_t)GIB)
                return 64;
        return 110;
}

static int64_t pick(int64_t override, int64_t fallback) {
        return override >= 0 ? override : fallback;
}

static int64_t ceil_percent(int64_t value, int64_t percent) {
        return (int64_t)(((unsigned __int128)value * (unsigned __int128)percent + 99) / 100);
}

/* Reserved amounts and allocatable from s->capacity and the options. */
static void shape_finish(struct shape *s, const struct shape_options *o) {
        const struct resources *cap = &s->capacity;
        struct resources kube = { 0 }, sys = { 0 }, evict = { 0 };
        for (int k = 0; k < RESOURCE_COUNT; k++) {
                kube.v[k] = pick(o->kube_reserved.v[k], 0);
                sys.v[k] = pick(o->system_reserved.v[k], 0);
        }
        kube.v[RESOURCE_CPU] = pick(o->kube_reserved.v[RESOURCE_CPU], shapes_kube_reserved_cpu(s->vcpus));
        kube.v[RESOURCE_MEMORY] = pick(o->kube_reserved.v[RESOURCE_MEMORY],
                                       shapes_kube_reserved_memory((int64_t)s->vm_memory_bytes));
        sys.v[RESOURCE_CPU] = pick(o->system_reserved.v[RESOURCE_CPU], DEFAULT_SYSTEM_RESERVED_CPU_MILLI);
        sys.v[RESOURCE_MEMORY] = pick(o->system_reserved.v[RESOURCE_MEMORY], DEFAULT_SYSTEM_RESERVED_MEMORY);
        evict.v[RESOURCE_MEMORY] = o->eviction_memory_percent > 0
                                           ? ceil_percent(cap->v[RESOURCE_MEMORY], o->eviction_memory_percent)
                                           : o->eviction_memory_bytes;
        evict.v[RESOURCE_EPHEMERAL_STORAGE] = ceil_percent(cap->v[RESOURCE_EPHEMERAL_STORAGE],
                                                           o->eviction_nodefs_percent);
        s->kube_reserved = kube;
        s->system_reserved = sys;
        s->eviction = evict;
        s->allocatable = *cap;
        resources_sub(&s->allocatable, &kube);
        resources_sub(&s->allocatable, &sys);
        resources_sub(&s->allocatable, &evict);
        s->allocatable.v[RESOURCE_MEMORY] -= cap->v[RESOURCE_HUGEPAGES_2MI] + cap->v[RESOURCE_HUGEPAGES_1GI];
        for (int k = 0; k < RESOURCE_COUNT; k++)
                if (s->allocatable.v[k] < 0)
                        s->allocatable.v[k] = 0;
}

static int shape_init(const char *name, const char *family, uint32_t vcpus, uint64_t vm_memory_bytes,
                      const struct shape_options *o, struct shape *s) {
        if (!name || !*name || strlen(name) >= SHAPE_NAME_MAX || !family || !*family ||
            strlen(family) >= SHAPE_FAMILY_MAX || vcpus == 0 || vm_memory_bytes == 0 ||
            vm_memory_bytes % (uint64_t)MIB != 0 || vm_memory_bytes > (uint64_t)INT64_MAX)
                return -EINVAL;
        *s = (struct shape){ .vcpus = vcpus, .vm_memory_bytes = vm_memory_bytes };
        strcpy(s->name, name);
        strcpy(s->family, family);
        int64_t overhead = (int64_t)ceil((double)vm_memory_bytes * o->vm_memory_overhead / (double)MIB) * MIB;
        s->capacity.v[RESOURCE_CPU] = (int64_t)vcpus * 1000;
        s->capacity.v[RESOURCE_MEMORY] = (int64_t)vm_memory_bytes - overhead;
        s->capacity.v[RESOURCE_EPHEMERAL_STORAGE] = o->disk_bytes;
        s->capacity.v[RESOURCE_PODS] = o->max_pods > 0 ? o->max_pods : default_max_pods(vm_memory_bytes);
        return 0;
}

int shapes_make(const char *name, const char *family, uint32_t vcpus, uint64_t vm_memory_bytes,
                const struct shape_options *options, struct shape *ret_shape) {
        struct shape s;
        int r = shape_init(name, family, vcpus, vm_memory_bytes, options, &s);
        if (r < 0)
                return r;
        shape_finish(&s, options);
        *ret_shape = s;
        return 0;
}

static struct shape_catalog *shapes_catalog_new(void) {
        return calloc(1, sizeof(struct shape_catalog));
}

void shapes_catalog_free(struct shape_catalog *c) {
        if (!c)
                return;
        free(c->items);
        free(c);
}

const struct shape *shapes_catalog_find(const struct shape_catalog *c, const char *name) {
        for (size_t i = 0; i < c->n; i++)
                if (strcmp(c->items[i].name, name) == 0)
                        return &c->items[i];
        return NULL;
}

/* Append a copy. -EEXIST when the name is taken, -ENOMEM. */
static int shapes_catalog_add(struct shape_catalog *c, const struct shape *s) {
        if (shapes_catalog_find(c, s->name))
                return -EEXIST;
        if (ARRAY_GROW(&c->items, &c->cap, c->n, 32) < 0)
                return -ENOMEM;
        c->items[c->n++] = *s;
        return 0;
}

int shapes_cost_compare(const struct shape *a, const struct shape *b) {
        if (a->vcpus != b->vcpus)
                return a->vcpus < b->vcpus ? -1 : 1;
        if (a->vm_memory_bytes != b->vm_memory_bytes)
                return a->vm_memory_bytes < b->vm_memory_bytes ? -1 : 1;
        return strcmp(a->name, b->name);
}

static int cmp_shape(const void *a, const void *b) {
        return shapes_cost_compare(a, b);
}

void shapes_catalog_sort(struct shape_catalog *c) {
        if (c->n > 1)
                qsort(c->items, c->n, sizeof c->items[0], cmp_shape);
}

int shapes_catalog_default(const struct shape_options *options, struct shape_catalog **ret_catalog) {
        struct shape_catalog *c = shapes_catalog_new();
        if (!c)
                return -ENOMEM;
        for (size_t f = 0; f < sizeof DEFAULT_FAMILIES / sizeof DEFAULT_FAMILIES[0]; f++)
                for (size_t i = 0; i < sizeof DEFAULT_VCPUS / sizeof DEFAULT_VCPUS[0]; i++) {
                        uint32_t vcpus = DEFAULT_VCPUS[i], gib = vcpus * DEFAULT_FAMILIES[f].gib_per_vcpu;
                        char name[SHAPE_NAME_MAX];
                        struct shape s;
                        snprintf(name, sizeof name, "%s.%uVCPU-%uGB", DEFAULT_FAMILIES[f].family, vcpus, gib);
                        int r = shapes_make(name, DEFAULT_FAMILIES[f].family, vcpus, (uint64_t)gib * GIB,
                                            options, &s);
                        if (r >= 0)
                                r = shapes_catalog_add(c, &s);
                        if (r < 0) {
                                shapes_catalog_free(c);
                                return r;
                        }
                }
        shapes_catalog_sort(c);
        *ret_catalog = c;
        return 0;
}

/* ---- custom shapes and kubelet options from JSON ---- */

static int fail(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
        snprintf(err, errlen, fmt, a, b);
        return -EINVAL;
}

/* A quantity member that may be a JSON string or number. -ENOENT when absent. */
static int get_quantity(const json_t *obj, const char *key, enum quantity_scale scale, int64_t *ret) {
        json_t *v = json_object_get(obj, key);
        char buf[64];
        const char *text;
        if (!v)
                return -ENOENT;
        if (json_is_string(v))
                text = json_string_value(v);
        else if (json_is_integer(v)) {
                snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
                text = buf;
        } else if (json_is_real(v)) {
                snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
                text = buf;
        } else {
                return -EINVAL;
        }
        int64_t value;
        int r = quantity_parse(text, scale, &value);
        if (r < 0 || value < 0)
                return -EINVAL;
        *ret = value;
        return 0;
}

/* Read {cpu, memory, ephemeral-storage, pods, hugepages-*} into out (members absent stay as they are). */
static int get_resource_list(const json_t *obj, struct resources *out, const char **ret_bad) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
                int kind = resources_kind_from_name(key);
                int64_t value;
                if (kind < 0 || get_quantity(obj, key, kind == RESOURCE_CPU ? QUANTITY_MILLI : QUANTITY_UNITS,
                                             &value) < 0) {
                        *ret_bad = key;
                        return -EINVAL;
                }
                out->v[kind] = value;
        }
        return 0;
}

static const json_t *get_either(const json_t *obj, const char *a, const char *b) {
        const json_t *v = json_object_get(obj, a);
        return v ? v : json_object_get(obj, b);
}

static int custom_overhead(const json_t *overhead, struct shape_options *o, const char **ret_bad) {
        static const char *const NAMES[][2] = { { "kubeReserved", "KubeReserved" },
                                                { "systemReserved", "SystemReserved" },
                                                { "evictionThreshold", "EvictionThreshold" } };
        struct resources lists[3];
        for (int i = 0; i < 3; i++) {
                for (int k = 0; k < RESOURCE_COUNT; k++)
                        lists[i].v[k] = -1;
                const json_t *l = get_either(overhead, NAMES[i][0], NAMES[i][1]);
                if (l && (!json_is_object(l) || get_resource_list(l, &lists[i], ret_bad) < 0)) {
                        *ret_bad = *ret_bad ? *ret_bad : NAMES[i][0];
                        return -EINVAL;
                }
        }
        o->kube_reserved = lists[0];
        o->system_reserved = lists[1];
        if (lists[2].v[RESOURCE_MEMORY] >= 0) {
                o->eviction_memory_bytes = lists[2].v[RESOURCE_MEMORY];
                o->eviction_memory_percent = 0;
        }
        return 0;
}

static void family_from_name(const json_t *item, const char *name, char *family, size_t len) {
        const char *f = json_string_value(json_object_get(item, "family"));
        if (f) {
                snprintf(family, len, "%s", f);
                return;
        }
        const char *dot = strchr(name, '.');
        if (!dot || dot == name)
                snprintf(family, len, "custom");
        else
                snprintf(family, len, "%.*s", (int)(dot - name), name);
}

static int custom_shape(const json_t *item, const struct shape_options *options, struct shape *ret,
                        char *err, size_t errlen) {
        const char *name = json_string_value(json_object_get(item, "name")), *bad = NULL;
        const json_t *cap = json_object_get(item, "capacity"), *over = json_object_get(item, "overhead");
        struct resources c = { .v = { -1, -1, -1, -1, 0, 0 } };
        struct shape_options o = *options;
        char family[SHAPE_FAMILY_MAX];
        struct shape s;
        if (!name || !*name || strlen(name) >= SHAPE_NAME_MAX)
                return fail(err, errlen, "name: %s%s", "a non-empty string is required", "");
        if (!json_is_object(cap) || get_resource_list(cap, &c, &bad) < 0)
                return fail(err, errlen, "capacity%s%s: invalid quantity", bad ? "." : "", bad ? bad : "");
        if (c.v[RESOURCE_CPU] <= 0 || c.v[RESOURCE_CPU] % 1000 != 0)
                return fail(err, errlen, "capacity.cpu: %s%s", "a whole number of vCPUs is required", "");
        if (c.v[RESOURCE_MEMORY] <= 0 || c.v[RESOURCE_MEMORY] % MIB != 0)
                return fail(err, errlen, "capacity.memory: %s%s", "a positive whole number of MiB is required", "");
        if (over && (!json_is_object(over) || custom_overhead(over, &o, &bad) < 0))
                return fail(err, errlen, "overhead%s%s: invalid", bad ? "." : "", bad ? bad : "");
        family_from_name(item, name, family, sizeof family);
        if (c.v[RESOURCE_EPHEMERAL_STORAGE] >= 0)
                o.disk_bytes = c.v[RESOURCE_EPHEMERAL_STORAGE];
        if (c.v[RESOURCE_PODS] > 0)
                o.max_pods = (int32_t)c.v[RESOURCE_PODS];
        if (shape_init(name, family, (uint32_t)(c.v[RESOURCE_CPU] / 1000), (uint64_t)c.v[RESOURCE_MEMORY], &o,
                       &s) < 0)
                return fail(err, errlen, "family: %s%s", "invalid", "");
        s.capacity.v[RESOURCE_HUGEPAGES_2MI] = c.v[RESOURCE_HUGEPAGES_2MI];
        s.capacity.v[RESOURCE_HUGEPAGES_1GI] = c.v[RESOURCE_HUGEPAGES_1GI];
        s.custom = true;
        shape_finish(&s, &o);
        *ret = s;
        return 0;
}

int shapes_catalog_add_custom(struct shape_catalog *c, const json_t *list, const struct shape_options *options,
                              char *err, size_t errlen) {
        size_t i, n0 = c->n;
        json_t *item;
        char msg[160];
        if (!json_is_array(list)) {
                snprintf(err, errlen, "instanceTypes: a list is required");
                return -EINVAL;
        }
        json_array_foreach(list, i, item) {
                struct shape s;
                int r = json_is_object(item) ? custom_shape(item, options, &s, msg, sizeof msg)
                                             : fail(msg, sizeof msg, "%s%san object is required", "", "");
                if (r >= 0 && (r = shapes_catalog_add(c, &s)) == -EEXIST)
                        snprintf(msg, sizeof msg, "name: %s is defined twice", s.name);
                if (r < 0) {
                        snprintf(err, errlen, "instanceTypes[%zu].%s", i, msg);
                        c->n = n0;
                        return r == -ENOMEM ? r : -EINVAL;
                }
        }
        return 0;
}

/* "5%" -> 5; -EINVAL otherwise. */
static int parse_percent(const char *s, int32_t *ret) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || strcmp(end, "%") != 0 || v < 0 || v > 100)
                return -EINVAL;
        *ret = (int32_t)v;
        return 0;
}

static int kubelet_eviction(const json_t *ev, struct shape_options *o, char *err, size_t errlen) {
        const char *mem = json_string_value(json_object_get(ev, "memory.available"));
        const char *fs = json_string_value(json_object_get(ev, "nodefs.available"));
        int32_t pct;
        int64_t bytes;
        if (mem && parse_percent(mem, &pct) == 0) {
                o->eviction_memory_percent = pct;
        } else if (mem && quantity_parse_value(mem, &bytes) == 0 && bytes >= 0) {
                o->eviction_memory_bytes = bytes;
                o->eviction_memory_percent = 0;
        } else if (mem || json_object_get(ev, "memory.available")) {
                return fail(err, errlen, "evictionHard.memory.available: %s%s",
                            "a quantity or a percent is required", "");
        }
        bool nodefs_given = fs || json_object_get(ev, "nodefs.available");
        if (nodefs_given && (!fs || parse_percent(fs, &o->eviction_nodefs_percent) < 0))
                return fail(err, errlen, "evictionHard.nodefs.available: %s%s", "a percent is required", "");
        return 0;
}

static int kubelet_reserved(const json_t *kubelet, const char *key, struct resources *out, char *err,
                            size_t errlen) {
        const json_t *l = json_object_get(kubelet, key);
        const char *bad = NULL;
        if (!l)
                return 0;
        if (!json_is_object(l) || get_resource_list(l, out, &bad) < 0)
                return fail(err, errlen, "%s.%s: invalid quantity", key, bad ? bad : "");
        return 0;
}

int shapes_options_from_kubelet(const json_t *kubelet, struct shape_options *options, char *err, size_t errlen) {
        struct shape_options o = *options;
        const json_t *v;
        if (!kubelet)
                return 0;
        if (!json_is_object(kubelet))
                return fail(err, errlen, "kubeletConfiguration: %s%s", "an object is required", "");
        v = json_object_get(kubelet, "maxPods");
        if (v && (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000))
                return fail(err, errlen, "maxPods: %s%s", "an integer between 1 and 1000 is required", "");
        if (v)
                o.max_pods = (int32_t)json_integer_value(v);
        if (kubelet_reserved(kubelet, "kubeReserved", &o.kube_reserved, err, errlen) < 0 ||
            kubelet_reserved(kubelet, "systemReserved", &o.system_reserved, err, errlen) < 0)
                return -EINVAL;
        v = json_object_get(kubelet, "evictionHard");
        if (v && (!json_is_object(v) || kubelet_eviction(v, &o, err, errlen) < 0))
                return json_is_object(v) ? -EINVAL
                                         : fail(err, errlen, "evictionHard: %s%s", "an object is required", "");
        *options = o;
        return 0;
}
