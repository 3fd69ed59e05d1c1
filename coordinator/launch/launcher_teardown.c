/* launcher_teardown: failed launches (record, Event, back-off, delete the claim) and the teardown of a deleted
 * claim (VM, ISO, join token, reservation, Node), then its finalizer. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tokens.h"

/* ---- VM deletion ---- */

int launcher_delete_vm(struct pve_client *pve, const char *host, uint32_t vmid, char *err, size_t errlen) {
        bool running = false;
        char *upid = NULL;
        int r = pve_vm_running(pve, host, vmid, &running);
        if (r == 0 && running) {
                r = pve_vm_action(pve, host, vmid, "stop", &upid);
                if (r == 0)
                        r = launcher_pve_task_wait(pve, upid, LAUNCHER_POLL_LATER_MS);
                free(upid);
                upid = NULL;
        }
        if (r == 0)
                r = pve_vm_delete(pve, host, vmid, true, true, &upid);
        if (r == 0)
                r = launcher_pve_task_wait(pve, upid, LAUNCHER_POLL_LATER_MS);
        free(upid);
        if (r == -ENOENT || (r < 0 && strstr(pve_client_error(pve), "does not exist")))
                return 0;
        if (r < 0)
                snprintf(err, errlen, "delete VM %u on %s: %s", vmid, host, pve_client_error(pve));
        else
                log_info("launcher: deleted VM %u on %s", vmid, host);
        return r;
}

/* The claim's VM, if it is provably the claim's: never delete a VM someone else holds under the same id. */
static int teardown_vm(struct lctx *c) {
        uint32_t vmid = (uint32_t)launcher_status_int(c, "vmid");
        json_t *config = NULL;
        if (vmid == 0 || !c->pve)
                return 0;
        int r = pve_vm_config_get(c->pve, c->host, vmid, &config);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return launcher_errf(c, r, "config of VM %u: %s", vmid, pve_client_error(c->pve));
        int owner = launcher_vm_owner(c, config);
        bool locked = json_object_get(config, "lock") != NULL;
        json_decref(config);
        if (owner == 0 && launcher_status_str(c, "cloneTask")[0])
                owner = 1; /* Proxmox accepted our clone to this VMID */
        if (owner < 0)
                return 0;
        if (locked) {
                /* a clone is still running (a locked VM cannot be deleted): wait until it ends; when the owner
                 * cannot be told (the clone was sent but not recorded), give up well after it should be done */
                int64_t started = launcher_status_time(c, "cloneStartedAt");
                if (owner == 0 && started && c->now > started + 2 * c->l->o.clone_timeout_ms + 60000)
                        return 0;
                return launcher_wait(c, LAUNCHER_POLL_MS);
        }
        return launcher_delete_vm(c->pve, c->host, vmid, c->err, sizeof c->err);
}

/* ---- the rest ---- */

static int teardown_tokens(struct lctx *c) {
        char selector[128];
        json_t *list = NULL, *s;
        size_t i;
        snprintf(selector, sizeof selector, TOKENS_LABEL_CLAIM_UID "=%s", c->uid);
        struct kube_list_options o = { .label_selector = selector };
        int r = kube_list(c->kube, &kube_secrets, TOKENS_NAMESPACE, &o, &list);
        json_array_foreach(json_object_get(list, "items"), i, s) {
                const char *name = json_string_value(json_object_get(json_object_get(s, "metadata"), "name"));
                if (r == 0 && name)
                        r = kube_delete(c->kube, &kube_secrets, TOKENS_NAMESPACE, name, NULL, NULL);
                if (r == -ENOENT)
                        r = 0;
        }
        json_decref(list);
        return r < 0 ? launcher_errf(c, r, "delete join tokens: %s", kube_client_error(c->kube)) : 0;
}

/* Release the recorded reservation and any other one this claim owns (made before its id was recorded). An
 * agent that cannot be reached is not waited for: its unbound reservations expire, bound ones go with the VM. */
static int teardown_reservations(struct lctx *c) {
        char owner[254], uid[LAUNCHER_UID_MAX];
        json_t *list = NULL, *e;
        size_t i;
        if (!c->agent)
                return 0;
        const char *id = launcher_status_str(c, "reservationID");
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
        return 0;
}

static int teardown_node(struct lctx *c) {
        const char *node = launcher_status_str(c, "nodeName");
        if (!node[0])
                return 0;
        int r = kube_delete(c->kube, &kube_nodes, NULL, node, NULL, NULL);
        return r < 0 && r != -ENOENT ? launcher_errf(c, r, "delete Node %s: %s", node, kube_client_error(c->kube)) : 0;
}

static int teardown(struct lctx *c) {
        int r = teardown_vm(c);
        const char *iso = launcher_status_str(c, "isoVolume");
        if (r == 0 && iso[0] && c->pve)
                r = launcher_delete_iso(c->pve, c->host, iso, c->err, sizeof c->err);
        if (r == 0)
                r = teardown_tokens(c);
        if (r == 0)
                r = teardown_reservations(c);
        if (r == 0)
                r = teardown_node(c);
        return r;
}

/* ---- finalizer ---- */

static int finalizer_index(const json_t *obj) {
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "finalizers"), i, f) {
                if (json_is_string(f) && strcmp(json_string_value(f), LAUNCHER_FINALIZER) == 0)
                        return (int)i;
        }
        return -1;
}

static int drop_finalizer(json_t *obj, void *userdata) {
        const char *uid = userdata, *u = json_string_value(json_object_get(json_object_get(obj, "metadata"), "uid"));
        int i = finalizer_index(obj);
        if (!u || strcmp(u, uid) != 0 || i < 0)
                return KUBE_MODIFY_SKIP;
        json_array_remove(json_object_get(json_object_get(obj, "metadata"), "finalizers"), (size_t)i);
        return 0;
}

static int add_finalizer(json_t *obj, void *userdata) {
        const char *uid = userdata;
        json_t *meta = json_object_get(obj, "metadata");
        const char *u = json_string_value(json_object_get(meta, "uid"));
        if (!u || strcmp(u, uid) != 0)
                return -EAGAIN;
        if (finalizer_index(obj) >= 0 || json_object_get(meta, "deletionTimestamp"))
                return KUBE_MODIFY_SKIP;
        json_t *list = json_object_get(meta, "finalizers");
        if (!json_is_array(list))
                json_object_set_new(meta, "finalizers", list = json_array());
        return json_array_append_new(list, json_string(LAUNCHER_FINALIZER)) < 0 ? -ENOMEM : 0;
}

int launcher_ensure_finalizer(struct lctx *c) {
        json_t *stored = NULL;
        if (finalizer_index(c->claim) >= 0)
                return 0;
        int r = kube_modify(c->kube, &kube_nodeclaims, NULL, c->name, NULL, add_finalizer, c->uid, 0, &stored);
        if (r == 0) {
                json_decref(c->claim);
                c->claim = stored;
                return 0;
        }
        if (r == KUBE_MODIFY_SKIP) { /* someone changed the claim (stored is the fresh one): start over */
                json_decref(c->claim);
                c->claim = stored;
                return -EAGAIN;
        }
        if (r == -EAGAIN) {
                /* someone changed the claim: start over from the fresh one */
                r = kube_get(c->kube, &kube_nodeclaims, NULL, c->name, &stored);
                if (r < 0)
                        return launcher_errf(c, r, "GET NodeClaim %s: %s", c->name, kube_client_error(c->kube));
                json_decref(c->claim);
                c->claim = stored;
                return -EAGAIN;
        }
        return launcher_errf(c, r, "add finalizer to NodeClaim %s: %s", c->name, kube_client_error(c->kube));
}

int launcher_finalize(struct lctx *c) {
        int r = teardown(c);
        if (r == LSTEP_WAIT)
                return 0;
        if (r < 0)
                return r;
        r = kube_modify(c->kube, &kube_nodeclaims, NULL, c->name, NULL, drop_finalizer, c->uid, 0, NULL);
        if (r < 0 && r != -ENOENT)
                return launcher_errf(c, r, "remove finalizer of NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        log_info("launcher: NodeClaim %s: torn down", c->name);
        launcher_forget_written(c->l, c->name);
        c->requeue_ms = 0;
        return 0;
}

/* ---- failed launches ---- */

static int record_failure(struct lctx *c, const char *reason, const char *message) {
        bool launched = launcher_condition_true(launcher_status(c), "Launched");
        json_t *ch = json_pack("{s:s, s:s, s:s, s:[{s:s, s:s, s:s, s:s}]}", "launchStep", STEP_FAILED, "lastError",
                               message, "failureReason", reason, "conditions", "type",
                               launched ? "Registered" : "Launched", "status", "False", "reason", reason, "message",
                               message);
        return launcher_commit(c, ch);
}

int launcher_fail(struct lctx *c) {
        char reason[64], message[512];
        const char *saved = launcher_status_str(c, "failureReason");
        snprintf(reason, sizeof reason, "%s", c->fail_reason[0] ? c->fail_reason : saved[0] ? saved : "LaunchFailed");
        snprintf(message, sizeof message, "%s", c->err[0] ? c->err : launcher_status_str(c, "lastError"));
        int r = strcmp(launcher_status_str(c, "launchStep"), STEP_FAILED) == 0 ? 0 : record_failure(c, reason, message);
        if (r < 0)
                return r;
        log_error("launcher: NodeClaim %s failed (%s): %s; deleting it", c->name, reason, message);
        r = kube_event_emit(c->kube, &kube_nodeclaims, c->claim, "Warning", reason, message, LAUNCHER_COMPONENT);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: event for NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        if (c->nodepool[0] && c->host[0])
                launcher_backoff_note(c->l, c->nodepool, c->host, c->now);
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.precondition_uid = c->uid;
        r = kube_delete(c->kube, &kube_nodeclaims, NULL, c->name, &o, NULL);
        if (r < 0 && r != -ENOENT)
                return launcher_errf(c, r, "delete NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        c->fail_reason[0] = '\0';
        c->err[0] = '\0';
        return launcher_finalize(c);
}
