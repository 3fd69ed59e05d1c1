/* pinning: pinning as pure functions: thread names, QMP and numa_maps parsers, plans, drift, reports. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpuset.h"

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

/* The vCPU threads to pin, and where they came from. */
struct pin_vcpus {
        int *tids;       /* tids[i]: the thread of guest vCPU i, 0 when none was found; owned */
        unsigned n;
        bool from_qmp;   /* from QMP query-cpus-fast, else from the thread names in /proc */
        int qmp_error;   /* why QMP was not used (negative errno), 0 when it was */
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

/* ---- thread names and QMP answers ---- */

/* The guest vCPU index n of a thread named "CPU <n>/KVM" (QEMU's KVM accelerator with debug-threads=on)
 * or "CPU <n>/TCG" (multi-threaded TCG, used where /dev/kvm is missing). A trailing newline is allowed.
 * Returns n (0..PINNING_MAX_VCPU) or -EINVAL for any other name. */
int pinning_vcpu_index(const char *comm);

/* The QEMU thread a "vhost-<tid>" kernel thread serves (its tid), or -EINVAL for any other name. */
int pinning_vhost_owner(const char *comm);

/* Parse a QMP reply {"return": [{"cpu-index": n, "thread-id": tid, ...}, ...]} to query-cpus-fast.
 * *ret_tids[i] is the host thread id of vCPU i, 0 for an index QEMU did not list; *ret_n is the highest
 * index + 1. Caller frees *ret_tids. -EBADMSG for a malformed reply or a repeated index, -ENOMEM. */
int pinning_parse_cpus_fast(const json_t *reply, int **ret_tids, unsigned *ret_n);

/* Sum the page counts "N<node>=<pages>" of /proc/<pid>/numa_maps text over the nodes in `nodes`.
 * A huge page counts as one page, as numa_maps shows it. Other tokens (also "N1=x" from a file name with
 * a space) are ignored. -EBADMSG for a count that does not fit in 64 bits. */
int pinning_numa_maps_pages(const char *numa_maps, const struct cpuset *nodes, uint64_t *ret_pages);

/* The CPUs of the "Cpus_allowed_list:" line of /proc/<pid>/task/<tid>/status text. -EBADMSG when the line
 * is missing or malformed, -ENOMEM. */
int pinning_status_cpus(const char *status, struct cpuset **ret_cpus);

/* Whether /proc/<pid>/stat text is a kernel thread's (PF_KTHREAD in the flags, field 9). */
bool pinning_stat_kthread(const char *stat);

/* ---- plans ---- */

/* 0 when the plan is usable: pid > 0, n_vcpus > 0, vcpu_map and vm_cpus given, every vcpu_map entry
 * inside vm_cpus. -EINVAL otherwise. */
int pinning_plan_check(const struct pin_plan *plan);

/* The CPUs the plan wants for guest vCPU `vcpu` (< n_vcpus): {vcpu_map[vcpu]}. NULL on ENOMEM. */
struct cpuset *pinning_vcpu_cpus(const struct pin_plan *plan, unsigned vcpu);

/* Whether tid is the thread of one of the plan's vCPUs (the first n_vcpus of vcpus); every other thread of
 * the process goes onto vm_cpus. */
bool pinning_is_vcpu_thread(const struct pin_plan *plan, const struct pin_vcpus *vcpus, int tid);

/* The nodes of host_nodes outside the plan's mem_nodes: where a page of the VM is on a wrong node. -ENOMEM. */
int pinning_nodes_elsewhere(const struct pin_plan *plan, const struct cpuset *host_nodes, struct cpuset **ret_nodes);

void pinning_vcpus_done(struct pin_vcpus *vcpus);

/* ---- drift, status and reports ---- */

/* Count the threads of `real` (the array pinning_proc_read() returns) whose "cpus" differ from what the plan
 * wants, plus the plan's vCPUs that have no thread in `real`. Thread n named "CPU n/KVM" (n < n_vcpus)
 * wants {vcpu_map[n]}; every other thread wants vm_cpus. -EINVAL for a malformed `real`. */
int pinning_drift(const struct pin_plan *plan, const json_t *real, unsigned *ret_drift);

/* The body of GET /v1/vms/{vmid}: {"wanted": {"cpus", "vcpu_map", "mem_nodes"}, "real": [copy of real,
 * each entry with its "wanted" cpus added], "drift": N}. Errors as pinning_drift, or -ENOMEM. */
int pinning_status(const struct pin_plan *plan, const json_t *real, json_t **ret_status);

/* Count one thread's pinning result r in the report: *counter on success, threads_gone for -ESRCH (the
 * thread exited meanwhile), a failure otherwise (tid 0: a scan failed, not one thread). */
void pinning_report_note(struct pin_report *report, int tid, int r, unsigned *counter);

/* A report as JSON (for POST /v1/vms/{vmid}/pin and the log). NULL on ENOMEM. */
json_t *pinning_report_to_json(const struct pin_report *report);
const char *pinning_memory_result_to_string(enum pin_memory_result result);
