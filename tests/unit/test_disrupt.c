/* Tests for coordinator/disrupt: NodePool disruption settings, cron schedules and budgets, drift hashes, and each
 * method and safety rule of a disruption pass (emptiness, drift of the pool, its requirements, the node class and
 * the Proxmox template, expiry, repair, single- and multi-node
 * consolidation; do-not-disrupt, safe-to-evict, PDBs, budgets with schedules, pending pods, anti-flap). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disrupt.h"
#include "testutil.h"

#define MIB (1024LL * 1024)
#define GIB (1024LL * MIB)
#define MIN_MS (60LL * 1000)
#define HOUR_MS (60 * MIN_MS)
#define NOW_MS 1767261600000LL /* 2026-01-01T10:00:00Z, a Thursday */
#define MAX_NODES 8
#define MAX_PODS 8

struct fixture {
        struct shape_catalog *cat;
        struct sim_input *sim;
        struct disrupt_pool pool;
        struct disrupt_pool pools[2]; /* two_pools(): "a" and "b" */
        struct disrupt_nodeclass cls;
        struct disrupt_candidate cands[MAX_NODES];
        struct disrupt_pod pods[MAX_NODES][MAX_PODS];
        struct disrupt_input in;
        struct disrupt_result *res;
};

static void parse_named_pool(struct disrupt_pool *p, const char *name, const char *disruption) {
        char text[1024];
        snprintf(text, sizeof text, "{\"metadata\": {\"name\": \"%s\"}, \"spec\": {\"disruption\": %s, \"template\": "
                 "{\"spec\": {\"nodeClassRef\": {\"name\": \"default\"}}}}}", name, disruption);
        json_t *o = test_json_parse(text);
        char err[256] = "";
        assert_int_equal(disrupt_pool_parse(o, p, err, sizeof err), 0);
        json_decref(o);
}

static void parse_pool(struct disrupt_pool *p, const char *disruption) {
        parse_named_pool(p, "default", disruption);
}

static void setup(struct fixture *f, const char *disruption) {
        struct shape_options opts;
        memset(f, 0, sizeof *f);
        shapes_options_default(&opts);
        assert_int_equal(shapes_catalog_default(&opts, &f->cat), 0);
        f->sim = simulate_input_new();
        struct sim_nodeclass *nc = simulate_add_nodeclass(f->sim);
        nc->name = "default";
        nc->shapes = f->cat;
        struct sim_nodepool *sp = simulate_add_nodepool(f->sim);
        sp->name = "default";
        sp->nodeclass = "default";
        struct sim_host *h = simulate_add_host(f->sim);
        *h = (struct sim_host){ .name = "pve1", .region = "r1", .free_cpus = 256, .free_memory_bytes = 1024 * GIB };
        parse_pool(&f->pool, disruption);
        f->cls.name = "default";
        snprintf(f->cls.hash, sizeof f->cls.hash, "c0ffee");
        snprintf(f->cls.hash_v1, sizeof f->cls.hash_v1, "c0ffee-v1");
        f->in = (struct disrupt_input){ .now_ms = NOW_MS, .pools = &f->pool, .n_pools = 1, .classes = &f->cls,
                                        .n_classes = 1, .candidates = f->cands, .sim = f->sim };
}

static void teardown(struct fixture *f) {
        disrupt_result_free(f->res);
        simulate_input_free(f->sim);
        shapes_catalog_free(f->cat);
}

static const char *pool_hash(const struct fixture *f, const char *pool) {
        for (size_t k = 0; k < f->in.n_pools; k++)
                if (strcmp(f->in.pools[k].name, pool) == 0)
                        return f->in.pools[k].hash;
        return NULL;
}

/* A node of pool, initialized and Ready for an hour, launched from today's pool and class. */
static size_t add_node_in(struct fixture *f, const char *name, const char *shape, const char *pool) {
        size_t i = f->in.n_candidates++;
        const struct shape *s = shapes_catalog_find(f->cat, shape);
        struct sim_node *n = simulate_add_node(f->sim);
        assert_non_null(s);
        n->name = name;
        n->nodepool = pool;
        n->capacity = s->capacity;
        n->allocatable = s->allocatable;
        n->labels = simulate_alloc(f->sim, 3 * sizeof *n->labels);
        n->labels[0] = (struct sim_label){ SIM_LABEL_HOSTNAME, name };
        n->labels[1] = (struct sim_label){ SIM_LABEL_NODEPOOL, pool };
        n->n_labels = 2;
        f->cands[i] = (struct disrupt_candidate){ .claim = name, .pool = pool, .nodeclass = "default", .shape = s,
                                                  .price = disrupt_price(s), .created_ms = NOW_MS - HOUR_MS,
                                                  .initialized_ms = NOW_MS - HOUR_MS,
                                                  .last_pod_event_ms = NOW_MS - HOUR_MS,
                                                  .nodepool_hash = pool_hash(f, pool), .nodeclass_hash = "c0ffee",
                                                  .nodeclass_hash_version = DISRUPT_NODECLASS_HASH_VERSION,
                                                  .ready = DISRUPT_READY_TRUE, .ready_since_ms = NOW_MS - HOUR_MS,
                                                  .pods = f->pods[i], .sim = n };
        return i;
}

static size_t add_node(struct fixture *f, const char *name, const char *shape) {
        return add_node_in(f, name, shape, "default");
}

/* The node's zone label (add_node leaves room for it). */
static void set_zone(struct fixture *f, size_t node, const char *zone) {
        struct sim_node *n = f->cands[node].sim;
        n->labels[n->n_labels++] = (struct sim_label){ SIM_LABEL_ZONE, zone };
}

/* Pools "a" and "b" (of the default class) instead of "default", with these disruption settings. */
static void two_pools(struct fixture *f, const char *disruption_a, const char *disruption_b) {
        const char *names[] = { "a", "b" }, *settings[] = { disruption_a, disruption_b };
        for (size_t k = 0; k < 2; k++) {
                struct sim_nodepool *sp = k ? simulate_add_nodepool(f->sim) : f->sim->pools[0];
                sp->name = names[k];
                sp->nodeclass = "default";
                parse_named_pool(&f->pools[k], names[k], settings[k]);
        }
        f->in.pools = f->pools;
        f->in.n_pools = 2;
}

/* A pending pod of the default namespace, app=<app>. */
static struct sim_pod *add_pending(struct fixture *f, const char *name, const char *app, int64_t cpu_milli) {
        struct sim_pod *p = simulate_add_pod(f->sim);
        p->namespace = "default";
        p->name = name;
        p->labels = simulate_alloc(f->sim, sizeof *p->labels);
        p->labels[0] = (struct sim_label){ "app", app };
        p->n_labels = 1;
        p->requests.v[RESOURCE_CPU] = cpu_milli;
        p->requests.v[RESOURCE_MEMORY] = 256 * MIB;
        p->requests.v[RESOURCE_PODS] = 1;
        return p;
}

static struct sim_selector app_selector(struct fixture *f, const char *app) {
        struct sim_label *l = simulate_alloc(f->sim, sizeof *l);
        *l = (struct sim_label){ "app", app };
        return (struct sim_selector){ .match_labels = l, .n_match_labels = 1 };
}

static struct disrupt_pod *add_pod(struct fixture *f, size_t node, const char *name, int64_t cpu_milli, unsigned flags) {
        struct disrupt_candidate *c = &f->cands[node];
        struct sim_pod *p = simulate_add_pod(f->sim);
        p->namespace = "default";
        p->name = name;
        p->node_name = c->sim->name;
        p->requests.v[RESOURCE_CPU] = cpu_milli;
        p->requests.v[RESOURCE_MEMORY] = 256 * MIB;
        p->requests.v[RESOURCE_PODS] = 1;
        p->labels = simulate_alloc(f->sim, sizeof *p->labels);
        p->labels[0] = (struct sim_label){ "app", name };
        p->n_labels = 1;
        c->pods[c->n_pods] = (struct disrupt_pod){ "default", name, flags, NULL, p };
        return &c->pods[c->n_pods++];
}

static void decide(struct fixture *f) {
        disrupt_result_free(f->res);
        f->res = NULL;
        assert_int_equal(disrupt_decide(&f->in, &f->res), 0);
}

static const char *skip_of(const struct fixture *f, size_t cand) {
        for (size_t k = 0; k < f->res->n_skips; k++)
                if (f->res->skips[k].candidate == cand)
                        return f->res->skips[k].message;
        fail_msg("candidate %zu has no skip", cand);
        return NULL;
}

static void assert_contains(const char *s, const char *part) {
        if (!strstr(s, part))
                fail_msg("'%s' does not contain '%s'", s, part);
}

/* ---- settings ---- */

static void test_pool_defaults(void **state) {
        (void)state;
        struct disrupt_pool p;
        parse_pool(&p, "{}");
        assert_int_equal(p.policy, DISRUPT_WHEN_EMPTY_OR_UNDERUTILIZED);
        assert_int_equal(p.consolidate_after_ms, 0);
        assert_int_equal(p.expire_after_ms, 720 * HOUR_MS);
        assert_int_equal(p.termination_grace_ms, -1);
        assert_int_equal(p.n_budgets, 1);
        assert_true(p.budgets[0].percent);
        assert_int_equal(p.budgets[0].nodes, 10);
        assert_string_equal(p.nodeclass, "default");
        parse_pool(&p, "{\"consolidationPolicy\": \"WhenEmpty\", \"consolidateAfter\": \"Never\", \"budgets\": ["
                       "{\"nodes\": \"3\", \"reasons\": [\"Drifted\", \"Empty\"]},"
                       "{\"nodes\": \"0\", \"schedule\": \"@daily\", \"duration\": \"10m\"}]}");
        assert_int_equal(p.policy, DISRUPT_WHEN_EMPTY);
        assert_int_equal(p.consolidate_after_ms, -1);
        assert_int_equal(p.n_budgets, 2);
        assert_int_equal(p.budgets[0].nodes, 3);
        assert_int_equal(p.budgets[0].reasons, 1u << DISRUPT_REASON_DRIFTED | 1u << DISRUPT_REASON_EMPTY);
        assert_true(p.budgets[1].has_schedule);
        assert_int_equal(p.budgets[1].duration_ms, 10 * MIN_MS);
}

static void expect_bad(const char *disruption, const char *field) {
        char text[1024], err[256] = "";
        struct disrupt_pool p = { .n_budgets = 42 };
        snprintf(text, sizeof text, "{\"metadata\": {\"name\": \"np\"}, \"spec\": {\"disruption\": %s, \"template\": {"
                 "\"spec\": {\"expireAfter\": \"720h\"}}}}", disruption);
        json_t *o = test_json_parse(text);
        assert_int_equal(disrupt_pool_parse(o, &p, err, sizeof err), -EINVAL);
        assert_contains(err, "NodePool np: ");
        assert_contains(err, field);
        assert_int_equal(p.n_budgets, 42); /* unchanged */
        json_decref(o);
}

static void test_pool_errors(void **state) {
        (void)state;
        expect_bad("{\"consolidateAfter\": \"soon\"}", "spec.disruption.consolidateAfter");
        expect_bad("{\"consolidationPolicy\": \"WhenUnderutilized\"}", "spec.disruption.consolidationPolicy");
        expect_bad("{\"budgets\": [{\"nodes\": \"10\"}, {\"nodes\": \"150%\"}]}", "spec.disruption.budgets[1].nodes");
        expect_bad("{\"budgets\": [{\"nodes\": \"1x\"}]}", "spec.disruption.budgets[0].nodes");
        expect_bad("{\"budgets\": [{\"nodes\": \"1\", \"reasons\": [\"Expired\"]}]}", "budgets[0].reasons");
        expect_bad("{\"budgets\": [{\"nodes\": \"1\", \"schedule\": \"0 9 * *\", \"duration\": \"8h\"}]}",
                   "budgets[0].schedule");
        expect_bad("{\"budgets\": [{\"nodes\": \"1\", \"schedule\": \"0 25 * * *\", \"duration\": \"8h\"}]}", "hour");
        expect_bad("{\"budgets\": [{\"nodes\": \"1\", \"schedule\": \"0 9 * * *\"}]}", "go together");
}

/* As many budgets as the CRD allows (maxItems 50, Karpenter's) are read; one more is refused. */
static json_t *pool_with_budgets(size_t n) {
        json_t *budgets = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(budgets, json_pack("{s:s}", "nodes", i % 2 ? "1" : "2"));
        json_t *o = json_pack("{s:{s:s}, s:{s:{s:o}, s:{s:{s:{s:s}}}}}", "metadata", "name", "np", "spec", "disruption",
                              "budgets", budgets, "template", "spec", "nodeClassRef", "name", "default");
        assert_non_null(o);
        return o;
}

static void test_pool_budgets_as_many_as_the_crd_allows(void **state) {
        (void)state;
        struct disrupt_pool p;
        char err[256] = "";
        json_t *o = pool_with_budgets(50);
        assert_int_equal(disrupt_pool_parse(o, &p, err, sizeof err), 0);
        assert_int_equal(p.n_budgets, 50);
        assert_int_equal(p.budgets[48].nodes, 2);
        assert_int_equal(p.budgets[49].nodes, 1);
        json_decref(o);
        o = pool_with_budgets(51);
        assert_int_equal(disrupt_pool_parse(o, &p, err, sizeof err), -EINVAL);
        assert_contains(err, "spec.disruption.budgets: must be a list of at most 50 budgets");
        json_decref(o);
}

/* Does the minute that starts at unix time t_s match c? Through the module: a budget of one minute is active at
 * t_s exactly when its schedule hits that minute. */
static bool cron_matches(const struct disrupt_cron *c, int64_t t_s) {
        struct disrupt_budget b = { .has_schedule = true, .schedule = *c, .duration_ms = 60 * 1000 };
        return disrupt_budget_active(&b, t_s * 1000);
}

static void test_cron(void **state) {
        (void)state;
        struct disrupt_cron c;
        char err[256];
        /* 2026-01-01 is a Thursday. */
        assert_int_equal(disrupt_cron_parse("0 9 * * mon-fri", &c, err, sizeof err), 0);
        assert_true(cron_matches(&c, 1767258000));  /* Thu 09:00 */
        assert_false(cron_matches(&c, 1767258060)); /* Thu 09:01 */
        assert_false(cron_matches(&c, 1767430800)); /* Sat 09:00 */
        assert_int_equal(disrupt_cron_parse("*/15 * 1 jan *", &c, err, sizeof err), 0);
        assert_true(cron_matches(&c, 1767258900)); /* 09:15 */
        assert_false(cron_matches(&c, 1767258960));
        /* Both day fields restricted: either matches (the 2nd is a Friday, not the 1st). */
        assert_int_equal(disrupt_cron_parse("0 0 2 * thu", &c, err, sizeof err), 0);
        assert_true(cron_matches(&c, 1767225600));  /* Thu Jan 1 00:00 */
        assert_true(cron_matches(&c, 1767312000));  /* Fri Jan 2 00:00 */
        assert_false(cron_matches(&c, 1767398400)); /* Sat Jan 3 */
        assert_int_equal(disrupt_cron_parse("@hourly", &c, err, sizeof err), 0);
        assert_true(cron_matches(&c, 1767258000));
        assert_int_equal(disrupt_cron_parse("0 9 * * 7", &c, err, sizeof err), -EINVAL);
        assert_contains(err, "day of week");
}

static void test_budget_schedule(void **state) {
        (void)state;
        struct disrupt_budget b = { .nodes = 0, .has_schedule = true, .duration_ms = 8 * HOUR_MS };
        char err[256];
        assert_int_equal(disrupt_cron_parse("0 9 * * mon-fri", &b.schedule, err, sizeof err), 0);
        assert_true(disrupt_budget_active(&b, NOW_MS));                        /* Thu 10:00 */
        assert_true(disrupt_budget_active(&b, NOW_MS - HOUR_MS));              /* 09:00, the hit itself */
        assert_false(disrupt_budget_active(&b, NOW_MS - HOUR_MS - MIN_MS));    /* 08:59 */
        assert_true(disrupt_budget_active(&b, NOW_MS + 7 * HOUR_MS - 1000));   /* 16:59:59 */
        assert_false(disrupt_budget_active(&b, NOW_MS + 7 * HOUR_MS + 1000));  /* 17:00:01 */
        assert_false(disrupt_budget_active(&b, NOW_MS + 48 * HOUR_MS));        /* Saturday */
}

static void test_hashes(void **state) {
        (void)state;
        char a[DISRUPT_HASH_LEN], b[DISRUPT_HASH_LEN], c[DISRUPT_HASH_LEN];
        json_t *p1 = test_json_parse("{\"spec\": {\"template\": {\"metadata\": {\"labels\": {\"a\": \"1\", \"b\": \"2\"}},"
                                     " \"spec\": {\"expireAfter\": \"720h\", \"requirements\": []}}}}");
        json_t *p2 = test_json_parse("{\"spec\": {\"template\": {\"spec\": {\"expireAfter\": \"1h\"}, \"metadata\": "
                                     "{\"labels\": {\"b\": \"2\", \"a\": \"1\"}}}}}");
        json_t *p3 = test_json_parse("{\"spec\": {\"template\": {\"metadata\": {\"labels\": {\"a\": \"1\"}}}}}");
        assert_int_equal(disrupt_hash_nodepool(p1, a), 0);
        assert_int_equal(disrupt_hash_nodepool(p2, b), 0);
        assert_int_equal(disrupt_hash_nodepool(p3, c), 0);
        assert_int_equal(strlen(a), 16);
        assert_string_equal(a, b); /* key order, requirements and expireAfter do not drift */
        assert_string_not_equal(a, c);
        assert_int_equal(disrupt_hash_nodeclass(json_object_get(p3, "spec"), c), -EINVAL); /* no spec */
        json_decref(p1);
        json_decref(p2);
        json_decref(p3);
}

/* A node class's hash leaves out the fields updated in place (tags, resourcePool, securityGroups); version 1 of
 * it, which claims made before the version annotation recorded, is the whole spec. */
static void test_nodeclass_hash_leaves_out_in_place_fields(void **state) {
        (void)state;
        char a[DISRUPT_HASH_LEN], b[DISRUPT_HASH_LEN], c[DISRUPT_HASH_LEN], a1[DISRUPT_HASH_LEN], b1[DISRUPT_HASH_LEN];
        json_t *n1 = test_json_parse("{\"spec\": {\"instanceTemplateRef\": {\"name\": \"t\"}, \"tags\": [\"a\"]}}");
        json_t *n2 = test_json_parse("{\"spec\": {\"instanceTemplateRef\": {\"name\": \"t\"}, \"tags\": [\"b\"],"
                                     " \"resourcePool\": \"k8s\", \"securityGroups\": [{\"name\": \"web\"}]}}");
        json_t *n3 = test_json_parse("{\"spec\": {\"instanceTemplateRef\": {\"name\": \"t\"}, \"onBoot\": false}}");
        assert_int_equal(disrupt_hash_nodeclass(n1, a), 0);
        assert_int_equal(disrupt_hash_nodeclass(n2, b), 0);
        assert_int_equal(disrupt_hash_nodeclass(n3, c), 0);
        assert_string_equal(a, b);
        assert_string_not_equal(a, c); /* any other field drifts */
        assert_int_equal(disrupt_hash_nodeclass_v1(n1, a1), 0);
        assert_int_equal(disrupt_hash_nodeclass_v1(n2, b1), 0);
        assert_string_not_equal(a1, b1);
        json_decref(n1);
        json_decref(n2);
        json_decref(n3);
}

/* ---- methods ---- */

static void test_emptiness(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"consolidateAfter\": \"5m\"}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB"), b = add_node(&f, "node-b", "t1.2VCPU-6GB");
        add_pod(&f, a, "ds-a", 100, DISRUPT_POD_DAEMONSET);
        add_pod(&f, b, "web", 500, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_EMPTINESS);
        assert_int_equal(f.res->decisions[0].reason, DISRUPT_REASON_EMPTY);
        assert_int_equal(f.res->decisions[0].n_candidates, 1);
        assert_int_equal(f.res->decisions[0].candidates[0], a);
        assert_contains(f.res->decisions[0].message, "Emptiness: delete");
        assert_contains(skip_of(&f, b), "one at a time");
        /* Anti-flap: empty only since 2 minutes. */
        f.cands[a].last_pod_event_ms = NOW_MS - 2 * MIN_MS;
        decide(&f);
        assert_contains(skip_of(&f, a), "a pod came or went 2m ago, consolidateAfter is 5m");
        teardown(&f);
}

static void test_single_node_delete(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "t1.4VCPU-12GB"), b = add_node(&f, "node-b", "t1.4VCPU-12GB");
        add_pod(&f, a, "web-1", 500, 0);
        add_pod(&f, a, "web-2", 500, 0);
        add_pod(&f, a, "web-3", 500, 0);
        add_pod(&f, b, "db", 1000, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_SINGLE_NODE);
        assert_int_equal(d->reason, DISRUPT_REASON_UNDERUTILIZED);
        assert_int_equal(d->candidates[0], b); /* fewer pods to move first */
        assert_int_equal(d->n_replacements, 0);
        assert_string_equal(d->message, "Consolidation: delete node-b, its 1 pods fit on node-a");
        assert_true(f.res->simulations >= 1);
        /* The input is as it was. */
        assert_false(f.cands[b].sim->unschedulable);
        assert_string_equal(f.cands[b].pods[0].sim->node_name, "node-b");
        teardown(&f);
}

static void test_single_node_replace(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "t1.16VCPU-48GB");
        add_pod(&f, a, "web-1", 500, 0);
        add_pod(&f, a, "web-2", 500, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_SINGLE_NODE);
        assert_int_equal(d->n_replacements, 1);
        assert_true(disrupt_price(d->replacements[0]) < f.cands[a].price);
        assert_contains(d->message, "Consolidation: replace node-a, its 2 pods fit on one cheaper ");
        teardown(&f);
}

/* Balanced (Karpenter 1.14): a move goes ahead when the share of the pool's cost it saves is at least half the share
 * of the pool's disruption it causes (each node 1, each pod that moves 1 plus its disruption-cost and priority
 * terms). Node a's one small pod fits a cheaper shape; b, c and d are full. */
static void balanced_pool(struct fixture *f, const char *policy, double cost_extra) {
        char disruption[128];
        snprintf(disruption, sizeof disruption, "{\"consolidationPolicy\": \"%s\", \"consolidateAfter\": \"0s\"}",
                 policy);
        setup(f, disruption);
        size_t a = add_node(f, "node-a", "t1.4VCPU-12GB");
        add_pod(f, a, "small", 500, 0)->cost_extra = cost_extra;
        add_pod(f, add_node(f, "node-b", "t1.4VCPU-12GB"), "big-b", 3500, 0);
        add_pod(f, add_node(f, "node-c", "t1.4VCPU-12GB"), "big-c", 3500, 0);
        add_pod(f, add_node(f, "node-d", "t1.4VCPU-12GB"), "big-d", 3500, 0);
        decide(f);
}

static void test_balanced(void **state) {
        (void)state;
        struct fixture f;
        balanced_pool(&f, "Balanced", 0);
        assert_int_equal(f.pool.policy, DISRUPT_BALANCED);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_SINGLE_NODE);
        assert_int_equal(d->candidates[0], 0);
        assert_int_equal(d->n_replacements, 1);
        /* saves (7 - the replacement's price) of 28, disrupts 2 of 8: score above 0.5 */
        double saved = (f.cands[0].price - disrupt_price(d->replacements[0])) / 28.0, score = saved / 0.25;
        char want[128];
        snprintf(want, sizeof want, "; score %.2f >= 0.50 (Balanced: savings %.1f%%, disruption 25.0%%)", score,
                 100 * saved);
        assert_contains(d->message, "Consolidation: replace node-a, its 1 pods fit on one cheaper ");
        assert_contains(d->message, want);
        teardown(&f);

        /* The same pod, costly to disrupt (disruption-cost 2^30: 8 more): 10 of 16, the move is not worth it. */
        balanced_pool(&f, "Balanced", 8);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, 0), "not disrupted: a replace saves too little for its 1 pods: score ");
        assert_contains(skip_of(&f, 0), " < 0.50 (Balanced: savings ");
        assert_contains(skip_of(&f, 0), "disruption 62.5%)");
        teardown(&f);

        /* WhenEmptyOrUnderutilized takes any saving, whatever it disrupts; its message has no score. */
        balanced_pool(&f, "WhenEmptyOrUnderutilized", 8);
        assert_int_equal(f.res->n_decisions, 1);
        assert_null(strstr(f.res->decisions[0].message, "score"));
        teardown(&f);
}

/* Karpenter's EvictionCost as Balanced weighs it: 1 plus the extra terms, at most 10, at least 0. */
static void test_pod_cost(void **state) {
        (void)state;
        struct disrupt_pod p = { 0 };
        assert_true(disrupt_pod_cost(&p) == 1.0);
        p.cost_extra = 16;
        assert_true(disrupt_pod_cost(&p) == 10.0);
        p.cost_extra = -3;
        assert_true(disrupt_pod_cost(&p) == 0.0);
        p.cost_extra = 0.5;
        assert_true(disrupt_pod_cost(&p) == 1.5);
}

/* An in-flight claim (a Node not Initialized yet: its startup taint may stay, it may never join) is not somewhere
 * to move pods to: Karpenter's "would schedule against uninitialized" (issue 37, 1). */
static void test_not_onto_uninitialized(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"budgets\": [{\"nodes\": \"100%\"}]}");
        size_t a = add_node(&f, "node-a", "t1.4VCPU-12GB"), b = add_node(&f, "node-b", "t1.4VCPU-12GB");
        add_pod(&f, a, "web-1", 1500, 0);
        add_pod(&f, a, "web-2", 1500, 0);
        add_pod(&f, b, "db-1", 1500, 0);
        add_pod(&f, b, "db-2", 1500, 0);
        const struct shape *s = shapes_catalog_find(f.cat, "t1.4VCPU-12GB");
        struct sim_node *y = simulate_add_node(f.sim);
        *y = (struct sim_node){ .name = "default-young", .nodepool = "default", .capacity = s->capacity,
                                .allocatable = s->allocatable, .in_flight = true };
        f.sim->hosts[0]->free_cpus = 0; /* no room for a replacement either */
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "would schedule against uninitialized nodeclaim/default-young");
        /* Once it is a Node that is Initialized, the pods may go there. */
        y->in_flight = false;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_contains(f.res->decisions[0].message, "fit on default-young");
        teardown(&f);
}

/* The old node of a replace under way (tainted: leaving) and its replacement, Initialized, with room for its pods:
 * those pods are pending in every trial, as Karpenter counts the pods of nodes marked for deletion, so no other
 * decision takes the room they are to move to (issue 37, 5). */
static void test_room_of_a_replacement_is_kept(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"budgets\": [{\"nodes\": \"100%\"}]}");
        size_t x = add_node(&f, "node-x", "t1.4VCPU-12GB"), r = add_node(&f, "node-r", "t1.4VCPU-12GB");
        size_t d = add_node(&f, "node-d", "t1.4VCPU-12GB");
        add_pod(&f, x, "x-1", 1500, 0);
        add_pod(&f, x, "x-2", 1500, 0);
        add_pod(&f, d, "d-1", 1500, 0);
        f.cands[x].deleting = f.cands[r].deleting = true; /* the replace holds both */
        static struct sim_taint disrupted = { "pvescale.io/disrupted", NULL, SIM_EFFECT_NO_SCHEDULE };
        f.cands[x].sim->taints = &disrupted;               /* the old one carries the disrupted taint */
        f.cands[x].sim->n_taints = 1;
        f.cands[x].sim->leaving = true;
        f.sim->hosts[0]->free_cpus = 0;                    /* and no new node fits anywhere */
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, d), "fit neither");
        /* Without the old node's pods to place, node-r has room for node-d's pod. */
        f.cands[x].sim->leaving = false;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_string_equal(f.res->decisions[0].message, "Consolidation: delete node-d, its 1 pods fit on node-r");
        /* The trials left the input as it was. */
        assert_string_equal(f.cands[x].pods[0].sim->node_name, "node-x");
        teardown(&f);
}

/* A node being replaced does not hold its pool's node limit against its own replacement (issue 37, 5). */
static void test_limit_not_held_against_the_replacement(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "t1.4VCPU-12GB");
        add_pod(&f, a, "web-1", 1500, 0);
        add_pod(&f, a, "web-2", 1500, 0);
        f.cands[a].created_ms = NOW_MS - 721 * HOUR_MS;
        f.sim->pools[0]->limit_nodes = 1;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_EXPIRY);
        assert_int_equal(f.res->decisions[0].n_replacements, 1);
        assert_false(f.cands[a].sim->leaving); /* put back after the trial */
        teardown(&f);
}

static void test_multi_node(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"budgets\": [{\"nodes\": \"100%\"}]}");
        const char *names[] = { "node-a", "node-b", "node-c", "node-d" };
        const char *pods[] = { "p-a", "p-b", "p-c", "p-d" };
        for (size_t i = 0; i < 4; i++)
                add_pod(&f, add_node(&f, names[i], "c1.2VCPU-4GB"), pods[i], 600, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_MULTI_NODE);
        assert_true(d->n_candidates >= 3);
        assert_true(d->n_replacements <= 1);
        assert_contains(d->message, "Consolidation: ");
        assert_contains(d->message, " nodes into ");
        teardown(&f);
}

static void test_blocking_pods_and_nodes(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"budgets\": [{\"nodes\": \"100%\"}]}");
        size_t a = add_node(&f, "node-a", "t1.4VCPU-12GB"), b = add_node(&f, "node-b", "t1.4VCPU-12GB");
        size_t c = add_node(&f, "node-c", "t1.4VCPU-12GB"), d = add_node(&f, "node-d", "t1.4VCPU-12GB");
        add_pod(&f, a, "keep", 100, DISRUPT_POD_DO_NOT_DISRUPT);
        add_pod(&f, b, "pinned", 100, DISRUPT_POD_NOT_SAFE_TO_EVICT);
        add_pod(&f, c, "web", 100, 0)->blocking_pdb = "default/web";
        add_pod(&f, d, "db", 100, 0);
        f.cands[d].do_not_disrupt = true;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_string_equal(skip_of(&f, a), "not disrupted: pod default/keep is annotated do-not-disrupt");
        assert_contains(skip_of(&f, b), "safe-to-evict: false");
        assert_string_equal(skip_of(&f, c), "not disrupted: pdb default/web allows 0 evictions (pod default/web)");
        assert_string_equal(skip_of(&f, d), "not disrupted: the node is annotated do-not-disrupt");
        teardown(&f);
}

static void test_budgets(void **state) {
        (void)state;
        struct fixture f;
        /* Business hours (from 09:00 for 8h) allow no Empty disruption; it is 10:00 on a Thursday. */
        setup(&f, "{\"budgets\": [{\"nodes\": \"0\", \"reasons\": [\"Empty\"], \"schedule\": \"0 9 * * mon-fri\", "
                  "\"duration\": \"8h\"}, {\"nodes\": \"1\"}]}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB"), b = add_node(&f, "node-b", "t1.2VCPU-6GB");
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "the budgets of pool default allow no more Empty disruptions now");
        /* At 18:00 the window is over: one at a time (nodes: 1). */
        f.in.now_ms = NOW_MS + 8 * HOUR_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].n_candidates, 1);
        assert_contains(skip_of(&f, b), "allow no more Empty disruptions");
        /* A node already being disrupted uses up the budget. */
        f.cands[a].deleting = true;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_string_equal(skip_of(&f, a), "not disrupted: empty, but already being disrupted");
        teardown(&f);
}

static void test_drift(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"consolidationPolicy\": \"WhenEmpty\"}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        add_pod(&f, a, "web", 500, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "consolidationPolicy of pool default is WhenEmpty");
        f.cands[a].nodeclass_hash = "0ld";
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_DRIFT);
        assert_int_equal(d->reason, DISRUPT_REASON_DRIFTED);
        assert_int_equal(d->n_replacements, 1); /* replace first */
        assert_contains(d->message, "Drift: ProxmoxNodeClass default changed since launch; replace");
        /* Without host room no replacement can be planned: the skip names the simulation's reason (kept after its
         * result is gone), and the result asks for room. */
        size_t hosts = f.sim->n_hosts;
        f.sim->n_hosts = 0;
        f.in.hosts_unknown = true;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_true(f.res->needs_hosts);
        assert_contains(skip_of(&f, a), "drifted (ProxmoxNodeClass default changed since launch), but its pods fit "
                                        "nowhere: NodePool default: no host");
        f.sim->n_hosts = hosts;
        f.in.hosts_unknown = false;
        /* a claim without the hash version recorded the whole spec: compared with the class's hash_v1 */
        f.cands[a].nodepool_hash = pool_hash(&f, "default");
        f.cands[a].nodeclass_hash = "c0ffee";
        f.cands[a].nodeclass_hash_version = NULL;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_contains(f.res->decisions[0].message, "Drift: ProxmoxNodeClass default changed since launch");
        f.cands[a].nodeclass_hash = "c0ffee-v1";
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        f.cands[a].nodeclass_hash = NULL; /* a claim from before the annotations: never drifted */
        f.cands[a].nodepool_hash = "0ld";
        decide(&f);
        assert_contains(f.res->decisions[0].message, "NodePool default changed since launch");
        teardown(&f);
}

/* The node's labels (after the hostname and pool ones) and the pool's requirements, for requirements drift. */
static void set_labels(struct fixture *f, size_t i, const struct sim_label *labels, size_t n) {
        struct sim_node *sn = f->cands[i].sim;
        struct sim_label *all = simulate_alloc(f->sim, (sn->n_labels + n) * sizeof *all);
        memcpy(all, sn->labels, sn->n_labels * sizeof *all);
        memcpy(all + sn->n_labels, labels, n * sizeof *all);
        sn->labels = all;
        sn->n_labels += n;
}

static void require(struct fixture *f, const char *key, enum sim_op op, const char *v1, const char *v2) {
        struct sim_nodepool *sp = f->sim->pools[0];
        struct sim_requirement *r = simulate_alloc(f->sim, sizeof *r);
        const char **values = simulate_alloc(f->sim, 2 * sizeof *values);
        values[0] = v1;
        values[1] = v2;
        *r = (struct sim_requirement){ .key = key, .op = op, .values = values, .n_values = v2 ? 2 : v1 ? 1 : 0 };
        sp->reqs = r;
        sp->n_reqs = 1;
}

static enum disrupt_drift drift_of(const struct fixture *f, size_t i, char *what) {
        return disrupt_drift_of(&f->in, i, what, DISRUPT_MESSAGE_MAX);
}

static void test_drift_requirements(void **state) {
        (void)state;
        struct fixture f;
        char what[DISRUPT_MESSAGE_MAX];
        setup(&f, "{\"consolidationPolicy\": \"WhenEmpty\"}");
        struct sim_host *h2 = simulate_add_host(f.sim);
        *h2 = (struct sim_host){ .name = "pve2", .region = "r1", .free_cpus = 256, .free_memory_bytes = 1024 * GIB };
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        add_pod(&f, a, "web", 500, 0);
        const struct sim_label labels[] = { { SIM_LABEL_ZONE, "pve1" }, { "team", "web" }, { "gen", "8" } };
        set_labels(&f, a, labels, 3);
        /* Met: no drift. */
        require(&f, SIM_LABEL_ZONE, SIM_OP_IN, "pve1", "pve2");
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        assert_string_equal(what, "");
        require(&f, SIM_LABEL_ZONE, SIM_OP_NOT_IN, "pve3", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        require(&f, "gen", SIM_OP_GT, "7", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        require(&f, "team", SIM_OP_EXISTS, NULL, NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        /* A well-known label the node lacks is no drift; nor is a custom one the pool wants absent or not some value. */
        require(&f, SIM_LABEL_FAMILY, SIM_OP_IN, "t1", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        require(&f, "example.com/gpu", SIM_OP_DOES_NOT_EXIST, NULL, NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        require(&f, "example.com/gpu", SIM_OP_NOT_IN, "a100", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        /* Not met. */
        require(&f, "example.com/gpu", SIM_OP_IN, "a100", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_REQUIREMENTS);
        assert_string_equal(what, "NodePool default requires example.com/gpu In [a100], and its node has no label "
                                  "example.com/gpu");
        require(&f, "gen", SIM_OP_GT, "8", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_REQUIREMENTS);
        require(&f, "team", SIM_OP_DOES_NOT_EXIST, NULL, NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_REQUIREMENTS);
        require(&f, SIM_LABEL_ZONE, SIM_OP_IN, "pve2", NULL);
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_REQUIREMENTS);
        assert_string_equal(disrupt_drift_reason(DISRUPT_DRIFT_REQUIREMENTS), "RequirementsDrifted");
        /* Replaced first, by a node the simulation plans where the requirements hold. */
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_DRIFT);
        assert_int_equal(d->n_replacements, 1);
        assert_contains(d->message, "Drift: NodePool default requires topology.kubernetes.io/zone In [pve2], not "
                                    "topology.kubernetes.io/zone=pve1; replace, its 1 pods fit on a new");
        struct sim_result *sr = NULL;
        assert_int_equal(disrupt_replay(&f.in, &a, 1, &sr), 0);
        assert_int_equal(sr->n_claims, 1);
        assert_string_equal(f.sim->hosts[sr->claims[0].host]->name, "pve2");
        simulate_result_free(sr);
        /* The NodePool's own hash is checked first. */
        f.cands[a].nodepool_hash = "0ld";
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NODEPOOL);
        teardown(&f);
}

static void test_drift_template(void **state) {
        (void)state;
        struct fixture f;
        char what[DISRUPT_MESSAGE_MAX];
        const char *d1 = "3f786850e387550fdab836ed7e6dc881de23001b", *d2 = "89e6c98d92887913cadf06b2adb97f26cde4849b";
        setup(&f, "{\"consolidationPolicy\": \"WhenEmpty\"}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        add_pod(&f, a, "web", 500, 0);
        struct disrupt_candidate *c = &f.cands[a];
        c->template_launched = (struct disrupt_template){ "pve1", 9000, d1 };
        c->template_now = (struct disrupt_template){ "pve1", 9000, d1 };
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        /* Unknown on either side: no drift (a claim from before imageDigest compares the VMID only). */
        c->template_now = (struct disrupt_template){ "pve1", 0, NULL };
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        c->template_launched = (struct disrupt_template){ "pve1", 9000, NULL };
        c->template_now = (struct disrupt_template){ "pve1", 9000, d2 };
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        c->template_launched = (struct disrupt_template){ "pve1", 0, NULL };
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NONE);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        /* The template's config changed. */
        c->template_launched = (struct disrupt_template){ "pve1", 9000, d1 };
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_TEMPLATE);
        assert_string_equal(what, "the Proxmox template VM 9000 on pve1 changed since launch (config digest "
                                  "89e6c98d9288, was 3f786850e387)");
        assert_string_equal(disrupt_drift_reason(DISRUPT_DRIFT_TEMPLATE), "TemplateDrifted");
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_DRIFT);
        assert_int_equal(f.res->decisions[0].n_replacements, 1);
        assert_contains(f.res->decisions[0].message, "Drift: the Proxmox template VM 9000 on pve1 changed since launch");
        /* Another template VM now (a new one of that name, the old one gone). */
        c->template_now = (struct disrupt_template){ "pve1", 9100, d1 };
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_TEMPLATE);
        assert_string_equal(what, "the Proxmox template on pve1 is VM 9100 now, it was cloned from VM 9000");
        /* Held by a rule: drifted, not disrupted, and the skip says both. */
        c->do_not_disrupt = true;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "not disrupted: drifted (the Proxmox template on pve1 is VM 9100 now");
        /* The node class's hash is checked before the template. */
        c->nodeclass_hash = "0ld";
        assert_int_equal(drift_of(&f, a, what), DISRUPT_DRIFT_NODECLASS);
        assert_string_equal(disrupt_drift_reason(DISRUPT_DRIFT_NODECLASS), "NodeClassDrifted");
        assert_string_equal(disrupt_drift_reason(DISRUPT_DRIFT_NODEPOOL), "NodePoolDrifted");
        assert_null(disrupt_drift_reason(DISRUPT_DRIFT_NONE));
        teardown(&f);
}

static void test_expiry_is_forceful(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"budgets\": [{\"nodes\": \"0\"}]}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        add_pod(&f, a, "keep", 500, DISRUPT_POD_DO_NOT_DISRUPT);
        f.cands[a].created_ms = NOW_MS - 721 * HOUR_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_EXPIRY);
        assert_string_equal(f.res->decisions[0].message, "Expiry: created 721h ago, expireAfter is 720h");
        teardown(&f);
}

static void test_repair(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"consolidationPolicy\": \"WhenEmpty\"}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        add_pod(&f, a, "web", 500, 0);
        f.cands[a].ready = DISRUPT_READY_UNKNOWN;
        f.cands[a].ready_since_ms = NOW_MS - 20 * MIN_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0); /* off by default */
        f.in.repair = true;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_REPAIR);
        assert_string_equal(f.res->decisions[0].message, "Repair: Ready is Unknown for 20m (15m or more)");
        f.cands[a].ready_since_ms = NOW_MS - 10 * MIN_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        teardown(&f);
}

/* As Karpenter's health controller: no repair while more than 20 % of the pool (rounded up) is not Ready, for however
 * long; the nodes due for repair say why. The message names the repair period in force. */
static void test_repair_holds_off_when_much_of_the_pool_is_unhealthy(void **state) {
        (void)state;
        struct fixture f;
        char name[5][8];
        size_t n[5];
        setup(&f, "{\"consolidationPolicy\": \"WhenEmpty\"}");
        f.in.repair = true;
        f.in.repair_after_ms = 5000;
        for (int k = 0; k < 5; k++) {
                snprintf(name[k], sizeof name[k], "node-%c", 'a' + k);
                n[k] = add_node(&f, name[k], "t1.2VCPU-6GB");
                add_pod(&f, n[k], name[k], 500, 0);
        }
        f.cands[n[1]].ready = DISRUPT_READY_FALSE;
        f.cands[n[1]].ready_since_ms = NOW_MS - 6000;
        f.cands[n[3]].ready = DISRUPT_READY_UNKNOWN;
        f.cands[n[3]].ready_since_ms = NOW_MS - 1000; /* not due yet, but it counts */
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_string_equal(skip_of(&f, n[1]), "not repaired: 2 of the 5 nodes of pool default are not Ready, repair "
                                                "acts only while at most 20% are");
        f.cands[n[3]].ready = DISRUPT_READY_TRUE; /* 1 of 5 is not more than 20 % */
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_REPAIR);
        assert_int_equal(f.res->decisions[0].n_candidates, 1);
        assert_int_equal(f.res->decisions[0].candidates[0], n[1]);
        assert_string_equal(f.res->decisions[0].message, "Repair: Ready is False for 6s (5s or more)");
        teardown(&f);
}

static void test_young_and_pending(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{\"consolidateAfter\": \"10m\"}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        f.cands[a].initialized_ms = NOW_MS - 3 * MIN_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "initialized 3m ago, consolidateAfter is 10m");
        f.cands[a].initialized_ms = NOW_MS - HOUR_MS;
        struct sim_pod *p = simulate_add_pod(f.sim);
        p->namespace = "default";
        p->name = "waiting";
        p->requests.v[RESOURCE_CPU] = 100;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "pending pod default/waiting could schedule on it");
        teardown(&f);
}

/* ---- the pending-pods guard: the scheduling simulation's predicates ---- */

static struct sim_pod_term *hostname_term(struct fixture *f, const char *app) {
        struct sim_pod_term *t = simulate_alloc(f->sim, sizeof *t);
        *t = (struct sim_pod_term){ .selector = app_selector(f, app), .topology_key = SIM_LABEL_HOSTNAME };
        return t;
}

/* A pending pod whose node affinity or pod anti-affinity (its own, or a bound pod's) rules the node out does not
 * keep it; without those rules it does. */
static void test_pending_affinity(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        set_zone(&f, a, "z1");
        struct sim_pod *agent = add_pod(&f, a, "agent", 100, DISRUPT_POD_DAEMONSET)->sim;
        struct sim_pod *p = add_pending(&f, "zonal", "zonal", 100);
        struct sim_requirement *req = simulate_alloc(f.sim, sizeof *req);
        const char **z2 = simulate_alloc(f.sim, sizeof *z2);
        *z2 = "z2";
        *req = (struct sim_requirement){ .key = SIM_LABEL_ZONE, .op = SIM_OP_IN, .values = z2, .n_values = 1 };
        p->affinity = simulate_alloc(f.sim, sizeof *p->affinity);
        *p->affinity = (struct sim_node_term){ .reqs = req, .n_reqs = 1 };
        p->n_affinity = 1;
        decide(&f); /* it needs zone z2 */
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_EMPTINESS);
        p->n_affinity = 0;
        p->pod_anti_affinity = hostname_term(&f, "agent");
        p->n_pod_anti_affinity = 1;
        decide(&f); /* it keeps off nodes with an app=agent pod */
        assert_int_equal(f.res->n_decisions, 1);
        p->n_pod_anti_affinity = 0;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_string_equal(skip_of(&f, a), "not disrupted: empty, but pending pod default/zonal could schedule on it");
        agent->pod_anti_affinity = hostname_term(&f, "zonal");
        agent->n_pod_anti_affinity = 1;
        decide(&f); /* the bound pod keeps app=zonal off its node */
        assert_int_equal(f.res->n_decisions, 1);
        teardown(&f);
}

/* A pending pod spread over zones (maxSkew 1) could go to the zone without its pods (node-a, which it keeps), not to
 * node-b's, whose consolidation it does not hold up. */
static void test_pending_spread(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB"), b = add_node(&f, "node-b", "t1.2VCPU-6GB");
        set_zone(&f, a, "z1");
        set_zone(&f, b, "z2");
        add_pod(&f, b, "web-1", 500, 0)->sim->labels[0].value = "web";
        struct sim_pod *p = add_pending(&f, "web-2", "web", 500);
        p->spread = simulate_alloc(f.sim, sizeof *p->spread);
        *p->spread = (struct sim_spread){ .topology_key = SIM_LABEL_ZONE, .max_skew = 1, .do_not_schedule = true,
                                          .selector = app_selector(&f, "web") };
        p->n_spread = 1;
        decide(&f);
        assert_string_equal(skip_of(&f, a), "not disrupted: empty, but pending pod default/web-2 could schedule on it");
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_SINGLE_NODE);
        assert_int_equal(f.res->decisions[0].candidates[0], b);
        /* As a preference (ScheduleAnyway) the spread rules nothing out: node-b is kept too. */
        p->spread->do_not_schedule = false;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, b), "pending pod default/web-2 could schedule on it");
        teardown(&f);
}

/* ---- multi-node consolidation across pools ---- */

static void test_multi_node_pools(void **state) {
        (void)state;
        struct fixture f;
        const char *all = "{\"budgets\": [{\"nodes\": \"100%\"}]}";
        setup(&f, "{}");
        two_pools(&f, all, all);
        /* Cheapest to disrupt first: one pod each, the same price, so by name: node-1 (a), node-2 (b), ... */
        const char *names[] = { "node-1", "node-2", "node-3", "node-4" }, *pods[] = { "p-1", "p-2", "p-3", "p-4" };
        for (size_t i = 0; i < 4; i++)
                add_pod(&f, add_node_in(&f, names[i], "c1.2VCPU-4GB", i % 2 ? "b" : "a"), pods[i], 300, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_MULTI_NODE);
        assert_int_equal(d->n_candidates, 3);
        assert_string_equal(f.cands[d->candidates[0]].pool, "a");
        assert_string_equal(f.cands[d->candidates[1]].pool, "b");
        assert_int_equal(d->n_replacements, 0);
        assert_string_equal(d->message, "Consolidation: 3 nodes of pools a, b into 0, their 3 pods fit on node-4");
        /* Both pools have a decision: their other node waits. */
        assert_contains(skip_of(&f, 3), "pool b has a decision this pass");
        /* Pool b's budget allows none now: its nodes stay out, pool a's two go. */
        parse_named_pool(&f.pools[1], "b", "{\"budgets\": [{\"nodes\": \"0\"}]}");
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_MULTI_NODE);
        assert_int_equal(d->n_candidates, 2);
        for (size_t k = 0; k < d->n_candidates; k++)
                assert_string_equal(f.cands[d->candidates[k]].pool, "a");
        assert_string_equal(d->message, "Consolidation: 2 nodes into 0, their 2 pods fit on node-2");
        assert_string_equal(skip_of(&f, 1), "not disrupted: the budgets of pool b allow no more Underutilized "
                                            "disruptions now");
        teardown(&f);
}

/* Four nodes of two pools, each with a pod too big for the room left on the others: one new node for all four is
 * cheaper than the four together; the replacement is in a pool, the candidates are of both. */
static void test_multi_node_pools_replace(void **state) {
        (void)state;
        struct fixture f;
        const char *all = "{\"budgets\": [{\"nodes\": \"100%\"}]}";
        setup(&f, "{}");
        two_pools(&f, all, all);
        const char *names[] = { "node-1", "node-2", "node-3", "node-4" }, *pods[] = { "p-1", "p-2", "p-3", "p-4" };
        for (size_t i = 0; i < 4; i++)
                add_pod(&f, add_node_in(&f, names[i], "t1.2VCPU-6GB", i % 2 ? "b" : "a"), pods[i], 1200, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        const struct disrupt_decision *d = &f.res->decisions[0];
        assert_int_equal(d->method, DISRUPT_METHOD_MULTI_NODE);
        assert_true(d->n_candidates >= 3);
        assert_int_equal(d->n_replacements, 1);
        double sum = 0;
        for (size_t k = 0; k < d->n_candidates; k++)
                sum += f.cands[d->candidates[k]].price;
        assert_true(disrupt_price(d->replacements[0]) < sum);
        assert_contains(d->message, " of pools a, b into 1, ");
        teardown(&f);
}

/* ---- without host room ---- */

static void no_hosts(struct fixture *f, bool unknown, size_t *saved) {
        if (unknown)
                *saved = f->sim->n_hosts, f->sim->n_hosts = 0;
        else
                f->sim->n_hosts = *saved;
        f->in.hosts_unknown = unknown;
}

/* Decisions that need no new node come out the same without hosts; one that would replace a node says it needs
 * them. */
static void test_without_host_room(void **state) {
        (void)state;
        struct fixture f;
        size_t hosts = 0;
        setup(&f, "{\"consolidateAfter\": \"10m\"}");
        size_t a = add_node(&f, "node-a", "t1.16VCPU-48GB"), b = add_node(&f, "node-b", "t1.2VCPU-6GB");
        add_pod(&f, a, "web-1", 500, 0);
        add_pod(&f, a, "web-2", 500, 0);
        /* node-b is empty (but for 2 minutes): nothing to decide, nothing that room could change. */
        f.cands[b].last_pod_event_ms = NOW_MS - 2 * MIN_MS;
        f.cands[a].last_pod_event_ms = NOW_MS - 2 * MIN_MS;
        no_hosts(&f, true, &hosts);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_false(f.res->needs_hosts);
        assert_int_equal(f.res->simulations, 0);
        /* Empty for long enough: deleted, still without hosts. */
        f.cands[b].last_pod_event_ms = NOW_MS - HOUR_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].method, DISRUPT_METHOD_EMPTINESS);
        assert_false(f.res->needs_hosts);
        /* node-a's pods fit on node-b (the only other node): a delete, no room needed. */
        f.cands[a].last_pod_event_ms = NOW_MS - HOUR_MS;
        f.cands[b].last_pod_event_ms = NOW_MS - 2 * MIN_MS;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_string_equal(f.res->decisions[0].message, "Consolidation: delete node-a, its 2 pods fit on node-b");
        assert_false(f.res->needs_hosts);
        /* Too big for node-b: only a cheaper new node could take them, which needs host room. */
        f.cands[a].pods[0].sim->requests.v[RESOURCE_CPU] = 1500;
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_true(f.res->needs_hosts);
        no_hosts(&f, false, &hosts);
        decide(&f);
        assert_false(f.res->needs_hosts);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].n_replacements, 1);
        assert_contains(f.res->decisions[0].message, "Consolidation: replace node-a, its 2 pods fit on one cheaper ");
        /* A moved pod spread over zones: the zones of hosts with room are domains too, so room may change where it
         * goes. */
        f.cands[a].pods[0].sim->requests.v[RESOURCE_CPU] = 500;
        struct sim_pod *p = f.cands[a].pods[1].sim;
        p->spread = simulate_alloc(f.sim, sizeof *p->spread);
        *p->spread = (struct sim_spread){ .topology_key = SIM_LABEL_ZONE, .max_skew = 1, .do_not_schedule = true,
                                          .selector = app_selector(&f, "web-2") };
        p->n_spread = 1;
        no_hosts(&f, true, &hosts);
        decide(&f);
        assert_true(f.res->needs_hosts);
        no_hosts(&f, false, &hosts);
        teardown(&f);
}

/* node-a is of the cheapest shape that holds its two pods, which the other nodes have room for only together:
 * without room the trial leaves both unplaced, and as no new node for both could cost less than node-a, no room is
 * needed to know that node-a stays (with room it stays too). */
static void test_without_host_room_well_sized(void **state) {
        (void)state;
        struct fixture f;
        size_t hosts = 0;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "c1.4VCPU-8GB");
        add_pod(&f, a, "web-1", 1200, 0);
        add_pod(&f, a, "web-2", 1200, 0);
        const char *others[] = { "node-b", "node-c", "node-d" };
        for (size_t k = 0; k < 3; k++) {
                size_t o = add_node(&f, others[k], "c1.2VCPU-4GB");
                add_pod(&f, o, "db", 1030, 0);
                f.cands[o].do_not_disrupt = true;
        }
        no_hosts(&f, true, &hosts);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_int_equal(f.res->simulations, 1);
        assert_false(f.res->needs_hosts);
        no_hosts(&f, false, &hosts);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_contains(skip_of(&f, a), "fit neither on the other nodes nor on one cheaper shape");
        /* Smaller pods: a cheaper node could hold both, so room is needed to know. */
        for (size_t k = 0; k < 2; k++)
                f.cands[a].pods[k].sim->requests.v[RESOURCE_CPU] = 950;
        no_hosts(&f, true, &hosts);
        decide(&f);
        assert_true(f.res->needs_hosts);
        no_hosts(&f, false, &hosts);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 1);
        assert_int_equal(f.res->decisions[0].n_replacements, 1);
        teardown(&f);
}

static void test_bad_candidate(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        size_t a = add_node(&f, "node-a", "t1.2VCPU-6GB");
        f.cands[a].pool = "other";
        assert_int_equal(disrupt_decide(&f.in, &f.res), -EINVAL);
        assert_null(f.res);
        teardown(&f);
}

/* A cluster with no nodes yet (a fresh install): a pass decides nothing and reads no node array. */
static void test_no_nodes(void **state) {
        (void)state;
        struct fixture f;
        setup(&f, "{}");
        assert_int_equal(f.sim->n_nodes, 0);
        decide(&f);
        assert_int_equal(f.res->n_decisions, 0);
        assert_int_equal(f.res->n_skips, 0);
        teardown(&f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pool_defaults),
                cmocka_unit_test(test_pool_errors),
                cmocka_unit_test(test_pool_budgets_as_many_as_the_crd_allows),
                cmocka_unit_test(test_cron),
                cmocka_unit_test(test_budget_schedule),
                cmocka_unit_test(test_hashes),
                cmocka_unit_test(test_nodeclass_hash_leaves_out_in_place_fields),
                cmocka_unit_test(test_emptiness),
                cmocka_unit_test(test_single_node_delete),
                cmocka_unit_test(test_single_node_replace),
                cmocka_unit_test(test_balanced),
                cmocka_unit_test(test_pod_cost),
                cmocka_unit_test(test_not_onto_uninitialized),
                cmocka_unit_test(test_room_of_a_replacement_is_kept),
                cmocka_unit_test(test_limit_not_held_against_the_replacement),
                cmocka_unit_test(test_multi_node),
                cmocka_unit_test(test_blocking_pods_and_nodes),
                cmocka_unit_test(test_budgets),
                cmocka_unit_test(test_drift),
                cmocka_unit_test(test_drift_requirements),
                cmocka_unit_test(test_drift_template),
                cmocka_unit_test(test_expiry_is_forceful),
                cmocka_unit_test(test_repair),
                cmocka_unit_test(test_repair_holds_off_when_much_of_the_pool_is_unhealthy),
                cmocka_unit_test(test_young_and_pending),
                cmocka_unit_test(test_pending_affinity),
                cmocka_unit_test(test_pending_spread),
                cmocka_unit_test(test_multi_node_pools),
                cmocka_unit_test(test_multi_node_pools_replace),
                cmocka_unit_test(test_without_host_room),
                cmocka_unit_test(test_without_host_room_well_sized),
                cmocka_unit_test(test_bad_candidate),
                cmocka_unit_test(test_no_nodes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
