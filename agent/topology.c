/* topology: the host's CPU and memory layout; hwloc gives the structure, sysfs/libnuma under a root the live counts. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "topology.h"

#include <dirent.h>
#include <errno.h>
#include <hwloc.h>
#include <inttypes.h>
#include <limits.h>
#include <numa.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "jsonutil.h"

/*
 * Reading rules (also in docs/agent.md):
 *
 * - Structure (packages, NUMA nodes, L3 caches, cores and their SMT threads) comes from hwloc only.
 *   hwloc is loaded with HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED: a Proxmox host hands CPUs to VMs
 *   that the agent itself may not run on (systemd CPUAffinity=, a cgroup cpuset), so the agent must
 *   see the whole machine, not the view of its own cgroup. What hwloc would have allowed the agent
 *   is kept in topology.allowed, for information only.
 * - With an fsroot, hwloc 2.x has no setter, so HWLOC_FSROOT is set around hwloc_topology_load()
 *   and restored afterwards (topology_load is therefore not thread-safe). The x86 CPUID backend is
 *   blacklisted, or hwloc would merge the CPUID of the machine running us into the captured tree.
 * - online = <root>/sys/devices/system/cpu/online intersected with hwloc's CPUs (missing file: all of
 *   hwloc's CPUs). isolated = <root>/sys/devices/system/cpu/isolated (missing file: empty).
 * - Per NUMA node: MemFree from <root>/sys/devices/system/node/nodeN/meminfo (parsed here; libnuma
 *   cannot read another root), hugepages from nodeN/hugepages/hugepages-<size>kB/{nr,free}_hugepages.
 *   On this machine libnuma's numa_node_size64() gives free memory when numa_available() >= 0.
 *   A node without meminfo reports memory_free_bytes = 0 (unknown, never more than we know). A kernel
 *   without a node directory (no CONFIG_NUMA) has one node: /proc/meminfo and /sys/kernel/mm/hugepages.
 * - memory_bytes is hwloc's local_memory (= MemTotal of nodeN/meminfo, reserved hugepages included).
 * - hwloc XML has no sysfs: every CPU is online, none isolated, hugepage totals come from hwloc's
 *   per-node page_types (the first entry is the base page and is skipped) and nothing is known to
 *   be in use, so hugepage free = total and memory_free_bytes = memory_bytes.
 * - NUMA node cpus are hwloc's locality sets, so they can overlap (a memory-only NVM node shares the
 *   CPUs of the DRAM nodes in its package). cores[].numa_node gives each core exactly one node.
 */

#define SYSFS_CPU "/sys/devices/system/cpu"
#define SYSFS_NODE "/sys/devices/system/node"
#define SYSFS_HUGEPAGES_GLOBAL "/sys/kernel/mm/hugepages"
#define PROC_MEMINFO "/proc/meminfo"
#define KIB 1024ULL

/* ---------- small helpers ---------- */

static int set_err(char *err, size_t errlen, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int set_err(char *err, size_t errlen, int r, const char *fmt, ...) {
        if (err && errlen > 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return r;
}

static bool root_is_slash(const char *root) {
        return !root || !*root || strcmp(root, "/") == 0;
}

static int path_under(char *buf, size_t size, const char *root, const char *path) {
        int n = snprintf(buf, size, "%s%s", root_is_slash(root) ? "" : root, path);
        return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

static int parse_u64(const char *text, uint64_t *ret_value) {
        char *end;
        while (*text == ' ' || *text == '\t')
                text++;
        if (*text < '0' || *text > '9')
                return -EINVAL;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        *ret_value = v;
        return 0;
}

static int read_u64_under(const char *root, const char *path, uint64_t *ret_value) {
        char *text;
        int r = fileio_read_under(root, path, &text);
        if (r < 0)
                return r;
        r = parse_u64(text, ret_value);
        free(text);
        return r;
}

static int read_cpulist_under(const char *root, const char *path, struct cpuset **ret_set) {
        char *text;
        int r = fileio_read_under(root, path, &text);
        if (r < 0)
                return r;
        r = cpuset_parse(text, ret_set);
        free(text);
        return r;
}

static int first_cpu(const struct cpuset *s) {
        int c = cpuset_next(s, -1);
        return c < 0 ? INT_MAX : c; /* empty sets sort last */
}

/* ---------- pure parsers ---------- */

/* One meminfo line: optional "Node <n> " prefix, then "<key>: <value> kB". */
static int meminfo_line_value(const char *line, const char *key, uint64_t *ret_bytes) {
        if (strncmp(line, "Node ", 5) == 0) {
                line += 5;
                line += strspn(line, "0123456789");
                line += strspn(line, " ");
        }
        size_t klen = strlen(key);
        if (strncmp(line, key, klen) != 0 || line[klen] != ':')
                return -ENOENT;
        uint64_t kib;
        int r = parse_u64(line + klen + 1, &kib);
        if (r < 0)
                return r;
        if (kib > UINT64_MAX / KIB)
                return -ERANGE;
        *ret_bytes = kib * KIB;
        return 0;
}

static int meminfo_find(const char *text, const char *key, uint64_t *ret_bytes) {
        for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
                int r = meminfo_line_value(line, key, ret_bytes);
                if (r != -ENOENT)
                        return r < 0 ? -EINVAL : 0;
        }
        return -EINVAL;
}

int topology_parse_meminfo(const char *text, uint64_t *ret_total_bytes, uint64_t *ret_free_bytes) {
        uint64_t total, mem_free;
        int r = meminfo_find(text, "MemTotal", &total);
        if (r < 0)
                return r;
        r = meminfo_find(text, "MemFree", &mem_free);
        if (r < 0)
                return r;
        *ret_total_bytes = total;
        *ret_free_bytes = mem_free;
        return 0;
}

/* "<prefix><digits><suffix>" with at least one digit and nothing else. */
static int parse_wrapped_u64(const char *name, const char *prefix, const char *suffix, uint64_t *ret_value) {
        size_t plen = strlen(prefix), slen = strlen(suffix), len = strlen(name);
        if (len <= plen + slen || strncmp(name, prefix, plen) != 0 || strcmp(name + len - slen, suffix) != 0)
                return -EINVAL;
        size_t digits = strspn(name + plen, "0123456789");
        if (digits != len - plen - slen || digits > 9)
                return -EINVAL;
        uint64_t v;
        int r = parse_u64(name + plen, &v);
        if (r < 0)
                return r;
        *ret_value = v;
        return 0;
}

int topology_parse_hugepage_dir(const char *name, uint64_t *ret_page_kib) {
        uint64_t kib;
        int r = parse_wrapped_u64(name, "hugepages-", "kB", &kib);
        if (r < 0 || kib == 0)
                return -EINVAL;
        *ret_page_kib = kib;
        return 0;
}

int topology_parse_node_dir(const char *name, int *ret_id) {
        uint64_t id;
        int r = parse_wrapped_u64(name, "node", "", &id);
        if (r < 0 || id > INT_MAX)
                return -EINVAL;
        *ret_id = (int)id;
        return 0;
}

/* ---------- hwloc loading ---------- */

static int check_source(const struct topology_source *src, char *err, size_t errlen) {
        struct stat st;
        char path[PATH_MAX];
        if (src->fsroot && src->xml_file)
                return set_err(err, errlen, -EINVAL, "--fsroot and --topology-xml are mutually exclusive");
        if (src->xml_file && access(src->xml_file, R_OK) < 0) {
                int r = -errno;
                return set_err(err, errlen, r, "topology XML %s: %s", src->xml_file, strerror(-r));
        }
        if (!src->fsroot)
                return 0;
        if (path_under(path, sizeof path, src->fsroot, SYSFS_CPU) < 0)
                return set_err(err, errlen, -ENAMETOOLONG, "fsroot %s: path too long", src->fsroot);
        if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                return set_err(err, errlen, -ENOENT,
                               "fsroot %s: no sys/devices/system/cpu below it (not a gathered /sys tree, or the "
                               "parent of its top directory?)", src->fsroot);
        return 0;
}

/* hwloc 2.x reads the fsroot only from the environment: set it for this load and restore it. */
static int load_with_fsroot(hwloc_topology_t topo, const char *fsroot) {
        const char *old = getenv("HWLOC_FSROOT");
        char *saved = old ? strdup(old) : NULL;
        if (old && !saved)
                return -ENOMEM;
        if (fsroot && setenv("HWLOC_FSROOT", fsroot, 1) < 0) {
                free(saved);
                return -errno;
        }
        errno = 0;
        int r = hwloc_topology_load(topo) < 0 ? -(errno ? errno : EINVAL) : 0;
        if (fsroot && saved)
                setenv("HWLOC_FSROOT", saved, 1);
        else if (fsroot)
                unsetenv("HWLOC_FSROOT");
        free(saved);
        return r;
}

static int configure_hwloc(hwloc_topology_t topo, const struct topology_source *src) {
        if (hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) < 0)
                return -errno;
        if (src->xml_file && hwloc_topology_set_xml(topo, src->xml_file) < 0)
                return -errno;
        /* Without this, hwloc runs CPUID on the machine running us and merges it into the tree. */
        if (src->fsroot && hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86") < 0)
                return -errno;
        return 0;
}

static int open_hwloc(const struct topology_source *src, hwloc_topology_t *ret_topo, char *err, size_t errlen) {
        hwloc_topology_t topo;
        if (hwloc_topology_init(&topo) < 0)
                return set_err(err, errlen, -ENOMEM, "hwloc: cannot initialise a topology");
        int r = configure_hwloc(topo, src);
        if (r == 0)
                r = load_with_fsroot(topo, src->fsroot);
        if (r < 0) {
                hwloc_topology_destroy(topo);
                const char *what = src->xml_file ? src->xml_file : src->fsroot ? src->fsroot : "this machine";
                return set_err(err, errlen, r, "hwloc could not load the topology of %s: %s", what, strerror(-r));
        }
        *ret_topo = topo;
        return 0;
}

/* ---------- hwloc objects -> our structs ---------- */

static int cpuset_from_hwloc(hwloc_const_bitmap_t b, struct cpuset **ret_set) {
        if (b && hwloc_bitmap_weight(b) < 0)
                return -EINVAL; /* infinite set: not a CPU list */
        struct cpuset *s = cpuset_new();
        if (!s)
                return -ENOMEM;
        for (int i = b ? hwloc_bitmap_first(b) : -1; i >= 0; i = hwloc_bitmap_next(b, i)) {
                int r = cpuset_set(s, (unsigned)i);
                if (r < 0) {
                        cpuset_free(s);
                        return r;
                }
        }
        *ret_set = s;
        return 0;
}

/* An info string without surrounding blanks: CPUID pads the AMD model name with spaces. */
static int dup_info(hwloc_obj_t o, const char *name, char **ret_value) {
        const char *v = o ? hwloc_obj_get_info_by_name(o, name) : NULL;
        v = v ? v + strspn(v, " \t") : "";
        size_t len = strlen(v);
        while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
                len--;
        char *copy = strndup(v, len);
        if (!copy)
                return -ENOMEM;
        *ret_value = copy;
        return 0;
}

static int cmp_package(const void *a, const void *b) {
        const struct topology_package *x = a, *y = b;
        return (x->id > y->id) - (x->id < y->id);
}

static int cmp_numa(const void *a, const void *b) {
        const struct topology_numa_node *x = a, *y = b;
        return (x->id > y->id) - (x->id < y->id);
}

static int cmp_l3(const void *a, const void *b) {
        int x = first_cpu(((const struct topology_l3 *)a)->cpus), y = first_cpu(((const struct topology_l3 *)b)->cpus);
        return (x > y) - (x < y);
}

static int cmp_core(const void *a, const void *b) {
        int x = first_cpu(((const struct topology_core *)a)->cpus), y = first_cpu(((const struct topology_core *)b)->cpus);
        return (x > y) - (x < y);
}

static int os_index_or(hwloc_obj_t o, int fallback) {
        return o->os_index == HWLOC_UNKNOWN_INDEX ? fallback : (int)o->os_index;
}

static int package_index(const struct topology *t, int id) {
        for (size_t i = 0; i < t->n_packages; i++)
                if (t->packages[i].id == id)
                        return (int)i;
        return -1;
}

/* A machine without Package objects (some VMs, some ARM boards) is one package holding every CPU. */
static int add_whole_machine_package(struct topology *t, hwloc_topology_t topo) {
        t->packages = calloc(1, sizeof *t->packages);
        if (!t->packages)
                return -ENOMEM;
        t->n_packages = 1;
        int r = dup_info(hwloc_get_root_obj(topo), "CPUModel", &t->packages[0].cpu_model);
        if (r < 0)
                return r;
        t->packages[0].cpus = cpuset_dup(t->cpus);
        return t->packages[0].cpus ? 0 : -ENOMEM;
}

static int add_packages(struct topology *t, hwloc_topology_t topo) {
        int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
        if (n <= 0)
                return add_whole_machine_package(t, topo);
        t->packages = calloc((size_t)n, sizeof *t->packages);
        if (!t->packages)
                return -ENOMEM;
        t->n_packages = (size_t)n;
        for (int i = 0; i < n; i++) {
                hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, (unsigned)i);
                struct topology_package *p = &t->packages[i];
                p->id = os_index_or(o, i);
                int r = dup_info(o, "CPUModel", &p->cpu_model);
                if (r == 0)
                        r = cpuset_from_hwloc(o->cpuset, &p->cpus);
                if (r < 0)
                        return r;
        }
        qsort(t->packages, t->n_packages, sizeof *t->packages, cmp_package);
        return 0;
}

/* hwloc's page_types[0] is the base page; the others are hugepage sizes. Only used for XML sources. */
static int hugepages_from_hwloc(hwloc_obj_t o, struct topology_numa_node *nn) {
        unsigned n = o->attr->numanode.page_types_len;
        if (n <= 1)
                return 0;
        nn->hugepages = calloc(n - 1, sizeof *nn->hugepages);
        if (!nn->hugepages)
                return -ENOMEM;
        for (unsigned i = 1; i < n; i++) {
                struct topology_hugepages *h = &nn->hugepages[nn->n_hugepages++];
                h->page_kib = o->attr->numanode.page_types[i].size / KIB;
                h->total = o->attr->numanode.page_types[i].count;
                h->free = h->total; /* XML: nothing known to be in use */
        }
        return 0;
}

static int fill_numa_node(struct topology *t, hwloc_topology_t topo, hwloc_obj_t o, struct topology_numa_node *nn) {
        nn->id = os_index_or(o, (int)o->logical_index);
        nn->memory_bytes = o->attr->numanode.local_memory;
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o);
        nn->package = pkg ? package_index(t, os_index_or(pkg, (int)pkg->logical_index)) : -1;
        if (o->subtype && !(nn->subtype = strdup(o->subtype)))
                return -ENOMEM;
        int r = cpuset_from_hwloc(o->cpuset, &nn->cpus);
        if (r < 0 || t->kind != TOPOLOGY_KIND_XML)
                return r;
        nn->memory_free_bytes = nn->memory_bytes;
        return hugepages_from_hwloc(o, nn);
}

static int add_numa_nodes(struct topology *t, hwloc_topology_t topo) {
        int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
        if (n <= 0)
                return 0;
        t->numa_nodes = calloc((size_t)n, sizeof *t->numa_nodes);
        if (!t->numa_nodes)
                return -ENOMEM;
        t->n_numa_nodes = (size_t)n;
        for (int i = 0; i < n; i++) {
                hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
                int r = fill_numa_node(t, topo, o, &t->numa_nodes[i]);
                if (r < 0)
                        return r;
        }
        qsort(t->numa_nodes, t->n_numa_nodes, sizeof *t->numa_nodes, cmp_numa);
        return 0;
}

static int add_l3_caches(struct topology *t, hwloc_topology_t topo) {
        int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE);
        if (n <= 0)
                return 0;
        t->l3_caches = calloc((size_t)n, sizeof *t->l3_caches);
        if (!t->l3_caches)
                return -ENOMEM;
        t->n_l3_caches = (size_t)n;
        for (int i = 0; i < n; i++) {
                hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_L3CACHE, (unsigned)i);
                t->l3_caches[i].size_bytes = o->attr->cache.size;
                int r = cpuset_from_hwloc(o->cpuset, &t->l3_caches[i].cpus);
                if (r < 0)
                        return r;
        }
        qsort(t->l3_caches, t->n_l3_caches, sizeof *t->l3_caches, cmp_l3);
        return 0;
}

static int l3_index(const struct topology *t, const struct cpuset *cpus) {
        for (size_t i = 0; i < t->n_l3_caches; i++)
                if (cpuset_is_subset(cpus, t->l3_caches[i].cpus))
                        return (int)i;
        return -1;
}

/* Is a a better home for a core than b? Nodes with memory first, then plain DRAM over NVM and
 * friends, then the smallest (most local) CPU set; ties keep the lower id. */
static bool numa_more_local(const struct topology_numa_node *a, const struct topology_numa_node *b) {
        bool am = a->memory_bytes > 0, bm = b->memory_bytes > 0;
        if (am != bm)
                return am;
        if (!a->subtype != !b->subtype)
                return !a->subtype;
        return cpuset_count(a->cpus) < cpuset_count(b->cpus);
}

static int core_numa_index(const struct topology *t, const struct cpuset *cpus) {
        int best = -1;
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                const struct topology_numa_node *n = &t->numa_nodes[i];
                if (!cpuset_is_subset(cpus, n->cpus))
                        continue;
                if (best < 0 || numa_more_local(n, &t->numa_nodes[best]))
                        best = (int)i;
        }
        return best;
}

static int fill_core(struct topology *t, hwloc_topology_t topo, hwloc_obj_t o, struct topology_core *c) {
        int r = cpuset_from_hwloc(o->cpuset, &c->cpus);
        if (r < 0)
                return r;
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o);
        c->package = pkg ? package_index(t, os_index_or(pkg, (int)pkg->logical_index)) : (t->n_packages == 1 ? 0 : -1);
        c->l3 = l3_index(t, c->cpus);
        c->numa_node = core_numa_index(t, c->cpus);
        return 0;
}

/* Cores with their SMT threads; a topology without Core objects gets one core per PU. */
static int add_cores(struct topology *t, hwloc_topology_t topo) {
        hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        int n = hwloc_get_nbobjs_by_type(topo, type);
        if (n <= 0)
                return -ENODEV;
        t->cores = calloc((size_t)n, sizeof *t->cores);
        if (!t->cores)
                return -ENOMEM;
        t->n_cores = (size_t)n;
        for (int i = 0; i < n; i++) {
                int r = fill_core(t, topo, hwloc_get_obj_by_type(topo, type, (unsigned)i), &t->cores[i]);
                if (r < 0)
                        return r;
        }
        qsort(t->cores, t->n_cores, sizeof *t->cores, cmp_core);
        return 0;
}

/* Order matters: nodes and cores refer to the sorted packages, cores to the sorted nodes and L3s. */
static int build_from_hwloc(struct topology *t, hwloc_topology_t topo) {
        int r = cpuset_from_hwloc(hwloc_topology_get_topology_cpuset(topo), &t->cpus);
        if (r == 0)
                r = cpuset_from_hwloc(hwloc_topology_get_allowed_cpuset(topo), &t->allowed);
        if (r == 0)
                r = add_packages(t, topo);
        if (r == 0)
                r = add_numa_nodes(t, topo);
        if (r == 0)
                r = add_l3_caches(t, topo);
        if (r == 0)
                r = add_cores(t, topo);
        if (r < 0)
                return r;
        t->cpu_model = strdup(t->packages[0].cpu_model);
        return t->cpu_model ? 0 : -ENOMEM;
}

/* ---------- sysfs: online / isolated CPUs ---------- */

static int read_cpu_state(struct topology *t, const char *root, char *err, size_t errlen) {
        struct cpuset *online = NULL, *isolated = NULL;
        int r = t->kind == TOPOLOGY_KIND_XML ? -ENOENT : read_cpulist_under(root, SYSFS_CPU "/online", &online);
        if (r == -ENOENT)
                r = (online = cpuset_dup(t->cpus)) ? 0 : -ENOMEM;
        if (r < 0)
                return set_err(err, errlen, r, "%s" SYSFS_CPU "/online: %s", root_is_slash(root) ? "" : root, strerror(-r));
        cpuset_and(online, t->cpus);
        r = t->kind == TOPOLOGY_KIND_XML ? -ENOENT : read_cpulist_under(root, SYSFS_CPU "/isolated", &isolated);
        if (r == -ENOENT)
                r = (isolated = cpuset_new()) ? 0 : -ENOMEM;
        if (r < 0) {
                cpuset_free(online);
                return set_err(err, errlen, r, "%s" SYSFS_CPU "/isolated: %s", root_is_slash(root) ? "" : root,
                               strerror(-r));
        }
        t->online = online;
        t->isolated = isolated;
        return 0;
}

/* ---------- sysfs / libnuma: free memory and hugepages ---------- */

static int cmp_hugepages(const void *a, const void *b) {
        const struct topology_hugepages *x = a, *y = b;
        return (x->page_kib > y->page_kib) - (x->page_kib < y->page_kib);
}

static int read_hugepage_size(const char *root, const char *dir, const char *name, struct topology_hugepages *h) {
        char path[PATH_MAX];
        int n = snprintf(path, sizeof path, "%s/%s/nr_hugepages", dir, name);
        if (n < 0 || (size_t)n >= sizeof path)
                return -ENAMETOOLONG;
        int r = read_u64_under(root, path, &h->total);
        if (r < 0)
                return r;
        snprintf(path, sizeof path, "%s/%s/free_hugepages", dir, name);
        r = read_u64_under(root, path, &h->free);
        if (r == -ENOENT) /* kernels always have it; a partial snapshot may not: assume none in use */
                h->free = h->total;
        return r == -ENOENT ? 0 : r;
}

/* Every hugepages-<size>kB directory in <root><dir>, sorted by page size. A missing dir = no hugepages. */
static int read_hugepages(const char *root, const char *dir, struct topology_hugepages **ret_pages, size_t *ret_n) {
        char path[PATH_MAX];
        int r = path_under(path, sizeof path, root, dir);
        if (r < 0)
                return r;
        DIR *d = opendir(path);
        if (!d && errno != ENOENT)
                return -errno;
        struct topology_hugepages *pages = NULL;
        size_t n = 0;
        for (struct dirent *de; d && (de = readdir(d));) {
                uint64_t kib;
                if (topology_parse_hugepage_dir(de->d_name, &kib) < 0)
                        continue;
                struct topology_hugepages *grown = realloc(pages, (n + 1) * sizeof *pages);
                if (!grown) {
                        r = -ENOMEM;
                        break;
                }
                pages = grown;
                pages[n] = (struct topology_hugepages){ .page_kib = kib };
                r = read_hugepage_size(root, dir, de->d_name, &pages[n++]);
                if (r < 0)
                        break;
        }
        if (d)
                closedir(d);
        if (r < 0) {
                free(pages);
                return r;
        }
        qsort(pages, n, sizeof *pages, cmp_hugepages);
        *ret_pages = pages;
        *ret_n = n;
        return 0;
}

/* MemFree of one meminfo file (in bytes); -ENOENT when the file is missing. */
static int read_meminfo_free(const char *root, const char *path, uint64_t *ret_free) {
        char *text;
        int r = fileio_read_under(root, path, &text);
        if (r < 0)
                return r;
        uint64_t total, mem_free;
        r = topology_parse_meminfo(text, &total, &mem_free);
        free(text);
        if (r < 0)
                return r;
        *ret_free = mem_free;
        return 0;
}

/* On this machine libnuma knows the live free memory of a node; elsewhere keep the sysfs value. */
static void free_memory_from_libnuma(struct topology_numa_node *nn) {
        long long mem_free;
        if (numa_available() < 0)
                return;
        if (numa_node_size64(nn->id, &mem_free) >= 0 && mem_free >= 0)
                nn->memory_free_bytes = (uint64_t)mem_free;
}

static int refresh_from_files(struct topology_numa_node *nn, const char *root, const char *meminfo,
                              const char *hugepage_dir, bool live) {
        uint64_t mem_free = 0;
        int r = read_meminfo_free(root, meminfo, &mem_free);
        if (r < 0 && r != -ENOENT)
                return r;
        struct topology_hugepages *pages;
        size_t n;
        r = read_hugepages(root, hugepage_dir, &pages, &n);
        if (r < 0)
                return r;
        nn->memory_free_bytes = mem_free;
        free(nn->hugepages);
        nn->hugepages = pages;
        nn->n_hugepages = n;
        if (live)
                free_memory_from_libnuma(nn);
        return 0;
}

static int refresh_node(struct topology_numa_node *nn, const char *root, bool live) {
        char meminfo[PATH_MAX], hugepages[PATH_MAX];
        int n = snprintf(meminfo, sizeof meminfo, SYSFS_NODE "/node%d/meminfo", nn->id);
        int m = snprintf(hugepages, sizeof hugepages, SYSFS_NODE "/node%d/hugepages", nn->id);
        if (n < 0 || m < 0 || (size_t)n >= sizeof meminfo || (size_t)m >= sizeof hugepages)
                return -ENAMETOOLONG;
        return refresh_from_files(nn, root, meminfo, hugepages, live);
}

/* Walk <root>/sys/devices/system/node/node*: ids are sparse and hwloc may know fewer nodes. */
static int refresh_node_dirs(struct topology *t, DIR *d, const char *root, bool live) {
        for (struct dirent *de; (de = readdir(d));) {
                int id, i;
                if (topology_parse_node_dir(de->d_name, &id) < 0 || (i = topology_numa_index(t, id)) < 0)
                        continue;
                int r = refresh_node(&t->numa_nodes[i], root, live);
                if (r < 0)
                        return r;
        }
        return 0;
}

int topology_refresh_memory(struct topology *t, const struct topology_source *src) {
        if (t->kind == TOPOLOGY_KIND_XML)
                return 0; /* no sysfs behind an XML: the load-time page_types stay */
        const char *root = t->kind == TOPOLOGY_KIND_FSROOT && src ? src->fsroot : NULL;
        bool live = t->kind == TOPOLOGY_KIND_HOST;
        char path[PATH_MAX];
        int r = path_under(path, sizeof path, root, SYSFS_NODE);
        if (r < 0)
                return r;
        DIR *d = opendir(path);
        if (d) {
                r = refresh_node_dirs(t, d, root, live);
                closedir(d);
                return r;
        }
        if (errno != ENOENT || t->n_numa_nodes != 1)
                return errno == ENOENT ? 0 : -errno;
        /* Kernel without NUMA support: the one node is the whole machine. */
        return refresh_from_files(&t->numa_nodes[0], root, PROC_MEMINFO, SYSFS_HUGEPAGES_GLOBAL, live);
}

/* ---------- public API ---------- */

void topology_free(struct topology *t) {
        if (!t)
                return;
        for (size_t i = 0; i < t->n_packages; i++) {
                free(t->packages[i].cpu_model);
                cpuset_free(t->packages[i].cpus);
        }
        for (size_t i = 0; i < t->n_numa_nodes; i++) {
                cpuset_free(t->numa_nodes[i].cpus);
                free(t->numa_nodes[i].subtype);
                free(t->numa_nodes[i].hugepages);
        }
        for (size_t i = 0; i < t->n_l3_caches; i++)
                cpuset_free(t->l3_caches[i].cpus);
        for (size_t i = 0; i < t->n_cores; i++)
                cpuset_free(t->cores[i].cpus);
        free(t->packages);
        free(t->numa_nodes);
        free(t->l3_caches);
        free(t->cores);
        cpuset_free(t->cpus);
        cpuset_free(t->online);
        cpuset_free(t->isolated);
        cpuset_free(t->allowed);
        free(t->cpu_model);
        free(t);
}

static enum topology_kind source_kind(const struct topology_source *src) {
        return src->xml_file ? TOPOLOGY_KIND_XML : src->fsroot ? TOPOLOGY_KIND_FSROOT : TOPOLOGY_KIND_HOST;
}

static int load_live_counts(struct topology *t, const struct topology_source *src, char *err, size_t errlen) {
        int r = read_cpu_state(t, src->fsroot, err, errlen);
        if (r < 0)
                return r;
        r = topology_refresh_memory(t, src);
        if (r < 0)
                return set_err(err, errlen, r, "reading per-node memory under %s: %s",
                               root_is_slash(src->fsroot) ? "/" : src->fsroot, strerror(-r));
        return 0;
}

int topology_load(const struct topology_source *src, struct topology **ret_topology, char *err, size_t errlen) {
        static const struct topology_source this_machine = { 0 };
        hwloc_topology_t topo = NULL;
        src = src ? src : &this_machine;
        int r = check_source(src, err, errlen);
        if (r < 0)
                return r;
        r = open_hwloc(src, &topo, err, errlen);
        if (r < 0)
                return r;
        struct topology *t = calloc(1, sizeof *t);
        if (!t) {
                hwloc_topology_destroy(topo);
                return set_err(err, errlen, -ENOMEM, "out of memory");
        }
        t->kind = source_kind(src);
        r = build_from_hwloc(t, topo);
        hwloc_topology_destroy(topo);
        if (r < 0)
                r = set_err(err, errlen, r, "hwloc topology: %s", r == -ENODEV ? "no CPUs" : strerror(-r));
        else
                r = load_live_counts(t, src, err, errlen);
        if (r < 0) {
                topology_free(t);
                return r;
        }
        *ret_topology = t;
        return 0;
}

int topology_numa_index(const struct topology *t, int id) {
        for (size_t i = 0; i < t->n_numa_nodes; i++)
                if (t->numa_nodes[i].id == id)
                        return (int)i;
        return -1;
}

/* ---------- JSON ---------- */

static const char *kind_name(enum topology_kind kind) {
        switch (kind) {
        case TOPOLOGY_KIND_FSROOT:
                return "fsroot";
        case TOPOLOGY_KIND_XML:
                return "xml";
        default:
                return "host";
        }
}

/* Adds a cpulist member; returns -1 on ENOMEM like json_object_set_new. */
static int set_cpus(json_t *o, const char *key, const struct cpuset *s) {
        return json_object_set_new(o, key, jsonutil_cpuset(s));
}

/* OS id of the referenced package/node, or JSON null. */
static json_t *id_or_null(int index, int id) {
        return index < 0 ? json_null() : json_integer(id);
}

static json_t *package_json(const struct topology *t, size_t i) {
        const struct topology_package *p = &t->packages[i];
        json_t *o = json_pack("{s:i, s:s}", "id", p->id, "cpu_model", p->cpu_model);
        if (o && set_cpus(o, "cpus", p->cpus) < 0)
                return json_decref(o), NULL;
        return o;
}

static json_t *hugepages_json(const struct topology_numa_node *nn) {
        json_t *o = json_object();
        for (size_t i = 0; o && i < nn->n_hugepages; i++) {
                const struct topology_hugepages *h = &nn->hugepages[i];
                char key[32];
                snprintf(key, sizeof key, "%" PRIu64 "kB", h->page_kib);
                json_t *v = json_pack("{s:I, s:I}", "total", (json_int_t)h->total, "free", (json_int_t)h->free);
                if (json_object_set_new(o, key, v) < 0)
                        return json_decref(o), NULL;
        }
        return o;
}

static json_t *numa_json(const struct topology *t, size_t i) {
        const struct topology_numa_node *nn = &t->numa_nodes[i];
        int pkg_id = nn->package >= 0 ? t->packages[nn->package].id : 0;
        json_t *o = json_pack("{s:i, s:I, s:I, s:o, s:o, s:o}", "id", nn->id, "memory_bytes", (json_int_t)nn->memory_bytes,
                              "memory_free_bytes", (json_int_t)nn->memory_free_bytes, "package",
                              id_or_null(nn->package, pkg_id), "hugepages", hugepages_json(nn), "subtype",
                              nn->subtype ? json_string(nn->subtype) : json_null());
        if (o && set_cpus(o, "cpus", nn->cpus) < 0)
                return json_decref(o), NULL;
        return o;
}

static json_t *l3_json(const struct topology *t, size_t i) {
        json_t *o = json_pack("{s:I}", "size_bytes", (json_int_t)t->l3_caches[i].size_bytes);
        if (o && set_cpus(o, "cpus", t->l3_caches[i].cpus) < 0)
                return json_decref(o), NULL;
        return o;
}

/* package and numa_node are OS ids (like the top-level arrays' "id"); l3 is an index into l3_caches. */
static json_t *core_json(const struct topology *t, size_t i) {
        const struct topology_core *c = &t->cores[i];
        int pkg_id = c->package >= 0 ? t->packages[c->package].id : 0;
        int node_id = c->numa_node >= 0 ? t->numa_nodes[c->numa_node].id : 0;
        json_t *o = json_pack("{s:o, s:o, s:o}", "package", id_or_null(c->package, pkg_id), "numa_node",
                              id_or_null(c->numa_node, node_id), "l3", c->l3 < 0 ? json_null() : json_integer(c->l3));
        if (o && set_cpus(o, "cpus", c->cpus) < 0)
                return json_decref(o), NULL;
        return o;
}

static json_t *array_json(const struct topology *t, size_t n, json_t *(*item)(const struct topology *, size_t)) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                if (json_array_append_new(a, item(t, i)) < 0)
                        return json_decref(a), NULL;
        return a;
}

json_t *topology_to_json(const struct topology *t) {
        json_t *o = json_pack("{s:s, s:s, s:i, s:o, s:o, s:o, s:o}", "source", kind_name(t->kind), "cpu_model",
                              t->cpu_model, "pus", (int)cpuset_count(t->cpus), "packages",
                              array_json(t, t->n_packages, package_json), "numa_nodes",
                              array_json(t, t->n_numa_nodes, numa_json), "l3_caches",
                              array_json(t, t->n_l3_caches, l3_json), "cores", array_json(t, t->n_cores, core_json));
        if (o && (set_cpus(o, "cpus", t->cpus) < 0 || set_cpus(o, "online", t->online) < 0 ||
                  set_cpus(o, "isolated", t->isolated) < 0 || set_cpus(o, "allowed", t->allowed) < 0))
                return json_decref(o), NULL;
        return o;
}
