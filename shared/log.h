/* log: leveled logging to journald (with CODE_FILE/CODE_LINE and extra fields) or to stderr. */
/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO = 1, LOG_LEVEL_ERROR = 2 };

/* Choose the sink: journald when stderr is connected to the journal (JOURNAL_STREAM) or when
 * force_journal is set, stderr otherwise. ident is kept by pointer (use a string literal). */
void log_setup(const char *ident, enum log_level level, int force_journal);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* "debug", "info" or "error" -> level; returns -EINVAL for anything else. */
int log_level_from_string(const char *s, enum log_level *ret_level);

/* field is NULL or one extra journal field such as "VMID=105" (also printed on stderr). */
void log_full(enum log_level level, const char *file, int line, const char *func, const char *field,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define log_debug(...) log_full(LOG_LEVEL_DEBUG, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_info(...) log_full(LOG_LEVEL_INFO, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_error(...) log_full(LOG_LEVEL_ERROR, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__)
#define log_info_field(field, ...) log_full(LOG_LEVEL_INFO, __FILE__, __LINE__, __func__, field, __VA_ARGS__)
#define log_error_field(field, ...) log_full(LOG_LEVEL_ERROR, __FILE__, __LINE__, __func__, field, __VA_ARGS__)

/* Log at error level and evaluate to the (negative errno) r, for `return log_error_errno(r, ...)`. */
#define log_error_errno(r, ...) (log_error(__VA_ARGS__), (r))
