/* array: room for one more element in a malloc'd array that grows by doubling. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "array.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int array_grow(void *items, size_t *cap, size_t n, size_t elem_size, size_t first_cap) {
        if (n < *cap)
                return 0;
        size_t want = first_cap ? first_cap : 8;
        if (*cap)
                want = 2 * *cap;
        if (want > SIZE_MAX / elem_size)
                return -ENOMEM;
        void *old;
        memcpy(&old, items, sizeof old);
        void *grown = realloc(old, want * elem_size);
        if (!grown)
                return -ENOMEM;
        memcpy(items, &grown, sizeof grown);
        *cap = want;
        return 0;
}
