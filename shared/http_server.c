/* http_server: an HTTPS (or, on request, plain HTTP) server on libmicrohttpd, driven by the caller's loop. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define CONNECTION_TIMEOUT_S 60

struct http_server {
        struct MHD_Daemon *daemon;
        struct http_server_options opts;
        char *cert_pem, *key_pem;
        uint16_t port;
};

/* Per-request state while the body arrives. */
struct request_ctx {
        char *body;
        size_t len;
        bool too_large;
};

const char *http_request_header(const struct http_request *req, const char *name) {
        return MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, name);
}

const char *http_request_client_address(const struct http_request *req, char *buf, size_t len) {
        const union MHD_ConnectionInfo *info =
                req->connection ? MHD_get_connection_info(req->connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS) : NULL;
        const struct sockaddr *sa = info ? info->client_addr : NULL;
        socklen_t salen = sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        if (!sa || getnameinfo(sa, salen, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST) != 0)
                snprintf(buf, len, "unknown");
        return buf;
}

const char *http_request_query(const struct http_request *req, const char *key) {
        return MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, key);
}

void http_response_take(struct http_response *resp, unsigned status, const char *content_type, char *body) {
        free(resp->body);
        resp->status = status;
        resp->content_type = content_type;
        resp->body = body;
        resp->body_len = body ? strlen(body) : 0;
}

void http_response_set(struct http_response *resp, unsigned status, const char *content_type, const char *body) {
        http_response_take(resp, status, content_type, body ? strdup(body) : NULL);
}

static int append_body(struct request_ctx *ctx, const char *data, size_t size, size_t max) {
        if (ctx->too_large || ctx->len + size > max) {
                ctx->too_large = true;
                return 0;
        }
        char *grown = realloc(ctx->body, ctx->len + size + 1);
        if (!grown)
                return -ENOMEM;
        memcpy(grown + ctx->len, data, size);
        ctx->len += size;
        grown[ctx->len] = '\0';
        ctx->body = grown;
        return 0;
}

static enum MHD_Result queue(struct MHD_Connection *conn, struct http_response *resp) {
        struct MHD_Response *r = MHD_create_response_from_buffer(resp->body_len, resp->body ? resp->body : (char *)"",
                                                                 resp->body ? MHD_RESPMEM_MUST_FREE
                                                                            : MHD_RESPMEM_PERSISTENT);
        if (!r) {
                free(resp->body);
                return MHD_NO;
        }
        resp->body = NULL;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                resp->content_type ? resp->content_type : "application/json");
        MHD_add_response_header(r, "Cache-Control", "no-store");
        if (resp->extra_header_name)
                MHD_add_response_header(r, resp->extra_header_name, resp->extra_header_value);
        enum MHD_Result ret = MHD_queue_response(conn, resp->status, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result dispatch(struct http_server *s, struct MHD_Connection *conn, const char *method,
                                const char *url, struct request_ctx *ctx) {
        struct http_response resp = { .status = 500 };
        if (ctx->too_large) {
                http_response_set(&resp, 413, NULL, "{\"error\":\"request body too large\",\"detail\":\"\"}");
                return queue(conn, &resp);
        }
        struct http_request req = {
                .method = method,
                .path = url,
                .body = ctx->body ? ctx->body : "",
                .body_len = ctx->len,
                .connection = conn,
        };
        s->opts.handler(s->opts.userdata, &req, &resp);
        return queue(conn, &resp);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
        (void)version;
        struct http_server *s = cls;
        struct request_ctx *ctx = *con_cls;
        if (!ctx) {
                ctx = calloc(1, sizeof *ctx);
                if (!ctx)
                        return MHD_NO;
                *con_cls = ctx;
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                if (append_body(ctx, upload_data, *upload_data_size, s->opts.max_body_bytes) < 0)
                        return MHD_NO;
                *upload_data_size = 0;
                return MHD_YES;
        }
        return dispatch(s, conn, method, url, ctx);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void)cls;
        (void)conn;
        (void)toe;
        struct request_ctx *ctx = *con_cls;
        if (!ctx)
                return;
        free(ctx->body);
        free(ctx);
        *con_cls = NULL;
}

static int load_tls(struct http_server *s, char *err, size_t errlen) {
        size_t len;
        int r = fileio_read(s->opts.cert_file, 1 << 20, &s->cert_pem, &len);
        if (r < 0) {
                snprintf(err, errlen, "cannot read TLS certificate %s: %s", s->opts.cert_file, strerror(-r));
                return r;
        }
        r = fileio_read(s->opts.key_file, 1 << 20, &s->key_pem, &len);
        if (r < 0)
                snprintf(err, errlen, "cannot read TLS key %s: %s", s->opts.key_file, strerror(-r));
        return r;
}

/* Fill addr from bind_address; returns its length, 0 for "all addresses", or -EINVAL. */
static int bind_sockaddr(const struct http_server_options *o, struct sockaddr_storage *addr) {
        memset(addr, 0, sizeof *addr);
        if (!o->bind_address || !*o->bind_address)
                return 0;
        struct sockaddr_in *in4 = (struct sockaddr_in *)addr;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)addr;
        if (inet_pton(AF_INET, o->bind_address, &in4->sin_addr) == 1) {
                in4->sin_family = AF_INET;
                in4->sin_port = htons(o->port);
                return sizeof *in4;
        }
        if (inet_pton(AF_INET6, o->bind_address, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons(o->port);
                return sizeof *in6;
        }
        return -EINVAL;
}

static struct MHD_Daemon *start_daemon(struct http_server *s, const struct sockaddr_storage *addr, int addrlen) {
        unsigned flags = MHD_USE_EPOLL;
        if (!s->opts.insecure_http)
                flags |= MHD_USE_TLS;
        if (addrlen == 0)
                flags |= MHD_USE_DUAL_STACK;
        struct MHD_OptionItem tls[] = {
                { MHD_OPTION_HTTPS_MEM_KEY, 0, s->key_pem },
                { MHD_OPTION_HTTPS_MEM_CERT, 0, s->cert_pem },
                { s->opts.insecure_http ? MHD_OPTION_END : MHD_OPTION_HTTPS_PRIORITIES, 0,
                  (void *)"NORMAL:-VERS-TLS1.0:-VERS-TLS1.1:-VERS-SSL3.0" },
                { MHD_OPTION_END, 0, NULL },
        };
        return MHD_start_daemon(flags, s->opts.port, NULL, NULL, access_cb, s,
                                MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
                                MHD_OPTION_SOCK_ADDR, addrlen ? (const struct sockaddr *)addr : NULL,
                                MHD_OPTION_ARRAY, s->opts.insecure_http ? &tls[3] : tls,
                                MHD_OPTION_END);
}

int http_server_start(const struct http_server_options *opts, struct http_server **ret_server, char *err,
                      size_t errlen) {
        struct http_server *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->opts = *opts;
        if (!s->opts.max_body_bytes)
                s->opts.max_body_bytes = DEFAULT_MAX_BODY;
        int r = s->opts.insecure_http ? 0 : load_tls(s, err, errlen);
        struct sockaddr_storage addr;
        int addrlen = r < 0 ? r : bind_sockaddr(opts, &addr);
        if (r == 0 && addrlen < 0) {
                snprintf(err, errlen, "invalid bind address '%s'", opts->bind_address);
                r = -EINVAL;
        }
        if (r == 0 && !(s->daemon = start_daemon(s, &addr, addrlen))) {
                snprintf(err, errlen, "cannot listen on port %u (address in use, or bad TLS certificate/key)",
                         (unsigned)opts->port);
                r = -EADDRNOTAVAIL;
        }
        if (r < 0) {
                http_server_free(s);
                return r;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
        s->port = info ? info->port : opts->port;
        *ret_server = s;
        return 0;
}

void http_server_free(struct http_server *s) {
        if (!s)
                return;
        if (s->daemon)
                MHD_stop_daemon(s->daemon);
        free(s->cert_pem);
        free(s->key_pem);
        free(s);
}

int http_server_fd(const struct http_server *s) {
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        return info ? info->epoll_fd : -1;
}

int http_server_run(struct http_server *s) {
        return MHD_run(s->daemon) == MHD_YES ? 0 : -EIO;
}

int http_server_timeout_ms(const struct http_server *s) {
        MHD_UNSIGNED_LONG_LONG t;
        if (MHD_get_timeout(s->daemon, &t) != MHD_YES)
                return -1;
        return t > 60000 ? 60000 : (int)t;
}

uint16_t http_server_port(const struct http_server *s) {
        return s->port;
}
