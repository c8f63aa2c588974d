/* tools/sl_tool_args.c: the tools' usage errors and numbers. */
#include "tools/sl_tool_args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int
sl_tool_usage_error(const char *prog, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s (see %s --help)\n", prog, msg, prog);
    return SL_TOOL_EXIT_USAGE;
}

int
sl_tool_parse_long(const char *prog, const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    long x;

    errno = 0;
    x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE)
        return sl_tool_usage_error(prog, "%s: '%s' is not an integer", opt, v);
    if (x < lo || x > hi)
        return sl_tool_usage_error(prog, "%s: %ld is out of range %ld..%ld", opt, x, lo, hi);
    *out = x;
    return -1;
}
