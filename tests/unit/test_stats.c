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

#include "controller.h"
#include "stats.h"

static int count(const char *text, const char *needle) {
        int n = 0;
        for (const char *p = text; (p = strstr(p, needle)); p++)
                n++;
        return n;
}

/* Every sample line belongs to a family that was declared before it, and no family is declared twice. */
static void assert_declared(const char *t) {
        char *copy = strdup(t), *save = NULL;
        static char declared[16384];
        strcpy(declared, " ");
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char name[128], key[132];
                if (sscanf(line, "# TYPE %126s", name) == 1) {
                        snprintf(key, sizeof key, " %s ", name);
                        if (strstr(declared, key))
                                fail_msg("declared twice: %s", line);
                        strcat(declared, key + 1);
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
                snprintf(key, sizeof key, " %s ", name);
                if (!strstr(declared, key))
                        fail_msg("sample before its TYPE: %s", line);
        }
        free(copy);
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
        char *t = stats_render(&s, NULL);
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
        assert_declared(t);
        free(t);
        for (int i = 1; i < STATS_MAX_WATCHES; i++)
                assert_non_null(stats_watch_add(&s, "x"));
        assert_null(stats_watch_add(&s, "one too many"));
}

static void assert_line(const char *t, const char *line) {
        char want[512];
        snprintf(want, sizeof want, "\npvescale_coordinator_%s\n", line);
        if (!strstr(t, want))
                fail_msg("missing: %s", line);
}

/* The scale-down counters: every label value from zero on, each counted under its own labels; bad enums ignored. */
static void test_scale_down_counters(void **state) {
        (void)state;
        static struct stats s;
        stats_init(&s);
        stats_vm_created(&s, STATS_VM_CREATED_PROVISIONING);
        stats_vm_created(&s, STATS_VM_CREATED_REPLACEMENT);
        stats_vm_created(&s, STATS_VM_CREATED_REPLACEMENT);
        stats_vm_deleted(&s, STATS_VM_DELETED_GARBAGE_COLLECTED);
        stats_vm_deleted(&s, STATS_VM_DELETED_GARBAGE_COLLECTED);
        stats_vm_deleted(&s, STATS_N_VM_DELETED);
        stats_disruption_decision(&s, STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION, STATS_DISRUPTION_REPLACE);
        stats_disruption_decision(&s, STATS_DISRUPTION_EMPTINESS, STATS_DISRUPTION_PDB_BLOCKED);
        stats_disruption_decision(&s, STATS_N_DISRUPTION_METHODS, STATS_DISRUPTION_DELETE);
        stats_disruption_action(&s, STATS_DISRUPTION_DRIFT, STATS_DISRUPTION_DELETE);
        stats_disruption_action(&s, STATS_DISRUPTION_DRIFT, STATS_DISRUPTION_BUDGET); /* not an action */
        stats_eviction(&s, STATS_EVICTION_PDB_BLOCKED);
        stats_eviction(&s, STATS_N_EVICTION_RESULTS);
        stats_vm_created(NULL, STATS_VM_CREATED_PROVISIONING);
        char *t = stats_render(&s, NULL);
        assert_non_null(t);
        assert_line(t, "vms_created_total{reason=\"provisioning\"} 1");
        assert_line(t, "vms_created_total{reason=\"replacement\"} 2");
        assert_line(t, "vms_deleted_total{reason=\"garbage_collected\"} 2");
        assert_line(t, "vms_deleted_total{reason=\"launch_failed\"} 0");
        assert_line(t, "vms_deleted_total{reason=\"terminated\"} 0");
        assert_line(t, "disruption_decisions_total{method=\"multi_node_consolidation\",reason=\"replace\"} 1");
        assert_line(t, "disruption_decisions_total{method=\"emptiness\",reason=\"pdb_blocked\"} 1");
        assert_line(t, "disruption_decisions_total{method=\"repair\",reason=\"stale\"} 0");
        assert_line(t, "disruption_actions_total{method=\"drift\",reason=\"delete\"} 1");
        assert_line(t, "disruption_actions_total{method=\"expiry\",reason=\"replace\"} 0");
        assert_null(strstr(t, "disruption_actions_total{method=\"drift\",reason=\"budget\"}"));
        assert_line(t, "evictions_total{result=\"pdb_blocked\"} 1");
        assert_line(t, "evictions_total{result=\"ok\"} 0");
        assert_line(t, "evictions_total{result=\"error\"} 0");
        assert_int_equal(count(t, "\npvescale_coordinator_disruption_decisions_total{"),
                         STATS_N_DISRUPTION_METHODS * STATS_N_DISRUPTION_REASONS);
        assert_int_equal(count(t, "\npvescale_coordinator_disruption_actions_total{"),
                         STATS_N_DISRUPTION_METHODS * STATS_DISRUPTION_N_DISRUPTING);
        assert_int_equal(count(t, "# TYPE pvescale_coordinator_evictions_total counter\n"), 1);
        /* No pools: the families are declared, with no samples. */
        assert_int_equal(count(t, "# TYPE pvescale_coordinator_nodes_allocatable gauge\n"), 1);
        assert_null(strstr(t, "\npvescale_coordinator_nodes_allocatable{"));
        assert_declared(t);
        free(t);
}

/* Karpenter's nodeclaims_disrupted_total and pods_disruption_initiated_total: one sample per label set, the pods
 * added up; and pods_startup_duration_seconds, a histogram. */
static void test_karpenter_names(void **state) {
        (void)state;
        static struct stats s;
        stats_init(&s);
        struct stats_disruption_labels l = { .reason = "underutilized", .nodepool = "web", .capacity_type = "on-demand",
                                             .consolidation_policy = "balanced", .termination_mode = "graceful" };
        stats_nodeclaim_disrupted(&s, &l, 3);
        stats_nodeclaim_disrupted(&s, &l, 2);
        l.reason = "registration_timeout";
        l.consolidation_policy = "";
        stats_nodeclaim_disrupted(&s, &l, 0);
        stats_observe(&s, STATS_H_POD_STARTUP, 12.5);
        char *t = stats_render(&s, NULL);
        assert_non_null(t);
        assert_line(t, "nodeclaims_disrupted_total{reason=\"underutilized\",nodepool=\"web\","
                       "capacity_type=\"on-demand\",consolidation_policy=\"balanced\","
                       "termination_mode=\"graceful\"} 2");
        assert_line(t, "pods_disruption_initiated_total{reason=\"underutilized\",nodepool=\"web\","
                       "capacity_type=\"on-demand\",consolidation_policy=\"balanced\","
                       "termination_mode=\"graceful\"} 5");
        assert_line(t, "nodeclaims_disrupted_total{reason=\"registration_timeout\",nodepool=\"web\","
                       "capacity_type=\"on-demand\",consolidation_policy=\"\",termination_mode=\"graceful\"} 1");
        assert_line(t, "pods_startup_duration_seconds_bucket{le=\"15\"} 1");
        assert_line(t, "pods_startup_duration_seconds_bucket{le=\"10\"} 0");
        assert_line(t, "pods_startup_duration_seconds_count 1");
        assert_declared(t);
        free(t);
}

/* The NodePools' gauges: label values escaped, cpu in cores, memory in bytes, every phase of every pool. */
static void test_cluster_render(void **state) {
        (void)state;
        static struct stats s;
        struct stats_cluster cl = { 0 };
        stats_init(&s);
        struct stats_pool *p = stats_cluster_pool(&cl, "de\"f\\a\nult");
        assert_non_null(p);
        p->claims[STATS_PHASE_REGISTERED] = 2;
        p->nodes = 3;
        p->allocatable[STATS_RESOURCE_CPU] = 5500;
        p->allocatable[STATS_RESOURCE_MEMORY] = 12884901888;
        p->requested[STATS_RESOURCE_CPU] = 250;
        assert_ptr_equal(stats_cluster_pool(&cl, "de\"f\\a\nult"), p);
        for (int i = 0; i < 20; i++) { /* grows */
                char name[16];
                snprintf(name, sizeof name, "pool-%d", i);
                assert_non_null(stats_cluster_pool(&cl, name));
        }
        assert_int_equal(cl.n, 21);
        char *t = stats_render(&s, &cl);
        assert_non_null(t);
        assert_line(t, "nodeclaims_phase{nodepool=\"de\\\"f\\\\a\\nult\",phase=\"Registered\"} 2");
        assert_line(t, "nodeclaims_phase{nodepool=\"de\\\"f\\\\a\\nult\",phase=\"Launching\"} 0");
        assert_line(t, "nodeclaims_phase{nodepool=\"pool-19\",phase=\"Terminating\"} 0");
        assert_line(t, "nodes{nodepool=\"de\\\"f\\\\a\\nult\"} 3");
        assert_line(t, "nodes_allocatable{nodepool=\"de\\\"f\\\\a\\nult\",resource_type=\"cpu\"} 5.5");
        assert_line(t, "nodes_allocatable{nodepool=\"de\\\"f\\\\a\\nult\",resource_type=\"memory\"} 12884901888");
        assert_line(t, "nodes_total_pod_requests{nodepool=\"de\\\"f\\\\a\\nult\",resource_type=\"cpu\"} 0.25");
        assert_line(t, "nodes_capacity{nodepool=\"pool-0\",resource_type=\"memory\"} 0");
        assert_int_equal(count(t, "\npvescale_coordinator_nodeclaims_phase{"), 21 * STATS_N_PHASES);
        assert_int_equal(count(t, "\npvescale_coordinator_nodes_capacity{"), 21 * STATS_N_RESOURCES);
        assert_declared(t);
        free(t);
        stats_cluster_done(&cl);
        assert_int_equal(cl.n, 0);
}

static json_t *parse(const char *text) {
        json_error_t e;
        json_t *j = json_loads(text, 0, &e);
        if (!j)
                fail_msg("test JSON: %s at %d", e.text, e.position);
        return j;
}

#define NODE(name, pool, cpu, mem)                                                                             \
        "{\"metadata\": {\"name\": \"" name "\", \"labels\": {" pool "}}, \"status\": {\"capacity\": {\"cpu\": \"" \
        cpu "\", \"memory\": \"" mem "\", \"pods\": \"110\"}, \"allocatable\": {\"cpu\": \"" cpu             \
        "\", \"memory\": \"" mem "\", \"pods\": \"110\"}}}"
#define POD(name, node, cpu)                                                                                    \
        "{\"metadata\": {\"name\": \"" name "\", \"namespace\": \"default\"}, \"spec\": {\"nodeName\": \"" node \
        "\", \"containers\": [{\"name\": \"c\", \"resources\": {\"requests\": {\"cpu\": \"" cpu                  \
        "\", \"memory\": \"1Gi\"}}}]}}"
#define CLAIM(pool, extra_meta, conds)                                                                        \
        "{\"metadata\": {\"name\": \"c\"" extra_meta "}, \"spec\": {\"nodePool\": \"" pool "\"}, \"status\": " \
        "{\"conditions\": [" conds "]}}"
#define TRUE_COND(type) "{\"type\": \"" type "\", \"status\": \"True\"}"

/* controller_gauges: phases from the deletionTimestamp and the conditions; nodes by their pool label, their pods'
 * requests (init containers as the scheduler counts them); what is not a pool's, or malformed, is left out. */
static void test_gauges(void **state) {
        (void)state;
        json_t *pools = parse("[{\"metadata\": {\"name\": \"empty\"}}, {\"metadata\": {\"name\": \"a\"}}]");
        json_t *claims = parse("[" CLAIM("a", "", "") "," CLAIM("a", "", TRUE_COND("Launched") "," TRUE_COND(
                "Registered")) "," CLAIM("a", "", TRUE_COND("Registered") "," TRUE_COND("Initialized")) "," CLAIM(
                "a", ", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"", TRUE_COND("Initialized")) "," CLAIM(
                "b", "", "{\"type\": \"Registered\", \"status\": \"False\"}") ", {\"metadata\": {\"name\": \"x\"}}]");
        json_t *nodes = parse("[" NODE("n1", "\"pvescale.io/nodepool\": \"a\"", "4", "8Gi") "," NODE(
                "n2", "\"pvescale.io/nodepool\": \"a\"", "2500m", "4Gi") "," NODE("other", "", "64", "256Gi") "," NODE(
                "bad", "\"pvescale.io/nodepool\": \"a\"", "lots", "4Gi") "]");
        json_t *pods = parse("[" POD("p1", "n1", "1500m") "," POD("p2", "n2", "250m") "," POD("p3", "other", "8") ","
                             POD("p4", "gone", "1") ","
                             "{\"metadata\": {\"name\": \"init\", \"namespace\": \"default\"}, \"spec\": {\"nodeName\": "
                             "\"n1\", \"initContainers\": [{\"name\": \"i\", \"resources\": {\"requests\": {\"cpu\": "
                             "\"2\"}}}], \"containers\": [{\"name\": \"c\", \"resources\": {\"requests\": {\"cpu\": "
                             "\"100m\", \"memory\": \"512Mi\"}}}]}}]");
        struct stats_cluster cl = { 0 };
        assert_int_equal(controller_gauges(pools, claims, nodes, pods, &cl), 0);
        assert_int_equal(cl.n, 3);
        assert_string_equal(cl.pools[0].name, "empty");
        assert_int_equal(cl.pools[0].nodes + cl.pools[0].claims[STATS_PHASE_LAUNCHING], 0);
        const struct stats_pool *a = &cl.pools[1], *b = &cl.pools[2];
        assert_string_equal(a->name, "a");
        assert_int_equal(a->claims[STATS_PHASE_LAUNCHING], 1);
        assert_int_equal(a->claims[STATS_PHASE_REGISTERED], 1);
        assert_int_equal(a->claims[STATS_PHASE_INITIALIZED], 1);
        assert_int_equal(a->claims[STATS_PHASE_TERMINATING], 1);
        assert_string_equal(b->name, "b");
        assert_int_equal(b->claims[STATS_PHASE_LAUNCHING], 1);
        assert_int_equal(a->nodes, 2);
        assert_int_equal(a->capacity[STATS_RESOURCE_CPU], 6500);
        assert_int_equal(a->allocatable[STATS_RESOURCE_MEMORY], 12LL << 30);
        assert_int_equal(a->requested[STATS_RESOURCE_CPU], 1500 + 250 + 2000);
        assert_int_equal(a->requested[STATS_RESOURCE_MEMORY], (2LL << 30) + (512LL << 20));
        stats_cluster_done(&cl);
        json_decref(pools);
        json_decref(claims);
        json_decref(nodes);
        json_decref(pods);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_render), cmocka_unit_test(test_scale_down_counters),
                                            cmocka_unit_test(test_cluster_render), cmocka_unit_test(test_gauges),
                                            cmocka_unit_test(test_karpenter_names) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
