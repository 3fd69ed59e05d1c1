/* kube_object: reading a Kubernetes object's common fields (metadata, annotations, owners) from its JSON. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "kube_object.h"

#include <string.h>

const char *kube_str(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

const char *kube_meta_str(const json_t *obj, const char *key) {
        return kube_str(json_object_get(obj, "metadata"), key);
}

const char *kube_annotation(const json_t *obj, const char *key) {
        return kube_str(json_object_get(json_object_get(obj, "metadata"), "annotations"), key);
}

bool kube_deleting(const json_t *obj) {
        const json_t *ts = json_object_get(json_object_get(obj, "metadata"), "deletionTimestamp");
        return ts && !json_is_null(ts) && !(json_is_string(ts) && json_string_length(ts) == 0);
}

bool kube_owned_by_daemonset(const json_t *obj) {
        size_t i;
        json_t *ref;
        json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "ownerReferences"), i, ref) {
                const char *kind = kube_str(ref, "kind");
                if (kind && strcmp(kind, "DaemonSet") == 0 && json_is_true(json_object_get(ref, "controller")))
                        return true;
        }
        return false;
}
