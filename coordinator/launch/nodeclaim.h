/* nodeclaim: a NodeClaim's placement as the provisioner plans it and the launcher records it (host, region, shape). Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>

#include "shapes.h"

/* The PVE host a claim is planned on: status.host, else its zone requirement; NULL when neither. */
const char *nodeclaim_host(const json_t *claim);
/* Its PVE cluster: status.region, else its region requirement; NULL when neither. */
const char *nodeclaim_region(const json_t *claim);
/* The placement status from its parts (region may be NULL): host, region, capacity and allocatable of the shape;
 * what the launcher records with its first status write. New reference. */
json_t *nodeclaim_placement_status(const char *host, const char *region, const struct shape *shape);
