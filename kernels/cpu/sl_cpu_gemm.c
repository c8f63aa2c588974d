/* The CPU backend's packed gemm (packed_floats, pack_b, gemm_packed): C += A op(B) for
 * a B that stays the same over many calls, the recurrent W_hh over a BPTT window.
 * OpenBLAS packs B again at every call, a fifth of the char model's step at its small m
 * (the batch), and multiplies with AVX2 where OPENBLAS_CORETYPE=Haswell. Here op(B) is
 * packed once into panels of NR columns, k rows of NR floats each (the last panel
 * padded with zeros), and a register tile of MR rows x NR columns walks down a panel
 * with one broadcast of A and NV vector FMAs per row and k. Written with GCC vector
 * types, so that each build of the loops (sl_cpu_loops.h) gets its width: 16 floats for
 * AVX-512, 8 for AVX2; only the builds with FMA have it (SL_CPU_GEMM_PACKED). Threads
 * split the panels; every element of C is one sum in k order, whatever the split. */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "kernels/cpu/sl_cpu_loops.h"

#ifdef SL_CPU_GEMM_PACKED

/* Vector bytes and the tile: MR x NV accumulators plus NV panel vectors and one
 * broadcast fit the register file (32 zmm; 16 ymm). */
#if defined(__AVX512F__)
#define VEC_BYTES 64
#define MR 8
#else
#define VEC_BYTES 32
#define MR 6
#endif
#define NV 2
#define VW (VEC_BYTES / (int)sizeof(float))
#define NR (NV * VW)

typedef float vec_t __attribute__((vector_size(VEC_BYTES)));

/* Unaligned loads and stores (C's rows, A's tails) that the compiler turns into single
 * vector moves. */
static inline vec_t
vload(const float *p)
{
    vec_t v;

    memcpy(&v, p, sizeof v);
    return v;
}

static inline void
vstore(float *p, vec_t v)
{
    memcpy(p, &v, sizeof v);
}

/* x in every lane: one broadcast. (x + (vec_t){0} adds, since -0 + 0 is +0, and a loop
 * over the lanes is not always seen as a broadcast.) */
static inline vec_t
splat(float x)
{
#if VEC_BYTES == 64
    return (vec_t){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
    return (vec_t){x, x, x, x, x, x, x, x};
#endif
}

static size_t
panels(int n)
{
    return ((size_t)n + NR - 1) / NR;
}

size_t
sl_cpu_packed_floats(void *ctx, int k, int n)
{
    (void)ctx;
    return k > 0 && n > 0 ? panels(n) * NR * (size_t)k : 0;
}

/* Panel p, row kk holds op(B)[kk][p NR .. p NR + NR). With trans_b, B is (n, k) and a
 * panel gathers NR of its rows: copied a block of KB k-values at a time, so that the
 * NR panel rows being written stay in L1 while B's rows are read in order. */
void
sl_cpu_pack_b(void *ctx, int trans_b, int k, int n, const float *b, int ldb, float *packed)
{
    enum { KB = 16 };
    const size_t ld = (size_t)ldb, np = panels(n);

    (void)ctx;
    if (k <= 0 || n <= 0)
        return;
    for (size_t p = 0; p < np; p++) {
        float *restrict dst = packed + p * NR * (size_t)k;
        size_t j0 = p * NR, cols = (size_t)n - j0 < NR ? (size_t)n - j0 : NR;

        if (!trans_b) {
            for (size_t kk = 0; kk < (size_t)k; kk++) {
                memcpy(dst + kk * NR, b + kk * ld + j0, cols * sizeof(float));
                memset(dst + kk * NR + cols, 0, (NR - cols) * sizeof(float));
            }
            continue;
        }
        for (size_t k0 = 0; k0 < (size_t)k; k0 += KB) {
            size_t kn = (size_t)k - k0 < KB ? (size_t)k - k0 : KB;

            for (size_t j = 0; j < cols; j++) {
                const float *restrict src = b + (j0 + j) * ld + k0;

                for (size_t q = 0; q < kn; q++)
                    dst[(k0 + q) * NR + j] = src[q];
            }
            for (size_t q = 0; q < kn; q++)
                memset(dst + (k0 + q) * NR + cols, 0, (NR - cols) * sizeof(float));
        }
    }
}

/* C (mr, NR) += A (mr, k) P (k, NR), mr <= MR a constant where inlined, so that the
 * accumulators are registers. */
static inline __attribute__((always_inline)) void
tile(const int mr, int k, const float *restrict a, size_t lda, const float *restrict p,
     float *restrict c, size_t ldc)
{
    vec_t acc[MR][NV];

#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < NV; v++)
            acc[i][v] = vload(c + (size_t)i * ldc + (size_t)v * VW);
    for (int kk = 0; kk < k; kk++) {
        vec_t bv[NV];

        for (int v = 0; v < NV; v++)
            bv[v] = vload(p + (size_t)kk * NR + (size_t)v * VW);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            vec_t av = splat(a[(size_t)i * lda + (size_t)kk]);

            for (int v = 0; v < NV; v++)
                acc[i][v] += av * bv[v];
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < NV; v++)
            vstore(c + (size_t)i * ldc + (size_t)v * VW, acc[i][v]);
}

/* Every row of C against one panel: full tiles of MR rows, then the remainder. */
static void
panel_rows(int m, int k, const float *a, size_t lda, const float *p, float *c, size_t ldc)
{
    int i = 0;

    for (; i + MR <= m; i += MR)
        tile(MR, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
    switch (m - i) {
#if MR > 6
    case 7:
        tile(7, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
    case 6:
        tile(6, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
#endif
    case 5:
        tile(5, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
    case 4:
        tile(4, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
    case 3:
        tile(3, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
    case 2:
        tile(2, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
    case 1:
        tile(1, k, a + (size_t)i * lda, lda, p, c + (size_t)i * ldc, ldc);
        break;
    default:
        break;
    }
}

typedef struct {
    int m, n, k;
    const float *a, *packed;
    float *c;
    size_t lda, ldc;
} gemm_args_t;

/* Panels [lo, hi). A last panel narrower than NR runs on a copy of its columns of C,
 * MR rows at a time, padded with zeros that are never written back. */
static double
gemm_panels(const void *argp, size_t lo, size_t hi)
{
    const gemm_args_t *g = argp;

    for (size_t p = lo; p < hi; p++) {
        const float *pp = g->packed + p * NR * (size_t)g->k;
        size_t j0 = p * NR, cols = (size_t)g->n - j0;
        float *c = g->c + j0;

        if (cols >= NR) {
            panel_rows(g->m, g->k, g->a, g->lda, pp, c, g->ldc);
            continue;
        }
        for (int i = 0; i < g->m; i += MR) {
            int rows = g->m - i < MR ? g->m - i : MR;
            float part[MR * NR] = {0};

            for (int r = 0; r < rows; r++)
                memcpy(part + r * NR, c + (size_t)(i + r) * g->ldc, cols * sizeof(float));
            panel_rows(rows, g->k, g->a + (size_t)i * g->lda, g->lda, pp, part, NR);
            for (int r = 0; r < rows; r++)
                memcpy(c + (size_t)(i + r) * g->ldc, part + r * NR, cols * sizeof(float));
        }
    }
    return 0;
}

void
sl_cpu_gemm_packed(void *ctx, int m, int n, int k, const float *a, int lda, const float *packed,
                   float *c, int ldc)
{
    gemm_args_t g = {.m = m,
                     .n = n,
                     .k = k,
                     .a = a,
                     .packed = packed,
                     .c = c,
                     .lda = (size_t)lda,
                     .ldc = (size_t)ldc};

    SL_ASSERT(m >= 0 && n >= 0 && k >= 0 && lda >= k && ldc >= n);
    if (m == 0 || n == 0 || k == 0)
        return;
    sl_cpu_par_range(ctx, panels(n), (size_t)m * (size_t)n * (size_t)k, SL_CPU_PAR_MIN_GEMM,
                     gemm_panels, &g);
}

#endif /* SL_CPU_GEMM_PACKED */
