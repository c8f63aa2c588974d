/* The gradient sums of sync.algorithm allreduce (sl_sync.h): every step, each node's
 * gradient becomes the mean over all nodes, by one allreduce of the whole buffer
 * (sync.exchange dense) or, with unique or allgather, every row shard by its touched
 * rows and the other components whole, in one call of
 * src/embed/sl_sparse_allreduce.h's sl_sparse_allreduce_shards: three collectives a
 * step whatever the shards. A caller of the collectives
 * (src/transport/sl_collective.h) like the all-node average and the final model's: it keeps no
 * state from step to step but its buffers. Not thread-safe; one per node. */
#ifndef SL_GRAD_ALLREDUCE_H
#define SL_GRAD_ALLREDUCE_H

#include "common/sl_status.h"
#include "embed/sl_sparse.h"
#include "sync/sl_sync.h"
#include "sync/sl_sync_common.h"

typedef struct sl_grad_allreduce sl_grad_allreduce_t;

/* For env->algo allreduce with env->size >= 2 and a transport; env's row shards
 * (sparse components, when env->exchange is not dense) have rows x row_len == count,
 * rows >= 1 (the caller checked). SL_ERR_INVALID, SL_ERR_NOMEM. */
sl_status_t sl_grad_allreduce_new(sl_grad_allreduce_t **out, const sl_sync_env_t *env);
/* Frees; accepts NULL, NULLs *g. After a sum that failed, buffers may still be lent to
 * ZeroMQ: destroy the transport first. */
void sl_grad_allreduce_destroy(sl_grad_allreduce_t **g);

/* grads (nparams) becomes the mean over the members (sl_members.h: a member that stops
 * answering is dropped and the whole step's sums redone from a copy of grads); step (0-based,
 * increasing from call to call) numbers the round: every frame is component ncomps's, round step
 * (by rows: the rounds 3 step + phase of sl_sparse_allreduce.h, allgathers and allreduce). touched
 * (ncomps, a set for each component that goes by rows; unused, may be NULL, when env->exchange is
 * dense) are the rows this node's step touched; they are emptied. stat (ncomps): each row shard's
 * rounds and rows are brought up to date (its bytes are the gradients', component ncomps;
 * sl_sync_gradients times the whole call). Errors are fatal: the members could not re-form, or the
 * transport's fatal codes. */
sl_status_t sl_grad_allreduce_mean(sl_grad_allreduce_t *g, float *grads, long step,
                                   sl_rowset_t *touched, sl_sync_stat_t *stat);

#endif
