/* disrupt: one disruption pass: for every pool, the methods in Karpenter's order until one decides; then multi-node
 * consolidation over the pools still open, and single-node consolidation of each pool still open. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>

#include "disrupt_internal.h"

typedef int (*method_fn)(struct disrupt__ctx *ctx, size_t pool);

/* Karpenter's order: emptiness, drift (then our forceful expiry and repair, which Karpenter runs in their own
 * controllers), then consolidation (disrupt_decide). */
static const method_fn METHODS[] = {
        disrupt__emptiness, disrupt__drift, disrupt__expiry, disrupt__repair,
};

static int one_pool(struct disrupt__ctx *ctx, size_t pool) {
        for (size_t m = 0; m < sizeof METHODS / sizeof METHODS[0]; m++) {
                int rc = METHODS[m](ctx, pool);
                if (rc != 0)
                        return rc < 0 ? rc : 0;
        }
        return 0;
}

/* Candidates of a pool that decided this pass wait for the next one. */
static void note_decided(struct disrupt__ctx *ctx) {
        for (size_t i = 0; i < ctx->in->n_candidates; i++)
                if (!ctx->taken[i] && ctx->pool_decided[ctx->pool_of[i]])
                        disrupt__note(ctx, i, "not disrupted: pool %s has a decision this pass (one at a time)",
                                      ctx->in->pools[ctx->pool_of[i]].name);
}

static int all_pools(struct disrupt__ctx *ctx) {
        int rc = 0;
        for (size_t p = 0; rc >= 0 && p < ctx->in->n_pools; p++)
                rc = one_pool(ctx, p);
        if (rc >= 0)
                rc = disrupt__multi_node(ctx);
        for (size_t p = 0; rc >= 0 && p < ctx->in->n_pools; p++)
                rc = ctx->pool_decided[p] ? 0 : disrupt__single_node(ctx, p);
        return rc < 0 ? rc : 0;
}

int disrupt_decide(const struct disrupt_input *in, struct disrupt_result **ret) {
        struct disrupt__ctx ctx;
        int rc = disrupt__ctx_init(&ctx, in);
        if (rc == 0)
                rc = all_pools(&ctx);
        if (rc == 0) {
                note_decided(&ctx);
                disrupt__finish(&ctx);
                *ret = ctx.res;
                ctx.res = NULL;
        }
        disrupt__ctx_done(&ctx);
        return rc;
}
