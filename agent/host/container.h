/* container: the LXC containers on this host, parsed from pve-container configs and their cgroups. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpuset.h"

struct container_error {
        unsigned line; /* 1-based line in the .conf file; 0 = whole file */
        char *reason;
};

/* One /etc/pve/lxc/<vmid>.conf (the part before the first [section]) and its running state. */
struct container {
        int vmid;
        char *hostname;           /* NULL when absent */
        unsigned cores;           /* 0 when absent: the container may use every host CPU */
        unsigned cpulimit_centi;  /* cpulimit * 100, rounded up; 0 = no limit */
        unsigned cpuunits;        /* 0 when absent */
        uint64_t memory_mib;      /* default 512 */
        uint64_t swap_mib;        /* default 512 */
        struct cpuset *cpuset;    /* raw lxc.cgroup2.cpuset.cpus (or lxc.cgroup.cpuset.cpus): NULL when unpinned */
        bool template_ct;
        bool unreadable;          /* the file could not be read: listed with the error, never counted */
        bool running;             /* its cgroup <cgroup_dir>/<vmid> is populated */
        struct cpuset *effective; /* cpuset.cpus.effective of a running container, or NULL */
        size_t n_errors;
        struct container_error *errors; /* bad lines: the value keeps its default, the rest still counts */
};

/* The CPUs a container is counted for when not pinned, as Proxmox's vmstatus reports `cpus`: `cores`, or every
 * host CPU (host_cpus) without it; a smaller `cpulimit` lowers it (rounded up). */
unsigned container_cpu_count(const struct container *ct, unsigned host_cpus);

/* Parse one config text (pure). Bad lines are recorded in errors; fails only for ENOMEM. */
int container_parse_config(int vmid, const char *text, struct container **ret);
void container_free(struct container *ct);

struct container_list {
        size_t n;
        struct container **items; /* sorted by vmid */
};

/* Read every <vmid>.conf in config_dir, and mark running ones from cgroup_dir (cgroup v2: pve-container puts
 * the container in <cgroup_dir>/<vmid>, "populated 1" in its cgroup.events while anything runs in it). A missing
 * directory is an empty list. 0 or -ENOMEM / other negative errno (the directory cannot be listed). */
int container_list_load(const char *config_dir, const char *cgroup_dir, struct container_list *ret);
void container_list_done(struct container_list *l);
bool container_list_equal(const struct container_list *a, const struct container_list *b);
const struct container *container_list_find(const struct container_list *l, int vmid);

/* {"vmid", "hostname", "cores" (or null), "cpulimit" (or null), "cpuunits" (or null), "memory_bytes",
 * "swap_bytes", "cpuset" (the raw pin or null), "pinned", "template", "running", "effective_cpus" (or null),
 * "errors": [{"line", "reason"}]}. */
json_t *container_to_json(const struct container *ct);
json_t *container_list_to_json(const struct container_list *l);
