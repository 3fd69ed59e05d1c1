/* hosttune_fs: the sysfs and procfs files of host tuning (cpufreq governors, IRQ affinity) under a root. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "cpuset.h"

/* Every function takes the root of the tree ("" or "/" for this machine, else a copied /sys + /proc tree):
 * paths are <root>/sys/devices/system/cpu/cpuN/cpufreq/<file>, <root>/sys/bus/pci/devices/<addr>/msi_irqs
 * and <root>/proc/irq/<n>/smp_affinity_list. */

#define HOSTTUNE_VALUE_MAX 64 /* a governor or EPP name and its NUL */

/* The cpufreq files of one CPU. */
#define HOSTTUNE_GOVERNOR "scaling_governor"
#define HOSTTUNE_EPP "energy_performance_preference"

/* Read <cpu>/cpufreq/<file> into value. 0, -ENOENT when the CPU has no such file (no cpufreq driver, or no
 * EPP), -ENAMETOOLONG for a value longer than HOSTTUNE_VALUE_MAX - 1, other -errno. */
int hosttune_fs_read_cpu(const char *root, unsigned cpu, const char *file, char value[HOSTTUNE_VALUE_MAX]);

/* The CPUs sharing cpu's cpufreq policy (<cpu>/cpufreq/affected_cpus). 0, -ENOENT, -EBADMSG, -ENOMEM. */
int hosttune_fs_cpu_policy(const char *root, unsigned cpu, struct cpuset **ret_cpus);

/* Write value (and a newline) to <cpu>/cpufreq/<file>. 0 or -errno: -EINVAL for a governor the driver lacks,
 * -EBUSY for an EPP the performance governor refuses (intel_pstate), -EROFS under ProtectKernelTunables. */
int hosttune_fs_write_cpu(const char *root, unsigned cpu, const char *file, const char *value);

/* The MSI IRQ numbers of a PCI device: addr as in a hostpciN line ("0000:01:00.0", "01:00.0", or "01:00"
 * for every function of the slot, domain 0000 when absent). Sorted. Caller frees *ret_irqs. 0 (also with
 * none: the device has no MSI vectors enabled, or is absent), -ENOMEM. */
int hosttune_fs_pci_irqs(const char *root, const char *addr, int **ret_irqs, size_t *ret_n);

/* Every IRQ with a directory under <root>/proc/irq, sorted. Caller frees *ret_irqs. -errno when the
 * directory cannot be listed, -ENOMEM. */
int hosttune_fs_irqs(const char *root, int **ret_irqs, size_t *ret_n);

/* Read or write <root>/proc/irq/<irq>/smp_affinity_list. Reads: 0, -ENOENT, -EBADMSG, -ENOMEM. Writes: 0 or
 * -errno (-EIO for an IRQ the kernel cannot move, -EINVAL when no CPU of the list can take it). */
int hosttune_fs_read_irq(const char *root, int irq, struct cpuset **ret_cpus);
int hosttune_fs_write_irq(const char *root, int irq, const struct cpuset *cpus);

/* Whether a process named "irqbalance" runs (a <root>/proc/<pid>/comm says so). */
bool hosttune_fs_irqbalance_running(const char *root);
