/* disrupt_methods: the disruption methods, each for one pool: emptiness, drift, expiry, repair and
 * consolidation (multi-node, then single-node delete or replace). Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt_internal.h"

#define MSG DISRUPT_MESSAGE_MAX

static const struct disrupt_candidate *cand(const struct disrupt__ctx *ctx, size_t i) {
        return &ctx->in->candidates[i];
}

static void note_budget(struct disrupt__ctx *ctx, size_t i, size_t pool, enum disrupt_reason r) {
        disrupt__note(ctx, i, "not disrupted: the budgets of pool %s allow no more %s disruptions now",
                      ctx->in->pools[pool].name, disrupt_reason_name(r));
}

/* Where the moved pods go, for a message: "fit on node-b", "fit on node-b and 2 other nodes". */
static void where(const struct disrupt__trial *t, char *buf, size_t len) {
        if (t->n_claims > 0)
                disrupt__say(buf, len, "fit on a new %s%s", t->claims[0]->name,
                             t->n_targets ? " and the other nodes" : "");
        else if (t->n_targets > 1)
                disrupt__say(buf, len, "fit on %s and %zu other nodes", t->target, t->n_targets - 1);
        else
                disrupt__say(buf, len, "fit on %s", t->target ? t->target : "the other nodes");
}

/* ---- emptiness ---- */

int disrupt__emptiness(struct disrupt__ctx *ctx, size_t pool) {
        int64_t allowed = disrupt__allowed(ctx, pool, DISRUPT_REASON_EMPTY);
        size_t *list = malloc((ctx->in->n_candidates + 1) * sizeof *list), n = 0;
        char why[MSG], after[32];
        if (!list)
                return -ENOMEM;
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                if (!disrupt__open(ctx, pool, i) || ctx->reschedulable[i] > 0)
                        continue;
                if (disrupt__blocked(ctx, i, true, why, sizeof why))
                        disrupt__note(ctx, i, "not disrupted: empty, but %s", why);
                else if ((int64_t)n >= allowed)
                        note_budget(ctx, i, pool, DISRUPT_REASON_EMPTY);
                else
                        list[n++] = i;
        }
        struct disrupt_decision *d =
                n ? disrupt__decide(ctx, pool, DISRUPT_METHOD_EMPTINESS, DISRUPT_REASON_EMPTY, list, n) : NULL;
        free(list);
        if (n && !d)
                return -ENOMEM;
        disrupt__human(ctx->in->pools[pool].consolidate_after_ms, after, sizeof after);
        if (d && n == 1)
                disrupt__say(d->message, MSG, "Emptiness: delete, no pods but DaemonSet pods for %s or more", after);
        else if (d)
                disrupt__say(d->message, MSG,
                             "Emptiness: delete %zu nodes, no pods but DaemonSet pods for %s or more", n, after);
        return d ? 1 : 0;
}

/* ---- drift ---- */

/* Has the claim drifted (disrupt_drift.c)? The message says from what. */
static bool drifted(const struct disrupt__ctx *ctx, size_t i, char *what, size_t len) {
        return disrupt_drift_of(ctx->in, i, what, len) != DISRUPT_DRIFT_NONE;
}

static int drift_one(struct disrupt__ctx *ctx, size_t pool, size_t i, const char *what) {
        struct disrupt__trial t;
        char to[MSG];
        int rc = disrupt__trial(ctx, &i, 1, &t);
        if (rc < 0)
                return rc;
        disrupt__need_hosts(ctx, &t, HUGE_VAL);
        if (!t.all_placed) {
                disrupt__note(ctx, i, "not disrupted: drifted (%s), but its pods fit nowhere: %s", what,
                              t.unplaced_reason[0] ? t.unplaced_reason : "too many new nodes");
                return 0;
        }
        struct disrupt_decision *d = disrupt__decide(ctx, pool, DISRUPT_METHOD_DRIFT, DISRUPT_REASON_DRIFTED, &i, 1);
        if (!d || disrupt__replacements(d, &t) < 0)
                return -ENOMEM;
        where(&t, to, sizeof to);
        disrupt__say(d->message, MSG, "Drift: %s; %s, its %zu pods %s", what, t.n_claims ? "replace" : "delete",
                 t.n_moved, to);
        return 1;
}

int disrupt__drift(struct disrupt__ctx *ctx, size_t pool) {
        char what[MSG], why[MSG];
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                if (!disrupt__open(ctx, pool, i) || !drifted(ctx, i, what, sizeof what))
                        continue;
                if (disrupt__blocked(ctx, i, false, why, sizeof why)) {
                        disrupt__note(ctx, i, "not disrupted: drifted (%s), but %s", what, why);
                        continue;
                }
                if (disrupt__allowed(ctx, pool, DISRUPT_REASON_DRIFTED) <= 0) {
                        note_budget(ctx, i, pool, DISRUPT_REASON_DRIFTED);
                        continue;
                }
                int rc = drift_one(ctx, pool, i, what);
                if (rc != 0)
                        return rc;
        }
        return 0;
}

/* ---- expiry and repair: forceful, as in Karpenter: no budgets, no do-not-disrupt ---- */

static int forceful(struct disrupt__ctx *ctx, size_t pool, enum disrupt_method m, enum disrupt_reason r,
                    const size_t *list, size_t n, const char *message) {
        struct disrupt__trial t;
        int rc = disrupt__trial(ctx, list, n, &t);
        if (rc < 0)
                return rc;
        disrupt__need_hosts(ctx, &t, HUGE_VAL);
        struct disrupt_decision *d = disrupt__decide(ctx, pool, m, r, list, n);
        if (!d || disrupt__replacements(d, &t) < 0)
                return -ENOMEM;
        disrupt__say(d->message, MSG, "%s", message);
        return 1;
}

int disrupt__expiry(struct disrupt__ctx *ctx, size_t pool) {
        int64_t after = ctx->in->pools[pool].expire_after_ms, now = ctx->in->now_ms;
        size_t *list = malloc((ctx->in->n_candidates + 1) * sizeof *list), n = 0;
        char msg[MSG], a[32], b[32];
        int rc = 0;
        if (!list)
                return -ENOMEM;
        for (size_t i = 0; after >= 0 && i < ctx->in->n_candidates; i++)
                if (disrupt__open(ctx, pool, i) && !cand(ctx, i)->deleting && now >= cand(ctx, i)->created_ms + after)
                        list[n++] = i;
        if (n > 0) {
                bool several = n > 1;
                disrupt__say(msg, sizeof msg, "Expiry: %s%screated %s ago, expireAfter is %s",
                             several ? "the oldest of " : "", several ? "these nodes " : "",
                             disrupt__human(now - cand(ctx, list[0])->created_ms, a, 32), disrupt__human(after, b, 32));
                rc = forceful(ctx, pool, DISRUPT_METHOD_EXPIRY, DISRUPT_REASON_EXPIRED, list, n, msg);
        }
        free(list);
        return rc;
}

static int64_t repair_after(const struct disrupt__ctx *ctx) {
        return ctx->in->repair_after_ms > 0 ? ctx->in->repair_after_ms : DISRUPT_REPAIR_AFTER_MS;
}

/* Not Ready for the repair period: to be repaired. */
static bool unhealthy(const struct disrupt__ctx *ctx, size_t i) {
        const struct disrupt_candidate *c = cand(ctx, i);
        return c->ready != DISRUPT_READY_TRUE && ctx->in->now_ms - c->ready_since_ms >= repair_after(ctx);
}

/* As Karpenter's node health controller: a pool with more nodes not Ready (for however long) than 20 % of its nodes,
 * rounded up, is left alone, lest a cluster-wide fault (the network, the API server) have its nodes replaced one by
 * one; each node due for repair is told why. */
static bool pool_too_unhealthy(struct disrupt__ctx *ctx, size_t pool) {
        size_t nodes = 0, not_ready = 0;
        for (size_t i = 0; i < ctx->in->n_candidates; i++) {
                if (ctx->pool_of[i] != pool)
                        continue;
                nodes++;
                not_ready += cand(ctx, i)->ready != DISRUPT_READY_TRUE;
        }
        if (not_ready <= (nodes * DISRUPT_REPAIR_MAX_PERCENT + 99) / 100)
                return false;
        for (size_t i = 0; i < ctx->in->n_candidates; i++)
                if (disrupt__open(ctx, pool, i) && !cand(ctx, i)->deleting && unhealthy(ctx, i))
                        disrupt__note(ctx, i, "not repaired: %zu of the %zu nodes of pool %s are not Ready, repair "
                                      "acts only while at most %d%% are", not_ready, nodes,
                                      ctx->in->pools[pool].name, DISRUPT_REPAIR_MAX_PERCENT);
        return true;
}

int disrupt__repair(struct disrupt__ctx *ctx, size_t pool) {
        size_t pick = SIZE_MAX;
        char msg[MSG], a[32], b[32];
        for (size_t i = 0; ctx->in->repair && i < ctx->in->n_candidates && pick == SIZE_MAX; i++)
                if (disrupt__open(ctx, pool, i) && !cand(ctx, i)->deleting && unhealthy(ctx, i))
                        pick = i;
        if (pick == SIZE_MAX || pool_too_unhealthy(ctx, pool))
                return 0;
        disrupt__say(msg, sizeof msg, "Repair: Ready is %s for %s (%s or more)",
                 cand(ctx, pick)->ready == DISRUPT_READY_FALSE ? "False" : "Unknown",
                 disrupt__human(ctx->in->now_ms - cand(ctx, pick)->ready_since_ms, a, sizeof a),
                 disrupt__human(repair_after(ctx), b, sizeof b));
        return forceful(ctx, pool, DISRUPT_METHOD_REPAIR, DISRUPT_REASON_UNHEALTHY, &pick, 1, msg);
}
