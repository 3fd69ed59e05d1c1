/* Tests for coordinator/options: the controller's flags and environment, and what is left for config_load. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "options.h"

struct option_case {
        const char *args[8]; /* after argv[0]; NULL-terminated */
        const char *env[3];
        int rc;
        bool launch, leader_elect;
        unsigned workers;
        const char *left[6]; /* what config_load gets after argv[0] */
        const char *err;     /* substring of the error */
};

static void run_case(size_t k, const struct option_case *c) {
        char *argv[10] = { "pvescale-coordinator" };
        int argc = 1;
        for (; c->args[argc - 1]; argc++)
                argv[argc] = (char *)c->args[argc - 1];
        argv[argc] = NULL;
        struct options o;
        char err[256] = "";
        options_init(&o);
        int rc = options_parse(&o, &argc, argv, c->env, err, sizeof err);
        if (rc != c->rc)
                fail_msg("case %zu: rc %d, want %d (%s)", k, rc, c->rc, err);
        if (rc < 0) {
                if (!strstr(err, c->err))
                        fail_msg("case %zu: error \"%s\" lacks \"%s\"", k, err, c->err);
                return;
        }
        if (o.launch != c->launch || o.leader_elect != c->leader_elect || o.workers != c->workers)
                fail_msg("case %zu: launch %d leader %d workers %u", k, o.launch, o.leader_elect, o.workers);
        int n = 0;
        while (c->left[n])
                n++;
        if (argc != n + 1)
                fail_msg("case %zu: %d arguments left, want %d", k, argc - 1, n);
        for (int i = 0; i < n; i++)
                assert_string_equal(argv[i + 1], c->left[i]);
        assert_null(argv[argc]);
}

static void test_options_table(void **state) {
        (void)state;
        static const struct option_case cases[] = {
                { { NULL }, { NULL }, 0, true, true, 64, { NULL }, NULL },
                { { "--launch=false", NULL }, { NULL }, 0, false, true, 64, { NULL }, NULL },
                /* "--launch false": the next argument is taken only when it is a boolean. */
                { { "--launch", "false", "--config", "x", NULL }, { NULL }, 0, false, true, 64, { "--config", "x" }, NULL },
                { { "--launch", "--config", "x", NULL }, { NULL }, 0, true, true, 64, { "--config", "x" }, NULL },
                { { "--config", "x", "-leader-elect=no", "--workers", "8", "--log-level=debug", NULL }, { NULL }, 0, true,
                  false, 8, { "--config", "x", "--log-level=debug" }, NULL },
                { { "--workers=2", NULL }, { "WORKERS=16", "LAUNCH=0", NULL }, 0, false, true, 2, { NULL }, NULL },
                { { NULL }, { "LEADER_ELECT=false", "LAUNCH=", NULL }, 0, true, false, 64, { NULL }, NULL },
                /* Flags win over the environment. */
                { { "--launch=true", NULL }, { "LAUNCH=false", NULL }, 0, true, true, 64, { NULL }, NULL },
                { { "--launchx", NULL }, { NULL }, 0, true, true, 64, { "--launchx" }, NULL },
                /* boolword's words, in any case, as the agent and Proxmox configs read them */
                { { "--launch=OFF", "--leader-elect", "off", NULL }, { NULL }, 0, false, false, 64, { NULL }, NULL },
                { { NULL }, { "LAUNCH=No", "LEADER_ELECT=On", NULL }, 0, false, true, 64, { NULL }, NULL },
                { { "--launch=maybe", NULL }, { NULL }, -22, 0, 0, 0, { NULL }, "--launch: expected true or false" },
                { { "--workers", "0", NULL }, { NULL }, -22, 0, 0, 0, { NULL }, "--workers: expected a number from 1" },
                { { "--workers=257", NULL }, { NULL }, -22, 0, 0, 0, { NULL }, "--workers" },
                { { "--workers", NULL }, { NULL }, -22, 0, 0, 0, { NULL }, "--workers: needs a value" },
                { { NULL }, { "LAUNCH=perhaps", NULL }, -22, 0, 0, 0, { NULL }, "LAUNCH: expected true or false" },
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
                run_case(k, &cases[k]);
        assert_non_null(strstr(options_usage(), "--leader-elect"));
}

/* --disruption (default on) and --node-repair (default off), by flag and by environment; a bad value is named. */
static void test_disruption_flags(void **state) {
        (void)state;
        char *none[2] = { "pvescale-coordinator", NULL };
        char *argv[4] = { "pvescale-coordinator", "--disruption=false", "--node-repair", NULL };
        const char *env[] = { "NODE_REPAIR=no", NULL }, *no_env[] = { NULL };
        char err[256] = "";
        int argc = 1;
        struct options o;
        options_init(&o);
        assert_int_equal(options_parse(&o, &argc, none, no_env, err, sizeof err), 0);
        assert_true(o.disruption);
        assert_false(o.node_repair);
        argc = 3;
        assert_int_equal(options_parse(&o, &argc, argv, env, err, sizeof err), 0);
        assert_false(o.disruption);
        assert_true(o.node_repair); /* the flag wins over NODE_REPAIR=no */
        assert_int_equal(argc, 1);
        char *bad[3] = { "pvescale-coordinator", "--disruption=maybe", NULL };
        argc = 2;
        options_init(&o);
        assert_int_equal(options_parse(&o, &argc, bad, no_env, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "--disruption: expected true or false"));
        assert_non_null(strstr(options_usage(), "--node-repair"));
}

/* The scale-down periods: defaults, Go durations by flag and environment, and out-of-range values named. */
static void test_duration_flags(void **state) {
        (void)state;
        char *argv[6] = { "pvescale-coordinator", "--disruption-interval=2s", "--gc-interval", "1m30s",
                          "--replacement-timeout=500ms", NULL };
        const char *env[] = { "NODE_REPAIR_AFTER=20s", "GC_INTERVAL=5s", NULL };
        char err[256] = "";
        struct options o;
        options_init(&o);
        assert_int_equal(o.disruption_interval_ms, 10000);
        assert_int_equal(o.gc_interval_ms, 60000);
        assert_int_equal(o.node_repair_after_ms, 15 * 60 * 1000);
        assert_int_equal(o.replacement_timeout_ms, 10 * 60 * 1000);
        int argc = 5;
        assert_int_equal(options_parse(&o, &argc, argv, env, err, sizeof err), 0);
        assert_int_equal(argc, 1);
        assert_int_equal(o.disruption_interval_ms, 2000);
        assert_int_equal(o.gc_interval_ms, 90000); /* the flag wins over GC_INTERVAL */
        assert_int_equal(o.node_repair_after_ms, 20000);
        assert_int_equal(o.replacement_timeout_ms, 500);
        assert_int_equal(o.clone_timeout_ms, 10 * 60 * 1000);
        assert_int_equal(o.registration_timeout_ms, 15 * 60 * 1000);
        assert_int_equal(o.task_timeout_ms, 2 * 60 * 1000);
        assert_int_equal(o.drain_timeout_ms, 0); /* none */
        char *timeouts[6] = { "pvescale-coordinator", "--clone-timeout=20m", "--registration-timeout", "5m",
                              "--drain-timeout=1h", NULL };
        const char *task_env[] = { "TASK_TIMEOUT=45s", NULL };
        argc = 5;
        assert_int_equal(options_parse(&o, &argc, timeouts, task_env, err, sizeof err), 0);
        assert_int_equal(o.clone_timeout_ms, 20 * 60 * 1000);
        assert_int_equal(o.registration_timeout_ms, 5 * 60 * 1000);
        assert_int_equal(o.task_timeout_ms, 45000);
        assert_int_equal(o.drain_timeout_ms, 60 * 60 * 1000);
        static const char *const bad[][2] = { { "--gc-interval=10", "--gc-interval: expected a duration" },
                                              { "--disruption-interval=50ms", "--disruption-interval: expected" },
                                              { "--replacement-timeout=25h", "--replacement-timeout: expected" },
                                              { "--node-repair-after=-1s", "--node-repair-after: expected" },
                                              { "--drain-timeout=forever", "--drain-timeout: expected" } };
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
                char *a[3] = { "pvescale-coordinator", (char *)bad[k][0], NULL };
                const char *no_env[] = { NULL };
                options_init(&o);
                argc = 2;
                assert_int_equal(options_parse(&o, &argc, a, no_env, err, sizeof err), -EINVAL);
                if (!strstr(err, bad[k][1]))
                        fail_msg("%s: error \"%s\" lacks \"%s\"", bad[k][0], err, bad[k][1]);
                assert_int_equal(o.gc_interval_ms, 60000); /* nothing changed by a bad value */
        }
        const char *bad_env[] = { "DISRUPTION_INTERVAL=soon", NULL };
        char *none[2] = { "pvescale-coordinator", NULL };
        argc = 1;
        assert_int_equal(options_parse(&o, &argc, none, bad_env, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "DISRUPTION_INTERVAL: expected a duration"));
        assert_non_null(strstr(options_usage(), "--node-repair-after"));
}

/* Leader election's periods (client-go's and kube-controller-manager's names and defaults), so that a test need not
 * wait 15 s for a takeover; a renew deadline not under the lease, or a retry period not under it / 1.2, exits 2. */
static void test_leader_election_flags(void **state) {
        (void)state;
        struct options o;
        char err[256] = "";
        options_init(&o);
        assert_int_equal(o.lease_duration_ms, 15000);
        assert_int_equal(o.renew_deadline_ms, 10000);
        assert_int_equal(o.retry_period_ms, 2000);
        char *argv[5] = { "pvescale-coordinator", "--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline",
                          "4s", NULL };
        const char *env[] = { "LEADER_ELECT_RETRY_PERIOD=1s", NULL };
        int argc = 4;
        assert_int_equal(options_parse(&o, &argc, argv, env, err, sizeof err), 0);
        assert_int_equal(argc, 1);
        assert_int_equal(o.lease_duration_ms, 6000);
        assert_int_equal(o.renew_deadline_ms, 4000);
        assert_int_equal(o.retry_period_ms, 1000);
        static const char *const bad[][3] = {
                { "--leader-elect-lease-duration=10s", NULL, "--leader-elect-renew-deadline: must be shorter than" },
                { "--leader-elect-retry-period=9s", NULL, "--leader-elect-retry-period: must be shorter than" },
                { "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=2500ms", "retry-period: must be" },
                { "--leader-elect-lease-duration=1d", NULL, "--leader-elect-lease-duration: expected a duration" },
        };
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
                char *a[4] = { "pvescale-coordinator", (char *)bad[k][0], (char *)bad[k][1], NULL };
                const char *no_env[] = { NULL };
                options_init(&o);
                argc = bad[k][1] ? 3 : 2;
                assert_int_equal(options_parse(&o, &argc, a, no_env, err, sizeof err), -EINVAL);
                if (!strstr(err, bad[k][2]))
                        fail_msg("%s: error \"%s\" lacks \"%s\"", bad[k][0], err, bad[k][2]);
        }
        assert_non_null(strstr(options_usage(), "--leader-elect-retry-period"));
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_options_table), cmocka_unit_test(test_disruption_flags),
                                            cmocka_unit_test(test_duration_flags),
                                            cmocka_unit_test(test_leader_election_flags) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
