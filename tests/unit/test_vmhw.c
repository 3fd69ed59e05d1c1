/* Tests for coordinator/launch/vmhw: a ProxmoxNodeClass's VM hardware parsed from its spec (defaults, every field,
 * errors naming the field) and the Proxmox config parameters written for a clone's config. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "vmhw.h"
#include "testutil.h"

static int parse(const char *spec_text, struct vmhw *hw, char *err, size_t len) {
        json_t *spec = test_json_parse(spec_text);
        int r = vmhw_parse(spec, hw, err, len);
        json_decref(spec);
        return r;
}

/* The parameters of spec for config, encoded as Proxmox gets them ("k=v&..."), or the error text. */
static char *params_of(const char *spec_text, const char *config_text, const char *disk_storage) {
        struct vmhw hw;
        char err[256] = "";
        assert_int_equal(parse(spec_text, &hw, err, sizeof err), 0);
        json_t *config = test_json_parse(config_text);
        struct pve_params p = PVE_PARAMS_INIT;
        int r = vmhw_params(&hw, config, disk_storage, &p, err, sizeof err);
        char *out = r == 0 ? pve_params_encode(&p) : strdup(err);
        pve_params_done(&p);
        json_decref(config);
        return out;
}

static void test_defaults(void **state) {
        (void)state;
        struct vmhw hw;
        char err[256] = "";
        assert_int_equal(vmhw_parse(NULL, &hw, err, sizeof err), 0);
        assert_string_equal(hw.machine, "");
        assert_int_equal(hw.bios, VMHW_BIOS_UNSET);
        assert_false(hw.tpm.enabled);
        assert_false(hw.agent.set);
        assert_true(hw.onboot);
        /* an empty class writes onboot=1 and nothing else: the template's machine, firmware and agent stay */
        char *p = params_of("{\"instanceTemplateRef\": {\"name\": \"t\"}}",
                            "{\"scsi0\": \"local-lvm:base-9-disk-0\"}", "local-lvm");
        assert_string_equal(p, "onboot=1");
        free(p);
}

static void test_every_field(void **state) {
        (void)state;
        char *p = params_of("{\"machine\": \"q35\", \"bios\": \"ovmf\", \"efiDisk\": {\"efiType\": \"4m\","
                            " \"preEnrolledKeys\": true}, \"tpm\": {\"version\": \"v2.0\"},"
                            " \"agent\": {\"enabled\": true, \"type\": \"virtio\", \"fsFreezeOnBackup\": false,"
                            " \"fsTrimClonedDisks\": true}, \"onBoot\": false}",
                            "{\"scsi0\": \"local-lvm:vm-101-disk-0,size=30G\"}", "local-lvm");
        assert_string_equal(p, "machine=q35&bios=ovmf&efidisk0=local-lvm%3A1%2Cefitype%3D4m%2Cpre-enrolled-keys%3D1"
                               "&tpmstate0=local-lvm%3A1%2Cversion%3Dv2.0"
                               "&agent=enabled%3D1%2Ctype%3Dvirtio%2Cfreeze-fs-on-backup%3D0%2Cfstrim_cloned_disks%3D1"
                               "&onboot=0");
        free(p);
}

static void test_own_storage_and_kept_volumes(void **state) {
        (void)state;
        /* the class's storages win over the boot disk's */
        char *p = params_of("{\"bios\": \"ovmf\", \"efiDisk\": {\"storage\": \"nvme\"}, \"tpm\": {\"storage\": \"ceph\","
                            " \"version\": \"v1.2\"}}", "{}", "local-lvm");
        assert_string_equal(p, "bios=ovmf&efidisk0=nvme%3A1%2Cefitype%3D4m%2Cpre-enrolled-keys%3D0"
                               "&tpmstate0=ceph%3A1%2Cversion%3Dv1.2&onboot=1");
        free(p);
        /* a template's EFI disk and TPM state are cloned with it: not added twice */
        p = params_of("{\"bios\": \"ovmf\", \"tpm\": {}}", "{\"efidisk0\": \"local-lvm:vm-1-disk-1,efitype=4m\","
                      " \"tpmstate0\": \"local-lvm:vm-1-disk-2,version=v2.0\"}", "local-lvm");
        assert_string_equal(p, "bios=ovmf&onboot=1");
        free(p);
        /* seabios asks for no EFI disk; agent without enabled turns it on */
        p = params_of("{\"bios\": \"seabios\", \"agent\": {}}", "{}", NULL);
        assert_string_equal(p, "bios=seabios&agent=enabled%3D1%2Ctype%3Dvirtio&onboot=1");
        free(p);
}

static void test_pci_devices(void **state) {
        (void)state;
        char *p = params_of("{\"machine\": \"q35\", \"pciDevices\": [{\"mapping\": \"nvidia\", \"pcie\": true},"
                            " {\"mapping\": \"vgpu\", \"mdev\": \"nvidia-660\", \"xvga\": true}]}", "{}", NULL);
        assert_string_equal(p, "machine=q35&onboot=1&hostpci0=mapping%3Dnvidia%2Cpcie%3D1"
                               "&hostpci1=mapping%3Dvgpu%2Cmdev%3Dnvidia-660%2Cx-vga%3D1");
        free(p);
        /* the template's machine is not known here: pcie is left to Proxmox's start check */
        p = params_of("{\"pciDevices\": [{\"mapping\": \"nvidia\", \"pcie\": true}]}", "{}", NULL);
        assert_string_equal(p, "onboot=1&hostpci0=mapping%3Dnvidia%2Cpcie%3D1");
        free(p);
}

static void test_no_storage(void **state) {
        (void)state;
        char *p = params_of("{\"bios\": \"ovmf\"}", "{}", "");
        assert_non_null(strstr(p, "spec.efiDisk.storage"));
        free(p);
        p = params_of("{\"tpm\": {}}", "{}", NULL);
        assert_non_null(strstr(p, "spec.tpm.storage"));
        free(p);
}

static void test_errors_name_the_field(void **state) {
        (void)state;
        static const struct { const char *spec, *field; } cases[] = {
                { "{\"machine\": \"q36\"}", "spec.machine:" },
                { "{\"machine\": 35}", "spec.machine:" },
                { "{\"machine\": \"pc-q35-8.1+pve0;x\"}", "spec.machine:" },
                { "{\"bios\": \"uefi\"}", "spec.bios:" },
                { "{\"efiDisk\": {\"efiType\": \"8m\"}}", "spec.efiDisk.efiType:" },
                { "{\"efiDisk\": {\"storage\": \"no such\"}}", "spec.efiDisk.storage:" },
                { "{\"efiDisk\": {\"preEnrolledKeys\": \"yes\"}}", "spec.efiDisk.preEnrolledKeys:" },
                { "{\"efiDisk\": 1}", "spec.efiDisk:" },
                { "{\"tpm\": {\"version\": \"2\"}}", "spec.tpm.version:" },
                { "{\"tpm\": true}", "spec.tpm:" },
                { "{\"agent\": {\"type\": \"usb\"}}", "spec.agent.type:" },
                { "{\"agent\": {\"enabled\": 1}}", "spec.agent.enabled:" },
                { "{\"agent\": {\"fsTrimClonedDisks\": null, \"fsFreezeOnBackup\": 0}}",
                  "spec.agent.fsFreezeOnBackup:" },
                { "{\"onBoot\": \"yes\"}", "spec.onBoot:" },
                { "{\"pciDevices\": {}}", "spec.pciDevices:" },
                { "{\"pciDevices\": [1]}", "spec.pciDevices[0]:" },
                { "{\"pciDevices\": [{\"mdev\": \"x\"}]}", "spec.pciDevices[0].mapping:" },
                { "{\"pciDevices\": [{\"mapping\": \"ok\"}, {\"mapping\": \"0bad\"}]}",
                  "spec.pciDevices[1].mapping:" },
                { "{\"pciDevices\": [{\"mapping\": \"gpu\", \"mdev\": \"a,b\"}]}", "spec.pciDevices[0].mdev:" },
                { "{\"pciDevices\": [{\"mapping\": \"gpu\", \"pcie\": 1}]}", "spec.pciDevices[0].pcie:" },
                { "{\"machine\": \"pc\", \"pciDevices\": [{\"mapping\": \"gpu\", \"pcie\": true}]}",
                  "spec.pciDevices[0].pcie:" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                struct vmhw hw = { .machine = "untouched" };
                char err[256] = "";
                assert_int_equal(parse(cases[i].spec, &hw, err, sizeof err), -EINVAL);
                if (strncmp(err, cases[i].field, strlen(cases[i].field)) != 0)
                        fail_msg("%s: error \"%s\" does not start with %s", cases[i].spec, err, cases[i].field);
                assert_string_equal(hw.machine, "untouched"); /* nothing written on a refusal */
        }
}

static void test_machine_types(void **state) {
        (void)state;
        static const char *const ok[] = { "q35", "pc", "pc-i440fx-8.1", "pc-q35-9.0+pve1", "pc-8.1.pxe", "virt" };
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
                char spec[128], err[256] = "";
                struct vmhw hw;
                snprintf(spec, sizeof spec, "{\"machine\": \"%s\"}", ok[i]);
                if (parse(spec, &hw, err, sizeof err) != 0)
                        fail_msg("%s refused: %s", ok[i], err);
                assert_string_equal(hw.machine, ok[i]);
        }
}

static void test_volume_storage(void **state) {
        (void)state;
        char st[VMHW_STORAGE_MAX];
        assert_int_equal(vmhw_volume_storage("local-lvm:vm-100-disk-0,size=30G", st), 0);
        assert_string_equal(st, "local-lvm");
        assert_int_equal(vmhw_volume_storage("file=ceph:base-9-disk-0/vm-100-disk-0", st), 0);
        assert_string_equal(st, "ceph");
        assert_int_equal(vmhw_volume_storage("/dev/sdb", st), -EINVAL);
        assert_int_equal(vmhw_volume_storage("none", st), -EINVAL);
        assert_int_equal(vmhw_volume_storage(NULL, st), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_every_field),
                cmocka_unit_test(test_own_storage_and_kept_volumes),
                cmocka_unit_test(test_pci_devices),
                cmocka_unit_test(test_no_storage),
                cmocka_unit_test(test_errors_name_the_field),
                cmocka_unit_test(test_machine_types),
                cmocka_unit_test(test_volume_storage),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
