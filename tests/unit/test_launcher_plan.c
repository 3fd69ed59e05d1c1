/* Tests for coordinator/launcher_plan and tokens: numaN values and their sums, net queues, tags, description and
 * owner round trips, boot disk, disk sizes, PVE accounting, back-off, times, conditions, token Secrets. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "launcher_plan.h"
#include "kube.h"
#include "rfc3339.h"
#include "tokens.h"
#include "testutil.h"

static void test_numa_from_agent_and_params(void **state) {
        (void)state;
        int err = 0;
        json_t *agent = test_json_parse("[{\"node\": 1, \"guest_cpus\": \"0-5\", \"memory_bytes\": 6442450944},"
                              " {\"node\": 3, \"guest_cpus\": \"6-9,12\", \"memory_bytes\": 4294967296}]");
        json_t *numa = launcher_placement_numa_from_agent(agent, &err);
        assert_non_null(numa);
        struct launcher_numa n[LAUNCHER_MAX_NUMA];
        size_t count = 0;
        assert_int_equal(launcher_numa_parse(numa, n, &count), 0);
        assert_int_equal(count, 2);
        assert_int_equal(n[0].host_node, 1);
        assert_int_equal(n[1].memory_mib, 4096);
        /* The template has numa0..numa2: numa2 must go. */
        json_t *config = test_json_parse("{\"numa0\": \"cpus=0\", \"numa1\": \"cpus=1\", \"numa2\": \"cpus=2\"}");
        struct pve_params p = PVE_PARAMS_INIT;
        char *deletes = NULL;
        assert_int_equal(launcher_numa_params(n, count, 10240, config, &p, &deletes), 0);
        assert_string_equal(test_param(&p, "numa"), "1");
        assert_string_equal(test_param(&p, "numa0"), "cpus=0-5,hostnodes=1,memory=6144,policy=bind");
        assert_string_equal(test_param(&p, "numa1"), "cpus=6-9;12,hostnodes=3,memory=4096,policy=bind");
        assert_string_equal(deletes, "numa2");
        /* The memories must add up exactly (the seed's defect 1). */
        struct pve_params q = PVE_PARAMS_INIT;
        char *d2 = NULL;
        assert_int_equal(launcher_numa_params(n, count, 10241, NULL, &q, &d2), -ERANGE);
        free(deletes);
        free(d2);
        pve_params_done(&p);
        pve_params_done(&q);
        json_decref(config);
        json_decref(numa);
        json_decref(agent);
}

static void test_numa_bad_input(void **state) {
        (void)state;
        int err = 0;
        json_t *odd = test_json_parse("[{\"node\": 0, \"guest_cpus\": \"0\", \"memory_bytes\": 1000}]");
        assert_null(launcher_placement_numa_from_agent(odd, &err));
        assert_int_equal(err, -EINVAL);
        json_t *bad = test_json_parse("[{\"hostNode\": 0, \"guestCPUs\": \"0;1\", \"memoryMiB\": 10}]");
        struct launcher_numa n[LAUNCHER_MAX_NUMA];
        size_t count;
        assert_int_equal(launcher_numa_parse(bad, n, &count), -EINVAL);
        json_t *empty = launcher_placement_numa_from_agent(NULL, &err);
        assert_int_equal(json_array_size(empty), 0);
        json_decref(empty);
        json_decref(odd);
        json_decref(bad);
}

static void test_net_queues(void **state) {
        (void)state;
        char *s = launcher_net_with_queues("virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1", 4);
        assert_string_equal(s, "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1,queues=4");
        free(s);
        s = launcher_net_with_queues("virtio=BC:24:11:00:00:01,queues=2,bridge=vmbr0", 8);
        assert_string_equal(s, "virtio=BC:24:11:00:00:01,bridge=vmbr0,queues=8");
        free(s);
}

static void test_tags_same(void **state) {
        (void)state;
        assert_true(launcher_tags_same("pvescale;default;k8s", "default;k8s;pvescale")); /* Proxmox sorts them */
        assert_true(launcher_tags_same("PVEscale,a b", "b a;pvescale"));
        assert_true(launcher_tags_same(NULL, ""));
        assert_false(launcher_tags_same("pvescale;default;k8s", "default;pvescale"));
        assert_false(launcher_tags_same("pvescale;default", "default;pvescale;web"));
        assert_false(launcher_tags_same("a", NULL));
        assert_false(launcher_tags_same("ab", "a;b"));
}

static void test_tags(void **state) {
        (void)state;
        int err = 0;
        json_t *extra = test_json_parse("[\"K8s\", \"pvescale\", \"team.a\"]");
        char *t = launcher_tags("default", "default-x7k2p", extra, &err);
        assert_string_equal(t, "pvescale;default;default-x7k2p;k8s;team.a");
        free(t);
        json_t *bad = test_json_parse("[\"-nope\"]");
        assert_null(launcher_tags("default", "c", bad, &err));
        assert_int_equal(err, -EINVAL);
        json_decref(extra);
        json_decref(bad);
}

/* A VM config that carries the claim's tag was configured by that claim's launch. */
static void test_config_tagged(void **state) {
        (void)state;
        json_t *ours = test_json_parse("{\"tags\": \"pvescale;default;default-x7k2p;k8s\"}");
        json_t *other = test_json_parse("{\"tags\": \"pvescale;default;default-x7k2pq\"}");
        json_t *template = test_json_parse("{\"tags\": \"k8s-template\"}");
        json_t *none = test_json_parse("{\"name\": \"x\"}");
        assert_true(launcher_config_tagged(ours, "default-x7k2p"));
        assert_false(launcher_config_tagged(other, "default-x7k2p"));
        assert_false(launcher_config_tagged(template, "default-x7k2p"));
        assert_false(launcher_config_tagged(none, "default-x7k2p"));
        assert_false(launcher_config_tagged(ours, ""));
        json_decref(ours);
        json_decref(other);
        json_decref(template);
        json_decref(none);
}

static void test_smbios_uuid(void **state) {
        (void)state;
        const char *uid = "0b5c7a2e-1111-2222-3333-444455556666";
        char *a = launcher_smbios1(NULL, uid), *b = launcher_smbios1("uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf5", uid);
        char *c = launcher_smbios1("manufacturer=UHJveG1veA==,uuid=7a6c5a99-cea1-448d-8b02-12ef90550cf5,base64=1", uid);
        assert_string_equal(a, "uuid=0b5c7a2e-1111-2222-3333-444455556666");
        assert_string_equal(b, "uuid=0b5c7a2e-1111-2222-3333-444455556666");
        assert_string_equal(c, "uuid=0b5c7a2e-1111-2222-3333-444455556666,manufacturer=UHJveG1veA==,base64=1");
        json_t *ours = json_pack("{s:s}", "smbios1", c), *upper = json_pack("{s:s}", "smbios1",
                                                                            "uuid=0B5C7A2E-1111-2222-3333-444455556666");
        json_t *other = json_pack("{s:s}", "smbios1", "uuid=0b5c7a2e-1111-2222-3333-4444555566667");
        json_t *none = json_pack("{s:s}", "name", "x");
        assert_true(launcher_config_uuid_is(ours, uid));
        assert_true(launcher_config_uuid_is(upper, uid));
        assert_false(launcher_config_uuid_is(other, uid)); /* a longer one is another */
        assert_false(launcher_config_uuid_is(none, uid));
        assert_false(launcher_config_uuid_is(ours, ""));
        free(a);
        free(b);
        free(c);
        json_decref(ours);
        json_decref(upper);
        json_decref(other);
        json_decref(none);
}

static void test_description_and_owner(void **state) {
        (void)state;
        char uid[LAUNCHER_UID_MAX], buf[254];
        int64_t created;
        char *d = launcher_description("default-abc", "0b5c7a2e-1111-2222-3333-444455556666", 1782900000123, NULL, "");
        assert_int_equal(launcher_description_parse(d, uid, &created), 0);
        assert_string_equal(uid, "0b5c7a2e-1111-2222-3333-444455556666");
        assert_int_equal(created, 1782900000000); /* whole seconds */
        assert_null(strstr(d, "reservation:"));
        assert_null(strstr(d, "cpus:"));
        free(d);
        /* With the agent's reservation and its CPUs: a line each, after the launch time; still parsed. */
        d = launcher_description("default-abc", "u-2", 1782900000123, "r-00000000000000ff", "2-3,8");
        assert_non_null(d);
        assert_non_null(strstr(d, "\ncreated: 2026-07-01T10:00:00Z\nreservation: r-00000000000000ff\ncpus: 2-3,8\n"));
        assert_int_equal(launcher_description_parse(d, uid, &created), 0);
        assert_string_equal(uid, "u-2");
        assert_int_equal(created, 1782900000000);
        assert_int_equal(launcher_description_parse("some VM\nuid: x\n", uid, &created), -ENOENT);
        assert_int_equal(launcher_description_parse(NULL, uid, &created), -ENOENT);
        free(d);
        assert_int_equal(launcher_owner("default-abc", "u-1", buf, sizeof buf), 0);
        assert_string_equal(buf, "nodeclaim/u-1/default-abc");
        assert_int_equal(launcher_owner_uid(buf, uid), 0);
        assert_string_equal(uid, "u-1");
        assert_int_equal(launcher_owner_uid("someone-else", uid), -ENOENT);
}

static void test_boot_disk_and_size(void **state) {
        (void)state;
        char key[16], arg[32];
        uint64_t bytes;
        json_t *c = test_json_parse("{\"boot\": \"order=ide2;virtio1;net0\", \"ide2\": \"local:iso/x.iso,media=cdrom\","
                          " \"virtio1\": \"local-lvm:vm-1-disk-1,size=8G\", \"scsi0\": \"local-lvm:vm-1-disk-0,size=20G\"}");
        assert_int_equal(launcher_boot_disk(c, key, &bytes), 0);
        assert_string_equal(key, "virtio1");
        assert_int_equal(bytes, 8ULL << 30);
        json_object_del(c, "boot");
        assert_int_equal(launcher_boot_disk(c, key, &bytes), 0);
        assert_string_equal(key, "scsi0");
        json_t *none = test_json_parse("{\"ide2\": \"none,media=cdrom\"}");
        assert_int_equal(launcher_boot_disk(none, key, &bytes), -ENOENT);
        assert_int_equal(launcher_disk_size("30Gi", arg, &bytes), 0);
        assert_string_equal(arg, "30G");
        assert_int_equal(bytes, 30ULL << 30);
        assert_int_equal(launcher_disk_size("1T", arg, &bytes), 0);
        assert_string_equal(arg, "1T");
        assert_int_equal(launcher_disk_size("30Mi", arg, &bytes), -EINVAL);
        json_decref(c);
        json_decref(none);
}

static void test_room_from_pve(void **state) {
        (void)state;
        json_t *st = test_json_parse("{\"cpuinfo\": {\"cpus\": 16, \"cores\": 8}, \"memory\": {\"total\": 68719476736}}");
        json_t *vms = test_json_parse("[{\"vmid\": 9000, \"template\": 1, \"maxcpu\": 2, \"maxmem\": 2147483648},"
                            " {\"vmid\": 100, \"cpus\": 4, \"maxmem\": 8589934592},"
                            " {\"vmid\": 101, \"maxcpu\": 2, \"maxmem\": 2147483648}]");
        struct launcher_room room;
        uint32_t skip[] = { 101 };
        assert_int_equal(launcher_room_from_pve(st, vms, skip, 1, 8, 16LL << 30, &room), 0);
        assert_int_equal(room.cpus, 16 - 4 - 8);
        assert_int_equal(room.memory_bytes, (64LL - 8 - 16) << 30);
        assert_int_equal(launcher_room_from_pve(vms, vms, NULL, 0, 0, 0, &room), -EINVAL);
        json_decref(st);
        json_decref(vms);
}

static void test_times(void **state) {
        (void)state;
        char buf[40];
        int64_t ms;
        assert_string_equal(rfc3339_format(0, buf, sizeof buf), "1970-01-01T00:00:00Z");
        assert_string_equal(rfc3339_format_ms(1782900000123, buf, sizeof buf), "2026-07-01T10:00:00.123Z");
        assert_int_equal(rfc3339_parse(buf, &ms), 0);
        assert_int_equal(ms, 1782900000123);
        assert_int_equal(rfc3339_parse("2026-07-01T10:00:00+02:00", &ms), -EINVAL);
}

static void test_conditions(void **state) {
        (void)state;
        json_t *status = json_object();
        assert_int_equal(launcher_condition_set(status, "Launched", "Unknown", "Launching", "", 1000), 0);
        assert_false(kube_condition_true(status, "Launched"));
        assert_int_equal(launcher_condition_set(status, "Launched", "True", "Launched", "ok", 5000000), 0);
        assert_true(kube_condition_true(status, "Launched"));
        json_t *c = json_array_get(json_object_get(status, "conditions"), 0);
        assert_string_equal(json_string_value(json_object_get(c, "lastTransitionTime")), "1970-01-01T01:23:20Z");
        /* Same status again: the transition time stays. */
        assert_int_equal(launcher_condition_set(status, "Launched", "True", "Launched", "again", 9000000), 0);
        assert_string_equal(json_string_value(json_object_get(c, "lastTransitionTime")), "1970-01-01T01:23:20Z");
        assert_int_equal(json_array_size(json_object_get(status, "conditions")), 1);
        json_decref(status);
}

static void test_tokens(void **state) {
        (void)state;
        char id[TOKENS_ID_LEN + 1], secret[TOKENS_SECRET_LEN + 1], id2[TOKENS_ID_LEN + 1], back[TOKENS_SECRET_LEN + 1];
        assert_int_equal(tokens_generate(id, secret), 0);
        assert_int_equal(strlen(id), 6);
        assert_int_equal(strspn(secret, "abcdefghijklmnopqrstuvwxyz0123456789"), 16);
        assert_int_equal(tokens_generate(id2, back), 0);
        assert_string_not_equal(secret, back);
        json_t *s = tokens_secret(id, secret, 1782900000000, NULL, "default-abc", "uid-1");
        assert_string_equal(json_string_value(json_object_get(s, "type")), "bootstrap.kubernetes.io/token");
        json_t *sd = json_object_get(s, "stringData");
        assert_string_equal(json_string_value(json_object_get(sd, "usage-bootstrap-signing")), "true");
        assert_string_equal(json_string_value(json_object_get(sd, "usage-bootstrap-authentication")), "true");
        assert_string_equal(json_string_value(json_object_get(sd, "expiration")), "2026-07-01T10:00:00Z");
        assert_string_equal(json_string_value(json_object_get(sd, "auth-extra-groups")), TOKENS_DEFAULT_GROUPS);
        char name[64];
        snprintf(name, sizeof name, "bootstrap-token-%s", id);
        assert_string_equal(json_string_value(json_object_get(json_object_get(s, "metadata"), "name")), name);
        /* data as the API server returns it: base64 */
        json_t *stored = test_json_parse("{\"data\": {\"token-secret\": \"MDEyMzQ1Njc4OWFiY2RlZg==\"}}");
        assert_int_equal(tokens_secret_value(stored, back), 0);
        assert_string_equal(back, "0123456789abcdef");
        json_t *bad = test_json_parse("{\"data\": {\"token-secret\": \"c2hvcnQ=\"}}");
        assert_int_equal(tokens_secret_value(bad, back), -EINVAL);
        json_decref(s);
        json_decref(stored);
        json_decref(bad);
}

static void test_token_id_for_claim(void **state) {
        (void)state;
        char a[TOKENS_ID_LEN + 1], again[TOKENS_ID_LEN + 1], b[TOKENS_ID_LEN + 1];
        assert_int_equal(tokens_id_for("6f1c2a4e-0000-4000-8000-000000000001", a), 0);
        assert_int_equal(tokens_id_for("6f1c2a4e-0000-4000-8000-000000000001", again), 0);
        assert_int_equal(tokens_id_for("6f1c2a4e-0000-4000-8000-000000000002", b), 0);
        assert_string_equal(a, again);             /* found again by name after a crash */
        assert_string_not_equal(a, b);             /* another claim, another token */
        assert_int_equal(strlen(a), TOKENS_ID_LEN);
        assert_int_equal(strspn(a, "abcdefghijklmnopqrstuvwxyz0123456789"), TOKENS_ID_LEN); /* kubeadm's [a-z0-9]{6} */
}

/* A Node with these taints (a JSON array text) and Ready status, judged with one startup taint "boot". */
static enum launcher_node_state node_init(const char *ready, const char *taints) {
        char text[1024];
        snprintf(text, sizeof text, "{\"metadata\": {\"name\": \"n\"}, \"spec\": {\"taints\": %s}, \"status\": "
                 "{\"conditions\": [{\"type\": \"Ready\", \"status\": \"%s\"}]}}", taints, ready);
        json_t *node = test_json_parse(text), *startup = test_json_parse("[{\"key\": \"boot\", \"effect\": \"NoSchedule\"}]");
        enum launcher_node_state st = launcher_node_state(node, startup);
        json_decref(node);
        json_decref(startup);
        return st;
}

#define INIT LAUNCHER_NODE_INITIALIZED
#define SETTLING LAUNCHER_NODE_SETTLING
#define TAINTED LAUNCHER_NODE_TAINTED
#define NOT_READY LAUNCHER_NODE_NOT_READY

/* Initialized as Karpenter decides it: Ready, and no unregistered, startup or known ephemeral taint left. */
static void test_node_state(void **state) {
        (void)state;
        assert_int_equal(node_init("True", "[]"), INIT);
        assert_int_equal(node_init("True", "[{\"key\": \"dedicated\", \"value\": \"x\", \"effect\": \"NoSchedule\"}]"), INIT);
        assert_int_equal(node_init("False", "[]"), NOT_READY);
        assert_int_equal(node_init("Unknown", "[]"), NOT_READY);
        assert_int_equal(node_init("True", "[{\"key\": \"pvescale.io/unregistered\", \"effect\": \"NoExecute\"}]"), TAINTED);
        assert_int_equal(node_init("True", "[{\"key\": \"boot\", \"effect\": \"NoSchedule\"}]"), TAINTED);
        /* Ready is set before the node lifecycle controller takes its not-ready taint off. */
        assert_int_equal(node_init("True", "[{\"key\": \"node.kubernetes.io/not-ready\", \"effect\": \"NoSchedule\"}]"),
                         SETTLING);
        assert_int_equal(node_init("True", "[{\"key\": \"node.kubernetes.io/not-ready\", \"effect\": \"NoExecute\"}]"),
                         SETTLING);
        assert_int_equal(node_init("True", "[{\"key\": \"node.kubernetes.io/unreachable\", \"effect\": \"NoSchedule\"}]"),
                         SETTLING);
        assert_int_equal(node_init("True", "[{\"key\": \"node.cloudprovider.kubernetes.io/uninitialized\", "
                                           "\"value\": \"true\", \"effect\": \"NoSchedule\"}]"), SETTLING);
        assert_int_equal(node_init("True", "[{\"key\": \"readiness.k8s.io/cni\", \"effect\": \"NoSchedule\"}]"), SETTLING);
        /* A startup taint outranks an ephemeral one: it waits on a node-local agent, not on Kubernetes. */
        assert_int_equal(node_init("True", "[{\"key\": \"node.kubernetes.io/not-ready\", \"effect\": \"NoSchedule\"},"
                                           " {\"key\": \"boot\", \"effect\": \"NoSchedule\"}]"), TAINTED);
        /* Same keys with other effects are not in the list. */
        assert_int_equal(node_init("True", "[{\"key\": \"node.kubernetes.io/unreachable\", \"effect\": \"NoExecute\"}]"), INIT);
        assert_int_equal(node_init("True", "[{\"key\": \"node.kubernetes.io/not-ready\", \"effect\": \"PreferNoSchedule\"}]"),
                         INIT);
        /* A Node without status is not Ready. */
        json_t *bare = test_json_parse("{\"metadata\": {\"name\": \"n\"}}");
        assert_int_equal(launcher_node_state(bare, NULL), NOT_READY);
        json_decref(bare);
}

static int64_t ready_since(const char *ready_condition) {
        char buf[512];
        snprintf(buf, sizeof buf, "{\"status\": {\"conditions\": [{\"type\": \"MemoryPressure\", \"status\": "
                 "\"False\", \"lastTransitionTime\": \"2026-01-01T00:00:00Z\"}, %s]}}", ready_condition);
        json_t *node = test_json_parse(buf);
        int64_t since = launcher_node_ready_since(node);
        json_decref(node);
        return since;
}

/* The Ready condition's own transition time, not another condition's; nothing when not Ready or undated. */
static void test_node_ready_since(void **state) {
        (void)state;
        int64_t want;
        assert_int_equal(rfc3339_parse("2026-11-21T10:00:05Z", &want), 0);
        assert_int_equal(ready_since("{\"type\": \"Ready\", \"status\": \"True\", "
                                     "\"lastTransitionTime\": \"2026-11-21T10:00:05Z\"}"), want);
        assert_int_equal(ready_since("{\"type\": \"Ready\", \"status\": \"False\", "
                                     "\"lastTransitionTime\": \"2026-11-21T10:00:05Z\"}"), -1);
        assert_int_equal(ready_since("{\"type\": \"Ready\", \"status\": \"True\"}"), -1);
        assert_int_equal(ready_since("{\"type\": \"Ready\", \"status\": \"True\", "
                                     "\"lastTransitionTime\": \"yesterday\"}"), -1);
        assert_int_equal(ready_since("{\"type\": \"DiskPressure\", \"status\": \"False\"}"), -1);
}

static void test_template_managed(void **state) {
        (void)state;
        static const struct {
                const char *ref;
                bool managed;
        } cases[] = { { "{\"kind\": \"ProxmoxTemplate\", \"name\": \"noble\"}", true },
                      { "{\"kind\": \"ProxmoxUnmanagedTemplate\", \"name\": \"t\"}", false },
                      { "{\"name\": \"t\"}", false }, { "null", false } };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                json_t *ref = json_loads(cases[i].ref, JSON_DECODE_ANY, NULL);
                assert_int_equal(launcher_template_managed(ref), cases[i].managed);
                json_decref(ref);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_numa_from_agent_and_params),
                cmocka_unit_test(test_numa_bad_input),
                cmocka_unit_test(test_net_queues),
                cmocka_unit_test(test_tags),
                cmocka_unit_test(test_tags_same),
                cmocka_unit_test(test_config_tagged),
                cmocka_unit_test(test_smbios_uuid),
                cmocka_unit_test(test_description_and_owner),
                cmocka_unit_test(test_boot_disk_and_size),
                cmocka_unit_test(test_room_from_pve),
                cmocka_unit_test(test_times),
                cmocka_unit_test(test_conditions),
                cmocka_unit_test(test_tokens),
                cmocka_unit_test(test_token_id_for_claim),
                cmocka_unit_test(test_node_state),
                cmocka_unit_test(test_node_ready_since),
                cmocka_unit_test(test_template_managed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
