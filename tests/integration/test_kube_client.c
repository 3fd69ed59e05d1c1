/* Integration test of coordinator/kube against a real kube-apiserver (the simulator's real mode, its fault proxy in
 * front): CRUD, 409 retry loop, patches, paging, subresources, events, eviction and binding, auth and TLS, and the
 * informer (list, watch, resume after a disconnect, relist on 410 Gone, backoff). Retries on 5xx are
 * test_http_client's (the stub). Run by test_coordinator_clients.py (needs PVESCALE_TEST_ENDPOINTS). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "clienttest.h"
#include "kube.h"

static json_t *ep;
static struct kube_config cfg;

static json_t *j(const char *text) {
        json_error_t e;
        json_t *v = json_loads(text, 0, &e);
        if (!v)
                fail_msg("bad test JSON (%s): %s", e.text, text);
        return v;
}

static struct kube_client *client(unsigned retries) {
        struct kube_client_options o = { .max_retries = retries, .backoff_base_ms = 20, .backoff_max_ms = 200 };
        struct kube_client *c;
        assert_int_equal(kube_client_new(&cfg, &o, &c), 0);
        return c;
}

static int setup(void **state) {
        (void)state;
        char err[256];
        ep = ct_endpoints();
        if (!ep)
                return -1;
        if (kube_config_load_kubeconfig(ct_string(ep, "kube.kubeconfig"), &cfg, err, sizeof err) < 0) {
                fprintf(stderr, "%s\n", err);
                return -1;
        }
        return 0;
}

static int teardown(void **state) {
        (void)state;
        kube_config_done(&cfg);
        json_decref(ep);
        return 0;
}

static json_t *configmap(const char *name, const char *labels) {
        char text[512];
        snprintf(text, sizeof text, "{\"metadata\": {\"name\": \"%s\", \"labels\": %s}, \"data\": {\"a\": \"1\"}}", name,
                 labels ? labels : "{}");
        return j(text);
}

static void create_cm(struct kube_client *c, const char *name, const char *labels) {
        json_t *cm = configmap(name, labels);
        assert_int_equal(kube_create(c, &kube_configmaps, "default", cm, NULL), 0);
        json_decref(cm);
}

static const char *rv_of(const json_t *o) {
        return json_string_value(json_object_get(json_object_get(o, "metadata"), "resourceVersion"));
}

/* ---- CRUD and errors ---- */

static void test_crud(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *created, *got, *updated;
        json_t *cm = configmap("crud", "{\"app\": \"x\"}");
        assert_int_equal(kube_create(c, &kube_configmaps, "default", cm, &created), 0);
        assert_non_null(rv_of(created));
        assert_int_equal(kube_create(c, &kube_configmaps, "default", cm, NULL), -EEXIST);
        assert_non_null(strstr(kube_client_error(c), "POST /api/v1/namespaces/default/configmaps: 409 AlreadyExists"));
        assert_int_equal(kube_get(c, &kube_configmaps, "default", "crud", &got), 0);
        json_object_set_new(json_object_get(got, "data"), "b", json_string("2"));
        assert_int_equal(kube_update(c, &kube_configmaps, NULL, NULL, got, &updated), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(updated, "data"), "b")), "2");
        /* got still carries the old resourceVersion: a second update is stale. */
        json_object_set_new(json_object_get(got, "data"), "c", json_string("3"));
        assert_int_equal(kube_update(c, &kube_configmaps, NULL, NULL, got, NULL), -ESTALE);
        assert_non_null(strstr(kube_client_error(c), ": 409 Conflict: "));
        assert_non_null(strstr(kube_client_error(c), "the object has been modified"));
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "crud", NULL, NULL), 0);
        assert_int_equal(kube_get(c, &kube_configmaps, "default", "crud", NULL), -ENOENT);
        assert_non_null(strstr(kube_client_error(c), ": 404 "));
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "crud", NULL, NULL), -ENOENT);
        json_t *bad = j("{\"metadata\": {\"name\": \"Bad_Name\"}}");
        assert_int_equal(kube_create(c, &kube_configmaps, "default", bad, NULL), -EINVAL);
        assert_non_null(strstr(kube_client_error(c), ": 422 "));
        json_decref(bad);
        json_decref(cm);
        json_decref(created);
        json_decref(got);
        json_decref(updated);
        kube_client_free(c);
}

/* ---- get-modify-update with a conflicting writer ---- */

struct modify_ctx {
        struct kube_client *other;
        unsigned calls;
};

static int add_label(json_t *obj, void *userdata) {
        struct modify_ctx *m = userdata;
        if (m->calls++ == 0) {
                /* Someone else writes between our get and our update. */
                json_t *p = j("{\"data\": {\"other\": \"yes\"}}");
                assert_int_equal(kube_patch(m->other, &kube_configmaps, "default", "mod", NULL, KUBE_PATCH_MERGE, p,
                                            NULL),
                                 0);
                json_decref(p);
        }
        json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
        if (json_object_get(labels, "mine"))
                return KUBE_MODIFY_SKIP;
        json_object_set_new(labels, "mine", json_string("yes"));
        return 0;
}

static void test_modify_retries_on_conflict(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        struct modify_ctx m = { .other = client(0) };
        create_cm(c, "mod", "{\"x\": \"1\"}");
        json_t *out;
        assert_int_equal(kube_modify(c, &kube_configmaps, "default", "mod", NULL, add_label, &m, 3, &out), 0);
        assert_int_equal(m.calls, 2);
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(out, "metadata"),
                                                                               "labels"), "mine")), "yes");
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "other")), "yes");
        json_decref(out);
        assert_int_equal(kube_modify(c, &kube_configmaps, "default", "mod", NULL, add_label, &m, 3, &out),
                         KUBE_MODIFY_SKIP);
        /* skipped: the object as it stands, the writer's change included */
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "other")), "yes");
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(out, "metadata"),
                                                                               "labels"), "mine")), "yes");
        json_decref(out);
        m.calls = 0;
        assert_int_equal(kube_modify(c, &kube_configmaps, "default", "mod", NULL, add_label, &m, 1, NULL),
                         KUBE_MODIFY_SKIP); /* label already there: the writer's change alone */
        assert_int_equal(kube_modify(c, &kube_configmaps, "default", "nope", NULL, add_label, &m, 3, NULL), -ENOENT);
        kube_client_free(m.other);
        kube_client_free(c);
}

static int always_conflict(json_t *obj, void *userdata) {
        struct kube_client *other = userdata;
        json_t *p = j("{\"data\": {\"bump\": \"x\"}}");
        json_object_set_new(json_object_get(p, "data"), "bump", json_string(rv_of(obj)));
        assert_int_equal(kube_patch(other, &kube_configmaps, "default", "mod", NULL, KUBE_PATCH_MERGE, p, NULL), 0);
        json_decref(p);
        json_object_set_new(json_object_get(obj, "data"), "lost", json_string("1"));
        return 0;
}

static void test_modify_gives_up(void **state) {
        (void)state;
        struct kube_client *c = client(0), *other = client(0);
        assert_int_equal(kube_modify(c, &kube_configmaps, "default", "mod", NULL, always_conflict, other, 3, NULL),
                         -ESTALE);
        json_t *got;
        assert_int_equal(kube_get(c, &kube_configmaps, "default", "mod", &got), 0);
        assert_null(json_object_get(json_object_get(got, "data"), "lost"));
        json_decref(got);
        kube_client_free(other);
        kube_client_free(c);
}

static int count_calls(json_t *obj, void *userdata) {
        (*(unsigned *)userdata)++;
        json_object_set_new(json_object_get(obj, "data"), "mine", json_string("yes"));
        return 0;
}

/* From a caller's copy: no GET when the copy is current, and only what fn changed is written (a merge patch),
 * not what only the copy has; a stale copy conflicts, and the second round starts from the server's object. */
static void test_modify_from_copy(void **state) {
        (void)state;
        struct kube_client *c = client(0), *other = client(0);
        json_t *copy, *out;
        unsigned calls = 0;
        create_cm(c, "from", "{\"x\": \"1\"}");
        assert_int_equal(kube_get(c, &kube_configmaps, "default", "from", &copy), 0);
        json_object_set_new(json_object_get(copy, "data"), "only-in-copy", json_string("1"));
        assert_int_equal(kube_modify_from(c, &kube_configmaps, "default", "from", NULL, copy, count_calls, &calls, 3,
                                          &out), 0);
        assert_int_equal(calls, 1);
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "mine")), "yes");
        assert_null(json_object_get(json_object_get(out, "data"), "only-in-copy"));
        json_t *p = j("{\"data\": {\"other\": \"yes\"}}");
        assert_int_equal(kube_patch(other, &kube_configmaps, "default", "from", NULL, KUBE_PATCH_MERGE, p, NULL), 0);
        json_decref(p);
        json_decref(out);
        calls = 0;
        assert_int_equal(kube_modify_from(c, &kube_configmaps, "default", "from", NULL, copy, count_calls, &calls, 3,
                                          &out), 0);
        assert_int_equal(calls, 2); /* the copy's version is old: 409, then GET */
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "other")), "yes");
        json_decref(out);
        json_decref(copy);
        kube_client_free(other);
        kube_client_free(c);
}

static int drop_labels(json_t *obj, void *userdata) {
        (void)userdata;
        return json_object_set_new(json_object_get(obj, "metadata"), "labels", json_null());
}

/* A null, which a merge patch cannot say (it would mean "delete"), goes as a PUT of the whole object: what only
 * the caller's copy has is written too then. */
static void test_modify_with_a_null_puts(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *cm = j("{\"metadata\": {\"name\": \"nulls\", \"labels\": {\"a\": \"b\"}}, \"data\": {\"x\": \"1\"}}");
        json_t *copy, *out;
        assert_int_equal(kube_create(c, &kube_configmaps, "default", cm, &copy), 0);
        json_object_set_new(json_object_get(copy, "data"), "only-in-copy", json_string("1"));
        assert_int_equal(kube_modify_from(c, &kube_configmaps, "default", "nulls", NULL, copy, drop_labels, NULL, 3,
                                          &out), 0);
        assert_null(json_object_get(json_object_get(json_object_get(out, "metadata"), "labels"), "a"));
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "only-in-copy")), "1");
        json_decref(out);
        json_decref(copy);
        json_decref(cm);
        kube_client_free(c);
}

/* ---- patches ---- */

static json_t *finalizers(const json_t *o) {
        return json_object_get(json_object_get(o, "metadata"), "finalizers");
}

static void test_patches(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *cm = j("{\"metadata\": {\"name\": \"patchme\", \"finalizers\": [\"pvescale.io/a\"]}, "
                       "\"data\": {\"k\": \"v\", \"drop\": \"x\"}}");
        assert_int_equal(kube_create(c, &kube_configmaps, "default", cm, NULL), 0);
        json_t *out, *p = j("{\"metadata\": {\"finalizers\": [\"pvescale.io/b\"]}}");
        /* Strategic merge: finalizers are a set (patchStrategy merge), so both stay. */
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "patchme", NULL, KUBE_PATCH_STRATEGIC, p, &out), 0);
        assert_int_equal(json_array_size(finalizers(out)), 2);
        json_decref(out);
        /* JSON merge patch replaces lists and deletes with null. */
        json_t *m = j("{\"metadata\": {\"finalizers\": [\"pvescale.io/c\"]}, \"data\": {\"drop\": null}}");
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "patchme", NULL, KUBE_PATCH_MERGE, m, &out), 0);
        assert_int_equal(json_array_size(finalizers(out)), 1);
        assert_string_equal(json_string_value(json_array_get(finalizers(out), 0)), "pvescale.io/c");
        assert_null(json_object_get(json_object_get(out, "data"), "drop"));
        json_decref(out);
        json_t *jp = j("[{\"op\": \"add\", \"path\": \"/data/added\", \"value\": \"yes\"},"
                       " {\"op\": \"remove\", \"path\": \"/metadata/finalizers\"}]");
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "patchme", NULL, KUBE_PATCH_JSON, jp, &out), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "data"), "added")), "yes");
        assert_null(finalizers(out));
        json_decref(out);
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "patchme", NULL, NULL), 0);
        json_decref(jp);
        json_decref(m);
        json_decref(p);
        json_decref(cm);
        kube_client_free(c);
}

/* ---- custom resources: status subresource, strategic patch refused ---- */

static const char *const claim_crd =
        "{\"apiVersion\": \"apiextensions.k8s.io/v1\", \"kind\": \"CustomResourceDefinition\","
        " \"metadata\": {\"name\": \"nodeclaims.pvescale.io\"},"
        " \"spec\": {\"group\": \"pvescale.io\", \"scope\": \"Cluster\","
        "  \"names\": {\"plural\": \"nodeclaims\", \"singular\": \"nodeclaim\", \"kind\": \"NodeClaim\","
        "             \"listKind\": \"NodeClaimList\"},"
        "  \"versions\": [{\"name\": \"v1alpha1\", \"served\": true, \"storage\": true,"
        "   \"subresources\": {\"status\": {}},"
        "   \"schema\": {\"openAPIV3Schema\": {\"type\": \"object\", \"properties\": {"
        "     \"spec\": {\"type\": \"object\", \"properties\": {\"nodePool\": {\"type\": \"string\"}}},"
        "     \"status\": {\"type\": \"object\", \"properties\": {\"vmid\": {\"type\": \"integer\"},"
        "                                                      \"host\": {\"type\": \"string\"}}}}}}}]}}";

/* A new CRD's resource is served once kube-apiserver has it Established: until then its paths answer 404. */
static void wait_served(struct kube_client *c, const struct kube_resource *rt) {
        int64_t deadline = ct_now_ms() + 60000;
        json_t *list = NULL;
        int r;
        while ((r = kube_list(c, rt, NULL, NULL, &list)) == -ENOENT && ct_now_ms() < deadline)
                ct_sleep_ms(100);
        assert_int_equal(r, 0);
        json_decref(list);
}

static void test_custom_resource_status(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *crd = j(claim_crd);
        assert_int_equal(kube_create(c, &kube_crds, NULL, crd, NULL), 0);
        json_decref(crd);
        wait_served(c, &kube_nodeclaims);
        json_t *claim = j("{\"apiVersion\": \"pvescale.io/v1alpha1\", \"kind\": \"NodeClaim\","
                          " \"metadata\": {\"name\": \"default-abc\"}, \"spec\": {\"nodePool\": \"default\"}}");
        json_t *out;
        assert_int_equal(kube_create(c, &kube_nodeclaims, NULL, claim, &out), 0);
        json_object_set_new(out, "status", j("{\"vmid\": 105, \"host\": \"pve1\"}"));
        json_t *st;
        assert_int_equal(kube_update(c, &kube_nodeclaims, NULL, "status", out, &st), 0);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "status"), "vmid")), 105);
        json_decref(out);
        json_t *p = j("{\"spec\": {\"nodePool\": \"other\"}}");
        assert_int_equal(kube_patch(c, &kube_nodeclaims, NULL, "default-abc", NULL, KUBE_PATCH_STRATEGIC, p, NULL),
                         -EOPNOTSUPP);
        assert_non_null(strstr(kube_client_error(c), ": 415 "));
        assert_int_equal(kube_patch(c, &kube_nodeclaims, NULL, "default-abc", NULL, KUBE_PATCH_MERGE, p, &out), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(out, "status"), "host")), "pve1");
        json_decref(out);
        json_decref(p);
        json_decref(st);
        json_decref(claim);
        kube_client_free(c);
}

/* A status write answered with metadata alone: the copy is what the server holds, including its new version. */
static void test_update_from_as_sent(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *claim = j("{\"apiVersion\": \"pvescale.io/v1alpha1\", \"kind\": \"NodeClaim\","
                          " \"metadata\": {\"name\": \"default-sent\"}, \"spec\": {\"nodePool\": \"default\"}}");
        json_t *before, *stored, *stored2, *got;
        assert_int_equal(kube_create(c, &kube_nodeclaims, NULL, claim, &before), 0);
        json_t *obj = json_deep_copy(before);
        json_object_set_new(obj, "status", j("{\"vmid\": 107, \"host\": \"pve2\"}"));
        assert_int_equal(kube_update_from_as_sent(c, &kube_nodeclaims, NULL, "status", before, obj, &stored), 0);
        assert_int_equal(kube_get(c, &kube_nodeclaims, NULL, "default-sent", &got), 0);
        assert_true(json_equal(stored, got));
        json_decref(got);
        /* The answer carries no spec: a spec change, which the status subresource ignores, stays in the copy. */
        json_t *obj2 = json_deep_copy(stored);
        json_object_set_new(json_object_get(obj2, "spec"), "nodePool", json_string("elsewhere"));
        json_object_set_new(json_object_get(obj2, "status"), "vmid", json_integer(108));
        assert_int_equal(kube_update_from_as_sent(c, &kube_nodeclaims, NULL, "status", stored, obj2, &stored2), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(stored2, "spec"), "nodePool")),
                            "elsewhere");
        assert_int_equal(kube_get(c, &kube_nodeclaims, NULL, "default-sent", &got), 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(got, "spec"), "nodePool")), "default");
        assert_int_equal(json_integer_value(json_object_get(json_object_get(got, "status"), "vmid")), 108);
        assert_true(json_equal(json_object_get(got, "metadata"), json_object_get(stored2, "metadata")));
        json_decref(got);
        /* Written from the first copy again: the version it carries is stale. */
        json_t *stale = NULL;
        assert_int_equal(kube_update_from_as_sent(c, &kube_nodeclaims, NULL, "status", before, obj, &stale), -ESTALE);
        assert_null(stale);
        json_decref(obj2);
        json_decref(stored2);
        json_decref(stored);
        json_decref(obj);
        json_decref(before);
        json_decref(claim);
        kube_client_free(c);
}

/* ---- lists ---- */

static void test_list_pages_and_selectors(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        char name[32];
        for (int i = 0; i < 7; i++) {
                snprintf(name, sizeof name, "page-%d", i);
                create_cm(c, name, i % 2 ? "{\"set\": \"pages\", \"odd\": \"yes\"}" : "{\"set\": \"pages\"}");
        }
        struct kube_list_options o = { .label_selector = "set=pages", .limit = 2 };
        json_t *list;
        assert_int_equal(kube_list(c, &kube_configmaps, "default", &o, &list), 0);
        assert_int_equal(json_array_size(json_object_get(list, "items")), 7);
        assert_non_null(rv_of(list));
        assert_null(json_object_get(json_object_get(list, "metadata"), "continue"));
        json_decref(list);
        o.label_selector = "set=pages,odd=yes";
        assert_int_equal(kube_list(c, &kube_configmaps, NULL, &o, &list), 0);
        assert_int_equal(json_array_size(json_object_get(list, "items")), 3);
        json_decref(list);
        struct kube_list_options f = { .field_selector = "metadata.name=page-3" };
        assert_int_equal(kube_list(c, &kube_configmaps, "default", &f, &list), 0);
        assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
        json_decref(list);
        struct kube_list_options bad = { .field_selector = "data.a=1" };
        assert_int_equal(kube_list(c, &kube_configmaps, "default", &bad, &list), -EINVAL);
        assert_non_null(strstr(kube_client_error(c), ": 400 "));
        assert_non_null(strstr(kube_client_error(c), "\"data.a\" is not a known field selector"));
        kube_client_free(c);
}

/* ---- pods: events, binding, eviction ---- */

static json_t *pod(const char *name) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"metadata\": {\"name\": \"%s\", \"labels\": {\"app\": \"%s\"}}, \"spec\": {\"schedulerName\": "
                 "\"none\", \"containers\": [{\"name\": \"c\", \"image\": \"registry.k8s.io/pause:3.10\"}]}}",
                 name, name);
        return j(text);
}

static void test_events(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *p = pod("evented"), *created, *list;
        assert_int_equal(kube_create(c, &kube_pods, "default", p, &created), 0);
        assert_int_equal(kube_event_emit(c, &kube_pods, created, "Warning", "FailedScaleUp",
                                         "no host has 12 free cores in one NUMA node (best: pve2 numa1 with 8)", NULL),
                         0);
        assert_int_equal(kube_event_emit(c, &kube_pods, created, "Normal", "Nominated", "nominated to claim default-x",
                                         "pvescale-test"),
                         0);
        struct kube_list_options o = { .field_selector = "involvedObject.name=evented" };
        assert_int_equal(kube_list(c, &kube_events, "default", &o, &list), 0);
        assert_int_equal(json_array_size(json_object_get(list, "items")), 2);
        bool warned = false;
        size_t i;
        json_t *ev;
        json_array_foreach(json_object_get(list, "items"), i, ev) {
                const json_t *inv = json_object_get(ev, "involvedObject");
                assert_string_equal(json_string_value(json_object_get(inv, "kind")), "Pod");
                assert_string_equal(json_string_value(json_object_get(inv, "uid")),
                                    json_string_value(json_object_get(json_object_get(created, "metadata"), "uid")));
                if (strcmp(json_string_value(json_object_get(ev, "reason")), "FailedScaleUp") == 0) {
                        warned = true;
                        assert_string_equal(json_string_value(json_object_get(ev, "type")), "Warning");
                        assert_non_null(strstr(json_string_value(json_object_get(ev, "message")), "pve2 numa1"));
                }
        }
        assert_true(warned);
        json_t *cl = j("{\"metadata\": {\"name\": \"default-abc\"}}");
        assert_int_equal(kube_event_emit(c, &kube_nodeclaims, cl, "Normal", "Launched", "vm 105", NULL), 0);
        json_decref(cl);
        json_decref(list);
        json_decref(created);
        json_decref(p);
        kube_client_free(c);
}

static void test_evict(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *q = pod("evictme");
        assert_int_equal(kube_create(c, &kube_pods, "default", q, NULL), 0);
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.grace_period_seconds = 0;
        assert_int_equal(kube_evict(c, "default", "evictme", &o), 0);
        assert_int_equal(kube_get(c, &kube_pods, "default", "evictme", NULL), -ENOENT);
        assert_int_equal(kube_evict(c, "default", "evictme", NULL), -ENOENT);
        /* A ready pod guarded by a PodDisruptionBudget: 429, returned at once (no Retry-After, no retry). */
        json_t *g = pod("guarded"), *created;
        assert_int_equal(kube_create(c, &kube_pods, "default", g, &created), 0);
        json_object_set_new(created, "status", j("{\"phase\": \"Running\", \"conditions\": [{\"type\": \"Ready\", "
                                                 "\"status\": \"True\"}]}"));
        assert_int_equal(kube_update(c, &kube_pods, NULL, "status", created, NULL), 0);
        json_t *pdb = j("{\"metadata\": {\"name\": \"guard\"}, \"spec\": {\"minAvailable\": 1, "
                        "\"selector\": {\"matchLabels\": {\"app\": \"guarded\"}}}}");
        assert_int_equal(kube_create(c, &kube_pdbs, "default", pdb, NULL), 0);
        assert_int_equal(kube_evict(c, "default", "guarded", NULL), -EBUSY);
        assert_non_null(strstr(kube_client_error(c), ": 429 "));
        assert_non_null(strstr(kube_client_error(c), "disruption budget"));
        assert_int_equal(kube_get(c, &kube_pods, "default", "guarded", NULL), 0);
        json_decref(pdb);
        json_decref(created);
        json_decref(g);
        json_decref(q);
        kube_client_free(c);
}

static void test_delete_options(void **state) {
        (void)state;
        struct kube_client *c = client(0);
        json_t *created, *out;
        create_cm(c, "delopt", NULL);
        assert_int_equal(kube_get(c, &kube_configmaps, "default", "delopt", &created), 0);
        struct kube_delete_options o = KUBE_DELETE_OPTIONS_INIT;
        o.propagation = KUBE_PROPAGATION_FOREGROUND;
        o.precondition_uid = "00000000-0000-0000-0000-000000000000";
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "delopt", &o, NULL), -ESTALE);
        assert_non_null(strstr(kube_client_error(c), ": 409 "));
        assert_non_null(strstr(kube_client_error(c), "does not match the UID in record"));
        o.precondition_uid = json_string_value(json_object_get(json_object_get(created, "metadata"), "uid"));
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "delopt", &o, &out), 0);
        assert_non_null(out);
        json_decref(out);
        json_decref(created);
        kube_client_free(c);
}

/* ---- retries, auth, TLS ---- */

static void test_auth_and_tls(void **state) {
        (void)state;
        struct kube_config bad = cfg;
        struct kube_client *c;
        bad.token = "not-the-token"; /* and no client certificate, which kube-apiserver would take first */
        bad.cert_file = bad.key_file = bad.cert_data = bad.key_data = NULL;
        assert_int_equal(kube_client_new(&bad, NULL, &c), 0);
        assert_int_equal(kube_get(c, &kube_namespaces, NULL, "default", NULL), -EACCES);
        kube_client_free(c);
        struct kube_config noca = cfg;
        noca.ca_data = NULL; /* the system CAs do not know the simulator's CA */
        struct kube_client_options o = { .max_retries = KUBE_NO_RETRY };
        assert_int_equal(kube_client_new(&noca, &o, &c), 0);
        assert_int_equal(kube_get(c, &kube_namespaces, NULL, "default", NULL), -EKEYREJECTED);
        kube_client_free(c);
        noca.insecure = true;
        assert_int_equal(kube_client_new(&noca, &o, &c), 0);
        assert_int_equal(kube_get(c, &kube_namespaces, NULL, "default", NULL), 0);
        kube_client_free(c);
}

/* ---- informer, stepped by hand ---- */

struct event_log {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        char entries[256][96];
        size_t n;
        unsigned synced;
};

static int record(enum kube_watch_event ev, const json_t *obj, void *userdata) {
        static const char *const names[] = { "ADDED", "MODIFIED", "DELETED", "SYNCED" };
        struct event_log *log = userdata;
        pthread_mutex_lock(&log->lock);
        if (ev == KUBE_EVENT_SYNCED)
                log->synced++;
        if (log->n < 256)
                snprintf(log->entries[log->n++], 96, "%s %s", names[ev],
                         obj ? json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")) : "-");
        pthread_cond_broadcast(&log->cond);
        pthread_mutex_unlock(&log->lock);
        return 0;
}

static void log_init(struct event_log *log) {
        memset(log, 0, sizeof *log);
        pthread_mutex_init(&log->lock, NULL);
        pthread_cond_init(&log->cond, NULL);
}

static size_t count(struct event_log *log, const char *entry) {
        size_t n = 0;
        pthread_mutex_lock(&log->lock);
        for (size_t i = 0; i < log->n; i++)
                n += strcmp(log->entries[i], entry) == 0;
        pthread_mutex_unlock(&log->lock);
        return n;
}

/* How many objects the events say exist: names whose last ADDED or MODIFIED no DELETED followed. */
static size_t live(struct event_log *log) {
        size_t n = 0;
        pthread_mutex_lock(&log->lock);
        for (size_t i = 0; i < log->n; i++) {
                const char *name = strchr(log->entries[i], ' ') + 1;
                bool last = log->entries[i][0] != 'S';
                for (size_t k = i + 1; last && k < log->n; k++)
                        last = strcmp(strchr(log->entries[k], ' ') + 1, name) != 0;
                n += last && log->entries[i][0] != 'D';
        }
        pthread_mutex_unlock(&log->lock);
        return n;
}

static void dump(struct event_log *log) {
        for (size_t i = 0; i < log->n; i++)
                fprintf(stderr, "  event %zu: %s\n", i, log->entries[i]);
}

static bool wait_for(struct event_log *log, const char *entry, long timeout_ms) {
        int64_t deadline = ct_now_ms() + timeout_ms;
        while (ct_now_ms() < deadline) {
                if (count(log, entry) > 0)
                        return true;
                ct_sleep_ms(20);
        }
        dump(log);
        return false;
}

static void test_informer_list_watch_resume(void **state) {
        (void)state;
        struct kube_client *c = client(0), *w = client(0);
        struct event_log log;
        log_init(&log);
        create_cm(c, "inf-a", "{\"inf\": \"1\"}");
        create_cm(c, "inf-b", "{\"inf\": \"1\"}");
        create_cm(c, "other", "{\"inf\": \"2\"}");
        struct kube_informer_options o = { .label_selector = "inf=1", .watch_timeout_s = 1 };
        struct kube_informer *inf;
        assert_int_equal(kube_informer_new(w, &kube_configmaps, "default", &o, record, &log, &inf), 0);
        assert_int_equal(kube_informer_step(inf), 0); /* list */
        assert_int_equal(log.n, 3);
        assert_int_equal(count(&log, "ADDED inf-a") + count(&log, "ADDED inf-b"), 2);
        assert_string_equal(log.entries[2], "SYNCED -");
        assert_int_equal(live(&log), 2);
        json_t *p = j("{\"data\": {\"v\": \"2\"}}");
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "inf-a", NULL, KUBE_PATCH_MERGE, p, NULL), 0);
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "other", NULL, KUBE_PATCH_MERGE, p, NULL), 0);
        create_cm(c, "inf-c", "{\"inf\": \"1\"}");
        assert_int_equal(kube_informer_step(inf), 0); /* watch from the list's rv until timeoutSeconds */
        assert_int_equal(count(&log, "MODIFIED inf-a"), 1);
        assert_int_equal(count(&log, "ADDED inf-c"), 1);
        assert_int_equal(count(&log, "MODIFIED other"), 0);
        /* The next session resumes from the last resource version: nothing is delivered twice. */
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "inf-b", NULL, NULL), 0);
        assert_int_equal(kube_informer_step(inf), 0);
        assert_int_equal(count(&log, "DELETED inf-b"), 1);
        assert_int_equal(count(&log, "MODIFIED inf-a"), 1);
        assert_int_equal(count(&log, "ADDED inf-c"), 1);
        /* A label change that leaves the selector is a DELETED. */
        json_t *relabel = j("{\"metadata\": {\"labels\": {\"inf\": \"gone\"}}}");
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "inf-c", NULL, KUBE_PATCH_MERGE, relabel, NULL), 0);
        assert_int_equal(kube_informer_step(inf), 0);
        assert_int_equal(count(&log, "DELETED inf-c"), 1);
        const struct kube_informer_stats *st = kube_informer_stats(inf);
        assert_int_equal(st->lists, 1);
        assert_int_equal(st->watches, 3);
        assert_int_equal(st->resumes, 3);
        assert_int_equal(st->relists_410, 0);
        assert_int_equal(live(&log), 1);
        json_decref(relabel);
        json_decref(p);
        kube_informer_free(inf);
        kube_client_free(w);
        kube_client_free(c);
}

static void test_informer_relists_on_410(void **state) {
        (void)state;
        struct kube_client *c = client(0), *w = client(0);
        struct event_log log;
        log_init(&log);
        create_cm(c, "gone-a", "{\"gone\": \"1\"}");
        create_cm(c, "gone-b", "{\"gone\": \"1\"}");
        struct kube_informer_options o = { .label_selector = "gone=1", .watch_timeout_s = 1 };
        struct kube_informer *inf;
        assert_int_equal(kube_informer_new(w, &kube_configmaps, "default", &o, record, &log, &inf), 0);
        assert_int_equal(kube_informer_step(inf), 0);
        /* While the informer is away: changes, then etcd's history compacted past its resource version (no watch
         * cache in front of etcd: the watch is answered 410). */
        json_t *p = j("{\"data\": {\"v\": \"x\"}}");
        assert_int_equal(kube_patch(c, &kube_configmaps, "default", "gone-a", NULL, KUBE_PATCH_MERGE, p, NULL), 0);
        assert_int_equal(kube_delete(c, &kube_configmaps, "default", "gone-b", NULL, NULL), 0);
        create_cm(c, "gone-c", "{\"gone\": \"1\"}");
        char name[32];
        for (int i = 0; i < 10; i++) {
                snprintf(name, sizeof name, "filler-%d", i);
                create_cm(c, name, NULL);
        }
        assert_int_equal(ct_admin(ep, "POST", "/actions/etcd-compact", "{}"), 200);
        assert_int_equal(kube_informer_step(inf), 0); /* watch → ERROR 410 Expired */
        assert_int_equal(kube_informer_stats(inf)->relists_410, 1);
        size_t before = log.n;
        assert_int_equal(kube_informer_step(inf), 0); /* relist and diff against the store */
        assert_int_equal(kube_informer_stats(inf)->lists, 2);
        assert_int_equal(log.n - before, 4);
        assert_int_equal(count(&log, "DELETED gone-b"), 1);
        assert_int_equal(count(&log, "MODIFIED gone-a"), 1);
        assert_int_equal(count(&log, "ADDED gone-c"), 1);
        assert_string_equal(log.entries[log.n - 1], "SYNCED -");
        assert_int_equal(live(&log), 2);
        json_decref(p);
        kube_informer_free(inf);
        kube_client_free(w);
        kube_client_free(c);
}

static void test_informer_backs_off_on_errors(void **state) {
        (void)state;
        struct kube_client *c = client(0), *w = client(KUBE_NO_RETRY);
        struct event_log log;
        log_init(&log);
        create_cm(c, "boff", "{\"boff\": \"1\"}");
        struct kube_informer_options o = { .label_selector = "boff=1", .backoff_base_ms = 300, .backoff_max_ms = 300 };
        struct kube_informer *inf;
        assert_int_equal(kube_informer_new(w, &kube_configmaps, "default", &o, record, &log, &inf), 0);
        assert_int_equal(ct_knob(ep, "kube_unreachable", "true"), 200); /* the fault proxy resets the connection */
        int64_t t0 = ct_now_ms();
        assert_int_equal(kube_informer_step(inf), 0); /* the list fails, then the informer sleeps the backoff */
        assert_true(ct_now_ms() - t0 >= 150);          /* at least half of the 300 ms delay */
        assert_int_equal(kube_informer_stats(inf)->failures, 1);
        assert_int_equal(log.n, 0);
        assert_int_equal(ct_knob(ep, "kube_unreachable", "false"), 200);
        assert_int_equal(kube_informer_step(inf), 0);
        assert_int_equal(count(&log, "ADDED boff"), 1);
        assert_int_equal(kube_informer_stats(inf)->lists, 1); /* the failed list counts as a failure only */
        kube_informer_free(inf);
        kube_client_free(w);
        kube_client_free(c);
}

/* ---- informer in its own thread: disconnect and resume ---- */

struct runner {
        struct kube_informer *inf;
        int result;
};

static void *run_informer(void *arg) {
        struct runner *r = arg;
        r->result = kube_informer_run(r->inf);
        return NULL;
}

static void test_informer_thread_disconnect(void **state) {
        (void)state;
        struct kube_client *c = client(0), *w = client(0);
        atomic_bool stop = false;
        kube_client_set_cancel(w, &stop);
        struct event_log log;
        log_init(&log);
        create_cm(c, "thr-a", "{\"thr\": \"1\"}");
        struct kube_informer_options o = { .label_selector = "thr=1" };
        struct runner run = { 0 };
        assert_int_equal(kube_informer_new(w, &kube_configmaps, "default", &o, record, &log, &run.inf), 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, run_informer, &run), 0);
        assert_true(wait_for(&log, "SYNCED -", 10000));
        ct_sleep_ms(200); /* the watch is open */
        assert_int_equal(ct_admin(ep, "POST", "/actions/disconnect-watches", "{}"), 200);
        create_cm(c, "thr-b", "{\"thr\": \"1\"}");
        assert_true(wait_for(&log, "ADDED thr-b", 10000));
        atomic_store(&stop, true); /* interrupts the open watch within about a second */
        pthread_join(t, NULL);
        assert_int_equal(run.result, 0);
        const struct kube_informer_stats *st = kube_informer_stats(run.inf);
        assert_int_equal(st->lists, 1);
        assert_true(st->resumes >= 1);
        assert_true(st->watches >= 2);
        assert_int_equal(count(&log, "ADDED thr-a"), 1);
        assert_int_equal(count(&log, "ADDED thr-b"), 1);
        kube_informer_free(run.inf);
        kube_client_free(w);
        kube_client_free(c);
}

static int stop_on_second(enum kube_watch_event ev, const json_t *obj, void *userdata) {
        (void)obj;
        unsigned *n = userdata;
        return ev == KUBE_EVENT_ADDED && ++*n == 2 ? -ECANCELED - 1000 : 0;
}

static void test_informer_callback_error_stops(void **state) {
        (void)state;
        struct kube_client *w = client(0);
        unsigned n = 0;
        struct kube_informer_options o = { .label_selector = "set=pages" };
        struct kube_informer *inf;
        assert_int_equal(kube_informer_new(w, &kube_configmaps, "default", &o, stop_on_second, &n, &inf), 0);
        assert_int_equal(kube_informer_run(inf), -ECANCELED - 1000);
        assert_int_equal(n, 2);
        kube_informer_free(inf);
        kube_client_free(w);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_crud),
                cmocka_unit_test(test_modify_retries_on_conflict),
                cmocka_unit_test(test_modify_gives_up),
                cmocka_unit_test(test_modify_from_copy),
                cmocka_unit_test(test_modify_with_a_null_puts),
                cmocka_unit_test(test_patches),
                cmocka_unit_test(test_custom_resource_status),
                cmocka_unit_test(test_update_from_as_sent),
                cmocka_unit_test(test_list_pages_and_selectors),
                cmocka_unit_test(test_events),
                cmocka_unit_test(test_evict),
                cmocka_unit_test(test_delete_options),
                cmocka_unit_test(test_auth_and_tls),
                cmocka_unit_test(test_informer_list_watch_resume),
                cmocka_unit_test(test_informer_relists_on_410),
                cmocka_unit_test(test_informer_backs_off_on_errors),
                cmocka_unit_test(test_informer_thread_disconnect),
                cmocka_unit_test(test_informer_callback_error_stops),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
