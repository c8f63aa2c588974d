/* Tests of src/embed/sl_sparse_allreduce: forked clusters of 1..5 nodes over ipc://
 * run the unique, allgather and dense exchanges of one row shard on random touched sets
 * (overlapping, disjoint, empty on some nodes, every row, rows outside the shard) and
 * compare each with the sum every node computes locally from all nodes' rows; then a
 * silent peer (SL_ERR_TIMEOUT within the timeout), a peer that aborts
 * (SL_ERR_SHUTDOWN), a malicious peer that sends counts and rows that break the
 * contract (SL_ERR_INVALID on every honest node), and bad arguments.
 *
 * What is asserted, per element of the shard:
 *   allgather == the float sum in rank order from zero (bitwise: that is its order);
 *   unique, dense within 1e-6 x sum |terms| of the double sum (the ring adds in another
 *   order), and bitwise equal to the rank-order sum, hence to each other, in every row
 *   that at most two nodes touched (two nonzero terms add the same in any order);
 *   rows no node touched are 0 in every mode; all nodes end bit-identical (hash).
 * The clusters run on test_util.c's harness (fork, endpoints through pipes, kill-all,
 * hang guard); waits end on frames, not on the clock, and short timeouts appear only
 * where a timeout is what is tested. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_clock.h"
#include "common/sl_half.h"
#include "common/sl_hash.h"
#include "common/sl_rng.h"
#include "embed/sl_sparse_allreduce.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"
#include "test_tool.h"
#include "test_util.h"

#define RUN 0x5a5e0000c0deULL
#define COMP 3u
/* The shard: vocabulary rows [RB, RB + R) of D floats; touched rows reach below and above. */
#define RB 100
#define R 300
#define D 7
#define VOCAB (RB + R + 50)
/* Collective options with a receive timeout. */
#define WAIT(ms) (&(sl_collective_opts_t){.timeout_ms = (ms)})

/* ---------------------------------------------------------------- forked clusters */

/* A node function returns 0 when its checks passed; res[0] is a hash of its results,
 * res[1] and res[2] the bytes it sent and received. */

/* Contexts of a node, destroyed after its transport: after a failed call ZeroMQ may
 * still hold their buffers (sl_collective.h). */
static sl_sparse_allreduce_t *keep[8];

static void
destroy_kept(void)
{
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        sl_sparse_allreduce_destroy(&keep[i]);
}

/* n nodes on ipc:// running fn, every one of which must pass; final_barrier 0 when a
 * node leaves early. */
static void
run_cluster(test_cluster_t *c, int n, test_node_fn fn, int final_barrier, const char *what)
{
    test_cluster_init(c, n, 1, RUN, fn, NULL);
    c->node_exit = destroy_kept;
    c->final_barrier = final_barrier;
    test_cluster_assert_ok(c, what);
}

static sl_component_t
shard(void)
{
    sl_component_t c = {.name = "embedding.1",
                        .offset = 0,
                        .count = (size_t)R * D,
                        .sparse = 1,
                        .row_begin = RB,
                        .rows = R,
                        .row_len = D};
    return c;
}

/* ---------------------------------------------------------------- touched sets */

enum { OVERLAP, DISJOINT, SOME_EMPTY, ALL_ROWS, ALL_EMPTY, NSCEN };
static const char *const scen_name[NSCEN] = {"overlapping", "disjoint", "empty on some nodes",
                                             "all rows", "empty everywhere"};

/* Node k's touched rows (absolute ids, ascending, some outside shard c) and its shard
 * gradient (c's rows x row_len): nonzero random values in its touched rows of the
 * shard, 0 elsewhere. */
static void
touched_in(const sl_component_t *c, int scen, int k, int n, int32_t *rows, int *nrows, float *grad)
{
    static unsigned char on[VOCAB];
    long rb = c->row_begin, nr = c->rows;
    int d = c->row_len;
    uint64_t key = sl_mix64((uint64_t)scen * 1000 + (uint64_t)k);

    memset(on, 0, sizeof on);
    switch (scen) {
    case OVERLAP: /* skewed towards low ids, as Zipf: the nodes share the frequent rows */
    case SOME_EMPTY:
        for (int i = 0; i < 60 + 25 * k; i++) {
            float u = sl_rng_float_at(key, (uint64_t)i);
            on[(int)(u * u * VOCAB)] = 1;
        }
        if (scen == SOME_EMPTY && k == 1)
            memset(on, 0, sizeof on); /* no rows at all */
        if (scen == SOME_EMPTY && k == 0) {
            memset(on, 0, sizeof on); /* rows, none in the shard */
            on[3] = on[RB - 1] = on[RB + R] = 1;
        }
        break;
    case DISJOINT:
        for (int r = 0; r < VOCAB; r++)
            on[r] = r % n == k && sl_rng_float_at(key, (uint64_t)r) < 0.7f;
        break;
    case ALL_ROWS:
        memset(on, 1, sizeof on);
        break;
    default:
        break;
    }
    *nrows = 0;
    memset(grad, 0, (size_t)nr * d * sizeof *grad);
    for (int r = 0; r < VOCAB; r++) {
        if (!on[r])
            continue;
        rows[(*nrows)++] = r;
        if (r < rb || r >= rb + nr)
            continue;
        for (int e = 0; e < d; e++) { /* in [-1, -1/8) or [1/8, 1): never 0 */
            float u = sl_rng_float_at(key ^ 0xabcdULL, (uint64_t)r * d + (uint64_t)e);
            grad[(r - rb) * d + e] = (u < 0.5f ? -1.0f : 1.0f) * (0.125f + 1.75f * fabsf(u - 0.5f));
        }
    }
}

/* touched_in for the shard of shard(). */
static void
touched(int scen, int k, int n, int32_t *rows, int *nrows, float *grad)
{
    sl_component_t c = shard();

    touched_in(&c, scen, k, n, rows, nrows, grad);
}

/* Floats an allreduce of count floats makes node me of n send. */
static size_t
allreduce_sent(size_t count, uint32_t me, uint32_t n)
{
    size_t sent = 0, recvd = 0;

    test_allreduce_floats(count, n, me, 0, &sent, &recvd);
    return sent;
}

/* Floats an allgather of counts makes node me of n send, by the algorithm sl_allgather
 * takes (test_allgather_doubles_when in check_transport_cluster checks its choice). */
static size_t
allgather_sent(const size_t *counts, uint32_t me, uint32_t n)
{
    size_t sent = 0, recvd = 0;

    test_allgather_floats(counts, n, me, sl_allgather_doubles(n, counts, 0, 0), &sent, &recvd);
    return sent;
}

/* Every scenario in every mode on one context, checked against the local sums. */
static int
node_modes(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    static const sl_exchange_t modes[3] = {SL_EXCHANGE_UNIQUE, SL_EXCHANGE_ALLGATHER,
                                           SL_EXCHANGE_DENSE};
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    sl_component_t comp = shard();
    static int32_t rows[VOCAB], krows[VOCAB];
    static float grad[R * D], kgrad[R * D], fsum[R * D], out[3][R * D];
    static double dsum[R * D], asum[R * D];
    static int cnt[R];
    uint64_t round = 5;
    size_t warm_bytes = 0;
    sl_hash_t h;

    sl_hash_init(&h, 7);
    if (sl_sparse_allreduce_new(&keep[0], &comp, (int)n) != SL_OK)
        return 1;
    /* ALL_ROWS (the worst case) comes first among the rest: after it, and a warm-up, the
     * buffers never grow again */
    static const int order[] = {OVERLAP, ALL_ROWS, DISJOINT, SOME_EMPTY, ALL_EMPTY, OVERLAP};
    for (size_t oi = 0; oi < sizeof order / sizeof order[0]; oi++) {
        int scen = order[oi], nrows, kn, ug = 0;
        size_t uk[TEST_CLUSTER_MAXN], total = 0;

        /* the local reference: every node's rows, summed */
        memset(fsum, 0, sizeof fsum);
        memset(dsum, 0, sizeof dsum);
        memset(asum, 0, sizeof asum);
        memset(cnt, 0, sizeof cnt);
        for (uint32_t k = 0; k < n; k++) {
            touched(scen, (int)k, (int)n, krows, &kn, kgrad);
            uk[k] = 0;
            for (int i = 0; i < kn; i++)
                if (krows[i] >= RB && krows[i] < RB + R)
                    cnt[krows[i] - RB]++, uk[k]++;
            total += uk[k];
            for (int j = 0; j < R * D; j++) {
                fsum[j] += kgrad[j];
                dsum[j] += kgrad[j];
                asum[j] += fabs(kgrad[j]);
            }
        }
        for (int r = 0; r < R; r++)
            ug += cnt[r] > 0;
        touched(scen, (int)me, (int)n, rows, &nrows, grad);

        for (int m = 0; m < 3; m++) {
            sl_sparse_stats_t s;
            size_t want;

            memcpy(out[m], grad, sizeof grad);
            if (sl_sparse_allreduce(keep[0], t, COMP, round++, modes[m], rows, nrows, out[m],
                                    WAIT(TEST_WAIT_MS)) != SL_OK)
                return 10 + m;
            sl_sparse_allreduce_stats(keep[0], &s);
            if (s.local_rows != uk[me] ||
                s.gather_rows != (modes[m] == SL_EXCHANGE_DENSE ? 0 : total) ||
                s.union_rows != (modes[m] == SL_EXCHANGE_UNIQUE      ? (size_t)ug
                                 : modes[m] == SL_EXCHANGE_ALLGATHER ? 0
                                                                     : (size_t)R)) {
                fprintf(stderr,
                        "%s, mode %d: stats local %zu gather %zu union %zu, want %zu %zu %d\n",
                        scen_name[scen], m, s.local_rows, s.gather_rows, s.union_rows, uk[me],
                        total, ug);
                return 20 + m;
            }
            /* payload floats sent: counts (a word each), index blocks, then the values
             * (allreduce) or the row blocks */
            size_t ones[TEST_CLUSTER_MAXN], ukd[TEST_CLUSTER_MAXN];
            for (uint32_t k = 0; k < n; k++) {
                ones[k] = 1;
                ukd[k] = uk[k] * D;
            }
            want = modes[m] == SL_EXCHANGE_DENSE ? allreduce_sent((size_t)R * D, me, n)
                   : modes[m] == SL_EXCHANGE_UNIQUE
                       ? allgather_sent(ones, me, n) + allgather_sent(uk, me, n) +
                             allreduce_sent((size_t)ug * D, me, n)
                       : allgather_sent(ones, me, n) + allgather_sent(uk, me, n) +
                             allgather_sent(ukd, me, n);
            if (n == 1)
                want = 0;
            if (s.sent_bytes != want * sizeof(float) + s.sent_frames * SL_WIRE_HEADER_BYTES) {
                fprintf(stderr, "%s, mode %d: sent %llu bytes in %llu frames, want %zu payload\n",
                        scen_name[scen], m, (unsigned long long)s.sent_bytes,
                        (unsigned long long)s.sent_frames, want * sizeof(float));
                return 30 + m;
            }
            res[1] += s.sent_bytes;
            res[2] += s.recv_bytes;
            if (oi == 2 && m == 0)
                warm_bytes = s.buffer_bytes;
            if (oi > 2 && n > 1 && s.buffer_bytes != warm_bytes) {
                fprintf(stderr, "buffers grew after the worst case: %zu -> %zu bytes\n", warm_bytes,
                        s.buffer_bytes);
                return 40;
            }
            sl_hash_update(&h, out[m], sizeof out[m]);
        }
        if (memcmp(out[1], fsum, sizeof fsum) != 0)
            return 50; /* allgather adds in rank order */
        for (int j = 0; j < R * D; j++) {
            double tol = 1e-6 * asum[j];
            for (int m = 0; m < 3; m += 2) {
                if (fabs(out[m][j] - dsum[j]) > tol ||
                    (cnt[j / D] <= 2 && memcmp(&out[m][j], &fsum[j], sizeof fsum[j]) != 0)) {
                    fprintf(stderr,
                            "%s, %u nodes, mode %d: [%d] (row touched by %d) = %.9g, "
                            "want %.9g (rank-order sum %.9g)\n",
                            scen_name[scen], n, m, j, cnt[j / D], out[m][j], dsum[j], fsum[j]);
                    return 60 + m;
                }
            }
        }
    }
    res[0] = sl_hash_final(&h);
    return 0;
}

START_TEST(test_modes)
{
    test_cluster_t c;
    for (int n = 1; n <= 5; n++) {
        run_cluster(&c, n, node_modes, 1, "unique / allgather / dense");
        uint64_t sent = 0, recv = 0;
        for (int i = 0; i < n; i++) {
            ck_assert_msg(c.res[i][0] == c.res[0][0], "%d nodes: rank %d's results differ", n, i);
            sent += c.res[i][1];
            recv += c.res[i][2];
        }
        ck_assert_msg(sent == recv, "%d nodes: %llu bytes sent, %llu received", n,
                      (unsigned long long)sent, (unsigned long long)recv);
        ck_assert(n == 1 || sent > 0);
    }
}
END_TEST

/* ---------------------------------------------------------------- several shards */

/* The second shard of test_shards: rows [0, 120) of 3 floats, below the first's. */
static const sl_component_t shard_b = {
    .name = "softmax.0", .count = 120 * 3, .sparse = 1, .row_begin = 0, .rows = 120, .row_len = 3};
/* Its dense spans' lengths. */
static const size_t span_len[2] = {5, 6};

/* What every node's rows of shard c in scenario scen sum to: fsum in rank order from
 * zero, asum of the magnitudes; cnt[r] the nodes that touched row r, uk[k] node k's rows
 * in the shard; returns U_g. */
static int
reference(const sl_component_t *c, int scen, uint32_t n, float *fsum, double *asum, int *cnt,
          size_t *uk)
{
    static int32_t krows[VOCAB];
    static float kgrad[R * D];
    size_t len = (size_t)c->rows * (size_t)c->row_len;
    int kn, ug = 0;

    memset(fsum, 0, len * sizeof *fsum);
    memset(asum, 0, len * sizeof *asum);
    memset(cnt, 0, (size_t)c->rows * sizeof *cnt);
    for (uint32_t k = 0; k < n; k++) {
        touched_in(c, scen, (int)k, (int)n, krows, &kn, kgrad);
        uk[k] = 0;
        for (int i = 0; i < kn; i++)
            if (krows[i] >= c->row_begin && krows[i] < c->row_begin + c->rows)
                cnt[krows[i] - c->row_begin]++, uk[k]++;
        for (size_t j = 0; j < len; j++) {
            fsum[j] += kgrad[j];
            asum[j] += fabs(kgrad[j]);
        }
    }
    for (long r = 0; r < c->rows; r++)
        ug += cnt[r] > 0;
    return ug;
}

/* out (shard c, its rows' fsum, asum, cnt) against the sum: allgather bitwise, unique
 * within 1e-6 x sum |terms| and bitwise where at most two nodes touched the row. */
static int
sum_ok(const sl_component_t *c, sl_exchange_t mode, const float *out, const float *fsum,
       const double *asum, const int *cnt)
{
    size_t len = (size_t)c->rows * (size_t)c->row_len;

    for (size_t j = 0; j < len; j++)
        if (mode == SL_EXCHANGE_ALLGATHER || cnt[j / (size_t)c->row_len] <= 2
                ? memcmp(&out[j], &fsum[j], sizeof *out) != 0
                : fabs(out[j] - fsum[j]) > 1e-6 * asum[j]) {
            fprintf(stderr, "%s, mode %d: [%zu] = %.9g, want %.9g\n", c->name, (int)mode, j, out[j],
                    fsum[j]);
            return 1;
        }
    return 0;
}

/* Two shards of different rows and widths and two dense spans in one call per mode
 * and scenario: each shard's sum as the rows give it, the spans' sums exact (multiples
 * of 1/4), each shard's rows in its stats, and on the wire exactly three collectives:
 * 2 counts a node, then each node's rows of both shards, then (unique) one allreduce of
 * both unions' values and the spans, or (allgather) both shards' values gathered and
 * one allreduce of the spans. */
static int
node_shards(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    static const sl_exchange_t modes[2] = {SL_EXCHANGE_UNIQUE, SL_EXCHANGE_ALLGATHER};
    const sl_component_t a = shard(), *shards[2] = {&a, &shard_b};
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    static int32_t rows[2][VOCAB];
    static float grad[2][R * D], fsum[2][R * D], dense[11];
    static double asum[2][R * D];
    static int cnt[2][R];
    uint64_t round = 2;
    sl_hash_t h;

    (void)c;
    sl_hash_init(&h, 9);
    if (sl_sparse_allreduce_new_shards(&keep[0], shards, 2, 11, (int)n) != SL_OK)
        return 1;
    for (int scen = OVERLAP; scen <= SOME_EMPTY; scen++)
        for (int m = 0; m < 2; m++) {
            int sc[2] = {scen, (scen + 1) % 3}, nrows[2], ug[2];
            size_t uk[2][TEST_CLUSTER_MAXN], two[TEST_CLUSTER_MAXN], both[TEST_CLUSTER_MAXN],
                vals[TEST_CLUSTER_MAXN], want, total;
            sl_sparse_part_t parts[2];
            sl_sparse_span_t spans[2] = {{dense, span_len[0]}, {dense + 5, span_len[1]}};
            sl_sparse_stats_t s;

            for (int p = 0; p < 2; p++) {
                ug[p] = reference(shards[p], sc[p], n, fsum[p], asum[p], cnt[p], uk[p]);
                touched_in(shards[p], sc[p], (int)me, (int)n, rows[p], &nrows[p], grad[p]);
                parts[p] = (sl_sparse_part_t){rows[p], nrows[p], grad[p]};
            }
            for (int i = 0; i < 11; i++)
                dense[i] = 0.25f * (float)((me + 1) * (uint32_t)(i + 1));
            if (sl_sparse_allreduce_shards(keep[0], t, COMP, round++, modes[m], parts, spans, 2,
                                           WAIT(TEST_WAIT_MS)) != SL_OK)
                return 10 + m;
            for (int p = 0; p < 2; p++) {
                if (sum_ok(shards[p], modes[m], grad[p], fsum[p], asum[p], cnt[p]))
                    return 20 + 2 * p + m;
                total = 0;
                for (uint32_t k = 0; k < n; k++)
                    total += uk[p][k];
                sl_sparse_allreduce_shard_stats(keep[0], p, &s);
                if (s.local_rows != uk[p][me] || s.gather_rows != total ||
                    s.union_rows != (modes[m] == SL_EXCHANGE_UNIQUE ? (size_t)ug[p] : 0) ||
                    s.sent_bytes != 0)
                    return 30 + 2 * p + m;
                sl_hash_update(&h, grad[p], sizeof grad[p]);
            }
            for (int i = 0; i < 11; i++)
                if (dense[i] != 0.25f * (float)((i + 1) * n * (n + 1) / 2))
                    return 40 + m;
            for (uint32_t k = 0; k < n; k++) {
                two[k] = 2;
                both[k] = uk[0][k] + uk[1][k];
                vals[k] = uk[0][k] * D + uk[1][k] * 3;
            }
            want = allgather_sent(two, me, n) + allgather_sent(both, me, n) +
                   (modes[m] == SL_EXCHANGE_UNIQUE
                        ? allreduce_sent((size_t)ug[0] * D + (size_t)ug[1] * 3 + 11, me, n)
                        : allgather_sent(vals, me, n) + allreduce_sent(11, me, n));
            sl_sparse_allreduce_stats(keep[0], &s);
            if (n == 1)
                want = 0;
            if (s.sent_bytes != want * sizeof(float) + s.sent_frames * SL_WIRE_HEADER_BYTES) {
                fprintf(stderr, "shards, mode %d: sent %llu bytes in %llu frames, want %zu\n", m,
                        (unsigned long long)s.sent_bytes, (unsigned long long)s.sent_frames,
                        want * sizeof(float));
                return 50 + m;
            }
        }
    res[0] = sl_hash_final(&h);
    return 0;
}

START_TEST(test_shards)
{
    test_cluster_t c;
    for (int n = 1; n <= 5; n++) {
        run_cluster(&c, n, node_shards, 1, "two shards and dense spans in one call");
        for (int i = 0; i < n; i++)
            ck_assert_msg(c.res[i][0] == c.res[0][0], "%d nodes: rank %d's results differ", n, i);
    }
}
END_TEST

/* ---------------------------------------------------------------- compressed values */

/* A bf16 codec (scale 1) as sync.compression would give: only the values may go through
 * it; index words through it would come back as other rows and fail the checks. */
static float
bf16_scale(const void *ctx, const float *x, size_t n)
{
    (void)ctx, (void)x, (void)n;
    return 1.0f;
}

static void
bf16_encode(const void *ctx, float scale, const float *x, size_t n, void *dst)
{
    (void)ctx, (void)scale;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = sl_fp32_to_bf16(x[i]);
        memcpy((unsigned char *)dst + 2 * i, &h, sizeof h);
    }
}

static sl_status_t
bf16_decode(const void *ctx, float scale, const void *src, size_t bytes, float *x, size_t n)
{
    (void)ctx, (void)scale;
    if (bytes != 2 * n)
        return sl_err_set(SL_ERR_INVALID, "bf16: %zu bytes for %zu values", bytes, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, (const unsigned char *)src + 2 * i, sizeof h);
        x[i] = sl_bf16_to_fp32(h);
    }
    return SL_OK;
}

/* Every mode with bf16 values: the same result on every node, within bf16's rounding
 * (2^-8 relative per encoding, a few encodings per value) of the sum, and 2-byte
 * values next to 4-byte index words on the wire. */
static int
node_codec(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    static const sl_exchange_t modes[3] = {SL_EXCHANGE_UNIQUE, SL_EXCHANGE_ALLGATHER,
                                           SL_EXCHANGE_DENSE};
    static const sl_codec_t bf16 = {SL_WIRE_BF16, bf16_scale, bf16_encode, bf16_decode, NULL};
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t), right = (me + 1) % n;
    sl_component_t comp = shard();
    sl_collective_opts_t o = {.timeout_ms = TEST_WAIT_MS, .codec = &bf16};
    static int32_t rows[VOCAB], krows[VOCAB];
    static float grad[R * D], kgrad[R * D], out[R * D];
    static double dsum[R * D], asum[R * D];
    size_t uk[TEST_CLUSTER_MAXN], total = 0;
    int nrows, kn;
    sl_hash_t h;

    (void)c;
    sl_hash_init(&h, 9);
    memset(dsum, 0, sizeof dsum);
    memset(asum, 0, sizeof asum);
    for (uint32_t k = 0; k < n; k++) {
        touched(OVERLAP, (int)k, (int)n, krows, &kn, kgrad);
        uk[k] = 0;
        for (int i = 0; i < kn; i++)
            uk[k] += krows[i] >= RB && krows[i] < RB + R;
        total += uk[k];
        for (int j = 0; j < R * D; j++) {
            dsum[j] += kgrad[j];
            asum[j] += fabs(kgrad[j]);
        }
    }
    touched(OVERLAP, (int)me, (int)n, rows, &nrows, grad);
    if (sl_sparse_allreduce_new(&keep[0], &comp, (int)n) != SL_OK)
        return 1;
    for (int m = 0; m < 3; m++) {
        sl_sparse_stats_t s;
        memcpy(out, grad, sizeof grad);
        if (sl_sparse_allreduce(keep[0], t, COMP, (uint64_t)m, modes[m], rows, nrows, out, &o) !=
            SL_OK)
            return 10 + m;
        for (int j = 0; j < R * D; j++)
            if (fabs(out[j] - dsum[j]) > 0.02 * asum[j]) {
                fprintf(stderr, "bf16, mode %d: [%d] = %.6g, want %.6g\n", m, j, out[j], dsum[j]);
                return 20 + m;
            }
        sl_sparse_allreduce_stats(keep[0], &s);
        if (modes[m] == SL_EXCHANGE_ALLGATHER &&
            s.sent_bytes != 4 * ((n - 1) + (total - uk[right])) + 2 * (total - uk[right]) * D +
                                s.sent_frames * SL_WIRE_HEADER_BYTES)
            return 30;
        sl_hash_update(&h, out, sizeof out);
    }
    res[0] = sl_hash_final(&h);
    return 0;
}

START_TEST(test_codec)
{
    test_cluster_t c;
    run_cluster(&c, 3, node_codec, 1, "bf16 values");
    for (int i = 1; i < c.n; i++)
        ck_assert_msg(c.res[i][0] == c.res[0][0], "rank %d's results differ", i);
}
END_TEST

/* ---------------------------------------------------------------- failures */

#define SHORT_MS 400
#define LONG_MS 60000 /* a timeout the aborting peer's frame must beat by far */

/* Rank 2's stand-in for silence and for leaving: it waits, doing nothing else, until
 * ranks 0 and 1 each send it a frame of this component saying they are done. */
#define DONE_COMP 50u

static int
wait_done(sl_transport_t *t)
{
    float x;
    size_t got;

    for (uint32_t p = 0; p < 2; p++) {
        sl_wire_key_t k = {0, DONE_COMP, 0, p, SL_WIRE_DATA};
        if (sl_transport_recv(t, &k, &x, sizeof x, &got, TEST_WAIT_MS) != SL_OK)
            return -1;
    }
    return 0;
}

static int
say_done(sl_transport_t *t)
{
    float x = 1.0f;
    sl_wire_key_t k = {0, DONE_COMP, 0, 2, SL_WIRE_DATA};

    return sl_transport_send(t, &k, &x, 1, SL_WIRE_FP32, 1.0f, 0, -1) == SL_OK ? 0 : -1;
}

/* Rank 2 never calls: the others fail with SL_ERR_TIMEOUT after SHORT_MS (no sooner), in
 * every mode, and the failed context refuses further calls. */
static int
node_silent(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    static const sl_exchange_t modes[3] = {SL_EXCHANGE_UNIQUE, SL_EXCHANGE_ALLGATHER,
                                           SL_EXCHANGE_DENSE};
    static int32_t rows[VOCAB];
    static float grad[R * D];
    sl_component_t comp = shard();
    int nrows;

    (void)c;
    if (sl_transport_rank(t) == 2)
        return wait_done(t) == 0 ? 0 : 2;
    touched(OVERLAP, (int)sl_transport_rank(t), 3, rows, &nrows, grad);
    for (int m = 0; m < 3; m++) {
        if (sl_sparse_allreduce_new(&keep[m], &comp, 3) != SL_OK)
            return 1;
        double t0 = sl_clock_now();
        sl_status_t st = sl_sparse_allreduce(keep[m], t, COMP, (uint64_t)m, modes[m], rows, nrows,
                                             grad, WAIT(SHORT_MS));
        double dt = sl_clock_now() - t0;
        if (st != SL_ERR_TIMEOUT || !strstr(sl_err_msg(), "sparse allreduce: component 3")) {
            fprintf(stderr, "mode %d: status %d: %s\n", m, st, sl_err_msg());
            return 10 + m;
        }
        if (dt < 0.9 * SHORT_MS / 1000.0 || dt > SHORT_MS / 1000.0 + TEST_LATE_S) {
            fprintf(stderr, "mode %d: failed after %.3f s\n", m, dt);
            return 20 + m;
        }
        if (sl_sparse_allreduce(keep[m], t, COMP, 10, modes[m], rows, nrows, grad,
                                WAIT(SHORT_MS)) != SL_ERR_INVALID)
            return 30 + m;
    }
    res[0] = 1;
    return say_done(t) == 0 ? 0 : 40;
}

/* Rank 2 aborts: the others stop with SL_ERR_SHUTDOWN long before their timeout. */
static int
node_aborts(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    static int32_t rows[VOCAB];
    static float grad[R * D];
    sl_component_t comp = shard();
    int nrows;

    (void)c;
    (void)res;
    if (sl_transport_rank(t) == 2) {
        if (sl_transport_abort(t, "out of memory", TEST_WAIT_MS) != SL_OK)
            return 10;
        return wait_done(t) == 0 ? 0 : 13; /* a frame still queued at exit could be lost */
    }
    touched(OVERLAP, (int)sl_transport_rank(t), 3, rows, &nrows, grad);
    if (sl_sparse_allreduce_new(&keep[0], &comp, 3) != SL_OK)
        return 1;
    double t0 = sl_clock_now();
    if (sl_sparse_allreduce(keep[0], t, COMP, 0, SL_EXCHANGE_UNIQUE, rows, nrows, grad,
                            WAIT(LONG_MS)) != SL_ERR_SHUTDOWN)
        return 11;
    if (sl_clock_now() - t0 > LONG_MS / 2000.0)
        return 12;
    return say_done(t) == 0 ? 0 : 14;
}

START_TEST(test_silent_peer)
{
    test_cluster_t c;
    run_cluster(&c, 3, node_silent, 0, "silent peer");
    run_cluster(&c, 3, node_aborts, 0, "aborting peer");
}
END_TEST

/* Rank 1 speaks the protocol by hand (the counts and index allgathers of rounds 3r and
 * 3r + 1) with one lie per round; ranks 0 and 2 must answer SL_ERR_INVALID naming it. */
enum { LIE_COUNT, LIE_RANGE, LIE_UNSORTED, LIE_DUPLICATE, LIE_ALLGATHER_RANGE, NLIES };

static float
word(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int
node_malicious(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    static int32_t rows[VOCAB];
    static float grad[R * D];
    uint32_t me = sl_transport_rank(t);
    sl_component_t comp = shard();
    int nrows;

    (void)c;
    touched(OVERLAP, (int)me, 3, rows, &nrows, grad);
    for (int lie = 0; lie < NLIES; lie++) {
        uint64_t round = (uint64_t)lie;
        int allgather = lie == LIE_ALLGATHER_RANGE;
        if (me == 1) {
            static const uint32_t idx[NLIES][3] = {
                {0, 0, 0}, {2, 9, R}, {2, 9, 4}, {2, 9, 9}, {R + 7, 1, 2}};
            static float out[3 * R];
            float counts[3], words[3];
            size_t ones[3] = {1, 1, 1}, sizes[3];
            uint32_t nmine = lie == LIE_COUNT ? R + 1 : 3;

            counts[1] = word(nmine);
            if (sl_allgather(t, COMP, 3 * round, counts + 1, counts, ones, NULL) != SL_OK)
                return 10 + lie;
            if (lie == LIE_COUNT)
                continue;
            for (int i = 0; i < 3; i++)
                words[i] = word(idx[lie][i]);
            for (int k = 0; k < 3; k++) {
                uint32_t u;
                memcpy(&u, &counts[k], sizeof u);
                sizes[k] = u;
            }
            if (sizes[0] + sizes[1] + sizes[2] > sizeof out / sizeof out[0])
                return 20 + lie;
            if (sl_allgather(t, COMP, 3 * round + 1, words, out, sizes, NULL) != SL_OK)
                return 30 + lie;
            continue;
        }
        if (sl_sparse_allreduce_new(&keep[lie], &comp, 3) != SL_OK)
            return 1;
        sl_status_t st = sl_sparse_allreduce(keep[lie], t, COMP, round,
                                             allgather ? SL_EXCHANGE_ALLGATHER : SL_EXCHANGE_UNIQUE,
                                             rows, nrows, grad, WAIT(TEST_WAIT_MS));
        if (st != SL_ERR_INVALID || !strstr(sl_err_msg(), "rank 1")) {
            fprintf(stderr, "lie %d: status %d: %s\n", lie, st, sl_err_msg());
            return 40 + lie;
        }
    }
    res[0] = 1;
    return 0;
}

START_TEST(test_malicious_peer)
{
    test_cluster_t c;
    run_cluster(&c, 3, node_malicious, 1, "malicious peer");
}
END_TEST

/* Arguments, in one process with a transport of one node. */
START_TEST(test_bad_arguments)
{
    sl_transport_t *t;
    sl_transport_opts_t o;
    sl_sparse_allreduce_t *sa = NULL;
    sl_sparse_stats_t s;
    sl_component_t comp = shard(), dense = shard();
    int32_t rows[4] = {RB - 1, RB, RB + 5, RB + R};
    float grad[R * D], copy[R * D];

    sl_transport_opts_default(&o);
    o.run_id = RUN;
    o.rank = 0;
    o.size = 1;
    o.bind_endpoint = "ipc://*";
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    dense.sparse = 0;
    ck_assert_int_eq(sl_sparse_allreduce_new(&sa, &dense, 1), SL_ERR_INVALID);
    ck_assert_ptr_null(sa);
    ck_assert_int_eq(sl_sparse_allreduce_new(&sa, &comp, 0), SL_ERR_INVALID);
    comp.row_len = 0;
    ck_assert_int_eq(sl_sparse_allreduce_new(&sa, &comp, 1), SL_ERR_INVALID);
    comp = shard();
    /* a context for 2 nodes on a transport of 1 */
    ck_assert_int_eq(sl_sparse_allreduce_new(&sa, &comp, 2), SL_OK);
    ck_assert_int_eq(
        sl_sparse_allreduce(sa, t, COMP, 0, SL_EXCHANGE_UNIQUE, rows, 4, grad, WAIT(100)),
        SL_ERR_INVALID);
    sl_sparse_allreduce_destroy(&sa);
    ck_assert_ptr_null(sa);
    sl_sparse_allreduce_destroy(&sa); /* NULL is fine */
    /* one node: nothing moves; own rows are still checked */
    ck_assert_int_eq(sl_sparse_allreduce_new(&sa, &comp, 1), SL_OK);
    for (int j = 0; j < R * D; j++)
        grad[j] = copy[j] = (float)j;
    ck_assert_int_eq(
        sl_sparse_allreduce(sa, t, COMP, 0, SL_EXCHANGE_UNIQUE, rows, 4, grad, WAIT(100)), SL_OK);
    ck_assert(memcmp(grad, copy, sizeof grad) == 0);
    sl_sparse_allreduce_stats(sa, &s);
    ck_assert_uint_eq(s.local_rows, 2); /* RB and RB + 5: the others are outside */
    ck_assert_uint_eq(s.sent_bytes, 0);
    rows[2] = RB;
    ck_assert_int_eq(
        sl_sparse_allreduce(sa, t, COMP, 1, SL_EXCHANGE_UNIQUE, rows, 4, grad, WAIT(100)),
        SL_ERR_INVALID);
    ck_assert(strstr(sl_err_msg(), "strictly ascending"));
    ck_assert_int_eq(
        sl_sparse_allreduce(sa, t, COMP, 2, (sl_exchange_t)77, rows, 0, grad, WAIT(100)),
        SL_ERR_INVALID);
    ck_assert_int_eq(
        sl_sparse_allreduce(sa, t, COMP, 3, SL_EXCHANGE_DENSE, rows, -1, grad, WAIT(100)),
        SL_ERR_INVALID);
    sl_sparse_allreduce_destroy(&sa);
    /* several shards: none, more dense floats than the context's, dense mode */
    const sl_component_t *two[2] = {&comp, &shard_b};
    sl_sparse_part_t parts[2] = {{rows, 0, grad}, {rows, 0, copy}};
    sl_sparse_span_t span = {copy, 4};
    ck_assert_int_eq(sl_sparse_allreduce_new_shards(&sa, two, 0, 0, 1), SL_ERR_INVALID);
    ck_assert_int_eq(sl_sparse_allreduce_new_shards(&sa, two, 2, 3, 1), SL_OK);
    ck_assert_int_eq(
        sl_sparse_allreduce_shards(sa, t, COMP, 4, SL_EXCHANGE_UNIQUE, parts, &span, 1, WAIT(100)),
        SL_ERR_INVALID);
    span.count = 3;
    ck_assert_int_eq(
        sl_sparse_allreduce_shards(sa, t, COMP, 5, SL_EXCHANGE_DENSE, parts, &span, 1, WAIT(100)),
        SL_ERR_INVALID);
    ck_assert_int_eq(
        sl_sparse_allreduce_shards(sa, t, COMP, 6, SL_EXCHANGE_UNIQUE, parts, &span, 1, WAIT(100)),
        SL_OK);
    sl_sparse_allreduce_destroy(&sa);
    sl_transport_destroy(&t);
}
END_TEST

static Suite *
sparse_suite(void)
{
    Suite *s = suite_create("sparse");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 300); /* a hang guard: each cluster has its own */
    tcase_add_test(core, test_modes);
    tcase_add_test(core, test_codec);
    tcase_add_test(core, test_shards);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 300);
    tcase_add_test(limits, test_silent_peer);
    tcase_add_test(limits, test_malicious_peer);
    tcase_add_test(limits, test_bad_arguments);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sparse_suite());
}
