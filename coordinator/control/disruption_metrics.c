/* disruption_metrics: Karpenter's labels of a NodeClaim the scale-down pass disrupts (nodeclaims_disrupted_total,
 * pods_disruption_initiated_total), from the pass's input. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "disruption.h"

#include <string.h>

#include "config.h"
#include "kube_types.h"

/* Karpenter's reason, snake_cased as its disruption queue writes it. */
static const char *reason_of(enum stats_disruption_method m) {
        switch (m) {
        case STATS_DISRUPTION_EMPTINESS: return "empty";
        case STATS_DISRUPTION_DRIFT: return "drifted";
        case STATS_DISRUPTION_EXPIRY: return "expired";
        case STATS_DISRUPTION_REPAIR: return "unhealthy";
        default: return "underutilized";
        }
}

const char *disruption_policy_label(enum disrupt_policy p) {
        switch (p) {
        case DISRUPT_WHEN_EMPTY: return "when_empty";
        case DISRUPT_BALANCED: return "balanced";
        default: return "when_empty_or_underutilized";
        }
}

/* Karpenter's DisruptionTerminationMode: no terminationGracePeriod on the claim is graceful (PDBs and do-not-disrupt
 * hold the drain), a positive one eventual, zero forceful; repair ends the grace period at once: forceful. */
static const char *termination_mode(const json_t *claim, enum stats_disruption_method m) {
        const char *tgp = json_string_value(kube_nodeclaim_of(claim).termination_grace_period);
        uint64_t ms;
        if (m == STATS_DISRUPTION_REPAIR)
                return "forceful";
        if (!tgp || config_parse_duration(tgp, &ms) < 0)
                return "graceful";
        return ms == 0 ? "forceful" : "eventual";
}

static bool consolidation(enum stats_disruption_method m) {
        return m == STATS_DISRUPTION_CONSOLIDATION || m == STATS_DISRUPTION_MULTI_NODE_CONSOLIDATION ||
               m == STATS_DISRUPTION_EMPTINESS;
}

size_t disruption_disrupted_labels(const struct disruption_input *di, const char *claim,
                                   enum stats_disruption_method m, struct stats_disruption_labels *ret) {
        size_t pods = 0;
        *ret = (struct stats_disruption_labels){ .reason = reason_of(m), .nodepool = "", .capacity_type = "on-demand",
                                                 .consolidation_policy = "", .termination_mode = "graceful" };
        for (size_t i = 0; claim && i < di->n_candidates; i++) {
                const struct disrupt_candidate *c = &di->candidates[i];
                if (!c->claim || strcmp(c->claim, claim) != 0)
                        continue;
                ret->nodepool = c->pool ? c->pool : "";
                ret->termination_mode = termination_mode(di->claims[i], m);
                for (size_t k = 0; consolidation(m) && k < di->n_pools; k++)
                        if (c->pool && strcmp(di->pools[k].name, c->pool) == 0)
                                ret->consolidation_policy = disruption_policy_label(di->pools[k].policy);
                for (size_t k = 0; k < c->n_pods; k++)
                        pods += !(c->pods[k].flags & (DISRUPT_POD_DAEMONSET | DISRUPT_POD_MIRROR));
        }
        return pods;
}
