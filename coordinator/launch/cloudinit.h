/* cloudinit: the cloud-init NoCloud seed of a node claim's VM: the template variables, rendering user-data,
 * meta-data and network-config from the NodeClass templates (or the built-in defaults), and the "cidata" ISO. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "gotmpl.h"

/* The taint every new node registers with; the coordinator removes it once the Node is matched to its claim
 * (Karpenter's karpenter.sh/unregistered). */
#define CLOUDINIT_UNREGISTERED_TAINT_KEY "pvescale.io/unregistered"
#define CLOUDINIT_UNREGISTERED_TAINT "pvescale.io/unregistered=true:NoExecute"
#define CLOUDINIT_VOLUME_ID "cidata"
#define CLOUDINIT_MAX_FILE (256 * 1024) /* largest rendered file */

enum cloudinit_file { CLOUDINIT_USER_DATA, CLOUDINIT_META_DATA, CLOUDINIT_NETWORK_CONFIG, CLOUDINIT_N_FILES };

/* Everything the templates can see about one VM. Strings are borrowed; NULL/0 means "not set" where allowed.
 * Required: hostname, vmid, region, zone, bootstrap_token, api_server, root_ca. */
struct cloudinit_node {
        const char *hostname;      /* VM and Node name (RFC 1123 subdomain) */
        uint32_t vmid;             /* Proxmox VM id */
        const char *instance_id;   /* cloud-init instance-id; default: the VMID */
        const char *instance_type; /* shape name, e.g. "t1.2VCPU-6GB" */
        const char *region;        /* Proxmox cluster (region) name */
        const char *zone;          /* Proxmox host (zone) name */
        const char *node_class;    /* NodeClass name */
        const char *const *tags;   /* Proxmox tags */
        size_t n_tags;
        uint32_t cpu;              /* vCPUs */
        uint64_t memory_mib;       /* VM memory */
        uint64_t hugepages_2mi;    /* pages of 2 MiB reserved in the guest */
        uint64_t hugepages_1gi;    /* pages of 1 GiB reserved in the guest */
        const char *kubernetes_version;
        const char *root_ca;         /* cluster CA, PEM */
        const char *bootstrap_token; /* "<6 a-z0-9>.<16 a-z0-9>" */
        const char *api_server;      /* "https://host:port" */
        json_t *kubelet_configuration; /* KubeletConfiguration fields (maxPods, kubeReserved, ...) or NULL */
        json_t *labels;              /* object: node labels for --node-labels, or NULL */
        json_t *taints;              /* array of {"key","value","effect"} for --register-with-taints, or NULL */
        json_t *values;              /* object: the NodeClass valuesRef data, or NULL */
        json_t *network;             /* object: .Network (ipam_network_data), or NULL: no static addresses */
};

/* Build the template data: {"Metadata": {Hostname, InstanceID, InstanceType, ProviderID, Region, Zone, Tags,
 * NodeClass}, "Resources": {CPU, Memory (MiB), HugePages2Mi, HugePages1Gi}, "Kubernetes": {Version, RootCA,
 * BootstrapToken, APIServer, KubeletConfiguration, NodeLabels, Taints, KubeletFlags}, "Values": {...},
 * "Network": {Static, Interfaces, Nameservers, SearchDomains} (ipam.h)}.
 * ProviderID is "proxmox://<region>/<vmid>". Taints always include CLOUDINIT_UNREGISTERED_TAINT. KubeletFlags
 * is the kubelet command line that registers the node as planned: --provider-id, --node-labels,
 * --register-with-taints, and --max-pods/--kube-reserved/--system-reserved/--eviction-hard from the
 * KubeletConfiguration. Pure. Returns 0 and a new object, -EINVAL with "field: reason" in err, or -ENOMEM. */
int cloudinit_data(const struct cloudinit_node *node, json_t **ret_data, char *err, size_t errlen);

/* Template sources by file; NULL entries use the built-in default. */
struct cloudinit_templates {
        const char *text[CLOUDINIT_N_FILES];
};

/* The file names on the ISO ("user-data", "meta-data", "network-config"), also used in error messages. */
const char *cloudinit_file_name(enum cloudinit_file f);

/* A parsed template set (parse once per NodeClass, render per VM). */
struct cloudinit_set;

/* Parse templates (NULL: all defaults). -EINVAL with "user-data:3:7: message" in err, or -ENOMEM. */
int cloudinit_set_new(const struct cloudinit_templates *templates, struct cloudinit_set **ret_set, char *err,
                      size_t errlen);
/* Frees set; accepts NULL. */
void cloudinit_set_free(struct cloudinit_set *set);

/* Rendered files. */
struct cloudinit_files {
        char *text[CLOUDINIT_N_FILES];
        size_t len[CLOUDINIT_N_FILES];
};
void cloudinit_files_done(struct cloudinit_files *files);

/* Render every file with data (from cloudinit_data) using missingkey=default (Go's "<no value>"). Each file
 * must then read as YAML (user-data only when it starts with "#cloud-config"); a file that does not is an
 * error naming the file, line and column. Pure. Returns 0 (files filled; release with cloudinit_files_done),
 * -EINVAL with the message in err, -EFBIG (a file over CLOUDINIT_MAX_FILE), or -ENOMEM. */
int cloudinit_render(const struct cloudinit_set *set, json_t *data, struct cloudinit_files *ret_files, char *err,
                     size_t errlen);

/* Lets a little time pass (a task's sleep: other tasks run meanwhile). */
typedef void (*cloudinit_pause_fn)(void *data);
/* The NoCloud ISO 9660 image in memory: volume id "cidata", Rock Ridge and Joliet, the three files in its
 * root. Uses libisofs, whose process-wide state is set up once; images may be built on several threads. With a
 * pause function, calls it (up to 50 times) while libisofs's writer thread makes the image and reads the image
 * only then (the same image without a thread wake-up per block); without one (NULL), reads as it is written.
 * Returns 0 with a malloc'ed image, -EIO with the libisofs error in err, or -ENOMEM. */
int cloudinit_iso_build(const struct cloudinit_files *files, cloudinit_pause_fn pause, void *pause_data,
                        unsigned char **ret_image, size_t *ret_len, char *err, size_t errlen);

