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
#define DESCR_LINE_MAX 512

static int hexval(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
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

int ledger_rebuild_owner(const char *conf_text, char *owner, size_t len) {
        char line[DESCR_LINE_MAX], name[DESCR_LINE_MAX] = "", uid[DESCR_LINE_MAX] = "";
        const char *v;
        for (const char *s = conf_text; s && *s == '#';) {
                bool first = s == conf_text;
                s = descr_line(s, line, sizeof line);
                if (first && !(v = line_value(line, LEDGER_REBUILD_MARK)))
                        return -ENOENT;
                if (first)
                        snprintf(name, sizeof name, "%s", v);
                else if (!*uid && (v = line_value(line, "uid")))
                        snprintf(uid, sizeof uid, "%s", v);
        }
        if (!*name || !*uid || strpbrk(uid, "/ ") || strpbrk(name, "/ "))
                return -ENOENT;
        int n = snprintf(owner, len, "nodeclaim/%s/%s", uid, name);
        return n < 0 || (size_t)n >= len ? -ENOENT : 0;
}

struct placement_request ledger_rebuild_request(const struct vm *vm) {
        uint64_t kib = strcmp(vm->hugepages, "2") == 0 ? 2048 : strcmp(vm->hugepages, "1024") == 0 ? 1048576 : 0;
        return (struct placement_request){ vm_vcpu_count(vm), vm->memory_mib * PLACEMENT_MIB, kib };
}

/* The OS id of the NUMA node holding cpu, or -1. */
static int cpu_node(const struct topology *t, int cpu) {
        for (size_t i = 0; cpu >= 0 && i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].cpus && cpuset_test(t->numa_nodes[i].cpus, (unsigned)cpu))
                        return t->numa_nodes[i].id;
        return -1;
}

/* The config's affinity as a vCPU map: CPUs by node, then by id. Needs exactly one CPU per vCPU. */
static int affinity_map(const struct topology *t, const struct vm *vm, int *map, unsigned n, char *why, size_t len) {
        if (!vm->affinity || cpuset_count(vm->affinity) != n)
                return errmsg_invalid(why, len, "not running, and its affinity does not give one CPU per vCPU");
        unsigned k = 0;
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                for (int c = -1; t->numa_nodes[i].cpus && (c = cpuset_next(vm->affinity, c)) >= 0;)
                        if (cpuset_test(t->numa_nodes[i].cpus, (unsigned)c) && cpu_node(t, c) == t->numa_nodes[i].id)
                                map[k++] = c;
        return k == n ? 0 : errmsg_invalid(why, len, "its affinity has CPUs outside the host's NUMA nodes");
}

/* MiB of guest node g (host node `node`, n vCPUs): the config's numaN memory when numaN names that one host node
 * and there are as many numaN as guest nodes; else memory split by vCPUs, the rest on the last node. */
static uint64_t node_mib(const struct vm *vm, size_t g, size_t n_nodes, int node, unsigned n, uint64_t *left) {
        const struct vm_numa *v = &vm->numa_nodes[g];
        bool same = vm->numa_valid && g < INVENTORY_MAX_NUMA && v->present && v->hostnodes &&
                    cpuset_count(v->hostnodes) == 1 && cpuset_test(v->hostnodes, (unsigned)node) &&
                    (n_nodes == INVENTORY_MAX_NUMA || !vm->numa_nodes[n_nodes].present);
        uint64_t mib = g + 1 == n_nodes ? *left : same ? v->memory_mib : vm->memory_mib * n / vm_vcpu_count(vm);
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
        _cleanup_free_ int *map = calloc(n, sizeof *map);
        if (!map)
                return -ENOMEM;
        int r = vcpu_map ? (memcpy(map, vcpu_map, n * sizeof *map), 0) : affinity_map(t, vm, map, n, why, len);
        if (r < 0)
                return r;
        json_t *doc = placement_doc(t, vm, map, n);
        if (!doc)
                return -ENOMEM;
        r = placement_from_json(t, doc, ret, why, len);
        json_decref(doc);
        return r;
}

/* ---- reading the host ---- */

/* vcpu_map from the vCPU threads of pid: each must be pinned to exactly one CPU. 0, -EINVAL (why), -ENOMEM. */
static int threads_map(const char *proc_root, int pid, unsigned n, int *map, char *why, size_t len) {
        json_t *threads = NULL, *e;
        size_t i;
        int r = pinning_proc_read(proc_root, pid, &threads);
        if (r < 0)
                return r == -ENOMEM ? r : errmsg_invalid(why, len, "cannot read its QEMU threads: %s", strerror(-r));
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
        return found == n ? 0 : errmsg_invalid(why, len, "%u of its %u vCPU threads are pinned to one CPU", found, n);
}

/* The bound reservation of one VM, added to l: 1 added, 0 not the coordinator's or skipped, -ENOMEM. */
static int rebuild_one(struct ledger *l, const struct topology *t, const char *config_dir, const char *proc_root,
                       const struct vm *vm, int64_t now) {
        char path[4096], owner[LEDGER_OWNER_MAX + 1], why[256] = "";
        _cleanup_free_ char *text = NULL;
        snprintf(path, sizeof path, "%s/%d.conf", config_dir, vm->vmid);
        if (vm->template_vm || fileio_read(path, CONF_MAX_BYTES, &text, NULL) < 0 ||
            ledger_rebuild_owner(text, owner, sizeof owner) < 0)
                return 0;
        unsigned n = vm_vcpu_count(vm);
        _cleanup_free_ int *map = vm->running ? calloc(n ? n : 1, sizeof *map) : NULL;
        if (vm->running && !map)
                return -ENOMEM;
        int r = vm->running ? threads_map(proc_root, vm->pid, n, map, why, sizeof why) : 0;
        struct placement *p = NULL;
        if (r == 0)
                r = ledger_rebuild_placement(t, vm, map, &p, why, sizeof why);
        struct placement_request req = ledger_rebuild_request(vm);
        if (r == 0 && (r = ledger_add_bound(l, owner, vm->vmid, &req, p, now)) < 0)
                placement_free(p);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                log_error("reservation of VM %d (%s) not rebuilt: %s", vm->vmid, owner, *why ? why : strerror(-r));
        return r == 0;
}

int ledger_rebuild(struct ledger *l, const struct topology *t, const char *config_dir, const char *run_dir,
                   const char *proc_root, int64_t now) {
        struct inventory *inv = NULL;
        int r = inventory_load(config_dir, run_dir, &inv), n = 0;
        for (size_t i = 0; r >= 0 && i < inv->n_vms; i++)
                if ((r = rebuild_one(l, t, config_dir, proc_root, inv->vms[i], now)) > 0)
                        n++;
        inventory_free(inv);
        return r < 0 ? r : n;
}
