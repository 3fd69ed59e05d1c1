/* node_settings: the seed's node-setting JSON file (region -> node or "*" -> reserved CPUs/memory, overrides). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "cpuset.h"

struct node_settings_numa {
        int id;
        struct cpuset *cpus;   /* NULL when not given */
        uint64_t memory_bytes; /* `memory` or `memsize`; 0 when not given */
};

/* The settings that apply to one node (exact name wins over "*"). Every field is optional. */
struct node_settings {
        struct cpuset *reserved_cpus; /* never NULL after a successful lookup (may be empty) */
        uint64_t reserved_memory_bytes;
        int sockets, threads, uncorecaches; /* 0 = not overridden */
        size_t n_numa;
        struct node_settings_numa *numa; /* topology overrides; n_numa == 0 when absent */
};

/* Parse the whole file text (pure) and pick the entry for region/node. A file with no matching entry
 * gives empty settings. Returns 0, or -EINVAL with a one-line reason naming the key in err. */
int node_settings_parse(const char *json_text, const char *region, const char *node,
                        struct node_settings **ret_settings, char *err, size_t errlen);
/* Empty settings (nothing reserved). */
struct node_settings *node_settings_new_empty(void);
void node_settings_free(struct node_settings *s);
