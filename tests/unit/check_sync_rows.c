/* Tests of src/sync's Zipf-unique sparse exchange on 3 in-process nodes (threads over
 * loopback transports, test_util.h's trio): the same rows as the dense exchange, bit
 * for bit, BMUF per row by hand, compression within its bound, the rows a sparse
 * selection picks, the exchange settings each algorithm accepts; the sync state saved
 * and loaded (a resume of 3 nodes bit for bit) and every bad state refused; a node whose
 * syncs get no answer (its rows and BMUF state stay, its rows wait); and, on two
 * transports in one thread, a peer's answers this node cannot use (NaN values, the wrong
 * number of values, bad row ids) refused and left out. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_log.h"
#include "config/sl_config.h"
#include "embed/sl_sparse.h"
#include "sync/sl_bmuf.h"
#include "sync/sl_sync.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "transport/sl_transport.h"

#include "test_tool.h"
#include "test_util.h"

/* ------------------------------------------------------------ sparse exchange */

/* Hand-made touched rows: input {1,3,7} {3,4,8} {0,9} (nodes 0 and 1 overlap on 3,
 * node 2 is disjoint from both), output {2} {} {2,5}. */
static const int32_t in_rows[TEST_TRIO_N][3] = {{1, 3, 7}, {3, 4, 8}, {0, 9}};
static const int in_count[TEST_TRIO_N] = {3, 3, 2};
static const int32_t out_rows[TEST_TRIO_N][2] = {{2, 0}, {0, 0}, {2, 5}};
static const int out_count[TEST_TRIO_N] = {1, 0, 2};

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
note_hand_rows(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
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

    ck_assert_int_eq(
        sl_schedule_init(&sch, TEST_TRIO_N, sl_ring_default_degree(TEST_TRIO_N), 1, 1234), SL_OK);
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
    static test_trio_t dense, uniq;
    char cd[256], cu[256];
    int changed = 0;

    snprintf(cd, sizeof cd, "sync={algorithm: %s, period: 1, timeout_ms: %d}", alg,
             missing ? 300 : 5000);
    snprintf(cu, sizeof cu, "sync={algorithm: %s, period: 1, timeout_ms: %d, exchange: unique}",
             alg, missing ? 300 : 5000);
    test_trio_init(&dense, cd, eighths);
    test_trio_init(&uniq, cu, eighths);
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
    test_trio_run(&dense);
    test_trio_run(&uniq);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        if (!uniq.alive[k])
            continue;
        for (int c = 0; c < uniq.ncomps; c++) {
            const sl_component_t *cp = &uniq.comps[c];
            int j = gossip ? gossip_pull(k, c) : 0;
            uint64_t ids = 0, vals = 0;

            if (!cp->sparse) {
                test_assert_floats(uniq.p[k] + cp->offset, dense.p[k] + cp->offset, cp->count);
                continue;
            }
            for (long r = 0; r < cp->rows; r++) {
                int in = touched(k, cp, r);
                const float *got = uniq.p[k] + cp->offset + r * cp->row_len;
                const float *avg = dense.p[k] + cp->offset + r * cp->row_len, *want;
                float st0[2] = {eighths(k, (int)(cp->offset + r * 2)),
                                eighths(k, (int)(cp->offset + r * 2 + 1))};

                for (int m = 0; m < TEST_TRIO_N && !gossip; m++)
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
            for (int p = 0; p < TEST_TRIO_N; p++) {
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

/* ma by rows on 3 nodes: the three row shards (embedding.0, embedding.1, softmax.0),
 * due together, go in one exchange as embedding.0, lstm.0 in its allreduce: the
 * shards' frames are all embedding.0's, exactly those of three collectives (each
 * node's 3 counts, its rows of the three shards, the unions' values: 2 floats a row),
 * and each shard counts its round and rows. (test_unique_equals_dense checks the
 * values.) */
START_TEST(test_row_shards_one_exchange)
{
    static test_trio_t tr;
    size_t counts[TEST_TRIO_N], rows[TEST_TRIO_N], uni = 0, sent, recvd;

    test_trio_init(&tr, "sync={algorithm: ma, period: 1, exchange: unique}", eighths);
    tr.step = note_hand_rows;
    test_trio_run(&tr);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        counts[k] = 3;
        rows[k] = 0;
    }
    for (int c = 0; c < TEST_TRIO_NC; c++) {
        const sl_component_t *cp = &tr.comps[c];

        for (long r = 0; cp->sparse && r < cp->rows; r++) {
            int any = 0;
            for (int k = 0; k < TEST_TRIO_N; k++) {
                rows[k] += (size_t)touched(k, cp, r);
                any |= touched(k, cp, r);
            }
            uni += (size_t)any;
        }
    }
    for (int k = 0; k < TEST_TRIO_N; k++) {
        sent = recvd = 0; /* the three add their floats */
        test_allgather_floats(counts, TEST_TRIO_N, (uint32_t)k, 0, &sent, &recvd);
        test_allgather_floats(rows, TEST_TRIO_N, (uint32_t)k, 0, &sent, &recvd);
        test_allreduce_floats(2 * uni, TEST_TRIO_N, (uint32_t)k, 1, &sent, &recvd);
        ck_assert_uint_eq(tr.stat[k][0].sent_bytes, sent * sizeof(float));
        ck_assert_uint_gt(tr.stat[k][2].sent_bytes, 0); /* lstm.0, whole */
        for (int c = 0; c < TEST_TRIO_NC; c++) {
            const sl_component_t *cp = &tr.comps[c];
            size_t own = 0, merged = 0;

            for (long r = 0; cp->sparse && r < cp->rows; r++) {
                int any = 0;
                own += (size_t)touched(k, cp, r);
                for (int m = 0; m < TEST_TRIO_N; m++)
                    any |= touched(m, cp, r);
                merged += (size_t)any;
            }
            ck_assert_int_eq(tr.stat[k][c].rounds, 1);
            if (c == 1 || c == 3)
                ck_assert_uint_eq(tr.stat[k][c].sent_bytes, 0);
            if (cp->sparse) {
                ck_assert_uint_eq(tr.stat[k][c].rows_own, own);
                ck_assert_uint_eq(tr.stat[k][c].rows_merged, merged);
                ck_assert_uint_eq(tr.stat[k][c].answered, 2);
            }
        }
    }
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
bmuf_steps(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
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

START_TEST(test_bmuf_rows_by_hand)
{
    static test_trio_t tr;
    const float want[4] = {1.5f, 5, 0, 4.5f};

    test_trio_init(&tr,
                   "sync={algorithm: bmuf, period: 1, exchange: unique, block_momentum: 0.5, "
                   "block_lr: 1, nesterov: true, block_reference: blockstart}",
                   test_trio_zero);
    tr.comps = bmuf_comp;
    tr.ncomps = 1;
    tr.np = 4;
    tr.blocks = 2;
    tr.step = bmuf_steps;
    test_trio_run(&tr);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        test_assert_floats(tr.p[k], want, 4);
        ck_assert_uint_eq(tr.stat[k][0].rows_merged, 4); /* |U_g| = 2 in each block */
        ck_assert_uint_eq(tr.stat[k][0].rows_own, k == 1 ? 1 : k == 0 ? 2 : 1);
    }
}
END_TEST

/* gossip-bmuf by rows (exchange unique, eta 0.9, period 2) on node 0 alone (nodes 1
 * and 2 never take part), on bmuf_comp from 0, synchronous or overlapped (tau 1): block
 * 1 moves row 0 to 3 and row 2 to 1 and touches them; blocks 2 to 9 move row 0 by 1
 * more without touching it. None of the 4 syncs (steps 2, 4, 6, 8) gets a copy, so none
 * changes anything: the rows end at their local values [11, 0, 1, 0] (one block update
 * on E_k alone would have moved them: theta = omega + 0.9 Delta), and E_k = {0, 2} is
 * never synced, so it stays for the next sync: 2 own rows in each of the 4 (with
 * overlap, the rows the worker kept join the next block handed to it). */
static void
alone_steps(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
{
    const int32_t rows[2] = {0, 2};

    (void)tr;
    ck_assert_int_eq(k, 0);
    if (b > 1) {
        p[0] += 1;
        return;
    }
    p[0] = 3;
    p[2] = 1;
    ck_assert_int_eq(sl_sync_note_rows(s, 0, rows, 2), SL_OK);
}

static const char *const alone_overlap[] = {"sync.overlap_steps=0", "sync.overlap_steps=1"};

START_TEST(test_rows_alone)
{
    static test_trio_t tr;
    const float want[4] = {11, 0, 1, 0};

    test_trio_init(&tr,
                   "sync={algorithm: gossip-bmuf, period: 2, exchange: unique, timeout_ms: 300, "
                   "block_momentum: 0.9, block_lr: 1, nesterov: true, block_reference: blockstart}",
                   test_trio_zero);
    tr.conf2 = alone_overlap[_i];
    tr.comps = bmuf_comp;
    tr.ncomps = 1;
    tr.np = 4;
    tr.blocks = 9;
    tr.alive[1] = tr.alive[2] = 0;
    tr.step = alone_steps;
    test_trio_run(&tr);
    test_assert_floats(tr.p[0], want, 4);
    ck_assert_uint_eq(tr.stat[0][0].rounds, 4);
    ck_assert_uint_eq(tr.stat[0][0].answered, 0);
    ck_assert_uint_eq(tr.stat[0][0].rows_own, 2 * 4);
    ck_assert_uint_eq(tr.stat[0][0].rows_merged, 0);
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
    static test_trio_t ref, cmp;
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
    test_trio_init(&ref, c32, wavy);
    test_trio_init(&cmp, c16, wavy);
    ref.step = cmp.step = note_hand_rows;
    test_trio_run(&ref);
    test_trio_run(&cmp);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        for (int i = 0; i < TEST_TRIO_NP; i++) {
            double d = fabs((double)cmp.p[k][i] - (double)ref.p[k][i]);
            if (d > worst)
                worst = d;
            if (ma && ref.p[k][i] == ref.p[0][i]) /* averaged (rows outside U_g are not) */
                ck_assert_msg(cmp.p[k][i] == cmp.p[0][i], "node %d element %d: %.9g, node 0 %.9g",
                              k, i, cmp.p[k][i], cmp.p[0][i]);
        }
        for (int c = 0; c < TEST_TRIO_NC; c++) {
            /* every node sends in ma; in gossip a node may have no puller. ma dense: the
             * four components lie side by side, one allreduce as the first; ma unique:
             * the three row shards in one exchange as the first (lstm.0 alone) */
            int joined =
                ma && c > 0 &&
                (strcmp(compress_cases[_i].exchange, "dense") == 0 || test_trio_comps[c].sparse);
            ck_assert(!ma || joined || cmp.stat[k][c].sent_enc_bytes[enc] > 0);
            ck_assert(joined || cmp.stat[0][c].sent_enc_bytes[enc] +
                                        cmp.stat[1][c].sent_enc_bytes[enc] +
                                        cmp.stat[2][c].sent_enc_bytes[enc] >
                                    0);
            ck_assert(!joined || cmp.stat[k][c].sent_bytes == 0);
            ck_assert_uint_eq(cmp.stat[k][c].sent_enc_bytes[SL_WIRE_FP32],
                              ma && test_trio_comps[c].sparse &&
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
drift_steps(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p)
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
    static test_trio_t straight, half, resumed, fresh;

    test_trio_init(&straight, state_conf, eighths);
    straight.blocks = 4;
    straight.step = drift_steps;
    test_trio_run(&straight);

    test_trio_init(&half, state_conf, eighths);
    half.blocks = 3;
    half.step = drift_steps;
    half.save_state = 1;
    test_trio_run(&half);

    test_trio_init(&resumed, state_conf, eighths);
    test_trio_init(&fresh, state_conf, eighths);
    memcpy(resumed.p, half.p, sizeof half.p);
    memcpy(fresh.p, half.p, sizeof half.p);
    resumed.first = fresh.first = 4;
    resumed.blocks = fresh.blocks = 1;
    resumed.step = fresh.step = drift_steps;
    for (int k = 0; k < TEST_TRIO_N; k++) {
        ck_assert_uint_eq(half.state_out_len[k], 24 + 3 * 4 * TEST_TRIO_NP + 3 * 8);
        resumed.state_in[k] = half.state_out[k];
        resumed.state_in_len[k] = half.state_out_len[k];
    }
    test_trio_run(&resumed);
    test_trio_run(&fresh);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        test_assert_floats(resumed.p[k], straight.p[k], TEST_TRIO_NP);
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
    ck_assert_msg(sl_sync_new(&s, &c, t, 0, TEST_TRIO_N, test_trio_comps, TEST_TRIO_NC, p,
                              TEST_TRIO_NP) == SL_OK,
                  "%s", sl_err_msg());
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
    static test_trio_t half;
    sl_transport_t *t;
    sl_transport_opts_t o;
    sl_sync_t *s, *other;
    float zeros[TEST_TRIO_NP] = {0};
    unsigned char *saved, *again, *bad, *mine;
    size_t len;
    int any_delta = 0;

    test_trio_init(&half, state_conf, eighths);
    half.blocks = 3;
    half.step = drift_steps;
    half.save_state = 1;
    test_trio_run(&half);
    saved = half.state_out[0];
    len = half.state_out_len[0];
    /* Delta (after the header and omega) is not all zero: there is something to keep */
    for (size_t i = 24 + 4 * TEST_TRIO_NP; i < 24 + 8 * TEST_TRIO_NP; i++)
        any_delta |= saved[i] != 0;
    ck_assert(any_delta);

    sl_transport_opts_default(&o);
    o.size = TEST_TRIO_N;
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
        ck_assert_int_eq(
            sl_sync_new(&other, &c, NULL, 0, 1, test_trio_comps, TEST_TRIO_NC, zeros, TEST_TRIO_NP),
            SL_OK);
        ck_assert_uint_eq(sl_sync_state_bytes(other), 0);
        sl_sync_destroy(&other);
        sl_config_fini(&c);
    }

    sl_sync_destroy(&s);
    sl_transport_destroy(&t);
    for (int k = 0; k < TEST_TRIO_N; k++)
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
    float p[TEST_TRIO_NP] = {0};
    const int32_t good[] = {9, 0}, outside[] = {3, 10};

    sl_transport_opts_default(&o);
    o.size = 2;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_config_init(&c);
        ck_assert_int_eq(sl_config_set(&c, bad[i].conf), SL_OK);
        if (i == 3) /* the config refuses it; a caller filling the struct may not */
            c.sync.exchange_top = 101;
        ck_assert_int_eq(
            sl_sync_new(&s, &c, t, 0, 2, test_trio_comps, TEST_TRIO_NC, p, TEST_TRIO_NP),
            SL_ERR_CONFIG);
        ck_assert_msg(strstr(sl_err_msg(), bad[i].msg) != NULL, "%s", sl_err_msg());
        ck_assert_ptr_null(s);
        sl_config_fini(&c);
    }
    sl_config_init(&c);
    ck_assert_int_eq(sl_config_set(&c, "sync={algorithm: gossip-bmuf, exchange: unique, "
                                       "exchange_top: 10, exchange_random: 1}"),
                     SL_OK);
    ck_assert_int_eq(sl_sync_new(&s, &c, t, 0, 2, test_trio_comps, TEST_TRIO_NC, p, TEST_TRIO_NP),
                     SL_OK);
    ck_assert_int_eq(sl_sync_note_rows(s, 0, good, 2), SL_OK);
    ck_assert_int_eq(sl_sync_note_rows(s, 1, outside, 2), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "row 10 of the output embedding"));
    ck_assert_int_eq(sl_sync_note_rows(s, 0, (const int32_t[]){-1}, 1), SL_ERR_INVALID);
    sl_sync_destroy(&s);
    sl_config_fini(&c);
    sl_transport_destroy(&t);
}
END_TEST

/* ------------------------------------------------------------ a peer's bad answers */

/* Rank 0 answers rank 1's pull of rows {1, 3} of a 4-row shard (2 floats a row) by
 * hand, badly three times, then well: values with a NaN, 3 values where 4 are due,
 * an extra row id out of range. Each is refused (counted by reason), rank 0 is left
 * out (0 answered, SL_ERR_TIMEOUT at once, nothing else being waited for) and the result
 * is rank 1's own rows; the good answer (extra row 2) is averaged with them. */
START_TEST(test_bad_answers_refused)
{
    sl_transport_t *t[2];
    sl_transport_opts_t o;
    const char *eps[2];
    sl_sparse_t *sp;
    const float shard[8] = {0, 0, 1, 2, 4, 6, 8, 10};
    const int32_t mine[2] = {1, 3};
    const float nan_vals[4] = {1, NAN, 3, 4}, good[6] = {3, 4, 20, 22, 6, 8};
    const int32_t *rows;
    const float *mean;
    uint32_t chosen = 0, answered[1], asked[1];
    unsigned char bad_id[4] = {7, 0, 0, 0}, row2[4] = {2, 0, 0, 0};

    sl_log_set_level(SL_LOG_ERROR);
    for (uint32_t r = 0; r < 2; r++) {
        sl_transport_opts_default(&o);
        o.run_id = 77;
        o.rank = r;
        o.size = 2;
        o.bind_endpoint = "ipc://*";
        o.timeout_ms = TEST_WAIT_MS;
        o.linger_ms = 0;
        ck_assert_int_eq(sl_transport_new(&t[r], &o), SL_OK);
    }
    eps[0] = sl_transport_endpoint(t[0]);
    eps[1] = sl_transport_endpoint(t[1]);
    ck_assert_int_eq(sl_transport_connect(t[0], eps), SL_OK);
    ck_assert_int_eq(sl_transport_connect(t[1], eps), SL_OK);
    ck_assert_int_eq(sl_sparse_new(&sp, 4, 2, 1), SL_OK);
    for (uint64_t round = 1; round <= 4; round++) {
        sl_wire_key_t ids = {round, 5, 1, 1, SL_WIRE_SPARSE_INDEX};
        sl_wire_key_t vals = {round, 5, 0, 1, SL_WIRE_SPARSE_VALUES};
        sl_sparse_args_t a = {5, round, shard, 4, 2, mine, 2, NULL, TEST_WAIT_MS};
        sl_sparse_peers_t p = {&chosen, 1, 1, NULL, 0, 0, answered, 0, asked, 0};
        const void *extra = round == 3 ? bad_id : round == 4 ? row2 : NULL;

        ck_assert_int_eq(
            sl_transport_send(t[0], &ids, extra, extra ? 4 : 0, SL_WIRE_BYTES, 1.0f, 0, -1), SL_OK);
        ck_assert_int_eq(sl_transport_send(t[0], &vals, round == 4 ? good : nan_vals,
                                           round == 4   ? 6
                                           : round == 2 ? 3
                                                        : 4,
                                           SL_WIRE_FP32, 1.0f, 0, -1),
                         SL_OK);
        sl_status_t st = sl_sparse_gossip(sp, t[1], &a, &p);
        size_t n = sl_sparse_result(sp, &rows, &mean);
        if (round < 4) {
            ck_assert_msg(st == SL_ERR_TIMEOUT, "round %d: %s", (int)round, sl_err_msg());
            ck_assert_uint_eq(p.nanswered, 0);
            ck_assert_uint_eq(n, 2);
            ck_assert(rows[0] == 1 && rows[1] == 3);
            const float own[4] = {1, 2, 8, 10};
            test_assert_floats(mean, own, 4);
            continue;
        }
        ck_assert_msg(st == SL_OK, "%s", sl_err_msg());
        ck_assert_uint_eq(p.nanswered, 1);
        ck_assert_uint_eq(n, 3);
        ck_assert(rows[0] == 1 && rows[1] == 2 && rows[2] == 3);
        const float avg[6] = {2, 3, 12, 14, 7, 9}; /* (own + answer) / 2 */
        test_assert_floats(mean, avg, 6);
    }
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_NONFINITE), 1);
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_BAD_SIZE), 2);
    sl_sparse_destroy(&sp);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}
END_TEST

static Suite *
sync_rows_suite(void)
{
    Suite *s = suite_create("sync_rows");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_row_shards_one_exchange);
    tcase_add_loop_test(core, test_unique_equals_dense, 0,
                        (int)(sizeof unique_cases / sizeof unique_cases[0]));
    tcase_add_test(core, test_bmuf_rows_by_hand);
    tcase_add_loop_test(core, test_compression_bound, 0,
                        (int)(sizeof compress_cases / sizeof compress_cases[0]));
    tcase_add_test(core, test_sparse_select);
    tcase_add_test(core, test_exchange_settings);
    tcase_add_test(core, test_sync_state_resume);
    tcase_add_test(limits, test_sync_state_limits);
    tcase_add_test(limits, test_bad_answers_refused);
    tcase_add_loop_test(limits, test_rows_alone, 0,
                        (int)(sizeof alone_overlap / sizeof alone_overlap[0]));
    tcase_set_timeout(core, 120);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sync_rows_suite());
}
