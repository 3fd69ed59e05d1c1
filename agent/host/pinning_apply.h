/* pinning_apply: pins a VM's QEMU threads and moves its memory, through a /proc root and a system-call table. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "pinning.h"
#include "pinning_sys.h"

/* Where pinning reads and what it calls: {PINNING_PROC_ROOT, &pinning_sys_linux} for real. */
struct pinning_env {
        const char *proc_root;
        const struct pinning_sys *sys;
};

/* The vCPU threads to pin for the QEMU process pid: the ones QMP named (qmp_error 0, qmp_tids/qmp_n as
 * pinning_qmp_vcpu_threads gave them, copied) when they all are threads of pid now, else the thread names
 * under proc_root, with qmp_error (-ESTALE when QMP named threads pid does not have) kept in *ret.
 * 0; -ESRCH, -ENOENT (no vCPU thread yet), -EBADMSG as pinning_proc_vcpu_threads; -ENOMEM.
 * Release *ret with pinning_vcpus_done(). */
int pinning_find_vcpus(const char *proc_root, int pid, int qmp_error, const int *qmp_tids, unsigned qmp_n,
                       struct pin_vcpus *ret);

/* Pin the VM now: every other thread of the QEMU process first (main loop, I/O threads, workers, vhost tasks
 * on kernels >= 6.4, vCPUs beyond n_vcpus) onto vm_cpus, re-reading the task list until no new thread
 * appears, then every vCPU thread of `vcpus` onto its own host CPU, `vhost-<tid>` kernel threads onto
 * vm_cpus, and last memory pages on nodes outside mem_nodes to mem_nodes.
 * Privileges: sched_setaffinity(2) on another user's thread needs CAP_SYS_NICE (same euid is enough, as for
 * root agent and root QEMU on Proxmox). migrate_pages(2) needs ptrace read access to QEMU (same uid or
 * CAP_SYS_PTRACE), and CAP_SYS_NICE to move pages shared with other processes or to target nodes outside
 * QEMU's cpuset; target nodes outside the agent's own cpuset.mems are silently dropped by the kernel.
 * Returns 0 when everything was pinned, 1 when some threads failed (see the report); the report is written
 * for both. -EINVAL for a bad plan, -ESRCH when the process is gone, -ENOMEM. Logs nothing. */
int pinning_apply(const struct pin_plan *plan, const struct pin_vcpus *vcpus, const struct pinning_env *env,
                  struct pin_report *ret_report);
