/* Tests for shared/log: level names, the warning level, filtering, and log_*_errno appending the errno text. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "log.h"
#include "rfc3339.h"

/* stderr is pointed at a scratch file for each test; captured() puts it back (so that a failed assertion
 * prints) and returns what was written in between. */
struct capture {
        FILE *file;
        int saved_fd;
        char text[4096];
};

static int setup(void **state) {
        struct capture *c = calloc(1, sizeof *c);
        if (!c || !(c->file = tmpfile()))
                return -1;
        fflush(stderr);
        c->saved_fd = dup(STDERR_FILENO);
        dup2(fileno(c->file), STDERR_FILENO);
        unsetenv("JOURNAL_STREAM");
        log_setup("t", LOG_LEVEL_DEBUG, 0);
        *state = c;
        return 0;
}

static void restore(struct capture *c) {
        fflush(stderr);
        if (c->saved_fd >= 0)
                dup2(c->saved_fd, STDERR_FILENO);
        if (c->saved_fd >= 0)
                close(c->saved_fd);
        c->saved_fd = -1;
}

static int teardown(void **state) {
        struct capture *c = *state;
        restore(c);
        fclose(c->file);
        free(c);
        return 0;
}

static const char *captured(struct capture *c) {
        restore(c);
        size_t n = (size_t)pread(fileno(c->file), c->text, sizeof c->text - 1, 0);
        c->text[n == (size_t)-1 ? 0 : n] = '\0';
        return c->text;
}

/* The captured text with each line's leading RFC 3339 time (checked to parse, and to be recent) taken off. */
static const char *untimed(struct capture *c) {
        const char *text = captured(c);
        static char out[4096];
        size_t o = 0;
        for (const char *line = text; *line;) {
                const char *sp = strchr(line, ' '), *nl = strchr(line, '\n');
                assert_non_null(sp);
                assert_non_null(nl);
                char stamp[64];
                snprintf(stamp, sizeof stamp, "%.*s", (int)(sp - line), line);
                int64_t ms;
                if (rfc3339_parse(stamp, &ms) < 0 || rfc3339_now_ms() - ms > 60000)
                        fail_msg("line without a recent RFC 3339 time: %s", line);
                o += (size_t)snprintf(out + o, sizeof out - o, "%.*s", (int)(nl + 1 - (sp + 1)), sp + 1);
                line = nl + 1;
        }
        out[o] = '\0';
        return out;
}

static void __attribute__((format(printf, 1, 2))) relay(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        log_fullv(LOG_LEVEL_WARNING, __FILE__, __LINE__, __func__, NULL, fmt, ap);
        va_end(ap);
}

static void test_level_names(void **state) {
        (void)state;
        static const char *const names[] = { "debug", "info", "warning", "error" };
        static const enum log_level levels[] = { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARNING, LOG_LEVEL_ERROR };
        enum log_level l = LOG_LEVEL_INFO;
        for (size_t i = 0; i < 4; i++) {
                assert_int_equal(log_level_from_string(names[i], &l), 0);
                assert_int_equal(l, levels[i]);
        }
        assert_int_equal(log_level_from_string("warn", &l), -EINVAL);
        assert_int_equal(l, LOG_LEVEL_ERROR); /* unchanged on failure */
        assert_true(LOG_LEVEL_INFO < LOG_LEVEL_WARNING && LOG_LEVEL_WARNING < LOG_LEVEL_ERROR);
}

static void test_warning_line(void **state) {
        struct capture *c = *state;
        log_warning("agent %s slow", "pve1");
        relay("relayed %d", 7);
        assert_string_equal(untimed(c), "t: warning: agent pve1 slow\nt: warning: relayed 7\n");
}

static void test_errno_text_appended_once(void **state) {
        struct capture *c = *state;
        assert_int_equal(log_error_errno(-ENOENT, "cannot open %s", "/x"), -ENOENT);
        assert_int_equal(log_warning_errno(EAGAIN, "retrying"), -EAGAIN); /* a positive errno comes back negative */
        assert_int_equal(log_error_errno(0, "no error"), 0);
        assert_string_equal(untimed(c), "t: error: cannot open /x: No such file or directory\n"
                                         "t: warning: retrying: Resource temporarily unavailable\n"
                                         "t: error: no error\n");
}

static void test_filtered_levels_still_return(void **state) {
        struct capture *c = *state;
        log_set_level(LOG_LEVEL_ERROR);
        log_info("quiet");
        log_warning("quiet too");
        assert_int_equal(log_warning_errno(-EIO, "not shown"), -EIO);
        log_set_level(LOG_LEVEL_WARNING);
        log_info("still quiet");
        log_warning("shown");
        assert_string_equal(untimed(c), "t: warning: shown\n");
}

static void test_errno_and_field_kept(void **state) {
        struct capture *c = *state;
        errno = EBUSY;
        log_warning_field("VMID=105", "pinning %s", "late");
        log_error_errno(-EPERM, "denied");
        assert_int_equal(errno, EBUSY);
        assert_string_equal(untimed(c), "t: warning: pinning late [VMID=105]\nt: error: denied: Operation not permitted\n");
}

static void test_logfmt_line(void **state) {
        struct capture *c = *state;
        log_set_format(LOG_FORMAT_LOGFMT);
        errno = 0;
        log_full_errno(LOG_LEVEL_ERROR, -ESRCH, "/src/agent/pin_service.c", 70, "f", "cannot pin VM %d", 105);
        log_warning_field("VMID=105", "say \"hi\"\nthen=go");
        log_info("plain");
        log_set_format(LOG_FORMAT_TEXT);
        const char *text = captured(c);
        const char *want[] = {
                " level=error logger=t msg=\"cannot pin VM 105: No such process\" errno=3 source=pin_service.c:70\n",
                " level=warning logger=t msg=\"say \\\"hi\\\"\\nthen=go\" vmid=105 source=test_log.c:",
                " level=info logger=t msg=plain source=test_log.c:",
        };
        const char *line = text;
        for (size_t i = 0; i < 3; i++) {
                assert_int_equal(strncmp(line, "time=", 5), 0);
                char stamp[40];
                snprintf(stamp, sizeof stamp, "%.*s", (int)(strchr(line, ' ') - line - 5), line + 5);
                int64_t ms;
                assert_int_equal(rfc3339_parse(stamp, &ms), 0);
                const char *rest = strchr(line, ' ');
                if (strncmp(rest, want[i], strlen(want[i])) != 0)
                        fail_msg("line %zu: %s lacks %s", i, line, want[i]);
                line = strchr(line, '\n') + 1;
        }
        assert_string_equal(line, "");
}

static void test_json_line(void **state) {
        struct capture *c = *state;
        log_set_format(LOG_FORMAT_JSON);
        log_error_field("VMID=7", "bad \"quote\" and \\ slash: %s", "x");
        log_set_format(LOG_FORMAT_TEXT);
        const char *text = captured(c);
        assert_non_null(strchr(text, '\n'));
        assert_string_equal(strchr(text, '\n'), "\n"); /* one line */
        json_error_t e;
        json_t *o = json_loads(text, JSON_DISABLE_EOF_CHECK, &e);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "level")), "error");
        assert_string_equal(json_string_value(json_object_get(o, "logger")), "t");
        assert_string_equal(json_string_value(json_object_get(o, "msg")), "bad \"quote\" and \\ slash: x");
        assert_string_equal(json_string_value(json_object_get(o, "vmid")), "7");
        int64_t ms;
        assert_int_equal(rfc3339_parse(json_string_value(json_object_get(o, "time")), &ms), 0);
        assert_non_null(strstr(json_string_value(json_object_get(o, "source")), "test_log.c:"));
        json_decref(o);
}

static void test_format_names(void **state) {
        (void)state;
        enum log_format f = LOG_FORMAT_JSON;
        assert_int_equal(log_format_from_string("logfmt", &f), 0);
        assert_int_equal(f, LOG_FORMAT_LOGFMT);
        assert_int_equal(log_format_from_string("text", &f), 0);
        assert_int_equal(f, LOG_FORMAT_TEXT);
        assert_int_equal(log_format_from_string("json", &f), 0);
        assert_int_equal(f, LOG_FORMAT_JSON);
        assert_int_equal(log_format_from_string("xml", &f), -EINVAL);
        assert_int_equal(f, LOG_FORMAT_JSON);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_level_names),
                cmocka_unit_test_setup_teardown(test_warning_line, setup, teardown),
                cmocka_unit_test_setup_teardown(test_errno_text_appended_once, setup, teardown),
                cmocka_unit_test_setup_teardown(test_filtered_levels_still_return, setup, teardown),
                cmocka_unit_test_setup_teardown(test_errno_and_field_kept, setup, teardown),
                cmocka_unit_test_setup_teardown(test_logfmt_line, setup, teardown),
                cmocka_unit_test_setup_teardown(test_json_line, setup, teardown),
                cmocka_unit_test(test_format_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
