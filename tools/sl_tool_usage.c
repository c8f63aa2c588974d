/* tools/sl_tool_usage.c: the tools' one-line usage errors. */
#include "tools/sl_tool_usage.h"

#include <stdarg.h>
#include <stdio.h>

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
