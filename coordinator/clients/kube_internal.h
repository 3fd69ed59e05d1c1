/* kube_internal: what kube.c shares with kube_informer.c (streams, sleeps, errors, randomness), named kube__name
 * (as hwloc's module__name). kube_informer.c uses kube.c, never the other way. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdint.h>

#include "http_client.h"
#include "kube.h"

/* GET path as a line stream (see http_client_stream), with the client's token refreshed first. Records the
 * transport error in the client's error text. */
int kube__client_stream(struct kube_client *c, const char *path, long idle_timeout_ms, http_client_line_fn fn,
                        void *userdata, struct http_client_response *ret_resp);
/* Record a non-2xx response as the last error ("GET <path>: <code> <reason>: <message>"); returns its errno. */
int kube__client_fail_response(struct kube_client *c, const char *method, const char *path,
                               const struct http_client_response *resp);
/* Record a Status object (e.g. a watch ERROR event) as the last error; returns its errno. */
int kube__client_fail_status(struct kube_client *c, const char *what, const json_t *status);
/* Set the last error text. */
void kube__client_set_error(struct kube_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sleep ms, waking early with -ECANCELED when the cancel flag is set. */
int kube__client_sleep(struct kube_client *c, long ms);
uint64_t kube__client_seed(struct kube_client *c);
