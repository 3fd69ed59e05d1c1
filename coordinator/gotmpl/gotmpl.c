/* gotmpl: the engine's public entry points (parse, render, free); the top of the engine's files (see
 * gotmpl_internal.h for their order). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "gotmpl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gotmpl_internal.h"

void gotmpl_free(struct gotmpl *tmpl) {
        if (!tmpl)
                return;
        gotmpl__list_done(&tmpl->root);
        free(tmpl->name);
        free(tmpl->text);
        free(tmpl);
}

int gotmpl_parse(const char *name, const char *text, size_t len, struct gotmpl **ret_tmpl, char *err,
                 size_t errlen) {
        char dummy[1];
        struct gotmpl *t = calloc(1, sizeof *t);
        if (!err) {
                err = dummy;
                errlen = sizeof dummy;
        }
        if (!t)
                return -ENOMEM;
        t->name = strdup(name ? name : "template");
        t->text = malloc(len + 1);
        if (!t->name || !t->text) {
                gotmpl_free(t);
                return -ENOMEM;
        }
        memcpy(t->text, text, len);
        t->text[len] = 0;
        t->len = len;
        int r = gotmpl__parse(t, err, errlen);
        if (r < 0) {
                gotmpl_free(t);
                return r;
        }
        *ret_tmpl = t;
        return 0;
}

int gotmpl_render(const char *name, const char *text, json_t *data, const struct gotmpl_options *options,
                  char **ret_text, char *err, size_t errlen) {
        struct gotmpl *t;
        int r = gotmpl_parse(name, text, strlen(text), &t, err, errlen);
        if (r < 0)
                return r;
        r = gotmpl_execute(t, data, options, ret_text, NULL, err, errlen);
        gotmpl_free(t);
        return r;
}
