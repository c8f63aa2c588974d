/* tests/unit/test_tool.h: running one of shoal's command-line tools from a Check test,
 * its output captured. */
#ifndef SL_TEST_TOOL_H
#define SL_TEST_TOOL_H

#include <stddef.h>

/* Writes $SHOAL_BUILDDIR/tools/NAME (default ./tools/NAME) to bin (cap bytes). Returns
 * 1 when it is executable, else 0 after a line on stderr saying the case is skipped. */
int test_tool_find(const char *name, char *bin, size_t cap);

/* Runs bin with args (NULL-terminated, at most 30) and, when path is not NULL, the
 * environment variable PATH=path; its stdout goes to out and its stderr to err, each
 * NUL-terminated and truncated to its capacity. Returns the exit status; a signal fails
 * the test. The outputs are read one after the other, so each must fit a pipe's buffer
 * (64 KiB) while the other is read: the tools' outputs in the tests are small. */
int test_tool_run(const char *bin, char *out, size_t out_cap, char *err, size_t err_cap,
                  const char *path, const char *const *args);

#endif
