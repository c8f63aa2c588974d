/* Unit tests of the run's final model in a gossip run of 3 shoal node processes (the
 * tiny Brown run of test_launch.h): the gatherer sends the average back to the others
 * before it evaluates and writes it, so a gatherer stopped (SIGSTOP) or killed right
 * then still leaves the run its model.bin, bit for bit the average; a run without a
 * fault writes the same bits, the gatherer's evaluated file. The gatherer puts the
 * average there itself, not evaluated, before it evaluates anything: killed then, alone
 * at the end (the other node killed), it still leaves the run its model. A node that ends late,
 * rank 0 or another, is waited for: one writer, the average of all three. The moments
 * come from the test hooks SHOAL_TEST_WRITER_SIGNAL and SHOAL_TEST_LATE_END
 * (src/node/sl_train.c), no sleep; no process is left behind. The final evaluation is
 * that of the run's model, whether node 0's own evaluation stands for it or not. */
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
#include "config/sl_config.h"
#include "node/sl_checkpoint.h"
#include "node/sl_train.h"

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

/* The nodes killed, rank 0 and those of killed (ranks after 0, 0-terminated; may be
 * NULL), could not remove their ipc sockets: launch_tmp/shoal-<run id>/rank-R, then the
 * directory, which the others have left empty. */
static void
remove_killed_sockets(const int *killed)
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
        for (const int *r = killed; r && *r; r++) {
            snprintf(path, sizeof path, "%s/%s/rank-%d", launch_tmp, e->d_name, *r);
            ck_assert_msg(unlink(path) == 0, "%s: %s", path, strerror(errno));
        }
        snprintf(path, sizeof path, "%s/%s", launch_tmp, e->d_name);
        ck_assert_msg(rmdir(path) == 0, "%s: %s", path, strerror(errno));
    }
    closedir(d);
}

/* The run's model.bin of run (3 nodes, 20 steps): it averages 3 nodes, is evaluated
 * (the gatherer's file) or not (a copy put there first); put there by node 0, the
 * gatherer (by0 1), or by another node (0); its parameters (malloc'd, *n of them). */
static float *
run_model(const char *run, int evaluated, int by0, size_t *n)
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
    ck_assert_msg((info.id.rank == 0) == by0, "%s: put there by node %d", path, info.id.rank);
    sl_checkpoint_info_fini(&info);
    return test_model_params(path, n);
}

/* The signal SHOAL_TEST_WRITER_SIGNAL=sig makes the writer raise. */
static int
hook_signal(const char *sig)
{
    return strncmp(sig, "STOP", 4) == 0 ? SIGSTOP : SIGKILL;
}

/* Starts the gossip-bmuf run named run of nodes (at most 3) shoal node processes (pid
 * and tag: nodes entries), a sync every 5 steps, train_extra added to its train keys
 * and sync.timeout_ms timeout_ms, after its key: with sig, every node has
 * SHOAL_TEST_WRITER_SIGNAL=sig; node late (-1: none) SHOAL_TEST_LATE_END=LATE_SIGNS;
 * with info, every node logs at info level. */
static void
start_nodes(const char *run, int nodes, const char *train_extra, const char *sig, int late,
            int timeout_ms, int info, pid_t *pid, char (*tag)[64])
{
    static char port[64], rank_var[3][16], local_var[3][16], world[32], hook[64], late_hook[64];
    static char timeout_set[64];
    char conf[1100], key[1100], key_set[1200], *out, *err;
    const char *keygen[] = {"keygen", key, NULL};

    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, run, nodes, train_extra);
    snprintf(key, sizeof key, "%s/%s.key", launch_root, run);
    snprintf(tag[0], sizeof tag[0], "%s-keygen", run);
    ck_assert_int_eq(launch_wait(launch_start(tag[0], NULL, keygen), tag[0], &out, &err), 0);
    free(out);
    free(err);
    snprintf(key_set, sizeof key_set, "cluster.key_file=%s", key);
    snprintf(port, sizeof port, "MASTER_PORT=%d", test_free_port());
    snprintf(world, sizeof world, "WORLD_SIZE=%d", nodes);
    snprintf(hook, sizeof hook, "SHOAL_TEST_WRITER_SIGNAL=%s", sig ? sig : "");
    snprintf(late_hook, sizeof late_hook, "SHOAL_TEST_LATE_END=%d", LATE_SIGNS);
    snprintf(timeout_set, sizeof timeout_set, "sync.timeout_ms=%d", timeout_ms);
    for (int r = 0; r < nodes; r++) {
        const char *env[8] = {rank_var[r], world, local_var[r], "MASTER_ADDR=127.0.0.1", port};
        int ne = 5;

        snprintf(rank_var[r], sizeof rank_var[r], "RANK=%d", r);
        snprintf(local_var[r], sizeof local_var[r], "LOCAL_RANK=%d", r);
        snprintf(tag[r], sizeof tag[r], "%s%d", run, r);
        if (sig)
            env[ne++] = hook;
        if (r == late)
            env[ne++] = late_hook;
        if (info)
            env[ne++] = "SHOAL_LOG=info";
        env[ne] = NULL;
        pid[r] =
            launch_start(tag[r], env,
                         (const char *[]){"node", conf, "--set", "cluster.nodes=auto", "--set",
                                          key_set, "--set", "sync.algorithm=gossip-bmuf", "--set",
                                          "sync.period=5", "--set", timeout_set, NULL});
    }
}

/* A gossip-bmuf run named run of 3 shoal node processes, 20 steps (a sync every 5), a
 * timeout long enough that no exchange times out on a loaded machine, so the same
 * configuration ends with the same bits: with sig (STOP, KILL: once it has sent the
 * average back; KILL_EVAL: once it has put it at model.bin, as it starts evaluating;
 * NULL: none) the writer raises SIGSTOP or SIGKILL on itself (SHOAL_TEST_WRITER_SIGNAL); a
 * stopped one is killed once the others are done. With late >= 0 (and no sig) node late
 * ends late instead (SHOAL_TEST_LATE_END=LATE_SIGNS), under sync.timeout_ms LATE_MS;
 * errs (3, or NULL) then receives each node's log (malloc'd; the writer's line at info
 * level). Every node but a signalled writer exits 0; nothing is left. */
static void
run_nodes_late(const char *run, const char *sig, int late, char **errs)
{
    char tag[3][64], *out, *err;
    pid_t pid[3];
    int stopped = 0;

    start_nodes(run, 3, ", max_steps: 20", sig, late, late >= 0 ? LATE_MS : 20000, late >= 0, pid,
                tag);
    /* with rank 0 alive it gathers and writes: the signalled one */
    if (sig)
        stopped = wait_writer(pid[0], hook_signal(sig));
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
        remove_killed_sockets(NULL);
    launch_assert_nothing_left();
}

static void
run_nodes(const char *run, const char *sig)
{
    run_nodes_late(run, sig, -1, NULL);
}

/* model, the n floats of run's model.bin, is bit for bit the mean of its 3 node models in
 * rank order (as the gatherer sums them); each of those says it is one node's own
 * model (models_averaged 0 or 1, not an average), evaluated. */
static void
assert_mean_of_nodes(const char *run, const float *model, size_t n)
{
    char path[1200];
    float *node[3], inv = 1.0f / 3.0f;
    sl_ckpt_info_t info;
    size_t k;

    for (int r = 0; r < 3; r++) {
        snprintf(path, sizeof path, "%s/%s/node-%d/model.bin", launch_root, run, r);
        ck_assert_msg(sl_checkpoint_inspect(path, &info) == SL_OK, "%s", sl_err_msg());
        ck_assert_msg(
            info.has_meta && info.meta.models_averaged < 2 && !isnan(info.meta.valid_loss),
            "%s: %d models, valid loss %g", path, info.meta.models_averaged, info.meta.valid_loss);
        sl_checkpoint_info_fini(&info);
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
 * is the copy a sender put there: the same bits. Killed as it starts evaluating, it is
 * the gatherer's own copy, put there first: the same bits again. */
START_TEST(test_writer_stopped_leaves_model)
{
    static const char *const sig[3] = {"STOP", "KILL", "KILL_EVAL"};
    char whole[32], run[32];
    float *want, *got;
    size_t n, k;

    if (!launch_have_shoal())
        return;
    snprintf(whole, sizeof whole, "whole-%d", _i);
    run_nodes(whole, NULL);
    want = run_model(whole, 1, 1, &n);
    assert_mean_of_nodes(whole, want, n);

    snprintf(run, sizeof run, "writer-%s", sig[_i]);
    run_nodes(run, sig[_i]);
    got = run_model(run, 0, _i == 2, &k);
    ck_assert_uint_eq(k, n);
    ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0,
                  "%s: model.bin is not the average of the run without a fault", run);
    free(got);
    free(want);
}
END_TEST

/* Waits until node pid's log (<root>/<tag>.err) says text; the hang guard as
 * wait_writer's. */
static void
wait_log(pid_t pid, const char *tag, const char *text)
{
    char path[1100], *err;
    double t0 = launch_now();
    int found = 0;

    snprintf(path, sizeof path, "%s/%s.err", launch_root, tag);
    while (!found) {
        err = test_read_file(path, NULL);
        found = err && strstr(err, text) != NULL;
        free(err);
        if (!found && launch_now() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            ck_abort_msg("%s did not say \"%s\" within %d s", tag, text, HANG_S);
        }
        if (!found)
            test_sleep_ms(20);
    }
}

/* A lone writer: node 1 of a gossip-bmuf run of 2 is killed once both train (node 0
 * stopped meanwhile, so that it cannot be at the end yet); node 0 trains on alone,
 * gathers the average of 1 node, its own model, which nobody else holds, and is killed
 * as it starts evaluating it (SHOAL_TEST_WRITER_SIGNAL=KILL_EVAL). The run's model.bin
 * is there all the same: put there by node 0, the average of 1 node at the last step,
 * not evaluated, bit for bit node 0's parameters of its last checkpoint (4 epochs: the
 * nodes are far from the end when the test stops node 0). */
START_TEST(test_lone_writer_killed_evaluating)
{
    static const int killed[] = {1, 0};
    const char *run = "lone";
    char tag[2][64], path[1200];
    sl_ckpt_info_t info;
    float *got, *want;
    size_t n, k;
    pid_t pid[2];
    long steps;
    int ws;

    if (!launch_have_shoal())
        return;
    start_nodes(run, 2, ", epochs: 4, eval_every_epoch: false", "KILL_EVAL", -1, 2000, 1, pid, tag);
    for (int r = 0; r < 2; r++)
        wait_log(pid[r], tag[r], " parameters, vocab ");
    ck_assert_int_eq(kill(pid[0], SIGSTOP), 0);
    ck_assert_int_eq(waitpid(pid[0], &ws, WUNTRACED), pid[0]);
    ck_assert(WIFSTOPPED(ws));
    ck_assert_int_eq(kill(pid[1], SIGKILL), 0);
    ck_assert_int_eq(waitpid(pid[1], &ws, 0), pid[1]);
    ck_assert_int_eq(kill(pid[0], SIGCONT), 0);
    ck_assert_int_eq(wait_writer(pid[0], SIGKILL), 0);
    remove_killed_sockets(killed);
    launch_assert_nothing_left();

    snprintf(path, sizeof path, "%s/%s/node-0/checkpoint.bin", launch_root, run);
    ck_assert_msg(sl_checkpoint_inspect(path, &info) == SL_OK, "%s", sl_err_msg());
    steps = info.cur.step; /* the last: 4 epochs of 312 steps */
    ck_assert_int_eq(steps, 4 * 312);
    sl_checkpoint_info_fini(&info);
    want = test_model_params(path, &n);

    snprintf(path, sizeof path, "%s/%s/model.bin", launch_root, run);
    ck_assert_msg(sl_checkpoint_inspect(path, &info) == SL_OK, "%s", sl_err_msg());
    ck_assert(info.has_meta);
    ck_assert_int_eq(info.meta.models_averaged, 1);
    ck_assert_int_eq(info.id.rank, 0);
    ck_assert_int_eq(info.cur.step, steps);
    ck_assert_msg(isnan(info.meta.valid_loss) && isnan(info.meta.test_loss) &&
                      info.meta.valid_step == -1,
                  "%s: valid %g at step %ld, test %g", path, info.meta.valid_loss,
                  info.meta.valid_step, info.meta.test_loss);
    sl_checkpoint_info_fini(&info);
    got = test_model_params(path, &k);
    ck_assert_uint_eq(k, n);
    ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0,
                  "model.bin is not node 0's parameters of step %ld", steps);
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
    run_nodes_late(run, NULL, _i == 0 ? 0 : 2, errs);
    for (int r = 0; r < 3; r++) {
        int w = count_lines(errs[r], "train: info: final model: ");

        writers += w;
        ck_assert_msg(w == (r == 0), "node %d wrote the run's model %d times:\n%s", r, w, errs[r]);
        ck_assert_msg(count_lines(errs[r], "without this node's") == 0, "node %d left out:\n%s", r,
                      errs[r]);
    }
    ck_assert_int_eq(writers, 1);
    got = run_model(run, 1, 1, &n);
    assert_mean_of_nodes(run, got, n);
    for (int r = 0; r < 3; r++)
        free(errs[r]);
    free(got);
}
END_TEST

/* The run's final evaluation is its model's: model.bin's valid loss is what evaluating
 * that file gives, when the average is node 0's model bit for bit (allreduce on 2
 * nodes: node 0's own evaluation stands for it, loop 0) and when it is not
 * (gossip-bmuf on 3, loop 1: node 0's own loss is another). */
START_TEST(test_final_eval_is_the_models)
{
    static const char *const algo[2] = {"sync.algorithm=allreduce", "sync.algorithm=gossip-bmuf"};
    const int nodes = _i == 0 ? 2 : 3;
    char run[32], conf[1100], path[1200], n[8], *out, *err;
    double final, own;
    sl_ckpt_info_t info;
    sl_eval_result_t ev;
    sl_config_t cfg;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    snprintf(run, sizeof run, "final-%d", _i);
    snprintf(n, sizeof n, "%d", nodes);
    launch_tiny_yaml(conf, sizeof conf, run, nodes, ", max_steps: 20");
    ck_assert_int_eq(
        launch_wait(launch_start(run, NULL,
                                 (const char *[]){"run", conf, "-n", n, "--set", algo[_i], NULL}),
                    run, &out, &err),
        0);
    free(out);
    free(err);
    launch_assert_nothing_left();
    for (int r = -1; r < 1; r++) { /* the run's model, then node 0's */
        if (r < 0)
            snprintf(path, sizeof path, "%s/%s/model.bin", launch_root, run);
        else
            snprintf(path, sizeof path, "%s/%s/node-0/model.bin", launch_root, run);
        ck_assert_msg(sl_checkpoint_inspect(path, &info) == SL_OK, "%s", sl_err_msg());
        ck_assert(info.has_meta &&
                  (r < 0 ? info.meta.models_averaged == nodes : info.meta.models_averaged < 2));
        *(r < 0 ? &final : &own) = info.meta.valid_loss;
        sl_checkpoint_info_fini(&info);
    }
    sl_config_init(&cfg);
    ck_assert(sl_config_load_file(&cfg, conf) == SL_OK);
    snprintf(path, sizeof path, "%s/%s/model.bin", launch_root, run);
    ck_assert_msg(sl_eval_run(&cfg, path, "valid", &ev) == SL_OK, "%s", sl_err_msg());
    sl_config_fini(&cfg);
    ck_assert_msg(fabs(ev.loss - final) <= 1e-9 * ev.loss, "%s: valid loss %.9g, evaluated %.9g",
                  path, final, ev.loss);
    ck_assert_msg((own == final) == (_i == 0), "node 0's valid loss %.9g, the run's %.9g", own,
                  final);
}
END_TEST

static Suite *
launch_final_suite(void)
{
    Suite *s = suite_create("launch_final");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 4 * HANG_S);
    tcase_add_loop_test(core, test_writer_stopped_leaves_model, 0, 3);
    tcase_add_loop_test(core, test_late_end_one_writer, 0, 2);
    tcase_add_test(core, test_lone_writer_killed_evaluating);
    tcase_add_loop_test(core, test_final_eval_is_the_models, 0, 2);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_final_suite(), "check-launch-final");
}
