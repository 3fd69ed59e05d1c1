/* fuzz_agent_body: the JSON bodies of the agent's mutating routes (offers, reservation create, bind), sent as
 * well-formed authenticated requests to the in-process agent: the input's first byte picks the route, the rest is
 * the body. Each input starts with no reservations; a bind goes to a reservation made just before it. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "fuzz.h"
#include "fuzz_agent.h"

static const char *const reserve_body = "{\"vcpus\": 2, \"memory_bytes\": 1073741824, \"owner\": \"fuzz\"}";

static void post(const char *path, const uint8_t *body, size_t len) {
        char head[512];
        int n = snprintf(head, sizeof head,
                         "POST %s HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer " FUZZ_AGENT_TOKEN "\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                         path, len);
        char *req = malloc((size_t)n + len);
        if (!req)
                abort();
        memcpy(req, head, (size_t)n);
        memcpy(req + n, body, len);
        fuzz_agent_exchange(req, (size_t)n + len);
        free(req);
}

static void bind_held(const uint8_t *body, size_t len) {
        char path[128];
        snprintf(path, sizeof path, "/v1/reservations/%s/bind", fuzz_agent_held("fuzz"));
        post(path, body, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_agent_setup();
        if (size == 0)
                return 0;
        switch (data[0] % 3) {
        case 0:
                post("/v1/offers", data + 1, size - 1);
                break;
        case 1:
                post("/v1/reservations", data + 1, size - 1);
                break;
        default:
                post("/v1/reservations", (const uint8_t *)reserve_body, strlen(reserve_body));
                bind_held(data + 1, size - 1);
                break;
        }
        fuzz_agent_reset();
        return 0;
}
