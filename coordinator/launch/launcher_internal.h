/* launcher_internal: what the launcher's source files share (the launcher object, one reconcile's context, and
 * the functions each file offers the files above it), all named launcher__*: not the public API of launcher.h.
 *
 * The files, lower to higher (a file calls only files below it):
 *   launcher_cache.c                  facts every launch on a host asks for, kept a minute
 *   launcher_state.c                  the launcher object: back-off, VMIDs being picked, its last status writes
 *   launcher_delete.c                 PVE task waits, VM, ISO and join token deletes (steps, teardown and GC)
 *   launcher_ctx.c                    one reconcile: the claim, its typed status and its writes; what steps need
 *   launcher_boot.c                   cloud-init, firewall, the start and bind actions
 *   launcher_steps.c                  the reserve, VMID and clone actions (configure uses launcher_boot.c)
 *   launcher_join.c                   the register and initialize actions
 *   launcher_drain.c                  a deleted claim's Node: the disrupted taint, the evictions, its delete
 *   launcher_teardown.c               failed launches, deleted claims (termination in order), the finalizer
 *   launcher_gc.c                     periodic clean-up of what no claim owns
 *   launcher.c                        the table of steps and the reconcile that runs it
 * Below them all, pure: launchstep (results and decisions), nodeclaim (the typed status), launcher_plan, nominate
 * (which pods a Node is nominated for). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "launcher.h"
#include "launcher_plan.h"
#include "kube_types.h"
#include "launchstep.h"
#include "nodeclaim.h"
#include "reghealth.h"
#include "shapes.h"
#include "tokens.h"

#define LAUNCHER__TASK_TIMEOUT_MS (2L * 60 * 1000) /* default: config, resize, upload, start, stop, delete tasks */
#define LAUNCHER__POLL_SOON_MS 10   /* first poll of a task the VM's start waits for (resize, upload) */
#define LAUNCHER__CLONE_INLINE_MS 400 /* how long a reconcile that began a clone polls it before recording Cloning */
#define LAUNCHER__POLL_LATER_MS 100 /* first poll of other tasks (eject, deletes): nothing hurries */
#define LAUNCHER__ISO_DELETE_DELAY_S 5 /* how long Proxmox may hold an ISO delete to answer with its outcome */
#define LAUNCHER__POLL_START_MS 1000 /* first poll, and interval, of a start: a start takes seconds (QEMU, then the
                                     * guest), and nothing waits on its answer; the Proxmox UI polls as often */
#define LAUNCHER__TASK_POLL_MS 500  /* longest interval between polls of the other tasks */
#define LAUNCHER__RESERVATION_GRACE_MS (60L * 1000) /* an ownerless reservation or token younger than this is kept */
#define LAUNCHER__COMPONENT "pvescale-launcher"
#define LAUNCHER__VOLUME_MAX 200
#define LAUNCHER__LABEL_NODEPOOL "pvescale.io/nodepool"
#define LAUNCHER__LABEL_NODECLASS "pvescale.io/nodeclass"
#define LAUNCHER__LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"
/* Karpenter's karpenter.sh/initialized: set on the Node as its claim is Initialized */
#define LAUNCHER__LABEL_INITIALIZED "pvescale.io/initialized"
#define LAUNCHER__CACHE_TTL_MS (60L * 1000) /* template VMID, ISO storage, join data */
#define LAUNCHER__TEMPLATE_SETS 8 /* parsed template sets kept: one per set of template texts in use */
#define LAUNCHER__MAX_RESTARTS 4  /* passes of one reconcile, and tries of one status write, on conflicts */

struct launcher__backoff_entry {
        char *nodepool, *host;
        unsigned failures;
        int64_t until_ms;
};

/* NodeRegistrationHealthy: one pool's last launch results (launcher_health.c). */
struct launcher__health_entry {
        char *nodepool;
        struct reghealth h;
};

struct launcher__seen {
        char region[64];
        uint32_t vmid;
        int64_t first_ms;
};

struct launcher__cache_entry {
        char *key, *value;
        int64_t at_ms;
};

struct launcher__cache {
        pthread_mutex_t mu;
        struct launcher__cache_entry *items;
        size_t n, cap;
};

struct cloudinit_set;

/* A NodeClass's cloud-init templates, parsed once: key holds every file's text (length-prefixed, "-" for a file
 * left to its default), so that a changed template is parsed anew. */
struct launcher__templates {
        char *key;
        struct cloudinit_set *set;
};

struct launcher {
        struct launcher_env env;
        struct launcher_options o;
        pthread_mutex_t mu; /* backoffs, vmids, seen, written */
        struct launcher__backoff_entry *backoffs;
        size_t n_backoffs, cap_backoffs;
        uint32_t *vmids; /* VMIDs picked by a launch of this process whose clone has not been sent yet */
        size_t n_vmids, cap_vmids;
        struct launcher__health_entry *health; /* NodeRegistrationHealthy: each pool's last launch results (mu) */
        size_t n_health, cap_health;
        struct launcher__seen *seen; /* GC: when an orphan without a creation time was first seen */
        size_t n_seen, cap_seen;
        pthread_mutex_t iso_mu; /* guards templates (the parsed cloud-init template sets) */
        struct launcher__templates templates[LAUNCHER__TEMPLATE_SETS]; /* parsed cloud-init templates, by text */
        size_t next_templates;                                         /* the entry a new set replaces */
        struct launcher__cache cache;
        json_t *written; /* claim name → this process's last status write and the versions of its last writes (mu) */
        json_t *failing; /* claim name → {"message": its reconciles' last error, "n": how many in a row} (mu) */
        json_t *held_addresses; /* claim UID → status.ipconfig chosen by a launch and not yet recorded (mu) */
        json_t *downloads; /* managed templates: "<region>/<host>/<volume>" → UPID of its download (GC pass only) */
};

/* The claim's status three times over: what the API server has, what this reconcile made of it, and where that
 * goes back to when a step does not complete. */
struct launcher__statuses {
        struct nodeclaim_status base; /* the claim's status, decoded */
        struct nodeclaim_status st;   /* base with the changes this reconcile has not written yet */
        struct nodeclaim_status kept; /* base with the changes of a deferred step (which the next write carries) */
};

/* One reconcile of one claim. */
struct launcher__ctx {
        struct launcher *l;
        struct kube_client *kube;
        json_t *claim; /* our copy of the claim; replaced by what the API server returns after every write */
        struct launcher__statuses *s;
        struct nodeclaim_status *st;  /* &s->st: what the steps read and change */
        char status_error[256];       /* why the claim's status does not decode; "" when it does */
        enum nodeclaim_step deferred; /* a step done beyond st's launch_step, without a write of its own, or NONE */
        char name[LAUNCHER_NAME_MAX], uid[LAUNCHER_UID_MAX];
        char region[128], host[128], nodepool[LAUNCHER_NAME_MAX];
        int64_t now;
        struct pve_client *pve;       /* NULL when the region is unknown */
        struct agents_client *agent;  /* NULL without agents */
        json_t *nodeclass, *pool;     /* fetched when a step needs them */
        struct shape shape;
        bool have_shape;
        uint32_t picked_vmid;         /* in l->vmids until the reconcile ends */
        bool held_addresses;          /* st->ipconfig is in l->held_addresses until the reconcile ends */
        const json_t *vm_config;      /* the clone's config while it is configured (its MACs for .Network) */
        bool vm_fresh;                /* this reconcile configured the VM, which was never configured: stopped */
        uint32_t bound_vmid;          /* this reconcile bound the claim's reservation to this VM */
        char image_id[160];           /* "host/template VMID" of a clone begun by this reconcile (not yet recorded) */
        char image_digest[72];        /* and the template's config digest when it was cloned */
        bool timed;                   /* start latencies are being accounted (and not yet reported by this run) */
        struct latency_waits waits0;  /* the thread's waits when this reconcile began (when timed) */
};

/* A step's action: what is done from the state the claim is in. */
typedef struct launchstep_result (*launcher__action)(struct launcher__ctx *c);

/* ---- launcher_cache.c: strings kept for LAUNCHER__CACHE_TTL_MS (a stale answer is noticed and dropped) ---- */
void launcher__cache_init(struct launcher__cache *c);
void launcher__cache_done(struct launcher__cache *c);
/* A copy of the value (malloc'd), or NULL when absent or older than the TTL. */
char *launcher__cache_get(struct launcher__cache *c, const char *key, int64_t now_ms);
void launcher__cache_put(struct launcher__cache *c, const char *key, const char *value, int64_t now_ms);
void launcher__cache_drop(struct launcher__cache *c, const char *key);

/* ---- launcher_state.c: the launcher object (launcher_new, launcher_free, launcher_wrote and
 * launcher_backoff_active are there too) ---- */
int64_t launcher__now(const struct launcher *l);
/* A launch of c's pool registered (success) or failed (f): NodeRegistrationHealthy on the pool (launcher_health.c). */
void launcher__health_note(struct launcher__ctx *c, bool success, const struct launchstep_failure *f);
/* A failed launch in nodeclaims_disrupted_total (reason: f's, snake_cased; launcher_health.c). */
void launcher__count_failure(struct launcher__ctx *c, const struct launchstep_failure *f);
void launcher__backoff_note(struct launcher *l, const char *nodepool, const char *host, int64_t now_ms);
void launcher__backoff_clear(struct launcher *l, const char *nodepool, const char *host);
/* Hold a VMID for a launch of this process until its clone is sent: 0, -EEXIST (another launch holds it). */
int launcher__vmid_hold(struct launcher *l, uint32_t vmid);
void launcher__vmid_release(struct launcher *l, uint32_t vmid);
/* Remember stored as this process's last write of the claim; NULL forgets the claim. */
void launcher__note_written(struct launcher *l, const char *name, const json_t *stored);
/* Is rv the version of one of this process's last writes of the claim? Then *ret_last (if asked) is the last one. */
bool launcher__wrote(struct launcher *l, const char *name, const char *rv, json_t **ret_last);
/* Has this process written the claim (and not forgotten it)? */
bool launcher__wrote_any(struct launcher *l, const char *name);

/* ---- launcher_templates.c ---- */
/* Managed templates (ProxmoxTemplate): build what each host lacks, retire older generations, remove unused ones,
 * write each ProxmoxTemplate's status (on the garbage collection's pass). 0, or a negative errno when the objects
 * could not be listed (then nothing was done). */
int launcher__templates_pass(struct launcher *l, struct kube_client *kube);

/* ---- launcher_delete.c ---- */
/* Wait for a PVE task (none when upid is NULL), first polled first_ms after the call, at most timeout_ms; the
 * error text is pve_client_error's. */
int launcher__pve_task_wait(struct pve_client *pve, const char *upid, long first_ms, int64_t timeout_ms);
/* Stop (if running; the stop task awaited), then delete a VM with purge and destroy-unreferenced-disks (the
 * destroy task awaited, its exit status checked), waiting at most task_timeout_ms for each task. 0 only when its
 * config is gone afterwards (also when it was gone already); else a negative errno with err naming the VMID, the
 * host and Proxmox's error (-EBUSY: the destroy task ended well and the config is still there). */
int launcher__delete_vm(struct pve_client *pve, const char *host, uint32_t vmid, int64_t task_timeout_ms, char *err,
                        size_t errlen);
/* Delete an ISO volume ("storage:iso/file"); gone counts as done. */
int launcher__delete_iso(struct pve_client *pve, const char *host, const char *volume, int64_t task_timeout_ms,
                         char *err, size_t errlen);
/* Delete the join token Secret; -ENOENT counts as done. */
int launcher__delete_token(struct kube_client *kube, const char *token_id);

/* ---- launcher_ipam.c: static addresses (spec.ipam) ---- */
/* Choose the claim's addresses into st->ipconfig, unless it has them or its class has no pools (then nothing);
 * they are held against other launches of this process until the reconcile's passes end (launcher_reconcile calls
 * launcher__addresses_unhold).
 * FAIL IPPoolExhausted (naming the pool) or InvalidNodeClass; ERROR when what is in use cannot be read. */
struct launchstep_result launcher__pick_addresses(struct launcher__ctx *c);
void launcher__addresses_unhold(struct launcher__ctx *c);
/* ipconfigN, nameserver and searchdomain of the VM config, when the claim has addresses. */
struct launchstep_result launcher__addresses_params(struct launcher__ctx *c, struct pve_params *p);
/* The .Network data of cloud-init templates (ipam_network_data); NULL on ENOMEM. */
json_t *launcher__network_data(struct launcher__ctx *c, const json_t *vm_config);

/* ---- launcher_ctx.c ---- */
/* Make claim (a new reference, stolen) the context's claim and decode its status (status_error says what does
 * not decode); the changes not written yet are dropped. 0 or -ENOMEM. */
int launcher__ctx_take(struct launcher__ctx *c, json_t *claim);
/* Release what one pass of a reconcile fetched (the NodeClass, the NodePool, the shape) and drop the changes it
 * did not write. */
void launcher__ctx_drop(struct launcher__ctx *c);
/* Release everything the context holds (the claim, its status, a picked VMID). */
void launcher__ctx_done(struct launcher__ctx *c);
/* The state the claim is in: the deferred step, else the recorded one. */
enum nodeclaim_step launcher__ctx_step(const struct launcher__ctx *c);
/* Write what st changed (with a deferred step's changes). A conflict is tried again on the fresh claim while
 * nobody else moved the launch; otherwise ERROR -EAGAIN (reconcile again from the fresh claim). A write that
 * fails drops its changes (not the deferred step's). */
struct launchstep_result launcher__commit(struct launcher__ctx *c);
/* Record step as done (attempts and lastError cleared) with st's changes: one write, and the on_step hooks. */
struct launchstep_result launcher__record(struct launcher__ctx *c, enum nodeclaim_step step);
/* Step is done without a write of its own: st's changes go with the next write (of a step, or an error). */
void launcher__defer(struct launcher__ctx *c, enum nodeclaim_step step);
/* Drop st's changes since the last write or deferred step (a step that did not complete). */
void launcher__rollback(struct launcher__ctx *c);
struct launchstep_result launcher__need_nodeclass(struct launcher__ctx *c);
struct launchstep_result launcher__need_pool(struct launcher__ctx *c);
struct launchstep_result launcher__need_shape(struct launcher__ctx *c);
struct launchstep_result launcher__need_pve(struct launcher__ctx *c);
/* Take a VMID for this launch: /cluster/nextid, skipping ids other launches of this process hold. */
struct launchstep_result launcher__pick_vmid(struct launcher__ctx *c, uint32_t *ret_vmid);
void launcher__unpick_vmid(struct launcher__ctx *c);
/* The labels and taints of the claim's Node (the kubelet accepts only some kubernetes.io labels at registration;
 * the rest are set on the Node after it); with_startup adds the startup taints. New references, NULL on ENOMEM. */
json_t *launcher__wanted_labels(struct launcher__ctx *c, bool kubelet_only);
json_t *launcher__wanted_taints(struct launcher__ctx *c, bool with_startup);
/* spec.startupTaints of the claim, else of its NodePool template (borrowed). */
const json_t *launcher__startup_taints(struct launcher__ctx *c);

/* ---- launcher_boot.c ---- */
/* With metadataOptions.type cdrom: the join token (its id in token_id) and the uploaded cloud-init ISO (its
 * volume in volume, for the config to attach); otherwise both empty. */
struct launchstep_result launcher__cloudinit_deliver(struct launcher__ctx *c, char volume[LAUNCHER__VOLUME_MAX],
                                                     char token_id[TOKENS_ID_LEN + 1]);
/* Does the NodeClass deliver cloud-init on a CD-ROM (metadataOptions.type "cdrom"), with a join token? */
bool launcher__joins_by_cdrom(const struct launcher__ctx *c);
/* The volume of the claim's cloud-init ISO, uploaded or not: "<ISO storage>:iso/pvescale-<claim>-<uid8>.iso". */
struct launchstep_result launcher__iso_volume(struct launcher__ctx *c, char volume[LAUNCHER__VOLUME_MAX]);
/* The NodeClass security groups on the VM (firewall enabled, one group rule per interface). */
struct launchstep_result launcher__firewall_apply(struct launcher__ctx *c, uint32_t vmid);
/* The VM's firewall has a rule for each security group (groups: the class's securityGroups), a rule already there
 * not added twice; the firewall is enabled when always_enable or a rule was added (*ret_added, may be NULL). 0, or
 * a negative errno with the reason in err. */
/* launcher_sync.c: the claim's own VM (node, vmid, its config and the pool /cluster/resources shows, NULL for none)
 * brought in line with its class's tags, resourcePool and securityGroups, in place. 0, or a negative errno
 * (logged). */
int launcher__sync_vm(struct pve_client *pve, const char *node, uint32_t vmid, const json_t *claim,
                      const json_t *nodeclass, const json_t *config, const char *pool_now);
int launcher__firewall_groups(struct pve_client *pve, const char *host, uint32_t vmid, const json_t *groups,
                              bool always_enable, unsigned *ret_added, char *err, size_t errlen);
/* Is the VM running (GET status/current)? */
struct launchstep_result launcher__vm_running(struct launcher__ctx *c, uint32_t vmid, bool *ret_running);
/* A PVE task of the claim's launch, as launcher__pve_task_wait ("<what>: <PVE error>" on failure). */
struct launchstep_result launcher__task_wait(struct launcher__ctx *c, const char *what, const char *upid,
                                             long first_ms);
/* Bind the claim's agent reservation to its VM (nothing without one): DONE, WAIT (the agent does not see the VM
 * yet), FAIL ReservationLost or ERROR. */
struct launchstep_result launcher__bind_reservation(struct launcher__ctx *c);
struct launchstep_result launcher__start(struct launcher__ctx *c); /* from Configured */
struct launchstep_result launcher__bind(struct launcher__ctx *c);  /* from Started */

/* ---- launcher_steps.c ---- */
struct launchstep_result launcher__reserve(struct launcher__ctx *c);        /* from not begun */
struct launchstep_result launcher__allocate_vmid(struct launcher__ctx *c);  /* from Reserved */
struct launchstep_result launcher__clone(struct launcher__ctx *c);          /* from VMIDAllocated */
struct launchstep_result launcher__await_clone(struct launcher__ctx *c);    /* from Cloning */

/* ---- launcher_join.c ---- */
struct launchstep_result launcher__register(struct launcher__ctx *c);   /* from Launched */
struct launchstep_result launcher__initialize(struct launcher__ctx *c); /* from Registered */

/* ---- launcher_drain.c: a claim's Node during its termination (no Node recorded: nothing to do, DONE) ---- */
/* The index of LAUNCHER_FINALIZER in an object's metadata.finalizers, or -1. */
int launcher__finalizer_index(const json_t *obj);
/* Add LAUNCHER_FINALIZER (for kube_modify): 0, KUBE_MODIFY_SKIP when it is there or the object is being deleted,
 * -ENOMEM. */
int launcher__finalizer_add(json_t *obj);
/* Taint it pvescale.io/disrupted:NoSchedule (karpenter.sh/disrupted counts as there already), and put
 * LAUNCHER_FINALIZER on it: deleted, it stays (with its deletionTimestamp) until the VM is gone, so that its kubelet
 * does not register it again meanwhile. */
struct launchstep_result launcher__taint_node(struct launcher__ctx *c);
/* Evict its pods (launchstep_pod_drain), delete those left once the grace period is over: DONE when only pods
 * that stay are left, else WAIT (pods leaving, or a PodDisruptionBudget that refused an eviction). */
struct launchstep_result launcher__drain_node(struct launcher__ctx *c);
/* Delete the Node object (gone counts as done). */
struct launchstep_result launcher__delete_node(struct launcher__ctx *c);
/* Drop LAUNCHER_FINALIZER from it, once the VM is gone. */
struct launchstep_result launcher__release_node(struct launcher__ctx *c);

/* ---- launcher_teardown.c ---- */
/* The launch failed (why: a FAIL or the error it gave up on; NULL to finish a recorded failure): record it, emit
 * an Event, back off the (node pool, host), delete the claim and tear down. */
struct launchstep_result launcher__fail(struct launcher__ctx *c, const struct launchstep_result *why);
/* The claim is being deleted: tear everything down, then drop the finalizer. */
struct launchstep_result launcher__finalize(struct launcher__ctx *c);
struct launchstep_result launcher__ensure_finalizer(struct launcher__ctx *c);
