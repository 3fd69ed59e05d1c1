/* pve: a Proxmox VE API client (API token auth, {"data": ...} envelope, errors, UPID tasks, launcher calls). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pve.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backoff.h"
#include "cleanup.h"
#include "errmsg.h"
#include "fiber.h"
#include "http_client.h"
#include "monotime.h"

#define PVE_DEFAULT_POLL_MS 1000L
#define PVE_DEFAULT_TASK_TIMEOUT_MS (10L * 60 * 1000)
#define PVE_FIRST_POLL_MS 10L
#define PVE_SLEEP_SLICE_MS 100L
#define PVE_MAX_POLL_FAILURES 3

struct pve_client {
        struct http_client *http;
        char *base;
        const atomic_bool *cancel;
        long last_status;
        char error[1024];
};

int pve_client_new(const struct pve_options *o, struct pve_client **ret_client) {
        if (!o || !o->url || !o->token_id || !o->token_secret)
                return -EINVAL;
        struct pve_client *c = calloc(1, sizeof *c);
        char *auth = NULL;
        if (!c || asprintf(&auth, "Authorization: PVEAPIToken=%s=%s", o->token_id, o->token_secret) < 0) {
                free(c);
                return -ENOMEM;
        }
        const char *headers[] = { auth, "Accept: application/json", NULL };
        struct http_client_options ho = { .ca_file = o->ca_file, .insecure = o->insecure, .timeout_ms = o->timeout_ms,
                                          .connect_timeout_ms = o->connect_timeout_ms, .headers = headers,
                                          .pool = o->pool };
        int r = http_client_new(&ho, &c->http);
        explicit_bzero(auth, strlen(auth));
        free(auth);
        size_t n = strlen(o->url);
        while (n > 0 && o->url[n - 1] == '/')
                n--;
        c->base = strndup(o->url, n);
        if (r < 0 || !c->base) {
                pve_client_free(c);
                return r < 0 ? r : -ENOMEM;
        }
        *ret_client = c;
        return 0;
}

void pve_client_free(struct pve_client *c) {
        if (!c)
                return;
        http_client_free(c->http);
        free(c->base);
        free(c);
}

void pve_client_set_cancel(struct pve_client *c, const atomic_bool *flag) {
        c->cancel = flag;
        http_client_set_cancel(c->http, flag);
}

const char *pve_client_error(const struct pve_client *c) {
        return c->error;
}

/* ---- sending ---- */

static bool is_query_method(const char *method) {
        return strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0;
}

static char *request_url(const struct pve_client *c, const struct pve_request *r, const char *query) {
        char *url;
        bool q = query && *query;
        if (asprintf(&url, "%s%s%s%s", c->base, r->path, q ? "?" : "", q ? query : "") < 0)
                return NULL;
        return url;
}

/* "k: v; k2: v2" from PVE's errors map, newlines flattened. */
static void format_errors(const json_t *errors, char *out, size_t n) {
        const char *key;
        json_t *v;
        size_t len = 0;
        out[0] = '\0';
        json_object_foreach((json_t *)errors, key, v) {
                const char *msg = json_is_string(v) ? json_string_value(v) : "invalid";
                int w = snprintf(out + len, n - len, "%s%s: %s", len ? "; " : "", key, msg);
                if (w < 0 || (size_t)w >= n - len)
                        break;
                len += (size_t)w;
        }
        for (char *p = out; *p; p++)
                if (*p == '\n' || *p == '\r')
                        *p = ' ';
        while (len > 0 && out[len - 1] == ' ')
                out[--len] = '\0';
}

/* Remember why a call failed, as one line, and return the errno for it. */
static int record_failure(struct pve_client *c, const struct pve_request *r, const struct http_client_response *resp) {
        json_t *doc = json_loadb(resp->body, resp->body_len, 0, NULL);
        const char *message = json_string_value(json_object_get(doc, "message"));
        char text[512], errors[512] = "";
        snprintf(text, sizeof text, "%s", message && *message ? message : resp->reason);
        text[strcspn(text, "\n")] = '\0';
        if (json_is_object(json_object_get(doc, "errors")))
                format_errors(json_object_get(doc, "errors"), errors, sizeof errors);
        snprintf(c->error, sizeof c->error, "%s %s: HTTP %ld %s%s%s%s", r->method, r->endpoint, resp->status, text,
                 *errors ? " (" : "", errors, *errors ? ")" : "");
        json_decref(doc);
        return pve_errno_from_status(resp->status, text);
}

static int take_data(struct pve_client *c, const struct pve_request *r, const struct http_client_response *resp,
                     json_t **ret_data) {
        _cleanup_(json_decrefp) json_t *doc = json_loadb(resp->body, resp->body_len, JSON_DECODE_ANY, NULL);
        if (!json_is_object(doc))
                return errmsg_set(c->error, sizeof c->error, -EBADMSG,
                                  "%s %s: HTTP %ld with a body that is not {\"data\": ...}", r->method, r->endpoint,
                                  resp->status);
        json_t *data = json_object_get(doc, "data");
        if (ret_data)
                *ret_data = data ? json_incref(data) : json_null();
        return 0;
}

static int perform(struct pve_client *c, const struct pve_request *r, const char *url, const char *body,
                   struct http_client_response *resp) {
        if (r->upload_data) {
                struct http_client_part parts[16];
                size_t n = 0;
                for (size_t i = 0; i < r->params.n && n < 15; i++)
                        parts[n++] = (struct http_client_part){ .name = r->params.items[i].key,
                                                                .data = r->params.items[i].value,
                                                                .len = strlen(r->params.items[i].value) };
                parts[n++] = (struct http_client_part){ .name = "filename", .filename = r->upload_name,
                                                        .content_type = "application/octet-stream",
                                                        .data = r->upload_data, .len = r->upload_len };
                return http_client_request_multipart(c->http, url, NULL, parts, n, resp);
        }
        static const char *const form[] = { "Content-Type: application/x-www-form-urlencoded", NULL };
        return http_client_request(c->http, r->method, url, body ? form : NULL, body, body ? strlen(body) : 0, resp);
}

int pve_send(struct pve_client *c, const struct pve_request *r, json_t **ret_data) {
        c->error[0] = '\0';
        c->last_status = 0;
        if (r->params.error)
                return r->params.error;
        char *encoded = pve_params_encode(&r->params);
        bool query = is_query_method(r->method);
        char *url = encoded ? request_url(c, r, query ? encoded : NULL) : NULL;
        struct http_client_response resp = { 0 };
        int ret = -ENOMEM;
        if (url)
                ret = perform(c, r, url, query || r->upload_data ? NULL : encoded, &resp);
        if (ret < 0 && ret != -ENOMEM)
                snprintf(c->error, sizeof c->error, "%s %s: %s", r->method, r->endpoint, http_client_error(c->http));
        if (ret == 0) {
                c->last_status = resp.status;
                ret = resp.status >= 200 && resp.status < 300 ? take_data(c, r, &resp, ret_data)
                                                              : record_failure(c, r, &resp);
        }
        http_client_response_done(&resp);
        free(url);
        free(encoded);
        return ret;
}

/* Build with build_result, send, free the request. */
static int run(struct pve_client *c, struct pve_request *r, int build_result, json_t **ret) {
        int err = build_result;
        json_t *data = NULL;
        if (err < 0)
                snprintf(c->error, sizeof c->error, "%s: invalid request (%s)", r->endpoint ? r->endpoint : "PVE",
                         strerror(-err));
        else
                err = pve_send(c, r, &data);
        pve_request_done(r);
        if (err < 0)
                return err;
        if (ret)
                *ret = data;
        else
                json_decref(data);
        return 0;
}

/* Like run, for calls that answer with a task UPID. */
static int run_upid(struct pve_client *c, struct pve_request *r, int build_result, char **ret_upid) {
        const char *endpoint = r->endpoint;
        json_t *data;
        int err = run(c, r, build_result, &data);
        if (err < 0)
                return err;
        if (!json_is_string(data)) {
                snprintf(c->error, sizeof c->error, "%s: expected a task UPID", endpoint);
                json_decref(data);
                return -EBADMSG;
        }
        char *upid = strdup(json_string_value(data));
        json_decref(data);
        if (!upid)
                return -ENOMEM;
        *ret_upid = upid;
        return 0;
}

/* ---- tasks ---- */

int pve_task_status(struct pve_client *c, const char *upid, struct pve_task_status *ret) {
        struct pve_request r;
        json_t *data;
        int err = run(c, &r, pve_req_task_status(&r, upid), &data);
        if (err < 0)
                return err;
        const char *status = json_string_value(json_object_get(data, "status"));
        const char *exit = json_string_value(json_object_get(data, "exitstatus"));
        if (!status) {
                snprintf(c->error, sizeof c->error, "task status of %s has no status", upid);
                json_decref(data);
                return -EBADMSG;
        }
        struct pve_task_status st = { .running = strcmp(status, "running") == 0 };
        snprintf(st.exitstatus, sizeof st.exitstatus, "%s", exit ? exit : "");
        json_decref(data);
        *ret = st;
        return 0;
}

static bool canceled(const struct pve_client *c) {
        return c->cancel && atomic_load(c->cancel);
}

/* Sleep ms in slices, returning -ECANCELED early when the cancel flag is set. */
static int sleep_ms(const struct pve_client *c, long ms) {
        while (ms > 0) {
                if (canceled(c))
                        return -ECANCELED;
                long slice = ms < PVE_SLEEP_SLICE_MS ? ms : PVE_SLEEP_SLICE_MS;
                fiber_sleep_ms(slice);
                ms -= slice;
        }
        return canceled(c) ? -ECANCELED : 0;
}

static bool transient(int err) {
        return err == -ETIMEDOUT || err == -ECONNRESET || err == -ECONNREFUSED || err == -EIO || err == -EHOSTDOWN;
}

static int task_finished(struct pve_client *c, const char *upid, const struct pve_task_status *st) {
        if (pve_task_exit_ok(st->exitstatus))
                return 0;
        struct pve_upid u = { .type = "task" };
        pve_upid_parse(upid, &u);
        return errmsg_set(c->error, sizeof c->error, strstr(st->exitstatus, "already exists") ? -EEXIST : -EIO,
                          "task %s failed: %s", u.type, st->exitstatus);
}

int pve_task_wait(struct pve_client *c, const char *upid, const struct pve_wait *w) {
        long max_poll = w && w->poll_ms > 0 ? w->poll_ms : PVE_DEFAULT_POLL_MS;
        long timeout = w && w->timeout_ms > 0 ? w->timeout_ms : PVE_DEFAULT_TASK_TIMEOUT_MS;
        int64_t deadline = monotime_ms() + timeout;
        long first = w && w->first_ms > 0 ? w->first_ms : PVE_FIRST_POLL_MS;
        unsigned polls = 0; /* the interval doubles per poll, from first up to max_poll */
        long poll = backoff_ceiling_ms(polls, first, max_poll);
        int r = sleep_ms(c, poll); /* a task never ends the moment it is issued: no poll is wasted on that */
        if (r < 0)
                return r;
        for (int failures = 0;;) {
                struct pve_task_status st;
                r = pve_task_status(c, upid, &st);
                if (r == 0 && !st.running)
                        return task_finished(c, upid, &st);
                failures = r < 0 ? failures + 1 : 0;
                if (r < 0 && (!transient(r) || failures >= PVE_MAX_POLL_FAILURES))
                        return r;
                long left = (long)(deadline - monotime_ms());
                if (left <= 0)
                        return errmsg_set(c->error, sizeof c->error, -ETIMEDOUT, "task %s still running after %ld ms",
                                          upid, timeout);
                long nap = poll < left ? poll : left;
                if ((r = sleep_ms(c, nap)) < 0)
                        return r;
                if (failures == 0 && st.running) /* Proxmox said it is still working: waiting for it */
                        http_client_thread_wait_note((int64_t)nap * 1000);
                poll = backoff_ceiling_ms(++polls, first, max_poll);
        }
}

/* ---- calls ---- */

int pve_cluster_status(struct pve_client *c, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_cluster_status(&r), ret);
}

int pve_cluster_resources(struct pve_client *c, const char *type, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_cluster_resources(&r, type), ret);
}

/* A VMID from a JSON string ("105", what PVE sends) or integer. */
static int vmid_from_json(const json_t *v, uint32_t *ret) {
        long long id = -1;
        if (json_is_integer(v))
                id = json_integer_value(v);
        else if (json_is_string(v) && strspn(json_string_value(v), "0123456789") == json_string_length(v) &&
                 json_string_length(v) > 0 && json_string_length(v) < 11)
                id = strtoll(json_string_value(v), NULL, 10);
        if (id < 100 || id > 999999999)
                return -EBADMSG;
        *ret = (uint32_t)id;
        return 0;
}

int pve_nextid(struct pve_client *c, uint32_t *ret_vmid) {
        struct pve_request r;
        json_t *data;
        int err = run(c, &r, pve_req_nextid(&r, 0), &data);
        if (err < 0)
                return err;
        err = vmid_from_json(data, ret_vmid);
        if (err < 0)
                snprintf(c->error, sizeof c->error, "GET /cluster/nextid: not a VMID");
        json_decref(data);
        return err;
}

int pve_nextid_check(struct pve_client *c, uint32_t vmid) {
        struct pve_request r;
        int err = run(c, &r, pve_req_nextid(&r, vmid), NULL);
        /* A taken id is "400 Parameter verification failed" with errors.vmid "VM N already exists". */
        if (err == -EINVAL && c->last_status == 400 && strstr(c->error, "vmid:"))
                return -EEXIST;
        return err;
}

int pve_nodes(struct pve_client *c, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_nodes(&r), ret);
}

int pve_node_status(struct pve_client *c, const char *node, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_node_status(&r, node), ret);
}

int pve_vm_list(struct pve_client *c, const char *node, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_list(&r, node), ret);
}

int pve_vm_clone(struct pve_client *c, const char *node, uint32_t vmid, const struct pve_clone *o, char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_vm_clone(&r, node, vmid, o), ret_upid);
}

int pve_vm_config_get(struct pve_client *c, const char *node, uint32_t vmid, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_config_get(&r, node, vmid), ret);
}

int pve_vm_config_put(struct pve_client *c, const char *node, uint32_t vmid, const struct pve_params *config) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_config_set(&r, node, vmid, false, config), NULL);
}

int pve_vm_resize(struct pve_client *c, const char *node, uint32_t vmid, const char *disk, const char *size,
                  char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_vm_resize(&r, node, vmid, disk, size), ret_upid);
}

int pve_vm_action(struct pve_client *c, const char *node, uint32_t vmid, const char *action, char **ret_upid) {
        struct pve_request r;
        if (action && strcmp(action, "current") == 0)
                return -EINVAL;
        return run_upid(c, &r, pve_req_vm_status(&r, node, vmid, action), ret_upid);
}

int pve_vm_status_current(struct pve_client *c, const char *node, uint32_t vmid, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_status(&r, node, vmid, "current"), ret);
}

int pve_vm_running(struct pve_client *c, const char *node, uint32_t vmid, bool *ret_running) {
        json_t *st = NULL;
        int r = pve_vm_status_current(c, node, vmid, &st);
        const char *s = json_string_value(json_object_get(st, "status"));
        *ret_running = r == 0 && s && strcmp(s, "running") == 0;
        json_decref(st);
        return r;
}

int pve_vm_delete(struct pve_client *c, const char *node, uint32_t vmid, bool purge, bool destroy_unreferenced_disks,
                  char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_vm_delete(&r, node, vmid, purge, destroy_unreferenced_disks), ret_upid);
}

int pve_storage_upload(struct pve_client *c, const char *node, const char *storage, const char *content,
                       const char *filename, const void *data, size_t len, char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_storage_upload(&r, node, storage, content, filename, data, len), ret_upid);
}

int pve_node_storages(struct pve_client *c, const char *node, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_node_storages(&r, node), ret);
}

int pve_storage_download_url(struct pve_client *c, const char *node, const char *storage,
                             const struct pve_download *o, char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_storage_download_url(&r, node, storage, o), ret_upid);
}

int pve_vm_create(struct pve_client *c, const char *node, uint32_t vmid, const struct pve_params *config,
                  char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_vm_create(&r, node, vmid, config), ret_upid);
}

int pve_vm_template(struct pve_client *c, const char *node, uint32_t vmid, char **ret_upid) {
        struct pve_request r;
        return run_upid(c, &r, pve_req_vm_template(&r, node, vmid), ret_upid);
}

int pve_storage_content(struct pve_client *c, const char *node, const char *storage, const char *content,
                        json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_storage_content(&r, node, storage, content), ret);
}

int pve_storage_content_delete(struct pve_client *c, const char *node, const char *storage, const char *volume,
                               unsigned delay_s, char **ret_upid) {
        struct pve_request r;
        json_t *data;
        int err = run(c, &r, pve_req_storage_content_delete(&r, node, storage, volume, delay_s), &data);
        if (err < 0)
                return err;
        char *upid = json_is_string(data) ? strdup(json_string_value(data)) : NULL;
        bool oom = json_is_string(data) && !upid;
        json_decref(data);
        if (oom)
                return -ENOMEM;
        *ret_upid = upid;
        return 0;
}

int pve_vm_firewall_options_set(struct pve_client *c, const char *node, uint32_t vmid,
                                const struct pve_params *options) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_firewall_options_set(&r, node, vmid, options), NULL);
}

int pve_vm_firewall_rules(struct pve_client *c, const char *node, uint32_t vmid, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_firewall_rules(&r, node, vmid), ret);
}

int pve_vm_firewall_rule_add(struct pve_client *c, const char *node, uint32_t vmid,
                             const struct pve_firewall_rule *rule) {
        struct pve_request r;
        return run(c, &r, pve_req_vm_firewall_rule_add(&r, node, vmid, rule), NULL);
}

int pve_pci_mappings(struct pve_client *c, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_pci_mappings(&r), ret);
}

int pve_pools(struct pve_client *c, json_t **ret) {
        struct pve_request r;
        return run(c, &r, pve_req_pools(&r), ret);
}

int pve_pool_vm(struct pve_client *c, const char *poolid, uint32_t vmid, bool remove) {
        struct pve_request r;
        return run(c, &r, pve_req_pool_vm(&r, poolid, vmid, remove), NULL);
}

