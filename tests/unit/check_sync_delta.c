/* Unit tests of the delta exchange (src/sync/sl_sync_delta.c, sl_bmuf_mean_delta and the
 * bmuf all-node path of sl_sync_average.c): the mean rebuilt from a reference plus the
 * deltas is the mean of the weights bit for bit where that is exact in fp32, and within
 * one rounding otherwise; three nodes (threads, loopback transports) with int8 / int4
 * deltas end where fp32 ends up to the quantization of one message, not more after
 * many blocks (the error feedback keeps each link's copies in step); bmuf with bf16
 * sends deltas, whose rounding is that of the small changes, not of the weights. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_rng.h"
#include "sync/sl_bmuf.h"
#include "common/sl_log.h"
#include "sync/sl_sync.h"
#include "sync/sl_sync_delta.h"
#include "transport/sl_wire.h"

#include "test_tool.h"
#include "test_util.h"

enum { M = 4096 };

/* ulps between two finite floats of one sign */
static int64_t
ulps(float a, float b)
{
    int32_t x, y;

    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x > y ? (int64_t)x - y : (int64_t)y - x;
}

static double
wmax(const float *w, int n, size_t j)
{
    double m = 0;

    for (int k = 0; k < n; k++)
        m = fmax(m, fabs(w[(size_t)k * M + j]));
    return m;
}

/* n nodes' weights w (n, M) around a reference ref: bar of the weights against
 * ref + mean(w - ref). Sterbenz data (every w within [ref / 2, 2 ref], so each w - ref
 * is exact) on 2, 4 and 8 nodes: the same bits, mathematically exact (the double sums
 * of a few floats are exact, dividing by a power of two is, and both round the same real
 * number once). 3 and 5 nodes: within one ulp (the division rounds in double first).
 * Weights far from the reference (w - ref rounded): within the rounding of the deltas,
 * half an ulp of the largest |w| each, and of bar. */
START_TEST(test_delta_mean_bits)
{
    static float ref[M], w[8 * M], d[8 * M], a[M], b[M];
    sl_rng_t r;

    sl_rng_init(&r, 3);
    for (int n = 2; n <= 8; n++) {
        int exact = (n & (n - 1)) == 0;
        for (int far = 0; far < 2; far++) {
            for (size_t j = 0; j < M; j++)
                ref[j] = (float)((sl_rng_u64(&r) & 1 ? -1 : 1) * (0.5 + sl_rng_double(&r)));
            for (int k = 0; k < n; k++)
                for (size_t j = 0; j < M; j++) {
                    double u = sl_rng_double(&r);
                    w[k * M + j] = far ? (float)((u - 0.5) * 1e3 * ref[j])
                                       : (float)(ref[j] * (0.5 + 1.5 * u)); /* [ref/2, 2ref) */
                    d[k * M + j] = w[k * M + j] - ref[j];
                }
            sl_bmuf_mean(a, w, w + M, (size_t)n - 1, M);
            sl_bmuf_mean_delta(b, ref, d, d + M, (size_t)n - 1, M);
            for (size_t j = 0; j < M; j++) {
                if (!far && exact)
                    ck_assert_msg(a[j] == b[j], "n %d, %zu: weights %.9g, deltas %.9g", n, j,
                                  (double)a[j], (double)b[j]);
                else if (!far)
                    ck_assert_msg(ulps(a[j], b[j]) <= 1 || fabsf(a[j] - b[j]) <= 1e-7f,
                                  "n %d, %zu: weights %.9g, deltas %.9g", n, j, (double)a[j],
                                  (double)b[j]);
                else
                    ck_assert_msg(fabs((double)a[j] - b[j]) <= 2 * wmax(w, n, j) * 0x1p-24,
                                  "n %d, %zu (far): weights %.9g, deltas %.9g", n, j, (double)a[j],
                                  (double)b[j]);
            }
        }
    }
}
END_TEST

/* Node k's parameters before block b: += a change of size ~0.02 that differs by node,
 * block and parameter (the nodes' local steps). */
static void
drift(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    (void)s;
    for (int i = 0; i < tr->np; i++)
        p[i] += 0.02f * (float)sin(1.3 * i + 0.7 * b + 2.1 * k) * (float)(k + 1);
}

/* Node k's start: different on every node (the mirrors must not assume a common one). */
static float
spread_start(int k, int i)
{
    return (float)(k + 1) * 0.5f + 0.01f * (float)i;
}

/* The trio with conf for blocks blocks from the start value: the final parameters. */
static void
run_trio(test_trio_t *tr, const char *conf, float (*start)(int, int), int blocks)
{
    test_trio_init(tr, conf, start);
    tr->blocks = blocks;
    tr->step = drift;
    test_trio_run(tr);
}

static double
max_diff(const test_trio_t *a, const test_trio_t *b)
{
    double worst = 0;

    for (int k = 0; k < TEST_TRIO_N; k++)
        for (int i = 0; i < TEST_TRIO_NP; i++)
            worst = fmax(worst, fabs((double)a->p[k][i] - b->p[k][i]));
    return worst;
}

/* local-ma (every node averages with both others) over 30 blocks: with int8 deltas in
 * blocks of 4 the nodes end within one quantization step of the largest value (about
 * 2.5 / 127) of where fp32 weights take them, not 30 of them: what one message drops
 * the next one carries. int4 likewise within 2.5 / 7. Every value travels as int8 /
 * int4 but the keyframes' (pushes 0 and 16 on each of the 2 links: fp32), and the
 * result is not fp32's (the quantized path ran). Then
 * gossip-ma, where only the pullers get a push each round, and top-k. */
START_TEST(test_delta_trio_quantized)
{
    static test_trio_t exact, q;
    static const struct {
        const char *conf;
        unsigned enc;
        double tol;
    } runs[] = {
        {"sync={period: 1, algorithm: local-ma, compression: int8, quant_block: 4}", SL_WIRE_INT8,
         2.5 / 127},
        {"sync={period: 1, algorithm: local-ma, compression: int4, quant_block: 4}", SL_WIRE_INT4,
         2.5 / 7},
        {"sync={period: 1, algorithm: local-ma, compression: int8, quant_block: 4, rounding: "
         "stochastic}",
         SL_WIRE_INT8, 2 * 2.5 / 127},
    };

    run_trio(&exact, "sync={period: 1, algorithm: local-ma}", spread_start, 30);
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        double d;

        run_trio(&q, runs[r].conf, spread_start, 30);
        d = max_diff(&exact, &q);
        ck_assert_msg(d > 0 && d < runs[r].tol, "%s: %g from fp32", runs[r].conf, d);
        for (int k = 0; k < TEST_TRIO_N; k++)
            for (int c = 0; c < TEST_TRIO_NC; c++) {
                ck_assert_uint_gt(q.stat[k][c].sent_enc_bytes[runs[r].enc], 0);
                ck_assert_uint_eq(q.stat[k][c].sent_enc_bytes[SL_WIRE_FP32],
                                  2 * 2 * test_trio_comps[c].count * sizeof(float));
                ck_assert_uint_eq(q.stat[k][c].answered, q.stat[k][c].expected);
            }
    }
    /* gossip-ma (q = 1 of 2 links): a node's copy of a neighbour lags by the rounds that
     * neighbour pushed elsewhere, yet stays in step with it (no delta left out) */
    run_trio(&exact, "sync={period: 1, algorithm: gossip-ma}", spread_start, 30);
    run_trio(&q, "sync={period: 1, algorithm: gossip-ma, compression: int8, quant_block: 4}",
             spread_start, 30);
    ck_assert_msg(max_diff(&exact, &q) < 2.5 / 127, "gossip-ma int8: %g from fp32",
                  max_diff(&exact, &q));
    for (int k = 0; k < TEST_TRIO_N; k++)
        ck_assert_uint_eq(q.stat[k][1].answered, q.stat[k][1].expected);
    /* top-k 50%: the other half waits in the feedback; still near fp32 */
    run_trio(&q,
             "sync={period: 1, algorithm: local-ma, compression: int8, quant_block: 4, topk: 0.5}",
             spread_start, 30);
    ck_assert_msg(max_diff(&exact, &q) < 1.0, "top-k: %g", max_diff(&exact, &q));
}
END_TEST

/* A start common to every node (as a run's, from run.seed), weights about 4. */
static float
common_start(int k, int i)
{
    (void)k;
    return 4.0f + 0.01f * (float)i;
}

/* bmuf (all-node mean) with bf16 from a common start: the deltas travel, so the result
 * is fp32's up to bf16's rounding of block changes of about 0.1 (2^-9 of them, a few
 * 1e-4 after 12 blocks of momentum), far below the 2^-9 x 4 = 8e-3 that each exchange
 * of bf16 weights of about 4 would cost. */
START_TEST(test_delta_bmuf_bf16)
{
    static test_trio_t exact, h;

    run_trio(&exact, "sync={period: 1, algorithm: bmuf, block_momentum: 0.5}", common_start, 12);
    run_trio(&h, "sync={period: 1, algorithm: bmuf, block_momentum: 0.5, compression: bf16}",
             common_start, 12);
    ck_assert_msg(max_diff(&exact, &h) < 1e-3, "bmuf bf16: %g from fp32", max_diff(&exact, &h));
    for (int k = 1; k < TEST_TRIO_N; k++) /* every node ends with the same bits */
        test_assert_floats(h.p[k], h.p[0], TEST_TRIO_NP);
}
END_TEST

/* Rank k of a pair of loopback transports, not yet connected. */
static sl_transport_t *
pair_transport(int k)
{
    sl_transport_opts_t o;
    sl_transport_t *t;

    sl_transport_opts_default(&o);
    o.run_id = 78;
    o.rank = (uint32_t)k;
    o.size = 2;
    o.linger_ms = 100;
    o.timeout_ms = 5000;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    return t;
}

/* Rank k's delta exchange of comp over t: node 1 waits 300 ms for a push, node 0 pushes
 * only. */
static sl_sync_delta_t *
pair_delta(sl_transport_t *t, int k, const sl_component_t *comp, const sl_config_t *cfg)
{
    sl_sync_env_t e = {
        t,    k,   2, comp, 1, comp->count, SL_SYNC_GOSSIP_MA, SL_EXCHANGE_DENSE, k ? 300 : 5000,
        NULL, NULL};
    sl_sync_delta_t *d;

    ck_assert_int_eq(sl_sync_delta_new(&d, &e, cfg, 1, comp->count), SL_OK);
    return d;
}

/* The pair of the tests below, int8, connected: t[k], d[k] and cfg, for pair_close. */
static void
pair_open(sl_transport_t *t[2], sl_sync_delta_t *d[2], sl_config_t *cfg, const sl_component_t *comp)
{
    const char *eps[2];

    sl_log_set_level(SL_LOG_ERROR);
    for (int k = 0; k < 2; k++) {
        t[k] = pair_transport(k);
        eps[k] = sl_transport_endpoint(t[k]);
    }
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(sl_transport_connect(t[k], eps), SL_OK);
    sl_config_init(cfg);
    ck_assert_int_eq(sl_config_set(cfg, "sync={algorithm: gossip-ma, compression: int8}"), SL_OK);
    for (int k = 0; k < 2; k++)
        d[k] = pair_delta(t[k], k, comp, cfg);
}

static void
pair_close(sl_transport_t *t[2], sl_sync_delta_t *d[2], sl_config_t *cfg)
{
    for (int k = 0; k < 2; k++) {
        sl_sync_delta_destroy(&d[k]);
        sl_transport_destroy(&t[k]);
    }
    sl_config_fini(cfg);
}

/* Two nodes on loopback transports in this thread, node 0 pushing to node 1 (a push is
 * queued at once, so one thread can play both). Node 1 misses round 3's push (it never
 * collects it): round 4's delta is against round 3, which node 1's copy is not of, so
 * it is left out (got 0; a short timeout, since that is what is tested) and so is every
 * delta up to the link's next keyframe, the 16th push, which node 1 takes again, and from
 * then on node 1 rebuilds node 0's weights within one int8 step once more. A keyframe
 * gives node 1 the weights bit for bit. */
START_TEST(test_delta_missed_push)
{
    enum { C = 64 };
    static const sl_component_t comp[1] = {{"lstm.0", 0, C, 0, 0, 0, 0}};
    sl_transport_t *t[2];
    sl_sync_delta_t *d[2];
    sl_config_t cfg;
    float theta[C], recv[C];
    uint32_t from[1], one = 1, zero = 0;

    pair_open(t, d, &cfg, comp);
    for (uint64_t round = 1; round <= 20; round++) {
        size_t got = 9;
        sl_status_t st;

        for (int i = 0; i < C; i++)
            theta[i] = (float)sin(0.1 * (double)(i * (int)round)) + (float)round;
        ck_assert_int_eq(
            sl_sync_delta_exchange(d[0], 0, round, theta, &one, 1, NULL, 0, NULL, NULL, &got),
            SL_OK);
        if (round == 3)
            continue; /* missed */
        st = sl_sync_delta_exchange(d[1], 0, round, theta, NULL, 0, &zero, 1, recv, from, &got);
        /* pushes 0 and 16 (rounds 1 and 17) are keyframes; rounds 4 to 16 go against the
         * push of round 3 or later, which node 1 does not hold */
        if (round >= 4 && round <= 16) {
            ck_assert_int_eq(st, SL_ERR_TIMEOUT);
            ck_assert_uint_eq(got, 0);
            continue;
        }
        ck_assert_msg(st == SL_OK && got == 1, "round %d: %s", (int)round, sl_err_msg());
        ck_assert_uint_eq(from[0], 0);
        if (round == 1 || round == 17) /* keyframes carry the weights in fp32 */
            ck_assert_mem_eq(recv, theta, sizeof theta);
        for (int i = 0; i < C; i++)
            ck_assert_msg(fabsf(recv[i] - theta[i]) <= (round + 1.0f) / 127 * 0.5f * 1.01f,
                          "round %d, %d: %g for %g", (int)round, i, (double)recv[i],
                          (double)theta[i]);
    }
    pair_close(t, d, &cfg);
}
END_TEST

/* Keyframes are fp32 frames, so a forged one is checked like any snapshot: with a NaN,
 * or of another length, it is refused (counted as not finite, as a bad size) and node 1
 * goes without node 0 that round; node 0's own first push, a keyframe, is then taken bit
 * for bit, and its next, a delta, within one int8 step. */
START_TEST(test_delta_forged_keyframe)
{
    enum { C = 64 };
    static const sl_component_t comp[1] = {{"lstm.0", 0, C, 0, 0, 0, 0}};
    sl_transport_t *t[2];
    sl_sync_delta_t *d[2];
    sl_config_t cfg;
    float theta[C], recv[C];
    uint32_t from[1], one = 1, zero = 0;

    pair_open(t, d, &cfg, comp);
    for (uint64_t round = 1; round <= 4; round++) {
        sl_wire_key_t key = {round, 0, 0, 1, SL_WIRE_GOSSIP_SNAPSHOT};
        size_t got = 9;
        sl_status_t st;

        for (int i = 0; i < C; i++)
            theta[i] = (float)cos(0.2 * (double)(i + (int)round));
        if (round == 1)
            theta[5] = NAN;
        if (round <= 2)
            ck_assert_int_eq(sl_transport_send(t[0], &key, theta, round == 1 ? C : C - 1,
                                               SL_WIRE_FP32, 1.0f, 0, 0),
                             SL_OK);
        else
            ck_assert_int_eq(
                sl_sync_delta_exchange(d[0], 0, round, theta, &one, 1, NULL, 0, NULL, NULL, &got),
                SL_OK);
        st = sl_sync_delta_exchange(d[1], 0, round, theta, NULL, 0, &zero, 1, recv, from, &got);
        if (round <= 2) {
            ck_assert_int_eq(st, SL_ERR_TIMEOUT);
            ck_assert_uint_eq(got, 0);
            ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_NONFINITE), 1);
            ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_BAD_SIZE), round - 1);
            continue;
        }
        ck_assert_msg(st == SL_OK && got == 1, "round %d: %s", (int)round, sl_err_msg());
        if (round == 3)
            ck_assert_mem_eq(recv, theta, sizeof theta);
        for (int i = 0; i < C; i++)
            ck_assert_float_eq_tol(recv[i], theta[i], 2.0f / 127 * 0.5f * 1.01f);
    }
    pair_close(t, d, &cfg);
}
END_TEST

/* Node 1 of a pair comes back as a new process (a new transport and delta object, its
 * hello to node 0): node 0's next push to it is a keyframe, which the new node, holding
 * nothing of node 0, takes; a delta would be left out until the 16th push. */
START_TEST(test_delta_comeback)
{
    enum { C = 64 };
    static const sl_component_t comp[1] = {{"lstm.0", 0, C, 0, 0, 0, 0}};
    sl_transport_t *t[2];
    const char *eps[2];
    sl_sync_delta_t *d[2];
    sl_config_t cfg;
    float theta[C], recv[C];
    uint32_t from[1], one = 1, zero = 0;
    double dl;

    pair_open(t, d, &cfg, comp);
    for (uint64_t round = 1; round <= 6; round++) {
        size_t got = 0;

        for (int i = 0; i < C; i++)
            theta[i] = (float)sin(0.1 * (double)(i * (int)round)) + (float)round;
        ck_assert_int_eq(
            sl_sync_delta_exchange(d[0], 0, round, theta, &one, 1, NULL, 0, NULL, NULL, &got),
            SL_OK);
        ck_assert_msg(sl_sync_delta_exchange(d[1], 0, round, theta, NULL, 0, &zero, 1, recv, from,
                                             &got) == SL_OK &&
                          got == 1,
                      "round %d: %s", (int)round, sl_err_msg());
        for (int i = 0; i < C; i++)
            ck_assert_float_eq_tol(recv[i], theta[i], (round + 1.0f) / 127);
        if (round != 3)
            continue;
        /* node 1 comes back: a new process, a new endpoint, its hello */
        sl_sync_delta_destroy(&d[1]);
        sl_transport_destroy(&t[1]);
        t[1] = pair_transport(1);
        eps[0] = sl_transport_endpoint(t[0]);
        eps[1] = sl_transport_endpoint(t[1]);
        ck_assert_int_eq(sl_transport_connect(t[1], eps), SL_OK);
        ck_assert_int_eq(sl_transport_announce(t[1], 5000), SL_OK);
        dl = test_deadline();
        while (sl_transport_comebacks(t[0], 1) == 0) {
            ck_assert_int_eq(sl_transport_poll(t[0]), SL_OK);
            ck_assert_msg(test_wait_more(dl), "no hello in %g s", TEST_HANG_S);
        }
        d[1] = pair_delta(t[1], 1, comp, &cfg);
    }
    pair_close(t, d, &cfg);
}
END_TEST

static Suite *
sync_delta_suite(void)
{
    Suite *s = suite_create("sync_delta");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_delta_mean_bits);
    tcase_add_test(core, test_delta_trio_quantized);
    tcase_add_test(core, test_delta_bmuf_bf16);
    tcase_add_test(core, test_delta_missed_push);
    tcase_add_test(core, test_delta_comeback);
    tcase_add_test(core, test_delta_forged_keyframe);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_main(sync_delta_suite());
}
