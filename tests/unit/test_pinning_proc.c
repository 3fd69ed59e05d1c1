/* Tests for agent/pinning_proc: the /proc reader on a captured QEMU tree (and made-up entries) under a scratch root. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pinning_proc.h"
#include "proctree.h"
#include "testutil.h"

#define QEMU PROCTREE_QEMU_PID

/* The captured tree, plus: a vhost kernel thread for QEMU (77), one for another QEMU (78), and a user process
 * pretending to be a vhost worker (79). */
static int captured_setup(void **state) {
        char *root = proctree_captured();
        proctree_add_process(root, 77, "vhost-25699", 0x208040, "0-1");
        proctree_add_process(root, 78, "vhost-2000", 0x208040, "0-1");
        proctree_add_process(root, 79, "vhost-25699", 0x400100, "0-1");
        *state = root;
        return 0;
}

static int captured_teardown(void **state) {
        assert_int_equal(test_rmtree(*state), 0);
        free(*state);
        return 0;
}

static int cmp_int(const void *a, const void *b) {
        return *(const int *)a - *(const int *)b;
}

static void test_tasks(void **state) {
        int *tids = NULL;
        size_t n = 0;
        assert_int_equal(pinning_proc_tasks(*state, QEMU, &tids, &n), 0);
        assert_int_equal(n, 6);
        qsort(tids, n, sizeof(*tids), cmp_int);
        int want[] = {PROCTREE_MAIN, PROCTREE_CALL_RCU, PROCTREE_IOTHREAD, PROCTREE_VCPU0, PROCTREE_VCPU1,
                      PROCTREE_NX_RECOVERY};
        assert_memory_equal(tids, want, sizeof(want));
        free(tids);
        assert_int_equal(pinning_proc_tasks(*state, 4242, &tids, &n), -ESRCH);
}

static void test_vcpu_threads(void **state) {
        int *tids = NULL;
        unsigned n = 0;
        assert_int_equal(pinning_proc_vcpu_threads(*state, QEMU, &tids, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(tids[0], PROCTREE_VCPU0);
        assert_int_equal(tids[1], PROCTREE_VCPU1);
        free(tids);
        assert_int_equal(pinning_proc_vcpu_threads(*state, 4242, &tids, &n), -ESRCH);
}

static void test_vcpu_threads_errors(void **state) {
        const char *root = *state;
        int *tids = NULL;
        unsigned n = 0;
        proctree_add_task(root, 3000, 3000, "kvm", "0-7");
        assert_int_equal(pinning_proc_vcpu_threads(root, 3000, &tids, &n), -ENOENT);
        proctree_add_task(root, 3000, 3001, "CPU 0/KVM", "0-7");
        proctree_add_task(root, 3000, 3002, "CPU 0/KVM", "0-7");
        assert_int_equal(pinning_proc_vcpu_threads(root, 3000, &tids, &n), -EBADMSG);
        assert_null(tids);
}

static void test_has_threads(void **state) {
        int ok[] = {PROCTREE_VCPU0, 0, PROCTREE_VCPU1}, stale[] = {PROCTREE_VCPU0, 99999};
        assert_true(pinning_proc_has_threads(*state, QEMU, ok, 3));
        assert_false(pinning_proc_has_threads(*state, QEMU, stale, 2));
        assert_false(pinning_proc_has_threads(*state, 4242, ok, 3)); /* another process */
        assert_true(pinning_proc_has_threads(*state, QEMU, NULL, 0));
}

static void test_vhost_kthreads(void **state) {
        int tids[] = {PROCTREE_MAIN, PROCTREE_VCPU0}, *kthreads = NULL;
        size_t n = 0;
        assert_int_equal(pinning_proc_vhost_kthreads(*state, tids, 2, &kthreads, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(kthreads[0], 77); /* not 78 (another QEMU's), not 79 (no kernel thread), not kthreadd */
        free(kthreads);
}

/* kthreadd's captured stat carries PF_KTHREAD: under a vhost name it counts as QEMU's vhost worker. */
static void test_vhost_kthread_from_captured_stat(void **state) {
        const char *root = *state;
        proctree_write(root, "/2/comm", "vhost-25699\n");
        int tids[] = {PROCTREE_MAIN}, *kthreads = NULL;
        size_t n = 0;
        assert_int_equal(pinning_proc_vhost_kthreads(root, tids, 1, &kthreads, &n), 0);
        qsort(kthreads, n, sizeof(*kthreads), cmp_int);
        assert_int_equal(n, 2);
        assert_int_equal(kthreads[0], 2);
        assert_int_equal(kthreads[1], 77);
        free(kthreads);
}

static const json_t *find_tid(const json_t *threads, int tid) {
        for (size_t i = 0; i < json_array_size(threads); i++)
                if (json_integer_value(json_object_get(json_array_get(threads, i), "tid")) == tid)
                        return json_array_get(threads, i);
        return NULL;
}

static const char *field(const json_t *entry, const char *key) {
        return json_string_value(json_object_get(entry, key));
}

static void test_read(void **state) {
        json_t *threads = NULL;
        assert_int_equal(pinning_proc_read(*state, QEMU, &threads), 0);
        assert_int_equal(json_array_size(threads), 7); /* 6 tasks and the vhost kernel thread 77 */
        const json_t *cpu1 = find_tid(threads, PROCTREE_VCPU1), *main = find_tid(threads, PROCTREE_MAIN);
        const json_t *nx = find_tid(threads, PROCTREE_NX_RECOVERY), *vhost = find_tid(threads, 77);
        assert_string_equal(field(cpu1, "name"), "CPU 1/KVM");
        assert_string_equal(field(cpu1, "cpus"), "0-1");
        assert_int_equal(json_integer_value(json_object_get(cpu1, "vcpu")), 1);
        assert_string_equal(field(main, "name"), "qemu-system-x86");
        assert_null(json_object_get(main, "vcpu"));
        assert_string_equal(field(nx, "name"), "kvm-nx-lpage-re");
        assert_null(json_object_get(nx, "kthread")); /* a task of the process on kernels >= 6.4 */
        assert_true(json_is_true(json_object_get(vhost, "kthread")));
        assert_null(find_tid(threads, 78));
        assert_null(find_tid(threads, 79));
        json_decref(threads);
        assert_int_equal(pinning_proc_read(*state, 4242, &threads), -ESRCH);
}

static void test_read_then_drift(void **state) {
        int map[2] = {1, 0};
        struct cpuset *cpus = NULL;
        assert_int_equal(cpuset_parse("0-1", &cpus), 0);
        struct pin_plan plan = {.vmid = 105, .pid = QEMU, .n_vcpus = 2, .vcpu_map = map, .vm_cpus = cpus};
        json_t *threads = NULL;
        assert_int_equal(pinning_proc_read(*state, QEMU, &threads), 0);
        unsigned drift = 0;
        assert_int_equal(pinning_drift(&plan, threads, &drift), 0);
        assert_int_equal(drift, 2); /* QEMU as started: both vCPUs on 0-1 instead of one CPU each */
        json_decref(threads);
        cpuset_free(cpus);
}

static void test_read_skips_unreadable_thread(void **state) {
        const char *root = *state;
        proctree_write(root, "/25699/task/25710/comm", "worker\n");
        proctree_write(root, "/25699/task/25710/status", "Name:\tworker\n"); /* no Cpus_allowed_list */
        proctree_write(root, "/25699/task/25711/comm", "exited\n");           /* no status at all */
        json_t *threads = NULL;
        assert_int_equal(pinning_proc_read(root, QEMU, &threads), 0);
        assert_null(find_tid(threads, 25710));
        assert_null(find_tid(threads, 25711));
        assert_non_null(find_tid(threads, PROCTREE_IOTHREAD));
        json_decref(threads);
}

static void test_numa_pages(void **state) {
        struct cpuset *n0 = NULL, *n1 = NULL;
        assert_int_equal(cpuset_parse("0", &n0), 0);
        assert_int_equal(cpuset_parse("1", &n1), 0);
        uint64_t pages = 0;
        assert_int_equal(pinning_proc_numa_pages(*state, QEMU, n0, &pages), 0);
        assert_int_equal(pages, 4623);
        assert_int_equal(pinning_proc_numa_pages(*state, QEMU, n1, &pages), 0);
        assert_int_equal(pages, 0);
        assert_int_equal(pinning_proc_numa_pages(*state, 4242, n0, &pages), -ENOENT);
        cpuset_free(n0);
        cpuset_free(n1);
}

#define T(name) cmocka_unit_test_setup_teardown(name, captured_setup, captured_teardown)

int main(void) {
        const struct CMUnitTest tests[] = {
                T(test_tasks),
                T(test_vcpu_threads),
                T(test_vcpu_threads_errors),
                T(test_has_threads),
                T(test_vhost_kthreads),
                T(test_vhost_kthread_from_captured_stat),
                T(test_read),
                T(test_read_then_drift),
                T(test_read_skips_unreadable_thread),
                T(test_numa_pages),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
