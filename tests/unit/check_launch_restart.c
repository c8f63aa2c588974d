/* Unit tests of shoal run's restarts (cluster.restart) and watchdog
 * (cluster.watchdog_timeouts) with the built shoal binary on the tiny run of
 * test_launch.h: a killed node started again resumes, restarts used up, the watchdog
 * killing a stopped node and one blocked on a FIFO, a restart beside another run's
 * checkpoint. The decisions on a state made by hand are in check_supervisor.c. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_launch.h"
#include "test_tool.h"

/* ------------------------------------------------ restarts and the watchdog */

/* Waits until shoal's stderr (<tmp>/<tag>.err) holds text. Fails the test when shoal
 * exited first (with what it wrote) or after HANG_S seconds: a guard against a hang,
 * not a timing. */
static void
wait_err_text(pid_t pid, const char *tag, const char *text)
{
    char path[1100], *err;
    double t0 = launch_now();
    int ws;

    snprintf(path, sizeof path, "%s/%s.err", launch_root, tag);
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
        if (launch_now() - t0 > HANG_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            test_sleep_ms(200);
            launch_each_child(getpid(), launch_kill_it, NULL);
            ck_abort_msg("shoal %s did not say \"%s\" in %d s", tag, text, HANG_S);
        }
        test_sleep_ms(20);
    }
}

/* shoal's node process named name ("shoal node 2") other than not (0: any), waiting for
 * it to have its name; the hang guard as wait_err_text's. */
static pid_t
node_named(pid_t shoal, const char *name, pid_t not )
{
    double t0 = launch_now();
    pid_t v;

    while ((v = test_child_named(shoal, name)) == 0 || v == not ) {
        ck_assert_msg(launch_now() - t0 < HANG_S, "no new %s in %d s", name, HANG_S);
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

    snprintf(path, sizeof path, "%s/%s/events.jsonl", launch_root, run);
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

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "restart", 1,
                     ", epochs: 1000, max_steps: 30000, eval_every_epoch: false");
    pid = launch_start("restart", (const char *[]){"SHOAL_LOG=info", NULL}, args);
    snprintf(path, sizeof path, "%s/restart/metrics.jsonl", launch_root);
    test_wait_file(path, 20000, pid, HANG_S);
    victim = node_named(pid, "shoal node 0", 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(launch_wait(pid, "restart", &out, &err), 0);
    launch_assert_nothing_left();

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

    snprintf(path, sizeof path, "%s/restart/checkpoint.bin", launch_root);
    ck_assert_int_eq(launch_header_i64(path, 144), 30000);
    snprintf(path, sizeof path, "%s/restart/metrics.jsonl", launch_root);
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

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "used-up", 1,
                     ", epochs: 1000, max_steps: 100000000, eval_every_epoch: false");
    pid = launch_start("used-up", NULL, args);
    snprintf(path, sizeof path, "%s/used-up/metrics.jsonl", launch_root);
    test_wait_file(path, 2000, pid, HANG_S);
    victim = node_named(pid, "shoal node 0", 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    wait_err_text(pid, "used-up",
                  "shoal run: node 0 restarted (restart 1 of 1); 1 of 1 nodes live\n");
    again = node_named(pid, "shoal node 0", victim);
    ck_assert_int_eq(kill(again, SIGKILL), 0);
    ck_assert_int_eq(launch_wait(pid, "used-up", &out, &err), 1);
    launch_assert_nothing_left();
    ck_assert_str_eq(launch_last_line(err, line, sizeof line), "shoal: node 0 killed by signal 9");
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

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "watch-stop", 1,
                     ", epochs: 1000, max_steps: 30000, eval_every_epoch: false");
    pid = launch_start("watch-stop", NULL, args);
    snprintf(path, sizeof path, "%s/watch-stop/metrics.jsonl", launch_root);
    test_wait_file(path, 20000, pid, HANG_S);
    victim = node_named(pid, "shoal node 0", 0);
    ck_assert_int_eq(kill(victim, SIGSTOP), 0);
    ck_assert_int_eq(launch_wait(pid, "watch-stop", &out, &err), 0);
    launch_assert_nothing_left();
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
    snprintf(path, sizeof path, "%s/watch-stop/checkpoint.bin", launch_root);
    ck_assert_int_eq(launch_header_i64(path, 144), 30000);
}
END_TEST

/* A node stopped before its first report is not waiting for the others at the
 * rendezvous: the watchdog kills it after its 2 s, not after the rendezvous timeout as
 * well (60 s here, past the test's patience). Without restarts the run stops. */
START_TEST(test_watchdog_stopped_at_start)
{
    char conf[1100], *out, *err;
    const char *const args[] = {"run",
                                conf,
                                "-n",
                                "2",
                                "--quiet",
                                "--set",
                                "run.log_every=100000",
                                "--set",
                                "cluster={nodes: 2, timeout_ms: 1000, watchdog_timeouts: 2, "
                                "rendezvous_timeout_ms: 60000}",
                                NULL};
    double t0;
    pid_t pid, victim;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "watch-start", 2,
                     ", epochs: 1000, max_steps: 30000, eval_every_epoch: false");
    pid = launch_start("watch-start", NULL, args);
    t0 = launch_now();
    while ((victim = test_child_named(pid, "shoal node 1")) == 0) {
        ck_assert_msg(launch_now() - t0 < HANG_S, "no node 1 in %d s", HANG_S);
        test_sleep_ms(1);
    }
    ck_assert_int_eq(kill(victim, SIGSTOP), 0);
    ck_assert_int_ne(launch_wait(pid, "watch-start", &out, &err), 0);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(err, "shoal run: node 1 made no progress for 2 s (stopped by a signal) "
                              "at start: the watchdog killed it; the run stops") != NULL,
                  "%s", err);
    free(out);
    free(err);
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

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "watch-hung", 1,
                     ", epochs: 1000, max_steps: 2000, eval_every_epoch: false");
    snprintf(path, sizeof path, "%s/watch-hung", launch_root);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/watch-hung/metrics.jsonl", launch_root);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    /* without restarts the run stops, naming the watchdog */
    ck_assert_int_eq(launch_wait(launch_start("watch-hung", NULL,
                                              (const char *[]){"run", conf, "--quiet", "--set",
                                                               "cluster={timeout_ms: 1000, "
                                                               "watchdog_timeouts: 2}",
                                                               NULL}),
                                 "watch-hung", &out, &err),
                     1);
    launch_assert_nothing_left();
    ck_assert_str_eq(launch_last_line(err, line, sizeof line),
                     "shoal: node 0 killed by the watchdog: no progress for 2 s (no output, no CPU "
                     "time)");
    ck_assert_msg(strstr(err, "shoal run: node 0 made no progress for 2 s (no output, no CPU time) "
                              "at start: the watchdog killed it; the run stops; 0 of 1 nodes "
                              "live\n") != NULL,
                  "%s", err);
    free(out);
    free(err);
    pid = launch_start("watch-hung", NULL, args);
    wait_err_text(pid, "watch-hung",
                  "shoal run: node 0 made no progress for 2 s (no output, no CPU time) at start: "
                  "the watchdog killed it; restarting it in 0.3 s (restart 1 of 2); 0 of 1 nodes "
                  "live\n");
    ck_assert_int_eq(unlink(path), 0); /* a restart after this gets through */
    ck_assert_int_eq(launch_wait(pid, "watch-hung", &out, &err), 0);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(err, "shoal run: node 0 restarted (restart 1 of 2); 1 of 1 nodes live\n"),
                  "%s", err);
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/watch-hung/checkpoint.bin", launch_root);
    ck_assert_int_eq(launch_header_i64(path, 144), 2000);
}
END_TEST

/* A run of another model beside a run's checkpoint is refused with one line, its
 * config.yaml left as the run wrote it; started
 * over (--no-resume) it first sets that run's files aside in previous/ (the checkpoint,
 * and the metrics.jsonl that here is a FIFO no node could write), so it trains, and its
 * restarts (always resuming) could only ever find its own checkpoints. */
START_TEST(test_restart_foreign_checkpoint)
{
    char conf[1100], path[1200], today[512], *out, *err, *config;
    struct stat sb;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "foreign", 1, ", max_steps: 100, eval_every_epoch: false");
    ck_assert_int_eq(launch_wait(launch_start("foreign", NULL, (const char *[]){"run", conf, NULL}),
                                 "foreign", &out, &err),
                     0);
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/foreign/config.yaml", launch_root);
    config = test_read_file(path, NULL);
    ck_assert_ptr_nonnull(config);
    /* today's refusal: the other model resuming from that checkpoint */
    ck_assert_int_eq(launch_wait(launch_start("foreign", NULL,
                                              (const char *[]){"run", conf, "--set",
                                                               "model.embedding=24", NULL}),
                                 "foreign", &out, &err),
                     1);
    launch_last_line(err, today, sizeof today);
    ck_assert_msg(strstr(today, "checkpoint was written for a different model") != NULL, "%s", err);
    free(out);
    free(err);
    out = test_read_file(path, NULL); /* the run's configuration is still its own */
    ck_assert_msg(out && strcmp(out, config) == 0, "config.yaml changed:\n%s", out);
    free(out);
    free(config);

    snprintf(path, sizeof path, "%s/foreign/metrics.jsonl", launch_root);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    ck_assert_int_eq(launch_wait(launch_start("foreign", (const char *[]){"SHOAL_LOG=info", NULL},
                                              (const char *[]){"run", conf, "--no-resume", "--set",
                                                               "model.embedding=24", NULL}),
                                 "foreign", &out, &err),
                     0);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(err, "starting over: moved the previous run's ") != NULL, "%s", err);
    snprintf(path, sizeof path, "%s/foreign/previous/metrics.jsonl", launch_root);
    ck_assert(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
    snprintf(path, sizeof path, "%s/foreign/previous/checkpoint.bin", launch_root);
    ck_assert_int_eq(launch_header_i64(path, 144), 100);
    free(out);
    free(err);
    /* and the run's own checkpoint is of the other model: resuming it is no refusal */
    ck_assert_int_eq(launch_wait(launch_start("foreign", NULL,
                                              (const char *[]){"run", conf, "--set",
                                                               "model.embedding=24", NULL}),
                                 "foreign", &out, &err),
                     0);
    ck_assert_msg(strstr(err, "different model") == NULL, "%s", err);
    free(out);
    free(err);
}
END_TEST

/* A node started again that has not come back when the others finish (here it is
 * stopped, SIGSTOP, as soon as it is forked, while rank 0, which alone admits it, is
 * stopped too) is stopped by shoal run once both others have finished, with one line,
 * rather than waiting for a table until the rendezvous timeout: the run ends well (exit 0),
 * with the final model of the two others. */
START_TEST(test_latecomer_left_out)
{
    char conf[1100], path[1200], *out, *err, *text, *ev[6];
    const char *const args[] = {"run",
                                conf,
                                "--quiet",
                                "--set",
                                "cluster.restart={max: 1, delay_ms: 0}",
                                "--set",
                                "cluster.watchdog_timeouts=0",
                                "--set",
                                "cluster.timeout_ms=2000",
                                "--set",
                                "sync={algorithm: bmuf, timeout_ms: 2000}",
                                NULL};
    pid_t pid, zero, victim, again;
    int n;

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "latecomer", 3,
                     ", epochs: 1000, max_steps: 1500, eval_every_epoch: false");
    pid = launch_start("latecomer", NULL, args);
    snprintf(path, sizeof path, "%s/latecomer/node-0/metrics.jsonl", launch_root);
    test_wait_file(path, 1, pid, HANG_S);
    zero = node_named(pid, "shoal node 0", 0);
    victim = node_named(pid, "shoal node 2", 0);
    ck_assert_int_eq(kill(zero, SIGSTOP), 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    wait_err_text(pid, "latecomer", "shoal run: node 2 restarted (restart 1 of 1)");
    again = node_named(pid, "shoal node 2", victim);
    ck_assert_int_eq(kill(again, SIGSTOP), 0);
    ck_assert_int_eq(kill(zero, SIGCONT), 0);
    ck_assert_int_eq(launch_wait(pid, "latecomer", &out, &err), 0);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(err, "shoal run: node 2 had not come back (restart 1 of 1) when the "
                              "others had finished: stopping it; bmuf ends without it; 2 of 3 "
                              "nodes live\n") != NULL,
                  "%s", err);
    ck_assert_msg(strstr(out, "shoal: node 2: left out: the run ended without it") != NULL, "%s",
                  out);
    ck_assert_msg(strstr(out, "final model averages 2 nodes") != NULL, "%s", out);
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/latecomer/model.bin", launch_root);
    ck_assert(launch_exists(path));
    n = events("latecomer", &text, ev, 6);
    ck_assert_int_eq(n, 3); /* died, restarted, left out */
    ck_assert_ptr_nonnull(strstr(ev[2], "\"why\":\"left out\",\"live\":2,\"nodes\":3}"));
    free(text);
}
END_TEST

/* The writer (rank 0 of a bmuf run) killed once it has the final average, before it
 * writes it (the test hook SHOAL_TEST_WRITER_SIGNAL): the run is ending, so it is not
 * started again but left out; with nobody to write the run's model, the run ends as one
 * that lost a node (exit 1), naming the copy the lowest other member put there. */
START_TEST(test_writer_left_out)
{
    char conf[1100], path[1200], line[1024], *out, *err;
    const char *const args[] = {"run",
                                conf,
                                "--quiet",
                                "--set",
                                "cluster.restart={max: 1, delay_ms: 0}",
                                "--set",
                                "sync={algorithm: bmuf, timeout_ms: 2000}",
                                NULL};

    if (!launch_have_shoal())
        return;
    test_become_subreaper();
    launch_tiny_yaml(conf, sizeof conf, "writer-out", 3,
                     ", max_steps: 64, eval_every_epoch: false");
    ck_assert_int_eq(
        launch_wait(launch_start("writer-out",
                                 (const char *[]){"SHOAL_TEST_WRITER_SIGNAL=KILL", NULL}, args),
                    "writer-out", &out, &err),
        1);
    launch_assert_nothing_left();
    ck_assert_msg(strstr(err, "shoal run: node 0 died (signal 9) at step 64; not restarted: the "
                              "run is ending; bmuf ends without it; 2 of 3 nodes live\n") != NULL,
                  "%s", err);
    snprintf(path, sizeof path, "%s/writer-out/model.bin", launch_root);
    launch_last_line(err, line, sizeof line);
    ck_assert_msg(strstr(line, "shoal: node 0 was left out as the run ended (the other nodes "
                               "finished without it); the run's model, the average of 3 nodes at "
                               "step 64, is node 1's copy, not evaluated: ") == line,
                  "%s", err);
    ck_assert_msg(strstr(line, path) != NULL, "%s", err);
    ck_assert(launch_exists(path));
    free(out);
    free(err);
}
END_TEST

/* ---------------------------------------------------------------------- main */

static Suite *
launch_restart_suite(void)
{
    Suite *s = suite_create("launch_restart");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(limits, 4 * HANG_S);
    tcase_add_test(limits, test_run_restart_resumes);
    tcase_add_test(limits, test_run_restarts_used_up);
    tcase_add_test(limits, test_watchdog_kills_stopped);
    tcase_add_test(limits, test_watchdog_stopped_at_start);
    tcase_add_test(limits, test_watchdog_kills_hung);
    tcase_add_test(limits, test_restart_foreign_checkpoint);
    tcase_add_test(limits, test_latecomer_left_out);
    tcase_add_test(limits, test_writer_left_out);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_launch_main(launch_restart_suite(), "check-launch-restart");
}
