/* templates: managed VM templates (ProxmoxTemplate): the spec typed, its generation hash, the image's file name, the
 * template VM's config and what one host needs done. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "templates.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "errmsg.h"

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME UINT64_C(0x100000001b3)

static uint64_t fnv(uint64_t h, const char *s) {
        for (const unsigned char *c = (const unsigned char *)s; c && *c; c++)
                h = (h ^ *c) * FNV_PRIME;
        return h;
}

static const char *str(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static int spec_hash(const json_t *spec, char ret[TPL_HASH_LEN]) {
        _cleanup_free_ char *text = json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        snprintf(ret, TPL_HASH_LEN, "%016" PRIx64, fnv(FNV_OFFSET, text));
        return 0;
}

/* <stem>-<8 hex of url and checksum>.<ext>: a new image never overwrites the file of an older one. */
static int image_file(struct tpl_spec *s, char *err, size_t errlen) {
        const char *dot = strrchr(s->image_name, '.');
        uint64_t h = fnv(fnv(fnv(FNV_OFFSET, s->url), "\n"), s->checksum);
        if (!dot || dot == s->image_name || (strcmp(dot, ".qcow2") != 0 && strcmp(dot, ".raw") != 0))
                return errmsg_invalid(err, errlen, "spec.sourceImage.imageName: must end in .qcow2 or .raw");
        int n = snprintf(s->image_file, sizeof s->image_file, "%.*s-%08" PRIx32 "%s", (int)(dot - s->image_name),
                         s->image_name, (uint32_t)(h >> 32), dot);
        if (n < 0 || (size_t)n >= sizeof s->image_file)
                return errmsg_invalid(err, errlen, "spec.sourceImage.imageName: too long");
        return 0;
}

int tpl_spec_decode(const json_t *obj, struct tpl_spec *ret, char *err, size_t errlen) {
        const json_t *spec = json_object_get(obj, "spec"), *src = json_object_get(spec, "sourceImage");
        *ret = (struct tpl_spec){ .name = str(json_object_get(obj, "metadata"), "name"), .spec = spec,
                                  .url = str(src, "url"), .image_name = str(src, "imageName"),
                                  .checksum = str(src, "checksum"), .checksum_type = str(src, "checksumType"),
                                  .storage_ids = json_object_get(spec, "storageIDs"), .region = str(spec, "region") };
        if (!ret->name || !json_is_object(spec))
                return errmsg_invalid(err, errlen, "%s: no name or spec", ret->name ? "spec" : "metadata.name");
        if (!ret->url || !ret->image_name)
                return errmsg_invalid(err, errlen, "spec.sourceImage.%s: required", ret->url ? "imageName" : "url");
        if (json_array_size(ret->storage_ids) == 0)
                return errmsg_invalid(err, errlen, "spec.storageIDs: at least one storage is required");
        if (ret->checksum && !ret->checksum_type)
                ret->checksum_type = "sha256";
        int r = spec_hash(spec, ret->hash);
        if (r < 0)
                return errmsg_set(err, errlen, r, "out of memory");
        snprintf(ret->gen, sizeof ret->gen, "%.8s", ret->hash);
        return image_file(ret, err, errlen);
}

void tpl_build_name(const struct tpl_spec *s, char *buf, size_t len) {
        snprintf(buf, len, "%s-%s", s->name, s->gen);
}

static bool list_has(const char *list, const char *sep, const char *item) {
        size_t n = strlen(item);
        for (const char *p = list; p && *p;) {
                size_t k = strcspn(p, sep);
                if (k == n && strncmp(p, item, n) == 0)
                        return true;
                p += k;
                p += strspn(p, sep);
        }
        return false;
}

static const json_t *storage_entry(const json_t *node_storages, const char *id) {
        size_t i;
        const json_t *e;
        json_array_foreach(node_storages, i, e) {
                const char *sid = str(e, "storage");
                if (sid && strcmp(sid, id) == 0)
                        return e;
        }
        return NULL;
}

const char *tpl_pick_storage(const struct tpl_spec *s, const json_t *node_storages, const char *want) {
        size_t i;
        const json_t *id;
        json_array_foreach(s->storage_ids, i, id) {
                const json_t *e = storage_entry(node_storages, json_string_value(id));
                const json_t *active = json_object_get(e, "active");
                if (e && (!active || json_integer_value(active) != 0) && list_has(str(e, "content"), ",", want))
                        return json_string_value(id);
        }
        return NULL;
}

/* ---- the create call's parameters ---- */

static int put(json_t *p, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int put(json_t *p, const char *key, const char *fmt, ...) {
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof buf)
                return -EINVAL;
        return json_object_set_new(p, key, json_string(buf)) < 0 ? -ENOMEM : 0;
}

static void add_flag(char *buf, size_t len, const json_t *o, const char *key, const char *param) {
        const json_t *v = json_object_get(o, key);
        size_t n = strlen(buf);
        if (json_is_boolean(v) && n < len)
                snprintf(buf + n, len - n, ",%s=%d", param, json_is_true(v) ? 1 : 0);
}

static int put_agent(json_t *p, const json_t *agent) {
        char buf[256];
        if (!json_is_object(agent))
                return 0;
        const json_t *enabled = json_object_get(agent, "enabled");
        const char *type = str(agent, "type");
        snprintf(buf, sizeof buf, "enabled=%d,type=%s", json_is_false(enabled) ? 0 : 1, type ? type : "virtio");
        add_flag(buf, sizeof buf, agent, "fsFreezeOnBackup", "freeze-fs-on-backup");
        add_flag(buf, sizeof buf, agent, "fsTrimClonedDisks", "fstrim_cloned_disks");
        return put(p, "agent", "%s", buf);
}

static int put_cpu_vga(json_t *p, const json_t *spec) {
        const json_t *cpu = json_object_get(spec, "cpu"), *vga = json_object_get(spec, "vga");
        const char *type = str(cpu, "type"), *flags = str(cpu, "flags");
        int r = 0;
        if (json_is_object(cpu))
                r = put(p, "cpu", "%s%s%s", type ? type : "x86-64-v2-AES", flags ? ",flags=" : "", flags ? flags : "");
        if (r == 0 && json_is_object(vga) && json_is_integer(json_object_get(vga, "memory")))
                r = put(p, "vga", "type=%s,memory=%" JSON_INTEGER_FORMAT, str(vga, "type") ? str(vga, "type") : "std",
                        json_integer_value(json_object_get(vga, "memory")));
        else if (r == 0 && json_is_object(vga))
                r = put(p, "vga", "type=%s", str(vga, "type") ? str(vga, "type") : "std");
        return r;
}

static void append(char *buf, size_t len, const char *fmt, const char *v) {
        size_t n = strlen(buf);
        if (v && n < len)
                snprintf(buf + n, len - n, fmt, v);
}

static void append_int(char *buf, size_t len, const char *fmt, const json_t *v) {
        size_t n = strlen(buf);
        if (json_is_integer(v) && n < len)
                snprintf(buf + n, len - n, fmt, json_integer_value(v));
}

static int put_nameservers(json_t *p, const json_t *dns) {
        char buf[512] = "";
        size_t i;
        const json_t *d;
        json_array_foreach(dns, i, d)
                append(buf, sizeof buf, i ? " %s" : "%s", json_string_value(d));
        return buf[0] && !json_object_get(p, "nameserver") ? put(p, "nameserver", "%s", buf) : 0;
}

static int put_nic(json_t *p, size_t index, const json_t *nic) {
        char key[32], net[256] = "", ip[512] = "";
        const char *name = str(nic, "name"), *model = str(nic, "model");
        if (name)
                snprintf(key, sizeof key, "%s", name);
        else
                snprintf(key, sizeof key, "net%zu", index);
        snprintf(net, sizeof net, "%s,bridge=%s", model ? model : "virtio", str(nic, "bridge"));
        if (json_is_true(json_object_get(nic, "firewall")))
                append(net, sizeof net, "%s", ",firewall=1");
        append_int(net, sizeof net, ",mtu=%" JSON_INTEGER_FORMAT, json_object_get(nic, "mtu"));
        append_int(net, sizeof net, ",tag=%" JSON_INTEGER_FORMAT, json_object_get(nic, "vlan"));
        append(ip, sizeof ip, "ip=%s", str(nic, "address4") ? str(nic, "address4") : "dhcp");
        append(ip, sizeof ip, ",gw=%s", str(nic, "gateway4"));
        append(ip, sizeof ip, ",ip6=%s", str(nic, "address6") ? str(nic, "address6") : "auto");
        append(ip, sizeof ip, ",gw6=%s", str(nic, "gateway6"));
        int r = put(p, key, "%s", net);
        char ipkey[48];
        snprintf(ipkey, sizeof ipkey, "ipconfig%s", key + 3);
        if (r == 0)
                r = put(p, ipkey, "%s", ip);
        return r == 0 ? put_nameservers(p, json_object_get(nic, "dnsServers")) : r;
}

static int put_network(json_t *p, const json_t *network) {
        size_t i;
        const json_t *nic;
        if (json_array_size(network) == 0) {
                int r = put(p, "net0", "virtio,bridge=vmbr0");
                return r == 0 ? put(p, "ipconfig0", "ip=dhcp,ip6=auto") : r;
        }
        json_array_foreach(network, i, nic) {
                int r = put_nic(p, i, nic);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int put_pci(json_t *p, const json_t *devices) {
        size_t i;
        const json_t *d;
        json_array_foreach(devices, i, d) {
                char key[32], buf[256] = "";
                snprintf(key, sizeof key, "hostpci%zu", i);
                append(buf, sizeof buf, "mapping=%s", str(d, "mapping"));
                append(buf, sizeof buf, ",mdev=%s", str(d, "mdev"));
                if (json_is_true(json_object_get(d, "pcie")))
                        append(buf, sizeof buf, "%s", ",pcie=1");
                if (json_is_true(json_object_get(d, "xvga")))
                        append(buf, sizeof buf, "%s", ",x-vga=1");
                if (put(p, key, "%s", buf) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int put_tags(json_t *p, const struct tpl_spec *s) {
        char buf[1024];
        size_t i;
        const json_t *t;
        snprintf(buf, sizeof buf, "%s;%s%s", TPL_TAG, TPL_GEN_TAG_PREFIX, s->gen);
        json_array_foreach(json_object_get(s->spec, "tags"), i, t)
                append(buf, sizeof buf, ";%s", json_string_value(t));
        return put(p, "tags", "%s", buf);
}

static int put_base(json_t *p, const struct tpl_spec *s, const char *disk_storage, const char *image_volid) {
        char name[TPL_NAME_MAX];
        const char *machine = str(s->spec, "machine");
        tpl_build_name(s, name, sizeof name);
        int r = put(p, "name", "%s", name);
        if (r == 0)
                r = put(p, "description", "pvescale-template: %s\nspec-hash: %s\nimage: %s", s->name, s->hash,
                        image_volid);
        if (r == 0)
                r = put(p, "scsi0", "%s:0,import-from=%s", disk_storage, image_volid);
        if (r == 0)
                r = put(p, "ide2", "%s:cloudinit", disk_storage);
        if (r == 0)
                r = put(p, "scsihw", "virtio-scsi-single");
        if (r == 0)
                r = put(p, "boot", "order=scsi0");
        if (r == 0)
                r = put(p, "serial0", "socket");
        if (r == 0)
                r = put(p, "ostype", "l26");
        if (r == 0 && machine)
                r = put(p, "machine", "%s", machine);
        return r;
}

json_t *tpl_create_params(const struct tpl_spec *s, const char *disk_storage, const char *image_volid) {
        json_t *p = json_object();
        int r = p ? put_base(p, s, disk_storage, image_volid) : -ENOMEM;
        if (r == 0)
                r = put_tags(p, s);
        if (r == 0)
                r = put_agent(p, json_object_get(s->spec, "agent"));
        if (r == 0)
                r = put_cpu_vga(p, s->spec);
        if (r == 0)
                r = put_network(p, json_object_get(s->spec, "network"));
        if (r == 0)
                r = put_pci(p, json_object_get(s->spec, "pciDevices"));
        if (r < 0) {
                json_decref(p);
                return NULL;
        }
        return p;
}

/* ---- one host ---- */

static bool vm_tagged(const json_t *vm, const char *tag) {
        return list_has(str(vm, "tags"), ";, ", tag);
}

static bool vm_is_template(const json_t *vm) {
        const json_t *t = json_object_get(vm, "template");
        return json_is_true(t) || json_integer_value(t) == 1 ||
               (json_is_string(t) && strcmp(json_string_value(t), "1") == 0);
}

static uint32_t vm_id(const json_t *vm) {
        json_int_t v = json_integer_value(json_object_get(vm, "vmid"));
        return v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
}

static bool named(const json_t *vm, const char *name) {
        const char *n = str(vm, "name");
        return n && strcmp(n, name) == 0;
}

/* The generation of a managed VM from its tag ("" when it has none). */
static void vm_gen(const json_t *vm, char gen[TPL_GEN_LEN]) {
        const char *tags = str(vm, "tags"), *p = tags ? strstr(tags, TPL_GEN_TAG_PREFIX) : NULL;
        gen[0] = '\0';
        if (p)
                snprintf(gen, TPL_GEN_LEN, "%.*s", (int)strcspn(p + strlen(TPL_GEN_TAG_PREFIX), ";, "),
                         p + strlen(TPL_GEN_TAG_PREFIX));
}

static void add_retire(const struct tpl_spec *s, const json_t *vm, struct tpl_host_plan *ret) {
        char gen[TPL_GEN_LEN];
        if (ret->n_retire >= TPL_RETIRE_MAX)
                return;
        vm_gen(vm, gen);
        ret->retire[ret->n_retire] = vm_id(vm);
        snprintf(ret->retire_name[ret->n_retire], TPL_NAME_MAX, "%s-%s", s->name, gen[0] ? gen : "old");
        ret->n_retire++;
}

void tpl_plan_host(const struct tpl_spec *s, const json_t *vm_list, struct tpl_host_plan *ret) {
        char build[TPL_NAME_MAX], gen_tag[64];
        size_t i;
        const json_t *vm;
        uint32_t ready = 0, built = 0, leftover = 0;
        tpl_build_name(s, build, sizeof build);
        snprintf(gen_tag, sizeof gen_tag, "%s%s", TPL_GEN_TAG_PREFIX, s->gen);
        *ret = (struct tpl_host_plan){ .action = TPL_BUILD };
        json_array_foreach(vm_list, i, vm) {
                if (!vm_tagged(vm, TPL_TAG) || !vm_id(vm))
                        continue;
                bool current = vm_tagged(vm, gen_tag), tmpl = vm_is_template(vm);
                if (named(vm, s->name) && current && tmpl && (!ready || vm_id(vm) < ready))
                        ready = vm_id(vm);
                else if (named(vm, s->name) && tmpl)
                        add_retire(s, vm, ret);
                else if (named(vm, build) && current && tmpl)
                        built = vm_id(vm);
                else if (named(vm, build) && !tmpl)
                        leftover = vm_id(vm);
        }
        if (ready) {
                ret->action = TPL_READY;
                ret->vmid = ready;
        } else if (built) {
                ret->action = TPL_FINALIZE;
                ret->vmid = built;
        } else if (leftover) {
                ret->action = TPL_DISCARD;
                ret->vmid = leftover;
        }
}

bool tpl_unused(const json_t *vm, const struct tpl_spec *const *wanted, size_t n_wanted) {
        char build[TPL_NAME_MAX];
        if (!vm_tagged(vm, TPL_TAG) || !vm_is_template(vm) || !vm_id(vm))
                return false;
        for (size_t i = 0; i < n_wanted; i++) {
                tpl_build_name(wanted[i], build, sizeof build);
                if (named(vm, wanted[i]->name) || named(vm, build))
                        return false;
        }
        return true;
}

/* Is file "<stem of image_name>-<8 hex>.<its extension>"? */
static bool image_of(const char *file, const char *image_name) {
        const char *dot = strrchr(image_name, '.');
        size_t stem = dot ? (size_t)(dot - image_name) : 0, len = strlen(file);
        if (!dot || len != stem + 9 + strlen(dot) || strncmp(file, image_name, stem) != 0 || file[stem] != '-')
                return false;
        for (size_t i = stem + 1; i < stem + 9; i++)
                if (!strchr("0123456789abcdef", file[i]) || !file[i])
                        return false;
        return strcmp(file + stem + 9, dot) == 0;
}

bool tpl_stale_image(const char *file, const struct tpl_spec *const *specs, size_t n) {
        bool ours = false;
        for (size_t i = 0; i < n; i++) {
                if (strcmp(file, specs[i]->image_file) == 0)
                        return false;
                ours = ours || image_of(file, specs[i]->image_name);
        }
        return ours;
}
