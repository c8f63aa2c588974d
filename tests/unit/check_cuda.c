/* Unit tests of the CUDA backend (kernels/cuda/): every op against the CPU backend on
 * random, never-zero inputs, outputs poisoned with NaN first so that an element a
 * kernel forgets to write fails; gemm in fp32, bf16 and fp16; the device RNG bit for
 * bit; recorded errors; one training step of a small LSTMP model (forward, backward,
 * clip, SGD) on both backends; loss scaling forced to overflow fp16.
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
 *   a training step: loss 1e-5 relative, every gradient within 1e-4 max|g| + 1e-3 |g|
 *     (fp32); 1e-2 and 5e-2 max|g| with bf16 gemms.
 *
 * Exits 77 (automake's SKIP), saying why, when no CUDA device is visible. The device
 * count is taken in a child process: this one forks a child per test, and a CUDA
 * context does not survive fork. SHOAL_CUDA_TEST_BACKEND=cpu runs every comparison
 * with the CPU backend on 2 threads in the device's place (the CUDA-only checks skip),
 * which tests this file itself on a machine without a GPU. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_half.h"
#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/cuda/sl_cuda.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"

static const char *dev_name = "cuda:0"; /* or SHOAL_CUDA_TEST_BACKEND */
static int on_cuda = 1;                 /* 0: the cpu-against-cpu self-check */
static sl_backend_t *cpu, *dev;

static void
setup(void)
{
    ck_assert_int_eq(sl_backend_cpu_new(&cpu, 1), SL_OK);
    /* 2 threads: the self-check's cpu then sums in another order than the reference */
    ck_assert_msg(sl_backend_new(&dev, dev_name, 2) == SL_OK, "%s: %s", dev_name, sl_err_msg());
}

static void
teardown(void)
{
    sl_backend_destroy(&dev);
    sl_backend_destroy(&cpu);
}

/* ---- host buffers -------------------------------------------------------------------- */

static void *
xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);

    ck_assert_ptr_nonnull(p);
    return p;
}

/* Uniform in [lo, hi) from stream key; with lo < 0 < hi a draw that rounds to 0 is
 * nudged, so inputs are never zero. */
static float *
rnd(size_t n, uint64_t key, float lo, float hi)
{
    float *x = xmalloc(n * sizeof *x);

    for (size_t i = 0; i < n; i++) {
        x[i] = lo + (hi - lo) * sl_rng_float_at(key, i);
        if (x[i] == 0.0f)
            x[i] = 1e-3f;
    }
    return x;
}

static float *
fdup(const float *x, size_t n)
{
    float *y = xmalloc(n * sizeof *y);

    memcpy(y, x, n * sizeof *y);
    return y;
}

/* ---- device buffers ------------------------------------------------------------------ */

static void *
dalloc(size_t bytes)
{
    void *p = NULL;

    ck_assert_msg(dev->ops->alloc(dev->ctx, &p, bytes) == SL_OK, "alloc: %s", sl_err_msg());
    return p;
}

static void *
dput(const void *host, size_t bytes)
{
    void *p = dalloc(bytes);

    ck_assert_msg(dev->ops->to_device(dev->ctx, p, host, bytes) == SL_OK, "to_device: %s",
                  sl_err_msg());
    return p;
}

static float *
dputf(const float *host, size_t n)
{
    return dput(host, n * sizeof(float));
}

/* n floats of NaN: an output the op must overwrite. */
static float *
dpoison(size_t n)
{
    float *h = xmalloc(n * sizeof *h), *d;

    for (size_t i = 0; i < n; i++)
        h[i] = NAN;
    d = dputf(h, n);
    free(h);
    return d;
}

static void *
dget(const void *d, size_t bytes)
{
    void *h = xmalloc(bytes);

    ck_assert_msg(dev->ops->to_host(dev->ctx, h, d, bytes) == SL_OK, "to_host: %s", sl_err_msg());
    return h;
}

static float *
dgetf(const float *d, size_t n)
{
    return dget(d, n * sizeof(float));
}

static void
dfree(void *p)
{
    dev->ops->free(dev->ctx, p);
}

/* got against want element-wise; a NaN in got fails unless want is NaN (a poisoned
 * element left unwritten shows here). */
static void
expect_close(const float *got, const float *want, size_t n, double abs_tol, double rel_tol,
             const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];

        if (isnan(w) ? isnan(g) : (g == w || fabs(g - w) <= abs_tol + rel_tol * fabs(w)))
            continue;
        ck_abort_msg("%s[%zu]: device %.9g, cpu %.9g", what, i, g, w);
    }
}

static void
expect_same(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) != 0)
            ck_abort_msg("%s[%zu]: device %.9g, cpu %.9g (bits differ)", what, i, (double)got[i],
                         (double)want[i]);
}

static double
max_abs(const float *x, size_t n)
{
    double m = 0;

    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

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
    float *a = rnd(na, key, -1, 1), *b = rnd(nb, key + 1, -1, 1), *c = rnd(nc, key + 2, -1, 1);
    float *ar = fdup(a, na), *br = fdup(b, nb), *want = fdup(c, nc), *exact = fdup(c, nc), *got;
    float *da = dputf(a, na), *db = dputf(b, nb), *dc = beta == 0.0f ? dpoison(nc) : dputf(c, nc);
    double tol = (prec == SL_PREC_FP32 ? 2e-7 : 1e-6) * (k + 2);
    double u = prec == SL_PREC_BF16 ? 0x1p-8 : 0x1p-11;
    char what[96];

    if (prec != SL_PREC_FP32) {
        round_half(ar, na, prec);
        round_half(br, nb, prec);
    }
    cpu->ops->gemm(cpu->ctx, ta, tb, m, n, k, alpha, ar, lda, br, ldb, beta, want, ldc);
    cpu->ops->gemm(cpu->ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, exact, ldc);
    ck_assert_msg(dev->ops->set_precision(dev->ctx, prec) == SL_OK, "%s", sl_err_msg());
    dev->ops->gemm(dev->ctx, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
    ck_assert_int_eq(dev->ops->set_precision(dev->ctx, SL_PREC_FP32), SL_OK);
    got = dgetf(dc, nc);
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
    dfree(da);
    dfree(db);
    dfree(dc);
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

START_TEST(test_gemm_fp32)
{
    gemm_all(SL_PREC_FP32);
}
END_TEST

START_TEST(test_gemm_bf16)
{
    if (on_cuda)
        gemm_all(SL_PREC_BF16);
}
END_TEST

START_TEST(test_gemm_fp16)
{
    if (on_cuda)
        gemm_all(SL_PREC_FP16);
}
END_TEST

/* ---- LSTM cell ----------------------------------------------------------------------- */

START_TEST(test_lstm_cell)
{
    enum { B = 37, H = 53, G = 4 * H };
    float *gates = rnd(B * G, 1, -3, 3), *cp = rnd(B * H, 2, -1, 1);
    float *wg = fdup(gates, B * G), *wc = xmalloc(B * H * sizeof *wc), *wm = xmalloc(B * H * 4);
    float *dg = dputf(gates, B * G), *dcp = dputf(cp, B * H), *dc = dpoison(B * H),
          *dm = dpoison(B * H);
    float *acts, *c, *m, *dmh = rnd(B * H, 3, -1, 1), *dch = rnd(B * H, 4, -1, 1);
    float *wdc = fdup(dch, B * H), *wdg = xmalloc(B * G * sizeof *wdg);
    float *ddm, *ddc, *ddg, *got;

    cpu->ops->lstm_cell_forward(cpu->ctx, B, H, wg, cp, wc, wm);
    dev->ops->lstm_cell_forward(dev->ctx, B, H, dg, dcp, dc, dm);
    acts = dgetf(dg, B * G);
    c = dgetf(dc, B * H);
    m = dgetf(dm, B * H);
    expect_close(acts, wg, B * G, 1e-6, 1e-6, "lstm forward gates");
    expect_close(c, wc, B * H, 1e-6, 1e-6, "lstm forward c");
    expect_close(m, wm, B * H, 1e-6, 1e-6, "lstm forward m");

    /* backward from the CPU's activations on both sides */
    ddm = dputf(dmh, B * H);
    ddc = dputf(dch, B * H);
    ddg = dpoison(B * G);
    ck_assert_int_eq(dev->ops->to_device(dev->ctx, dg, wg, B * G * sizeof(float)), SL_OK);
    ck_assert_int_eq(dev->ops->to_device(dev->ctx, dc, wc, B * H * sizeof(float)), SL_OK);
    cpu->ops->lstm_cell_backward(cpu->ctx, B, H, wg, cp, wc, dmh, wdc, wdg);
    dev->ops->lstm_cell_backward(dev->ctx, B, H, dg, dcp, dc, ddm, ddc, ddg);
    got = dgetf(ddg, B * G);
    expect_close(got, wdg, B * G, 1e-6, 1e-5, "lstm backward dgates");
    free(got);
    got = dgetf(ddc, B * H);
    expect_close(got, wdc, B * H, 1e-6, 1e-5, "lstm backward dc");
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
    dfree(dg);
    dfree(dcp);
    dfree(dc);
    dfree(dm);
    dfree(ddm);
    dfree(ddc);
    dfree(ddg);
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
    float *table = rnd((size_t)V * d, 11, -1, 1), *src = rnd((size_t)N * d, 12, -1, 1);
    float *grad = rnd((size_t)V * d, 13, -1, 1), *want = xmalloc((size_t)N * d * 4), *got;
    float *dt = dputf(table, (size_t)V * d), *dout = dpoison((size_t)N * d);
    float *dsrc = dputf(src, (size_t)N * d), *dgrad = dputf(grad, (size_t)V * d);
    int32_t *dids, *drows, *doff, *dpos;
    int u;

    for (int i = 0; i < N; i++) /* skewed, with repeats and unused rows */
        ids[i] =
            (int32_t)(sl_rng_float_at(14, (uint64_t)i) * sl_rng_float_at(15, (uint64_t)i) * 45);
    dids = dput(ids, sizeof ids);
    cpu->ops->embedding_gather(cpu->ctx, N, d, table, ids, want);
    dev->ops->embedding_gather(dev->ctx, N, d, dt, dids, dout);
    got = dgetf(dout, (size_t)N * d);
    expect_same(got, want, (size_t)N * d, "embedding_gather");
    free(got);

    u = group_ids(ids, N, V, rows, off, pos);
    ck_assert_int_lt(u, 45);
    drows = dput(rows, (size_t)u * 4);
    doff = dput(off, (size_t)(u + 1) * 4);
    dpos = dput(pos, sizeof pos);
    cpu->ops->embedding_scatter_add(cpu->ctx, u, d, rows, off, pos, src, grad);
    dev->ops->embedding_scatter_add(dev->ctx, u, d, drows, doff, dpos, dsrc, dgrad);
    got = dgetf(dgrad, (size_t)V * d);
    expect_same(got, grad, (size_t)V * d, "embedding_scatter_add"); /* untouched rows too */
    free(got);
    free(table);
    free(src);
    free(grad);
    free(want);
    dfree(dt);
    dfree(dout);
    dfree(dsrc);
    dfree(dgrad);
    dfree(dids);
    dfree(drows);
    dfree(doff);
    dfree(dpos);
}

START_TEST(test_embedding)
{
    embedding_case(67); /* not a multiple of the warp */
    embedding_case(300);
    embedding_case(1); /* the output biases */
}
END_TEST

/* ---- softmax ------------------------------------------------------------------------- */

static void
softmax_case(int n, int v, float gs)
{
    int ld = v + 3;
    size_t nl = (size_t)n * ld;
    int32_t *t = xmalloc((size_t)n * sizeof *t), *dt;
    float *x = rnd(nl, 21, -8, 8), *want = fdup(x, nl), *dx, *got;
    double lc = -1, lg = -1;
    char what[64];

    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(sl_rng_float_at(22, (uint64_t)i) * v);
    for (int i = 0; i < n; i++) /* padding stays as it is: poison it */
        for (int j = v; j < ld; j++)
            x[(size_t)i * ld + j] = want[(size_t)i * ld + j] = NAN;
    dx = dputf(x, nl);
    dt = dput(t, (size_t)n * sizeof *t);
    cpu->ops->softmax_xent(cpu->ctx, n, v, want, ld, t, gs, &lc);
    dev->ops->softmax_xent(dev->ctx, n, v, dx, ld, dt, gs, &lg);
    got = dgetf(dx, nl);
    snprintf(what, sizeof what, "softmax_xent n %d v %d gs %g", n, v, (double)gs);
    ck_assert_msg(fabs(lg - lc) <= 1e-6 * fabs(lc), "%s: loss device %.12g, cpu %.12g", what, lg,
                  lc);
    if (gs == 0.0f)
        expect_same(got, x, nl, what); /* logits untouched */
    else
        expect_close(got, want, nl, 1e-7 * gs, 1e-5, what);
    free(t);
    free(x);
    free(want);
    free(got);
    dfree(dx);
    dfree(dt);
}

START_TEST(test_softmax_xent)
{
    softmax_case(45, 1000, 0.5f);
    softmax_case(45, 1000, 0.0f);
    softmax_case(3, 33, 1.0f / 3);
    softmax_case(1100, 70, 1.0f); /* more rows than blocks */
}
END_TEST

static void
sampled_case(int n, int s, float gs)
{
    int w = s + 1;
    size_t nl = (size_t)n * w;
    int32_t *t = xmalloc((size_t)n * 4), *smp = xmalloc((size_t)s * 4), *dt, *ds;
    float *x = rnd(nl, 31, -6, 6), *want = fdup(x, nl), *lt = rnd((size_t)n, 32, -9, -1);
    float *ls = rnd((size_t)s, 33, -9, -1), *dx, *dlt, *dls, *got;
    double lc = -1, lg = -1;
    int hits = 0;
    char what[64];

    for (int j = 0; j < s; j++)
        smp[j] = 3 * j;
    for (int i = 0; i < n; i++) /* every third row's target is among the samples */
        t[i] = i % 3 == 0 ? smp[(i * 7) % s] : 3 * s + i;
    dx = dputf(x, nl);
    dt = dput(t, (size_t)n * 4);
    ds = dput(smp, (size_t)s * 4);
    dlt = dputf(lt, (size_t)n);
    dls = dputf(ls, (size_t)s);
    cpu->ops->sampled_softmax_xent(cpu->ctx, n, s, want, t, smp, lt, ls, gs, &lc);
    dev->ops->sampled_softmax_xent(dev->ctx, n, s, dx, dt, ds, dlt, dls, gs, &lg);
    got = dgetf(dx, nl);
    snprintf(what, sizeof what, "sampled_softmax_xent n %d s %d gs %g", n, s, (double)gs);
    ck_assert_msg(fabs(lg - lc) <= 1e-6 * fabs(lc), "%s: loss device %.12g, cpu %.12g", what, lg,
                  lc);
    expect_close(got, want, nl, gs != 0.0f ? 1e-7 * gs : 1e-6, 1e-5, what);
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
    dfree(dx);
    dfree(dt);
    dfree(ds);
    dfree(dlt);
    dfree(dls);
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
        float *x = rnd(n, 41, -2, 2), *want = fdup(x, n), *dx = dputf(x, n), *got;

        cpu->ops->dropout(cpu->ctx, n, ps[k], 77 + (uint64_t)k, want);
        dev->ops->dropout(dev->ctx, n, ps[k], 77 + (uint64_t)k, dx);
        got = dgetf(dx, n);
        expect_same(got, want, n, "dropout");
        free(x);
        free(want);
        free(got);
        dfree(dx);
    }
}
END_TEST

/* The device port of sl_rng_float_at against the host's, bit for bit. */
START_TEST(test_rng_port)
{
    const size_t n = (size_t)1 << 20;
    const uint64_t keys[3] = {0, 12345, 0xfedcba9876543210ULL};

    if (!on_cuda)
        return;
    for (int k = 0; k < 3; k++) {
        float *d = dpoison(n), *got, *want = xmalloc(n * sizeof *want);

        for (size_t i = 0; i < n; i++)
            want[i] = sl_rng_float_at(keys[k], i);
        ck_assert_msg(sl_cuda_rng_floats(dev, keys[k], n, d) == SL_OK, "%s", sl_err_msg());
        got = dgetf(d, n);
        expect_same(got, want, n, "rng");
        free(got);
        free(want);
        dfree(d);
    }
}
END_TEST

/* ---- optimizers ---------------------------------------------------------------------- */

START_TEST(test_optimizers)
{
    const size_t n = 5003;
    float *g = rnd(n, 51, -1, 1), *w = rnd(n, 52, -1, 1), *acc = rnd(n, 53, 0.1f, 1);
    float *m = rnd(n, 54, -0.1f, 0.1f), *v = rnd(n, 55, 0.001f, 0.01f);
    float *dg = dputf(g, n), *dw = dputf(w, n), *dacc = dputf(acc, n), *dm = dputf(m, n),
          *dv = dputf(v, n);
    float *got;

    cpu->ops->sgd_update(cpu->ctx, n, 0.1f, g, w);
    dev->ops->sgd_update(dev->ctx, n, 0.1f, dg, dw);
    cpu->ops->adagrad_update(cpu->ctx, n, 0.05f, 1e-10f, g, acc, w);
    dev->ops->adagrad_update(dev->ctx, n, 0.05f, 1e-10f, dg, dacc, dw);
    for (long t = 1; t <= 7; t += 6) {
        cpu->ops->adam_update(cpu->ctx, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t, g, m, v, w);
        dev->ops->adam_update(dev->ctx, n, 1e-3f, 0.9f, 0.999f, 1e-8f, t, dg, dm, dv, dw);
    }
    got = dgetf(dw, n);
    expect_close(got, w, n, 1e-6, 1e-6, "w");
    free(got);
    got = dgetf(dacc, n);
    expect_close(got, acc, n, 0, 1e-6, "adagrad acc");
    free(got);
    got = dgetf(dm, n);
    expect_close(got, m, n, 1e-7, 1e-6, "adam m");
    free(got);
    got = dgetf(dv, n);
    expect_close(got, v, n, 1e-12, 1e-6, "adam v");
    free(got);
    free(g);
    free(w);
    free(acc);
    free(m);
    free(v);
    dfree(dg);
    dfree(dw);
    dfree(dacc);
    dfree(dm);
    dfree(dv);
}
END_TEST

/* ---- element-wise, bias, norms ------------------------------------------------------- */

START_TEST(test_elementwise)
{
    const size_t n = 300007;
    enum { R = 77, C = 1031 };
    float *x = rnd(n, 61, -2, 2), *y = rnd(n, 62, -2, 2), *dx = dputf(x, n), *dy = dputf(y, n);
    float *bias = rnd(C, 63, -1, 1), *mat = rnd(R * C, 64, -1, 1), *db0 = rnd(C, 65, -1, 1);
    float *dbias = dputf(bias, C), *dmat = dputf(mat, R * C), *ddb = dputf(db0, C), *got;
    float *dz = dpoison(n);
    double sc, sg, mag[C];

    cpu->ops->axpy(cpu->ctx, n, -1.5f, x, y);
    dev->ops->axpy(dev->ctx, n, -1.5f, dx, dy);
    cpu->ops->scale(cpu->ctx, n, 0.25f, y);
    dev->ops->scale(dev->ctx, n, 0.25f, dy);
    got = dgetf(dy, n);
    expect_close(got, y, n, 1e-6, 1e-6, "axpy, scale");
    free(got);
    sc = cpu->ops->sumsq(cpu->ctx, n, y);
    sg = dev->ops->sumsq(dev->ctx, n, dy);
    ck_assert_msg(fabs(sg - sc) <= 1e-6 * sc, "sumsq device %.15g, cpu %.15g", sg, sc);
    ck_assert(dev->ops->sumsq(dev->ctx, 0, dy) == 0.0);

    dev->ops->copy(dev->ctx, n, dx, dz);
    got = dgetf(dz, n);
    expect_same(got, x, n, "copy");
    free(got);
    dev->ops->zero(dev->ctx, n - 5, dz);
    got = dgetf(dz, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(i < n - 5 ? got[i] == 0.0f : got[i] == x[i], "zero [%zu] = %g", i,
                      (double)got[i]);
    free(got);

    cpu->ops->add_bias(cpu->ctx, R, C, bias, mat);
    dev->ops->add_bias(dev->ctx, R, C, dbias, dmat);
    got = dgetf(dmat, R * C);
    expect_same(got, mat, R * C, "add_bias");
    free(got);
    /* sums of R + 1 terms in different orders: within 2e-7 (R + 2) sum |terms| */
    for (int j = 0; j < C; j++) {
        mag[j] = fabs(db0[j]);
        for (int r = 0; r < R; r++)
            mag[j] += fabs(mat[r * C + j]);
    }
    cpu->ops->bias_grad(cpu->ctx, R, C, mat, db0);
    dev->ops->bias_grad(dev->ctx, R, C, dmat, ddb);
    got = dgetf(ddb, C);
    for (int j = 0; j < C; j++)
        ck_assert_msg(fabs((double)got[j] - db0[j]) <= 2e-7 * (R + 2) * mag[j],
                      "bias_grad[%d]: device %.9g, cpu %.9g", j, (double)got[j], (double)db0[j]);
    free(got);
    free(x);
    free(y);
    free(bias);
    free(mat);
    free(db0);
    dfree(dx);
    dfree(dy);
    dfree(dbias);
    dfree(dmat);
    dfree(ddb);
    dfree(dz);
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
    float *x = xmalloc(n * sizeof *x), *dx, *back, *dback, *want;
    uint16_t *h = xmalloc(n * 2), *dh, *got;

    for (size_t i = 0; i < n; i++) /* sign * 2^[-30, 20) * [1, 2) */
        x[i] = (i & 1 ? -1.0f : 1.0f) *
               ldexpf(1.0f + sl_rng_float_at(71, i), (int)(sl_rng_float_at(72, i) * 50) - 30);
    x[0] = INFINITY;
    x[1] = -INFINITY;
    x[2] = NAN;
    x[3] = 0.0f;
    x[4] = 65519.0f;
    x[5] = 65520.0f;
    dx = dputf(x, n);
    dh = dalloc(n * 2);
    dback = dpoison(n);
    for (int f = 0; f < 2; f++) {
        for (int s = 0; s < 2; s++) {
            cpu->ops->to_half(cpu->ctx, n, fmt[f], scales[s], x, h);
            dev->ops->to_half(dev->ctx, n, fmt[f], scales[s], dx, dh);
            got = dget(dh, n * 2);
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
            want = xmalloc(n * sizeof *want);
            ck_assert_int_eq(dev->ops->to_device(dev->ctx, dh, h, n * 2), SL_OK);
            cpu->ops->from_half(cpu->ctx, n, fmt[f], 1.0f / scales[s], h, want);
            dev->ops->from_half(dev->ctx, n, fmt[f], 1.0f / scales[s], dh, dback);
            back = dgetf(dback, n);
            expect_close(back, want, n, 0, 0, "from_half"); /* exact; NaN as NaN */
            free(back);
            free(want);
        }
    }
    free(x);
    free(h);
    dfree(dx);
    dfree(dh);
    dfree(dback);
}
END_TEST

/* ---- memory, errors, description ----------------------------------------------------- */

START_TEST(test_memory_and_errors)
{
    float host[1000], *d, *back, *pinned;
    const char *desc = dev->ops->describe(dev->ctx);

    for (int i = 0; i < 1000; i++)
        host[i] = (float)i + 0.5f;
    d = dalloc(sizeof host);
    back = dgetf(d, 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert(back[i] == 0.0f); /* alloc zeroes */
    free(back);
    ck_assert_int_eq(dev->ops->to_device(dev->ctx, d, host, sizeof host), SL_OK);
    ck_assert_int_eq(dev->ops->sync(dev->ctx), SL_OK);
    back = dgetf(d, 1000);
    ck_assert(memcmp(back, host, sizeof host) == 0);
    free(back);
    ck_assert_int_eq(dev->ops->to_device(dev->ctx, d, host, 0), SL_OK);
    /* page-locked staging memory: zeroed, both ways through it */
    ck_assert_int_eq(sl_backend_host_alloc(dev, (void **)&pinned, sizeof host), SL_OK);
    for (int i = 0; i < 1000; i++)
        ck_assert(pinned[i] == 0.0f);
    ck_assert_int_eq(dev->ops->to_host(dev->ctx, pinned, d, sizeof host), SL_OK);
    ck_assert(memcmp(pinned, host, sizeof host) == 0);
    for (int i = 0; i < 1000; i++)
        pinned[i] = -host[i];
    ck_assert_int_eq(dev->ops->to_device(dev->ctx, d, pinned, sizeof host), SL_OK);
    back = dgetf(d, 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert(back[i] == -host[i]);
    free(back);
    sl_backend_host_free(dev, (void **)&pinned);
    ck_assert_ptr_null(pinned);
    ck_assert_int_eq(dev->ops->sync(dev->ctx), SL_OK);
    dev->ops->set_threads(dev->ctx, 3);
    if (on_cuda) {
        /* a failing op without a status: its error waits for the next status */
        dev->ops->to_half(dev->ctx, 4, SL_PREC_FP32, 1.0f, d, (uint16_t *)d);
        ck_assert_int_eq(dev->ops->sync(dev->ctx), SL_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(sl_err_msg(), "cuda:0: to_half"));
        ck_assert_int_eq(dev->ops->sync(dev->ctx), SL_OK); /* reported once */
        ck_assert_ptr_nonnull(strstr(desc, "CUDA "));
        ck_assert_ptr_nonnull(strstr(desc, "cuBLAS "));
        ck_assert_ptr_nonnull(strstr(desc, ", sm_"));
        ck_assert_str_eq(dev->name, "cuda:0");
        ck_assert_int_eq(dev->ops->set_precision(dev->ctx, (sl_precision_t)7), SL_ERR_INVALID);
    }
    dfree(d);
}
END_TEST

START_TEST(test_registry)
{
    sl_backend_t *b = NULL;
    int count = 0;

    if (!on_cuda)
        return;
    ck_assert_int_eq(sl_cuda_device_count(&count), SL_OK);
    ck_assert_int_ge(count, 1);
    ck_assert_int_eq(sl_backend_new(&b, "cuda:999", 1), SL_ERR_DEVICE);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "'cuda:999'"));
    ck_assert_int_eq(sl_backend_new(&b, "cuda", 1), SL_OK);
    ck_assert_str_eq(b->name, "cuda:0");
    sl_backend_destroy(&b);
    ck_assert_int_eq(sl_cuda_rng_floats(cpu, 1, 1, NULL), SL_ERR_INVALID);
}
END_TEST

/* ---- a training step on both backends ------------------------------------------------ */

enum { MV = 50, ME = 16, MH = 32, MP = 24, MT = 4, MB = 3, MN = MT * MB, MS = 12 };

static void
model_config(sl_config_t *c, sl_output_kind_t out)
{
    sl_config_init(c);
    c->run.seed = 3;
    c->model.embedding = ME;
    c->model.nlayers = 2;
    for (int l = 0; l < 2; l++) {
        c->model.layers[l].hidden = MH;
        c->model.layers[l].projection = l == 0 ? MP : 0;
    }
    c->model.dropout = 0.2;
    c->model.output = out;
    c->model.samples = MS;
    c->model.init_range = 0.3;
    c->train.batch = MB;
    c->train.bptt = MT;
    c->train.optimizer.type = SL_OPT_SGD;
    c->train.optimizer.lr = 0.5;
}

static const int32_t mx[MN] = {3, 7, 3, 0, 12, 7, 44, 3, 9, 9, 21, 30};
static const int32_t my[MN] = {7, 3, 0, 12, 7, 44, 3, 9, 9, 21, 30, 1};

/* One step (forward, backward, clip, SGD) of the same model on the CPU and on the
 * device at precision prec, from the same initialisation, state and keys; the
 * device's loss, gradients, new parameters and state against the CPU's. */
static void
train_step_case(sl_output_kind_t out, sl_precision_t prec, double loss_tol, double grad_tol)
{
    sl_config_t cfg;
    sl_lm_t *lc, *lg;
    sl_lm_state_t *sc, *sg;
    sl_optim_t *oc, *og;
    sl_step_keys_t keys = {5, 6};
    double loss_c, loss_g, gmax;
    float *g, *w, *state_c, *state_g;
    size_t np, ns;
    char what[64];

    model_config(&cfg, out);
    ck_assert_int_eq(sl_lm_new(&lc, &cfg, MV, 2, MB, cpu), SL_OK);
    ck_assert_msg(sl_lm_new(&lg, &cfg, MV, 2, MB, dev) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(dev->ops->set_precision(dev->ctx, prec), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(lc, MB, &sc), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(lg, MB, &sg), SL_OK);
    ck_assert_int_eq(sl_optim_new(&oc, &cfg, sl_lm_nparams(lc), cpu), SL_OK);
    ck_assert_int_eq(sl_optim_new(&og, &cfg, sl_lm_nparams(lg), dev), SL_OK);
    np = sl_lm_nparams(lc);
    ns = sl_lm_state_size(sc);
    state_c = rnd(ns, 81, -0.5f, 0.5f);
    ck_assert_int_eq(sl_lm_state_load(sc, state_c), SL_OK);
    ck_assert_int_eq(sl_lm_state_load(sg, state_c), SL_OK);
    w = dgetf(sl_lm_params(lg), np);
    expect_same(w, sl_lm_params(lc), np, "initial parameters");
    free(w);

    ck_assert_int_eq(sl_lm_train_step(lc, sc, mx, my, MT, &keys, &loss_c), SL_OK);
    ck_assert_msg(sl_lm_train_step(lg, sg, mx, my, MT, &keys, &loss_g) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_msg(fabs(loss_g - loss_c) <= loss_tol * loss_c, "loss: device %.9g, cpu %.9g", loss_g,
                  loss_c);
    g = dgetf(sl_lm_grads(lg), np);
    gmax = max_abs(sl_lm_grads(lc), np);
    snprintf(what, sizeof what, "gradients (output %d, precision %d)", (int)out, (int)prec);
    expect_close(g, sl_lm_grads(lc), np, grad_tol * gmax, prec == SL_PREC_FP32 ? 1e-3 : 0, what);
    free(g);

    sl_clip_global_norm(cpu, sl_lm_grads(lc), np, 0.5);
    sl_clip_global_norm(dev, sl_lm_grads(lg), np, 0.5);
    sl_optim_step(oc, sl_lm_params(lc), sl_lm_grads(lc), 0.5);
    sl_optim_step(og, sl_lm_params(lg), sl_lm_grads(lg), 0.5);
    /* w -= lr g, clipped: a gradient off by at most (grad_tol + 1e-3) gmax moves w by at
     * most lr times that */
    w = dgetf(sl_lm_params(lg), np);
    expect_close(w, sl_lm_params(lc), np, 1e-6 + 0.5 * (grad_tol + 1e-3) * gmax, 0,
                 "parameters after SGD");
    free(w);
    state_g = xmalloc(ns * sizeof *state_g);
    ck_assert_int_eq(sl_lm_state_save(sc, state_c), SL_OK);
    ck_assert_int_eq(sl_lm_state_save(sg, state_g), SL_OK);
    expect_close(state_g, state_c, ns, prec == SL_PREC_FP32 ? 1e-5 : 2e-2, 0, "state");
    ck_assert_int_eq(dev->ops->sync(dev->ctx), SL_OK);
    free(state_c);
    free(state_g);
    sl_optim_destroy(&oc);
    sl_optim_destroy(&og);
    sl_lm_state_destroy(&sc);
    sl_lm_state_destroy(&sg);
    sl_lm_destroy(&lc);
    sl_lm_destroy(&lg);
    sl_config_fini(&cfg);
}

START_TEST(test_train_step_full)
{
    train_step_case(SL_OUTPUT_FULL, SL_PREC_FP32, 1e-5, 1e-4);
}
END_TEST

START_TEST(test_train_step_sampled)
{
    train_step_case(SL_OUTPUT_SAMPLED, SL_PREC_FP32, 1e-5, 1e-4);
}
END_TEST

START_TEST(test_train_step_bf16)
{
    if (on_cuda)
        train_step_case(SL_OUTPUT_FULL, SL_PREC_BF16, 1e-2, 5e-2);
}
END_TEST

/* Loss scaling: 2^24 / N times the softmax gradient is ~1e6, past fp16's 65504, so with
 * fp16 gemms the gradients overflow (what the trainer detects to skip the step and
 * halve the scale); the same scale in fp32 or bf16 (fp32's range) stays finite, and
 * fp16 with scale 1 too. */
static double
scaled_sumsq(sl_precision_t prec, float scale)
{
    sl_config_t cfg;
    sl_lm_t *lm;
    sl_lm_state_t *st;
    sl_step_keys_t keys = {1, 2};
    double loss, ss;

    model_config(&cfg, SL_OUTPUT_FULL);
    ck_assert_int_eq(sl_lm_new(&lm, &cfg, MV, 1, MB, dev), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(lm, MB, &st), SL_OK);
    ck_assert_int_eq(dev->ops->set_precision(dev->ctx, prec), SL_OK);
    sl_lm_set_loss_scale(lm, scale);
    ck_assert_int_eq(sl_lm_train_step(lm, st, mx, my, MT, &keys, &loss), SL_OK);
    ck_assert_msg(isfinite(loss) && loss > 0, "loss %g (unscaled, finite)", loss);
    ss = dev->ops->sumsq(dev->ctx, sl_lm_nparams(lm), sl_lm_grads(lm));
    ck_assert_int_eq(dev->ops->set_precision(dev->ctx, SL_PREC_FP32), SL_OK);
    ck_assert_int_eq(dev->ops->sync(dev->ctx), SL_OK);
    sl_lm_state_destroy(&st);
    sl_lm_destroy(&lm);
    sl_config_fini(&cfg);
    return ss;
}

START_TEST(test_loss_scale_overflow)
{
    const float big = 0x1p24f;
    double s1, s32;

    if (!on_cuda)
        return;
    ck_assert(!isfinite(scaled_sumsq(SL_PREC_FP16, big)));
    ck_assert(isfinite(scaled_sumsq(SL_PREC_BF16, big)));
    s32 = scaled_sumsq(SL_PREC_FP32, big);
    s1 = scaled_sumsq(SL_PREC_FP32, 1.0f);
    ck_assert(isfinite(scaled_sumsq(SL_PREC_FP16, 1.0f)));
    /* the scale multiplies every gradient: sum of squares by scale^2 */
    ck_assert_msg(fabs(s32 / ((double)big * big) - s1) <= 1e-4 * s1, "%g vs %g",
                  s32 / ((double)big * big), s1);
}
END_TEST

/* ---- main ---------------------------------------------------------------------------- */

static Suite *
cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_checked_fixture(core, setup, teardown);
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
    tcase_add_test(core, test_train_step_full);
    tcase_add_test(core, test_train_step_sampled);
    tcase_add_test(core, test_train_step_bf16);
    suite_add_tcase(s, core);

    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_set_timeout(limits, 60);
    tcase_add_test(limits, test_memory_and_errors);
    tcase_add_test(limits, test_registry);
    tcase_add_test(limits, test_loss_scale_overflow);
    suite_add_tcase(s, limits);
    return s;
}

/* Visible CUDA devices, counted in a child process so that this one never starts
 * CUDA (its forked test children could not use it). why gets the reason for none. */
static int
count_devices(char *why, size_t len)
{
    int fd[2], status, count = 0;
    char buf[512] = "";
    ssize_t got;
    pid_t pid;

    snprintf(why, len, "the device probe could not run");
    if (pipe(fd) != 0)
        return 0;
    pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return 0;
    }
    if (pid == 0) {
        int n = 0;
        sl_status_t st = sl_cuda_device_count(&n);

        close(fd[0]);
        snprintf(buf, sizeof buf, "%d %s", n,
                 st != SL_OK ? sl_err_msg() : "no CUDA device visible");
        if (write(fd[1], buf, strlen(buf)) < 0)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    got = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    waitpid(pid, &status, 0);
    buf[got > 0 ? got : 0] = '\0';
    if (sscanf(buf, "%d", &count) != 1)
        return 0;
    snprintf(why, len, "%s", strchr(buf, ' ') ? strchr(buf, ' ') + 1 : buf);
    return count;
}

int
main(void)
{
    const char *b = getenv("SHOAL_CUDA_TEST_BACKEND");
    SRunner *sr;
    char why[512];
    int failed;

    if (b != NULL && strcmp(b, "cpu") == 0) {
        dev_name = "cpu";
        on_cuda = 0;
        printf("check_cuda: self-check, the cpu backend in the device's place\n");
    } else if (count_devices(why, sizeof why) < 1) {
        printf("check_cuda: SKIP: %s\n", why);
        return 77;
    }
    sr = srunner_create(cuda_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
