/* ledger_rebuild: bound reservations rebuilt from the VM configs the coordinator described and the CPUs their
 * QEMU runs on (pure parts first, then the one function that reads the host). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "ledger_rebuild.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "errmsg.h"
#include "fileio.h"
#include "jsonutil.h"
#include "log.h"
#include "pinning_proc.h"

#define CONF_MAX_BYTES (1 << 20)
#define DESCR_LINE_MAX 2048 /* a "cpus:" line of the coordinator is up to 1,024 characters */

static int hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One "#..." line of s (up to the newline), %XX-decoded into buf. Returns the next line or NULL at the end. */
static const char *descr_line(const char *s, char *buf, size_t len) {
        size_t n = 0;
        for (s++; *s && *s != '\n'; s++) {
                int c = (unsigned char)*s, hi, lo;
                if (c == '%' && (hi = hexval(s[1])) >= 0 && (lo = hexval(s[2])) >= 0) {
                        c = hi * 16 + lo;
                        s += 2;
                }
                if (n + 1 < len)
                        buf[n++] = (char)c;
        }
        buf[n] = '\0';
        return *s ? s + 1 : NULL;
}

/* The value of "key: value" in line, or NULL. */
static const char *line_value(const char *line, const char *key) {
        size_t k = strlen(key);
        if (strncmp(line, key, k) != 0 || line[k] != ':')
                return NULL;
        line += k + 1;
        while (*line == ' ')
                line++;
        return *line ? line : NULL;
}

/* The description's lines, decoded: each value the first of its key, "" when absent. */
struct descr_lines {
        char name[LEDGER_OWNER_MAX + 1], uid[LEDGER_OWNER_MAX + 1], id[LEDGER_ID_LEN + 1], cpus[DESCR_LINE_MAX];
};

/* dst = v when it fits whole; a value cut short would name something else, so a longer one is not taken. */
static bool copy_whole(char *dst, size_t len, const char *v) {
        size_t n = strlen(v);
        if (n >= len)
                return false;
        memcpy(dst, v, n + 1);
        return true;
}

/* dst = the value of "key: value" in line, unless dst has one already. */
static void take(char *dst, size_t len, const char *line, const char *key) {
        const char *v = line_value(line, key);
        if (!*dst && v)
                copy_whole(dst, len, v);
}

static int descr_lines(const char *conf_text, struct descr_lines *d) {
        char line[DESCR_LINE_MAX];
        const char *v;
        *d = (struct descr_lines){ 0 };
        for (const char *s = conf_text; s && *s == '#';) {
                bool first = s == conf_text;
                s = descr_line(s, line, sizeof line);
                if (first) {
                        if (!(v = line_value(line, LEDGER_REBUILD_MARK)))
                                return -ENOENT;
                        if (!copy_whole(d->name, sizeof d->name, v))
                                return -ENOENT; /* longer than any Node name: not one of the coordinator's */
                        continue;
                }
                take(d->uid, sizeof d->uid, line, "uid");
                take(d->cpus, sizeof d->cpus, line, "cpus");
                if ((v = line_value(line, "reservation")) && ledger_id_valid(v))
                        take(d->id, sizeof d->id, line, "reservation");
        }
        return *d->name && *d->uid && !strpbrk(d->uid, "/ ") && !strpbrk(d->name, "/ ") ? 0 : -ENOENT;
}

int ledger_rebuild_describe(const char *conf_text, struct ledger_rebuild_descr *ret) {
        _cleanup_free_ struct descr_lines *d = malloc(sizeof *d);
        if (!d)
                return -ENOMEM;
        int r = descr_lines(conf_text, d);
        *ret = (struct ledger_rebuild_descr){ .cpus = NULL };
        if (r < 0)
                return r;
        int n = snprintf(ret->owner, sizeof ret->owner, "nodeclaim/%s/%s", d->uid, d->name);
        if (n < 0 || (size_t)n >= sizeof ret->owner)
                return -ENOENT;
        snprintf(ret->id, sizeof ret->id, "%s", d->id);
        if (*d->cpus && cpuset_parse(d->cpus, &ret->cpus) == -ENOMEM)
                return -ENOMEM;
        return 0;
}

void ledger_rebuild_descr_done(struct ledger_rebuild_descr *d) {
        cpuset_free(d->cpus);
        d->cpus = NULL;
}

struct placement_request ledger_rebuild_request(const struct vm *vm) {
        uint64_t kib = 0;
        if (strcmp(vm->hugepages, "2") == 0)
                kib = 2048;
        else if (strcmp(vm->hugepages, "1024") == 0)
                kib = 1048576;
        return (struct placement_request){ vm_vcpu_count(vm), vm->memory_mib * PLACEMENT_MIB, kib };
}

/* The OS id of the NUMA node holding cpu, or -1. */
static int cpu_node(const struct topology *t, int cpu) {
        for (size_t i = 0; cpu >= 0 && i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].cpus && cpuset_test(t->numa_nodes[i].cpus, (unsigned)cpu))
                        return t->numa_nodes[i].id;
        return -1;
}

/* A CPU set as a vCPU map: CPUs by node, then by id. 0, -E2BIG when it is not one CPU per vCPU, -ERANGE when a CPU is
 * outside the host's NUMA nodes. */
static int cpus_map(const struct topology *t, const struct cpuset *cpus, int *map, unsigned n) {
        if (!cpus || cpuset_count(cpus) != n)
                return -E2BIG;
        unsigned k = 0;
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                for (int c = -1; t->numa_nodes[i].cpus && (c = cpuset_next(cpus, c)) >= 0;)
                        if (cpuset_test(t->numa_nodes[i].cpus, (unsigned)c) && cpu_node(t, c) == t->numa_nodes[i].id)
                                map[k++] = c;
        return k == n ? 0 : -ERANGE;
}

int ledger_rebuild_vcpu_map(const struct topology *t, const struct vm *vm, const int *thread_map,
                            const struct cpuset *descr_cpus, int *map, char *why, size_t len) {
        unsigned n = vm_vcpu_count(vm);
        if (thread_map) {
                memcpy(map, thread_map, n * sizeof *map);
                return LEDGER_REBUILD_THREADS;
        }
        if (cpus_map(t, descr_cpus, map, n) == 0)
                return LEDGER_REBUILD_DESCRIPTION;
        if (cpus_map(t, vm->affinity, map, n) == 0)
                return LEDGER_REBUILD_AFFINITY;
        return errmsg_invalid(why, len, "%s, and neither its description's cpus (%u) nor its affinity (%u) give one "
                              "host CPU to each of its %u vCPUs", vm->running ? "its vCPU threads are not pinned one "
                              "CPU each" : "not running", descr_cpus ? cpuset_count(descr_cpus) : 0,
                              vm->affinity ? cpuset_count(vm->affinity) : 0, n);
}

/* MiB of guest node g (host node `node`, n vCPUs): the config's numaN memory when numaN names that one host node
 * and there are as many numaN as guest nodes; else memory split by vCPUs, the rest on the last node. */
static uint64_t node_mib(const struct vm *vm, size_t g, size_t n_nodes, int node, unsigned n, uint64_t *left) {
        const struct vm_numa *v = &vm->numa_nodes[g];
        bool same = vm->numa_valid && g < INVENTORY_MAX_NUMA && v->present && v->hostnodes &&
                    cpuset_count(v->hostnodes) == 1 && cpuset_test(v->hostnodes, (unsigned)node) &&
                    (n_nodes == INVENTORY_MAX_NUMA || !vm->numa_nodes[n_nodes].present);
        uint64_t mib = *left; /* the last guest node takes the rest */
        if (g + 1 < n_nodes)
                mib = same ? v->memory_mib : vm->memory_mib * n / vm_vcpu_count(vm);
        mib = mib > *left ? *left : mib;
        *left -= mib;
        return mib;
}

static size_t count_nodes(const struct topology *t, const int *map, unsigned n) {
        size_t k = 0;
        for (unsigned i = 0; i < n; i++)
                k += i == 0 || cpu_node(t, map[i]) != cpu_node(t, map[i - 1]);
        return k;
}

/* {"cpus", "vcpu_map", "numa"} as placement_to_json writes it. */
static json_t *placement_doc(const struct topology *t, const struct vm *vm, const int *map, unsigned n) {
        json_t *jmap = json_array(), *numa = json_array();
        struct cpuset *all = cpuset_new();
        size_t n_nodes = count_nodes(t, map, n);
        uint64_t left = vm->memory_mib;
        bool ok = jmap && numa && all;
        for (unsigned i = 0; ok && i < n; i++)
                ok = json_array_append_new(jmap, json_integer(map[i])) == 0 && cpuset_set(all, (unsigned)map[i]) == 0;
        for (unsigned i = 0, g = 0; ok && i < n; g++) {
                unsigned first = i;
                int node = cpu_node(t, map[i]);
                while (i < n && cpu_node(t, map[i]) == node)
                        i++;
                struct cpuset *guest = cpuset_new();
                for (unsigned v = first; guest && v < i; v++)
                        cpuset_set(guest, v);
                uint64_t mib = node_mib(vm, g, n_nodes, node, i - first, &left);
                ok = guest && json_array_append_new(numa, json_pack("{s:i, s:o, s:I}", "node", node, "guest_cpus",
                                                          jsonutil_cpuset(guest), "memory_bytes",
                                                          (json_int_t)(mib * PLACEMENT_MIB))) == 0;
                cpuset_free(guest);
        }
        json_t *doc = ok ? json_pack("{s:o, s:O, s:O}", "cpus", jsonutil_cpuset(all), "vcpu_map", jmap, "numa", numa)
                         : NULL;
        json_decref(jmap);
        json_decref(numa);
        cpuset_free(all);
        return doc;
}

int ledger_rebuild_placement(const struct topology *t, const struct vm *vm, const int *vcpu_map,
                             struct placement **ret, char *why, size_t len) {
        unsigned n = vm_vcpu_count(vm);
        if (n == 0 || n > PLACEMENT_MAX_VCPUS)
                return errmsg_invalid(why, len, "%u vCPUs", n);
        json_t *doc = placement_doc(t, vm, vcpu_map, n);
        if (!doc)
                return -ENOMEM;
        int r = placement_from_json(t, doc, ret, why, len);
        json_decref(doc);
        return r;
}

int ledger_rebuild_overlap(const struct ledger *l, const struct placement *p) {
        for (size_t i = 0; p && i < l->n; i++) {
                const struct reservation *r = l->items[i];
                if (r->vmid && r->placement && cpuset_intersects(r->placement->cpus, p->cpus))
                        return r->vmid;
        }
        return 0;
}

/* Memory of the placements of l (and p) on host node `node`. */
static uint64_t node_placed(const struct ledger *l, const struct placement *p, int node) {
        uint64_t sum = 0;
        for (size_t i = 0; i <= l->n; i++) {
                const struct placement *q = i < l->n ? l->items[i]->placement : p;
                for (size_t j = 0; q && j < q->n_numa; j++)
                        sum += q->numa[j].node == node ? q->numa[j].memory_bytes : 0;
        }
        return sum;
}

bool ledger_rebuild_memory_fits(const struct ledger *l, const struct topology *t, const struct placement *p) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (node_placed(l, p, t->numa_nodes[i].id) > t->numa_nodes[i].memory_bytes)
                        return false;
        return true;
}

/* ---- reading the host ---- */

/* vcpu_map from the vCPU threads of pid: each must be pinned to exactly one CPU. 0, -EINVAL (not so, or unreadable),
 * -ENOMEM. */
static int threads_map(const char *proc_root, int pid, unsigned n, int *map) {
        json_t *threads = NULL, *e;
        size_t i;
        int r = pinning_proc_read(proc_root, pid, &threads);
        if (r < 0)
                return r == -ENOMEM ? r : -EINVAL;
        unsigned found = 0;
        for (unsigned v = 0; v < n; v++)
                map[v] = -1;
        json_array_foreach(threads, i, e) {
                json_int_t v = json_integer_value(json_object_get(e, "vcpu"));
                struct cpuset *cpus = NULL;
                if (!json_object_get(e, "vcpu") || v < 0 || v >= n ||
                    cpuset_parse(json_string_value(json_object_get(e, "cpus")), &cpus) < 0)
                        continue;
                if (cpuset_count(cpus) == 1 && map[v] < 0) {
                        map[v] = cpuset_next(cpus, -1);
                        found++;
                }
                cpuset_free(cpus);
        }
        json_decref(threads);
        return found == n ? 0 : -EINVAL;
}

/* The placement of vm from its sources (ledger_rebuild_vcpu_map; the one used in *source): 0, -EINVAL (why),
 * -ENOMEM. */
static int rebuilt_placement(const struct topology *t, const char *proc_root, const struct vm *vm,
                             const struct cpuset *descr_cpus, struct placement **ret, int *source, char *why,
                             size_t len) {
        unsigned n = vm_vcpu_count(vm);
        if (n == 0 || n > PLACEMENT_MAX_VCPUS)
                return errmsg_invalid(why, len, "%u vCPUs", n);
        _cleanup_free_ int *threads = calloc(n, sizeof *threads), *map = calloc(n, sizeof *map);
        if (!threads || !map)
                return -ENOMEM;
        int r = vm->running ? threads_map(proc_root, vm->pid, n, threads) : -EINVAL;
        if (r == -ENOMEM)
                return r;
        r = *source = ledger_rebuild_vcpu_map(t, vm, r == 0 ? threads : NULL, descr_cpus, map, why, len);
        return r < 0 ? r : ledger_rebuild_placement(t, vm, map, ret, why, len);
}

/* Whether p may be added to l: 0, or -EEXIST / -ENOSPC with why. */
static int check_fits(const struct ledger *l, const struct topology *t, const struct placement *p, char *why,
                      size_t len) {
        int other = ledger_rebuild_overlap(l, p);
        _cleanup_free_ char *cpus = cpuset_format(p->cpus);
        if (other) {
                snprintf(why, len, "its CPUs %s overlap those of VM %d, rebuilt before it (pinned by hand?)",
                         cpus ? cpus : "?", other);
                return -EEXIST;
        }
        if (!ledger_rebuild_memory_fits(l, t, p)) {
                snprintf(why, len, "its memory, with that of the VMs rebuilt before it, exceeds a NUMA node's");
                return -ENOSPC;
        }
        return 0;
}

static void log_rebuilt(const struct reservation *r, int source) {
        static const char *const from[] = { [LEDGER_REBUILD_THREADS] = "its vCPU threads",
                                            [LEDGER_REBUILD_DESCRIPTION] = "its description",
                                            [LEDGER_REBUILD_AFFINITY] = "its affinity" };
        _cleanup_free_ char *cpus = cpuset_format(r->placement->cpus);
        log_info("reservation %s of VM %d (%s) rebuilt: CPUs %s from %s", r->id, r->vmid, r->owner, cpus ? cpus : "?",
                 source >= 0 && source <= LEDGER_REBUILD_AFFINITY ? from[source] : "?");
}

/* The bound reservation of one VM, added to l: 1 added, 0 not the coordinator's or skipped, -ENOMEM. */
static int rebuild_one(struct ledger *l, const struct topology *t, const char *config_dir, const char *proc_root,
                       const struct vm *vm, int64_t now) {
        char path[4096], why[512] = "";
        _cleanup_free_ char *text = NULL;
        struct ledger_rebuild_descr d = { .cpus = NULL };
        snprintf(path, sizeof path, "%s/%d.conf", config_dir, vm->vmid);
        if (vm->template_vm || fileio_read(path, CONF_MAX_BYTES, &text, NULL) < 0)
                return 0;
        int r = ledger_rebuild_describe(text, &d);
        if (r < 0)
                return r == -ENOMEM ? r : 0;
        struct placement *p = NULL;
        int source = -1;
        r = rebuilt_placement(t, proc_root, vm, d.cpus, &p, &source, why, sizeof why);
        if (r == 0)
                r = check_fits(l, t, p, why, sizeof why);
        struct placement_request req = ledger_rebuild_request(vm);
        if (r == 0)
                r = ledger_add_bound(l, d.id, d.owner, vm->vmid, &req, p, now);
        if (r < 0)
                placement_free(p);
        if (r < 0 && r != -ENOMEM)
                log_error("reservation of VM %d (%s) not rebuilt: %s", vm->vmid, d.owner, *why ? why : strerror(-r));
        if (r == 0)
                log_rebuilt(ledger_find_vmid(l, vm->vmid), source);
        ledger_rebuild_descr_done(&d);
        return r == -ENOMEM ? r : r == 0;
}

int ledger_rebuild(struct ledger *l, const struct topology *t, const char *config_dir, const char *run_dir,
                   const char *proc_root, int64_t now) {
        struct inventory *inv = NULL;
        int r = inventory_load(config_dir, run_dir, &inv), n = 0;
        for (size_t i = 0; r >= 0 && i < inv->n_vms; i++) /* in VMID order: the lower VMID keeps shared CPUs */
                if ((r = rebuild_one(l, t, config_dir, proc_root, inv->vms[i], now)) > 0)
                        n++;
        inventory_free(inv);
        return r < 0 ? r : n;
}
