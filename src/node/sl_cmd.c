/* The commands' usage errors (sl_cmd.h). */
#include "node/sl_cmd.h"

#include <stdarg.h>
#include <stdio.h>

int
sl_cmd_usage(const char *command, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "shoal: %s: %s (see shoal %s --help)\n", command, msg, command);
    return SL_EXIT_USAGE;
}
