/* Integration test of coordinator/pve against the simulated Proxmox VE 8.4 API (which validates every call
 * against the API schema): discovery, nextid, clone and task polling, async and sync config, resize, ISO upload,
 * start/stop, NUMA start failure, delete, firewall, errors and faults. Run by test_coordinator_clients.py. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "clienttest.h"
#include "pve.h"

#define NODE "pve1"

static json_t *ep;
static uint32_t template_id;
static const struct pve_wait fast = { .poll_ms = 100, .timeout_ms = 20000 };

static struct pve_client *client_with(const char *secret) {
        struct pve_options o = { .url = ct_string(ep, "pve.r1.url"), .token_id = ct_string(ep, "pve.r1.token_id"),
                                 .token_secret = secret, .ca_file = ct_string(ep, "ca_file") };
        struct pve_client *c;
        assert_int_equal(pve_client_new(&o, &c), 0);
        return c;
}

static struct pve_client *client(void) {
        return client_with(ct_string(ep, "pve.r1.token_secret"));
}

static int setup(void **state) {
        (void)state;
        ep = ct_endpoints();
        if (!ep)
                return -1;
        template_id = (uint32_t)json_integer_value(
                json_object_get(json_object_get(json_object_get(json_object_get(ep, "pve"), "r1"), "templates"), NODE));
        return template_id ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        json_decref(ep);
        return 0;
}

/* Wait for a task and free its UPID. */
static int wait_task(struct pve_client *c, char *upid) {
        int r = pve_task_wait(c, upid, &fast);
        free(upid);
        return r;
}

/* Clone the template to a fresh VMID, waiting for the task. */
static uint32_t clone_vm(struct pve_client *c, const char *name) {
        uint32_t vmid;
        char *upid;
        assert_int_equal(pve_nextid(c, &vmid), 0);
        struct pve_clone o = { .newid = vmid, .name = name, .description = "pvescale client test" };
        assert_int_equal(pve_vm_clone(c, NODE, template_id, &o, &upid), 0);
        struct pve_upid u;
        assert_int_equal(pve_upid_parse(upid, &u), 0);
        assert_string_equal(u.type, "qmclone");
        assert_int_equal(strtoul(u.id, NULL, 10), template_id); /* the id of a clone task is the source */
        assert_string_equal(u.user, ct_string(ep, "pve.r1.token_id"));
        if (wait_task(c, upid) < 0)
                fail_msg("clone: %s", pve_client_error(c));
        return vmid;
}

static void delete_vm(struct pve_client *c, uint32_t vmid) {
        char *upid;
        assert_int_equal(pve_vm_delete(c, NODE, vmid, true, true, &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
}

static void test_discovery(void **state) {
        (void)state;
        struct pve_client *c = client();
        json_t *st, *nodes, *ns, *res;
        assert_int_equal(pve_cluster_status(c, &st), 0);
        assert_string_equal(pve_cluster_node_ip(st, NODE), "127.0.0.1");
        assert_int_equal(pve_nodes(c, &nodes), 0);
        assert_int_equal(json_array_size(nodes), 1);
        assert_int_equal(pve_node_status(c, NODE, &ns), 0);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(ns, "cpuinfo"), "cpus")), 32);
        assert_int_equal(pve_cluster_resources(c, "node", &res), 0);
        assert_string_equal(json_string_value(json_object_get(json_array_get(res, 0), "node")), NODE);
        json_t *pools;
        assert_int_equal(pve_pools(c, &pools), 0);
        assert_true(json_is_array(pools));
        json_decref(pools);
        json_decref(res);
        json_decref(ns);
        json_decref(nodes);
        json_decref(st);
        assert_int_equal(pve_node_status(c, "pve9", NULL), -EIO);
        pve_client_free(c);
}

static void test_nextid_and_templates(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t a, b;
        assert_int_equal(pve_nextid(c, &a), 0); /* the answer is a JSON string */
        assert_true(a >= 100);
        assert_int_equal(pve_nextid(c, &b), 0);
        assert_int_not_equal(a, b); /* handed-out ids are reserved for a while */
        assert_int_equal(pve_nextid_check(c, template_id), -EEXIST);
        assert_non_null(strstr(pve_client_error(c), "already exists"));
        assert_int_equal(pve_nextid_check(c, 4242), 0);
        json_t *vms;
        uint32_t found;
        assert_int_equal(pve_vm_list(c, NODE, &vms), 0);
        assert_int_equal(pve_find_template(vms, "k8s-template", NULL, &found), 0);
        assert_int_equal(found, template_id);
        const char *tags[] = { "k8s-template", NULL };
        assert_int_equal(pve_find_template(vms, NULL, tags, &found), 0);
        assert_int_equal(found, template_id);
        json_decref(vms);
        pve_client_free(c);
}

static const char *cfg_str(const json_t *cfg, const char *key) {
        return json_string_value(json_object_get(cfg, key));
}

static void test_clone_config_start_delete(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t vmid = clone_vm(c, "client-a");
        char *upid;
        /* Cloning onto a taken id is refused at once. */
        struct pve_clone again = { .newid = vmid, .name = "client-a" };
        assert_int_equal(pve_vm_clone(c, NODE, template_id, &again, &upid), -EEXIST);
        assert_non_null(strstr(pve_client_error(c), ": HTTP 500 "));
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_add_int(&p, "cores", 4);
        pve_params_add_int(&p, "sockets", 1);
        pve_params_add(&p, "memory", "4096");
        pve_params_add_int(&p, "balloon", 0);
        pve_params_add_bool(&p, "numa", true);
        pve_params_add(&p, "numa0", "cpus=0-1,hostnodes=0,memory=2048,policy=bind");
        pve_params_add(&p, "numa1", "cpus=2-3,hostnodes=1,memory=2048,policy=bind");
        pve_params_add(&p, "tags", "pvescale;Pool-A;claim-a");
        pve_params_add(&p, "description", "pvescale claim uid=1234: a & b\nsecond line 100%");
        pve_params_add(&p, "net0", "virtio,bridge=vmbr0,queues=4");
        struct pve_request post;
        json_t *answer = NULL;
        assert_int_equal(pve_req_vm_config_set(&post, NODE, vmid, true, &p), 0);
        assert_int_equal(pve_send(c, &post, &answer), 0); /* POST is asynchronous: a task's UPID */
        pve_request_done(&post);
        assert_true(json_is_string(answer));
        upid = strdup(json_string_value(answer));
        json_decref(answer);
        struct pve_upid u;
        assert_int_equal(pve_upid_parse(upid, &u), 0);
        assert_string_equal(u.type, "qmconfig");
        assert_int_equal(wait_task(c, upid), 0);
        pve_params_done(&p);
        json_t *cfg;
        assert_int_equal(pve_vm_config_get(c, NODE, vmid, &cfg), 0);
        assert_int_equal(json_integer_value(json_object_get(cfg, "cores")), 4);
        assert_string_equal(cfg_str(cfg, "memory"), "4096");
        assert_string_equal(cfg_str(cfg, "numa1"), "cpus=2-3,hostnodes=1,memory=2048,policy=bind");
        assert_string_equal(cfg_str(cfg, "tags"), "claim-a;pool-a;pvescale");
        assert_string_equal(cfg_str(cfg, "description"), "pvescale claim uid=1234: a & b\nsecond line 100%");
        assert_null(json_object_get(cfg, "affinity"));
        json_decref(cfg);
        /* PUT is synchronous. */
        struct pve_params q = PVE_PARAMS_INIT;
        pve_params_add(&q, "name", "client-a-renamed");
        assert_int_equal(pve_vm_config_put(c, NODE, vmid, &q), 0);
        pve_params_done(&q);
        assert_int_equal(pve_vm_config_get(c, NODE, vmid, &cfg), 0);
        assert_string_equal(cfg_str(cfg, "name"), "client-a-renamed");
        json_decref(cfg);
        assert_int_equal(pve_vm_resize(c, NODE, vmid, "scsi0", "+2G", &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
        assert_int_equal(pve_vm_config_get(c, NODE, vmid, &cfg), 0);
        assert_non_null(strstr(cfg_str(cfg, "scsi0"), "size=22G"));
        json_decref(cfg);
        assert_int_equal(pve_vm_action(c, NODE, vmid, "start", &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
        json_t *cur;
        assert_int_equal(pve_vm_status_current(c, NODE, vmid, &cur), 0);
        assert_string_equal(cfg_str(cur, "status"), "running");
        json_decref(cur);
        /* A running VM cannot be deleted. */
        assert_int_equal(pve_vm_delete(c, NODE, vmid, true, true, &upid), -EIO);
        assert_non_null(strstr(pve_client_error(c), "is running"));
        assert_int_equal(pve_vm_action(c, NODE, vmid, "stop", &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
        delete_vm(c, vmid);
        assert_int_equal(pve_vm_config_get(c, NODE, vmid, &cfg), -ENOENT); /* 500 "does not exist" */
        assert_non_null(strstr(pve_client_error(c), ": HTTP 500 "));
        pve_client_free(c);
}

static void test_numa_mismatch_fails_the_start_task(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t vmid = clone_vm(c, "client-numa");
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_add(&p, "memory", "4096");
        pve_params_add_bool(&p, "numa", true);
        pve_params_add(&p, "numa0", "cpus=0-1,hostnodes=0,memory=1024,policy=bind");
        assert_int_equal(pve_vm_config_put(c, NODE, vmid, &p), 0);
        pve_params_done(&p);
        char *upid;
        assert_int_equal(pve_vm_action(c, NODE, vmid, "start", &upid), 0);
        assert_int_equal(wait_task(c, upid), -EIO);
        assert_non_null(strstr(pve_client_error(c), "task qmstart failed: "));
        assert_non_null(strstr(pve_client_error(c), "total memory for NUMA nodes must be equal to vm static memory"));
        delete_vm(c, vmid);
        pve_client_free(c);
}

static void test_parameter_errors(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t vmid = clone_vm(c, "client-bad");
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_add(&p, "numa0", "cpus=zero");
        assert_int_equal(pve_vm_config_put(c, NODE, vmid, &p), -EINVAL);
        assert_non_null(strstr(pve_client_error(c), ": HTTP 400 "));
        assert_non_null(strstr(pve_client_error(c), "PUT /nodes/{node}/qemu/{vmid}/config: HTTP 400 Parameter "
                                                    "verification failed. (numa0: "));
        pve_params_done(&p);
        /* affinity never leaves the client. */
        struct pve_params a = PVE_PARAMS_INIT;
        assert_int_equal(pve_params_add(&a, "affinity", "0-3"), -EPERM);
        assert_int_equal(pve_vm_config_put(c, NODE, vmid, &a), -EPERM);
        pve_params_done(&a);
        /* Unknown path: 501 from PVE. */
        struct pve_request r = { .method = "GET", .endpoint = "/nodes/{node}/frobnicate",
                                 .path = strdup("/nodes/pve1/frobnicate") };
        assert_int_equal(pve_send(c, &r, NULL), -EOPNOTSUPP);
        assert_non_null(strstr(pve_client_error(c), "not implemented"));
        pve_request_done(&r);
        delete_vm(c, vmid);
        pve_client_free(c);
}

static void test_iso_upload_attach_delete(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t vmid = clone_vm(c, "client-iso");
        static const char iso[4096] = "CD001 pvescale test image";
        char name[64], volid[96], *upid;
        snprintf(name, sizeof name, "claim-%u.iso", vmid);
        snprintf(volid, sizeof volid, "local:iso/%s", name);
        assert_int_equal(pve_storage_upload(c, NODE, "local", "iso", name, iso, sizeof iso, &upid), 0);
        struct pve_upid u;
        assert_int_equal(pve_upid_parse(upid, &u), 0);
        assert_string_equal(u.type, "imgcopy");
        assert_string_equal(u.id, "");
        assert_int_equal(wait_task(c, upid), 0);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", ct_string(ep, "hosts.pve1.iso_dir"), name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char back[sizeof iso];
        assert_int_equal(fread(back, 1, sizeof back, f), sizeof iso);
        fclose(f);
        assert_memory_equal(back, iso, sizeof iso);
        json_t *content;
        assert_int_equal(pve_storage_content(c, NODE, "local", "iso", &content), 0);
        bool listed = false;
        size_t i;
        json_t *e;
        json_array_foreach(content, i, e) listed |= strcmp(cfg_str(e, "volid"), volid) == 0;
        assert_true(listed);
        json_decref(content);
        struct pve_params p = PVE_PARAMS_INIT;
        pve_params_addf(&p, "ide2", "%s,media=cdrom", volid);
        assert_int_equal(pve_vm_config_put(c, NODE, vmid, &p), 0);
        pve_params_done(&p);
        assert_int_equal(pve_vm_action(c, NODE, vmid, "start", &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
        assert_int_equal(pve_vm_action(c, NODE, vmid, "stop", &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
        struct pve_params d = PVE_PARAMS_INIT;
        pve_params_add(&d, "delete", "ide2");
        assert_int_equal(pve_vm_config_put(c, NODE, vmid, &d), 0);
        pve_params_done(&d);
        assert_int_equal(pve_storage_content_delete(c, NODE, "local", volid, 5, &upid), 0);
        assert_null(upid); /* PVE waited for the task, which ended well */
        assert_int_equal(pve_storage_content(c, NODE, "local", "iso", &content), 0);
        json_array_foreach(content, i, e) assert_string_not_equal(cfg_str(e, "volid"), volid);
        json_decref(content);
        assert_null(fopen(path, "rb"));
        delete_vm(c, vmid);
        pve_client_free(c);
}

static void test_firewall(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t vmid = clone_vm(c, "client-fw");
        struct pve_params o = PVE_PARAMS_INIT;
        pve_params_add_bool(&o, "enable", true);
        assert_int_equal(pve_vm_firewall_options_set(c, NODE, vmid, &o), 0);
        pve_params_done(&o);
        struct pve_firewall_rule rule = { .type = "group", .action = "kubernetes", .iface = "net0", .enable = true,
                                          .comment = "pvescale security group" };
        assert_int_equal(pve_vm_firewall_rule_add(c, NODE, vmid, &rule), 0);
        json_t *rules;
        assert_int_equal(pve_vm_firewall_rules(c, NODE, vmid, &rules), 0);
        assert_int_equal(json_array_size(rules), 1);
        json_t *r0 = json_array_get(rules, 0);
        assert_string_equal(cfg_str(r0, "type"), "group");
        assert_string_equal(cfg_str(r0, "action"), "kubernetes");
        assert_string_equal(cfg_str(r0, "iface"), "net0");
        assert_int_equal(json_integer_value(json_object_get(r0, "enable")), 1);
        json_decref(rules);
        delete_vm(c, vmid);
        pve_client_free(c);
}

static void test_task_timeout_and_faults(void **state) {
        (void)state;
        struct pve_client *c = client();
        uint32_t vmid;
        char *upid;
        assert_int_equal(ct_knob(ep, "clone_seconds", "3"), 200);
        assert_int_equal(pve_nextid(c, &vmid), 0);
        struct pve_clone o = { .newid = vmid, .name = "client-slow" };
        assert_int_equal(pve_vm_clone(c, NODE, template_id, &o, &upid), 0);
        struct pve_wait brief = { .poll_ms = 50, .timeout_ms = 300 };
        assert_int_equal(pve_task_wait(c, upid, &brief), -ETIMEDOUT);
        assert_non_null(strstr(pve_client_error(c), "still running"));
        assert_int_equal(pve_task_wait(c, upid, &fast), 0);
        free(upid);
        assert_int_equal(ct_knob(ep, "clone_seconds", "0.2"), 200);
        /* A failing clone task. */
        uint32_t other;
        assert_int_equal(ct_knob(ep, "clone_fail_next", "1"), 200);
        assert_int_equal(pve_nextid(c, &other), 0);
        struct pve_clone f = { .newid = other, .name = "client-fail" };
        assert_int_equal(pve_vm_clone(c, NODE, template_id, &f, &upid), 0);
        assert_int_equal(wait_task(c, upid), -EIO);
        assert_non_null(strstr(pve_client_error(c), "task qmclone failed"));
        /* A 500 before the handler, then success. */
        assert_int_equal(ct_knob(ep, "pve_error_next", "1"), 200);
        assert_int_equal(pve_nodes(c, NULL), -EIO);
        assert_non_null(strstr(pve_client_error(c), "GET /nodes: HTTP 500 simulated internal server error"));
        assert_int_equal(pve_nodes(c, NULL), 0);
        assert_string_equal(pve_client_error(c), "");
        /* Unknown UPID. */
        struct pve_task_status st;
        assert_int_equal(pve_task_status(c, "UPID:pve1:00000001:00000001:00000001:qmstart:1:root@pam:", &st), -EINVAL);
        delete_vm(c, vmid);
        pve_client_free(c);
}

/* The pool /cluster/resources names for vmid (malloc'd), waiting for the VM's stats (stats_delay_seconds); or NULL. */
static char *pool_of(struct pve_client *c, uint32_t vmid) {
        for (int tries = 0; tries < 100; tries++) {
                json_t *vms, *vm;
                size_t i;
                char *pool = NULL;
                assert_int_equal(pve_cluster_resources(c, "vm", &vms), 0);
                json_array_foreach(vms, i, vm) {
                        const char *p = json_string_value(json_object_get(vm, "pool"));
                        if (json_integer_value(json_object_get(vm, "vmid")) == vmid && p)
                                pool = strdup(p);
                }
                json_decref(vms);
                if (pool)
                        return pool;
                usleep(50 * 1000);
        }
        return NULL;
}

static void test_clone_into_pool(void **state) {
        (void)state;
        struct pve_client *c = client();
        struct pve_request r = { .method = "POST", .endpoint = "/pools", .path = strdup("/pools") };
        pve_params_add(&r.params, "poolid", "k8s");
        assert_int_equal(pve_send(c, &r, NULL), 0);
        pve_request_done(&r);
        uint32_t vmid;
        char *upid;
        assert_int_equal(pve_nextid(c, &vmid), 0);
        struct pve_clone o = { .newid = vmid, .name = "client-pool", .pool = "k8s", .target = NODE, .full = true,
                               .storage = "local-lvm", .format = "raw" };
        assert_int_equal(pve_vm_clone(c, NODE, template_id, &o, &upid), 0);
        assert_int_equal(wait_task(c, upid), 0);
        char *pool = pool_of(c, vmid);
        assert_non_null(pool);
        assert_string_equal(pool, "k8s");
        free(pool);
        delete_vm(c, vmid);
        pve_client_free(c);
}

static void test_wrong_token(void **state) {
        (void)state;
        struct pve_client *c = client_with("00000000-0000-0000-0000-000000000000");
        assert_int_equal(pve_nodes(c, NULL), -EACCES);
        assert_non_null(strstr(pve_client_error(c), ": HTTP 401 "));
        pve_client_free(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_discovery),
                cmocka_unit_test(test_nextid_and_templates),
                cmocka_unit_test(test_clone_config_start_delete),
                cmocka_unit_test(test_numa_mismatch_fails_the_start_task),
                cmocka_unit_test(test_parameter_errors),
                cmocka_unit_test(test_iso_upload_attach_delete),
                cmocka_unit_test(test_firewall),
                cmocka_unit_test(test_task_timeout_and_faults),
                cmocka_unit_test(test_clone_into_pool),
                cmocka_unit_test(test_wrong_token),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
