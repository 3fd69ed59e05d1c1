/* tokens: bootstrap token generation (getrandom) and the bootstrap.kubernetes.io/token Secret. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "tokens.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "launcher_plan.h"
#include "kube_types.h"
#include "rfc3339.h"

static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";

/* Uniform characters of the 36-letter alphabet (rejection sampling: bytes >= 252 are drawn again). */
static int random_chars(char *out, size_t n) {
        unsigned char buf[64];
        size_t filled = 0;
        while (filled < n) {
                ssize_t got = getrandom(buf, sizeof buf, 0);
                if (got < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                for (ssize_t i = 0; i < got && filled < n; i++)
                        if (buf[i] < 252)
                                out[filled++] = alphabet[buf[i] % 36];
        }
        out[n] = '\0';
        return 0;
}

int tokens_generate(char id[TOKENS_ID_LEN + 1], char secret[TOKENS_SECRET_LEN + 1]) {
        char i[TOKENS_ID_LEN + 1], s[TOKENS_SECRET_LEN + 1];
        int r = random_chars(i, TOKENS_ID_LEN);
        if (r == 0)
                r = random_chars(s, TOKENS_SECRET_LEN);
        if (r < 0)
                return r;
        memcpy(id, i, sizeof i);
        memcpy(secret, s, sizeof s);
        return 0;
}

int tokens_id_for(const char *claim_uid, char id[TOKENS_ID_LEN + 1]) {
        unsigned char digest[32];
        if (gnutls_hash_fast(GNUTLS_DIG_SHA256, claim_uid, strlen(claim_uid), digest) < 0)
                return -EIO;
        for (size_t i = 0; i < TOKENS_ID_LEN; i++)
                id[i] = alphabet[digest[i] % 36];
        id[TOKENS_ID_LEN] = '\0';
        return 0;
}

json_t *tokens_secret(const char *id, const char *secret, int64_t expires_ms, const char *groups, const char *claim,
                      const char *claim_uid) {
        char name[64], expiration[32], description[320];
        snprintf(name, sizeof name, TOKENS_SECRET_PREFIX "%s", id);
        rfc3339_format(expires_ms, expiration, sizeof expiration);
        snprintf(description, sizeof description, "pvescale join token of NodeClaim %.250s", claim);
        return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s}}",
                         "apiVersion", "v1", "kind", "Secret", "metadata", "name", name, "namespace",
                         TOKENS_NAMESPACE, "labels", TOKENS_LABEL_CLAIM, claim, TOKENS_LABEL_CLAIM_UID, claim_uid,
                         "type", TOKENS_TYPE, "stringData", "token-id", id, "token-secret", secret, "expiration",
                         expiration, "usage-bootstrap-authentication", "true", "usage-bootstrap-signing", "true",
                         "auth-extra-groups", groups ? groups : TOKENS_DEFAULT_GROUPS, "description", description);
}

int tokens_secret_value(const json_t *secret, char buf[TOKENS_SECRET_LEN + 1]) {
        struct kube_data_object s;
        kube_data_object_decode(secret, &s);
        const char *b64 = json_string_value(json_object_get(s.data, "token-secret"));
        gnutls_datum_t in = { (unsigned char *)(uintptr_t)b64, b64 ? (unsigned)strlen(b64) : 0 }, out = { 0 };
        if (!b64 || gnutls_base64_decode2(&in, &out) < 0)
                return -EINVAL;
        int r = out.size == TOKENS_SECRET_LEN ? 0 : -EINVAL;
        for (unsigned i = 0; r == 0 && i < out.size; i++)
                if (!strchr(alphabet, out.data[i]) || out.data[i] == '\0')
                        r = -EINVAL;
        if (r == 0) {
                memcpy(buf, out.data, TOKENS_SECRET_LEN);
                buf[TOKENS_SECRET_LEN] = '\0';
        }
        gnutls_free(out.data);
        return r;
}
