/* simulate_index: what lets a pod's scan of the slots skip the ones that cannot take it: the room of every slot
 * (cpu and memory) in a max tree, and the slots of every zone in index order. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "simulate_internal.h"

/* Room for more requests: an open node's allocatable less what is used; a claim's most allocatable (over the
 * shapes it may still take) less what it packs. A pod whose request exceeds it fails the resource check. */
static struct slot_room room_of(const struct ctx *c, size_t s) {
        const struct slot *sl = &c->slots[s];
        if (sl->closed)
                return (struct slot_room){ INT64_MIN, INT64_MIN };
        if (sl->kind == SLOT_CLAIM) {
                const struct claim_c *cl = &c->claims[sl->index];
                return (struct slot_room){ cl->maxalloc.v[RESOURCE_CPU] - cl->packed.v[RESOURCE_CPU],
                                      cl->maxalloc.v[RESOURCE_MEMORY] - cl->packed.v[RESOURCE_MEMORY] };
        }
        return (struct slot_room){ sl->alloc.v[RESOURCE_CPU] - sl->used.v[RESOURCE_CPU],
                              sl->alloc.v[RESOURCE_MEMORY] - sl->used.v[RESOURCE_MEMORY] };
}

static struct slot_room room_max(struct slot_room a, struct slot_room b) {
        return (struct slot_room){ a.cpu > b.cpu ? a.cpu : b.cpu, a.mem > b.mem ? a.mem : b.mem };
}

static void tree_set(struct ctx *c, size_t s, struct slot_room r) {
        size_t n = c->room_cap + s;
        c->room[n] = r;
        for (n /= 2; n >= 1; n /= 2)
                c->room[n] = room_max(c->room[2 * n], c->room[2 * n + 1]);
}

/* A tree of twice the leaves needed, every leaf from its slot. */
static int tree_rebuild(struct ctx *c) {
        size_t cap = c->room_cap ? c->room_cap : 64;
        while (cap < c->n_slots)
                cap *= 2;
        struct slot_room *t = malloc(2 * cap * sizeof *t);
        if (!t)
                return c->error = -ENOMEM;
        free(c->room);
        c->room = t;
        c->room_cap = cap;
        for (size_t i = 0; i < cap; i++)
                t[cap + i] = i < c->n_slots ? room_of(c, i) : (struct slot_room){ INT64_MIN, INT64_MIN };
        for (size_t n = cap - 1; n >= 1; n--)
                t[n] = room_max(t[2 * n], t[2 * n + 1]);
        return 0;
}

static int zone_add_slot(struct ctx *c, size_t s) {
        int32_t z = c->slots[s].zone;
        if (z < 0)
                return 0;
        if (simulate__grow(&c->zone_slots, &c->zone_slots_cap, (size_t)z + 1, sizeof *c->zone_slots) < 0)
                return c->error = -ENOMEM;
        struct zone_slots *zs = &c->zone_slots[z];
        if (simulate__grow(&zs->slots, &zs->cap, zs->n + 1, sizeof *zs->slots) < 0)
                return c->error = -ENOMEM;
        zs->slots[zs->n++] = (uint32_t)s;
        return 0;
}

int simulate__index_sync(struct ctx *c) {
        if (c->n_slots > c->room_cap && tree_rebuild(c) < 0)
                return c->error;
        for (; c->room_n < c->n_slots; c->room_n++) {
                tree_set(c, c->room_n, room_of(c, c->room_n));
                if (zone_add_slot(c, c->room_n) < 0)
                        return c->error;
        }
        return 0;
}

int simulate__index_update(struct ctx *c, size_t s) {
        if (!c->room)
                return 0; /* built by the first scan, after the bound pods have landed */
        if (simulate__index_sync(c) < 0)
                return c->error;
        tree_set(c, s, room_of(c, s));
        return 0;
}

static bool room_holds(struct slot_room r, const struct resources *req) {
        return r.cpu >= req->v[RESOURCE_CPU] && r.mem >= req->v[RESOURCE_MEMORY];
}

bool simulate__index_room(const struct ctx *c, size_t s, const struct resources *req) {
        return room_holds(c->room[c->room_cap + s], req);
}

/* From the leaf of slot from: up while the subtrees to the right hold no room for req, then down the leftmost
 * path that does. O(log distance). */
size_t simulate__index_next(const struct ctx *c, size_t from, const struct resources *req) {
        if (from >= c->n_slots)
                return SIZE_MAX;
        size_t n = c->room_cap + from;
        if (!room_holds(c->room[n], req)) {
                do {
                        while (n & 1) /* a right child: its parent has nothing more to the right */
                                if ((n >>= 1) == 0)
                                        return SIZE_MAX;
                        n++; /* the right sibling */
                } while (!room_holds(c->room[n], req));
                while (n < c->room_cap)
                        n = room_holds(c->room[2 * n], req) ? 2 * n : 2 * n + 1;
        }
        return n - c->room_cap < c->n_slots ? n - c->room_cap : SIZE_MAX;
}

void simulate__index_free(struct ctx *c) {
        for (size_t z = 0; z < c->zone_slots_cap; z++)
                free(c->zone_slots[z].slots);
        free(c->zone_slots);
        free(c->room);
}
