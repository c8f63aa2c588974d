/* tools/sl_tool_args.h: what the command-line tools share to read their arguments:
 * usage errors, one line each, "PROG: what (see PROG --help)" on stderr, with the exit
 * status that goes with them, and whole numbers in a range. Built into the tools only,
 * not into libshoal; it must not exit the process. */
#ifndef SL_TOOL_ARGS_H
#define SL_TOOL_ARGS_H

#define SL_TOOL_EXIT_USAGE 2

/* Prints the line for tool prog; returns SL_TOOL_EXIT_USAGE. */
int sl_tool_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Option opt's value v as a whole decimal number in [lo, hi] into *out: -1 when fine,
 * else SL_TOOL_EXIT_USAGE after the line ("'x' is not an integer", "5 is out of range
 * 1..4"). */
int sl_tool_parse_long(const char *prog, const char *opt, const char *v, long lo, long hi,
                       long *out);

#endif
