/* latency: per NodeClaim, when its batch's first pending pod was seen and how long the coordinator waited for API
 * answers on its way, so that its VM's start call can be reported as total and own time. Thread-safe. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

struct latency;

int latency_new(struct latency **ret);
void latency_free(struct latency *l);

/* A claim was created. origin_ms: CLOCK_MONOTONIC ms when its batch's first pending pod was seen; wait_us: API
 * waits on its way so far (the provisioning round up to its creation). */
void latency_begin(struct latency *l, const char *claim, int64_t origin_ms, int64_t wait_us);
/* More API waits on the claim's way (a launcher reconcile). Unknown claims are ignored. */
void latency_add_wait(struct latency *l, const char *claim, int64_t wait_us);
/* The claim's VM is being started at now_ms (monotonic), extra_wait_us more waits since the last add: its total
 * and waiting time in ms, and the claim is forgotten. -ENOENT for a claim not begun in this process. */
int latency_finish(struct latency *l, const char *claim, int64_t now_ms, int64_t extra_wait_us, int64_t *ret_total_ms,
                   int64_t *ret_wait_ms);
/* CLOCK_MONOTONIC in ms, the clock of origin_ms and now_ms. */
int64_t latency_now_ms(void);
