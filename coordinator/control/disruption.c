/* disruption: the control loop's scale-down pass: decide on one snapshot of the cache (coordinator/disrupt), check
 * the decisions again on a fresh one a pass later, and carry out those that still hold (Events on the NodeClaim and
 * the Node, then the NodeClaim deleted: its finalizer drains the Node and removes the VM). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "disruption.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "log.h"
#include "stats.h"

#define COMPONENT "pvescale-coordinator"
#define PLAN_MAX 64    /* decisions kept for the next pass */
#define KEY_MAX 2048   /* "pool|method|claim,claim,..." */

struct disruption {
        struct disruption_env env;
        char *plan[PLAN_MAX]; /* the keys of the last pass's decisions, to be carried out when they still hold */
        size_t n_plan;
        json_t *told;         /* claim name -> the last "left alone" message sent as an Event */
};

int disruption_new(const struct disruption_env *env, struct disruption **ret) {
        struct disruption *d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->env = *env;
        d->told = json_object();
        if (!d->told) {
                free(d);
                return -ENOMEM;
        }
        *ret = d;
        return 0;
}

static void plan_clear(struct disruption *d) {
        for (size_t i = 0; i < d->n_plan; i++)
                free(d->plan[i]);
        d->n_plan = 0;
}

void disruption_free(struct disruption *d) {
        if (!d)
                return;
        plan_clear(d);
        json_decref(d->told);
        free(d);
}

/* ---- decisions as keys ---- */

/* A decision's identity: its pool, method and NodeClaims (in the order the decision names them). */
static void decision_key(const struct disruption_input *di, const struct disrupt_decision *dec, char *buf,
                         size_t len) {
        int n = snprintf(buf, len, "%s|%s|", di->pools[dec->pool].name, disrupt_method_name(dec->method));
        for (size_t k = 0; k < dec->n_candidates && n > 0 && (size_t)n < len; k++)
                n += snprintf(buf + n, len - (size_t)n, "%s,", di->candidates[dec->candidates[k]].claim);
}

static bool planned(const struct disruption *d, const char *key) {
        for (size_t i = 0; i < d->n_plan; i++)
                if (strcmp(d->plan[i], key) == 0)
                        return true;
        return false;
}

static enum stats_disruption_method stats_method(enum disrupt_method m) {
        switch (m) {
        case DISRUPT_METHOD_EMPTINESS: return STATS_DISRUPTION_EMPTINESS;
        case DISRUPT_METHOD_DRIFT: return STATS_DISRUPTION_DRIFT;
        case DISRUPT_METHOD_EXPIRY: return STATS_DISRUPTION_EXPIRY;
        case DISRUPT_METHOD_REPAIR: return STATS_DISRUPTION_REPAIR;
        case DISRUPT_METHOD_MULTI_NODE: return STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION;
        default: return STATS_DISRUPTION_CONSOLIDATION;
        }
}

/* ---- carrying a decision out ---- */

static void tell(struct disruption *d, const json_t *claim, const json_t *node, const char *type, const char *reason,
                 const char *message) {
        if (kube_event_emit(d->env.kube, &kube_nodeclaims, claim, type, reason, message, COMPONENT) < 0 ||
            (node && kube_event_emit(d->env.kube, &kube_nodes, node, type, reason, message, COMPONENT) < 0))
                log_warning("disruption: cannot record the event \"%s\": %s", message, kube_client_error(d->env.kube));
}

/* Delete the decision's NodeClaims (their finalizer drains and terminates them), each with its Events. */
static int carry_out(struct disruption *d, const struct disruption_input *di, const struct disrupt_decision *dec) {
        for (size_t k = 0; k < dec->n_candidates; k++) {
                size_t i = dec->candidates[k];
                const char *name = di->candidates[i].claim;
                struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
                o.precondition_uid = json_string_value(json_object_get(json_object_get(di->claims[i], "metadata"), "uid"));
                tell(d, di->claims[i], di->nodes[i], "Normal", "DisruptionTerminating", dec->message);
                int r = kube_delete(d->env.kube, &kube_nodeclaims, NULL, name, &o, NULL);
                if (r < 0 && r != -ENOENT)
                        return log_error_errno(r, "disruption: cannot delete NodeClaim %s: %s", name,
                                               kube_client_error(d->env.kube));
                log_info("disruption: NodeClaim %s: %s", name, dec->message);
        }
        stats_disruption_action(d->env.stats, stats_method(dec->method), STATS_DISRUPTION_DELETE);
        return 0;
}

/* Candidates left alone: an Event each time the reason changes (not every pass). */
static void tell_skips(struct disruption *d, const struct disruption_input *di, const struct disrupt_result *res) {
        for (size_t s = 0; s < res->n_skips; s++) {
                size_t i = res->skips[s].candidate;
                const char *name = di->candidates[i].claim, *msg = res->skips[s].message;
                const char *was = json_string_value(json_object_get(d->told, name));
                if (was && strcmp(was, msg) == 0)
                        continue;
                json_object_set_new(d->told, name, json_string(msg));
                tell(d, di->claims[i], di->nodes[i], "Normal", "DisruptionBlocked", msg);
        }
}

/* ---- one pass ---- */

static void act(struct disruption *d, const struct disruption_input *di, const struct disrupt_result *res,
                struct disruption_outcome *out) {
        char key[KEY_MAX];
        size_t n_plan = d->n_plan;
        for (size_t j = 0; j < res->n_decisions; j++) {
                const struct disrupt_decision *dec = &res->decisions[j];
                decision_key(di, dec, key, sizeof key);
                stats_disruption_decision(d->env.stats, stats_method(dec->method),
                                          dec->n_replacements ? STATS_DISRUPTION_REPLACE : STATS_DISRUPTION_DELETE);
                if (dec->n_replacements == 0 && planned(d, key) && carry_out(d, di, dec) == 0) {
                        out->carried_out++;
                        n_plan--;
                }
        }
        out->stale = n_plan; /* decided last pass, no longer decided on fresh state: dropped */
}

/* Keep this pass's decisions that were not carried out for the next pass to check. */
static void replan(struct disruption *d, const struct disruption_input *di, const struct disrupt_result *res) {
        char key[KEY_MAX];
        bool done[PLAN_MAX] = { false };
        size_t n = 0;
        for (size_t j = 0; j < res->n_decisions && j < PLAN_MAX; j++) {
                decision_key(di, &res->decisions[j], key, sizeof key);
                done[j] = planned(d, key);
        }
        plan_clear(d);
        for (size_t j = 0; j < res->n_decisions && n < PLAN_MAX; j++) {
                if (done[j] || res->decisions[j].n_replacements)
                        continue;
                decision_key(di, &res->decisions[j], key, sizeof key);
                d->plan[n] = strdup(key);
                n += d->plan[n] != NULL;
        }
        d->n_plan = n;
}

int disruption_pass(struct disruption *d, const struct provisioner_snapshot *snap, int64_t now_ms,
                    struct disruption_outcome *ret) {
        struct disruption_input *di = NULL;
        struct disrupt_result *res = NULL;
        struct disruption_outcome out = { 0 };
        int r = disruption_input_new(snap, now_ms, d->env.repair, &di);
        if (r == 0)
                r = disrupt_decide(&di->in, &res);
        if (r < 0) {
                disruption_input_free(di);
                return r;
        }
        out.candidates = di->n_candidates;
        out.decided = res->n_decisions;
        out.blocked = res->n_skips;
        act(d, di, res, &out);
        replan(d, di, res);
        tell_skips(d, di, res);
        disrupt_result_free(res);
        disruption_input_free(di);
        *ret = out;
        return 0;
}
