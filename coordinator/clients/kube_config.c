/* kube_config: where the Kubernetes API is and how to authenticate: a kubeconfig file or the in-cluster account. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "errmsg.h"
#include "fileio.h"
#include "kube.h"
#include "yamlconf.h"

#define SA_DIR "var/run/secrets/kubernetes.io/serviceaccount"
#define KUBE_FILE_MAX (1u << 20)

void kube_config_done(struct kube_config *cfg) {
        if (!cfg)
                return;
        if (cfg->token)
                explicit_bzero(cfg->token, strlen(cfg->token));
        if (cfg->key_data)
                explicit_bzero(cfg->key_data, strlen(cfg->key_data));
        for (unsigned i = 0; i < cfg->n_data_fds; i++)
                close(cfg->data_fds[i]);
        char *fields[] = { cfg->server,    cfg->token,    cfg->token_file, cfg->ca_file,  cfg->ca_data,
                           cfg->cert_file, cfg->key_file, cfg->cert_data,  cfg->key_data, cfg->namespace };
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
                free(fields[i]);
        *cfg = (struct kube_config){ 0 };
}

/* ---- kubeconfig ---- */

/* The "<what>" entry of list named name, e.g. clusters[name=sim].cluster. */
static const json_t *named_entry(const json_t *doc, const char *list, const char *what, const char *name) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(doc, list), i, e) {
                const char *n = json_string_value(json_object_get(e, "name"));
                if (n && strcmp(n, name) == 0)
                        return json_object_get(e, what);
        }
        return NULL;
}

static const char *str(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static int decode_base64(const char *b64, char **ret) {
        gnutls_datum_t in = { (unsigned char *)b64, (unsigned)strlen(b64) }, out;
        if (gnutls_base64_decode2(&in, &out) < 0)
                return -EINVAL;
        char *s = strndup((const char *)out.data, out.size);
        gnutls_free(out.data);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/* A file name from the kubeconfig, made absolute against base_dir. */
static int resolve(const char *base_dir, const char *name, char **ret) {
        if (name[0] == '/' || !base_dir)
                *ret = strdup(name);
        else if (asprintf(ret, "%s/%s", base_dir, name) < 0)
                *ret = NULL;
        return *ret ? 0 : -ENOMEM;
}

/* file or data: key (a file name) or key-data (base64). */
static int file_or_data(const json_t *o, const char *key, const char *where, const char *base_dir, char **ret_file,
                        char **ret_data, char *err, size_t errlen) {
        char data_key[64];
        snprintf(data_key, sizeof data_key, "%s-data", key);
        const char *file = str(o, key), *data = str(o, data_key);
        if (data) {
                int r = decode_base64(data, ret_data);
                return r == -EINVAL
                               ? errmsg_invalid(err, errlen, "kubeconfig: %s.%s: not valid base64", where, data_key)
                               : r;
        }
        return file ? resolve(base_dir, file, ret_file) : 0;
}

static int parse_cluster(const json_t *cl, const char *name, const char *base_dir, struct kube_config *cfg, char *err,
                         size_t errlen) {
        char where[200];
        snprintf(where, sizeof where, "clusters[%s].cluster", name);
        if (!json_is_object(cl))
                return errmsg_invalid(err, errlen, "kubeconfig: clusters: no cluster named \"%s\"", name);
        const char *server = str(cl, "server");
        if (!server || !*server)
                return errmsg_invalid(err, errlen, "kubeconfig: %s.server: required", where);
        if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)
                return errmsg_invalid(err, errlen, "kubeconfig: %s.server: expected an https:// URL", where);
        cfg->server = strdup(server);
        if (!cfg->server)
                return -ENOMEM;
        cfg->insecure = json_is_true(json_object_get(cl, "insecure-skip-tls-verify"));
        return file_or_data(cl, "certificate-authority", where, base_dir, &cfg->ca_file, &cfg->ca_data, err, errlen);
}

static int parse_user(const json_t *u, const char *name, const char *base_dir, struct kube_config *cfg, char *err,
                      size_t errlen) {
        char where[200];
        snprintf(where, sizeof where, "users[%s].user", name);
        if (!json_is_object(u))
                return errmsg_invalid(err, errlen, "kubeconfig: users: no user named \"%s\"", name);
        if (json_object_get(u, "exec") || json_object_get(u, "auth-provider"))
                return errmsg_invalid(err, errlen, "kubeconfig: %s: exec and auth-provider plugins are not supported; "
                                         "use a token or a client certificate", where);
        if (str(u, "token") && !(cfg->token = strdup(str(u, "token"))))
                return -ENOMEM;
        if (!cfg->token && str(u, "tokenFile") && resolve(base_dir, str(u, "tokenFile"), &cfg->token_file) < 0)
                return -ENOMEM;
        int r = file_or_data(u, "client-certificate", where, base_dir, &cfg->cert_file, &cfg->cert_data, err, errlen);
        if (r == 0)
                r = file_or_data(u, "client-key", where, base_dir, &cfg->key_file, &cfg->key_data, err, errlen);
        bool cert = cfg->cert_file || cfg->cert_data, key = cfg->key_file || cfg->key_data;
        if (r == 0 && cert != key)
                r = errmsg_invalid(err, errlen, "kubeconfig: %s: client-certificate and client-key go together", where);
        return r;
}

static int parse_context(const json_t *doc, const char *context, const char *base_dir, struct kube_config *cfg,
                         char *err, size_t errlen) {
        const json_t *ctx = named_entry(doc, "contexts", "context", context);
        if (!json_is_object(ctx))
                return errmsg_invalid(err, errlen, "kubeconfig: contexts: no context named \"%s\"", context);
        const char *cluster = str(ctx, "cluster"), *user = str(ctx, "user"), *ns = str(ctx, "namespace");
        if (!cluster)
                return errmsg_invalid(err, errlen, "kubeconfig: contexts[%s].context.cluster: required", context);
        int r = parse_cluster(named_entry(doc, "clusters", "cluster", cluster), cluster, base_dir, cfg, err, errlen);
        if (r == 0 && user)
                r = parse_user(named_entry(doc, "users", "user", user), user, base_dir, cfg, err, errlen);
        if (r == 0 && !(cfg->namespace = strdup(ns && *ns ? ns : "default")))
                r = -ENOMEM;
        return r;
}

int kube_config_parse_kubeconfig(const json_t *doc, const char *base_dir, const char *context,
                                 struct kube_config *ret, char *err, size_t errlen) {
        struct kube_config cfg = { 0 };
        if (!json_is_object(doc))
                return errmsg_invalid(err, errlen, "kubeconfig: expected a mapping (apiVersion: v1, kind: Config)");
        const char *name = context ? context : str(doc, "current-context");
        if (!name || !*name)
                return errmsg_invalid(err, errlen, "kubeconfig: current-context: required");
        int r = parse_context(doc, name, base_dir, &cfg, err, errlen);
        if (r < 0) {
                if (r == -ENOMEM)
                        snprintf(err, errlen, "kubeconfig: out of memory");
                kube_config_done(&cfg);
                return r;
        }
        *ret = cfg;
        return 0;
}

int kube_config_load_kubeconfig(const char *path, struct kube_config *ret, char *err, size_t errlen) {
        char why[256], dir[PATH_MAX];
        json_t *doc;
        int r = yamlconf_load(path, &doc, why, sizeof why);
        if (r < 0) {
                snprintf(err, errlen, "kubeconfig %s: %s", path, why);
                return r;
        }
        snprintf(dir, sizeof dir, "%s", path);
        r = kube_config_parse_kubeconfig(doc, dirname(dir), NULL, ret, err, errlen);
        json_decref(doc);
        return r;
}

/* ---- in-cluster ---- */

static int sa_path(const char *root, const char *file, char **ret) {
        size_t n = root ? strlen(root) : 0;
        while (n > 0 && root[n - 1] == '/')
                n--;
        if (asprintf(ret, "%.*s/%s/%s", (int)n, root ? root : "", SA_DIR, file) < 0)
                return -ENOMEM;
        return 0;
}

static int in_cluster_server(const char *host, const char *port, struct kube_config *cfg, char *err, size_t errlen) {
        if (!host || !*host || !port || !*port)
                return errmsg_invalid(err, errlen,
                                      "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
                                      "(not running in a pod? use --kubeconfig)");
        bool v6 = strchr(host, ':') != NULL;
        if (asprintf(&cfg->server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port) < 0) {
                cfg->server = NULL;
                return -ENOMEM;
        }
        return 0;
}

static int in_cluster_files(const char *root, struct kube_config *cfg, char *err, size_t errlen) {
        _cleanup_free_ char *ns_path = NULL, *ns = NULL;
        int r = sa_path(root, "token", &cfg->token_file);
        if (r == 0)
                r = sa_path(root, "ca.crt", &cfg->ca_file);
        if (r == 0)
                r = sa_path(root, "namespace", &ns_path);
        if (r < 0)
                return r;
        r = fileio_read(cfg->token_file, KUBE_FILE_MAX, &cfg->token, NULL);
        if (r < 0)
                return errmsg_set(err, errlen, r, "in-cluster: cannot read %s: %s", cfg->token_file, strerror(-r));
        cfg->token[strcspn(cfg->token, "\r\n")] = '\0';
        if (fileio_read(ns_path, KUBE_FILE_MAX, &ns, NULL) == 0)
                ns[strcspn(ns, "\r\n")] = '\0';
        cfg->namespace = ns && *ns ? TAKE_PTR(ns) : strdup("default");
        return cfg->namespace ? 0 : -ENOMEM;
}

int kube_config_in_cluster(const char *root, const char *host, const char *port, struct kube_config *ret, char *err,
                           size_t errlen) {
        struct kube_config cfg = { 0 };
        int r = in_cluster_server(host, port, &cfg, err, errlen);
        if (r == 0)
                r = in_cluster_files(root, &cfg, err, errlen);
        if (r < 0) {
                if (r == -ENOMEM)
                        snprintf(err, errlen, "in-cluster: out of memory");
                kube_config_done(&cfg);
                return r;
        }
        *ret = cfg;
        return 0;
}
