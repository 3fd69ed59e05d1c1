/* launcher_gc: periodic clean-up of what no NodeClaim owns any more: VMs tagged pvescale, agent reservations,
 * join token Secrets and cloud-init ISOs; and of claims that joined but lost their VM or their Node.
 *
 * How ownership and age are known: every VM a launch creates carries, from the clone on, a description with
 * "pvescale-nodeclaim: <name>", "uid: <claim uid>" and "created: <RFC 3339 time of the launch>"; the config step
 * adds the tag pvescale and sets its SMBIOS UUID to the claim's UID. A VM is owned when a claim records its
 * (region, vmid) or has the UID of its description. An unowned VM is collected only when it is provably a
 * claim's: tagged pvescale, with a description whose UID is its SMBIOS UUID (a VM someone made under a reused
 * VMID, even with a copy of the description and tags, has its own UUID and is never touched). Its age is
 * now - created; a VM without a readable time is timed from when this process first saw it unowned (so a
 * restart only delays its deletion). Reservations name their claim in owner
 * ("nodeclaim/<uid>/<name>") and carry created_at; tokens carry the claim UID label; ISOs are named
 * pvescale-<claim>-<first 8 characters of the UID>.iso and carry the upload time.
 *
 * A claim that joined (Initialized, not being deleted) whose VMID Proxmox no longer lists, or lists as a VM that
 * is not its own (by its description and SMBIOS UUID, read for every such claim), or whose Node is gone, is deleted
 * with a GarbageCollected Event naming why: its termination then removes what is left (Node, VM, ISO, token,
 * reservation). The claim is read again first, so that a claim deleted since the snapshot is left to its
 * termination.
 *
 * The same pass brings each joined claim's own VM in line with its class's tags, resourcePool and securityGroups
 * (launcher_sync.c): the fields a class changes in place, without drifting its nodes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "launchstep.h"
#include "log.h"
#include "rfc3339.h"
#include "tokens.h"
#include "kube_object.h"

/* What a claim owns, decoded once per collection: its UID (VMs by description, reservations, tokens, ISOs) and
 * its recorded (region, vmid). */
struct gc_owner {
        char uid[LAUNCHER_UID_MAX];
        char region[128];
        uint32_t vmid;
        const json_t *claim;      /* borrowed from the claims given */
        char name[LAUNCHER_NAME_MAX];
        char node[254];           /* its recorded Node, "" when none */
        bool joined;              /* Initialized and not being deleted: its VM and Node are looked for */
        enum launchstep_gc_vm vm; /* what Proxmox showed of its VM */
        bool node_seen;           /* its Node is listed */
};

#define GC_CLASSES_MAX 32

struct gc_class {
        const char *name; /* borrowed from a claim */
        json_t *obj;      /* NULL: it could not be read */
};

struct gc {
        struct launcher *l;
        struct kube_client *kube;
        struct gc_owner *owners;
        size_t n_owners;
        struct gc_class classes[GC_CLASSES_MAX]; /* the claims' classes, read once a pass */
        size_t n_classes;
        int64_t now;
        bool nodes_known; /* the Nodes were listed: a joined claim's Node not seen is gone */
        int err;          /* first error */
};

static void gc_error(struct gc *g, int r) {
        if (r < 0 && g->err == 0)
                g->err = r;
}

/* ---- owners ---- */

static int gc_owners(struct gc *g, const json_t *claims) {
        struct nodeclaim_status *st = malloc(sizeof *st);
        size_t i;
        json_t *c;
        g->owners = calloc(json_array_size(claims) + 1, sizeof *g->owners);
        if (!st || !g->owners) {
                free(st);
                return -ENOMEM;
        }
        json_array_foreach(claims, i, c) {
                struct gc_owner *o = &g->owners[g->n_owners++];
                const json_t *meta = json_object_get(c, "metadata");
                const char *uid = json_string_value(json_object_get(meta, "uid"));
                const char *name = json_string_value(json_object_get(meta, "name"));
                nodeclaim_claim_status(c, st, NULL, 0);
                snprintf(o->uid, sizeof o->uid, "%s", uid ? uid : "");
                snprintf(o->name, sizeof o->name, "%s", name ? name : "");
                snprintf(o->region, sizeof o->region, "%s", st->region);
                snprintf(o->node, sizeof o->node, "%s", st->node_name);
                o->vmid = st->vmid;
                o->claim = c;
                o->joined = st->launch_step == NODECLAIM_STEP_INITIALIZED && o->uid[0] && o->name[0] &&
                            !kube_deleting(c);
        }
        free(st);
        return 0;
}

static bool uid_owned(const struct gc *g, const char *uid, size_t n) {
        for (size_t i = 0; i < g->n_owners; i++) {
                const char *u = g->owners[i].uid;
                if (u[0] && strlen(u) >= n && strncmp(u, uid, n) == 0)
                        return true;
        }
        return false;
}

/* The next claim after from (NULL: the first) that records (region, vmid): a new claim may have been given the
 * VMID of a VM deleted behind an older claim's back. */
static struct gc_owner *vm_owner(const struct gc *g, const struct gc_owner *from, const char *region, uint32_t vmid) {
        for (size_t i = from ? (size_t)(from - g->owners) + 1 : 0; i < g->n_owners; i++)
                if (g->owners[i].vmid == vmid && g->owners[i].region[0] && strcmp(g->owners[i].region, region) == 0)
                        return &g->owners[i];
        return NULL;
}

/* ---- VMs ---- */

static bool has_tag(const char *tags, const char *tag) {
        size_t n = strlen(tag);
        for (const char *s = tags; s && *s;) {
                size_t len = strcspn(s, ";, ");
                if (len == n && strncmp(s, tag, n) == 0)
                        return true;
                s += len + (s[len] ? 1 : 0);
        }
        return false;
}

static struct launcher__seen *seen_find(struct launcher *l, const char *region, uint32_t vmid) {
        for (size_t i = 0; i < l->n_seen; i++)
                if (l->seen[i].vmid == vmid && strcmp(l->seen[i].region, region) == 0)
                        return &l->seen[i];
        return NULL;
}

static struct launcher__seen *seen_add(struct launcher *l) {
        if (ARRAY_GROW(&l->seen, &l->cap_seen, l->n_seen, 8) < 0)
                return NULL;
        return &l->seen[l->n_seen++];
}

/* When this process first saw an unowned VM that has no creation time. */
static int64_t first_seen(struct launcher *l, const char *region, uint32_t vmid, int64_t now) {
        pthread_mutex_lock(&l->mu);
        struct launcher__seen *s = seen_find(l, region, vmid);
        if (!s && (s = seen_add(l))) {
                snprintf(s->region, sizeof s->region, "%s", region);
                s->vmid = vmid;
                s->first_ms = now;
        }
        int64_t when = s ? s->first_ms : now;
        pthread_mutex_unlock(&l->mu);
        return when;
}

/* Its age in ms, or -1 when a claim owns it. */
static int64_t orphan_age(struct gc *g, struct pve_client *pve, const char *region, const char *node, uint32_t vmid) {
        json_t *config = NULL;
        char uid[LAUNCHER_UID_MAX];
        int64_t created = -1;
        int r = pve_vm_config_get(pve, node, vmid, &config);
        const char *desc = json_string_value(json_object_get(config, "description"));
        bool described = r == 0 && launcher_description_parse(desc, uid, &created) == 0;
        bool locked = json_object_get(config, "lock") != NULL;
        /* a claim's, as launchstep_vm_owner says (an older coordinator's VM by its description alone) */
        bool ours = described && (!launcher_description_names_uuid(desc) || launcher_config_uuid_is(config, uid));
        json_decref(config);
        if (r < 0 || locked || !ours || uid_owned(g, uid, strlen(uid)))
                return -1;
        if (created < 0)
                created = first_seen(g->l, region, vmid, g->now);
        return g->now - created;
}

/* A claim's recorded VM is listed: its own when its description and SMBIOS UUID say so (launchstep_vm_owner); a
 * VM with the claim's name is not enough, as a VMID reused by hand may carry a copy of it. */
/* The claim's ProxmoxNodeClass, read once a pass (borrowed; NULL when it cannot be read). */
static const json_t *claim_class(struct gc *g, const json_t *claim) {
        const char *name = kube_nodeclaim_of(claim).node_class;
        if (!name)
                return NULL;
        for (size_t i = 0; i < g->n_classes; i++)
                if (strcmp(g->classes[i].name, name) == 0)
                        return g->classes[i].obj;
        json_t *obj = NULL;
        int r = kube_get(g->kube, &kube_nodeclasses, NULL, name, &obj);
        if (r < 0 && r != -ENOENT && r != -ECANCELED)
                log_error("launcher: GC: ProxmoxNodeClass %s: %s", name, kube_client_error(g->kube));
        if (g->n_classes < GC_CLASSES_MAX) {
                g->classes[g->n_classes++] = (struct gc_class){ name, obj };
                return obj;
        }
        json_decref(obj); /* past the table's room: not kept, not synced this pass */
        return NULL;
}

static void note_claim_vm(struct gc *g, struct pve_client *pve, struct gc_owner *o, const char *node,
                          const json_t *vm) {
        json_t *config = NULL;
        o->vm = LAUNCHSTEP_GC_VM_OURS;
        if (!o->joined)
                return;
        if (pve_vm_config_get(pve, node, o->vmid, &config) < 0)
                o->vm = LAUNCHSTEP_GC_VM_UNKNOWN;
        else if (launchstep_vm_owner(o->uid, config) < 0)
                o->vm = LAUNCHSTEP_GC_VM_OTHER;
        const json_t *nc = o->vm == LAUNCHSTEP_GC_VM_OURS ? claim_class(g, o->claim) : NULL;
        if (nc)
                gc_error(g, launcher__sync_vm(pve, node, o->vmid, o->claim, nc, config,
                                              json_string_value(json_object_get(vm, "pool"))));
        json_decref(config);
}

static void gc_vm(struct gc *g, struct pve_client *pve, const char *region, const json_t *vm) {
        const char *node = json_string_value(json_object_get(vm, "node"));
        json_int_t vmid = json_integer_value(json_object_get(vm, "vmid"));
        json_t *tmpl = json_object_get(vm, "template");
        char err[512];
        if (!node || vmid <= 0 || json_integer_value(tmpl) == 1 || json_is_true(tmpl))
                return;
        struct gc_owner *first = vm_owner(g, NULL, region, (uint32_t)vmid);
        for (struct gc_owner *o = first; o; o = vm_owner(g, o, region, (uint32_t)vmid))
                note_claim_vm(g, pve, o, node, vm);
        if (first || !has_tag(json_string_value(json_object_get(vm, "tags")), LAUNCHER_TAG))
                return;
        int64_t age = orphan_age(g, pve, region, node, (uint32_t)vmid);
        if (age < g->l->o.orphan_vm_age_ms)
                return;
        log_info("launcher: GC: VM %lld on %s/%s is tagged pvescale, owned by no NodeClaim and %lld s old; deleting",
                 (long long)vmid, region, node, (long long)(age / 1000));
        int r = launcher__delete_vm(pve, node, (uint32_t)vmid, g->l->o.task_timeout_ms, err, sizeof err);
        if (r == 0)
                stats_vm_deleted(g->l->env.stats, STATS_VM_DELETED_GARBAGE_COLLECTED);
        if (r < 0 && r != -ECANCELED) /* a stop's cancel is no failure to log */
                r = log_error_errno(-EIO, "launcher: GC: %s", err);
        gc_error(g, r);
}

/* ---- reservations and ISOs of one host ---- */

static void gc_reservations(struct gc *g, const char *region, const char *node) {
        const struct launcher_env *e = &g->l->env;
        struct agents_client *a = e->agent_for_host ? e->agent_for_host(e->userdata, region, node) : NULL;
        json_t *list = NULL, *res;
        char uid[LAUNCHER_UID_MAX];
        size_t i;
        if (!a || agents_reservations(a, &list) < 0) {
                json_decref(list);
                return;
        }
        json_array_foreach(json_object_get(list, "reservations"), i, res) {
                const char *id = json_string_value(json_object_get(res, "id"));
                int64_t created = json_integer_value(json_object_get(res, "created_at")) * 1000;
                if (!id || launcher_owner_uid(json_string_value(json_object_get(res, "owner")), uid) < 0 ||
                    uid_owned(g, uid, strlen(uid)) || g->now - created < LAUNCHER__RESERVATION_GRACE_MS)
                        continue;
                log_info("launcher: GC: releasing reservation %s on %s: its NodeClaim is gone", id, node);
                int r = agents_release(a, id);
                gc_error(g, r == -ENOENT ? 0 : r);
        }
        json_decref(list);
}

/* "pvescale-<claim>-<uid8>.iso" → its uid8. */
static bool iso_uid8(const char *volid, char uid8[9]) {
        const char *file = strstr(volid, ":iso/pvescale-");
        size_t n = file ? strlen(file) : 0;
        if (n < 5 + 9 + 8 + 4 || strcmp(file + n - 4, ".iso") != 0 || file[n - 13] != '-')
                return false;
        memcpy(uid8, file + n - 12, 8);
        uid8[8] = '\0';
        return true;
}

static void gc_isos(struct gc *g, struct pve_client *pve, const char *node, const char *storage) {
        json_t *list = NULL, *e;
        char uid8[9], err[512];
        size_t i;
        if (pve_storage_content(pve, node, storage, "iso", &list) < 0)
                return;
        json_array_foreach(list, i, e) {
                const char *volid = json_string_value(json_object_get(e, "volid"));
                int64_t ctime = json_integer_value(json_object_get(e, "ctime")) * 1000;
                if (!volid || !iso_uid8(volid, uid8) || uid_owned(g, uid8, 8) ||
                    g->now - ctime < g->l->o.orphan_vm_age_ms)
                        continue;
                log_info("launcher: GC: deleting %s on %s: its NodeClaim is gone", volid, node);
                gc_error(g, launcher__delete_iso(pve, node, volid, g->l->o.task_timeout_ms, err, sizeof err));
        }
        json_decref(list);
}

static void gc_hosts(struct gc *g, struct pve_client *pve, const char *region) {
        json_t *list = NULL, *e;
        size_t i;
        if (pve_cluster_resources(pve, "storage", &list) < 0) {
                gc_error(g, -EIO);
                return;
        }
        json_array_foreach(list, i, e) {
                const char *node = json_string_value(json_object_get(e, "node"));
                const char *storage = json_string_value(json_object_get(e, "storage"));
                const char *content = json_string_value(json_object_get(e, "content"));
                if (node && storage && content && has_tag(content, "iso"))
                        gc_isos(g, pve, node, storage);
        }
        json_decref(list);
        list = NULL;
        if (pve_nodes(pve, &list) < 0)
                return;
        json_array_foreach(list, i, e) {
                const char *node = json_string_value(json_object_get(e, "node"));
                if (node)
                        gc_reservations(g, region, node);
        }
        json_decref(list);
}

static void gc_region(struct gc *g, const char *region) {
        const struct launcher_env *e = &g->l->env;
        struct pve_client *pve = e->pve_for_region(e->userdata, region);
        json_t *list = NULL, *vm;
        size_t i;
        if (!pve)
                return;
        int r = pve_cluster_resources(pve, "vm", &list);
        if (r < 0) {
                if (r != -ECANCELED)
                        log_error("launcher: GC: VMs of %s: %s", region, pve_client_error(pve));
                gc_error(g, r);
                return;
        }
        for (size_t k = 0; k < g->n_owners; k++) /* until the list shows them */
                if (g->owners[k].joined && strcmp(g->owners[k].region, region) == 0)
                        g->owners[k].vm = LAUNCHSTEP_GC_VM_GONE;
        json_array_foreach(list, i, vm)
                gc_vm(g, pve, region, vm);
        json_decref(list);
        gc_hosts(g, pve, region);
}

/* ---- tokens ---- */

static void gc_tokens(struct gc *g) {
        json_t *list = NULL, *s;
        size_t i;
        struct kube_list_options o = { .label_selector = TOKENS_LABEL_CLAIM_UID };
        if (kube_list(g->kube, &kube_secrets, TOKENS_NAMESPACE, &o, &list) < 0) {
                gc_error(g, -EIO);
                return;
        }
        json_array_foreach(json_object_get(list, "items"), i, s) {
                struct kube_meta meta = kube_meta_of(s);
                const char *name = meta.name;
                const char *uid = json_string_value(json_object_get(meta.labels, TOKENS_LABEL_CLAIM_UID));
                int64_t created = 0;
                /* the claims given may be a little older than a token made a moment ago */
                if (!name || !uid || uid_owned(g, uid, strlen(uid)) ||
                    rfc3339_parse(meta.creation_timestamp, &created) < 0 ||
                    g->now - created < LAUNCHER__RESERVATION_GRACE_MS)
                        continue;
                log_info("launcher: GC: deleting join token %s: its NodeClaim is gone", name);
                int r = kube_delete(g->kube, &kube_secrets, TOKENS_NAMESPACE, name, NULL, NULL);
                gc_error(g, r == -ENOENT ? 0 : r);
        }
        json_decref(list);
}

/* ---- claims that joined and lost their VM or their Node ---- */

static void gc_nodes(struct gc *g) {
        json_t *list = NULL, *n;
        size_t i;
        if (kube_list(g->kube, &kube_nodes, NULL, NULL, &list) < 0) {
                gc_error(g, -EIO);
                return;
        }
        json_array_foreach(json_object_get(list, "items"), i, n) {
                const char *name = kube_meta_of(n).name;
                for (size_t k = 0; name && k < g->n_owners; k++)
                        if (strcmp(g->owners[k].node, name) == 0)
                                g->owners[k].node_seen = true;
        }
        g->nodes_known = true;
        json_decref(list);
}

/* The claim as the API server has it now, when it is still that claim and not being deleted; NULL otherwise. */
static json_t *fresh_claim(struct gc *g, const struct gc_owner *o) {
        json_t *claim = NULL;
        int r = kube_get(g->kube, &kube_nodeclaims, NULL, o->name, &claim);
        const json_t *meta = json_object_get(claim, "metadata");
        const char *uid = json_string_value(json_object_get(meta, "uid"));
        if (r < 0 || !uid || strcmp(uid, o->uid) != 0 || kube_deleting(claim)) {
                gc_error(g, r == -ENOENT ? 0 : r);
                json_decref(claim);
                return NULL;
        }
        return claim;
}

static void delete_claim(struct gc *g, const struct gc_owner *o, const char *why) {
        struct kube_delete_options d = KUBE_DELETE_OPTIONS_INIT;
        json_t *claim = fresh_claim(g, o);
        if (!claim)
                return;
        log_info("launcher: GC: deleting NodeClaim %s: %s", o->name, why);
        int r = kube_event_emit(g->kube, &kube_nodeclaims, claim, "Warning", "GarbageCollected", why,
                                LAUNCHER__COMPONENT);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: event for NodeClaim %s: %s", o->name, kube_client_error(g->kube));
        d.precondition_uid = o->uid;
        r = kube_delete(g->kube, &kube_nodeclaims, NULL, o->name, &d, NULL);
        if (r < 0 && r != -ENOENT && r != -ECANCELED)
                log_error("launcher: GC: delete NodeClaim %s: %s", o->name, kube_client_error(g->kube));
        gc_error(g, r == -ENOENT ? 0 : r);
        json_decref(claim);
}

static int gc_claims(struct gc *g) {
        struct nodeclaim_status *st = malloc(sizeof *st);
        char why[512];
        if (!st)
                return -ENOMEM;
        for (size_t i = 0; i < g->n_owners; i++) {
                const struct gc_owner *o = &g->owners[i];
                if (!o->joined)
                        continue;
                nodeclaim_claim_status(o->claim, st, NULL, 0);
                if (launchstep_gc_claim(st, false, o->vm, !g->nodes_known || o->node_seen, why, sizeof why))
                        delete_claim(g, o, why);
        }
        free(st);
        return 0;
}

int launcher_collect_garbage(struct launcher *l, const json_t *claims) {
        struct gc g = { .l = l, .now = launcher__now(l) };
        g.kube = l->env.kube_for_thread ? l->env.kube_for_thread(l->env.userdata) : l->env.kube;
        if (!json_is_array(claims) || !g.kube)
                return -EINVAL;
        launcher__templates_pass(l, g.kube); /* logs its own errors; the rest of the pass does not depend on it */
        int r = gc_owners(&g, claims);
        for (size_t i = 0; r == 0 && l->env.cfg && i < l->env.cfg->n_clusters; i++)
                gc_region(&g, l->env.cfg->clusters[i].region);
        if (r == 0)
                gc_tokens(&g);
        if (r == 0)
                gc_nodes(&g);
        if (r == 0)
                r = gc_claims(&g);
        free(g.owners);
        for (size_t i = 0; i < g.n_classes; i++)
                json_decref(g.classes[i].obj);
        return r < 0 ? r : g.err;
}
