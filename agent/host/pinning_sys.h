/* pinning_sys: the system calls of pinning (sched_setaffinity, NUMA nodes, migrate_pages) as a replaceable table. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

#include "cpuset.h"

struct pinning_sys {
        /* sched_setaffinity(2) of one thread (or kernel thread) to exactly `cpus`. 0, -ESRCH when the thread is
         * gone, -EINVAL (no CPU of the set is usable), -EPERM, -ENOMEM. */
        int (*set_affinity)(int tid, const struct cpuset *cpus);
        /* The NUMA nodes the kernel has. 0, -ENOSYS when the kernel has no NUMA support, -ENOMEM. */
        int (*numa_nodes)(struct cpuset **ret_nodes);
        /* migrate_pages(2): move pid's pages on nodes `from` to nodes `to`. 0 with the pages that could not be
         * moved in *ret_not_moved, or a negative errno (-EPERM, -ESRCH, -EINVAL for a node the kernel lacks). */
        int (*migrate_pages)(int pid, const struct cpuset *from, const struct cpuset *to, uint64_t *ret_not_moved);
};

/* The real ones: glibc's sched_setaffinity and libnuma (numa_available, numa_nodes_ptr, numa_migrate_pages). */
extern const struct pinning_sys pinning_sys_linux;
