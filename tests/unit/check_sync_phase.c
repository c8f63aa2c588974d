/* Tests of the staggered sync phases (sync.stagger, src/sync/sl_sync_phase.h): the
 * phases of small sets of components and periods worked by hand, the sync points and
 * rounds they give; then three nodes (threads, test_util.h's trio) whose four one-float
 * components of period 4 sync at their own steps with ma, bmuf and gossip-bmuf (and
 * with overlap): after step t the nodes hold the same value of component c exactly when
 * t is c's sync point, each component's round count grows only there, and the final
 * average brings every component to the mean of the nodes'; a staggered run resumed from
 * its sync state ends with the bits of one that never stopped. With sync.stagger false
 * the same runs sync every component at the multiples of 4, as before the key existed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/sl_config.h"
#include "sync/sl_sync.h"
#include "sync/sl_sync_phase.h"

#include "test_tool.h"
#include "test_util.h"

/* ------------------------------------------------------------ phases by hand */

/* periods -> phases, j-th of m components of period H: floor(j H / m). */
START_TEST(test_phases_by_hand)
{
    static const struct {
        int n, period[6], want[6];
    } cases[] = {
        /* four of period 4: one per step */
        {4, {4, 4, 4, 4}, {0, 1, 2, 3}},
        /* two periods interleaved, three each: 16 -> 0, 16/3, 32/3; 128 -> 0, 42, 85 */
        {6, {16, 128, 16, 128, 128, 16}, {0, 0, 5, 42, 85, 10}},
        /* more components than steps (m 5 > H 2): 0, 2/5, 4/5, 6/5, 8/5 */
        {5, {2, 2, 2, 2, 2}, {0, 0, 0, 1, 1}},
        /* period 1 has only phase 0; a lone component keeps 0 */
        {4, {1, 1, 8, 1}, {0, 0, 0, 0}},
        /* two of 8: 0 and 4 */
        {3, {8, 3, 8}, {0, 0, 4}},
    };
    int phase[6];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_sync_phases(cases[i].period, cases[i].n, 1, phase);
        for (int c = 0; c < cases[i].n; c++)
            ck_assert_msg(phase[c] == cases[i].want[c], "case %zu component %d: phase %d, want %d",
                          i, c, phase[c], cases[i].want[c]);
        /* without stagger every phase is 0 */
        sl_sync_phases(cases[i].period, cases[i].n, 0, phase);
        for (int c = 0; c < cases[i].n; c++)
            ck_assert_int_eq(phase[c], 0);
    }
    /* H 4, p 3: sync points 1, 5, 9 as rounds 1, 2, 3; never step 0 */
    for (long t = 0; t <= 9; t++)
        ck_assert_int_eq(sl_sync_phase_point(t, 4, 3), t == 1 || t == 5 || t == 9);
    ck_assert_int_eq(sl_sync_phase_round(1, 4, 3), 1);
    ck_assert_int_eq(sl_sync_phase_round(5, 4, 3), 2);
    ck_assert_int_eq(sl_sync_phase_round(9, 4, 3), 3);
    /* p 0 is the old schedule: t mod H, round t / H */
    ck_assert(sl_sync_phase_point(8, 4, 0) && !sl_sync_phase_point(0, 4, 0));
    ck_assert_int_eq(sl_sync_phase_round(8, 4, 0), 2);
}
END_TEST

/* The sync object takes them from the config: the paper's (16, 128) by rules on the
 * trainer's component names, staggered per period. */
START_TEST(test_phases_from_config)
{
    static const sl_component_t comps[] = {
        {"embedding.0", 0, 1, 1, 0, 1, 1}, {"embedding.1", 1, 1, 1, 1, 1, 1},
        {"lstm.0", 2, 1, 0, 0, 0, 0},      {"lstm.1", 3, 1, 0, 0, 0, 0},
        {"softmax.0", 4, 1, 1, 0, 1, 1},   {"softmax_bias", 5, 1, 0, 0, 0, 0},
    };
    /* period 16: lstm.0, lstm.1, softmax_bias -> 0, 5, 10;
     * period 128: embedding.0, embedding.1, softmax.0 -> 0, 42, 85 */
    static const int want[] = {0, 42, 0, 5, 85, 10};
    float p[6] = {0};
    sl_config_t c;
    sl_sync_t *s = NULL;

    for (int stagger = 0; stagger < 2; stagger++) {
        sl_config_init(&c);
        ck_assert_int_eq(sl_config_set(&c, "sync={period: 16, embedding_period: 128}"), SL_OK);
        ck_assert_int_eq(sl_config_set(&c, stagger ? "sync.stagger=true" : "sync.stagger=false"),
                         SL_OK);
        ck_assert_msg(sl_sync_new(&s, &c, NULL, 0, 1, comps, 6, p, 6) == SL_OK, "%s", sl_err_msg());
        for (int i = 0; i < 6; i++)
            ck_assert_int_eq(sl_sync_phase(s, i), (stagger ? want[i] : 0));
        sl_sync_destroy(&s);
        sl_config_fini(&c);
    }
}
END_TEST

/* ------------------------------------------------------------ three nodes */

/* Four one-float components of period 4: staggered, lstm.c has phase c and syncs after
 * the steps t with (t + c) mod 4 = 0 (lstm.0: 4, 8; lstm.1: 3, 7; lstm.2: 2, 6;
 * lstm.3: 1, 5). */
enum { NC = 4, H = 4, STEPS = 8 };
static const sl_component_t four_comps[NC] = {
    {"lstm.0", 0, 1, 0, 0, 0, 0},
    {"lstm.1", 1, 1, 0, 0, 0, 0},
    {"lstm.2", 2, 1, 0, 0, 0, 0},
    {"lstm.3", 3, 1, 0, 0, 0, 0},
};

/* What each node holds before step b (after the sync of step b - 1), by node. */
static float seen[TEST_TRIO_N][STEPS + 2][NC];
static long seen_rounds[TEST_TRIO_N][STEPS + 2][NC];

/* Node k's local step: x = (k + 1) x / 2 + k + 1, which no two nodes share, so nodes hold
 * the same value only right after a sync. */
static void
record_and_step(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)tr;
    for (int c = 0; c < NC; c++) {
        seen[k][b][c] = p[c];
        seen_rounds[k][b][c] = sl_sync_stat(s, c)->rounds;
        p[c] = 0.5f * (float)(k + 1) * p[c] + (float)(k + 1);
    }
}

/* The syncs of component c up to step t with phase p. */
static long
points_until(long t, int p)
{
    long n = 0;
    for (long u = 1; u <= t; u++)
        n += sl_sync_phase_point(u, H, p);
    return n;
}

/* Runs conf on three nodes for STEPS + 1 steps with the final average, and checks the
 * schedule of phases want_phase: rounds grow at each component's sync points only and,
 * with agree (ma, bmuf: every node ends a sync with the same bits), the nodes hold the
 * same value of c after step t exactly when t is its sync point; then the final average
 * of every component is the mean of the nodes' values. */
static void
run_schedule(const char *conf, const char *conf2, const int *want_phase, int agree)
{
    static test_trio_t tr;

    memset(seen, 0, sizeof seen);
    memset(seen_rounds, 0, sizeof seen_rounds);
    test_trio_init(&tr, conf, test_trio_zero);
    tr.conf2 = conf2;
    tr.comps = four_comps;
    tr.ncomps = NC;
    tr.np = NC;
    tr.blocks = STEPS + 1;
    tr.step = record_and_step;
    tr.final = 1;
    test_trio_run(&tr);
    for (int k = 0; k < TEST_TRIO_N; k++)
        for (long t = 1; t <= STEPS; t++)
            for (int c = 0; c < NC; c++)
                ck_assert_msg(seen_rounds[k][t + 1][c] == points_until(t, want_phase[c]),
                              "%s %s: node %d, %s after step %ld: %ld rounds, want %ld", conf,
                              conf2 ? conf2 : "", k, four_comps[c].name, t,
                              seen_rounds[k][t + 1][c], points_until(t, want_phase[c]));
    for (long t = 1; agree && t <= STEPS; t++)
        for (int c = 0; c < NC; c++) {
            int same =
                seen[0][t + 1][c] == seen[1][t + 1][c] && seen[1][t + 1][c] == seen[2][t + 1][c];
            ck_assert_msg(same == sl_sync_phase_point(t, H, want_phase[c]),
                          "%s: %s after step %ld: nodes hold %g %g %g", conf, four_comps[c].name, t,
                          seen[0][t + 1][c], seen[1][t + 1][c], seen[2][t + 1][c]);
        }
    for (int k = 0; k < TEST_TRIO_N; k++) {
        if (!tr.writer[k])
            continue;
        ck_assert_int_eq(tr.nmodels[k], TEST_TRIO_N);
        for (int c = 0; c < NC; c++) {
            double mean = ((double)tr.p[0][c] + tr.p[1][c] + tr.p[2][c]) / 3;
            ck_assert_msg(fabs(tr.avg[k][c] - mean) <= 1e-5 * fabs(mean),
                          "%s: final %s %g, want %g", conf, four_comps[c].name, tr.avg[k][c], mean);
        }
    }
    ck_assert_int_eq(tr.writer[0] + tr.writer[1] + tr.writer[2], 1);
}

static const int staggered[NC] = {0, 1, 2, 3}, unstaggered[NC] = {0, 0, 0, 0};

START_TEST(test_stagger_ma)
{
    run_schedule("sync={algorithm: ma, period: 4, stagger: true}", NULL, staggered, 1);
}
END_TEST

START_TEST(test_stagger_bmuf)
{
    /* the DiLoCo outer step: Nesterov, zeta 0.7, eta 0.9 */
    run_schedule("sync={algorithm: bmuf, period: 4, stagger: true, block_lr: 0.7}",
                 "sync.block_momentum=0.9", staggered, 1);
}
END_TEST

START_TEST(test_stagger_gossip_bmuf)
{
    run_schedule("sync={algorithm: gossip-bmuf, period: 4, stagger: true}", NULL, staggered, 0);
}
END_TEST

/* With overlap (tau 1 < H) the hand-overs follow the phases too: a round is counted when
 * its update is applied, one step after the component's sync point, so after 8 steps
 * lstm.0 (sync points 4, 8) has one and the others (3, 7; 2, 6; 1, 5) two. */
START_TEST(test_stagger_overlap)
{
    static test_trio_t tr;

    test_trio_init(&tr,
                   "sync={algorithm: bmuf, period: 4, stagger: true, overlap_steps: 1, "
                   "overlap_dense: true}",
                   test_trio_zero);
    tr.comps = four_comps;
    tr.ncomps = NC;
    tr.np = NC;
    tr.blocks = STEPS;
    tr.step = record_and_step;
    test_trio_run(&tr);
    /* lstm.0's update of step 8 is still pending */
    for (int k = 0; k < TEST_TRIO_N; k++)
        for (int c = 0; c < NC; c++)
            ck_assert_int_eq(tr.stat[k][c].rounds, (c == 0 ? 1 : 2));
    /* lstm.3's first update comes after step 2, lstm.0's after step 5 */
    for (int k = 0; k < TEST_TRIO_N; k++) {
        ck_assert_int_eq(seen_rounds[k][2][3], 0);
        ck_assert_int_eq(seen_rounds[k][3][3], 1);
        ck_assert_int_eq(seen_rounds[k][5][0], 0);
        ck_assert_int_eq(seen_rounds[k][6][0], 1);
    }
}
END_TEST

/* A staggered run checkpointed after step 5 (sl_sync_state_save) and resumed from it by
 * new sync objects at step 6 ends with the same bits as one that never stopped: the
 * phases and rounds come from the config and the step count, not from what a node
 * counted. gossip-bmuf's neighbours are drawn per round, so a round off by one would
 * pull from others. */
START_TEST(test_stagger_resume)
{
    static const char *const confs[] = {
        "sync={algorithm: gossip-bmuf, period: 4, stagger: true}",
        "sync={algorithm: bmuf, period: 4, stagger: true}",
    };
    static test_trio_t straight, half, resumed;

    for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++) {
        test_trio_t *runs[] = {&straight, &half, &resumed};
        for (int r = 0; r < 3; r++) {
            test_trio_init(runs[r], confs[i], test_trio_zero);
            runs[r]->comps = four_comps;
            runs[r]->ncomps = NC;
            runs[r]->np = NC;
            runs[r]->step = record_and_step;
        }
        straight.blocks = STEPS + 1;
        test_trio_run(&straight);
        half.blocks = 5;
        half.save_state = 1;
        test_trio_run(&half);
        memcpy(resumed.p, half.p, sizeof half.p);
        resumed.first = 6;
        resumed.blocks = STEPS + 1 - 5;
        for (int k = 0; k < TEST_TRIO_N; k++) {
            resumed.state_in[k] = half.state_out[k];
            resumed.state_in_len[k] = half.state_out_len[k];
        }
        test_trio_run(&resumed);
        for (int k = 0; k < TEST_TRIO_N; k++) {
            test_assert_floats(resumed.p[k], straight.p[k], NC);
            free(half.state_out[k]);
        }
    }
}
END_TEST

/* sync.stagger false (the default, and spelt out): every component syncs at the
 * multiples of 4, all at once. */
START_TEST(test_stagger_off)
{
    run_schedule("sync={algorithm: ma, period: 4}", NULL, unstaggered, 1);
    run_schedule("sync={algorithm: bmuf, period: 4, stagger: false}", NULL, unstaggered, 1);
}
END_TEST

static Suite *
sync_phase_suite(void)
{
    Suite *s = suite_create("sync_phase");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_phases_by_hand);
    tcase_add_test(core, test_phases_from_config);
    tcase_add_test(core, test_stagger_ma);
    tcase_add_test(core, test_stagger_bmuf);
    tcase_add_test(core, test_stagger_gossip_bmuf);
    tcase_add_test(core, test_stagger_overlap);
    tcase_add_test(core, test_stagger_resume);
    tcase_add_test(limits, test_stagger_off);
    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sync_phase_suite());
}
