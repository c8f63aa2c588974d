/* Unit tests of the run's final model in a gossip run of 3 shoal node processes (the
 * tiny Brown run of test_launch.h): the gatherer sends the average back to the others
 * before it evaluates and writes it, so a gatherer stopped (SIGSTOP) or killed right
 * then still leaves the run its model.bin, bit for bit the average; a run without a
 * fault writes the same bits, the gatherer's evaluated file. A node that ends late,
 * rank 0 or another, is waited for: one writer, the average of all three. The moments
 * come from the test hooks SHOAL_TEST_WRITER_SIGNAL and SHOAL_TEST_LATE_END
 * (src/node/sl_train.c), no sleep; no process is left behind. */
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

/* test_late_end_one_writer: the late node takes LATE_SIGNS signs of the two others,
 * which send one every LATE_MS / 4 once at the end: it ends about 1.5 LATE_MS after
 * them, later than one sync timeout. */
enum { LATE_SIGNS = 14, LATE_MS = 3000 };

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
 * stopped one is killed once the others are done. With late >= 0 (and sig 0) node late
 * ends late instead (SHOAL_TEST_LATE_END=LATE_SIGNS), under sync.timeout_ms LATE_MS;
 * errs (3, or NULL) then receives each node's log (malloc'd). Every node but a
 * signalled writer exits 0; nothing is left. */
static void
run_nodes_late(const char *run, int sig, int late, char **errs)
{
    static char port[64], rank_var[3][16], local_var[3][16], hook[64], late_hook[64];
    static char timeout_set[64];
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
    snprintf(late_hook, sizeof late_hook, "SHOAL_TEST_LATE_END=%d", LATE_SIGNS);
    snprintf(timeout_set, sizeof timeout_set, "sync.timeout_ms=%d", late >= 0 ? LATE_MS : 20000);
    for (int r = 0; r < 3; r++) {
        const char *env[8] = {rank_var[r], "WORLD_SIZE=3", local_var[r], "MASTER_ADDR=127.0.0.1",
                              port};
        int ne = 5;

        snprintf(rank_var[r], sizeof rank_var[r], "RANK=%d", r);
        snprintf(local_var[r], sizeof local_var[r], "LOCAL_RANK=%d", r);
        snprintf(tag[r], sizeof tag[r], "%s%d", run, r);
        if (sig)
            env[ne++] = hook;
        if (r == late)
            env[ne++] = late_hook;
        if (late >= 0)
            env[ne++] = "SHOAL_LOG=info"; /* for the writer's line */
        env[ne] = NULL;
        pid[r] =
            launch_start(tag[r], env,
                         (const char *[]){"node", conf, "--set", "cluster.nodes=auto", "--set",
                                          key_set, "--set", "sync.algorithm=gossip-bmuf", "--set",
                                          "sync.period=5", "--set", timeout_set, NULL});
    }
    /* with rank 0 alive it gathers and writes: the signalled one */
    if (sig)
        stopped = wait_writer(pid[0], sig);
    for (int r = sig ? 1 : 0; r < 3; r++) {
        ck_assert_msg(launch_wait(pid[r], tag[r], &out, &err) == 0, "node %d: %s", r, err);
        free(out);
        if (errs)
            errs[r] = err;
        else
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

static void
run_nodes(const char *run, int sig)
{
    run_nodes_late(run, sig, -1, NULL);
}

/* model, the n floats of run's model.bin, is bit for bit the mean of its 3 node models in
 * rank order (as the gatherer sums them). */
static void
assert_mean_of_nodes(const char *run, const float *model, size_t n)
{
    char path[1200];
    float *node[3], inv = 1.0f / 3.0f;
    size_t k;

    for (int r = 0; r < 3; r++) {
        snprintf(path, sizeof path, "%s/%s/node-%d/model.bin", launch_root, run, r);
        node[r] = test_model_params(path, &k);
        ck_assert_uint_eq(k, n);
    }
    for (size_t j = 0; j < n; j++) {
        float mean = node[0][j];
        mean += node[1][j];
        mean += node[2][j];
        mean *= inv;
        ck_assert_msg(memcmp(&mean, &model[j], sizeof mean) == 0,
                      "parameter %zu: model.bin %.9g, the mean of the nodes' %.9g", j, model[j],
                      mean);
    }
    for (int r = 0; r < 3; r++)
        free(node[r]);
}

/* Without a fault the run's model.bin is the gatherer's evaluated file, bit for bit
 * the mean of the 3 node models in rank order (as the gatherer sums them). With the
 * gatherer stopped or killed right after it sent the average back, the run's model.bin
 * is the copy a sender put there: the same bits. */
START_TEST(test_writer_stopped_leaves_model)
{
    static const int sig[2] = {SIGSTOP, SIGKILL};
    char whole[32], run[32];
    float *want, *got;
    size_t n, k;

    if (!launch_have_shoal())
        return;
    snprintf(whole, sizeof whole, "whole-%d", _i);
    run_nodes(whole, 0);
    want = run_model(whole, 1, &n);
    assert_mean_of_nodes(whole, want, n);

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

/* How many lines of text contain needle. */
static int
count_lines(const char *text, const char *needle)
{
    int n = 0;

    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* A node that ends late but trains on (SHOAL_TEST_LATE_END), rank 0 (case 0: it had
 * come back, say) or node 2 (case 1), is waited for: exactly one node writes the run's
 * model.bin, rank 0, and it is bit for bit the mean of the three node models in rank
 * order; no node is left out. */
START_TEST(test_late_end_one_writer)
{
    char run[32], *errs[3] = {NULL, NULL, NULL};
    float *got;
    size_t n;
    int writers = 0;

    if (!launch_have_shoal())
        return;
    snprintf(run, sizeof run, "late-%d", _i);
    run_nodes_late(run, 0, _i == 0 ? 0 : 2, errs);
    for (int r = 0; r < 3; r++) {
        int w = count_lines(errs[r], "train: info: final model: ");

        writers += w;
        ck_assert_msg(w == (r == 0), "node %d wrote the run's model %d times:\n%s", r, w, errs[r]);
        ck_assert_msg(count_lines(errs[r], "without this node's") == 0, "node %d left out:\n%s", r,
                      errs[r]);
    }
    ck_assert_int_eq(writers, 1);
    got = run_model(run, 1, &n);
    assert_mean_of_nodes(run, got, n);
    for (int r = 0; r < 3; r++)
        free(errs[r]);
    free(got);
}
END_TEST

static Suite *
launch_final_suite(void)
{
    Suite *s = suite_create("launch_final");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_add_loop_test(core, test_writer_stopped_leaves_model, 0, 2);
    tcase_add_loop_test(core, test_late_end_one_writer, 0, 2);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_final_suite(), "check-launch-final");
}
