/* shapes: the instance types a node claim can get (default families c1/t1/s1/m1 plus custom shapes) and
 * their allocatable resources. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resources.h"

#define SHAPE_NAME_MAX 64
#define SHAPE_FAMILY_MAX 32

/* One instance type. Allocatable, per resource (docs/coordinator.md has the table):
 *   capacity.memory  = vm_memory - ceil_MiB(vm_memory * vm_memory_overhead)
 *   allocatable      = capacity - kube_reserved - system_reserved - eviction   (never below 0)
 *   allocatable.memory also loses the pre-allocated hugepages, as the kubelet does. */
struct shape {
        char name[SHAPE_NAME_MAX];     /* "t1.2VCPU-6GB" */
        char family[SHAPE_FAMILY_MAX]; /* "t1" */
        uint32_t vcpus;                /* VM cores, one host CPU each */
        uint64_t vm_memory_bytes;      /* VM memory as configured in Proxmox (whole MiB) */
        struct resources capacity;     /* what the kubelet will report */
        struct resources kube_reserved, system_reserved, eviction;
        struct resources allocatable;
        bool custom;
};

/* Knobs that change every shape of a node class (its kubeletConfiguration and boot disk). */
struct shape_options {
        int64_t disk_bytes;               /* ephemeral-storage capacity: the boot disk; default 30Gi */
        double vm_memory_overhead;        /* fraction of VM memory the guest kernel keeps; default 0.075 */
        int32_t max_pods;                 /* 0: by size (32 up to 1Gi, 64 up to 2Gi, else 110) */
        struct resources kube_reserved;   /* a value < 0 means the tiered default of that resource */
        struct resources system_reserved; /* a value < 0 means the default (10m cpu, 64Mi memory) */
        int64_t eviction_memory_bytes;    /* memory.available hard threshold; default 100Mi */
        int32_t eviction_memory_percent;  /* when > 0, memory.available as a percent of capacity instead */
        int32_t eviction_nodefs_percent;  /* nodefs.available hard threshold; default 10 */
};

struct shape_catalog {
        struct shape *items; /* in cost order after shapes_catalog_sort(): vCPUs, then memory, then name */
        size_t n, cap;
};

void shapes_options_default(struct shape_options *ret_options);

/* Apply a ProxmoxNodeClass kubeletConfiguration object (maxPods, kubeReserved, systemReserved,
 * evictionHard) on top of *options. On error -EINVAL, a message naming the field in err, and *options
 * unchanged. */
int shapes_options_from_kubelet(const json_t *kubelet, struct shape_options *options, char *err, size_t errlen);

/* The tiered kube-reserved defaults (GKE/EKS style; docs/coordinator.md):
 *   cpu:    6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of every core above 4;
 *   memory: 255Mi below 1Gi; else 25% of the first 4Gi, 20% of the next 4Gi, 10% of the next 8Gi,
 *           6% of the next 112Gi and 2% above 128Gi, rounded up to a whole MiB. */
int64_t shapes_kube_reserved_cpu(uint32_t vcpus);
int64_t shapes_kube_reserved_memory(int64_t memory_bytes);

/* Compute a shape from its VM size. -EINVAL for an empty or too long name or family, zero vcpus or memory
 * that is not a whole number of MiB. */
int shapes_make(const char *name, const char *family, uint32_t vcpus, uint64_t vm_memory_bytes,
                const struct shape_options *options, struct shape *ret_shape);

/* The 20 default shapes: families c1/t1/s1/m1 (2/3/4/8 GiB per vCPU) at 1, 2, 4, 8 and 16 vCPUs. */
int shapes_catalog_default(const struct shape_options *options, struct shape_catalog **ret_catalog);
void shapes_catalog_free(struct shape_catalog *c);
/* Append custom shapes from a JSON list in the seed's instance-type format:
 *   [{"name": "c1.1VCPU-2GB", "family": "c1" (optional; else the part of name before '.'),
 *     "capacity": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "30Gi", "pods": "64",
 *                  "hugepages-2Mi": "0", "hugepages-1Gi": "0"},
 *     "overhead": {"kubeReserved": {...}, "systemReserved": {...}, "evictionThreshold": {...}}}]
 * (the seed's KubeReserved/SystemReserved/EvictionThreshold spellings are accepted too). capacity.memory is
 * the VM memory. On error -EINVAL with "instanceTypes[i].field: reason" in err, and c unchanged. */
int shapes_catalog_add_custom(struct shape_catalog *c, const json_t *list, const struct shape_options *options,
                              char *err, size_t errlen);
void shapes_catalog_sort(struct shape_catalog *c);
const struct shape *shapes_catalog_find(const struct shape_catalog *c, const char *name);
/* Cost order: fewer vCPUs first, then less memory, then name. */
int shapes_cost_compare(const struct shape *a, const struct shape *b);
