/* fuzz_gotmpl: the Go-template engine cloud-init user data is rendered with: the template is the input up to its
 * first NUL, the data (JSON) what follows; parsed, then executed with a small output limit. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>

#include "fuzz.h"
#include "gotmpl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        const uint8_t *nul = memchr(data, 0, size);
        size_t tlen = nul ? (size_t)(nul - data) : size;
        json_t *root = nul ? json_loadb((const char *)nul + 1, size - tlen - 1, JSON_DECODE_ANY, NULL) : NULL;
        struct gotmpl *t = NULL;
        char err[GOTMPL_ERR_SIZE];
        if (gotmpl_parse("fuzz", (const char *)data, tlen, &t, err, sizeof err) == 0) {
                struct gotmpl_options o = { .max_output = 64 * 1024, .missingkey = size % 2 };
                char *out = NULL;
                size_t len = 0;
                if (gotmpl_execute(t, root, &o, &out, &len, err, sizeof err) == 0 && strlen(out) > len)
                        abort(); /* the output is NUL-terminated at len (it may hold NULs of its own) */
                free(out);
        }
        gotmpl_free(t);
        json_decref(root);
        return 0;
}
