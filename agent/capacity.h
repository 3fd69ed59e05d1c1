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
        bool count_stopped_vms; /* stopped VMs will start again, so they are charged (default true) */
};

struct capacity_numa {
        int id;                      /* host NUMA node OS id */
        struct cpuset *free_cpus;    /* node CPUs not reserved and not pinned */
        uint64_t memory_total_bytes;
        uint64_t memory_free_bytes;  /* total - bound VM memory - its share of unbound charges */
};

/* Rules (docs/agent.md):
 *  free_cpus   = online - reserved - union(affinity of pinned VMs)
 *  cpus_free   = |free_cpus| - floating vCPUs, where floating vCPUs are charged only to non-isolated CPUs
 *  memory_free = total - reserved - sum(VM memory); no overcommit.
 *  Per node: VMs with numaN hostnodes= are charged to those nodes as configured; reserved memory and
 *  unbound VM memory are spread over nodes in proportion to node size. */
struct capacity {
        struct cpuset *usable_cpus; /* online - reserved */
        struct cpuset *pinned_cpus; /* union of pinned VMs' affinity */
        struct cpuset *free_cpus;
        unsigned floating_vcpus;    /* vCPUs of unpinned VMs */
        unsigned cpus_free;
        uint64_t memory_total_bytes, memory_reserved_bytes, memory_used_bytes, memory_free_bytes;
        size_t n_numa;
        struct capacity_numa *numa; /* same order as topology.numa_nodes */
};

int capacity_compute(const struct topology *t, const struct node_settings *settings, const struct inventory *inv,
                     const struct capacity_options *opts, struct capacity **ret_capacity);
void capacity_free(struct capacity *c);
json_t *capacity_to_json(const struct capacity *c);
