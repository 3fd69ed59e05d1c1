/* boolword: the one reading of a boolean word in config files, flags and Proxmox configs. Pure. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "boolword.h"

#include <errno.h>
#include <stddef.h>
#include <strings.h>

int boolword_parse(const char *word, bool *ret) {
        static const char *const yes[] = { "1", "on", "yes", "true" };
        static const char *const no[] = { "0", "off", "no", "false" };
        for (size_t i = 0; word && i < sizeof yes / sizeof yes[0]; i++) {
                if (strcasecmp(word, yes[i]) == 0 || strcasecmp(word, no[i]) == 0) {
                        *ret = strcasecmp(word, yes[i]) == 0;
                        return 0;
                }
        }
        return -EINVAL;
}
