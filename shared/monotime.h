/* monotime: CLOCK_MONOTONIC readings in milliseconds and microseconds, for timeouts and durations. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

int64_t monotime_ms(void);
int64_t monotime_us(void);
