/* log: leveled logging to journald (with CODE_FILE/CODE_LINE and extra fields) or to stderr. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <syslog.h>

#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

#define LOG_N_LEVELS 4
#define LOG_MSG_MAX 2048
#define LOG_FIELD_MAX 256

static const char *const level_names[LOG_N_LEVELS] = { "debug", "info", "warning", "error" };
static const int level_priorities[LOG_N_LEVELS] = { LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR };

/* The logger is process-wide by nature (like syslog), so its settings are the one global here. */
static struct {
        const char *ident;
        enum log_level level;
        int journal;
} log_state = { "pvescale", LOG_LEVEL_INFO, 0 };

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

enum log_level log_get_level(void) {
        return log_state.level;
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
        iov[n] = (struct iovec){ buf, len < 0 ? 0 : len >= LOG_FIELD_MAX ? LOG_FIELD_MAX - 1 : (size_t)len };
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
        const char *text = msg + sizeof key - 1;
        if (log_state.journal)
                log_to_journal(s, msg);
        else if (s->field)
                fprintf(stderr, "%s: %s: %s [%s]\n", log_state.ident, level_names[s->level], text, s->field);
        else
                fprintf(stderr, "%s: %s: %s\n", log_state.ident, level_names[s->level], text);
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
