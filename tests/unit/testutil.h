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

#ifdef PVE_PARAMS_INIT /* pve.h included first */
#include <string.h>
/* The last value of key in a request's parameters, or NULL. */
static inline const char *test_param(const struct pve_params *p, const char *key) {
        for (size_t i = p->n; i > 0; i--)
                if (strcmp(p->items[i - 1].key, key) == 0)
                        return p->items[i - 1].value;
        return NULL;
}
#endif
