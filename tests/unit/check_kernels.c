/* Unit tests of the compute backends: the CPU backend's gemm and packed gemm (every
 * build of its loops), embeddings, optimizer steps worked out by hand, dropout masks,
 * element-wise ops and bias gradients against naive double references, fp16/bf16 conversion against
 * hand-worked encodings, the precision the CPU refuses, threads against one thread, edge sizes, and
 * the registry's answers for cpu / cuda / unknown names. The LSTM cell and the softmax
 * cross-entropies are in check_kernels_layers.c, the CUDA backend's own tests in
 * check_cuda.c. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "kernels/cpu/sl_cpu_isa.h"
#include "kernels/sl_backend.h"

#include "test_tool.h"

static sl_backend_t *be;

static void
setup(void)
{
    ck_assert_int_eq(sl_backend_new(&be, "cpu", 2), SL_OK);
}

static void
teardown(void)
{
    sl_backend_destroy(&be);
}

/* ---- gemm --------------------------------------------------------------------------- */

/* All four transpose combinations with padded leading dimensions, alpha and beta,
 * against a double triple loop; the padding columns of C must stay untouched. */
START_TEST(test_gemm_transposes)
{
    const int sizes[2][3] = {{7, 5, 6}, {67, 45, 33}};
    const float alpha = 0.75f, beta = -0.5f;

    for (int sz = 0; sz < 2; sz++) {
        int m = sizes[sz][0], n = sizes[sz][1], k = sizes[sz][2];

        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
                int arows = ta ? k : m, brows = tb ? n : k;
                float *a = malloc(sizeof(float) * (size_t)arows * (size_t)lda);
                float *b = malloc(sizeof(float) * (size_t)brows * (size_t)ldb);
                float *c = malloc(sizeof(float) * (size_t)m * (size_t)ldc), *c0;

                test_fill(a, (size_t)arows * (size_t)lda, 1 + (uint64_t)ta, 1.0f);
                test_fill(b, (size_t)brows * (size_t)ldb, 3 + (uint64_t)tb, 1.0f);
                test_fill(c, (size_t)m * (size_t)ldc, 5, 1.0f);
                c0 = test_fcopy(c, (size_t)m * (size_t)ldc);
                be->ops->gemm(be->ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
                for (int i = 0; i < m; i++) {
                    for (int j = 0; j < n; j++) {
                        double ref = 0;

                        for (int p = 0; p < k; p++) {
                            double av = ta ? a[p * lda + i] : a[i * lda + p];
                            double bv = tb ? b[j * ldb + p] : b[p * ldb + j];

                            ref += av * bv;
                        }
                        ref = alpha * ref + beta * (double)c0[i * ldc + j];
                        TEST_ASSERT_CLOSE(c[i * ldc + j], ref, 1e-5, 1e-5, "gemm c", i * ldc + j);
                    }
                    for (int j = n; j < ldc; j++)
                        ck_assert(c[i * ldc + j] == c0[i * ldc + j]);
                }
                free(a);
                free(b);
                free(c);
                free(c0);
            }
        }
    }
}
END_TEST

/* gemm_packed against a double triple loop in every build of the loops this CPU runs
 * that has it (each packs its own way; v3 and v4 must, the baseline has none), 2
 * threads: C = op(A) op(B) + beta C for the four transpose pairs and beta 0 (C, NaN
 * before, must not be read) and 1, m and n leaving remainders of every tile and vector
 * width, k = 0, padded leading dimensions whose padding must stay untouched; the
 * shapes from 32 x 2053 on are split over the threads and (m > 64) into blocks of k,
 * op(A) read in place or (transposed) copied a block at a time; m = 38 and 64 go in
 * tiles of uneven heights (38 rows in tiles of 6: 6 6 6 5 5 5 5); 66 x 1100 x 260 has
 * more panels than fit in a group of them (a quarter of the L2 of any core of under
 * 4 MiB of L2), a last group short of a full one. */
START_TEST(test_gemm_packed)
{
    const int sizes[][3] = {{1, 1, 1},      {7, 17, 3},    {9, 33, 64}, {13, 70, 100},
                            {32, 64, 5},    {6, 5, 2},     {5, 7, 0},   {32, 2053, 64},
                            {100, 70, 300}, {38, 50, 600}, {64, 21, 9}, {70, 33, 513},
                            {66, 1100, 260}};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);

    for (int i = 0; i < sl_cpu_isa_count(); i++) {
        const sl_cpu_isa_t *isa = sl_cpu_isa_at(i);
        sl_backend_t *pb;

        if (!sl_cpu_isa_runs_here(isa))
            continue;
        ck_assert_int_eq(sl_backend_cpu_new_isa(&pb, 2, isa->name), SL_OK);
        if (strcmp(isa->name, "v3") == 0 || strcmp(isa->name, "v4") == 0)
            ck_assert_ptr_nonnull(pb->ops->gemm_packed);
        if (!pb->ops->gemm_packed) {
            sl_backend_destroy(&pb);
            continue;
        }
        for (int sz = 0; sz < nsizes; sz++) {
            for (int tt = 0; tt < 8; tt++) {
                int ta = tt >> 2 & 1, tb = tt >> 1 & 1;
                float beta = (float)(tt & 1);
                int m = sizes[sz][0], n = sizes[sz][1], k = sizes[sz][2];
                int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
                int arows = ta ? k : m, brows = tb ? n : k;
                size_t np = pb->ops->packed_floats(pb->ctx, k, n);
                float *a = malloc(sizeof(float) * (size_t)arows * (size_t)lda);
                float *b = malloc(sizeof(float) * (size_t)brows * (size_t)ldb);
                float *c = malloc(sizeof(float) * (size_t)m * (size_t)ldc), *c0, *packed;

                ck_assert_uint_ge(np, (size_t)k * (size_t)n);
                ck_assert_int_eq(
                    pb->ops->alloc(pb->ctx, (void **)&packed, (np + 1) * sizeof(float)), SL_OK);
                test_fill(a, (size_t)arows * (size_t)lda, 21 + (uint64_t)sz, 1.0f);
                test_fill(b, (size_t)brows * (size_t)ldb, 23 + (uint64_t)tb, 1.0f);
                test_fill(c, (size_t)m * (size_t)ldc, 25, 1.0f);
                c0 = test_fcopy(c, (size_t)m * (size_t)ldc);
                for (int r = 0; r < m && beta == 0.0f; r++)
                    for (int j = 0; j < n; j++)
                        c[r * ldc + j] = NAN;
                pb->ops->pack_b(pb->ctx, tb, k, n, b, ldb, packed);
                pb->ops->gemm_packed(pb->ctx, ta, m, n, k, a, lda, packed, beta, c, ldc);
                for (int r = 0; r < m; r++) {
                    for (int j = 0; j < n; j++) {
                        double ref = beta * c0[r * ldc + j], mag = fabs(ref);

                        for (int p = 0; p < k; p++) {
                            double t = (double)(ta ? a[p * lda + r] : a[r * lda + p]) *
                                       (tb ? b[j * ldb + p] : b[p * ldb + j]);

                            ref += t;
                            mag += fabs(t);
                        }
                        /* a float sum's rounding grows with its terms' magnitudes */
                        TEST_ASSERT_CLOSE(c[r * ldc + j], ref, 1e-5 + 1e-6 * mag, 1e-5, isa->name,
                                          r * ldc + j);
                    }
                    for (int j = n; j < ldc; j++)
                        ck_assert(c[r * ldc + j] == c0[r * ldc + j]);
                }
                pb->ops->free(pb->ctx, packed);
                free(a);
                free(b);
                free(c);
                free(c0);
            }
        }
        sl_backend_destroy(&pb);
    }
}
END_TEST

/* ---- embeddings --------------------------------------------------------------------- */

/* Word 3 appears three times: gather copies its row thrice; scatter-add over the unique
 * rows {3, 0, 9, 1} adds all three source rows into row 3, like the naive loop. */
START_TEST(test_embedding)
{
    enum { V = 10, D = 6, N = 6, U = 4 };
    const int32_t ids[N] = {3, 0, 3, 9, 3, 1};
    const int32_t rows[U] = {3, 0, 9, 1}, off[U + 1] = {0, 3, 4, 5, 6};
    const int32_t pos[N] = {0, 2, 4, 1, 3, 5};
    float table[V * D], out[N * D], src[N * D], grad[V * D], ref[V * D];

    test_fill(table, V * D, 51, 1.0f);
    be->ops->embedding_gather(be->ctx, N, D, table, ids, out);
    for (int i = 0; i < N; i++)
        ck_assert(memcmp(out + i * D, table + ids[i] * D, D * sizeof(float)) == 0);

    test_fill(src, N * D, 52, 1.0f);
    test_fill(grad, V * D, 53, 1.0f);
    memcpy(ref, grad, sizeof ref);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++)
            ref[ids[i] * D + j] += src[i * D + j];
    be->ops->embedding_scatter_add(be->ctx, U, D, rows, off, pos, src, grad);
    for (int k = 0; k < V * D; k++)
        TEST_ASSERT_CLOSE(grad[k], ref[k], 1e-6, 0, "scatter", k);
}
END_TEST

/* ---- optimizers --------------------------------------------------------------------- */

/* sgd, lr 0.1, w = [1, -2, 0.5]:
 *   g1 = [0.5, -1, 2]: w = [1 - 0.05, -2 + 0.1, 0.5 - 0.2] = [0.95, -1.9, 0.3]
 *   g2 = [1, 1, -1]:   w = [0.95 - 0.1, -1.9 - 0.1, 0.3 + 0.1] = [0.85, -2.0, 0.4]
 * adagrad, lr 0.5, eps 1, w = [1, 2, -1], acc = 0:
 *   g1 = [3, -4, 0]: acc = [9, 16, 0], sqrt = [3, 4, 0],
 *                    w -= 0.5 [3/4, -4/5, 0/1] = [0.375, -0.4, 0] -> [0.625, 2.4, -1]
 *   g2 = [4, 3, 2]:  acc = [25, 25, 4], sqrt = [5, 5, 2],
 *                    w -= 0.5 [4/6, 3/6, 2/3] -> [0.625 - 1/3, 2.15, -1 - 1/3]
 * adam, lr 0.1, b1 0.5, b2 0.75, eps 1e-8 (below the tolerance), w = [1, -1, 2]:
 *   t=1, g1 = [2, -4, 1]: m = 0.5 g1 = [1, -2, 0.5], v = 0.25 g1^2 = [1, 4, 0.25];
 *        m/(1-0.5) = g1, v/(1-0.75) = g1^2, step 0.1 g1/|g1| -> w = [0.9, -0.9, 1.9]
 *   t=2, g2 = [-2, 4, 3]: m = 0.5 m + 0.5 g2 = [-0.5, 1, 1.75],
 *        v = 0.75 v + 0.25 g2^2 = [1.75, 7, 2.4375];
 *        mhat = m / 0.75 = [-2/3, 4/3, 7/3], vhat = v / 0.4375 = [4, 16, 39/7],
 *        w -= 0.1 mhat / sqrt(vhat) = 0.1 [-1/3, 1/3, (7/3)/sqrt(39/7)]
 *        -> [0.9 + 1/30, -0.9 - 1/30, 1.9 - 0.0988538...] */
START_TEST(test_optimizers)
{
    float w[3] = {1.0f, -2.0f, 0.5f};
    const float sg1[3] = {0.5f, -1.0f, 2.0f}, sg2[3] = {1.0f, 1.0f, -1.0f};
    const float ag1[3] = {3.0f, -4.0f, 0.0f}, ag2[3] = {4.0f, 3.0f, 2.0f};
    const float mg1[3] = {2.0f, -4.0f, 1.0f}, mg2[3] = {-2.0f, 4.0f, 3.0f};
    float acc[3] = {0}, m[3] = {0}, v[3] = {0};

    be->ops->sgd_update(be->ctx, 3, 0.1f, sg1, w);
    ck_assert_float_eq_tol(w[0], 0.95f, 1e-6);
    ck_assert_float_eq_tol(w[1], -1.9f, 1e-6);
    ck_assert_float_eq_tol(w[2], 0.3f, 1e-6);
    be->ops->sgd_update(be->ctx, 3, 0.1f, sg2, w);
    ck_assert_float_eq_tol(w[0], 0.85f, 1e-6);
    ck_assert_float_eq_tol(w[1], -2.0f, 1e-6);
    ck_assert_float_eq_tol(w[2], 0.4f, 1e-6);

    w[0] = 1.0f;
    w[1] = 2.0f;
    w[2] = -1.0f;
    be->ops->adagrad_update(be->ctx, 3, 0.5f, 1.0f, ag1, acc, w);
    ck_assert_float_eq_tol(w[0], 0.625f, 1e-6);
    ck_assert_float_eq_tol(w[1], 2.4f, 1e-6);
    ck_assert_float_eq_tol(w[2], -1.0f, 1e-6);
    be->ops->adagrad_update(be->ctx, 3, 0.5f, 1.0f, ag2, acc, w);
    ck_assert_float_eq_tol(acc[0], 25.0f, 1e-6);
    ck_assert_float_eq_tol(acc[1], 25.0f, 1e-6);
    ck_assert_float_eq_tol(acc[2], 4.0f, 1e-6);
    ck_assert_float_eq_tol(w[0], 0.625 - 1.0 / 3, 1e-6);
    ck_assert_float_eq_tol(w[1], 2.15f, 1e-6);
    ck_assert_float_eq_tol(w[2], -1.0 - 1.0 / 3, 1e-6);

    w[0] = 1.0f;
    w[1] = -1.0f;
    w[2] = 2.0f;
    be->ops->adam_update(be->ctx, 3, 0.1f, 0.5f, 0.75f, 1e-8f, 1, mg1, m, v, w);
    ck_assert_float_eq_tol(m[2], 0.5f, 1e-6);
    ck_assert_float_eq_tol(v[1], 4.0f, 1e-6);
    ck_assert_float_eq_tol(w[0], 0.9f, 1e-6);
    ck_assert_float_eq_tol(w[1], -0.9f, 1e-6);
    ck_assert_float_eq_tol(w[2], 1.9f, 1e-6);
    be->ops->adam_update(be->ctx, 3, 0.1f, 0.5f, 0.75f, 1e-8f, 2, mg2, m, v, w);
    ck_assert_float_eq_tol(m[0], -0.5f, 1e-6);
    ck_assert_float_eq_tol(m[1], 1.0f, 1e-6);
    ck_assert_float_eq_tol(m[2], 1.75f, 1e-6);
    ck_assert_float_eq_tol(v[0], 1.75f, 1e-6);
    ck_assert_float_eq_tol(v[1], 7.0f, 1e-6);
    ck_assert_float_eq_tol(v[2], 2.4375f, 1e-6);
    ck_assert_float_eq_tol(w[0], 0.9 + 1.0 / 30, 1e-6);
    ck_assert_float_eq_tol(w[1], -0.9 - 1.0 / 30, 1e-6);
    ck_assert_float_eq_tol(w[2], 1.9 - 0.1 * (7.0 / 3) / sqrt(39.0 / 7), 1e-6);
    ck_assert_float_eq_tol(w[2], 1.9 - 0.0988538, 1e-6);
}
END_TEST

/* ---- dropout ------------------------------------------------------------------------ */

/* The mask is the documented one (kept iff sl_rng_float_at(key, i) >= p), the same for
 * the same key (forward and backward), different for another key; kept values are
 * scaled by 1/(1-p); the dropped fraction on 100k elements is within 7 sigma of p. */
START_TEST(test_dropout)
{
    enum { N = 100000 };
    const float p = 0.3f, keep = 1.0f / (1.0f - p);
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    float *x;
    int dropped = 0, differ = 0;

    for (int i = 0; i < N; i++)
        a[i] = b[i] = c[i] = 1.0f + (float)(i % 7);
    x = test_fcopy(a, N);
    be->ops->dropout(be->ctx, N, p, 1234, a);
    be->ops->dropout(be->ctx, N, p, 1234, b);
    be->ops->dropout(be->ctx, N, p, 1235, c);
    ck_assert(memcmp(a, b, N * sizeof *a) == 0);
    for (int i = 0; i < N; i++) {
        int kept = sl_rng_float_at(1234, (uint64_t)i) >= p;

        if (kept)
            ck_assert_float_eq_tol(a[i], x[i] * keep, 1e-6);
        else
            ck_assert(a[i] == 0.0f);
        dropped += !kept;
        differ += (a[i] == 0.0f) != (c[i] == 0.0f);
    }
    ck_assert_double_eq_tol((double)dropped / N, p, 0.01);
    ck_assert_int_gt(differ, N / 10); /* independent masks differ in ~42% of places */
    memcpy(b, x, N * sizeof *b);
    be->ops->dropout(be->ctx, N, 0.0f, 1234, b);
    ck_assert(memcmp(b, x, N * sizeof *b) == 0);
    free(a);
    free(b);
    free(c);
    free(x);
}
END_TEST

/* ---- element-wise and bias ---------------------------------------------------------- */

START_TEST(test_elementwise)
{
    enum { N = 1003, R = 5, C = 131 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *y0;
    float bias[C], db[C], db0[C], mat[R * C], mat0[R * C];
    double ss = 0;

    test_fill(x, N, 61, 2.0f);
    test_fill(y, N, 62, 2.0f);
    y0 = test_fcopy(y, N);
    be->ops->axpy(be->ctx, N, -1.5f, x, y);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq_tol(y[i], y0[i] - 1.5f * x[i], 1e-6);
    be->ops->scale(be->ctx, N, 0.25f, y);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq_tol(y[i], 0.25f * (y0[i] - 1.5f * x[i]), 1e-6);
    be->ops->copy(be->ctx, N, x, y);
    ck_assert(memcmp(x, y, N * sizeof *x) == 0);
    be->ops->zero(be->ctx, N - 3, y);
    for (int i = 0; i < N - 3; i++)
        ck_assert(y[i] == 0.0f);
    ck_assert(y[N - 3] == x[N - 3]); /* zero stops at n */
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    ck_assert_double_eq_tol(be->ops->sumsq(be->ctx, N, x), ss, 1e-9 * ss);

    test_fill(bias, C, 63, 1.0f);
    test_fill(mat, R * C, 64, 1.0f);
    memcpy(mat0, mat, sizeof mat);
    be->ops->add_bias(be->ctx, R, C, bias, mat);
    for (int k = 0; k < R * C; k++)
        ck_assert_float_eq_tol(mat[k], mat0[k] + bias[k % C], 1e-6);
    test_fill(db, C, 65, 1.0f);
    memcpy(db0, db, sizeof db);
    be->ops->bias_grad(be->ctx, R, C, mat0, db);
    for (int j = 0; j < C; j++) {
        double s = db0[j];

        for (int r = 0; r < R; r++)
            s += mat0[r * C + j];
        ck_assert_float_eq_tol(db[j], s, 1e-5);
    }
    free(x);
    free(y);
    free(y0);
}
END_TEST

/* Bias gradients sum long columns (N = T*B = 1120 rows in a word-model step) in double:
 * a column of 1 followed by 4096 times 2^-26 sums to exactly 1 + 2^-14, which a float
 * running sum never reaches (each 2^-26 is below half an ulp of 1 and is lost). 300
 * columns span two of the kernel's column blocks, and 4097 x 300 elements are enough
 * for the 2-thread split. */
START_TEST(test_bias_grad_long_columns)
{
    enum { R = 4097, C = 300 };
    float *dx = malloc((size_t)R * C * sizeof *dx), db[C];

    ck_assert_ptr_nonnull(dx);
    for (int j = 0; j < C; j++) {
        dx[j] = 1.0f + (float)j / 1024.0f;
        db[j] = 0.25f;
    }
    for (size_t k = C; k < (size_t)R * C; k++)
        dx[k] = 0x1p-26f;
    be->ops->bias_grad(be->ctx, R, C, dx, db);
    for (int j = 0; j < C; j++)
        ck_assert_msg(db[j] == 0.25f + (1.0f + (float)j / 1024.0f) + 0x1p-14f,
                      "db[%d] = %.9g, want %.9g", j, (double)db[j],
                      0.25 + (1.0 + j / 1024.0) + 0x1p-14);
    free(dx);
}
END_TEST

/* ---- 16-bit conversion and precision ------------------------------------------------ */

/* Hand-worked encodings: ties to even, fp16's overflow at 65520 and its subnormals,
 * bf16's overflow past FLT_MAX, NaN kept, the scale applied before rounding. */
START_TEST(test_half_values)
{
    enum { K = 13 };
    const float x16[K] = {1.0f,
                          -2.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e6f,
                          0x1p-24f,
                          0x1p-25f,
                          0.75f * 0x1p-24f,
                          1.0f + 0x1p-11f,
                          1.0f + 3 * 0x1p-11f,
                          0.25f * 4.0f,
                          -1e6f};
    const uint16_t h16[K] = {0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0x0001,
                             0x0000, 0x0001, 0x3c00, 0x3c02, 0x3c00, 0xfc00};
    const float xb[6] = {1.0f, -2.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.4028235e38f, 0.5f};
    const uint16_t hb[6] = {0x3f80, 0xc000, 0x3f80, 0x3f82, 0x7f80, 0x3f00};
    const uint16_t back_in[4] = {0x3c00, 0x7bff, 0x0001, 0xfc00};
    uint16_t h[K];
    float f[K], nan_in[2] = {NAN, -NAN};

    be->ops->to_half(be->ctx, K, SL_PREC_FP16, 1.0f, x16, h);
    for (int i = 0; i < K; i++)
        ck_assert_msg(h[i] == h16[i], "fp16(%.9g) = 0x%04x, want 0x%04x", (double)x16[i], h[i],
                      h16[i]);
    be->ops->to_half(be->ctx, 6, SL_PREC_BF16, 1.0f, xb, h);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(h[i] == hb[i], "bf16(%.9g) = 0x%04x, want 0x%04x", (double)xb[i], h[i],
                      hb[i]);
    /* the scale multiplies first: 0.25 x 4 = 1; 30000 x 4 overflows fp16, not bf16 */
    f[0] = 0.25f;
    f[1] = 30000.0f;
    be->ops->to_half(be->ctx, 2, SL_PREC_FP16, 4.0f, f, h);
    ck_assert(h[0] == 0x3c00 && h[1] == 0x7c00);
    be->ops->to_half(be->ctx, 2, SL_PREC_BF16, 4.0f, f, h);
    ck_assert(h[0] == 0x3f80 && h[1] == 0x47ea);
    be->ops->to_half(be->ctx, 2, SL_PREC_FP16, 1.0f, nan_in, h);
    ck_assert((h[0] & 0x7c00) == 0x7c00 && (h[0] & 0x3ff) != 0);
    ck_assert((h[1] & 0x7c00) == 0x7c00 && (h[1] & 0x3ff) != 0 && (h[1] & 0x8000));
    be->ops->to_half(be->ctx, 1, SL_PREC_BF16, 1.0f, nan_in, h);
    ck_assert((h[0] & 0x7f80) == 0x7f80 && (h[0] & 0x7f) != 0);

    be->ops->from_half(be->ctx, 4, SL_PREC_FP16, 0.25f, back_in, f);
    ck_assert(f[0] == 0.25f && f[1] == 65504.0f * 0.25f && f[2] == 0x1p-26f);
    ck_assert(isinf(f[3]) && f[3] < 0);
    h[0] = 0x3f82;
    h[1] = 0x0001;
    be->ops->from_half(be->ctx, 2, SL_PREC_BF16, 1.0f, h, f);
    ck_assert(f[0] == 1.015625f && f[1] == 0x1p-133f);
}
END_TEST

/* Round trips of 3M values (the threaded path) with a scale: the error is the format's
 * rounding, 2^-11 relative for fp16 and 2^-8 for bf16 (plus fp16's subnormal step). */
START_TEST(test_half_round_trip)
{
    const size_t n = 3u << 20;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint16_t *h = malloc(n * sizeof *h);
    const sl_precision_t fmt[2] = {SL_PREC_FP16, SL_PREC_BF16};
    const double rel[2] = {0x1p-11, 0x1p-8};

    ck_assert(x && y && h);
    test_fill(x, n, 71, 1000.0f);
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++)
            y[i] = NAN;
        be->ops->to_half(be->ctx, n, fmt[k], 8.0f, x, h);
        be->ops->from_half(be->ctx, n, fmt[k], 0.125f, h, y);
        for (size_t i = 0; i < n; i++)
            if (!(fabs((double)y[i] - x[i]) <= rel[k] * fabs((double)x[i]) + 0x1p-28))
                ck_abort_msg("format %d, element %zu: %.9g came back as %.9g", k, i, (double)x[i],
                             (double)y[i]);
    }
    free(x);
    free(y);
    free(h);
}
END_TEST

START_TEST(test_precision_cpu)
{
    ck_assert_int_eq(be->ops->set_precision(be->ctx, SL_PREC_FP32), SL_OK);
    ck_assert_int_eq(be->ops->set_precision(be->ctx, SL_PREC_BF16), SL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "precision bf16"));
    ck_assert_int_eq(be->ops->set_precision(be->ctx, SL_PREC_FP16), SL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "precision fp16"));
}
END_TEST

/* ---- registry ----------------------------------------------------------------------- */

START_TEST(test_registry)
{
    sl_backend_t *b = NULL, stale = {0};
    float host[5] = {1, 2, 3, 4, 5}, back[5] = {0};
    float *dev, *pinned;

    ck_assert_int_eq(sl_backend_new(&b, "cpu", 1), SL_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b->name, "cpu");
    ck_assert_ptr_nonnull(strstr(b->ops->describe(b->ctx), "(1 thread)"));
    ck_assert_int_eq(b->ops->alloc(b->ctx, (void **)&dev, sizeof host), SL_OK);
    for (int i = 0; i < 5; i++)
        ck_assert(dev[i] == 0.0f); /* alloc zeroes */
    ck_assert_int_eq(b->ops->to_device(b->ctx, dev, host, sizeof host), SL_OK);
    ck_assert_int_eq(b->ops->to_host(b->ctx, back, dev, sizeof host), SL_OK);
    ck_assert_int_eq(b->ops->sync(b->ctx), SL_OK);
    ck_assert(memcmp(host, back, sizeof host) == 0);
    b->ops->free(b->ctx, dev);
    /* staging memory: zeroed host memory that to_device / to_host take */
    ck_assert_int_eq(sl_backend_host_alloc(b, (void **)&pinned, sizeof host), SL_OK);
    ck_assert_ptr_nonnull(pinned);
    for (int i = 0; i < 5; i++)
        ck_assert(pinned[i] == 0.0f);
    memcpy(pinned, host, sizeof host);
    ck_assert_int_eq(b->ops->alloc(b->ctx, (void **)&dev, sizeof host), SL_OK);
    ck_assert_int_eq(b->ops->to_device(b->ctx, dev, pinned, sizeof host), SL_OK);
    memset(pinned, 0, sizeof host);
    ck_assert_int_eq(b->ops->to_host(b->ctx, pinned, dev, sizeof host), SL_OK);
    ck_assert(memcmp(host, pinned, sizeof host) == 0);
    b->ops->free(b->ctx, dev);
    sl_backend_host_free(b, (void **)&pinned);
    ck_assert_ptr_null(pinned);
    sl_backend_host_free(b, (void **)&pinned); /* NULL: no-op */
    b->ops->set_threads(b->ctx, 3);
    ck_assert_ptr_nonnull(strstr(b->ops->describe(b->ctx), "(3 threads)"));
    sl_backend_destroy(&b);
    ck_assert_ptr_null(b);
    sl_backend_destroy(&b); /* NULL pointer: no-op */
    sl_backend_destroy(NULL);

    b = &stale; /* a failed new must leave NULL */
#ifdef HAVE_CUDA
    /* built with CUDA: the device may be missing here (SL_ERR_DEVICE, naming it) */
    for (int k = 0; k < 2; k++) {
        const char *names[2] = {"cuda", "cuda:1"}, *full[2] = {"cuda:0", "cuda:1"};
        const char *quoted[2] = {"'cuda:0'", "'cuda:1'"};
        sl_status_t st = sl_backend_new(&b, names[k], 1);

        if (st == SL_OK) {
            ck_assert_str_eq(b->name, full[k]);
            sl_backend_destroy(&b);
        } else {
            ck_assert_int_eq(st, SL_ERR_DEVICE);
            ck_assert_ptr_nonnull(strstr(sl_err_msg(), quoted[k]));
        }
        ck_assert_ptr_null(b);
        b = &stale;
    }
#else
    ck_assert_int_eq(sl_backend_new(&b, "cuda", 1), SL_ERR_UNSUPPORTED);
    ck_assert_ptr_null(b);
    ck_assert_str_eq(sl_err_msg(),
                     "device 'cuda:0': this shoal was built without CUDA (configure --with-cuda)");
    ck_assert_int_eq(sl_backend_new(&b, "cuda:1", 1), SL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "'cuda:1'"));
#endif
    ck_assert_int_eq(sl_backend_new(&b, "tpu", 1), SL_ERR_INVALID);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "'tpu'"));
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "cpu, cuda"));
}
END_TEST

/* ---- limits ------------------------------------------------------------------------- */

START_TEST(test_registry_bad_names)
{
    sl_backend_t *b = NULL;
    const char *bad[] = {"", "CPU", "cuda:", "cuda:x", "cuda:1x", "cuda0", "cpu "};

    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(sl_backend_new(&b, bad[i], 1), SL_ERR_INVALID);
        ck_assert_ptr_null(b);
    }
    ck_assert_int_eq(sl_backend_new(&b, NULL, 1), SL_ERR_INVALID);
    ck_assert_int_eq(sl_backend_new(&b, "cpu", -1), SL_ERR_INVALID);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(sl_backend_new(&b, "cpu", 0), SL_OK); /* 0: all cores */
    ck_assert_ptr_nonnull(strstr(b->ops->describe(b->ctx), "thread"));
    sl_backend_destroy(&b);
}
END_TEST

/* Sizes over the threading thresholds (65536 fused, 2^20 streaming): two threads give the same bits
 * as one (rows and elements are independent), losses and sums agree to rounding. */
START_TEST(test_threads_agree)
{
    enum { N = 64, V = 5003, P = (1 << 20) + 5 };
    float *x1 = malloc(sizeof(float) * N * V), *x2, *g, *w1, *w2, *m1, *m2, *v1, *v2;
    int32_t t[N];
    double l1, l2, s1, s2;

    test_fill(x1, (size_t)N * V, 81, 6.0f);
    x2 = test_fcopy(x1, (size_t)N * V);
    for (int r = 0; r < N; r++)
        t[r] = (r * 97) % V;
    be->ops->set_threads(be->ctx, 1);
    be->ops->softmax_xent(be->ctx, N, V, x1, V, NULL, t, 1.0f, &l1);
    be->ops->set_threads(be->ctx, 2);
    be->ops->softmax_xent(be->ctx, N, V, x2, V, NULL, t, 1.0f, &l2);
    ck_assert(memcmp(x1, x2, sizeof(float) * N * V) == 0);
    ck_assert_double_eq_tol(l1, l2, 1e-12 * l1);

    g = malloc(sizeof(float) * P);
    w1 = malloc(sizeof(float) * P);
    test_fill(g, P, 82, 1.0f);
    test_fill(w1, P, 83, 1.0f);
    w2 = test_fcopy(w1, P);
    m1 = calloc(P, sizeof(float));
    m2 = calloc(P, sizeof(float));
    v1 = calloc(P, sizeof(float));
    v2 = calloc(P, sizeof(float));
    be->ops->set_threads(be->ctx, 1);
    be->ops->adam_update(be->ctx, P, 1e-3f, 0.9f, 0.999f, 1e-8f, 1, g, m1, v1, w1);
    s1 = be->ops->sumsq(be->ctx, P, w1);
    be->ops->set_threads(be->ctx, 2);
    be->ops->adam_update(be->ctx, P, 1e-3f, 0.9f, 0.999f, 1e-8f, 1, g, m2, v2, w2);
    s2 = be->ops->sumsq(be->ctx, P, w2);
    ck_assert(memcmp(w1, w2, sizeof(float) * P) == 0);
    ck_assert_double_eq_tol(s1, s2, 1e-12 * s1);
    free(x1);
    free(x2);
    free(g);
    free(w1);
    free(w2);
    free(m1);
    free(m2);
    free(v1);
    free(v2);
}
END_TEST

/* sumsq_blocks: each block's sum against a double reference, the same bits on 1 and 2
 * threads (2M floats, which the CPU splits: sl_cpu_loops.h's SL_CPU_PAR_MIN_STREAM) and
 * whichever other blocks are listed; the last block the shorter. */
START_TEST(test_sumsq_blocks)
{
    enum { NB = (1 << 21) / SL_SUMSQ_BLOCK + 1, TAIL = SL_SUMSQ_BLOCK / 3 };
    size_t n = (size_t)(NB - 1) * SL_SUMSQ_BLOCK + TAIL, *all = malloc(NB * sizeof *all);
    size_t some[2] = {3, NB - 1};
    float *x = malloc(sizeof(float) * n);
    double *out1 = malloc(NB * sizeof *out1), *out2 = malloc(NB * sizeof *out2), part[2];

    ck_assert(x && all && out1 && out2);
    test_fill(x, n, 91, 1.0f);
    for (size_t b = 0; b < NB; b++)
        all[b] = b;
    be->ops->set_threads(be->ctx, 1);
    be->ops->sumsq_blocks(be->ctx, n, x, all, NB, out1);
    be->ops->set_threads(be->ctx, 2);
    be->ops->sumsq_blocks(be->ctx, n, x, all, NB, out2);
    be->ops->sumsq_blocks(be->ctx, n, x, some, 2, part);
    be->ops->set_threads(be->ctx, 1);
    ck_assert(memcmp(out1, out2, NB * sizeof *out1) == 0);
    ck_assert(part[0] == out1[3] && part[1] == out1[NB - 1]);
    for (size_t b = 0; b < NB; b++) {
        size_t end = b == NB - 1 ? n : (b + 1) * SL_SUMSQ_BLOCK;
        double ref = 0.0;

        for (size_t i = b * SL_SUMSQ_BLOCK; i < end; i++)
            ref += (double)x[i] * x[i];
        ck_assert_double_eq_tol(out1[b], ref, 1e-12 * ref);
    }
    free(x);
    free(all);
    free(out1);
    free(out2);
}
END_TEST

/* Empty sizes do nothing; p = 1 drops everything; Adagrad with eps 0 on a gradient of
 * 1e-19 (acc = 1e-38, denormal) still moves w by lr; Adam at t = 10^6 has no bias
 * correction left and stays finite. */
START_TEST(test_edges)
{
    float x[4] = {1, 2, 3, 4}, w[1] = {1.0f}, acc[1] = {0.0f}, g[1] = {1e-19f};
    float m[1] = {0}, v[1] = {0}, ga[1] = {0.5f};
    double loss = -1, mm, vv;

    be->ops->softmax_xent(be->ctx, 0, 4, x, 4, NULL, NULL, 1.0f, &loss);
    ck_assert(loss == 0.0);
    be->ops->axpy(be->ctx, 0, 1.0f, x, x);
    be->ops->dropout(be->ctx, 0, 0.5f, 1, x);
    ck_assert(be->ops->sumsq(be->ctx, 0, x) == 0.0);
    be->ops->dropout(be->ctx, 4, 1.0f, 1, x);
    for (int i = 0; i < 4; i++)
        ck_assert(x[i] == 0.0f);
    be->ops->adagrad_update(be->ctx, 1, 0.25f, 0.0f, g, acc, w);
    ck_assert_float_eq_tol(w[0], 0.75f, 1e-6);
    w[0] = 1.0f;
    be->ops->adam_update(be->ctx, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 1000000, ga, m, v, w);
    /* m = (1 - 0.9f) 0.5 ~ 0.05, v = (1 - 0.999f) 0.25 ~ 0.00025 (the float constants
     * are not exact), bias corrections 1: w -= 0.1 m / (sqrt(v) + eps) ~ 0.316228 */
    mm = (1 - (double)0.9f) * 0.5;
    vv = (1 - (double)0.999f) * 0.25;
    ck_assert_float_eq_tol(w[0], 1.0 - 0.1 * mm / (sqrt(vv) + 1e-8), 1e-6);
}
END_TEST

/* Shapes that break the op contracts are bugs in the caller: they abort with a message
 * (SL_ASSERT) instead of cblas printing and skipping the product, or reading outside
 * a row. */
START_TEST(test_gemm_bad_leading_dim)
{
    float a[6] = {0}, b[6] = {0}, c[4] = {0};

    be->ops->gemm(be->ctx, 0, 0, 2, 2, 3, 1.0f, a, 2, b, 2, 0.0f, c, 2); /* lda 2 < k 3 */
}
END_TEST

static Suite *
kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_test(core, test_gemm_transposes);
    tcase_add_test(core, test_gemm_packed);
    tcase_add_test(core, test_embedding);
    tcase_add_test(core, test_optimizers);
    tcase_add_test(core, test_dropout);
    tcase_add_test(core, test_elementwise);
    tcase_add_test(core, test_bias_grad_long_columns);
    tcase_add_test(core, test_half_values);
    tcase_add_test(core, test_half_round_trip);
    tcase_add_test(core, test_precision_cpu);
    tcase_add_test(core, test_registry);
    suite_add_tcase(s, core);
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(limits, test_registry_bad_names);
    tcase_add_test(limits, test_threads_agree);
    tcase_add_test(limits, test_sumsq_blocks);
    tcase_add_test(limits, test_edges);
    tcase_add_test_raise_signal(limits, test_gemm_bad_leading_dim, SIGABRT);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(kernels_suite());
}
