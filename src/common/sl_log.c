/* Logging: one line per message on stderr, written with a single fprintf so that
 * lines from several node processes do not interleave mid-line. */
#include "common/sl_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_log_level_t log_level = SL_LOG_INFO;
static const char *log_tag;

void
sl_log_init(void)
{
    static const char *names[] = {"debug", "info", "warn", "error", "quiet"};
    const char *env = getenv("SHOAL_LOG");

    if (!env)
        return;
    for (int i = 0; i < 5; i++)
        if (strcmp(env, names[i]) == 0)
            log_level = (sl_log_level_t)i;
}

void
sl_log_set_level(sl_log_level_t level)
{
    log_level = level;
}

sl_log_level_t
sl_log_get_level(void)
{
    return log_level;
}

void
sl_log_set_tag(const char *tag)
{
    log_tag = tag;
}

void
sl_log_msg(sl_log_level_t level, const char *subsystem, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    char line[2048];
    va_list ap;

    if (level < log_level || level >= SL_LOG_QUIET)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "shoal%s%s: %s: %s: %s\n", log_tag ? " " : "", log_tag ? log_tag : "",
            subsystem, names[level], line);
}
