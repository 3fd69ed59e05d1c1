/* pinning_internal: what the pinning*.c files share (id lists, decimal ids, the vCPU table); not for other modules. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* A growing list of thread or process ids. */
struct pinning__ids {
        int *v;
        size_t n, cap;
};

int pinning__ids_add(struct pinning__ids *l, int id);
bool pinning__has_id(const int *v, size_t n, int id);

/* Decimal digits only, no sign, no leading zero (except "0"), at most max_digits; -EINVAL otherwise. */
int pinning__parse_id(const char *s, size_t len, size_t max_digits);

struct pinning__vcpu_pair {
        int index;
        int tid;
};

/* tids[index] = tid for every pair, 0 for an index no pair names; *ret_n is the highest index + 1.
 * -ENOENT for no pair, -EBADMSG when two pairs name one index, -ENOMEM. */
int pinning__vcpu_table(const struct pinning__vcpu_pair *pairs, size_t n_pairs, int **ret_tids, unsigned *ret_n);
