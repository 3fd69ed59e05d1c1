/* topology_sysfs: per-node free memory and hugepages read under a root (sysfs, or libnuma on this machine), and
 * their pure parsers. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "topology.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <numa.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "topology_internal.h"

/* The reading rules are described at the top of topology.c. */

#define SYSFS_NODE "/sys/devices/system/node"
#define SYSFS_HUGEPAGES_GLOBAL "/sys/kernel/mm/hugepages"
#define PROC_MEMINFO "/proc/meminfo"
#define KIB 1024ULL


/* ---------- small helpers ---------- */

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

static int parse_u64_text(const char *text, void *ret_value) {
        return parse_u64(text, ret_value);
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
        int r = topology__read_under(root, path, parse_u64_text, &h->total);
        if (r < 0)
                return r;
        snprintf(path, sizeof path, "%s/%s/free_hugepages", dir, name);
        r = topology__read_under(root, path, parse_u64_text, &h->free);
        if (r == -ENOENT) /* kernels always have it; a partial snapshot may not: assume none in use */
                h->free = h->total;
        return r == -ENOENT ? 0 : r;
}

/* Every hugepages-<size>kB directory in <root><dir>, sorted by page size. A missing dir = no hugepages. */
static int read_hugepages(const char *root, const char *dir, struct topology_hugepages **ret_pages, size_t *ret_n) {
        char path[PATH_MAX];
        int r = fileio_path_under(path, sizeof path, root, dir);
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
        if (n > 1)
                qsort(pages, n, sizeof *pages, cmp_hugepages);
        *ret_pages = pages;
        *ret_n = n;
        return 0;
}

static int parse_mem_free(const char *text, void *ret_free) {
        uint64_t total;
        return topology_parse_meminfo(text, &total, ret_free);
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
        int r = topology__read_under(root, meminfo, parse_mem_free, &mem_free);
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
        int r = fileio_path_under(path, sizeof path, root, SYSFS_NODE);
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

int topology_pci_numa_node(const char *root, const char *address, int *ret_node) {
        char path[PATH_MAX], *text = NULL, *end;
        if (!address || strchr(address, '/') || address[0] == '.' ||
            snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", address) >= (int)sizeof path)
                return -EINVAL;
        int r = fileio_read_under(root, path, &text);
        if (r < 0)
                return r;
        errno = 0;
        long v = strtol(text, &end, 10);
        r = errno || end == text || *end || v < -1 || v > INT_MAX ? -EINVAL : 0;
        free(text);
        if (r == 0)
                *ret_node = (int)v;
        return r;
}
