/* clienttest: helpers for the C client tests that run against the simulator (endpoints, admin knobs). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "clienttest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_client.h"

json_t *ct_endpoints(void) {
        const char *path = getenv("PVESCALE_TEST_ENDPOINTS");
        json_error_t e;
        json_t *ep = path ? json_load_file(path, 0, &e) : NULL;
        if (path && !ep)
                fprintf(stderr, "cannot load %s: %s\n", path, e.text);
        return ep;
}

const char *ct_string(const json_t *ep, const char *dotted) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", dotted);
        const json_t *v = ep;
        char *save;
        for (char *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
                v = json_object_get(v, k);
        return json_string_value(v);
}

int ct_admin(const json_t *ep, const char *method, const char *path, const char *json_body) {
        struct http_client *c;
        struct http_client_response resp;
        char url[512];
        static const char *const headers[] = { "Content-Type: application/json", NULL };
        snprintf(url, sizeof url, "%s%s", ct_string(ep, "admin.url"), path);
        int r = http_client_new(NULL, &c);
        if (r < 0)
                return r;
        r = http_client_request(c, method, url, headers, json_body, json_body ? strlen(json_body) : 0, &resp);
        if (r == 0) {
                r = (int)resp.status;
                http_client_response_done(&resp);
        }
        http_client_free(c);
        return r;
}

int ct_knob(const json_t *ep, const char *name, const char *json_value) {
        char body[512];
        snprintf(body, sizeof body, "{\"%s\": %s}", name, json_value);
        return ct_admin(ep, "POST", "/knobs", body);
}

int64_t ct_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ct_sleep_ms(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
}
