/* simulate_pools: which node pools a pod class can use: the pools' taints, the requirements a new node of a
 * pool can satisfy, and the shapes each of the class's terms allows (simulate_internal.h gives the files' order). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>

#include "simulate_internal.h"

bool simulate__tolerates_pool(struct ctx *c, struct pclass *pc, size_t pool) {
        if (!pc->pool_tol)
                pc->pool_tol = simulate__arena_alloc(c->arena, c->n_pools + 1);
        if (!pc->pool_tol) {
                c->error = -ENOMEM;
                return false;
        }
        if (!pc->pool_tol[pool]) {
                const struct sim_nodepool *p = c->pools[pool].src;
                bool ok = true;
                for (size_t t = 0; t < p->n_taints && ok; t++)
                        ok = simulate_tolerates(pc->example->tolerations, pc->example->n_tolerations, &p->taints[t]);
                pc->pool_tol[pool] = ok ? 1 : -1;
        }
        return pc->pool_tol[pool] > 0;
}

const uint64_t *simulate__term_mask(struct ctx *c, struct pclass *pc, int nc, uint32_t term) {
        size_t words = c->ncs[nc].words;
        if (!pc->term_masks)
                pc->term_masks = simulate__arena_alloc(c->arena, (c->n_ncs + 1) * sizeof(uint64_t *));
        if (!pc->term_masks) {
                c->error = -ENOMEM;
                return NULL;
        }
        if (!pc->term_masks[nc]) {
                uint64_t *m = simulate__arena_alloc(c->arena, (pc->n_terms * words + 1) * sizeof(uint64_t));
                if (!m) {
                        c->error = -ENOMEM;
                        return NULL;
                }
                for (uint32_t t = 0; t < pc->n_terms; t++)
                        simulate__shape_mask(c, nc, pc->terms[t].reqs, pc->terms[t].n, m + t * words);
                pc->term_masks[nc] = m;
        }
        return pc->term_masks[nc] + term * words;
}

static bool value_ok(const struct ctx *c, const struct reqlists *rl, uint32_t key, uint32_t v) {
        for (int i = 0; i < 3; i++)
                for (uint32_t j = 0; j < rl->n[i]; j++)
                        if (rl->l[i][j].key == key && !simulate__req_matches(c, &rl->l[i][j], v))
                                return false;
        return true;
}

uint32_t simulate__generic_value(const struct ctx *c, const struct reqlists *rl, uint32_t key, bool *ret_ok) {
        for (int i = 0; i < 3; i++)
                for (uint32_t j = 0; j < rl->n[i]; j++) {
                        const struct creq *r = &rl->l[i][j];
                        if (r->key != key || r->op != SIM_OP_IN)
                                continue;
                        for (uint32_t k = 0; k < r->n_vals; k++) {
                                if (value_ok(c, rl, key, r->vals[k])) {
                                        *ret_ok = true;
                                        return r->vals[k];
                                }
                        }
                        *ret_ok = false;
                        return 0;
                }
        *ret_ok = value_ok(c, rl, key, 0);
        return 0;
}

/* Like Karpenter, a new node only carries labels its pool defines: a key no requirement of the pool
 * (rl->l[0]) names stays absent. */
static bool pool_defines(const struct reqlists *rl, uint32_t key) {
        for (uint32_t j = 0; j < rl->n[0]; j++)
                if (rl->l[0][j].key == key)
                        return true;
        return false;
}

bool simulate__new_node_req_ok(const struct ctx *c, const struct creq *r, const struct kv *fixed, uint32_t n_fixed,
                               const struct reqlists *rl) {
        bool ok;
        if (r->key == c->k_host) /* present with a name nobody can know yet */
                return r->op == SIM_OP_NOT_IN || r->op == SIM_OP_EXISTS;
        if (r->key == c->k_itype || r->key == c->k_family)
                return true; /* shape masks */
        uint32_t v = simulate__label(fixed, n_fixed, r->key);
        if (v || r->key == c->k_zone || r->key == c->k_region || r->key == c->k_arch || r->key == c->k_os ||
            !pool_defines(rl, r->key))
                return simulate__req_matches(c, r, v);
        simulate__generic_value(c, rl, r->key, &ok);
        return ok;
}

bool simulate__mask_any(const uint64_t *a, const uint64_t *b, size_t words) {
        for (size_t w = 0; w < words; w++)
                if (a[w] & b[w])
                        return true;
        return false;
}

int simulate__pick_term(struct ctx *c, struct pclass *pc, const struct pool_c *p, uint64_t *mask, char *why,
                        size_t len) {
        size_t words = c->ncs[p->nc].words;
        char first[200] = "";
        for (uint32_t t = 0; t < pc->n_terms; t++) {
                const struct cterm *term = &pc->terms[t];
                struct reqlists rl = { { p->greqs, term->reqs, NULL }, { p->n_greqs, term->n, 0 } };
                const struct creq *bad = NULL;
                for (uint32_t i = 0; i < term->n && !bad; i++)
                        if (term->reqs[i].key != c->k_zone && term->reqs[i].key != c->k_region &&
                            !simulate__new_node_req_ok(c, &term->reqs[i], p->fixed, p->n_fixed, &rl))
                                bad = &term->reqs[i];
                const uint64_t *tm = bad ? NULL : simulate__term_mask(c, pc, p->nc, t);
                for (size_t k = 0; tm && k < words; k++)
                        mask[k] = p->mask[k] & tm[k];
                if (tm && simulate__mask_any(mask, mask, words))
                        return (int)t;
                for (uint32_t i = 0; !bad && i < term->n; i++)
                        if (term->reqs[i].key == c->k_itype || term->reqs[i].key == c->k_family)
                                bad = &term->reqs[i];
                if (t == 0 && bad)
                        simulate__describe_req(c, bad, first, sizeof first);
                else if (t == 0)
                        snprintf(first, sizeof first, "any instance type (NodePool %s allows none)", p->src->name);
        }
        if (why)
                snprintf(why, len, "no NodePool matches %s", first);
        return -1;
}

bool simulate__pool_compatible(struct ctx *c, struct pclass *pc, size_t pool) {
        const struct pool_c *p = &c->pools[pool];
        uint64_t mask[p->nc >= 0 ? c->ncs[p->nc].words + 1 : 1];
        return p->nc >= 0 && !p->bad && simulate__tolerates_pool(c, pc, pool) &&
               simulate__pick_term(c, pc, p, mask, NULL, 0) >= 0;
}
