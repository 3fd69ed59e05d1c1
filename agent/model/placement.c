/* placement: the pure NUMA-aware allocator: choose host NUMA nodes, then L3 groups, cores and threads. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_internal.h"

/* Node sets evaluated per size before the search keeps the best found so far (hosts with many nodes). */
#define MAX_SET_EVALS 20000u

/* One host NUMA node that can take part of a VM. */
struct cand {
        size_t idx;            /* index in topology.numa_nodes */
        unsigned n_iso, n_non; /* free isolated / other CPUs of the node */
        unsigned n_pair;       /* free CPUs in cores with at least two free threads (2 per such core) */
        unsigned pair_total;   /* the same, were every online CPU of the node free */
        bool whole;            /* every online CPU of the node is free */
        uint64_t mem_units;    /* free memory, in request units */
};

/* A host node chosen for one guest NUMA node, in guest order. */
struct share {
        size_t cand;
        unsigned vcpus;
        uint64_t units;
};

/* Cores of one node grouped by L3, for one level-by-level pass (scratch reused across nodes). */
struct group {
        int l3;
        unsigned free;
        size_t first, n; /* slice of the grouped core arrays */
};

struct fit {
        const struct topology *t;
        const struct capacity *c;
        unsigned vcpus;
        uint64_t unit, units;      /* memory unit in bytes, VM memory in units */
        unsigned budget;           /* non-isolated CPUs the VM may take (the rest is kept for floating vCPUs) */
        const struct cpuset *iso;  /* isolated CPUs (capacity's, else the topology's); may be NULL */
        bool smt;
        struct cpuset **node_free; /* per topology node: free CPUs of the node's cores */
        size_t *node_core_start;   /* cores of node i: node_cores[node_core_start[i] .. node_core_start[i+1]) */
        size_t *node_cores;
        size_t n_cand;
        struct cand *cand;
        /* scratch for one node */
        size_t *g_core, *g_gid, *g_tmp, n_gcores;
        unsigned *g_free, *g_take;
        struct group *groups;
        unsigned *grp_free, *grp_take;
        size_t n_groups;
        bool small_ok;             /* a guest node may hold less than a quarter of the VM (memory forces it) */
        int near_only;             /* >= 0: the topology node index the VM must lie on alone (near_node) */
        /* the result */
        bool fallback;             /* made by choose_any: a preference was given up so that the VM fits */
        size_t n_share;
        struct share share[PLACEMENT_MAX_NUMA];
};

static uint64_t request_unit(const struct placement_request *req) {
        uint64_t page = req->hugepage_kib * 1024;
        return page > PLACEMENT_MIB ? page : PLACEMENT_MIB;
}

int placement_request_check(const struct placement_request *req, char *reason, size_t reasonlen) {
        if (req->vcpus < 1 || req->vcpus > PLACEMENT_MAX_VCPUS) {
                snprintf(reason, reasonlen, "vcpus must be between 1 and %u", PLACEMENT_MAX_VCPUS);
                return -EINVAL;
        }
        uint64_t kib = req->hugepage_kib;
        if (kib != 0 && (kib < 4 || (kib & (kib - 1)) != 0 || kib > (UINT64_C(1) << 40))) {
                snprintf(reason, reasonlen, "hugepage_kib must be 0 or a power of two page size in KiB");
                return -EINVAL;
        }
        uint64_t unit = request_unit(req);
        if (req->memory_bytes == 0 || req->memory_bytes % unit != 0) {
                snprintf(reason, reasonlen, "memory_bytes must be a positive multiple of %llu (%s)",
                         (unsigned long long)unit, kib ? "the hugepage size and 1 MiB" : "1 MiB");
                return -EINVAL;
        }
        return 0;
}

/* ---- fit state ---- */

static void fit_done(struct fit *f) {
        for (size_t i = 0; f->node_free && i < f->t->n_numa_nodes; i++)
                cpuset_free(f->node_free[i]);
        free(f->node_free);
        free(f->node_core_start);
        free(f->node_cores);
        free(f->cand);
        free(f->g_core);
        free(f->g_gid);
        free(f->g_tmp);
        free(f->g_free);
        free(f->g_take);
        free(f->groups);
        free(f->grp_free);
        free(f->grp_take);
}

static int fit_alloc(struct fit *f) {
        size_t nn = f->t->n_numa_nodes, nc = f->t->n_cores, ng = f->t->n_l3_caches + 1;
        f->node_free = calloc(nn + 1, sizeof(*f->node_free));
        f->node_core_start = calloc(nn + 1, sizeof(size_t));
        f->node_cores = calloc(nc + 1, sizeof(size_t));
        f->cand = calloc(nn + 1, sizeof(*f->cand));
        f->g_core = calloc(nc + 1, sizeof(size_t));
        f->g_gid = calloc(nc + 1, sizeof(size_t));
        f->g_tmp = calloc(nc + 1, sizeof(size_t));
        f->g_free = calloc(nc + 1, sizeof(unsigned));
        f->g_take = calloc(nc + 1, sizeof(unsigned));
        f->groups = calloc(ng, sizeof(*f->groups));
        f->grp_free = calloc(ng, sizeof(unsigned));
        f->grp_take = calloc(ng, sizeof(unsigned));
        if (!f->node_free || !f->node_core_start || !f->node_cores || !f->cand || !f->g_core || !f->g_gid ||
            !f->g_tmp || !f->g_free || !f->g_take || !f->groups || !f->grp_free || !f->grp_take)
                return -ENOMEM;
        return 0;
}

/* Bucket the cores by their NUMA node (counting sort keeps the topology's core order). */
static int fit_index_cores(struct fit *f) {
        const struct topology *t = f->t;
        size_t nn = t->n_numa_nodes;
        for (size_t k = 0; k < t->n_cores; k++) {
                int n = t->cores[k].numa_node;
                if (n >= 0 && (size_t)n < nn)
                        f->node_core_start[n + 1]++;
                if (cpuset_count(t->cores[k].cpus) > 1)
                        f->smt = true;
        }
        for (size_t i = 0; i < nn; i++)
                f->node_core_start[i + 1] += f->node_core_start[i];
        size_t *fill = calloc(nn + 1, sizeof(size_t)); /* next free slot per node */
        if (!fill)
                return -ENOMEM;
        memcpy(fill, f->node_core_start, nn * sizeof(size_t));
        for (size_t k = 0; k < t->n_cores; k++) {
                int n = t->cores[k].numa_node;
                if (n >= 0 && (size_t)n < nn)
                        f->node_cores[fill[n]++] = k;
        }
        free(fill);
        return 0;
}

/* The capacity entry of topology node i (same order by contract; matched by id to be safe). */
static const struct capacity_numa *cap_numa(const struct capacity *c, const struct topology *t, size_t i) {
        int id = t->numa_nodes[i].id;
        if (i < c->n_numa && c->numa[i].id == id)
                return &c->numa[i];
        for (size_t j = 0; j < c->n_numa; j++)
                if (c->numa[j].id == id)
                        return &c->numa[j];
        return NULL;
}

static uint64_t node_mem_units(const struct fit *f, const struct placement_request *req, size_t i) {
        const struct topology_numa_node *n = &f->t->numa_nodes[i];
        if (req->hugepage_kib == 0) {
                const struct capacity_numa *cn = cap_numa(f->c, f->t, i);
                return cn ? cn->memory_free_bytes / f->unit : 0;
        }
        for (size_t h = 0; h < n->n_hugepages; h++)
                if (n->hugepages[h].page_kib == req->hugepage_kib)
                        return n->hugepages[h].free * (req->hugepage_kib * 1024) / f->unit;
        return 0;
}

/* Free CPUs of node i: its cores' CPUs that are free host-wide and free on the node. */
static int fit_node_free(struct fit *f, const struct cpuset *avail, size_t i) {
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        f->node_free[i] = s;
        for (size_t k = f->node_core_start[i]; k < f->node_core_start[i + 1]; k++)
                if (cpuset_or(s, f->t->cores[f->node_cores[k]].cpus) < 0)
                        return -ENOMEM;
        cpuset_and(s, avail);
        const struct capacity_numa *cn = cap_numa(f->c, f->t, i);
        if (cn && cn->free_cpus)
                cpuset_and(s, cn->free_cpus);
        return 0;
}

static unsigned count_iso(const struct fit *f, const struct cpuset *s) {
        return f->iso ? cpuset_count_and(s, f->iso) : 0;
}

/* Pairable free CPUs of node i (two per pair of free sibling threads), and whether the node is wholly free. */
static void node_pairs(const struct fit *f, size_t i, struct cand *cd) {
        const struct topology *t = f->t;
        unsigned online = 0;
        cd->n_pair = cd->pair_total = 0;
        for (size_t k = f->node_core_start[i]; k < f->node_core_start[i + 1]; k++) {
                const struct cpuset *cpus = t->cores[f->node_cores[k]].cpus;
                unsigned n = t->online ? cpuset_count_and(cpus, t->online) : cpuset_count(cpus);
                cd->n_pair += cpuset_count_and(cpus, f->node_free[i]) & ~1u;
                cd->pair_total += f->smt ? n & ~1u : n;
                online += n;
        }
        cd->whole = cd->n_iso + cd->n_non == online;
}

static int fit_nodes(struct fit *f, const struct placement_request *req, const struct cpuset *avail) {
        for (size_t i = 0; i < f->t->n_numa_nodes; i++) {
                int r = fit_node_free(f, avail, i);
                if (r < 0)
                        return r;
                unsigned n = cpuset_count(f->node_free[i]);
                uint64_t mem = node_mem_units(f, req, i);
                if (n == 0 || mem == 0)
                        continue; /* memory-only nodes cannot hold guest vCPUs */
                struct cand *cd = &f->cand[f->n_cand++];
                cd->idx = i;
                cd->n_iso = count_iso(f, f->node_free[i]);
                cd->n_non = n - cd->n_iso;
                cd->mem_units = mem;
                node_pairs(f, i, cd);
        }
        return 0;
}

/* Non-isolated free CPUs minus what floating VMs need. */
static void fit_budget(struct fit *f, const struct cpuset *avail) {
        unsigned non = cpuset_count(avail) - count_iso(f, avail);
        f->budget = non > f->c->floating_vcpus ? non - f->c->floating_vcpus : 0;
}

static int fit_init(struct fit *f, const struct topology *t, const struct capacity *c,
                    const struct placement_request *req) {
        *f = (struct fit){ .t = t, .c = c, .vcpus = req->vcpus, .unit = request_unit(req), .near_only = -1 };
        f->iso = c->isolated_cpus ? c->isolated_cpus : t->isolated;
        f->units = req->memory_bytes / f->unit;
        int r = fit_alloc(f);
        if (r < 0)
                return r;
        r = fit_index_cores(f);
        if (r < 0)
                return r;
        struct cpuset *avail = cpuset_dup(c->free_cpus);
        if (!avail)
                return -ENOMEM;
        if (t->online)
                cpuset_and(avail, t->online);
        fit_budget(f, avail);
        r = fit_nodes(f, req, avail);
        cpuset_free(avail);
        return r;
}

/* ---- choosing host nodes ---- */

/* The topology index of the request's near node when that node could ever hold the VM alone (its online CPUs and
 * its memory, were they all free); -1 otherwise (no near node, an unknown one, or a VM larger than it). */
static int near_index(const struct topology *t, const struct placement_request *req) {
        for (size_t i = 0; req->near && i < t->n_numa_nodes; i++) {
                const struct topology_numa_node *n = &t->numa_nodes[i];
                if (n->id != req->near_node)
                        continue;
                unsigned cpus = t->online ? cpuset_count_and(n->cpus, t->online) : cpuset_count(n->cpus);
                return cpus >= req->vcpus && n->memory_bytes >= req->memory_bytes ? (int)i : -1;
        }
        return -1;
}

static unsigned cand_free(const struct cand *cd) {
        return cd->n_iso + cd->n_non;
}

static unsigned cand_cpu_cap(const struct cand *cd, unsigned budget) {
        return cd->n_iso + (cd->n_non < budget ? cd->n_non : budget);
}

/* Most vCPUs node cd can hold when memory follows vCPUs in proportion. */
static unsigned cand_mem_cap(const struct fit *f, const struct cand *cd) {
        uint64_t v = cd->mem_units * f->vcpus / f->units;
        return v > f->vcpus ? f->vcpus : (unsigned)v;
}

/* Whether node cd gives the VM whole cores: on SMT hosts its pairable CPUs cover the VM's pairs. */
static bool cand_pairs_fit(const struct fit *f, const struct cand *cd) {
        return !f->smt || cd->n_pair >= (f->vcpus & ~1u);
}

/* a is a better single node than b: keeps the VM's sibling pairs, then fewest free CPUs, then least
 * free memory (best fit). */
static bool single_better(const struct fit *f, const struct cand *a, const struct cand *b) {
        if (cand_pairs_fit(f, a) != cand_pairs_fit(f, b))
                return cand_pairs_fit(f, a);
        if (cand_free(a) != cand_free(b))
                return cand_free(a) < cand_free(b);
        return a->mem_units < b->mem_units;
}

/* Best fit among nodes that hold the whole VM. */
static bool choose_single(struct fit *f) {
        const struct cand *best = NULL;
        size_t best_i = 0;
        for (size_t i = 0; i < f->n_cand; i++) {
                const struct cand *cd = &f->cand[i];
                if (cand_cpu_cap(cd, f->budget) < f->vcpus || cd->mem_units < f->units)
                        continue;
                if (f->near_only >= 0 && cd->idx != (size_t)f->near_only)
                        continue;
                if (best && !single_better(f, cd, best))
                        continue;
                best = cd;
                best_i = i;
        }
        if (!best)
                return false;
        f->n_share = 1;
        f->share[0] = (struct share){ .cand = best_i, .vcpus = f->vcpus, .units = f->units };
        return true;
}

struct set_eval {
        enum placement__shape shape;
        size_t whole;       /* nodes taken whole */
        unsigned min_share; /* the smallest guest node's vCPUs */
        bool one_package;
        unsigned free;
        size_t n;
        struct share share[PLACEMENT_MAX_NUMA];
};

/* Fill order: fullest node first, so small leftovers get used up and the last node keeps the hole. */
static void sort_fill_order(const struct fit *f, size_t *idx, size_t k) {
        for (size_t i = 1; i < k; i++)
                for (size_t j = i; j > 0; j--) {
                        const struct cand *a = &f->cand[idx[j - 1]], *b = &f->cand[idx[j]];
                        if (cand_free(a) < cand_free(b) || (cand_free(a) == cand_free(b) && idx[j - 1] < idx[j]))
                                break;
                        size_t x = idx[j];
                        idx[j] = idx[j - 1];
                        idx[j - 1] = x;
                }
}

/* Give each node as many vCPUs as it holds (keeping one for each later node); the last takes the rest. */
static bool fill_shares(const struct fit *f, const size_t *idx, size_t k, struct set_eval *e, unsigned *caps) {
        unsigned left = f->vcpus, budget = f->budget;
        for (size_t j = 0; j < k; j++) {
                const struct cand *cd = &f->cand[idx[j]];
                unsigned cap = cand_cpu_cap(cd, budget), mcap = cand_mem_cap(f, cd);
                caps[j] = cap < mcap ? cap : mcap;
                unsigned want = left - (unsigned)(k - 1 - j);
                if (caps[j] == 0 || left < k - j)
                        return false;
                unsigned v = caps[j] < want ? caps[j] : want;
                budget -= v > cd->n_iso ? v - cd->n_iso : 0;
                e->share[j] = (struct share){ .cand = idx[j], .vcpus = v };
                left -= v;
        }
        return left == 0;
}

/* Keep guest vCPU pairs aligned on SMT hosts: every guest node but the last gets an even count. */
static void fix_parity(const struct fit *f, struct set_eval *e, const unsigned *caps) {
        size_t last = e->n - 1;
        for (size_t j = 0; f->smt && j < last; j++) {
                if (e->share[j].vcpus % 2 == 0 || e->share[j].vcpus < 2 || e->share[last].vcpus >= caps[last])
                        continue;
                e->share[j].vcpus--;
                e->share[last].vcpus++;
        }
}

static bool has_small_share(const struct fit *f, const struct set_eval *e) {
        for (size_t j = 0; j < e->n; j++)
                if (4 * e->share[j].vcpus < f->vcpus)
                        return true;
        return false;
}

/* On SMT hosts: a guest node with an odd vCPU count, other than an odd VM's last one (it splits a pair). */
static bool has_odd_share(const struct fit *f, const struct set_eval *e) {
        for (size_t j = 0; f->smt && j < e->n; j++)
                if (e->share[j].vcpus % 2 && (j + 1 < e->n || f->vcpus % 2 == 0))
                        return true;
        return false;
}

/* Split the memory in proportion to vCPUs (largest remainder), exactly, in whole units. */
static bool split_memory(const struct fit *f, struct share *sh, size_t k) {
        uint64_t given = 0, rem[PLACEMENT_MAX_NUMA];
        for (size_t j = 0; j < k; j++) {
                uint64_t num = f->units * sh[j].vcpus;
                sh[j].units = num / f->vcpus;
                rem[j] = num % f->vcpus;
                given += sh[j].units;
        }
        for (; given < f->units; given++) {
                size_t best = 0;
                for (size_t j = 1; j < k; j++)
                        if (rem[j] > rem[best])
                                best = j;
                sh[best].units++;
                rem[best] = 0;
        }
        for (size_t j = 0; j < k; j++)
                if (sh[j].units == 0 || sh[j].units > f->cand[sh[j].cand].mem_units)
                        return false;
        return true;
}

static bool eval_set(const struct fit *f, const size_t *combo, size_t k, struct set_eval *e) {
        size_t idx[PLACEMENT_MAX_NUMA];
        unsigned caps[PLACEMENT_MAX_NUMA];
        memcpy(idx, combo, k * sizeof(size_t));
        sort_fill_order(f, idx, k);
        e->n = k;
        if (!fill_shares(f, idx, k, e, caps))
                return false;
        fix_parity(f, e, caps);
        if ((!f->small_ok && has_small_share(f, e)) || has_odd_share(f, e))
                return false;
        if (!split_memory(f, e->share, k))
                return false;
        int pkg = f->t->numa_nodes[f->cand[idx[0]].idx].package;
        e->one_package = pkg >= 0;
        e->free = 0;
        for (size_t j = 0; j < k; j++) {
                e->free += cand_free(&f->cand[idx[j]]);
                if (f->t->numa_nodes[f->cand[idx[j]].idx].package != pkg)
                        e->one_package = false;
        }
        return true;
}

static bool set_better(const struct set_eval *a, const struct set_eval *b) {
        if (a->one_package != b->one_package)
                return a->one_package;
        return a->free < b->free;
}

/* Next k-combination of 0..n-1 in lexicographic order; false after the last. */
static bool next_combo(size_t *c, size_t k, size_t n) {
        size_t i = k;
        while (i > 0 && c[i - 1] == n - k + i - 1)
                i--;
        if (i == 0)
                return false;
        c[i - 1]++;
        for (size_t j = i; j < k; j++)
                c[j] = c[j - 1] + 1;
        return true;
}

/* Visit the sets of k candidate nodes in lexicographic order, k from 2 up to what the VM and PLACEMENT_MAX_NUMA
 * allow, at most MAX_SET_EVALS sets of each size: the fewest guest nodes first. Stops when visit returns true, or
 * after a size once *found (when given) holds. True when it stopped early. */
static bool each_set(const struct fit *f, bool (*visit)(const struct fit *, const size_t *, size_t, void *),
                     void *ctx, const bool *found) {
        size_t max_k = f->n_cand < PLACEMENT_MAX_NUMA ? f->n_cand : PLACEMENT_MAX_NUMA;
        for (size_t k = 2; k <= max_k && k <= f->vcpus; k++) {
                size_t combo[PLACEMENT_MAX_NUMA];
                for (size_t j = 0; j < k; j++)
                        combo[j] = j;
                unsigned evals = 0;
                do {
                        if (visit(f, combo, k, ctx))
                                return true;
                } while (++evals < MAX_SET_EVALS && next_combo(combo, k, f->n_cand));
                if (found && *found)
                        return true;
        }
        return false;
}

static void take_shares(struct fit *f, const struct share *share, size_t n) {
        f->n_share = n;
        memcpy(f->share, share, n * sizeof(struct share));
}

/* The last resort, any CPUs (pairs may break, guest nodes may be small): fewest nodes first; among sets
 * of that size one package first, then the fullest. */
struct fill_search {
        struct set_eval best;
        bool found;
};

static bool visit_fill(const struct fit *f, const size_t *combo, size_t k, void *ctx) {
        struct fill_search *fs = ctx;
        struct set_eval e;
        if (eval_set(f, combo, k, &e) && (!fs->found || set_better(&e, &fs->best))) {
                fs->best = e;
                fs->found = true;
        }
        return false;
}

static bool choose_fill(struct fit *f) {
        struct fill_search fs = { 0 };
        if (!each_set(f, visit_fill, &fs, &fs.found))
                return false;
        take_shares(f, fs.best.share, fs.best.n);
        return true;
}

/* ---- splits that keep pairs and balance (placement_split.c) ---- */

/* The split tiers, best first: every guest node whole cores (on SMT) and at least a quarter of the VM;
 * then whole cores, any size (memory or the host's node sizes force it). choose_fill comes last. */
enum { TIER_QUARTER, TIER_PAIRS, N_TIERS };

static unsigned fit_unit(const struct fit *f) {
        return f->smt ? 2 : 1;
}

/* The slots of node set combo: hi from the node's CPUs (its whole cores on SMT hosts) and memory; with
 * all_cpus, from all the node's CPUs as if no VM used any (what memory alone allows). */
static void set_slots(const struct fit *f, const size_t *combo, size_t k, int tier, bool all_cpus,
                      struct placement__slot *sl) {
        unsigned u = fit_unit(f), lo = tier == TIER_QUARTER ? placement__quarter_units(f->vcpus, u) : 1;
        for (size_t j = 0; j < k; j++) {
                const struct cand *cd = &f->cand[combo[j]];
                unsigned cpu = cand_cpu_cap(cd, f->budget), mem = cand_mem_cap(f, cd);
                if (f->smt && cd->n_pair < cpu)
                        cpu = cd->n_pair;
                if (all_cpus)
                        cpu = cd->pair_total;
                sl[j] = (struct placement__slot){ .lo = lo, .hi = (cpu < mem ? cpu : mem) / u, .free = cand_free(cd),
                                                  .whole = cd->whole };
        }
}

/* An odd VM on an SMT host: the lone vCPU goes to the last node (in set order) with room for one more
 * CPU; that node becomes the last guest node so that every earlier guest node stays even. SIZE_MAX if none. */
static size_t lone_node(const struct fit *f, const size_t *combo, size_t k, const unsigned *units) {
        for (size_t j = k; j-- > 0;) {
                const struct cand *cd = &f->cand[combo[j]];
                unsigned cpu = cand_cpu_cap(cd, f->budget), mem = cand_mem_cap(f, cd), v = units[j] * 2 + 1;
                if (cpu >= v && mem >= v)
                        return j;
        }
        return SIZE_MAX;
}

static bool within_budget(const struct fit *f, const struct set_eval *e) {
        unsigned non = 0;
        for (size_t j = 0; j < e->n; j++) {
                const struct cand *cd = &f->cand[e->share[j].cand];
                non += e->share[j].vcpus > cd->n_iso ? e->share[j].vcpus - cd->n_iso : 0;
        }
        return non <= f->budget;
}

/* Shares in guest order from units (the lone vCPU's node last), then memory, budget and the set's keys. */
static bool set_from_units(const struct fit *f, const size_t *combo, size_t k, const unsigned *units,
                           struct set_eval *e) {
        unsigned u = fit_unit(f);
        size_t lone = f->vcpus % u ? lone_node(f, combo, k, units) : SIZE_MAX, n = 0;
        if (f->vcpus % u && lone == SIZE_MAX)
                return false;
        for (size_t j = 0; j < k; j++)
                if (j != lone)
                        e->share[n++] = (struct share){ .cand = combo[j], .vcpus = units[j] * u };
        if (lone != SIZE_MAX)
                e->share[n++] = (struct share){ .cand = combo[lone], .vcpus = units[lone] * u + 1 };
        e->n = k;
        if (!within_budget(f, e) || !split_memory(f, e->share, k))
                return false;
        e->min_share = f->vcpus;
        for (size_t j = 0; j < k; j++)
                e->min_share = e->share[j].vcpus < e->min_share ? e->share[j].vcpus : e->min_share;
        int pkg = f->t->numa_nodes[f->cand[combo[0]].idx].package;
        e->one_package = pkg >= 0;
        e->free = 0;
        for (size_t j = 0; j < k; j++) {
                e->free += cand_free(&f->cand[combo[j]]);
                e->one_package &= f->t->numa_nodes[f->cand[combo[j]].idx].package == pkg;
        }
        return true;
}

/* Among splits of one tier: fewest nodes, then the largest smallest guest node (it is a quarter or more
 * in the first tier), then the most nodes taken whole, then balanced before leftovers, then one
 * package, then the fullest set. */
static bool split_better(const struct fit *f, const struct set_eval *a, const struct set_eval *b) {
        unsigned quarter = placement__quarter_units(f->vcpus, 1);
        unsigned ma = a->min_share < quarter ? a->min_share : quarter;
        unsigned mb = b->min_share < quarter ? b->min_share : quarter;
        if (a->n != b->n)
                return a->n < b->n;
        if (ma != mb)
                return ma > mb;
        if (a->whole != b->whole)
                return a->whole > b->whole;
        if (a->shape != b->shape)
                return a->shape < b->shape;
        if (a->one_package != b->one_package)
                return a->one_package;
        return a->free < b->free;
}

/* Try every shape on node set combo; keep the best in *best. */
static void eval_split(const struct fit *f, const size_t *combo, size_t k, int tier, struct set_eval *best,
                       bool *found) {
        struct placement__slot sl[PLACEMENT_MAX_NUMA];
        unsigned units[PLACEMENT_MAX_NUMA];
        struct set_eval e;
        set_slots(f, combo, k, tier, false, sl);
        for (int shape = 0; shape < PLACEMENT__N_SHAPES; shape++) {
                if (!placement__split(sl, k, f->vcpus / fit_unit(f), shape, units))
                        return; /* the bounds do not depend on the shape */
                if (!set_from_units(f, combo, k, units, &e))
                        continue;
                e.shape = placement__split_class(sl, k, units);
                e.whole = placement__split_whole(sl, k, units);
                if (!*found || split_better(f, &e, best)) {
                        *best = e;
                        *found = true;
                }
        }
}

struct tier_search {
        int tier;
        struct set_eval best;
        bool found;
};

static bool visit_tier(const struct fit *f, const size_t *combo, size_t k, void *ctx) {
        struct tier_search *ts = ctx;
        eval_split(f, combo, k, ts->tier, &ts->best, &ts->found);
        return false;
}

static bool choose_tier(struct fit *f, int tier) {
        struct tier_search ts = { .tier = tier };
        if (!each_set(f, visit_tier, &ts, &ts.found))
                return false;
        take_shares(f, ts.best.share, ts.best.n);
        return true;
}

/* Whether the free memory (or the host's node sizes) forces a guest node under a quarter of the VM:
 * no node set could hold a quarter split even if no VM used any CPU. */
static bool quarter_split_fits(const struct fit *f, const size_t *combo, size_t k, void *ctx) {
        struct placement__slot sl[PLACEMENT_MAX_NUMA];
        unsigned units[PLACEMENT_MAX_NUMA];
        (void)ctx;
        set_slots(f, combo, k, TIER_QUARTER, true, sl);
        return placement__split(sl, k, f->vcpus / fit_unit(f), PLACEMENT__BALANCED, units);
}

static bool small_forced(const struct fit *f) {
        return !each_set(f, quarter_split_fits, NULL, NULL);
}

/* ---- the fallback: any valid layout ---- */

/* What one layout of the fallback looks like, to pick the best of them. */
struct any_eval {
        size_t n;
        struct share share[PLACEMENT_MAX_NUMA];
        bool proportional; /* memory follows vCPUs */
        unsigned odd;      /* guest nodes with an odd vCPU count (SMT hosts) */
        unsigned small;    /* guest nodes under a quarter of the VM */
        bool one_package;
        unsigned free;
};

/* Non-isolated CPUs the vCPU counts v take (free isolated CPUs of each node go first). */
static unsigned any_budget_use(const struct fit *f, const size_t *idx, size_t k, const unsigned *v) {
        unsigned non = 0;
        for (size_t j = 0; j < k; j++) {
                unsigned iso = f->cand[idx[j]].n_iso;
                non += v[j] > iso ? v[j] - iso : 0;
        }
        return non;
}

/* Add up to *left vCPUs to node j, at most room more, and (with budget) within the budget left. */
static void any_add(unsigned *v, unsigned room, unsigned *left, unsigned *budget_left) {
        unsigned t = room < *left ? room : *left;
        if (budget_left) {
                t = t < *budget_left ? t : *budget_left;
                *budget_left -= t;
        }
        *v += t;
        *left -= t;
}

/* vCPUs per node of the set (fill order): one each, then free isolated CPUs, then the others within
 * the budget, first as far as the node has CPUs in free pairs of sibling threads (so pairs stay whole
 * where they can), then any. It uses the fewest non-isolated CPUs any layout on the set could, so it
 * fails only when no layout on the set holds the vCPUs. */
static bool any_vcpus(const struct fit *f, const size_t *idx, size_t k, unsigned *v) {
        unsigned left = f->vcpus, forced = 0;
        if (k > left)
                return false;
        for (size_t j = 0; j < k; j++) {
                v[j] = 1;
                forced += f->cand[idx[j]].n_iso == 0;
        }
        left -= (unsigned)k;
        if (forced > f->budget)
                return false;
        unsigned budget_left = f->budget - forced;
        for (size_t j = 0; j < k; j++) {
                unsigned iso = f->cand[idx[j]].n_iso;
                any_add(&v[j], iso > v[j] ? iso - v[j] : 0, &left, NULL);
        }
        for (size_t j = 0; j < k; j++) {
                unsigned pairs = f->cand[idx[j]].n_pair;
                any_add(&v[j], pairs > v[j] ? pairs - v[j] : 0, &left, &budget_left);
        }
        for (size_t j = 0; j < k; j++)
                any_add(&v[j], cand_free(&f->cand[idx[j]]) - v[j], &left, &budget_left);
        return left == 0;
}

/* Whether v[from] can give one vCPU to v[to]. */
static bool any_can_move(const struct fit *f, const size_t *idx, size_t k, unsigned *v, size_t from, size_t to) {
        if (v[from] < 2 || v[to] >= cand_free(&f->cand[idx[to]]))
                return false;
        v[from]--;
        v[to]++;
        bool ok = any_budget_use(f, idx, k, v) <= f->budget;
        v[from]++;
        v[to]--;
        return ok;
}

/* On SMT hosts, pair up odd counts (one vCPU moves from one odd node to another) where room allows. */
static void any_parity(const struct fit *f, const size_t *idx, size_t k, unsigned *v) {
        for (size_t j = 0; f->smt && j < k; j++)
                for (size_t l = j + 1; v[j] % 2 && l < k; l++) {
                        if (v[l] % 2 == 0)
                                continue;
                        if (any_can_move(f, idx, k, v, j, l)) {
                                v[j]--;
                                v[l]++;
                        } else if (any_can_move(f, idx, k, v, l, j)) {
                                v[l]--;
                                v[j]++;
                        }
                }
}

/* Memory in proportion to vCPUs when the nodes have it; otherwise each node at least one unit and at
 * most its free memory, as close to proportion as the nodes allow. false when the set lacks memory. */
static bool any_memory(const struct fit *f, struct any_eval *e) {
        e->proportional = split_memory(f, e->share, e->n);
        if (e->proportional)
                return true;
        uint64_t given = 0;
        for (size_t j = 0; j < e->n; j++) {
                uint64_t have = f->cand[e->share[j].cand].mem_units, u = f->units * e->share[j].vcpus / f->vcpus;
                u = u < 1 ? 1 : u;
                e->share[j].units = u < have ? u : have;
                given += e->share[j].units;
        }
        for (size_t j = 0; j < e->n && given < f->units; j++) {
                uint64_t room = f->cand[e->share[j].cand].mem_units - e->share[j].units, need = f->units - given;
                uint64_t t = room < need ? room : need;
                e->share[j].units += t;
                given += t;
        }
        for (size_t j = 0; j < e->n && given > f->units; j++) {
                uint64_t spare = e->share[j].units - 1, over = given - f->units;
                uint64_t t = spare < over ? spare : over;
                e->share[j].units -= t;
                given -= t;
        }
        return given == f->units;
}

/* Guest order: even counts first, odd ones last, so that guest pairs 2k, 2k+1 stay within one node. */
static void any_shares(const struct fit *f, const size_t *idx, size_t k, const unsigned *v, struct any_eval *e) {
        e->n = 0;
        e->odd = e->small = 0;
        for (int odd = 0; odd < 2; odd++)
                for (size_t j = 0; j < k; j++)
                        if ((int)(v[j] % 2) == odd)
                                e->share[e->n++] = (struct share){ .cand = idx[j], .vcpus = v[j] };
        for (size_t j = 0; j < k; j++) {
                e->odd += f->smt && v[j] % 2;
                e->small += 4 * v[j] < f->vcpus;
        }
        if (f->vcpus % 2 && e->odd > 0)
                e->odd--; /* an odd VM has one odd node anyway */
}

static bool eval_any(const struct fit *f, const size_t *combo, size_t k, struct any_eval *e) {
        size_t idx[PLACEMENT_MAX_NUMA];
        unsigned v[PLACEMENT_MAX_NUMA];
        if (k > f->units)
                return false;
        memcpy(idx, combo, k * sizeof(size_t));
        sort_fill_order(f, idx, k);
        if (!any_vcpus(f, idx, k, v))
                return false;
        any_parity(f, idx, k, v);
        any_shares(f, idx, k, v, e);
        if (!any_memory(f, e))
                return false;
        int pkg = f->t->numa_nodes[f->cand[idx[0]].idx].package;
        e->one_package = pkg >= 0;
        e->free = 0;
        for (size_t j = 0; j < k; j++) {
                e->free += cand_free(&f->cand[idx[j]]);
                e->one_package &= f->t->numa_nodes[f->cand[idx[j]].idx].package == pkg;
        }
        return true;
}

/* Among fallback layouts on as many nodes: memory in proportion, then fewest odd guest nodes (pairs
 * kept), then fewest small ones, then one package, then the fullest set. */
static bool any_better(const struct any_eval *a, const struct any_eval *b) {
        if (a->proportional != b->proportional)
                return a->proportional;
        if (a->odd != b->odd)
                return a->odd < b->odd;
        if (a->small != b->small)
                return a->small < b->small;
        if (a->one_package != b->one_package)
                return a->one_package;
        return a->free < b->free;
}

/* Any valid layout: every guest node at least one vCPU and one memory unit, within what its host node
 * has free, the budget kept; the fewest nodes first. Bounded like the other searches. */
struct any_search {
        struct any_eval best;
        bool found;
};

static bool visit_any(const struct fit *f, const size_t *combo, size_t k, void *ctx) {
        struct any_search *as = ctx;
        struct any_eval e;
        if (eval_any(f, combo, k, &e) && (!as->found || any_better(&e, &as->best))) {
                as->best = e;
                as->found = true;
        }
        return false;
}

static bool choose_any(struct fit *f) {
        struct any_search as = { 0 };
        if (!each_set(f, visit_any, &as, &as.found))
                return false;
        take_shares(f, as.best.share, as.best.n);
        f->fallback = true;
        return true;
}

/* Pairs and quarters first; smaller guest nodes only where memory forces them; then the fill (pairs
 * may break); then any valid layout: quality is a preference, fitting is a rule. */
static bool choose_multi(struct fit *f) {
        if (choose_tier(f, TIER_QUARTER))
                return true;
        f->small_ok = small_forced(f);
        if (f->small_ok && choose_tier(f, TIER_PAIRS))
                return true;
        return choose_fill(f) || choose_any(f);
}

/* ---- choosing CPUs inside one node ---- */

/* Best fit over one level: take[i] = CPUs to take from item i. The fullest item that holds the rest
 * wins; when none does, the item with the most free CPUs is taken whole and the search repeats. */
static void fit_level(const unsigned *free_n, size_t n_items, unsigned n, unsigned *take) {
        memset(take, 0, n_items * sizeof(*take));
        while (n > 0) {
                size_t best = SIZE_MAX, big = SIZE_MAX;
                for (size_t i = 0; i < n_items; i++) {
                        if (take[i] || free_n[i] == 0)
                                continue;
                        if (free_n[i] >= n && (best == SIZE_MAX || free_n[i] < free_n[best]))
                                best = i;
                        if (big == SIZE_MAX || free_n[i] > free_n[big])
                                big = i;
                }
                if (best != SIZE_MAX) {
                        take[best] = n;
                        return;
                }
                if (big == SIZE_MAX)
                        return;
                take[big] = free_n[big];
                n -= free_n[big];
        }
}

static size_t group_of(struct fit *f, int l3) {
        for (size_t g = 0; g < f->n_groups; g++)
                if (f->groups[g].l3 == l3)
                        return g;
        f->groups[f->n_groups] = (struct group){ .l3 = l3 };
        return f->n_groups++;
}

/* Fill the scratch arrays with node i's cores that have CPUs in set, grouped by L3 (groups in order
 * of their first core, cores in topology order). */
static void group_cores(struct fit *f, size_t node, const struct cpuset *set) {
        const struct topology *t = f->t;
        size_t m = 0;
        f->n_groups = 0;
        for (size_t k = f->node_core_start[node]; k < f->node_core_start[node + 1]; k++) {
                size_t core = f->node_cores[k];
                unsigned n = cpuset_count_and(t->cores[core].cpus, set);
                if (n == 0)
                        continue;
                size_t g = group_of(f, t->cores[core].l3);
                f->groups[g].free += n;
                f->groups[g].n++;
                f->g_tmp[m] = core;
                f->g_gid[m++] = g;
        }
        size_t pos = 0;
        for (size_t g = 0; g < f->n_groups; g++) {
                f->groups[g].first = pos;
                pos += f->groups[g].n;
                f->groups[g].n = 0;
                f->grp_free[g] = f->groups[g].free;
        }
        for (size_t j = 0; j < m; j++) {
                struct group *gr = &f->groups[f->g_gid[j]];
                size_t at = gr->first + gr->n++;
                f->g_core[at] = f->g_tmp[j];
                f->g_free[at] = cpuset_count_and(t->cores[f->g_tmp[j]].cpus, set);
        }
        f->n_gcores = m;
}

/* Add the first n CPUs of core that are in pool to sel. */
static int take_threads(const struct topology *t, size_t core, const struct cpuset *pool, unsigned n,
                        struct cpuset *sel) {
        CPUSET_FOREACH(cpu, t->cores[core].cpus) {
                if (n == 0)
                        break;
                if (!cpuset_test(pool, (unsigned)cpu))
                        continue;
                int r = cpuset_set(sel, (unsigned)cpu);
                if (r < 0)
                        return r;
                n--;
        }
        return 0;
}

static int take_group(struct fit *f, const struct group *g, unsigned n, const struct cpuset *pool,
                      struct cpuset *sel) {
        unsigned *take = f->g_take + g->first;
        if (n == g->free)
                memcpy(take, f->g_free + g->first, g->n * sizeof(unsigned));
        else
                fit_level(f->g_free + g->first, g->n, n, take);
        for (size_t j = 0; j < g->n; j++) {
                if (take[j] == 0)
                        continue;
                int r = take_threads(f->t, f->g_core[g->first + j], pool, take[j], sel);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Pick n CPUs of node from pool into sel: whole L3 groups, then whole cores, then threads, best fit. */
static int node_pick_level(struct fit *f, size_t node, const struct cpuset *pool, unsigned n, struct cpuset *sel) {
        if (n == 0)
                return 0;
        group_cores(f, node, pool);
        fit_level(f->grp_free, f->n_groups, n, f->grp_take);
        for (size_t g = 0; g < f->n_groups; g++) {
                if (f->grp_take[g] == 0)
                        continue;
                int r = take_group(f, &f->groups[g], f->grp_take[g], pool, sel);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The CPUs of pool in node's cores that have at least two of their threads in pool. */
static int pairable(const struct fit *f, size_t node, const struct cpuset *pool, struct cpuset *out) {
        for (size_t k = f->node_core_start[node]; k < f->node_core_start[node + 1]; k++) {
                const struct cpuset *cpus = f->t->cores[f->node_cores[k]].cpus;
                if (cpuset_count_and(cpus, pool) >= 2 && cpuset_or(out, cpus) < 0)
                        return -ENOMEM;
        }
        cpuset_and(out, pool);
        return 0;
}

/* On SMT hosts the even part of n comes from pairable CPUs first (so guest pairs get sibling threads
 * even where lone threads lie in a fuller L3 group), the rest from what is left. */
static int node_pick(struct fit *f, size_t node, const struct cpuset *pool, unsigned n, struct cpuset *sel) {
        if (!f->smt || n < 2)
                return node_pick_level(f, node, pool, n, sel);
        struct cpuset *pairs = cpuset_new(), *rest = cpuset_dup(pool);
        int r = pairs && rest ? pairable(f, node, pool, pairs) : -ENOMEM;
        unsigned even = n & ~1u, have = r >= 0 ? cpuset_count(pairs) & ~1u : 0;
        unsigned first = even < have ? even : have, before = cpuset_count(sel);
        if (r >= 0)
                r = node_pick_level(f, node, pairs, first, sel);
        if (r >= 0) {
                cpuset_andnot(rest, sel);
                r = node_pick_level(f, node, rest, n - (cpuset_count(sel) - before), sel);
        }
        cpuset_free(pairs);
        cpuset_free(rest);
        return r;
}

/* Write node's selected CPUs to map in guest order: cores with several selected threads first (so
 * guest vCPUs 2k and 2k+1 are siblings), single threads last, L3 group by L3 group. Returns the count. */
static unsigned node_order(struct fit *f, size_t node, const struct cpuset *sel, int *map) {
        unsigned m = 0;
        group_cores(f, node, sel);
        for (int pass = 0; pass < 2; pass++)
                for (size_t j = 0; j < f->n_gcores; j++) {
                        if ((pass == 0) != (f->g_free[j] > 1))
                                continue;
                        CPUSET_FOREACH(cpu, f->t->cores[f->g_core[j]].cpus)
                                if (cpuset_test(sel, (unsigned)cpu))
                                        map[m++] = cpu;
                }
        return m;
}

/* ---- building the placement ---- */

void placement_free(struct placement *p) {
        if (!p)
                return;
        cpuset_free(p->cpus);
        free(p->vcpu_map);
        for (size_t j = 0; j < p->n_numa; j++)
                cpuset_free(p->numa[j].guest_cpus);
        free(p);
}

static struct placement *placement_new(unsigned n_vcpus) {
        struct placement *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->n_vcpus = n_vcpus;
        p->cpus = cpuset_new();
        p->vcpu_map = calloc(n_vcpus, sizeof(int));
        if (!p->cpus || !p->vcpu_map) {
                placement_free(p);
                return NULL;
        }
        return p;
}

static int guest_range(unsigned first, unsigned n, struct cpuset **ret_set) {
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        for (unsigned v = first; v < first + n; v++)
                if (cpuset_set(s, v) < 0) {
                        cpuset_free(s);
                        return -ENOMEM;
                }
        *ret_set = s;
        return 0;
}

/* Split node's free CPUs into the isolated ones and the others. */
static int split_pools(const struct fit *f, size_t node, struct cpuset **ret_iso, struct cpuset **ret_non) {
        struct cpuset *iso = cpuset_dup(f->node_free[node]), *non = cpuset_dup(f->node_free[node]);
        if (!iso || !non) {
                cpuset_free(iso);
                cpuset_free(non);
                return -ENOMEM;
        }
        if (f->iso) {
                cpuset_and(iso, f->iso);
                cpuset_andnot(non, f->iso);
        } else {
                cpuset_zero(iso);
        }
        *ret_iso = iso;
        *ret_non = non;
        return 0;
}

/* Pick the CPUs of one guest node: free isolated CPUs first (floating VMs cannot run there), then others. */
static int pick_share(struct fit *f, const struct share *sh, unsigned *budget, struct cpuset *sel) {
        size_t node = f->cand[sh->cand].idx;
        struct cpuset *iso, *non;
        int r = split_pools(f, node, &iso, &non);
        if (r < 0)
                return r;
        unsigned n_iso = cpuset_count(iso);
        n_iso = n_iso < sh->vcpus ? n_iso : sh->vcpus;
        unsigned n_non = sh->vcpus - n_iso;
        if (n_non > *budget || n_non > cpuset_count(non))
                r = -ENOSPC; /* excluded while choosing the nodes */
        if (r >= 0)
                r = node_pick(f, node, iso, n_iso, sel);
        if (r >= 0)
                r = node_pick(f, node, non, n_non, sel);
        cpuset_free(iso);
        cpuset_free(non);
        if (r >= 0 && cpuset_count(sel) != sh->vcpus)
                r = -ENOSPC;
        if (r >= 0)
                *budget -= n_non;
        return r;
}

static int build_share(struct fit *f, const struct share *sh, unsigned *budget, struct placement *p) {
        struct placement_numa *pn = &p->numa[p->n_numa];
        unsigned first = p->n_numa ? pn[-1].first_vcpu + pn[-1].n_vcpus : 0;
        struct cpuset *sel = cpuset_new();
        if (!sel)
                return -ENOMEM;
        int r = pick_share(f, sh, budget, sel);
        if (r >= 0)
                r = guest_range(first, sh->vcpus, &pn->guest_cpus);
        if (r >= 0)
                r = cpuset_or(p->cpus, sel);
        if (r >= 0) {
                size_t node = f->cand[sh->cand].idx;
                node_order(f, node, sel, p->vcpu_map + first);
                pn->node = f->t->numa_nodes[node].id;
                pn->first_vcpu = first;
                pn->n_vcpus = sh->vcpus;
                pn->memory_bytes = sh->units * f->unit;
                p->n_numa++;
        }
        cpuset_free(sel);
        return r;
}

static int fit_build(struct fit *f, struct placement **ret_p) {
        struct placement *p = placement_new(f->vcpus);
        if (!p)
                return -ENOMEM;
        p->memory_bytes = f->units * f->unit;
        p->fallback = f->fallback;
        unsigned budget = f->budget;
        for (size_t j = 0; j < f->n_share; j++) {
                int r = build_share(f, &f->share[j], &budget, p);
                if (r < 0) {
                        placement_free(p);
                        return r;
                }
        }
        *ret_p = p;
        return 0;
}

/* Whether the free CPUs (within the budget) and the free memory of the nodes with free CPUs add up to the
 * VM: when they do not, no layout exists and the searches are skipped. */
static bool fit_enough(const struct fit *f) {
        unsigned iso = 0, non = 0;
        uint64_t mem = 0;
        for (size_t i = 0; i < f->n_cand; i++) {
                iso += f->cand[i].n_iso;
                non += f->cand[i].n_non;
                mem += f->cand[i].mem_units;
        }
        return iso + (non < f->budget ? non : f->budget) >= f->vcpus && mem >= f->units;
}

/* "; free per NUMA node: node 0 2 CPUs 4096 MiB, node 1 ..." (every node with CPUs; memory as the request
 * counts it: ordinary or hugepages of its size). */
static void explain_nodes(const struct fit *f, const struct placement_request *req, char *buf, size_t len) {
        size_t at = (size_t)snprintf(buf, len, "; free per NUMA node:");
        uint64_t mib = f->unit / PLACEMENT_MIB;
        const char *sep = "";
        for (size_t i = 0; i < f->t->n_numa_nodes && at < len; i++) {
                unsigned cpus = f->node_free[i] ? cpuset_count(f->node_free[i]) : 0;
                if (f->node_core_start[i] == f->node_core_start[i + 1])
                        continue; /* a node without CPUs never holds a guest node */
                at += (size_t)snprintf(buf + at, len - at, "%s node %d %u CPUs %llu MiB", sep, f->t->numa_nodes[i].id,
                                       cpus, (unsigned long long)(node_mem_units(f, req, i) * mib));
                sep = ",";
        }
}

/* The sum of the n largest of vals[0..k). */
static uint64_t largest_sum(uint64_t *vals, size_t k, size_t n) {
        uint64_t sum = 0;
        for (size_t m = 0; m < n && m < k; m++) {
                size_t best = m;
                for (size_t j = m + 1; j < k; j++)
                        best = vals[j] > vals[best] ? j : best;
                uint64_t x = vals[m];
                vals[m] = vals[best];
                vals[best] = x;
                sum += vals[m];
        }
        return sum;
}

/* The fewest of vals[0..k) that add up to need (largest first); k + 1 when all of them do not. */
static size_t nodes_for(const uint64_t *vals, size_t k, uint64_t need) {
        uint64_t sorted[k + 1];
        memcpy(sorted, vals, k * sizeof(uint64_t));
        for (size_t n = 1; n <= k; n++)
                if (largest_sum(sorted, k, n) >= need)
                        return n;
        return k + 1;
}

/* The 8-node limit: what the 8 nodes with the most free CPUs, and those with the most memory, have. */
static int explain_max_nodes(const struct fit *f, uint64_t *cpu_v, uint64_t *mem_v, char *reason, size_t len) {
        uint64_t mib = f->unit / PLACEMENT_MIB;
        unsigned long long cpus = largest_sum(cpu_v, f->n_cand, PLACEMENT_MAX_NUMA);
        unsigned long long mem = largest_sum(mem_v, f->n_cand, PLACEMENT_MAX_NUMA) * mib;
        return snprintf(reason, len,
                        "NUMA nodes: at most %d guest nodes, and the %d with the most free CPUs have %llu, "
                        "those with the most memory %llu MiB, for %u vCPUs and %llu MiB",
                        PLACEMENT_MAX_NUMA, PLACEMENT_MAX_NUMA, cpus, mem, f->vcpus,
                        (unsigned long long)(f->units * mib));
}

static bool free_cpus_anywhere(const struct fit *f) {
        for (size_t i = 0; i < f->t->n_numa_nodes; i++)
                if (f->node_free[i] && cpuset_count(f->node_free[i]) > 0)
                        return true;
        return false;
}

/* Why no layout exists, naming the resource that is short: CPUs (host-wide or after floating VMs),
 * memory (on the nodes with free CPUs, or more nodes than the VM has vCPUs), or the 8 guest NUMA nodes
 * Proxmox allows. */
static int explain_short(const struct fit *f, char *reason, size_t len) {
        unsigned iso = 0, non = 0;
        uint64_t mem = 0, cpu_v[f->n_cand + 1], mem_v[f->n_cand + 1];
        unsigned long long mib = f->unit / PLACEMENT_MIB;
        for (size_t i = 0; i < f->n_cand; i++) {
                iso += f->cand[i].n_iso;
                non += f->cand[i].n_non;
                mem += f->cand[i].mem_units;
                cpu_v[i] = cand_free(&f->cand[i]);
                mem_v[i] = f->cand[i].mem_units;
        }
        unsigned cpus = iso + (non < f->budget ? non : f->budget);
        size_t need_nodes = nodes_for(mem_v, f->n_cand, f->units), cpu_nodes = nodes_for(cpu_v, f->n_cand, f->vcpus);
        if (f->n_cand == 0 && free_cpus_anywhere(f))
                return snprintf(reason, len, "memory: no NUMA node has both free CPUs and free memory");
        if (f->vcpus > cpus && f->c->floating_vcpus == 0)
                return snprintf(reason, len, "CPUs: needs %u vCPUs but only %u host CPUs are free", f->vcpus, cpus);
        if (f->vcpus > cpus)
                return snprintf(reason, len,
                                "CPUs: needs %u vCPUs but only %u host CPUs can be pinned (floating VMs need %u vCPUs)",
                                f->vcpus, cpus, f->c->floating_vcpus);
        if (f->units > mem)
                return snprintf(reason, len,
                                "memory: needs %llu MiB but NUMA nodes with free CPUs have only %llu MiB free",
                                f->units * mib, mem * mib);
        if (need_nodes > f->vcpus)
                return snprintf(reason, len,
                                "memory: %llu MiB needs %zu NUMA nodes but %u vCPUs make at most %u guest nodes "
                                "(each holds a vCPU)",
                                f->units * mib, need_nodes, f->vcpus, f->vcpus);
        if (cpu_nodes <= PLACEMENT_MAX_NUMA && cpu_nodes > f->units)
                return snprintf(reason, len,
                                "memory: %u vCPUs need %zu NUMA nodes but %llu MiB make at most %llu guest nodes "
                                "(each holds memory)",
                                f->vcpus, cpu_nodes, f->units * mib, (unsigned long long)f->units);
        return explain_max_nodes(f, cpu_v, mem_v, reason, len);
}

/* The refusal: the short resource, then every node's free CPUs and memory. */
static void fit_explain(const struct fit *f, const struct placement_request *req, char *reason, size_t len) {
        if (len == 0)
                return; /* the caller wants no reason (an offer's count) */
        char nodes[320];
        explain_nodes(f, req, nodes, sizeof nodes);
        int at = 0;
        if (f->near_only >= 0 && fit_enough(f))
                at = snprintf(reason, len, "NUMA node %d (the PCI device's): too few free CPUs or too little free "
                              "memory there", req->near_node);
        else
                at = explain_short(f, reason, len);
        if (at >= 0 && (size_t)at < len)
                snprintf(reason + at, len - at, "%s", nodes);
}

int placement_place(const struct topology *t, const struct capacity *free_cap, const struct placement_request *req,
                    struct placement **ret_p, char *reason, size_t reasonlen) {
        int r = placement_request_check(req, reason, reasonlen);
        if (r < 0)
                return r;
        struct fit f;
        r = fit_init(&f, t, free_cap, req);
        f.near_only = near_index(t, req);
        if (r >= 0 && (!fit_enough(&f) || (!choose_single(&f) && (f.near_only >= 0 || !choose_multi(&f))))) {
                fit_explain(&f, req, reason, reasonlen);
                r = -ENOSPC;
        }
        struct placement *p = NULL;
        if (r >= 0)
                r = fit_build(&f, &p);
        if (r == -ENOSPC && f.n_share > 0)
                snprintf(reason, reasonlen, "internal: the chosen NUMA nodes could not supply their CPUs");
        fit_done(&f);
        if (r < 0)
                return r;
        *ret_p = p;
        return 0;
}
