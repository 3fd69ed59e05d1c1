/* Tests for coordinator/launch/nodeclaim: a NodeClaim status decoded into its struct and encoded back (round trip,
 * only what changed, unknown keys kept, bad types refused), conditions, rebasing on a fresh status, step names. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nodeclaim.h"
#include "rfc3339.h"
#include "testutil.h"

#define T0 "2026-07-01T12:00:00Z"

/* Every field the struct knows, each in the form the encoder writes it. */
static const char *FULL =
        "{\"launchStep\": \"Launched\", \"host\": \"pve1\", \"region\": \"r1\","
        " \"capacity\": {\"cpu\": \"2\", \"memory\": \"4Gi\", \"pods\": \"110\"},"
        " \"allocatable\": {\"cpu\": \"1930m\", \"memory\": \"3584Mi\", \"pods\": \"110\"},"
        " \"reservationMode\": \"agent\", \"reservationID\": \"r-00000000000000ab\","
        " \"placement\": {\"numa\": [{\"hostNode\": 1, \"guestCPUs\": \"0-1\", \"memoryMiB\": 4096}], \"cpus\": \"4-5\"},"
        " \"vmid\": 105, \"providerID\": \"proxmox://r1/105\", \"cloneStartedAt\": \"2026-07-01T11:59:58.250Z\","
        " \"cloneTask\": \"UPID:pve1:00001:qmclone:105:root@pam:\", \"imageID\": \"pve1/9000\","
        " \"imageDigest\": \"3f786850e387550fdab836ed7e6dc881de23001b\","
        " \"isoVolume\": \"local:iso/pvescale-a-12345678.iso\", \"tokenID\": \"abc123\","
        " \"startedAt\": \"2026-07-01T11:59:59.500Z\", \"nodeName\": \"node-a\", \"attempts\": 2,"
        " \"lastError\": \"start VM 105: timeout\", \"failureReason\": \"LaunchFailed\","
        " \"conditions\": [{\"type\": \"Launched\", \"status\": \"True\", \"reason\": \"Launched\","
        " \"message\": \"VM started and pinned\", \"lastTransitionTime\": \"" T0 "\"},"
        " {\"type\": \"Registered\", \"status\": \"Unknown\", \"reason\": \"AwaitingNode\","
        " \"message\": \"waiting for the Node to register\", \"lastTransitionTime\": \"" T0 "\"}]}";

static int64_t t0(void) {
        int64_t ms = 0;
        assert_int_equal(rfc3339_parse(T0, &ms), 0);
        return ms;
}

static struct nodeclaim_status *decoded(const json_t *status) {
        struct nodeclaim_status *st = calloc(1, sizeof *st);
        char err[256] = "";
        assert_non_null(st);
        int r = nodeclaim_status_decode(status, st, err, sizeof err);
        if (r != 0)
                fail_msg("decode: %s", err);
        return st;
}

static void assert_json_equal(const json_t *got, const json_t *want) {
        if (!json_equal((json_t *)got, (json_t *)want)) {
                char *g = json_dumps(got, JSON_SORT_KEYS), *w = json_dumps(want, JSON_SORT_KEYS);
                fail_msg("got  %s\nwant %s", g, w);
        }
}

static void test_decode_every_field(void **state) {
        (void)state;
        json_t *full = test_json_parse(FULL);
        struct nodeclaim_status *st = decoded(full);
        assert_int_equal(st->launch_step, NODECLAIM_STEP_LAUNCHED);
        assert_string_equal(st->host, "pve1");
        assert_string_equal(st->region, "r1");
        assert_int_equal(st->capacity.v[RESOURCE_CPU], 2000);
        assert_int_equal(st->allocatable.v[RESOURCE_MEMORY], 3584LL << 20);
        assert_int_equal(st->reservation, NODECLAIM_RESERVATION_AGENT);
        assert_string_equal(st->reservation_id, "r-00000000000000ab");
        assert_true(st->placement.set);
        assert_int_equal(st->placement.n_numa, 1);
        assert_int_equal(st->placement.numa[0].host_node, 1);
        assert_string_equal(st->placement.numa[0].guest_cpus, "0-1");
        assert_int_equal(st->placement.numa[0].memory_mib, 4096);
        assert_string_equal(st->placement.cpus, "4-5");
        assert_int_equal(st->vmid, 105);
        assert_string_equal(st->provider_id, "proxmox://r1/105");
        assert_int_equal(st->clone_started_ms, t0() - 1750);
        assert_string_equal(st->clone_task, "UPID:pve1:00001:qmclone:105:root@pam:");
        assert_string_equal(st->image_id, "pve1/9000");
        assert_string_equal(st->image_digest, "3f786850e387550fdab836ed7e6dc881de23001b");
        assert_string_equal(st->iso_volume, "local:iso/pvescale-a-12345678.iso");
        assert_string_equal(st->token_id, "abc123");
        assert_int_equal(st->started_ms, t0() - 500);
        assert_string_equal(st->node_name, "node-a");
        assert_int_equal(st->attempts, 2);
        assert_string_equal(st->last_error, "start VM 105: timeout");
        assert_string_equal(st->failure_reason, "LaunchFailed");
        assert_int_equal(st->n_conditions, 2);
        assert_true(nodeclaim_condition_true(st, "Launched"));
        assert_false(nodeclaim_condition_true(st, "Registered"));
        assert_string_equal(nodeclaim_condition(st, "Registered")->reason, "AwaitingNode");
        assert_int_equal(nodeclaim_condition(st, "Registered")->transition_ms, t0());
        assert_null(nodeclaim_condition(st, "Initialized"));
        free(st);
        json_decref(full);
}

/* Encoded onto an empty status against an empty base, a decoded status gives back what it came from, and that
 * decodes to the same struct. */
static void test_round_trip(void **state) {
        (void)state;
        static const struct nodeclaim_status empty;
        json_t *full = test_json_parse(FULL), *out = json_object();
        struct nodeclaim_status *st = decoded(full);
        assert_int_equal(nodeclaim_status_encode(&empty, st, out, t0()), 0);
        assert_json_equal(out, full);
        struct nodeclaim_status *again = decoded(out);
        json_t *copy = json_deep_copy(out);
        assert_int_equal(nodeclaim_status_encode(st, again, copy, t0() + 60000), 0); /* nothing differs */
        assert_int_equal(nodeclaim_status_encode(again, st, copy, t0() + 60000), 0);
        assert_json_equal(copy, out);
        json_decref(copy);
        free(again);
        free(st);
        json_decref(out);
        json_decref(full);
}

/* An unchanged struct writes nothing, whatever the JSON holds; a status absent or null decodes empty. */
static void test_unchanged_writes_nothing(void **state) {
        (void)state;
        json_t *full = test_json_parse(FULL), *copy = json_deep_copy(full);
        struct nodeclaim_status *st = decoded(full);
        assert_int_equal(nodeclaim_status_encode(st, st, copy, t0() + 60000), 0);
        assert_json_equal(copy, full);
        json_t *null = json_null();
        struct nodeclaim_status *none = decoded(NULL), *nulled = decoded(null);
        assert_int_equal(none->launch_step, NODECLAIM_STEP_NONE);
        assert_int_equal(none->vmid, 0);
        json_t *kept = json_deep_copy(full); /* none and nulled equal: no field of full deleted or set */
        assert_int_equal(nodeclaim_status_encode(none, nulled, kept, t0() + 60000), 0);
        assert_json_equal(kept, full);
        json_decref(kept);
        free(none);
        free(nulled);
        free(st);
        json_decref(null);
        json_decref(copy);
        json_decref(full);
}

/* Keys the struct does not know, and members of a condition it does not know, stay; changed fields are set, and
 * emptied ones removed. */
static void test_changes_keep_unknown_keys(void **state) {
        (void)state;
        json_t *status = test_json_parse(
                "{\"launchStep\": \"VMIDAllocated\", \"vmid\": 105, \"cloneTask\": \"UPID:x\", \"attempts\": 1,"
                " \"observedGeneration\": 3, \"extra\": {\"a\": [1, 2]},"
                " \"conditions\": [{\"type\": \"Launched\", \"status\": \"Unknown\", \"reason\": \"Launching\","
                " \"message\": \"\", \"lastTransitionTime\": \"" T0 "\", \"severity\": \"Info\"},"
                " {\"type\": \"Other\", \"status\": \"True\", \"reason\": \"X\", \"message\": \"\"}]}");
        json_t *want = test_json_parse(
                "{\"launchStep\": \"Cloning\", \"vmid\": 106, \"observedGeneration\": 3, \"extra\": {\"a\": [1, 2]},"
                " \"imageID\": \"pve1/9000\","
                " \"conditions\": [{\"type\": \"Launched\", \"status\": \"True\", \"reason\": \"Launched\","
                " \"message\": \"m\", \"lastTransitionTime\": \"2026-07-01T12:01:00Z\", \"severity\": \"Info\"},"
                " {\"type\": \"Other\", \"status\": \"True\", \"reason\": \"X\", \"message\": \"\"}]}");
        struct nodeclaim_status *base = decoded(status), *st = decoded(status);
        st->launch_step = NODECLAIM_STEP_CLONING;
        st->vmid = 106;
        st->clone_task[0] = '\0';
        st->attempts = 0;
        snprintf(st->image_id, sizeof st->image_id, "pve1/9000");
        assert_int_equal(nodeclaim_condition_set(st, "Launched", "True", "Launched", "m"), 0);
        assert_int_equal(nodeclaim_status_encode(base, st, status, t0() + 60000), 0);
        assert_json_equal(status, want);
        free(base);
        free(st);
        json_decref(want);
        json_decref(status);
}

/* A condition whose status stays keeps its lastTransitionTime; a new one is appended with now. */
static void test_condition_transition_time(void **state) {
        (void)state;
        json_t *status = test_json_parse("{\"conditions\": [{\"type\": \"Launched\", \"status\": \"True\", \"reason\":"
                                         " \"Launched\", \"message\": \"\", \"lastTransitionTime\": \"" T0 "\"}]}");
        json_t *want = test_json_parse(
                "{\"conditions\": [{\"type\": \"Launched\", \"status\": \"True\", \"reason\": \"Again\", \"message\":"
                " \"\", \"lastTransitionTime\": \"" T0 "\"}, {\"type\": \"Registered\", \"status\": \"Unknown\","
                " \"reason\": \"AwaitingNode\", \"message\": \"w\", \"lastTransitionTime\": \"2026-07-01T12:01:00Z\"}]}");
        struct nodeclaim_status *base = decoded(status), *st = decoded(status);
        assert_int_equal(nodeclaim_condition_set(st, "Launched", "True", "Again", NULL), 0);
        assert_int_equal(nodeclaim_condition_set(st, "Registered", "Unknown", "AwaitingNode", "w"), 0);
        assert_int_equal(st->n_conditions, 2);
        assert_int_equal(nodeclaim_status_encode(base, st, status, t0() + 60000), 0);
        assert_json_equal(status, want);
        free(base);
        free(st);
        json_decref(want);
        json_decref(status);
}

static void test_condition_set_limits(void **state) {
        (void)state;
        struct nodeclaim_status *st = decoded(NULL);
        char type[16], long_message[NODECLAIM_MESSAGE_MAX + 1];
        memset(long_message, 'x', sizeof long_message - 1);
        long_message[sizeof long_message - 1] = '\0';
        assert_int_equal(nodeclaim_condition_set(st, "Launched", "False", "R", long_message), -EINVAL);
        assert_int_equal(nodeclaim_condition_set(st, "Launched", "Maybe?!?", "R", ""), -EINVAL);
        assert_int_equal(st->n_conditions, 0);
        for (int i = 0; i < NODECLAIM_MAX_CONDITIONS; i++) {
                snprintf(type, sizeof type, "T%d", i);
                assert_int_equal(nodeclaim_condition_set(st, type, "True", "R", ""), 0);
        }
        assert_int_equal(nodeclaim_condition_set(st, "OneMore", "True", "R", ""), -ENOSPC);
        assert_int_equal(nodeclaim_condition_set(st, "T3", "False", "R", ""), 0); /* an update needs no room */
        assert_string_equal(nodeclaim_condition(st, "T3")->status, "False");
        free(st);
}

static void assert_refused(const char *status_text, const char *want_err) {
        json_t *status = test_json_parse(status_text);
        struct nodeclaim_status *st = calloc(1, sizeof *st);
        char err[256] = "";
        assert_int_equal(nodeclaim_status_decode(status, st, err, sizeof err), -EINVAL);
        assert_string_equal(err, want_err);
        assert_string_equal(st->host, "pve1"); /* the fields that decode are there */
        free(st);
        json_decref(status);
}

static void test_bad_types_refused(void **state) {
        (void)state;
        assert_refused("{\"host\": \"pve1\", \"vmid\": \"105\"}",
                       "status.vmid: an integer of 0 to 4294967295 is required");
        assert_refused("{\"host\": \"pve1\", \"vmid\": -1}", "status.vmid: an integer of 0 to 4294967295 is required");
        assert_refused("{\"host\": \"pve1\", \"launchStep\": \"Bogus\"}", "status.launchStep: unknown step \"Bogus\"");
        assert_refused("{\"host\": \"pve1\", \"launchStep\": 3}", "status.launchStep: a string is required");
        assert_refused("{\"host\": \"pve1\", \"region\": 7}", "status.region: a string is required");
        assert_refused("{\"host\": \"pve1\", \"tokenID\": \"0123456789abcdefXYZ\"}",
                       "status.tokenID: longer than 15 characters");
        assert_refused("{\"host\": \"pve1\", \"attempts\": -2}", "status.attempts: a non-negative integer is required");
        assert_refused("{\"host\": \"pve1\", \"cloneStartedAt\": \"yesterday\"}",
                       "status.cloneStartedAt: an RFC 3339 time is required");
        assert_refused("{\"host\": \"pve1\", \"reservationMode\": \"hope\"}",
                       "status.reservationMode: \"agent\" or \"pve\" is required");
        assert_refused("{\"host\": \"pve1\", \"placement\": {\"numa\": [{\"hostNode\": 0}]}}",
                       "status.placement.numa: malformed");
        assert_refused("{\"host\": \"pve1\", \"capacity\": {\"cpu\": \"lots\"}}",
                       "status.capacity.cpu: a quantity is required");
        assert_refused("{\"host\": \"pve1\", \"conditions\": {}}",
                       "status.conditions: an array of at most 16 is required");
        assert_refused("{\"host\": \"pve1\", \"conditions\": [{\"type\": \"Launched\"}]}",
                       "status.conditions[0].status: a string is required");
        /* the first error is the one reported */
        assert_refused("{\"host\": \"pve1\", \"vmid\": true, \"nodeName\": 1}",
                       "status.vmid: an integer of 0 to 4294967295 is required");
        char err[64] = "";
        struct nodeclaim_status *st = calloc(1, sizeof *st);
        json_t *arr = json_array();
        assert_int_equal(nodeclaim_status_decode(arr, st, err, sizeof err), -EINVAL);
        assert_string_equal(err, "status: an object is required");
        json_decref(arr);
        free(st);
}

/* Someone else wrote meanwhile: our changes stay, theirs come in where we changed nothing. */
static void test_rebase(void **state) {
        (void)state;
        json_t *old = test_json_parse(
                "{\"launchStep\": \"VMIDAllocated\", \"vmid\": 105, \"nodeName\": \"a\", \"conditions\": ["
                "{\"type\": \"Launched\", \"status\": \"Unknown\", \"reason\": \"Launching\", \"message\": \"\"},"
                "{\"type\": \"Other\", \"status\": \"False\", \"reason\": \"X\", \"message\": \"\"}]}");
        json_t *fresh_json = test_json_parse(
                "{\"launchStep\": \"VMIDAllocated\", \"vmid\": 105, \"nodeName\": \"b\", \"lastError\": \"theirs\","
                " \"conditions\": [{\"type\": \"Launched\", \"status\": \"Unknown\", \"reason\": \"Launching\","
                " \"message\": \"\"}, {\"type\": \"Other\", \"status\": \"True\", \"reason\": \"Y\", \"message\": \"\"},"
                " {\"type\": \"Third\", \"status\": \"True\", \"reason\": \"Z\", \"message\": \"\"}]}");
        struct nodeclaim_status *base = decoded(old), *st = decoded(old), *fresh = decoded(fresh_json);
        st->launch_step = NODECLAIM_STEP_CLONING;
        snprintf(st->clone_task, sizeof st->clone_task, "UPID:x");
        assert_int_equal(nodeclaim_condition_set(st, "Launched", "True", "Launched", "ok"), 0);
        nodeclaim_status_rebase(base, st, fresh);
        assert_int_equal(st->launch_step, NODECLAIM_STEP_CLONING);
        assert_string_equal(st->clone_task, "UPID:x");
        assert_string_equal(st->node_name, "b");
        assert_string_equal(st->last_error, "theirs");
        assert_int_equal(st->n_conditions, 3);
        assert_true(nodeclaim_condition_true(st, "Launched"));
        assert_string_equal(nodeclaim_condition(st, "Other")->reason, "Y");
        assert_non_null(nodeclaim_condition(st, "Third"));
        /* Encoded against fresh, only our changes are written. */
        assert_int_equal(nodeclaim_status_encode(fresh, st, fresh_json, t0()), 0);
        assert_string_equal(json_string_value(json_object_get(fresh_json, "launchStep")), "Cloning");
        assert_string_equal(json_string_value(json_object_get(fresh_json, "nodeName")), "b");
        assert_string_equal(json_string_value(json_object_get(fresh_json, "lastError")), "theirs");
        free(base);
        free(st);
        free(fresh);
        json_decref(old);
        json_decref(fresh_json);
}

static void test_step_names(void **state) {
        (void)state;
        static const char *const names[] = { "",         "Reserved",   "VMIDAllocated", "Cloning", "Configured",
                                             "Started",  "Launched",   "Registered",    "Initialized", "Failed" };
        for (int i = 0; i <= NODECLAIM_STEP_FAILED; i++) {
                enum nodeclaim_step s = NODECLAIM_STEP_FAILED;
                assert_string_equal(nodeclaim_step_name((enum nodeclaim_step)i), names[i]);
                assert_int_equal(nodeclaim_step_parse(names[i], &s), 0);
                assert_int_equal(s, i);
        }
        enum nodeclaim_step s = NODECLAIM_STEP_CLONING;
        assert_int_equal(nodeclaim_step_parse("VMID", &s), -EINVAL);
        assert_int_equal(nodeclaim_step_parse(NULL, &s), -EINVAL);
        assert_int_equal(s, NODECLAIM_STEP_CLONING);
        json_t *claim = test_json_parse("{\"status\": {\"launchStep\": \"Cloning\"}}");
        assert_int_equal(nodeclaim_claim_step(claim), NODECLAIM_STEP_CLONING);
        json_object_set_new(json_object_get(claim, "status"), "launchStep", json_string("Nonsense"));
        assert_int_equal(nodeclaim_claim_step(claim), NODECLAIM_STEP_NONE);
        json_decref(claim);
}

/* The termination step and its start: decoded, encoded and refused like the launch step. */
static void test_termination_fields(void **state) {
        (void)state;
        static const char *const names[] = { "", "Tainted", "Drained", "NodeDeleted", "InstanceTerminated" };
        for (int i = 0; i <= NODECLAIM_TERM_INSTANCE_TERMINATED; i++) {
                assert_string_equal(nodeclaim_term_name((enum nodeclaim_term)i), names[i]);
                json_t *named = json_pack("{ss}", "terminationStep", names[i]);
                struct nodeclaim_status *got = decoded(named);
                assert_int_equal(got->term_step, i);
                free(got);
                json_decref(named);
        }
        struct nodeclaim_status *st = calloc(1, sizeof *st), *base = calloc(1, sizeof *base);
        char err[256];
        json_t *status = test_json_parse("{\"terminationStep\": \"Drained\","
                                         " \"terminationStartedAt\": \"2026-07-01T12:00:00Z\"}");
        assert_int_equal(nodeclaim_status_decode(status, st, err, sizeof err), 0);
        assert_int_equal(st->term_step, NODECLAIM_TERM_DRAINED);
        assert_int_equal(st->term_started_ms, 1782907200000LL);
        st->term_step = NODECLAIM_TERM_NODE_DELETED;
        json_t *out = json_object();
        assert_int_equal(nodeclaim_status_encode(base, st, out, 0), 0);
        assert_string_equal(json_string_value(json_object_get(out, "terminationStep")), "NodeDeleted");
        assert_string_equal(json_string_value(json_object_get(out, "terminationStartedAt")), "2026-07-01T12:00:00.000Z");
        json_decref(out);
        json_object_set_new(status, "terminationStep", json_string("Bogus"));
        assert_int_equal(nodeclaim_status_decode(status, st, err, sizeof err), -EINVAL);
        assert_string_equal(err, "status.terminationStep: unknown termination step \"Bogus\"");
        json_object_set_new(status, "terminationStep", json_integer(2));
        assert_int_equal(nodeclaim_status_decode(status, st, err, sizeof err), -EINVAL);
        assert_string_equal(err, "status.terminationStep: a string is required");
        json_decref(status);
        free(st);
        free(base);
}

static void test_placement(void **state) {
        (void)state;
        struct shape shape = { .vcpus = 2 };
        shape.capacity.v[RESOURCE_CPU] = 2000;
        shape.capacity.v[RESOURCE_MEMORY] = 4LL << 30;
        shape.capacity.v[RESOURCE_PODS] = 110;
        shape.allocatable = shape.capacity;
        shape.allocatable.v[RESOURCE_CPU] = 1930;
        json_t *with = nodeclaim_placement_status("pve1", "r1", &shape);
        json_t *without = nodeclaim_placement_status("pve1", NULL, &shape);
        json_t *want = test_json_parse("{\"host\": \"pve1\", \"region\": \"r1\", \"capacity\": {\"cpu\": \"2\","
                                       " \"memory\": \"4Gi\", \"pods\": \"110\"}, \"allocatable\": {\"cpu\": \"1930m\","
                                       " \"memory\": \"4Gi\", \"pods\": \"110\"}}");
        assert_json_equal(with, want);
        json_object_del(want, "region");
        assert_json_equal(without, want);
        struct nodeclaim_status *st = decoded(NULL);
        nodeclaim_set_placement(st, "pve2", "r2", &shape);
        assert_string_equal(st->host, "pve2");
        assert_string_equal(st->region, "r2");
        assert_int_equal(st->allocatable.v[RESOURCE_CPU], 1930);
        json_t *claim = test_json_parse("{\"spec\": {\"requirements\": [{\"key\": \"topology.kubernetes.io/zone\","
                                        " \"operator\": \"In\", \"values\": [\"pve3\"]}]},"
                                        " \"status\": {\"region\": \"r3\"}}");
        assert_string_equal(nodeclaim_host(claim), "pve3");
        assert_string_equal(nodeclaim_region(claim), "r3");
        assert_false(nodeclaim_is_replacement(claim));
        json_object_set_new(claim, "metadata", test_json_parse("{\"annotations\": {\"pvescale.io/replaces\": \"\"}}"));
        assert_false(nodeclaim_is_replacement(claim));
        json_object_set_new(claim, "metadata", test_json_parse("{\"annotations\": {\"pvescale.io/replaces\": \"a,b\"}}"));
        assert_true(nodeclaim_is_replacement(claim));
        free(st);
        json_decref(claim);
        json_decref(want);
        json_decref(with);
        json_decref(without);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_decode_every_field),
                cmocka_unit_test(test_round_trip),
                cmocka_unit_test(test_unchanged_writes_nothing),
                cmocka_unit_test(test_changes_keep_unknown_keys),
                cmocka_unit_test(test_condition_transition_time),
                cmocka_unit_test(test_condition_set_limits),
                cmocka_unit_test(test_bad_types_refused),
                cmocka_unit_test(test_rebase),
                cmocka_unit_test(test_step_names),
                cmocka_unit_test(test_termination_fields),
                cmocka_unit_test(test_placement),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
