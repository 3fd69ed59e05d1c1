/* simulate_json: pure conversion of Kubernetes objects (jansson) into simulation input: Pod, Node,
 * NodeClaim, NodePool, DaemonSet, ProxmoxNodeClass, and the host room reported by agents. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "shapes.h"
#include "simulate.h"

/* Every function appends one object to in and returns it in *ret (may be NULL). On a malformed object:
 * -EINVAL, "path: reason" in err (e.g. "spec.containers[0].resources.requests.cpu: invalid quantity"),
 * and in unchanged. -ENOMEM on allocation failure. Strings are copied into the input's arena. */

/* A Pod. Requests = max(biggest init container (sidecars counted), sum of containers + sidecars) +
 * overhead, for cpu, memory, ephemeral-storage and hugepages; a missing request falls back to the limit,
 * as the API server defaults it; pods = 1. spec.nodeName makes it a bound pod. */
int simulate_json_pod(struct sim_input *in, const json_t *pod, struct sim_pod **ret, char *err, size_t errlen);

/* A Node: labels, taints, spec.unschedulable (or a deletionTimestamp), status.capacity/allocatable. The
 * node pool comes from the pvescale.io/nodepool label. */
int simulate_json_node(struct sim_input *in, const json_t *node, struct sim_node **ret, char *err, size_t errlen);

/* A pvescale.io NodeClaim not yet registered as a Node: an in-flight node. Labels come from
 * metadata.labels and single-valued In requirements; capacity/allocatable from status, else from the
 * shape spec.instanceType in catalog (may be NULL). */
int simulate_json_nodeclaim(struct sim_input *in, const json_t *claim, const struct shape_catalog *catalog,
                            struct sim_node **ret, char *err, size_t errlen);

/* A NodePool: weight, template labels, requirements, taints, nodeClassRef, limits (cpu, memory, nodes). */
int simulate_json_nodepool(struct sim_input *in, const json_t *pool, struct sim_nodepool **ret, char *err,
                           size_t errlen);

/* A DaemonSet: its pod template, with the tolerations the DaemonSet controller adds to every pod. */
int simulate_json_daemonset(struct sim_input *in, const json_t *ds, struct sim_pod **ret, char *err, size_t errlen);

/* A ProxmoxNodeClass. Its shapes: the defaults plus spec.instanceTypes, with spec.kubeletConfiguration and
 * spec.bootDevice.size applied on top of base. *ret_catalog is the caller's to free after the run. */
int simulate_json_nodeclass(struct sim_input *in, const json_t *nc, const struct shape_options *base,
                            struct sim_nodeclass **ret, struct shape_catalog **ret_catalog, char *err,
                            size_t errlen);

/* A host: {"name", "region", "free_cpus", "free_memory_bytes",
 *          "numa": [{"id", "free_cpus", "total_cpus", "free_memory_bytes"}],
 *          "offers": [{"shape", "count"}]}   (numa and offers optional) */
int simulate_json_host(struct sim_input *in, const json_t *host, struct sim_host **ret, char *err, size_t errlen);
