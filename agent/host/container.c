/* container: the pve-container <vmid>.conf parser (pure), the directory and cgroup reads, and JSON. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "container.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "boolword.h"
#include "fileio.h"
#include "pve_conf.h"

#define MIB (UINT64_C(1) << 20)
#define DEFAULT_MEMORY_MIB 512 /* pve-container's defaults for memory and swap */
#define DEFAULT_SWAP_MIB 512
#define MAX_MEMORY_MIB (UINT64_C(1) << 32)
#define MAX_CPU_COUNT 8192
#define MAX_CPUUNITS 500000
#define REASON_MAX 256

unsigned container_cpu_count(const struct container *ct, unsigned host_cpus) {
        unsigned cpus = ct->cores ? ct->cores : host_cpus;
        unsigned limit = (ct->cpulimit_centi + 99) / 100;
        return limit > 0 && limit < cpus ? limit : cpus;
}

static int add_error(struct container *ct, unsigned line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int add_error(struct container *ct, unsigned line, const char *fmt, ...) {
        struct container_error *errs = realloc(ct->errors, (ct->n_errors + 1) * sizeof(*errs));
        if (!errs)
                return -ENOMEM;
        ct->errors = errs;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&errs[ct->n_errors].reason, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        errs[ct->n_errors++].line = line;
        return 0;
}

void container_free(struct container *ct) {
        if (!ct)
                return;
        free(ct->hostname);
        cpuset_free(ct->cpuset);
        cpuset_free(ct->effective);
        for (size_t i = 0; i < ct->n_errors; i++)
                free(ct->errors[i].reason);
        free(ct->errors);
        free(ct);
}

/* ---- values: 0, -EINVAL with a reason (the key keeps its default, as pve-container warns and goes on) ---- */

static int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        if (*s == '\0' || strspn(s, "0123456789") != strlen(s) || strlen(s) > 15)
                return -EINVAL;
        uint64_t v = strtoull(s, NULL, 10);
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

static int value_uint(const char *value, uint64_t min, uint64_t max, uint64_t *ret, char *reason, size_t len) {
        if (parse_uint(value, min, max, ret) == 0)
                return 0;
        snprintf(reason, len, "expected an integer from %llu to %llu, got '%s'", (unsigned long long)min,
                 (unsigned long long)max, value);
        return -EINVAL;
}

/* cpulimit is a number (0 - 8192, "0.5", "2"); kept in hundredths, rounded up. */
static int value_cpulimit(const char *value, unsigned *ret, char *reason, size_t len) {
        char *end = NULL;
        errno = 0;
        double v = strtod(value, &end);
        bool digits = strspn(value, "0123456789.") == strlen(value) && *value;
        if (!digits || errno || end == value || *end || !isfinite(v) || v < 0 || v > MAX_CPU_COUNT) {
                snprintf(reason, len, "expected a number from 0 to %u, got '%s'", MAX_CPU_COUNT, value);
                return -EINVAL;
        }
        double centi = v * 100;
        unsigned whole = (unsigned)centi;
        *ret = whole + (centi - whole > 1e-6 ? 1 : 0);
        return 0;
}

static int value_bool(const char *value, bool *ret, char *reason, size_t len) {
        if (boolword_parse(value, ret) == 0)
                return 0;
        snprintf(reason, len, "expected a boolean (0 or 1), got '%s'", value);
        return -EINVAL;
}

static int value_cpuset(const char *value, struct cpuset **dst, char *reason, size_t len) {
        struct cpuset *s = NULL;
        int r = cpuset_parse(value, &s);
        if (r == -ENOMEM)
                return r;
        if (r < 0 || cpuset_is_empty(s)) {
                cpuset_free(s);
                snprintf(reason, len, "invalid CPU list '%s' (expected ids and ranges like 0,5,8-11)", value);
                return -EINVAL;
        }
        cpuset_free(*dst);
        *dst = s;
        return 0;
}

static int value_string(const char *value, char **dst) {
        char *s = strdup(value);
        if (!s)
                return -ENOMEM;
        free(*dst);
        *dst = s;
        return 0;
}

/* ---- keys ---- */

static int set_count(unsigned *dst, const char *value, uint64_t min, uint64_t max, char *reason, size_t len) {
        uint64_t v;
        int r = value_uint(value, min, max, &v, reason, len);
        if (r == 0)
                *dst = (unsigned)v;
        return r;
}

/* The keys that matter for capacity; every other valid key (rootfs, net0, arch, ...) is accepted unread. */
static int dispatch_key(struct container *ct, const char *key, const char *value, char *reason, size_t len) {
        if (strcmp(key, "cores") == 0)
                return set_count(&ct->cores, value, 1, MAX_CPU_COUNT, reason, len);
        if (strcmp(key, "cpulimit") == 0)
                return value_cpulimit(value, &ct->cpulimit_centi, reason, len);
        if (strcmp(key, "cpuunits") == 0)
                return set_count(&ct->cpuunits, value, 0, MAX_CPUUNITS, reason, len);
        if (strcmp(key, "memory") == 0)
                return value_uint(value, 16, MAX_MEMORY_MIB, &ct->memory_mib, reason, len);
        if (strcmp(key, "swap") == 0)
                return value_uint(value, 0, MAX_MEMORY_MIB, &ct->swap_mib, reason, len);
        if (strcmp(key, "template") == 0)
                return value_bool(value, &ct->template_ct, reason, len);
        if (strcmp(key, "hostname") == 0)
                return value_string(value, &ct->hostname);
        /* Raw LXC keys: lxc.cgroup2.* on cgroup v2 hosts, lxc.cgroup.* on v1; LXC applies them at start. */
        if (strcmp(key, "lxc.cgroup2.cpuset.cpus") == 0 || strcmp(key, "lxc.cgroup.cpuset.cpus") == 0)
                return value_cpuset(value, &ct->cpuset, reason, len);
        return 0;
}

/* ---- lines (PVE::LXC::Config's parse_pct_config) ---- */

/* Raw keys: /^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$/. */
static int split_raw(char *line, char **ret_key, char **ret_value) {
        if (strncmp(line, "lxc.", 4) != 0)
                return -EINVAL;
        size_t k = 4 + strspn(line + 4, "abcdefghijklmnopqrstuvwxyz0123456789_-.");
        size_t sep = k + strspn(line + k, " \t");
        if (line[k] != ':' && line[sep] != '=')
                return -EINVAL;
        char *value = line + (line[k] == ':' ? k : sep) + 1;
        line[k] = '\0';
        *ret_key = line;
        *ret_value = value + strspn(value, " \t");
        return 0;
}

/* 1 at a section header (stop), 0 to go on, -ENOMEM. */
static int parse_line(struct container *ct, unsigned lineno, char *line) {
        char *key, *value;
        int kind = pve_conf_line(line, &key, &value);
        if (kind == -EINVAL && split_raw(line, &key, &value) == 0)
                kind = PVE_CONF_PAIR;
        if (kind == PVE_CONF_SKIP || kind == PVE_CONF_END)
                return kind == PVE_CONF_END;
        if (kind < 0)
                return add_error(ct, lineno, "cannot parse line '%.80s' (expected 'key: value')", line);
        char reason[REASON_MAX] = "";
        int r = dispatch_key(ct, key, value, reason, sizeof reason);
        if (r == -ENOMEM)
                return r;
        return r < 0 ? add_error(ct, lineno, "%s: %s", key, reason) : 0;
}

static struct container *container_new(int vmid) {
        struct container *ct = calloc(1, sizeof *ct);
        if (!ct)
                return NULL;
        ct->vmid = vmid;
        ct->memory_mib = DEFAULT_MEMORY_MIB;
        ct->swap_mib = DEFAULT_SWAP_MIB;
        return ct;
}

int container_parse_config(int vmid, const char *text, struct container **ret) {
        struct container *ct = container_new(vmid);
        if (!ct)
                return -ENOMEM;
        int r = 0;
        const char *p = text;
        for (unsigned lineno = 1; *p && r == 0; lineno++) {
                size_t n = strcspn(p, "\n");
                char *line = strndup(p, n);
                r = line ? parse_line(ct, lineno, line) : -ENOMEM;
                free(line);
                p += n + (p[n] == '\n');
        }
        if (r < 0) {
                container_free(ct);
                return r;
        }
        *ret = ct;
        return 0;
}

/* ---- comparing ---- */

static bool same_str(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_set(const struct cpuset *a, const struct cpuset *b) {
        return a == b || (a && b && cpuset_equal(a, b));
}

static bool same_errors(const struct container *a, const struct container *b) {
        if (a->n_errors != b->n_errors)
                return false;
        for (size_t i = 0; i < a->n_errors; i++)
                if (a->errors[i].line != b->errors[i].line || !same_str(a->errors[i].reason, b->errors[i].reason))
                        return false;
        return true;
}

static bool container_equal(const struct container *a, const struct container *b) {
        return a->vmid == b->vmid && a->cores == b->cores && a->cpulimit_centi == b->cpulimit_centi &&
               a->cpuunits == b->cpuunits && a->memory_mib == b->memory_mib && a->swap_mib == b->swap_mib &&
               a->template_ct == b->template_ct && a->unreadable == b->unreadable && a->running == b->running &&
               same_str(a->hostname, b->hostname) && same_set(a->cpuset, b->cpuset) &&
               same_set(a->effective, b->effective) && same_errors(a, b);
}

bool container_list_equal(const struct container_list *a, const struct container_list *b) {
        if (a->n != b->n)
                return false;
        for (size_t i = 0; i < a->n; i++)
                if (!container_equal(a->items[i], b->items[i]))
                        return false;
        return true;
}

const struct container *container_list_find(const struct container_list *l, int vmid) {
        for (size_t i = 0; l && i < l->n; i++)
                if (l->items[i]->vmid == vmid)
                        return l->items[i];
        return NULL;
}

/* ---- reading the directory and the cgroups ---- */

static int load_one(const char *config_dir, int vmid, struct container **ret) {
        char *text = NULL;
        int r = pve_conf_read(config_dir, vmid, &text);
        if (r == -ENOMEM)
                return r;
        if (r == 0) {
                r = container_parse_config(vmid, text, ret);
                free(text);
                return r;
        }
        int err = -r;
        r = container_parse_config(vmid, "", ret);
        if (r == 0) {
                (*ret)->unreadable = true;
                r = add_error(*ret, 0, "cannot read the config file: %s", strerror(err));
        }
        return r;
}

/* cgroup.events of a cgroup v2 directory: "populated 1" while any process runs in its subtree. */
static bool cgroup_populated(const char *dir) {
        char *path = NULL, *text = NULL;
        if (asprintf(&path, "%s/cgroup.events", dir) < 0)
                return false;
        int r = fileio_read(path, 4096, &text, NULL);
        free(path);
        bool populated = false;
        const char *p = r == 0 ? text : "";
        while (*p && !populated) {
                populated = strncmp(p, "populated 1", 11) == 0 && (p[11] == '\n' || p[11] == '\0');
                p += strcspn(p, "\n");
                p += *p == '\n';
        }
        free(text);
        return populated;
}

static int read_effective(const char *dir, struct cpuset **ret) {
        char *path = NULL, *text = NULL;
        if (asprintf(&path, "%s/cpuset.cpus.effective", dir) < 0)
                return -ENOMEM;
        int r = fileio_read(path, 65536, &text, NULL);
        free(path);
        if (r < 0)
                return r == -ENOMEM ? r : 0; /* no cpuset controller there: unknown */
        text[strcspn(text, "\n")] = '\0';
        struct cpuset *s = NULL;
        r = cpuset_parse(text, &s);
        free(text);
        if (r == -ENOMEM)
                return r;
        if (r == 0 && cpuset_is_empty(s)) {
                cpuset_free(s); /* an empty file: unknown, not "no CPUs" */
                s = NULL;
        }
        *ret = r == 0 ? s : NULL;
        return 0;
}

static int mark_running(struct container *ct, const char *cgroup_dir) {
        char *dir = NULL;
        if (!cgroup_dir || !*cgroup_dir)
                return 0;
        if (asprintf(&dir, "%s/%d", cgroup_dir, ct->vmid) < 0)
                return -ENOMEM;
        ct->running = cgroup_populated(dir);
        int r = ct->running ? read_effective(dir, &ct->effective) : 0;
        free(dir);
        return r;
}

static int list_append(struct container_list *l, struct container *ct) {
        struct container **items = realloc(l->items, (l->n + 1) * sizeof(*items));
        if (!items)
                return -ENOMEM;
        l->items = items;
        l->items[l->n++] = ct;
        return 0;
}

static int read_entries(DIR *dir, const char *config_dir, const char *cgroup_dir, struct container_list *l) {
        struct dirent *de;
        while ((de = readdir(dir))) {
                int vmid = pve_conf_name_vmid(de->d_name);
                if (vmid < 0)
                        continue;
                struct container *ct = NULL;
                int r = load_one(config_dir, vmid, &ct);
                if (r == 0)
                        r = mark_running(ct, cgroup_dir);
                if (r == 0)
                        r = list_append(l, ct);
                if (r < 0) {
                        container_free(ct);
                        return r;
                }
        }
        return 0;
}

static int container_cmp(const void *a, const void *b) {
        const struct container *x = *(const struct container *const *)a, *y = *(const struct container *const *)b;
        return (x->vmid > y->vmid) - (x->vmid < y->vmid);
}

int container_list_load(const char *config_dir, const char *cgroup_dir, struct container_list *ret) {
        struct container_list l = { 0, NULL };
        DIR *dir = config_dir && *config_dir ? opendir(config_dir) : NULL;
        if (!dir && config_dir && *config_dir && errno != ENOENT)
                return -errno;
        int r = dir ? read_entries(dir, config_dir, cgroup_dir, &l) : 0;
        if (dir)
                closedir(dir);
        if (r < 0) {
                container_list_done(&l);
                return r;
        }
        if (l.n > 0)
                qsort(l.items, l.n, sizeof(*l.items), container_cmp);
        *ret = l;
        return 0;
}

void container_list_done(struct container_list *l) {
        for (size_t i = 0; i < l->n; i++)
                container_free(l->items[i]);
        free(l->items);
        l->items = NULL;
        l->n = 0;
}

/* ---- JSON ---- */

static json_t *cpuset_or_null(const struct cpuset *s) {
        if (!s)
                return json_null();
        char *list = cpuset_format(s);
        json_t *v = list ? json_string(list) : NULL;
        free(list);
        return v;
}

static json_t *errors_json(const struct container *ct) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < ct->n_errors; i++) {
                json_t *e = json_pack("{s:I, s:s}", "line", (json_int_t)ct->errors[i].line, "reason",
                                      ct->errors[i].reason);
                if (json_array_append_new(a, e) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

static json_t *count_or_null(unsigned v) {
        return v ? json_integer(v) : json_null();
}

json_t *container_to_json(const struct container *ct) {
        json_t *cpulimit = ct->cpulimit_centi ? json_real(ct->cpulimit_centi / 100.0) : json_null();
        return json_pack("{s:i, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:b, s:b, s:b, s:o, s:o}", "vmid", ct->vmid,
                         "hostname", ct->hostname ? json_string(ct->hostname) : json_null(), "cores",
                         count_or_null(ct->cores), "cpulimit", cpulimit, "cpuunits", count_or_null(ct->cpuunits),
                         "memory_bytes", (json_int_t)(ct->memory_mib * MIB), "swap_bytes",
                         (json_int_t)(ct->swap_mib * MIB), "cpuset", cpuset_or_null(ct->cpuset), "pinned",
                         ct->cpuset != NULL, "template", ct->template_ct, "running", ct->running, "effective_cpus",
                         cpuset_or_null(ct->effective), "errors", errors_json(ct));
}

json_t *container_list_to_json(const struct container_list *l) {
        json_t *a = json_array();
        for (size_t i = 0; a && l && i < l->n; i++) {
                if (json_array_append_new(a, container_to_json(l->items[i])) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}
