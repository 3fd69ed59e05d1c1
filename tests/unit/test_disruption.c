/* Tests for coordinator/control/disruption_input's pod events: a pod that leaves a node (or comes) is a pod event at
 * the pass that sees it, as Karpenter's lastPodEventTime counts it; nothing changed keeps the older time; a node
 * seen for the first time has no event from it; nodes no longer candidates are forgotten. And the method of a replace
 * read back after a restart: from its annotation, or from the message of a claim written before it. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "disruption.h"

struct fixture {
        struct sim_node nodes[2];
        struct disrupt_pod pods[2][3];
        struct disrupt_candidate cands[2];
        struct disruption_input di;
};

static void setup(struct fixture *f) {
        static const char *const names[] = { "web-a", "web-b", "web-c" };
        *f = (struct fixture){ 0 };
        f->nodes[0].name = "node-a";
        f->nodes[1].name = "node-b";
        for (size_t i = 0; i < 2; i++) {
                for (size_t k = 0; k < 3; k++)
                        f->pods[i][k] = (struct disrupt_pod){ .namespace = "default", .name = names[k] };
                f->cands[i] = (struct disrupt_candidate){ .claim = "c", .sim = &f->nodes[i], .pods = f->pods[i],
                                                          .n_pods = 3, .last_pod_event_ms = 1000 };
        }
        f->di.candidates = f->cands;
        f->di.n_candidates = 2;
}

static void test_a_pod_leaving_is_an_event(void **state) {
        struct fixture f;
        json_t *marks = json_object();
        (void)state;
        setup(&f);
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 50000), 0);
        assert_int_equal(f.cands[0].last_pod_event_ms, 1000); /* first seen: no event of ours */
        assert_int_equal(json_object_size(marks), 2);

        f.cands[0].last_pod_event_ms = f.cands[1].last_pod_event_ms = 1000; /* the next pass's input */
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 60000), 0);
        assert_int_equal(f.cands[0].last_pod_event_ms, 1000); /* nothing changed */

        f.cands[0].n_pods = 2; /* web-c left node-a */
        f.cands[0].last_pod_event_ms = f.cands[1].last_pod_event_ms = 1000;
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 70000), 0);
        assert_int_equal(f.cands[0].last_pod_event_ms, 70000);
        assert_int_equal(f.cands[1].last_pod_event_ms, 1000);

        f.cands[0].last_pod_event_ms = 1000; /* later passes keep the time of the change */
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 80000), 0);
        assert_int_equal(f.cands[0].last_pod_event_ms, 70000);

        f.pods[1][2].name = "web-d"; /* web-c replaced by web-d on node-b: same count, other pods */
        f.cands[0].last_pod_event_ms = f.cands[1].last_pod_event_ms = 1000;
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 90000), 0);
        assert_int_equal(f.cands[1].last_pod_event_ms, 90000);

        f.cands[1].last_pod_event_ms = 95000; /* a pod started later than the change: kept */
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 99000), 0);
        assert_int_equal(f.cands[1].last_pod_event_ms, 95000);

        f.di.n_candidates = 1; /* node-b is no candidate now: forgotten */
        assert_int_equal(disruption_input_pod_events(&f.di, marks, 100000), 0);
        assert_null(json_object_get(marks, "node-b"));
        assert_non_null(json_object_get(marks, "node-a"));
        json_decref(marks);
}

static json_t *replacement(const char *message, const char *method) {
        json_t *ann = json_pack("{s:s, s:s}", DISRUPTION_ANNOTATION_REPLACES, "old", DISRUPTION_ANNOTATION_DECISION,
                                message);
        if (method)
                json_object_set_new(ann, DISRUPTION_ANNOTATION_METHOD, json_string(method));
        return json_pack("{s:{s:s, s:o}}", "metadata", "name", "new", "annotations", ann);
}

static void assert_method(const char *message, const char *method, const char *old,
                          enum stats_disruption_method want) {
        json_t *claim = replacement(message, method);
        assert_non_null(claim);
        assert_int_equal(disruption_replace_method(claim, old), want);
        json_decref(claim);
}

static void test_the_method_is_read_back_from_its_annotation(void **state) {
        (void)state;
        /* the annotation decides, whatever the message says */
        assert_method("Drift: replace a", "drift", "a", STATS_DISRUPTION_DRIFT);
        assert_method("Consolidation: replace a", "repair", "a", STATS_DISRUPTION_REPAIR);
        assert_method("Consolidation: replace a", "multi_node_consolidation", "a",
                      STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION);
        assert_method("Drift: replace a,b", "consolidation", "a,b", STATS_DISRUPTION_CONSOLIDATION);
        assert_int_equal(stats_disruption_method_parse(stats_disruption_method_name(STATS_DISRUPTION_EXPIRY)),
                         STATS_DISRUPTION_EXPIRY);
}

static void test_a_claim_from_before_the_annotation_keeps_its_message_method(void **state) {
        (void)state;
        assert_method("Drift: replace a", NULL, "a", STATS_DISRUPTION_DRIFT);
        assert_method("Expiry: replace a", NULL, "a", STATS_DISRUPTION_EXPIRY);
        assert_method("Repair: replace a", NULL, "a", STATS_DISRUPTION_REPAIR);
        assert_method("Consolidation: replace a", NULL, "a", STATS_DISRUPTION_CONSOLIDATION);
        assert_method("Consolidation: replace a, b", NULL, "a,b", STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION);
        /* an unknown method (a newer coordinator's) falls back to the message, as does none */
        assert_method("Drift: replace a", "someday", "a", STATS_DISRUPTION_DRIFT);
        assert_method("", NULL, "a", STATS_DISRUPTION_CONSOLIDATION);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_pod_leaving_is_an_event),
                cmocka_unit_test(test_the_method_is_read_back_from_its_annotation),
                cmocka_unit_test(test_a_claim_from_before_the_annotation_keeps_its_message_method),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
