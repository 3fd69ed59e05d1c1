/* Tests for agent/metrics: request counting, bounded tables, and the exposition of a real agent state (escaping
 * and the format itself: test_prom). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent.h"
#include "metrics.h"

#define REQ "pvescale_agent_http_requests_total"
#define DUR "pvescale_agent_http_request_duration_seconds"
#define HUGE "pvescale_agent_numa_node_hugepages_"

/* ---- helpers ---- */

/* The value of the sample line that starts with `prefix` followed by a space, or NAN when absent. */
/* GET /metrics's text for the agent a. */
static char *render(const struct metrics *m, const struct agent *a) {
        struct metrics_view view = agent_metrics_view(a);
        return metrics_render(m, &view);
}

static double sample(const char *text, const char *prefix) {
        size_t n = strlen(prefix);
        for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
                if (strncmp(line, prefix, n) == 0 && line[n] == ' ')
                        return strtod(line + n + 1, NULL);
        return NAN;
}

static unsigned count_lines_with(const char *text, const char *needle) {
        unsigned n = 0;
        for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

/* Every sample line belongs to a family announced by "# HELP" and "# TYPE" lines before it, and every
 * line is either a comment or "name[{labels}] value". */
static void assert_well_formed(const char *text) {
        char family[128] = "";
        for (const char *line = text; *line;) {
                const char *end = strchr(line, '\n');
                assert_non_null(end);
                if (strncmp(line, "# HELP ", 7) == 0) {
                        snprintf(family, sizeof family, "%.*s", (int)strcspn(line + 7, " "), line + 7);
                } else if (strncmp(line, "# TYPE ", 7) == 0) {
                        assert_int_equal(strncmp(line + 7, family, strlen(family)), 0);
                } else {
                        assert_true(family[0] != '\0');
                        if (strncmp(line, family, strlen(family)) != 0)
                                fail_msg("sample outside its family %s: %.*s", family, (int)(end - line), line);
                        const char *space = memchr(line, ' ', (size_t)(end - line));
                        const char *brace = memchr(line, '{', (size_t)(end - line));
                        assert_non_null(space);
                        if (brace && brace < space) /* labels may hold spaces: the value follows "} " */
                                space = strstr(brace, "} ") + 1;
                        char *num_end;
                        strtod(space + 1, &num_end);
                        assert_ptr_equal(num_end, end);
                }
                line = end + 1;
        }
}

/* ---- counting ---- */

static void test_observe_counts_by_route_method_status(void **state) {
        (void)state;
        struct metrics m = { 0 };
        metrics_observe_request(&m, "/v1/capacity", "GET", 200, 0.0002);
        metrics_observe_request(&m, "/v1/capacity", "GET", 200, 0.003);
        metrics_observe_request(&m, "/v1/capacity", "GET", 401, 0.00005);
        metrics_observe_request(&m, "/v1/reservations", "POST", 201, 0.7);
        metrics_observe_request(&m, "/v1/reservations", "POST", 201, 9.0);
        assert_int_equal(m.n_series, 3);
        assert_int_equal(m.n_latency, 2);
        struct agent a = { 0 };
        char *text = render(&m, &a);
        assert_non_null(text);
        assert_well_formed(text);
        assert_true(sample(text, REQ "{route=\"/v1/capacity\",method=\"GET\",status=\"200\"}") == 2);
        assert_true(sample(text, REQ "{route=\"/v1/capacity\",method=\"GET\",status=\"401\"}") == 1);
        assert_true(sample(text, REQ "{route=\"/v1/reservations\",method=\"POST\",status=\"201\"}") == 2);
        /* Buckets are cumulative; +Inf is the count; sum adds the seconds. */
        assert_true(sample(text, DUR "_bucket{route=\"/v1/capacity\",le=\"0.0001\"}") == 1);
        assert_true(sample(text, DUR "_bucket{route=\"/v1/capacity\",le=\"0.00025\"}") == 2);
        assert_true(sample(text, DUR "_bucket{route=\"/v1/capacity\",le=\"0.0025\"}") == 2);
        assert_true(sample(text, DUR "_bucket{route=\"/v1/capacity\",le=\"0.005\"}") == 3);
        assert_true(sample(text, DUR "_bucket{route=\"/v1/reservations\",le=\"2.5\"}") == 1);
        assert_true(sample(text, DUR "_bucket{route=\"/v1/reservations\",le=\"+Inf\"}") == 2);
        assert_true(sample(text, DUR "_count{route=\"/v1/reservations\"}") == 2);
        assert_true(fabs(sample(text, DUR "_sum{route=\"/v1/reservations\"}") - 9.7) < 1e-9);
        free(text);
}

static void test_odd_input_is_normalised(void **state) {
        (void)state;
        struct metrics m = { 0 };
        metrics_observe_request(&m, "/v1/\x01x", "BREW", 999, -1.0);
        metrics_observe_request(&m, NULL, NULL, 200, NAN);
        assert_string_equal(m.series[0].route, "/v1/?x");
        assert_string_equal(m.series[0].method, "other");
        assert_int_equal(m.series[0].status, 0);
        assert_string_equal(m.series[1].route, "other");
        assert_true(m.latency[0].sum_seconds == 0 && m.latency[0].buckets[0] == 1);
        assert_true(m.latency[1].sum_seconds == 0);
}

static void test_tables_are_bounded(void **state) {
        (void)state;
        struct metrics *m = calloc(1, sizeof *m);
        assert_non_null(m);
        char route[32];
        const unsigned n = 3 * METRICS_MAX_SERIES;
        for (unsigned i = 0; i < n; i++) {
                snprintf(route, sizeof route, "/r%u", i);
                metrics_observe_request(m, route, i % 2 ? "GET" : "POST", 200 + i % 3, 0.001);
        }
        assert_true(m->n_series <= METRICS_MAX_SERIES);
        assert_true(m->n_latency <= METRICS_MAX_ROUTES);
        uint64_t total = 0, hist = 0;
        for (size_t i = 0; i < m->n_series; i++)
                total += m->series[i].count;
        for (size_t i = 0; i < m->n_latency; i++)
                hist += m->latency[i].count;
        assert_int_equal(total, n); /* nothing is dropped: the overflow counts under "other" */
        assert_int_equal(hist, n);
        assert_string_equal(m->latency[m->n_latency - 1].route, METRICS_OTHER_ROUTE);
        free(m);
}

/* ---- a real agent state ---- */

static void write_file(const char *dir, const char *name, const char *text) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

struct fixture {
        char dir[64];
        struct agent a;
};

/* Replace node 0's hugepages by one 2 MiB pool with 40 of 100 pages free (XML topologies have none). */
static void set_hugepages(struct topology *t) {
        free(t->numa_nodes[0].hugepages);
        t->numa_nodes[0].hugepages = calloc(1, sizeof *t->numa_nodes[0].hugepages);
        assert_non_null(t->numa_nodes[0].hugepages);
        t->numa_nodes[0].n_hugepages = 1;
        t->numa_nodes[0].hugepages[0] = (struct topology_hugepages){ .page_kib = 2048, .total = 100, .free = 40 };
}

static void reserve(struct agent *a, unsigned vcpus, int bind_vmid) {
        char text[128], reason[256];
        snprintf(text, sizeof text, "{\"vcpus\": %u, \"memory_bytes\": 1073741824, \"owner\": \"t\"}", vcpus);
        json_t *body = json_loads(text, 0, NULL);
        struct reservation_request req;
        struct reservation *r;
        assert_int_equal(ledger_parse_request(body, &req, reason, sizeof reason), 0);
        json_decref(body);
        assert_int_equal(ledger_reserve(a->ledger, a->topology, a->capacity, &req, true, agent_now(), &r, reason,
                                        sizeof reason), 0);
        if (bind_vmid)
                assert_int_equal(ledger_bind(a->ledger, r->id, bind_vmid), 0);
        assert_int_equal(agent_ledger_changed(a), 0);
}

static int setup_agent(void **state) {
        struct fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        snprintf(f->dir, sizeof f->dir, "/tmp/pvescale-test-metrics-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        write_file(f->dir, "101.conf", "name: a\ncores: 2\nmemory: 1024\naffinity: 0-1\n");
        write_file(f->dir, "102.conf", "name: b\ncores: 4\nmemory: 2048\n");
        write_file(f->dir, "103.conf", "name: c\ncores: 1\nmemory: 512\nbogus line\n");
        const char *shared = getenv("PVESCALE_SHARED");
        char xml[512];
        snprintf(xml, sizeof xml, "%s/topologies/eas-tioga.xml", shared ? shared : "../shared");
        struct agent *a = &f->a;
        char err[512];
        assert_int_equal(agent_config_defaults(&a->cfg), 0);
        assert_int_equal(agent_config_set(&a->cfg, "topology_xml", xml, err, sizeof err), 0);
        assert_int_equal(agent_config_set(&a->cfg, "pve_config_dir", f->dir, err, sizeof err), 0);
        assert_int_equal(agent_config_set(&a->cfg, "pve_run_dir", f->dir, err, sizeof err), 0);
        const char *src = getenv("PVESCALE_SOURCE_DIR");
        char lxc[512], cgroup[512];
        snprintf(lxc, sizeof lxc, "%s/tests/unit/data/lxc-host/etc/pve/lxc", src ? src : ".");
        snprintf(cgroup, sizeof cgroup, "%s/tests/unit/data/lxc-host/sys/fs/cgroup/lxc", src ? src : ".");
        assert_int_equal(agent_config_set(&a->cfg, "pve_lxc_dir", lxc, err, sizeof err), 0);
        assert_int_equal(agent_config_set(&a->cfg, "lxc_cgroup_dir", cgroup, err, sizeof err), 0);
        assert_int_equal(agent_config_set(&a->cfg, "node_name", "pve\"1\\x\n", err, sizeof err), 0);
        assert_int_equal(agent_config_set(&a->cfg, "region", "eu", err, sizeof err), 0);
        assert_int_equal(agent_config_set(&a->cfg, "node_policy", "static", err, sizeof err), 0);
        if (agent_load_all(a, err, sizeof err) < 0)
                fail_msg("agent_load_all: %s", err);
        set_hugepages(a->topology);
        reserve(a, 4, 0);
        reserve(a, 2, 0);
        reserve(a, 4, 102);
        *state = f;
        return 0;
}

static int teardown_agent(void **state) {
        struct fixture *f = *state;
        agent_done(&f->a);
        const char *names[] = { "101.conf", "102.conf", "103.conf" };
        char path[512];
        for (size_t i = 0; i < 3; i++) {
                snprintf(path, sizeof path, "%s/%s", f->dir, names[i]);
                unlink(path);
        }
        rmdir(f->dir);
        free(f);
        return 0;
}

static void test_render_agent_state(void **state) {
        struct fixture *f = *state;
        const struct agent *a = &f->a;
        struct metrics m = { 0 };
        metrics_observe_request(&m, "/metrics", "GET", 200, 0.001);
        char *text = render(&m, a);
        assert_non_null(text);
        assert_well_formed(text);
        char prefix[256];
        snprintf(prefix, sizeof prefix, "pvescale_agent_build_info{version=\"%s\"}", PVESCALE_VERSION);
        assert_true(sample(text, prefix) == 1);
        assert_non_null(strstr(text, "pvescale_agent_host_info{node=\"pve\\\"1\\\\x\\n\",region=\"eu\","));
        assert_true(sample(text, "pvescale_agent_cpus_free") == a->capacity->cpus_free);
        assert_true(sample(text, "pvescale_agent_memory_free_bytes") == (double)a->capacity->memory_free_bytes);
        assert_int_equal(count_lines_with(text, "\npvescale_agent_numa_node_cpus_free{"), a->capacity->n_numa);
        for (size_t i = 0; i < a->capacity->n_numa; i++) {
                const struct capacity_numa *n = &a->capacity->numa[i];
                snprintf(prefix, sizeof prefix, "pvescale_agent_numa_node_cpus_free{node=\"%d\"}", n->id);
                assert_true(sample(text, prefix) == n->cpus_free);
                snprintf(prefix, sizeof prefix, "pvescale_agent_numa_node_memory_free_bytes{node=\"%d\"}", n->id);
                assert_true(sample(text, prefix) == (double)n->memory_free_bytes);
        }
        assert_true(sample(text, HUGE "free_pages{node=\"0\",page_size=\"2048kB\"}") == 40);
        assert_true(sample(text, HUGE "configured_pages{node=\"0\",page_size=\"2048kB\"}") == 100);
        assert_true(sample(text, "pvescale_agent_reservations{state=\"pending\"}") == 2);
        assert_true(sample(text, "pvescale_agent_reservations{state=\"bound\"}") == 1);
        assert_true(sample(text, "pvescale_agent_vms{state=\"stopped\"}") == 3);
        assert_true(sample(text, "pvescale_agent_vms{state=\"running\"}") == 0);
        assert_true(sample(text, "pvescale_agent_vm_config_problems") == 1);
        /* tests/unit/data/lxc-host: 201 and 202 run; 203-206 do not; 205 has bad lines, 206 cannot be read */
        assert_true(sample(text, "pvescale_agent_containers{state=\"running\"}") == 2);
        assert_true(sample(text, "pvescale_agent_containers{state=\"stopped\"}") == 4);
        assert_true(sample(text, "pvescale_agent_container_config_problems") == 2);
        assert_true(sample(text, "pvescale_agent_pinned_vms") == 0); /* VM 102 is bound but not running */
        assert_true(sample(text, "pvescale_agent_vms_to_pin") == 0);
        assert_true(sample(text, "pvescale_agent_pins_total") == 0);
        assert_true(sample(text, "pvescale_agent_pin_failures_total") == 0);
        assert_true(sample(text, REQ "{route=\"/metrics\",method=\"GET\",status=\"200\"}") == 1);
        free(text);
}

static void test_render_counts_pin_counters(void **state) {
        struct fixture *f = *state;
        f->a.pins.pins_ok = 7;
        f->a.pins.pin_failures = 3;
        struct metrics m = { 0 };
        char *text = render(&m, &f->a);
        assert_non_null(text);
        assert_true(sample(text, "pvescale_agent_pins_total") == 7);
        assert_true(sample(text, "pvescale_agent_pin_failures_total") == 3);
        free(text);
        f->a.pins.pins_ok = f->a.pins.pin_failures = 0;
}

static void test_render_empty_agent(void **state) {
        (void)state;
        struct metrics m = { 0 };
        struct agent a = { 0 };
        char *text = render(&m, &a);
        assert_non_null(text);
        assert_well_formed(text);
        assert_null(strstr(text, "pvescale_agent_cpus_free"));
        assert_null(strstr(text, "pvescale_agent_reservations"));
        assert_non_null(strstr(text, "# TYPE pvescale_agent_http_request_duration_seconds histogram\n"));
        free(text);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_observe_counts_by_route_method_status),
                cmocka_unit_test(test_odd_input_is_normalised),
                cmocka_unit_test(test_tables_are_bounded),
                cmocka_unit_test(test_render_empty_agent),
                cmocka_unit_test_setup_teardown(test_render_agent_state, setup_agent, teardown_agent),
                cmocka_unit_test_setup_teardown(test_render_counts_pin_counters, setup_agent, teardown_agent),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
