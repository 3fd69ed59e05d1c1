/* launcher_join: the Node of a launched claim (labels and taints of its NodePool, the unregistered taint gone),
 * Registered and Initialized, and the clean-up of the join token and the cloud-init ISO. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cloudinit.h"
#include "log.h"
#include "tokens.h"

/* ---- wanted labels and taints ---- */

/* Is the label prefix (plen bytes of key) domain or a subdomain of it? */
static bool in_domain(const char *key, size_t plen, const char *domain) {
        size_t n = strlen(domain);
        if (plen == n)
                return strncmp(key, domain, n) == 0;
        return plen > n && key[plen - n - 1] == '.' && strncmp(key + plen - n, domain, n) == 0;
}

/* Labels the kubelet may set itself with --node-labels (its restriction on kubernetes.io/k8s.io prefixes). */
static bool kubelet_may_set(const char *key) {
        static const char *const allowed_prefixes[] = { "kubelet.kubernetes.io/", "node.kubernetes.io/", NULL };
        static const char *const allowed[] = { "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
                                               "topology.kubernetes.io/region", "topology.kubernetes.io/zone", NULL };
        const char *slash = strchr(key, '/');
        if (!slash)
                return true;
        for (size_t i = 0; allowed[i]; i++)
                if (strcmp(key, allowed[i]) == 0)
                        return true;
        for (size_t i = 0; allowed_prefixes[i]; i++)
                if (strncmp(key, allowed_prefixes[i], strlen(allowed_prefixes[i])) == 0)
                        return true;
        size_t plen = (size_t)(slash - key);
        return !in_domain(key, plen, "kubernetes.io") && !in_domain(key, plen, "k8s.io");
}

static void add_requirement_labels(const json_t *claim, json_t *labels) {
        size_t i;
        json_t *req;
        json_array_foreach(json_object_get(json_object_get(claim, "spec"), "requirements"), i, req) {
                const char *k = json_string_value(json_object_get(req, "key"));
                const char *op = json_string_value(json_object_get(req, "operator"));
                json_t *values = json_object_get(req, "values");
                if (k && op && strcmp(op, "In") == 0 && json_array_size(values) == 1 &&
                    strcmp(k, "kubernetes.io/hostname") != 0 && json_is_string(json_array_get(values, 0)))
                        json_object_set(labels, k, json_array_get(values, 0));
        }
}

json_t *launcher_wanted_labels(struct lctx *c, bool kubelet_only) {
        json_t *labels = json_object(), *v;
        const char *k;
        json_t *pool_labels = json_object_get(
                json_object_get(json_object_get(json_object_get(c->pool, "spec"), "template"), "metadata"), "labels");
        if (!labels)
                return NULL;
        json_object_update(labels, pool_labels);
        add_requirement_labels(c->claim, labels);
        json_object_set_new(labels, LAUNCHER_LABEL_NODEPOOL, json_string(c->nodepool));
        if (c->have_shape)
                json_object_set_new(labels, LAUNCHER_LABEL_INSTANCE_TYPE, json_string(c->shape.name));
        if (c->nodeclass)
                json_object_set(labels, LAUNCHER_LABEL_NODECLASS,
                                json_object_get(json_object_get(c->nodeclass, "metadata"), "name"));
        void *tmp;
        json_object_foreach_safe(labels, tmp, k, v) {
                if (!json_is_string(v) || (kubelet_only && !kubelet_may_set(k)))
                        json_object_del(labels, k);
        }
        return labels;
}

/* spec.taints (+ startupTaints) of the claim, else of its NodePool template. */
static const json_t *taint_list(struct lctx *c, const char *key) {
        const json_t *t = json_object_get(json_object_get(c->claim, "spec"), key);
        if (t)
                return t;
        return json_object_get(json_object_get(json_object_get(json_object_get(c->pool, "spec"), "template"), "spec"),
                               key);
}

static void append_taints(json_t *out, const json_t *list) {
        size_t i;
        json_t *t;
        json_array_foreach(list, i, t) {
                json_t *o = json_pack("{s:O, s:O}", "key", json_object_get(t, "key"), "effect", json_object_get(t, "effect"));
                if (o && json_is_string(json_object_get(t, "value")))
                        json_object_set(o, "value", json_object_get(t, "value"));
                if (o)
                        json_array_append_new(out, o);
        }
}

json_t *launcher_wanted_taints(struct lctx *c, bool with_startup) {
        json_t *out = json_array();
        if (!out)
                return NULL;
        append_taints(out, taint_list(c, "taints"));
        if (with_startup)
                append_taints(out, taint_list(c, "startupTaints"));
        return out;
}

/* ---- the Node ---- */

static const json_t *find_node(struct lctx *c, json_t **owned) {
        const struct launcher_env *e = &c->l->env;
        const char *pid = launcher_status_str(c, "providerID");
        if (e->node_by_provider_id)
                return e->node_by_provider_id(e->userdata, pid);
        json_t *list = NULL, *n;
        size_t i;
        *owned = NULL;
        if (kube_list(c->kube, &kube_nodes, NULL, NULL, &list) < 0)
                return NULL;
        json_array_foreach(json_object_get(list, "items"), i, n) {
                const char *p = json_string_value(json_object_get(json_object_get(n, "spec"), "providerID"));
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

/* Set the wanted labels, add missing wanted taints and drop the unregistered taint. */
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
                const char *key = json_string_value(json_object_get(v, "key"));
                if (key && strcmp(key, CLOUDINIT_UNREGISTERED_TAINT_KEY) == 0)
                        changed = true;
                else
                        json_array_append(out, v);
        }
        json_array_foreach(e->taints, i, v) {
                size_t j;
                json_t *w;
                bool present = false;
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

static enum launcher_node_state node_state(struct lctx *c, const json_t *node) {
        return launcher_node_state(node, taint_list(c, "startupTaints"));
}

static int record_initialized(struct lctx *c, const char *node_name);

/* A Ready Node whose ephemeral taints Kubernetes has not taken off yet: wait for them (its next event brings
 * Registered and Initialized in one write), but not for ever: Ready for LAUNCHER_SETTLE_MAX_MS (the node lifecycle
 * controller takes the not-ready taint off within its 5 s monitor period), or since an unknown time, and it is
 * recorded Registered, to wait for Initialized like any other. */
static bool settling(const struct lctx *c, const json_t *node) {
        int64_t since = launcher_node_ready_since(node);
        return since >= 0 && c->now - since < LAUNCHER_SETTLE_MAX_MS;
}

/* Label and taint the Node (from the informer's copy; a conflict reads it again), then record Registered, or
 * Initialized at once when the Node is ready already (one status write instead of two). */
static int register_node(struct lctx *c, const json_t *node) {
        const char *node_name = json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
        struct node_edit e = { launcher_wanted_labels(c, false), launcher_wanted_taints(c, false) };
        json_t *stored = NULL;
        int r = e.labels && e.taints ? kube_modify_from(c->kube, &kube_nodes, NULL, node_name, NULL, node, node_apply,
                                                        &e, 0, &stored)
                                     : -ENOMEM;
        json_decref(e.labels);
        json_decref(e.taints);
        if (r < 0)
                return launcher_errf(c, r, "label Node %s: %s", node_name, kube_client_error(c->kube));
        log_info("launcher: NodeClaim %s: Node %s registered", c->name, node_name);
        const json_t *current = stored ? stored : node;
        enum launcher_node_state state = node_state(c, current);
        bool wait = state == LAUNCHER_NODE_SETTLING && settling(c, current);
        json_decref(stored);
        if (state == LAUNCHER_NODE_INITIALIZED)
                return record_initialized(c, node_name);
        if (wait)
                return launcher_wait(c, LAUNCHER_POLL_MS);
        json_t *ch = json_pack("{s:s, s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]}", "nodeName", node_name,
                               "conditions", "type", "Registered", "status", "True", "reason", "Registered", "message",
                               "", "type", "Initialized", "status", "Unknown", "reason", "AwaitingReady", "message",
                               "waiting for the Node to be Ready");
        return launcher_set_step(c, STEP_REGISTERED, ch);
}

int launcher_step_register(struct lctx *c) {
        json_t *owned = NULL;
        const json_t *node = find_node(c, &owned);
        const char *n = json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
        if (!n || !*n) {
                json_decref(owned);
                int64_t left = launcher_status_time(c, "startedAt") + c->l->o.registration_timeout_ms - c->now;
                if (left <= 0)
                        return launcher_failf(c, "RegistrationTimeout", "no Node with providerID %s within %lld s",
                                              launcher_status_str(c, "providerID"),
                                              (long long)(c->l->o.registration_timeout_ms / 1000));
                return launcher_wait(c, left < LAUNCHER_POLL_MS ? left : LAUNCHER_POLL_MS);
        }
        int r = launcher_need_nodeclass(c);
        if (r == 0)
                r = launcher_need_pool(c);
        if (r == 0)
                r = launcher_need_shape(c);
        if (r == 0)
                r = register_node(c, node);
        json_decref(owned);
        return r;
}

/* ---- initialized ---- */

int launcher_delete_token(struct kube_client *kube, const char *token_id) {
        char name[64];
        snprintf(name, sizeof name, TOKENS_SECRET_PREFIX "%s", token_id);
        int r = kube_delete(kube, &kube_secrets, TOKENS_NAMESPACE, name, NULL, NULL);
        return r == -ENOENT ? 0 : r;
}

/* Delete the ISO volume; one that is gone already is no error (Proxmox fails the delete task, or the call, with
 * "does not exist"), so no listing first. Proxmox waits for its delete task (delay) and answers null when it went
 * well, so the task is polled only when it failed or took longer. */
int launcher_delete_iso(struct pve_client *pve, const char *host, const char *volume, char *err, size_t errlen) {
        char storage[64], *upid = NULL;
        const char *colon = strchr(volume, ':');
        if (!colon || (size_t)(colon - volume) >= sizeof storage)
                return 0;
        snprintf(storage, sizeof storage, "%.*s", (int)(colon - volume), volume);
        int r = pve_storage_content_delete(pve, host, storage, volume, LAUNCHER_ISO_DELETE_DELAY_S, &upid);
        if (r == 0)
                r = launcher_pve_task_wait(pve, upid, LAUNCHER_POLL_LATER_MS);
        free(upid);
        if (r < 0 && (r == -ENOENT || strstr(pve_client_error(pve), "does not exist") ||
                      strstr(pve_client_error(pve), "No such file")))
                r = 0;
        if (r < 0)
                snprintf(err, errlen, "delete %s: %s", volume, pve_client_error(pve));
        return r;
}

/* Eject the ISO (a media change the running VM takes at once, so the synchronous PUT; the empty CD-ROM drive
 * stays) and delete it. */
static int remove_iso(struct lctx *c, uint32_t vmid, const char *volume) {
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_add(&p, "ide2", "none,media=cdrom");
        int r = pve_vm_config_put(c->pve, c->host, vmid, &p);
        pve_params_done(&p);
        if (r < 0)
                return launcher_errf(c, r, "eject ISO of VM %u: %s", vmid, pve_client_error(c->pve));
        return launcher_delete_iso(c->pve, c->host, volume, c->err, sizeof c->err);
}

static int clean_up_join(struct lctx *c) {
        const char *token = launcher_status_str(c, "tokenID"), *iso = launcher_status_str(c, "isoVolume");
        int r = token[0] ? launcher_delete_token(c->kube, token) : 0;
        if (r < 0)
                return launcher_errf(c, r, "delete join token %s: %s", token, kube_client_error(c->kube));
        r = iso[0] && launcher_need_pve(c) == 0 ? remove_iso(c, (uint32_t)launcher_status_int(c, "vmid"), iso) : 0;
        return r;
}

/* The join is done: delete the token and the ISO, and record Initialized (with Registered, when this reconcile
 * also registered the Node: node_name set). */
static int record_initialized(struct lctx *c, const char *node_name) {
        int r = clean_up_join(c);
        if (r != 0)
                return r;
        json_t *ch = json_pack("{s:n, s:n, s:[{s:s, s:s, s:s, s:s}]}", "tokenID", "isoVolume", "conditions", "type",
                               "Initialized", "status", "True", "reason", "Initialized", "message", "");
        json_t *registered = node_name ? json_pack("{s:s, s:s, s:s, s:s}", "type", "Registered", "status", "True",
                                                   "reason", "Registered", "message", "")
                                       : NULL;
        if (ch && node_name) {
                json_object_set_new(ch, "nodeName", json_string(node_name));
                json_array_insert_new(json_object_get(ch, "conditions"), 0, registered);
        } else {
                json_decref(registered);
        }
        log_info("launcher: NodeClaim %s: initialized", c->name);
        return launcher_set_step(c, STEP_INITIALIZED, ch);
}

int launcher_step_initialize(struct lctx *c) {
        json_t *owned = NULL;
        const json_t *node = find_node(c, &owned);
        int r = launcher_need_pool(c);
        bool init = r == 0 && node && node_state(c, node) == LAUNCHER_NODE_INITIALIZED;
        json_decref(owned);
        if (r != 0)
                return r;
        if (!init)
                return launcher_wait(c, LAUNCHER_POLL_MS);
        return record_initialized(c, NULL);
}
