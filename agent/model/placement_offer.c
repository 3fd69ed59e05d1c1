/* placement_offer: charging placements to a capacity, scoring them, and per-shape offers (pure). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"

/* Weights of placement_score (they add up to 100). */
#define SCORE_W_NUMA 40.0
#define SCORE_W_L3 20.0
#define SCORE_W_SMT 20.0
#define SCORE_W_FRAG 20.0

static struct capacity_numa *charge_numa(struct capacity *c, int id) {
        for (size_t i = 0; i < c->n_numa; i++)
                if (c->numa[i].id == id)
                        return &c->numa[i];
        return NULL;
}

static uint64_t sub_sat(uint64_t a, uint64_t b) {
        return a > b ? a - b : 0;
}

/* capacity.h: |free_cpus| - min(floating vCPUs, |free_cpus - isolated|). */
static unsigned host_cpus_free(const struct capacity *c) {
        unsigned n = cpuset_count(c->free_cpus);
        unsigned non_iso = n - (c->isolated_cpus ? cpuset_count_and(c->free_cpus, c->isolated_cpus) : 0);
        return n - (c->floating_vcpus < non_iso ? c->floating_vcpus : non_iso);
}

int placement_charge(struct capacity *c, const struct placement *p) {
        for (size_t j = 0; j < p->n_numa; j++)
                if (!charge_numa(c, p->numa[j].node))
                        return -EINVAL;
        if (c->pinned_cpus && cpuset_or(c->pinned_cpus, p->cpus) < 0)
                return -ENOMEM;
        cpuset_andnot(c->free_cpus, p->cpus);
        for (size_t i = 0; i < c->n_numa; i++) {
                if (!c->numa[i].free_cpus)
                        continue;
                c->numa[i].cpus_free = (unsigned)sub_sat(c->numa[i].cpus_free,
                                                         cpuset_count_and(c->numa[i].free_cpus, p->cpus));
                cpuset_andnot(c->numa[i].free_cpus, p->cpus);
        }
        for (size_t j = 0; j < p->n_numa; j++) {
                struct capacity_numa *cn = charge_numa(c, p->numa[j].node);
                cn->memory_free_bytes = sub_sat(cn->memory_free_bytes, p->numa[j].memory_bytes);
        }
        c->memory_free_bytes = sub_sat(c->memory_free_bytes, p->memory_bytes);
        c->memory_used_bytes += p->memory_bytes;
        c->cpus_free = host_cpus_free(c);
        return 0;
}

/* ---- score ---- */

static int numa_index(const struct topology *t, int id) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].id == id)
                        return (int)i;
        return -1;
}

static bool core_in_nodes(const struct topology_core *core, const bool *touched) {
        return core->numa_node >= 0 && touched[core->numa_node];
}

/* Size of the largest L3 group (an L3 cache within one NUMA node), 0 without L3 information. */
static unsigned largest_l3_group(const struct topology *t) {
        unsigned best = 0;
        for (size_t l = 0; l < t->n_l3_caches; l++)
                for (size_t i = 0; i < t->n_numa_nodes; i++) {
                        unsigned n = t->numa_nodes[i].cpus
                                             ? cpuset_count_and(t->l3_caches[l].cpus, t->numa_nodes[i].cpus)
                                             : 0;
                        best = n > best ? n : best;
                }
        return best;
}

/* Distinct (node, L3) groups among the placement's cores. */
static unsigned l3_groups_used(const struct topology *t, const struct placement *p) {
        unsigned n = 0;
        for (size_t k = 0; k < t->n_cores; k++) {
                const struct topology_core *core = &t->cores[k];
                if (!cpuset_intersects(core->cpus, p->cpus))
                        continue;
                bool seen = false;
                for (size_t m = 0; m < k && !seen; m++)
                        seen = t->cores[m].l3 == core->l3 && t->cores[m].numa_node == core->numa_node &&
                               cpuset_intersects(t->cores[m].cpus, p->cpus);
                n += !seen;
        }
        return n;
}

static double score_l3(const struct topology *t, const struct placement *p) {
        unsigned size = largest_l3_group(t), used = l3_groups_used(t, p);
        if (size == 0 || used == 0)
                return 1.0;
        unsigned need = (p->n_vcpus + size - 1) / size;
        return used <= need ? 1.0 : (double)need / used;
}

static int core_of(const struct topology *t, int cpu) {
        for (size_t k = 0; k < t->n_cores; k++)
                if (cpuset_test(t->cores[k].cpus, (unsigned)cpu))
                        return (int)k;
        return -1;
}

static double score_smt(const struct topology *t, const struct placement *p) {
        bool smt = false;
        for (size_t k = 0; k < t->n_cores && !smt; k++)
                smt = cpuset_count(t->cores[k].cpus) > 1;
        unsigned pairs = p->n_vcpus / 2, good = 0;
        if (!smt || pairs == 0)
                return 1.0;
        for (unsigned k = 0; k < pairs; k++) {
                int a = core_of(t, p->vcpu_map[2 * k]);
                good += a >= 0 && a == core_of(t, p->vcpu_map[2 * k + 1]);
        }
        return (double)good / pairs;
}

/* Free CPUs of node i on capacity c, minus the placement. */
static unsigned node_free_after(const struct capacity *c, size_t i, const struct cpuset *core_cpus,
                                const struct placement *p) {
        unsigned n = 0;
        CPUSET_FOREACH(cpu, core_cpus) {
                bool is_free = cpuset_test(c->free_cpus, (unsigned)cpu) && !cpuset_test(p->cpus, (unsigned)cpu);
                if (is_free && i < c->n_numa && c->numa[i].free_cpus)
                        is_free = cpuset_test(c->numa[i].free_cpus, (unsigned)cpu);
                n += is_free;
        }
        return n;
}

static double score_frag(const struct topology *t, const struct capacity *before, const struct placement *p) {
        bool touched[t->n_numa_nodes + 1];
        memset(touched, 0, sizeof(touched));
        for (size_t j = 0; j < p->n_numa; j++) {
                int i = numa_index(t, p->numa[j].node);
                if (i >= 0)
                        touched[i] = true;
        }
        unsigned total = 0, free_n = 0, clean = 0;
        for (size_t k = 0; k < t->n_cores; k++) {
                const struct topology_core *core = &t->cores[k];
                if (!core_in_nodes(core, touched))
                        continue;
                unsigned size = cpuset_count(core->cpus);
                unsigned n = node_free_after(before, (size_t)core->numa_node, core->cpus, p);
                total += size;
                free_n += n;
                clean += n == size ? n : 0;
        }
        double clean_frac = free_n ? (double)clean / free_n : 1.0;
        double fill = total ? 1.0 - (double)free_n / total : 1.0;
        return (clean_frac + fill) / 2;
}

double placement_score(const struct topology *t, const struct capacity *before, const struct placement *p) {
        double numa = p->n_numa ? 1.0 / (double)p->n_numa : 0.0;
        return SCORE_W_NUMA * numa + SCORE_W_L3 * score_l3(t, p) + SCORE_W_SMT * score_smt(t, p) +
               SCORE_W_FRAG * score_frag(t, before, p);
}

/* ---- offers ---- */

/* A private copy of a capacity: the sets placement_charge changes are duplicated; any other pointer
 * (reserved_cpus, isolated_cpus) is shared read-only with the original and never freed here. */
static void capacity_copy_free(struct capacity *c) {
        if (!c)
                return;
        cpuset_free(c->usable_cpus);
        cpuset_free(c->pinned_cpus);
        cpuset_free(c->free_cpus);
        for (size_t i = 0; c->numa && i < c->n_numa; i++)
                cpuset_free(c->numa[i].free_cpus);
        free(c->numa);
        free(c);
}

static int dup_set(const struct cpuset *src, struct cpuset **dst) {
        *dst = NULL;
        if (!src)
                return 0;
        *dst = cpuset_dup(src);
        return *dst ? 0 : -ENOMEM;
}

static int capacity_copy(const struct capacity *src, struct capacity **ret_c) {
        struct capacity *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        *c = *src;
        c->usable_cpus = c->pinned_cpus = c->free_cpus = NULL;
        c->numa = calloc(src->n_numa + 1, sizeof(*c->numa));
        int r = c->numa ? 0 : -ENOMEM;
        for (size_t i = 0; r >= 0 && i < src->n_numa; i++) {
                c->numa[i] = src->numa[i];
                r = dup_set(src->numa[i].free_cpus, &c->numa[i].free_cpus);
        }
        if (r >= 0)
                r = dup_set(src->usable_cpus, &c->usable_cpus);
        if (r >= 0)
                r = dup_set(src->pinned_cpus, &c->pinned_cpus);
        if (r >= 0)
                r = dup_set(src->free_cpus, &c->free_cpus);
        if (r < 0) {
                capacity_copy_free(c);
                return r;
        }
        *ret_c = c;
        return 0;
}

void placement_offer_done(struct placement_offer *o) {
        if (!o)
                return;
        placement_free(o->best);
        *o = (struct placement_offer){ 0 };
}

/* Place copies of req one after the other on work until one does not fit or max_count is reached. */
static int offer_count(const struct topology *t, struct capacity *work, const struct placement_request *req,
                       unsigned max_count, struct placement_offer *o) {
        char why[1];
        while (o->count < max_count) {
                struct placement *p = NULL;
                int r = placement_place(t, work, req, &p, why, 0); /* the count needs no reason */
                if (r == -ENOSPC)
                        return 0;
                if (r < 0)
                        return r;
                r = placement_charge(work, p);
                o->preferred += !p->fallback && o->preferred == o->count;
                placement_free(p);
                if (r < 0)
                        return r;
                o->count++;
        }
        o->count_capped = true;
        return 0;
}

int placement_offer(const struct topology *t, const struct capacity *free_cap, const struct placement_request *req,
                    unsigned max_count, struct placement_offer *ret_offer, char *reason, size_t reasonlen) {
        struct placement_offer o = { 0 };
        if (max_count == 0)
                max_count = 1;
        int r = placement_place(t, free_cap, req, &o.best, reason, reasonlen);
        if (r == -ENOSPC) {
                *ret_offer = o;
                return 0;
        }
        if (r < 0)
                return r;
        o.score = placement_score(t, free_cap, o.best);
        struct capacity *work = NULL;
        r = capacity_copy(free_cap, &work);
        if (r >= 0)
                r = offer_count(t, work, req, max_count, &o);
        capacity_copy_free(work);
        if (r < 0) {
                placement_offer_done(&o);
                return r;
        }
        *ret_offer = o;
        return 0;
}

json_t *placement_offer_to_json(const struct placement_offer *o) {
        json_t *p = o->best ? placement_to_json(o->best) : json_null();
        if (!p)
                return NULL;
        return json_pack("{s:I, s:I, s:b, s:f, s:b, s:o}", "count", (json_int_t)o->count, "preferred_count",
                         (json_int_t)o->preferred, "count_capped", o->count_capped, "score", o->score, "fallback",
                         o->best && o->best->fallback, "placement", p);
}
