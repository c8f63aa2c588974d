/* The CPU backend's LSTM cell (lstm_cell_forward, lstm_cell_backward): the
 * element-wise part of a step after the gemms, gate order i, f, g, o, rows split over
 * the backend's threads. Owns nothing else: the gemms are the caller's (through
 * sl_cpu.c), the shared maths sl_cpu_loops.h's. */
#include "config.h"

#include <stddef.h>

#include "kernels/cpu/sl_cpu_loops.h"

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
        float i = sl_cpu_fast_sigmoidf(gi[j]), f = sl_cpu_fast_sigmoidf(gf[j]);
        float g = sl_cpu_fast_tanhf(gg[j]), o = sl_cpu_fast_sigmoidf(go[j]);
        float cc = f * cp[j] + i * g;

        gi[j] = i;
        gf[j] = f;
        gg[j] = g;
        go[j] = o;
        c[j] = cc;
        m[j] = o * sl_cpu_fast_tanhf(cc);
    }
}

static double
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

void
sl_cpu_lstm_cell_forward(void *ctx, int b, int h, float *gates, const float *c_prev, float *c,
                         float *m)
{
    lstm_args_t a = {.h = h, .gates = gates, .c_prev = c_prev, .c_out = c, .m = m};

    if (b > 0 && h > 0)
        sl_cpu_par_range(ctx, (size_t)b, (size_t)b * 4 * (size_t)h, SL_CPU_PAR_MIN_FUSED,
                         lstm_fwd_rows, &a);
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
        float tc = sl_cpu_fast_tanhf(c[j]);
        float dct = dc[j] + dm[j] * o * (1.0f - tc * tc);

        di[j] = dct * g * i * (1.0f - i);
        df[j] = dct * cp[j] * f * (1.0f - f);
        dg[j] = dct * i * (1.0f - g * g);
        dout[j] = dm[j] * tc * o * (1.0f - o);
        dc[j] = dct * f;
    }
}

static double
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

void
sl_cpu_lstm_cell_backward(void *ctx, int b, int h, const float *gates, const float *c_prev,
                          const float *c, const float *dm, float *dc, float *dgates)
{
    lstm_args_t a = {
        .h = h, .acts = gates, .c_prev = c_prev, .c = c, .dm = dm, .dc = dc, .dgates = dgates};

    if (b > 0 && h > 0)
        sl_cpu_par_range(ctx, (size_t)b, (size_t)b * 4 * (size_t)h, SL_CPU_PAR_MIN_FUSED,
                         lstm_bwd_rows, &a);
}
