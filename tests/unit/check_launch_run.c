/* Unit tests of the built shoal binary's `run` and `node` commands on a 20000-token
 * slice of Brown (vocab 500, E 16, one layer of 16, B 4 x T 8): shares, checkpoints,
 * failures, interrupts, resume, a node's abort reaching its peer, usage errors, a run
 * started as torchrun starts one (its map, full log lines, the run's tokens/s), --init
 * of shoal run and shoal node, and no process left behind. The cluster keys and the
 * rendezvous are in check_launch.c. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <errno.h>
#include <dirent.h>
#include <regex.h>
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
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_export.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-launch-run-XXXXXX";
static char tmp_dir[1100]; /* TMPDIR of the shoal processes: where ipc sockets go */
static char data_dir[1024];
static char shoal_bin[1024];

/* Seconds after which a shoal process or a file it should write counts as hung: a
 * guard that stops the test and its processes, never a timing the test measures. The
 * test cases' own timeouts (Check's) are longer, so that the guard cleans up first. */
enum { HANG_S = 90 };

/* ---------------------------------------------------------------- helpers */

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long
header_i64(const char *path, size_t off)
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

static int
exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* The last line of text (without its newline), in buf. */
static const char *
last_line(const char *text, char *buf, size_t size)
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

/* ------------------------------------------------------- the shoal binary */

static int
have_shoal(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(shoal_bin, sizeof shoal_bin, "%s/shoal", b ? b : ".");
    if (access(shoal_bin, X_OK) != 0) {
        fprintf(stderr, "check_launch: %s is not built; skipping\n", shoal_bin);
        return 0;
    }
    return 1;
}

/* <tmp>/<run>.yaml: the tiny model, n nodes, run directory <tmp>/<run>; train_extra
 * adds keys to the train section (", epochs: 1000"). */
static void
tiny_yaml(char *path, size_t size, const char *run, int nodes, const char *train_extra)
{
    char yaml[4096];

    snprintf(path, size, "%s/%s.yaml", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 50}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, optimizer: {type: adam, lr: 0.01}%s}\n"
             "cluster: {nodes: %d, rendezvous_timeout_ms: 20000}\n",
             run, tmp_root, run, data_dir, data_dir, tmp_root, train_extra, nodes);
    test_write_file(path, yaml, strlen(yaml));
}

static const char *const launcher_vars[] = {
    "SLURM_PROCID",         "SLURM_NTASKS",        "SLURM_LOCALID",       "SLURM_JOB_ID",
    "SLURM_STEP_ID",        "SLURM_JOB_NODELIST",  "SLURM_STEP_NODELIST", "SLURM_NODELIST",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",           "PMI_SIZE",
    "RANK",                 "WORLD_SIZE",          "LOCAL_RANK",          "MASTER_ADDR",
    "MASTER_PORT",          "SHOAL_MASTER_ADDR",   "SHOAL_MASTER_PORT"};

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
static pid_t
each_child(pid_t ppid, int (*fn)(pid_t pid, const char *comm, const void *arg), const void *arg)
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

static int
kill_it(pid_t pid, const char *comm, const void *arg)
{
    (void)comm, (void)arg;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
}

/* Starts shoal with args (NULL-terminated), stdout and stderr into <tmp>/<tag>.out and
 * .err; extra environment "K=V" strings in env (NULL-terminated, may be NULL). */
static pid_t
start_shoal(const char *tag, const char *const *env, const char *const *args)
{
    char out[1100], err[1100];
    const char *argv[40];
    int n = 0;
    pid_t pid;

    snprintf(out, sizeof out, "%s/%s.out", tmp_root, tag);
    snprintf(err, sizeof err, "%s/%s.err", tmp_root, tag);
    argv[n++] = shoal_bin;
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
        setenv("TMPDIR", tmp_dir, 1);
        for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
            unsetenv(launcher_vars[i]); /* in case the tests run under srun or mpirun */
        for (; env && *env; env++)
            putenv((char *)*env);
        execv(shoal_bin, (char *const *)argv);
        _exit(98);
    }
    return pid;
}

/* Waits for shoal to exit; its exit status, or 128 + signal; *out and *err receive what
 * it wrote (malloc'd). After HANG_S seconds it kills shoal and fails: a guard against a
 * hang that leaves no process behind, not a timing. */
static int
wait_shoal(pid_t pid, const char *tag, char **out, char **err)
{
    char path[1100];
    double t0 = now_s();
    int ws;

    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            break;
        if (now_s() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            test_sleep_ms(200);
            each_child(getpid(), kill_it, NULL); /* orphaned nodes, adopted by us */
            ck_abort_msg("shoal %s hung: not done after %d s", tag, HANG_S);
        }
        test_sleep_ms(20);
    }
    snprintf(path, sizeof path, "%s/%s.out", tmp_root, tag);
    *out = test_read_file(path, NULL);
    snprintf(path, sizeof path, "%s/%s.err", tmp_root, tag);
    *err = test_read_file(path, NULL);
    ck_assert(*out && *err);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* Every process shoal started is gone: this test process adopts orphans (it is a
 * subreaper), so a node left running or unreaped would still be its descendant. And
 * no ipc socket or directory is left in their TMPDIR. */
static void
assert_nothing_left(void)
{
    int ws, entries = 0;
    pid_t r = waitpid(-1, &ws, WNOHANG);
    DIR *d;
    struct dirent *e;

    if (r == 0)
        each_child(getpid(), kill_it, NULL);
    ck_assert_msg(r == -1 && errno == ECHILD, "a process was left behind (waitpid: %d)", (int)r);
    d = opendir(tmp_dir);
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            fprintf(stderr, "check_launch: left in %s: %s\n", tmp_dir, e->d_name);
            entries++;
        }
    closedir(d);
    ck_assert_int_eq(entries, 0);
}

/* shoal run -n 3: every node trains one epoch of its own third, exactly as the trainer
 * does for rank r of 3 in-process; per-node and run-level files; nothing left. */
START_TEST(test_run_three_nodes)
{
    char conf[1100], path[1200], mine[1200], *out, *err, *a, *b;
    long bpe[3], whole;
    size_t alen, blen;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "three", 1, "");
    ck_assert_int_eq(
        wait_shoal(start_shoal("three", NULL, (const char *[]){"run", conf, "-n", "3", NULL}),
                   "three", &out, &err),
        0);
    assert_nothing_left();
    ck_assert_msg(strstr(out, "shoal: node 0: done: 1 epoch, ") &&
                      strstr(out, "shoal: node 2: done: ") && strstr(out, "shoal: done: 3 nodes, "),
                  "stdout: %s\nstderr: %s", out, err);
    ck_assert_msg(strstr(err, "step ") && strstr(err, " | 3 nodes | "), "stderr: %s", err);
    free(out);
    free(err);

    whole = test_share_batches(conf, 0, 1, 4, 8);
    for (int r = 0; r < 3; r++) {
        bpe[r] = test_share_batches(conf, r, 3, 4, 8);
        ck_assert_int_lt(bpe[r], whole / 2);
        snprintf(path, sizeof path, "%s/three/node-%d/checkpoint.bin", tmp_root, r);
        ck_assert_int_eq(header_i64(path, 144), bpe[r]);         /* step */
        ck_assert_int_eq(header_i64(path, 152), 1);              /* epoch */
        ck_assert_int_eq(header_i64(path, 160), 0);              /* batch index */
        ck_assert_int_eq(header_i64(path, 176), bpe[r] * 4 * 8); /* tokens */
        snprintf(path, sizeof path, "%s/three/node-%d/metrics.jsonl", tmp_root, r);
        ck_assert(exists(path));
        snprintf(path, sizeof path, "%s/three/node-%d/model.bin", tmp_root, r);
        ck_assert(exists(path));
    }
    snprintf(path, sizeof path, "%s/three/config.yaml", tmp_root);
    a = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(strstr(a, "\ncluster:\n  nodes: 3\n  transport: ipc\n"));
    free(a);
    snprintf(path, sizeof path, "%s/three/summary.json", tmp_root);
    a = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(strstr(a, "\"nodes\": 3"));
    ck_assert_ptr_nonnull(strstr(a, "\"rank\": 0"));
    free(a);
    snprintf(path, sizeof path, "%s/three/node-1/config.yaml", tmp_root);
    ck_assert(!exists(path));

    /* node 1 trained exactly what rank 1 of 3 trains in-process (all but the time) */
    {
        sl_config_t cfg;
        sl_train_opts_t opts;
        sl_train_result_t res;
        sl_config_init(&cfg);
        ck_assert(sl_config_load_file(&cfg, conf) == SL_OK);
        snprintf(path, sizeof path, "run.dir=%s/three-inproc", tmp_root);
        ck_assert(sl_config_set(&cfg, path) == SL_OK);
        ck_assert(sl_config_set(&cfg, "cluster.nodes=3") == SL_OK);
        sl_log_set_level(SL_LOG_WARN);
        sl_train_opts_init(&opts);
        opts.rank = 1;
        opts.nranks = 3;
        opts.quiet = 1;
        ck_assert_msg(sl_train_run(&cfg, &opts, &res) == SL_OK, "%s", sl_err_msg());
        ck_assert_int_eq(res.steps, bpe[1]);
        sl_config_fini(&cfg);
    }
    snprintf(path, sizeof path, "%s/three/node-1/checkpoint.bin", tmp_root);
    snprintf(mine, sizeof mine, "%s/three-inproc/node-1/checkpoint.bin", tmp_root);
    a = test_read_file(path, &alen);
    b = test_read_file(mine, &blen);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, 184) == 0);
    ck_assert(memcmp(a + 192, b + 192, alen - 192 - 8) == 0);
    free(b);
    /* and node 0, on other data, ended elsewhere */
    snprintf(path, sizeof path, "%s/three/node-0/checkpoint.bin", tmp_root);
    b = test_read_file(path, &blen);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a + 192, b + 192, 4000) != 0);
    free(a);
    free(b);
}
END_TEST

/* tcp transport; SIGINT to shoal run stops every node with a checkpoint (exit 130);
 * the same command then continues every node from it. */
START_TEST(test_run_interrupt_resume)
{
    char conf[1100], path[1200], *out, *err, line[512];
    const char *const args[] = {"run",         conf,
                                "-n",          "2",
                                "--transport", "tcp",
                                "--set",       "train.epochs=1000",
                                "--set",       "train.max_steps=2000",
                                NULL};
    pid_t pid;
    long at[2];

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "intr", 2, ", eval_every_epoch: false");
    pid = start_shoal("intr", NULL, args);
    snprintf(path, sizeof path, "%s/intr/node-1/metrics.jsonl", tmp_root);
    test_wait_file(path, 1, pid, HANG_S);
    kill(pid, SIGINT);
    ck_assert_int_eq(wait_shoal(pid, "intr", &out, &err), 130);
    assert_nothing_left();
    snprintf(path, sizeof path,
             "shoal: interrupted; every node saved its checkpoint under %s/intr; run the same "
             "command to resume",
             tmp_root);
    ck_assert_str_eq(last_line(err, line, sizeof line), path);
    free(out);
    free(err);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/intr/node-%d/checkpoint.bin", tmp_root, r);
        at[r] = header_i64(path, 144);
        ck_assert_int_gt(at[r], 0);
        ck_assert_int_lt(at[r], 2000);
    }

    ck_assert_int_eq(
        wait_shoal(start_shoal("intr2", (const char *[]){"SHOAL_LOG=info", NULL}, args), "intr2",
                   &out, &err),
        0);
    assert_nothing_left();
    for (int r = 0; r < 2; r++) {
        char expect[128];
        snprintf(expect, sizeof expect, "node %d: train: info: resuming from step %ld of 2000", r,
                 at[r]);
        ck_assert_msg(strstr(err, expect) != NULL, "no '%s' in: %s", expect, err);
        snprintf(path, sizeof path, "%s/intr/node-%d/checkpoint.bin", tmp_root, r);
        ck_assert_int_eq(header_i64(path, 144), 2000);
    }
    free(out);
    free(err);
}
END_TEST

/* A node killed mid-run: shoal run stops the others (they save checkpoints), names the
 * node, exits non-zero, and leaves no process. */
START_TEST(test_run_node_killed)
{
    char conf[1100], path[1200], *out, *err, line[512];
    pid_t pid, victim;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "killed", 3, ", epochs: 1000, eval_every_epoch: false");
    pid = start_shoal("killed", NULL, (const char *[]){"run", conf, "--quiet", NULL});
    snprintf(path, sizeof path, "%s/killed/node-1/metrics.jsonl", tmp_root);
    test_wait_file(path, 1, pid, HANG_S);
    victim = test_child_named(pid, "shoal node 1"); /* it wrote the file: it has its name */
    ck_assert_int_gt(victim, 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_shoal(pid, "killed", &out, &err), 1);
    assert_nothing_left();
    ck_assert_int_eq(kill(victim, 0), -1);
    ck_assert_str_eq(last_line(err, line, sizeof line), "shoal: node 1 killed by signal 9");
    ck_assert_str_eq(out, "");
    for (int r = 0; r < 3; r += 2) {
        snprintf(path, sizeof path, "%s/killed/node-%d/checkpoint.bin", tmp_root, r);
        ck_assert_int_gt(header_i64(path, 144), 0);
    }
    free(out);
    free(err);
}
END_TEST

/* A node that fails with an error: shoal run names it and its error line. */
START_TEST(test_run_node_fails)
{
    char conf[1100], path[1200], *out, *err, line[512], expect[1400];

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "fails", 3, ", epochs: 1000");
    snprintf(path, sizeof path, "%s/fails", tmp_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/fails/node-2", tmp_root); /* a file where its dir goes */
    test_write_file(path, "in the way\n", 11);
    ck_assert_int_eq(wait_shoal(start_shoal("fails", NULL, (const char *[]){"run", conf, NULL}),
                                "fails", &out, &err),
                     1);
    assert_nothing_left();
    snprintf(expect, sizeof expect, "shoal: node 2 failed: %s/fails/node-2/", tmp_root);
    last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    ck_assert_ptr_nonnull(strstr(line, "Not a directory"));
    free(out);
    free(err);
}
END_TEST

/* `shoal keygen` writes tmp_root/NAME.key, mode 0600; set receives
 * "cluster.key_file=PATH" for --set. */
static void
make_key_file(const char *name, char *set, size_t size)
{
    char path[1100], *out, *err;
    struct stat sb;

    snprintf(path, sizeof path, "%s/%s.key", tmp_root, name);
    ck_assert_int_eq(wait_shoal(start_shoal("keygen", NULL, (const char *[]){"keygen", path, NULL}),
                                "keygen", &out, &err),
                     0);
    free(out);
    free(err);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    snprintf(set, size, "cluster.key_file=%s", path);
}

/* The key file's rules, each a one-line error before anything is opened: shoal node
 * without one (CURVE is the default), a key file others can read, one that is not a key
 * file; shoal keygen never overwrites. */
START_TEST(test_node_key_file)
{
    char conf[1100], key[1100], set[1200], expect[1400], *out, *err;
    const char *node[] = {"node",     conf,          "--rank", "1", "--size", "2",
                          "--master", "127.0.0.1:1", "--set",  set, NULL};

    if (!have_shoal())
        return;
    tiny_yaml(conf, sizeof conf, "keys", 2, "");
    snprintf(set, sizeof set, "cluster.key_file=");
    ck_assert_int_eq(wait_shoal(start_shoal("keys", NULL, node), "keys", &out, &err), 2);
    ck_assert_str_eq(err, "shoal: node 1: cluster.security is curve but cluster.key_file is not "
                          "set: make the run's secret once with 'shoal keygen FILE' on a "
                          "filesystem every node reads, then --set cluster.key_file=FILE\n");
    free(out);
    free(err);

    make_key_file("keys", set, sizeof set);
    snprintf(key, sizeof key, "%s/keys.key", tmp_root);
    ck_assert_int_eq(wait_shoal(start_shoal("keys", NULL, (const char *[]){"keygen", key, NULL}),
                                "keys", &out, &err),
                     1);
    snprintf(expect, sizeof expect,
             "shoal: keygen: %s: File exists (a key file is never overwritten)\n", key);
    ck_assert_str_eq(err, expect);
    free(out);
    free(err);

    ck_assert_int_eq(chmod(key, 0640), 0);
    ck_assert_int_eq(wait_shoal(start_shoal("keys", NULL, node), "keys", &out, &err), 1);
    snprintf(expect, sizeof expect,
             "shoal: node 1: cluster.key_file %s: mode 640 lets others read the run's secret; "
             "chmod 600 %s\n",
             key, key);
    ck_assert_str_eq(err, expect);
    free(out);
    free(err);

    ck_assert_int_eq(unlink(key), 0);
    test_write_file(key, "shoal-secret-1 0123\n", 20);
    ck_assert_int_eq(chmod(key, 0600), 0);
    ck_assert_int_eq(wait_shoal(start_shoal("keys", NULL, node), "keys", &out, &err), 1);
    snprintf(expect, sizeof expect,
             "shoal: node 1: cluster.key_file %s: not a shoal key file (make one with shoal "
             "keygen)\n",
             key);
    ck_assert_str_eq(err, expect);
    free(out);
    free(err);
}
END_TEST

/* Two `shoal node` processes; rank 1 fails after the rendezvous and tells rank 0, which
 * stops after its step with a checkpoint. */
START_TEST(test_node_abort_reaches_peer)
{
    char conf[1100], path[1200], master[64], *out, *err, line[512], expect[1400], key_set[1200];
    pid_t p0, p1;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "abort", 2, ", epochs: 1000, eval_every_epoch: false");
    snprintf(path, sizeof path, "%s/abort", tmp_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/abort/node-1", tmp_root);
    test_write_file(path, "in the way\n", 11);
    snprintf(master, sizeof master, "127.0.0.1:%d", test_free_port());
    make_key_file("abort", key_set, sizeof key_set);
    p0 = start_shoal(
        "abort0", NULL,
        (const char *[]){"node", conf, "--rank", "0", "--master", master, "--set", key_set, NULL});
    p1 = start_shoal("abort1", (const char *[]){"SLURM_PROCID=1", "SLURM_NTASKS=2", NULL},
                     (const char *[]){"node", conf, "--master", master, "--set", key_set, NULL});
    ck_assert_int_eq(wait_shoal(p1, "abort1", &out, &err), 1);
    snprintf(expect, sizeof expect, "shoal: node 1: %s/abort/node-1/", tmp_root);
    last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    free(out);
    free(err);
    ck_assert_int_eq(wait_shoal(p0, "abort0", &out, &err), 1);
    snprintf(expect, sizeof expect, "shoal: node 0: stopped: node 1 failed: %s/abort/node-1/",
             tmp_root);
    last_line(err, line, sizeof line);
    ck_assert_msg(strncmp(line, expect, strlen(expect)) == 0, "stderr: %s", err);
    snprintf(path, sizeof path, "%s/abort/node-0/checkpoint.bin", tmp_root);
    ck_assert_int_gt(header_i64(path, 144), 0);
    assert_nothing_left();
    free(out);
    free(err);
}
END_TEST

/* Does the line starting at p (up to its newline) match the extended regex pattern? */
static int
line_matches(const char *p, const char *pattern)
{
    char line[1024];
    regex_t re;
    int ok;

    snprintf(line, sizeof line, "%.*s", (int)strcspn(p, "\n"), p);
    ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    ok = regexec(&re, line, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* Two `shoal node` processes as torchrun starts them: RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT and cluster.nodes auto, no SHOAL_* variable, no flag. Rank 0
 * logs full lines (time, host) with the map (both pids, cpu, lanes), says the run's
 * tokens/s, and its files carry the version and the wall-clock times. */
START_TEST(test_node_torchrun_env)
{
    static char port[64];
    char conf[1100], key_set[1200], path[1200], pattern[512], *out, *err, *text, *p;
    const char *args[] = {"node", conf, "--set", "cluster.nodes=auto", "--set", key_set, NULL};
    pid_t p0, p1;
    int steps = 0;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "torchrun", 3, ", max_steps: 20");
    make_key_file("torchrun", key_set, sizeof key_set);
    snprintf(port, sizeof port, "MASTER_PORT=%d", test_free_port());
    p1 = start_shoal("torch1",
                     (const char *[]){"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1",
                                      "MASTER_ADDR=127.0.0.1", port, NULL},
                     args);
    p0 = start_shoal("torch0",
                     (const char *[]){"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0",
                                      "MASTER_ADDR=127.0.0.1", port, "SHOAL_LOG=info",
                                      "SHOAL_LOG_FORMAT=full", NULL},
                     args);
    ck_assert_int_eq(wait_shoal(p1, "torch1", &out, &err), 0);
    free(out);
    free(err);
    ck_assert_int_eq(wait_shoal(p0, "torch0", &out, &err), 0);
    assert_nothing_left();
    ck_assert_msg(strstr(out, "shoal: node 0: run: 2 nodes, ") != NULL, "%s", out);
    p = strstr(err, " shoal node 0: node: info: map: 2 nodes on 1 host");
    ck_assert_msg(p != NULL, "%s", err);
    for (int r = 0; r < 2; r++) {
        snprintf(pattern, sizeof pattern,
                 "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z %s shoal "
                 "node 0: node: info: map: rank %d: host %s, pid %d, device cpu, lanes on$",
                 sl_log_host(), r, sl_log_host(), (int)(r ? p1 : p0));
        p = strchr(p, '\n') + 1;
        ck_assert_msg(line_matches(p, pattern), "line '%.*s' is not /%s/", (int)strcspn(p, "\n"),
                      p, pattern);
    }
    free(out);
    free(err);

    snprintf(path, sizeof path, "%s/torchrun/summary.json", tmp_root);
    text = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    ck_assert_int_eq((int)test_json_num(text, "nodes"), 2);
    ck_assert_int_eq((int)test_json_num(text, "run_nodes_reported"), 2);
    ck_assert(test_json_num(text, "run_tokens_per_s") > test_json_num(text, "tokens_per_s"));
    ck_assert(test_json_num(text, "wall_time_s") >= test_json_num(text, "train_time_s"));
    ck_assert_msg(strstr(text, "\"version\": \"" PACKAGE_VERSION "\"") != NULL, "%s", text);
    ck_assert(line_matches(strstr(text, "\"started_at\": "),
                           "^\"started_at\": \"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z\",$"));
    ck_assert(line_matches(strstr(text, "\"finished_at\": "),
                           "^\"finished_at\": \"[0-9-]{10}T[0-9:]{8}\\.[0-9]{3}Z\",$"));
    free(text);
    snprintf(path, sizeof path, "%s/torchrun/node-1/metrics.jsonl", tmp_root);
    text = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(text);
    for (p = text; *p; p += strcspn(p, "\n") + 1) {
        ck_assert_msg(line_matches(p, ",\"wall_time\":\"[0-9-]{10}T[0-9:]{8}\\.[0-9]{3}Z\"}$"),
                      "%.*s", (int)strcspn(p, "\n"), p);
        if (strncmp(p, "{\"step\":", 8) == 0) {
            ck_assert_msg(line_matches(p, ",\"version\":\"" PACKAGE_VERSION "\",\"wall_time\""),
                          "%.*s", (int)strcspn(p, "\n"), p);
            steps++;
        }
    }
    ck_assert_int_eq(steps, 2); /* log_every 10 of 20 steps */
    free(text);
}
END_TEST

/* Each node's model.bin and the run's average in <tmp>/<run> hold the n parameters of
 * want (same): bit for bit, or (same 0) not. */
static void
assert_models(const char *run, const float *want, size_t n, int same)
{
    char path[1200];

    for (int r = -1; r < 2; r++) {
        size_t k;
        float *got;

        if (r < 0)
            snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
        else
            snprintf(path, sizeof path, "%s/%s/node-%d/model.bin", tmp_root, run, r);
        got = test_model_params(path, &k);
        ck_assert_uint_eq(k, n);
        ck_assert_msg((memcmp(got, want, n * sizeof *got) == 0) == same,
                      "%s: %s the weights of --init", path, same ? "not" : "still");
        free(got);
    }
}

/* --init of shoal run and shoal node: every node, starting at step 0, takes the weights
 * of an export, and the sync (bmuf, gossip-bmuf) starts from them: a step so small (lr
 * 1e-30) that no weight moves leaves each node's model.bin and the run's average equal
 * to them. Without --init the same runs end elsewhere. */
START_TEST(test_init_run_and_node)
{
    char conf[1100], node_conf[1100], weights[1100], key_set[1200], dir[1200], master[64];
    char *out, *err;
    const char *set_lr = "train.optimizer.lr=1e-30";
    sl_config_t cfg;
    sl_train_opts_t opts;
    sl_train_result_t res;
    sl_export_result_t er;
    size_t n;
    float *want;
    pid_t p0, p1;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "init", 2, ", max_steps: 2");
    tiny_yaml(node_conf, sizeof node_conf, "initnode", 2, ", max_steps: 2");
    /* the weights: 5 steps of one node, exported */
    sl_config_init(&cfg);
    ck_assert(sl_config_load_file(&cfg, conf) == SL_OK);
    snprintf(dir, sizeof dir, "run.dir=%s/init-src", tmp_root);
    ck_assert(sl_config_set(&cfg, dir) == SL_OK);
    ck_assert(sl_config_set(&cfg, "cluster.nodes=1") == SL_OK);
    ck_assert(sl_config_set(&cfg, "train.max_steps=5") == SL_OK);
    sl_log_set_level(SL_LOG_ERROR);
    sl_train_opts_init(&opts);
    opts.quiet = 1;
    ck_assert_msg(sl_train_run(&cfg, &opts, &res) == SL_OK, "%s", sl_err_msg());
    sl_config_fini(&cfg);
    snprintf(weights, sizeof weights, "%s/init.safetensors", tmp_root);
    ck_assert_msg(sl_export_self_contained(res.model, weights, "test", &er) == SL_OK, "%s",
                  sl_err_msg());
    want = test_model_params(res.model, &n);

    /* shoal run -n 2 --init, then the same without it */
    {
        const char *args[] = {"run",   conf,    "-n",   "2",     "--init",
                              weights, "--set", set_lr, "--set", "sync.algorithm=bmuf",
                              NULL};
        ck_assert_int_eq(wait_shoal(start_shoal("initrun", NULL, args), "initrun", &out, &err), 0);
        free(out);
        free(err);
        assert_nothing_left();
        assert_models("init", want, n, 1);
        args[4] = "--no-resume";
        args[5] = "--quiet";
        ck_assert_int_eq(wait_shoal(start_shoal("initrun", NULL, args), "initrun", &out, &err), 0);
        free(out);
        free(err);
        assert_models("init", want, n, 0);
    }

    /* two shoal node processes with --init, then without */
    make_key_file("init", key_set, sizeof key_set);
    for (int with = 1; with >= 0; with--) {
        const char *args[] = {
            "node",   node_conf, "--rank", "1",     "--size", "2",     "--master",
            master,   "--set",   key_set,  "--set", set_lr,   "--set", "sync.algorithm=gossip-bmuf",
            "--init", weights,   NULL};
        snprintf(master, sizeof master, "127.0.0.1:%d", test_free_port());
        if (!with) {
            args[14] = "--no-resume";
            args[15] = "--quiet";
        }
        p1 = start_shoal("initnode1", NULL, args);
        args[3] = "0";
        p0 = start_shoal("initnode0", NULL, args);
        ck_assert_int_eq(wait_shoal(p1, "initnode1", &out, &err), 0);
        free(out);
        free(err);
        ck_assert_int_eq(wait_shoal(p0, "initnode0", &out, &err), 0);
        free(out);
        free(err);
        assert_nothing_left();
        assert_models("initnode", want, n, with);
    }
    free(want);
}
END_TEST

/* shoal node checks rank, size and master before it starts anything: exit 2, one line. */
START_TEST(test_node_usage_errors)
{
    static const struct {
        const char *env[6];
        const char *args[8];
        const char *message;
    } cases[] = {
        {{NULL},
         {"--rank", "0", "--size", "2", NULL},
         "shoal: node: --size 2 disagrees with cluster.nodes 3; start 3 nodes or add --set "
         "cluster.nodes=2 (or auto)\n"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=4", NULL},
         {NULL},
         "shoal: node: SLURM_NTASKS 4 disagrees with cluster.nodes 3; start 3 nodes or add --set "
         "cluster.nodes=4 (or auto)\n"},
        {{"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=3", NULL},
         {NULL},
         "shoal: node: OMPI_COMM_WORLD_RANK '5' is not a rank of 3 nodes (0 to 2)\n"},
        {{NULL},
         {"--size", "3", NULL},
         "shoal: node: no rank: give --rank R --size N, or start shoal node with srun, mpirun or "
         "torchrun (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or RANK) (see shoal node "
         "--help)\n"},
        {{"PMI_RANK=1", "PMI_SIZE=3", NULL},
         {NULL},
         "shoal: node: no master address: give --master HOST:PORT, set SHOAL_MASTER_ADDR and "
         "SHOAL_MASTER_PORT, or cluster.master (srun and torchrun give one) (see shoal node "
         "--help)\n"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=x", NULL},
         {NULL},
         "shoal: node: SLURM_NTASKS 'x' is not a number of nodes (1 to 65536)\n"},
        {{NULL},
         {"--rank", "0", "--set", "cluster.nodes=auto", NULL},
         "shoal: node: cluster.nodes is auto, but no launcher gives the number of nodes: give "
         "--size N, or start shoal node with srun, mpirun or torchrun (see shoal node --help)\n"},
        /* auto takes 2 from WORLD_SIZE (else: disagrees with 3); then the master */
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=gpu01", NULL},
         {"--set", "cluster.nodes=auto", NULL},
         "shoal: node: MASTER_ADDR is set but MASTER_PORT is not; torchrun sets both\n"},
        {{"SLURM_PROCID=1", "SLURM_NTASKS=3", "SLURM_JOB_ID=77", "SLURM_JOB_NODELIST=n[1-",
          NULL},
         {NULL},
         "shoal: node: SLURM_JOB_NODELIST 'n[1-' is not a Slurm host list: '[' at byte 2 is not "
         "closed\n"},
        /* explicit flags win over a launcher's malformed values */
        {{"SLURM_PROCID=x", "SLURM_NTASKS=3", "SLURM_JOB_ID=77", "SLURM_JOB_NODELIST=n[1-",
          NULL},
         {"--rank", "1", "--size", "3", "--master", "node001:x", NULL},
         "shoal: node: --master 'node001:x' is not HOST:PORT (a host name or IPv4 address, port 1 "
         "to 65535)\n"},
        {{"SHOAL_MASTER_ADDR=node001", NULL},
         {"--rank", "1", NULL},
         "shoal: node: SHOAL_MASTER_ADDR is set but SHOAL_MASTER_PORT is not; set both\n"},
        {{"SHOAL_MASTER_ADDR=node001", "SHOAL_MASTER_PORT=x", NULL},
         {"--rank", "1", NULL},
         "shoal: node: SHOAL_MASTER_ADDR:SHOAL_MASTER_PORT 'node001:x' is not HOST:PORT (a "
         "host name or IPv4 address, port 1 to 65535)\n"},
    };
    char conf[1100], *out, *err;

    if (!have_shoal())
        return;
    tiny_yaml(conf, sizeof conf, "usage", 3, "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[12] = {"node", conf};
        int n = 2;
        for (int k = 0; cases[i].args[k]; k++)
            args[n++] = cases[i].args[k];
        args[n] = NULL;
        ck_assert_int_eq(wait_shoal(start_shoal("usage", cases[i].env, args), "usage", &out, &err),
                         2);
        ck_assert_str_eq(err, cases[i].message);
        ck_assert_str_eq(out, "");
        free(out);
        free(err);
    }
    ck_assert_int_eq(
        wait_shoal(start_shoal("usage", NULL, (const char *[]){"run", conf, "-n", "0", NULL}),
                   "usage", &out, &err),
        2);
    ck_assert_str_eq(err, "shoal: run: -n must be a number of nodes, 1 to 1024, not '0' (see "
                          "shoal run --help)\n");
    free(out);
    free(err);
    ck_assert_int_eq(wait_shoal(start_shoal("usage", NULL, (const char *[]){"help", "node", NULL}),
                                "usage", &out, &err),
                     0);
    ck_assert(strncmp(out, "Usage: shoal node CONF.yaml", 27) == 0);
    free(out);
    free(err);
}
END_TEST

/* ------------------------------------------------ restarts and the watchdog */

/* Waits until shoal's stderr (<tmp>/<tag>.err) holds text. Fails the test when shoal
 * exited first (with what it wrote) or after HANG_S seconds: a guard against a hang,
 * not a timing. */
static void
wait_err_text(pid_t pid, const char *tag, const char *text)
{
    char path[1100], *err;
    double t0 = now_s();
    int ws;

    snprintf(path, sizeof path, "%s/%s.err", tmp_root, tag);
    for (;;) {
        int found;

        err = test_read_file(path, NULL);
        found = err && strstr(err, text) != NULL;
        if (found) {
            free(err);
            return;
        }
        if (waitpid(pid, &ws, WNOHANG) == pid)
            ck_abort_msg("shoal %s exited before it said \"%s\": %s", tag, text, err ? err : "");
        free(err);
        if (now_s() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            test_sleep_ms(200);
            each_child(getpid(), kill_it, NULL);
            ck_abort_msg("shoal %s did not say \"%s\" in %d s", tag, text, HANG_S);
        }
        test_sleep_ms(20);
    }
}

/* shoal's node process of rank 0 other than not (0: any), waiting for it to have its
 * name; the hang guard as wait_err_text's. */
static pid_t
node_zero(pid_t shoal, pid_t not )
{
    double t0 = now_s();
    pid_t v;

    while ((v = test_child_named(shoal, "shoal node 0")) == 0 || v == not ) {
        ck_assert_msg(now_s() - t0 < HANG_S, "no new node 0 in %d s", HANG_S);
        test_sleep_ms(10);
    }
    return v;
}

/* The membership records of <tmp>/<run>/events.jsonl: their count, and the lines
 * (malloc'd text, split in place) in line[0 .. max). */
static int
events(const char *run, char **text, char **line, int max)
{
    char path[1200];
    int n = 0;

    snprintf(path, sizeof path, "%s/%s/events.jsonl", tmp_root, run);
    *text = test_read_file(path, NULL);
    ck_assert_msg(*text != NULL, "%s is missing", path);
    for (char *p = strtok(*text, "\n"); p; p = strtok(NULL, "\n")) {
        ck_assert_msg(strncmp(p, "{\"event\":\"membership\",\"time\":", 29) == 0, "%s", p);
        if (n < max)
            line[n] = p;
        n++;
    }
    return n;
}

/* One node with cluster.restart {max: 2, delay_ms: 700}, killed mid-run: shoal run says
 * so in one line, starts it again 0.7 s later (one more line; both recorded in
 * events.jsonl), the new process resumes from the checkpoint and finishes the run;
 * the metrics written before the kill are still there. */
START_TEST(test_run_restart_resumes)
{
    char conf[1100], path[1200], want[256], *out, *err, *text, *ev[4], *p;
    const char *const args[] = {"run",
                                conf,
                                "--quiet",
                                "--set",
                                "cluster.restart={max: 2, "
                                "delay_ms: 700}",
                                NULL};
    long died_at, resumed_at;
    pid_t pid, victim;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "restart", 1,
              ", epochs: 1000, max_steps: 30000, eval_every_epoch: false");
    pid = start_shoal("restart", (const char *[]){"SHOAL_LOG=info", NULL}, args);
    snprintf(path, sizeof path, "%s/restart/metrics.jsonl", tmp_root);
    test_wait_file(path, 20000, pid, HANG_S);
    victim = node_zero(pid, 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_shoal(pid, "restart", &out, &err), 0);
    assert_nothing_left();

    p = strstr(err, "shoal run: node 0 died (signal 9) at step ");
    ck_assert_msg(p != NULL, "stderr: %s", err);
    died_at = strtol(p + strlen("shoal run: node 0 died (signal 9) at step "), &p, 10);
    ck_assert_int_gt(died_at, 0);
    ck_assert_msg(
        strncmp(p, "; restarting it in 0.7 s (restart 1 of 2); 0 of 1 nodes live\n", 61) == 0,
        "stderr: %s", err);
    ck_assert_msg(strstr(err, "shoal run: node 0 restarted (restart 1 of 2); 1 of 1 nodes live\n"),
                  "stderr: %s", err);
    ck_assert_ptr_null(strstr(err, "restart 2 of 2"));
    p = strstr(err, "node 0: train: info: resuming from step ");
    ck_assert_msg(p != NULL, "stderr: %s", err);
    resumed_at = strtol(p + strlen("node 0: train: info: resuming from step "), NULL, 10);
    ck_assert_int_gt(resumed_at, 0); /* from its checkpoint (every 50 steps) */
    ck_assert_int_le(resumed_at, died_at + 10);
    ck_assert_ptr_nonnull(strstr(out, "shoal: done: 1 node, "));
    free(out);
    free(err);

    ck_assert_int_eq(events("restart", &text, ev, 4), 2);
    snprintf(want, sizeof want,
             ",\"rank\":0,\"step\":%ld,\"why\":\"died (signal 9)\",\"live\":0,"
             "\"nodes\":1}",
             died_at);
    ck_assert_msg(strstr(ev[0], want) != NULL, "%s", ev[0]);
    snprintf(want, sizeof want,
             ",\"rank\":0,\"step\":%ld,\"why\":\"restarted (restart 1 of 2)\","
             "\"live\":1,\"nodes\":1}",
             died_at);
    ck_assert_msg(strstr(ev[1], want) != NULL, "%s", ev[1]);
    ck_assert_double_ge(test_json_num(ev[1], "time") - test_json_num(ev[0], "time"), 0.699);
    free(text);

    snprintf(path, sizeof path, "%s/restart/checkpoint.bin", tmp_root);
    ck_assert_int_eq(header_i64(path, 144), 30000);
    snprintf(path, sizeof path, "%s/restart/metrics.jsonl", tmp_root);
    text = test_read_file(path, NULL);
    ck_assert_msg(strncmp(text, "{\"step\":10,", 11) == 0, "%.200s", text);
    free(text);
}
END_TEST

/* cluster.restart.max 1: the second death ends the run as without restarts (exit 1,
 * "node 0 killed by signal 9"), after a line that says so; three records. */
START_TEST(test_run_restarts_used_up)
{
    char conf[1100], path[1200], line[512], *out, *err, *text, *ev[4];
    const char *const args[] = {"run",
                                conf,
                                "--quiet",
                                "--set",
                                "cluster.restart={max: 1, "
                                "delay_ms: 100}",
                                NULL};
    pid_t pid, victim, again;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "used-up", 1,
              ", epochs: 1000, max_steps: 100000000, eval_every_epoch: false");
    pid = start_shoal("used-up", NULL, args);
    snprintf(path, sizeof path, "%s/used-up/metrics.jsonl", tmp_root);
    test_wait_file(path, 2000, pid, HANG_S);
    victim = node_zero(pid, 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    wait_err_text(pid, "used-up",
                  "shoal run: node 0 restarted (restart 1 of 1); 1 of 1 nodes live\n");
    again = node_zero(pid, victim);
    ck_assert_int_eq(kill(again, SIGKILL), 0);
    ck_assert_int_eq(wait_shoal(pid, "used-up", &out, &err), 1);
    assert_nothing_left();
    ck_assert_str_eq(last_line(err, line, sizeof line), "shoal: node 0 killed by signal 9");
    ck_assert_msg(strstr(err, "; the run stops; 0 of 1 nodes live\n") != NULL, "%s", err);
    ck_assert_ptr_null(strstr(err, "restart 2 of"));
    free(out);
    free(err);
    ck_assert_int_eq(events("used-up", &text, ev, 4), 3);
    ck_assert_ptr_nonnull(strstr(ev[2], "\"why\":\"died (signal 9)\",\"live\":0,\"nodes\":1}"));
    free(text);
}
END_TEST

/* The watchdog (2 x a sync timeout of 1 s) kills a node stopped with SIGSTOP, says so
 * and, with a restart left, starts it again: the run finishes. */
START_TEST(test_watchdog_kills_stopped)
{
    char conf[1100], path[1200], *out, *err, *text, *ev[4];
    const char *const args[] = {"run",
                                conf,
                                "--quiet",
                                "--set",
                                "cluster={restart: {max: 1, delay_ms: 200}, timeout_ms: 1000, "
                                "watchdog_timeouts: 2}",
                                NULL};
    pid_t pid, victim;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "watch-stop", 1,
              ", epochs: 1000, max_steps: 30000, eval_every_epoch: false");
    pid = start_shoal("watch-stop", NULL, args);
    snprintf(path, sizeof path, "%s/watch-stop/metrics.jsonl", tmp_root);
    test_wait_file(path, 20000, pid, HANG_S);
    victim = node_zero(pid, 0);
    ck_assert_int_eq(kill(victim, SIGSTOP), 0);
    ck_assert_int_eq(wait_shoal(pid, "watch-stop", &out, &err), 0);
    assert_nothing_left();
    ck_assert_msg(strstr(err, "shoal run: node 0 made no progress for 2 s (stopped by a signal) "
                              "at step ") != NULL,
                  "%s", err);
    ck_assert_msg(strstr(err, ": the watchdog killed it; restarting it in 0.2 s (restart 1 of 1); "
                              "0 of 1 nodes live\n") != NULL,
                  "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(events("watch-stop", &text, ev, 4), 2);
    ck_assert_ptr_nonnull(strstr(ev[0], "\"why\":\"killed by the watchdog\",\"live\":0,"));
    free(text);
    snprintf(path, sizeof path, "%s/watch-stop/checkpoint.bin", tmp_root);
    ck_assert_int_eq(header_i64(path, 144), 30000);
}
END_TEST

/* A node that runs but makes no progress: blocked (as on a hung file system) opening its
 * metrics.jsonl, here a FIFO nobody writes. Without restarts the watchdog kills it and
 * the run stops; with them it is started again, and once the FIFO is gone a restart
 * gets through and finishes. */
START_TEST(test_watchdog_kills_hung)
{
    char conf[1100], path[1200], line[512], *out, *err;
    const char *const args[] = {"run",
                                conf,
                                "--quiet",
                                "--set",
                                "cluster={restart: {max: 2, delay_ms: 300}, timeout_ms: 1000, "
                                "watchdog_timeouts: 2}",
                                NULL};
    pid_t pid;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "watch-hung", 1,
              ", epochs: 1000, max_steps: 2000, eval_every_epoch: false");
    snprintf(path, sizeof path, "%s/watch-hung", tmp_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/watch-hung/metrics.jsonl", tmp_root);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    /* without restarts the run stops, naming the watchdog */
    ck_assert_int_eq(wait_shoal(start_shoal("watch-hung", NULL,
                                            (const char *[]){"run", conf, "--quiet", "--set",
                                                             "cluster={timeout_ms: 1000, "
                                                             "watchdog_timeouts: 2}",
                                                             NULL}),
                                "watch-hung", &out, &err),
                     1);
    assert_nothing_left();
    ck_assert_str_eq(last_line(err, line, sizeof line),
                     "shoal: node 0 killed by the watchdog: no progress for 2 s (no output, no CPU "
                     "time)");
    ck_assert_msg(strstr(err, "shoal run: node 0 made no progress for 2 s (no output, no CPU time) "
                              "at start: the watchdog killed it; the run stops; 0 of 1 nodes "
                              "live\n") != NULL,
                  "%s", err);
    free(out);
    free(err);
    pid = start_shoal("watch-hung", NULL, args);
    wait_err_text(pid, "watch-hung",
                  "shoal run: node 0 made no progress for 2 s (no output, no CPU time) at start: "
                  "the watchdog killed it; restarting it in 0.3 s (restart 1 of 2); 0 of 1 nodes "
                  "live\n");
    ck_assert_int_eq(unlink(path), 0); /* a restart after this gets through */
    ck_assert_int_eq(wait_shoal(pid, "watch-hung", &out, &err), 0);
    assert_nothing_left();
    ck_assert_msg(strstr(err, "shoal run: node 0 restarted (restart 1 of 2); 1 of 1 nodes live\n"),
                  "%s", err);
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/watch-hung/checkpoint.bin", tmp_root);
    ck_assert_int_eq(header_i64(path, 144), 2000);
}
END_TEST

/* A run of another model beside a run's checkpoint is refused with one line; started
 * over (--no-resume) it first sets that run's files aside in previous/ (the checkpoint,
 * and the metrics.jsonl that here is a FIFO no node could write), so it trains, and its
 * restarts (always resuming) could only ever find its own checkpoints. */
START_TEST(test_restart_foreign_checkpoint)
{
    char conf[1100], path[1200], today[512], *out, *err;
    struct stat sb;

    if (!have_shoal())
        return;
    test_become_subreaper();
    tiny_yaml(conf, sizeof conf, "foreign", 1, ", max_steps: 100, eval_every_epoch: false");
    ck_assert_int_eq(wait_shoal(start_shoal("foreign", NULL, (const char *[]){"run", conf, NULL}),
                                "foreign", &out, &err),
                     0);
    free(out);
    free(err);
    /* today's refusal: the other model resuming from that checkpoint */
    ck_assert_int_eq(
        wait_shoal(start_shoal("foreign", NULL,
                               (const char *[]){"run", conf, "--set", "model.embedding=24", NULL}),
                   "foreign", &out, &err),
        1);
    last_line(err, today, sizeof today);
    ck_assert_msg(strstr(today, "checkpoint was written for a different model") != NULL, "%s", err);
    free(out);
    free(err);

    snprintf(path, sizeof path, "%s/foreign/metrics.jsonl", tmp_root);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    ck_assert_int_eq(wait_shoal(start_shoal("foreign", (const char *[]){"SHOAL_LOG=info", NULL},
                                            (const char *[]){"run", conf, "--no-resume", "--set",
                                                             "model.embedding=24", NULL}),
                                "foreign", &out, &err),
                     0);
    assert_nothing_left();
    ck_assert_msg(strstr(err, "starting over: moved the previous run's ") != NULL, "%s", err);
    snprintf(path, sizeof path, "%s/foreign/previous/metrics.jsonl", tmp_root);
    ck_assert(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
    snprintf(path, sizeof path, "%s/foreign/previous/checkpoint.bin", tmp_root);
    ck_assert_int_eq(header_i64(path, 144), 100);
    /* and the run's own checkpoint is of the other model: resuming it is no refusal */
    ck_assert_int_eq(wait_shoal(start_shoal("foreign", NULL,
                                            (const char *[]){"run", conf, "--set",
                                                             "model.embedding=24", NULL}),
                                "foreign", &out, &err),
                     0);
    ck_assert_msg(strstr(err, "different model") == NULL, "%s", err);
    free(out);
    free(err);
}
END_TEST

/* ---------------------------------------------------------------------- main */

static Suite *
launch_run_suite(void)
{
    Suite *s = suite_create("launch_run");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_set_timeout(limits, 4 * HANG_S);
    tcase_add_test(core, test_run_three_nodes);
    tcase_add_test(core, test_run_interrupt_resume);
    tcase_add_test(limits, test_run_node_killed);
    tcase_add_test(limits, test_run_node_fails);
    tcase_add_test(core, test_node_torchrun_env);
    tcase_add_test(core, test_init_run_and_node);
    tcase_add_test(limits, test_node_abort_reaches_peer);
    tcase_add_test(limits, test_node_key_file);
    tcase_add_test(limits, test_node_usage_errors);
    tcase_add_test(limits, test_run_restart_resumes);
    tcase_add_test(limits, test_run_restarts_used_up);
    tcase_add_test(limits, test_watchdog_kills_stopped);
    tcase_add_test(limits, test_watchdog_kills_hung);
    tcase_add_test(limits, test_restart_foreign_checkpoint);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    int rc;

    test_data_dir(data_dir, sizeof data_dir);
    if (!mkdtemp(tmp_root)) {
        perror("check_launch_run: mkdtemp");
        return 1;
    }
    sl_log_set_level(SL_LOG_ERROR); /* the refusals the tests provoke are warnings */
    snprintf(tmp_dir, sizeof tmp_dir, "%s/t", tmp_root);
    if (mkdir(tmp_dir, 0700) != 0) {
        perror("check_launch_run: mkdir");
        test_remove_tree(tmp_root);
        return 1;
    }
    rc = test_main(launch_run_suite());
    test_remove_tree(tmp_root);
    return rc;
}
