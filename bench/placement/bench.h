/* bench/placement: shared declarations of the placement benchmark (driver, baseline placer, metrics). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "capacity.h"
#include "placement.h"
#include "topology.h"

/* One placed VM as the metrics see it, whichever placer made it. */
struct bench_vm {
        struct cpuset *cpus;
        int *vcpu_map;         /* host CPU of guest vCPU i */
        unsigned n_vcpus;
        uint64_t memory_bytes; /* the VM memory */
        size_t n_numa;         /* numaN entries written to the VM config */
        uint64_t numa_sum;     /* what those numaN memories add up to */
};

void bench_vm_done(struct bench_vm *vm);

/* The seed's static policy: NUMA nodes qualify only with free memory >= the whole VM memory; the
 * kubelet packed order over them (whole nodes, whole L3 groups, one partial L3 group when the rest
 * fits in it, whole cores, threads; fewest free CPUs first); vcpu_map in ascending CPU order
 * (defect 5); every touched node gets a numaN with the whole memory (defect 1). 0 or -ENOSPC. */
int baseline_place(const struct topology *t, const struct capacity *c, const struct placement_request *req,
                   struct bench_vm *ret_vm);

/* Charge like the seed: CPUs leave the free sets, the whole VM memory leaves every touched node. */
void baseline_charge(const struct topology *t, struct capacity *c, const struct bench_vm *vm);
