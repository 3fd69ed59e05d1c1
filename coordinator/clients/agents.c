/* agents: client for the pvescale-agent HTTPS API on each Proxmox host (offers, reservations, bind, VMs). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "agents.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "http_client.h"

#define AGENTS_DEFAULT_TIMEOUT_MS 10000L
#define AGENTS_DEFAULT_CONNECT_TIMEOUT_MS 3000L

struct agents_client {
        struct http_client *http;
        char *base;
        long last_status;
        char error[1024];
};

int agents_url(const char *address, unsigned port, char **ret_url) {
        if (!address || !*address || port == 0 || port > 65535)
                return -EINVAL;
        bool v6 = strchr(address, ':') && address[0] != '[';
        if (asprintf(ret_url, "https://%s%s%s:%u", v6 ? "[" : "", address, v6 ? "]" : "", port) < 0)
                return -ENOMEM;
        return 0;
}

/* ---- bodies ---- */

static json_t *shape_json(const struct agents_shape *s) {
        json_t *o = json_pack("{s:i, s:I}", "vcpus", (int)s->vcpus, "memory_bytes", (json_int_t)s->memory_bytes);
        if (o && s->hugepage_kib)
                json_object_set_new(o, "hugepage_kib", json_integer((json_int_t)s->hugepage_kib));
        return o;
}

json_t *agents_offers_body(const struct agents_shape *shapes, size_t n, unsigned max_count) {
        if (!shapes || n == 0)
                return NULL;
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++)
                if (json_array_append_new(arr, shape_json(&shapes[i])) < 0) {
                        json_decref(arr);
                        return NULL;
                }
        json_t *body = json_pack("{s:o}", "shapes", arr);
        if (body && max_count)
                json_object_set_new(body, "max_count", json_integer(max_count));
        return body;
}

json_t *agents_reserve_body(const struct agents_reserve *r) {
        if (!r || !r->owner || r->vcpus == 0 || r->memory_bytes == 0)
                return NULL;
        struct agents_shape s = { r->vcpus, r->memory_bytes, r->hugepage_kib };
        json_t *o = shape_json(&s);
        if (!o)
                return NULL;
        json_object_set_new(o, "owner", json_string(r->owner));
        if (r->ttl_seconds)
                json_object_set_new(o, "ttl_seconds", json_integer(r->ttl_seconds));
        if (json_array_size(r->pci_devices) > 0 &&
            json_object_set_new(o, "pci_devices", json_deep_copy(r->pci_devices)) < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

/* ---- client ---- */

int agents_client_new(const struct agents_options *o, struct agents_client **ret) {
        if (!o || !o->url || !o->token)
                return -EINVAL;
        struct agents_client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        const char *headers[] = { "Accept: application/json", NULL };
        struct http_client_options ho = {
                .ca_file = o->ca_file, .insecure = o->insecure, .bearer_token = o->token, .headers = headers,
                .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : AGENTS_DEFAULT_TIMEOUT_MS,
                .connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                                                : AGENTS_DEFAULT_CONNECT_TIMEOUT_MS,
                .pool = o->pool,
        };
        int r = http_client_new(&ho, &c->http);
        size_t n = strlen(o->url);
        while (n > 0 && o->url[n - 1] == '/')
                n--;
        c->base = strndup(o->url, n);
        if (r < 0 || !c->base) {
                agents_client_free(c);
                return r < 0 ? r : -ENOMEM;
        }
        *ret = c;
        return 0;
}

void agents_client_free(struct agents_client *c) {
        if (!c)
                return;
        http_client_free(c->http);
        free(c->base);
        free(c);
}

void agents_client_set_cancel(struct agents_client *c, const atomic_bool *flag) {
        http_client_set_cancel(c->http, flag);
}

const char *agents_client_error(const struct agents_client *c) {
        return c->error;
}

long agents_client_last_status(const struct agents_client *c) {
        return c->last_status;
}

int agents_errno_from_status(long status, const char *error, const char *detail) {
        if (status != 409)
                return http_status_errno(status);
        if (error && strcmp(error, "insufficient capacity") == 0)
                return -ENOSPC;
        return detail && strstr(detail, "has no config") ? -ENOENT : -EEXIST;
}

static int record_failure(struct agents_client *c, const char *method, const char *path,
                          const struct http_client_response *resp) {
        json_t *doc = json_loadb(resp->body, resp->body_len, 0, NULL);
        const char *error = json_string_value(json_object_get(doc, "error"));
        const char *detail = json_string_value(json_object_get(doc, "detail"));
        snprintf(c->error, sizeof c->error, "%s %s: %ld %s%s%s", method, path, resp->status,
                 error ? error : resp->reason, detail ? ": " : "", detail ? detail : "");
        int r = agents_errno_from_status(resp->status, error, detail);
        json_decref(doc);
        return r;
}

static int parse_answer(struct agents_client *c, const char *method, const char *path,
                        const struct http_client_response *resp, json_t **ret) {
        json_t *doc = json_loadb(resp->body, resp->body_len, JSON_DECODE_ANY, NULL);
        if (!doc)
                return errmsg_set(c->error, sizeof c->error, -EBADMSG, "%s %s: the answer is not JSON", method, path);
        if (ret)
                *ret = doc;
        else
                json_decref(doc);
        return 0;
}

static int call(struct agents_client *c, const char *method, const char *path, const json_t *body, json_t **ret) {
        static const char *const json_ct[] = { "Content-Type: application/json", NULL };
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL, *url = NULL;
        struct http_client_response resp = { 0 };
        c->error[0] = '\0';
        c->last_status = 0;
        int r = (body && !text) || asprintf(&url, "%s%s", c->base, path) < 0 ? -ENOMEM : 0;
        if (r == 0)
                r = http_client_request(c->http, method, url, body ? json_ct : NULL, text, text ? strlen(text) : 0,
                                        &resp);
        if (r < 0 && r != -ENOMEM)
                snprintf(c->error, sizeof c->error, "%s %s: %s", method, path, http_client_error(c->http));
        if (r == 0) {
                c->last_status = resp.status;
                r = resp.status >= 200 && resp.status < 300 ? parse_answer(c, method, path, &resp, ret)
                                                            : record_failure(c, method, path, &resp);
        }
        http_client_response_done(&resp);
        free(url);
        free(text);
        return r;
}

/* Call with a path "<prefix><escaped id><suffix>". */
static int call_id(struct agents_client *c, const char *method, const char *prefix, const char *id,
                   const char *suffix, const json_t *body, json_t **ret) {
        char *e = id && *id ? http_client_escape(id) : NULL, *path = NULL;
        if (!id || !*id)
                return -EINVAL;
        int r = !e || asprintf(&path, "%s%s%s", prefix, e, suffix) < 0 ? -ENOMEM : call(c, method, path, body, ret);
        free(path);
        free(e);
        return r;
}

int agents_topology(struct agents_client *c, json_t **ret) {
        return call(c, "GET", "/v1/topology", NULL, ret);
}

int agents_capacity(struct agents_client *c, json_t **ret) {
        return call(c, "GET", "/v1/capacity", NULL, ret);
}

int agents_offers(struct agents_client *c, const struct agents_shape *shapes, size_t n, unsigned max_count,
                  json_t **ret) {
        json_t *body = agents_offers_body(shapes, n, max_count);
        if (!body)
                return -EINVAL;
        int r = call(c, "POST", "/v1/offers", body, ret);
        json_decref(body);
        return r;
}

int agents_reserve(struct agents_client *c, const struct agents_reserve *req, json_t **ret) {
        json_t *body = agents_reserve_body(req);
        if (!body)
                return -EINVAL;
        int r = call(c, "POST", "/v1/reservations", body, ret);
        json_decref(body);
        return r;
}

int agents_reservations(struct agents_client *c, json_t **ret) {
        return call(c, "GET", "/v1/reservations", NULL, ret);
}

int agents_reservation_get(struct agents_client *c, const char *id, json_t **ret) {
        return call_id(c, "GET", "/v1/reservations/", id, "", NULL, ret);
}

int agents_bind(struct agents_client *c, const char *id, uint32_t vmid, json_t **ret) {
        json_t *body = json_pack("{s:I}", "vmid", (json_int_t)vmid);
        if (!body)
                return -ENOMEM;
        int r = call_id(c, "POST", "/v1/reservations/", id, "/bind", body, ret);
        json_decref(body);
        return r;
}

int agents_release(struct agents_client *c, const char *id) {
        return call_id(c, "DELETE", "/v1/reservations/", id, "", NULL, NULL);
}

