/* main: pvescale-agent's command line (serve, topology, capacity, place, --version). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "auth.h"
#include "daemon.h"
#include "jsonutil.h"
#include "place_cmd.h"
#include "log.h"
#include "yamlconf.h"

#define EXIT_USAGE 2
#define MAX_OPTIONS 64
#define OPT_CONFIG 1000
#define OPT_VERSION 1001
#define OPT_HELP 1002

enum command { CMD_SERVE, CMD_TOPOLOGY, CMD_CAPACITY, CMD_VMS, CMD_PLACE, CMD_CONTAINERS };

static const char *const command_names[] = { "serve", "topology", "capacity", "vms", "place", "containers" };
#define N_COMMANDS (sizeof command_names / sizeof command_names[0])

static void usage(FILE *out) {
        fprintf(out, "Usage: pvescale-agent [serve|topology|capacity|vms|containers|place] [OPTIONS]\n"
                     "  serve      run the HTTPS API daemon (default)\n"
                     "  topology   print the host topology as JSON and exit\n"
                     "  capacity   print free CPUs and memory as JSON and exit\n"
                     "  vms        print the VM inventory as JSON and exit\n"
                     "  containers print the LXC containers as JSON and exit\n"
                     "  place      dry run: read {\"vcpus\",\"memory_bytes\"} lines on stdin, print placements\n"
                     "Options (each also settable in the config file and by environment):\n"
                     "  --config FILE    YAML config (default " AGENT_CONFIG_DEFAULT_PATH " if present)\n");
        for (const struct agent_config_key *k = agent_config_keys; k->key; k++) {
                char flag[64];
                snprintf(flag, sizeof flag, "%s", k->key);
                for (char *p = flag; *p; p++)
                        *p = *p == '_' ? '-' : *p;
                fprintf(out, "  --%-20s %s [%s]\n", flag, k->help, k->env);
        }
        fprintf(out, "  --version        print the version and exit\n");
}

/* Long options built from the config vocabulary: --pve-config-dir sets pve_config_dir, and so on. */
static void build_options(struct option *opts, char names[][64]) {
        size_t i = 0;
        for (const struct agent_config_key *k = agent_config_keys; k->key && i < MAX_OPTIONS - 4; k++, i++) {
                snprintf(names[i], 64, "%s", k->key);
                for (char *p = names[i]; *p; p++)
                        *p = *p == '_' ? '-' : *p;
                bool is_flag = strcmp(k->key, "insecure_http") == 0 || strcmp(k->key, "count_stopped_vms") == 0;
                opts[i] = (struct option){ names[i], is_flag ? optional_argument : required_argument, NULL, (int)i };
        }
        opts[i++] = (struct option){ "config", required_argument, NULL, OPT_CONFIG };
        opts[i++] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
        opts[i++] = (struct option){ "help", no_argument, NULL, OPT_HELP };
        opts[i] = (struct option){ 0 };
}

static int load_config_file(struct agent_config *cfg, const char *path, bool required) {
        if (!required && access(path, F_OK) < 0)
                return 0;
        json_t *doc;
        char err[512];
        if (yamlconf_load(path, &doc, err, sizeof err) < 0) {
                fprintf(stderr, "pvescale-agent: %s\n", err);
                return -EINVAL;
        }
        char inner[512];
        int r = agent_config_apply_json(cfg, doc, inner, sizeof inner);
        json_decref(doc);
        if (r < 0)
                fprintf(stderr, "pvescale-agent: %s: %s\n", path, inner);
        return r;
}

/* Pass 1: only --config, --help and --version. Returns 1 when the program should exit 0 now. */
static int scan_early_flags(int argc, char **argv, const struct option *opts, const char **ret_config) {
        int c;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                if (c == OPT_VERSION) {
                        printf("pvescale-agent %s\n", PVESCALE_VERSION);
                        return 1;
                }
                if (c == OPT_HELP) {
                        usage(stdout);
                        return 1;
                }
                if (c == OPT_CONFIG)
                        *ret_config = optarg;
                if (c == '?') {
                        fprintf(stderr, "pvescale-agent: unknown or incomplete option '%s' (see --help)\n",
                                argv[optind - 1]);
                        return -EINVAL;
                }
        }
        return 0;
}

/* Pass 2: every setting flag, over what the file and the environment set. */
static int apply_flags(int argc, char **argv, const struct option *opts, struct agent_config *cfg) {
        char err[512];
        int c, r = 0;
        optind = 0;
        while (r == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                if (c < 0 || c >= MAX_OPTIONS - 4)
                        continue;
                r = agent_config_set(cfg, agent_config_keys[c].key, optarg ? optarg : "true", err, sizeof err);
                if (r < 0)
                        fprintf(stderr, "pvescale-agent: --%s\n", err);
        }
        return r;
}

/* The command word after the flags (default serve). */
static int parse_command(int argc, char **argv, enum command *ret_cmd) {
        if (optind < argc - 1) {
                fprintf(stderr, "pvescale-agent: unexpected argument '%s'\n", argv[optind + 1]);
                return -EINVAL;
        }
        *ret_cmd = CMD_SERVE;
        for (size_t i = 0; optind < argc && i < N_COMMANDS; i++)
                if (strcmp(argv[optind], command_names[i]) == 0) {
                        *ret_cmd = (enum command)i;
                        return 0;
                }
        if (optind < argc) {
                fprintf(stderr, "pvescale-agent: unknown command '%s' (see --help)\n", argv[optind]);
                return -EINVAL;
        }
        return 0;
}

/* Defaults < config file < environment < flags. Returns 1 for --help/--version (exit 0), or -EINVAL. */
static int parse_args(int argc, char **argv, struct agent_config *cfg, enum command *ret_cmd) {
        struct option opts[MAX_OPTIONS];
        char names[MAX_OPTIONS][64], err[512];
        const char *config_path = NULL;
        build_options(opts, names);
        int r = scan_early_flags(argc, argv, opts, &config_path);
        if (r != 0)
                return r;
        r = load_config_file(cfg, config_path ? config_path : AGENT_CONFIG_DEFAULT_PATH, config_path != NULL);
        if (r == 0 && (r = agent_config_apply_env(cfg, err, sizeof err)) < 0)
                fprintf(stderr, "pvescale-agent: environment: %s\n", err);
        if (r == 0)
                r = apply_flags(argc, argv, opts, cfg);
        return r < 0 ? r : parse_command(argc, argv, ret_cmd);
}

/* Bad input (a wrong path or a bad file given on the command line or in the config) exits 2. */
static int exit_code_for(int r) {
        return r == -EINVAL || r == -ENOENT || r == -ENOTDIR || r == -EBADMSG ? EXIT_USAGE : EXIT_FAILURE;
}

static int print_json(json_t *doc) {
        if (!doc)
                return EXIT_FAILURE;
        json_dumpf(doc, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(doc);
        return EXIT_SUCCESS;
}

static int run_one_shot(struct agent *a, enum command cmd) {
        char err[512];
        int r = cmd == CMD_TOPOLOGY ? agent_load_topology(a, err, sizeof err) : agent_load_all(a, err, sizeof err);
        if (r < 0) {
                fprintf(stderr, "pvescale-agent: %s\n", err);
                return exit_code_for(r);
        }
        if (cmd == CMD_TOPOLOGY)
                return print_json(agent_topology_json(a));
        if (cmd == CMD_CAPACITY)
                return print_json(agent_capacity_json(a));
        if (cmd == CMD_CONTAINERS)
                return print_json(agent_containers_json(a));
        if (cmd == CMD_PLACE) {
                r = place_command_run(a->topology, a->capacity, stdin, stdout);
                if (r < 0)
                        return EXIT_FAILURE;
                return r > 0 ? EXIT_USAGE : EXIT_SUCCESS;
        }
        return print_json(agent_vms_json(a));
}

static int run_serve(struct agent *a) {
        char err[512];
        int r = auth_token_load(a->cfg.token_file, &a->token);
        if (r < 0) {
                fprintf(stderr, "pvescale-agent: token file %s: %s\n", a->cfg.token_file,
                        r == -EPERM ? "must be a regular file readable only by its owner (mode 0600)"
                                    : strerror(-r));
                return EXIT_USAGE;
        }
        a->persist = true;
        if (mkdir(a->cfg.state_dir, 0700) < 0 && errno != EEXIST) {
                fprintf(stderr, "pvescale-agent: cannot create state dir %s: %s\n", a->cfg.state_dir, strerror(errno));
                return EXIT_FAILURE;
        }
        r = agent_load_all(a, err, sizeof err);
        if (r < 0) {
                log_error("%s", err);
                return exit_code_for(r);
        }
        return daemon_run(a) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

int main(int argc, char **argv) {
        struct agent a = { 0 };
        enum command cmd;
        if (agent_config_defaults(&a.cfg) < 0)
                return EXIT_FAILURE;
        int r = parse_args(argc, argv, &a.cfg, &cmd);
        enum log_level level = LOG_LEVEL_INFO;
        enum log_format format = LOG_FORMAT_TEXT;
        if (r == 0 && log_level_from_string(a.cfg.log_level, &level) < 0) {
                fprintf(stderr, "pvescale-agent: log_level: expected debug, info, warning or error, got '%s'\n",
                        a.cfg.log_level);
                r = -EINVAL;
        }
        if (r == 0 && log_format_from_string(a.cfg.log_format, &format) < 0) {
                fprintf(stderr, "pvescale-agent: log_format: expected text, logfmt or json, got '%s'\n",
                        a.cfg.log_format);
                r = -EINVAL;
        }
        if (r == 0 && (agent_config_resolve_identity(&a.cfg) < 0 || agent_config_resolve_paths(&a.cfg) < 0))
                r = -ENOMEM;
        int status = r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        if (r == 0) {
                log_setup("pvescale-agent", level, 0);
                log_set_format(format);
                status = cmd == CMD_SERVE ? run_serve(&a) : run_one_shot(&a, cmd);
        }
        agent_done(&a);
        return status;
}
