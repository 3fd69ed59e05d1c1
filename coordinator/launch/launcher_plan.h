/* launcher_plan: the pure parts of a launch (VM config values, names, description, fallback accounting, back-off,
 * NodeClaim conditions), kept apart from the I/O so that they can be tested on their own. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pve.h"

#define LAUNCHER_TAG "pvescale"
#define LAUNCHER_OWNER_PREFIX "nodeclaim/"
#define LAUNCHER_DESCRIPTION_MARK "pvescale-nodeclaim"
#define LAUNCHER_UUID_LINE "smbios-uuid" /* its value "uid": configured, the SMBIOS UUID is the claim's UID */
#define LAUNCHER_UID_MAX 64
#define LAUNCHER_NAME_MAX 254
#define LAUNCHER_MAX_NUMA 8

/* One guest NUMA node of a placement, as kept in the claim's status.placement.numa. */
struct launcher_numa {
        unsigned host_node;
        char guest_cpus[64]; /* cpulist of guest vCPUs, "0-3" */
        uint64_t memory_mib;
};

/* The agent's reservation numa array ([{node, guest_cpus, memory_bytes}]) into the status form
 * ([{hostNode, guestCPUs, memoryMiB}]). memory_bytes must be whole MiB. New reference or NULL (-EINVAL/-ENOMEM
 * in *ret_err). */
json_t *launcher_placement_numa_from_agent(const json_t *agent_numa, int *ret_err);

/* Parse status.placement.numa. 0 with *ret_n entries (0..LAUNCHER_MAX_NUMA), or -EINVAL. */
int launcher_numa_parse(const json_t *numa, struct launcher_numa *ret, size_t *ret_n);

/* Add numa=1 and numa<i>=cpus=<a-b;c>,hostnodes=<n>,memory=<MiB>,policy=bind for every entry, and a delete of
 * every numa<k> in current_config that is not set here (appended to *deletes, comma-separated). The memories
 * must add up exactly to vm_memory_mib (Proxmox refuses to start the VM otherwise): -ERANGE if not. */
int launcher_numa_params(const struct launcher_numa *numa, size_t n, uint64_t vm_memory_mib,
                         const json_t *current_config, struct pve_params *p, char **deletes);

/* A net<n> value with queues=<queues> (replacing any queues=). malloc'd or NULL. */
char *launcher_net_with_queues(const char *net, unsigned queues);

/* "pvescale;<nodepool>;<claim>;<extra...>": lower-cased, deduplicated, every tag checked against PVE's
 * pve-tag-list rule ([a-z0-9_][a-z0-9_+.-]*). extra is a JSON array of strings or NULL. malloc'd, or NULL with
 * -EINVAL/-ENOMEM in *ret_err. */
char *launcher_tags(const char *nodepool, const char *claim, const json_t *extra, int *ret_err);
/* Are two Proxmox tag lists (separated by ';', ',' or ' ') the same set, without case? NULL is the empty list. */
bool launcher_tags_same(const char *a, const char *b);
/* Does the VM config carry the claim's tag (launcher_tags)? Then the claim's launch configured it already. */
bool launcher_config_tagged(const json_t *config, const char *claim);

/* The VM description: names the claim, its UID and the launch time, which is how garbage collection knows
 * who owns a VM and how old it is; then, when given (not NULL or ""), "reservation: <id>" (the agent's) and
 * "cpus: <cpulist>" (the host CPUs of the placement), which is how an agent that lost its state rebuilds the VM's
 * reservation with the same id and CPUs (docs/agent.md). */
char *launcher_description(const char *claim, const char *uid, int64_t created_ms, const char *reservation_id,
                           const char *cpus);
/* Read it back. 0 with the UID (and the creation time in ms, or -1 when absent), or -ENOENT when text is not a
 * pvescale description. */
int launcher_description_parse(const char *text, char uid[LAUNCHER_UID_MAX], int64_t *ret_created_ms);
/* Does the description say the configured VM's SMBIOS UUID is the claim's UID (its "smbios-uuid: uid" line)? VMs
 * described by a coordinator before that rule lack it: their random UUID says nothing, so their description alone
 * names their claim, as it did then. */
bool launcher_description_names_uuid(const char *text);

/* The VM's SMBIOS UUID (its smbios1 uuid=, which the guest reads as its product UUID and a kubelet reports as
 * status.nodeInfo.systemUUID) is the claim's UID: a VM someone else made under a reused VMID has its own, even
 * with a copy of the claim's name, description and tags. launcher_smbios1 is current (the VM's smbios1, NULL for
 * none) with its uuid set to uuid and its other fields kept: malloc'd, or NULL (ENOMEM). */
char *launcher_smbios1(const char *current, const char *uuid);
/* Does the config's smbios1 carry uuid (case does not matter)? */
bool launcher_config_uuid_is(const json_t *config, const char *uuid);

/* The reservation owner "nodeclaim/<uid>/<name>" (at most 253 characters) and its UID part. */
int launcher_owner(const char *claim, const char *uid, char *buf, size_t len);
int launcher_owner_uid(const char *owner, char uid[LAUNCHER_UID_MAX]);

/* The boot disk of a VM config: the first disk of boot order= that is not a CD-ROM, else the first of scsi0,
 * virtio0, sata0, ide0. 0 with the key (static storage in the config) and its size in bytes (0 when the
 * config has no size=), or -ENOENT. */
int launcher_boot_disk(const json_t *config, char key[16], uint64_t *ret_bytes);

/* A NodeClass bootDevice.size ("30Gi", "1T") as Proxmox's resize argument ("30G") and bytes. */
int launcher_disk_size(const char *size, char arg[32], uint64_t *ret_bytes);

/* Host room from PVE data, for launches without an agent. */
struct launcher_room {
        int64_t cpus;         /* host CPUs minus every other VM's vCPUs and in-flight claims */
        int64_t memory_bytes; /* host memory minus the same */
};
/* node_status: GET /nodes/{n}/status; vms: GET /nodes/{n}/qemu (templates skipped; VMs in skip_vmids, which
 * in-flight claims already count, skipped); inflight_cpus/bytes: claims on this host that count before this
 * one. Pure. */
int launcher_room_from_pve(const json_t *node_status, const json_t *vms, const uint32_t *skip_vmids, size_t n_skip,
                           int64_t inflight_cpus, int64_t inflight_bytes, struct launcher_room *ret);

/* Set a condition in status.conditions (created when missing): lastTransitionTime changes only when the
 * status changes. status is "True", "False" or "Unknown". */
int launcher_condition_set(json_t *status, const char *type, const char *cstatus, const char *reason,
                           const char *message, int64_t now_ms);

/* Where a Node is on its way to initialized, as Karpenter decides it: Ready, and none of its taints left is the
 * unregistered taint, a startup taint (by key; startup_taints from the pool, may be NULL) or a known ephemeral
 * taint (kube_taint_ephemeral). SETTLING: Ready, and only known ephemeral taints left (Kubernetes takes them off
 * on its own, within seconds). Pure. */
enum launcher_node_state { LAUNCHER_NODE_NOT_READY, LAUNCHER_NODE_TAINTED, LAUNCHER_NODE_SETTLING,
                           LAUNCHER_NODE_INITIALIZED };
enum launcher_node_state launcher_node_state(const json_t *node, const json_t *startup_taints);
/* Since when (ms since the epoch) the Node is Ready, from its Ready condition's lastTransitionTime; -1 when it is
 * not Ready or the time is missing or malformed. Pure. */
int64_t launcher_node_ready_since(const json_t *node);
/* Does a class's instanceTemplateRef name a managed template (kind ProxmoxTemplate, which the coordinator builds on
 * each host: a host without it yet is waited for, not a failed launch)? Pure. */
bool launcher_template_managed(const json_t *ref);
