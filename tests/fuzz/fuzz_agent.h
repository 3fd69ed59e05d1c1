/* fuzz_agent: a real agent (the eas-tioga reference topology, no VMs, nothing persisted) behind its real HTTP
 * server on a loopback port, and a client that sends raw bytes to it and reads the answer, all on one thread:
 * what fuzz_agent_http and fuzz_agent_body drive. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define FUZZ_AGENT_TOKEN "fuzz-token-0123456789abcdef"

/* Start the agent and its server once (abort on failure). */
void fuzz_agent_setup(void);
/* Send len bytes on a new connection, half-close it, and serve until the server closes it or a deadline passes.
 * Returns the number of answer bytes read (the answer is dropped). */
size_t fuzz_agent_exchange(const void *request, size_t len);
/* Forget every reservation (the next input starts from the same state). */
void fuzz_agent_reset(void);
/* The id of owner's held reservation ("" when there is none). */
const char *fuzz_agent_held(const char *owner);
