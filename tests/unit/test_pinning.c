/* Tests for agent/pinning: thread names, QMP replies, /proc text, plans, drift, status and reports (pure parts). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "jsonutil.h"
#include "pinning.h"
#include "qmpscript.h"
#include "testutil.h"

static struct cpuset *set_of(const char *list) {
        struct cpuset *s = NULL;
        assert_int_equal(cpuset_parse(list, &s), 0);
        return s;
}

/* ---- thread names ---- */

static void test_vcpu_index_names(void **state) {
        (void)state;
        assert_int_equal(pinning_vcpu_index("CPU 0/KVM"), 0);
        assert_int_equal(pinning_vcpu_index("CPU 12/KVM\n"), 12);
        assert_int_equal(pinning_vcpu_index("CPU 3/TCG"), 3);
        assert_int_equal(pinning_vcpu_index("CPU 8191/KVM"), 8191);
}

static void test_vcpu_index_rejects(void **state) {
        (void)state;
        static const char *const bad[] = {
                "CPU 8192/KVM", "CPU 01/KVM", "CPU -1/KVM", "CPU /KVM", "CPU 0/KVMX", "CPU 0/KVM extra",
                "cpu 0/KVM", "CPU 0/HVF", "ALL CPUs/TCG", "IO mon_iothread", "qemu-system-x86", "vhost-24430",
                "CPU 0", "",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                if (pinning_vcpu_index(bad[i]) != -EINVAL)
                        fail_msg("'%s' was taken for a vCPU thread", bad[i]);
        }
}

/* ---- query-cpus-fast replies ---- */

static int parse_reply(const char *text, int **tids, unsigned *n) {
        json_t *reply = test_json_parse(text);
        int r = pinning_parse_cpus_fast(reply, tids, n);
        json_decref(reply);
        return r;
}

static void test_cpus_fast_captured(void **state) {
        (void)state;
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(parse_reply(CPUS_FAST_REPLY, &tids, &n), 0);
        assert_int_equal(n, 4);
        assert_int_equal(tids[0], 24433);
        assert_int_equal(tids[1], 24434);
        assert_int_equal(tids[2], 24435);
        assert_int_equal(tids[3], 24436);
        free(tids);
}

static void test_cpus_fast_order_and_gaps(void **state) {
        (void)state;
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(parse_reply("{\"return\": [{\"cpu-index\": 3, \"thread-id\": 7003},"
                                     " {\"cpu-index\": 0, \"thread-id\": 7000}]}", &tids, &n), 0);
        assert_int_equal(n, 4);
        assert_int_equal(tids[0], 7000);
        assert_int_equal(tids[1], 0);
        assert_int_equal(tids[2], 0);
        assert_int_equal(tids[3], 7003);
        free(tids);
}

static void test_cpus_fast_malformed(void **state) {
        (void)state;
        static const char *const bad[] = {
                "{\"return\": []}",
                "{\"return\": {}}",
                "{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}}",
                "{\"return\": [{\"cpu-index\": 0}]}",
                "{\"return\": [{\"cpu-index\": \"0\", \"thread-id\": 5}]}",
                "{\"return\": [{\"cpu-index\": 0, \"thread-id\": -5}]}",
                "{\"return\": [{\"cpu-index\": -1, \"thread-id\": 5}]}",
                "{\"return\": [{\"cpu-index\": 8192, \"thread-id\": 5}]}",
                "{\"return\": [{\"cpu-index\": 0, \"thread-id\": 4294967296}]}",
                /* two entries for one index */
                "{\"return\": [{\"cpu-index\": 1, \"thread-id\": 5}, {\"cpu-index\": 1, \"thread-id\": 6}]}",
                /* single-threaded TCG: every vCPU on one thread, which cannot be pinned per vCPU */
                "{\"return\": [{\"cpu-index\": 0, \"thread-id\": 5}, {\"cpu-index\": 1, \"thread-id\": 5}]}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                int *tids = NULL;
                unsigned n = 0;
                int r = parse_reply(bad[i], &tids, &n);
                if (r != -EBADMSG)
                        fail_msg("%s: got %d, want -EBADMSG", bad[i], r);
                assert_null(tids);
        }
}

/* ---- numa_maps ---- */

/* Lines in the format of /proc/<pid>/numa_maps (first two captured, the others with a second node). */
static const char NUMA_MAPS[] =
        "55e71250b000 default file=/usr/bin/qemu-system-x86_64 mapped=1156 active=1089 N0=1156 "
        "kernelpagesize_kB=4\n"
        "55e712d99000 default file=/usr/bin/qemu-system-x86_64 anon=251 dirty=251 active=0 N0=251 "
        "kernelpagesize_kB=4\n"
        "7f0000000000 bind:1 anon=262144 dirty=262144 N0=1000 N1=261144 kernelpagesize_kB=4\n"
        "7f4000000000 default file=/dev/hugepages/vm N3=x huge anon=4 dirty=4 N2=4 "
        "kernelpagesize_kB=2048\n"
        "7ffd00000000 default stack anon=3 dirty=3 N1=3 kernelpagesize_kB=4\n";

static void test_numa_maps_pages(void **state) {
        (void)state;
        struct cpuset *n0 = set_of("0"), *n1 = set_of("1"), *n12 = set_of("1-2"), *n3 = set_of("3");
        uint64_t pages = 0;
        assert_int_equal(pinning_numa_maps_pages(NUMA_MAPS, n0, &pages), 0);
        assert_int_equal(pages, 1156 + 251 + 1000);
        assert_int_equal(pinning_numa_maps_pages(NUMA_MAPS, n1, &pages), 0);
        assert_int_equal(pages, 261144 + 3);
        assert_int_equal(pinning_numa_maps_pages(NUMA_MAPS, n12, &pages), 0);
        assert_int_equal(pages, 261144 + 3 + 4);
        /* "N3=x" from a file name with a space is not a count */
        assert_int_equal(pinning_numa_maps_pages(NUMA_MAPS, n3, &pages), 0);
        assert_int_equal(pages, 0);
        assert_int_equal(pinning_numa_maps_pages("", n0, &pages), 0);
        assert_int_equal(pages, 0);
        assert_int_equal(pinning_numa_maps_pages("1000 default N0=99999999999999999999999\n", n0, &pages),
                         -EBADMSG);
        assert_int_equal(pinning_numa_maps_pages("1000 default N0=18446744073709551616\n", n0, &pages), -EBADMSG);
        cpuset_free(n0);
        cpuset_free(n1);
        cpuset_free(n12);
        cpuset_free(n3);
}

/* ---- plans and drift ---- */

struct plan_fixture {
        int map[2];
        struct cpuset *cpus, *nodes;
        struct pin_plan plan;
};

/* vCPU 0 -> host CPU 5, vCPU 1 -> host CPU 4, whole set 4-5, memory on node 0. */
static int plan_setup(void **state) {
        struct plan_fixture *f = calloc(1, sizeof(*f));
        f->map[0] = 5;
        f->map[1] = 4;
        f->cpus = set_of("4-5");
        f->nodes = set_of("0");
        f->plan = (struct pin_plan){.vmid = 105, .pid = 1000, .n_vcpus = 2, .vcpu_map = f->map,
                                    .vm_cpus = f->cpus, .mem_nodes = f->nodes};
        *state = f;
        return 0;
}

static int plan_teardown(void **state) {
        struct plan_fixture *f = *state;
        cpuset_free(f->cpus);
        cpuset_free(f->nodes);
        free(f);
        return 0;
}

static void test_plan_check(void **state) {
        struct plan_fixture *f = *state;
        assert_int_equal(pinning_plan_check(&f->plan), 0);
        struct pin_plan p = f->plan;
        p.pid = 0;
        assert_int_equal(pinning_plan_check(&p), -EINVAL);
        p = f->plan;
        p.n_vcpus = 0;
        assert_int_equal(pinning_plan_check(&p), -EINVAL);
        p = f->plan;
        p.vm_cpus = NULL;
        assert_int_equal(pinning_plan_check(&p), -EINVAL);
        f->map[1] = 6; /* outside 4-5 */
        assert_int_equal(pinning_plan_check(&f->plan), -EINVAL);
        f->map[1] = -1;
        assert_int_equal(pinning_plan_check(&f->plan), -EINVAL);
        assert_int_equal(pinning_plan_check(NULL), -EINVAL);
}

/* What pinning_proc_read returns for a correctly pinned VM. */
static const char REAL_OK[] =
        "[{\"tid\": 1000, \"name\": \"kvm\", \"cpus\": \"4-5\"},"
        " {\"tid\": 1001, \"name\": \"call_rcu\", \"cpus\": \"4-5\"},"
        " {\"tid\": 1002, \"name\": \"CPU 0/KVM\", \"cpus\": \"5\", \"vcpu\": 0},"
        " {\"tid\": 1003, \"name\": \"CPU 1/KVM\", \"cpus\": \"4\", \"vcpu\": 1},"
        " {\"tid\": 1004, \"name\": \"vhost-1000\", \"cpus\": \"4-5\"},"
        " {\"tid\": 77, \"name\": \"vhost-1000\", \"cpus\": \"4,5\", \"kthread\": true}]";

static unsigned drift_of(const struct pin_plan *plan, const char *real_text) {
        json_t *real = test_json_parse(real_text);
        unsigned drift = 12345;
        assert_int_equal(pinning_drift(plan, real, &drift), 0);
        json_decref(real);
        return drift;
}

static void test_drift_none(void **state) {
        struct plan_fixture *f = *state;
        assert_int_equal(drift_of(&f->plan, REAL_OK), 0);
}

static void test_drift_counts_wrong_threads(void **state) {
        struct plan_fixture *f = *state;
        /* vCPUs swapped (2), the main loop left on every CPU (1) */
        assert_int_equal(drift_of(&f->plan, "[{\"tid\": 1000, \"name\": \"kvm\", \"cpus\": \"0-7\"},"
                                            " {\"tid\": 1002, \"name\": \"CPU 0/KVM\", \"cpus\": \"4\"},"
                                            " {\"tid\": 1003, \"name\": \"CPU 1/KVM\", \"cpus\": \"5\"}]"), 3);
        /* a vCPU on the whole set is drift too: it must be on exactly one CPU */
        assert_int_equal(drift_of(&f->plan, "[{\"tid\": 1002, \"name\": \"CPU 0/KVM\", \"cpus\": \"4-5\"},"
                                            " {\"tid\": 1003, \"name\": \"CPU 1/KVM\", \"cpus\": \"4\"}]"), 1);
}

static void test_drift_missing_and_extra_vcpus(void **state) {
        struct plan_fixture *f = *state;
        /* vCPU 1 has no thread (1); vCPU 2 is beyond the plan, so it wants the whole set and has it */
        assert_int_equal(drift_of(&f->plan, "[{\"tid\": 1002, \"name\": \"CPU 0/KVM\", \"cpus\": \"5\"},"
                                            " {\"tid\": 1005, \"name\": \"CPU 2/KVM\", \"cpus\": \"4-5\"}]"), 1);
        assert_int_equal(drift_of(&f->plan, "[]"), 2);
}

static void test_drift_malformed(void **state) {
        struct plan_fixture *f = *state;
        static const char *const bad[] = {
                "{}", "[{\"tid\": 1, \"name\": \"kvm\"}]", "[{\"tid\": 1, \"cpus\": \"0\"}]",
                "[{\"tid\": 1, \"name\": \"kvm\", \"cpus\": \"zero\"}]", "[{\"tid\": 1, \"name\": 5, \"cpus\": \"0\"}]",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                json_t *real = test_json_parse(bad[i]);
                unsigned drift = 7;
                if (pinning_drift(&f->plan, real, &drift) != -EINVAL)
                        fail_msg("%s was accepted", bad[i]);
                assert_int_equal(drift, 7);
                json_decref(real);
        }
}

static void test_status_document(void **state) {
        struct plan_fixture *f = *state;
        json_t *real = test_json_parse("[{\"tid\": 1000, \"name\": \"kvm\", \"cpus\": \"4-5\"},"
                            " {\"tid\": 1002, \"name\": \"CPU 0/KVM\", \"cpus\": \"4-5\"}]");
        char *before = jsonutil_dump(real);
        json_t *status = NULL;
        assert_int_equal(pinning_status(&f->plan, real, &status), 0);
        char *got = jsonutil_dump(status);
        assert_string_equal(got,
                "{\"drift\":2,\"real\":[{\"cpus\":\"4-5\",\"name\":\"kvm\",\"tid\":1000,\"wanted\":\"4-5\"},"
                "{\"cpus\":\"4-5\",\"name\":\"CPU 0/KVM\",\"tid\":1002,\"wanted\":\"5\"}],"
                "\"wanted\":{\"cpus\":\"4-5\",\"mem_nodes\":\"0\",\"vcpu_map\":[5,4]}}");
        char *after = jsonutil_dump(real);
        assert_string_equal(before, after); /* the input is not annotated */
        f->plan.mem_nodes = NULL;
        json_decref(status);
        assert_int_equal(pinning_status(&f->plan, real, &status), 0);
        assert_true(json_is_null(json_object_get(json_object_get(status, "wanted"), "mem_nodes")));
        free(got);
        free(before);
        free(after);
        json_decref(status);
        json_decref(real);
}

static void test_report_json(void **state) {
        (void)state;
        struct pin_report rep = {.vcpus_from_qmp = false, .qmp_error = -ETIMEDOUT, .vcpus_pinned = 2,
                                 .others_pinned = 5, .threads_gone = 1, .n_failures = 9,
                                 .memory = PIN_MEMORY_SINGLE_NODE};
        for (int i = 0; i < PINNING_MAX_FAILURES; i++)
                rep.failures[i] = (struct pin_failure){.tid = 100 + i, .error = -EPERM};
        json_t *j = pinning_report_to_json(&rep);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "vcpus_from")), "proc");
        assert_string_equal(json_string_value(json_object_get(j, "qmp_error")), "Connection timed out");
        assert_int_equal(json_integer_value(json_object_get(j, "vcpus_pinned")), 2);
        assert_int_equal(json_integer_value(json_object_get(j, "others_pinned")), 5);
        assert_int_equal(json_integer_value(json_object_get(j, "threads_gone")), 1);
        assert_int_equal(json_integer_value(json_object_get(j, "failures_total")), 9);
        json_t *failures = json_object_get(j, "failures");
        assert_int_equal(json_array_size(failures), PINNING_MAX_FAILURES);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(failures, 1), "tid")), 101);
        assert_string_equal(json_string_value(json_object_get(json_array_get(failures, 1), "error")),
                            "Operation not permitted");
        json_t *memory = json_object_get(j, "memory");
        assert_string_equal(json_string_value(json_object_get(memory, "result")), "single-node");
        assert_true(json_is_null(json_object_get(memory, "error")));
        json_decref(j);
        rep.vcpus_from_qmp = true;
        rep.qmp_error = 0;
        j = pinning_report_to_json(&rep);
        assert_string_equal(json_string_value(json_object_get(j, "vcpus_from")), "qmp");
        assert_true(json_is_null(json_object_get(j, "qmp_error")));
        json_decref(j);
}

static void test_vhost_owner(void **state) {
        (void)state;
        assert_int_equal(pinning_vhost_owner("vhost-24430"), 24430);
        static const char *const bad[] = {"vhost-", "vhost-0", "vhost-01", "vhost-12x", "vhost--1", "kvm", "",
                                          "vhost-99999999999"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                if (pinning_vhost_owner(bad[i]) != -EINVAL)
                        fail_msg("'%s' was taken for a vhost worker", bad[i]);
}

static void test_status_cpus(void **state) {
        (void)state;
        struct cpuset *cpus = NULL;
        assert_int_equal(pinning_status_cpus("Name:\tkvm\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1,4\n", &cpus), 0);
        char *text = cpuset_format(cpus);
        assert_string_equal(text, "0-1,4");
        free(text);
        cpuset_free(cpus);
        cpus = NULL;
        assert_int_equal(pinning_status_cpus("Name:\tkvm\nCpus_allowed:\t3\n", &cpus), -EBADMSG);
        assert_int_equal(pinning_status_cpus("Name:\tkvm\nCpus_allowed_list:\tzero\n", &cpus), -EBADMSG);
        assert_null(cpus);
}

static void test_stat_kthread(void **state) {
        (void)state;
        /* captured: kthreadd, and a vCPU thread of QEMU (its name has a space and a slash) */
        assert_true(pinning_stat_kthread("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 25 0 0 "
                                         "18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 1 0 0"));
        assert_false(pinning_stat_kthread("25703 (CPU 0/KVM) S 1 25697 25697 0 -1 138412224 298 0 0 0 0 314 0 0 "
                                          "20 0 6 0 65395 439615488 6694"));
        assert_true(pinning_stat_kthread("77 (x) (y) S 2 0 0 0 -1 2097152 0"));
        assert_false(pinning_stat_kthread("77 (vhost-1) S 2 0"));
        assert_false(pinning_stat_kthread(""));
}

static void test_vcpu_cpus_and_threads(void **state) {
        struct plan_fixture *f = *state;
        struct cpuset *cpu = pinning_vcpu_cpus(&f->plan, 0);
        char *text = cpuset_format(cpu);
        assert_string_equal(text, "5");
        free(text);
        cpuset_free(cpu);
        /* vCPU 2 is beyond the plan (n_vcpus 2): its thread goes onto the whole set like any other thread */
        int tids[3] = {1002, 1003, 1005};
        struct pin_vcpus vcpus = {.tids = tids, .n = 3};
        assert_true(pinning_is_vcpu_thread(&f->plan, &vcpus, 1002));
        assert_true(pinning_is_vcpu_thread(&f->plan, &vcpus, 1003));
        assert_false(pinning_is_vcpu_thread(&f->plan, &vcpus, 1005));
        assert_false(pinning_is_vcpu_thread(&f->plan, &vcpus, 1000));
        vcpus.n = 1;
        assert_false(pinning_is_vcpu_thread(&f->plan, &vcpus, 1003));
}

static void test_nodes_elsewhere(void **state) {
        struct plan_fixture *f = *state; /* memory on node 0 */
        struct cpuset *host = set_of("0-1,3"), *elsewhere = NULL;
        assert_int_equal(pinning_nodes_elsewhere(&f->plan, host, &elsewhere), 0);
        char *text = cpuset_format(elsewhere);
        assert_string_equal(text, "1,3");
        free(text);
        cpuset_free(elsewhere);
        cpuset_free(host);
        host = set_of("0");
        assert_int_equal(pinning_nodes_elsewhere(&f->plan, host, &elsewhere), 0);
        assert_true(cpuset_is_empty(elsewhere));
        cpuset_free(elsewhere);
        cpuset_free(host);
}

static void test_report_note(void **state) {
        (void)state;
        struct pin_report rep = {0};
        pinning_report_note(&rep, 10, 0, &rep.vcpus_pinned);
        pinning_report_note(&rep, 11, 0, &rep.others_pinned);
        pinning_report_note(&rep, 12, -ESRCH, &rep.others_pinned); /* exited meanwhile: not a failure */
        for (int i = 0; i < PINNING_MAX_FAILURES + 2; i++)
                pinning_report_note(&rep, 100 + i, i == 0 ? -EINVAL : -EPERM, &rep.others_pinned);
        assert_int_equal(rep.vcpus_pinned, 1);
        assert_int_equal(rep.others_pinned, 1);
        assert_int_equal(rep.threads_gone, 1);
        assert_int_equal(rep.n_failures, PINNING_MAX_FAILURES + 2);
        assert_int_equal(rep.failures[0].tid, 100);
        assert_int_equal(rep.failures[0].error, -EINVAL);
        assert_int_equal(rep.failures[PINNING_MAX_FAILURES - 1].tid, 100 + PINNING_MAX_FAILURES - 1);
}

static void test_memory_result_names(void **state) {
        (void)state;
        assert_string_equal(pinning_memory_result_to_string(PIN_MEMORY_NOT_ASKED), "not-asked");
        assert_string_equal(pinning_memory_result_to_string(PIN_MEMORY_NO_NUMA), "no-numa");
        assert_string_equal(pinning_memory_result_to_string(PIN_MEMORY_SINGLE_NODE), "single-node");
        assert_string_equal(pinning_memory_result_to_string(PIN_MEMORY_MIGRATED), "migrated");
        assert_string_equal(pinning_memory_result_to_string(PIN_MEMORY_FAILED), "failed");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vcpu_index_names),
                cmocka_unit_test(test_vcpu_index_rejects),
                cmocka_unit_test(test_vhost_owner),
                cmocka_unit_test(test_cpus_fast_captured),
                cmocka_unit_test(test_cpus_fast_order_and_gaps),
                cmocka_unit_test(test_cpus_fast_malformed),
                cmocka_unit_test(test_numa_maps_pages),
                cmocka_unit_test(test_status_cpus),
                cmocka_unit_test(test_stat_kthread),
                cmocka_unit_test_setup_teardown(test_plan_check, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_vcpu_cpus_and_threads, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_nodes_elsewhere, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_none, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_counts_wrong_threads, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_missing_and_extra_vcpus, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_malformed, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_status_document, plan_setup, plan_teardown),
                cmocka_unit_test(test_report_note),
                cmocka_unit_test(test_report_json),
                cmocka_unit_test(test_memory_result_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
