/* api: the agent's HTTP routes (auth, JSON errors, dispatch to the agent state). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "api.h"

#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "jsonutil.h"

struct route {
        const char *method;
        const char *path;
        void (*fn)(struct agent *a, const struct http_request *req, struct http_response *resp);
};

void api_error(struct http_response *resp, unsigned status, const char *error, const char *detail) {
        json_t *body = json_pack("{s:s, s:s}", "error", error, "detail", detail ? detail : "");
        http_response_take(resp, status, "application/json", jsonutil_dump(body));
        json_decref(body);
}

/* Serve a cached document, building it on first use after a change. */
static void serve_cached(struct agent *a, char **cache, json_t *(*build)(const struct agent *),
                         struct http_response *resp) {
        if (!*cache) {
                json_t *doc = build(a);
                *cache = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
                json_decref(doc);
        }
        if (!*cache) {
                api_error(resp, 500, "internal error", "out of memory");
                return;
        }
        http_response_set(resp, 200, "application/json", *cache);
}

static void get_topology(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        serve_cached(a, &a->topology_json, agent_topology_json, resp);
}

static void get_capacity(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        serve_cached(a, &a->capacity_json, agent_capacity_json, resp);
}

static void get_vms(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        serve_cached(a, &a->vms_json, agent_vms_json, resp);
}

static void get_healthz(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        json_t *body = json_pack("{s:s, s:b}", "status", "ok", "topology", a->topology != NULL);
        http_response_take(resp, 200, "application/json", jsonutil_dump(body));
        json_decref(body);
}

/* "/v1/vms/123" -> 123; -1 when the tail is not a VMID. */
static int vmid_from_path(const char *path, const char *prefix) {
        const char *p = path + strlen(prefix);
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || *end || v < 100 || v > 999999999)
                return -1;
        return (int)v;
}

static void get_vm(struct agent *a, const struct http_request *req, struct http_response *resp) {
        int vmid = vmid_from_path(req->path, "/v1/vms/");
        const struct vm *vm = vmid < 0 ? NULL : inventory_find(a->inventory, vmid);
        if (!vm) {
                api_error(resp, 404, "no such VM", req->path + strlen("/v1/vms/"));
                return;
        }
        json_t *doc = vm_to_json(vm);
        http_response_take(resp, 200, "application/json", json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER));
        json_decref(doc);
}

static const struct route routes[] = {
        { "GET", "/healthz", get_healthz },
        { "GET", "/v1/topology", get_topology },
        { "GET", "/v1/capacity", get_capacity },
        { "GET", "/v1/vms", get_vms },
        { "GET", "/v1/vms/*", get_vm },
};

static bool path_matches(const char *pattern, const char *path) {
        size_t n = strlen(pattern);
        if (n > 0 && pattern[n - 1] == '*')
                return strncmp(pattern, path, n - 1) == 0 && path[n - 1] && !strchr(path + n - 1, '/');
        return strcmp(pattern, path) == 0;
}

static bool needs_auth(const char *path) {
        return strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0;
}

void api_handle(void *userdata, const struct http_request *req, struct http_response *resp) {
        struct agent *a = userdata;
        if (needs_auth(req->path) && !auth_bearer_ok(http_request_header(req, "Authorization"), a->token)) {
                api_error(resp, 401, "unauthorized", "send Authorization: Bearer <token>");
                resp->extra_header_name = "WWW-Authenticate";
                resp->extra_header_value = "Bearer realm=\"pvescale-agent\"";
                return;
        }
        bool path_known = false;
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
                if (!path_matches(routes[i].path, req->path))
                        continue;
                path_known = true;
                if (strcmp(routes[i].method, req->method) == 0) {
                        routes[i].fn(a, req, resp);
                        return;
                }
        }
        if (path_known)
                api_error(resp, 405, "method not allowed", req->method);
        else
                api_error(resp, 404, "not found", req->path);
}
