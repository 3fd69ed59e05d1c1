/* launcher_join: the actions from Launched (the Node of the claim: labels and taints of its NodePool, the
 * unregistered taint gone; Registered, or Initialized at once) and from Registered (Initialized), and the clean-up
 * of the join token and the cloud-init ISO. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rfc3339.h"

/* ---- the Node ---- */

static const json_t *find_node(struct launcher__ctx *c, json_t **owned) {
        const struct launcher_env *e = &c->l->env;
        const char *pid = c->st->provider_id;
        if (e->node_by_provider_id)
                return e->node_by_provider_id(e->userdata, pid);
        json_t *list = NULL, *n;
        size_t i;
        *owned = NULL;
        if (kube_list(c->kube, &kube_nodes, NULL, NULL, &list) < 0)
                return NULL;
        json_array_foreach(json_object_get(list, "items"), i, n) {
                const char *p = kube_node_of(n).provider_id;
                if (!*owned && p && strcmp(p, pid) == 0)
                        *owned = json_incref(n);
        }
        json_decref(list);
        return *owned;
}

static bool same_taint(const json_t *a, const json_t *b) {
        return json_equal(json_object_get(a, "key"), json_object_get(b, "key")) &&
               json_equal(json_object_get(a, "effect"), json_object_get(b, "effect"));
}

struct node_edit {
        json_t *labels, *taints;
};

/* Set the wanted labels, add missing wanted taints and drop the unregistered taints (ours, and Karpenter's, which a
 * pool copied from Karpenter may list: launchstep_registration_taint), as Karpenter's registration does. */
static int node_apply(json_t *node, void *userdata) {
        const struct node_edit *e = userdata;
        json_t *meta = json_object_get(node, "metadata"), *spec = json_object_get(node, "spec"), *v;
        json_t *labels = json_object_get(meta, "labels"), *taints = json_object_get(spec, "taints");
        const char *k;
        bool changed = false;
        if (!json_is_object(labels))
                json_object_set_new(meta, "labels", labels = json_object());
        json_object_foreach(e->labels, k, v) {
                if (!json_equal(json_object_get(labels, k), v)) {
                        json_object_set(labels, k, v);
                        changed = true;
                }
        }
        json_t *out = json_array();
        size_t i;
        json_array_foreach(taints, i, v) {
                if (launchstep_registration_taint(v))
                        changed = true;
                else
                        json_array_append(out, v);
        }
        json_array_foreach(e->taints, i, v) {
                size_t j;
                json_t *w;
                bool present = launchstep_registration_taint(v);
                json_array_foreach(out, j, w)
                        present = present || same_taint(v, w);
                if (!present) {
                        json_array_append(out, v);
                        changed = true;
                }
        }
        if (!json_is_object(spec))
                json_object_set_new(node, "spec", spec = json_object());
        json_object_set_new(spec, "taints", out);
        return changed ? 0 : KUBE_MODIFY_SKIP;
}

static enum launcher_node_state node_state(struct launcher__ctx *c, const json_t *node) {
        return launcher_node_state(node, launcher__startup_taints(c));
}

/* ---- initialized ---- */

/* Eject the ISO (a media change the running VM takes at once, so the synchronous PUT; the empty CD-ROM drive
 * stays) and delete it. */
static struct launchstep_result remove_iso(struct launcher__ctx *c, uint32_t vmid, const char *volume) {
        struct pve_params p = PVE_PARAMS_INIT;
        char err[NODECLAIM_MESSAGE_MAX];
        pve_params_add(&p, "ide2", "none,media=cdrom");
        int r = pve_vm_config_put(c->pve, c->host, vmid, &p);
        pve_params_done(&p);
        if (r < 0)
                return launchstep_error(r, "eject ISO of VM %u: %s", vmid, pve_client_error(c->pve));
        r = launcher__delete_iso(c->pve, c->host, volume, c->l->o.task_timeout_ms, err, sizeof err);
        return r < 0 ? launchstep_error(r, "%s", err) : launchstep_done();
}

static struct launchstep_result clean_up_join(struct launcher__ctx *c) {
        const char *token = c->st->token_id, *iso = c->st->iso_volume;
        int r = token[0] ? launcher__delete_token(c->kube, token) : 0;
        if (r < 0)
                return launchstep_error(r, "delete join token %s: %s", token, kube_client_error(c->kube));
        return iso[0] && c->pve ? remove_iso(c, c->st->vmid, iso) : launchstep_done();
}

/* The join is done: delete the token and the ISO; Initialized (with Registered, when this reconcile also
 * registered the Node: node_name set) is what the next record carries. */
static struct launchstep_result initialized(struct launcher__ctx *c, const char *node_name) {
        struct launchstep_result res = clean_up_join(c);
        if (!launchstep_ok(&res))
                return res;
        int r = launchstep_initialized(c->st, node_name);
        if (r < 0)
                return launchstep_error(r, "%s", strerror(-r));
        log_info("launcher: NodeClaim %s: initialized", c->name);
        return launchstep_done();
}

/* ---- register ---- */

/* Label and taint the Node (from the informer's copy; a conflict reads it again); *ret_stored is the Node as
 * written, or NULL. */
static struct launchstep_result label_node(struct launcher__ctx *c, const json_t *node, const char *node_name,
                                           json_t **ret_stored) {
        struct node_edit e = { launcher__wanted_labels(c, false), launcher__wanted_taints(c, false) };
        int r = e.labels && e.taints ? kube_modify_from(c->kube, &kube_nodes, NULL, node_name, NULL, node, node_apply,
                                                        &e, 0, ret_stored)
                                     : -ENOMEM;
        json_decref(e.labels);
        json_decref(e.taints);
        if (r < 0)
                return launchstep_error(r, "label Node %s: %s", node_name, kube_client_error(c->kube));
        log_info("launcher: NodeClaim %s: Node %s registered", c->name, node_name);
        return launchstep_done();
}

/* Label and taint the Node, then Registered, or Initialized at once when the Node is ready already (one status
 * write instead of two), or nothing yet while Kubernetes takes its ephemeral taints off (launchstep_node). */
static struct launchstep_result register_node(struct launcher__ctx *c, const json_t *node) {
        const char *node_name = kube_meta_of(node).name;
        json_t *stored = NULL;
        struct launchstep_result res = label_node(c, node, node_name, &stored);
        if (!launchstep_ok(&res))
                return res;
        const json_t *current = stored ? stored : node;
        enum launchstep_node next = launchstep_node(node_state(c, current), launcher_node_ready_since(current), c->now);
        json_decref(stored);
        if (next == LAUNCHSTEP_NODE_INITIALIZED) {
                res = initialized(c, node_name);
                return launchstep_ok(&res) ? launchstep_then(launcher__record(c, NODECLAIM_STEP_INITIALIZED),
                                                             launchstep_moved())
                                           : res;
        }
        if (next == LAUNCHSTEP_NODE_WAIT)
                return launchstep_wait(LAUNCHSTEP_POLL_MS);
        int r = launchstep_registered(c->st, node_name);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
}

/* ---- held for earlier claims ---- */

/* What a held claim looks at, read once per check: unbound pods (uid -> true) and our Nominated events. */
struct hold_view {
        json_t *unbound, *nominated;
        bool read;
};

static void hold_view_read(struct launcher__ctx *c, struct hold_view *v) {
        struct kube_list_options pods = { .field_selector = "spec.nodeName=" };
        struct kube_list_options events = { .field_selector = "reason=" NODECLAIM_REASON_NOMINATED };
        json_t *list = NULL, *pod;
        size_t i;
        v->read = true;
        v->unbound = json_object();
        if (kube_list(c->kube, &kube_pods, NULL, &pods, &list) == 0) {
                json_array_foreach(json_object_get(list, "items"), i, pod) {
                        const json_t *m = json_object_get(pod, "metadata");
                        const char *uid = json_string_value(json_object_get(m, "uid"));
                        const json_t *spec = json_object_get(pod, "spec");
                        const char *node = json_string_value(json_object_get(spec, "nodeName"));
                        if (uid && (!node || !*node) && !json_object_get(m, "deletionTimestamp"))
                                json_object_set_new(v->unbound, uid, json_true());
                }
        }
        json_decref(list);
        if (kube_list(c->kube, &kube_events, NULL, &events, &v->nominated) < 0)
                v->nominated = NULL;
}

static void hold_view_done(struct hold_view *v) {
        json_decref(v->unbound);
        json_decref(v->nominated);
}

/* Does the message name nodeclaim/<claim> (followed by a space or its end)? */
static bool names_claim(const char *msg, const char *claim) {
        size_t n = strlen(claim);
        for (const char *at = msg ? strstr(msg, "nodeclaim/") : NULL; at; at = strstr(at + 1, "nodeclaim/"))
                if (strncmp(at + 10, claim, n) == 0 && (at[10 + n] == '\0' || at[10 + n] == ' '))
                        return true;
        return false;
}

/* Is a pod nominated to the claim still unbound (kube-scheduler has yet to place it)? */
static bool pods_pending_on(struct launcher__ctx *c, struct hold_view *v, const char *claim) {
        json_t *ev;
        size_t i;
        if (!v->read)
                hold_view_read(c, v);
        json_array_foreach(json_object_get(v->nominated, "items"), i, ev) {
                struct kube_event e;
                kube_event_decode(ev, &e);
                if (e.involved_uid && json_object_get(v->unbound, e.involved_uid) && names_claim(e.message, claim))
                        return true;
        }
        return false;
}

/* Is the named claim still ahead of this one: there, not being deleted, and either not Initialized, or Initialized
 * less than NODECLAIM_SETTLE_MS ago with pods nominated to it still unbound? An error reading it counts as no. */
static bool claim_ahead(struct launcher__ctx *c, struct hold_view *v, const char *name) {
        json_t *claim = NULL;
        if (kube_get(c->kube, &kube_nodeclaims, NULL, name, &claim) < 0)
                return false;
        const json_t *status = json_object_get(claim, "status");
        const char *since = json_string_value(json_object_get(kube_condition(status, "Initialized"),
                                                              "lastTransitionTime"));
        int64_t at = 0;
        bool ahead = !kube_meta_of(claim).deleting;
        if (ahead && kube_condition_true(status, "Initialized"))
                ahead = since && rfc3339_parse(since, &at) == 0 && c->now - at < NODECLAIM_SETTLE_MS &&
                        pods_pending_on(c, v, name);
        json_decref(claim);
        return ahead;
}

/* The first claim named in NODECLAIM_ANNOTATION_AFTER that is still ahead of this one, copied to buf, while the
 * launch began less than NODECLAIM_HOLD_MAX_MS ago; false when none. */
static bool held_for(struct launcher__ctx *c, char *buf, size_t len) {
        const char *after = json_string_value(json_object_get(kube_meta_of(c->claim).annotations,
                                                              NODECLAIM_ANNOTATION_AFTER));
        char names[1024];
        struct hold_view v = { 0 };
        bool held = false;
        if (!after || !*after || c->now - c->st->started_ms > NODECLAIM_HOLD_MAX_MS)
                return false;
        snprintf(names, sizeof names, "%s", after);
        char *save = NULL;
        for (char *n = strtok_r(names, ",", &save); n && !held; n = strtok_r(NULL, ",", &save)) {
                held = claim_ahead(c, &v, n);
                if (held)
                        snprintf(buf, len, "%s", n);
        }
        hold_view_done(&v);
        return held;
}

struct launchstep_result launcher__register(struct launcher__ctx *c) {
        json_t *owned = NULL;
        const json_t *node = find_node(c, &owned);
        const char *n = kube_meta_of(node).name;
        if (!n || !*n || !launchstep_node_is_claims(node, c->uid)) {
                json_decref(owned);
                return launchstep_registration_wait(c->st->started_ms, c->now, c->l->o.registration_timeout_ms,
                                                    c->st->provider_id);
        }
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (launchstep_ok(&res))
                res = launcher__need_pool(c);
        if (launchstep_ok(&res))
                res = launcher__need_shape(c);
        char first[LAUNCHER_NAME_MAX];
        if (launchstep_ok(&res) && held_for(c, first, sizeof first)) {
                log_info("launcher: NodeClaim %s: Node %s held for NodeClaim %s (its Node takes pods first)",
                         c->name, n, first);
                json_decref(owned);
                return launchstep_wait(LAUNCHSTEP_POLL_MS);
        }
        if (launchstep_ok(&res))
                res = register_node(c, node);
        json_decref(owned);
        return res;
}

struct launchstep_result launcher__initialize(struct launcher__ctx *c) {
        json_t *owned = NULL;
        const json_t *node = find_node(c, &owned);
        struct launchstep_result res = launcher__need_pool(c);
        bool init = launchstep_ok(&res) && node && launchstep_node_is_claims(node, c->uid) &&
                    node_state(c, node) == LAUNCHER_NODE_INITIALIZED;
        json_decref(owned);
        if (!launchstep_ok(&res))
                return res;
        return init ? initialized(c, NULL) : launchstep_wait(LAUNCHSTEP_POLL_MS);
}
