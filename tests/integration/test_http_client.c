/* Integration test of shared/http_client (and the kube client's retry rules) against a scripted HTTP/1.1 stub
 * (http_stub.py): reason phrases, keep-alive, headers, bodies per method, Retry-After, line streams split across
 * chunks, idle streams, timeouts, cancellation, multipart (and the requests after one). Run by test_coordinator_clients.py. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "clienttest.h"
#include "http_client.h"
#include "kube.h"

static const char *stub;

static int setup(void **state) {
        (void)state;
        stub = getenv("PVESCALE_TEST_STUB_URL");
        return stub ? 0 : -1;
}

static char *url(const char *path) {
        static char buf[4][512];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof buf[i], "%s%s", stub, path);
        return buf[i];
}

static struct http_client *client(long timeout_ms) {
        struct http_client_options o = { .timeout_ms = timeout_ms };
        struct http_client *c;
        assert_int_equal(http_client_new(&o, &c), 0);
        return c;
}

/* GET/POST/... and parse the JSON answer. */
static json_t *call(struct http_client *c, const char *method, const char *path, const char *const *headers,
                    const char *body, long *ret_status) {
        struct http_client_response r;
        assert_int_equal(http_client_request(c, method, url(path), headers, body, body ? strlen(body) : 0, &r), 0);
        json_t *doc = json_loadb(r.body, r.body_len, 0, NULL);
        if (ret_status)
                *ret_status = r.status;
        http_client_response_done(&r);
        assert_non_null(doc);
        return doc;
}

static const char *s(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static void test_reason_phrase(void **state) {
        (void)state;
        struct http_client *c = client(0);
        struct http_client_response r;
        assert_int_equal(http_client_request(c, "GET", url("/reason"), NULL, NULL, 0, &r), 0);
        assert_int_equal(r.status, 500);
        assert_string_equal(r.reason, "only root can set 'affinity' config");
        assert_string_equal(r.content_type, "application/json");
        assert_non_null(strstr(r.body, "only root"));
        assert_int_equal(r.body_len, strlen(r.body));
        assert_int_equal(r.retry_after_ms, -1);
        http_client_response_done(&r);
        http_client_free(c);
}

static void test_keep_alive(void **state) {
        (void)state;
        struct http_client *a = client(0), *b = client(0);
        json_t *r1 = call(a, "GET", "/echo", NULL, NULL, NULL), *r2 = call(a, "GET", "/echo", NULL, NULL, NULL);
        json_t *r3 = call(b, "GET", "/echo", NULL, NULL, NULL);
        json_t *r4 = call(a, "POST", "/echo", NULL, "x", NULL);
        long port = (long)json_integer_value(json_object_get(r1, "port"));
        assert_int_equal(json_integer_value(json_object_get(r2, "port")), port); /* one connection, reused */
        assert_int_equal(json_integer_value(json_object_get(r4, "port")), port);
        assert_int_not_equal(json_integer_value(json_object_get(r3, "port")), port);
        json_decref(r1);
        json_decref(r2);
        json_decref(r3);
        json_decref(r4);
        http_client_free(a);
        http_client_free(b);
}

static struct http_client *pooled(struct http_pool *pool) {
        struct http_client_options o = { .pool = pool };
        struct http_client *c;
        assert_int_equal(http_client_new(&o, &c), 0);
        return c;
}

struct inflight_call {
        struct http_client *c;
        long most, port;
        int64_t waited_us;
};

static void *inflight_main(void *arg) {
        struct inflight_call *ic = arg;
        int64_t w0 = http_client_thread_wait_us();
        json_t *r = call(ic->c, "GET", "/inflight", NULL, NULL, NULL);
        ic->waited_us = http_client_thread_wait_us() - w0;
        ic->most = (long)json_integer_value(json_object_get(r, "most"));
        ic->port = (long)json_integer_value(json_object_get(r, "port"));
        json_decref(r);
        return NULL;
}

/* Three clients on three threads at once; what the server saw. */
static void run_three(struct http_pool *pool, struct inflight_call ic[3]) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++) {
                ic[i] = (struct inflight_call){ .c = pooled(pool) };
                assert_int_equal(pthread_create(&t[i], NULL, inflight_main, &ic[i]), 0);
        }
        for (int i = 0; i < 3; i++) {
                pthread_join(t[i], NULL);
                http_client_free(ic[i].c);
        }
}

static void test_pool(void **state) {
        (void)state;
        struct http_pool *pool;
        assert_int_equal(http_pool_new(1, &pool), 0);
        /* One client's connection serves another client of the pool. */
        struct http_client *a = pooled(pool), *b = pooled(pool);
        json_t *r1 = call(a, "GET", "/echo", NULL, NULL, NULL), *r2 = call(b, "GET", "/echo", NULL, NULL, NULL);
        assert_int_equal(json_integer_value(json_object_get(r2, "port")), json_integer_value(json_object_get(r1, "port")));
        json_decref(r1);
        json_decref(r2);
        http_client_free(a);
        http_client_free(b);
        /* At most one request of the pool at a time: the server never sees two, and the later ones wait their turn
         * inside the request (two of them at least one 200 ms answer each), all on the one connection. */
        struct inflight_call ic[3];
        run_three(pool, ic);
        int64_t longest = 0;
        for (int i = 0; i < 3; i++) {
                assert_int_equal(ic[i].most, 1);
                assert_int_equal(ic[i].port, ic[0].port);
                longest = ic[i].waited_us > longest ? ic[i].waited_us : longest;
        }
        assert_true(longest >= 3 * 190000);
        http_pool_free(pool);
        /* Without a limit they run at once, each on a connection of its own. */
        assert_int_equal(http_pool_new(0, &pool), 0);
        run_three(pool, ic);
        assert_true(ic[0].most >= 2 || ic[1].most >= 2 || ic[2].most >= 2);
        assert_true(ic[0].port != ic[1].port || ic[1].port != ic[2].port);
        http_pool_free(pool);
}

static void test_headers_and_bodies(void **state) {
        (void)state;
        static const char *const extra[] = { "X-Extra: 1", NULL };
        struct http_client_options o = { .bearer_token = "tok", .headers = extra };
        struct http_client *c;
        assert_int_equal(http_client_new(&o, &c), 0);
        static const char *const form[] = { "Content-Type: application/x-www-form-urlencoded", NULL };
        json_t *r = call(c, "POST", "/echo", form, "a=1&b=x%20y", NULL);
        assert_string_equal(s(r, "method"), "POST");
        assert_string_equal(s(r, "body"), "a=1&b=x%20y");
        assert_string_equal(s(r, "content_type"), "application/x-www-form-urlencoded");
        assert_string_equal(s(r, "authorization"), "Bearer tok");
        assert_string_equal(s(r, "x_extra"), "1");
        json_decref(r);
        r = call(c, "DELETE", "/echo?purge=1", NULL, NULL, NULL);
        assert_string_equal(s(r, "method"), "DELETE");
        assert_null(s(r, "content_length")); /* no body at all on DELETE */
        assert_string_equal(s(json_object_get(r, "query"), "purge"), "1");
        json_decref(r);
        r = call(c, "GET", "/echo", NULL, NULL, NULL);
        assert_null(s(r, "content_length"));
        json_decref(r);
        r = call(c, "POST", "/echo", NULL, NULL, NULL);
        assert_string_equal(s(r, "content_length"), "0");
        json_decref(r);
        r = call(c, "PATCH", "/echo", NULL, "{\"k\":1}", NULL);
        assert_string_equal(s(r, "method"), "PATCH");
        assert_string_equal(s(r, "body"), "{\"k\":1}");
        json_decref(r);
        assert_int_equal(http_client_set_bearer(c, "rotated"), 0);
        r = call(c, "PUT", "/echo", NULL, "", NULL);
        assert_string_equal(s(r, "authorization"), "Bearer rotated");
        assert_string_equal(s(r, "content_length"), "0");
        json_decref(r);
        assert_int_equal(http_client_set_bearer(c, NULL), 0);
        r = call(c, "GET", "/echo", NULL, NULL, NULL);
        assert_null(s(r, "authorization"));
        json_decref(r);
        http_client_free(c);
}

static void test_retry_after(void **state) {
        (void)state;
        struct http_client *c = client(0);
        struct http_client_response r;
        assert_int_equal(http_client_request(c, "GET", url("/retry-after?k=plain"), NULL, NULL, 0, &r), 0);
        assert_int_equal(r.status, 429);
        assert_int_equal(r.retry_after_ms, 1000);
        http_client_response_done(&r);
        assert_int_equal(http_client_request(c, "GET", url("/retry-date?k=plain"), NULL, NULL, 0, &r), 0);
        assert_int_equal(r.status, 503);
        assert_true(r.retry_after_ms >= 0 && r.retry_after_ms <= 3000);
        http_client_response_done(&r);
        assert_int_equal(http_client_request(c, "GET", url("/retry-date?k=plain"), NULL, NULL, 0, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.retry_after_ms, -1);
        http_client_response_done(&r);
        http_client_free(c);
}

/* ---- streams ---- */

struct lines {
        char text[16][64];
        size_t n;
        int fail_at; /* 1-based line number to fail on, 0 = never */
};

static int collect(const char *line, size_t len, void *userdata) {
        struct lines *l = userdata;
        assert_int_equal(strlen(line), len);
        if (l->n < 16)
                snprintf(l->text[l->n++], 64, "%s", line);
        return l->fail_at && (int)l->n == l->fail_at ? -ENOTRECOVERABLE : 0;
}

static void test_stream_lines(void **state) {
        (void)state;
        struct http_client *c = client(500); /* the overall timeout does not apply to streams */
        struct lines l = { 0 };
        struct http_client_response r;
        assert_int_equal(http_client_stream(c, url("/stream"), NULL, 5000, collect, &l, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.stream_end, HTTP_STREAM_EOF);
        assert_int_equal(r.body_len, 0);
        assert_int_equal(l.n, 5); /* split lines joined, \r and empty lines dropped, the unfinished tail dropped */
        static const char *const want[] = { "{\"a\":1}", "{\"b\":2}", "{\"c\":3}", "{\"d\":4}", "{\"e\":5}" };
        for (size_t i = 0; i < 5; i++)
                assert_string_equal(l.text[i], want[i]);
        http_client_response_done(&r);
        struct lines stop = { .fail_at = 2 };
        assert_int_equal(http_client_stream(c, url("/stream"), NULL, 5000, collect, &stop, &r), -ENOTRECOVERABLE);
        assert_int_equal(stop.n, 2);
        http_client_free(c);
}

static void test_stream_idle_and_errors(void **state) {
        (void)state;
        struct http_client *c = client(0);
        struct lines l = { 0 };
        struct http_client_response r;
        assert_int_equal(http_client_stream(c, url("/idle?hold=4"), NULL, 1000, collect, &l, &r), 0);
        assert_int_equal(r.stream_end, HTTP_STREAM_IDLE);
        assert_int_equal(l.n, 1);
        assert_non_null(strstr(http_client_error(c), "no data for 1000 ms"));
        http_client_response_done(&r);
        l.n = 0;
        assert_int_equal(http_client_stream(c, url("/gone"), NULL, 1000, collect, &l, &r), 0);
        assert_int_equal(r.status, 410);
        assert_int_equal(l.n, 0); /* an error answer is a body, not lines */
        assert_non_null(strstr(r.body, "too old resource version"));
        http_client_response_done(&r);
        http_client_free(c);
}

static void test_timeouts_and_refusal(void **state) {
        (void)state;
        struct http_client *c = client(500);
        struct http_client_response r;
        assert_int_equal(http_client_request(c, "GET", url("/slow"), NULL, NULL, 0, &r), -ETIMEDOUT);
        assert_string_not_equal(http_client_error(c), "");
        /* The same client works again afterwards. */
        assert_int_equal(http_client_request(c, "GET", url("/echo"), NULL, NULL, 0, &r), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(http_client_error(c), "");
        http_client_response_done(&r);
        assert_int_equal(http_client_request(c, "GET", "http://127.0.0.1:1/", NULL, NULL, 0, &r), -ECONNREFUSED);
        http_client_free(c);
}

struct canceller {
        atomic_bool *flag;
};

static void *cancel_later(void *arg) {
        struct canceller *k = arg;
        ct_sleep_ms(300);
        atomic_store(k->flag, true);
        return NULL;
}

static void test_cancel(void **state) {
        (void)state;
        struct http_client *c = client(10000);
        atomic_bool flag = false;
        http_client_set_cancel(c, &flag);
        struct canceller k = { &flag };
        pthread_t t;
        struct http_client_response r;
        assert_int_equal(pthread_create(&t, NULL, cancel_later, &k), 0);
        assert_int_equal(http_client_request(c, "GET", url("/slow"), NULL, NULL, 0, &r), -ECANCELED);
        pthread_join(t, NULL);
        struct lines l = { 0 };
        assert_int_equal(http_client_stream(c, url("/idle?hold=2"), NULL, 0, collect, &l, &r), -ECANCELED);
        atomic_store(&flag, false);
        assert_int_equal(http_client_request(c, "GET", url("/echo"), NULL, NULL, 0, &r), 0);
        http_client_response_done(&r);
        http_client_free(c);
}

static void test_multipart(void **state) {
        (void)state;
        struct http_client *c = client(0);
        static char iso[5000];
        memset(iso, 'x', sizeof iso);
        struct http_client_part parts[] = {
                { .name = "content", .data = "iso", .len = 3 },
                { .name = "filename", .filename = "claim-1.iso", .content_type = "application/octet-stream",
                  .data = iso, .len = sizeof iso },
        };
        struct http_client_response r;
        assert_int_equal(http_client_request_multipart(c, url("/upload"), NULL, parts, 2, &r), 0);
        json_t *doc = json_loadb(r.body, r.body_len, 0, NULL);
        http_client_response_done(&r);
        assert_string_equal(s(doc, "content_type"), "multipart/form-data");
        json_t *p = json_object_get(doc, "parts");
        assert_int_equal(json_array_size(p), 2);
        assert_string_equal(s(json_array_get(p, 0), "name"), "content");
        assert_string_equal(s(json_array_get(p, 0), "text"), "iso");
        assert_string_equal(s(json_array_get(p, 1), "name"), "filename");
        assert_string_equal(s(json_array_get(p, 1), "filename"), "claim-1.iso");
        assert_string_equal(s(json_array_get(p, 1), "type"), "application/octet-stream");
        assert_int_equal(json_integer_value(json_object_get(json_array_get(p, 1), "size")), sizeof iso);
        json_decref(doc);
        /* The client keeps its options between requests: nothing of the upload carries over. */
        doc = call(c, "GET", "/echo", NULL, NULL, NULL);
        assert_string_equal(s(doc, "method"), "GET");
        assert_null(s(doc, "content_length"));
        assert_null(s(doc, "content_type"));
        json_decref(doc);
        assert_int_equal(http_client_request_multipart(c, url("/upload"), NULL, parts, 2, &r), 0);
        http_client_response_done(&r);
        doc = call(c, "DELETE", "/echo", NULL, NULL, NULL);
        assert_string_equal(s(doc, "method"), "DELETE");
        assert_null(s(doc, "content_length"));
        json_decref(doc);
        http_client_free(c);
}

static void test_escape(void **state) {
        (void)state;
        char *e = http_client_escape("a b&c=d/\xc3\xa9~-._");
        assert_string_equal(e, "a%20b%26c%3Dd%2F%C3%A9~-._");
        free(e);
        e = http_client_escape("");
        assert_string_equal(e, "");
        free(e);
}

/* ---- the kube client's retry rules, on the stub ---- */

static long stub_count(const char *path) {
        struct http_client *c = client(0);
        json_t *counts = call(c, "GET", "/counts", NULL, NULL, NULL);
        long n = (long)json_integer_value(json_object_get(counts, path));
        json_decref(counts);
        http_client_free(c);
        return n;
}

static void test_kube_retry_rules(void **state) {
        (void)state;
        struct kube_config cfg = { .server = (char *)stub };
        struct kube_client_options o = { .max_retries = 3, .backoff_base_ms = 10, .backoff_max_ms = 20 };
        struct kube_client *k;
        assert_int_equal(kube_client_new(&cfg, &o, &k), 0);
        json_t *out;
        int64_t t0 = ct_now_ms();
        assert_int_equal(kube_request(k, "GET", "/retry-after?k=kube", NULL, NULL, &out), 0);
        assert_true(ct_now_ms() - t0 >= 900); /* waited the 1 s of Retry-After, not the 10 ms backoff */
        assert_int_equal(json_integer_value(json_object_get(out, "attempt")), 2);
        json_decref(out);
        /* A POST is repeated when the server asks for it with Retry-After... */
        assert_int_equal(kube_request(k, "POST", "/retry-date?k=kube", NULL, NULL, &out), 0);
        assert_int_equal(json_integer_value(json_object_get(out, "attempt")), 2);
        json_decref(out);
        /* ...but a 429 without Retry-After (a PodDisruptionBudget refusal) comes back at once. */
        assert_int_equal(kube_request(k, "POST", "/post-busy?k=kube", NULL, NULL, NULL), -EBUSY);
        assert_int_equal(stub_count("/post-busy?k=kube"), 1);
        assert_non_null(strstr(kube_client_error(k), "POST /post-busy: 429 TooManyRequests: budget"));
        assert_int_equal(kube_request(k, "GET", "/post-busy?k=kube-get", NULL, NULL, NULL), -EBUSY);
        assert_int_equal(stub_count("/post-busy?k=kube-get"), 4); /* GET: 1 + max_retries */
        kube_client_free(k);
}

/* 5xx without Retry-After: a read is repeated (up to max_retries), a call that may have been applied is not. */
static void test_kube_retries_on_5xx(void **state) {
        (void)state;
        struct kube_config cfg = { .server = (char *)stub };
        struct kube_client_options o = { .max_retries = 4, .backoff_base_ms = 10, .backoff_max_ms = 20 };
        struct kube_client_options no = { .max_retries = KUBE_NO_RETRY };
        struct kube_client *k, *once;
        assert_int_equal(kube_client_new(&cfg, &o, &k), 0);
        assert_int_equal(kube_client_new(&cfg, &no, &once), 0);
        json_t *out;
        assert_int_equal(kube_request(k, "GET", "/fail-first?n=2&k=get", NULL, NULL, &out), 0); /* 500, 500, 200 */
        assert_int_equal(json_integer_value(json_object_get(out, "attempt")), 3);
        json_decref(out);
        assert_int_equal(kube_request(once, "GET", "/fail-first?n=1&k=once", NULL, NULL, NULL), -EIO);
        assert_non_null(strstr(kube_client_error(once), ": 500 "));
        assert_non_null(strstr(kube_client_error(once), "injected fault 1"));
        assert_int_equal(stub_count("/fail-first?n=1&k=once"), 1);
        /* A mutating call is not repeated on a 500 without Retry-After: it may have been applied. */
        json_t *p = json_pack("{s:{s:s}}", "data", "z", "1");
        assert_int_equal(kube_request(k, "PATCH", "/fail-first?n=1&k=patch", "application/merge-patch+json", p, NULL),
                         -EIO);
        assert_int_equal(stub_count("/fail-first?n=1&k=patch"), 1);
        assert_int_equal(kube_request(k, "PATCH", "/fail-first?n=1&k=patch", "application/merge-patch+json", p, NULL),
                         0);
        json_decref(p);
        kube_client_free(once);
        kube_client_free(k);
}

/* A 2xx answer is parsed only for a caller that takes it: one that is not JSON fails such a call, and is just a
 * success for a caller that wanted none (an Event, a delete). */
static void test_kube_answer_parsed_only_when_wanted(void **state) {
        (void)state;
        struct kube_config cfg = { .server = (char *)stub };
        struct kube_client_options o = { .max_retries = 0 };
        struct kube_client *k;
        json_t *out = NULL;
        assert_int_equal(kube_client_new(&cfg, &o, &k), 0);
        assert_int_equal(kube_request(k, "POST", "/not-json", NULL, NULL, &out), -EBADMSG);
        assert_null(out);
        assert_non_null(strstr(kube_client_error(k), "POST /not-json: the answer is not JSON"));
        assert_int_equal(kube_request(k, "POST", "/not-json", NULL, NULL, NULL), 0);
        assert_int_equal(kube_request(k, "GET", "/echo", NULL, NULL, &out), 0);
        assert_string_equal(json_string_value(json_object_get(out, "method")), "GET");
        json_decref(out);
        kube_client_free(k);
}

/* The proxy comes from the environment as libcurl reads it (http_proxy for http URLs), read when the client
 * makes its first request; no_proxy names hosts reached directly. The stub answers as the proxy. */
static void test_proxy_from_environment(void **state) {
        (void)state;
        const char *target = "http://pvescale-proxy-test.invalid/echo";
        struct http_client_response r;
        setenv("http_proxy", stub, 1);
        struct http_client *c = client(5000);
        assert_int_equal(http_client_request(c, "GET", target, NULL, NULL, 0, &r), 0);
        assert_int_equal(r.status, 200);
        json_t *doc = json_loadb(r.body, r.body_len, 0, NULL);
        assert_non_null(doc);
        assert_string_equal(s(doc, "target"), target); /* the absolute form a proxy gets */
        json_decref(doc);
        http_client_response_done(&r);
        doc = call(c, "GET", "/echo", NULL, NULL, NULL);
        assert_non_null(strstr(s(doc, "target"), "http://")); /* the stub's own address goes through it too */
        json_decref(doc);
        http_client_free(c);

        setenv("no_proxy", "pvescale-proxy-test.invalid", 1);
        c = client(5000);
        assert_true(http_client_request(c, "GET", target, NULL, NULL, 0, &r) < 0); /* direct: the name is not found */
        doc = call(c, "GET", "/echo", NULL, NULL, NULL);
        assert_non_null(strstr(s(doc, "target"), "http://"));
        json_decref(doc);
        http_client_free(c);
        unsetenv("http_proxy");
        unsetenv("no_proxy");

        c = client(5000);
        doc = call(c, "GET", "/echo", NULL, NULL, NULL);
        assert_string_equal(s(doc, "target"), "/echo"); /* no proxy: the origin form */
        json_decref(doc);
        http_client_free(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_reason_phrase),
                cmocka_unit_test(test_keep_alive),
                cmocka_unit_test(test_pool),
                cmocka_unit_test(test_headers_and_bodies),
                cmocka_unit_test(test_retry_after),
                cmocka_unit_test(test_stream_lines),
                cmocka_unit_test(test_stream_idle_and_errors),
                cmocka_unit_test(test_timeouts_and_refusal),
                cmocka_unit_test(test_cancel),
                cmocka_unit_test(test_multipart),
                cmocka_unit_test(test_escape),
                cmocka_unit_test(test_kube_retry_rules),
                cmocka_unit_test(test_kube_retries_on_5xx),
                cmocka_unit_test(test_kube_answer_parsed_only_when_wanted),
                cmocka_unit_test(test_proxy_from_environment),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
