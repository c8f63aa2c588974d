/* Sync overlapped with compute (sync.overlap_steps tau > 0; sl_sync.h): one worker thread
 * per node runs the exchanges of the model-averaging algorithms while the training
 * thread goes on with its local steps. At a sync point t of component c (t mod H_c ==
 * 0) the training thread hands the worker a snapshot of theta_c; the worker averages
 * the snapshot exactly as a sync without overlap would (sl_sync_average_component, BMUF
 * state included) into theta_new, and keeps the correction theta_new - snapshot; at
 * step t + tau the training thread waits for it if it is not there yet and adds it to
 * the current theta_c, so the local progress of the tau steps stays on top of the
 * synced model (Streaming DiLoCo's overlapped outer step). The step of application is
 * fixed, so results do not depend on when frames arrive. Which components come here is
 * sl_sync.c's choice: the row shards, and the dense ones with sync.overlap_dense (the
 * others it syncs itself, once sl_overlap_wait has given the transport back).
 *
 * While a job is queued or running the worker owns the transport (not thread-safe): the
 * training thread must not touch it until sl_overlap_idle says so. With tau < H_c there
 * is at most one job per component. Jobs run in hand-over order, the same on every node.
 * After a failed job the worker fails the ones queued behind it without running them.
 * Not thread-safe apart from the worker it starts; one per node, used by sl_sync.c. */
#ifndef SL_OVERLAP_H
#define SL_OVERLAP_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "embed/sl_sparse.h"
#include "sync/sl_liveness.h"
#include "sync/sl_sync.h"
#include "sync/sl_sync_average.h"
#include "sync/sl_sync_common.h"

typedef struct sl_overlap sl_overlap_t;

/* Starts the worker for env's components (borrowed, like avg and lv, which it uses from
 * its thread while a job runs). touched (ncomps, or NULL) are the caller's row sets: the
 * worker gets a set of the same size for each component that has one. The worker blocks
 * every signal, so that SIGINT and SIGTERM reach the training thread. SL_ERR_NOMEM,
 * also when the thread cannot start. */
sl_status_t sl_overlap_new(sl_overlap_t **out, const sl_sync_env_t *env, sl_sync_average_t *avg,
                           sl_liveness_t *lv, const sl_rowset_t *touched);
/* Waits for the job in flight and the queued ones (each bounded by the exchange's
 * timeout), stops and joins the worker, frees; accepts NULL, NULLs *o. */
void sl_overlap_destroy(sl_overlap_t **o);

/* Hands component c's block at round to the worker: theta_c of params is copied, the
 * caller's row set *touched (c's, or NULL) is swapped with the worker's empty one, *stat
 * (c's statistics) is carried along; the update is due at step apply_step. end_step: the
 * last hand-over of this step (the worker closes the liveness step after it). c must
 * have no update pending (SL_ASSERT). */
void sl_overlap_hand(sl_overlap_t *o, const float *params, int c, uint64_t round, long apply_step,
                     int end_step, sl_rowset_t *touched, const sl_sync_stat_t *stat);
/* The step at which c's pending update is due, or -1 when there is none. */
long sl_overlap_due(sl_overlap_t *o, int c);
/* Waits for c's exchange if it is not done yet, then theta_c of params +=
 * correction and *stat := the statistics after it; c has nothing pending afterwards.
 * The exchange's error, its message set on this thread, and params unchanged when it
 * failed. */
sl_status_t sl_overlap_apply(sl_overlap_t *o, float *params, int c, sl_sync_stat_t *stat);
/* Waits until every exchange handed over is done (applied or not). */
void sl_overlap_wait(sl_overlap_t *o);
/* Whether no exchange is queued or running: the transport is the caller's until the
 * next hand-over. */
int sl_overlap_idle(sl_overlap_t *o);

/* The pending updates, for checkpoints, after sl_overlap_wait: due (ncomps) := the step
 * each is due at, -1 for none (or an exchange that failed). */
void sl_overlap_pending(sl_overlap_t *o, int64_t *due);
/* The corrections, owned by o: a flat buffer like the parameters, component c's at its
 * offset; only the pending components' ranges mean anything. A checkpoint's are written
 * into it, then handed over by sl_overlap_restore. */
float *sl_overlap_corr(sl_overlap_t *o);
/* After sl_overlap_wait: the pending updates become a checkpoint's: due as above, their
 * corrections already in sl_overlap_corr's buffer. */
void sl_overlap_restore(sl_overlap_t *o, const int64_t *due);

#endif
