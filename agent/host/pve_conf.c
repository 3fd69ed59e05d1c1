/* pve_conf: the config file format qemu-server and pve-container share (pure but for pve_conf_read). */
/* SPDX-License-Identifier: Apache-2.0 */
#include "pve_conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

static bool is_section_line(const char *line) {
        size_t n = strlen(line);
        return n >= 3 && line[0] == '[' && line[n - 1] == ']' && !memchr(line + 1, ']', n - 2);
}

static void trim_right(char *s) {
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
                s[--n] = '\0';
}

static int split_key_value(char *line, char **ret_key, char **ret_value) {
        size_t k = strspn(line, "abcdefghijklmnopqrstuvwxyz_");
        if (k == 0 || line[0] == '_')
                return -EINVAL;
        k += strspn(line + k, "0123456789");
        if (line[k] != ':')
                return -EINVAL;
        char *value = line + k + 1;
        value += strspn(value, " \t");
        if (*value == '\0')
                return -EINVAL;
        line[k] = '\0';
        *ret_key = line;
        *ret_value = value;
        return 0;
}

int pve_conf_line(char *line, char **ret_key, char **ret_value) {
        trim_right(line);
        if (line[0] == '\0' || line[0] == '#')
                return PVE_CONF_SKIP;
        if (is_section_line(line))
                return PVE_CONF_END;
        int r = split_key_value(line, ret_key, ret_value);
        return r < 0 ? r : PVE_CONF_PAIR;
}

int pve_conf_name_vmid(const char *name) {
        size_t digits = strspn(name, "0123456789");
        if (digits == 0 || digits > 9 || name[0] == '0' || strcmp(name + digits, ".conf") != 0)
                return -1;
        return atoi(name);
}

int pve_conf_read(const char *dir, int vmid, char **ret_text) {
        char *path = NULL;
        if (asprintf(&path, "%s/%d.conf", dir, vmid) < 0)
                return -ENOMEM;
        int r = fileio_read(path, PVE_CONF_MAX_BYTES, ret_text, NULL);
        free(path);
        return r;
}
