/* controller_gauges: the NodePools' gauges for /metrics (claims by phase; nodes, their capacity, allocatable and
 * pod requests) from copies of the informers' cache; pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "controller.h"

#include <errno.h>

#include "kube.h"
#include "simulate_json.h"
#include "kube_object.h"
#include "kube_types.h"

static const char *name_of(const json_t *obj) {
        return kube_meta_of(obj).name;
}

/* Karpenter's phases: deletion first, then the furthest condition reached. */
static enum stats_claim_phase claim_phase(const json_t *claim) {
        const json_t *status = json_object_get(claim, "status");
        if (kube_deleting(claim))
                return STATS_PHASE_TERMINATING;
        if (kube_condition_true(status, "Initialized"))
                return STATS_PHASE_INITIALIZED;
        return kube_condition_true(status, "Registered") ? STATS_PHASE_REGISTERED : STATS_PHASE_LAUNCHING;
}

/* Every NodePool gets its series, with no claims and no nodes too. */
static int add_pools(struct stats_cluster *out, const json_t *pools) {
        size_t i;
        const json_t *pool;
        json_array_foreach(pools, i, pool) {
                const char *name = name_of(pool);
                if (name && !stats_cluster_pool(out, name))
                        return -ENOMEM;
        }
        return 0;
}

static int add_claims(struct stats_cluster *out, const json_t *claims) {
        size_t i;
        const json_t *claim;
        json_array_foreach(claims, i, claim) {
                const char *pool = kube_nodeclaim_of(claim).node_pool;
                struct stats_pool *p = pool ? stats_cluster_pool(out, pool) : NULL;
                if (pool && !p)
                        return -ENOMEM;
                if (p)
                        p->claims[claim_phase(claim)]++;
        }
        return 0;
}

static void add_resources(int64_t *acc, const struct resources *r) {
        acc[STATS_RESOURCE_CPU] += r->v[RESOURCE_CPU];
        acc[STATS_RESOURCE_MEMORY] += r->v[RESOURCE_MEMORY];
}

/* Nodes of a pool (its label); by_node maps each one's name to its pool's index. Malformed nodes are left out. */
static int add_nodes(struct stats_cluster *out, struct sim_input *in, const json_t *nodes, json_t *by_node) {
        size_t i;
        const json_t *node;
        json_array_foreach(nodes, i, node) {
                struct sim_node *n = NULL;
                char err[256];
                int r = simulate_json_node(in, node, &n, err, sizeof err);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 || !n || !n->nodepool || !n->name)
                        continue;
                struct stats_pool *p = stats_cluster_pool(out, n->nodepool);
                if (!p || json_object_set_new(by_node, n->name, json_integer((json_int_t)(p - out->pools))) < 0)
                        return -ENOMEM;
                p->nodes++;
                add_resources(p->capacity, &n->capacity);
                add_resources(p->allocatable, &n->allocatable);
        }
        return 0;
}

/* pods: the bound ones not terminated. */
static int add_pods(struct stats_cluster *out, struct sim_input *in, const json_t *pods, const json_t *by_node) {
        size_t i;
        const json_t *pod;
        json_array_foreach(pods, i, pod) {
                struct sim_pod *sp = NULL;
                char err[256];
                int r = simulate_json_pod(in, pod, &sp, err, sizeof err);
                if (r == -ENOMEM)
                        return r;
                const json_t *at = r == 0 && sp && sp->node_name ? json_object_get(by_node, sp->node_name) : NULL;
                if (at)
                        add_resources(out->pools[json_integer_value(at)].requested, &sp->requests);
        }
        return 0;
}

int controller_gauges(const json_t *pools, const json_t *claims, const json_t *nodes, const json_t *pods,
                      struct stats_cluster *ret) {
        struct stats_cluster out = { 0 };
        struct sim_input *in = simulate_input_new();
        json_t *by_node = json_object();
        int r = in && by_node ? add_pools(&out, pools) : -ENOMEM;
        if (r == 0)
                r = add_claims(&out, claims);
        if (r == 0)
                r = add_nodes(&out, in, nodes, by_node);
        if (r == 0)
                r = add_pods(&out, in, pods, by_node);
        json_decref(by_node);
        simulate_input_free(in);
        if (r < 0)
                stats_cluster_done(&out);
        else
                *ret = out;
        return r;
}
