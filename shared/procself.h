/* procself: this process's own figures from /proc (CPU time, memory, file descriptors, start time), as the
 * Prometheus clients' process collector exports them (process_* metrics). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

struct prom;

struct procself {
        double cpu_seconds;        /* user + system time */
        uint64_t virtual_bytes;    /* vsize */
        uint64_t resident_bytes;   /* rss pages × page size */
        uint64_t open_fds;         /* entries of /proc/self/fd */
        uint64_t max_fds;          /* the soft limit of "Max open files" (0 = unlimited) */
        double start_time_seconds; /* since the epoch: boot time + starttime ticks */
};

/* Parse the text of /proc/<pid>/stat (the comm may hold spaces and parentheses), /proc/<pid>/limits and /proc/stat
 * (for btime) with the given clock ticks per second and page size. -EINVAL when a text lacks a field. Pure. */
int procself_parse(const char *stat, const char *limits, const char *proc_stat, long ticks, long page_size,
                   struct procself *ret);

/* Read the figures of this process under root (NULL or "/" for the live system; tests pass a captured tree,
 * where "self" is a directory). open_fds counts <root>/proc/self/fd. 0 or a negative errno. */
int procself_read(const char *root, struct procself *ret);

/* The process_* families (no prefix, whatever the page's): process_cpu_seconds_total, process_virtual_memory_bytes,
 * process_resident_memory_bytes, process_open_fds, process_max_fds, process_start_time_seconds. Nothing when the
 * figures cannot be read. */
void procself_render(struct prom *p, const char *root);
