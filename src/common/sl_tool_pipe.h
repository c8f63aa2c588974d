/* Handing generated text to an external program (gnuplot, Graphviz dot), for the tools
 * and shoal plot: finding it on PATH, and running it with the text on its standard
 * input. It knows nothing of what its callers compute and does not exit the process. */
#ifndef SL_TOOL_PIPE_H
#define SL_TOOL_PIPE_H

#include <stdio.h>

/* 1 when an executable `name` is in a directory of $PATH (an empty entry meaning the
 * current directory), else 0. */
int sl_tool_on_path(const char *name);

/* Writes the program's input (a script, a graph) to `to`; ctx is the caller's. */
typedef void (*sl_tool_writer_fn)(FILE *to, void *ctx);

/* Runs argv (argv[0] looked up on PATH, the array NULL-terminated) with what
 * writer(to, ctx) writes as its standard input, and waits for it. What the program
 * writes on its standard output becomes the file output, atomically (sl_atomic_open):
 * output appears, or replaces a regular file, only when the program exited 0 and wrote
 * something; otherwise nothing changes. Returns 0 then; otherwise -1 after one line on
 * stderr starting with "TOOL: " (tool, the caller's name): output's own ("OUTPUT: is a
 * directory, ..."), "pipe: ...", "fork: ...", "cannot run PROG: ..." (from the child,
 * which then exits 127) or "PROG failed to write OUTPUT". SIGPIPE is ignored from then
 * on, so that a program that dies early is reported through its exit status. */
int sl_tool_pipe(const char *tool, const char *const *argv, const char *output,
                 sl_tool_writer_fn writer, void *ctx);

#endif
