/* Tests for agent/agent_config: defaults, YAML keys, env overrides, errors naming the key, corosync name. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agent_config.h"
#include "yamlconf.h"

static int apply_yaml(struct agent_config *c, const char *yaml, char *err, size_t errlen) {
        json_t *doc = NULL;
        int r = yamlconf_parse(yaml, strlen(yaml), &doc, err, errlen);
        if (r == 0)
                r = agent_config_apply_json(c, doc, err, errlen);
        json_decref(doc);
        return r;
}

static void test_defaults_and_yaml(void **state) {
        (void)state;
        struct agent_config c;
        char err[256] = "";
        assert_int_equal(agent_config_defaults(&c), 0);
        assert_int_equal(c.port, AGENT_DEFAULT_PORT);
        assert_string_equal(c.pve_config_dir, "/etc/pve/qemu-server");
        assert_true(c.count_stopped_vms);
        assert_int_equal(apply_yaml(&c, "port: 9443\nnode_policy: simple\ncount_stopped_vms: false\n"
                                        "pve_run_dir: /tmp/run\n", err, sizeof err), 0);
        assert_int_equal(c.port, 9443);
        assert_int_equal(c.node_policy, NODE_POLICY_SIMPLE);
        assert_false(c.count_stopped_vms);
        assert_string_equal(c.pve_run_dir, "/tmp/run");
        agent_config_done(&c);
}

/* Token and certificate by layout: the cluster-wide token and the host's Proxmox certificate where /etc/pve is,
 * the standalone files elsewhere; a path given stays. */
static void test_layout_paths(void **state) {
        (void)state;
        struct agent_config c;
        char err[256] = "";
        assert_int_equal(agent_config_defaults(&c), 0);
        assert_string_equal(c.token_file, "");
        assert_string_equal(c.pve_dir, "/etc/pve");
        assert_int_equal(apply_yaml(&c, "node_name: pve2\n", err, sizeof err), 0);
        assert_int_equal(agent_config_layout_paths(&c, true), 0);
        assert_string_equal(c.token_file, "/etc/pve/priv/pvescale/agent.token");
        assert_string_equal(c.tls_cert, "/etc/pve/nodes/pve2/pve-ssl.pem");
        assert_string_equal(c.tls_key, "/etc/pve/nodes/pve2/pve-ssl.key");
        agent_config_done(&c);

        assert_int_equal(agent_config_defaults(&c), 0);
        assert_int_equal(apply_yaml(&c, "node_name: pve2\ntls_cert: /x.pem\n", err, sizeof err), 0);
        assert_int_equal(agent_config_layout_paths(&c, false), 0);
        assert_string_equal(c.token_file, "/etc/pvescale/agent.token");
        assert_string_equal(c.tls_cert, "/x.pem");
        assert_string_equal(c.tls_key, "/etc/pvescale/agent.key");
        agent_config_done(&c);

        assert_int_equal(agent_config_defaults(&c), 0);
        assert_int_equal(apply_yaml(&c, "node_name: n1\npve_dir: /nonexistent/pve\n", err, sizeof err), 0);
        assert_int_equal(agent_config_resolve_paths(&c), 0); /* no such directory: standalone */
        assert_string_equal(c.token_file, "/etc/pvescale/agent.token");
        agent_config_done(&c);
}

static void assert_yaml_error(const char *yaml, const char *want) {
        struct agent_config c;
        char err[256] = "";
        assert_int_equal(agent_config_defaults(&c), 0);
        assert_int_equal(apply_yaml(&c, yaml, err, sizeof err), -EINVAL);
        assert_string_equal(err, want);
        agent_config_done(&c);
}

static void test_errors_name_the_key(void **state) {
        (void)state;
        assert_yaml_error("prot: 1\n", "prot: unknown setting");
        assert_yaml_error("port: 70000\n", "port: expected an integer from 0 to 65535, got '70000'");
        assert_yaml_error("port: \"80\"\n", "port: expected a non-negative integer");
        assert_yaml_error("node_policy: dynamic\n", "node_policy: expected simple or static, got 'dynamic'");
        assert_yaml_error("insecure_http: maybe\n", "insecure_http: expected true or false");
        assert_yaml_error("- a\n", "the configuration must be a mapping of keys to values");
}

static void test_env_overrides(void **state) {
        (void)state;
        struct agent_config c;
        char err[256] = "";
        assert_int_equal(agent_config_defaults(&c), 0);
        setenv("NODE_POLICY", "static", 1);
        setenv("NODE_SETTING_FILE", "/etc/pvescale/nodes.json", 1);
        setenv("PVESCALE_AGENT_PORT", "1234", 1);
        assert_int_equal(agent_config_apply_env(&c, err, sizeof err), 0);
        assert_int_equal(c.node_policy, NODE_POLICY_STATIC);
        assert_string_equal(c.node_setting_file, "/etc/pvescale/nodes.json");
        assert_int_equal(c.port, 1234);
        setenv("PVESCALE_AGENT_PORT", "x", 1);
        assert_int_equal(agent_config_apply_env(&c, err, sizeof err), -EINVAL);
        assert_string_equal(err, "port: expected an integer from 0 to 65535, got 'x'");
        unsetenv("PVESCALE_AGENT_PORT");
        unsetenv("NODE_POLICY");
        unsetenv("NODE_SETTING_FILE");
        agent_config_done(&c);
}

static void test_corosync_cluster_name(void **state) {
        (void)state;
        char *name = agent_config_corosync_cluster_name("logging {\n  debug: off\n}\ntotem {\n"
                                                        "  cluster_name: homelab\n  config_version: 3\n}\n");
        assert_string_equal(name, "homelab");
        free(name);
        assert_null(agent_config_corosync_cluster_name("totem {\n  version: 2\n}\n"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults_and_yaml),
                cmocka_unit_test(test_layout_paths),
                cmocka_unit_test(test_errors_name_the_key),
                cmocka_unit_test(test_env_overrides),
                cmocka_unit_test(test_corosync_cluster_name),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
