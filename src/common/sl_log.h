/* Logging to stderr: sl_log_<level>(subsystem, fmt, ...); level from SHOAL_LOG, line
 * format from SHOAL_LOG_FORMAT. */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stddef.h>

typedef enum { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR, SL_LOG_QUIET } sl_log_level_t;

/* full:  "2026-11-27T10:15:07.123Z node01 shoal node 3: train: info: ..." (UTC, host)
 * terse: "shoal node 3: train: info: ..." */
typedef enum { SL_LOG_FULL, SL_LOG_TERSE } sl_log_format_t;

/* Reads SHOAL_LOG (debug|info|warn|error|quiet; default info) and SHOAL_LOG_FORMAT
 * (full|terse; default full) once. A value that is none of these keeps the default
 * and is one warning naming the variable and the values it takes. */
void sl_log_init(void);
void sl_log_set_level(sl_log_level_t level);
sl_log_level_t sl_log_get_level(void);
void sl_log_set_format(sl_log_format_t format);
sl_log_format_t sl_log_get_format(void);
/* Every line is prefixed with this tag (e.g. "node 3"); NULL for none. Borrowed. */
void sl_log_set_tag(const char *tag);
void sl_log_msg(sl_log_level_t level, const char *subsystem, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What a full line starts with, "2026-11-27T10:15:07.123Z node01 " (now, this host),
 * into buf (size bytes); "" in the terse format. For lines written without sl_log_msg
 * (shoal run's, the progress lines in a file). Returns buf. */
const char *sl_log_stamp(char *buf, size_t size);
/* The time now as ISO 8601 in UTC with milliseconds, "2026-11-27T10:15:07.123Z", into
 * buf (at least 25 bytes; less is cut). Returns buf. */
const char *sl_log_utc_now(char *buf, size_t size);
/* This machine's host name (gethostname, read once; "?" when it fails). Static. */
const char *sl_log_host(void);

#define sl_log_debug(sub, ...) sl_log_msg(SL_LOG_DEBUG, (sub), __VA_ARGS__)
#define sl_log_info(sub, ...) sl_log_msg(SL_LOG_INFO, (sub), __VA_ARGS__)
#define sl_log_warn(sub, ...) sl_log_msg(SL_LOG_WARN, (sub), __VA_ARGS__)
#define sl_log_error(sub, ...) sl_log_msg(SL_LOG_ERROR, (sub), __VA_ARGS__)

#endif
