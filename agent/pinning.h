/* pinning: pins a running VM's QEMU threads to host CPUs and moves its memory to its NUMA nodes. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpuset.h"

/* How long one short-lived QMP conversation may take before pinning falls back to /proc. QEMU serves one
 * QMP client at a time and pvedaemon/pvestatd use the same socket, so a busy socket must not stall us. */
#define PINNING_QMP_TIMEOUT_MS 1000
/* Highest guest vCPU index accepted from QMP or a thread name. */
#define PINNING_MAX_VCPU 8191
/* How many failures a report keeps in detail (n_failures counts all of them). */
#define PINNING_MAX_FAILURES 8

/* What to pin. Everything is borrowed from the caller. */
struct pin_plan {
        int vmid;
        int pid;                        /* live QEMU pid (inventory_running_pid) */
        unsigned n_vcpus;
        const int *vcpu_map;            /* host CPU of guest vCPU i; each one inside vm_cpus */
        const struct cpuset *vm_cpus;   /* the VM's whole host CPU set */
        const struct cpuset *mem_nodes; /* host NUMA node ids for the memory; NULL or empty = leave it */
};

enum pin_memory_result {
        PIN_MEMORY_NOT_ASKED,   /* mem_nodes NULL or empty */
        PIN_MEMORY_NO_NUMA,     /* the kernel has no NUMA support (numa_available() < 0) */
        PIN_MEMORY_SINGLE_NODE, /* no node outside mem_nodes: no page can be on a wrong node, nothing to do */
        PIN_MEMORY_MIGRATED,    /* migrate_pages(2) ran: see pages_elsewhere and pages_not_moved */
        PIN_MEMORY_FAILED,      /* migrate_pages(2) or its setup failed: see memory_error */
};

struct pin_failure {
        int tid;
        int error; /* negative errno */
};

/* What pinning_apply() did. */
struct pin_report {
        bool vcpus_from_qmp;            /* vCPU threads came from QMP query-cpus-fast, else from /proc comm */
        int qmp_error;                  /* why QMP was not used (negative errno), 0 when it was */
        unsigned vcpus_pinned;          /* vCPU threads set to their own host CPU */
        unsigned vcpus_missing;         /* vCPUs of the plan with no thread */
        unsigned others_pinned;         /* other threads of the QEMU process set to the whole set */
        unsigned vhost_kthreads_pinned; /* `vhost-<tid>` kernel threads outside the process (kernels < 6.4) */
        unsigned threads_gone;          /* threads that exited while we pinned them (not failures) */
        unsigned n_failures;
        struct pin_failure failures[PINNING_MAX_FAILURES]; /* the first min(n_failures, MAX) failures */
        enum pin_memory_result memory;
        int memory_error;               /* negative errno when memory == PIN_MEMORY_FAILED */
        uint64_t pages_elsewhere;       /* pages on nodes outside mem_nodes before migrating (numa_maps) */
        uint64_t pages_not_moved;       /* what migrate_pages(2) could not move */
};

/* ---- pure parts ---- */

/* The guest vCPU index n of a thread named "CPU <n>/KVM" (QEMU's KVM accelerator with debug-threads=on)
 * or "CPU <n>/TCG" (multi-threaded TCG, used where /dev/kvm is missing). A trailing newline is allowed.
 * Returns n (0..PINNING_MAX_VCPU) or -EINVAL for any other name. */
int pinning_vcpu_index(const char *comm);

/* Parse a QMP reply {"return": [{"cpu-index": n, "thread-id": tid, ...}, ...]} to query-cpus-fast.
 * *ret_tids[i] is the host thread id of vCPU i, 0 for an index QEMU did not list; *ret_n is the highest
 * index + 1. Caller frees *ret_tids. -EBADMSG for a malformed reply or a repeated index, -ENOMEM. */
int pinning_parse_cpus_fast(const json_t *reply, int **ret_tids, unsigned *ret_n);

/* Sum the page counts "N<node>=<pages>" of /proc/<pid>/numa_maps text over the nodes in `nodes`.
 * A huge page counts as one page, as numa_maps shows it. Other tokens (also "N1=x" from a file name with
 * a space) are ignored. -EBADMSG for a count that does not fit in 64 bits. */
int pinning_numa_maps_pages(const char *numa_maps, const struct cpuset *nodes, uint64_t *ret_pages);

/* 0 when the plan is usable: pid > 0, n_vcpus > 0, vcpu_map and vm_cpus given, every vcpu_map entry
 * inside vm_cpus. -EINVAL otherwise. */
int pinning_plan_check(const struct pin_plan *plan);

/* Count the threads of `real` (the array pinning_read() returns) whose "cpus" differ from what the plan
 * wants, plus the plan's vCPUs that have no thread in `real`. Thread n named "CPU n/KVM" (n < n_vcpus)
 * wants {vcpu_map[n]}; every other thread wants vm_cpus. -EINVAL for a malformed `real`. */
int pinning_drift(const struct pin_plan *plan, const json_t *real, unsigned *ret_drift);

/* The body of GET /v1/vms/{vmid}: {"wanted": {"cpus", "vcpu_map", "mem_nodes"}, "real": [copy of real,
 * each entry with its "wanted" cpus added], "drift": N}. Errors as pinning_drift, or -ENOMEM. */
int pinning_status(const struct pin_plan *plan, const json_t *real, json_t **ret_status);

/* A report as JSON (for POST /v1/vms/{vmid}/pin and the log). NULL on ENOMEM. */
json_t *pinning_report_to_json(const struct pin_report *report);
const char *pinning_memory_result_to_string(enum pin_memory_result result);

/* ---- finding and reading threads ---- */

/* vCPU threads through QMP on socket_path: connect, read the greeting, qmp_capabilities, query-cpus-fast,
 * skipping {"event": ...} lines, close; everything within timeout_ms. Result as pinning_parse_cpus_fast.
 * -ETIMEDOUT (e.g. another client holds the socket), -ECONNREFUSED/-ENOENT, -EPROTO for a QMP error reply,
 * -EBADMSG, -ENAMETOOLONG, -ENOMEM. */
int pinning_qmp_vcpu_threads(const char *socket_path, int timeout_ms, int **ret_tids, unsigned *ret_n);

/* vCPU threads from the names in <proc_root>/<pid>/task/<tid>/comm, as pinning_vcpu_index() reads them.
 * Needs QEMU's debug-threads=on (Proxmox always sets it). -ESRCH when the process is gone, -ENOENT when no
 * thread has a vCPU name, -EBADMSG for two threads with one index, -ENOMEM. */
int pinning_proc_vcpu_threads(const char *proc_root, int pid, int **ret_tids, unsigned *ret_n);

/* QMP on <run_dir>/<vmid>.qmp (run_dir may be NULL to skip it), else /proc. QMP thread ids that are not
 * threads of pid (a restarted QEMU, a stale socket) make it use /proc. Returns 1 when QMP answered, 0 when
 * /proc did; errors as pinning_proc_vcpu_threads. */
int pinning_vcpu_threads(const char *run_dir, int vmid, int pid, int **ret_tids, unsigned *ret_n);

/* The real affinity of every thread of pid, plus `vhost-<tid>` kernel threads serving it:
 * [{"tid", "name", "cpus", "vcpu"?: n, "kthread"?: true}], "cpus" from Cpus_allowed_list in
 * <proc_root>/<pid>/task/<tid>/status (<proc_root>/<kthread>/status). Threads that exit while being read
 * are left out. Caller owns the array. -ESRCH when the process is gone, -ENOMEM. */
int pinning_read_at(const char *proc_root, int pid, json_t **ret_threads);
int pinning_read(int pid, json_t **ret_threads); /* proc_root "/proc" */

/* ---- pinning ---- */

/* Pin the VM now: every vCPU thread of the plan onto its own host CPU (sched_setaffinity), every other
 * thread of the QEMU process (main loop, I/O threads, workers, vhost tasks on kernels >= 6.4, vCPUs beyond
 * n_vcpus) and `vhost-<tid>` kernel threads onto vm_cpus, then move memory pages on nodes outside mem_nodes
 * to mem_nodes (numa_migrate_pages).
 * Privileges: sched_setaffinity(2) on another user's thread needs CAP_SYS_NICE (same euid is enough, as for
 * root agent and root QEMU on Proxmox). migrate_pages(2) needs ptrace read access to QEMU (same uid or
 * CAP_SYS_PTRACE), and CAP_SYS_NICE to move pages shared with other processes or to target nodes outside
 * QEMU's cpuset; target nodes outside the agent's own cpuset.mems are silently dropped by the kernel.
 * Returns 0 when everything was pinned, 1 when some threads failed (see the report); the report is written
 * for both. -EINVAL for a bad plan, -ESRCH when the process is gone, -ENOENT when no vCPU thread was found
 * (nothing was pinned then), -ENOMEM. */
int pinning_apply(const struct pin_plan *plan, const char *run_dir, struct pin_report *ret_report);
