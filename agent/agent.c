/* agent: the agent's whole state (config, topology, settings, inventory, capacity) and how it is (re)built. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "jsonutil.h"
#include "log.h"

#define NODE_SETTINGS_MAX_BYTES (4u << 20)

static void drop_caches(struct agent *a) {
        free(a->topology_json);
        free(a->capacity_json);
        free(a->vms_json);
        a->topology_json = a->capacity_json = a->vms_json = NULL;
}

int agent_load_topology(struct agent *a, char *err, size_t errlen) {
        a->source.fsroot = *a->cfg.fsroot ? a->cfg.fsroot : NULL;
        a->source.xml_file = *a->cfg.topology_xml ? a->cfg.topology_xml : NULL;
        if (a->source.fsroot && a->source.xml_file) {
                snprintf(err, errlen, "fsroot and topology_xml are exclusive; give one of them");
                return -EINVAL;
        }
        struct topology *t;
        int r = topology_load(&a->source, &t, err, errlen);
        if (r < 0)
                return r;
        topology_free(a->topology);
        a->topology = t;
        drop_caches(a);
        return 0;
}

int agent_load_settings(struct agent *a, char *err, size_t errlen) {
        struct node_settings *s = NULL;
        int r = 0;
        if (!*a->cfg.node_setting_file) {
                s = node_settings_new_empty();
                r = s ? 0 : -ENOMEM;
        } else {
                char *text;
                r = fileio_read(a->cfg.node_setting_file, NODE_SETTINGS_MAX_BYTES, &text, NULL);
                if (r < 0) {
                        snprintf(err, errlen, "cannot read node-setting file %s: %s", a->cfg.node_setting_file,
                                 strerror(-r));
                        return r;
                }
                char inner[256] = "";
                r = node_settings_parse(text, a->cfg.region, a->cfg.node_name, &s, inner, sizeof inner);
                free(text);
                if (r < 0)
                        snprintf(err, errlen, "node-setting file %s: %s", a->cfg.node_setting_file, inner);
        }
        if (r < 0)
                return r;
        node_settings_free(a->settings);
        a->settings = s;
        drop_caches(a);
        return 0;
}

static bool same_json(const json_t *x, const json_t *y) {
        return x && y && json_equal((json_t *)x, (json_t *)y);
}

int agent_refresh(struct agent *a) {
        struct inventory *inv;
        int r = inventory_load(a->cfg.pve_config_dir, a->cfg.pve_run_dir, &inv);
        if (r < 0)
                return r;
        struct capacity_options opts = { .count_stopped_vms = a->cfg.count_stopped_vms };
        struct capacity *cap;
        r = capacity_compute(a->topology, a->settings, inv, &opts, &cap);
        if (r < 0) {
                inventory_free(inv);
                return r;
        }
        json_t *old_vms = a->inventory ? inventory_to_json(a->inventory) : NULL, *new_vms = inventory_to_json(inv);
        bool changed = !same_json(old_vms, new_vms) || !a->capacity;
        json_decref(old_vms);
        json_decref(new_vms);
        inventory_free(a->inventory);
        capacity_free(a->capacity);
        a->inventory = inv;
        a->capacity = cap;
        if (changed || !a->capacity_json)
                drop_caches(a);
        return changed;
}

int agent_load_all(struct agent *a, char *err, size_t errlen) {
        int r = agent_load_topology(a, err, errlen);
        if (r >= 0)
                r = agent_load_settings(a, err, errlen);
        if (r >= 0) {
                r = agent_refresh(a);
                if (r < 0)
                        snprintf(err, errlen, "cannot read the VM inventory in %s: %s", a->cfg.pve_config_dir,
                                 strerror(-r));
        }
        return r < 0 ? r : 0;
}

void agent_done(struct agent *a) {
        drop_caches(a);
        capacity_free(a->capacity);
        inventory_free(a->inventory);
        node_settings_free(a->settings);
        topology_free(a->topology);
        free(a->token);
        agent_config_done(&a->cfg);
        memset(a, 0, sizeof *a);
}

/* Prefix a document with the host's identity. Steals doc. */
static json_t *with_identity(const struct agent *a, json_t *doc) {
        if (!doc)
                return NULL;
        json_object_set_new(doc, "node", json_string(a->cfg.node_name));
        json_object_set_new(doc, "region", json_string(a->cfg.region));
        return doc;
}

json_t *agent_topology_json(const struct agent *a) {
        return with_identity(a, topology_to_json(a->topology));
}

json_t *agent_capacity_json(const struct agent *a) {
        return with_identity(a, capacity_to_json(a->capacity));
}

json_t *agent_vms_json(const struct agent *a) {
        json_t *doc = json_object();
        json_object_set_new(doc, "vms", inventory_to_json(a->inventory));
        return with_identity(a, doc);
}
