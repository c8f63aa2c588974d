/* A run of two `shoal node` processes started by Open MPI's mpirun, as on a cluster:
 * rank and size from OMPI_COMM_WORLD_*, cluster.nodes auto, the rendezvous from
 * SHOAL_MASTER_ADDR/PORT passed on with -x (mpirun names no master itself). Both nodes
 * train and finish, rank 0 logs the map and adds up the run's tokens/s. Exits 77 (skip)
 * when mpirun is not on PATH, or not Open MPI's (its options are): MPI is not a
 * dependency of shoal. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "test_tool.h"

enum { HANG_S = 120 }; /* a guard that kills mpirun and fails, never a timing */

static char tmp_root[] = "/tmp/shoal-check-mpirun-XXXXXX";
static char data_dir[1024], shoal_bin[1100], mpirun_bin[1100];

/* The first executable "mpirun" on PATH into mpirun_bin; NULL when there is one and it
 * is Open MPI's, else why the test is skipped. */
static const char *
find_mpirun(void)
{
    const char *path = getenv("PATH");
    char dirs[4096], cmd[1200], version[256] = "", *save = NULL;
    FILE *p;

    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(mpirun_bin, sizeof mpirun_bin, "%s/mpirun", *d ? d : ".");
        if (access(mpirun_bin, X_OK) != 0)
            continue;
        snprintf(cmd, sizeof cmd, "'%s' --version 2>&1", mpirun_bin);
        if ((p = popen(cmd, "r")) != NULL) {
            if (!fgets(version, sizeof version, p))
                version[0] = '\0';
            pclose(p);
        }
        return strstr(version, "Open MPI") ? NULL : "mpirun is not Open MPI's";
    }
    return "no mpirun on PATH";
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs mpirun with args in its own process group, stdout and stderr into files under
 * tmp_root; returns its exit status. After HANG_S it kills the group and fails. */
static int
run_mpirun(const char *const *args, char **out, char **err)
{
    char out_path[1100], err_path[1100];
    const char *argv[40];
    int n = 0, ws;
    double t0 = now_s();
    pid_t pid;

    snprintf(out_path, sizeof out_path, "%s/mpirun.out", tmp_root);
    snprintf(err_path, sizeof err_path, "%s/mpirun.err", tmp_root);
    argv[n++] = mpirun_bin;
    while (*args && n < 39)
        argv[n++] = *args++;
    argv[n] = NULL;
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr))
            _exit(99);
        execv(mpirun_bin, (char *const *)argv);
        _exit(98);
    }
    setpgid(pid, pid);
    while (waitpid(pid, &ws, WNOHANG) != pid) {
        if (now_s() - t0 > HANG_S) {
            kill(-pid, SIGKILL);
            waitpid(pid, &ws, 0);
            ck_abort_msg("mpirun hung: not done after %d s", HANG_S);
        }
        test_sleep_ms(50);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) /* orphans adopted as a subreaper */
        ;
    *out = test_read_file(out_path, NULL);
    *err = test_read_file(err_path, NULL);
    ck_assert(*out && *err);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

START_TEST(test_mpirun_two_nodes)
{
    char conf[1100], key[1100], yaml[2048], master_port[64], path[1200], line[256];
    char *out, *err, *summary, *node_summary;
    double rate0, rate1;
    int rc;
    const char *args[] = {"--oversubscribe",
                          "--bind-to",
                          "none",
                          "-np",
                          "2",
                          "-x",
                          "SHOAL_MASTER_ADDR=127.0.0.1",
                          "-x",
                          master_port,
                          "-x",
                          "SHOAL_LOG=info",
                          "-x",
                          "SHOAL_LOG_FORMAT=terse",
                          "-x",
                          "TMPDIR",
                          shoal_bin,
                          "node",
                          conf,
                          NULL};

    test_become_subreaper();
    snprintf(key, sizeof key, "%s/run.key", tmp_root);
    ck_assert_int_eq(test_tool_run(shoal_bin, yaml, sizeof yaml, line, sizeof line, NULL,
                                   (const char *[]){"keygen", key, NULL}),
                     0);
    snprintf(conf, sizeof conf, "%s/mpi.yaml", tmp_root);
    snprintf(yaml, sizeof yaml,
             "run: {name: mpi, dir: %s/mpi, log_every: 10}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, max_steps: 40, optimizer: {type: adam, lr: 0.01}}\n"
             "cluster: {nodes: auto, key_file: %s, rendezvous_timeout_ms: 60000}\n"
             "sync: {algorithm: ma, period: 10}\n",
             tmp_root, data_dir, data_dir, tmp_root, key);
    test_write_file(conf, yaml, strlen(yaml));
    snprintf(master_port, sizeof master_port, "SHOAL_MASTER_PORT=%d", test_free_port());
    setenv("TMPDIR", tmp_root, 1);
    if (geteuid() == 0) { /* Open MPI refuses root unless told twice */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    rc = run_mpirun(args, &out, &err);
    ck_assert_msg(rc == 0, "mpirun exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    ck_assert_msg(strstr(out, "shoal: node 0: done: ") && strstr(out, "shoal: node 1: done: "),
                  "%s", out);
    ck_assert_msg(strstr(out, "shoal: node 0: run: 2 nodes, ") != NULL, "%s", out);
    /* rank 0's map: both ranks on this host, on the CPU, sharing memory */
    snprintf(line, sizeof line, "shoal node 0: node: info: map: 2 nodes on 1 host\n");
    ck_assert_msg(strstr(err, line) != NULL, "%s", err);
    for (int r = 0; r < 2; r++) {
        char *p;
        snprintf(line, sizeof line, "shoal node 0: node: info: map: rank %d: host %s, pid ", r,
                 sl_log_host());
        p = strstr(err, line);
        ck_assert_msg(p != NULL, "no '%s' in %s", line, err);
        ck_assert_msg(strncmp(strchr(p + strlen(line), ','), ", device cpu, lanes on\n", 23) == 0,
                      "%s", p);
    }
    /* the run-wide tokens/s is the sum of the two nodes' (fp32 on the way) */
    snprintf(path, sizeof path, "%s/mpi/summary.json", tmp_root);
    summary = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(summary);
    ck_assert_int_eq((int)test_json_num(summary, "run_nodes"), 2);
    ck_assert_int_eq((int)test_json_num(summary, "run_nodes_reported"), 2);
    snprintf(path, sizeof path, "%s/mpi/node-0/summary.json", tmp_root);
    node_summary = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(node_summary);
    rate0 = test_json_num(node_summary, "tokens_per_s");
    ck_assert_int_eq((int)test_json_num(node_summary, "nodes"), 2);
    free(node_summary);
    snprintf(path, sizeof path, "%s/mpi/node-1/summary.json", tmp_root);
    node_summary = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(node_summary);
    rate1 = test_json_num(node_summary, "tokens_per_s");
    ck_assert_int_eq((int)test_json_num(node_summary, "rank"), 1);
    free(node_summary);
    ck_assert(rate0 > 0 && rate1 > 0);
    ck_assert_double_eq_tol(test_json_num(summary, "run_tokens_per_s"), rate0 + rate1,
                            1e-5 * (rate0 + rate1) + 1);
    free(summary);
    free(out);
    free(err);
}
END_TEST

static Suite *
mpirun_suite(void)
{
    Suite *s = suite_create("mpirun");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 2 * HANG_S);
    tcase_add_test(core, test_mpirun_two_nodes);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    const char *skip = find_mpirun();

    if (skip) {
        printf("check_mpirun: SKIP: %s (Open MPI is not needed to build shoal)\n", skip);
        return 77;
    }
    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return 77;
    test_data_dir(data_dir, sizeof data_dir);
    return test_main_in_tmp(mpirun_suite(), tmp_root, "check_mpirun");
}
