/* placement_json: placements and requests to and from JSON, and the placement invariant check (pure). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "jsonutil.h"
#include "placement.h"

static int get_field_u64(const json_t *obj, const char *key, bool required, uint64_t *ret_v, char *reason,
                         size_t len) {
        int r = jsonutil_get_u64(obj, key, ret_v);
        if (r == -ENOENT && !required)
                return 0;
        if (r == -ENOENT)
                snprintf(reason, len, "%s is required", key);
        else if (r < 0)
                snprintf(reason, len, "%s must be a non-negative integer", key);
        return r < 0 ? -EINVAL : 0;
}

int placement_request_from_json(const json_t *obj, struct placement_request *ret_req, char *reason,
                                size_t reasonlen) {
        uint64_t vcpus = 0, mem = 0, kib = 0;
        if (!json_is_object(obj)) {
                snprintf(reason, reasonlen, "request must be a JSON object");
                return -EINVAL;
        }
        int r = get_field_u64(obj, "vcpus", true, &vcpus, reason, reasonlen);
        if (r >= 0)
                r = get_field_u64(obj, "memory_bytes", true, &mem, reason, reasonlen);
        if (r >= 0)
                r = get_field_u64(obj, "hugepage_kib", false, &kib, reason, reasonlen);
        if (r < 0)
                return r;
        if (vcpus > PLACEMENT_MAX_VCPUS)
                vcpus = 0; /* rejected below with the range */
        struct placement_request req = { .vcpus = (unsigned)vcpus, .memory_bytes = mem, .hugepage_kib = kib };
        r = placement_request_check(&req, reason, reasonlen);
        if (r < 0)
                return r;
        *ret_req = req;
        return 0;
}

/* ---- to JSON ---- */

static json_t *numa_to_json(const struct placement_numa *pn) {
        return json_pack("{s:i, s:o, s:I}", "node", pn->node, "guest_cpus", jsonutil_cpuset(pn->guest_cpus),
                         "memory_bytes", (json_int_t)pn->memory_bytes);
}

json_t *placement_to_json(const struct placement *p) {
        json_t *map = json_array(), *numa = json_array();
        int r = map && numa ? 0 : -ENOMEM;
        for (unsigned v = 0; r >= 0 && v < p->n_vcpus; v++)
                r = json_array_append_new(map, json_integer(p->vcpu_map[v]));
        for (size_t j = 0; r >= 0 && j < p->n_numa; j++)
                r = json_array_append_new(numa, numa_to_json(&p->numa[j]));
        if (r < 0) {
                json_decref(map);
                json_decref(numa);
                return NULL;
        }
        return json_pack("{s:o, s:o, s:o}", "cpus", jsonutil_cpuset(p->cpus), "vcpu_map", map, "numa", numa);
}

/* ---- validation ---- */

static int topo_numa_index(const struct topology *t, int id) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].id == id)
                        return (int)i;
        return -1;
}

/* vcpu_map holds each CPU of cpus exactly once. */
static int check_map(const struct placement *p, char *reason, size_t len) {
        struct cpuset *seen = cpuset_new();
        if (!seen)
                return -ENOMEM;
        int r = 0;
        for (unsigned v = 0; r >= 0 && v < p->n_vcpus; v++) {
                int cpu = p->vcpu_map[v];
                if (cpu < 0 || cpu > CPUSET_MAX_CPU || cpuset_test(seen, (unsigned)cpu))
                        r = errmsg_invalid(reason, len, "vcpu_map: host CPU %d appears twice or is out of range", cpu);
                else
                        r = cpuset_set(seen, (unsigned)cpu);
        }
        if (r >= 0 && !cpuset_equal(seen, p->cpus))
                r = errmsg_invalid(reason, len, "cpus does not match vcpu_map (%u vCPUs)", p->n_vcpus);
        cpuset_free(seen);
        return r;
}

static int check_numa_node(const struct topology *t, const struct placement *p, size_t j, unsigned first,
                           char *reason, size_t len) {
        const struct placement_numa *pn = &p->numa[j];
        if (pn->first_vcpu != first || pn->n_vcpus == 0 || first + pn->n_vcpus > p->n_vcpus)
                return errmsg_invalid(reason, len, "numa[%zu]: guest vCPUs must continue the previous node's range", j);
        if (pn->memory_bytes == 0 || pn->memory_bytes % PLACEMENT_MIB)
                return errmsg_invalid(reason, len, "numa[%zu]: memory_bytes must be a positive whole number of MiB", j);
        for (size_t m = 0; m < j; m++)
                if (p->numa[m].node == pn->node)
                        return errmsg_invalid(reason, len, "numa: host node %d is used twice", pn->node);
        int i = topo_numa_index(t, pn->node);
        if (i < 0)
                return errmsg_invalid(reason, len, "numa: host node %d does not exist", pn->node);
        for (unsigned v = first; v < first + pn->n_vcpus; v++) {
                if (!cpuset_test(pn->guest_cpus, v) || !t->numa_nodes[i].cpus ||
                    !cpuset_test(t->numa_nodes[i].cpus, (unsigned)p->vcpu_map[v]))
                        return errmsg_invalid(reason, len, "guest vCPU %u is not on its guest node's host node", v);
        }
        if (cpuset_count(pn->guest_cpus) != pn->n_vcpus)
                return errmsg_invalid(reason, len, "numa[%zu]: guest_cpus does not match its vCPU range", j);
        return 0;
}

int placement_validate(const struct topology *t, const struct placement *p, char *reason, size_t reasonlen) {
        if (p->n_vcpus == 0 || p->n_numa == 0 || p->n_numa > PLACEMENT_MAX_NUMA)
                return errmsg_invalid(reason, reasonlen, "a placement needs vCPUs and 1 to %d guest NUMA nodes",
                            PLACEMENT_MAX_NUMA);
        int r = check_map(p, reason, reasonlen);
        if (r < 0)
                return r;
        unsigned first = 0;
        uint64_t mem = 0;
        for (size_t j = 0; j < p->n_numa; j++) {
                r = check_numa_node(t, p, j, first, reason, reasonlen);
                if (r < 0)
                        return r;
                first += p->numa[j].n_vcpus;
                mem += p->numa[j].memory_bytes;
        }
        if (first != p->n_vcpus)
                return errmsg_invalid(reason, reasonlen, "numa: guest nodes cover %u vCPUs, not all of them", first);
        if (mem != p->memory_bytes)
                return errmsg_invalid(reason, reasonlen, "numa: memory adds up to %llu MiB, not the VM memory",
                            (unsigned long long)(mem / PLACEMENT_MIB));
        return 0;
}

/* ---- from JSON ---- */

static int parse_cpus(const json_t *obj, const char *key, struct cpuset **ret, char *reason, size_t len) {
        const char *s = NULL;
        if (jsonutil_get_string(obj, key, &s) < 0 || cpuset_parse(s, ret) < 0) {
                snprintf(reason, len, "%s must be a cpulist string", key);
                return -EINVAL;
        }
        return 0;
}

static int parse_map(const json_t *arr, struct placement *p, char *reason, size_t len) {
        size_t n = json_array_size(arr);
        if (!json_is_array(arr) || n == 0 || n > PLACEMENT_MAX_VCPUS)
                return errmsg_invalid(reason, len, "vcpu_map must be a non-empty array of at most %u CPUs",
                            PLACEMENT_MAX_VCPUS);
        p->vcpu_map = calloc(n, sizeof(int));
        if (!p->vcpu_map)
                return -ENOMEM;
        p->n_vcpus = (unsigned)n;
        for (size_t v = 0; v < n; v++) {
                json_t *e = json_array_get(arr, v);
                if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > CPUSET_MAX_CPU)
                        return errmsg_invalid(reason, len, "vcpu_map[%zu] must be a host CPU number", v);
                p->vcpu_map[v] = (int)json_integer_value(e);
        }
        return 0;
}

static int parse_numa_node(const json_t *o, struct placement_numa *pn, char *reason, size_t len) {
        json_t *node = json_object_get(o, "node");
        uint64_t mem = 0;
        if (!json_is_object(o) || !json_is_integer(node) || json_integer_value(node) < 0 ||
            json_integer_value(node) > 1 << 20)
                return errmsg_invalid(reason, len, "numa: node must be a host NUMA node id");
        pn->node = (int)json_integer_value(node);
        int r = get_field_u64(o, "memory_bytes", true, &mem, reason, len);
        if (r < 0)
                return r;
        pn->memory_bytes = mem;
        r = parse_cpus(o, "guest_cpus", &pn->guest_cpus, reason, len);
        if (r < 0)
                return r;
        pn->n_vcpus = cpuset_count(pn->guest_cpus);
        int first = cpuset_next(pn->guest_cpus, -1);
        pn->first_vcpu = first < 0 ? 0 : (unsigned)first;
        return 0;
}

static int parse_numa(const json_t *arr, struct placement *p, char *reason, size_t len) {
        size_t n = json_array_size(arr);
        if (!json_is_array(arr) || n == 0 || n > PLACEMENT_MAX_NUMA)
                return errmsg_invalid(reason, len, "numa must be an array of 1 to %d guest nodes", PLACEMENT_MAX_NUMA);
        for (size_t j = 0; j < n; j++) {
                int r = parse_numa_node(json_array_get(arr, j), &p->numa[j], reason, len);
                p->n_numa = j + (p->numa[j].guest_cpus != NULL);
                if (r < 0)
                        return r;
                p->memory_bytes += p->numa[j].memory_bytes;
        }
        return 0;
}

int placement_from_json(const struct topology *t, const json_t *obj, struct placement **ret_p, char *reason,
                        size_t reasonlen) {
        if (!json_is_object(obj))
                return errmsg_invalid(reason, reasonlen, "placement must be a JSON object");
        struct placement *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        int r = parse_cpus(obj, "cpus", &p->cpus, reason, reasonlen);
        if (r >= 0)
                r = parse_map(json_object_get(obj, "vcpu_map"), p, reason, reasonlen);
        if (r >= 0)
                r = parse_numa(json_object_get(obj, "numa"), p, reason, reasonlen);
        if (r >= 0)
                r = placement_validate(t, p, reason, reasonlen);
        if (r < 0) {
                placement_free(p);
                return r;
        }
        *ret_p = p;
        return 0;
}
