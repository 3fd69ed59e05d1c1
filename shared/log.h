/* log: leveled logging to journald (with CODE_FILE/CODE_LINE and extra fields) or to stderr, one line per event as
 * text, logfmt (key=value) or JSON, each with an RFC 3339 timestamp. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdarg.h>

/* debug: what a developer traces; info: what the daemon did; warning: something is off but the work goes on
 * (a fallback taken, a retry scheduled, bad input skipped); error: an operation failed. */
enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO = 1, LOG_LEVEL_WARNING = 2, LOG_LEVEL_ERROR = 3 };

/* Choose the sink: journald when stderr is connected to the journal (JOURNAL_STREAM) or when
 * force_journal is set, stderr otherwise. ident is kept by pointer (use a string literal). */
void log_setup(const char *ident, enum log_level level, int force_journal);
void log_set_level(enum log_level level);

/* The stderr line (the journal has its own fields):
 *   text:   2026-11-27T10:00:00.250Z pvescale-agent: error: cannot pin VM 105: No such process [VMID=105]
 *   logfmt: time=2026-11-27T10:00:00.250Z level=error logger=pvescale-agent msg="cannot pin VM 105: No such process"
 *           vmid=105 errno=3 source=pin_service.c:70
 *   json:   {"time": "...", "level": "error", "logger": "pvescale-agent", "msg": "...", "vmid": "105", "errno": 3,
 *            "source": "pin_service.c:70"} (compact, one line)
 * The extra field's key is lowercased; logfmt quotes a value with a space, '=', '"' or a control character and
 * escapes '"', '\' and newlines. */
enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_LOGFMT = 1, LOG_FORMAT_JSON = 2 };
void log_set_format(enum log_format format);
/* "text", "logfmt" or "json" -> format; -EINVAL for anything else (*ret unchanged). */
int log_format_from_string(const char *s, enum log_format *ret);
/* "debug", "info", "warning" or "error" -> level; returns -EINVAL for anything else. */
int log_level_from_string(const char *s, enum log_level *ret_level);

/* field is NULL or one extra journal field such as "VMID=105" (also printed on stderr). errno is kept. */
void log_full(enum log_level level, const char *file, int line, const char *func, const char *field,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* log_full taking a va_list, for helpers with their own printf-like signature. ap is consumed. */
void log_fullv(enum log_level level, const char *file, int line, const char *func, const char *field,
               const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));
/* log_full for a failure with an errno: the message gets ": <strerror(|r|)>" appended (so callers do not add
 * it themselves) and the journal entry an ERRNO= field. Returns -|r|, so that `return log_error_errno(r, ...)`
 * logs and hands the error on; r == 0 appends nothing and returns 0. */
int log_full_errno(enum log_level level, int r, const char *file, int line, const char *func, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));

#define log_debug(...) log_full(LOG_LEVEL_DEBUG, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_info(...) log_full(LOG_LEVEL_INFO, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_warning(...) log_full(LOG_LEVEL_WARNING, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_error(...) log_full(LOG_LEVEL_ERROR, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_info_field(field, ...) log_full(LOG_LEVEL_INFO, __FILE__, __LINE__, __func__, field, __VA_ARGS__)
#define log_warning_field(field, ...) log_full(LOG_LEVEL_WARNING, __FILE__, __LINE__, __func__, field, __VA_ARGS__)
#define log_error_field(field, ...) log_full(LOG_LEVEL_ERROR, __FILE__, __LINE__, __func__, field, __VA_ARGS__)

/* Log "<message>: <errno text>" and evaluate to -|r|, for `return log_error_errno(r, "cannot open %s", path)`. */
#define log_error_errno(r, ...) log_full_errno(LOG_LEVEL_ERROR, (r), __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_warning_errno(r, ...) log_full_errno(LOG_LEVEL_WARNING, (r), __FILE__, __LINE__, __func__, __VA_ARGS__)
