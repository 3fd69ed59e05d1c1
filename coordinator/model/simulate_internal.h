/* simulate_internal: the simulation's private state, shared by the simulate*.c files only. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simulate.h"

/* The files call each other one way only, each using those below it:
 *   simulate.c           the run: pods onto nodes, in-flight claims, planned claims, then new claims
 *   simulate_claims.c    new claims: pool, requirements, shape, limits, host, and the reasons
 *   simulate_topology.c  affinity, anti-affinity and spread; spread domains ask which pools a class can use
 *   simulate_index.c     the room of every slot and the slots of every zone: what a scan may skip
 *   simulate_pools.c     which pools a class can use: taints, what a new node can satisfy, shapes per term
 *   simulate_compile.c   the input in interned, indexed form: classes, groups, slots, pools, node classes
 *   simulate_hosts.c     the room of PVE hosts
 *   simulate_labels.c    interned strings, zones, matching labels against requirements
 *   simulate_input.c     the arena and the input builders: calls none of the others
 * (simulate_json.c builds an input through simulate.h only.) What the files share is named simulate__name (as
 * hwloc's module__name). */

/* ---- arena (simulate_input.c) ---- */
struct sim_arena;
struct sim_arena *simulate__arena_new(void);
void simulate__arena_free(struct sim_arena *a);
void *simulate__arena_alloc(struct sim_arena *a, size_t size);
char *simulate__arena_strdup(struct sim_arena *a, const char *s);

/* Grow *arr (elements of size elem) so that it holds at least need; -ENOMEM. */
int simulate__grow(void *arr, size_t *cap, size_t need, size_t elem);

/* ---- interned strings (simulate_labels.c) and the compiled model (simulate_compile.c) ---- */
struct strtab {
        char **strs; /* id -> string; id 0 is "no string" */
        uint32_t n, cap;
        uint32_t *slots; /* open addressing: id or 0 */
        uint32_t n_slots;
        struct sim_arena *arena;
};

enum topo { TOPO_HOST, TOPO_ZONE };

struct kv {
        uint32_t k, v;
};

struct creq {
        uint32_t key;
        enum sim_op op;
        uint32_t *vals; /* sorted ids */
        uint32_t n_vals;
        int64_t num;    /* Gt/Lt bound */
        bool from_node_selector;
};

struct cterm {
        struct creq *reqs;
        uint32_t n;
};

struct cselector {
        bool none;
        struct kv *ml;
        uint32_t n_ml;
        struct creq *ex;
        uint32_t n_ex;
};

/* Pods counted together by some term: a namespace set and a selector. */
struct group {
        uint32_t *ns;
        uint32_t n_ns;
        struct cselector sel;
        const struct sim_selector *src; /* for messages */
        int32_t *node_cnt, *zone_cnt;   /* matching pods per slot / per zone */
        int32_t *anti_node, *anti_zone; /* pods owning an anti-affinity term on this group */
        bool per_node, per_node_anti;   /* a hostname term reads node_cnt / an anti one anti_node: else NULL */
        int64_t total;
};

struct topo_term {
        uint32_t group;
        enum topo topo;
        bool self;          /* the owning pod matches the term itself */
        const struct sim_pod_term *src;
};

struct spread_term {
        uint32_t group;
        enum topo topo;
        int32_t max_skew, min_domains;
        bool hard, self;
        const struct sim_spread *src;
};

/* Pods with the same constraints (everything but name and requests). */
struct pclass {
        uint32_t ns;
        struct kv *labels;
        uint32_t n_labels;
        struct cterm *terms; /* nodeSelector ANDed into each required node affinity term; >= 1 term */
        uint32_t n_terms;
        const struct sim_pod *example;
        struct topo_term *aff, *anti;
        uint32_t n_aff, n_anti;
        struct spread_term *spread;
        uint32_t n_spread;
        bool has_soft;
        uint32_t *member; /* groups whose selector and namespaces match this class */
        uint32_t n_member;
        const char *unsupported; /* a reason: the class uses something we cannot simulate */
        /* memo */
        int8_t *slot_fail;       /* per slot: 1 = fails for a permanent reason */
        size_t slot_fail_cap;
        size_t cursor;           /* every slot before it fails for a permanent reason */
        int8_t *pool_tol;        /* per pool: 0 unknown, 1 tolerates, -1 does not */
        uint8_t *zone_eligible;  /* per zone: a domain for zone spread; NULL until needed */
        uint64_t **term_masks;   /* [nodeclass][term] shape masks; NULL until needed */
        size_t home_pool;        /* the first pool (pool_order) a new node of which takes the class; SIZE_MAX none */
        bool home_known;
        struct resources fail_req; /* a claim for requests >= these failed with fail_reason */
        const char *fail_reason;
        bool failed_once;
};

enum slot_kind { SLOT_NODE, SLOT_INFLIGHT, SLOT_CLAIM };

struct slot {
        enum slot_kind kind;
        size_t index; /* input node or internal claim */
        struct kv *labels;
        uint32_t n_labels;
        const struct sim_taint *taints;
        size_t n_taints;
        struct resources alloc, used;
        int32_t zone;
        bool closed;
        uint32_t *ports;
        size_t n_ports, cap_ports;
};

struct nodeclass_c {
        const struct sim_nodeclass *src;
        const struct shape_catalog *shapes;
        uint32_t region; /* id or 0 */
        size_t words;    /* uint64 words of a shape mask */
};

struct pool_c {
        const struct sim_nodepool *src;
        size_t index;
        int nc;           /* nodeclass index, -1 when missing */
        struct kv *fixed; /* labels every node of this pool carries (no zone/region/hostname/shape) */
        uint32_t n_fixed;
        struct creq *zreqs; /* requirements on zone/region: filter hosts */
        uint32_t n_zreqs;
        struct creq *greqs; /* requirements on other keys */
        uint32_t n_greqs;
        uint64_t *mask;   /* shapes allowed by the pool */
        const char *bad;  /* a reason the pool can never launch (arch/os mismatch...) */
        int64_t used_cpu, used_mem, used_nodes;
        struct resources *ds; /* per zone: daemon set overhead on a new node; NULL until needed */
        uint8_t *ds_known;
};

struct host_c {
        const struct sim_host *src;
        int32_t zone;
        uint32_t region;
        int64_t free_cpus, free_mem;
        int64_t *numa_cpus, *numa_mem; /* free room per NUMA node, as claims take it */
        int32_t **offer_left;          /* [nodeclass][shape]: -1 = not limited by offers */
        int32_t **offer_good;          /* [nodeclass][shape]: preferred layouts left; -1 = no offers */
        int32_t *dev_free;             /* [src->devices index]: free PCI devices of that mapping left */
        int32_t **dev_of;              /* [nodeclass][pciDevices entry]: its src->devices index, -1: none here */
        const struct sim_nodeclass *const *classes; /* the input's, for their pciDevices */
        bool room_at_start;
        bool room_now, room_dirty; /* room for some shape now; recomputed lazily after take/release */
        uint32_t planned;
        bool order_dirty;          /* planned or free_cpus changed since its place in ctx.host_order */
        uint32_t order_planned;    /* the key it has that place by */
        int64_t order_free_cpus;
};

struct claim_c {
        size_t pool, host, slot;
        int nc;
        uint64_t *mask;
        size_t shape;    /* index in the node class catalog */
        int numa;        /* NUMA node index taken, -1 when spanning */
        bool good;       /* took one of its host's preferred layouts (offer_good) */
        int64_t *span;   /* when spanning: cpus then memory taken per NUMA node */
        struct resources packed, ds;
        struct resources maxalloc; /* per resource, the most any shape in mask offers */
        struct creq *reqs; /* accumulated requirements on generic keys */
        uint32_t n_reqs, cap_reqs;
        size_t *pods;
        size_t n_pods, cap_pods;
};

/* Room of a slot (or the most of a subtree) for more requests. */
struct slot_room {
        int64_t cpu, mem;
};

struct zone_slots {
        uint32_t *slots; /* slot indexes in increasing order */
        size_t n, cap;
};

struct ctx {
        const struct sim_input *in;
        struct sim_arena *arena; /* scratch for the run */
        struct strtab st;
        /* well-known ids */
        uint32_t k_host, k_zone, k_region, k_arch, k_os, k_itype, k_family, k_pool, k_class, k_ctype;
        uint32_t v_arch, v_os, v_ondemand;
        /* zones */
        uint32_t *zone_ids; /* zone index -> value id */
        size_t n_zones, cap_zones;
        int32_t *zone_of_id; /* value id -> zone index or -1 (sized to st.cap) */
        size_t zone_of_cap;
        /* model */
        struct pclass *classes;
        size_t n_classes, cap_classes;
        uint32_t *class_of_pod; /* per input pod */
        struct group *groups;
        size_t n_groups, cap_groups;
        uint32_t *group_of_sig; /* signature id -> group index + 1 */
        size_t group_of_sig_cap;
        uint32_t *class_of_sig;
        size_t class_of_sig_cap;
        uint8_t *selected_key; /* string id -> some pod selector reads this label key */
        size_t selected_key_cap;
        struct slot *slots;
        size_t n_slots, cap_slots;
        size_t counts_cap; /* slots the per-group arrays hold */
        size_t fail_cap;   /* slots every class's slot_fail holds (grown with cap_slots, not slot by slot) */
        struct nodeclass_c *ncs;
        size_t n_ncs;
        struct pool_c *pools;
        size_t n_pools;
        size_t *pool_order;
        struct host_c *hosts;
        size_t n_hosts;
        struct claim_c *claims;
        size_t n_claims, cap_claims;
        int32_t *host_of_zone; /* zone index -> host index or -1 */
        uint32_t *host_order;  /* host indexes, fewest planned claims first, then most free cpus, then index */
        int32_t only_zone;     /* >= 0 while placing the first pod of a zone-affine set: its anchor zone */
        /* the slot index (simulate_index.c) */
        struct slot_room *room;     /* max tree: node 1 the root, leaves room_cap.. (one per slot) */
        size_t room_cap, room_n; /* leaves; slots indexed so far */
        struct zone_slots *zone_slots;
        size_t zone_slots_cap;
        bool home_only;        /* claims planned this round, and new ones, only of the placed pod's home pool */
        char msg[512];
        int error; /* first allocation failure */
};

/* simulate_labels.c */
uint32_t simulate__intern(struct ctx *c, const char *s);
const char *simulate__str(const struct ctx *c, uint32_t id);
int32_t simulate__zone_index(struct ctx *c, uint32_t value_id, bool create);
uint32_t simulate__label(const struct kv *labels, uint32_t n, uint32_t key); /* value id or 0 */
/* A whole decimal int64 (a Gt/Lt bound or label value); false for anything else. */
bool simulate__parse_int(const char *s, int64_t *ret);
bool simulate__req_matches(const struct ctx *c, const struct creq *r, uint32_t value);
bool simulate__term_matches(const struct ctx *c, const struct cterm *t, const struct kv *labels, uint32_t n);
bool simulate__selector_matches(const struct ctx *c, const struct cselector *s, const struct kv *labels,
                                uint32_t n);
void simulate__describe_req(const struct ctx *c, const struct creq *r, char *buf, size_t len);

/* simulate_hosts.c */
enum room { ROOM_OK, ROOM_DEVICE, ROOM_CPUS, ROOM_MEMORY, ROOM_OFFER, ROOM_NUMA };
/* Room for shape si (of node class nc) on h: ROOM_OK and *ret_numa (the NUMA node, -1 when spanning). */
enum room simulate__host_fits(const struct host_c *h, int nc, size_t si, const struct shape *s, int *ret_numa);
void simulate__host_take(struct host_c *h, int nc, size_t si, const struct shape *s, struct claim_c *cl);
void simulate__host_release(struct host_c *h, int nc, size_t si, const struct shape *s, struct claim_c *cl);
/* The host's agent has only its fallback layout (a poor one) left for shape si of node class nc. */
bool simulate__host_poor(const struct host_c *h, int nc, size_t si);
int simulate__prepare_hosts(struct ctx *c);
/* Does any shape of any node class fit host h now? */
bool simulate__host_has_room(struct ctx *c, size_t h);
/* ctx.host_order brought up to date (h->planned changes mark order_dirty too). */
void simulate__host_order_sync(struct ctx *c);

/* simulate_compile.c */
int simulate__compile(struct ctx *c);
/* Shapes of node class nc that satisfy every instance-type/family requirement in reqs. */
void simulate__shape_mask(struct ctx *c, int nc, const struct creq *reqs, uint32_t n, uint64_t *mask);
int simulate__add_slot(struct ctx *c, struct slot **ret);
void simulate__count_pod(struct ctx *c, const struct pclass *pc, size_t slot, int delta);

/* simulate_pools.c */
/* Requirements on one key, from up to three lists (l[0]: the pool's generic requirements). */
struct reqlists {
        const struct creq *l[3];
        uint32_t n[3];
};
/* A new node of this pool could take pods of the class (taints, requirements, shapes; not room). */
bool simulate__pool_compatible(struct ctx *c, struct pclass *pc, size_t pool);
bool simulate__tolerates_pool(struct ctx *c, struct pclass *pc, size_t pool);
const uint64_t *simulate__term_mask(struct ctx *c, struct pclass *pc, int nc, uint32_t term);
/* The first term of the class a new node of pool p could satisfy, its shapes in mask; -1 with the reason in why
 * (when not NULL). */
int simulate__pick_term(struct ctx *c, struct pclass *pc, const struct pool_c *p, uint64_t *mask, char *why,
                        size_t len);
/* Does requirement r hold on a new node with fixed labels (sorted) and the pool's generic requirements? */
bool simulate__new_node_req_ok(const struct ctx *c, const struct creq *r, const struct kv *fixed, uint32_t n_fixed,
                               const struct reqlists *rl);
/* Can a label value be chosen for key that satisfies every requirement on key in the lists? With no
 * In requirement the label must be allowed to stay absent: a value is never invented. The value (0: absent). */
uint32_t simulate__generic_value(const struct ctx *c, const struct reqlists *rl, uint32_t key, bool *ret_ok);
bool simulate__mask_any(const uint64_t *a, const uint64_t *b, size_t words);

/* simulate_topology.c */
enum fit {
        FIT_OK,
        FIT_STATIC,   /* labels, taints, closed: permanent for the class */
        FIT_PORTS,    /* permanent */
        FIT_ANTI,     /* permanent */
        FIT_RESOURCES,
        FIT_AFFINITY, /* may change as pods land */
        FIT_SPREAD,   /* may change as pods land */
};
void simulate__spread_mins(struct ctx *c, struct pclass *pc, bool soft, int32_t *mins);
enum fit simulate__topology_fits(const struct ctx *c, const struct pclass *pc, const int32_t *mins, bool soft,
                                 size_t slot, int32_t zone);
/* The zone where the first pod of a zone self-affine set should anchor it, or -1. */
int32_t simulate__anchor_zone(struct ctx *c, struct pclass *pc);
#define SIM_ZONES_MAX 8 /* zone-affine pods look at the slots and hosts of at most this many zones, else all */
/* The zones a zone affinity term of the class confines its pods to (those running matching pods: no node or
 * host elsewhere passes the term), into zones (SIM_ZONES_MAX); -1 when no term confines them or more than
 * SIM_ZONES_MAX zones remain. */
int simulate__affinity_zones(const struct ctx *c, const struct pclass *pc, int32_t *zones);
bool simulate__zone_in(const int32_t *zones, int n, int32_t zone);

/* simulate_index.c: kept in step by land(); a slot's room changes only when a pod lands. */
int simulate__index_sync(struct ctx *c);          /* index the slots added since */
int simulate__index_update(struct ctx *c, size_t s); /* slot s changed */
/* The first slot >= from whose room holds the cpu and memory of req (a necessary condition), or SIZE_MAX. */
size_t simulate__index_next(const struct ctx *c, size_t from, const struct resources *req);
bool simulate__index_room(const struct ctx *c, size_t s, const struct resources *req);
void simulate__index_free(struct ctx *c);

/* simulate_claims.c */
int simulate__new_claim(struct ctx *c, uint32_t cls, const struct sim_pod *pod, bool soft, size_t *ret_slot,
                        const char **ret_reason);
int simulate__claim_try(struct ctx *c, struct claim_c *cl, const struct pclass *pc, const struct sim_pod *pod,
                        bool commit);
int simulate__claim_result(struct ctx *c, size_t i, struct sim_arena *ra, struct sim_claim *out);
