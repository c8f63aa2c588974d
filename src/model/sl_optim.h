/* Optimizers (SGD, Adagrad, Adam), global-norm gradient clipping and learning-rate
 * schedules, over one flat parameter buffer and its gradient. */
#ifndef SL_OPTIM_H
#define SL_OPTIM_H

#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"

typedef struct sl_optim sl_optim_t;

/* State sized for nparams (Adagrad: accumulator, starting at initial_accumulator;
 * Adam: m and v, zero), on backend be (borrowed). Adagrad and Adam both use
 * train.optimizer.eps (the config's default follows the type: 1e-10 Adagrad, 1e-8
 * Adam, PyTorch's). SL_ERR_INVALID for out-of-range hyper-parameters, SL_ERR_NOMEM. */
sl_status_t sl_optim_new(sl_optim_t **out, const sl_config_t *cfg, size_t nparams,
                         sl_backend_t *be);
void sl_optim_destroy(sl_optim_t **o);

/* Scales grads so their global L2 norm is at most clip (PyTorch's clip_grad_norm_:
 * factor clip / (norm + 1e-6) when norm > clip). Returns the norm before clipping. */
double sl_clip_global_norm(sl_backend_t *be, float *grads, size_t n, double clip);
/* The same where grads is zero outside spans, nspans (offset, count) pairs within n
 * (sl_lm_grad_spans): only the spans are scaled; the same bits. */
double sl_clip_global_norm_spans(sl_backend_t *be, float *grads, size_t n, double clip,
                                 const size_t *spans, size_t nspans);

/* Learning rate at step (0-based), in epoch (0-based), total_steps of the run:
 * constant lr, epoch_decay lr * decay^epoch, linear lr * max(0, 1 - step/total_steps)
 * (total_steps train.schedule.steps when that is set; constant when <= 0); then, when warmup_steps
 * > 0, times min(1, (step+1) / warmup_steps). */
double sl_lr_at(const sl_config_t *cfg, long step, int epoch, long total_steps);

/* One update of params with grads at learning rate lr (clipping is separate); Adam's
 * bias correction uses the step count after this update (1 on the first). */
void sl_optim_step(sl_optim_t *o, float *params, const float *grads, double lr);
/* The same where grads is zero outside spans (as sl_clip_global_norm_spans): SGD, and
 * Adagrad with eps > 0, update only the spans, Adam every parameter; the same bits. */
void sl_optim_step_spans(sl_optim_t *o, float *params, const float *grads, double lr,
                         const size_t *spans, size_t nspans);

/* Optimizer state for checkpoints: the step count and nstate floats (0, n or 2n). */
long sl_optim_steps(const sl_optim_t *o);
size_t sl_optim_state_size(const sl_optim_t *o);
sl_status_t sl_optim_state_save(const sl_optim_t *o, float *host, long *steps);
sl_status_t sl_optim_state_load(sl_optim_t *o, const float *host, long steps);

#endif
