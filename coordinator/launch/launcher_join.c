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
#include "nominate.h"

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

/* The Node's pvescale.io/initialized=true label, as Karpenter labels karpenter.sh/initialized. It comes after the
 * startup and not-ready taints are gone, so this label update also has kube-scheduler try again at once the pods
 * whose last attempt failed on a predicate it re-checks only when a Node is added or relabelled (topology spread,
 * volume binding, node affinity): a Node added while tainted did not count for them. */
static int label_initialized(struct launcher__ctx *c, const json_t *node) {
        struct kube_meta m = kube_meta_of(node);
        const char *have = json_string_value(json_object_get(m.labels, LAUNCHER__LABEL_INITIALIZED));
        if (have && strcmp(have, "true") == 0)
                return 0;
        json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "labels", LAUNCHER__LABEL_INITIALIZED, "true");
        int r = patch ? kube_patch(c->kube, &kube_nodes, NULL, m.name, NULL, KUBE_PATCH_MERGE, patch, NULL) : -ENOMEM;
        json_decref(patch);
        return r;
}

/* The join is done: label the Node initialized, delete the token and the ISO; Initialized (with Registered, when
 * this reconcile also registered the Node: node_name set) is what the next record carries. */
static struct launchstep_result initialized(struct launcher__ctx *c, const json_t *node, const char *node_name) {
        int r = label_initialized(c, node);
        if (r < 0)
                return launchstep_error(r, "label Node %s initialized: %s", kube_meta_of(node).name,
                                        kube_client_error(c->kube));
        struct launchstep_result res = clean_up_join(c);
        if (!launchstep_ok(&res))
                return res;
        r = launchstep_initialized(c->st, node_name);
        if (r < 0)
                return launchstep_error(r, "%s", strerror(-r));
        log_info("launcher: NodeClaim %s: initialized", c->name);
        return launchstep_done();
}

/* ---- nominations ---- */

/* Write status.nominatedNodeName = node_name on one pod; false when it failed (logged). */
static bool nominate_one(struct launcher__ctx *c, const json_t *who, const char *node_name) {
        const char *ns = json_string_value(json_object_get(who, "namespace"));
        const char *name = json_string_value(json_object_get(who, "name"));
        json_t *patch = json_pack("{s:{s:s}}", "status", "nominatedNodeName", node_name);
        int r = patch ? kube_patch(c->kube, &kube_pods, ns, name, "status", KUBE_PATCH_MERGE, patch, NULL) : -ENOMEM;
        json_decref(patch);
        if (r < 0 && r != -ENOENT && !kube_client_canceled(c->kube))
                log_warning("launcher: NodeClaim %s: nominate pod %s/%s to Node %s: %s", c->name, ns, name, node_name,
                            kube_client_error(c->kube));
        return r == 0;
}

/* The claims of this claim's round (NODECLAIM_ANNOTATION_ROUND), this one first: a new array of names. */
static json_t *round_claims(struct launcher__ctx *c) {
        const char *peers = json_string_value(json_object_get(kube_meta_of(c->claim).annotations,
                                                              NODECLAIM_ANNOTATION_ROUND));
        json_t *out = json_array();
        char names[1024];
        char *save = NULL;
        json_array_append_new(out, json_string(c->name));
        snprintf(names, sizeof names, "%s", peers ? peers : "");
        for (char *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save))
                json_array_append_new(out, json_string(n));
        return out;
}

/* The Node of a claim of the round: this claim's own (node_name), else the cached Node of the claim's providerID;
 * copied to buf; false when it has none (yet). */
static bool claim_node(struct launcher__ctx *c, const char *claim, const char *node_name, char *buf, size_t len) {
        const struct launcher_env *e = &c->l->env;
        if (strcmp(claim, c->name) == 0) {
                snprintf(buf, len, "%s", node_name);
                return true;
        }
        json_t *obj = e->cached ? e->cached(e->userdata, &kube_nodeclaims, claim) : NULL;
        const char *pid = kube_nodeclaim_of(obj).provider_id;
        const json_t *node = pid && e->node_by_provider_id ? e->node_by_provider_id(e->userdata, pid) : NULL;
        const char *name = kube_meta_of(node).name;
        if (name)
                snprintf(buf, len, "%s", name);
        json_decref(obj);
        return name != NULL;
}

/* The pods the provisioner planned on this claim and on the other claims of its round (their Nominated events) and
 * still unbound get status.nominatedNodeName = the claim's Node, just before this Node becomes schedulable and
 * again while it settles: kube-scheduler then tries that Node first for them and counts them on it when it filters
 * other pods, so its LeastAllocated spreading cannot hand their room to pods planned elsewhere. Best effort: a
 * failure is logged. */
static void nominate_pods(struct launcher__ctx *c, const char *node_name) {
        struct kube_list_options pods = { .field_selector = "spec.nodeName=" };
        struct kube_list_options events = { .field_selector = "reason=" NODECLAIM_REASON_NOMINATED };
        json_t *unbound = NULL, *nominated = NULL, *claims = round_claims(c), *claim;
        size_t i, k, done = 0;
        if (kube_list(c->kube, &kube_pods, NULL, &pods, &unbound) < 0 ||
            kube_list(c->kube, &kube_events, NULL, &events, &nominated) < 0)
                json_array_clear(claims);
        json_array_foreach(claims, k, claim) {
                char node[256];
                const char *name = json_string_value(claim);
                json_t *todo = name && claim_node(c, name, node_name, node, sizeof node)
                                       ? nominate_pods_of(unbound, nominated, name, node)
                                       : NULL;
                json_t *who;
                json_array_foreach(todo, i, who)
                        done += nominate_one(c, who, node);
                json_decref(todo);
        }
        if (done > 0)
                log_info("launcher: NodeClaim %s: %zu pods nominated to the Nodes of its round", c->name, done);
        json_decref(claims);
        json_decref(unbound);
        json_decref(nominated);
}

/* A claim of this claim's round whose Node has yet to register (there, not being deleted, not Initialized, and no
 * Node for it in the cache), copied to buf, while this launch began less than NODECLAIM_ROUND_MAX_MS ago. */
static bool round_waits_for(struct launcher__ctx *c, const char *node_name, char *buf, size_t len) {
        const struct launcher_env *e = &c->l->env;
        json_t *claims = round_claims(c), *claim;
        size_t k;
        bool waits = false;
        if (c->now - c->st->started_ms > NODECLAIM_ROUND_MAX_MS || !e->cached)
                json_array_clear(claims);
        json_array_foreach(claims, k, claim) {
                const char *name = json_string_value(claim);
                char node[256];
                json_t *obj = name && !waits ? e->cached(e->userdata, &kube_nodeclaims, name) : NULL;
                waits = obj && !kube_meta_of(obj).deleting &&
                        !kube_condition_true(json_object_get(obj, "status"), "Initialized") &&
                        !claim_node(c, name, node_name, node, sizeof node);
                if (waits)
                        snprintf(buf, len, "%s", name);
                json_decref(obj);
        }
        json_decref(claims);
        return waits;
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
        if (next == LAUNCHSTEP_NODE_INITIALIZED) {
                res = initialized(c, current, node_name);
                json_decref(stored);
                if (!launchstep_ok(&res))
                        return res;
                launcher__health_note(c, true, NULL);
                return launchstep_then(launcher__record(c, NODECLAIM_STEP_INITIALIZED), launchstep_moved());
        }
        json_decref(stored);
        if (next == LAUNCHSTEP_NODE_WAIT)
                return launchstep_wait(LAUNCHSTEP_POLL_MS);
        int r = launchstep_registered(c->st, node_name);
        if (r < 0)
                return launchstep_error(r, "%s", strerror(-r));
        launcher__health_note(c, true, NULL);
        return launchstep_done();
}

/* ---- held for earlier claims ---- */

/* Is the named claim still ahead of this one: there, not being deleted, and not Initialized? Once it is, the pods
 * planned on its Node carry it as their nominatedNodeName (nominate_pods), so kube-scheduler keeps their room there
 * and cannot give them this Node's. An error reading it counts as no. */
static bool claim_ahead(struct launcher__ctx *c, const char *name) {
        json_t *claim = NULL;
        if (kube_get(c->kube, &kube_nodeclaims, NULL, name, &claim) < 0)
                return false;
        bool ahead = !kube_meta_of(claim).deleting &&
                     !kube_condition_true(json_object_get(claim, "status"), "Initialized");
        json_decref(claim);
        return ahead;
}

/* The first claim named in NODECLAIM_ANNOTATION_AFTER that is still ahead of this one, copied to buf, while the
 * launch began less than NODECLAIM_HOLD_MAX_MS ago; false when none. */
static bool held_for(struct launcher__ctx *c, char *buf, size_t len) {
        const char *after = json_string_value(json_object_get(kube_meta_of(c->claim).annotations,
                                                              NODECLAIM_ANNOTATION_AFTER));
        char names[1024];
        bool held = false;
        if (!after || !*after || c->now - c->st->started_ms > NODECLAIM_HOLD_MAX_MS)
                return false;
        snprintf(names, sizeof names, "%s", after);
        char *save = NULL;
        for (char *n = strtok_r(names, ",", &save); n && !held; n = strtok_r(NULL, ",", &save)) {
                held = claim_ahead(c, n);
                if (held)
                        snprintf(buf, len, "%s", n);
        }
        return held;
}

struct launchstep_result launcher__register(struct launcher__ctx *c) {
        json_t *owned = NULL;
        const json_t *node = find_node(c, &owned);
        if (!owned) /* borrowed from the worker, which drops it at its next lookup (claim_node makes some) */
                owned = json_incref((json_t *)node);
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
        if (launchstep_ok(&res) && round_waits_for(c, n, first, sizeof first)) {
                log_info("launcher: NodeClaim %s: Node %s held until the Node of NodeClaim %s (same round) registered",
                         c->name, n, first);
                json_decref(owned);
                return launchstep_wait(LAUNCHSTEP_POLL_MS);
        }
        if (launchstep_ok(&res)) {
                nominate_pods(c, n);
                res = register_node(c, node);
        }
        json_decref(owned);
        return res;
}

struct launchstep_result launcher__initialize(struct launcher__ctx *c) {
        json_t *owned = NULL;
        const json_t *node = find_node(c, &owned);
        if (!owned) /* borrowed from the worker, which drops it at its next lookup (claim_node makes some) */
                owned = json_incref((json_t *)node);
        struct launchstep_result res = launcher__need_pool(c);
        bool init = launchstep_ok(&res) && node && launchstep_node_is_claims(node, c->uid) &&
                    node_state(c, node) == LAUNCHER_NODE_INITIALIZED;
        const char *name = kube_meta_of(node).name;
        if (launchstep_ok(&res) && name && launchstep_node_is_claims(node, c->uid))
                nominate_pods(c, name); /* again: a failed scheduling attempt may have cleared them */
        if (launchstep_ok(&res))
                res = init ? initialized(c, node, NULL) : launchstep_wait(LAUNCHSTEP_POLL_MS);
        json_decref(owned);
        return res;
}
