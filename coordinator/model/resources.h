/* resources: the fixed vector of schedulable Kubernetes resources the coordinator accounts for. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* cpu is in millicores; memory, ephemeral-storage and hugepages in bytes; pods is a count. */
enum resource_kind {
        RESOURCE_CPU,
        RESOURCE_MEMORY,
        RESOURCE_EPHEMERAL_STORAGE,
        RESOURCE_PODS,
        RESOURCE_HUGEPAGES_2MI,
        RESOURCE_HUGEPAGES_1GI,
        RESOURCE_EXTENDED_0, /* extended resources (e.g. nvidia.com/gpu, a count): their names are the simulation
                              * input's (sim_input.extended), not this module's */
        RESOURCE_EXTENDED_1,
        RESOURCE_COUNT,
};
#define RESOURCE_STANDARD_COUNT RESOURCE_EXTENDED_0
#define RESOURCE_EXTENDED_N (RESOURCE_COUNT - RESOURCE_EXTENDED_0)

struct resources {
        int64_t v[RESOURCE_COUNT];
};

/* The Kubernetes name of a resource ("cpu", "hugepages-2Mi", ...; "extended" for an extended slot), and back (-1
 * when unknown: extended resources are never found here). */
const char *resources_name(enum resource_kind kind);
int resources_kind_from_name(const char *name);

void resources_add(struct resources *acc, const struct resources *x);
void resources_sub(struct resources *acc, const struct resources *x);
/* acc[k] = max(acc[k], x[k]) for every k. */
void resources_max(struct resources *acc, const struct resources *x);
/* true when a + b <= limit in every resource. */
bool resources_fit(const struct resources *a, const struct resources *b, const struct resources *limit);
/* The first resource where a + b > limit, or -1 when it fits. */
int resources_first_excess(const struct resources *a, const struct resources *b, const struct resources *limit);

/* One resource value as Kubernetes text: "1500m", "4Gi", "110". Returns buf. */
char *resources_format_value(enum resource_kind kind, int64_t value, char *buf, size_t len);
/* A Kubernetes resource list ({"cpu": "1500m", "memory": "4Gi", ...}); zero values are left out except cpu, memory
 * and pods, and so are the extended slots (their names are the caller's). New reference, NULL on allocation
 * failure. */
json_t *resources_to_json(const struct resources *res);
