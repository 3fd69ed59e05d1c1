/* Tests for coordinator/model/templates: a ProxmoxTemplate decoded (hash, generation, image file, errors naming the
 * field), the template VM's create parameters, and each host's plan (build, discard, finalize with retirement,
 * ready) and which managed templates are unused. */
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

#include "templates.h"
#include "testutil.h"

#define OBJ(spec) "{\"metadata\": {\"name\": \"noble\"}, \"spec\": " spec "}"
#define BASIC "{\"sourceImage\": {\"url\": \"http://h/noble.img\", \"imageName\": \"ubuntu.qcow2\"}, " \
              "\"storageIDs\": [\"local\", \"local-lvm\"]}"

static json_t *decoded(const char *text, struct tpl_spec *s) {
        json_t *o = test_json_parse(text);
        char err[256] = "";
        assert_int_equal(tpl_spec_decode(o, s, err, sizeof err), 0);
        return o;
}

static const char *decode_error(const char *text, char *err, size_t len) {
        json_t *o = test_json_parse(text);
        struct tpl_spec s;
        assert_int_equal(tpl_spec_decode(o, &s, err, len), -EINVAL);
        json_decref(o);
        return err;
}

static void test_decode(void **state) {
        (void)state;
        struct tpl_spec a, b, c;
        json_t *oa = decoded(OBJ(BASIC), &a);
        assert_string_equal(a.name, "noble");
        assert_int_equal(strlen(a.hash), 16);
        assert_int_equal(strlen(a.gen), 8);
        assert_memory_equal(a.hash, a.gen, 8);
        assert_int_equal(strncmp(a.image_file, "ubuntu-", 7), 0);
        assert_int_equal(strlen(a.image_file), strlen("ubuntu-12345678.qcow2"));
        assert_null(a.checksum);
        /* Another URL: another image file and another generation; a tag only: the same image, another generation. */
        json_t *ob = decoded(OBJ("{\"sourceImage\": {\"url\": \"http://h/noble2.img\","
                                 " \"imageName\": \"ubuntu.qcow2\"}, \"storageIDs\": [\"local\", \"local-lvm\"]}"),
                             &b);
        json_t *oc = decoded(OBJ("{\"sourceImage\": {\"url\": \"http://h/noble.img\", \"imageName\": \"ubuntu.qcow2\"},"
                                 " \"storageIDs\": [\"local\", \"local-lvm\"], \"tags\": [\"x\"]}"), &c);
        assert_string_not_equal(a.image_file, b.image_file);
        assert_string_not_equal(a.hash, b.hash);
        assert_string_equal(a.image_file, c.image_file);
        assert_string_not_equal(a.hash, c.hash);
        char name[TPL_NAME_MAX];
        tpl_build_name(&a, name, sizeof name);
        assert_int_equal(strncmp(name, "noble-", 6), 0);
        assert_string_equal(name + 6, a.gen);
        json_decref(oa);
        json_decref(ob);
        json_decref(oc);
}

static void test_decode_errors(void **state) {
        (void)state;
        char err[256];
        assert_string_equal(decode_error(OBJ("{\"storageIDs\": [\"local\"]}"), err, sizeof err),
                            "spec.sourceImage.url: required");
        assert_string_equal(decode_error(OBJ("{\"sourceImage\": {\"url\": \"http://h/i\", \"imageName\": \"u.img\"}, "
                                             "\"storageIDs\": [\"local\"]}"), err, sizeof err),
                            "spec.sourceImage.imageName: must end in .qcow2 or .raw");
        assert_string_equal(decode_error(OBJ("{\"sourceImage\": {\"url\": \"http://h/i\", \"imageName\": \"u.raw\"}, "
                                             "\"storageIDs\": []}"), err, sizeof err),
                            "spec.storageIDs: at least one storage is required");
}

static void test_pick_storage(void **state) {
        (void)state;
        struct tpl_spec s;
        json_t *o = decoded(OBJ(BASIC), &s);
        json_t *st = test_json_parse("[{\"storage\": \"local-lvm\", \"content\": \"images,rootdir\", \"active\": 1},"
                                     " {\"storage\": \"local\", \"content\": \"backup,import,iso\", \"active\": 1}]");
        assert_string_equal(tpl_pick_storage(&s, st, "import"), "local");
        assert_string_equal(tpl_pick_storage(&s, st, "images"), "local-lvm");
        assert_null(tpl_pick_storage(&s, st, "vztmpl"));
        json_decref(st);
        st = test_json_parse("[{\"storage\": \"local\", \"content\": \"iso,importx\", \"active\": 1},"
                             " {\"storage\": \"local-lvm\", \"content\": \"images,import\", \"active\": 0}]");
        assert_null(tpl_pick_storage(&s, st, "import")); /* importx is not import; an inactive storage is none */
        json_decref(st);
        json_decref(o);
}

static void test_create_params(void **state) {
        (void)state;
        struct tpl_spec s;
        json_t *o = decoded(OBJ("{\"sourceImage\": {\"url\": \"http://h/i\", \"imageName\": \"u.qcow2\"},"
                                " \"storageIDs\": [\"local\"], \"machine\": \"q35\","
                                " \"agent\": {\"enabled\": true, \"type\": \"virtio\", \"fsTrimClonedDisks\": false},"
                                " \"cpu\": {\"type\": \"host\", \"flags\": \"+pdpe1gb\"},"
                                " \"vga\": {\"type\": \"serial0\", \"memory\": 16},"
                                " \"network\": [{\"bridge\": \"vmbr1\", \"mtu\": 1500, \"vlan\": 15,"
                                " \"firewall\": true,"
                                " \"address4\": \"10.0.0.5/24\", \"gateway4\": \"10.0.0.1\","
                                " \"dnsServers\": [\"1.1.1.1\", \"9.9.9.9\"]},"
                                " {\"name\": \"net3\", \"model\": \"e1000\","
                                " \"bridge\": \"vmbr2\"}],"
                                " \"pciDevices\": [{\"mapping\": \"gpu\", \"mdev\": \"nvidia-660\", \"pcie\": true}],"
                                " \"tags\": [\"k8s\"]}"), &s);
        json_t *p = tpl_create_params(&s, "local-lvm", "local:import/u-1.qcow2");
        assert_non_null(p);
        char want[64];
        snprintf(want, sizeof want, "noble-%s", s.gen);
        assert_string_equal(json_string_value(json_object_get(p, "name")), want);
        snprintf(want, sizeof want, "pvescale-template;pvescale-tpl-%s;k8s", s.gen);
        assert_string_equal(json_string_value(json_object_get(p, "tags")), want);
        static const char *const EXPECT[][2] = {
                { "scsi0", "local-lvm:0,import-from=local:import/u-1.qcow2" },
                { "ide2", "local-lvm:cloudinit" }, { "boot", "order=scsi0" }, { "serial0", "socket" },
                { "scsihw", "virtio-scsi-single" }, { "machine", "q35" },
                { "agent", "enabled=1,type=virtio,fstrim_cloned_disks=0" }, { "cpu", "host,flags=+pdpe1gb" },
                { "vga", "type=serial0,memory=16" }, { "net0", "virtio,bridge=vmbr1,firewall=1,mtu=1500,tag=15" },
                { "ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1,ip6=auto" }, { "nameserver", "1.1.1.1 9.9.9.9" },
                { "net3", "e1000,bridge=vmbr2" }, { "ipconfig3", "ip=dhcp,ip6=auto" },
                { "hostpci0", "mapping=gpu,mdev=nvidia-660,pcie=1" },
        };
        for (size_t i = 0; i < sizeof EXPECT / sizeof EXPECT[0]; i++) {
                const char *got = json_string_value(json_object_get(p, EXPECT[i][0]));
                if (!got || strcmp(got, EXPECT[i][1]) != 0)
                        fail_msg("%s: got \"%s\", want \"%s\"", EXPECT[i][0], got ? got : "(none)", EXPECT[i][1]);
        }
        json_decref(p);
        json_decref(o);
        /* No network: one virtio NIC on vmbr0 with DHCP; nothing of what the spec does not name. */
        o = decoded(OBJ(BASIC), &s);
        p = tpl_create_params(&s, "local-lvm", "local:import/u.qcow2");
        assert_string_equal(json_string_value(json_object_get(p, "net0")), "virtio,bridge=vmbr0");
        assert_string_equal(json_string_value(json_object_get(p, "ipconfig0")), "ip=dhcp,ip6=auto");
        assert_null(json_object_get(p, "machine"));
        assert_null(json_object_get(p, "agent"));
        assert_null(json_object_get(p, "cpu"));
        assert_null(json_object_get(p, "hostpci0"));
        json_decref(p);
        json_decref(o);
}

static json_t *vm_list(const struct tpl_spec *s, const char *fmt) {
        char text[2048];
        snprintf(text, sizeof text, fmt, s->gen, s->gen, s->gen, s->gen);
        return test_json_parse(text);
}

static void test_plan_host(void **state) {
        (void)state;
        struct tpl_spec s;
        struct tpl_host_plan p;
        json_t *o = decoded(OBJ(BASIC), &s);
        /* Nothing, or only a hand-made template of that name (no pvescale-template tag): build. */
        json_t *l = test_json_parse("[{\"vmid\": 9000, \"name\": \"noble\", \"template\": 1, \"tags\": \"k8s\"}]");
        tpl_plan_host(&s, l, &p);
        assert_int_equal(p.action, TPL_BUILD);
        assert_int_equal(p.n_retire, 0);
        json_decref(l);
        /* A build that did not become a template: discard it. */
        l = vm_list(&s, "[{\"vmid\": 120, \"name\": \"noble-%s\", \"tags\": \"pvescale-template;pvescale-tpl-%s\"}]");
        tpl_plan_host(&s, l, &p);
        assert_int_equal(p.action, TPL_DISCARD);
        assert_int_equal(p.vmid, 120);
        json_decref(l);
        /* Built, under its build name, with an older generation named noble: finalize, retiring the old one. */
        l = vm_list(&s, "[{\"vmid\": 120, \"name\": \"noble-%s\", \"template\": 1,"
                        " \"tags\": \"pvescale-template;pvescale-tpl-%s\"},"
                        " {\"vmid\": 101, \"name\": \"noble\", \"template\": 1,"
                        " \"tags\": \"pvescale-template;pvescale-tpl-0badf00d\"}]");
        tpl_plan_host(&s, l, &p);
        assert_int_equal(p.action, TPL_FINALIZE);
        assert_int_equal(p.vmid, 120);
        assert_int_equal(p.n_retire, 1);
        assert_int_equal(p.retire[0], 101);
        assert_string_equal(p.retire_name[0], "noble-0badf00d");
        json_decref(l);
        /* Ready (whatever the tags' separators and order). */
        l = vm_list(&s, "[{\"vmid\": 130, \"name\": \"noble\", \"template\": 1,"
                        " \"tags\": \"k8s;pvescale-tpl-%s;pvescale-template\"}]");
        tpl_plan_host(&s, l, &p);
        assert_int_equal(p.action, TPL_READY);
        assert_int_equal(p.vmid, 130);
        json_decref(l);
        json_decref(o);
}

static void test_unused(void **state) {
        (void)state;
        struct tpl_spec s;
        json_t *o = decoded(OBJ(BASIC), &s);
        const struct tpl_spec *wanted[] = { &s };
        json_t *l = vm_list(&s, "[{\"vmid\": 130, \"name\": \"noble\", \"template\": 1,"
                                " \"tags\": \"pvescale-template\"},"
                                " {\"vmid\": 131, \"name\": \"noble-%s\", \"template\": 1,"
                                " \"tags\": \"pvescale-template\"},"
                                " {\"vmid\": 132, \"name\": \"noble-0badf00d\", \"template\": 1,"
                                " \"tags\": \"pvescale-template\"},"
                                " {\"vmid\": 133, \"name\": \"other\", \"template\": 1, \"tags\": \"k8s\"},"
                                " {\"vmid\": 134, \"name\": \"gone\", \"tags\": \"pvescale-template\"}]");
        bool want[] = { false, false, true, false, false };
        for (size_t i = 0; i < 5; i++)
                assert_int_equal(tpl_unused(json_array_get(l, i), wanted, 1), want[i]);
        assert_true(tpl_unused(json_array_get(l, 0), NULL, 0)); /* no class uses it any more */
        json_decref(l);
        json_decref(o);
}

static void test_stale_image(void **state) {
        (void)state;
        struct tpl_spec s;
        json_t *o = decoded(OBJ(BASIC), &s);
        const struct tpl_spec *specs[] = { &s };
        assert_false(tpl_stale_image(s.image_file, specs, 1));            /* the current one */
        assert_true(tpl_stale_image("ubuntu-0badf00d.qcow2", specs, 1));  /* an older image of it */
        assert_false(tpl_stale_image("ubuntu-0badf00d.raw", specs, 1));   /* another extension */
        assert_false(tpl_stale_image("ubuntu-0BADF00D.qcow2", specs, 1)); /* not one of ours */
        assert_false(tpl_stale_image("ubuntu-0badf0.qcow2", specs, 1));
        assert_false(tpl_stale_image("ubuntu.qcow2", specs, 1));
        assert_false(tpl_stale_image("debian-0badf00d.qcow2", specs, 1)); /* no spec's */
        assert_false(tpl_stale_image("ubuntu-0badf00d.qcow2", NULL, 0));  /* no spec at all: kept */
        json_decref(o);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_decode),          cmocka_unit_test(test_decode_errors),
                cmocka_unit_test(test_pick_storage),    cmocka_unit_test(test_create_params),
                cmocka_unit_test(test_plan_host),       cmocka_unit_test(test_unused),
                cmocka_unit_test(test_stale_image),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
