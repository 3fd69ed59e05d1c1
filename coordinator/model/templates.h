/* templates: managed VM templates (ProxmoxTemplate): the spec typed, its generation hash, the image's file name, the
 * config of the VM that becomes the template, and what one host needs done. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every managed template carries this tag, and its generation's: "pvescale-tpl-<first 8 hex of the spec hash>". */
#define TPL_TAG "pvescale-template"
#define TPL_GEN_TAG_PREFIX "pvescale-tpl-"
#define TPL_HASH_LEN 17 /* 16 hex digits and NUL */
#define TPL_GEN_LEN 9   /* 8 hex digits and NUL */
#define TPL_NAME_MAX 254
#define TPL_RETIRE_MAX 8

/* A ProxmoxTemplate, borrowing from its JSON. */
struct tpl_spec {
        const char *name;          /* metadata.name: the name of the ready template VM on each host */
        const char *url, *image_name, *checksum, *checksum_type;
        const json_t *storage_ids; /* array of strings, at least one */
        const char *region;        /* NULL: every region a class naming it launches in */
        const json_t *spec;
        char hash[TPL_HASH_LEN];   /* of the whole spec */
        char gen[TPL_GEN_LEN];     /* its first 8 digits */
        char image_file[256];      /* <imageName's stem>-<8 hex of url and checksum>.<ext> */
};

/* Decode a ProxmoxTemplate object. -EINVAL with the field's path in err (e.g. "spec.sourceImage.imageName: ...")
 * when the object lacks what the CRD requires; -ENOMEM. */
int tpl_spec_decode(const json_t *obj, struct tpl_spec *ret, char *err, size_t errlen);

/* The name a template has while it is built (and after, until it replaces the ready one): "<name>-<gen>". */
void tpl_build_name(const struct tpl_spec *s, char *buf, size_t len);

/* The first of the spec's storageIDs whose content (a /nodes/{n}/storage list's "content", comma-separated) has
 * content type want ("import" or "images"), among the storages of that list that are active; NULL when none. */
const char *tpl_pick_storage(const struct tpl_spec *s, const json_t *node_storages, const char *want);

/* The create call's parameters (key -> string) of the VM that becomes the template: its name (the build name),
 * tags, description, the boot disk imported from image_volid onto disk_storage, a cloud-init drive there, serial
 * console, and the spec's machine, agent, cpu, vga, network (ipconfigN, nameserver) and pciDevices. New
 * reference, or NULL on ENOMEM. */
json_t *tpl_create_params(const struct tpl_spec *s, const char *disk_storage, const char *image_volid);

/* What one host needs, from its /nodes/{n}/qemu list. */
enum tpl_action {
        TPL_READY,    /* vmid is the current generation's template, named as the spec */
        TPL_FINALIZE, /* vmid is the current generation's template under its build name: rename it, then retire */
        TPL_DISCARD,  /* vmid is a build that did not become a template: delete it, build at the next pass */
        TPL_BUILD,    /* nothing of the current generation: download, create, convert */
};

struct tpl_host_plan {
        enum tpl_action action;
        uint32_t vmid;
        /* Managed templates named as the spec but of another generation: renamed to "<name>-<their gen>" once the
         * current one has the name (they stay until no linked clone uses them, then go as unused). */
        uint32_t retire[TPL_RETIRE_MAX];
        char retire_name[TPL_RETIRE_MAX][TPL_NAME_MAX];
        size_t n_retire;
};

void tpl_plan_host(const struct tpl_spec *s, const json_t *vm_list, struct tpl_host_plan *ret);

/* True when a /nodes/{n}/qemu entry is a managed template (tagged pvescale-template, template 1) that none of the
 * specs wanted on that host uses: neither named as one of them nor under the build name of its generation. */
bool tpl_unused(const json_t *vm, const struct tpl_spec *const *wanted, size_t n_wanted);

/* True when file (an import volume's file name, "ubuntu-1a2b3c4d.qcow2") is an image the coordinator downloaded for
 * one of specs (its imageName's stem, 8 hex digits, its extension) and none of specs' current image files: a spec's
 * older image, safe to delete. A file of no spec (a deleted ProxmoxTemplate's, or the operator's) is never stale. */
bool tpl_stale_image(const char *file, const struct tpl_spec *const *specs, size_t n);
