/* test_jsonutil: the merge patch between two objects says exactly what changed, and nothing it cannot say. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "jsonutil.h"

static json_t *parse(const char *text) {
        json_t *v = json_loads(text, 0, NULL);
        assert_non_null(v);
        return v;
}

/* The patch from `from` to `to`, as a compact key-sorted string. */
static char *diff_text(const char *from, const char *to) {
        json_t *a = parse(from), *b = parse(to), *patch = NULL;
        assert_int_equal(jsonutil_merge_diff(a, b, &patch), 0);
        char *s = jsonutil_dump(patch);
        json_decref(a);
        json_decref(b);
        json_decref(patch);
        return s;
}

static void assert_diff(const char *from, const char *to, const char *want) {
        char *got = diff_text(from, to);
        assert_string_equal(got, want);
        free(got);
}

static void test_changed_added_and_removed_members(void **state) {
        (void)state;
        assert_diff("{\"launchStep\":\"VMID\",\"vmid\":101,\"cloneTask\":\"UPID:x\"}",
                    "{\"launchStep\":\"Launched\",\"vmid\":101,\"startedAt\":\"2026-11-21T10:00:00Z\"}",
                    "{\"cloneTask\":null,\"launchStep\":\"Launched\",\"startedAt\":\"2026-11-21T10:00:00Z\"}");
}

static void test_objects_on_both_sides_become_a_nested_patch(void **state) {
        (void)state;
        /* A whole new object would be merged into the old one, keeping "cpus": the nested null removes it. */
        assert_diff("{\"placement\":{\"cpus\":\"4-7\",\"numa\":[{\"hostNode\":0}]}}",
                    "{\"placement\":{\"numa\":[{\"hostNode\":1}]}}",
                    "{\"placement\":{\"cpus\":null,\"numa\":[{\"hostNode\":1}]}}");
}

static void test_arrays_and_type_changes_are_replaced_whole(void **state) {
        (void)state;
        assert_diff("{\"conditions\":[{\"type\":\"Launched\"}],\"host\":{\"name\":\"pve1\"}}",
                    "{\"conditions\":[{\"type\":\"Launched\"},{\"type\":\"Registered\"}],\"host\":\"pve1\"}",
                    "{\"conditions\":[{\"type\":\"Launched\"},{\"type\":\"Registered\"}],\"host\":\"pve1\"}");
}

static void test_equal_objects_give_an_empty_patch(void **state) {
        (void)state;
        assert_diff("{\"a\":{\"b\":[1,2]},\"c\":\"d\"}", "{\"c\":\"d\",\"a\":{\"b\":[1,2]}}", "{}");
}

static void test_what_a_merge_patch_cannot_say_is_einval(void **state) {
        (void)state;
        json_t *from = parse("{\"a\":1}"), *patch = NULL;
        json_t *null_member = parse("{\"a\":2,\"b\":null}"), *null_inside = parse("{\"a\":[1,null]}");
        json_t *not_object = parse("[1]");
        assert_int_equal(jsonutil_merge_diff(from, null_member, &patch), -EINVAL);
        assert_int_equal(jsonutil_merge_diff(from, null_inside, &patch), -EINVAL);
        assert_int_equal(jsonutil_merge_diff(from, not_object, &patch), -EINVAL);
        assert_int_equal(jsonutil_merge_diff(not_object, from, &patch), -EINVAL);
        assert_null(patch);
        /* An unchanged null is no change, so nothing has to be said about it. */
        assert_diff("{\"a\":null,\"b\":1}", "{\"a\":null,\"b\":2}", "{\"b\":2}");
        json_decref(from);
        json_decref(null_member);
        json_decref(null_inside);
        json_decref(not_object);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_changed_added_and_removed_members),
                cmocka_unit_test(test_objects_on_both_sides_become_a_nested_patch),
                cmocka_unit_test(test_arrays_and_type_changes_are_replaced_whole),
                cmocka_unit_test(test_equal_objects_give_an_empty_patch),
                cmocka_unit_test(test_what_a_merge_patch_cannot_say_is_einval),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
