/* Log-uniform sampler for sampled softmax (see sl_sampler.h). */
#include "model/sl_sampler.h"

#include <math.h>
#include <string.h>

#include "common/sl_alloc.h"

sl_status_t
sl_sampler_init(sl_sampler_t *s, int range)
{
    sl_status_t st;

    memset(s, 0, sizeof *s);
    if (range < 1)
        return sl_err_set(SL_ERR_INVALID, "sampler: range %d must be at least 1", range);
    s->range = range;
    s->log_range = log((double)range + 1.0);
    SL_TRY_GOTO(SL_ALLOC(&s->log1m_p, (size_t)range, "sampler log(1-P)"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&s->stamp, (size_t)range, "sampler stamps"), st, fail);
    for (int k = 0; k < range; k++)
        s->log1m_p[k] = log1p(-sl_sampler_prob(s, k));
    return SL_OK;
fail:
    sl_sampler_fini(s);
    return st;
}

void
sl_sampler_fini(sl_sampler_t *s)
{
    sl_free(s->log1m_p);
    sl_free(s->stamp);
    memset(s, 0, sizeof *s);
}

double
sl_sampler_prob(const sl_sampler_t *s, int k)
{
    return log(((double)k + 2.0) / ((double)k + 1.0)) / s->log_range;
}

/* Inverse CDF: the CDF of k is log(k+2)/log(V+1), so k = floor(exp(u log(V+1))) - 1. */
int32_t
sl_sampler_draw(const sl_sampler_t *s, sl_rng_t *rng)
{
    double u = sl_rng_double(rng);
    long k = (long)floor(exp(u * s->log_range)) - 1;

    if (k < 0)
        k = 0;
    if (k >= s->range)
        k = s->range - 1;
    return (int32_t)k;
}

sl_status_t
sl_sampler_draw_unique(sl_sampler_t *s, sl_rng_t *rng, int n, int32_t *out, long *tries)
{
    long t = 0;

    if (n < 0 || n > s->range)
        return sl_err_set(SL_ERR_INVALID, "sampler: cannot draw %d distinct ids out of %d", n,
                          s->range);
    if (++s->gen == 0) { /* generation counter wrapped: forget every old mark */
        memset(s->stamp, 0, (size_t)s->range * sizeof *s->stamp);
        s->gen = 1;
    }
    for (int got = 0; got < n;) {
        int32_t k = sl_sampler_draw(s, rng);
        t++;
        if (s->stamp[k] == s->gen)
            continue;
        s->stamp[k] = s->gen;
        out[got++] = k;
    }
    *tries = t;
    return SL_OK;
}

double
sl_sampler_log_expected(const sl_sampler_t *s, int k, long tries)
{
    /* 1 - (1-P)^tries = -expm1(tries * log1p(-P)), exact for small P */
    return log(-expm1((double)tries * s->log1m_p[k]));
}
