/* placement_split: how a VM no NUMA node can hold is shared out over a set of host nodes (pure). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "placement.h"
#include "placement_internal.h"

unsigned placement__quarter_units(unsigned vcpus, unsigned unit) {
        unsigned quarter = (vcpus + 3) / 4;
        return (quarter + unit - 1) / unit;
}

static bool bounds_ok(const struct placement__slot *s, size_t k, unsigned total) {
        unsigned long lo = 0, hi = 0;
        for (size_t j = 0; j < k; j++) {
                if (s[j].lo > s[j].hi)
                        return false;
                lo += s[j].lo;
                hi += s[j].hi;
        }
        return k > 0 && lo <= total && total <= hi;
}

/* Visit order for the greedy shapes: WHOLE puts wholly free nodes first, largest hi first; FILL puts
 * the fullest (fewest free CPUs) first. Ties keep the slot order. */
static bool order_before(const struct placement__slot *a, const struct placement__slot *b,
                         enum placement__shape shape) {
        if (shape == PLACEMENT__WHOLE) {
                if (a->whole != b->whole)
                        return a->whole;
                return a->hi > b->hi;
        }
        return a->free < b->free;
}

static void visit_order(const struct placement__slot *s, size_t k, enum placement__shape shape, size_t *ord) {
        for (size_t j = 0; j < k; j++)
                ord[j] = j;
        for (size_t i = 1; i < k; i++)
                for (size_t j = i; j > 0 && order_before(&s[ord[j]], &s[ord[j - 1]], shape); j--) {
                        size_t x = ord[j];
                        ord[j] = ord[j - 1];
                        ord[j - 1] = x;
                }
}

/* Each node in turn takes as much as it can while the later ones can still have their lo. */
static void split_greedy(const struct placement__slot *s, size_t k, unsigned total, enum placement__shape shape,
                         unsigned *units) {
        size_t ord[PLACEMENT_MAX_NUMA];
        unsigned rest_lo = 0, left = total;
        visit_order(s, k, shape, ord);
        for (size_t j = 0; j < k; j++)
                rest_lo += s[j].lo;
        for (size_t j = 0; j < k; j++) {
                const struct placement__slot *sl = &s[ord[j]];
                rest_lo -= sl->lo;
                unsigned take = left - rest_lo;
                units[ord[j]] = take < sl->hi ? take : sl->hi;
                left -= units[ord[j]];
        }
}

/* level within the slot's bounds. */
static unsigned clamp_to(const struct placement__slot *slot, unsigned level) {
        if (level < slot->lo)
                return slot->lo;
        return level > slot->hi ? slot->hi : level;
}

static unsigned long level_sum(const struct placement__slot *s, size_t k, unsigned level) {
        unsigned long sum = 0;
        for (size_t j = 0; j < k; j++)
                sum += clamp_to(&s[j], level);
        return sum;
}

/* Water filling: every node at one level L (clamped to its bounds), the lowest L whose sum reaches
 * total; the nodes above L - 1 share the last few units one each, in slot order. */
static void split_balanced(const struct placement__slot *s, size_t k, unsigned total, unsigned *units) {
        unsigned lo = 0, hi = 0;
        for (size_t j = 0; j < k; j++)
                hi = s[j].hi > hi ? s[j].hi : hi;
        while (lo < hi) {
                unsigned mid = lo + (hi - lo) / 2;
                if (level_sum(s, k, mid) >= total)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        unsigned base = lo > 0 ? lo - 1 : 0;
        unsigned long sum = 0;
        for (size_t j = 0; j < k; j++) {
                units[j] = clamp_to(&s[j], base);
                sum += units[j];
        }
        for (size_t j = 0; j < k && sum < total; j++)
                if (units[j] < s[j].hi && units[j] == base) {
                        units[j]++;
                        sum++;
                }
}

bool placement__split(const struct placement__slot *slots, size_t k, unsigned total, enum placement__shape shape,
                      unsigned *units) {
        if (k > PLACEMENT_MAX_NUMA || !bounds_ok(slots, k, total))
                return false;
        if (shape == PLACEMENT__BALANCED)
                split_balanced(slots, k, total, units);
        else
                split_greedy(slots, k, total, shape, units);
        return true;
}

size_t placement__split_whole(const struct placement__slot *slots, size_t k, const unsigned *units) {
        size_t taken = 0;
        for (size_t j = 0; j < k; j++)
                taken += slots[j].whole && units[j] == slots[j].hi;
        return taken;
}

enum placement__shape placement__split_class(const struct placement__slot *slots, size_t k, const unsigned *units) {
        size_t taken = placement__split_whole(slots, k, units);
        unsigned lo = units[0], hi = units[0];
        for (size_t j = 0; j < k; j++) {
                lo = units[j] < lo ? units[j] : lo;
                hi = units[j] > hi ? units[j] : hi;
        }
        if (taken + 1 >= k)
                return PLACEMENT__WHOLE;
        return hi - lo <= 1 ? PLACEMENT__BALANCED : PLACEMENT__FILL;
}
