/* ZeroMQ errors as shoal statuses, in one place for every ZeroMQ user (the transport's
 * ZeroMQ link, the rendezvous): STYLE.md "Errors". Owns only that mapping; it must not
 * touch sockets or know about frames. */
#ifndef SL_ZMQ_STATUS_H
#define SL_ZMQ_STATUS_H

#include "common/sl_status.h"

/* The status of ZeroMQ error number e: EAGAIN -> SL_ERR_TIMEOUT (no room or nothing
 * there in time), ETERM and EINTR -> SL_ERR_SHUTDOWN, anything else -> SL_ERR_TRANSPORT. */
sl_status_t sl_zmq_status(int e);

/* Records the calling thread's last ZeroMQ error (zmq_errno(), read before anything else
 * can change it) as "<what>: <zmq_strerror>" with sl_zmq_status's code, and returns that
 * code: `return sl_zmq_fail("binding %s", ep);`. Callers that treat EAGAIN or EINTR as
 * "not yet" test zmq_errno() before they call it. */
sl_status_t sl_zmq_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
