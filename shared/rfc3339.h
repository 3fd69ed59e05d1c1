/* rfc3339: RFC 3339 UTC times ("2026-07-01T12:00:00Z", as Kubernetes writes them) to and from ms since the epoch. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* "2026-07-01T12:00:00Z" of a time in ms since the epoch. buf needs 32 bytes. Returns buf. */
char *rfc3339_format(int64_t ms, char *buf, size_t len);
/* The same with milliseconds: "2026-07-01T12:00:00.250Z". */
char *rfc3339_format_ms(int64_t ms, char *buf, size_t len);
/* Parse an RFC 3339 UTC time ("...Z", fraction allowed). 0 or -EINVAL; *ret_ms is written only on success. */
int rfc3339_parse(const char *s, int64_t *ret_ms);
/* The wall clock (CLOCK_REALTIME) in ms since the epoch: the times the functions above take and give. */
int64_t rfc3339_now_ms(void);
