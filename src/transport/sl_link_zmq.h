/* The ZeroMQ link (sl_link.h), the transport's base medium: one bound ROUTER receives
 * from every peer, one DEALER per peer and stripe sends (made on the first send; large
 * frames take a peer's stripes in turn, o->stripes of them). It reaches any
 * host, carries every frame the other links do not, and is the one the dispatcher
 * blocks on. Beside its table it has what only a socket has: an endpoint to bind and
 * the endpoints of the peers. */
#ifndef SL_LINK_ZMQ_H
#define SL_LINK_ZMQ_H

#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_link.h"

extern const sl_link_ops_t sl_link_zmq_ops;

/* The endpoint the ROUTER really bound (wildcards resolved). */
const char *sl_link_zmq_endpoint(const void *ctx);
/* Learns every peer's endpoint (o->size entries by rank, NULL for unknown; copied).
 * SL_ERR_INVALID the second time, SL_ERR_NOMEM. */
sl_status_t sl_link_zmq_connect(void *ctx, const char *const *endpoints);
/* With frame MACs: this node's session key (SL_MAC_SESSION_BYTES), else NULL; and
 * every rank's, by rank, learnt before the first send. */
const unsigned char *sl_link_zmq_session(const void *ctx);
void sl_link_zmq_learn_sessions(void *ctx, const unsigned char *sessions);
/* With frame MACs, after learning them: a new session key for peer (sl_frame_mac_set_session:
 * 1 new, 0 the one held); -1 without frame MACs. */
int sl_link_zmq_set_session(void *ctx, uint32_t peer, const unsigned char *session);
/* Connections the ZAP handler refused (no key of the run); 0 without security. */
uint64_t sl_link_zmq_refused(const void *ctx);
/* Whether peer's endpoint is known (frames to it can be sent). */
int sl_link_zmq_known(const void *ctx, uint32_t peer);
/* Messages (frames and pieces) sent on stripe (0 for a stripe out of range). */
uint64_t sl_link_zmq_stripe_frames(const void *ctx, unsigned stripe);

#endif
