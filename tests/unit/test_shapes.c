/* Tests for coordinator/shapes: default families, the tiered kube-reserved formulas (the seed's MiB-vs-GiB
 * defect), allocatable, kubelet options and custom shapes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "shapes.h"
#include "testutil.h"

#define MIB (1024LL * 1024)
#define GIB (1024LL * MIB)

static void test_kube_reserved_cpu(void **state) {
        (void)state;
        static const struct {
                uint32_t vcpus;
                int64_t milli;
        } T[] = { { 1, 60 }, { 2, 70 }, { 3, 75 }, { 4, 80 }, { 5, 83 }, { 8, 90 }, { 16, 110 }, { 64, 230 } };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
                if (shapes_kube_reserved_cpu(T[i].vcpus) != T[i].milli)
                        fail_msg("%u vCPUs: expected %lldm, got %lldm", T[i].vcpus, (long long)T[i].milli,
                                 (long long)shapes_kube_reserved_cpu(T[i].vcpus));
}

/* Expected values computed independently (tiers 25/20/10/6/2 %, rounded up to MiB). */
static void test_kube_reserved_memory(void **state) {
        (void)state;
        static const struct {
                int64_t gib, mib;
        } T[] = { { 2, 512 },   { 4, 1024 },  { 6, 1434 },   { 8, 1844 },  { 16, 2663 },
                  { 32, 3646 }, { 64, 5612 }, { 128, 9544 }, { 256, 12166 } };
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
                if (shapes_kube_reserved_memory(T[i].gib * GIB) != T[i].mib * MIB)
                        fail_msg("%lld GiB: expected %lld MiB, got %lld bytes", (long long)T[i].gib,
                                 (long long)T[i].mib, (long long)shapes_kube_reserved_memory(T[i].gib * GIB));
        assert_int_equal(shapes_kube_reserved_memory(512 * MIB), 255 * MIB);
}

/* anchors.md §1 defect 8: the seed compared MiB with GiB thresholds, so every type got 384Mi. Ours grows
 * with the node. */
static void test_defect8_reserved_memory_grows(void **state) {
        (void)state;
        struct shape_options o;
        struct shape_catalog *cat;
        shapes_options_default(&o);
        assert_int_equal(shapes_catalog_default(&o, &cat), 0);
        int64_t prev = 0;
        const char *names[] = { "c1.1VCPU-2GB", "c1.2VCPU-4GB", "t1.2VCPU-6GB", "s1.4VCPU-16GB", "m1.8VCPU-64GB",
                                "m1.16VCPU-128GB" };
        for (size_t i = 0; i < 6; i++) {
                const struct shape *s = shapes_catalog_find(cat, names[i]);
                assert_non_null(s);
                assert_true(s->kube_reserved.v[RESOURCE_MEMORY] > prev);
                assert_true(s->kube_reserved.v[RESOURCE_MEMORY] != 384 * MIB);
                prev = s->kube_reserved.v[RESOURCE_MEMORY];
        }
        shapes_catalog_free(cat);
}

static void test_default_catalog(void **state) {
        (void)state;
        struct shape_options o;
        struct shape_catalog *cat;
        shapes_options_default(&o);
        assert_int_equal(shapes_catalog_default(&o, &cat), 0);
        assert_int_equal(cat->n, 20);
        assert_string_equal(cat->items[0].name, "c1.1VCPU-2GB");
        assert_string_equal(cat->items[19].name, "m1.16VCPU-128GB");
        for (size_t i = 1; i < cat->n; i++)
                assert_true(shapes_cost_compare(&cat->items[i - 1], &cat->items[i]) < 0);
        /* cost order: vCPUs first, then memory */
        assert_string_equal(cat->items[3].name, "m1.1VCPU-8GB");
        assert_string_equal(cat->items[4].name, "c1.2VCPU-4GB");

        const struct shape *t = shapes_catalog_find(cat, "t1.2VCPU-6GB");
        assert_non_null(t);
        assert_string_equal(t->family, "t1");
        assert_int_equal(t->vcpus, 2);
        assert_int_equal(t->vm_memory_bytes, 6 * GIB);
        /* capacity.memory = 6144Mi - ceil(6144Mi * 7.5%) = 6144 - 461 */
        assert_int_equal(t->capacity.v[RESOURCE_MEMORY], 5683 * MIB);
        /* allocatable = 5683 - 1434 (kube) - 64 (system) - 100 (eviction) */
        assert_int_equal(t->allocatable.v[RESOURCE_MEMORY], 4085 * MIB);
        assert_int_equal(t->allocatable.v[RESOURCE_CPU], 2000 - 70 - 10);
        assert_int_equal(t->allocatable.v[RESOURCE_EPHEMERAL_STORAGE], 27 * GIB);
        assert_int_equal(t->allocatable.v[RESOURCE_PODS], 110);
        assert_int_equal(shapes_catalog_find(cat, "c1.1VCPU-2GB")->capacity.v[RESOURCE_PODS], 64);
        assert_null(shapes_catalog_find(cat, "x1.1VCPU-16GB"));
        shapes_catalog_free(cat);
}

static void test_make_rejects(void **state) {
        (void)state;
        struct shape_options o;
        struct shape s;
        shapes_options_default(&o);
        assert_int_equal(shapes_make("a", "f", 0, GIB, &o, &s), -EINVAL);
        assert_int_equal(shapes_make("a", "f", 1, GIB + 1, &o, &s), -EINVAL);
        assert_int_equal(shapes_make("", "f", 1, GIB, &o, &s), -EINVAL);
        assert_int_equal(shapes_make("a", "", 1, GIB, &o, &s), -EINVAL);
        assert_int_equal(shapes_make("a", "f", 1, GIB, &o, &s), 0);
        /* a tiny node: reserved exceeds capacity; allocatable clamps at zero */
        assert_int_equal(shapes_make("tiny", "f", 1, 256 * MIB, &o, &s), 0);
        assert_int_equal(s.allocatable.v[RESOURCE_MEMORY], 0);
        assert_int_equal(s.capacity.v[RESOURCE_PODS], 32);
}

static void test_kubelet_options(void **state) {
        (void)state;
        struct shape_options o, before;
        struct shape s;
        char err[200];
        shapes_options_default(&o);
        json_t *k = test_json_parse("{\"maxPods\": 50, \"kubeReserved\": {\"cpu\": \"200m\", \"memory\": \"1Gi\"},"
                          " \"systemReserved\": {\"memory\": \"128Mi\"},"
                          " \"evictionHard\": {\"memory.available\": \"5%\", \"nodefs.available\": \"15%\"}}");
        assert_int_equal(shapes_options_from_kubelet(k, &o, err, sizeof err), 0);
        json_decref(k);
        assert_int_equal(shapes_make("s1.4VCPU-16GB", "s1", 4, 16 * GIB, &o, &s), 0);
        assert_int_equal(s.capacity.v[RESOURCE_PODS], 50);
        assert_int_equal(s.kube_reserved.v[RESOURCE_CPU], 200);
        assert_int_equal(s.kube_reserved.v[RESOURCE_MEMORY], GIB);
        assert_int_equal(s.system_reserved.v[RESOURCE_MEMORY], 128 * MIB);
        assert_int_equal(s.system_reserved.v[RESOURCE_CPU], 10); /* default kept */
        int64_t cap = s.capacity.v[RESOURCE_MEMORY];
        assert_int_equal(s.eviction.v[RESOURCE_MEMORY], (cap * 5 + 99) / 100);
        assert_int_equal(s.eviction.v[RESOURCE_EPHEMERAL_STORAGE], (30 * GIB * 15 + 99) / 100);

        before = o;
        k = test_json_parse("{\"maxPods\": \"many\"}");
        assert_int_equal(shapes_options_from_kubelet(k, &o, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "maxPods"));
        json_decref(k);
        k = test_json_parse("{\"evictionHard\": {\"memory.available\": \"lots\"}}");
        assert_int_equal(shapes_options_from_kubelet(k, &o, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "evictionHard.memory.available"));
        json_decref(k);
        k = test_json_parse("{\"kubeReserved\": {\"cpu\": \"1x\"}}");
        assert_int_equal(shapes_options_from_kubelet(k, &o, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "kubeReserved.cpu"));
        json_decref(k);
        assert_memory_equal(&o, &before, sizeof o); /* unchanged on failure */
}

static void test_custom_shapes(void **state) {
        (void)state;
        struct shape_options o;
        struct shape_catalog *cat;
        char err[200];
        shapes_options_default(&o);
        assert_int_equal(shapes_catalog_default(&o, &cat), 0);
        json_t *l = test_json_parse("[{\"name\": \"g1.6VCPU-20GB\", \"capacity\": {\"cpu\": \"6\", \"memory\": \"20Gi\","
                          "  \"ephemeral-storage\": \"100Gi\", \"pods\": \"64\", \"hugepages-1Gi\": \"4Gi\"},"
                          "  \"overhead\": {\"KubeReserved\": {\"cpu\": \"100m\", \"memory\": \"512Mi\"},"
                          "  \"SystemReserved\": {\"cpu\": \"0\", \"memory\": \"0\"},"
                          "  \"EvictionThreshold\": {\"memory\": \"200Mi\"}}},"
                          " {\"name\": \"plain\", \"family\": \"p9\", \"capacity\": {\"cpu\": 3, \"memory\": \"5Gi\"}}]");
        assert_int_equal(shapes_catalog_add_custom(cat, l, &o, err, sizeof err), 0);
        json_decref(l);
        shapes_catalog_sort(cat);
        assert_int_equal(cat->n, 22);
        const struct shape *g = shapes_catalog_find(cat, "g1.6VCPU-20GB");
        assert_non_null(g);
        assert_true(g->custom);
        assert_string_equal(g->family, "g1");
        assert_int_equal(g->vcpus, 6);
        assert_int_equal(g->capacity.v[RESOURCE_PODS], 64);
        assert_int_equal(g->capacity.v[RESOURCE_EPHEMERAL_STORAGE], 100 * GIB);
        assert_int_equal(g->allocatable.v[RESOURCE_CPU], 6000 - 100);
        assert_int_equal(g->allocatable.v[RESOURCE_HUGEPAGES_1GI], 4 * GIB);
        /* memory: 20Gi - 7.5% (1536Mi) - 512Mi - 200Mi - 4Gi hugepages */
        assert_int_equal(g->allocatable.v[RESOURCE_MEMORY], 20 * GIB - 1536 * MIB - 512 * MIB - 200 * MIB - 4 * GIB);
        const struct shape *p = shapes_catalog_find(cat, "plain");
        assert_non_null(p);
        assert_string_equal(p->family, "p9");
        assert_int_equal(p->kube_reserved.v[RESOURCE_CPU], shapes_kube_reserved_cpu(3));

        static const struct {
                const char *json, *field;
        } BAD[] = {
                { "[{\"name\": \"x\", \"capacity\": {\"cpu\": \"1500m\", \"memory\": \"1Gi\"}}]", "instanceTypes[0].capacity.cpu" },
                { "[{\"name\": \"x\", \"capacity\": {\"cpu\": \"1\", \"memory\": \"1000\"}}]", "instanceTypes[0].capacity.memory" },
                { "[{\"name\": \"x\", \"capacity\": {\"cpu\": \"1\", \"memory\": \"1Gi\", \"gpu\": \"1\"}}]", "instanceTypes[0].capacity.gpu" },
                { "[{\"capacity\": {\"cpu\": \"1\", \"memory\": \"1Gi\"}}]", "instanceTypes[0].name" },
                { "[{\"name\": \"y\", \"capacity\": {\"cpu\": \"1\", \"memory\": \"1Gi\"}}, {\"name\": \"c1.1VCPU-2GB\", \"capacity\": {\"cpu\": \"1\", \"memory\": \"2Gi\"}}]", "instanceTypes[1].name" },
                { "[{\"name\": \"x\", \"capacity\": {\"cpu\": \"1\", \"memory\": \"1Gi\"}, \"overhead\": {\"kubeReserved\": {\"cpu\": \"-1\"}}}]", "instanceTypes[0].overhead" },
                { "{}", "instanceTypes" },
        };
        for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
                l = test_json_parse(BAD[i].json);
                assert_int_equal(shapes_catalog_add_custom(cat, l, &o, err, sizeof err), -EINVAL);
                if (strncmp(err, BAD[i].field, strlen(BAD[i].field)) != 0)
                        fail_msg("case %zu: expected error on %s, got \"%s\"", i, BAD[i].field, err);
                json_decref(l);
                assert_int_equal(cat->n, 22); /* unchanged */
        }
        shapes_catalog_free(cat);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_kube_reserved_cpu),
                cmocka_unit_test(test_kube_reserved_memory),
                cmocka_unit_test(test_defect8_reserved_memory_grows),
                cmocka_unit_test(test_default_catalog),
                cmocka_unit_test(test_make_rejects),
                cmocka_unit_test(test_kubelet_options),
                cmocka_unit_test(test_custom_shapes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
