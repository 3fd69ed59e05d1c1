/* disrupt_consolidate: consolidation: multi-node over the candidates of every pool (a binary search over a prefix
 * of them, cheapest to disrupt first, each pool's budget applied to its own, as Karpenter's), then single-node of
 * each pool (delete, or replace by one cheaper shape); a Balanced pool's moves scored, savings against disruption.
 * Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt_internal.h"

#define MSG DISRUPT_MESSAGE_MAX

/* Fewer pods to move first, then the dearer node, then the name. */
static int by_cost(const void *a, const void *b, void *arg) {
        const struct disrupt__ctx *sort_ctx = arg;
        size_t i = *(const size_t *)a, j = *(const size_t *)b;
        const struct disrupt_candidate *ci = &sort_ctx->in->candidates[i], *cj = &sort_ctx->in->candidates[j];
        if (sort_ctx->reschedulable[i] != sort_ctx->reschedulable[j])
                return sort_ctx->reschedulable[i] < sort_ctx->reschedulable[j] ? -1 : 1;
        if (ci->price != cj->price)
                return ci->price > cj->price ? -1 : 1;
        return strcmp(ci->claim, cj->claim);
}

/* The pool's candidates consolidation may take, appended to list; the others get their reason. None when the pool
 * has a decision, its policy is WhenEmpty, or its budgets allow no Underutilized disruption now. */
static size_t pool_eligible(struct disrupt__ctx *ctx, size_t pool, size_t *list) {
        const struct disrupt_pool *p = &ctx->in->pools[pool];
        size_t n = 0;
        char why[MSG];
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                if (!disrupt__open(ctx, pool, i) || ctx->reschedulable[i] == 0)
                        continue;
                if (disrupt__blocked(ctx, i, true, why, sizeof why))
                        disrupt__note(ctx, i, "not disrupted: %s", why);
                else
                        list[n++] = i;
        }
        if (n && p->policy == DISRUPT_WHEN_EMPTY)
                disrupt__say(why, sizeof why, "not disrupted: consolidationPolicy of pool %s is WhenEmpty", p->name);
        else if (n && disrupt__allowed(ctx, pool, DISRUPT_REASON_UNDERUTILIZED) <= 0)
                disrupt__say(why, sizeof why, "not disrupted: the budgets of pool %s allow no more Underutilized "
                             "disruptions now", p->name);
        else
                return n;
        for (size_t k = 0; k < n; k++)
                disrupt__note(ctx, list[k], "%s", why);
        return 0;
}

static double price_of(const struct disrupt__ctx *ctx, const size_t *list, size_t n) {
        double sum = 0;
        for (size_t k = 0; k < n; k++)
                sum += ctx->in->candidates[list[k]].price;
        return sum;
}

/* Karpenter's rule: every pod placed, at most one new node, and that one cheaper than what goes. */
static bool saves(const struct disrupt__trial *t, double price) {
        return t->all_placed && t->n_claims <= 1 && (t->n_claims == 0 || t->claims_price < price);
}

/* ---- Balanced: Karpenter's score of a move (designs/balanced-consolidation.md) ---- */

double disrupt_pod_cost(const struct disrupt_pod *p) {
        double c = 1.0 + p->cost_extra;
        c = c > 10.0 ? 10.0 : c;
        return c > 0.0 ? c : 0.0; /* the clamp to -10 ends at 0 for the score */
}

/* A node's disruption cost: 1 (so that an empty node costs something) plus its pods that would move. */
static double node_disruption(const struct disrupt_candidate *c) {
        double sum = 1.0;
        for (size_t k = 0; k < c->n_pods; k++)
                if (!(c->pods[k].flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR)))
                        sum += disrupt_pod_cost(&c->pods[k]);
        return sum;
}

struct balance {
        bool applies;                   /* a candidate's pool is Balanced */
        double savings, disruption;     /* fractions of the source pools' totals */
        double score;
};

static bool in_move(const struct disrupt__ctx *ctx, const size_t *list, size_t n, size_t pool) {
        for (size_t k = 0; k < n; k++)
                if (ctx->pool_of[list[k]] == pool)
                        return true;
        return false;
}

/* The move's savings and disruption as shares of its source pools' totals (every node of those pools: their cost,
 * their disruption), and the score: the one over the other. A move that saves nothing scores 0. */
static struct balance balance_of(const struct disrupt__ctx *ctx, const size_t *list, size_t n,
                                 const struct disrupt__trial *t) {
        struct balance b = { 0 };
        double cost = 0, disruption = 0, saved = 0, caused = 0;
        for (size_t k = 0; k < n; k++) {
                const struct disrupt_candidate *c = &ctx->in->candidates[list[k]];
                b.applies = b.applies || ctx->in->pools[ctx->pool_of[list[k]]].policy == DISRUPT_BALANCED;
                saved += c->price;
                caused += node_disruption(c);
        }
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                if (!in_move(ctx, list, n, ctx->pool_of[i]))
                        continue;
                cost += ctx->in->candidates[i].price;
                disruption += node_disruption(&ctx->in->candidates[i]);
        }
        saved -= t->n_claims ? t->claims_price : 0;
        b.savings = cost > 0 && saved > 0 ? saved / cost : 0;
        b.disruption = disruption > 0 ? caused / disruption : 1;
        b.score = b.disruption > 0 ? b.savings / b.disruption : 0;
        return b;
}

/* Karpenter's ConsolidationApproved/Rejected text, without the verdict. */
static void balance_text(const struct balance *b, char *buf, size_t len) {
        disrupt__say(buf, len, "score %.2f %s %.2f (Balanced: savings %.1f%%, disruption %.1f%%)", b->score,
                     b->score >= DISRUPT_BALANCED_MIN_SCORE ? ">=" : "<", DISRUPT_BALANCED_MIN_SCORE,
                     100 * b->savings, 100 * b->disruption);
}

static bool balanced_ok(const struct disrupt__ctx *ctx, const size_t *list, size_t n, const struct disrupt__trial *t) {
        struct balance b = balance_of(ctx, list, n, t);
        return !b.applies || b.score >= DISRUPT_BALANCED_MIN_SCORE;
}

/* A Balanced decision's message says its score: "...; score 3.33 >= 0.50 (Balanced: ...)". */
static void balance_note(struct disrupt__ctx *ctx, const size_t *list, size_t n, const struct disrupt__trial *t) {
        struct balance b = balance_of(ctx, list, n, t);
        struct disrupt_decision *d = &ctx->res->decisions[ctx->res->n_decisions - 1];
        char text[MSG / 2];
        size_t at = strlen(d->message);
        if (!b.applies)
                return;
        balance_text(&b, text, sizeof text);
        snprintf(d->message + at, MSG - at, "; %s", text);
}

static bool has_pool(const struct disrupt__ctx *ctx, const struct disrupt_decision *d, size_t pool) {
        for (size_t k = 0; k < d->n_candidates; k++)
                if (ctx->pool_of[d->candidates[k]] == pool)
                        return true;
        return false;
}

/* " of pools a, b" when the decision's candidates come from several pools, else "". */
static void pools_of(const struct disrupt__ctx *ctx, const struct disrupt_decision *d, char *buf, size_t len) {
        size_t n = 0, at = 0;
        buf[0] = '\0';
        for (size_t p = 0; p < ctx->in->n_pools && at < len; p++) {
                if (!has_pool(ctx, d, p))
                        continue;
                int w = snprintf(buf + at, len - at, "%s%s", n++ ? ", " : " of pools ", ctx->in->pools[p].name);
                at += w > 0 ? (size_t)w : 0;
        }
        if (n < 2)
                buf[0] = '\0';
}

static void consolidation_message(const struct disrupt__ctx *ctx, struct disrupt_decision *d,
                                  const struct disrupt__trial *t) {
        const char *name = ctx->in->candidates[d->candidates[0]].claim;
        char to[MSG - 64], pools[MSG / 2];
        if (t->n_claims)
                disrupt__say(to, sizeof to, "fit on one cheaper %s", t->claims[0]->name);
        else if (t->n_targets > 1)
                disrupt__say(to, sizeof to, "fit on %s and %zu other nodes", t->target, t->n_targets - 1);
        else
                disrupt__say(to, sizeof to, "fit on %s", t->target ? t->target : "the other nodes");
        pools_of(ctx, d, pools, sizeof pools);
        if (d->n_candidates > 1)
                disrupt__say(d->message, MSG, "Consolidation: %zu nodes%s into %zu, their %zu pods %s", d->n_candidates,
                             pools, t->n_claims, t->n_moved, to);
        else
                disrupt__say(d->message, MSG, "Consolidation: %s %s, its %zu pods %s",
                             t->n_claims ? "replace" : "delete", name, t->n_moved, to);
}

static int take(struct disrupt__ctx *ctx, size_t pool, enum disrupt_method m, const size_t *list, size_t n,
                const struct disrupt__trial *t) {
        struct disrupt_decision *d = disrupt__decide(ctx, pool, m, DISRUPT_REASON_UNDERUTILIZED, list, n);
        if (!d || disrupt__replacements(d, t) < 0)
                return -ENOMEM;
        consolidation_message(ctx, d, t);
        balance_note(ctx, list, n, t);
        return 1;
}

/* Karpenter's filterOutSameInstanceType: several nodes into one new node no cheaper than a removed node whose shape
 * holds as much (its own shape, say) is no better than deleting the others, which a smaller prefix or single-node
 * consolidation finds. */
static bool no_better_than_a_delete(const struct disrupt__ctx *ctx, const size_t *list, size_t n,
                                    const struct disrupt__trial *t) {
        static const struct resources none;
        for (size_t k = 0; t->n_claims == 1 && k < n; k++) {
                const struct disrupt_candidate *c = &ctx->in->candidates[list[k]];
                bool costs_no_less = c->price <= t->claims_price;
                if (costs_no_less && resources_fit(&t->claims[0]->allocatable, &none, &c->shape->allocatable))
                        return true;
        }
        return false;
}

/* Karpenter's firstNConsolidationOption: the longest prefix (2 to DISRUPT_MULTI_MAX_CANDIDATES) whose nodes go
 * together, found by a binary search. */
static int first_n(struct disrupt__ctx *ctx, const size_t *list, size_t n) {
        size_t lo = 2, hi = n < DISRUPT_MULTI_MAX_CANDIDATES ? n : DISRUPT_MULTI_MAX_CANDIDATES, best = 0;
        struct disrupt__trial t, kept = { 0 };
        while (lo <= hi) {
                size_t mid = (lo + hi) / 2;
                double price = price_of(ctx, list, mid);
                int rc = disrupt__trial(ctx, list, mid, &t);
                if (rc < 0)
                        return rc;
                disrupt__need_hosts(ctx, &t, price);
                if (saves(&t, price) && !no_better_than_a_delete(ctx, list, mid, &t) &&
                    balanced_ok(ctx, list, mid, &t)) {
                        best = mid;
                        kept = t;
                        lo = mid + 1;
                } else {
                        hi = mid - 1;
                }
        }
        return best ? take(ctx, ctx->pool_of[list[0]], DISRUPT_METHOD_MULTI_NODE, list, best, &kept) : 0;
}

/* Karpenter's multi-node consolidation: the candidates of every pool, cheapest to disrupt first; in that order each
 * pool's budget is charged by its own candidates and those over it stay out; then first_n. */
int disrupt__multi_node(struct disrupt__ctx *ctx) {
        size_t *list = malloc((ctx->in->n_candidates + 1) * sizeof *list), n = 0, m = 0;
        int64_t *left = calloc(ctx->in->n_pools + 1, sizeof *left);
        int rc = 0;
        for (size_t p = 0; list && left && p < ctx->in->n_pools; p++) {
                left[p] = disrupt__allowed(ctx, p, DISRUPT_REASON_UNDERUTILIZED);
                n += pool_eligible(ctx, p, list + n);
        }
        if (list && left) {
                qsort_r(list, n, sizeof *list, by_cost, ctx);
                for (size_t k = 0; k < n; k++)
                        if (left[ctx->pool_of[list[k]]]-- > 0)
                                list[m++] = list[k];
                rc = m >= 2 ? first_n(ctx, list, m) : 0;
        }
        rc = list && left ? rc : -ENOMEM;
        free(list);
        free(left);
        return rc;
}

/* A quick necessary condition: the pods fit the free room of the other nodes together, or the pool's node
 * class has a cheaper shape that holds them with the node's DaemonSet pods. */
static bool might_save(const struct disrupt__ctx *ctx, size_t i) {
        const struct disrupt_candidate *c = &ctx->in->candidates[i];
        struct resources moved = { 0 }, all = { 0 }, elsewhere = ctx->free_total;
        static const struct resources none;
        for (size_t k = 0; k < c->n_pods; k++) {
                if (!c->pods[k].sim)
                        continue;
                resources_add(&all, &c->pods[k].sim->requests);
                if (!(c->pods[k].flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR)))
                        resources_add(&moved, &c->pods[k].sim->requests);
        }
        if (!c->sim->unschedulable)
                resources_sub(&elsewhere, &ctx->free_room[i]);
        if (resources_fit(&moved, &none, &elsewhere))
                return true;
        for (size_t k = 0; k < ctx->in->sim->n_classes; k++) {
                const struct shape_catalog *cat = ctx->in->sim->classes[k]->shapes;
                for (size_t s = 0; cat && s < cat->n; s++) {
                        const struct shape *sh = &cat->items[s];
                        if (disrupt_price(sh) < c->price && resources_fit(&all, &none, &sh->allocatable))
                                return true;
                }
        }
        return false;
}

/* Karpenter's ConsolidationRejected: the move would save, but not enough for what it disrupts. */
static void balance_rejected(struct disrupt__ctx *ctx, size_t i, const struct disrupt__trial *t) {
        struct balance b = balance_of(ctx, &i, 1, t);
        char text[MSG / 2];
        balance_text(&b, text, sizeof text);
        disrupt__note(ctx, i, "not disrupted: a %s saves too little for its %zu pods: %s",
                      t->n_claims ? "replace" : "delete", ctx->reschedulable[i], text);
}

/* At most DISRUPT_SINGLE_MAX_TRIALS simulations, as Karpenter bounds this method by a timeout; with more
 * candidates the start rotates with the pass (now / the pass period), so every candidate gets its turn. */
static int single_node(struct disrupt__ctx *ctx, size_t pool, const size_t *list, size_t n) {
        int64_t period = ctx->in->pass_period_ms > 0 ? ctx->in->pass_period_ms : DISRUPT_PASS_PERIOD_MS;
        size_t first = n > DISRUPT_SINGLE_MAX_TRIALS ? (size_t)(ctx->in->now_ms / period) % n : 0;
        size_t tried = 0;
        struct disrupt__trial t;
        for (size_t k = 0; k < n; k++) {
                size_t i = list[(first + k) % n];
                bool may = tried < DISRUPT_SINGLE_MAX_TRIALS && might_save(ctx, i);
                int rc = may ? disrupt__trial(ctx, &i, 1, &t) : 0;
                if (rc < 0)
                        return rc;
                tried += may;
                if (may)
                        disrupt__need_hosts(ctx, &t, ctx->in->candidates[i].price);
                bool saving = may && saves(&t, ctx->in->candidates[i].price);
                if (saving && balanced_ok(ctx, &i, 1, &t))
                        return take(ctx, pool, DISRUPT_METHOD_SINGLE_NODE, &i, 1, &t);
                if (saving)
                        balance_rejected(ctx, i, &t);
                if (may && t.uninitialized)
                        disrupt__note(ctx, i, "not disrupted: its pods %s", t.unplaced_reason);
                if (tried >= DISRUPT_SINGLE_MAX_TRIALS && !may)
                        disrupt__note(ctx, i, "not disrupted: not tried this pass (at most %d single-node "
                                      "consolidation simulations a pass)", DISRUPT_SINGLE_MAX_TRIALS);
                disrupt__note(ctx, i, "not disrupted: its %zu pods fit neither on the other nodes nor on one "
                              "cheaper shape", ctx->reschedulable[i]);
        }
        return 0;
}

int disrupt__single_node(struct disrupt__ctx *ctx, size_t pool) {
        size_t *list = malloc((ctx->in->n_candidates + 1) * sizeof *list), n;
        if (!list)
                return -ENOMEM;
        n = pool_eligible(ctx, pool, list);
        qsort_r(list, n, sizeof *list, by_cost, ctx);
        int rc = single_node(ctx, pool, list, n);
        free(list);
        return rc;
}
