/* provisioner_plan: the pure half of a provisioning round: the simulation input from cached objects, NodeClaim
 * objects, pool usage and event reasons. No I/O. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cloudinit.h"
#include "disrupt.h"
#include "kube.h"
#include "launchstep.h"
#include "nodeclaim.h"
#include "provisioner.h"
#include "quantity.h"
#include "rfc3339.h"
#include "simulate_json.h"
#include "kube_object.h"
#include "kube_types.h"

#define API_VERSION "pvescale.io/v1alpha1"
#define ERR_LEN 256
#define NAME_MAX_LEN 63
#define NAME_SUFFIX_LEN 5

static bool is_set(const json_t *v) {
        return v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0);
}

static int problem(struct provisioner_round *r, const char *kind, const json_t *obj, const char *err) {
        const char *ns = kube_meta_str(obj, "namespace"), *name = kube_meta_str(obj, "name");
        json_t *s = json_sprintf("%s %s%s%s: %s", kind, ns ? ns : "", ns ? "/" : "", name ? name : "(unnamed)", err);
        return s && json_array_append_new(r->problems, s) == 0 ? 0 : -ENOMEM;
}

/* 0 when added, 1 when left out as malformed, -ENOMEM. */
static int verdict(struct provisioner_round *r, int rc, const char *kind, const json_t *obj, const char *err) {
        if (rc == -ENOMEM)
                return rc;
        if (rc < 0)
                return problem(r, kind, obj, err) < 0 ? -ENOMEM : 1;
        return 0;
}

/* ---- input ---- */

static int add_classes(struct provisioner_round *r, const json_t *classes) {
        struct shape_options base;
        shapes_options_default(&base);
        r->catalogs = calloc(json_array_size(classes) + 1, sizeof *r->catalogs);
        r->classes = calloc(json_array_size(classes) + 1, sizeof *r->classes);
        if (!r->catalogs || !r->classes)
                return -ENOMEM;
        size_t i;
        json_t *nc;
        json_array_foreach(classes, i, nc) {
                struct shape_catalog *cat = NULL;
                char err[ERR_LEN];
                int rc = verdict(r, simulate_json_nodeclass(r->in, nc, &base, NULL, &cat, err, sizeof err),
                                 "ProxmoxNodeClass", nc, err);
                if (rc < 0)
                        return rc;
                if (rc == 0) {
                        r->classes[r->n_catalogs] = nc;
                        r->catalogs[r->n_catalogs++] = cat;
                }
        }
        return 0;
}

const struct shape_catalog *provisioner_round_catalog(const struct provisioner_round *r, const char *nodeclass) {
        for (size_t i = 0; nodeclass && i < r->in->n_classes && i < r->n_catalogs; i++)
                if (strcmp(r->in->classes[i]->name, nodeclass) == 0)
                        return r->catalogs[i];
        return NULL;
}

int provisioner_round_exclude_hosts(struct provisioner_round *r, size_t pool, const json_t *hosts) {
        struct sim_nodepool *p = r->in->pools[pool];
        size_t n = json_array_size(hosts);
        if (n == 0)
                return 0;
        const char **values = simulate_alloc(r->in, n * sizeof *values);
        struct sim_requirement *reqs = simulate_alloc(r->in, (p->n_reqs + 1) * sizeof *reqs);
        if (!values || !reqs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (!(values[i] = simulate_strdup(r->in, json_string_value(json_array_get(hosts, i)))))
                        return -ENOMEM;
        memcpy(reqs, p->reqs, p->n_reqs * sizeof *reqs);
        reqs[p->n_reqs] = (struct sim_requirement){ SIM_LABEL_ZONE, SIM_OP_NOT_IN, values, n };
        p->reqs = reqs;
        p->n_reqs++;
        return 0;
}

static int add_pools(struct provisioner_round *r, const struct provisioner_snapshot *snap) {
        r->pools = calloc(json_array_size(snap->pools) + 1, sizeof *r->pools);
        if (!r->pools)
                return -ENOMEM;
        size_t i;
        json_t *pool;
        json_array_foreach(snap->pools, i, pool) {
                char err[ERR_LEN];
                int rc = verdict(r, simulate_json_nodepool(r->in, pool, NULL, err, sizeof err), "NodePool", pool, err);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        r->pools[r->in->n_pools - 1] = pool;
        }
        return 0;
}

static int add_daemonsets(struct provisioner_round *r, const json_t *daemonsets) {
        size_t i;
        json_t *ds;
        json_array_foreach(daemonsets, i, ds) {
                char err[ERR_LEN];
                int rc = verdict(r, simulate_json_daemonset(r->in, ds, NULL, err, sizeof err), "DaemonSet", ds, err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static bool initialized(const json_t *claim) {
        return kube_condition_true(json_object_get(claim, "status"), "Initialized");
}

/* Keys a Node is known by: "p:<providerID>" and "n:<name>"; 0 or 1 when a key would not fit. */
static int node_key(char *buf, size_t size, char kind, const char *value) {
        return value && *value && snprintf(buf, size, "%c:%s", kind, value) < (int)size ? 0 : 1;
}

/* The keys of the Nodes, to tell registered claims from in-flight ones. A Node that still carries the
 * unregistered taint is left out: the launcher removes that taint before it records Initialized, so such a copy
 * is older than its claim's (the two watches deliver in their own order), and the claim still stands for it. */
static json_t *node_index(const json_t *nodes) {
        json_t *idx = json_object(), *node;
        size_t i;
        char key[512];
        json_array_foreach(nodes, i, node) {
                struct kube_node n;
                kube_node_decode(node, &n);
                if (kube_taints_have_key(n.taints, CLOUDINIT_UNREGISTERED_TAINT_KEY))
                        continue;
                if (node_key(key, sizeof key, 'p', n.provider_id) == 0)
                        json_object_set_new(idx, key, json_true());
                if (node_key(key, sizeof key, 'n', n.meta.name) == 0)
                        json_object_set_new(idx, key, json_true());
        }
        return idx;
}

static bool claim_registered(const json_t *claim, const json_t *idx) {
        const json_t *st = json_object_get(claim, "status");
        char key[512];
        return (node_key(key, sizeof key, 'p', kube_str(st, "providerID")) == 0 && json_object_get(idx, key)) ||
               (node_key(key, sizeof key, 'n', kube_str(st, "nodeName")) == 0 && json_object_get(idx, key));
}

/* A claim is in flight while it has no Node, and also, as in Karpenter, until it is Initialized. */
static bool claim_in_flight(const json_t *claim, const json_t *idx) {
        return !kube_deleting(claim) && (!initialized(claim) || !claim_registered(claim, idx));
}

/* The keys of the Nodes that claims in flight stand for, each with the claim's name. */
static json_t *standing_index(const json_t *claims, const json_t *idx) {
        json_t *standing = json_object(), *claim;
        size_t i;
        char key[512];
        json_array_foreach(claims, i, claim) {
                const json_t *st = json_object_get(claim, "status");
                const char *name = kube_meta_str(claim, "name");
                if (!name || !claim_in_flight(claim, idx))
                        continue;
                if (node_key(key, sizeof key, 'p', kube_str(st, "providerID")) == 0)
                        json_object_set_new(standing, key, json_string(name));
                if (node_key(key, sizeof key, 'n', kube_str(st, "nodeName")) == 0)
                        json_object_set_new(standing, key, json_string(name));
        }
        return standing;
}

/* The claim in flight that stands for this Node, or NULL. */
static json_t *standing_claim(const json_t *node, const json_t *standing) {
        char key[512];
        json_t *claim = NULL;
        if (node_key(key, sizeof key, 'p', kube_node_of(node).provider_id) == 0)
                claim = json_object_get(standing, key);
        if (!claim && node_key(key, sizeof key, 'n', kube_meta_str(node, "name")) == 0)
                claim = json_object_get(standing, key);
        return claim;
}

static int add_node(struct provisioner_round *r, const json_t *obj, bool claim) {
        char err[ERR_LEN];
        int rc;
        if (claim) {
                const char *nc = kube_nodeclaim_of(obj).node_class;
                rc = simulate_json_nodeclaim(r->in, obj, provisioner_round_catalog(r, nc), NULL, err, sizeof err);
        } else {
                struct sim_node *n = NULL;
                rc = simulate_json_node(r->in, obj, &n, err, sizeof err);
                if (rc == 0) /* marked for deletion: it holds no limit against its replacement */
                        n->leaving = kube_deleting(obj) || launchstep_node_disrupted(kube_node_of(obj).taints);
        }
        rc = verdict(r, rc, claim ? "NodeClaim" : "Node", obj, err);
        if (rc == 0)
                r->nodes[r->in->n_nodes - 1] = obj;
        return rc < 0 ? rc : 0;
}

/* The Nodes, except those a claim in flight stands for (noted in r->node_claims), then the claims in flight. */
static int add_nodes(struct provisioner_round *r, const struct provisioner_snapshot *snap) {
        r->nodes = calloc(json_array_size(snap->nodes) + json_array_size(snap->claims) + 1, sizeof *r->nodes);
        json_t *idx = node_index(snap->nodes), *standing = idx ? standing_index(snap->claims, idx) : NULL;
        int rc = r->nodes && standing && r->node_claims ? 0 : -ENOMEM;
        size_t i;
        json_t *o;
        json_array_foreach(snap->nodes, i, o) {
                json_t *claim = standing_claim(o, standing);
                const char *name = kube_meta_str(o, "name");
                if (rc == 0 && claim && name)
                        rc = json_object_set(r->node_claims, name, claim) == 0 ? 0 : -ENOMEM;
                else if (rc == 0)
                        rc = add_node(r, o, false);
        }
        json_array_foreach(snap->claims, i, o) {
                if (rc == 0 && claim_in_flight(o, idx))
                        rc = add_node(r, o, true);
        }
        json_decref(standing);
        json_decref(idx);
        return rc;
}

/* Claims Initialized less than PROVISIONER_SETTLE_MS before now_ms, not being deleted: {"<Node>": "<claim>"}. */
static json_t *settling_index(const json_t *claims, int64_t now_ms) {
        json_t *out = json_object(), *claim;
        size_t i;
        json_array_foreach(claims, i, claim) {
                const json_t *st = json_object_get(claim, "status");
                const char *since = kube_str(kube_condition(st, "Initialized"), "lastTransitionTime");
                const char *node = kube_str(st, "nodeName"), *name = kube_meta_str(claim, "name");
                int64_t at = 0;
                if (out && now_ms && name && node && *node && !kube_deleting(claim) && initialized(claim) && since &&
                    rfc3339_parse(since, &at) == 0 && now_ms - at < PROVISIONER_SETTLE_MS)
                        json_object_set_new(out, node, json_string(name));
        }
        return out;
}

/* The input node a pending pod's nomination keeps it on: its claim while in flight, else the Node of its claim
 * while that claim settles (r->settling); NULL when neither is in the input. */
static const char *nominated_claim(const struct provisioner_round *r, const json_t *nominated, const json_t *pod) {
        const char *uid = kube_meta_str(pod, "uid");
        const char *claim = uid ? json_string_value(json_object_get(nominated, uid)) : NULL;
        for (size_t i = 0; claim && i < r->in->n_nodes; i++) {
                const struct sim_node *n = r->in->nodes[i];
                const char *of = json_string_value(json_object_get(r->settling, n->name));
                if ((n->in_flight && strcmp(n->name, claim) == 0) ||
                    (!n->in_flight && !n->leaving && of && strcmp(of, claim) == 0))
                        return n->name;
        }
        return NULL;
}

static bool uid_in(const json_t *set, const json_t *pod) {
        const char *uid = kube_meta_str(pod, "uid");
        return set && uid && json_object_get(set, uid);
}

/* Is the pod bound to a Node marked for deletion (being deleted, or tainted by a disruption)? */
static bool on_leaving_node(const struct provisioner_round *r, const json_t *pod) {
        const char *node = kube_str(json_object_get(pod, "spec"), "nodeName");
        for (size_t i = 0; node && i < r->in->n_nodes; i++)
                if (r->in->nodes[i]->leaving && strcmp(r->in->nodes[i]->name, node) == 0)
                        return true;
        return false;
}

/* A pod that will need room elsewhere: on a leaving Node, not going already, not its DaemonSet's. */
static bool rescheduled(const struct provisioner_round *r, const json_t *pod) {
        return !kube_deleting(pod) && !kube_owned_by_daemonset(pod) && on_leaving_node(r, pod);
}

/* Which pods add_pods takes: the pending ones (bound to the claim they were nominated to), the bound pods of
 * leaving Nodes (unbound), or the other bound pods (those of leaving Nodes too, unless they entered unbound). */
enum pod_set { PODS_PENDING, PODS_LEAVING, PODS_BOUND };

static bool takes(const struct provisioner_round *r, enum pod_set set, bool reschedule, const json_t *pod) {
        if (set == PODS_PENDING)
                return true;
        return set == PODS_LEAVING ? rescheduled(r, pod) : !(reschedule && rescheduled(r, pod));
}

static int add_pods(struct provisioner_round *r, const json_t *pods, enum pod_set set,
                    const struct provisioner_snapshot *snap) {
        size_t i;
        json_t *pod;
        json_array_foreach(pods, i, pod) {
                struct sim_pod *sp;
                char err[ERR_LEN];
                if (!takes(r, set, snap->reschedule_leaving, pod))
                        continue;
                int rc = verdict(r, simulate_json_pod(r->in, pod, &sp, err, sizeof err), "Pod", pod, err);
                if (rc < 0)
                        return rc;
                if (rc > 0)
                        continue;
                if (set == PODS_PENDING) {
                        sp->node_name = nominated_claim(r, snap->nominated, pod);
                        sp->skip_nodes = uid_in(snap->skip_nodes, pod);
                }
                else if (set == PODS_LEAVING)
                        sp->node_name = NULL;
                else if (sp->node_name && json_object_get(r->node_claims, sp->node_name))
                        sp->node_name = json_string_value(json_object_get(r->node_claims, sp->node_name));
                else if (!sp->node_name)
                        r->in->n_pods--; /* not bound after all: leave it out */
                if (set != PODS_BOUND || sp->node_name)
                        r->pods[r->in->n_pods - 1] = pod;
        }
        return 0;
}

int provisioner_round_new(const struct provisioner_snapshot *snap, struct provisioner_round **ret) {
        struct provisioner_round *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->in = simulate_input_new();
        r->problems = json_array();
        r->node_claims = json_object();
        r->settling = settling_index(snap->claims, snap->now_ms);
        r->pods = calloc(json_array_size(snap->candidates) + json_array_size(snap->bound) + 1, sizeof *r->pods);
        int rc = r->in && r->problems && r->pods && r->settling ? 0 : -ENOMEM;
        if (rc == 0)
                rc = add_classes(r, snap->classes);
        if (rc == 0)
                rc = add_pools(r, snap);
        if (rc == 0)
                rc = add_daemonsets(r, snap->daemonsets);
        if (rc == 0)
                rc = add_nodes(r, snap);
        if (rc == 0)
                rc = add_pods(r, snap->candidates, PODS_PENDING, snap);
        r->n_pending = r->in ? r->in->n_pods : 0;
        if (rc == 0 && snap->reschedule_leaving)
                rc = add_pods(r, snap->bound, PODS_LEAVING, snap);
        r->n_candidates = r->in ? r->in->n_pods : 0;
        if (rc == 0)
                rc = add_pods(r, snap->bound, PODS_BOUND, snap);
        if (rc < 0) {
                provisioner_round_free(r);
                return rc;
        }
        *ret = r;
        return 0;
}

void provisioner_round_free(struct provisioner_round *r) {
        if (!r)
                return;
        simulate_input_free(r->in);
        for (size_t i = 0; i < r->n_catalogs; i++)
                shapes_catalog_free(r->catalogs[i]);
        free(r->catalogs);
        free(r->pods);
        free(r->nodes);
        free(r->pools);
        free(r->classes);
        json_decref(r->problems);
        json_decref(r->node_claims);
        json_decref(r->settling);
        free(r);
}

/* ---- VM sizes ---- */

static uint64_t hugepage_kib(const struct shape *s) {
        if (s->capacity.v[RESOURCE_HUGEPAGES_1GI] > 0)
                return 1024 * 1024;
        return s->capacity.v[RESOURCE_HUGEPAGES_2MI] > 0 ? 2048 : 0;
}

static struct provisioner_shape *find_size(struct provisioner_shapes *s, uint32_t vcpus, uint64_t mem, uint64_t hp) {
        for (size_t i = 0; i < s->n; i++)
                if (s->items[i].vcpus == vcpus && s->items[i].memory_bytes == mem && s->items[i].hugepage_kib == hp)
                        return &s->items[i];
        return NULL;
}

static int add_name(struct provisioner_shape *ps, const char *name) {
        for (size_t i = 0; i < ps->n_names; i++)
                if (strcmp(ps->names[i], name) == 0)
                        return 0;
        const char **n = realloc(ps->names, (ps->n_names + 1) * sizeof *n);
        if (!n)
                return -ENOMEM;
        n[ps->n_names++] = name;
        ps->names = n;
        return 0;
}

static int add_size(struct provisioner_shapes *s, const struct shape *sh) {
        uint64_t hp = hugepage_kib(sh);
        struct provisioner_shape *ps = find_size(s, sh->vcpus, sh->vm_memory_bytes, hp);
        if (!ps) {
                struct provisioner_shape *items = realloc(s->items, (s->n + 1) * sizeof *items);
                if (!items)
                        return -ENOMEM;
                s->items = items;
                ps = &s->items[s->n++];
                *ps = (struct provisioner_shape){ sh->vcpus, sh->vm_memory_bytes, hp, NULL, 0 };
        }
        return add_name(ps, sh->name);
}

int provisioner_shapes_collect(const struct provisioner_round *r, struct provisioner_shapes *ret) {
        struct provisioner_shapes s = { 0 };
        for (size_t c = 0; c < r->n_catalogs; c++)
                for (size_t i = 0; i < r->catalogs[c]->n; i++)
                        if (add_size(&s, &r->catalogs[c]->items[i]) < 0) {
                                provisioner_shapes_done(&s);
                                return -ENOMEM;
                        }
        *ret = s;
        return 0;
}

void provisioner_shapes_done(struct provisioner_shapes *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->items[i].names);
        free(s->items);
        *s = (struct provisioner_shapes){ 0 };
}

/* ---- claims ---- */

char *provisioner_claim_name(const char *pool, uint64_t rnd, char *buf, size_t len) {
        static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789"; /* as Kubernetes' generateName */
        char suffix[NAME_SUFFIX_LEN + 1];
        for (int i = 0; i < NAME_SUFFIX_LEN; i++) {
                suffix[i] = alphabet[rnd % (sizeof alphabet - 1)];
                rnd /= sizeof alphabet - 1;
        }
        suffix[NAME_SUFFIX_LEN] = '\0';
        int keep = NAME_MAX_LEN - NAME_SUFFIX_LEN - 1;
        snprintf(buf, len, "%.*s-%s", keep, pool, suffix);
        return buf;
}

static json_t *requirement(const char *key, const char *value) {
        return json_pack("{s:s, s:s, s:[s]}", "key", key, "operator", "In", "values", value);
}

/* Copy the template's taints, startupTaints, expireAfter and terminationGracePeriod into spec (as Karpenter does). */
static void copy_template(json_t *spec, const json_t *pool) {
        static const char *const keys[] = { "taints", "startupTaints", "expireAfter", "terminationGracePeriod" };
        const json_t *ts = kube_nodepool_of(pool).template_spec;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
                json_t *v = json_object_get(ts, keys[i]);
                if (is_set(v) && !(json_is_array(v) && json_array_size(v) == 0))
                        json_object_set_new(spec, keys[i], json_deep_copy(v));
        }
}

/* What the claim is launched from, for drift: the hashes of its pool's template and of its node class. */
static json_t *drift_annotations(const struct provisioner_round *r, size_t pool) {
        const char *nc = r->in->pools[pool]->nodeclass;
        char h[DISRUPT_HASH_LEN];
        json_t *a = json_object();
        if (a && disrupt_hash_nodepool(r->pools[pool], h) == 0)
                json_object_set_new(a, DISRUPT_ANNOTATION_NODEPOOL_HASH, json_string(h));
        for (size_t k = 0; a && nc && k < r->n_catalogs; k++)
                if (strcmp(r->in->classes[k]->name, nc) == 0 && disrupt_hash_nodeclass(r->classes[k], h) == 0) {
                        json_object_set_new(a, DISRUPT_ANNOTATION_NODECLASS_HASH, json_string(h));
                        json_object_set_new(a, DISRUPT_ANNOTATION_NODECLASS_HASH_VERSION,
                                            json_string(DISRUPT_NODECLASS_HASH_VERSION));
                }
        return a;
}

json_t *provisioner_claim_object(const struct provisioner_round *r, const struct sim_result *res, size_t i,
                                 const char *name) {
        const struct sim_claim *c = &res->claims[i];
        const struct sim_nodepool *sp = r->in->pools[c->nodepool];
        json_t *labels = json_object(), *reqs = json_array();
        for (size_t k = 0; labels && reqs && k < c->n_labels; k++) {
                json_object_set_new(labels, c->labels[k].key, json_string(c->labels[k].value));
                json_array_append_new(reqs, requirement(c->labels[k].key, c->labels[k].value));
        }
        json_t *spec = json_pack("{s:s, s:{s:s, s:s, s:s}, s:s, s:o, s:{s:o}}", "nodePool", sp->name, "nodeClassRef",
                                 "group", "pvescale.io", "kind", "ProxmoxNodeClass", "name", sp->nodeclass,
                                 "instanceType", c->shape->name, "requirements", reqs, "resources", "requests",
                                 resources_to_json(&c->requests));
        if (!spec) {
                json_decref(labels);
                return NULL;
        }
        copy_template(spec, r->pools[c->nodepool]);
        return json_pack("{s:s, s:s, s:{s:s, s:o, s:o, s:[s]}, s:o}", "apiVersion", API_VERSION, "kind", "NodeClaim",
                         "metadata", "name", name, "labels", labels, "annotations", drift_annotations(r, c->nodepool),
                         "finalizers", PROVISIONER_CLAIM_FINALIZER, "spec", spec);
}

json_t *provisioner_claim_after(const struct sim_result *res, size_t i, char *const *names) {
        const struct sim_claim *c = &res->claims[i];
        char buf[1024] = "";
        size_t len = 0;
        for (size_t k = 0; k < c->n_after; k++) {
                const char *n = names[c->after[k]];
                size_t need = n ? strlen(n) + (len > 0) : 0;
                if (!n || len + need >= sizeof buf)
                        continue;
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? "," : "", n);
        }
        return len ? json_string(buf) : NULL;
}

json_t *provisioner_claim_round(size_t n, size_t i, char *const *names) {
        char buf[1024] = "";
        size_t len = 0;
        for (size_t k = 0; k < n; k++) {
                const char *name = names[k];
                size_t need = name ? strlen(name) + (len > 0) : 0;
                if (k == i || !name || len + need >= sizeof buf)
                        continue;
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? "," : "", name);
        }
        return len ? json_string(buf) : NULL;
}

json_t *provisioner_claim_status(const struct provisioner_round *r, const struct sim_result *res, size_t i) {
        const struct sim_claim *c = &res->claims[i];
        const struct sim_host *h = r->in->hosts[c->host];
        return nodeclaim_placement_status(h->name, h->region, c->shape);
}

/* ---- pools ---- */

json_t *provisioner_pool_usage(const struct provisioner_round *r, const struct sim_result *res, size_t pool) {
        const char *name = r->in->pools[pool]->name;
        struct resources sum = { 0 };
        int64_t nodes = 0;
        for (size_t i = 0; i < r->in->n_nodes; i++) {
                const struct sim_node *n = r->in->nodes[i];
                if (n->nodepool && strcmp(n->nodepool, name) == 0) {
                        resources_add(&sum, &n->capacity);
                        nodes++;
                }
        }
        for (size_t i = 0; res && i < res->n_claims; i++)
                if (res->claims[i].nodepool == pool) {
                        resources_add(&sum, &res->claims[i].shape->capacity);
                        nodes++;
                }
        json_t *o = resources_to_json(&sum);
        if (o)
                json_object_set_new(o, "nodes", json_sprintf("%" PRId64, nodes));
        return o;
}

/* ---- reasons ---- */

static bool starts(const char *s, const char *prefix) {
        return strncmp(s, prefix, strlen(prefix)) == 0;
}

const char *provisioner_unplaced_reason(const char *t) {
        if (!t)
                return PROVISIONER_REASON_FAILED;
        if (strstr(t, " limit ") && strstr(t, " reached"))
                return PROVISIONER_REASON_LIMIT;
        if (starts(t, "no host ") || starts(t, "no agent offers") || strstr(t, ": no host in a zone"))
                return PROVISIONER_REASON_HOST_ROOM;
        if (starts(t, "topology spread") || starts(t, "no zone ") || strstr(t, "affinity"))
                return PROVISIONER_REASON_TOPOLOGY;
        if (starts(t, "no NodePool") || starts(t, "NodePool ") || strstr(t, "no instance type"))
                return PROVISIONER_REASON_NO_POOL;
        return PROVISIONER_REASON_FAILED;
}

/* ---- claims the hosts do not know yet ---- */

static bool vmid_listed(const json_t *vmids, json_int_t vmid) {
        size_t i;
        json_t *v;
        json_array_foreach(vmids, i, v) {
                if (json_integer_value(v) == vmid)
                        return true;
        }
        return false;
}

/* Is the claim's VM already charged by the host's own accounting? */
static bool host_knows(const json_t *claim, bool agent, const json_t *vmids) {
        const json_t *st = json_object_get(claim, "status");
        if (agent)
                return is_set(json_object_get(st, "reservationID"));
        json_t *vmid = json_object_get(st, "vmid");
        return json_is_integer(vmid) && vmid_listed(vmids, json_integer_value(vmid));
}

void provisioner_host_charge_pending(json_t *host, const struct provisioner_round *r, const json_t *claims,
                                     bool agent, const json_t *vmids, const struct provisioner_shapes *shapes) {
        const char *name = kube_str(host, "name"), *region = kube_str(host, "region");
        size_t i;
        json_t *c;
        json_array_foreach(claims, i, c) {
                struct kube_nodeclaim nc;
                kube_nodeclaim_decode(c, &nc);
                const char *h = nodeclaim_host(c), *reg = nodeclaim_region(c);
                if (!name || !h || strcmp(h, name) != 0 || (region && reg && strcmp(region, reg) != 0) ||
                    host_knows(c, agent, vmids) || nc.meta.deleting)
                        continue;
                const struct shape_catalog *cat = provisioner_round_catalog(r, nc.node_class);
                const struct shape *s = cat ? shapes_catalog_find(cat, nc.instance_type) : NULL;
                if (s)
                        provisioner_host_charge(host, s->vcpus, s->vm_memory_bytes, shapes);
        }
}

static const struct sim_nodeclass *round_class(const struct provisioner_round *r, const char *name) {
        for (size_t i = 0; name && i < r->in->n_classes; i++)
                if (strcmp(r->in->classes[i]->name, name) == 0)
                        return r->in->classes[i];
        return NULL;
}

static void device_taken(json_t *free_by_mapping, const char *mapping) {
        json_t *v = json_object_get(free_by_mapping, mapping);
        if (json_integer_value(v) > 0)
                json_integer_set(v, json_integer_value(v) - 1);
}

void provisioner_host_charge_devices(json_t *host, const struct provisioner_round *r, const json_t *claims,
                                     const json_t *running) {
        const char *name = kube_str(host, "name"), *region = kube_str(host, "region");
        json_t *free_by_mapping = json_object_get(host, "pci_free"), *c;
        size_t i;
        json_array_foreach(claims, i, c) {
                struct kube_nodeclaim nc;
                kube_nodeclaim_decode(c, &nc);
                const char *h = nodeclaim_host(c), *reg = nodeclaim_region(c);
                const json_t *vmid = json_object_get(nc.status, "vmid");
                const struct sim_nodeclass *cls = round_class(r, nc.node_class);
                if (!free_by_mapping || !cls || !name || !h || strcmp(h, name) != 0 ||
                    (region && reg && strcmp(region, reg) != 0) || nc.meta.deleting ||
                    (json_is_integer(vmid) && vmid_listed(running, json_integer_value(vmid))))
                        continue;
                for (size_t k = 0; k < cls->n_pci; k++)
                        device_taken(free_by_mapping, cls->pci_mappings[k]);
        }
}
