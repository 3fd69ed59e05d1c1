/* fuzz: what the libFuzzer targets of tests/fuzz share: a NUL-terminated copy of the input, quiet logs, and the
 * entry point's prototype. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (it may hold NULs of its own; the parsers see the text up to the first). */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
        char *s = malloc(size + 1);
        if (!s)
                abort();
        memcpy(s, data, size);
        s[size] = '\0';
        return s;
}

/* Only errors would be logged, and the targets provoke many: keep stderr for libFuzzer's own reports. */
static inline void fuzz_quiet(void) {
        static int done;
        if (!done) {
                log_set_level((enum log_level)(LOG_LEVEL_ERROR + 1)); /* above every level: nothing */
                done = 1;
        }
}

/* The directory of the reference kit (../shared): $PVESCALE_SHARED, else relative to the working directory. */
static inline const char *fuzz_shared_dir(void) {
        const char *d = getenv("PVESCALE_SHARED");
        return d && *d ? d : "../shared";
}
