/* kube: a Kubernetes API client (kubeconfig or in-cluster, CRUD, patches, retries, list-then-watch informer). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* Threads: a kube_client owns one http_client and is not thread-safe. Give every thread (and every informer)
 * its own client; they may share one kube_config. */

/* ---- resources ---- */

struct kube_resource {
        const char *group;   /* "" for core/v1 */
        const char *version;
        const char *plural;
        const char *kind;
        bool namespaced;
};

extern const struct kube_resource kube_pods;             /* core/v1 */
extern const struct kube_resource kube_nodes;
extern const struct kube_resource kube_events;
extern const struct kube_resource kube_secrets;
extern const struct kube_resource kube_configmaps;
extern const struct kube_resource kube_namespaces;
extern const struct kube_resource kube_daemonsets;       /* apps/v1 */
extern const struct kube_resource kube_pdbs;             /* policy/v1 poddisruptionbudgets */
extern const struct kube_resource kube_leases;           /* coordination.k8s.io/v1 */
extern const struct kube_resource kube_events_v1;        /* events.k8s.io/v1 */
extern const struct kube_resource kube_crds;             /* apiextensions.k8s.io/v1 */
extern const struct kube_resource kube_nodepools;        /* pvescale.io/v1alpha1, cluster-scoped */
extern const struct kube_resource kube_nodeclasses;      /* pvescale.io/v1alpha1 proxmoxnodeclasses, cluster-scoped */
extern const struct kube_resource kube_nodeclaims;       /* pvescale.io/v1alpha1, cluster-scoped */
extern const struct kube_resource kube_proxmoxtemplates; /* pvescale.io/v1alpha1, cluster-scoped */

/* "/api/v1/namespaces/<ns>/pods/<name>/<sub>" and the like; ns is ignored for cluster-scoped kinds and may be
 * NULL (all namespaces) for a list; name and sub may be NULL. Segments are escaped. Pure. 0, -EINVAL, -ENOMEM. */
int kube_path(const struct kube_resource *rt, const char *ns, const char *name, const char *sub, char **ret_path);
/* Append "?key=value" or "&key=value" (value escaped) to a malloc'd path. Pure. 0 or -ENOMEM. */
int kube_query_add(char **path, const char *key, const char *value);

/* ---- configuration ---- */

struct kube_config {
        char *server;      /* https://host:port */
        char *token;       /* bearer token; NULL = none */
        char *token_file;  /* read again every minute (rotated service-account tokens); NULL = none */
        char *ca_file;     /* NULL = ca_data or the system CAs */
        char *ca_data;     /* PEM (decoded certificate-authority-data) */
        char *cert_file, *key_file; /* client certificate (mutual TLS) */
        char *cert_data, *key_data;
        bool insecure;     /* insecure-skip-tls-verify */
        char *namespace;   /* the context's namespace, else "default" */
        int data_fds[3];   /* memfds of kube_config_files_from_data, closed by kube_config_done */
        unsigned n_data_fds;
};

void kube_config_done(struct kube_config *cfg);

/* Read a kubeconfig document (the YAML as JSON): the context named context (NULL = current-context), its cluster
 * (server, certificate-authority[-data], insecure-skip-tls-verify) and user (token, tokenFile,
 * client-certificate[-data], client-key[-data]). Relative file names are taken from base_dir. Exec and
 * auth-provider plugins are refused. Pure. 0, or -EINVAL with "kubeconfig: <key>: <reason>" in err. */
int kube_config_parse_kubeconfig(const json_t *doc, const char *base_dir, const char *context,
                                 struct kube_config *ret, char *err, size_t errlen);
/* Load and parse a kubeconfig file. */
int kube_config_load_kubeconfig(const char *path, struct kube_config *ret, char *err, size_t errlen);
/* In-cluster: token, ca.crt and namespace under <root>/var/run/secrets/kubernetes.io/serviceaccount (root NULL
 * = "/"), server https://host:port from the values of KUBERNETES_SERVICE_HOST/PORT (IPv6 gets brackets). */
int kube_config_in_cluster(const char *root, const char *host, const char *port, struct kube_config *ret, char *err,
                           size_t errlen);

/* Put the CA, client certificate and key that cfg holds as data into memfds and name them in the *_file fields
 * ("/proc/self/fd/N"). Every client made from cfg then names the same files, so that they can share
 * connections (libcurl reuses a connection only for the same CA file). 0 or -errno (cfg unchanged). */
int kube_config_files_from_data(struct kube_config *cfg);

/* ---- the client ---- */

struct kube_client_options {
        long timeout_ms;          /* per request; 0 = 30 s */
        unsigned max_retries;     /* extra attempts for retryable failures; 0 = 5 (use KUBE_NO_RETRY for none) */
        long backoff_base_ms;     /* 0 = 200 ms */
        long backoff_max_ms;      /* 0 = 30 s */
        const char *user_agent;   /* NULL = "pvescale-coordinator" */
        struct http_pool *pool;   /* connections shared with the pool's other clients; NULL = the client's own */
};

#define KUBE_NO_RETRY (~0u)

struct kube_client;

/* CA/client data from cfg go to memfd files (nothing on disk). Returns 0, -ENOMEM, -EIO. */
int kube_client_new(const struct kube_config *cfg, const struct kube_client_options *o, struct kube_client **ret);
void kube_client_free(struct kube_client *c);
/* Stop transfers, waits and informers of this client while *flag is true. */
void kube_client_set_cancel(struct kube_client *c, const atomic_bool *flag);
/* Whether the cancel flag is set: the client's calls fail with -ECANCELED (a stop, not an error). */
bool kube_client_canceled(const struct kube_client *c);
/* Why the last call failed: "PUT /apis/...: 409 Conflict: Operation cannot be fulfilled ...". "" after success. */
const char *kube_client_error(const struct kube_client *c);

/* Errors: 400 -EINVAL, 401 -EACCES, 403 -EPERM, 404 -ENOENT, 405 -EOPNOTSUPP, 409 AlreadyExists -EEXIST,
 * 409 Conflict (stale resourceVersion) -ESTALE, 410 -EIDRM (resource version expired), 415 -EOPNOTSUPP,
 * 422 -EINVAL, 429 -EBUSY, 5xx -EIO, plus the transport errors of http_client_request. Pure. */
int kube_errno_from_status(long status, const char *reason);

/* Retries (inside every call, up to max_retries): GET on 429, 5xx and transport failures; other methods on a
 * refused connection, or a 429/5xx that carries Retry-After. Delays are backoff_delay_ms with Retry-After
 * honoured. */

/* Raw call: method, path (with query), optional JSON body with content_type (NULL = application/json).
 * 0 with the response object in ret_obj (new reference; an empty body gives {}); -EBADMSG when it is not JSON.
 * With ret_obj NULL a 2xx answer is not parsed at all. */
int kube_request(struct kube_client *c, const char *method, const char *path, const char *content_type,
                 const json_t *body, json_t **ret_obj);

struct kube_list_options {
        const char *label_selector;
        const char *field_selector;
        unsigned limit;           /* page size; pages are followed with continue; 0 = 500 */
};

int kube_get(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name, json_t **ret);
/* All pages: {"kind": ..., "metadata": {"resourceVersion": ...}, "items": [...]}. ns NULL = all namespaces. */
int kube_list(struct kube_client *c, const struct kube_resource *rt, const char *ns,
              const struct kube_list_options *o, json_t **ret_list);
int kube_create(struct kube_client *c, const struct kube_resource *rt, const char *ns, const json_t *obj,
                json_t **ret);
/* PUT with the object's metadata.resourceVersion: -ESTALE when someone changed it meanwhile. sub: NULL or
 * "status". */
int kube_update(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                const json_t *obj, json_t **ret);
/* Write obj, made from before (the object as read): a merge patch of the difference, with before's
 * resourceVersion as its precondition (-ESTALE on 409, like kube_update), so the request carries the change and
 * nothing only the copy has is written back. What a merge patch cannot say (a null in obj) goes as kube_update. */
int kube_update_from(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                     const json_t *before, const json_t *obj, json_t **ret);
/* kube_update_from for a write the server stores as sent (a custom resource's status subresource, no webhook
 * changing it): the answer is asked for as PartialObjectMetadata, and *ret is obj with the metadata the server
 * gave it (its new resourceVersion), which spares reading the whole object back. A server that answers with the
 * whole object (or the PUT kube_update_from falls back to) is taken at its word. */
int kube_update_from_as_sent(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *sub,
                             const json_t *before, const json_t *obj, json_t **ret);

enum kube_patch_type {
        KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
        KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds only) */
        KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
};

int kube_patch(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
               const char *sub, enum kube_patch_type type, const json_t *patch, json_t **ret);

enum kube_propagation {
        KUBE_PROPAGATION_DEFAULT,
        KUBE_PROPAGATION_BACKGROUND,
        KUBE_PROPAGATION_FOREGROUND,
        KUBE_PROPAGATION_ORPHAN,
};

struct kube_delete_options {
        enum kube_propagation propagation;
        long grace_period_seconds;     /* -1 = the object's default (use KUBE_DELETE_OPTIONS_INIT) */
        const char *precondition_uid;  /* delete only this incarnation */
        const char *precondition_resource_version;
};

#define KUBE_DELETE_OPTIONS_INIT { .grace_period_seconds = -1 }

/* ret (may be NULL) gets what the server answered: the object (with a deletionTimestamp when finalizers hold it)
 * or a Status. */
int kube_delete(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                const struct kube_delete_options *o, json_t **ret);

/* Change obj in place. Return 0 to write it, KUBE_MODIFY_SKIP when nothing needs writing, or a negative errno to
 * stop (kube_modify returns it). */
typedef int (*kube_modify_fn)(json_t *obj, void *userdata);
#define KUBE_MODIFY_SKIP 1

/* Get, modify, write with kube_update_from (sub NULL or "status"); on 409 Conflict get again and retry, at most
 * max_attempts times in all (0 = 5). Returns 0 with the stored object in ret (may be NULL), KUBE_MODIFY_SKIP when fn
 * skipped, with the object fn saw unchanged in ret (the caller's copy, or the one got after a conflict),
 * -ESTALE when every attempt conflicted, or another error. */
int kube_modify(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                const char *sub, kube_modify_fn fn, void *userdata, unsigned max_attempts, json_t **ret);
/* kube_modify that starts from a copy the caller has (an informer's, say; NULL = get it): the first round
 * modifies that copy instead of getting the object, and a conflict gets it as kube_modify does. */
int kube_modify_from(struct kube_client *c, const struct kube_resource *rt, const char *ns, const char *name,
                     const char *sub, const json_t *current, kube_modify_fn fn, void *userdata, unsigned max_attempts,
                     json_t **ret);

/* POST pods/<name>/eviction (policy/v1 Eviction). -EBUSY (429) when a PodDisruptionBudget forbids it. */
int kube_evict(struct kube_client *c, const char *ns, const char *pod, const struct kube_delete_options *o);
/* The pods bound to a Node, in all namespaces (a list with fieldSelector spec.nodeName=<node>), as kube_list. */
int kube_list_node_pods(struct kube_client *c, const char *node, json_t **ret_list);

/* Record a core/v1 Event about obj (of kind rt): type "Normal" or "Warning", reason (CamelCase), message,
 * component (source.component and reportingComponent). Cluster-scoped objects get their events in "default". */
int kube_event_emit(struct kube_client *c, const struct kube_resource *rt, const json_t *obj, const char *type,
                    const char *reason, const char *message, const char *component);

/* ---- informer: list, then watch ---- */

enum kube_watch_event {
        KUBE_EVENT_ADDED,
        KUBE_EVENT_MODIFIED,
        KUBE_EVENT_DELETED,
        KUBE_EVENT_SYNCED, /* a (re)list finished; the store is complete. obj is NULL. */
};

/* obj is borrowed (valid during the call). A negative return stops the informer with that error. */
typedef int (*kube_informer_fn)(enum kube_watch_event ev, const json_t *obj, void *userdata);

struct kube_informer_stats;

struct kube_informer_options {
        const char *label_selector, *field_selector;
        long watch_timeout_s;  /* timeoutSeconds of each watch, plus up to the same again of jitter; 0 = 300 */
        long idle_timeout_ms;  /* a watch silent this long is reconnected; 0 = timeout + 30 s */
        long backoff_base_ms;  /* 0 = 200 ms */
        long backoff_max_ms;   /* 0 = 30 s */
        unsigned page_size;    /* list page size; 0 = 500 */
        /* Called (with the informer's userdata) each time a counter of its stats changes, before the list or
         * watch it counts runs, so that an open watch is counted while it is open; may be NULL. */
        void (*stats_changed)(const struct kube_informer_stats *s, void *userdata);
};

struct kube_informer_stats {
        unsigned lists;       /* full lists that came back (the first one and every relist) */
        unsigned relists_410; /* relists because the resource version expired */
        unsigned watches;     /* watch requests */
        unsigned resumes;     /* watches resumed from the last resource version after a stream ended */
        unsigned failures;    /* failed lists or watches (each one backed off) */
};

struct kube_informer;

/* The informer keeps using c (it must outlive the informer and belong to the informer's thread). ns NULL = all
 * namespaces. 0 or -ENOMEM. */
int kube_informer_new(struct kube_client *c, const struct kube_resource *rt, const char *ns,
                      const struct kube_informer_options *o, kube_informer_fn fn, void *userdata,
                      struct kube_informer **ret);
void kube_informer_free(struct kube_informer *inf);

/* One step: a list when there is no resource version (first run, after 410 Gone), else one watch session from
 * the last resource version, which runs until the stream ends. Events reach fn as they arrive; a relist
 * reports the difference to the store (ADDED, MODIFIED, DELETED), then SYNCED. A failed list or watch is
 * followed by a backoff sleep (Retry-After honoured). Returns 0, fn's error, or -ECANCELED. */
int kube_informer_step(struct kube_informer *inf);
/* Steps until the client's cancel flag is set (returns 0) or fn fails (returns its error). */
int kube_informer_run(struct kube_informer *inf);

const struct kube_informer_stats *kube_informer_stats(const struct kube_informer *inf);

/* The condition of this type in a status object's "conditions" list (borrowed), or NULL. Pure. */
const json_t *kube_condition(const json_t *status, const char *type);
/* Whether that condition exists with status "True". Pure. */
bool kube_condition_true(const json_t *status, const char *type);
/* Whether a taint (a Node's spec.taints item) is one Kubernetes puts on a Node while it starts and removes once it
 * is ready, as Karpenter's KnownEphemeralTaints: node.kubernetes.io/not-ready (NoSchedule or NoExecute),
 * node.kubernetes.io/unreachable:NoSchedule, node.cloudprovider.kubernetes.io/uninitialized:NoSchedule and any
 * readiness.k8s.io/ key. Pure. */
bool kube_taint_ephemeral(const json_t *taint);
/* Whether a taints array has a taint with this key. Pure. */
bool kube_taints_have_key(const json_t *taints, const char *key);
