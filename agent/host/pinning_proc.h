/* pinning_proc: reads a QEMU process's threads, affinities, vhost kernel threads and numa_maps under a /proc root. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinning.h"

/* The root of this machine's process tree. Every function below takes the root instead (tests pass a
 * captured tree); paths under it are "<root>/<pid>/...". */
#define PINNING_PROC_ROOT "/proc"

/* The thread ids in <proc_root>/<pid>/task. Caller frees *ret_tids. -ESRCH when the process is gone, -ENOMEM. */
int pinning_proc_tasks(const char *proc_root, int pid, int **ret_tids, size_t *ret_n);

/* vCPU threads from the names in <proc_root>/<pid>/task/<tid>/comm, as pinning_vcpu_index() reads them.
 * Needs QEMU's debug-threads=on (Proxmox always sets it). *ret_tids as pinning_parse_cpus_fast.
 * -ESRCH when the process is gone, -ENOENT when no thread has a vCPU name, -EBADMSG for two threads with
 * one index, -ENOMEM. */
int pinning_proc_vcpu_threads(const char *proc_root, int pid, int **ret_tids, unsigned *ret_n);

/* Whether every non-zero tid is a thread of pid now (QMP's thread ids may come from a QEMU that has
 * restarted since, and then name unrelated threads). */
bool pinning_proc_has_threads(const char *proc_root, int pid, const int *tids, unsigned n);

/* The `vhost-<tid>` kernel threads (top-level entries of proc_root) serving one of tids. Before Linux 6.4
 * a vhost worker is such a kernel thread outside the QEMU process; since then it is a task of the process.
 * Caller frees *ret_ids. -errno when proc_root cannot be listed, -ENOMEM. */
int pinning_proc_vhost_kthreads(const char *proc_root, const int *tids, size_t n_tids, int **ret_ids,
                                size_t *ret_n);

/* The real affinity of every thread of pid, plus `vhost-<tid>` kernel threads serving it:
 * [{"tid", "name", "cpus", "vcpu"?: n, "kthread"?: true}], "cpus" from Cpus_allowed_list in
 * <proc_root>/<pid>/task/<tid>/status (<proc_root>/<kthread>/status). Threads that exit while being read
 * are left out. Caller owns the array. -ESRCH when the process is gone, -ENOMEM. */
int pinning_proc_read(const char *proc_root, int pid, json_t **ret_threads);

/* The pages pid has on `nodes`, from <proc_root>/<pid>/numa_maps (pinning_numa_maps_pages). -errno when
 * the file cannot be read, -EBADMSG. */
int pinning_proc_numa_pages(const char *proc_root, int pid, const struct cpuset *nodes, uint64_t *ret_pages);
