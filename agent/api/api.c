/* api: the agent's HTTP routes (auth, JSON errors, dispatch to the agent state). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "api.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_internal.h"
#include "auth.h"
#include "jsonutil.h"
#include "ui.h"

struct route {
        const char *method;
        const char *path;
        api__route_fn fn;
};

/* Serve a cached document, building it on first use after a change. */
static void serve_cached(struct agent *a, char **cache, json_t *(*build)(const struct agent *),
                         struct http_response *resp) {
        if (!*cache) {
                json_t *doc = build(a);
                *cache = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
                json_decref(doc);
        }
        if (!*cache) {
                api__error(resp, 500, "internal error", "out of memory");
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

static void get_containers(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        serve_cached(a, &a->containers_json, agent_containers_json, resp);
}

static void get_healthz(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        json_t *body = json_pack("{s:s, s:b}", "status", "ok", "topology", a->topology != NULL);
        http_response_take(resp, 200, "application/json", jsonutil_dump(body));
        json_decref(body);
}

/* Readiness: the agent can take reservations (its reservation state is loaded). */
static void get_readyz(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        if (!agent_ledger_ready(a)) {
                json_t *body = json_pack("{s:s, s:s}", "status", "unavailable", "reservations", a->ledger_problem);
                http_response_take(resp, 503, "application/json", jsonutil_dump(body));
                json_decref(body);
                return;
        }
        http_response_set(resp, 200, "application/json", "{\"status\": \"ready\"}");
}

static int vm_from_request(struct agent *a, const struct http_request *req, struct http_response *resp) {
        const char *tail = req->path + strlen("/v1/vms/");
        char segment[32];
        snprintf(segment, sizeof segment, "%.*s", (int)strcspn(tail, "/"), tail);
        char *end;
        long vmid = strtol(segment, &end, 10);
        if (end == segment || *end || vmid < 100 || vmid > 999999999) {
                api__error(resp, 400, "invalid request", "vmid: expected an integer from 100 to 999999999");
                return -EINVAL;
        }
        if (!inventory_find(a->inventory, (int)vmid)) {
                bool container = a->inventory && container_list_find(&a->inventory->containers, (int)vmid);
                char detail[96];
                snprintf(detail, sizeof detail, "%s is an LXC container: see /v1/containers", segment);
                api__error(resp, 404, "no such VM", container ? detail : segment);
                return -ENOENT;
        }
        return (int)vmid;
}

static void get_vm(struct agent *a, const struct http_request *req, struct http_response *resp) {
        int vmid = vm_from_request(a, req, resp);
        if (vmid < 0)
                return;
        json_t *doc = vm_to_json(inventory_find(a->inventory, vmid));
        const struct reservation *r = ledger_find_vmid(a->ledger, vmid);
        struct pin_env env = agent_pin_env(a);
        json_t *pinning = pin_service_vm_status(&a->pins, &env, vmid);
        json_object_set_new(doc, "reservation", r ? reservation_to_json(r) : json_null());
        json_object_set_new(doc, "pinning", pinning ? pinning : json_null());
        api__reply(resp, 200, doc);
}

static void post_vm_pin(struct agent *a, const struct http_request *req, struct http_response *resp) {
        int vmid = vm_from_request(a, req, resp);
        json_t *report = NULL;
        if (vmid < 0)
                return;
        struct pin_env env = agent_pin_env(a);
        int r = pin_service_pin_now(&a->pins, &env, vmid, &report);
        if (r == -EPERM)
                api__error(resp, 409, "conflict", "node_policy is simple: the agent does not pin");
        else if (r == -ENOENT)
                api__error(resp, 409, "conflict", "the VM is not bound to a placed reservation");
        else if (r == -ESRCH)
                api__error(resp, 409, "conflict", "the VM is not running");
        else if (r < 0)
                api__error(resp, 500, "pinning failed", strerror(-r));
        else
                api__reply(resp, 200, report);
}

static void get_metrics(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)req;
        struct metrics_view view = agent_metrics_view(a);
        char *text = metrics_render(&a->metrics, &view);
        if (!text) {
                api__error(resp, 500, "internal error", "out of memory");
                return;
        }
        http_response_take(resp, 200, METRICS_CONTENT_TYPE, text);
}

/* The page is a static shell with no data and no secret; it reads the API with the token the user types. */
static void get_ui(struct agent *a, const struct http_request *req, struct http_response *resp) {
        (void)a;
        (void)req;
        http_response_set(resp, 200, UI_CONTENT_TYPE, ui_page());
        resp->headers = ui_headers;
}

static const struct route routes[] = {
        { "GET", "/healthz", get_healthz },
        { "GET", "/readyz", get_readyz },
        { "GET", "/metrics", get_metrics },
        { "GET", "/ui", get_ui },
        { "GET", "/v1/topology", get_topology },
        { "GET", "/v1/capacity", get_capacity },
        { "GET", "/v1/vms", get_vms },
        { "GET", "/v1/vms/*", get_vm },
        { "GET", "/v1/containers", get_containers },
        { "POST", "/v1/vms/*/pin", post_vm_pin },
        { "POST", "/v1/offers", api__post_offers },
        { "GET", "/v1/reservations", api__get_reservations },
        { "POST", "/v1/reservations", api__post_reservation },
        { "GET", "/v1/reservations/*", api__get_reservation },
        { "DELETE", "/v1/reservations/*", api__delete_reservation },
        { "POST", "/v1/reservations/*/bind", api__bind_reservation },
};

/* Segment-wise match: "*" matches exactly one non-empty path segment. */
static bool path_matches(const char *pattern, const char *path) {
        while (*pattern && *path) {
                if (*pattern == '*') {
                        size_t n = strcspn(path, "/");
                        if (n == 0)
                                return false;
                        pattern++;
                        path += n;
                        continue;
                }
                if (*pattern++ != *path++)
                        return false;
        }
        return *pattern == '\0' && *path == '\0';
}

/* The routes that read or change reservations (the ledger), refused while it could not be loaded. */
static bool needs_ledger(const char *path) {
        return strncmp(path, "/v1/reservations", 16) == 0 || strcmp(path, "/v1/offers") == 0;
}

static bool needs_auth(const char *path) {
        return strncmp(path, "/v1/", 4) == 0 || strcmp(path, "/v1") == 0;
}

/* A browser opening /v1/topology gets the page shell (no data), which then asks for the token. */
static bool wants_page(const struct http_request *req) {
        return strcmp(req->method, "GET") == 0 && strcmp(req->path, "/v1/topology") == 0 &&
               ui_wants_html(http_request_header(req, "Accept"));
}

/* Route the request; returns the matched route pattern (for metrics), or "unmatched". */
static const char *dispatch(struct agent *a, const struct http_request *req, struct http_response *resp) {
        if (wants_page(req)) {
                get_ui(a, req, resp);
                return "/ui";
        }
        if (needs_auth(req->path) && !auth_bearer_ok(http_request_header(req, "Authorization"), a->token)) {
                api__error(resp, 401, "unauthorized", "send Authorization: Bearer <token>");
                resp->extra_header_name = "WWW-Authenticate";
                resp->extra_header_value = "Bearer realm=\"pvescale-agent\"";
                return "unauthorized";
        }
        if (needs_ledger(req->path) && !agent_ledger_ready(a)) {
                api__error(resp, 503, "reservations unavailable", a->ledger_problem);
                return "unavailable";
        }
        const char *known = NULL;
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
                if (!path_matches(routes[i].path, req->path))
                        continue;
                known = routes[i].path;
                if (strcmp(routes[i].method, req->method) == 0) {
                        routes[i].fn(a, req, resp);
                        return known;
                }
        }
        if (known)
                api__error(resp, 405, "method not allowed", req->method);
        else
                api__error(resp, 404, "not found", req->path);
        return known ? known : "unmatched";
}

static double seconds_since(const struct timespec *start) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* A refused request, with the client's address, as pveproxy logs them so that fail2ban can act on the journal:
 * "authentication failure; rhost=<address> ..." for a 401, the status and path for any other 4xx. */
static void log_refused(const struct http_request *req, const struct http_response *resp) {
        char rhost[64], field[80];
        http_request_client_address(req, rhost, sizeof rhost);
        snprintf(field, sizeof field, "CLIENT=%s", rhost);
        if (resp->status == 401)
                log_warning_field(field, "authentication failure; rhost=%s method=%s path=%s", rhost, req->method,
                                  req->path);
        else
                log_info_field(field, "refused %s %s from %s: %u", req->method, req->path, rhost, resp->status);
}

void api_handle(void *userdata, const struct http_request *req, struct http_response *resp) {
        struct agent *a = userdata;
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        const char *route = dispatch(a, req, resp);
        metrics_observe_request(&a->metrics, route, req->method, resp->status, seconds_since(&start));
        if (resp->status >= 400 && resp->status < 500)
                log_refused(req, resp);
}
