/* pve_request: pure parts of the Proxmox VE client: parameters, request builders, UPIDs, error mapping. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "array.h"
#include "http_client.h"
#include "pve.h"

/* ---- parameters ---- */

/* Root-only VM options (pve-notes §1, §5): a token gets HTTP 500 for them, and pinning is the agents' job. */
static const char *const forbidden_keys[] = { "affinity", "hookscript", "args", NULL };

static bool key_forbidden(const char *key) {
        for (const char *const *k = forbidden_keys; *k; k++)
                if (strcmp(*k, key) == 0)
                        return true;
        return false;
}

void pve_params_done(struct pve_params *p) {
        for (size_t i = 0; i < p->n; i++) {
                free(p->items[i].key);
                free(p->items[i].value);
        }
        free(p->items);
        *p = (struct pve_params)PVE_PARAMS_INIT;
}

static int params_fail(struct pve_params *p, int r) {
        if (!p->error)
                p->error = r;
        return r;
}

static int params_grow(struct pve_params *p) {
        return ARRAY_GROW(&p->items, &p->cap, p->n, 8);
}

int pve_params_add(struct pve_params *p, const char *key, const char *value) {
        if (p->error)
                return p->error;
        if (!key || !*key || !value)
                return params_fail(p, -EINVAL);
        if (key_forbidden(key))
                return params_fail(p, -EPERM);
        if (params_grow(p) < 0)
                return params_fail(p, -ENOMEM);
        char *k = strdup(key), *v = strdup(value);
        if (!k || !v) {
                free(k);
                free(v);
                return params_fail(p, -ENOMEM);
        }
        p->items[p->n++] = (struct pve_param){ k, v };
        return 0;
}

int pve_params_addf(struct pve_params *p, const char *key, const char *fmt, ...) {
        va_list ap;
        char *v;
        va_start(ap, fmt);
        int n = vasprintf(&v, fmt, ap);
        va_end(ap);
        if (n < 0)
                return params_fail(p, -ENOMEM);
        int r = pve_params_add(p, key, v);
        free(v);
        return r;
}

int pve_params_add_int(struct pve_params *p, const char *key, long long value) {
        return pve_params_addf(p, key, "%lld", value);
}

int pve_params_add_bool(struct pve_params *p, const char *key, bool value) {
        return pve_params_add(p, key, value ? "1" : "0");
}

/* Append a copy of every parameter of src. */
static int pve_params_add_all(struct pve_params *p, const struct pve_params *src) {
        if (src && src->error)
                return params_fail(p, src->error);
        for (size_t i = 0; src && i < src->n; i++) {
                int r = pve_params_add(p, src->items[i].key, src->items[i].value);
                if (r < 0)
                        return r;
        }
        return p->error;
}

static int append_pair(char **out, size_t *len, const struct pve_param *pp) {
        char *k = http_client_escape(pp->key), *v = http_client_escape(pp->value);
        int r = -ENOMEM;
        if (k && v) {
                size_t need = *len + strlen(k) + strlen(v) + 3;
                char *grown = realloc(*out, need);
                if (grown) {
                        *len += (size_t)sprintf(grown + *len, "%s%s=%s", *len ? "&" : "", k, v);
                        *out = grown;
                        r = 0;
                }
        }
        free(k);
        free(v);
        return r;
}

char *pve_params_encode(const struct pve_params *p) {
        char *out = strdup("");
        size_t len = 0;
        for (size_t i = 0; out && i < p->n; i++)
                if (append_pair(&out, &len, &p->items[i]) < 0) {
                        free(out);
                        return NULL;
                }
        return out;
}

/* ---- request builders ---- */

void pve_request_done(struct pve_request *r) {
        free(r->path);
        pve_params_done(&r->params);
        *r = (struct pve_request){ 0 };
}

/* Start a request: path is a printf format whose %s arguments are already escaped. */
static int req_start(struct pve_request *r, const char *method, const char *endpoint, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int req_start(struct pve_request *r, const char *method, const char *endpoint, const char *fmt, ...) {
        *r = (struct pve_request){ .method = method, .endpoint = endpoint };
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&r->path, fmt, ap);
        va_end(ap);
        if (n < 0) {
                r->path = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* A path segment, escaped (a volume id such as local:iso/x.iso must stay one segment). */
struct seg {
        char *s;
};

static void seg_free(struct seg *s) {
        free(s->s);
}

#define SEG(name) __attribute__((cleanup(seg_free))) struct seg name = { NULL }

static bool seg_ok(struct seg *s, const char *value) {
        s->s = value && *value ? http_client_escape(value) : NULL;
        return s->s != NULL;
}

static int req_finish(struct pve_request *r) {
        return r->params.error;
}

int pve_req_cluster_status(struct pve_request *ret) {
        return req_start(ret, "GET", "/cluster/status", "/cluster/status");
}

int pve_req_cluster_resources(struct pve_request *ret, const char *type) {
        int r = req_start(ret, "GET", "/cluster/resources", "/cluster/resources");
        if (r == 0 && type)
                pve_params_add(&ret->params, "type", type);
        return r < 0 ? r : req_finish(ret);
}

int pve_req_nextid(struct pve_request *ret, uint32_t vmid) {
        int r = req_start(ret, "GET", "/cluster/nextid", "/cluster/nextid");
        if (r == 0 && vmid)
                pve_params_add_int(&ret->params, "vmid", vmid);
        return r < 0 ? r : req_finish(ret);
}

int pve_req_nodes(struct pve_request *ret) {
        return req_start(ret, "GET", "/nodes", "/nodes");
}

int pve_req_node_status(struct pve_request *ret, const char *node) {
        SEG(n);
        *ret = (struct pve_request){ 0 };
        if (!seg_ok(&n, node))
                return -EINVAL;
        return req_start(ret, "GET", "/nodes/{node}/status", "/nodes/%s/status", n.s);
}

void pve_node_status_decode(const json_t *status, struct pve_node_status *ret) {
        *ret = (struct pve_node_status){ .cpus = json_object_get(json_object_get(status, "cpuinfo"), "cpus"),
                                         .memory_total = json_object_get(json_object_get(status, "memory"), "total") };
}

int pve_req_vm_list(struct pve_request *ret, const char *node) {
        SEG(n);
        *ret = (struct pve_request){ 0 };
        if (!seg_ok(&n, node))
                return -EINVAL;
        return req_start(ret, "GET", "/nodes/{node}/qemu", "/nodes/%s/qemu", n.s);
}

/* Start a request on /nodes/{node}/qemu/{vmid}<suffix>. */
static int vm_req(struct pve_request *r, const char *method, const char *endpoint, const char *node, uint32_t vmid,
                  const char *suffix) {
        SEG(n);
        *r = (struct pve_request){ 0 };
        if (!seg_ok(&n, node) || vmid == 0)
                return -EINVAL;
        return req_start(r, method, endpoint, "/nodes/%s/qemu/%" PRIu32 "%s", n.s, vmid, suffix);
}

static void add_opt(struct pve_params *p, const char *key, const char *value) {
        if (value)
                pve_params_add(p, key, value);
}

int pve_req_vm_clone(struct pve_request *ret, const char *node, uint32_t vmid, const struct pve_clone *o) {
        int r = vm_req(ret, "POST", "/nodes/{node}/qemu/{vmid}/clone", node, vmid, "/clone");
        if (r < 0)
                return r;
        if (!o || o->newid == 0)
                return -EINVAL;
        struct pve_params *p = &ret->params;
        pve_params_add_int(p, "newid", o->newid);
        add_opt(p, "name", o->name);
        add_opt(p, "target", o->target);
        add_opt(p, "pool", o->pool);
        add_opt(p, "storage", o->storage);
        add_opt(p, "format", o->format);
        add_opt(p, "description", o->description);
        if (o->full)
                pve_params_add_bool(p, "full", true);
        return req_finish(ret);
}

int pve_req_vm_config_get(struct pve_request *ret, const char *node, uint32_t vmid) {
        return vm_req(ret, "GET", "/nodes/{node}/qemu/{vmid}/config", node, vmid, "/config");
}

int pve_req_vm_config_set(struct pve_request *ret, const char *node, uint32_t vmid, bool async,
                          const struct pve_params *config) {
        int r = vm_req(ret, async ? "POST" : "PUT", "/nodes/{node}/qemu/{vmid}/config", node, vmid, "/config");
        if (r < 0)
                return r;
        pve_params_add_all(&ret->params, config);
        return req_finish(ret);
}

int pve_req_vm_resize(struct pve_request *ret, const char *node, uint32_t vmid, const char *disk, const char *size) {
        int r = vm_req(ret, "PUT", "/nodes/{node}/qemu/{vmid}/resize", node, vmid, "/resize");
        if (r < 0)
                return r;
        if (!disk || !size)
                return -EINVAL;
        pve_params_add(&ret->params, "disk", disk);
        pve_params_add(&ret->params, "size", size);
        return req_finish(ret);
}

static const char *status_endpoint(const char *action) {
        static const char *const endpoints[][2] = {
                { "start", "/nodes/{node}/qemu/{vmid}/status/start" },
                { "stop", "/nodes/{node}/qemu/{vmid}/status/stop" },
                { "shutdown", "/nodes/{node}/qemu/{vmid}/status/shutdown" },
                { "reboot", "/nodes/{node}/qemu/{vmid}/status/reboot" },
                { "current", "/nodes/{node}/qemu/{vmid}/status/current" },
        };
        for (size_t i = 0; action && i < sizeof endpoints / sizeof endpoints[0]; i++)
                if (strcmp(endpoints[i][0], action) == 0)
                        return endpoints[i][1];
        return NULL;
}

int pve_req_vm_status(struct pve_request *ret, const char *node, uint32_t vmid, const char *action) {
        const char *endpoint = status_endpoint(action);
        char suffix[32];
        *ret = (struct pve_request){ 0 };
        if (!endpoint)
                return -EINVAL;
        snprintf(suffix, sizeof suffix, "/status/%s", action);
        return vm_req(ret, strcmp(action, "current") == 0 ? "GET" : "POST", endpoint, node, vmid, suffix);
}

int pve_req_vm_delete(struct pve_request *ret, const char *node, uint32_t vmid, bool purge,
                      bool destroy_unreferenced_disks) {
        int r = vm_req(ret, "DELETE", "/nodes/{node}/qemu/{vmid}", node, vmid, "");
        if (r < 0)
                return r;
        if (purge)
                pve_params_add_bool(&ret->params, "purge", true);
        if (destroy_unreferenced_disks)
                pve_params_add_bool(&ret->params, "destroy-unreferenced-disks", true);
        return req_finish(ret);
}

static int task_req(struct pve_request *r, const char *endpoint, const char *upid, const char *suffix) {
        struct pve_upid u;
        SEG(n);
        SEG(id);
        *r = (struct pve_request){ 0 };
        if (!upid || pve_upid_parse(upid, &u) < 0 || !seg_ok(&n, u.node) || !seg_ok(&id, upid))
                return -EINVAL;
        return req_start(r, "GET", endpoint, "/nodes/%s/tasks/%s/%s", n.s, id.s, suffix);
}

int pve_req_task_status(struct pve_request *ret, const char *upid) {
        return task_req(ret, "/nodes/{node}/tasks/{upid}/status", upid, "status");
}

/* Start a request on /nodes/{node}/storage/{storage}<suffix>. */
static int storage_req(struct pve_request *r, const char *method, const char *endpoint, const char *node,
                       const char *storage, const char *suffix) {
        SEG(n);
        SEG(s);
        *r = (struct pve_request){ 0 };
        if (!seg_ok(&n, node) || !seg_ok(&s, storage))
                return -EINVAL;
        return req_start(r, method, endpoint, "/nodes/%s/storage/%s%s", n.s, s.s, suffix);
}

int pve_req_storage_content(struct pve_request *ret, const char *node, const char *storage, const char *content) {
        int r = storage_req(ret, "GET", "/nodes/{node}/storage/{storage}/content", node, storage, "/content");
        if (r < 0)
                return r;
        add_opt(&ret->params, "content", content);
        return req_finish(ret);
}

int pve_req_node_storages(struct pve_request *ret, const char *node) {
        SEG(n);
        *ret = (struct pve_request){ 0 };
        if (!seg_ok(&n, node))
                return -EINVAL;
        return req_start(ret, "GET", "/nodes/{node}/storage", "/nodes/%s/storage", n.s);
}

int pve_req_storage_download_url(struct pve_request *ret, const char *node, const char *storage,
                                 const struct pve_download *o) {
        int r = storage_req(ret, "POST", "/nodes/{node}/storage/{storage}/download-url", node, storage,
                            "/download-url");
        if (r < 0)
                return r;
        if (!o->url || !o->content || !o->filename || (!o->checksum != !o->checksum_algorithm))
                return -EINVAL;
        pve_params_add(&ret->params, "url", o->url);
        pve_params_add(&ret->params, "content", o->content);
        pve_params_add(&ret->params, "filename", o->filename);
        add_opt(&ret->params, "checksum", o->checksum);
        add_opt(&ret->params, "checksum-algorithm", o->checksum_algorithm);
        return req_finish(ret);
}

int pve_req_vm_create(struct pve_request *ret, const char *node, uint32_t vmid, const struct pve_params *config) {
        SEG(n);
        *ret = (struct pve_request){ 0 };
        if (!seg_ok(&n, node) || vmid == 0)
                return -EINVAL;
        int r = req_start(ret, "POST", "/nodes/{node}/qemu", "/nodes/%s/qemu", n.s);
        if (r < 0)
                return r;
        pve_params_add_int(&ret->params, "vmid", vmid);
        pve_params_add_all(&ret->params, config);
        return req_finish(ret);
}

int pve_req_vm_template(struct pve_request *ret, const char *node, uint32_t vmid) {
        int r = vm_req(ret, "POST", "/nodes/{node}/qemu/{vmid}/template", node, vmid, "/template");
        return r < 0 ? r : req_finish(ret);
}

int pve_req_storage_content_delete(struct pve_request *ret, const char *node, const char *storage,
                                   const char *volume, unsigned delay_s) {
        SEG(v);
        *ret = (struct pve_request){ 0 };
        if (!seg_ok(&v, volume) || delay_s > 30)
                return -EINVAL;
        char suffix[1024];
        if ((size_t)snprintf(suffix, sizeof suffix, "/content/%s", v.s) >= sizeof suffix)
                return -EINVAL;
        int r = storage_req(ret, "DELETE", "/nodes/{node}/storage/{storage}/content/{volume}", node, storage,
                            suffix);
        if (r == 0 && delay_s)
                pve_params_add_int(&ret->params, "delay", delay_s);
        return r < 0 ? r : req_finish(ret);
}

int pve_req_storage_upload(struct pve_request *ret, const char *node, const char *storage, const char *content,
                           const char *filename, const void *data, size_t len) {
        int r = storage_req(ret, "POST", "/nodes/{node}/storage/{storage}/upload", node, storage, "/upload");
        if (r < 0)
                return r;
        if (!content || !filename || !*filename || !data)
                return -EINVAL;
        /* pve-http-server's streaming parser wants the fields first and the file part (named "filename") last. */
        pve_params_add(&ret->params, "content", content);
        ret->upload_data = data;
        ret->upload_len = len;
        ret->upload_name = filename;
        return req_finish(ret);
}

int pve_req_vm_firewall_options_set(struct pve_request *ret, const char *node, uint32_t vmid,
                                    const struct pve_params *options) {
        int r = vm_req(ret, "PUT", "/nodes/{node}/qemu/{vmid}/firewall/options", node, vmid, "/firewall/options");
        if (r < 0)
                return r;
        pve_params_add_all(&ret->params, options);
        return req_finish(ret);
}

int pve_req_vm_firewall_rules(struct pve_request *ret, const char *node, uint32_t vmid) {
        return vm_req(ret, "GET", "/nodes/{node}/qemu/{vmid}/firewall/rules", node, vmid, "/firewall/rules");
}

int pve_req_vm_firewall_rule_add(struct pve_request *ret, const char *node, uint32_t vmid,
                                 const struct pve_firewall_rule *rule) {
        int r = vm_req(ret, "POST", "/nodes/{node}/qemu/{vmid}/firewall/rules", node, vmid, "/firewall/rules");
        if (r < 0)
                return r;
        if (!rule || !rule->type || !rule->action)
                return -EINVAL;
        struct pve_params *p = &ret->params;
        pve_params_add(p, "type", rule->type);
        pve_params_add(p, "action", rule->action);
        add_opt(p, "iface", rule->iface);
        pve_params_add_int(p, "enable", rule->enable ? 1 : 0);
        add_opt(p, "comment", rule->comment);
        add_opt(p, "source", rule->source);
        add_opt(p, "dest", rule->dest);
        add_opt(p, "proto", rule->proto);
        add_opt(p, "dport", rule->dport);
        add_opt(p, "macro", rule->macro);
        return req_finish(ret);
}

int pve_req_pci_mappings(struct pve_request *ret) {
        return req_start(ret, "GET", "/cluster/mapping/pci", "/cluster/mapping/pci");
}

int pve_req_pools(struct pve_request *ret) {
        return req_start(ret, "GET", "/pools", "/pools");
}

int pve_req_pool_vm(struct pve_request *ret, const char *poolid, uint32_t vmid, bool remove) {
        int r = req_start(ret, "PUT", "/pools", "/pools");
        if (r < 0)
                return r;
        if (!poolid || !*poolid || !vmid)
                return -EINVAL;
        pve_params_add(&ret->params, "poolid", poolid);
        pve_params_add_int(&ret->params, "vms", vmid);
        pve_params_add_int(&ret->params, remove ? "delete" : "allow-move", 1);
        return req_finish(ret);
}

/* ---- UPIDs ---- */

/* Copy the next ':'-terminated field of *s into out (size n); advance past the ':'. */
static int upid_field(const char **s, char *out, size_t n, bool allow_empty) {
        const char *colon = strchr(*s, ':');
        size_t len = colon ? (size_t)(colon - *s) : 0;
        if (!colon || len >= n || (!allow_empty && len == 0) || memchr(*s, ' ', len) || memchr(*s, '/', len))
                return -EINVAL;
        memcpy(out, *s, len);
        out[len] = '\0';
        *s = colon + 1;
        return 0;
}

static int upid_hex(const char **s, uint64_t max, uint64_t *ret) {
        char field[20], *end;
        int r = upid_field(s, field, sizeof field, false);
        if (r < 0)
                return r;
        if (strspn(field, "0123456789abcdefABCDEF") != strlen(field))
                return -EINVAL;
        unsigned long long v = strtoull(field, &end, 16);
        if (v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

int pve_upid_parse(const char *s, struct pve_upid *ret) {
        struct pve_upid u = { 0 };
        uint64_t pid = 0, pstart = 0, starttime = 0;
        if (!s || strncmp(s, "UPID:", 5) != 0)
                return -EINVAL;
        s += 5;
        int r = upid_field(&s, u.node, sizeof u.node, false);
        if (r == 0)
                r = upid_hex(&s, UINT32_MAX, &pid);
        if (r == 0)
                r = upid_hex(&s, UINT64_MAX, &pstart);
        if (r == 0)
                r = upid_hex(&s, UINT64_MAX, &starttime);
        if (r == 0)
                r = upid_field(&s, u.type, sizeof u.type, false);
        if (r == 0)
                r = upid_field(&s, u.id, sizeof u.id, true);
        if (r == 0)
                r = upid_field(&s, u.user, sizeof u.user, false);
        if (r < 0 || *s != '\0' || !strchr(u.user, '@'))
                return -EINVAL;
        u.pid = (uint32_t)pid;
        u.pstart = pstart;
        u.starttime = starttime;
        *ret = u;
        return 0;
}

bool pve_task_exit_ok(const char *exitstatus) {
        if (!exitstatus)
                return false;
        if (strcmp(exitstatus, "OK") == 0)
                return true;
        const char *n = exitstatus + strlen("WARNINGS: ");
        return strncmp(exitstatus, "WARNINGS: ", strlen("WARNINGS: ")) == 0 && *n &&
               strspn(n, "0123456789") == strlen(n);
}

int pve_errno_from_status(long status, const char *message) {
        if (status == 595 || status == 596) /* pveproxy: the target node cannot be reached */
                return -EHOSTDOWN;
        if (status != 500)
                return http_status_errno(status);
        if (message && strstr(message, "already exists"))
                return -EEXIST;
        if (message && strstr(message, "does not exist"))
                return -ENOENT;
        return -EIO;
}

bool pve_cluster_node_at(const json_t *cluster_status, size_t i, struct pve_cluster_node *ret) {
        const json_t *e = json_array_get(cluster_status, i);
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!type || strcmp(type, "node") != 0 || !name)
                return false;
        *ret = (struct pve_cluster_node){ .name = name, .ip = json_string_value(json_object_get(e, "ip")),
                                          .online = json_integer_value(json_object_get(e, "online")) == 1 };
        return true;
}

const char *pve_cluster_node_ip(const json_t *cluster_status, const char *node) {
        struct pve_cluster_node n;
        for (size_t i = 0; i < json_array_size(cluster_status); i++)
                if (pve_cluster_node_at(cluster_status, i, &n) && strcmp(n.name, node) == 0)
                        return n.ip;
        return NULL;
}

/* tag is one of the ';'/','/' ' separated entries of list (PVE stores tags lowercased). */
static bool has_tag(const char *list, const char *tag) {
        size_t n = strlen(tag);
        for (const char *p = list; p && *p;) {
                size_t len = strcspn(p, ";, ");
                if (len == n && strncasecmp(p, tag, n) == 0)
                        return true;
                p += len + (p[len] != '\0');
        }
        return false;
}

static bool template_matches(const json_t *vm, const char *name, const char *const *tags) {
        json_t *t = json_object_get(vm, "template");
        if (!(json_is_integer(t) && json_integer_value(t) == 1) && !json_is_true(t))
                return false;
        const char *vm_name = json_string_value(json_object_get(vm, "name"));
        if (name && (!vm_name || strcmp(vm_name, name) != 0))
                return false;
        const char *vm_tags = json_string_value(json_object_get(vm, "tags"));
        for (size_t i = 0; tags && tags[i]; i++)
                if (!has_tag(vm_tags, tags[i]))
                        return false;
        return true;
}

int pve_find_template(const json_t *vm_list, const char *name, const char *const *tags, uint32_t *ret_vmid) {
        size_t i;
        json_t *vm;
        json_int_t best = 0;
        json_array_foreach(vm_list, i, vm) {
                json_int_t id = json_integer_value(json_object_get(vm, "vmid"));
                if (id > 0 && (best == 0 || id < best) && template_matches(vm, name, tags))
                        best = id;
        }
        if (best == 0)
                return -ENOENT;
        *ret_vmid = (uint32_t)best;
        return 0;
}

int pve_find_template_ref(const json_t *vm_list, const json_t *ref, uint32_t *ret_vmid) {
        const char *tags[11] = { 0 };
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(ref, "tags"), i, t) {
                if (i < 10)
                        tags[i] = json_string_value(t);
        }
        return pve_find_template(vm_list, json_string_value(json_object_get(ref, "name")), tags[0] ? tags : NULL,
                                 ret_vmid);
}

/* ---- PCI resource mappings ---- */

void pve_pci_full_path(const char *path, size_t len, char *buf, size_t size) {
        const char *colon = memchr(path, ':', len);
        const char *second = colon ? memchr(colon + 1, ':', len - (size_t)(colon + 1 - path)) : NULL;
        snprintf(buf, size, "%s%.*s", second ? "" : "0000:", (int)len, path);
}

bool pve_prop_get(const char *s, const char *key, const char *dflt_key, char *buf, size_t size) {
        size_t klen = strlen(key);
        for (const char *p = s; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
                size_t n = strcspn(p, ",");
                const char *eq = memchr(p, '=', n);
                bool match = eq ? (size_t)(eq - p) == klen && strncmp(p, key, klen) == 0
                                : p == s && dflt_key && strcmp(dflt_key, key) == 0;
                if (!match)
                        continue;
                const char *v = eq ? eq + 1 : p;
                snprintf(buf, size, "%.*s", (int)(n - (size_t)(v - p)), v);
                return true;
        }
        return false;
}

/* One map entry's paths into out when the entry is node's. */
static void entry_paths(const char *entry, const char *node, json_t *out) {
        char at[256], list[1024], full[PVE_PCI_PATH_MAX];
        if (!entry || !pve_prop_get(entry, "node", NULL, at, sizeof at) || strcmp(at, node) != 0 ||
            !pve_prop_get(entry, "path", NULL, list, sizeof list))
                return;
        for (const char *p = list; *p; p += strcspn(p, ";") + (p[strcspn(p, ";")] ? 1 : 0)) {
                pve_pci_full_path(p, strcspn(p, ";"), full, sizeof full);
                json_array_append_new(out, json_string(full));
        }
}

json_t *pve_mapping_paths(const json_t *mappings, const char *id, const char *node) {
        json_t *out = json_array(), *m, *e;
        size_t i, k;
        json_array_foreach(mappings, i, m) {
                const char *mid = json_string_value(json_object_get(m, "id"));
                if (!out || !mid || !id || !node || strcmp(mid, id) != 0)
                        continue;
                json_array_foreach(json_object_get(m, "map"), k, e)
                        entry_paths(json_string_value(e), node, out);
        }
        return out;
}
