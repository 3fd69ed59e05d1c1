/* yaml2json: test helper: print each YAML file given (one document each, read with shared/yamlconf) as one
 * line of JSON, so that Python tests can send the repository's YAML (CRDs, manifests) to the simulator. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "yamlconf.h"

int main(int argc, char **argv) {
        for (int i = 1; i < argc; i++) {
                char err[512];
                json_t *doc;
                if (yamlconf_load(argv[i], &doc, err, sizeof err) < 0) {
                        fprintf(stderr, "yaml2json: %s\n", err);
                        return 1;
                }
                char *text = json_dumps(doc, JSON_COMPACT);
                json_decref(doc);
                if (!text)
                        return 1;
                puts(text);
                free(text);
        }
        return 0;
}
