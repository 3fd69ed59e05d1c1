/* hosttune_plan: host tuning decisions as pure functions: each CPU's role, where other IRQs go, the originals. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>

#include "cpuset.h"

enum hosttune_role {
        HOSTTUNE_LEAVE, /* reserved for the host, or not online: the agent never touches it */
        HOSTTUNE_BUSY,  /* pinned to a running VM: the busy governor */
        HOSTTUNE_FREE,  /* anything else: the free governor */
};

/* The role of a cpufreq policy's CPUs (cpuN/cpufreq/affected_cpus: one governor for all of them): LEAVE when
 * one of them is to be left alone, else BUSY when one is busy, else FREE. policy NULL: cpu's own role. */
enum hosttune_role hosttune_policy_role(unsigned cpu, const struct cpuset *policy, const struct cpuset *online,
                                        const struct cpuset *reserved, const struct cpuset *busy);
/* "busy", "free" or "reserved". */
const char *hosttune_role_to_string(enum hosttune_role role);

/* Where an IRQ that serves no VM should go so that it stays off the pinned CPUs: its current CPUs without the
 * pinned ones, or, when all its CPUs are pinned, every online CPU that is not. Returns 1 with a new set in *ret
 * when the IRQ must move, 0 when it is already off the pinned CPUs or no CPU would be left, -ENOMEM. */
int hosttune_irq_off_pinned(const struct cpuset *current, const struct cpuset *pinned, const struct cpuset *online,
                            struct cpuset **ret);

/* The originals: {"cpus": {"<cpu>": {"<file>": "<value>"}}, "irqs": {"<irq>": "<cpulist>"}}, what the agent changed
 * as it was before the agent's first write. A new empty one, or NULL on ENOMEM. */
json_t *hosttune_originals_new(void);
/* Remember one value unless a value of the same file is remembered already (the first one is the original).
 * 1 when added, 0 when it was there, -ENOMEM. */
int hosttune_originals_note_cpu(json_t *orig, unsigned cpu, const char *file, const char *value);
int hosttune_originals_note_irq(json_t *orig, int irq, const struct cpuset *cpus);
/* Forget a CPU file's original (a write that failed changed nothing). */
void hosttune_originals_forget_cpu(json_t *orig, unsigned cpu, const char *file);
/* The remembered cpulist of an IRQ, or NULL. */
const char *hosttune_originals_irq(const json_t *orig, int irq);
/* Forget an IRQ's original (it was written back). */
void hosttune_originals_forget_irq(json_t *orig, int irq);
/* Whether the originals are a well-formed document (a state file read back). */
bool hosttune_originals_valid(const json_t *orig);
/* How many values are remembered. */
size_t hosttune_originals_count(const json_t *orig);
