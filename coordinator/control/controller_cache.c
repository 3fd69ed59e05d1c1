/* controller_cache: the informers' cache of each kind (c->mu held): objects by "ns/name" or "name", and the
 * providerID index of nodes and claims. Below controller.c and controller_work.c (see controller_internal.h). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "controller_internal.h"
#include "kube_types.h"

void controller__store_key(const json_t *obj, char *buf, size_t len) {
        struct kube_meta meta = kube_meta_of(obj);
        const char *ns = meta.namespace_, *name = meta.name;
        if (ns && *ns)
                snprintf(buf, len, "%s/%s", ns, name ? name : "");
        else
                snprintf(buf, len, "%s", name ? name : "");
}

static const char *provider_id(enum ctl_kind kind, const json_t *obj) {
        const char *pid = kind == K_NODES ? kube_node_of(obj).provider_id : kube_nodeclaim_of(obj).provider_id;
        return pid && *pid ? pid : NULL;
}

/* Keep the providerID index of nodes and claims in step with the store (obj NULL: deleted). */
static void index_provider_id(struct controller *c, enum ctl_kind kind, const char *key, const json_t *prev,
                              const json_t *obj) {
        json_t *index = c->by_provider_id[kind];
        const char *was = prev ? provider_id(kind, prev) : NULL, *now = obj ? provider_id(kind, obj) : NULL;
        if (!index)
                return;
        if (was && (!now || strcmp(was, now) != 0) &&
            strcmp(json_string_value(json_object_get(index, was)) ?: "", key) == 0)
                json_object_del(index, was);
        if (now)
                json_object_set_new(index, now, json_string(key));
}

json_t *controller__by_provider_id_locked(struct controller *c, enum ctl_kind kind, const char *provider_id) {
        const char *key = json_string_value(json_object_get(c->by_provider_id[kind], provider_id));
        return key ? json_object_get(c->store[kind], key) : NULL;
}

json_t *controller__cache_apply_locked(struct controller *c, enum ctl_kind kind, enum kube_watch_event ev,
                                      const json_t *obj) {
        char key[512];
        controller__store_key(obj, key, sizeof key);
        json_t *prev = json_incref(json_object_get(c->store[kind], key));
        if (ev == KUBE_EVENT_DELETED)
                json_object_del(c->store[kind], key);
        else
                json_object_set(c->store[kind], key, (json_t *)obj);
        index_provider_id(c, kind, key, prev, ev == KUBE_EVENT_DELETED ? NULL : obj);
        return prev;
}
