/* nominate: which pending pods a claim's Node should carry as status.nominatedNodeName, from the provisioner's
 * Nominated events (the plan), so that kube-scheduler tries that Node first for them and counts them on it when it
 * filters other pods (docs/coordinator.md, "Nominations"). Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#define NOMINATE_COMPONENT "pvescale-coordinator" /* source.component of the provisioner's events */

/* The pods to nominate to node for claim: each pod of pods (a pod list: {"items": [...]}) that is not bound, not
 * being deleted, whose newest Nominated event from NOMINATE_COMPONENT in events (an event list; newest by
 * metadata.resourceVersion) names nodeclaim/<claim>, and whose status.nominatedNodeName is not node yet.
 * A new array of {"namespace", "name"} in the pods' order, or NULL on ENOMEM. */
json_t *nominate_pods_of(const json_t *pods, const json_t *events, const char *claim, const char *node);

/* Does msg name nodeclaim/<claim> (followed by a space or its end)? */
bool nominate_names_claim(const char *msg, const char *claim);
