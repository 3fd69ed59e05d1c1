/* disruption: the control loop's scale-down pass: decide on one snapshot of the cache (coordinator/disrupt), check
 * the decisions again on a fresh one a pass later, and carry out those that still hold (Events on the NodeClaim and
 * the Node, then the NodeClaim deleted: its finalizer drains the Node and removes the VM). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "disrupt.h"
#include "nodeclaim.h"
#include "provisioner.h"
#include "stats.h"

#define DISRUPTION_TAINT "pvescale.io/disrupted"
#define DISRUPTION_TAINT_KARPENTER "karpenter.sh/disrupted" /* set by Karpenter's tooling; read as ours */
#define DISRUPTION_PERIOD_MS 10000                           /* a pass every 10 s (--disruption-interval) */
/* On a claim launched to replace others: their names, comma-separated, the decision's message and its method (the
 * metrics label: "drift", "multi_node_consolidation", ...). The decision is carried out (those claims deleted) once
 * every claim with the same value is Initialized. Claims from before the method annotation carry only the message:
 * their method is read from its prefix. */
#define DISRUPTION_ANNOTATION_REPLACES NODECLAIM_ANNOTATION_REPLACES /* the launcher reads it too */
#define DISRUPTION_ANNOTATION_DECISION "pvescale.io/disruption"
#define DISRUPTION_ANNOTATION_METHOD "pvescale.io/disruption-method"
#define DISRUPTION_REPLACE_TIMEOUT_MS (10 * 60 * 1000) /* replacements not Initialized by then: the decision drops
                                                         * (--replacement-timeout) */

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
        /* The Proxmox templates to look up (disruption_input_templates): "<region>/<host>/<instanceTemplateRef>" ->
         * {"region", "host", "ref"}, with "vmid" and "digest" once found; per candidate its key (or null). */
        json_t *templates, *template_keys;
};

/* Build the input at now_ms (repair: whether node repair is on). 0 or -ENOMEM. The snapshot must outlive it. */
int disruption_input_new(const struct provisioner_snapshot *snap, int64_t now_ms, bool repair,
                         struct disruption_input **ret);
void disruption_input_free(struct disruption_input *di);
/* Pods that left a node are pod events too (Karpenter's lastPodEventTime counts a pod bound, finished or deleted):
 * marks keeps, from pass to pass, each candidate Node's {"pods": signature of its pods, "at": ms}; a Node whose
 * pods differ from the last pass's had a pod event at now_ms, which raises its candidate's last_pod_event_ms.
 * marks is replaced by this pass's (Nodes no longer candidates are forgotten). 0 or -ENOMEM. Pure. */
int disruption_input_pod_events(struct disruption_input *di, json_t *marks, int64_t now_ms);

/* ---- the Proxmox templates of the candidates (TemplateDrifted) ---- */

/* Each candidate's template_launched from its claim (status.imageID "<host>/<VMID>", status.imageDigest), and in
 * di->templates what the pass must look up: one entry per region, host and instanceTemplateRef (of the candidate's
 * node class, from classes) of the candidates that recorded their template. 0 or -ENOMEM. Pure. */
int disruption_input_templates(struct disruption_input *di, const json_t *classes);
/* Each candidate's template_now from the entries of di->templates that the lookup completed with "vmid" and
 * "digest" (borrowed from them); the others stay unknown. Pure. */
void disruption_input_templates_found(struct disruption_input *di);

/* ---- drift: the templates of today and the Drifted conditions (disruption_drift.c, I/O) ---- */

/* Complete di->templates from Proxmox (the VM list of each host once, then the config of the template the ref
 * names on it, for its digest) and fill the candidates' template_now. What cannot be looked up (a failed call,
 * logged, or no template that matches) stays unknown: no drift by the template, and the entry gets "unknown". */
void disruption_drift_templates(struct provisioner *p, struct disruption_input *di);
/* Each candidate's Drifted condition as disrupt_drift_of finds it: True with the drift's reason and message, or
 * removed once the claim no longer drifts, unless its template is unknown this pass (the condition then stays).
 * Only a change is written (a status write with the claim's resourceVersion, read again on a conflict); claims
 * being deleted are left alone. */
void disruption_drift_conditions(struct kube_client *kube, const struct disruption_input *di, int64_t now_ms);

/* ---- Karpenter's metric labels (disruption_metrics.c, pure) ---- */

/* The labels of nodeclaims_disrupted_total for the claim of that name disrupted by method m, from its candidate in
 * di; returns its reschedulable pods (pods_disruption_initiated_total). The strings are borrowed from di. */
size_t disruption_disrupted_labels(const struct disruption_input *di, const char *claim,
                                   enum stats_disruption_method m, struct stats_disruption_labels *ret);
/* A consolidation policy as Karpenter's metrics spell it: when_empty, when_empty_or_underutilized, balanced. */
const char *disruption_policy_label(enum disrupt_policy p);

/* ---- the disrupted taint (disruption_taint.c, I/O) ---- */

/* Taint the Nodes of the candidates (indices into di) NoSchedule, all before any claim is deleted or replacement
 * launched; each Node tainted goes into tainted (node name -> claim) until its claim is seen being deleted. When one
 * cannot be tainted, those done are untainted and the error returned. */
int disruption_taint(struct kube_client *kube, json_t *tainted, const struct disruption_input *di,
                     const size_t *candidates, size_t n);
/* Take our disrupted taint off a Node whose claim stays (a failure is logged). */
void disruption_untaint(struct kube_client *kube, json_t *tainted, const json_t *node);
/* Karpenter's rule for a taint a restart left behind: a candidate's Node with our taint whose claim is not being
 * deleted, is not in tainted (a decision of this process in flight) and not in held (claim name -> anything: the
 * old claims of replaces under way) loses it. */
void disruption_untaint_stale(struct kube_client *kube, json_t *tainted, const struct disruption_input *di,
                              const json_t *held);

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
        int64_t period_ms;        /* the pass's period; 0 = DISRUPTION_PERIOD_MS */
        int64_t repair_after_ms;  /* 0 = DISRUPT_REPAIR_AFTER_MS */
        int64_t replace_timeout_ms; /* 0 = DISRUPTION_REPLACE_TIMEOUT_MS */
};

struct disruption;

struct disruption_outcome {
        size_t candidates, decided, carried_out, stale, blocked;
        size_t replacing; /* decisions waiting for their replacement claims to be Initialized */
};

/* The method of the replace a replacement claim was launched for: its DISRUPTION_ANNOTATION_METHOD; a claim from
 * before that annotation (an upgrade) by its DISRUPTION_ANNOTATION_DECISION message's prefix and old (the claims it
 * replaces, "a,b"): both consolidations say "Consolidation", and only the multi-node one replaces two or more. */
enum stats_disruption_method disruption_replace_method(const json_t *claim, const char *old);

int disruption_new(const struct disruption_env *env, struct disruption **ret);
void disruption_free(struct disruption *d);

/* One pass on a fresh snapshot: carry out what the last pass decided and still holds on it (the same method,
 * pool and NodeClaims, decided again), then decide anew for the next pass. A delete deletes the NodeClaims; a
 * replace first creates the replacement claims (annotated DISRUPTION_ANNOTATION_REPLACES) and deletes the old ones
 * on the pass that finds every replacement Initialized; a replacement gone, Failed or not Initialized within
 * the replace timeout (env) drops the decision (replacements not Initialized are deleted). Until then the old
 * and new nodes are no candidates. After a restart the waiting decisions are found from the annotations. Events
 * name every decision and every candidate left alone (once per change of its reason). 0 or a negative errno (the
 * pass is then skipped). */
int disruption_pass(struct disruption *d, const struct provisioner_snapshot *snap, int64_t now_ms,
                    struct disruption_outcome *ret);
