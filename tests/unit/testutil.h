/* testutil: small helpers shared by the cmocka unit tests (include after cmocka.h). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* Parse JSON written in a test; a typo in the test itself fails the test with jansson's reason. */
static inline json_t *test_json_parse(const char *text) {
        json_error_t e;
        json_t *v = json_loads(text, 0, &e);
        if (!v)
                fail_msg("bad test JSON: %s", e.text);
        return v;
}

/* Remove a scratch directory tree (rm -rf); 0, or -1 when that failed. */
static inline int test_rmtree(const char *dir) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        return system(cmd) == 0 ? 0 : -1;
}
