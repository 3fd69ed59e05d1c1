/* pinning: pins a running VM's QEMU threads to host CPUs and moves its memory to its NUMA nodes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pinning.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <numa.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "fileio.h"
#include "jsonutil.h"
#include "log.h"

#define PROC_ROOT "/proc"
/* PF_KTHREAD from include/linux/sched.h, field 9 of /proc/<pid>/stat: the task is a kernel thread. */
#define PF_KTHREAD 0x00200000UL
/* A QMP reply larger than this is not a query-cpus-fast answer we can use (1024 vCPUs take ~200 KiB). */
#define QMP_MAX_MESSAGE (4 << 20)
#define QMP_READ_CHUNK 4096
/* numa_maps of a QEMU process is tens of KiB; leave room for many mappings. */
#define NUMA_MAPS_MAX (64 << 20)
/* Threads born while we pin inherit their creator's mask, so the task list is read again until a pass
 * finds no new thread. QEMU's thread pool spawns its workers from the main loop, not from the vCPU
 * thread that asked for one, so that they never inherit a vCPU's single-CPU mask. */
#define PIN_PASSES 3

/* ---- small helpers ---- */

struct int_list {
        int *v;
        size_t n, cap;
};

static int int_list_add(struct int_list *l, int value) {
        if (ARRAY_GROW(&l->v, &l->cap, l->n, 16) < 0)
                return -ENOMEM;
        l->v[l->n++] = value;
        return 0;
}

static bool int_list_has(const int *v, size_t n, int value) {
        for (size_t i = 0; i < n; i++)
                if (v[i] == value)
                        return true;
        return false;
}

/* strerror() is not thread-safe, and the daemon serves requests on several threads. */
static const char *error_text(int r) {
        const char *s = strerrordesc_np(-r);
        return s ? s : "unknown error";
}

static struct cpuset *one_cpu(int cpu) {
        struct cpuset *s = cpuset_new();
        if (s && cpuset_set(s, (unsigned)cpu) < 0) {
                cpuset_free(s);
                return NULL;
        }
        return s;
}

/* Decimal digits only, no sign, no leading zero (except "0"), at most max_digits; -EINVAL otherwise. */
static int parse_id(const char *s, size_t len, size_t max_digits) {
        if (len == 0 || len > max_digits || strspn(s, "0123456789") < len || (s[0] == '0' && len > 1))
                return -EINVAL;
        long v = 0;
        for (size_t i = 0; i < len; i++)
                v = v * 10 + (s[i] - '0');
        return v > INT_MAX ? -EINVAL : (int)v;
}

/* ---- pure parts ---- */

static bool is_vcpu_accel(const char *s) {
        static const char *const names[] = {"/KVM", "/TCG", "/KVM\n", "/TCG\n"};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcmp(s, names[i]) == 0)
                        return true;
        return false;
}

int pinning_vcpu_index(const char *comm) {
        assert(comm);
        if (strncmp(comm, "CPU ", 4) != 0)
                return -EINVAL;
        const char *digits = comm + 4;
        size_t len = strspn(digits, "0123456789");
        if (!is_vcpu_accel(digits + len))
                return -EINVAL;
        int n = parse_id(digits, len, 4);
        return n > PINNING_MAX_VCPU ? -EINVAL : n;
}

struct vcpu_pair {
        int index;
        int tid;
};

/* tids[index] = tid for every pair; -EBADMSG when two pairs name one index. */
static int vcpu_table(const struct vcpu_pair *pairs, size_t n_pairs, int **ret_tids, unsigned *ret_n) {
        unsigned n = 0;
        for (size_t i = 0; i < n_pairs; i++)
                if ((unsigned)pairs[i].index + 1 > n)
                        n = (unsigned)pairs[i].index + 1;
        if (n == 0)
                return -ENOENT;
        int *tids = calloc(n, sizeof(*tids));
        if (!tids)
                return -ENOMEM;
        for (size_t i = 0; i < n_pairs; i++) {
                if (tids[pairs[i].index] != 0) {
                        free(tids);
                        return -EBADMSG;
                }
                tids[pairs[i].index] = pairs[i].tid;
        }
        *ret_tids = tids;
        *ret_n = n;
        return 0;
}

static int cpus_fast_entry(const json_t *e, struct vcpu_pair *ret_pair) {
        const json_t *index = json_object_get(e, "cpu-index"), *tid = json_object_get(e, "thread-id");
        if (!json_is_integer(index) || !json_is_integer(tid))
                return -EBADMSG;
        json_int_t i = json_integer_value(index), t = json_integer_value(tid);
        if (i < 0 || i > PINNING_MAX_VCPU || t <= 0 || t > INT_MAX)
                return -EBADMSG;
        *ret_pair = (struct vcpu_pair){.index = (int)i, .tid = (int)t};
        return 0;
}

/* Single-threaded TCG runs every vCPU on one thread: such a thread cannot be pinned per vCPU. */
static bool tid_repeated(const struct vcpu_pair *pairs, size_t n) {
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        if (pairs[i].tid == pairs[j].tid)
                                return true;
        return false;
}

int pinning_parse_cpus_fast(const json_t *reply, int **ret_tids, unsigned *ret_n) {
        const json_t *list = json_object_get(reply, "return");
        size_t n = json_array_size(list);
        if (!json_is_array(list) || n == 0)
                return -EBADMSG;
        struct vcpu_pair *pairs = calloc(n, sizeof(*pairs));
        if (!pairs)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < n && r == 0; i++)
                r = cpus_fast_entry(json_array_get(list, i), &pairs[i]);
        if (r == 0)
                r = tid_repeated(pairs, n) ? -EBADMSG : vcpu_table(pairs, n, ret_tids, ret_n);
        free(pairs);
        return r;
}

/* A token "N<node>=<pages>": 1 with its values, 0 for any other token, -EBADMSG for a count that overflows. */
static int numa_maps_token(const char *tok, size_t len, int *ret_node, uint64_t *ret_pages) {
        const char *eq = memchr(tok, '=', len);
        if (len < 4 || tok[0] != 'N' || !eq)
                return 0;
        int node = parse_id(tok + 1, (size_t)(eq - tok - 1), 4);
        size_t count_len = len - (size_t)(eq + 1 - tok);
        if (node < 0 || count_len == 0 || strspn(eq + 1, "0123456789") < count_len)
                return 0;
        char digits[24];
        if (count_len >= sizeof(digits))
                return -EBADMSG;
        memcpy(digits, eq + 1, count_len);
        digits[count_len] = '\0';
        errno = 0;
        unsigned long long pages = strtoull(digits, NULL, 10);
        if (errno == ERANGE)
                return -EBADMSG;
        *ret_node = node;
        *ret_pages = pages;
        return 1;
}

int pinning_numa_maps_pages(const char *numa_maps, const struct cpuset *nodes, uint64_t *ret_pages) {
        uint64_t sum = 0;
        for (const char *p = numa_maps; *p;) {
                p += strspn(p, " \t\n");
                size_t len = strcspn(p, " \t\n");
                int node = 0;
                uint64_t pages = 0;
                int r = numa_maps_token(p, len, &node, &pages);
                if (r < 0)
                        return r;
                if (r > 0 && cpuset_test(nodes, (unsigned)node))
                        sum += pages;
                p += len;
        }
        *ret_pages = sum;
        return 0;
}

int pinning_plan_check(const struct pin_plan *plan) {
        if (!plan || plan->pid <= 0 || plan->n_vcpus == 0 || plan->n_vcpus > PINNING_MAX_VCPU + 1)
                return -EINVAL;
        if (!plan->vcpu_map || !plan->vm_cpus)
                return -EINVAL;
        for (unsigned i = 0; i < plan->n_vcpus; i++)
                if (plan->vcpu_map[i] < 0 || !cpuset_test(plan->vm_cpus, (unsigned)plan->vcpu_map[i]))
                        return -EINVAL;
        return 0;
}

/* The planned vCPU a thread name stands for, or -1 (not a vCPU, or one beyond the plan). */
static int planned_vcpu(const struct pin_plan *plan, const char *name) {
        int v = pinning_vcpu_index(name);
        return v >= 0 && (unsigned)v < plan->n_vcpus ? v : -1;
}

/* Called for each thread of `real` with the set it should have; may annotate the entry. */
typedef int (*drift_fn)(json_t *entry, const struct cpuset *wanted);

static int check_entry(const struct pin_plan *plan, json_t *entry, bool *seen, drift_fn fn, bool *ret_ok) {
        const char *name = json_string_value(json_object_get(entry, "name"));
        const char *cpus = json_string_value(json_object_get(entry, "cpus"));
        if (!name || !cpus)
                return -EINVAL;
        struct cpuset *real = NULL;
        int r = cpuset_parse(cpus, &real);
        if (r < 0)
                return r == -ENOMEM ? r : -EINVAL;
        int v = planned_vcpu(plan, name);
        struct cpuset *wanted = v >= 0 ? one_cpu(plan->vcpu_map[v]) : cpuset_dup(plan->vm_cpus);
        r = wanted ? 0 : -ENOMEM;
        if (r == 0 && fn)
                r = fn(entry, wanted);
        if (r == 0 && v >= 0)
                seen[v] = true;
        if (r == 0)
                *ret_ok = cpuset_equal(wanted, real);
        cpuset_free(wanted);
        cpuset_free(real);
        return r;
}

static int walk_real(const struct pin_plan *plan, json_t *real, drift_fn fn, unsigned *ret_drift) {
        if (!json_is_array(real) || pinning_plan_check(plan) < 0)
                return -EINVAL;
        bool *seen = calloc(plan->n_vcpus, sizeof(*seen));
        if (!seen)
                return -ENOMEM;
        unsigned drift = 0;
        int r = 0;
        for (size_t i = 0; i < json_array_size(real) && r == 0; i++) {
                bool ok = false;
                r = check_entry(plan, json_array_get(real, i), seen, fn, &ok);
                drift += !ok;
        }
        for (unsigned i = 0; i < plan->n_vcpus; i++)
                drift += !seen[i];
        free(seen);
        if (r == 0)
                *ret_drift = drift;
        return r;
}

int pinning_drift(const struct pin_plan *plan, const json_t *real, unsigned *ret_drift) {
        /* walk_real only annotates when given a callback, so real is not modified here. */
        return walk_real(plan, (json_t *)real, NULL, ret_drift);
}

static int annotate_wanted(json_t *entry, const struct cpuset *wanted) {
        return json_object_set_new(entry, "wanted", jsonutil_cpuset(wanted)) < 0 ? -ENOMEM : 0;
}

static json_t *vcpu_map_json(const struct pin_plan *plan) {
        json_t *map = json_array();
        for (unsigned i = 0; map && i < plan->n_vcpus; i++) {
                if (json_array_append_new(map, json_integer(plan->vcpu_map[i])) < 0) {
                        json_decref(map);
                        return NULL;
                }
        }
        return map;
}

/* json_pack steals each "o" value, also when it fails (a NULL value makes it fail). */
static json_t *wanted_json(const struct pin_plan *plan) {
        json_t *nodes = plan->mem_nodes ? jsonutil_cpuset(plan->mem_nodes) : json_null();
        return json_pack("{s:o, s:o, s:o}", "cpus", jsonutil_cpuset(plan->vm_cpus), "vcpu_map",
                         vcpu_map_json(plan), "mem_nodes", nodes);
}

int pinning_status(const struct pin_plan *plan, const json_t *real, json_t **ret_status) {
        json_t *copy = json_deep_copy(real);
        if (!copy)
                return json_is_array(real) ? -ENOMEM : -EINVAL;
        unsigned drift = 0;
        int r = walk_real(plan, copy, annotate_wanted, &drift);
        if (r < 0) {
                json_decref(copy);
                return r;
        }
        json_t *status = json_pack("{s:o, s:o, s:I}", "wanted", wanted_json(plan), "real", copy, "drift",
                                   (json_int_t)drift);
        if (!status)
                return -ENOMEM;
        *ret_status = status;
        return 0;
}

const char *pinning_memory_result_to_string(enum pin_memory_result result) {
        switch (result) {
        case PIN_MEMORY_NOT_ASKED:
                return "not-asked";
        case PIN_MEMORY_NO_NUMA:
                return "no-numa";
        case PIN_MEMORY_SINGLE_NODE:
                return "single-node";
        case PIN_MEMORY_MIGRATED:
                return "migrated";
        case PIN_MEMORY_FAILED:
                return "failed";
        }
        return "unknown";
}

static json_t *failures_json(const struct pin_report *report) {
        json_t *list = json_array();
        unsigned n = report->n_failures < PINNING_MAX_FAILURES ? report->n_failures : PINNING_MAX_FAILURES;
        for (unsigned i = 0; list && i < n; i++) {
                const struct pin_failure *f = &report->failures[i];
                json_t *e = json_pack("{s:i, s:s}", "tid", f->tid, "error", error_text(f->error));
                if (json_array_append_new(list, e) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

static json_t *memory_json(const struct pin_report *report) {
        return json_pack("{s:s, s:s?, s:I, s:I}", "result", pinning_memory_result_to_string(report->memory),
                         "error", report->memory_error ? error_text(report->memory_error) : NULL,
                         "pages_elsewhere", (json_int_t)report->pages_elsewhere,
                         "pages_not_moved", (json_int_t)report->pages_not_moved);
}

json_t *pinning_report_to_json(const struct pin_report *report) {
        return json_pack("{s:s, s:s?, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}",
                         "vcpus_from", report->vcpus_from_qmp ? "qmp" : "proc",
                         "qmp_error", report->qmp_error ? error_text(report->qmp_error) : NULL,
                         "vcpus_pinned", (json_int_t)report->vcpus_pinned,
                         "vcpus_missing", (json_int_t)report->vcpus_missing,
                         "others_pinned", (json_int_t)report->others_pinned,
                         "vhost_kthreads_pinned", (json_int_t)report->vhost_kthreads_pinned,
                         "threads_gone", (json_int_t)report->threads_gone,
                         "failures_total", (json_int_t)report->n_failures,
                         "failures", failures_json(report), "memory", memory_json(report));
}

/* ---- /proc ---- */

static int proc_read(char **ret_text, const char *proc_root, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int proc_read(char **ret_text, const char *proc_root, const char *fmt, ...) {
        char path[PATH_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(path, sizeof(path), fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof(path))
                return -ENAMETOOLONG;
        return fileio_read_under(proc_root, path, ret_text);
}

/* The numeric entries of a directory (pids in /proc, tids in /proc/<pid>/task). */
static int list_ids(const char *dir_path, int **ret_ids, size_t *ret_n) {
        DIR *dir = opendir(dir_path);
        if (!dir)
                return -errno;
        struct int_list ids = {0};
        struct dirent *de;
        int r = 0;
        while (r == 0 && (de = readdir(dir))) {
                int id = parse_id(de->d_name, strlen(de->d_name), 10);
                if (id > 0)
                        r = int_list_add(&ids, id);
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

static int list_tasks(const char *proc_root, int pid, int **ret_tids, size_t *ret_n) {
        char path[PATH_MAX];
        int n = snprintf(path, sizeof(path), "%s/%d/task", proc_root, pid);
        if (n < 0 || (size_t)n >= sizeof(path))
                return -ENAMETOOLONG;
        int r = list_ids(path, ret_tids, ret_n);
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
                                struct vcpu_pair *pairs, size_t *ret_n) {
        size_t n = 0;
        for (size_t i = 0; i < n_tasks; i++) {
                int index = task_vcpu_index(proc_root, pid, tasks[i]);
                if (index == -ENOMEM)
                        return index;
                if (index >= 0)
                        pairs[n++] = (struct vcpu_pair){.index = index, .tid = tasks[i]};
        }
        *ret_n = n;
        return 0;
}

int pinning_proc_vcpu_threads(const char *proc_root, int pid, int **ret_tids, unsigned *ret_n) {
        int *tasks = NULL;
        size_t n_tasks = 0, n_pairs = 0;
        int r = list_tasks(proc_root, pid, &tasks, &n_tasks);
        if (r < 0)
                return r;
        struct vcpu_pair *pairs = calloc(n_tasks + 1, sizeof(*pairs));
        r = pairs ? vcpu_pairs_from_comm(proc_root, pid, tasks, n_tasks, pairs, &n_pairs) : -ENOMEM;
        if (r == 0)
                r = vcpu_table(pairs, n_pairs, ret_tids, ret_n);
        free(pairs);
        free(tasks);
        return r;
}

static bool is_kthread(const char *proc_root, int pid) {
        char *stat = NULL;
        if (proc_read(&stat, proc_root, "/%d/stat", pid) < 0)
                return false;
        /* comm (field 2) may hold spaces and parentheses, so the fields start after the last ')'. */
        const char *p = strrchr(stat, ')');
        unsigned long flags = 0;
        bool kthread = p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & PF_KTHREAD);
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
        int owner = strncmp(comm, "vhost-", 6) == 0 ? parse_id(comm + 6, strlen(comm + 6), 10) : -EINVAL;
        free(comm);
        return owner > 0 && int_list_has(tids, n_tids, owner) && is_kthread(proc_root, pid);
}

static int find_vhost_kthreads(const char *proc_root, const int *tids, size_t n_tids, int **ret_ids,
                               size_t *ret_n) {
        int *pids = NULL;
        size_t n_pids = 0;
        int r = list_ids(proc_root, &pids, &n_pids);
        if (r < 0)
                return r;
        size_t n = 0;
        for (size_t i = 0; i < n_pids; i++)
                if (!int_list_has(tids, n_tids, pids[i]) && is_vhost_kthread_of(proc_root, pids[i], tids, n_tids))
                        pids[n++] = pids[i];
        *ret_ids = pids;
        *ret_n = n;
        return 0;
}

/* The Cpus_allowed_list line of a /proc status file. */
static int status_cpus(const char *status, struct cpuset **ret_cpus) {
        static const char key[] = "\nCpus_allowed_list:";
        const char *p = strstr(status, key);
        if (!p)
                return -EBADMSG;
        p += strlen(key);
        char *value = strndup(p, strcspn(p, "\n"));
        if (!value)
                return -ENOMEM;
        int r = cpuset_parse(value, ret_cpus);
        free(value);
        return r == -ENOMEM ? r : r < 0 ? -EBADMSG : 0;
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
                r = status_cpus(status, &cpus);
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

int pinning_read_at(const char *proc_root, int pid, json_t **ret_threads) {
        int *tids = NULL, *kthreads = NULL;
        size_t n_tids = 0, n_kthreads = 0;
        int r = list_tasks(proc_root, pid, &tids, &n_tids);
        if (r < 0)
                return r;
        json_t *list = json_array();
        r = list ? append_threads(list, proc_root, pid, tids, n_tids, false) : -ENOMEM;
        if (r == 0)
                r = find_vhost_kthreads(proc_root, tids, n_tids, &kthreads, &n_kthreads);
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

int pinning_read(int pid, json_t **ret_threads) {
        return pinning_read_at(PROC_ROOT, pid, ret_threads);
}

/* ---- QMP: one short conversation over the VM's control socket ---- */

struct qmp {
        int fd;
        struct timespec deadline;
        char *buf;
        size_t len, cap;
};

static int qmp_wait(const struct qmp *q, short events) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms = (long long)(q->deadline.tv_sec - now.tv_sec) * 1000 +
                       (q->deadline.tv_nsec - now.tv_nsec) / 1000000;
        if (ms <= 0)
                return -ETIMEDOUT;
        struct pollfd p = {.fd = q->fd, .events = events};
        int n = poll(&p, 1, (int)ms);
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        return n == 0 ? -ETIMEDOUT : 0;
}

static int qmp_open(struct qmp *q, const char *path, int timeout_ms) {
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(addr.sun_path))
                return -ENAMETOOLONG;
        strcpy(addr.sun_path, path);
        clock_gettime(CLOCK_MONOTONIC, &q->deadline);
        q->deadline.tv_sec += timeout_ms / 1000;
        q->deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (q->deadline.tv_nsec >= 1000000000L) {
                q->deadline.tv_sec++;
                q->deadline.tv_nsec -= 1000000000L;
        }
        q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (q->fd < 0)
                return -errno;
        /* A unix socket connects at once (or fails with EAGAIN when the backlog is full). When another client
         * holds QEMU's monitor, we connect into the backlog and the greeting never comes: that is the timeout. */
        return connect(q->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ? -errno : 0;
}

static void qmp_close(struct qmp *q) {
        if (q->fd >= 0)
                close(q->fd);
        free(q->buf);
}

static int qmp_fill(struct qmp *q) {
        if (q->cap - q->len < QMP_READ_CHUNK) {
                if (q->cap >= QMP_MAX_MESSAGE)
                        return -EBADMSG;
                size_t cap = q->cap ? q->cap * 2 : 2 * QMP_READ_CHUNK;
                char *buf = realloc(q->buf, cap);
                if (!buf)
                        return -ENOMEM;
                q->buf = buf;
                q->cap = cap;
        }
        int r = qmp_wait(q, POLLIN);
        if (r < 0)
                return r;
        ssize_t n = read(q->fd, q->buf + q->len, q->cap - q->len);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
                return -ECONNRESET;
        q->len += (size_t)n;
        return 0;
}

/* The next JSON line QEMU sent (it ends each message with "\r\n"). */
static int qmp_read(struct qmp *q, json_t **ret_msg) {
        char *nl;
        while (!(nl = q->len ? memchr(q->buf, '\n', q->len) : NULL)) {
                int r = qmp_fill(q);
                if (r < 0)
                        return r;
        }
        size_t line = (size_t)(nl - q->buf) + 1;
        json_t *msg = json_loadb(q->buf, line, 0, NULL);
        memmove(q->buf, q->buf + line, q->len - line);
        q->len -= line;
        if (!json_is_object(msg)) {
                json_decref(msg);
                return -EBADMSG;
        }
        *ret_msg = msg;
        return 0;
}

static int qmp_send_all(struct qmp *q, const char *data, size_t len) {
        while (len > 0) {
                int r = qmp_wait(q, POLLOUT);
                if (r < 0)
                        return r;
                ssize_t n = send(q->fd, data, len, MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return -errno;
                if (n > 0) {
                        data += n;
                        len -= (size_t)n;
                }
        }
        return 0;
}

static int qmp_send(struct qmp *q, const char *command) {
        json_t *request = json_pack("{s:s}", "execute", command);
        char *text = request ? json_dumps(request, JSON_COMPACT) : NULL;
        json_decref(request);
        if (!text)
                return -ENOMEM;
        int r = qmp_send_all(q, text, strlen(text));
        if (r == 0)
                r = qmp_send_all(q, "\n", 1);
        free(text);
        return r;
}

/* Send a command and wait for its {"return": ...}, skipping asynchronous {"event": ...} messages. */
static int qmp_execute(struct qmp *q, const char *command, json_t **ret_reply) {
        int r = qmp_send(q, command);
        while (r == 0) {
                json_t *msg = NULL;
                r = qmp_read(q, &msg);
                if (r < 0)
                        break;
                if (json_object_get(msg, "return")) {
                        *ret_reply = msg;
                        return 0;
                }
                r = json_object_get(msg, "error") ? -EPROTO : 0;
                json_decref(msg);
        }
        return r;
}

static int qmp_query_cpus(struct qmp *q, json_t **ret_reply) {
        json_t *msg = NULL;
        int r = qmp_read(q, &msg);
        if (r < 0)
                return r;
        bool greeting = json_object_get(msg, "QMP") != NULL;
        json_decref(msg);
        if (!greeting)
                return -EBADMSG;
        r = qmp_execute(q, "qmp_capabilities", &msg);
        if (r < 0)
                return r;
        json_decref(msg);
        return qmp_execute(q, "query-cpus-fast", ret_reply);
}

int pinning_qmp_vcpu_threads(const char *socket_path, int timeout_ms, int **ret_tids, unsigned *ret_n) {
        struct qmp q = {.fd = -1};
        json_t *reply = NULL;
        int r = qmp_open(&q, socket_path, timeout_ms);
        if (r == 0)
                r = qmp_query_cpus(&q, &reply);
        qmp_close(&q);
        if (r == 0)
                r = pinning_parse_cpus_fast(reply, ret_tids, ret_n);
        json_decref(reply);
        return r;
}

/* ---- finding the vCPU threads ---- */

static bool tids_belong(const char *proc_root, int pid, const int *tids, unsigned n) {
        for (unsigned i = 0; i < n; i++) {
                char path[PATH_MAX];
                snprintf(path, sizeof(path), "%s/%d/task/%d", proc_root, pid, tids[i]);
                if (tids[i] != 0 && access(path, F_OK) < 0)
                        return false;
        }
        return true;
}

static int qmp_vcpus(const char *run_dir, int vmid, int pid, int **ret_tids, unsigned *ret_n) {
        char *path = NULL;
        if (!run_dir)
                return -ENOENT;
        if (asprintf(&path, "%s/%d.qmp", run_dir, vmid) < 0)
                return -ENOMEM;
        int *tids = NULL;
        unsigned n = 0;
        int r = pinning_qmp_vcpu_threads(path, PINNING_QMP_TIMEOUT_MS, &tids, &n);
        free(path);
        /* Thread ids from another QEMU (a restart between reading the pid file and asking QMP) must never
         * be pinned: after a restart they may name unrelated threads. */
        if (r == 0 && !tids_belong(PROC_ROOT, pid, tids, n)) {
                free(tids);
                r = -ESTALE;
        }
        if (r == 0) {
                *ret_tids = tids;
                *ret_n = n;
        }
        return r;
}

static int find_vcpus(const char *run_dir, int vmid, int pid, int **ret_tids, unsigned *ret_n, int *ret_qmp_error) {
        int qmp_error = qmp_vcpus(run_dir, vmid, pid, ret_tids, ret_n);
        if (qmp_error == 0) {
                *ret_qmp_error = 0;
                return 1;
        }
        if (qmp_error == -ENOMEM)
                return qmp_error;
        log_debug("vm %d: QMP gave no vCPU threads (%s), reading /proc", vmid, error_text(qmp_error));
        int r = pinning_proc_vcpu_threads(PROC_ROOT, pid, ret_tids, ret_n);
        if (r < 0)
                return r;
        *ret_qmp_error = qmp_error;
        return 0;
}

int pinning_vcpu_threads(const char *run_dir, int vmid, int pid, int **ret_tids, unsigned *ret_n) {
        int qmp_error = 0;
        return find_vcpus(run_dir, vmid, pid, ret_tids, ret_n, &qmp_error);
}

/* ---- applying ---- */

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

static void note_result(struct pin_report *rep, int tid, int r, unsigned *counter) {
        if (r == 0) {
                (*counter)++;
                return;
        }
        if (r == -ESRCH) {
                rep->threads_gone++;
                return;
        }
        if (rep->n_failures < PINNING_MAX_FAILURES)
                rep->failures[rep->n_failures] = (struct pin_failure){.tid = tid, .error = r};
        rep->n_failures++;
}

static void pin_vcpus(const struct pin_plan *plan, const int *tids, unsigned n, struct pin_report *rep) {
        for (unsigned i = 0; i < plan->n_vcpus; i++) {
                if (i >= n || tids[i] == 0) {
                        rep->vcpus_missing++;
                        continue;
                }
                struct cpuset *cpu = one_cpu(plan->vcpu_map[i]);
                note_result(rep, tids[i], cpu ? set_affinity(tids[i], cpu) : -ENOMEM, &rep->vcpus_pinned);
                cpuset_free(cpu);
        }
}

static bool is_planned_tid(const struct pin_plan *plan, const int *tids, unsigned n, int tid) {
        return int_list_has(tids, n < plan->n_vcpus ? n : plan->n_vcpus, tid);
}

/* One pass over the task list: pin the threads not pinned yet onto vm_cpus. Returns how many were new. */
static int pin_others_pass(const struct pin_plan *plan, const int *vcpu_tids, unsigned n_vcpu_tids,
                           struct int_list *done, struct pin_report *rep) {
        int *tasks = NULL;
        size_t n_tasks = 0;
        int r = list_tasks(PROC_ROOT, plan->pid, &tasks, &n_tasks);
        int fresh = 0;
        for (size_t i = 0; r == 0 && i < n_tasks; i++) {
                int tid = tasks[i];
                if (is_planned_tid(plan, vcpu_tids, n_vcpu_tids, tid) || int_list_has(done->v, done->n, tid))
                        continue;
                r = int_list_add(done, tid);
                if (r == 0)
                        note_result(rep, tid, set_affinity(tid, plan->vm_cpus), &rep->others_pinned);
                fresh++;
        }
        free(tasks);
        return r < 0 ? r : fresh;
}

static int pin_others(const struct pin_plan *plan, const int *vcpu_tids, unsigned n, struct pin_report *rep) {
        struct int_list done = {0};
        int r = 0, pass;
        for (pass = 0; pass < PIN_PASSES; pass++) {
                r = pin_others_pass(plan, vcpu_tids, n, &done, rep);
                if (r <= 0)
                        break;
        }
        free(done.v);
        /* The process may exit between passes: what was pinned stays pinned, the caller reports it. */
        if (r == -ESRCH && pass > 0)
                return 0;
        return r < 0 ? r : 0;
}

static void pin_vhost_kthreads(const struct pin_plan *plan, struct pin_report *rep) {
        int *tids = NULL, *kthreads = NULL;
        size_t n_tids = 0, n_kthreads = 0;
        int r = list_tasks(PROC_ROOT, plan->pid, &tids, &n_tids);
        if (r == 0)
                r = find_vhost_kthreads(PROC_ROOT, tids, n_tids, &kthreads, &n_kthreads);
        if (r < 0 && r != -ESRCH)
                note_result(rep, 0, r, &rep->vhost_kthreads_pinned); /* tid 0: the scan itself failed */
        for (size_t i = 0; i < n_kthreads; i++)
                note_result(rep, kthreads[i], set_affinity(kthreads[i], plan->vm_cpus), &rep->vhost_kthreads_pinned);
        free(tids);
        free(kthreads);
}

/* ---- memory ---- */

/* Every node the kernel exposes that is not in mem_nodes: where a page is on the wrong node. */
static int other_nodes(const struct cpuset *mem_nodes, struct cpuset **ret_nodes) {
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        for (int node = 0; node <= numa_max_node(); node++) {
                if (!numa_bitmask_isbitset(numa_nodes_ptr, (unsigned)node) || cpuset_test(mem_nodes, (unsigned)node))
                        continue;
                if (cpuset_set(s, (unsigned)node) < 0) {
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

/* Pages the process has on `nodes` now; 0 when numa_maps cannot be read (the count is informative). */
static uint64_t pages_on(int pid, const struct cpuset *nodes) {
        char path[64], *text = NULL;
        uint64_t pages = 0;
        snprintf(path, sizeof(path), PROC_ROOT "/%d/numa_maps", pid);
        if (fileio_read(path, NUMA_MAPS_MAX, &text, NULL) == 0 && pinning_numa_maps_pages(text, nodes, &pages) < 0)
                pages = 0;
        free(text);
        return pages;
}

static int migrate(int pid, const struct cpuset *from, const struct cpuset *to, struct pin_report *rep) {
        struct bitmask from_mask = {0}, to_mask = {0};
        int r = to_nodemask(from, &from_mask);
        if (r == 0)
                r = to_nodemask(to, &to_mask);
        if (r == 0) {
                rep->pages_elsewhere = pages_on(pid, from);
                int not_moved = numa_migrate_pages(pid, &from_mask, &to_mask);
                r = not_moved < 0 ? -errno : 0;
                rep->pages_not_moved = not_moved > 0 ? (uint64_t)not_moved : 0;
        }
        free(from_mask.maskp);
        free(to_mask.maskp);
        return r;
}

/* migrate_pages(2) moves the pages that exist now; the guest's later allocations follow QEMU's memory
 * policy (numaN hostnodes/policy in the VM config), which another process cannot change. */
static void migrate_memory(const struct pin_plan *plan, struct pin_report *rep) {
        if (!plan->mem_nodes || cpuset_is_empty(plan->mem_nodes)) {
                rep->memory = PIN_MEMORY_NOT_ASKED;
                return;
        }
        if (numa_available() < 0) {
                rep->memory = PIN_MEMORY_NO_NUMA;
                return;
        }
        struct cpuset *from = NULL;
        int r = other_nodes(plan->mem_nodes, &from);
        if (r == 0 && cpuset_is_empty(from)) {
                rep->memory = PIN_MEMORY_SINGLE_NODE;
        } else {
                if (r == 0)
                        r = migrate(plan->pid, from, plan->mem_nodes, rep);
                rep->memory = r < 0 ? PIN_MEMORY_FAILED : PIN_MEMORY_MIGRATED;
                rep->memory_error = r < 0 ? r : 0;
        }
        cpuset_free(from);
}

int pinning_apply(const struct pin_plan *plan, const char *run_dir, struct pin_report *ret_report) {
        int r = pinning_plan_check(plan);
        if (r < 0)
                return r;
        struct pin_report rep = {0};
        int *tids = NULL;
        unsigned n = 0;
        r = find_vcpus(run_dir, plan->vmid, plan->pid, &tids, &n, &rep.qmp_error);
        if (r < 0)
                return r;
        rep.vcpus_from_qmp = r == 1;
        /* The other threads first: whatever they spawn from now on inherits the whole set. */
        r = pin_others(plan, tids, n, &rep);
        if (r == 0) {
                pin_vcpus(plan, tids, n, &rep);
                pin_vhost_kthreads(plan, &rep);
                migrate_memory(plan, &rep);
        }
        free(tids);
        if (r < 0)
                return r;
        log_debug("vm %d: %u vCPU threads pinned, %u other threads, %u failures", plan->vmid, rep.vcpus_pinned,
                  rep.others_pinned, rep.n_failures);
        *ret_report = rep;
        return rep.n_failures > 0 ? 1 : 0;
}
