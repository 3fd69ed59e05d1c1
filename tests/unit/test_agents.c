/* Tests for the pure parts of coordinator/agents: agent URLs, request bodies, error mapping. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agents.h"
#include "jsonutil.h"

static void test_url(void **state) {
        (void)state;
        char *u = NULL;
        assert_int_equal(agents_url("10.0.0.11", 8207, &u), 0);
        assert_string_equal(u, "https://10.0.0.11:8207");
        free(u);
        assert_int_equal(agents_url("fd00::11", 8207, &u), 0);
        assert_string_equal(u, "https://[fd00::11]:8207");
        free(u);
        assert_int_equal(agents_url("[fd00::11]", 9000, &u), 0);
        assert_string_equal(u, "https://[fd00::11]:9000");
        free(u);
        assert_int_equal(agents_url("pve1.lan", 8207, &u), 0);
        assert_string_equal(u, "https://pve1.lan:8207");
        free(u);
        u = NULL;
        assert_int_equal(agents_url("", 8207, &u), -EINVAL);
        assert_int_equal(agents_url("pve1", 0, &u), -EINVAL);
        assert_int_equal(agents_url("pve1", 70000, &u), -EINVAL);
        assert_null(u);
}

static void assert_json(json_t *v, const char *want) {
        assert_non_null(v);
        char *s = jsonutil_dump(v);
        assert_string_equal(s, want);
        free(s);
        json_decref(v);
}

static void test_bodies(void **state) {
        (void)state;
        struct agents_shape shapes[] = { { 4, 8589934592ULL, 0 }, { 2, 4294967296ULL, 2048 } };
        assert_json(agents_offers_body(shapes, 2, 16),
                    "{\"max_count\":16,\"shapes\":[{\"memory_bytes\":8589934592,\"vcpus\":4},"
                    "{\"hugepage_kib\":2048,\"memory_bytes\":4294967296,\"vcpus\":2}]}");
        assert_json(agents_offers_body(shapes, 1, 0), "{\"shapes\":[{\"memory_bytes\":8589934592,\"vcpus\":4}]}");
        assert_null(agents_offers_body(shapes, 0, 1));
        struct agents_reserve r = { .vcpus = 4, .memory_bytes = 8589934592ULL, .ttl_seconds = 600,
                                    .owner = "nodeclaim/default-x7k2p" };
        assert_json(agents_reserve_body(&r), "{\"memory_bytes\":8589934592,\"owner\":\"nodeclaim/default-x7k2p\","
                                             "\"ttl_seconds\":600,\"vcpus\":4}");
        json_t *pci = json_loads("[[\"0000:41:00.0\", \"0000:42:00.0\"]]", 0, NULL);
        r.pci_devices = pci;
        assert_json(agents_reserve_body(&r), "{\"memory_bytes\":8589934592,\"owner\":\"nodeclaim/default-x7k2p\","
                                             "\"pci_devices\":[[\"0000:41:00.0\",\"0000:42:00.0\"]],"
                                             "\"ttl_seconds\":600,\"vcpus\":4}");
        json_array_clear(pci);
        assert_json(agents_reserve_body(&r), "{\"memory_bytes\":8589934592,\"owner\":\"nodeclaim/default-x7k2p\","
                                             "\"ttl_seconds\":600,\"vcpus\":4}");
        json_decref(pci);
        r.pci_devices = NULL;
        r.owner = NULL;
        assert_null(agents_reserve_body(&r));
        r.owner = "x";
        r.vcpus = 0;
        assert_null(agents_reserve_body(&r));
}

static void test_errno(void **state) {
        (void)state;
        assert_int_equal(agents_errno_from_status(201, NULL, NULL), 0);
        assert_int_equal(agents_errno_from_status(400, "invalid request", "vcpus: expected 1 to 1024"), -EINVAL);
        assert_int_equal(agents_errno_from_status(401, "unauthorized", NULL), -EACCES);
        assert_int_equal(agents_errno_from_status(404, "no such reservation", "r-0123456789abcdef"), -ENOENT);
        assert_int_equal(agents_errno_from_status(409, "insufficient capacity", "only 3 CPUs are free"), -ENOSPC);
        assert_int_equal(agents_errno_from_status(409, "conflict", "reservation r-1 or VM 105 is already bound "
                                                                   "elsewhere"),
                         -EEXIST);
        assert_int_equal(agents_errno_from_status(409, "conflict", "VM 105 has no config on node pve1"), -ENOENT);
        assert_int_equal(agents_errno_from_status(500, "internal error", NULL), -EIO);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_url),
                cmocka_unit_test(test_bodies),
                cmocka_unit_test(test_errno),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
