/* fuzz_stub: the loopback answering server of the client targets (see fuzz_stub.h). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "fuzz_stub.h"

#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "http_server.h"

#define MAX_ANSWERS 8

struct answer {
        char *match;
        unsigned status;
        char *body;
        size_t len;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct answer answers[MAX_ANSWERS];
static size_t n_answers;
static struct http_server *server;
static char base_url[64];

/* match: a part of the path, or "key=" for a query argument that is set. */
static bool matches(const struct answer *a, const struct http_request *req) {
        if (!a->match)
                return true;
        if (strstr(req->path, a->match))
                return true;
        size_t n = strlen(a->match);
        if (n < 2 || n > 64 || a->match[n - 1] != '=')
                return false;
        char key[64];
        memcpy(key, a->match, n - 1);
        key[n - 1] = '\0';
        const char *arg = MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, key);
        return arg && *arg;
}

static void handle(void *userdata, const struct http_request *req, struct http_response *resp) {
        (void)userdata;
        pthread_mutex_lock(&lock);
        const struct answer *a = NULL;
        for (size_t i = 0; i < n_answers; i++)
                if (matches(&answers[i], req))
                        a = &answers[i];
        char *body = malloc(a ? a->len + 1 : 1);
        if (!body)
                abort();
        if (a)
                memcpy(body, a->body, a->len);
        body[a ? a->len : 0] = '\0';
        http_response_take(resp, a ? a->status : 404, "application/json", body);
        resp->body_len = a ? a->len : 0;
        pthread_mutex_unlock(&lock);
}

static void *serve(void *arg) {
        (void)arg;
        for (;;) {
                struct pollfd p = { .fd = http_server_fd(server), .events = POLLIN };
                poll(&p, 1, 50);
                http_server_run(server);
        }
        return NULL;
}

const char *fuzz_stub_start(void) {
        if (server)
                return base_url;
        fuzz_quiet();
        char err[512] = "";
        struct http_server_options o = {
                .bind_address = "127.0.0.1",
                .insecure_http = true,
                .max_body_bytes = 1 << 20,
                .handler = handle,
        };
        pthread_t t;
        if (http_server_start(&o, &server, err, sizeof err) < 0 || pthread_create(&t, NULL, serve, NULL) != 0) {
                fprintf(stderr, "fuzz_stub: %s\n", err);
                abort();
        }
        pthread_detach(t);
        snprintf(base_url, sizeof base_url, "http://127.0.0.1:%u", http_server_port(server));
        return base_url;
}

void fuzz_stub_answer(const char *match, unsigned status, const void *body, size_t len) {
        pthread_mutex_lock(&lock);
        if (n_answers < MAX_ANSWERS) {
                struct answer *a = &answers[n_answers++];
                a->match = match ? strdup(match) : NULL;
                a->status = status;
                a->body = malloc(len + 1);
                if (!a->body)
                        abort();
                memcpy(a->body, body, len);
                a->len = len;
        }
        pthread_mutex_unlock(&lock);
}

void fuzz_stub_clear(void) {
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n_answers; i++) {
                free(answers[i].match);
                free(answers[i].body);
        }
        n_answers = 0;
        pthread_mutex_unlock(&lock);
}
