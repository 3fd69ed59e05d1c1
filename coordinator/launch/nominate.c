/* nominate: the pods a claim's Node is nominated for, from the provisioner's Nominated events. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "nominate.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kube_object.h"
#include "kube_types.h"
#include "nodeclaim.h"

bool nominate_names_claim(const char *msg, const char *claim) {
        size_t n = strlen(claim);
        for (const char *at = msg ? strstr(msg, "nodeclaim/") : NULL; at; at = strstr(at + 1, "nodeclaim/"))
                if (strncmp(at + 10, claim, n) == 0 && (at[10 + n] == '\0' || at[10 + n] == ' '))
                        return true;
        return false;
}

static long long resource_version(const struct kube_event *e) {
        return e->meta.resource_version ? strtoll(e->meta.resource_version, NULL, 10) : 0;
}

/* {"<pod uid>": the newest of our Nominated events on it} (borrowed events). */
static json_t *newest_events(const json_t *events) {
        json_t *newest = json_object(), *ev;
        size_t i;
        json_array_foreach(json_object_get(events, "items"), i, ev) {
                struct kube_event e, old;
                kube_event_decode(ev, &e);
                if (!newest || !e.involved_uid || !e.source_component || !e.reason ||
                    strcmp(e.source_component, NOMINATE_COMPONENT) != 0 ||
                    strcmp(e.reason, NODECLAIM_REASON_NOMINATED) != 0)
                        continue;
                json_t *had = json_object_get(newest, e.involved_uid);
                if (had)
                        kube_event_decode(had, &old);
                if (!had || resource_version(&e) >= resource_version(&old))
                        json_object_set(newest, e.involved_uid, ev);
        }
        return newest;
}

/* Is the pod waiting for a Node, not yet nominated to node? */
static bool pending_elsewhere(const json_t *pod, const char *node) {
        const char *bound = kube_str(json_object_get(pod, "spec"), "nodeName");
        const char *nominated = kube_str(json_object_get(pod, "status"), "nominatedNodeName");
        return (!bound || !*bound) && !kube_deleting(pod) && !(nominated && strcmp(nominated, node) == 0);
}

json_t *nominate_pods_of(const json_t *pods, const json_t *events, const char *claim, const char *node) {
        json_t *newest = newest_events(events), *out = json_array(), *pod;
        size_t i;
        if (!newest || !out) {
                json_decref(newest);
                json_decref(out);
                return NULL;
        }
        json_array_foreach(json_object_get(pods, "items"), i, pod) {
                const char *uid = kube_meta_str(pod, "uid"), *ns = kube_meta_str(pod, "namespace");
                const char *name = kube_meta_str(pod, "name");
                struct kube_event e;
                json_t *ev = uid ? json_object_get(newest, uid) : NULL;
                if (!ev || !ns || !name || !pending_elsewhere(pod, node))
                        continue;
                kube_event_decode(ev, &e);
                if (nominate_names_claim(e.message, claim) &&
                    json_array_append_new(out, json_pack("{s:s, s:s}", "namespace", ns, "name", name)) < 0) {
                        json_decref(out);
                        out = NULL;
                        break;
                }
        }
        json_decref(newest);
        return out;
}
