/* inventory: the VMs on this host, parsed from Proxmox qemu-server configs and run files. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "container.h"
#include "cpuset.h"

#define INVENTORY_MAX_NUMA 8
#define INVENTORY_MAX_HOSTPCI 16   /* host PCI addresses kept from hostpciN lines */
#define INVENTORY_PCI_ADDR_MAX 16  /* "0000:01:00.0" and its NUL */

/* One `numaN:` line: cpus=<guest ids>,hostnodes=<host node ids>,memory=<MiB>,policy=... */
struct vm_numa {
        bool present;
        struct cpuset *guest_cpus; /* may be NULL when cpus= is absent */
        struct cpuset *hostnodes;  /* host NUMA node OS ids; NULL when absent */
        uint64_t memory_mib;       /* 0 when absent */
        char policy[16];           /* "", "bind", "preferred", "interleave" */
};

struct vm_config_error {
        unsigned line; /* 1-based line in the .conf file; 0 = whole file */
        char *reason;
};

struct vm {
        int vmid;
        char *name;
        unsigned cores, sockets, vcpus; /* as configured; defaults cores=1 sockets=1, vcpus=0 (= cores*sockets) */
        uint64_t memory_mib;            /* static memory (the `current=` form is read too); default 512 */
        uint64_t balloon_mib;           /* 0 when absent */
        struct cpuset *affinity;        /* NULL when unpinned (floating) */
        bool numa;
        struct vm_numa numa_nodes[INVENTORY_MAX_NUMA];
        bool numa_valid;                /* numa: 1 and numaN entries Proxmox accepts at start: each has memory=,
                                         * policy= when hostnodes=, and the memories add up to memory */
        char hugepages[16];             /* "", "any", "2", "1024" */
        char *tags;                     /* ";"-separated as in the file, or NULL */
        bool template_vm;
        size_t n_hostpci;               /* host PCI addresses of the hostpciN lines (host= or the bare value, each
                                         * ";"-separated id), as written: "0000:01:00.0", "01:00.0", or "01:00"
                                         * for every function; mapping= entries are not resolved */
        char hostpci[INVENTORY_MAX_HOSTPCI][INVENTORY_PCI_ADDR_MAX];
        bool running;
        int pid;                        /* QEMU pid when running, else 0 */
        size_t n_errors;
        struct vm_config_error *errors; /* malformed lines: the VM is still counted with what parsed */
};

/* The number of vCPUs the VM really runs: vcpus if set, else cores * sockets. */
unsigned vm_vcpu_count(const struct vm *vm);

/* Parse one config text (pure). Only the part before the first [section] is read. Bad lines are
 * recorded in vm->errors; the call fails only for ENOMEM. */
int inventory_parse_config(int vmid, const char *text, struct vm **ret_vm);
void vm_free(struct vm *vm);
/* Record a problem with the VM's config (line 0 = the whole file). Returns 0 or -ENOMEM. */
int vm_add_error(struct vm *vm, unsigned line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

struct inventory {
        size_t n_vms;
        struct vm **vms; /* sorted by vmid */
        struct container_list containers; /* LXC containers (inventory_load_containers); empty until loaded */
};

/* Read every <vmid>.conf in config_dir and mark running VMs from run_dir (<vmid>.pid naming a live QEMU
 * process: argv[0] basename kvm or qemu-system-*, and `-id <vmid>` or `-pidfile <run_dir>/<vmid>.pid`).
 * A missing directory is an empty inventory. Returns 0 or -ENOMEM / other negative errno. */
int inventory_load(const char *config_dir, const char *run_dir, struct inventory **ret_inventory);
void inventory_free(struct inventory *inv);
/* One VM as inventory_load reads it: <config_dir>/<vmid>.conf parsed and its QEMU looked for in run_dir. 0,
 * -ENOENT when the VM has no config file, or another negative errno. */
int inventory_load_vm(const char *config_dir, const char *run_dir, int vmid, struct vm **ret_vm);
/* Add vm (taken on success) in vmid order: 0, -EEXIST when inv has that VM, or -ENOMEM. */
int inventory_add(struct inventory *inv, struct vm *vm);
/* Read the LXC containers into inv->containers (container_list_load), replacing any there. 0 or -errno. */
int inventory_load_containers(struct inventory *inv, const char *lxc_dir, const char *cgroup_dir);
const struct vm *inventory_find(const struct inventory *inv, int vmid);

/* Liveness check used by inventory_load and pinning: the QEMU pid of vmid, or -ENOENT (no pid file),
 * -EINVAL (pid file without a pid), -ESRCH (no such process, a zombie, or not the QEMU of this VM: stale). */
int inventory_running_pid(const char *run_dir, int vmid);

/* Whether two parsed VMs (two inventories: the same VMs in the same order) are the same in every field. */
bool vm_equal(const struct vm *a, const struct vm *b);
bool inventory_equal(const struct inventory *a, const struct inventory *b);

/* {"vmid", "name", "vcpus" (effective), "cores", "sockets", "memory_bytes", "balloon_bytes", "affinity"
 * (cpulist or null), "numa", "numa_nodes": [{"index", "cpus", "hostnodes", "memory_bytes", "policy"}],
 * "hugepages", "tags": [...], "template", "running", "pid" (or null), "errors": [{"line", "reason"}]}. */
json_t *vm_to_json(const struct vm *vm);
/* The array of vm_to_json objects, by vmid. New reference; NULL on ENOMEM. */
json_t *inventory_to_json(const struct inventory *inv);
