/* Tests for coordinator/leader: the lease decisions (create, renew, wait, take over after the holder stopped
 * renewing, judged by our own clock), the lease object written, and the lease given up on a stop. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "leader.h"

static json_t *lease(const char *holder, const char *renew) {
        return json_pack("{s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:i, s:i}}", "kind", "Lease", "metadata", "name",
                         "pvescale-coordinator", "namespace", "kube-system", "resourceVersion", "7", "spec",
                         "holderIdentity", holder, "renewTime", renew, "leaseDurationSeconds", 15, "leaseTransitions", 2);
}

static void test_decide(void **state) {
        (void)state;
        struct leader l;
        leader_init(&l, &(struct leader_options){ .namespace = "kube-system", .identity = "me" });
        assert_int_equal(l.o.lease_duration_ms, LEADER_DEFAULT_DURATION_MS);
        assert_string_equal(l.o.name, LEADER_DEFAULT_NAME);
        assert_int_equal(leader_decide(&l, NULL, 1000), LEADER_CREATE);
        json_t *mine = lease("me", "2026-01-01T00:00:00.000000Z"), *other = lease("them", "2026-01-01T00:00:01.000000Z");
        assert_int_equal(leader_decide(&l, mine, 1000), LEADER_RENEW);
        /* Another holder: wait while its record keeps changing, take over once it stood still 15 s. */
        assert_int_equal(leader_decide(&l, other, 2000), LEADER_WAIT);
        assert_int_equal(leader_decide(&l, other, 17000), LEADER_WAIT);
        json_t *renewed = lease("them", "2026-01-01T00:00:16.000000Z");
        assert_int_equal(leader_decide(&l, renewed, 17001), LEADER_WAIT);
        assert_int_equal(leader_decide(&l, renewed, 32000), LEADER_WAIT);
        assert_int_equal(leader_decide(&l, renewed, 32002), LEADER_TAKE);
        json_t *free_lease = lease("", "2026-01-01T00:00:16.000000Z");
        assert_int_equal(leader_decide(&l, free_lease, 32003), LEADER_TAKE);
        json_decref(mine);
        json_decref(other);
        json_decref(renewed);
        json_decref(free_lease);
}

static void test_lease_object(void **state) {
        (void)state;
        struct leader l;
        leader_init(&l, &(struct leader_options){ .namespace = "kube-system", .identity = "me", .lease_duration_ms = 20500 });
        const char *now = "2026-02-03T04:05:06.123456Z";
        json_t *created = leader_lease(&l, NULL, false, now);
        json_t *spec = json_object_get(created, "spec");
        assert_string_equal(json_string_value(json_object_get(created, "apiVersion")), "coordination.k8s.io/v1");
        assert_string_equal(json_string_value(json_object_get(json_object_get(created, "metadata"), "namespace")),
                            "kube-system");
        assert_string_equal(json_string_value(json_object_get(spec, "holderIdentity")), "me");
        assert_int_equal(json_integer_value(json_object_get(spec, "leaseDurationSeconds")), 21);
        assert_string_equal(json_string_value(json_object_get(spec, "acquireTime")), now);
        assert_int_equal(json_integer_value(json_object_get(spec, "leaseTransitions")), 0);
        json_t *base = lease("them", "2026-01-01T00:00:00.000000Z");
        json_t *taken = leader_lease(&l, base, true, now), *renewed = leader_lease(&l, base, false, now);
        spec = json_object_get(taken, "spec");
        assert_string_equal(json_string_value(json_object_get(json_object_get(taken, "metadata"), "resourceVersion")), "7");
        assert_int_equal(json_integer_value(json_object_get(spec, "leaseTransitions")), 3);
        assert_string_equal(json_string_value(json_object_get(spec, "renewTime")), now);
        spec = json_object_get(renewed, "spec");
        assert_int_equal(json_integer_value(json_object_get(spec, "leaseTransitions")), 2);
        assert_null(json_object_get(spec, "acquireTime"));
        /* The base is not modified. */
        assert_string_equal(json_string_value(json_object_get(json_object_get(base, "spec"), "holderIdentity")), "them");
        json_decref(created);
        json_decref(taken);
        json_decref(renewed);
        json_decref(base);
}

static void test_released_lease(void **state) {
        (void)state;
        const char *now = "2026-02-03T04:05:06.123456Z";
        json_t *base = lease("me", "2026-01-01T00:00:00.000000Z");
        json_t *released = leader_released(base, now), *spec = json_object_get(released, "spec");
        assert_null(json_object_get(spec, "holderIdentity"));
        assert_int_equal(json_integer_value(json_object_get(spec, "leaseDurationSeconds")), 1);
        assert_string_equal(json_string_value(json_object_get(spec, "renewTime")), now);
        assert_string_equal(json_string_value(json_object_get(spec, "acquireTime")), now);
        assert_int_equal(json_integer_value(json_object_get(spec, "leaseTransitions")), 2);
        /* written with the read version as its precondition; the base is not modified */
        assert_string_equal(json_string_value(json_object_get(json_object_get(released, "metadata"), "resourceVersion")),
                            "7");
        assert_string_equal(json_string_value(json_object_get(json_object_get(base, "spec"), "holderIdentity")), "me");
        /* a replica that reads it next takes it over at once */
        struct leader l;
        leader_init(&l, &(struct leader_options){ .namespace = "kube-system", .identity = "other" });
        assert_int_equal(leader_decide(&l, released, 1000), LEADER_TAKE);
        json_decref(released);
        json_decref(base);
}

int main(void) {
        const struct CMUnitTest tests[] = { cmocka_unit_test(test_decide), cmocka_unit_test(test_lease_object),
                                            cmocka_unit_test(test_released_lease) };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
