/* pinning_apply: pins a VM's QEMU threads and moves its memory, through a /proc root and a system-call table. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pinning_apply.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pinning_internal.h"
#include "pinning_proc.h"

/* Threads born while we pin inherit their creator's mask, so the task list is read again until a pass
 * finds no new thread. QEMU's thread pool spawns its workers from the main loop, not from the vCPU
 * thread that asked for one, so that they never inherit a vCPU's single-CPU mask. */
#define PIN_PASSES 3

/* ---- finding the vCPU threads ---- */

static int copy_tids(const int *tids, unsigned n, struct pin_vcpus *ret) {
        int *copy = calloc(n ? n : 1, sizeof(*copy));
        if (!copy)
                return -ENOMEM;
        if (n)
                memcpy(copy, tids, n * sizeof(*copy));
        *ret = (struct pin_vcpus){.tids = copy, .n = n, .from_qmp = true};
        return 0;
}

int pinning_find_vcpus(const char *proc_root, int pid, int qmp_error, const int *qmp_tids, unsigned qmp_n,
                       struct pin_vcpus *ret) {
        /* Thread ids from another QEMU (a restart between reading the pid file and asking QMP) must never
         * be pinned: after a restart they may name unrelated threads. */
        if (qmp_error == 0 && !pinning_proc_has_threads(proc_root, pid, qmp_tids, qmp_n))
                qmp_error = -ESTALE;
        if (qmp_error == 0)
                return copy_tids(qmp_tids, qmp_n, ret);
        if (qmp_error == -ENOMEM)
                return qmp_error;
        struct pin_vcpus v = {.qmp_error = qmp_error};
        int r = pinning_proc_vcpu_threads(proc_root, pid, &v.tids, &v.n);
        if (r < 0)
                return r;
        *ret = v;
        return 0;
}

/* ---- threads ---- */

static void pin_vcpus(const struct pin_plan *plan, const struct pin_vcpus *vcpus, const struct pinning_env *env,
                      struct pin_report *rep) {
        for (unsigned i = 0; i < plan->n_vcpus; i++) {
                int tid = i < vcpus->n ? vcpus->tids[i] : 0;
                if (tid == 0) {
                        rep->vcpus_missing++;
                        continue;
                }
                struct cpuset *cpu = pinning_vcpu_cpus(plan, i);
                pinning_report_note(rep, tid, cpu ? env->sys->set_affinity(tid, cpu) : -ENOMEM, &rep->vcpus_pinned);
                cpuset_free(cpu);
        }
}

/* One pass over the task list: pin the threads not pinned yet onto vm_cpus. Returns how many were new. */
static int pin_others_pass(const struct pin_plan *plan, const struct pin_vcpus *vcpus, const struct pinning_env *env,
                           struct pinning__ids *done, struct pin_report *rep) {
        int *tasks = NULL;
        size_t n_tasks = 0;
        int r = pinning_proc_tasks(env->proc_root, plan->pid, &tasks, &n_tasks);
        int fresh = 0;
        for (size_t i = 0; r == 0 && i < n_tasks; i++) {
                int tid = tasks[i];
                if (pinning_is_vcpu_thread(plan, vcpus, tid) || pinning__has_id(done->v, done->n, tid))
                        continue;
                r = pinning__ids_add(done, tid);
                if (r == 0)
                        pinning_report_note(rep, tid, env->sys->set_affinity(tid, plan->vm_cpus), &rep->others_pinned);
                fresh++;
        }
        free(tasks);
        return r < 0 ? r : fresh;
}

static int pin_others(const struct pin_plan *plan, const struct pin_vcpus *vcpus, const struct pinning_env *env,
                      struct pin_report *rep) {
        struct pinning__ids done = {0};
        int r = 0, pass;
        for (pass = 0; pass < PIN_PASSES; pass++) {
                r = pin_others_pass(plan, vcpus, env, &done, rep);
                if (r <= 0)
                        break;
        }
        free(done.v);
        /* The process may exit between passes: what was pinned stays pinned, the caller reports it. */
        if (r == -ESRCH && pass > 0)
                return 0;
        return r < 0 ? r : 0;
}

static void pin_vhost_kthreads(const struct pin_plan *plan, const struct pinning_env *env, struct pin_report *rep) {
        int *tids = NULL, *kthreads = NULL;
        size_t n_tids = 0, n_kthreads = 0;
        int r = pinning_proc_tasks(env->proc_root, plan->pid, &tids, &n_tids);
        if (r == 0)
                r = pinning_proc_vhost_kthreads(env->proc_root, tids, n_tids, &kthreads, &n_kthreads);
        if (r < 0 && r != -ESRCH)
                pinning_report_note(rep, 0, r, &rep->vhost_kthreads_pinned); /* tid 0: the scan itself failed */
        for (size_t i = 0; i < n_kthreads; i++)
                pinning_report_note(rep, kthreads[i], env->sys->set_affinity(kthreads[i], plan->vm_cpus),
                                    &rep->vhost_kthreads_pinned);
        free(tids);
        free(kthreads);
}

/* ---- memory ---- */

static int migrate(const struct pin_plan *plan, const struct cpuset *from, const struct pinning_env *env,
                   struct pin_report *rep) {
        /* The count is informative: 0 when numa_maps cannot be read. */
        if (pinning_proc_numa_pages(env->proc_root, plan->pid, from, &rep->pages_elsewhere) < 0)
                rep->pages_elsewhere = 0;
        return env->sys->migrate_pages(plan->pid, from, plan->mem_nodes, &rep->pages_not_moved);
}

/* migrate_pages(2) moves the pages that exist now; the guest's later allocations follow QEMU's memory
 * policy (numaN hostnodes/policy in the VM config), which another process cannot change. */
static void migrate_memory(const struct pin_plan *plan, const struct pinning_env *env, struct pin_report *rep) {
        if (!plan->mem_nodes || cpuset_is_empty(plan->mem_nodes)) {
                rep->memory = PIN_MEMORY_NOT_ASKED;
                return;
        }
        struct cpuset *host = NULL, *from = NULL;
        int r = env->sys->numa_nodes(&host);
        if (r == 0)
                r = pinning_nodes_elsewhere(plan, host, &from);
        if (r == -ENOSYS) {
                rep->memory = PIN_MEMORY_NO_NUMA;
        } else if (r == 0 && cpuset_is_empty(from)) {
                rep->memory = PIN_MEMORY_SINGLE_NODE; /* no page can be on a wrong node */
        } else {
                if (r == 0)
                        r = migrate(plan, from, env, rep);
                rep->memory = r < 0 ? PIN_MEMORY_FAILED : PIN_MEMORY_MIGRATED;
                rep->memory_error = r < 0 ? r : 0;
        }
        cpuset_free(host);
        cpuset_free(from);
}

int pinning_apply(const struct pin_plan *plan, const struct pin_vcpus *vcpus, const struct pinning_env *env,
                  struct pin_report *ret_report) {
        int r = pinning_plan_check(plan);
        if (r < 0)
                return r;
        struct pin_report rep = {.vcpus_from_qmp = vcpus->from_qmp, .qmp_error = vcpus->qmp_error};
        /* The other threads first: whatever they spawn from now on inherits the whole set. */
        r = pin_others(plan, vcpus, env, &rep);
        if (r < 0)
                return r;
        pin_vcpus(plan, vcpus, env, &rep);
        pin_vhost_kthreads(plan, env, &rep);
        migrate_memory(plan, env, &rep);
        *ret_report = rep;
        return rep.n_failures > 0 ? 1 : 0;
}
