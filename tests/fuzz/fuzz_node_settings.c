/* fuzz_node_settings: the seed's node-setting file (region -> node or "*" -> reserved CPUs, memory, overrides). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "fuzz.h"
#include "node_settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        char *text = fuzz_text(data, size);
        char err[256];
        static const char *const names[][2] = { { "default", "pve1" }, { "eu-west", "node-a" }, { "", "" } };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                struct node_settings *s = NULL;
                if (node_settings_parse(text, names[i][0], names[i][1], &s, err, sizeof err) == 0 &&
                    !s->reserved_cpus)
                        abort(); /* the header promises reserved_cpus after a successful lookup */
                node_settings_free(s);
        }
        free(text);
        return 0;
}
