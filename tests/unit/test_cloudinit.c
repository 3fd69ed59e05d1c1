/* Tests for coordinator/cloudinit: template variables and kubelet flags, default and custom templates, errors
 * naming file:line:col, and the cidata ISO read back with xorriso (Rock Ridge, Joliet, volume id). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>
#include <cmocka.h>

#include "cloudinit.h"
#include "testutil.h"
#include "fileio.h"

#define TOKEN "abc123.0123456789abcdef"
#define CA_PEM "-----BEGIN CERTIFICATE-----\nMIIBdTCCARugAwIBAgIUY2E=\n-----END CERTIFICATE-----\n"

static json_t *jload(const char *text) {
        json_error_t e;
        json_t *v = json_loads(text, 0, &e);
        assert_non_null(v);
        return v;
}

/* A node like the coordinator builds for a claim; labels/taints/kubelet/values owned by the caller. */
static struct cloudinit_node sample_node(void) {
        static const char *const tags[] = { "pvescale", "default" };
        return (struct cloudinit_node){
                .hostname = "k8s-default-x7k2p",
                .vmid = 105,
                .instance_type = "t1.2VCPU-6GB",
                .region = "r1",
                .zone = "pve1",
                .node_class = "default",
                .tags = tags,
                .n_tags = 2,
                .cpu = 2,
                .memory_mib = 6144,
                .hugepages_2mi = 16,
                .kubernetes_version = "v1.31.2",
                .root_ca = CA_PEM,
                .bootstrap_token = TOKEN,
                .api_server = "https://10.0.0.1:6443",
        };
}

/* The first match of an extended regex's group 1 (or 0), as the simulator's kubelet reads user-data. */
static char *first_match(const char *text, const char *pattern) {
        regex_t re;
        regmatch_t m[2];
        assert_int_equal(regcomp(&re, pattern, REG_EXTENDED), 0);
        char *out = NULL;
        if (regexec(&re, text, 2, m, 0) == 0) {
                int g = m[1].rm_so >= 0 ? 1 : 0;
                out = strndup(text + m[g].rm_so, (size_t)(m[g].rm_eo - m[g].rm_so));
        }
        regfree(&re);
        return out;
}

static void assert_match(const char *text, const char *pattern, const char *want) {
        char *got = first_match(text, pattern);
        if (!got || strcmp(got, want) != 0)
                print_error("pattern %s: want [%s] got [%s]\n", pattern, want, got ? got : "(none)");
        assert_non_null(got);
        assert_string_equal(got, want);
        free(got);
}

static void assert_yaml(const char *text) {
        yaml_parser_t p;
        yaml_document_t doc;
        assert_true(yaml_parser_initialize(&p));
        yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
        assert_true(yaml_parser_load(&p, &doc));
        assert_non_null(yaml_document_get_root_node(&doc));
        yaml_document_delete(&doc);
        yaml_parser_delete(&p);
}

static void render(const struct cloudinit_templates *tt, json_t *data, struct cloudinit_files *files) {
        struct cloudinit_set *set = NULL;
        char err[GOTMPL_ERR_SIZE] = "";
        int r = cloudinit_set_new(tt, &set, err, sizeof err);
        if (r >= 0)
                r = cloudinit_render(set, data, files, err, sizeof err);
        if (r < 0)
                print_error("render: %s\n", err);
        assert_int_equal(r, 0);
        cloudinit_set_free(set);
}

/* ---- data ---- */

static void test_data(void **state) {
        (void)state;
        struct cloudinit_node n = sample_node();
        n.labels = jload("{\"node.kubernetes.io/instance-type\": \"t1.2VCPU-6GB\", \"pvescale.io/nodepool\": \"default\","
                         " \"team\": \"\"}");
        n.taints = jload("[{\"key\": \"dedicated\", \"value\": \"gpu\", \"effect\": \"NoSchedule\"},"
                         " {\"key\": \"spot\", \"effect\": \"PreferNoSchedule\"}]");
        n.kubelet_configuration = jload("{\"maxPods\": 64, \"kubeReserved\": {\"memory\": \"512Mi\", \"cpu\": \"70m\"},"
                                        " \"systemReserved\": {\"cpu\": \"10m\"},"
                                        " \"evictionHard\": {\"memory.available\": \"100Mi\", \"nodefs.available\": \"10%\"}}");
        n.values = jload("{\"team\": \"infra\"}");
        json_t *d = NULL;
        char err[256];
        assert_int_equal(cloudinit_data(&n, &d, err, sizeof err), 0);
        json_t *md = json_object_get(d, "Metadata");
        assert_string_equal(json_string_value(json_object_get(md, "ProviderID")), "proxmox://r1/105");
        assert_string_equal(json_string_value(json_object_get(md, "InstanceID")), "105");
        assert_string_equal(json_string_value(json_object_get(md, "Hostname")), "k8s-default-x7k2p");
        assert_string_equal(json_string_value(json_object_get(md, "Zone")), "pve1");
        assert_int_equal(json_array_size(json_object_get(md, "Tags")), 2);
        json_t *res = json_object_get(d, "Resources");
        assert_int_equal(json_integer_value(json_object_get(res, "CPU")), 2);
        assert_int_equal(json_integer_value(json_object_get(res, "Memory")), 6144);
        assert_int_equal(json_integer_value(json_object_get(res, "HugePages2Mi")), 16);
        json_t *k = json_object_get(d, "Kubernetes");
        assert_string_equal(json_string_value(json_object_get(k, "BootstrapToken")), TOKEN);
        assert_string_equal(json_string_value(json_object_get(k, "KubeletFlags")),
                            "--provider-id=proxmox://r1/105"
                            " --node-labels=node.kubernetes.io/instance-type=t1.2VCPU-6GB,pvescale.io/nodepool=default,team="
                            " --register-with-taints=dedicated=gpu:NoSchedule,spot:PreferNoSchedule,"
                            "pvescale.io/unregistered=true:NoExecute"
                            " --max-pods=64 --kube-reserved=cpu=70m,memory=512Mi --system-reserved=cpu=10m"
                            " --eviction-hard=memory.available<100Mi,nodefs.available<10%");
        json_t *taints = json_object_get(k, "Taints");
        assert_int_equal(json_array_size(taints), 3);
        assert_string_equal(json_string_value(json_object_get(json_array_get(taints, 2), "key")),
                            CLOUDINIT_UNREGISTERED_TAINT_KEY);
        assert_string_equal(json_string_value(json_object_get(json_object_get(d, "Values"), "team")), "infra");
        /* the caller's objects are not changed */
        assert_int_equal(json_array_size(n.taints), 2);
        json_decref(d);
        json_decref(n.labels);
        json_decref(n.taints);
        json_decref(n.kubelet_configuration);
        json_decref(n.values);
}

/* Minimal node: no labels, taints or kubelet configuration; the unregistered taint is still there once. */
static void test_data_minimal(void **state) {
        (void)state;
        struct cloudinit_node n = sample_node();
        n.taints = jload("[{\"key\": \"pvescale.io/unregistered\", \"value\": \"true\", \"effect\": \"NoExecute\"}]");
        n.instance_id = "claim-7f3a";
        json_t *d = NULL;
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        json_t *k = json_object_get(d, "Kubernetes");
        assert_string_equal(json_string_value(json_object_get(k, "KubeletFlags")),
                            "--provider-id=proxmox://r1/105 --register-with-taints=pvescale.io/unregistered=true:NoExecute");
        assert_int_equal(json_array_size(json_object_get(k, "Taints")), 1);
        assert_true(json_is_object(json_object_get(k, "KubeletConfiguration")));
        assert_int_equal(json_object_size(json_object_get(k, "KubeletConfiguration")), 0);
        assert_int_equal(json_object_size(json_object_get(d, "Values")), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(d, "Metadata"), "InstanceID")), "claim-7f3a");
        json_decref(d);
        json_decref(n.taints);
}

struct bad_case {
        const char *field; /* which input to break */
        const char *value;
        const char *want; /* message prefix */
};

static void test_data_rejects(void **state) {
        (void)state;
        static const struct bad_case cases[] = {
                { "hostname", "K8S_Node", "hostname:" },
                { "hostname", "", "hostname:" },
                { "region", "r 1", "region:" },
                { "zone", "", "zone:" },
                { "token", "abc123.0123456789abcde", "bootstrapToken:" },
                { "token", "ABC123.0123456789abcdef", "bootstrapToken:" },
                { "api", "http://10.0.0.1:6443", "apiServer:" },
                { "api", "https://a b", "apiServer:" },
                { "ca", "not a pem", "rootCA:" },
                { "labels", "{\"bad key!\": \"x\"}", "labels.bad key!:" },
                { "labels", "{\"a\": \"has space\"}", "labels.a:" },
                { "labels", "{\"a\": 5}", "labels.a:" },
                { "labels", "[]", "labels:" },
                { "taints", "[{\"key\": \"a\", \"effect\": \"Sometimes\"}]", "taints[0]:" },
                { "taints", "[{\"effect\": \"NoSchedule\"}]", "taints[0]:" },
                { "kubelet", "{\"maxPods\": 0}", "kubeletConfiguration.maxPods:" },
                { "kubelet", "{\"kubeReserved\": {\"cpu\": \"1 --evil\"}}", "kubeletConfiguration.kubeReserved.cpu:" },
                { "kubelet", "{\"evictionHard\": {\"memory.available\": 100}}", "kubeletConfiguration.evictionHard" },
                { "values", "[1]", "values:" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
                struct cloudinit_node n = sample_node();
                json_t *j = NULL;
                const struct bad_case *c = &cases[i];
                if (strcmp(c->field, "hostname") == 0)
                        n.hostname = c->value;
                else if (strcmp(c->field, "region") == 0)
                        n.region = c->value;
                else if (strcmp(c->field, "zone") == 0)
                        n.zone = c->value;
                else if (strcmp(c->field, "token") == 0)
                        n.bootstrap_token = c->value;
                else if (strcmp(c->field, "api") == 0)
                        n.api_server = c->value;
                else if (strcmp(c->field, "ca") == 0)
                        n.root_ca = c->value;
                else
                        j = jload(c->value);
                if (strcmp(c->field, "labels") == 0)
                        n.labels = j;
                if (strcmp(c->field, "taints") == 0)
                        n.taints = j;
                if (strcmp(c->field, "kubelet") == 0)
                        n.kubelet_configuration = j;
                if (strcmp(c->field, "values") == 0)
                        n.values = j;
                json_t *d = NULL;
                char err[256] = "";
                int r = cloudinit_data(&n, &d, err, sizeof err);
                if (r != -EINVAL || strncmp(err, c->want, strlen(c->want)) != 0)
                        print_error("case %zu: want %s..., got %d %s\n", i, c->want, r, err);
                assert_int_equal(r, -EINVAL);
                assert_null(d);
                assert_int_equal(strncmp(err, c->want, strlen(c->want)), 0);
                json_decref(j);
        }
}

/* ---- rendering ---- */

/* The default network-config without static addresses. */
#define DHCP_NETWORK_CONFIG "version: 2\nethernets:\n  primary:\n    match:\n      name: \"e*\"\n    dhcp4: true\n"

/* With the claim's addresses (spec.ipam): each interface by its MAC, its addresses, gateways and DNS; and .Network
 * in a template of the class's own. */
static void test_render_static_network(void **state) {
        (void)state;
        struct cloudinit_node n = sample_node();
        json_t *d = NULL;
        struct cloudinit_files f = { 0 };
        char err[256];
        n.network = jload("{\"Static\": true, \"Interfaces\": [{\"Name\": \"net0\", \"Index\": 0,"
                          " \"MAC\": \"BC:24:11:00:00:01\", \"IPv4\": \"10.0.0.5\", \"IPv4CIDR\": \"10.0.0.5/24\","
                          " \"Prefix4\": 24, \"Gateway4\": \"10.0.0.1\", \"IPv6\": \"fd00::5\","
                          " \"IPv6CIDR\": \"fd00::5/64\", \"Prefix6\": 64, \"Gateway6\": \"fd00::1\"}],"
                          " \"Nameservers\": [\"10.0.0.53\"], \"SearchDomains\": [\"k8s.example\"]}");
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        render(NULL, d, &f);
        assert_string_equal(f.text[CLOUDINIT_NETWORK_CONFIG],
                            "version: 2\nethernets:\n  net0:\n    match:\n      macaddress: \"bc:24:11:00:00:01\"\n"
                            "    dhcp4: false\n    addresses:\n      - \"10.0.0.5/24\"\n      - \"fd00::5/64\"\n"
                            "    gateway4: \"10.0.0.1\"\n    gateway6: \"fd00::1\"\n    nameservers:\n"
                            "      addresses: [\"10.0.0.53\"]\n      search: [\"k8s.example\"]\n");
        assert_yaml(f.text[CLOUDINIT_NETWORK_CONFIG]);
        cloudinit_files_done(&f);
        struct cloudinit_set *set = NULL;
        struct cloudinit_templates t = { .text = { [CLOUDINIT_META_DATA] =
                                                           "local-ipv4: {{ (index .Network.Interfaces 0).IPv4 }}\n" } };
        assert_int_equal(cloudinit_set_new(&t, &set, err, sizeof err), 0);
        assert_int_equal(cloudinit_render(set, d, &f, err, sizeof err), 0);
        assert_string_equal(f.text[CLOUDINIT_META_DATA], "local-ipv4: 10.0.0.5\n");
        cloudinit_files_done(&f);
        cloudinit_set_free(set);
        json_decref(d);
        json_decref(n.network);
        n.network = jload("[]");
        assert_int_equal(cloudinit_data(&n, &d, err, sizeof err), -EINVAL);
        assert_string_equal(err, "network: must be an object");
        json_decref(n.network);
}

static void test_render_defaults(void **state) {
        (void)state;
        struct cloudinit_node n = sample_node();
        n.labels = jload("{\"pvescale.io/nodepool\": \"default\", \"app\": \"web\"}");
        n.values = jload("{\"sshAuthorizedKeys\": \"ssh-ed25519 AAAA one@x\\nssh-ed25519 BBBB two@y\\n\"}");
        json_t *d = NULL;
        struct cloudinit_files f = { 0 };
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        render(NULL, d, &f);
        const char *ud = f.text[CLOUDINIT_USER_DATA];
        assert_int_equal(f.len[CLOUDINIT_USER_DATA], strlen(ud));
        assert_int_equal(strncmp(ud, "#cloud-config\n", 14), 0);
        assert_yaml(ud);
        /* what the simulator's kubelet (tests/sim/simlib/kubelet.py) reads */
        char *tok = first_match(ud, "[a-z0-9]{6}\\.[a-z0-9]{16}");
        assert_string_equal(tok, TOKEN);
        free(tok);
        assert_match(ud, "--node-labels[= ]([^[:space:]\"']+)", "app=web,pvescale.io/nodepool=default");
        assert_match(ud, "--register-with-taints[= ]([^[:space:]\"']+)", "pvescale.io/unregistered=true:NoExecute");
        assert_match(ud, "--provider-id[= ]([^[:space:]\"']+)", "proxmox://r1/105");
        assert_non_null(strstr(ud, "\nhostname: k8s-default-x7k2p\n"));
        assert_non_null(strstr(ud, "            server: https://10.0.0.1:6443\n"));
        assert_non_null(strstr(ud, "certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"));
        assert_non_null(strstr(ud, "        tlsBootstrapToken: " TOKEN "\n"));
        assert_non_null(strstr(ud, "ssh_authorized_keys:\n  - \"ssh-ed25519 AAAA one@x\"\n  - \"ssh-ed25519 BBBB two@y\"\n"));
        assert_non_null(strstr(ud, "  - [kubeadm, join, --config, /etc/pvescale/kubeadm-join.yaml]\n"));
        assert_null(strstr(ud, "patches")); /* no KubeletConfiguration */
        assert_null(strstr(ud, "<no value>"));
        assert_string_equal(f.text[CLOUDINIT_META_DATA], "instance-id: \"105\"\nlocal-hostname: \"k8s-default-x7k2p\"\n"
                                                         "provider-id: \"proxmox://r1/105\"\nregion: \"r1\"\nzone: \"pve1\"\n"
                                                         "instance-type: \"t1.2VCPU-6GB\"\n");
        assert_string_equal(f.text[CLOUDINIT_NETWORK_CONFIG], DHCP_NETWORK_CONFIG);
        assert_yaml(f.text[CLOUDINIT_NETWORK_CONFIG]);
        cloudinit_files_done(&f);
        json_decref(d);
        json_decref(n.labels);
        json_decref(n.values);
}

/* With a KubeletConfiguration the default user-data adds the kubeadm patch and the flags the kubelet needs
 * to report the planned allocatable. */
static void test_render_kubelet_configuration(void **state) {
        (void)state;
        struct cloudinit_node n = sample_node();
        n.kubelet_configuration = jload("{\"maxPods\": 32, \"cpuManagerPolicy\": \"static\","
                                        " \"kubeReserved\": {\"cpu\": \"70m\"}}");
        json_t *d = NULL;
        struct cloudinit_files f = { 0 };
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        render(NULL, d, &f);
        const char *ud = f.text[CLOUDINIT_USER_DATA];
        assert_yaml(ud);
        assert_non_null(strstr(ud, "  - path: /etc/pvescale/patches/kubeletconfiguration+merge.json\n"));
        assert_non_null(strstr(ud, "      {\"cpuManagerPolicy\":\"static\",\"kubeReserved\":{\"cpu\":\"70m\"},\"maxPods\":32}\n"));
        assert_non_null(strstr(ud, "      patches:\n        directory: /etc/pvescale/patches\n"));
        assert_match(ud, "--max-pods[= ]([^[:space:]\"']+)", "32");
        assert_match(ud, "--kube-reserved[= ]([^[:space:]\"']+)", "cpu=70m");
        cloudinit_files_done(&f);
        json_decref(d);
        json_decref(n.kubelet_configuration);
}

static void test_render_custom(void **state) {
        (void)state;
        struct cloudinit_node n = sample_node();
        n.values = jload("{\"proxy\": \"http://proxy:3128\", \"packages\": [\"htop\", \"jq\"]}");
        struct cloudinit_templates tt = { .text = {
                [CLOUDINIT_USER_DATA] = "#cloud-config\n"
                                        "hostname: {{ .Metadata.Hostname }}\n"
                                        "packages:\n"
                                        "  {{- toYaml .Values.packages | nindent 2 }}\n"
                                        "write_files:\n"
                                        "  - path: /etc/environment\n"
                                        "    content: |\n"
                                        "      HTTP_PROXY={{ .Values.proxy }}\n"
                                        "      CPUS={{ .Resources.CPU }} MEM={{ .Resources.Memory }}Mi\n"
                                        "{{- range $i, $t := .Metadata.Tags }}\n"
                                        "      TAG{{ $i }}={{ $t | upper }}\n"
                                        "{{- end }}\n"
                                        "runcmd:\n"
                                        "  - [sh, -c, {{ printf \"kubelet %s\" .Kubernetes.KubeletFlags | quote }}]\n"
                                        "  - [echo, {{ .Kubernetes.BootstrapToken | quote }}]\n",
                [CLOUDINIT_META_DATA] = "instance-id: {{ .Metadata.InstanceID }}\n",
        } };
        json_t *d = NULL;
        struct cloudinit_files f = { 0 };
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        render(&tt, d, &f);
        assert_string_equal(f.text[CLOUDINIT_USER_DATA],
                            "#cloud-config\nhostname: k8s-default-x7k2p\npackages:\n  - htop\n  - jq\nwrite_files:\n"
                            "  - path: /etc/environment\n    content: |\n      HTTP_PROXY=http://proxy:3128\n"
                            "      CPUS=2 MEM=6144Mi\n      TAG0=PVESCALE\n      TAG1=DEFAULT\nruncmd:\n"
                            "  - [sh, -c, \"kubelet --provider-id=proxmox://r1/105 "
                            "--register-with-taints=pvescale.io/unregistered=true:NoExecute\"]\n"
                            "  - [echo, \"" TOKEN "\"]\n");
        assert_string_equal(f.text[CLOUDINIT_META_DATA], "instance-id: 105\n");
        /* network-config falls back to the default */
        assert_string_equal(f.text[CLOUDINIT_NETWORK_CONFIG], DHCP_NETWORK_CONFIG);
        cloudinit_files_done(&f);
        json_decref(d);
        json_decref(n.values);
}

/* Errors name the file: a parse error, an execution error and a rendered file that is not YAML. */
static void test_render_errors(void **state) {
        (void)state;
        struct cloudinit_set *set = NULL;
        char err[GOTMPL_ERR_SIZE];
        struct cloudinit_templates bad_parse = { .text = { [CLOUDINIT_NETWORK_CONFIG] = "version: 2\n{{ if .X }}\n" } };
        assert_int_equal(cloudinit_set_new(&bad_parse, &set, err, sizeof err), -EINVAL);
        assert_null(set);
        assert_string_equal(err, "network-config:3:1: unexpected EOF");
        struct cloudinit_templates bad_func = { .text = { [CLOUDINIT_USER_DATA] = "#cloud-config\nx: {{ .A | nope }}\n" } };
        assert_int_equal(cloudinit_set_new(&bad_func, &set, err, sizeof err), -EINVAL);
        assert_string_equal(err, "user-data:2:12: function \"nope\" not defined");

        struct cloudinit_node n = sample_node();
        json_t *d = NULL;
        struct cloudinit_files f = { 0 };
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        struct cloudinit_templates bad_exec = { .text = { [CLOUDINIT_META_DATA] = "a: {{ .Resources.CPU | upper }}\n" } };
        assert_int_equal(cloudinit_set_new(&bad_exec, &set, err, sizeof err), 0);
        assert_int_equal(cloudinit_render(set, d, &f, err, sizeof err), -EINVAL);
        assert_string_equal(err, "meta-data:1:24: at <upper>: wrong type for value; expected string; got int64");
        assert_null(f.text[CLOUDINIT_USER_DATA]);
        cloudinit_set_free(set);
        struct cloudinit_templates bad_yaml = { .text = { [CLOUDINIT_META_DATA] = "local-hostname: {{ .Metadata.Hostname }}\n"
                                                                                "a: b: c\n" } };
        assert_int_equal(cloudinit_set_new(&bad_yaml, &set, err, sizeof err), 0);
        assert_int_equal(cloudinit_render(set, d, &f, err, sizeof err), -EINVAL);
        assert_int_equal(strncmp(err, "meta-data:2:5: rendered file is not valid YAML", 46), 0);
        cloudinit_set_free(set);
        /* a user-data script is not YAML and is not checked as such */
        struct cloudinit_templates script = { .text = { [CLOUDINIT_USER_DATA] = "#!/bin/sh\necho {{ .Metadata.Hostname }}: [\n" } };
        assert_int_equal(cloudinit_set_new(&script, &set, err, sizeof err), 0);
        assert_int_equal(cloudinit_render(set, d, &f, err, sizeof err), 0);
        assert_string_equal(f.text[CLOUDINIT_USER_DATA], "#!/bin/sh\necho k8s-default-x7k2p: [\n");
        cloudinit_files_done(&f);
        cloudinit_set_free(set);
        json_decref(d);
}

/* A pause that only counts (the writer thread runs on its own meanwhile). */
static void count_pause(void *data) {
        struct timespec ts = { 0, 200000 };
        (*(unsigned *)data)++;
        nanosleep(&ts, NULL);
}

/* ---- the ISO ---- */

static bool have_xorriso(void) {
        return system("command -v xorriso >/dev/null 2>&1") == 0;
}

static char *run_capture(const char *cmd) {
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        char *buf = calloc(1, 65536);
        size_t n = fread(buf, 1, 65535, p);
        buf[n] = 0;
        assert_int_equal(pclose(p), 0);
        return buf;
}

static char *read_text(const char *path) {
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(fileio_read(path, 1 << 20, &text, &len), 0);
        return text;
}

static void check_tree(const char *dir, const struct cloudinit_files *f) {
        for (int i = 0; i < CLOUDINIT_N_FILES; i++) {
                char path[512];
                struct stat st;
                snprintf(path, sizeof path, "%s/%s", dir, cloudinit_file_name(i));
                char *text = read_text(path);
                assert_string_equal(text, f->text[i]);
                free(text);
                assert_int_equal(stat(path, &st), 0);
                assert_int_equal(st.st_size, (off_t)f->len[i]);
        }
}

static void test_iso(void **state) {
        (void)state;
        if (!have_xorriso())
                skip(); /* Debian package xorriso */
        struct cloudinit_node n = sample_node();
        json_t *d = NULL;
        struct cloudinit_files f = { 0 };
        char tmp[] = "/tmp/test-cloudinit-XXXXXX", iso[600], cmd[2048], err[256];
        assert_non_null(mkdtemp(tmp));
        assert_int_equal(cloudinit_data(&n, &d, NULL, 0), 0);
        render(NULL, d, &f);
        snprintf(iso, sizeof iso, "%s/seed.iso", tmp);
        unsigned char *image = NULL;
        size_t len = 0;
        assert_int_equal(cloudinit_iso_build(&f, NULL, NULL, &image, &len, err, sizeof err), 0);
        assert_int_equal(fileio_write_atomic(iso, image, len, 0644), 0);

        /* volume id and the Rock Ridge / Joliet trees, as xorriso reports them */
        snprintf(cmd, sizeof cmd, "xorriso -indev '%s' -pvd_info 2>/dev/null", iso);
        char *pvd = run_capture(cmd);
        assert_non_null(strstr(pvd, "Volume Id    : cidata\n"));
        free(pvd);
        snprintf(cmd, sizeof cmd, "xorriso -indev '%s' -toc 2>&1", iso);
        char *toc = run_capture(cmd);
        assert_non_null(strstr(toc, "ISO offers   : Rock_Ridge Joliet\n"));
        assert_non_null(strstr(toc, "ISO loaded   : Rock_Ridge\n"));
        free(toc);
        snprintf(cmd, sizeof cmd, "xorriso -read_fs norock -indev '%s' -toc 2>&1", iso);
        toc = run_capture(cmd);
        assert_non_null(strstr(toc, "ISO loaded   : Joliet\n"));
        free(toc);
        /* plain ISO 9660 names cannot hold "user-data": the real names come from Rock Ridge and Joliet */
        snprintf(cmd, sizeof cmd, "xorriso -read_fs ecma119 -indev '%s' -find / 2>/dev/null", iso);
        char *names = run_capture(cmd);
        assert_null(strstr(names, "user-data"));
        assert_non_null(strstr(names, "'/USER_DATA'"));
        free(names);

        /* Rock Ridge names and contents (how the simulator's kubelet and Linux read it) */
        snprintf(cmd, sizeof cmd, "xorriso -abort_on FATAL -osirrox on -indev '%s' -extract / '%s/rr' >/dev/null 2>&1", iso, tmp);
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "%s/rr", tmp);
        check_tree(cmd, &f);

        /* Joliet names and contents, with Rock Ridge ignored */
        snprintf(cmd, sizeof cmd, "xorriso -abort_on FATAL -read_fs norock -osirrox on -indev '%s' -extract / '%s/joliet' >/dev/null 2>&1",
                 iso, tmp);
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "%s/joliet", tmp);
        check_tree(cmd, &f);

        /* the image is a whole number of 2 KiB blocks, with the ISO 9660 volume descriptor at block 16 */
        struct stat st;
        assert_int_equal(stat(iso, &st), 0);
        assert_int_equal(len, (size_t)st.st_size);
        assert_int_equal(len % 2048, 0);
        assert_memory_equal(image + 16 * 2048 + 1, "CD001", 5);
        free(image);

        /* built with pauses until libisofs's writer thread is done, then read at once: the same files */
        unsigned pauses = 0;
        assert_int_equal(cloudinit_iso_build(&f, count_pause, &pauses, &image, &len, err, sizeof err), 0);
        assert_true(pauses <= 50);
        assert_int_equal(len, (size_t)st.st_size);
        snprintf(iso, sizeof iso, "%s/paused.iso", tmp);
        assert_int_equal(fileio_write_atomic(iso, image, len, 0644), 0);
        free(image);
        snprintf(cmd, sizeof cmd, "xorriso -abort_on FATAL -osirrox on -indev '%s' -extract / '%s/paused' >/dev/null 2>&1",
                 iso, tmp);
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "%s/paused", tmp);
        check_tree(cmd, &f);

        assert_int_equal(test_rmtree(tmp), 0);
        cloudinit_files_done(&f);
        json_decref(d);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_data),
                cmocka_unit_test(test_data_minimal),
                cmocka_unit_test(test_data_rejects),
                cmocka_unit_test(test_render_defaults),
                cmocka_unit_test(test_render_static_network),
                cmocka_unit_test(test_render_kubelet_configuration),
                cmocka_unit_test(test_render_custom),
                cmocka_unit_test(test_render_errors),
                cmocka_unit_test(test_iso),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
