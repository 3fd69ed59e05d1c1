/* jsonutil: small helpers over jansson for strict request parsing and compact output. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "jsonutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *jsonutil_cpuset(const struct cpuset *s) {
        char *list = cpuset_format(s);
        if (!list)
                return NULL;
        json_t *v = json_string(list);
        free(list);
        return v;
}

char *jsonutil_dump(const json_t *v) {
        return json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

static bool key_allowed(const char *key, const char *const *allowed) {
        for (; *allowed; allowed++)
                if (strcmp(key, *allowed) == 0)
                        return true;
        return false;
}

int jsonutil_check_keys(const json_t *obj, const char *const *allowed, const char **ret_bad_key) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)obj, key, value) {
                (void)value;
                if (!key_allowed(key, allowed)) {
                        *ret_bad_key = key;
                        return -EINVAL;
                }
        }
        return 0;
}

int jsonutil_get_u64(const json_t *obj, const char *key, uint64_t *ret_value) {
        json_t *v = json_object_get(obj, key);
        if (!v)
                return -ENOENT;
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return -EINVAL;
        *ret_value = (uint64_t)json_integer_value(v);
        return 0;
}

int jsonutil_get_string(const json_t *obj, const char *key, const char **ret_value) {
        json_t *v = json_object_get(obj, key);
        if (!v)
                return -ENOENT;
        if (!json_is_string(v))
                return -EINVAL;
        *ret_value = json_string_value(v);
        return 0;
}

int jsonutil_parse(const char *text, size_t len, json_t **ret_value, char *err, size_t errlen) {
        json_error_t jerr;
        json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        if (!v) {
                snprintf(err, errlen, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
                return -EINVAL;
        }
        *ret_value = v;
        return 0;
}

static int key_cmp(const void *a, const void *b) {
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char **jsonutil_sorted_keys(const json_t *obj, size_t *ret_n) {
        size_t n = json_object_size(obj), i = 0;
        const char *key;
        json_t *value;
        const char **keys = calloc(n ? n : 1, sizeof *keys);
        if (!keys)
                return NULL;
        json_object_foreach((json_t *)obj, key, value) {
                (void)value;
                keys[i++] = key;
        }
        qsort(keys, n, sizeof *keys, key_cmp);
        *ret_n = n;
        return keys;
}

static bool holds_null(const json_t *v) {
        const char *k;
        json_t *e;
        size_t i;
        if (json_is_null(v))
                return true;
        if (json_is_object(v))
                json_object_foreach((json_t *)v, k, e)
                        if (holds_null(e))
                                return true;
        if (json_is_array(v))
                json_array_foreach(v, i, e)
                        if (holds_null(e))
                                return true;
        return false;
}

/* One member of the patch: nothing when equal, a nested patch for two objects, else the new value. */
static int diff_member(json_t *patch, const char *key, const json_t *old, json_t *now) {
        json_t *sub = NULL;
        if (old && json_equal((json_t *)old, now))
                return 0;
        if (!json_is_object(old) || !json_is_object(now)) { /* set whole: nothing in it may read as "delete" */
                if (holds_null(now))
                        return -EINVAL;
                return json_object_set(patch, key, now) < 0 ? -ENOMEM : 0;
        }
        int r = jsonutil_merge_diff(old, now, &sub);
        if (r == 0 && json_object_set_new(patch, key, sub) < 0)
                r = -ENOMEM;
        return r;
}

int jsonutil_merge_diff(const json_t *from, const json_t *to, json_t **ret_patch) {
        json_t *patch = json_object(), *v;
        const char *k;
        int r = patch ? 0 : -ENOMEM;
        if (!json_is_object(from) || !json_is_object(to))
                r = -EINVAL;
        json_object_foreach((json_t *)from, k, v)
                if (r == 0 && !json_object_get(to, k) && json_object_set_new(patch, k, json_null()) < 0)
                        r = -ENOMEM;
        json_object_foreach((json_t *)to, k, v)
                if (r == 0)
                        r = diff_member(patch, k, json_object_get(from, k), v);
        if (r < 0) {
                json_decref(patch);
                return r;
        }
        *ret_patch = patch;
        return 0;
}
