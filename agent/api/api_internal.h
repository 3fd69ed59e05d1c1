/* api_internal: what api.c, api_reply.c and api_reservations.c share (replies, reservation routes); not for others. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <jansson.h>

#include "agent.h"
#include "http_server.h"

/* What a route of api.c's table is. */
typedef void (*api__route_fn)(struct agent *a, const struct http_request *req, struct http_response *resp);

/* ---- api_reply.c ---- */

/* Set a JSON error body {"error": error, "detail": detail}. */
void api__error(struct http_response *resp, unsigned status, const char *error, const char *detail);

/* Set a 200/201 JSON body from doc (stolen). */
void api__reply(struct http_response *resp, unsigned status, json_t *doc);

/* Parse the request body as a JSON object; without Content-Type: application/json reply 415, on other failures
 * 400, and return -EINVAL. *ret is a new ref. */
int api__parse_body(const struct http_request *req, struct http_response *resp, json_t **ret);

/* ---- api_reservations.c: the mutating routes: offers, reservations (create, list, bind, release) ---- */

void api__post_offers(struct agent *a, const struct http_request *req, struct http_response *resp);
void api__get_reservations(struct agent *a, const struct http_request *req, struct http_response *resp);
void api__post_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
void api__get_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
void api__delete_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
void api__bind_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
