/* launcher_internal: what the launcher's source files share (the launcher object, one reconcile's context, the
 * status fields and steps, and the helpers each file exports to the others). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "launcher.h"
#include "launcher_plan.h"
#include "shapes.h"
#include "tokens.h"

/* Steps, recorded in status.launchStep once done (the next one is what a reconcile does next). */
#define STEP_NONE ""
#define STEP_RESERVED "Reserved"
#define STEP_VMID "VMIDAllocated"
#define STEP_CLONING "Cloning"
#define STEP_CONFIGURED "Configured" /* cloned, boot disk resized, cloud-init uploaded, config and firewall set */
#define STEP_STARTED "Started"
#define STEP_LAUNCHED "Launched"
#define STEP_REGISTERED "Registered"
#define STEP_INITIALIZED "Initialized"
#define STEP_FAILED "Failed"

/* Step results besides 0 (done, go on) and negative errnos. */
#define LSTEP_WAIT 1 /* nothing to do now; call again after c->requeue_ms */
#define LSTEP_FAIL 2 /* the launch failed for good: c->fail_reason / c->err say why */

#define LAUNCHER_MAX_ATTEMPTS 8      /* consecutive failures of one step before the launch fails */
#define LAUNCHER_RETRY_MAX_MS 30000  /* longest pause between two attempts of a step */
#define LAUNCHER_POLL_MS 1000        /* polling interval of clone tasks, Nodes, bind */
#define LAUNCHER_SETTLE_MAX_MS 10000 /* how long a Ready Node's ephemeral taints may delay the Registered record */
#define LAUNCHER_TASK_TIMEOUT_MS (2L * 60 * 1000) /* config, resize, upload, start, stop, delete tasks */
#define LAUNCHER_POLL_SOON_MS 10   /* first poll of a task the VM's start waits for (resize, upload) */
#define LAUNCHER_CLONE_INLINE_MS 400 /* how long a reconcile that began a clone polls it before recording Cloning */
#define LAUNCHER_POLL_LATER_MS 100 /* first poll of other tasks (eject, deletes): nothing hurries */
#define LAUNCHER_ISO_DELETE_DELAY_S 5 /* how long Proxmox may hold an ISO delete to answer with its outcome */
#define LAUNCHER_POLL_START_MS 1000 /* first poll, and interval, of a start: a start takes seconds (QEMU, then the
                                    * guest), and nothing waits on its answer; the Proxmox UI polls as often */
#define LAUNCHER_TASK_POLL_MS 500  /* longest interval between polls of the other tasks */
#define LAUNCHER_RESERVATION_GRACE_MS (60L * 1000) /* an ownerless reservation or token younger than this is kept */
#define LAUNCHER_COMPONENT "pvescale-launcher"
#define LAUNCHER_VOLUME_MAX 200
#define LAUNCHER_LABEL_NODEPOOL "pvescale.io/nodepool"
#define LAUNCHER_LABEL_NODECLASS "pvescale.io/nodeclass"
#define LAUNCHER_LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"

struct launcher_backoff_entry {
        char *nodepool, *host;
        unsigned failures;
        int64_t until_ms;
};

struct launcher_seen {
        char region[64];
        uint32_t vmid;
        int64_t first_ms;
};

#define LAUNCHER_CACHE_TTL_MS (60L * 1000) /* template VMID, ISO storage, join data */

struct launcher_cache_entry {
        char *key, *value;
        int64_t at_ms;
};

struct launcher_cache {
        pthread_mutex_t mu;
        struct launcher_cache_entry *items;
        size_t n, cap;
};

#define LAUNCHER_TEMPLATE_SETS 8 /* parsed template sets kept: one per set of template texts in use */

struct cloudinit_set;

/* A NodeClass's cloud-init templates, parsed once: key holds every file's text (length-prefixed, "-" for a file
 * left to its default), so that a changed template is parsed anew. */
struct launcher_templates {
        char *key;
        struct cloudinit_set *set;
};

struct launcher {
        struct launcher_env env;
        struct launcher_options o;
        pthread_mutex_t mu; /* backoffs, vmids, seen */
        struct launcher_backoff_entry *backoffs;
        size_t n_backoffs, cap_backoffs;
        uint32_t *vmids; /* VMIDs picked by a launch of this process whose clone has not been sent yet */
        size_t n_vmids, cap_vmids;
        struct launcher_seen *seen; /* GC: when an orphan without a creation time was first seen */
        size_t n_seen, cap_seen;
        pthread_mutex_t iso_mu; /* guards templates (the parsed cloud-init template sets) */
        struct launcher_templates templates[LAUNCHER_TEMPLATE_SETS]; /* parsed cloud-init templates, by their text */
        size_t next_templates;                                       /* the entry a new set replaces */
        struct launcher_cache cache;
        json_t *written; /* claim name → this process's last status write and the versions of its last writes (mu) */
};

/* One reconcile of one claim. */
struct lctx {
        struct launcher *l;
        struct kube_client *kube;
        json_t *claim; /* our copy of the claim; replaced by what the API server returns after every write */
        char name[LAUNCHER_NAME_MAX], uid[LAUNCHER_UID_MAX];
        char region[128], host[128], nodepool[LAUNCHER_NAME_MAX];
        int64_t now;
        struct pve_client *pve;       /* NULL when the region is unknown */
        struct agents_client *agent;  /* NULL without agents */
        json_t *nodeclass, *pool;     /* fetched when a step needs them */
        struct shape shape;
        bool have_shape;
        uint32_t picked_vmid;         /* in l->vmids until the reconcile ends */
        bool vm_fresh;                /* this reconcile configured the VM, which was never configured: stopped */
        uint32_t bound_vmid;          /* this reconcile bound the claim's reservation to this VM */
        const char *step;             /* the step this reconcile has done beyond status.launchStep, or NULL */
        json_t *pending;              /* status changes of that step, which the next status write carries */
        char image_id[160];           /* "host/template VMID" of a clone begun by this reconcile (not yet recorded) */
        bool timed;                   /* start latencies are being accounted (and not yet reported by this run) */
        struct latency_waits waits0;  /* the thread's waits when this reconcile began (when timed) */
        int64_t requeue_ms;
        char fail_reason[64];
        char err[512];
};

/* ---- launcher.c ---- */
const json_t *launcher_status(const struct lctx *c);
/* The last step done: c->step, else status.launchStep. */
const char *launcher_step_done(const struct lctx *c);
/* A step done without a status write of its own: its changes (stolen) go with the next write. */
void launcher_step_unrecorded(struct lctx *c, const char *step, json_t *changes);
const char *launcher_status_str(const struct lctx *c, const char *key);
int64_t launcher_status_int(const struct lctx *c, const char *key);
int64_t launcher_status_time(const struct lctx *c, const char *key);
/* The claim is gone: drop what the launcher remembers of its writes. */
void launcher_forget_written(struct launcher *l, const char *name);
/* Write status changes (a new object, stolen; JSON null removes a key; a "conditions" array of
 * {type, status, reason, message} is merged with launcher_condition_set). A conflict is retried on the fresh
 * object while nobody else moved the launch; otherwise -EAGAIN (reconcile again from the fresh claim). */
int launcher_commit(struct lctx *c, json_t *changes);
/* Record step as done together with changes (stolen, may be NULL), clearing attempts and lastError. */
int launcher_set_step(struct lctx *c, const char *step, json_t *changes);
/* c->err = the message; returns r. */
int launcher_errf(struct lctx *c, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* LSTEP_FAIL with reason and c->err. */
int launcher_failf(struct lctx *c, const char *reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int launcher_wait(struct lctx *c, int64_t ms);
int launcher_need_nodeclass(struct lctx *c);
int launcher_need_pool(struct lctx *c);
int launcher_need_shape(struct lctx *c);
int launcher_need_pve(struct lctx *c);
int64_t launcher_now(const struct launcher *l);
void launcher_backoff_note(struct launcher *l, const char *nodepool, const char *host, int64_t now_ms);
void launcher_backoff_clear(struct launcher *l, const char *nodepool, const char *host);
/* Take a VMID for this launch: /cluster/nextid, skipping ids other launches of this process hold. */
int launcher_pick_vmid(struct lctx *c, uint32_t *ret_vmid);
void launcher_unpick_vmid(struct lctx *c);

/* ---- launcher_cache.c: strings kept for LAUNCHER_CACHE_TTL_MS (a stale answer is noticed and dropped) ---- */
void launcher_cache_init(struct launcher_cache *c);
void launcher_cache_done(struct launcher_cache *c);
/* A copy of the value (malloc'd), or NULL when absent or older than the TTL. */
char *launcher_cache_get(struct launcher_cache *c, const char *key, int64_t now_ms);
void launcher_cache_put(struct launcher_cache *c, const char *key, const char *value, int64_t now_ms);
void launcher_cache_drop(struct launcher_cache *c, const char *key);

/* ---- launcher_steps.c: reserve and VMID, clone, then configure (boot disk, cloud-init, config, firewall) ---- */
int launcher_step_reserve(struct lctx *c);
int launcher_step_vmid(struct lctx *c);
int launcher_step_clone(struct lctx *c);
int launcher_step_cloning(struct lctx *c);
/* Whose is the VM with this config, by the claim UID in its description: 1 this claim's, 0 cannot tell yet (a
 * clone in progress: locked, no description), -1 someone else's. */
int launcher_vm_owner(const struct lctx *c, const json_t *config);
/* Does the NodeClass deliver cloud-init on a CD-ROM (metadataOptions.type "cdrom"), with a join token? */
bool launcher_joins_by_cdrom(const struct lctx *c);
/* Is the VM running (GET status/current)? */
int launcher_vm_running(struct lctx *c, uint32_t vmid, bool *ret_running);

/* ---- launcher_boot.c: cloud-init, firewall, start and bind ---- */
/* With metadataOptions.type cdrom: the join token (its id in token_id) and the uploaded cloud-init ISO (its
 * volume in volume, for the config to attach); otherwise both empty. */
int launcher_cloudinit_deliver(struct lctx *c, char volume[LAUNCHER_VOLUME_MAX], char token_id[TOKENS_ID_LEN + 1]);
/* The NodeClass security groups on the VM (firewall enabled, one group rule per interface). */
int launcher_firewall_apply(struct lctx *c, uint32_t vmid);
int launcher_step_start(struct lctx *c);
int launcher_step_bind(struct lctx *c);
/* Bind the claim's agent reservation to its VM (nothing without one). 0, LSTEP_WAIT, or an error. */
int launcher_bind(struct lctx *c);
/* Wait for a PVE task (none when upid is NULL), first polled first_ms after the call, at most
 * LAUNCHER_TASK_TIMEOUT_MS; the error text is pve_client_error's. */
int launcher_pve_task_wait(struct pve_client *pve, const char *upid, long first_ms);
/* The same for the claim's launch (PVE errors in c->err). */
int launcher_task_wait(struct lctx *c, const char *what, const char *upid, long first_ms);

/* ---- launcher_join.c: registration and initialization ---- */
int launcher_step_register(struct lctx *c);
int launcher_step_initialize(struct lctx *c);
/* Delete the join token Secret; -ENOENT counts as done. */
int launcher_delete_token(struct kube_client *kube, const char *token_id);
/* Delete an ISO volume ("storage:iso/file"); gone counts as done. */
int launcher_delete_iso(struct pve_client *pve, const char *host, const char *volume, char *err, size_t errlen);

/* ---- launcher_teardown.c ---- */
/* The launch failed: record it, emit an Event, back off the (node pool, host), delete the claim and tear down. */
int launcher_fail(struct lctx *c);
/* The claim is being deleted: tear everything down, then drop the finalizer. */
int launcher_finalize(struct lctx *c);
/* Stop (if running) and delete a VM, waiting for both tasks. 0 also when it is already gone. */
int launcher_delete_vm(struct pve_client *pve, const char *host, uint32_t vmid, char *err, size_t errlen);
int launcher_ensure_finalizer(struct lctx *c);
