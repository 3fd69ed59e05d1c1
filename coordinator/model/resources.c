/* resources: the fixed vector of schedulable Kubernetes resources the coordinator accounts for. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "resources.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "quantity.h"

static const char *const NAMES[RESOURCE_COUNT] = {
        [RESOURCE_CPU] = "cpu",
        [RESOURCE_MEMORY] = "memory",
        [RESOURCE_EPHEMERAL_STORAGE] = "ephemeral-storage",
        [RESOURCE_PODS] = "pods",
        [RESOURCE_HUGEPAGES_2MI] = "hugepages-2Mi",
        [RESOURCE_HUGEPAGES_1GI] = "hugepages-1Gi",
        [RESOURCE_EXTENDED_0] = "extended",
        [RESOURCE_EXTENDED_1] = "extended",
};

const char *resources_name(enum resource_kind kind) {
        return (unsigned)kind < RESOURCE_COUNT ? NAMES[kind] : "?";
}

int resources_kind_from_name(const char *name) {
        for (int k = 0; k < RESOURCE_STANDARD_COUNT; k++)
                if (strcmp(name, NAMES[k]) == 0)
                        return k;
        return -1;
}

void resources_add(struct resources *acc, const struct resources *x) {
        for (int k = 0; k < RESOURCE_COUNT; k++)
                acc->v[k] += x->v[k];
}

void resources_sub(struct resources *acc, const struct resources *x) {
        for (int k = 0; k < RESOURCE_COUNT; k++)
                acc->v[k] -= x->v[k];
}

void resources_max(struct resources *acc, const struct resources *x) {
        for (int k = 0; k < RESOURCE_COUNT; k++)
                if (x->v[k] > acc->v[k])
                        acc->v[k] = x->v[k];
}

int resources_first_excess(const struct resources *a, const struct resources *b, const struct resources *limit) {
        for (int k = 0; k < RESOURCE_COUNT; k++)
                if (a->v[k] + b->v[k] > limit->v[k])
                        return k;
        return -1;
}

bool resources_fit(const struct resources *a, const struct resources *b, const struct resources *limit) {
        return resources_first_excess(a, b, limit) < 0;
}

char *resources_format_value(enum resource_kind kind, int64_t value, char *buf, size_t len) {
        if (kind == RESOURCE_CPU)
                return quantity_format_milli(value, buf, len);
        if (kind == RESOURCE_PODS || kind >= RESOURCE_EXTENDED_0) {
                snprintf(buf, len, "%" PRId64, value);
                return buf;
        }
        return quantity_format_bytes_human(value, buf, len);
}

static void set_quantity(json_t *obj, enum resource_kind k, int64_t v) {
        char buf[64];
        if (k == RESOURCE_CPU)
                quantity_format_milli(v, buf, sizeof buf);
        else if (k == RESOURCE_PODS)
                snprintf(buf, sizeof buf, "%" PRId64, v);
        else
                quantity_format_bytes(v, buf, sizeof buf);
        json_object_set_new(obj, resources_name(k), json_string(buf));
}

json_t *resources_to_json(const struct resources *res) {
        json_t *o = json_object();
        for (int k = 0; o && k < RESOURCE_STANDARD_COUNT; k++)
                if (res->v[k] != 0 || k == RESOURCE_CPU || k == RESOURCE_MEMORY || k == RESOURCE_PODS)
                        set_quantity(o, (enum resource_kind)k, res->v[k]);
        return o;
}
