/* topology: the host's CPU and memory layout from hwloc, with online/isolated CPUs from sysfs under a root. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "topology.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"
#include "fileio.h"
#include "topology_internal.h"

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
 * - The per-node reads live in topology_sysfs.c, the JSON document in topology_json.c, and what both readers
 *   share (a file under the root parsed into a value, the node lookup) in topology_common.c.
 */

#define SYSFS_CPU "/sys/devices/system/cpu"
#define KIB 1024ULL

/* ---------- small helpers ---------- */

static int parse_cpulist(const char *text, void *ret_set) {
        return cpuset_parse(text, ret_set);
}

/* A cpulist file under root; -ENOENT also for XML, which has no sysfs. */
static int read_cpulist(const struct topology *t, const char *root, const char *path, struct cpuset **ret_set) {
        return t->kind == TOPOLOGY_KIND_XML ? -ENOENT : topology__read_under(root, path, parse_cpulist, ret_set);
}

static int first_cpu(const struct cpuset *s) {
        int c = cpuset_next(s, -1);
        return c < 0 ? INT_MAX : c; /* empty sets sort last */
}

/* ---------- hwloc loading ---------- */

static int check_source(const struct topology_source *src, char *err, size_t errlen) {
        struct stat st;
        char path[PATH_MAX];
        if (src->fsroot && src->xml_file)
                return errmsg_set(err, errlen, -EINVAL, "--fsroot and --topology-xml are mutually exclusive");
        if (src->xml_file && access(src->xml_file, R_OK) < 0) {
                int r = -errno;
                return errmsg_set(err, errlen, r, "topology XML %s: %s", src->xml_file, strerror(-r));
        }
        if (!src->fsroot)
                return 0;
        if (fileio_path_under(path, sizeof path, src->fsroot, SYSFS_CPU) < 0)
                return errmsg_set(err, errlen, -ENAMETOOLONG, "fsroot %s: path too long", src->fsroot);
        if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                return errmsg_set(err, errlen, -ENOENT,
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
                return errmsg_set(err, errlen, -ENOMEM, "hwloc: cannot initialise a topology");
        int r = configure_hwloc(topo, src);
        if (r == 0)
                r = load_with_fsroot(topo, src->fsroot);
        if (r < 0) {
                hwloc_topology_destroy(topo);
                const char *what = "this machine";
                if (src->xml_file || src->fsroot)
                        what = src->xml_file ? src->xml_file : src->fsroot;
                return errmsg_set(err, errlen, r, "hwloc could not load the topology of %s: %s", what, strerror(-r));
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
        int x = first_cpu(((const struct topology_core *)a)->cpus);
        int y = first_cpu(((const struct topology_core *)b)->cpus);
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
        c->package = t->n_packages == 1 ? 0 : -1; /* no package above it: the only one, or none */
        if (pkg)
                c->package = package_index(t, os_index_or(pkg, (int)pkg->logical_index));
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
        int r = read_cpulist(t, root, SYSFS_CPU "/online", &online);
        if (r == -ENOENT)
                r = (online = cpuset_dup(t->cpus)) ? 0 : -ENOMEM;
        if (r < 0)
                return errmsg_set(err, errlen, r, "%s" SYSFS_CPU "/online: %s", fileio_root_prefix(root), strerror(-r));
        cpuset_and(online, t->cpus);
        r = read_cpulist(t, root, SYSFS_CPU "/isolated", &isolated);
        if (r == -ENOENT)
                r = (isolated = cpuset_new()) ? 0 : -ENOMEM;
        if (r < 0) {
                cpuset_free(online);
                return errmsg_set(err, errlen, r, "%s" SYSFS_CPU "/isolated: %s", fileio_root_prefix(root),
                               strerror(-r));
        }
        t->online = online;
        t->isolated = isolated;
        return 0;
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
        if (src->xml_file)
                return TOPOLOGY_KIND_XML;
        return src->fsroot ? TOPOLOGY_KIND_FSROOT : TOPOLOGY_KIND_HOST;
}

static int load_live_counts(struct topology *t, const struct topology_source *src, char *err, size_t errlen) {
        int r = read_cpu_state(t, src->fsroot, err, errlen);
        if (r < 0)
                return r;
        r = topology_refresh_memory(t, src);
        if (r < 0)
                return errmsg_set(err, errlen, r, "reading per-node memory under %s: %s",
                               *fileio_root_prefix(src->fsroot) ? src->fsroot : "/", strerror(-r));
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
                return errmsg_set(err, errlen, -ENOMEM, "out of memory");
        }
        t->kind = source_kind(src);
        r = build_from_hwloc(t, topo);
        hwloc_topology_destroy(topo);
        if (r < 0)
                r = errmsg_set(err, errlen, r, "hwloc topology: %s", r == -ENODEV ? "no CPUs" : strerror(-r));
        else
                r = load_live_counts(t, src, err, errlen);
        if (r < 0) {
                topology_free(t);
                return r;
        }
        *ret_topology = t;
        return 0;
}
