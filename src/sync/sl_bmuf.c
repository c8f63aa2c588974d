/* Mean, distance and BMUF block update of one component (see sl_bmuf.h). */
#include "sync/sl_bmuf.h"

#include <math.h>

void
sl_bmuf_opts_from_config(sl_bmuf_opts_t *o, const sl_config_t *cfg)
{
    /* auto: 1 - 1/n, the block momentum BMUF's authors (Chen and Huo) set for n workers */
    if (cfg->sync.block_momentum == SL_CONFIG_AUTO)
        o->eta = (float)(1.0 - 1.0 / (double)cfg->cluster.nodes);
    else
        o->eta = (float)cfg->sync.block_momentum;
    o->zeta = (float)cfg->sync.block_lr;
    o->nesterov = cfg->sync.nesterov;
    o->ref = cfg->sync.block_reference;
}

/* order NULL: the rows in their own order */
static void
mean(float *bar, const float *self, const float *rows, const size_t *order, size_t nrows,
     size_t count)
{
    double inv = 1.0 / (double)(nrows + 1);

    for (size_t j = 0; j < count; j++) {
        double s = self[j];
        for (size_t i = 0; i < nrows; i++)
            s += rows[(order ? order[i] : i) * count + j];
        bar[j] = (float)(s * inv);
    }
}

void
sl_bmuf_mean(float *bar, const float *self, const float *rows, size_t nrows, size_t count)
{
    mean(bar, self, rows, NULL, nrows, count);
}

void
sl_bmuf_mean_ordered(float *bar, const float *self, const float *rows, const size_t *order,
                     size_t nrows, size_t count)
{
    mean(bar, self, rows, order, nrows, count);
}

void
sl_bmuf_rebuild(float *bar, const float *ref, const float *sum, double inv, size_t count)
{
    for (size_t j = 0; j < count; j++)
        bar[j] = (float)((double)ref[j] + (double)sum[j] * inv);
}

void
sl_bmuf_mean_delta(float *bar, const float *ref, const float *dself, const float *rows,
                   size_t nrows, size_t count)
{
    double inv = 1.0 / (double)(nrows + 1);

    for (size_t j = 0; j < count; j++) {
        double s = dself[j];
        for (size_t i = 0; i < nrows; i++)
            s += rows[i * count + j];
        bar[j] = (float)((double)ref[j] + s * inv);
    }
}

double
sl_bmuf_distance(const float *a, const float *b, size_t count)
{
    double s = 0;

    for (size_t j = 0; j < count; j++) {
        double d = (double)a[j] - (double)b[j];
        s += d * d;
    }
    return sqrt(s);
}

void
sl_bmuf_update(const sl_bmuf_opts_t *o, float *theta, const float *bar, float *omega, float *delta,
               float *start, size_t count)
{
    const float *ref = o->ref == SL_BLOCK_REF_OMEGA ? omega : start;

    for (size_t j = 0; j < count; j++) {
        float g = bar[j] - ref[j];
        delta[j] = o->eta * delta[j] + o->zeta * g;
        omega[j] = omega[j] + delta[j];
        theta[j] = o->nesterov ? omega[j] + o->eta * delta[j] : omega[j];
        start[j] = theta[j];
    }
}
