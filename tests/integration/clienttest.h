/* clienttest: helpers for the C client tests that run against the simulator (endpoints, admin knobs). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdint.h>

/* The simulator's endpoints.json, from $PVESCALE_TEST_ENDPOINTS; NULL when unset or unreadable. */
json_t *ct_endpoints(void);
/* A string at a dotted path ("pve.r1.url"), or NULL. Borrowed. */
const char *ct_string(const json_t *ep, const char *dotted);
/* A request to the simulator's admin endpoint (plain HTTP); returns the HTTP status or a negative errno. */
int ct_admin(const json_t *ep, const char *method, const char *path, const char *json_body);
/* Set one knob: value is JSON text ("0.5", "[\"vm-a\"]"). Returns the HTTP status. */
int ct_knob(const json_t *ep, const char *name, const char *json_value);
int64_t ct_now_ms(void);
void ct_sleep_ms(long ms);
