/* yamlconf: load a YAML configuration document (libyaml) into a jansson value tree. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "yamlconf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "fileio.h"

#define YAMLCONF_MAX_DEPTH 64
#define YAMLCONF_MAX_BYTES (4u << 20)

struct yaml_reader {
        yaml_parser_t parser;
        char *err;
        size_t errlen;
};

static int reader_fail(struct yaml_reader *rd, const yaml_mark_t *mark, const char *reason) {
        snprintf(rd->err, rd->errlen, "line %zu column %zu: %s", mark->line + 1, mark->column + 1, reason);
        return -EINVAL;
}

static int next_event(struct yaml_reader *rd, yaml_event_t *ev) {
        if (yaml_parser_parse(&rd->parser, ev))
                return 0;
        return reader_fail(rd, &rd->parser.problem_mark, rd->parser.problem ? rd->parser.problem : "syntax error");
}

static bool is_plain(const yaml_event_t *ev) {
        return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static json_t *integer_or_null(const char *s) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || *end)
                return NULL;
        return json_integer(v);
}

static json_t *scalar_to_json(const yaml_event_t *ev) {
        const char *s = (const char *)ev->data.scalar.value;
        if (!is_plain(ev))
                return json_string(s);
        if (*s == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0)
                return json_null();
        if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0)
                return json_true();
        if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0)
                return json_false();
        json_t *n = integer_or_null(s);
        return n ? n : json_string(s);
}

static int parse_node(struct yaml_reader *rd, yaml_event_t *ev, int depth, json_t **ret);

static int parse_sequence(struct yaml_reader *rd, int depth, json_t **ret) {
        json_t *arr = json_array();
        for (;;) {
                yaml_event_t ev;
                int r = next_event(rd, &ev);
                if (r == 0 && ev.type == YAML_SEQUENCE_END_EVENT) {
                        yaml_event_delete(&ev);
                        *ret = arr;
                        return 0;
                }
                json_t *item = NULL;
                if (r == 0)
                        r = parse_node(rd, &ev, depth + 1, &item);
                if (r < 0) {
                        json_decref(arr);
                        return r;
                }
                json_array_append_new(arr, item);
        }
}

/* Read one key event: 0 with a plain-string key in *key (caller deletes it), 1 at the end of the mapping,
 * or a negative errno (nothing to delete). */
static int next_key(struct yaml_reader *rd, const json_t *obj, yaml_event_t *key) {
        int r = next_event(rd, key);
        if (r < 0)
                return r;
        if (key->type == YAML_MAPPING_END_EVENT)
                r = 1;
        else if (key->type != YAML_SCALAR_EVENT)
                r = reader_fail(rd, &key->start_mark, "mapping keys must be plain strings");
        else if (json_object_get(obj, (const char *)key->data.scalar.value))
                r = reader_fail(rd, &key->start_mark, "duplicate key");
        if (r != 0)
                yaml_event_delete(key);
        return r;
}

static int parse_mapping(struct yaml_reader *rd, int depth, json_t **ret) {
        json_t *obj = json_object();
        for (;;) {
                yaml_event_t key, ev;
                int r = next_key(rd, obj, &key);
                if (r == 1) {
                        *ret = obj;
                        return 0;
                }
                json_t *value = NULL;
                if (r == 0) {
                        if ((r = next_event(rd, &ev)) == 0)
                                r = parse_node(rd, &ev, depth + 1, &value);
                        if (r == 0)
                                json_object_set_new(obj, (const char *)key.data.scalar.value, value);
                        yaml_event_delete(&key);
                }
                if (r < 0) {
                        json_decref(obj);
                        return r;
                }
        }
}

/* Consumes ev. */
static int parse_node(struct yaml_reader *rd, yaml_event_t *ev, int depth, json_t **ret) {
        int r;
        if (depth > YAMLCONF_MAX_DEPTH)
                r = reader_fail(rd, &ev->start_mark, "nesting too deep");
        else if (ev->type == YAML_ALIAS_EVENT)
                r = reader_fail(rd, &ev->start_mark, "aliases are not supported");
        else if (ev->type == YAML_SCALAR_EVENT)
                r = (*ret = scalar_to_json(ev)) ? 0 : -ENOMEM;
        else if (ev->type == YAML_SEQUENCE_START_EVENT)
                r = parse_sequence(rd, depth, ret);
        else if (ev->type == YAML_MAPPING_START_EVENT)
                r = parse_mapping(rd, depth, ret);
        else
                r = reader_fail(rd, &ev->start_mark, "unexpected YAML event");
        yaml_event_delete(ev);
        return r;
}

/* Skip stream/document start events; return the first content event in ev (or end of stream). */
static int first_content(struct yaml_reader *rd, yaml_event_t *ev) {
        for (;;) {
                int r = next_event(rd, ev);
                if (r < 0)
                        return r;
                if (ev->type != YAML_STREAM_START_EVENT && ev->type != YAML_DOCUMENT_START_EVENT)
                        return 0;
                yaml_event_delete(ev);
        }
}

int yamlconf_parse(const char *text, size_t len, json_t **ret_value, char *err, size_t errlen) {
        struct yaml_reader rd = { .err = err, .errlen = errlen };
        if (!yaml_parser_initialize(&rd.parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&rd.parser, (const unsigned char *)text, len);
        yaml_event_t ev;
        json_t *value = NULL;
        int r = first_content(&rd, &ev);
        if (r == 0 && (ev.type == YAML_STREAM_END_EVENT || ev.type == YAML_DOCUMENT_END_EVENT)) {
                yaml_event_delete(&ev);
                value = json_object();
        } else if (r == 0) {
                r = parse_node(&rd, &ev, 0, &value);
        }
        if (r == 0 && json_is_null(value)) {
                json_decref(value);
                value = json_object();
        }
        yaml_parser_delete(&rd.parser);
        if (r < 0)
                return r;
        *ret_value = value;
        return 0;
}

int yamlconf_load(const char *path, json_t **ret_value, char *err, size_t errlen) {
        char *text;
        size_t len;
        int r = fileio_read(path, YAMLCONF_MAX_BYTES, &text, &len);
        if (r < 0) {
                snprintf(err, errlen, "cannot read %s: %s", path, strerror(-r));
                return r;
        }
        char inner[256];
        r = yamlconf_parse(text, len, ret_value, inner, sizeof inner);
        free(text);
        if (r < 0)
                snprintf(err, errlen, "%s: %s", path, inner);
        return r;
}
