/* disruption_input: the disruption decisions' input (coordinator/disrupt) from a snapshot of the informers' cache
 * and its provisioning round: the NodePools' settings, the node classes' hashes, and one candidate per
 * Initialized node of ours with its pods and the PodDisruptionBudgets that block them, and the Proxmox templates its
 * claims were cloned from. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "disruption.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "rfc3339.h"
#include "kube_object.h"
#include "kube_types.h"
#include "launchstep.h"

#define ANNOTATION_MIRROR "kubernetes.io/config.mirror"
#define ANNOTATION_SAFE_TO_EVICT "cluster-autoscaler.kubernetes.io/safe-to-evict"
#define ANNOTATION_DO_NOT_DISRUPT "pvescale.io/do-not-disrupt"
#define ANNOTATION_KARPENTER_DO_NOT_DISRUPT "karpenter.sh/do-not-disrupt"
#define ANNOTATION_DISRUPTION_COST "karpenter.sh/disruption-cost"
#define ANNOTATION_POD_DELETION_COST "controller.kubernetes.io/pod-deletion-cost"

static bool annotation_true(const json_t *obj, const char *key) {
        const char *v = kube_annotation(obj, key);
        return v && strcmp(v, "true") == 0;
}

/* A Node's or NodeClaim's do-not-disrupt: "true" only (a duration is a pod's, launchstep_pod_do_not_disrupt). */
static bool do_not_disrupt(const json_t *obj) {
        return annotation_true(obj, ANNOTATION_DO_NOT_DISRUPT) ||
               annotation_true(obj, ANNOTATION_KARPENTER_DO_NOT_DISRUPT);
}

static int64_t time_at(const json_t *o, const char *key) {
        int64_t ms = 0;
        const char *s = kube_str(o, key);
        return s && rfc3339_parse(s, &ms) == 0 ? ms : 0;
}

/* The DISRUPT_POD_* flags of a pod: owned by a DaemonSet, a mirror pod, do-not-disrupt, safe-to-evict "false". */
static unsigned disruption_pod_flags(const json_t *pod, int64_t now_ms) {
        unsigned f = 0;
        const char *safe = kube_annotation(pod, ANNOTATION_SAFE_TO_EVICT);
        if (kube_owned_by_daemonset(pod))
                f |= DISRUPT_POD_DAEMONSET;
        if (kube_annotation(pod, ANNOTATION_MIRROR))
                f |= DISRUPT_POD_MIRROR;
        if (launchstep_pod_do_not_disrupt(pod, now_ms))
                f |= DISRUPT_POD_DO_NOT_DISRUPT;
        if (safe && strcmp(safe, "false") == 0)
                f |= DISRUPT_POD_NOT_SAFE_TO_EVICT;
        return f;
}

/* Karpenter's EvictionCost less its 1: karpenter.sh/disruption-cost (else the deprecated
 * controller.kubernetes.io/pod-deletion-cost) over 2^27, plus the priority over 2^25. A value that is no 32-bit
 * integer counts as none, as Karpenter logs it and treats it as unset. */
static double pod_cost_extra(const json_t *pod) {
        const char *v = kube_annotation(pod, ANNOTATION_DISRUPTION_COST);
        char *end = NULL;
        double extra = (double)kube_pod_of(pod).priority / (double)(1 << 25);
        if (!v)
                v = kube_annotation(pod, ANNOTATION_POD_DELETION_COST);
        long long n = v ? strtoll(v, &end, 10) : 0;
        if (v && *v && end && *end == '\0' && n >= INT32_MIN && n <= INT32_MAX)
                extra += (double)n / (double)(1 << 27);
        return extra;
}

/* ---- pools and classes ---- */

static int add_pools(struct disruption_input *di, const json_t *pools) {
        size_t i;
        json_t *p;
        di->pools = calloc(json_array_size(pools) + 1, sizeof *di->pools);
        if (!di->pools)
                return -ENOMEM;
        json_array_foreach(pools, i, p) {
                char err[256];
                int r = disrupt_pool_parse(p, &di->pools[di->n_pools], err, sizeof err);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        json_array_append_new(di->problems, json_string(err));
                else
                        di->n_pools++;
        }
        return 0;
}

/* Each node class's drift hash; a class that cannot be hashed is left out (its claims never drift by it). */
static int add_classes(struct disruption_input *di, const json_t *classes) {
        size_t n = json_array_size(classes);
        di->classes = calloc(n + 1, sizeof *di->classes);
        for (size_t i = 0; di->classes && i < n; i++) {
                const json_t *nc = json_array_get(classes, i);
                struct disrupt_nodeclass *c = &di->classes[di->n_classes];
                c->name = kube_meta_of(nc).name;
                di->n_classes += c->name && disrupt_hash_nodeclass(nc, c->hash) == 0 &&
                                 disrupt_hash_nodeclass_v1(nc, c->hash_v1) == 0;
        }
        return di->classes ? 0 : -ENOMEM;
}

static const struct disrupt_pool *pool_named(const struct disruption_input *di, const char *name) {
        for (size_t i = 0; name && i < di->n_pools; i++)
                if (strcmp(di->pools[i].name, name) == 0)
                        return &di->pools[i];
        return NULL;
}

/* ---- candidates ---- */

/* The claims by status.providerID, built once a pass (borrowed references: the snapshot outlives it). A Node's claim
 * is then found without a scan of every claim. */
static json_t *claims_by_provider_id(const json_t *claims) {
        json_t *index = json_object(), *c;
        size_t i;
        json_array_foreach(claims, i, c) {
                const char *pid = kube_nodeclaim_of(c).provider_id;
                if (index && pid && *pid && !json_object_get(index, pid) && json_object_set(index, pid, c) < 0) {
                        json_decref(index);
                        return NULL;
                }
        }
        return index;
}

static const json_t *claim_of_node(const json_t *by_provider_id, const json_t *node) {
        const char *pid = kube_node_of(node).provider_id;
        return pid && *pid ? json_object_get(by_provider_id, pid) : NULL;
}

static bool has_taint(const json_t *node, const char *key) {
        size_t i;
        json_t *t;
        json_array_foreach(kube_node_of(node).taints, i, t) {
                const char *k = kube_str(t, "key");
                if (k && strcmp(k, key) == 0)
                        return true;
        }
        return false;
}

static enum disrupt_ready node_ready(const json_t *node, int64_t *ret_since) {
        const json_t *c = kube_condition(json_object_get(node, "status"), "Ready");
        const char *s = kube_str(c, "status");
        *ret_since = time_at(c, "lastTransitionTime");
        if (s && strcmp(s, "True") == 0)
                return DISRUPT_READY_TRUE;
        return s && strcmp(s, "False") == 0 ? DISRUPT_READY_FALSE : DISRUPT_READY_UNKNOWN;
}

/* The claim's identity and times, its Node's health and markers. */
static void describe(struct disrupt_candidate *c, const json_t *claim, const json_t *node) {
        const json_t *meta = json_object_get(claim, "metadata"), *st = json_object_get(claim, "status");
        c->claim = kube_str(meta, "name");
        c->created_ms = time_at(meta, "creationTimestamp");
        c->initialized_ms = time_at(kube_condition(st, "Initialized"), "lastTransitionTime");
        c->nodepool_hash = kube_annotation(claim, DISRUPT_ANNOTATION_NODEPOOL_HASH);
        c->nodeclass_hash = kube_annotation(claim, DISRUPT_ANNOTATION_NODECLASS_HASH);
        c->nodeclass_hash_version = kube_annotation(claim, DISRUPT_ANNOTATION_NODECLASS_HASH_VERSION);
        c->ready = node_ready(node, &c->ready_since_ms);
        c->do_not_disrupt = do_not_disrupt(node) || do_not_disrupt(claim);
        c->deleting = kube_deleting(claim) || kube_deleting(node) || has_taint(node, DISRUPTION_TAINT) ||
                      has_taint(node, DISRUPTION_TAINT_KARPENTER);
}

/* ---- PodDisruptionBudgets (as Karpenter's pdb.Limits: a PDB of the pod's namespace whose selector matches its
 * labels and that allows 0 disruptions blocks it, unless the PDB always allows evicting an unhealthy pod and this
 * one is not Ready) ---- */

static bool value_listed(const json_t *values, const char *v) {
        size_t i;
        json_t *x;
        json_array_foreach(values, i, x) {
                if (v && json_is_string(x) && strcmp(json_string_value(x), v) == 0)
                        return true;
        }
        return false;
}

/* One matchExpressions entry against the pod's labels; an unknown operator matches nothing. */
static bool expression_matches(const json_t *e, const json_t *labels) {
        const char *key = kube_str(e, "key"), *op = kube_str(e, "operator");
        const char *v = key ? kube_str(labels, key) : NULL;
        if (!op)
                return false;
        if (strcmp(op, "Exists") == 0 || strcmp(op, "DoesNotExist") == 0)
                return (v != NULL) == (strcmp(op, "Exists") == 0);
        if (strcmp(op, "In") == 0)
                return value_listed(json_object_get(e, "values"), v);
        return strcmp(op, "NotIn") == 0 && !value_listed(json_object_get(e, "values"), v);
}

/* policy/v1: a null selector selects no pod, an empty one every pod of the namespace. */
static bool selector_matches(const json_t *sel, const json_t *labels) {
        const char *key;
        json_t *v, *e;
        size_t i;
        if (!json_is_object(sel))
                return false;
        json_object_foreach(json_object_get(sel, "matchLabels"), key, v) {
                const char *have = kube_str(labels, key);
                if (!have || !json_is_string(v) || strcmp(have, json_string_value(v)) != 0)
                        return false;
        }
        json_array_foreach(json_object_get(sel, "matchExpressions"), i, e) {
                if (!expression_matches(e, labels))
                        return false;
        }
        return true;
}

static bool pod_not_ready(const json_t *pod) {
        const char *s = kube_str(kube_condition(json_object_get(pod, "status"), "Ready"), "status");
        return s && strcmp(s, "False") == 0;
}

static bool pdb_blocks(const json_t *pdb, const json_t *pod) {
        struct kube_pdb b;
        kube_pdb_decode(pdb, &b);
        struct kube_meta meta = kube_meta_of(pod);
        const char *ns = b.meta.namespace_, *pod_ns = meta.namespace_;
        const char *policy = b.unhealthy_pod_eviction_policy;
        if (!ns || !pod_ns || strcmp(ns, pod_ns) != 0 || !selector_matches(b.selector, meta.labels))
                return false;
        if (policy && strcmp(policy, "AlwaysAllow") == 0 && pod_not_ready(pod))
                return false;
        return b.disruptions_allowed <= 0;
}

/* "ns/name" of the first PDB that blocks evicting the pod (names[k] is that of pdbs[k]), else NULL. DaemonSet and
 * mirror pods are never evicted, so no PDB blocks them. */
static const char *blocking_pdb(const json_t *pdbs, const json_t *names, const json_t *pod, unsigned flags) {
        size_t k;
        json_t *pdb;
        if (flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR))
                return NULL;
        json_array_foreach(pdbs, k, pdb) {
                if (pdb_blocks(pdb, pod))
                        return json_string_value(json_array_get(names, k));
        }
        return NULL;
}

/* The "ns/name" of every PDB of the snapshot, in its order: the strings the pods' blocking_pdb point to. */
static int add_pdb_names(struct disruption_input *di, const json_t *pdbs) {
        size_t k;
        json_t *pdb;
        di->pdb_names = json_array();
        if (!di->pdb_names)
                return -ENOMEM;
        json_array_foreach(pdbs, k, pdb) {
                const json_t *meta = json_object_get(pdb, "metadata");
                json_t *name = json_sprintf("%s/%s", kube_str(meta, "namespace") ?: "", kube_str(meta, "name") ?: "");
                if (json_array_append_new(di->pdb_names, name) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* ---- a candidate's pods ---- */

/* The round's bound pods (indices) sorted by node name, then input order: each node's pods are one run, found by a
 * binary search instead of a scan of every pod per node. */
struct pods_by_node {
        size_t *idx;
        size_t n;
};

static int by_node_name(const void *a, const void *b, void *arg) {
        const struct sim_input *in = arg;
        size_t i = *(const size_t *)a, j = *(const size_t *)b;
        int c = strcmp(in->pods[i]->node_name, in->pods[j]->node_name);
        return c ? c : (i > j) - (i < j);
}

static int pods_by_node_new(const struct sim_input *in, struct pods_by_node *ret) {
        ret->n = 0;
        ret->idx = calloc(in->n_pods + 1, sizeof *ret->idx);
        if (!ret->idx)
                return -ENOMEM;
        for (size_t j = 0; j < in->n_pods; j++)
                if (in->pods[j]->node_name)
                        ret->idx[ret->n++] = j;
        qsort_r(ret->idx, ret->n, sizeof *ret->idx, by_node_name, (void *)in);
        return 0;
}

/* The first position of node's run (ret->n when it has no pod). */
static size_t run_of(const struct sim_input *in, const struct pods_by_node *pb, const char *node) {
        size_t lo = 0, hi = pb->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(in->pods[pb->idx[mid]]->node_name, node) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* The pods the round bound to node (its sim_node), with their flags and blocking PDB; the last time one of them
 * started. */
static int add_pods(struct disrupt_candidate *c, const struct provisioner_round *r, const struct pods_by_node *pb,
                    const json_t *pdbs, const json_t *pdb_names, int64_t now_ms) {
        const struct sim_input *in = r->in;
        size_t first = run_of(in, pb, c->sim->name), end = first;
        while (end < pb->n && strcmp(in->pods[pb->idx[end]]->node_name, c->sim->name) == 0)
                end++;
        c->pods = calloc(end - first + 1, sizeof *c->pods);
        if (!c->pods)
                return -ENOMEM;
        for (size_t k = first; k < end; k++) {
                size_t j = pb->idx[k];
                struct sim_pod *p = in->pods[j];
                int64_t started = time_at(json_object_get(r->pods[j], "status"), "startTime");
                if (started > c->last_pod_event_ms)
                        c->last_pod_event_ms = started;
                unsigned flags = disruption_pod_flags(r->pods[j], now_ms);
                c->pods[c->n_pods++] = (struct disrupt_pod){
                        .namespace = p->namespace, .name = p->name, .flags = flags, .sim = p,
                        .blocking_pdb = blocking_pdb(pdbs, pdb_names, r->pods[j], flags),
                        .cost_extra = pod_cost_extra(r->pods[j]) };
        }
        return 0;
}

/* An order-free signature of a node's pods: the sum of the FNV-1a hashes of "namespace/name". */
static json_int_t pods_signature(const struct disrupt_candidate *c) {
        uint64_t sum = c->n_pods;
        for (size_t k = 0; k < c->n_pods; k++) {
                uint64_t h = UINT64_C(0xcbf29ce484222325);
                for (const unsigned char *p = (const unsigned char *)c->pods[k].namespace; p && *p; p++)
                        h = (h ^ *p) * UINT64_C(0x100000001b3);
                h = (h ^ '/') * UINT64_C(0x100000001b3);
                for (const unsigned char *p = (const unsigned char *)c->pods[k].name; p && *p; p++)
                        h = (h ^ *p) * UINT64_C(0x100000001b3);
                sum += h;
        }
        return (json_int_t)(sum >> 1);
}

int disruption_input_pod_events(struct disruption_input *di, json_t *marks, int64_t now_ms) {
        json_t *next = json_object();
        for (size_t i = 0; next && i < di->n_candidates; i++) {
                struct disrupt_candidate *c = &di->candidates[i];
                const json_t *last = json_object_get(marks, c->sim->name);
                json_int_t sig = pods_signature(c);
                int64_t at = 0;
                if (last && json_integer_value(json_object_get(last, "pods")) == sig)
                        at = json_integer_value(json_object_get(last, "at"));
                else if (last)
                        at = now_ms;
                if (at > c->last_pod_event_ms)
                        c->last_pod_event_ms = at;
                if (json_object_set_new(next, c->sim->name, json_pack("{s:I, s:I}", "pods", sig, "at",
                                                                      (json_int_t)at)) < 0) {
                        json_decref(next);
                        next = NULL;
                }
        }
        if (!next)
                return -ENOMEM;
        json_object_clear(marks);
        json_object_update(marks, next);
        json_decref(next);
        return 0;
}

static bool candidate_of(struct disruption_input *di, const struct provisioner_round *r, size_t i,
                         const json_t *claim, struct disrupt_candidate *c) {
        struct sim_node *sn = r->in->nodes[i];
        const json_t *node = r->nodes[i];
        const char *kind = kube_str(node, "kind");
        if (sn->in_flight || !sn->nodepool || (kind && strcmp(kind, "Node") != 0))
                return false;
        const struct disrupt_pool *pool = pool_named(di, sn->nodepool);
        const char *type = claim ? kube_nodeclaim_of(claim).instance_type : NULL;
        const struct shape_catalog *cat = pool ? provisioner_round_catalog(r, pool->nodeclass) : NULL;
        const struct shape *shape = cat && type ? shapes_catalog_find(cat, type) : NULL;
        if (!claim || !shape || !kube_condition_true(json_object_get(claim, "status"), "Initialized"))
                return false;
        *c = (struct disrupt_candidate){ .pool = pool->name, .nodeclass = pool->nodeclass, .shape = shape,
                                         .price = disrupt_price(shape), .sim = sn };
        describe(c, claim, node);
        return c->claim != NULL;
}

static int add_candidates(struct disruption_input *di, const struct provisioner_round *r,
                          const struct provisioner_snapshot *snap, int64_t now_ms) {
        json_t *by_pid = claims_by_provider_id(snap->claims);
        struct pods_by_node pb = { 0 };
        int err = pods_by_node_new(r->in, &pb);
        di->candidates = calloc(r->in->n_nodes + 1, sizeof *di->candidates);
        di->claims = calloc(r->in->n_nodes + 1, sizeof *di->claims);
        di->nodes = calloc(r->in->n_nodes + 1, sizeof *di->nodes);
        if (!by_pid || !di->candidates || !di->claims || !di->nodes)
                err = -ENOMEM;
        for (size_t i = 0; err == 0 && i < r->in->n_nodes; i++) {
                struct disrupt_candidate *c = &di->candidates[di->n_candidates];
                const json_t *claim = claim_of_node(by_pid, r->nodes[i]);
                if (!candidate_of(di, r, i, claim, c))
                        continue;
                di->claims[di->n_candidates] = claim;
                di->nodes[di->n_candidates] = r->nodes[i];
                err = add_pods(c, r, &pb, snap->pdbs, di->pdb_names, now_ms);
                di->n_candidates += err == 0;
        }
        json_decref(by_pid);
        free(pb.idx);
        return err;
}

int disruption_input_new(const struct provisioner_snapshot *snap, int64_t now_ms, bool repair,
                         struct disruption_input **ret) {
        struct disruption_input *di = calloc(1, sizeof *di);
        int r = di ? 0 : -ENOMEM;
        if (r == 0)
                di->problems = json_array();
        if (r == 0 && !di->problems)
                r = -ENOMEM;
        if (r == 0)
                r = provisioner_round_new(snap, &di->round);
        if (r == 0)
                r = add_pools(di, snap->pools);
        if (r == 0)
                r = add_classes(di, snap->classes);
        if (r == 0)
                r = add_pdb_names(di, snap->pdbs);
        if (r == 0)
                r = add_candidates(di, di->round, snap, now_ms);
        if (r < 0) {
                disruption_input_free(di);
                return r;
        }
        di->in = (struct disrupt_input){ .now_ms = now_ms, .pools = di->pools, .n_pools = di->n_pools,
                                         .classes = di->classes, .n_classes = di->n_classes,
                                         .candidates = di->candidates, .n_candidates = di->n_candidates,
                                         .sim = di->round->in, .repair = repair };
        *ret = di;
        return 0;
}

void disruption_input_free(struct disruption_input *di) {
        if (!di)
                return;
        for (size_t i = 0; di->candidates && i < di->n_candidates; i++)
                free(di->candidates[i].pods);
        free(di->candidates);
        free(di->claims);
        free(di->nodes);
        free(di->pools);
        free(di->classes);
        json_decref(di->problems);
        json_decref(di->pdb_names);
        json_decref(di->templates);
        json_decref(di->template_keys);
        provisioner_round_free(di->round);
        free(di);
}

/* ---- the Proxmox templates of the candidates ---- */

static const json_t *class_named(const json_t *classes, const char *name) {
        size_t i;
        json_t *nc;
        json_array_foreach(classes, i, nc) {
                const char *n = kube_meta_of(nc).name;
                if (n && name && strcmp(n, name) == 0)
                        return nc;
        }
        return NULL;
}

/* The template a claim was cloned from: status.imageID "<host>/<VMID>" on its recorded host, and imageDigest. */
static bool launched_from(const json_t *claim, struct disrupt_template *ret) {
        const json_t *st = json_object_get(claim, "status");
        const char *host = kube_str(st, "host"), *image = kube_str(st, "imageID");
        const char *digest = kube_str(st, "imageDigest");
        size_t n = host ? strlen(host) : 0;
        char *end = NULL;
        if (!n || !image || strncmp(image, host, n) != 0 || image[n] != '/')
                return false;
        unsigned long vmid = strtoul(image + n + 1, &end, 10);
        if (!end || *end || vmid == 0 || vmid > UINT32_MAX)
                return false;
        *ret = (struct disrupt_template){ .host = host, .vmid = (uint32_t)vmid,
                                          .digest = digest && *digest ? digest : NULL };
        return true;
}

/* The lookup's entry for candidate i (its key into template_keys), made when new. */
static int want_template(struct disruption_input *di, size_t i, const json_t *claim, const json_t *ref) {
        const char *region = kube_str(json_object_get(claim, "status"), "region");
        const char *host = di->candidates[i].template_launched.host;
        char *text = json_dumps(ref, JSON_COMPACT | JSON_SORT_KEYS);
        json_t *key = text && region ? json_sprintf("%s/%s/%s", region, host, text) : NULL;
        free(text);
        if (!key)
                return region ? -ENOMEM : 0;
        int r = json_array_set(di->template_keys, i, key);
        if (r == 0 && !json_object_get(di->templates, json_string_value(key)))
                r = json_object_set_new(di->templates, json_string_value(key),
                                        json_pack("{s:s, s:s, s:O}", "region", region, "host", host, "ref", ref));
        json_decref(key);
        return r < 0 ? -ENOMEM : 0;
}

int disruption_input_templates(struct disruption_input *di, const json_t *classes) {
        di->templates = json_object();
        di->template_keys = json_array();
        if (!di->templates || !di->template_keys)
                return -ENOMEM;
        for (size_t i = 0; i < di->n_candidates; i++) {
                struct disrupt_candidate *c = &di->candidates[i];
                const json_t *ref = kube_nodeclass_of(class_named(classes, c->nodeclass)).instance_template_ref;
                if (json_array_append_new(di->template_keys, json_null()) < 0)
                        return -ENOMEM;
                if (!launched_from(di->claims[i], &c->template_launched) || !json_is_object(ref))
                        continue;
                int r = want_template(di, i, di->claims[i], ref);
                if (r < 0)
                        return r;
        }
        return 0;
}

void disruption_input_templates_found(struct disruption_input *di) {
        for (size_t i = 0; i < di->n_candidates; i++) {
                const char *key = json_string_value(json_array_get(di->template_keys, i));
                const json_t *e = key ? json_object_get(di->templates, key) : NULL;
                json_int_t vmid = json_integer_value(json_object_get(e, "vmid"));
                if (vmid > 0 && vmid <= UINT32_MAX)
                        di->candidates[i].template_now = (struct disrupt_template){
                                .host = kube_str(e, "host"), .vmid = (uint32_t)vmid, .digest = kube_str(e, "digest") };
        }
}
