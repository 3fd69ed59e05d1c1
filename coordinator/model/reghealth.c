/* reghealth: a NodePool's NodeRegistrationHealthy condition as Karpenter keeps it (nodepoolhealth's ring of the
 * last four launch results; registrationhealth's reset on a new generation). Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "reghealth.h"

#include <string.h>

#include "rfc3339.h"

void reghealth_track(struct reghealth *h, int64_t pool_generation, int64_t class_generation) {
        if (h->pool_generation == pool_generation && h->class_generation == class_generation)
                return;
        *h = (struct reghealth){ .pool_generation = pool_generation, .class_generation = class_generation };
}

void reghealth_add(struct reghealth *h, bool success) {
        h->results[h->next] = success;
        h->next = (h->next + 1) % REGHEALTH_BUFFER;
        if (h->n < REGHEALTH_BUFFER)
                h->n++;
}

enum reghealth_status reghealth_status(const struct reghealth *h) {
        size_t failures = 0;
        if (h->n == 0)
                return REGHEALTH_UNKNOWN;
        for (size_t i = 0; i < h->n; i++)
                failures += !h->results[i];
        /* Karpenter divides by the buffer's size, not by how many results it holds: one failure alone is no verdict */
        return 2 * failures >= REGHEALTH_BUFFER ? REGHEALTH_UNHEALTHY : REGHEALTH_HEALTHY;
}

enum reghealth_status reghealth_status_with(const struct reghealth *h, bool success) {
        struct reghealth copy = *h;
        reghealth_add(&copy, success);
        return reghealth_status(&copy);
}

static const json_t *condition(const json_t *pool) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(pool, "status"), "conditions"), i, c) {
                const char *t = json_string_value(json_object_get(c, "type"));
                if (t && strcmp(t, REGHEALTH_CONDITION) == 0)
                        return c;
        }
        return NULL;
}

const char *reghealth_condition_status(const json_t *pool) {
        return json_string_value(json_object_get(condition(pool), "status"));
}

static int64_t generation(const json_t *pool) {
        return json_integer_value(json_object_get(json_object_get(pool, "metadata"), "generation"));
}

bool reghealth_stale(const json_t *pool, int64_t class_generation) {
        const json_t *c = condition(pool);
        const json_t *seen = json_object_get(json_object_get(pool, "status"), "nodeClassObservedGeneration");
        return !c || json_integer_value(json_object_get(c, "observedGeneration")) != generation(pool) ||
               !json_is_integer(seen) || json_integer_value(seen) != class_generation;
}

static json_t *new_condition(const json_t *old, const char *status, const char *reason, const char *message,
                             int64_t pool_generation, int64_t now_ms) {
        char at[40];
        const char *was = json_string_value(json_object_get(old, "status"));
        const char *since = json_string_value(json_object_get(old, "lastTransitionTime"));
        if (!was || strcmp(was, status) != 0 || !since)
                since = rfc3339_format(now_ms, at, sizeof at);
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "type", REGHEALTH_CONDITION, "status", status, "reason",
                         reason, "message", message, "lastTransitionTime", since, "observedGeneration",
                         (json_int_t)pool_generation);
}

json_t *reghealth_patch(const json_t *pool, const char *status, const char *reason, const char *message,
                        int64_t class_generation, int64_t now_ms) {
        const json_t *old = condition(pool);
        json_t *list = json_array(), *c;
        size_t i;
        int r = list ? 0 : -1;
        json_array_foreach(json_object_get(json_object_get(pool, "status"), "conditions"), i, c) {
                if (c != old && r == 0)
                        r = json_array_append(list, c);
        }
        if (r == 0)
                r = json_array_append_new(list, new_condition(old, status, reason, message, generation(pool), now_ms));
        if (r < 0) {
                json_decref(list);
                return NULL;
        }
        return json_pack("{s:{s:o, s:I}}", "status", "conditions", list, "nodeClassObservedGeneration",
                         (json_int_t)class_generation);
}
