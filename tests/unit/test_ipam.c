/* Tests for coordinator/model/ipam: spec.ipam parsed into pools (and rejected with the field named), the lowest free
 * address of IPv4 and IPv6 ranges past addresses in use, exclusions and the gateway, exhaustion naming the pool,
 * status.ipconfig read back and the .Network data. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "ipam.h"

static json_t *spec(const char *text) {
        json_error_t e;
        json_t *j = json_loads(text, 0, &e);
        if (!j)
                fail_msg("bad JSON in test: %s", e.text);
        return j;
}

static int parse(const char *text, struct ipam_config *cfg, char *err, size_t errlen) {
        json_t *j = spec(text);
        int r = ipam_config_parse(j, cfg, err, errlen);
        json_decref(j);
        return r;
}

static void alloc_ok(const struct ipam_config *cfg, struct ipam_inuse *used, const char *want) {
        char out[IPAM_STATUS_MAX], err[256] = "";
        int r = ipam_allocate(cfg, used, out, sizeof out, err, sizeof err);
        if (r != 0)
                fail_msg("ipam_allocate: %d %s", r, err);
        assert_string_equal(out, want);
        assert_int_equal(ipam_inuse_add_status(used, out), 0);
}

static void test_absent_is_no_pool(void **state) {
        (void)state;
        struct ipam_config cfg;
        char err[256];
        assert_int_equal(ipam_config_parse(NULL, &cfg, err, sizeof err), 0);
        assert_int_equal(cfg.n_ifaces, 0);
        assert_int_equal(parse("{}", &cfg, err, sizeof err), 0);
        assert_int_equal(cfg.n_ifaces, 0);
}

static void test_ipv4_subnet_skips_network_gateway_and_broadcast(void **state) {
        (void)state;
        struct ipam_config cfg;
        struct ipam_inuse used = { 0 };
        char err[256], out[IPAM_STATUS_MAX];
        assert_int_equal(parse("{\"ipconfig\": [{\"ip\": \"10.0.0.0/30\", \"gw\": \"10.0.0.1\"}]}", &cfg, err,
                               sizeof err),
                         0);
        assert_int_equal(cfg.n_ifaces, 1);
        assert_int_equal(cfg.ifaces[0].index, 0);
        /* 10.0.0.0 is the network, .1 the gateway, .3 the broadcast: .2 is the only one */
        alloc_ok(&cfg, &used, "ipconfig0=ip=10.0.0.2/30,gw=10.0.0.1");
        assert_int_equal(ipam_allocate(&cfg, &used, out, sizeof out, err, sizeof err), -ENOSPC);
        assert_string_equal(err, "ipam.ipconfig[0] (net0) IPv4 pool 10.0.0.1-10.0.0.2: no free address");
        assert_string_equal(out, "");
        ipam_inuse_done(&used);
}

static void test_range_exclusions_and_addresses_in_use(void **state) {
        (void)state;
        struct ipam_config cfg;
        struct ipam_inuse used = { 0 };
        char err[256], out[IPAM_STATUS_MAX];
        assert_int_equal(parse("{\"ipconfig\": [{\"interface\": \"net1\", \"ip\": \"192.168.1.0/24\", \"gw\": "
                               "\"192.168.1.1\", \"range\": \"192.168.1.100-192.168.1.110\", \"exclude\": "
                               "[\"192.168.1.100-192.168.1.103\", \"192.168.1.105\"]}]}",
                               &cfg, err, sizeof err),
                         0);
        assert_int_equal(cfg.ifaces[0].index, 1);
        assert_int_equal(ipam_inuse_add_text(&used, "192.168.1.104"), 0);       /* a Node's InternalIP */
        assert_int_equal(ipam_inuse_add_ipconfig(&used, "ip=192.168.1.106/24,gw=192.168.1.1"), 0); /* a VM's */
        assert_int_equal(ipam_inuse_add_ipconfig(&used, "ip=dhcp,ip6=auto"), 0);
        assert_int_equal(ipam_inuse_add_text(&used, "not an address"), 0);
        alloc_ok(&cfg, &used, "ipconfig1=ip=192.168.1.107/24,gw=192.168.1.1");
        alloc_ok(&cfg, &used, "ipconfig1=ip=192.168.1.108/24,gw=192.168.1.1");
        alloc_ok(&cfg, &used, "ipconfig1=ip=192.168.1.109/24,gw=192.168.1.1");
        alloc_ok(&cfg, &used, "ipconfig1=ip=192.168.1.110/24,gw=192.168.1.1");
        assert_int_equal(ipam_allocate(&cfg, &used, out, sizeof out, err, sizeof err), -ENOSPC);
        assert_string_equal(err, "ipam.ipconfig[0] (net1) IPv4 pool 192.168.1.100-192.168.1.110: no free address");
        ipam_inuse_done(&used);
}

static void test_released_address_is_reused_first(void **state) {
        (void)state;
        struct ipam_config cfg;
        struct ipam_inuse used = { 0 };
        char err[256];
        assert_int_equal(parse("{\"ipconfig\": [{\"ip\": \"10.1.0.0/24\"}]}", &cfg, err, sizeof err), 0);
        assert_int_equal(ipam_inuse_add_status(&used, "ipconfig0=ip=10.1.0.1/24 ipconfig0=ip=10.1.0.3/24"), 0);
        /* 10.1.0.2 was released (its claim gone): the lowest free one is taken again */
        alloc_ok(&cfg, &used, "ipconfig0=ip=10.1.0.2/24");
        alloc_ok(&cfg, &used, "ipconfig0=ip=10.1.0.4/24");
        ipam_inuse_done(&used);
}

static void test_ipv6_and_dual_stack_on_two_interfaces(void **state) {
        (void)state;
        struct ipam_config cfg;
        struct ipam_inuse used = { 0 };
        char err[256], out[IPAM_STATUS_MAX];
        assert_int_equal(parse("{\"ipconfig\": [{\"interface\": \"net0\", \"ip\": \"10.0.0.0/29\","
                               " \"gw\": \"10.0.0.1\", \"ip6\": \"fd00:1::/124\", \"gw6\": \"fd00:1::1\","
                               " \"exclude\": [\"fd00:1::2-fd00:1::e\"]},"
                               " {\"interface\": \"net2\", \"ip6\": \"fd00:2::/64\"}],"
                               " \"nameservers\": [\"10.0.0.53\", \"fd00:1::53\"],"
                               " \"searchDomains\": [\"k8s.example\"]}",
                               &cfg, err, sizeof err),
                         0);
        assert_int_equal(cfg.n_ifaces, 2);
        assert_int_equal(cfg.n_nameservers, 2);
        assert_string_equal(cfg.searchdomains[0], "k8s.example");
        assert_int_equal(ipam_inuse_add_text(&used, "fd00:2::1"), 0);
        assert_int_equal(ipam_inuse_add_text(&used, "FD00:2:0::2/64"), 0); /* any spelling of the address */
        /* the IPv6 range's last address (no broadcast in IPv6) is handed out */
        alloc_ok(&cfg, &used,
                 "ipconfig0=ip=10.0.0.2/29,gw=10.0.0.1,ip6=fd00:1::f/124,gw6=fd00:1::1 ipconfig2=ip6=fd00:2::3/64");
        assert_int_equal(ipam_allocate(&cfg, &used, out, sizeof out, err, sizeof err), -ENOSPC);
        assert_string_equal(err, "ipam.ipconfig[0] (net0) IPv6 pool fd00:1::1-fd00:1::f: no free address");
        ipam_inuse_done(&used);
}

static void test_same_subnet_on_two_interfaces_gets_two_addresses(void **state) {
        (void)state;
        struct ipam_config cfg;
        struct ipam_inuse used = { 0 };
        char err[256];
        assert_int_equal(parse("{\"ipconfig\": [{\"interface\": \"net0\", \"ip\": \"10.0.0.0/24\"},"
                               " {\"interface\": \"net1\", \"ip\": \"10.0.0.0/24\"}]}", &cfg, err, sizeof err), 0);
        alloc_ok(&cfg, &used, "ipconfig0=ip=10.0.0.1/24 ipconfig1=ip=10.0.0.2/24");
        ipam_inuse_done(&used);
}

static void test_bad_input_names_the_field(void **state) {
        (void)state;
        static const struct {
                const char *json, *err;
        } cases[] = {
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.5/24\"}]}",
                  "ipam.ipconfig[0].ip: \"10.0.0.5/24\" has host bits set: give the subnet, not an address" },
                { "{\"ipconfig\": [{\"ip\": \"fd00::/64\"}]}",
                  "ipam.ipconfig[0].ip: \"fd00::/64\" is not an IPv4 subnet (e.g. 10.0.0.0/24)" },
                { "{\"ipconfig\": [{\"ip6\": \"10.0.0.0/24\"}]}",
                  "ipam.ipconfig[0].ip6: \"10.0.0.0/24\" is not an IPv6 subnet (e.g. fd00:1::/64)" },
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.0/24\", \"gw\": \"10.0.1.1\"}]}",
                  "ipam.ipconfig[0].gw: \"10.0.1.1\" is not an address inside 10.0.0.0/24" },
                { "{\"ipconfig\": [{\"gw\": \"10.0.0.1\"}]}", "ipam.ipconfig[0].ip: required with gw" },
                { "{\"ipconfig\": [{\"interface\": \"net0\"}]}", "ipam.ipconfig[0]: needs ip, ip6 or both" },
                { "{\"ipconfig\": [{\"interface\": \"eth0\", \"ip\": \"10.0.0.0/24\"}]}",
                  "ipam.ipconfig[0].interface: \"eth0\" is not net0 to net31" },
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.0/24\"}, {\"ip\": \"10.0.1.0/24\"}]}",
                  "ipam.ipconfig[1].interface: net0 is given twice" },
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.0/24\", \"range\": \"10.0.0.9-10.0.0.5\"}]}",
                  "ipam.ipconfig[0].range: \"10.0.0.9-10.0.0.5\" ends before it begins" },
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.0/24\", \"range\": \"10.0.1.1-10.0.1.5\"}]}",
                  "ipam.ipconfig[0].range: \"10.0.1.1-10.0.1.5\" is not inside the subnet" },
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.0/24\", \"exclude\": [\"fd00::1\"]}]}",
                  "ipam.ipconfig[0].exclude[0]: \"fd00::1\" but the interface has no ip6 pool" },
                { "{\"ipconfig\": [{\"ip\": \"10.0.0.0/24\", \"exclude\": [\"x\"]}]}",
                  "ipam.ipconfig[0].exclude[0]: must be an address or a range first-last" },
                { "{\"nameservers\": [\"dns.example\"]}", "ipam.nameservers[0]: must be an IPv4 or IPv6 address" },
                { "{\"searchDomains\": [\"a b\"]}", "ipam.searchDomains[0]: must be a domain name" },
                { "[]", "ipam: must be an object" },
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                struct ipam_config cfg;
                char err[256] = "";
                assert_int_equal(parse(cases[i].json, &cfg, err, sizeof err), -EINVAL);
                assert_string_equal(err, cases[i].err);
        }
}

static void test_status_split_and_network_data(void **state) {
        (void)state;
        struct ipam_ipconfig ic[4];
        struct ipam_config cfg;
        char err[256];
        assert_int_equal(ipam_status_split("ipconfig0=ip=10.0.0.2/24,gw=10.0.0.1 ipconfig3=ip6=fd00::2/64", ic, 4), 2);
        assert_int_equal(ic[1].index, 3);
        assert_string_equal(ic[1].value, "ip6=fd00::2/64");
        assert_int_equal(ipam_status_split("", ic, 4), 0);
        assert_int_equal(ipam_status_split("net0=ip=10.0.0.2/24", ic, 4), -EINVAL);
        assert_int_equal(ipam_status_split("ipconfig0=a ipconfig1=b", ic, 1), -EINVAL);

        assert_int_equal(parse("{\"nameservers\": [\"10.0.0.53\"], \"searchDomains\": [\"k8s.example\"]}", &cfg, err,
                               sizeof err), 0);
        json_t *vm = spec("{\"net0\": \"virtio=BC:24:11:00:00:01,bridge=vmbr0\"}");
        json_t *d = ipam_network_data("ipconfig0=ip=10.0.0.2/24,gw=10.0.0.1,ip6=fd00::2/64,gw6=fd00::1", &cfg, vm);
        char *text = json_dumps(d, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(text,
                            "{\"Interfaces\":[{\"Gateway4\":\"10.0.0.1\",\"Gateway6\":\"fd00::1\","
                            "\"IPv4\":\"10.0.0.2\",\"IPv4CIDR\":\"10.0.0.2/24\",\"IPv6\":\"fd00::2\","
                            "\"IPv6CIDR\":\"fd00::2/64\",\"Index\":0,"
                            "\"MAC\":\"BC:24:11:00:00:01\",\"Name\":\"net0\",\"Prefix4\":24,\"Prefix6\":64}],"
                            "\"Nameservers\":[\"10.0.0.53\"],\"SearchDomains\":[\"k8s.example\"],\"Static\":true}");
        free(text);
        json_decref(d);
        d = ipam_network_data(NULL, NULL, NULL);
        text = json_dumps(d, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(text, "{\"Interfaces\":[],\"Nameservers\":[],\"SearchDomains\":[],\"Static\":false}");
        free(text);
        json_decref(d);
        json_decref(vm);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_absent_is_no_pool),
                cmocka_unit_test(test_ipv4_subnet_skips_network_gateway_and_broadcast),
                cmocka_unit_test(test_range_exclusions_and_addresses_in_use),
                cmocka_unit_test(test_released_address_is_reused_first),
                cmocka_unit_test(test_ipv6_and_dual_stack_on_two_interfaces),
                cmocka_unit_test(test_same_subnet_on_two_interfaces_gets_two_addresses),
                cmocka_unit_test(test_bad_input_names_the_field),
                cmocka_unit_test(test_status_split_and_network_data),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
