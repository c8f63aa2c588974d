/* Loss scaling for fp16 training, as in Puri et al. (NVIDIA), "Large Scale Language
 * Modeling: Converging on 40GB of Text in Four Hours", section V ("automatic loss
 * scaling"): the loss, and so every gradient, is multiplied by a scale S (alpha in the
 * paper) before backward, so that small gradients survive fp16; the gradients are
 * divided by S before clipping and the update, which go on in fp32. A step whose
 * gradients overflowed (inf or NaN somewhere, so their sum of squares is not finite) is
 * skipped and S halved; after growth_interval good steps in a row S doubles. With
 * train.loss_scale.dynamic false, S stays at train.loss_scale.init and an overflowed
 * step is still skipped.
 *
 * Only precision fp16 scales. bf16 has fp32's exponent range, so its gradients neither
 * underflow nor overflow where fp32's would not (PyTorch's autocast does not scale
 * bf16 either); fp32 and bf16 run with S = 1 and no overflow check, exactly as without
 * this module. */
#ifndef SL_LOSS_SCALE_H
#define SL_LOSS_SCALE_H

#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_optim.h"

/* Overflows in a row after which sl_loss_scale_step gives up: with dynamic scaling S
 * has been divided by 2^64 by then, so the gradients are not finite at any scale. */
#define SL_LOSS_SCALE_MAX_SKIPS 64

/* A plain struct the caller owns (no resources: nothing to free). */
typedef struct {
    int enabled;         /* precision fp16; 0: S = 1, every step applies */
    int dynamic;         /* train.loss_scale.dynamic */
    int growth_interval; /* train.loss_scale.growth_interval */
    float scale;         /* S; a power of two as long as init is one */
    long good;           /* good steps in a row since S last changed or overflowed */
    long overflows;      /* overflowed steps in a row */
    long skipped;        /* steps skipped so far */
} sl_loss_scale_t;

/* Scaling on when cfg->precision is "fp16", from train.loss_scale.{init, dynamic,
 * growth_interval}; off (S = 1) otherwise. SL_ERR_CONFIG when fp16 and init is outside
 * the normal float range [FLT_MIN, FLT_MAX]. */
sl_status_t sl_loss_scale_init(sl_loss_scale_t *ls, const sl_config_t *cfg);

/* The state machine, once per step: grad_norm is the global L2 norm of the step's
 * gradients or their sum of squares (only whether it is finite counts). Returns 1 to
 * apply the step, 0 to skip it. Not finite: skip, and when dynamic halve S (not below
 * 2^-126, the smallest normal float). Finite: apply, and when dynamic and this is the
 * growth_interval-th good step in a row double S (not above FLT_MAX). Disabled: 1. */
int sl_loss_scale_update(sl_loss_scale_t *ls, double grad_norm);

/* grads (n, backend memory) /= S, right after backward; nothing when disabled or S = 1. */
void sl_loss_scale_unscale(const sl_loss_scale_t *ls, sl_backend_t *be, float *grads, size_t n);

/* The end of a training step once the gradients are final (unscaled and, with
 * allreduce, averaged over the nodes, so that every node decides alike): clip them to
 * the global norm clip (sl_clip_global_norm_spans; 0 = off), give the norm to
 * sl_loss_scale_update, and when it says apply, update params at learning rate lr
 * (sl_optim_step_spans); a skipped step leaves params and the optimizer state untouched.
 * spans (nspans (offset, count) pairs within n, or NULL: all of it) holds every
 * nonzero gradient (sl_lm_grad_spans, when nothing but the step wrote the gradients).
 * *norm: the norm before clipping (inf or NaN after an overflow); *applied: 1 when
 * params were updated. Disabled: clip and update, nothing else. SL_ERR_INVALID (the
 * step skipped, message set) at the SL_LOSS_SCALE_MAX_SKIPS-th overflow in a row. */
sl_status_t sl_loss_scale_step(sl_loss_scale_t *ls, sl_backend_t *be, sl_optim_t *opt,
                               float *params, float *grads, size_t n, const size_t *spans,
                               size_t nspans, double clip, double lr, double *norm, int *applied);

#endif
