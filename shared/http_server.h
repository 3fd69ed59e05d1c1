/* http_server: an HTTPS (or, on request, plain HTTP) server on libmicrohttpd, driven by the caller's loop. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct MHD_Connection;

struct http_request {
        const char *method;
        const char *path; /* without the query string */
        const char *body; /* NUL-terminated; "" when there is none */
        size_t body_len;
        struct MHD_Connection *connection;
};

/* The header value (case-insensitive name) or NULL. */
const char *http_request_header(const struct http_request *req, const char *name);
/* The client's address as numeric text ("192.0.2.7", "::ffff:192.0.2.7", "::1") into buf, or "unknown". Returns
 * buf. */
const char *http_request_client_address(const struct http_request *req, char *buf, size_t len);

struct http_response {
        unsigned status;
        char *body;               /* malloc'd, owned by the response; NULL = empty */
        size_t body_len;
        const char *content_type; /* static string; default application/json */
        const char *extra_header_name, *extra_header_value; /* optional, static strings */
        const char *const *headers; /* optional, static: name, value, name, value, ..., NULL */
};

/* Set status and a malloc'd copy of body. */
void http_response_set(struct http_response *resp, unsigned status, const char *content_type, const char *body);
/* Take ownership of body (malloc'd). */
void http_response_take(struct http_response *resp, unsigned status, const char *content_type, char *body);

typedef void (*http_handler_fn)(void *userdata, const struct http_request *req, struct http_response *resp);

struct http_server_options {
        const char *bind_address; /* NULL or "" = all addresses (IPv6 dual stack) */
        uint16_t port;            /* 0 = pick a free port (see http_server_port) */
        const char *cert_file, *key_file;
        bool insecure_http;       /* serve plain HTTP; cert and key are then ignored */
        size_t max_body_bytes;    /* larger request bodies get 413 */
        /* Connection limits (0 = the default in parentheses). The total is also kept HTTP_SERVER_FD_RESERVE below
         * the process's open-file limit, so that the caller's own file reads never run out of descriptors. */
        unsigned max_connections;        /* open connections in all (HTTP_SERVER_MAX_CONNECTIONS) */
        unsigned max_connections_per_ip; /* open connections from one client address (HTTP_SERVER_MAX_PER_IP) */
        unsigned request_deadline_s;     /* a request's headers and body must have arrived this long after the
                                          * connection opened or the previous answer (HTTP_SERVER_DEADLINE_S) */
        unsigned idle_timeout_s;         /* a connection that sends or takes nothing this long is closed
                                          * (HTTP_SERVER_IDLE_S) */
        http_handler_fn handler;
        void *userdata;
};

#define HTTP_SERVER_MAX_CONNECTIONS 1024
#define HTTP_SERVER_MAX_PER_IP 256
#define HTTP_SERVER_DEADLINE_S 10
#define HTTP_SERVER_IDLE_S 10
#define HTTP_SERVER_FD_RESERVE 128

struct http_server;

/* Listen. Returns 0, or a negative errno with a one-line reason in err. */
int http_server_start(const struct http_server_options *opts, struct http_server **ret_server, char *err,
                      size_t errlen);
void http_server_free(struct http_server *s);

/* An fd that becomes readable when the server has work; then call http_server_run(). */
int http_server_fd(const struct http_server *s);
/* Do all pending work without blocking. Returns 0 or -EIO. */
int http_server_run(struct http_server *s);
/* Milliseconds until the server needs http_server_run() again, or -1 for no deadline. */
int http_server_timeout_ms(const struct http_server *s);
uint16_t http_server_port(const struct http_server *s);
/* The connection cap in force (max_connections, lowered to fit the open-file limit). */
unsigned http_server_max_connections(const struct http_server *s);
