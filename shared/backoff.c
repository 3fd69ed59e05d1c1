/* backoff: exponential backoff with jitter for retries (API calls, watches, launch attempts). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "backoff.h"

#include <limits.h>

#define BACKOFF_MAX_SHIFT 30

long backoff_ceiling_ms(unsigned attempt, long base_ms, long max_ms) {
        long d = base_ms;
        for (unsigned i = 0; i < attempt && d > 0 && d < max_ms && d <= LONG_MAX / 2; i++)
                d *= 2;
        return d > max_ms ? max_ms : d;
}

long backoff_delay_ms(unsigned attempt, long base_ms, long max_ms, uint32_t random) {
        if (base_ms <= 0 || max_ms <= 0)
                return 0;
        long d = backoff_ceiling_ms(attempt, base_ms, max_ms);
        long half = d / 2;
        return (d - half) + (long)(random % (uint32_t)(half + 1));
}

long backoff_honour_retry_after(long delay_ms, long retry_after_ms) {
        if (retry_after_ms > BACKOFF_RETRY_AFTER_MAX_MS)
                retry_after_ms = BACKOFF_RETRY_AFTER_MAX_MS;
        return retry_after_ms > delay_ms ? retry_after_ms : delay_ms;
}

void backoff_init(struct backoff *b, long base_ms, long max_ms, uint64_t seed) {
        *b = (struct backoff){ .base_ms = base_ms, .max_ms = max_ms };
        rng_init(&b->rng, seed);
}

long backoff_next_ms(struct backoff *b) {
        long d = backoff_delay_ms(b->attempt, b->base_ms, b->max_ms, (uint32_t)(rng_next(&b->rng) >> 32));
        if (b->attempt < BACKOFF_MAX_SHIFT)
                b->attempt++;
        return d;
}

void backoff_reset(struct backoff *b) {
        b->attempt = 0;
}
