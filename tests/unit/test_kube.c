/* Tests for the pure parts of coordinator/kube: resource paths, queries, kubeconfig and in-cluster config,
 * status-to-errno mapping. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kube.h"
#include "yamlconf.h"

static void assert_path(const struct kube_resource *rt, const char *ns, const char *name, const char *sub,
                        const char *want) {
        char *p = NULL;
        assert_int_equal(kube_path(rt, ns, name, sub, &p), 0);
        assert_string_equal(p, want);
        free(p);
}

static void test_paths(void **state) {
        (void)state;
        assert_path(&kube_pods, "default", NULL, NULL, "/api/v1/namespaces/default/pods");
        assert_path(&kube_pods, NULL, NULL, NULL, "/api/v1/pods");
        assert_path(&kube_pods, "kube-system", "web-0", "eviction", "/api/v1/namespaces/kube-system/pods/web-0/eviction");
        assert_path(&kube_pods, "default", "web-0", "binding", "/api/v1/namespaces/default/pods/web-0/binding");
        assert_path(&kube_pods, "default", "web-0", "status", "/api/v1/namespaces/default/pods/web-0/status");
        assert_path(&kube_nodes, "ignored", "k8s-a", NULL, "/api/v1/nodes/k8s-a");
        assert_path(&kube_namespaces, NULL, "default", NULL, "/api/v1/namespaces/default");
        assert_path(&kube_events, "default", NULL, NULL, "/api/v1/namespaces/default/events");
        assert_path(&kube_secrets, "kube-system", "bootstrap-token-abcdef", NULL,
                    "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef");
        assert_path(&kube_configmaps, "default", "c", NULL, "/api/v1/namespaces/default/configmaps/c");
        assert_path(&kube_daemonsets, "kube-system", NULL, NULL, "/apis/apps/v1/namespaces/kube-system/daemonsets");
        assert_path(&kube_pdbs, "default", "pdb", NULL, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/pdb");
        assert_path(&kube_leases, "kube-node-lease", "k8s-a", NULL,
                    "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/k8s-a");
        assert_path(&kube_events_v1, "default", NULL, NULL, "/apis/events.k8s.io/v1/namespaces/default/events");
        assert_path(&kube_crds, NULL, "nodepools.pvescale.io", NULL,
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodepools.pvescale.io");
        assert_path(&kube_nodepools, NULL, "default", NULL, "/apis/pvescale.io/v1alpha1/nodepools/default");
        assert_path(&kube_nodeclasses, NULL, NULL, NULL, "/apis/pvescale.io/v1alpha1/proxmoxnodeclasses");
        assert_path(&kube_nodeclaims, "default", "default-x7k2p", "status",
                    "/apis/pvescale.io/v1alpha1/nodeclaims/default-x7k2p/status");
        assert_path(&kube_pods, "default", "a b/c", NULL, "/api/v1/namespaces/default/pods/a%20b%2Fc");
        char *p = NULL;
        assert_int_equal(kube_path(&kube_pods, "default", "", NULL, &p), -EINVAL);
        assert_int_equal(kube_path(&kube_pods, "default", NULL, "status", &p), -EINVAL);
        assert_null(p);
}

static void test_query(void **state) {
        (void)state;
        char *p = strdup("/api/v1/pods");
        assert_int_equal(kube_query_add(&p, "labelSelector", "app in (a,b),tier!=db"), 0);
        assert_int_equal(kube_query_add(&p, "fieldSelector", "spec.nodeName="), 0);
        assert_int_equal(kube_query_add(&p, "limit", "500"), 0);
        assert_string_equal(p, "/api/v1/pods?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb"
                               "&fieldSelector=spec.nodeName%3D&limit=500");
        free(p);
}

static void test_errno(void **state) {
        (void)state;
        assert_int_equal(kube_errno_from_status(200, NULL), 0);
        assert_int_equal(kube_errno_from_status(201, NULL), 0);
        assert_int_equal(kube_errno_from_status(400, "BadRequest"), -EINVAL);
        assert_int_equal(kube_errno_from_status(401, "Unauthorized"), -EACCES);
        assert_int_equal(kube_errno_from_status(403, "Forbidden"), -EPERM);
        assert_int_equal(kube_errno_from_status(404, "NotFound"), -ENOENT);
        assert_int_equal(kube_errno_from_status(409, "AlreadyExists"), -EEXIST);
        assert_int_equal(kube_errno_from_status(409, "Conflict"), -ESTALE);
        assert_int_equal(kube_errno_from_status(410, "Expired"), -EIDRM);
        assert_int_equal(kube_errno_from_status(415, "UnsupportedMediaType"), -EOPNOTSUPP);
        assert_int_equal(kube_errno_from_status(422, "Invalid"), -EINVAL);
        assert_int_equal(kube_errno_from_status(429, "TooManyRequests"), -EBUSY);
        assert_int_equal(kube_errno_from_status(500, "InternalError"), -EIO);
        assert_int_equal(kube_errno_from_status(503, NULL), -EIO);
}

/* ---- kubeconfig ---- */

static json_t *yaml(const char *text) {
        json_t *v = NULL;
        char err[256];
        if (yamlconf_parse(text, strlen(text), &v, err, sizeof err) < 0)
                fail_msg("bad test YAML: %s", err);
        return v;
}

static int parse_kc(const char *text, const char *base, const char *context, struct kube_config *cfg, char *err) {
        json_t *doc = yaml(text);
        err[0] = '\0';
        int r = kube_config_parse_kubeconfig(doc, base, context, cfg, err, 256);
        json_decref(doc);
        return r;
}

/* "hello CA\n" and "client cert\n" in base64. */
#define CA_B64 "aGVsbG8gQ0EK"
#define CERT_B64 "Y2xpZW50IGNlcnQK"
#define KEY_B64 "Y2xpZW50IGtleQo="

static const char *const sim_kubeconfig = "apiVersion: v1\n"
                                          "kind: Config\n"
                                          "clusters:\n"
                                          "- name: sim\n"
                                          "  cluster:\n"
                                          "    server: https://127.0.0.1:37441\n"
                                          "    certificate-authority-data: " CA_B64 "\n"
                                          "- name: other\n"
                                          "  cluster:\n"
                                          "    server: https://10.0.0.1:6443\n"
                                          "    certificate-authority: certs/ca.pem\n"
                                          "    insecure-skip-tls-verify: true\n"
                                          "users:\n"
                                          "- name: sim\n"
                                          "  user:\n"
                                          "    token: uovwn4fbuorreqn23gifbrhsaicskj4f\n"
                                          "- name: admin\n"
                                          "  user:\n"
                                          "    client-certificate-data: " CERT_B64 "\n"
                                          "    client-key-data: " KEY_B64 "\n"
                                          "- name: filer\n"
                                          "  user:\n"
                                          "    tokenFile: /var/run/token\n"
                                          "    client-certificate: admin.crt\n"
                                          "    client-key: /abs/admin.key\n"
                                          "contexts:\n"
                                          "- name: sim\n"
                                          "  context: {cluster: sim, user: sim}\n"
                                          "- name: admin\n"
                                          "  context: {cluster: other, user: admin, namespace: kube-system}\n"
                                          "- name: filer\n"
                                          "  context: {cluster: other, user: filer}\n"
                                          "current-context: sim\n";

static char *file_text(const char *path) {
        static char buf[256];
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
                fclose(f);
        buf[n] = '\0';
        return f ? buf : NULL;
}

/* Data-only certificates get one memory file each, named in the *_file fields; a named file stays. */
static void test_files_from_data(void **state) {
        (void)state;
        struct kube_config cfg;
        char err[256];
        assert_int_equal(parse_kc(sim_kubeconfig, "/home/u/.kube", "admin", &cfg, err), 0);
        assert_int_equal(kube_config_files_from_data(&cfg), 0);
        assert_string_equal(cfg.ca_file, "/home/u/.kube/certs/ca.pem");
        assert_non_null(cfg.cert_file);
        assert_non_null(cfg.key_file);
        assert_int_equal(strncmp(cfg.cert_file, "/proc/self/fd/", 14), 0);
        assert_string_equal(file_text(cfg.cert_file), "client cert\n");
        assert_string_equal(file_text(cfg.key_file), "client key\n");
        assert_int_equal(cfg.n_data_fds, 2);
        int fd = cfg.data_fds[0];
        kube_config_done(&cfg);
        assert_int_equal(fcntl(fd, F_GETFD), -1); /* closed with the config */
}

static void test_kubeconfig(void **state) {
        (void)state;
        struct kube_config cfg;
        char err[256];
        assert_int_equal(parse_kc(sim_kubeconfig, "/home/u/.kube", NULL, &cfg, err), 0);
        assert_string_equal(cfg.server, "https://127.0.0.1:37441");
        assert_string_equal(cfg.ca_data, "hello CA\n");
        assert_null(cfg.ca_file);
        assert_string_equal(cfg.token, "uovwn4fbuorreqn23gifbrhsaicskj4f");
        assert_false(cfg.insecure);
        assert_string_equal(cfg.namespace, "default");
        assert_null(cfg.cert_data);
        kube_config_done(&cfg);

        assert_int_equal(parse_kc(sim_kubeconfig, "/home/u/.kube", "admin", &cfg, err), 0);
        assert_string_equal(cfg.server, "https://10.0.0.1:6443");
        assert_string_equal(cfg.ca_file, "/home/u/.kube/certs/ca.pem");
        assert_true(cfg.insecure);
        assert_null(cfg.token);
        assert_string_equal(cfg.cert_data, "client cert\n");
        assert_string_equal(cfg.key_data, "client key\n");
        assert_string_equal(cfg.namespace, "kube-system");
        kube_config_done(&cfg);

        assert_int_equal(parse_kc(sim_kubeconfig, "/home/u/.kube", "filer", &cfg, err), 0);
        assert_string_equal(cfg.token_file, "/var/run/token");
        assert_string_equal(cfg.cert_file, "/home/u/.kube/admin.crt");
        assert_string_equal(cfg.key_file, "/abs/admin.key");
        kube_config_done(&cfg);
}

static void assert_kc_error(const char *text, const char *context, const char *message) {
        struct kube_config cfg = { 0 };
        char err[256];
        assert_int_equal(parse_kc(text, "/b", context, &cfg, err), -EINVAL);
        assert_string_equal(err, message);
        assert_null(cfg.server);
}

static void test_kubeconfig_errors(void **state) {
        (void)state;
        assert_kc_error("apiVersion: v1\nkind: Config\n", NULL, "kubeconfig: current-context: required");
        assert_kc_error(sim_kubeconfig, "prod", "kubeconfig: contexts: no context named \"prod\"");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {user: u}}]\n", NULL,
                        "kubeconfig: contexts[a].context.cluster: required");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n", NULL,
                        "kubeconfig: clusters: no cluster named \"c\"");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
                        "clusters: [{name: c, cluster: {insecure-skip-tls-verify: true}}]\n",
                        NULL, "kubeconfig: clusters[c].cluster.server: required");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
                        "clusters: [{name: c, cluster: {server: '10.0.0.1:6443'}}]\n",
                        NULL, "kubeconfig: clusters[c].cluster.server: expected an https:// URL");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
                        "clusters: [{name: c, cluster: {server: 'https://k', certificate-authority-data: '***'}}]\n",
                        NULL, "kubeconfig: clusters[c].cluster.certificate-authority-data: not valid base64");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                        "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
                        "users: [{name: u, user: {exec: {command: aws}}}]\n",
                        NULL, "kubeconfig: users[u].user: exec and auth-provider plugins are not supported; use a "
                              "token or a client certificate");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                        "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
                        "users: [{name: u, user: {client-certificate: a.crt}}]\n",
                        NULL, "kubeconfig: users[u].user: client-certificate and client-key go together");
        assert_kc_error("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                        "clusters: [{name: c, cluster: {server: 'https://k'}}]\n",
                        NULL, "kubeconfig: users: no user named \"u\"");
        assert_kc_error("- 1\n", NULL, "kubeconfig: expected a mapping (apiVersion: v1, kind: Config)");
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_kubeconfig_file(void **state) {
        (void)state;
        char dir[] = "/tmp/pvescale-kubeconfig-XXXXXX", path[128];
        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/config", dir);
        write_file(path, sim_kubeconfig);
        struct kube_config cfg;
        char err[256];
        assert_int_equal(kube_config_load_kubeconfig(path, &cfg, err, sizeof err), 0);
        assert_string_equal(cfg.server, "https://127.0.0.1:37441");
        kube_config_done(&cfg);
        unlink(path);
        assert_true(kube_config_load_kubeconfig(path, &cfg, err, sizeof err) < 0);
        assert_non_null(strstr(err, path));
        rmdir(dir);
}

static void test_in_cluster(void **state) {
        (void)state;
        char root[] = "/tmp/pvescale-incluster-XXXXXX", path[256];
        assert_non_null(mkdtemp(root));
        const char *dirs[] = { "var", "var/run", "var/run/secrets", "var/run/secrets/kubernetes.io",
                               "var/run/secrets/kubernetes.io/serviceaccount" };
        for (size_t i = 0; i < 5; i++) {
                snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
                assert_int_equal(mkdir(path, 0700), 0);
        }
        struct kube_config cfg;
        char err[256];
        assert_int_equal(kube_config_in_cluster(root, "10.96.0.1", "443", &cfg, err, sizeof err), -ENOENT);
        assert_non_null(strstr(err, "serviceaccount/token"));
        snprintf(path, sizeof path, "%s/var/run/secrets/kubernetes.io/serviceaccount/token", root);
        write_file(path, "eyJhbGciOi.sa-token\n");
        assert_int_equal(kube_config_in_cluster(root, "10.96.0.1", "443", &cfg, err, sizeof err), 0);
        assert_string_equal(cfg.server, "https://10.96.0.1:443");
        assert_string_equal(cfg.token, "eyJhbGciOi.sa-token");
        assert_string_equal(cfg.token_file, path);
        assert_non_null(strstr(cfg.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"));
        assert_string_equal(cfg.namespace, "default");
        kube_config_done(&cfg);
        char ns[256];
        snprintf(ns, sizeof ns, "%s/var/run/secrets/kubernetes.io/serviceaccount/namespace", root);
        write_file(ns, "kube-system");
        assert_int_equal(kube_config_in_cluster(root, "fd00::1", "6443", &cfg, err, sizeof err), 0);
        assert_string_equal(cfg.server, "https://[fd00::1]:6443");
        assert_string_equal(cfg.namespace, "kube-system");
        kube_config_done(&cfg);
        assert_int_equal(kube_config_in_cluster(root, NULL, "443", &cfg, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
        unlink(ns);
        unlink(path);
        for (size_t i = 5; i > 0; i--) {
                snprintf(path, sizeof path, "%s/%s", root, dirs[i - 1]);
                rmdir(path);
        }
        rmdir(root);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_files_from_data),
                cmocka_unit_test(test_query),
                cmocka_unit_test(test_errno),
                cmocka_unit_test(test_kubeconfig),
                cmocka_unit_test(test_kubeconfig_errors),
                cmocka_unit_test(test_kubeconfig_file),
                cmocka_unit_test(test_in_cluster),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
