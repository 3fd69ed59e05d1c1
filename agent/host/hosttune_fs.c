/* hosttune_fs: the sysfs and procfs files of host tuning (cpufreq governors, IRQ affinity) under a root. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "hosttune_fs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "fileio.h"

#define PCI_DEVICES "/sys/bus/pci/devices"
#define PROC_IRQ "/proc/irq"

static void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

/* ---- lists of numbers ---- */

struct ints {
        int *v;
        size_t n;
};

static int ints_add(struct ints *l, int x) {
        int *grown = realloc(l->v, (l->n + 1) * sizeof *grown);
        if (!grown)
                return -ENOMEM;
        l->v = grown;
        l->v[l->n++] = x;
        return 0;
}

static int cmp_int(const void *a, const void *b) {
        int x = *(const int *)a, y = *(const int *)b;
        return (x > y) - (x < y);
}

/* A directory entry that is a plain decimal number, or -1. */
static int entry_number(const char *name) {
        char *end;
        if (!isdigit((unsigned char)name[0]))
                return -1;
        errno = 0;
        long n = strtol(name, &end, 10);
        return *end || errno || n > INT_MAX ? -1 : (int)n;
}

/* Add every numeric entry of <root><dir> to l. A missing directory adds nothing when missing_ok. */
static int list_numbers(const char *root, const char *dir, bool missing_ok, struct ints *l) {
        char path[PATH_MAX];
        int r = fileio_path_under(path, sizeof path, root, dir);
        if (r < 0)
                return r;
        _cleanup_(closedirp) DIR *d = opendir(path);
        if (!d)
                return errno == ENOENT && missing_ok ? 0 : -errno;
        for (struct dirent *e; (e = readdir(d));) {
                int n = entry_number(e->d_name);
                if (n >= 0 && (r = ints_add(l, n)) < 0)
                        return r;
        }
        return 0;
}

/* ---- cpufreq ---- */

static int cpu_path(char *buf, size_t size, const char *root, unsigned cpu, const char *file) {
        char rel[128];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%u/cpufreq/%s", cpu, file);
        return fileio_path_under(buf, size, root, rel);
}

int hosttune_fs_read_cpu(const char *root, unsigned cpu, const char *file, char value[HOSTTUNE_VALUE_MAX]) {
        char rel[128];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%u/cpufreq/%s", cpu, file);
        _cleanup_free_ char *text = NULL;
        int r = fileio_read_under(root, rel, &text);
        if (r < 0)
                return r;
        if (strlen(text) >= HOSTTUNE_VALUE_MAX)
                return -ENAMETOOLONG;
        snprintf(value, HOSTTUNE_VALUE_MAX, "%s", text);
        return 0;
}

int hosttune_fs_cpu_policy(const char *root, unsigned cpu, struct cpuset **ret_cpus) {
        char rel[128];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%u/cpufreq/affected_cpus", cpu);
        _cleanup_free_ char *text = NULL;
        int r = fileio_read_under(root, rel, &text);
        if (r < 0)
                return r;
        /* affected_cpus separates CPUs with spaces ("0 1"); a cpulist wants commas. */
        for (char *p = text; *p; p++)
                if (*p == ' ')
                        *p = ',';
        r = cpuset_parse(text, ret_cpus);
        if (r < 0 && r != -ENOMEM)
                return -EBADMSG;
        return r;
}

/* One write(2) of the whole value: sysfs takes a store in one call. O_TRUNC does nothing on sysfs and
 * empties a copied tree's plain file first. */
static int write_value(const char *path, const char *value) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        char line[512];
        int n = snprintf(line, sizeof line, "%s\n", value);
        if (n < 0 || (size_t)n >= sizeof line)
                return -E2BIG;
        ssize_t w = write(fd, line, (size_t)n);
        if (w < 0)
                return -errno;
        return w == n ? 0 : -EIO;
}

int hosttune_fs_write_cpu(const char *root, unsigned cpu, const char *file, const char *value) {
        char path[PATH_MAX];
        int r = cpu_path(path, sizeof path, root, cpu, file);
        return r < 0 ? r : write_value(path, value);
}

/* ---- PCI devices ---- */

/* "0000:01:00.0" from "01:00.0" (domain 0000 added), lowercase. */
static void full_address(const char *addr, char *out, size_t size) {
        size_t colons = 0;
        for (const char *p = addr; *p; p++)
                colons += *p == ':';
        snprintf(out, size, "%s%s", colons >= 2 ? "" : "0000:", addr);
        for (char *p = out; *p; p++)
                *p = (char)tolower((unsigned char)*p);
}

static int device_irqs(const char *root, const char *device, struct ints *l) {
        char rel[PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%s/msi_irqs", PCI_DEVICES, device);
        return list_numbers(root, rel, true, l);
}

/* "0000:01:00" (no function): every function of the slot present under PCI_DEVICES. */
static int slot_irqs(const char *root, const char *slot, struct ints *l) {
        char path[PATH_MAX];
        int r = fileio_path_under(path, sizeof path, root, PCI_DEVICES);
        if (r < 0)
                return r;
        _cleanup_(closedirp) DIR *d = opendir(path);
        if (!d)
                return 0; /* no PCI bus in this tree: no IRQs */
        size_t n = strlen(slot);
        for (struct dirent *e; (e = readdir(d));)
                if (strncmp(e->d_name, slot, n) == 0 && e->d_name[n] == '.' &&
                    (r = device_irqs(root, e->d_name, l)) < 0)
                        return r;
        return 0;
}

/* A list read with result r handed over sorted, or freed when the read failed. */
static int hand_over_sorted(int r, struct ints *l, int **ret, size_t *ret_n) {
        if (r < 0) {
                free(l->v);
                return r;
        }
        if (l->n)
                qsort(l->v, l->n, sizeof *l->v, cmp_int);
        *ret = l->v;
        *ret_n = l->n;
        return 0;
}

int hosttune_fs_pci_irqs(const char *root, const char *addr, int **ret_irqs, size_t *ret_n) {
        char full[64];
        full_address(addr, full, sizeof full);
        struct ints l = { 0 };
        int r = strchr(full, '.') ? device_irqs(root, full, &l) : slot_irqs(root, full, &l);
        return hand_over_sorted(r, &l, ret_irqs, ret_n);
}

/* ---- /proc/irq ---- */

int hosttune_fs_irqs(const char *root, int **ret_irqs, size_t *ret_n) {
        struct ints l = { 0 };
        int r = list_numbers(root, PROC_IRQ, false, &l);
        return hand_over_sorted(r, &l, ret_irqs, ret_n);
}

int hosttune_fs_read_irq(const char *root, int irq, struct cpuset **ret_cpus) {
        char rel[64];
        snprintf(rel, sizeof rel, "%s/%d/smp_affinity_list", PROC_IRQ, irq);
        _cleanup_free_ char *text = NULL;
        int r = fileio_read_under(root, rel, &text);
        if (r < 0)
                return r;
        r = cpuset_parse(text, ret_cpus);
        if (r < 0 && r != -ENOMEM)
                return -EBADMSG;
        return r;
}

int hosttune_fs_write_irq(const char *root, int irq, const struct cpuset *cpus) {
        char rel[64], path[PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%d/smp_affinity_list", PROC_IRQ, irq);
        int r = fileio_path_under(path, sizeof path, root, rel);
        if (r < 0)
                return r;
        _cleanup_free_ char *list = cpuset_format(cpus);
        return list ? write_value(path, list) : -ENOMEM;
}

/* ---- irqbalance ---- */

bool hosttune_fs_irqbalance_running(const char *root) {
        struct ints pids = { 0 };
        bool found = false;
        if (list_numbers(root, "/proc", true, &pids) < 0)
                pids.n = 0;
        for (size_t i = 0; i < pids.n && !found; i++) {
                char rel[64];
                _cleanup_free_ char *comm = NULL;
                snprintf(rel, sizeof rel, "/proc/%d/comm", pids.v[i]);
                found = fileio_read_under(root, rel, &comm) == 0 && strcmp(comm, "irqbalance") == 0;
        }
        free(pids.v);
        return found;
}
