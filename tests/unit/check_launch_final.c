/* Unit tests of the run's final model in a gossip run of 3 shoal node processes (the
 * tiny Brown run of test_launch.h): the gatherer sends the average back to the others
 * before it evaluates and writes it, so a gatherer stopped (SIGSTOP) or killed right
 * then still leaves the run its model.bin, bit for bit the average; a run without a
 * fault writes the same bits, the gatherer's evaluated file. The moment comes from the
 * test hook SHOAL_TEST_WRITER_SIGNAL (src/node/sl_train.c), no sleep; no process is
 * left behind. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_status.h"
#include "node/sl_checkpoint.h"

#include "test_launch.h"
#include "test_tool.h"

/* Waits for node pid, which the test hook stops or kills: 1 once it is stopped (it stays
 * so: the caller kills it), 0 once it is gone, killed by sig. After HANG_S seconds it
 * kills the node and fails: a guard against a hang, not a timing. */
static int
wait_writer(pid_t pid, int sig)
{
    double t0 = launch_now();
    int ws;

    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG | WUNTRACED);
        if (r == pid)
            break;
        if (launch_now() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            ck_abort_msg("node 0 did not raise signal %d within %d s", sig, HANG_S);
        }
        test_sleep_ms(20);
    }
    if (WIFSTOPPED(ws)) {
        ck_assert_int_eq(WSTOPSIG(ws), sig);
        return 1;
    }
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == sig, "node 0 ended with status %#x", ws);
    return 0;
}

/* Node 0, killed, could not remove its ipc socket: launch_tmp/shoal-<run id>/rank-0,
 * then the directory, which the others have left empty. */
static void
remove_killed_socket(void)
{
    char path[1400];
    DIR *d = opendir(launch_tmp);
    struct dirent *e;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "shoal-", 6) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s/rank-0", launch_tmp, e->d_name);
        ck_assert_msg(unlink(path) == 0, "%s: %s", path, strerror(errno));
        snprintf(path, sizeof path, "%s/%s", launch_tmp, e->d_name);
        ck_assert_msg(rmdir(path) == 0, "%s: %s", path, strerror(errno));
    }
    closedir(d);
}

/* The run's model.bin of run (3 nodes, 20 steps): it averages 3 nodes, is evaluated
 * (the gatherer's file) or not (a copy the others put there); its parameters (malloc'd,
 * *n of them). */
static float *
run_model(const char *run, int evaluated, size_t *n)
{
    char path[1200];
    sl_ckpt_info_t info;

    snprintf(path, sizeof path, "%s/%s/model.bin", launch_root, run);
    ck_assert_msg(sl_checkpoint_inspect(path, &info) == SL_OK, "%s", sl_err_msg());
    ck_assert(info.has_meta);
    ck_assert_int_eq(info.meta.models_averaged, 3);
    ck_assert_int_eq(info.cur.step, 20);
    ck_assert_msg(isnan(info.meta.valid_loss) != evaluated, "%s: valid loss %g", path,
                  info.meta.valid_loss);
    sl_checkpoint_info_fini(&info);
    return test_model_params(path, n);
}

/* A gossip-bmuf run named run of 3 shoal node processes, 20 steps (a sync every 5), a
 * timeout long enough that no exchange times out on a loaded machine, so the same
 * configuration ends with the same bits: with sig (SIGSTOP, SIGKILL; 0: none) the writer
 * raises it on itself once it has sent the average back (SHOAL_TEST_WRITER_SIGNAL); a
 * stopped one is killed once the others are done. Every node but a signalled writer
 * exits 0; nothing is left. */
static void
run_nodes(const char *run, int sig)
{
    static char port[64], rank_var[3][16], local_var[3][16], hook[64];
    char conf[1100], key[1100], key_set[1200], tag[3][64], *out, *err;
    const char *keygen[] = {"keygen", key, NULL};
    pid_t pid[3];
    int stopped = 0;

    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, run, 3, ", max_steps: 20");
    snprintf(key, sizeof key, "%s/%s.key", launch_root, run);
    snprintf(tag[0], sizeof tag[0], "%s-keygen", run);
    ck_assert_int_eq(launch_wait(launch_start(tag[0], NULL, keygen), tag[0], &out, &err), 0);
    free(out);
    free(err);
    snprintf(key_set, sizeof key_set, "cluster.key_file=%s", key);
    snprintf(port, sizeof port, "MASTER_PORT=%d", test_free_port());
    snprintf(hook, sizeof hook, "SHOAL_TEST_WRITER_SIGNAL=%s", sig == SIGSTOP ? "STOP" : "KILL");
    for (int r = 0; r < 3; r++) {
        snprintf(rank_var[r], sizeof rank_var[r], "RANK=%d", r);
        snprintf(local_var[r], sizeof local_var[r], "LOCAL_RANK=%d", r);
        snprintf(tag[r], sizeof tag[r], "%s%d", run, r);
        pid[r] =
            launch_start(tag[r],
                         (const char *[]){rank_var[r], "WORLD_SIZE=3", local_var[r],
                                          "MASTER_ADDR=127.0.0.1", port, sig ? hook : NULL, NULL},
                         (const char *[]){"node", conf, "--set", "cluster.nodes=auto", "--set",
                                          key_set, "--set", "sync.algorithm=gossip-bmuf", "--set",
                                          "sync.period=5", "--set", "sync.timeout_ms=20000", NULL});
    }
    /* with rank 0 alive it gathers and writes: the signalled one */
    if (sig)
        stopped = wait_writer(pid[0], sig);
    for (int r = sig ? 1 : 0; r < 3; r++) {
        ck_assert_msg(launch_wait(pid[r], tag[r], &out, &err) == 0, "node %d: %s", r, err);
        free(out);
        free(err);
    }
    if (stopped) {
        ck_assert_int_eq(kill(pid[0], SIGKILL), 0);
        ck_assert_int_eq(waitpid(pid[0], NULL, 0), pid[0]);
    }
    if (sig)
        remove_killed_socket();
    launch_assert_nothing_left();
}

/* Without a fault the run's model.bin is the gatherer's evaluated file, bit for bit
 * the mean of the 3 node models in rank order (as the gatherer sums them). With the
 * gatherer stopped or killed right after it sent the average back, the run's model.bin
 * is the copy a sender put there: the same bits. */
START_TEST(test_writer_stopped_leaves_model)
{
    static const int sig[2] = {SIGSTOP, SIGKILL};
    char whole[32], run[32], path[1200];
    float *want, *got, *node[3], inv = 1.0f / 3.0f;
    size_t n, k;

    if (!launch_have_shoal())
        return;
    snprintf(whole, sizeof whole, "whole-%d", _i);
    run_nodes(whole, 0);
    want = run_model(whole, 1, &n);
    for (int r = 0; r < 3; r++) {
        snprintf(path, sizeof path, "%s/%s/node-%d/model.bin", launch_root, whole, r);
        node[r] = test_model_params(path, &k);
        ck_assert_uint_eq(k, n);
    }
    for (size_t j = 0; j < n; j++) {
        float mean = node[0][j];
        mean += node[1][j];
        mean += node[2][j];
        mean *= inv;
        ck_assert_msg(memcmp(&mean, &want[j], sizeof mean) == 0,
                      "parameter %zu: model.bin %.9g, the mean of the nodes' %.9g", j, want[j],
                      mean);
    }
    for (int r = 0; r < 3; r++)
        free(node[r]);

    snprintf(run, sizeof run, "%s", sig[_i] == SIGSTOP ? "stopped" : "killed");
    run_nodes(run, sig[_i]);
    got = run_model(run, 0, &k);
    ck_assert_uint_eq(k, n);
    ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0,
                  "%s: model.bin is not the average of the run without a fault", run);
    free(got);
    free(want);
}
END_TEST

static Suite *
launch_final_suite(void)
{
    Suite *s = suite_create("launch_final");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_add_loop_test(core, test_writer_stopped_leaves_model, 0, 2);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_final_suite(), "check-launch-final");
}
