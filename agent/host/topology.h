/* topology: the host's CPU and memory layout (hwloc for structure, sysfs under a root for live counts). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "cpuset.h"

struct topology_hugepages {
        uint64_t page_kib; /* 2048, 1048576, ... */
        uint64_t total;    /* pages */
        uint64_t free;     /* pages */
};

struct topology_numa_node {
        int id;                       /* OS index; ids may be sparse (0,1,2,33) */
        struct cpuset *cpus;          /* online CPUs local to the node; may be empty (memory-only node) */
        uint64_t memory_bytes;        /* MemTotal of the node (hwloc local_memory) */
        uint64_t memory_free_bytes;   /* MemFree from <root>/sys/devices/system/node/nodeN/meminfo, or libnuma */
        int package;                  /* index into topology.packages, or -1 if the node spans packages */
        char *subtype;                /* hwloc subtype ("NVM", "MCDRAM", ...) or NULL for plain DRAM */
        size_t n_hugepages;
        struct topology_hugepages *hugepages; /* sorted by page size */
};

struct topology_l3 {
        struct cpuset *cpus;
        uint64_t size_bytes;
};

struct topology_core {
        struct cpuset *cpus; /* the SMT sibling threads of the core */
        int package;         /* index into topology.packages */
        int numa_node;       /* index into topology.numa_nodes, or -1: the most local node with memory that
                              * holds all the core's CPUs (numa node cpus can overlap, see topology.c) */
        int l3;              /* index into topology.l3_caches, or -1 */
};

struct topology_package {
        int id; /* OS index */
        char *cpu_model;
        struct cpuset *cpus;
};

/* Where the topology came from: decides how live counts are read (see topology.c). */
enum topology_kind {
        TOPOLOGY_KIND_HOST,   /* this machine: hwloc default backends, sysfs under "/", libnuma */
        TOPOLOGY_KIND_FSROOT, /* a gathered tree: hwloc linux backend only, sysfs under the fsroot */
        TOPOLOGY_KIND_XML,    /* hwloc XML: no sysfs; everything online, nothing isolated, free = total */
};

/* The whole host. Arrays are sorted: packages and numa nodes by OS id, l3 caches and cores by their
 * first CPU. Every cpus value holds OS indexes. */
struct topology {
        enum topology_kind kind;
        char *cpu_model;
        struct cpuset *cpus;     /* every CPU in the model (online, allowed or not) */
        struct cpuset *online;   /* <root>/sys/devices/system/cpu/online, intersected with cpus */
        struct cpuset *isolated; /* <root>/sys/devices/system/cpu/isolated */
        struct cpuset *allowed;  /* what hwloc's default view would allow this process (cgroup cpuset) */
        size_t n_packages, n_numa_nodes, n_l3_caches, n_cores;
        struct topology_package *packages;
        struct topology_numa_node *numa_nodes;
        struct topology_l3 *l3_caches;
        struct topology_core *cores;
};

/* Where to read the host from. Exactly one of fsroot / xml_file may be set; neither = this machine. */
struct topology_source {
        const char *fsroot;   /* gathered /sys + /proc tree (HWLOC_FSROOT); own sysfs reads go below it too */
        const char *xml_file; /* hwloc XML export */
};

/* Load the topology (src NULL = this machine). Returns 0, or a negative errno with a one-line reason in
 * err: -EINVAL both sources given (or hwloc rejected the input), -ENOENT fsroot without
 * sys/devices/system/cpu or XML file missing, -ENODEV no CPUs, -ENOMEM. *ret_topology is written only on
 * success; the caller frees it with topology_free(). Sets HWLOC_FSROOT while hwloc loads (restored
 * after), so do not call it from two threads at once. Logs nothing. */
int topology_load(const struct topology_source *src, struct topology **ret_topology, char *err, size_t errlen);
void topology_free(struct topology *t);

/* Re-read the live counts (per-node free memory, hugepages) without touching the structure. src must be
 * the one the topology was loaded from. A no-op for XML. Returns 0 or a negative errno (-EINVAL for a
 * malformed meminfo); on failure the nodes already visited keep their new values, the rest the old. */
int topology_refresh_memory(struct topology *t, const struct topology_source *src);

/* Index of the numa node with OS id `id`, or -1. */
int topology_numa_index(const struct topology *t, int id);

/* The NUMA node of a PCI device, from <root>/sys/bus/pci/devices/<address>/numa_node (root NULL: this machine; the
 * address as sysfs names it, "0000:41:00.0"): 0 and the node's OS id, -1 when the kernel knows none; -ENOENT when
 * the host has no such device, -EINVAL for an unreadable value, another negative errno. */
int topology_pci_numa_node(const char *root, const char *address, int *ret_node);

/* Pure parsers, exposed for tests.
 * topology_parse_meminfo: "Node N MemTotal: X kB" lines of nodeN/meminfo, or /proc/meminfo lines
 * ("MemTotal: X kB"). Returns 0 with both values in bytes, -EINVAL when either key is missing or bad.
 * topology_parse_hugepage_dir: "hugepages-2048kB" -> 2048 (KiB); -EINVAL for anything else.
 * topology_parse_node_dir: "node12" -> 12; -EINVAL for anything else ("online", "node", "node1a"). */
int topology_parse_meminfo(const char *text, uint64_t *ret_total_bytes, uint64_t *ret_free_bytes);
int topology_parse_hugepage_dir(const char *name, uint64_t *ret_page_kib);
int topology_parse_node_dir(const char *name, int *ret_id);

/* The /v1/topology document (without node/region, which the caller adds). New reference. */
json_t *topology_to_json(const struct topology *t);
