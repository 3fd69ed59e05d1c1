/* rng: the one fast random source for jitter, spreads and names (xorshift64, seeded from the kernel). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "rng.h"

#include <sys/random.h>

#include "monotime.h"

/* A non-zero stand-in for a zero seed: the golden ratio's 64-bit fraction, as splitmix64 uses. */
#define RNG_NONZERO 0x9e3779b97f4a7c15ULL

void rng_init(struct rng *r, uint64_t seed) {
        if (seed == 0 && getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
                seed = (uint64_t)monotime_ms() ^ (uint64_t)(uintptr_t)r ^ RNG_NONZERO;
        r->state = seed ? seed : RNG_NONZERO;
}

uint64_t rng_next(struct rng *r) {
        uint64_t x = r->state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r->state = x;
        return x;
}

uint64_t rng_below(struct rng *r, uint64_t n) {
        return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}
