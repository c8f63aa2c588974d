/* What the commands of the shoal program share (sl_main.c, sl_cmd_*.c): their exit
 * statuses and the one line of a usage error. Part of the shoal program only. */
#ifndef SL_CMD_H
#define SL_CMD_H

enum { SL_EXIT_OK = 0, SL_EXIT_RUNTIME = 1, SL_EXIT_USAGE = 2, SL_EXIT_INTERRUPTED = 130 };

/* Prints "shoal: COMMAND: <message> (see shoal COMMAND --help)" to stderr; returns
 * SL_EXIT_USAGE. */
int sl_cmd_usage(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
