/* capacity: pure accounting of a host's free CPUs and memory, host-wide and per NUMA node. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpuset.h"
#include "inventory.h"
#include "node_settings.h"
#include "topology.h"

struct capacity_options {
        bool count_stopped_vms; /* stopped VMs and containers will start again, so they are charged (default true) */
};

struct capacity_numa {
        int id;                      /* host NUMA node OS id */
        struct cpuset *free_cpus;    /* node CPUs not reserved and not pinned */
        unsigned cpus_free;          /* |free_cpus| - this node's share of the floating vCPUs */
        uint64_t memory_total_bytes;
        uint64_t memory_free_bytes;  /* total - bound VM memory - its share of unbound charges */
};

/* Rules (docs/agent.md). Counted VMs: every non-template VM, stopped ones too unless count_stopped_vms is
 * false (they will start again). A VM is pinned when it has `affinity`, floating otherwise.
 *  free_cpus   = online - reserved - union(affinity of pinned VMs)     (overlaps count once)
 *  cpus_free   = |free_cpus| - min(floating vCPUs, |free_cpus - isolated|): floating VMs never get isolated
 *                CPUs (the scheduler does not balance onto them), so those stay for pinned placements.
 *  memory_free = total - reserved - sum(VM memory), floored at 0; no overcommit, balloon ignored.
 *  Per node: free_cpus = node cpus & free_cpus; the floating vCPUs charged host-wide are shared out over
 *  nodes in proportion to their non-isolated free CPUs. VMs with numa: 1 and valid numaN hostnodes= have
 *  each numaN memory split evenly over its hostnodes; reserved memory and all other VM memory is spread
 *  over nodes in proportion to node memory. Shares are rounded so they add up exactly, so the nodes' free
 *  memory adds up to memory_free unless a node is overcommitted (each node is floored at 0).
 *  Node-setting nodes{} replaces the NUMA layout: its ids, cpus and memory (missing fields fall back to the
 *  detected node with that id); total memory is then the sum of those nodes.
 * LXC containers (inv->containers) count like VMs, with the same rule for stopped ones; templates and containers
 * whose config cannot be read do not. A container pinned by a raw lxc.cgroup2.cpuset.cpus is pinned to that set
 * (and, while running, to its cpuset.cpus.effective as well); any other one floats with
 * container_cpu_count() CPUs (`cores`, else every online CPU; a smaller cpulimit lowers it): pve-container and
 * pvestatd choose and rebalance its CPUs, so it is a count, not a set. Its `memory` is charged to the host, and
 * to one node when its pinned set lies within that node's CPUs; otherwise it is spread like unbound VM memory.
 * Swap is not charged (VMs' is not either). */
struct capacity {
        struct cpuset *usable_cpus; /* online - reserved */
        struct cpuset *pinned_cpus; /* union of pinned VMs' affinity */
        struct cpuset *free_cpus;
        struct cpuset *reserved_cpus; /* from the node settings, as given */
        struct cpuset *isolated_cpus; /* the host's isolated CPUs: pinned placements only */
        unsigned floating_vcpus;    /* vCPUs of unpinned VMs and CPUs of unpinned containers */
        struct cpuset *container_pinned_cpus; /* union of the pinned containers' sets (also in pinned_cpus) */
        unsigned container_floating_cpus;     /* the unpinned containers' CPUs (also in floating_vcpus) */
        uint64_t container_memory_bytes;      /* the containers' memory (also in memory_used_bytes) */
        unsigned containers_counted;
        unsigned cpus_total;        /* online CPUs */
        unsigned cpus_free;
        uint64_t memory_total_bytes, memory_reserved_bytes, memory_used_bytes, memory_free_bytes;
        size_t n_numa;
        struct capacity_numa *numa; /* same order as topology.numa_nodes */
};

int capacity_compute(const struct topology *t, const struct node_settings *settings, const struct inventory *inv,
                     const struct capacity_options *opts, struct capacity **ret_capacity);
void capacity_free(struct capacity *c);
/* Whether a container is charged (the rules above). */
bool capacity_container_counted(const struct container *ct, const struct capacity_options *opts);
json_t *capacity_to_json(const struct capacity *c);
