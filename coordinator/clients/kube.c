/* kube: the Kubernetes API client: resources, paths, requests with retries, CRUD, patches, events. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "kube.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "cleanup.h"
#include "errmsg.h"
#include "fileio.h"
#include "fiber.h"
#include "http_client.h"
#include "jsonutil.h"
#include "kube_internal.h"
#include "monotime.h"
#include "rfc3339.h"
#include "rng.h"

#define KUBE_DEFAULT_RETRIES 5
#define KUBE_DEFAULT_BACKOFF_BASE_MS 200L
#define KUBE_DEFAULT_BACKOFF_MAX_MS 30000L
#define KUBE_DEFAULT_PAGE 500
#define KUBE_LIST_MAX_PAGES 10000 /* 5 million objects at the default page size */
#define KUBE_DEFAULT_MODIFY_ATTEMPTS 5
#define KUBE_TOKEN_REFRESH_MS 60000
#define KUBE_TOKEN_MAX 65536
#define KUBE_SLEEP_SLICE_MS 100L

const struct kube_resource kube_pods = { "", "v1", "pods", "Pod", true };
const struct kube_resource kube_nodes = { "", "v1", "nodes", "Node", false };
const struct kube_resource kube_events = { "", "v1", "events", "Event", true };
const struct kube_resource kube_secrets = { "", "v1", "secrets", "Secret", true };
const struct kube_resource kube_configmaps = { "", "v1", "configmaps", "ConfigMap", true };
const struct kube_resource kube_namespaces = { "", "v1", "namespaces", "Namespace", false };
const struct kube_resource kube_daemonsets = { "apps", "v1", "daemonsets", "DaemonSet", true };
const struct kube_resource kube_pdbs = { "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true };
const struct kube_resource kube_leases = { "coordination.k8s.io", "v1", "leases", "Lease", true };
const struct kube_resource kube_events_v1 = { "events.k8s.io", "v1", "events", "Event", true };
const struct kube_resource kube_crds = { "apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                         "CustomResourceDefinition", false };
const struct kube_resource kube_nodepools = { "pvescale.io", "v1alpha1", "nodepools", "NodePool", false };
const struct kube_resource kube_nodeclasses = { "pvescale.io", "v1alpha1", "proxmoxnodeclasses", "ProxmoxNodeClass",
                                                false };
const struct kube_resource kube_nodeclaims = { "pvescale.io", "v1alpha1", "nodeclaims", "NodeClaim", false };
const struct kube_resource kube_proxmoxtemplates = { "pvescale.io", "v1alpha1", "proxmoxtemplates", "ProxmoxTemplate",
                                                     false };

struct kube_client {
        struct http_client *http;
        char *server;
        char *token, *token_file;
        int64_t token_read_ms;
        int ca_fd, cert_fd, key_fd;
        unsigned max_retries;
        long backoff_base_ms, backoff_max_ms;
        struct rng rng; /* jitter and event names */
        const atomic_bool *cancel;
        char error[1024];
};

/* ---- paths ---- */

static int append(char **s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int append(char **s, const char *fmt, ...) {
        va_list ap;
        char *tail, *out;
        va_start(ap, fmt);
        int n = vasprintf(&tail, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;
        n = asprintf(&out, "%s%s", *s ? *s : "", tail);
        free(tail);
        if (n < 0)
                return -ENOMEM;
        free(*s);
        *s = out;
        return 0;
}

static int append_segment(char **s, const char *seg) {
        char *e = http_client_escape(seg);
        int r = e ? append(s, "/%s", e) : -ENOMEM;
        free(e);
        return r;
}

int kube_path(const struct kube_resource *rt, const char *ns, const char *name, const char *sub, char **ret_path) {
        char *p = NULL;
        if (!rt || (name && !*name) || (sub && *sub && !name))
                return -EINVAL;
        int r = *rt->group ? append(&p, "/apis/%s/%s", rt->group, rt->version) : append(&p, "/api/%s", rt->version);
        if (r == 0 && rt->namespaced && ns && *ns)
                r = append(&p, "/namespaces");
        if (r == 0 && rt->namespaced && ns && *ns)
                r = append_segment(&p, ns);
        if (r == 0)
                r = append(&p, "/%s", rt->plural);
        if (r == 0 && name)
                r = append_segment(&p, name);
        if (r == 0 && sub && *sub)
                r = append(&p, "/%s", sub);
        if (r < 0) {
                free(p);
                return r;
        }
        *ret_path = p;
        return 0;
}

int kube_query_add(char **path, const char *key, const char *value) {
        char *e = http_client_escape(value);
        if (!e)
                return -ENOMEM;
        int r = append(path, "%s%s=%s", strchr(*path, '?') ? "&" : "?", key, e);
        free(e);
        return r;
}

/* ---- client lifecycle ---- */

/* Data as a file only this process can open: a memfd, named by /proc/self/fd/N. */
static int memfd_with(const char *name, const char *data, int *ret_fd, char path[64]) {
        int fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t len = strlen(data);
        for (size_t off = 0; off < len;) {
                ssize_t n = write(fd, data + off, len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        int e = n < 0 ? -errno : -EIO;
                        close(fd);
                        return e;
                }
                off += (size_t)n;
        }
        snprintf(path, 64, "/proc/self/fd/%d", fd);
        *ret_fd = fd;
        return 0;
}

/* The file to give libcurl: the named file, else a memfd holding data, else NULL. */
static int pem_source(const char *file, const char *data, const char *name, int *fd, char path[64],
                      const char **ret) {
        *ret = file;
        if (file || !data)
                return 0;
        int r = memfd_with(name, data, fd, path);
        if (r == 0)
                *ret = path;
        return r;
}

/* One field: a memfd with *data, named in *file. */
static int file_from_data(struct kube_config *cfg, char **file, const char *data, const char *name) {
        char path[64];
        int fd = -1;
        if (*file || !data)
                return 0;
        int r = memfd_with(name, data, &fd, path);
        char *copy = r == 0 ? strdup(path) : NULL;
        if (r == 0 && !copy) {
                close(fd);
                r = -ENOMEM;
        }
        if (r < 0)
                return r;
        *file = copy;
        cfg->data_fds[cfg->n_data_fds++] = fd;
        return 0;
}

int kube_config_files_from_data(struct kube_config *cfg) {
        struct kube_config before = *cfg;
        int r = file_from_data(cfg, &cfg->ca_file, cfg->ca_data, "kube-ca");
        if (r == 0)
                r = file_from_data(cfg, &cfg->cert_file, cfg->cert_data, "kube-cert");
        if (r == 0)
                r = file_from_data(cfg, &cfg->key_file, cfg->key_data, "kube-key");
        if (r == 0)
                return 0;
        for (unsigned i = before.n_data_fds; i < cfg->n_data_fds; i++)
                close(cfg->data_fds[i]);
        char *files[] = { cfg->ca_file, cfg->cert_file, cfg->key_file }, *was[] = { before.ca_file, before.cert_file,
                                                                                    before.key_file };
        for (size_t i = 0; i < 3; i++)
                if (files[i] != was[i])
                        free(files[i]);
        *cfg = before;
        return r;
}

static int read_token(const char *path, char **ret) {
        char *text;
        size_t len;
        int r = fileio_read(path, KUBE_TOKEN_MAX, &text, &len);
        if (r < 0)
                return r;
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
                text[--len] = '\0';
        *ret = text;
        return 0;
}

/* Re-read a rotated service-account token at most once a minute; keep the old one if reading fails. */
static void refresh_token(struct kube_client *c, bool force) {
        if (!c->token_file || (!force && monotime_ms() - c->token_read_ms < KUBE_TOKEN_REFRESH_MS))
                return;
        _cleanup_free_ char *token = NULL;
        c->token_read_ms = monotime_ms();
        if (read_token(c->token_file, &token) < 0)
                return;
        if (c->token && strcmp(token, c->token) == 0)
                return;
        if (http_client_set_bearer(c->http, token) < 0)
                return;
        free(c->token);
        c->token = TAKE_PTR(token);
}

static int client_http(struct kube_client *c, const struct kube_config *cfg, const struct kube_client_options *o) {
        char ca_path[64], cert_path[64], key_path[64], ua[128];
        const char *ca = NULL, *cert = NULL, *key = NULL;
        int r = pem_source(cfg->ca_file, cfg->ca_data, "kube-ca", &c->ca_fd, ca_path, &ca);
        if (r == 0)
                r = pem_source(cfg->cert_file, cfg->cert_data, "kube-cert", &c->cert_fd, cert_path, &cert);
        if (r == 0)
                r = pem_source(cfg->key_file, cfg->key_data, "kube-key", &c->key_fd, key_path, &key);
        if (r < 0)
                return r;
        snprintf(ua, sizeof ua, "User-Agent: %s", o->user_agent ? o->user_agent : "pvescale-coordinator");
        const char *headers[] = { ua, NULL };
        struct http_client_options ho = { .ca_file = ca, .cert_file = cert, .key_file = key, .insecure = cfg->insecure,
                                          .timeout_ms = o->timeout_ms, .bearer_token = cfg->token,
                                          .headers = headers, .pool = o->pool };
        return http_client_new(&ho, &c->http);
}

int kube_client_new(const struct kube_config *cfg, const struct kube_client_options *opts, struct kube_client **ret) {
        static const struct kube_client_options defaults = { 0 };
        const struct kube_client_options *o = opts ? opts : &defaults;
        if (!cfg || !cfg->server)
                return -EINVAL;
        struct kube_client *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->ca_fd = c->cert_fd = c->key_fd = -1;
        if (o->max_retries == KUBE_NO_RETRY)
                c->max_retries = 0;
        else
                c->max_retries = o->max_retries ? o->max_retries : KUBE_DEFAULT_RETRIES;
        c->backoff_base_ms = o->backoff_base_ms > 0 ? o->backoff_base_ms : KUBE_DEFAULT_BACKOFF_BASE_MS;
        c->backoff_max_ms = o->backoff_max_ms > 0 ? o->backoff_max_ms : KUBE_DEFAULT_BACKOFF_MAX_MS;
        rng_init(&c->rng, 0);
        int r = client_http(c, cfg, o);
        c->server = strndup(cfg->server, strlen(cfg->server) - (cfg->server[strlen(cfg->server) - 1] == '/'));
        c->token_file = cfg->token_file ? strdup(cfg->token_file) : NULL;
        if (r == 0 && (!c->server || (cfg->token_file && !c->token_file)))
                r = -ENOMEM;
        if (r < 0) {
                kube_client_free(c);
                return r;
        }
        refresh_token(c, true);
        *ret = c;
        return 0;
}

void kube_client_free(struct kube_client *c) {
        if (!c)
                return;
        http_client_free(c->http);
        int fds[] = { c->ca_fd, c->cert_fd, c->key_fd };
        for (size_t i = 0; i < 3; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        free(c->server);
        free(c->token);
        free(c->token_file);
        free(c);
}

void kube_client_set_cancel(struct kube_client *c, const atomic_bool *flag) {
        c->cancel = flag;
        http_client_set_cancel(c->http, flag);
}

const char *kube_client_error(const struct kube_client *c) {
        return c->error;
}

void kube__client_set_error(struct kube_client *c, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        errmsg_vset(c->error, sizeof c->error, 0, fmt, ap);
        va_end(ap);
}

bool kube_client_canceled(const struct kube_client *c) {
        return c->cancel && atomic_load(c->cancel);
}

int kube__client_sleep(struct kube_client *c, long ms) {
        while (ms > 0) {
                if (kube_client_canceled(c))
                        return -ECANCELED;
                long slice = ms < KUBE_SLEEP_SLICE_MS ? ms : KUBE_SLEEP_SLICE_MS;
                fiber_sleep_ms(slice);
                ms -= slice;
        }
        return kube_client_canceled(c) ? -ECANCELED : 0;
}

uint64_t kube__client_seed(struct kube_client *c) {
        return rng_next(&c->rng);
}

/* ---- errors ---- */

int kube_errno_from_status(long status, const char *reason) {
        if (status == 409) /* a stale resourceVersion is a conflict, not an existing object */
                return reason && strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : -ESTALE;
        return http_status_errno(status);
}

/* "GET /api/v1/pods?watch=1" → "GET /api/v1/pods" for messages. */
static void short_path(const char *path, char *out, size_t n) {
        snprintf(out, n, "%.*s", (int)strcspn(path, "?"), path);
}

int kube__client_fail_status(struct kube_client *c, const char *what, const json_t *status) {
        const char *reason = json_string_value(json_object_get(status, "reason"));
        const char *message = json_string_value(json_object_get(status, "message"));
        long code = (long)json_integer_value(json_object_get(status, "code"));
        snprintf(c->error, sizeof c->error, "%s: %ld %s: %s", what, code, reason ? reason : "",
                 message ? message : "(no message)");
        return kube_errno_from_status(code, reason);
}

int kube__client_fail_response(struct kube_client *c, const char *method, const char *path,
                               const struct http_client_response *resp) {
        char what[512];
        char p[400];
        short_path(path, p, sizeof p);
        snprintf(what, sizeof what, "%s %s", method, p);
        json_t *st = json_loadb(resp->body, resp->body_len, 0, NULL);
        int r;
        if (json_is_object(st) && json_object_get(st, "code")) {
                r = kube__client_fail_status(c, what, st);
        } else {
                snprintf(c->error, sizeof c->error, "%s: %ld %s", what, resp->status, resp->reason);
                r = kube_errno_from_status(resp->status, NULL);
        }
        json_decref(st);
        return r;
}

static int fail_transport(struct kube_client *c, const char *method, const char *path, int r) {
        char p[400];
        short_path(path, p, sizeof p);
        return errmsg_set(c->error, sizeof c->error, r, "%s %s: %s", method, p, http_client_error(c->http));
}

/* ---- requests ---- */

/* GET is safe to repeat on 429, 5xx and transport failures. Other methods only when nothing was applied: a
 * refused connection, or a 429/5xx whose Retry-After asks for a retry (as client-go does). An eviction refused
 * by a PodDisruptionBudget (429 without Retry-After) is returned at once. */
static bool retryable(const char *method, int r, const struct http_client_response *resp) {
        if (r == -ECANCELED || r == -ENOMEM || r == -EFBIG || r == -EINVAL || r == -EKEYREJECTED)
                return false;
        bool get = strcmp(method, "GET") == 0;
        if (r < 0)
                return get || r == -ECONNREFUSED;
        bool busy = resp->status == 429 || resp->status >= 500;
        return busy && (get || resp->retry_after_ms >= 0);
}

static char *url_of(const struct kube_client *c, const char *path) {
        char *url;
        return asprintf(&url, "%s%s", c->server, path) < 0 ? NULL : url;
}

static const char ACCEPT_JSON[] = "Accept: application/json";
/* The object's metadata alone; a server that cannot answer so sends the whole object. */
static const char ACCEPT_METADATA[] = "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, "
                                      "application/json";

/* Send with retries; on success *resp holds the final response (any status). */
static int send_retrying(struct kube_client *c, const char *method, const char *path, const char *ctype,
                         const char *body, const char *accept, struct http_client_response *resp) {
        char ct[128];
        snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "application/json");
        const char *headers[] = { accept, body ? ct : NULL, NULL };
        char *url = url_of(c, path);
        if (!url)
                return -ENOMEM;
        int r;
        for (unsigned attempt = 0;; attempt++) {
                refresh_token(c, false);
                r = http_client_request(c->http, method, url, headers, body, body ? strlen(body) : 0, resp);
                if (attempt >= c->max_retries || !retryable(method, r, resp))
                        break;
                long delay = backoff_delay_ms(attempt, c->backoff_base_ms, c->backoff_max_ms,
                                              (uint32_t)kube__client_seed(c));
                delay = backoff_honour_retry_after(delay, r == 0 ? resp->retry_after_ms : -1);
                if (r == 0)
                        http_client_response_done(resp);
                if ((r = kube__client_sleep(c, delay)) < 0)
                        break;
        }
        free(url);
        return r;
}

static int request(struct kube_client *c, const char *method, const char *path, const char *content_type,
                   const json_t *body, const char *accept, json_t **ret_obj) {
        c->error[0] = '\0';
        char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (body && !text)
                return -ENOMEM;
        struct http_client_response resp = { 0 };
        int r = send_retrying(c, method, path, content_type, text, accept, &resp);
        free(text);
        if (r < 0)
                return r == -ENOMEM ? r : fail_transport(c, method, path, r);
        if (resp.status < 200 || resp.status >= 300) {
                r = kube__client_fail_response(c, method, path, &resp);
                http_client_response_done(&resp);
                return r;
        }
        if (!ret_obj) { /* the caller wants only the success: do not parse what nobody reads */
                http_client_response_done(&resp);
                return 0;
        }
        json_t *obj = resp.body_len ? json_loadb(resp.body, resp.body_len, 0, NULL) : json_object();
        http_client_response_done(&resp);
        if (!obj)
                return errmsg_set(c->error, sizeof c->error, -EBADMSG, "%s %s: the answer is not JSON", method, path);
        *ret_obj = obj;
        return 0;
}

int kube_request(struct kube_client *c, const char *method, const char *path, const char *content_type,
                 const json_t *body, json_t **ret_obj) {
        return request(c, method, path, content_type, body, ACCEPT_JSON, ret_obj);
}

int kube__client_stream(struct kube_client *c, const char *path, long idle_timeout_ms, http_client_line_fn fn,
                        void *userdata, struct http_client_response *ret_resp) {
        static const char *const headers[] = { ACCEPT_JSON, NULL };
        char *url = url_of(c, path);
        if (!url)
                return -ENOMEM;
        refresh_token(c, false);
        c->error[0] = '\0';
        int r = http_client_stream(c->http, url, headers, idle_timeout_ms, fn, userdata, ret_resp);
        free(url);
        /* A callback may have explained its own error already. */
        if (r < 0 && r != -ENOMEM && r != -ECANCELED && !c->error[0])
                fail_transport(c, "GET", path, r);
        return r;
}

/* ---- CRUD ---- */

static const char *obj_string(const json_t *obj, const char *key) {
        return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

/* Build the path, run the request, free the path. */
static int call_accepting(struct kube_client *c, const char *method, const struct kube_resource *rt, const char *ns,
                          const char *name, const char *sub, const char *ctype, const json_t *body,
                          const char *accept, json_t **ret) {
        char *path;
        int r = kube_path(rt, ns, name, sub, &path);
        if (r < 0)
                return r;
        r = request(c, method, path, ctype, body, accept, ret);
        free(path);
        return r;
}

static int call(struct kube_client *c, const char *method, const struct kube_resource *rt, const char *ns,
                const char *name, const char *sub, const char *ctype, const json_t *body, json_t **ret) {
        return call_accepting(c, method, rt, ns, name, sub, ctype, body, ACCEPT_JSON, ret);
}

int kube_get(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name, json_t **ret) {
        if (!name)
                return -EINVAL;
        return call(c, "GET", rt, ns, name, NULL, NULL, NULL, ret);
}

static int list_page_path(const struct kube_resource *rt, const char *ns, const struct kube_list_options *o,
                          const char *cont, char **ret) {
        char limit[16];
        snprintf(limit, sizeof limit, "%u", o && o->limit ? o->limit : KUBE_DEFAULT_PAGE);
        int r = kube_path(rt, ns, NULL, NULL, ret);
        if (r == 0 && o && o->label_selector && *o->label_selector)
                r = kube_query_add(ret, "labelSelector", o->label_selector);
        if (r == 0 && o && o->field_selector && *o->field_selector)
                r = kube_query_add(ret, "fieldSelector", o->field_selector);
        if (r == 0)
                r = kube_query_add(ret, "limit", limit);
        if (r == 0 && cont)
                r = kube_query_add(ret, "continue", cont);
        return r;
}

/* Move the items of page into list (the first page becomes the list itself). */
static int merge_page(json_t **list, json_t *page) {
        if (!*list) {
                *list = page;
                return 0;
        }
        int r = json_array_extend(json_object_get(*list, "items"), json_object_get(page, "items"));
        json_decref(page);
        return r < 0 ? -ENOMEM : 0;
}

/* The continue token of page, copied into *cont; a server that hands back the token it was given, or keeps
 * paging past KUBE_LIST_MAX_PAGES, would make the list run forever: -EPROTO. */
static int next_page(struct kube_client *c, const json_t *page, const char *prev, unsigned n, char **cont) {
        const char *next = obj_string(page, "continue");
        if (!next || !*next)
                return 0;
        bool repeated = prev && strcmp(prev, next) == 0;
        if (repeated || n >= KUBE_LIST_MAX_PAGES) {
                kube__client_set_error(c, "list: the API server keeps paging (%s after %u pages)",
                                       repeated ? "the same continue token" : "a continue token", n);
                return -EPROTO;
        }
        return (*cont = strdup(next)) ? 0 : -ENOMEM;
}

int kube_list(struct kube_client *c, const struct kube_resource *rt, const char *ns,
              const struct kube_list_options *o, json_t **ret_list) {
        json_t *list = NULL;
        char *cont = NULL;
        unsigned pages = 0;
        int r;
        do {
                char *path;
                json_t *page;
                r = list_page_path(rt, ns, o, cont, &path);
                if (r == 0)
                        r = kube_request(c, "GET", path, NULL, NULL, &page);
                free(path);
                _cleanup_free_ char *prev = cont;
                cont = NULL;
                if (r == 0 && !json_is_array(json_object_get(page, "items")))
                        json_object_set_new(page, "items", json_array());
                if (r == 0 && (r = next_page(c, page, prev, ++pages, &cont)) < 0)
                        json_decref(page);
                if (r == 0)
                        r = merge_page(&list, page);
        } while (r == 0 && cont);
        if (r < 0) {
                json_decref(list);
                return r;
        }
        json_object_del(json_object_get(list, "metadata"), "continue");
        json_object_del(json_object_get(list, "metadata"), "remainingItemCount");
        *ret_list = list;
        return 0;
}

int kube_create(struct kube_client *c, const struct kube_resource *rt, const char *ns, const json_t *obj,
                json_t **ret) {
        return call(c, "POST", rt, ns ? ns : obj_string(obj, "namespace"), NULL, NULL, NULL, obj, ret);
}

int kube_update(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                const json_t *obj, json_t **ret) {
        const char *name = obj_string(obj, "name");
        if (!name)
                return -EINVAL;
        return call(c, "PUT", rt, ns ? ns : obj_string(obj, "namespace"), name, sub, NULL, obj, ret);
}

static const char *patch_content_type(enum kube_patch_type t) {
        switch (t) {
        case KUBE_PATCH_STRATEGIC:
                return "application/strategic-merge-patch+json";
        case KUBE_PATCH_JSON:
                return "application/json-patch+json";
        default:
                return "application/merge-patch+json";
        }
}

int kube_patch(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
               const char *sub, enum kube_patch_type type, const json_t *patch, json_t **ret) {
        if (!name || !patch)
                return -EINVAL;
        return call(c, "PATCH", rt, ns, name, sub, patch_content_type(type), patch, ret);
}

static const char *propagation_name(enum kube_propagation p) {
        static const char *const names[] = { NULL, "Background", "Foreground", "Orphan" };
        return (unsigned)p < 4 ? names[p] : NULL;
}

/* DeleteOptions for o, or NULL when nothing is set (no body then). */
static json_t *delete_options(const struct kube_delete_options *o, const char *api_version, const char *kind) {
        if (!o)
                return NULL;
        json_t *d = json_pack("{s:s, s:s}", "apiVersion", api_version, "kind", kind);
        json_t *pre = json_object();
        if (propagation_name(o->propagation))
                json_object_set_new(d, "propagationPolicy", json_string(propagation_name(o->propagation)));
        if (o->grace_period_seconds >= 0)
                json_object_set_new(d, "gracePeriodSeconds", json_integer(o->grace_period_seconds));
        if (o->precondition_uid)
                json_object_set_new(pre, "uid", json_string(o->precondition_uid));
        if (o->precondition_resource_version)
                json_object_set_new(pre, "resourceVersion", json_string(o->precondition_resource_version));
        json_object_set_new(d, "preconditions", pre);
        if (json_object_size(pre) == 0)
                json_object_del(d, "preconditions");
        return d;
}

int kube_delete(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                const struct kube_delete_options *o, json_t **ret) {
        if (!name)
                return -EINVAL;
        json_t *body = delete_options(o, "v1", "DeleteOptions");
        if (body && json_object_size(body) == 2) {
                json_decref(body);
                body = NULL;
        }
        int r = call(c, "DELETE", rt, ns, name, NULL, NULL, body, ret);
        json_decref(body);
        return r;
}

/* The merge patch goes with the given Accept header; the PUT (for nulls) always asks for the whole object. */
static int update_from(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                       const json_t *before, const json_t *obj, const char *accept, json_t **ret) {
        const char *rv = obj_string(before, "resourceVersion"), *name = obj_string(obj, "name");
        json_t *patch = NULL, *md;
        int r = rv && name ? jsonutil_merge_diff(before, obj, &patch) : -EINVAL;
        if (r == -EINVAL)
                return kube_update(c, rt, ns, sub, obj, ret);
        if (r < 0)
                return r;
        md = json_object_get(patch, "metadata");
        if (!md && json_object_set_new(patch, "metadata", md = json_object()) < 0)
                md = NULL;
        r = md && json_object_set_new(md, "resourceVersion", json_string(rv)) == 0 ? 0 : -ENOMEM;
        if (r == 0)
                r = call_accepting(c, "PATCH", rt, ns ? ns : obj_string(obj, "namespace"), name, sub,
                                   patch_content_type(KUBE_PATCH_MERGE), patch, accept, ret);
        json_decref(patch);
        return r;
}

int kube_update_from(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                     const json_t *before, const json_t *obj, json_t **ret) {
        return update_from(c, rt, ns, sub, before, obj, ACCEPT_JSON, ret);
}

/* obj with the answer's metadata when the answer is PartialObjectMetadata, else the answer itself. Takes answer. */
static int with_metadata_of(struct kube_client *c, const json_t *obj, json_t *answer, json_t **ret) {
        const char *kind = json_string_value(json_object_get(answer, "kind"));
        if (!kind || strcmp(kind, "PartialObjectMetadata") != 0) {
                *ret = answer;
                return 0;
        }
        _cleanup_(json_decrefp) json_t *owned = answer, *out = NULL; /* answer is released on every path */
        json_t *md = json_object_get(answer, "metadata");
        if (!json_is_object(md))
                return errmsg_set(c->error, sizeof c->error, -EBADMSG, "PartialObjectMetadata without metadata");
        out = json_copy((json_t *)obj);
        if (!out || json_object_set(out, "metadata", md) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(out);
        return 0;
}

int kube_update_from_as_sent(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                             const json_t *before, const json_t *obj, json_t **ret) {
        json_t *answer = NULL;
        int r = update_from(c, rt, ns, sub, before, obj, ret ? ACCEPT_METADATA : ACCEPT_JSON, ret ? &answer : NULL);
        if (r < 0 || !ret)
                return r;
        return with_metadata_of(c, obj, answer, ret);
}

/* One get-modify-write round; from a copy of current when there is one. */
static int modify_once(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                       const char *sub, const json_t *current, kube_modify_fn fn, void *userdata, json_t **ret) {
        json_t *got = NULL, *obj = NULL;
        int r = current ? 0 : kube_get(c, rt, ns, name, &got);
        if (r < 0)
                return r;
        obj = json_deep_copy(current ? current : got);
        r = obj ? fn(obj, userdata) : -ENOMEM;
        if (r == 0)
                r = kube_update_from(c, rt, ns, sub, current ? current : got, obj, ret);
        json_decref(got);
        if (r == KUBE_MODIFY_SKIP && ret) { /* nothing to write: the object as it stands */
                *ret = obj;
                return r;
        }
        json_decref(obj);
        return r;
}

int kube_modify_from(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                     const char *sub, const json_t *current, kube_modify_fn fn, void *userdata, unsigned max_attempts,
                     json_t **ret) {
        unsigned attempts = max_attempts ? max_attempts : KUBE_DEFAULT_MODIFY_ATTEMPTS;
        int r = -ESTALE;
        for (unsigned i = 0; i < attempts && r == -ESTALE; i++)
                r = modify_once(c, rt, ns, name, sub, i == 0 ? current : NULL, fn, userdata, ret);
        return r;
}

int kube_modify(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                const char *sub, kube_modify_fn fn, void *userdata, unsigned max_attempts, json_t **ret) {
        return kube_modify_from(c, rt, ns, name, sub, NULL, fn, userdata, max_attempts, ret);
}

int kube_evict(struct kube_client *c, const char *ns, const char *pod, const struct kube_delete_options *o) {
        json_t *ev = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "policy/v1", "kind", "Eviction", "metadata",
                               "name", pod, "namespace", ns);
        json_t *opts = delete_options(o, "meta.k8s.io/v1", "DeleteOptions");
        if (!ev)
                return -ENOMEM;
        if (opts)
                json_object_set_new(ev, "deleteOptions", opts);
        int r = call(c, "POST", &kube_pods, ns, pod, "eviction", NULL, ev, NULL);
        json_decref(ev);
        return r;
}

int kube_list_node_pods(struct kube_client *c, const char *node, json_t **ret_list) {
        char *selector;
        if (asprintf(&selector, "spec.nodeName=%s", node) < 0)
                return -ENOMEM;
        struct kube_list_options o = { .field_selector = selector };
        int r = kube_list(c, &kube_pods, NULL, &o, ret_list);
        free(selector);
        return r;
}

/* ---- events ---- */

static json_t *involved_object(const struct kube_resource *rt, const json_t *obj) {
        char api_version[128];
        if (*rt->group)
                snprintf(api_version, sizeof api_version, "%s/%s", rt->group, rt->version);
        else
                snprintf(api_version, sizeof api_version, "%s", rt->version);
        json_t *o = json_pack("{s:s, s:s, s:s}", "apiVersion", api_version, "kind", rt->kind, "name",
                              obj_string(obj, "name") ? obj_string(obj, "name") : "");
        const char *keys[][2] = { { "namespace", "namespace" }, { "uid", "uid" },
                                  { "resourceVersion", "resourceVersion" } };
        for (size_t i = 0; o && i < 3; i++)
                if (obj_string(obj, keys[i][0]))
                        json_object_set_new(o, keys[i][1], json_string(obj_string(obj, keys[i][0])));
        return o;
}

int kube_event_emit(struct kube_client *c, const struct kube_resource *rt, const json_t *obj, const char *type,
                    const char *reason, const char *message, const char *component) {
        const char *name = obj_string(obj, "name");
        const char *ns = rt->namespaced && obj_string(obj, "namespace") ? obj_string(obj, "namespace") : "default";
        if (!name || !type || !reason || !message)
                return -EINVAL;
        char ev_name[300], now[32];
        uint64_t rnd = kube__client_seed(c);
        snprintf(ev_name, sizeof ev_name, "%.200s.%016llx", name, (unsigned long long)rnd);
        rfc3339_format(rfc3339_now_ms(), now, sizeof now);
        const char *comp = component ? component : "pvescale-coordinator";
        json_t *ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:i, s:s, s:s}",
                               "apiVersion", "v1", "kind", "Event", "metadata", "name", ev_name, "namespace", ns,
                               "involvedObject", involved_object(rt, obj), "reason", reason, "message", message,
                               "type", type, "source", "component", comp, "firstTimestamp", now, "lastTimestamp", now,
                               "count", 1, "reportingComponent", comp, "reportingInstance", comp);
        if (!ev)
                return -ENOMEM;
        int r = call(c, "POST", &kube_events, ns, NULL, NULL, NULL, ev, NULL);
        json_decref(ev);
        return r;
}

const json_t *kube_condition(const json_t *status, const char *type) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(status, "conditions"), i, c) {
                const char *t = json_string_value(json_object_get(c, "type"));
                if (t && strcmp(t, type) == 0)
                        return c;
        }
        return NULL;
}

bool kube_condition_true(const json_t *status, const char *type) {
        const char *s = json_string_value(json_object_get(kube_condition(status, type), "status"));
        return s && strcmp(s, "True") == 0;
}

bool kube_taint_ephemeral(const json_t *taint) {
        static const char *const known[][2] = {
                { "node.kubernetes.io/not-ready", "NoSchedule" },
                { "node.kubernetes.io/not-ready", "NoExecute" },
                { "node.kubernetes.io/unreachable", "NoSchedule" },
                { "node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule" },
        };
        const char *key = json_string_value(json_object_get(taint, "key"));
        const char *effect = json_string_value(json_object_get(taint, "effect"));
        if (!key)
                return false;
        if (strncmp(key, "readiness.k8s.io/", strlen("readiness.k8s.io/")) == 0)
                return true;
        for (size_t i = 0; effect && i < sizeof known / sizeof known[0]; i++)
                if (strcmp(key, known[i][0]) == 0 && strcmp(effect, known[i][1]) == 0)
                        return true;
        return false;
}

bool kube_taints_have_key(const json_t *taints, const char *key) {
        size_t i;
        json_t *t;
        json_array_foreach(taints, i, t) {
                const char *k = json_string_value(json_object_get(t, "key"));
                if (k && strcmp(k, key) == 0)
                        return true;
        }
        return false;
}
