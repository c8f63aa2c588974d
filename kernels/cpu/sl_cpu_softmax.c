/* The CPU backend's softmax cross-entropy, full (softmax_xent) and sampled
 * (sampled_softmax_xent): loss in double, gradient in place of the logits, rows split
 * over the backend's threads. Owns nothing else: the context, memory and gemm are
 * sl_cpu.c's, the shared maths sl_cpu_loops.h's. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "kernels/cpu/sl_cpu_loops.h"

typedef struct {
    int v, ld;
    float *logits;
    const float *bias;
    const int32_t *targets;
    float grad_scale;
} xent_args_t;

/* x[j] += bias[j] over x[0..n), n >= 1, returning the max of the sums: the bias costs
 * no pass of its own. */
static inline float
add_bias_max(float *restrict x, const float *restrict bias, int n)
{
    float m = x[0] + bias[0];

    SL_CPU_SIMD_REDUCE(max, m)
    for (int j = 0; j < n; j++) {
        float z = x[j] + bias[j];

        x[j] = z;
        m = z > m ? z : m;
    }
    return m;
}

/* Rows [lo, hi) of the full softmax: one pass for the bias and the max, one for exp
 * (stored when a gradient is wanted) and its sum, one to scale. The row (40 kB at v =
 * 10k) stays in cache between passes. Returns the rows' loss sum in double. */
static double
xent_rows(const void *argp, size_t lo, size_t hi)
{
    const xent_args_t *a = argp;
    const int v = a->v;
    const float gs = a->grad_scale;
    const float *restrict bias = a->bias;
    double loss = 0;

    for (size_t r = lo; r < hi; r++) {
        float *x = a->logits + r * (size_t)a->ld;
        int32_t t = a->targets[r];
        float xt, m, s, k;

        SL_ASSERT(t >= 0 && t < v); /* the vocabulary's ids, checked when loaded */
        m = bias ? add_bias_max(x, bias, v) : sl_cpu_vec_max(x, v);
        xt = x[t];
        s = sl_cpu_vec_exp_sum(x, v, m, gs != 0.0f);
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

void
sl_cpu_softmax_xent(void *ctx, int n, int v, float *logits, int ld, const float *bias,
                    const int32_t *targets, float grad_scale, double *loss_sum)
{
    xent_args_t a = {v, ld, logits, bias, targets, grad_scale};

    *loss_sum = n > 0 && v > 0 ? sl_cpu_par_range(ctx, (size_t)n, (size_t)n * (size_t)v,
                                                  SL_CPU_PAR_MIN_FUSED, xent_rows, &a)
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
 * -inf in place and exactly 0 probability (sl_cpu_fast_expf would clamp -inf to
 * 1.6e-38). */
static double
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
        m = sl_cpu_vec_max(x, w);
        /* masked entries add exp(-87) each to a sum >= 1, lost in rounding; with a
         * gradient they are zeroed before the sum */
        if (gs == 0.0f) {
            sum = sl_cpu_vec_exp_sum(x, w, m, 0);
            loss += log((double)sum) + (double)m - (double)x0;
            continue;
        }
        x[0] = sl_cpu_fast_expf(x0 - m);
        for (int j = 0; j < s; j++) {
            float e = sl_cpu_fast_expf(xs[j] - m);

            xs[j] = samples[j] == t ? 0.0f : e;
        }
        sum = sl_cpu_vec_sum(x, w);
        loss += log((double)sum) + (double)m - (double)x0;
        k = gs / sum;
        for (int j = 0; j < w; j++)
            x[j] *= k;
        x[0] -= gs;
    }
    return loss;
}

void
sl_cpu_sampled_softmax_xent(void *ctx, int n, int s, float *logits, const int32_t *targets,
                            const int32_t *samples, const float *logq_true, const float *logq_samp,
                            float grad_scale, double *loss_sum)
{
    sampled_args_t a = {s, logits, targets, samples, logq_true, logq_samp, grad_scale};

    *loss_sum = n > 0 && s >= 0 ? sl_cpu_par_range(ctx, (size_t)n, (size_t)n * (size_t)(s + 1),
                                                   SL_CPU_PAR_MIN_FUSED, sampled_rows, &a)
                                : 0.0;
}
