/* vmhw: the VM hardware a ProxmoxNodeClass asks for (machine, firmware and EFI disk, TPM, guest agent, onboot,
 * PCI devices from resource mappings),
 * parsed from its spec into a typed value and turned into the Proxmox config parameters of the launch. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "pve.h"

#define VMHW_STORAGE_MAX 64
#define VMHW_MACHINE_MAX 41
#define VMHW_PCI_MAX 16 /* hostpci0..hostpci15 */

enum vmhw_bios { VMHW_BIOS_UNSET, VMHW_BIOS_SEABIOS, VMHW_BIOS_OVMF };
enum vmhw_tristate { VMHW_UNSET = -1, VMHW_OFF = 0, VMHW_ON = 1 };

struct vmhw_efidisk {
        char storage[VMHW_STORAGE_MAX]; /* "": the boot disk's storage */
        char efitype[4];                /* "2m" or "4m" */
        bool pre_enrolled_keys;
};

struct vmhw_tpm {
        bool enabled;
        char storage[VMHW_STORAGE_MAX]; /* "": the boot disk's storage */
        char version[8];                /* "v1.2" or "v2.0" */
};

struct vmhw_agent {
        bool set; /* unset: the template's agent setting stays */
        bool enabled;
        char type[8]; /* "virtio" or "isa" */
        enum vmhw_tristate freeze_fs_on_backup, fstrim_cloned_disks;
};

/* One PCI device by its Proxmox resource mapping (/cluster/mapping/pci), the seed's pciDevices entry. */
struct vmhw_pci {
        char mapping[64];
        char mdev[64]; /* "": none */
        bool pcie, xvga;
};

struct vmhw {
        char machine[VMHW_MACHINE_MAX]; /* "": the template's */
        enum vmhw_bios bios;
        struct vmhw_efidisk efidisk;
        struct vmhw_tpm tpm;
        struct vmhw_agent agent;
        bool onboot; /* default true: nodes come back after a host restarts */
        struct vmhw_pci pci[VMHW_PCI_MAX];
        size_t n_pci;
};

/* The spec (a ProxmoxNodeClass's .spec; NULL: all defaults) into *ret. 0, or -EINVAL with one line naming the
 * field (e.g. "spec.tpm.version: must be v1.2 or v2.0") in err. */
int vmhw_parse(const json_t *spec, struct vmhw *ret, char *err, size_t errlen);

/* The config parameters of hw for a clone whose config is config (GET .../config): machine, bios, agent and
 * onboot when asked for; hostpci0..N-1 (mapping=<id>[,mdev=][,pcie=1][,x-vga=1]) for pciDevices; efidisk0
 * (bios ovmf) and tpmstate0 (tpm) as new volumes ("<storage>:1,...") only when the config has none (the template's
 * are cloned with it, and a TPM's version cannot change). disk_storage is the storage of the VM's boot disk, used
 * when the class names none. 0, -EINVAL (no storage to put a volume on, with the reason in err), or -ENOMEM. */
int vmhw_params(const struct vmhw *hw, const json_t *config, const char *disk_storage, struct pve_params *p,
                char *err, size_t errlen);

/* The storage id of a volume value ("local-lvm:vm-100-disk-0,size=30G" -> "local-lvm"), or -EINVAL. */
int vmhw_volume_storage(const char *value, char storage[VMHW_STORAGE_MAX]);
