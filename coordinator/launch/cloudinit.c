/* cloudinit: template variables of a node claim's VM, the built-in default templates, and rendering of
 * user-data, meta-data and network-config (pure: data in, text out). The ISO is in cloudinit_iso.c. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "cloudinit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "errmsg.h"
#include "ipam.h"
#include "jsonutil.h"
#define LABEL_VALUE_MAX 63
#define LABEL_PREFIX_MAX 253
#define HOSTNAME_MAX 253
#define TOKEN_ID_LEN 6
#define TOKEN_SECRET_LEN 16

/* ---- default templates ---- */

static const char default_user_data[] =
        "#cloud-config\n"
        "# pvescale node {{ .Metadata.Hostname }} ({{ .Metadata.InstanceType }}, "
                "Kubernetes {{ .Kubernetes.Version }})\n"
        "hostname: {{ .Metadata.Hostname }}\n"
        "manage_etc_hosts: true\n"
        "{{- with .Values.sshAuthorizedKeys }}\n"
        "ssh_authorized_keys:\n"
        "{{- range splitList \"\\n\" (trim .) }}\n"
        "  - {{ quote . }}\n"
        "{{- end }}\n"
        "{{- end }}\n"
        "write_files:\n"
        "  - path: /etc/pvescale/discovery.conf\n"
        "    owner: root:root\n"
        "    permissions: \"0600\"\n"
        "    content: |\n"
        "      apiVersion: v1\n"
        "      kind: Config\n"
        "      clusters:\n"
        "        - name: kubernetes\n"
        "          cluster:\n"
        "            certificate-authority-data: {{ .Kubernetes.RootCA | b64enc }}\n"
        "            server: {{ .Kubernetes.APIServer }}\n"
        "      contexts:\n"
        "        - name: kubelet-bootstrap@kubernetes\n"
        "          context:\n"
        "            cluster: kubernetes\n"
        "            user: kubelet-bootstrap\n"
        "      current-context: kubelet-bootstrap@kubernetes\n"
        "      users:\n"
        "        - name: kubelet-bootstrap\n"
        "          user:\n"
        "            token: {{ .Kubernetes.BootstrapToken }}\n"
        "  - path: /etc/default/kubelet\n"
        "    owner: root:root\n"
        "    permissions: \"0644\"\n"
        "    content: |\n"
        "      KUBELET_EXTRA_ARGS=\"{{ .Kubernetes.KubeletFlags }}\"\n"
        "{{- with .Kubernetes.KubeletConfiguration }}\n"
        "  - path: /etc/pvescale/patches/kubeletconfiguration+merge.json\n"
        "    owner: root:root\n"
        "    permissions: \"0644\"\n"
        "    content: |\n"
        "      {{- toJson . | nindent 6 }}\n"
        "{{- end }}\n"
        "  - path: /etc/pvescale/kubeadm-join.yaml\n"
        "    owner: root:root\n"
        "    permissions: \"0600\"\n"
        "    content: |\n"
        "      apiVersion: kubeadm.k8s.io/v1beta3\n"
        "      kind: JoinConfiguration\n"
        "      discovery:\n"
        "        file:\n"
        "          kubeConfigPath: /etc/pvescale/discovery.conf\n"
        "        tlsBootstrapToken: {{ .Kubernetes.BootstrapToken }}\n"
        "      nodeRegistration:\n"
        "        name: {{ .Metadata.Hostname }}\n"
        "        taints: []\n"
        "{{- if .Kubernetes.KubeletConfiguration }}\n"
        "      patches:\n"
        "        directory: /etc/pvescale/patches\n"
        "{{- end }}\n"
        "runcmd:\n"
        "  - [systemctl, daemon-reload]\n"
        "  - [kubeadm, join, --config, /etc/pvescale/kubeadm-join.yaml]\n";

static const char default_meta_data[] =
        "instance-id: {{ .Metadata.InstanceID | quote }}\n"
        "local-hostname: {{ .Metadata.Hostname | quote }}\n"
        "provider-id: {{ .Metadata.ProviderID | quote }}\n"
        "region: {{ .Metadata.Region | quote }}\n"
        "zone: {{ .Metadata.Zone | quote }}\n"
        "{{- with .Metadata.InstanceType }}\n"
        "instance-type: {{ quote . }}\n"
        "{{- end }}\n";

/* DHCP on the first interface, or the claim's static addresses (spec.ipam) on each interface, matched by MAC. */
static const char default_network_config[] =
        "version: 2\n"
        "ethernets:\n"
        "{{- if .Network.Static }}\n"
        "{{- range .Network.Interfaces }}\n"
        "  {{ .Name }}:\n"
        "    match:\n"
        "{{- if .MAC }}\n"
        "      macaddress: {{ lower .MAC | quote }}\n"
        "{{- else }}\n"
        "      name: \"e*\"\n"
        "{{- end }}\n"
        "    dhcp4: {{ not .IPv4 }}\n"
        "    addresses:\n"
        "{{- with .IPv4CIDR }}\n"
        "      - {{ quote . }}\n"
        "{{- end }}\n"
        "{{- with .IPv6CIDR }}\n"
        "      - {{ quote . }}\n"
        "{{- end }}\n"
        "{{- with .Gateway4 }}\n"
        "    gateway4: {{ quote . }}\n"
        "{{- end }}\n"
        "{{- with .Gateway6 }}\n"
        "    gateway6: {{ quote . }}\n"
        "{{- end }}\n"
        "{{- if or $.Network.Nameservers $.Network.SearchDomains }}\n"
        "    nameservers:\n"
        "      addresses: {{ toJson $.Network.Nameservers }}\n"
        "      search: {{ toJson $.Network.SearchDomains }}\n"
        "{{- end }}\n"
        "{{- end }}\n"
        "{{- else }}\n"
        "  primary:\n"
        "    match:\n"
        "      name: \"e*\"\n"
        "    dhcp4: true\n"
        "{{- end }}\n";

static const char *const file_names[CLOUDINIT_N_FILES] = { "user-data", "meta-data", "network-config" };
static const char *const defaults[CLOUDINIT_N_FILES] = { default_user_data, default_meta_data, default_network_config };

const char *cloudinit_file_name(enum cloudinit_file f) {
        return f < CLOUDINIT_N_FILES ? file_names[f] : NULL;
}

/* ---- validation ---- */

static bool is_lower_alnum(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c) {
        return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static bool all_of(const char *s, size_t n, bool (*ok)(char c)) {
        for (size_t i = 0; i < n; i++)
                if (!ok(s[i]))
                        return false;
        return true;
}

static bool dns_char(char c) {
        return is_lower_alnum(c) || c == '-' || c == '.';
}

/* RFC 1123 subdomain, as Kubernetes requires of node names. */
static bool valid_hostname(const char *s) {
        size_t n = s ? strlen(s) : 0;
        return n > 0 && n <= HOSTNAME_MAX && all_of(s, n, dns_char) && is_lower_alnum(s[0]) && is_lower_alnum(s[n - 1]);
}

/* A label value (or the name part of a key): up to 63 of [A-Za-z0-9._-], alphanumeric at both ends. */
static bool label_char(char c) {
        return is_alnum(c) || c == '-' || c == '_' || c == '.';
}

static bool valid_label_value(const char *s, size_t n, bool allow_empty) {
        if (n == 0)
                return allow_empty;
        return n <= LABEL_VALUE_MAX && all_of(s, n, label_char) && is_alnum(s[0]) && is_alnum(s[n - 1]);
}

/* A qualified name: [prefix/]name with a DNS subdomain prefix. */
static bool valid_label_key(const char *s) {
        const char *slash = strchr(s, '/');
        if (!slash)
                return valid_label_value(s, strlen(s), false);
        size_t plen = (size_t)(slash - s);
        if (plen == 0 || plen > LABEL_PREFIX_MAX || !all_of(s, plen, dns_char) || !is_lower_alnum(s[0]) ||
            !is_lower_alnum(s[plen - 1]))
                return false;
        return valid_label_value(slash + 1, strlen(slash + 1), false);
}

static bool valid_token(const char *s) {
        size_t n = s ? strlen(s) : 0;
        return n == TOKEN_ID_LEN + 1 + TOKEN_SECRET_LEN && s[TOKEN_ID_LEN] == '.' &&
               all_of(s, TOKEN_ID_LEN, is_lower_alnum) &&
               all_of(s + TOKEN_ID_LEN + 1, TOKEN_SECRET_LEN, is_lower_alnum);
}

static bool name_char(char c) {
        return is_alnum(c) || c == '-' || c == '_' || c == '.';
}

static bool valid_name(const char *s) {
        return s && *s && all_of(s, strlen(s), name_char);
}

static bool flag_char(char c) {
        return is_alnum(c) || strchr("._-/%+", c) != NULL;
}

static bool flag_safe(const char *s) {
        return s && *s && all_of(s, strlen(s), flag_char);
}

static bool url_char(char c) {
        return (unsigned char)c > ' ' && c != '"' && c != '\'' && c != '\\' && (unsigned char)c < 0x7f;
}

static int check_required(const struct cloudinit_node *n, char *err, size_t errlen) {
        if (!valid_hostname(n->hostname))
                return errmsg_invalid(err, errlen, "hostname: \"%s\" is not a valid node name (RFC 1123 subdomain)",
                             n->hostname ? n->hostname : "");
        if (n->vmid == 0)
                return errmsg_invalid(err, errlen, "vmid: must be set");
        if (!valid_name(n->region) || !valid_name(n->zone))
                return errmsg_invalid(err, errlen, "%s: must be a non-empty name of [A-Za-z0-9._-]",
                             valid_name(n->region) ? "zone" : "region");
        if (!valid_token(n->bootstrap_token))
                return errmsg_invalid(err, errlen, "bootstrapToken: must be <6 of [a-z0-9]>.<16 of [a-z0-9]>");
        if (!n->api_server || strncmp(n->api_server, "https://", 8) != 0 || !n->api_server[8] ||
            !all_of(n->api_server, strlen(n->api_server), url_char))
                return errmsg_invalid(err, errlen, "apiServer: must be an https:// URL");
        if (!n->root_ca || !strstr(n->root_ca, "-----BEGIN CERTIFICATE-----"))
                return errmsg_invalid(err, errlen, "rootCA: must be a PEM certificate");
        if (n->instance_id && !valid_name(n->instance_id))
                return errmsg_invalid(err, errlen, "instanceID: must be a name of [A-Za-z0-9._-]");
        return 0;
}

/* ---- kubelet flags ---- */

struct flags {
        char *text;
        size_t len;
        FILE *f;
};

static int labels_flag(FILE *f, json_t *labels, char *err, size_t errlen) {
        size_t n;
        const char **keys;
        if (!labels)
                return 0;
        if (!json_is_object(labels))
                return errmsg_invalid(err, errlen, "labels: must be an object");
        if (json_object_size(labels) == 0)
                return 0;
        if (!(keys = jsonutil_sorted_keys(labels, &n)))
                return -ENOMEM;
        int r = 0;
        fputs(" --node-labels=", f);
        for (size_t i = 0; i < n && r >= 0; i++) {
                const char *v = json_string_value(json_object_get(labels, keys[i]));
                if (!valid_label_key(keys[i]) || !v || !valid_label_value(v, strlen(v), true))
                        r = errmsg_invalid(err, errlen, "labels.%s: invalid label (key or value)", keys[i]);
                else
                        fprintf(f, "%s%s=%s", i ? "," : "", keys[i], v);
        }
        free(keys);
        return r;
}

static bool valid_effect(const char *e) {
        return e && (strcmp(e, "NoSchedule") == 0 || strcmp(e, "PreferNoSchedule") == 0 || strcmp(e, "NoExecute") == 0);
}

static int one_taint(FILE *f, json_t *t, size_t i, bool *has_unregistered, char *err, size_t errlen) {
        const char *key = json_string_value(json_object_get(t, "key"));
        const char *value = json_string_value(json_object_get(t, "value"));
        const char *effect = json_string_value(json_object_get(t, "effect"));
        if (!key || !valid_label_key(key) || (value && !valid_label_value(value, strlen(value), true)) ||
            !valid_effect(effect))
                return errmsg_invalid(err, errlen, "taints[%zu]: needs a valid key, value and effect", i);
        if (strcmp(key, CLOUDINIT_UNREGISTERED_TAINT_KEY) == 0)
                *has_unregistered = true;
        fprintf(f, "%s%s%s%s:%s", i ? "," : "", key, value && *value ? "=" : "", value ? value : "", effect);
        return 0;
}

static int taints_flag(FILE *f, json_t *taints, char *err, size_t errlen) {
        bool has_unregistered = false;
        size_t i;
        json_t *t;
        if (taints && !json_is_array(taints))
                return errmsg_invalid(err, errlen, "taints: must be an array");
        fputs(" --register-with-taints=", f);
        json_array_foreach(taints, i, t) {
                int r = one_taint(f, t, i, &has_unregistered, err, errlen);
                if (r < 0)
                        return r;
        }
        if (!has_unregistered)
                fprintf(f, "%s%s", json_array_size(taints) ? "," : "", CLOUDINIT_UNREGISTERED_TAINT);
        return 0;
}

/* --name=k=v,k2=v2 (sep "=") or --eviction-hard=k<v (sep "<") from an object of strings. */
static int map_flag(FILE *f, json_t *kc, const char *field, const char *flag, const char *sep, char *err,
                    size_t errlen) {
        json_t *obj = json_object_get(kc, field);
        size_t n;
        const char **keys;
        if (!obj || json_object_size(obj) == 0)
                return 0;
        if (!json_is_object(obj))
                return errmsg_invalid(err, errlen, "kubeletConfiguration.%s: must be an object", field);
        if (!(keys = jsonutil_sorted_keys(obj, &n)))
                return -ENOMEM;
        int r = 0;
        fprintf(f, " --%s=", flag);
        for (size_t i = 0; i < n && r >= 0; i++) {
                const char *v = json_string_value(json_object_get(obj, keys[i]));
                if (!flag_safe(keys[i]) || !flag_safe(v))
                        r = errmsg_invalid(err, errlen,
                                           "kubeletConfiguration.%s.%s: must be a string of [A-Za-z0-9._%%/+-]",
                                           field, keys[i]);
                else
                        fprintf(f, "%s%s%s%s", i ? "," : "", keys[i], sep, v);
        }
        free(keys);
        return r;
}

static int kubelet_config_flags(FILE *f, json_t *kc, char *err, size_t errlen) {
        if (!kc)
                return 0;
        if (!json_is_object(kc))
                return errmsg_invalid(err, errlen, "kubeletConfiguration: must be an object");
        json_t *max_pods = json_object_get(kc, "maxPods");
        if (max_pods && (!json_is_integer(max_pods) || json_integer_value(max_pods) <= 0))
                return errmsg_invalid(err, errlen, "kubeletConfiguration.maxPods: must be a positive integer");
        if (max_pods)
                fprintf(f, " --max-pods=%" JSON_INTEGER_FORMAT, json_integer_value(max_pods));
        int r = map_flag(f, kc, "kubeReserved", "kube-reserved", "=", err, errlen);
        if (r >= 0)
                r = map_flag(f, kc, "systemReserved", "system-reserved", "=", err, errlen);
        if (r >= 0)
                r = map_flag(f, kc, "evictionHard", "eviction-hard", "<", err, errlen);
        return r;
}

/* The kubelet command line: --provider-id, --node-labels, --register-with-taints, then the
 * KubeletConfiguration flags. */
static int kubelet_flags(const struct cloudinit_node *n, const char *provider_id, char **ret, char *err,
                         size_t errlen) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        fprintf(f, "--provider-id=%s", provider_id);
        int r = labels_flag(f, n->labels, err, errlen);
        if (r >= 0)
                r = taints_flag(f, n->taints, err, errlen);
        if (r >= 0)
                r = kubelet_config_flags(f, n->kubelet_configuration, err, errlen);
        if (fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0) {
                free(text);
                return r;
        }
        *ret = text;
        return 0;
}

/* ---- the data tree ---- */

static json_t *str_or_empty(const char *s) {
        return json_string(s ? s : "");
}

static json_t *tags_array(const struct cloudinit_node *n) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n->n_tags; i++)
                if (json_array_append_new(a, str_or_empty(n->tags[i])) < 0) {
                        json_decref(a);
                        return NULL;
                }
        return a;
}

static json_t *metadata(const struct cloudinit_node *n, const char *provider_id) {
        char vmid[16];
        snprintf(vmid, sizeof vmid, "%" PRIu32, n->vmid);
        return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o?, s:s}", "Hostname", n->hostname, "InstanceID",
                         n->instance_id ? n->instance_id : vmid, "InstanceType",
                         n->instance_type ? n->instance_type : "", "ProviderID", provider_id, "Region", n->region,
                         "Zone", n->zone, "Tags", tags_array(n), "NodeClass", n->node_class ? n->node_class : "");
}

static json_t *resources(const struct cloudinit_node *n) {
        return json_pack("{s:I, s:I, s:I, s:I}", "CPU", (json_int_t)n->cpu, "Memory", (json_int_t)n->memory_mib,
                         "HugePages2Mi", (json_int_t)n->hugepages_2mi, "HugePages1Gi", (json_int_t)n->hugepages_1gi);
}

static json_t *taints_with_unregistered(json_t *taints) {
        json_t *a = taints ? json_deep_copy(taints) : json_array();
        size_t i;
        json_t *t;
        json_array_foreach(a, i, t)
                if (json_is_object(t) && json_string_value(json_object_get(t, "key")) &&
                    strcmp(json_string_value(json_object_get(t, "key")), CLOUDINIT_UNREGISTERED_TAINT_KEY) == 0)
                        return a;
        if (a && json_array_append_new(a, json_pack("{s:s, s:s, s:s}", "key", CLOUDINIT_UNREGISTERED_TAINT_KEY,
                                                    "value", "true", "effect", "NoExecute")) < 0) {
                json_decref(a);
                return NULL;
        }
        return a;
}

static json_t *kubernetes(const struct cloudinit_node *n, const char *flags) {
        json_t *taints = taints_with_unregistered(n->taints);
        if (!taints)
                return NULL;
        json_t *labels = n->labels ? json_incref(n->labels) : json_object();
        json_t *kc = n->kubelet_configuration ? json_incref(n->kubelet_configuration) : json_object();
        return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s}", "Version",
                         n->kubernetes_version ? n->kubernetes_version : "", "RootCA", n->root_ca, "BootstrapToken",
                         n->bootstrap_token, "APIServer", n->api_server, "KubeletConfiguration", kc, "NodeLabels",
                         labels, "Taints", taints, "KubeletFlags", flags);
}

static int check_objects(const struct cloudinit_node *n, char *err, size_t errlen) {
        if (n->values && !json_is_object(n->values))
                return errmsg_invalid(err, errlen, "values: must be an object");
        if (n->network && !json_is_object(n->network))
                return errmsg_invalid(err, errlen, "network: must be an object");
        return 0;
}

int cloudinit_data(const struct cloudinit_node *node, json_t **ret_data, char *err, size_t errlen) {
        char provider_id[256], *flags = NULL;
        int r = check_required(node, err, errlen);
        if (r >= 0)
                r = check_objects(node, err, errlen);
        if (r < 0)
                return r;
        snprintf(provider_id, sizeof provider_id, "proxmox://%s/%" PRIu32, node->region, node->vmid);
        r = kubelet_flags(node, provider_id, &flags, err, errlen);
        if (r < 0)
                return r;
        json_t *values = node->values ? json_incref(node->values) : json_object();
        json_t *network = node->network ? json_incref(node->network) : ipam_network_data(NULL, NULL, NULL);
        json_t *data = json_pack("{s:o?, s:o?, s:o?, s:o?, s:o?}", "Metadata", metadata(node, provider_id), "Resources",
                                 resources(node), "Kubernetes", kubernetes(node, flags), "Values", values, "Network",
                                 network);
        free(flags);
        if (!data || !json_is_object(json_object_get(data, "Network")) ||
            !json_is_object(json_object_get(data, "Metadata")) ||
            !json_is_object(json_object_get(data, "Resources")) ||
            !json_is_object(json_object_get(data, "Kubernetes")) ||
            !json_is_object(json_object_get(data, "Values"))) {
                json_decref(data);
                return -ENOMEM;
        }
        *ret_data = data;
        return 0;
}

/* ---- template sets and rendering ---- */

struct cloudinit_set {
        struct gotmpl *tmpl[CLOUDINIT_N_FILES];
};

void cloudinit_set_free(struct cloudinit_set *set) {
        if (!set)
                return;
        for (int i = 0; i < CLOUDINIT_N_FILES; i++)
                gotmpl_free(set->tmpl[i]);
        free(set);
}

int cloudinit_set_new(const struct cloudinit_templates *templates, struct cloudinit_set **ret_set, char *err,
                      size_t errlen) {
        struct cloudinit_set *set = calloc(1, sizeof *set);
        int r = set ? 0 : -ENOMEM;
        for (int i = 0; i < CLOUDINIT_N_FILES && r >= 0; i++) {
                const char *text = templates && templates->text[i] ? templates->text[i] : defaults[i];
                r = gotmpl_parse(file_names[i], text, strlen(text), &set->tmpl[i], err, errlen);
        }
        if (r < 0) {
                cloudinit_set_free(set);
                return r;
        }
        *ret_set = set;
        return 0;
}

void cloudinit_files_done(struct cloudinit_files *files) {
        for (int i = 0; i < CLOUDINIT_N_FILES; i++)
                free(files->text[i]);
        *files = (struct cloudinit_files){ 0 };
}

/* The rendered text must read as YAML, or cloud-init would ignore it at boot. */
static int check_yaml(const char *name, const char *text, size_t len, char *err, size_t errlen) {
        yaml_parser_t parser;
        yaml_event_t ev;
        int r = 0;
        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        for (bool done = false; !done && r >= 0;) {
                if (!yaml_parser_parse(&parser, &ev)) {
                        r = errmsg_invalid(err, errlen, "%s:%zu:%zu: rendered file is not valid YAML: %s %s", name,
                                  parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                                  parser.problem ? parser.problem : "", parser.context ? parser.context : "");
                        break;
                }
                done = ev.type == YAML_STREAM_END_EVENT;
                yaml_event_delete(&ev);
        }
        yaml_parser_delete(&parser);
        return r;
}

static int render_one(const struct cloudinit_set *set, int i, json_t *data, struct cloudinit_files *out, char *err,
                      size_t errlen) {
        struct gotmpl_options opt = { .max_output = CLOUDINIT_MAX_FILE };
        int r = gotmpl_execute(set->tmpl[i], data, &opt, &out->text[i], &out->len[i], err, errlen);
        if (r < 0)
                return r;
        if (i == CLOUDINIT_USER_DATA && strncmp(out->text[i], "#cloud-config", 13) != 0)
                return 0; /* a script or MIME multipart: not YAML */
        return check_yaml(file_names[i], out->text[i], out->len[i], err, errlen);
}

int cloudinit_render(const struct cloudinit_set *set, json_t *data, struct cloudinit_files *ret_files, char *err,
                     size_t errlen) {
        struct cloudinit_files files = { 0 };
        int r = 0;
        for (int i = 0; i < CLOUDINIT_N_FILES && r >= 0; i++)
                r = render_one(set, i, data, &files, err, errlen);
        if (r < 0) {
                cloudinit_files_done(&files);
                return r;
        }
        *ret_files = files;
        return 0;
}
