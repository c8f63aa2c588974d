/* Tests of src/sync: the BMUF maths worked by hand on 3 nodes for every algorithm (a
 * gossip round with a missing peer included), gossip-MA consensus against the spectral
 * gap; sync.periods: which rule gives a component its period, and 3 nodes whose two
 * components sync every 1 and every 3 steps worked by hand. The Zipf-unique sparse
 * exchange and the sync state are in check_sync_rows.c, the final model in
 * check_sync_final.c, the `shoal run` integration runs in check_runs.c. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_log.h"
#include "config/sl_config.h"
#include "sync/sl_bmuf.h"
#include "sync/sl_sync.h"
#include "topology/sl_mixing.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"

#include "test_tool.h"
#include "test_util.h"

/* ------------------------------------------------------------ maths by hand */

/* Three nodes, a component of two floats:
 *   node 0: theta = [1, -2]   node 1: [3, 0]   node 2: [8, 5]
 * ma (allreduce over n = 3) and local-ma (n = 3, k = 1: both other nodes are
 * neighbours) give every node the mean [(1+3+8)/3, (-2+0+5)/3] = [4, 1]. */
START_TEST(test_ma_three_nodes)
{
    float th[3][2] = {{1, -2}, {3, 0}, {8, 5}}, rows[2][2], bar[2];
    const float want[2] = {4, 1};

    for (int i = 0; i < 3; i++) {
        for (int j = 0, r = 0; j < 3; j++)
            if (j != i)
                memcpy(rows[r++], th[j], sizeof rows[0]);
        sl_bmuf_mean(bar, th[i], &rows[0][0], 2, 2);
        test_assert_floats(bar, want, 2);
    }
    /* the neighbourhood of local-* on 3 nodes is everyone */
    {
        int nb[4], cnt;
        ck_assert_int_eq(sl_ring_neighbours(3, 1, 0, nb, 4, &cnt), SL_OK);
        ck_assert_int_eq(cnt, 2);
        ck_assert_int_eq(nb[0], 1);
        ck_assert_int_eq(nb[1], 2);
    }
    /* distance of node 2 to the mean: ||[8,5] - [4,1]|| = sqrt(32) */
    ck_assert(fabs(sl_bmuf_distance(th[2], want, 2) - sqrt(32.0)) < 1e-12);
}
END_TEST

/* gossip-MA, q = 1 on the same three nodes, one round, pulls chosen by hand:
 * node 0 pulls from 2, node 1 from 0, node 2 from 1:
 *   node 0: ([1,-2] + [8,5]) / 2 = [4.5, 1.5]
 *   node 1: ([3, 0] + [1,-2]) / 2 = [2, -1]
 *   node 2: ([8, 5] + [3, 0]) / 2 = [5.5, 2.5]
 * Then a round where node 0 pulls from 1 and 2 (q = 2) but node 2 does not answer:
 * the average is over self and node 1 only: ([4.5,1.5] + [2,-1]) / 2 = [3.25, 0.25]. */
START_TEST(test_gossip_ma_missing_peer)
{
    float th[3][2] = {{1, -2}, {3, 0}, {8, 5}}, next[3][2];
    const int pull[3] = {2, 0, 1};
    const float want[3][2] = {{4.5f, 1.5f}, {2, -1}, {5.5f, 2.5f}}, want2[2] = {3.25f, 0.25f};

    for (int i = 0; i < 3; i++)
        sl_bmuf_mean(next[i], th[i], th[pull[i]], 1, 2);
    for (int i = 0; i < 3; i++)
        test_assert_floats(next[i], want[i], 2);
    /* received: only node 1's snapshot (node 2 timed out) */
    sl_bmuf_mean(th[0], next[0], next[1], 1, 2);
    test_assert_floats(th[0], want2, 2);
    /* nobody answered: the average is the node itself */
    sl_bmuf_mean(th[1], next[1], NULL, 0, 2);
    test_assert_floats(th[1], want[1], 2);
}
END_TEST

/* BMUF block update, eta 0.5, zeta 1, Nesterov, on one node of the three after an MA
 * average bar = [3, 0] (all values exact in binary):
 *   state: theta (after local steps, unused by the maths) [2, 1], omega [1, 1],
 *          Delta [0.5, 0], block start [1.5, 0.5]
 * reference blockstart: G = bar - start = [1.5, -0.5]
 *   Delta = 0.5*[0.5,0] + [1.5,-0.5] = [1.75, -0.5]; omega = [2.75, 0.5]
 *   theta = omega + 0.5*Delta = [3.625, 0.25]; start = theta
 * reference omega: G = bar - omega = [2, -1]
 *   Delta = [2.25, -1]; omega = [3.25, 0]; theta = [4.375, -0.5]
 * plain momentum (no Nesterov), blockstart: theta = omega = [2.75, 0.5]
 * zeta 0.5, blockstart: Delta = [0.25+0.75, -0.25] = [1, -0.25]; omega = [2, 0.75];
 *   theta = [2.5, 0.625] */
static void
bmuf_case(float eta, float zeta, int nesterov, sl_block_ref_t ref, const float *want_theta,
          const float *want_omega, const float *want_delta)
{
    sl_bmuf_opts_t o = {eta, zeta, nesterov, ref};
    float theta[2] = {2, 1}, bar[2] = {3, 0}, omega[2] = {1, 1}, delta[2] = {0.5f, 0},
          start[2] = {1.5f, 0.5f};

    sl_bmuf_update(&o, theta, bar, omega, delta, start, 2);
    test_assert_floats(theta, want_theta, 2);
    test_assert_floats(omega, want_omega, 2);
    test_assert_floats(delta, want_delta, 2);
    test_assert_floats(start, want_theta, 2);
}

START_TEST(test_bmuf_by_hand)
{
    bmuf_case(0.5f, 1, 1, SL_BLOCK_REF_BLOCKSTART, (const float[]){3.625f, 0.25f},
              (const float[]){2.75f, 0.5f}, (const float[]){1.75f, -0.5f});
    bmuf_case(0.5f, 1, 1, SL_BLOCK_REF_OMEGA, (const float[]){4.375f, -0.5f},
              (const float[]){3.25f, 0}, (const float[]){2.25f, -1});
    bmuf_case(0.5f, 1, 0, SL_BLOCK_REF_BLOCKSTART, (const float[]){2.75f, 0.5f},
              (const float[]){2.75f, 0.5f}, (const float[]){1.75f, -0.5f});
    bmuf_case(0.5f, 0.5f, 1, SL_BLOCK_REF_BLOCKSTART, (const float[]){2.5f, 0.625f},
              (const float[]){2, 0.75f}, (const float[]){1, -0.25f});
}
END_TEST

/* gossip-BMUF on three nodes, two blocks, eta 0.5, zeta 1, Nesterov, blockstart, every
 * node starting at omega = start = its theta0 and Delta = 0; a one-float component.
 *   theta0 = [0, 0, 0]; local steps move the nodes to [2, 4, 6]
 *   block 1, pulls 0<-1, 1<-2, 2<-0: bar = [3, 5, 4]; G = bar - 0 = bar
 *     Delta = [3, 5, 4]; omega = [3, 5, 4]; theta = omega + Delta/2 = [4.5, 7.5, 6]
 *   local steps add +1 to every node: [5.5, 8.5, 7]
 *   block 2, node 1 pulls from 0, node 0 from 2 but node 2 is missing (node 0 averages
 *     with itself only), node 2 from 1:
 *     bar = [5.5, (8.5+5.5)/2 = 7, (7+8.5)/2 = 7.75]
 *     G = bar - start = [5.5-4.5, 7-7.5, 7.75-6] = [1, -0.5, 1.75]
 *     Delta = 0.5*[3,5,4] + G = [2.5, 2, 3.75]; omega = [5.5, 7, 7.75]
 *     theta = omega + Delta/2 = [6.75, 8, 9.625] */
START_TEST(test_gossip_bmuf_two_blocks)
{
    sl_bmuf_opts_t o = {0.5f, 1, 1, SL_BLOCK_REF_BLOCKSTART};
    float th[3] = {0, 0, 0}, om[3] = {0, 0, 0}, de[3] = {0, 0, 0}, st[3] = {0, 0, 0};
    float bar[3];
    const int pull1[3] = {1, 2, 0};
    const float want1[3] = {4.5f, 7.5f, 6}, want2[3] = {6.75f, 8, 9.625f};

    for (int i = 0; i < 3; i++)
        th[i] = 2.0f * (float)(i + 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_mean(&bar[i], &th[i], &th[pull1[i]], 1, 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_update(&o, &th[i], &bar[i], &om[i], &de[i], &st[i], 1);
    test_assert_floats(th, want1, 3);
    for (int i = 0; i < 3; i++)
        th[i] += 1;
    sl_bmuf_mean(&bar[0], &th[0], NULL, 0, 1); /* node 2 did not answer node 0 */
    sl_bmuf_mean(&bar[1], &th[1], &th[0], 1, 1);
    sl_bmuf_mean(&bar[2], &th[2], &th[1], 1, 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_update(&o, &th[i], &bar[i], &om[i], &de[i], &st[i], 1);
    test_assert_floats(th, want2, 3);
}
END_TEST

/* Config -> options, and a single node's sync object does nothing. */
START_TEST(test_sync_single_node)
{
    sl_config_t c;
    sl_bmuf_opts_t o;
    sl_sync_t *s = NULL;
    sl_component_t comp = {"w", 0, 4, 0, 0, 0, 0};
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
    const float *avg;
    int writer, nmodels;

    sl_config_init(&c);
    ck_assert_int_eq(sl_config_set(&c, "sync={algorithm: gossip-bmuf, block_momentum: 0.5, "
                                       "block_lr: 0.25, nesterov: false, block_reference: omega}"),
                     SL_OK);
    sl_bmuf_opts_from_config(&o, &c);
    ck_assert(o.eta == 0.5f && o.zeta == 0.25f && o.nesterov == 0 && o.ref == SL_BLOCK_REF_OMEGA);
    ck_assert_int_eq(sl_sync_new(&s, &c, NULL, 0, 1, &comp, 1, p, 4), SL_OK);
    ck_assert_int_eq(sl_sync_algorithm(s), SL_SYNC_NONE);
    ck_assert_int_eq(sl_sync_gradients(s, g, 0), SL_OK);
    ck_assert_int_eq(sl_sync_after_step(s, p, 16), SL_OK);
    ck_assert_int_eq(sl_sync_final(s, p, &avg, &writer, &nmodels), SL_OK);
    ck_assert_ptr_null(avg);
    ck_assert_int_eq(writer, 0);
    ck_assert(p[0] == 1 && p[3] == 4 && g[0] == 1);
    sl_sync_destroy(&s);
    ck_assert_ptr_null(s);
    sl_sync_destroy(&s);
    /* several nodes need a transport; a component outside the buffer is refused */
    ck_assert_int_eq(sl_sync_new(&s, &c, NULL, 0, 4, &comp, 1, p, 4), SL_ERR_INVALID);
    comp.count = 5;
    ck_assert_int_eq(sl_sync_new(&s, &c, NULL, 0, 1, &comp, 1, p, 4), SL_ERR_INVALID);
    ck_assert_ptr_null(s);
    sl_config_fini(&c);
}
END_TEST

/* ------------------------------------------------------------ consensus rate */

/* Gossip-MA with q = 1 on n = 8 nodes (k = 2) minimising the shared quadratic
 * f(x) = |x|^2 / 2 by one gradient step (lr) per round, then the gossip average. The
 * expected iterate E[x] disagrees by |lambda_2| (1 - lr) less each round. Averaged
 * over many independent schedules (seeds) the mean trajectory follows that expectation,
 * so its disagreement must shrink at that rate. */
START_TEST(test_gossip_ma_consensus_rate)
{
    enum { N = 8, SEEDS = 4000, T = 12 };
    const double lr = 0.05;
    static double mean[T + 1][N];
    sl_schedule_t s;
    sl_mixing_t m;
    double x0[N] = {3, -1, 4, -1, 5, -9, 2, -6}, pred, rate, d0, dt;

    memset(mean, 0, sizeof mean);
    for (int seed = 0; seed < SEEDS; seed++) {
        float x[N], nx[N];
        ck_assert_int_eq(sl_schedule_init(&s, N, 2, 1, (uint64_t)seed + 1), SL_OK);
        for (int i = 0; i < N; i++)
            x[i] = (float)x0[i];
        for (int i = 0; i < N; i++)
            mean[0][i] += x[i] / SEEDS;
        for (int t = 1; t <= T; t++) {
            for (int i = 0; i < N; i++)
                x[i] -= (float)lr * x[i];
            for (int i = 0; i < N; i++) {
                int ch[4], cnt;
                float rows[4];
                ck_assert_int_eq(sl_schedule_chosen(&s, (uint64_t)t, 0, i, ch, 4, &cnt), SL_OK);
                for (int j = 0; j < cnt; j++)
                    rows[j] = x[ch[j]];
                sl_bmuf_mean(&nx[i], &x[i], rows, (size_t)cnt, 1);
            }
            memcpy(x, nx, sizeof x);
            for (int i = 0; i < N; i++)
                mean[t][i] += x[i] / SEEDS;
        }
    }
    ck_assert_int_eq(sl_schedule_init(&s, N, 2, 1, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_analyse(&s, &m), SL_OK);
    pred = m.lambda2 * (1 - lr);
    /* disagreement ||x - mean(x)|| of the mean trajectory, rounds 4 -> T */
    {
        double a = 0, b = 0, ma = 0, mb = 0;
        for (int i = 0; i < N; i++) {
            ma += mean[4][i] / N;
            mb += mean[T][i] / N;
        }
        for (int i = 0; i < N; i++) {
            a += (mean[4][i] - ma) * (mean[4][i] - ma);
            b += (mean[T][i] - mb) * (mean[T][i] - mb);
        }
        d0 = sqrt(a);
        dt = sqrt(b);
    }
    rate = pow(dt / d0, 1.0 / (T - 4));
    ck_assert_msg(fabs(rate - pred) < 0.025, "measured %.4f per round, predicted %.4f", rate, pred);
    ck_assert(dt < d0);
}
END_TEST

/* ------------------------------------------------------------ periods by rule */

/* Two one-float components; sync.period is 16, so without the rules neither syncs in 6
 * steps. lstm.0 matches both rules: the first, period 1, is its. */
static const sl_component_t pair_comps[2] = {
    {"lstm.0", 0, 1, 0, 0, 0, 0},
    {"lstm.1", 1, 1, 0, 0, 0, 0},
};
static const char periods_conf[] =
    "sync={algorithm: ma, periods: [{match: lstm.0, period: 1}, {match: \"lstm.*\", period: 3}]}";

/* Before each step node k maps x to a x + c with a = k + 1 (mean 2) and, for lstm.0,
 * c = k (mean 1), for lstm.1 c = 1, 1, 2. Not affine in the average: how often the
 * nodes average changes where they end. */
static void
affine_steps(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    static const float c1[TEST_TRIO_N] = {1, 1, 2};

    (void)tr;
    (void)b;
    ck_assert_int_eq(sl_sync_period(s, 0), 1);
    ck_assert_int_eq(sl_sync_period(s, 1), 3);
    p[0] = (float)(k + 1) * p[0] + (float)k;
    p[1] = (float)(k + 1) * p[1] + c1[k];
}

/* ma on 3 nodes from x = 0, steps 1..6:
 *   lstm.0, every step: x = 2x + 1 on every node: 1, 3, 7, 15, 31, 63
 *   lstm.1, at steps 3 and 6: node k after three steps c (a^2 + a + 1) = 3, 7, 26,
 *     mean 12; then a^3 12 + c (a^2 + a + 1) = 15, 103, 350, mean 156
 * (without the rules the nodes would not agree; with lstm.1 every step, x = 2x + 4/3
 * is no integer). 6 rounds of lstm.0, 2 of lstm.1. */
START_TEST(test_periods_by_rule)
{
    static test_trio_t tr;
    const float want[2] = {63, 156};

    test_trio_init(&tr, periods_conf, test_trio_zero);
    tr.comps = pair_comps;
    tr.ncomps = 2;
    tr.np = 2;
    tr.blocks = 6;
    tr.step = affine_steps;
    test_trio_run(&tr);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        test_assert_floats(tr.p[k], want, 2);
        ck_assert_int_eq(tr.stat[k][0].rounds, 6);
        ck_assert_int_eq(tr.stat[k][1].rounds, 2);
    }
}
END_TEST

/* Node k's value i: small integers, so that the sums over 3 nodes are exact. */
static float
side_value(int k, int i)
{
    return (float)((k * 7 + i * 3) % 11) - 5.0f;
}

/* ma on 3 nodes, every step: the components that go whole (the trio's four with
 * sync.exchange dense) and are due together go in one allreduce as the first,
 * embedding.0: every node ends with the mean, the frames are all component 0's (each
 * node sends 2 (n - 1) / n of the 45 floats, 4 ring steps of 15), none are the others',
 * and each counts its round. With lstm.0 every 2 steps (sync.periods) over 2 steps,
 * embedding.0, embedding.1 and softmax.0 (period 1, not side by side) still go
 * together, lstm.0 alone. */
START_TEST(test_due_together_one_allreduce)
{
    static test_trio_t tr;
    static const int rounds[TEST_TRIO_NC] = {2, 2, 1, 2};

    test_trio_init(&tr, "sync={algorithm: ma, period: 1}", side_value);
    test_trio_run(&tr);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        for (int i = 0; i < TEST_TRIO_NP; i++) {
            float want = (side_value(0, i) + side_value(1, i) + side_value(2, i)) / 3.0f;
            ck_assert_float_eq_tol(tr.p[k][i], want, 1e-6f);
        }
        ck_assert_uint_eq(tr.stat[k][0].sent_bytes, 60 * sizeof(float));
        for (int c = 0; c < TEST_TRIO_NC; c++) {
            ck_assert_int_eq(tr.stat[k][c].rounds, 1);
            ck_assert_uint_eq(tr.stat[k][c].answered, 2);
            if (c > 0)
                ck_assert_uint_eq(tr.stat[k][c].sent_bytes, 0);
        }
    }
    test_trio_init(&tr, "sync={algorithm: ma, period: 1, periods: [{match: lstm.0, period: 2}]}",
                   side_value);
    tr.blocks = 2;
    test_trio_run(&tr);
    for (int k = 0; k < TEST_TRIO_N; k++)
        for (int c = 0; c < TEST_TRIO_NC; c++) {
            ck_assert_int_eq(tr.stat[k][c].rounds, rounds[c]);
            ck_assert_msg((tr.stat[k][c].sent_bytes > 0) == (c == 0 || c == 2),
                          "node %d, component %d", k, c);
        }
}
END_TEST

/* A sync object on one node (nothing exchanged) over comps with the config sets. */
static sl_status_t
periods_sync(sl_sync_t **s, const char *sets, const sl_component_t *comps, int ncomps)
{
    sl_config_t c;
    float p[TEST_TRIO_NP] = {0};
    sl_status_t st;

    sl_config_init(&c);
    ck_assert_msg(sl_config_set(&c, sets) == SL_OK, "%s", sl_err_msg());
    st = sl_sync_new(s, &c, NULL, 0, 1, comps, ncomps, p, TEST_TRIO_NP);
    sl_config_fini(&c);
    return st;
}

/* The model's layout with 4 shards per embedding (names as sl_model.c makes them). */
static const sl_component_t shard_comps[] = {
    {"embedding.0", 0, 1, 1, 0, 1, 1},  {"embedding.1", 1, 1, 1, 1, 1, 1},
    {"embedding.2", 2, 1, 1, 2, 1, 1},  {"embedding.3", 3, 1, 1, 3, 1, 1},
    {"lstm.0", 4, 1, 0, 0, 0, 0},       {"proj.0", 5, 1, 0, 0, 0, 0},
    {"softmax.0", 6, 1, 1, 0, 1, 1},    {"softmax.1", 7, 1, 1, 1, 1, 1},
    {"softmax_bias", 8, 1, 0, 0, 0, 0},
};
enum { NSHARD = sizeof shard_comps / sizeof shard_comps[0] };

/* Which rule gives which component its period; rules that give none are refused with
 * one line naming them and the model's components. allreduce ignores the periods. */
START_TEST(test_periods_rules)
{
    static const struct {
        const char *sets;
        int want[NSHARD];
    } ok[] = {
        /* no rules: sync.embedding_period for the row shards, sync.period for the rest */
        {"sync={period: 16, embedding_period: 128}", {128, 128, 128, 128, 16, 16, 128, 128, 16}},
        {"sync={period: 16}", {16, 16, 16, 16, 16, 16, 16, 16, 16}},
        /* the paper's (16, 128) by rules; softmax* also takes softmax_bias */
        {"sync={period: 16, periods: [{match: \"embedding.*\", period: 128}, "
         "{match: \"softmax*\", period: 64}]}",
         {128, 128, 128, 128, 16, 16, 64, 64, 64}},
        /* first match wins; a rule beats embedding_period; character classes */
        {"sync={period: 8, embedding_period: 32, periods: [{match: embedding.0, period: 2}, "
         "{match: \"embedding.[0-2]\", period: 3}, {match: \"*.0\", period: 5}]}",
         {2, 3, 3, 32, 5, 5, 5, 32, 8}},
    };
    static const struct {
        const char *sets, *msg;
    } bad[] = {
        {"sync.periods=[{match: \"lstm.*\", period: 4}, {match: \"embeding.*\", period: 128}]",
         "sync.periods[1]: 'embeding.*' matches no component (the model's: embedding.0, "
         "embedding.1, lstm.0, softmax.0)"},
        {"sync.periods=[{match: \"*\", period: 16}, {match: \"softmax.*\", period: 128}]",
         "sync.periods[1]: 'softmax.*' matches only components that an earlier rule gives a "
         "period (softmax.0); put the more specific rule first"},
    };
    sl_sync_t *s = NULL;

    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_msg(periods_sync(&s, ok[i].sets, shard_comps, NSHARD) == SL_OK, "%s",
                      sl_err_msg());
        for (int c = 0; c < NSHARD; c++)
            ck_assert_msg(sl_sync_period(s, c) == ok[i].want[c], "case %zu %s: H %d, want %d", i,
                          shard_comps[c].name, sl_sync_period(s, c), ok[i].want[c]);
        sl_sync_destroy(&s);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(periods_sync(&s, bad[i].sets, test_trio_comps, TEST_TRIO_NC),
                         SL_ERR_CONFIG);
        ck_assert_str_eq(sl_err_msg(), bad[i].msg);
        ck_assert_ptr_null(s);
    }
    /* runs of three or more shards are listed by their first and last */
    ck_assert_int_eq(
        periods_sync(&s, "sync.periods=[{match: lstm.1, period: 2}]", shard_comps, NSHARD),
        SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "sync.periods[0]: 'lstm.1' matches no component (the "
                                   "model's: embedding.0 to embedding.3, lstm.0, proj.0, "
                                   "softmax.0, softmax.1, softmax_bias)");
    /* allreduce: after a step nothing is due and nothing changes, whatever the rules */
    {
        sl_transport_t *t;
        sl_transport_opts_t o;
        sl_config_t c;
        float p[TEST_TRIO_NP] = {1, 2, 3, 4, 5};

        sl_transport_opts_default(&o);
        o.size = 2;
        ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
        sl_config_init(&c);
        ck_assert_int_eq(sl_config_set(&c, "sync={algorithm: allreduce, periods: "
                                           "[{match: \"*\", period: 1}]}"),
                         SL_OK);
        sl_log_set_level(SL_LOG_WARN);
        ck_assert_int_eq(
            sl_sync_new(&s, &c, t, 0, 2, test_trio_comps, TEST_TRIO_NC, p, TEST_TRIO_NP), SL_OK);
        ck_assert_int_eq(sl_sync_period(s, 0), 1);
        for (int c2 = 0; c2 < TEST_TRIO_NC; c2++)
            ck_assert(!sl_sync_due(s, c2, 1));
        ck_assert_int_eq(sl_sync_after_step(s, p, 1), SL_OK);
        ck_assert(p[0] == 1 && p[4] == 5);
        ck_assert_int_eq(sl_sync_stat(s, 0)->rounds, 0);
        sl_sync_destroy(&s);
        sl_config_fini(&c);
        sl_transport_destroy(&t);
    }
}
END_TEST

static Suite *
sync_suite(void)
{
    Suite *s = suite_create("sync");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_ma_three_nodes);
    tcase_add_test(core, test_gossip_ma_missing_peer);
    tcase_add_test(core, test_bmuf_by_hand);
    tcase_add_test(core, test_gossip_bmuf_two_blocks);
    tcase_add_test(core, test_sync_single_node);
    tcase_add_test(core, test_gossip_ma_consensus_rate);
    tcase_add_test(core, test_periods_by_rule);
    tcase_add_test(core, test_due_together_one_allreduce);
    tcase_add_test(limits, test_periods_rules);
    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sync_suite());
}
