/* agent_config: the agent's settings from defaults, /etc/pvescale/agent.conf (YAML), environment and flags. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define AGENT_CONFIG_DEFAULT_PATH "/etc/pvescale/agent.conf"
#define AGENT_DEFAULT_PORT 8207
/* The standalone layout (no /etc/pve): what the package's postinst makes on such a host. */
#define AGENT_STANDALONE_TOKEN "/etc/pvescale/agent.token"
#define AGENT_STANDALONE_CERT "/etc/pvescale/agent.crt"
#define AGENT_STANDALONE_KEY "/etc/pvescale/agent.key"

enum node_policy { NODE_POLICY_SIMPLE, NODE_POLICY_STATIC };

struct agent_config {
        char *bind_address;
        unsigned port;
        char *tls_cert, *tls_key, *token_file; /* "" until resolved: by layout (agent_config_resolve_paths) */
        char *pve_dir;                         /* the pmxcfs mount, /etc/pve */
        bool insecure_http;
        char *node_name;      /* default: short hostname */
        char *region;         /* default: cluster_name in corosync_conf, else "default" */
        char *corosync_conf;
        char *pve_config_dir, *pve_run_dir;
        char *pve_lxc_dir, *lxc_cgroup_dir; /* container configs; running containers' cgroups (cgroup v2) */
        char *node_setting_file; /* "" = none */
        char *state_dir;
        char *fsroot, *topology_xml; /* debugging/test sources; "" = this machine */
        enum node_policy node_policy;
        bool count_stopped_vms;
        unsigned rescan_interval_s; /* safety rescan of the config dir (pmxcfs has no inotify for remote edits) */
        unsigned pin_interval_s;    /* how often running VMs' pinning is checked and repaired */
        char *log_level;
        char *log_format; /* text, logfmt or json: stderr lines (the journal gets fields) */
        /* Host tuning (hosttune.c), each off by default. */
        bool cpu_governors;             /* busy/free cpufreq governor (and EPP) on the VMs' cores */
        char *governor_busy, *governor_free;
        char *epp_busy, *epp_free;      /* energy_performance_preference; "" = leave it */
        bool irq_affinity;              /* VMs' passthrough IRQs onto their CPUs, other IRQs off them */
};

/* One key of the file/env/flag vocabulary: its YAML key, env variable and flag names. */
struct agent_config_key {
        const char *key;
        const char *env;
        const char *help;
};

/* Fill defaults (node_policy: static as root, simple otherwise). */
int agent_config_defaults(struct agent_config *c);
/* Apply a parsed YAML/JSON object. Unknown keys and wrong types give -EINVAL and "key: reason" in err. */
int agent_config_apply_json(struct agent_config *c, const json_t *obj, char *err, size_t errlen);
/* Apply one key from a string value (env or flag). -EINVAL with "key: reason" in err, -ENOENT for an unknown key. */
int agent_config_set(struct agent_config *c, const char *key, const char *value, char *err, size_t errlen);
/* Apply every set environment variable of the vocabulary. */
int agent_config_apply_env(struct agent_config *c, char *err, size_t errlen);
/* Fill node_name and region when they are still empty (hostname, corosync cluster_name). */
int agent_config_resolve_identity(struct agent_config *c);
/* Fill the empty token_file, tls_cert and tls_key by the layout. cluster (a Proxmox host, pve_dir present):
 * <pve_dir>/priv/pvescale/agent.token (one token for every host; pmxcfs replicates it) and the host's own
 * Proxmox certificate <pve_dir>/nodes/<node_name>/pve-ssl.{pem,key} (what /etc/pve/local links to), signed by the
 * cluster CA <pve_dir>/pve-root-ca.pem. Otherwise the standalone files in /etc/pvescale. Needs node_name. Pure. */
int agent_config_layout_paths(struct agent_config *c, bool cluster);
/* agent_config_layout_paths, the layout chosen by whether pve_dir is a directory. */
int agent_config_resolve_paths(struct agent_config *c);
void agent_config_done(struct agent_config *c);

/* The vocabulary, terminated by a NULL key (for --help, docs and the packaged conffile). */
extern const struct agent_config_key agent_config_keys[];

/* Pure: the cluster_name in corosync.conf text, or NULL (malloc'd). */
char *agent_config_corosync_cluster_name(const char *text);
