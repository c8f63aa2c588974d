/* Optimizers (SGD, Adagrad, Adam) over the flat parameter buffer through the backend's
 * update ops, PyTorch's global-norm clipping, and the learning-rate schedules.
 *
 * eps: both Adagrad and Adam use train.optimizer.eps, whose default follows the
 * optimizer type in the config (PyTorch's: 1e-10 for Adagrad, 1e-8 for Adam), so a
 * value the user sets is honoured either way. */
#include "model/sl_optim.h"

#include <math.h>
#include <stdint.h>

#include "common/sl_alloc.h"

#define FILL_CHUNK 65536 /* floats staged on the host to fill the accumulator */

struct sl_optim {
    sl_backend_t *be;
    sl_opt_kind_t type;
    size_t n;
    float beta1, beta2, eps;
    long steps;
    size_t nstate; /* floats of state: 0 (sgd), n (adagrad), 2n (adam) */
    float *state;  /* adagrad: acc (n); adam: m (n) then v (n); device memory */
};

/* Adagrad's accumulator starts at initial_accumulator (PyTorch's
 * initial_accumulator_value); the backend has no fill op, so stage it. */
static sl_status_t
fill(sl_backend_t *be, float *dst, size_t n, float value)
{
    float *stage;
    size_t chunk = n < FILL_CHUNK ? n : FILL_CHUNK;
    sl_status_t st = SL_OK;

    if (value == 0.0f) {
        be->ops->zero(be->ctx, n, dst);
        return SL_OK;
    }
    SL_TRY(SL_ALLOC(&stage, chunk, "optimizer staging"));
    for (size_t i = 0; i < chunk; i++)
        stage[i] = value;
    for (size_t i = 0; i < n && st == SL_OK; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        st = be->ops->to_device(be->ctx, dst + i, stage, k * sizeof(float));
    }
    sl_free(stage);
    return st;
}

sl_status_t
sl_optim_new(sl_optim_t **out, const sl_config_t *cfg, size_t nparams, sl_backend_t *be)
{
    sl_optim_t *o;
    sl_status_t st;
    double b1 = cfg->train.optimizer.beta1, b2 = cfg->train.optimizer.beta2;
    double eps = cfg->train.optimizer.eps, acc0 = cfg->train.optimizer.initial_accumulator;

    *out = NULL;
    switch (cfg->train.optimizer.type) {
    case SL_OPT_SGD:
        break;
    case SL_OPT_ADAGRAD:
        if (!(acc0 >= 0.0 && eps >= 0.0))
            return sl_err_set(SL_ERR_INVALID,
                              "optimizer: adagrad needs "
                              "initial_accumulator >= 0 and eps >= 0 (got %g, %g)",
                              acc0, eps);
        break;
    case SL_OPT_ADAM:
        if (!(b1 >= 0.0 && b1 < 1.0 && b2 >= 0.0 && b2 < 1.0 && eps >= 0.0))
            return sl_err_set(SL_ERR_INVALID,
                              "optimizer: adam needs beta1, beta2 in "
                              "[0, 1) and eps >= 0 (got %g, %g, %g)",
                              b1, b2, eps);
        break;
    default:
        return sl_err_set(SL_ERR_INVALID, "optimizer: unknown optimizer %d",
                          (int)cfg->train.optimizer.type);
    }
    SL_TRY(SL_CALLOC(&o, 1, "optimizer"));
    o->be = be;
    o->type = cfg->train.optimizer.type;
    o->n = nparams;
    o->beta1 = (float)b1;
    o->beta2 = (float)b2;
    o->eps = (float)eps;
    o->nstate = o->type == SL_OPT_SGD ? 0 : o->type == SL_OPT_ADAGRAD ? nparams : 2 * nparams;
    if (o->nstate > 0) {
        if (o->type == SL_OPT_ADAM && nparams > SIZE_MAX / 2 / sizeof(float)) {
            sl_free(o);
            return sl_err_set(SL_ERR_NOMEM, "optimizer: %zu parameters", nparams);
        }
        st = be->ops->alloc(be->ctx, (void **)&o->state, o->nstate * sizeof(float));
        if (st == SL_OK && o->type == SL_OPT_ADAGRAD)
            st = fill(be, o->state, nparams, (float)acc0);
        if (st != SL_OK) {
            int adam = o->type == SL_OPT_ADAM;
            sl_optim_destroy(&o);
            return sl_err_prefix(st,
                                 "optimizer state of train.optimizer.type %s (%d value%s "
                                 "per parameter; see data.vocab_size, model.embedding, "
                                 "model.layers)",
                                 adam ? "adam" : "adagrad", adam ? 2 : 1, adam ? "s" : "");
        }
    }
    *out = o;
    return SL_OK;
}

void
sl_optim_destroy(sl_optim_t **po)
{
    sl_optim_t *o = po ? *po : NULL;

    if (!o)
        return;
    if (o->state)
        o->be->ops->free(o->be->ctx, o->state);
    sl_free(o);
    *po = NULL;
}

double
sl_clip_global_norm(sl_backend_t *be, float *grads, size_t n, double clip)
{
    size_t all[2] = {0, n};

    return sl_clip_global_norm_spans(be, grads, n, clip, all, 1);
}

/* Blocks of sumsq_blocks listed at a time (the op runs each batch on all threads). */
enum { NORM_BATCH = 1024 };

/* Sums nb blocks of grads into *sum in order; nb becomes 0. */
static void
add_blocks(sl_backend_t *be, const float *grads, size_t n, const size_t *blocks, size_t *nb,
           double *sum)
{
    double out[NORM_BATCH];

    be->ops->sumsq_blocks(be->ctx, n, grads, blocks, *nb, out);
    for (size_t i = 0; i < *nb; i++)
        *sum += out[i];
    *nb = 0;
}

/* The sum of squares of grads over the blocks of SL_SUMSQ_BLOCK floats that the spans
 * meet, added in order: the same bits as over every block, since the others are zero
 * and their sums +0. Where the backend has no sumsq_blocks (a device), sumsq over all. */
static double
sumsq_spans(sl_backend_t *be, const float *grads, size_t n, const size_t *spans, size_t nspans)
{
    size_t blocks[NORM_BATCH], nb = 0, next = 0; /* next: the first block not yet listed */
    double sum = 0.0;

    if (!be->ops->sumsq_blocks)
        return be->ops->sumsq(be->ctx, n, grads);
    for (size_t i = 0; i < nspans; i++) {
        size_t b = spans[2 * i] / SL_SUMSQ_BLOCK;
        size_t end = (spans[2 * i] + spans[2 * i + 1] + SL_SUMSQ_BLOCK - 1) / SL_SUMSQ_BLOCK;

        for (b = b > next ? b : next; b < end; b++) {
            blocks[nb++] = b;
            if (nb == NORM_BATCH)
                add_blocks(be, grads, n, blocks, &nb, &sum);
        }
        next = end > next ? end : next;
    }
    if (nb > 0)
        add_blocks(be, grads, n, blocks, &nb, &sum);
    return sum;
}

/* The sum of squares over the blocks the spans meet (the same sums in the same order
 * whatever the spans); the scaling over the spans alone, which is exact: elsewhere the
 * gradient is zero. */
double
sl_clip_global_norm_spans(sl_backend_t *be, float *grads, size_t n, double clip,
                          const size_t *spans, size_t nspans)
{
    double norm = sqrt(sumsq_spans(be, grads, n, spans, nspans));

    if (clip > 0.0) {
        double coef = clip / (norm + 1e-6);

        if (coef < 1.0)
            for (size_t i = 0; i < nspans; i++)
                be->ops->scale(be->ctx, spans[2 * i + 1], (float)coef, grads + spans[2 * i]);
    }
    return norm;
}

double
sl_lr_at(const sl_config_t *cfg, long step, int epoch, long total_steps)
{
    double lr = cfg->train.optimizer.lr;
    long warm = cfg->train.schedule.warmup_steps;

    switch (cfg->train.schedule.type) {
    case SL_SCHED_CONSTANT:
        break;
    case SL_SCHED_EPOCH_DECAY:
        lr *= pow(cfg->train.schedule.decay, (double)epoch);
        break;
    case SL_SCHED_LINEAR:
        if (cfg->train.schedule.steps > 0)
            total_steps = cfg->train.schedule.steps;
        if (total_steps > 0) {
            double f = 1.0 - (double)step / (double)total_steps;
            lr *= f > 0.0 ? f : 0.0;
        }
        break;
    }
    if (warm > 0 && step + 1 < warm)
        lr *= (double)(step + 1) / (double)warm;
    return lr;
}

void
sl_optim_step(sl_optim_t *o, float *params, const float *grads, double lr)
{
    size_t all[2] = {0, o->n};

    sl_optim_step_spans(o, params, grads, lr, all, 1);
}

/* SGD and Adagrad with eps > 0 over the spans alone: where the gradient is zero their
 * update is exactly nothing. Adam (whose moments decay) updates every parameter. */
void
sl_optim_step_spans(sl_optim_t *o, float *params, const float *grads, double lr,
                    const size_t *spans, size_t nspans)
{
    const sl_backend_ops_t *ops = o->be->ops;
    void *ctx = o->be->ctx;

    o->steps++;
    switch (o->type) {
    case SL_OPT_SGD:
        for (size_t i = 0; i < nspans; i++)
            ops->sgd_update(ctx, spans[2 * i + 1], (float)lr, grads + spans[2 * i],
                            params + spans[2 * i]);
        break;
    case SL_OPT_ADAGRAD:
        /* a zero gradient adds 0 to acc and takes 0 / (sqrt(acc) + eps) from w, nothing
         * when eps > 0; with eps 0 and acc 0 that is NaN, so then every parameter */
        if (o->eps > 0.0f) {
            for (size_t i = 0; i < nspans; i++)
                ops->adagrad_update(ctx, spans[2 * i + 1], (float)lr, o->eps, grads + spans[2 * i],
                                    o->state + spans[2 * i], params + spans[2 * i]);
        } else {
            ops->adagrad_update(ctx, o->n, (float)lr, o->eps, grads, o->state, params);
        }
        break;
    case SL_OPT_ADAM:
        ops->adam_update(ctx, o->n, (float)lr, o->beta1, o->beta2, o->eps, o->steps, grads,
                         o->state, o->state + o->n, params);
        break;
    }
}

long
sl_optim_steps(const sl_optim_t *o)
{
    return o->steps;
}

size_t
sl_optim_state_size(const sl_optim_t *o)
{
    return o->nstate;
}

sl_status_t
sl_optim_state_save(const sl_optim_t *o, float *host, long *steps)
{
    *steps = o->steps;
    if (o->nstate == 0)
        return SL_OK;
    return o->be->ops->to_host(o->be->ctx, host, o->state, o->nstate * sizeof(float));
}

sl_status_t
sl_optim_state_load(sl_optim_t *o, const float *host, long steps)
{
    if (steps < 0)
        return sl_err_set(SL_ERR_INVALID, "optimizer state: negative step count %ld", steps);
    if (o->nstate > 0)
        SL_TRY(o->be->ops->to_device(o->be->ctx, o->state, host, o->nstate * sizeof(float)));
    o->steps = steps;
    return SL_OK;
}
