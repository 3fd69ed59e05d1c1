/* Tests for coordinator/launch/nominate: which pending pods a claim's Node is nominated for (status.nominatedNodeName),
 * from the provisioner's Nominated events: the newest of them per pod, ours only, unbound pods only, and none that
 * carries the Node already. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nominate.h"
#include "testutil.h"

static json_t *pod(const char *uid, const char *name, const char *node, const char *nominated, bool deleting) {
        json_t *p = json_pack("{s:{s:s, s:s, s:s}, s:{}, s:{}}", "metadata", "uid", uid, "name", name, "namespace",
                              "default", "spec", "status");
        if (node)
                json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(node));
        if (nominated)
                json_object_set_new(json_object_get(p, "status"), "nominatedNodeName", json_string(nominated));
        if (deleting)
                json_object_set_new(json_object_get(p, "metadata"), "deletionTimestamp",
                                    json_string("2026-12-07T12:00:00Z"));
        return p;
}

static json_t *event(const char *rv, const char *uid, const char *claim, const char *component, const char *reason) {
        json_t *e = json_pack("{s:{s:s}, s:{s:s}, s:{s:s}, s:s, s:s}", "metadata", "resourceVersion", rv,
                              "involvedObject", "uid", uid, "source", "component", component, "reason", reason,
                              "message", "");
        json_object_set_new(e, "message", json_sprintf("Pod should schedule on: nodeclaim/%s (c1.4VCPU-8GB on pve1)",
                                                       claim));
        return e;
}

static json_t *list(json_t *a, json_t *b, json_t *c, json_t *d, json_t *e) {
        json_t *items = json_array(), *all[] = { a, b, c, d, e };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                if (all[i])
                        json_array_append_new(items, all[i]);
        return json_pack("{s:o}", "items", items);
}

static void assert_names(json_t *got, const char *want) {
        char buf[256] = "";
        size_t i;
        json_t *v;
        json_array_foreach(got, i, v) {
                strcat(buf, i ? "," : "");
                strcat(buf, json_string_value(json_object_get(v, "name")));
        }
        assert_string_equal(buf, want);
        json_decref(got);
}

static void test_claim_names(void **state) {
        (void)state;
        assert_true(nominate_names_claim("Pod should schedule on: nodeclaim/general-ab12c (x)", "general-ab12c"));
        assert_true(nominate_names_claim("Pod should schedule on: nodeclaim/general-ab12c", "general-ab12c"));
        assert_false(nominate_names_claim("Pod should schedule on: nodeclaim/general-ab12cd (x)", "general-ab12c"));
        assert_false(nominate_names_claim("Pod should schedule on: nodeclaim/general-ab1", "general-ab12c"));
        assert_false(nominate_names_claim(NULL, "general-ab12c"));
}

/* The pods whose newest Nominated event names the claim, unbound, not deleted, not nominated to the Node yet. */
static void test_planned_pods(void **state) {
        (void)state;
        json_t *pods = list(pod("u1", "a", NULL, NULL, false), pod("u2", "b", NULL, NULL, false),
                            pod("u3", "c", NULL, "other", false), pod("u4", "d", NULL, "general-x", false),
                            pod("u5", "e", NULL, NULL, true));
        json_t *events = list(event("10", "u1", "general-x", NOMINATE_COMPONENT, "Nominated"),
                              event("11", "u2", "general-y", NOMINATE_COMPONENT, "Nominated"),
                              event("12", "u3", "general-x", NOMINATE_COMPONENT, "Nominated"),
                              event("13", "u4", "general-x", NOMINATE_COMPONENT, "Nominated"),
                              event("14", "u5", "general-x", NOMINATE_COMPONENT, "Nominated"));
        /* a: planned there; b: elsewhere; c: nominated to another node, planned here; d: done; e: going */
        assert_names(nominate_pods_of(pods, events, "general-x", "general-x"), "a,c");
        assert_names(nominate_pods_of(pods, events, "general-y", "node-y"), "b");
        assert_names(nominate_pods_of(pods, events, "general-z", "node-z"), "");
        json_decref(pods);
        json_decref(events);
}

/* A pod planned again on another claim (a second round) follows its newest event, by resourceVersion. */
static void test_newest_event(void **state) {
        (void)state;
        json_t *pods = list(pod("u1", "a", NULL, NULL, false), pod("u2", "b", NULL, NULL, false), NULL, NULL, NULL);
        json_t *events = list(event("20", "u1", "general-y", NOMINATE_COMPONENT, "Nominated"),
                              event("9", "u1", "general-x", NOMINATE_COMPONENT, "Nominated"),
                              event("30", "u2", "general-x", NOMINATE_COMPONENT, "Nominated"),
                              event("40", "u2", "general-y", "someone-else", "Nominated"),
                              event("50", "u2", "general-y", NOMINATE_COMPONENT, "Warning"));
        assert_names(nominate_pods_of(pods, events, "general-x", "node-x"), "b");
        assert_names(nominate_pods_of(pods, events, "general-y", "node-y"), "a");
        json_decref(pods);
        json_decref(events);
}

/* Bound pods and pods without any event are never nominated; empty or missing lists give none. */
static void test_bound_and_empty(void **state) {
        (void)state;
        json_t *pods = list(pod("u1", "a", "node-x", NULL, false), pod("u2", "b", NULL, NULL, false), NULL, NULL, NULL);
        json_t *events = list(event("1", "u1", "general-x", NOMINATE_COMPONENT, "Nominated"), NULL, NULL, NULL, NULL);
        assert_names(nominate_pods_of(pods, events, "general-x", "node-x"), "");
        assert_names(nominate_pods_of(NULL, events, "general-x", "node-x"), "");
        assert_names(nominate_pods_of(pods, NULL, "general-x", "node-x"), "");
        json_decref(pods);
        json_decref(events);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_claim_names),
                cmocka_unit_test(test_planned_pods),
                cmocka_unit_test(test_newest_event),
                cmocka_unit_test(test_bound_and_empty),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
