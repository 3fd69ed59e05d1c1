/* place_cmd: the `pvescale-agent place` dry run: JSON requests in, placements out, cumulatively. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "place_cmd.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "placement.h"

#define REASON_MAX 512

static const char *const request_keys[] = { "vcpus", "memory_bytes", "hugepage_kib", NULL };

static json_t *refusal(const char *reason) {
        return json_pack("{s:b, s:s}", "ok", 0, "reason", reason);
}

/* Parse one line into a request; on failure a reason naming the field. */
static int parse_line(const char *line, size_t len, struct placement_request *ret_req, char *reason) {
        json_t *obj = NULL;
        char err[REASON_MAX / 2];
        int r = jsonutil_parse(line, len, &obj, err, sizeof(err));
        if (r < 0) {
                snprintf(reason, REASON_MAX, "invalid JSON: %s", err);
                return r;
        }
        const char *bad = NULL;
        if (json_is_object(obj) && jsonutil_check_keys(obj, request_keys, &bad) < 0) {
                snprintf(reason, REASON_MAX, "%s: unknown field", bad);
                r = -EINVAL;
        }
        if (r >= 0)
                r = placement_request_from_json(obj, ret_req, reason, REASON_MAX);
        json_decref(obj);
        return r;
}

/* Answer one request: place it and charge it, or say why not. New reference in *ret_answer. */
static int answer(const struct topology *t, struct capacity *free_cap, const char *line, size_t len,
                  json_t **ret_answer, bool *ret_bad) {
        char reason[REASON_MAX] = "";
        struct placement_request req;
        struct placement *p = NULL;
        *ret_bad = false;
        int r = parse_line(line, len, &req, reason);
        if (r == -EINVAL)
                *ret_bad = true;
        if (r >= 0)
                r = placement_place(t, free_cap, &req, &p, reason, sizeof(reason));
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                *ret_answer = refusal(reason);
                return *ret_answer ? 0 : -ENOMEM;
        }
        r = placement_charge(free_cap, p);
        json_t *o = r >= 0 ? placement_to_json(p) : NULL;
        bool fallback = p->fallback;
        placement_free(p);
        if (o && fallback && json_object_set_new(o, "fallback", json_true()) < 0) {
                json_decref(o);
                o = NULL;
        }
        if (!o || json_object_set_new(o, "ok", json_true()) < 0) {
                json_decref(o);
                return r < 0 ? r : -ENOMEM;
        }
        *ret_answer = o;
        return 0;
}

static bool blank(const char *s) {
        return s[strspn(s, " \t\r\n")] == '\0';
}

static int write_answer(json_t *o, FILE *out) {
        char *text = jsonutil_dump(o);
        if (!text)
                return -ENOMEM;
        int r = fprintf(out, "%s\n", text) < 0 || fflush(out) != 0 ? -EIO : 0;
        free(text);
        return r;
}

int place_command_run(const struct topology *t, struct capacity *free_cap, FILE *in, FILE *out) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        int bad_lines = 0, r = 0;
        while (r >= 0 && (n = getline(&line, &cap, in)) >= 0) {
                if (blank(line))
                        continue;
                json_t *o = NULL;
                bool bad = false;
                r = answer(t, free_cap, line, (size_t)n, &o, &bad);
                if (r >= 0)
                        r = write_answer(o, out);
                json_decref(o);
                bad_lines += bad;
        }
        if (r >= 0 && ferror(in))
                r = -EIO;
        free(line);
        return r < 0 ? r : bad_lines;
}
