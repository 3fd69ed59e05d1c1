/* simulate_labels: interned strings, zone indices, and matching label sets against requirements, terms and
 * selectors; the simulation's lowest layer after the arena (simulate_internal.h gives the files' order). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simulate_internal.h"

/* ---- interned strings ---- */

static uint32_t hash_str(const char *s) {
        uint32_t h = 2166136261u;
        for (; *s; s++)
                h = (h ^ (uint8_t)*s) * 16777619u;
        return h;
}

static int strtab_rehash(struct strtab *t) {
        uint32_t n = t->n_slots ? t->n_slots * 2 : 1024;
        uint32_t *slots = calloc(n, sizeof *slots);
        if (!slots)
                return -ENOMEM;
        for (uint32_t id = 1; id < t->n; id++) {
                uint32_t i = hash_str(t->strs[id]) & (n - 1);
                while (slots[i])
                        i = (i + 1) & (n - 1);
                slots[i] = id;
        }
        free(t->slots);
        t->slots = slots;
        t->n_slots = n;
        return 0;
}

static uint32_t strtab_add(struct ctx *c, const char *s, uint32_t slot) {
        struct strtab *t = &c->st;
        size_t cap = t->cap;
        char *copy = simulate__arena_strdup(c->arena, s);
        if (!copy || simulate__grow(&t->strs, &cap, t->n + 1, sizeof(char *)) < 0) {
                c->error = -ENOMEM;
                return 0;
        }
        t->cap = (uint32_t)cap;
        t->strs[t->n] = copy;
        t->slots[slot] = t->n;
        return t->n++;
}

uint32_t simulate__intern(struct ctx *c, const char *s) {
        struct strtab *t = &c->st;
        if (!s)
                return 0;
        if (t->n == 0)
                t->n = 1; /* id 0 is reserved */
        if ((t->n + 1) * 2 > t->n_slots && strtab_rehash(t) < 0) {
                c->error = -ENOMEM;
                return 0;
        }
        uint32_t i = hash_str(s) & (t->n_slots - 1);
        for (; t->slots[i]; i = (i + 1) & (t->n_slots - 1))
                if (strcmp(t->strs[t->slots[i]], s) == 0)
                        return t->slots[i];
        return strtab_add(c, s, i);
}

const char *simulate__str(const struct ctx *c, uint32_t id) {
        return id && id < c->st.n ? c->st.strs[id] : "";
}

int32_t simulate__zone_index(struct ctx *c, uint32_t value_id, bool create) {
        if (!value_id)
                return -1;
        for (size_t i = 0; i < c->n_zones; i++)
                if (c->zone_ids[i] == value_id)
                        return (int32_t)i;
        if (!create)
                return -1;
        if (simulate__grow(&c->zone_ids, &c->cap_zones, c->n_zones + 1, sizeof(uint32_t)) < 0) {
                c->error = -ENOMEM;
                return -1;
        }
        c->zone_ids[c->n_zones] = value_id;
        return (int32_t)c->n_zones++;
}

/* ---- matching ---- */

uint32_t simulate__label(const struct kv *labels, uint32_t n, uint32_t key) {
        uint32_t lo = 0, hi = n;
        while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (labels[mid].k == key)
                        return labels[mid].v;
                if (labels[mid].k < key)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return 0;
}

static bool has_value(const struct creq *r, uint32_t v) {
        uint32_t lo = 0, hi = r->n_vals;
        while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (r->vals[mid] == v)
                        return true;
                if (r->vals[mid] < v)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return false;
}

bool simulate__parse_int(const char *s, int64_t *ret) {
        char *end;
        if (!*s)
                return false;
        long long v = strtoll(s, &end, 10);
        if (*end)
                return false;
        *ret = v;
        return true;
}

/* value 0 = label absent. */
bool simulate__req_matches(const struct ctx *c, const struct creq *r, uint32_t value) {
        int64_t num;
        switch (r->op) {
        case SIM_OP_IN:
                return value && has_value(r, value);
        case SIM_OP_NOT_IN:
                return !value || !has_value(r, value);
        case SIM_OP_EXISTS:
                return value != 0;
        case SIM_OP_DOES_NOT_EXIST:
                return value == 0;
        case SIM_OP_GT:
                return value && simulate__parse_int(simulate__str(c, value), &num) && num > r->num;
        case SIM_OP_LT:
                return value && simulate__parse_int(simulate__str(c, value), &num) && num < r->num;
        }
        return false;
}

bool simulate__term_matches(const struct ctx *c, const struct cterm *t, const struct kv *labels, uint32_t n) {
        for (uint32_t i = 0; i < t->n; i++)
                if (!simulate__req_matches(c, &t->reqs[i], simulate__label(labels, n, t->reqs[i].key)))
                        return false;
        return true;
}

bool simulate__selector_matches(const struct ctx *c, const struct cselector *s, const struct kv *labels,
                                uint32_t n) {
        if (s->none)
                return false;
        for (uint32_t i = 0; i < s->n_ml; i++)
                if (simulate__label(labels, n, s->ml[i].k) != s->ml[i].v)
                        return false;
        for (uint32_t i = 0; i < s->n_ex; i++)
                if (!simulate__req_matches(c, &s->ex[i], simulate__label(labels, n, s->ex[i].key)))
                        return false;
        return true;
}

/* ---- describing ---- */

static const char *const OPS[] = { "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt" };

void simulate__describe_req(const struct ctx *c, const struct creq *r, char *buf, size_t len) {
        const char *key = simulate__str(c, r->key);
        if (r->from_node_selector && r->n_vals == 1) {
                snprintf(buf, len, "nodeSelector %s=%s", key, simulate__str(c, r->vals[0]));
                return;
        }
        size_t n = (size_t)snprintf(buf, len, "node affinity %s %s", key, OPS[r->op]);
        if (r->op == SIM_OP_GT || r->op == SIM_OP_LT) {
                snprintf(buf + n, n < len ? len - n : 0, " %" PRId64, r->num);
                return;
        }
        for (uint32_t i = 0; i < r->n_vals && n < len; i++)
                n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "," : " [", simulate__str(c, r->vals[i]));
        if (r->n_vals && n < len)
                snprintf(buf + n, len - n, "]");
}
