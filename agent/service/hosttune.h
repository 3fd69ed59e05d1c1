/* hosttune: the host side of pinning: cpufreq governors of busy and free cores, IRQ affinity of the VMs' devices. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "hosttune_fs.h"
#include "hosttune_plan.h"

struct prom;

/* The state file of the originals, in the agent's state_dir. */
#define HOSTTUNE_STATE_FILE "hosttune.json"

struct hosttune_cpu {
        unsigned cpu;
        char governor[HOSTTUNE_VALUE_MAX]; /* as read at the last sync */
        char epp[HOSTTUNE_VALUE_MAX];      /* "" when the CPU has no energy_performance_preference */
        enum hosttune_role role;
};

struct hosttune_vm {
        int vmid;
        char *cpus;   /* the VM's host CPUs (cpulist) */
        int *irqs;    /* the MSI IRQs of its passthrough devices, steered onto cpus */
        size_t n_irqs;
};

struct hosttune_state {
        json_t *originals;          /* what the agent changed, as it was before: written back by hosttune_stop */
        size_t n_cpus;              /* online CPUs with a cpufreq governor, read at the last sync */
        struct hosttune_cpu *cpus;
        size_t n_vms;               /* running VMs with passthrough IRQs and known CPUs (irq_affinity on) */
        struct hosttune_vm *vms;
        unsigned irqs_off_pinned;   /* other IRQs kept off the pinned CPUs at the last sync */
        bool irqbalance;            /* irqbalance ran at the last sync */
        char *hint_logged;          /* the IRQBALANCE_BANNED_CPULIST advice last logged */
        json_t *failing;            /* "<file>" -> errno of writes that failed: logged when they start */
        unsigned long long writes, write_failures;
        bool pending;               /* reservations changed: the daemon syncs at its next tick */
};

struct cpuset;
struct inventory;
struct ledger;
struct topology;

/* What host tuning reads of the rest of the agent: where sysfs and its state file are, the settings it follows,
 * and the host's CPUs, VMs, reservations and reserved CPUs. The agent builds one from its state for each call
 * (agent_hosttune_env); host tuning keeps none of it. */
struct hosttune_env {
        const char *root;      /* sysfs and procfs under it ("" = this machine) */
        const char *state_dir; /* HOSTTUNE_STATE_FILE */
        bool cpu_governors, irq_affinity;
        const char *governor_busy, *governor_free, *epp_busy, *epp_free;
        const struct topology *topology;   /* NULL: not loaded (sync does nothing) */
        const struct inventory *inventory; /* NULL: not read (sync does nothing) */
        const struct ledger *ledger;       /* NULL: reservations unavailable */
        const struct cpuset *reserved_cpus; /* the node settings' reserved CPUs; NULL: none */
};

/* At the daemon's start: write back what a previous run left changed (hosttune.json in state_dir after a
 * crash, or a feature turned off since), then remove the file. 0, or -errno when the file is unreadable
 * (logged; it is kept for the next start). */
int hosttune_start(const struct hosttune_env *env);

/* Bring the host in line with the VMs now: governors (cpu_governors), IRQ affinity (irq_affinity). Reads the
 * governors even when both are off, for the page and /metrics. Failures are logged when they start. */
void hosttune_sync(struct hosttune_state *s, const struct hosttune_env *env);

/* At the daemon's stop: write every original back and remove the state file. */
void hosttune_stop(struct hosttune_state *s, const struct hosttune_env *env);

/* {"cpu_governors", "irq_affinity", "irqbalance", "irqs_off_pinned", "cpus": [{"cpu", "governor", "epp"|null,
 * "role"}], "vms": [{"vmid", "cpus", "irqs": [n...]}]}. New reference; NULL on ENOMEM. */
json_t *hosttune_json(const struct hosttune_state *s, const struct hosttune_env *env);

/* The host-tuning metric families: pvescale_agent_cpu_governor{cpu,governor}, pvescale_agent_vm_irqs{vmid},
 * pvescale_agent_irqs_off_pinned_cpus and pvescale_agent_host_tuning_write{,_failure}s_total. */
void hosttune_render_metrics(struct prom *p, const struct hosttune_state *s);

void hosttune_state_done(struct hosttune_state *s);
