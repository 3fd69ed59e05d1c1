/* gotmpl: a Go text/template-compatible template engine (a subset, plus the Sprig/Helm functions cloud-init
 * templates use) over jansson data. Pure: template text and data in, text out; no I/O. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stddef.h>

/* Supported (docs/coordinator.md, "Templates", has the full list and the deviations from Go):
 *   text and {{actions}}, trim markers "{{- " and " -}}", comments ({{ slash-star ... star-slash }});
 *   {{if}}/{{else if}}/{{else}}/{{end}}, {{range}} (arrays; objects in sorted key order; {{else}}; $i, $v :=;
 *   {{break}}, {{continue}}), {{with}}/{{else with}}/{{else}}; variables $x := / $x = and $;
 *   fields .A.B, $x.A, (pipeline).A; pipelines a | b c; string (quoted and raw), number, bool and nil literals;
 *   Go built-ins and or not eq ne lt le gt ge len index print println printf;
 *   Sprig/Helm functions default quote indent nindent b64enc toJson toYaml join upper lower trim,
 *   and also trimPrefix trimSuffix replace contains hasPrefix hasSuffix split list dict.
 * Not supported: {{define}}, {{template}}, {{block}}, character constants, methods. */

#define GOTMPL_DEFAULT_MAX_OUTPUT (1024 * 1024)
#define GOTMPL_ERR_SIZE 512 /* a comfortable size for err buffers */

struct gotmpl;

enum gotmpl_missingkey {
        /* Go's default (missingkey=default): a missing map key yields "no value": it prints "<no value>", is
         * false in {{if}} and empty for `default`. */
        GOTMPL_MISSINGKEY_DEFAULT = 0,
        /* missingkey=error: reading a missing key fails ("map has no entry for key"). */
        GOTMPL_MISSINGKEY_ERROR,
};

struct gotmpl_options {
        size_t max_output; /* bytes of output (and of any one function result); 0: GOTMPL_DEFAULT_MAX_OUTPUT */
        enum gotmpl_missingkey missingkey;
};

/* Parse text (len bytes, need not be NUL-terminated) once; execute the result any number of times, also
 * from several threads at once. name is used in error messages ("user-data:12:7: ...").
 * Returns 0 and *ret_tmpl (free with gotmpl_free), -EINVAL with the message in err (which may be NULL), or
 * -ENOMEM. */
int gotmpl_parse(const char *name, const char *text, size_t len, struct gotmpl **ret_tmpl, char *err,
                 size_t errlen);

/* Execute with data as the root (".", "$"); data is not modified and may be NULL. options may be NULL
 * (defaults). Returns 0 with the NUL-terminated output in *ret_text (caller frees) and its length in
 * *ret_len (may be NULL); -EINVAL for a template error ("name:line:col: at <.X | upper>: message" in err);
 * -EFBIG when the output would exceed max_output; -ENOMEM. Nothing is written to ret_* on failure. */
int gotmpl_execute(const struct gotmpl *tmpl, json_t *data, const struct gotmpl_options *options,
                   char **ret_text, size_t *ret_len, char *err, size_t errlen);

/* Parse and execute in one call (for one-off renders). Same results as the two calls. */
int gotmpl_render(const char *name, const char *text, json_t *data, const struct gotmpl_options *options,
                  char **ret_text, char *err, size_t errlen);


/* Frees tmpl; accepts NULL. */
void gotmpl_free(struct gotmpl *tmpl);
