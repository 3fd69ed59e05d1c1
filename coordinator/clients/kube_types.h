/* kube_types: the Kubernetes objects the coordinator reads (Pod, Node, NodeClaim, NodePool, ProxmoxNodeClass,
 * PodDisruptionBudget, Lease, Secret, ConfigMap, Event) decoded into typed structs at the edge, so control/ and
 * launch/ read fields, not JSON paths. Pure. A decoded struct borrows from the object's JSON: it is valid while that
 * object is, and the JSON stays the object of record, so a write back (a patch, or a modify of the stored object)
 * keeps every field the coordinator does not know. Lists and maps (labels, taints, requirements, conditions) stay
 * JSON values: their items are read with their own helpers (kube_object.h, launchstep.h). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* metadata, as every object has it. */
struct kube_meta {
        const char *name, *namespace_, *uid, *resource_version, *creation_timestamp;
        int64_t generation;
        bool has_generation;
        bool deleting;                /* deletionTimestamp set (kube_deleting) */
        const json_t *labels;         /* object of strings, or NULL */
        const json_t *annotations;    /* object of strings, or NULL */
        const json_t *finalizers;     /* array of strings, or NULL */
};

struct kube_node {
        struct kube_meta meta;
        const char *provider_id;      /* spec.providerID */
        const json_t *taints;         /* spec.taints */
        const char *system_uuid;      /* status.nodeInfo.systemUUID */
        const json_t *status;
};

struct kube_pod {
        struct kube_meta meta;
        const char *node_name;        /* spec.nodeName */
        const char *phase;            /* status.phase */
        const json_t *tolerations;    /* spec.tolerations */
        int64_t priority;             /* spec.priority; 0 without */
        const json_t *status;
};

struct kube_nodeclaim {
        struct kube_meta meta;
        const char *node_pool;        /* spec.nodePool */
        const char *node_class;       /* spec.nodeClassRef.name */
        const char *instance_type;    /* spec.instanceType */
        const json_t *requirements;   /* spec.requirements */
        const json_t *taints, *startup_taints;    /* spec.taints, spec.startupTaints */
        const json_t *termination_grace_period;   /* spec.terminationGracePeriod, as given */
        const json_t *spec;
        const json_t *host;           /* status.host, as given (NULL: not placed) */
        const char *provider_id;      /* status.providerID */
        const json_t *status;
};

/* A NodePool: its template (the claims' labels and spec) and the usage it reports. */
struct kube_nodepool {
        struct kube_meta meta;
        const json_t *template_labels;        /* spec.template.metadata.labels */
        const json_t *template_spec;          /* spec.template.spec */
        const char *termination_grace_period; /* spec.template.spec.terminationGracePeriod */
        const json_t *resources;              /* status.resources */
};

/* A ProxmoxNodeClass: how its claims' VMs are made. */
struct kube_nodeclass {
        struct kube_meta meta;
        const json_t *spec;
        const json_t *instance_template_ref;  /* spec.instanceTemplateRef */
        const char *boot_device_size;         /* spec.bootDevice.size */
        const char *metadata_type;            /* spec.metadataOptions.type */
        const json_t *values_ref, *templates_ref; /* spec.metadataOptions.valuesRef, .templatesRef */
};

struct kube_pdb {
        struct kube_meta meta;
        const json_t *selector;               /* spec.selector */
        const char *unhealthy_pod_eviction_policy;
        int64_t disruptions_allowed;          /* status.disruptionsAllowed (0 when absent) */
};

struct kube_lease {
        struct kube_meta meta;
        const char *holder_identity, *renew_time, *acquire_time;
        const json_t *spec;
};

/* A Secret or a ConfigMap: its data (base64 values in a Secret's). */
struct kube_data_object {
        struct kube_meta meta;
        const json_t *data;
};

struct kube_event {
        struct kube_meta meta;
        const char *source_component;         /* source.component */
        const char *involved_uid;             /* involvedObject.uid */
        const char *message, *reason;
};

void kube_node_decode(const json_t *obj, struct kube_node *ret);
void kube_nodeclaim_decode(const json_t *obj, struct kube_nodeclaim *ret);
void kube_pdb_decode(const json_t *obj, struct kube_pdb *ret);
void kube_lease_decode(const json_t *obj, struct kube_lease *ret);
void kube_data_object_decode(const json_t *obj, struct kube_data_object *ret);
void kube_event_decode(const json_t *obj, struct kube_event *ret);

/* The same, for one read: kube_nodeclaim_of(claim).node_pool. */
struct kube_meta kube_meta_of(const json_t *obj);
struct kube_node kube_node_of(const json_t *obj);
struct kube_pod kube_pod_of(const json_t *obj);
struct kube_nodeclaim kube_nodeclaim_of(const json_t *obj);
struct kube_nodepool kube_nodepool_of(const json_t *obj);
struct kube_nodeclass kube_nodeclass_of(const json_t *obj);

/* The object's metadata.finalizers to change in place, in a modify of the stored object (NULL when none). */
json_t *kube_finalizers_mut(json_t *obj);
/* The object's metadata.annotations to change in place (NULL when none). */
json_t *kube_annotations_mut(json_t *obj);
/* The object's spec.taints to change in place (NULL when none). */
json_t *kube_taints_mut(json_t *obj);
