/* Peer liveness of the neighbourhood algorithms (gossip-*, local-*): which peers missed
 * or answered the exchanges of the current step, how many steps in a row each missed,
 * and the dead set (sl_sync.h: after SL_SYNC_DEAD_ROUNDS missed rounds in a row in which
 * nothing came from the peer, it is dead: nobody waits for it or pushes to it any more,
 * and it is left out of the final model). Every node decides on its own, from its own
 * exchanges; nothing here sends. A dead node that is heard from again (a frame of a
 * current round: it came back as a new process, or was only stopped) is alive again
 * from the end of that step (a resumed run starts with every peer alive).
 * One per node, borrowed by the averaging (sl_sync_average.h) and the final gather
 * (sl_final.h); not thread-safe. */
#ifndef SL_LIVENESS_H
#define SL_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "sync/sl_members.h"
#include "transport/sl_transport.h"

typedef struct sl_liveness sl_liveness_t;

/* A peer's part in one exchange, for the warning when it misses it. */
typedef enum {
    SL_LIVENESS_CHOSEN, /* a node this one pulls from: "did not answer" */
    SL_LIVENESS_PULLER  /* a node that pulls this one's rows: "did not ask for its rows" */
} sl_liveness_role_t;

/* Every one of size ranks alive. tr (borrowed, may be NULL until sl_liveness_end_step
 * is called) tells when a peer was last heard from; timeout_ms is the exchanges' wait,
 * for the warnings. SL_ERR_INVALID for size < 1, SL_ERR_NOMEM. */
sl_status_t sl_liveness_new(sl_liveness_t **out, sl_transport_t *tr, int size,
                            int timeout_ms);
/* Frees; accepts NULL, NULLs *lv. */
void sl_liveness_destroy(sl_liveness_t **lv);

/* Whether rank r (any int: out of range is not dead) is held for dead; how many are. */
int sl_liveness_is_dead(const sl_liveness_t *lv, int r);
int sl_liveness_ndead(const sl_liveness_t *lv);

/* The live ranks of list (n, in [0, size)) into out (room for n), the ones that missed
 * no exchange of this step first (*nwait of them): the others are not waited for again
 * in the same step (one timeout per step, not one per component), but still get this
 * node's pushes, sets and answers; so do dead ranks whose new process said hello since
 * (sl_transport_comebacks: it came back and needs them to catch up), not waited for
 * until they are heard from. Returns how many. */
size_t sl_liveness_live(const sl_liveness_t *lv, const int *list, int n, uint32_t *out,
                        size_t *nwait);

/* After one exchange of component name at round: peers (n, in [0, size)) were expected
 * in role, the first nwait of them waited for; heard (nheard) are those that did their
 * part. Each peer in heard answered this step; each of the first nwait not in heard
 * missed it, with a warning the first time a rank misses (once per rank for the
 * object's life); the others are not counted either way. */
void sl_liveness_tally(sl_liveness_t *lv, sl_liveness_role_t role, const uint32_t *peers, size_t n,
                       size_t nwait, const uint32_t *heard, size_t nheard, const char *name,
                       uint64_t round);

/* After the exchanges of one step: a dead peer heard from since it was taken for dead
 * is alive again (a log line), its count at 0. A peer that answered none of them and missed one has
 * missed a round, unless the transport heard from it since the last step's end
 * (sl_transport_last_heard: a frame of a current or later round, or its answer come
 * late: late is not dead; a peer that only sends stale, far-off or refused frames is
 * not heard); otherwise its count starts again. SL_SYNC_DEAD_ROUNDS such steps in a row
 * make it dead (a warning); so does its connection going since it was last heard
 * (sl_transport_gone: its process closed it), at once. Needs the transport, and calls
 * its sl_transport_watch: the caller's thread must be the one that uses it. */
void sl_liveness_end_step(sl_liveness_t *lv);

/* The next change of the dead set not taken yet (thread-safe: with overlap the worker
 * makes them): a rank taken for dead (joined 0) or back (joined 1), the live count then
 * (this node's view; epoch 0). 1 and *ev, or 0 when there is none. A rank that changed
 * twice between two calls gives its last change. */
int sl_liveness_next_event(sl_liveness_t *lv, sl_members_event_t *ev);

#endif
