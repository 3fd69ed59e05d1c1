/* cpuset: growable CPU bitmaps that parse and print Linux cpulists ("0,2,4-6") and cpumasks. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Highest CPU number accepted by the parsers (Linux NR_CPUS is at most 8192). */
#define CPUSET_MAX_CPU 8191

struct cpuset;

/* Allocation. cpuset_free() accepts NULL. Every call returning a pointer returns NULL on ENOMEM. */
struct cpuset *cpuset_new(void);
struct cpuset *cpuset_dup(const struct cpuset *s);
void cpuset_free(struct cpuset *s);

/* Parse a cpulist such as "0,2,4-6" (surrounding white space and a trailing newline are allowed; ""
 * is the empty set). Returns 0 and a new set in *ret_set, -EINVAL on a syntax error, -ERANGE for a CPU
 * above CPUSET_MAX_CPU or a reversed range, -ENOMEM. */
int cpuset_parse(const char *list, struct cpuset **ret_set);

/* Canonical cpulist: ascending, ranges merged, "" for the empty set. Caller frees; NULL on ENOMEM. */
char *cpuset_format(const struct cpuset *s);

/* Membership. cpuset_set() grows the set: 0, -ERANGE (cpu > CPUSET_MAX_CPU) or -ENOMEM. */
int cpuset_set(struct cpuset *s, unsigned cpu);
void cpuset_clear(struct cpuset *s, unsigned cpu);
bool cpuset_test(const struct cpuset *s, unsigned cpu);
void cpuset_zero(struct cpuset *s);

/* Queries. */
unsigned cpuset_count(const struct cpuset *s);
bool cpuset_is_empty(const struct cpuset *s);
bool cpuset_equal(const struct cpuset *a, const struct cpuset *b);
bool cpuset_intersects(const struct cpuset *a, const struct cpuset *b);
bool cpuset_is_subset(const struct cpuset *sub, const struct cpuset *super);
unsigned cpuset_count_and(const struct cpuset *a, const struct cpuset *b);
/* Lowest set CPU above prev (pass -1 to start), or -1 when there is none. */
int cpuset_next(const struct cpuset *s, int prev);
/* Highest set CPU, or -1 for the empty set. */
int cpuset_last(const struct cpuset *s);

/* In-place set algebra on dst. The growing ones return 0 or -ENOMEM. */
int cpuset_copy(struct cpuset *dst, const struct cpuset *src);
int cpuset_or(struct cpuset *dst, const struct cpuset *src);
void cpuset_and(struct cpuset *dst, const struct cpuset *src);
void cpuset_andnot(struct cpuset *dst, const struct cpuset *src);

#define CPUSET_FOREACH(cpu, set) for (int cpu = cpuset_next((set), -1); cpu >= 0; cpu = cpuset_next((set), cpu))
