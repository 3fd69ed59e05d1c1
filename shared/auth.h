/* auth: API bearer tokens, loaded from a private file and compared in constant time. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Read a token file. It must be a regular file that neither group nor others may read or write (0600 or
 * stricter): otherwise -EPERM. The token is the first line, without surrounding white space; an empty token
 * is -EINVAL. Returns 0 with a malloc'd token. */
int auth_token_load(const char *path, char **ret_token);

/* Constant-time comparison of two strings (time depends only on the lengths). */
bool auth_equal(const char *a, const char *b);

/* True when header is "Bearer <token>" with exactly this token. NULL header is false. */
bool auth_bearer_ok(const char *header, const char *token);
