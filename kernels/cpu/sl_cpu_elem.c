/* The CPU backend's element-wise and per-column ops: axpy, scale, copy, zero, sum of
 * squares, bias add and gradient, fp16/bf16 conversion (sl_half.h), dropout (the
 * counter RNG of sl_rng.h) and the optimizer updates (SGD, Adagrad, Adam). Owns nothing
 * else: the context is sl_cpu.c's, the shared maths and thread split sl_cpu_loops.h's. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/sl_half.h"
#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "kernels/cpu/sl_cpu_loops.h"

/* columns of a bias gradient summed at once (a 16 kB stack block, in L1): each row's
 * run of them is 8 kB read in order, which the prefetchers follow; runs of 1 kB (256
 * columns) at the 40 kB stride of a 10k-word softmax's rows made the op 1.4x slower */
enum { BIAS_BLOCK = 2048 };

typedef struct {
    float alpha, lr, b1, b2, eps;
    float step, inv_sqrt_bc2; /* adam: lr / (1 - b1^t), 1 / sqrt(1 - b2^t) */
    const float *x;
    float *y, *acc, *m, *v;
} elem_args_t;

static double
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

void
sl_cpu_axpy(void *ctx, size_t n, float alpha, const float *x, float *y)
{
    elem_args_t a = {.alpha = alpha, .x = x, .y = y};

    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_STREAM, axpy_range, &a);
}

static double
scale_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    float *restrict y = a->y;
    const float alpha = a->alpha;

    for (size_t i = lo; i < hi; i++)
        y[i] *= alpha;
    return 0;
}

void
sl_cpu_scale(void *ctx, size_t n, float alpha, float *x)
{
    elem_args_t a = {.alpha = alpha, .y = x};

    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_STREAM, scale_range, &a);
}

void
sl_cpu_copy(void *ctx, size_t n, const float *src, float *dst)
{
    if (n > 0 && src != dst)
        memmove(dst, src, n * sizeof(float));
}

void
sl_cpu_zero(void *ctx, size_t n, float *x)
{
    if (n > 0)
        memset(x, 0, n * sizeof(float));
}

/* Sum of squares in double (thread partials are added in order, so results repeat
 * for a given thread count). */
static double
sumsq_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *x = a->x;
    double s = 0;

    SL_CPU_SIMD_REDUCE(+, s)
    for (size_t i = lo; i < hi; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

double
sl_cpu_sumsq(void *ctx, size_t n, const float *x)
{
    elem_args_t a = {.x = x};

    return sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_STREAM, sumsq_range, &a);
}

typedef struct {
    size_t n;
    const float *x;
    const size_t *blocks;
    double *out;
} blocks_args_t;

/* Blocks [lo, hi) of sl_cpu_sumsq_blocks. */
static double
sumsq_blocks_range(const void *argp, size_t lo, size_t hi)
{
    const blocks_args_t *a = argp;
    elem_args_t e = {.x = a->x};

    for (size_t i = lo; i < hi; i++) {
        size_t b0 = a->blocks[i] * SL_SUMSQ_BLOCK;
        size_t b1 = a->n - b0 < SL_SUMSQ_BLOCK ? a->n : b0 + SL_SUMSQ_BLOCK;

        a->out[i] = sumsq_range(&e, b0, b1);
    }
    return 0;
}

void
sl_cpu_sumsq_blocks(void *ctx, size_t n, const float *x, const size_t *blocks, size_t nblocks,
                    double *out)
{
    blocks_args_t a = {n, x, blocks, out};

    sl_cpu_par_range(ctx, nblocks, nblocks * SL_SUMSQ_BLOCK, SL_CPU_PAR_MIN_STREAM,
                     sumsq_blocks_range, &a);
}

typedef struct {
    int cols;
    size_t rows;
    const float *bias, *dx;
    float *x, *db;
} bias_args_t;

/* Rows [lo, hi) of x += bias. */
static double
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

void
sl_cpu_add_bias(void *ctx, int rows, int cols, const float *bias, float *x)
{
    bias_args_t a = {.cols = cols, .bias = bias, .x = x};

    if (rows > 0 && cols > 0)
        sl_cpu_par_range(ctx, (size_t)rows, (size_t)rows * (size_t)cols, SL_CPU_PAR_MIN_STREAM,
                         add_bias_rows, &a);
}

/* Columns [lo, hi) of db += column sums of dx: threads split the columns so that each
 * db entry has one owner and its sum runs over the rows in order (repeatable). The
 * sums run in double, BIAS_BLOCK columns at a time: summed in float over the N = 1120
 * rows of a word-model step, the softmax-bias gradient was off by ~3e-6 relative (ten
 * times PyTorch's error), the largest difference between the two step for step. */
static double
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

void
sl_cpu_bias_grad(void *ctx, int rows, int cols, const float *dx, float *db)
{
    bias_args_t a = {.cols = cols, .rows = (size_t)rows, .dx = dx, .db = db};

    if (rows > 0 && cols > 0)
        sl_cpu_par_range(ctx, (size_t)cols, (size_t)rows * (size_t)cols, SL_CPU_PAR_MIN_STREAM,
                         bias_grad_cols, &a);
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

void
sl_cpu_to_half(void *ctx, size_t n, sl_precision_t fmt, float scale, const float *src,
               uint16_t *dst)
{
    half_args_t a = {.scale = scale, .f = src, .h = dst};

    SL_ASSERT(fmt == SL_PREC_FP16 || fmt == SL_PREC_BF16);
    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_STREAM,
                     fmt == SL_PREC_FP16 ? to_fp16_range : to_bf16_range, &a);
}

void
sl_cpu_from_half(void *ctx, size_t n, sl_precision_t fmt, float inv_scale, const uint16_t *src,
                 float *dst)
{
    half_args_t a = {.scale = inv_scale, .h_in = src, .f_out = dst};

    SL_ASSERT(fmt == SL_PREC_FP16 || fmt == SL_PREC_BF16);
    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_STREAM,
                     fmt == SL_PREC_FP16 ? from_fp16_range : from_bf16_range, &a);
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
void
sl_cpu_dropout(void *ctx, size_t n, float p, uint64_t key, float *x)
{
    dropout_args_t a = {p, 1.0f / (1.0f - p), key, x};

    if (p <= 0.0f)
        return;
    if (p >= 1.0f) {
        sl_cpu_zero(ctx, n, x);
        return;
    }
    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_FUSED, dropout_range, &a);
}

/* ---- optimizers -------------------------------------------------------------------- */

void
sl_cpu_sgd_update(void *ctx, size_t n, float lr, const float *g, float *w)
{
    /* w -= lr g is an axpy with -lr (negation is exact: same bits) */
    elem_args_t a = {.alpha = -lr, .x = g, .y = w};

    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_STREAM, axpy_range, &a);
}

static double
adagrad_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *restrict g = a->x;
    float *restrict w = a->y, *restrict acc = a->acc;
    const float lr = a->lr, eps = a->eps;

    for (size_t i = lo; i < hi; i++) {
        acc[i] += g[i] * g[i];
        w[i] -= lr * g[i] / (sl_cpu_fast_sqrtf(acc[i]) + eps);
    }
    return 0;
}

void
sl_cpu_adagrad_update(void *ctx, size_t n, float lr, float eps, const float *g, float *acc,
                      float *w)
{
    elem_args_t a = {.lr = lr, .eps = eps, .x = g, .y = w, .acc = acc};

    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_FUSED, adagrad_range, &a);
}

/* PyTorch's form, w -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), with the division
 * by sqrt(bc2) done as a product with its reciprocal (computed once). */
static double
adam_range(const void *argp, size_t lo, size_t hi)
{
    const elem_args_t *a = argp;
    const float *restrict g = a->x;
    float *restrict w = a->y, *restrict m = a->m, *restrict v = a->v;
    const float b1 = a->b1, b2 = a->b2, eps = a->eps, step = a->step, isb = a->inv_sqrt_bc2;

    for (size_t i = lo; i < hi; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= step * m[i] / (sl_cpu_fast_sqrtf(v[i]) * isb + eps);
    }
    return 0;
}

/* The bias corrections 1 - b^t are computed once in double (t >= 1 by contract). */
void
sl_cpu_adam_update(void *ctx, size_t n, float lr, float b1, float b2, float eps, long t,
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

    sl_cpu_par_range(ctx, n, n, SL_CPU_PAR_MIN_FUSED, adam_range, &a);
}
