/* bench/placement baseline: a reproduction of the seed's static placement policy, for comparison only. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Working state of one baseline placement. */
struct base {
        const struct topology *t;
        struct cpuset *avail; /* free CPUs of qualifying nodes, minus what is already selected */
        struct cpuset *sel;
        unsigned left;
        int scope_node, scope_l3; /* restrict cores/threads to one L3 group (-2 = no restriction) */
        size_t n_slots;           /* (node, l3) slots: node * (n_l3 + 1) + l3 + 1 */
        unsigned *nav, *gav, *gsize; /* free CPUs per node, free CPUs and size per (node, l3) slot */
};

void bench_vm_done(struct bench_vm *vm) {
        cpuset_free(vm->cpus);
        free(vm->vcpu_map);
        *vm = (struct bench_vm){ 0 };
}

static size_t slot(const struct base *b, int node, int l3) {
        return (size_t)node * (b->t->n_l3_caches + 1) + (size_t)(l3 + 1);
}

/* Recount the free CPUs per node and per (node, l3) group. */
static void refresh(struct base *b) {
        memset(b->nav, 0, b->t->n_numa_nodes * sizeof(unsigned));
        memset(b->gav, 0, b->n_slots * sizeof(unsigned));
        for (size_t k = 0; k < b->t->n_cores; k++) {
                const struct topology_core *c = &b->t->cores[k];
                if (c->numa_node < 0)
                        continue;
                unsigned n = cpuset_count_and(b->avail, c->cpus);
                b->nav[c->numa_node] += n;
                b->gav[slot(b, c->numa_node, c->l3)] += n;
        }
}

static unsigned node_avail(const struct base *b, int node) {
        return node < 0 ? 0 : b->nav[node];
}

static unsigned group_avail(const struct base *b, int node, int l3) {
        return node < 0 ? 0 : b->gav[slot(b, node, l3)];
}

static unsigned group_size(const struct base *b, int node, int l3) {
        return node < 0 ? 0 : b->gsize[slot(b, node, l3)];
}

static int base_init(struct base *b) {
        b->n_slots = b->t->n_numa_nodes * (b->t->n_l3_caches + 1) + 1;
        b->nav = calloc(b->t->n_numa_nodes + 1, sizeof(unsigned));
        b->gav = calloc(b->n_slots, sizeof(unsigned));
        b->gsize = calloc(b->n_slots, sizeof(unsigned));
        if (!b->nav || !b->gav || !b->gsize || !b->avail || !b->sel)
                return -ENOMEM;
        for (size_t k = 0; k < b->t->n_cores; k++) {
                const struct topology_core *c = &b->t->cores[k];
                if (c->numa_node >= 0)
                        b->gsize[slot(b, c->numa_node, c->l3)] += cpuset_count(c->cpus);
        }
        return 0;
}

static void base_done(struct base *b) {
        free(b->nav);
        free(b->gav);
        free(b->gsize);
        cpuset_free(b->avail);
        cpuset_free(b->sel);
}

static void take(struct base *b, const struct cpuset *cpus) {
        CPUSET_FOREACH(cpu, cpus)
                if (cpuset_test(b->avail, (unsigned)cpu) && b->left > 0) {
                        cpuset_clear(b->avail, (unsigned)cpu);
                        cpuset_set(b->sel, (unsigned)cpu);
                        b->left--;
                }
}

static bool in_scope(const struct base *b, const struct topology_core *c) {
        return b->scope_node == -2 || (c->numa_node == b->scope_node && c->l3 == b->scope_l3);
}

/* Whole NUMA nodes while the request is at least a node. */
static void take_nodes(struct base *b) {
        refresh(b);
        for (size_t i = 0; i < b->t->n_numa_nodes; i++) {
                const struct cpuset *cpus = b->t->numa_nodes[i].cpus;
                unsigned size = cpus ? cpuset_count_and(cpus, b->t->online) : 0;
                if (size && b->left >= size && node_avail(b, (int)i) == size)
                        take(b, cpus);
        }
}

/* Best (node fewest free, then group fewest free) L3 group with want(avail, size) true; -1 if none. */
static long pick_group(struct base *b, bool whole) {
        long best = -1;
        refresh(b);
        unsigned bn = 0, bg = 0;
        for (size_t k = 0; k < b->t->n_cores; k++) {
                const struct topology_core *c = &b->t->cores[k];
                if (c->l3 < 0 || !cpuset_intersects(c->cpus, b->avail))
                        continue;
                unsigned ga = group_avail(b, c->numa_node, c->l3), na = node_avail(b, c->numa_node);
                bool ok = whole ? (ga == group_size(b, c->numa_node, c->l3) && b->left >= ga) : ga >= b->left;
                if (ok && (best < 0 || na < bn || (na == bn && ga < bg))) {
                        best = (long)k;
                        bn = na;
                        bg = ga;
                }
        }
        return best;
}

static void take_group(struct base *b, const struct topology_core *c0) {
        for (size_t k = 0; k < b->t->n_cores; k++)
                if (b->t->cores[k].numa_node == c0->numa_node && b->t->cores[k].l3 == c0->l3)
                        take(b, b->t->cores[k].cpus);
}

static void take_l3(struct base *b) {
        long k;
        while (b->left > 0 && (k = pick_group(b, true)) >= 0)
                take_group(b, &b->t->cores[k]);
        if (b->left > 0 && (k = pick_group(b, false)) >= 0) {
                b->scope_node = b->t->cores[k].numa_node;
                b->scope_l3 = b->t->cores[k].l3;
        }
}

static bool key_less(const unsigned *a, const unsigned *b) {
        for (int i = 0; i < 3; i++)
                if (a[i] != b[i])
                        return a[i] < b[i];
        return false;
}

/* The core to take next: whole cores (or any core with free threads when !whole), fewest free first
 * at node, then L3 group, then core level. */
static long pick_core(struct base *b, bool whole) {
        long best = -1;
        refresh(b);
        unsigned key[3] = { 0 };
        for (size_t k = 0; k < b->t->n_cores; k++) {
                const struct topology_core *c = &b->t->cores[k];
                unsigned free_n = cpuset_count_and(c->cpus, b->avail), size = cpuset_count(c->cpus);
                if (!free_n || !in_scope(b, c) || (whole && (free_n != size || b->left < size)))
                        continue;
                unsigned kk[3] = { node_avail(b, c->numa_node), group_avail(b, c->numa_node, c->l3), free_n };
                if (best >= 0 && !key_less(kk, key))
                        continue;
                best = (long)k;
                memcpy(key, kk, sizeof key);
        }
        return best;
}

static void take_cores(struct base *b) {
        long k;
        while (b->left > 0 && (k = pick_core(b, true)) >= 0)
                take(b, b->t->cores[k].cpus);
        while (b->left > 0 && (k = pick_core(b, false)) >= 0) {
                unsigned before = b->left;
                b->left = 1; /* one thread at a time */
                take(b, b->t->cores[k].cpus);
                b->left = before - 1;
        }
}

/* Qualifying nodes' free CPUs: memory >= the whole VM memory. */
static int qualify(const struct topology *t, const struct capacity *c, uint64_t mem, struct cpuset *avail) {
        for (size_t i = 0; i < t->n_numa_nodes && i < c->n_numa; i++) {
                if (c->numa[i].memory_free_bytes < mem || !c->numa[i].free_cpus)
                        continue;
                for (size_t k = 0; k < t->n_cores; k++)
                        if (t->cores[k].numa_node == (int)i && cpuset_or(avail, t->cores[k].cpus) < 0)
                                return -ENOMEM;
        }
        cpuset_and(avail, c->free_cpus);
        return 0;
}

static size_t touched_nodes(const struct topology *t, const struct cpuset *cpus) {
        size_t n = 0;
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                bool hit = false;
                for (size_t k = 0; k < t->n_cores && !hit; k++)
                        hit = t->cores[k].numa_node == (int)i && cpuset_intersects(t->cores[k].cpus, cpus);
                n += hit;
        }
        return n;
}

static int to_vm(const struct topology *t, struct base *b, const struct placement_request *req, struct bench_vm *vm) {
        vm->cpus = b->sel;
        b->sel = NULL;
        vm->n_vcpus = req->vcpus;
        vm->memory_bytes = req->memory_bytes;
        vm->vcpu_map = calloc(req->vcpus, sizeof(int));
        if (!vm->vcpu_map)
                return -ENOMEM;
        unsigned v = 0;
        CPUSET_FOREACH(cpu, vm->cpus)
                vm->vcpu_map[v++] = cpu; /* defect 5: thread order paired with an unordered cpuset */
        vm->n_numa = touched_nodes(t, vm->cpus);
        vm->numa_sum = vm->n_numa * req->memory_bytes; /* defect 1 */
        return 0;
}

int baseline_place(const struct topology *t, const struct capacity *c, const struct placement_request *req,
                   struct bench_vm *ret_vm) {
        struct base b = { .t = t, .avail = cpuset_new(), .sel = cpuset_new(), .left = req->vcpus, .scope_node = -2 };
        int r = base_init(&b);
        if (r >= 0)
                r = qualify(t, c, req->memory_bytes, b.avail);
        if (r >= 0 && cpuset_count(b.avail) < req->vcpus)
                r = -ENOSPC;
        if (r >= 0) {
                take_nodes(&b);
                take_l3(&b);
                take_cores(&b);
                r = b.left == 0 ? 0 : -ENOSPC;
        }
        struct bench_vm vm = { 0 };
        if (r >= 0)
                r = to_vm(t, &b, req, &vm);
        base_done(&b);
        if (r < 0) {
                bench_vm_done(&vm);
                return r;
        }
        *ret_vm = vm;
        return 0;
}

void baseline_charge(const struct topology *t, struct capacity *c, const struct bench_vm *vm) {
        cpuset_andnot(c->free_cpus, vm->cpus);
        for (size_t i = 0; i < c->n_numa && i < t->n_numa_nodes; i++) {
                if (c->numa[i].free_cpus)
                        cpuset_andnot(c->numa[i].free_cpus, vm->cpus);
                bool hit = false;
                for (size_t k = 0; k < t->n_cores && !hit; k++)
                        hit = t->cores[k].numa_node == (int)i && cpuset_intersects(t->cores[k].cpus, vm->cpus);
                if (!hit)
                        continue;
                uint64_t *m = &c->numa[i].memory_free_bytes;
                *m = *m > vm->memory_bytes ? *m - vm->memory_bytes : 0;
        }
}
