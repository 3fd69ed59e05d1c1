/* launcher_sync: the fields of a ProxmoxNodeClass that change on its existing VMs in place, without a replacement
 * (the seed's no-drift fields): tags, the resource pool and the firewall security groups. The garbage collection's
 * pass (on the leader, every --gc-interval) brings each joined claim's own VM in line with its class. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "kube_object.h"

static int sync_tags(struct pve_client *pve, const char *node, uint32_t vmid, const json_t *claim,
                     const json_t *spec, const json_t *config, char *errbuf, size_t errlen) {
        struct kube_nodeclaim kc = kube_nodeclaim_of(claim);
        const char *now = json_string_value(json_object_get(config, "tags"));
        struct pve_params p = PVE_PARAMS_INIT;
        int err = 0;
        char *want = launcher_tags(kc.node_pool, kc.meta.name, json_object_get(spec, "tags"), &err);
        if (!want) {
                snprintf(errbuf, errlen, "spec.tags: %s", err == -EINVAL ? "a tag is not a valid Proxmox tag" :
                         strerror(-err));
                return err;
        }
        int r = 0;
        if (!launcher_tags_same(want, now)) {
                pve_params_add(&p, "tags", want);
                r = pve_vm_config_put(pve, node, vmid, &p);
                if (r == 0)
                        log_info("launcher: NodeClaim %s: VM %u on %s tagged %s (was %s), in place", kc.meta.name, vmid,
                                 node, want, now ? now : "none");
                if (r < 0)
                        snprintf(errbuf, errlen, "tags of VM %u: %s", vmid, pve_client_error(pve));
                pve_params_done(&p);
        }
        free(want);
        return r;
}

/* Only a class that names a pool moves its VMs: a VM of a class without one stays where it is. */
static int sync_pool(struct pve_client *pve, const char *node, uint32_t vmid, const char *name, const json_t *spec,
                     const char *pool_now) {
        const char *want = json_string_value(json_object_get(spec, "resourcePool"));
        if (!want || !*want || (pool_now && strcmp(pool_now, want) == 0))
                return 0;
        int r = pve_pool_vm(pve, want, vmid, false);
        if (r == 0)
                log_info("launcher: NodeClaim %s: VM %u on %s moved to pool %s (was %s), in place", name, vmid, node,
                         want, pool_now && *pool_now ? pool_now : "none");
        return r;
}

static int sync_firewall(struct pve_client *pve, const char *node, uint32_t vmid, const char *name,
                         const json_t *spec, char *err, size_t errlen) {
        const json_t *groups = json_object_get(spec, "securityGroups");
        unsigned added = 0;
        if (json_array_size(groups) == 0)
                return 0;
        int r = launcher__firewall_groups(pve, node, vmid, groups, false, &added, err, errlen);
        if (r == 0 && added)
                log_info("launcher: NodeClaim %s: VM %u on %s got %u firewall group rule(s), in place", name, vmid,
                         node, added);
        return r;
}

int launcher__sync_vm(struct pve_client *pve, const char *node, uint32_t vmid, const json_t *claim,
                      const json_t *nodeclass, const json_t *config, const char *pool_now) {
        const json_t *spec = json_object_get(nodeclass, "spec");
        const char *name = kube_nodeclaim_of(claim).meta.name;
        char err[512] = "";
        int r = sync_tags(pve, node, vmid, claim, spec, config, err, sizeof err);
        if (r == 0 && (r = sync_pool(pve, node, vmid, name, spec, pool_now)) < 0)
                snprintf(err, sizeof err, "pool of VM %u: %s", vmid, pve_client_error(pve));
        if (r == 0)
                r = sync_firewall(pve, node, vmid, name, spec, err, sizeof err);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: NodeClaim %s: in-place update of its VM: %s", name ? name : "?", err);
        return r;
}
