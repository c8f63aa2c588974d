/* Unit tests of src/embed/sl_quant.c and src/transport/sl_wire_quant.c: int8 / int4
 * block quantizers (round trip within the stated bound per block, nearest and
 * stochastic), error feedback (the sums of what was sent catch up with the sums of the
 * true values), stochastic rounding (unbiased, reproducible from its key), top-k (exactly
 * k entries, ties to the lower index), and payloads that must be refused. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_half.h"
#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "embed/sl_quant.h"
#include "transport/sl_wire.h"
#include "transport/sl_wire_quant.h"

#include "test_tool.h"

#define N 1000 /* not a multiple of the blocks below: a short last block */

static sl_quant_t *
quant(sl_compress_t enc, uint32_t block, sl_rounding_t r, double topk)
{
    sl_quant_opts_t o = {enc, block, r, topk};
    sl_quant_t *q;

    ck_assert_int_eq(sl_quant_new(&q, &o, N), SL_OK);
    return q;
}

/* n normal values times a magnitude that changes from block to block (x 10^(b mod 5)). */
static void
fill(float *x, size_t n, uint64_t key)
{
    sl_rng_t r;

    sl_rng_init(&r, key);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sl_rng_normal(&r) * pow(10.0, (double)((i / 64) % 5) - 3));
}

/* Encodes x, decodes it, and checks every entry against its block's bound: the block's
 * max|x| / qmax times 1/2 (nearest) or 1 (stochastic), plus one fp32 rounding. */
static void
check_round_trip(sl_compress_t enc, uint32_t block, sl_rounding_t r)
{
    static unsigned char buf[16384];
    float x[N], y[N];
    double qmax = enc == SL_COMPRESS_INT8 ? 127 : 7;
    double half = r == SL_ROUNDING_NEAREST ? 0.5 : 1.0;
    sl_quant_t *q = quant(enc, block, r, 0);
    size_t bytes;
    uint64_t base;

    fill(x, N, 7 + block);
    ck_assert_int_eq(sl_quant_encode(q, x, NULL, N, 42, 99, buf, sizeof buf, &bytes), SL_OK);
    ck_assert_uint_eq(bytes, sl_wire_quant_bytes(sl_quant_wire_encoding(q), block, N, 0));
    ck_assert_int_eq(sl_quant_decode(q, sl_quant_wire_encoding(q), buf, bytes, N, y, 0, &base),
                     SL_OK);
    ck_assert_uint_eq(base, 42);
    for (size_t b = 0; b * block < N; b++) {
        size_t j0 = b * block, j1 = j0 + block < N ? j0 + block : N;
        double m = 0, bound;
        for (size_t j = j0; j < j1; j++)
            m = fmax(m, fabs(x[j]));
        bound = half * m / qmax * (1 + 1e-6) + m * FLT_EPSILON;
        for (size_t j = j0; j < j1; j++)
            ck_assert_msg(fabs((double)y[j] - x[j]) <= bound, "%s block %u: |%g - %g| > %g",
                          sl_compress_name(enc), block, (double)y[j], (double)x[j], bound);
    }
    sl_quant_destroy(&q);
    ck_assert_ptr_null(q);
}

START_TEST(test_quant_round_trip)
{
    static const uint32_t blocks[] = {1, 7, 64, 256, 4096};

    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        check_round_trip(SL_COMPRESS_INT8, blocks[i], SL_ROUNDING_NEAREST);
        check_round_trip(SL_COMPRESS_INT4, blocks[i], SL_ROUNDING_NEAREST);
        check_round_trip(SL_COMPRESS_INT8, blocks[i], SL_ROUNDING_STOCHASTIC);
        check_round_trip(SL_COMPRESS_INT4, blocks[i], SL_ROUNDING_STOCHASTIC);
    }
}
END_TEST

/* 300 rounds of random deltas through one quantizer with error feedback: the sum of what
 * the receiver decoded plus the residual left equals the sum of the true deltas to fp32
 * rounding, and the residual stays within one message's bound, so the sums of sent and
 * true values differ by at most that. Every block holds one large value, so the small
 * ones (0.3 of a quantization step, on average positive) round to 0 every time: without
 * feedback their sum is lost entirely, with it they arrive. For int8 and int4, nearest
 * and stochastic, dense and top-k (30%: the entries left out wait in the residual). */
static void
check_feedback(sl_compress_t enc, sl_rounding_t r, double topk)
{
    static unsigned char buf[16384];
    enum { ROUNDS = 300, BLOCK = 100 };
    double qmax = enc == SL_COMPRESS_INT8 ? 127 : 7, step = 1.0 / qmax;
    float x[N], y[N], resid[N] = {0}, plain[N];
    double truth[N] = {0}, sent[N] = {0}, lost[N] = {0};
    sl_quant_t *q = quant(enc, BLOCK, r, topk), *p = quant(enc, BLOCK, r, topk);
    sl_rng_t rng;
    size_t bytes;

    sl_rng_init(&rng, 5);
    for (int t = 0; t < ROUNDS; t++) {
        for (size_t i = 0; i < N; i++) {
            x[i] =
                i % BLOCK == 0 ? 1.0f : (float)(step * (0.3 + 0.1 * (sl_rng_double(&rng) - 0.5)));
            truth[i] += x[i];
        }
        ck_assert_int_eq(sl_quant_encode(q, x, resid, N, 7, (uint64_t)t, buf, sizeof buf, &bytes),
                         SL_OK);
        ck_assert_int_eq(sl_quant_decode(q, sl_quant_wire_encoding(q), buf, bytes, N, y, 0, NULL),
                         SL_OK);
        for (size_t i = 0; i < N; i++)
            sent[i] += y[i];
        ck_assert_int_eq(sl_quant_encode(p, x, NULL, N, 7, (uint64_t)t, buf, sizeof buf, &bytes),
                         SL_OK);
        ck_assert_int_eq(
            sl_quant_decode(p, sl_quant_wire_encoding(p), buf, bytes, N, plain, 0, NULL), SL_OK);
        for (size_t i = 0; i < N; i++)
            lost[i] += plain[i];
    }
    for (size_t i = 0; i < N; i++) {
        double gap = truth[i] - sent[i];
        /* the identity, to the rounding of 300 fp32 additions */
        ck_assert_msg(fabs(gap - resid[i]) <= 1e-4 * fmax(1, fabs(truth[i])),
                      "entry %zu: true %g, sent %g, residual %g", i, truth[i], sent[i],
                      (double)resid[i]);
        /* dense: within one message's rounding; top-k: a few rounds' worth at most */
        ck_assert_msg(fabs(gap) <= (topk > 0 ? 8 : 1) * step * 1.01, "entry %zu: %g behind", i,
                      gap);
    }
    /* without feedback the small values (dense, nearest) never arrive */
    if (topk == 0 && r == SL_ROUNDING_NEAREST)
        for (size_t i = 1; i < N; i += BLOCK)
            ck_assert_msg(fabs(lost[i]) < 1e-9 && truth[i] > 50 * step,
                          "entry %zu: %g of %g arrived without feedback", i, lost[i], truth[i]);
    sl_quant_destroy(&q);
    sl_quant_destroy(&p);
}

START_TEST(test_quant_error_feedback)
{
    check_feedback(SL_COMPRESS_INT8, SL_ROUNDING_NEAREST, 0);
    check_feedback(SL_COMPRESS_INT4, SL_ROUNDING_NEAREST, 0);
    check_feedback(SL_COMPRESS_INT8, SL_ROUNDING_STOCHASTIC, 0);
    check_feedback(SL_COMPRESS_INT4, SL_ROUNDING_STOCHASTIC, 0);
    check_feedback(SL_COMPRESS_INT8, SL_ROUNDING_NEAREST, 0.3);
    check_feedback(SL_COMPRESS_INT4, SL_ROUNDING_STOCHASTIC, 0.3);
}
END_TEST

/* Stochastic rounding: over 4000 keys the mean of what decodes is the value itself
 * within 5 standard errors (a quantization step of 1/127 or 1/7 times the block's max),
 * where nearest rounding is off by a fixed bias; the same key gives the same bytes, and
 * another key other bytes. */
START_TEST(test_quant_stochastic_unbiased)
{
    static unsigned char a[4096], b[4096];
    enum { DRAWS = 4000, M = 8 };
    const float x[M] = {1.0f, 0.3f, -0.27f, 0.0101f, -0.5f, 0.77f, 0.001f, -0.999f};
    sl_compress_t encs[2] = {SL_COMPRESS_INT8, SL_COMPRESS_INT4};

    for (int e = 0; e < 2; e++) {
        sl_quant_t *s = quant(encs[e], M, SL_ROUNDING_STOCHASTIC, 0);
        sl_quant_t *n = quant(encs[e], M, SL_ROUNDING_NEAREST, 0);
        double qmax = encs[e] == SL_COMPRESS_INT8 ? 127 : 7, mean[M] = {0};
        float y[M], z[M];
        size_t na, nb;

        for (int d = 0; d < DRAWS; d++) {
            ck_assert_int_eq(
                sl_quant_encode(s, x, NULL, M, 0, 1000 + (uint64_t)d, a, sizeof a, &na), SL_OK);
            ck_assert_int_eq(sl_quant_decode(s, sl_quant_wire_encoding(s), a, na, M, y, 0, NULL),
                             SL_OK);
            for (int i = 0; i < M; i++)
                mean[i] += y[i] / (double)DRAWS;
        }
        ck_assert_int_eq(sl_quant_encode(n, x, NULL, M, 0, 0, b, sizeof b, &nb), SL_OK);
        ck_assert_int_eq(sl_quant_decode(n, sl_quant_wire_encoding(n), b, nb, M, z, 0, NULL),
                         SL_OK);
        for (int i = 0; i < M; i++) {
            double sigma = 0.5 / qmax / sqrt((double)DRAWS); /* the largest: p = 1/2 */
            ck_assert_msg(fabs(mean[i] - x[i]) < 5 * sigma, "%s x = %g: mean %g",
                          sl_compress_name(encs[e]), (double)x[i], mean[i]);
        }
        /* int4 nearest rounds 0.3 to 2/7 = 0.2857: a bias far beyond that tolerance */
        if (encs[e] == SL_COMPRESS_INT4)
            ck_assert(fabs(z[1] - x[1]) > 10 * 0.5 / qmax / sqrt((double)DRAWS));
        ck_assert_int_eq(sl_quant_encode(s, x, NULL, M, 0, 77, a, sizeof a, &na), SL_OK);
        ck_assert_int_eq(sl_quant_encode(s, x, NULL, M, 0, 77, b, sizeof b, &nb), SL_OK);
        ck_assert_uint_eq(na, nb);
        ck_assert_mem_eq(a, b, na);
        ck_assert_int_eq(sl_quant_encode(s, x, NULL, M, 0, 78, b, sizeof b, &nb), SL_OK);
        ck_assert_int_ne(memcmp(a, b, na), 0);
        sl_quant_destroy(&s);
        sl_quant_destroy(&n);
    }
}
END_TEST

/* Top-k: exactly k = ceil(topk n) entries travel, the largest by magnitude, and among
 * equal magnitudes (of either sign) the lower indices: brute force over all pairs says
 * which. The same input gives the same bytes every time (every node agrees). */
START_TEST(test_quant_topk)
{
    static unsigned char a[16384], b[16384];
    static uint64_t keys[N];
    float x[N], y[N];
    uint32_t idx[N];
    sl_quant_t *q = quant(SL_COMPRESS_INT8, 64, SL_ROUNDING_NEAREST, 0.1);
    sl_wire_quant_t h;
    size_t na, nb, k = 100;
    sl_rng_t r;

    sl_rng_init(&r, 11);
    for (size_t i = 0; i < N; i++) /* 8 magnitudes only: ties everywhere */
        x[i] = (float)((double)(sl_rng_below(&r, 8) + 1) * (sl_rng_u64(&r) & 1 ? -0.25 : 0.25));
    sl_quant_topk(x, N, k, keys, idx);
    for (size_t j = 0; j < k; j++) {
        size_t better = 0;
        if (j)
            ck_assert_uint_gt(idx[j], idx[j - 1]);
        for (size_t i = 0; i < N; i++) /* entries ranked before idx[j] */
            if (fabsf(x[i]) > fabsf(x[idx[j]]) || (fabsf(x[i]) == fabsf(x[idx[j]]) && i < idx[j]))
                better++;
        ck_assert_msg(better < k, "entry %u ranks %zu", (unsigned)idx[j], better);
    }
    ck_assert_uint_eq(sl_quant_entries(q, N), k);
    ck_assert_int_eq(sl_quant_encode(q, x, NULL, N, 3, 0, a, sizeof a, &na), SL_OK);
    ck_assert_int_eq(sl_wire_quant_parse(SL_WIRE_INT8, a, na, N, &h, NULL), SL_OK);
    ck_assert_uint_eq(h.entries, k);
    ck_assert_uint_gt(h.index_bytes, 0);
    ck_assert_int_eq(sl_quant_decode(q, SL_WIRE_INT8, a, na, N, y, 0, NULL), SL_OK);
    for (size_t i = 0, j = 0; i < N; i++) {
        if (j < k && idx[j] == i) {
            ck_assert_float_eq_tol(y[i], x[i], fabsf(x[i]) * 0.01f);
            j++;
        } else {
            ck_assert_float_eq(y[i], 0.0f);
        }
    }
    ck_assert_int_eq(sl_quant_encode(q, x, NULL, N, 3, 0, b, sizeof b, &nb), SL_OK);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(a, b, na);
    /* all magnitudes equal: the first k indices, whatever the signs */
    for (size_t i = 0; i < N; i++)
        y[i] = i % 3 ? 0.5f : -0.5f;
    sl_quant_topk(y, N, 7, keys, idx);
    for (uint32_t j = 0; j < 7; j++)
        ck_assert_uint_eq(idx[j], j);
    sl_quant_destroy(&q);
}
END_TEST

/* ------------------------------------------------------------------ limits */

/* A valid int8 or int4 payload of 10 values in blocks of 4, dense or with entries
 * {1, 5, 9}: the base of the cases below. */
static size_t
payload(unsigned char *p, unsigned enc, int sparse)
{
    sl_quant_opts_t o = {enc == SL_WIRE_INT8 ? SL_COMPRESS_INT8 : SL_COMPRESS_INT4, 4,
                         SL_ROUNDING_NEAREST, sparse ? 0.3 : 0};
    const float x[10] = {0.1f, 0.9f, -0.2f, 0.3f, 0.05f, -0.8f, 0.2f, 0.1f, 0.0f, 0.7f};
    sl_quant_t *q;
    size_t bytes;

    ck_assert_int_eq(sl_quant_new(&q, &o, 10), SL_OK);
    ck_assert_int_eq(sl_quant_encode(q, x, NULL, 10, 0, 0, p, 256, &bytes), SL_OK);
    sl_quant_destroy(&q);
    return bytes;
}

/* Parses p as 10 values: SL_ERR_FORMAT expected, with its message mentioning what. */
static void
refused(unsigned enc, const unsigned char *p, size_t bytes, uint32_t n, const char *what)
{
    sl_wire_quant_t h;
    uint32_t idx[16];

    ck_assert_int_eq(sl_wire_quant_parse(enc, p, bytes, n, &h, idx), SL_ERR_FORMAT);
    ck_assert_msg(strstr(sl_err_msg(), what) != NULL, "'%s' does not say '%s'", sl_err_msg(), what);
}

START_TEST(test_quant_bad_payloads)
{
    unsigned char p[256], c[256];
    unsigned encs[2] = {SL_WIRE_INT8, SL_WIRE_INT4};

    for (int e = 0; e < 2; e++) {
        unsigned enc = encs[e];
        size_t dense = payload(p, enc, 0), sparse, sc, vals;
        sl_wire_quant_t h;
        uint32_t idx[16];

        ck_assert_int_eq(sl_wire_quant_parse(enc, p, dense, 10, &h, idx), SL_OK);
        ck_assert_uint_eq(h.entries, 10);
        refused(enc, p, 10, 10, "shorter than its");
        refused(enc, p, dense, 11, "expected 11");
        refused(enc, p, dense - 1, 10, "bytes, but");
        memcpy(c, p, dense);
        c[dense] = 0;
        refused(enc, c, dense + 1, 10, "bytes, but");
        memcpy(c, p, dense);
        sl_put_u32(c + 4, 0);
        refused(enc, c, dense, 10, "block of 0");
        sl_put_u32(c + 4, SL_WIRE_QUANT_MAX_BLOCK + 1);
        refused(enc, c, dense, 10, "block of");
        memcpy(c, p, dense);
        sl_put_u32(c + 8, 11);
        refused(enc, c, dense, 10, "11 entries");
        memcpy(c, p, dense);
        sl_put_u32(c + 12, 1);
        refused(enc, c, dense, 10, "dense, yet");
        /* scales: NaN, inf, 0, negative, subnormal-to-zero */
        sc = SL_WIRE_QUANT_HEAD_BYTES;
        {
            const float bad[4] = {NAN, INFINITY, 0.0f, -1.0f};
            for (int i = 0; i < 4; i++) {
                memcpy(c, p, dense);
                sl_put_u32(c + sc + 4, sl_f32_bits(bad[i]));
                refused(enc, c, dense, 10, "not finite and > 0");
            }
        }
        vals = sc + 4 * 3; /* 3 blocks of 4 */
        memcpy(c, p, dense);
        if (enc == SL_WIRE_INT8) {
            c[vals + 2] = 0x80;
            refused(enc, c, dense, 10, "-128");
        } else {
            c[vals + 1] = (unsigned char)((c[vals + 1] & 0xf0) | 0x8);
            refused(enc, c, dense, 10, "-8");
        }
        /* sparse: 3 entries (ceil(0.3 x 10)), indices 1, 5, 9 as gaps 1, 3, 3 */
        sparse = payload(p, enc, 1);
        ck_assert_int_eq(sl_wire_quant_parse(enc, p, sparse, 10, &h, idx), SL_OK);
        ck_assert_uint_eq(h.entries, 3);
        ck_assert_uint_eq(h.index_bytes, 3);
        ck_assert_uint_eq(idx[0], 1);
        ck_assert_uint_eq(idx[1], 5);
        ck_assert_uint_eq(idx[2], 9);
        if (enc == SL_WIRE_INT4) { /* 3 nibbles: the fourth is padding */
            memcpy(c, p, sparse);
            c[sparse - 1] |= 0x10;
            refused(enc, c, sparse, 10, "padding nibble");
        }
        memcpy(c, p, sparse);
        c[SL_WIRE_QUANT_HEAD_BYTES + 2] = 4; /* last index 10: out of range */
        refused(enc, c, sparse, 10, "is not below 10");
        memcpy(c, p, sparse);
        c[SL_WIRE_QUANT_HEAD_BYTES + 1] = 0x83; /* a gap that runs into the next one */
        refused(enc, c, sparse, 10, "index");
        /* an index stream one byte longer: a byte left over */
        memcpy(c, p, SL_WIRE_QUANT_HEAD_BYTES + 3);
        c[SL_WIRE_QUANT_HEAD_BYTES + 3] = 0;
        memcpy(c + SL_WIRE_QUANT_HEAD_BYTES + 4, p + SL_WIRE_QUANT_HEAD_BYTES + 3,
               sparse - SL_WIRE_QUANT_HEAD_BYTES - 3);
        sl_put_u32(c + 12, 4);
        refused(enc, c, sparse + 1, 10, "left over");
        /* an overlong gap: more than 5 bytes */
        {
            unsigned char o[64];
            sl_wire_quant_t hh = {10, 4, 2, 6, 0, NULL, NULL, NULL};
            size_t ob = sl_wire_quant_bytes(enc, 4, 2, 6);
            memset(o, 0, sizeof o);
            sl_wire_quant_put_head(o, &hh);
            memset(o + SL_WIRE_QUANT_HEAD_BYTES, 0x80, 5);
            o[SL_WIRE_QUANT_HEAD_BYTES + 5] = 0;
            sl_put_u32(o + SL_WIRE_QUANT_HEAD_BYTES + 6, sl_f32_bits(1.0f));
            refused(enc, o, ob, 10, "longer than");
        }
    }
    /* the decoder: another encoding than the quantizer's, and x unchanged on refusal */
    {
        sl_quant_opts_t o = {SL_COMPRESS_INT8, 4, SL_ROUNDING_NEAREST, 0};
        sl_quant_t *q;
        float x[10];
        size_t bytes = payload(p, SL_WIRE_INT4, 0);

        for (int i = 0; i < 10; i++)
            x[i] = 3.0f;
        ck_assert_int_eq(sl_quant_new(&q, &o, 10), SL_OK);
        ck_assert_int_eq(sl_quant_decode(q, SL_WIRE_INT4, p, bytes, 10, x, 0, NULL), SL_ERR_FORMAT);
        bytes = payload(p, SL_WIRE_INT8, 0);
        p[SL_WIRE_QUANT_HEAD_BYTES + 3] = 0xff; /* scale NaN */
        ck_assert_int_eq(sl_quant_decode(q, SL_WIRE_INT8, p, bytes, 10, x, 1, NULL), SL_ERR_FORMAT);
        for (int i = 0; i < 10; i++)
            ck_assert_float_eq(x[i], 3.0f);
        /* the encoder: a NaN is refused, not sent */
        x[4] = NAN;
        ck_assert_int_eq(sl_quant_encode(q, x, NULL, 10, 0, 0, p, sizeof p, &bytes),
                         SL_ERR_INVALID);
        sl_quant_destroy(&q);
    }
}
END_TEST

/* The frame header: int8 / int4 only on gossip snapshots, with scale 1. */
START_TEST(test_quant_wire_header)
{
    sl_wire_key_t key = {1, 0, 0, 1, SL_WIRE_GOSSIP_SNAPSHOT};
    unsigned char head[SL_WIRE_HEADER_BYTES], pay[64] = {0};
    sl_wire_header_t h = sl_wire_header_for(9, 0, &key, 64, SL_WIRE_INT8, 1.0f);

    ck_assert_int_eq(sl_wire_encode(&h, pay, head), SL_OK);
    ck_assert_str_eq(sl_wire_encoding_name(SL_WIRE_INT4), "int4");
    h.scale = 2.0f;
    ck_assert_int_eq(sl_wire_encode(&h, pay, head), SL_ERR_INVALID);
    key.kind = SL_WIRE_ALLREDUCE;
    h = sl_wire_header_for(9, 0, &key, 64, SL_WIRE_INT4, 1.0f);
    ck_assert_int_eq(sl_wire_encode(&h, pay, head), SL_ERR_INVALID);
}
END_TEST

static Suite *
embed_quant_suite(void)
{
    Suite *s = suite_create("embed_quant");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_test(core, test_quant_round_trip);
    tcase_add_test(core, test_quant_error_feedback);
    tcase_add_test(core, test_quant_stochastic_unbiased);
    tcase_add_test(core, test_quant_topk);
    tcase_add_test(limits, test_quant_bad_payloads);
    tcase_add_test(limits, test_quant_wire_header);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(embed_quant_suite());
}
