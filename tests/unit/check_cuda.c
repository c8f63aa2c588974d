/* Unit tests of the CUDA backend (kernels/cuda/): every op against the CPU backend on
 * random, never-zero inputs, outputs poisoned with NaN first so that an element a
 * kernel forgets to write fails; gemm in fp32, bf16 and fp16, and the packed product;
 * the device RNG bit for bit; recorded errors. A training step on both backends and loss scaling
 * are in check_cuda_train.c; the fixture, buffers, comparisons and main() in test_cuda.h.
 *
 * Tolerances, |got - want| <= abs + rel |want| unless said otherwise:
 *   gemm fp32: 2e-7 (k + 2) mag, mag = |alpha| sum_k |a||b| + |beta c| (both sides
 *     carry at most k rounding errors of 2^-24: the bound, not a fudge); bias_grad the
 *     same with k = rows;
 *   gemm bf16/fp16: 1e-6 (k + 2) mag against the CPU on operands rounded the same way,
 *     and (2.01 u + 2e-7 (k + 2)) mag against the unrounded product, u = 2^-8 (bf16)
 *     or 2^-11 (fp16);
 *   element-wise, LSTM cell, softmax: 1e-6 to 1e-5 relative (the CPU's polynomial exp,
 *     tanh and sigmoid are within 1.5e-7 of libm's);
 *   gather, scatter-add, dropout, RNG, 16-bit conversion: exact;
 */

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_half.h"
#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/cuda/sl_cuda.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"

#include "test_cuda.h"
#include "test_tool.h"

/* ---- gemm ---------------------------------------------------------------------------- */

/* x rounded through a 16-bit format (host, sl_half.h), in place. */
static void
round_half(float *x, size_t n, sl_precision_t p)
{
    for (size_t i = 0; i < n; i++)
        x[i] = p == SL_PREC_BF16 ? sl_bf16_to_fp32(sl_fp32_to_bf16(x[i]))
                                 : sl_fp16_to_fp32(sl_fp32_to_fp16(x[i]));
}

/* |alpha| sum_k |op(a)_ik| |op(b)_kj| + |beta c_ij|, the scale of each element's
 * rounding error. */
static double
gemm_mag(int ta, int tb, int i, int j, int k, float alpha, const float *a, int lda, const float *b,
         int ldb, float beta, float c)
{
    double s = 0;

    for (int p = 0; p < k; p++) {
        double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];

        s += fabs(av * bv);
    }
    return fabs(alpha) * s + fabs((double)beta * c);
}

/* One gemm shape on the device at precision prec against the CPU: padded leading
 * dimensions; with beta = 0, C starts as NaN (it must not be read); the padding columns
 * of C must come back as they went in. */
static void
gemm_case(int ta, int tb, int m, int n, int k, float beta, sl_precision_t prec, uint64_t key)
{
    const float alpha = 0.75f;
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    float *a = tc_rnd(na, key, -1, 1), *b = tc_rnd(nb, key + 1, -1, 1),
          *c = tc_rnd(nc, key + 2, -1, 1);
    float *ar = test_fcopy(a, na), *br = test_fcopy(b, nb), *want = test_fcopy(c, nc),
          *exact = test_fcopy(c, nc), *got;
    float *da = tc_dputf(a, na), *db = tc_dputf(b, nb),
          *dc = beta == 0.0f ? tc_dpoison(nc) : tc_dputf(c, nc);
    double tol = (prec == SL_PREC_FP32 ? 2e-7 : 1e-6) * (k + 2);
    double u = prec == SL_PREC_BF16 ? 0x1p-8 : 0x1p-11;
    char what[96];

    if (prec != SL_PREC_FP32) {
        round_half(ar, na, prec);
        round_half(br, nb, prec);
    }
    tc_cpu->ops->gemm(tc_cpu->ctx, ta, tb, m, n, k, alpha, ar, lda, br, ldb, beta, want, ldc);
    tc_cpu->ops->gemm(tc_cpu->ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, exact, ldc);
    ck_assert_msg(tc_dev->ops->set_precision(tc_dev->ctx, prec) == SL_OK, "%s", sl_err_msg());
    tc_dev->ops->gemm(tc_dev->ctx, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
    ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
    got = tc_dgetf(dc, nc);
    snprintf(what, sizeof what, "gemm prec %d ta %d tb %d (%d,%d,%d) beta %g", (int)prec, ta, tb, m,
             n, k, (double)beta);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ldc; j++) {
            size_t e = (size_t)i * ldc + j;
            double g = got[e], mag, magx;

            if (j >= n) { /* padding: untouched */
                ck_assert_msg(beta == 0.0f ? isnan(g) : g == c[e], "%s: padding (%d,%d) = %g", what,
                              i, j, g);
                continue;
            }
            mag = gemm_mag(ta, tb, i, j, k, alpha, ar, lda, br, ldb, beta, c[e]);
            magx = gemm_mag(ta, tb, i, j, k, alpha, a, lda, b, ldb, beta, c[e]);
            if (!(fabs(g - want[e]) <= tol * mag))
                ck_abort_msg("%s: (%d,%d) device %.9g, cpu %.9g, bound %.3g", what, i, j, g,
                             (double)want[e], tol * mag);
            if (prec != SL_PREC_FP32 && !(fabs(g - exact[e]) <= (2.01 * u + tol) * magx))
                ck_abort_msg("%s: (%d,%d) device %.9g, fp32 product %.9g", what, i, j, g,
                             (double)exact[e]);
        }
    }
    tc_dfree(da);
    tc_dfree(db);
    tc_dfree(dc);
    free(a);
    free(b);
    free(c);
    free(ar);
    free(br);
    free(want);
    free(exact);
    free(got);
}

static void
gemm_all(sl_precision_t prec)
{
    const int sizes[4][3] = {{7, 5, 6}, {67, 45, 33}, {130, 96, 257}, {1, 1, 40}};
    uint64_t key = 100;

    for (int s = 0; s < 4; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int z = 0; z < 2; z++, key += 3)
                    gemm_case(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], z ? -0.5f : 0.0f, prec,
                              key);
}

/* The packed product (pack_b, gemm_packed; alpha 1, beta 0 or 1) at precision prec
 * against the CPU on operands rounded the same way, with gemm_case's bound; in 16 bits
 * with a B stored transposed, the same bits as the device's own gemm. On CUDA, fp32
 * packs nothing (packed_floats 0). */
static void
gemm_packed_case(int ta, int tb, int m, int n, int k, float beta, sl_precision_t prec, uint64_t key)
{
    const sl_backend_ops_t *o = tc_dev->ops;
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    float *a = tc_rnd(na, key, -1, 1), *b = tc_rnd(nb, key + 1, -1, 1),
          *c = tc_rnd(nc, key + 2, -1, 1), *want = test_fcopy(c, nc), *got, *plain;
    float *da = tc_dputf(a, na), *db = tc_dputf(b, nb), *dc = tc_dputf(c, nc),
          *dp = tc_dputf(c, nc), *dpk;
    double tol = (prec == SL_PREC_FP32 ? 2e-7 : 1e-6) * (k + 2);
    size_t pf;

    ck_assert_msg(o->set_precision(tc_dev->ctx, prec) == SL_OK, "%s", sl_err_msg());
    pf = o->packed_floats(tc_dev->ctx, k, n);
    ck_assert_msg(tc_on_cuda ? (pf > 0) == (prec != SL_PREC_FP32) : pf > 0,
                  "packed_floats %zu at precision %d", pf, (int)prec);
    if (pf == 0)
        goto out;
    if (prec != SL_PREC_FP32) {
        round_half(a, na, prec);
        round_half(b, nb, prec);
    }
    tc_cpu->ops->gemm(tc_cpu->ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, want, ldc);
    dpk = tc_dpoison(pf);
    o->pack_b(tc_dev->ctx, tb, k, n, db, ldb, dpk);
    o->gemm_packed(tc_dev->ctx, ta, m, n, k, da, lda, dpk, beta, dc, ldc);
    o->gemm(tc_dev->ctx, ta, tb, m, n, k, 1.0f, da, lda, db, ldb, beta, dp, ldc);
    got = tc_dgetf(dc, nc);
    plain = tc_dgetf(dp, nc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            size_t e = (size_t)i * ldc + j;
            double mag = gemm_mag(ta, tb, i, j, k, 1.0f, a, lda, b, ldb, beta, c[e]);

            if (!(fabs(got[e] - want[e]) <= tol * mag))
                ck_abort_msg("gemm_packed prec %d ta %d tb %d (%d,%d,%d): (%d,%d) device %.9g, "
                             "cpu %.9g",
                             (int)prec, ta, tb, m, n, k, i, j, (double)got[e], (double)want[e]);
        }
    if (tb && tc_on_cuda)
        tc_expect_same(got, plain, nc, "gemm_packed against gemm, B stored transposed");
    free(got);
    free(plain);
    tc_dfree(dpk);
out:
    ck_assert_int_eq(o->set_precision(tc_dev->ctx, SL_PREC_FP32), SL_OK);
    tc_dfree(da);
    tc_dfree(db);
    tc_dfree(dc);
    tc_dfree(dp);
    free(a);
    free(b);
    free(c);
    free(want);
}

static void
gemm_packed_all(sl_precision_t prec)
{
    const int sizes[4][3] = {{7, 5, 6}, {67, 45, 33}, {130, 96, 257}, {3, 70, 40}};
    uint64_t key = 300;

    if (!tc_dev->ops->gemm_packed)
        return;
    for (int s = 0; s < 4; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int z = 0; z < 2; z++, key += 3)
                    gemm_packed_case(ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], (float)z, prec,
                                     key);
}

START_TEST(test_gemm_fp32)
{
    gemm_all(SL_PREC_FP32);
    gemm_packed_all(SL_PREC_FP32);
}
END_TEST

START_TEST(test_gemm_bf16)
{
    if (tc_on_cuda) {
        gemm_all(SL_PREC_BF16);
        gemm_packed_all(SL_PREC_BF16);
    }
}
END_TEST

START_TEST(test_gemm_fp16)
{
    if (tc_on_cuda) {
        gemm_all(SL_PREC_FP16);
        gemm_packed_all(SL_PREC_FP16);
    }
}
END_TEST

/* ---- LSTM cell ----------------------------------------------------------------------- */

START_TEST(test_lstm_cell)
{
    enum { B = 37, H = 53, G = 4 * H };
    float *gates = tc_rnd(B * G, 1, -3, 3), *cp = tc_rnd(B * H, 2, -1, 1);
    float *wg = test_fcopy(gates, B * G), *wc = tc_xmalloc(B * H * sizeof *wc),
          *wm = tc_xmalloc(B * H * 4);
    float *dg = tc_dputf(gates, B * G), *dcp = tc_dputf(cp, B * H), *dc = tc_dpoison(B * H),
          *dm = tc_dpoison(B * H);
    float *acts, *c, *m, *dmh = tc_rnd(B * H, 3, -1, 1), *dch = tc_rnd(B * H, 4, -1, 1);
    float *wdc = test_fcopy(dch, B * H), *wdg = tc_xmalloc(B * G * sizeof *wdg);
    float *ddm, *ddc, *ddg, *got;

    tc_cpu->ops->lstm_cell_forward(tc_cpu->ctx, B, H, wg, cp, wc, wm);
    tc_dev->ops->lstm_cell_forward(tc_dev->ctx, B, H, dg, dcp, dc, dm);
    acts = tc_dgetf(dg, B * G);
    c = tc_dgetf(dc, B * H);
    m = tc_dgetf(dm, B * H);
    tc_expect_close(acts, wg, B * G, 1e-6, 1e-6, "lstm forward gates");
    tc_expect_close(c, wc, B * H, 1e-6, 1e-6, "lstm forward c");
    tc_expect_close(m, wm, B * H, 1e-6, 1e-6, "lstm forward m");

    /* backward from the CPU's activations on both sides */
    ddm = tc_dputf(dmh, B * H);
    ddc = tc_dputf(dch, B * H);
    ddg = tc_dpoison(B * G);
    ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, dg, wg, B * G * sizeof(float)), SL_OK);
    ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, dc, wc, B * H * sizeof(float)), SL_OK);
    tc_cpu->ops->lstm_cell_backward(tc_cpu->ctx, B, H, wg, cp, wc, dmh, wdc, wdg);
    tc_dev->ops->lstm_cell_backward(tc_dev->ctx, B, H, dg, dcp, dc, ddm, ddc, ddg);
    got = tc_dgetf(ddg, B * G);
    tc_expect_close(got, wdg, B * G, 1e-6, 1e-5, "lstm backward dgates");
    free(got);
    got = tc_dgetf(ddc, B * H);
    tc_expect_close(got, wdc, B * H, 1e-6, 1e-5, "lstm backward dc");
    free(got);
    free(acts);
    free(c);
    free(m);
    free(gates);
    free(cp);
    free(wg);
    free(wc);
    free(wm);
    free(dmh);
    free(dch);
    free(wdc);
    free(wdg);
    tc_dfree(dg);
    tc_dfree(dcp);
    tc_dfree(dc);
    tc_dfree(dm);
    tc_dfree(ddm);
    tc_dfree(ddc);
    tc_dfree(ddg);
}
END_TEST

/* ---- embeddings ---------------------------------------------------------------------- */

/* Distinct ids sorted, with the positions of each grouped (the model's unique_rows,
 * written again plainly): rows[0..u), off[0..u], pos[0..n). Returns u. */
static int
group_ids(const int32_t *ids, int n, int vocab, int32_t *rows, int32_t *off, int32_t *pos)
{
    int u = 0, p = 0;

    for (int v = 0; v < vocab; v++) {
        int first = 1;

        for (int i = 0; i < n; i++) {
            if (ids[i] != v)
                continue;
            if (first) {
                rows[u] = v;
                off[u++] = p;
                first = 0;
            }
            pos[p++] = i;
        }
    }
    off[u] = p;
    return u;
}

static void
embedding_case(int d)
{
    enum { V = 50, N = 300 };
    int32_t ids[N], rows[N], off[N + 1], pos[N];
    float *table = tc_rnd((size_t)V * d, 11, -1, 1), *src = tc_rnd((size_t)N * d, 12, -1, 1);
    float *grad = tc_rnd((size_t)V * d, 13, -1, 1), *want = tc_xmalloc((size_t)N * d * 4), *got;
    float *dt = tc_dputf(table, (size_t)V * d), *dout = tc_dpoison((size_t)N * d);
    float *dsrc = tc_dputf(src, (size_t)N * d), *dgrad = tc_dputf(grad, (size_t)V * d);
    int32_t *dids, *drows, *doff, *dpos;
    int u;

    for (int i = 0; i < N; i++) /* skewed, with repeats and unused rows */
        ids[i] =
            (int32_t)(sl_rng_float_at(14, (uint64_t)i) * sl_rng_float_at(15, (uint64_t)i) * 45);
    dids = tc_dput(ids, sizeof ids);
    tc_cpu->ops->embedding_gather(tc_cpu->ctx, N, d, table, ids, want);
    tc_dev->ops->embedding_gather(tc_dev->ctx, N, d, dt, dids, dout);
    got = tc_dgetf(dout, (size_t)N * d);
    tc_expect_same(got, want, (size_t)N * d, "embedding_gather");
    free(got);

    u = group_ids(ids, N, V, rows, off, pos);
    ck_assert_int_lt(u, 45);
    drows = tc_dput(rows, (size_t)u * 4);
    doff = tc_dput(off, (size_t)(u + 1) * 4);
    dpos = tc_dput(pos, sizeof pos);
    tc_cpu->ops->embedding_scatter_add(tc_cpu->ctx, u, d, rows, off, pos, src, grad);
    tc_dev->ops->embedding_scatter_add(tc_dev->ctx, u, d, drows, doff, dpos, dsrc, dgrad);
    got = tc_dgetf(dgrad, (size_t)V * d);
    tc_expect_same(got, grad, (size_t)V * d, "embedding_scatter_add"); /* untouched rows too */
    free(got);
    free(table);
    free(src);
    free(grad);
    free(want);
    tc_dfree(dt);
    tc_dfree(dout);
    tc_dfree(dsrc);
    tc_dfree(dgrad);
    tc_dfree(dids);
    tc_dfree(drows);
    tc_dfree(doff);
    tc_dfree(dpos);
}

START_TEST(test_embedding)
{
    embedding_case(67); /* not a multiple of the warp */
    embedding_case(300);
    embedding_case(1); /* the output biases */
}
END_TEST

/* ---- softmax ------------------------------------------------------------------------- */

/* With bias (when with_bias), both add it in place: with gs 0 the device's logits are
 * the CPU's, biased, to rounding. */
static void
softmax_case(int n, int v, float gs, int with_bias)
{
    int ld = v + 3;
    size_t nl = (size_t)n * ld;
    int32_t *t = tc_xmalloc((size_t)n * sizeof *t), *dt;
    float *x = tc_rnd(nl, 21, -8, 8), *want = test_fcopy(x, nl), *dx, *got;
    float *bias = with_bias ? tc_rnd((size_t)v, 23, -3, 3) : NULL, *db = NULL;
    double lc = -1, lg = -1;
    char what[80];

    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(sl_rng_float_at(22, (uint64_t)i) * v);
    for (int i = 0; i < n; i++) /* padding stays as it is: poison it */
        for (int j = v; j < ld; j++)
            x[(size_t)i * ld + j] = want[(size_t)i * ld + j] = NAN;
    dx = tc_dputf(x, nl);
    dt = tc_dput(t, (size_t)n * sizeof *t);
    if (bias)
        db = tc_dputf(bias, (size_t)v);
    tc_cpu->ops->softmax_xent(tc_cpu->ctx, n, v, want, ld, bias, t, gs, &lc);
    tc_dev->ops->softmax_xent(tc_dev->ctx, n, v, dx, ld, db, dt, gs, &lg);
    got = tc_dgetf(dx, nl);
    snprintf(what, sizeof what, "softmax_xent n %d v %d gs %g%s", n, v, (double)gs,
             bias ? " with bias" : "");
    ck_assert_msg(fabs(lg - lc) <= 1e-6 * fabs(lc), "%s: loss device %.12g, cpu %.12g", what, lg,
                  lc);
    if (gs == 0.0f && !bias)
        tc_expect_same(got, x, nl, what); /* logits untouched */
    else
        tc_expect_close(got, want, nl, gs == 0.0f ? 0.0 : 1e-7 * gs, 1e-5, what);
    free(t);
    free(x);
    free(want);
    free(got);
    free(bias);
    tc_dfree(dx);
    tc_dfree(dt);
    tc_dfree(db);
}

START_TEST(test_softmax_xent)
{
    softmax_case(45, 1000, 0.5f, 0);
    softmax_case(45, 1000, 0.0f, 0);
    softmax_case(3, 33, 1.0f / 3, 0);
    softmax_case(1100, 70, 1.0f, 0); /* more rows than blocks */
    softmax_case(45, 1000, 0.5f, 1);
    softmax_case(45, 1000, 0.0f, 1);
    softmax_case(1100, 70, 1.0f, 1);
}
END_TEST

static void
sampled_case(int n, int s, float gs)
{
    int w = s + 1;
    size_t nl = (size_t)n * w;
    int32_t *t = tc_xmalloc((size_t)n * 4), *smp = tc_xmalloc((size_t)s * 4), *dt, *ds;
    float *x = tc_rnd(nl, 31, -6, 6), *want = test_fcopy(x, nl),
          *lt = tc_rnd((size_t)n, 32, -9, -1);
    float *ls = tc_rnd((size_t)s, 33, -9, -1), *dx, *dlt, *dls, *got;
    double lc = -1, lg = -1;
    int hits = 0;
    char what[64];

    for (int j = 0; j < s; j++)
        smp[j] = 3 * j;
    for (int i = 0; i < n; i++) /* every third row's target is among the samples */
        t[i] = i % 3 == 0 ? smp[(i * 7) % s] : 3 * s + i;
    dx = tc_dputf(x, nl);
    dt = tc_dput(t, (size_t)n * 4);
    ds = tc_dput(smp, (size_t)s * 4);
    dlt = tc_dputf(lt, (size_t)n);
    dls = tc_dputf(ls, (size_t)s);
    tc_cpu->ops->sampled_softmax_xent(tc_cpu->ctx, n, s, want, t, smp, lt, ls, gs, &lc);
    tc_dev->ops->sampled_softmax_xent(tc_dev->ctx, n, s, dx, dt, ds, dlt, dls, gs, &lg);
    got = tc_dgetf(dx, nl);
    snprintf(what, sizeof what, "sampled_softmax_xent n %d s %d gs %g", n, s, (double)gs);
    ck_assert_msg(fabs(lg - lc) <= 1e-6 * fabs(lc), "%s: loss device %.12g, cpu %.12g", what, lg,
                  lc);
    tc_expect_close(got, want, nl, gs != 0.0f ? 1e-7 * gs : 1e-6, 1e-5, what);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < s; j++)
            if (smp[j] == t[i]) {
                hits++;
                ck_assert_msg(gs != 0.0f ? got[(size_t)i * w + 1 + j] == 0.0f
                                         : isinf(got[(size_t)i * w + 1 + j]),
                              "%s: accidental hit (%d, %d) = %g", what, i, j,
                              (double)got[(size_t)i * w + 1 + j]);
            }
    ck_assert_int_ge(hits, n / 3);
    free(t);
    free(smp);
    free(x);
    free(want);
    free(lt);
    free(ls);
    free(got);
    tc_dfree(dx);
    tc_dfree(dt);
    tc_dfree(ds);
    tc_dfree(dlt);
    tc_dfree(dls);
}

START_TEST(test_sampled_softmax_xent)
{
    sampled_case(40, 60, 0.25f);
    sampled_case(40, 60, 0.0f);
    sampled_case(7, 700, 1.0f); /* more columns than threads */
}
END_TEST

/* ---- dropout and the RNG ------------------------------------------------------------- */

START_TEST(test_dropout)
{
    const size_t n = 100003;
    const float ps[3] = {0.3f, 0.5f, 1.0f};

    for (int k = 0; k < 3; k++) {
        float *x = tc_rnd(n, 41, -2, 2), *want = test_fcopy(x, n), *dx = tc_dputf(x, n), *got;

        tc_cpu->ops->dropout(tc_cpu->ctx, n, ps[k], 77 + (uint64_t)k, want);
        tc_dev->ops->dropout(tc_dev->ctx, n, ps[k], 77 + (uint64_t)k, dx);
        got = tc_dgetf(dx, n);
        tc_expect_same(got, want, n, "dropout");
        free(x);
        free(want);
        free(got);
        tc_dfree(dx);
    }
}
END_TEST

/* The device port of sl_rng_float_at against the host's, bit for bit. */
START_TEST(test_rng_port)
{
    const size_t n = (size_t)1 << 20;
    const uint64_t keys[3] = {0, 12345, 0xfedcba9876543210ULL};

    if (!tc_on_cuda)
        return;
    for (int k = 0; k < 3; k++) {
        float *d = tc_dpoison(n), *got, *want = tc_xmalloc(n * sizeof *want);

        for (size_t i = 0; i < n; i++)
            want[i] = sl_rng_float_at(keys[k], i);
        ck_assert_msg(sl_cuda_rng_floats(tc_dev, keys[k], n, d) == SL_OK, "%s", sl_err_msg());
        got = tc_dgetf(d, n);
        tc_expect_same(got, want, n, "rng");
        free(got);
        free(want);
        tc_dfree(d);
    }
}
END_TEST

/* ---- optimizers ---------------------------------------------------------------------- */

START_TEST(test_optimizers)
{
    const size_t n = 5003;
    float *g = tc_rnd(n, 51, -1, 1), *w = tc_rnd(n, 52, -1, 1), *acc = tc_rnd(n, 53, 0.1f, 1);
    float *m = tc_rnd(n, 54, -0.1f, 0.1f), *v = tc_rnd(n, 55, 0.001f, 0.01f);
    float *dg = tc_dputf(g, n), *dw = tc_dputf(w, n), *dacc = tc_dputf(acc, n),
          *dm = tc_dputf(m, n), *dv = tc_dputf(v, n);
    float *got;

    tc_cpu->ops->sgd_update(tc_cpu->ctx, n, 0.1f, g, w);
    tc_dev->ops->sgd_update(tc_dev->ctx, n, 0.1f, dg, dw);
    tc_cpu->ops->adagrad_update(tc_cpu->ctx, n, 0.05f, 1e-10f, g, acc, w);
    tc_dev->ops->adagrad_update(tc_dev->ctx, n, 0.05f, 1e-10f, dg, dacc, dw);
    for (long t = 1; t <= 7; t += 6) {
        tc_cpu->ops->adam_update(tc_cpu->ctx, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t, g, m, v, w);
        tc_dev->ops->adam_update(tc_dev->ctx, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t, dg, dm, dv, dw);
    }
    got = tc_dgetf(dw, n);
    tc_expect_close(got, w, n, 1e-6, 1e-6, "w");
    free(got);
    got = tc_dgetf(dacc, n);
    tc_expect_close(got, acc, n, 0, 1e-6, "adagrad acc");
    free(got);
    got = tc_dgetf(dm, n);
    tc_expect_close(got, m, n, 1e-7, 1e-6, "adam m");
    free(got);
    got = tc_dgetf(dv, n);
    tc_expect_close(got, v, n, 1e-12, 1e-6, "adam v");
    free(got);
    free(g);
    free(w);
    free(acc);
    free(m);
    free(v);
    tc_dfree(dg);
    tc_dfree(dw);
    tc_dfree(dacc);
    tc_dfree(dm);
    tc_dfree(dv);
}
END_TEST

/* ---- element-wise, bias, norms ------------------------------------------------------- */

START_TEST(test_elementwise)
{
    const size_t n = 300007;
    enum { R = 77, C = 1031 };
    float *x = tc_rnd(n, 61, -2, 2), *y = tc_rnd(n, 62, -2, 2), *dx = tc_dputf(x, n),
          *dy = tc_dputf(y, n);
    float *bias = tc_rnd(C, 63, -1, 1), *mat = tc_rnd(R * C, 64, -1, 1),
          *db0 = tc_rnd(C, 65, -1, 1);
    float *dbias = tc_dputf(bias, C), *dmat = tc_dputf(mat, R * C), *ddb = tc_dputf(db0, C), *got;
    float *dz = tc_dpoison(n);
    double sc, sg, mag[C];

    tc_cpu->ops->axpy(tc_cpu->ctx, n, -1.5f, x, y);
    tc_dev->ops->axpy(tc_dev->ctx, n, -1.5f, dx, dy);
    tc_cpu->ops->scale(tc_cpu->ctx, n, 0.25f, y);
    tc_dev->ops->scale(tc_dev->ctx, n, 0.25f, dy);
    got = tc_dgetf(dy, n);
    tc_expect_close(got, y, n, 1e-6, 1e-6, "axpy, scale");
    free(got);
    sc = tc_cpu->ops->sumsq(tc_cpu->ctx, n, y);
    sg = tc_dev->ops->sumsq(tc_dev->ctx, n, dy);
    ck_assert_msg(fabs(sg - sc) <= 1e-6 * sc, "sumsq device %.15g, cpu %.15g", sg, sc);
    ck_assert(tc_dev->ops->sumsq(tc_dev->ctx, 0, dy) == 0.0);

    tc_dev->ops->copy(tc_dev->ctx, n, dx, dz);
    got = tc_dgetf(dz, n);
    tc_expect_same(got, x, n, "copy");
    free(got);
    tc_dev->ops->zero(tc_dev->ctx, n - 5, dz);
    got = tc_dgetf(dz, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(i < n - 5 ? got[i] == 0.0f : got[i] == x[i], "zero [%zu] = %g", i,
                      (double)got[i]);
    free(got);

    tc_cpu->ops->add_bias(tc_cpu->ctx, R, C, bias, mat);
    tc_dev->ops->add_bias(tc_dev->ctx, R, C, dbias, dmat);
    got = tc_dgetf(dmat, R * C);
    tc_expect_same(got, mat, R * C, "add_bias");
    free(got);
    /* sums of R + 1 terms in different orders: within 2e-7 (R + 2) sum |terms| */
    for (int j = 0; j < C; j++) {
        mag[j] = fabs(db0[j]);
        for (int r = 0; r < R; r++)
            mag[j] += fabs(mat[r * C + j]);
    }
    tc_cpu->ops->bias_grad(tc_cpu->ctx, R, C, mat, db0);
    tc_dev->ops->bias_grad(tc_dev->ctx, R, C, dmat, ddb);
    got = tc_dgetf(ddb, C);
    for (int j = 0; j < C; j++)
        ck_assert_msg(fabs((double)got[j] - db0[j]) <= 2e-7 * (R + 2) * mag[j],
                      "bias_grad[%d]: device %.9g, cpu %.9g", j, (double)got[j], (double)db0[j]);
    free(got);
    free(x);
    free(y);
    free(bias);
    free(mat);
    free(db0);
    tc_dfree(dx);
    tc_dfree(dy);
    tc_dfree(dbias);
    tc_dfree(dmat);
    tc_dfree(ddb);
    tc_dfree(dz);
}
END_TEST

/* ---- 16-bit conversion --------------------------------------------------------------- */

/* Random values over fp16's whole range and past it, with specials, through both
 * formats and two scales: the device's conversions equal the host's bit for bit
 * (NaN: both NaN). */
START_TEST(test_half_conversion)
{
    const size_t n = 200000;
    const sl_precision_t fmt[2] = {SL_PREC_FP16, SL_PREC_BF16};
    const float scales[2] = {1.0f, 1024.0f};
    float *x = tc_xmalloc(n * sizeof *x), *dx, *back, *dback, *want;
    uint16_t *h = tc_xmalloc(n * 2), *dh, *got;

    for (size_t i = 0; i < n; i++) /* sign * 2^[-30, 20) * [1, 2) */
        x[i] = (i & 1 ? -1.0f : 1.0f) *
               ldexpf(1.0f + sl_rng_float_at(71, i), (int)(sl_rng_float_at(72, i) * 50) - 30);
    x[0] = INFINITY;
    x[1] = -INFINITY;
    x[2] = NAN;
    x[3] = 0.0f;
    x[4] = 65519.0f;
    x[5] = 65520.0f;
    dx = tc_dputf(x, n);
    dh = tc_dalloc(n * 2);
    dback = tc_dpoison(n);
    for (int f = 0; f < 2; f++) {
        for (int s = 0; s < 2; s++) {
            tc_cpu->ops->to_half(tc_cpu->ctx, n, fmt[f], scales[s], x, h);
            tc_dev->ops->to_half(tc_dev->ctx, n, fmt[f], scales[s], dx, dh);
            got = tc_dget(dh, n * 2);
            for (size_t i = 0; i < n; i++) {
                int nan_h =
                    fmt[f] == SL_PREC_FP16 ? (h[i] & 0x7fff) > 0x7c00 : (h[i] & 0x7fff) > 0x7f80;
                int nan_g = fmt[f] == SL_PREC_FP16 ? (got[i] & 0x7fff) > 0x7c00
                                                   : (got[i] & 0x7fff) > 0x7f80;

                ck_assert_msg(nan_h ? nan_g : got[i] == h[i],
                              "to_half fmt %d scale %g: %.9g -> device 0x%04x, cpu 0x%04x", f,
                              (double)scales[s], (double)x[i], got[i], h[i]);
            }
            free(got);
            /* back from the same bits on both sides */
            want = tc_xmalloc(n * sizeof *want);
            ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, dh, h, n * 2), SL_OK);
            tc_cpu->ops->from_half(tc_cpu->ctx, n, fmt[f], 1.0f / scales[s], h, want);
            tc_dev->ops->from_half(tc_dev->ctx, n, fmt[f], 1.0f / scales[s], dh, dback);
            back = tc_dgetf(dback, n);
            tc_expect_close(back, want, n, 0, 0, "from_half"); /* exact; NaN as NaN */
            free(back);
            free(want);
        }
    }
    free(x);
    free(h);
    tc_dfree(dx);
    tc_dfree(dh);
    tc_dfree(dback);
}
END_TEST

/* ---- memory, errors, description ----------------------------------------------------- */

START_TEST(test_memory_and_errors)
{
    float host[1000], *d, *back, *pinned;
    const char *desc = tc_dev->ops->describe(tc_dev->ctx);

    for (int i = 0; i < 1000; i++)
        host[i] = (float)i + 0.5f;
    d = tc_dalloc(sizeof host);
    back = tc_dgetf(d, 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert(back[i] == 0.0f); /* alloc zeroes */
    free(back);
    ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, d, host, sizeof host), SL_OK);
    ck_assert_int_eq(tc_dev->ops->sync(tc_dev->ctx), SL_OK);
    back = tc_dgetf(d, 1000);
    ck_assert(memcmp(back, host, sizeof host) == 0);
    free(back);
    ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, d, host, 0), SL_OK);
    /* page-locked staging memory: zeroed, both ways through it */
    ck_assert_int_eq(sl_backend_host_alloc(tc_dev, (void **)&pinned, sizeof host), SL_OK);
    for (int i = 0; i < 1000; i++)
        ck_assert(pinned[i] == 0.0f);
    ck_assert_int_eq(tc_dev->ops->to_host(tc_dev->ctx, pinned, d, sizeof host), SL_OK);
    ck_assert(memcmp(pinned, host, sizeof host) == 0);
    for (int i = 0; i < 1000; i++)
        pinned[i] = -host[i];
    ck_assert_int_eq(tc_dev->ops->to_device(tc_dev->ctx, d, pinned, sizeof host), SL_OK);
    back = tc_dgetf(d, 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert(back[i] == -host[i]);
    free(back);
    sl_backend_host_free(tc_dev, (void **)&pinned);
    ck_assert_ptr_null(pinned);
    ck_assert_int_eq(tc_dev->ops->sync(tc_dev->ctx), SL_OK);
    tc_dev->ops->set_threads(tc_dev->ctx, 3);
    if (tc_on_cuda) {
        /* a failing op without a status: its error waits for the next status */
        tc_dev->ops->to_half(tc_dev->ctx, 4, SL_PREC_FP32, 1.0f, d, (uint16_t *)d);
        ck_assert_int_eq(tc_dev->ops->sync(tc_dev->ctx), SL_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(sl_err_msg(), "cuda:0: to_half"));
        ck_assert_int_eq(tc_dev->ops->sync(tc_dev->ctx), SL_OK); /* reported once */
        ck_assert_ptr_nonnull(strstr(desc, "CUDA "));
        ck_assert_ptr_nonnull(strstr(desc, "cuBLAS "));
        ck_assert_ptr_nonnull(strstr(desc, ", sm_"));
        ck_assert_str_eq(tc_dev->name, "cuda:0");
        ck_assert_int_eq(tc_dev->ops->set_precision(tc_dev->ctx, (sl_precision_t)7),
                         SL_ERR_INVALID);
    }
    tc_dfree(d);
}
END_TEST

START_TEST(test_registry)
{
    sl_backend_t *b = NULL;
    int count = 0;

    if (!tc_on_cuda)
        return;
    ck_assert_int_eq(sl_cuda_device_count(&count), SL_OK);
    ck_assert_int_ge(count, 1);
    ck_assert_int_eq(sl_backend_new(&b, "cuda:999", 1), SL_ERR_DEVICE);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "'cuda:999'"));
    ck_assert_int_eq(sl_backend_new(&b, "cuda", 1), SL_OK);
    ck_assert_str_eq(b->name, "cuda:0");
    sl_backend_destroy(&b);
    ck_assert_int_eq(sl_cuda_rng_floats(tc_cpu, 1, 1, NULL), SL_ERR_INVALID);
}
END_TEST

/* ---- main ---------------------------------------------------------------------------- */

static Suite *
cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_checked_fixture(core, tc_setup, tc_teardown);
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_gemm_fp32);
    tcase_add_test(core, test_gemm_bf16);
    tcase_add_test(core, test_gemm_fp16);
    tcase_add_test(core, test_lstm_cell);
    tcase_add_test(core, test_embedding);
    tcase_add_test(core, test_softmax_xent);
    tcase_add_test(core, test_sampled_softmax_xent);
    tcase_add_test(core, test_dropout);
    tcase_add_test(core, test_rng_port);
    tcase_add_test(core, test_optimizers);
    tcase_add_test(core, test_elementwise);
    tcase_add_test(core, test_half_conversion);
    suite_add_tcase(s, core);

    tcase_add_checked_fixture(limits, tc_setup, tc_teardown);
    tcase_set_timeout(limits, 60);
    tcase_add_test(limits, test_memory_and_errors);
    tcase_add_test(limits, test_registry);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return tc_main(cuda_suite(), "check_cuda");
}
