/* Tests for coordinator/intake: which pods are candidates, and the batching window as a table of arrivals. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "intake.h"

#define UNSCHED "\"status\": {\"phase\": \"Pending\", \"conditions\": [{\"type\": \"PodScheduled\", \"status\": \"False\", \"reason\": \"Unschedulable\", \"message\": \"0/1 nodes are available\"}]}"

static void test_classify(void **state) {
        (void)state;
        static const struct {
                const char *json;
                enum intake_verdict want;
        } cases[] = {
                { "{\"metadata\": {\"name\": \"a\"}, \"spec\": {}, " UNSCHED "}", INTAKE_CANDIDATE },
                /* Other conditions before PodScheduled do not matter. */
                { "{\"metadata\": {\"name\": \"a\"}, \"status\": {\"conditions\": [{\"type\": \"Ready\", \"status\": \"False\"},"
                  " {\"type\": \"PodScheduled\", \"status\": \"False\", \"reason\": \"Unschedulable\"}]}}",
                  INTAKE_CANDIDATE },
                /* A ReplicaSet owner is fine; a DaemonSet controller is not (one that owns without controlling
                 * does not make the pod a DaemonSet's, as kubectl drain reads it). */
                { "{\"metadata\": {\"name\": \"a\", \"ownerReferences\": [{\"kind\": \"ReplicaSet\", \"name\": \"r\"}]}, " UNSCHED "}",
                  INTAKE_CANDIDATE },
                { "{\"metadata\": {\"name\": \"a\", \"ownerReferences\": [{\"kind\": \"DaemonSet\", \"name\": \"d\", "
                  "\"controller\": true}]}, " UNSCHED "}",
                  INTAKE_DAEMONSET },
                { "{\"metadata\": {\"name\": \"a\", \"ownerReferences\": [{\"kind\": \"DaemonSet\", \"name\": \"d\"}]}, " UNSCHED "}",
                  INTAKE_CANDIDATE },
                { "{\"metadata\": {\"name\": \"a\", \"annotations\": {\"kubernetes.io/config.mirror\": \"x\"}}, " UNSCHED "}",
                  INTAKE_MIRROR },
                { "{\"metadata\": {\"name\": \"a\", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"}, " UNSCHED "}",
                  INTAKE_TERMINATING },
                { "{\"metadata\": {\"name\": \"a\"}, \"spec\": {\"nodeName\": \"n1\"}, " UNSCHED "}", INTAKE_BOUND },
                { "{\"metadata\": {\"name\": \"a\"}, \"spec\": {\"nodeName\": \"\"}, " UNSCHED "}", INTAKE_CANDIDATE },
                { "{\"metadata\": {\"name\": \"a\"}, \"status\": {\"phase\": \"Failed\", \"conditions\": [{\"type\": \"PodScheduled\","
                  " \"status\": \"False\", \"reason\": \"Unschedulable\"}]}}",
                  INTAKE_FINISHED },
                /* Not yet seen by the scheduler, scheduling gated, or scheduled. */
                { "{\"metadata\": {\"name\": \"a\"}, \"status\": {\"phase\": \"Pending\"}}", INTAKE_NOT_UNSCHEDULABLE },
                { "{\"metadata\": {\"name\": \"a\"}, \"status\": {\"conditions\": [{\"type\": \"PodScheduled\", \"status\": \"False\","
                  " \"reason\": \"SchedulingGated\"}]}}",
                  INTAKE_NOT_UNSCHEDULABLE },
                { "{\"metadata\": {\"name\": \"a\"}, \"status\": {\"conditions\": [{\"type\": \"PodScheduled\", \"status\": \"True\"}]}}",
                  INTAKE_NOT_UNSCHEDULABLE },
                { "{\"spec\": {}}", INTAKE_MALFORMED },
                { "[]", INTAKE_MALFORMED },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                json_error_t e;
                json_t *pod = json_loads(cases[i].json, 0, &e);
                if (!pod)
                        fail_msg("case %zu: bad JSON: %s", i, e.text);
                enum intake_verdict v = intake_classify_pod(pod);
                if (v != cases[i].want)
                        fail_msg("case %zu: got verdict %d, want %d", i, (int)v, (int)cases[i].want);
                assert_int_equal(intake_pod_is_candidate(pod), cases[i].want == INTAKE_CANDIDATE);
                json_decref(pod);
        }
}

/* A timeline: arrivals (new candidates) at the given times, and the times the window closes when the caller
 * polls every millisecond and closes it as soon as it is due (before taking arrivals of that instant). */
struct timeline {
        const char *what;
        uint64_t idle, max;
        int64_t arrivals[12]; /* -1 ends the list */
        int64_t closes[6];    /* -1 ends the list */
        size_t sizes[6];      /* how many arrivals each closed window held */
};

static void run_timeline(const struct timeline *t) {
        struct intake_batch b;
        intake_batch_init(&b, t->idle, t->max);
        size_t next = 0, closed = 0;
        for (int64_t now = 0; now <= 60000; now++) {
                if (intake_batch_due(&b, now)) {
                        if (t->closes[closed] != now)
                                fail_msg("%s: window %zu closed at %lld, want %lld", t->what, closed, (long long)now,
                                         (long long)t->closes[closed]);
                        size_t n = intake_batch_close(&b);
                        if (n != t->sizes[closed])
                                fail_msg("%s: window %zu held %zu, want %zu", t->what, closed, n, t->sizes[closed]);
                        closed++;
                }
                while (t->arrivals[next] >= 0 && t->arrivals[next] == now) {
                        intake_batch_add(&b, now);
                        next++;
                }
        }
        if (t->closes[closed] != -1)
                fail_msg("%s: only %zu windows closed", t->what, closed);
        assert_int_equal(intake_batch_deadline(&b), -1);
}

static void test_batching_table(void **state) {
        (void)state;
        static const struct timeline cases[] = {
                { "one pod", 1000, 10000, { 100, -1 }, { 1100, -1 }, { 1 } },
                { "a burst within the idle time is one batch", 1000, 10000, { 0, 300, 600, 900, 1800, -1 }, { 2800, -1 },
                  { 5 } },
                { "a gap longer than idle splits", 1000, 10000, { 0, 500, 2000, 2100, -1 }, { 1500, 3100, -1 }, { 2, 2 } },
                /* Arrivals every 900 ms keep the idle timer from expiring; max closes at first + 10 s. */
                { "a steady stream is cut at max", 1000, 10000,
                  { 0, 900, 1800, 2700, 3600, 4500, 5400, 6300, 7200, 8100, 9000, -1 }, { 10000, -1 }, { 11 } },
                { "after a max cut, the next window starts with the next arrival", 1000, 3000,
                  { 0, 900, 1800, 2700, 3500, -1 }, { 3000, 4500, -1 }, { 4, 1 } },
                { "arrival exactly at the idle deadline is too late", 1000, 10000, { 0, 1000, -1 }, { 1000, 2000, -1 },
                  { 1, 1 } },
                { "idle equal to max", 2000, 2000, { 0, 1500, -1 }, { 2000, -1 }, { 2 } },
                { "nothing arrives", 1000, 10000, { -1 }, { -1 }, { 0 } },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
                run_timeline(&cases[i]);
}

static void test_batching_edges(void **state) {
        (void)state;
        struct intake_batch b;
        intake_batch_init(&b, 1000, 10000);
        assert_false(intake_batch_due(&b, 1000000));
        assert_int_equal(intake_batch_close(&b), 0);
        intake_batch_add(&b, 5000);
        assert_int_equal(intake_batch_deadline(&b), 6000);
        /* Two arrivals at the same instant count twice; an earlier timestamp does not move the deadline back. */
        intake_batch_add(&b, 5000);
        intake_batch_add(&b, 4000);
        assert_int_equal(intake_batch_deadline(&b), 6000);
        assert_false(intake_batch_due(&b, 5999));
        assert_true(intake_batch_due(&b, 6000));
        assert_int_equal(intake_batch_close(&b), 3);
        /* max below idle is raised to idle. */
        intake_batch_init(&b, 2000, 500);
        intake_batch_add(&b, 0);
        assert_int_equal(intake_batch_deadline(&b), 2000);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_classify),
                cmocka_unit_test(test_batching_table),
                cmocka_unit_test(test_batching_edges),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
