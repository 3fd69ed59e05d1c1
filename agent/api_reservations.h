/* api_reservations: the agent's mutating routes: offers, reservations (create, list, bind, release). */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "api.h"

void api_post_offers(struct agent *a, const struct http_request *req, struct http_response *resp);
void api_get_reservations(struct agent *a, const struct http_request *req, struct http_response *resp);
void api_post_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
void api_get_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
void api_delete_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
void api_bind_reservation(struct agent *a, const struct http_request *req, struct http_response *resp);
