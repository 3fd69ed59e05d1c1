/* simulate_topology: pod affinity, anti-affinity and topology spread on hostname and zone, from the
 * incremental per-slot and per-zone counters of each counting group. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "simulate_internal.h"

/* A zone term of the class allows the zone value id (terms are ORed; only zone/region keys are read). */
static bool terms_allow_host(const struct ctx *c, const struct pclass *pc, uint32_t zone_id, uint32_t region) {
        for (uint32_t t = 0; t < pc->n_terms; t++) {
                bool ok = true;
                for (uint32_t i = 0; i < pc->terms[t].n && ok; i++) {
                        const struct creq *r = &pc->terms[t].reqs[i];
                        if (r->key == c->k_zone)
                                ok = simulate__req_matches(c, r, zone_id);
                        else if (r->key == c->k_region)
                                ok = simulate__req_matches(c, r, region);
                }
                if (ok)
                        return true;
        }
        return false;
}

static bool pool_allows_host(const struct ctx *c, const struct pool_c *p, const struct host_c *h) {
        if (p->bad || p->nc < 0)
                return false;
        if (c->ncs[p->nc].region && c->ncs[p->nc].region != h->region)
                return false;
        for (uint32_t i = 0; i < p->n_zreqs; i++) {
                const struct creq *r = &p->zreqs[i];
                uint32_t v = r->key == c->k_zone ? c->zone_ids[h->zone] : h->region;
                if (!simulate__req_matches(c, r, v))
                        return false;
        }
        return true;
}

static void host_domains(struct ctx *c, struct pclass *pc) {
        for (size_t h = 0; h < c->n_hosts; h++) {
                const struct host_c *hc = &c->hosts[h];
                if (!hc->room_at_start || !terms_allow_host(c, pc, c->zone_ids[hc->zone], hc->region))
                        continue;
                for (size_t p = 0; p < c->n_pools; p++)
                        if (pool_allows_host(c, &c->pools[p], hc) && simulate__pool_compatible(c, pc, p)) {
                                if (!pc->zone_eligible[hc->zone])
                                        pc->zone_eligible[hc->zone] = 2;
                                break;
                        }
        }
}

/* Zones count as spread domains when an existing node there matches the pod's node affinity (1), or when a
 * node pool the pod can use could create a node on a host there (2) that still has room: like Karpenter
 * after an insufficient-capacity error, a host that filled up stops being a domain. */
static bool zone_is_eligible(struct ctx *c, struct pclass *pc, int32_t zone) {
        if (zone < 0)
                return false;
        if (!pc->zone_eligible) {
                pc->zone_eligible = simulate__arena_alloc(c->arena, c->n_zones + 1);
                if (!pc->zone_eligible) {
                        c->error = -ENOMEM;
                        return false;
                }
                for (size_t s = 0; s < c->n_slots; s++) {
                        const struct slot *sl = &c->slots[s];
                        if (sl->kind == SLOT_CLAIM || sl->closed || sl->zone < 0)
                                continue;
                        for (uint32_t t = 0; t < pc->n_terms; t++)
                                if (simulate__term_matches(c, &pc->terms[t], sl->labels, sl->n_labels))
                                        pc->zone_eligible[sl->zone] = 1;
                }
                host_domains(c, pc);
        }
        if (pc->zone_eligible[zone] == 2)
                return c->host_of_zone[zone] >= 0 && simulate__host_has_room(c, (size_t)c->host_of_zone[zone]);
        return pc->zone_eligible[zone] != 0;
}

/* Free millicores in a zone: its host's, plus what open nodes and planned claims (at their current shape)
 * have left. */
static int64_t zone_room(struct ctx *c, int32_t zone) {
        int64_t room = c->host_of_zone[zone] >= 0 ? c->hosts[c->host_of_zone[zone]].free_cpus * 1000 : 0;
        for (size_t s = 0; s < c->n_slots; s++) {
                const struct slot *sl = &c->slots[s];
                if (sl->zone != zone || sl->closed)
                        continue;
                if (sl->kind == SLOT_CLAIM)
                        room += sl->alloc.v[RESOURCE_CPU] - c->claims[sl->index].packed.v[RESOURCE_CPU];
                else
                        room += sl->alloc.v[RESOURCE_CPU] - sl->used.v[RESOURCE_CPU];
        }
        return room;
}

/* The first pod of a zone self-affine set decides the zone of the whole set: give it the zone with the
 * most room, so that sets do not pile into the zone of the first node that happens to fit. */
int32_t simulate__anchor_zone(struct ctx *c, struct pclass *pc) {
        bool first = false;
        for (uint32_t i = 0; i < pc->n_aff; i++)
                if (pc->aff[i].topo == TOPO_ZONE && pc->aff[i].self && c->groups[pc->aff[i].group].total == 0)
                        first = true;
        if (!first)
                return -1;
        int32_t best = -1;
        int64_t best_room = 0;
        for (size_t z = 0; z < c->n_zones; z++) {
                if (!zone_is_eligible(c, pc, (int32_t)z))
                        continue;
                int64_t room = zone_room(c, (int32_t)z);
                if (room > best_room) {
                        best = (int32_t)z;
                        best_room = room;
                }
        }
        return best;
}

void simulate__spread_mins(struct ctx *c, struct pclass *pc, bool soft, int32_t *mins) {
        for (uint32_t t = 0; t < pc->n_spread; t++) {
                const struct spread_term *st = &pc->spread[t];
                mins[t] = 0;
                if ((!st->hard && !soft) || st->topo == TOPO_HOST)
                        continue; /* a new node always opens a hostname domain with 0 pods */
                const struct group *g = &c->groups[st->group];
                int32_t min = INT32_MAX, domains = 0;
                /* counts are never negative: once a domain has none, the minimum is 0 whatever the rest */
                for (size_t z = 0; z < c->n_zones && min > 0; z++)
                        if (zone_is_eligible(c, pc, (int32_t)z)) {
                                domains++;
                                if (g->zone_cnt[z] < min)
                                        min = g->zone_cnt[z];
                        }
                if (domains == 0 || (st->min_domains > 0 && domains < st->min_domains))
                        min = 0;
                mins[t] = min;
        }
}

/* slot == SIZE_MAX: a new node in zone. per_slot NULL: no term counts the group per node, so none is read but
 * the symmetric anti-affinity check's, for which no pod has a hostname anti-affinity term on the group. */
static int32_t node_count(const int32_t *per_slot, size_t slot) {
        return slot == SIZE_MAX || !per_slot ? 0 : per_slot[slot];
}

static enum fit anti_fits(const struct ctx *c, const struct pclass *pc, size_t slot, int32_t zone) {
        for (uint32_t i = 0; i < pc->n_anti; i++) {
                const struct group *g = &c->groups[pc->anti[i].group];
                if (pc->anti[i].topo == TOPO_HOST ? node_count(g->node_cnt, slot) > 0
                                                  : zone >= 0 && g->zone_cnt[zone] > 0)
                        return FIT_ANTI;
        }
        /* symmetry: pods already placed whose anti-affinity selects this pod */
        for (uint32_t i = 0; i < pc->n_member; i++) {
                const struct group *g = &c->groups[pc->member[i]];
                if (node_count(g->anti_node, slot) > 0 || (zone >= 0 && g->anti_zone[zone] > 0))
                        return FIT_ANTI;
        }
        return FIT_OK;
}

static enum fit affinity_fits(const struct ctx *c, const struct pclass *pc, size_t slot, int32_t zone) {
        for (uint32_t i = 0; i < pc->n_aff; i++) {
                const struct group *g = &c->groups[pc->aff[i].group];
                if (g->total == 0 && pc->aff[i].self)
                        continue; /* the first pod of a self-affine set may go anywhere */
                if (pc->aff[i].topo == TOPO_HOST ? node_count(g->node_cnt, slot) == 0
                                                 : zone < 0 || g->zone_cnt[zone] == 0)
                        return FIT_AFFINITY;
        }
        return FIT_OK;
}

static enum fit spread_fits(const struct ctx *c, const struct pclass *pc, const int32_t *mins, bool soft,
                            size_t slot, int32_t zone) {
        for (uint32_t i = 0; i < pc->n_spread; i++) {
                const struct spread_term *st = &pc->spread[i];
                if (!st->hard && !soft)
                        continue;
                const struct group *g = &c->groups[st->group];
                int32_t cnt;
                if (st->topo == TOPO_HOST) {
                        cnt = node_count(g->node_cnt, slot);
                } else {
                        if (zone < 0)
                                return FIT_SPREAD; /* a node without the topology label is no domain */
                        cnt = g->zone_cnt[zone];
                }
                if (cnt + (st->self ? 1 : 0) - mins[i] > st->max_skew)
                        return FIT_SPREAD;
        }
        return FIT_OK;
}

enum fit simulate__topology_fits(const struct ctx *c, const struct pclass *pc, const int32_t *mins, bool soft,
                                 size_t slot, int32_t zone) {
        enum fit f = anti_fits(c, pc, slot, zone);
        if (f == FIT_OK)
                f = affinity_fits(c, pc, slot, zone);
        if (f == FIT_OK)
                f = spread_fits(c, pc, mins, soft, slot, zone);
        return f;
}

int simulate__affinity_zones(const struct ctx *c, const struct pclass *pc, int32_t *zones) {
        for (uint32_t i = 0; i < pc->n_aff; i++) {
                const struct group *g = &c->groups[pc->aff[i].group];
                int n = 0;
                if (pc->aff[i].topo != TOPO_ZONE || (g->total == 0 && pc->aff[i].self))
                        continue;
                for (size_t z = 0; z < c->n_zones && n <= SIM_ZONES_MAX; z++)
                        if (g->zone_cnt[z] > 0 && n++ < SIM_ZONES_MAX)
                                zones[n - 1] = (int32_t)z;
                if (n <= SIM_ZONES_MAX)
                        return n;
        }
        return -1;
}

bool simulate__zone_in(const int32_t *zones, int n, int32_t zone) {
        for (int k = 0; k < n; k++)
                if (zones[k] == zone)
                        return true;
        return false;
}
