/* jsonutil: small helpers over jansson for strict request parsing and compact output. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpuset.h"

/* A JSON string holding the canonical cpulist of s. New reference, NULL on ENOMEM. */
json_t *jsonutil_cpuset(const struct cpuset *s);

/* Compact, key-sorted dump. Caller frees. NULL on ENOMEM. */
char *jsonutil_dump(const json_t *v);

/* 0 when every key of obj is in the NULL-terminated allowed list; else -EINVAL and *ret_bad_key names the
 * first unknown key (borrowed from obj). */
int jsonutil_check_keys(const json_t *obj, const char *const *allowed, const char **ret_bad_key);

/* Read a non-negative integer member. -ENOENT when missing, -EINVAL for a wrong type or a negative value. */
int jsonutil_get_u64(const json_t *obj, const char *key, uint64_t *ret_value);
/* Read a string member (borrowed). -ENOENT when missing, -EINVAL for a wrong type. */
int jsonutil_get_string(const json_t *obj, const char *key, const char **ret_value);

/* Parse text into a JSON value; on failure -EINVAL and "line L column C: reason" in err. */
int jsonutil_parse(const char *text, size_t len, json_t **ret_value, char *err, size_t errlen);

/* The keys of an object in strcmp order (Go's map order). The array is malloc'd (free it); the strings are
 * borrowed from obj. NULL on ENOMEM; an empty object gives a valid empty array. */
const char **jsonutil_sorted_keys(const json_t *obj, size_t *ret_n);

/* The JSON merge patch (RFC 7386) that turns object from into object to: changed members with their new value,
 * objects on both sides as a patch of their own, removed members as null. Equal objects give {}. A null inside
 * to cannot be said in a merge patch (it would delete): -EINVAL then. New reference in *ret_patch; 0, -EINVAL
 * or -ENOMEM. Pure. */
int jsonutil_merge_diff(const json_t *from, const json_t *to, json_t **ret_patch);
