/* test_jsonutil: the merge patch between two objects says exactly what changed, and nothing it cannot say. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* from, to, and the patch between them (compact, keys sorted). */
static const struct diff_case {
        const char *from, *to, *want;
} CASES[] = {
        /* changed, added and removed members */
        { "{\"launchStep\":\"VMID\",\"vmid\":101,\"cloneTask\":\"UPID:x\"}",
          "{\"launchStep\":\"Launched\",\"vmid\":101,\"startedAt\":\"2026-11-21T10:00:00Z\"}",
          "{\"cloneTask\":null,\"launchStep\":\"Launched\",\"startedAt\":\"2026-11-21T10:00:00Z\"}" },
        /* objects on both sides become a nested patch: a whole new object would be merged into the old one,
         * keeping "cpus"; the nested null removes it */
        { "{\"placement\":{\"cpus\":\"4-7\",\"numa\":[{\"hostNode\":0}]}}",
          "{\"placement\":{\"numa\":[{\"hostNode\":1}]}}",
          "{\"placement\":{\"cpus\":null,\"numa\":[{\"hostNode\":1}]}}" },
        /* arrays, and a member that changes type, are replaced whole */
        { "{\"conditions\":[{\"type\":\"Launched\"}],\"host\":{\"name\":\"pve1\"}}",
          "{\"conditions\":[{\"type\":\"Launched\"},{\"type\":\"Registered\"}],\"host\":\"pve1\"}",
          "{\"conditions\":[{\"type\":\"Launched\"},{\"type\":\"Registered\"}],\"host\":\"pve1\"}" },
        /* equal objects, in any key order, give an empty patch */
        { "{\"a\":{\"b\":[1,2]},\"c\":\"d\"}", "{\"c\":\"d\",\"a\":{\"b\":[1,2]}}", "{}" },
        /* an unchanged null is no change, so nothing has to be said about it */
        { "{\"a\":null,\"b\":1}", "{\"a\":null,\"b\":2}", "{\"b\":2}" },
};

static void test_patches_say_what_changed(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
                char *got = diff_text(CASES[i].from, CASES[i].to);
                if (strcmp(got, CASES[i].want) != 0)
                        fail_msg("case %zu: got %s, want %s", i, got, CASES[i].want);
                free(got);
        }
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
        json_decref(from);
        json_decref(null_member);
        json_decref(null_inside);
        json_decref(not_object);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_patches_say_what_changed),
                cmocka_unit_test(test_what_a_merge_patch_cannot_say_is_einval),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
