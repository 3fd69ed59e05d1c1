/* agent: the agent's whole state (config, topology, settings, inventory, capacity) and how it is (re)built. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

#include "agent_config.h"
#include "capacity.h"
#include "hosttune.h"
#include "inventory.h"
#include "ledger.h"
#include "metrics.h"
#include "node_settings.h"
#include "pin_service.h"
#include "topology.h"

struct agent {
        struct agent_config cfg;
        struct topology_source source;
        struct topology *topology;
        struct node_settings *settings;
        struct inventory *inventory;
        struct capacity *capacity; /* what is left for new placements (reservations charged) */
        struct ledger *ledger;
        struct ledger_store *ledger_store; /* its state file and journal (persist only; NULL until loaded) */
        struct pin_state pins;
        struct hosttune_state tune; /* governors and IRQ affinity (hosttune.c) */
        struct metrics metrics;  /* API request counters and latency (GET /metrics) */
        uint64_t inventory_reads;  /* times the VM inventory was read (GET /metrics) */
        uint64_t vm_config_reads;  /* times one VM's config was read alone (agent_learn_vm; GET /metrics) */
        int containers_read_error; /* the last -errno listing pve_lxc_dir (0 = read): logged when it changes */
        bool persist;              /* save the ledger after changes (the daemon; not one-shot commands) */
        /* Why the reservation state could not be loaded ("" when it was): the agent then takes no reservations and
         * is not ready, and retries agent_retry_ledger() until it can. */
        char ledger_problem[512];
        bool ledger_unsaved;       /* memory differs from the state file after a failed save: retry the save */
        char *token;          /* API bearer token; NULL for one-shot commands */
        /* Cached response bodies, rebuilt when the state they show changes. */
        char *topology_json, *capacity_json, *vms_json, *containers_json;
};

/* Read topology, node settings, inventory, and compute capacity. On failure a one-line reason is in err and
 * the agent keeps what it had. */
int agent_load_topology(struct agent *a, char *err, size_t errlen);
int agent_load_settings(struct agent *a, char *err, size_t errlen);
/* Re-read the VM inventory and recompute capacity. Returns 1 when anything changed, 0 when not, or -errno. */
int agent_refresh(struct agent *a);
/* A VM the inventory does not know yet (its config written a moment ago, ahead of inotify's news): read its config
 * alone and add it, capacity recomputed. 1 when added, 0 when it has no config, or -errno. */
int agent_learn_vm(struct agent *a, int vmid);
/* All three, in order, plus the reservation ledger from the state dir (a corrupt state file is moved aside and
 * the previous generation loaded; an unreadable one leaves the agent without reservations and not ready, see
 * ledger_problem). */
int agent_load_all(struct agent *a, char *err, size_t errlen);
/* Recompute capacity after a ledger change, and save the ledger when persist is set. 0 or -errno
 * (the ledger change is then not durable: a change the API made goes through agent_ledger_commit, which undoes
 * it). -EAGAIN while the reservation state is unavailable (nothing is saved). */
int agent_ledger_changed(struct agent *a);
/* Save a change just made to the ledger, as one transaction with its undo: 0 when it is saved (or the agent does
 * not persist). When it cannot be, u is applied (NULL: the change stands, as a release does) and the state saved
 * again; when that save fails too, the file may hold the undone change (a save can fail after its rename), so
 * ledger_unsaved is set and the tick retries (agent_retry_ledger). Returns the first failure's -errno (-EAGAIN
 * while the reservation state is unavailable). */
int agent_ledger_commit(struct agent *a, const struct ledger_undo *u);
/* Is the reservation state loaded (the agent may take reservations)? */
bool agent_ledger_ready(const struct agent *a);
/* The tick's retries: load the reservation state again while it is unavailable, save it while unsaved. */
void agent_retry_ledger(struct agent *a);
/* Release reservations whose TTL passed; save when any was. Returns how many, or -errno. */
int agent_expire(struct agent *a);
/* What the pin service reads of the agent's state (pin_service.h), for one call. */
struct pin_env agent_pin_env(const struct agent *a);
/* What GET /metrics shows of a (metrics_render). */
struct metrics_view agent_metrics_view(const struct agent *a);
/* What host tuning reads of the agent's state (hosttune.h), for one call. */
struct hosttune_env agent_hosttune_env(const struct agent *a);
/* Bring governors and IRQ affinity in line with the VMs now (hosttune_sync); the /v1/capacity document, which
 * shows them, is built anew. */
void agent_tune_host(struct agent *a);
/* Unix time now (seconds). */
int64_t agent_now(void);
void agent_done(struct agent *a);

/* The /v1/topology, /v1/capacity and /v1/vms documents (with node and region). New references. */
json_t *agent_topology_json(const struct agent *a);
json_t *agent_capacity_json(const struct agent *a);
json_t *agent_vms_json(const struct agent *a);
/* The /v1/containers document: the LXC containers (container_to_json), with node and region. */
json_t *agent_containers_json(const struct agent *a);
