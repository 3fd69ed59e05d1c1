/* disruption: the control loop's scale-down pass: decide on one snapshot of the cache (coordinator/disrupt), check
 * the decisions again on a fresh one a pass later, and carry out those that still hold (Events on the NodeClaim and
 * the Node, then the NodeClaim deleted: its finalizer drains the Node and removes the VM). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "disrupt.h"
#include "provisioner.h"

#define DISRUPTION_TAINT "pvescale.io/disrupted"
#define DISRUPTION_TAINT_KARPENTER "karpenter.sh/disrupted" /* set by Karpenter's tooling; read as ours */
#define DISRUPTION_PERIOD_MS 10000                           /* a pass every 10 s */
/* On a claim launched to replace others: their names, comma-separated, and the decision's message. The decision
 * is carried out (those claims deleted) once every claim with the same value is Initialized. */
#define DISRUPTION_ANNOTATION_REPLACES "pvescale.io/replaces"
#define DISRUPTION_ANNOTATION_DECISION "pvescale.io/disruption"
#define DISRUPTION_REPLACE_TIMEOUT_MS (10 * 60 * 1000) /* replacements not Initialized by then: the decision drops */

/* ---- the input from a snapshot (disruption_input.c, pure) ---- */

/* The decisions' input and what it was built from. Candidates are the Initialized Nodes of our NodePools that have
 * a NodeClaim; claims[i] and nodes[i] are candidate i's objects (borrowed from the snapshot). */
struct disruption_input {
        struct disrupt_input in;
        struct provisioner_round *round;
        struct disrupt_pool *pools;
        size_t n_pools;
        struct disrupt_nodeclass *classes;
        size_t n_classes;
        struct disrupt_candidate *candidates;
        const json_t **claims, **nodes;
        size_t n_candidates;
        json_t *problems; /* ["NodePool x: spec...: ..."]: NodePools left out */
        json_t *pdb_names; /* "ns/name" of each PDB of the snapshot: what the pods' blocking_pdb point to */
};

/* The DISRUPT_POD_* flags of a pod: owned by a DaemonSet, a mirror pod, do-not-disrupt, safe-to-evict "false". */
unsigned disruption_pod_flags(const json_t *pod);
/* Build the input at now_ms (repair: whether node repair is on). 0 or -ENOMEM. The snapshot must outlive it. */
int disruption_input_new(const struct provisioner_snapshot *snap, int64_t now_ms, bool repair,
                         struct disruption_input **ret);
void disruption_input_free(struct disruption_input *di);

/* ---- the pass (disruption.c) ---- */

struct kube_client;
struct stats;
struct provisioner;

struct disruption_env {
        struct kube_client *kube; /* the control loop's */
        struct stats *stats;      /* may be NULL */
        /* The control loop's provisioner: host room for the decisions (asked for only when they say it could change
         * them: disrupt_result.needs_hosts) and the replacement claims. NULL: no host room, so no decision replaces
         * a node. */
        struct provisioner *provisioner;
        bool repair;              /* node repair (off by default) */
};

struct disruption;

struct disruption_outcome {
        size_t candidates, decided, carried_out, stale, blocked;
        size_t replacing; /* decisions waiting for their replacement claims to be Initialized */
};

int disruption_new(const struct disruption_env *env, struct disruption **ret);
void disruption_free(struct disruption *d);

/* One pass on a fresh snapshot: carry out what the last pass decided and still holds on it (the same method,
 * pool and NodeClaims, decided again), then decide anew for the next pass. A delete deletes the NodeClaims; a
 * replace first creates the replacement claims (annotated DISRUPTION_ANNOTATION_REPLACES) and deletes the old ones
 * on the pass that finds every replacement Initialized; a replacement gone, Failed or not Initialized within
 * DISRUPTION_REPLACE_TIMEOUT_MS drops the decision (replacements not Initialized are deleted). Until then the old
 * and new nodes are no candidates. After a restart the waiting decisions are found from the annotations. Events name every decision and every
 * candidate left alone (once per change of its reason). 0 or a negative errno (the pass is then skipped). */
int disruption_pass(struct disruption *d, const struct provisioner_snapshot *snap, int64_t now_ms,
                    struct disruption_outcome *ret);
