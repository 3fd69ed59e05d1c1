/* Tests for deploy/helm/pvescale-coordinator: the chart renders (with the project's Go-template engine) into valid
 * YAML with the expected objects for default and non-default values; the Deployment's flags parse as the
 * coordinator parses them; the config Secret round-trips; crds/ is a copy of deploy/crds; and the RBAC rules grant
 * exactly the API calls the coordinator (controller, provisioner, launcher) makes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fileio.h"
#include "helmrender.h"
#include "options.h"
#include "yamlconf.h"

#define NS "pvescale-system"

static char chart[2048], crds_dir[2048];

static int setup(void **state) {
        (void)state;
        const char *src = getenv("PVESCALE_SOURCE_DIR");
        snprintf(chart, sizeof chart, "%s/deploy/helm/pvescale-coordinator", src ? src : ".");
        snprintf(crds_dir, sizeof crds_dir, "%s/deploy/crds", src ? src : ".");
        return 0;
}

static json_t *render(const char *overrides) {
        json_t *o = overrides ? json_loads(overrides, 0, NULL) : NULL, *docs;
        char err[512];
        if (overrides && !o)
                fail_msg("bad overrides JSON");
        if (helmrender_chart(chart, o, NS, &docs, err, sizeof err) < 0)
                fail_msg("render: %s", err);
        json_decref(o);
        return docs;
}

/* The rendered objects of a kind (borrowed from docs, in order). */
static json_t *of_kind(const json_t *docs, const char *kind) {
        json_t *out = json_array();
        size_t i;
        json_t *d;
        json_array_foreach(docs, i, d) {
                json_t *obj = json_object_get(d, "object");
                if (strcmp(json_string_value(json_object_get(obj, "kind")), kind) == 0)
                        json_array_append(out, obj);
        }
        return out;
}

static size_t count_kind(const json_t *docs, const char *kind) {
        json_t *a = of_kind(docs, kind);
        size_t n = json_array_size(a);
        json_decref(a);
        return n;
}

static json_t *container(const json_t *docs) {
        json_t *deps = of_kind(docs, "Deployment");
        assert_int_equal(json_array_size(deps), 1);
        json_t *c = json_array_get(json_object_get(json_object_get(json_object_get(json_object_get(
                                           json_array_get(deps, 0), "spec"), "template"), "spec"), "containers"), 0);
        json_incref(c);
        json_decref(deps);
        return c;
}

static void test_chart_metadata(void **state) {
        (void)state;
        json_t *meta;
        char err[256];
        assert_int_equal(helmrender_chart_meta(chart, &meta, err, sizeof err), 0);
        assert_string_equal(json_string_value(json_object_get(meta, "APIVersion")), "v2");
        assert_string_equal(json_string_value(json_object_get(meta, "Name")), "pvescale-coordinator");
        assert_non_null(json_string_value(json_object_get(meta, "Version")));
        assert_non_null(json_string_value(json_object_get(meta, "AppVersion")));
        json_decref(meta);
}

static void test_default_render(void **state) {
        (void)state;
        json_t *docs = render(NULL);
        static const struct {
                const char *kind;
                size_t n;
        } want[] = { { "Deployment", 1 }, { "ServiceAccount", 1 }, { "Secret", 1 }, { "ClusterRole", 1 },
                     { "ClusterRoleBinding", 1 }, { "Role", 3 }, { "RoleBinding", 3 }, { "Service", 0 },
                     { "PodDisruptionBudget", 0 }, { "NodePool", 0 }, { "ProxmoxNodeClass", 0 },
                     { "ProxmoxTemplate", 0 } };
        size_t total = 0;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                if (count_kind(docs, want[i].kind) != want[i].n)
                        fail_msg("%s: %zu, want %zu", want[i].kind, count_kind(docs, want[i].kind), want[i].n);
                total += want[i].n;
        }
        assert_int_equal(json_array_size(docs), total);
        /* Every object has a name; namespaced ones live in the release namespace (or kube-system for tokens). */
        size_t i;
        json_t *d;
        json_array_foreach(docs, i, d) {
                json_t *m = json_object_get(json_object_get(d, "object"), "metadata");
                assert_non_null(json_string_value(json_object_get(m, "name")));
                const char *ns = json_string_value(json_object_get(m, "namespace"));
                assert_true(!ns || strcmp(ns, NS) == 0 || strcmp(ns, "kube-system") == 0 || strcmp(ns, "kube-public") == 0);
        }
        json_t *c = container(docs);
        assert_string_equal(json_string_value(json_object_get(c, "image")), "ghcr.io/pvescale/pvescale-coordinator:0.1.0");
        json_decref(c);
        json_decref(docs);
}

/* The container's args, as the coordinator parses them: the controller's flags, then config_parse_args. */
static void parse_args(const json_t *c, struct options *o, struct config *cfg) {
        const json_t *args = json_object_get(c, "args");
        char *argv[40] = { "pvescale-coordinator" };
        int argc = 1;
        for (size_t i = 0; i < json_array_size(args) && argc < 39; i++)
                argv[argc++] = (char *)json_string_value(json_array_get(args, i));
        char err[256];
        options_init(o);
        assert_int_equal(config_init(cfg), 0);
        if (options_parse(o, &argc, argv, NULL, err, sizeof err) < 0 || config_parse_args(cfg, argc, argv, err, sizeof err) != 0)
                fail_msg("the chart's flags do not parse: %s", err);
}

static void test_flags_parse(void **state) {
        (void)state;
        json_t *docs = render("{\"settings\": {\"launch\": false, \"workers\": 7, \"batchIdleDuration\": \"2s\","
                              " \"nodeRepair\": true, \"gcInterval\": \"30s\", \"cloneTimeout\": \"20m\","
                              " \"drainTimeout\": \"45m\", \"leaderElectLeaseDuration\": \"30s\"},"
                              " \"logVerbosityLevel\": \"debug\", \"metrics\": {\"port\": 9100}}");
        json_t *c = container(docs);
        struct options o;
        struct config cfg;
        parse_args(c, &o, &cfg);
        assert_false(o.launch);
        assert_true(o.leader_elect);
        assert_int_equal(o.workers, 7);
        assert_true(o.disruption);
        assert_true(o.node_repair);
        assert_int_equal(o.gc_interval_ms, 30000);
        assert_int_equal(o.disruption_interval_ms, 10000);
        assert_int_equal(o.node_repair_after_ms, 15 * 60 * 1000);
        assert_int_equal(o.replacement_timeout_ms, 10 * 60 * 1000);
        assert_int_equal(o.clone_timeout_ms, 20 * 60 * 1000);
        assert_int_equal(o.registration_timeout_ms, 15 * 60 * 1000);
        assert_int_equal(o.task_timeout_ms, 2 * 60 * 1000);
        assert_int_equal(o.drain_timeout_ms, 45 * 60 * 1000);
        assert_int_equal(o.lease_duration_ms, 30000);
        assert_int_equal(o.renew_deadline_ms, 10000);
        assert_int_equal(o.retry_period_ms, 2000);
        assert_int_equal(cfg.batch_idle_ms, 2000);
        assert_int_equal(cfg.batch_max_ms, 10000);
        assert_int_equal(cfg.metrics_port, 9100);
        assert_int_equal(cfg.log_level, LOG_LEVEL_DEBUG);
        assert_int_equal(cfg.log_format, LOG_FORMAT_LOGFMT);
        assert_string_equal(cfg.config_file, "/etc/pvescale/config.yaml");
        assert_null(cfg.kubeconfig); /* in-cluster */
        config_done(&cfg);
        json_decref(c);
        json_decref(docs);
}

static void test_everything_on(void **state) {
        (void)state;
        json_t *docs = render("{\"metrics\": {\"enabled\": true}, \"podDisruptionBudget\": {\"enabled\": true},"
                              " \"existingConfigSecret\": \"my-config\", \"existingConfigSecretKey\": \"pvescale.yaml\","
                              " \"agentsSecret\": \"agent-creds\", \"serviceAccount\": {\"name\": \"sa\"},"
                              " \"customResources\": {\"nodeClass\": {\"default\": {\"enabled\": true}},"
                              " \"nodePools\": {\"default\": {\"enabled\": true}},"
                              " \"nodeTemplate\": {\"default\": {\"enabled\": true}}},"
                              " \"extraArgs\": [\"--log-level=error\"]}");
        assert_int_equal(count_kind(docs, "Service"), 1);
        assert_int_equal(count_kind(docs, "PodDisruptionBudget"), 1);
        assert_int_equal(count_kind(docs, "Secret"), 0);
        assert_int_equal(count_kind(docs, "NodePool"), 1);
        assert_int_equal(count_kind(docs, "ProxmoxNodeClass"), 1);
        assert_int_equal(count_kind(docs, "ProxmoxTemplate"), 1);
        json_t *deps = of_kind(docs, "Deployment");
        const json_t *pod = json_object_get(json_object_get(json_object_get(json_array_get(deps, 0), "spec"), "template"),
                                            "spec");
        assert_string_equal(json_string_value(json_object_get(pod, "serviceAccountName")), "sa");
        const json_t *vol = json_object_get(json_array_get(json_object_get(pod, "volumes"), 0), "secret");
        assert_string_equal(json_string_value(json_object_get(vol, "secretName")), "my-config");
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(vol, "items"), 0), "key")),
                            "pvescale.yaml");
        assert_int_equal(json_array_size(json_object_get(pod, "volumes")), 2);
        json_t *c = container(docs);
        struct options o;
        struct config cfg;
        parse_args(c, &o, &cfg);
        assert_int_equal(cfg.log_level, LOG_LEVEL_ERROR); /* extraArgs come last and win */
        config_done(&cfg);
        json_t *sas = of_kind(docs, "ServiceAccount");
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(sas, 0), "metadata"), "name")),
                            "sa");
        json_decref(sas);
        json_decref(c);
        json_decref(deps);
        json_decref(docs);
}

/* base64 decoding for the Secret's data. */
static char *b64decode(const char *in) {
        static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t n = strlen(in), k = 0;
        char *out = calloc(n, 1);
        unsigned acc = 0, bits = 0;
        for (size_t i = 0; i < n && in[i] != '='; i++) {
                const char *p = strchr(tbl, in[i]);
                assert_non_null(p);
                acc = acc << 6 | (unsigned)(p - tbl);
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[k++] = (char)(acc >> bits & 0xff);
                }
        }
        return out;
}

static void test_config_secret_round_trip(void **state) {
        (void)state;
        json_t *docs = render("{\"config\": {\"clusters\": [{\"url\": \"https://pve1:8006/api2/json\", \"token_id\":"
                              " \"pvescale@pve!coordinator\", \"token_secret\": \"s3cret\", \"region\": \"cluster-1\"}],"
                              " \"agents\": {\"port\": 8207, \"token_file\": \"/etc/pvescale/agents/token\","
                              " \"hosts\": {\"pve1\": \"10.0.0.11\"}}}}");
        json_t *secrets = of_kind(docs, "Secret");
        const char *b64 = json_string_value(json_object_get(json_object_get(json_array_get(secrets, 0), "data"), "config.yaml"));
        assert_non_null(b64);
        char *yaml = b64decode(b64), err[256];
        json_t *doc;
        assert_int_equal(yamlconf_parse(yaml, strlen(yaml), &doc, err, sizeof err), 0);
        struct config cfg;
        assert_int_equal(config_init(&cfg), 0);
        if (config_parse_document(&cfg, doc, err, sizeof err) < 0)
                fail_msg("config.yaml from the chart: %s", err);
        assert_int_equal(cfg.n_clusters, 1);
        assert_string_equal(cfg.clusters[0].region, "cluster-1");
        assert_string_equal(cfg.agents.hosts[0].address, "10.0.0.11");
        config_done(&cfg);
        json_decref(doc);
        free(yaml);
        json_decref(secrets);
        json_decref(docs);
}

static void test_crds_are_copies(void **state) {
        (void)state;
        char path[2100];
        snprintf(path, sizeof path, "%s/crds", chart);
        DIR *d = opendir(crds_dir);
        assert_non_null(d);
        struct dirent *e;
        size_t n = 0;
        while ((e = readdir(d))) {
                if (!strstr(e->d_name, ".yaml"))
                        continue;
                char a[4608], b[4608], *ta, *tb;
                size_t la, lb;
                snprintf(a, sizeof a, "%s/%s", crds_dir, e->d_name);
                snprintf(b, sizeof b, "%s/%s", path, e->d_name);
                assert_int_equal(fileio_read(a, 1 << 20, &ta, &la), 0);
                if (fileio_read(b, 1 << 20, &tb, &lb) < 0)
                        fail_msg("%s is missing from the chart (copy deploy/crds/%s)", b, e->d_name);
                if (la != lb || memcmp(ta, tb, la) != 0)
                        fail_msg("%s differs from deploy/crds/%s: copy it again", b, e->d_name);
                free(ta);
                free(tb);
                n++;
        }
        closedir(d);
        assert_int_equal(n, 4);
        d = opendir(path);
        size_t m = 0;
        while ((e = readdir(d)))
                m += strstr(e->d_name, ".yaml") != NULL;
        closedir(d);
        assert_int_equal(m, n);
}

/* ---- RBAC ---- */

/* Every API call the coordinator makes, by where it is allowed: "" = cluster-wide (ClusterRole), else the
 * namespace of a Role ("@release" = the release namespace); names: the one object it is made on, when known
 * in advance (then the rule must say so with resourceNames), else NULL. */
static const struct api_call {
        const char *group, *resource, *verbs, *where, *who, *names;
} CALLS[] = {
        { "", "pods", "list watch", "", "controller informer" },
        { "", "nodes", "list watch", "", "controller informer; launcher (registration)" },
        { "", "nodes", "get patch update", "", "launcher: labels/taints of its Node (kube_modify: a merge patch, a PUT for a null)" },
        { "", "nodes", "delete", "", "launcher: teardown" },
        { "", "pods", "list", "", "launcher: termination, the pods of a Node" },
        { "", "pods", "delete", "", "launcher: termination, pods left at the end of the grace period" },
        { "", "pods/eviction", "create", "", "launcher: termination, evictions" },
        { "", "pods/status", "patch", "", "launcher: status.nominatedNodeName of the pods planned on its Node" },
        { "", "events", "create", "", "provisioner: Nominated/Warning on pods; launcher: on NodeClaims" },
        { "", "events", "list", "", "provisioner: Nominated events read back after a restart" },
        { "", "secrets", "get", "kube-system", "launcher: NodeClass templatesRef/valuesRef (their default namespace)" },
        { "", "configmaps", "get", "kube-public", "launcher: kube-public/cluster-info", "cluster-info" },
        { "apps", "daemonsets", "list watch", "", "controller informer" },
        { "policy", "poddisruptionbudgets", "list watch", "", "controller informer (the scale-down pass)" },
        { "pvescale.io", "nodeclaims", "list watch", "", "controller informer" },
        { "pvescale.io", "nodeclaims", "create", "", "provisioner" },
        { "pvescale.io", "nodeclaims", "get patch update delete", "", "launcher: finalizer (kube_modify), failed launch" },
        { "pvescale.io", "nodeclaims/status", "patch", "", "provisioner: host, region, capacity" },
        { "pvescale.io", "nodeclaims/status", "patch update", "", "launcher: steps (a merge patch, a PUT for a null)" },
        { "pvescale.io", "nodepools", "list watch get", "", "controller informer; launcher" },
        { "pvescale.io", "nodepools/status", "patch", "", "provisioner: resources in use" },
        { "pvescale.io", "proxmoxnodeclasses", "list watch get", "", "controller informer; launcher" },
        { "pvescale.io", "proxmoxtemplates", "get list", "", "launcher: managed templates (GC pass)" },
        { "pvescale.io", "proxmoxtemplates/status", "patch", "", "launcher: managed templates' status per host" },
        { "coordination.k8s.io", "leases", "create", "@release", "leader election: the Lease's creation" },
        { "coordination.k8s.io", "leases", "get update", "@release", "leader election", "pvescale-coordinator" },
        { "", "secrets", "get list create delete", "kube-system", "launcher: bootstrap tokens" },
};

static bool has(const json_t *arr, const char *s) {
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
                const char *x = json_string_value(v);
                if (x && (strcmp(x, s) == 0 || strcmp(x, "*") == 0))
                        return true;
        }
        return false;
}

/* The rules of the (Cluster)Roles of kind bound to our ServiceAccount, for namespace ns ("" = cluster roles). */
static json_t *rules_for(const json_t *docs, const char *where) {
        bool cluster = !*where;
        json_t *roles = of_kind(docs, cluster ? "ClusterRole" : "Role");
        json_t *bindings = of_kind(docs, cluster ? "ClusterRoleBinding" : "RoleBinding"), *rules = json_array();
        const char *ns = strcmp(where, "@release") == 0 ? NS : where;
        size_t i, j;
        json_t *b, *r;
        json_array_foreach(bindings, i, b) {
                const json_t *sub = json_array_get(json_object_get(b, "subjects"), 0);
                const char *bns = json_string_value(json_object_get(json_object_get(b, "metadata"), "namespace"));
                const char *role = json_string_value(json_object_get(json_object_get(b, "roleRef"), "name"));
                assert_string_equal(json_string_value(json_object_get(sub, "kind")), "ServiceAccount");
                assert_string_equal(json_string_value(json_object_get(sub, "name")), "pvescale");
                assert_string_equal(json_string_value(json_object_get(sub, "namespace")), NS);
                if (!cluster && strcmp(bns, ns) != 0)
                        continue;
                json_array_foreach(roles, j, r) {
                        const json_t *m = json_object_get(r, "metadata");
                        const char *rns = json_string_value(json_object_get(m, "namespace"));
                        if (strcmp(json_string_value(json_object_get(m, "name")), role) == 0 && (cluster || strcmp(rns, ns) == 0))
                                json_array_extend(rules, json_object_get(r, "rules"));
                }
        }
        json_decref(roles);
        json_decref(bindings);
        return rules;
}

/* 1: a rule allows the call on names (resourceNames naming it, or any name when names is NULL); 0: none does;
 * -1: only a rule for every name does, where resourceNames would do. */
static int allowed(const json_t *rules, const char *group, const char *resource, const char *verb, const char *names) {
        size_t i;
        json_t *r;
        int found = 0;
        json_array_foreach(rules, i, r) {
                if (!has(json_object_get(r, "apiGroups"), group) || !has(json_object_get(r, "resources"), resource) ||
                    !has(json_object_get(r, "verbs"), verb))
                        continue;
                const json_t *rn = json_object_get(r, "resourceNames");
                if (names && !rn)
                        return -1;
                if (!rn || (names && has(rn, names))) /* resourceNames never allow a call on any name */
                        found = 1;
        }
        return found;
}

static bool in_calls(const char *group, const char *resource, const char *verb, const char *where) {
        for (size_t i = 0; i < sizeof CALLS / sizeof CALLS[0]; i++) {
                const struct api_call *c = &CALLS[i];
                char verbs[128];
                snprintf(verbs, sizeof verbs, " %s ", c->verbs);
                char v[64];
                snprintf(v, sizeof v, " %s ", verb);
                if (strcmp(c->group, group) == 0 && strcmp(c->resource, resource) == 0 && strstr(verbs, v) &&
                    strcmp(c->where, where) == 0)
                        return true;
        }
        return false;
}

static void check_no_extra(const json_t *rules, const char *where) {
        size_t i, a, b, c;
        json_t *r, *g, *res, *verb;
        json_array_foreach(rules, i, r) {
                if (json_object_get(r, "nonResourceURLs"))
                        continue;
                json_array_foreach(json_object_get(r, "apiGroups"), a, g)
                        json_array_foreach(json_object_get(r, "resources"), b, res)
                                json_array_foreach(json_object_get(r, "verbs"), c, verb) {
                                        if (!in_calls(json_string_value(g), json_string_value(res), json_string_value(verb), where))
                                                fail_msg("RBAC grants %s %s/%s (%s) that no code path uses",
                                                         json_string_value(verb), json_string_value(g), json_string_value(res),
                                                         *where ? where : "cluster");
                                }
        }
}

static void test_rbac_covers_the_calls_exactly(void **state) {
        (void)state;
        json_t *docs = render(NULL);
        static const char *const places[] = { "", "@release", "kube-system", "kube-public" };
        for (size_t p = 0; p < 4; p++) {
                json_t *rules = rules_for(docs, places[p]);
                for (size_t i = 0; i < sizeof CALLS / sizeof CALLS[0]; i++) {
                        const struct api_call *c = &CALLS[i];
                        if (strcmp(c->where, places[p]) != 0)
                                continue;
                        char verbs[128], *save = NULL;
                        snprintf(verbs, sizeof verbs, "%s", c->verbs);
                        for (char *v = strtok_r(verbs, " ", &save); v; v = strtok_r(NULL, " ", &save)) {
                                int a = allowed(rules, c->group, c->resource, v, c->names);
                                if (a == 0)
                                        fail_msg("RBAC lacks %s %s/%s (%s) for %s", v, c->group, c->resource,
                                                 *c->where ? c->where : "cluster", c->who);
                                if (a < 0)
                                        fail_msg("RBAC grants %s %s/%s (%s) on every name where resourceNames [%s] "
                                                 "would do", v, c->group, c->resource, *c->where ? c->where : "cluster",
                                                 c->names);
                        }
                }
                check_no_extra(rules, places[p]);
                json_decref(rules);
        }
        json_decref(docs);
        /* Secrets outside kube-system only where rbac.secretNamespaces says, and only get. */
        docs = render("{\"rbac\": {\"secretNamespaces\": [\"apps\"]}}");
        json_t *rules = rules_for(docs, "apps");
        assert_int_equal(allowed(rules, "", "secrets", "get", NULL), 1);
        assert_int_equal(allowed(rules, "", "secrets", "list", NULL), 0);
        json_decref(rules);
        rules = rules_for(docs, "");
        assert_int_equal(allowed(rules, "", "secrets", "get", NULL), 0);
        assert_int_equal(allowed(rules, "", "configmaps", "get", NULL), 0);
        json_decref(rules);
        json_decref(docs);
}

/* The Deployment's pod template (borrowed from deps[0]). */
static const json_t *pod_template(const json_t *deps) {
        return json_object_get(json_object_get(json_array_get(deps, 0), "spec"), "template");
}

static char *config_checksum(const char *overrides) {
        json_t *docs = render(overrides), *deps = of_kind(docs, "Deployment");
        const char *sum = json_string_value(
                json_object_get(json_object_get(json_object_get(pod_template(deps), "metadata"), "annotations"),
                                "checksum/config"));
        assert_non_null(sum);
        assert_int_equal(strlen(sum), 64);
        assert_int_equal(strspn(sum, "0123456789abcdef"), 64);
        char *copy = strdup(sum);
        json_decref(deps);
        json_decref(docs);
        return copy;
}

/* A helm upgrade that changes config.yaml changes the pod template (checksum/config), so the pods roll; the
 * same values give the same checksum. */
static void test_config_checksum_rolls_the_pods(void **state) {
        (void)state;
        char *a = config_checksum(NULL), *a2 = config_checksum(NULL);
        char *b = config_checksum("{\"config\": {\"clusters\": [{\"url\": \"https://pve1:8006\", \"region\": \"r1\"}]}}");
        char *c = config_checksum("{\"existingConfigSecret\": \"other\"}");
        assert_string_equal(a, a2);
        assert_string_not_equal(a, b);
        assert_string_not_equal(a, c);
        free(a);
        free(a2);
        free(b);
        free(c);
}

/* By default the coordinator never runs on a node it launched (it would drain itself). */
static void test_default_affinity_avoids_own_nodes(void **state) {
        (void)state;
        json_t *docs = render(NULL), *deps = of_kind(docs, "Deployment");
        const json_t *terms = json_object_get(
                json_object_get(json_object_get(json_object_get(json_object_get(pod_template(deps), "spec"), "affinity"),
                                                "nodeAffinity"),
                                "requiredDuringSchedulingIgnoredDuringExecution"),
                "nodeSelectorTerms");
        assert_int_equal(json_array_size(terms), 1);
        const json_t *e = json_array_get(json_object_get(json_array_get(terms, 0), "matchExpressions"), 0);
        assert_string_equal(json_string_value(json_object_get(e, "key")), "pvescale.io/nodepool");
        assert_string_equal(json_string_value(json_object_get(e, "operator")), "DoesNotExist");
        json_decref(deps);
        json_decref(docs);
}

/* serviceMonitor.enabled: a ServiceMonitor whose selector matches the metrics Service (created for it even with
 * metrics.enabled false, without the scrape annotations) and whose port is the Service's. */
static void test_service_monitor(void **state) {
        (void)state;
        json_t *docs = render(NULL);
        assert_int_equal(count_kind(docs, "ServiceMonitor"), 0);
        json_decref(docs);
        docs = render("{\"serviceMonitor\": {\"enabled\": true, \"additionalLabels\": {\"release\": \"prom\"}}}");
        json_t *sms = of_kind(docs, "ServiceMonitor"), *svcs = of_kind(docs, "Service");
        assert_int_equal(json_array_size(sms), 1);
        assert_int_equal(json_array_size(svcs), 1);
        const json_t *sm = json_array_get(sms, 0), *svc = json_array_get(svcs, 0);
        assert_string_equal(json_string_value(json_object_get(sm, "apiVersion")), "monitoring.coreos.com/v1");
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(sm, "metadata"), "labels"),
                                                              "release")),
                            "prom");
        const json_t *want = json_object_get(json_object_get(json_object_get(sm, "spec"), "selector"), "matchLabels");
        const json_t *have = json_object_get(json_object_get(svc, "metadata"), "labels");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)want, k, v) assert_true(json_equal(v, json_object_get(have, k)));
        assert_null(json_object_get(json_object_get(svc, "metadata"), "annotations"));
        const char *port = json_string_value(
                json_object_get(json_array_get(json_object_get(json_object_get(sm, "spec"), "endpoints"), 0), "port"));
        assert_string_equal(port, json_string_value(json_object_get(
                                          json_array_get(json_object_get(json_object_get(svc, "spec"), "ports"), 0), "name")));
        json_decref(sms);
        json_decref(svcs);
        json_decref(docs);
}

/* values.schema.json names every key of values.yaml (and nothing else) at the levels it closes, and its enums hold
 * the defaults: a value added without its schema, or a schema key left behind, fails here. */
static void check_keys_against(const json_t *values, const json_t *schema, const char *path) {
        const json_t *props = json_object_get(schema, "properties");
        if (!json_is_object(values) || !props || json_is_true(json_object_get(schema, "additionalProperties")) ||
            !json_is_false(json_object_get(schema, "additionalProperties")))
                return;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)values, k, v) {
                const json_t *sub = json_object_get(props, k);
                if (!sub)
                        fail_msg("values.yaml %s.%s is not in values.schema.json", path, k);
                const json_t *en = json_object_get(sub, "enum");
                size_t i;
                json_t *e;
                bool found = !en;
                json_array_foreach((json_t *)en, i, e) found = found || json_equal(e, v);
                if (!found)
                        fail_msg("values.yaml %s.%s: its default is not in the schema's enum", path, k);
                char deeper[512];
                snprintf(deeper, sizeof deeper, "%s.%s", path, k);
                check_keys_against(v, sub, deeper);
        }
        json_object_foreach((json_t *)props, k, v) {
                if (strcmp(path, "") == 0 && !json_object_get(values, k))
                        fail_msg("values.schema.json names %s, which values.yaml does not have", k);
        }
}

static void test_values_schema_matches_values(void **state) {
        (void)state;
        char path[2200], err[256];
        snprintf(path, sizeof path, "%s/values.schema.json", chart);
        json_error_t je;
        json_t *schema = json_load_file(path, 0, &je);
        if (!schema)
                fail_msg("%s: %s", path, je.text);
        snprintf(path, sizeof path, "%s/values.yaml", chart);
        json_t *values;
        assert_int_equal(yamlconf_load(path, &values, err, sizeof err), 0);
        assert_true(json_is_false(json_object_get(schema, "additionalProperties")));
        check_keys_against(values, schema, "");
        json_decref(values);
        json_decref(schema);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_chart_metadata),
                cmocka_unit_test(test_default_render),
                cmocka_unit_test(test_flags_parse),
                cmocka_unit_test(test_everything_on),
                cmocka_unit_test(test_config_secret_round_trip),
                cmocka_unit_test(test_crds_are_copies),
                cmocka_unit_test(test_rbac_covers_the_calls_exactly),
                cmocka_unit_test(test_config_checksum_rolls_the_pods),
                cmocka_unit_test(test_default_affinity_avoids_own_nodes),
                cmocka_unit_test(test_service_monitor),
                cmocka_unit_test(test_values_schema_matches_values),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
