/* quantity: exact parsing and formatting of Kubernetes resource quantities ("100m", "4Gi", "1.5", "2e3"). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The unit a caller wants a quantity in, as a power of ten of the base unit. */
enum quantity_scale {
        QUANTITY_UNITS = 0, /* bytes, pods, whole cores */
        QUANTITY_MILLI = 3, /* millicores */
};

/* Parse s, the Kubernetes quantity grammar: [+-] digits [. digits] suffix, where suffix is one of
 * n u m "" k M G T P E (decimal), Ki Mi Gi Ti Pi Ei (binary) or e|E [+-] digits (decimal exponent).
 * *ret_value = the quantity times 10^scale, rounded up (away from zero for negative quantities), as
 * Kubernetes' ScaledValue does. Exact for up to 19 significant digits; further non-zero digits only
 * round up. Returns 0, -EINVAL for a malformed string, -ERANGE when the result does not fit int64. */
int quantity_parse(const char *s, enum quantity_scale scale, int64_t *ret_value);

/* Shorthand: whole units (bytes, counts). */
int quantity_parse_value(const char *s, int64_t *ret_value);

/* Canonical text of a value: cpu millicores as "2" or "1500m"; bytes with the largest binary suffix that
 * divides them exactly ("4Gi", "1536Mi", "100"). Writes at most len bytes (always NUL-terminated);
 * returns buf. */
char *quantity_format_milli(int64_t milli, char *buf, size_t len);
char *quantity_format_bytes(int64_t bytes, char *buf, size_t len);

/* Human text of bytes for messages: "4Gi", or with one decimal, "1.5Gi", rounded up. Returns buf. */
char *quantity_format_bytes_human(int64_t bytes, char *buf, size_t len);
