/* The CPU backend's packed gemm (packed_floats, pack_b, gemm_packed): C = op(A) op(B)
 * (+ C) for a B that stays the same over many calls, the recurrent W_hh over a BPTT
 * window, or whose packing pays within one call, the big products of a window.
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
#include <unistd.h>

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

/* 8 x 8 floats in AVX registers (both builds' panels are a multiple of 8 wide). */
typedef float v8_t __attribute__((vector_size(32)));
typedef int v8i_t __attribute__((vector_size(32)));

/* dst[q * ldd + r] = src[r * lds + q] for r, q < 8: the usual three rounds of
 * shuffles (32-bit pairs, 64-bit pairs, 128-bit halves), which GCC emits as
 * unpck/shufps/vperm2f128. */
static inline void
transpose8(const float *src, size_t lds, float *dst, size_t ldd)
{
    v8_t r[8], t[8], u[8];

    for (int i = 0; i < 8; i++)
        memcpy(&r[i], src + (size_t)i * lds, sizeof r[i]);
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], (v8i_t){0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (v8i_t){2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            u[i + 2 * h] =
                __builtin_shuffle(t[i + h], t[i + h + 2], (v8i_t){0, 1, 8, 9, 4, 5, 12, 13});
            u[i + 2 * h + 1] =
                __builtin_shuffle(t[i + h], t[i + h + 2], (v8i_t){2, 3, 10, 11, 6, 7, 14, 15});
        }
    for (int q = 0; q < 4; q++) {
        v8_t lo = __builtin_shuffle(u[q], u[q + 4], (v8i_t){0, 1, 2, 3, 8, 9, 10, 11});
        v8_t hi = __builtin_shuffle(u[q], u[q + 4], (v8i_t){4, 5, 6, 7, 12, 13, 14, 15});

        memcpy(dst + (size_t)q * ldd, &lo, sizeof lo);
        memcpy(dst + (size_t)(q + 4) * ldd, &hi, sizeof hi);
    }
}

/* Panel p, row kk holds op(B)[kk][p NR .. p NR + NR). Without trans_b, B is read row
 * by row, in order, each row's runs of NR floats going to their panels (a panel at a
 * time, B would be read down its columns, a cache line per row). With trans_b, B is
 * (n, k) and a panel gathers NR of its rows: copied a block of KB k-values at a time,
 * so that the NR panel rows being written stay in L1 while B's rows are read in
 * order; a full panel's block goes 8 x 8 at a time through transpose8, 1.4-2.5x
 * faster than element by element (the word model's W_out^T, 10 MB: 1.1-1.3 ms to 0.8,
 * from cache, v3 and v4 builds). */
void
sl_cpu_pack_b(void *ctx, int trans_b, int k, int n, const float *b, int ldb, float *packed)
{
    enum { KB = 16 };
    const size_t ld = (size_t)ldb, np = panels(n);

    (void)ctx;
    if (k <= 0 || n <= 0)
        return;
    if (!trans_b) {
        size_t full = (size_t)n / NR, rest = (size_t)n - full * NR;

        for (size_t kk = 0; kk < (size_t)k; kk++) {
            const float *restrict src = b + kk * ld;
            float *restrict dst = packed + kk * NR;

            for (size_t p = 0; p < full; p++) /* a constant size: vector moves */
                memcpy(dst + p * NR * (size_t)k, src + p * NR, NR * sizeof(float));
            if (rest) {
                memcpy(dst + full * NR * (size_t)k, src + full * NR, rest * sizeof(float));
                memset(dst + full * NR * (size_t)k + rest, 0, (NR - rest) * sizeof(float));
            }
        }
        return;
    }
    for (size_t p = 0; p < np; p++) {
        float *restrict dst = packed + p * NR * (size_t)k;
        size_t j0 = p * NR, cols = (size_t)n - j0 < NR ? (size_t)n - j0 : NR;

        for (size_t k0 = 0; k0 < (size_t)k; k0 += KB) {
            size_t kn = (size_t)k - k0 < KB ? (size_t)k - k0 : KB;

            if (cols == NR && kn == KB) {
                for (size_t j = 0; j < NR; j += 8)
                    for (size_t q = 0; q < KB; q += 8)
                        transpose8(b + (j0 + j) * ld + k0 + q, ld, dst + (k0 + q) * NR + j, NR);
                continue;
            }
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

/* Rows of the panel ahead of the one being multiplied whose cache lines tile() asks
 * for: the panel streams from L2 (or further: a group of panels_tall, a whole panel of
 * panels_short), and the hardware prefetchers alone left the FMAs waiting for it. 16
 * rows (1 kB ahead for AVX2, 2 kB for AVX-512): each product of the three models 1-6%
 * faster with the v3 build and 1-16% with v4 (bench_cpu_loops' shapes, Intel Xeon
 * family 6 model 167); 4 and 8 rows ahead gained less. */
enum { PREFETCH_ROWS = 16, LINE_FLOATS = 64 / (int)sizeof(float) };

/* C (mr, NR) = op(A) (mr, k) P (k, NR) + (load_c ? C : 0), A's element (i, kk) at
 * a[i sa + kk sk]; mr <= MR and the strides' 1 are constants where inlined, so that
 * the accumulators are registers and the broadcasts single instructions. The loop
 * over k goes four steps a trip: its counter, compare and pointer steps, beside each
 * step's MR broadcasts, NV loads, MR NV FMAs and a prefetch, kept AVX2's two FMA ports
 * below full; unrolled, each product of the three models 1-7% faster with the v3 build
 * and 0-7% with v4 on an Intel Xeon (within the noise on an AMD Zen 4, where an earlier
 * trial found no gain); the same sums in the same order. */
static inline __attribute__((always_inline)) void
tile(const int mr, int load_c, int k, const float *restrict a, size_t sa, size_t sk,
     const float *restrict p, float *restrict c, size_t ldc)
{
    vec_t acc[MR][NV];

#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < NV; v++)
            acc[i][v] = load_c ? vload(c + (size_t)i * ldc + (size_t)v * VW) : (vec_t){0};
#pragma GCC unroll 4
    for (int kk = 0; kk < k; kk++) {
        vec_t bv[NV];

        /* past the panel's end: the next panel's first rows, or nothing (no fault) */
        for (int l = 0; l < NR; l += LINE_FLOATS)
            __builtin_prefetch(p + (size_t)(kk + PREFETCH_ROWS) * NR + (size_t)l, 0, 3);
        for (int v = 0; v < NV; v++)
            bv[v] = vload(p + (size_t)kk * NR + (size_t)v * VW);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            vec_t av = splat(a[(size_t)i * sa + (size_t)kk * sk]);

            for (int v = 0; v < NV; v++)
                acc[i][v] += av * bv[v];
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < NV; v++)
            vstore(c + (size_t)i * ldc + (size_t)v * VW, acc[i][v]);
}

/* tile() for mr <= MR rows known only at run time. */
static inline __attribute__((always_inline)) void
tile_rows(int mr, int load_c, int k, const float *a, size_t sa, size_t sk, const float *p, float *c,
          size_t ldc)
{
    switch (mr) {
    case MR:
        tile(MR, load_c, k, a, sa, sk, p, c, ldc);
        break;
#if MR > 6
    case 7:
        tile(7, load_c, k, a, sa, sk, p, c, ldc);
        break;
    case 6:
        tile(6, load_c, k, a, sa, sk, p, c, ldc);
        break;
#endif
    case 5:
        tile(5, load_c, k, a, sa, sk, p, c, ldc);
        break;
    case 4:
        tile(4, load_c, k, a, sa, sk, p, c, ldc);
        break;
    case 3:
        tile(3, load_c, k, a, sa, sk, p, c, ldc);
        break;
    case 2:
        tile(2, load_c, k, a, sa, sk, p, c, ldc);
        break;
    case 1:
        tile(1, load_c, k, a, sa, sk, p, c, ldc);
        break;
    default:
        break;
    }
}

typedef struct {
    int trans_a, m, n, k, load_c; /* load_c: beta 1 */
    const float *a, *packed;
    float *c;
    size_t lda, ldc;
    size_t group_bytes; /* panels_tall: packed B walked by all of A at a time */
} gemm_args_t;

/* C's rows [i, i + mr) x panel p += op(A)'s rows there (at a, strides sa, sk) x the
 * panel's rows [k0, k0 + kn), or = with beta 0 in the first block of k. A panel
 * narrower than NR runs on a copy of its columns of C, padded with zeros that are
 * never written back. */
static inline __attribute__((always_inline)) void
rows_x_panel(const gemm_args_t *g, int i, int mr, size_t k0, int kn, size_t p, const float *a,
             size_t sa, size_t sk)
{
    const float *pp = g->packed + (p * (size_t)g->k + k0) * NR;
    size_t j0 = p * NR, cols = (size_t)g->n - j0;
    float *c = g->c + (size_t)i * g->ldc + j0;
    float part[MR * NR] = {0};
    int load_c = g->load_c || k0 > 0;

    if (cols >= NR) {
        tile_rows(mr, load_c, kn, a, sa, sk, pp, c, g->ldc);
        return;
    }
    for (int r = 0; r < mr && load_c; r++)
        memcpy(part + r * NR, c + (size_t)r * g->ldc, cols * sizeof(float));
    tile_rows(mr, load_c, kn, a, sa, sk, pp, part, NR);
    for (int r = 0; r < mr; r++)
        memcpy(c + (size_t)r * g->ldc, part + r * NR, cols * sizeof(float));
}

/* Rows of tile t when m rows go in tiles of at most MR: as even as possible, so that
 * no tile is left with a row or two (32 rows in tiles of 6: 6 6 5 5 5 5, not 6 6 6 6 6
 * 2, whose two rows keep only 4 accumulators busy, too few to hide the FMA latency). */
static int
tile_height(int m, int tiles, int t)
{
    return m / tiles + (t < m % tiles);
}

/* A short op(A) stored by rows (the recurrent products, m = B): panel by panel, each
 * panel read from memory once for all of A's tiles, A (m x k) staying in L2. */
static void
panels_short(const gemm_args_t *g, size_t lo, size_t hi)
{
    int tiles = (g->m + MR - 1) / MR;

    for (size_t p = lo; p < hi; p++)
        for (int t = 0, i = 0; t < tiles; t++) {
            int mr = tile_height(g->m, tiles, t);

            rows_x_panel(g, i, mr, 0, g->k, p, g->a + (size_t)i * g->lda, g->lda, 1);
            i += mr;
        }
}

/* A tall or transposed op(A) (the weight gradients, dY^T: m = 4H rows at a stride of 4H
 * floats; the products over a window's rows). k goes in blocks of KC, so that a tile's
 * MR rows x KC block of op(A) stays in L1 for every panel, whose KC rows come from L2.
 * Stored by rows, op(A) is read in place (MR runs of KC floats), the panels a group at
 * a time (panel_group_bytes); transposed, read in place it would thrash the caches
 * (its power-of-2 strides fall into a few sets), so the block is first copied into
 * apack (k-major, contiguous), a tile's row of MR floats in one move. */
enum { KC = 256, SHORT_M = 64 };

/* How much of the packed op(B) panels_tall takes all of op(A)'s tiles through before
 * the next: a quarter of the core's L2 (of 1 MiB when the system does not say), so that
 * those panels stay there while op(A) streams past. Without it a wide op(B), the word
 * model's W_out^T (10 MB packed), came again from L3 or memory for every tile of 8
 * rows: on a core with 2 MiB of L2 and a slower L3 the logits product (838 x 10002 x
 * 256) ran at 0.6x OpenBLAS's speed, in groups at 0.95x. The sums are the same. */
static size_t
panel_group_bytes(void)
{
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);

    return (l2 > 0 ? (size_t)l2 : (size_t)1 << 20) / 4;
}

/* The rows of C that the next tile of MR rows reads and writes at panel p, asked for
 * while this tile runs, from panels_tall (tile by tile, each through the panels): a
 * tall C (dW_out, 10002 x 256, 10 MB) comes from memory a tile at a time, and its
 * first loads left the FMAs waiting. The A/B harness of PREFETCH_ROWS: dW_out 6-15%
 * faster with the v3 and v4 builds, every other product the same or up to 4% faster. */
static inline __attribute__((always_inline)) void
prefetch_next_c(const gemm_args_t *g, int i, size_t p)
{
    int next = i + MR;
    const float *c;

    if (next >= g->m)
        return;
    c = g->c + (size_t)next * g->ldc + p * NR;
    for (int r = 0; r < MR && next + r < g->m; r++)
        for (int l = 0; l < NR; l += LINE_FLOATS)
            __builtin_prefetch(c + (size_t)r * g->ldc + (size_t)l, 1, 3);
}

static void
panels_tall(const gemm_args_t *g, size_t lo, size_t hi)
{
    const size_t sa = g->trans_a ? 1 : g->lda, sk = g->trans_a ? g->lda : 1;
    float apack[KC * MR];

    for (size_t k0 = 0; k0 < (size_t)g->k; k0 += KC) {
        int kn = (int)((size_t)g->k - k0 < KC ? (size_t)g->k - k0 : KC);

        if (!g->trans_a) {
            size_t group = g->group_bytes / ((size_t)kn * NR * sizeof(float));

            if (group < 1)
                group = 1;
            for (size_t p0 = lo; p0 < hi; p0 += group) {
                size_t p1 = hi - p0 < group ? hi : p0 + group;

                for (int i = 0; i < g->m; i += MR) {
                    int mr = g->m - i < MR ? g->m - i : MR;

                    for (size_t p = p0; p < p1; p++) {
                        prefetch_next_c(g, i, p);
                        rows_x_panel(g, i, mr, k0, kn, p, g->a + k0 + (size_t)i * sa, sa, 1);
                    }
                }
            }
            continue;
        }
        for (int i = 0; i < g->m; i += MR) {
            int mr = g->m - i < MR ? g->m - i : MR;
            const float *a = g->a + k0 * sk + (size_t)i * sa;

            if (mr == MR)
                for (int kk = 0; kk < kn; kk++)
                    memcpy(apack + kk * MR, a + (size_t)kk * sk, MR * sizeof(float));
            else
                for (int kk = 0; kk < kn; kk++)
                    for (int r = 0; r < mr; r++)
                        apack[kk * MR + r] = a[(size_t)kk * sk + (size_t)r * sa];
            for (size_t p = lo; p < hi; p++) {
                prefetch_next_c(g, i, p);
                rows_x_panel(g, i, mr, k0, kn, p, apack, 1, MR);
            }
        }
    }
}

static double
gemm_panels(const void *argp, size_t lo, size_t hi)
{
    const gemm_args_t *g = argp;

    if (g->trans_a || g->m > SHORT_M)
        panels_tall(g, lo, hi);
    else
        panels_short(g, lo, hi);
    return 0;
}

void
sl_cpu_gemm_packed(void *ctx, int trans_a, int m, int n, int k, const float *a, int lda,
                   const float *packed, float beta, float *c, int ldc)
{
    gemm_args_t g = {.trans_a = trans_a,
                     .load_c = beta != 0.0f,
                     .m = m,
                     .n = n,
                     .k = k,
                     .a = a,
                     .packed = packed,
                     .c = c,
                     .lda = (size_t)lda,
                     .ldc = (size_t)ldc,
                     .group_bytes = panel_group_bytes()};

    SL_ASSERT(m >= 0 && n >= 0 && k >= 0 && lda >= (trans_a ? m : k) && lda >= 1 && ldc >= n);
    SL_ASSERT(beta == 0.0f || beta == 1.0f);
    if (k == 0 && beta == 0.0f)
        for (int i = 0; i < m; i++)
            memset(c + (size_t)i * (size_t)ldc, 0, (size_t)n * sizeof(float));
    if (m == 0 || n == 0 || k == 0)
        return;
    sl_cpu_par_range(ctx, panels(n), (size_t)m * (size_t)n * (size_t)k, SL_CPU_PAR_MIN_GEMM,
                     gemm_panels, &g);
}

#endif /* SL_CPU_GEMM_PACKED */
