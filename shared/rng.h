/* rng: the one fast random source for jitter, spreads and names (xorshift64, seeded from the kernel). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

/* A xorshift64 generator: cheap, well spread, and NOT for secrets (bootstrap tokens and reservation ids read
 * getrandom(2) directly). Not thread-safe: give each thread its own, or keep it under its owner's lock. */
struct rng {
        uint64_t state; /* never 0 (0 is xorshift's one fixed point) */
};

/* Seed r. seed 0 draws one from getrandom(2) without blocking, falling back to the clock and r's address while
 * the kernel's pool is not ready; any other seed gives a repeatable sequence (tests). */
void rng_init(struct rng *r, uint64_t seed);

/* The next 64 random bits. */
uint64_t rng_next(struct rng *r);

/* A draw in [0, n) (Lemire's multiply-shift: no division, and no visible bias for any n this project uses);
 * 0 when n is 0. */
uint64_t rng_below(struct rng *r, uint64_t n);
