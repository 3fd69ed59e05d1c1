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

/* The owner the coordinator uses, "nodeclaim/<uid>/<name>", from a qemu-server config text whose description
 * (its leading "#" lines, %XX-encoded) starts "pvescale-nodeclaim: <name>" and has a "uid: <uid>" line.
 * 0, or -ENOENT when the VM is not the coordinator's. Pure. */
int ledger_rebuild_owner(const char *conf_text, char *owner, size_t len);

/* The placement of vm: vcpu_map[i] = the host CPU of vCPU i (from its thread's affinity) when given, else the
 * config's affinity in node then CPU order. Each host NUMA node of those CPUs is a guest node (its vCPUs must
 * be contiguous); its memory is the config's numaN memory when the numaN lines name those host nodes in that
 * order, else the memory split by vCPUs. 0, or -EINVAL with why (the CPUs cannot be determined), -ENOMEM.
 * Pure. */
int ledger_rebuild_placement(const struct topology *t, const struct vm *vm, const int *vcpu_map,
                             struct placement **ret, char *why, size_t len);

/* What a reservation for vm asks for: its vCPUs, memory and hugepage size. */
struct placement_request ledger_rebuild_request(const struct vm *vm);

/* Add to l a bound reservation for every VM (not a template) of config_dir the coordinator described, its
 * CPUs from the running QEMU's vCPU threads under proc_root (or the config's affinity when it is not running).
 * A VM whose CPUs cannot be determined is skipped with one log line. Returns how many were rebuilt, or
 * -ENOMEM / -errno of the inventory. */
int ledger_rebuild(struct ledger *l, const struct topology *t, const char *config_dir, const char *run_dir,
                   const char *proc_root, int64_t now);
