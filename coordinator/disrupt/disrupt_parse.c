/* disrupt_parse: a NodePool's disruption settings from its JSON, once, at the edge; the drift hashes. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "config.h"
#include "disrupt.h"
#include "errmsg.h"

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME UINT64_C(0x100000001b3)
#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const REASON_NAMES[DISRUPT_REASON_COUNT] = { "Empty", "Drifted", "Underutilized", "Expired",
                                                                  "Unhealthy" };
static const char *const METHOD_NAMES[DISRUPT_METHOD_COUNT] = { "Emptiness", "Drift", "Expiry", "Repair",
                                                                 "Consolidation", "Consolidation" };

const char *disrupt_reason_name(enum disrupt_reason r) {
        return r < DISRUPT_REASON_COUNT ? REASON_NAMES[r] : "Unknown";
}

/* The reason disrupt_reason_name names name, or -1. */
static int disrupt_reason_from_name(const char *name) {
        for (int i = 0; name && i < DISRUPT_REASON_COUNT; i++)
                if (strcmp(REASON_NAMES[i], name) == 0)
                        return i;
        return -1;
}

double disrupt_price(const struct shape *s) {
        return s ? s->vcpus + (double)s->vm_memory_bytes / GIB / 4.0 : 0.0;
}

const char *disrupt_method_name(enum disrupt_method m) {
        return m < DISRUPT_METHOD_COUNT ? METHOD_NAMES[m] : "Unknown";
}

/* One field's parse: where we are, for the message. */
struct field {
        const char *pool;
        char *err;
        size_t errlen;
};

static int bad(const struct field *f, const char *path, const char *why) {
        return errmsg_invalid(f->err, f->errlen, "NodePool %s: %s: %s", f->pool, path, why);
}

/* A Go duration or "Never" (-1) at key of o; absent: def. */
static int duration_at(const struct field *f, const json_t *o, const char *key, const char *path, int64_t def,
                       int64_t *ret) {
        const json_t *v = json_object_get(o, key);
        uint64_t ms;
        if (!v || json_is_null(v)) {
                *ret = def;
                return 0;
        }
        if (!json_is_string(v))
                return bad(f, path, "must be a duration string");
        if (strcmp(json_string_value(v), "Never") == 0) {
                *ret = -1;
                return 0;
        }
        if (config_parse_duration(json_string_value(v), &ms) < 0)
                return bad(f, path, "must be a duration such as 30s, 5m or 720h, or Never");
        *ret = (int64_t)ms;
        return 0;
}

static int policy_at(const struct field *f, const json_t *disruption, enum disrupt_policy *ret) {
        const json_t *v = json_object_get(disruption, "consolidationPolicy");
        const char *s = json_string_value(v);
        if (!v || json_is_null(v) || (s && strcmp(s, "WhenEmptyOrUnderutilized") == 0))
                *ret = DISRUPT_WHEN_EMPTY_OR_UNDERUTILIZED;
        else if (s && strcmp(s, "WhenEmpty") == 0)
                *ret = DISRUPT_WHEN_EMPTY;
        else if (s && strcmp(s, "Balanced") == 0)
                *ret = DISRUPT_BALANCED;
        else
                return bad(f, "spec.disruption.consolidationPolicy",
                           "must be WhenEmpty, WhenEmptyOrUnderutilized or Balanced");
        return 0;
}

/* "10%", "5" or 5. */
static int budget_nodes(const struct field *f, const json_t *v, const char *path, struct disrupt_budget *b) {
        const char *s = json_string_value(v);
        char *end = NULL;
        if (json_is_integer(v) && json_integer_value(v) >= 0) {
                b->nodes = json_integer_value(v);
                return 0;
        }
        if (!s || *s < '0' || *s > '9')
                return bad(f, path, "must be a count or a percent such as 10%");
        long long n = strtoll(s, &end, 10);
        b->percent = *end == '%';
        if (*end && !(b->percent && end[1] == '\0'))
                return bad(f, path, "must be a count or a percent such as 10%");
        if ((b->percent && n > 100) || n > INT32_MAX)
                return bad(f, path, "is too large");
        b->nodes = n;
        return 0;
}

static int budget_reasons(const struct field *f, const json_t *v, const char *path, struct disrupt_budget *b) {
        size_t i;
        json_t *r;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_array(v))
                return bad(f, path, "must be a list of Empty, Drifted, Underutilized");
        json_array_foreach(v, i, r) {
                int k = disrupt_reason_from_name(json_string_value(r));
                if (k < 0 || k > DISRUPT_REASON_UNDERUTILIZED)
                        return bad(f, path, "must be a list of Empty, Drifted, Underutilized");
                b->reasons |= 1u << k;
        }
        return 0;
}

static int budget_schedule(const struct field *f, const json_t *o, const char *path, struct disrupt_budget *b) {
        const json_t *sched = json_object_get(o, "schedule");
        char p[64], why[192];
        int64_t dur;
        snprintf(p, sizeof p, "%s.duration", path);
        if (duration_at(f, o, "duration", p, 0, &dur) < 0)
                return -EINVAL;
        if (dur < 0)
                return bad(f, p, "must be a duration, not Never");
        b->duration_ms = dur;
        b->has_schedule = sched && !json_is_null(sched);
        if (b->has_schedule != (json_object_get(o, "duration") != NULL))
                return bad(f, path, "schedule and duration go together");
        snprintf(p, sizeof p, "%s.schedule", path);
        if (b->has_schedule && disrupt_cron_parse(json_string_value(sched), &b->schedule, why, sizeof why) < 0)
                return bad(f, p, why);
        return 0;
}

static int budget_at(const struct field *f, const json_t *o, size_t i, struct disrupt_budget *b) {
        char path[48], p[64];
        snprintf(path, sizeof path, "spec.disruption.budgets[%zu]", i);
        snprintf(p, sizeof p, "%s.nodes", path);
        *b = (struct disrupt_budget){ 0 };
        if (!json_is_object(o))
                return bad(f, path, "must be an object");
        if (budget_nodes(f, json_object_get(o, "nodes"), p, b) < 0)
                return -EINVAL;
        snprintf(p, sizeof p, "%s.reasons", path);
        if (budget_reasons(f, json_object_get(o, "reasons"), p, b) < 0)
                return -EINVAL;
        return budget_schedule(f, o, path, b);
}

static int budgets_at(const struct field *f, const json_t *disruption, struct disrupt_pool *p) {
        const json_t *list = json_object_get(disruption, "budgets");
        size_t i;
        json_t *o;
        if (!list || json_is_null(list)) {
                p->budgets[0] = (struct disrupt_budget){ .nodes = 10, .percent = true };
                p->n_budgets = 1;
                return 0;
        }
        if (!json_is_array(list) || json_array_size(list) > DISRUPT_MAX_BUDGETS) {
                char why[64];
                snprintf(why, sizeof why, "must be a list of at most %d budgets", DISRUPT_MAX_BUDGETS);
                return bad(f, "spec.disruption.budgets", why);
        }
        p->n_budgets = 0;
        json_array_foreach(list, i, o) {
                if (budget_at(f, o, i, &p->budgets[p->n_budgets++]) < 0)
                        return -EINVAL;
        }
        return 0;
}

static int names_at(const struct field *f, const json_t *tspec, struct disrupt_pool *p) {
        const char *nc = json_string_value(json_object_get(json_object_get(tspec, "nodeClassRef"), "name"));
        if (strlen(f->pool) >= sizeof p->name)
                return bad(f, "metadata.name", "is too long");
        snprintf(p->name, sizeof p->name, "%s", f->pool);
        if (nc && strlen(nc) >= sizeof p->nodeclass)
                return bad(f, "spec.template.spec.nodeClassRef.name", "is too long");
        snprintf(p->nodeclass, sizeof p->nodeclass, "%s", nc ? nc : "");
        return 0;
}

int disrupt_pool_parse(const json_t *nodepool, struct disrupt_pool *ret, char *err, size_t errlen) {
        const char *name = json_string_value(json_object_get(json_object_get(nodepool, "metadata"), "name"));
        struct field f = { name ? name : "(unnamed)", err, errlen };
        const json_t *spec = json_object_get(nodepool, "spec"), *disruption = json_object_get(spec, "disruption");
        const json_t *tspec = json_object_get(json_object_get(spec, "template"), "spec");
        _cleanup_free_ struct disrupt_pool *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        if (!name)
                return bad(&f, "metadata.name", "required");
        if (!json_is_object(spec))
                return bad(&f, "spec", "must be an object");
        if (names_at(&f, tspec, p) < 0 || policy_at(&f, disruption, &p->policy) < 0 ||
            duration_at(&f, disruption, "consolidateAfter", "spec.disruption.consolidateAfter", 0,
                        &p->consolidate_after_ms) < 0 ||
            duration_at(&f, tspec, "expireAfter", "spec.template.spec.expireAfter", DISRUPT_DEFAULT_EXPIRE_MS,
                        &p->expire_after_ms) < 0 ||
            duration_at(&f, tspec, "terminationGracePeriod", "spec.template.spec.terminationGracePeriod", -1,
                        &p->termination_grace_ms) < 0 ||
            budgets_at(&f, disruption, p) < 0)
                return -EINVAL;
        int r = disrupt_hash_nodepool(nodepool, p->hash);
        if (r < 0)
                return r == -ENOMEM ? r : bad(&f, "spec.template", "must be an object");
        *ret = *p;
        return 0;
}

/* ---- hashes ---- */

static int hash_json(const json_t *o, char ret[DISRUPT_HASH_LEN]) {
        _cleanup_free_ char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
        uint64_t h = FNV_OFFSET;
        if (!text)
                return -ENOMEM;
        for (const unsigned char *c = (const unsigned char *)text; *c; c++)
                h = (h ^ *c) * FNV_PRIME;
        snprintf(ret, DISRUPT_HASH_LEN, "%016" PRIx64, h);
        return 0;
}

int disrupt_hash_nodepool(const json_t *nodepool, char ret[DISRUPT_HASH_LEN]) {
        static const char *const IGNORED[] = { "requirements", "expireAfter", "terminationGracePeriod" };
        const json_t *tmpl = json_object_get(json_object_get(nodepool, "spec"), "template");
        if (!json_is_object(tmpl))
                return -EINVAL;
        _cleanup_(json_decrefp) json_t *copy = json_deep_copy(tmpl);
        json_t *tspec = json_object_get(copy, "spec");
        if (!copy)
                return -ENOMEM;
        for (size_t i = 0; json_is_object(tspec) && i < sizeof IGNORED / sizeof IGNORED[0]; i++)
                json_object_del(tspec, IGNORED[i]);
        return hash_json(copy, ret);
}

int disrupt_hash_nodeclass_v1(const json_t *nodeclass, char ret[DISRUPT_HASH_LEN]) {
        const json_t *spec = json_object_get(nodeclass, "spec");
        return json_is_object(spec) ? hash_json(spec, ret) : -EINVAL;
}

int disrupt_hash_nodeclass(const json_t *nodeclass, char ret[DISRUPT_HASH_LEN]) {
        static const char *const IN_PLACE[] = { "tags", "resourcePool", "securityGroups" };
        const json_t *spec = json_object_get(nodeclass, "spec");
        if (!json_is_object(spec))
                return -EINVAL;
        _cleanup_(json_decrefp) json_t *copy = json_deep_copy(spec);
        if (!copy)
                return -ENOMEM;
        for (size_t i = 0; i < sizeof IN_PLACE / sizeof IN_PLACE[0]; i++)
                json_object_del(copy, IN_PLACE[i]);
        return hash_json(copy, ret);
}
