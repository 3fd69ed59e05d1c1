/* simulate_json: pure conversion of Kubernetes objects (jansson) into simulation input: Pod, Node,
 * NodeClaim, NodePool, DaemonSet, ProxmoxNodeClass, and the host room reported by agents. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "simulate_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errmsg.h"
#include "quantity.h"

#define PATH_MAX_LEN 192

struct jp {
        struct sim_input *in;
        char *err;
        size_t errlen;
};

static int bad(struct jp *p, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(struct jp *p, const char *path, const char *fmt, ...) {
        va_list ap;
        snprintf(p->err, p->errlen, "%s: ", path);
        va_start(ap, fmt);
        int r = errmsg_vappend(p->err, p->errlen, -EINVAL, fmt, ap);
        va_end(ap);
        return r;
}

static int oom(struct jp *p) {
        return errmsg_set(p->err, p->errlen, -ENOMEM, "out of memory");
}

static void append(char *buf, size_t *n, const char *s) {
        for (; *s && *n + 1 < PATH_MAX_LEN; s++)
                buf[(*n)++] = *s;
        buf[*n] = '\0';
}

/* path + "." + key into buf; buf may be path itself. */
static const char *sub(char *buf, const char *path, const char *key) {
        char tmp[PATH_MAX_LEN];
        size_t n = 0;
        append(tmp, &n, path);
        if (*path)
                append(tmp, &n, ".");
        append(tmp, &n, key);
        memcpy(buf, tmp, n + 1);
        return buf;
}

/* path + "[i]" into buf; buf may be path itself. */
static const char *idx(char *buf, const char *path, size_t i) {
        char tmp[PATH_MAX_LEN], num[24];
        size_t n = 0;
        snprintf(num, sizeof num, "[%zu]", i);
        append(tmp, &n, path);
        append(tmp, &n, num);
        memcpy(buf, tmp, n + 1);
        return buf;
}

static void *alloc(struct jp *p, size_t n, size_t size) {
        return simulate_alloc(p->in, (n ? n : 1) * size);
}

/* Optional member of a type: NULL when absent or null; -EINVAL for another type. */
static int member(struct jp *p, const json_t *obj, const char *key, json_type type, const char *path,
                  const json_t **ret) {
        const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
        char b[PATH_MAX_LEN];
        *ret = NULL;
        if (!v || json_is_null(v))
                return 0;
        if (json_typeof(v) != type && !(type == JSON_TRUE && json_is_boolean(v)))
                return bad(p, sub(b, path, key), "wrong type");
        *ret = v;
        return 0;
}

static int get_str(struct jp *p, const json_t *obj, const char *key, const char *path, const char **ret) {
        const json_t *v;
        int r = member(p, obj, key, JSON_STRING, path, &v);
        if (r < 0)
                return r;
        *ret = v ? simulate_strdup(p->in, json_string_value(v)) : NULL;
        return v && !*ret ? oom(p) : 0;
}

static int get_int(struct jp *p, const json_t *obj, const char *key, const char *path, int64_t *ret) {
        const json_t *v;
        int r = member(p, obj, key, JSON_INTEGER, path, &v);
        if (r >= 0 && v)
                *ret = json_integer_value(v);
        return r;
}

/* ---- labels, quantities, requirements, selectors ---- */

static int string_map(struct jp *p, const json_t *obj, const char *path, struct sim_label **ret, size_t *ret_n) {
        const char *key;
        json_t *v;
        char b[PATH_MAX_LEN];
        size_t n = 0;
        *ret = NULL;
        *ret_n = 0;
        if (!obj)
                return 0;
        struct sim_label *l = alloc(p, json_object_size(obj), sizeof *l);
        if (!l)
                return oom(p);
        json_object_foreach((json_t *)obj, key, v) {
                if (!json_is_string(v))
                        return bad(p, sub(b, path, key), "a string is required");
                l[n].key = simulate_strdup(p->in, key);
                l[n].value = simulate_strdup(p->in, json_string_value(v));
                if (!l[n].key || !l[n].value)
                        return oom(p);
                n++;
        }
        *ret = l;
        *ret_n = n;
        return 0;
}

static int labels_at(struct jp *p, const json_t *obj, const char *key, const char *path, struct sim_label **ret,
                     size_t *ret_n) {
        const json_t *m;
        char b[PATH_MAX_LEN];
        int r = member(p, obj, key, JSON_OBJECT, path, &m);
        return r < 0 ? r : string_map(p, m, sub(b, path, key), ret, ret_n);
}

static int quantity_of(struct jp *p, const json_t *v, enum resource_kind kind, const char *path, int64_t *ret) {
        char buf[64];
        const char *text = buf;
        if (json_is_string(v))
                text = json_string_value(v);
        else if (json_is_integer(v))
                snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
                snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
        else
                return bad(p, path, "a quantity is required");
        int r = quantity_parse(text, kind == RESOURCE_CPU ? QUANTITY_MILLI : QUANTITY_UNITS, ret);
        if (r < 0 || *ret < 0)
                return bad(p, path, "invalid quantity \"%s\"", text);
        return 0;
}

/* A resource list; unknown resources set *ret_extended (when given) or are ignored. */
static int resource_list(struct jp *p, const json_t *obj, const char *path, struct resources *out, bool *present,
                         const char **ret_extended) {
        const char *key;
        json_t *v;
        char b[PATH_MAX_LEN];
        if (!obj)
                return 0;
        if (!json_is_object(obj))
                return bad(p, path, "an object is required");
        json_object_foreach((json_t *)obj, key, v) {
                int k = resources_kind_from_name(key);
                int64_t q;
                if (k < 0)
                        k = simulate_extended_kind(p->in, key, false); /* one a node class provides */
                if (quantity_of(p, v, k < 0 ? RESOURCE_MEMORY : (enum resource_kind)k, sub(b, path, key), &q) < 0)
                        return -EINVAL;
                if (k < 0) {
                        if (ret_extended && q > 0 && !*ret_extended)
                                *ret_extended = simulate_strdup(p->in, key);
                        continue;
                }
                out->v[k] = q;
                if (present)
                        present[k] = true;
        }
        return 0;
}

static int parse_op(const char *s, bool allow_numeric, enum sim_op *ret) {
        static const char *const OPS[] = { "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt" };
        for (int i = 0; i < (allow_numeric ? 6 : 4); i++)
                if (s && strcmp(s, OPS[i]) == 0) {
                        *ret = (enum sim_op)i;
                        return 0;
                }
        return -EINVAL;
}

static int requirement(struct jp *p, const json_t *o, const char *path, bool numeric, const char *key_field,
                       struct sim_requirement *out) {
        const json_t *vals;
        const char *op;
        char b[PATH_MAX_LEN];
        if (!json_is_object(o))
                return bad(p, path, "an object is required");
        if (get_str(p, o, key_field, path, &out->key) < 0 || get_str(p, o, "operator", path, &op) < 0 ||
            member(p, o, "values", JSON_ARRAY, path, &vals) < 0)
                return -EINVAL;
        if (!out->key || !*out->key)
                return bad(p, sub(b, path, key_field), "required");
        if (parse_op(op, numeric, &out->op) < 0)
                return bad(p, sub(b, path, "operator"), "unknown operator \"%s\"", op ? op : "");
        size_t n = vals ? json_array_size(vals) : 0;
        bool needs = out->op == SIM_OP_IN || out->op == SIM_OP_NOT_IN;
        if ((needs && n == 0) || (!needs && out->op <= SIM_OP_DOES_NOT_EXIST && n) || (out->op >= SIM_OP_GT && n != 1))
                return bad(p, sub(b, path, "values"), "wrong number of values for %s", op);
        out->values = alloc(p, n, sizeof(char *));
        if (!out->values)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                json_t *v = json_array_get(vals, i);
                if (!json_is_string(v))
                        return bad(p, idx(b, sub(b, path, "values"), i), "a string is required");
                if (!(out->values[i] = simulate_strdup(p->in, json_string_value(v))))
                        return oom(p);
        }
        out->n_values = n;
        return 0;
}

static int requirements(struct jp *p, const json_t *arr, const char *path, bool numeric, const char *key_field,
                        struct sim_requirement **ret, size_t *ret_n) {
        char b[PATH_MAX_LEN];
        size_t n = arr ? json_array_size(arr) : 0;
        struct sim_requirement *r = alloc(p, n, sizeof *r);
        if (!r)
                return oom(p);
        for (size_t i = 0; i < n; i++)
                if (requirement(p, json_array_get(arr, i), idx(b, path, i), numeric, key_field, &r[i]) < 0)
                        return -EINVAL;
        *ret = r;
        *ret_n = n;
        return 0;
}

static int selector(struct jp *p, const json_t *o, const char *path, struct sim_selector *out) {
        const json_t *exprs;
        char b[PATH_MAX_LEN];
        *out = (struct sim_selector){ .match_none = o == NULL };
        if (!o)
                return 0;
        if (!json_is_object(o))
                return bad(p, path, "an object is required");
        if (labels_at(p, o, "matchLabels", path, &out->match_labels, &out->n_match_labels) < 0 ||
            member(p, o, "matchExpressions", JSON_ARRAY, path, &exprs) < 0)
                return -EINVAL;
        return requirements(p, exprs, sub(b, path, "matchExpressions"), false, "key", &out->exprs, &out->n_exprs);
}

/* ---- pod spec ---- */

/* Requests of one container: requests, else limits (the API server's default). */
static int container_requests(struct jp *p, const json_t *ctr, const char *path, struct resources *out,
                              const char **ext) {
        const json_t *res, *req = NULL, *lim = NULL;
        bool present[RESOURCE_COUNT] = { false };
        struct resources limits = { 0 };
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        *out = (struct resources){ 0 };
        if (member(p, ctr, "resources", JSON_OBJECT, path, &res) < 0 ||
            member(p, res, "requests", JSON_OBJECT, sub(b, path, "resources"), &req) < 0 ||
            member(p, res, "limits", JSON_OBJECT, sub(b, path, "resources"), &lim) < 0)
                return -EINVAL;
        sub(b, path, "resources");
        if (resource_list(p, req, sub(b2, b, "requests"), out, present, ext) < 0 ||
            resource_list(p, lim, sub(b2, b, "limits"), &limits, NULL, ext) < 0)
                return -EINVAL;
        for (int k = 0; k < RESOURCE_COUNT; k++)
                if (!present[k])
                        out->v[k] = limits.v[k];
        return 0;
}

/* A host port's protocol as the bits above the port number: 0 for TCP (the default), 1 for UDP, 2 for SCTP. */
static uint32_t protocol_code(const char *proto) {
        if (proto && strcmp(proto, "UDP") == 0)
                return 1;
        if (proto && strcmp(proto, "SCTP") == 0)
                return 2;
        return 0;
}

static int container_ports(struct jp *p, const json_t *ctr, const char *path, bool host_network, struct sim_pod *pod) {
        const json_t *ports;
        char b[PATH_MAX_LEN];
        if (member(p, ctr, "ports", JSON_ARRAY, path, &ports) < 0)
                return -EINVAL;
        for (size_t i = 0; ports && i < json_array_size(ports); i++) {
                const json_t *port = json_array_get(ports, i);
                int64_t hp = 0;
                const char *proto = NULL;
                const char *field = host_network ? "containerPort" : "hostPort";
                if (get_int(p, port, field, idx(b, sub(b, path, "ports"), i), &hp) < 0 ||
                    get_str(p, port, "protocol", b, &proto) < 0)
                        return -EINVAL;
                if (hp <= 0 || hp > 65535)
                        continue;
                uint32_t code = (uint32_t)hp | protocol_code(proto) << 16;
                uint32_t *n = alloc(p, pod->n_host_ports + 1, sizeof *n);
                if (!n)
                        return oom(p);
                if (pod->n_host_ports)
                        memcpy(n, pod->host_ports, pod->n_host_ports * sizeof *n);
                n[pod->n_host_ports++] = code;
                pod->host_ports = n;
        }
        return 0;
}

static int containers(struct jp *p, const json_t *spec, const char *path, bool host_network, struct sim_pod *pod,
                      struct resources *sum, const char **ext) {
        const json_t *arr;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        if (member(p, spec, "containers", JSON_ARRAY, path, &arr) < 0)
                return -EINVAL;
        for (size_t i = 0; arr && i < json_array_size(arr); i++) {
                struct resources r;
                const json_t *ctr = json_array_get(arr, i);
                idx(b2, sub(b, path, "containers"), i);
                if (!json_is_object(ctr))
                        return bad(p, b2, "an object is required");
                if (container_requests(p, ctr, b2, &r, ext) < 0 || container_ports(p, ctr, b2, host_network, pod) < 0)
                        return -EINVAL;
                resources_add(sum, &r);
        }
        return 0;
}

/* Init containers run one at a time before the app containers; restartable ones (sidecars) keep running. */
static int init_containers(struct jp *p, const json_t *spec, const char *path, bool host_network, struct sim_pod *pod,
                           struct resources *init_max, struct resources *sidecars, const char **ext) {
        const json_t *arr;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        if (member(p, spec, "initContainers", JSON_ARRAY, path, &arr) < 0)
                return -EINVAL;
        for (size_t i = 0; arr && i < json_array_size(arr); i++) {
                const json_t *ctr = json_array_get(arr, i);
                const char *restart = NULL;
                struct resources r, during;
                idx(b2, sub(b, path, "initContainers"), i);
                if (!json_is_object(ctr))
                        return bad(p, b2, "an object is required");
                if (container_requests(p, ctr, b2, &r, ext) < 0 || get_str(p, ctr, "restartPolicy", b2, &restart) < 0 ||
                    container_ports(p, ctr, b2, host_network, pod) < 0)
                        return -EINVAL;
                during = *sidecars;
                resources_add(&during, &r);
                resources_max(init_max, &during);
                if (restart && strcmp(restart, "Always") == 0)
                        resources_add(sidecars, &r);
        }
        return 0;
}

static int pod_requests(struct jp *p, const json_t *spec, const char *path, struct sim_pod *pod) {
        struct resources sum = { 0 }, init_max = { 0 }, sidecars = { 0 }, overhead = { 0 };
        const json_t *over, *hn;
        const char *ext = NULL;
        char b[PATH_MAX_LEN];
        if (member(p, spec, "hostNetwork", JSON_TRUE, path, &hn) < 0)
                return -EINVAL;
        bool host_network = hn && json_is_true(hn);
        if (containers(p, spec, path, host_network, pod, &sum, &ext) < 0 ||
            init_containers(p, spec, path, host_network, pod, &init_max, &sidecars, &ext) < 0 ||
            member(p, spec, "overhead", JSON_OBJECT, path, &over) < 0 ||
            resource_list(p, over, sub(b, path, "overhead"), &overhead, NULL, &ext) < 0)
                return -EINVAL;
        resources_add(&sum, &sidecars);
        resources_max(&sum, &init_max);
        resources_add(&sum, &overhead);
        sum.v[RESOURCE_PODS] = 1;
        pod->requests = sum;
        if (ext) {
                char msg[200];
                snprintf(msg, sizeof msg, "requests extended resource %s, which no instance type provides", ext);
                pod->unschedulable_reason = simulate_strdup(p->in, msg);
        }
        return 0;
}

static int node_terms(struct jp *p, const json_t *affinity, const char *path, struct sim_pod *pod) {
        const json_t *na, *req, *terms;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN], b3[PATH_MAX_LEN];
        if (member(p, affinity, "nodeAffinity", JSON_OBJECT, path, &na) < 0)
                return -EINVAL;
        sub(b, path, "nodeAffinity");
        if (member(p, na, "requiredDuringSchedulingIgnoredDuringExecution", JSON_OBJECT, b, &req) < 0)
                return -EINVAL;
        sub(b2, b, "requiredDuringSchedulingIgnoredDuringExecution");
        if (member(p, req, "nodeSelectorTerms", JSON_ARRAY, b2, &terms) < 0)
                return -EINVAL;
        size_t n = terms ? json_array_size(terms) : 0;
        pod->affinity = alloc(p, n, sizeof *pod->affinity);
        if (!pod->affinity)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *t = json_array_get(terms, i), *ex, *mf;
                struct sim_node_term *out = &pod->affinity[i];
                struct sim_requirement *a, *f;
                size_t na_, nf;
                idx(b3, sub(b, b2, "nodeSelectorTerms"), i);
                if (member(p, t, "matchExpressions", JSON_ARRAY, b3, &ex) < 0 ||
                    member(p, t, "matchFields", JSON_ARRAY, b3, &mf) < 0 ||
                    requirements(p, ex, sub(b, b3, "matchExpressions"), true, "key", &a, &na_) < 0 ||
                    requirements(p, mf, sub(b, b3, "matchFields"), true, "key", &f, &nf) < 0)
                        return -EINVAL;
                for (size_t k = 0; k < nf; k++) /* metadata.name is the node name: our hostname label */
                        f[k].key = SIM_LABEL_HOSTNAME;
                out->reqs = alloc(p, na_ + nf, sizeof *out->reqs);
                if (!out->reqs)
                        return oom(p);
                memcpy(out->reqs, a, na_ * sizeof *a);
                memcpy(out->reqs + na_, f, nf * sizeof *f);
                out->n_reqs = na_ + nf;
        }
        pod->n_affinity = n;
        return 0;
}

static int pod_terms(struct jp *p, const json_t *affinity, const char *kind, const char *path,
                     struct sim_pod_term **ret, size_t *ret_n) {
        const json_t *k, *req;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN], b3[PATH_MAX_LEN];
        *ret = NULL;
        *ret_n = 0;
        if (member(p, affinity, kind, JSON_OBJECT, path, &k) < 0 ||
            member(p, k, "requiredDuringSchedulingIgnoredDuringExecution", JSON_ARRAY, sub(b, path, kind), &req) < 0)
                return -EINVAL;
        size_t n = req ? json_array_size(req) : 0;
        struct sim_pod_term *t = alloc(p, n, sizeof *t);
        if (!t)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(req, i), *sel, *ns;
                idx(b2, sub(b2, b, "requiredDuringSchedulingIgnoredDuringExecution"), i);
                if (!json_is_object(o))
                        return bad(p, b2, "an object is required");
                if (member(p, o, "labelSelector", JSON_OBJECT, b2, &sel) < 0 ||
                    selector(p, sel, sub(b3, b2, "labelSelector"), &t[i].selector) < 0 ||
                    get_str(p, o, "topologyKey", b2, &t[i].topology_key) < 0 ||
                    member(p, o, "namespaces", JSON_ARRAY, b2, &ns) < 0)
                        return -EINVAL;
                if (!t[i].topology_key || !*t[i].topology_key)
                        return bad(p, sub(b3, b2, "topologyKey"), "required");
                size_t nn = ns ? json_array_size(ns) : 0;
                t[i].namespaces = alloc(p, nn, sizeof(char *));
                if (!t[i].namespaces)
                        return oom(p);
                for (size_t j = 0; j < nn; j++)
                        if (!json_is_string(json_array_get(ns, j)) ||
                            !(t[i].namespaces[j] = simulate_strdup(p->in, json_string_value(json_array_get(ns, j)))))
                                return bad(p, sub(b3, b2, "namespaces"), "strings are required");
                t[i].n_namespaces = nn;
        }
        *ret = t;
        *ret_n = n;
        return 0;
}

static int effect_of(const char *s, enum sim_effect *ret) {
        static const char *const NAMES[] = { "", "NoSchedule", "PreferNoSchedule", "NoExecute" };
        for (int i = 0; i < 4; i++)
                if (strcmp(s ? s : "", NAMES[i]) == 0) {
                        *ret = (enum sim_effect)i;
                        return 0;
                }
        return -EINVAL;
}

static int tolerations(struct jp *p, const json_t *spec, const char *path, struct sim_pod *pod, size_t extra) {
        const json_t *arr;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        if (member(p, spec, "tolerations", JSON_ARRAY, path, &arr) < 0)
                return -EINVAL;
        size_t n = arr ? json_array_size(arr) : 0;
        pod->tolerations = alloc(p, n + extra, sizeof *pod->tolerations);
        if (!pod->tolerations)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                struct sim_toleration *t = &pod->tolerations[i];
                const char *op = NULL, *eff = NULL;
                idx(b, sub(b2, path, "tolerations"), i);
                if (get_str(p, o, "key", b, &t->key) < 0 || get_str(p, o, "value", b, &t->value) < 0 ||
                    get_str(p, o, "operator", b, &op) < 0 || get_str(p, o, "effect", b, &eff) < 0)
                        return -EINVAL;
                if (op && strcmp(op, "Exists") != 0 && strcmp(op, "Equal") != 0)
                        return bad(p, sub(b2, b, "operator"), "Exists or Equal is required");
                t->exists = op && strcmp(op, "Exists") == 0;
                if (t->key && !*t->key)
                        t->key = NULL;
                if (effect_of(eff, &t->effect) < 0)
                        return bad(p, sub(b2, b, "effect"), "unknown effect \"%s\"", eff);
        }
        pod->n_tolerations = n;
        return 0;
}

/* matchLabelKeys: the pod's own values of these keys join the selector. */
static int match_label_keys(struct jp *p, const json_t *keys, const char *path, const struct sim_pod *pod,
                            struct sim_selector *sel) {
        size_t n = keys ? json_array_size(keys) : 0, m = sel->n_match_labels;
        struct sim_label *l = alloc(p, m + n, sizeof *l);
        if (!l)
                return oom(p);
        if (m)
                memcpy(l, sel->match_labels, m * sizeof *l);
        for (size_t i = 0; i < n; i++) {
                const char *k = json_string_value(json_array_get(keys, i));
                const char *v = k ? simulate_label_get(pod->labels, pod->n_labels, k) : NULL;
                if (!k)
                        return bad(p, path, "strings are required");
                if (v)
                        l[m++] = (struct sim_label){ simulate_strdup(p->in, k), v };
        }
        sel->match_labels = l;
        sel->n_match_labels = m;
        return 0;
}

static int spread(struct jp *p, const json_t *spec, const char *path, struct sim_pod *pod) {
        const json_t *arr;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        if (member(p, spec, "topologySpreadConstraints", JSON_ARRAY, path, &arr) < 0)
                return -EINVAL;
        size_t n = arr ? json_array_size(arr) : 0;
        pod->spread = alloc(p, n, sizeof *pod->spread);
        if (!pod->spread)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i), *sel, *mlk;
                struct sim_spread *s = &pod->spread[i];
                const char *when = NULL;
                int64_t skew = 1, mind = 0;
                idx(b, sub(b2, path, "topologySpreadConstraints"), i);
                if (get_str(p, o, "topologyKey", b, &s->topology_key) < 0 ||
                    get_str(p, o, "whenUnsatisfiable", b, &when) < 0 || get_int(p, o, "maxSkew", b, &skew) < 0 ||
                    get_int(p, o, "minDomains", b, &mind) < 0 ||
                    member(p, o, "labelSelector", JSON_OBJECT, b, &sel) < 0 ||
                    selector(p, sel, sub(b2, b, "labelSelector"), &s->selector) < 0 ||
                    member(p, o, "matchLabelKeys", JSON_ARRAY, b, &mlk) < 0 ||
                    match_label_keys(p, mlk, sub(b2, b, "matchLabelKeys"), pod, &s->selector) < 0)
                        return -EINVAL;
                if (skew < 1 || skew > 1000000)
                        return bad(p, sub(b2, b, "maxSkew"), "must be at least 1");
                if (!s->topology_key)
                        return bad(p, sub(b2, b, "topologyKey"), "required");
                if (when && strcmp(when, "DoNotSchedule") != 0 && strcmp(when, "ScheduleAnyway") != 0)
                        return bad(p, sub(b2, b, "whenUnsatisfiable"), "DoNotSchedule or ScheduleAnyway is required");
                s->max_skew = (int32_t)skew;
                s->min_domains = (int32_t)(mind > 0 && mind < 1000000 ? mind : 0);
                s->do_not_schedule = !when || strcmp(when, "DoNotSchedule") == 0;
        }
        pod->n_spread = n;
        return 0;
}

static int pod_spec(struct jp *p, const json_t *spec, const char *path, struct sim_pod *pod, size_t extra_tols) {
        const json_t *aff;
        char b[PATH_MAX_LEN];
        if (!json_is_object(spec))
                return bad(p, path, "an object is required");
        int r;
        if ((r = get_str(p, spec, "nodeName", path, &pod->node_name)) < 0 ||
            (r = pod_requests(p, spec, path, pod)) < 0 ||
            labels_at(p, spec, "nodeSelector", path, &pod->node_selector, &pod->n_node_selector) < 0 ||
            member(p, spec, "affinity", JSON_OBJECT, path, &aff) < 0)
                return r < 0 ? r : -EINVAL;
        sub(b, path, "affinity");
        if ((r = node_terms(p, aff, b, pod)) < 0 ||
            (r = pod_terms(p, aff, "podAffinity", b, &pod->pod_affinity, &pod->n_pod_affinity)) < 0 ||
            (r = pod_terms(p, aff, "podAntiAffinity", b, &pod->pod_anti_affinity, &pod->n_pod_anti_affinity)) < 0 ||
            (r = tolerations(p, spec, path, pod, extra_tols)) < 0 || (r = spread(p, spec, path, pod)) < 0)
                return r;
        if (pod->node_name && !*pod->node_name)
                pod->node_name = NULL;
        return 0;
}

static int meta(struct jp *p, const json_t *obj, const char **ret_name, const char **ret_ns, struct sim_label **labels,
                size_t *n_labels) {
        const json_t *m;
        if (!json_is_object(obj))
                return bad(p, "(object)", "an object is required");
        if (member(p, obj, "metadata", JSON_OBJECT, "", &m) < 0 || get_str(p, m, "name", "metadata", ret_name) < 0 ||
            (ret_ns && get_str(p, m, "namespace", "metadata", ret_ns) < 0) ||
            (labels && labels_at(p, m, "labels", "metadata", labels, n_labels) < 0))
                return -EINVAL;
        if (!*ret_name || !**ret_name)
                return bad(p, "metadata.name", "required");
        if (ret_ns && !*ret_ns)
                *ret_ns = "default";
        return 0;
}

/* Drop the last object added to a list when its parsing failed. */
static int undo(size_t *n, int r) {
        (*n)--;
        return r;
}

int simulate_json_pod(struct sim_input *in, const json_t *pod, struct sim_pod **ret, char *err, size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_pod *out = simulate_add_pod(in);
        const json_t *spec;
        int r;
        if (!out)
                return oom(&p);
        if ((r = meta(&p, pod, &out->name, &out->namespace, &out->labels, &out->n_labels)) < 0 ||
            (r = member(&p, pod, "spec", JSON_OBJECT, "", &spec)) < 0 || (r = pod_spec(&p, spec, "spec", out, 0)) < 0)
                return undo(&in->n_pods, r);
        if (ret)
                *ret = out;
        return 0;
}

/* ---- nodes and node claims ---- */

static int taints(struct jp *p, const json_t *arr, const char *path, struct sim_taint **ret, size_t *ret_n) {
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        size_t n = arr ? json_array_size(arr) : 0;
        struct sim_taint *t = alloc(p, n, sizeof *t);
        if (!t)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                const char *eff = NULL;
                idx(b, path, i);
                if (get_str(p, o, "key", b, &t[i].key) < 0 || get_str(p, o, "value", b, &t[i].value) < 0 ||
                    get_str(p, o, "effect", b, &eff) < 0)
                        return -EINVAL;
                if (!t[i].key || !*t[i].key)
                        return bad(p, sub(b2, b, "key"), "required");
                if (effect_of(eff, &t[i].effect) < 0 || t[i].effect == SIM_EFFECT_ANY)
                        return bad(p, sub(b2, b, "effect"), "NoSchedule, PreferNoSchedule or NoExecute is required");
        }
        *ret = t;
        *ret_n = n;
        return 0;
}

static int taints_at(struct jp *p, const json_t *obj, const char *key, const char *path, struct sim_taint **ret,
                     size_t *ret_n) {
        const json_t *arr;
        char b[PATH_MAX_LEN];
        int r = member(p, obj, key, JSON_ARRAY, path, &arr);
        return r < 0 ? r : taints(p, arr, sub(b, path, key), ret, ret_n);
}

static int status_resources(struct jp *p, const json_t *obj, struct sim_node *n, bool *ret_has_alloc) {
        const json_t *st, *cap, *al;
        if (member(p, obj, "status", JSON_OBJECT, "", &st) < 0 ||
            member(p, st, "capacity", JSON_OBJECT, "status", &cap) < 0 ||
            member(p, st, "allocatable", JSON_OBJECT, "status", &al) < 0 ||
            resource_list(p, cap, "status.capacity", &n->capacity, NULL, NULL) < 0 ||
            resource_list(p, al, "status.allocatable", &n->allocatable, NULL, NULL) < 0)
                return -EINVAL;
        *ret_has_alloc = al != NULL;
        return 0;
}

int simulate_json_node(struct sim_input *in, const json_t *node, struct sim_node **ret, char *err, size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_node *out = simulate_add_node(in);
        const json_t *spec, *m, *unsched, *del;
        bool has_alloc;
        if (!out)
                return oom(&p);
        if (meta(&p, node, &out->name, NULL, &out->labels, &out->n_labels) < 0 ||
            member(&p, node, "spec", JSON_OBJECT, "", &spec) < 0 ||
            taints_at(&p, spec, "taints", "spec", &out->taints, &out->n_taints) < 0 ||
            member(&p, spec, "unschedulable", JSON_TRUE, "spec", &unsched) < 0 ||
            status_resources(&p, node, out, &has_alloc) < 0)
                return undo(&in->n_nodes, -EINVAL);
        m = json_object_get(node, "metadata");
        del = json_object_get(m, "deletionTimestamp");
        out->unschedulable = (unsched && json_is_true(unsched)) || (del && !json_is_null(del));
        if (!has_alloc)
                out->allocatable = out->capacity;
        out->nodepool = simulate_label_get(out->labels, out->n_labels, SIM_LABEL_NODEPOOL);
        if (ret)
                *ret = out;
        return 0;
}

/* Single-valued In requirements become labels (metadata.labels win). */
static int claim_labels(struct jp *p, const json_t *reqs, struct sim_node *n) {
        struct sim_requirement *r;
        size_t nr;
        if (requirements(p, reqs, "spec.requirements", true, "key", &r, &nr) < 0)
                return -EINVAL;
        struct sim_label *l = alloc(p, n->n_labels + nr, sizeof *l);
        if (!l)
                return oom(p);
        if (n->n_labels) /* labels may be NULL: memcpy's source must not be */
                memcpy(l, n->labels, n->n_labels * sizeof *l);
        size_t k = n->n_labels;
        for (size_t i = 0; i < nr; i++)
                if (r[i].op == SIM_OP_IN && r[i].n_values == 1 && !simulate_label_get(l, k, r[i].key))
                        l[k++] = (struct sim_label){ r[i].key, r[i].values[0] };
        n->labels = l;
        n->n_labels = k;
        return 0;
}

static int claim_spec(struct jp *p, const json_t *spec, const struct shape_catalog *catalog, struct sim_node *n,
                      bool has_alloc) {
        const json_t *reqs;
        const char *shape = NULL, *pool = NULL;
        if (!spec)
                return bad(p, "spec", "required");
        if (member(p, spec, "requirements", JSON_ARRAY, "spec", &reqs) < 0 || claim_labels(p, reqs, n) < 0 ||
            taints_at(p, spec, "taints", "spec", &n->taints, &n->n_taints) < 0 ||
            get_str(p, spec, "instanceType", "spec", &shape) < 0 || get_str(p, spec, "nodePool", "spec", &pool) < 0)
                return -EINVAL;
        n->nodepool = pool ? pool : simulate_label_get(n->labels, n->n_labels, SIM_LABEL_NODEPOOL);
        const struct shape *s = shape && catalog ? shapes_catalog_find(catalog, shape) : NULL;
        if (!has_alloc && !s)
                return bad(p, "spec.instanceType", "unknown shape \"%s\" and no status.allocatable",
                           shape ? shape : "");
        if (!has_alloc) {
                n->capacity = s->capacity;
                n->allocatable = s->allocatable;
        }
        for (int k = RESOURCE_EXTENDED_0; s && has_alloc && k < RESOURCE_COUNT; k++)
                if (n->allocatable.v[k] == 0) { /* a claim's status lists standard resources only: its class's */
                        n->capacity.v[k] = s->capacity.v[k];
                        n->allocatable.v[k] = s->allocatable.v[k];
                }
        return 0;
}

int simulate_json_nodeclaim(struct sim_input *in, const json_t *claim, const struct shape_catalog *catalog,
                            struct sim_node **ret, char *err, size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_node *out = simulate_add_node(in);
        const json_t *spec;
        bool has_alloc;
        if (!out)
                return oom(&p);
        out->in_flight = true;
        if (meta(&p, claim, &out->name, NULL, &out->labels, &out->n_labels) < 0 ||
            member(&p, claim, "spec", JSON_OBJECT, "", &spec) < 0 || status_resources(&p, claim, out, &has_alloc) < 0 ||
            claim_spec(&p, spec, catalog, out, has_alloc) < 0)
                return undo(&in->n_nodes, -EINVAL);
        if (ret)
                *ret = out;
        return 0;
}

/* ---- node pools ---- */

static int pool_limits(struct jp *p, const json_t *spec, struct sim_nodepool *out) {
        const json_t *lim, *v;
        if (member(p, spec, "limits", JSON_OBJECT, "spec", &lim) < 0)
                return -EINVAL;
        if ((v = json_object_get(lim, "cpu")) &&
            quantity_of(p, v, RESOURCE_CPU, "spec.limits.cpu", &out->limit_cpu_milli) < 0)
                return -EINVAL;
        if ((v = json_object_get(lim, "memory")) &&
            quantity_of(p, v, RESOURCE_MEMORY, "spec.limits.memory", &out->limit_memory_bytes) < 0)
                return -EINVAL;
        if ((v = json_object_get(lim, "nodes")) &&
            quantity_of(p, v, RESOURCE_PODS, "spec.limits.nodes", &out->limit_nodes) < 0)
                return -EINVAL;
        return 0;
}

static int pool_template(struct jp *p, const json_t *spec, struct sim_nodepool *out) {
        const json_t *tmpl, *tm, *ts, *reqs, *ref;
        if (member(p, spec, "template", JSON_OBJECT, "spec", &tmpl) < 0 ||
            member(p, tmpl, "metadata", JSON_OBJECT, "spec.template", &tm) < 0 ||
            labels_at(p, tm, "labels", "spec.template.metadata", &out->labels, &out->n_labels) < 0 ||
            member(p, tmpl, "spec", JSON_OBJECT, "spec.template", &ts) < 0 ||
            member(p, ts, "requirements", JSON_ARRAY, "spec.template.spec", &reqs) < 0 ||
            requirements(p, reqs, "spec.template.spec.requirements", true, "key", &out->reqs, &out->n_reqs) < 0 ||
            taints_at(p, ts, "taints", "spec.template.spec", &out->taints, &out->n_taints) < 0 ||
            member(p, ts, "nodeClassRef", JSON_OBJECT, "spec.template.spec", &ref) < 0 ||
            get_str(p, ref, "name", "spec.template.spec.nodeClassRef", &out->nodeclass) < 0)
                return -EINVAL;
        if (!out->nodeclass)
                return bad(p, "spec.template.spec.nodeClassRef.name", "required");
        return 0;
}

int simulate_json_nodepool(struct sim_input *in, const json_t *pool, struct sim_nodepool **ret, char *err,
                           size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_nodepool *out = simulate_add_nodepool(in);
        const json_t *spec;
        int64_t weight = 0;
        if (!out)
                return oom(&p);
        if (meta(&p, pool, &out->name, NULL, NULL, NULL) < 0 || member(&p, pool, "spec", JSON_OBJECT, "", &spec) < 0 ||
            get_int(&p, spec, "weight", "spec", &weight) < 0 || pool_template(&p, spec, out) < 0 ||
            pool_limits(&p, spec, out) < 0)
                return undo(&in->n_pools, -EINVAL);
        if (weight < 0 || weight > 100)
                return undo(&in->n_pools, bad(&p, "spec.weight", "must be between 0 and 100"));
        out->weight = (int32_t)weight;
        if (ret)
                *ret = out;
        return 0;
}

/* ---- daemon sets ---- */

/* What the DaemonSet controller adds to every pod it creates. */
static const struct {
        const char *key;
        enum sim_effect effect;
} DS_TOLERATIONS[] = {
        { "node.kubernetes.io/not-ready", SIM_EFFECT_NO_EXECUTE },
        { "node.kubernetes.io/unreachable", SIM_EFFECT_NO_EXECUTE },
        { "node.kubernetes.io/disk-pressure", SIM_EFFECT_NO_SCHEDULE },
        { "node.kubernetes.io/memory-pressure", SIM_EFFECT_NO_SCHEDULE },
        { "node.kubernetes.io/pid-pressure", SIM_EFFECT_NO_SCHEDULE },
        { "node.kubernetes.io/unschedulable", SIM_EFFECT_NO_SCHEDULE },
};

int simulate_json_daemonset(struct sim_input *in, const json_t *ds, struct sim_pod **ret, char *err, size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_pod *out = simulate_add_daemonset(in);
        const json_t *spec, *tmpl, *ts;
        size_t extra = sizeof DS_TOLERATIONS / sizeof DS_TOLERATIONS[0];
        if (!out)
                return oom(&p);
        if (meta(&p, ds, &out->name, &out->namespace, NULL, NULL) < 0 ||
            member(&p, ds, "spec", JSON_OBJECT, "", &spec) < 0 ||
            member(&p, spec, "template", JSON_OBJECT, "spec", &tmpl) < 0 ||
            member(&p, tmpl, "spec", JSON_OBJECT, "spec.template", &ts) < 0 ||
            pod_spec(&p, ts, "spec.template.spec", out, extra) < 0)
                return undo(&in->n_daemonsets, -EINVAL);
        for (size_t i = 0; i < extra; i++)
                out->tolerations[out->n_tolerations++] = (struct sim_toleration){
                        .key = DS_TOLERATIONS[i].key, .exists = true, .effect = DS_TOLERATIONS[i].effect
                };
        out->node_name = NULL;
        if (ret)
                *ret = out;
        return 0;
}

/* ---- node classes ---- */

static int nodeclass_options(struct jp *p, const json_t *spec, struct shape_options *o) {
        const json_t *kubelet, *boot;
        const char *size = NULL;
        char msg[160];
        if (member(p, spec, "kubeletConfiguration", JSON_OBJECT, "spec", &kubelet) < 0 ||
            member(p, spec, "bootDevice", JSON_OBJECT, "spec", &boot) < 0 ||
            get_str(p, boot, "size", "spec.bootDevice", &size) < 0)
                return -EINVAL;
        if (kubelet && shapes_options_from_kubelet(kubelet, o, msg, sizeof msg) < 0)
                return bad(p, "spec.kubeletConfiguration", "%s", msg);
        if (size && (quantity_parse_value(size, &o->disk_bytes) < 0 || o->disk_bytes <= 0))
                return bad(p, "spec.bootDevice.size", "invalid quantity \"%s\"", size);
        return 0;
}

static int nodeclass_catalog(struct jp *p, const json_t *spec, const struct shape_options *base,
                             struct shape_catalog **ret) {
        struct shape_options o = *base;
        struct shape_catalog *cat = NULL;
        const json_t *types;
        char msg[200];
        if (nodeclass_options(p, spec, &o) < 0 || member(p, spec, "instanceTypes", JSON_ARRAY, "spec", &types) < 0)
                return -EINVAL;
        if (shapes_catalog_default(&o, &cat) < 0)
                return oom(p);
        if (types && shapes_catalog_add_custom(cat, types, &o, msg, sizeof msg) < 0) {
                shapes_catalog_free(cat);
                return bad(p, "spec", "%s", msg);
        }
        shapes_catalog_sort(cat);
        *ret = cat;
        return 0;
}

/* One pciDevices entry's resourceName: one more of that extended resource in every shape's capacity and allocatable
 * (the device plugin in the guest advertises it). */
static int pci_resource(struct jp *p, const char *name, const char *path, struct shape_catalog *cat) {
        int k = simulate_extended_kind(p->in, name, true);
        if (k == -ENOMEM)
                return oom(p);
        if (k < 0)
                return bad(p, path, "at most %d extended resource names across the node classes",
                           RESOURCE_EXTENDED_N);
        for (size_t i = 0; i < cat->n; i++) {
                cat->items[i].capacity.v[k]++;
                cat->items[i].allocatable.v[k]++;
        }
        return 0;
}

/* spec.pciDevices: the mapping of each (a free device of it on the host), and the extended resource it gives. */
static int nodeclass_pci(struct jp *p, const json_t *spec, struct sim_nodeclass *out, struct shape_catalog *cat) {
        const json_t *arr;
        char b[PATH_MAX_LEN], b2[PATH_MAX_LEN];
        if (member(p, spec, "pciDevices", JSON_ARRAY, "spec", &arr) < 0)
                return -EINVAL;
        size_t n = arr ? json_array_size(arr) : 0;
        out->pci_mappings = alloc(p, n, sizeof *out->pci_mappings);
        if (!out->pci_mappings)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                const char *res = NULL;
                idx(b, "spec.pciDevices", i);
                if (!json_is_object(o))
                        return bad(p, b, "an object is required");
                if (get_str(p, o, "mapping", b, &out->pci_mappings[i]) < 0 ||
                    get_str(p, o, "resourceName", b, &res) < 0)
                        return -EINVAL;
                if (!out->pci_mappings[i] || !*out->pci_mappings[i])
                        return bad(p, sub(b2, b, "mapping"), "required");
                if (res && *res && pci_resource(p, res, sub(b2, b, "resourceName"), cat) < 0)
                        return -EINVAL;
        }
        out->n_pci = n;
        return 0;
}

int simulate_json_nodeclass(struct sim_input *in, const json_t *nc, const struct shape_options *base,
                            struct sim_nodeclass **ret, struct shape_catalog **ret_catalog, char *err,
                            size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_nodeclass *out = simulate_add_nodeclass(in);
        struct shape_catalog *cat = NULL;
        const json_t *spec;
        if (!out)
                return oom(&p);
        if (meta(&p, nc, &out->name, NULL, NULL, NULL) < 0 || member(&p, nc, "spec", JSON_OBJECT, "", &spec) < 0 ||
            get_str(&p, spec, "region", "spec", &out->region) < 0 || nodeclass_catalog(&p, spec, base, &cat) < 0)
                return undo(&in->n_classes, -EINVAL);
        if (nodeclass_pci(&p, spec, out, cat) < 0) {
                shapes_catalog_free(cat);
                return undo(&in->n_classes, -EINVAL);
        }
        out->shapes = cat;
        *ret_catalog = cat;
        if (ret)
                *ret = out;
        return 0;
}

/* ---- hosts ---- */

static int u64_member(struct jp *p, const json_t *o, const char *key, const char *path, bool required, uint64_t *ret) {
        int64_t v = -1;
        char b[PATH_MAX_LEN];
        if (get_int(p, o, key, path, &v) < 0)
                return -EINVAL;
        if (v < 0 && (required || json_object_get(o, key)))
                return bad(p, sub(b, path, key), "a non-negative integer is required");
        if (v >= 0)
                *ret = (uint64_t)v;
        return 0;
}

static int host_numa(struct jp *p, const json_t *arr, struct sim_host *h) {
        char b[PATH_MAX_LEN];
        size_t n = arr ? json_array_size(arr) : 0;
        h->numa = alloc(p, n, sizeof *h->numa);
        if (!h->numa)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                uint64_t id = i, fc = 0, tc = 0, fm = 0;
                idx(b, "numa", i);
                if (u64_member(p, o, "id", b, false, &id) < 0 || u64_member(p, o, "free_cpus", b, true, &fc) < 0 ||
                    u64_member(p, o, "total_cpus", b, false, &tc) < 0 ||
                    u64_member(p, o, "free_memory_bytes", b, true, &fm) < 0)
                        return -EINVAL;
                h->numa[i] = (struct sim_numa){ (int)id, (uint32_t)fc, (uint32_t)tc, fm };
        }
        h->n_numa = n;
        return 0;
}

/* An offer's optional "score": a number from 0 to 100. */
static int offer_score(struct jp *p, const json_t *o, const char *path, const json_t **ret) {
        char b[PATH_MAX_LEN];
        const json_t *v = json_object_get(o, "score");
        *ret = NULL;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 100)
                return bad(p, sub(b, path, "score"), "a number from 0 to 100 is required");
        *ret = v;
        return 0;
}

static int host_offers(struct jp *p, const json_t *arr, struct sim_host *h) {
        char b[PATH_MAX_LEN];
        size_t n = arr ? json_array_size(arr) : 0;
        h->offers = alloc(p, n, sizeof *h->offers);
        if (!h->offers)
                return oom(p);
        for (size_t i = 0; i < n; i++) {
                const json_t *o = json_array_get(arr, i);
                uint64_t count = 0;
                idx(b, "offers", i);
                const json_t *fallback, *score;
                uint64_t preferred = UINT64_MAX;
                if (get_str(p, o, "shape", b, &h->offers[i].shape) < 0 ||
                    u64_member(p, o, "count", b, true, &count) < 0 ||
                    u64_member(p, o, "preferred_count", b, false, &preferred) < 0 ||
                    member(p, o, "fallback", JSON_TRUE, b, &fallback) < 0 || offer_score(p, o, b, &score) < 0)
                        return -EINVAL;
                if (!h->offers[i].shape)
                        return bad(p, b, "shape is required");
                h->offers[i].count = (uint32_t)count;
                h->offers[i].fallback = fallback && json_is_true(fallback);
                if (preferred == UINT64_MAX)
                        preferred = h->offers[i].fallback ? 0 : count;
                h->offers[i].preferred = (uint32_t)(preferred < count ? preferred : count);
                h->offers[i].score = score ? json_number_value(score) : -1;
        }
        h->n_offers = n;
        h->has_offers = arr != NULL;
        return 0;
}

/* "pci_free": {mapping: count}: the free devices of each resource mapping on the host. */
static int host_devices(struct jp *p, const json_t *obj, struct sim_host *h) {
        const char *key;
        json_t *v;
        char b[PATH_MAX_LEN];
        size_t n = obj ? json_object_size(obj) : 0, i = 0;
        h->devices = alloc(p, n, sizeof *h->devices);
        if (!h->devices)
                return oom(p);
        json_object_foreach((json_t *)obj, key, v) {
                if (!json_is_integer(v) || json_integer_value(v) < 0)
                        return bad(p, sub(b, "pci_free", key), "a non-negative integer is required");
                h->devices[i].mapping = simulate_strdup(p->in, key);
                if (!h->devices[i].mapping)
                        return oom(p);
                h->devices[i++].free = (uint32_t)json_integer_value(v);
        }
        h->n_devices = n;
        return 0;
}

int simulate_json_host(struct sim_input *in, const json_t *host, struct sim_host **ret, char *err, size_t errlen) {
        struct jp p = { in, err, errlen };
        struct sim_host *out = simulate_add_host(in);
        const json_t *numa, *offers, *pci;
        uint64_t cpus = 0, mem = 0;
        if (!out)
                return oom(&p);
        if (!json_is_object(host) || get_str(&p, host, "name", "", &out->name) < 0 ||
            get_str(&p, host, "region", "", &out->region) < 0 ||
            u64_member(&p, host, "free_cpus", "", true, &cpus) < 0 ||
            u64_member(&p, host, "free_memory_bytes", "", true, &mem) < 0 ||
            member(&p, host, "numa", JSON_ARRAY, "", &numa) < 0 ||
            member(&p, host, "offers", JSON_ARRAY, "", &offers) < 0 || host_numa(&p, numa, out) < 0 ||
            host_offers(&p, offers, out) < 0 || member(&p, host, "pci_free", JSON_OBJECT, "", &pci) < 0 ||
            host_devices(&p, pci, out) < 0)
                return undo(&in->n_hosts, json_is_object(host) ? -EINVAL : bad(&p, "host", "an object is required"));
        if (!out->name || !*out->name)
                return undo(&in->n_hosts, bad(&p, "name", "required"));
        out->free_cpus = (uint32_t)cpus;
        out->free_memory_bytes = mem;
        if (ret)
                *ret = out;
        return 0;
}
