/* Tests of src/sync's final model on 3 in-process nodes (threads over loopback
 * transports, test_util.h's trio): a gossip run without rank 0 (who gathers, the average
 * and who gets it back, the waits; nodes agreeing or not on rank 0's death), a node
 * that ends late but trains on (rank 0 or another: one writer, every model in), rank 0
 * silent and then late, following a claim made without it, a late node that is not
 * dead, and bad frames of the gathering. */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "config/sl_config.h"
#include "sync/sl_sync.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"

#include "test_tool.h"
#include "test_util.h"

/* The final model of a gossip run without rank 0 (sl_sync_final: the lowest node alive
 * at the end gathers; a rank that gives no sign of life for sync.timeout_ms is out), on
 * 3 in-process nodes of one 4-float component, sync.timeout_ms T = 300. The writer
 * sends its average back to the nodes whose models are in it, which then hold it too,
 * bit for bit:
 *   node 1 = [1, -2, 3, 0.5], node 2 = [3, 4, -1, 1.5] (node 0's values are never sent)
 * case 0: node 0 never runs, no blocks: nodes 1 and 2 each wait T for a sign of node 0,
 *   then node 1 gathers (and claims node 2): the writer, 2 models,
 *   ([1, -2, 3, 0.5] + [3, 4, -1, 1.5]) / 2 = [2, 1, 1, 1]; node 2 is not a writer
 *   but holds it.
 * case 1: only node 2 runs: nodes 0 and 1 give no sign for T and it writes its own
 *   model, 1 model.
 * case 2: the nodes disagree on node 0: gossip-ma q = 1, 3 blocks without node 0, with a
 *   seed where node 1 pulls from node 0 in all three (it times out and keeps its model
 *   each time, then holds node 0 for dead) and node 2 from node 1 (it never misses
 *   node 0; it starts blocks 2 and 3 once node 1 has ended the block before): node 2
 *   becomes ([3, 4, -1, 1.5] + [1, -2, 3, 0.5]) / 2 = [2, 1, 1, 1], then
 *   [1.5, -0.5, 2, 0.75], then [1.25, -1.25, 2.5, 0.625]. The gathering does not go by
 *   the liveness table: both wait T for a sign of node 0, node 1 gathers and writes
 *   ([1, -2, 3, 0.5] + [1.25, -1.25, 2.5, 0.625]) / 2 = [1.125, -1.625, 2.75, 0.5625].
 * case 3: every node runs, node 0 = [100, 100, 100, 100], but node 2 comes late and
 *   silent (no sign of training: it waits, outside the sync, until node 0's
 *   sl_sync_final has returned): node 0 waits T for it, then writes
 *   ([100, 100, 100, 100] + [1, -2, 3, 0.5]) / 2 = [50.5, 49, 51.5, 50.25] and tells
 *   node 2 its model is not in, so node 2 stops there rather than gather a model of its
 *   own (a second writer); node 1 holds the average, node 2 none. */
/* The gathering cases' sync: T = 1.5 s, long enough that a loaded machine's stalls do
 * not make a node miss its signs. */
#define GOSSIP_FINAL "sync={algorithm: gossip-ma, neighbours: 1, period: 1, timeout_ms: 1500}"

static const sl_component_t final_comp[1] = {{"lstm.0", 0, 4, 0, 0, 0, 0}};

static float
final_start(int k, int i)
{
    static const float v[TEST_TRIO_N][4] = {
        {100, 100, 100, 100}, {1, -2, 3, 0.5f}, {3, 4, -1, 1.5f}};
    return i < 4 ? v[k][i] : 0; /* test_trio_init fills TEST_TRIO_NP floats; the model has 4 */
}

/* The trio of final_start's models (the one component final_comp) under the sync
 * configuration conf: blocks blocks, step before each, then sl_sync_final when final. */
static void
final_trio_init(test_trio_t *tr, const char *conf, int blocks, test_trio_step_fn step, int final)
{
    test_trio_init(tr, conf, final_start);
    tr->comps = final_comp;
    tr->ncomps = 1;
    tr->np = 4;
    tr->blocks = blocks;
    tr->step = step;
    tr->final = final;
}

/* One writer, node writer, and every node holding the average of all three models,
 * bit for bit the mean summed in the order a, b, c. */
static void
assert_mean_of_three(const test_trio_t *tr, int writer, int a, int b, int c)
{
    float want[4], inv = 1.0f / 3.0f;

    for (int i = 0; i < 4; i++) {
        want[i] = tr->p[a][i];
        want[i] += tr->p[b][i];
        want[i] += tr->p[c][i];
        want[i] *= inv;
    }
    for (int k = 0; k < TEST_TRIO_N; k++) {
        ck_assert_msg(tr->writer[k] == (k == writer), "node %d: writer %d", k, tr->writer[k]);
        ck_assert_msg(tr->has_avg[k], "node %d holds no average", k);
        ck_assert_msg(tr->nmodels[k] == 3, "node %d: an average of %d models", k, tr->nmodels[k]);
        test_assert_floats(tr->avg[k], want, 4);
    }
}

/* Node 1 waits T for node 0 in every block, so its pushes come T later each block:
 * node 2 starts block b > 1 once node 1 has ended block b - 1, so as not to run ahead
 * and time out on node 1's push of block b, which comes right after. */
static void
lag_node2(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)s;
    (void)p;
    if (k == 2 && b > 1)
        test_trio_wait(tr, 1, b - 1, 0);
}

/* A run.seed under which, in rounds 1..3 of component 0 (gossip, q = 1, n = 3), node 1
 * pulls from node 0 and node 2 from node 1 every time. */
static uint64_t
disagreeing_seed(void)
{
    for (uint64_t seed = 1; seed < 100000; seed++) {
        sl_schedule_t sch;
        int ok = 1;

        ck_assert_int_eq(
            sl_schedule_init(&sch, TEST_TRIO_N, sl_ring_default_degree(TEST_TRIO_N), 1, seed),
            SL_OK);
        for (uint64_t r = 1; r <= 3 && ok; r++) {
            int ch[4], cnt;
            ck_assert_int_eq(sl_schedule_chosen(&sch, r, 0, 1, ch, 4, &cnt), SL_OK);
            ok = ch[0] == 0;
            ck_assert_int_eq(sl_schedule_chosen(&sch, r, 0, 2, ch, 4, &cnt), SL_OK);
            ok = ok && ch[0] == 1;
        }
        if (ok)
            return seed;
    }
    ck_abort_msg("no seed where node 1 pulls from node 0 three times in a row");
    return 0;
}

/* Node 2 is one block behind in local-ma (every node waits for both others): it starts
 * block b once nodes 0 and 1 have ended it, so they time out on it in every round; they
 * start block b + 1 once node 2 has ended block b, so its push of block b reaches them
 * during their wait of block b + 1, dropped as stale. Late is not dead: they never hold
 * it for dead, though it misses every round; a silent node is (test_final_without_rank0,
 * case 2). */
static void
late_node2(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)s;
    (void)p;
    if (k == 2) {
        test_trio_wait(tr, 0, b, 0);
        test_trio_wait(tr, 1, b, 0);
    } else if (b > 1) {
        test_trio_wait(tr, 2, b - 1, 0);
    }
}

START_TEST(test_late_is_not_dead)
{
    static test_trio_t tr;

    final_trio_init(&tr, "sync={algorithm: local-ma, period: 1, timeout_ms: 200}", 8, late_node2,
                    0);
    test_trio_run(&tr);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(tr.stat[k][0].answered + 8 <= tr.stat[k][0].expected,
                      "node %d: node 2 was not late in every round (%llu of %llu answered)", k,
                      (unsigned long long)tr.stat[k][0].answered,
                      (unsigned long long)tr.stat[k][0].expected);
        ck_assert_msg(tr.ndead[k] == 0, "node %d holds %d nodes for dead", k, tr.ndead[k]);
    }
    ck_assert_int_eq(tr.ndead[2], 0);
}
END_TEST

START_TEST(test_final_without_rank0)
{
    static test_trio_t tr;
    static const float want[4][4] = {{2, 1, 1, 1},
                                     {3, 4, -1, 1.5f},
                                     {1.125f, -1.625f, 2.75f, 0.5625f},
                                     {50.5f, 49, 51.5f, 50.25f}};
    static const int writer[4] = {1, 2, 1, 0}, nmodels[4] = {2, 1, 2, 2};
    /* T long enough that a loaded machine's stalls do not make a node miss its signs */
    const double t = 1.5;
    char seed[64];
    int w = writer[_i];

    final_trio_init(&tr, GOSSIP_FINAL, _i == 2 ? 3 : 0, lag_node2, 1);
    tr.alive[0] = _i == 3;
    tr.alive[1] = _i != 1;
    if (_i == 2) {
        snprintf(seed, sizeof seed, "run.seed=%" PRIu64, disagreeing_seed());
        tr.conf2 = seed;
    }
    tr.late[2] = _i == 3;
    test_trio_run(&tr);
    /* the gatherer sends the average back to every node in it: all but the late one
     * hold it, bit for bit */
    for (int k = 0; k < TEST_TRIO_N; k++) {
        if (!tr.alive[k])
            continue;
        ck_assert_int_eq(tr.writer[k], k == w);
        ck_assert_int_eq(tr.has_avg[k], !tr.late[k]);
        if (!tr.has_avg[k])
            continue;
        ck_assert_int_eq(tr.nmodels[k], nmodels[_i]);
        ck_assert(memcmp(tr.avg[k], tr.avg[w], sizeof tr.avg[k]) == 0);
    }
    ck_assert_int_eq(tr.nmodels[w], nmodels[_i]);
    test_assert_floats(tr.avg[w], want[_i], 4);
    if (_i == 2) {
        ck_assert_int_eq(tr.dead0[1], 1);
        ck_assert_int_eq(tr.dead0[2], 0);
    }
    /* The waits, as lower bounds that a slow machine cannot break: case 0: node 1
     * waited T for a sign of node 0 before it gathered, and node 2 ended after that;
     * case 1: node 2 waited T for nodes 0 and 1; case 2: node 1, though it held node 0
     * for dead, waited T too. Case 3 needs no clock: without node 0's "without you"
     * node 2 would have gathered a model of its own (a second writer, checked above). */
    if (_i == 0 || _i == 2) {
        ck_assert_msg(tr.final_t1[1] - tr.final_t0[1] >= t - 0.01, "node 1: %.3f s",
                      tr.final_t1[1] - tr.final_t0[1]);
        ck_assert_msg(tr.final_t1[2] >= tr.final_t0[1] + t - 0.01,
                      "node 2 ended %.3f s after node 1 entered", tr.final_t1[2] - tr.final_t0[1]);
    }
    if (_i == 1)
        ck_assert_msg(tr.final_t1[2] - tr.final_t0[2] >= t - 0.01, "node 2: %.3f s",
                      tr.final_t1[2] - tr.final_t0[2]);
}
END_TEST

/* The late end of a node that trains on while the others are at the end
 * (test_late_end): node late_rank, before its block 1, answers the signs of the others
 * as a train loop does between its steps (sl_sync_still_training), until it has taken
 * LATE_SIGNS of them. The others send theirs every T / 4 (T = 200 ms), so that is
 * several T after they entered sl_sync_final: an end later than one sync timeout, which
 * a wait counted from the first arrival would not cover. */
enum { LATE_SIGNS = 24 };
static int late_rank, late_took;

static void
end_late(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)tr;
    (void)b;
    (void)p;
    while (k == late_rank && late_took < LATE_SIGNS) {
        int n;

        if (sl_sync_still_training(s, 5000, &n) != SL_OK || n == 0)
            return; /* late_took stays short: the test fails on it */
        late_took += n;
    }
}

/* A node that ends late but trains on is waited for, and there is one writer: the
 * lowest node alive. Case 0: rank 0 ends late (it had come back, say) while nodes 1
 * and 2 are at the end: they wait for it as long as it says it trains, rather than
 * gather without it, and rank 0 gathers all three. Case 1: node 2 ends late: rank 0
 * gathers at once and waits for it. gossip-ma, one block; every node holds the average
 * of all three models after the block, bit for bit the mean in rank order. */
START_TEST(test_late_end)
{
    static test_trio_t tr;

    late_rank = _i == 0 ? 0 : 2;
    late_took = 0;
    final_trio_init(&tr, GOSSIP_FINAL, 1, end_late, 1);
    test_trio_run(&tr);
    assert_mean_of_three(&tr, 0, 0, 1, 2);
    ck_assert_int_ge(late_took, LATE_SIGNS);
    for (int k = 0; k < TEST_TRIO_N; k++)
        if (k != late_rank)
            ck_assert_msg(tr.final_t0[late_rank] - tr.final_t0[k] > 0.2,
                          "node %d entered only %.3f s before node %d", k,
                          tr.final_t0[late_rank] - tr.final_t0[k], late_rank);
}
END_TEST

/* test_silent_rank0_follows: rank 0, silent (stopped, or slow to come back), may go on
 * once node 2 has set this (under tr->mu, tr->cv signalled). */
static int rank0_go;

/* Rank 0 waits, silent, for rank0_go; node 2 trains on late (sl_sync_still_training):
 * after LATE_SIGNS / 2 signs of node 1 (so node 1 took rank 0 for out and claimed) it
 * lets rank 0 go, answers signs until rank 0 has ended its block (it then enters
 * sl_sync_final at once), and 4 more (a sign period and more), so that rank 0's sign of
 * the end has reached node 1 before node 2 ends its training. */
static void
silent_rank0(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    int n, done0 = 0, after = 0;

    (void)b;
    (void)p;
    if (k == 0) {
        pthread_mutex_lock(&tr->mu);
        while (!rank0_go)
            pthread_cond_wait(&tr->cv, &tr->mu);
        pthread_mutex_unlock(&tr->mu);
    }
    while (k == 2 && after < 4) {
        if (sl_sync_still_training(s, 5000, &n) != SL_OK || n == 0)
            return; /* late_took stays short: the test fails on it */
        late_took += n;
        if (late_took >= LATE_SIGNS / 2 && !rank0_go) {
            pthread_mutex_lock(&tr->mu);
            rank0_go = 1;
            pthread_cond_broadcast(&tr->cv);
            pthread_mutex_unlock(&tr->mu);
        }
        if (done0)
            after += n;
        pthread_mutex_lock(&tr->mu);
        done0 = tr->blocks_done[0] >= 1;
        pthread_mutex_unlock(&tr->mu);
    }
}

/* The split of a churn trial: rank 0 gives no sign while the others come to the end
 * (it had been restarted and was slow to come back, say), so node 1 takes it for out
 * and claims the gathering; rank 0 then comes to the end while node 1 still waits for
 * node 2, which trains on. Rank 0 finds node 1's claim and follows it rather than
 * gather a model of its own (a second writer), and node 1 takes it in: one writer,
 * node 1, the average of all three, summed in node 1's order (its rank order, then
 * rank 0 come late): (p1 + p2 + p0) / 3, held bit for bit by every node. */
START_TEST(test_silent_rank0_follows)
{
    static test_trio_t tr;

    rank0_go = 0;
    late_took = 0;
    final_trio_init(&tr, GOSSIP_FINAL, 1, silent_rank0, 1);
    test_trio_run(&tr);
    assert_mean_of_three(&tr, 1, 1, 2, 0);
    ck_assert_int_ge(late_took, LATE_SIGNS / 2);
}
END_TEST

/* Bad frames of the gathering (test_bad_frames), case by case, from a gatherer node 0
 * that the test plays: the average sent back with a count of 3 bytes; a count of 9
 * models (of 3 nodes); a good count, then 3 of the component's 4 floats; a claim with a
 * payload. */
static int bad_case;

/* Node 0 played by the test: claims the gathering (a claim to nodes 1 and 2, with 3
 * bytes in case 3), takes their models (component 0, 4 floats), then sends each the bad
 * average of bad_case. */
static void
bad_gatherer(test_trio_t *tr, int k)
{
    float model[4];
    unsigned char count[4] = {3, 0, 0, 0};
    size_t got;

    (void)k;
    if (bad_case == 1)
        count[0] = 9;
    for (uint32_t r = 1; r < TEST_TRIO_N; r++) {
        sl_wire_key_t claim = {1, 2, 0, r, SL_WIRE_DATA}; /* component ncomps + 1 */

        tr->st[0] = sl_transport_send(tr->t[0], &claim, "abc", bad_case == 3 ? 3 : 0, SL_WIRE_BYTES,
                                      1.0f, 0, 5000);
        if (tr->st[0] != SL_OK) {
            snprintf(tr->err[0], sizeof tr->err[0], "%s", sl_err_msg());
            return;
        }
    }
    for (uint32_t r = 1; r < TEST_TRIO_N && bad_case < 3; r++) {
        sl_wire_key_t model_key = {1, 0, 0, r, SL_WIRE_DATA}, back = {1, 1, 1, r, SL_WIRE_DATA};

        tr->st[0] = sl_transport_recv(tr->t[0], &model_key, model, sizeof model, &got, 5000);
        if (tr->st[0] == SL_OK)
            tr->st[0] = sl_transport_send(tr->t[0], &back, count, bad_case == 0 ? 3 : 4,
                                          SL_WIRE_BYTES, 1.0f, 0, 5000);
        back.component = 0;
        if (tr->st[0] == SL_OK && bad_case == 2)
            tr->st[0] = sl_transport_send(tr->t[0], &back, model, 3, SL_WIRE_FP32, 1.0f, 0, 5000);
        if (tr->st[0] != SL_OK) {
            snprintf(tr->err[0], sizeof tr->err[0], "%s", sl_err_msg());
            return;
        }
    }
    /* the others read the frames before this transport goes */
    test_trio_wait(tr, 1, 0, 1);
    test_trio_wait(tr, 2, 0, 1);
}

/* Node 1 played by the test (test_bad_frames case 4): once node 0 claims, sends it a
 * model of 3 floats, not 4. */
static void
short_sender(test_trio_t *tr, int k)
{
    sl_wire_key_t claim = {1, 2, 0, 0, SL_WIRE_DATA}, model = {1, 0, 0, 0, SL_WIRE_DATA};
    const float v[3] = {1, 2, 3};
    size_t got;

    (void)k;
    tr->st[1] = sl_transport_recv(tr->t[1], &claim, NULL, 0, &got, 5000);
    if (tr->st[1] == SL_OK)
        tr->st[1] = sl_transport_send(tr->t[1], &model, v, 3, SL_WIRE_FP32, 1.0f, 0, 5000);
    if (tr->st[1] != SL_OK)
        snprintf(tr->err[1], sizeof tr->err[1], "%s", sl_err_msg());
    test_trio_wait(tr, 0, 0, 1);
}

/* Frames of the gathering are checked: a count of the wrong size, a count the gatherer
 * cannot have averaged, a component of the wrong size sent back, a sign with a payload
 * are each an error of the node that got it, one line naming the sender and what was
 * wrong; so is a model of the wrong size sent to the gatherer (case 4: node 2 then
 * finds node 0 gone silent and writes its own model). */
START_TEST(test_bad_frames)
{
    static test_trio_t tr;
    static const char *const want[5] = {
        "sync: the final model sent back by node 0: its count in 3 bytes, not 4",
        "sync: the final model sent back by node 0: an average of 9 models, not 2 to 3",
        "sync: the final model sent back by node 0: 12 bytes of lstm.0, not 16",
        "sync: final model: node 0 sent a claim of 3 bytes, not 0",
        "sync: node 1 sent 12 bytes of lstm.0, not 16 fp32"};

    bad_case = _i;
    final_trio_init(&tr, "sync={algorithm: gossip-ma, neighbours: 1, period: 1, timeout_ms: 2000}",
                    0, NULL, 1);
    if (_i < 4) {
        tr.stand_in[0] = bad_gatherer;
        tr.fails[1] = tr.fails[2] = 1;
    } else {
        tr.stand_in[1] = short_sender;
        tr.fails[0] = 1;
    }
    test_trio_run(&tr);
    for (int k = _i < 4 ? 1 : 0; k < (_i < 4 ? TEST_TRIO_N : 1); k++) {
        ck_assert_msg(strcmp(tr.err[k], want[_i]) == 0, "node %d: %s", k, tr.err[k]);
        ck_assert_int_eq(tr.has_avg[k], 0);
    }
    if (_i == 4) {
        ck_assert_int_eq(tr.writer[2], 1);
        ck_assert_int_eq(tr.nmodels[2], 1);
    }
}
END_TEST

static Suite *
sync_final_suite(void)
{
    Suite *s = suite_create("sync_final");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_loop_test(core, test_final_without_rank0, 0, 4);
    tcase_add_test(core, test_late_is_not_dead);
    tcase_add_loop_test(core, test_late_end, 0, 2);
    tcase_add_test(core, test_silent_rank0_follows);
    tcase_add_loop_test(limits, test_bad_frames, 0, 5);
    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sync_final_suite());
}
