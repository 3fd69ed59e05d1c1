/* agent_config: the agent's settings from defaults, /etc/pvescale/agent.conf (YAML), environment and flags. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "agent_config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boolword.h"
#include "cleanup.h"
#include "fileio.h"

const struct agent_config_key agent_config_keys[] = {
        { "bind_address", "PVESCALE_AGENT_BIND_ADDRESS", "address to listen on (empty = all, IPv4 and IPv6)" },
        { "port", "PVESCALE_AGENT_PORT", "HTTPS port" },
        { "tls_cert", "PVESCALE_AGENT_TLS_CERT", "PEM certificate file (default: by layout, see pve_dir)" },
        { "tls_key", "PVESCALE_AGENT_TLS_KEY", "PEM private key file (default: by layout)" },
        { "token_file", "PVESCALE_AGENT_TOKEN_FILE", "API bearer token file, mode 0600 (default: by layout)" },
        { "pve_dir", "PVESCALE_AGENT_PVE_DIR", "the pmxcfs mount; when present, the cluster-wide token and the "
                                               "host's Proxmox certificate are the defaults" },
        { "insecure_http", "PVESCALE_AGENT_INSECURE_HTTP", "serve plain HTTP (local debugging only)" },
        { "node_name", "PVESCALE_AGENT_NODE_NAME", "Proxmox node name (default: short hostname)" },
        { "region", "PVESCALE_AGENT_REGION", "region (default: corosync cluster_name, else 'default')" },
        { "corosync_conf", "PVESCALE_AGENT_COROSYNC_CONF", "corosync.conf to read the cluster name from" },
        { "pve_config_dir", "PVESCALE_AGENT_PVE_CONFIG_DIR", "qemu-server config directory" },
        { "pve_run_dir", "PVESCALE_AGENT_PVE_RUN_DIR", "qemu-server run directory (pid and qmp files)" },
        { "pve_lxc_dir", "PVESCALE_AGENT_PVE_LXC_DIR", "pve-container config directory (LXC containers)" },
        { "lxc_cgroup_dir", "PVESCALE_AGENT_LXC_CGROUP_DIR", "cgroup v2 directory of running LXC containers" },
        { "node_setting_file", "NODE_SETTING_FILE", "node-setting JSON file (reserved CPUs/memory)" },
        { "state_dir", "PVESCALE_AGENT_STATE_DIR", "directory for the reservation state file" },
        { "fsroot", "PVESCALE_AGENT_FSROOT", "read topology from a gathered /sys+/proc tree (testing)" },
        { "topology_xml", "PVESCALE_AGENT_TOPOLOGY_XML", "read topology from hwloc XML (testing)" },
        { "node_policy", "NODE_POLICY", "simple (count only) or static (pin)" },
        { "count_stopped_vms", "PVESCALE_AGENT_COUNT_STOPPED_VMS", "charge stopped VMs (they start again)" },
        { "rescan_interval", "PVESCALE_AGENT_RESCAN_INTERVAL", "seconds between safety rescans of configs" },
        { "pin_interval", "PVESCALE_AGENT_PIN_INTERVAL", "seconds between pinning checks of running VMs" },
        { "log_level", "PVESCALE_AGENT_LOG_LEVEL", "debug, info, warning or error" },
        { "log_format", "PVESCALE_AGENT_LOG_FORMAT", "stderr lines as text, logfmt or json (not under systemd)" },
        { "cpu_governors", "PVESCALE_AGENT_CPU_GOVERNORS",
          "set cpufreq governors: busy on VMs' cores, free on idle ones" },
        { "governor_busy", "PVESCALE_AGENT_GOVERNOR_BUSY", "cpufreq governor of cores pinned to running VMs" },
        { "governor_free", "PVESCALE_AGENT_GOVERNOR_FREE", "cpufreq governor of idle cores" },
        { "epp_busy", "PVESCALE_AGENT_EPP_BUSY", "energy_performance_preference of busy cores (empty = leave)" },
        { "epp_free", "PVESCALE_AGENT_EPP_FREE", "energy_performance_preference of idle cores (empty = leave)" },
        { "irq_affinity", "PVESCALE_AGENT_IRQ_AFFINITY", "steer VMs' passthrough IRQs to their CPUs, others off them" },
        { NULL, NULL, NULL },
};

enum key_kind { KIND_STRING, KIND_BOOL, KIND_UINT, KIND_POLICY };

struct key_slot {
        const char *key;
        enum key_kind kind;
        size_t offset;
        unsigned max;
};

#define SLOT(k, kind, field, max) { k, kind, offsetof(struct agent_config, field), max }
static const struct key_slot slots[] = {
        SLOT("bind_address", KIND_STRING, bind_address, 0),
        SLOT("port", KIND_UINT, port, 65535),
        SLOT("tls_cert", KIND_STRING, tls_cert, 0),
        SLOT("tls_key", KIND_STRING, tls_key, 0),
        SLOT("token_file", KIND_STRING, token_file, 0),
        SLOT("pve_dir", KIND_STRING, pve_dir, 0),
        SLOT("insecure_http", KIND_BOOL, insecure_http, 0),
        SLOT("node_name", KIND_STRING, node_name, 0),
        SLOT("region", KIND_STRING, region, 0),
        SLOT("corosync_conf", KIND_STRING, corosync_conf, 0),
        SLOT("pve_config_dir", KIND_STRING, pve_config_dir, 0),
        SLOT("pve_run_dir", KIND_STRING, pve_run_dir, 0),
        SLOT("pve_lxc_dir", KIND_STRING, pve_lxc_dir, 0),
        SLOT("lxc_cgroup_dir", KIND_STRING, lxc_cgroup_dir, 0),
        SLOT("node_setting_file", KIND_STRING, node_setting_file, 0),
        SLOT("state_dir", KIND_STRING, state_dir, 0),
        SLOT("fsroot", KIND_STRING, fsroot, 0),
        SLOT("topology_xml", KIND_STRING, topology_xml, 0),
        SLOT("node_policy", KIND_POLICY, node_policy, 0),
        SLOT("count_stopped_vms", KIND_BOOL, count_stopped_vms, 0),
        SLOT("rescan_interval", KIND_UINT, rescan_interval_s, 86400),
        SLOT("pin_interval", KIND_UINT, pin_interval_s, 86400),
        SLOT("log_level", KIND_STRING, log_level, 0),
        SLOT("log_format", KIND_STRING, log_format, 0),
        SLOT("cpu_governors", KIND_BOOL, cpu_governors, 0),
        SLOT("governor_busy", KIND_STRING, governor_busy, 0),
        SLOT("governor_free", KIND_STRING, governor_free, 0),
        SLOT("epp_busy", KIND_STRING, epp_busy, 0),
        SLOT("epp_free", KIND_STRING, epp_free, 0),
        SLOT("irq_affinity", KIND_BOOL, irq_affinity, 0),
};
#define N_SLOTS (sizeof slots / sizeof slots[0])

static const struct key_slot *find_slot(const char *key) {
        for (size_t i = 0; i < N_SLOTS; i++)
                if (strcmp(slots[i].key, key) == 0)
                        return &slots[i];
        return NULL;
}

static int set_string(char **field, const char *value) {
        char *copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        free(*field);
        *field = copy;
        return 0;
}

int agent_config_defaults(struct agent_config *c) {
        memset(c, 0, sizeof *c);
        static const char *const defaults[][2] = {
                { "bind_address", "" },
                { "tls_cert", "" },
                { "tls_key", "" },
                { "token_file", "" },
                { "pve_dir", "/etc/pve" },
                { "node_name", "" },
                { "region", "" },
                { "corosync_conf", "/etc/pve/corosync.conf" },
                { "pve_config_dir", "/etc/pve/qemu-server" },
                { "pve_run_dir", "/var/run/qemu-server" },
                { "pve_lxc_dir", "/etc/pve/lxc" },
                { "lxc_cgroup_dir", "/sys/fs/cgroup/lxc" },
                { "node_setting_file", "" },
                { "state_dir", "/var/lib/pvescale-agent" },
                { "fsroot", "" },
                { "topology_xml", "" },
                { "log_level", "info" },
                { "log_format", "text" },
                { "governor_busy", "performance" },
                { "governor_free", "powersave" },
                { "epp_busy", "performance" },
                { "epp_free", "power" },
        };
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
                char **field = (char **)((char *)c + find_slot(defaults[i][0])->offset);
                if (set_string(field, defaults[i][1]) < 0)
                        return -ENOMEM;
        }
        c->port = AGENT_DEFAULT_PORT;
        c->node_policy = geteuid() == 0 ? NODE_POLICY_STATIC : NODE_POLICY_SIMPLE;
        c->count_stopped_vms = true;
        c->rescan_interval_s = 10;
        c->pin_interval_s = 5;
        return 0;
}

static int parse_uint(const char *v, unsigned max, unsigned *ret) {
        char *end;
        errno = 0;
        unsigned long n = strtoul(v, &end, 10);
        if (!isdigit((unsigned char)*v) || *end || errno || n > max)
                return -EINVAL;
        *ret = (unsigned)n;
        return 0;
}

static int set_policy(enum node_policy *policy, const char *value) {
        if (strcmp(value, "simple") == 0)
                *policy = NODE_POLICY_SIMPLE;
        else if (strcmp(value, "static") == 0)
                *policy = NODE_POLICY_STATIC;
        else
                return -EINVAL;
        return 0;
}

static int set_slot(struct agent_config *c, const struct key_slot *s, const char *value, char *err, size_t errlen) {
        void *field = (char *)c + s->offset;
        switch (s->kind) {
        case KIND_STRING:
                return set_string(field, value);
        case KIND_BOOL:
                if (boolword_parse(value, field) == 0)
                        return 0;
                snprintf(err, errlen, "%s: expected true or false, got '%s'", s->key, value);
                return -EINVAL;
        case KIND_UINT:
                if (parse_uint(value, s->max, field) == 0)
                        return 0;
                snprintf(err, errlen, "%s: expected an integer from 0 to %u, got '%s'", s->key, s->max, value);
                return -EINVAL;
        case KIND_POLICY:
                if (set_policy(field, value) == 0)
                        return 0;
                snprintf(err, errlen, "%s: expected simple or static, got '%s'", s->key, value);
                return -EINVAL;
        }
        return -EINVAL;
}

int agent_config_set(struct agent_config *c, const char *key, const char *value, char *err, size_t errlen) {
        const struct key_slot *s = find_slot(key);
        if (!s) {
                snprintf(err, errlen, "%s: unknown setting", key);
                return -ENOENT;
        }
        return set_slot(c, s, value, err, errlen);
}

static const char *kind_name(enum key_kind kind) {
        static const char *const names[] = { "a string", "true or false", "a non-negative integer",
                                             "simple or static" };
        return names[kind];
}

/* Render a JSON scalar as the string form set_slot parses. */
static int scalar_text(const json_t *v, char *buf, size_t len) {
        if (json_is_string(v))
                return snprintf(buf, len, "%s", json_string_value(v)) < (int)len ? 0 : -EINVAL;
        if (json_is_integer(v) && json_integer_value(v) >= 0) {
                snprintf(buf, len, "%lld", (long long)json_integer_value(v));
                return 0;
        }
        if (json_is_boolean(v)) {
                snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
                return 0;
        }
        if (json_is_null(v)) {
                snprintf(buf, len, "%s", "");
                return 0;
        }
        return -EINVAL;
}

int agent_config_apply_json(struct agent_config *c, const json_t *obj, char *err, size_t errlen) {
        if (!json_is_object(obj)) {
                snprintf(err, errlen, "the configuration must be a mapping of keys to values");
                return -EINVAL;
        }
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)obj, key, value) {
                const struct key_slot *s = find_slot(key);
                char text[4096];
                if (!s) {
                        snprintf(err, errlen, "%s: unknown setting", key);
                        return -EINVAL;
                }
                if (scalar_text(value, text, sizeof text) < 0 ||
                    (s->kind != KIND_STRING && json_is_string(value) && s->kind != KIND_POLICY)) {
                        snprintf(err, errlen, "%s: expected %s", key, kind_name(s->kind));
                        return -EINVAL;
                }
                int r = set_slot(c, s, text, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

int agent_config_apply_env(struct agent_config *c, char *err, size_t errlen) {
        for (const struct agent_config_key *k = agent_config_keys; k->key; k++) {
                const char *v = getenv(k->env);
                if (!v)
                        continue;
                int r = agent_config_set(c, k->key, v, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

char *agent_config_corosync_cluster_name(const char *text) {
        for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                while (*line == ' ' || *line == '\t')
                        line++;
                if (strncmp(line, "cluster_name:", 13) != 0)
                        continue;
                const char *v = line + 13;
                while (*v == ' ' || *v == '\t')
                        v++;
                size_t n = strcspn(v, " \t\r\n");
                return n ? strndup(v, n) : NULL;
        }
        return NULL;
}

static int resolve_region(struct agent_config *c) {
        char *text = NULL, *name = NULL;
        if (fileio_read(c->corosync_conf, 1 << 20, &text, NULL) == 0)
                name = agent_config_corosync_cluster_name(text);
        free(text);
        int r = set_string(&c->region, name ? name : "default");
        free(name);
        return r;
}

int agent_config_resolve_identity(struct agent_config *c) {
        if (!*c->node_name) {
                char host[256] = "localhost";
                gethostname(host, sizeof host - 1);
                host[strcspn(host, ".")] = '\0';
                if (set_string(&c->node_name, host) < 0)
                        return -ENOMEM;
        }
        return *c->region ? 0 : resolve_region(c);
}

/* An empty path setting gets its layout's default: cluster_path (owned; NULL = out of memory) on a Proxmox
 * host, standalone otherwise. */
static int default_path(char **field, bool cluster, char *cluster_path, const char *standalone) {
        _cleanup_free_ char *path = cluster_path;
        if (**field)
                return 0;
        if (!cluster)
                return set_string(field, standalone);
        if (!path)
                return -ENOMEM;
        free(*field);
        *field = TAKE_PTR(path);
        return 0;
}

static char *join3(const char *a, const char *b, const char *c) {
        char *out = NULL;
        return asprintf(&out, "%s%s%s", a, b, c) < 0 ? NULL : out;
}

int agent_config_layout_paths(struct agent_config *c, bool cluster) {
        /* /etc/pve/local is pmxcfs's link to nodes/<this node>; the node name is the same short host name */
        char *node_dir = join3(c->pve_dir, "/nodes/", c->node_name);
        int r = node_dir ? 0 : -ENOMEM;
        if (r == 0)
                r = default_path(&c->token_file, cluster, join3(c->pve_dir, "/priv/pvescale/agent.token", ""),
                                 AGENT_STANDALONE_TOKEN);
        if (r == 0)
                r = default_path(&c->tls_cert, cluster, join3(node_dir, "/pve-ssl.pem", ""), AGENT_STANDALONE_CERT);
        if (r == 0)
                r = default_path(&c->tls_key, cluster, join3(node_dir, "/pve-ssl.key", ""), AGENT_STANDALONE_KEY);
        free(node_dir);
        return r;
}

int agent_config_resolve_paths(struct agent_config *c) {
        struct stat st;
        bool cluster = *c->pve_dir && stat(c->pve_dir, &st) == 0 && S_ISDIR(st.st_mode);
        return agent_config_layout_paths(c, cluster);
}

void agent_config_done(struct agent_config *c) {
        for (size_t i = 0; i < N_SLOTS; i++)
                if (slots[i].kind == KIND_STRING)
                        free(*(char **)((char *)c + slots[i].offset));
        memset(c, 0, sizeof *c);
}
