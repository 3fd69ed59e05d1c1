/* Tests for the packaged agent files: the conffile, man page and systemd unit match the agent's config vocabulary. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agent_config.h"
#include "fileio.h"
#include "yamlconf.h"

static char *read_source(const char *rel) {
        const char *root = getenv("PVESCALE_SOURCE_DIR");
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
        char *text = NULL;
        if (fileio_read(path, 1 << 20, &text, NULL) < 0)
                fail_msg("cannot read %s", path);
        return text;
}

static unsigned occurrences(const char *text, const char *needle) {
        unsigned n = 0;
        for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

/* A commented-out setting line: "#key: value" (prose comments have a space after "#"). */
static bool is_setting_line(const char *line) {
        size_t n = strspn(line + 1, "abcdefghijklmnopqrstuvwxyz_");
        return line[0] == '#' && n > 0 && line[1 + n] == ':' && line[2 + n] == ' ';
}

/* The conffile with every setting line uncommented and every other line dropped. */
static char *uncomment(const char *text) {
        char *out = calloc(1, strlen(text) + 1), *o = out;
        assert_non_null(out);
        for (const char *line = text; *line;) {
                size_t len = strcspn(line, "\n");
                if (is_setting_line(line)) {
                        memcpy(o, line + 1, len - 1);
                        o += len - 1;
                        *o++ = '\n';
                }
                line += len + (line[len] == '\n');
        }
        return out;
}

static void test_conffile_documents_every_key_with_its_env(void **state) {
        (void)state;
        char *text = read_source("packaging/agent.conf");
        unsigned keys = 0;
        for (const struct agent_config_key *k = agent_config_keys; k->key; k++, keys++) {
                char want[256];
                snprintf(want, sizeof want, "\n# env: %s\n#%s: ", k->env, k->key);
                if (occurrences(text, want) != 1)
                        fail_msg("agent.conf must document %s once, as \"# env: %s\" then \"#%s: <default>\"", k->key,
                                 k->env, k->key);
        }
        unsigned settings = 0;
        for (const char *line = text; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
                settings += is_setting_line(line);
        assert_int_equal(settings, keys); /* no setting documented that the agent does not know */
        free(text);
}

/* Uncommenting every line gives exactly the built-in defaults (node_policy aside: its default depends on
 * the user, and the file documents root's). */
static void test_conffile_values_are_the_defaults(void **state) {
        (void)state;
        char *text = read_source("packaging/agent.conf"), *yaml = uncomment(text), err[512];
        json_t *doc;
        if (yamlconf_parse(yaml, strlen(yaml), &doc, err, sizeof err) < 0)
                fail_msg("uncommented agent.conf: %s", err);
        struct agent_config def, file;
        assert_int_equal(agent_config_defaults(&def), 0);
        assert_int_equal(agent_config_defaults(&file), 0);
        if (agent_config_apply_json(&file, doc, err, sizeof err) < 0)
                fail_msg("uncommented agent.conf: %s", err);
        const char *const strings[][2] = {
                { def.bind_address, file.bind_address },     { def.tls_cert, file.tls_cert },
                { def.tls_key, file.tls_key },               { def.token_file, file.token_file },
                { def.node_name, file.node_name },           { def.region, file.region },
                { def.corosync_conf, file.corosync_conf },   { def.pve_config_dir, file.pve_config_dir },
                { def.pve_run_dir, file.pve_run_dir },       { def.node_setting_file, file.node_setting_file },
                { def.pve_lxc_dir, file.pve_lxc_dir },       { def.lxc_cgroup_dir, file.lxc_cgroup_dir },
                { def.state_dir, file.state_dir },           { def.fsroot, file.fsroot },
                { def.topology_xml, file.topology_xml },     { def.log_level, file.log_level },
                { def.governor_busy, file.governor_busy },   { def.governor_free, file.governor_free },
                { def.epp_busy, file.epp_busy },             { def.epp_free, file.epp_free },
        };
        for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
                assert_string_equal(strings[i][0], strings[i][1]);
        assert_int_equal(def.port, file.port);
        assert_int_equal(def.insecure_http, file.insecure_http);
        assert_int_equal(def.count_stopped_vms, file.count_stopped_vms);
        assert_int_equal(def.rescan_interval_s, file.rescan_interval_s);
        assert_int_equal(def.pin_interval_s, file.pin_interval_s);
        assert_int_equal(def.cpu_governors, file.cpu_governors);
        assert_int_equal(def.irq_affinity, file.irq_affinity);
        assert_int_equal(file.node_policy, NODE_POLICY_STATIC);
        agent_config_done(&def);
        agent_config_done(&file);
        json_decref(doc);
        free(yaml);
        free(text);
}

static void test_man_page_lists_every_flag_and_env(void **state) {
        (void)state;
        char *man = read_source("packaging/pvescale-agent.8");
        for (const struct agent_config_key *k = agent_config_keys; k->key; k++) {
                char flag[128] = "\\-\\-", env[128];
                for (const char *p = k->key; *p; p++)
                        strcat(flag, *p == '_' ? "\\-" : (char[]){ *p, 0 });
                snprintf(env, sizeof env, "[%s]", k->env);
                if (!strstr(man, flag) || !strstr(man, env))
                        fail_msg("pvescale-agent.8 lacks %s or %s", flag, env);
        }
        assert_non_null(strstr(man, ".TH PVESCALE-AGENT 8 "));
        free(man);
}

static void test_unit_matches_the_defaults(void **state) {
        (void)state;
        char *unit = read_source("systemd/pvescale-agent.service");
        struct agent_config def;
        assert_int_equal(agent_config_defaults(&def), 0);
        char want[256];
        snprintf(want, sizeof want, "\nReadWritePaths=%s\n", def.state_dir);
        assert_non_null(strstr(unit, want));
        static const char *const lines[] = { "\nType=notify\n", "\nExecStart=/usr/sbin/pvescale-agent serve\n",
                                             "\nRestart=on-failure\n", "\nWatchdogSec=30s\n", "\nLimitNOFILE=4096\n",
                                             "\nCapabilityBoundingSet=CAP_SYS_NICE CAP_SYS_PTRACE\n",
                                             "\nProtectSystem=strict\n", "\nNoNewPrivileges=yes\n",
                                             "\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n",
                                             "\nSystemCallFilter=@system-service\n" };
        for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
                if (!strstr(unit, lines[i]))
                        fail_msg("pvescale-agent.service lacks%s", lines[i]);
        agent_config_done(&def);
        free(unit);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_conffile_documents_every_key_with_its_env),
                cmocka_unit_test(test_conffile_values_are_the_defaults),
                cmocka_unit_test(test_man_page_lists_every_flag_and_env),
                cmocka_unit_test(test_unit_matches_the_defaults),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
