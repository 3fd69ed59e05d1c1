/* ipam: static node addresses from the pools of a NodeClass's spec.ipam (Proxmox ipconfig style, IPv4 and IPv6,
 * per interface): the pools parsed into typed structs, the addresses in use, the choice of free ones, and the
 * claim's record of them (status.ipconfig) read back into ipconfigN values and the .Network template data. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IPAM_MAX_INTERFACES 8
#define IPAM_MAX_EXCLUDES 32
#define IPAM_MAX_DNS 4
#define IPAM_IPCONFIG_MAX 200 /* one ipconfigN value */
#define IPAM_STATUS_MAX 1024  /* status.ipconfig: the claim's ipconfigN values */

/* An address; IPv4 in b[12..15] (v6 false). */
struct ipam_addr {
        uint8_t b[16];
        bool v6;
};

/* first..last, both in. */
struct ipam_range {
        struct ipam_addr first, last;
};

/* One family's pool of an interface: the subnet, the range handed out, the gateway, what is never handed out. */
struct ipam_pool {
        bool set;
        struct ipam_addr net; /* the subnet's first address */
        unsigned prefix;
        struct ipam_range range; /* default: the subnet without its first address (and its last, for IPv4) */
        bool has_gw;
        struct ipam_addr gw; /* never handed out */
        struct ipam_range exclude[IPAM_MAX_EXCLUDES];
        size_t n_exclude;
};

/* spec.ipam.ipconfig[i]: interface netN gets ipconfigN. */
struct ipam_interface {
        unsigned index; /* N */
        struct ipam_pool v4, v6;
};

/* spec.ipam. */
struct ipam_config {
        struct ipam_interface ifaces[IPAM_MAX_INTERFACES];
        size_t n_ifaces;
        char nameservers[IPAM_MAX_DNS][64];
        size_t n_nameservers;
        char searchdomains[IPAM_MAX_DNS][254];
        size_t n_searchdomains;
};

/* Parse spec.ipam (NULL or absent: no pools, n_ifaces 0). -EINVAL with "ipam.ipconfig[0].ip: ..." in err. */
int ipam_config_parse(const json_t *ipam, struct ipam_config *ret, char *err, size_t errlen);

/* Text of an address (no prefix) into buf (at least 46 bytes). */
const char *ipam_addr_format(const struct ipam_addr *a, char *buf, size_t len);
/* "10.0.0.5" or "fd00::5" (a "/prefix" or "-last" after it is ignored). 0 or -EINVAL. */
int ipam_addr_parse(const char *text, struct ipam_addr *ret);

/* The addresses in use (a sorted set). */
struct ipam_inuse {
        struct ipam_addr *a;
        size_t n, cap;
};
void ipam_inuse_done(struct ipam_inuse *u);
/* Add an address (text; one that does not parse is left out). 0 or -ENOMEM. */
int ipam_inuse_add_text(struct ipam_inuse *u, const char *text);
/* Add the ip= and ip6= addresses of a Proxmox ipconfigN value ("ip=10.0.0.5/24,gw=10.0.0.1,ip6=..."; dhcp and auto
 * are none). 0 or -ENOMEM. */
int ipam_inuse_add_ipconfig(struct ipam_inuse *u, const char *ipconfig);
/* Add the addresses of a claim's status.ipconfig. 0 or -ENOMEM. */
int ipam_inuse_add_status(struct ipam_inuse *u, const char *status);

/* Choose, for every interface and family of cfg, the lowest address of its range that is neither in use, nor
 * excluded, nor the gateway, nor chosen for another interface, and write status.ipconfig (the ipconfigN values,
 * "ipconfig0=ip=10.0.0.5/24,gw=10.0.0.1,ip6=fd00::5/64,gw6=fd00::1", space-separated) into out. 0; -ENOSPC when a
 * pool has no free address, err naming the pool ("ipam.ipconfig[0] (net0) IPv4 pool 10.0.0.2-10.0.0.3: no free
 * address"); -ENOBUFS when out is too small. */
int ipam_allocate(const struct ipam_config *cfg, const struct ipam_inuse *used, char *out, size_t outlen, char *err,
                  size_t errlen);

/* One ipconfigN value of a status.ipconfig. */
struct ipam_ipconfig {
        unsigned index;
        char value[IPAM_IPCONFIG_MAX];
};
/* Split status.ipconfig; returns how many (at most max), or -EINVAL for a malformed one. */
int ipam_status_split(const char *status, struct ipam_ipconfig *out, size_t max);

/* The .Network template data: {"Static": bool, "Interfaces": [{"Name": "net0", "Index": 0, "MAC": (from the VM
 * config's netN, "" when absent), "IPv4", "IPv4CIDR", "Prefix4", "Gateway4", "IPv6", "IPv6CIDR", "Prefix6",
 * "Gateway6"}], "Nameservers": [...], "SearchDomains": [...]} from status.ipconfig (NULL or "": no interface),
 * the class's config (NULL: no DNS) and the VM config (NULL: no MACs). NULL only on ENOMEM. */
json_t *ipam_network_data(const char *status, const struct ipam_config *cfg, const json_t *vm_config);
