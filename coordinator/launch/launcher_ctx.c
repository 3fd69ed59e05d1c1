/* launcher_ctx: one reconcile of one NodeClaim: the claim and its typed status (decoded once, written back as what
 * changed, retried on a conflict while nobody else moved the launch), steps recorded or deferred, and what the
 * steps need (the NodeClass, NodePool, shape and PVE client, a VMID, the Node's labels and taints). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "kube_object.h"

#define MAX_VMID_PROBES 1000

/* ---- the claim and its status ---- */

int launcher__ctx_take(struct launcher__ctx *c, json_t *claim) {
        if (!c->s && !(c->s = malloc(sizeof *c->s))) {
                json_decref(claim);
                return -ENOMEM;
        }
        if (claim != c->claim)
                json_decref(c->claim);
        c->claim = claim;
        c->st = &c->s->st;
        c->status_error[0] = '\0';
        nodeclaim_claim_status(claim, &c->s->base, c->status_error, sizeof c->status_error);
        c->s->st = c->s->kept = c->s->base;
        c->deferred = NODECLAIM_STEP_NONE;
        return 0;
}

void launcher__ctx_drop(struct launcher__ctx *c) {
        if (c->s)
                c->s->st = c->s->kept = c->s->base;
        c->deferred = NODECLAIM_STEP_NONE;
        json_decref(c->nodeclass);
        json_decref(c->pool);
        c->nodeclass = c->pool = NULL;
        c->have_shape = false;
}

void launcher__ctx_done(struct launcher__ctx *c) {
        launcher__ctx_drop(c);
        launcher__unpick_vmid(c);
        json_decref(c->claim);
        c->claim = NULL;
        free(c->s);
        c->s = NULL;
}

enum nodeclaim_step launcher__ctx_step(const struct launcher__ctx *c) {
        return c->deferred != NODECLAIM_STEP_NONE ? c->deferred : c->st->launch_step;
}

void launcher__rollback(struct launcher__ctx *c) {
        c->s->st = c->s->kept;
}

static void step_hooks(struct launcher__ctx *c, enum nodeclaim_step step, bool done) {
        const struct launcher_env *e = &c->l->env;
        if (e->on_step)
                e->on_step(e->userdata, c->name, nodeclaim_step_name(step), done);
}

void launcher__defer(struct launcher__ctx *c, enum nodeclaim_step step) {
        log_info("launcher: NodeClaim %s: %s (recorded with the next step)", c->name, nodeclaim_step_name(step));
        step_hooks(c, step, false);
        c->s->kept = c->s->st;
        c->deferred = step;
        step_hooks(c, step, true);
}

/* ---- status writes ---- */

/* A copy of the claim whose status can be changed: the rest is shared with the claim, which stays as it is. */
static json_t *claim_for_write(const json_t *claim) {
        json_t *obj = json_copy((json_t *)claim), *status = json_object_get(claim, "status");
        json_t *copy = json_is_object(status) ? json_deep_copy(status) : json_object();
        if (!obj || json_object_set_new(obj, "status", copy) < 0) { /* set_new takes copy even when it fails */
                json_decref(obj ? NULL : copy);
                json_decref(obj);
                return NULL;
        }
        return obj;
}

/* One write of what st changed: 0 (the stored claim taken), -ESTALE on a conflict, or another error. */
static int write_status(struct launcher__ctx *c) {
        json_t *obj = claim_for_write(c->claim), *stored = NULL;
        int r = obj ? nodeclaim_status_encode(&c->s->base, c->st, json_object_get(obj, "status"), c->now) : -ENOMEM;
        if (r == 0)
                r = kube_update_from_as_sent(c->kube, &kube_nodeclaims, NULL, "status", c->claim, obj, &stored);
        json_decref(obj);
        if (r == 0) {
                launcher__note_written(c->l, c->name, stored);
                r = launcher__ctx_take(c, stored);
        }
        return r;
}

/* After a conflict: c takes fresh, with this reconcile's changes (and a deferred step) on top. */
static int rebase(struct launcher__ctx *c, json_t *fresh) {
        struct launcher__statuses *mine = malloc(sizeof *mine);
        enum nodeclaim_step deferred = c->deferred;
        if (!mine) {
                json_decref(fresh);
                return -ENOMEM;
        }
        *mine = *c->s;
        const char *uid = kube_meta_of(fresh).uid;
        int r = launcher__ctx_take(c, fresh);
        bool same = r == 0 && !c->status_error[0] &&
                    launchstep_same_launch(c->uid, &mine->base, uid, &c->s->base, kube_deleting(c->claim));
        if (same) {
                nodeclaim_status_rebase(&mine->base, &mine->st, &c->s->base);
                nodeclaim_status_rebase(&mine->base, &mine->kept, &c->s->base);
                c->s->st = mine->st;
                c->s->kept = mine->kept;
                c->deferred = deferred;
        }
        free(mine);
        if (r < 0)
                return r;
        return same ? 0 : -EAGAIN;
}

/* On a conflict: take the fresh claim; go on only if nobody else moved the launch meanwhile. */
static int refresh_after_conflict(struct launcher__ctx *c, struct launchstep_result *ret) {
        json_t *fresh = NULL;
        int r = kube_get(c->kube, &kube_nodeclaims, NULL, c->name, &fresh);
        if (r < 0) {
                *ret = launchstep_error(r, "GET NodeClaim %s: %s", c->name, kube_client_error(c->kube));
                return r;
        }
        return rebase(c, fresh);
}

struct launchstep_result launcher__commit(struct launcher__ctx *c) {
        struct launchstep_result res = launchstep_done();
        int r = -ESTALE;
        for (unsigned attempt = 0; r == -ESTALE && attempt < LAUNCHER__MAX_RESTARTS; attempt++) {
                r = write_status(c);
                if (r == -ESTALE)
                        r = refresh_after_conflict(c, &res) ?: -ESTALE;
                else if (r < 0)
                        res = launchstep_error(r, "write NodeClaim %s status: %s", c->name, kube_client_error(c->kube));
        }
        if (r == 0)
                return launchstep_done();
        launcher__rollback(c);
        if (r == -ESTALE || r == -EAGAIN)
                return launchstep_error(-EAGAIN, "NodeClaim %s changed meanwhile", c->name);
        return res.kind == LAUNCHSTEP_ERROR ? res : launchstep_error(r, "%s", strerror(-r));
}

struct launchstep_result launcher__record(struct launcher__ctx *c, enum nodeclaim_step step) {
        launchstep_record(c->st, step);
        log_info("launcher: NodeClaim %s: %s", c->name, nodeclaim_step_name(step));
        step_hooks(c, step, false);
        struct launchstep_result r = launcher__commit(c);
        if (launchstep_ok(&r))
                step_hooks(c, step, true);
        return r;
}

/* ---- what steps need ---- */

/* From the controller's cache when it has the object (no request per launch step), else from the API server. */
static int need_object(struct launcher__ctx *c, const struct kube_resource *rt, const char *name, json_t **ret) {
        const struct launcher_env *e = &c->l->env;
        json_t *obj = e->cached ? e->cached(e->userdata, rt, name) : NULL;
        if (obj) {
                *ret = obj;
                return 0;
        }
        return kube_get(c->kube, rt, NULL, name, ret);
}

struct launchstep_result launcher__need_nodeclass(struct launcher__ctx *c) {
        const char *name = kube_nodeclaim_of(c->claim).node_class;
        if (c->nodeclass)
                return launchstep_done();
        if (!name)
                return launchstep_fail("InvalidNodeClaim", "spec.nodeClassRef.name: required");
        int r = need_object(c, &kube_nodeclasses, name, &c->nodeclass);
        if (r < 0)
                return launchstep_error(r, "ProxmoxNodeClass %s: %s", name, kube_client_error(c->kube));
        return launchstep_done();
}

struct launchstep_result launcher__need_pool(struct launcher__ctx *c) {
        if (c->pool)
                return launchstep_done();
        int r = need_object(c, &kube_nodepools, c->nodepool, &c->pool);
        if (r < 0)
                return launchstep_error(r, "NodePool %s: %s", c->nodepool, kube_client_error(c->kube));
        return launchstep_done();
}

static int catalog_for(const json_t *spec, struct shape_catalog **ret, char *err, size_t errlen) {
        struct shape_options so;
        shapes_options_default(&so);
        json_t *kubelet = json_object_get(spec, "kubeletConfiguration");
        int r = kubelet ? shapes_options_from_kubelet(kubelet, &so, err, errlen) : 0;
        if (r == 0)
                r = shapes_catalog_default(&so, ret);
        json_t *custom = json_object_get(spec, "instanceTypes");
        if (r == 0 && custom)
                r = shapes_catalog_add_custom(*ret, custom, &so, err, errlen);
        return r;
}

struct launchstep_result launcher__need_shape(struct launcher__ctx *c) {
        struct shape_catalog *cat = NULL;
        char err[256] = "";
        if (c->have_shape)
                return launchstep_done();
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (!launchstep_ok(&res))
                return res;
        const char *type = kube_nodeclaim_of(c->claim).instance_type;
        int r = catalog_for(json_object_get(c->nodeclass, "spec"), &cat, err, sizeof err);
        const struct shape *s = r == 0 && type ? shapes_catalog_find(cat, type) : NULL;
        if (s) {
                c->shape = *s;
                c->have_shape = true;
        }
        shapes_catalog_free(cat);
        if (r < 0)
                return launchstep_fail("InvalidNodeClass", "ProxmoxNodeClass: %s", err);
        if (!s)
                return launchstep_fail("UnknownInstanceType", "instance type %s is not offered by the NodeClass",
                                       type ? type : "(none)");
        return launchstep_done();
}

struct launchstep_result launcher__need_pve(struct launcher__ctx *c) {
        return c->pve ? launchstep_done() : launchstep_fail("UnknownRegion", "region %s is not configured", c->region);
}

/* ---- VMIDs ---- */

struct launchstep_result launcher__pick_vmid(struct launcher__ctx *c, uint32_t *ret_vmid) {
        uint32_t vmid;
        int r = pve_nextid(c->pve, &vmid);
        if (r < 0)
                return launchstep_error(r, "GET /cluster/nextid: %s", pve_client_error(c->pve));
        for (unsigned i = 0; i < MAX_VMID_PROBES; i++, vmid++) {
                if (i > 0 && (r = pve_nextid_check(c->pve, vmid)) == -EEXIST)
                        continue;
                if (r < 0 && r != -EEXIST)
                        return launchstep_error(r, "GET /cluster/nextid?vmid=%u: %s", vmid, pve_client_error(c->pve));
                r = launcher__vmid_hold(c->l, vmid);
                if (r == -EEXIST)
                        continue;
                if (r < 0)
                        return launchstep_error(r, "%s", strerror(-r));
                launcher__unpick_vmid(c);
                c->picked_vmid = vmid;
                *ret_vmid = vmid;
                return launchstep_done();
        }
        return launchstep_error(-ENOSPC, "no free VMID found");
}

void launcher__unpick_vmid(struct launcher__ctx *c) {
        if (!c->picked_vmid)
                return;
        launcher__vmid_release(c->l, c->picked_vmid);
        c->picked_vmid = 0;
}

/* ---- the Node's labels and taints ---- */

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
        json_array_foreach(kube_nodeclaim_of(claim).requirements, i, req) {
                const char *k = json_string_value(json_object_get(req, "key"));
                const char *op = json_string_value(json_object_get(req, "operator"));
                json_t *values = json_object_get(req, "values");
                if (k && op && strcmp(op, "In") == 0 && json_array_size(values) == 1 &&
                    strcmp(k, "kubernetes.io/hostname") != 0 && json_is_string(json_array_get(values, 0)))
                        json_object_set(labels, k, json_array_get(values, 0));
        }
}

json_t *launcher__wanted_labels(struct launcher__ctx *c, bool kubelet_only) {
        json_t *labels = json_object(), *v;
        const char *k;
        const json_t *pool_labels = kube_nodepool_of(c->pool).template_labels;
        if (!labels)
                return NULL;
        json_object_update(labels, (json_t *)pool_labels);
        add_requirement_labels(c->claim, labels);
        json_object_set_new(labels, LAUNCHER__LABEL_NODEPOOL, json_string(c->nodepool));
        if (c->have_shape)
                json_object_set_new(labels, LAUNCHER__LABEL_INSTANCE_TYPE, json_string(c->shape.name));
        const char *nodeclass = c->nodeclass ? kube_meta_of(c->nodeclass).name : NULL;
        if (nodeclass)
                json_object_set_new(labels, LAUNCHER__LABEL_NODECLASS, json_string(nodeclass));
        void *tmp;
        json_object_foreach_safe(labels, tmp, k, v) {
                if (!json_is_string(v) || (kubelet_only && !kubelet_may_set(k)))
                        json_object_del(labels, k);
        }
        return labels;
}

/* spec.taints (+ startupTaints) of the claim, else of its NodePool template. */
static const json_t *taint_list(struct launcher__ctx *c, const char *key) {
        struct kube_nodeclaim nc;
        kube_nodeclaim_decode(c->claim, &nc);
        const json_t *t = strcmp(key, "startupTaints") == 0 ? nc.startup_taints : nc.taints;
        if (t)
                return t;
        return json_object_get(kube_nodepool_of(c->pool).template_spec, key);
}

const json_t *launcher__startup_taints(struct launcher__ctx *c) {
        return taint_list(c, "startupTaints");
}

static void append_taints(json_t *out, const json_t *list) {
        size_t i;
        json_t *t;
        json_array_foreach(list, i, t) {
                json_t *o = json_pack("{s:O, s:O}", "key", json_object_get(t, "key"), "effect",
                                      json_object_get(t, "effect"));
                if (o && json_is_string(json_object_get(t, "value")))
                        json_object_set(o, "value", json_object_get(t, "value"));
                if (o)
                        json_array_append_new(out, o);
        }
}

json_t *launcher__wanted_taints(struct launcher__ctx *c, bool with_startup) {
        json_t *out = json_array();
        if (!out)
                return NULL;
        append_taints(out, taint_list(c, "taints"));
        if (with_startup)
                append_taints(out, launcher__startup_taints(c));
        return out;
}
