/* api: the agent's HTTP routes (auth, JSON errors, dispatch to the agent state). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "agent.h"
#include "http_server.h"

/* The http_server handler; userdata is the struct agent. */
void api_handle(void *userdata, const struct http_request *req, struct http_response *resp);

typedef void (*api_route_fn)(struct agent *a, const struct http_request *req, struct http_response *resp);

/* Set a JSON error body {"error": error, "detail": detail}. */
void api_error(struct http_response *resp, unsigned status, const char *error, const char *detail);

/* Set a 200/201 JSON body from doc (stolen). */
void api_reply(struct http_response *resp, unsigned status, json_t *doc);

/* Parse the request body as a JSON object; on failure reply 400 and return -EINVAL. *ret is a new ref. */
int api_parse_body(const struct http_request *req, struct http_response *resp, json_t **ret);
