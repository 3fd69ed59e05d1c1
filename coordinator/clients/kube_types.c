/* kube_types: the Kubernetes objects the coordinator reads, decoded into typed structs that borrow from their JSON.
 * Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "kube_types.h"

#include "kube_object.h"

/* obj[a][b], NULL when either is missing. */
static json_t *at(const json_t *obj, const char *a, const char *b) {
        return json_object_get(json_object_get(obj, a), b);
}

static const char *str_at(const json_t *obj, const char *a, const char *b) {
        return json_string_value(at(obj, a, b));
}

static void kube_meta_decode(const json_t *obj, struct kube_meta *ret) {
        const json_t *m = json_object_get(obj, "metadata"), *g = json_object_get(m, "generation");
        *ret = (struct kube_meta){
                .name = kube_str(m, "name"),
                .namespace_ = kube_str(m, "namespace"),
                .uid = kube_str(m, "uid"),
                .resource_version = kube_str(m, "resourceVersion"),
                .creation_timestamp = kube_str(m, "creationTimestamp"),
                .generation = json_integer_value(g),
                .has_generation = json_is_integer(g),
                .deleting = kube_deleting(obj),
                .labels = json_object_get(m, "labels"),
                .annotations = json_object_get(m, "annotations"),
                .finalizers = json_object_get(m, "finalizers"),
        };
}

void kube_node_decode(const json_t *obj, struct kube_node *ret) {
        const json_t *spec = json_object_get(obj, "spec"), *status = json_object_get(obj, "status");
        *ret = (struct kube_node){
                .provider_id = kube_str(spec, "providerID"),
                .taints = json_object_get(spec, "taints"),
                .system_uuid = str_at(status, "nodeInfo", "systemUUID"),
                .status = status,
        };
        kube_meta_decode(obj, &ret->meta);
}

static void kube_pod_decode(const json_t *obj, struct kube_pod *ret) {
        const json_t *spec = json_object_get(obj, "spec"), *status = json_object_get(obj, "status");
        *ret = (struct kube_pod){
                .node_name = kube_str(spec, "nodeName"),
                .phase = kube_str(status, "phase"),
                .tolerations = json_object_get(spec, "tolerations"),
                .priority = json_integer_value(json_object_get(spec, "priority")),
                .status = status,
        };
        kube_meta_decode(obj, &ret->meta);
}

void kube_nodeclaim_decode(const json_t *obj, struct kube_nodeclaim *ret) {
        const json_t *spec = json_object_get(obj, "spec"), *status = json_object_get(obj, "status");
        *ret = (struct kube_nodeclaim){
                .node_pool = kube_str(spec, "nodePool"),
                .node_class = str_at(spec, "nodeClassRef", "name"),
                .instance_type = kube_str(spec, "instanceType"),
                .requirements = json_object_get(spec, "requirements"),
                .taints = json_object_get(spec, "taints"),
                .startup_taints = json_object_get(spec, "startupTaints"),
                .termination_grace_period = json_object_get(spec, "terminationGracePeriod"),
                .spec = spec,
                .host = json_object_get(status, "host"),
                .provider_id = kube_str(status, "providerID"),
                .status = status,
        };
        kube_meta_decode(obj, &ret->meta);
}

static void kube_nodepool_decode(const json_t *obj, struct kube_nodepool *ret) {
        const json_t *template = at(obj, "spec", "template"), *tspec = json_object_get(template, "spec");
        *ret = (struct kube_nodepool){
                .template_labels = at(template, "metadata", "labels"),
                .template_spec = tspec,
                .termination_grace_period = kube_str(tspec, "terminationGracePeriod"),
                .resources = at(obj, "status", "resources"),
        };
        kube_meta_decode(obj, &ret->meta);
}

static void kube_nodeclass_decode(const json_t *obj, struct kube_nodeclass *ret) {
        const json_t *spec = json_object_get(obj, "spec"), *mo = json_object_get(spec, "metadataOptions");
        *ret = (struct kube_nodeclass){
                .spec = spec,
                .instance_template_ref = json_object_get(spec, "instanceTemplateRef"),
                .boot_device_size = str_at(spec, "bootDevice", "size"),
                .metadata_type = kube_str(mo, "type"),
                .values_ref = json_object_get(mo, "valuesRef"),
                .templates_ref = json_object_get(mo, "templatesRef"),
        };
        kube_meta_decode(obj, &ret->meta);
}

void kube_pdb_decode(const json_t *obj, struct kube_pdb *ret) {
        const json_t *spec = json_object_get(obj, "spec");
        *ret = (struct kube_pdb){
                .selector = json_object_get(spec, "selector"),
                .unhealthy_pod_eviction_policy = kube_str(spec, "unhealthyPodEvictionPolicy"),
                .disruptions_allowed = json_integer_value(at(obj, "status", "disruptionsAllowed")),
        };
        kube_meta_decode(obj, &ret->meta);
}

void kube_lease_decode(const json_t *obj, struct kube_lease *ret) {
        const json_t *spec = json_object_get(obj, "spec");
        *ret = (struct kube_lease){
                .holder_identity = kube_str(spec, "holderIdentity"),
                .renew_time = kube_str(spec, "renewTime"),
                .acquire_time = kube_str(spec, "acquireTime"),
                .spec = spec,
        };
        kube_meta_decode(obj, &ret->meta);
}

void kube_data_object_decode(const json_t *obj, struct kube_data_object *ret) {
        *ret = (struct kube_data_object){ .data = json_object_get(obj, "data") };
        kube_meta_decode(obj, &ret->meta);
}

void kube_event_decode(const json_t *obj, struct kube_event *ret) {
        *ret = (struct kube_event){
                .source_component = str_at(obj, "source", "component"),
                .involved_uid = str_at(obj, "involvedObject", "uid"),
                .message = kube_str(obj, "message"),
                .reason = kube_str(obj, "reason"),
        };
        kube_meta_decode(obj, &ret->meta);
}

struct kube_meta kube_meta_of(const json_t *obj) {
        struct kube_meta m;
        kube_meta_decode(obj, &m);
        return m;
}

struct kube_node kube_node_of(const json_t *obj) {
        struct kube_node n;
        kube_node_decode(obj, &n);
        return n;
}

struct kube_pod kube_pod_of(const json_t *obj) {
        struct kube_pod p;
        kube_pod_decode(obj, &p);
        return p;
}

struct kube_nodeclaim kube_nodeclaim_of(const json_t *obj) {
        struct kube_nodeclaim c;
        kube_nodeclaim_decode(obj, &c);
        return c;
}

struct kube_nodepool kube_nodepool_of(const json_t *obj) {
        struct kube_nodepool p;
        kube_nodepool_decode(obj, &p);
        return p;
}

struct kube_nodeclass kube_nodeclass_of(const json_t *obj) {
        struct kube_nodeclass c;
        kube_nodeclass_decode(obj, &c);
        return c;
}

json_t *kube_finalizers_mut(json_t *obj) {
        return at(obj, "metadata", "finalizers");
}

json_t *kube_annotations_mut(json_t *obj) {
        return at(obj, "metadata", "annotations");
}

json_t *kube_taints_mut(json_t *obj) {
        return at(obj, "spec", "taints");
}
