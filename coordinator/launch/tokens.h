/* tokens: Kubernetes bootstrap tokens for joining nodes (generation and the kube-system Secret). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>
#include <stdint.h>

#define TOKENS_ID_LEN 6
#define TOKENS_SECRET_LEN 16
#define TOKENS_NAMESPACE "kube-system"
#define TOKENS_SECRET_PREFIX "bootstrap-token-"
#define TOKENS_TYPE "bootstrap.kubernetes.io/token"
/* The group kubeadm's RBAC bindings (CSR creation and auto-approval) are given to; kubeadm join works with it. */
#define TOKENS_DEFAULT_GROUPS "system:bootstrappers:kubeadm:default-node-token"
/* Labels that tie a token to its NodeClaim, so that a token is found again after a restart and collected
 * when the claim is gone. */
#define TOKENS_LABEL_CLAIM "pvescale.io/nodeclaim"
#define TOKENS_LABEL_CLAIM_UID "pvescale.io/nodeclaim-uid"

/* A random token id (6 of [a-z0-9]) and secret (16 of [a-z0-9]) from getrandom(2). 0 or -errno. */
int tokens_generate(char id[TOKENS_ID_LEN + 1], char secret[TOKENS_SECRET_LEN + 1]);

/* The token id of a NodeClaim: 6 of [a-z0-9] derived from its UID (SHA-256), so that a launch that runs again
 * after a crash finds the token an earlier run made by name. Token ids are public; the secret stays random.
 * 0 or -EIO. Pure. */
int tokens_id_for(const char *claim_uid, char id[TOKENS_ID_LEN + 1]);

/* The Secret kube-system/bootstrap-token-<id> (type bootstrap.kubernetes.io/token) with token-id, token-secret,
 * expiration (RFC 3339, expires_ms), usage-bootstrap-authentication and usage-bootstrap-signing "true" (kubeadm
 * discovery needs the signing usage: the seed's issue #87), auth-extra-groups, a description, and the claim
 * labels. Pure; new reference or NULL. */
json_t *tokens_secret(const char *id, const char *secret, int64_t expires_ms, const char *groups, const char *claim,
                      const char *claim_uid);

/* The token secret of a Secret object (data.token-secret, base64-decoded) into buf. 0, -EINVAL. Pure. */
int tokens_secret_value(const json_t *secret, char buf[TOKENS_SECRET_LEN + 1]);
