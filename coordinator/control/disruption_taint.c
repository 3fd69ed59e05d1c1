/* disruption_taint: the disrupted taint on a decision's Nodes before any of its claims goes (Karpenter's order: a
 * pod evicted from one candidate cannot be scheduled onto the next), taken off again when the decision does not go
 * ahead, and off a Node a stopped coordinator left tainted. I/O. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "disruption.h"

#include <errno.h>
#include <string.h>

#include "kube.h"
#include "launchstep.h"
#include "log.h"
#include "kube_object.h"
#include "kube_types.h"

static const char *name_of(const json_t *o) {
        return kube_meta_of(o).name;
}

static int taint_fn(json_t *node, void *userdata) {
        (void)userdata;
        int r = launchstep_node_taint(node);
        return r > 0 ? KUBE_MODIFY_SKIP : r;
}

static int untaint_fn(json_t *node, void *userdata) {
        (void)userdata;
        int r = launchstep_node_untaint(node);
        return r > 0 ? KUBE_MODIFY_SKIP : r;
}

void disruption_untaint(struct kube_client *kube, json_t *tainted, const json_t *node) {
        const char *name = name_of(node);
        if (!name)
                return;
        json_object_del(tainted, name);
        int r = kube_modify(kube, &kube_nodes, NULL, name, NULL, untaint_fn, NULL, 0, NULL);
        if (r < 0 && r != -ENOENT)
                log_warning("disruption: cannot take the disrupted taint off Node %s: %s", name,
                            kube_client_error(kube));
}

int disruption_taint(struct kube_client *kube, json_t *tainted, const struct disruption_input *di,
                     const size_t *candidates, size_t n) {
        for (size_t k = 0; k < n; k++) {
                const json_t *node = di->nodes[candidates[k]];
                const char *name = name_of(node);
                int r = name ? kube_modify(kube, &kube_nodes, NULL, name, NULL, taint_fn, NULL, 0, NULL) : 0;
                if (r >= 0 || r == -ENOENT) {
                        if (name)
                                json_object_set_new(tainted, name, json_string(di->candidates[candidates[k]].claim));
                        continue;
                }
                log_error_errno(r, "disruption: cannot taint Node %s: %s", name, kube_client_error(kube));
                while (k-- > 0)
                        disruption_untaint(kube, tainted, di->nodes[candidates[k]]);
                return r;
        }
        return 0;
}

static bool ours(const json_t *node) {
        size_t i;
        json_t *t;
        json_array_foreach(kube_node_of(node).taints, i, t) {
                const char *key = json_string_value(json_object_get(t, "key"));
                if (key && strcmp(key, DISRUPTION_TAINT) == 0)
                        return true;
        }
        return false;
}

/* Forget the Nodes whose claims are now seen being deleted (or gone): the launcher's finalizer has them. */
static void forget_deleted(json_t *tainted, const struct disruption_input *di) {
        const char *node;
        json_t *claim, *tmp;
        json_object_foreach_safe(tainted, tmp, node, claim) {
                bool live = false;
                for (size_t i = 0; i < di->n_candidates && !live; i++)
                        live = !strcmp(di->candidates[i].claim, json_string_value(claim)) &&
                               !kube_deleting(di->claims[i]);
                if (!live)
                        json_object_del(tainted, node);
        }
}

void disruption_untaint_stale(struct kube_client *kube, json_t *tainted, const struct disruption_input *di,
                              const json_t *held) {
        forget_deleted(tainted, di);
        for (size_t i = 0; i < di->n_candidates; i++) {
                const json_t *node = di->nodes[i];
                const char *name = name_of(node);
                if (!name || !ours(node) || kube_deleting(di->claims[i]) || kube_deleting(node) ||
                    json_object_get(tainted, name) || json_object_get(held, di->candidates[i].claim))
                        continue;
                log_info("disruption: Node %s: its claim %s is not being disrupted: the disrupted taint goes", name,
                         di->candidates[i].claim);
                disruption_untaint(kube, tainted, node);
        }
}
