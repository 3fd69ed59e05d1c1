/* backoff: exponential backoff with jitter for retries (API calls, watches, launch attempts). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "backoff.h"

#include <sys/random.h>
#include <time.h>

#define BACKOFF_MAX_SHIFT 30

long backoff_delay_ms(unsigned attempt, long base_ms, long max_ms, uint32_t random) {
        if (base_ms <= 0 || max_ms <= 0)
                return 0;
        unsigned shift = attempt > BACKOFF_MAX_SHIFT ? BACKOFF_MAX_SHIFT : attempt;
        long d = base_ms;
        for (unsigned i = 0; i < shift && d < max_ms; i++)
                d *= 2;
        if (d > max_ms)
                d = max_ms;
        long half = d / 2;
        return (d - half) + (long)(random % (uint32_t)(half + 1));
}

long backoff_honour_retry_after(long delay_ms, long retry_after_ms) {
        if (retry_after_ms > BACKOFF_RETRY_AFTER_MAX_MS)
                retry_after_ms = BACKOFF_RETRY_AFTER_MAX_MS;
        return retry_after_ms > delay_ms ? retry_after_ms : delay_ms;
}

static uint64_t xorshift64(uint64_t *s) {
        uint64_t x = *s;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *s = x;
        return x;
}

void backoff_init(struct backoff *b, long base_ms, long max_ms, uint64_t seed) {
        if (seed == 0 && getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
                seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)b;
        *b = (struct backoff){ .base_ms = base_ms, .max_ms = max_ms, .rng = seed ? seed : 0x9e3779b97f4a7c15ULL };
}

long backoff_next_ms(struct backoff *b) {
        long d = backoff_delay_ms(b->attempt, b->base_ms, b->max_ms, (uint32_t)(xorshift64(&b->rng) >> 32));
        if (b->attempt < BACKOFF_MAX_SHIFT)
                b->attempt++;
        return d;
}

void backoff_reset(struct backoff *b) {
        b->attempt = 0;
}
