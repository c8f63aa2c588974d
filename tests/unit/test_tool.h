/* tests/unit/test_tool.h: helpers shared by the Check tests that run shoal's programs
 * or read what they wrote: running a command-line tool with its output captured,
 * reading and writing whole files, numbers in JSON text, the parameters of a model
 * file, a forked process's child by name, and a file that appears. */
#ifndef SL_TEST_TOOL_H
#define SL_TEST_TOOL_H

#include <stddef.h>
#include <sys/types.h>

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

/* The whole file at path, malloc'd and NUL-terminated (its length without the NUL in
 * *len when len is not NULL); NULL when it cannot be opened. */
char *test_read_file(const char *path, size_t *len);

/* Writes len bytes of data to path (created or truncated); fails the test on error. */
void test_write_file(const char *path, const void *data, size_t len);

/* The number after the first "key": (spaces allowed after the colon) in a JSON text;
 * NAN for null. A key that is not there fails the test. */
double test_json_num(const char *text, const char *key);

/* The parameters of a model or checkpoint file (version 3, the format shoal writes):
 * nparams floats after the header, malloc'd; their count in *n. Fails the test when
 * the file is missing or short. */
float *test_model_params(const char *path, size_t *n);

/* The pid of a child of parent whose name (/proc/PID/comm, as prctl sets it) is comm,
 * 0 if none. */
pid_t test_child_named(pid_t parent, const char *comm);

/* Waits until path holds at least min_bytes bytes, polling. It fails the test when
 * pid (not 0) has exited first (its status is then lost: the caller fails anyway) or
 * after hang_s seconds, a guard against a hang, not a timing: make it generous. */
void test_wait_file(const char *path, long min_bytes, pid_t pid, double hang_s);

#endif
