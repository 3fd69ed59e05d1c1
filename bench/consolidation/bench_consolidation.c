/* bench/consolidation: the pure disruption decisions on 200 nodes and 3,000 pods with churn: the time of one
 * consolidation pass, the final node count against the lower bound, and the VMs created and deleted. With
 * --scale: the same scenario ten times larger (2,000 nodes, 30,000 pods) after the 200-node one in the same run,
 * and the cost of a pass at 2,000 nodes against one at 200. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disrupt.h"
#include "monotime.h"
#include "rng.h"

#define MIB (INT64_C(1) << 20)
#define GIB (INT64_C(1) << 30)
#define NODES 200
#define PODS 3000
#define DELETED 1500          /* pods deleted by the churn */
#define ADDED 300             /* pods created by the churn (pending, then placed) */
#define SCALE 10              /* --scale: 2,000 nodes, 30,000 pods */
#define MAX_PODS (SCALE * (PODS + ADDED))
#define MAX_NODES (SCALE * 1024)
#define PASS_STEP_MS (60 * 1000) /* simulated time between passes; consolidateAfter is 30s */
#define MAX_PASSES 400        /* per 200 nodes */
#define START_SHAPE "t1.16VCPU-48GB"
#define SEED UINT64_C(0x5eedc0501)

struct bpod {
        char name[24];
        int64_t cpu, mem;
        int node; /* index into nodes; -1 pending; -2 gone */
};

struct bnode {
        char name[24];
        const struct shape *shape;
        bool gone;
        int64_t last_event_ms;
};

struct bench {
        const struct shape_catalog *cat;
        size_t scale; /* 1, or SCALE: the scenario's nodes, pods and churn times this */
        struct bpod pods[MAX_PODS];
        size_t n_pods;
        struct bnode nodes[MAX_NODES];
        size_t n_nodes;
        int64_t now_ms;
        size_t created, deleted, passes, decisions, simulations;
        double pass_ms_max, pass_ms_sum;
        double pass_cpu_ms_sum, pass_cpu_ms_last; /* CPU time: what --scale compares (the machine is shared) */
        size_t by_method[DISRUPT_METHOD_COUNT];
};

/* One pass's input, rebuilt from the bench's state. */
struct pass {
        struct sim_input *sim;
        struct disrupt_pool pool;
        struct disrupt_candidate cands[MAX_NODES];
        struct disrupt_pod *pods;
        int cand_of[MAX_NODES];
        struct disrupt_input in;
};

static double cpu_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int64_t uniform(struct rng *r, int64_t lo, int64_t hi) {
        return lo + (int64_t)rng_below(r, (uint64_t)(hi - lo + 1));
}

static int add_node(struct bench *b, const struct shape *s) {
        struct bnode *n = &b->nodes[b->n_nodes];
        if (b->n_nodes >= MAX_NODES)
                return -1;
        snprintf(n->name, sizeof n->name, "node-%04zu", b->n_nodes);
        n->shape = s;
        n->last_event_ms = b->now_ms;
        return (int)b->n_nodes++;
}

/* One PVE host with room for every VM the scenario could want: host room is not what this bench measures. */
static void add_host(struct sim_input *in, size_t scale) {
        struct sim_host *host = simulate_add_host(in);
        *host = (struct sim_host){ .name = "pve01", .region = "cluster-1", .free_cpus = 20480 * (int64_t)scale,
                                   .free_memory_bytes = (uint64_t)(65536 * GIB) * scale };
}

static struct sim_node *sim_node(struct sim_input *in, const struct bnode *n) {
        struct sim_node *s = simulate_add_node(in);
        s->name = n->name;
        s->nodepool = "default";
        s->capacity = n->shape->capacity;
        s->allocatable = n->shape->allocatable;
        s->labels = simulate_alloc(in, 2 * sizeof *s->labels);
        s->labels[0] = (struct sim_label){ SIM_LABEL_HOSTNAME, n->name };
        s->labels[1] = (struct sim_label){ SIM_LABEL_NODEPOOL, "default" };
        s->n_labels = 2;
        return s;
}

static struct sim_pod *sim_pod(struct sim_input *in, const struct bench *b, const struct bpod *p) {
        struct sim_pod *s = simulate_add_pod(in);
        s->namespace = "default";
        s->name = p->name;
        s->node_name = p->node >= 0 ? b->nodes[p->node].name : NULL;
        s->requests.v[RESOURCE_CPU] = p->cpu;
        s->requests.v[RESOURCE_MEMORY] = p->mem;
        s->requests.v[RESOURCE_PODS] = 1;
        return s;
}

static struct sim_input *base_input(const struct bench *b) {
        struct sim_input *in = simulate_input_new();
        struct sim_nodeclass *nc = simulate_add_nodeclass(in);
        nc->name = "default";
        nc->shapes = b->cat;
        struct sim_nodepool *pool = simulate_add_nodepool(in);
        pool->name = "default";
        pool->nodeclass = "default";
        add_host(in, b->scale);
        return in;
}

/* ---- the pass input ---- */

static void add_candidate(struct pass *ps, const struct bench *b, size_t n, struct sim_node *sn) {
        struct disrupt_candidate *c = &ps->cands[ps->in.n_candidates];
        ps->cand_of[n] = (int)ps->in.n_candidates++;
        *c = (struct disrupt_candidate){ .claim = b->nodes[n].name, .pool = "default", .nodeclass = "default",
                                         .shape = b->nodes[n].shape, .price = disrupt_price(b->nodes[n].shape),
                                         .created_ms = 0, .initialized_ms = 1,
                                         .last_pod_event_ms = b->nodes[n].last_event_ms,
                                         .ready = DISRUPT_READY_TRUE, .sim = sn };
}

static int pass_build(struct pass *ps, const struct bench *b) {
        static const char *const pool_json = "{\"metadata\": {\"name\": \"default\"}, \"spec\": {\"disruption\": "
                                             "{\"consolidateAfter\": \"30s\"}, \"template\": {\"spec\": {\"expireAfter\": "
                                             "\"Never\", \"nodeClassRef\": {\"name\": \"default\"}}}}}";
        json_t *pj = json_loads(pool_json, 0, NULL);
        char err[256];
        memset(ps, 0, sizeof *ps);
        if (!pj || disrupt_pool_parse(pj, &ps->pool, err, sizeof err) < 0)
                return -1;
        json_decref(pj);
        ps->sim = base_input(b);
        ps->pods = calloc(b->n_pods + 1, sizeof *ps->pods);
        for (size_t n = 0; n < b->n_nodes; n++)
                if (!b->nodes[n].gone)
                        add_candidate(ps, b, n, sim_node(ps->sim, &b->nodes[n]));
        size_t used = 0;
        for (size_t n = 0; n < b->n_nodes; n++) {
                if (b->nodes[n].gone)
                        continue;
                struct disrupt_candidate *c = &ps->cands[ps->cand_of[n]];
                c->pods = &ps->pods[used];
                for (size_t p = 0; p < b->n_pods; p++)
                        if (b->pods[p].node == (int)n)
                                c->pods[c->n_pods++] = (struct disrupt_pod){ "default", b->pods[p].name, 0, NULL,
                                                                              sim_pod(ps->sim, b, &b->pods[p]) };
                used += c->n_pods;
        }
        ps->in = (struct disrupt_input){ .now_ms = b->now_ms, .pools = &ps->pool, .n_pools = 1,
                                         .candidates = ps->cands, .n_candidates = ps->in.n_candidates, .sim = ps->sim };
        return 0;
}

static void pass_done(struct pass *ps) {
        simulate_input_free(ps->sim);
        free(ps->pods);
}

/* ---- kube-scheduler and the provisioner: pending pods onto nodes, or onto new nodes ---- */

static int node_named(const struct bench *b, const char *name) {
        for (size_t n = 0; n < b->n_nodes; n++)
                if (!b->nodes[n].gone && strcmp(b->nodes[n].name, name) == 0)
                        return (int)n;
        return -1;
}

static int schedule_pending(struct bench *b) {
        struct sim_input *in = base_input(b);
        struct sim_result *r = NULL;
        size_t *idx = calloc(b->n_pods + 1, sizeof *idx), n_in = 0;
        int claim_node[MAX_NODES];
        for (size_t n = 0; n < b->n_nodes; n++)
                if (!b->nodes[n].gone)
                        sim_node(in, &b->nodes[n]);
        for (size_t p = 0; p < b->n_pods; p++)
                if (b->pods[p].node != -2) {
                        sim_pod(in, b, &b->pods[p]);
                        idx[n_in++] = p;
                }
        if (simulate_run(in, &r) < 0)
                return -1;
        for (size_t c = 0; c < r->n_claims && c < MAX_NODES; c++) {
                claim_node[c] = add_node(b, r->claims[c].shape);
                b->created++;
        }
        for (size_t k = 0; k < r->n_placements; k++) {
                struct bpod *p = &b->pods[idx[k]];
                const struct sim_placement *pl = &r->placements[k];
                if (pl->target == SIM_TARGET_NODE)
                        p->node = node_named(b, in->nodes[pl->index]->name);
                else if (pl->target == SIM_TARGET_CLAIM)
                        p->node = claim_node[pl->index];
                if (pl->target == SIM_TARGET_NODE || pl->target == SIM_TARGET_CLAIM)
                        b->nodes[p->node].last_event_ms = b->now_ms;
        }
        simulate_result_free(r);
        simulate_input_free(in);
        free(idx);
        return 0;
}

/* ---- one pass ---- */

static void apply(struct bench *b, const struct pass *ps, const struct disrupt_decision *d) {
        for (size_t k = 0; k < d->n_replacements; k++) {
                add_node(b, d->replacements[k]);
                b->created++;
        }
        for (size_t k = 0; k < d->n_candidates; k++) {
                int n = node_named(b, ps->cands[d->candidates[k]].claim);
                b->nodes[n].gone = true;
                b->deleted++;
                for (size_t p = 0; p < b->n_pods; p++)
                        if (b->pods[p].node == n)
                                b->pods[p].node = -1;
        }
        b->by_method[d->method]++;
        b->decisions++;
}

/* 1 when a decision was carried out, 0 when the pass decided nothing, -1 on failure. */
static int one_pass(struct bench *b) {
        struct pass *ps = malloc(sizeof *ps);
        struct disrupt_result *res = NULL;
        if (!ps || pass_build(ps, b) < 0)
                return -1;
        int64_t t0 = monotime_us();
        double cpu0 = cpu_ms();
        int rc = disrupt_decide(&ps->in, &res);
        double ms = (double)(monotime_us() - t0) / 1000.0;
        b->pass_cpu_ms_last = cpu_ms() - cpu0;
        b->pass_cpu_ms_sum += b->pass_cpu_ms_last;
        b->passes++;
        b->pass_ms_sum += ms;
        b->pass_ms_max = ms > b->pass_ms_max ? ms : b->pass_ms_max;
        if (rc == 0)
                b->simulations += res->simulations;
        for (size_t k = 0; rc == 0 && k < res->n_decisions; k++) {
                if (getenv("BENCH_TRACE"))
                        fprintf(stderr, "pass %zu (%.1f ms, %zu simulations): %s\n", b->passes, ms, res->simulations,
                                res->decisions[k].message);
                apply(b, ps, &res->decisions[k]);
        }
        if (rc == 0 && res->n_decisions == 0 && res->n_skips && getenv("BENCH_TRACE"))
                fprintf(stderr, "pass %zu (%.1f ms, %zu simulations): no decision; %s\n", b->passes, ms,
                        res->simulations, res->skips[0].message);
        rc = rc < 0 ? -1 : res->n_decisions > 0;
        disrupt_result_free(res);
        pass_done(ps);
        free(ps);
        b->now_ms += PASS_STEP_MS;
        return rc < 1 ? rc : schedule_pending(b) < 0 ? -1 : 1;
}

/* ---- the scenario ---- */

static void make_pods(struct bench *b, struct rng *rng, size_t count) {
        for (size_t i = 0; i < count; i++) {
                struct bpod *p = &b->pods[b->n_pods];
                snprintf(p->name, sizeof p->name, "pod-%04zu", b->n_pods++);
                p->cpu = uniform(rng, 100, 1500);
                p->mem = uniform(rng, 100, 3072) * MIB;
                p->node = -1;
        }
}

/* 200 nodes of START_SHAPE filled round-robin with 3,000 pods (15 each), times the scale. */
static void start(struct bench *b, struct rng *rng) {
        const struct shape *s = shapes_catalog_find(b->cat, START_SHAPE);
        for (size_t n = 0; n < NODES * b->scale; n++)
                add_node(b, s);
        make_pods(b, rng, PODS * b->scale);
        for (size_t p = 0; p < PODS * b->scale; p++)
                b->pods[p].node = (int)(p % (NODES * b->scale));
}

/* Half the pods go, a few new ones come. */
static int churn(struct bench *b, struct rng *rng) {
        for (size_t k = 0; k < DELETED * b->scale;) {
                struct bpod *p = &b->pods[uniform(rng, 0, (int64_t)(PODS * b->scale) - 1)];
                if (p->node == -2)
                        continue;
                b->nodes[p->node].last_event_ms = b->now_ms;
                p->node = -2;
                k++;
        }
        make_pods(b, rng, ADDED * b->scale);
        return schedule_pending(b);
}

static size_t live_nodes(const struct bench *b) {
        size_t n = 0;
        for (size_t i = 0; i < b->n_nodes; i++)
                n += !b->nodes[i].gone;
        return n;
}

/* ⌈total requests ÷ the largest allocatable⌉, the larger of the cpu and memory bounds. */
static size_t lower_bound(const struct bench *b) {
        int64_t cpu = 0, mem = 0, max_cpu = 0, max_mem = 0;
        for (size_t p = 0; p < b->n_pods; p++)
                if (b->pods[p].node != -2)
                        cpu += b->pods[p].cpu, mem += b->pods[p].mem;
        for (size_t s = 0; s < b->cat->n; s++) {
                int64_t c = b->cat->items[s].allocatable.v[RESOURCE_CPU], m = b->cat->items[s].allocatable.v[RESOURCE_MEMORY];
                max_cpu = c > max_cpu ? c : max_cpu;
                max_mem = m > max_mem ? m : max_mem;
        }
        size_t lc = (size_t)((cpu + max_cpu - 1) / max_cpu), lm = (size_t)((mem + max_mem - 1) / max_mem);
        return lc > lm ? lc : lm;
}

static void report(const struct bench *b, size_t before, size_t lb) {
        size_t after = live_nodes(b);
        double ratio = (double)after / (double)lb;
        printf("%-34s %10s\n", "", "value");
        printf("%-34s %10zu\n", "nodes at the start", NODES * b->scale);
        printf("%-34s %10zu\n", "nodes after the churn", before);
        printf("%-34s %10zu\n", "nodes after consolidation", after);
        printf("%-34s %10zu\n", "lower bound", lb);
        printf("%-34s %10.3f\n", "nodes / lower bound", ratio);
        printf("%-34s %10zu\n", "passes (with a decision)", b->decisions);
        printf("%-34s %10zu / %zu / %zu / %zu\n", "emptiness / multi / single / other",
               b->by_method[DISRUPT_METHOD_EMPTINESS], b->by_method[DISRUPT_METHOD_MULTI_NODE],
               b->by_method[DISRUPT_METHOD_SINGLE_NODE],
               b->decisions - b->by_method[DISRUPT_METHOD_EMPTINESS] - b->by_method[DISRUPT_METHOD_MULTI_NODE] -
                       b->by_method[DISRUPT_METHOD_SINGLE_NODE]);
        printf("%-34s %10.2f\n", "pass ms (mean)", b->pass_ms_sum / (double)b->passes);
        printf("%-34s %10.2f\n", "pass ms (max)", b->pass_ms_max);
        printf("%-34s %10.1f\n", "simulations per pass (mean)", (double)b->simulations / (double)b->passes);
        printf("%-34s %10zu\n", "VMs created", b->created);
        printf("%-34s %10zu\n", "VMs deleted", b->deleted);
}

/* One scenario from the start to a pass that decides nothing; NULL on failure. */
static struct bench *run(const struct shape_catalog *cat, size_t scale) {
        struct bench *b = calloc(1, sizeof *b);
        struct rng rng;
        rng_init(&rng, SEED);
        if (!b)
                return NULL;
        b->cat = cat;
        b->scale = scale;
        b->now_ms = 1767261600000LL;
        start(b, &rng);
        b->now_ms += PASS_STEP_MS;
        if (churn(b, &rng) < 0) {
                free(b);
                return NULL;
        }
        b->now_ms += PASS_STEP_MS;
        size_t before = live_nodes(b), created_by_churn = b->created;
        b->created = 0;
        int rc = 1;
        while (b->passes < MAX_PASSES * scale && (rc = one_pass(b)) == 1)
                ;
        if (rc < 0) {
                free(b);
                return NULL;
        }
        printf("churn: %zu pods deleted, %zu created, %zu new VMs for them\n", DELETED * scale, ADDED * scale,
               created_by_churn);
        report(b, before, lower_bound(b));
        return b;
}

static double over_bound(const struct bench *b) {
        return (double)live_nodes(b) / (double)lower_bound(b);
}

static double pass_cpu_ms_mean(const struct bench *b) {
        return b->pass_cpu_ms_sum / (double)b->passes;
}

int main(int argc, char **argv) {
        struct shape_options opts;
        struct shape_catalog *cat = NULL;
        bool scale = argc == 2 && strcmp(argv[1], "--scale") == 0;
        if (argc > 2 || (argc == 2 && !scale)) {
                fprintf(stderr, "usage: bench_consolidation [--scale]\n");
                return 2;
        }
        shapes_options_default(&opts);
        if (shapes_catalog_default(&opts, &cat) < 0)
                return 1;
        struct bench *b = run(cat, 1), *big = NULL;
        if (!b)
                return 1;
        printf("RESULT name=consolidation nodes=%d pass_ms=%.2f nodes_over_lower_bound=%.3f churn_vms=%zu\n", NODES,
               b->pass_ms_max, over_bound(b), b->created + b->deleted);
        if (scale && !(big = run(cat, SCALE)))
                return 1;
        if (big) {
                double ratio = pass_cpu_ms_mean(big) / pass_cpu_ms_mean(b);
                printf("pass CPU ms at %d / %d nodes (same run): mean %.2f / %.2f = %.2f; last (no decision) %.2f / "
                       "%.2f = %.2f\n", NODES * SCALE, NODES, pass_cpu_ms_mean(big), pass_cpu_ms_mean(b), ratio,
                       big->pass_cpu_ms_last, b->pass_cpu_ms_last, big->pass_cpu_ms_last / b->pass_cpu_ms_last);
                printf("RESULT name=consolidation_scale nodes=%d pass_ratio_2000_200=%.2f "
                       "nodes_over_lower_bound=%.3f\n", NODES * SCALE, ratio, over_bound(big));
        }
        shapes_catalog_free(cat);
        free(b);
        free(big);
        return 0;
}
