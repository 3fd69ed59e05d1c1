/* Tests for agent/pinning_apply: applying on a captured /proc tree with fake sched_setaffinity and migrate_pages. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pinning_apply.h"
#include "proctree.h"
#include "testutil.h"

#define QEMU PROCTREE_QEMU_PID
#define MAX_CALLS 32

/* ---- the fake system calls ---- */

struct affinity_call {
        int tid;
        char cpus[32];
};

static struct fake {
        const char *root;
        struct affinity_call calls[MAX_CALLS];
        size_t n_calls;
        int fail_tid[2], fail_error[2]; /* set_affinity of fail_tid[i] returns fail_error[i] */
        int spawn_on_tid;               /* pinning this thread makes thread 25720 appear (it spawned one) */
        const char *host_nodes;         /* what numa_nodes reports; NULL: no NUMA support */
        unsigned numa_nodes_calls;
        int migrate_error;
        uint64_t not_moved;
        unsigned migrate_calls;
        int migrate_pid;
        char migrate_from[32], migrate_to[32];
} fake;

static void format_into(char *buf, size_t size, const struct cpuset *s) {
        char *text = cpuset_format(s);
        snprintf(buf, size, "%s", text ? text : "?");
        free(text);
}

static int fake_set_affinity(int tid, const struct cpuset *cpus) {
        assert_true(fake.n_calls < MAX_CALLS);
        struct affinity_call *c = &fake.calls[fake.n_calls++];
        c->tid = tid;
        format_into(c->cpus, sizeof(c->cpus), cpus);
        if (tid == fake.spawn_on_tid)
                proctree_add_task(fake.root, QEMU, 25720, "worker", "0-1");
        for (int i = 0; i < 2; i++)
                if (fake.fail_tid[i] == tid)
                        return fake.fail_error[i];
        return 0;
}

static int fake_numa_nodes(struct cpuset **ret_nodes) {
        fake.numa_nodes_calls++;
        return fake.host_nodes ? cpuset_parse(fake.host_nodes, ret_nodes) : -ENOSYS;
}

static int fake_migrate_pages(int pid, const struct cpuset *from, const struct cpuset *to, uint64_t *ret_not_moved) {
        fake.migrate_calls++;
        fake.migrate_pid = pid;
        format_into(fake.migrate_from, sizeof(fake.migrate_from), from);
        format_into(fake.migrate_to, sizeof(fake.migrate_to), to);
        *ret_not_moved = fake.not_moved;
        return fake.migrate_error;
}

static const struct pinning_sys fake_sys = {
        .set_affinity = fake_set_affinity,
        .numa_nodes = fake_numa_nodes,
        .migrate_pages = fake_migrate_pages,
};

/* The CPUs thread tid was set to, or NULL when it was not. */
static const char *set_to(int tid) {
        for (size_t i = 0; i < fake.n_calls; i++)
                if (fake.calls[i].tid == tid)
                        return fake.calls[i].cpus;
        return NULL;
}

static size_t call_index(int tid) {
        for (size_t i = 0; i < fake.n_calls; i++)
                if (fake.calls[i].tid == tid)
                        return i;
        fail_msg("thread %d was not pinned", tid);
        return 0;
}

/* ---- fixture: the captured QEMU (vCPU 0 -> CPU 1, vCPU 1 -> CPU 0, set 0-1, memory on node 0) ---- */

struct fixture {
        char *root;
        int map[2], tids[2];
        struct cpuset *cpus, *nodes;
        struct pin_plan plan;
        struct pin_vcpus vcpus;
        struct pinning_env env;
};

static int setup(void **state) {
        struct fixture *f = calloc(1, sizeof(*f));
        f->root = proctree_captured();
        proctree_add_process(f->root, 77, "vhost-25699", 0x208040, "0-1"); /* a vhost kernel thread (< 6.4) */
        proctree_write(f->root, "/25699/numa_maps", "7f0000000000 bind:0 anon=612 dirty=612 N0=100 N1=512 "
                       "kernelpagesize_kB=4\n");
        f->map[0] = 1;
        f->map[1] = 0;
        f->tids[0] = PROCTREE_VCPU0;
        f->tids[1] = PROCTREE_VCPU1;
        assert_int_equal(cpuset_parse("0-1", &f->cpus), 0);
        assert_int_equal(cpuset_parse("0", &f->nodes), 0);
        f->plan = (struct pin_plan){.vmid = 105, .pid = QEMU, .n_vcpus = 2, .vcpu_map = f->map, .vm_cpus = f->cpus,
                                    .mem_nodes = f->nodes};
        f->vcpus = (struct pin_vcpus){.tids = f->tids, .n = 2, .from_qmp = true};
        f->env = (struct pinning_env){.proc_root = f->root, .sys = &fake_sys};
        fake = (struct fake){.root = f->root, .host_nodes = "0-1", .not_moved = 3};
        *state = f;
        return 0;
}

static int teardown(void **state) {
        struct fixture *f = *state;
        assert_int_equal(test_rmtree(f->root), 0);
        free(f->root);
        cpuset_free(f->cpus);
        cpuset_free(f->nodes);
        free(f);
        return 0;
}

static int apply(struct fixture *f, struct pin_report *rep) {
        return pinning_apply(&f->plan, &f->vcpus, &f->env, rep);
}

/* ---- apply ---- */

static void test_apply_pins_every_thread(void **state) {
        struct fixture *f = *state;
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 0);
        assert_string_equal(set_to(PROCTREE_VCPU0), "1");
        assert_string_equal(set_to(PROCTREE_VCPU1), "0");
        int others[] = {PROCTREE_MAIN, PROCTREE_CALL_RCU, PROCTREE_IOTHREAD, PROCTREE_NX_RECOVERY, 77};
        for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
                assert_string_equal(set_to(others[i]), "0-1");
        assert_int_equal(fake.n_calls, 7); /* each thread once */
        assert_true(rep.vcpus_from_qmp);
        assert_int_equal(rep.qmp_error, 0);
        assert_int_equal(rep.vcpus_pinned, 2);
        assert_int_equal(rep.vcpus_missing, 0);
        assert_int_equal(rep.others_pinned, 4);
        assert_int_equal(rep.vhost_kthreads_pinned, 1);
        assert_int_equal(rep.n_failures, 0);
        assert_int_equal(rep.threads_gone, 0);
}

/* The other threads go first: a thread they spawn meanwhile inherits the whole set, never one vCPU's CPU. */
static void test_apply_others_before_vcpus(void **state) {
        struct fixture *f = *state;
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 0);
        size_t first_vcpu = call_index(PROCTREE_VCPU0) < call_index(PROCTREE_VCPU1) ? call_index(PROCTREE_VCPU0)
                                                                                    : call_index(PROCTREE_VCPU1);
        assert_true(call_index(PROCTREE_MAIN) < first_vcpu);
        assert_true(call_index(PROCTREE_CALL_RCU) < first_vcpu);
        assert_true(call_index(PROCTREE_NX_RECOVERY) < first_vcpu);
        assert_true(call_index(77) > first_vcpu); /* vhost kernel threads after the vCPUs */
}

static void test_apply_thread_born_while_pinning(void **state) {
        struct fixture *f = *state;
        fake.spawn_on_tid = PROCTREE_MAIN;
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 0);
        assert_string_equal(set_to(25720), "0-1"); /* found by the second pass over the task list */
        assert_int_equal(rep.others_pinned, 5);
}

static void test_apply_failures_and_gone_threads(void **state) {
        struct fixture *f = *state;
        fake.fail_tid[0] = PROCTREE_CALL_RCU;
        fake.fail_error[0] = -EPERM;
        fake.fail_tid[1] = PROCTREE_IOTHREAD;
        fake.fail_error[1] = -ESRCH; /* exited while we pinned: not a failure */
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 1);
        assert_int_equal(rep.n_failures, 1);
        assert_int_equal(rep.failures[0].tid, PROCTREE_CALL_RCU);
        assert_int_equal(rep.failures[0].error, -EPERM);
        assert_int_equal(rep.threads_gone, 1);
        assert_int_equal(rep.others_pinned, 2);
        assert_int_equal(rep.vcpus_pinned, 2); /* the rest is still pinned */
}

static void test_apply_missing_vcpu(void **state) {
        struct fixture *f = *state;
        f->tids[1] = 0; /* QMP did not list vCPU 1 */
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 0);
        assert_int_equal(rep.vcpus_pinned, 1);
        assert_int_equal(rep.vcpus_missing, 1);
        assert_string_equal(set_to(PROCTREE_VCPU1), "0-1"); /* not known as a vCPU: an ordinary thread */
        f->vcpus.n = 1;
        assert_int_equal(apply(f, &rep), 0);
        assert_int_equal(rep.vcpus_missing, 1);
}

static void test_apply_process_gone(void **state) {
        struct fixture *f = *state;
        f->plan.pid = 4242;
        struct pin_report rep = {.vcpus_pinned = 77};
        assert_int_equal(apply(f, &rep), -ESRCH);
        assert_int_equal(fake.n_calls, 0);
        assert_int_equal(fake.migrate_calls, 0);
        assert_int_equal(rep.vcpus_pinned, 77);
}

static void test_apply_rejects_bad_plan(void **state) {
        struct fixture *f = *state;
        struct pin_report rep = {.vcpus_pinned = 77};
        f->map[0] = 9; /* outside 0-1 */
        assert_int_equal(apply(f, &rep), -EINVAL);
        assert_int_equal(rep.vcpus_pinned, 77);
        assert_int_equal(fake.n_calls, 0);
}

/* ---- memory ---- */

static void test_memory_migrated(void **state) {
        struct fixture *f = *state;
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 0);
        assert_int_equal(fake.migrate_calls, 1);
        assert_int_equal(fake.migrate_pid, QEMU);
        assert_string_equal(fake.migrate_from, "1");
        assert_string_equal(fake.migrate_to, "0");
        assert_int_equal(rep.memory, PIN_MEMORY_MIGRATED);
        assert_int_equal(rep.pages_elsewhere, 512); /* N1= of numa_maps */
        assert_int_equal(rep.pages_not_moved, 3);
        assert_int_equal(rep.memory_error, 0);
}

static void test_memory_failed(void **state) {
        struct fixture *f = *state;
        fake.migrate_error = -EPERM;
        struct pin_report rep;
        assert_int_equal(apply(f, &rep), 0); /* threads are pinned; the memory result says what went wrong */
        assert_int_equal(rep.memory, PIN_MEMORY_FAILED);
        assert_int_equal(rep.memory_error, -EPERM);
}

static void test_memory_not_moved_when_needless(void **state) {
        struct fixture *f = *state;
        struct pin_report rep;
        fake.host_nodes = "0";
        assert_int_equal(apply(f, &rep), 0);
        assert_int_equal(rep.memory, PIN_MEMORY_SINGLE_NODE);
        fake.host_nodes = NULL;
        assert_int_equal(apply(f, &rep), 0);
        assert_int_equal(rep.memory, PIN_MEMORY_NO_NUMA);
        assert_int_equal(fake.numa_nodes_calls, 2);
        f->plan.mem_nodes = NULL;
        assert_int_equal(apply(f, &rep), 0);
        assert_int_equal(rep.memory, PIN_MEMORY_NOT_ASKED);
        assert_int_equal(fake.numa_nodes_calls, 2); /* not even asked */
        assert_int_equal(fake.migrate_calls, 0);
}

/* ---- which vCPU threads ---- */

static void test_find_vcpus_from_qmp(void **state) {
        struct fixture *f = *state;
        struct pin_vcpus v;
        int qmp[] = {PROCTREE_VCPU0, PROCTREE_VCPU1};
        assert_int_equal(pinning_find_vcpus(f->root, QEMU, 0, qmp, 2, &v), 0);
        assert_true(v.from_qmp);
        assert_int_equal(v.qmp_error, 0);
        assert_int_equal(v.n, 2);
        assert_memory_equal(v.tids, qmp, sizeof(qmp));
        assert_ptr_not_equal(v.tids, qmp); /* a copy */
        pinning_vcpus_done(&v);
}

static void test_find_vcpus_falls_back_to_proc(void **state) {
        struct fixture *f = *state;
        struct pin_vcpus v;
        int stale[] = {24433, 24434}; /* another QEMU's threads (a restart between the pid file and QMP) */
        assert_int_equal(pinning_find_vcpus(f->root, QEMU, 0, stale, 2, &v), 0);
        assert_false(v.from_qmp);
        assert_int_equal(v.qmp_error, -ESTALE);
        assert_int_equal(v.n, 2);
        assert_int_equal(v.tids[0], PROCTREE_VCPU0);
        assert_int_equal(v.tids[1], PROCTREE_VCPU1);
        pinning_vcpus_done(&v);
        assert_int_equal(pinning_find_vcpus(f->root, QEMU, -ETIMEDOUT, NULL, 0, &v), 0);
        assert_false(v.from_qmp);
        assert_int_equal(v.qmp_error, -ETIMEDOUT);
        assert_int_equal(v.tids[1], PROCTREE_VCPU1);
        pinning_vcpus_done(&v);
}

static void test_find_vcpus_errors(void **state) {
        struct fixture *f = *state;
        struct pin_vcpus v = {0};
        assert_int_equal(pinning_find_vcpus(f->root, QEMU, -ENOMEM, NULL, 0, &v), -ENOMEM);
        assert_int_equal(pinning_find_vcpus(f->root, 4242, -ECONNREFUSED, NULL, 0, &v), -ESRCH);
        proctree_add_task(f->root, 3000, 3000, "kvm", "0-1"); /* QEMU not done creating its vCPU threads */
        assert_int_equal(pinning_find_vcpus(f->root, 3000, -ENOENT, NULL, 0, &v), -ENOENT);
        assert_null(v.tids);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
        const struct CMUnitTest tests[] = {
                T(test_apply_pins_every_thread),
                T(test_apply_others_before_vcpus),
                T(test_apply_thread_born_while_pinning),
                T(test_apply_failures_and_gone_threads),
                T(test_apply_missing_vcpu),
                T(test_apply_process_gone),
                T(test_apply_rejects_bad_plan),
                T(test_memory_migrated),
                T(test_memory_failed),
                T(test_memory_not_moved_when_needless),
                T(test_find_vcpus_from_qmp),
                T(test_find_vcpus_falls_back_to_proc),
                T(test_find_vcpus_errors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
