/* test_array: array_grow doubles from the first capacity and keeps the contents. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "array.h"

static void test_grow_doubles_and_keeps(void **state) {
        (void)state;
        uint32_t *items = NULL;
        size_t n = 0, cap = 0;
        for (uint32_t v = 0; v < 100; v++) {
                assert_int_equal(ARRAY_GROW(&items, &cap, n, 16), 0);
                assert_true(cap > n);
                items[n++] = v * 3;
        }
        assert_int_equal(cap, 128); /* 16, 32, 64, 128 */
        for (uint32_t v = 0; v < 100; v++)
                assert_int_equal(items[v], v * 3);
        free(items);
}

static void test_room_left_is_no_op(void **state) {
        (void)state;
        char *items = malloc(4);
        char *before = items;
        size_t cap = 4;
        assert_int_equal(ARRAY_GROW(&items, &cap, 3, 8), 0);
        assert_ptr_equal(items, before);
        assert_int_equal(cap, 4);
        free(items);
}

static void test_overflow_is_enomem(void **state) {
        (void)state;
        struct big {
                char b[1024];
        } *items = NULL;
        size_t cap = SIZE_MAX / 1024, n = cap;
        assert_int_equal(ARRAY_GROW(&items, &cap, n, 8), -ENOMEM);
        assert_null(items);
        assert_int_equal(cap, SIZE_MAX / 1024);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_grow_doubles_and_keeps),
                cmocka_unit_test(test_room_left_is_no_op),
                cmocka_unit_test(test_overflow_is_enomem),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
