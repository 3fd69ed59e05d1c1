/* simulate_claims: new node claims for pods no node can take: node pool choice, requirement narrowing,
 * the cheapest shape, pool limits, host room from agent offers or PVE accounting, and the reasons. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quantity.h"
#include "simulate_internal.h"

enum stage { ST_NONE = -1, ST_CONFIG, ST_TAINT, ST_REQ, ST_SHAPE, ST_LIMIT, ST_TOPOLOGY, ST_HOST };

struct why {
        enum stage stage;
        char text[300];
};

static void note(struct why *w, enum stage st, const char *text) {
        if (st > w->stage) {
                w->stage = st;
                snprintf(w->text, sizeof w->text, "%s", text);
        }
}

/* ---- planned claims ---- */

static bool is_special(const struct ctx *c, uint32_t key) {
        return key == c->k_zone || key == c->k_region || key == c->k_itype || key == c->k_family ||
               key == c->k_host;
}

static const struct shape *claim_shape(const struct ctx *c, const struct claim_c *cl, size_t si) {
        return &c->ncs[cl->nc].shapes->items[si];
}

static bool limits_ok(const struct pool_c *p, const struct shape *old, const struct shape *s, int new_node,
                      int *ret_which) {
        int64_t dcpu = s->capacity.v[RESOURCE_CPU] - (old ? old->capacity.v[RESOURCE_CPU] : 0);
        int64_t dmem = s->capacity.v[RESOURCE_MEMORY] - (old ? old->capacity.v[RESOURCE_MEMORY] : 0);
        const struct sim_nodepool *src = p->src;
        *ret_which = -1;
        if (src->limit_cpu_milli >= 0 && p->used_cpu + dcpu > src->limit_cpu_milli)
                *ret_which = 0;
        else if (src->limit_memory_bytes >= 0 && p->used_mem + dmem > src->limit_memory_bytes)
                *ret_which = 1;
        else if (src->limit_nodes >= 0 && p->used_nodes + new_node > src->limit_nodes)
                *ret_which = 2;
        return *ret_which < 0;
}

static void compute_maxalloc(const struct ctx *c, struct claim_c *cl) {
        const struct shape_catalog *cat = c->ncs[cl->nc].shapes;
        memset(&cl->maxalloc, 0, sizeof cl->maxalloc);
        for (size_t s = 0; s < cat->n; s++)
                if (cl->mask[s / 64] >> (s % 64) & 1)
                        resources_max(&cl->maxalloc, &cat->items[s].allocatable);
}

/* The cheapest shape in mask that holds need, fits the pool's limits and the host. */
static long claim_pick_shape(struct ctx *c, struct claim_c *cl, const uint64_t *mask, const struct resources *need) {
        struct host_c *h = &c->hosts[cl->host];
        const struct shape *cur = claim_shape(c, cl, cl->shape);
        long found = -1;
        int which, numa;
        simulate__host_release(h, cl->nc, cl->shape, cur, cl);
        for (size_t si = 0; si < c->ncs[cl->nc].shapes->n && found < 0; si++) {
                const struct shape *s = claim_shape(c, cl, si);
                bool in_mask = mask[si / 64] >> (si % 64) & 1;
                if (!in_mask || !resources_fit(need, &(struct resources){ 0 }, &s->allocatable))
                        continue;
                if (si != cl->shape && !limits_ok(&c->pools[cl->pool], cur, s, 0, &which))
                        continue;
                if (simulate__host_fits(h, cl->nc, si, s, &numa) == ROOM_OK)
                        found = (long)si;
        }
        simulate__host_take(h, cl->nc, cl->shape, cur, cl);
        return found;
}

static void claim_set_shape(struct ctx *c, struct claim_c *cl, size_t si) {
        struct host_c *h = &c->hosts[cl->host];
        struct pool_c *p = &c->pools[cl->pool];
        const struct shape *old = claim_shape(c, cl, cl->shape), *s = claim_shape(c, cl, si);
        int numa;
        simulate__host_release(h, cl->nc, cl->shape, old, cl);
        simulate__host_fits(h, cl->nc, si, s, &numa);
        cl->numa = numa;
        simulate__host_take(h, cl->nc, si, s, cl);
        p->used_cpu += s->capacity.v[RESOURCE_CPU] - old->capacity.v[RESOURCE_CPU];
        p->used_mem += s->capacity.v[RESOURCE_MEMORY] - old->capacity.v[RESOURCE_MEMORY];
        cl->shape = si;
        c->slots[cl->slot].alloc = s->allocatable;
}

static int claim_add_reqs(struct ctx *c, struct claim_c *cl, const struct cterm *t) {
        const struct slot *sl = &c->slots[cl->slot];
        for (uint32_t i = 0; i < t->n; i++) {
                uint32_t key = t->reqs[i].key;
                if (is_special(c, key) || simulate__label(sl->labels, sl->n_labels, key))
                        continue;
                size_t cap = cl->cap_reqs;
                if (simulate__grow(&cl->reqs, &cap, (size_t)cl->n_reqs + 1, sizeof(struct creq)) < 0)
                        return c->error = -ENOMEM;
                cl->cap_reqs = (uint32_t)cap;
                cl->reqs[cl->n_reqs++] = t->reqs[i];
        }
        return 0;
}

static bool claim_term_ok(const struct ctx *c, const struct claim_c *cl, const struct cterm *t) {
        const struct slot *sl = &c->slots[cl->slot];
        const struct pool_c *p = &c->pools[cl->pool];
        struct reqlists rl = { { p->greqs, cl->reqs, t->reqs }, { p->n_greqs, cl->n_reqs, t->n } };
        for (uint32_t i = 0; i < t->n; i++)
                if (!simulate__new_node_req_ok(c, &t->reqs[i], sl->labels, sl->n_labels, &rl))
                        return false;
        return true;
}

/* 0 = the pod fits the claim (and was added when commit), else the enum fit failure. */
int simulate__claim_try(struct ctx *c, struct claim_c *cl, const struct pclass *pc_const, const struct sim_pod *pod,
                        bool commit) {
        struct pclass *pc = (struct pclass *)pc_const;
        size_t words = c->ncs[cl->nc].words;
        uint64_t mask[words + 1];
        struct resources need = cl->packed;
        resources_add(&need, &pod->requests);
        for (uint32_t t = 0; t < pc->n_terms; t++) {
                if (!claim_term_ok(c, cl, &pc->terms[t]))
                        continue;
                const uint64_t *tm = simulate__term_mask(c, pc, cl->nc, t);
                if (!tm)
                        return FIT_STATIC;
                for (size_t w = 0; w < words; w++)
                        mask[w] = cl->mask[w] & tm[w];
                if (!simulate__mask_any(mask, mask, words))
                        continue;
                if (!resources_fit(&need, &(struct resources){ 0 }, &cl->maxalloc))
                        return FIT_RESOURCES;
                const struct shape *cur = claim_shape(c, cl, cl->shape);
                bool cur_ok = mask[cl->shape / 64] >> (cl->shape % 64) & 1 &&
                              resources_fit(&need, &(struct resources){ 0 }, &cur->allocatable);
                long si = cur_ok ? (long)cl->shape : claim_pick_shape(c, cl, mask, &need);
                if (si < 0)
                        return FIT_RESOURCES;
                if (!commit)
                        return FIT_OK;
                if ((size_t)si != cl->shape)
                        claim_set_shape(c, cl, (size_t)si);
                if (memcmp(mask, cl->mask, words * sizeof *mask) != 0) {
                        memcpy(cl->mask, mask, words * sizeof *mask);
                        compute_maxalloc(c, cl);
                }
                cl->packed = need;
                return claim_add_reqs(c, cl, &pc->terms[t]) < 0 ? FIT_STATIC : FIT_OK;
        }
        return FIT_STATIC;
}

/* ---- daemon set overhead on a new node ---- */

static bool str_req_ok(const struct ctx *c, const struct sim_requirement *r, const struct sim_label *l, size_t n) {
        const char *v;
        if (strcmp(r->key, SIM_LABEL_INSTANCE_TYPE) == 0 || strcmp(r->key, SIM_LABEL_FAMILY) == 0)
                return true; /* decided by the shape, which is not chosen yet: assume the pod lands */
        if (strcmp(r->key, SIM_LABEL_HOSTNAME) == 0)
                return r->op == SIM_OP_NOT_IN || r->op == SIM_OP_EXISTS;
        v = simulate_label_get(l, n, r->key);
        struct creq cr = { .op = r->op };
        uint32_t vals[r->n_values + 1];
        /* reuse the interned matcher: values are few */
        for (size_t i = 0; i < r->n_values; i++)
                vals[i] = simulate__intern((struct ctx *)c, r->values[i]);
        for (size_t i = 1; i < r->n_values; i++)
                for (size_t j = i; j > 0 && vals[j - 1] > vals[j]; j--) {
                        uint32_t t = vals[j];
                        vals[j] = vals[j - 1];
                        vals[j - 1] = t;
                }
        cr.vals = vals;
        cr.n_vals = (uint32_t)r->n_values;
        if ((r->op == SIM_OP_GT || r->op == SIM_OP_LT) && r->n_values == 1)
                cr.num = strtoll(r->values[0], NULL, 10);
        return simulate__req_matches(c, &cr, v ? simulate__intern((struct ctx *)c, v) : 0);
}

static bool ds_lands(const struct ctx *c, const struct sim_pod *ds, const struct sim_nodepool *p,
                     const struct sim_label *l, size_t n) {
        for (size_t t = 0; t < p->n_taints; t++)
                if (!simulate_tolerates(ds->tolerations, ds->n_tolerations, &p->taints[t]))
                        return false;
        for (size_t i = 0; i < ds->n_node_selector; i++) {
                const char *v = simulate_label_get(l, n, ds->node_selector[i].key);
                if (strcmp(ds->node_selector[i].key, SIM_LABEL_INSTANCE_TYPE) != 0 &&
                    strcmp(ds->node_selector[i].key, SIM_LABEL_FAMILY) != 0 &&
                    (!v || strcmp(v, ds->node_selector[i].value) != 0))
                        return false;
        }
        for (size_t t = 0; t < ds->n_affinity; t++) {
                bool ok = true;
                for (size_t i = 0; i < ds->affinity[t].n_reqs && ok; i++)
                        ok = str_req_ok(c, &ds->affinity[t].reqs[i], l, n);
                if (ok)
                        return true;
        }
        return ds->n_affinity == 0;
}

static const struct resources *ds_overhead(struct ctx *c, size_t pool, const struct host_c *h) {
        struct pool_c *p = &c->pools[pool];
        if (!p->ds) {
                p->ds = simulate__arena_alloc(c->arena, (c->n_zones + 1) * sizeof(struct resources));
                p->ds_known = simulate__arena_alloc(c->arena, c->n_zones + 1);
                if (!p->ds || !p->ds_known) {
                        c->error = -ENOMEM;
                        static const struct resources none;
                        return &none;
                }
        }
        if (!p->ds_known[h->zone]) {
                size_t n = p->n_fixed + 2;
                struct sim_label l[n];
                for (uint32_t i = 0; i < p->n_fixed; i++)
                        l[i] = (struct sim_label){ simulate__str(c, p->fixed[i].k), simulate__str(c, p->fixed[i].v) };
                l[n - 2] = (struct sim_label){ SIM_LABEL_ZONE, simulate__str(c, c->zone_ids[h->zone]) };
                l[n - 1] = (struct sim_label){ SIM_LABEL_REGION, simulate__str(c, h->region) };
                for (size_t d = 0; d < c->in->n_daemonsets; d++)
                        if (ds_lands(c, c->in->daemonsets[d], p->src, l, h->region ? n : n - 1))
                                resources_add(&p->ds[h->zone], &c->in->daemonsets[d]->requests);
                p->ds_known[h->zone] = 1;
        }
        return &p->ds[h->zone];
}

/* ---- creating a claim ---- */

struct choice {
        size_t pool, host, shape;
        uint32_t term;
        int numa;
        uint64_t *mask;
};

static int cmp_kv_key(const void *a, const void *b) {
        const struct kv *x = a, *y = b;
        return x->k < y->k ? -1 : x->k > y->k;
}

/* The pool's fixed labels plus the host's zone and region, sorted by key id. */
static struct kv *claim_labels(struct ctx *c, const struct pool_c *p, const struct host_c *h, uint32_t *ret_n) {
        uint32_t n = 0;
        struct kv *l = simulate__arena_alloc(c->arena, (p->n_fixed + 3) * sizeof *l);
        if (!l)
                return NULL;
        for (uint32_t i = 0; i < p->n_fixed; i++)
                if (p->fixed[i].k != c->k_zone && p->fixed[i].k != c->k_region)
                        l[n++] = p->fixed[i];
        l[n++] = (struct kv){ c->k_zone, c->zone_ids[h->zone] };
        if (h->region)
                l[n++] = (struct kv){ c->k_region, h->region };
        qsort(l, n, sizeof *l, cmp_kv_key);
        *ret_n = n;
        return l;
}

static int create_claim(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, const struct choice *ch,
                        size_t *ret_slot) {
        struct pool_c *p = &c->pools[ch->pool];
        struct host_c *h = &c->hosts[ch->host];
        struct slot *sl;
        if (simulate__grow(&c->claims, &c->cap_claims, c->n_claims + 1, sizeof(struct claim_c)) < 0 ||
            simulate__add_slot(c, &sl) < 0)
                return c->error = -ENOMEM;
        struct claim_c *cl = &c->claims[c->n_claims];
        const struct shape *s = &c->ncs[p->nc].shapes->items[ch->shape];
        *cl = (struct claim_c){ .pool = ch->pool, .host = ch->host, .slot = c->n_slots - 1, .nc = p->nc,
                                .shape = ch->shape, .numa = ch->numa, .mask = ch->mask };
        *sl = (struct slot){ .kind = SLOT_CLAIM, .index = c->n_claims, .taints = p->src->taints,
                             .n_taints = p->src->n_taints, .alloc = s->allocatable, .zone = h->zone };
        sl->labels = claim_labels(c, p, h, &sl->n_labels);
        cl->span = simulate__arena_alloc(c->arena, (2 * h->src->n_numa + 1) * sizeof(int64_t));
        if (!sl->labels || !cl->span)
                return c->error = -ENOMEM;
        cl->ds = *ds_overhead(c, ch->pool, h);
        cl->packed = cl->ds;
        resources_add(&cl->packed, &pod->requests);
        simulate__host_take(h, p->nc, ch->shape, s, cl);
        p->used_cpu += s->capacity.v[RESOURCE_CPU];
        p->used_mem += s->capacity.v[RESOURCE_MEMORY];
        p->used_nodes++;
        h->planned++;
        compute_maxalloc(c, cl);
        c->n_claims++;
        *ret_slot = cl->slot;
        return claim_add_reqs(c, cl, &pc->terms[ch->term]);
}

/* ---- choosing pool, term, host and shape ---- */

struct hostscan {
        size_t *cand;
        size_t n_cand;
        enum room worst;           /* the furthest check any host failed */
        int64_t best_cpus, best_mem, best_numa_cpus, best_numa_mem;
        const struct host_c *best_cpus_h, *best_mem_h, *best_numa_cpus_h, *best_numa_mem_h;
        int best_numa_cpus_id, best_numa_mem_id;
};

static bool host_place_ok(const struct ctx *c, const struct pool_c *p, const struct cterm *t, const struct host_c *h) {
        if (c->ncs[p->nc].region && c->ncs[p->nc].region != h->region)
                return false;
        for (uint32_t i = 0; i < p->n_zreqs; i++) {
                const struct creq *z = &p->zreqs[i];
                uint32_t value = z->key == c->k_zone ? c->zone_ids[h->zone] : h->region;
                if (!simulate__req_matches(c, z, value))
                        return false;
        }
        for (uint32_t i = 0; i < t->n; i++) {
                const struct creq *r = &t->reqs[i];
                if (r->key == c->k_zone && !simulate__req_matches(c, r, c->zone_ids[h->zone]))
                        return false;
                if (r->key == c->k_region && !simulate__req_matches(c, r, h->region))
                        return false;
        }
        return true;
}

static const char *topology_text(const struct ctx *c, const struct pclass *pc, enum fit f, char *buf, size_t len) {
        if (f == FIT_ANTI)
                snprintf(buf, len, "pod anti-affinity excludes every zone with room");
        else if (f == FIT_AFFINITY && pc->n_aff)
                snprintf(buf, len, "pod affinity on %s needs a %s already running matching pods",
                         pc->aff[0].src->topology_key, pc->aff[0].topo == TOPO_HOST ? "node" : "zone");
        else if (pc->n_spread)
                snprintf(buf, len, "topology spread on %s (maxSkew %d) allows no zone with room",
                         pc->spread[0].src->topology_key, pc->spread[0].max_skew);
        else
                snprintf(buf, len, "no zone satisfies the pod's topology constraints");
        (void)c;
        return buf;
}

/* A host filter_hosts keeps? */
static bool host_candidate(struct ctx *c, struct pclass *pc, const struct pool_c *p, const struct cterm *t,
                           const int32_t *mins, bool soft, size_t h) {
        return (c->only_zone < 0 || c->hosts[h].zone == c->only_zone) && host_place_ok(c, p, t, &c->hosts[h]) &&
               simulate__topology_fits(c, pc, mins, soft, SIZE_MAX, c->hosts[h].zone) == FIT_OK;
}

/* Candidate hosts for pool p, term t and the pod's zone topology. 0 when none, with a reason noted. A class
 * that zone affinity confines tries the hosts of those zones first: no other host passes; when none of them
 * does, the scan of every host finds the reason. */
static size_t filter_hosts(struct ctx *c, struct pclass *pc, const struct pool_c *p, const struct cterm *t,
                           const int32_t *mins, bool soft, struct hostscan *hs, struct why *w) {
        enum fit worst = FIT_OK;
        size_t placed = 0;
        int32_t zones[SIM_ZONES_MAX];
        int n_zones = simulate__affinity_zones(c, pc, zones);
        for (size_t h = 0; n_zones > 0 && h < c->n_hosts; h++)
                if (simulate__zone_in(zones, n_zones, c->hosts[h].zone) && host_candidate(c, pc, p, t, mins, soft, h))
                        hs->cand[hs->n_cand++] = h;
        if (hs->n_cand)
                return hs->n_cand;
        for (size_t h = 0; h < c->n_hosts; h++) {
                if ((c->only_zone >= 0 && c->hosts[h].zone != c->only_zone) || !host_place_ok(c, p, t, &c->hosts[h]))
                        continue;
                placed++;
                enum fit f = simulate__topology_fits(c, pc, mins, soft, SIZE_MAX, c->hosts[h].zone);
                if (f == FIT_OK)
                        hs->cand[hs->n_cand++] = h;
                else if (worst == FIT_OK)
                        worst = f;
        }
        if (hs->n_cand)
                return hs->n_cand;
        char buf[200];
        if (placed == 0) {
                snprintf(buf, sizeof buf, "NodePool %s: no host in a zone and region its nodes may use",
                         p->src->name);
                note(w, ST_TOPOLOGY, buf);
        } else {
                note(w, ST_TOPOLOGY, topology_text(c, pc, worst, buf, sizeof buf));
        }
        return 0;
}

static void scan_note(struct hostscan *hs, const struct host_c *h, enum room r) {
        if (r > hs->worst)
                hs->worst = r;
        if (h->free_cpus > hs->best_cpus) {
                hs->best_cpus = h->free_cpus;
                hs->best_cpus_h = h;
        }
        if (h->free_mem > hs->best_mem) {
                hs->best_mem = h->free_mem;
                hs->best_mem_h = h;
        }
        for (size_t i = 0; i < h->src->n_numa; i++) {
                if (h->numa_cpus[i] > hs->best_numa_cpus) {
                        hs->best_numa_cpus = h->numa_cpus[i];
                        hs->best_numa_cpus_h = h;
                        hs->best_numa_cpus_id = h->src->numa[i].id;
                }
                if (h->numa_mem[i] > hs->best_numa_mem) {
                        hs->best_numa_mem = h->numa_mem[i];
                        hs->best_numa_mem_h = h;
                        hs->best_numa_mem_id = h->src->numa[i].id;
                }
        }
}

/* The mappings of a node class's pciDevices, ", "-separated, into buf. */
static const char *mapping_list(const struct sim_nodeclass *cls, char *buf, size_t len) {
        size_t n = 0;
        buf[0] = 0;
        for (size_t i = 0; i < cls->n_pci && n < len; i++)
                n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", cls->pci_mappings[i]);
        return buf;
}

static void host_reason(const struct hostscan *hs, const struct sim_nodeclass *cls, const struct shape *s,
                        struct why *w) {
        char buf[300], need[32], have[32], maps[160];
        quantity_format_bytes_human((int64_t)s->vm_memory_bytes, need, sizeof need);
        if (hs->worst == ROOM_DEVICE)
                snprintf(buf, sizeof buf,
                         "no host has a free PCI device of mapping %s (node class %s, %zu hosts asked)",
                         mapping_list(cls, maps, sizeof maps), cls->name, hs->n_cand);
        else if (hs->worst == ROOM_CPUS)
                snprintf(buf, sizeof buf, "no host has %u free cores (best: %s with %" PRId64 ")", s->vcpus,
                         hs->best_cpus_h->src->name, hs->best_cpus);
        else if (hs->worst == ROOM_MEMORY)
                snprintf(buf, sizeof buf, "no host has %s free memory (best: %s with %s)", need,
                         hs->best_mem_h->src->name, quantity_format_bytes_human(hs->best_mem, have, sizeof have));
        else if (hs->worst == ROOM_OFFER)
                snprintf(buf, sizeof buf, "no agent offers room for %s (%zu hosts asked)", s->name, hs->n_cand);
        else if (hs->best_numa_cpus < s->vcpus)
                snprintf(buf, sizeof buf,
                         "no host has %u free cores in one NUMA node (best: %s numa%d with %" PRId64 ")", s->vcpus,
                         hs->best_numa_cpus_h->src->name, hs->best_numa_cpus_id, hs->best_numa_cpus);
        else
                snprintf(buf, sizeof buf, "no host has %s free memory in one NUMA node (best: %s numa%d with %s)", need,
                         hs->best_numa_mem_h->src->name, hs->best_numa_mem_id,
                         quantity_format_bytes_human(hs->best_numa_mem, have, sizeof have));
        note(w, ST_HOST, buf);
}

static void limit_reason(const struct pool_c *p, int which, struct why *w) {
        char buf[200], lim[32], use[32];
        const struct sim_nodepool *s = p->src;
        if (which == 0)
                snprintf(buf, sizeof buf, "NodePool %s cpu limit %s reached (%s in use)", s->name,
                         quantity_format_milli(s->limit_cpu_milli, lim, sizeof lim),
                         quantity_format_milli(p->used_cpu, use, sizeof use));
        else if (which == 1)
                snprintf(buf, sizeof buf, "NodePool %s memory limit %s reached (%s in use)", s->name,
                         quantity_format_bytes_human(s->limit_memory_bytes, lim, sizeof lim),
                         quantity_format_bytes_human(p->used_mem, use, sizeof use));
        else
                snprintf(buf, sizeof buf, "NodePool %s nodes limit %" PRId64 " reached (%" PRId64 " in use)", s->name,
                         s->limit_nodes, p->used_nodes);
        note(w, ST_LIMIT, buf);
}

static void shape_reason(const struct ctx *c, const struct pool_c *p, const uint64_t *mask,
                         const struct resources *need, struct why *w) {
        const struct shape_catalog *cat = c->ncs[p->nc].shapes;
        struct resources most = { 0 };
        char buf[300], a[32], b[32];
        for (size_t s = 0; s < cat->n; s++)
                if (mask[s / 64] >> (s % 64) & 1)
                        resources_max(&most, &cat->items[s].allocatable);
        int k = resources_first_excess(need, &(struct resources){ 0 }, &most);
        if (k >= 0)
                snprintf(buf, sizeof buf,
                         "NodePool %s has no instance type with room for the pod's %s %s (largest allocatable %s)",
                         p->src->name, simulate_resource_name(c->in, k),
                         resources_format_value(k, need->v[k], a, sizeof a),
                         resources_format_value(k, most.v[k], b, sizeof b));
        else
                snprintf(buf, sizeof buf,
                         "NodePool %s has no single instance type with room for the pod's cpu %s and memory %s "
                         "together",
                         p->src->name, resources_format_value(RESOURCE_CPU, need->v[RESOURCE_CPU], a, sizeof a),
                         resources_format_value(RESOURCE_MEMORY, need->v[RESOURCE_MEMORY], b, sizeof b));
        note(w, ST_SHAPE, buf);
}

/* a is the better host for shape si of node class nc: the zone spread first, then a host whose agent offers
 * a preferred layout over one that offers only its fallback (quality is a preference: a poor layout is
 * used only where no host has better), then the fewest claims planned, then the most free CPUs. */
static bool better_host(const struct ctx *c, const struct pclass *pc, int nc, size_t si, const struct host_c *a,
                        const struct host_c *b) {
        for (uint32_t i = 0; i < pc->n_spread; i++)
                if (pc->spread[i].topo == TOPO_ZONE) {
                        const struct group *g = &c->groups[pc->spread[i].group];
                        if (g->zone_cnt[a->zone] != g->zone_cnt[b->zone])
                                return g->zone_cnt[a->zone] < g->zone_cnt[b->zone];
                }
        if (simulate__host_poor(a, nc, si) != simulate__host_poor(b, nc, si))
                return !simulate__host_poor(a, nc, si);
        if (a->planned != b->planned)
                return a->planned < b->planned;
        return a->free_cpus > b->free_cpus;
}

/* For one shape: the best candidate host with room, or -1. */
static long pick_host(struct ctx *c, const struct pclass *pc, const struct sim_pod *pod, size_t pool, size_t si,
                      struct hostscan *hs, bool *ret_fits, int *ret_numa) {
        const struct pool_c *p = &c->pools[pool];
        const struct shape *s = &c->ncs[p->nc].shapes->items[si];
        long best = -1;
        for (size_t i = 0; i < hs->n_cand; i++) {
                struct host_c *h = &c->hosts[hs->cand[i]];
                struct resources need = pod->requests;
                int numa;
                resources_add(&need, ds_overhead(c, pool, h));
                if (!resources_fit(&need, &(struct resources){ 0 }, &s->allocatable))
                        continue;
                *ret_fits = true;
                enum room r = simulate__host_fits(h, p->nc, si, s, &numa);
                if (r != ROOM_OK) {
                        scan_note(hs, h, r);
                        continue;
                }
                if (best < 0 || better_host(c, pc, p->nc, si, h, &c->hosts[best])) {
                        best = (long)hs->cand[i];
                        *ret_numa = numa;
                }
        }
        return best;
}

static bool try_shapes(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, struct choice *ch,
                       struct hostscan *hs, struct why *w) {
        const struct pool_c *p = &c->pools[ch->pool];
        const struct shape_catalog *cat = c->ncs[p->nc].shapes;
        const struct shape *host_failed = NULL;
        bool any_fit = false, limited = false;
        for (size_t si = 0; si < cat->n; si++) {
                int which;
                bool fits = false;
                if (!(ch->mask[si / 64] >> (si % 64) & 1))
                        continue;
                if (!resources_fit(&pod->requests, &(struct resources){ 0 }, &cat->items[si].allocatable))
                        continue;
                if (!limits_ok(p, NULL, &cat->items[si], 1, &which)) {
                        if (!limited && !any_fit)
                                limit_reason(p, which, w);
                        limited = true;
                        continue;
                }
                long h = pick_host(c, pc, pod, ch->pool, si, hs, &fits, &ch->numa);
                any_fit |= fits;
                if (h >= 0) {
                        ch->shape = si;
                        ch->host = (size_t)h;
                        return true;
                }
                if (fits && !host_failed)
                        host_failed = &cat->items[si];
        }
        if (host_failed)
                host_reason(hs, c->in->classes[p->nc], host_failed, w);
        else if (!limited)
                shape_reason(c, p, ch->mask, &pod->requests, w);
        return false;
}

/* ---- the same choice without scanning every host ---- */

#define ORDERED_TRIES 64 /* hosts tried in order before the scan of every host takes over */

/* Does the host choice follow ctx.host_order for this class? better_host ranks by zone spread counts first;
 * the agents' preferred layouts come next, which ordered_host checks host by host. */
static bool host_order_applies(const struct ctx *c, const struct pclass *pc) {
        for (uint32_t i = 0; i < pc->n_spread; i++)
                if (pc->spread[i].topo == TOPO_ZONE)
                        return false;
        return c->only_zone < 0;
}

/* For one shape: the first host in ctx.host_order that filter_hosts would keep and pick_host would take, and
 * whose agent has a preferred layout left for the shape (else the first such host with only its fallback, once
 * every host has been looked at), which is the one pick_host picks; -1 when it is not among the first
 * ORDERED_TRIES hosts that pass the filter. */
static long ordered_host(struct ctx *c, const struct pclass *pc, const struct sim_pod *pod, const struct pool_c *p,
                         size_t pool, const struct cterm *t, const int32_t *mins, bool soft, size_t si,
                         int *ret_numa) {
        const struct shape *s = &c->ncs[p->nc].shapes->items[si];
        size_t tries = 0, k;
        long poor = -1;
        int numa, poor_numa = -1;
        int32_t zones[SIM_ZONES_MAX];
        int n_zones = simulate__affinity_zones(c, pc, zones);
        for (k = 0; k < c->n_hosts && tries < ORDERED_TRIES; k++) {
                size_t h = c->host_order[k];
                struct host_c *hc = &c->hosts[h];
                if ((n_zones >= 0 && !simulate__zone_in(zones, n_zones, hc->zone)) ||
                    !host_place_ok(c, p, t, hc) ||
                    simulate__topology_fits(c, pc, mins, soft, SIZE_MAX, hc->zone) != FIT_OK)
                        continue;
                tries++;
                struct resources need = pod->requests;
                resources_add(&need, ds_overhead(c, pool, hc));
                if (!resources_fit(&need, &(struct resources){ 0 }, &s->allocatable) ||
                    simulate__host_fits(hc, p->nc, si, s, &numa) != ROOM_OK)
                        continue;
                if (!simulate__host_poor(hc, p->nc, si)) {
                        *ret_numa = numa;
                        return (long)h;
                }
                if (poor < 0) {
                        poor = (long)h;
                        poor_numa = numa;
                }
        }
        if (k < c->n_hosts)
                return -1; /* a host with a preferred layout may come later */
        *ret_numa = poor_numa;
        return poor;
}

/* try_shapes' choice by host order: true with ch filled, false when it must scan every host (it may still
 * find one, or it notes why not). */
static bool try_shapes_ordered(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, struct choice *ch,
                               const int32_t *mins, bool soft) {
        const struct pool_c *p = &c->pools[ch->pool];
        const struct shape_catalog *cat = c->ncs[p->nc].shapes;
        if (!host_order_applies(c, pc))
                return false;
        simulate__host_order_sync(c);
        for (size_t si = 0; si < cat->n; si++) {
                int which;
                if (!(ch->mask[si / 64] >> (si % 64) & 1) ||
                    !resources_fit(&pod->requests, &(struct resources){ 0 }, &cat->items[si].allocatable) ||
                    !limits_ok(p, NULL, &cat->items[si], 1, &which))
                        continue;
                long h = ordered_host(c, pc, pod, p, ch->pool, &pc->terms[ch->term], mins, soft, si, &ch->numa);
                if (h < 0)
                        return false;
                ch->shape = si;
                ch->host = (size_t)h;
                return true;
        }
        return false;
}

static bool try_pool(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, size_t pool, bool soft,
                     const int32_t *mins, struct why *w, size_t *ret_slot) {
        const struct pool_c *p = &c->pools[pool];
        char buf[300];
        if (p->nc < 0 || p->bad) {
                if (p->nc < 0)
                        snprintf(buf, sizeof buf, "NodePool %s refers to missing ProxmoxNodeClass %s", p->src->name,
                                 p->src->nodeclass ? p->src->nodeclass : "(none)");
                else
                        snprintf(buf, sizeof buf, "NodePool %s %s", p->src->name, p->bad);
                note(w, ST_CONFIG, buf);
                return false;
        }
        if (!simulate__tolerates_pool(c, pc, pool)) {
                const struct sim_taint *t = &p->src->taints[0];
                for (size_t i = 0; i < p->src->n_taints; i++)
                        if (!simulate_tolerates(pod->tolerations, pod->n_tolerations, &p->src->taints[i]))
                                t = &p->src->taints[i];
                static const char *const EFFECTS[] = { "", "NoSchedule", "PreferNoSchedule", "NoExecute" };
                bool has_value = t->value && *t->value;
                snprintf(buf, sizeof buf, "NodePool %s has taint %s%s%s:%s that the pod does not tolerate",
                         p->src->name, t->key, has_value ? "=" : "", t->value ? t->value : "", EFFECTS[t->effect]);
                note(w, ST_TAINT, buf);
                return false;
        }
        size_t words = c->ncs[p->nc].words;
        struct choice ch = { .pool = pool, .mask = simulate__arena_alloc(c->arena, (words + 1) * sizeof(uint64_t)) };
        size_t cand[c->n_hosts + 1];
        struct hostscan hs = { .cand = cand, .worst = ROOM_OK, .best_cpus = -1, .best_mem = -1,
                               .best_numa_cpus = -1, .best_numa_mem = -1 };
        if (!ch.mask) {
                c->error = -ENOMEM;
                return false;
        }
        int t = simulate__pick_term(c, pc, p, ch.mask, buf, sizeof buf);
        if (t < 0)
                note(w, ST_REQ, buf);
        ch.term = (uint32_t)(t < 0 ? 0 : t);
        if (t >= 0 && try_shapes_ordered(c, pc, pod, &ch, mins, soft))
                return create_claim(c, pc, pod, &ch, ret_slot) == 0;
        if (t < 0 || filter_hosts(c, pc, p, &pc->terms[t], mins, soft, &hs, w) == 0)
                return false;
        if (!try_shapes(c, pc, pod, &ch, &hs, w))
                return false;
        return create_claim(c, pc, pod, &ch, ret_slot) == 0;
}

int simulate__new_claim(struct ctx *c, uint32_t cls, const struct sim_pod *pod, bool soft, size_t *ret_slot,
                        const char **ret_reason) {
        struct pclass *pc = &c->classes[cls];
        struct why w = { .stage = ST_NONE };
        int32_t mins[pc->n_spread + 1];
        if (c->in->max_claims && c->n_claims >= c->in->max_claims) {
                snprintf(c->msg, sizeof c->msg, "the cap of %zu node claims planned per round is reached",
                         c->in->max_claims);
                *ret_reason = c->msg;
                return 1;
        }
        simulate__spread_mins(c, pc, soft, mins);
        for (size_t k = 0; k < c->n_pools; k++)
                if ((!c->home_only || c->pool_order[k] == pc->home_pool) &&
                    try_pool(c, pc, pod, c->pool_order[k], soft, mins, &w, ret_slot))
                        return 0;
        if (c->error)
                return c->error;
        snprintf(c->msg, sizeof c->msg, "%s", w.stage == ST_NONE ? "no NodePool exists" : w.text);
        *ret_reason = c->msg;
        return 1;
}

/* ---- the result of one claim ---- */

static int add_label(struct sim_arena *ra, struct sim_claim *out, const char *k, const char *v) {
        out->labels[out->n_labels].key = simulate__arena_strdup(ra, k);
        out->labels[out->n_labels].value = simulate__arena_strdup(ra, v);
        if (!out->labels[out->n_labels].key || !out->labels[out->n_labels].value)
                return -ENOMEM;
        out->n_labels++;
        return 0;
}

static int cmp_label(const void *a, const void *b) {
        return strcmp(((const struct sim_label *)a)->key, ((const struct sim_label *)b)->key);
}

static int generic_labels(struct ctx *c, const struct claim_c *cl, struct sim_arena *ra, struct sim_claim *out) {
        const struct pool_c *p = &c->pools[cl->pool];
        struct reqlists rl = { { p->greqs, cl->reqs, NULL }, { p->n_greqs, cl->n_reqs, 0 } };
        for (int l = 0; l < 2; l++)
                for (uint32_t i = 0; i < rl.n[l]; i++) {
                        uint32_t key = rl.l[l][i].key;
                        bool ok, seen = false;
                        for (uint32_t j = 0; j < out->n_labels && !seen; j++)
                                seen = strcmp(out->labels[j].key, simulate__str(c, key)) == 0;
                        uint32_t v = seen ? 0 : simulate__generic_value(c, &rl, key, &ok);
                        if (v && add_label(ra, out, simulate__str(c, key), simulate__str(c, v)) < 0)
                                return -ENOMEM;
                }
        return 0;
}

int simulate__claim_result(struct ctx *c, size_t i, struct sim_arena *ra, struct sim_claim *out) {
        const struct claim_c *cl = &c->claims[i];
        const struct slot *sl = &c->slots[cl->slot];
        const struct shape *s = claim_shape(c, cl, cl->shape);
        size_t max = sl->n_labels + 2 + c->pools[cl->pool].n_greqs + cl->n_reqs;
        *out = (struct sim_claim){ .nodepool = cl->pool, .shape = s, .host = cl->host, .requests = cl->packed,
                                   .daemon_overhead = cl->ds, .n_pods = cl->n_pods };
        out->labels = simulate__arena_alloc(ra, (max + 1) * sizeof(struct sim_label));
        out->pods = simulate__arena_alloc(ra, (cl->n_pods + 1) * sizeof(size_t));
        if (!out->labels || !out->pods)
                return -ENOMEM;
        memcpy(out->pods, cl->pods, cl->n_pods * sizeof(size_t));
        for (uint32_t k = 0; k < sl->n_labels; k++)
                if (add_label(ra, out, simulate__str(c, sl->labels[k].k), simulate__str(c, sl->labels[k].v)) < 0)
                        return -ENOMEM;
        if (add_label(ra, out, SIM_LABEL_INSTANCE_TYPE, s->name) < 0)
                return -ENOMEM;
        if (add_label(ra, out, SIM_LABEL_FAMILY, s->family) < 0 || generic_labels(c, cl, ra, out) < 0)
                return -ENOMEM;
        qsort(out->labels, out->n_labels, sizeof *out->labels, cmp_label);
        return 0;
}
