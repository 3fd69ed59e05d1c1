/* config: the coordinator's settings from /etc/pvescale/config.yaml, the environment and flags. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "errmsg.h"
#include "fileio.h"
#include "yamlconf.h"

#define NS_PER_MS 1000000ULL
#define DURATION_MAX_MS (366ULL * 24 * 3600 * 1000)
#define TOKEN_FILE_MAX 4096
#define JOIN_CA_MAX (1 << 20)
#define API_SUFFIX "/api2/json"

/* ---- lifecycle ---- */

int config_init(struct config *cfg) {
        *cfg = (struct config){ .node_policy = CONFIG_NODE_POLICY_STATIC,
                                .batch_idle_ms = CONFIG_DEFAULT_BATCH_IDLE_MS,
                                .batch_max_ms = CONFIG_DEFAULT_BATCH_MAX_MS,
                                .log_level = LOG_LEVEL_INFO,
                                .metrics_port = CONFIG_DEFAULT_METRICS_PORT,
                                .health_port = CONFIG_DEFAULT_HEALTH_PORT,
                                .agents = { .port = CONFIG_DEFAULT_AGENT_PORT } };
        cfg->config_file = strdup(CONFIG_DEFAULT_FILE);
        return cfg->config_file ? 0 : -ENOMEM;
}

static void cluster_done(struct config_cluster *c) {
        free(c->url);
        free(c->token_id);
        free(c->token_secret);
        free(c->token_secret_file);
        free(c->region);
        free(c->ca_file);
}

static void clusters_free(struct config_cluster *clusters, size_t n) {
        for (size_t i = 0; i < n; i++)
                cluster_done(&clusters[i]);
        free(clusters);
}

static void join_done(struct config_join *j) {
        free(j->api_server);
        free(j->ca_file);
        free(j->ca);
        *j = (struct config_join){ 0 };
}

static void agents_done(struct config_agents *a) {
        for (size_t i = 0; i < a->n_hosts; i++) {
                free(a->hosts[i].node);
                free(a->hosts[i].address);
        }
        free(a->hosts);
        free(a->token_file);
        free(a->token);
        free(a->ca_file);
}

void config_done(struct config *cfg) {
        if (!cfg)
                return;
        clusters_free(cfg->clusters, cfg->n_clusters);
        agents_done(&cfg->agents);
        join_done(&cfg->join);
        free(cfg->config_file);
        free(cfg->kubeconfig);
        *cfg = (struct config){ 0 };
}

bool config_agent_fallback_proxmox(const struct config *cfg) {
        if (cfg->agents.fallback != CONFIG_AGENT_FALLBACK_DEFAULT)
                return cfg->agents.fallback == CONFIG_AGENT_FALLBACK_PROXMOX;
        return cfg->node_policy == CONFIG_NODE_POLICY_SIMPLE;
}

/* ---- scalar parsers ---- */

struct duration_unit {
        const char *name;
        unsigned long long ns;
};

static const struct duration_unit duration_units[] = {
        { "ns", 1ULL }, { "us", 1000ULL }, { "\xc2\xb5s", 1000ULL }, { "ms", NS_PER_MS },
        { "s", 1000ULL * NS_PER_MS }, { "m", 60000ULL * NS_PER_MS }, { "h", 3600000ULL * NS_PER_MS },
};

/* The unit at s (longest match), or NULL. */
static const struct duration_unit *duration_unit(const char *s, size_t *ret_len) {
        const struct duration_unit *best = NULL;
        size_t best_len = 0;
        for (size_t i = 0; i < sizeof duration_units / sizeof duration_units[0]; i++) {
                size_t n = strlen(duration_units[i].name);
                if (n > best_len && strncmp(s, duration_units[i].name, n) == 0) {
                        best = &duration_units[i];
                        best_len = n;
                }
        }
        *ret_len = best_len;
        return best;
}

/* One "<number><unit>" term at *s ("1", "1.5", ".5" then a unit), added to *total_ns. */
static int duration_term(const char **s, long double *total_ns) {
        size_t digits = strspn(*s, "0123456789."), ulen, dots = 0;
        char number[32];
        for (size_t i = 0; i < digits; i++)
                dots += (*s)[i] == '.';
        if (digits == 0 || digits >= sizeof number || dots > 1)
                return -EINVAL;
        memcpy(number, *s, digits);
        number[digits] = '\0';
        if (strcmp(number, ".") == 0)
                return -EINVAL;
        const struct duration_unit *u = duration_unit(*s + digits, &ulen);
        if (!u)
                return -EINVAL;
        *total_ns += strtold(number, NULL) * (long double)u->ns;
        *s += digits + ulen;
        return 0;
}

int config_parse_duration(const char *s, uint64_t *ret_ms) {
        long double ns = 0;
        if (!s || !*s)
                return -EINVAL;
        if (strcmp(s, "0") == 0) {
                *ret_ms = 0;
                return 0;
        }
        while (*s) {
                int r = duration_term(&s, &ns);
                if (r < 0)
                        return r;
        }
        if (ns / NS_PER_MS > (long double)DURATION_MAX_MS)
                return -ERANGE;
        *ret_ms = (uint64_t)(ns / NS_PER_MS);
        return 0;
}

static int parse_port(const char *s, unsigned *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 1 || v > 65535)
                return -EINVAL;
        *ret = (unsigned)v;
        return 0;
}

static int replace_string(char **dst, const char *value) {
        char *copy = strdup(value);
        if (!copy)
                return -ENOMEM;
        free(*dst);
        *dst = copy;
        return 0;
}

/* ---- settings shared by flags and environment ---- */

enum setting_id {
        SET_CONFIG,
        SET_KUBECONFIG,
        SET_NODE_POLICY,
        SET_BATCH_IDLE,
        SET_BATCH_MAX,
        SET_LOG_LEVEL,
        SET_LOG_FORMAT,
        SET_METRICS_PORT,
        SET_HEALTH_PORT,
};

struct setting {
        enum setting_id id;
        const char *flag, *env;
};

static const struct setting settings[] = {
        { SET_CONFIG, "config", "PVESCALE_CONFIG" },
        { SET_KUBECONFIG, "kubeconfig", "KUBECONFIG" },
        { SET_NODE_POLICY, "node-policy", "NODE_POLICY" },
        { SET_BATCH_IDLE, "batch-idle-duration", "BATCH_IDLE_DURATION" },
        { SET_BATCH_MAX, "batch-max-duration", "BATCH_MAX_DURATION" },
        { SET_LOG_LEVEL, "log-level", "LOG_LEVEL" },
        { SET_LOG_FORMAT, "log-format", "LOG_FORMAT" },
        { SET_METRICS_PORT, "metrics-port", "METRICS_PORT" },
        { SET_HEALTH_PORT, "health-port", "HEALTH_PORT" },
};

#define N_SETTINGS (sizeof settings / sizeof settings[0])

static int apply_node_policy(struct config *cfg, const char *value) {
        if (strcmp(value, "static") == 0)
                cfg->node_policy = CONFIG_NODE_POLICY_STATIC;
        else if (strcmp(value, "simple") == 0)
                cfg->node_policy = CONFIG_NODE_POLICY_SIMPLE;
        else
                return -EINVAL;
        return 0;
}

static int apply_duration(uint64_t *dst, const char *value) {
        uint64_t ms;
        int r = config_parse_duration(value, &ms);
        if (r < 0 || ms == 0)
                return -EINVAL;
        *dst = ms;
        return 0;
}

static const char *setting_hint(enum setting_id id) {
        switch (id) {
        case SET_NODE_POLICY:
                return "expected static or simple";
        case SET_BATCH_IDLE:
        case SET_BATCH_MAX:
                return "expected a positive duration such as 1s, 500ms or 10m";
        case SET_LOG_LEVEL:
                return "expected debug, info, warning or error";
        case SET_LOG_FORMAT:
                return "expected text, logfmt or json";
        case SET_METRICS_PORT:
        case SET_HEALTH_PORT:
                return "expected a port from 1 to 65535";
        default:
                return "invalid value";
        }
}

static int apply_setting(struct config *cfg, enum setting_id id, const char *value) {
        switch (id) {
        case SET_CONFIG:
                return *value ? replace_string(&cfg->config_file, value) : -EINVAL;
        case SET_KUBECONFIG:
                return *value ? replace_string(&cfg->kubeconfig, value) : -EINVAL;
        case SET_NODE_POLICY:
                return apply_node_policy(cfg, value);
        case SET_BATCH_IDLE:
                return apply_duration(&cfg->batch_idle_ms, value);
        case SET_BATCH_MAX:
                return apply_duration(&cfg->batch_max_ms, value);
        case SET_LOG_LEVEL:
                return log_level_from_string(value, &cfg->log_level);
        case SET_LOG_FORMAT:
                return log_format_from_string(value, &cfg->log_format);
        case SET_METRICS_PORT:
                return parse_port(value, &cfg->metrics_port);
        case SET_HEALTH_PORT:
                return parse_port(value, &cfg->health_port);
        }
        return -EINVAL;
}

/* Apply one value; on a bad one the message is "<name>: <hint> (got "<value>")". */
static int apply_named(struct config *cfg, const struct setting *s, const char *name, const char *value, char *err,
                       size_t errlen) {
        int r = apply_setting(cfg, s->id, value);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return errmsg_invalid(err, errlen, "%s: %s (got \"%s\")", name, setting_hint(s->id), value);
        return 0;
}

const char *config_env_value(const char *const *envp, const char *name) {
        size_t n = strlen(name);
        for (; envp && *envp; envp++)
                if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
                        return *envp + n + 1;
        return NULL;
}

int config_parse_env(struct config *cfg, const char *const *envp, char *err, size_t errlen) {
        for (size_t i = 0; i < N_SETTINGS; i++) {
                const char *v = config_env_value(envp, settings[i].env);
                if (!v || !*v)
                        continue;
                int r = apply_named(cfg, &settings[i], settings[i].env, v, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

static const struct setting *find_flag(const char *name, size_t len) {
        for (size_t i = 0; i < N_SETTINGS; i++)
                if (strlen(settings[i].flag) == len && strncmp(settings[i].flag, name, len) == 0)
                        return &settings[i];
        return NULL;
}

/* argv[*i] is a flag; apply it (taking the next argument as its value when there is no "="). */
static int parse_one_flag(struct config *cfg, int argc, char *const *argv, int *i, char *err, size_t errlen) {
        const char *arg = argv[*i];
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct setting *s = find_flag(name, len);
        if (!s)
                return errmsg_invalid(err, errlen, "%s: unknown flag (see --help)", arg);
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", s->flag);
        const char *value = eq ? eq + 1 : NULL;
        if (!value && *i + 1 >= argc)
                return errmsg_invalid(err, errlen, "%s: needs a value", flag);
        if (!value)
                value = argv[++*i];
        return apply_named(cfg, s, flag, value, err, errlen);
}

int config_parse_args(struct config *cfg, int argc, char *const *argv, char *err, size_t errlen) {
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0)
                        return CONFIG_HELP;
                if (strcmp(a, "--version") == 0 || strcmp(a, "-version") == 0)
                        return CONFIG_VERSION;
                if (a[0] != '-' || a[1] == '\0')
                        return errmsg_invalid(err, errlen, "%s: unexpected argument (see --help)", a);
                int r = parse_one_flag(cfg, argc, argv, &i, err, errlen);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- the config document ---- */

/* Reject members of obj not in allowed; path names obj in the message ("" for the top level). */
static int check_keys(const json_t *obj, const char *path, const char *const *allowed, char *err, size_t errlen) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)obj, key, v) {
                bool ok = false;
                for (const char *const *a = allowed; *a && !ok; a++)
                        ok = strcmp(*a, key) == 0;
                if (!ok)
                        return errmsg_invalid(err, errlen, "%s%s%s: unknown key", path, *path ? "." : "", key);
        }
        return 0;
}

/* Copy an optional string member (NULL when absent or null). */
static int get_string(const json_t *obj, const char *key, const char *path, bool required, char **ret, char *err,
                      size_t errlen) {
        json_t *v = json_object_get(obj, key);
        if (!v || json_is_null(v)) {
                if (required)
                        return errmsg_invalid(err, errlen, "%s.%s: required", path, key);
                *ret = NULL;
                return 0;
        }
        if (!json_is_string(v))
                return errmsg_invalid(err, errlen, "%s.%s: expected a string", path, key);
        if (json_string_length(v) == 0)
                return errmsg_invalid(err, errlen, "%s.%s: must not be empty", path, key);
        *ret = strdup(json_string_value(v));
        return *ret ? 0 : -ENOMEM;
}

static int get_bool(const json_t *obj, const char *key, const char *path, bool *ret, char *err, size_t errlen) {
        json_t *v = json_object_get(obj, key);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_boolean(v))
                return errmsg_invalid(err, errlen, "%s.%s: expected true or false", path, key);
        *ret = json_is_true(v);
        return 0;
}

/* "user@realm!tokenid" with non-empty parts. */
static bool token_id_ok(const char *id) {
        const char *at = strchr(id, '@'), *bang = strrchr(id, '!');
        return at && bang && at > id && bang > at + 1 && bang[1] && !strpbrk(id, " \t=:/");
}

/* https://host[:port][/api2/json][/] → https://host[:port]/api2/json */
static int normalize_url(char **url) {
        size_t n = strlen(*url);
        while (n > 0 && (*url)[n - 1] == '/')
                n--;
        size_t sfx = strlen(API_SUFFIX);
        bool has = n >= sfx && strncmp(*url + n - sfx, API_SUFFIX, sfx) == 0;
        char *out;
        if (asprintf(&out, "%.*s%s", (int)n, *url, has ? "" : API_SUFFIX) < 0)
                return -ENOMEM;
        free(*url);
        *url = out;
        return 0;
}

static bool url_ok(const char *url) {
        const char *host;
        if (strncmp(url, "https://", 8) == 0)
                host = url + 8;
        else if (strncmp(url, "http://", 7) == 0)
                host = url + 7;
        else
                return false;
        return *host && *host != '/';
}

static int cluster_strings(const json_t *o, const char *path, struct config_cluster *c, char *err, size_t errlen) {
        int r = get_string(o, "url", path, true, &c->url, err, errlen);
        if (r == 0 && !url_ok(c->url))
                r = errmsg_invalid(err, errlen, "%s.url: expected an https:// URL such as https://pve1:8006/api2/json",
                                   path);
        if (r == 0)
                r = normalize_url(&c->url);
        if (r == 0)
                r = get_string(o, "token_id", path, true, &c->token_id, err, errlen);
        if (r == 0 && !token_id_ok(c->token_id))
                r = errmsg_invalid(err, errlen, "%s.token_id: expected user@realm!tokenid (got \"%s\")", path,
                                   c->token_id);
        if (r == 0)
                r = get_string(o, "token_secret", path, false, &c->token_secret, err, errlen);
        if (r == 0)
                r = get_string(o, "token_secret_file", path, false, &c->token_secret_file, err, errlen);
        if (r == 0)
                r = get_string(o, "region", path, true, &c->region, err, errlen);
        if (r == 0)
                r = get_string(o, "ca_file", path, false, &c->ca_file, err, errlen);
        return r;
}

static int parse_cluster(const json_t *o, size_t i, struct config_cluster *c, char *err, size_t errlen) {
        static const char *const allowed[] = { "url",    "insecure", "token_id", "token_secret", "token_secret_file",
                                               "region", "ca_file",  NULL };
        char path[32];
        snprintf(path, sizeof path, "clusters[%zu]", i);
        if (!json_is_object(o))
                return errmsg_invalid(err, errlen, "%s: expected a mapping with url, token_id, token_secret and region",
                                      path);
        int r = check_keys(o, path, allowed, err, errlen);
        if (r == 0)
                r = cluster_strings(o, path, c, err, errlen);
        if (r == 0)
                r = get_bool(o, "insecure", path, &c->insecure, err, errlen);
        if (r == 0 && !c->token_secret && !c->token_secret_file)
                r = errmsg_invalid(err, errlen, "%s.token_secret: required (or token_secret_file)", path);
        if (r == 0 && c->token_secret && c->token_secret_file)
                r = errmsg_invalid(err, errlen,
                                   "%s.token_secret_file: give token_secret or token_secret_file, not both", path);
        return r;
}

static int check_regions(const struct config_cluster *cl, size_t n, char *err, size_t errlen) {
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < i; j++) {
                        if (strcmp(cl[i].region, cl[j].region) != 0)
                                continue;
                        return errmsg_invalid(err, errlen,
                                              "clusters[%zu].region: \"%s\" is already used by clusters[%zu]", i,
                                              cl[i].region, j);
                }
        }
        return 0;
}

static int parse_clusters(const json_t *arr, struct config_cluster **ret, size_t *ret_n, char *err, size_t errlen) {
        if (!json_is_array(arr) || json_array_size(arr) == 0)
                return errmsg_invalid(err, errlen, "clusters: expected a list of at least one Proxmox cluster");
        size_t n = json_array_size(arr);
        struct config_cluster *cl = calloc(n, sizeof *cl);
        if (!cl)
                return -ENOMEM;
        int r = 0;
        for (size_t i = 0; i < n && r == 0; i++)
                r = parse_cluster(json_array_get(arr, i), i, &cl[i], err, errlen);
        if (r == 0)
                r = check_regions(cl, n, err, errlen);
        if (r < 0) {
                clusters_free(cl, n);
                return r;
        }
        *ret = cl;
        *ret_n = n;
        return 0;
}

static int parse_agent_hosts(const json_t *o, struct config_agents *a, char *err, size_t errlen) {
        if (!o || json_is_null(o))
                return 0;
        if (!json_is_object(o))
                return errmsg_invalid(err, errlen, "agents.hosts: expected a mapping of node name to address");
        a->hosts = calloc(json_object_size(o) + 1, sizeof *a->hosts);
        if (!a->hosts)
                return -ENOMEM;
        const char *node;
        json_t *v;
        json_object_foreach((json_t *)o, node, v) {
                if (!json_is_string(v) || json_string_length(v) == 0)
                        return errmsg_invalid(err, errlen, "agents.hosts.%s: expected a host name or IP address", node);
                struct config_agent_host *h = &a->hosts[a->n_hosts++];
                h->node = strdup(node);
                h->address = strdup(json_string_value(v));
                if (!h->node || !h->address)
                        return -ENOMEM;
        }
        return 0;
}

static int parse_agent_port(const json_t *o, unsigned *port, char *err, size_t errlen) {
        json_t *v = json_object_get(o, "port");
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535)
                return errmsg_invalid(err, errlen, "agents.port: expected a port from 1 to 65535");
        *port = (unsigned)json_integer_value(v);
        return 0;
}

static int parse_agent_fallback(const json_t *o, enum config_agent_fallback *ret, char *err, size_t errlen) {
        json_t *v = json_object_get(o, "fallback");
        const char *s = json_string_value(v);
        if (!v || json_is_null(v))
                return 0;
        if (s && strcmp(s, "none") == 0)
                *ret = CONFIG_AGENT_FALLBACK_NONE;
        else if (s && strcmp(s, "proxmox") == 0)
                *ret = CONFIG_AGENT_FALLBACK_PROXMOX;
        else
                return errmsg_invalid(err, errlen, "agents.fallback: expected none or proxmox");
        return 0;
}

static int parse_agents(const json_t *o, struct config_agents *a, char *err, size_t errlen) {
        static const char *const allowed[] = { "port", "token_file", "ca_file", "hosts", "fallback", NULL };
        a->port = CONFIG_DEFAULT_AGENT_PORT;
        if (!o || json_is_null(o))
                return 0;
        if (!json_is_object(o))
                return errmsg_invalid(err, errlen,
                                      "agents: expected a mapping with port, token_file, ca_file, hosts and fallback");
        a->enabled = true;
        int r = check_keys(o, "agents", allowed, err, errlen);
        if (r == 0)
                r = parse_agent_port(o, &a->port, err, errlen);
        if (r == 0)
                r = get_string(o, "token_file", "agents", true, &a->token_file, err, errlen);
        if (r == 0)
                r = get_string(o, "ca_file", "agents", false, &a->ca_file, err, errlen);
        if (r == 0)
                r = parse_agent_hosts(json_object_get(o, "hosts"), a, err, errlen);
        if (r == 0)
                r = parse_agent_fallback(o, &a->fallback, err, errlen);
        return r;
}

static int parse_join(const json_t *o, struct config_join *j, char *err, size_t errlen) {
        static const char *const allowed[] = { "api_server", "ca_file", NULL };
        if (!o || json_is_null(o))
                return 0;
        if (!json_is_object(o))
                return errmsg_invalid(err, errlen, "join: expected a mapping with api_server and ca_file");
        int r = check_keys(o, "join", allowed, err, errlen);
        if (r == 0)
                r = get_string(o, "api_server", "join", true, &j->api_server, err, errlen);
        if (r == 0 && strncmp(j->api_server, "https://", 8) != 0)
                r = errmsg_invalid(err, errlen, "join.api_server: expected an https:// URL (got \"%s\")",
                                   j->api_server);
        if (r == 0)
                r = get_string(o, "ca_file", "join", true, &j->ca_file, err, errlen);
        return r;
}

int config_parse_document(struct config *cfg, const json_t *doc, char *err, size_t errlen) {
        static const char *const allowed[] = { "clusters", "agents", "join", NULL };
        if (!json_is_object(doc))
                return errmsg_invalid(err, errlen, "the config file must be a mapping with clusters, agents and join");
        int r = check_keys(doc, "", allowed, err, errlen);
        if (r < 0)
                return r;
        struct config_cluster *clusters = NULL;
        size_t n = 0;
        struct config_agents agents = { 0 };
        struct config_join join = { 0 };
        r = parse_clusters(json_object_get(doc, "clusters"), &clusters, &n, err, errlen);
        if (r == 0)
                r = parse_agents(json_object_get(doc, "agents"), &agents, err, errlen);
        if (r == 0)
                r = parse_join(json_object_get(doc, "join"), &join, err, errlen);
        if (r < 0) {
                clusters_free(clusters, n);
                agents_done(&agents);
                join_done(&join);
                return r;
        }
        clusters_free(cfg->clusters, cfg->n_clusters);
        agents_done(&cfg->agents);
        join_done(&cfg->join);
        cfg->clusters = clusters;
        cfg->n_clusters = n;
        cfg->agents = agents;
        cfg->join = join;
        return 0;
}

int config_check(const struct config *cfg, char *err, size_t errlen) {
        if (cfg->batch_idle_ms > cfg->batch_max_ms)
                return errmsg_invalid(err, errlen,
                                      "--batch-idle-duration: %llums is longer than --batch-max-duration (%llums)",
                                      (unsigned long long)cfg->batch_idle_ms, (unsigned long long)cfg->batch_max_ms);
        if (cfg->metrics_port == cfg->health_port)
                return errmsg_invalid(err, errlen, "--health-port: %u is also the metrics port", cfg->health_port);
        return 0;
}

/* ---- loading (I/O) ---- */

/* Read a secret file: its first line, trimmed. */
static int read_secret(const char *path, const char *key, char **ret, char *err, size_t errlen) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = fileio_read(path, TOKEN_FILE_MAX, &text, &len);
        if (r < 0) {
                snprintf(err, errlen, "%s: cannot read %s: %s", key, path, strerror(-r));
                return r;
        }
        char *start = text + strspn(text, " \t\r\n");
        size_t n = strcspn(start, "\r\n");
        while (n && (start[n - 1] == ' ' || start[n - 1] == '\t'))
                n--;
        if (n == 0)
                return errmsg_invalid(err, errlen, "%s: %s is empty", key, path);
        *ret = strndup(start, n);
        return *ret ? 0 : -ENOMEM;
}

/* The join CA: a PEM certificate, read whole. */
static int read_join_ca(struct config_join *j, char *err, size_t errlen) {
        size_t len;
        int r = fileio_read(j->ca_file, JOIN_CA_MAX, &j->ca, &len);
        if (r < 0) {
                snprintf(err, errlen, "join.ca_file: cannot read %s: %s", j->ca_file, strerror(-r));
                return r;
        }
        if (!strstr(j->ca, "-----BEGIN CERTIFICATE-----"))
                return errmsg_invalid(err, errlen, "join.ca_file: %s holds no PEM certificate", j->ca_file);
        return 0;
}

static int read_secrets(struct config *cfg, char *err, size_t errlen) {
        char key[64];
        for (size_t i = 0; i < cfg->n_clusters; i++) {
                struct config_cluster *c = &cfg->clusters[i];
                if (!c->token_secret_file)
                        continue;
                snprintf(key, sizeof key, "clusters[%zu].token_secret_file", i);
                int r = read_secret(c->token_secret_file, key, &c->token_secret, err, errlen);
                if (r < 0)
                        return r;
        }
        if (cfg->agents.enabled) {
                int r = read_secret(cfg->agents.token_file, "agents.token_file", &cfg->agents.token, err, errlen);
                if (r < 0)
                        return r;
        }
        return cfg->join.api_server ? read_join_ca(&cfg->join, err, errlen) : 0;
}

static int load_document(struct config *cfg, char *err, size_t errlen) {
        char why[256];
        json_t *doc;
        int r = yamlconf_load(cfg->config_file, &doc, why, sizeof why);
        if (r < 0) {
                snprintf(err, errlen, "%s: %s", cfg->config_file, why);
                return r;
        }
        r = config_parse_document(cfg, doc, err, errlen);
        json_decref(doc);
        return r;
}

int config_load(int argc, char *const *argv, const char *const *envp, struct config *ret_cfg, char *err,
                size_t errlen) {
        struct config cfg;
        int r = config_init(&cfg);
        if (r == 0)
                r = config_parse_env(&cfg, envp, err, errlen);
        if (r == 0)
                r = config_parse_args(&cfg, argc, argv, err, errlen);
        if (r == 0)
                r = load_document(&cfg, err, errlen);
        if (r == 0)
                r = read_secrets(&cfg, err, errlen);
        if (r == 0)
                r = config_check(&cfg, err, errlen);
        if (r == -ENOMEM)
                snprintf(err, errlen, "out of memory");
        if (r != 0) {
                config_done(&cfg);
                return r;
        }
        *ret_cfg = cfg;
        return 0;
}

const char *config_usage(void) {
        return "Usage: pvescale-coordinator [flags]\n"
               "\n"
               "Flags (environment variable in brackets; flags win over the environment):\n"
               "  --config FILE               [PVESCALE_CONFIG] Proxmox clusters and agents (default "
               CONFIG_DEFAULT_FILE ")\n"
               "  --kubeconfig FILE           [KUBECONFIG] default: in-cluster service account\n"
               "  --node-policy POLICY        [NODE_POLICY] static (agents place and pin; default) or simple\n"
               "  --batch-idle-duration DUR   [BATCH_IDLE_DURATION] batch closes this long after the last new pod"
               " (1s)\n"
               "  --batch-max-duration DUR    [BATCH_MAX_DURATION] and at most this long after the first (10s)\n"
               "  --log-level LEVEL           [LOG_LEVEL] debug, info, warning or error (info)\n"
               "  --log-format FORMAT         [LOG_FORMAT] stderr lines as text, logfmt or json (text); under systemd\n"
               "                              the journal gets fields instead\n"
               "  --metrics-port PORT         [METRICS_PORT] Prometheus metrics (8080)\n"
               "  --health-port PORT          [HEALTH_PORT] /healthz and /readyz (8081)\n"
               "  --help, --version\n"
               "\n"
               "Durations look like 500ms, 1s, 1m30s or 10m.\n";
}
