/* Tests for coordinator/clients/kube_types: each kind's fields decoded from its JSON (borrowed, the object left as
 * it was), absent fields NULL or zero, being deleted as kube_deleting says, and the mutable accessors reaching the
 * stored object's own arrays. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kube_types.h"

static json_t *parse(const char *text) {
        json_t *o = json_loads(text, 0, NULL);
        assert_non_null(o);
        return o;
}

static void test_a_node_and_its_metadata(void **state) {
        (void)state;
        json_t *o = parse("{\"metadata\": {\"name\": \"n1\", \"uid\": \"u\", \"resourceVersion\": \"7\","
                          " \"generation\": 3, \"labels\": {\"a\": \"b\"}, \"finalizers\": [\"f\"], \"x-unknown\": 1},"
                          " \"spec\": {\"providerID\": \"proxmox://r/h/100\", \"taints\": [{\"key\": \"k\"}]},"
                          " \"status\": {\"nodeInfo\": {\"systemUUID\": \"S\"}}}");
        json_t *copy = json_deep_copy(o);
        struct kube_node n = kube_node_of(o);
        assert_string_equal(n.meta.name, "n1");
        assert_string_equal(n.meta.uid, "u");
        assert_string_equal(n.meta.resource_version, "7");
        assert_true(n.meta.has_generation);
        assert_int_equal(n.meta.generation, 3);
        assert_false(n.meta.deleting);
        assert_null(n.meta.namespace_);
        assert_null(n.meta.annotations);
        assert_string_equal(json_string_value(json_object_get(n.meta.labels, "a")), "b");
        assert_string_equal(n.provider_id, "proxmox://r/h/100");
        assert_int_equal(json_array_size(n.taints), 1);
        assert_string_equal(n.system_uuid, "S");
        assert_true(json_equal(o, copy)); /* decoding reads only */
        assert_ptr_equal(kube_finalizers_mut(o), n.meta.finalizers);
        assert_ptr_equal(kube_taints_mut(o), n.taints);
        json_decref(copy);
        json_decref(o);
}

static void test_a_claim_and_its_pool(void **state) {
        (void)state;
        json_t *c = parse("{\"metadata\": {\"name\": \"c1\", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\","
                          " \"annotations\": {\"k\": \"v\"}},"
                          " \"spec\": {\"nodePool\": \"p\", \"nodeClassRef\": {\"name\": \"nc\"},"
                          " \"instanceType\": \"s1\", \"requirements\": [], \"terminationGracePeriod\": \"1m\"},"
                          " \"status\": {\"host\": \"h1\", \"providerID\": \"proxmox://r/h1/101\"}}");
        struct kube_nodeclaim nc = kube_nodeclaim_of(c);
        assert_true(nc.meta.deleting);
        assert_false(nc.meta.has_generation);
        assert_string_equal(nc.node_pool, "p");
        assert_string_equal(nc.node_class, "nc");
        assert_string_equal(nc.instance_type, "s1");
        assert_true(json_is_array(nc.requirements));
        assert_string_equal(json_string_value(nc.termination_grace_period), "1m");
        assert_null(nc.taints);
        assert_null(nc.startup_taints);
        assert_string_equal(json_string_value(nc.host), "h1");
        assert_string_equal(nc.provider_id, "proxmox://r/h1/101");
        assert_ptr_equal(kube_annotations_mut(c), nc.meta.annotations);
        json_decref(c);

        json_t *p = parse("{\"metadata\": {\"name\": \"p\"}, \"spec\": {\"template\": {\"metadata\": {\"labels\":"
                          " {\"l\": \"1\"}}, \"spec\": {\"terminationGracePeriod\": \"2m\"}}},"
                          " \"status\": {\"resources\": {\"cpu\": \"4\"}}}");
        struct kube_nodepool pool = kube_nodepool_of(p);
        assert_string_equal(json_string_value(json_object_get(pool.template_labels, "l")), "1");
        assert_string_equal(pool.termination_grace_period, "2m");
        assert_string_equal(json_string_value(json_object_get(pool.resources, "cpu")), "4");
        json_decref(p);
}

static void test_the_other_kinds(void **state) {
        (void)state;
        json_t *o = parse("{\"metadata\": {\"namespace\": \"ns\", \"name\": \"b\"},"
                          " \"spec\": {\"selector\": {}, \"unhealthyPodEvictionPolicy\": \"AlwaysAllow\"},"
                          " \"status\": {\"disruptionsAllowed\": 2}}");
        struct kube_pdb b;
        kube_pdb_decode(o, &b);
        assert_string_equal(b.meta.namespace_, "ns");
        assert_string_equal(b.unhealthy_pod_eviction_policy, "AlwaysAllow");
        assert_int_equal(b.disruptions_allowed, 2);
        assert_non_null(b.selector);
        json_decref(o);

        o = parse("{\"metadata\": {\"resourceVersion\": \"9\"}, \"source\": {\"component\": \"me\"},"
                  " \"involvedObject\": {\"uid\": \"u1\"}, \"message\": \"m\", \"reason\": \"Nominated\"}");
        struct kube_event e;
        kube_event_decode(o, &e);
        assert_string_equal(e.source_component, "me");
        assert_string_equal(e.involved_uid, "u1");
        assert_string_equal(e.message, "m");
        assert_string_equal(e.reason, "Nominated");
        assert_string_equal(e.meta.resource_version, "9");
        json_decref(o);

        o = parse("{\"spec\": {\"holderIdentity\": \"a\", \"renewTime\": \"t\"}}");
        struct kube_lease l;
        kube_lease_decode(o, &l);
        assert_string_equal(l.holder_identity, "a");
        assert_string_equal(l.renew_time, "t");
        assert_null(l.acquire_time);
        json_decref(o);

        o = parse("{\"spec\": {\"metadataOptions\": {\"type\": \"cdrom\", \"valuesRef\": {\"name\": \"v\"}},"
                  " \"bootDevice\": {\"size\": \"20G\"}, \"instanceTemplateRef\": {\"name\": \"t\"}}}");
        struct kube_nodeclass cls = kube_nodeclass_of(o);
        assert_string_equal(cls.metadata_type, "cdrom");
        assert_non_null(cls.values_ref);
        assert_null(cls.templates_ref);
        assert_string_equal(cls.boot_device_size, "20G");
        assert_non_null(cls.instance_template_ref);
        json_decref(o);

        struct kube_pod none = kube_pod_of(NULL); /* a missing object decodes to nothing */
        assert_null(none.meta.name);
        assert_null(none.node_name);
        assert_null(none.phase);
        assert_false(none.meta.deleting);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_node_and_its_metadata),
                cmocka_unit_test(test_a_claim_and_its_pool),
                cmocka_unit_test(test_the_other_kinds),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
