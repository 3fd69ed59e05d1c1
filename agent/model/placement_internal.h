/* placement_internal: the split rules placement.c applies to a VM no NUMA node can hold; pure, for unit tests. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* One host node of a candidate node set. Shares are counted in units: pairs of sibling threads on SMT
 * hosts (so every guest node gets an even vCPU count and whole cores), single CPUs otherwise. */
struct placement__slot {
        unsigned lo, hi; /* fewest / most units this node may take (hi from its whole cores and its memory) */
        unsigned free;   /* free CPUs of the node, for the fill order */
        bool whole;      /* every CPU of the node is free */
};

/* How a split distributes the units, in order of preference. */
enum placement__shape {
        PLACEMENT__WHOLE,    /* wholly free nodes take all they can (largest first), the rest goes to the others */
        PLACEMENT__BALANCED, /* shares as equal as the bounds allow (water filling) */
        PLACEMENT__FILL,     /* the fullest nodes take all they can first: leftovers get used up */
        PLACEMENT__N_SHAPES,
};

/* Distribute total units over the k slots with lo <= units[j] <= hi, shaped as asked. false when
 * no distribution exists (sum of lo > total, sum of hi < total, or lo > hi somewhere). */
bool placement__split(const struct placement__slot *slots, size_t k, unsigned total, enum placement__shape shape,
                      unsigned *units);

/* What a distribution looks like, whatever made it: PLACEMENT__WHOLE when every node but at most one
 * is a wholly free node taking its hi; PLACEMENT__BALANCED when shares differ by at most one unit;
 * PLACEMENT__FILL otherwise (leftovers filled). */
enum placement__shape placement__split_class(const struct placement__slot *slots, size_t k, const unsigned *units);

/* How many nodes a distribution takes whole: wholly free nodes given their hi. */
size_t placement__split_whole(const struct placement__slot *slots, size_t k, const unsigned *units);

/* The fewest units a guest node of a vcpus-vCPU VM holds so that it has at least a quarter of the VM. */
unsigned placement__quarter_units(unsigned vcpus, unsigned unit);
