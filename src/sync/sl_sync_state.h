/* The bytes of the sync state a checkpoint carries (the format and its contract are
 * sl_sync_state_bytes / _save / _load's in sl_sync.h): a view of the parts that own the
 * state (the BMUF arrays of sl_sync_average.h, the touched-row sets of sl_sync.c) and
 * their encoding, checked before anything changes. Owns nothing; never sends. */
#ifndef SL_SYNC_STATE_H
#define SL_SYNC_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "embed/sl_sparse.h"
#include "model/sl_model.h"

/* What goes into the state, every pointer borrowed. */
typedef struct {
    sl_sync_algorithm_t algo;     /* in force: the header's first word */
    size_t n;                     /* floats of each BMUF array; 0: none (not a *bmuf) */
    float *omega, *delta, *start; /* (n) each, NULL when n is 0 */
    const sl_component_t *comps;  /* (ncomps) for the messages */
    int ncomps;
    sl_rowset_t *touched; /* (ncomps) or NULL: the sets kept from step to step are those
                             with bits (allreduce keeps none: pass NULL) */
    /* sync.overlap_steps > 0 (sl_overlap.h): the updates pending at the checkpoint */
    size_t ncorr; /* floats of the flat correction buffer (nparams); 0: no overlap */
    int64_t *due; /* (ncomps) the step each component's update is due at; -1: none */
    float *corr;  /* (ncorr) the corrections, at each component's offset */
} sl_sync_state_view_t;

/* The state's length in bytes: 0 when there is no BMUF array, no row set and no
 * overlap. */
size_t sl_sync_state_view_bytes(const sl_sync_state_view_t *v);
/* Writes the state into buf (len bytes, the caller's; len must be the state's length,
 * else SL_ERR_INVALID). */
sl_status_t sl_sync_state_view_save(const sl_sync_state_view_t *v, void *buf, size_t len);
/* Replaces the view's arrays and sets with buf's (len bytes, borrowed), after checking
 * all of it: a wrong length, a header that does not match the view, a BMUF value that
 * is not finite, a row set bit beyond its shard's rows, or a pending update due before
 * step -1 or not finite is SL_ERR_FORMAT ("sync: ...") and nothing changes. */
sl_status_t sl_sync_state_view_load(const sl_sync_state_view_t *v, const void *buf, size_t len);

#endif
