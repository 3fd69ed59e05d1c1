/* api: the agent's HTTP routes (auth, JSON errors, dispatch to the agent state). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "agent.h"
#include "http_server.h"

/* The http_server handler; userdata is the struct agent. */
void api_handle(void *userdata, const struct http_request *req, struct http_response *resp);
