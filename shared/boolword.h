/* boolword: the one reading of a boolean word in config files, flags and Proxmox configs. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

/* 1, on, yes, true and 0, off, no, false, in any case (Proxmox's PVE::JSONSchema booleans, systemd's and most config
 * files' words): 0 with *ret set, or -EINVAL (*ret unchanged). */
int boolword_parse(const char *word, bool *ret);
