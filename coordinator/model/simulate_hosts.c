/* simulate_hosts: the room of PVE hosts during a simulation: host-wide and per NUMA node free CPUs and
 * memory, agent offers, and what planned claims take and give back. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "simulate_internal.h"

static int32_t *offers_for(struct ctx *c, const struct sim_host *h, const struct shape_catalog *cat) {
        int32_t *left = simulate__arena_alloc(c->arena, ((cat ? cat->n : 0) + 1) * sizeof *left);
        for (size_t s = 0; left && cat && s < cat->n; s++) {
                left[s] = h->has_offers ? 0 : -1;
                for (size_t o = 0; h->has_offers && o < h->n_offers; o++)
                        if (h->offers[o].shape && strcmp(h->offers[o].shape, cat->items[s].name) == 0)
                                left[s] = (int32_t)h->offers[o].count;
        }
        return left;
}

/* Per shape of the catalog: how many VMs get the agent's preferred layout (-1 without offers). */
static int32_t *good_for(struct ctx *c, const struct sim_host *h, const struct shape_catalog *cat) {
        int32_t *good = simulate__arena_alloc(c->arena, ((cat ? cat->n : 0) + 1) * sizeof *good);
        for (size_t s = 0; good && cat && s < cat->n; s++) {
                good[s] = h->has_offers ? 0 : -1;
                for (size_t o = 0; h->has_offers && o < h->n_offers; o++)
                        if (h->offers[o].shape && strcmp(h->offers[o].shape, cat->items[s].name) == 0)
                                good[s] = (int32_t)h->offers[o].preferred;
        }
        return good;
}

bool simulate__host_poor(const struct host_c *h, int nc, size_t si) {
        return h->offer_good[nc][si] == 0;
}

static bool numa_fits(const struct host_c *h, const struct shape *s, int *ret_numa) {
        const struct sim_host *src = h->src;
        int64_t biggest = 0, best_free = INT64_MAX;
        int best = -1;
        for (size_t i = 0; i < src->n_numa; i++) {
                int64_t total = src->numa[i].total_cpus ? src->numa[i].total_cpus : src->numa[i].free_cpus;
                if (total > biggest)
                        biggest = total;
        }
        if ((int64_t)s->vcpus > biggest) {
                *ret_numa = -1; /* larger than any NUMA node: the VM spans nodes */
                return true;
        }
        for (size_t i = 0; i < src->n_numa; i++)
                if (h->numa_cpus[i] >= s->vcpus && h->numa_mem[i] >= (int64_t)s->vm_memory_bytes &&
                    h->numa_cpus[i] < best_free) {
                        best = (int)i;
                        best_free = h->numa_cpus[i];
                }
        *ret_numa = best;
        return best >= 0;
}

/* Has h a free device of every pciDevices entry of node class nc (entries of one mapping each take one)? */
static bool devices_fit(const struct host_c *h, int nc) {
        const struct sim_nodeclass *cls = h->classes[nc];
        for (size_t i = 0; i < cls->n_pci; i++) {
                int32_t d = h->dev_of[nc][i], need = 0;
                if (d < 0)
                        return false;
                for (size_t j = 0; j < cls->n_pci; j++)
                        need += h->dev_of[nc][j] == d;
                if (h->dev_free[d] < need)
                        return false;
        }
        return true;
}

static void devices_add(struct host_c *h, int nc, int32_t delta) {
        for (size_t i = 0; i < h->classes[nc]->n_pci; i++)
                if (h->dev_of[nc][i] >= 0)
                        h->dev_free[h->dev_of[nc][i]] += delta;
}

enum room simulate__host_fits(const struct host_c *h, int nc, size_t si, const struct shape *s, int *ret_numa) {
        *ret_numa = -1;
        if (!devices_fit(h, nc))
                return ROOM_DEVICE;
        if (h->free_cpus < s->vcpus)
                return ROOM_CPUS;
        if (h->free_mem < (int64_t)s->vm_memory_bytes)
                return ROOM_MEMORY;
        if (h->offer_left[nc][si] == 0)
                return ROOM_OFFER;
        /* An agent's offer is its allocator's word: where one NUMA node has no room, the VM spans nodes
         * (the agent's fallback layout when the shape would fit one node). */
        if (h->src->n_numa && !numa_fits(h, s, ret_numa) && h->offer_left[nc][si] < 0)
                return ROOM_NUMA;
        return ROOM_OK;
}

static void span_take(struct host_c *h, const struct shape *s, int64_t *span) {
        int64_t cpus = s->vcpus, mem = (int64_t)s->vm_memory_bytes;
        size_t n = h->src->n_numa;
        memset(span, 0, 2 * n * sizeof *span);
        while (cpus > 0) {
                size_t best = 0;
                for (size_t i = 1; i < n; i++)
                        if (h->numa_cpus[i] > h->numa_cpus[best])
                                best = i;
                int64_t take = h->numa_cpus[best] < cpus ? h->numa_cpus[best] : cpus;
                if (take <= 0)
                        take = cpus; /* host-wide room was checked; charge the rest to the biggest node */
                int64_t m = cpus == take ? mem : (int64_t)s->vm_memory_bytes * take / s->vcpus;
                span[best] += take;
                span[n + best] += m;
                h->numa_cpus[best] -= take;
                h->numa_mem[best] -= m;
                cpus -= take;
                mem -= m;
        }
}

void simulate__host_take(struct host_c *h, int nc, size_t si, const struct shape *s, struct claim_c *cl) {
        h->room_dirty = h->order_dirty = true;
        h->free_cpus -= s->vcpus;
        h->free_mem -= (int64_t)s->vm_memory_bytes;
        devices_add(h, nc, -1);
        if (h->offer_left[nc][si] > 0)
                h->offer_left[nc][si]--;
        cl->good = h->offer_good[nc][si] > 0;
        if (cl->good)
                h->offer_good[nc][si]--;
        if (cl->numa >= 0) {
                h->numa_cpus[cl->numa] -= s->vcpus;
                h->numa_mem[cl->numa] -= (int64_t)s->vm_memory_bytes;
        } else if (h->src->n_numa) {
                span_take(h, s, cl->span);
        }
}

void simulate__host_release(struct host_c *h, int nc, size_t si, const struct shape *s, struct claim_c *cl) {
        size_t n = h->src->n_numa;
        h->room_dirty = h->order_dirty = true;
        h->free_cpus += s->vcpus;
        h->free_mem += (int64_t)s->vm_memory_bytes;
        devices_add(h, nc, 1);
        if (h->offer_left[nc][si] >= 0)
                h->offer_left[nc][si]++;
        if (cl->good)
                h->offer_good[nc][si]++;
        cl->good = false;
        if (cl->numa >= 0) {
                h->numa_cpus[cl->numa] += s->vcpus;
                h->numa_mem[cl->numa] += (int64_t)s->vm_memory_bytes;
                return;
        }
        for (size_t i = 0; i < n; i++) {
                h->numa_cpus[i] += cl->span[i];
                h->numa_mem[i] += cl->span[n + i];
        }
}

static bool any_shape_fits(const struct ctx *c, const struct host_c *h) {
        int numa;
        for (size_t nc = 0; nc < c->n_ncs; nc++)
                for (size_t s = 0; c->ncs[nc].shapes && s < c->ncs[nc].shapes->n; s++)
                        if (simulate__host_fits(h, (int)nc, s, &c->ncs[nc].shapes->items[s], &numa) == ROOM_OK)
                                return true;
        return false;
}

/* Per pciDevices entry of node class nc: the index of its mapping among the host's devices, -1 when it has none. */
static int32_t *devices_of(struct ctx *c, const struct sim_host *h, const struct sim_nodeclass *cls) {
        int32_t *of = simulate__arena_alloc(c->arena, (cls->n_pci + 1) * sizeof *of);
        for (size_t i = 0; of && i < cls->n_pci; i++) {
                of[i] = -1;
                for (size_t d = 0; d < h->n_devices; d++)
                        if (cls->pci_mappings[i] && strcmp(h->devices[d].mapping, cls->pci_mappings[i]) == 0)
                                of[i] = (int32_t)d;
        }
        return of;
}

static int prepare_devices(struct ctx *c, struct host_c *h) {
        const struct sim_host *src = h->src;
        h->classes = (const struct sim_nodeclass *const *)c->in->classes;
        h->dev_free = simulate__arena_alloc(c->arena, (src->n_devices + 1) * sizeof *h->dev_free);
        h->dev_of = simulate__arena_alloc(c->arena, (c->n_ncs + 1) * sizeof *h->dev_of);
        if (!h->dev_free || !h->dev_of)
                return c->error = -ENOMEM;
        for (size_t d = 0; d < src->n_devices; d++)
                h->dev_free[d] = (int32_t)src->devices[d].free;
        for (size_t nc = 0; nc < c->n_ncs; nc++)
                if (!(h->dev_of[nc] = devices_of(c, src, c->in->classes[nc])))
                        return c->error = -ENOMEM;
        return 0;
}

static int prepare_host(struct ctx *c, size_t i) {
        const struct sim_host *src = c->in->hosts[i];
        struct host_c *h = &c->hosts[i];
        size_t n = src->n_numa;
        *h = (struct host_c){ .src = src, .free_cpus = src->free_cpus, .free_mem = (int64_t)src->free_memory_bytes };
        h->zone = simulate__zone_index(c, simulate__intern(c, src->name), true);
        h->region = simulate__intern(c, src->region);
        h->numa_cpus = simulate__arena_alloc(c->arena, (n + 1) * sizeof(int64_t));
        h->numa_mem = simulate__arena_alloc(c->arena, (n + 1) * sizeof(int64_t));
        h->offer_left = simulate__arena_alloc(c->arena, (c->n_ncs + 1) * sizeof(int32_t *));
        h->offer_good = simulate__arena_alloc(c->arena, (c->n_ncs + 1) * sizeof(int32_t *));
        if (!h->numa_cpus || !h->numa_mem || !h->offer_left || !h->offer_good)
                return c->error = -ENOMEM;
        for (size_t k = 0; k < n; k++) {
                h->numa_cpus[k] = src->numa[k].free_cpus;
                h->numa_mem[k] = (int64_t)src->numa[k].free_memory_bytes;
        }
        for (size_t nc = 0; nc < c->n_ncs; nc++)
                if (!(h->offer_left[nc] = offers_for(c, src, c->ncs[nc].shapes)) ||
                    !(h->offer_good[nc] = good_for(c, src, c->ncs[nc].shapes)))
                        return c->error = -ENOMEM;
        if (prepare_devices(c, h) < 0)
                return c->error;
        h->room_at_start = h->room_now = any_shape_fits(c, h);
        return 0;
}

bool simulate__host_has_room(struct ctx *c, size_t h) {
        struct host_c *hc = &c->hosts[h];
        if (hc->room_dirty) {
                hc->room_now = any_shape_fits(c, hc);
                hc->room_dirty = false;
        }
        return hc->room_now;
}

/* ---- hosts in the order a new claim prefers them ---- */

/* Is host a before b: fewer planned claims, then more free cpus, then the lower index (by the keys they are
 * placed by)? */
static bool order_before(const struct ctx *c, uint32_t a, uint32_t b) {
        const struct host_c *x = &c->hosts[a], *y = &c->hosts[b];
        if (x->order_planned != y->order_planned)
                return x->order_planned < y->order_planned;
        if (x->order_free_cpus != y->order_free_cpus)
                return x->order_free_cpus > y->order_free_cpus;
        return a < b;
}

/* The first place in host_order[0..n) whose host does not come before h. */
static size_t order_bound(const struct ctx *c, size_t n, uint32_t h) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (order_before(c, c->host_order[mid], h))
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* Take host h out of the order and put it back by its current keys. */
static void order_move(struct ctx *c, uint32_t h) {
        struct host_c *hc = &c->hosts[h];
        hc->order_dirty = false;
        if (hc->order_planned == hc->planned && hc->order_free_cpus == hc->free_cpus)
                return; /* a claim tried a shape and gave the room back */
        size_t n = c->n_hosts, at = order_bound(c, n, h);
        memmove(&c->host_order[at], &c->host_order[at + 1], (n - at - 1) * sizeof *c->host_order);
        hc->order_planned = hc->planned;
        hc->order_free_cpus = hc->free_cpus;
        at = order_bound(c, n - 1, h);
        memmove(&c->host_order[at + 1], &c->host_order[at], (n - 1 - at) * sizeof *c->host_order);
        c->host_order[at] = h;
}

void simulate__host_order_sync(struct ctx *c) {
        for (size_t h = 0; h < c->n_hosts; h++)
                if (c->hosts[h].order_dirty)
                        order_move(c, (uint32_t)h);
}

static int order_init(struct ctx *c) {
        c->host_order = simulate__arena_alloc(c->arena, (c->n_hosts + 1) * sizeof *c->host_order);
        if (!c->host_order)
                return c->error = -ENOMEM;
        for (size_t h = 0; h < c->n_hosts; h++) {
                struct host_c *hc = &c->hosts[h];
                hc->order_planned = hc->planned;
                hc->order_free_cpus = hc->free_cpus;
                size_t at = order_bound(c, h, (uint32_t)h);
                memmove(&c->host_order[at + 1], &c->host_order[at], (h - at) * sizeof *c->host_order);
                c->host_order[at] = (uint32_t)h;
        }
        return 0;
}

int simulate__prepare_hosts(struct ctx *c) {
        c->hosts = simulate__arena_alloc(c->arena, (c->in->n_hosts + 1) * sizeof(struct host_c));
        if (!c->hosts)
                return c->error = -ENOMEM;
        for (size_t i = 0; i < c->in->n_hosts; i++)
                if (prepare_host(c, i) < 0)
                        return c->error;
        c->n_hosts = c->in->n_hosts;
        c->host_of_zone = simulate__arena_alloc(c->arena, (c->n_zones + 1) * sizeof(int32_t));
        if (!c->host_of_zone)
                return c->error = -ENOMEM;
        for (size_t z = 0; z < c->n_zones; z++)
                c->host_of_zone[z] = -1;
        for (size_t h = 0; h < c->n_hosts; h++)
                c->host_of_zone[c->hosts[h].zone] = (int32_t)h;
        return order_init(c);
}

