/* launchstep: the one result of a launch step, and the decisions the steps take, apart from their I/O: what a
 * reconcile does with a claim, when to retry, wait or give up, what a step records in the claim's status. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "launcher_plan.h"
#include "nodeclaim.h"

#define LAUNCHSTEP_MAX_ATTEMPTS 8     /* consecutive failures of one step before the launch fails */
#define LAUNCHSTEP_RETRY_BASE_MS 1000 /* the pause after a step's first failure; it doubles per failure */
#define LAUNCHSTEP_RETRY_MAX_MS 30000 /* longest pause between two attempts of a step */
#define LAUNCHSTEP_POLL_MS 1000       /* polling interval of clone tasks, Nodes, bind */
#define LAUNCHSTEP_SETTLE_MAX_MS 10000 /* how long a Ready Node's ephemeral taints may delay the Registered record */
#define LAUNCHSTEP_BIND_RETRY_MS 500  /* a bind the agent refused because it does not see the VM config yet */

enum launchstep_kind {
        LAUNCHSTEP_DONE,  /* the step's work is done: the claim goes on to the step's next state */
        LAUNCHSTEP_MOVED, /* the step recorded another state itself (an earlier one to redo, or a later one at once) */
        LAUNCHSTEP_WAIT,  /* nothing to do now: call again after requeue_ms */
        LAUNCHSTEP_FAIL,  /* the launch failed for good: reason and message say why */
        LAUNCHSTEP_ERROR, /* a (probably transient) error err; message says what failed, when known */
};

/* What every step (and every helper a step calls) returns. */
struct launchstep_result {
        enum launchstep_kind kind;
        int64_t requeue_ms; /* WAIT: > 0 */
        const char *reason; /* FAIL: a CamelCase reason (static storage, or the claim's status) */
        int err;            /* ERROR: a negative errno */
        char message[NODECLAIM_MESSAGE_MAX];
};

struct launchstep_result launchstep_done(void);
struct launchstep_result launchstep_moved(void);
/* ms <= 0 waits 1 ms. */
struct launchstep_result launchstep_wait(int64_t ms);
struct launchstep_result launchstep_fail(const char *reason, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
struct launchstep_result launchstep_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* DONE: go on with what comes next in the same step. */
bool launchstep_ok(const struct launchstep_result *r);
/* An ERROR with this errno? */
bool launchstep_is_error(const struct launchstep_result *r, int err);
/* r unless it is DONE, else next: "do r, then answer next". */
struct launchstep_result launchstep_then(struct launchstep_result r, struct launchstep_result next);

/* ---- what a reconcile does with a claim ---- */

enum launchstep_todo {
        LAUNCHSTEP_TODO_FINALIZE, /* it is being deleted: tear down, then drop the finalizer */
        LAUNCHSTEP_TODO_NOTHING,  /* initialized: nothing left to do */
        LAUNCHSTEP_TODO_FAILED,   /* recorded Failed: finish the failure (the rest of it may not have happened) */
        LAUNCHSTEP_TODO_INVALID,  /* no place, or a status that does not decode: fail it */
        LAUNCHSTEP_TODO_STEPS,    /* run the steps from its state */
};
/* The last three come after the finalizer is ensured. */
enum launchstep_todo launchstep_todo(enum nodeclaim_step step, bool deleting, bool placed, bool status_valid);

/* Did nobody else move the launch between a and b (the same claim UID and, in the status, step and VMID), with b
 * not being deleted? Then a write that conflicted is tried again on b. */
bool launchstep_same_launch(const char *uid_a, const struct nodeclaim_status *a, const char *uid_b,
                            const struct nodeclaim_status *b, bool b_deleting);

/* ---- retries, waits and giving up ---- */

struct launchstep_retry {
        int64_t attempts;   /* with the one that failed now */
        bool give_up;       /* LAUNCHSTEP_MAX_ATTEMPTS reached */
        int64_t requeue_ms; /* else: the pause before the next attempt */
};
/* A step failed again after attempts earlier failures. */
struct launchstep_retry launchstep_retry(int64_t attempts);
/* Did Proxmox refuse the step's call for a missing privilege (its 403 "Permission check failed", or a task that
 * ended with it)? That does not pass by waiting: the launch fails at once, with reason
 * LAUNCHSTEP_REFUSED_REASON, instead of after LAUNCHSTEP_MAX_ATTEMPTS. */
#define LAUNCHSTEP_REFUSED_REASON "PermissionDenied"
bool launchstep_refused(const char *message);

/* The clone of vmid runs (or its VM's owner cannot be told yet): poll soon after it began (a linked clone on fast
 * storage takes well under a second), then every LAUNCHSTEP_POLL_MS; FAIL CloneTimeout once it has run for
 * timeout_ms (started_ms 0: unknown, the full timeout is left). */
struct launchstep_result launchstep_clone_wait(int64_t started_ms, int64_t now_ms, int64_t timeout_ms, uint32_t vmid);

/* How a clone task ended (its exit status). */
enum launchstep_clone_end {
        LAUNCHSTEP_CLONE_OK,     /* the VM is there */
        LAUNCHSTEP_CLONE_TAKEN,  /* another VM has the VMID: pick another */
        LAUNCHSTEP_CLONE_FAILED, /* an attempt that failed */
};
enum launchstep_clone_end launchstep_clone_end(const char *exitstatus);

/* Whose is the VM with this config, by the claim UID in its description and, once it is configured (tagged
 * pvescale), its SMBIOS UUID (launcher_smbios1: the claim's UID): 1 the claim's, 0 cannot tell yet (a clone in
 * progress: locked, no description), -1 someone else's (a VMID reused by hand included). */
int launchstep_vm_owner(const char *uid, const json_t *config);

/* Is a Node found by the claim's providerID its VM's? Yes when its kubelet reports the VM's SMBIOS UUID (the
 * claim's UID, launcher_smbios1) as status.nodeInfo.systemUUID, as Proxmox's cloud controller checks (a VMID reused
 * by hand gives another VM the same providerID), or reports none (taken by its providerID alone). */
bool launchstep_node_is_claims(const json_t *node, const char *uid);

/* Can the claim have an uploaded cloud-init ISO that its status does not name? A VM, no ISO recorded, not
 * Launched: the ISO is recorded with the write after the config (Launched, or an error's); a failure in between
 * leaves it unrecorded. */
bool launchstep_iso_unrecorded(const struct nodeclaim_status *st);

/* The ISO volume a configured VM has on its CD-ROM (ide2 "local:iso/x.iso,media=cdrom"), or "" when none. */
void launchstep_cdrom_volume(const char *ide2, char *volume, size_t len);

/* The agent refused a bind with bind_err (-EEXIST or -ENOENT) and the reservation is bound to bound_vmid (0: to
 * none). */
enum launchstep_bind {
        LAUNCHSTEP_BIND_DONE,  /* bound to this VM already */
        LAUNCHSTEP_BIND_TAKEN, /* bound to another VM: the reservation is lost */
        LAUNCHSTEP_BIND_RETRY, /* the agent does not see the VM config yet */
};
enum launchstep_bind launchstep_bind_check(int bind_err, int64_t bound_vmid, uint32_t vmid);

/* The claim was started at started_ms and has no Node yet: wait up to LAUNCHSTEP_POLL_MS, or FAIL
 * RegistrationTimeout once timeout_ms have passed. */
struct launchstep_result launchstep_registration_wait(int64_t started_ms, int64_t now_ms, int64_t timeout_ms,
                                                      const char *provider_id);

/* What a Node that was found (in state, Ready since ready_since_ms, -1 unknown) brings the claim to. */
enum launchstep_node {
        LAUNCHSTEP_NODE_WAIT,        /* Ready, and only ephemeral taints left for at most LAUNCHSTEP_SETTLE_MAX_MS */
        LAUNCHSTEP_NODE_REGISTERED,  /* record Registered and wait for Initialized */
        LAUNCHSTEP_NODE_INITIALIZED, /* record Registered and Initialized at once */
};
enum launchstep_node launchstep_node(enum launcher_node_state state, int64_t ready_since_ms, int64_t now_ms);

/* What to do with the claim's VM when tearing down (owner as launchstep_vm_owner, locked: a clone runs). */
enum launchstep_teardown {
        LAUNCHSTEP_TEARDOWN_KEEP,   /* not the claim's, or given up on: leave it */
        LAUNCHSTEP_TEARDOWN_WAIT,   /* a clone runs (a locked VM cannot be deleted) */
        LAUNCHSTEP_TEARDOWN_DELETE, /* stop and delete it */
};
enum launchstep_teardown launchstep_teardown_vm(int owner, bool locked, const struct nodeclaim_status *st,
                                                int64_t now_ms, int64_t clone_timeout_ms);

/* What the garbage collection found of a claim's VM at its recorded (region, vmid). */
enum launchstep_gc_vm {
        LAUNCHSTEP_GC_VM_UNKNOWN, /* its region was not listed (no client, or the list failed): nothing is known */
        LAUNCHSTEP_GC_VM_OURS,    /* listed, and the claim's */
        LAUNCHSTEP_GC_VM_GONE,    /* Proxmox lists no VM with that id */
        LAUNCHSTEP_GC_VM_OTHER,   /* a VM with that id whose description names another claim, or none */
};

/* Is a claim that joined (Initialized, not being deleted) garbage: its VM gone or not its own, or its Node (node_exists
 * false; a claim without a recorded Node has none to lose) gone? Then true with msg the Event's message ("its VM 105
 * in pve-a is gone"); false for any claim that has not joined, or is being deleted. */
bool launchstep_gc_claim(const struct nodeclaim_status *st, bool deleting, enum launchstep_gc_vm vm, bool node_exists,
                         char *msg, size_t len);

/* Does a claim at step on the same host hold room that a claim being reserved without an agent must leave (a
 * claim not begun yet counts when it was created earlier, then by name)? */
bool launchstep_holds_room(enum nodeclaim_step step, const char *created, const char *name, const char *my_created,
                           const char *my_name);

/* Is step never written on its own (its changes go with the next write)? Configured is not: the start follows at
 * once, and Launched (or Started) records both. */
bool launchstep_deferred(enum nodeclaim_step step);

/* ---- what steps record (changes to the status; the write is the launcher's) ---- */

/* step recorded as done: attempts and lastError cleared. */
void launchstep_record(struct nodeclaim_status *st, enum nodeclaim_step step);
/* The VMID picked (with its providerID; cloneStartedAt the first time). */
void launchstep_vmid_picked(struct nodeclaim_status *st, const char *region, uint32_t vmid, int64_t now_ms);
/* The VMID is someone else's: back to Reserved without it. */
void launchstep_vmid_dropped(struct nodeclaim_status *st);
/* A failed attempt of the current step (attempts as launchstep_retry counted them). */
void launchstep_attempt_failed(struct nodeclaim_status *st, int64_t attempts, const char *message);
/* Reserved on the host's agent: its answer ({id, numa: [{node, guest_cpus, memory_bytes}], cpus}) as
 * reservationID and placement. 0, or -EINVAL for a malformed answer. */
int launchstep_reserved_by_agent(struct nodeclaim_status *st, const json_t *reservation);
/* Reserved by PVE accounting, without an agent (no reservationID). */
int launchstep_reserved_by_pve(struct nodeclaim_status *st);
/* Started and bound: the Launched and Registered conditions. */
int launchstep_launched(struct nodeclaim_status *st);
/* The Node registered (node_name) and not initialized yet. */
int launchstep_registered(struct nodeclaim_status *st, const char *node_name);
/* The Node initialized: join token and ISO gone (registered by the same write when node_name is set). */
int launchstep_initialized(struct nodeclaim_status *st, const char *node_name);
/* The reason and message of a failure: why's (a FAIL, or the error that made the launch give up), else what the
 * status recorded (a failure not finished before), else LaunchFailed. why may be NULL. */
struct launchstep_failure {
        char reason[64];
        char message[NODECLAIM_MESSAGE_MAX];
};
struct launchstep_failure launchstep_failure(const struct nodeclaim_status *st, const struct launchstep_result *why);
/* The Failed record (the Launched condition False, or Registered once launched). */
int launchstep_failed(struct nodeclaim_status *st, const char *reason, const char *message);

/* ---- termination of a claim being deleted: the decisions (the drain's I/O is the launcher's) ---- */

#define LAUNCHSTEP_TAINT_DISRUPTED "pvescale.io/disrupted"            /* ours, NoSchedule */
#define LAUNCHSTEP_TAINT_KARPENTER_DISRUPTED "karpenter.sh/disrupted" /* Karpenter's: read as ours */
#define LAUNCHSTEP_DRAIN_MIN_MS 1000  /* the first pause of a drain that waits (pods leaving, a PDB said 429) */
#define LAUNCHSTEP_DRAIN_MAX_MS 10000 /* the longest pause */

#define LAUNCHSTEP_TAINT_UNREGISTERED "pvescale.io/unregistered"            /* ours (cloudinit.h), NoExecute */
#define LAUNCHSTEP_TAINT_KARPENTER_UNREGISTERED "karpenter.sh/unregistered" /* Karpenter's, NoExecute */

/* Is this taint one that registration takes off the Node: ours (any effect), or Karpenter's
 * karpenter.sh/unregistered:NoExecute, which a NodePool copied from Karpenter may list as a startup taint and which
 * Karpenter's registration removes as its own (after adding the claim's taints and startup taints)? */
bool launchstep_registration_taint(const json_t *taint);

/* Does a Node's spec.taints carry the disrupted taint (pvescale.io/disrupted or karpenter.sh/disrupted) with effect
 * NoSchedule? */
bool launchstep_node_disrupted(const json_t *taints);
/* Add the disrupted taint (NoSchedule) to a Node object: 0 when added, 1 when it is there already (ours or
 * Karpenter's), -ENOMEM. */
int launchstep_node_taint(json_t *node);
/* Take our disrupted taint off a Node object: 0 when removed, 1 when it had none. */
int launchstep_node_untaint(json_t *node);

/* What the drain does with a pod bound to the Node. */
enum launchstep_drain {
        LAUNCHSTEP_DRAIN_STAY,  /* stays, and does not hold the drain: a DaemonSet's pod, a mirror pod, one that
                                 * tolerates the disrupted taint, one that has finished (Succeeded, Failed), one
                                 * stuck terminating (Karpenter's IsStuckTerminating: a minute past its
                                 * deletionTimestamp, which is the delete's time plus its grace period) */
        LAUNCHSTEP_DRAIN_EVICT, /* evict it through the Eviction API */
        LAUNCHSTEP_DRAIN_GOING, /* being deleted already: wait for it to go */
        LAUNCHSTEP_DRAIN_HOLD,  /* annotated do-not-disrupt (launchstep_pod_do_not_disrupt): not evicted, but it
                                 * holds the drain until it finishes or goes, or the grace period is over (then
                                 * deleted), as Karpenter's IsEvictable and IsDrainable */
};
#define LAUNCHSTEP_ANNOTATION_DO_NOT_DISRUPT "pvescale.io/do-not-disrupt"
#define LAUNCHSTEP_ANNOTATION_KARPENTER_DO_NOT_DISRUPT "karpenter.sh/do-not-disrupt"
#define LAUNCHSTEP_STUCK_TERMINATING_MS 60000
enum launchstep_drain launchstep_pod_drain(const json_t *pod, int64_t now_ms);
/* Whether a pod's pvescale.io/ or karpenter.sh/do-not-disrupt annotation protects it at now_ms: "true", or a
 * duration ("4h", "90m") that has not passed since the pod started (status.startTime, else its creation; neither
 * known: protected), as Karpenter reads it. Other values protect nothing. */
bool launchstep_pod_do_not_disrupt(const json_t *pod, int64_t now_ms);
/* The pod's first do-not-disrupt value that is neither "true" nor a positive duration (Karpenter ignores it, with
 * an InvalidDoNotDisruptAnnotation Event), and the annotation's key in *ret_key; NULL when there is none. */
const char *launchstep_pod_do_not_disrupt_invalid(const json_t *pod, const char **ret_key);

/* The claim's termination grace period in ms: its spec.terminationGracePeriod, else its NodePool template's
 * (pool may be NULL); -1 when neither has one (wait for the pods forever). 0, or -EINVAL (a malformed duration,
 * err says which). */
int launchstep_grace_period(const json_t *claim, const json_t *pool, int64_t *ret_ms, char *err, size_t errlen);

/* Has the grace period (grace_ms, -1 none) passed since the termination began at started_ms? Then the pods left
 * are deleted (Karpenter's rule). */
bool launchstep_grace_over(int64_t started_ms, int64_t grace_ms, int64_t now_ms);

/* A deleted claim's termination ends its grace period at this time (RFC 3339), whatever its spec or NodePool says:
 * Karpenter's karpenter.sh/nodeclaim-termination-timestamp, which node repair sets to the time it deletes the
 * claim, so that the pods of a node that no kubelet tends are deleted at once instead of evicted and waited for. */
#define LAUNCHSTEP_ANNOTATION_TERMINATION_TIMESTAMP "pvescale.io/nodeclaim-termination-timestamp"

/* Has the claim's termination timestamp (the annotation; a malformed one is ignored) come by now_ms? */
bool launchstep_termination_due(const json_t *claim, int64_t now_ms);

/* The pause before the drain looks again: a tenth of the time it has run, from LAUNCHSTEP_DRAIN_MIN_MS to
 * LAUNCHSTEP_DRAIN_MAX_MS (backing off without writing a count anywhere). */
int64_t launchstep_drain_requeue(int64_t started_ms, int64_t now_ms);

/* term done: the step recorded, with its conditions (Drained, InstanceTerminating); Tainted also records
 * terminationStartedAt (kept when set). 0 or -ENOSPC. */
int launchstep_term_record(struct nodeclaim_status *st, enum nodeclaim_term term, int64_t now_ms);
