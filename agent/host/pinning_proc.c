/* pinning_proc: reads a QEMU process's threads, affinities, vhost kernel threads and numa_maps under a /proc root. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pinning_proc.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "jsonutil.h"
#include "pinning_internal.h"

/* numa_maps of a QEMU process is tens of KiB; leave room for many mappings. */
#define NUMA_MAPS_MAX (64 << 20)

/* "<proc_root>/<the rest fmt says>" into path (PATH_MAX bytes). 0 or -ENAMETOOLONG. */
static int vproc_path(char *path, const char *proc_root, const char *fmt, va_list ap) {
        char rel[PATH_MAX];
        int n = vsnprintf(rel, sizeof(rel), fmt, ap);
        if (n < 0 || (size_t)n >= sizeof(rel))
                return -ENAMETOOLONG;
        return fileio_path_under(path, PATH_MAX, proc_root, rel);
}

static int proc_path(char *path, const char *proc_root, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int proc_path(char *path, const char *proc_root, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = vproc_path(path, proc_root, fmt, ap);
        va_end(ap);
        return r;
}

/* A whole file below proc_root, without its trailing newline. */
static int proc_read(char **ret_text, const char *proc_root, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int proc_read(char **ret_text, const char *proc_root, const char *fmt, ...) {
        char path[PATH_MAX];
        va_list ap;
        va_start(ap, fmt);
        int r = vproc_path(path, proc_root, fmt, ap);
        va_end(ap);
        return r < 0 ? r : fileio_read_under(NULL, path, ret_text);
}

/* The numeric entries of a directory (pids in /proc, tids in /proc/<pid>/task). */
static int list_ids(const char *dir_path, int **ret_ids, size_t *ret_n) {
        DIR *dir = opendir(dir_path);
        if (!dir)
                return -errno;
        struct pinning__ids ids = {0};
        struct dirent *de;
        int r = 0;
        while (r == 0 && (de = readdir(dir))) {
                int id = pinning__parse_id(de->d_name, strlen(de->d_name), 10);
                if (id > 0)
                        r = pinning__ids_add(&ids, id);
        }
        closedir(dir);
        if (r < 0) {
                free(ids.v);
                return r;
        }
        *ret_ids = ids.v;
        *ret_n = ids.n;
        return 0;
}

int pinning_proc_tasks(const char *proc_root, int pid, int **ret_tids, size_t *ret_n) {
        char path[PATH_MAX];
        int r = proc_path(path, proc_root, "/%d/task", pid);
        if (r == 0)
                r = list_ids(path, ret_tids, ret_n);
        return r == -ENOENT ? -ESRCH : r;
}

static int task_vcpu_index(const char *proc_root, int pid, int tid) {
        char *comm = NULL;
        int r = proc_read(&comm, proc_root, "/%d/task/%d/comm", pid, tid);
        if (r < 0)
                return r == -ENOMEM ? r : -ESRCH;
        r = pinning_vcpu_index(comm);
        free(comm);
        return r;
}

static int vcpu_pairs_from_comm(const char *proc_root, int pid, const int *tasks, size_t n_tasks,
                                struct pinning__vcpu_pair *pairs, size_t *ret_n) {
        size_t n = 0;
        for (size_t i = 0; i < n_tasks; i++) {
                int index = task_vcpu_index(proc_root, pid, tasks[i]);
                if (index == -ENOMEM)
                        return index;
                if (index >= 0)
                        pairs[n++] = (struct pinning__vcpu_pair){.index = index, .tid = tasks[i]};
        }
        *ret_n = n;
        return 0;
}

int pinning_proc_vcpu_threads(const char *proc_root, int pid, int **ret_tids, unsigned *ret_n) {
        int *tasks = NULL;
        size_t n_tasks = 0, n_pairs = 0;
        int r = pinning_proc_tasks(proc_root, pid, &tasks, &n_tasks);
        if (r < 0)
                return r;
        struct pinning__vcpu_pair *pairs = calloc(n_tasks + 1, sizeof(*pairs));
        r = pairs ? vcpu_pairs_from_comm(proc_root, pid, tasks, n_tasks, pairs, &n_pairs) : -ENOMEM;
        if (r == 0)
                r = pinning__vcpu_table(pairs, n_pairs, ret_tids, ret_n);
        free(pairs);
        free(tasks);
        return r;
}

static bool is_kthread(const char *proc_root, int pid) {
        char *stat = NULL;
        if (proc_read(&stat, proc_root, "/%d/stat", pid) < 0)
                return false;
        bool kthread = pinning_stat_kthread(stat);
        free(stat);
        return kthread;
}

/* Before Linux 6.4 a vhost worker is a kernel thread named "vhost-<tid>" after the QEMU thread that set up
 * the device (VHOST_SET_OWNER, normally the main thread), outside the QEMU process. Since 6.4 it is a task
 * of the QEMU process (and pinned with the other threads), unless vhost's fork_owner mode asks for the old
 * kernel thread again. True when `pid` is such a kernel thread serving one of tids. */
static bool is_vhost_kthread_of(const char *proc_root, int pid, const int *tids, size_t n_tids) {
        char *comm = NULL;
        if (proc_read(&comm, proc_root, "/%d/comm", pid) < 0)
                return false;
        int owner = pinning_vhost_owner(comm);
        free(comm);
        return owner > 0 && pinning__has_id(tids, n_tids, owner) && is_kthread(proc_root, pid);
}

int pinning_proc_vhost_kthreads(const char *proc_root, const int *tids, size_t n_tids, int **ret_ids,
                                size_t *ret_n) {
        int *pids = NULL;
        size_t n_pids = 0;
        int r = list_ids(proc_root, &pids, &n_pids);
        if (r < 0)
                return r;
        size_t n = 0;
        for (size_t i = 0; i < n_pids; i++)
                if (!pinning__has_id(tids, n_tids, pids[i]) && is_vhost_kthread_of(proc_root, pids[i], tids, n_tids))
                        pids[n++] = pids[i];
        *ret_ids = pids;
        *ret_n = n;
        return 0;
}

static json_t *thread_entry(int tid, const char *comm, const struct cpuset *cpus, bool kthread) {
        json_t *e = json_pack("{s:i, s:s, s:o}", "tid", tid, "name", comm, "cpus", jsonutil_cpuset(cpus));
        int vcpu = pinning_vcpu_index(comm);
        if (e && !kthread && vcpu >= 0 && json_object_set_new(e, "vcpu", json_integer(vcpu)) < 0)
                json_decref(e), e = NULL;
        if (e && kthread && json_object_set_new(e, "kthread", json_true()) < 0)
                json_decref(e), e = NULL;
        return e;
}

/* Append the thread whose /proc directory is <proc_root><dir> to list. A thread that is gone is skipped. */
static int append_thread(json_t *list, const char *proc_root, const char *dir, int tid, bool kthread) {
        char *comm = NULL, *status = NULL;
        struct cpuset *cpus = NULL;
        int r = proc_read(&comm, proc_root, "%s/comm", dir);
        if (r == 0)
                r = proc_read(&status, proc_root, "%s/status", dir);
        if (r == 0)
                r = pinning_status_cpus(status, &cpus);
        if (r == 0 && json_array_append_new(list, thread_entry(tid, comm, cpus, kthread)) < 0)
                r = -ENOMEM;
        free(comm);
        free(status);
        cpuset_free(cpus);
        return r == -ENOMEM ? r : 0;
}

static int append_threads(json_t *list, const char *proc_root, int pid, const int *tids, size_t n, bool kthreads) {
        int r = 0;
        for (size_t i = 0; i < n && r == 0; i++) {
                char dir[64];
                if (kthreads)
                        snprintf(dir, sizeof(dir), "/%d", tids[i]);
                else
                        snprintf(dir, sizeof(dir), "/%d/task/%d", pid, tids[i]);
                r = append_thread(list, proc_root, dir, tids[i], kthreads);
        }
        return r;
}

int pinning_proc_read(const char *proc_root, int pid, json_t **ret_threads) {
        int *tids = NULL, *kthreads = NULL;
        size_t n_tids = 0, n_kthreads = 0;
        int r = pinning_proc_tasks(proc_root, pid, &tids, &n_tids);
        if (r < 0)
                return r;
        json_t *list = json_array();
        r = list ? append_threads(list, proc_root, pid, tids, n_tids, false) : -ENOMEM;
        if (r == 0)
                r = pinning_proc_vhost_kthreads(proc_root, tids, n_tids, &kthreads, &n_kthreads);
        if (r == 0)
                r = append_threads(list, proc_root, pid, kthreads, n_kthreads, true);
        free(tids);
        free(kthreads);
        if (r < 0) {
                json_decref(list);
                return r;
        }
        *ret_threads = list;
        return 0;
}

bool pinning_proc_has_threads(const char *proc_root, int pid, const int *tids, unsigned n) {
        for (unsigned i = 0; i < n; i++) {
                char path[PATH_MAX];
                if (tids[i] != 0 && (proc_path(path, proc_root, "/%d/task/%d", pid, tids[i]) < 0 ||
                                     access(path, F_OK) < 0))
                        return false;
        }
        return true;
}

int pinning_proc_numa_pages(const char *proc_root, int pid, const struct cpuset *nodes, uint64_t *ret_pages) {
        char path[PATH_MAX], *text = NULL;
        int r = proc_path(path, proc_root, "/%d/numa_maps", pid);
        if (r == 0)
                r = fileio_read(path, NUMA_MAPS_MAX, &text, NULL);
        if (r == 0)
                r = pinning_numa_maps_pages(text, nodes, ret_pages);
        free(text);
        return r;
}
