/* Tests for shared/yamlconf: YAML to JSON conversion, typing of scalars, and error positions. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "jsonutil.h"
#include "yamlconf.h"

static char *convert(const char *yaml) {
        json_t *v = NULL;
        char err[256] = "";
        int r = yamlconf_parse(yaml, strlen(yaml), &v, err, sizeof err);
        if (r < 0)
                fail_msg("parse failed: %s", err);
        char *out = jsonutil_dump(v);
        json_decref(v);
        return out;
}

static void assert_converts(const char *yaml, const char *json) {
        char *out = convert(yaml);
        assert_string_equal(out, json);
        free(out);
}

static void test_seed_clusters(void **state) {
        (void)state;
        assert_converts("clusters:\n"
                        "  - url: https://pve1:8006/api2/json\n"
                        "    insecure: false\n"
                        "    token_id: \"kubernetes@pve!csi\"\n"
                        "    token_secret: \"key\"\n"
                        "    region: Region-1\n",
                        "{\"clusters\":[{\"insecure\":false,\"region\":\"Region-1\",\"token_id\":\"kubernetes@pve!csi\","
                        "\"token_secret\":\"key\",\"url\":\"https://pve1:8006/api2/json\"}]}");
}

static void test_scalar_types(void **state) {
        (void)state;
        assert_converts("a: 8207\nb: \"8207\"\nc: true\nd: ~\ne:\nf: 1.5\ng: -3\nh: 'x y'\n",
                        "{\"a\":8207,\"b\":\"8207\",\"c\":true,\"d\":null,\"e\":null,\"f\":\"1.5\",\"g\":-3,\"h\":\"x y\"}");
        assert_converts("", "{}");
        assert_converts("# only a comment\n", "{}");
        assert_converts("[1, two]", "[1,\"two\"]");
}

static void assert_error(const char *yaml, const char *want_prefix) {
        json_t *v = NULL;
        char err[256] = "";
        assert_int_equal(yamlconf_parse(yaml, strlen(yaml), &v, err, sizeof err), -EINVAL);
        assert_null(v);
        if (strncmp(err, want_prefix, strlen(want_prefix)) != 0)
                fail_msg("error '%s' does not start with '%s'", err, want_prefix);
}

static void test_errors(void **state) {
        (void)state;
        assert_error("a: 1\nb: [1, 2\n", "line 3");
        assert_error("a: 1\na: 2\n", "line 2 column 1: duplicate key");
        assert_error("a: &x 1\nb: *x\n", "line 2 column 4: aliases are not supported");
        assert_error("a: b: c\n", "line 1");
}

static void test_load_missing(void **state) {
        (void)state;
        json_t *v = NULL;
        char err[256];
        assert_int_equal(yamlconf_load("/nonexistent/pvescale.yaml", &v, err, sizeof err), -ENOENT);
        assert_non_null(strstr(err, "/nonexistent/pvescale.yaml"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_seed_clusters),
                cmocka_unit_test(test_scalar_types),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_load_missing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
