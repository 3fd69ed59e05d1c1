/* array: room for one more element in a malloc'd array that grows by doubling. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>

/* Make room for element n of *items (elem_size bytes each, *cap allocated; the first allocation holds first_cap):
 * 0, or -ENOMEM with *items and *cap untouched. items is the address of the array pointer (T **). */
int array_grow(void *items, size_t *cap, size_t n, size_t elem_size, size_t first_cap);

/* array_grow for a typed array pointer: ARRAY_GROW(&s->items, &s->cap, s->n, 8). */
#define ARRAY_GROW(pitems, pcap, n, first) array_grow((pitems), (pcap), (n), sizeof **(pitems), (first))
