/* backoff: exponential backoff with jitter for retries (API calls, watches, launch attempts). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

#include "rng.h"

/* The longest wait a server's Retry-After can impose. */
#define BACKOFF_RETRY_AFTER_MAX_MS (10L * 60 * 1000)

/* The un-jittered delay before retry number attempt (0-based): min(max_ms, base_ms * 2^attempt), without
 * overflow for any attempt; max_ms when base_ms >= max_ms, base_ms when it is not positive. Pure. For waits that
 * must be exact (a launch pause written into a status, a task poll interval) and the ceiling of backoff_delay_ms. */
long backoff_ceiling_ms(unsigned attempt, long base_ms, long max_ms);

/* Delay before retry number attempt (0-based): d = backoff_ceiling_ms(attempt, base_ms, max_ms), then "equal
 * jitter": d/2 + random % (d/2 + 1), so the result lies in [d/2, d]; 0 when base_ms or max_ms is not positive.
 * Pure; random is any 32-bit random number. */
long backoff_delay_ms(unsigned attempt, long base_ms, long max_ms, uint32_t random);

/* The wait when the server also sent Retry-After (retry_after_ms < 0 = none): the larger of the two, the
 * Retry-After part capped at BACKOFF_RETRY_AFTER_MAX_MS. Pure. */
long backoff_honour_retry_after(long delay_ms, long retry_after_ms);

/* A retry sequence: delays grow per failure and start over after backoff_reset. */
struct backoff {
        unsigned attempt;
        long base_ms, max_ms;
        struct rng rng; /* the jitter's draws */
};

/* seed 0 picks one from the kernel's random source (see rng_init). */
void backoff_init(struct backoff *b, long base_ms, long max_ms, uint64_t seed);
/* The delay for the next retry; counts the attempt. */
long backoff_next_ms(struct backoff *b);
void backoff_reset(struct backoff *b);
