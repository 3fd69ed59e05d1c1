/* ledger_internal: what the ledger's state file and journal (ledger_state.c, ledger_store.c) share with it. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "ledger.h"

#define LEDGER_STATE_VERSION 1
#define LEDGER_STATE_MAX_BYTES (64u << 20)

void reservation_free(struct reservation *r);
/* Take r into l (at the end, creation order). 0 or -ENOMEM (r is then still the caller's). */
int ledger_append(struct ledger *l, struct reservation *r);

/* One reservation as the state file and the journal write it (NULL: out of memory). */
json_t *ledger_state_entry(const struct reservation *r);
/* Parse one such entry, its placement checked against t. 0, -EINVAL (why says what), or -ENOMEM. */
int ledger_parse_entry(const struct topology *t, const json_t *e, struct reservation **ret, char *why, size_t len);
