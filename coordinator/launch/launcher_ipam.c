/* launcher_ipam: a claim's static addresses from its NodeClass's spec.ipam pools: chosen with the VMID (and
 * recorded in the same status write, before the clone) past every address held by another NodeClaim, a Kubernetes
 * Node, a Proxmox VM of the region or another launch of this process; written into the VM's ipconfigN, nameserver
 * and searchdomain, and given to cloud-init templates as .Network. Free again once the claim is gone. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipam.h"
#include "kube_object.h"
#include "log.h"

static int class_config(struct launcher__ctx *c, struct ipam_config *cfg, char *err, size_t errlen) {
        return ipam_config_parse(json_object_get(kube_nodeclass_of(c->nodeclass).spec, "ipam"), cfg, err, errlen);
}

/* ---- the addresses held by launches of this process that are not recorded yet ---- */

static int hold(struct launcher *l, const char *uid, const char *ipconfig) {
        pthread_mutex_lock(&l->mu);
        int r = json_object_set_new(l->held_addresses, uid, json_string(ipconfig));
        pthread_mutex_unlock(&l->mu);
        return r < 0 ? -ENOMEM : 0;
}

void launcher__addresses_unhold(struct launcher__ctx *c) {
        if (!c->held_addresses)
                return;
        pthread_mutex_lock(&c->l->mu);
        json_object_del(c->l->held_addresses, c->uid);
        pthread_mutex_unlock(&c->l->mu);
        c->held_addresses = false;
}

static int add_held(struct launcher__ctx *c, struct ipam_inuse *used) {
        const char *uid;
        json_t *v;
        int r = 0;
        pthread_mutex_lock(&c->l->mu);
        json_object_foreach(c->l->held_addresses, uid, v)
                if (r == 0 && strcmp(uid, c->uid) != 0)
                        r = ipam_inuse_add_status(used, json_string_value(v));
        pthread_mutex_unlock(&c->l->mu);
        return r;
}

/* ---- the addresses in use ---- */

/* The VMIDs the claims of the region record: their VMs' addresses are the claims' (we configured them). */
struct claimed_vms {
        uint32_t *vmid;
        size_t n;
};

static bool claimed(const struct claimed_vms *cv, json_int_t vmid) {
        for (size_t i = 0; i < cv->n; i++)
                if (cv->vmid[i] == vmid)
                        return true;
        return false;
}

static void note_claimed(struct launcher__ctx *c, const json_t *status, struct claimed_vms *cv) {
        const char *region = json_string_value(json_object_get(status, "region"));
        json_int_t vmid = json_integer_value(json_object_get(status, "vmid"));
        if (vmid > 0 && vmid <= UINT32_MAX && region && strcmp(region, c->region) == 0)
                cv->vmid[cv->n++] = (uint32_t)vmid;
}

/* Every other NodeClaim's status.ipconfig, being deleted or not: an address is free once its claim is gone. */
static struct launchstep_result add_claims(struct launcher__ctx *c, struct ipam_inuse *used, struct claimed_vms *cv) {
        json_t *list = NULL, *e, *items;
        size_t i;
        int r = kube_list(c->kube, &kube_nodeclaims, NULL, NULL, &list);
        if (r < 0)
                return launchstep_error(r, "list NodeClaims: %s", kube_client_error(c->kube));
        items = json_object_get(list, "items");
        if (!(cv->vmid = calloc(json_array_size(items) + 1, sizeof *cv->vmid)))
                r = -ENOMEM;
        json_array_foreach(items, i, e) {
                const char *uid = kube_meta_of(e).uid;
                json_t *status = json_object_get(e, "status");
                if (r == 0 && (!uid || strcmp(uid, c->uid) != 0))
                        r = ipam_inuse_add_status(used, json_string_value(json_object_get(status, "ipconfig")));
                if (r == 0)
                        note_claimed(c, status, cv);
        }
        json_decref(list);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
}

/* Every Node's status.addresses. */
static struct launchstep_result add_nodes(struct launcher__ctx *c, struct ipam_inuse *used) {
        json_t *list = NULL, *n, *a;
        size_t i, j;
        int r = kube_list(c->kube, &kube_nodes, NULL, NULL, &list);
        if (r < 0)
                return launchstep_error(r, "list Nodes: %s", kube_client_error(c->kube));
        json_array_foreach(json_object_get(list, "items"), i, n) {
                json_array_foreach(json_object_get(kube_node_of(n).status, "addresses"), j, a)
                        if (r == 0)
                                r = ipam_inuse_add_text(used, json_string_value(json_object_get(a, "address")));
        }
        json_decref(list);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
}

static int add_vm_config(const json_t *config, struct ipam_inuse *used) {
        const char *k;
        json_t *v;
        int r = 0;
        json_object_foreach((json_t *)config, k, v)
                if (r == 0 && strncmp(k, "ipconfig", 8) == 0)
                        r = ipam_inuse_add_ipconfig(used, json_string_value(v));
        return r;
}

/* The ipconfigN of every VM of the region but the claims' (templates hold pools, not addresses). */
static struct launchstep_result add_vms(struct launcher__ctx *c, struct ipam_inuse *used,
                                        const struct claimed_vms *cv) {
        json_t *list = NULL, *vm;
        size_t i;
        int r = pve_cluster_resources(c->pve, "vm", &list);
        if (r < 0)
                return launchstep_error(r, "GET /cluster/resources: %s", pve_client_error(c->pve));
        json_array_foreach(list, i, vm) {
                json_t *config = NULL;
                const char *node = json_string_value(json_object_get(vm, "node"));
                json_int_t vmid = json_integer_value(json_object_get(vm, "vmid"));
                json_t *tmpl = json_object_get(vm, "template");
                if (r < 0 || !node || vmid <= 0 || vmid > UINT32_MAX || claimed(cv, vmid) || json_is_true(tmpl) ||
                    json_integer_value(tmpl) == 1)
                        continue;
                r = pve_vm_config_get(c->pve, node, (uint32_t)vmid, &config);
                if (r == -ENOENT) /* gone meanwhile */
                        r = 0;
                else if (r == 0)
                        r = add_vm_config(config, used);
                else
                        log_error("launcher: NodeClaim %s: config of VM %lld on %s: %s", c->name, (long long)vmid,
                                  node, pve_client_error(c->pve));
                json_decref(config);
        }
        json_decref(list);
        return r < 0 ? launchstep_error(r, "VM configs of region %s: %s", c->region, strerror(-r)) : launchstep_done();
}

static struct launchstep_result in_use(struct launcher__ctx *c, struct ipam_inuse *used) {
        struct claimed_vms cv = { .n = 0 };
        struct launchstep_result res = add_claims(c, used, &cv);
        if (launchstep_ok(&res))
                res = add_nodes(c, used);
        if (launchstep_ok(&res))
                res = add_vms(c, used, &cv);
        free(cv.vmid);
        int r = launchstep_ok(&res) ? add_held(c, used) : 0;
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : res;
}

/* ---- the choice ---- */

static struct launchstep_result choose(struct launcher__ctx *c, const struct ipam_config *cfg) {
        struct ipam_inuse used = { 0 };
        char err[256] = "", out[sizeof c->st->ipconfig];
        struct launchstep_result res = in_use(c, &used);
        int r = launchstep_ok(&res) ? ipam_allocate(cfg, &used, out, sizeof out, err, sizeof err) : 0;
        ipam_inuse_done(&used);
        if (!launchstep_ok(&res))
                return res;
        if (r == -ENOSPC)
                return launchstep_fail("IPPoolExhausted", "ProxmoxNodeClass %s: %s", kube_meta_of(c->nodeclass).name,
                                       err);
        if (r == 0)
                r = hold(c->l, c->uid, out);
        if (r < 0)
                return launchstep_error(r, "%s", strerror(-r));
        c->held_addresses = true;
        snprintf(c->st->ipconfig, sizeof c->st->ipconfig, "%s", out);
        log_info("launcher: NodeClaim %s: addresses %s", c->name, out);
        return launchstep_done();
}

struct launchstep_result launcher__pick_addresses(struct launcher__ctx *c) {
        struct ipam_config cfg;
        char err[256] = "";
        if (c->st->ipconfig[0])
                return launchstep_done(); /* recorded: the claim's until it is gone */
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (!launchstep_ok(&res))
                return res;
        if (class_config(c, &cfg, err, sizeof err) < 0)
                return launchstep_fail("InvalidNodeClass", "ProxmoxNodeClass %s: %s", kube_meta_of(c->nodeclass).name,
                                       err);
        return cfg.n_ifaces ? choose(c, &cfg) : launchstep_done();
}

/* ---- into the VM config and the cloud-init data ---- */

static void add_joined(struct pve_params *p, const char *key, const char *base, size_t width, size_t n) {
        char buf[1100] = "";
        size_t pos = 0;
        for (size_t i = 0; i < n && pos < sizeof buf; i++)
                pos += (size_t)snprintf(buf + pos, sizeof buf - pos, "%s%s", i ? " " : "", base + i * width);
        if (n)
                pve_params_add(p, key, buf);
}

/* ipconfigN from status.ipconfig; nameserver and searchdomain from the class (with addresses only: the class may
 * have changed since, but its DNS servers are not an address to keep). */
struct launchstep_result launcher__addresses_params(struct launcher__ctx *c, struct pve_params *p) {
        struct ipam_ipconfig ic[IPAM_MAX_INTERFACES];
        struct ipam_config cfg;
        char err[256] = "", key[16];
        if (!c->st->ipconfig[0])
                return launchstep_done();
        int n = ipam_status_split(c->st->ipconfig, ic, IPAM_MAX_INTERFACES);
        if (n < 0)
                return launchstep_fail("InvalidNodeClaim", "status.ipconfig: \"%s\" is malformed", c->st->ipconfig);
        for (int i = 0; i < n; i++) {
                snprintf(key, sizeof key, "ipconfig%u", ic[i].index);
                pve_params_add(p, key, ic[i].value);
        }
        if (c->nodeclass && class_config(c, &cfg, err, sizeof err) == 0) {
                add_joined(p, "nameserver", &cfg.nameservers[0][0], sizeof cfg.nameservers[0], cfg.n_nameservers);
                add_joined(p, "searchdomain", &cfg.searchdomains[0][0], sizeof cfg.searchdomains[0],
                           cfg.n_searchdomains);
        }
        return p->error < 0 ? launchstep_error(p->error, "%s", strerror(-p->error)) : launchstep_done();
}

json_t *launcher__network_data(struct launcher__ctx *c, const json_t *vm_config) {
        struct ipam_config cfg;
        char err[256];
        bool have = c->nodeclass && class_config(c, &cfg, err, sizeof err) == 0;
        return ipam_network_data(c->st->ipconfig, have ? &cfg : NULL, vm_config);
}
