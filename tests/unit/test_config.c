/* Tests for coordinator/config: durations, the config document, environment and flags, and config_load. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "yamlconf.h"

static json_t *yaml(const char *text) {
        json_t *v = NULL;
        char err[256];
        if (yamlconf_parse(text, strlen(text), &v, err, sizeof err) < 0)
                fail_msg("bad test YAML: %s", err);
        return v;
}

/* Parse a document into a fresh config; returns the result and the message. */
static int parse_doc(const char *text, struct config *cfg, char *err, size_t errlen) {
        json_t *doc = yaml(text);
        assert_int_equal(config_init(cfg), 0);
        err[0] = '\0';
        int r = config_parse_document(cfg, doc, err, errlen);
        json_decref(doc);
        return r;
}

static void assert_doc_error(const char *text, const char *message) {
        struct config cfg;
        char err[256];
        assert_int_equal(parse_doc(text, &cfg, err, sizeof err), -EINVAL);
        assert_string_equal(err, message);
        assert_null(cfg.clusters);
        config_done(&cfg);
}

static void test_durations(void **state) {
        (void)state;
        static const struct {
                const char *text;
                uint64_t ms;
        } ok[] = { { "1s", 1000 },     { "500ms", 500 }, { "10m", 600000 }, { "1m30s", 90000 }, { "1.5h", 5400000 },
                   { "0", 0 },         { "2000us", 2 },  { ".5s", 500 },    { "1h0m1s", 3601000 },
                   { "1500000ns", 1 } };
        static const char *const bad[] = { "", "1", "s", "1x", "-1s", "1.2.3s", "1s2", "abc", "0x10s", "1e3s",
                                           " 1s", "." };
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
                uint64_t ms = 12345;
                assert_int_equal(config_parse_duration(ok[i].text, &ms), 0);
                assert_int_equal(ms, ok[i].ms);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                uint64_t ms = 7;
                assert_int_equal(config_parse_duration(bad[i], &ms), -EINVAL);
                assert_int_equal(ms, 7);
        }
        uint64_t ms;
        assert_int_equal(config_parse_duration("9000h", &ms), -ERANGE);
}

static void test_defaults(void **state) {
        (void)state;
        struct config cfg;
        assert_int_equal(config_init(&cfg), 0);
        assert_string_equal(cfg.config_file, "/etc/pvescale/config.yaml");
        assert_null(cfg.kubeconfig);
        assert_int_equal(cfg.node_policy, CONFIG_NODE_POLICY_STATIC);
        assert_int_equal(cfg.batch_idle_ms, 1000);
        assert_int_equal(cfg.batch_max_ms, 10000);
        assert_int_equal(cfg.log_level, LOG_LEVEL_INFO);
        assert_int_equal(cfg.metrics_port, 8080);
        assert_int_equal(cfg.health_port, 8081);
        assert_false(cfg.agents.enabled);
        config_done(&cfg);
}

/* The seed's Helm values, converted as they are. */
static void test_seed_clusters(void **state) {
        (void)state;
        struct config cfg;
        char err[256];
        assert_int_equal(parse_doc("clusters:\n"
                                   "  - url: https://cluster-api-1.exmple.com:8006/api2/json\n"
                                   "    insecure: false\n"
                                   "    token_id: \"kubernetes@pve!karpenter\"\n"
                                   "    token_secret: \"key\"\n"
                                   "    region: cluster-1\n"
                                   "  - url: https://10.0.0.2:8006/\n"
                                   "    insecure: true\n"
                                   "    token_id: kubernetes@pve!k2\n"
                                   "    token_secret_file: /etc/pvescale/k2.secret\n"
                                   "    region: cluster-2\n"
                                   "    ca_file: /etc/pvescale/pve-ca.pem\n",
                                   &cfg, err, sizeof err),
                         0);
        assert_int_equal(cfg.n_clusters, 2);
        assert_string_equal(cfg.clusters[0].url, "https://cluster-api-1.exmple.com:8006/api2/json");
        assert_false(cfg.clusters[0].insecure);
        assert_string_equal(cfg.clusters[0].token_id, "kubernetes@pve!karpenter");
        assert_string_equal(cfg.clusters[0].token_secret, "key");
        assert_null(cfg.clusters[0].token_secret_file);
        assert_string_equal(cfg.clusters[0].region, "cluster-1");
        assert_null(cfg.clusters[0].ca_file);
        assert_string_equal(cfg.clusters[1].url, "https://10.0.0.2:8006/api2/json");
        assert_true(cfg.clusters[1].insecure);
        assert_null(cfg.clusters[1].token_secret);
        assert_string_equal(cfg.clusters[1].token_secret_file, "/etc/pvescale/k2.secret");
        assert_string_equal(cfg.clusters[1].ca_file, "/etc/pvescale/pve-ca.pem");
        assert_false(cfg.agents.enabled);
        config_done(&cfg);
}

#define GOOD "url: 'https://pve:8006', token_id: 'a@pve!b', token_secret: s"

static void test_agents(void **state) {
        (void)state;
        struct config cfg;
        char err[256];
        assert_int_equal(parse_doc("clusters: [{url: 'https://pve:8006', token_id: 'a@pve!b', token_secret: s, "
                                   "region: r1}]\n"
                                   "agents:\n"
                                   "  port: 9443\n"
                                   "  token_file: /etc/pvescale/agent.token\n"
                                   "  ca_file: /etc/pvescale/agent-ca.pem\n"
                                   "  hosts:\n"
                                   "    pve1: 10.0.0.11\n"
                                   "    pve2: pve2.lan\n",
                                   &cfg, err, sizeof err),
                         0);
        assert_true(cfg.agents.enabled);
        assert_int_equal(cfg.agents.port, 9443);
        assert_string_equal(cfg.agents.token_file, "/etc/pvescale/agent.token");
        assert_string_equal(cfg.agents.ca_file, "/etc/pvescale/agent-ca.pem");
        assert_int_equal(cfg.agents.n_hosts, 2);
        assert_string_equal(cfg.agents.hosts[0].node, "pve1");
        assert_string_equal(cfg.agents.hosts[0].address, "10.0.0.11");
        assert_string_equal(cfg.agents.hosts[1].node, "pve2");
        assert_string_equal(cfg.agents.hosts[1].address, "pve2.lan");
        config_done(&cfg);

        assert_int_equal(parse_doc("clusters: [{url: 'https://pve', token_id: 'a@pve!b', token_secret: s, "
                                   "region: r1}]\nagents: {token_file: /t}\n",
                                   &cfg, err, sizeof err),
                         0);
        assert_int_equal(cfg.agents.port, 8207);
        assert_int_equal(cfg.agents.n_hosts, 0);
        assert_null(cfg.join.api_server); /* no join section: cluster-info */
        config_done(&cfg);
}

/* No fallback to Proxmox's accounting under static unless agents.fallback says so; simple falls back. */
static void test_agent_fallback(void **state) {
        (void)state;
        struct config cfg;
        char err[256];
        assert_int_equal(parse_doc("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t}\n", &cfg, err,
                                   sizeof err),
                         0);
        assert_int_equal(cfg.agents.fallback, CONFIG_AGENT_FALLBACK_DEFAULT);
        assert_false(config_agent_fallback_proxmox(&cfg)); /* static is the default policy */
        cfg.node_policy = CONFIG_NODE_POLICY_SIMPLE;
        assert_true(config_agent_fallback_proxmox(&cfg));
        config_done(&cfg);

        assert_int_equal(parse_doc("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, fallback: proxmox}\n",
                                   &cfg, err, sizeof err),
                         0);
        assert_true(config_agent_fallback_proxmox(&cfg));
        config_done(&cfg);

        assert_int_equal(parse_doc("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, fallback: none}\n",
                                   &cfg, err, sizeof err),
                         0);
        cfg.node_policy = CONFIG_NODE_POLICY_SIMPLE;
        assert_false(config_agent_fallback_proxmox(&cfg));
        config_done(&cfg);
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, fallback: pve}",
                         "agents.fallback: expected none or proxmox");

        assert_int_equal(parse_doc("clusters: [{" GOOD ", region: r1}]\n"
                                   "join: {api_server: 'https://10.0.0.10:6443', ca_file: /etc/pvescale/k8s-ca.crt}\n",
                                   &cfg, err, sizeof err),
                         0);
        assert_string_equal(cfg.join.api_server, "https://10.0.0.10:6443");
        assert_string_equal(cfg.join.ca_file, "/etc/pvescale/k8s-ca.crt");
        assert_null(cfg.join.ca); /* read by config_load */
        config_done(&cfg);
}

static void test_document_errors(void **state) {
        (void)state;
        assert_doc_error("{}", "clusters: expected a list of at least one Proxmox cluster");
        assert_doc_error("clusters: []", "clusters: expected a list of at least one Proxmox cluster");
        assert_doc_error("clusters: [{url: 'https://pve', token_secret: s, region: r1}]",
                         "clusters[0].token_id: required");
        assert_doc_error("clusters: [{" GOOD ", region: r1}, {url: 'https://b', token_secret: s, region: r2}]",
                         "clusters[1].token_id: required");
        assert_doc_error("clusters: [{url: 'https://pve', token_id: 'root@pam', token_secret: s, region: r1}]",
                         "clusters[0].token_id: expected user@realm!tokenid (got \"root@pam\")");
        assert_doc_error("clusters: [{url: 'https://pve', token_id: 'a@pve!b', region: r1}]",
                         "clusters[0].token_secret: required (or token_secret_file)");
        assert_doc_error("clusters: [{" GOOD ", token_secret_file: /f, region: r1}]",
                         "clusters[0].token_secret_file: give token_secret or token_secret_file, not both");
        assert_doc_error("clusters: [{" GOOD "}]", "clusters[0].region: required");
        assert_doc_error("clusters: [{" GOOD ", region: r1, insecure: 'yes'}]",
                         "clusters[0].insecure: expected true or false");
        assert_doc_error("clusters: [{" GOOD ", region: r1, tokenid: x}]", "clusters[0].tokenid: unknown key");
        assert_doc_error("clusters: [{" GOOD ", region: 5}]", "clusters[0].region: expected a string");
        assert_doc_error("clusters: [{" GOOD ", region: ''}]", "clusters[0].region: must not be empty");
        assert_doc_error("clusters: [{url: 'pve:8006', token_id: 'a@pve!b', token_secret: s, region: r1}]",
                         "clusters[0].url: expected an https:// URL such as https://pve1:8006/api2/json");
        assert_doc_error("clusters: [{" GOOD ", region: r1}, {" GOOD ", region: r1}]",
                         "clusters[1].region: \"r1\" is already used by clusters[0]");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagent: {}", "agent: unknown key");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagents: {port: 8207}", "agents.token_file: required");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, port: 70000}",
                         "agents.port: expected a port from 1 to 65535");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, hosts: {pve1: [a]}}",
                         "agents.hosts.pve1: expected a host name or IP address");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, hosts: [pve1]}",
                         "agents.hosts: expected a mapping of node name to address");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\nagents: {token_file: /t, tls: 1}",
                         "agents.tls: unknown key");
        assert_doc_error("- a\n- b\n", "the config file must be a mapping with clusters, agents and join");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\njoin: {ca_file: /ca.pem}", "join.api_server: required");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\njoin: {api_server: 'https://k:6443'}",
                         "join.ca_file: required");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\njoin: {api_server: 'k:6443', ca_file: /c}",
                         "join.api_server: expected an https:// URL (got \"k:6443\")");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\njoin: {api_server: 'https://k', ca_file: /c, token: x}",
                         "join.token: unknown key");
        assert_doc_error("clusters: [{" GOOD ", region: r1}]\njoin: [x]", "join: expected a mapping with api_server and ca_file");
        assert_doc_error("clusters: [5]",
                         "clusters[0]: expected a mapping with url, token_id, token_secret and region");
}

/* A failed parse keeps what was there. */
static void test_document_failure_keeps_previous(void **state) {
        (void)state;
        struct config cfg;
        char err[256];
        assert_int_equal(parse_doc("clusters: [{" GOOD ", region: r1}]", &cfg, err, sizeof err), 0);
        json_t *bad = yaml("clusters: [{" GOOD "}]");
        assert_int_equal(config_parse_document(&cfg, bad, err, sizeof err), -EINVAL);
        json_decref(bad);
        assert_int_equal(cfg.n_clusters, 1);
        assert_string_equal(cfg.clusters[0].region, "r1");
        config_done(&cfg);
}

static void test_env_and_flags(void **state) {
        (void)state;
        struct config cfg;
        char err[256];
        assert_int_equal(config_init(&cfg), 0);
        const char *env[] = { "HOME=/root", "NODE_POLICY=simple", "BATCH_IDLE_DURATION=2s", "KUBECONFIG=/k/env",
                              "METRICS_PORT=", "LOG_LEVEL=debug", NULL };
        assert_int_equal(config_parse_env(&cfg, env, err, sizeof err), 0);
        assert_int_equal(cfg.node_policy, CONFIG_NODE_POLICY_SIMPLE);
        assert_int_equal(cfg.batch_idle_ms, 2000);
        assert_string_equal(cfg.kubeconfig, "/k/env");
        assert_int_equal(cfg.metrics_port, 8080); /* empty = unset */
        assert_int_equal(cfg.log_level, LOG_LEVEL_DEBUG);

        char *argv[] = { "pvescale-coordinator", "--node-policy", "static", "--batch-idle-duration=500ms",
                         "-kubeconfig", "/k/flag", "--batch-max-duration", "1m", "--metrics-port=9090",
                         "--health-port", "9091", "--config=/etc/x.yaml", "--log-level", "error", NULL };
        assert_int_equal(config_parse_args(&cfg, 14, argv, err, sizeof err), 0);
        assert_int_equal(cfg.node_policy, CONFIG_NODE_POLICY_STATIC);
        assert_int_equal(cfg.batch_idle_ms, 500);
        assert_int_equal(cfg.batch_max_ms, 60000);
        assert_string_equal(cfg.kubeconfig, "/k/flag");
        assert_string_equal(cfg.config_file, "/etc/x.yaml");
        assert_int_equal(cfg.metrics_port, 9090);
        assert_int_equal(cfg.health_port, 9091);
        assert_int_equal(cfg.log_level, LOG_LEVEL_ERROR);
        config_done(&cfg);
}

static void assert_args_error(int argc, char **argv, const char *message) {
        struct config cfg;
        char err[256] = "";
        assert_int_equal(config_init(&cfg), 0);
        assert_int_equal(config_parse_args(&cfg, argc, argv, err, sizeof err), -EINVAL);
        assert_string_equal(err, message);
        config_done(&cfg);
}

static void test_flag_errors(void **state) {
        (void)state;
        char *a1[] = { "p", "--batch-idle-duration", "abc" };
        assert_args_error(3, a1, "--batch-idle-duration: expected a positive duration such as 1s, 500ms or 10m "
                                 "(got \"abc\")");
        char *a2[] = { "p", "--batch-max-duration=0s" };
        assert_args_error(2, a2, "--batch-max-duration: expected a positive duration such as 1s, 500ms or 10m "
                                 "(got \"0s\")");
        char *a3[] = { "p", "--node-policy=pinned" };
        assert_args_error(2, a3, "--node-policy: expected static or simple (got \"pinned\")");
        char *a4[] = { "p", "--metrics-port", "0" };
        assert_args_error(3, a4, "--metrics-port: expected a port from 1 to 65535 (got \"0\")");
        char *a5[] = { "p", "--kubeconfig" };
        assert_args_error(2, a5, "--kubeconfig: needs a value");
        char *a6[] = { "p", "--frobnicate=1" };
        assert_args_error(2, a6, "--frobnicate=1: unknown flag (see --help)");
        char *a7[] = { "p", "extra" };
        assert_args_error(2, a7, "extra: unexpected argument (see --help)");
        char *a8[] = { "p", "--log-level", "verbose" };
        assert_args_error(3, a8, "--log-level: expected debug, info, warning or error (got \"verbose\")");
        char *a9[] = { "p", "--log-format=xml" };
        assert_args_error(2, a9, "--log-format: expected text, logfmt or json (got \"xml\")");

        struct config cfg;
        char err[256];
        assert_int_equal(config_init(&cfg), 0);
        const char *env[] = { "HEALTH_PORT=http", NULL };
        assert_int_equal(config_parse_env(&cfg, env, err, sizeof err), -EINVAL);
        assert_string_equal(err, "HEALTH_PORT: expected a port from 1 to 65535 (got \"http\")");
        char *help[] = { "p", "--node-policy", "simple", "--help", "--bad" };
        assert_int_equal(config_parse_args(&cfg, 5, help, err, sizeof err), CONFIG_HELP);
        char *version[] = { "p", "--version" };
        assert_int_equal(config_parse_args(&cfg, 2, version, err, sizeof err), CONFIG_VERSION);
        cfg.batch_idle_ms = 20000;
        assert_int_equal(config_check(&cfg, err, sizeof err), -EINVAL);
        assert_string_equal(err, "--batch-idle-duration: 20000ms is longer than --batch-max-duration (10000ms)");
        config_done(&cfg);
        assert_non_null(strstr(config_usage(), "--batch-idle-duration"));
}

/* ---- config_load with real files ---- */

static void write_file(const char *dir, const char *name, const char *text) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static int load_from(const char *dir, const char *extra_flag, struct config *cfg, char *err, size_t errlen) {
        char flag[256];
        snprintf(flag, sizeof flag, "--config=%s/config.yaml", dir);
        char *argv[] = { "p", flag, (char *)extra_flag, NULL };
        const char *env[] = { "NODE_POLICY=simple", NULL };
        return config_load(extra_flag ? 3 : 2, argv, env, cfg, err, errlen);
}

static void test_load(void **state) {
        (void)state;
        char dir[] = "/tmp/pvescale-config-test-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char text[1024];
        snprintf(text, sizeof text,
                 "clusters:\n- url: https://pve1:8006/api2/json\n  token_id: 'kubernetes@pve!karpenter'\n"
                 "  token_secret_file: %s/secret\n  region: r1\n"
                 "agents:\n  token_file: %s/agent.token\n  hosts: {pve1: 127.0.0.1}\n",
                 dir, dir);
        write_file(dir, "config.yaml", text);
        write_file(dir, "secret", "  3b78b46c-08e0-42f0-a851-219fb845d7a9 \n");
        write_file(dir, "agent.token", "agent-token\n");
        struct config cfg;
        char err[256] = "";
        assert_int_equal(load_from(dir, NULL, &cfg, err, sizeof err), 0);
        assert_string_equal(cfg.clusters[0].token_secret, "3b78b46c-08e0-42f0-a851-219fb845d7a9");
        assert_string_equal(cfg.agents.token, "agent-token");
        assert_int_equal(cfg.node_policy, CONFIG_NODE_POLICY_SIMPLE);
        config_done(&cfg);

        assert_int_equal(load_from(dir, "--batch-idle-duration=11s", &cfg, err, sizeof err), -EINVAL);
        assert_string_equal(err, "--batch-idle-duration: 11000ms is longer than --batch-max-duration (10000ms)");

        write_file(dir, "secret", "\n\n");
        assert_int_equal(load_from(dir, NULL, &cfg, err, sizeof err), -EINVAL);
        char want[256];
        snprintf(want, sizeof want, "clusters[0].token_secret_file: %s/secret is empty", dir);
        assert_string_equal(err, want);

        snprintf(want, sizeof want, "%s/secret", dir);
        unlink(want);
        assert_int_equal(load_from(dir, NULL, &cfg, err, sizeof err), -ENOENT);
        snprintf(want, sizeof want, "clusters[0].token_secret_file: cannot read %s/secret: %s", dir, strerror(ENOENT));
        assert_string_equal(err, want);

        write_file(dir, "config.yaml", "clusters: [\n");
        assert_int_equal(load_from(dir, NULL, &cfg, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "config.yaml: line "));

        snprintf(want, sizeof want, "%s/config.yaml", dir);
        unlink(want);
        assert_true(load_from(dir, NULL, &cfg, err, sizeof err) < 0);
        assert_non_null(strstr(err, "config.yaml"));
        snprintf(want, sizeof want, "%s/agent.token", dir);
        unlink(want);
        rmdir(dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_durations),
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_seed_clusters),
                cmocka_unit_test(test_agents),
                cmocka_unit_test(test_agent_fallback),
                cmocka_unit_test(test_document_errors),
                cmocka_unit_test(test_document_failure_keeps_previous),
                cmocka_unit_test(test_env_and_flags),
                cmocka_unit_test(test_flag_errors),
                cmocka_unit_test(test_load),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
