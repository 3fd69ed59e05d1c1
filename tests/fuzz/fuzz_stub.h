/* fuzz_stub: a loopback HTTP server on its own thread that answers every request with the answer the target set
 * (status, body), so that the coordinator's real clients (libcurl, their parsers) read fuzzed answers. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Start once; returns the base URL ("http://127.0.0.1:PORT"). */
const char *fuzz_stub_start(void);
/* What a request whose path and query contain match (NULL = any) gets; the last matching entry wins. The body is
 * copied. Clears nothing: call fuzz_stub_clear() between inputs. */
void fuzz_stub_answer(const char *match, unsigned status, const void *body, size_t len);
void fuzz_stub_clear(void);
