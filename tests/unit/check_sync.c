/* Tests of src/sync: the BMUF maths worked by hand on 3 nodes for every algorithm (a
 * gossip round with a missing peer included), gossip-MA consensus against the spectral
 * gap; the Zipf-unique sparse exchange on 3 in-process nodes (threads over loopback
 * transports): the same rows as the dense exchange, bit for bit, BMUF per row by hand,
 * compression within its bound; sync.periods: which rule gives a component its
 * period, and 3 nodes whose two components sync every 1 and every 3 steps worked by
 * hand; the final model of a gossip run without rank 0 on 3 in-process nodes (who
 * gathers, the average, the waits), nodes agreeing or not on rank 0's death. The
 * `shoal run` integration runs are in check_runs.c. */
#include <check.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "config/sl_config.h"
#include "embed/sl_sparse.h"
#include "sync/sl_bmuf.h"
#include "sync/sl_sync.h"
#include "topology/sl_mixing.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"

static void
assert_floats(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

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
        assert_floats(bar, want, 2);
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
        assert_floats(next[i], want[i], 2);
    /* received: only node 1's snapshot (node 2 timed out) */
    sl_bmuf_mean(th[0], next[0], next[1], 1, 2);
    assert_floats(th[0], want2, 2);
    /* nobody answered: the average is the node itself */
    sl_bmuf_mean(th[1], next[1], NULL, 0, 2);
    assert_floats(th[1], want[1], 2);
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
    assert_floats(theta, want_theta, 2);
    assert_floats(omega, want_omega, 2);
    assert_floats(delta, want_delta, 2);
    assert_floats(start, want_theta, 2);
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
    assert_floats(th, want1, 3);
    for (int i = 0; i < 3; i++)
        th[i] += 1;
    sl_bmuf_mean(&bar[0], &th[0], NULL, 0, 1); /* node 2 did not answer node 0 */
    sl_bmuf_mean(&bar[1], &th[1], &th[0], 1, 1);
    sl_bmuf_mean(&bar[2], &th[2], &th[1], 1, 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_update(&o, &th[i], &bar[i], &om[i], &de[i], &st[i], 1);
    assert_floats(th, want2, 3);
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

/* ------------------------------------------------------------ sparse exchange */

/* Three nodes in one process: a thread each, over loopback transports. The model is
 * laid out as the trainer's (sl_model.h): row shards of a 10-word vocabulary, 2 floats
 * a row, and a dense component:
 *   embedding.0  input rows 0..5      embedding.1  input rows 6..9
 *   lstm.0       5 floats             softmax.0    output rows 0..9 */
enum { NN = 3, NP = 12 + 8 + 5 + 20, NC = 4 };
static const sl_component_t trio_comps[NC] = {
    {"embedding.0", 0, 12, 1, 0, 6, 2},
    {"embedding.1", 12, 8, 1, 6, 4, 2},
    {"lstm.0", 20, 5, 0, 0, 0, 0},
    {"softmax.0", 25, 20, 1, 0, 10, 2},
};

/* Hand-made touched rows: input {1,3,7} {3,4,8} {0,9} (nodes 0 and 1 overlap on 3,
 * node 2 is disjoint from both), output {2} {} {2,5}. */
static const int32_t in_rows[NN][3] = {{1, 3, 7}, {3, 4, 8}, {0, 9}};
static const int in_count[NN] = {3, 3, 2};
static const int32_t out_rows[NN][2] = {{2, 0}, {0, 0}, {2, 5}};
static const int out_count[NN] = {1, 0, 2};

typedef struct trio trio_t;
/* What node k does before sync block b (1-based): change params, note rows. */
typedef void (*trio_step_fn)(trio_t *tr, sl_sync_t *s, int k, int b, float *p);

struct trio {
    const char *conf;  /* sync={...} for sl_config_set */
    const char *conf2; /* another setting, or NULL */
    const sl_component_t *comps;
    int ncomps, np, blocks;
    int first; /* the first block's number (0: 1) */
    /* sync state: loaded before the first block when state_in[k] is set (a resume);
     * saved after the last into state_out[k] (malloc'd) when save_state is */
    const unsigned char *state_in[NN];
    size_t state_in_len[NN];
    int save_state;
    unsigned char *state_out[NN];
    size_t state_out_len[NN];
    int alive[NN]; /* the node takes part */
    trio_step_fn step;
    /* final: after the blocks each alive node calls sl_sync_final; its results, when
     * it entered and left it (sl_clock_now()) and whether it then held node 0 for dead */
    int final;
    int late[NN]; /* 1: sl_sync_final only once node 0's has returned */
    int writer[NN], nmodels[NN], has_avg[NN], dead0[NN];
    float avg[NN][NP];
    double final_t0[NN], final_t1[NN];
    /* events between the nodes: blocks each has finished (INT_MAX once it stopped), and
     * whether its sl_sync_final has returned (or it stopped); under mu, cv signalled */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int blocks_done[NN], final_done[NN];
    float p[NN][NP]; /* in: the start; out: after the last block */
    sl_sync_stat_t stat[NN][NC];
    int ndead[NN]; /* peers each node holds for dead after the blocks */
    sl_status_t st[NN];
    char err[NN][256];
    sl_config_t cfg;
    sl_transport_t *t[NN];
};

typedef struct {
    trio_t *tr;
    int k;
} trio_arg_t;

/* Records that node k has finished block b (INT_MAX: it stopped) or, with final, its
 * sl_sync_final, and wakes the nodes waiting for it. */
static void
trio_mark(trio_t *tr, int k, int b, int final)
{
    pthread_mutex_lock(&tr->mu);
    tr->blocks_done[k] = b;
    tr->final_done[k] |= final;
    pthread_cond_broadcast(&tr->cv);
    pthread_mutex_unlock(&tr->mu);
}

/* Waits until node k has finished block b (or stopped) or, with final, its
 * sl_sync_final. No time limit: the test case's timeout is the hang guard. */
static void
trio_wait(trio_t *tr, int k, int b, int final)
{
    pthread_mutex_lock(&tr->mu);
    while (final ? !tr->final_done[k] : tr->blocks_done[k] < b)
        pthread_cond_wait(&tr->cv, &tr->mu);
    pthread_mutex_unlock(&tr->mu);
}

static void *
trio_node(void *arg)
{
    trio_t *tr = ((trio_arg_t *)arg)->tr;
    int k = ((trio_arg_t *)arg)->k;
    sl_sync_t *s = NULL;
    sl_status_t st;

    int first = tr->first > 0 ? tr->first : 1;

    st =
        sl_sync_new(&s, &tr->cfg, tr->t[k], k, NN, tr->comps, tr->ncomps, tr->p[k], (size_t)tr->np);
    if (st == SL_OK && tr->state_in[k])
        st = sl_sync_state_load(s, tr->state_in[k], tr->state_in_len[k]);
    for (int b = first; st == SL_OK && b < first + tr->blocks; b++) {
        if (tr->step)
            tr->step(tr, s, k, b, tr->p[k]);
        st = sl_sync_after_step(s, tr->p[k], b);
        trio_mark(tr, k, b, 0);
    }
    trio_mark(tr, k, INT_MAX, 0);
    if (st == SL_OK && tr->save_state) {
        tr->state_out_len[k] = sl_sync_state_bytes(s);
        tr->state_out[k] = malloc(tr->state_out_len[k] + 1);
        st = sl_sync_state_save(s, tr->state_out[k], tr->state_out_len[k]);
    }
    for (int c = 0; st == SL_OK && c < tr->ncomps; c++)
        tr->stat[k][c] = *sl_sync_stat(s, c);
    tr->ndead[k] = s ? sl_sync_ndead(s) : 0;
    if (st == SL_OK && tr->final) {
        const float *avg;

        if (tr->late[k])
            trio_wait(tr, 0, 0, 1);
        tr->final_t0[k] = sl_clock_now();
        st = sl_sync_final(s, tr->p[k], &avg, &tr->writer[k], &tr->nmodels[k]);
        tr->final_t1[k] = sl_clock_now();
        tr->has_avg[k] = avg != NULL;
        if (avg)
            memcpy(tr->avg[k], avg, (size_t)tr->np * sizeof *avg);
        tr->dead0[k] = sl_sync_is_dead(s, 0);
    }
    trio_mark(tr, k, INT_MAX, 1);
    tr->st[k] = st;
    snprintf(tr->err[k], sizeof tr->err[k], "%s", st == SL_OK ? "" : sl_err_msg());
    sl_sync_destroy(&s);
    return NULL;
}

/* Runs the alive nodes of tr (period 1: every block syncs every component) and checks
 * that each returned SL_OK. */
static void
trio_run(trio_t *tr)
{
    pthread_t th[NN];
    trio_arg_t args[NN];
    const char *eps[NN];

    sl_log_set_level(SL_LOG_ERROR);
    pthread_mutex_init(&tr->mu, NULL);
    pthread_cond_init(&tr->cv, NULL);
    sl_config_init(&tr->cfg);
    ck_assert_msg(sl_config_set(&tr->cfg, tr->conf) == SL_OK, "%s", sl_err_msg());
    if (tr->conf2)
        ck_assert_msg(sl_config_set(&tr->cfg, tr->conf2) == SL_OK, "%s", sl_err_msg());
    for (int k = 0; k < NN; k++) {
        sl_transport_opts_t o;
        sl_transport_opts_default(&o);
        o.run_id = 77;
        o.rank = (uint32_t)k;
        o.size = NN;
        o.linger_ms = 100;
        o.timeout_ms = 5000;
        ck_assert_int_eq(sl_transport_new(&tr->t[k], &o), SL_OK);
        eps[k] = sl_transport_endpoint(tr->t[k]);
    }
    for (int k = 0; k < NN; k++)
        ck_assert_int_eq(sl_transport_connect(tr->t[k], eps), SL_OK);
    for (int k = 0; k < NN; k++) {
        args[k] = (trio_arg_t){tr, k};
        if (tr->alive[k])
            ck_assert_int_eq(pthread_create(&th[k], NULL, trio_node, &args[k]), 0);
        else
            trio_mark(tr, k, INT_MAX, 1); /* nobody waits for a node that never runs */
    }
    for (int k = 0; k < NN; k++)
        if (tr->alive[k])
            pthread_join(th[k], NULL);
    for (int k = 0; k < NN; k++)
        sl_transport_destroy(&tr->t[k]);
    sl_config_fini(&tr->cfg);
    pthread_cond_destroy(&tr->cv);
    pthread_mutex_destroy(&tr->mu);
    for (int k = 0; k < NN; k++)
        ck_assert_msg(!tr->alive[k] || tr->st[k] == SL_OK, "node %d: %s", k, tr->err[k]);
}

/* Values that are multiples of 1/8 in [-4, 4), different on every node: every sum of
 * three is exact, so averages agree bit for bit whatever the order of the additions. */
static float
eighths(int k, int i)
{
    return (float)((k * 37 + i * 11 + 5) % 64 - 32) / 8.0f;
}

/* Values that no 16-bit format holds exactly, for the compression bounds. */
static float
wavy(int k, int i)
{
    return (float)(3.0 * sin(7.1 * k + 1.3 * i + 0.2));
}

static void
trio_init(trio_t *tr, const char *conf, float (*value)(int, int))
{
    memset(tr, 0, sizeof *tr);
    tr->conf = conf;
    tr->comps = trio_comps;
    tr->ncomps = NC;
    tr->np = NP;
    tr->blocks = 1;
    for (int k = 0; k < NN; k++) {
        tr->alive[k] = 1;
        for (int i = 0; i < NP; i++)
            tr->p[k][i] = value(k, i);
    }
}

static void
note_hand_rows(trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)tr;
    (void)b;
    (void)p;
    ck_assert_int_eq(sl_sync_note_rows(s, 0, in_rows[k], in_count[k]), SL_OK);
    ck_assert_int_eq(sl_sync_note_rows(s, 1, out_rows[k], out_count[k]), SL_OK);
}

/* Whether node k touched row r (shard-local) of shard cp. */
static int
touched(int k, const sl_component_t *cp, long r)
{
    long v = cp->row_begin + r;

    if (strncmp(cp->name, "softmax", 7) == 0) {
        for (int i = 0; i < out_count[k]; i++)
            if (out_rows[k][i] == v)
                return 1;
        return 0;
    }
    for (int i = 0; i < in_count[k]; i++)
        if (in_rows[k][i] == v)
            return 1;
    return 0;
}

/* The rank node k pulls from in round 1 of component c (gossip, q = 1, n = 3). */
static int
gossip_pull(int k, int c)
{
    sl_schedule_t sch;
    int ch[4], cnt;

    ck_assert_int_eq(sl_schedule_init(&sch, NN, sl_ring_default_degree(NN), 1, 1234), SL_OK);
    ck_assert_int_eq(sl_schedule_chosen(&sch, 1, c, k, ch, 4, &cnt), SL_OK);
    ck_assert_int_eq(cnt, 1);
    return ch[0];
}

static const struct {
    const char *algorithm;
    int missing; /* node 2 takes no part */
} unique_cases[] = {{"ma", 0}, {"gossip-ma", 0}, {"gossip-ma", 1}};
/* The layout of the missing-peer case: the input embedding in one shard, nothing else. */
static const sl_component_t one_shard[1] = {{"embedding.0", 0, 20, 1, 0, 10, 2}};

/* One sync block of the hand-made touched rows, exchange unique against exchange dense
 * from the same start: every node's rows in the set averaged (ma: the union U_g over
 * all nodes; gossip-ma: E_k u E_j with the node j it pulled from, E_k alone when j was
 * missing) equal the dense result bit for bit, every other row keeps its start value,
 * and the dense component is exchanged as before. Bytes: a gossip node sends 4 bytes
 * per id of E_k to its chosen node, of E_k \ E_p to each puller p, and 4 x 2 per row of
 * E_k u E_p of values. */
START_TEST(test_unique_equals_dense)
{
    const char *alg = unique_cases[_i].algorithm;
    int missing = unique_cases[_i].missing, gossip = strcmp(alg, "gossip-ma") == 0;
    static trio_t dense, uniq;
    char cd[256], cu[256];
    int changed = 0;

    snprintf(cd, sizeof cd, "sync={algorithm: %s, period: 1, timeout_ms: %d}", alg,
             missing ? 300 : 5000);
    snprintf(cu, sizeof cu, "sync={algorithm: %s, period: 1, timeout_ms: %d, exchange: unique}",
             alg, missing ? 300 : 5000);
    trio_init(&dense, cd, eighths);
    trio_init(&uniq, cu, eighths);
    dense.step = uniq.step = note_hand_rows;
    /* node 2 missing: one component only. With several, a node that waited for node 2
     * in one component may be late for the next, in which a live peer waited for it
     * just as long: whether it makes it is a race, dense or unique alike. */
    if (missing) {
        dense.alive[2] = uniq.alive[2] = 0;
        dense.comps = uniq.comps = one_shard;
        dense.ncomps = uniq.ncomps = 1;
        dense.np = uniq.np = 20;
    }
    trio_run(&dense);
    trio_run(&uniq);
    for (int k = 0; k < NN; k++) {
        if (!uniq.alive[k])
            continue;
        for (int c = 0; c < uniq.ncomps; c++) {
            const sl_component_t *cp = &uniq.comps[c];
            int j = gossip ? gossip_pull(k, c) : 0;
            uint64_t ids = 0, vals = 0;

            if (!cp->sparse) {
                assert_floats(uniq.p[k] + cp->offset, dense.p[k] + cp->offset, cp->count);
                continue;
            }
            for (long r = 0; r < cp->rows; r++) {
                int in = touched(k, cp, r);
                const float *got = uniq.p[k] + cp->offset + r * cp->row_len;
                const float *avg = dense.p[k] + cp->offset + r * cp->row_len, *want;
                float st0[2] = {eighths(k, (int)(cp->offset + r * 2)),
                                eighths(k, (int)(cp->offset + r * 2 + 1))};

                for (int m = 0; m < NN && !gossip; m++)
                    in |= touched(m, cp, r);
                if (gossip && uniq.alive[j])
                    in |= touched(j, cp, r);
                want = in ? avg : st0;
                ck_assert_msg(got[0] == want[0] && got[1] == want[1],
                              "%s node %d %s row %ld: got %g %g, want %g %g", alg, k, cp->name, r,
                              got[0], got[1], want[0], want[1]);
                changed += in && (avg[0] != st0[0] || avg[1] != st0[1]);
            }
            if (!gossip || missing)
                continue;
            /* the bytes this node sent for shard c: its set to j, then its answers */
            for (long r = 0; r < cp->rows; r++)
                ids += touched(k, cp, r);
            for (int p = 0; p < NN; p++) {
                if (p == k || gossip_pull(p, c) != k)
                    continue;
                for (long r = 0; r < cp->rows; r++) {
                    ids += touched(k, cp, r) && !touched(p, cp, r);
                    vals += touched(k, cp, r) || touched(p, cp, r);
                }
            }
            ck_assert_uint_eq(uniq.stat[k][c].sent_enc_bytes[SL_WIRE_BYTES], 4 * ids);
            ck_assert_uint_eq(uniq.stat[k][c].sent_enc_bytes[SL_WIRE_FP32], 4 * 2 * vals);
            ck_assert_uint_eq(uniq.stat[k][c].sent_bytes, 4 * ids + 8 * vals);
        }
        if (missing) /* the node that pulled from node 2 averaged alone */
            ck_assert_uint_eq(uniq.stat[k][0].answered, gossip_pull(k, 0) == 2 ? 0 : 1);
    }
    ck_assert_int_gt(changed, missing ? 0 : 4);
}
END_TEST

/* bmuf (all-node average) with exchange unique, eta 0.5, zeta 1, Nesterov, blockstart,
 * on one shard of 4 rows of 1 float; every node starts at 0 (omega = start = 0).
 *   block 1: node 0 moves row 0 to 3 and touched it, node 1 row 1 to 6 (touched), node
 *     2 row 3 to 5 without touching it (as Adam's momentum would). U_g = {0, 1}:
 *     bar = [1, 2]; G = bar - 0; Delta = [1, 2]; omega = [1, 2];
 *     theta = omega + Delta / 2 = [1.5, 3] on every node; row 3 stays 5 on node 2
 *   block 2: node 0 moves row 1 by +3 (touched), node 2 row 3 to 9 (touched). U_g =
 *     {1, 3}: bar = [(6 + 3 + 3) / 3, (0 + 0 + 9) / 3] = [4, 3]
 *     row 1: G = 4 - 3 = 1; Delta = 0.5 * 2 + 1 = 2; omega = 4; theta = 5
 *     row 3: first sync: G = 3; Delta = 3; omega = 3; theta = 4.5
 *     row 0 (nobody touched it) keeps 1.5 and its Delta 1, row 2 stays 0
 *   every node ends at [1.5, 5, 0, 4.5]. */
static const sl_component_t bmuf_comp[1] = {{"embedding.0", 0, 4, 1, 0, 4, 1}};

static void
bmuf_steps(trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    int32_t r;

    (void)tr;
    if (b == 1 && k < 2) {
        r = k;
        p[k] = k == 0 ? 3 : 6;
        ck_assert_int_eq(sl_sync_note_rows(s, 0, &r, 1), SL_OK);
    } else if (b == 1) {
        p[3] = 5;
    } else if (k == 0) {
        r = 1;
        p[1] += 3;
        ck_assert_int_eq(sl_sync_note_rows(s, 0, &r, 1), SL_OK);
    } else if (k == 2) {
        r = 3;
        p[3] = 9;
        ck_assert_int_eq(sl_sync_note_rows(s, 0, &r, 1), SL_OK);
    }
}

static float
zero(int k, int i)
{
    (void)k;
    (void)i;
    return 0;
}

START_TEST(test_bmuf_rows_by_hand)
{
    static trio_t tr;
    const float want[4] = {1.5f, 5, 0, 4.5f};

    trio_init(&tr,
              "sync={algorithm: bmuf, period: 1, exchange: unique, block_momentum: 0.5, "
              "block_lr: 1, nesterov: true, block_reference: blockstart}",
              zero);
    tr.comps = bmuf_comp;
    tr.ncomps = 1;
    tr.np = 4;
    tr.blocks = 2;
    tr.step = bmuf_steps;
    trio_run(&tr);
    for (int k = 0; k < NN; k++) {
        assert_floats(tr.p[k], want, 4);
        ck_assert_uint_eq(tr.stat[k][0].rows_merged, 4); /* |U_g| = 2 in each block */
        ck_assert_uint_eq(tr.stat[k][0].rows_own, k == 1 ? 1 : k == 0 ? 2 : 1);
    }
}
END_TEST

static const struct {
    const char *algorithm, *exchange, *compression;
    double bound; /* largest |compressed - fp32| allowed */
} compress_cases[] = {
    /* a value in [-3, 3] passes at most 3 roundings of a partial sum of magnitude <= 9
     * (reduce-scatter, then the owner's encoding) before the division by 3: error
     * <= 3 x 9 x 2^-11 / 3 for fp16 (10 stored mantissa bits), 2^-8 for bf16 */
    {"ma", "dense", "fp16", 9.0 / 2048},
    {"ma", "unique", "fp16", 9.0 / 2048},
    {"ma", "unique", "bf16", 9.0 / 256},
    /* gossip: one received copy of magnitude <= 3, rounded once, halved */
    {"gossip-ma", "unique", "fp16", 3.0 / 2048 / 2},
    {"gossip-ma", "dense", "bf16", 3.0 / 256 / 2},
};

/* Compression: the same block with values that no 16-bit format holds exactly, fp32
 * against fp16 / bf16 (automatic scale): every value within the bound, some not exact
 * (compression did happen), and for ma every node ending with the same bits. Values
 * travel in the encoding (counters by encoding), row ids as bytes. */
START_TEST(test_compression_bound)
{
    static trio_t ref, cmp;
    char c32[256], c16[256];
    double worst = 0;
    int ma = strcmp(compress_cases[_i].algorithm, "ma") == 0;
    unsigned enc =
        strcmp(compress_cases[_i].compression, "fp16") == 0 ? SL_WIRE_FP16 : SL_WIRE_BF16;

    snprintf(c32, sizeof c32, "sync={algorithm: %s, period: 1, exchange: %s}",
             compress_cases[_i].algorithm, compress_cases[_i].exchange);
    snprintf(c16, sizeof c16, "sync={algorithm: %s, period: 1, exchange: %s, compression: %s}",
             compress_cases[_i].algorithm, compress_cases[_i].exchange,
             compress_cases[_i].compression);
    trio_init(&ref, c32, wavy);
    trio_init(&cmp, c16, wavy);
    ref.step = cmp.step = note_hand_rows;
    trio_run(&ref);
    trio_run(&cmp);
    for (int k = 0; k < NN; k++) {
        for (int i = 0; i < NP; i++) {
            double d = fabs((double)cmp.p[k][i] - (double)ref.p[k][i]);
            if (d > worst)
                worst = d;
            if (ma && ref.p[k][i] == ref.p[0][i]) /* averaged (rows outside U_g are not) */
                ck_assert_msg(cmp.p[k][i] == cmp.p[0][i], "node %d element %d: %.9g, node 0 %.9g",
                              k, i, cmp.p[k][i], cmp.p[0][i]);
        }
        for (int c = 0; c < NC; c++) {
            /* every node sends in ma; in gossip a node may have no puller */
            ck_assert(!ma || cmp.stat[k][c].sent_enc_bytes[enc] > 0);
            ck_assert(cmp.stat[0][c].sent_enc_bytes[enc] + cmp.stat[1][c].sent_enc_bytes[enc] +
                          cmp.stat[2][c].sent_enc_bytes[enc] >
                      0);
            ck_assert_uint_eq(cmp.stat[k][c].sent_enc_bytes[SL_WIRE_FP32],
                              ma && trio_comps[c].sparse &&
                                      strcmp(compress_cases[_i].exchange, "unique") == 0
                                  ? cmp.stat[k][c].sent_bytes -
                                        cmp.stat[k][c].sent_enc_bytes[enc] /* ids, sizes */
                                  : 0);
        }
    }
    ck_assert_msg(worst > 0 && worst <= compress_cases[_i].bound, "worst %g, bound %g", worst,
                  compress_cases[_i].bound);
}
END_TEST

/* E_k: the touched rows, the top rows (ids below ntop) and a random fraction drawn from
 * a key, the same for the same key. */
START_TEST(test_sparse_select)
{
    sl_rowset_t rs;
    int32_t out[1000], again[1000];
    size_t n, m;
    const int32_t want[] = {0, 1, 5, 63, 64, 999};

    ck_assert_int_eq(sl_rowset_init(&rs, 1000), SL_OK);
    sl_rowset_add(&rs, 999);
    sl_rowset_add(&rs, 5);
    sl_rowset_add(&rs, 64);
    sl_rowset_add(&rs, 63);
    sl_rowset_add(&rs, 5);
    ck_assert_int_eq(sl_sparse_select(&rs, 2, 0, 1, out), 6);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(out[i], want[i]);
    /* q = 30%: about 300 random rows, ascending, the touched ones kept, the same ones
     * for the same key and others for another key */
    n = sl_sparse_select(&rs, 0, 0.3, 42, out);
    ck_assert_msg(n > 250 && n < 350, "%zu rows", n);
    for (size_t i = 1; i < n; i++)
        ck_assert_int_gt(out[i], out[i - 1]);
    ck_assert_int_eq(out[n - 1], 999);
    m = sl_sparse_select(&rs, 0, 0.3, 42, again);
    ck_assert_uint_eq(m, n);
    ck_assert_int_eq(memcmp(out, again, n * sizeof *out), 0);
    m = sl_sparse_select(&rs, 0, 0.3, 43, again);
    ck_assert(m != n || memcmp(out, again, n * sizeof *out) != 0);
    ck_assert_int_eq(sl_sparse_select(&rs, 1000, 0, 1, out), 1000);
    sl_rowset_clear(&rs);
    ck_assert_int_eq(sl_sparse_select(&rs, 0, 0, 1, out), 0);
    ck_assert_int_eq(sl_sparse_select(&rs, 0, 1.0, 7, out), 1000);
    sl_rowset_fini(&rs);
    ck_assert_int_eq(sl_rowset_init(&rs, 0), SL_ERR_INVALID);
}
END_TEST

/* ------------------------------------------------------------ sync state */

/* Before block b node k moves every parameter by a multiple of 1/4 that depends on
 * (k, b, i) and touches input row (b + k) mod 10 and output row (2b + k) mod 10. */
static void
drift_steps(trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    int32_t in = (b + k) % 10, out = (2 * b + k) % 10;

    for (int i = 0; i < tr->np; i++)
        p[i] += (float)((k * 5 + b * 3 + i) % 7 - 3) / 4.0f;
    ck_assert_int_eq(sl_sync_note_rows(s, 0, &in, 1), SL_OK);
    ck_assert_int_eq(sl_sync_note_rows(s, 1, &out, 1), SL_OK);
}

/* bmuf, exchange unique, lstm.0 every block and the row shards every 2 blocks: after
 * block 3 every node holds Delta != 0 and touched rows not yet exchanged. */
static const char state_conf[] =
    "sync={algorithm: bmuf, period: 1, embedding_period: 2, exchange: unique, "
    "block_momentum: 0.5, block_lr: 1, nesterov: true, block_reference: blockstart}";

/* Three nodes, 4 blocks straight against 3 blocks, the sync state saved, and block 4 in
 * new sync objects (new transports) that load it: the same parameters bit for bit.
 * Block 4 from the parameters alone (Delta 0, omega = start = theta, no touched rows)
 * ends elsewhere, so the state matters. Its size: a 24-byte header, omega, Delta and
 * block start (3 x 45 floats) and one 64-bit word per row set (6, 4 and 10 rows). */
START_TEST(test_sync_state_resume)
{
    static trio_t straight, half, resumed, fresh;

    trio_init(&straight, state_conf, eighths);
    straight.blocks = 4;
    straight.step = drift_steps;
    trio_run(&straight);

    trio_init(&half, state_conf, eighths);
    half.blocks = 3;
    half.step = drift_steps;
    half.save_state = 1;
    trio_run(&half);

    trio_init(&resumed, state_conf, eighths);
    trio_init(&fresh, state_conf, eighths);
    memcpy(resumed.p, half.p, sizeof half.p);
    memcpy(fresh.p, half.p, sizeof half.p);
    resumed.first = fresh.first = 4;
    resumed.blocks = fresh.blocks = 1;
    resumed.step = fresh.step = drift_steps;
    for (int k = 0; k < NN; k++) {
        ck_assert_uint_eq(half.state_out_len[k], 24 + 3 * 4 * NP + 3 * 8);
        resumed.state_in[k] = half.state_out[k];
        resumed.state_in_len[k] = half.state_out_len[k];
    }
    trio_run(&resumed);
    trio_run(&fresh);
    for (int k = 0; k < NN; k++) {
        assert_floats(resumed.p[k], straight.p[k], NP);
        ck_assert_msg(memcmp(fresh.p[k], straight.p[k], sizeof fresh.p[k]) != 0,
                      "node %d: block 4 ends at the same place without the saved state", k);
        free(half.state_out[k]);
    }
}
END_TEST

/* A sync object of node 0 of 3 (transport not connected: nothing is exchanged). */
static sl_sync_t *
state_sync(sl_transport_t *t, const char *conf, const float *p)
{
    sl_config_t c;
    sl_sync_t *s = NULL;

    sl_config_init(&c);
    ck_assert_msg(sl_config_set(&c, conf) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_sync_new(&s, &c, t, 0, NN, trio_comps, NC, p, NP) == SL_OK, "%s",
                  sl_err_msg());
    sl_config_fini(&c);
    return s;
}

/* Loading buf (len) into s is refused with SL_ERR_FORMAT and a message holding msg, and
 * s's state stays want (wlen bytes). */
static void
assert_state_refused(sl_sync_t *s, const unsigned char *buf, size_t len, const char *msg,
                     const unsigned char *want, size_t wlen)
{
    unsigned char *now = malloc(wlen + 1);

    ck_assert_int_eq(sl_sync_state_load(s, buf, len), SL_ERR_FORMAT);
    ck_assert_msg(strstr(sl_err_msg(), msg) != NULL, "want \"%s\" in: %s", msg, sl_err_msg());
    ck_assert_uint_eq(sl_sync_state_bytes(s), wlen);
    ck_assert_int_eq(sl_sync_state_save(s, now, wlen), SL_OK);
    ck_assert_msg(memcmp(now, want, wlen) == 0, "a refused load changed the state");
    free(now);
}

/* Export / import: the state of a node after 3 blocks (Delta != 0, touched rows) goes
 * into a fresh object and comes out bit for bit; truncated, padded, empty, another
 * algorithm's, another shape's and stray-bit buffers are refused and change nothing;
 * algorithms that keep nothing have 0 bytes. */
START_TEST(test_sync_state_limits)
{
    static trio_t half;
    sl_transport_t *t;
    sl_transport_opts_t o;
    sl_sync_t *s, *other;
    float zeros[NP] = {0};
    unsigned char *saved, *again, *bad, *mine;
    size_t len;
    int any_delta = 0;

    trio_init(&half, state_conf, eighths);
    half.blocks = 3;
    half.step = drift_steps;
    half.save_state = 1;
    trio_run(&half);
    saved = half.state_out[0];
    len = half.state_out_len[0];
    /* Delta (after the header and omega) is not all zero: there is something to keep */
    for (size_t i = 24 + 4 * NP; i < 24 + 8 * NP; i++)
        any_delta |= saved[i] != 0;
    ck_assert(any_delta);

    sl_transport_opts_default(&o);
    o.size = NN;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    s = state_sync(t, state_conf, zeros);
    ck_assert_uint_eq(sl_sync_state_bytes(s), len);
    mine = malloc(len);
    ck_assert_int_eq(sl_sync_state_save(s, mine, len), SL_OK);
    ck_assert_int_eq(sl_sync_state_save(s, mine, len - 1), SL_ERR_INVALID);
    ck_assert(memcmp(mine, saved, len) != 0);

    /* refused: nothing changes */
    assert_state_refused(s, saved, len - 1, "a state of 587 bytes, but this node's bmuf keeps 588",
                         mine, len);
    bad = malloc(len + 1);
    memcpy(bad, saved, len);
    bad[len] = 0;
    assert_state_refused(s, bad, len + 1, "a state of 589 bytes", mine, len);
    assert_state_refused(s, NULL, 0, "a state of 0 bytes", mine, len);
    bad[0] = SL_SYNC_GOSSIP_BMUF; /* u32 algorithm, little-endian */
    assert_state_refused(s, bad, len, "the state is of gossip-bmuf with 3 row sets", mine, len);
    bad[0] = saved[0];
    bad[len - 1] = 0x80; /* bit 63 of softmax.0's word: row 63 of 10 */
    assert_state_refused(s, bad, len, "touched rows of softmax.0 beyond its 10 rows", mine, len);
    memcpy(bad, saved, len);
    bad[len - 8 - 8] |= 0x40; /* bit 6 of embedding.1's word: row 6 of 4 */
    assert_state_refused(s, bad, len, "touched rows of embedding.1 beyond its 4 rows", mine, len);

    /* the good one loads and comes out bit for bit */
    ck_assert_msg(sl_sync_state_load(s, saved, len) == SL_OK, "%s", sl_err_msg());
    again = malloc(len);
    ck_assert_int_eq(sl_sync_state_save(s, again, len), SL_OK);
    ck_assert(memcmp(again, saved, len) == 0);

    /* gossip-bmuf: the same size, another algorithm in the header */
    other = state_sync(t, "sync={algorithm: gossip-bmuf, embedding_period: 2, exchange: unique}",
                       zeros);
    ck_assert_uint_eq(sl_sync_state_bytes(other), len);
    ck_assert_int_eq(sl_sync_state_load(other, saved, len), SL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "the state is of bmuf"));
    sl_sync_destroy(&other);
    /* ma, exchange unique: the row sets only */
    other = state_sync(t, "sync={algorithm: ma, exchange: unique}", zeros);
    ck_assert_uint_eq(sl_sync_state_bytes(other), 24 + 3 * 8);
    ck_assert_int_eq(sl_sync_state_load(other, saved, len), SL_ERR_FORMAT);
    sl_sync_destroy(&other);
    /* nothing to keep: ma dense, allreduce (its row sets live within a step), one node */
    other = state_sync(t, "sync={algorithm: ma, exchange: dense}", zeros);
    ck_assert_uint_eq(sl_sync_state_bytes(other), 0);
    ck_assert_int_eq(sl_sync_state_load(other, NULL, 0), SL_OK);
    ck_assert_int_eq(sl_sync_state_load(other, saved, len), SL_ERR_FORMAT);
    sl_sync_destroy(&other);
    other = state_sync(t, "sync={algorithm: allreduce, exchange: unique}", zeros);
    ck_assert_uint_eq(sl_sync_state_bytes(other), 0);
    sl_sync_destroy(&other);
    {
        sl_config_t c;
        sl_config_init(&c);
        ck_assert_int_eq(sl_config_set(&c, state_conf), SL_OK);
        ck_assert_int_eq(sl_sync_new(&other, &c, NULL, 0, 1, trio_comps, NC, zeros, NP), SL_OK);
        ck_assert_uint_eq(sl_sync_state_bytes(other), 0);
        sl_sync_destroy(&other);
        sl_config_fini(&c);
    }

    sl_sync_destroy(&s);
    sl_transport_destroy(&t);
    for (int k = 0; k < NN; k++)
        free(half.state_out[k]);
    free(mine);
    free(bad);
    free(again);
}
END_TEST

/* Settings an algorithm cannot use are refused with the key's name; touched rows outside
 * the vocabulary are refused. */
START_TEST(test_exchange_settings)
{
    static const struct {
        const char *conf, *msg;
    } bad[] = {
        {"sync={algorithm: gossip-bmuf, exchange: allgather}", "sync.exchange allgather"},
        {"sync={algorithm: ma, exchange: dense, exchange_top: 5}", "sync.exchange_top"},
        {"sync={algorithm: allreduce, exchange: unique, exchange_random: 5}",
         "sync.exchange_random"},
        {"sync={algorithm: bmuf, exchange: unique}", "[0, 100]"}, /* set to 101 below */
    };
    sl_transport_t *t;
    sl_transport_opts_t o;
    sl_config_t c;
    sl_sync_t *s = NULL;
    float p[NP] = {0};
    const int32_t good[] = {9, 0}, outside[] = {3, 10};

    sl_transport_opts_default(&o);
    o.size = 2;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_config_init(&c);
        ck_assert_int_eq(sl_config_set(&c, bad[i].conf), SL_OK);
        if (i == 3) /* the config refuses it; a caller filling the struct may not */
            c.sync.exchange_top = 101;
        ck_assert_int_eq(sl_sync_new(&s, &c, t, 0, 2, trio_comps, NC, p, NP), SL_ERR_CONFIG);
        ck_assert_msg(strstr(sl_err_msg(), bad[i].msg) != NULL, "%s", sl_err_msg());
        ck_assert_ptr_null(s);
        sl_config_fini(&c);
    }
    sl_config_init(&c);
    ck_assert_int_eq(sl_config_set(&c, "sync={algorithm: gossip-bmuf, exchange: unique, "
                                       "exchange_top: 10, exchange_random: 1}"),
                     SL_OK);
    ck_assert_int_eq(sl_sync_new(&s, &c, t, 0, 2, trio_comps, NC, p, NP), SL_OK);
    ck_assert_int_eq(sl_sync_note_rows(s, 0, good, 2), SL_OK);
    ck_assert_int_eq(sl_sync_note_rows(s, 1, outside, 2), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "row 10 of the output embedding"));
    ck_assert_int_eq(sl_sync_note_rows(s, 0, (const int32_t[]){-1}, 1), SL_ERR_INVALID);
    sl_sync_destroy(&s);
    sl_config_fini(&c);
    sl_transport_destroy(&t);
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
affine_steps(trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    static const float c1[NN] = {1, 1, 2};

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
    static trio_t tr;
    const float want[2] = {63, 156};

    trio_init(&tr, periods_conf, zero);
    tr.comps = pair_comps;
    tr.ncomps = 2;
    tr.np = 2;
    tr.blocks = 6;
    tr.step = affine_steps;
    trio_run(&tr);
    for (int k = 0; k < NN; k++) {
        assert_floats(tr.p[k], want, 2);
        ck_assert_int_eq(tr.stat[k][0].rounds, 6);
        ck_assert_int_eq(tr.stat[k][1].rounds, 2);
    }
}
END_TEST

/* A sync object on one node (nothing exchanged) over comps with the config sets. */
static sl_status_t
periods_sync(sl_sync_t **s, const char *sets, const sl_component_t *comps, int ncomps)
{
    sl_config_t c;
    float p[NP] = {0};
    sl_status_t st;

    sl_config_init(&c);
    ck_assert_msg(sl_config_set(&c, sets) == SL_OK, "%s", sl_err_msg());
    st = sl_sync_new(s, &c, NULL, 0, 1, comps, ncomps, p, NP);
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
        ck_assert_int_eq(periods_sync(&s, bad[i].sets, trio_comps, NC), SL_ERR_CONFIG);
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
        float p[NP] = {1, 2, 3, 4, 5};

        sl_transport_opts_default(&o);
        o.size = 2;
        ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
        sl_config_init(&c);
        ck_assert_int_eq(sl_config_set(&c, "sync={algorithm: allreduce, periods: "
                                           "[{match: \"*\", period: 1}]}"),
                         SL_OK);
        sl_log_set_level(SL_LOG_WARN);
        ck_assert_int_eq(sl_sync_new(&s, &c, t, 0, 2, trio_comps, NC, p, NP), SL_OK);
        ck_assert_int_eq(sl_sync_period(s, 0), 1);
        for (int c2 = 0; c2 < NC; c2++)
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

/* The final model of a gossip run without rank 0 (sl_sync_final: every node walks the
 * candidates 0, 1, ... and the first one alive gathers), on 3 in-process nodes of one
 * 4-float component, sync.timeout_ms T = 300, so each candidate's window P = 3 T = 0.9 s:
 *   node 1 = [1, -2, 3, 0.5], node 2 = [3, 4, -1, 1.5] (node 0's values are never sent)
 * case 0: node 0 never runs, no blocks: nodes 1 and 2 each wait P for node 0's
 *   confirmation, then node 1 gathers (and claims node 2): the writer, 2 models,
 *   ([1, -2, 3, 0.5] + [3, 4, -1, 1.5]) / 2 = [2, 1, 1, 1]; node 2 is not a writer.
 * case 1: only node 2 runs: it gives up on node 0 at P and node 1 at 2 P and writes its
 *   own model, 1 model.
 * case 2: the nodes disagree on node 0: gossip-ma q = 1, 3 blocks without node 0, with a
 *   seed where node 1 pulls from node 0 in all three (it times out and keeps its model
 *   each time, then holds node 0 for dead) and node 2 from node 1 (it never misses
 *   node 0; it starts blocks 2 and 3 once node 1 has ended the block before): node 2
 *   becomes ([3, 4, -1, 1.5] + [1, -2, 3, 0.5]) / 2 = [2, 1, 1, 1], then
 *   [1.5, -0.5, 2, 0.75], then [1.25, -1.25, 2.5, 0.625]. Node 1 skips node 0 and
 *   gathers at once; its claim takes node 2 off node 0 before node 0's window is out,
 *   and node 1 writes
 *   ([1, -2, 3, 0.5] + [1.25, -1.25, 2.5, 0.625]) / 2 = [1.125, -1.625, 2.75, 0.5625].
 * case 3: every node runs, node 0 = [100, 100, 100, 100], but node 2 comes late: it
 *   enters sl_sync_final once node 0's has returned (after T without node 2): node 0
 *   writes ([100, 100, 100, 100] + [1, -2, 3, 0.5]) / 2 = [50.5, 49, 51.5, 50.25]
 *   and tells node 2 its model is not in, so node 2 stops there rather than walking on
 *   to gather a model of its own (a second writer). */
static const sl_component_t final_comp[1] = {{"lstm.0", 0, 4, 0, 0, 0, 0}};

static float
final_start(int k, int i)
{
    static const float v[NN][4] = {{100, 100, 100, 100}, {1, -2, 3, 0.5f}, {3, 4, -1, 1.5f}};
    return i < 4 ? v[k][i] : 0; /* trio_init fills NP floats; the model has 4 */
}

/* Node 1 waits T for node 0 in every block, so its pushes come T later each block:
 * node 2 starts block b > 1 once node 1 has ended block b - 1, so as not to run ahead
 * and time out on node 1's push of block b, which comes right after. */
static void
lag_node2(trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)s;
    (void)p;
    if (k == 2 && b > 1)
        trio_wait(tr, 1, b - 1, 0);
}

/* A run.seed under which, in rounds 1..3 of component 0 (gossip, q = 1, n = 3), node 1
 * pulls from node 0 and node 2 from node 1 every time. */
static uint64_t
disagreeing_seed(void)
{
    for (uint64_t seed = 1; seed < 100000; seed++) {
        sl_schedule_t sch;
        int ok = 1;

        ck_assert_int_eq(sl_schedule_init(&sch, NN, sl_ring_default_degree(NN), 1, seed), SL_OK);
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
late_node2(trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)s;
    (void)p;
    if (k == 2) {
        trio_wait(tr, 0, b, 0);
        trio_wait(tr, 1, b, 0);
    } else if (b > 1) {
        trio_wait(tr, 2, b - 1, 0);
    }
}

START_TEST(test_late_is_not_dead)
{
    static trio_t tr;

    trio_init(&tr, "sync={algorithm: local-ma, period: 1, timeout_ms: 200}", final_start);
    tr.comps = final_comp;
    tr.ncomps = 1;
    tr.np = 4;
    tr.blocks = 8;
    tr.step = late_node2;
    trio_run(&tr);
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
    static trio_t tr;
    static const float want[4][4] = {{2, 1, 1, 1},
                                     {3, 4, -1, 1.5f},
                                     {1.125f, -1.625f, 2.75f, 0.5625f},
                                     {50.5f, 49, 51.5f, 50.25f}};
    static const int writer[4] = {1, 2, 1, 0}, nmodels[4] = {2, 1, 2, 2};
    const double p = 3 * 0.3;
    char seed[64];
    int w = writer[_i];

    trio_init(&tr, "sync={algorithm: gossip-ma, neighbours: 1, period: 1, timeout_ms: 300}",
              final_start);
    tr.comps = final_comp;
    tr.ncomps = 1;
    tr.np = 4;
    tr.blocks = _i == 2 ? 3 : 0;
    tr.step = lag_node2;
    tr.final = 1;
    tr.alive[0] = _i == 3;
    tr.alive[1] = _i != 1;
    if (_i == 2) {
        snprintf(seed, sizeof seed, "run.seed=%" PRIu64, disagreeing_seed());
        tr.conf2 = seed;
    }
    tr.late[2] = _i == 3;
    trio_run(&tr);
    for (int k = 0; k < NN; k++) {
        if (!tr.alive[k])
            continue;
        ck_assert_int_eq(tr.writer[k], k == w);
        ck_assert_int_eq(tr.has_avg[k], k == w);
    }
    ck_assert_int_eq(tr.nmodels[w], nmodels[_i]);
    assert_floats(tr.avg[w], want[_i], 4);
    if (_i == 2) {
        ck_assert_int_eq(tr.dead0[1], 1);
        ck_assert_int_eq(tr.dead0[2], 0);
    }
    /* The windows, as lower bounds that a slow machine cannot break: case 0: node 1
     * waited out node 0's window before it gathered, and node 2 ended after that (on
     * node 1's claim or at the end of its own window); case 1: node 2 waited out the
     * windows of nodes 0 and 1. Case 2: node 1, holding node 0 for dead, gathered
     * without waiting out its window: the one upper bound, with a whole window of
     * margin, since only the time tells a claim at once from one after P. Case 3 needs
     * no clock: without node 0's "without you" node 2 would have walked on and
     * gathered a model of its own (a second writer, checked above). */
    if (_i == 0) {
        ck_assert_msg(tr.final_t1[1] - tr.final_t0[1] >= p - 0.01, "node 1: %.3f s",
                      tr.final_t1[1] - tr.final_t0[1]);
        ck_assert_msg(tr.final_t1[2] >= tr.final_t0[1] + p - 0.01,
                      "node 2 ended %.3f s after node 1 entered", tr.final_t1[2] - tr.final_t0[1]);
    }
    if (_i == 1)
        ck_assert_msg(tr.final_t1[2] - tr.final_t0[2] >= 2 * p - 0.01, "node 2: %.3f s",
                      tr.final_t1[2] - tr.final_t0[2]);
    if (_i == 2)
        ck_assert_msg(tr.final_t1[1] - tr.final_t0[1] < p, "node 1: %.3f s",
                      tr.final_t1[1] - tr.final_t0[1]);
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
    tcase_add_loop_test(core, test_unique_equals_dense, 0,
                        (int)(sizeof unique_cases / sizeof unique_cases[0]));
    tcase_add_test(core, test_bmuf_rows_by_hand);
    tcase_add_loop_test(core, test_compression_bound, 0,
                        (int)(sizeof compress_cases / sizeof compress_cases[0]));
    tcase_add_test(core, test_sparse_select);
    tcase_add_test(core, test_exchange_settings);
    tcase_add_test(core, test_sync_state_resume);
    tcase_add_test(core, test_periods_by_rule);
    tcase_add_loop_test(core, test_final_without_rank0, 0, 4);
    tcase_add_test(core, test_late_is_not_dead);
    tcase_add_test(limits, test_periods_rules);
    tcase_add_test(limits, test_sync_state_limits);
    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    SRunner *r = srunner_create(sync_suite());
    int failed;

    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
