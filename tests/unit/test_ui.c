/* Tests for agent/ui: the topology page is self-contained and keeps the token out of URLs; Accept negotiation. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "ui.h"

static void test_page_is_one_self_contained_document(void **state) {
        (void)state;
        const char *page = ui_page();
        assert_non_null(page);
        assert_int_equal(strncmp(page, "<!DOCTYPE html>\n", 16), 0);
        assert_non_null(strstr(page, "</html>\n"));
        /* No external assets: no script or stylesheet by reference, no absolute URLs, no imports. */
        static const char *const forbidden[] = { "<script src", "<link", "http://", "https://", "@import", "//cdn",
                                                 "<iframe", "<img" };
        for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
                if (strstr(page, forbidden[i]))
                        fail_msg("page holds %s", forbidden[i]);
        assert_non_null(strstr(page, "<style>"));
        assert_non_null(strstr(page, "<script>"));
        assert_non_null(strstr(page, "Content-Security-Policy"));
}

static void test_page_reads_the_api_with_a_bearer_token(void **state) {
        (void)state;
        const char *page = ui_page();
        static const char *const needed[] = { "'/v1/topology'", "'/v1/capacity'", "'/v1/vms'", "'/v1/reservations'",
                                              "'/v1/containers'", "dataset.ctid",
                                              "'Authorization': 'Bearer ' + token", "sessionStorage",
                                              "dataset.cpu", "dataset.vmid", "setInterval(refresh" };
        for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
                if (!strstr(page, needed[i]))
                        fail_msg("page lacks %s", needed[i]);
        /* The token never goes into a URL, local storage or a cookie, and data is never parsed as HTML. */
        static const char *const forbidden[] = { "?token", "&token", "localStorage.setItem", "document.cookie",
                                                 "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                                                 "eval(" };
        for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
                if (strstr(page, forbidden[i]))
                        fail_msg("page holds %s", forbidden[i]);
}

static void test_wants_html(void **state) {
        (void)state;
        assert_true(ui_wants_html("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"));
        assert_true(ui_wants_html("text/html"));
        assert_true(ui_wants_html("TEXT/HTML;q=0.9"));
        assert_true(ui_wants_html("application/xml, text/html"));
        assert_true(ui_wants_html("text/html, application/json"));
        assert_false(ui_wants_html("application/json, text/html"));
        assert_false(ui_wants_html("application/json"));
        assert_false(ui_wants_html("*/*"));
        assert_false(ui_wants_html("text/htmlx"));
        assert_false(ui_wants_html("xtext/html"));
        assert_false(ui_wants_html("text/htm"));
        assert_false(ui_wants_html(""));
        assert_false(ui_wants_html(NULL));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_page_is_one_self_contained_document),
                cmocka_unit_test(test_page_reads_the_api_with_a_bearer_token),
                cmocka_unit_test(test_wants_html),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
