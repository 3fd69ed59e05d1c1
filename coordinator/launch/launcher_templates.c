/* launcher_templates: managed VM templates (ProxmoxTemplate), carried out on the garbage collection's pass. For
 * every host of a region where a ProxmoxNodeClass naming a ProxmoxTemplate launches (instanceTemplateRef {kind:
 * ProxmoxTemplate, name}), the host's template of the spec's generation is made when missing: Proxmox downloads
 * the image into the import storage (download-url, its checksum verified by Proxmox), a VM is created that imports
 * it as its boot disk (import-from) with a cloud-init drive, converted to a template, and then takes the
 * ProxmoxTemplate's name (older generations are then renamed "<name>-<their generation>", so the launcher's
 * lookup by name finds the new one: claims cloned from the old one become TemplateDrifted). Managed templates no
 * class uses any more are destroyed (Proxmox refuses while linked clones use them; tried again each pass), and a
 * ProxmoxTemplate's older image files on the import storage deleted. What
 * each host has is written to the ProxmoxTemplate's status; a failure is a Warning Event naming the host and
 * Proxmox's message. Which template on which host is decided in coordinator/model/templates.c. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "kube_object.h"
#include "log.h"
#include "rfc3339.h"
#include "templates.h"

#define TP_DOWNLOAD_INLINE_MS 3000 /* a download that takes longer goes on while the pass does the rest */
#define TP_MAX 64

struct tp_tpl {
        struct tpl_spec s;
        const json_t *obj;   /* borrowed from the pass's list */
        json_t *regions;     /* the regions classes naming it launch in; "*" = every region */
        json_t *hosts;       /* status.hosts written at the end of the pass */
        bool ok;             /* decoded */
};

struct tp {
        struct launcher *l;
        struct kube_client *kube;
        json_t *list; /* the ProxmoxTemplates */
        struct tp_tpl t[TP_MAX];
        size_t n;
        bool keep_unused; /* a ProxmoxTemplate could not be read: what looks unused may be its, so nothing goes */
};

static void tp_done(struct tp *p) {
        for (size_t i = 0; i < p->n; i++) {
                json_decref(p->t[i].regions);
                json_decref(p->t[i].hosts);
        }
        json_decref(p->list);
}

static struct tp_tpl *tp_find(struct tp *p, const char *name) {
        for (size_t i = 0; name && i < p->n; i++)
                if (p->t[i].ok && strcmp(p->t[i].s.name, name) == 0)
                        return &p->t[i];
        return NULL;
}

static int tp_load(struct tp *p) {
        size_t i;
        json_t *obj;
        char err[256];
        int r = kube_list(p->kube, &kube_proxmoxtemplates, NULL, NULL, &p->list);
        if (r == -ENOENT) /* the CRD is not installed: no managed templates */
                return r;
        if (r < 0) {
                log_error("launcher: templates: list ProxmoxTemplates: %s", kube_client_error(p->kube));
                return -EIO;
        }
        json_array_foreach(json_object_get(p->list, "items"), i, obj) {
                struct tp_tpl *t = &p->t[p->n];
                if (p->n == TP_MAX) {
                        log_error("launcher: templates: more than %d ProxmoxTemplates: the others wait", TP_MAX);
                        p->keep_unused = true;
                        break;
                }
                *t = (struct tp_tpl){ .obj = obj, .regions = json_array(), .hosts = json_array() };
                p->n++;
                if (!t->regions || !t->hosts)
                        return -ENOMEM;
                t->ok = tpl_spec_decode(obj, &t->s, err, sizeof err) == 0;
                p->keep_unused = p->keep_unused || !t->ok;
                if (!t->ok)
                        log_error("launcher: templates: ProxmoxTemplate %s: %s", kube_meta_of(obj).name, err);
        }
        return 0;
}

/* Which regions each template is needed in: those of the classes naming it. */
static int tp_uses(struct tp *p) {
        json_t *list = NULL, *nc;
        size_t i;
        if (kube_list(p->kube, &kube_nodeclasses, NULL, NULL, &list) < 0) {
                log_error("launcher: templates: list ProxmoxNodeClasses: %s", kube_client_error(p->kube));
                return -EIO;
        }
        json_array_foreach(json_object_get(list, "items"), i, nc) {
                const json_t *spec = json_object_get(nc, "spec"), *ref = json_object_get(spec, "instanceTemplateRef");
                const char *kind = json_string_value(json_object_get(ref, "kind"));
                const char *region = json_string_value(json_object_get(spec, "region"));
                struct tp_tpl *t = kind && strcmp(kind, "ProxmoxTemplate") == 0 && !kube_deleting(nc) ?
                                           tp_find(p, json_string_value(json_object_get(ref, "name"))) : NULL;
                if (t)
                        json_array_append_new(t->regions, json_string(region ? region : "*"));
        }
        json_decref(list);
        return 0;
}

static bool wanted_in(const struct tp_tpl *t, const char *region) {
        size_t i;
        const json_t *r;
        if (!t->ok || (t->s.region && strcmp(t->s.region, region) != 0))
                return false;
        json_array_foreach(t->regions, i, r) {
                const char *s = json_string_value(r);
                if (strcmp(s, "*") == 0 || strcmp(s, region) == 0)
                        return true;
        }
        return false;
}

/* ---- one host ---- */

struct tp_host {
        struct tp *p;
        struct pve_client *pve;
        const char *region, *node;
        const json_t *storages;
        char err[512];
};

static int host_fail(struct tp_host *h, int r, const char *what) {
        snprintf(h->err, sizeof h->err, "%s: %s: %s", h->node, what, pve_client_error(h->pve));
        return r;
}

static int wait_task(struct tp_host *h, int r, char *upid, const char *what, int64_t timeout_ms) {
        if (r == 0)
                r = launcher__pve_task_wait(h->pve, upid, LAUNCHER__POLL_LATER_MS, timeout_ms);
        free(upid);
        return r < 0 ? host_fail(h, r, what) : 0;
}

static bool has_volume(struct tp_host *h, const char *storage, const char *volid) {
        json_t *list = NULL, *e;
        size_t i;
        bool found = false;
        if (pve_storage_content(h->pve, h->node, storage, "import", &list) < 0)
                return false;
        json_array_foreach(list, i, e) {
                const char *v = json_string_value(json_object_get(e, "volid"));
                found = found || (v && strcmp(v, volid) == 0);
        }
        json_decref(list);
        return found;
}

static int downloading(struct tp_host *h, const char *upid) {
        snprintf(h->err, sizeof h->err, "%s: downloading the image (task %s)", h->node, upid);
        return -EINPROGRESS;
}

/* A download a pass began and left running: -EINPROGRESS while it runs, 0 when it ended well (or is unknown to
 * Proxmox any more: the volume then tells), else its failure. */
static int download_ended(struct tp_host *h, const char *key) {
        const char *upid = json_string_value(json_object_get(h->p->l->downloads, key));
        struct pve_task_status ts;
        if (!upid)
                return 0;
        int r = pve_task_status(h->pve, upid, &ts);
        if (r == 0 && ts.running)
                return downloading(h, upid);
        if (r == 0 && !pve_task_exit_ok(ts.exitstatus))
                snprintf(h->err, sizeof h->err, "%s: download of the image: task download failed: %s", h->node,
                         ts.exitstatus);
        json_object_del(h->p->l->downloads, key);
        return r == 0 && !pve_task_exit_ok(ts.exitstatus) ? -EIO : 0;
}

/* The image on the host's import storage: there already, or downloaded by Proxmox (download-url). A download that
 * takes longer than TP_DOWNLOAD_INLINE_MS is left running (-EINPROGRESS, the host Building) and looked at again by
 * the next pass: the pass goes on with the other hosts. */
static int download(struct tp_host *h, const struct tpl_spec *s, const char *storage, const char *volid) {
        struct pve_download d = { .url = s->url, .content = "import", .filename = s->image_file,
                                  .checksum = s->checksum };
        char key[1024], *upid = NULL;
        d.checksum_algorithm = s->checksum ? s->checksum_type : NULL;
        snprintf(key, sizeof key, "%s/%s/%s", h->region, h->node, volid);
        int r = download_ended(h, key);
        if (r < 0 || has_volume(h, storage, volid))
                return r;
        log_info("launcher: templates: %s: downloading %s to %s on %s", s->name, s->url, volid, h->node);
        r = pve_storage_download_url(h->pve, h->node, storage, &d, &upid);
        if (r == 0)
                r = launcher__pve_task_wait(h->pve, upid, LAUNCHER__POLL_LATER_MS, TP_DOWNLOAD_INLINE_MS);
        if (r == -ETIMEDOUT && json_object_set_new(h->p->l->downloads, key, json_string(upid)) == 0)
                r = downloading(h, upid);
        else if (r < 0)
                host_fail(h, r, "download of the image");
        free(upid);
        return r;
}

static int params_of(const json_t *obj, struct pve_params *p) {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)obj, key, v)
                if (pve_params_add(p, key, json_string_value(v)) < 0)
                        return -ENOMEM;
        return 0;
}

static int create(struct tp_host *h, const struct tpl_spec *s, const char *disk_storage, const char *volid,
                  uint32_t *ret_vmid) {
        _cleanup_(json_decrefp) json_t *config = tpl_create_params(s, disk_storage, volid);
        struct pve_params p = PVE_PARAMS_INIT;
        char *upid = NULL;
        if (!config || params_of(config, &p) < 0) {
                pve_params_done(&p);
                return -ENOMEM;
        }
        int r = pve_nextid(h->pve, ret_vmid);
        if (r < 0) {
                pve_params_done(&p);
                return host_fail(h, r, "next VMID");
        }
        r = pve_vm_create(h->pve, h->node, *ret_vmid, &p, &upid);
        pve_params_done(&p);
        return wait_task(h, r, upid, "create of the template VM", h->p->l->o.task_timeout_ms);
}

static int rename_vm(struct tp_host *h, uint32_t vmid, const char *name) {
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_add(&p, "name", name);
        int r = pve_vm_config_put(h->pve, h->node, vmid, &p);
        pve_params_done(&p);
        return r < 0 ? host_fail(h, r, "rename of a template") : 0;
}

/* The new template takes the name first, then the older ones lose it: a launch in between finds one of them (the
 * lowest VMID), never none; one cloned from the old is drifted at once. */
static int finalize(struct tp_host *h, const struct tpl_spec *s, const struct tpl_host_plan *plan, uint32_t vmid) {
        int r = vmid ? rename_vm(h, vmid, s->name) : 0;
        for (size_t i = 0; r == 0 && i < plan->n_retire; i++) {
                r = rename_vm(h, plan->retire[i], plan->retire_name[i]);
                if (r == 0)
                        log_info("launcher: templates: %s: template %u on %s retired as %s", s->name, plan->retire[i],
                                 h->node, plan->retire_name[i]);
        }
        return r;
}

static int build(struct tp_host *h, const struct tpl_spec *s, const struct tpl_host_plan *plan, uint32_t *ret_vmid,
                 char *image, size_t image_len) {
        const char *import = tpl_pick_storage(s, h->storages, "import");
        const char *disks = tpl_pick_storage(s, h->storages, "images");
        char *upid = NULL;
        if (!import || !disks) {
                snprintf(h->err, sizeof h->err, "%s: none of spec.storageIDs has the %s content type there", h->node,
                         import ? "images" : "import");
                return -ENOENT;
        }
        snprintf(image, image_len, "%s:import/%s", import, s->image_file);
        int r = download(h, s, import, image);
        if (r == 0)
                r = create(h, s, disks, image, ret_vmid);
        if (r == 0) {
                r = pve_vm_template(h->pve, h->node, *ret_vmid, &upid);
                r = wait_task(h, r, upid, "conversion to a template", h->p->l->o.task_timeout_ms);
        }
        return r == 0 ? finalize(h, s, plan, *ret_vmid) : r;
}

static int discard(struct tp_host *h, uint32_t vmid) {
        int r = launcher__delete_vm(h->pve, h->node, vmid, h->p->l->o.task_timeout_ms, h->err, sizeof h->err);
        if (r == 0)
                log_info("launcher: templates: deleted VM %u on %s, a build that did not finish", vmid, h->node);
        return r;
}

static const char *host_state(int r) {
        if (r == -EINPROGRESS)
                return "Building";
        return r == 0 ? "Ready" : "Failed";
}

static void note_host(struct tp_tpl *t, struct tp_host *h, uint32_t vmid, const char *image, int r) {
        const char *state = host_state(r);
        json_t *e = json_pack("{s:s, s:s, s:I, s:s, s:s}", "region", h->region, "host", h->node, "vmid",
                              (json_int_t)(r == 0 ? vmid : 0), "image", image, "state", state);
        if (e && r < 0)
                json_object_set_new(e, "message", json_string(h->err));
        if (e)
                json_array_append_new(t->hosts, e);
}

static void host_template(struct tp_host *h, struct tp_tpl *t, const json_t *vms) {
        struct tpl_host_plan plan;
        char image[512] = "";
        uint32_t vmid = 0;
        int r = 0;
        tpl_plan_host(&t->s, vms, &plan);
        h->err[0] = '\0';
        if (plan.action == TPL_DISCARD)
                r = discard(h, plan.vmid);
        if (r == 0 && (plan.action == TPL_DISCARD || plan.action == TPL_BUILD))
                r = build(h, &t->s, &plan, &vmid, image, sizeof image);
        if (plan.action == TPL_FINALIZE || plan.action == TPL_READY) {
                vmid = plan.vmid;
                r = finalize(h, &t->s, &plan, plan.action == TPL_FINALIZE ? vmid : 0);
        }
        if (r == 0 && plan.action != TPL_READY)
                log_info("launcher: templates: %s: template %u ready on %s (generation %s)", t->s.name, vmid, h->node,
                         t->s.gen);
        if (r < 0 && r != -ECANCELED && r != -EINPROGRESS)
                log_error("launcher: templates: %s: %s", t->s.name, h->err);
        note_host(t, h, vmid, image, r);
}

static void remove_unused(struct tp_host *h, const json_t *vms, const struct tpl_spec *const *wanted, size_t n) {
        size_t i;
        const json_t *vm;
        json_array_foreach(vms, i, vm) {
                json_int_t vmid = json_integer_value(json_object_get(vm, "vmid"));
                if (!tpl_unused(vm, wanted, n))
                        continue;
                int r = launcher__delete_vm(h->pve, h->node, (uint32_t)vmid, h->p->l->o.task_timeout_ms, h->err,
                                            sizeof h->err);
                if (r == 0)
                        log_info("launcher: templates: deleted template %" JSON_INTEGER_FORMAT " (%s) on %s: no class"
                                 " uses it", vmid, json_string_value(json_object_get(vm, "name")), h->node);
                else
                        log_info("launcher: templates: template %" JSON_INTEGER_FORMAT " on %s stays: %s", vmid,
                                 h->node, h->err);
        }
}

/* The older images of the specs on one import storage of the host (a new image has a new file). */
static void remove_stale_images(struct tp_host *h, const char *storage) {
        const struct tpl_spec *specs[TP_MAX];
        json_t *list = NULL, *e;
        size_t i, n = 0;
        for (size_t k = 0; k < h->p->n; k++)
                if (h->p->t[k].ok)
                        specs[n++] = &h->p->t[k].s;
        if (pve_storage_content(h->pve, h->node, storage, "import", &list) < 0)
                return;
        json_array_foreach(list, i, e) {
                const char *volid = json_string_value(json_object_get(e, "volid"));
                const char *file = volid ? strstr(volid, ":import/") : NULL;
                if (!file || !tpl_stale_image(file + strlen(":import/"), specs, n))
                        continue;
                if (launcher__delete_iso(h->pve, h->node, volid, h->p->l->o.task_timeout_ms, h->err,
                                         sizeof h->err) == 0)
                        log_info("launcher: templates: deleted %s on %s: an older image", volid, h->node);
                else
                        log_error("launcher: templates: %s", h->err);
        }
        json_decref(list);
}

static void remove_stale(struct tp_host *h, const struct tpl_spec *const *wanted, size_t n) {
        const char *done[TP_MAX];
        size_t n_done = 0;
        for (size_t i = 0; i < n; i++) {
                const char *storage = tpl_pick_storage(wanted[i], h->storages, "import");
                bool seen = false;
                for (size_t k = 0; storage && k < n_done; k++)
                        seen = seen || strcmp(done[k], storage) == 0;
                if (!storage || seen)
                        continue;
                done[n_done++] = storage;
                remove_stale_images(h, storage);
        }
}

static void tp_host(struct tp *p, struct pve_client *pve, const char *region, const char *node) {
        struct tp_host h = { .p = p, .pve = pve, .region = region, .node = node };
        const struct tpl_spec *wanted[TP_MAX];
        size_t n = 0;
        json_t *vms = NULL, *storages = NULL;
        for (size_t i = 0; i < p->n; i++)
                if (wanted_in(&p->t[i], region))
                        wanted[n++] = &p->t[i].s;
        if (pve_vm_list(pve, node, &vms) < 0 || (n && pve_node_storages(pve, node, &storages) < 0)) {
                log_error("launcher: templates: %s: %s", node, pve_client_error(pve));
                json_decref(vms);
                return;
        }
        h.storages = storages;
        for (size_t i = 0; i < p->n; i++)
                if (wanted_in(&p->t[i], region))
                        host_template(&h, &p->t[i], vms);
        json_decref(vms);
        vms = NULL;
        if (!p->keep_unused && pve_vm_list(pve, node, &vms) == 0) /* again: this pass renamed or made some */
                remove_unused(&h, vms, wanted, n);
        if (!p->keep_unused)
                remove_stale(&h, wanted, n);
        json_decref(vms);
        json_decref(storages);
}

static void tp_region(struct tp *p, const char *region) {
        const struct launcher_env *e = &p->l->env;
        struct pve_client *pve = e->pve_for_region(e->userdata, region);
        json_t *nodes = NULL, *n;
        size_t i;
        if (!pve || pve_nodes(pve, &nodes) < 0)
                return;
        json_array_foreach(nodes, i, n) {
                const char *node = json_string_value(json_object_get(n, "node"));
                const char *status = json_string_value(json_object_get(n, "status"));
                if (node && (!status || strcmp(status, "online") == 0))
                        tp_host(p, pve, region, node);
        }
        json_decref(nodes);
}

/* ---- status ---- */

static const json_t *old_host(const json_t *obj, const char *region, const char *host) {
        size_t i;
        const json_t *e;
        json_array_foreach(json_object_get(json_object_get(obj, "status"), "hosts"), i, e) {
                const char *r = json_string_value(json_object_get(e, "region"));
                const char *n = json_string_value(json_object_get(e, "host"));
                if (r && n && strcmp(r, region) == 0 && strcmp(n, host) == 0)
                        return e;
        }
        return NULL;
}

/* A Warning Event for each host whose failure is new (not the message its status already had). */
static void emit_failures(struct tp *p, const struct tp_tpl *t, char *msg, size_t len, size_t *ret_failed) {
        size_t i;
        const json_t *e;
        msg[0] = '\0';
        *ret_failed = 0;
        json_array_foreach(t->hosts, i, e) {
                const char *m = json_string_value(json_object_get(e, "message"));
                const char *state = json_string_value(json_object_get(e, "state"));
                if (!m || !state || strcmp(state, "Failed") != 0)
                        continue;
                (*ret_failed)++;
                size_t k = strlen(msg);
                snprintf(msg + k, len - k, "%s%s", k ? "; " : "", m);
                const json_t *old = old_host(t->obj, json_string_value(json_object_get(e, "region")),
                                             json_string_value(json_object_get(e, "host")));
                const char *was = json_string_value(json_object_get(old, "message"));
                if (was && strcmp(was, m) == 0)
                        continue;
                if (kube_event_emit(p->kube, &kube_proxmoxtemplates, t->obj, "Warning", "TemplateBuildFailed", m,
                                    LAUNCHER__COMPONENT) < 0)
                        log_error("launcher: templates: event: %s", kube_client_error(p->kube));
        }
}

struct tp_counts {
        size_t n, ready, failed;
        char msg[2048]; /* the failed hosts' messages */
};

static size_t count_state(const json_t *hosts, const char *state) {
        size_t i, k = 0;
        const json_t *e;
        json_array_foreach(hosts, i, e) {
                const char *st = json_string_value(json_object_get(e, "state"));
                k += st && strcmp(st, state) == 0;
        }
        return k;
}

/* The Ready condition's reason and message. */
static const char *ready_reason(const struct tp_counts *c, const char **ret_message) {
        *ret_message = c->msg;
        if (c->failed)
                return "BuildFailed";
        if (!c->n) {
                *ret_message = "no ProxmoxNodeClass launching in a region names it";
                return "NotUsed";
        }
        if (c->ready < c->n) {
                *ret_message = "a download or build is under way (status.hosts)";
                return "Building";
        }
        *ret_message = "the template is on every host that needs it";
        return "Built";
}

static json_t *ready_condition(const struct tp_tpl *t, const struct tp_counts *c, int64_t now) {
        const char *status = c->n && c->ready == c->n ? "True" : "False", *message = NULL;
        const char *reason = ready_reason(c, &message);
        const json_t *old = json_array_get(json_object_get(json_object_get(t->obj, "status"), "conditions"), 0);
        const char *old_status = json_string_value(json_object_get(old, "status"));
        char when[40];
        if (old_status && strcmp(old_status, status) == 0 && json_object_get(old, "lastTransitionTime"))
                snprintf(when, sizeof when, "%s", json_string_value(json_object_get(old, "lastTransitionTime")));
        else
                rfc3339_format(now, when, sizeof when);
        return json_pack("[{s:s, s:s, s:s, s:s, s:s}]", "type", "Ready", "status", status, "reason", reason, "message",
                         message, "lastTransitionTime", when);
}

static void write_status(struct tp *p, const struct tp_tpl *t) {
        struct tp_counts c = { .n = json_array_size(t->hosts), .ready = count_state(t->hosts, "Ready") };
        char summary[48];
        emit_failures(p, t, c.msg, sizeof c.msg, &c.failed);
        snprintf(summary, sizeof summary, "%zu/%zu", c.ready, c.n);
        json_t *cond = ready_condition(t, &c, launcher__now(p->l));
        json_t *patch = json_pack("{s:{s:s, s:s, s:O, s:o}}", "status", "specHash", t->s.hash, "summary", summary,
                                  "hosts", t->hosts, "conditions", cond);
        int r = -ENOMEM;
        if (patch && json_equal(json_object_get(patch, "status"), json_object_get(t->obj, "status"))) {
                json_decref(patch);
                return; /* as written by an earlier pass */
        }
        if (patch)
                r = kube_patch(p->kube, &kube_proxmoxtemplates, NULL, t->s.name, "status", KUBE_PATCH_MERGE, patch,
                               NULL);
        if (r < 0 && r != -ECANCELED)
                log_error("launcher: templates: status of %s: %s", t->s.name, kube_client_error(p->kube));
        json_decref(patch);
}

int launcher__templates_pass(struct launcher *l, struct kube_client *kube) {
        struct tp p = { .l = l, .kube = kube };
        int r = tp_load(&p);
        if (r == 0)
                r = tp_uses(&p);
        for (size_t i = 0; r == 0 && l->env.cfg && i < l->env.cfg->n_clusters; i++)
                tp_region(&p, l->env.cfg->clusters[i].region);
        for (size_t i = 0; r == 0 && i < p.n; i++)
                if (p.t[i].ok)
                        write_status(&p, &p.t[i]);
        tp_done(&p);
        return r;
}
