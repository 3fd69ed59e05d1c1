/* launcher_steps: reserve (agent, or PVE accounting without one) and VMID, clone, then configure (boot disk
 * resize, cloud-init, VM config, firewall) a NodeClaim's VM. Every step can run again after a crash and finds what
 * an earlier run left; what one reconcile does in a row is recorded once. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fiber.h"
#include "http_client.h"
#include "log.h"
#include "nodeclaim.h"
#include "rfc3339.h"
#include "tokens.h"

#define MIB (1024ULL * 1024ULL)

static json_t *nc_spec(const struct lctx *c) {
        return json_object_get(c->nodeclass, "spec");
}

/* ---- reserve ---- */

static bool agent_unreachable(int r) {
        return r == -ECONNREFUSED || r == -ETIMEDOUT || r == -EHOSTUNREACH || r == -ECONNRESET || r == -EHOSTDOWN ||
               r == -ENETUNREACH;
}

static json_t *vmid_fields(struct lctx *c, uint32_t vmid, json_t *ch) {
        char pid[300], when[40];
        snprintf(pid, sizeof pid, "proxmox://%s/%u", c->region, vmid);
        json_object_set_new(ch, "vmid", json_integer(vmid));
        json_object_set_new(ch, "providerID", json_string(pid));
        if (!launcher_status_str(c, "cloneStartedAt")[0])
                json_object_set_new(ch, "cloneStartedAt", json_string(rfc3339_format_ms(c->now, when, sizeof when)));
        return ch;
}

/* The claim's place and the shape's capacity and allocatable, unless its status has them (the provisioner writes
 * them itself only when no launcher runs). */
static void placement_fields(struct lctx *c, json_t *ch) {
        if (launcher_status_str(c, "host")[0])
                return;
        json_t *st = nodeclaim_placement_status(c->host, c->region, &c->shape);
        json_object_update_missing(ch, st);
        json_decref(st);
}

/* Record the reservation together with a VMID picked now (one status write); without a VMID, the reservation
 * alone. A crash before the write leaves a reservation the agent gives back to the same owner. */
static int record_reserved(struct lctx *c, json_t *ch) {
        uint32_t vmid;
        if (ch)
                placement_fields(c, ch);
        int r = ch ? launcher_pick_vmid(c, &vmid) : -ENOMEM;
        if (r != 0) {
                int w = launcher_set_step(c, STEP_RESERVED, ch);
                return w < 0 ? w : r;
        }
        return launcher_set_step(c, STEP_VMID, vmid_fields(c, vmid, ch));
}

static int record_agent_reservation(struct lctx *c, const json_t *res) {
        int err = 0;
        const char *id = json_string_value(json_object_get(res, "id"));
        json_t *numa = launcher_placement_numa_from_agent(json_object_get(res, "numa"), &err);
        if (!id || !numa) {
                json_decref(numa);
                return launcher_errf(c, -EINVAL, "agent on %s: malformed reservation", c->host);
        }
        json_t *placement = json_pack("{s:o}", "numa", numa);
        json_t *cpus = json_object_get(res, "cpus");
        if (placement && json_is_string(cpus))
                json_object_set(placement, "cpus", cpus);
        json_t *ch = json_pack("{s:s, s:s, s:o, s:[{s:s, s:s, s:s, s:s}]}", "reservationID", id, "reservationMode",
                               "agent", "placement", placement, "conditions", "type", "Launched", "status", "Unknown",
                               "reason", "Launching", "message", "reserved on the host agent");
        return record_reserved(c, ch);
}

/* -ENOTCONN: the agent cannot be reached (use the fallback). */
static int reserve_with_agent(struct lctx *c) {
        char owner[254];
        json_t *res = NULL;
        int r = launcher_owner(c->name, c->uid, owner, sizeof owner);
        if (r == 0) { /* the owner is the agent's idempotency key: a retry gets the reservation made before */
                struct agents_reserve req = { .vcpus = c->shape.vcpus, .memory_bytes = c->shape.vm_memory_bytes,
                                              .ttl_seconds = (unsigned)c->l->o.reservation_ttl_s, .owner = owner };
                r = agents_reserve(c->agent, &req, &res);
        }
        if (agent_unreachable(r)) {
                log_error("launcher: NodeClaim %s: agent on %s unreachable (%s); accounting from Proxmox data", c->name,
                          c->host, agents_client_error(c->agent));
                return -ENOTCONN;
        }
        if (r == -ENOSPC)
                return launcher_failf(c, "InsufficientCapacity", "host %s: %s", c->host, agents_client_error(c->agent));
        if (r < 0)
                return launcher_errf(c, r, "agent on %s: %s", c->host, agents_client_error(c->agent));
        r = record_agent_reservation(c, res);
        json_decref(res);
        return r;
}

/* ---- reserve without an agent: host room from /nodes/{n}/status and the VM list, minus in-flight claims ---- */

struct inflight {
        int64_t cpus, bytes;
        uint32_t skip[512];
        size_t n_skip;
};

static bool step_before_configured(const char *step) {
        static const char *const early[] = { STEP_RESERVED, STEP_VMID, STEP_CLONING, NULL };
        for (size_t i = 0; early[i]; i++)
                if (strcmp(step, early[i]) == 0)
                        return true;
        return false;
}

static const char *meta_str(const json_t *o, const char *key) {
        const char *s = json_string_value(json_object_get(json_object_get(o, "metadata"), key));
        return s ? s : "";
}

/* Does other count before the claim being reserved? Claims that reserved already always do; claims that have
 * not reserved yet do when they are older (then by name), so two launches never both take the last room. */
static bool counts_before(const struct lctx *c, const json_t *other, const char *step) {
        if (step[0])
                return true;
        int cmp = strcmp(meta_str(other, "creationTimestamp"), meta_str(c->claim, "creationTimestamp"));
        return cmp < 0 || (cmp == 0 && strcmp(meta_str(other, "name"), c->name) < 0);
}

/* A claim not begun yet has its place in its requirements only. */
static bool same_host(const struct lctx *c, const json_t *other) {
        const char *h = nodeclaim_host(other), *r = nodeclaim_region(other);
        return h && r && strcmp(h, c->host) == 0 && strcmp(r, c->region) == 0;
}

static int other_shape(struct lctx *c, const json_t *other, struct shape *ret) {
        struct lctx o = { .l = c->l, .kube = c->kube, .claim = (json_t *)other };
        int r = launcher_need_shape(&o);
        if (r == 0)
                *ret = o.shape;
        json_decref(o.nodeclass);
        return r == 0 ? 0 : -EINVAL;
}

static void count_claim(struct lctx *c, const json_t *other, struct inflight *in) {
        const json_t *status = json_object_get(other, "status");
        const char *step = json_string_value(json_object_get(status, "launchStep"));
        struct shape s;
        step = step ? step : "";
        if (strcmp(meta_str(other, "uid"), c->uid) == 0 || !same_host(c, other) ||
            json_object_get(json_object_get(other, "metadata"), "deletionTimestamp") ||
            (step[0] && !step_before_configured(step)) || !counts_before(c, other, step) || other_shape(c, other, &s) < 0)
                return;
        in->cpus += s.vcpus;
        in->bytes += (int64_t)s.vm_memory_bytes;
        json_int_t vmid = json_integer_value(json_object_get(status, "vmid"));
        if (vmid > 0 && in->n_skip < sizeof in->skip / sizeof in->skip[0])
                in->skip[in->n_skip++] = (uint32_t)vmid;
}

static int inflight_claims(struct lctx *c, struct inflight *in) {
        json_t *list = NULL, *e;
        size_t i;
        int r = kube_list(c->kube, &kube_nodeclaims, NULL, NULL, &list);
        if (r < 0)
                return launcher_errf(c, r, "list NodeClaims: %s", kube_client_error(c->kube));
        json_array_foreach(json_object_get(list, "items"), i, e)
                count_claim(c, e, in);
        json_decref(list);
        return 0;
}

static int reserve_from_pve(struct lctx *c) {
        json_t *status = NULL, *vms = NULL;
        struct inflight in = { 0 };
        struct launcher_room room;
        int r = pve_node_status(c->pve, c->host, &status);
        if (r == 0)
                r = pve_vm_list(c->pve, c->host, &vms);
        if (r < 0)
                launcher_errf(c, r, "host %s: %s", c->host, pve_client_error(c->pve));
        if (r == 0)
                r = inflight_claims(c, &in);
        if (r == 0)
                r = launcher_room_from_pve(status, vms, in.skip, in.n_skip, in.cpus, in.bytes, &room);
        json_decref(status);
        json_decref(vms);
        if (r < 0)
                return c->err[0] ? r : launcher_errf(c, r, "host %s: unreadable status", c->host);
        if (room.cpus < (int64_t)c->shape.vcpus || room.memory_bytes < (int64_t)c->shape.vm_memory_bytes)
                return launcher_failf(c, "InsufficientCapacity",
                                      "host %s: %lld CPUs and %lld MiB free (Proxmox accounting), %u and %llu needed",
                                      c->host, (long long)room.cpus, (long long)(room.memory_bytes / (int64_t)MIB),
                                      c->shape.vcpus, (unsigned long long)(c->shape.vm_memory_bytes / MIB));
        json_t *ch = json_pack("{s:s, s:n, s:[{s:s, s:s, s:s, s:s}]}", "reservationMode", "pve", "reservationID",
                               "conditions", "type", "Launched", "status", "Unknown", "reason", "Launching", "message",
                               "reserved by Proxmox accounting (no host agent)");
        return record_reserved(c, ch);
}

int launcher_step_reserve(struct lctx *c) {
        int64_t until;
        /* defence in depth: the provisioner leaves backed-off hosts out, and a claim made anyway waits */
        if (launcher_backoff_active(c->l, c->nodepool, c->host, c->now, &until)) {
                log_info("launcher: NodeClaim %s: node pool %s on %s is backed off for %lld ms; waiting", c->name,
                         c->nodepool, c->host, (long long)(until - c->now));
                return launcher_wait(c, until - c->now);
        }
        int r = launcher_need_shape(c);
        if (r == 0)
                r = launcher_need_pve(c);
        if (r != 0)
                return r;
        if (c->agent) {
                r = reserve_with_agent(c);
                if (r != -ENOTCONN)
                        return r;
        }
        return reserve_from_pve(c);
}

/* ---- VMID ---- */

int launcher_step_vmid(struct lctx *c) {
        uint32_t vmid;
        int r = launcher_need_pve(c);
        if (r == 0)
                r = launcher_pick_vmid(c, &vmid);
        if (r != 0)
                return r;
        json_t *ch = json_object();
        return ch ? launcher_set_step(c, STEP_VMID, vmid_fields(c, vmid, ch)) : -ENOMEM;
}

/* Give up the VMID (someone else has it) and pick another. */
static int repick_vmid(struct lctx *c, uint32_t vmid) {
        log_info("launcher: NodeClaim %s: VMID %u is taken by another VM; picking another", c->name, vmid);
        json_t *ch = json_pack("{s:n, s:n, s:n}", "vmid", "cloneTask", "providerID");
        return launcher_set_step(c, STEP_RESERVED, ch);
}

/* ---- clone ---- */

static int clone_timeout(struct lctx *c, int64_t *ret_left_ms) {
        int64_t started = launcher_status_time(c, "cloneStartedAt");
        int64_t left = started ? started + c->l->o.clone_timeout_ms - c->now : c->l->o.clone_timeout_ms;
        if (left <= 0)
                return launcher_failf(c, "CloneTimeout", "the clone of VM %lld did not finish within %lld s",
                                      (long long)launcher_status_int(c, "vmid"),
                                      (long long)(c->l->o.clone_timeout_ms / 1000));
        *ret_left_ms = left;
        return 0;
}

/* Poll soon after the clone started (a linked clone on fast storage takes well under a second), then every
 * second. */
static int wait_for_clone(struct lctx *c) {
        int64_t left = 0;
        int r = clone_timeout(c, &left);
        if (r != 0)
                return r;
        int64_t elapsed = c->now - launcher_status_time(c, "cloneStartedAt");
        int64_t delay = elapsed / 2 < 10 ? 10 : elapsed / 2 > LAUNCHER_POLL_MS ? LAUNCHER_POLL_MS : elapsed / 2;
        return launcher_wait(c, left < delay ? left : delay);
}

/* Proxmox said the clone still runs: the pause until the next poll is its time, not ours. */
static int wait_for_running_clone(struct lctx *c) {
        int r = wait_for_clone(c);
        if (r == LSTEP_WAIT)
                http_client_thread_wait_note(c->requeue_ms * 1000);
        return r;
}

int launcher_vm_owner(const struct lctx *c, const json_t *config) {
        char uid[LAUNCHER_UID_MAX];
        int64_t created;
        const char *desc = json_string_value(json_object_get(config, "description"));
        if (launcher_description_parse(desc, uid, &created) == 0)
                return strcmp(uid, c->uid) == 0 ? 1 : -1;
        return json_object_get(config, "lock") ? 0 : -1;
}

static int resize_boot_disk(struct lctx *c, uint32_t vmid, const json_t *config) {
        const char *size = json_string_value(json_object_get(json_object_get(nc_spec(c), "bootDevice"), "size"));
        char arg[32], key[16], *upid = NULL;
        uint64_t want, have;
        if (!size)
                return 0;
        if (launcher_disk_size(size, arg, &want) < 0)
                return launcher_failf(c, "InvalidNodeClass", "spec.bootDevice.size: invalid size \"%s\"", size);
        if (launcher_boot_disk(config, key, &have) < 0)
                return launcher_failf(c, "InvalidTemplate", "the template has no boot disk");
        if (want <= have)
                return 0;
        int r = pve_vm_resize(c->pve, c->host, vmid, key, arg, &upid);
        if (r < 0)
                return launcher_errf(c, r, "resize %s of VM %u: %s", key, vmid, pve_client_error(c->pve));
        r = launcher_task_wait(c, "resize", upid, LAUNCHER_POLL_SOON_MS);
        free(upid);
        return r;
}

static int configure(struct lctx *c, uint32_t vmid, const json_t *config);

/* The VM is configured: what the next status write records (ISO volume and token id may be empty). */
static int configured(struct lctx *c, const char *volume, const char *token_id) {
        json_t *ch = json_pack("{s:n}", "cloneTask");
        if (!ch)
                return -ENOMEM;
        if (c->image_id[0])
                json_object_set_new(ch, "imageID", json_string(c->image_id));
        if (volume[0])
                json_object_set_new(ch, "isoVolume", json_string(volume));
        if (token_id[0])
                json_object_set_new(ch, "tokenID", json_string(token_id));
        launcher_step_unrecorded(c, STEP_CONFIGURED, ch);
        return 0;
}

/* A run that ended between the start and its record left the VM running, configured: take what configure
 * would record from its config (the ISO on ide2; the token id, derived from the claim UID) and go on to bind. */
static int resume_running(struct lctx *c, const json_t *config) {
        char id[TOKENS_ID_LEN + 1] = "", volume[LAUNCHER_VOLUME_MAX] = "";
        const char *ide2 = json_string_value(json_object_get(config, "ide2"));
        if (ide2 && strstr(ide2, "media=cdrom") && strncmp(ide2, "none", 4) != 0)
                snprintf(volume, sizeof volume, "%.*s", (int)strcspn(ide2, ","), ide2);
        if (launcher_joins_by_cdrom(c) && tokens_id_for(c->uid, id) < 0)
                id[0] = '\0';
        log_info("launcher: NodeClaim %s: VM %lld runs already", c->name, (long long)launcher_status_int(c, "vmid"));
        return configured(c, volume, id);
}

/* The clone exists and is done: bind the reservation to it, resize its boot disk, then configure the VM. Never
 * configured before (no tag of the claim), it has never run either; else an earlier run ended before its next
 * record, and the VM may run. The bind comes first so that the agent counts the VM on its reservation from now
 * on, not also as a VM without pinning (which would charge its vCPUs twice until the start); the agent pins it
 * when QEMU is up. */
static int finish_clone(struct lctx *c, uint32_t vmid, const json_t *config) {
        bool running = false;
        int r = launcher_need_nodeclass(c);
        c->vm_fresh = !launcher_config_tagged(config, c->name);
        if (r == 0 && !c->vm_fresh)
                r = launcher_vm_running(c, vmid, &running);
        if (r == 0 && running)
                return resume_running(c, config);
        if (r == 0)
                r = launcher_bind(c);
        if (r == 0)
                r = resize_boot_disk(c, vmid, config);
        return r != 0 ? r : configure(c, vmid, config);
}

static int find_template_ask(struct lctx *c, const json_t *ref, uint32_t *ret_vmid) {
        json_t *list = NULL, *t;
        const char *tags[11] = { 0 };
        size_t i;
        json_array_foreach(json_object_get(ref, "tags"), i, t)
                if (i < 10)
                        tags[i] = json_string_value(t);
        const char *name = json_string_value(json_object_get(ref, "name"));
        int r = pve_vm_list(c->pve, c->host, &list);
        if (r < 0)
                return launcher_errf(c, r, "VMs of %s: %s", c->host, pve_client_error(c->pve));
        r = pve_find_template(list, name, tags[0] ? tags : NULL, ret_vmid);
        json_decref(list);
        if (r < 0)
                return launcher_failf(c, "TemplateNotFound", "no template %s%s%s on host %s", name ? name : "",
                                      name ? "" : "with tags ", name ? "" : (tags[0] ? tags[0] : ""), c->host);
        return 0;
}

/* The cache key of the template a NodeClass names on this host; 0 or -ENOMEM. */
static int template_key(const struct lctx *c, const json_t *ref, char *key, size_t len) {
        char *text = json_dumps(ref, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text)
                return -ENOMEM;
        snprintf(key, len, "template/%s/%s/%s", c->region, c->host, text);
        free(text);
        return 0;
}

/* The template VMID cached under key; false when none (or not a VMID). */
static bool cached_template(struct lctx *c, const char *key, uint32_t *ret_vmid) {
        char *cached = launcher_cache_get(&c->l->cache, key, c->now), *end = NULL;
        unsigned long v = cached ? strtoul(cached, &end, 10) : 0;
        bool ok = end && *end == '\0' && v > 0 && v <= UINT32_MAX;
        free(cached);
        if (ok)
                *ret_vmid = (uint32_t)v;
        return ok;
}

/* The template's VMID: cached for a minute per host (a clone that fails forgets it). */
static int find_template(struct lctx *c, uint32_t *ret_vmid) {
        json_t *ref = json_object_get(nc_spec(c), "instanceTemplateRef");
        char key[1024];
        bool keyed = template_key(c, ref, key, sizeof key) == 0;
        if (keyed && cached_template(c, key, ret_vmid))
                return 0;
        int r = find_template_ask(c, ref, ret_vmid);
        if (r == 0 && keyed) {
                char v[16];
                snprintf(v, sizeof v, "%u", *ret_vmid);
                launcher_cache_put(&c->l->cache, key, v, c->now);
        }
        return r;
}

static void forget_template(struct lctx *c) {
        char key[1024];
        if (template_key(c, json_object_get(nc_spec(c), "instanceTemplateRef"), key, sizeof key) == 0)
                launcher_cache_drop(&c->l->cache, key);
}

static void clone_options(struct lctx *c, struct pve_clone *o) {
        json_t *boot = json_object_get(nc_spec(c), "bootDevice");
        o->name = c->name;
        o->pool = json_string_value(json_object_get(nc_spec(c), "resourcePool"));
        o->storage = json_string_value(json_object_get(boot, "storage"));
        o->full = o->storage != NULL; /* a linked clone stays on the template's storage */
}

static int clone_ended(struct lctx *c, uint32_t vmid, const struct pve_task_status *ts);
static int cloned(struct lctx *c, uint32_t vmid, const json_t *config);

/* The clone's config, read soon after the clone began: NULL while Proxmox still holds its "clone" lock (or the
 * read failed). Proxmox drops that lock as the clone's last step, so a config without it is a finished clone,
 * and the task needs no poll; with a resource pool the VM joins the pool after that, and can still fail there,
 * so the task is polled instead. */
static json_t *settled_clone_config(struct lctx *c, uint32_t vmid) {
        json_t *config = NULL;
        if (json_object_get(nc_spec(c), "resourcePool") || pve_vm_config_get(c->pve, c->host, vmid, &config) < 0)
                return NULL;
        if (!json_object_get(config, "lock"))
                return config;
        json_decref(config);
        return NULL;
}

/* Poll a clone this reconcile just began, for a short while (LAUNCHER_CLONE_INLINE_MS): a linked clone on fast
 * storage is done by then, and is then not recorded as Cloning. 0 when it ended, with *ret_config when its config
 * says so or else ts from its task; 1 while it runs; 2 when a poll failed. */
static int clone_poll_inline(struct lctx *c, uint32_t vmid, const char *upid, struct pve_task_status *ts,
                             json_t **ret_config) {
        for (long nap = 10, waited = 0;; waited += nap, nap *= 2) {
                if (waited + nap > LAUNCHER_CLONE_INLINE_MS)
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

static int issue_clone(struct lctx *c, uint32_t vmid) {
        uint32_t tmpl;
        char *upid = NULL;
        struct pve_task_status ts;
        int r = launcher_need_nodeclass(c);
        if (r == 0)
                r = find_template(c, &tmpl);
        if (r != 0)
                return r;
        char *desc = launcher_description(c->name, c->uid, launcher_status_time(c, "cloneStartedAt") ?: c->now);
        struct pve_clone o = { .newid = vmid, .description = desc };
        clone_options(c, &o);
        r = desc ? pve_vm_clone(c->pve, c->host, tmpl, &o, &upid) : -ENOMEM;
        free(desc);
        launcher_unpick_vmid(c); /* Proxmox holds the id now, or refused it */
        if (r == -EEXIST)
                return repick_vmid(c, vmid);
        if (r < 0) {
                forget_template(c);
                return launcher_errf(c, r, "clone %u to %u on %s: %s", tmpl, vmid, c->host, pve_client_error(c->pve));
        }
        log_info("launcher: NodeClaim %s: cloning template %u to VM %u on %s", c->name, tmpl, vmid, c->host);
        snprintf(c->image_id, sizeof c->image_id, "%s/%u", c->host, tmpl);
        json_t *config = NULL;
        int polled = clone_poll_inline(c, vmid, upid, &ts, &config);
        if (polled == 0) {
                free(upid);
                r = config ? cloned(c, vmid, config) : clone_ended(c, vmid, &ts);
                json_decref(config);
                return r;
        }
        /* A crash before this write is no loss: the VM's description names the claim, and the next run finds it. */
        json_t *ch = json_pack("{s:s, s:s}", "cloneTask", upid, "imageID", c->image_id);
        free(upid);
        r = launcher_set_step(c, STEP_CLONING, ch);
        return r != 0 ? r : polled == 1 ? wait_for_running_clone(c) : wait_for_clone(c);
}

/* The VMID already has a config: ours from an earlier run, someone's clone in progress, or someone else's. */
static int existing_vm(struct lctx *c, uint32_t vmid, const json_t *config) {
        int owner = launcher_vm_owner(c, config);
        if (owner < 0)
                return repick_vmid(c, vmid);
        if (owner == 0 || json_object_get(config, "lock"))
                return wait_for_clone(c);
        return finish_clone(c, vmid, config);
}

int launcher_step_clone(struct lctx *c) {
        uint32_t vmid = (uint32_t)launcher_status_int(c, "vmid");
        json_t *config = NULL;
        int r = launcher_need_pve(c);
        if (r != 0)
                return r;
        if (vmid == 0)
                return launcher_set_step(c, STEP_RESERVED, NULL);
        /* Picked by this reconcile: no VM of ours can have it yet (a VMID taken meanwhile fails the clone). */
        if (vmid == c->picked_vmid)
                return issue_clone(c, vmid);
        r = pve_vm_config_get(c->pve, c->host, vmid, &config);
        if (r == 0) {
                r = existing_vm(c, vmid, config);
                json_decref(config);
                return r;
        }
        if (r != -ENOENT)
                return launcher_errf(c, r, "config of VM %u: %s", vmid, pve_client_error(c->pve));
        return issue_clone(c, vmid);
}

/* The clone task failed: count the attempt and clone again from the VMID step. */
static int clone_failed(struct lctx *c, const char *why) {
        int64_t attempts = launcher_status_int(c, "attempts") + 1;
        if (attempts >= LAUNCHER_MAX_ATTEMPTS)
                return launcher_failf(c, "CloneFailed", "clone failed %lld times; last: %s", (long long)attempts, why);
        log_error("launcher: NodeClaim %s: clone failed (attempt %lld): %s", c->name, (long long)attempts, why);
        json_t *ch = json_pack("{s:s, s:n, s:I, s:s}", "launchStep", STEP_VMID, "cloneTask", "attempts",
                               (json_int_t)attempts, "lastError", why);
        int r = launcher_commit(c, ch);
        return r < 0 ? r : launcher_wait(c, launcher_backoff_delay((unsigned)attempts, 1000, LAUNCHER_RETRY_MAX_MS));
}

/* The clone finished: the VM is ours (its description names the claim) or someone else took the VMID. */
static int cloned(struct lctx *c, uint32_t vmid, const json_t *config) {
        return launcher_vm_owner(c, config) == 1 ? finish_clone(c, vmid, config) : repick_vmid(c, vmid);
}

static int clone_done(struct lctx *c, uint32_t vmid) {
        json_t *config = NULL;
        int r = pve_vm_config_get(c->pve, c->host, vmid, &config);
        if (r < 0)
                return launcher_errf(c, r, "config of VM %u: %s", vmid, pve_client_error(c->pve));
        r = cloned(c, vmid, config);
        json_decref(config);
        return r;
}

/* The clone task ended: go on with the VM, or pick another VMID, or count a failed attempt. */
static int clone_ended(struct lctx *c, uint32_t vmid, const struct pve_task_status *ts) {
        if (strstr(ts->exitstatus, "already exists"))
                return repick_vmid(c, vmid);
        if (!pve_task_exit_ok(ts->exitstatus)) {
                forget_template(c);
                return clone_failed(c, ts->exitstatus);
        }
        return clone_done(c, vmid);
}

int launcher_step_cloning(struct lctx *c) {
        uint32_t vmid = (uint32_t)launcher_status_int(c, "vmid");
        const char *upid = launcher_status_str(c, "cloneTask");
        struct pve_task_status ts;
        int r = launcher_need_pve(c);
        if (r != 0)
                return r;
        r = pve_task_status(c->pve, upid, &ts);
        if (r == -EINVAL || r == -ENOENT) /* Proxmox forgot the task: look at the VM instead */
                return launcher_set_step(c, STEP_VMID, json_pack("{s:n}", "cloneTask"));
        if (r < 0)
                return launcher_errf(c, r, "clone task of VM %u: %s", vmid, pve_client_error(c->pve));
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

static int config_params(struct lctx *c, const json_t *config, struct pve_params *p) {
        struct launcher_numa numa[LAUNCHER_MAX_NUMA];
        size_t n = 0;
        char *deletes = NULL, *tags, *desc;
        int err = 0;
        uint64_t mib = c->shape.vm_memory_bytes / MIB;
        if (launcher_numa_parse(json_object_get(json_object_get(launcher_status(c), "placement"), "numa"), numa, &n) < 0)
                return launcher_failf(c, "InvalidNodeClaim", "status.placement.numa: malformed");
        pve_params_add_int(p, "cores", c->shape.vcpus);
        pve_params_add_int(p, "sockets", 1);
        pve_params_add_int(p, "memory", (long long)mib);
        pve_params_add_int(p, "balloon", 0);
        int r = launcher_numa_params(numa, n, mib, config, p, &deletes);
        if (r == -ERANGE)
                return launcher_failf(c, "InvalidPlacement", "NUMA memories do not add up to %llu MiB",
                                      (unsigned long long)mib);
        tags = launcher_tags(c->nodepool, c->name, json_object_get(nc_spec(c), "tags"), &err);
        desc = launcher_description(c->name, c->uid, launcher_status_time(c, "cloneStartedAt") ?: c->now);
        if (tags)
                pve_params_add(p, "tags", tags);
        if (desc)
                pve_params_add(p, "description", desc);
        if (deletes)
                pve_params_add(p, "delete", deletes);
        free(tags);
        free(desc);
        free(deletes);
        if (err == -EINVAL)
                return launcher_failf(c, "InvalidNodeClass", "a tag is not a valid Proxmox tag");
        return r < 0 ? r : add_nets(p, config, c->shape.vcpus);
}

/* Cloud-init, firewall and the VM config (one synchronous PUT: the VM is stopped and nothing is allocated, so
 * Proxmox applies it at once). Configured is not written on its own: the start follows at once, and Launched
 * (or Started) records both. A run that ends before finds the VM tagged with the claim and configures it again. */
static int configure(struct lctx *c, uint32_t vmid, const json_t *config) {
        struct pve_params p = PVE_PARAMS_INIT;
        char volume[LAUNCHER_VOLUME_MAX], token_id[TOKENS_ID_LEN + 1];
        int r = launcher_need_shape(c);
        if (r == 0)
                r = launcher_cloudinit_deliver(c, volume, token_id);
        if (r == 0)
                r = launcher_firewall_apply(c, vmid);
        if (r == 0)
                r = config_params(c, config, &p);
        if (r == 0 && volume[0])
                pve_params_addf(&p, "ide2", "%s,media=cdrom", volume);
        if (r == 0 && (r = pve_vm_config_put(c->pve, c->host, vmid, &p)) < 0)
                launcher_errf(c, r, "configure VM %u: %s", vmid, pve_client_error(c->pve));
        pve_params_done(&p);
        if (r != 0)
                return r;
        return configured(c, volume, token_id);
}
