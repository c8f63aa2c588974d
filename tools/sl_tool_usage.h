/* tools/sl_tool_usage.h: the command-line tools' usage errors, one line each,
 * "PROG: what (see PROG --help)" on stderr, and the exit status that goes with them.
 * Built into the tools only, not into libshoal; it must not exit the process. */
#ifndef SL_TOOL_USAGE_H
#define SL_TOOL_USAGE_H

#define SL_TOOL_EXIT_USAGE 2

/* Prints the line for tool prog; returns SL_TOOL_EXIT_USAGE. */
int sl_tool_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
