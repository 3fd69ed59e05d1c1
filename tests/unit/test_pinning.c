/* Tests for agent/pinning: thread names, QMP replies and conversations, numa_maps, drift, /proc trees. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "jsonutil.h"
#include "testutil.h"
#include "pinning.h"

/* Captured from QEMU 7.2 (Debian bookworm), -smp 4,sockets=2,cores=2, KVM. */
static const char CPUS_FAST_REPLY[] =
        "{\"return\": [{\"thread-id\": 24433, \"props\": {\"core-id\": 0, \"thread-id\": 0, \"socket-id\": 0}, "
        "\"qom-path\": \"/machine/unattached/device[0]\", \"cpu-index\": 0, \"target\": \"x86_64\"}, "
        "{\"thread-id\": 24434, \"props\": {\"core-id\": 1, \"thread-id\": 0, \"socket-id\": 0}, "
        "\"qom-path\": \"/machine/unattached/device[2]\", \"cpu-index\": 1, \"target\": \"x86_64\"}, "
        "{\"thread-id\": 24435, \"props\": {\"core-id\": 0, \"thread-id\": 0, \"socket-id\": 1}, "
        "\"qom-path\": \"/machine/unattached/device[3]\", \"cpu-index\": 2, \"target\": \"x86_64\"}, "
        "{\"thread-id\": 24436, \"props\": {\"core-id\": 1, \"thread-id\": 0, \"socket-id\": 1}, "
        "\"qom-path\": \"/machine/unattached/device[4]\", \"cpu-index\": 3, \"target\": \"x86_64\"}]}\r\n";
static const char GREETING[] =
        "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}, \"package\": "
        "\"Debian 1:7.2+dfsg-7+deb12u18+b3\"}, \"capabilities\": [\"oob\"]}}\r\n";
static const char STOP_EVENT[] =
        "{\"timestamp\": {\"seconds\": 1795242101, \"microseconds\": 719876}, \"event\": \"STOP\"}\r\n";

static json_t *load(const char *text) {
        json_error_t err;
        json_t *v = json_loads(text, 0, &err);
        if (!v)
                fail_msg("bad test JSON: %s", err.text);
        return v;
}

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
        json_t *reply = load(text);
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

/* What pinning_read returns for a correctly pinned VM. */
static const char REAL_OK[] =
        "[{\"tid\": 1000, \"name\": \"kvm\", \"cpus\": \"4-5\"},"
        " {\"tid\": 1001, \"name\": \"call_rcu\", \"cpus\": \"4-5\"},"
        " {\"tid\": 1002, \"name\": \"CPU 0/KVM\", \"cpus\": \"5\", \"vcpu\": 0},"
        " {\"tid\": 1003, \"name\": \"CPU 1/KVM\", \"cpus\": \"4\", \"vcpu\": 1},"
        " {\"tid\": 1004, \"name\": \"vhost-1000\", \"cpus\": \"4-5\"},"
        " {\"tid\": 77, \"name\": \"vhost-1000\", \"cpus\": \"4,5\", \"kthread\": true}]";

static unsigned drift_of(const struct pin_plan *plan, const char *real_text) {
        json_t *real = load(real_text);
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
                json_t *real = load(bad[i]);
                unsigned drift = 7;
                if (pinning_drift(&f->plan, real, &drift) != -EINVAL)
                        fail_msg("%s was accepted", bad[i]);
                assert_int_equal(drift, 7);
                json_decref(real);
        }
}

static void test_status_document(void **state) {
        struct plan_fixture *f = *state;
        json_t *real = load("[{\"tid\": 1000, \"name\": \"kvm\", \"cpus\": \"4-5\"},"
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

/* ---- a captured-style /proc tree ---- */

static void write_file(const char *root, const char *fmt, const char *content, ...) {
        char rel[256], path[512];
        va_list ap;
        va_start(ap, content);
        vsnprintf(rel, sizeof(rel), fmt, ap);
        va_end(ap);
        snprintf(path, sizeof(path), "%s%s", root, rel);
        for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
                *p = '\0';
                mkdir(path, 0755);
                *p = '/';
        }
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs(content, fp);
        fclose(fp);
}

static char *status_text(const char *name, const char *cpus) {
        static char buf[256];
        snprintf(buf, sizeof(buf), "Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nCpus_allowed:\t3\n"
                 "Cpus_allowed_list:\t%s\nMems_allowed_list:\t0\n", name, cpus);
        return buf;
}

static void add_task(const char *root, int pid, int tid, const char *name, const char *cpus) {
        char comm[64];
        snprintf(comm, sizeof(comm), "%s\n", name);
        write_file(root, "/%d/task/%d/comm", comm, pid, tid);
        write_file(root, "/%d/task/%d/status", status_text(name, cpus), pid, tid);
}

/* A top-level process; flags 0x208040 is a kernel thread (PF_KTHREAD), 0x400100 a user process. */
static void add_process(const char *root, int pid, const char *name, unsigned long flags, const char *cpus) {
        char text[256];
        snprintf(text, sizeof(text), "%s\n", name);
        write_file(root, "/%d/comm", text, pid);
        snprintf(text, sizeof(text), "%d (%s) S 2 0 0 0 -1 %lu 0 0 0 0 0 0 0 0 20 0 1 0 21 0 0\n", pid, name,
                 flags);
        write_file(root, "/%d/stat", text, pid);
        write_file(root, "/%d/status", status_text(name, cpus), pid);
}

/* QEMU pid 1000 with two vCPU threads; a vhost kernel thread for it (77), one for another QEMU (78), and a
 * user process pretending to be a vhost worker (79). */
static int proc_setup(void **state) {
        char *root = strdup("/tmp/test_pinning_procXXXXXX");
        assert_non_null(mkdtemp(root));
        add_process(root, 1000, "kvm", 0x400100, "0-7");
        add_task(root, 1000, 1000, "kvm", "0-7");
        add_task(root, 1000, 1001, "call_rcu", "0-7");
        add_task(root, 1000, 1003, "CPU 1/KVM", "4");
        add_task(root, 1000, 1002, "CPU 0/KVM", "5");
        add_task(root, 1000, 1004, "IO mon_iothread", "4-5");
        add_process(root, 77, "vhost-1000", 0x208040, "4-5");
        add_process(root, 78, "vhost-2000", 0x208040, "0-7");
        add_process(root, 79, "vhost-1000", 0x400100, "0-7");
        add_process(root, 2, "kthreadd", 0x208040, "0-7");
        *state = root;
        return 0;
}

static int proc_teardown(void **state) {
        assert_int_equal(test_rmtree(*state), 0);
        free(*state);
        return 0;
}

static void test_proc_vcpu_threads(void **state) {
        const char *root = *state;
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_proc_vcpu_threads(root, 1000, &tids, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(tids[0], 1002);
        assert_int_equal(tids[1], 1003);
        free(tids);
        assert_int_equal(pinning_proc_vcpu_threads(root, 4242, &tids, &n), -ESRCH);
}

static void test_proc_vcpu_threads_errors(void **state) {
        const char *root = *state;
        int *tids = NULL;
        unsigned n = 0;
        add_task(root, 3000, 3000, "kvm", "0-7");
        assert_int_equal(pinning_proc_vcpu_threads(root, 3000, &tids, &n), -ENOENT);
        add_task(root, 3000, 3001, "CPU 0/KVM", "0-7");
        add_task(root, 3000, 3002, "CPU 0/KVM", "0-7");
        assert_int_equal(pinning_proc_vcpu_threads(root, 3000, &tids, &n), -EBADMSG);
        assert_null(tids);
}

static const json_t *find_tid(const json_t *threads, int tid) {
        for (size_t i = 0; i < json_array_size(threads); i++)
                if (json_integer_value(json_object_get(json_array_get(threads, i), "tid")) == tid)
                        return json_array_get(threads, i);
        return NULL;
}

static void test_read_at(void **state) {
        const char *root = *state;
        json_t *threads = NULL;
        assert_int_equal(pinning_read_at(root, 1000, &threads), 0);
        assert_int_equal(json_array_size(threads), 6); /* 5 tasks and the vhost kernel thread 77 */
        const json_t *cpu0 = find_tid(threads, 1002), *main = find_tid(threads, 1000), *vhost = find_tid(threads, 77);
        assert_non_null(cpu0);
        assert_string_equal(json_string_value(json_object_get(cpu0, "name")), "CPU 0/KVM");
        assert_string_equal(json_string_value(json_object_get(cpu0, "cpus")), "5");
        assert_int_equal(json_integer_value(json_object_get(cpu0, "vcpu")), 0);
        assert_non_null(main);
        assert_string_equal(json_string_value(json_object_get(main, "cpus")), "0-7");
        assert_null(json_object_get(main, "vcpu"));
        assert_non_null(vhost);
        assert_true(json_is_true(json_object_get(vhost, "kthread")));
        assert_string_equal(json_string_value(json_object_get(vhost, "cpus")), "4-5");
        assert_null(find_tid(threads, 78)); /* another VM's vhost worker */
        assert_null(find_tid(threads, 79)); /* not a kernel thread */
        json_decref(threads);
        assert_int_equal(pinning_read_at(root, 4242, &threads), -ESRCH);
}

static void test_read_then_drift(void **state) {
        const char *root = *state;
        int map[2] = {5, 4};
        struct cpuset *cpus = set_of("4-5");
        struct pin_plan plan = {.vmid = 105, .pid = 1000, .n_vcpus = 2, .vcpu_map = map, .vm_cpus = cpus};
        json_t *threads = NULL;
        assert_int_equal(pinning_read_at(root, 1000, &threads), 0);
        unsigned drift = 0;
        assert_int_equal(pinning_drift(&plan, threads, &drift), 0);
        assert_int_equal(drift, 2); /* kvm and call_rcu still on 0-7 */
        json_decref(threads);
        cpuset_free(cpus);
}

static void test_read_skips_unreadable_thread(void **state) {
        const char *root = *state;
        write_file(root, "/1000/task/1005/comm", "worker\n");
        write_file(root, "/1000/task/1005/status", "Name:\tworker\n"); /* no Cpus_allowed_list */
        json_t *threads = NULL;
        assert_int_equal(pinning_read_at(root, 1000, &threads), 0);
        assert_null(find_tid(threads, 1005));
        assert_non_null(find_tid(threads, 1004));
        json_decref(threads);
}

/* ---- QMP conversations with a scripted server ---- */

struct qmp_server {
        char dir[64];
        char path[128];
        int listen_fd;
        pid_t child;
};

/* Read one line from fd into buf; false at EOF. */
static bool read_line(int fd, char *buf, size_t size) {
        size_t n = 0;
        while (n + 1 < size) {
                char c;
                if (read(fd, &c, 1) != 1)
                        return false;
                buf[n++] = c;
                if (c == '\n')
                        break;
        }
        buf[n] = '\0';
        return true;
}

static bool write_all(int fd, const char *s) {
        size_t len = strlen(s);
        return write(fd, s, len) == (ssize_t)len;
}

/* What the child process does for one client. Exit status 0 = the client spoke QMP correctly. */
enum qmp_script { SCRIPT_GOOD, SCRIPT_ERROR, SCRIPT_SILENT, SCRIPT_NO_GREETING };

static bool expect_command(int fd, const char *command) {
        char line[512];
        if (!read_line(fd, line, sizeof(line)))
                return false;
        json_t *msg = json_loads(line, 0, NULL);
        const char *got = json_string_value(json_object_get(msg, "execute"));
        bool ok = got && strcmp(got, command) == 0 && strchr(line, '\n');
        json_decref(msg);
        return ok;
}

static int run_script(int fd, enum qmp_script script) {
        if (script == SCRIPT_SILENT) {
                sleep(5); /* like a QEMU busy with another client: never greets */
                return 0;
        }
        if (script == SCRIPT_NO_GREETING)
                return write_all(fd, "{\"return\": {}}\r\n") ? 0 : 1;
        if (!write_all(fd, GREETING) || !expect_command(fd, "qmp_capabilities"))
                return 1;
        if (!write_all(fd, STOP_EVENT) || !write_all(fd, "{\"return\": {}}\r\n"))
                return 1;
        if (!expect_command(fd, "query-cpus-fast"))
                return 1;
        if (script == SCRIPT_ERROR)
                return write_all(fd, "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"x\"}}\r\n") ? 0 : 1;
        /* an event first, then the reply cut in two writes */
        if (!write_all(fd, STOP_EVENT))
                return 1;
        size_t half = sizeof(CPUS_FAST_REPLY) / 2;
        if (write(fd, CPUS_FAST_REPLY, half) != (ssize_t)half)
                return 1;
        usleep(20000);
        return write_all(fd, CPUS_FAST_REPLY + half) ? 0 : 1;
}

static void server_start(struct qmp_server *s, enum qmp_script script) {
        strcpy(s->dir, "/tmp/test_pinning_qmpXXXXXX");
        assert_non_null(mkdtemp(s->dir));
        snprintf(s->path, sizeof(s->path), "%s/105.qmp", s->dir);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        strcpy(addr.sun_path, s->path);
        s->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
        assert_int_equal(listen(s->listen_fd, 4), 0);
        s->child = fork();
        assert_true(s->child >= 0);
        if (s->child == 0) {
                int fd = accept(s->listen_fd, NULL, NULL);
                _exit(fd < 0 ? 2 : run_script(fd, script));
        }
        close(s->listen_fd);
}

/* The child's exit status; kills it first when it is still running (the silent script). */
static int server_stop(struct qmp_server *s, bool kill_it) {
        if (kill_it)
                kill(s->child, SIGKILL);
        int status = 0;
        waitpid(s->child, &status, 0);
        unlink(s->path);
        rmdir(s->dir);
        return kill_it ? 0 : WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

static void test_qmp_conversation(void **state) {
        (void)state;
        struct qmp_server s;
        server_start(&s, SCRIPT_GOOD);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 5000, &tids, &n), 0);
        assert_int_equal(server_stop(&s, false), 0);
        assert_int_equal(n, 4);
        assert_int_equal(tids[0], 24433);
        assert_int_equal(tids[3], 24436);
        free(tids);
}

static void test_qmp_error_reply(void **state) {
        (void)state;
        struct qmp_server s;
        server_start(&s, SCRIPT_ERROR);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 5000, &tids, &n), -EPROTO);
        assert_int_equal(server_stop(&s, false), 0);
        assert_null(tids);
}

static void test_qmp_busy_socket_times_out(void **state) {
        (void)state;
        struct qmp_server s;
        server_start(&s, SCRIPT_SILENT);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 200, &tids, &n), -ETIMEDOUT);
        server_stop(&s, true);
        assert_null(tids);
}

static void test_qmp_not_qmp(void **state) {
        (void)state;
        struct qmp_server s;
        server_start(&s, SCRIPT_NO_GREETING);
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads(s.path, 5000, &tids, &n), -EBADMSG);
        assert_int_equal(server_stop(&s, false), 0);
}

static void test_qmp_no_socket(void **state) {
        (void)state;
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_qmp_vcpu_threads("/tmp/test_pinning_nonexistent/1.qmp", 200, &tids, &n), -ENOENT);
        char longpath[200];
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = '\0';
        assert_int_equal(pinning_qmp_vcpu_threads(longpath, 200, &tids, &n), -ENAMETOOLONG);
        assert_null(tids);
}

static void test_apply_rejects_bad_plan(void **state) {
        struct plan_fixture *f = *state;
        struct pin_report rep = {.vcpus_pinned = 77};
        f->map[0] = 9;
        assert_int_equal(pinning_apply(&f->plan, NULL, &rep), -EINVAL);
        assert_int_equal(rep.vcpus_pinned, 77);
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
                cmocka_unit_test(test_cpus_fast_captured),
                cmocka_unit_test(test_cpus_fast_order_and_gaps),
                cmocka_unit_test(test_cpus_fast_malformed),
                cmocka_unit_test(test_numa_maps_pages),
                cmocka_unit_test_setup_teardown(test_plan_check, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_none, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_counts_wrong_threads, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_missing_and_extra_vcpus, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_drift_malformed, plan_setup, plan_teardown),
                cmocka_unit_test_setup_teardown(test_status_document, plan_setup, plan_teardown),
                cmocka_unit_test(test_report_json),
                cmocka_unit_test_setup_teardown(test_proc_vcpu_threads, proc_setup, proc_teardown),
                cmocka_unit_test_setup_teardown(test_proc_vcpu_threads_errors, proc_setup, proc_teardown),
                cmocka_unit_test_setup_teardown(test_read_at, proc_setup, proc_teardown),
                cmocka_unit_test_setup_teardown(test_read_then_drift, proc_setup, proc_teardown),
                cmocka_unit_test_setup_teardown(test_read_skips_unreadable_thread, proc_setup, proc_teardown),
                cmocka_unit_test(test_qmp_conversation),
                cmocka_unit_test(test_qmp_error_reply),
                cmocka_unit_test(test_qmp_busy_socket_times_out),
                cmocka_unit_test(test_qmp_not_qmp),
                cmocka_unit_test(test_qmp_no_socket),
                cmocka_unit_test_setup_teardown(test_apply_rejects_bad_plan, plan_setup, plan_teardown),
                cmocka_unit_test(test_memory_result_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
