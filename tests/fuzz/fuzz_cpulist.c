/* fuzz_cpulist: the cpulist ("0,2,4-6") and cpumask parsers; whatever parses must print and parse back the same. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "cpuset.h"
#include "fuzz.h"

static void roundtrip(const struct cpuset *s) {
        char *text = cpuset_format(s);
        struct cpuset *again = NULL;
        if (!text || cpuset_parse(text, &again) < 0 || !cpuset_equal(s, again))
                abort(); /* a set the parser accepted must survive its own printed form */
        cpuset_free(again);
        free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        char *text = fuzz_text(data, size);
        struct cpuset *s = NULL;
        if (cpuset_parse(text, &s) == 0)
                roundtrip(s);
        cpuset_free(s);
        free(text);
        return 0;
}
