/* monotime: CLOCK_MONOTONIC readings in milliseconds and microseconds, for timeouts and durations. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "monotime.h"

#include <time.h>

int64_t monotime_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t monotime_ms(void) {
        return monotime_us() / 1000;
}
