/* simulate: the coordinator's pure scheduling simulation. Pods are placed largest first onto existing
 * nodes, then in-flight claims, then claims planned this round, then a new claim (simulate_claims.c). Also
 * scale-down's guard: which pending pod each node could take now, by the same predicates. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "simulate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "simulate_internal.h"

static bool taints_tolerated(const struct sim_pod *pod, const struct slot *sl) {
        for (size_t i = 0; i < sl->n_taints; i++)
                if (!simulate_tolerates(pod->tolerations, pod->n_tolerations, &sl->taints[i]))
                        return false;
        return true;
}

static bool node_static_ok(const struct ctx *c, const struct pclass *pc, const struct slot *sl) {
        if (!taints_tolerated(pc->example, sl))
                return false;
        for (uint32_t t = 0; t < pc->n_terms; t++)
                if (simulate__term_matches(c, &pc->terms[t], sl->labels, sl->n_labels))
                        return true;
        return false;
}

static bool ports_conflict(const struct sim_pod *pod, const struct slot *sl) {
        for (size_t i = 0; i < pod->n_host_ports; i++)
                for (size_t j = 0; j < sl->n_ports; j++)
                        if (pod->host_ports[i] == sl->ports[j])
                                return true;
        return false;
}

static enum fit slot_fits(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, size_t s, const int32_t *mins,
                          bool soft) {
        struct slot *sl = &c->slots[s];
        if (sl->closed || (pod->skip_nodes && sl->kind == SLOT_NODE))
                return FIT_STATIC;
        if (sl->kind != SLOT_CLAIM) {
                if (!node_static_ok(c, pc, sl))
                        return FIT_STATIC;
                if (!resources_fit(&sl->used, &pod->requests, &sl->alloc))
                        return FIT_RESOURCES;
        } else if (!simulate__tolerates_pool(c, pc, c->claims[sl->index].pool)) {
                return FIT_STATIC;
        }
        if (pod->n_host_ports && ports_conflict(pod, sl))
                return FIT_PORTS;
        enum fit f = simulate__topology_fits(c, pc, mins, soft, s, sl->zone);
        if (f != FIT_OK || sl->kind != SLOT_CLAIM)
                return f;
        return (enum fit)simulate__claim_try(c, &c->claims[sl->index], pc, pod, false);
}

static bool permanent(enum fit f) {
        return f == FIT_STATIC || f == FIT_PORTS || f == FIT_ANTI;
}

/* The pool a new claim for the class would come from first (its weight order), whatever the room: the class's
 * home. SIZE_MAX when no pool takes it. */
static size_t home_pool(struct ctx *c, struct pclass *pc) {
        if (!pc->home_known) {
                pc->home_pool = SIZE_MAX;
                for (size_t k = 0; k < c->n_pools && pc->home_pool == SIZE_MAX; k++)
                        if (simulate__pool_compatible(c, pc, c->pool_order[k]))
                                pc->home_pool = c->pool_order[k];
                pc->home_known = true;
        }
        return pc->home_pool;
}

/* While home_only: a claim planned this round of another pool than the class's home is kept for the pods that
 * need its pool. kube-scheduler knows nothing of the plan: a pod any pool takes lands on whichever new node is
 * Ready and scores best, so room planned for it on a pool that other pods need is room they lose. */
static bool foreign_claim(struct ctx *c, struct pclass *pc, const struct slot *sl) {
        return c->home_only && sl->kind == SLOT_CLAIM && c->claims[sl->index].pool != home_pool(c, pc);
}

/* Does slot s take the pod? Remembers the slots that fail for a permanent reason. */
static bool slot_takes(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, size_t s, const int32_t *mins,
                       bool soft) {
        if ((c->only_zone >= 0 && c->slots[s].zone != c->only_zone) || foreign_claim(c, pc, &c->slots[s]))
                return false;
        enum fit f = pc->slot_fail[s] ? FIT_STATIC : slot_fits(c, pc, pod, s, mins, soft);
        if (f == FIT_OK)
                return true;
        if (permanent(f)) {
                pc->slot_fail[s] = 1;
                if (s == pc->cursor)
                        pc->cursor++;
        }
        return false;
}

/* The slots of the given zones in increasing order (the order of a scan of all slots) from the cursor on:
 * slots elsewhere fail the affinity, which comes before any claim is tried. */
static size_t scan_zones(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, const int32_t *mins,
                         bool soft, const int32_t *zones, int n) {
        size_t pos[SIM_ZONES_MAX] = { 0 };
        for (;;) {
                int best = -1;
                size_t best_s = SIZE_MAX;
                for (int k = 0; k < n; k++) {
                        if ((size_t)zones[k] >= c->zone_slots_cap)
                                continue; /* no slot there yet */
                        const struct zone_slots *zs = &c->zone_slots[zones[k]];
                        while (pos[k] < zs->n && zs->slots[pos[k]] < pc->cursor)
                                pos[k]++;
                        if (pos[k] < zs->n && zs->slots[pos[k]] < best_s) {
                                best = k;
                                best_s = zs->slots[pos[k]];
                        }
                }
                if (best < 0)
                        return SIZE_MAX;
                pos[best]++;
                if (simulate__index_room(c, best_s, &pod->requests) && slot_takes(c, pc, pod, best_s, mins, soft))
                        return best_s;
        }
}

/* The first slot that takes the pod, or SIZE_MAX. The slots at the cursor are tried one by one, so that the
 * cursor passes those that fail for good; after the first that does not, slots without room for the pod's cpu
 * and memory are skipped: they fail the resource check, which comes before any claim is tried. */
static size_t scan_slots(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, const int32_t *mins,
                         bool soft) {
        int32_t zones[SIM_ZONES_MAX];
        if (simulate__index_sync(c) < 0)
                return SIZE_MAX;
        int n = simulate__affinity_zones(c, pc, zones);
        if (n >= 0)
                return scan_zones(c, pc, pod, mins, soft, zones, n);
        size_t s = pc->cursor;
        for (;;) {
                if (s >= c->n_slots)
                        return SIZE_MAX;
                if (slot_takes(c, pc, pod, s, mins, soft))
                        return s;
                if (pc->cursor == s)
                        break; /* held by a failure that may pass */
                s = pc->cursor;
        }
        for (s = simulate__index_next(c, s + 1, &pod->requests); s != SIZE_MAX;
             s = simulate__index_next(c, s + 1, &pod->requests))
                if (slot_takes(c, pc, pod, s, mins, soft))
                        return s;
        return SIZE_MAX;
}

static int add_port(struct slot *sl, uint32_t port) {
        if (simulate__grow(&sl->ports, &sl->cap_ports, sl->n_ports + 1, sizeof(uint32_t)) < 0)
                return -ENOMEM;
        sl->ports[sl->n_ports++] = port;
        return 0;
}

/* Put pod i of class cls on slot s (resources, counters, ports, claim membership). */
static int land(struct ctx *c, size_t i, size_t s) {
        const struct sim_pod *pod = c->in->pods[i];
        struct pclass *pc = &c->classes[c->class_of_pod[i]];
        struct slot *sl = &c->slots[s];
        resources_add(&sl->used, &pod->requests);
        simulate__count_pod(c, pc, s, 1);
        for (size_t k = 0; k < pod->n_host_ports; k++)
                if (add_port(sl, pod->host_ports[k]) < 0)
                        return -ENOMEM;
        if (simulate__index_update(c, s) < 0)
                return -ENOMEM;
        if (sl->kind != SLOT_CLAIM)
                return 0;
        struct claim_c *cl = &c->claims[sl->index];
        if (simulate__grow(&cl->pods, &cl->cap_pods, cl->n_pods + 1, sizeof(size_t)) < 0)
                return -ENOMEM;
        cl->pods[cl->n_pods++] = i;
        return 0;
}

static bool monotone(const struct pclass *pc) {
        return pc->n_aff == 0 && pc->n_spread == 0;
}

static bool covers(const struct resources *a, const struct resources *b) {
        for (int k = 0; k < RESOURCE_COUNT; k++)
                if (a->v[k] < b->v[k])
                        return false;
        return true;
}

/* Commit a claim slot found by a scan (the claim takes the pod's requirements and may grow its shape). */
static int take_claim(struct ctx *c, struct pclass *pc, const struct sim_pod *pod, size_t s) {
        if (c->slots[s].kind == SLOT_CLAIM &&
            simulate__claim_try(c, &c->claims[c->slots[s].index], pc, pod, true) != FIT_OK)
                return c->error ? c->error : -EINVAL;
        return 0;
}

/* A new claim (counted as a failure of the class when not soft and not home_only), 0 and *s, 1 (*reason), <0. */
static int new_claim(struct ctx *c, size_t i, bool soft, size_t *s, const char **reason) {
        const struct sim_pod *pod = c->in->pods[i];
        uint32_t cls = c->class_of_pod[i];
        struct pclass *pc = &c->classes[cls];
        bool counted = !soft && !c->home_only && monotone(pc);
        if (counted && pc->failed_once && covers(&pod->requests, &pc->fail_req)) {
                *reason = pc->fail_reason;
                return 1;
        }
        int r = simulate__new_claim(c, cls, pod, soft, s, reason);
        if (r > 0 && counted && (!pc->failed_once || covers(&pc->fail_req, &pod->requests))) {
                pc->failed_once = true;
                pc->fail_req = pod->requests;
                pc->fail_reason = NULL; /* set by attempt() from the result's copy */
        }
        return r;
}

/* Where the pod goes: a slot of its home (a node, a claim of its home pool planned this round) or a new claim of
 * its home pool; else a claim of another pool planned this round or a new claim of any pool. 0 and *s, 1 (*reason),
 * <0. */
static int find_slot(struct ctx *c, size_t i, bool soft, const int32_t *mins, size_t *s, const char **reason) {
        const struct sim_pod *pod = c->in->pods[i];
        struct pclass *pc = &c->classes[c->class_of_pod[i]];
        int r = 1;
        c->home_only = c->n_pools > 1 && home_pool(c, pc) != SIZE_MAX; /* one pool: every claim is home */
        if (c->home_only) {
                *s = scan_slots(c, pc, pod, mins, soft);
                r = *s != SIZE_MAX ? take_claim(c, pc, pod, *s) : new_claim(c, i, soft, s, reason);
                c->home_only = false;
                if (r <= 0)
                        return r;
        }
        *s = scan_slots(c, pc, pod, mins, soft);
        return *s != SIZE_MAX ? take_claim(c, pc, pod, *s) : new_claim(c, i, soft, s, reason);
}

/* One attempt (soft: preferences treated as required). 0 placed, 1 not placed (*reason), <0 error. */
static int attempt(struct ctx *c, size_t i, bool soft, struct sim_placement *pl, struct sim_arena *ra) {
        struct pclass *pc = &c->classes[c->class_of_pod[i]];
        int32_t mins[pc->n_spread + 1];
        const char *reason = NULL;
        size_t s = SIZE_MAX;
        simulate__spread_mins(c, pc, soft, mins);
        int r = find_slot(c, i, soft, mins, &s, &reason);
        if (r < 0)
                return r;
        if (r > 0) {
                bool fresh = pc->failed_once && !pc->fail_reason;
                pl->reason = fresh || reason != pc->fail_reason ? simulate__arena_strdup(ra, reason) : reason;
                if (!pl->reason)
                        return -ENOMEM;
                if (fresh)
                        pc->fail_reason = pl->reason;
                return 1;
        }
        const struct slot *sl = &c->slots[s];
        *pl = (struct sim_placement){ .target = sl->kind == SLOT_CLAIM ? SIM_TARGET_CLAIM : SIM_TARGET_NODE,
                                      .index = sl->index };
        return land(c, i, s) < 0 ? -ENOMEM : 0;
}

/* An attempt first inside the anchor zone of a zone-affine set (when this pod starts one), then anywhere. */
static int attempt_anchored(struct ctx *c, size_t i, bool soft, struct sim_placement *pl, struct sim_arena *ra) {
        c->only_zone = simulate__anchor_zone(c, &c->classes[c->class_of_pod[i]]);
        if (c->only_zone >= 0) {
                int r = attempt(c, i, soft, pl, ra);
                c->only_zone = -1;
                if (r <= 0)
                        return r;
        }
        return attempt(c, i, soft, pl, ra);
}

static int place(struct ctx *c, size_t i, struct sim_placement *pl, struct sim_arena *ra) {
        const struct pclass *pc = &c->classes[c->class_of_pod[i]];
        *pl = (struct sim_placement){ .target = SIM_TARGET_UNPLACED };
        if (pc->unsupported) {
                pl->reason = simulate__arena_strdup(ra, pc->unsupported);
                return pl->reason ? 1 : -ENOMEM;
        }
        if (pc->has_soft) {
                int r = attempt_anchored(c, i, true, pl, ra);
                if (r <= 0)
                        return r;
        }
        return attempt_anchored(c, i, false, pl, ra);
}

/* ---- bound pods and ordering ---- */

/* The bound pods onto their nodes' slots (counted for resources, ports and topology); placements may be NULL. */
static int place_bound(struct ctx *c, struct sim_placement *placements) {
        _cleanup_free_ uint32_t *slot_of = NULL;
        size_t cap = 0;
        for (size_t s = 0; s < c->n_slots; s++) {
                uint32_t id = simulate__intern(c, c->in->nodes[c->slots[s].index]->name);
                if (!id || simulate__grow(&slot_of, &cap, (size_t)id + 1, sizeof(uint32_t)) < 0)
                        return -ENOMEM;
                slot_of[id] = (uint32_t)s + 1;
        }
        for (size_t i = 0; i < c->in->n_pods; i++) {
                const struct sim_pod *pod = c->in->pods[i];
                if (!pod->node_name)
                        continue;
                if (placements)
                        placements[i] = (struct sim_placement){ .target = SIM_TARGET_BOUND };
                uint32_t id = simulate__intern(c, pod->node_name);
                if (id < cap && slot_of[id] && land(c, i, slot_of[id] - 1) < 0)
                        return -ENOMEM;
        }
        return 0;
}

struct order {
        int64_t cpu, mem;
        uint32_t cls;
        size_t index;
};

static int cmp_order(const void *a, const void *b) {
        const struct order *x = a, *y = b;
        if (x->cpu != y->cpu)
                return x->cpu > y->cpu ? -1 : 1;
        if (x->mem != y->mem)
                return x->mem > y->mem ? -1 : 1;
        if (x->cls != y->cls)
                return x->cls < y->cls ? -1 : 1;
        return x->index < y->index ? -1 : x->index > y->index;
}

static int place_pending(struct ctx *c, struct sim_result *res) {
        size_t n = 0;
        struct order *o = calloc(c->in->n_pods + 1, sizeof *o);
        if (!o)
                return -ENOMEM;
        for (size_t i = 0; i < c->in->n_pods; i++) {
                const struct sim_pod *p = c->in->pods[i];
                if (!p->node_name)
                        o[n++] = (struct order){ p->requests.v[RESOURCE_CPU], p->requests.v[RESOURCE_MEMORY],
                                                 c->class_of_pod[i], i };
        }
        qsort(o, n, sizeof *o, cmp_order);
        int r = 0;
        for (size_t k = 0; k < n && r >= 0; k++) {
                r = place(c, o[k].index, &res->placements[o[k].index], res->arena);
                res->n_unplaced += r == 1;
                res->n_on_nodes += r == 0 && res->placements[o[k].index].target == SIM_TARGET_NODE;
        }
        free(o);
        return r < 0 ? r : 0;
}

/* The pools whose new nodes take some pod planned on each claim, as one bitset of n_pools bits per claim
 * (pools[k * words ...]); a class's answer per pool is asked once (class_pool: 0 unknown, 1 yes, -1 no). */
struct claim_pools {
        uint64_t *bits;
        int8_t *class_pool;
        size_t words;
};

static bool pools_has(const struct claim_pools *cp, size_t k, size_t pool) {
        return cp->bits[k * cp->words + pool / 64] >> (pool % 64) & 1;
}

static bool class_takes(struct ctx *c, struct claim_pools *cp, uint32_t cls, size_t pool) {
        int8_t *known = &cp->class_pool[(size_t)cls * c->n_pools + pool];
        if (*known == 0)
                *known = simulate__pool_compatible(c, &c->classes[cls], pool) ? 1 : -1;
        return *known > 0;
}

static int claim_pools_fill(struct ctx *c, struct claim_pools *cp) {
        cp->words = (c->n_pools + 63) / 64;
        cp->bits = calloc(c->n_claims * cp->words, sizeof *cp->bits);
        cp->class_pool = calloc(c->n_classes * c->n_pools, 1);
        if (!cp->bits || !cp->class_pool)
                return -ENOMEM;
        for (size_t k = 0; k < c->n_claims; k++)
                for (size_t pool = 0; pool < c->n_pools; pool++)
                        for (size_t j = 0; j < c->claims[k].n_pods && !pools_has(cp, k, pool); j++)
                                if (class_takes(c, cp, c->class_of_pod[c->claims[k].pods[j]], pool))
                                        cp->bits[k * cp->words + pool / 64] |= UINT64_C(1) << (pool % 64);
        return 0;
}

/* Must claim i's Node wait for claim k's? k is of another pool, a new node of i's pool takes some pod planned on
 * k, and no pod planned on i could go to k's pool. */
static bool waits_for(const struct ctx *c, const struct claim_pools *cp, size_t i, size_t k) {
        size_t pool = c->claims[i].pool, other = c->claims[k].pool;
        return other != pool && pools_has(cp, k, pool) && !pools_has(cp, i, other);
}

/* The claims of other pools whose pods claim i's pool takes too, when none of claim i's pods goes to theirs. */
static int claim_after(struct ctx *c, const struct claim_pools *cp, size_t i, struct sim_arena *ra,
                       struct sim_claim *out) {
        size_t n = 0;
        for (size_t k = 0; k < c->n_claims; k++)
                n += waits_for(c, cp, i, k);
        if (n == 0)
                return 0;
        out->after = simulate__arena_alloc(ra, n * sizeof(size_t));
        if (!out->after)
                return -ENOMEM;
        for (size_t k = 0; k < c->n_claims; k++)
                if (waits_for(c, cp, i, k))
                        out->after[out->n_after++] = k;
        return 0;
}

/* Do the claims of this round come from more than one pool? Only then may one wait for another. */
static bool claims_of_several_pools(const struct ctx *c) {
        for (size_t k = 1; k < c->n_claims; k++)
                if (c->claims[k].pool != c->claims[0].pool)
                        return true;
        return false;
}

static int build_claims(struct ctx *c, struct sim_result *res) {
        _cleanup_free_ uint64_t *bits = NULL;
        _cleanup_free_ int8_t *class_pool = NULL;
        struct claim_pools cp = { 0 };
        bool several = claims_of_several_pools(c);
        res->claims = simulate__arena_alloc(res->arena, (c->n_claims + 1) * sizeof(struct sim_claim));
        if (!res->claims)
                return -ENOMEM;
        if (several) {
                int r = claim_pools_fill(c, &cp);
                bits = cp.bits;
                class_pool = cp.class_pool;
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < c->n_claims; i++) {
                if (simulate__claim_result(c, i, res->arena, &res->claims[i]) < 0)
                        return -ENOMEM;
                if (several && claim_after(c, &cp, i, res->arena, &res->claims[i]) < 0)
                        return -ENOMEM;
        }
        res->n_claims = res->cap_claims = c->n_claims;
        return 0;
}

static void ctx_done(struct ctx *c) {
        for (size_t g = 0; g < c->n_groups; g++) {
                free(c->groups[g].node_cnt);
                free(c->groups[g].anti_node);
        }
        for (size_t i = 0; i < c->n_classes; i++)
                free(c->classes[i].slot_fail);
        for (size_t i = 0; i < c->n_slots; i++)
                free(c->slots[i].ports);
        for (size_t i = 0; i < c->n_claims; i++) {
                free(c->claims[i].reqs);
                free(c->claims[i].pods);
        }
        free(c->groups);
        free(c->classes);
        free(c->slots);
        free(c->claims);
        free(c->class_of_pod);
        free(c->group_of_sig);
        free(c->class_of_sig);
        free(c->selected_key);
        free(c->zone_ids);
        simulate__index_free(c);
        free(c->st.strs);
        free(c->st.slots);
        simulate__arena_free(c->arena);
}

int simulate_run(const struct sim_input *in, struct sim_result **ret_result) {
        struct ctx c = { .in = in, .arena = simulate__arena_new(), .only_zone = -1 };
        struct sim_result *res = calloc(1, sizeof *res);
        int r = -ENOMEM;
        if (!c.arena || !res || !(res->arena = simulate__arena_new()))
                goto out;
        res->placements = simulate__arena_alloc(res->arena, (in->n_pods + 1) * sizeof(struct sim_placement));
        res->n_placements = in->n_pods;
        if (!res->placements)
                goto out;
        r = simulate__compile(&c);
        if (r >= 0)
                r = place_bound(&c, res->placements);
        if (r >= 0)
                r = place_pending(&c, res);
        if (r >= 0)
                r = build_claims(&c, res);
        if (r >= 0 && c.error)
                r = c.error;
out:
        ctx_done(&c);
        if (r < 0) {
                simulate_result_free(res);
                return r;
        }
        *ret_result = res;
        return 0;
}

void simulate_result_free(struct sim_result *r) {
        if (!r)
                return;
        simulate__arena_free(r->arena);
        free(r);
}

/* ---- scale-down's guard ---- */

/* Pending pod i into ret[node] of every node that takes it as it is and has no earlier pod there yet. */
static void fit_pending(struct ctx *c, size_t i, size_t *ret) {
        const struct sim_pod *pod = c->in->pods[i];
        struct pclass *pc = &c->classes[c->class_of_pod[i]];
        int32_t mins[pc->n_spread + 1];
        if (pod->node_name || pc->unsupported)
                return;
        simulate__spread_mins(c, pc, false, mins);
        for (size_t s = 0; s < c->n_slots; s++) {
                size_t node = c->slots[s].index;
                if (ret[node] != SIZE_MAX || pc->slot_fail[s])
                        continue;
                enum fit f = slot_fits(c, pc, pod, s, mins, false);
                if (f == FIT_OK)
                        ret[node] = i;
                else if (permanent(f))
                        pc->slot_fail[s] = 1;
        }
}

int simulate_pending_fit(const struct sim_input *in, size_t *ret) {
        struct ctx c = { .in = in, .arena = simulate__arena_new(), .only_zone = -1 };
        int r = c.arena ? simulate__compile(&c) : -ENOMEM;
        for (size_t n = 0; n < in->n_nodes; n++)
                ret[n] = SIZE_MAX;
        if (r >= 0)
                r = place_bound(&c, NULL);
        for (size_t i = 0; r >= 0 && i < in->n_pods; i++)
                fit_pending(&c, i, ret);
        if (r >= 0 && c.error)
                r = c.error;
        ctx_done(&c);
        return r < 0 ? r : 0;
}
