/* disrupt_state: one pass's context: per-candidate facts, budgets, the safety rules that keep a candidate
 * where it is, and the result's decisions and skips. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt_internal.h"

static int by_name(const void *a, const void *b) {
        return strcmp((*(struct sim_node *const *)a)->name, (*(struct sim_node *const *)b)->name);
}

static struct sim_node *node_named(struct sim_node **sorted, size_t n, const char *name) {
        struct sim_node key = { .name = name }, *k = &key, **hit;
        hit = name ? bsearch(&k, sorted, n, sizeof *sorted, by_name) : NULL;
        return hit ? *hit : NULL;
}

/* Free room over every node that takes pods: allocatable - reserved - what its bound pods request. */
static int free_total(struct disrupt__ctx *ctx) {
        const struct sim_input *s = ctx->in->sim;
        struct sim_node **sorted = malloc((s->n_nodes + 1) * sizeof *sorted);
        if (!sorted)
                return -ENOMEM;
        if (s->n_nodes) { /* no nodes: s->nodes may be NULL, which memcpy and qsort must not get */
                memcpy(sorted, s->nodes, s->n_nodes * sizeof *sorted);
                qsort(sorted, s->n_nodes, sizeof *sorted, by_name);
        }
        for (size_t i = 0; i < s->n_nodes; i++)
                if (!s->nodes[i]->unschedulable) {
                        resources_add(&ctx->free_total, &s->nodes[i]->allocatable);
                        resources_sub(&ctx->free_total, &s->nodes[i]->reserved);
                }
        for (size_t i = 0; i < ctx->n_bound; i++) {
                struct sim_node *n = node_named(sorted, s->n_nodes, ctx->bound[i]->node_name);
                if (n && !n->unschedulable)
                        resources_sub(&ctx->free_total, &ctx->bound[i]->requests);
        }
        free(sorted);
        return 0;
}

static int find_pool(const struct disrupt_input *in, const char *name, size_t *ret) {
        for (size_t p = 0; name && p < in->n_pools; p++)
                if (strcmp(in->pools[p].name, name) == 0) {
                        *ret = p;
                        return 0;
                }
        return -EINVAL;
}

static int candidate_facts(struct disrupt__ctx *ctx, size_t i) {
        struct disrupt_candidate *c = &ctx->in->candidates[i];
        if (!c->shape || !c->sim || find_pool(ctx->in, c->pool, &ctx->pool_of[i]) < 0)
                return -EINVAL;
        ctx->free_room[i] = c->sim->allocatable;
        resources_sub(&ctx->free_room[i], &c->sim->reserved);
        for (size_t k = 0; k < c->n_pods; k++) {
                if (c->pods[k].sim)
                        resources_sub(&ctx->free_room[i], &c->pods[k].sim->requests);
                if (!(c->pods[k].flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR)))
                        ctx->reschedulable[i]++;
        }
        return 0;
}

static int split_pods(struct disrupt__ctx *ctx) {
        const struct sim_input *s = ctx->in->sim;
        ctx->bound = calloc(s->n_pods + 1, sizeof *ctx->bound);
        ctx->pending = calloc(s->n_pods + 1, sizeof *ctx->pending);
        ctx->pod_kinds = calloc(s->n_pods + 1, sizeof *ctx->pod_kinds);
        if (!ctx->bound || !ctx->pending || !ctx->pod_kinds)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_pods; i++) {
                if (s->pods[i]->node_name)
                        ctx->bound[ctx->n_bound++] = s->pods[i];
                else
                        ctx->pending[ctx->n_pending++] = s->pods[i];
        }
        return 0;
}

struct node_at {
        const struct sim_node *node;
        size_t index;
};

static int by_address(const void *a, const void *b) {
        uintptr_t x = (uintptr_t)((const struct node_at *)a)->node, y = (uintptr_t)((const struct node_at *)b)->node;
        return x < y ? -1 : x > y;
}

/* The guard's facts, once a pass: per candidate, the first pending pod that could schedule on it now, by the
 * scheduling simulation's predicates (simulate_pending_fit). Only when pods are pending. */
static int pending_fit(struct disrupt__ctx *ctx) {
        const struct sim_input *s = ctx->in->sim;
        size_t *per_node = calloc(s->n_nodes + 1, sizeof *per_node);
        struct node_at *at = calloc(s->n_nodes + 1, sizeof *at);
        int r = per_node && at ? 0 : -ENOMEM;
        ctx->pending_fit = calloc(ctx->in->n_candidates + 1, sizeof *ctx->pending_fit);
        if (r == 0 && ctx->pending_fit)
                r = simulate_pending_fit(s, per_node);
        for (size_t n = 0; r == 0 && n < s->n_nodes; n++)
                at[n] = (struct node_at){ s->nodes[n], n };
        if (r == 0 && s->n_nodes)
                qsort(at, s->n_nodes, sizeof *at, by_address);
        for (size_t i = 0; r == 0 && ctx->pending_fit && i < ctx->in->n_candidates; i++) {
                struct node_at key = { ctx->in->candidates[i].sim, 0 };
                const struct node_at *hit = s->n_nodes ? bsearch(&key, at, s->n_nodes, sizeof *at, by_address) : NULL;
                ctx->pending_fit[i] = hit ? per_node[hit->index] : SIZE_MAX;
        }
        free(per_node);
        free(at);
        return ctx->pending_fit ? r : -ENOMEM;
}

/* A topology spread over zones that is DoNotSchedule: whether the pod fits a node depends on every zone that is a
 * domain, and hosts with room add theirs. */
static bool hard_zone_spread(const struct sim_pod *p) {
        for (size_t k = 0; k < p->n_spread; k++)
                if (p->spread[k].do_not_schedule && p->spread[k].topology_key &&
                    strcmp(p->spread[k].topology_key, SIM_LABEL_ZONE) == 0)
                        return true;
        return false;
}

/* Without host room, a pending pod whose spread counts zones may fit a node or not depending on the zones the hosts
 * add as domains: the guard then needs the hosts. */
static void guard_hosts(struct disrupt__ctx *ctx) {
        for (size_t k = 0; ctx->in->hosts_unknown && k < ctx->n_pending; k++)
                if (!ctx->pending[k]->unschedulable_reason && hard_zone_spread(ctx->pending[k]))
                        ctx->res->needs_hosts = true;
}

int disrupt__ctx_init(struct disrupt__ctx *ctx, const struct disrupt_input *in) {
        size_t n = in->n_candidates + 1;
        *ctx = (struct disrupt__ctx){ .in = in };
        ctx->res = calloc(1, sizeof *ctx->res);
        ctx->pool_of = calloc(n, sizeof *ctx->pool_of);
        ctx->taken = calloc(n, sizeof *ctx->taken);
        ctx->free_room = calloc(n, sizeof *ctx->free_room);
        ctx->reschedulable = calloc(n, sizeof *ctx->reschedulable);
        ctx->notes = calloc(n, sizeof *ctx->notes);
        ctx->pool_decided = calloc(in->n_pools + 1, sizeof *ctx->pool_decided);
        if (!ctx->res || !ctx->notes || !ctx->pool_of || !ctx->taken || !ctx->free_room || !ctx->reschedulable ||
            !ctx->pool_decided)
                return -ENOMEM;
        ctx->res->decisions = calloc(in->n_pools + 1, sizeof *ctx->res->decisions);
        ctx->res->skips = calloc(n, sizeof *ctx->res->skips);
        if (!ctx->res->decisions || !ctx->res->skips || !in->sim || split_pods(ctx) < 0)
                return in->sim ? -ENOMEM : -EINVAL;
        for (size_t i = 0; i < in->n_candidates; i++)
                if (candidate_facts(ctx, i) < 0)
                        return -EINVAL;
        int r = ctx->n_pending && in->n_candidates ? pending_fit(ctx) : 0;
        if (in->n_candidates)
                guard_hosts(ctx);
        return r < 0 ? r : free_total(ctx);
}

void disrupt__ctx_done(struct disrupt__ctx *ctx) {
        free(ctx->pool_of);
        free(ctx->taken);
        free(ctx->free_room);
        free(ctx->reschedulable);
        free(ctx->notes);
        free(ctx->bound);
        free(ctx->pod_kinds);
        free(ctx->pending);
        free(ctx->pending_fit);
        free(ctx->pool_decided);
        disrupt_result_free(ctx->res);
        *ctx = (struct disrupt__ctx){ 0 };
}

/* ---- budgets ---- */

int64_t disrupt__allowed(const struct disrupt__ctx *ctx, size_t pool, enum disrupt_reason reason) {
        const struct disrupt_pool *p = &ctx->in->pools[pool];
        int64_t nodes = 0, disrupting = 0, allowed = INT64_MAX;
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                const struct disrupt_candidate *c = &ctx->in->candidates[i];
                if (ctx->pool_of[i] != pool || c->initialized_ms == 0)
                        continue;
                nodes++;
                disrupting += c->deleting || c->ready != DISRUPT_READY_TRUE;
        }
        for (size_t b = 0; b < p->n_budgets; b++) {
                const struct disrupt_budget *bu = &p->budgets[b];
                if ((bu->reasons && !(bu->reasons >> reason & 1)) || !disrupt_budget_active(bu, ctx->in->now_ms))
                        continue;
                int64_t v = bu->percent ? (bu->nodes * nodes + 99) / 100 : bu->nodes;
                allowed = v < allowed ? v : allowed;
        }
        if (allowed == INT64_MAX)
                return allowed;
        return allowed > disrupting ? allowed - disrupting : 0;
}

/* ---- the safety rules ---- */

const char *disrupt__human(int64_t ms, char *buf, size_t len) {
        int64_t s = ms / 1000;
        if (s < 120)
                snprintf(buf, len, "%" PRId64 "s", s);
        else if (s < 2 * 3600)
                snprintf(buf, len, "%" PRId64 "m", s / 60);
        else
                snprintf(buf, len, "%" PRId64 "h", s / 3600);
        return buf;
}

static bool pod_blocks(const struct disrupt_pod *p, char *why, size_t len) {
        if (p->flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR))
                return false;
        if (p->flags & DISRUPT_POD_DO_NOT_DISRUPT)
                snprintf(why, len, "pod %s/%s is annotated do-not-disrupt", p->namespace, p->name);
        else if (p->flags & DISRUPT_POD_NOT_SAFE_TO_EVICT)
                snprintf(why, len, "pod %s/%s is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: false",
                         p->namespace, p->name);
        else if (p->blocking_pdb)
                snprintf(why, len, "pdb %s allows 0 evictions (pod %s/%s)", p->blocking_pdb, p->namespace, p->name);
        return *why != '\0';
}

static bool too_young(const struct disrupt__ctx *ctx, size_t i, bool consolidation, char *why, size_t len) {
        const struct disrupt_candidate *c = &ctx->in->candidates[i];
        int64_t after = ctx->in->pools[ctx->pool_of[i]].consolidate_after_ms, now = ctx->in->now_ms;
        char a[32], b[32];
        if (after < 0 && consolidation)
                snprintf(why, len, "consolidateAfter is Never");
        else if (after >= 0 && now < c->initialized_ms + after)
                snprintf(why, len, "initialized %s ago, consolidateAfter is %s",
                         disrupt__human(now - c->initialized_ms, a, 32), disrupt__human(after, b, 32));
        else if (after >= 0 && consolidation && now < c->last_pod_event_ms + after)
                snprintf(why, len, "a pod came or went %s ago, consolidateAfter is %s",
                         disrupt__human(now - c->last_pod_event_ms, a, 32), disrupt__human(after, b, 32));
        return *why != '\0';
}

bool disrupt__blocked(const struct disrupt__ctx *ctx, size_t i, bool consolidation, char *why, size_t len) {
        const struct disrupt_candidate *c = &ctx->in->candidates[i];
        *why = '\0';
        if (c->deleting)
                snprintf(why, len, "already being disrupted");
        else if (c->initialized_ms == 0)
                snprintf(why, len, "not initialized yet");
        else if (c->do_not_disrupt)
                snprintf(why, len, "the node is annotated do-not-disrupt");
        for (size_t k = 0; !*why && k < c->n_pods; k++)
                pod_blocks(&c->pods[k], why, len);
        if (!*why && too_young(ctx, i, consolidation, why, len))
                return true;
        if (!*why && ctx->pending_fit && ctx->pending_fit[i] != SIZE_MAX) {
                const struct sim_pod *p = ctx->in->sim->pods[ctx->pending_fit[i]];
                snprintf(why, len, "pending pod %s/%s could schedule on it", p->namespace, p->name);
        }
        return *why != '\0';
}

/* ---- the result ---- */

void disrupt__say(char *buf, size_t len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, len, fmt, ap);
        va_end(ap);
}

void disrupt__note(struct disrupt__ctx *ctx, size_t i, const char *fmt, ...) {
        va_list ap;
        if (ctx->notes[i][0])
                return;
        va_start(ap, fmt);
        vsnprintf(ctx->notes[i], sizeof ctx->notes[i], fmt, ap);
        va_end(ap);
}

bool disrupt__open(const struct disrupt__ctx *ctx, size_t pool, size_t i) {
        return ctx->pool_of[i] == pool && !ctx->taken[i] && !ctx->pool_decided[pool];
}

void disrupt__finish(struct disrupt__ctx *ctx) {
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                struct disrupt_skip *s = &ctx->res->skips[ctx->res->n_skips];
                if (ctx->taken[i])
                        continue;
                s->candidate = i;
                if (ctx->notes[i][0])
                        memcpy(s->message, ctx->notes[i], sizeof s->message);
                else
                        snprintf(s->message, sizeof s->message, "not disrupted: no method applies");
                ctx->res->n_skips++;
        }
}

struct disrupt_decision *disrupt__decide(struct disrupt__ctx *ctx, size_t pool, enum disrupt_method m,
                                         enum disrupt_reason r, const size_t *cands, size_t n) {
        struct disrupt_decision *d = &ctx->res->decisions[ctx->res->n_decisions];
        *d = (struct disrupt_decision){ .method = m, .reason = r, .pool = pool };
        d->candidates = malloc((n + 1) * sizeof *d->candidates);
        if (!d->candidates)
                return NULL;
        memcpy(d->candidates, cands, n * sizeof *cands);
        d->n_candidates = n;
        for (size_t k = 0; k < n; k++) {
                ctx->taken[cands[k]] = true;
                ctx->pool_decided[ctx->pool_of[cands[k]]] = true;
        }
        ctx->res->n_decisions++;
        return d;
}

int disrupt__replacements(struct disrupt_decision *d, const struct disrupt__trial *t) {
        if (t->n_claims == 0)
                return 0;
        d->replacements = malloc(t->n_claims * sizeof *d->replacements);
        if (!d->replacements)
                return -ENOMEM;
        memcpy(d->replacements, t->claims, t->n_claims * sizeof *t->claims);
        d->n_replacements = t->n_claims;
        return 0;
}

void disrupt_result_free(struct disrupt_result *r) {
        if (!r)
                return;
        for (size_t i = 0; i < r->n_decisions; i++) {
                free(r->decisions[i].candidates);
                free(r->decisions[i].replacements);
        }
        free(r->decisions);
        free(r->skips);
        free(r);
}
