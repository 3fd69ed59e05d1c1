/* api_reply: JSON replies, errors and request bodies for the agent's API routes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "api_internal.h"

#include <errno.h>
#include <stdio.h>

#include "jsonutil.h"

void api__error(struct http_response *resp, unsigned status, const char *error, const char *detail) {
        json_t *body = json_pack("{s:s, s:s}", "error", error, "detail", detail ? detail : "");
        http_response_take(resp, status, "application/json", jsonutil_dump(body));
        json_decref(body);
}

void api__reply(struct http_response *resp, unsigned status, json_t *doc) {
        char *text = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(doc);
        if (!text) {
                api__error(resp, 500, "internal error", "out of memory");
                return;
        }
        http_response_take(resp, status, "application/json", text);
}

int api__parse_body(const struct http_request *req, struct http_response *resp, json_t **ret) {
        char err[256], detail[300];
        json_t *v;
        if (jsonutil_parse(req->body, req->body_len, &v, err, sizeof err) < 0) {
                snprintf(detail, sizeof detail, "body: invalid JSON (%s)", err);
                api__error(resp, 400, "invalid request", detail);
                return -EINVAL;
        }
        if (!json_is_object(v)) {
                json_decref(v);
                api__error(resp, 400, "invalid request", "body: expected a JSON object");
                return -EINVAL;
        }
        *ret = v;
        return 0;
}
