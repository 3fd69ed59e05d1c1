/* launcher_drain: the first steps of a claim's termination, on its Node: the disrupted taint, the eviction of its
 * pods through the Eviction API (PodDisruptionBudgets honoured, the grace period's end enforced), the Node's delete. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "stats.h"
#include "kube_object.h"

/* ---- taint ---- */

int launcher__finalizer_index(const json_t *obj) {
        size_t i;
        json_t *f;
        json_array_foreach(kube_meta_of(obj).finalizers, i, f) {
                if (json_is_string(f) && strcmp(json_string_value(f), LAUNCHER_FINALIZER) == 0)
                        return (int)i;
        }
        return -1;
}

int launcher__finalizer_add(json_t *node) {
        json_t *meta = json_object_get(node, "metadata"), *list = json_object_get(meta, "finalizers");
        if (launcher__finalizer_index(node) >= 0 || kube_deleting(node))
                return KUBE_MODIFY_SKIP;
        if (!json_is_array(list) && json_object_set_new(meta, "finalizers", list = json_array()) < 0)
                return -ENOMEM;
        return json_array_append_new(list, json_string(LAUNCHER_FINALIZER)) < 0 ? -ENOMEM : 0;
}

/* The disrupted taint, and the finalizer that keeps the Node object (and its kubelet from registering it anew)
 * until the VM is gone. */
static int disrupt_node(json_t *node, void *userdata) {
        (void)userdata;
        int r = launcher__finalizer_add(node);
        int t = r < 0 ? r : launchstep_node_taint(node);
        return t <= 0 ? t : r;
}

struct launchstep_result launcher__taint_node(struct launcher__ctx *c) {
        const char *node = c->st->node_name;
        int r = node[0] ? kube_modify(c->kube, &kube_nodes, NULL, node, NULL, disrupt_node, NULL, 0, NULL) : 0;
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "taint Node %s: %s", node, kube_client_error(c->kube));
        return launchstep_done();
}

/* ---- drain ---- */

struct drain_count {
        unsigned evicted, going, blocked, held, deleted;
};

/* The grace period of the claim, else of its NodePool (-1: none; a pool that is gone has none). The pool is read
 * only when the claim has none of its own. */
static struct launchstep_result grace_period(struct launcher__ctx *c, int64_t *ret_ms) {
        char err[NODECLAIM_MESSAGE_MAX];
        bool own = kube_nodeclaim_of(c->claim).termination_grace_period != NULL;
        struct launchstep_result res = c->nodepool[0] && !own ? launcher__need_pool(c) : launchstep_done();
        if (!launchstep_ok(&res) && !launchstep_is_error(&res, -ENOENT))
                return res;
        int r = launchstep_grace_period(c->claim, c->pool, ret_ms, err, sizeof err);
        if (r < 0)
                return launchstep_error(r, "%s", err);
        if (*ret_ms < 0 && c->l->o.drain_timeout_ms > 0)
                *ret_ms = c->l->o.drain_timeout_ms;
        return launchstep_done();
}

/* Past the grace period: the pod is deleted at once (grace 0: as Karpenter, which gives a pod what is left of the
 * node's grace period, nothing once it is over; a pod whose kubelet is gone could wait for ever), this incarnation
 * only. */
static int delete_pod(struct launcher__ctx *c, const char *ns, const char *name, const json_t *pod) {
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.grace_period_seconds = 0;
        o.precondition_uid = kube_meta_of(pod).uid;
        int r = kube_delete(c->kube, &kube_pods, ns, name, &o, NULL);
        if (r == 0)
                log_info("launcher: NodeClaim %s: deleted pod %s/%s (its termination grace period is over)", c->name,
                         ns, name);
        return r;
}

/* One pod bound to the Node: evicted (a 429 is a PodDisruptionBudget's no: tried again later), waited for, or
 * deleted when the grace period is over. */
/* How an eviction went, for evictions_total: a pod already gone counts as evicted. */
static enum stats_eviction_result eviction_result(int r) {
        if (r == 0 || r == -ENOENT)
                return STATS_EVICTION_OK;
        return r == -EBUSY ? STATS_EVICTION_PDB_BLOCKED : STATS_EVICTION_ERROR;
}

static int drain_pod(struct launcher__ctx *c, const json_t *pod, bool grace_over, struct drain_count *n) {
        const json_t *meta = json_object_get(pod, "metadata");
        const char *ns = json_string_value(json_object_get(meta, "namespace"));
        const char *name = json_string_value(json_object_get(meta, "name"));
        enum launchstep_drain d = launchstep_pod_drain(pod, c->now);
        int r;
        if (d == LAUNCHSTEP_DRAIN_STAY || !ns || !name)
                return 0;
        if (grace_over) {
                n->deleted++;
                r = delete_pod(c, ns, name, pod);
        } else if (d == LAUNCHSTEP_DRAIN_GOING) {
                n->going++;
                return 0;
        } else if (d == LAUNCHSTEP_DRAIN_HOLD) {
                n->held++; /* do-not-disrupt: left alone until the grace period is over */
                return 0;
        } else {
                r = kube_evict(c->kube, ns, name, NULL);
                n->evicted += r == 0;
                n->blocked += r == -EBUSY;
                stats_eviction(c->l->env.stats, eviction_result(r));
        }
        return r == -ENOENT || r == -EBUSY ? 0 : r;
}

static int drain_pods(struct launcher__ctx *c, const char *node, bool grace_over, struct drain_count *n) {
        json_t *list = NULL, *pod;
        size_t i;
        int r = kube_list_node_pods(c->kube, node, &list);
        json_array_foreach(json_object_get(list, "items"), i, pod) {
                if (r == 0)
                        r = drain_pod(c, pod, grace_over, n);
        }
        json_decref(list);
        return r;
}

/* Is the claim's VM gone (or another's)? Then its pods cannot leave gracefully: Karpenter skips the drain of a
 * Node whose instance is gone, and PodGC removes the pods once the Node is deleted. */
static struct launchstep_result vm_gone(struct launcher__ctx *c, bool *ret_gone) {
        json_t *config = NULL;
        struct launchstep_result res = c->st->vmid ? launcher__need_pve(c) : launchstep_done();
        *ret_gone = false;
        if (!c->st->vmid || !launchstep_ok(&res))
                return res;
        int r = pve_vm_config_get(c->pve, c->host, c->st->vmid, &config);
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "config of VM %u: %s", c->st->vmid, pve_client_error(c->pve));
        *ret_gone = r == -ENOENT || launchstep_vm_owner(c->uid, config) < 0;
        json_decref(config);
        return launchstep_done();
}

/* Is the Node gone (deleted behind the claim's back)? Then there is nothing to drain: as Karpenter, which drains
 * only the Nodes that exist; PodGC removes the pods still bound to it (a real kube-controller-manager does so 40 s
 * after the Node went, so a drain that waits for them holds the claim that long or, without a kubelet, for ever). */
static struct launchstep_result node_gone(struct launcher__ctx *c, bool *ret_gone) {
        json_t *obj = NULL;
        int r = kube_get(c->kube, &kube_nodes, NULL, c->st->node_name, &obj);
        json_decref(obj);
        *ret_gone = r == -ENOENT;
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "get Node %s: %s", c->st->node_name, kube_client_error(c->kube));
        return launchstep_done();
}

struct launchstep_result launcher__drain_node(struct launcher__ctx *c) {
        const char *node = c->st->node_name;
        struct drain_count n = { 0 };
        int64_t grace;
        bool gone = false;
        struct launchstep_result res = node[0] ? vm_gone(c, &gone) : launchstep_done();
        if (!node[0] || !launchstep_ok(&res))
                return res;
        if (gone) {
                log_info("launcher: NodeClaim %s: its VM is gone: Node %s is not drained", c->name, node);
                return launchstep_done();
        }
        res = node_gone(c, &gone);
        if (!launchstep_ok(&res))
                return res;
        if (gone) {
                log_info("launcher: NodeClaim %s: its Node %s is gone: not drained", c->name, node);
                return launchstep_done();
        }
        res = grace_period(c, &grace);
        if (!launchstep_ok(&res))
                return res;
        bool over = launchstep_grace_over(c->st->term_started_ms, grace, c->now) ||
                    launchstep_termination_due(c->claim, c->now);
        int r = drain_pods(c, node, over, &n);
        if (r < 0)
                return launchstep_error(r, "drain Node %s: %s", node, kube_client_error(c->kube));
        if (!n.evicted && !n.going && !n.blocked && !n.held && !n.deleted)
                return launchstep_done();
        log_info("launcher: NodeClaim %s: draining Node %s: %u evicted, %u leaving, %u refused by a disruption budget, "
                 "%u kept (do-not-disrupt), %u deleted", c->name, node, n.evicted, n.going, n.blocked, n.held,
                 n.deleted);
        return launchstep_wait(launchstep_drain_requeue(c->st->term_started_ms, c->now));
}

/* ---- the Node ---- */

struct launchstep_result launcher__delete_node(struct launcher__ctx *c) {
        const char *node = c->st->node_name;
        int r = node[0] ? kube_delete(c->kube, &kube_nodes, NULL, node, NULL, NULL) : 0;
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "delete Node %s: %s", node, kube_client_error(c->kube));
        return launchstep_done();
}

static int drop_node_finalizer(json_t *node, void *userdata) {
        int i = launcher__finalizer_index(node);
        (void)userdata;
        if (i < 0)
                return KUBE_MODIFY_SKIP;
        json_array_remove(kube_finalizers_mut(node), (size_t)i);
        return 0;
}

struct launchstep_result launcher__release_node(struct launcher__ctx *c) {
        const char *node = c->st->node_name;
        int r = node[0] ? kube_modify(c->kube, &kube_nodes, NULL, node, NULL, drop_node_finalizer, NULL, 0, NULL) : 0;
        if (r < 0 && r != -ENOENT)
                return launchstep_error(r, "remove finalizer of Node %s: %s", node, kube_client_error(c->kube));
        return launchstep_done();
}
