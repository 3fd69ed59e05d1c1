/* inventory: the VMs on this host, parsed from Proxmox qemu-server configs and run files. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "inventory.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fileio.h"

#define MIB (UINT64_C(1) << 20)
#define DEFAULT_MEMORY_MIB 512
#define MIN_MEMORY_MIB 16 /* the schema's minimum for memory/current */
/* Caps that keep byte sums far from overflow (4 PiB per VM) and vCPU products small. */
#define MAX_MEMORY_MIB (UINT64_C(1) << 32)
#define MAX_CPU_COUNT 8192
/* pmxcfs refuses files above 1 MiB, so anything larger is not a real config. */
#define CONFIG_MAX_BYTES (1024 * 1024)
#define MAX_VMID 999999999
#define REASON_MAX 256

/* What one line handler needs: the VM and the line it is on (for cross-field checks). */
struct parse_state {
        struct vm *vm;
        unsigned line;
        unsigned vcpus_line;
        unsigned numa_line[INVENTORY_MAX_NUMA];
};

typedef int (*key_parser)(struct parse_state *st, const char *value, char *reason, size_t len);

unsigned vm_vcpu_count(const struct vm *vm) {
        if (vm->vcpus > 0)
                return vm->vcpus;
        return vm->cores * vm->sockets;
}

static int vm_add_error(struct vm *vm, unsigned line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int vm_add_error(struct vm *vm, unsigned line, const char *fmt, ...) {
        struct vm_config_error *errs = realloc(vm->errors, (vm->n_errors + 1) * sizeof(*errs));
        if (!errs)
                return -ENOMEM;
        vm->errors = errs;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&errs[vm->n_errors].reason, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        errs[vm->n_errors++].line = line;
        return 0;
}

static struct vm *vm_new(int vmid) {
        struct vm *vm = calloc(1, sizeof(*vm));
        if (!vm)
                return NULL;
        vm->vmid = vmid;
        vm->cores = 1;
        vm->sockets = 1;
        vm->memory_mib = DEFAULT_MEMORY_MIB;
        return vm;
}

static void vm_numa_clear(struct vm_numa *n) {
        cpuset_free(n->guest_cpus);
        cpuset_free(n->hostnodes);
        memset(n, 0, sizeof(*n));
}

void vm_free(struct vm *vm) {
        if (!vm)
                return;
        free(vm->name);
        cpuset_free(vm->affinity);
        for (size_t i = 0; i < INVENTORY_MAX_NUMA; i++)
                vm_numa_clear(&vm->numa_nodes[i]);
        free(vm->tags);
        for (size_t i = 0; i < vm->n_errors; i++)
                free(vm->errors[i].reason);
        free(vm->errors);
        free(vm);
}

/* ---- value parsers: 0, -EINVAL with a reason, or -ENOMEM ---- */

/* A decimal integer in [min, max] (Proxmox integers: digits only, no sign, no spaces). */
static int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret_value) {
        if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
                return -EINVAL;
        uint64_t v = 0;
        for (; *s; s++) {
                if (v > (UINT64_MAX - 9) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t)(*s - '0');
        }
        if (v < min || v > max)
                return -ERANGE;
        *ret_value = v;
        return 0;
}

static int parse_count(const char *value, unsigned min, unsigned *ret, char *reason, size_t len) {
        uint64_t v;
        if (parse_uint(value, min, MAX_CPU_COUNT, &v) < 0) {
                snprintf(reason, len, "expected an integer from %u to %u, got '%s'", min, MAX_CPU_COUNT, value);
                return -EINVAL;
        }
        *ret = (unsigned)v;
        return 0;
}

static int parse_mib(const char *value, uint64_t min, uint64_t *ret, char *reason, size_t len) {
        if (parse_uint(value, min, MAX_MEMORY_MIB, ret) < 0) {
                snprintf(reason, len, "expected MiB from %llu to %llu, got '%s'", (unsigned long long)min,
                         (unsigned long long)MAX_MEMORY_MIB, value);
                return -EINVAL;
        }
        return 0;
}

/* Proxmox booleans (PVE::JSONSchema): 1/on/yes/true and 0/off/no/false, any case. */
static int parse_bool(const char *value, bool *ret, char *reason, size_t len) {
        static const char *const yes[] = { "1", "on", "yes", "true" };
        static const char *const no[] = { "0", "off", "no", "false" };
        for (size_t i = 0; i < 4; i++) {
                if (strcasecmp(value, yes[i]) == 0 || strcasecmp(value, no[i]) == 0) {
                        *ret = strcasecmp(value, yes[i]) == 0;
                        return 0;
                }
        }
        snprintf(reason, len, "expected a boolean (0 or 1), got '%s'", value);
        return -EINVAL;
}

static int set_string(char **dst, const char *value) {
        char *s = strdup(value);
        if (!s)
                return -ENOMEM;
        free(*dst);
        *dst = s;
        return 0;
}

/* A cpulist such as "0,5,8-11" (pve-cpuset). */
static int parse_cpulist(const char *value, struct cpuset **ret, char *reason, size_t len) {
        struct cpuset *s = NULL;
        int r = cpuset_parse(value, &s);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                snprintf(reason, len, "invalid CPU list '%s' (%s)", value,
                         r == -ERANGE ? "reversed range or CPU above 8191" : "expected ids and ranges like 0,5,8-11");
                return -EINVAL;
        }
        *ret = s;
        return 0;
}

/* NUMA id lists join ranges with ';' (pattern \d+(-\d+)?(;\d+(-\d+)?)*). */
static int parse_semicolon_list(const char *key, const char *value, struct cpuset **ret, char *reason, size_t len) {
        if (strspn(value, "0123456789;-") != strlen(value) || *value == '\0') {
                snprintf(reason, len, "%s: invalid id list '%s' (expected ids or ranges joined by ';')", key, value);
                return -EINVAL;
        }
        char *copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        for (char *p = copy; *p; p++)
                if (*p == ';')
                        *p = ',';
        int r = parse_cpulist(copy, ret, reason, len);
        free(copy);
        if (r == -EINVAL)
                snprintf(reason, len, "%s: invalid id list '%s'", key, value);
        return r;
}

/* ---- property strings: "k=v,k=v" with an optional default key ---- */

typedef int (*prop_fn)(void *ctx, const char *key, const char *value, char *reason, size_t len);

static int parse_props(const char *value, const char *default_key, prop_fn fn, void *ctx, char *reason, size_t len) {
        char *copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        int r = 0;
        char *save = NULL;
        for (char *part = strtok_r(copy, ",", &save); part && r == 0; part = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(part, '=');
                if (eq)
                        *eq = '\0';
                if (!eq && !default_key) {
                        snprintf(reason, len, "'%s' has no key", part);
                        r = -EINVAL;
                        break;
                }
                r = fn(ctx, eq ? part : default_key, eq ? eq + 1 : part, reason, len);
        }
        free(copy);
        return r;
}

static int memory_prop(void *ctx, const char *key, const char *value, char *reason, size_t len) {
        if (strcmp(key, "current") != 0) {
                snprintf(reason, len, "unknown key '%s'", key);
                return -EINVAL;
        }
        return parse_mib(value, MIN_MEMORY_MIB, (uint64_t *)ctx, reason, len);
}

static int numa_policy(struct vm_numa *n, const char *value, char *reason, size_t len) {
        if (strcmp(value, "bind") != 0 && strcmp(value, "preferred") != 0 && strcmp(value, "interleave") != 0) {
                snprintf(reason, len, "policy must be preferred, bind or interleave, got '%s'", value);
                return -EINVAL;
        }
        snprintf(n->policy, sizeof(n->policy), "%s", value);
        return 0;
}

static int numa_memory(struct vm_numa *n, const char *value, char *reason, size_t len) {
        int r = parse_mib(value, 1, &n->memory_mib, reason, len);
        if (r < 0)
                snprintf(reason, len, "memory: expected whole MiB, got '%s'", value);
        return r;
}

static int numa_prop(void *ctx, const char *key, const char *value, char *reason, size_t len) {
        struct vm_numa *n = ctx;
        struct cpuset **list = NULL;
        if (strcmp(key, "cpus") == 0)
                list = &n->guest_cpus;
        else if (strcmp(key, "hostnodes") == 0)
                list = &n->hostnodes;
        else if (strcmp(key, "memory") == 0)
                return numa_memory(n, value, reason, len);
        else if (strcmp(key, "policy") == 0)
                return numa_policy(n, value, reason, len);
        if (!list) {
                snprintf(reason, len, "unknown key '%s'", key);
                return -EINVAL;
        }
        if (*list) {
                snprintf(reason, len, "duplicate key '%s'", key);
                return -EINVAL;
        }
        return parse_semicolon_list(key, value, list, reason, len);
}

/* ---- key handlers ---- */

static int key_name(struct parse_state *st, const char *value, char *reason, size_t len) {
        (void)reason, (void)len;
        return set_string(&st->vm->name, value);
}

static int key_tags(struct parse_state *st, const char *value, char *reason, size_t len) {
        (void)reason, (void)len;
        return set_string(&st->vm->tags, value);
}

static int key_cores(struct parse_state *st, const char *value, char *reason, size_t len) {
        return parse_count(value, 1, &st->vm->cores, reason, len);
}

static int key_sockets(struct parse_state *st, const char *value, char *reason, size_t len) {
        return parse_count(value, 1, &st->vm->sockets, reason, len);
}

static int key_vcpus(struct parse_state *st, const char *value, char *reason, size_t len) {
        st->vcpus_line = st->line;
        return parse_count(value, 1, &st->vm->vcpus, reason, len);
}

static int key_memory(struct parse_state *st, const char *value, char *reason, size_t len) {
        uint64_t mib = 0;
        int r = parse_props(value, "current", memory_prop, &mib, reason, len);
        if (r == 0 && mib == 0) {
                snprintf(reason, len, "no memory size in '%s'", value);
                r = -EINVAL;
        }
        if (r == 0)
                st->vm->memory_mib = mib;
        return r;
}

static int key_balloon(struct parse_state *st, const char *value, char *reason, size_t len) {
        return parse_mib(value, 0, &st->vm->balloon_mib, reason, len);
}

static int key_affinity(struct parse_state *st, const char *value, char *reason, size_t len) {
        struct cpuset *s = NULL;
        int r = parse_cpulist(value, &s, reason, len);
        if (r < 0)
                return r;
        cpuset_free(st->vm->affinity);
        st->vm->affinity = s;
        return 0;
}

static int key_numa(struct parse_state *st, const char *value, char *reason, size_t len) {
        return parse_bool(value, &st->vm->numa, reason, len);
}

static int key_template(struct parse_state *st, const char *value, char *reason, size_t len) {
        return parse_bool(value, &st->vm->template_vm, reason, len);
}

static int key_hugepages(struct parse_state *st, const char *value, char *reason, size_t len) {
        if (strcmp(value, "any") != 0 && strcmp(value, "2") != 0 && strcmp(value, "1024") != 0) {
                snprintf(reason, len, "expected any, 2 or 1024, got '%s'", value);
                return -EINVAL;
        }
        snprintf(st->vm->hugepages, sizeof(st->vm->hugepages), "%s", value);
        return 0;
}

/* numaN: the whole entry is dropped when any part of it is malformed (as Proxmox does). */
static int key_numa_n(struct parse_state *st, unsigned idx, const char *value, char *reason, size_t len) {
        struct vm_numa n = { .present = true };
        int r = parse_props(value, NULL, numa_prop, &n, reason, len);
        if (r == 0 && !n.guest_cpus) {
                snprintf(reason, len, "missing the required key 'cpus'");
                r = -EINVAL;
        }
        if (r < 0) {
                vm_numa_clear(&n);
                return r;
        }
        vm_numa_clear(&st->vm->numa_nodes[idx]);
        st->vm->numa_nodes[idx] = n;
        st->numa_line[idx] = st->line;
        return 0;
}

static const struct {
        const char *key;
        key_parser parse;
} key_table[] = {
        { "name", key_name },       { "cores", key_cores },       { "sockets", key_sockets },
        { "vcpus", key_vcpus },     { "memory", key_memory },     { "balloon", key_balloon },
        { "affinity", key_affinity }, { "numa", key_numa },       { "hugepages", key_hugepages },
        { "tags", key_tags },       { "template", key_template },
};

/* "numa0".."numa7" -> 0..7, anything else -> -1. */
static int numa_key_index(const char *key) {
        if (strncmp(key, "numa", 4) != 0 || key[4] < '0' || key[4] > '9' || key[5] != '\0')
                return -1;
        int idx = key[4] - '0';
        return idx < INVENTORY_MAX_NUMA ? idx : -1;
}

/* Keys we do not use (net0, scsi0, ...) are ignored, as they are valid Proxmox keys. */
static int dispatch_key(struct parse_state *st, const char *key, const char *value, char *reason, size_t len) {
        int idx = numa_key_index(key);
        if (idx >= 0)
                return key_numa_n(st, (unsigned)idx, value, reason, len);
        for (size_t i = 0; i < sizeof(key_table) / sizeof(key_table[0]); i++)
                if (strcmp(key, key_table[i].key) == 0)
                        return key_table[i].parse(st, value, reason, len);
        return 0;
}

/* ---- lines ---- */

static bool is_section_line(const char *line) {
        size_t n = strlen(line);
        return n >= 3 && line[0] == '[' && line[n - 1] == ']' && !memchr(line + 1, ']', n - 2);
}

static void trim_right(char *s) {
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
                s[--n] = '\0';
}

/* Split "key: value" like qemu-server's /^([a-z][a-z_]*\d*):\s*(.+?)\s*$/. */
static int split_key_value(char *line, char **ret_key, char **ret_value) {
        size_t k = strspn(line, "abcdefghijklmnopqrstuvwxyz_");
        if (k == 0 || line[0] == '_')
                return -EINVAL;
        k += strspn(line + k, "0123456789");
        if (line[k] != ':')
                return -EINVAL;
        line[k] = '\0';
        char *value = line + k + 1;
        value += strspn(value, " \t");
        if (*value == '\0')
                return -EINVAL;
        *ret_key = line;
        *ret_value = value;
        return 0;
}

/* Returns 1 at a section header (stop), 0 to go on, -ENOMEM. */
static int parse_line(struct parse_state *st, char *line) {
        trim_right(line);
        if (line[0] == '\0' || line[0] == '#')
                return 0;
        if (is_section_line(line))
                return 1;
        char *key, *value;
        if (split_key_value(line, &key, &value) < 0)
                return vm_add_error(st->vm, st->line, "cannot parse line '%.80s' (expected 'key: value')", line);
        char reason[REASON_MAX] = "";
        int r = dispatch_key(st, key, value, reason, sizeof(reason));
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return vm_add_error(st->vm, st->line, "%s: %s", key, reason);
        return 0;
}

/* ---- cross-field checks (what qemu-server enforces when the VM starts) ---- */

static int check_vcpus(struct parse_state *st) {
        struct vm *vm = st->vm;
        if (vm->vcpus == 0 || vm->vcpus <= vm->cores * vm->sockets)
                return 0;
        unsigned max = vm->cores * vm->sockets;
        vm->vcpus = 0;
        return vm_add_error(vm, st->vcpus_line, "vcpus: more than cores * sockets (%u); counting %u", max, max);
}

static unsigned first_numa_line(const struct parse_state *st) {
        for (size_t i = 0; i < INVENTORY_MAX_NUMA; i++)
                if (st->vm->numa_nodes[i].present)
                        return st->numa_line[i];
        return 0;
}

/* Returns a reason when the numaN entries would make Proxmox refuse to start the VM, else NULL. */
static const char *numa_problem(const struct vm *vm, uint64_t *ret_sum) {
        uint64_t sum = 0;
        for (size_t i = 0; i < INVENTORY_MAX_NUMA; i++) {
                const struct vm_numa *n = &vm->numa_nodes[i];
                if (!n->present)
                        continue;
                if (n->memory_mib == 0)
                        return "a numa entry has no memory=";
                if (n->hostnodes && n->policy[0] == '\0')
                        return "a numa entry has hostnodes= without policy=";
                sum += n->memory_mib;
        }
        *ret_sum = sum;
        return sum == vm->memory_mib ? NULL : "numa memory does not add up to the VM memory";
}

static int check_numa(struct parse_state *st) {
        struct vm *vm = st->vm;
        unsigned line = first_numa_line(st);
        if (!vm->numa || line == 0)
                return 0;
        uint64_t sum = 0;
        const char *problem = numa_problem(vm, &sum);
        vm->numa_valid = problem == NULL;
        if (!problem)
                return 0;
        return vm_add_error(vm, line, "%s (numa total %llu MiB, memory %llu MiB); Proxmox will not start it", problem,
                            (unsigned long long)sum, (unsigned long long)vm->memory_mib);
}

static int parse_text(struct parse_state *st, const char *text) {
        int r = 0;
        const char *p = text;
        for (st->line = 1; *p && r == 0; st->line++) {
                size_t n = strcspn(p, "\n");
                char *line = strndup(p, n);
                if (!line)
                        return -ENOMEM;
                r = parse_line(st, line);
                free(line);
                p += n + (p[n] == '\n');
        }
        return r < 0 ? r : 0;
}

int inventory_parse_config(int vmid, const char *text, struct vm **ret_vm) {
        struct vm *vm = vm_new(vmid);
        if (!vm)
                return -ENOMEM;
        struct parse_state st = { .vm = vm };
        int r = parse_text(&st, text);
        if (r == 0)
                r = check_vcpus(&st);
        if (r == 0)
                r = check_numa(&st);
        if (r < 0) {
                vm_free(vm);
                return r;
        }
        *ret_vm = vm;
        return 0;
}

/* ---- running VMs ---- */

static int read_pid_file(const char *path, int *ret_pid) {
        char *text = NULL;
        int r = fileio_read(path, 64, &text, NULL);
        if (r < 0)
                return r == -EFBIG ? -EINVAL : r;
        text[strcspn(text, "\n")] = '\0';
        uint64_t pid;
        r = parse_uint(text, 1, INT32_MAX, &pid);
        free(text);
        if (r < 0)
                return -EINVAL;
        *ret_pid = (int)pid;
        return 0;
}

/* argv[0] of QEMU on Proxmox is /usr/bin/kvm; other setups run qemu-system-<arch>. */
static bool is_qemu_argv0(const char *argv0) {
        const char *base = strrchr(argv0, '/');
        base = base ? base + 1 : argv0;
        return strcmp(base, "kvm") == 0 || strncmp(base, "qemu-system", 11) == 0;
}

static bool same_path(const char *a, const char *b) {
        if (strcmp(a, b) == 0)
                return true;
        char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
        bool same = ra && rb && strcmp(ra, rb) == 0;
        free(ra);
        free(rb);
        return same;
}

static bool is_option(const char *arg, const char *name) {
        if (arg[0] == '-' && arg[1] == '-')
                arg++; /* QEMU accepts -opt and --opt alike */
        return arg[0] == '-' && strcmp(arg + 1, name) == 0;
}

/* cmdline is argv joined by NULs. True for "-id <vmid>" or "-pidfile <pid_path>". */
static bool cmdline_names_vm(const char *cmdline, size_t len, int vmid, const char *pid_path) {
        char id[16];
        snprintf(id, sizeof(id), "%d", vmid);
        const char *end = cmdline + len;
        for (const char *a = cmdline; a < end; a += strlen(a) + 1) {
                const char *next = a + strlen(a) + 1;
                if (next >= end)
                        break;
                if (is_option(a, "id") && strcmp(next, id) == 0)
                        return true;
                if (is_option(a, "pidfile") && same_path(next, pid_path))
                        return true;
        }
        return false;
}

/* Guards against stale pid files the way qemu-server does: the pid must be a live QEMU of this VM. */
static int check_qemu_process(int pid, int vmid, const char *pid_path) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        char *cmdline = NULL;
        size_t len = 0;
        int r = fileio_read(path, 1 << 20, &cmdline, &len);
        if (r < 0)
                return r == -ENOMEM ? r : -ESRCH;
        /* A zombie has an empty cmdline, so it fails the argv[0] test. */
        bool ok = len > 0 && is_qemu_argv0(cmdline) && cmdline_names_vm(cmdline, len, vmid, pid_path);
        free(cmdline);
        return ok ? 0 : -ESRCH;
}

int inventory_running_pid(const char *run_dir, int vmid) {
        char *pid_path = NULL;
        if (asprintf(&pid_path, "%s/%d.pid", run_dir, vmid) < 0)
                return -ENOMEM;
        int pid = 0;
        int r = read_pid_file(pid_path, &pid);
        if (r == 0)
                r = check_qemu_process(pid, vmid, pid_path);
        free(pid_path);
        return r < 0 ? r : pid;
}

/* ---- loading a directory ---- */

/* "<vmid>.conf" with a vmid of 1..999999999 written without leading zeros; -1 otherwise. */
static int conf_name_vmid(const char *name) {
        size_t digits = strspn(name, "0123456789");
        if (digits == 0 || digits > 9 || name[0] == '0' || strcmp(name + digits, ".conf") != 0)
                return -1;
        return atoi(name);
}

static int load_one(const char *config_dir, int vmid, struct vm **ret_vm) {
        char *path = NULL;
        if (asprintf(&path, "%s/%d.conf", config_dir, vmid) < 0)
                return -ENOMEM;
        char *text = NULL;
        int r = fileio_read(path, CONFIG_MAX_BYTES, &text, NULL);
        free(path);
        if (r == -ENOMEM)
                return r;
        if (r == 0) {
                r = inventory_parse_config(vmid, text, ret_vm);
                free(text);
                return r;
        }
        struct vm *vm = vm_new(vmid);
        if (!vm || vm_add_error(vm, 0, "cannot read the config file: %s", strerror(-r)) < 0) {
                vm_free(vm);
                return -ENOMEM;
        }
        *ret_vm = vm;
        return 0;
}

static void mark_running(struct vm *vm, const char *run_dir) {
        int pid = run_dir ? inventory_running_pid(run_dir, vm->vmid) : -ENOENT;
        vm->running = pid > 0;
        vm->pid = pid > 0 ? pid : 0;
}

static int inventory_append(struct inventory *inv, struct vm *vm) {
        struct vm **vms = realloc(inv->vms, (inv->n_vms + 1) * sizeof(*vms));
        if (!vms)
                return -ENOMEM;
        inv->vms = vms;
        inv->vms[inv->n_vms++] = vm;
        return 0;
}

static int read_entries(DIR *dir, const char *config_dir, const char *run_dir, struct inventory *inv) {
        struct dirent *de;
        while ((de = readdir(dir))) {
                int vmid = conf_name_vmid(de->d_name);
                if (vmid < 0)
                        continue;
                struct vm *vm = NULL;
                int r = load_one(config_dir, vmid, &vm);
                if (r < 0)
                        return r;
                mark_running(vm, run_dir);
                r = inventory_append(inv, vm);
                if (r < 0) {
                        vm_free(vm);
                        return r;
                }
        }
        return 0;
}

static int vm_cmp(const void *a, const void *b) {
        const struct vm *x = *(const struct vm *const *)a, *y = *(const struct vm *const *)b;
        return (x->vmid > y->vmid) - (x->vmid < y->vmid);
}

int inventory_load(const char *config_dir, const char *run_dir, struct inventory **ret_inventory) {
        struct inventory *inv = calloc(1, sizeof(*inv));
        if (!inv)
                return -ENOMEM;
        DIR *dir = opendir(config_dir);
        if (!dir && errno != ENOENT) {
                int r = -errno;
                free(inv);
                return r;
        }
        int r = dir ? read_entries(dir, config_dir, run_dir, inv) : 0;
        if (dir)
                closedir(dir);
        if (r < 0) {
                inventory_free(inv);
                return r;
        }
        if (inv->n_vms > 0)
                qsort(inv->vms, inv->n_vms, sizeof(*inv->vms), vm_cmp);
        *ret_inventory = inv;
        return 0;
}

void inventory_free(struct inventory *inv) {
        if (!inv)
                return;
        for (size_t i = 0; i < inv->n_vms; i++)
                vm_free(inv->vms[i]);
        free(inv->vms);
        free(inv);
}

const struct vm *inventory_find(const struct inventory *inv, int vmid) {
        if (!inv)
                return NULL;
        for (size_t i = 0; i < inv->n_vms; i++)
                if (inv->vms[i]->vmid == vmid)
                        return inv->vms[i];
        return NULL;
}

/* ---- JSON ---- */

/* Add to obj, taking the reference; a NULL value (ENOMEM) poisons the result. */
static int put(json_t *obj, const char *key, json_t *value) {
        return value ? json_object_set_new(obj, key, value) : -1;
}

static json_t *cpuset_or_null(const struct cpuset *s) {
        if (!s)
                return json_null();
        char *list = cpuset_format(s);
        json_t *v = list ? json_string(list) : NULL;
        free(list);
        return v;
}

static json_t *string_or_null(const char *s) {
        return s && *s ? json_string(s) : json_null();
}

static json_t *numa_node_json(unsigned idx, const struct vm_numa *n) {
        json_t *o = json_object();
        int r = o ? 0 : -1;
        r |= put(o, "index", json_integer(idx));
        r |= put(o, "cpus", cpuset_or_null(n->guest_cpus));
        r |= put(o, "hostnodes", cpuset_or_null(n->hostnodes));
        r |= put(o, "memory_bytes", json_integer((json_int_t)(n->memory_mib * MIB)));
        r |= put(o, "policy", string_or_null(n->policy));
        if (r != 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *numa_nodes_json(const struct vm *vm) {
        json_t *a = json_array();
        for (unsigned i = 0; a && i < INVENTORY_MAX_NUMA; i++) {
                if (!vm->numa_nodes[i].present)
                        continue;
                if (json_array_append_new(a, numa_node_json(i, &vm->numa_nodes[i])) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

/* pve-tag-list: tags separated by ';', ',' or spaces. */
static json_t *tags_json(const char *tags) {
        json_t *a = json_array();
        for (const char *p = tags; a && p && *p;) {
                p += strspn(p, ";, ");
                size_t n = strcspn(p, ";, ");
                if (n > 0 && json_array_append_new(a, json_stringn(p, n)) < 0) {
                        json_decref(a);
                        return NULL;
                }
                p += n;
        }
        return a;
}

static json_t *errors_json(const struct vm *vm) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < vm->n_errors; i++) {
                json_t *e = json_pack("{s:I, s:s}", "line", (json_int_t)vm->errors[i].line, "reason",
                                      vm->errors[i].reason);
                if (json_array_append_new(a, e) < 0) {
                        json_decref(a);
                        return NULL;
                }
        }
        return a;
}

static int put_resources(json_t *o, const struct vm *vm) {
        int r = 0;
        r |= put(o, "vcpus", json_integer(vm_vcpu_count(vm)));
        r |= put(o, "cores", json_integer(vm->cores));
        r |= put(o, "sockets", json_integer(vm->sockets));
        r |= put(o, "memory_bytes", json_integer((json_int_t)(vm->memory_mib * MIB)));
        r |= put(o, "balloon_bytes", json_integer((json_int_t)(vm->balloon_mib * MIB)));
        r |= put(o, "affinity", cpuset_or_null(vm->affinity));
        r |= put(o, "numa", json_boolean(vm->numa));
        r |= put(o, "numa_nodes", numa_nodes_json(vm));
        r |= put(o, "hugepages", string_or_null(vm->hugepages));
        return r;
}

json_t *vm_to_json(const struct vm *vm) {
        json_t *o = json_object();
        if (!o)
                return NULL;
        int r = put(o, "vmid", json_integer(vm->vmid));
        r |= put(o, "name", string_or_null(vm->name));
        r |= put_resources(o, vm);
        r |= put(o, "tags", tags_json(vm->tags));
        r |= put(o, "template", json_boolean(vm->template_vm));
        r |= put(o, "running", json_boolean(vm->running));
        r |= put(o, "pid", vm->running ? json_integer(vm->pid) : json_null());
        r |= put(o, "errors", errors_json(vm));
        if (r != 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

json_t *inventory_to_json(const struct inventory *inv) {
        json_t *vms = json_array();
        for (size_t i = 0; vms && inv && i < inv->n_vms; i++) {
                if (json_array_append_new(vms, vm_to_json(inv->vms[i])) < 0) {
                        json_decref(vms);
                        return NULL;
                }
        }
        return vms ? json_pack("{s:o}", "vms", vms) : NULL;
}
