/* yamlconf: load a YAML configuration document (libyaml) into a jansson value tree. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stddef.h>

/* Convert YAML text to JSON: mappings become objects, sequences arrays. Plain scalars become integers,
 * booleans (true/false), null (null, ~, empty) or strings; quoted scalars are always strings. Anchors and
 * aliases are refused. An empty document is an empty object.
 * Returns 0, or -EINVAL with "line L column C: reason" in err. */
int yamlconf_parse(const char *text, size_t len, json_t **ret_value, char *err, size_t errlen);

/* Read and parse a file; -errno when it cannot be read (err says so too). */
int yamlconf_load(const char *path, json_t **ret_value, char *err, size_t errlen);
