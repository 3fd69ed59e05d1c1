/* Integration test of coordinator/agents against a real pvescale-agent serving a simulated Proxmox host:
 * topology, offers, reserve, bind to a VM cloned through the PVE client, pinning read-back, release, and the
 * error mapping (no room, unknown VM, double bind, wrong token, agent down, untrusted certificate).
 * Run by test_coordinator_clients.py (PVESCALE_TEST_AGENT_URL/_TOKEN/_CA and PVESCALE_TEST_ENDPOINTS). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agents.h"
#include "clienttest.h"
#include "pve.h"

#define GIB (1ULL << 30)

static json_t *ep;

static struct agents_client *agent_with(const char *url, const char *token, const char *ca) {
        struct agents_options o = { .url = url, .token = token, .ca_file = ca };
        struct agents_client *c;
        assert_int_equal(agents_client_new(&o, &c), 0);
        return c;
}

static struct agents_client *agent(void) {
        return agent_with(getenv("PVESCALE_TEST_AGENT_URL"), getenv("PVESCALE_TEST_AGENT_TOKEN"),
                          getenv("PVESCALE_TEST_AGENT_CA"));
}

static int setup(void **state) {
        (void)state;
        ep = ct_endpoints();
        return ep && getenv("PVESCALE_TEST_AGENT_URL") ? 0 : -1;
}

static int teardown(void **state) {
        (void)state;
        json_decref(ep);
        return 0;
}

/* A VM on pve1, made through the PVE client, so the agent sees its config. */
static uint32_t make_vm(const char *name) {
        struct pve_options o = { .url = ct_string(ep, "pve.r1.url"), .token_id = ct_string(ep, "pve.r1.token_id"),
                                 .token_secret = ct_string(ep, "pve.r1.token_secret"),
                                 .ca_file = ct_string(ep, "ca_file") };
        struct pve_client *p;
        struct pve_wait w = { .poll_ms = 100, .timeout_ms = 20000 };
        uint32_t vmid;
        char *upid;
        assert_int_equal(pve_client_new(&o, &p), 0);
        assert_int_equal(pve_nextid(p, &vmid), 0);
        struct pve_clone c = { .newid = vmid, .name = name };
        uint32_t tmpl = (uint32_t)json_integer_value(json_object_get(
                json_object_get(json_object_get(json_object_get(ep, "pve"), "r1"), "templates"), "pve1"));
        assert_int_equal(pve_vm_clone(p, "pve1", tmpl, &c, &upid), 0);
        assert_int_equal(pve_task_wait(p, upid, &w), 0);
        free(upid);
        pve_client_free(p);
        return vmid;
}

static const char *str(const json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static void test_read_side(void **state) {
        (void)state;
        struct agents_client *c = agent();
        json_t *topo, *cap;
        assert_int_equal(agents_topology(c, &topo), 0);
        assert_non_null(json_object_get(topo, "numa_nodes"));
        assert_int_equal(agents_capacity(c, &cap), 0);
        assert_true(json_integer_value(json_object_get(cap, "cpus_free")) > 0);
        json_decref(cap);
        json_decref(topo);
        agents_client_free(c);
}

static void test_offers(void **state) {
        (void)state;
        struct agents_client *c = agent();
        struct agents_shape shapes[] = { { 4, 8 * GIB, 0 }, { 64, 8 * GIB, 0 } };
        json_t *out;
        assert_int_equal(agents_offers(c, shapes, 2, 8, &out), 0);
        assert_string_equal(str(out, "node"), "pve1");
        assert_string_equal(str(out, "policy"), "static");
        json_t *offers = json_object_get(out, "offers");
        assert_int_equal(json_array_size(offers), 2);
        assert_true(json_integer_value(json_object_get(json_array_get(offers, 0), "count")) >= 1);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(offers, 1), "count")), 0);
        json_decref(out);
        agents_client_free(c);
}

static void test_reserve_bind_release(void **state) {
        (void)state;
        struct agents_client *c = agent();
        uint32_t vmid = make_vm("agent-a"), other = make_vm("agent-b");
        struct agents_reserve req = { .vcpus = 4, .memory_bytes = 8 * GIB, .ttl_seconds = 120,
                                      .owner = "nodeclaim/default-abc" };
        json_t *res, *got, *list, *bound;
        assert_int_equal(agents_reserve(c, &req, &res), 0);
        const char *id = str(res, "id");
        assert_non_null(id);
        assert_int_equal(strncmp(id, "r-", 2), 0);
        assert_string_equal(str(res, "state"), "pending");
        assert_non_null(str(res, "cpus"));
        assert_int_equal(agents_reservation_get(c, id, &got), 0);
        assert_string_equal(str(got, "owner"), "nodeclaim/default-abc");
        assert_int_equal(agents_reservations(c, &list), 0);
        bool listed = false;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(list, "reservations"), i, e) listed |= strcmp(str(e, "id"), id) == 0;
        assert_true(listed);
        /* Binding to a VM the agent has never seen. */
        assert_int_equal(agents_bind(c, id, 999999, NULL), -ENOENT);
        assert_int_equal(agents_client_last_status(c), 409);
        assert_non_null(strstr(agents_client_error(c), "has no config"));
        assert_int_equal(agents_bind(c, id, vmid, &bound), 0);
        assert_string_equal(str(bound, "state"), "bound");
        assert_int_equal(json_integer_value(json_object_get(bound, "vmid")), vmid);
        assert_int_equal(agents_bind(c, id, other, NULL), -EEXIST);
        assert_non_null(strstr(agents_client_error(c), "already bound"));
        assert_int_equal(agents_release(c, id), 0);
        assert_int_equal(agents_release(c, id), -ENOENT);
        assert_int_equal(agents_reservation_get(c, id, NULL), -ENOENT);
        assert_int_equal(agents_release(c, "r-0000000000000000"), -ENOENT);
        assert_int_equal(agents_release(c, "not-an-id"), -EINVAL);
        json_decref(bound);
        json_decref(list);
        json_decref(got);
        json_decref(res);
        agents_client_free(c);
}

static void test_no_room(void **state) {
        (void)state;
        struct agents_client *c = agent();
        struct agents_reserve req = { .vcpus = 24, .memory_bytes = 4 * GIB, .owner = "nodeclaim/big-1" };
        json_t *res;
        assert_int_equal(agents_reserve(c, &req, &res), 0);
        req.owner = "nodeclaim/big-2";
        assert_int_equal(agents_reserve(c, &req, NULL), -ENOSPC);
        assert_int_equal(agents_client_last_status(c), 409);
        assert_non_null(strstr(agents_client_error(c), "POST /v1/reservations: 409 insufficient capacity: "));
        assert_int_equal(agents_release(c, str(res, "id")), 0);
        assert_int_equal(agents_reserve(c, &req, NULL), 0); /* room again after the release */
        json_t *all;
        assert_int_equal(agents_reservations(c, &all), 0);
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(all, "reservations"), i, e) {
                if (strcmp(str(e, "owner"), "nodeclaim/big-2") == 0)
                        assert_int_equal(agents_release(c, str(e, "id")), 0);
        }
        json_decref(all);
        json_decref(res);
        req.vcpus = 0;
        assert_int_equal(agents_reserve(c, &req, NULL), -EINVAL); /* refused before sending */
        agents_client_free(c);
}

static void test_failures(void **state) {
        (void)state;
        struct agents_client *c = agent_with(getenv("PVESCALE_TEST_AGENT_URL"), "wrong-token",
                                             getenv("PVESCALE_TEST_AGENT_CA"));
        assert_int_equal(agents_capacity(c, NULL), -EACCES);
        assert_int_equal(agents_client_last_status(c), 401);
        agents_client_free(c);
        c = agent_with("https://127.0.0.1:1", "t", getenv("PVESCALE_TEST_AGENT_CA"));
        assert_int_equal(agents_capacity(c, NULL), -ECONNREFUSED);
        assert_non_null(strstr(agents_client_error(c), "GET /v1/capacity: "));
        agents_client_free(c);
        c = agent_with(getenv("PVESCALE_TEST_AGENT_URL"), getenv("PVESCALE_TEST_AGENT_TOKEN"),
                       ct_string(ep, "ca_file")); /* the simulator's CA did not sign the agent's certificate */
        assert_int_equal(agents_capacity(c, NULL), -EKEYREJECTED);
        agents_client_free(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_read_side),
                cmocka_unit_test(test_offers),
                cmocka_unit_test(test_reserve_bind_release),
                cmocka_unit_test(test_no_room),
                cmocka_unit_test(test_failures),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
