/* api_reply: JSON replies, errors and request bodies for the agent's API routes. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "api_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* Is the Content-Type application/json (any case, parameters such as charset allowed)? */
static bool is_json_type(const char *type) {
        static const char json[] = "application/json";
        if (!type)
                return false;
        type += strspn(type, " \t");
        if (strncasecmp(type, json, sizeof json - 1) != 0)
                return false;
        type += sizeof json - 1;
        type += strspn(type, " \t");
        return *type == '\0' || *type == ';';
}

int api__parse_body(const struct http_request *req, struct http_response *resp, json_t **ret) {
        char err[256], detail[300];
        json_t *v;
        if (!is_json_type(http_request_header(req, "Content-Type"))) {
                api__error(resp, 415, "unsupported media type", "Content-Type: expected application/json");
                return -EINVAL;
        }
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
