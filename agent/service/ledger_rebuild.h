/* ledger_rebuild: bound reservations rebuilt from the host (VM configs the coordinator described, and the CPUs
 * their QEMU vCPU threads run on) when the agent starts with no reservation state at all. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "inventory.h"
#include "ledger.h"
#include "placement.h"
#include "topology.h"

/* The first line of a description the coordinator wrote (coordinator/launch launcher_description). */
#define LEDGER_REBUILD_MARK "pvescale-nodeclaim"

/* What the coordinator's description of a VM says (its leading "#" lines in the qemu-server config, %XX-encoded,
 * starting "pvescale-nodeclaim: <name>" with a "uid: <uid>" line): the owner it uses, "nodeclaim/<uid>/<name>";
 * the agent's reservation id of a "reservation:" line when it is in the agent's format, else ""; the host CPUs of
 * a "cpus:" line when it parses, else NULL (descriptions older than those lines have neither). */
struct ledger_rebuild_descr {
        char owner[LEDGER_OWNER_MAX + 1];
        char id[LEDGER_ID_LEN + 1];
        struct cpuset *cpus;
};
/* 0, -ENOENT when the VM is not the coordinator's, -ENOMEM. Free with ledger_rebuild_descr_done. Pure. */
int ledger_rebuild_describe(const char *conf_text, struct ledger_rebuild_descr *ret);
void ledger_rebuild_descr_done(struct ledger_rebuild_descr *d);

/* Where the CPUs of a rebuilt reservation come from, in this order: the vCPU threads of the running QEMU when each
 * is pinned to one CPU; else the description's cpus when they are as many as the vCPUs; else the config's affinity
 * (the same rule). */
enum ledger_rebuild_source {
        LEDGER_REBUILD_THREADS,
        LEDGER_REBUILD_DESCRIPTION,
        LEDGER_REBUILD_AFFINITY,
};
/* map[i] = the host CPU of vCPU i (map has vm's vCPU count of entries) from the first source that has one CPU per
 * vCPU: thread_map (NULL when the VM does not run or a thread is not pinned to one CPU), descr_cpus (may be NULL),
 * the config's affinity; a CPU set is taken in node then CPU order. The source, or -EINVAL with why. Pure. */
int ledger_rebuild_vcpu_map(const struct topology *t, const struct vm *vm, const int *thread_map,
                            const struct cpuset *descr_cpus, int *map, char *why, size_t len);

/* The placement of vm: vcpu_map[i] = the host CPU of vCPU i (ledger_rebuild_vcpu_map). Each host NUMA node of
 * those CPUs is a guest node (its vCPUs must be contiguous); its memory is the config's numaN memory when the
 * numaN lines name those host nodes in that order, else the memory split by vCPUs. 0, or -EINVAL with why (a CPU
 * twice or outside the host), -ENOMEM. Pure. */
int ledger_rebuild_placement(const struct topology *t, const struct vm *vm, const int *vcpu_map,
                             struct placement **ret, char *why, size_t len);

/* What a reservation for vm asks for: its vCPUs, memory and hugepage size. */
struct placement_request ledger_rebuild_request(const struct vm *vm);

/* The VMID of a bound reservation of l whose CPUs intersect p's, or 0. Pure. */
int ledger_rebuild_overlap(const struct ledger *l, const struct placement *p);
/* Does p's memory on each host NUMA node, with that of l's placed reservations, stay within the node's memory?
 * Pure. */
bool ledger_rebuild_memory_fits(const struct ledger *l, const struct topology *t, const struct placement *p);

/* Add to l a bound reservation for every VM (not a template) of config_dir the coordinator described, in VMID
 * order, with the description's reservation id (ledger_add_bound) and its CPUs from ledger_rebuild_vcpu_map (the
 * running QEMU's vCPU threads under proc_root first). A VM is skipped with one log line when its CPUs cannot be
 * determined, when they overlap those of a VM rebuilt before it (hand-pinned: the lower VMID keeps them), or when
 * its memory would exceed a NUMA node's. Returns how many were rebuilt, or -ENOMEM / -errno of the inventory. */
int ledger_rebuild(struct ledger *l, const struct topology *t, const char *config_dir, const char *run_dir,
                   const char *proc_root, int64_t now);
