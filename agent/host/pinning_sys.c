/* pinning_sys: the system calls of pinning (sched_setaffinity, NUMA nodes, migrate_pages) as a replaceable table. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pinning_sys.h"

#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdlib.h>

static int set_affinity(int tid, const struct cpuset *cpus) {
        int last = cpuset_last(cpus);
        if (last < 0)
                return -EINVAL;
        cpu_set_t *set = CPU_ALLOC((size_t)last + 1);
        if (!set)
                return -ENOMEM;
        size_t size = CPU_ALLOC_SIZE((size_t)last + 1);
        CPU_ZERO_S(size, set);
        CPUSET_FOREACH(cpu, cpus)
                CPU_SET_S((size_t)cpu, size, set);
        int r = sched_setaffinity(tid, size, set) < 0 ? -errno : 0;
        CPU_FREE(set);
        return r;
}

static int numa_nodes(struct cpuset **ret_nodes) {
        if (numa_available() < 0)
                return -ENOSYS;
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        for (int node = 0; node <= numa_max_node(); node++) {
                if (numa_bitmask_isbitset(numa_nodes_ptr, (unsigned)node) && cpuset_set(s, (unsigned)node) < 0) {
                        cpuset_free(s);
                        return -ENOMEM;
                }
        }
        *ret_nodes = s;
        return 0;
}

/* A libnuma node mask of our own (libnuma's allocators exit the process on ENOMEM). Free mask->maskp. */
static int to_nodemask(const struct cpuset *nodes, struct bitmask *ret_mask) {
        /* numa_migrate_pages passes numa_num_possible_nodes() + 1 as maxnode. */
        size_t bits = (size_t)numa_num_possible_nodes() + 1, word = 8 * sizeof(unsigned long);
        if (cpuset_last(nodes) >= numa_num_possible_nodes())
                return -EINVAL;
        unsigned long *words = calloc((bits + word - 1) / word, sizeof(*words));
        if (!words)
                return -ENOMEM;
        CPUSET_FOREACH(node, nodes)
                words[(size_t)node / word] |= 1UL << ((size_t)node % word);
        *ret_mask = (struct bitmask){.size = bits, .maskp = words};
        return 0;
}

static int migrate_pages(int pid, const struct cpuset *from, const struct cpuset *to, uint64_t *ret_not_moved) {
        struct bitmask from_mask = {0}, to_mask = {0};
        int r = to_nodemask(from, &from_mask);
        if (r == 0)
                r = to_nodemask(to, &to_mask);
        if (r == 0) {
                int not_moved = numa_migrate_pages(pid, &from_mask, &to_mask);
                r = not_moved < 0 ? -errno : 0;
                *ret_not_moved = not_moved > 0 ? (uint64_t)not_moved : 0;
        }
        free(from_mask.maskp);
        free(to_mask.maskp);
        return r;
}

const struct pinning_sys pinning_sys_linux = {
        .set_affinity = set_affinity,
        .numa_nodes = numa_nodes,
        .migrate_pages = migrate_pages,
};
