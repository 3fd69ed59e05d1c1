/* fuzz_config_yaml: the coordinator's config.yaml: the YAML reader, then the document's clusters and agents. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <jansson.h>

#include "config.h"
#include "fuzz.h"
#include "yamlconf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        fuzz_quiet();
        json_t *doc = NULL;
        char err[512];
        if (yamlconf_parse((const char *)data, size, &doc, err, sizeof err) < 0)
                return 0;
        struct config cfg;
        if (config_init(&cfg) == 0) {
                if (config_parse_document(&cfg, doc, err, sizeof err) == 0)
                        (void)config_check(&cfg, err, sizeof err);
                config_done(&cfg);
        }
        json_decref(doc);
        return 0;
}
