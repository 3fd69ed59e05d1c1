/* helm_render: print the chart's rendered manifests as JSON (helmrender), for integration tests:
 *   helm_render CHART_DIR [NAMESPACE [OVERRIDES_JSON]]
 * or convert a multi-document YAML stream (`helm template` output) on stdin to a JSON array of its objects:
 *   helm_render --yaml-to-json */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "helmrender.h"
#include "yamlconf.h"

/* Nonzero when s[0..n) holds only blank and comment lines. */
static int only_comments(const char *s, size_t n) {
        int bol = 1;
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '\n')
                        bol = 1;
                else if (bol && s[i] == '#')
                        for (; i < n && s[i] != '\n'; i++)
                                ;
                else if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
                        return 0;
                if (i < n && s[i] == '\n')
                        bol = 1;
        }
        return 1;
}

static int add_doc(json_t *docs, const char *s, size_t n) {
        char err[512];
        json_t *obj;
        if (only_comments(s, n))
                return 0;
        if (yamlconf_parse(s, n, &obj, err, sizeof err) < 0) {
                fprintf(stderr, "helm_render: yaml: %s\n", err);
                return -1;
        }
        return json_is_null(obj) ? (json_decref(obj), 0) : json_array_append_new(docs, obj);
}

static int yaml_to_json(void) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
                fwrite(buf, 1, n, f);
        fclose(f);
        json_t *docs = json_array();
        const char *doc = text, *p = text;
        int r = 0;
        for (; r == 0 && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
                if (strncmp(p, "---", 3) == 0 && (p[3] == '\n' || p[3] == '\0' || p[3] == ' ')) {
                        r = add_doc(docs, doc, (size_t)(p - doc));
                        doc = p + 3;
                }
        if (r == 0)
                r = add_doc(docs, doc, (size_t)(p - doc));
        free(text);
        if (r == 0) {
                json_dumpf(docs, stdout, JSON_INDENT(1));
                putchar('\n');
        }
        json_decref(docs);
        return r == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
        if (argc < 2) {
                fprintf(stderr, "usage: helm_render CHART_DIR [NAMESPACE [OVERRIDES_JSON]]\n");
                return 2;
        }
        if (strcmp(argv[1], "--yaml-to-json") == 0)
                return yaml_to_json();
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
