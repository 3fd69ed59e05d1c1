/* gotmpl_yaml: Helm's toYaml (sigs.k8s.io/yaml.Marshal: keys sorted, block style, go-yaml v2 quoting rules)
 * written with libyaml's emitter. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "gotmpl_internal.h"
#include "jsonutil.h"

/* Integral floats go through JSON as digits; go-yaml reads them back as integers when they fit int64 or
 * uint64, and as floats otherwise. */
#define INT64_FLOAT_MIN -9223372036854775808.0
#define UINT64_FLOAT_LIMIT 18446744073709551616.0

struct emit {
        yaml_emitter_t emitter;
        struct gt_buf *out;
        int status;
};

/* ---- go-yaml v2's resolver: which plain strings would read back as something else ---- */

static const char *const special_words[] = {
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF",
        "<<", NULL,
};

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static size_t digits_run(const char *s, const char *valid) {
        size_t n = 0;
        while (s[n] && strchr(valid, s[n]))
                n++;
        return n;
}

/* ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ (go-yaml's yamlStyleFloat) */
static bool yaml_style_float(const char *s) {
        s += (*s == '-' || *s == '+');
        if (*s == '.') {
                size_t n = digits_run(s + 1, "0123456789");
                if (n == 0)
                        return false;
                s += 1 + n;
        } else {
                size_t n = digits_run(s, "0123456789");
                if (n == 0)
                        return false;
                s += n;
                if (*s == '.')
                        s += 1 + digits_run(s + 1, "0123456789");
        }
        if (*s == 'e' || *s == 'E') {
                s++;
                s += (*s == '-' || *s == '+');
                size_t n = digits_run(s, "0123456789");
                if (n == 0)
                        return false;
                s += n;
        }
        return *s == 0;
}

/* strconv.ParseInt(s, 0, 64) or ParseUint succeeds (syntax only; underscores already removed). */
static bool go_int_syntax(const char *s) {
        s += (*s == '-' || *s == '+');
        if (s[0] == '0' && s[1] && strchr("xX", s[1]))
                return s[2] && digits_run(s + 2, "0123456789abcdefABCDEF") == strlen(s + 2);
        if (s[0] == '0' && s[1] && strchr("oO", s[1]))
                return s[2] && digits_run(s + 2, "01234567") == strlen(s + 2);
        if (s[0] == '0' && s[1] && strchr("bB", s[1]))
                return s[2] && digits_run(s + 2, "01") == strlen(s + 2);
        if (s[0] == '0')
                return digits_run(s, "01234567") == strlen(s);
        return *s && digits_run(s, "0123456789") == strlen(s);
}

/* ^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$ (YAML 1.1 sexagesimal numbers) */
static bool base60_float(const char *s) {
        s += (*s == '-' || *s == '+');
        if (!is_digit(*s))
                return false;
        s += digits_run(s, "0123456789_");
        int groups = 0;
        while (*s == ':') {
                s++;
                if (is_digit(s[0]) && is_digit(s[1]) && s[0] <= '5')
                        s += 2;
                else if (is_digit(s[0]))
                        s += 1;
                else
                        return false;
                groups++;
        }
        if (groups == 0)
                return false;
        if (*s == '.')
                s += 1 + digits_run(s + 1, "0123456789_");
        return *s == 0;
}

/* go-yaml's timestamp formats: 2006-1-2, then optionally [Tt ]15:4:5[.frac] (Z07:00 after T/t). */
static bool timestamp_like(const char *s) {
        size_t n = digits_run(s, "0123456789");
        if (n != 4 || s[4] != '-')
                return false;
        s += 5;
        for (int part = 0; part < 2; part++) {
                n = digits_run(s, "0123456789");
                if (n < 1 || n > 2 || (part == 0 && s[n] != '-'))
                        return false;
                s += n + (part == 0);
        }
        if (*s == 0)
                return true;
        bool zone = *s == 'T' || *s == 't';
        if (!zone && *s != ' ')
                return false;
        s++;
        for (int part = 0; part < 3; part++) {
                n = digits_run(s, "0123456789");
                if (n < 1 || n > 2 || (part < 2 && s[n] != ':'))
                        return false;
                s += n + (part < 2);
        }
        if (*s == '.')
                s += 1 + digits_run(s + 1, "0123456789");
        if (!zone)
                return *s == 0;
        if (*s == 'Z')
                return s[1] == 0;
        return (*s == '+' || *s == '-') && is_digit(s[1]) && is_digit(s[2]) && s[3] == ':' && is_digit(s[4]) &&
               is_digit(s[5]) && s[6] == 0;
}

static bool number_like(const char *s) {
        char plain[128];
        size_t n = 0;
        for (; *s && n + 1 < sizeof plain; s++)
                if (*s != '_')
                        plain[n++] = *s;
        plain[n] = 0;
        if (*s)
                return false;
        if (plain[0] == '.')
                return yaml_style_float(plain); /* hint '.': strconv.ParseFloat */
        if (go_int_syntax(plain) || yaml_style_float(plain))
                return true;
        return strncmp(plain, "0b", 2) == 0 || strncmp(plain, "-0b", 3) == 0 ? go_int_syntax(plain) : false;
}

/* True when go-yaml v2 would not write this string plain: it would read back as null, bool, number,
 * timestamp or merge key. */
static bool needs_quotes(const char *s) {
        for (const char *const *w = special_words; *w; w++)
                if (strcmp(s, *w) == 0)
                        return true;
        if (is_digit(s[0]) || s[0] == '-' || s[0] == '+' || s[0] == '.')
                if (number_like(s) || timestamp_like(s))
                        return true;
        return base60_float(s);
}

/* ---- emitting ---- */

static int write_handler(void *data, unsigned char *buffer, size_t size) {
        struct emit *e = data;
        int r = gotmpl__buf_add(e->out, (const char *)buffer, size);
        if (r < 0)
                e->status = r;
        return r >= 0;
}

static int emit(struct emit *e, yaml_event_t *ev) {
        if (!yaml_emitter_emit(&e->emitter, ev))
                return e->status < 0 ? e->status : -EINVAL;
        return 0;
}

static int emit_scalar(struct emit *e, const char *s, size_t len, yaml_scalar_style_t style) {
        yaml_event_t ev;
        if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)len, 1, 1, style))
                return -ENOMEM;
        return emit(e, &ev);
}

static int emit_string(struct emit *e, const char *s, size_t len) {
        yaml_scalar_style_t style = YAML_PLAIN_SCALAR_STYLE;
        if (memchr(s, '\n', len))
                style = YAML_LITERAL_SCALAR_STYLE;
        else if (strlen(s) != len || needs_quotes(s))
                style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
        return emit_scalar(e, s, len, style);
}

static int emit_real(struct emit *e, double d) {
        char buf[64];
        if (d == floor(d) && d >= INT64_FLOAT_MIN && d < UINT64_FLOAT_LIMIT)
                snprintf(buf, sizeof buf, "%.0f", d);
        else
                gotmpl__format_float(d, buf, sizeof buf);
        return emit_scalar(e, buf, strlen(buf), YAML_PLAIN_SCALAR_STYLE);
}

static int emit_value(struct emit *e, const json_t *v, int depth);

static int emit_object(struct emit *e, const json_t *v, int depth) {
        yaml_event_t ev;
        size_t n, i;
        const char **keys = jsonutil_sorted_keys(v, &n);
        if (!keys)
                return -ENOMEM;
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        int r = emit(e, &ev);
        for (i = 0; i < n && r >= 0; i++) {
                r = emit_string(e, keys[i], strlen(keys[i]));
                if (r >= 0)
                        r = emit_value(e, json_object_get(v, keys[i]), depth + 1);
        }
        free(keys);
        if (r < 0)
                return r;
        yaml_mapping_end_event_initialize(&ev);
        return emit(e, &ev);
}

static int emit_array(struct emit *e, const json_t *v, int depth) {
        yaml_event_t ev;
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        int r = emit(e, &ev);
        for (size_t i = 0; i < json_array_size(v) && r >= 0; i++)
                r = emit_value(e, json_array_get(v, i), depth + 1);
        if (r < 0)
                return r;
        yaml_sequence_end_event_initialize(&ev);
        return emit(e, &ev);
}

static int emit_value(struct emit *e, const json_t *v, int depth) {
        char buf[32];
        if (depth > GT_MAX_VALUE_DEPTH)
                return -ELOOP;
        switch (v ? json_typeof(v) : JSON_NULL) {
        case JSON_OBJECT:
                return emit_object(e, v, depth);
        case JSON_ARRAY:
                return emit_array(e, v, depth);
        case JSON_STRING:
                return emit_string(e, json_string_value(v), json_string_length(v));
        case JSON_INTEGER:
                snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                return emit_scalar(e, buf, strlen(buf), YAML_PLAIN_SCALAR_STYLE);
        case JSON_REAL:
                return emit_real(e, json_real_value(v));
        case JSON_TRUE:
                return emit_scalar(e, "true", 4, YAML_PLAIN_SCALAR_STYLE);
        case JSON_FALSE:
                return emit_scalar(e, "false", 5, YAML_PLAIN_SCALAR_STYLE);
        case JSON_NULL:
                break;
        }
        return emit_scalar(e, "null", 4, YAML_PLAIN_SCALAR_STYLE);
}

static int emit_document(struct emit *e, const json_t *v) {
        yaml_event_t ev;
        yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
        int r = emit(e, &ev);
        if (r >= 0) {
                yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
                r = emit(e, &ev);
        }
        if (r >= 0)
                r = emit_value(e, v, 0);
        if (r >= 0) {
                yaml_document_end_event_initialize(&ev, 1);
                r = emit(e, &ev);
        }
        if (r >= 0) {
                yaml_stream_end_event_initialize(&ev);
                r = emit(e, &ev);
        }
        return r;
}

/* libyaml may end a document whose last scalar is open-ended with "...": go-yaml v2 does not. Then, as
 * Helm's toYaml, drop one final newline. */
static void strip_document_end(struct gt_buf *b, size_t start) {
        if (b->len >= start + 5 && memcmp(b->data + b->len - 5, "\n...\n", 5) == 0)
                b->len -= 4;
        if (b->len > start && b->data[b->len - 1] == '\n')
                b->len--;
        if (b->data)
                b->data[b->len] = 0;
}

int gotmpl__to_yaml(const json_t *v, struct gt_buf *b, const char **ret_why) {
        struct emit e = { .out = b };
        size_t start = b->len;
        if (!yaml_emitter_initialize(&e.emitter))
                return -ENOMEM;
        yaml_emitter_set_output(&e.emitter, write_handler, &e);
        yaml_emitter_set_unicode(&e.emitter, 1);
        int r = emit_document(&e, v);
        if (r >= 0 && !yaml_emitter_flush(&e.emitter))
                r = e.status < 0 ? e.status : -EINVAL;
        if (r == -EINVAL)
                *ret_why = e.emitter.problem ? e.emitter.problem : "cannot write YAML";
        if (r == -ELOOP) {
                *ret_why = "value nested too deeply";
                r = -EINVAL;
        }
        yaml_emitter_delete(&e.emitter);
        if (r >= 0)
                strip_document_end(b, start);
        return r;
}
