/* agent: the agent's whole state (config, topology, settings, inventory, capacity) and how it is (re)built. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fileio.h"
#include "jsonutil.h"
#include "ledger_rebuild.h"
#include "log.h"
#include "pinning_proc.h"

#define NODE_SETTINGS_MAX_BYTES (4u << 20)

static void drop_caches(struct agent *a) {
        free(a->topology_json);
        free(a->capacity_json);
        free(a->vms_json);
        free(a->containers_json);
        a->topology_json = a->capacity_json = a->vms_json = a->containers_json = NULL;
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

struct pin_env agent_pin_env(const struct agent *a) {
        return (struct pin_env){
                .ledger = a->ledger,
                .inventory = a->inventory,
                .run_dir = a->cfg.pve_run_dir,
                .pin = a->cfg.node_policy == NODE_POLICY_STATIC,
        };
}

struct metrics_view agent_metrics_view(const struct agent *a) {
        return (struct metrics_view){
                .node = a->cfg.node_name,
                .region = a->cfg.region,
                .topology = a->topology,
                .capacity = a->capacity,
                .ledger = a->ledger,
                .inventory = a->inventory,
                .inventory_reads = a->inventory_reads,
                .vm_config_reads = a->vm_config_reads,
                .pins = &a->pins,
                .pin_env = agent_pin_env(a),
                .tune = &a->tune,
        };
}

struct hosttune_env agent_hosttune_env(const struct agent *a) {
        return (struct hosttune_env){
                .root = a->cfg.fsroot,
                .state_dir = a->cfg.state_dir,
                .cpu_governors = a->cfg.cpu_governors,
                .irq_affinity = a->cfg.irq_affinity,
                .governor_busy = a->cfg.governor_busy,
                .governor_free = a->cfg.governor_free,
                .epp_busy = a->cfg.epp_busy,
                .epp_free = a->cfg.epp_free,
                .topology = a->topology,
                .inventory = a->inventory,
                .ledger = a->ledger,
                .reserved_cpus = a->settings ? a->settings->reserved_cpus : NULL,
        };
}

void agent_tune_host(struct agent *a) {
        struct hosttune_env env = agent_hosttune_env(a);
        hosttune_sync(&a->tune, &env);
        free(a->capacity_json); /* the document shows the governors and IRQs */
        a->capacity_json = NULL;
}

int64_t agent_now(void) {
        return (int64_t)time(NULL);
}

static int recompute_capacity(struct agent *a) {
        struct capacity_options opts = { .count_stopped_vms = a->cfg.count_stopped_vms };
        struct capacity *cap;
        int r = ledger_effective_capacity(a->ledger, a->topology, a->settings, a->inventory, &opts, &cap);
        if (r < 0)
                return r;
        capacity_free(a->capacity);
        a->capacity = cap;
        drop_caches(a);
        return 0;
}

bool agent_ledger_ready(const struct agent *a) {
        return a->ledger_problem[0] == '\0';
}

int agent_ledger_changed(struct agent *a) {
        if (!agent_ledger_ready(a))
                return -EAGAIN; /* never write over a state file that could not be read */
        a->tune.pending = true; /* a bound or released reservation changes which cores are busy */
        int r = a->persist ? ledger_store_commit(a->ledger_store, a->ledger) : 0;
        if (r < 0) {
                log_error_errno(r, "cannot save reservations in %s", a->cfg.state_dir);
                return r;
        }
        a->ledger_unsaved = false;
        return recompute_capacity(a);
}

/* After undoing a change whose save failed: save again and recompute capacity. 0 or -errno. */
static int agent_ledger_undone(struct agent *a) {
        int r = agent_ledger_changed(a);
        if (r < 0 && r != -EAGAIN) {
                a->ledger_unsaved = true;
                log_error("the reservations in memory may differ from %s/%s; saving again every tick",
                          a->cfg.state_dir, LEDGER_STATE_FILE);
                recompute_capacity(a);
        }
        return r;
}

int agent_ledger_commit(struct agent *a, const struct ledger_undo *u) {
        int r = agent_ledger_changed(a);
        if (r == 0)
                return 0;
        if (u)
                ledger_undo(a->ledger, u);
        agent_ledger_undone(a);
        return r;
}

int agent_expire(struct agent *a) {
        if (!agent_ledger_ready(a))
                return 0;
        unsigned released = ledger_expire(a->ledger, a->inventory, agent_now());
        if (released == 0)
                return 0;
        log_info("released %u reservation(s): TTL expired or VM config removed", released);
        int r = agent_ledger_changed(a);
        return r < 0 ? r : (int)released;
}

/* A container whose config has problems is logged when it first shows them (or they change), not every read. */
static void log_container_problems(const struct inventory *old, const struct inventory *inv, const char *dir) {
        for (size_t i = 0; i < inv->containers.n; i++) {
                const struct container *ct = inv->containers.items[i];
                const struct container *was = old ? container_list_find(&old->containers, ct->vmid) : NULL;
                if (ct->n_errors == 0 || (was && was->n_errors == ct->n_errors))
                        continue;
                log_warning("container %d: %s/%d.conf line %u: %s%s", ct->vmid, dir, ct->vmid,
                            ct->errors[0].line, ct->errors[0].reason,
                            ct->unreadable ? " (not counted)" : " (the value keeps its default)");
        }
}

/* Read the containers into inv. When their directory cannot be listed, the containers last read stay counted
 * (taken over from the previous inventory: releasing their CPUs on a read error would hand them out twice) and
 * the error is logged when it first happens or changes. Only -ENOMEM fails. */
static int load_containers(struct agent *a, struct inventory *inv) {
        int r = inventory_load_containers(inv, a->cfg.pve_lxc_dir, a->cfg.lxc_cgroup_dir);
        if (r == -ENOMEM)
                return r;
        if (r < 0 && r != a->containers_read_error)
                log_error_errno(r, "cannot read the container configs in %s; counting the containers last read",
                                a->cfg.pve_lxc_dir);
        else if (r == 0 && a->containers_read_error)
                log_info("container configs in %s readable again", a->cfg.pve_lxc_dir);
        a->containers_read_error = r;
        if (r < 0 && a->inventory) {
                inv->containers = a->inventory->containers;
                a->inventory->containers = (struct container_list){ 0 };
        }
        return 0;
}

int agent_refresh(struct agent *a) {
        struct inventory *inv;
        int r = inventory_load(a->cfg.pve_config_dir, a->cfg.pve_run_dir, &inv);
        if (r == 0 && (r = load_containers(a, inv)) < 0)
                inventory_free(inv);
        if (r < 0)
                return r;
        log_container_problems(a->inventory, inv, a->cfg.pve_lxc_dir);
        a->inventory_reads++;
        bool changed = !inventory_equal(a->inventory, inv) || !a->capacity;
        inventory_free(a->inventory);
        a->inventory = inv;
        int released = agent_expire(a);
        if (released < 0)
                return released;
        r = released == 0 && changed ? recompute_capacity(a) : 0;
        return r < 0 ? r : (changed || released > 0);
}

int agent_learn_vm(struct agent *a, int vmid) {
        struct vm *vm = NULL;
        int r = inventory_load_vm(a->cfg.pve_config_dir, a->cfg.pve_run_dir, vmid, &vm);
        a->vm_config_reads++;
        if (r == -ENOENT)
                return 0;
        if (r == 0 && (r = inventory_add(a->inventory, vm)) < 0)
                vm_free(vm);
        if (r == 0)
                r = recompute_capacity(a);
        return r < 0 ? r : 1;
}

/* No state at all under the static policy: rebuild the bound reservations from the VM configs the coordinator
 * described and the CPUs their QEMU runs on, and save them. 0, or -errno with problem set (take none). */
static int rebuild_ledger(struct agent *a, struct ledger *l, struct ledger_store *store, char *problem, size_t len) {
        if (a->cfg.node_policy != NODE_POLICY_STATIC)
                return 0;
        int n = ledger_rebuild(l, a->topology, a->cfg.pve_config_dir, a->cfg.pve_run_dir, PINNING_PROC_ROOT,
                               agent_now());
        if (n < 0) {
                snprintf(problem, len,
                         "no reservation state, and the VM configs in %s cannot be read to rebuild it: %s",
                         a->cfg.pve_config_dir, strerror(-n));
                return n;
        }
        if (n == 0)
                return 0;
        int r = ledger_store_commit(store, l);
        a->ledger_unsaved = r < 0;
        log_info("no reservation state: rebuilt %d bound reservations from the VM configs and QEMU%s", n,
                 r < 0 ? " (not saved yet)" : "");
        return 0;
}

/* Load the ledger; when it cannot be (no intact generation, a read error), keep an empty ledger, take no
 * reservations and say why in ledger_problem. Only -ENOMEM fails. */
static int load_ledger(struct agent *a) {
        char problem[512] = "";
        struct ledger *l = NULL;
        struct ledger_store *store = NULL;
        bool absent = a->persist && ledger_state_absent(a->cfg.state_dir);
        int r = 0;
        if (a->persist)
                r = ledger_store_load(a->cfg.state_dir, a->topology, agent_now(), &l, &store, problem, sizeof problem);
        else if (!(l = ledger_new()))
                r = -ENOMEM;
        if (r == 0 && absent && (r = rebuild_ledger(a, l, store, problem, sizeof problem)) < 0) {
                ledger_free(l);
                ledger_store_free(store);
                l = NULL;
        }
        if (r == -ENOMEM || (r < 0 && !a->ledger && !(a->ledger = ledger_new())))
                return -ENOMEM;
        if (r < 0) {
                if (strcmp(problem, a->ledger_problem) != 0)
                        log_error("reservations unavailable, taking none until this is resolved: %s", problem);
                snprintf(a->ledger_problem, sizeof a->ledger_problem, "%s", problem);
                return 0;
        }
        if (r > 0)
                log_error("reservation state was damaged: %s", problem);
        if (!agent_ledger_ready(a))
                log_info("reservation state loaded: %zu reservations", l->n);
        a->ledger_problem[0] = '\0';
        ledger_free(a->ledger);
        ledger_store_free(a->ledger_store);
        a->ledger = l;
        a->ledger_store = store;
        return 0;
}

void agent_retry_ledger(struct agent *a) {
        if (!agent_ledger_ready(a)) {
                load_ledger(a);
                if (agent_ledger_ready(a)) {
                        recompute_capacity(a);
                        a->pins.pending = true; /* pin the VMs of the reservations loaded or rebuilt at the next tick */
                }
        } else if (a->ledger_unsaved && agent_ledger_changed(a) == 0)
                log_info("reservations saved again in %s", a->cfg.state_dir);
}

int agent_load_all(struct agent *a, char *err, size_t errlen) {
        int r = agent_load_topology(a, err, errlen);
        if (r >= 0)
                r = agent_load_settings(a, err, errlen);
        if (r >= 0 && (r = load_ledger(a)) < 0)
                snprintf(err, errlen, "cannot load reservations from %s: %s", a->cfg.state_dir, strerror(-r));
        if (r >= 0 && (r = agent_refresh(a)) < 0)
                snprintf(err, errlen, "cannot read the VM inventory in %s: %s", a->cfg.pve_config_dir,
                         strerror(-r));
        return r < 0 ? r : 0;
}

void agent_done(struct agent *a) {
        drop_caches(a);
        capacity_free(a->capacity);
        ledger_free(a->ledger);
        ledger_store_free(a->ledger_store);
        pin_state_done(&a->pins);
        hosttune_state_done(&a->tune);
        inventory_free(a->inventory);
        node_settings_free(a->settings);
        topology_free(a->topology);
        free(a->token);
        agent_config_done(&a->cfg);
        memset(a, 0, sizeof *a);
}

/* Prefix a document with the host's identity. Steals doc. */
static json_t *with_identity(const struct agent *a, json_t *doc) {
        json_t *out = doc ? json_pack("{s:s, s:s}", "node", a->cfg.node_name, "region", a->cfg.region) : NULL;
        if (out)
                json_object_update(out, doc);
        json_decref(doc);
        return out;
}

json_t *agent_topology_json(const struct agent *a) {
        return with_identity(a, topology_to_json(a->topology));
}

json_t *agent_capacity_json(const struct agent *a) {
        json_t *doc = capacity_to_json(a->capacity);
        struct hosttune_env env = agent_hosttune_env(a);
        if (doc)
                json_object_set_new(doc, "host_tuning", hosttune_json(&a->tune, &env));
        return with_identity(a, doc);
}

json_t *agent_vms_json(const struct agent *a) {
        json_t *doc = json_object();
        json_object_set_new(doc, "vms", inventory_to_json(a->inventory));
        return with_identity(a, doc);
}

/* Each container with "counted": whether capacity charges it (templates, unreadable configs and, with
 * count_stopped_vms off, stopped containers are not). */
json_t *agent_containers_json(const struct agent *a) {
        struct capacity_options opts = { .count_stopped_vms = a->cfg.count_stopped_vms };
        const struct container_list *l = a->inventory ? &a->inventory->containers : NULL;
        json_t *list = container_list_to_json(l);
        for (size_t i = 0; list && i < json_array_size(list); i++)
                json_object_set_new(json_array_get(list, i), "counted",
                                    json_boolean(capacity_container_counted(l->items[i], &opts)));
        json_t *doc = json_object();
        json_object_set_new(doc, "containers", list);
        return with_identity(a, doc);
}
