/* auth: API bearer tokens, loaded from a private file and compared in constant time. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"

#define TOKEN_MAX_BYTES 4096

int auth_token_load(const char *path, char **ret_token) {
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || (st.st_mode & 077))
                return -EPERM;
        char *text;
        size_t len;
        int r = fileio_read(path, TOKEN_MAX_BYTES, &text, &len);
        if (r < 0)
                return r;
        char *start = text;
        while (isspace((unsigned char)*start))
                start++;
        size_t n = strcspn(start, "\r\n");
        while (n > 0 && isspace((unsigned char)start[n - 1]))
                n--;
        if (n == 0) {
                free(text);
                return -EINVAL;
        }
        memmove(text, start, n);
        text[n] = '\0';
        *ret_token = text;
        return 0;
}

bool auth_equal(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        volatile unsigned char diff = (unsigned char)(la != lb);
        /* Walk the whole of a, comparing against b cyclically, so the time does not reveal the match length. */
        for (size_t i = 0; i < la; i++)
                diff |= (unsigned char)(a[i] ^ (lb ? b[i % lb] : 0));
        return diff == 0;
}

bool auth_bearer_ok(const char *header, const char *token) {
        static const char prefix[] = "Bearer ";
        if (!header || strncasecmp(header, prefix, sizeof prefix - 1) != 0)
                return false;
        const char *given = header + sizeof prefix - 1;
        while (*given == ' ')
                given++;
        return auth_equal(given, token);
}
