/* disrupt_trial: would the pods of these nodes go elsewhere? The scheduling simulation the provisioner uses, run
 * with the nodes cordoned and their pods pending, and the input put back as it was. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt_internal.h"

static bool moves(const struct disrupt_pod *p) {
        return p->sim && !(p->flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR));
}

/* Cordon the nodes and make their pods pending (off = false), or put them back (off = true). */
static void cordon(struct disrupt__ctx *ctx, const size_t *cands, size_t n, bool *saved, bool undo) {
        for (size_t k = 0; k < n; k++) {
                struct disrupt_candidate *c = &ctx->in->candidates[cands[k]];
                if (undo)
                        c->sim->unschedulable = saved[k];
                else
                        saved[k] = c->sim->unschedulable, c->sim->unschedulable = true;
                for (size_t p = 0; p < c->n_pods; p++)
                        if (moves(&c->pods[p]))
                                c->pods[p].sim->node_name = undo ? c->sim->name : NULL;
        }
}

static void note_target(struct disrupt__trial *t, const struct sim_node *n) {
        if (t->target && strcmp(t->target, n->name) == 0)
                return;
        if (!t->target)
                t->target = n->name;
        t->n_targets++;
}

/* What the simulation did with the moved pods (the only pending ones in the trial). */
static void read_result(const struct sim_input *s, const struct sim_result *r, struct disrupt__trial *t) {
        t->all_placed = true;
        for (size_t i = 0; i < r->n_placements; i++) {
                const struct sim_placement *pl = &r->placements[i];
                if (pl->target == SIM_TARGET_BOUND)
                        continue;
                t->n_moved++;
                if (pl->target == SIM_TARGET_NODE)
                        note_target(t, s->nodes[pl->index]);
                else if (pl->target == SIM_TARGET_UNPLACED && t->all_placed) {
                        t->all_placed = false;
                        t->unplaced_reason = pl->reason;
                }
        }
        for (size_t k = 0; k < r->n_claims; k++) {
                if (k < DISRUPT__MAX_REPLACEMENTS)
                        t->claims[t->n_claims++] = r->claims[k].shape;
                t->claims_price += disrupt_price(r->claims[k].shape);
        }
        if (r->n_claims > DISRUPT__MAX_REPLACEMENTS)
                t->all_placed = false;
}

int disrupt__trial(struct disrupt__ctx *ctx, const size_t *cands, size_t n, struct disrupt__trial *ret) {
        struct sim_input *s = ctx->in->sim;
        struct sim_pod **pods = s->pods;
        size_t n_pods = s->n_pods;
        struct sim_result *r = NULL;
        bool *saved = calloc(n + 1, sizeof *saved);
        if (!saved)
                return -ENOMEM;
        *ret = (struct disrupt__trial){ 0 };
        cordon(ctx, cands, n, saved, false);
        s->pods = ctx->bound;
        s->n_pods = ctx->n_bound;
        int rc = simulate_run(s, &r);
        s->pods = pods;
        s->n_pods = n_pods;
        cordon(ctx, cands, n, saved, true);
        free(saved);
        ctx->res->simulations++;
        if (rc == 0)
                read_result(s, r, ret);
        simulate_result_free(r);
        return rc;
}
