/* disrupt: the pure scale-down decisions: which node (or nodes) to disrupt, by which method, and why every other
 * candidate is left alone. Typed NodePool settings and candidates in, one decision per pool out. No I/O. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resources.h"
#include "shapes.h"
#include "simulate.h"

/* The annotations a NodeClaim is created with: the hashes of what it was launched from (docs/coordinator.md,
 * section 12). A claim whose hash differs from today's is Drifted. */
#define DISRUPT_ANNOTATION_NODEPOOL_HASH "pvescale.io/nodepool-hash"
#define DISRUPT_ANNOTATION_NODECLASS_HASH "pvescale.io/nodeclass-hash"
/* The version of the class hash a claim records: "2" leaves out the fields updated in place (tags, resourcePool,
 * securityGroups); a claim without it recorded version 1, the whole spec, and is compared with that. */
#define DISRUPT_ANNOTATION_NODECLASS_HASH_VERSION "pvescale.io/nodeclass-hash-version"
#define DISRUPT_NODECLASS_HASH_VERSION "2"
#define DISRUPT_HASH_LEN 17 /* 16 hex digits and the NUL */

#define DISRUPT_NAME_MAX 254
#define DISRUPT_MAX_BUDGETS 50 /* the CRD's maxItems, as Karpenter's */
#define DISRUPT_MESSAGE_MAX 256
#define DISRUPT_REPAIR_AFTER_MS (15 * 60 * 1000)  /* NotReady or Unknown this long: repair */
#define DISRUPT_REPAIR_MAX_PERCENT 20             /* no repair when more of a pool is unhealthy */
#define DISRUPT_MULTI_MAX_CANDIDATES 100          /* multi-node consolidation looks at this many, cheapest first */
#define DISRUPT_SINGLE_MAX_TRIALS 64               /* single-node consolidation simulations per pass */
#define DISRUPT_PASS_PERIOD_MS 10000              /* default pass period: rotates the single-node start */
#define DISRUPT_DEFAULT_EXPIRE_MS (720LL * 3600 * 1000)

/* Karpenter's disruption reasons; the first three are the ones a budget may name in its reasons. */
enum disrupt_reason {
        DISRUPT_REASON_EMPTY,
        DISRUPT_REASON_DRIFTED,
        DISRUPT_REASON_UNDERUTILIZED,
        DISRUPT_REASON_EXPIRED,
        DISRUPT_REASON_UNHEALTHY,
        DISRUPT_REASON_COUNT,
};

enum disrupt_method {
        DISRUPT_METHOD_EMPTINESS,
        DISRUPT_METHOD_DRIFT,
        DISRUPT_METHOD_EXPIRY,
        DISRUPT_METHOD_REPAIR,
        DISRUPT_METHOD_MULTI_NODE,   /* consolidation: several nodes into fewer */
        DISRUPT_METHOD_SINGLE_NODE,  /* consolidation: delete one node, or replace it by a cheaper shape */
        DISRUPT_METHOD_COUNT,
};

/* "Empty", "Drifted", "Underutilized", "Expired", "Unhealthy". */
const char *disrupt_reason_name(enum disrupt_reason r);
/* "Emptiness", "Drift", "Expiry", "Repair", "Consolidation", "Consolidation". */
const char *disrupt_method_name(enum disrupt_method m);

/* ---- NodePool settings (disrupt_parse.c) ---- */

/* A 5-field cron expression (minute hour day-of-month month day-of-week) or a descriptor (@yearly, @annually,
 * @monthly, @weekly, @daily, @midnight, @hourly), in UTC, with robfig/cron's standard semantics as Karpenter
 * uses them: names (jan, mon), ranges, steps and lists; '?' as '*'; when both day fields are restricted a day
 * matching either is a hit. */
struct disrupt_cron {
        uint64_t minutes;  /* bit 0..59 */
        uint32_t hours;    /* bit 0..23 */
        uint32_t doms;     /* bit 1..31 */
        uint32_t months;   /* bit 1..12 */
        uint32_t dows;     /* bit 0..6, Sunday 0 */
        bool dom_star, dow_star;
};

/* One budget: at most `nodes` of the pool (a count, or a percent of its nodes rounded up) disrupted at once,
 * for the listed reasons (none: all), while active: always without a schedule, else from each schedule hit
 * for duration. */
struct disrupt_budget {
        int64_t nodes;
        bool percent;
        unsigned reasons; /* bits 1 << enum disrupt_reason; 0 = every reason */
        bool has_schedule;
        struct disrupt_cron schedule;
        int64_t duration_ms;
};

/* Balanced (Karpenter 1.14, designs/balanced-consolidation.md): a consolidation goes ahead only when the share of
 * its source pools' cost it saves is at least DISRUPT_BALANCED_MIN_SCORE times the share of their disruption it
 * causes (1/k, k = Karpenter's consolidationThreshold default 2). */
enum disrupt_policy { DISRUPT_WHEN_EMPTY, DISRUPT_WHEN_EMPTY_OR_UNDERUTILIZED, DISRUPT_BALANCED };
#define DISRUPT_BALANCED_MIN_SCORE 0.5

struct disrupt_pool {
        char name[DISRUPT_NAME_MAX];
        char nodeclass[DISRUPT_NAME_MAX];
        enum disrupt_policy policy;     /* default WhenEmptyOrUnderutilized */
        int64_t consolidate_after_ms;   /* default 0; -1 = Never */
        int64_t expire_after_ms;        /* template.spec.expireAfter, default 720h; -1 = Never */
        int64_t termination_grace_ms;   /* template.spec.terminationGracePeriod; -1 = unset (wait for ever) */
        struct disrupt_budget budgets[DISRUPT_MAX_BUDGETS]; /* default: one, nodes 10% */
        size_t n_budgets;
        char hash[DISRUPT_HASH_LEN];    /* of spec.template as drift sees it (disrupt_hash_nodepool) */
};

/* A NodePool object (pvescale.io/v1alpha1 or karpenter.sh/v1 spelling) into *ret. On a bad field -EINVAL with
 * "NodePool <name>: <field>: <reason>" in err and *ret unchanged; -ENOMEM. */
int disrupt_pool_parse(const json_t *nodepool, struct disrupt_pool *ret, char *err, size_t errlen);

/* A cron expression or descriptor into *ret. -EINVAL with the field and the reason in err. */
int disrupt_cron_parse(const char *text, struct disrupt_cron *ret, char *err, size_t errlen);
/* Is the budget active at now_ms (Karpenter's IsActive: the first schedule hit after now - duration is not
 * after now)? A budget without a schedule always is. */
bool disrupt_budget_active(const struct disrupt_budget *b, int64_t now_ms);

/* Stable hashes of what drift compares, as 16 hex digits: the canonical JSON (sorted keys, compact) of a
 * NodePool's spec.template without the fields that do not drift (requirements, expireAfter,
 * terminationGracePeriod: Karpenter's hash:"ignore"), and of a node class's spec without the fields the
 * coordinator updates in place on existing VMs (tags, resourcePool, securityGroups: the seed's no-drift fields);
 * _v1 is the whole spec, what claims made before the version annotation recorded. -EINVAL when there is no
 * object to hash, -ENOMEM. */
int disrupt_hash_nodepool(const json_t *nodepool, char ret[DISRUPT_HASH_LEN]);
int disrupt_hash_nodeclass(const json_t *nodeclass, char ret[DISRUPT_HASH_LEN]);
int disrupt_hash_nodeclass_v1(const json_t *nodeclass, char ret[DISRUPT_HASH_LEN]);

/* ---- candidates and the decision (disrupt.c) ---- */

enum disrupt_pod_flag {
        DISRUPT_POD_DAEMONSET = 1 << 0,      /* owned by a DaemonSet: stays, dies with the node */
        DISRUPT_POD_MIRROR = 1 << 1,         /* a static pod's mirror: stays */
        DISRUPT_POD_DO_NOT_DISRUPT = 1 << 2, /* pvescale.io/ or karpenter.sh/do-not-disrupt: "true" */
        DISRUPT_POD_NOT_SAFE_TO_EVICT = 1 << 3, /* cluster-autoscaler.kubernetes.io/safe-to-evict: "false" */
};

struct disrupt_pod {
        const char *namespace, *name;
        unsigned flags;
        const char *blocking_pdb;   /* "ns/name" of a PDB that allows 0 evictions now, else NULL */
        struct sim_pod *sim;        /* the same pod in the input's simulation (node_name = the node) */
        double cost_extra;          /* Karpenter's EvictionCost less its 1: disruption-cost / 2^27 + priority / 2^25
                                     * (disrupt_pod_cost); 0 by default */
};

/* Karpenter's EvictionCost of a pod, clamped to [-10, 10], then at least 0 as Balanced scores it. */
double disrupt_pod_cost(const struct disrupt_pod *p);

enum disrupt_ready { DISRUPT_READY_TRUE, DISRUPT_READY_FALSE, DISRUPT_READY_UNKNOWN };

/* A Proxmox template as drift sees it: the template VM a node class names on one host, and its config's digest
 * (PVE's `digest`, the SHA-1 of the config file). vmid 0: unknown; digest NULL: unknown. Strings are borrowed. */
struct disrupt_template {
        const char *host;
        uint32_t vmid;
        const char *digest;
};

/* One of our nodes: its NodeClaim and its Node. Strings are borrowed. */
struct disrupt_candidate {
        const char *claim, *pool, *nodeclass;
        const struct shape *shape;
        double price;                /* disrupt_price(shape) unless the caller knows better */
        int64_t created_ms;          /* the claim's creationTimestamp */
        int64_t initialized_ms;      /* Initialized since; 0 = not initialized (never a candidate) */
        int64_t last_pod_event_ms;   /* the last time a pod was bound to or left the node (0: none) */
        const char *nodepool_hash, *nodeclass_hash; /* the claim's annotations; NULL: unknown, never drifted */
        const char *nodeclass_hash_version;         /* its annotation; NULL: version 1 (the whole spec) */
        /* The template the claim's VM was cloned from (status.imageID, imageDigest), and the one its node class
         * names on that host now (looked up by the pass). Either unknown: never drifted by the template. */
        struct disrupt_template template_launched, template_now;
        enum disrupt_ready ready;
        int64_t ready_since_ms;      /* the Ready condition's lastTransitionTime */
        bool do_not_disrupt;         /* the Node or claim carries a do-not-disrupt annotation "true" */
        bool deleting;               /* already being disrupted (tainted, or a deletionTimestamp) */
        struct disrupt_pod *pods;
        size_t n_pods;
        struct sim_node *sim;        /* the node in the simulation input */
};

struct disrupt_nodeclass {
        const char *name;
        char hash[DISRUPT_HASH_LEN];    /* disrupt_hash_nodeclass */
        char hash_v1[DISRUPT_HASH_LEN]; /* disrupt_hash_nodeclass_v1, for claims without a hash version */
};

struct disrupt_input {
        int64_t now_ms;
        const struct disrupt_pool *pools;
        size_t n_pools;
        const struct disrupt_nodeclass *classes;
        size_t n_classes;
        struct disrupt_candidate *candidates;
        size_t n_candidates;
        /* The cluster as the provisioner sees it (provisioner_round_new): every candidate's node and its pods,
         * the other nodes, pending pods, pools, node classes and hosts. Used as scratch by the consolidation
         * trials and left as it was found. */
        struct sim_input *sim;
        bool repair;                 /* node repair is off unless asked for */
        int64_t repair_after_ms;     /* NotReady or Unknown this long is repaired; 0 = DISRUPT_REPAIR_AFTER_MS */
        int64_t pass_period_ms;      /* the caller's pass period; 0 = DISRUPT_PASS_PERIOD_MS */
        /* The simulation has no host room yet (sim has no hosts; fetching it costs a request to every agent): no
         * trial plans a new node, and the result says needs_hosts when room could change it. */
        bool hosts_unknown;
};

/* A decision: the candidates to disrupt (indices into input candidates) and what replaces them. A multi-node
 * consolidation's candidates may come from several pools (each candidate names its own); its replacement (one node
 * at most) goes to the pool the simulation picks. */
struct disrupt_decision {
        enum disrupt_method method;
        enum disrupt_reason reason;
        size_t pool;                 /* index into input pools: its first candidate's */
        size_t *candidates;
        size_t n_candidates;
        const struct shape **replacements; /* new claims to launch first (replace), none for a delete */
        size_t n_replacements;
        char message[DISRUPT_MESSAGE_MAX]; /* "Consolidation: delete, its 3 pods fit on node-b" */
};

/* A candidate left alone this pass, and why: "not disrupted: pdb default/web allows 0 evictions". */
struct disrupt_skip {
        size_t candidate;
        char message[DISRUPT_MESSAGE_MAX];
};

struct disrupt_result {
        struct disrupt_decision *decisions; /* no pool has candidates in two of them */
        size_t n_decisions;
        struct disrupt_skip *skips;         /* at most one per candidate that is not in a decision */
        size_t n_skips;
        size_t simulations;                 /* scheduling simulations run this pass */
        /* Only with hosts_unknown: host room might change the result (a trial left pods unplaced that a cheaper
         * new node might hold, or moved, or a pending pod has, a spread or affinity over zones). Decide again with
         * hosts; without this flag the result is the one host room would give. */
        bool needs_hosts;
};

/* One pass: for every pool the methods in Karpenter's order (emptiness, drift, expiry, repair) until one decides;
 * then multi-node consolidation over the candidates of every pool still without a decision (cheapest to disrupt
 * first, each pool's budget charged by its own candidates); then single-node consolidation of each pool still
 * without one. Under the safety rules (docs/coordinator.md, section 12); a pool's candidates are in one decision at
 * most. 0 and *ret, -ENOMEM, or -EINVAL when a candidate names no pool or has no shape or node. */
int disrupt_decide(const struct disrupt_input *in, struct disrupt_result **ret);
void disrupt_result_free(struct disrupt_result *r);

/* The trial behind a decision, run again to carry it out: the scheduling simulation with these candidates
 * cordoned and their pods (but DaemonSet and mirror pods) pending. The result's claims are the replacements, each
 * with its pool, shape, host and labels. 0 and *ret (simulate_result_free), or a negative errno. */
int disrupt_replay(const struct disrupt_input *in, const size_t *cands, size_t n, struct sim_result **ret);

/* ---- drift (disrupt_drift.c) ---- */

/* What a claim drifted from, in the order Karpenter checks it; disrupt_drift_reason names each as the reason of the
 * claim's Drifted condition. */
enum disrupt_drift {
        DISRUPT_DRIFT_NONE,
        DISRUPT_DRIFT_NODEPOOL,     /* "NodePoolDrifted": the NodePool's template hash differs from the claim's */
        DISRUPT_DRIFT_REQUIREMENTS, /* "RequirementsDrifted": the node's labels fail the NodePool's requirements */
        DISRUPT_DRIFT_NODECLASS,    /* "NodeClassDrifted": the node class's hash differs from the claim's */
        DISRUPT_DRIFT_TEMPLATE,     /* "TemplateDrifted": the Proxmox template is another VM, or its config changed */
};

/* "NodePoolDrifted", "RequirementsDrifted", "NodeClassDrifted", "TemplateDrifted"; NULL for none. */
const char *disrupt_drift_reason(enum disrupt_drift d);
/* Has candidate i drifted, and from what? what gets a sentence for people ("NodePool default requires
 * topology.kubernetes.io/zone In [pve2], not topology.kubernetes.io/zone=pve1"), "" when not. A requirement of the
 * pool on a label the node lacks is met when the label is well known (zone, region, instance type, family, arch,
 * os, capacity type, node pool and class) or the operator is NotIn or DoesNotExist, as in Karpenter. */
enum disrupt_drift disrupt_drift_of(const struct disrupt_input *in, size_t i, char *what, size_t len);

/* The relative price of a shape: vCPUs plus GiB of VM memory / 4 (one vCPU costs as much as 4 GiB). */
double disrupt_price(const struct shape *s);
