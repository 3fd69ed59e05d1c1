/* kube_object: reading a Kubernetes object's common fields (metadata, annotations, owners) from its JSON. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

/* o[key] when it is a string (borrowed), else NULL. */
const char *kube_str(const json_t *o, const char *key);
/* obj.metadata[key] when it is a string (borrowed), else NULL. */
const char *kube_meta_str(const json_t *obj, const char *key);
/* obj.metadata.annotations[key] (borrowed), else NULL. */
const char *kube_annotation(const json_t *obj, const char *key);
/* Is obj being deleted (metadata.deletionTimestamp set: present, not null, not empty)? */
bool kube_deleting(const json_t *obj);
/* Is obj managed by a DaemonSet: is its controller (the ownerReference with controller: true) a DaemonSet, as
 * kubectl drain's filter asks? A DaemonSet that owns without controlling does not make a pod one of its own. */
bool kube_owned_by_daemonset(const json_t *obj);
