/* launcher_teardown: failed launches (record, Event, back-off, delete the claim) and the termination of a deleted
 * claim in its order (taint, drain, Node, then VM, ISO, join token, reservation), each step recorded, then its
 * finalizer. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tokens.h"
#include "kube_object.h"

/* ---- teardown ---- */

#define DELETE_FAILED_PREFIX "delete VM "

/* A failed delete of the claim's VM is told once per change of its error (the VMID, the host and Proxmox's error):
 * in status.lastError and a Warning Event DeleteFailed. The claim keeps its finalizer and the delete is tried
 * again after the launcher's back-off; the error goes back to the caller, which logs it once per change too. */
static struct launchstep_result delete_failed(struct launcher__ctx *c, int r, const char *err) {
        if (r == -ECANCELED || strcmp(c->st->last_error, err) == 0)
                return launchstep_error(r, "%s", err);
        snprintf(c->st->last_error, sizeof c->st->last_error, "%s", err);
        struct launchstep_result res = launcher__commit(c);
        int e = kube_event_emit(c->kube, &kube_nodeclaims, c->claim, "Warning", "DeleteFailed", err,
                                LAUNCHER__COMPONENT);
        if (e < 0 && e != -ECANCELED)
                log_error("launcher: event for NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        return launchstep_ok(&res) ? launchstep_error(r, "%s", err) : res;
}

static struct launchstep_result delete_vm(struct launcher__ctx *c, uint32_t vmid) {
        char err[NODECLAIM_MESSAGE_MAX];
        int r = launcher__delete_vm(c->pve, c->host, vmid, c->l->o.task_timeout_ms, err, sizeof err);
        if (r < 0)
                return delete_failed(c, r, err);
        stats_vm_deleted(c->l->env.stats, c->st->launch_step == NODECLAIM_STEP_FAILED ? STATS_VM_DELETED_LAUNCH_FAILED
                                                                                      : STATS_VM_DELETED_TERMINATED);
        if (strncmp(c->st->last_error, DELETE_FAILED_PREFIX, strlen(DELETE_FAILED_PREFIX)) == 0)
                c->st->last_error[0] = '\0'; /* written with InstanceTerminated */
        return launchstep_done();
}

/* The claim's VM, if it is provably the claim's (launchstep_teardown_vm: by its description and SMBIOS UUID). */
static struct launchstep_result teardown_vm(struct launcher__ctx *c) {
        uint32_t vmid = c->st->vmid;
        json_t *config = NULL;
        if (vmid == 0 || !c->pve)
                return launchstep_done();
        int r = pve_vm_config_get(c->pve, c->host, vmid, &config);
        if (r == -ENOENT)
                return launchstep_done();
        if (r < 0)
                return launchstep_error(r, "config of VM %u: %s", vmid, pve_client_error(c->pve));
        int owner = launchstep_vm_owner(c->uid, config);
        bool locked = json_object_get(config, "lock") != NULL;
        json_decref(config);
        switch (launchstep_teardown_vm(owner, locked, c->st, c->now, c->l->o.clone_timeout_ms)) {
        case LAUNCHSTEP_TEARDOWN_KEEP:
                return launchstep_done();
        case LAUNCHSTEP_TEARDOWN_WAIT:
                return launchstep_wait(LAUNCHSTEP_POLL_MS);
        default:
                return delete_vm(c, vmid);
        }
}

/* The ISO to delete: the recorded one; for a launch that may have uploaded one without recording it (it failed
 * between the upload and the write that records it), the one it would have uploaded; else none. */
static void claim_iso(struct launcher__ctx *c, char volume[LAUNCHER__VOLUME_MAX]) {
        snprintf(volume, LAUNCHER__VOLUME_MAX, "%s", c->st->iso_volume);
        if (volume[0] || !launchstep_iso_unrecorded(c->st))
                return;
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (launchstep_ok(&res) && launcher__joins_by_cdrom(c))
                res = launcher__iso_volume(c, volume);
        if (!launchstep_ok(&res))
                volume[0] = '\0'; /* garbage collection finds it */
}

static struct launchstep_result teardown_iso(struct launcher__ctx *c) {
        char iso[LAUNCHER__VOLUME_MAX], err[NODECLAIM_MESSAGE_MAX];
        if (c->pve)
                claim_iso(c, iso);
        int r = c->pve && iso[0] ? launcher__delete_iso(c->pve, c->host, iso, c->l->o.task_timeout_ms, err, sizeof err)
                                 : 0;
        return r < 0 ? launchstep_error(r, "%s", err) : launchstep_done();
}

static struct launchstep_result teardown_tokens(struct launcher__ctx *c) {
        char selector[128];
        json_t *list = NULL, *s;
        size_t i;
        snprintf(selector, sizeof selector, TOKENS_LABEL_CLAIM_UID "=%s", c->uid);
        struct kube_list_options o = { .label_selector = selector };
        int r = kube_list(c->kube, &kube_secrets, TOKENS_NAMESPACE, &o, &list);
        json_array_foreach(json_object_get(list, "items"), i, s) {
                const char *name = kube_meta_of(s).name;
                if (r == 0 && name)
                        r = kube_delete(c->kube, &kube_secrets, TOKENS_NAMESPACE, name, NULL, NULL);
                if (r == -ENOENT)
                        r = 0;
        }
        json_decref(list);
        return r < 0 ? launchstep_error(r, "delete join tokens: %s", kube_client_error(c->kube)) : launchstep_done();
}

/* Release the recorded reservation and any other one this claim owns (made before its id was recorded). An
 * agent that cannot be reached is not waited for: its unbound reservations expire, bound ones go with the VM. */
static struct launchstep_result teardown_reservations(struct launcher__ctx *c) {
        char owner[254], uid[LAUNCHER_UID_MAX];
        json_t *list = NULL, *e;
        size_t i;
        if (!c->agent)
                return launchstep_done();
        const char *id = c->st->reservation_id;
        int r = id[0] ? agents_release(c->agent, id) : 0;
        if (r == 0 || r == -ENOENT)
                r = agents_reservations(c->agent, &list);
        launcher_owner(c->name, c->uid, owner, sizeof owner);
        json_array_foreach(json_object_get(list, "reservations"), i, e) {
                const char *o = json_string_value(json_object_get(e, "owner"));
                const char *rid = json_string_value(json_object_get(e, "id"));
                if (r == 0 && rid && launcher_owner_uid(o, uid) == 0 && strcmp(uid, c->uid) == 0)
                        r = agents_release(c->agent, rid);
                if (r == -ENOENT)
                        r = 0;
        }
        json_decref(list);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: NodeClaim %s: reservations on %s not released: %s", c->name, c->host,
                          agents_client_error(c->agent));
        return launchstep_done();
}

/* The claim's instance: its VM (stopped, then deleted with purge and its unreferenced disks), ISO, join token and
 * reservation; then the Node object, deleted before, goes (its finalizer dropped). */
static struct launchstep_result teardown_instance(struct launcher__ctx *c) {
        struct launchstep_result res = teardown_vm(c);
        if (launchstep_ok(&res))
                res = teardown_iso(c);
        if (launchstep_ok(&res))
                res = teardown_tokens(c);
        if (launchstep_ok(&res))
                res = teardown_reservations(c);
        if (launchstep_ok(&res))
                res = launcher__release_node(c);
        return res;
}

/* Termination in its order, a step from the one the claim records: each is written once done, so that a restart
 * goes on from there. A claim without a Node (a launch that failed before it joined) passes the Node's steps
 * without writing them. */
static const struct term_transition {
        enum nodeclaim_term state;
        launcher__action action;
        enum nodeclaim_term next;
} TERM_TRANSITIONS[] = {
        { NODECLAIM_TERM_NONE, launcher__taint_node, NODECLAIM_TERM_TAINTED },
        { NODECLAIM_TERM_TAINTED, launcher__drain_node, NODECLAIM_TERM_DRAINED },
        { NODECLAIM_TERM_DRAINED, launcher__delete_node, NODECLAIM_TERM_NODE_DELETED },
        { NODECLAIM_TERM_NODE_DELETED, teardown_instance, NODECLAIM_TERM_INSTANCE_TERMINATED },
};

static void term_event(struct launcher__ctx *c, const char *reason, const char *message) {
        int r = kube_event_emit(c->kube, &kube_nodeclaims, c->claim, "Normal", reason, message, LAUNCHER__COMPONENT);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: event for NodeClaim %s: %s", c->name, kube_client_error(c->kube));
}

/* The claim's termination step is done: recorded (not written for the Node's steps when it has no Node). */
static struct launchstep_result term_record(struct launcher__ctx *c, enum nodeclaim_term next) {
        bool begins = c->st->term_step == NODECLAIM_TERM_NONE;
        int r = launchstep_term_record(c->st, next, c->now);
        if (r < 0)
                return launchstep_error(r, "%s", strerror(-r));
        log_info("launcher: NodeClaim %s: %s", c->name, nodeclaim_term_name(next));
        bool write = begins || c->st->node_name[0] || next == NODECLAIM_TERM_INSTANCE_TERMINATED;
        struct launchstep_result res = write ? launcher__commit(c) : launchstep_done();
        if (launchstep_ok(&res) && begins)
                term_event(c, "Terminating",
                           c->st->node_name[0] ? "draining its Node, then deleting its VM" : "deleting its VM");
        return res;
}

static struct launchstep_result teardown(struct launcher__ctx *c) {
        for (size_t i = 0; i < sizeof TERM_TRANSITIONS / sizeof TERM_TRANSITIONS[0]; i++) {
                const struct term_transition *t = &TERM_TRANSITIONS[i];
                if (c->st->term_step != t->state)
                        continue;
                struct launchstep_result res = t->action(c);
                if (launchstep_ok(&res))
                        res = term_record(c, t->next);
                if (!launchstep_ok(&res))
                        return res;
        }
        return launchstep_done();
}

/* ---- finalizer ---- */

static int drop_finalizer(json_t *obj, void *userdata) {
        const char *uid = userdata, *u = kube_meta_of(obj).uid;
        int i = launcher__finalizer_index(obj);
        if (!u || strcmp(u, uid) != 0 || i < 0)
                return KUBE_MODIFY_SKIP;
        json_array_remove(kube_finalizers_mut(obj), (size_t)i);
        return 0;
}

static int add_finalizer(json_t *obj, void *userdata) {
        const char *uid = userdata;
        json_t *meta = json_object_get(obj, "metadata");
        const char *u = json_string_value(json_object_get(meta, "uid"));
        return !u || strcmp(u, uid) != 0 ? -EAGAIN : launcher__finalizer_add(obj);
}

/* Someone changed the claim: start over from the fresh one (stored, or read now). */
static struct launchstep_result start_over(struct launcher__ctx *c, json_t *stored) {
        int r = stored ? 0 : kube_get(c->kube, &kube_nodeclaims, NULL, c->name, &stored);
        if (r < 0)
                return launchstep_error(r, "GET NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        r = launcher__ctx_take(c, stored);
        return launchstep_error(r < 0 ? r : -EAGAIN, "NodeClaim %s changed meanwhile", c->name);
}

struct launchstep_result launcher__ensure_finalizer(struct launcher__ctx *c) {
        json_t *stored = NULL;
        if (launcher__finalizer_index(c->claim) >= 0)
                return launchstep_done();
        int r = kube_modify(c->kube, &kube_nodeclaims, NULL, c->name, NULL, add_finalizer, c->uid, 0, &stored);
        if (r == 0) {
                r = launcher__ctx_take(c, stored);
                return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
        }
        if (r == KUBE_MODIFY_SKIP || r == -EAGAIN) /* stored is the fresh claim (skip), or nothing (-EAGAIN) */
                return start_over(c, r == KUBE_MODIFY_SKIP ? stored : NULL);
        return launchstep_error(r, "add finalizer to NodeClaim %s: %s", c->name, kube_client_error(c->kube));
}

struct launchstep_result launcher__finalize(struct launcher__ctx *c) {
        struct launchstep_result res = teardown(c);
        if (!launchstep_ok(&res))
                return res;
        int r = kube_modify(c->kube, &kube_nodeclaims, NULL, c->name, NULL, drop_finalizer, c->uid, 0, NULL);
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "remove finalizer of NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        log_info("launcher: NodeClaim %s: torn down", c->name);
        term_event(c, "Terminated", "its Node, VM, ISO, join token and reservation are gone");
        launcher__note_written(c->l, c->name, NULL);
        return launchstep_done();
}

/* ---- failed launches ---- */

static struct launchstep_result record_failure(struct launcher__ctx *c, const struct launchstep_failure *f) {
        int r = launchstep_failed(c->st, f->reason, f->message);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launcher__commit(c);
}

/* Tear down the claim the delete answered with (its finalizer holds it: the status writes of the termination go
 * on top of it); otherwise the claim as it was. */
static struct launchstep_result finalize_deleted(struct launcher__ctx *c, json_t *deleted) {
        const char *uid = kube_meta_of(deleted).uid;
        bool held = uid && strcmp(uid, c->uid) == 0 && kube_deleting(deleted);
        int r = held ? launcher__ctx_take(c, deleted) : 0;
        if (!held)
                json_decref(deleted);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launcher__finalize(c);
}

struct launchstep_result launcher__fail(struct launcher__ctx *c, const struct launchstep_result *why) {
        struct launchstep_failure f = launchstep_failure(c->st, why);
        bool first = c->st->launch_step != NODECLAIM_STEP_FAILED; /* not a retry of the delete below */
        struct launchstep_result res = first ? record_failure(c, &f) : launchstep_done();
        if (!launchstep_ok(&res))
                return res;
        log_error("launcher: NodeClaim %s failed (%s): %s; deleting it", c->name, f.reason, f.message);
        int r = kube_event_emit(c->kube, &kube_nodeclaims, c->claim, "Warning", f.reason, f.message,
                                LAUNCHER__COMPONENT);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: event for NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        if (c->nodepool[0] && c->host[0])
                launcher__backoff_note(c->l, c->nodepool, c->host, c->now);
        if (first) {
                launcher__health_note(c, false, &f);
                launcher__count_failure(c, &f);
        }
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.precondition_uid = c->uid;
        json_t *deleted = NULL;
        r = kube_delete(c->kube, &kube_nodeclaims, NULL, c->name, &o, &deleted);
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "delete NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        return finalize_deleted(c, r == 0 ? deleted : NULL);
}
