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

/* ---- teardown ---- */

/* The claim's VM, if it is provably the claim's (launchstep_teardown_vm). */
static struct launchstep_result teardown_vm(struct launcher__ctx *c) {
        uint32_t vmid = c->st->vmid;
        json_t *config = NULL;
        char err[NODECLAIM_MESSAGE_MAX];
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
                r = launcher__delete_vm(c->pve, c->host, vmid, err, sizeof err);
                if (r == 0)
                        stats_vm_deleted(c->l->env.stats, c->st->launch_step == NODECLAIM_STEP_FAILED
                                                                  ? STATS_VM_DELETED_LAUNCH_FAILED
                                                                  : STATS_VM_DELETED_TERMINATED);
                return r < 0 ? launchstep_error(r, "%s", err) : launchstep_done();
        }
}

static struct launchstep_result teardown_iso(struct launcher__ctx *c) {
        const char *iso = c->st->iso_volume;
        char err[NODECLAIM_MESSAGE_MAX];
        int r = iso[0] && c->pve ? launcher__delete_iso(c->pve, c->host, iso, err, sizeof err) : 0;
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
                const char *name = json_string_value(json_object_get(json_object_get(s, "metadata"), "name"));
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

static struct launchstep_result teardown_node(struct launcher__ctx *c) {
        const char *node = c->st->node_name;
        int r = node[0] ? kube_delete(c->kube, &kube_nodes, NULL, node, NULL, NULL) : 0;
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "delete Node %s: %s", node, kube_client_error(c->kube));
        return launchstep_done();
}

static struct launchstep_result teardown(struct launcher__ctx *c) {
        struct launchstep_result res = teardown_vm(c);
        if (launchstep_ok(&res))
                res = teardown_iso(c);
        if (launchstep_ok(&res))
                res = teardown_tokens(c);
        if (launchstep_ok(&res))
                res = teardown_reservations(c);
        if (launchstep_ok(&res))
                res = teardown_node(c);
        return res;
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
        if (finalizer_index(c->claim) >= 0)
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
        launcher__note_written(c->l, c->name, NULL);
        return launchstep_done();
}

/* ---- failed launches ---- */

static struct launchstep_result record_failure(struct launcher__ctx *c, const struct launchstep_failure *f) {
        int r = launchstep_failed(c->st, f->reason, f->message);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launcher__commit(c);
}

struct launchstep_result launcher__fail(struct launcher__ctx *c, const struct launchstep_result *why) {
        struct launchstep_failure f = launchstep_failure(c->st, why);
        struct launchstep_result res =
                c->st->launch_step == NODECLAIM_STEP_FAILED ? launchstep_done() : record_failure(c, &f);
        if (!launchstep_ok(&res))
                return res;
        log_error("launcher: NodeClaim %s failed (%s): %s; deleting it", c->name, f.reason, f.message);
        int r = kube_event_emit(c->kube, &kube_nodeclaims, c->claim, "Warning", f.reason, f.message,
                                LAUNCHER__COMPONENT);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: event for NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        if (c->nodepool[0] && c->host[0])
                launcher__backoff_note(c->l, c->nodepool, c->host, c->now);
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.precondition_uid = c->uid;
        r = kube_delete(c->kube, &kube_nodeclaims, NULL, c->name, &o, NULL);
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "delete NodeClaim %s: %s", c->name, kube_client_error(c->kube));
        return launcher__finalize(c);
}
