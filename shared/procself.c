/* procself: this process's own figures from /proc, and their process_* metrics. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "procself.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "fileio.h"
#include "prom.h"

/* Fields of /proc/<pid>/stat after the comm's closing parenthesis, counted from state (field 3). */
#define STAT_UTIME 14
#define STAT_STIME 15
#define STAT_STARTTIME 22
#define STAT_VSIZE 23
#define STAT_RSS 24

/* The fields after "(comm) ": field n (1-based as proc(5) numbers them) into out[n]. */
static int stat_fields(const char *stat, uint64_t out[STAT_RSS + 1]) {
        const char *p = strrchr(stat, ')');
        if (!p)
                return -EINVAL;
        p++;
        for (int field = 3; field <= STAT_RSS; field++) {
                while (*p == ' ')
                        p++;
                if (!*p)
                        return -EINVAL;
                char *end;
                out[field] = field == 3 ? 0 : strtoull(p, &end, 10);
                p = field == 3 ? p + 1 : end;
        }
        return 0;
}

/* The soft limit of "Max open files" (0 when unlimited). */
static int max_open_files(const char *limits, uint64_t *ret) {
        const char *line = strstr(limits, "Max open files");
        if (!line)
                return -EINVAL;
        line += strlen("Max open files");
        while (*line == ' ')
                line++;
        if (strncmp(line, "unlimited", 9) == 0) {
                *ret = 0;
                return 0;
        }
        char *end;
        *ret = strtoull(line, &end, 10);
        return end == line ? -EINVAL : 0;
}

static int boot_time(const char *proc_stat, uint64_t *ret) {
        const char *line = strstr(proc_stat, "\nbtime ");
        if (!line)
                line = strncmp(proc_stat, "btime ", 6) == 0 ? proc_stat - 1 : NULL;
        if (!line)
                return -EINVAL;
        char *end;
        *ret = strtoull(line + 7, &end, 10);
        return end == line + 7 ? -EINVAL : 0;
}

int procself_parse(const char *stat, const char *limits, const char *proc_stat, long ticks, long page_size,
                   struct procself *ret) {
        uint64_t f[STAT_RSS + 1] = { 0 }, max_fds, btime;
        if (ticks <= 0 || page_size <= 0 || stat_fields(stat, f) < 0 || max_open_files(limits, &max_fds) < 0 ||
            boot_time(proc_stat, &btime) < 0)
                return -EINVAL;
        *ret = (struct procself){ .cpu_seconds = (double)(f[STAT_UTIME] + f[STAT_STIME]) / (double)ticks,
                                  .virtual_bytes = f[STAT_VSIZE],
                                  .resident_bytes = f[STAT_RSS] * (uint64_t)page_size,
                                  .max_fds = max_fds,
                                  .start_time_seconds = (double)btime + (double)f[STAT_STARTTIME] / (double)ticks };
        return 0;
}

static int count_fds(const char *root, uint64_t *ret) {
        char path[4096];
        int r = fileio_path_under(path, sizeof path, root, "/proc/self/fd");
        if (r < 0)
                return r;
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        uint64_t n = 0;
        for (struct dirent *e; (e = readdir(d));)
                n += e->d_name[0] != '.';
        closedir(d);
        *ret = n > 0 && !root ? n - 1 : n; /* the live count includes the descriptor opendir holds */
        return 0;
}

int procself_read(const char *root, struct procself *ret) {
        _cleanup_free_ char *stat = NULL, *limits = NULL, *proc_stat = NULL;
        const char *r0 = root && strcmp(root, "/") != 0 ? root : NULL;
        int r = fileio_read_under(r0, "/proc/self/stat", &stat);
        if (r == 0)
                r = fileio_read_under(r0, "/proc/self/limits", &limits);
        if (r == 0)
                r = fileio_read_under(r0, "/proc/stat", &proc_stat);
        if (r == 0)
                r = procself_parse(stat, limits, proc_stat, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), ret);
        if (r == 0)
                r = count_fds(r0, &ret->open_fds);
        return r;
}

void procself_render(struct prom *p, const char *root) {
        struct procself s;
        if (procself_read(root, &s) < 0)
                return;
        const char *prefix = p->prefix;
        p->prefix = "";
        prom_family(p, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
        prom_sample_f64(p, "process_cpu_seconds_total", NULL, s.cpu_seconds);
        prom_gauge_u64(p, "process_virtual_memory_bytes", "Virtual memory size in bytes.", s.virtual_bytes);
        prom_gauge_u64(p, "process_resident_memory_bytes", "Resident memory size in bytes.", s.resident_bytes);
        prom_gauge_u64(p, "process_open_fds", "Number of open file descriptors.", s.open_fds);
        prom_gauge_u64(p, "process_max_fds", "Maximum number of open file descriptors (0: unlimited).", s.max_fds);
        prom_family(p, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
        prom_sample_f64(p, "process_start_time_seconds", NULL, s.start_time_seconds);
        p->prefix = prefix;
}
