/* Logging: one line per message on stderr, written with a single fprintf so that
 * lines from several node processes do not interleave mid-line. Full lines carry the
 * time (UTC) and the host, for reading the logs of many hosts afterwards. */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sl_log_level_t log_level = SL_LOG_INFO;
static sl_log_format_t log_format = SL_LOG_FULL;
static const char *log_tag;

/* The index of env's value among names (n of them), or -1 (then a warning). */
static int
env_choice(const char *var, const char *const *names, int n, const char *dflt)
{
    const char *env = getenv(var);
    char list[96] = "";

    if (!env)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(env, names[i]) == 0)
            return i;
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    sl_log_warn("log", "%s '%s' is not one of %s; using %s", var, env, list, dflt);
    return -1;
}

void
sl_log_init(void)
{
    static const char *const levels[] = {"debug", "info", "warn", "error", "quiet"};
    static const char *const formats[] = {"full", "terse"};
    int f = env_choice("SHOAL_LOG_FORMAT", formats, 2, "full");
    int l;

    if (f >= 0)
        log_format = (sl_log_format_t)f;
    l = env_choice("SHOAL_LOG", levels, 5, "info");
    if (l >= 0)
        log_level = (sl_log_level_t)l;
    sl_log_host(); /* read once here, before any thread logs */
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
sl_log_set_format(sl_log_format_t format)
{
    log_format = format;
}

sl_log_format_t
sl_log_get_format(void)
{
    return log_format;
}

void
sl_log_set_tag(const char *tag)
{
    log_tag = tag;
}

const char *
sl_log_host(void)
{
    static char host[256];

    if (!host[0] && (gethostname(host, sizeof host - 1) != 0 || !host[0]))
        snprintf(host, sizeof host, "?");
    return host;
}

const char *
sl_log_utc_now(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    char day[32];

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%03ldZ", day, ts.tv_nsec / 1000000L);
    return buf;
}

const char *
sl_log_stamp(char *buf, size_t size)
{
    char now[32];

    if (log_format == SL_LOG_TERSE)
        snprintf(buf, size, "%s", "");
    else
        snprintf(buf, size, "%s %s ", sl_log_utc_now(now, sizeof now), sl_log_host());
    return buf;
}

void
sl_log_msg(sl_log_level_t level, const char *subsystem, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    char line[2048], stamp[320];
    va_list ap;

    if (level < log_level || level >= SL_LOG_QUIET)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%sshoal%s%s: %s: %s: %s\n", sl_log_stamp(stamp, sizeof stamp),
            log_tag ? " " : "", log_tag ? log_tag : "", subsystem, names[level], line);
}
