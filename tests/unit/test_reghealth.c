/* Tests for coordinator/model/reghealth: NodeRegistrationHealthy's ring of launch results, its reset on a new
 * generation, and the status patches. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "reghealth.h"

#define T0 1700000000000LL /* 2023-11-14T22:13:20Z */

/* As Karpenter's nodepoolhealth: Unknown when empty, False at half of the buffer's four places failed (one failure
 * alone is not enough, even with nothing else known), True otherwise; the oldest result falls out. */
static void test_ring(void **state) {
        (void)state;
        struct reghealth h = { .pool_generation = -1 };
        reghealth_track(&h, 1, 1);
        assert_int_equal(reghealth_status(&h), REGHEALTH_UNKNOWN);
        assert_int_equal(reghealth_status_with(&h, false), REGHEALTH_HEALTHY);
        reghealth_add(&h, false);
        assert_int_equal(reghealth_status_with(&h, false), REGHEALTH_UNHEALTHY);
        assert_int_equal(reghealth_status(&h), REGHEALTH_HEALTHY); /* the dry run left h alone */
        reghealth_add(&h, false);
        assert_int_equal(reghealth_status(&h), REGHEALTH_UNHEALTHY);
        reghealth_add(&h, true);
        reghealth_add(&h, true);
        assert_int_equal(reghealth_status(&h), REGHEALTH_UNHEALTHY); /* [F F T T]: still half */
        reghealth_add(&h, true);                                      /* [T F T T]: the first F fell out */
        assert_int_equal(reghealth_status(&h), REGHEALTH_HEALTHY);
        /* the same generations keep the results; a new one of the pool or of its class empties them */
        reghealth_track(&h, 1, 1);
        assert_int_equal(h.n, REGHEALTH_BUFFER);
        reghealth_track(&h, 2, 1);
        assert_int_equal(reghealth_status(&h), REGHEALTH_UNKNOWN);
        reghealth_add(&h, true);
        reghealth_track(&h, 2, 5);
        assert_int_equal(h.n, 0);
}

static json_t *pool(int64_t generation, json_t *status) {
        json_t *p = json_pack("{s:{s:s, s:I}}", "metadata", "name", "default", "generation", (json_int_t)generation);
        if (status)
                json_object_set_new(p, "status", status);
        return p;
}

static const json_t *condition(const json_t *patch, const char *type) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(patch, "status"), "conditions"), i, c)
                if (strcmp(json_string_value(json_object_get(c, "type")), type) == 0)
                        return c;
        return NULL;
}

/* Stale (back to Unknown) without the condition, or when the pool's generation or its class's differs from the one
 * it was computed for. */
static void test_stale(void **state) {
        (void)state;
        json_t *p = pool(3, NULL);
        assert_null(reghealth_condition_status(p));
        assert_true(reghealth_stale(p, 1));
        json_t *patch = reghealth_patch(p, "True", REGHEALTH_CONDITION, "", 7, T0);
        json_object_set(p, "status", json_object_get(patch, "status"));
        assert_string_equal(reghealth_condition_status(p), "True");
        assert_false(reghealth_stale(p, 7));
        assert_true(reghealth_stale(p, 8)); /* the class changed */
        json_object_set_new(json_object_get(p, "metadata"), "generation", json_integer(4));
        assert_true(reghealth_stale(p, 7)); /* the pool changed */
        json_decref(patch);
        json_decref(p);
}

/* The patch keeps other conditions, sets observedGeneration and nodeClassObservedGeneration, and moves
 * lastTransitionTime only when the status changes. */
static void test_patch(void **state) {
        (void)state;
        json_t *p = pool(2, json_pack("{s:[{s:s, s:s}, {s:s, s:s, s:s}]}", "conditions", "type", "Ready", "status",
                                      "True", "type", REGHEALTH_CONDITION, "status", "False", "lastTransitionTime",
                                      "2020-01-01T00:00:00Z"));
        json_t *same = reghealth_patch(p, "False", REGHEALTH_REASON_FAILED, "Failed to register node", 9, T0);
        const json_t *c = condition(same, REGHEALTH_CONDITION);
        assert_non_null(condition(same, "Ready"));
        assert_int_equal(json_array_size(json_object_get(json_object_get(same, "status"), "conditions")), 2);
        assert_string_equal(json_string_value(json_object_get(c, "lastTransitionTime")), "2020-01-01T00:00:00Z");
        assert_string_equal(json_string_value(json_object_get(c, "reason")), REGHEALTH_REASON_FAILED);
        assert_int_equal(json_integer_value(json_object_get(c, "observedGeneration")), 2);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(same, "status"),
                                                            "nodeClassObservedGeneration")), 9);
        json_t *moved = reghealth_patch(p, "True", REGHEALTH_CONDITION, "", 9, T0);
        c = condition(moved, REGHEALTH_CONDITION);
        assert_string_equal(json_string_value(json_object_get(c, "status")), "True");
        assert_string_equal(json_string_value(json_object_get(c, "lastTransitionTime")), "2023-11-14T22:13:20Z");
        json_decref(same);
        json_decref(moved);
        json_decref(p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ring),
                cmocka_unit_test(test_stale),
                cmocka_unit_test(test_patch),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
