/* inventory_config: the qemu-server <vmid>.conf parser (pure): keys, property strings, sections, errors. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "inventory.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "boolword.h"
#include "pve_conf.h"

#define DEFAULT_MEMORY_MIB 512
#define MIN_MEMORY_MIB 16 /* the schema's minimum for memory/current */
/* Caps that keep byte sums far from overflow (4 PiB per VM) and vCPU products small. */
#define MAX_MEMORY_MIB (UINT64_C(1) << 32)
#define MAX_CPU_COUNT 8192
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

int vm_add_error(struct vm *vm, unsigned line, const char *fmt, ...) {
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

/* ---- value parsers: 0, -EINVAL with a reason, or -ENOMEM ----
 * Like qemu-server's parse_vm_config, a value that fails its format is dropped with a warning and the key
 * keeps its default; the rest of the file still counts. Each parser writes its result only on success. */

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

/* cores, sockets, vcpus. The cap keeps cores * sockets far from unsigned overflow. */
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

/* Proxmox booleans (PVE::JSONSchema): boolword's words. */
static int parse_bool(const char *value, bool *ret, char *reason, size_t len) {
        if (boolword_parse(value, ret) == 0)
                return 0;
        snprintf(reason, len, "expected a boolean (0 or 1), got '%s'", value);
        return -EINVAL;
}

/* name and tags are kept as written: they are labels, not used in accounting. */
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

/* ---- property strings: "k=v,k=v" with an optional default key ----
 * PVE::JSONSchema::parse_property_string: a part without '=' belongs to the default key, which is how
 * `memory: 4096` and `memory: current=4096` (PVE >= 8.1) mean the same. */

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

/* memory is the VM's static (maximum) memory, the amount charged; balloon only lowers what the guest
 * is asked to use and never frees the host from backing the maximum. */
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

static bool is_pci_address(const char *id, size_t n) {
        return n >= 5 && n < INVENTORY_PCI_ADDR_MAX && strspn(id, "0123456789abcdefABCDEF:.") >= n;
}

/* hostpciN: "[host=]<id>[;<id>...][,option=...]". A resource mapping (mapping=<name>) names no address here. */
static int key_hostpci(struct parse_state *st, const char *value, char *reason, size_t len) {
        size_t n = strcspn(value, ",");
        if (strncmp(value, "host=", 5) == 0)
                value += 5, n -= 5;
        else if (memchr(value, '=', n))
                return 0;
        for (const char *id = value; id < value + n;) {
                size_t k = strcspn(id, ";,");
                if (!is_pci_address(id, k)) {
                        snprintf(reason, len, "'%.*s' is not a PCI address", (int)k, id);
                        return -EINVAL;
                }
                if (st->vm->n_hostpci < INVENTORY_MAX_HOSTPCI)
                        snprintf(st->vm->hostpci[st->vm->n_hostpci++], INVENTORY_PCI_ADDR_MAX, "%.*s", (int)k, id);
                id += k + (id[k] == ';');
        }
        return 0;
}

/* "hostpci0".."hostpci15" */
static bool is_hostpci_key(const char *key) {
        return strncmp(key, "hostpci", 7) == 0 && key[7] >= '0' && key[7] <= '9' &&
               strspn(key + 7, "0123456789") == strlen(key + 7) && strlen(key + 7) <= 2;
}

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
        if (is_hostpci_key(key))
                return key_hostpci(st, value, reason, len);
        for (size_t i = 0; i < sizeof(key_table) / sizeof(key_table[0]); i++)
                if (strcmp(key, key_table[i].key) == 0)
                        return key_table[i].parse(st, value, reason, len);
        return 0;
}

/* ---- lines ----
 * The current config ends at the first "[section]" line: [PENDING] holds changes not applied yet,
 * [special:cloudinit] the values last given to cloud-init, and every snapshot has its own section. */

/* Returns 1 at a section header (stop), 0 to go on, -ENOMEM. */
static int parse_line(struct parse_state *st, char *line) {
        char *key, *value;
        int kind = pve_conf_line(line, &key, &value);
        if (kind == PVE_CONF_SKIP || kind == PVE_CONF_END)
                return kind == PVE_CONF_END;
        if (kind < 0)
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

/* qemu-server refuses vcpus above cores * sockets; count the maximum, the VM can hot-plug up to it. */
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
