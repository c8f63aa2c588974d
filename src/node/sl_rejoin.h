/* A node process started again for a rank the run lost takes the live state from a
 * node that never stopped (issue: elastic membership; DESIGN.md "Membership"):
 *   the node come back     asks one live node after another (its ring neighbours
 *                          first: rank + 1, rank - 1, rank + 2, ...) for the state,
 *                          waiting the transport's timeout for each
 *   every other node       answers such a request between two of its steps
 *                          (sl_rejoin_serve): its step count, its parameters and its
 *                          sync state (sl_sync_state_save: the BMUF state of every
 *                          component, the touched rows, updates still to apply)
 * Frames (sl_wire.h): SL_WIRE_STATE_REQUEST (no payload), then SL_WIRE_STATE seq 0 the
 * sizes (u64 step, parameters, sync state bytes, optimizer floats, optimizer steps,
 * little-endian), seq 1 the parameters (fp32), seq 2 the sync state (bytes; absent when
 * it is empty), seq 3 the optimizer state (fp32; only in an admission to allreduce).
 * Everything received is checked (sizes against this node's model, optimizer and sync
 * object, values finite, the sync state by sl_sync_state_load) before it is used.
 * allreduce, ma and bmuf admit the node into their member set at a step or block
 * boundary instead (src/sync/sl_members.h "Admission"): there the coordinator pushes
 * the state unasked, after the sync of the admission step (sl_rejoin_push /
 * sl_rejoin_take: the same frames, without the request). */
#ifndef SL_REJOIN_H
#define SL_REJOIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "model/sl_optim.h"
#include "sync/sl_sync.h"
#include "transport/sl_transport.h"

typedef struct {
    uint64_t answered; /* requests seen so far (the transport's count of them) */
} sl_rejoin_server_t;

/* Whether state requests came since the last sl_rejoin_serve: a counter's look, for the
 * caller to fetch the parameters (a device's through the host mirror) only then. */
int sl_rejoin_requested(const sl_rejoin_server_t *srv, const sl_transport_t *tr);

/* Between steps, with the transport free (sl_sync_transport_free): answers every state
 * request that has come (never waiting for one), with step (the steps this node has
 * done), params (nparams, host memory) and sync's state. Costs nothing when none came.
 * Errors: the transport's (a send that finds no room within the transport's timeout is
 * not one: that request goes unanswered, with a warning), SL_ERR_NOMEM. */
sl_status_t sl_rejoin_serve(sl_rejoin_server_t *srv, sl_transport_t *tr, long step,
                            const float *params, size_t nparams, const sl_sync_t *sync);

/* The node come back: the live state into params (nparams) and sync; *step the steps
 * the donor had done, *donor its rank. SL_ERR_TIMEOUT when no node answered ("rejoin:
 * no live node sent the run's state: asked 2, 0, 3, ..."), SL_ERR_FORMAT for a state
 * that does not fit this node (another model or sync algorithm) or is not finite, the
 * transport's errors. */
sl_status_t sl_rejoin_fetch(sl_transport_t *tr, size_t nparams, sl_sync_t *sync, float *params,
                            long *step, int *donor);

/* The coordinator of an admission: this node's state (as sl_rejoin_serve sends it) to
 * peer, logged, with opt's state when opt is not NULL (allreduce: the optimizer state is
 * the same on every member). The transport's errors, SL_ERR_UNSUPPORTED for a state too
 * large, SL_ERR_NOMEM. */
sl_status_t sl_rejoin_push(sl_transport_t *tr, int peer, long step, const float *params,
                           size_t nparams, const sl_sync_t *sync, const sl_optim_t *opt);
/* The node admitted: the state donor pushes, its first frame within wait_ms (the others
 * within the transport's timeout), the optimizer's into opt when not NULL (it must then
 * come); as sl_rejoin_fetch otherwise. */
sl_status_t sl_rejoin_take(sl_transport_t *tr, int donor, int wait_ms, size_t nparams,
                           sl_sync_t *sync, sl_optim_t *opt, float *params, long *step);

/* A digest of parameters (nparams) for the logs: the node come back and the one that
 * sent the state print the same. */
uint64_t sl_rejoin_digest(const float *params, size_t nparams);

#endif
