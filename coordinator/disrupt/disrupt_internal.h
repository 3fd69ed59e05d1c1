/* disrupt_internal: what the files of the disrupt module share (docs/architecture.md, "Private names"). Order,
 * lower first: disrupt_parse, disrupt_cron; disrupt_state (one pass's context, budgets, guards, the result);
 * disrupt_trial (the scheduling simulation of removing nodes); disrupt_drift (has a claim drifted); disrupt_methods,
 * disrupt_consolidate; disrupt (the pass). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "disrupt.h"

#define DISRUPT__MAX_REPLACEMENTS 8

/* One pass over the input: per-candidate facts computed once, and scratch for the trials. */
struct disrupt__ctx {
        const struct disrupt_input *in;
        struct disrupt_result *res;
        size_t *pool_of;             /* per candidate: its pool index */
        bool *taken;                 /* per candidate: in a decision */
        char (*notes)[DISRUPT_MESSAGE_MAX]; /* per candidate: why not, "" until a method says */
        struct resources *free_room; /* per candidate: allocatable - reserved - its pods */
        size_t *reschedulable;       /* per candidate: pods that must move (not DaemonSet or mirror) */
        struct resources free_total; /* over every schedulable node that is not in flight */
        struct sim_pod **bound;      /* the input's bound pods: a trial's pod list */
        struct sim_pod **pending;    /* the input's pending pods */
        size_t n_pending;
        size_t n_bound;
        unsigned char *pod_kinds;    /* per bound pod: scratch of the trials (a leaving node's pod or not) */
        size_t *pending_fit;         /* per candidate: the first pending pod (input pod) it could take, SIZE_MAX
                                      * none; NULL when no pod is pending */
        bool *pool_decided;          /* per pool: some decision of this pass takes candidates of it */
};

/* What a trial found: could the candidates' pods go elsewhere, and onto what. */
struct disrupt__trial {
        bool all_placed;
        size_t n_moved;
        char unplaced_reason[DISRUPT_MESSAGE_MAX / 2]; /* the first unplaced pod's reason (a copy: the
                                                        * simulation's result is gone), "" when none */
        bool uninitialized;                   /* the reason: a pod would go to a claim not Initialized */
        const char *target;                   /* the first existing node that takes a pod */
        size_t n_targets;                     /* distinct existing nodes that take pods */
        const struct shape *claims[DISRUPT__MAX_REPLACEMENTS];
        size_t n_claims;
        double claims_price;
        /* Without host room (input hosts_unknown) only: */
        double floor_price;  /* the cheapest shape that holds the unplaced pods together (HUGE_VAL: none, or all
                              * placed): no replacement can cost less */
        bool zone_domains;   /* a moved pod has a spread, affinity or anti-affinity over zones: where it goes on the
                              * existing nodes may depend on where a new node would be */
};

/* disrupt_state.c */
int disrupt__ctx_init(struct disrupt__ctx *ctx, const struct disrupt_input *in);
void disrupt__ctx_done(struct disrupt__ctx *ctx);
/* How many more nodes of pool p a budget lets go for reason now (INT64_MAX: no budget applies). */
int64_t disrupt__allowed(const struct disrupt__ctx *ctx, size_t pool, enum disrupt_reason reason);
/* The first rule that keeps a graceful method off candidate i, written into why ("" when none). consolidation:
 * also the consolidateAfter wait since the last pod event. */
bool disrupt__blocked(const struct disrupt__ctx *ctx, size_t i, bool consolidation, char *why, size_t len);
/* Note why candidate i is not disrupted (the first note stays; later calls do nothing). */
void disrupt__note(struct disrupt__ctx *ctx, size_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The skips: every candidate in no decision, with its note or "no method applies". */
void disrupt__finish(struct disrupt__ctx *ctx);
/* Is candidate i of pool, and that pool in no decision yet? */
bool disrupt__open(const struct disrupt__ctx *ctx, size_t pool, size_t i);
/* Start a decision (pool: its first candidate's); NULL on ENOMEM. The candidates are marked taken and their pools
 * decided. */
struct disrupt_decision *disrupt__decide(struct disrupt__ctx *ctx, size_t pool, enum disrupt_method m,
                                         enum disrupt_reason r, const size_t *cands, size_t n);
int disrupt__replacements(struct disrupt_decision *d, const struct disrupt__trial *t);

/* A duration for people: "45s", "12m", "721h". Returns buf. */
const char *disrupt__human(int64_t ms, char *buf, size_t len);

/* snprintf that may cut a message short (names are long; messages stay one line). */
void disrupt__say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* disrupt_trial.c: the candidates' pods pending, their nodes cordoned, the rest as it is. 0 or -ENOMEM/-EINVAL. */
int disrupt__trial(struct disrupt__ctx *ctx, const size_t *cands, size_t n, struct disrupt__trial *ret);
/* Without host room: could host room change what this trial says, for a decision whose replacement must cost less
 * than price (HUGE_VAL: any replacement)? Then the result says needs_hosts. */
void disrupt__need_hosts(struct disrupt__ctx *ctx, const struct disrupt__trial *t, double price);

/* disrupt_methods.c: each returns 1 when it decided for the pool, 0 when not, or a negative errno. */
int disrupt__emptiness(struct disrupt__ctx *ctx, size_t pool);
int disrupt__drift(struct disrupt__ctx *ctx, size_t pool);
int disrupt__expiry(struct disrupt__ctx *ctx, size_t pool);
int disrupt__repair(struct disrupt__ctx *ctx, size_t pool);
/* disrupt_consolidate.c: multi-node consolidation over the candidates of every pool without a decision (each pool's
 * budget charged by its own); single-node consolidation of one pool. */
int disrupt__multi_node(struct disrupt__ctx *ctx);
int disrupt__single_node(struct disrupt__ctx *ctx, size_t pool);
