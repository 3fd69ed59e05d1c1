/* http_client: a keep-alive HTTP(S) client on libcurl: requests, multipart uploads and line streams. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "http_client.h"
#include "array.h"
#include "fiber.h"
#include "monotime.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define HTTP_DEFAULT_TIMEOUT_MS 30000L
#define HTTP_DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define HTTP_MAX_BODY ((size_t)64 << 20)
#define HTTP_MAX_LINE ((size_t)64 << 20)
#define HTTP_MAX_RETRY_AFTER_S 3600L
#define HTTP_POOL_MAX_CONNECTIONS 512L /* libcurl closes the oldest idle one above this (its default: 5) */
#define HTTP_CLIENT_MAX_IDLE_S 5       /* under the agent's idle limit (10 s) and any server's we talk to */

struct http_pool {
        CURLSH *share;
        pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
        pthread_mutex_t mu;      /* active */
        pthread_cond_t turn;     /* signalled when a request ends */
        unsigned max_requests;   /* 0 = no limit */
        unsigned active;
        struct fiber **waiting;  /* tasks (fiber.h) waiting for a turn, first come first */
        size_t n_waiting, cap_waiting;
};

struct http_client {
        CURL *curl;
        struct http_pool *pool;
        char *ca_file, *cert_file, *key_file;
        bool insecure;
        long timeout_ms, connect_timeout_ms;
        char *auth_header;
        char **headers;
        size_t n_headers;
        const atomic_bool *cancel;
        bool configured; /* set_constant ran */
        int proxy_scheme; /* the scheme whose proxy variables set_proxy read: 0 none yet, 1 http, 2 https */
        char errbuf[CURL_ERROR_SIZE];
};

struct buf {
        char *data;
        size_t len, cap;
};

/* State of one transfer, shared by the libcurl callbacks. */
struct transfer {
        struct http_client *c;
        struct buf body, line;
        long status;
        char *reason, *content_type;
        long retry_after_ms;
        bool want_lines;             /* a stream: deliver 2xx bodies line by line */
        http_client_line_fn fn;
        void *userdata;
        int fn_error;
        long idle_timeout_ms;
        struct timespec last_data;
        bool idle_hit, canceled, too_big;
};

/* ---- small helpers ---- */

static int buf_append(struct buf *b, const char *data, size_t len, size_t max) {
        if (b->len + len + 1 > max)
                return -EFBIG;
        if (b->len + len + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->len + len + 1)
                        cap *= 2;
                char *p = realloc(b->data, cap);
                if (!p)
                        return -ENOMEM;
                b->data = p;
                b->cap = cap;
        }
        memcpy(b->data + b->len, data, len);
        b->len += len;
        b->data[b->len] = '\0';
        return 0;
}

static char *dup_or_null(const char *s) {
        return s ? strdup(s) : NULL;
}

static bool dup_failed(const char *src, const char *copy) {
        return src && !copy;
}

char *http_client_escape(const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *out = malloc(3 * n + 1), *p = out;
        if (!out)
                return NULL;
        for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
                bool plain = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ||
                             *q == '-' || *q == '.' || *q == '_' || *q == '~';
                if (plain) {
                        *p++ = (char)*q;
                        continue;
                }
                *p++ = '%';
                *p++ = hex[*q >> 4];
                *p++ = hex[*q & 15];
        }
        *p = '\0';
        return out;
}

/* ---- the shared pool ---- */

static void pool_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *userdata) {
        (void)h;
        (void)access;
        struct http_pool *p = userdata;
        pthread_mutex_lock(&p->locks[data]);
}

static void pool_unlock(CURL *h, curl_lock_data data, void *userdata) {
        (void)h;
        struct http_pool *p = userdata;
        pthread_mutex_unlock(&p->locks[data]);
}

int http_pool_new(unsigned max_requests, struct http_pool **ret_pool) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return -EIO;
        struct http_pool *p = calloc(1, sizeof *p);
        if (!p || !(p->share = curl_share_init())) {
                free(p);
                curl_global_cleanup();
                return p ? -EIO : -ENOMEM;
        }
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
                pthread_mutex_init(&p->locks[i], NULL);
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->turn, NULL);
        p->max_requests = max_requests;
        curl_share_setopt(p->share, CURLSHOPT_LOCKFUNC, pool_lock);
        curl_share_setopt(p->share, CURLSHOPT_UNLOCKFUNC, pool_unlock);
        curl_share_setopt(p->share, CURLSHOPT_USERDATA, p);
        bool ok = curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) == CURLSHE_OK &&
                  curl_share_setopt(p->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) == CURLSHE_OK;
        if (!ok) {
                http_pool_free(p);
                return -EIO;
        }
        *ret_pool = p;
        return 0;
}

void http_pool_free(struct http_pool *p) {
        if (!p)
                return;
        curl_share_cleanup(p->share);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
                pthread_mutex_destroy(&p->locks[i]);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->turn);
        free(p->waiting);
        free(p);
        curl_global_cleanup();
}

/* A task waits for its turn parked, not blocking the thread its other tasks run on. p->mu held. */
static void pool_wait_fiber_locked(struct http_pool *p, struct fiber *f) {
        if (ARRAY_GROW(&p->waiting, &p->cap_waiting, p->n_waiting, 16) < 0) {
                pthread_mutex_unlock(&p->mu);
                fiber_sleep_ms(1); /* no memory for the list: look again soon */
                pthread_mutex_lock(&p->mu);
                return;
        }
        p->waiting[p->n_waiting++] = f;
        pthread_mutex_unlock(&p->mu);
        fiber_park();
        pthread_mutex_lock(&p->mu);
}

/* Wait for a turn to run a request. */
static void pool_enter(struct http_pool *p) {
        if (!p || !p->max_requests)
                return;
        struct fiber *self = fiber_self();
        pthread_mutex_lock(&p->mu);
        while (p->active >= p->max_requests) {
                if (self)
                        pool_wait_fiber_locked(p, self);
                else
                        pthread_cond_wait(&p->turn, &p->mu);
        }
        p->active++;
        pthread_mutex_unlock(&p->mu);
}

static void pool_leave(struct http_pool *p) {
        if (!p || !p->max_requests)
                return;
        pthread_mutex_lock(&p->mu);
        p->active--;
        if (p->n_waiting > 0) {
                struct fiber *f = p->waiting[0];
                memmove(p->waiting, p->waiting + 1, --p->n_waiting * sizeof *p->waiting);
                fiber_wake(f);
        } else {
                pthread_cond_signal(&p->turn);
        }
        pthread_mutex_unlock(&p->mu);
}

/* ---- lifecycle ---- */

static int copy_headers(struct http_client *c, const char *const *headers) {
        size_t n = 0;
        while (headers && headers[n])
                n++;
        c->headers = calloc(n + 1, sizeof *c->headers);
        if (!c->headers)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                c->headers[i] = strdup(headers[i]);
                if (!c->headers[i])
                        return -ENOMEM;
                c->n_headers = i + 1;
        }
        return 0;
}

static int client_init(struct http_client *c, const struct http_client_options *o) {
        c->ca_file = dup_or_null(o->ca_file);
        c->cert_file = dup_or_null(o->cert_file);
        c->key_file = dup_or_null(o->key_file);
        if (dup_failed(o->ca_file, c->ca_file) || dup_failed(o->cert_file, c->cert_file) ||
            dup_failed(o->key_file, c->key_file))
                return -ENOMEM;
        c->insecure = o->insecure;
        c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : HTTP_DEFAULT_TIMEOUT_MS;
        c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : HTTP_DEFAULT_CONNECT_TIMEOUT_MS;
        int r = http_client_set_bearer(c, o->bearer_token);
        if (r < 0)
                return r;
        r = copy_headers(c, o->headers);
        if (r < 0)
                return r;
        c->curl = curl_easy_init();
        if (!c->curl)
                return -EIO;
        c->pool = o->pool;
        if (c->pool && curl_easy_setopt(c->curl, CURLOPT_SHARE, c->pool->share) != CURLE_OK)
                return -EIO;
        return 0;
}

int http_client_new(const struct http_client_options *opts, struct http_client **ret_client) {
        static const struct http_client_options defaults = { 0 };
        /* Reference-counted inside libcurl, and thread-safe since 7.84 (CURL_VERSION_THREADSAFE). */
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return -EIO;
        struct http_client *c = calloc(1, sizeof *c);
        if (!c) {
                curl_global_cleanup();
                return -ENOMEM;
        }
        int r = client_init(c, opts ? opts : &defaults);
        if (r < 0) {
                http_client_free(c);
                return r;
        }
        *ret_client = c;
        return 0;
}

void http_client_free(struct http_client *c) {
        if (!c)
                return;
        if (c->curl)
                curl_easy_cleanup(c->curl);
        for (size_t i = 0; i < c->n_headers; i++)
                free(c->headers[i]);
        free(c->headers);
        free(c->auth_header);
        free(c->ca_file);
        free(c->cert_file);
        free(c->key_file);
        free(c);
        curl_global_cleanup();
}

int http_client_set_bearer(struct http_client *c, const char *token) {
        char *h = NULL;
        if (token && asprintf(&h, "Authorization: Bearer %s", token) < 0)
                return -ENOMEM;
        free(c->auth_header);
        c->auth_header = h;
        return 0;
}

void http_client_set_cancel(struct http_client *c, const atomic_bool *flag) {
        c->cancel = flag;
}

const char *http_client_error(const struct http_client *c) {
        return c->errbuf;
}

void http_client_response_done(struct http_client_response *r) {
        if (!r)
                return;
        free(r->reason);
        free(r->content_type);
        free(r->body);
        r->reason = r->content_type = r->body = NULL;
        r->body_len = 0;
}

/* ---- response headers ---- */

static char *trimmed_copy(const char *s, size_t len) {
        while (len && (s[len - 1] == '\r' || s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\t'))
                len--;
        while (len && (*s == ' ' || *s == '\t')) {
                s++;
                len--;
        }
        return strndup(s, len);
}

/* "HTTP/1.1 500 only root can set 'affinity' config\r\n": remember the code and the reason phrase. */
static void parse_status_line(struct transfer *t, const char *line, size_t len) {
        const char *sp = memchr(line, ' ', len);
        free(t->reason);
        free(t->content_type);
        t->reason = t->content_type = NULL;
        t->retry_after_ms = -1;
        t->status = 0;
        if (!sp || (size_t)(sp - line) + 4 > len)
                return;
        t->status = strtol(sp + 1, NULL, 10);
        const char *reason = sp + 4;
        size_t rlen = len - (size_t)(reason - line);
        t->reason = trimmed_copy(reason, rlen);
}

static long parse_retry_after(const char *value) {
        char *end;
        long secs = strtol(value, &end, 10);
        if (end != value && *end == '\0' && secs >= 0)
                return (secs > HTTP_MAX_RETRY_AFTER_S ? HTTP_MAX_RETRY_AFTER_S : secs) * 1000;
        time_t when = curl_getdate(value, NULL);
        if (when < 0)
                return -1;
        time_t delta = when - time(NULL);
        if (delta < 0)
                delta = 0;
        return (delta > HTTP_MAX_RETRY_AFTER_S ? HTTP_MAX_RETRY_AFTER_S : (long)delta) * 1000;
}

static void parse_header_line(struct transfer *t, const char *line, size_t len) {
        const char *colon = memchr(line, ':', len);
        if (!colon)
                return;
        size_t nlen = (size_t)(colon - line);
        char *value = trimmed_copy(colon + 1, len - nlen - 1);
        if (!value)
                return;
        if (nlen == 12 && strncasecmp(line, "Content-Type", nlen) == 0) {
                free(t->content_type);
                t->content_type = value;
                return;
        }
        if (nlen == 11 && strncasecmp(line, "Retry-After", nlen) == 0)
                t->retry_after_ms = parse_retry_after(value);
        free(value);
}

static size_t on_header(char *data, size_t size, size_t n, void *userdata) {
        struct transfer *t = userdata;
        size_t len = size * n;
        if (len >= 5 && strncmp(data, "HTTP/", 5) == 0)
                parse_status_line(t, data, len);
        else
                parse_header_line(t, data, len);
        return len;
}

/* ---- response body ---- */

static bool is_2xx(long status) {
        return status >= 200 && status < 300;
}

/* Hand every complete line in t->line to the callback and keep the incomplete rest. */
static int deliver_lines(struct transfer *t) {
        size_t start = 0;
        char *nl;
        while ((nl = memchr(t->line.data + start, '\n', t->line.len - start)) != NULL) {
                size_t end = (size_t)(nl - t->line.data), len = end - start;
                char *line = t->line.data + start;
                *nl = '\0';
                if (len && line[len - 1] == '\r')
                        line[--len] = '\0';
                start = end + 1;
                int r = len ? t->fn(line, len, t->userdata) : 0;
                if (r < 0)
                        return r;
        }
        memmove(t->line.data, t->line.data + start, t->line.len - start + 1);
        t->line.len -= start;
        return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *userdata) {
        struct transfer *t = userdata;
        size_t len = size * n;
        clock_gettime(CLOCK_MONOTONIC, &t->last_data);
        bool lines = t->want_lines && is_2xx(t->status);
        int r = buf_append(lines ? &t->line : &t->body, data, len, lines ? HTTP_MAX_LINE : HTTP_MAX_BODY);
        if (r < 0) {
                t->too_big = r == -EFBIG;
                return 0;
        }
        if (lines && (r = deliver_lines(t)) < 0) {
                t->fn_error = r;
                return 0;
        }
        return len;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
        (void)dltotal;
        (void)dlnow;
        (void)ultotal;
        (void)ulnow;
        struct transfer *t = userdata;
        if (t->c->cancel && atomic_load(t->c->cancel)) {
                t->canceled = true;
                return 1;
        }
        if (t->idle_timeout_ms <= 0)
                return 0;
        int64_t last = (int64_t)t->last_data.tv_sec * 1000 + t->last_data.tv_nsec / 1000000;
        if (monotime_ms() - last < t->idle_timeout_ms)
                return 0;
        t->idle_hit = true;
        return 1;
}

/* ---- one transfer ---- */

static bool slist_add(struct curl_slist **list, const char *line) {
        struct curl_slist *tmp = curl_slist_append(*list, line);
        if (!tmp)
                return false;
        *list = tmp;
        return true;
}

/* The client's headers, its Authorization header, then the request's own. NULL on ENOMEM. */
static struct curl_slist *build_headers(const struct http_client *c, const char *const *extra) {
        struct curl_slist *list = NULL;
        /* No "Expect: 100-continue" round trip before bodies. */
        bool ok = slist_add(&list, "Expect:");
        for (size_t i = 0; ok && i < c->n_headers; i++)
                ok = slist_add(&list, c->headers[i]);
        if (ok && c->auth_header)
                ok = slist_add(&list, c->auth_header);
        for (size_t i = 0; ok && extra && extra[i]; i++)
                ok = slist_add(&list, extra[i]);
        if (ok)
                return list;
        curl_slist_free_all(list);
        return NULL;
}

static void set_tls(struct http_client *c) {
        CURL *h = c->curl;
        if (c->ca_file) {
                /* Trust exactly this CA. Leaving CAPATH at its default would also load every certificate in
                 * /etc/ssl/certs on each new connection: most of the coordinator's CPU in the scale-up bench. */
                curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
                curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
        }
        if (c->cert_file)
                curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
        if (c->key_file)
                curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L);
}

/* The options every request of this client shares, set on its first: setting them again (after a
 * curl_easy_reset) for each request copied the same strings again every time. */
static void set_constant(struct http_client *c) {
        CURL *h = c->curl;
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        /* PVE carries its error text in the HTTP/1.1 reason phrase, which HTTP/2 does not have. */
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        if (c->pool)
                curl_easy_setopt(h, CURLOPT_MAXCONNECTS, HTTP_POOL_MAX_CONNECTIONS);
        /* A connection idle longer than this is not reused: servers close idle keep-alive connections (the agent
         * after 10 s), and every request that met one it had just closed failed, one per pooled connection. */
        curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, (long)HTTP_CLIENT_MAX_IDLE_S);
        set_tls(c);
        c->configured = true;
}

/* The first of the variables that is set, even empty (as libcurl reads them), or NULL. */
static const char *first_env(const char *const *names, size_t n) {
        for (size_t i = 0; i < n; i++) {
                const char *v = names[i] ? getenv(names[i]) : NULL;
                if (v)
                        return v;
        }
        return NULL;
}

/* The proxy and no-proxy list the environment gives, set explicitly: libcurl would otherwise read the variables
 * again for every transfer. Looked up as libcurl does (the scheme's variable in lower case, then in upper case
 * but for HTTP_PROXY, then all_proxy and ALL_PROXY; no_proxy, then NO_PROXY); read again only when the scheme
 * changes. An empty proxy is none. */
static void set_proxy(struct http_client *c, const char *url) {
        int scheme = strncasecmp(url, "https:", 6) == 0 ? 2 : 1;
        if (scheme == c->proxy_scheme)
                return;
        const char *https[] = { "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY" };
        const char *http[] = { "http_proxy", NULL, "all_proxy", "ALL_PROXY" };
        const char *no[] = { "no_proxy", "NO_PROXY" };
        const char *proxy = first_env(scheme == 2 ? https : http, 4), *no_proxy = first_env(no, 2);
        curl_easy_setopt(c->curl, CURLOPT_PROXY, proxy ? proxy : "");
        curl_easy_setopt(c->curl, CURLOPT_NOPROXY, no_proxy ? no_proxy : "");
        c->proxy_scheme = scheme;
}

/* What differs per request. The method is back to a plain GET first (no custom verb, no body left over from
 * the request before); set_method or the caller sets this request's. */
static void set_common(struct http_client *c, struct transfer *t, const char *url, struct curl_slist *headers,
                       long timeout_ms) {
        CURL *h = c->curl;
        if (!c->configured)
                set_constant(c);
        set_proxy(c, url);
        c->errbuf[0] = '\0';
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, t);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, t);
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t->last_data);
}

/* On top of the plain GET set_common leaves. */
static void set_method(CURL *h, const char *method, const void *body, size_t body_len) {
        if (strcmp(method, "GET") == 0 && !body)
                return;
        if (strcmp(method, "HEAD") == 0) {
                curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
                return;
        }
        if (strcmp(method, "POST") != 0)
                curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (!body && strcmp(method, "POST") != 0)
                return;
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
}

static int errno_from_curl(CURLcode code) {
        switch (code) {
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_GOT_NOTHING:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_PARTIAL_FILE:
                return -ECONNRESET;
        case CURLE_PEER_FAILED_VERIFICATION:
                return -EKEYREJECTED;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
                return -EPROTO;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_URL_MALFORMAT:
        case CURLE_UNSUPPORTED_PROTOCOL:
                return -EINVAL;
        default:
                return -EIO;
        }
}

/* The result of a finished perform: 0 when a response is complete, else a negative errno. */
static int transfer_result(struct transfer *t, CURLcode code) {
        struct http_client *c = t->c;
        if (code == CURLE_OK)
                return 0;
        if (t->fn_error)
                return t->fn_error;
        if (t->too_big) {
                snprintf(c->errbuf, sizeof c->errbuf, "response larger than %zu bytes", HTTP_MAX_BODY);
                return -EFBIG;
        }
        if (t->canceled) {
                snprintf(c->errbuf, sizeof c->errbuf, "canceled");
                return -ECANCELED;
        }
        if (t->idle_hit) {
                snprintf(c->errbuf, sizeof c->errbuf, "no data for %ld ms", t->idle_timeout_ms);
                return -ETIMEDOUT;
        }
        if (!c->errbuf[0])
                snprintf(c->errbuf, sizeof c->errbuf, "%s", curl_easy_strerror(code));
        return errno_from_curl(code);
}

static void transfer_done(struct transfer *t) {
        free(t->body.data);
        free(t->line.data);
        free(t->reason);
        free(t->content_type);
}

/* Move the response out of the transfer into *ret. */
static int take_response(struct transfer *t, struct http_client_response *ret) {
        if (!t->body.data && buf_append(&t->body, "", 0, HTTP_MAX_BODY) < 0)
                return -ENOMEM;
        if (!t->reason && !(t->reason = strdup("")))
                return -ENOMEM;
        long status = t->status;
        if (status == 0)
                curl_easy_getinfo(t->c->curl, CURLINFO_RESPONSE_CODE, &status);
        *ret = (struct http_client_response){ .status = status, .reason = t->reason,
                                              .content_type = t->content_type, .body = t->body.data,
                                              .body_len = t->body.len, .retry_after_ms = t->retry_after_ms };
        t->reason = t->content_type = t->body.data = NULL;
        return 0;
}

/* Time this thread, or task (fiber.h), spent in requests (not streams), for the callers' latency accounting. */
static _Thread_local int64_t thread_wait_us;

static int64_t *wait_counter(void) {
        struct fiber *f = fiber_self();
        return f ? fiber_wait_us(f) : &thread_wait_us;
}

int64_t http_client_thread_wait_us(void) {
        return *wait_counter();
}

void http_client_thread_wait_note(int64_t us) {
        if (us > 0)
                *wait_counter() += us;
}

/* In a task, other tasks run until the answer is in; the time until then is the request's, the time until the
 * task runs again is the task's own. */
static int perform(struct transfer *t, struct http_client_response *ret) {
        int64_t t0 = monotime_us(), done_us;
        pool_enter(t->c->pool);
        CURLcode code = fiber_perform_cancelable(t->c->curl, t->c->cancel, &done_us);
        pool_leave(t->c->pool);
        if (code == CURLE_ABORTED_BY_CALLBACK && t->c->cancel && atomic_load(t->c->cancel))
                t->canceled = true; /* ended by the scheduler, not by on_progress */
        *wait_counter() += done_us - t0;
        int r = transfer_result(t, code);
        if (r == 0)
                r = take_response(t, ret);
        return r;
}

int http_client_request(struct http_client *c, const char *method, const char *url, const char *const *headers,
                        const void *body, size_t body_len, struct http_client_response *ret_resp) {
        struct transfer t = { .c = c, .retry_after_ms = -1 };
        struct curl_slist *list = build_headers(c, headers);
        if (!list)
                return -ENOMEM;
        set_common(c, &t, url, list, c->timeout_ms);
        set_method(c->curl, method, body, body_len);
        int r = perform(&t, ret_resp);
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(list);
        transfer_done(&t);
        return r;
}

static curl_mime *build_mime(CURL *h, const struct http_client_part *parts, size_t n) {
        curl_mime *mime = curl_mime_init(h);
        for (size_t i = 0; mime && i < n; i++) {
                curl_mimepart *p = curl_mime_addpart(mime);
                bool ok = p && curl_mime_name(p, parts[i].name) == CURLE_OK &&
                          curl_mime_data(p, parts[i].data, parts[i].len) == CURLE_OK &&
                          (!parts[i].filename || curl_mime_filename(p, parts[i].filename) == CURLE_OK) &&
                          (!parts[i].content_type || curl_mime_type(p, parts[i].content_type) == CURLE_OK);
                if (!ok) {
                        curl_mime_free(mime);
                        return NULL;
                }
        }
        return mime;
}

int http_client_request_multipart(struct http_client *c, const char *url, const char *const *headers,
                                  const struct http_client_part *parts, size_t n_parts,
                                  struct http_client_response *ret_resp) {
        struct transfer t = { .c = c, .retry_after_ms = -1 };
        struct curl_slist *list = build_headers(c, headers);
        if (!list)
                return -ENOMEM;
        set_common(c, &t, url, list, c->timeout_ms);
        curl_mime *mime = build_mime(c->curl, parts, n_parts);
        int r = -ENOMEM;
        if (mime) {
                curl_easy_setopt(c->curl, CURLOPT_MIMEPOST, mime);
                r = perform(&t, ret_resp);
                curl_easy_setopt(c->curl, CURLOPT_MIMEPOST, NULL);
        }
        curl_mime_free(mime);
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(list);
        transfer_done(&t);
        return r;
}

/* A stream that had started (2xx headers seen) and then stopped on its own is a normal end. */
static int stream_result(struct transfer *t, CURLcode code, struct http_client_response *ret) {
        bool started = is_2xx(t->status) && !t->fn_error && !t->canceled && !t->too_big;
        int end = HTTP_STREAM_EOF;
        if (code != CURLE_OK && started && t->idle_hit) {
                snprintf(t->c->errbuf, sizeof t->c->errbuf, "no data for %ld ms", t->idle_timeout_ms);
                end = HTTP_STREAM_IDLE;
        }
        else if (code != CURLE_OK && started)
                end = HTTP_STREAM_BROKEN;
        int r = started ? 0 : transfer_result(t, code);
        if (r == 0)
                r = take_response(t, ret);
        if (r == 0)
                ret->stream_end = end;
        return r;
}

int http_client_stream(struct http_client *c, const char *url, const char *const *headers, long idle_timeout_ms,
                       http_client_line_fn fn, void *userdata, struct http_client_response *ret_resp) {
        struct transfer t = { .c = c, .retry_after_ms = -1, .want_lines = true, .fn = fn, .userdata = userdata,
                              .idle_timeout_ms = idle_timeout_ms };
        struct curl_slist *list = build_headers(c, headers);
        if (!list)
                return -ENOMEM;
        set_common(c, &t, url, list, 0);
        CURLcode code = curl_easy_perform(c->curl);
        int r = stream_result(&t, code, ret_resp);
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(list);
        transfer_done(&t);
        return r;
}

int http_status_errno(long status) {
        if (status >= 200 && status < 300)
                return 0;
        switch (status) {
        case 400:
        case 422:
                return -EINVAL;
        case 401:
                return -EACCES;
        case 403:
                return -EPERM;
        case 404:
                return -ENOENT;
        case 405:
        case 415:
        case 501:
                return -EOPNOTSUPP;
        case 409:
                return -EEXIST;
        case 410:
                return -EIDRM;
        case 429:
                return -EBUSY;
        default:
                return -EIO;
        }
}
