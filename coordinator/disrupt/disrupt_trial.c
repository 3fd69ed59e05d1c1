/* disrupt_trial: would the pods of these nodes go elsewhere? The scheduling simulation the provisioner uses, run
 * with the nodes cordoned and their pods pending, and the input put back as it was. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt_internal.h"

#define TRIAL_LEAVING 2

static bool moves(const struct disrupt_pod *p) {
        return p->sim && !(p->flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR));
}

/* Cordon the nodes and make their pods pending (undo = false), or put them back (undo = true). A trial's nodes do
 * not count toward their pools' limits either (leaving), as Karpenter simulates without them. saved: per node, its
 * unschedulable (bit 0) and leaving (bit 1) before. */
static void cordon(const struct disrupt_input *in, const size_t *cands, size_t n, unsigned char *saved, bool undo) {
        for (size_t k = 0; k < n; k++) {
                struct disrupt_candidate *c = &in->candidates[cands[k]];
                if (undo) {
                        c->sim->unschedulable = saved[k] & 1;
                        c->sim->leaving = saved[k] & 2;
                } else {
                        saved[k] = (unsigned char)(c->sim->unschedulable | (c->sim->leaving << 1));
                        c->sim->unschedulable = c->sim->leaving = true;
                }
                for (size_t p = 0; p < c->n_pods; p++)
                        if (moves(&c->pods[p]))
                                c->pods[p].sim->node_name = undo ? c->sim->name : NULL;
        }
}

/* Karpenter counts the pods of nodes marked for deletion as pending in every simulation: the pods of the other
 * candidates that are leaving (being deleted, or tainted by a decision: the old nodes of a replace under way) are
 * pending too (undo = false) or put back, so that no decision takes the room they are to move to. Runs before the
 * trial's own cordon, and undone after it. */
static void leaving_pending(const struct disrupt_input *in, bool undo) {
        for (size_t i = 0; i < in->n_candidates; i++) {
                struct disrupt_candidate *c = &in->candidates[i];
                if (!c->sim->leaving)
                        continue;
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

/* Karpenter's UninitializedNodeError: a claim in flight (no Node yet, or one not Initialized: a startup taint may
 * stay, the node may never join) is no place to move pods to, so a decision cannot count on it. */
static void uninitialized(struct disrupt__trial *t, const struct sim_node *n) {
        if (!t->all_placed)
                return;
        t->all_placed = false;
        snprintf(t->unplaced_reason, sizeof t->unplaced_reason, "would schedule against uninitialized nodeclaim/%s",
                 n->name);
        t->uninitialized = true;
}

/* What the simulation did with the pods of a leaving node (not the trial's): they may go anywhere, a claim in flight
 * too (the replacement launched for them), but they must go somewhere. */
static void leaving_placed(struct disrupt__trial *t, const struct sim_pod *p, const struct sim_placement *pl) {
        if (pl->target != SIM_TARGET_UNPLACED || !t->all_placed)
                return;
        t->all_placed = false;
        snprintf(t->unplaced_reason, sizeof t->unplaced_reason, "pod %s/%s of a node being disrupted would not fit: %s",
                 p->namespace ? p->namespace : "", p->name ? p->name : "", pl->reason ? pl->reason : "");
}

/* What the simulation did with the moved pods (the only pending ones in the trial). kinds (may be NULL): per input
 * pod, TRIAL_LEAVING for the pods of a leaving node. */
static void read_result(const struct sim_input *s, struct sim_pod *const *pods, const unsigned char *kinds,
                        const struct sim_result *r, struct disrupt__trial *t) {
        t->all_placed = true;
        for (size_t i = 0; i < r->n_placements; i++) {
                const struct sim_placement *pl = &r->placements[i];
                if (pl->target == SIM_TARGET_BOUND)
                        continue;
                if (kinds && kinds[i] == TRIAL_LEAVING) {
                        leaving_placed(t, pods[i], pl);
                        continue;
                }
                t->n_moved++;
                if (pl->target == SIM_TARGET_NODE && s->nodes[pl->index]->in_flight)
                        uninitialized(t, s->nodes[pl->index]);
                else if (pl->target == SIM_TARGET_NODE)
                        note_target(t, s->nodes[pl->index]);
                else if (pl->target == SIM_TARGET_UNPLACED && t->all_placed) {
                        t->all_placed = false;
                        snprintf(t->unplaced_reason, sizeof t->unplaced_reason, "%s", pl->reason ? pl->reason : "");
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

/* The simulation with the candidates cordoned, their pods and those of leaving nodes pending, and only these pods in
 * the input. kinds (may be NULL): per pod of bound, TRIAL_LEAVING for a leaving node's pods, else 0. */
static int run_cordoned(const struct disrupt_input *in, struct sim_pod **bound, size_t n_bound, const size_t *cands,
                        size_t n, unsigned char *kinds, struct sim_result **ret) {
        struct sim_input *s = in->sim;
        struct sim_pod **pods = s->pods;
        size_t n_pods = s->n_pods;
        unsigned char *saved = calloc(n + 1, sizeof *saved);
        if (!saved)
                return -ENOMEM;
        leaving_pending(in, false);
        for (size_t i = 0; kinds && i < n_bound; i++)
                kinds[i] = bound[i]->node_name ? 0 : TRIAL_LEAVING;
        cordon(in, cands, n, saved, false);
        s->pods = bound;
        s->n_pods = n_bound;
        int rc = simulate_run(s, ret);
        s->pods = pods;
        s->n_pods = n_pods;
        cordon(in, cands, n, saved, true);
        leaving_pending(in, true);
        free(saved);
        return rc;
}

static bool zone_key(const char *key) {
        return key && strcmp(key, SIM_LABEL_ZONE) == 0;
}

/* Does any rule of the pod count pods per zone (a spread, hard or soft, an affinity or anti-affinity term)? */
static bool zone_keyed(const struct sim_pod *p) {
        for (size_t k = 0; k < p->n_spread; k++)
                if (zone_key(p->spread[k].topology_key))
                        return true;
        for (size_t k = 0; k < p->n_pod_affinity; k++)
                if (zone_key(p->pod_affinity[k].topology_key))
                        return true;
        for (size_t k = 0; k < p->n_pod_anti_affinity; k++)
                if (zone_key(p->pod_anti_affinity[k].topology_key))
                        return true;
        return false;
}

/* The price of the cheapest shape of any node class whose allocatable holds these requests; HUGE_VAL when none. */
static double cheapest_holding(const struct sim_input *s, const struct resources *req) {
        static const struct resources none;
        double best = HUGE_VAL;
        for (size_t k = 0; k < s->n_classes; k++) {
                const struct shape_catalog *cat = s->classes[k]->shapes;
                for (size_t i = 0; cat && i < cat->n; i++) {
                        const struct shape *sh = &cat->items[i];
                        if (disrupt_price(sh) < best && resources_fit(req, &none, &sh->allocatable))
                                best = disrupt_price(sh);
                }
        }
        return best;
}

/* Without host room: what a new node could change (struct disrupt__trial). Without zone rules the pods tried on the
 * existing nodes meet the same nodes in the same state with room as without (pods that go to a new node change no
 * existing node), so the unplaced pods are the ones a new node would have to take, all of them for a decision. The
 * trial's input pods were ctx->bound. */
static void host_facts(const struct disrupt__ctx *ctx, const size_t *cands, size_t n, const struct sim_result *r,
                       struct disrupt__trial *t) {
        struct resources unplaced = { 0 };
        bool any = false;
        for (size_t k = 0; k < n && !t->zone_domains; k++) {
                const struct disrupt_candidate *c = &ctx->in->candidates[cands[k]];
                for (size_t p = 0; p < c->n_pods && !t->zone_domains; p++)
                        t->zone_domains = moves(&c->pods[p]) && zone_keyed(c->pods[p].sim);
        }
        for (size_t i = 0; i < r->n_placements; i++)
                if (r->placements[i].target == SIM_TARGET_UNPLACED) {
                        resources_add(&unplaced, &ctx->bound[i]->requests);
                        any = true;
                }
        t->floor_price = any ? cheapest_holding(ctx->in->sim, &unplaced) : HUGE_VAL;
}

int disrupt__trial(struct disrupt__ctx *ctx, const size_t *cands, size_t n, struct disrupt__trial *ret) {
        struct sim_result *r = NULL;
        *ret = (struct disrupt__trial){ .floor_price = HUGE_VAL };
        int rc = run_cordoned(ctx->in, ctx->bound, ctx->n_bound, cands, n, ctx->pod_kinds, &r);
        ctx->res->simulations++;
        if (rc == 0)
                read_result(ctx->in->sim, ctx->bound, ctx->pod_kinds, r, ret);
        if (rc == 0 && ctx->in->hosts_unknown)
                host_facts(ctx, cands, n, r, ret);
        simulate_result_free(r);
        return rc;
}

/* Without hosts no new node is planned: a trial that left pods unplaced might place them on a replacement cheaper
 * than price, and one that moved pods with zone rules might place them otherwise, once hosts are known. */
void disrupt__need_hosts(struct disrupt__ctx *ctx, const struct disrupt__trial *t, double price) {
        if (ctx->in->hosts_unknown && (t->zone_domains || (!t->all_placed && t->floor_price < price)))
                ctx->res->needs_hosts = true;
}

int disrupt_replay(const struct disrupt_input *in, const size_t *cands, size_t n, struct sim_result **ret) {
        struct sim_pod **bound = calloc(in->sim->n_pods + 1, sizeof *bound);
        size_t n_bound = 0;
        if (!bound)
                return -ENOMEM;
        for (size_t i = 0; i < in->sim->n_pods; i++)
                if (in->sim->pods[i]->node_name)
                        bound[n_bound++] = in->sim->pods[i];
        int rc = run_cordoned(in, bound, n_bound, cands, n, NULL, ret);
        free(bound);
        return rc;
}
