/* The CPU backend: CBLAS (OpenBLAS) for gemm; the fused loops (softmax, LSTM cell,
 * embeddings, dropout, optimizers) in C with a branch-free polynomial exp so that they
 * vectorise, built for AVX2+FMA beside a generic x86-64 version (chosen at load time),
 * and split over the backend's worker threads (sl_cpu_pool.h) when large; fp16/bf16
 * conversion through sl_half.h. fp32 only. The reference the other backends are
 * checked against. Host memory is device memory here. */
#include "config.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "common/sl_alloc.h"
#include "common/sl_half.h"
#include "common/sl_rng.h"
#include "kernels/cpu/sl_cpu_pool.h"
#include "kernels/sl_backend.h"

/* The fused loops need the vectoriser with a cost model that accepts loop epilogues
 * (-O3; gcc's -O2 model refuses most of them), FMA contraction (ISO C mode turns it
 * off), and no FP-trap semantics (which forbid computing both arms of a select, as
 * tanh and the clamps in exp do). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=fast", "no-trapping-math")
#endif

/* HOT marks the loop kernels: with gcc 12+ on x86-64 glibc each is compiled twice, for
 * x86-64-v3 (AVX2, FMA) and for the baseline, and the loader picks one (ifunc, by
 * CPU features). Elsewhere the loops are built for the compiler's target only. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 &&           \
    defined(__GLIBC__)
#define HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#define HOT_CLONES 1
#else
#define HOT
#endif

enum {
    /* Work (elements) below which a loop stays on the calling thread, where waking a
     * second one (tens of us) would not pay: */
    PAR_MIN_FUSED = 65536,    /* exp, sqrt or RNG per element: ~50 us on one core */
    PAR_MIN_STREAM = 1 << 20, /* a load, an add and a store: memory-bound, ~300 us */
    MAX_THREADS = 256,
    BIAS_BLOCK = 256 /* columns of a bias gradient summed at once (a 2 kB stack block) */
};

typedef struct {
    int threads;         /* for OpenBLAS and the fused loops, >= 1 */
    sl_cpu_pool_t *pool; /* threads - 1 sleeping workers; NULL: loops stay serial */
    char desc[320];      /* what describe() returns */
} cpu_t;

typedef sl_cpu_range_fn range_fn;

/* Runs fn over [0, n) on the backend's threads when work (elements touched) reaches
 * min_work: contiguous ranges, one per thread, partial sums added in thread order so a
 * given thread count always gives the same bits. Kernels with fewer rows than threads
 * see empty ranges, which they treat as no work. */
static double
par_range(const cpu_t *cpu, size_t n, size_t work, size_t min_work, range_fn fn, const void *args)
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
fast_expf(float x)
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
fast_sigmoidf(float x)
{
    return 1.0f / (1.0f + fast_expf(-x));
}

/* tanh(x): Cephes' odd polynomial for |x| < 0.625, where 1 - 2/(e^2x + 1) would lose
 * relative precision, and that formula elsewhere; both computed, one selected. */
static inline float
fast_tanhf(float x)
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
    big = 1.0f - 2.0f / (fast_expf(2.0f * a) + 1.0f);
    big = x < 0.0f ? -big : big;
    return a < 0.625f ? small : big;
}

/* sqrt(x) for x >= 0 without libm: gcc keeps sqrtf's errno check (a branch that stops
 * vectorisation) even under optimize("no-math-errno"), which it does not apply to
 * builtins. Reciprocal-sqrt bit estimate, three Newton steps, one Heron correction on
 * the residual; tiny (and denormal) x are scaled by 2^100 first. Equal to sqrtf on
 * every non-negative float with FMA (checked exhaustively), within 1 ulp without. */
static inline float
fast_sqrtf(float x)
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
 * the AVX2 and baseline builds; a max is exact either way. Without OpenMP these loops
 * stay scalar, and with clang too (it cannot vectorise them and warns). */
#if defined(SL_HAVE_OMP_SIMD) && !defined(__clang__)
#define PRAGMA(x) _Pragma(#x)
#define SIMD_REDUCE(op, var) PRAGMA(omp simd reduction(op : var))
#else
#define SIMD_REDUCE(op, var)
#endif

/* Max of x[0..n), n >= 1. */
static inline float
vec_max(const float *x, int n)
{
    float m = x[0];

    SIMD_REDUCE(max, m)
    for (int j = 1; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static inline float
vec_sum(const float *x, int n)
{
    float s = 0;

    SIMD_REDUCE(+, s)
    for (int j = 0; j < n; j++)
        s += x[j];
    return s;
}

/* Sum of exp(x[j] - m); with store != 0 each x[j] is replaced by its exp. */
static inline float
vec_exp_sum(float *x, int n, float m, int store)
{
    float s = 0;

    if (store) {
        SIMD_REDUCE(+, s)
        for (int j = 0; j < n; j++) {
            float e = fast_expf(x[j] - m);

            x[j] = e;
            s += e;
        }
    } else {
        SIMD_REDUCE(+, s)
        for (int j = 0; j < n; j++)
            s += fast_expf(x[j] - m);
    }
    return s;
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

typedef struct {
    int v, ld;
    float *logits;
    const int32_t *targets;
    float grad_scale;
} xent_args_t;

/* Rows [lo, hi) of the full softmax: one pass for the max, one for exp (stored when a
 * gradient is wanted) and its sum, one to scale. The row (40 kB at v = 10k) stays in
 * cache between passes. Returns the rows' loss sum in double. */
HOT static double
xent_rows(const void *argp, size_t lo, size_t hi)
{
    const xent_args_t *a = argp;
    const int v = a->v;
    const float gs = a->grad_scale;
    double loss = 0;

    for (size_t r = lo; r < hi; r++) {
        float *x = a->logits + r * (size_t)a->ld;
        int32_t t = a->targets[r];
        float xt, m, s, k;

        SL_ASSERT(t >= 0 && t < v); /* the vocabulary's ids, checked when loaded */
        xt = x[t];
        m = vec_max(x, v);
        s = vec_exp_sum(x, v, m, gs != 0.0f);
        loss += log((double)s) + (double)m - (double)xt;
        if (gs == 0.0f)
            continue;
        k = gs / s;
        for (int j = 0; j < v; j++)
            x[j] *= k;
        x[t] -= gs;
    }
    return loss;
}

static void
cpu_softmax_xent(void *ctx, int n, int v, float *logits, int ld, const int32_t *targets,
                 float grad_scale, double *loss_sum)
{
    xent_args_t a = {v, ld, logits, targets, grad_scale};

    *loss_sum = n > 0 && v > 0
                    ? par_range(ctx, (size_t)n, (size_t)n * (size_t)v, PAR_MIN_FUSED, xent_rows, &a)
                    : 0.0;
}

typedef struct {
    int s;
    float *logits;
    const int32_t *targets, *samples;
    const float *logq_true, *logq_samp;
    float grad_scale;
} sampled_args_t;

/* Rows [lo, hi) of the sampled softmax. Column 0 is the label; accidental hits get
 * -inf in place and exactly 0 probability (fast_expf would clamp -inf to 1.6e-38). */
HOT static double
sampled_rows(const void *argp, size_t lo, size_t hi)
{
    const sampled_args_t *a = argp;
    const int s = a->s, w = s + 1;
    const int32_t *samples = a->samples;
    const float *logq = a->logq_samp;
    const float gs = a->grad_scale;
    double loss = 0;

    for (size_t r = lo; r < hi; r++) {
        float *x = a->logits + r * (size_t)w, *xs = x + 1;
        int32_t t = a->targets[r];
        float x0, m, sum, k;

        x0 = x[0] - a->logq_true[r];
        x[0] = x0;
        for (int j = 0; j < s; j++) {
            float adj = xs[j] - logq[j]; /* unconditional loads keep this a vector select */

            xs[j] = samples[j] == t ? -INFINITY : adj;
        }
        m = vec_max(x, w);
        /* masked entries add exp(-87) each to a sum >= 1, lost in rounding; with a
         * gradient they are zeroed before the sum */
        if (gs == 0.0f) {
            sum = vec_exp_sum(x, w, m, 0);
            loss += log((double)sum) + (double)m - (double)x0;
            continue;
        }
        x[0] = fast_expf(x0 - m);
        for (int j = 0; j < s; j++) {
            float e = fast_expf(xs[j] - m);

            xs[j] = samples[j] == t ? 0.0f : e;
        }
        sum = vec_sum(x, w);
        loss += log((double)sum) + (double)m - (double)x0;
        k = gs / sum;
        for (int j = 0; j < w; j++)
            x[j] *= k;
        x[0] -= gs;
    }
    return loss;
}

static void
cpu_sampled_softmax_xent(void *ctx, int n, int s, float *logits, const int32_t *targets,
                         const int32_t *samples, const float *logq_true, const float *logq_samp,
                         float grad_scale, double *loss_sum)
{
    sampled_args_t a = {s, logits, targets, samples, logq_true, logq_samp, grad_scale};

    *loss_sum = n > 0 && s >= 0 ? par_range(ctx, (size_t)n, (size_t)n * (size_t)(s + 1),
                                            PAR_MIN_FUSED, sampled_rows, &a)
                                : 0.0;
}

/* ---- LSTM cell --------------------------------------------------------------------- */

typedef struct {
    int h;
    float *gates;                 /* (b, 4h) forward: pre-activations in, activations out */
    const float *acts;            /* (b, 4h) backward: the activations */
    const float *c_prev, *c, *dm; /* (b, h) */
    float *c_out, *m, *dc;        /* (b, h) */
    float *dgates;                /* (b, 4h) */
} lstm_args_t;

/* One row of the cell forward, gate order i, f, g, o; g* are the row's four (h)
 * blocks of gates. A function of its own so that restrict reaches the vectoriser
 * (the buffers are distinct: c is never c_prev). */
static inline void
lstm_fwd_row(int h, float *restrict gi, float *restrict gf, float *restrict gg, float *restrict go,
             const float *restrict cp, float *restrict c, float *restrict m)
{
    for (int j = 0; j < h; j++) {
        float i = fast_sigmoidf(gi[j]), f = fast_sigmoidf(gf[j]);
        float g = fast_tanhf(gg[j]), o = fast_sigmoidf(go[j]);
        float cc = f * cp[j] + i * g;

        gi[j] = i;
        gf[j] = f;
        gg[j] = g;
        go[j] = o;
        c[j] = cc;
        m[j] = o * fast_tanhf(cc);
    }
}

HOT static double
lstm_fwd_rows(const void *argp, size_t lo, size_t hi)
{
    const lstm_args_t *a = argp;
    const size_t h = (size_t)a->h;

    for (size_t r = lo; r < hi; r++) {
        float *gates = a->gates + r * 4 * h;

        lstm_fwd_row(a->h, gates, gates + h, gates + 2 * h, gates + 3 * h, a->c_prev + r * h,
                     a->c_out + r * h, a->m + r * h);
    }
    return 0;
}

static void
cpu_lstm_cell_forward(void *ctx, int b, int h, float *gates, const float *c_prev, float *c,
                      float *m)
{
    lstm_args_t a = {.h = h, .gates = gates, .c_prev = c_prev, .c_out = c, .m = m};

    if (b > 0 && h > 0)
        par_range(ctx, (size_t)b, (size_t)b * 4 * (size_t)h, PAR_MIN_FUSED, lstm_fwd_rows, &a);
}

/* One row of the cell backward. With tc = tanh(c) (recomputed, as in forward):
 *   dc_t = dc + dm o (1 - tc^2),  dc_prev = dc_t f,
 *   d pre_i = dc_t g i(1-i), d pre_f = dc_t c_prev f(1-f), d pre_g = dc_t i (1-g^2),
 *   d pre_o = dm tc o(1-o). */
static inline void
lstm_bwd_row(int h, const float *restrict gi, const float *restrict gf, const float *restrict gg,
             const float *restrict go, const float *restrict cp, const float *restrict c,
             const float *restrict dm, float *restrict dc, float *restrict di, float *restrict df,
             float *restrict dg, float *restrict dout)
{
    for (int j = 0; j < h; j++) {
        float i = gi[j], f = gf[j], g = gg[j], o = go[j];
        float tc = fast_tanhf(c[j]);
        float dct = dc[j] + dm[j] * o * (1.0f - tc * tc);

        di[j] = dct * g * i * (1.0f - i);
        df[j] = dct * cp[j] * f * (1.0f - f);
        dg[j] = dct * i * (1.0f - g * g);
        dout[j] = dm[j] * tc * o * (1.0f - o);
        dc[j] = dct * f;
    }
}

HOT static double
lstm_bwd_rows(const void *argp, size_t lo, size_t hi)
{
    const lstm_args_t *a = argp;
    const size_t h = (size_t)a->h;

    for (size_t r = lo; r < hi; r++) {
        const float *acts = a->acts + r * 4 * h;
        float *dgates = a->dgates + r * 4 * h;

        lstm_bwd_row(a->h, acts, acts + h, acts + 2 * h, acts + 3 * h, a->c_prev + r * h,
                     a->c + r * h, a->dm + r * h, a->dc + r * h, dgates, dgates + h, dgates + 2 * h,
                     dgates + 3 * h);
    }
    return 0;
}

static void
cpu_lstm_cell_backward(void *ctx, int b, int h, const float *gates, const float *c_prev,
                       const float *c, const float *dm, float *dc, float *dgates)
{
    lstm_args_t a = {
        .h = h, .acts = gates, .c_prev = c_prev, .c = c, .dm = dm, .dc = dc, .dgates = dgates};

    if (b > 0 && h > 0)
        par_range(ctx, (size_t)b, (size_t)b * 4 * (size_t)h, PAR_MIN_FUSED, lstm_bwd_rows, &a);
}

/* ---- embeddings -------------------------------------------------------------------- */

typedef struct {
    int d;
    const float *table, *src;
    const int32_t *ids, *rows, *off, *pos;
    float *out;
} emb_args_t;

static double
gather_rows(const void *argp, size_t lo, size_t hi)
{
    const emb_args_t *a = argp;
    const size_t d = (size_t)a->d;

    for (size_t r = lo; r < hi; r++)
        memcpy(a->out + r * d, a->table + (size_t)a->ids[r] * d, d * sizeof(float));
    return 0;
}

static void
cpu_embedding_gather(void *ctx, int n, int d, const float *table, const int32_t *ids, float *out)
{
    emb_args_t a = {.d = d, .table = table, .ids = ids, .out = out};

    if (n > 0 && d > 0)
        par_range(ctx, (size_t)n, (size_t)n * (size_t)d, PAR_MIN_STREAM, gather_rows, &a);
}

/* Unique rows [lo, hi): each output row is owned by one thread, so no atomics. */
HOT static double
scatter_rows(const void *argp, size_t lo, size_t hi)
{
    const emb_args_t *a = argp;
    const size_t d = (size_t)a->d;

    for (size_t u = lo; u < hi; u++) {
        float *restrict g = a->out + (size_t)a->rows[u] * d;

        for (int32_t p = a->off[u]; p < a->off[u + 1]; p++) {
            const float *restrict s = a->src + (size_t)a->pos[p] * d;

            for (size_t j = 0; j < d; j++)
                g[j] += s[j];
        }
    }
    return 0;
}

static void
cpu_embedding_scatter_add(void *ctx, int nrows, int d, const int32_t *rows, const int32_t *off,
                          const int32_t *pos, const float *src, float *grad)
{
    emb_args_t a = {.d = d, .rows = rows, .off = off, .pos = pos, .src = src, .out = grad};

    if (nrows > 0 && d > 0)
        par_range(ctx, (size_t)nrows, (size_t)off[nrows] * (size_t)d, PAR_MIN_STREAM, scatter_rows,
                  &a);
}

/* ---- element-wise ------------------------------------------------------------------ */

typedef struct {
    float alpha, lr, b1, b2, eps;
    float step, inv_sqrt_bc2; /* adam: lr / (1 - b1^t), 1 / sqrt(1 - b2^t) */
    const float *x;
    float *y, *acc, *m, *v;
} elem_args_t;

HOT static double
axpy_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *restrict x = a->x;
    float *restrict y = a->y;
    const float alpha = a->alpha;

    for (size_t i = lo; i < hi; i++)
        y[i] += alpha * x[i];
    return 0;
}

static void
cpu_axpy(void *ctx, size_t n, float alpha, const float *x, float *y)
{
    elem_args_t a = {.alpha = alpha, .x = x, .y = y};

    par_range(ctx, n, n, PAR_MIN_STREAM, axpy_range, &a);
}

HOT static double
scale_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    float *restrict y = a->y;
    const float alpha = a->alpha;

    for (size_t i = lo; i < hi; i++)
        y[i] *= alpha;
    return 0;
}

static void
cpu_scale(void *ctx, size_t n, float alpha, float *x)
{
    elem_args_t a = {.alpha = alpha, .y = x};

    par_range(ctx, n, n, PAR_MIN_STREAM, scale_range, &a);
}

static void
cpu_copy(void *ctx, size_t n, const float *src, float *dst)
{
    if (n > 0 && src != dst)
        memmove(dst, src, n * sizeof(float));
}

static void
cpu_zero(void *ctx, size_t n, float *x)
{
    if (n > 0)
        memset(x, 0, n * sizeof(float));
}

/* Sum of squares in double (thread partials are added in order, so results repeat
 * for a given thread count). */
HOT static double
sumsq_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *x = a->x;
    double s = 0;

    SIMD_REDUCE(+, s)
    for (size_t i = lo; i < hi; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

static double
cpu_sumsq(void *ctx, size_t n, const float *x)
{
    elem_args_t a = {.x = x};

    return par_range(ctx, n, n, PAR_MIN_STREAM, sumsq_range, &a);
}

typedef struct {
    int cols;
    size_t rows;
    const float *bias, *dx;
    float *x, *db;
} bias_args_t;

/* Rows [lo, hi) of x += bias. */
HOT static double
add_bias_rows(const void *argp, size_t lo, size_t hi)
{
    const bias_args_t *a = argp;
    const int cols = a->cols;
    const float *restrict bias = a->bias;

    for (size_t r = lo; r < hi; r++) {
        float *restrict x = a->x + r * (size_t)cols;

        for (int j = 0; j < cols; j++)
            x[j] += bias[j];
    }
    return 0;
}

static void
cpu_add_bias(void *ctx, int rows, int cols, const float *bias, float *x)
{
    bias_args_t a = {.cols = cols, .bias = bias, .x = x};

    if (rows > 0 && cols > 0)
        par_range(ctx, (size_t)rows, (size_t)rows * (size_t)cols, PAR_MIN_STREAM, add_bias_rows,
                  &a);
}

/* Columns [lo, hi) of db += column sums of dx: threads split the columns so that each
 * db entry has one owner and its sum runs over the rows in order (repeatable). The
 * sums run in double, BIAS_BLOCK columns at a time: summed in float over the N = 1120
 * rows of a word-model step, the softmax-bias gradient was off by ~3e-6 relative (ten
 * times PyTorch's error), the largest difference between the two step for step. */
HOT static double
bias_grad_cols(const void *argp, size_t lo, size_t hi)
{
    const bias_args_t *a = argp;
    const size_t cols = (size_t)a->cols;
    float *restrict db = a->db;

    for (size_t j0 = lo; j0 < hi; j0 += BIAS_BLOCK) {
        size_t nb = hi - j0 < BIAS_BLOCK ? hi - j0 : BIAS_BLOCK;
        double acc[BIAS_BLOCK];

        for (size_t k = 0; k < nb; k++)
            acc[k] = db[j0 + k];
        for (size_t r = 0; r < a->rows; r++) {
            const float *restrict dx = a->dx + r * cols + j0;

            for (size_t k = 0; k < nb; k++)
                acc[k] += dx[k];
        }
        for (size_t k = 0; k < nb; k++)
            db[j0 + k] = (float)acc[k];
    }
    return 0;
}

static void
cpu_bias_grad(void *ctx, int rows, int cols, const float *dx, float *db)
{
    bias_args_t a = {.cols = cols, .rows = (size_t)rows, .dx = dx, .db = db};

    if (rows > 0 && cols > 0)
        par_range(ctx, (size_t)cols, (size_t)rows * (size_t)cols, PAR_MIN_STREAM, bias_grad_cols,
                  &a);
}

/* ---- 16-bit conversion ------------------------------------------------------------- */

typedef struct {
    float scale;
    const float *f;
    const uint16_t *h_in;
    uint16_t *h;
    float *f_out;
} half_args_t;

static double
to_fp16_range(const void *argp, size_t lo, size_t hi)
{
    const half_args_t *a = argp;

    for (size_t i = lo; i < hi; i++)
        a->h[i] = sl_fp32_to_fp16(a->f[i] * a->scale);
    return 0;
}

static double
to_bf16_range(const void *argp, size_t lo, size_t hi)
{
    const half_args_t *a = argp;

    for (size_t i = lo; i < hi; i++)
        a->h[i] = sl_fp32_to_bf16(a->f[i] * a->scale);
    return 0;
}

static double
from_fp16_range(const void *argp, size_t lo, size_t hi)
{
    const half_args_t *a = argp;

    for (size_t i = lo; i < hi; i++)
        a->f_out[i] = sl_fp16_to_fp32(a->h_in[i]) * a->scale;
    return 0;
}

static double
from_bf16_range(const void *argp, size_t lo, size_t hi)
{
    const half_args_t *a = argp;

    for (size_t i = lo; i < hi; i++)
        a->f_out[i] = sl_bf16_to_fp32(a->h_in[i]) * a->scale;
    return 0;
}

static void
cpu_to_half(void *ctx, size_t n, sl_precision_t fmt, float scale, const float *src, uint16_t *dst)
{
    half_args_t a = {.scale = scale, .f = src, .h = dst};

    SL_ASSERT(fmt == SL_PREC_FP16 || fmt == SL_PREC_BF16);
    par_range(ctx, n, n, PAR_MIN_STREAM, fmt == SL_PREC_FP16 ? to_fp16_range : to_bf16_range, &a);
}

static void
cpu_from_half(void *ctx, size_t n, sl_precision_t fmt, float inv_scale, const uint16_t *src,
              float *dst)
{
    half_args_t a = {.scale = inv_scale, .h_in = src, .f_out = dst};

    SL_ASSERT(fmt == SL_PREC_FP16 || fmt == SL_PREC_BF16);
    par_range(ctx, n, n, PAR_MIN_STREAM, fmt == SL_PREC_FP16 ? from_fp16_range : from_bf16_range,
              &a);
}

/* ---- dropout ----------------------------------------------------------------------- */

typedef struct {
    float p, keep_scale;
    uint64_t key;
    float *x;
} dropout_args_t;

static double
dropout_range(const void *argp, size_t lo, size_t hi)
{
    const dropout_args_t *a = argp;

    for (size_t i = lo; i < hi; i++)
        a->x[i] = sl_rng_float_at(a->key, i) >= a->p ? a->x[i] * a->keep_scale : 0.0f;
    return 0;
}

/* p <= 0 is the identity (every draw is >= 0) and p >= 1 drops everything (every draw
 * is < 1), so neither needs the RNG. */
static void
cpu_dropout(void *ctx, size_t n, float p, uint64_t key, float *x)
{
    dropout_args_t a = {p, 1.0f / (1.0f - p), key, x};

    if (p <= 0.0f)
        return;
    if (p >= 1.0f) {
        cpu_zero(ctx, n, x);
        return;
    }
    par_range(ctx, n, n, PAR_MIN_FUSED, dropout_range, &a);
}

/* ---- optimizers -------------------------------------------------------------------- */

static void
cpu_sgd_update(void *ctx, size_t n, float lr, const float *g, float *w)
{
    /* w -= lr g is an axpy with -lr (negation is exact: same bits) */
    elem_args_t a = {.alpha = -lr, .x = g, .y = w};

    par_range(ctx, n, n, PAR_MIN_STREAM, axpy_range, &a);
}

HOT static double
adagrad_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *restrict g = a->x;
    float *restrict w = a->y, *restrict acc = a->acc;
    const float lr = a->lr, eps = a->eps;

    for (size_t i = lo; i < hi; i++) {
        acc[i] += g[i] * g[i];
        w[i] -= lr * g[i] / (fast_sqrtf(acc[i]) + eps);
    }
    return 0;
}

static void
cpu_adagrad_update(void *ctx, size_t n, float lr, float eps, const float *g, float *acc, float *w)
{
    elem_args_t a = {.lr = lr, .eps = eps, .x = g, .y = w, .acc = acc};

    par_range(ctx, n, n, PAR_MIN_FUSED, adagrad_range, &a);
}

/* PyTorch's form, w -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), with the division
 * by sqrt(bc2) done as a product with its reciprocal (computed once). */
HOT static double
adam_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *restrict g = a->x;
    float *restrict w = a->y, *restrict m = a->m, *restrict v = a->v;
    const float b1 = a->b1, b2 = a->b2, eps = a->eps, step = a->step, isb = a->inv_sqrt_bc2;

    for (size_t i = lo; i < hi; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= step * m[i] / (fast_sqrtf(v[i]) * isb + eps);
    }
    return 0;
}

/* The bias corrections 1 - b^t are computed once in double (t >= 1 by contract). */
static void
cpu_adam_update(void *ctx, size_t n, float lr, float b1, float b2, float eps, long t,
                const float *g, float *m, float *v, float *w)
{
    double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
    elem_args_t a = {.b1 = b1,
                     .b2 = b2,
                     .eps = eps,
                     .step = (float)(lr / bc1),
                     .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
                     .x = g,
                     .y = w,
                     .m = m,
                     .v = v};

    par_range(ctx, n, n, PAR_MIN_FUSED, adam_range, &a);
}

/* ---- gemm, memory, threads --------------------------------------------------------- */

/* The shape checks are cblas's own; failing them is a bug in the caller, and cblas
 * would print to stderr and leave c unchanged. */
static void
cpu_gemm(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
         int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    SL_ASSERT(m >= 0 && n >= 0 && k >= 0);
    SL_ASSERT(lda >= (trans_a ? m : k) && lda >= 1);
    SL_ASSERT(ldb >= (trans_b ? k : n) && ldb >= 1);
    SL_ASSERT(ldc >= n && ldc >= 1);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static sl_status_t
cpu_alloc(void *ctx, void **ptr, size_t bytes)
{
    return sl_alloc(ptr, bytes, 1, 1, "cpu backend buffer");
}

static void
cpu_free(void *ctx, void *ptr)
{
    sl_free(ptr);
}

/* cpu memory is host memory: staging buffers are ordinary aligned ones. */
static sl_status_t
cpu_host_alloc(void *ctx, void **ptr, size_t bytes)
{
    return sl_alloc(ptr, bytes ? bytes : 1, 1, 1, "host staging buffer");
}

static sl_status_t
cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes > 0 && dst != src)
        memmove(dst, src, bytes);
    return SL_OK;
}

static sl_status_t
cpu_sync(void *ctx)
{
    return SL_OK;
}

/* The CPU multiplies in fp32 only: emulating bf16/fp16 inputs would be slower than
 * fp32 here and gain nothing, so a request for them is refused rather than ignored. */
static sl_status_t
cpu_set_precision(void *ctx, sl_precision_t p)
{
    if (p == SL_PREC_FP32)
        return SL_OK;
    return sl_err_set(SL_ERR_UNSUPPORTED,
                      "device 'cpu': precision %s is not supported (the cpu backend computes "
                      "in fp32; bf16/fp16 need device: cuda)",
                      p == SL_PREC_BF16   ? "bf16"
                      : p == SL_PREC_FP16 ? "fp16"
                                          : "(unknown)");
}

static int
cores(void)
{
    cpu_set_t set;
    long n;

    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set); /* respects taskset and the batch system's binding */
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Which build of the fused loops the loader picked, for describe(). */
static const char *
loop_isa(void)
{
#ifdef HOT_CLONES
    __builtin_cpu_init();
    return __builtin_cpu_supports("x86-64-v3") ? "x86-64-v3 (AVX2, FMA)" : "x86-64";
#else
    return "compiler default";
#endif
}

/* threads <= 0: all cores. Sets OpenBLAS's pool and our own workers. If the workers
 * cannot be started the loops stay on the calling thread (slower, still correct). */
static void
cpu_set_threads(void *ctx, int threads)
{
    cpu_t *cpu = ctx;
    const char *blas = "CBLAS";

    if (threads <= 0)
        threads = cores();
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    cpu->threads = threads;
#if defined(HAVE_OPENBLAS) && defined(HAVE_OPENBLAS_SET_NUM_THREADS)
    openblas_set_num_threads(threads);
#endif
    if (!cpu->pool || sl_cpu_pool_threads(cpu->pool) != threads) {
        sl_cpu_pool_destroy(&cpu->pool);
        if (threads > 1 && sl_cpu_pool_new(&cpu->pool, threads) != SL_OK)
            cpu->pool = NULL;
    }
#if defined(HAVE_OPENBLAS) && defined(HAVE_OPENBLAS_GET_CONFIG)
    blas = openblas_get_config();
#endif
    snprintf(cpu->desc, sizeof cpu->desc, "%s (%d thread%s); loops %s%s", blas, threads,
             threads == 1 ? "" : "s", loop_isa(),
             threads > 1 && !cpu->pool ? ", serial (no worker threads)" : "");
}

static const char *
cpu_describe(void *ctx)
{
    return ((cpu_t *)ctx)->desc;
}

static void
cpu_destroy(void *ctx)
{
    cpu_t *cpu = ctx;

    sl_cpu_pool_destroy(&cpu->pool);
    sl_free(cpu);
}

static const sl_backend_ops_t cpu_ops = {
    .destroy = cpu_destroy,
    .set_threads = cpu_set_threads,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .to_device = cpu_memcpy,
    .to_host = cpu_memcpy,
    .sync = cpu_sync,
    .set_precision = cpu_set_precision,
    .gemm = cpu_gemm,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sumsq = cpu_sumsq,
    .to_half = cpu_to_half,
    .from_half = cpu_from_half,
    .add_bias = cpu_add_bias,
    .bias_grad = cpu_bias_grad,
    .lstm_cell_forward = cpu_lstm_cell_forward,
    .lstm_cell_backward = cpu_lstm_cell_backward,
    .embedding_gather = cpu_embedding_gather,
    .embedding_scatter_add = cpu_embedding_scatter_add,
    .softmax_xent = cpu_softmax_xent,
    .sampled_softmax_xent = cpu_sampled_softmax_xent,
    .dropout = cpu_dropout,
    .sgd_update = cpu_sgd_update,
    .adagrad_update = cpu_adagrad_update,
    .adam_update = cpu_adam_update,
};

/* The backend object and its context both come from sl_alloc; sl_backend_destroy
 * (kernels/sl_backend.c) calls ops->destroy on the context and sl_free on the object. */
sl_status_t
sl_backend_cpu_new(sl_backend_t **out, int threads)
{
    sl_backend_t *b;
    cpu_t *cpu;

    *out = NULL;
    if (threads < 0)
        return sl_err_set(SL_ERR_INVALID,
                          "device 'cpu': threads must be >= 0 (0: all cores), got %d", threads);
    SL_TRY(SL_CALLOC(&b, 1, "cpu backend"));
    if (SL_CALLOC(&cpu, 1, "cpu backend context") != SL_OK) {
        sl_free(b);
        return SL_ERR_NOMEM;
    }
    cpu_set_threads(cpu, threads);
    b->ops = &cpu_ops;
    b->ctx = cpu;
    b->name = "cpu";
    *out = b;
    return SL_OK;
}
