/* http_server: an HTTPS (or, on request, plain HTTP) server on libmicrohttpd, driven by the caller's loop, with
 * connection caps (total, per client address), a deadline for each request and an idle limit. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "fileio.h"
#include "log.h"
#include "monotime.h"

#define DEFAULT_MAX_BODY (1u << 20)

struct conn_ctx;

struct http_server {
        struct MHD_Daemon *daemon;
        struct http_server_options opts;
        char *cert_pem, *key_pem;
        uint16_t port;
        unsigned max_connections;
        struct conn_ctx *conns; /* every open connection, for the request deadline */
};

/* Per-request state, from the request line (the URI log callback) until the answer is sent. */
struct request_ctx {
        char *body;
        size_t len;
        bool started;   /* the access handler saw the headers */
        bool too_large;
        bool nul_in_uri; /* the raw URI has a %00, which MHD's unescaping would turn into a truncated path */
};

/* Per-connection state, from accept to close. */
struct conn_ctx {
        struct conn_ctx *prev, *next;
        struct MHD_Connection *conn;
        struct request_ctx *req; /* the current request, if its line has arrived */
        int fd;
        int64_t since_us; /* accepted, or the previous answer completed */
        bool dispatched;  /* the current request is complete: the deadline no longer applies */
        bool cut;         /* shut down by us */
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

static void add_headers(struct MHD_Response *r, const struct http_response *resp) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                resp->content_type ? resp->content_type : "application/json");
        MHD_add_response_header(r, "Cache-Control", "no-store");
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        if (resp->extra_header_name)
                MHD_add_response_header(r, resp->extra_header_name, resp->extra_header_value);
        for (const char *const *h = resp->headers; h && h[0] && h[1]; h += 2)
                MHD_add_response_header(r, h[0], h[1]);
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
        add_headers(r, resp);
        enum MHD_Result ret = MHD_queue_response(conn, resp->status, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result queue_error(struct MHD_Connection *conn, unsigned status, const char *json) {
        struct http_response resp = { .status = status };
        http_response_set(&resp, status, NULL, json);
        return queue(conn, &resp);
}

static struct conn_ctx *conn_of(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return info ? info->socket_context : NULL;
}

static enum MHD_Result dispatch(struct http_server *s, struct MHD_Connection *conn, const char *method,
                                const char *url, struct request_ctx *ctx) {
        struct http_response resp = { .status = 500 };
        struct conn_ctx *c = conn_of(conn);
        if (c)
                c->dispatched = true;
        if (ctx->too_large)
                return queue_error(conn, 413, "{\"error\":\"request body too large\",\"detail\":\"\"}");
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

/* Content-Length as MHD accepted it (digits only, fits 64 bits); UINT64_MAX when absent. */
static uint64_t content_length(struct MHD_Connection *conn) {
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        return v ? strtoull(v, NULL, 10) : UINT64_MAX;
}

/* The first call, with the headers: refuse what can be refused before any body is read. MHD then discards the
 * body and closes the connection after the answer. */
static enum MHD_Result first_call(struct http_server *s, struct MHD_Connection *conn, struct request_ctx *ctx) {
        ctx->started = true;
        if (ctx->nul_in_uri)
                return queue_error(conn, 400, "{\"error\":\"invalid request\",\"detail\":\"path: "
                                              "an encoded NUL byte (%00) is not allowed\"}");
        uint64_t len = content_length(conn);
        if (len != UINT64_MAX && len > s->opts.max_body_bytes)
                return queue_error(conn, 413, "{\"error\":\"request body too large\",\"detail\":"
                                              "\"Content-Length is over the limit\"}");
        return MHD_YES;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
        (void)version;
        struct http_server *s = cls;
        struct request_ctx *ctx = *con_cls;
        if (!ctx)
                return MHD_NO; /* out of memory when the request line arrived */
        if (!ctx->started)
                return first_call(s, conn, ctx);
        if (*upload_data_size > 0) {
                if (append_body(ctx, upload_data, *upload_data_size, s->opts.max_body_bytes) < 0)
                        return MHD_NO;
                *upload_data_size = 0;
                return MHD_YES;
        }
        return dispatch(s, conn, method, url, ctx);
}

static void request_free(struct request_ctx *ctx) {
        if (!ctx)
                return;
        free(ctx->body);
        free(ctx);
}

/* The request line has arrived: the request's state starts here, so that the raw URI can be checked. */
static void *uri_cb(void *cls, const char *uri, struct MHD_Connection *conn) {
        (void)cls;
        struct request_ctx *ctx = calloc(1, sizeof *ctx);
        struct conn_ctx *c = conn_of(conn);
        if (!ctx)
                return NULL;
        for (const char *p = uri; (p = strchr(p, '%')); p++)
                if (strncmp(p + 1, "00", 2) == 0)
                        ctx->nul_in_uri = true;
        if (c) {
                request_free(c->req); /* a previous request MHD refused itself (it never completes) */
                c->req = ctx;
        }
        return ctx;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void)cls;
        (void)toe;
        struct request_ctx *ctx = *con_cls;
        struct conn_ctx *c = conn_of(conn);
        if (c) {
                c->since_us = monotime_us(); /* the next request's deadline counts from here */
                c->dispatched = false;
                if (c->req == ctx)
                        c->req = NULL;
        }
        request_free(ctx);
        *con_cls = NULL;
}

static void conn_opened(struct http_server *s, struct MHD_Connection *conn, void **socket_context) {
        struct conn_ctx *c = calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!c)
                return; /* no deadline for this one; the idle timeout and the caps still apply */
        c->conn = conn;
        c->fd = info ? info->connect_fd : -1;
        c->since_us = monotime_us();
        c->next = s->conns;
        if (s->conns)
                s->conns->prev = c;
        s->conns = c;
        *socket_context = c;
}

static void conn_closed(struct http_server *s, void **socket_context) {
        struct conn_ctx *c = *socket_context;
        if (!c)
                return;
        if (c->prev)
                c->prev->next = c->next;
        else
                s->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        request_free(c->req);
        free(c);
        *socket_context = NULL;
}

static void connection_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
        if (toe == MHD_CONNECTION_NOTIFY_STARTED)
                conn_opened(cls, conn, socket_context);
        else
                conn_closed(cls, socket_context);
}

/* End a connection from our side: MHD sees the end of the stream on its next read or write and closes it. */
static void cut(struct conn_ctx *c) {
        if (c->fd >= 0 && !c->cut)
                shutdown(c->fd, SHUT_RDWR);
        c->cut = true;
}

static bool bad_content_length(struct MHD_Connection *conn) {
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (!v)
                return false;
        size_t n = strspn(v, "0123456789");
        return n == 0 || v[n] != '\0' || n > 19 || (n == 19 && strcmp(v, "18446744073709551615") > 0);
}

/* The 400 for a Content-Length MHD cannot parse, as our other errors look (the usual headers, a JSON body), written
 * in one piece: MHD gives no way to answer this request through it. */
static int bad_length_answer(char *buf, size_t len) {
        static const char body[] = "{\"error\":\"invalid request\",\"detail\":"
                                   "\"Content-Length: expected a number of bytes (digits only)\"}";
        return snprintf(buf, len,
                        "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: application/json\r\n"
                        "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %zu\r\n\r\n%s",
                        sizeof body - 1, body);
}

/* Write the 400 on c's connection (through its TLS session, or the plain socket) and end the connection. */
static void answer_bad_length(struct conn_ctx *c) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
        char answer[512];
        size_t n = (size_t)bad_length_answer(answer, sizeof answer);
        ssize_t sent = -1;
        if (info && info->tls_session)
                sent = gnutls_record_send(info->tls_session, answer, n);
        else if (c->fd >= 0)
                sent = send(c->fd, answer, n, MSG_NOSIGNAL);
        if (sent != (ssize_t)n)
                log_debug("the 400 for a malformed Content-Length was not sent whole (%zd of %zu bytes)", sent, n);
        cut(c);
}

/* libmicrohttpd 0.9.75 answers a request whose Content-Length it cannot parse on its own, before any callback of
 * ours, and writes that answer's status line and headers twice. It logs the problem just before: answer such a
 * request ourselves then, and end the connection, so that MHD's own answer never reaches the client. */
static void mhd_log_cb(void *cls, const char *fmt, va_list ap) {
        struct http_server *s = cls;
        if (strstr(fmt, "Content-Length")) {
                for (struct conn_ctx *c = s->conns; c; c = c->next)
                        if (c->req && !c->req->started && !c->cut && bad_content_length(c->conn))
                                answer_bad_length(c);
        }
        log_fullv(LOG_LEVEL_DEBUG, __FILE__, __LINE__, __func__, NULL, fmt, ap);
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

/* The connection cap: the configured one, kept HTTP_SERVER_FD_RESERVE below the open-file limit (raised to its
 * hard limit first). */
static unsigned connection_cap(unsigned wanted) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return wanted;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                        getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)wanted + HTTP_SERVER_FD_RESERVE)
                return wanted;
        return rl.rlim_cur > HTTP_SERVER_FD_RESERVE ? (unsigned)(rl.rlim_cur - HTTP_SERVER_FD_RESERVE) : 8;
}

static struct MHD_Daemon *start_daemon(struct http_server *s, const struct sockaddr_storage *addr, int addrlen) {
        unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
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
                                MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, s,
                                MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s,
                                MHD_OPTION_NOTIFY_CONNECTION, connection_cb, s,
                                MHD_OPTION_URI_LOG_CALLBACK, uri_cb, s,
                                MHD_OPTION_CONNECTION_TIMEOUT, s->opts.idle_timeout_s,
                                MHD_OPTION_CONNECTION_LIMIT, s->max_connections,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->opts.max_connections_per_ip,
                                MHD_OPTION_SOCK_ADDR, addrlen ? (const struct sockaddr *)addr : NULL,
                                MHD_OPTION_ARRAY, s->opts.insecure_http ? &tls[3] : tls,
                                MHD_OPTION_END);
}

static void set_limits(struct http_server_options *o) {
        if (!o->max_body_bytes)
                o->max_body_bytes = DEFAULT_MAX_BODY;
        if (!o->max_connections)
                o->max_connections = HTTP_SERVER_MAX_CONNECTIONS;
        if (!o->max_connections_per_ip)
                o->max_connections_per_ip = HTTP_SERVER_MAX_PER_IP;
        if (!o->request_deadline_s)
                o->request_deadline_s = HTTP_SERVER_DEADLINE_S;
        if (!o->idle_timeout_s)
                o->idle_timeout_s = HTTP_SERVER_IDLE_S;
}

int http_server_start(const struct http_server_options *opts, struct http_server **ret_server, char *err,
                      size_t errlen) {
        struct http_server *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->opts = *opts;
        set_limits(&s->opts);
        s->max_connections = connection_cap(s->opts.max_connections);
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

/* Microseconds until c's request deadline (negative: passed), or INT64_MAX when none applies. */
static int64_t deadline_left(const struct http_server *s, const struct conn_ctx *c, int64_t now) {
        if (c->dispatched || c->cut)
                return INT64_MAX;
        return c->since_us + (int64_t)s->opts.request_deadline_s * 1000000 - now;
}

/* Close the connections whose request is not complete by its deadline: a client trickling its headers or body,
 * or stalling in the TLS handshake. */
static void enforce_deadlines(struct http_server *s) {
        int64_t now = monotime_us();
        for (struct conn_ctx *c = s->conns; c; c = c->next)
                if (deadline_left(s, c, now) <= 0)
                        cut(c);
}

int http_server_run(struct http_server *s) {
        enum MHD_Result r = MHD_run(s->daemon);
        enforce_deadlines(s);
        return r == MHD_YES ? 0 : -EIO;
}

int http_server_timeout_ms(const struct http_server *s) {
        MHD_UNSIGNED_LONG_LONG t;
        int64_t now = monotime_us(), next = INT64_MAX;
        for (const struct conn_ctx *c = s->conns; c; c = c->next) {
                int64_t left = deadline_left(s, c, now);
                next = left < next ? left : next;
        }
        int ms = -1;
        if (MHD_get_timeout(s->daemon, &t) == MHD_YES)
                ms = t > 60000 ? 60000 : (int)t;
        if (next == INT64_MAX)
                return ms;
        int deadline = next <= 0 ? 0 : (int)((next + 999) / 1000);
        return ms < 0 || deadline < ms ? deadline : ms;
}

unsigned http_server_max_connections(const struct http_server *s) {
        return s->max_connections;
}

uint16_t http_server_port(const struct http_server *s) {
        return s->port;
}
