/* What the tests of the shoal binary's run and node commands share (test_launch.h). */
#define _POSIX_C_SOURCE 200809L
#include "test_launch.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "test_tool.h"

char launch_root[128];
char launch_tmp[1100];
char launch_data[1024];
char launch_shoal[1024];

double
launch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

long
launch_header_i64(const char *path, size_t off)
{
    size_t len;
    unsigned char *d = (unsigned char *)test_read_file(path, &len);
    uint64_t v = 0;

    ck_assert_msg(d != NULL, "%s is missing", path);
    ck_assert_uint_ge(len, off + 8);
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)d[off + i] << (8 * i);
    free(d);
    return (long)(int64_t)v;
}

int
launch_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* The last line of text (without its newline), in buf. */
const char *
launch_last_line(const char *text, char *buf, size_t size)
{
    size_t n = strlen(text);
    const char *start;

    while (n > 0 && text[n - 1] == '\n')
        n--;
    start = text + n;
    while (start > text && start[-1] != '\n')
        start--;
    snprintf(buf, size, "%.*s", (int)(text + n - start), start);
    return buf;
}

int
launch_have_shoal(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(launch_shoal, sizeof launch_shoal, "%s/shoal", b ? b : ".");
    if (access(launch_shoal, X_OK) != 0) {
        fprintf(stderr, "check_launch: %s is not built; skipping\n", launch_shoal);
        return 0;
    }
    return 1;
}

/* <tmp>/<run>.yaml: the tiny model, n nodes, run directory <tmp>/<run>; train_extra
 * adds keys to the train section (", epochs: 1000"). */
void
launch_tiny_yaml(char *path, size_t size, const char *run, int nodes, const char *train_extra)
{
    char yaml[4096];

    snprintf(path, size, "%s/%s.yaml", launch_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 50}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, optimizer: {type: adam, lr: 0.01}%s}\n"
             "cluster: {nodes: %d, rendezvous_timeout_ms: 20000}\n",
             run, launch_root, run, launch_data, launch_data, launch_root, train_extra, nodes);
    test_write_file(path, yaml, strlen(yaml));
}

static const char *const launcher_vars[] = {"SLURM_PROCID",
                                            "SLURM_NTASKS",
                                            "SLURM_LOCALID",
                                            "SLURM_JOB_ID",
                                            "SLURM_STEP_ID",
                                            "SLURM_JOB_NODELIST",
                                            "SLURM_STEP_NODELIST",
                                            "SLURM_NODELIST",
                                            "OMPI_COMM_WORLD_RANK",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "PMI_RANK",
                                            "PMI_SIZE",
                                            "RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "MASTER_ADDR",
                                            "MASTER_PORT",
                                            "SHOAL_MASTER_ADDR",
                                            "SHOAL_MASTER_PORT"};

/* The parent pid of process pid from /proc (-1 when gone), and its name into comm. */
static int
proc_parent(pid_t pid, char *comm, size_t size)
{
    char path[64], buf[512], *lp, *rp;
    FILE *f;
    size_t n;
    int parent;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    lp = strchr(buf, '(');
    rp = strrchr(buf, ')');
    if (!lp || !rp || rp < lp || sscanf(rp + 1, " %*c %d", &parent) != 1)
        return -1;
    snprintf(comm, size, "%.*s", (int)(rp - lp - 1), lp + 1);
    return parent;
}

/* Calls fn on every process whose parent is ppid, until fn returns non-zero; returns
 * that pid, or 0. */
pid_t
launch_each_child(pid_t ppid, int (*fn)(pid_t pid, const char *comm, const void *arg),
                  const void *arg)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;

    ck_assert_ptr_nonnull(d);
    while (!found && (e = readdir(d)) != NULL) {
        char comm[64];
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid > 0 && proc_parent(pid, comm, sizeof comm) == ppid && fn(pid, comm, arg))
            found = pid;
    }
    closedir(d);
    return found;
}

int
launch_kill_it(pid_t pid, const char *comm, const void *arg)
{
    (void)comm, (void)arg;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
}

/* Starts shoal with args (NULL-terminated), stdout and stderr into <tmp>/<tag>.out and
 * .err; extra environment "K=V" strings in env (NULL-terminated, may be NULL). */
pid_t
launch_start(const char *tag, const char *const *env, const char *const *args)
{
    char out[1100], err[1100];
    const char *argv[40];
    int n = 0;
    pid_t pid;

    snprintf(out, sizeof out, "%s/%s.out", launch_root, tag);
    snprintf(err, sizeof err, "%s/%s.err", launch_root, tag);
    argv[n++] = launch_shoal;
    while (*args && n < 39)
        argv[n++] = *args++;
    argv[n] = NULL;
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
            _exit(99);
        setenv("SHOAL_LOG", "warn", 1);
        setenv("TMPDIR", launch_tmp, 1);
        for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
            unsetenv(launcher_vars[i]); /* in case the tests run under srun or mpirun */
        for (; env && *env; env++)
            putenv((char *)*env);
        execv(launch_shoal, (char *const *)argv);
        _exit(98);
    }
    return pid;
}

/* Waits for shoal to exit; its exit status, or 128 + signal; *out and *err receive what
 * it wrote (malloc'd). After HANG_S seconds it kills shoal and fails: a guard against a
 * hang that leaves no process behind, not a timing. */
int
launch_wait(pid_t pid, const char *tag, char **out, char **err)
{
    char path[1100];
    double t0 = launch_now();
    int ws;

    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            break;
        if (launch_now() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            test_sleep_ms(200);
            launch_each_child(getpid(), launch_kill_it, NULL); /* orphaned nodes, adopted by us */
            ck_abort_msg("shoal %s hung: not done after %d s", tag, HANG_S);
        }
        test_sleep_ms(20);
    }
    snprintf(path, sizeof path, "%s/%s.out", launch_root, tag);
    *out = test_read_file(path, NULL);
    snprintf(path, sizeof path, "%s/%s.err", launch_root, tag);
    *err = test_read_file(path, NULL);
    ck_assert(*out && *err);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* Every process shoal started is gone: this test process adopts orphans (it is a
 * subreaper), so a node left running or unreaped would still be its descendant. And
 * no ipc socket or directory is left in their TMPDIR. */
void
launch_assert_nothing_left(void)
{
    int ws, entries = 0;
    pid_t r = waitpid(-1, &ws, WNOHANG);
    DIR *d;
    struct dirent *e;

    if (r == 0)
        launch_each_child(getpid(), launch_kill_it, NULL);
    ck_assert_msg(r == -1 && errno == ECHILD, "a process was left behind (waitpid: %d)", (int)r);
    d = opendir(launch_tmp);
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            fprintf(stderr, "check_launch: left in %s: %s\n", launch_tmp, e->d_name);
            entries++;
        }
    closedir(d);
    ck_assert_int_eq(entries, 0);
}

int
test_launch_main(Suite *s, const char *prog)
{
    int rc;

    test_data_dir(launch_data, sizeof launch_data);
    snprintf(launch_root, sizeof launch_root, "/tmp/shoal-%s-XXXXXX", prog);
    if (!mkdtemp(launch_root)) {
        fprintf(stderr, "%s: mkdtemp: %s\n", prog, strerror(errno));
        return 1;
    }
    sl_log_set_level(SL_LOG_ERROR); /* the refusals the tests provoke are warnings */
    snprintf(launch_tmp, sizeof launch_tmp, "%s/t", launch_root);
    if (mkdir(launch_tmp, 0700) != 0) {
        fprintf(stderr, "%s: mkdir %s: %s\n", prog, launch_tmp, strerror(errno));
        test_remove_tree(launch_root);
        return 1;
    }
    rc = test_main(s);
    test_remove_tree(launch_root);
    return rc;
}
