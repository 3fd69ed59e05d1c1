/* Tests for coordinator/stats: the Prometheus text (one HELP/TYPE per family, labels, histogram buckets). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

static int count(const char *text, const char *needle) {
        int n = 0;
        for (const char *p = text; (p = strstr(p, needle)); p++)
                n++;
        return n;
}

static void test_render(void **state) {
        (void)state;
        static struct stats s;
        stats_init(&s);
        stats_add(&s, STATS_CLAIMS_CREATED, 3);
        stats_add(&s, STATS_LAUNCH_FAILED, 1);
        stats_add(&s, STATS_AGENT_ERRORS, 2);
        stats_set(&s, STATS_PENDING_PODS, 17);
        stats_observe(&s, STATS_H_SIMULATE, 0.003);
        stats_observe(&s, STATS_H_SIMULATE, 0.2);
        stats_observe(&s, STATS_H_SIMULATE, 60);
        stats_observe(&s, STATS_H_START, 1.05);
        stats_observe(&s, STATS_H_START_OWN, 0.4);
        struct stats_watch *w = stats_watch_add(&s, "pods");
        atomic_store(&w->relists_410, 4);
        atomic_store(&w->synced, 1);
        char *t = stats_render(&s);
        assert_non_null(t);
        assert_non_null(strstr(t, "\npvescale_coordinator_nodeclaims_created_total 3\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_launches_total{result=\"failed\"} 1\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_launches_total{result=\"initialized\"} 0\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_api_errors_total{api=\"agent\"} 2\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_pending_pods 17\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_watch_relists_410_total{resource=\"pods\"} 4\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_informer_synced{resource=\"pods\"} 1\n"));
        /* Buckets are cumulative. */
        assert_non_null(strstr(t, "simulate_duration_seconds_bucket{le=\"0.001\"} 0\n"));
        assert_non_null(strstr(t, "simulate_duration_seconds_bucket{le=\"0.005\"} 1\n"));
        assert_non_null(strstr(t, "simulate_duration_seconds_bucket{le=\"0.25\"} 2\n"));
        assert_non_null(strstr(t, "simulate_duration_seconds_bucket{le=\"5\"} 2\n"));
        assert_non_null(strstr(t, "simulate_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        /* Each histogram counts only its own observations. */
        assert_non_null(strstr(t, "\npvescale_coordinator_launch_start_seconds_bucket{le=\"1\"} 0\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_launch_start_seconds_bucket{le=\"1.1\"} 1\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_launch_start_seconds_count 1\n"));
        assert_non_null(strstr(t, "\npvescale_coordinator_launch_start_own_seconds_bucket{le=\"0.5\"} 1\n"));
        assert_non_null(strstr(t, "simulate_duration_seconds_count 3\n"));
        /* One HELP and one TYPE line per family, even with several label sets. */
        assert_int_equal(count(t, "# TYPE pvescale_coordinator_launches_total counter\n"), 1);
        assert_int_equal(count(t, "# HELP pvescale_coordinator_api_errors_total "), 1);
        assert_int_equal(count(t, "# TYPE pvescale_coordinator_simulate_duration_seconds histogram\n"), 1);
        /* Every sample line belongs to a family that was declared before it. */
        char *copy = strdup(t), *save = NULL;
        char declared[4096] = "";
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char name[128];
                if (sscanf(line, "# TYPE %127s", name) == 1) {
                        strcat(declared, name);
                        strcat(declared, " ");
                        continue;
                }
                if (line[0] == '#')
                        continue;
                size_t n = strcspn(line, "{ ");
                snprintf(name, sizeof name, "%.*s", (int)n, line);
                char *p = strstr(name, "_bucket");
                if (!p)
                        p = strstr(name, "_sum");
                if (!p && strstr(name, "seconds_count")) /* histograms: *_seconds_count */
                        p = strstr(name, "_count");
                if (p)
                        *p = '\0';
                strcat(name, " ");
                if (!strstr(declared, name))
                        fail_msg("sample before its TYPE: %s", line);
        }
        free(copy);
        free(t);
        for (int i = 1; i < STATS_MAX_WATCHES; i++)
                assert_non_null(stats_watch_add(&s, "x"));
        assert_null(stats_watch_add(&s, "one too many"));
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_render) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
