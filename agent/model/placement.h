/* placement: the pure NUMA-aware allocator: which host CPUs and NUMA memory a VM gets, and offers. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capacity.h"
#include "cpuset.h"
#include "topology.h"

/* Proxmox allows at most 8 guest NUMA nodes (numa0..numa7). */
#define PLACEMENT_MAX_NUMA 8
/* Proxmox memory (and numaN memory) is counted in MiB. */
#define PLACEMENT_MIB (UINT64_C(1) << 20)
/* The largest VM the allocator accepts (vCPUs). */
#define PLACEMENT_MAX_VCPUS 4096u

struct placement_request {
        unsigned vcpus;        /* >= 1 */
        uint64_t memory_bytes; /* > 0, a whole number of MiB (of hugepages when hugepage_kib is set) */
        uint64_t hugepage_kib; /* 0 = ordinary pages; else the guest memory comes from pages of this size */
        bool near;             /* keep the VM on host NUMA node near_node (a passed-through PCI device's): its
                                * CPUs and memory there alone when that node could ever hold it (a VM larger
                                * than the node is split as any other); not in JSON (see ledger_parse_request) */
        int near_node;         /* OS id */
};

/* One guest NUMA node; it mirrors one host NUMA node. */
struct placement_numa {
        int node;                  /* host NUMA node OS id */
        unsigned first_vcpu;       /* guest vCPUs first_vcpu .. first_vcpu + n_vcpus - 1 */
        unsigned n_vcpus;
        struct cpuset *guest_cpus; /* the same range as a set of guest vCPU indexes */
        uint64_t memory_bytes;     /* whole MiB; the nodes add up exactly to placement.memory_bytes */
};

struct placement {
        struct cpuset *cpus; /* every host CPU of the VM */
        unsigned n_vcpus;
        int *vcpu_map;       /* vcpu_map[i] = host CPU of guest vCPU i; 2k and 2k+1 are SMT siblings when possible */
        uint64_t memory_bytes;
        size_t n_numa;
        struct placement_numa numa[PLACEMENT_MAX_NUMA];
        bool fallback;       /* no preferred layout fitted: a preference (sibling pairs, even or quarter guest
                              * nodes, memory in proportion to vCPUs) was given up; not kept in JSON */
};

/* Check a request: 0, or -EINVAL with a reason naming the field. */
int placement_request_check(const struct placement_request *req, char *reason, size_t reasonlen);

/* Read {"vcpus", "memory_bytes", "hugepage_kib"?} from obj. Unknown keys are NOT rejected here (callers
 * with other fields check them with jsonutil_check_keys). 0, or -EINVAL with a reason naming the field. */
int placement_request_from_json(const json_t *obj, struct placement_request *ret_req, char *reason,
                                size_t reasonlen);

/* Place one VM on what is free (reasonlen 0: no reason is written). `free` is the host's capacity: free_cpus,
 * floating_vcpus and per-node free_cpus / memory_free_bytes; the caller has already removed reserved CPUs, pinned
 * VMs and live reservations. Isolated CPUs (t->isolated) may be given to the VM; the other free CPUs left
 * afterwards still cover floating_vcpus. Hugepage requests use the free pages of that size in t->numa_nodes.
 * Returns 0 and a new placement in *ret_p; -EINVAL (bad request) or -ENOSPC (does not fit), each with
 * a one-line human reason; -ENOMEM. Nothing is changed. */
int placement_place(const struct topology *t, const struct capacity *free, const struct placement_request *req,
                    struct placement **ret_p, char *reason, size_t reasonlen);

/* Subtract a placement from a capacity (CPUs leave free_cpus and the nodes' free_cpus and join
 * pinned_cpus; memory leaves the nodes it was placed on), so that placements can be made one after
 * the other. Hugepages are not tracked by struct capacity. 0, -EINVAL (a node of p is unknown to c,
 * c unchanged) or -ENOMEM. */
int placement_charge(struct capacity *c, const struct placement *p);

/* Check every invariant of a placement against the topology: no CPU twice, vcpu_map covers exactly
 * cpus, at most PLACEMENT_MAX_NUMA guest nodes whose vCPU ranges partition 0..n_vcpus-1, every vCPU on
 * a CPU of its guest node's host node, whole MiB per node adding up exactly to memory_bytes.
 * 0, or -EINVAL with the first violation in reason. */
int placement_validate(const struct topology *t, const struct placement *p, char *reason, size_t reasonlen);

void placement_free(struct placement *p);

/* {"cpus": "0-1,8-9", "vcpu_map": [0, 8, 1, 9], "numa": [{"node", "guest_cpus", "memory_bytes"}]}.
 * New reference, NULL on ENOMEM. */
json_t *placement_to_json(const struct placement *p);

/* The inverse of placement_to_json (for state files). Validates against t with placement_validate.
 * 0, or -EINVAL with a reason naming the field; -ENOMEM. */
int placement_from_json(const struct topology *t, const json_t *obj, struct placement **ret_p, char *reason,
                        size_t reasonlen);

/* Quality of a placement made on capacity `before`, from 0 to 100 (higher is better):
 *   score = 40 * numa + 20 * l3 + 20 * smt + 20 * frag
 *   numa = 1 / (host NUMA nodes used)
 *   l3   = (fewest L3 groups that could hold the VM) / (L3 groups used); an L3 group is an L3 cache
 *          within one NUMA node; 1 when the host has no L3 information
 *   smt  = (guest vCPU pairs 2k,2k+1 on sibling threads) / (pairs); 1 with no pairs or no SMT
 *   frag = (clean + fill) / 2, over the NUMA nodes the VM touches, after the placement:
 *          clean = free CPUs lying in wholly free cores / free CPUs (1 when none are left): the VM
 *                  leaves no half-used cores behind;
 *          fill  = 1 - free CPUs / CPUs of those nodes: best fit, fuller nodes keep big holes elsewhere. */
double placement_score(const struct topology *t, const struct capacity *before, const struct placement *p);

/* What a host offers for one VM shape. */
struct placement_offer {
        unsigned count;         /* how many such VMs could be placed now, one after the other (greedy) */
        unsigned preferred;     /* how many of those, from the first, get a preferred layout (not the fallback) */
        bool count_capped;      /* counting stopped at max_count */
        struct placement *best; /* the placement the next such VM gets; NULL when count == 0 */
        double score;           /* placement_score of best, 0 when count == 0 */
};

/* Fill *ret_offer for req on capacity `free` (not modified: the greedy count runs on a copy); max_count
 * bounds the count (0 counts as 1).
 * When nothing fits, count is 0 and reason says why. 0, -EINVAL (bad request, reason set), -ENOMEM.
 * Release with placement_offer_done(). */
int placement_offer(const struct topology *t, const struct capacity *free, const struct placement_request *req,
                    unsigned max_count, struct placement_offer *ret_offer, char *reason, size_t reasonlen);
void placement_offer_done(struct placement_offer *o);

/* {"count", "preferred_count", "count_capped", "score", "fallback", "placement": <placement_to_json> or
 * null}; fallback: the placement is the fallback's (best->fallback), a host with a preferred layout should
 * be chosen first. NULL on ENOMEM. */
json_t *placement_offer_to_json(const struct placement_offer *o);
