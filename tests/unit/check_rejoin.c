/* A node that comes back (src/node/sl_rejoin.h): three `shoal node` processes of a
 * gossip-bmuf run under CURVE, node 2 SIGKILLed mid-run and started again with the same
 * command. The new process is admitted by rank 0's rendezvous, takes a live node's
 * parameters (the digests the donor and it log are equal) and sync state, starts a
 * round or two ahead of the others, is counted alive again by both others, none of
 * which waits for it between its hello and its first answer, and the run's final model
 * is the average of all three nodes. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-rejoin-XXXXXX";
static char data_dir[1024];
static char shoal_bin[1024];

enum { HANG_S = 120 }; /* a guard against a hang, not a timing the test measures */

/* <tmp>/<run>.yaml: 3 nodes, a small model that trains for some 10 s, 1 s sync waits. */
static void
write_conf(char *path, size_t size, const char *run, const char *algorithm)
{
    char yaml[2048];

    snprintf(path, size, "%s/%s.yaml", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 100}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 32, layers: [{lstm: 64}]}\n"
             "train: {batch: 8, bptt: 10, epochs: 40, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "cluster: {nodes: 3, rendezvous_timeout_ms: 20000, timeout_ms: 5000,\n"
             "          key_file: %s/%s.key}\n"
             "sync: {algorithm: %s, period: 8, timeout_ms: 1000}\n",
             run, tmp_root, run, data_dir, data_dir, tmp_root, tmp_root, run, algorithm);
    test_write_file(path, yaml, strlen(yaml));
}

/* `shoal node CONF --rank R --size 3 --master M`, output into <tmp>/<tag>.log. */
static pid_t
start_node(const char *tag, const char *conf, int rank, const char *master)
{
    char log[1100], r[8];
    pid_t pid;

    snprintf(log, sizeof log, "%s/%s.log", tmp_root, tag);
    snprintf(r, sizeof r, "%d", rank);
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0)
            _exit(99);
        setenv("SHOAL_LOG", "info", 1);
        setenv("TMPDIR", tmp_root, 1);
        execl(shoal_bin, shoal_bin, "node", conf, "--rank", r, "--size", "3", "--master", master,
              "--quiet", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for pid (killing it and failing after HANG_S) and returns its exit status. */
static int
wait_node(pid_t pid)
{
    for (int i = 0; i < HANG_S * 10; i++) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid)
            return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_abort_msg("shoal node %d hung", (int)pid);
    return -1;
}

static char *
node_log(const char *tag)
{
    char path[1100];
    char *text;

    snprintf(path, sizeof path, "%s/%s.log", tmp_root, tag);
    ck_assert_ptr_nonnull(text = test_read_file(path, NULL));
    return text;
}

/* The hex digest after "what (parameters " in text. */
static unsigned long long
digest_after(const char *text, const char *what)
{
    const char *p = strstr(text, what);
    unsigned long long d = 0;

    ck_assert_msg(p != NULL, "no '%s' in:\n%s", what, text);
    p = strstr(p, "(parameters ");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, "(parameters %llx", &d), 1);
    return d;
}

static void
make_key(const char *run)
{
    char key[1100], out[256], err[512];

    snprintf(key, sizeof key, "%s/%s.key", tmp_root, run);
    ck_assert_int_eq(test_tool_run(shoal_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *[]){"keygen", key, NULL}),
                     0);
}

/* Waits until node rank's log of run says what (failing when pid exits first or
 * after HANG_S). */
static void
wait_log(const char *run, int rank, const char *what, pid_t pid)
{
    char tag[64];

    snprintf(tag, sizeof tag, "%s-%d", run, rank);
    for (int i = 0; i < HANG_S * 10; i++) {
        char *text = node_log(tag);
        int found = strstr(text, what) != NULL;

        free(text);
        if (found)
            return;
        ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "node %d exited before '%s'", rank, what);
        usleep(100000);
    }
    ck_abort_msg("node %d never logged '%s'", rank, what);
}

/* Starts three nodes of run, waits until node 2 has done some steps, kills it
 * (dead_wait: and waits until the others took it for dead) and starts it again; the
 * pids in pid (the new node 2 last). */
static void
kill_and_restart(const char *run, const char *conf, int dead_wait, pid_t pid[3])
{
    char master[64], metrics[1100], tag[64];

    snprintf(master, sizeof master, "127.0.0.1:%d", test_free_port());
    for (int r = 0; r < 3; r++) {
        snprintf(tag, sizeof tag, "%s-%d", run, r);
        pid[r] = start_node(tag, conf, r, master);
    }
    snprintf(metrics, sizeof metrics, "%s/%s/node-2/metrics.jsonl", tmp_root, run);
    test_wait_file(metrics, 6000, pid[2], HANG_S);
    kill(pid[2], SIGKILL);
    waitpid(pid[2], NULL, 0);
    if (dead_wait) /* until both others took it for dead */
        for (int r = 0; r < 2; r++)
            wait_log(run, r, "node 2 missed 3 rounds in a row", pid[r]);
    snprintf(tag, sizeof tag, "%s-2b", run);
    pid[2] = start_node(tag, conf, 2, master);
}

START_TEST(test_node_comes_back)
{
    char conf[1100], tag[64], summary[1100], *log[2], *back, *sum;
    unsigned long long sent, got;
    pid_t pid[3];

    test_become_subreaper();
    make_key("gossip");
    write_conf(conf, sizeof conf, "gossip", "gossip-bmuf");
    kill_and_restart("gossip", conf, 1, pid);
    for (int r = 0; r < 3; r++)
        ck_assert_int_eq(wait_node(pid[r]), 0);
    back = node_log("gossip-2b");
    ck_assert_msg(strstr(back, "comes back to the run under way"), "%s", back);
    got = digest_after(back, "came back at step");
    for (int r = 0; r < 2; r++) {
        const char *hello, *heard, *waited;

        snprintf(tag, sizeof tag, "gossip-%d", r);
        log[r] = node_log(tag);
        hello = strstr(log[r], "rank 2 is back, a new process");
        heard = strstr(log[r], "node 2 is back (it answered");
        ck_assert_msg(hello && heard && heard > hello, "node %d:\n%s", r, log[r]);
        /* nobody waits for it between its hello and its first answer */
        waited = strstr(hello, "node 2 did not answer");
        ck_assert_msg(!waited || waited > heard, "node %d waited for node 2:\n%s", r, log[r]);
    }
    /* its donor is a ring neighbour that sent exactly the parameters it took */
    sent = digest_after(strstr(log[0], "sent node 2 the state") ? log[0] : log[1],
                        "sent node 2 the state");
    ck_assert_msg(sent == got, "sent %016llx, took %016llx", sent, got);
    ck_assert_msg(strstr(log[0], "final model (average of 3 nodes)"), "%s", log[0]);
    snprintf(summary, sizeof summary, "%s/gossip/summary.json", tmp_root);
    ck_assert_ptr_nonnull(sum = test_read_file(summary, NULL));
    ck_assert_double_eq(test_json_num(sum, "models_averaged"), 3);
    free(sum);
    free(back);
    free(log[0]);
    free(log[1]);
}
END_TEST

static Suite *
rejoin_suite(void)
{
    Suite *s = suite_create("rejoin");
    TCase *tc = tcase_create("rejoin");

    tcase_set_timeout(tc, HANG_S * 2 + 60);
    tcase_add_test(tc, test_node_comes_back);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(shoal_bin, sizeof shoal_bin, "%s/shoal", b ? b : ".");
    test_data_dir(data_dir, sizeof data_dir);
    if (access(shoal_bin, X_OK) != 0) {
        fprintf(stderr, "check_rejoin: %s is not built; skipping\n", shoal_bin);
        return 77;
    }
    return test_main_in_tmp(rejoin_suite(), tmp_root, "check_rejoin");
}
