/* pve_conf: the config file format qemu-server and pve-container share (pure but for pve_conf_read). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

#define PVE_CONF_MAX_BYTES (1024 * 1024) /* pmxcfs refuses larger files */

/* What one line of a config is. */
enum pve_conf_line {
        PVE_CONF_SKIP, /* blank, or a comment (the description) */
        PVE_CONF_END,  /* a "[section]" line: [PENDING], [special:cloudinit], a snapshot: the current config ended */
        PVE_CONF_PAIR, /* "key: value", split into *ret_key and *ret_value */
};

/* Trims line's trailing space in place (pmxcfs files edited on Windows carry CRs) and says what it is; a "key: value"
 * (/^([a-z][a-z_]*\d*):\s*(\S.*)$/, as qemu-server and pve-container split it) is split in place. -EINVAL for a
 * line that is none of them (line is left trimmed, not split). */
int pve_conf_line(char *line, char **ret_key, char **ret_value);

/* The VMID of a directory entry "<vmid>.conf" (1..999999999, no leading zero); -1 for any other name. */
int pve_conf_name_vmid(const char *name);

/* The text of dir/<vmid>.conf (at most PVE_CONF_MAX_BYTES): 0, -ENOMEM, or the read's negative errno. */
int pve_conf_read(const char *dir, int vmid, char **ret_text);
