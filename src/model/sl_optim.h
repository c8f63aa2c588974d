/* Optimizers (SGD, Adagrad, Adam), global-norm gradient clipping and learning-rate
 * schedules, over one flat parameter buffer and its gradient. */
#ifndef SL_OPTIM_H
#define SL_OPTIM_H

#include <stddef.h>

#include "sl_backend.h"
#include "sl_config.h"
#include "sl_status.h"

typedef struct sl_optim sl_optim_t;

/* State sized for nparams (Adagrad: accumulator; Adam: m and v), on backend be. */
sl_status_t sl_optim_new(sl_optim_t **out, const sl_config_t *cfg, size_t nparams,
                         sl_backend_t *be);
void sl_optim_destroy(sl_optim_t **o);

/* Scales grads so their global L2 norm is at most clip (PyTorch's clip_grad_norm_:
 * factor clip / (norm + 1e-6) when norm > clip). Returns the norm before clipping. */
double sl_clip_global_norm(sl_backend_t *be, float *grads, size_t n, double clip);

/* Learning rate at step (0-based), in epoch (0-based), total_steps of the run:
 * schedule applied, then linear warm-up over the first warmup_steps. */
double sl_lr_at(const sl_config_t *cfg, long step, int epoch, long total_steps);

/* One update of params with grads at learning rate lr (clipping is separate). */
void sl_optim_step(sl_optim_t *o, float *params, const float *grads, double lr);

/* Optimizer state for checkpoints: the step count and nstate floats (0, n or 2n). */
long sl_optim_steps(const sl_optim_t *o);
size_t sl_optim_state_size(const sl_optim_t *o);
sl_status_t sl_optim_state_save(const sl_optim_t *o, float *host, long *steps);
sl_status_t sl_optim_state_load(sl_optim_t *o, const float *host, long steps);

#endif
