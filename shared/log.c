/* log: leveled logging to journald (with CODE_FILE/CODE_LINE and extra fields) or to stderr, one line per event as
 * text, logfmt or JSON. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <syslog.h>

#include "rfc3339.h"

#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

#define LOG_N_LEVELS 4
#define LOG_MSG_MAX 2048
#define LOG_FIELD_MAX 256

static const char *const level_names[LOG_N_LEVELS] = { "debug", "info", "warning", "error" };
static const int level_priorities[LOG_N_LEVELS] = { LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR };
static const char *const format_names[] = { "text", "logfmt", "json" };

/* The logger is process-wide by nature (like syslog), so its settings are the one global here. */
static struct {
        const char *ident;
        enum log_level level;
        int journal;
        enum log_format format;
} log_state = { "pvescale", LOG_LEVEL_INFO, 0, LOG_FORMAT_TEXT };

/* Where a line comes from and what it carries besides the message. */
struct log_site {
        enum log_level level;
        const char *file, *func, *field;
        int line;
        int errnum; /* > 0: ERRNO= in the journal */
};

void log_setup(const char *ident, enum log_level level, int force_journal) {
        log_state.ident = ident;
        log_state.level = level;
        log_state.journal = force_journal || getenv("JOURNAL_STREAM") != NULL;
}

void log_set_level(enum log_level level) {
        log_state.level = level;
}

void log_set_format(enum log_format format) {
        log_state.format = format;
}

int log_format_from_string(const char *s, enum log_format *ret) {
        for (size_t i = 0; i < sizeof format_names / sizeof format_names[0]; i++)
                if (strcmp(s, format_names[i]) == 0) {
                        *ret = (enum log_format)i;
                        return 0;
                }
        return -EINVAL;
}

int log_level_from_string(const char *s, enum log_level *ret_level) {
        for (int i = 0; i < LOG_N_LEVELS; i++)
                if (strcmp(s, level_names[i]) == 0) {
                        *ret_level = (enum log_level)i;
                        return 0;
                }
        return -EINVAL;
}

static size_t add_field(struct iovec *iov, size_t n, char *buf, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* One "KEY=value" journal field into buf, as iov[n]; returns n + 1. */
static size_t add_field(struct iovec *iov, size_t n, char *buf, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int len = vsnprintf(buf, LOG_FIELD_MAX, fmt, ap);
        va_end(ap);
        size_t used = len < 0 ? 0 : (size_t)len;
        iov[n] = (struct iovec){ buf, used >= LOG_FIELD_MAX ? LOG_FIELD_MAX - 1 : used };
        return n + 1;
}

/* msg is "MESSAGE=<text>", ready to be the first field. */
static void log_to_journal(const struct log_site *s, const char *msg) {
        char prio[LOG_FIELD_MAX], ident[LOG_FIELD_MAX], file[LOG_FIELD_MAX], line[LOG_FIELD_MAX], func[LOG_FIELD_MAX],
                err[LOG_FIELD_MAX];
        struct iovec iov[8];
        size_t n = 0;
        iov[n++] = (struct iovec){ (void *)msg, strlen(msg) };
        n = add_field(iov, n, prio, "PRIORITY=%d", level_priorities[s->level]);
        n = add_field(iov, n, ident, "SYSLOG_IDENTIFIER=%s", log_state.ident);
        n = add_field(iov, n, file, "CODE_FILE=%s", s->file);
        n = add_field(iov, n, line, "CODE_LINE=%d", s->line);
        n = add_field(iov, n, func, "CODE_FUNC=%s", s->func);
        if (s->errnum > 0)
                n = add_field(iov, n, err, "ERRNO=%d", s->errnum);
        if (s->field)
                iov[n++] = (struct iovec){ (void *)s->field, strlen(s->field) };
        sd_journal_sendv(iov, (int)n);
}

/* ---- stderr lines ---- */

/* A line being built; what does not fit is cut. */
struct log_line {
        char text[LOG_MSG_MAX + 512];
        size_t len;
};

static void __attribute__((format(printf, 2, 3))) line_add(struct log_line *l, const char *fmt, ...) {
        if (l->len >= sizeof l->text - 1)
                return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(l->text + l->len, sizeof l->text - l->len, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        l->len += (size_t)n;
        if (l->len >= sizeof l->text)
                l->len = sizeof l->text - 1; /* what did not fit was cut */
}

static const char *base_name(const char *path) {
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

/* The extra field "KEY=value" as a lowercased key and its value (value NULL when there is no '='). */
static void split_field(const char *field, char *key, size_t keylen, const char **value) {
        const char *eq = strchr(field, '=');
        size_t n = eq ? (size_t)(eq - field) : strlen(field);
        if (n >= keylen)
                n = keylen - 1;
        for (size_t i = 0; i < n; i++)
                key[i] = (char)tolower((unsigned char)field[i]);
        key[n] = '\0';
        *value = eq ? eq + 1 : NULL;
}

/* " key=value", the value quoted and escaped when it needs to be. */
static void logfmt_pair(struct log_line *l, const char *key, const char *value) {
        bool quote = !*value;
        for (const char *c = value; *c && !quote; c++)
                quote = *c == ' ' || *c == '=' || *c == '"' || (unsigned char)*c < 0x20;
        line_add(l, " %s=%s", key, quote ? "\"" : "");
        for (const char *c = value; *c; c++) {
                if (*c == '"' || *c == '\\')
                        line_add(l, "\\%c", *c);
                else if (*c == '\n')
                        line_add(l, "\\n");
                else if ((unsigned char)*c < 0x20)
                        line_add(l, "\\x%02x", (unsigned char)*c);
                else
                        line_add(l, "%c", *c);
        }
        if (quote)
                line_add(l, "\"");
}

static void format_logfmt(struct log_line *l, const struct log_site *s, const char *now, const char *text) {
        line_add(l, "time=%s level=%s", now, level_names[s->level]);
        logfmt_pair(l, "logger", log_state.ident);
        logfmt_pair(l, "msg", text);
        if (s->field) {
                char key[64];
                const char *value;
                split_field(s->field, key, sizeof key, &value);
                logfmt_pair(l, key, value ? value : "");
        }
        if (s->errnum > 0)
                line_add(l, " errno=%d", s->errnum);
        line_add(l, " source=%s:%d", base_name(s->file), s->line);
}

static void format_json(struct log_line *l, const struct log_site *s, const char *now, const char *text) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "time", now, "level", level_names[s->level], "logger",
                              log_state.ident, "msg", text);
        char key[64], source[LOG_FIELD_MAX];
        const char *value;
        if (o && s->field) {
                split_field(s->field, key, sizeof key, &value);
                json_object_set_new(o, key, json_string(value ? value : ""));
        }
        if (o && s->errnum > 0)
                json_object_set_new(o, "errno", json_integer(s->errnum));
        snprintf(source, sizeof source, "%s:%d", base_name(s->file), s->line);
        if (o)
                json_object_set_new(o, "source", json_string(source));
        char *dump = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        line_add(l, "%s", dump ? dump : "{\"msg\": \"(out of memory)\"}");
        free(dump);
        json_decref(o);
}

/* One line on stderr, written at once. */
static void log_to_stderr(const struct log_site *s, const char *text) {
        char now[40];
        rfc3339_format_ms(rfc3339_now_ms(), now, sizeof now);
        struct log_line l = { .len = 0 };
        if (log_state.format == LOG_FORMAT_LOGFMT)
                format_logfmt(&l, s, now, text);
        else if (log_state.format == LOG_FORMAT_JSON)
                format_json(&l, s, now, text);
        else if (s->field)
                line_add(&l, "%s %s: %s: %s [%s]", now, log_state.ident, level_names[s->level], text, s->field);
        else
                line_add(&l, "%s %s: %s: %s", now, log_state.ident, level_names[s->level], text);
        l.text[l.len] = '\n';
        fwrite(l.text, 1, l.len + 1, stderr);
}

/* Format (after the journal's "MESSAGE=", skipped on stderr), append the errno text when there is one, and write
 * to the chosen sink. */
static void log_emit(const struct log_site *s, const char *fmt, va_list ap) {
        static const char key[] = "MESSAGE=";
        char msg[LOG_MSG_MAX], errtext[LOG_FIELD_MAX];
        int saved_errno = errno;
        memcpy(msg, key, sizeof key - 1);
        vsnprintf(msg + sizeof key - 1, sizeof msg - (sizeof key - 1), fmt, ap);
        if (s->errnum > 0) {
                size_t n = strlen(msg);
                snprintf(msg + n, sizeof msg - n, ": %s", strerror_r(s->errnum, errtext, sizeof errtext));
        }
        if (log_state.journal)
                log_to_journal(s, msg);
        else
                log_to_stderr(s, msg + sizeof key - 1);
        errno = saved_errno;
}

void log_fullv(enum log_level level, const char *file, int line, const char *func, const char *field,
               const char *fmt, va_list ap) {
        if (level < log_state.level)
                return;
        log_emit(&(struct log_site){ level, file, func, field, line, 0 }, fmt, ap);
}

void log_full(enum log_level level, const char *file, int line, const char *func, const char *field,
              const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        log_fullv(level, file, line, func, field, fmt, ap);
        va_end(ap);
}

int log_full_errno(enum log_level level, int r, const char *file, int line, const char *func, const char *fmt, ...) {
        int errnum = r < 0 ? -r : r;
        va_list ap;
        if (level < log_state.level)
                return -errnum;
        va_start(ap, fmt);
        log_emit(&(struct log_site){ level, file, func, NULL, line, errnum }, fmt, ap);
        va_end(ap);
        return -errnum;
}
