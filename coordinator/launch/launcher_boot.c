/* launcher_boot: the join token and the cloud-init ISO (rendered, built, uploaded; the VM config attaches it), the
 * firewall security groups, and the start and bind actions (from Configured and from Started). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "launcher_internal.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cloudinit.h"
#include "fiber.h"
#include "log.h"
#include "monotime.h"
#include "quantity.h"
#include "tokens.h"
#include "yamlconf.h"

#define MIB (1024ULL * 1024ULL)
#define DEFAULT_SECRET_NAMESPACE "kube-system"

static json_t *nc_spec(const struct launcher__ctx *c) {
        return json_object_get(c->nodeclass, "spec");
}

struct launchstep_result launcher__task_wait(struct launcher__ctx *c, const char *what, const char *upid,
                                             long first_ms) {
        int r = launcher__pve_task_wait(c->pve, upid, first_ms, c->l->o.task_timeout_ms);
        return r < 0 ? launchstep_error(r, "%s: %s", what, pve_client_error(c->pve)) : launchstep_done();
}

/* ---- join token ---- */

static int token_from_secret(const json_t *secret, char token[32]) {
        const char *id = NULL;
        char value[TOKENS_SECRET_LEN + 1];
        struct kube_data_object s;
        kube_data_object_decode(secret, &s);
        const char *b64 = json_string_value(json_object_get(s.data, "token-id"));
        gnutls_datum_t in = { (unsigned char *)(uintptr_t)b64, b64 ? (unsigned)strlen(b64) : 0 }, out = { 0 };
        if (!b64 || gnutls_base64_decode2(&in, &out) < 0 || out.size != TOKENS_ID_LEN) {
                gnutls_free(out.data);
                return -EINVAL;
        }
        id = (const char *)out.data;
        int r = tokens_secret_value(secret, value);
        if (r == 0)
                snprintf(token, 32, "%.*s.%s", TOKENS_ID_LEN, id, value);
        gnutls_free(out.data);
        return r;
}

static bool token_is_claims(const json_t *secret, const char *uid) {
        const char *owner = json_string_value(json_object_get(kube_meta_of(secret).labels, TOKENS_LABEL_CLAIM_UID));
        return owner && strcmp(owner, uid) == 0;
}

/* The token of Secret bootstrap-token-<id> when it is this claim's; ERROR -ENOENT when absent, -EEXIST when
 * another claim's. */
static struct launchstep_result existing_token(struct launcher__ctx *c, const char *id, char token[32]) {
        char name[64];
        json_t *s = NULL;
        snprintf(name, sizeof name, TOKENS_SECRET_PREFIX "%s", id);
        int r = kube_get(c->kube, &kube_secrets, TOKENS_NAMESPACE, name, &s);
        if (r == 0 && !token_is_claims(s, c->uid))
                r = -EEXIST;
        else if (r == 0)
                r = token_from_secret(s, token) < 0 ? -ENOENT : 0;
        json_decref(s);
        if (r == -ENOENT || r == -EEXIST)
                return launchstep_error(r, "%s", strerror(-r));
        return r < 0 ? launchstep_error(r, "join token %s: %s", id, kube_client_error(c->kube)) : launchstep_done();
}

/* A new token with this id; ERROR -EEXIST when the Secret exists already. */
static struct launchstep_result create_token(struct launcher__ctx *c, const char *id, char token[32]) {
        char unused[TOKENS_ID_LEN + 1], secret[TOKENS_SECRET_LEN + 1];
        int r = tokens_generate(unused, secret);
        if (r < 0)
                return launchstep_error(r, "random token: %s", strerror(-r));
        json_t *obj = tokens_secret(id, secret, c->now + c->l->o.token_ttl_s * 1000, NULL, c->name, c->uid);
        r = obj ? kube_create(c->kube, &kube_secrets, TOKENS_NAMESPACE, obj, NULL) : -ENOMEM;
        json_decref(obj);
        if (r == 0)
                snprintf(token, 32, "%s.%s", id, secret);
        explicit_bzero(secret, sizeof secret);
        if (r == -EEXIST)
                return launchstep_error(r, "%s", strerror(-r));
        return r < 0 ? launchstep_error(r, "create join token: %s", kube_client_error(c->kube)) : launchstep_done();
}

static bool token_taken(const struct launchstep_result *r) {
        return launchstep_is_error(r, -ENOENT) || launchstep_is_error(r, -EEXIST);
}

/* The claim's join token "<id>.<secret>": its id is derived from the claim UID, so a token an earlier run made
 * (before a crash) is found by name: creating costs one request, finding it again one more. An id that another
 * claim's token holds (a hash collision) falls back to a random id. */
static struct launchstep_result ensure_token(struct launcher__ctx *c, char token[32]) {
        char id[TOKENS_ID_LEN + 1], spare[TOKENS_SECRET_LEN + 1];
        const char *recorded = c->st->token_id;
        struct launchstep_result res = recorded[0] ? existing_token(c, recorded, token)
                                                   : launchstep_error(-ENOENT, "no token recorded");
        if (!token_taken(&res))
                return res;
        int r = tokens_id_for(c->uid, id);
        if (r < 0)
                return launchstep_error(r, "token id: %s", strerror(-r));
        res = create_token(c, id, token);
        if (launchstep_is_error(&res, -EEXIST))
                res = existing_token(c, id, token);
        if (launchstep_is_error(&res, -EEXIST) && (r = tokens_generate(id, spare)) == 0)
                res = create_token(c, id, token);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : res;
}

/* ---- template data ---- */

static char *b64_decode(const char *b64, size_t *ret_len) {
        gnutls_datum_t in = { (unsigned char *)(uintptr_t)b64, (unsigned)strlen(b64) }, out = { 0 };
        if (gnutls_base64_decode2(&in, &out) < 0)
                return NULL;
        char *s = malloc(out.size + 1);
        if (s) {
                memcpy(s, out.data, out.size);
                s[out.size] = '\0';
                *ret_len = out.size;
        }
        gnutls_free(out.data);
        return s;
}

/* The API server and CA nodes join with, from the config's join section when it has one. */
static bool configured_join(const struct launcher__ctx *c, char **ret_server, char **ret_ca) {
        const struct config_join *j = c->l->env.cfg ? &c->l->env.cfg->join : NULL;
        if (!j || !j->api_server || !j->ca)
                return false;
        *ret_server = strdup(j->api_server);
        *ret_ca = strdup(j->ca);
        return true;
}

/* The API server and CA nodes join with: the config's join section, else kube-public/cluster-info (what kubeadm
 * discovery reads). */
static struct launchstep_result cluster_info(struct launcher__ctx *c, char **ret_server, char **ret_ca) {
        json_t *cm = NULL, *doc = NULL;
        char err[256];
        size_t len;
        if (configured_join(c, ret_server, ret_ca))
                return *ret_server && *ret_ca ? launchstep_done() : launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
        int r = kube_get(c->kube, &kube_configmaps, "kube-public", "cluster-info", &cm);
        if (r == -ENOENT)
                return launchstep_error(r, "ConfigMap kube-public/cluster-info is not there "
                                           "(k3s and Talos do not create it): "
                                           "set join.api_server and join.ca_file in the coordinator's config");
        if (r < 0)
                return launchstep_error(r,
                                        "ConfigMap kube-public/cluster-info (API server and CA for joining nodes): %s",
                                        kube_client_error(c->kube));
        struct kube_data_object info;
        kube_data_object_decode(cm, &info);
        const char *kc = json_string_value(json_object_get(info.data, "kubeconfig"));
        r = kc ? yamlconf_parse(kc, strlen(kc), &doc, err, sizeof err) : -EINVAL;
        json_t *cluster = json_object_get(json_array_get(json_object_get(doc, "clusters"), 0), "cluster");
        const char *server = json_string_value(json_object_get(cluster, "server"));
        const char *ca = json_string_value(json_object_get(cluster, "certificate-authority-data"));
        *ret_server = server ? strdup(server) : NULL;
        *ret_ca = ca ? b64_decode(ca, &len) : NULL;
        json_decref(doc);
        json_decref(cm);
        if (r == 0 && *ret_server && *ret_ca)
                return launchstep_done();
        free(*ret_server);
        free(*ret_ca);
        return launchstep_error(-EINVAL, "kube-public/cluster-info: data.kubeconfig has no server and CA");
}

static char *kubernetes_version(struct launcher__ctx *c) {
        json_t *v = NULL;
        char *out = NULL;
        if (kube_request(c->kube, "GET", "/version", NULL, NULL, &v) == 0 &&
            json_is_string(json_object_get(v, "gitVersion")))
                out = strdup(json_string_value(json_object_get(v, "gitVersion")));
        json_decref(v);
        return out;
}

/* A Secret named by a NodeClass reference ({name, namespace}); ERROR -ENOENT when ref is NULL. */
static struct launchstep_result ref_secret(struct launcher__ctx *c, const json_t *ref, json_t **ret) {
        const char *name = json_string_value(json_object_get(ref, "name"));
        const char *ns = json_string_value(json_object_get(ref, "namespace"));
        if (!name)
                return launchstep_error(-ENOENT, "no Secret named");
        int r = kube_get(c->kube, &kube_secrets, ns ? ns : DEFAULT_SECRET_NAMESPACE, name, ret);
        return r < 0 ? launchstep_error(r, "Secret %s: %s", name, kube_client_error(c->kube)) : launchstep_done();
}

/* {"key": "decoded value", ...} of a Secret's data. */
static json_t *secret_strings(const json_t *secret) {
        json_t *out = json_object(), *v;
        const char *k;
        size_t len;
        json_object_foreach(json_object_get((json_t *)secret, "data"), k, v) {
                char *s = json_is_string(v) ? b64_decode(json_string_value(v), &len) : NULL;
                if (s)
                        json_object_set_new(out, k, json_stringn(s, len));
                free(s);
        }
        return out;
}

static json_t *tag_list(const struct launcher__ctx *c) {
        int err = 0;
        char *tags = launcher_tags(c->nodepool, c->name, json_object_get(nc_spec(c), "tags"), &err), *save = NULL;
        json_t *arr = json_array();
        for (char *t = tags ? strtok_r(tags, ";", &save) : NULL; t; t = strtok_r(NULL, ";", &save))
                json_array_append_new(arr, json_string(t));
        free(tags);
        return arr;
}

struct tdata {
        char *server, *ca, *version;
        json_t *values, *labels, *taints, *tags;
};

static void tdata_done(struct tdata *t) {
        free(t->server);
        free(t->ca);
        free(t->version);
        json_decref(t->values);
        json_decref(t->labels);
        json_decref(t->taints);
        json_decref(t->tags);
}

/* The join data from the cache: false when it has none. */
static bool join_data_cached(struct launcher__ctx *c, struct tdata *t) {
        char *cached = launcher__cache_get(&c->l->cache, "join", c->now);
        json_t *j = cached ? json_loads(cached, 0, NULL) : NULL;
        const char *server = json_string_value(json_object_get(j, "server"));
        const char *ca = json_string_value(json_object_get(j, "ca"));
        const char *version = json_string_value(json_object_get(j, "version"));
        bool found = server && ca;
        free(cached);
        if (found) {
                t->server = strdup(server);
                t->ca = strdup(ca);
                t->version = version ? strdup(version) : NULL;
        }
        json_decref(j);
        return found;
}

/* The API server, CA and Kubernetes version every node joins with, from the cache or asked now. */
static struct launchstep_result join_data(struct launcher__ctx *c, struct tdata *t) {
        if (join_data_cached(c, t))
                return t->server && t->ca ? launchstep_done() : launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
        struct launchstep_result res = cluster_info(c, &t->server, &t->ca);
        if (launchstep_ok(&res)) {
                t->version = kubernetes_version(c);
                json_t *put = json_pack("{s:s, s:s, s:s?}", "server", t->server, "ca", t->ca, "version", t->version);
                char *text = put ? json_dumps(put, JSON_COMPACT) : NULL;
                if (text)
                        launcher__cache_put(&c->l->cache, "join", text, c->now);
                free(text);
                json_decref(put);
        }
        return res;
}

static struct launchstep_result tdata_load(struct launcher__ctx *c, struct tdata *t) {
        json_t *secret = NULL;
        struct launchstep_result res = join_data(c, t);
        if (!launchstep_ok(&res))
                return res;
        res = ref_secret(c, kube_nodeclass_of(c->nodeclass).values_ref, &secret);
        if (!launchstep_ok(&res) && !launchstep_is_error(&res, -ENOENT))
                return res;
        t->values = secret ? secret_strings(secret) : json_object();
        json_decref(secret);
        t->labels = launcher__wanted_labels(c, true);
        t->taints = launcher__wanted_taints(c, true);
        t->tags = tag_list(c);
        return t->values && t->labels && t->taints && t->tags ? launchstep_done()
                                                              : launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
}
/* A copy of the class's kubeReserved or systemReserved with the shape's cpu and memory where it leaves them out.
 * A value that is not an object is passed on for cloudinit_data to refuse. New reference, or NULL. */
static json_t *reserved_filled(const json_t *given, const struct resources *shape) {
        char buf[32];
        if (given && !json_is_object(given))
                return json_incref((json_t *)given);
        json_t *out = given ? json_copy((json_t *)given) : json_object();
        if (out && !json_object_get(out, "cpu"))
                json_object_set_new(out, "cpu", json_string(quantity_format_milli(shape->v[RESOURCE_CPU], buf,
                                                                                  sizeof buf)));
        if (out && !json_object_get(out, "memory"))
                json_object_set_new(out, "memory", json_string(quantity_format_bytes(shape->v[RESOURCE_MEMORY], buf,
                                                                                     sizeof buf)));
        return out;
}

/* The class's KubeletConfiguration, completed with what the shape was computed with where the class leaves it
 * out: maxPods (the kubelet's own default is 110), kubeReserved and systemReserved (its own default is none).
 * The kubelet then reports the pods and allocatable the claim promised. (evictionHard is left to the kubelet:
 * the shape assumes its default, and the flag would replace all of its default thresholds.) A value that is not
 * an object is passed on for cloudinit_data to refuse. New reference, or NULL without one. */
static json_t *kubelet_configuration(struct launcher__ctx *c) {
        json_t *kc = json_object_get(nc_spec(c), "kubeletConfiguration");
        json_t *out;
        if (!kc)
                out = json_object();
        else if (json_is_object(kc))
                out = json_copy(kc);
        else
                out = json_incref(kc);
        if (!json_is_object(out))
                return out;
        if (!json_object_get(out, "maxPods"))
                json_object_set_new(out, "maxPods", json_integer((json_int_t)c->shape.capacity.v[RESOURCE_PODS]));
        json_t *kube = json_object_get(out, "kubeReserved"), *sys = json_object_get(out, "systemReserved");
        /* set_new takes the value (a NULL fails): the second is made only when the first went in */
        if (json_object_set_new(out, "kubeReserved", reserved_filled(kube, &c->shape.kube_reserved)) < 0 ||
            json_object_set_new(out, "systemReserved", reserved_filled(sys, &c->shape.system_reserved)) < 0) {
                json_decref(out);
                return NULL;
        }
        return out;
}

static struct launchstep_result template_data(struct launcher__ctx *c, const char *token, const struct tdata *t,
                                              json_t **ret) {
        char err[512];
        const char *nc = kube_meta_of(c->nodeclass).name;
        json_t *kubelet = kubelet_configuration(c), *network = launcher__network_data(c, c->vm_config);
        if (!kubelet || !network) {
                json_decref(kubelet);
                json_decref(network);
                return launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
        }
        struct cloudinit_node n = {
                .hostname = c->name, .vmid = c->st->vmid,
                .instance_type = c->shape.name, .region = c->region, .zone = c->host, .node_class = nc,
                .cpu = c->shape.vcpus, .memory_mib = c->shape.vm_memory_bytes / MIB,
                .kubernetes_version = t->version, .root_ca = t->ca, .bootstrap_token = token, .api_server = t->server,
                .kubelet_configuration = kubelet, .labels = t->labels,
                .taints = t->taints, .values = t->values, .network = network,
        };
        const char *tags[32];
        size_t i;
        json_t *e;
        json_array_foreach(t->tags, i, e)
                if (i < 32)
                        tags[n.n_tags++] = json_string_value(e);
        n.tags = tags;
        int r = cloudinit_data(&n, ret, err, sizeof err);
        json_decref(kubelet);
        json_decref(network);
        if (r == -EINVAL)
                return launchstep_fail("InvalidCloudInit", "%s", err);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
}

/* The NodeClass's template texts ({"user-data": ..., ...} from its templatesRef Secret), or NULL for the defaults. */
static struct launchstep_result template_texts(struct launcher__ctx *c, json_t **ret) {
        json_t *secret = NULL;
        struct launchstep_result res = ref_secret(c, kube_nodeclass_of(c->nodeclass).templates_ref, &secret);
        if (!launchstep_ok(&res) && !launchstep_is_error(&res, -ENOENT))
                return res;
        bool found = secret != NULL;
        *ret = found ? secret_strings(secret) : NULL;
        json_decref(secret);
        return found && !*ret ? launchstep_error(-ENOMEM, "%s", strerror(ENOMEM)) : launchstep_done();
}

/* Every file's text, length-prefixed ("-" for a default): what tells two template sets apart. */
static char *templates_key(const struct cloudinit_templates *t) {
        size_t len = 1;
        for (int f = 0; f < CLOUDINIT_N_FILES; f++)
                len += 24 + (t->text[f] ? strlen(t->text[f]) : 0);
        char *key = malloc(len), *p = key;
        for (int f = 0; key && f < CLOUDINIT_N_FILES; f++)
                p += t->text[f] ? sprintf(p, "%zu:%s", strlen(t->text[f]), t->text[f]) : sprintf(p, "-");
        return key;
}

/* The set of key in the kept ones, or NULL. */
static const struct cloudinit_set *kept_set(const struct launcher *l, const char *key) {
        for (size_t i = 0; i < LAUNCHER__TEMPLATE_SETS; i++)
                if (l->templates[i].key && strcmp(l->templates[i].key, key) == 0)
                        return l->templates[i].set;
        return NULL;
}

/* The parsed set of these templates, parsed now unless one of the last LAUNCHER__TEMPLATE_SETS was these. Owned by
 * the launcher; call with iso_mu held, and use it before letting go. */
static struct launchstep_result template_set(struct launcher__ctx *c, const json_t *texts,
                                             const struct cloudinit_set **ret) {
        struct launcher *l = c->l;
        struct cloudinit_templates t = { { 0 } };
        struct cloudinit_set *set = NULL;
        char err[512];
        for (int f = 0; f < CLOUDINIT_N_FILES; f++)
                t.text[f] = json_string_value(json_object_get(texts, cloudinit_file_name((enum cloudinit_file)f)));
        char *key = templates_key(&t);
        if (!key)
                return launchstep_error(-ENOMEM, "%s", strerror(ENOMEM));
        if ((*ret = kept_set(l, key))) {
                free(key);
                return launchstep_done();
        }
        int r = cloudinit_set_new(&t, &set, err, sizeof err);
        if (r < 0) {
                free(key);
                return r == -EINVAL ? launchstep_fail("InvalidCloudInit", "templates: %s", err)
                                    : launchstep_error(r, "%s", strerror(-r));
        }
        struct launcher__templates *e = &l->templates[l->next_templates++ % LAUNCHER__TEMPLATE_SETS];
        free(e->key);
        cloudinit_set_free(e->set);
        *e = (struct launcher__templates){ .key = key, .set = set };
        *ret = set;
        return launchstep_done();
}

static void pause_task(void *data) {
        (void)data;
        fiber_sleep_ms(1);
}

/* Render the templates (the launch thread's other tasks wait on iso_mu only while this runs: no I/O), then build
 * the ISO from them while the other tasks run. */
static struct launchstep_result render_iso(struct launcher__ctx *c, const json_t *texts, json_t *data,
                                           unsigned char **ret_img, size_t *ret_len) {
        const struct cloudinit_set *set = NULL;
        struct cloudinit_files files = { { 0 } };
        char err[512] = "";
        int r;
        pthread_mutex_lock(&c->l->iso_mu);
        struct launchstep_result res = template_set(c, texts, &set);
        if (launchstep_ok(&res) && (r = cloudinit_render(set, data, &files, err, sizeof err)) < 0)
                res = launchstep_fail("InvalidCloudInit", "%s", err);
        pthread_mutex_unlock(&c->l->iso_mu);
        if (launchstep_ok(&res) &&
            (r = cloudinit_iso_build(&files, pause_task, NULL, ret_img, ret_len, err, sizeof err)) < 0)
                res = launchstep_error(r, "cloud-init ISO: %s", err);
        cloudinit_files_done(&files);
        return res;
}

/* The rendered user-data, meta-data and network-config as a cidata ISO image. */
static struct launchstep_result build_iso(struct launcher__ctx *c, const char *token, unsigned char **ret_img,
                                          size_t *ret_len) {
        struct tdata t = { 0 };
        json_t *data = NULL, *texts = NULL;
        struct launchstep_result res = tdata_load(c, &t);
        if (launchstep_ok(&res))
                res = template_data(c, token, &t, &data);
        if (launchstep_ok(&res))
                res = template_texts(c, &texts);
        if (launchstep_ok(&res))
                res = render_iso(c, texts, data, ret_img, ret_len);
        json_decref(texts);
        json_decref(data);
        tdata_done(&t);
        return res;
}

/* ---- upload and attach ---- */

static bool has_content(const char *list, const char *what) {
        size_t n = strlen(what);
        for (const char *s = list; s && *s;) {
                size_t len = strcspn(s, ",");
                if (len == n && strncmp(s, what, n) == 0)
                        return true;
                s += len + (s[len] ? 1 : 0);
        }
        return false;
}

/* The host's storage for ISO images: "local" when it holds ISOs, else the first one that does. */
static struct launchstep_result iso_storage_ask(struct launcher__ctx *c, char storage[64]) {
        json_t *list = NULL, *e;
        size_t i;
        int r = pve_cluster_resources(c->pve, "storage", &list);
        if (r < 0)
                return launchstep_error(r, "storages: %s", pve_client_error(c->pve));
        storage[0] = '\0';
        json_array_foreach(list, i, e) {
                const char *node = json_string_value(json_object_get(e, "node"));
                const char *name = json_string_value(json_object_get(e, "storage"));
                if (!node || !name || strcmp(node, c->host) != 0 ||
                    !has_content(json_string_value(json_object_get(e, "content")), "iso"))
                        continue;
                if (!storage[0] || strcmp(name, "local") == 0)
                        snprintf(storage, 64, "%s", name);
        }
        json_decref(list);
        return storage[0] ? launchstep_done()
                          : launchstep_fail("NoISOStorage", "host %s has no storage for ISO images", c->host);
}

static void iso_storage_key(const struct launcher__ctx *c, char *key, size_t len) {
        snprintf(key, len, "isostorage/%s/%s", c->region, c->host);
}

static struct launchstep_result iso_storage(struct launcher__ctx *c, char storage[64]) {
        char key[300];
        iso_storage_key(c, key, sizeof key);
        char *cached = launcher__cache_get(&c->l->cache, key, c->now);
        if (cached && strlen(cached) < 64) {
                snprintf(storage, 64, "%s", cached);
                free(cached);
                return launchstep_done();
        }
        free(cached);
        struct launchstep_result res = iso_storage_ask(c, storage);
        if (launchstep_ok(&res))
                launcher__cache_put(&c->l->cache, key, storage, c->now);
        return res;
}

static struct launchstep_result upload_once(struct launcher__ctx *c, const char *storage, const char *file,
                                            const unsigned char *img, size_t len) {
        char *upid = NULL;
        int r = pve_storage_upload(c->pve, c->host, storage, "iso", file, img, len, &upid);
        if (r < 0)
                return launchstep_error(r, "upload %s: %s", file, pve_client_error(c->pve));
        struct launchstep_result res = launcher__task_wait(c, "upload", upid, LAUNCHER__POLL_SOON_MS);
        free(upid);
        return res;
}

/* Upload the image; when that fails (an older upload of the same name left by a crashed run, say), delete the
 * old file and upload once more. A failed upload also forgets the cached storage. */
static struct launchstep_result upload_iso(struct launcher__ctx *c, const char *storage, const char *file,
                                           const unsigned char *img, size_t len) {
        char volume[LAUNCHER__VOLUME_MAX], key[300], err[NODECLAIM_MESSAGE_MAX];
        struct launchstep_result res = upload_once(c, storage, file, img, len);
        if (launchstep_ok(&res))
                return res;
        iso_storage_key(c, key, sizeof key);
        launcher__cache_drop(&c->l->cache, key);
        log_info("launcher: NodeClaim %s: upload of %s failed (%s); deleting an older copy and trying again", c->name,
                 file, res.message);
        snprintf(volume, sizeof volume, "%s:iso/%s", storage, file);
        int r = launcher__delete_iso(c->pve, c->host, volume, c->l->o.task_timeout_ms, err, sizeof err);
        return r < 0 ? launchstep_error(r, "%s", err) : upload_once(c, storage, file, img, len);
}

/* The file name of the claim's cloud-init ISO. */
static void iso_file(const struct launcher__ctx *c, char file[128]) {
        snprintf(file, 128, "pvescale-%.80s-%.8s.iso", c->name, c->uid);
}

struct launchstep_result launcher__iso_volume(struct launcher__ctx *c, char volume[LAUNCHER__VOLUME_MAX]) {
        char storage[64], file[128];
        struct launchstep_result res = iso_storage(c, storage);
        iso_file(c, file);
        if (launchstep_ok(&res))
                snprintf(volume, LAUNCHER__VOLUME_MAX, "%.63s:iso/%.127s", storage, file);
        return res;
}

/* The cloud-init ISO of the claim, uploaded: its volume ("storage:iso/file") in volume. */
static struct launchstep_result deliver_iso(struct launcher__ctx *c, const char *token,
                                            char volume[LAUNCHER__VOLUME_MAX]) {
        unsigned char *img = NULL;
        size_t len = 0;
        char storage[64], file[128];
        struct launchstep_result res = build_iso(c, token, &img, &len);
        if (launchstep_ok(&res))
                res = iso_storage(c, storage);
        if (launchstep_ok(&res)) {
                iso_file(c, file);
                res = upload_iso(c, storage, file, img, len);
                if (launchstep_ok(&res))
                        snprintf(volume, LAUNCHER__VOLUME_MAX, "%s:iso/%s", storage, file);
        }
        free(img);
        return res;
}

bool launcher__joins_by_cdrom(const struct launcher__ctx *c) {
        const char *type = kube_nodeclass_of(c->nodeclass).metadata_type;
        return type && strcmp(type, "cdrom") == 0;
}

struct launchstep_result launcher__cloudinit_deliver(struct launcher__ctx *c, char volume[LAUNCHER__VOLUME_MAX],
                                                     char token_id[TOKENS_ID_LEN + 1]) {
        char token[32];
        volume[0] = token_id[0] = '\0';
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (!launchstep_ok(&res) || !launcher__joins_by_cdrom(c))
                return res; /* without a CD-ROM the template joins by itself */
        res = launcher__need_shape(c);
        if (launchstep_ok(&res))
                res = launcher__need_pool(c);
        if (launchstep_ok(&res))
                res = ensure_token(c, token);
        if (launchstep_ok(&res)) {
                snprintf(token_id, TOKENS_ID_LEN + 1, "%.*s", TOKENS_ID_LEN, token);
                res = deliver_iso(c, token, volume);
        }
        explicit_bzero(token, sizeof token);
        return res;
}

/* ---- firewall ---- */

static bool has_group_rule(const json_t *rules, const char *group, const char *iface) {
        size_t i;
        json_t *e;
        json_array_foreach(rules, i, e) {
                const char *t = json_string_value(json_object_get(e, "type"));
                const char *a = json_string_value(json_object_get(e, "action"));
                const char *f = json_string_value(json_object_get(e, "iface"));
                if (t && a && strcmp(t, "group") == 0 && strcmp(a, group) == 0 && f && strcmp(f, iface) == 0)
                        return true;
        }
        return false;
}

/* The rule of each group not yet on the VM; *ret_added counts them. */
static int add_group_rules(struct pve_client *pve, const char *host, uint32_t vmid, const json_t *rules,
                           const json_t *groups, unsigned *ret_added) {
        json_t *g;
        size_t i;
        int r = 0;
        json_array_foreach(groups, i, g) {
                const char *name = json_string_value(json_object_get(g, "name"));
                const char *iface = json_string_value(json_object_get(g, "interface"));
                struct pve_firewall_rule rule = { .type = "group", .action = name, .iface = iface ? iface : "net0",
                                                  .enable = true, .comment = "pvescale" };
                if (r == 0 && name && !has_group_rule(rules, name, rule.iface)) {
                        r = pve_vm_firewall_rule_add(pve, host, vmid, &rule);
                        *ret_added += r == 0;
                }
        }
        return r;
}

int launcher__firewall_groups(struct pve_client *pve, const char *host, uint32_t vmid, const json_t *groups,
                              bool always_enable, unsigned *ret_added, char *err, size_t errlen) {
        struct pve_params p = PVE_PARAMS_INIT;
        json_t *rules = NULL;
        unsigned added = 0;
        int r = pve_vm_firewall_rules(pve, host, vmid, &rules);
        if (r == 0)
                r = add_group_rules(pve, host, vmid, rules, groups, &added);
        json_decref(rules);
        if (r == 0 && (always_enable || added)) {
                pve_params_add_bool(&p, "enable", true);
                r = pve_vm_firewall_options_set(pve, host, vmid, &p);
                pve_params_done(&p);
        }
        if (r < 0)
                snprintf(err, errlen, "firewall of VM %u: %s", vmid, pve_client_error(pve));
        if (ret_added)
                *ret_added = added;
        return r;
}

struct launchstep_result launcher__firewall_apply(struct launcher__ctx *c, uint32_t vmid) {
        char err[512];
        struct launchstep_result res = launcher__need_nodeclass(c);
        if (!launchstep_ok(&res))
                return res;
        json_t *groups = json_object_get(nc_spec(c), "securityGroups");
        if (json_array_size(groups) == 0)
                return launchstep_done();
        int r = launcher__firewall_groups(c->pve, c->host, vmid, groups, true, NULL, err, sizeof err);
        return r < 0 ? launchstep_error(r, "%s", err) : launchstep_done();
}

/* ---- start and bind ---- */

struct launchstep_result launcher__vm_running(struct launcher__ctx *c, uint32_t vmid, bool *ret_running) {
        int r = pve_vm_running(c->pve, c->host, vmid, ret_running);
        return r < 0 ? launchstep_error(r, "status of VM %u: %s", vmid, pve_client_error(c->pve)) : launchstep_done();
}

/* The start call is being made: how long since the claim's first pending pod, and how much of it was ours. */
static void report_start_latency(struct launcher__ctx *c) {
        const struct launcher_env *e = &c->l->env;
        struct latency_waits extra;
        struct latency_report rep;
        if (!c->timed)
                return;
        latency_waits_since(&c->waits0, &extra);
        c->timed = false; /* counted now; the reconcile's remaining waits go to nobody */
        if (latency_finish(e->latency, c->name, monotime_ms(), &extra, &rep) < 0)
                return;
        int64_t own = rep.total_ms > rep.api_ms ? rep.total_ms - rep.api_ms : 0;
        log_info("launcher: NodeClaim %s: start %lld ms after its first pending pod (%lld ms waiting for API "
                 "answers, %lld ms own, of which %lld ms runnable waiting for a CPU and %lld ms before the launcher "
                 "took it up)", c->name, (long long)rep.total_ms, (long long)rep.api_ms, (long long)own,
                 (long long)rep.cpu_ms, (long long)rep.handoff_own_ms);
        stats_observe(e->stats, STATS_H_START, (double)rep.total_ms / 1000);
        stats_observe(e->stats, STATS_H_START_OWN, (double)own / 1000);
}

/* bind answered -EEXIST or -ENOENT: is the reservation already ours, still there, or gone? */
static struct launchstep_result bind_check(struct launcher__ctx *c, const char *id, uint32_t vmid, int bind_err) {
        json_t *res = NULL;
        int r = agents_reservation_get(c->agent, id, &res);
        json_int_t bound = json_integer_value(json_object_get(res, "vmid"));
        json_decref(res);
        if (r == -ENOENT)
                return launchstep_fail("ReservationLost", "reservation %s on %s expired or was released", id,
                                       c->host);
        if (r < 0)
                return launchstep_error(r, "reservation %s: %s", id, agents_client_error(c->agent));
        switch (launchstep_bind_check(bind_err, bound, vmid)) {
        case LAUNCHSTEP_BIND_DONE:
                return launchstep_done();
        case LAUNCHSTEP_BIND_TAKEN:
                return launchstep_fail("ReservationLost", "reservation %s is bound to VM %lld", id, (long long)bound);
        default:
                return launchstep_wait(LAUNCHSTEP_BIND_RETRY_MS);
        }
}

static struct launchstep_result bind_to(struct launcher__ctx *c, uint32_t vmid) {
        const char *id = c->st->reservation_id;
        if (!c->agent)
                return launchstep_error(-ENOTCONN, "no agent for host %s to bind reservation %s", c->host, id);
        int r = agents_bind(c->agent, id, vmid, NULL);
        if (r == -EEXIST || r == -ENOENT)
                return bind_check(c, id, vmid, r);
        if (r < 0)
                return launchstep_error(r, "bind %s to VM %u: %s", id, vmid, agents_client_error(c->agent));
        return launchstep_done();
}

struct launchstep_result launcher__bind_reservation(struct launcher__ctx *c) {
        uint32_t vmid = c->st->vmid;
        if (c->st->reservation != NODECLAIM_RESERVATION_AGENT || !c->st->reservation_id[0] || c->bound_vmid == vmid)
                return launchstep_done();
        struct launchstep_result res = bind_to(c, vmid);
        if (launchstep_ok(&res))
                c->bound_vmid = vmid;
        return res;
}

/* Bound: the (node pool, host) launches again, and the Launched record (written by the step table) says so. */
static struct launchstep_result launched(struct launcher__ctx *c) {
        launcher__backoff_clear(c->l, c->nodepool, c->host);
        int r = launchstep_launched(c->st);
        return r < 0 ? launchstep_error(r, "%s", strerror(-r)) : launchstep_done();
}

/* Bind (agent mode), then Launched. */
struct launchstep_result launcher__bind(struct launcher__ctx *c) {
        struct launchstep_result res = launcher__bind_reservation(c);
        return launchstep_ok(&res) ? launched(c) : res;
}

static struct launchstep_result start_vm(struct launcher__ctx *c, uint32_t vmid) {
        char *upid = NULL;
        report_start_latency(c);
        int r = pve_vm_action(c->pve, c->host, vmid, "start", &upid);
        if (r < 0)
                return launchstep_error(r, "start VM %u: %s", vmid, pve_client_error(c->pve));
        struct launchstep_result res = launcher__task_wait(c, "start", upid, LAUNCHER__POLL_START_MS);
        free(upid);
        return res;
}

/* Start the VM, then bind its reservation at once: one status write (Launched) for both; Started is recorded
 * alone only when the bind has to wait. A rerun finds the VM running and does not start it twice. */
struct launchstep_result launcher__start(struct launcher__ctx *c) {
        uint32_t vmid = c->st->vmid;
        bool running = false;
        struct launchstep_result res = c->vm_fresh ? launchstep_done() : launcher__vm_running(c, vmid, &running);
        if (launchstep_ok(&res) && !running) /* fresh: never started */
                res = start_vm(c, vmid);
        if (!launchstep_ok(&res))
                return res;
        log_info("launcher: NodeClaim %s: VM %u started on %s", c->name, vmid, c->host);
        res = launcher__bind_reservation(c);
        if (res.kind != LAUNCHSTEP_DONE && res.kind != LAUNCHSTEP_WAIT)
                return res;
        c->st->started_ms = c->now;
        if (res.kind == LAUNCHSTEP_WAIT)
                return launchstep_then(launcher__record(c, NODECLAIM_STEP_STARTED), res);
        return launched(c);
}
