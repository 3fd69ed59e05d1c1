/* fiber: cooperative tasks on one thread. A task's HTTP transfer or sleep yields to the other tasks, and one
 * libcurl multi handle drives every transfer, so one thread keeps hundreds of launches going without a thread,
 * and a thread switch, per request. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fiber_sched;
struct fiber;

typedef void (*fiber_fn)(void *data);

int fiber_sched_new(struct fiber_sched **ret_sched);
/* Every task must have ended. */
void fiber_sched_free(struct fiber_sched *s);
/* A new task running fn(data); it first runs in the next fiber_sched_step. */
int fiber_spawn(struct fiber_sched *s, fiber_fn fn, void *data);
/* Run the ready tasks, then wait at most timeout_ms for a transfer to end, a sleep to be over or a wake, and
 * make those tasks ready. Always on the same thread. Returns how many tasks are alive. */
size_t fiber_sched_step(struct fiber_sched *s, long timeout_ms);
/* Make a fiber_sched_step that waits return now. Any thread. */
void fiber_sched_wakeup(struct fiber_sched *s);

/* The running task, or NULL outside tasks (where the calls below block the thread instead). */
struct fiber *fiber_self(void);
void *fiber_data(const struct fiber *f);
/* Sleep ms: other tasks run meanwhile. */
void fiber_sleep_ms(long ms);
/* curl_easy_perform: other tasks run until the transfer ends. *ret_done_us (monotime_us) is when it ended,
 * which can be before the task runs again. It ends with CURLE_ABORTED_BY_CALLBACK once *cancel (may be NULL) is
 * true, at the next step of the scheduler (a stop wakes it with fiber_sched_wakeup): a transfer waiting on a server
 * that does not answer is looked at by libcurl only when its socket or its timeout is due, seconds later, so its
 * progress callback cannot be what notices the cancel. */
CURLcode fiber_perform_cancelable(CURL *h, const atomic_bool *cancel, int64_t *ret_done_us);
/* Wait for fiber_wake (at once if a wake came since the last park). */
void fiber_park(void);
/* Any thread. */
void fiber_wake(struct fiber *f);
/* The task's counter of time in transfers (µs), kept by its HTTP client. */
int64_t *fiber_wait_us(struct fiber *f);
/* How long the task has been ready to run but waiting for the thread, in µs. */
int64_t fiber_ready_us(const struct fiber *f);
