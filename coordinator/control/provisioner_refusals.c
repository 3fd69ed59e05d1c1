/* provisioner_refusals: pending pods the simulation fits on an existing Node, which kube-scheduler keeps refusing
 * there; such a pod gets room of its own, once. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "provisioner.h"

/* A pending pod the simulation fits on an existing Node is left to kube-scheduler. Should kube-scheduler keep
 * refusing it for PROVISIONER_REFUSED_MS, the two disagree (a predicate the simulation does not model, or a count
 * it makes otherwise): the pod then enters the rounds kept off the existing Nodes until it is planned on a claim.
 * Once per pod while it stays pending, so that a pod kube-scheduler refuses everywhere costs one claim, not one a
 * round. Each entry: {"since": ms, "state": enum refusal_state, "node": the first Node it fit}. */
enum refusal_state { REFUSAL_WATCHING, REFUSAL_SKIP, REFUSAL_DONE };

static enum refusal_state state_of(const json_t *entry) {
        return (enum refusal_state)json_integer_value(json_object_get(entry, "state"));
}

static void set_state(json_t *entry, enum refusal_state st) {
        json_object_set_new(entry, "state", json_integer(st));
}

json_t *provisioner_refusals_due(json_t *refusals, int64_t now_ms) {
        json_t *skip = NULL, *entry;
        const char *key;
        json_object_foreach(refusals, key, entry) {
                enum refusal_state st = state_of(entry);
                int64_t since = json_integer_value(json_object_get(entry, "since"));
                if (st == REFUSAL_WATCHING && now_ms && now_ms - since >= PROVISIONER_REFUSED_MS)
                        set_state(entry, st = REFUSAL_SKIP);
                if (st == REFUSAL_SKIP && (skip || (skip = json_object())))
                        json_object_set_new(skip, key, json_true());
        }
        return skip;
}

bool provisioner_refusal_track(json_t *refusals, const char *key, const char *node, bool on_claim, int64_t now_ms,
                               struct provisioner_refusal *ret) {
        json_t *entry = json_object_get(refusals, key);
        enum refusal_state st = entry ? state_of(entry) : REFUSAL_WATCHING;
        if (node && !entry && now_ms) {
                json_object_set_new(refusals, key, json_pack("{s:I, s:i, s:s}", "since", (json_int_t)now_ms, "state",
                                                             REFUSAL_WATCHING, "node", node));
        } else if (entry && st == REFUSAL_WATCHING && !node) {
                json_object_del(refusals, key); /* it fits no Node now: kube-scheduler was right */
        } else if (entry && st == REFUSAL_SKIP && on_claim) {
                *ret = (struct provisioner_refusal){ json_integer_value(json_object_get(entry, "since")),
                                                     json_string_value(json_object_get(entry, "node")) };
                set_state(entry, REFUSAL_DONE);
                return true;
        }
        return false;
}

void provisioner_refusals_forget(json_t *refusals, const json_t *pending) {
        const char *key;
        json_t *v, *tmp;
        json_object_foreach_safe(refusals, tmp, key, v) {
                if (!json_object_get(pending, key))
                        json_object_del(refusals, key);
        }
}
