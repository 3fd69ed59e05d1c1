/* config: the coordinator's settings from /etc/pvescale/config.yaml, the environment and flags. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define CONFIG_DEFAULT_FILE "/etc/pvescale/config.yaml"
#define CONFIG_DEFAULT_AGENT_PORT 8207
#define CONFIG_DEFAULT_METRICS_PORT 8080
#define CONFIG_DEFAULT_HEALTH_PORT 8081
#define CONFIG_DEFAULT_BATCH_IDLE_MS 1000
#define CONFIG_DEFAULT_BATCH_MAX_MS 10000

/* config_parse_args results besides 0 and errors. */
#define CONFIG_HELP 1
#define CONFIG_VERSION 2

enum config_node_policy {
        CONFIG_NODE_POLICY_STATIC = 0, /* host agents place and pin each VM (default) */
        CONFIG_NODE_POLICY_SIMPLE = 1, /* count free CPUs and memory only; no pinning */
};

/* One Proxmox VE cluster (= one region), as in the seed's `clusters:` list. */
struct config_cluster {
        char *url;               /* https://host:8006/api2/json (the /api2/json suffix is added when missing) */
        bool insecure;           /* skip TLS verification */
        char *token_id;          /* user@realm!tokenid */
        char *token_secret;      /* from token_secret, or read from token_secret_file by config_load */
        char *token_secret_file; /* NULL when the secret was inline */
        char *region;            /* unique */
        char *ca_file;           /* NULL = system CAs */
};

struct config_agent_host {
        char *node;    /* Proxmox node name */
        char *address; /* host name or IP address of its agent */
};

/* What a provisioning round does with a host whose agent does not answer (or refuses the token). */
enum config_agent_fallback {
        CONFIG_AGENT_FALLBACK_DEFAULT = 0, /* not given: proxmox under the simple policy, none under static */
        CONFIG_AGENT_FALLBACK_NONE,        /* leave the host out of placement */
        CONFIG_AGENT_FALLBACK_PROXMOX,     /* place on it by Proxmox's accounting (unpinned VMs) */
};

/* The host agents. A host not listed in hosts is reached at its /cluster/status IP. */
struct config_agents {
        bool enabled;      /* an agents: section was given */
        unsigned port;     /* 8207 */
        char *token_file;  /* bearer token file (required when enabled) */
        char *token;       /* its content, read by config_load */
        char *ca_file;     /* CA of the agents' certificates; NULL = system CAs */
        struct config_agent_host *hosts;
        size_t n_hosts;
        enum config_agent_fallback fallback; /* agents.fallback: none or proxmox */
};

/* What new nodes join with when kube-public/cluster-info is not there to say (k3s, Talos) or should not be used:
 * the config's `join: {api_server, ca_file}`. Absent: cluster-info. */
struct config_join {
        char *api_server; /* https://host:port the nodes reach the API server at */
        char *ca_file;    /* PEM of the CA that signed the API server's certificate */
        char *ca;         /* its content, read by config_load */
};

struct config {
        char *config_file;                     /* --config / PVESCALE_CONFIG */
        struct config_cluster *clusters;
        size_t n_clusters;
        struct config_agents agents;
        struct config_join join;               /* api_server NULL: none given */
        char *kubeconfig;                      /* NULL = in-cluster service account */
        enum config_node_policy node_policy;
        uint64_t batch_idle_ms, batch_max_ms;
        enum log_level log_level;
        enum log_format log_format;   /* --log-format: text (default), logfmt or json */
        unsigned metrics_port, health_port;
};

/* Defaults for everything; owned strings are NULL except config_file. 0 or -ENOMEM. */
int config_init(struct config *cfg);
/* Free the contents (safe on a zeroed or half-filled struct). */
void config_done(struct config *cfg);

/* Go-style duration ("1s", "500ms", "1m30s", "1.5h", units ns us ms s m h) → milliseconds, rounded down.
 * -EINVAL for anything else or a negative value, -ERANGE above a year. Pure. */
int config_parse_duration(const char *s, uint64_t *ret_ms);

/* The value of NAME in envp ("KEY=value" strings, NULL-terminated), or NULL. Pure. */
const char *config_env_value(const char *const *envp, const char *name);

/* Apply the environment (envp: "KEY=value" strings, NULL-terminated): PVESCALE_CONFIG, KUBECONFIG,
 * NODE_POLICY, BATCH_IDLE_DURATION, BATCH_MAX_DURATION, LOG_LEVEL, LOG_FORMAT, METRICS_PORT, HEALTH_PORT. Empty values
 * are ignored. On a bad value -EINVAL with "NAME: reason" in err. Pure. */
int config_parse_env(struct config *cfg, const char *const *envp, char *err, size_t errlen);

/* Apply flags (argv[0] is the program and is skipped): --config, --kubeconfig, --node-policy,
 * --batch-idle-duration, --batch-max-duration, --log-level, --metrics-port, --health-port as "--flag value"
 * or "--flag=value" (one dash works too). Returns 0, CONFIG_HELP for --help/-h, CONFIG_VERSION for
 * --version, or -EINVAL with "--flag: reason" in err. Pure. */
int config_parse_args(struct config *cfg, int argc, char *const *argv, char *err, size_t errlen);

/* Fill clusters and agents from the parsed config document (the YAML as JSON). Unknown keys are errors.
 * On failure -EINVAL with "key.path: reason" in err (e.g. "clusters[0].token_id: required") and cfg keeps
 * its previous clusters and agents. Pure. */
int config_parse_document(struct config *cfg, const json_t *doc, char *err, size_t errlen);

/* Checks across settings (batch idle <= batch max). -EINVAL with the reason. Pure. */
int config_check(const struct config *cfg, char *err, size_t errlen);

/* The whole start-up path: defaults, environment, flags, the YAML file, the token files, checks.
 * Returns 0 (*ret_cfg filled; config_done it), CONFIG_HELP/CONFIG_VERSION, or a negative errno with a
 * one-line message naming the flag, variable or key in err (the program exits 2 with it). */
int config_load(int argc, char *const *argv, const char *const *envp, struct config *ret_cfg, char *err,
                size_t errlen);

/* Help text for --help (static). */
const char *config_usage(void);

/* Is a host whose agent does not answer placed by Proxmox's accounting (true) or left out (false)? agents.fallback
 * when given, else true under the simple policy only. Pure. */
bool config_agent_fallback_proxmox(const struct config *cfg);
