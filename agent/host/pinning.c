/* pinning: pinning as pure functions: thread names, QMP and numa_maps parsers, plans, drift, reports. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pinning.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "jsonutil.h"
#include "pinning_internal.h"

/* PF_KTHREAD from include/linux/sched.h, field 9 of /proc/<pid>/stat: the task is a kernel thread. */
#define PF_KTHREAD 0x00200000UL

/* ---- helpers the pinning files share (pinning_internal.h) ---- */

int pinning__ids_add(struct pinning__ids *l, int id) {
        if (ARRAY_GROW(&l->v, &l->cap, l->n, 16) < 0)
                return -ENOMEM;
        l->v[l->n++] = id;
        return 0;
}

bool pinning__has_id(const int *v, size_t n, int id) {
        for (size_t i = 0; i < n; i++)
                if (v[i] == id)
                        return true;
        return false;
}

int pinning__parse_id(const char *s, size_t len, size_t max_digits) {
        if (len == 0 || len > max_digits || strspn(s, "0123456789") < len || (s[0] == '0' && len > 1))
                return -EINVAL;
        long v = 0;
        for (size_t i = 0; i < len; i++)
                v = v * 10 + (s[i] - '0');
        return v > INT_MAX ? -EINVAL : (int)v;
}

int pinning__vcpu_table(const struct pinning__vcpu_pair *pairs, size_t n_pairs, int **ret_tids, unsigned *ret_n) {
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

/* strerror() is not thread-safe, and QMP questions are asked on a worker thread. */
static const char *error_text(int r) {
        const char *s = strerrordesc_np(-r);
        return s ? s : "unknown error";
}

/* ---- thread names and QMP answers ---- */

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
        int n = pinning__parse_id(digits, len, 4);
        return n > PINNING_MAX_VCPU ? -EINVAL : n;
}

int pinning_vhost_owner(const char *comm) {
        if (strncmp(comm, "vhost-", 6) != 0)
                return -EINVAL;
        int owner = pinning__parse_id(comm + 6, strlen(comm + 6), 10);
        return owner > 0 ? owner : -EINVAL;
}

static int cpus_fast_entry(const json_t *e, struct pinning__vcpu_pair *ret_pair) {
        const json_t *index = json_object_get(e, "cpu-index"), *tid = json_object_get(e, "thread-id");
        if (!json_is_integer(index) || !json_is_integer(tid))
                return -EBADMSG;
        json_int_t i = json_integer_value(index), t = json_integer_value(tid);
        if (i < 0 || i > PINNING_MAX_VCPU || t <= 0 || t > INT_MAX)
                return -EBADMSG;
        *ret_pair = (struct pinning__vcpu_pair){.index = (int)i, .tid = (int)t};
        return 0;
}

/* Single-threaded TCG runs every vCPU on one thread: such a thread cannot be pinned per vCPU. */
static bool tid_repeated(const struct pinning__vcpu_pair *pairs, size_t n) {
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
        struct pinning__vcpu_pair *pairs = calloc(n, sizeof(*pairs));
        if (!pairs)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < n && r == 0; i++)
                r = cpus_fast_entry(json_array_get(list, i), &pairs[i]);
        if (r == 0)
                r = tid_repeated(pairs, n) ? -EBADMSG : pinning__vcpu_table(pairs, n, ret_tids, ret_n);
        free(pairs);
        return r;
}

/* ---- /proc text ---- */

/* A token "N<node>=<pages>": 1 with its values, 0 for any other token, -EBADMSG for a count that overflows. */
static int numa_maps_token(const char *tok, size_t len, int *ret_node, uint64_t *ret_pages) {
        const char *eq = memchr(tok, '=', len);
        if (len < 4 || tok[0] != 'N' || !eq)
                return 0;
        int node = pinning__parse_id(tok + 1, (size_t)(eq - tok - 1), 4);
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

int pinning_status_cpus(const char *status, struct cpuset **ret_cpus) {
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
        if (r < 0 && r != -ENOMEM)
                return -EBADMSG;
        return r;
}


bool pinning_stat_kthread(const char *stat) {
        /* comm (field 2) may hold spaces and parentheses, so the fields start after the last ')'. */
        const char *p = strrchr(stat, ')');
        unsigned long flags = 0;
        return p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & PF_KTHREAD);
}

/* ---- plans ---- */

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

struct cpuset *pinning_vcpu_cpus(const struct pin_plan *plan, unsigned vcpu) {
        struct cpuset *s = cpuset_new();
        if (s && cpuset_set(s, (unsigned)plan->vcpu_map[vcpu]) < 0) {
                cpuset_free(s);
                return NULL;
        }
        return s;
}

bool pinning_is_vcpu_thread(const struct pin_plan *plan, const struct pin_vcpus *vcpus, int tid) {
        return pinning__has_id(vcpus->tids, vcpus->n < plan->n_vcpus ? vcpus->n : plan->n_vcpus, tid);
}

int pinning_nodes_elsewhere(const struct pin_plan *plan, const struct cpuset *host_nodes, struct cpuset **ret_nodes) {
        struct cpuset *s = cpuset_dup(host_nodes);
        if (!s)
                return -ENOMEM;
        cpuset_andnot(s, plan->mem_nodes);
        *ret_nodes = s;
        return 0;
}

void pinning_vcpus_done(struct pin_vcpus *vcpus) {
        free(vcpus->tids);
        *vcpus = (struct pin_vcpus){0};
}

/* ---- drift and status ---- */

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
        struct cpuset *wanted = v >= 0 ? pinning_vcpu_cpus(plan, (unsigned)v) : cpuset_dup(plan->vm_cpus);
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

void pinning_report_note(struct pin_report *report, int tid, int r, unsigned *counter) {
        if (r == 0) {
                (*counter)++;
                return;
        }
        if (r == -ESRCH) {
                report->threads_gone++;
                return;
        }
        if (report->n_failures < PINNING_MAX_FAILURES)
                report->failures[report->n_failures] = (struct pin_failure){.tid = tid, .error = r};
        report->n_failures++;
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