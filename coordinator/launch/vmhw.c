/* vmhw: a ProxmoxNodeClass's VM hardware (machine, bios and EFI disk, TPM, guest agent, onboot) parsed from its
 * spec, and the Proxmox config parameters the launch writes for it. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "vmhw.h"

/* Proxmox's machine type pattern (qemu-server's pve-qemu-machine), anchored as Perl anchors schema patterns. */
#define MACHINE_RE "^(pc|pc(-i440fx)?-[0-9]+(\\.[0-9]+)+(\\+pve[0-9]+)?(\\.pxe)?|q35|" \
                   "pc-q35-[0-9]+(\\.[0-9]+)+(\\+pve[0-9]+)?(\\.pxe)?|virt(-[0-9]+(\\.[0-9]+)+)?(\\+pve[0-9]+)?)$"
#define STORAGE_RE "^[a-zA-Z][a-zA-Z0-9_.-]*[a-zA-Z0-9]$"
#define MAPPING_RE "^[a-zA-Z][a-zA-Z0-9_-]*$" /* pve-configid */

static int bad(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t len, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        if (len)
                vsnprintf(err, len, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static bool matches(const char *re, const char *s) {
        regex_t r;
        if (regcomp(&r, re, REG_EXTENDED | REG_NOSUB) != 0)
                return false;
        bool ok = regexec(&r, s, 0, NULL, 0) == 0;
        regfree(&r);
        return ok;
}

/* An optional string member: 0 (unset leaves out untouched), or -EINVAL when it is not a string or too long. */
static int opt_string(const json_t *o, const char *key, const char *field, char *out, size_t outlen, char *err,
                      size_t errlen) {
        const json_t *v = json_object_get(o, key);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= outlen)
                return bad(err, errlen, "spec.%s: must be a string of 1 to %zu characters", field, outlen - 1);
        snprintf(out, outlen, "%s", json_string_value(v));
        return 0;
}

static int opt_bool(const json_t *o, const char *key, const char *field, enum vmhw_tristate *out, char *err,
                    size_t errlen) {
        const json_t *v = json_object_get(o, key);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_boolean(v))
                return bad(err, errlen, "spec.%s: must be true or false", field);
        *out = json_is_true(v) ? VMHW_ON : VMHW_OFF;
        return 0;
}

static int one_of(const char *value, const char *a, const char *b, const char *field, char *err, size_t errlen) {
        if (strcmp(value, a) == 0 || strcmp(value, b) == 0)
                return 0;
        return bad(err, errlen, "spec.%s: must be %s or %s, not \"%s\"", field, a, b, value);
}

static int storage_ok(const char *storage, const char *field, char *err, size_t errlen) {
        if (!storage[0] || matches(STORAGE_RE, storage))
                return 0;
        return bad(err, errlen, "spec.%s.storage: \"%s\" is not a Proxmox storage id", field, storage);
}

static const json_t *object_member(const json_t *spec, const char *key, int *r, char *err, size_t errlen) {
        const json_t *o = json_object_get(spec, key);
        if (o && !json_is_null(o) && !json_is_object(o)) {
                *r = bad(err, errlen, "spec.%s: must be an object", key);
                return NULL;
        }
        return json_is_object(o) ? o : NULL;
}

static int parse_machine_bios(const json_t *spec, struct vmhw *hw, char *err, size_t errlen) {
        char bios[16] = "";
        int r = opt_string(spec, "machine", "machine", hw->machine, sizeof hw->machine, err, errlen);
        if (r < 0)
                return r;
        if (hw->machine[0] && !matches(MACHINE_RE, hw->machine))
                return bad(err, errlen, "spec.machine: \"%s\" is not a Proxmox machine type (e.g. q35, pc, "
                           "pc-q35-8.1)", hw->machine);
        const json_t *b = json_object_get(spec, "bios");
        if (b && !json_is_null(b) && (!json_is_string(b) || json_string_length(b) >= sizeof bios))
                return bad(err, errlen, "spec.bios: must be seabios or ovmf");
        if (json_is_string(b)) {
                snprintf(bios, sizeof bios, "%s", json_string_value(b));
                if ((r = one_of(bios, "seabios", "ovmf", "bios", err, errlen)) < 0)
                        return r;
                hw->bios = strcmp(bios, "ovmf") == 0 ? VMHW_BIOS_OVMF : VMHW_BIOS_SEABIOS;
        }
        return 0;
}

static int parse_efidisk(const json_t *spec, struct vmhw_efidisk *e, char *err, size_t errlen) {
        int r = 0;
        enum vmhw_tristate keys = VMHW_UNSET;
        const json_t *o = object_member(spec, "efiDisk", &r, err, errlen);
        if (r < 0 || !o)
                return r;
        if ((r = opt_string(o, "storage", "efiDisk.storage", e->storage, sizeof e->storage, err, errlen)) < 0 ||
            (r = storage_ok(e->storage, "efiDisk", err, errlen)) < 0 ||
            (r = opt_string(o, "efiType", "efiDisk.efiType", e->efitype, sizeof e->efitype, err, errlen)) < 0 ||
            (r = one_of(e->efitype, "2m", "4m", "efiDisk.efiType", err, errlen)) < 0 ||
            (r = opt_bool(o, "preEnrolledKeys", "efiDisk.preEnrolledKeys", &keys, err, errlen)) < 0)
                return r;
        e->pre_enrolled_keys = keys == VMHW_ON;
        return 0;
}

static int parse_tpm(const json_t *spec, struct vmhw_tpm *t, char *err, size_t errlen) {
        int r = 0;
        const json_t *o = object_member(spec, "tpm", &r, err, errlen);
        if (r < 0 || !o)
                return r;
        t->enabled = true;
        if ((r = opt_string(o, "storage", "tpm.storage", t->storage, sizeof t->storage, err, errlen)) < 0 ||
            (r = storage_ok(t->storage, "tpm", err, errlen)) < 0 ||
            (r = opt_string(o, "version", "tpm.version", t->version, sizeof t->version, err, errlen)) < 0)
                return r;
        return one_of(t->version, "v1.2", "v2.0", "tpm.version", err, errlen);
}

static int parse_agent(const json_t *spec, struct vmhw_agent *a, char *err, size_t errlen) {
        int r = 0;
        enum vmhw_tristate enabled = VMHW_UNSET;
        const json_t *o = object_member(spec, "agent", &r, err, errlen);
        if (r < 0 || !o)
                return r;
        a->set = true;
        if ((r = opt_bool(o, "enabled", "agent.enabled", &enabled, err, errlen)) < 0 ||
            (r = opt_string(o, "type", "agent.type", a->type, sizeof a->type, err, errlen)) < 0 ||
            (r = one_of(a->type, "virtio", "isa", "agent.type", err, errlen)) < 0 ||
            (r = opt_bool(o, "fsFreezeOnBackup", "agent.fsFreezeOnBackup", &a->freeze_fs_on_backup, err, errlen)) < 0 ||
            (r = opt_bool(o, "fsTrimClonedDisks", "agent.fsTrimClonedDisks", &a->fstrim_cloned_disks, err, errlen)) < 0)
                return r;
        a->enabled = enabled != VMHW_OFF; /* an agent object without enabled turns it on */
        return 0;
}

static int parse_pci_one(const json_t *o, size_t i, struct vmhw_pci *d, char *err, size_t errlen) {
        char field[48];
        enum vmhw_tristate pcie = VMHW_UNSET, xvga = VMHW_UNSET;
        int r;
        if (!json_is_object(o))
                return bad(err, errlen, "spec.pciDevices[%zu]: must be an object", i);
        snprintf(field, sizeof field, "pciDevices[%zu].mapping", i);
        if ((r = opt_string(o, "mapping", field, d->mapping, sizeof d->mapping, err, errlen)) < 0)
                return r;
        if (!d->mapping[0] || !matches(MAPPING_RE, d->mapping))
                return bad(err, errlen, "spec.%s: must name a Proxmox PCI resource mapping id", field);
        snprintf(field, sizeof field, "pciDevices[%zu].mdev", i);
        if ((r = opt_string(o, "mdev", field, d->mdev, sizeof d->mdev, err, errlen)) < 0)
                return r;
        if (strpbrk(d->mdev, ",=;"))
                return bad(err, errlen, "spec.%s: must not contain ',', '=' or ';'", field);
        snprintf(field, sizeof field, "pciDevices[%zu].pcie", i);
        if ((r = opt_bool(o, "pcie", field, &pcie, err, errlen)) < 0)
                return r;
        snprintf(field, sizeof field, "pciDevices[%zu].xvga", i);
        if ((r = opt_bool(o, "xvga", field, &xvga, err, errlen)) < 0)
                return r;
        d->pcie = pcie == VMHW_ON;
        d->xvga = xvga == VMHW_ON;
        return 0;
}

/* pcie=1 needs a q35 machine (Proxmox refuses to start the VM otherwise): refused when the class names another. */
static int parse_pci(const json_t *spec, struct vmhw *hw, char *err, size_t errlen) {
        const json_t *a = json_object_get(spec, "pciDevices");
        const json_t *e;
        size_t i;
        if (!a || json_is_null(a))
                return 0;
        if (!json_is_array(a) || json_array_size(a) > VMHW_PCI_MAX)
                return bad(err, errlen, "spec.pciDevices: must be a list of at most %d devices", VMHW_PCI_MAX);
        json_array_foreach(a, i, e) {
                int r = parse_pci_one(e, i, &hw->pci[i], err, errlen);
                if (r < 0)
                        return r;
                if (hw->pci[i].pcie && hw->machine[0] && !strstr(hw->machine, "q35"))
                        return bad(err, errlen, "spec.pciDevices[%zu].pcie: needs a q35 machine, not \"%s\"", i,
                                   hw->machine);
        }
        hw->n_pci = json_array_size(a);
        return 0;
}

static int parse_onboot(const json_t *spec, struct vmhw *hw, char *err, size_t errlen) {
        enum vmhw_tristate on = VMHW_UNSET;
        const json_t *v = json_object_get(spec, "onBoot");
        if (v && !json_is_null(v) && !json_is_boolean(v))
                return bad(err, errlen, "spec.onBoot: must be true or false");
        if (json_is_boolean(v))
                on = json_is_true(v) ? VMHW_ON : VMHW_OFF;
        hw->onboot = on != VMHW_OFF;
        return 0;
}

int vmhw_parse(const json_t *spec, struct vmhw *ret, char *err, size_t errlen) {
        struct vmhw hw = {
                .efidisk = { .efitype = "4m" },
                .tpm = { .version = "v2.0" },
                .agent = { .type = "virtio", .freeze_fs_on_backup = VMHW_UNSET, .fstrim_cloned_disks = VMHW_UNSET },
                .onboot = true,
        };
        int r;
        if (spec && !json_is_object(spec))
                return bad(err, errlen, "spec: must be an object");
        if ((r = parse_machine_bios(spec, &hw, err, errlen)) < 0 ||
            (r = parse_efidisk(spec, &hw.efidisk, err, errlen)) < 0 ||
            (r = parse_tpm(spec, &hw.tpm, err, errlen)) < 0 || (r = parse_agent(spec, &hw.agent, err, errlen)) < 0 ||
            (r = parse_onboot(spec, &hw, err, errlen)) < 0 || (r = parse_pci(spec, &hw, err, errlen)) < 0)
                return r;
        *ret = hw;
        return 0;
}

/* ---- parameters ---- */

int vmhw_volume_storage(const char *value, char storage[VMHW_STORAGE_MAX]) {
        const char *v = value && strncmp(value, "file=", 5) == 0 ? value + 5 : value;
        const char *colon = v ? strchr(v, ':') : NULL;
        size_t n = colon ? (size_t)(colon - v) : 0;
        if (!n || n >= VMHW_STORAGE_MAX || memchr(v, ',', n))
                return -EINVAL;
        memcpy(storage, v, n);
        storage[n] = '\0';
        return matches(STORAGE_RE, storage) ? 0 : -EINVAL;
}

static const char *volume_storage(const char *own, const char *disk_storage) {
        return own[0] ? own : disk_storage;
}

static int add_efidisk(const struct vmhw *hw, const char *disk_storage, struct pve_params *p, char *err,
                       size_t errlen) {
        const char *st = volume_storage(hw->efidisk.storage, disk_storage);
        if (!st || !*st)
                return bad(err, errlen, "spec.efiDisk.storage: no storage for the EFI disk (none named, and the VM's "
                           "boot disk has none)");
        return pve_params_addf(p, "efidisk0", "%s:1,efitype=%s,pre-enrolled-keys=%d", st, hw->efidisk.efitype,
                               hw->efidisk.pre_enrolled_keys ? 1 : 0);
}

static int add_tpm(const struct vmhw *hw, const char *disk_storage, struct pve_params *p, char *err, size_t errlen) {
        const char *st = volume_storage(hw->tpm.storage, disk_storage);
        if (!st || !*st)
                return bad(err, errlen, "spec.tpm.storage: no storage for the TPM state (none named, and the VM's "
                           "boot disk has none)");
        return pve_params_addf(p, "tpmstate0", "%s:1,version=%s", st, hw->tpm.version);
}

static int add_agent(const struct vmhw_agent *a, struct pve_params *p) {
        char v[128];
        int n = snprintf(v, sizeof v, "enabled=%d,type=%s", a->enabled ? 1 : 0, a->type);
        if (a->freeze_fs_on_backup != VMHW_UNSET)
                n += snprintf(v + n, sizeof v - (size_t)n, ",freeze-fs-on-backup=%d", (int)a->freeze_fs_on_backup);
        if (a->fstrim_cloned_disks != VMHW_UNSET)
                snprintf(v + n, sizeof v - (size_t)n, ",fstrim_cloned_disks=%d", (int)a->fstrim_cloned_disks);
        return pve_params_add(p, "agent", v);
}

static int add_pci(const struct vmhw_pci *d, size_t i, struct pve_params *p) {
        char key[32], v[192];
        int n = snprintf(v, sizeof v, "mapping=%s", d->mapping);
        if (d->mdev[0])
                n += snprintf(v + n, sizeof v - (size_t)n, ",mdev=%s", d->mdev);
        if (d->pcie)
                n += snprintf(v + n, sizeof v - (size_t)n, ",pcie=1");
        if (d->xvga)
                snprintf(v + n, sizeof v - (size_t)n, ",x-vga=1");
        snprintf(key, sizeof key, "hostpci%zu", i);
        return pve_params_add(p, key, v);
}

int vmhw_params(const struct vmhw *hw, const json_t *config, const char *disk_storage, struct pve_params *p,
                char *err, size_t errlen) {
        int r = 0;
        if (hw->machine[0])
                pve_params_add(p, "machine", hw->machine);
        if (hw->bios != VMHW_BIOS_UNSET)
                pve_params_add(p, "bios", hw->bios == VMHW_BIOS_OVMF ? "ovmf" : "seabios");
        if (hw->bios == VMHW_BIOS_OVMF && !json_object_get(config, "efidisk0"))
                r = add_efidisk(hw, disk_storage, p, err, errlen);
        if (r == 0 && hw->tpm.enabled && !json_object_get(config, "tpmstate0"))
                r = add_tpm(hw, disk_storage, p, err, errlen);
        if (r == 0 && hw->agent.set)
                r = add_agent(&hw->agent, p);
        if (r == 0)
                r = pve_params_add_bool(p, "onboot", hw->onboot);
        for (size_t i = 0; r == 0 && i < hw->n_pci; i++)
                r = add_pci(&hw->pci[i], i, p);
        return r < 0 ? r : p->error;
}
