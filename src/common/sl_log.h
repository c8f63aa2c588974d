/* Logging to stderr: sl_log_<level>(subsystem, fmt, ...); level from SHOAL_LOG. */
#ifndef SL_LOG_H
#define SL_LOG_H

typedef enum { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR, SL_LOG_QUIET } sl_log_level_t;

/* Reads SHOAL_LOG (debug|info|warn|error|quiet) once; default info. */
void sl_log_init(void);
void sl_log_set_level(sl_log_level_t level);
sl_log_level_t sl_log_get_level(void);
/* Every line is prefixed with this tag (e.g. "node 3"); NULL for none. Borrowed. */
void sl_log_set_tag(const char *tag);
void sl_log_msg(sl_log_level_t level, const char *subsystem, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sl_log_debug(sub, ...) sl_log_msg(SL_LOG_DEBUG, (sub), __VA_ARGS__)
#define sl_log_info(sub, ...) sl_log_msg(SL_LOG_INFO, (sub), __VA_ARGS__)
#define sl_log_warn(sub, ...) sl_log_msg(SL_LOG_WARN, (sub), __VA_ARGS__)
#define sl_log_error(sub, ...) sl_log_msg(SL_LOG_ERROR, (sub), __VA_ARGS__)

#endif
