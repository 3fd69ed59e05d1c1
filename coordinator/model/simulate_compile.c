/* simulate_compile: turns a simulation input into interned, indexed form: pod classes, counting groups,
 * node slots, node pools and node classes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simulate_internal.h"

/* ---- compiling ---- */

static void *scratch(struct ctx *c, size_t size) {
        void *p = simulate__arena_alloc(c->arena, size);
        if (!p)
                c->error = -ENOMEM;
        return p;
}

static int cmp_kv(const void *a, const void *b) {
        const struct kv *x = a, *y = b;
        return x->k < y->k ? -1 : x->k > y->k;
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return x < y ? -1 : x > y;
}

static struct kv *compile_labels(struct ctx *c, const struct sim_label *l, size_t n) {
        struct kv *out = scratch(c, (n + 1) * sizeof *out);
        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i++)
                out[i] = (struct kv){ simulate__intern(c, l[i].key), simulate__intern(c, l[i].value) };
        qsort(out, n, sizeof *out, cmp_kv);
        return out;
}

static void compile_req(struct ctx *c, const struct sim_requirement *r, bool from_ns, struct creq *out) {
        *out = (struct creq){ .key = simulate__intern(c, r->key), .op = r->op, .from_node_selector = from_ns };
        out->vals = scratch(c, (r->n_values + 1) * sizeof(uint32_t));
        if (!out->vals)
                return;
        for (size_t i = 0; i < r->n_values; i++)
                out->vals[i] = simulate__intern(c, r->values[i]);
        out->n_vals = (uint32_t)r->n_values;
        qsort(out->vals, out->n_vals, sizeof(uint32_t), cmp_u32);
        if ((r->op == SIM_OP_GT || r->op == SIM_OP_LT) &&
            (r->n_values != 1 || !simulate__parse_int(r->values[0], &out->num))) {
                out->op = SIM_OP_IN; /* an invalid bound matches nothing */
                out->n_vals = 0;
        }
}

static void compile_selector(struct ctx *c, const struct sim_selector *s, struct cselector *out) {
        out->none = s->match_none;
        out->ml = compile_labels(c, s->match_labels, s->n_match_labels);
        out->n_ml = (uint32_t)s->n_match_labels;
        out->ex = scratch(c, (s->n_exprs + 1) * sizeof(struct creq));
        out->n_ex = (uint32_t)s->n_exprs;
        for (size_t i = 0; out->ex && i < s->n_exprs; i++)
                compile_req(c, &s->exprs[i], false, &out->ex[i]);
}

/* nodeSelector ANDed into each required node affinity term (or alone). */
static void compile_terms(struct ctx *c, const struct sim_pod *p, struct pclass *pc) {
        size_t nt = p->n_affinity ? p->n_affinity : 1;
        pc->terms = scratch(c, nt * sizeof(struct cterm));
        pc->n_terms = (uint32_t)nt;
        for (size_t t = 0; pc->terms && t < nt; t++) {
                const struct sim_node_term *src = p->n_affinity ? &p->affinity[t] : NULL;
                size_t n = p->n_node_selector + (src ? src->n_reqs : 0);
                struct creq *reqs = scratch(c, (n + 1) * sizeof *reqs);
                if (!reqs)
                        return;
                for (size_t i = 0; i < p->n_node_selector; i++) {
                        const char *v = p->node_selector[i].value;
                        struct sim_requirement r = { p->node_selector[i].key, SIM_OP_IN, &v, 1 };
                        compile_req(c, &r, true, &reqs[i]);
                }
                for (size_t i = 0; src && i < src->n_reqs; i++)
                        compile_req(c, &src->reqs[i], false, &reqs[p->n_node_selector + i]);
                pc->terms[t] = (struct cterm){ reqs, (uint32_t)n };
        }
}

/* Canonical text of anything that makes two pods differ for scheduling, names and requests aside. */
struct sigbuf {
        char *s;
        size_t n, cap;
};

/* The decimal digits of v into the end of t (24 bytes); returns where they start. */
static char *sig_digits(char *t, uint64_t v) {
        char *p = t + 24;
        do
                *--p = (char)('0' + v % 10);
        while ((v /= 10) > 0);
        return p;
}

/* "len:s|", as snprintf's "%zu:%s|" but without its cost: one call per label of every pod. */
static void sig_put(struct sigbuf *b, const char *s) {
        size_t len = s ? strlen(s) : 0;
        char t[24];
        const char *d = sig_digits(t, len);
        size_t nd = (size_t)(t + sizeof t - d);
        if (b->n + len + 24 > b->cap && simulate__grow(&b->s, &b->cap, b->n + len + 24, 1) < 0)
                return;
        memcpy(b->s + b->n, d, nd);
        b->s[b->n + nd] = ':';
        memcpy(b->s + b->n + nd + 1, s ? s : "", len);
        b->s[b->n + nd + 1 + len] = '|';
        b->s[b->n + nd + 2 + len] = '\0';
        b->n += nd + 2 + len;
}

static void sig_int(struct sigbuf *b, int64_t v) {
        char t[25];
        char *d = sig_digits(t, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
        if (v < 0)
                *--d = '-';
        t[24] = '\0';
        sig_put(b, d);
}

static void sig_reqs(struct sigbuf *b, const struct sim_requirement *r, size_t n) {
        sig_int(b, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
                sig_put(b, r[i].key);
                sig_int(b, r[i].op);
                sig_int(b, (int64_t)r[i].n_values);
                for (size_t j = 0; j < r[i].n_values; j++)
                        sig_put(b, r[i].values[j]);
        }
}

static void sig_labels(struct sigbuf *b, const struct sim_label *l, size_t n) {
        sig_int(b, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
                sig_put(b, l[i].key);
                sig_put(b, l[i].value);
        }
}

static void sig_selector(struct sigbuf *b, const struct sim_selector *s) {
        sig_int(b, s->match_none);
        sig_labels(b, s->match_labels, s->n_match_labels);
        sig_reqs(b, s->exprs, s->n_exprs);
}

static void sig_pod_terms(struct sigbuf *b, const struct sim_pod_term *t, size_t n) {
        sig_int(b, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
                sig_selector(b, &t[i].selector);
                sig_put(b, t[i].topology_key);
                sig_int(b, (int64_t)t[i].n_namespaces);
                for (size_t j = 0; j < t[i].n_namespaces; j++)
                        sig_put(b, t[i].namespaces[j]);
        }
}

static bool key_selected(struct ctx *c, const char *key) {
        uint32_t id = simulate__intern(c, key);
        return id < c->selected_key_cap && c->selected_key[id];
}

/* Only labels some selector reads tell pods apart: a StatefulSet's per-pod labels do not split classes. */
static void sig_selected_labels(struct ctx *c, struct sigbuf *b, const struct sim_label *l, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (key_selected(c, l[i].key)) {
                        sig_put(b, l[i].key);
                        sig_put(b, l[i].value);
                }
        sig_put(b, "/");
}

static void pod_signature(struct ctx *c, const struct sim_pod *p, struct sigbuf *b) {
        b->n = 0;
        sig_put(b, p->namespace);
        sig_selected_labels(c, b, p->labels, p->n_labels);
        sig_labels(b, p->node_selector, p->n_node_selector);
        sig_int(b, (int64_t)p->n_affinity);
        for (size_t i = 0; i < p->n_affinity; i++)
                sig_reqs(b, p->affinity[i].reqs, p->affinity[i].n_reqs);
        sig_int(b, (int64_t)p->n_tolerations);
        for (size_t i = 0; i < p->n_tolerations; i++) {
                sig_put(b, p->tolerations[i].key);
                sig_put(b, p->tolerations[i].value);
                sig_int(b, p->tolerations[i].exists * 16 + p->tolerations[i].effect);
        }
        sig_pod_terms(b, p->pod_affinity, p->n_pod_affinity);
        sig_pod_terms(b, p->pod_anti_affinity, p->n_pod_anti_affinity);
        sig_int(b, (int64_t)p->n_spread);
        for (size_t i = 0; i < p->n_spread; i++) {
                const struct sim_spread *s = &p->spread[i];
                sig_put(b, s->topology_key);
                sig_int(b, s->max_skew * 4 + s->do_not_schedule);
                sig_int(b, s->min_domains);
                sig_selector(b, &s->selector);
        }
        sig_put(b, p->unschedulable_reason);
        sig_int(b, p->skip_nodes);
        sig_int(b, (int64_t)p->n_host_ports);
        for (size_t i = 0; i < p->n_host_ports; i++)
                sig_int(b, p->host_ports[i]);
}

static int map_set(uint32_t **map, size_t *cap, uint32_t id, uint32_t value) {
        if (simulate__grow(map, cap, (size_t)id + 1, sizeof(uint32_t)) < 0)
                return -ENOMEM;
        (*map)[id] = value;
        return 0;
}

/* The group counting pods in namespaces ns (sorted ids) that match sel; created on first use. */
static uint32_t group_for(struct ctx *c, uint32_t *ns, uint32_t n_ns, const struct sim_selector *sel) {
        struct sigbuf b = { 0 };
        for (uint32_t i = 0; i < n_ns; i++)
                sig_put(&b, simulate__str(c, ns[i]));
        sig_put(&b, "/");
        sig_selector(&b, sel);
        uint32_t id = b.s ? simulate__intern(c, b.s) : 0;
        free(b.s);
        if (!id) {
                c->error = -ENOMEM;
                return 0;
        }
        if (id < c->group_of_sig_cap && c->group_of_sig[id])
                return c->group_of_sig[id] - 1;
        if (simulate__grow(&c->groups, &c->cap_groups, c->n_groups + 1, sizeof(struct group)) < 0 ||
            map_set(&c->group_of_sig, &c->group_of_sig_cap, id, (uint32_t)c->n_groups + 1) < 0) {
                c->error = -ENOMEM;
                return 0;
        }
        struct group *g = &c->groups[c->n_groups];
        *g = (struct group){ .ns = ns, .n_ns = n_ns, .src = sel };
        compile_selector(c, sel, &g->sel);
        return (uint32_t)c->n_groups++;
}

static int topo_of(const char *key, enum topo *ret) {
        if (key && strcmp(key, SIM_LABEL_HOSTNAME) == 0) {
                *ret = TOPO_HOST;
                return 0;
        }
        if (key && strcmp(key, SIM_LABEL_ZONE) == 0) {
                *ret = TOPO_ZONE;
                return 0;
        }
        return -EINVAL;
}

static uint32_t *term_namespaces(struct ctx *c, const struct sim_pod_term *t, uint32_t own, uint32_t *ret_n) {
        size_t n = t->n_namespaces ? t->n_namespaces : 1;
        uint32_t *ns = scratch(c, n * sizeof *ns);
        if (!ns)
                return NULL;
        for (size_t i = 0; i < t->n_namespaces; i++)
                ns[i] = simulate__intern(c, t->namespaces[i]);
        if (!t->n_namespaces)
                ns[0] = own;
        qsort(ns, n, sizeof *ns, cmp_u32);
        *ret_n = (uint32_t)n;
        return ns;
}

static void unsupported(struct ctx *c, struct pclass *pc, const char *what, const char *key) {
        snprintf(c->msg, sizeof c->msg, "%s topologyKey %s is not supported (use %s or %s)", what, key ? key : "",
                 SIM_LABEL_HOSTNAME, SIM_LABEL_ZONE);
        if (!pc->unsupported)
                pc->unsupported = simulate__arena_strdup(c->arena, c->msg);
}

static struct topo_term *compile_pod_terms(struct ctx *c, struct pclass *pc, const struct sim_pod_term *t,
                                           size_t n, const char *what) {
        struct topo_term *out = scratch(c, (n + 1) * sizeof *out);
        for (size_t i = 0; out && i < n; i++) {
                uint32_t n_ns = 0;
                uint32_t *ns = term_namespaces(c, &t[i], pc->ns, &n_ns);
                if (!ns)
                        return NULL;
                if (topo_of(t[i].topology_key, &out[i].topo) < 0)
                        unsupported(c, pc, what, t[i].topology_key);
                out[i].group = group_for(c, ns, n_ns, &t[i].selector);
                out[i].src = &t[i];
        }
        return out;
}

static void compile_spread(struct ctx *c, struct pclass *pc, const struct sim_pod *p) {
        pc->spread = scratch(c, (p->n_spread + 1) * sizeof(struct spread_term));
        pc->n_spread = (uint32_t)p->n_spread;
        for (size_t i = 0; pc->spread && i < p->n_spread; i++) {
                const struct sim_spread *s = &p->spread[i];
                struct spread_term *st = &pc->spread[i];
                uint32_t *ns = scratch(c, sizeof *ns);
                if (!ns)
                        return;
                ns[0] = pc->ns;
                *st = (struct spread_term){ .max_skew = s->max_skew > 0 ? s->max_skew : 1,
                                            .min_domains = s->min_domains, .hard = s->do_not_schedule, .src = s };
                if (topo_of(s->topology_key, &st->topo) < 0)
                        unsupported(c, pc, "topology spread", s->topology_key);
                st->group = group_for(c, ns, 1, &s->selector);
                pc->has_soft |= !s->do_not_schedule;
        }
}

static struct kv *compile_selected_labels(struct ctx *c, const struct sim_label *l, size_t n, uint32_t *ret_n) {
        struct kv *out = scratch(c, (n + 1) * sizeof *out);
        uint32_t k = 0;
        for (size_t i = 0; out && i < n; i++)
                if (key_selected(c, l[i].key))
                        out[k++] = (struct kv){ simulate__intern(c, l[i].key), simulate__intern(c, l[i].value) };
        if (out)
                qsort(out, k, sizeof *out, cmp_kv);
        *ret_n = k;
        return out;
}

static void select_keys(struct ctx *c, const struct sim_selector *sel) {
        for (size_t i = 0; i < sel->n_match_labels + sel->n_exprs; i++) {
                bool from_labels = i < sel->n_match_labels;
                const char *key = from_labels ? sel->match_labels[i].key : sel->exprs[i - sel->n_match_labels].key;
                uint32_t id = simulate__intern(c, key);
                if (!id || simulate__grow(&c->selected_key, &c->selected_key_cap, (size_t)id + 1, 1) < 0) {
                        c->error = -ENOMEM;
                        return;
                }
                c->selected_key[id] = 1;
        }
}

static void select_pod_keys(struct ctx *c, const struct sim_pod *p) {
        for (size_t i = 0; i < p->n_pod_affinity; i++)
                select_keys(c, &p->pod_affinity[i].selector);
        for (size_t i = 0; i < p->n_pod_anti_affinity; i++)
                select_keys(c, &p->pod_anti_affinity[i].selector);
        for (size_t i = 0; i < p->n_spread; i++)
                select_keys(c, &p->spread[i].selector);
}

static uint32_t class_for(struct ctx *c, const struct sim_pod *p, struct sigbuf *b) {
        pod_signature(c, p, b);
        uint32_t id = b->s ? simulate__intern(c, b->s) : 0;
        if (!id) {
                c->error = -ENOMEM;
                return 0;
        }
        if (id < c->class_of_sig_cap && c->class_of_sig[id])
                return c->class_of_sig[id] - 1;
        if (simulate__grow(&c->classes, &c->cap_classes, c->n_classes + 1, sizeof(struct pclass)) < 0 ||
            map_set(&c->class_of_sig, &c->class_of_sig_cap, id, (uint32_t)c->n_classes + 1) < 0) {
                c->error = -ENOMEM;
                return 0;
        }
        struct pclass *pc = &c->classes[c->n_classes];
        *pc = (struct pclass){ .example = p, .ns = simulate__intern(c, p->namespace) };
        pc->labels = compile_selected_labels(c, p->labels, p->n_labels, &pc->n_labels);
        compile_terms(c, p, pc);
        pc->aff = compile_pod_terms(c, pc, p->pod_affinity, p->n_pod_affinity, "pod affinity");
        pc->n_aff = (uint32_t)p->n_pod_affinity;
        pc->anti = compile_pod_terms(c, pc, p->pod_anti_affinity, p->n_pod_anti_affinity, "pod anti-affinity");
        pc->n_anti = (uint32_t)p->n_pod_anti_affinity;
        compile_spread(c, pc, p);
        if (p->unschedulable_reason)
                pc->unsupported = p->unschedulable_reason;
        return (uint32_t)c->n_classes++;
}

static bool group_has_ns(const struct group *g, uint32_t ns) {
        for (uint32_t i = 0; i < g->n_ns; i++)
                if (g->ns[i] == ns)
                        return true;
        return false;
}

static bool is_member(const struct pclass *pc, uint32_t group) {
        for (uint32_t i = 0; i < pc->n_member; i++)
                if (pc->member[i] == group)
                        return true;
        return false;
}

/* Per-slot counts cost groups x slots of memory: only the groups a hostname term reads get them. */
static void mark_per_node(struct ctx *c, const struct pclass *pc) {
        for (uint32_t t = 0; t < pc->n_aff; t++)
                c->groups[pc->aff[t].group].per_node |= pc->aff[t].topo == TOPO_HOST;
        for (uint32_t t = 0; t < pc->n_anti; t++) {
                c->groups[pc->anti[t].group].per_node |= pc->anti[t].topo == TOPO_HOST;
                c->groups[pc->anti[t].group].per_node_anti |= pc->anti[t].topo == TOPO_HOST;
        }
        for (uint32_t t = 0; t < pc->n_spread; t++)
                c->groups[pc->spread[t].group].per_node |= pc->spread[t].topo == TOPO_HOST;
}

static void compile_membership(struct ctx *c) {
        for (size_t i = 0; i < c->n_classes && !c->error; i++) {
                struct pclass *pc = &c->classes[i];
                pc->member = scratch(c, (c->n_groups + 1) * sizeof(uint32_t));
                for (size_t g = 0; pc->member && g < c->n_groups; g++)
                        if (group_has_ns(&c->groups[g], pc->ns) &&
                            simulate__selector_matches(c, &c->groups[g].sel, pc->labels, pc->n_labels))
                                pc->member[pc->n_member++] = (uint32_t)g;
                for (uint32_t t = 0; t < pc->n_aff; t++)
                        pc->aff[t].self = is_member(pc, pc->aff[t].group);
                for (uint32_t t = 0; t < pc->n_anti; t++)
                        pc->anti[t].self = is_member(pc, pc->anti[t].group);
                for (uint32_t t = 0; t < pc->n_spread; t++)
                        pc->spread[t].self = is_member(pc, pc->spread[t].group);
                mark_per_node(c, pc);
        }
}

static int compile_classes(struct ctx *c) {
        struct sigbuf b = { 0 };
        const struct sim_input *in = c->in;
        c->class_of_pod = calloc(in->n_pods + 1, sizeof(uint32_t));
        if (!c->class_of_pod)
                return -ENOMEM;
        for (size_t i = 0; i < in->n_pods; i++)
                select_pod_keys(c, in->pods[i]);
        for (size_t i = 0; i < in->n_pods && !c->error; i++)
                c->class_of_pod[i] = class_for(c, in->pods[i], &b);
        free(b.s);
        compile_membership(c);
        return c->error;
}

/* ---- slots and counting ---- */

static int ensure_counts(struct ctx *c, size_t slots) {
        if (slots <= c->counts_cap)
                return 0;
        size_t cap = c->counts_cap ? c->counts_cap : 64;
        while (cap < slots)
                cap *= 2;
        for (size_t g = 0; g < c->n_groups; g++) {
                struct group *gr = &c->groups[g];
                size_t old = c->counts_cap, old2 = c->counts_cap;
                if ((gr->per_node && simulate__grow(&gr->node_cnt, &old, cap, sizeof(int32_t)) < 0) ||
                    (gr->per_node_anti && simulate__grow(&gr->anti_node, &old2, cap, sizeof(int32_t)) < 0))
                        return c->error = -ENOMEM;
        }
        c->counts_cap = cap;
        return 0;
}

static int ensure_zone_counts(struct ctx *c) {
        for (size_t g = 0; g < c->n_groups; g++) {
                struct group *gr = &c->groups[g];
                gr->zone_cnt = scratch(c, (c->n_zones + 1) * sizeof(int32_t));
                gr->anti_zone = scratch(c, (c->n_zones + 1) * sizeof(int32_t));
        }
        return c->error;
}

int simulate__add_slot(struct ctx *c, struct slot **ret) {
        if (simulate__grow(&c->slots, &c->cap_slots, c->n_slots + 1, sizeof(struct slot)) < 0 ||
            ensure_counts(c, c->n_slots + 1) < 0)
                return c->error = -ENOMEM;
        for (size_t i = 0; c->fail_cap < c->n_slots + 1 && i < c->n_classes; i++) {
                struct pclass *pc = &c->classes[i];
                if (simulate__grow(&pc->slot_fail, &pc->slot_fail_cap, c->cap_slots, 1) < 0)
                        return c->error = -ENOMEM;
        }
        if (c->fail_cap < c->n_slots + 1)
                c->fail_cap = c->cap_slots;
        *ret = &c->slots[c->n_slots++];
        **ret = (struct slot){ .zone = -1 };
        return 0;
}

/* A pod of class pc lands on (delta 1) or leaves (-1) slot. */
void simulate__count_pod(struct ctx *c, const struct pclass *pc, size_t slot, int delta) {
        int32_t zone = c->slots[slot].zone;
        for (uint32_t i = 0; i < pc->n_member; i++) {
                struct group *g = &c->groups[pc->member[i]];
                if (g->node_cnt)
                        g->node_cnt[slot] += delta;
                g->total += delta;
                if (zone >= 0)
                        g->zone_cnt[zone] += delta;
        }
        for (uint32_t i = 0; i < pc->n_anti; i++) {
                struct group *g = &c->groups[pc->anti[i].group];
                if (pc->anti[i].topo == TOPO_HOST)
                        g->anti_node[slot] += delta;
                else if (zone >= 0)
                        g->anti_zone[zone] += delta;
        }
}

static int add_node_slot(struct ctx *c, size_t i) {
        const struct sim_node *n = c->in->nodes[i];
        struct slot *s;
        if (simulate__add_slot(c, &s) < 0)
                return c->error;
        s->kind = n->in_flight ? SLOT_INFLIGHT : SLOT_NODE;
        s->index = i;
        s->labels = compile_labels(c, n->labels, n->n_labels);
        s->n_labels = (uint32_t)n->n_labels;
        s->taints = n->taints;
        s->n_taints = n->n_taints;
        s->alloc = n->allocatable;
        s->used = n->reserved;
        s->closed = n->unschedulable;
        s->zone = s->labels ? simulate__zone_index(c, simulate__label(s->labels, s->n_labels, c->k_zone), true) : -1;
        return c->error;
}

/* Existing nodes first, then in-flight claims: the order pods try them in. */
static int compile_nodes(struct ctx *c) {
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < c->in->n_nodes; i++)
                        if (c->in->nodes[i]->in_flight == (pass == 1) && add_node_slot(c, i) < 0)
                                return c->error;
        return 0;
}

/* ---- node classes and node pools ---- */

static int compile_nodeclasses(struct ctx *c) {
        c->ncs = scratch(c, (c->in->n_classes + 1) * sizeof(struct nodeclass_c));
        if (!c->ncs)
                return c->error;
        for (size_t i = 0; i < c->in->n_classes; i++) {
                const struct sim_nodeclass *src = c->in->classes[i];
                struct nodeclass_c *nc = &c->ncs[i];
                nc->src = src;
                nc->shapes = src->shapes;
                nc->region = simulate__intern(c, src->region);
                nc->words = src->shapes ? (src->shapes->n + 63) / 64 : 0;
        }
        c->n_ncs = c->in->n_classes;
        return c->error;
}

static int find_nodeclass(const struct ctx *c, const char *name) {
        for (size_t i = 0; name && i < c->n_ncs; i++)
                if (strcmp(c->ncs[i].src->name, name) == 0)
                        return (int)i;
        return -1;
}

static bool shape_matches(struct ctx *c, const struct creq *r, const struct shape *s) {
        const char *v = r->key == c->k_itype ? s->name : s->family;
        return simulate__req_matches(c, r, simulate__intern(c, v));
}

void simulate__shape_mask(struct ctx *c, int nc, const struct creq *reqs, uint32_t n, uint64_t *mask) {
        const struct shape_catalog *cat = c->ncs[nc].shapes;
        memset(mask, 0, c->ncs[nc].words * sizeof(uint64_t));
        for (size_t s = 0; cat && s < cat->n; s++) {
                bool ok = true;
                for (uint32_t i = 0; i < n && ok; i++)
                        if (reqs[i].key == c->k_itype || reqs[i].key == c->k_family)
                                ok = shape_matches(c, &reqs[i], &cat->items[s]);
                if (ok)
                        mask[s / 64] |= 1ULL << (s % 64);
        }
}

static struct kv *pool_fixed_labels(struct ctx *c, const struct sim_nodepool *p, uint32_t *ret_n) {
        size_t n = p->n_labels + 6;
        struct kv *l = scratch(c, n * sizeof *l);
        if (!l)
                return NULL;
        uint32_t k = 0;
        for (size_t i = 0; i < p->n_labels; i++)
                l[k++] = (struct kv){ simulate__intern(c, p->labels[i].key), simulate__intern(c, p->labels[i].value) };
        l[k++] = (struct kv){ c->k_arch, c->v_arch };
        l[k++] = (struct kv){ c->k_os, c->v_os };
        l[k++] = (struct kv){ c->k_pool, simulate__intern(c, p->name) };
        l[k++] = (struct kv){ c->k_class, simulate__intern(c, p->nodeclass) };
        l[k++] = (struct kv){ c->k_ctype, c->v_ondemand };
        qsort(l, k, sizeof *l, cmp_kv);
        *ret_n = k;
        return l;
}

/* Sort a pool requirement into host filters, shape filters, fixed-label checks and generic requirements. */
static void classify_pool_req(struct ctx *c, struct pool_c *pc, const struct creq *r) {
        if (r->key == c->k_zone || r->key == c->k_region) {
                pc->zreqs[pc->n_zreqs++] = *r;
        } else if (r->key == c->k_itype || r->key == c->k_family) {
                return; /* folded into the mask */
        } else if (r->key == c->k_host) {
                if (!pc->bad && !simulate__req_matches(c, r, 0))
                        pc->bad = "requires a hostname, which a new node cannot have";
        } else if (simulate__label(pc->fixed, pc->n_fixed, r->key) || r->key == c->k_arch || r->key == c->k_os) {
                if (!pc->bad && !simulate__req_matches(c, r, simulate__label(pc->fixed, pc->n_fixed, r->key))) {
                        char d[200];
                        simulate__describe_req(c, r, d, sizeof d);
                        snprintf(c->msg, sizeof c->msg, "requires %s, which its nodes cannot have", d);
                        pc->bad = simulate__arena_strdup(c->arena, c->msg);
                }
        } else {
                pc->greqs[pc->n_greqs++] = *r;
        }
}

static void pool_usage(struct ctx *c, struct pool_c *pc) {
        for (size_t i = 0; i < c->in->n_nodes; i++) {
                const struct sim_node *n = c->in->nodes[i];
                if (!n->nodepool || n->leaving || strcmp(n->nodepool, pc->src->name) != 0)
                        continue;
                pc->used_cpu += n->capacity.v[RESOURCE_CPU];
                pc->used_mem += n->capacity.v[RESOURCE_MEMORY];
                pc->used_nodes++;
        }
}

static int compile_pool(struct ctx *c, size_t i) {
        const struct sim_nodepool *p = c->in->pools[i];
        struct pool_c *pc = &c->pools[i];
        *pc = (struct pool_c){ .src = p, .index = i, .nc = find_nodeclass(c, p->nodeclass) };
        pc->fixed = pool_fixed_labels(c, p, &pc->n_fixed);
        struct creq *all = scratch(c, (p->n_reqs + 1) * sizeof *all);
        pc->zreqs = scratch(c, (p->n_reqs + 1) * sizeof *all);
        pc->greqs = scratch(c, (p->n_reqs + 1) * sizeof *all);
        if (!all || !pc->zreqs || !pc->greqs || !pc->fixed)
                return c->error;
        for (size_t r = 0; r < p->n_reqs; r++) {
                compile_req(c, &p->reqs[r], false, &all[r]);
                classify_pool_req(c, pc, &all[r]);
        }
        if (pc->nc >= 0) {
                pc->mask = scratch(c, (c->ncs[pc->nc].words + 1) * sizeof(uint64_t));
                if (pc->mask)
                        simulate__shape_mask(c, pc->nc, all, (uint32_t)p->n_reqs, pc->mask);
        }
        pool_usage(c, pc);
        return c->error;
}

static int compile_pools(struct ctx *c) {
        size_t n = c->in->n_pools;
        c->pools = scratch(c, (n + 1) * sizeof(struct pool_c));
        c->pool_order = scratch(c, (n + 1) * sizeof(size_t));
        if (!c->pools || !c->pool_order)
                return c->error;
        for (size_t i = 0; i < n; i++)
                if (compile_pool(c, i) < 0)
                        return c->error;
        c->n_pools = n;
        for (size_t i = 0; i < n; i++)
                c->pool_order[i] = i;
        /* insertion sort keeps this reentrant without a global comparator context */
        for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                        const struct sim_nodepool *x = c->pools[c->pool_order[j - 1]].src;
                        const struct sim_nodepool *y = c->pools[c->pool_order[j]].src;
                        if (x->weight > y->weight ||
                            (x->weight == y->weight && strcmp(x->name ? x->name : "", y->name ? y->name : "") <= 0))
                                break;
                        size_t t = c->pool_order[j];
                        c->pool_order[j] = c->pool_order[j - 1];
                        c->pool_order[j - 1] = t;
                }
        return 0;
}

static void intern_well_known(struct ctx *c) {
        c->k_host = simulate__intern(c, SIM_LABEL_HOSTNAME);
        c->k_zone = simulate__intern(c, SIM_LABEL_ZONE);
        c->k_region = simulate__intern(c, SIM_LABEL_REGION);
        c->k_arch = simulate__intern(c, SIM_LABEL_ARCH);
        c->k_os = simulate__intern(c, SIM_LABEL_OS);
        c->k_itype = simulate__intern(c, SIM_LABEL_INSTANCE_TYPE);
        c->k_family = simulate__intern(c, SIM_LABEL_FAMILY);
        c->k_pool = simulate__intern(c, SIM_LABEL_NODEPOOL);
        c->k_class = simulate__intern(c, SIM_LABEL_NODECLASS);
        c->k_ctype = simulate__intern(c, SIM_LABEL_CAPACITY_TYPE);
        c->v_arch = simulate__intern(c, c->in->arch ? c->in->arch : "amd64");
        c->v_os = simulate__intern(c, c->in->os ? c->in->os : "linux");
        c->v_ondemand = simulate__intern(c, "on-demand");
}

int simulate__compile(struct ctx *c) {
        intern_well_known(c);
        if (c->error || compile_nodeclasses(c) < 0 || compile_classes(c) < 0 || compile_pools(c) < 0)
                return c->error ? c->error : -ENOMEM;
        for (size_t h = 0; h < c->in->n_hosts; h++)
                simulate__zone_index(c, simulate__intern(c, c->in->hosts[h]->name), true);
        if (compile_nodes(c) < 0 || ensure_zone_counts(c) < 0)
                return c->error;
        return simulate__prepare_hosts(c);
}
