/* launcher_steps: the actions from a claim not begun (reserve on the host's agent, or by PVE accounting without
 * one, and pick the addresses and a VMID), from Reserved (pick them), from VMIDAllocated (clone) and from Cloning
 * (wait for the clone), and the configuration of the clone (boot disk, cloud-init, VM config, firewall). Every
 * action can run again after a crash and finds what an earlier run left; what one reconcile does in a row is
 * recorded once. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fiber.h"
#include "http_client.h"
#include "log.h"
#include "tokens.h"
#include "kube_object.h"
#include "vmhw.h"

#define MIB (1024ULL * 1024ULL)

static json_t *nc_spec(const struct launcher__ctx *c) {
        return json_object_get(c->nodeclass, "spec");
}

static struct launchstep_result errno_result(int r) {
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
}

/* ---- reserve ---- */

static bool agent_unreachable(int r) {
        return r == -ECONNREFUSED || r == -ETIMEDOUT || r == -EHOSTUNREACH || r == -ECONNRESET || r == -EHOSTDOWN ||
               r == -ENETUNREACH;
}

/* Reserved (st has the reservation): pick the static addresses (spec.ipam) and a VMID now too, so that one write
 * (VMIDAllocated, the step table's) records them all, before the clone; a pool without a free address fails the
 * launch; without a VMID, Reserved is recorded alone, and the pick's error returned. The claim's place and
 * the shape's capacity and allocatable go with it, unless its status has them (the provisioner writes them itself
 * only when no launcher runs). A crash before the write leaves a reservation the agent gives back to the same
 * owner. */
static struct launchstep_result reserved(struct launcher__ctx *c) {
        uint32_t vmid;
        if (!c->st->host[0])
                nodeclaim_set_placement(c->st, c->host, c->region, &c->shape);
        struct launchstep_result res = launcher__pick_addresses(c);
        if (launchstep_ok(&res))
                res = launcher__pick_vmid(c, &vmid);
        if (res.kind == LAUNCHSTEP_FAIL)
                return res;
        if (!launchstep_ok(&res))
                return launchstep_then(launcher__record(c, NODECLAIM_STEP_RESERVED), res);
        launchstep_vmid_picked(c->st, c->region, vmid, c->now);
        return res;
}

/* ERROR -ENOTCONN: the agent cannot be reached (the caller may fall back to Proxmox's accounting). */
/* Per pciDevices entry of the class, the paths of its mapping on the claim's host, in the order Proxmox tries them
 * at the start (the agent keeps the VM near their NUMA node when they share one). *ret NULL without pciDevices. */
static struct launchstep_result pci_paths(struct launcher__ctx *c, json_t **ret) {
        struct vmhw hw;
        char err[256];
        json_t *maps = NULL, *out;
        struct launchstep_result res = launcher__need_nodeclass(c);
        *ret = NULL;
        if (!launchstep_ok(&res))
                return res;
        if (vmhw_parse(nc_spec(c), &hw, err, sizeof err) < 0)
                return launchstep_fail("InvalidNodeClass", "%s", err);
        if (hw.n_pci == 0)
                return launchstep_done();
        if (pve_pci_mappings(c->pve, &maps) < 0)
                return launchstep_error(-EIO, "PCI mappings: %s", pve_client_error(c->pve));
        out = json_array();
        for (size_t i = 0; out && i < hw.n_pci; i++) {
                json_t *paths = pve_mapping_paths(maps, hw.pci[i].mapping, c->host);
                if (json_array_size(paths) > 0) /* none: Proxmox refuses the start, naming the mapping */
                        json_array_append(out, paths);
                json_decref(paths);
        }
        json_decref(maps);
        *ret = out;
        return out ? launchstep_done() : launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
}

static struct launchstep_result reserve_with_agent(struct launcher__ctx *c) {
        char owner[254];
        json_t *res = NULL, *pci = NULL;
        struct launchstep_result step = pci_paths(c, &pci);
        if (!launchstep_ok(&step))
                return step;
        int r = launcher_owner(c->name, c->uid, owner, sizeof owner);
        if (r == 0) { /* the owner is the agent's idempotency key: a retry gets the reservation made before */
                struct agents_reserve req = { .vcpus = c->shape.vcpus, .memory_bytes = c->shape.vm_memory_bytes,
                                              .ttl_seconds = (unsigned)c->l->o.reservation_ttl_s, .owner = owner,
                                              .pci_devices = pci };
                r = agents_reserve(c->agent, &req, &res);
        }
        json_decref(pci);
        if (agent_unreachable(r)) {
                bool fallback = config_agent_fallback_proxmox(c->l->env.cfg);
                log_error("launcher: NodeClaim %s: agent on %s unreachable (%s); %s", c->name, c->host,
                          agents_client_error(c->agent),
                          fallback ? "accounting from Proxmox data" : "no fallback: trying again later");
                return launchstep_error(-ENOTCONN, "agent on %s unreachable", c->host);
        }
        if (r == -ENOSPC)
                return launchstep_fail("InsufficientCapacity", "host %s: %s", c->host, agents_client_error(c->agent));
        if (r < 0)
                return launchstep_error(r, "agent on %s: %s", c->host, agents_client_error(c->agent));
        r = launchstep_reserved_by_agent(c->st, res);
        json_decref(res);
        return r < 0 ? launchstep_error(-EINVAL, "agent on %s: malformed reservation", c->host) : reserved(c);
}

/* ---- reserve without an agent: host room from /nodes/{n}/status and the VM list, minus in-flight claims ---- */

struct inflight {
        int64_t cpus, bytes;
        uint32_t skip[512];
        size_t n_skip;
        struct nodeclaim_status *status; /* scratch: the other claim's, decoded */
};

static const char *meta_or_empty(const json_t *o, const char *key) {
        const char *s = kube_meta_str(o, key);
        return s ? s : "";
}

/* A claim not begun yet has its place in its requirements only. */
static bool same_host(const struct launcher__ctx *c, const json_t *other) {
        const char *h = nodeclaim_host(other), *r = nodeclaim_region(other);
        return h && r && strcmp(h, c->host) == 0 && strcmp(r, c->region) == 0;
}

static int other_shape(struct launcher__ctx *c, const json_t *other, struct shape *ret) {
        struct launcher__ctx o = { .l = c->l, .kube = c->kube, .claim = (json_t *)other };
        struct launchstep_result res = launcher__need_shape(&o);
        if (launchstep_ok(&res))
                *ret = o.shape;
        json_decref(o.nodeclass);
        return launchstep_ok(&res) ? 0 : -EINVAL;
}

static void count_claim(struct launcher__ctx *c, const json_t *other, struct inflight *in) {
        struct nodeclaim_status *st = in->status;
        struct shape s = { .vcpus = 0 };
        if (strcmp(meta_or_empty(other, "uid"), c->uid) == 0 || !same_host(c, other) || kube_deleting(other))
                return;
        nodeclaim_claim_status(other, st, NULL, 0);
        if (!launchstep_holds_room(st->launch_step, meta_or_empty(other, "creationTimestamp"),
                                   meta_or_empty(other, "name"), meta_or_empty(c->claim, "creationTimestamp"),
                                   c->name) ||
            other_shape(c, other, &s) < 0)
                return;
        in->cpus += s.vcpus;
        in->bytes += (int64_t)s.vm_memory_bytes;
        if (st->vmid > 0 && in->n_skip < sizeof in->skip / sizeof in->skip[0])
                in->skip[in->n_skip++] = st->vmid;
}

static struct launchstep_result inflight_claims(struct launcher__ctx *c, struct inflight *in) {
        json_t *list = NULL, *e;
        size_t i;
        int r = kube_list(c->kube, &kube_nodeclaims, NULL, NULL, &list);
        if (r < 0)
                return launchstep_error(r, "list NodeClaims: %s", kube_client_error(c->kube));
        in->status = malloc(sizeof *in->status);
        json_array_foreach(json_object_get(list, "items"), i, e)
                if (in->status)
                        count_claim(c, e, in);
        json_decref(list);
        r = in->status ? 0 : -ENOMEM;
        free(in->status);
        return errno_result(r);
}

static struct launchstep_result pve_room(struct launcher__ctx *c, struct launcher_room *ret) {
        json_t *status = NULL, *vms = NULL;
        struct inflight in = { 0 };
        int r = pve_node_status(c->pve, c->host, &status);
        if (r == 0)
                r = pve_vm_list(c->pve, c->host, &vms);
        struct launchstep_result res = r < 0 ? launchstep_error(r, "host %s: %s", c->host, pve_client_error(c->pve))
                                             : inflight_claims(c, &in);
        if (launchstep_ok(&res) &&
            (r = launcher_room_from_pve(status, vms, in.skip, in.n_skip, in.cpus, in.bytes, ret)) < 0)
                res = launchstep_error(r, "host %s: unreadable status", c->host);
        json_decref(status);
        json_decref(vms);
        return res;
}

static struct launchstep_result reserve_from_pve(struct launcher__ctx *c) {
        struct launcher_room room;
        struct launchstep_result res = pve_room(c, &room);
        if (!launchstep_ok(&res))
                return res;
        if (room.cpus < (int64_t)c->shape.vcpus || room.memory_bytes < (int64_t)c->shape.vm_memory_bytes)
                return launchstep_fail("InsufficientCapacity",
                                       "host %s: %lld CPUs and %lld MiB free (Proxmox accounting), %u and %llu needed",
                                       c->host, (long long)room.cpus, (long long)(room.memory_bytes / (int64_t)MIB),
                                       c->shape.vcpus, (unsigned long long)(c->shape.vm_memory_bytes / MIB));
        int r = launchstep_reserved_by_pve(c->st);
        return r < 0 ? errno_result(r) : reserved(c);
}

struct launchstep_result launcher__reserve(struct launcher__ctx *c) {
        int64_t until;
        /* defence in depth: the provisioner leaves backed-off hosts out, and a claim made anyway waits */
        if (launcher_backoff_active(c->l, c->nodepool, c->host, c->now, &until)) {
                log_info("launcher: NodeClaim %s: node pool %s on %s is backed off for %lld ms; waiting", c->name,
                         c->nodepool, c->host, (long long)(until - c->now));
                return launchstep_wait(until - c->now);
        }
        struct launchstep_result res = launcher__need_shape(c);
        if (launchstep_ok(&res))
                res = launcher__need_pve(c);
        if (!launchstep_ok(&res))
                return res;
        if (c->agent) {
                res = reserve_with_agent(c);
                /* static policy: a VM is never placed unpinned unless agents.fallback says so */
                if (!launchstep_is_error(&res, -ENOTCONN) || !config_agent_fallback_proxmox(c->l->env.cfg))
                        return res;
        }
        return reserve_from_pve(c);
}

/* ---- VMID ---- */

struct launchstep_result launcher__allocate_vmid(struct launcher__ctx *c) {
        uint32_t vmid;
        struct launchstep_result res = launcher__need_pve(c);
        if (launchstep_ok(&res))
                res = launcher__pick_addresses(c);
        if (launchstep_ok(&res))
                res = launcher__pick_vmid(c, &vmid);
        if (launchstep_ok(&res))
                launchstep_vmid_picked(c->st, c->region, vmid, c->now);
        return res;
}

/* Give up the VMID (someone else has it) and pick another. */
static struct launchstep_result repick_vmid(struct launcher__ctx *c, uint32_t vmid) {
        log_info("launcher: NodeClaim %s: VMID %u is taken by another VM; picking another", c->name, vmid);
        launchstep_vmid_dropped(c->st);
        return launchstep_then(launcher__record(c, NODECLAIM_STEP_RESERVED), launchstep_moved());
}

/* ---- clone ---- */

static struct launchstep_result wait_for_clone(struct launcher__ctx *c) {
        return launchstep_clone_wait(c->st->clone_started_ms, c->now, c->l->o.clone_timeout_ms, c->st->vmid);
}

/* Proxmox said the clone still runs: the pause until the next poll is its time, not ours. */
static struct launchstep_result wait_for_running_clone(struct launcher__ctx *c) {
        struct launchstep_result res = wait_for_clone(c);
        if (res.kind == LAUNCHSTEP_WAIT)
                http_client_thread_wait_note(res.requeue_ms * 1000);
        return res;
}

static struct launchstep_result resize_boot_disk(struct launcher__ctx *c, uint32_t vmid, const json_t *config) {
        const char *size = kube_nodeclass_of(c->nodeclass).boot_device_size;
        char arg[32], key[16], *upid = NULL;
        uint64_t want, have;
        if (!size)
                return launchstep_done();
        if (launcher_disk_size(size, arg, &want) < 0)
                return launchstep_fail("InvalidNodeClass", "spec.bootDevice.size: invalid size \"%s\"", size);
        if (launcher_boot_disk(config, key, &have) < 0)
                return launchstep_fail("InvalidTemplate", "the template has no boot disk");
        if (want <= have)
                return launchstep_done();
        int r = pve_vm_resize(c->pve, c->host, vmid, key, arg, &upid);
        if (r < 0)
                return launchstep_error(r, "resize %s of VM %u: %s", key, vmid, pve_client_error(c->pve));
        struct launchstep_result res = launcher__task_wait(c, "resize", upid, LAUNCHER__POLL_SOON_MS);
        free(upid);
        return res;
}

static struct launchstep_result configure(struct launcher__ctx *c, uint32_t vmid, const json_t *config);

/* The VM is configured: what the next status write records (ISO volume and token id may be empty); the step
 * table defers Configured. */
static struct launchstep_result configured(struct launcher__ctx *c, const char *volume, const char *token_id) {
        struct nodeclaim_status *st = c->st;
        st->clone_task[0] = '\0';
        if (c->image_id[0]) {
                snprintf(st->image_id, sizeof st->image_id, "%s", c->image_id);
                snprintf(st->image_digest, sizeof st->image_digest, "%s", c->image_digest);
        }
        if (volume[0])
                snprintf(st->iso_volume, sizeof st->iso_volume, "%s", volume);
        if (token_id[0])
                snprintf(st->token_id, sizeof st->token_id, "%s", token_id);
        return launchstep_done();
}

/* A run that ended between the start and its record left the VM running, configured: take what configure
 * would record from its config (the ISO on ide2; the token id, derived from the claim UID) and go on to bind. */
static struct launchstep_result resume_running(struct launcher__ctx *c, const json_t *config) {
        char id[TOKENS_ID_LEN + 1] = "", volume[LAUNCHER__VOLUME_MAX];
        launchstep_cdrom_volume(json_string_value(json_object_get(config, "ide2")), volume, sizeof volume);
        if (launcher__joins_by_cdrom(c) && tokens_id_for(c->uid, id) < 0)
                id[0] = '\0';
        log_info("launcher: NodeClaim %s: VM %lld runs already", c->name, (long long)c->st->vmid);
        return configured(c, volume, id);
}

/* The clone exists and is done: bind the reservation to it, resize its boot disk, then configure the VM. Never
 * configured before (no tag of the claim), it has never run either; else an earlier run ended before its next
 * record, and the VM may run. The bind comes first so that the agent counts the VM on its reservation from now
 * on, not also as a VM without pinning (which would charge its vCPUs twice until the start); the agent pins it
 * when QEMU is up. */
static struct launchstep_result finish_clone(struct launcher__ctx *c, uint32_t vmid, const json_t *config) {
        bool running = false;
        struct launchstep_result res = launcher__need_nodeclass(c);
        c->vm_fresh = !launcher_config_tagged(config, c->name);
        if (launchstep_ok(&res) && !c->vm_fresh)
                res = launcher__vm_running(c, vmid, &running);
        if (launchstep_ok(&res) && running)
                return resume_running(c, config);
        if (launchstep_ok(&res))
                res = launcher__bind_reservation(c);
        if (launchstep_ok(&res))
                res = resize_boot_disk(c, vmid, config);
        return launchstep_ok(&res) ? configure(c, vmid, config) : res;
}

static struct launchstep_result find_template_ask(struct launcher__ctx *c, const json_t *ref, uint32_t *ret_vmid) {
        json_t *list = NULL;
        const char *name = json_string_value(json_object_get(ref, "name"));
        const char *tag = json_string_value(json_array_get(json_object_get(ref, "tags"), 0));
        int r = pve_vm_list(c->pve, c->host, &list);
        if (r < 0)
                return launchstep_error(r, "VMs of %s: %s", c->host, pve_client_error(c->pve));
        r = pve_find_template_ref(list, ref, ret_vmid);
        json_decref(list);
        if (r < 0 && launcher_template_managed(ref)) /* the coordinator's GC pass builds it: try again later */
                return launchstep_error(-EAGAIN, "the managed template %s is not built on host %s yet (ProxmoxTemplate"
                                        " status)", name ? name : "", c->host);
        if (r < 0 && name)
                return launchstep_fail("TemplateNotFound", "no template %s on host %s", name, c->host);
        if (r < 0)
                return launchstep_fail("TemplateNotFound", "no template with tags %s on host %s", tag ? tag : "",
                                       c->host);
        return launchstep_done();
}

/* The cache key of the template a NodeClass names on this host; 0 or -ENOMEM. */
static int template_key(const struct launcher__ctx *c, const json_t *ref, char *key, size_t len) {
        char *text = json_dumps(ref, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text)
                return -ENOMEM;
        snprintf(key, len, "template/%s/%s/%s", c->region, c->host, text);
        free(text);
        return 0;
}

/* The template VMID cached under key; false when none (or not a VMID). */
static bool cached_template(struct launcher__ctx *c, const char *key, uint32_t *ret_vmid) {
        char *cached = launcher__cache_get(&c->l->cache, key, c->now), *end = NULL;
        unsigned long v = cached ? strtoul(cached, &end, 10) : 0;
        bool ok = end && *end == '\0' && v > 0 && v <= UINT32_MAX;
        free(cached);
        if (ok)
                *ret_vmid = (uint32_t)v;
        return ok;
}

/* The template's VMID: cached for a minute per host (a clone that fails forgets it). */
static struct launchstep_result find_template(struct launcher__ctx *c, uint32_t *ret_vmid) {
        json_t *ref = json_object_get(nc_spec(c), "instanceTemplateRef");
        char key[1024];
        bool keyed = template_key(c, ref, key, sizeof key) == 0;
        if (keyed && cached_template(c, key, ret_vmid))
                return launchstep_done();
        struct launchstep_result res = find_template_ask(c, ref, ret_vmid);
        if (launchstep_ok(&res) && keyed) {
                char v[16];
                snprintf(v, sizeof v, "%u", *ret_vmid);
                launcher__cache_put(&c->l->cache, key, v, c->now);
        }
        return res;
}

static void forget_template(struct launcher__ctx *c) {
        char key[1024];
        if (template_key(c, json_object_get(nc_spec(c), "instanceTemplateRef"), key, sizeof key) == 0)
                launcher__cache_drop(&c->l->cache, key);
}

static void clone_options(struct launcher__ctx *c, struct pve_clone *o) {
        json_t *boot = json_object_get(nc_spec(c), "bootDevice");
        o->name = c->name;
        o->pool = json_string_value(json_object_get(nc_spec(c), "resourcePool"));
        o->storage = json_string_value(json_object_get(boot, "storage"));
        o->full = o->storage != NULL; /* a linked clone stays on the template's storage */
}

static struct launchstep_result clone_ended(struct launcher__ctx *c, uint32_t vmid, const struct pve_task_status *ts);
static struct launchstep_result cloned(struct launcher__ctx *c, uint32_t vmid, const json_t *config);

/* The clone's config, read soon after the clone began: NULL while Proxmox still holds its "clone" lock (or the
 * read failed). Proxmox drops that lock as the clone's last step, so a config without it is a finished clone,
 * and the task needs no poll; with a resource pool the VM joins the pool after that, and can still fail there,
 * so the task is polled instead. */
static json_t *settled_clone_config(struct launcher__ctx *c, uint32_t vmid) {
        json_t *config = NULL;
        if (json_object_get(nc_spec(c), "resourcePool") || pve_vm_config_get(c->pve, c->host, vmid, &config) < 0)
                return NULL;
        if (!json_object_get(config, "lock"))
                return config;
        json_decref(config);
        return NULL;
}

/* Poll a clone this reconcile just began, for a short while (LAUNCHER__CLONE_INLINE_MS): a linked clone on fast
 * storage is done by then, and is then not recorded as Cloning. 0 when it ended, with *ret_config when its config
 * says so or else ts from its task; 1 while it runs; 2 when a poll failed. */
static int clone_poll_inline(struct launcher__ctx *c, uint32_t vmid, const char *upid, struct pve_task_status *ts,
                             json_t **ret_config) {
        for (long nap = 10, waited = 0;; waited += nap, nap *= 2) {
                if (waited + nap > LAUNCHER__CLONE_INLINE_MS)
                        return 1;
                fiber_sleep_ms(nap);
                http_client_thread_wait_note(nap * 1000); /* the clone's time, not ours */
                if ((*ret_config = settled_clone_config(c, vmid)))
                        return 0;
                int r = pve_task_status(c->pve, upid, ts);
                if (r < 0)
                        return 2; /* the Cloning record keeps the task; the next reconcile polls again */
                if (!ts->running)
                        return 0;
        }
}

/* The clone was sent (its task upid): done within a short while, it goes on at once; else Cloning is recorded.
 * A crash before that write is no loss: the VM's description names the claim, and the next run finds it. */
static struct launchstep_result follow_clone(struct launcher__ctx *c, uint32_t vmid, const char *upid) {
        struct pve_task_status ts;
        json_t *config = NULL;
        int polled = clone_poll_inline(c, vmid, upid, &ts, &config);
        if (polled == 0) {
                struct launchstep_result res = config ? cloned(c, vmid, config) : clone_ended(c, vmid, &ts);
                json_decref(config);
                return res;
        }
        if (strlen(upid) >= sizeof c->st->clone_task)
                return launchstep_error(-E2BIG, "clone task %s: too long to record", upid);
        snprintf(c->st->clone_task, sizeof c->st->clone_task, "%s", upid);
        snprintf(c->st->image_id, sizeof c->st->image_id, "%s", c->image_id);
        snprintf(c->st->image_digest, sizeof c->st->image_digest, "%s", c->image_digest);
        struct launchstep_result res = launcher__record(c, NODECLAIM_STEP_CLONING);
        if (!launchstep_ok(&res))
                return res;
        return polled == 1 ? wait_for_running_clone(c) : wait_for_clone(c);
}

static int send_clone(struct launcher__ctx *c, uint32_t tmpl, uint32_t vmid, char **ret_upid) {
        char *desc = launcher_description(c->name, c->uid, c->st->clone_started_ms ?: c->now, c->st->reservation_id,
                                          c->st->placement.cpus);
        struct pve_clone o = { .newid = vmid, .description = desc };
        clone_options(c, &o);
        int r = desc ? pve_vm_clone(c->pve, c->host, tmpl, &o, ret_upid) : -ENOMEM;
        free(desc);
        return r;
}

/* The template's config digest (PVE's: the SHA-1 of its config file), read just before the clone and recorded with
 * imageID: the scale-down pass compares it with the template's digest of the day (TemplateDrifted). A template gone
 * meanwhile is forgotten, so that the next attempt looks it up again. */
static struct launchstep_result template_digest(struct launcher__ctx *c, uint32_t tmpl) {
        json_t *config = NULL;
        int r = pve_vm_config_get(c->pve, c->host, tmpl, &config);
        if (r < 0) {
                forget_template(c);
                return launchstep_error(r, "config of template %u on %s: %s", tmpl, c->host, pve_client_error(c->pve));
        }
        const char *digest = json_string_value(json_object_get(config, "digest"));
        snprintf(c->image_digest, sizeof c->image_digest, "%s", digest ? digest : "");
        json_decref(config);
        return launchstep_done();
}

static struct launchstep_result issue_clone(struct launcher__ctx *c, uint32_t vmid) {
        uint32_t tmpl;
        char *upid = NULL;
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (launchstep_ok(&res))
                res = find_template(c, &tmpl);
        if (launchstep_ok(&res))
                res = template_digest(c, tmpl);
        if (!launchstep_ok(&res))
                return res;
        int r = send_clone(c, tmpl, vmid, &upid);
        launcher__unpick_vmid(c); /* Proxmox holds the id now, or refused it */
        if (r == -EEXIST)
                return repick_vmid(c, vmid);
        if (r < 0) {
                forget_template(c);
                return launchstep_error(r, "clone %u to %u on %s: %s", tmpl, vmid, c->host, pve_client_error(c->pve));
        }
        log_info("launcher: NodeClaim %s: cloning template %u to VM %u on %s", c->name, tmpl, vmid, c->host);
        stats_vm_created(c->l->env.stats, nodeclaim_is_replacement(c->claim) ? STATS_VM_CREATED_REPLACEMENT
                                                                             : STATS_VM_CREATED_PROVISIONING);
        snprintf(c->image_id, sizeof c->image_id, "%s/%u", c->host, tmpl);
        res = follow_clone(c, vmid, upid);
        free(upid);
        return res;
}

/* The VMID already has a config: ours from an earlier run, someone's clone in progress, or someone else's. */
static struct launchstep_result existing_vm(struct launcher__ctx *c, uint32_t vmid, const json_t *config) {
        int owner = launchstep_vm_owner(c->uid, config);
        if (owner < 0)
                return repick_vmid(c, vmid);
        if (owner == 0 || json_object_get(config, "lock"))
                return wait_for_clone(c);
        return finish_clone(c, vmid, config);
}

struct launchstep_result launcher__clone(struct launcher__ctx *c) {
        uint32_t vmid = c->st->vmid;
        json_t *config = NULL;
        struct launchstep_result res = launcher__need_pve(c);
        if (!launchstep_ok(&res))
                return res;
        if (vmid == 0)
                return launchstep_then(launcher__record(c, NODECLAIM_STEP_RESERVED), launchstep_moved());
        /* Picked by this reconcile: no VM of ours can have it yet (a VMID taken meanwhile fails the clone). */
        if (vmid == c->picked_vmid)
                return issue_clone(c, vmid);
        int r = pve_vm_config_get(c->pve, c->host, vmid, &config);
        if (r == 0) {
                res = existing_vm(c, vmid, config);
                json_decref(config);
                return res;
        }
        if (r != -ENOENT)
                return launchstep_error(r, "config of VM %u: %s", vmid, pve_client_error(c->pve));
        return issue_clone(c, vmid);
}

/* The clone task failed: count the attempt and clone again from VMIDAllocated. */
static struct launchstep_result clone_failed(struct launcher__ctx *c, const char *why) {
        struct launchstep_retry retry = launchstep_retry(c->st->attempts);
        if (retry.give_up)
                return launchstep_fail("CloneFailed", "clone failed %lld times; last: %s", (long long)retry.attempts,
                                       why);
        log_error("launcher: NodeClaim %s: clone failed (attempt %lld): %s", c->name, (long long)retry.attempts, why);
        c->st->launch_step = NODECLAIM_STEP_VMID_ALLOCATED;
        c->st->clone_task[0] = '\0';
        launchstep_attempt_failed(c->st, retry.attempts, why);
        return launchstep_then(launcher__commit(c), launchstep_wait(retry.requeue_ms));
}

/* The clone finished: the VM is ours (its description names the claim) or someone else took the VMID. */
static struct launchstep_result cloned(struct launcher__ctx *c, uint32_t vmid, const json_t *config) {
        return launchstep_vm_owner(c->uid, config) == 1 ? finish_clone(c, vmid, config) : repick_vmid(c, vmid);
}

static struct launchstep_result clone_done(struct launcher__ctx *c, uint32_t vmid) {
        json_t *config = NULL;
        int r = pve_vm_config_get(c->pve, c->host, vmid, &config);
        if (r < 0)
                return launchstep_error(r, "config of VM %u: %s", vmid, pve_client_error(c->pve));
        struct launchstep_result res = cloned(c, vmid, config);
        json_decref(config);
        return res;
}

/* The clone task ended: go on with the VM, or pick another VMID, or count a failed attempt. */
static struct launchstep_result clone_ended(struct launcher__ctx *c, uint32_t vmid, const struct pve_task_status *ts) {
        switch (launchstep_clone_end(ts->exitstatus)) {
        case LAUNCHSTEP_CLONE_TAKEN:
                return repick_vmid(c, vmid);
        case LAUNCHSTEP_CLONE_FAILED:
                forget_template(c);
                return clone_failed(c, ts->exitstatus);
        default:
                return clone_done(c, vmid);
        }
}

struct launchstep_result launcher__await_clone(struct launcher__ctx *c) {
        uint32_t vmid = c->st->vmid;
        struct pve_task_status ts;
        struct launchstep_result res = launcher__need_pve(c);
        if (!launchstep_ok(&res))
                return res;
        int r = pve_task_status(c->pve, c->st->clone_task, &ts);
        if (r == -EINVAL || r == -ENOENT) { /* Proxmox forgot the task: look at the VM instead */
                c->st->clone_task[0] = '\0';
                return launchstep_then(launcher__record(c, NODECLAIM_STEP_VMID_ALLOCATED), launchstep_moved());
        }
        if (r < 0)
                return launchstep_error(r, "clone task of VM %u: %s", vmid, pve_client_error(c->pve));
        return ts.running ? wait_for_running_clone(c) : clone_ended(c, vmid, &ts);
}

/* ---- config ---- */

static int add_nets(struct pve_params *p, const json_t *config, unsigned queues) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)config, k, v) {
                if (strncmp(k, "net", 3) != 0 || !json_is_string(v) || !strstr(json_string_value(v), "virtio"))
                        continue;
                char *net = launcher_net_with_queues(json_string_value(v), queues > 64 ? 64 : queues);
                if (!net)
                        return -ENOMEM;
                pve_params_add(p, k, net);
                free(net);
        }
        return p->error;
}

/* The tags, the description and the SMBIOS UUID that name the claim (launchstep_vm_owner reads them). */
static struct launchstep_result add_names(struct launcher__ctx *c, const json_t *config, struct pve_params *p) {
        int err = 0;
        char *tags = launcher_tags(c->nodepool, c->name, json_object_get(nc_spec(c), "tags"), &err);
        char *desc = launcher_description(c->name, c->uid, c->st->clone_started_ms ?: c->now, c->st->reservation_id,
                                          c->st->placement.cpus);
        char *smbios1 = launcher_smbios1(json_string_value(json_object_get(config, "smbios1")), c->uid);
        if (tags)
                pve_params_add(p, "tags", tags);
        if (desc)
                pve_params_add(p, "description", desc);
        if (smbios1)
                pve_params_add(p, "smbios1", smbios1);
        free(tags);
        free(desc);
        free(smbios1);
        if (!desc || !smbios1)
                return launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
        if (err == -EINVAL)
                return launchstep_fail("InvalidNodeClass", "a tag is not a valid Proxmox tag");
        return launchstep_done();
}

/* The class's VM hardware (vmhw.h): machine, bios and EFI disk, TPM, guest agent, onboot. New volumes go on the
 * class's storage, else the boot disk's. */
static struct launchstep_result add_hardware(struct launcher__ctx *c, const json_t *config, struct pve_params *p) {
        struct vmhw hw;
        char err[256], key[16], storage[VMHW_STORAGE_MAX] = "";
        uint64_t bytes;
        if (vmhw_parse(nc_spec(c), &hw, err, sizeof err) < 0)
                return launchstep_fail("InvalidNodeClass", "%s", err);
        if (launcher_boot_disk(config, key, &bytes) == 0 &&
            vmhw_volume_storage(json_string_value(json_object_get(config, key)), storage) < 0)
                storage[0] = '\0';
        int r = vmhw_params(&hw, config, storage, p, err, sizeof err);
        if (r == -EINVAL)
                return launchstep_fail("InvalidNodeClass", "%s", err);
        return errno_result(r);
}

static struct launchstep_result config_params(struct launcher__ctx *c, const json_t *config, struct pve_params *p) {
        const struct nodeclaim_placement *pl = &c->st->placement;
        char *deletes = NULL;
        uint64_t mib = c->shape.vm_memory_bytes / MIB;
        pve_params_add_int(p, "cores", c->shape.vcpus);
        pve_params_add_int(p, "sockets", 1);
        pve_params_add_int(p, "memory", (long long)mib);
        pve_params_add_int(p, "balloon", 0);
        int r = launcher_numa_params(pl->numa, pl->n_numa, mib, config, p, &deletes);
        if (r == -ERANGE)
                return launchstep_fail("InvalidPlacement", "NUMA memories do not add up to %llu MiB",
                                       (unsigned long long)mib);
        struct launchstep_result res = add_names(c, config, p);
        if (deletes)
                pve_params_add(p, "delete", deletes);
        free(deletes);
        if (!launchstep_ok(&res) || r < 0)
                return launchstep_ok(&res) ? errno_result(r) : res;
        res = add_hardware(c, config, p);
        if (launchstep_ok(&res))
                res = launcher__addresses_params(c, p);
        return launchstep_ok(&res) ? errno_result(add_nets(p, config, c->shape.vcpus)) : res;
}

/* Cloud-init, firewall and the VM config (one synchronous PUT: the VM is stopped and nothing is allocated, so
 * Proxmox applies it at once). Configured is not written on its own: the start follows at once, and Launched
 * (or Started) records both. A run that ends before finds the VM tagged with the claim and configures it again. */
static struct launchstep_result configure(struct launcher__ctx *c, uint32_t vmid, const json_t *config) {
        struct pve_params p = PVE_PARAMS_INIT;
        char volume[LAUNCHER__VOLUME_MAX], token_id[TOKENS_ID_LEN + 1];
        int r;
        struct launchstep_result res = launcher__need_shape(c);
        c->vm_config = config;
        if (launchstep_ok(&res))
                res = launcher__cloudinit_deliver(c, volume, token_id);
        c->vm_config = NULL;
        if (launchstep_ok(&res))
                res = launcher__firewall_apply(c, vmid);
        if (launchstep_ok(&res))
                res = config_params(c, config, &p);
        if (launchstep_ok(&res) && volume[0])
                pve_params_addf(&p, "ide2", "%s,media=cdrom", volume);
        if (launchstep_ok(&res) && (r = pve_vm_config_put(c->pve, c->host, vmid, &p)) < 0)
                res = launchstep_error(r, "configure VM %u: %s", vmid, pve_client_error(c->pve));
        pve_params_done(&p);
        return launchstep_ok(&res) ? configured(c, volume, token_id) : res;
}
