/* simulate: the coordinator's pure scheduling simulation. Pending pods, nodes, node pools, daemon sets and
 * host room go in; placements onto existing nodes, planned node claims and reasons come out. No I/O. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resources.h"
#include "shapes.h"

/* Types carry the short prefix sim_, functions the module prefix simulate_. All strings and arrays of an
 * input live in its arena (simulate_strdup / simulate_alloc) and die with simulate_input_free(). */

/* Well-known labels a planned node carries. */
#define SIM_LABEL_HOSTNAME "kubernetes.io/hostname"
#define SIM_LABEL_ARCH "kubernetes.io/arch"
#define SIM_LABEL_OS "kubernetes.io/os"
#define SIM_LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"
#define SIM_LABEL_REGION "topology.kubernetes.io/region"
#define SIM_LABEL_ZONE "topology.kubernetes.io/zone"
#define SIM_LABEL_FAMILY "pvescale.io/instance-family"
#define SIM_LABEL_NODEPOOL "pvescale.io/nodepool"
#define SIM_LABEL_NODECLASS "pvescale.io/nodeclass"
#define SIM_LABEL_CAPACITY_TYPE "karpenter.sh/capacity-type"

struct sim_label {
        const char *key, *value;
};

enum sim_op { SIM_OP_IN, SIM_OP_NOT_IN, SIM_OP_EXISTS, SIM_OP_DOES_NOT_EXIST, SIM_OP_GT, SIM_OP_LT };

/* A node selector requirement, a label selector expression or a NodePool requirement. */
struct sim_requirement {
        const char *key;
        enum sim_op op;
        const char **values;
        size_t n_values;
};

/* One nodeSelectorTerm: all requirements must hold. */
struct sim_node_term {
        struct sim_requirement *reqs;
        size_t n_reqs;
};

/* A label selector: matchLabels and matchExpressions, all must hold. An empty selector matches all;
 * match_none stands for a missing (null) selector, which matches nothing. */
struct sim_selector {
        bool match_none;
        struct sim_label *match_labels;
        size_t n_match_labels;
        struct sim_requirement *exprs;
        size_t n_exprs;
};

enum sim_effect { SIM_EFFECT_ANY = 0, SIM_EFFECT_NO_SCHEDULE, SIM_EFFECT_PREFER_NO_SCHEDULE, SIM_EFFECT_NO_EXECUTE };

struct sim_taint {
        const char *key, *value;
        enum sim_effect effect;
};

/* key NULL with exists = tolerate everything; effect ANY = every effect. */
struct sim_toleration {
        const char *key, *value;
        bool exists;
        enum sim_effect effect;
};

/* A required pod (anti-)affinity term. namespaces NULL/0 = the pod's own namespace. */
struct sim_pod_term {
        struct sim_selector selector;
        const char *topology_key;
        const char **namespaces;
        size_t n_namespaces;
};

struct sim_spread {
        const char *topology_key;
        int32_t max_skew;
        int32_t min_domains; /* 0 = unset */
        bool do_not_schedule; /* false: ScheduleAnyway, a preference */
        struct sim_selector selector;
};

struct sim_pod {
        const char *namespace, *name;
        const char *node_name; /* set for pods already bound to a node; NULL for pending pods */
        struct sim_label *labels;
        size_t n_labels;
        struct resources requests; /* max(init, sum(containers)) + overhead; pods = 1 */
        struct sim_label *node_selector;
        size_t n_node_selector;
        struct sim_node_term *affinity; /* required node affinity: terms are ORed */
        size_t n_affinity;
        struct sim_toleration *tolerations;
        size_t n_tolerations;
        struct sim_pod_term *pod_affinity, *pod_anti_affinity;
        size_t n_pod_affinity, n_pod_anti_affinity;
        struct sim_spread *spread;
        size_t n_spread;
        uint32_t *host_ports; /* (protocol << 16) | port */
        size_t n_host_ports;
        const char *unschedulable_reason; /* e.g. an extended resource no node class provides */
        bool skip_nodes; /* kept off the existing Nodes (not in-flight claims): kube-scheduler refused it there */
};

/* An existing Node, or an in-flight NodeClaim that has no Node yet. */
struct sim_node {
        const char *name;
        struct sim_label *labels;
        size_t n_labels;
        struct sim_taint *taints;
        size_t n_taints;
        struct resources capacity;    /* counts toward its NodePool's limits */
        struct resources allocatable;
        struct resources reserved;    /* requested by pods not in the input (e.g. expected daemon set pods) */
        bool in_flight;
        bool unschedulable;           /* cordoned or being deleted: takes no pods */
        bool leaving;                 /* marked for deletion (being deleted or disrupted, or a trial's candidate):
                                       * does not count toward its NodePool's limits, as Karpenter's scheduler
                                       * counts only active nodes, so it does not hold the limit against its own
                                       * replacement */
        const char *nodepool;         /* NULL when not ours */
};

struct sim_nodeclass {
        const char *name;
        const char *region;                 /* NULL: any PVE cluster */
        const struct shape_catalog *shapes; /* borrowed; must outlive the simulation */
        const char **pci_mappings;          /* one per pciDevices entry: the Proxmox resource mapping each VM of the
                                             * class takes a free device of, on its host */
        size_t n_pci;
};

struct sim_nodepool {
        const char *name;
        int32_t weight;
        const char *nodeclass;
        struct sim_label *labels; /* template.metadata.labels */
        size_t n_labels;
        struct sim_requirement *reqs;
        size_t n_reqs;
        struct sim_taint *taints; /* template.spec.taints (startup taints do not affect scheduling) */
        size_t n_taints;
        int64_t limit_cpu_milli, limit_memory_bytes, limit_nodes; /* < 0: no limit */
};

/* Free room on one NUMA node of a host. total_cpus 0 = unknown (taken as free_cpus). */
struct sim_numa {
        int id;
        uint32_t free_cpus, total_cpus;
        uint64_t free_memory_bytes;
};

/* An agent offer: how many VMs of this shape the host could take now, and how well the next one lies. */
struct sim_offer {
        const char *shape;
        uint32_t count;
        uint32_t preferred; /* how many of count get the agent's preferred layout, the first ones; the rest its
                             * fallback (pairs broken, small or unbalanced guest nodes), which the shape gets
                             * only where no host offers a preferred layout */
        bool fallback;      /* the next VM's layout is the fallback (preferred == 0) */
        double score;       /* the next VM's layout score (0-100; -1 unknown) */
};

/* Free PCI devices of one Proxmox resource mapping on a host (its paths there not held by a VM). */
struct sim_device {
        const char *mapping;
        uint32_t free;
};

/* A PVE host: one zone of one region. A VM that fits one NUMA node's size must fit one NUMA node's free
 * room; larger VMs may span. With offers, a shape must be offered instead (count > claims planned on it):
 * the agent spans a VM no node has room for in its fallback layout. */
struct sim_host {
        const char *name;   /* the zone */
        const char *region; /* the PVE cluster */
        uint32_t free_cpus;
        uint64_t free_memory_bytes;
        struct sim_numa *numa;
        size_t n_numa;
        struct sim_offer *offers;
        size_t n_offers;
        bool has_offers;
        struct sim_device *devices; /* a mapping not listed has no free device here */
        size_t n_devices;
};

struct sim_input {
        struct sim_pod **pods;
        size_t n_pods, cap_pods;
        struct sim_node **nodes;
        size_t n_nodes, cap_nodes;
        struct sim_nodepool **pools;
        size_t n_pools, cap_pools;
        struct sim_nodeclass **classes;
        size_t n_classes, cap_classes;
        struct sim_pod **daemonsets; /* pod templates; name = the DaemonSet */
        size_t n_daemonsets, cap_daemonsets;
        struct sim_host **hosts;
        size_t n_hosts, cap_hosts;
        const char *arch, *os; /* of planned nodes; default amd64, linux */
        const char *extended[RESOURCE_EXTENDED_N]; /* the names of the extended resource slots the node classes
                                                    * provide (simulate_extended_kind), NULL: unused */
        size_t max_claims;     /* 0: no cap */
        struct sim_arena *arena;
};

struct sim_input *simulate_input_new(void);
void simulate_input_free(struct sim_input *in);
/* Zeroed memory / a copy of s in the input's arena (NULL on ENOMEM; simulate_strdup(NULL) = NULL). */
void *simulate_alloc(struct sim_input *in, size_t size);
char *simulate_strdup(struct sim_input *in, const char *s);
/* Append a new zeroed object to the input and return it (NULL on ENOMEM). */
struct sim_pod *simulate_add_pod(struct sim_input *in);
struct sim_node *simulate_add_node(struct sim_input *in);
struct sim_nodepool *simulate_add_nodepool(struct sim_input *in);
struct sim_nodeclass *simulate_add_nodeclass(struct sim_input *in);
struct sim_pod *simulate_add_daemonset(struct sim_input *in);
struct sim_host *simulate_add_host(struct sim_input *in);

enum sim_target {
        SIM_TARGET_BOUND,      /* an input pod already bound: untouched */
        SIM_TARGET_NODE,       /* fits an existing node or in-flight claim: index into input nodes */
        SIM_TARGET_CLAIM,      /* a node claim planned this round: index into result claims */
        SIM_TARGET_UNPLACED,   /* stays pending: reason says why */
};

struct sim_placement {
        enum sim_target target;
        size_t index;
        const char *reason; /* for UNPLACED; lives in the result */
};

struct sim_claim {
        size_t nodepool;            /* index into input pools */
        const struct shape *shape;  /* the cheapest shape holding what is packed */
        size_t host;                /* index into input hosts: zone and region */
        struct sim_label *labels;   /* the labels the node will carry, sorted by key */
        size_t n_labels;
        struct resources requests;  /* pods + daemon set overhead */
        struct resources daemon_overhead;
        size_t *pods;               /* indices into input pods, in placement order */
        size_t n_pods, cap_pods;
        /* Claims of this round (indices into result claims) whose Nodes should take pods before this one's: claims
         * of another pool holding pods this pool's nodes also take, while none of this claim's pods could go to
         * theirs. kube-scheduler would give such a pod this node's room as readily as its own claim's when this
         * Node is ready first, and the pods planned here would be left without room. */
        size_t *after;
        size_t n_after;
};

struct sim_result {
        struct sim_placement *placements; /* one per input pod, input order */
        size_t n_placements;
        struct sim_claim *claims;
        size_t n_claims, cap_claims;
        size_t n_unplaced, n_on_nodes;
        struct sim_arena *arena;
};

/* The resource slot of extended resource name (e.g. "nvidia.com/gpu"): RESOURCE_EXTENDED_0 + i; with add, a free slot
 * is taken for a new name. -1 when unknown (or, with add, -ENOSPC when every slot is taken). */
int simulate_extended_kind(struct sim_input *in, const char *name, bool add);
/* resources_name(), with the input's names of the extended slots. */
const char *simulate_resource_name(const struct sim_input *in, int kind);

/* Run the simulation. 0 and *ret_result, -ENOMEM, or -EINVAL when the input is inconsistent (a pod's
 * node_name or a NodePool's node class that do not exist are not errors: they are reasons). */
int simulate_run(const struct sim_input *in, struct sim_result **ret_result);
void simulate_result_free(struct sim_result *r);

/* Scale-down's guard: for each input node, the first pending pod (an index into input pods) that could be bound to
 * it now, by the predicates of simulate_run: taints, nodeSelector and required node affinity, resources, host ports,
 * required pod affinity and anti-affinity (an incoming pod's and the bound pods' own), and topology spread that is
 * DoNotSchedule, with every bound pod counted; SIZE_MAX when none. Preferences (ScheduleAnyway, preferred terms) and
 * pods the run cannot simulate (unschedulable_reason, an unsupported topology key) never count. ret holds
 * in->n_nodes entries. 0, -ENOMEM or -EINVAL. */
int simulate_pending_fit(const struct sim_input *in, size_t *ret);

/* Helpers also used by the controller. */
bool simulate_tolerates(const struct sim_toleration *tols, size_t n_tols, const struct sim_taint *taint);
const char *simulate_label_get(const struct sim_label *labels, size_t n, const char *key);
