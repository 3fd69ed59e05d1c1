/* capacity: pure accounting of a host's free CPUs and memory, host-wide and per NUMA node. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "capacity.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"

#define MIB (UINT64_C(1) << 20)

/* The NUMA layout the accounting uses: the detected nodes, or the node-setting file's nodes{} override. */
struct node_view {
        int id;
        struct cpuset *cpus; /* owned; intersected with the online CPUs */
        uint64_t memory_bytes;
};

struct layout {
        size_t n;
        struct node_view *nodes;
};

static void layout_done(struct layout *l) {
        for (size_t i = 0; i < l->n; i++)
                cpuset_free(l->nodes[i].cpus);
        free(l->nodes);
}

static const struct topology_numa_node *topology_node(const struct topology *t, int id) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].id == id)
                        return &t->numa_nodes[i];
        return NULL;
}

static int layout_index(const struct layout *l, int id) {
        for (size_t i = 0; i < l->n; i++)
                if (l->nodes[i].id == id)
                        return (int)i;
        return -1;
}

/* One node: an override field wins; a missing one falls back to the detected node with the same id. */
static int node_view_init(struct node_view *v, const struct topology *t, int id, const struct cpuset *cpus,
                          uint64_t memory_bytes) {
        const struct topology_numa_node *detected = topology_node(t, id);
        if (!cpus && detected)
                cpus = detected->cpus;
        v->id = id;
        v->memory_bytes = memory_bytes;
        if (!memory_bytes && detected)
                v->memory_bytes = detected->memory_bytes;
        v->cpus = cpus ? cpuset_dup(cpus) : cpuset_new();
        if (!v->cpus)
                return -ENOMEM;
        if (t->online)
                cpuset_and(v->cpus, t->online);
        return 0;
}

static int layout_build(const struct topology *t, const struct node_settings *settings, struct layout *ret) {
        bool override = settings && settings->n_numa > 0;
        size_t n = override ? settings->n_numa : t->n_numa_nodes;
        struct layout l = { 0, calloc(n ? n : 1, sizeof(struct node_view)) };
        if (!l.nodes)
                return -ENOMEM;
        for (; l.n < n; l.n++) {
                int r = override ? node_view_init(&l.nodes[l.n], t, settings->numa[l.n].id, settings->numa[l.n].cpus,
                                                  settings->numa[l.n].memory_bytes)
                                 : node_view_init(&l.nodes[l.n], t, t->numa_nodes[l.n].id, t->numa_nodes[l.n].cpus,
                                                  t->numa_nodes[l.n].memory_bytes);
                if (r < 0) {
                        layout_done(&l);
                        return r;
                }
        }
        *ret = l;
        return 0;
}

/* ---- which VMs count ---- */

/* A stopped VM will start again (onboot, HA, a user) and then needs its CPUs and memory back, so it is
 * charged by default; the Go provider counted running VMs only and double-booked them (anchors §1.3). */
static bool vm_counted(const struct vm *vm, const struct capacity_options *opts) {
        if (vm->template_vm)
                return false; /* templates never run */
        return vm->running || opts->count_stopped_vms;
}

/* ---- sharing an amount out in proportion to weights (largest remainder, exact sum) ---- */

/* Ordering for the leftover units: larger remainder first, then lower index. */
static bool ranks_before(unsigned __int128 rem_a, size_t a, unsigned __int128 rem_b, size_t b) {
        return rem_a > rem_b || (rem_a == rem_b && a < b);
}

/* shares[i] = amount * weights[i] / sum(weights), rounded so that the shares add up to amount (all zero when
 * every weight is zero). The leftover after flooring is below n: one unit each to the largest remainders. */
static void apportion(uint64_t amount, const uint64_t *weights, size_t n, uint64_t *ret_shares) {
        unsigned __int128 total = 0;
        for (size_t i = 0; i < n; i++)
                total += weights[i];
        uint64_t given = 0;
        for (size_t i = 0; i < n; i++) {
                ret_shares[i] = total ? (uint64_t)((unsigned __int128)amount * weights[i] / total) : 0;
                given += ret_shares[i];
        }
        unsigned __int128 prev_rem = 0;
        size_t prev = SIZE_MAX;
        for (uint64_t left = total ? amount - given : 0; left > 0; left--) {
                size_t best = SIZE_MAX;
                unsigned __int128 best_rem = 0;
                for (size_t i = 0; i < n; i++) {
                        unsigned __int128 rem = (unsigned __int128)amount * weights[i] % total;
                        bool after_prev = prev == SIZE_MAX || ranks_before(prev_rem, prev, rem, i);
                        if (after_prev && (best == SIZE_MAX || ranks_before(rem, i, best_rem, best))) {
                                best = i;
                                best_rem = rem;
                        }
                }
                ret_shares[best]++;
                prev = best;
                prev_rem = best_rem;
        }
}

static uint64_t sub_or_zero(uint64_t a, uint64_t b) {
        return a > b ? a - b : 0;
}

/* Scratch arrays, one slot per node. */
struct scratch {
        uint64_t *weights, *shares, *bound;
};

/* ---- CPUs ---- */

/* Pinned VMs add their affinity to `pinned`; the others add their vCPUs to the floating count. */
/* A VM with `affinity` runs only on those CPUs; a VM without it may run anywhere, so it is charged as a
 * count of vCPUs rather than as a set. */
static int collect_vm_cpus(const struct inventory *inv, const struct capacity_options *opts, struct cpuset *pinned,
                           unsigned *ret_floating) {
        unsigned floating = 0;
        for (size_t i = 0; inv && i < inv->n_vms; i++) {
                const struct vm *vm = inv->vms[i];
                if (!vm_counted(vm, opts))
                        continue;
                if (!vm->affinity) {
                        floating += vm_vcpu_count(vm);
                        continue;
                }
                if (cpuset_or(pinned, vm->affinity) < 0)
                        return -ENOMEM;
        }
        *ret_floating = floating;
        return 0;
}

/* Containers count like VMs (capacity.h); one whose config could not be read is not guessed at. */
bool capacity_container_counted(const struct container *ct, const struct capacity_options *opts) {
        if (ct->template_ct || ct->unreadable)
                return false;
        return ct->running || opts->count_stopped_vms;
}

/* Pinned containers add their set (and a running one's effective set) to `pinned` and c->container_pinned_cpus;
 * the others add container_cpu_count() to the floating count. */
static int collect_container_cpus(struct capacity *c, const struct inventory *inv, const struct capacity_options *opts,
                                  unsigned host_cpus) {
        for (size_t i = 0; inv && i < inv->containers.n; i++) {
                const struct container *ct = inv->containers.items[i];
                if (!capacity_container_counted(ct, opts))
                        continue;
                c->containers_counted++;
                if (!ct->cpuset) {
                        c->container_floating_cpus += container_cpu_count(ct, host_cpus);
                        continue;
                }
                if (cpuset_or(c->container_pinned_cpus, ct->cpuset) < 0 ||
                    (ct->running && ct->effective && cpuset_or(c->container_pinned_cpus, ct->effective) < 0))
                        return -ENOMEM;
        }
        c->floating_vcpus += c->container_floating_cpus;
        return cpuset_or(c->pinned_cpus, c->container_pinned_cpus) < 0 ? -ENOMEM : 0;
}

/* CPUs in `cpus` that floating VMs can run on: the kernel does not balance tasks onto isolated CPUs. */
static unsigned floatable_count(const struct cpuset *cpus, const struct cpuset *isolated) {
        return cpuset_count(cpus) - cpuset_count_and(cpus, isolated);
}

/* Host-wide CPU rules (capacity.h). usable_cpus may include isolated CPUs: pinned placements can use them. */
static int compute_cpus(struct capacity *c, const struct topology *t, const struct node_settings *settings,
                        const struct inventory *inv, const struct capacity_options *opts) {
        const struct cpuset *online = t->online ? t->online : t->cpus;
        c->reserved_cpus = settings ? cpuset_dup(settings->reserved_cpus) : cpuset_new();
        c->isolated_cpus = t->isolated ? cpuset_dup(t->isolated) : cpuset_new();
        c->usable_cpus = cpuset_dup(online);
        c->pinned_cpus = cpuset_new();
        c->container_pinned_cpus = cpuset_new();
        if (!c->reserved_cpus || !c->isolated_cpus || !c->usable_cpus || !c->pinned_cpus || !c->container_pinned_cpus)
                return -ENOMEM;
        int r = collect_vm_cpus(inv, opts, c->pinned_cpus, &c->floating_vcpus);
        if (r == 0)
                r = collect_container_cpus(c, inv, opts, cpuset_count(online));
        if (r < 0)
                return r;
        cpuset_andnot(c->usable_cpus, c->reserved_cpus);
        c->free_cpus = cpuset_dup(c->usable_cpus);
        if (!c->free_cpus)
                return -ENOMEM;
        cpuset_andnot(c->free_cpus, c->pinned_cpus);
        unsigned floatable = floatable_count(c->free_cpus, c->isolated_cpus);
        unsigned charged = c->floating_vcpus < floatable ? c->floating_vcpus : floatable;
        c->cpus_total = cpuset_count(online);
        c->cpus_free = cpuset_count(c->free_cpus) - charged;
        return 0;
}

/* Per node: free CPUs, and the floating vCPUs shared out in proportion to each node's floatable CPUs. */
static int compute_numa_cpus(struct capacity *c, const struct layout *l, struct scratch *x) {
        uint64_t floatable = 0;
        for (size_t i = 0; i < l->n; i++) {
                c->numa[i].id = l->nodes[i].id;
                c->numa[i].free_cpus = cpuset_dup(l->nodes[i].cpus);
                if (!c->numa[i].free_cpus)
                        return -ENOMEM;
                cpuset_and(c->numa[i].free_cpus, c->free_cpus);
                x->weights[i] = floatable_count(c->numa[i].free_cpus, c->isolated_cpus);
                floatable += x->weights[i];
        }
        apportion(c->floating_vcpus < floatable ? c->floating_vcpus : floatable, x->weights, l->n, x->shares);
        for (size_t i = 0; i < l->n; i++)
                c->numa[i].cpus_free = cpuset_count(c->numa[i].free_cpus) - (unsigned)x->shares[i];
        return 0;
}

/* ---- memory ---- */

/* Proxmox honours numaN hostnodes= only with numa: 1 and numaN entries it accepts at start; a host node we
 * do not know would fail the start as well. */
static bool vm_binding_usable(const struct vm *vm, const struct layout *l) {
        if (!vm->numa || !vm->numa_valid)
                return false;
        for (size_t i = 0; i < INVENTORY_MAX_NUMA; i++) {
                const struct vm_numa *n = &vm->numa_nodes[i];
                if (!n->present || !n->hostnodes)
                        continue;
                if (cpuset_is_empty(n->hostnodes))
                        return false;
                CPUSET_FOREACH(id, n->hostnodes)
                        if (layout_index(l, id) < 0)
                                return false;
        }
        return true;
}

/* bytes split evenly over the listed host nodes; the first nodes take the odd bytes. */
static void charge_split(uint64_t bytes, const struct cpuset *hostnodes, const struct layout *l, uint64_t *bound) {
        uint64_t k = cpuset_count(hostnodes), j = 0;
        CPUSET_FOREACH(id, hostnodes)
                bound[layout_index(l, id)] += bytes / k + (j++ < bytes % k ? 1 : 0);
}

/* Charge a VM's bound memory to its host nodes; returns the bytes that are not bound. */
static uint64_t charge_vm_memory(const struct vm *vm, const struct layout *l, uint64_t *bound) {
        uint64_t total = vm->memory_mib * MIB;
        if (!vm_binding_usable(vm, l))
                return total;
        uint64_t unbound = total;
        for (size_t i = 0; i < INVENTORY_MAX_NUMA; i++) {
                const struct vm_numa *n = &vm->numa_nodes[i];
                if (!n->present || !n->hostnodes)
                        continue;
                charge_split(n->memory_mib * MIB, n->hostnodes, l, bound);
                unbound -= n->memory_mib * MIB; /* numa_valid: the entries add up to the VM memory */
        }
        return unbound;
}

/* The node whose CPUs hold all of a pinned container's CPUs, or -1 (unpinned, or spread over nodes). */
static int container_node(const struct container *ct, const struct layout *l) {
        if (!ct->cpuset)
                return -1;
        for (size_t i = 0; i < l->n; i++)
                if (!cpuset_is_empty(l->nodes[i].cpus) && cpuset_is_subset(ct->cpuset, l->nodes[i].cpus))
                        return (int)i;
        return -1;
}

/* Charge the counted containers' memory: to their node when pinned within one, else returned as unbound. */
static uint64_t charge_containers_memory(struct capacity *c, const struct layout *l, const struct inventory *inv,
                                         const struct capacity_options *opts, uint64_t *bound) {
        uint64_t unbound = 0;
        for (size_t i = 0; inv && i < inv->containers.n; i++) {
                const struct container *ct = inv->containers.items[i];
                if (!capacity_container_counted(ct, opts))
                        continue;
                uint64_t bytes = ct->memory_mib * MIB;
                c->container_memory_bytes += bytes;
                int node = container_node(ct, l);
                if (node >= 0)
                        bound[node] += bytes;
                else
                        unbound += bytes;
        }
        c->memory_used_bytes += c->container_memory_bytes;
        return unbound;
}

/* Host totals, then per node: bound charges as configured, everything else shared out by node size
 * (memory without a binding lands wherever the kernel finds it; node size is the expected share). */
static void compute_memory(struct capacity *c, const struct layout *l, const struct node_settings *settings,
                           const struct inventory *inv, const struct capacity_options *opts, struct scratch *x) {
        uint64_t unbound = settings ? settings->reserved_memory_bytes : 0;
        c->memory_reserved_bytes = unbound;
        for (size_t i = 0; inv && i < inv->n_vms; i++) {
                if (!vm_counted(inv->vms[i], opts))
                        continue;
                c->memory_used_bytes += inv->vms[i]->memory_mib * MIB;
                unbound += charge_vm_memory(inv->vms[i], l, x->bound);
        }
        unbound += charge_containers_memory(c, l, inv, opts, x->bound);
        for (size_t i = 0; i < l->n; i++) {
                c->memory_total_bytes += l->nodes[i].memory_bytes;
                c->numa[i].memory_total_bytes = l->nodes[i].memory_bytes;
        }
        c->memory_free_bytes = sub_or_zero(c->memory_total_bytes, c->memory_reserved_bytes + c->memory_used_bytes);
        for (size_t i = 0; i < l->n; i++)
                x->weights[i] = l->nodes[i].memory_bytes;
        apportion(unbound, x->weights, l->n, x->shares);
        for (size_t i = 0; i < l->n; i++)
                c->numa[i].memory_free_bytes = sub_or_zero(l->nodes[i].memory_bytes, x->bound[i] + x->shares[i]);
}

/* ---- the whole host ---- */

static int compute_all(struct capacity *c, const struct topology *t, const struct node_settings *settings,
                       const struct inventory *inv, const struct capacity_options *opts, const struct layout *l) {
        int r = compute_cpus(c, t, settings, inv, opts);
        if (r < 0)
                return r;
        size_t n = l->n ? l->n : 1;
        c->numa = calloc(n, sizeof(*c->numa));
        c->n_numa = l->n;
        struct scratch x = { calloc(n, sizeof(uint64_t)), calloc(n, sizeof(uint64_t)), calloc(n, sizeof(uint64_t)) };
        r = c->numa && x.weights && x.shares && x.bound ? compute_numa_cpus(c, l, &x) : -ENOMEM;
        if (r == 0)
                compute_memory(c, l, settings, inv, opts, &x);
        free(x.weights);
        free(x.shares);
        free(x.bound);
        return r;
}

int capacity_compute(const struct topology *t, const struct node_settings *settings, const struct inventory *inv,
                     const struct capacity_options *opts, struct capacity **ret_capacity) {
        static const struct capacity_options defaults = { .count_stopped_vms = true };
        struct layout l;
        int r = layout_build(t, settings, &l);
        if (r < 0)
                return r;
        struct capacity *c = calloc(1, sizeof(*c));
        r = c ? compute_all(c, t, settings, inv, opts ? opts : &defaults, &l) : -ENOMEM;
        layout_done(&l);
        if (r < 0) {
                capacity_free(c);
                return r;
        }
        *ret_capacity = c;
        return 0;
}

void capacity_free(struct capacity *c) {
        if (!c)
                return;
        cpuset_free(c->usable_cpus);
        cpuset_free(c->pinned_cpus);
        cpuset_free(c->container_pinned_cpus);
        cpuset_free(c->free_cpus);
        cpuset_free(c->reserved_cpus);
        cpuset_free(c->isolated_cpus);
        for (size_t i = 0; c->numa && i < c->n_numa; i++)
                cpuset_free(c->numa[i].free_cpus);
        free(c->numa);
        free(c);
}

/* ---- JSON ---- */

static json_t *numa_json(const struct capacity_numa *n) {
        return json_pack("{s:i, s:o, s:I, s:I, s:I}", "id", n->id, "free_cpus", jsonutil_cpuset(n->free_cpus),
                         "cpus_free", (json_int_t)n->cpus_free, "memory_total_bytes", (json_int_t)n->memory_total_bytes,
                         "memory_free_bytes", (json_int_t)n->memory_free_bytes);
}

static json_t *numa_array_json(const struct capacity *c) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < c->n_numa; i++) {
                if (json_array_append_new(a, numa_json(&c->numa[i])) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

static json_t *capacity_core_json(const struct capacity *c);

/* {"count", "pinned_cpus", "floating_cpus", "memory_bytes"}: what the counted containers take (part of the
 * host-wide pinned_cpus, floating_vcpus and memory_used_bytes). */
static json_t *containers_json(const struct capacity *c) {
        return json_pack("{s:I, s:o, s:I, s:I}", "count", (json_int_t)c->containers_counted, "pinned_cpus",
                         jsonutil_cpuset(c->container_pinned_cpus), "floating_cpus",
                         (json_int_t)c->container_floating_cpus, "memory_bytes", (json_int_t)c->container_memory_bytes);
}

json_t *capacity_to_json(const struct capacity *c) {
        json_t *doc = capacity_core_json(c);
        if (doc && json_object_set_new(doc, "containers", containers_json(c)) < 0) {
                json_decref(doc);
                return NULL;
        }
        return doc;
}

static json_t *capacity_core_json(const struct capacity *c) {
        return json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:o}",
                         "cpus_total", (json_int_t)c->cpus_total, "cpus_free", (json_int_t)c->cpus_free,
                         "free_cpus", jsonutil_cpuset(c->free_cpus), "pinned_cpus", jsonutil_cpuset(c->pinned_cpus),
                         "reserved_cpus", jsonutil_cpuset(c->reserved_cpus), "isolated_cpus",
                         jsonutil_cpuset(c->isolated_cpus), "floating_vcpus", (json_int_t)c->floating_vcpus,
                         "memory_total_bytes", (json_int_t)c->memory_total_bytes, "memory_reserved_bytes",
                         (json_int_t)c->memory_reserved_bytes, "memory_used_bytes", (json_int_t)c->memory_used_bytes,
                         "memory_free_bytes", (json_int_t)c->memory_free_bytes, "numa_nodes", numa_array_json(c));
}
