/* nodeclaim: a NodeClaim's status as a typed struct (one table of its fields, each decoded, compared and encoded
 * by its kind), and its placement as the provisioner plans it and the launcher records it. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "nodeclaim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quantity.h"
#include "rfc3339.h"
#include "simulate.h"
#include "kube_object.h"
#include "kube_types.h"

#define KEY_LAUNCH_STEP "launchStep"
#define KEY_HOST "host"
#define KEY_REGION "region"
#define KEY_CONDITIONS "conditions"

static const char *const STEP_NAMES[] = { "",         "Reserved", "VMIDAllocated", "Cloning",     "Configured",
                                          "Started",  "Launched", "Registered",    "Initialized", "Failed" };
#define N_STEPS (sizeof STEP_NAMES / sizeof STEP_NAMES[0])

static const char *const TERM_NAMES[] = { "", "Tainted", "Drained", "NodeDeleted", "InstanceTerminated" };
#define N_TERMS (sizeof TERM_NAMES / sizeof TERM_NAMES[0])

static const char *const RESERVATION_NAMES[] = { "", "agent", "pve" };
#define N_RESERVATIONS (sizeof RESERVATION_NAMES / sizeof RESERVATION_NAMES[0])

const char *nodeclaim_step_name(enum nodeclaim_step step) {
        return (size_t)step < N_STEPS ? STEP_NAMES[step] : "";
}

/* The index of name in names, or -1. */
static int name_index(const char *const *names, size_t n, const char *name) {
        for (size_t i = 0; name && i < n; i++)
                if (strcmp(name, names[i]) == 0)
                        return (int)i;
        return -1;
}

int nodeclaim_step_parse(const char *name, enum nodeclaim_step *ret) {
        int i = name_index(STEP_NAMES, N_STEPS, name);
        if (i < 0)
                return -EINVAL;
        *ret = (enum nodeclaim_step)i;
        return 0;
}

const char *nodeclaim_term_name(enum nodeclaim_term term) {
        return (size_t)term < N_TERMS ? TERM_NAMES[term] : "";
}

/* ---- the kinds of field: decode (why it failed into why), encode, empty, equal ---- */

struct kind {
        int (*decode)(const json_t *v, void *dst, size_t len, char *why, size_t whylen);
        json_t *(*encode)(const void *src);
        bool (*empty)(const void *src);
        bool (*equal)(const void *a, const void *b);
};

static int dec_str(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        const char *s = json_string_value(v);
        if (!s || strlen(s) >= len) {
                snprintf(why, whylen, s ? ": longer than %zu characters" : ": a string is required", len - 1);
                return -EINVAL;
        }
        memcpy(dst, s, strlen(s) + 1);
        return 0;
}

static json_t *enc_str(const void *src) {
        return json_string(src);
}

static bool empty_str(const void *src) {
        return !*(const char *)src;
}

static bool eq_str(const void *a, const void *b) {
        return strcmp(a, b) == 0;
}

static int dec_u32(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        json_int_t i = json_integer_value(v);
        (void)len;
        if (!json_is_integer(v) || i < 0 || i > (json_int_t)UINT32_MAX) {
                snprintf(why, whylen, ": an integer of 0 to %u is required", UINT32_MAX);
                return -EINVAL;
        }
        *(uint32_t *)dst = (uint32_t)i;
        return 0;
}

static json_t *enc_u32(const void *src) {
        return json_integer(*(const uint32_t *)src);
}

static bool empty_u32(const void *src) {
        return *(const uint32_t *)src == 0;
}

static bool eq_u32(const void *a, const void *b) {
        return *(const uint32_t *)a == *(const uint32_t *)b;
}

static int dec_count(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        (void)len;
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
                snprintf(why, whylen, ": a non-negative integer is required");
                return -EINVAL;
        }
        *(int64_t *)dst = json_integer_value(v);
        return 0;
}

static json_t *enc_count(const void *src) {
        return json_integer(*(const int64_t *)src);
}

static bool empty_i64(const void *src) {
        return *(const int64_t *)src == 0;
}

static bool eq_i64(const void *a, const void *b) {
        return *(const int64_t *)a == *(const int64_t *)b;
}

static int dec_time(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        (void)len;
        if (rfc3339_parse(json_string_value(v), dst) < 0) {
                snprintf(why, whylen, ": an RFC 3339 time is required");
                return -EINVAL;
        }
        return 0;
}

static json_t *enc_time(const void *src) {
        char when[40];
        return json_string(rfc3339_format_ms(*(const int64_t *)src, when, sizeof when));
}

/* A name of names into an enum member: why says "unknown <what> ..." or that a string is required. */
static int dec_named(const char *const *names, size_t n, const char *what, const json_t *v, void *dst, char *why,
                     size_t whylen) {
        int i = name_index(names, n, json_string_value(v));
        if (i < 0) {
                snprintf(why, whylen, json_is_string(v) ? ": unknown %s \"%s\"" : ": a string is required", what,
                         json_string_value(v));
                return -EINVAL;
        }
        *(int *)dst = i;
        return 0;
}

static int dec_step(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        (void)len;
        return dec_named(STEP_NAMES, N_STEPS, "step", v, dst, why, whylen);
}

static json_t *enc_step(const void *src) {
        return json_string(nodeclaim_step_name(*(const enum nodeclaim_step *)src));
}

static bool empty_enum(const void *src) {
        return *(const int *)src == 0;
}

static bool eq_enum(const void *a, const void *b) {
        return *(const int *)a == *(const int *)b;
}

static int dec_reservation(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        int i = name_index(RESERVATION_NAMES, N_RESERVATIONS, json_string_value(v));
        (void)len;
        if (i < 0) {
                snprintf(why, whylen, ": \"agent\" or \"pve\" is required");
                return -EINVAL;
        }
        *(enum nodeclaim_reservation *)dst = (enum nodeclaim_reservation)i;
        return 0;
}

static json_t *enc_reservation(const void *src) {
        return json_string(RESERVATION_NAMES[*(const enum nodeclaim_reservation *)src]);
}

static int dec_term(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        (void)len;
        return dec_named(TERM_NAMES, N_TERMS, "termination step", v, dst, why, whylen);
}

static json_t *enc_term(const void *src) {
        return json_string(nodeclaim_term_name(*(const enum nodeclaim_term *)src));
}

/* {"cpu": "2", "memory": "4Gi", ...}: a quantity per resource this build knows (others are left to the JSON). */
static int dec_resources(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        struct resources res = { { 0 } };
        const char *k;
        json_t *q;
        (void)len;
        if (!json_is_object(v)) {
                snprintf(why, whylen, ": an object is required");
                return -EINVAL;
        }
        json_object_foreach((json_t *)v, k, q) {
                int kind = resources_kind_from_name(k);
                if (kind >= 0 && quantity_parse(json_string_value(q), kind == RESOURCE_CPU ? QUANTITY_MILLI
                                                                                            : QUANTITY_UNITS,
                                                &res.v[kind]) < 0) {
                        snprintf(why, whylen, ".%s: a quantity is required", k);
                        return -EINVAL;
                }
        }
        *(struct resources *)dst = res;
        return 0;
}

static json_t *enc_resources(const void *src) {
        return resources_to_json(src);
}

static bool empty_resources(const void *src) {
        static const struct resources zero;
        return memcmp(src, &zero, sizeof zero) == 0;
}

static bool eq_resources(const void *a, const void *b) {
        return memcmp(a, b, sizeof(struct resources)) == 0;
}

static int dec_placement(const json_t *v, void *dst, size_t len, char *why, size_t whylen) {
        struct nodeclaim_placement *p = dst;
        const json_t *cpus = json_object_get(v, "cpus");
        (void)len;
        if (!json_is_object(v) || launcher_numa_parse(json_object_get(v, "numa"), p->numa, &p->n_numa) < 0) {
                snprintf(why, whylen, json_is_object(v) ? ".numa: malformed" : ": an object is required");
                return -EINVAL;
        }
        if (cpus && !json_is_null(cpus) && dec_str(cpus, p->cpus, sizeof p->cpus, why, whylen) < 0)
                return -EINVAL;
        p->set = true;
        return 0;
}

static json_t *enc_numa(const struct launcher_numa *e) {
        return json_pack("{s:I, s:s, s:I}", "hostNode", (json_int_t)e->host_node, "guestCPUs", e->guest_cpus,
                         "memoryMiB", (json_int_t)e->memory_mib);
}

static json_t *enc_placement(const void *src) {
        const struct nodeclaim_placement *p = src;
        json_t *numa = json_array(), *out = json_pack("{s:o}", "numa", numa);
        for (size_t i = 0; out && i < p->n_numa; i++)
                if (json_array_append_new(numa, enc_numa(&p->numa[i])) < 0) {
                        json_decref(out);
                        return NULL;
                }
        if (out && p->cpus[0] && json_object_set_new(out, "cpus", json_string(p->cpus)) < 0) {
                json_decref(out);
                return NULL;
        }
        return out;
}

static bool empty_placement(const void *src) {
        return !((const struct nodeclaim_placement *)src)->set;
}

static bool eq_numa(const struct launcher_numa *a, const struct launcher_numa *b) {
        return a->host_node == b->host_node && a->memory_mib == b->memory_mib &&
               strcmp(a->guest_cpus, b->guest_cpus) == 0;
}

static bool eq_placement(const void *a, const void *b) {
        const struct nodeclaim_placement *p = a, *q = b;
        if (p->set != q->set || p->n_numa != q->n_numa || strcmp(p->cpus, q->cpus) != 0)
                return false;
        for (size_t i = 0; i < p->n_numa; i++)
                if (!eq_numa(&p->numa[i], &q->numa[i]))
                        return false;
        return true;
}

static const struct kind K_STR = { dec_str, enc_str, empty_str, eq_str };
static const struct kind K_U32 = { dec_u32, enc_u32, empty_u32, eq_u32 };
static const struct kind K_COUNT = { dec_count, enc_count, empty_i64, eq_i64 };
static const struct kind K_TIME = { dec_time, enc_time, empty_i64, eq_i64 };
static const struct kind K_STEP = { dec_step, enc_step, empty_enum, eq_enum };
static const struct kind K_TERM = { dec_term, enc_term, empty_enum, eq_enum };
static const struct kind K_RESERVATION = { dec_reservation, enc_reservation, empty_enum, eq_enum };
static const struct kind K_RESOURCES = { dec_resources, enc_resources, empty_resources, eq_resources };
static const struct kind K_PLACEMENT = { dec_placement, enc_placement, empty_placement, eq_placement };

/* ---- the fields ---- */

struct field {
        const char *key;
        const struct kind *kind;
        size_t off, len;
};

#define FIELD(key, kind, member)                                                                                       \
        { key, &kind, offsetof(struct nodeclaim_status, member), sizeof(((struct nodeclaim_status *)0)->member) }

static const struct field FIELDS[] = {
        FIELD(KEY_LAUNCH_STEP, K_STEP, launch_step),
        FIELD(KEY_HOST, K_STR, host),
        FIELD(KEY_REGION, K_STR, region),
        FIELD("capacity", K_RESOURCES, capacity),
        FIELD("allocatable", K_RESOURCES, allocatable),
        FIELD("reservationMode", K_RESERVATION, reservation),
        FIELD("reservationID", K_STR, reservation_id),
        FIELD("placement", K_PLACEMENT, placement),
        FIELD("vmid", K_U32, vmid),
        FIELD("providerID", K_STR, provider_id),
        FIELD("cloneStartedAt", K_TIME, clone_started_ms),
        FIELD("cloneTask", K_STR, clone_task),
        FIELD("imageID", K_STR, image_id),
        FIELD("imageDigest", K_STR, image_digest),
        FIELD("ipconfig", K_STR, ipconfig),
        FIELD("isoVolume", K_STR, iso_volume),
        FIELD("tokenID", K_STR, token_id),
        FIELD("startedAt", K_TIME, started_ms),
        FIELD("nodeName", K_STR, node_name),
        FIELD("attempts", K_COUNT, attempts),
        FIELD("lastError", K_STR, last_error),
        FIELD("failureReason", K_STR, failure_reason),
        FIELD("terminationStep", K_TERM, term_step),
        FIELD("terminationStartedAt", K_TIME, term_started_ms),
};
#define N_FIELDS (sizeof FIELDS / sizeof FIELDS[0])

static void *member(struct nodeclaim_status *st, const struct field *f) {
        return (char *)st + f->off;
}

static const void *cmember(const struct nodeclaim_status *st, const struct field *f) {
        return (const char *)st + f->off;
}

static bool field_equal(const struct field *f, const struct nodeclaim_status *a, const struct nodeclaim_status *b) {
        return f->kind->equal(cmember(a, f), cmember(b, f));
}

/* ---- conditions ---- */

static bool condition_equal(const struct nodeclaim_condition *a, const struct nodeclaim_condition *b) {
        return strcmp(a->status, b->status) == 0 && strcmp(a->reason, b->reason) == 0 &&
               strcmp(a->message, b->message) == 0;
}

/* Did st change the condition (set it differently from base, or add it)? */
static bool condition_changed(const struct nodeclaim_status *base, const struct nodeclaim_condition *c) {
        const struct nodeclaim_condition *b = nodeclaim_condition(base, c->type);
        return !b || !condition_equal(b, c);
}

/* A text member of a condition (absent or null is "" unless required); why names the member. */
static int dec_condition_str(const json_t *o, const char *key, bool required, char *dst, size_t len, char *why,
                             size_t whylen) {
        const json_t *v = json_object_get(o, key);
        char inner[96];
        if (!required && (!v || json_is_null(v)))
                return 0;
        int r = dec_str(v, dst, len, inner, sizeof inner);
        if (r < 0)
                snprintf(why, whylen, ".%s%s", key, inner);
        return r;
}

static int dec_condition(const json_t *o, struct nodeclaim_condition *c, char *why, size_t whylen) {
        const json_t *t = json_object_get(o, "lastTransitionTime");
        char inner[96];
        if (!json_is_object(o)) {
                snprintf(why, whylen, ": an object is required");
                return -EINVAL;
        }
        if (dec_condition_str(o, "type", true, c->type, sizeof c->type, why, whylen) < 0 ||
            dec_condition_str(o, "status", true, c->status, sizeof c->status, why, whylen) < 0 ||
            dec_condition_str(o, "reason", false, c->reason, sizeof c->reason, why, whylen) < 0 ||
            dec_condition_str(o, "message", false, c->message, sizeof c->message, why, whylen) < 0)
                return -EINVAL;
        if (t && !json_is_null(t) && dec_time(t, &c->transition_ms, 0, inner, sizeof inner) < 0) {
                snprintf(why, whylen, ".lastTransitionTime%s", inner);
                return -EINVAL;
        }
        return 0;
}

/* All of them or none. */
static int dec_conditions(const json_t *v, struct nodeclaim_status *st, char *err, size_t errlen) {
        char why[128];
        size_t i;
        json_t *o;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_array(v) || json_array_size(v) > NODECLAIM_MAX_CONDITIONS) {
                snprintf(err, errlen, "status." KEY_CONDITIONS ": an array of at most %d is required",
                         NODECLAIM_MAX_CONDITIONS);
                return -EINVAL;
        }
        json_array_foreach(v, i, o) {
                struct nodeclaim_condition *c = &st->conditions[st->n_conditions];
                if (dec_condition(o, c, why, sizeof why) < 0) {
                        snprintf(err, errlen, "status." KEY_CONDITIONS "[%zu]%s", i, why);
                        memset(st->conditions, 0, sizeof st->conditions);
                        st->n_conditions = 0;
                        return -EINVAL;
                }
                st->n_conditions++;
        }
        return 0;
}

static int condition_index(const struct nodeclaim_status *st, const char *type) {
        for (size_t i = 0; i < st->n_conditions; i++)
                if (strcmp(st->conditions[i].type, type) == 0)
                        return (int)i;
        return -1;
}

const struct nodeclaim_condition *nodeclaim_condition(const struct nodeclaim_status *st, const char *type) {
        int i = condition_index(st, type);
        return i < 0 ? NULL : &st->conditions[i];
}

bool nodeclaim_condition_true(const struct nodeclaim_status *st, const char *type) {
        const struct nodeclaim_condition *c = nodeclaim_condition(st, type);
        return c && strcmp(c->status, "True") == 0;
}

static bool fits(const char *s, size_t len) {
        return strlen(s) < len;
}

int nodeclaim_condition_set(struct nodeclaim_status *st, const char *type, const char *cstatus, const char *reason,
                            const char *message) {
        struct nodeclaim_condition *c;
        int i = condition_index(st, type);
        reason = reason ? reason : "";
        message = message ? message : "";
        if (!fits(type, sizeof c->type) || !fits(cstatus, sizeof c->status) || !fits(reason, sizeof c->reason) ||
            !fits(message, sizeof c->message))
                return -EINVAL;
        if (i < 0 && st->n_conditions >= NODECLAIM_MAX_CONDITIONS)
                return -ENOSPC;
        c = &st->conditions[i < 0 ? st->n_conditions++ : (size_t)i];
        if (i < 0)
                *c = (struct nodeclaim_condition){ .transition_ms = 0 };
        snprintf(c->type, sizeof c->type, "%s", type);
        snprintf(c->status, sizeof c->status, "%s", cstatus);
        snprintf(c->reason, sizeof c->reason, "%s", reason);
        snprintf(c->message, sizeof c->message, "%s", message);
        return 0;
}

/* st keeps the conditions it changed against base, and takes fresh's for the others. */
static void rebase_conditions(const struct nodeclaim_status *base, struct nodeclaim_status *st,
                              const struct nodeclaim_status *fresh) {
        size_t n = 0;
        for (size_t i = 0; i < st->n_conditions; i++)
                if (condition_changed(base, &st->conditions[i]))
                        st->conditions[n++] = st->conditions[i];
        st->n_conditions = n;
        for (size_t i = 0; i < fresh->n_conditions && st->n_conditions < NODECLAIM_MAX_CONDITIONS; i++)
                if (condition_index(st, fresh->conditions[i].type) < 0)
                        st->conditions[st->n_conditions++] = fresh->conditions[i];
}

/* ---- the whole status ---- */

/* The member of one field; an error goes to err unless errlen is 0 (an earlier field's error stands). */
static int dec_field(const json_t *status, const struct field *f, struct nodeclaim_status *st, char *err,
                     size_t errlen) {
        const json_t *v = json_object_get(status, f->key);
        char why[160];
        if (!v || json_is_null(v) || f->kind->decode(v, member(st, f), f->len, why, sizeof why) == 0)
                return 0;
        memset(member(st, f), 0, f->len);
        snprintf(err, errlen, "status.%s%s", f->key, why);
        return -EINVAL;
}

int nodeclaim_status_decode(const json_t *status, struct nodeclaim_status *ret, char *err, size_t errlen) {
        char first[256] = "";
        int r = 0;
        memset(ret, 0, sizeof *ret);
        if (status && !json_is_object(status) && !json_is_null(status)) {
                snprintf(err, errlen, "status: an object is required");
                return -EINVAL;
        }
        for (size_t i = 0; i < N_FIELDS; i++)
                if (dec_field(status, &FIELDS[i], ret, first, first[0] ? 0 : sizeof first) < 0)
                        r = -EINVAL;
        if (dec_conditions(json_object_get(status, KEY_CONDITIONS), ret, first, first[0] ? 0 : sizeof first) < 0)
                r = -EINVAL;
        if (r < 0)
                snprintf(err, errlen, "%s", first);
        return r;
}

int nodeclaim_status_encode(const struct nodeclaim_status *base, const struct nodeclaim_status *st, json_t *status,
                            int64_t now_ms) {
        for (size_t i = 0; i < N_FIELDS; i++) {
                const struct field *f = &FIELDS[i];
                if (field_equal(f, base, st))
                        continue;
                if (f->kind->empty(cmember(st, f)))
                        json_object_del(status, f->key);
                else if (json_object_set_new(status, f->key, f->kind->encode(cmember(st, f))) < 0)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < st->n_conditions; i++) {
                const struct nodeclaim_condition *c = &st->conditions[i];
                if (condition_changed(base, c) &&
                    launcher_condition_set(status, c->type, c->status, c->reason, c->message, now_ms) < 0)
                        return -ENOMEM;
        }
        return 0;
}

void nodeclaim_status_rebase(const struct nodeclaim_status *base, struct nodeclaim_status *st,
                             const struct nodeclaim_status *fresh) {
        for (size_t i = 0; i < N_FIELDS; i++) {
                const struct field *f = &FIELDS[i];
                if (field_equal(f, base, st))
                        memcpy(member(st, f), cmember(fresh, f), f->len);
        }
        rebase_conditions(base, st, fresh);
}

/* ---- placement ---- */

void nodeclaim_set_placement(struct nodeclaim_status *st, const char *host, const char *region,
                             const struct shape *shape) {
        snprintf(st->host, sizeof st->host, "%s", host ? host : "");
        snprintf(st->region, sizeof st->region, "%s", region ? region : "");
        st->capacity = shape->capacity;
        st->allocatable = shape->allocatable;
}

json_t *nodeclaim_placement_status(const char *host, const char *region, const struct shape *shape) {
        static const struct nodeclaim_status empty;
        struct nodeclaim_status *st = calloc(1, sizeof *st);
        json_t *out = st ? json_object() : NULL;
        if (st)
                nodeclaim_set_placement(st, host, region, shape);
        if (out && nodeclaim_status_encode(&empty, st, out, 0) < 0) {
                json_decref(out);
                out = NULL;
        }
        free(st);
        return out;
}

/* ---- a claim's own JSON, where no status is decoded ---- */

int nodeclaim_claim_status(const json_t *claim, struct nodeclaim_status *ret, char *err, size_t errlen) {
        return nodeclaim_status_decode(json_object_get(claim, "status"), ret, err, errlen);
}

enum nodeclaim_step nodeclaim_claim_step(const json_t *claim) {
        enum nodeclaim_step step = NODECLAIM_STEP_NONE;
        nodeclaim_step_parse(kube_str(json_object_get(claim, "status"), KEY_LAUNCH_STEP), &step);
        return step;
}

/* status.<status_key>, else the single value of the claim's In requirement on label. */
static const char *claim_place(const json_t *claim, const char *status_key, const char *label) {
        const char *v = kube_str(json_object_get(claim, "status"), status_key);
        if (v && *v)
                return v;
        size_t i;
        json_t *req;
        json_array_foreach(kube_nodeclaim_of(claim).requirements, i, req) {
                const char *key = kube_str(req, "key"), *op = kube_str(req, "operator");
                json_t *values = json_object_get(req, "values");
                if (key && op && strcmp(key, label) == 0 && strcmp(op, "In") == 0 && json_array_size(values) == 1)
                        return json_string_value(json_array_get(values, 0));
        }
        return NULL;
}

const char *nodeclaim_host(const json_t *claim) {
        return claim_place(claim, KEY_HOST, SIM_LABEL_ZONE);
}

const char *nodeclaim_region(const json_t *claim) {
        return claim_place(claim, KEY_REGION, SIM_LABEL_REGION);
}

bool nodeclaim_is_replacement(const json_t *claim) {
        const char *old = kube_annotation(claim, NODECLAIM_ANNOTATION_REPLACES);
        return old && old[0];
}
