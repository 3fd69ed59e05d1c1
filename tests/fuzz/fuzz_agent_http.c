/* fuzz_agent_http: the agent's whole HTTP request handling, bytes on a socket to its real server (libmicrohttpd,
 * authentication, routing, every route's handler), in-process on a loopback port; the seeds hold the token. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "fuzz.h"
#include "fuzz_agent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_agent_setup();
        fuzz_agent_exchange(data, size);
        fuzz_agent_reset();
        return 0;
}
