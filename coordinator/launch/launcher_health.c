/* launcher_health: the NodePool's NodeRegistrationHealthy condition from this process's launch results, as
 * Karpenter's registration (True) and liveness (False after half of the last four launches failed) set it; and a
 * failed launch in Karpenter's nodeclaims_disrupted_total, as its liveness counts a claim it deletes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "config.h"
#include "kube_types.h"
#include "log.h"

static struct reghealth *tracker_locked(struct launcher *l, const char *nodepool) {
        for (size_t i = 0; i < l->n_health; i++)
                if (strcmp(l->health[i].nodepool, nodepool) == 0)
                        return &l->health[i].h;
        if (ARRAY_GROW(&l->health, &l->cap_health, l->n_health, 8) < 0)
                return NULL;
        struct launcher__health_entry *e = &l->health[l->n_health];
        *e = (struct launcher__health_entry){ .nodepool = strdup(nodepool), .h = { .pool_generation = -1 } };
        if (!e->nodepool)
                return NULL;
        l->n_health++;
        return &e->h;
}

/* What Karpenter does not count either: no room (its insufficient-capacity errors), and a claim or class that is
 * wrong on its face (its NodeClassNotReady: the claim's Event and the class say so already). */
static bool counts(const struct launchstep_failure *f) {
        static const char *const not_counted[] = { "InsufficientCapacity", "IPPoolExhausted", "ReservationLost",
                                                   "InvalidNodeClaim",     "InvalidNodeClass", "UnknownInstanceType",
                                                   "UnknownRegion" };
        for (size_t i = 0; i < sizeof not_counted / sizeof *not_counted; i++)
                if (strcmp(f->reason, not_counted[i]) == 0)
                        return false;
        return true;
}

/* The status this result leads to (NULL: none to write), after it is added to the pool's tracker. */
static const char *verdict(struct launcher__ctx *c, bool success, int64_t class_generation) {
        const char *now = reghealth_condition_status(c->pool);
        pthread_mutex_lock(&c->l->mu);
        struct reghealth *h = tracker_locked(c->l, c->nodepool);
        enum reghealth_status next = REGHEALTH_UNKNOWN;
        if (h) {
                reghealth_track(h, kube_meta_of(c->pool).generation, class_generation);
                next = reghealth_status_with(h, success);
                reghealth_add(h, success);
        }
        pthread_mutex_unlock(&c->l->mu);
        if (success)
                return now && strcmp(now, "True") == 0 ? NULL : "True";
        return next == REGHEALTH_UNHEALTHY && !(now && strcmp(now, "False") == 0) ? "False" : NULL;
}

void launcher__health_note(struct launcher__ctx *c, bool success, const struct launchstep_failure *f) {
        char message[NODECLAIM_MESSAGE_MAX + LAUNCHER_NAME_MAX + 64] = "";
        if (!c->nodepool[0] || (f && !counts(f)))
                return;
        struct launchstep_result res = launcher__need_pool(c);
        if (launchstep_ok(&res))
                res = launcher__need_nodeclass(c);
        if (!launchstep_ok(&res))
                return;
        int64_t class_generation = kube_meta_of(c->nodeclass).generation;
        const char *status = verdict(c, success, class_generation);
        if (!status)
                return;
        const char *reason = success ? REGHEALTH_CONDITION : f->reason;
        if (!success && nodeclaim_condition_true(c->st, "Launched"))
                reason = REGHEALTH_REASON_FAILED;
        if (!success)
                snprintf(message, sizeof message, "Failed to register node: nodeclaim/%s: %s", c->name, f->message);
        json_t *patch = reghealth_patch(c->pool, status, reason, message, class_generation, c->now);
        int r = patch ? kube_patch(c->kube, &kube_nodepools, NULL, c->nodepool, "status", KUBE_PATCH_MERGE, patch, NULL)
                      : -ENOMEM;
        json_decref(patch);
        if (r < 0)
                log_warning("launcher: NodePool %s: %s %s: %s", c->nodepool, REGHEALTH_CONDITION, status,
                            kube_client_error(c->kube));
        else
                log_info("launcher: NodePool %s: %s %s (%s)", c->nodepool, REGHEALTH_CONDITION, status, reason);
}

/* CamelCase to snake_case as Karpenter's pretty.ToSnakeCase: RegistrationTimeout -> registration_timeout,
 * IPPoolExhausted -> ip_pool_exhausted. */
static void snake_case(const char *in, char *out, size_t len) {
        size_t o = 0;
        for (size_t i = 0; in[i] && o + 2 < len; i++) {
                bool upper = isupper((unsigned char)in[i]);
                bool after_lower = i > 0 && islower((unsigned char)in[i - 1]);
                bool acronym_end = i > 0 && isupper((unsigned char)in[i - 1]) && islower((unsigned char)in[i + 1]);
                if (upper && (after_lower || acronym_end))
                        out[o++] = '_';
                out[o++] = (char)tolower((unsigned char)in[i]);
        }
        out[o] = '\0';
}

void launcher__count_failure(struct launcher__ctx *c, const struct launchstep_failure *f) {
        char reason[96];
        uint64_t ms = 0;
        const char *tgp = json_string_value(kube_nodeclaim_of(c->claim).termination_grace_period);
        bool has_tgp = tgp && config_parse_duration(tgp, &ms) == 0;
        snake_case(f->reason, reason, sizeof reason);
        struct stats_disruption_labels l = { .reason = reason, .nodepool = c->nodepool, .capacity_type = "on-demand",
                                             .consolidation_policy = "", .termination_mode = "graceful" };
        if (has_tgp)
                l.termination_mode = ms == 0 ? "forceful" : "eventual";
        stats_nodeclaim_disrupted(c->l->env.stats, &l, 0);
}
