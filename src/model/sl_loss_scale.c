/* Dynamic loss scaling for fp16 (Puri et al., section V; see sl_loss_scale.h): the
 * scale S (the paper's alpha), its halving on overflow and doubling after a run of good
 * steps, and the skip-or-apply end of a training step. */
#include "model/sl_loss_scale.h"

#include <float.h>
#include <math.h>
#include <string.h>

sl_status_t
sl_loss_scale_init(sl_loss_scale_t *ls, const sl_config_t *cfg)
{
    double init = cfg->train.loss_scale.init;

    memset(ls, 0, sizeof *ls);
    ls->enabled = strcmp(cfg->precision, "fp16") == 0;
    ls->dynamic = cfg->train.loss_scale.dynamic;
    ls->growth_interval = cfg->train.loss_scale.growth_interval;
    ls->scale = 1.0f;
    if (!ls->enabled)
        return SL_OK;
    /* 1/S must be a finite float too: the gradients are multiplied by it */
    if (!(init >= FLT_MIN && init <= FLT_MAX))
        return sl_err_set(SL_ERR_CONFIG,
                          "train.loss_scale.init: %g is outside the range of normal floats "
                          "[%g, %g]",
                          init, FLT_MIN, FLT_MAX);
    ls->scale = (float)init;
    return SL_OK;
}

int
sl_loss_scale_update(sl_loss_scale_t *ls, double grad_norm)
{
    if (!ls->enabled)
        return 1;
    if (!isfinite(grad_norm)) {
        ls->skipped++;
        ls->overflows++;
        ls->good = 0;
        if (ls->dynamic && ls->scale >= 2.0f * FLT_MIN)
            ls->scale *= 0.5f;
        return 0;
    }
    ls->overflows = 0;
    if (ls->dynamic && ++ls->good >= ls->growth_interval) {
        ls->good = 0;
        if (ls->scale <= FLT_MAX / 2.0f)
            ls->scale *= 2.0f;
    }
    return 1;
}

void
sl_loss_scale_unscale(const sl_loss_scale_t *ls, sl_backend_t *be, float *grads, size_t n)
{
    if (ls->enabled && ls->scale != 1.0f)
        be->ops->scale(be->ctx, n, 1.0f / ls->scale, grads);
}

sl_status_t
sl_loss_scale_step(sl_loss_scale_t *ls, sl_backend_t *be, sl_optim_t *opt, float *params,
                   float *grads, size_t n, const size_t *spans, size_t nspans, double clip,
                   double lr, double *norm, int *applied)
{
    size_t all[2] = {0, n};

    if (!spans) {
        spans = all;
        nspans = 1;
    }
    /* clipping an overflowed gradient is harmless: the step is dropped after it */
    *norm = sl_clip_global_norm_spans(be, grads, n, clip, spans, nspans);
    *applied = sl_loss_scale_update(ls, *norm);
    if (*applied) {
        sl_optim_step_spans(opt, params, grads, lr, spans, nspans);
        return SL_OK;
    }
    if (ls->overflows >= SL_LOSS_SCALE_MAX_SKIPS)
        return sl_err_set(SL_ERR_INVALID,
                          "gradients overflowed in %ld steps in a row (loss scale now %g): "
                          "the model diverged; lower train.optimizer.lr%s",
                          ls->overflows, (double)ls->scale,
                          ls->dynamic ? "" : " or train.loss_scale.init");
    return SL_OK;
}
