/* nodeclaim: a NodeClaim's placement as the provisioner plans it and the launcher records it (host, region, shape). Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeclaim.h"

#include <string.h>

#include "simulate.h"

static const char *str_at(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

/* status.<status_key>, else the single value of the claim's In requirement on label. */
static const char *claim_place(const json_t *claim, const char *status_key, const char *label) {
        const char *v = str_at(json_object_get(claim, "status"), status_key);
        if (v && *v)
                return v;
        size_t i;
        json_t *req;
        json_array_foreach(json_object_get(json_object_get(claim, "spec"), "requirements"), i, req) {
                const char *key = str_at(req, "key"), *op = str_at(req, "operator");
                json_t *values = json_object_get(req, "values");
                if (key && op && strcmp(key, label) == 0 && strcmp(op, "In") == 0 && json_array_size(values) == 1)
                        return json_string_value(json_array_get(values, 0));
        }
        return NULL;
}

const char *nodeclaim_host(const json_t *claim) {
        return claim_place(claim, "host", SIM_LABEL_ZONE);
}

const char *nodeclaim_region(const json_t *claim) {
        return claim_place(claim, "region", SIM_LABEL_REGION);
}

json_t *nodeclaim_placement_status(const char *host, const char *region, const struct shape *shape) {
        json_t *st = json_pack("{s:s, s:o, s:o}", "host", host, "capacity", resources_to_json(&shape->capacity),
                               "allocatable", resources_to_json(&shape->allocatable));
        if (st && region && *region)
                json_object_set_new(st, "region", json_string(region));
        return st;
}
