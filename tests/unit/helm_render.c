/* helm_render: print the chart's rendered manifests as JSON (helmrender), for integration tests:
 *   helm_render CHART_DIR [NAMESPACE [OVERRIDES_JSON]] */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>

#include "helmrender.h"

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: helm_render CHART_DIR [NAMESPACE [OVERRIDES_JSON]]\n");
                return 2;
        }
        json_t *overrides = NULL, *docs;
        json_error_t je;
        char err[512];
        if (argc > 3 && !(overrides = json_loads(argv[3], 0, &je))) {
                fprintf(stderr, "helm_render: overrides: %s\n", je.text);
                return 2;
        }
        int r = helmrender_chart(argv[1], overrides, argc > 2 ? argv[2] : "kube-system", &docs, err, sizeof err);
        json_decref(overrides);
        if (r < 0) {
                fprintf(stderr, "helm_render: %s\n", err);
                return 1;
        }
        json_dumpf(docs, stdout, JSON_INDENT(1));
        putchar('\n');
        json_decref(docs);
        return 0;
}
