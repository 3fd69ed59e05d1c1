/* log: leveled logging to journald (with CODE_FILE/CODE_LINE and extra fields) or to stderr. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

/* The logger is process-wide by nature (like syslog), so its settings are the one global here. */
static struct {
        const char *ident;
        enum log_level level;
        int journal;
} log_state = { "pvescale", LOG_LEVEL_INFO, 0 };

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
        static const char *const names[] = { "debug", "info", "error" };
        for (int i = 0; i < 3; i++)
                if (strcmp(s, names[i]) == 0) {
                        *ret_level = (enum log_level)i;
                        return 0;
                }
        return -EINVAL;
}

static int level_priority(enum log_level level) {
        return level == LOG_LEVEL_DEBUG ? LOG_DEBUG : level == LOG_LEVEL_INFO ? LOG_INFO : LOG_ERR;
}

static const char *level_name(enum log_level level) {
        return level == LOG_LEVEL_DEBUG ? "debug" : level == LOG_LEVEL_INFO ? "info" : "error";
}

static void log_to_journal(enum log_level level, const char *file, int line, const char *func, const char *field,
                           const char *msg) {
        char code_file[256], code_line[32], code_func[128];
        snprintf(code_file, sizeof code_file, "CODE_FILE=%s", file);
        snprintf(code_line, sizeof code_line, "CODE_LINE=%d", line);
        snprintf(code_func, sizeof code_func, "CODE_FUNC=%s", func);
        if (field)
                sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%d", level_priority(level), "SYSLOG_IDENTIFIER=%s",
                                log_state.ident, "%s", code_file, "%s", code_line, "%s", code_func, "%s", field,
                                NULL);
        else
                sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%d", level_priority(level), "SYSLOG_IDENTIFIER=%s",
                                log_state.ident, "%s", code_file, "%s", code_line, "%s", code_func, NULL);
}

void log_full(enum log_level level, const char *file, int line, const char *func, const char *field,
              const char *fmt, ...) {
        if (level < log_state.level)
                return;
        int saved_errno = errno;
        char msg[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (log_state.journal)
                log_to_journal(level, file, line, func, field, msg);
        else if (field)
                fprintf(stderr, "%s: %s: %s [%s]\n", log_state.ident, level_name(level), msg, field);
        else
                fprintf(stderr, "%s: %s: %s\n", log_state.ident, level_name(level), msg);
        errno = saved_errno;
}
