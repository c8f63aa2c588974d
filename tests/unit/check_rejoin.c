/* A node that comes back (src/node/sl_rejoin.h): three `shoal node` processes of a
 * gossip-bmuf run under CURVE, node 2 (then, in another run, node 0) SIGKILLed mid-run
 * and started again with the same command once the others took it for dead. The new process is
 * admitted by rank 0's rendezvous, takes a live node's parameters (the digests the donor and it log
 * are equal) and sync state, starts a round or two ahead of the others, is counted alive again by
 * both others, none of which waits for it between its hello and its first answer, and the run's
 * final model is the average of all three nodes. The same under cluster.security: mac,
 * where the others install the new process's session key, relayed by rank 0's
 * rendezvous, before its hello. And the same into bmuf, allreduce, ma and bmuf with
 * sync.stagger runs (node 2, node 2, node 0, node 2), and a bmuf run under mac, where the
 * members drop the node and then admit it again at a block or step boundary
 * (src/sync/sl_members.h "Admission"). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-rejoin-XXXXXX";
static char data_dir[1024];
static char shoal_bin[1024];

/* A guard against a hang, not a timing the test measures: a wait for a node's line, or a
 * run that writes no metrics for that long (a loaded machine makes a run slower, not
 * silent) */
enum { HANG_S = 120 };

/* <tmp>/<run>.yaml: 3 nodes under cluster.security (curve or mac), a small model that
 * trains for some 10 s, sync waits of sync_ms, every component synced every period steps. */
static void
write_conf(char *path, size_t size, const char *run, const char *security, const char *algorithm,
           int timeout_ms, int sync_ms, int period)
{
    char yaml[2048];

    snprintf(path, size, "%s/%s.yaml", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 100}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 32, layers: [{lstm: 64}]}\n"
             "train: {batch: 8, bptt: 10, epochs: 80, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "cluster: {nodes: 3, rendezvous_timeout_ms: 20000, timeout_ms: %d,\n"
             "          security: %s, key_file: %s/%s.key}\n"
             "sync: {algorithm: %s, period: %d, timeout_ms: %d}\n",
             run, tmp_root, run, data_dir, data_dir, tmp_root, timeout_ms, security, tmp_root, run,
             algorithm, period, sync_ms);
    test_write_file(path, yaml, strlen(yaml));
}

/* `shoal ARGS...` (NULL-terminated), output into <tmp>/<tag>.log. */
static pid_t
start_shoal(const char *tag, const char *const *args)
{
    char log[1100];
    const char *argv[32] = {shoal_bin};
    int n = 1;
    pid_t pid;

    snprintf(log, sizeof log, "%s/%s.log", tmp_root, tag);
    while (*args && n < 31)
        argv[n++] = *args++;
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0)
            _exit(99);
        setenv("SHOAL_LOG", "info", 1);
        setenv("TMPDIR", tmp_root, 1);
        execv(shoal_bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* `shoal node CONF --rank R --size 3 --master M`, output into <tmp>/<tag>.log. */
static pid_t
start_node(const char *tag, const char *conf, int rank, const char *master)
{
    char r[8];

    snprintf(r, sizeof r, "%d", rank);
    return start_shoal(tag, (const char *[]){"node", conf, "--rank", r, "--size", "3", "--master",
                                             master, "--quiet", NULL});
}

/* The bytes of metrics the nodes of run have written so far: they grow while it trains. */
static long
run_metrics_bytes(const char *run)
{
    char path[1100];
    struct stat sb;
    long bytes = 0;

    for (int r = 0; r < 3; r++) {
        snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, r);
        if (stat(path, &sb) == 0)
            bytes += (long)sb.st_size;
    }
    return bytes;
}

/* Waits for pid, a node of run (or its shoal run), and returns its exit status; kills it
 * and fails once run has written no metrics for HANG_S. Not a deadline on the whole run,
 * which takes 100 s and more on two loaded cores. */
static int
wait_node(pid_t pid, const char *run)
{
    long seen = -1;

    for (int quiet = 0; quiet < HANG_S * 10; quiet++) {
        long bytes = run_metrics_bytes(run);
        int ws;

        if (waitpid(pid, &ws, WNOHANG) == pid)
            return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        if (bytes != seen) {
            seen = bytes;
            quiet = 0;
        }
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_abort_msg("shoal node %d of %s hung: no metrics for %d s", (int)pid, run, HANG_S);
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

/* Starts three nodes of run, waits until node v has done some steps, kills it, waits
 * until the others logged dead (what they say when they take it for dead) and starts it
 * again; the pids in pid. */
static void
kill_and_restart(const char *run, const char *conf, int v, const char *dead, pid_t pid[3])
{
    char master[64], metrics[1100], tag[64];

    snprintf(master, sizeof master, "127.0.0.1:%d", test_free_port());
    for (int r = 0; r < 3; r++) {
        snprintf(tag, sizeof tag, "%s-%d", run, r);
        pid[r] = start_node(tag, conf, r, master);
    }
    snprintf(metrics, sizeof metrics, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, v);
    test_wait_file(metrics, 6000, pid[v], HANG_S);
    kill(pid[v], SIGKILL);
    waitpid(pid[v], NULL, 0);
    for (int r = 0; r < 3; r++)
        if (r != v)
            wait_log(run, r, dead, pid[r]);
    snprintf(tag, sizeof tag, "%s-%db", run, v);
    pid[v] = start_node(tag, conf, v, master);
}

/* Waits for every node of run (node v's new process logs into <run>-<v>b), failing with
 * the log of one that does not exit 0. */
static void
wait_all(const char *run, int v, pid_t pid[3])
{
    char tag[64];

    for (int r = 0; r < 3; r++) {
        int rc = wait_node(pid[r], run);
        if (rc != 0) {
            snprintf(tag, sizeof tag, r == v ? "%s-%db" : "%s-%d", run, r);
            ck_abort_msg("node %d exited with %d:\n%s", r, rc, node_log(tag));
        }
    }
}

/* The run's model averages all three nodes (node 0 said so, and summary.json); frees the
 * nodes' logs. */
static void
assert_three_models(const char *run, char *log[3])
{
    char path[1100], *sum;

    ck_assert_msg(strstr(log[0], "final model (average of 3 nodes)"), "%s", log[0]);
    snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, run);
    ck_assert_ptr_nonnull(sum = test_read_file(path, NULL));
    ck_assert_double_eq(test_json_num(sum, "models_averaged"), 3);
    free(sum);
    for (int r = 0; r < 3; r++)
        free(log[r]);
}

/* Node victims[i] killed and started again: rank 2, and rank 0 (the rendezvous' own,
 * which finds the others through their presence messages). */
static const int victims[] = {2, 0};

/* Node v of a gossip-bmuf run under security killed and started again (see the top);
 * under mac, each other node installs the new process's session key before its hello. */
static void
comes_back(int v, const char *security)
{
    int mac = strcmp(security, "mac") == 0;
    char conf[1100], run[32], tag[64], path[1100], what[4][64], *log[3];
    const char *donor = NULL;
    unsigned long long sent, got;
    pid_t pid[3];

    test_become_subreaper();
    snprintf(run, sizeof run, "gossip%s%d", mac ? "mac" : "", v);
    make_key(run);
    write_conf(conf, sizeof conf, run, security, "gossip-bmuf", 5000, 1000, 8);
    snprintf(what[0], sizeof what[0], "node %d left the run (its connection closed", v);
    kill_and_restart(run, conf, v, what[0], pid);
    wait_all(run, v, pid);
    snprintf(what[0], sizeof what[0], "rank %d is back, a new process", v);
    snprintf(what[1], sizeof what[1], "node %d joined the run (it answered", v);
    snprintf(what[2], sizeof what[2], "node %d did not answer", v);
    snprintf(what[3], sizeof what[3], "rank %d's new session key is installed", v);
    for (int r = 0; r < 3; r++) {
        const char *hello, *heard, *waited, *key;

        snprintf(tag, sizeof tag, r == v ? "%s-%db" : "%s-%d", run, r);
        log[r] = node_log(tag);
        if (r == v)
            continue;
        hello = strstr(log[r], what[0]);
        heard = strstr(log[r], what[1]);
        ck_assert_msg(hello && heard && heard > hello, "node %d:\n%s", r, log[r]);
        key = strstr(log[r], what[3]);
        ck_assert_msg(mac ? key && key < hello : !key, "node %d:\n%s", r, log[r]);
        /* nobody waits for it between its hello and its first answer */
        waited = strstr(hello, what[2]);
        ck_assert_msg(!waited || waited > heard, "node %d waited for node %d:\n%s", r, v, log[r]);
        snprintf(path, sizeof path, "sent node %d the state", v);
        if (strstr(log[r], path))
            donor = log[r];
    }
    ck_assert_msg(strstr(log[v], "comes back to the run under way"), "%s", log[v]);
    /* a ring neighbour sent exactly the parameters it took */
    got = digest_after(log[v], "came back at step");
    ck_assert_msg(donor != NULL, "no node sent node %d the state", v);
    sent = digest_after(donor, path);
    ck_assert_msg(sent == got, "sent %016llx, took %016llx", sent, got);
    assert_three_models(run, log);
}

START_TEST(test_node_comes_back)
{
    comes_back(victims[_i], "curve");
}
END_TEST

/* The same under cluster.security: mac, where the new process's session key reaches the
 * others through rank 0's rendezvous (or, rank 0 come back, its own). */
START_TEST(test_node_comes_back_mac)
{
    comes_back(victims[_i], "mac");
}
END_TEST

/* The step of the last record in node rank's metrics.jsonl of run (0 before the first). */
static long
last_step(const char *run, int rank)
{
    char path[1100], *text, *line;
    long step = 0;

    snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, rank);
    if (!(text = test_read_file(path, NULL)))
        return 0;
    for (size_t n = strlen(text); n > 0 && text[n - 1] == '\n';)
        text[--n] = '\0';
    line = strrchr(text, '\n');
    if (strstr(line ? line : text, "\"step\""))
        step = (long)test_json_num(line ? line : text, "step");
    free(text);
    return step;
}

/* A node that comes back slower than its lead: node 2 killed and started again in a
 * gossip-bmuf run of period 32, stopped as soon as it says it came back and before its
 * first step (it stops itself: SHOAL_TEST_REJOIN_SIGNAL, src/node/sl_train_start.c), and
 * let go once the others are four rounds past the step it came back at. Behind, its
 * snapshots would reach them as stale and it would never be counted back; it finds
 * itself behind at its first sync, skips ahead of them again, and the final model
 * averages all three nodes. */
START_TEST(test_comes_back_behind)
{
    char conf[1100], run[] = "behind", tag[64], *log[3], *text;
    const char *came;
    long at;
    pid_t pid[3];
    int ws = 0;

    test_become_subreaper();
    make_key(run);
    write_conf(conf, sizeof conf, run, "curve", "gossip-bmuf", 5000, 1000, 32);
    /* only a process that comes back reads it: node 2's second */
    ck_assert_int_eq(setenv("SHOAL_TEST_REJOIN_SIGNAL", "STOP", 1), 0);
    kill_and_restart(run, conf, 2, "node 2 left the run (its connection closed", pid);
    for (int i = 0; i < HANG_S * 10; i++) {
        pid_t got = waitpid(pid[2], &ws, WNOHANG | WUNTRACED);

        ck_assert_int_ge(got, 0);
        if (got == pid[2])
            break;
        usleep(100000);
    }
    snprintf(tag, sizeof tag, "%s-2b", run);
    text = node_log(tag);
    ck_assert_msg(WIFSTOPPED(ws), "node 2 did not stop once it came back (wait status %#x):\n%s",
                  ws, text);
    came = strstr(text, "came back at step ");
    ck_assert_msg(came != NULL, "%s", text);
    at = atol(came + strlen("came back at step "));
    free(text);
    for (int i = 0; i < HANG_S * 10 && last_step(run, 0) < at + 4 * 32; i++) {
        ck_assert_msg(waitpid(pid[0], NULL, WNOHANG) == 0, "node 0 ended while node 2 stood");
        usleep(100000);
    }
    kill(pid[2], SIGCONT);
    wait_all(run, 2, pid);
    for (int r = 0; r < 3; r++) {
        snprintf(tag, sizeof tag, r == 2 ? "%s-%db" : "%s-%d", run, r);
        log[r] = node_log(tag);
    }
    ck_assert_msg(strstr(log[2], "behind the others"), "%s", log[2]);
    assert_three_models(run, log);
}
END_TEST

/* The last line of text that holds both what and also into buf ("" when none). */
static void
last_line(const char *text, const char *what, const char *also, char *buf, size_t size)
{
    buf[0] = '\0';
    for (const char *p = text; *p;) {
        int len = (int)strcspn(p, "\n");
        char line[512];

        snprintf(line, sizeof line, "%.*s", len, p);
        if (strstr(line, what) && strstr(line, also))
            snprintf(buf, size, "%s", line + strcspn(line, ":") + 1); /* past "shoal node R" */
        p += len + (p[len] != '\0');
    }
}

/* The collective algorithms a node is admitted back into (with more sync keys: bmuf with
 * staggered phases, where K is a block boundary that only the phase-0 components sync
 * at, and bmuf with embeddings synced every 32 steps, where K is a boundary of the
 * shortest period, 8, that the embeddings are in the middle of), with their block of
 * steps, the shortest period (allreduce: any step), the node
 * killed: node 2, or node 0, the coordinator then being node 1, and whether the nodes'
 * own models are equal at the end: not with stagger, whose last step is the sync point
 * of only some components (the run's model still averages all three). */
static const struct {
    const char *algorithm, *name, *security;
    long block;
    int victim, same_models;
} admits[] = {{"bmuf", "bmuf", "curve", 8, 2, 1},
              {"allreduce", "allreduce", "curve", 1, 2, 1},
              {"ma", "ma", "curve", 8, 0, 1},
              {"bmuf, stagger: true", "stagger", "curve", 8, 2, 0},
              {"bmuf, embedding_period: 32", "periods", "curve", 8, 2, 0},
              {"bmuf", "bmufmac", "mac", 8, 2, 1}}; /* the last: in tcase "mac" */

/* A node killed, dropped by the others' agreement, started again: admitted by the
 * coordinator (the lowest live rank) at the block boundary after the next one from the
 * step it asked at (and at least SL_MEMBERS_ADMIT_LEAD steps on), every member logs it joined,
 * it gets the coordinator's state of that step, and the final model averages all three.
 * The nodes' models are equal after the final sync (without stagger): with allreduce,
 * the node took the optimizer state too. */
START_TEST(test_node_admitted)
{
    int v = admits[_i].victim, c = v == 0 ? 1 : 0;
    char run[32], tag[64], conf[1100], path[1100], line[3][256], *log[3];
    unsigned long long sent, got;
    long at = -1, asked = -1, block = admits[_i].block;
    const char *p;
    pid_t pid[3];

    test_become_subreaper();
    snprintf(run, sizeof run, "%s%d", admits[_i].name, v);
    make_key(run);
    /* 3 s: the newcomer's first collective must not time out on a loaded machine (the
     * others would drop it again) */
    write_conf(conf, sizeof conf, run, admits[_i].security, admits[_i].algorithm, 1000, 3000, 8);
    snprintf(path, sizeof path, "node %d left the run", v);
    kill_and_restart(run, conf, v, path, pid);
    wait_all(run, v, pid);
    for (int r = 0; r < 3; r++) {
        snprintf(tag, sizeof tag, r == v ? "%s-%db" : "%s-%d", run, r);
        log[r] = node_log(tag);
    }
    snprintf(path, sizeof path, "node %d asks to come back at step ", v);
    p = strstr(log[c], path);
    ck_assert_msg(p != NULL, "%s", log[c]);
    ck_assert_int_eq(sscanf(p + strlen(path), "%ld: admitted at step %ld", &asked, &at), 2);
    ck_assert_int_eq(at % block, 0);
    ck_assert_msg(at >= asked + 4 && at <= (asked / block + 2) * block + (block < 4 ? 4 : 0),
                  "asked at step %ld, admitted at %ld (block %ld)", asked, at, block);
    snprintf(path, sizeof path, "node %d joined the run (admitted at step %ld, epoch ", v, at);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(r == v || strstr(log[r], path), "node %d:\n%s", r, log[r]);
    snprintf(path, sizeof path, "node %d admits this node at step %ld", c, at);
    ck_assert_msg(strstr(log[v], path), "%s", log[v]);
    snprintf(path, sizeof path, "sent node %d the state of step %ld", v, at);
    sent = digest_after(log[c], path);
    got = digest_after(log[v], "came back at step");
    ck_assert_msg(sent == got, "sent %016llx, took %016llx", sent, got);
    for (int r = 0; r < 3; r++) {
        last_line(log[r], ": valid ppl", " tokens)", line[r], sizeof line[r]);
        ck_assert_msg(line[r][0] && (!admits[_i].same_models || strcmp(line[r], line[0]) == 0),
                      "node %d: '%s', node 0: '%s'", r, line[r], line[0]);
    }
    assert_three_models(run, log);
}
END_TEST

/* shoal run with restarts: node victims[i] SIGKILLed, started again by shoal run (rank 0
 * at the master address the others have), comes back; the run ends well with the model
 * of all three nodes. */
START_TEST(test_run_restart_comes_back)
{
    int v = victims[_i];
    char conf[1100], run[32], metrics[1100], name[32], want[3][64], *log;
    pid_t pid, victim;
    int rc;

    test_become_subreaper();
    snprintf(run, sizeof run, "restart%d", v);
    make_key(run);
    write_conf(conf, sizeof conf, run, "curve", "gossip-bmuf", 5000, 1000, 8);
    pid =
        start_shoal(run, (const char *[]){"run", conf, "--quiet", "--set", "cluster.restart.max=2",
                                          "--set", "cluster.restart.delay_ms=500", NULL});
    snprintf(metrics, sizeof metrics, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, v);
    test_wait_file(metrics, 6000, pid, HANG_S);
    snprintf(name, sizeof name, "shoal node %d", v);
    victim = test_child_named(pid, name);
    ck_assert_int_gt(victim, 0);
    kill(victim, SIGKILL);
    rc = wait_node(pid, run);
    log = node_log(run);
    snprintf(want[0], sizeof want[0], "shoal run: node %d restarted (restart 1 of 2)", v);
    snprintf(want[1], sizeof want[1], "node %d: train: info: came back at step", v);
    snprintf(want[2], sizeof want[2], "final model (average of 3 nodes)");
    ck_assert_msg(rc == 0 && strstr(log, want[0]) && strstr(log, want[1]) && strstr(log, want[2]),
                  "exit %d:\n%s", rc, log);
    free(log);
}
END_TEST

static Suite *
rejoin_suite(void)
{
    Suite *s = suite_create("rejoin");
    TCase *tc = tcase_create("rejoin");

    tcase_set_timeout(tc, HANG_S * 2 + 60);
    tcase_add_loop_test(tc, test_node_comes_back, 0, sizeof victims / sizeof victims[0]);
    tcase_add_loop_test(tc, test_run_restart_comes_back, 0, sizeof victims / sizeof victims[0]);
    tcase_add_test(tc, test_comes_back_behind);
    suite_add_tcase(s, tc);
    tc = tcase_create("admit");
    tcase_set_timeout(tc, HANG_S * 2 + 60);
    tcase_add_loop_test(tc, test_node_admitted, 0, sizeof admits / sizeof admits[0] - 1);
    suite_add_tcase(s, tc);
    tc = tcase_create("mac"); /* the comebacks under cluster.security: mac */
    tcase_set_timeout(tc, HANG_S * 2 + 60);
    tcase_add_loop_test(tc, test_node_comes_back_mac, 0, sizeof victims / sizeof victims[0]);
    tcase_add_loop_test(tc, test_node_admitted, sizeof admits / sizeof admits[0] - 1,
                        sizeof admits / sizeof admits[0]);
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
