/* shoal run's decisions about a node process that ended (src/node/sl_supervisor_int.h),
 * in one process on a supervisor's state made by hand: a node the others dropped (it
 * ended with SL_ERR_DROPPED: a comeback that some members admitted and others did not,
 * after a second failure) is started again like a dead one while restarts are left,
 * with its membership line and record; with none left, or while the run stops, it stops
 * the run as any failure does. The forked runs (kills, restarts, the watchdog) are in
 * check_launch_restart.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char path[600], *events;

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
    snprintf(path, sizeof path, "%s/events.jsonl", tmp_root);
    events = test_read_file(path, NULL);
    ck_assert_msg(strstr(events, "\"rank\":2,\"step\":40,\"why\":\"dropped\",\"live\":2"), "%s",
                  events);
    free(events);
    remove(path);
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

static Suite *
supervisor_suite(void)
{
    Suite *s = suite_create("supervisor");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_dropped_node_restarted);
    tcase_add_test(tc, test_dropped_node_no_restarts_left);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return test_main_in_tmp(supervisor_suite(), tmp_root, "check_supervisor");
}
