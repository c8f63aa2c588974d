/* Staging between a device backend and the sync algorithms, which work on host memory
 * (src/sync). With a backend whose memory is not the host's (anything but cpu) and
 * something to sync, the trainer keeps a host mirror of the parameters, page-locked
 * memory from the backend's host_alloc (kernels/sl_backend.h), and stages through it:
 * the gradients around sl_sync_gradients (allreduce), the components due at a step
 * around sl_sync_after_step, the whole model to start the sync state and for the final
 * average. The mirror holds the parameters, or with allreduce the gradients while they
 * are averaged; it is never the sync object's own state (what checkpoints carry of
 * sync is that object's host memory, and is not staged).
 *
 * Copies are synchronous (to_host / to_device on the backend's stream); running them
 * on a stream of their own, overlapped with compute, is for later and would stay
 * behind this interface. */
#ifndef SL_STAGING_H
#define SL_STAGING_H

#include <stddef.h>

#include "common/sl_status.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "sync/sl_sync.h"

typedef struct sl_staging sl_staging_t;

/* Whether sync must go through a host mirror: there is something to sync (nranks > 1
 * and an algorithm other than none) and be's memory is not the host's, or
 * SHOAL_STAGE_SYNC=1 in the environment asks for it on cpu too (so that tests run the
 * copies without a device). */
int sl_staging_needed(const sl_backend_t *be, int nranks, sl_sync_algorithm_t algorithm);

/* A mirror of nparams floats, allocated with be's host_alloc (be borrowed: it must
 * outlive the mirror). SL_ERR_NOMEM / SL_ERR_DEVICE (message set). Destroy with
 * sl_staging_destroy (accepts NULL, NULLs the pointer), before the backend. */
sl_status_t sl_staging_new(sl_staging_t **out, sl_backend_t *be, size_t nparams);
void sl_staging_destroy(sl_staging_t **s);

/* The whole of dev (nparams floats of the backend) copied into the mirror; *host
 * points at the mirror (valid until the next staging call). */
sl_status_t sl_staging_pull(sl_staging_t *s, const float *dev, const float **host);

/* allreduce: grads (nparams floats of the backend) to the mirror, averaged there by
 * sl_sync_gradients(sync, mirror, step), and back. */
sl_status_t sl_staging_gradients(sl_staging_t *s, sl_sync_t *sync, float *grads, long step);

/* The model sync after steps_done steps: the components of comps (nc, the model's
 * layout) that sl_sync_due names go to the mirror (one copy per run of adjacent due
 * components), sl_sync_after_step(sync, mirror, steps_done) syncs them there, and they
 * come back to params. After a failed sync they stay as the step left them. */
sl_status_t sl_staging_after_step(sl_staging_t *s, sl_sync_t *sync, float *params,
                                  const sl_component_t *comps, int nc, long steps_done);

/* sl_sync_flush (overlapped sync's pending updates) through the mirror: the whole of
 * params down, the updates applied there, back up. */
sl_status_t sl_staging_flush(sl_staging_t *s, sl_sync_t *sync, float *params);

#endif
