/* Tests for the pure parts of coordinator/pve: form encoding, builders checked against the PVE 8.4 API schema,
 * UPIDs, exit statuses, error mapping, template lookup. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pve.h"
#include "testutil.h"

/* ---- the schema ---- */

static json_t *schema;

static int load_schema(void **state) {
        (void)state;
        const char *shared = getenv("PVESCALE_SHARED");
        char path[1024];
        snprintf(path, sizeof path, "%s/data/pve-api-schema.json", shared ? shared : "../shared");
        json_error_t e;
        schema = json_load_file(path, 0, &e);
        if (!schema)
                fprintf(stderr, "cannot load %s: %s\n", path, e.text);
        return schema ? 0 : -1;
}

static int free_schema(void **state) {
        (void)state;
        json_decref(schema);
        return 0;
}

static const json_t *schema_node(const json_t *nodes, const char *path) {
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n) {
                const char *p = json_string_value(json_object_get(n, "path"));
                if (p && strcmp(p, path) == 0)
                        return n;
                const json_t *found = schema_node(json_object_get(n, "children"), path);
                if (found)
                        return found;
        }
        return NULL;
}

/* The schema property for a parameter name; "numa0" finds "numa[n]". */
static const json_t *schema_prop(const json_t *props, const char *key) {
        const json_t *p = json_object_get(props, key);
        if (p)
                return p;
        size_t n = strlen(key), digits = 0;
        while (digits < n && key[n - 1 - digits] >= '0' && key[n - 1 - digits] <= '9')
                digits++;
        if (digits == 0 || digits == n)
                return NULL;
        char indexed[128];
        snprintf(indexed, sizeof indexed, "%.*s[n]", (int)(n - digits), key);
        return json_object_get(props, indexed);
}

static void check_value(const char *key, const json_t *prop, const char *value) {
        const char *type = json_string_value(json_object_get(prop, "type"));
        char *end;
        if (type && strcmp(type, "integer") == 0) {
                long long v = strtoll(value, &end, 10);
                if (*end || end == value)
                        fail_msg("%s=%s: not an integer", key, value);
                json_t *min = json_object_get(prop, "minimum");
                if (min && v < json_integer_value(min))
                        fail_msg("%s=%s: below the minimum", key, value);
        }
        if (type && strcmp(type, "boolean") == 0 && strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
                fail_msg("%s=%s: not 0/1", key, value);
        json_t *en = json_object_get(prop, "enum");
        if (!en)
                return;
        size_t i;
        json_t *e;
        json_array_foreach(en, i, e) {
                if (strcmp(json_string_value(e), value) == 0)
                        return;
        }
        fail_msg("%s=%s: not in the enum", key, value);
}

/* The concrete path fits the template; path parameters are collected into present. */
static void check_path(const struct pve_request *r, json_t *present) {
        char tpl[512], path[512], *sp1, *sp2;
        snprintf(tpl, sizeof tpl, "%s", r->endpoint);
        snprintf(path, sizeof path, "%s", r->path);
        char *t = strtok_r(tpl, "/", &sp1), *p = strtok_r(path, "/", &sp2);
        for (; t && p; t = strtok_r(NULL, "/", &sp1), p = strtok_r(NULL, "/", &sp2)) {
                if (t[0] == '{') {
                        t[strlen(t) - 1] = '\0';
                        json_object_set_new(present, t + 1, json_true());
                        continue;
                }
                if (strcmp(t, p) != 0)
                        fail_msg("path %s does not fit %s", r->path, r->endpoint);
        }
        if (t || p)
                fail_msg("path %s does not fit %s", r->path, r->endpoint);
}

/* Every parameter is known, well typed, and every required one is there, as the simulator checks. */
static void assert_schema_ok(const struct pve_request *r) {
        const json_t *node = schema_node(schema, r->endpoint);
        if (!node)
                fail_msg("no schema path %s", r->endpoint);
        const json_t *info = json_object_get(json_object_get(node, "info"), r->method);
        if (!info)
                fail_msg("no %s on %s", r->method, r->endpoint);
        const json_t *props = json_object_get(json_object_get(info, "parameters"), "properties");
        json_t *present = json_object();
        check_path(r, present);
        for (size_t i = 0; i < r->params.n; i++) {
                const json_t *prop = schema_prop(props, r->params.items[i].key);
                if (!prop)
                        fail_msg("%s %s: unknown parameter %s", r->method, r->endpoint, r->params.items[i].key);
                check_value(r->params.items[i].key, prop, r->params.items[i].value);
                json_object_set_new(present, r->params.items[i].key, json_true());
        }
        if (r->upload_data)
                json_object_set_new(present, "filename", json_true());
        const char *key;
        json_t *prop;
        json_object_foreach((json_t *)props, key, prop) {
                if (!json_integer_value(json_object_get(prop, "optional")) && !json_object_get(present, key))
                        fail_msg("%s %s: required parameter %s missing", r->method, r->endpoint, key);
        }
        json_decref(present);
}

#define CHECK(build)                                              \
        do {                                                      \
                struct pve_request req_;                          \
                assert_int_equal(build, 0);                       \
                assert_schema_ok(&req_);                          \
                pve_request_done(&req_);                          \
        } while (0)

/* ---- tests ---- */

static void test_params_encode(void **state) {
        (void)state;
        struct pve_params p = PVE_PARAMS_INIT;
        char *s = pve_params_encode(&p);
        assert_string_equal(s, "");
        free(s);
        pve_params_add(&p, "name", "k8s-a");
        pve_params_add_int(&p, "cores", 4);
        pve_params_add_bool(&p, "numa", true);
        pve_params_add(&p, "numa0", "cpus=0-3,hostnodes=0,memory=8192,policy=bind");
        pve_params_add(&p, "tags", "pvescale;pool-a");
        pve_params_add(&p, "description", "claim uid=1 & more\nline 2 100%");
        pve_params_add(&p, "sshkeys", "ssh-ed25519%20AAAA");
        assert_int_equal(p.error, 0);
        s = pve_params_encode(&p);
        assert_string_equal(s, "name=k8s-a&cores=4&numa=1&numa0=cpus%3D0-3%2Chostnodes%3D0%2Cmemory%3D8192%2Cpolicy"
                               "%3Dbind&tags=pvescale%3Bpool-a&description=claim%20uid%3D1%20%26%20more%0Aline%202%20"
                               "100%25&sshkeys=ssh-ed25519%2520AAAA");
        free(s);
        assert_string_equal(test_param(&p, "cores"), "4");
        assert_null(test_param(&p, "memory"));
        pve_params_done(&p);
}

static void test_params_refuse_affinity(void **state) {
        (void)state;
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_add_int(&p, "cores", 4);
        assert_int_equal(pve_params_add(&p, "affinity", "0-3"), -EPERM);
        assert_int_equal(pve_params_add_int(&p, "memory", 8192), -EPERM); /* sticky */
        assert_int_equal(p.error, -EPERM);
        assert_int_equal(p.n, 1);
        struct pve_request r;
        assert_int_equal(pve_req_vm_config_set(&r, "pve1", 105, true, &p), -EPERM);
        pve_request_done(&r);
        pve_params_done(&p);
        struct pve_params q = PVE_PARAMS_INIT;
        assert_int_equal(pve_params_add(&q, "hookscript", "local:snippets/pin.sh"), -EPERM);
        pve_params_done(&q);
        struct pve_params e = PVE_PARAMS_INIT;
        assert_int_equal(pve_params_add(&e, "", "x"), -EINVAL);
        pve_params_done(&e);
}

static void test_builders_match_schema(void **state) {
        (void)state;
        struct pve_params cfg = PVE_PARAMS_INIT;
        pve_params_add_int(&cfg, "cores", 4);
        pve_params_add_int(&cfg, "sockets", 1);
        pve_params_add(&cfg, "memory", "8192");
        pve_params_add_int(&cfg, "balloon", 0);
        pve_params_add_bool(&cfg, "numa", true);
        pve_params_add(&cfg, "numa0", "cpus=0-3,hostnodes=0,memory=8192,policy=bind");
        pve_params_add(&cfg, "tags", "pvescale;default");
        pve_params_add(&cfg, "description", "claim");
        pve_params_add(&cfg, "net0", "virtio,bridge=vmbr0,queues=4");
        pve_params_add(&cfg, "ide2", "local:iso/claim.iso,media=cdrom");
        struct pve_params fw = PVE_PARAMS_INIT;
        pve_params_add_bool(&fw, "enable", true);
        struct pve_clone clone = { .newid = 105, .name = "default-abc", .pool = "k8s", .target = "pve1",
                                   .storage = "local-lvm", .format = "raw", .description = "d", .full = true };
        struct pve_firewall_rule rule = { .type = "group", .action = "kubernetes", .iface = "net0", .enable = true,
                                          .comment = "pvescale" };
        static const char iso[] = "ISO";
        CHECK(pve_req_cluster_status(&req_));
        CHECK(pve_req_cluster_resources(&req_, NULL));
        CHECK(pve_req_cluster_resources(&req_, "vm"));
        CHECK(pve_req_nextid(&req_, 0));
        CHECK(pve_req_nextid(&req_, 105));
        CHECK(pve_req_nodes(&req_));
        CHECK(pve_req_node_status(&req_, "pve1"));
        CHECK(pve_req_vm_list(&req_, "pve1"));
        CHECK(pve_req_vm_clone(&req_, "pve1", 9000, &clone));
        CHECK(pve_req_vm_config_get(&req_, "pve1", 105));
        CHECK(pve_req_vm_config_set(&req_, "pve1", 105, true, &cfg));
        CHECK(pve_req_vm_config_set(&req_, "pve1", 105, false, &cfg));
        CHECK(pve_req_vm_resize(&req_, "pve1", 105, "scsi0", "40G"));
        CHECK(pve_req_vm_status(&req_, "pve1", 105, "start"));
        CHECK(pve_req_vm_status(&req_, "pve1", 105, "stop"));
        CHECK(pve_req_vm_status(&req_, "pve1", 105, "shutdown"));
        CHECK(pve_req_vm_status(&req_, "pve1", 105, "reboot"));
        CHECK(pve_req_vm_status(&req_, "pve1", 105, "current"));
        CHECK(pve_req_vm_delete(&req_, "pve1", 105, true, true));
        CHECK(pve_req_task_status(&req_, "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root@pam!autoscaler:"));
        CHECK(pve_req_storage_content(&req_, "pve1", "local", "iso"));
        CHECK(pve_req_storage_content_delete(&req_, "pve1", "local", "local:iso/claim.iso", 0));
        CHECK(pve_req_storage_content_delete(&req_, "pve1", "local", "local:iso/claim.iso", 5));
        CHECK(pve_req_storage_upload(&req_, "pve1", "local", "iso", "claim.iso", iso, 3));
        CHECK(pve_req_vm_firewall_options_set(&req_, "pve1", 105, &fw));
        CHECK(pve_req_vm_firewall_rules(&req_, "pve1", 105));
        CHECK(pve_req_vm_firewall_rule_add(&req_, "pve1", 105, &rule));
        CHECK(pve_req_pools(&req_));
        CHECK(pve_req_pci_mappings(&req_));
        CHECK(pve_req_pool_vm(&req_, "k8s", 105, false));
        CHECK(pve_req_pool_vm(&req_, "k8s", 105, true));
        pve_params_done(&cfg);
        pve_params_done(&fw);
}

static void test_request_shapes(void **state) {
        (void)state;
        struct pve_request r;
        assert_int_equal(pve_req_storage_content_delete(&r, "pve1", "local", "local:iso/x y.iso", 0), 0);
        assert_string_equal(r.method, "DELETE");
        assert_string_equal(r.path, "/nodes/pve1/storage/local/content/local%3Aiso%2Fx%20y.iso");
        assert_null(test_param(&r.params, "delay"));
        pve_request_done(&r);
        /* PVE waits up to delay seconds (1-30) for the delete task */
        assert_int_equal(pve_req_storage_content_delete(&r, "pve1", "local", "local:iso/x.iso", 30), 0);
        assert_string_equal(test_param(&r.params, "delay"), "30");
        pve_request_done(&r);
        assert_int_equal(pve_req_storage_content_delete(&r, "pve1", "local", "local:iso/x.iso", 31), -EINVAL);

        const char *upid = "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmclone:9000:pvescale@pve!coordinator:";
        assert_int_equal(pve_req_task_status(&r, upid), 0);
        assert_string_equal(r.path, "/nodes/pve1/tasks/UPID%3Apve1%3A0001A2B3%3A00C0FFEE%3A66A1B2C3%3Aqmclone%3A9000"
                                    "%3Apvescale%40pve%21coordinator%3A/status");
        pve_request_done(&r);

        assert_int_equal(pve_req_vm_delete(&r, "pve1", 105, true, false), 0);
        assert_string_equal(r.path, "/nodes/pve1/qemu/105");
        assert_int_equal(r.params.n, 1);
        assert_string_equal(test_param(&r.params, "purge"), "1");
        pve_request_done(&r);

        struct pve_clone linked = { .newid = 120 };
        assert_int_equal(pve_req_vm_clone(&r, "pve1", 9000, &linked), 0);
        assert_null(test_param(&r.params, "full")); /* PVE's default: linked clone of a template */
        pve_request_done(&r);

        struct pve_clone none = { 0 };
        assert_int_equal(pve_req_vm_clone(&r, "pve1", 9000, &none), -EINVAL);
        pve_request_done(&r);
        assert_int_equal(pve_req_vm_status(&r, "pve1", 105, "hibernate"), -EINVAL);
        pve_request_done(&r);
        assert_int_equal(pve_req_node_status(&r, ""), -EINVAL);
        pve_request_done(&r);
        assert_int_equal(pve_req_vm_config_get(&r, "pve1", 0), -EINVAL);
        pve_request_done(&r);
        assert_int_equal(pve_req_task_status(&r, "UPID:bad"), -EINVAL);
        pve_request_done(&r);
}

static void test_upid(void **state) {
        (void)state;
        struct pve_upid u;
        assert_int_equal(pve_upid_parse("UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root@pam!autoscaler:", &u), 0);
        assert_string_equal(u.node, "pve1");
        assert_int_equal(u.pid, 0x0001A2B3);
        assert_int_equal(u.pstart, 0x00C0FFEE);
        assert_int_equal(u.starttime, 0x66A1B2C3);
        assert_string_equal(u.type, "qmstart");
        assert_string_equal(u.id, "105");
        assert_string_equal(u.user, "root@pam!autoscaler");
        /* Uploads have an empty id; pstart may have 9 hex digits. */
        assert_int_equal(pve_upid_parse("UPID:node-2:000000FF:1C0FFEE00:66A1B2C3:imgcopy::pvescale@pve!c:", &u), 0);
        assert_string_equal(u.id, "");
        assert_string_equal(u.type, "imgcopy");
        static const char *const bad[] = {
                "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root@pam",    /* no trailing colon */
                "UPID::0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root@pam:",       /* empty node */
                "UPID:pve1:XYZ:00C0FFEE:66A1B2C3:qmstart:105:root@pam:",        /* pid not hex */
                "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3::105:root@pam:",          /* empty type */
                "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root:",       /* user without realm */
                "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root@pam:x",  /* trailing text */
                "upid:pve1:0001A2B3:00C0FFEE:66A1B2C3:qmstart:105:root@pam:",   /* prefix */
                "UPID:pve1:0001A2B3:00C0FFEE:66A1B2C3:qm start:105:root@pam:",  /* space */
                "UPID:pve1:1FFFFFFFF:00C0FFEE:66A1B2C3:qmstart:105:root@pam:",  /* pid above 32 bits */
                "",
        };
        u.pid = 42;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(pve_upid_parse(bad[i], &u), -EINVAL);
        assert_int_equal(u.pid, 42); /* untouched by failures */
}

static void test_task_exit(void **state) {
        (void)state;
        assert_true(pve_task_exit_ok("OK"));
        assert_true(pve_task_exit_ok("WARNINGS: 2"));
        assert_false(pve_task_exit_ok("WARNINGS: "));
        assert_false(pve_task_exit_ok("WARNINGS: x"));
        assert_false(pve_task_exit_ok("unexpected status"));
        assert_false(pve_task_exit_ok("total memory for NUMA nodes must be equal to vm static memory"));
        assert_false(pve_task_exit_ok(""));
        assert_false(pve_task_exit_ok(NULL));
        assert_false(pve_task_exit_ok("OKAY"));
}

static void test_errno(void **state) {
        (void)state;
        assert_int_equal(pve_errno_from_status(200, NULL), 0);
        assert_int_equal(pve_errno_from_status(400, "Parameter verification failed."), -EINVAL);
        assert_int_equal(pve_errno_from_status(401, ""), -EACCES);
        assert_int_equal(pve_errno_from_status(403, "Permission check failed"), -EPERM);
        assert_int_equal(pve_errno_from_status(500, "unable to create VM 105: config file already exists"), -EEXIST);
        assert_int_equal(pve_errno_from_status(500, "Configuration file 'nodes/pve1/qemu-server/105.conf' does not exist"),
                         -ENOENT);
        assert_int_equal(pve_errno_from_status(500, "only root can set 'affinity' config"), -EIO);
        assert_int_equal(pve_errno_from_status(501, "Method 'GET /x' not implemented"), -EOPNOTSUPP);
        assert_int_equal(pve_errno_from_status(595, "No route to host"), -EHOSTDOWN);
        assert_int_equal(pve_errno_from_status(502, "Bad gateway"), -EIO);
}

static void test_cluster_node_ip(void **state) {
        (void)state;
        json_t *st = test_json_parse("[{\"type\":\"cluster\",\"name\":\"lab\"},"
                           "{\"type\":\"node\",\"name\":\"pve1\",\"ip\":\"10.0.0.11\"},"
                           "{\"type\":\"node\",\"name\":\"pve2\",\"ip\":\"10.0.0.12\"}]");
        assert_string_equal(pve_cluster_node_ip(st, "pve2"), "10.0.0.12");
        assert_null(pve_cluster_node_ip(st, "lab"));
        assert_null(pve_cluster_node_ip(st, "pve3"));
        json_decref(st);
}

static void test_cluster_node_at(void **state) {
        (void)state;
        json_t *st = test_json_parse("[{\"type\":\"cluster\",\"name\":\"lab\"},"
                           "{\"type\":\"node\",\"name\":\"pve1\",\"ip\":\"10.0.0.11\",\"online\":1},"
                           "{\"type\":\"node\",\"name\":\"pve2\",\"online\":0},{\"type\":\"node\"}]");
        struct pve_cluster_node n;
        assert_false(pve_cluster_node_at(st, 0, &n));
        assert_true(pve_cluster_node_at(st, 1, &n));
        assert_string_equal(n.name, "pve1");
        assert_string_equal(n.ip, "10.0.0.11");
        assert_true(n.online);
        assert_true(pve_cluster_node_at(st, 2, &n));
        assert_string_equal(n.name, "pve2");
        assert_null(n.ip);
        assert_false(n.online);
        assert_false(pve_cluster_node_at(st, 3, &n)); /* a node without a name */
        assert_false(pve_cluster_node_at(st, 4, &n)); /* past the end */
        json_decref(st);
}

/* A mapping's paths on one node, in the order qemu-server tries them; hostpciN property strings. */
static void test_mapping_paths(void **state) {
        (void)state;
        json_t *maps = json_loads("[{\"id\": \"other\", \"map\": [\"node=pve1,path=0000:01:00.0,id=10de:2204\"]},"
                                  " {\"id\": \"gpu\", \"map\": [\"node=pve2,path=0000:41:00.0,id=10de:2204\","
                                  " \"node=pve1,path=0000:42:00.0;43:00.0,id=10de:2204\","
                                  " \"node=pve1,path=0000:81:00,id=10de:2204\"]}]", 0, NULL);
        json_t *got = pve_mapping_paths(maps, "gpu", "pve1");
        char *text = json_dumps(got, JSON_COMPACT);
        assert_string_equal(text, "[\"0000:42:00.0\",\"0000:43:00.0\",\"0000:81:00\"]");
        free(text);
        json_decref(got);
        got = pve_mapping_paths(maps, "gpu", "pve3");
        assert_int_equal(json_array_size(got), 0);
        json_decref(got);
        json_decref(maps);
        char buf[64];
        assert_true(pve_prop_get("41:00.0,pcie=1", "host", "host", buf, sizeof buf));
        assert_string_equal(buf, "41:00.0");
        assert_true(pve_prop_get("mapping=gpu,pcie=1", "pcie", NULL, buf, sizeof buf));
        assert_string_equal(buf, "1");
        assert_false(pve_prop_get("mapping=gpu", "host", "host", buf, sizeof buf));
        pve_pci_full_path("41:00.0", 7, buf, sizeof buf);
        assert_string_equal(buf, "0000:41:00.0");
}

static void test_find_template(void **state) {
        (void)state;
        json_t *vms = test_json_parse("[{\"vmid\":9001,\"name\":\"k8s-template\",\"template\":1,\"tags\":\"k8s-template;ubuntu\"},"
                            "{\"vmid\":9000,\"name\":\"k8s-template\",\"template\":1,\"tags\":\"k8s-template\"},"
                            "{\"vmid\":100,\"name\":\"k8s-template\",\"status\":\"running\"},"
                            "{\"vmid\":9100,\"name\":\"talos\",\"template\":1,\"tags\":\"Talos,k8s\"}]");
        uint32_t id = 1;
        assert_int_equal(pve_find_template(vms, "k8s-template", NULL, &id), 0);
        assert_int_equal(id, 9000);
        const char *ubuntu[] = { "ubuntu", NULL };
        assert_int_equal(pve_find_template(vms, NULL, ubuntu, &id), 0);
        assert_int_equal(id, 9001);
        const char *talos[] = { "talos", "k8s", NULL };
        assert_int_equal(pve_find_template(vms, NULL, talos, &id), 0);
        assert_int_equal(id, 9100);
        const char *none[] = { "windows", NULL };
        id = 7;
        assert_int_equal(pve_find_template(vms, NULL, none, &id), -ENOENT);
        assert_int_equal(pve_find_template(vms, "nope", NULL, &id), -ENOENT);
        assert_int_equal(id, 7);
        /* By a node class's instanceTemplateRef. */
        json_t *by_tags = test_json_parse("{\"tags\": [\"talos\", \"k8s\"]}");
        json_t *by_name = test_json_parse("{\"name\": \"k8s-template\", \"tags\": [\"ubuntu\"]}");
        json_t *missing = test_json_parse("{\"name\": \"talos\", \"tags\": [\"ubuntu\"]}");
        assert_int_equal(pve_find_template_ref(vms, by_tags, &id), 0);
        assert_int_equal(id, 9100);
        assert_int_equal(pve_find_template_ref(vms, by_name, &id), 0);
        assert_int_equal(id, 9001);
        assert_int_equal(pve_find_template_ref(vms, missing, &id), -ENOENT);
        json_decref(by_tags);
        json_decref(by_name);
        json_decref(missing);
        json_decref(vms);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_params_encode),
                cmocka_unit_test(test_params_refuse_affinity),
                cmocka_unit_test(test_builders_match_schema),
                cmocka_unit_test(test_request_shapes),
                cmocka_unit_test(test_upid),
                cmocka_unit_test(test_task_exit),
                cmocka_unit_test(test_errno),
                cmocka_unit_test(test_cluster_node_ip),
                cmocka_unit_test(test_cluster_node_at),
                cmocka_unit_test(test_find_template),
                cmocka_unit_test(test_mapping_paths),
        };
        return cmocka_run_group_tests(tests, load_schema, free_schema);
}
