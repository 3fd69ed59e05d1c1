/* provisioner: turns a closed batch of pending pods into NodeClaims: host room from the agents (or Proxmox),
 * the scheduling simulation, the claims, events on the pods, and NodePool usage. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "kube.h"
#include "latency.h"
#include "shapes.h"
#include "simulate.h"

/* Set on every NodeClaim at creation; the launcher removes it once the VM, reservation, token and ISO are
 * gone. */
#define PROVISIONER_CLAIM_FINALIZER "pvescale.io/termination"

/* Event reasons (docs/coordinator.md, "Provisioning and events"). */
#define PROVISIONER_REASON_NOMINATED "Nominated"                   /* Normal: pod planned onto a claim */
#define PROVISIONER_REASON_LIMIT "NodePoolLimitReached"            /* Warning: a NodePool limit blocks it */
#define PROVISIONER_REASON_HOST_ROOM "InsufficientHostCapacity"    /* Warning: no PVE host has the room */
#define PROVISIONER_REASON_NO_POOL "NoCompatibleNodePool"          /* Warning: no pool/shape can take it */
#define PROVISIONER_REASON_TOPOLOGY "TopologyConstraintsUnsatisfied" /* Warning: spread or (anti-)affinity */
#define PROVISIONER_REASON_FAILED "FailedProvisioning"             /* Warning: anything else */
#define PROVISIONER_REASON_AGENT_DOWN "AgentUnavailable" /* Warning on NodePools: a host's agent does not answer */
#define PROVISIONER_REASON_AGENT_UP "AgentAvailable"     /* Normal on NodePools: it answers again */

/* ---- the round's input (pure) ---- */

/* What one round looks at: the controller's cache when the batch closed. JSON arrays of objects, borrowed. */
struct provisioner_snapshot {
        const json_t *candidates; /* pending pods (intake candidates) */
        const json_t *bound;      /* pods bound to a node, not finished */
        const json_t *nodes, *claims, *pools, *classes, *daemonsets;
        /* {"<pod uid>": "<claim>"}: pods nominated to a claim in an earlier round (may be NULL). While that claim
         * is in flight they stay on it, as if bound, so a new round (or a restart) never re-packs them. */
        const json_t *nominated;
        /* {"<pod uid>": true}: pending pods kept off the existing Nodes this round (may be NULL): kube-scheduler
         * refused them for PROVISIONER_REFUSED_MS on Nodes the simulation fits them on (provisioner.c). */
        const json_t *skip_nodes;
        /* PodDisruptionBudgets, all namespaces (may be NULL): the scale-down pass's, not the round's. */
        const json_t *pdbs;
        /* A provisioning round's: the pods bound to Nodes marked for deletion enter as pending too (Karpenter's
         * deleting-node pods), so a node launched for the first of them to be evicted has room for the others. */
        bool reschedule_leaving;
        /* Wall clock (ms since the epoch) the snapshot was taken at: a pending pod nominated to a claim Initialized
         * less than PROVISIONER_SETTLE_MS before it enters bound to the claim's Node (kube-scheduler may not have
         * tried it since: its backoff reaches 10 s). 0 = none does. */
        int64_t now_ms;
};

#define PROVISIONER_SETTLE_MS 15000
/* How long kube-scheduler may keep refusing a pending pod that the simulation fits on an existing Node before the
 * pod gets room of its own (once): longer than its backoff (10 s) and a resync or two. */
#define PROVISIONER_REFUSED_MS 30000

/* One round: the simulation input and what it was built from. */
struct provisioner_round {
        struct sim_input *in;
        const json_t **pods;      /* per input pod, its JSON (borrowed from the snapshot) */
        const json_t **nodes;     /* per input node (Node or in-flight NodeClaim) */
        const json_t **pools;     /* per input pool */
        const json_t **classes;   /* per input class */
        struct shape_catalog **catalogs; /* per input class (owned) */
        size_t n_catalogs;
        size_t n_candidates;      /* pending pods that entered the input (the first n_candidates pods) */
        size_t n_pending;         /* of those, the first n_pending are pending now; the rest are the pods of Nodes
                                   * marked for deletion (snapshot's reschedule_leaving), entered unbound */
        json_t *problems;         /* ["Pod default/x: spec...: invalid quantity", ...]: objects left out */
        json_t *node_claims;      /* Node name -> the claim that stands for it while not Initialized */
        json_t *settling;         /* Node name -> its claim, Initialized less than PROVISIONER_SETTLE_MS ago */
};

/* Build the simulation input from a snapshot, without hosts: pending and bound pods, Nodes, in-flight NodeClaims
 * (not being deleted), NodePools, node classes and daemon sets. A claim is in flight until it is Initialized, as
 * in Karpenter: until then it stands for its Node, which still carries the unregistered and not-ready taints and
 * may lack the pool's labels, and pods bound to that Node count on the claim. A pending pod nominated to an
 * in-flight claim enters bound to it (its placement is then SIM_TARGET_BOUND, node_name the claim). Malformed
 * objects are left out and named in problems. 0 or -ENOMEM. */
int provisioner_round_new(const struct provisioner_snapshot *snap, struct provisioner_round **ret);
void provisioner_round_free(struct provisioner_round *r);

/* Keep pool i off these hosts (a zone NotIn requirement): launches of the pool there are paused after
 * failures (launcher_backoff_active). hosts: a JSON array of host names. 0 or -ENOMEM. */
int provisioner_round_exclude_hosts(struct provisioner_round *r, size_t pool, const json_t *hosts);

/* The catalog of a node class by name, or NULL. */
const struct shape_catalog *provisioner_round_catalog(const struct provisioner_round *r, const char *nodeclass);

/* ---- host room (pure) ---- */

/* A VM size to ask the agents about, and the shape names it stands for. */
struct provisioner_shape {
        uint32_t vcpus;
        uint64_t memory_bytes;
        uint64_t hugepage_kib;
        const char **names; /* shape names with this VM size */
        size_t n_names;
};

struct provisioner_shapes {
        struct provisioner_shape *items;
        size_t n;
};

/* The distinct VM sizes of every catalog in the round. 0 or -ENOMEM. */
int provisioner_shapes_collect(const struct provisioner_round *r, struct provisioner_shapes *ret);
void provisioner_shapes_done(struct provisioner_shapes *s);

/* Host room for simulate_json_host from an agent's answers: /v1/capacity (free CPUs and memory, per NUMA
 * node), /v1/offers for shapes (counts by shape name) and, optionally, /v1/topology (NUMA node sizes). NULL
 * when capacity is unusable. New reference. */
json_t *provisioner_host_from_agent(const char *host, const char *region, const json_t *capacity,
                                    const json_t *offers, const json_t *topology,
                                    const struct provisioner_shapes *shapes);

/* Host room from Proxmox's own accounting: /nodes/{n}/status (cpuinfo.cpus, memory.total) minus the cores
 * (cores x sockets, or cpus/maxcpu) and memory of every VM in /nodes/{n}/qemu except templates. No NUMA
 * breakdown and no offers. NULL when status is unusable. New reference. */
json_t *provisioner_host_from_pve(const char *host, const char *region, const json_t *node_status,
                                  const json_t *vm_list);

/* Why a host's agent gave no usable answer, as the round tells it. */
enum provisioner_agent_state {
        PROVISIONER_AGENT_OK = 0,
        PROVISIONER_AGENT_UNREACHABLE,  /* no HTTP answer: connection refused, timeout, TLS failure */
        PROVISIONER_AGENT_UNAUTHORIZED, /* 401 or 403: it refused the coordinator's token */
        PROVISIONER_AGENT_ERROR,        /* another HTTP error, or an answer that could not be used */
};

/* The state of an agent call that failed with HTTP status (0 = no answer). */
enum provisioner_agent_state provisioner_agent_state_of(long status);

/* The message of the event (and log line) about a host whose agent is in state st (OK: it answers again). url:
 * the agent's; error: the failed call's; fallback: the host is placed by Proxmox's accounting instead of left
 * out. Returns the length snprintf would write. */
int provisioner_agent_message(char *buf, size_t len, const char *region, const char *host, const char *url,
                              enum provisioner_agent_state st, const char *error, bool fallback);

/* Take a VM that is planned but not yet charged by the host (a claim without a reservation or VM yet) out of
 * a host's room, and cap offer counts by what is left. */
void provisioner_host_charge(json_t *host, uint32_t vcpus, uint64_t memory_bytes,
                             const struct provisioner_shapes *shapes);

/* The free PCI devices of each Proxmox resource mapping on host, as the room's "pci_free" ({mapping: count}):
 * mappings is GET /cluster/mapping/pci (each entry "node=<host>,path=<a>[;<b>...],..." gives its paths; a mapping's
 * entries for the host add up, as qemu-server picks the first free path of them all at a VM's start); configs, the
 * configs of the host's running VMs: a hostpciN "mapping=<id>" holds one device of that mapping, a hostpciN by
 * host address ("0000:41:00.0", "host=41:00.0") holds that path. A mapping with no entry for the host is left out
 * (no device there). New reference, NULL on allocation failure. */
json_t *provisioner_pci_free(const json_t *mappings, const char *host, const json_t *configs);

/* Take the devices of the claims planned on this host whose VM is not running yet (status.vmid not in running, a
 * JSON array of integers) out of the room's "pci_free": each pciDevices entry of the claim's node class one device
 * of its mapping. Claims being deleted are skipped. */
void provisioner_host_charge_devices(json_t *host, const struct provisioner_round *r, const json_t *claims,
                                     const json_t *running);

/* Charge the claims of the round's snapshot that are planned on this host but that the host does not know yet:
 * without status.reservationID when the room came from the agent (agent = true), else without a status.vmid
 * among the host's VMs (vmids: a JSON array of integers; may be NULL). Claims being deleted are skipped. */
void provisioner_host_charge_pending(json_t *host, const struct provisioner_round *r, const json_t *claims,
                                     bool agent, const json_t *vmids, const struct provisioner_shapes *shapes);

/* ---- claims, events, usage (pure) ---- */

/* "<pool>-<5 letters/digits>" from a random number. Returns buf. */
char *provisioner_claim_name(const char *pool, uint64_t rnd, char *buf, size_t len);

/* The NodeClaim for planned claim i of res: metadata (name, labels, finalizer, the drift-hash annotations
 * pvescale.io/nodepool-hash and pvescale.io/nodeclass-hash of disrupt.h), spec (nodePool, nodeClassRef,
 * instanceType, requirements, resources.requests, taints, startupTaints, expireAfter). New reference. */
json_t *provisioner_claim_object(const struct provisioner_round *r, const struct sim_result *res, size_t i,
                                 const char *name);
/* The NODECLAIM_ANNOTATION_AFTER value of planned claim i: the names (names[k] for claim k; NULL ones left out)
 * of the claims res lists in its after, comma-separated; NULL when none. New reference. */
json_t *provisioner_claim_after(const struct sim_result *res, size_t i, char *const *names);
/* pvescale.io/round-nodeclaims of claim i of n: the names of the round's other claims, comma-separated, as many
 * as fit in 1 KiB; NULL when none (a new reference). */
json_t *provisioner_claim_round(size_t n, size_t i, char *const *names);
/* Its status: host, region, capacity and allocatable of the shape. New reference. */
json_t *provisioner_claim_status(const struct provisioner_round *r, const struct sim_result *res, size_t i);

/* The Event reason for a pod the simulation left pending, from its reason text. Static string. */
const char *provisioner_unplaced_reason(const char *text);

/* What pool p holds: capacity of its nodes and in-flight claims plus the claims planned in res (may be
 * NULL): {"cpu", "memory", "ephemeral-storage", "pods", "nodes"} as quantities. New reference. */
json_t *provisioner_pool_usage(const struct provisioner_round *r, const struct sim_result *res, size_t pool);

/* ---- one round against the cluster (I/O) ---- */

struct stats;

struct provisioner_env {
        const struct config *cfg;
        struct kube_client *kube;          /* the calling thread's */
        struct stats *stats;               /* may be NULL */
        /* A claim was created, and its status written unless placement_by_launcher (the stored object; without
         * status when that write failed or was left to the launcher): put it into the cache at once, so that the
         * next round counts it even before its watch event arrives, and launch it. waits: what this round spent
         * waiting on the claim's way (before the claim writes, then its writer up to here). May be NULL. */
        void (*claim_created)(void *userdata, const json_t *claim, const struct latency_waits *waits);
        /* The claim of that name is being created (writing true, before its POST), or its POST failed (false):
         * until claim_created, the launcher leaves its watch events alone. May be NULL. */
        void (*claim_writing)(void *userdata, const char *name, bool writing);
        /* A host's address from /cluster/status (for the agents). May be NULL. */
        void (*host_address)(void *userdata, const char *region, const char *host, const char *address);
        /* True while launches of nodepool on host are paused (launcher_backoff_active). May be NULL. */
        bool (*backoff_active)(void *userdata, const char *nodepool, const char *host);
        void *userdata;
        /* More clients, one per writer task: a round's claims are created by that many tasks (fiber.h, on the
         * calling thread) and one on kube at once (each claim in order: create, then status unless
         * placement_by_launcher, then claim_created). 0 = all on kube, one after another. */
        struct kube_client *const *writers;
        size_t n_writers;
        /* A launcher runs: it records the placement (nodeclaim_placement_status) with its first status write,
         * so the writers only create the claims (one request and one watch event less per claim). Without a
         * launcher, the writers write the status themselves. */
        bool placement_by_launcher;
};

struct provisioner_outcome {
        size_t candidates;     /* pending pods considered */
        size_t leaving;        /* and pods of Nodes marked for deletion, planned as pending (not counted below) */
        size_t on_nodes;       /* fit existing nodes (kube-scheduler will bind them) */
        size_t on_inflight;    /* fit claims launched earlier */
        size_t on_new;         /* fit claims created this round */
        size_t unplaced;       /* stay pending, with a reason */
        size_t claims_created;
        size_t failures;       /* claims, events or status updates that failed (the next round retries) */
        size_t hosts, hosts_from_agents;
        double simulate_seconds;
};

struct provisioner;

/* Pending pods the simulation fits on an existing Node that kube-scheduler keeps refusing (provisioner_refusals.c):
 * refusals is {"<pod key>": entry}, owned by the caller. Pure. */
struct provisioner_refusal {
        int64_t since_ms;  /* when the simulation first fit it on a Node */
        const char *node;  /* that Node (borrowed from refusals) */
};
/* The pods to keep off the existing Nodes this round ({"<key>": true}, NULL when none): those fit on a Node for
 * PROVISIONER_REFUSED_MS (now_ms wall clock; 0: none is due) and not planned on a claim since. */
json_t *provisioner_refusals_due(json_t *refusals, int64_t now_ms);
/* After a round: the pod `key` fit existing Node `node` (NULL: it did not), or was planned on a claim (on_claim).
 * True, with *ret, when this is the claim that answers a refusal (log it, once). */
bool provisioner_refusal_track(json_t *refusals, const char *key, const char *node, bool on_claim, int64_t now_ms,
                               struct provisioner_refusal *ret);
/* Drop the entries of pods not in pending ({"<key>": ...}). */
void provisioner_refusals_forget(json_t *refusals, const json_t *pending);

/* Clients (PVE per region, agent per host) are created lazily and belong to the calling thread. */
int provisioner_new(const struct provisioner_env *env, struct provisioner **ret);
void provisioner_free(struct provisioner *p);

/* One round: host room, simulate, create claims (with the finalizer, then their status), Nominated events
 * on placed pods, a Warning event with the reason on each pod left pending (only when its verdict changed
 * since the last round), NodePool status.resources. 0 or a negative errno (already logged). */
int provisioner_run(struct provisioner *p, const struct provisioner_snapshot *snap,
                    struct provisioner_outcome *ret);

/* NodePool status.resources from the snapshot alone (its Nodes and in-flight claims), patched where it changed: as
 * Karpenter's NodePool counter, after a claim or Node came or went, not only in provisioning rounds. 0, or a
 * negative errno (already logged). */
int provisioner_update_usage(struct provisioner *p, const struct provisioner_snapshot *snap);

/* Host room into r (built from snap by provisioner_round_new), as a round adds it: each region's online hosts, from
 * their agents or Proxmox, less what planned claims take; pools kept off hosts where their launches pause. 0 or
 * -ENOMEM. */
int provisioner_add_hosts(struct provisioner *p, struct provisioner_round *r, const struct provisioner_snapshot *snap);

/* The Proxmox client of a region (a config cluster's), made when first asked for; NULL when the region is not
 * configured or the client cannot be made. It belongs to the calling thread, as the provisioner does. */
struct pve_client *provisioner_pve(struct provisioner *p, const char *region);

/* Create res's planned claims (r with host room) as a round does (finalizer, launched through claim_created), each
 * with these annotations too (an object of strings; may be NULL). names[i]: the claim's name (free it), or NULL
 * when it could not be created (logged). Returns how many were created. */
size_t provisioner_create_replacements(struct provisioner *p, const struct provisioner_round *r,
                                       const struct sim_result *res, const json_t *annotations, char **names);
