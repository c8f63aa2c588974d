/* shoal run's decisions about a node process that ended (src/node/sl_supervisor_int.h),
 * in one process on a supervisor's state made by hand: a node the others dropped (it
 * ended with SL_ERR_DROPPED: a comeback that some members admitted and others did not,
 * after a second failure) is started again like a dead one while restarts are left,
 * with its membership line and record; with none left, or while the run stops, it stops
 * the run as any failure does. The forked runs (kills, restarts, the watchdog) are in
 * check_launch_restart.c. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_supervisor_int.h"
#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-supervisor-XXXXXX";

typedef struct {
    sl_config_t cfg;
    sl_sup_t l;
    sl_sup_node_t c[3];
    char *said; /* what shoal run printed */
    size_t said_len;
} sup_t;

/* A bmuf run of 3 nodes with restarts (max of them), node 2 dropped at step 40. */
static void
sup_init(sup_t *s, int max)
{
    memset(s, 0, sizeof *s);
    sl_config_init(&s->cfg);
    s->cfg.sync.algorithm = SL_SYNC_BMUF;
    s->cfg.cluster.restart.max = max;
    s->cfg.cluster.restart.delay_ms = 100;
    free(s->cfg.run.dir);
    s->cfg.run.dir = strdup(tmp_root);
    s->l.cfg = &s->cfg;
    s->l.out = open_memstream(&s->said, &s->said_len);
    s->l.n = s->l.forked = 3;
    s->l.c = s->c;
    s->l.culprit = s->l.lost = -1;
    s->l.tolerant = 1;
    s->c[2].ended = s->c[2].dropped = s->c[2].has_report = 1;
    s->c[2].report.step = 40;
    snprintf(s->c[2].dropped_why, sizeof s->c[2].dropped_why,
             "this node came back and was admitted, but no member answers it any more");
}

/* shoal run's membership records (<run dir>/events.jsonl) hold record; the file is
 * removed for the next case. */
static void
assert_event(const char *record)
{
    char path[600], *events;

    snprintf(path, sizeof path, "%s/events.jsonl", tmp_root);
    events = test_read_file(path, NULL);
    ck_assert_msg(strstr(events, record), "%s", events);
    free(events);
    remove(path);
}

static void
sup_fini(sup_t *s)
{
    fclose(s->l.out);
    free(s->said);
    sl_config_fini(&s->cfg);
}

START_TEST(test_dropped_node_restarted)
{
    sup_t s;

    sup_init(&s, 2);
    ck_assert(sl_sup_may_restart(&s.l, 2));
    sl_sup_node_died(&s.l, 2, "unused");
    fflush(s.l.out);
    ck_assert_msg(s.c[2].restart_at > 0, "%s", s.said);
    ck_assert_int_eq(s.l.culprit, -1); /* the run goes on */
    ck_assert_msg(strstr(s.said, "shoal run: node 2 was dropped by the others at step 40 (this "
                                 "node came back and was admitted, but no member answers it any "
                                 "more); restarting it in 0.1 s (restart 1 of 2); 2 of 3 nodes "
                                 "live\n"),
                  "%s", s.said);
    assert_event("\"rank\":2,\"step\":40,\"why\":\"dropped\",\"live\":2");
    sup_fini(&s);
}
END_TEST

START_TEST(test_dropped_node_no_restarts_left)
{
    sup_t s;

    sup_init(&s, 1);
    s.c[2].restarts = 1;
    ck_assert(!sl_sup_may_restart(&s.l, 2));
    sl_sup_node_died(&s.l, 2, "was dropped by the others (no member answers it any more)");
    fflush(s.l.out);
    ck_assert(s.c[2].restart_at == 0);
    ck_assert_int_eq(s.l.culprit, 2); /* the run stops, saying why */
    ck_assert_msg(strstr(s.l.culprit_msg, "node 2 was dropped by the others"), "%s",
                  s.l.culprit_msg);
    sup_fini(&s);
    /* nor is anything started again while the run stops */
    sup_init(&s, 2);
    s.l.stopping = 1;
    ck_assert(!sl_sup_may_restart(&s.l, 2));
    sup_fini(&s);
}
END_TEST

/* The end of a run (a node's report says it trained its last step): node 2, dropped with
 * restarts left, is not started again (nobody would admit it) but left out, which is no
 * failure: the run ends without it. */
START_TEST(test_no_restart_at_run_end)
{
    sup_t s;

    sup_init(&s, 2);
    s.c[0].has_report = 1;
    s.c[0].report.step = s.c[0].report.total_steps = 200;
    ck_assert(sl_sup_run_ending(&s.l));
    ck_assert(!sl_sup_may_restart(&s.l, 2));
    ck_assert(sl_sup_restarts_left(&s.l, 2));
    sl_sup_node_died(&s.l, 2, "unused");
    fflush(s.l.out);
    ck_assert_msg(s.c[2].restart_at == 0, "%s", s.said);
    ck_assert_int_eq(s.c[2].left_out, 1);
    ck_assert_int_eq(s.l.culprit, -1);
    ck_assert_int_eq(s.l.lost, -1);
    ck_assert_msg(strstr(s.said, "shoal run: node 2 was dropped by the others at step 40 (this "
                                 "node came back and was admitted, but no member answers it any "
                                 "more); not restarted: the run is ending; bmuf ends without it; "
                                 "2 of 3 nodes live\n"),
                  "%s", s.said);
    assert_event("\"rank\":2,\"step\":40,\"why\":\"not restarted\",\"live\":2");
    sup_fini(&s);
}
END_TEST

/* A forked stand-in for a node process: it waits for a signal, its handlers the
 * defaults (not the test runner's) before this returns. */
static pid_t
fork_waiting(void)
{
    int ready[2];
    char c;
    pid_t pid;

    ck_assert_int_eq(pipe(ready), 0);
    fflush(NULL);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        if (write(ready[1], "", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(ready[1]);
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    return pid;
}

/* The signal that ended pid; kills it and fails after a hang guard of 30 s. */
static int
ending_signal(pid_t pid)
{
    double end = sl_clock_now() + 30;
    int ws;

    while (waitpid(pid, &ws, WNOHANG) != pid) {
        if (sl_clock_now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            ck_abort_msg("process %d was not stopped", (int)pid);
        }
        test_sleep_ms(5);
    }
    return WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
}

/* Nodes 0 and 1 have finished; node 2, started again, has not come back (no report from
 * its new process: it waits for rank 0's table, which nobody will send). One round of
 * watching stops it (SIGTERM) and leaves it out, with one line and record: no failure,
 * no wait for the rendezvous timeout. While node 1 still trains, nothing happens. */
START_TEST(test_latecomer_stopped_at_run_end)
{
    sup_t s;
    sl_launch_opts_t o;

    sup_init(&s, 2);
    sl_launch_opts_init(&o);
    s.l.o = &o;
    for (int i = 0; i < 2; i++) {
        s.c[i].ended = s.c[i].judged = s.c[i].exited = 1;
        s.c[i].outcome = SL_NODE_DONE;
    }
    s.c[1].ended = 0; /* node 1 still trains */
    memset(&s.c[2], 0, sizeof s.c[2]);
    s.c[2].restarts = 1;
    s.c[2].has_report = 1;
    s.c[2].report.step = 120; /* its earlier process's */
    s.c[2].pid = fork_waiting();
    s.c[2].sign_at = sl_clock_now();
    s.c[2].cpu_at_sign_s = -1;
    sl_sup_watch(&s.l);
    ck_assert_int_eq(s.c[2].left_out, 0);
    s.c[1].ended = 1;
    sl_sup_watch(&s.l);
    ck_assert_int_eq(ending_signal(s.c[2].pid), SIGTERM);
    fflush(s.l.out);
    ck_assert_int_eq(s.c[2].left_out, 1);
    ck_assert_int_eq(s.l.culprit, -1);
    ck_assert_int_eq(s.l.lost, -1);
    ck_assert_int_eq(s.l.stopping, 0);
    ck_assert_msg(strstr(s.said, "shoal run: node 2 had not come back (restart 1 of 2) when the "
                                 "others had finished: stopping it; bmuf ends without it; 2 of 3 "
                                 "nodes live\n"),
                  "%s", s.said);
    assert_event("\"rank\":2,\"step\":120,\"why\":\"left out\",\"live\":2");
    sup_fini(&s);
}
END_TEST

static Suite *
supervisor_suite(void)
{
    Suite *s = suite_create("supervisor");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_dropped_node_restarted);
    tcase_add_test(tc, test_dropped_node_no_restarts_left);
    tcase_add_test(tc, test_no_restart_at_run_end);
    tcase_add_test(tc, test_latecomer_stopped_at_run_end);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return test_main_in_tmp(supervisor_suite(), tmp_root, "check_supervisor");
}
