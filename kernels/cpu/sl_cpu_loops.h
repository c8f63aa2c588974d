/* Internal to kernels/cpu/: what the CPU backend's files share. sl_cpu.c (context,
 * threads, memory, gemm, the ops table) and the fused loops in sl_cpu_softmax.c,
 * sl_cpu_lstm.c, sl_cpu_embed.c, sl_cpu_elem.c and sl_cpu_gemm.c: the optimisation
 * pragma and the per-level names that every loop file is built with, the backend
 * context and the split of a loop over its worker threads, the branch-free maths the
 * loops vectorise with, and the ops each loop file implements (contracts in
 * kernels/sl_backend.h).
 *
 * Include it after every other header: the pragma applies to all that follows it in
 * the including file, and the headers before it (sl_half.h, sl_rng.h) keep the
 * compiler's own options, as they had when this was one file. */
#ifndef SL_CPU_LOOPS_H
#define SL_CPU_LOOPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/sl_cpu_pool.h"
#include "kernels/sl_backend.h"

/* The fused loops need the vectoriser with a cost model that accepts loop epilogues
 * (-O3; gcc's -O2 model refuses most of them), FMA contraction (ISO C mode turns it
 * off), and no FP-trap semantics (which forbid computing both arms of a select, as
 * tanh and the clamps in exp do). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=fast", "no-trapping-math")
#endif

/* The loop files are compiled once per x86-64 level with -DSL_CPU_ISA=base, v3 or v4
 * (kernels/Makemodule.am; without it: one build for the compiler's target, "native").
 * Every op they export is renamed with that suffix here, sl_cpu_axpy becoming
 * sl_cpu_axpy_v4, so the builds link side by side; each build's ops are reached only
 * through its table, sl_cpu_loops_<level> (sl_cpu_table.c), which sl_cpu_isa.c picks. */
#ifndef SL_CPU_ISA
#define SL_CPU_ISA native
#endif
#define SL_CPU_CAT_(a, b) a##_##b
#define SL_CPU_CAT(a, b) SL_CPU_CAT_(a, b)
#define SL_CPU_ISA_NAME(f) SL_CPU_CAT(f, SL_CPU_ISA)

#define sl_cpu_softmax_xent SL_CPU_ISA_NAME(sl_cpu_softmax_xent)
#define sl_cpu_sampled_softmax_xent SL_CPU_ISA_NAME(sl_cpu_sampled_softmax_xent)
#define sl_cpu_lstm_cell_forward SL_CPU_ISA_NAME(sl_cpu_lstm_cell_forward)
#define sl_cpu_lstm_cell_backward SL_CPU_ISA_NAME(sl_cpu_lstm_cell_backward)
#define sl_cpu_embedding_gather SL_CPU_ISA_NAME(sl_cpu_embedding_gather)
#define sl_cpu_embedding_scatter_add SL_CPU_ISA_NAME(sl_cpu_embedding_scatter_add)
#define sl_cpu_axpy SL_CPU_ISA_NAME(sl_cpu_axpy)
#define sl_cpu_scale SL_CPU_ISA_NAME(sl_cpu_scale)
#define sl_cpu_copy SL_CPU_ISA_NAME(sl_cpu_copy)
#define sl_cpu_zero SL_CPU_ISA_NAME(sl_cpu_zero)
#define sl_cpu_sumsq SL_CPU_ISA_NAME(sl_cpu_sumsq)
#define sl_cpu_sumsq_blocks SL_CPU_ISA_NAME(sl_cpu_sumsq_blocks)
#define sl_cpu_add_bias SL_CPU_ISA_NAME(sl_cpu_add_bias)
#define sl_cpu_bias_grad SL_CPU_ISA_NAME(sl_cpu_bias_grad)
#define sl_cpu_to_half SL_CPU_ISA_NAME(sl_cpu_to_half)
#define sl_cpu_from_half SL_CPU_ISA_NAME(sl_cpu_from_half)
#define sl_cpu_dropout SL_CPU_ISA_NAME(sl_cpu_dropout)
#define sl_cpu_sgd_update SL_CPU_ISA_NAME(sl_cpu_sgd_update)
#define sl_cpu_adagrad_update SL_CPU_ISA_NAME(sl_cpu_adagrad_update)
#define sl_cpu_adam_update SL_CPU_ISA_NAME(sl_cpu_adam_update)
#define sl_cpu_packed_floats SL_CPU_ISA_NAME(sl_cpu_packed_floats)
#define sl_cpu_pack_b SL_CPU_ISA_NAME(sl_cpu_pack_b)
#define sl_cpu_gemm_packed SL_CPU_ISA_NAME(sl_cpu_gemm_packed)

/* The packed gemm (sl_cpu_gemm.c) only where it beats the BLAS's gemm: with FMA, the v3
 * and v4 builds (bench/bench_cpu_loops: without it, in the baseline build, it took 1.6-6x
 * OpenBLAS's time). Elsewhere the table's entries stay NULL and callers use gemm. */
#if defined(__FMA__)
#define SL_CPU_GEMM_PACKED 1
#endif

/* Work (elements) below which a loop stays on the calling thread, where waking a
 * second one (tens of us) would not pay: */
enum {
    SL_CPU_PAR_MIN_FUSED = 65536,    /* exp, sqrt or RNG per element: ~50 us on one core */
    SL_CPU_PAR_MIN_STREAM = 1 << 20, /* a load, an add and a store: memory-bound, ~300 us */
    SL_CPU_PAR_MIN_GEMM = 1 << 22    /* multiply-adds of gemm_packed: ~30 us */
};

typedef struct {
    int threads;            /* for OpenBLAS and the fused loops, >= 1 */
    sl_cpu_pool_t *pool;    /* threads - 1 sleeping workers; NULL: loops stay serial */
    char desc[320];         /* what describe() returns */
    const char *loops_desc; /* the build of the loops in ops ("x86-64-v4 (AVX-512)") */
    sl_backend_ops_t ops;   /* the backend's table: sl_cpu.c's entries and those loops */
} sl_cpu_t;

/* Runs fn over [0, n) on the backend's threads when work (elements touched) reaches
 * min_work: contiguous ranges, one per thread, partial sums added in thread order so a
 * given thread count always gives the same bits. Kernels with fewer rows than threads
 * see empty ranges, which they treat as no work. */
static inline double
sl_cpu_par_range(const sl_cpu_t *cpu, size_t n, size_t work, size_t min_work, sl_cpu_range_fn fn,
                 const void *args)
{
    if (cpu->pool && n > 1 && work >= min_work)
        return sl_cpu_pool_run(cpu->pool, n, fn, args);
    return fn(args, 0, n);
}

/* ---- vectorisable maths ------------------------------------------------------------ */

/* exp(x): Cephes' expf polynomial on r = x - n ln2, with 2^n written into the exponent
 * bits. Branch-free so that the loops around it vectorise; relative error below 9e-8
 * on [-87, 88] (measured over every float there, with and without FMA; sigmoid and
 * tanh below 1.5e-7). Inputs are clamped to that range: exp(-87) = 1.6e-38 stands in
 * for anything smaller (it only ever meets sums >= 1 or 1 + e, where it vanishes) and
 * exp(88) = 1.65e38 for anything larger. */
static inline float
sl_cpu_fast_expf(float x)
{
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    union {
        float f;
        uint32_t u;
    } t, scale;
    float n, r, p;

    x = x < -87.0f ? -87.0f : x; /* NaN passes through both */
    x = x > 88.0f ? 88.0f : x;
    t.f = x * 1.44269504088896341f + shift;
    n = t.f - shift;
    r = x - n * 0.693359375f; /* ln 2 in two parts, the first exact */
    r = r - n * -2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    scale.u = (t.u - 0x4b400000u + 127u) << 23; /* low bits of t hold n */
    return p * scale.f;
}

static inline float
sl_cpu_fast_sigmoidf(float x)
{
    return 1.0f / (1.0f + sl_cpu_fast_expf(-x));
}

/* tanh(x): Cephes' odd polynomial for |x| < 0.625, where 1 - 2/(e^2x + 1) would lose
 * relative precision, and that formula elsewhere; both computed, one selected. */
static inline float
sl_cpu_fast_tanhf(float x)
{
    float a = x < 0.0f ? -x : x;
    float z = x * x;
    float small, big;

    small = -5.70498872745e-3f;
    small = small * z + 2.06390887954e-2f;
    small = small * z - 5.37397155531e-2f;
    small = small * z + 1.33314422036e-1f;
    small = small * z - 3.33332819422e-1f;
    small = small * z * x + x;
    big = 1.0f - 2.0f / (sl_cpu_fast_expf(2.0f * a) + 1.0f);
    big = x < 0.0f ? -big : big;
    return a < 0.625f ? small : big;
}

/* sqrt(x) for x >= 0 without libm: gcc keeps sqrtf's errno check (a branch that stops
 * vectorisation) even under optimize("no-math-errno"), which it does not apply to
 * builtins. Reciprocal-sqrt bit estimate, three Newton steps, one Heron correction on
 * the residual; tiny (and denormal) x are scaled by 2^100 first. Equal to sqrtf on
 * every non-negative float with FMA (checked exhaustively), within 1 ulp without. */
static inline float
sl_cpu_fast_sqrtf(float x)
{
    union {
        float f;
        uint32_t u;
    } r;
    float y;
    int tiny = x < 0x1p-100f;

    x = tiny ? x * 0x1p100f : x;
    r.f = x;
    r.u = 0x5f375a86u - (r.u >> 1);
    r.f = r.f * (1.5f - 0.5f * x * r.f * r.f);
    r.f = r.f * (1.5f - 0.5f * x * r.f * r.f);
    r.f = r.f * (1.5f - 0.5f * x * r.f * r.f);
    y = x * r.f;
    y = y + 0.5f * r.f * (x - y * y);
    return tiny ? y * 0x1p-50f : y;
}

/* Reductions over floats vectorise only with licence to reorder them, which
 * `omp simd reduction` gives loop by loop (-ffast-math would give it everywhere). The
 * order then depends on the vector width, so sums may differ in the last bits between
 * the AVX-512, AVX2 and baseline builds; a max is exact either way. Without OpenMP
 * these loops stay scalar, and with clang too (it cannot vectorise them and warns). */
#if defined(SL_HAVE_OMP_SIMD) && !defined(__clang__)
#define SL_CPU_PRAGMA(x) _Pragma(#x)
#define SL_CPU_SIMD_REDUCE(op, var) SL_CPU_PRAGMA(omp simd reduction(op : var))
#else
#define SL_CPU_SIMD_REDUCE(op, var)
#endif

/* Max of x[0..n), n >= 1. */
static inline float
sl_cpu_vec_max(const float *x, int n)
{
    float m = x[0];

    SL_CPU_SIMD_REDUCE(max, m)
    for (int j = 1; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static inline float
sl_cpu_vec_sum(const float *x, int n)
{
    float s = 0;

    SL_CPU_SIMD_REDUCE(+, s)
    for (int j = 0; j < n; j++)
        s += x[j];
    return s;
}

/* Sum of exp(x[j] - m); with store != 0 each x[j] is replaced by its exp. */
static inline float
sl_cpu_vec_exp_sum(float *x, int n, float m, int store)
{
    float s = 0;

    if (store) {
        SL_CPU_SIMD_REDUCE(+, s)
        for (int j = 0; j < n; j++) {
            float e = sl_cpu_fast_expf(x[j] - m);

            x[j] = e;
            s += e;
        }
    } else {
        SL_CPU_SIMD_REDUCE(+, s)
        for (int j = 0; j < n; j++)
            s += sl_cpu_fast_expf(x[j] - m);
    }
    return s;
}

/* The ops in sl_cpu_softmax.c, sl_cpu_lstm.c, sl_cpu_embed.c, sl_cpu_elem.c and
 * sl_cpu_gemm.c (names suffixed by level, above); ctx is the backend's sl_cpu_t. */
void sl_cpu_softmax_xent(void *ctx, int n, int v, float *logits, int ld, const float *bias,
                         const int32_t *targets, float grad_scale, double *loss_sum);
void sl_cpu_sampled_softmax_xent(void *ctx, int n, int s, float *logits, const int32_t *targets,
                                 const int32_t *samples, const float *logq_true,
                                 const float *logq_samp, float grad_scale, double *loss_sum);
void sl_cpu_lstm_cell_forward(void *ctx, int b, int h, float *gates, const float *c_prev, float *c,
                              float *m);
void sl_cpu_lstm_cell_backward(void *ctx, int b, int h, const float *gates, const float *c_prev,
                               const float *c, const float *dm, float *dc, float *dgates);
void sl_cpu_embedding_gather(void *ctx, int n, int d, const float *table, const int32_t *ids,
                             float *out);
void sl_cpu_embedding_scatter_add(void *ctx, int nrows, int d, const int32_t *rows,
                                  const int32_t *off, const int32_t *pos, const float *src,
                                  float *grad);
void sl_cpu_axpy(void *ctx, size_t n, float alpha, const float *x, float *y);
void sl_cpu_scale(void *ctx, size_t n, float alpha, float *x);
void sl_cpu_copy(void *ctx, size_t n, const float *src, float *dst);
void sl_cpu_zero(void *ctx, size_t n, float *x);
double sl_cpu_sumsq(void *ctx, size_t n, const float *x);
void sl_cpu_sumsq_blocks(void *ctx, size_t n, const float *x, const size_t *blocks, size_t nblocks,
                         double *out);
void sl_cpu_add_bias(void *ctx, int rows, int cols, const float *bias, float *x);
void sl_cpu_bias_grad(void *ctx, int rows, int cols, const float *dx, float *db);
void sl_cpu_to_half(void *ctx, size_t n, sl_precision_t fmt, float scale, const float *src,
                    uint16_t *dst);
void sl_cpu_from_half(void *ctx, size_t n, sl_precision_t fmt, float inv_scale, const uint16_t *src,
                      float *dst);
void sl_cpu_dropout(void *ctx, size_t n, float p, uint64_t key, float *x);
void sl_cpu_sgd_update(void *ctx, size_t n, float lr, const float *g, float *w);
void sl_cpu_adagrad_update(void *ctx, size_t n, float lr, float eps, const float *g, float *acc,
                           float *w);
void sl_cpu_adam_update(void *ctx, size_t n, float lr, float b1, float b2, float eps, long t,
                        const float *g, float *m, float *v, float *w);
size_t sl_cpu_packed_floats(void *ctx, int k, int n);
void sl_cpu_pack_b(void *ctx, int trans_b, int k, int n, const float *b, int ldb, float *packed);
void sl_cpu_gemm_packed(void *ctx, int trans_a, int m, int n, int k, const float *a, int lda,
                        const float *packed, float beta, float *c, int ldc);

/* This build's ops as a backend table with only the loop entries set (sl_cpu_table.c);
 * sl_cpu.c fills in the rest. */
extern const sl_backend_ops_t SL_CPU_ISA_NAME(sl_cpu_loops);

#endif
