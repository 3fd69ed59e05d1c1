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
                disrupt__say(buf, len, "fit on a new %s%s", t->claims[0]->name, t->n_targets ? " and the other nodes" : "");
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
                disrupt__say(d->message, MSG, "Emptiness: delete %zu nodes, no pods but DaemonSet pods for %s or more", n,
                         after);
        return d ? 1 : 0;
}

/* ---- drift ---- */

static const char *class_hash(const struct disrupt__ctx *ctx, const char *name) {
        for (size_t k = 0; name && k < ctx->in->n_classes; k++)
                if (strcmp(ctx->in->classes[k].name, name) == 0)
                        return ctx->in->classes[k].hash;
        return NULL;
}

/* Has the claim drifted? The message says from what. */
static bool drifted(const struct disrupt__ctx *ctx, size_t i, char *what, size_t len) {
        const struct disrupt_candidate *c = cand(ctx, i);
        const struct disrupt_pool *p = &ctx->in->pools[ctx->pool_of[i]];
        const char *h = class_hash(ctx, c->nodeclass);
        if (c->nodepool_hash && strcmp(c->nodepool_hash, p->hash) != 0)
                disrupt__say(what, len, "NodePool %s changed since launch", p->name);
        else if (c->nodeclass_hash && h && strcmp(c->nodeclass_hash, h) != 0)
                disrupt__say(what, len, "ProxmoxNodeClass %s changed since launch", c->nodeclass);
        else
                return false;
        return true;
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
                disrupt__say(msg, sizeof msg, "Expiry: %s%screated %s ago, expireAfter is %s", n > 1 ? "the oldest of " : "",
                         n > 1 ? "these nodes " : "", disrupt__human(now - cand(ctx, list[0])->created_ms, a, 32),
                         disrupt__human(after, b, 32));
                rc = forceful(ctx, pool, DISRUPT_METHOD_EXPIRY, DISRUPT_REASON_EXPIRED, list, n, msg);
        }
        free(list);
        return rc;
}

static bool unhealthy(const struct disrupt__ctx *ctx, size_t i) {
        const struct disrupt_candidate *c = cand(ctx, i);
        return c->ready != DISRUPT_READY_TRUE && ctx->in->now_ms - c->ready_since_ms >= DISRUPT_REPAIR_AFTER_MS;
}

int disrupt__repair(struct disrupt__ctx *ctx, size_t pool) {
        size_t nodes = 0, deleting = 0, pick = SIZE_MAX;
        char msg[MSG], a[32];
        for (size_t i = 0; ctx->in->repair && i < ctx->in->n_candidates; i++) {
                if (ctx->pool_of[i] != pool)
                        continue;
                nodes++;
                deleting += cand(ctx, i)->deleting;
                if (pick == SIZE_MAX && disrupt__open(ctx, pool, i) && !cand(ctx, i)->deleting && unhealthy(ctx, i))
                        pick = i;
        }
        if (pick == SIZE_MAX)
                return 0;
        if ((deleting + 1) * 100 > ((nodes * DISRUPT_REPAIR_MAX_PERCENT + 99) / 100) * 100) {
                disrupt__note(ctx, pick, "not repaired: %zu of the %zu nodes of pool %s are being disrupted, repair "
                              "takes at most 20%% at once", deleting, nodes, ctx->in->pools[pool].name);
                return 0;
        }
        disrupt__say(msg, sizeof msg, "Repair: Ready is %s for %s (15m or more)",
                 cand(ctx, pick)->ready == DISRUPT_READY_FALSE ? "False" : "Unknown",
                 disrupt__human(ctx->in->now_ms - cand(ctx, pick)->ready_since_ms, a, sizeof a));
        return forceful(ctx, pool, DISRUPT_METHOD_REPAIR, DISRUPT_REASON_UNHEALTHY, &pick, 1, msg);
}
