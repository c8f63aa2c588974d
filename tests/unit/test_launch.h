/* What the tests of the shoal binary's run and node commands share (check_launch_run.c,
 * check_launch_restart.c): the tiny run's configuration, starting the built shoal and
 * waiting for it with a hang guard, and checking that no process or ipc socket is left.
 * Test code only. */
#ifndef TEST_LAUNCH_H
#define TEST_LAUNCH_H

#include <check.h>
#include <stddef.h>
#include <sys/types.h>

/* Seconds after which a shoal process or a file it should write counts as hung: a
 * guard that stops the test and its processes, never a timing the test measures. The
 * test cases' own timeouts (Check's) are longer, so that the guard cleans up first. */
enum { HANG_S = 90 };

extern char launch_root[];  /* the test program's private temporary folder */
extern char launch_tmp[];   /* TMPDIR of the shoal processes: where ipc sockets go */
extern char launch_data[];  /* the corpora */
extern char launch_shoal[]; /* the built shoal, once launch_have_shoal said so */

/* Monotonic seconds. */
double launch_now(void);
/* The little-endian int64 at byte off of file path (a checkpoint header field). */
long launch_header_i64(const char *path, size_t off);
int launch_exists(const char *path);
/* The last line of text (without its newline), in buf. */
const char *launch_last_line(const char *text, char *buf, size_t size);
/* Whether the built shoal is there (SHOAL_BUILDDIR), into launch_shoal; says so if not. */
int launch_have_shoal(void);
/* <root>/<run>.yaml: the tiny model, n nodes, run directory <root>/<run>; train_extra
 * adds keys to the train section (", epochs: 1000"). */
void launch_tiny_yaml(char *path, size_t size, const char *run, int nodes, const char *train_extra);
/* Calls fn on every process whose parent is ppid, until fn returns non-zero; returns
 * that pid, or 0. */
pid_t launch_each_child(pid_t ppid, int (*fn)(pid_t pid, const char *comm, const void *arg),
                        const void *arg);
/* launch_each_child's fn: SIGKILLs and reaps pid. */
int launch_kill_it(pid_t pid, const char *comm, const void *arg);
/* Starts shoal with args (NULL-terminated), stdout and stderr into <root>/<tag>.out and
 * .err; extra environment "K=V" strings in env (NULL-terminated, may be NULL). */
pid_t launch_start(const char *tag, const char *const *env, const char *const *args);
/* Waits for shoal to exit; its exit status, or 128 + signal; *out and *err receive what
 * it wrote (malloc'd). After HANG_S seconds it kills shoal and fails. */
int launch_wait(pid_t pid, const char *tag, char **out, char **err);
/* Every process shoal started is gone (this process is a subreaper) and no ipc socket
 * or directory is left in launch_tmp. */
void launch_assert_nothing_left(void);
/* Runs s inside a private temporary folder named after prog, removed afterwards. */
int test_launch_main(Suite *s, const char *prog);

#endif
