/* topology_internal: what topology.c and topology_sysfs.c share (topology_common.c); not for other modules. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Parse a file's text into *out (a type the caller and parse agree on). 0 or negative errno. */
typedef int (*topology__parse_fn)(const char *text, void *out);

/* Read <root><path> (root NULL: this machine) and parse it. The read's errors (-ENOENT for a missing
 * file), or parse's. */
int topology__read_under(const char *root, const char *path, topology__parse_fn parse, void *out);
