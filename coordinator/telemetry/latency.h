/* latency: per NodeClaim, when its batch's first pending pod was seen and how long the coordinator waited for API
 * answers on its way, so that its VM's start call can be reported as total and own time. Thread-safe. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

struct latency;

/* What a thread, or task (fiber.h), has spent so far not doing its own work: inside API requests (and pauses
 * between polls of running Proxmox tasks, http_client_thread_wait_us), and runnable but waiting for a CPU (the
 * scheduler's run_delay of /proc/thread-self/schedstat, 0 where unavailable; for a task, the time it was ready
 * while other tasks had its thread). Differences of two readings are what a piece of work spent on each. */
struct latency_waits {
        int64_t api_us, cpu_us;
};
void latency_waits_now(struct latency_waits *ret);
void latency_waits_since(const struct latency_waits *start, struct latency_waits *ret);

int latency_new(struct latency **ret);
void latency_free(struct latency *l);

/* A claim was created. origin_ms: CLOCK_MONOTONIC ms when its batch's first pending pod was seen; wait_us: API
 * waits on its way so far (the provisioning round up to its creation). */
void latency_begin(struct latency *l, const char *claim, int64_t origin_ms, const struct latency_waits *w);
/* More waits on the claim's way (a launcher reconcile). Unknown claims are ignored. */
void latency_add_wait(struct latency *l, const char *claim, const struct latency_waits *w);
/* The claim's VM is being started at now_ms (monotonic), extra more waits since the last add: its total time and
 * its waits in ms, and the claim is forgotten. -ENOENT for a claim not begun in this process. */
struct latency_report {
        int64_t total_ms, api_ms, cpu_ms;
        int64_t handoff_own_ms; /* own time when the claim was begun: the round and its writer, before any launch */
};
int latency_finish(struct latency *l, const char *claim, int64_t now_ms, const struct latency_waits *extra,
                   struct latency_report *ret);
