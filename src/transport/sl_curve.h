/* CURVE on the ZeroMQ sockets of one context (the transport's, the rendezvous'): every
 * connection is encrypted and both ends prove a rank's key, derived from the run's secret
 * (sl_secret.h). A server socket gets this node's keypair and the ZAP handler of the
 * context, a thread that admits only the run's rank keys and names each connection by its
 * rank ("User-Id" metadata); a client socket gets this node's keypair and the public key
 * of the rank it connects to, so it talks to nobody else. A frame's sender is then the
 * rank of its connection (sl_curve_sender), never something the peer wrote.
 *
 * Owns the keys of the run's ranks and the ZAP thread; must not know frames or the
 * rendezvous protocol. Lifetime: sl_curve_new after zmq_ctx_new; close the context's
 * sockets, then sl_curve_destroy (stops the thread and closes its sockets), then
 * zmq_ctx_term. */
#ifndef SL_CURVE_H
#define SL_CURVE_H

#include <stdint.h>
#include <zmq.h>

#include "common/sl_status.h"
#include "transport/sl_secret.h"

typedef struct sl_curve sl_curve_t;

/* Whether this libzmq was built with CURVE. */
int sl_curve_available(void);

/* Keys of a run of size ranks from secret (copied, wiped at destroy) for rank me, on
 * ZeroMQ context zctx (borrowed). SL_ERR_UNSUPPORTED when libzmq has no CURVE. */
sl_status_t sl_curve_new(sl_curve_t **out, void *zctx, const sl_secret_t *secret, uint32_t me,
                         uint32_t size);
/* Stops the ZAP thread; accepts NULL, NULLs *c. */
void sl_curve_destroy(sl_curve_t **c);

/* Makes sock (before its bind) a CURVE server with this rank's key that admits only
 * the run's ranks, and starts the ZAP thread, which also counts the socket's failed
 * handshakes. Once per sl_curve_t. */
sl_status_t sl_curve_server(sl_curve_t *c, void *sock);
/* Makes sock (before its connect) a CURVE client with this rank's key that accepts only
 * rank server_rank at the other end. */
sl_status_t sl_curve_client(sl_curve_t *c, void *sock, uint32_t server_rank);

/* The rank whose key authenticated the connection message m came on: 0 with *rank set,
 * -1 when m carries no rank (not from a CURVE server socket of this module). */
int sl_curve_sender(zmq_msg_t *m, uint32_t *rank);

/* Connections the server socket refused so far: failed handshakes (a peer that does
 * not know this rank's public key, or proves a bad one) and ZAP refusals (a key not of
 * the run). */
uint64_t sl_curve_refused(const sl_curve_t *c);

#endif
