/* fuzz_lxc_conf: the pve-container .conf parser the agent reads every LXC container with (container_parse_config). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>

#include "container.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        char *text = fuzz_text(data, size);
        struct container *ct = NULL;
        if (container_parse_config(100, text, &ct) == 0) {
                (void)container_cpu_count(ct, 8192);
                json_decref(container_to_json(ct)); /* what GET /v1/containers shows of it */
        }
        container_free(ct);
        free(text);
        return 0;
}
