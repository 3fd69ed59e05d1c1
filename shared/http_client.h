/* http_client: a keep-alive HTTP(S) client on libcurl: requests, multipart uploads and line streams. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Threads: a client owns one CURL easy handle (and, without a pool, its connection cache), so it is NOT
 * thread-safe. Each thread, or each task of a thread (fiber.h), creates and uses its own client; clients of one
 * http_pool share its connections. Creating and freeing clients from several threads at once is safe with a
 * thread-safe libcurl (7.84 or later, built "threadsafe", as Debian bookworm's 7.88 is). */

struct http_client_options {
        const char *ca_file;                /* PEM CA bundle that signs the server; NULL = system store */
        const char *cert_file, *key_file;   /* client certificate and key for mutual TLS; NULL = none */
        bool insecure;                      /* skip the certificate and host name checks */
        long timeout_ms;                    /* whole request, not streams; 0 = 30 s */
        long connect_timeout_ms;            /* TCP + TLS handshake; 0 = 10 s */
        const char *bearer_token;           /* sends "Authorization: Bearer <token>"; NULL = none */
        const char *const *headers;         /* extra "Name: value" lines sent with every request, NULL-terminated */
        struct http_pool *pool;             /* keep connections in this pool, shared with its other clients; NULL =
                                             * the client's own */
};

/* What came back. The body is NUL-terminated (also when empty), so text bodies can be used directly. */
struct http_client_response {
        long status;          /* 200, 404, ... */
        char *reason;         /* the status line's reason phrase ("" when none); PVE puts its error text here */
        char *content_type;   /* NULL when the server sent none */
        char *body;
        size_t body_len;
        long retry_after_ms;  /* from Retry-After (seconds or an HTTP date); -1 when absent */
        int stream_end;       /* http_client_stream only: how a 2xx stream ended (enum http_stream_end) */
};

enum http_stream_end {
        HTTP_STREAM_EOF = 0,   /* the server ended the response */
        HTTP_STREAM_IDLE = 1,  /* nothing arrived for idle_timeout_ms */
        HTTP_STREAM_BROKEN = 2 /* the connection failed after the headers (reset, TLS error, ...) */
};

struct http_client_part {
        const char *name;         /* form field name */
        const char *filename;     /* NULL for a plain field; else the file name sent in Content-Disposition */
        const char *content_type; /* NULL = libcurl's default */
        const void *data;
        size_t len;
};

struct http_client;
struct http_pool;

/* A pool of kept-alive connections that the clients created with it share, each client on its own thread: a
 * request takes an idle connection to its server from the pool, whichever client opened it, and a server sees
 * as many connections as requests run at once, not one per client (a TLS handshake costs about 2 ms of CPU).
 * With max_requests > 0, at most that many requests of the pool's clients run at once (streams not counted);
 * the others wait for a turn, and that wait counts as time inside the request. Returns 0, -ENOMEM or -EIO.
 * Free it after the last of its clients. NULL is fine. */
int http_pool_new(unsigned max_requests, struct http_pool **ret_pool);
void http_pool_free(struct http_pool *p);

/* Create a client; every string in opts is copied. Returns 0, -ENOMEM or -EIO (libcurl init failed). */
int http_client_new(const struct http_client_options *opts, struct http_client **ret_client);
/* Close the connections and free. NULL is fine. */
void http_client_free(struct http_client *c);

/* Replace the bearer token (e.g. a rotated service-account token). NULL removes it. 0 or -ENOMEM. */
int http_client_set_bearer(struct http_client *c, const char *token);
/* While *flag is true every transfer of this client stops within about a second with -ECANCELED.
 * The flag is read, never written; it may be set from another thread. NULL = no cancellation. */
void http_client_set_cancel(struct http_client *c, const atomic_bool *flag);

/* One request. method is GET, POST, PUT, PATCH, DELETE, ...; headers are extra "Name: value" lines
 * (NULL-terminated or NULL); body NULL sends no body (GET and DELETE should never get one), else
 * body_len bytes (set Content-Type in headers). Returns 0 when any HTTP response arrived (4xx and 5xx
 * included) and fills ret_resp (free with http_client_response_done), or a negative errno for transport
 * failures: -ETIMEDOUT, -ECONNREFUSED, -EHOSTUNREACH (name not resolved), -ECONNRESET (connection broke
 * or closed without an answer), -EKEYREJECTED (server certificate not trusted), -EPROTO (other TLS
 * failures), -ECANCELED, -EFBIG (body above 64 MiB), -ENOMEM, -EIO. http_client_error() then says why. */
int http_client_request(struct http_client *c, const char *method, const char *url, const char *const *headers,
                        const void *body, size_t body_len, struct http_client_response *ret_resp);

/* POST a multipart/form-data body made of parts (in order). Same results as http_client_request. */
int http_client_request_multipart(struct http_client *c, const char *url, const char *const *headers,
                                  const struct http_client_part *parts, size_t n_parts,
                                  struct http_client_response *ret_resp);

/* Called with one complete line (no "\n", a trailing "\r" removed, never empty), NUL-terminated. A negative
 * return aborts the stream and becomes http_client_stream's result. */
typedef int (*http_client_line_fn)(const char *line, size_t len, void *userdata);

/* GET a streaming response (e.g. a Kubernetes watch: chunked JSON lines). For a 2xx status every complete line
 * goes to fn as it arrives and the body stays empty; other statuses collect the body as usual. No overall
 * timeout applies: the stream ends when the server closes it, when nothing arrives for idle_timeout_ms
 * (0 = never; checked about once per second), or when the connection breaks; stream_end says which and the
 * result is 0. Negative: fn's error, or the transport errors of http_client_request when no response came. */
int http_client_stream(struct http_client *c, const char *url, const char *const *headers, long idle_timeout_ms,
                       http_client_line_fn fn, void *userdata, struct http_client_response *ret_resp);

/* Why the last call failed (libcurl's message), "" when it did not. Valid until the next call. */
const char *http_client_error(const struct http_client *c);

/* Free the response's strings; the struct itself is the caller's. Safe on a zeroed struct. */
void http_client_response_done(struct http_client_response *r);

/* Percent-encode s for a URL query value or a form field (everything except A-Z a-z 0-9 - . _ ~).
 * Returns a malloc'd string or NULL on ENOMEM. */
char *http_client_escape(const char *s);

/* The errno a plain HTTP status means: 2xx 0, 400/422 -EINVAL, 401 -EACCES, 403 -EPERM, 404 -ENOENT,
 * 405/415/501 -EOPNOTSUPP, 409 -EEXIST, 410 -EIDRM, 429 -EBUSY, anything else -EIO. Each API client
 * refines the cases its server gives a special meaning. Pure. */
int http_status_errno(long status);

/* Microseconds the calling thread, or task (fiber.h), has spent inside requests (connect, send, wait for and read
 * the answer; http_client_request and http_client_request_multipart, not streams) since it started. A caller
 * takes the difference across a piece of work to tell waiting for a peer from its own time. In a task, a request
 * yields to the other tasks of its thread until the answer is in. */
int64_t http_client_thread_wait_us(void);
/* Count us more as waiting for a peer outside a request (sleeping between polls of work the peer reported as
 * still running). */
void http_client_thread_wait_note(int64_t us);
