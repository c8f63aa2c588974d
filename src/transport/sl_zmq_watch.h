/* Watching one ZeroMQ connection (the transport's DEALER to a peer) for its loss:
 * a socket monitor and the PAIR socket that reads its events. A peer whose process dies
 * closes its end, and the DEALER sees the connection go at once, where the sync would
 * otherwise wait several rounds of sync.timeout_ms to call it dead. Owns the monitor
 * and its socket only; it must not know peers, frames or liveness. */
#ifndef SL_ZMQ_WATCH_H
#define SL_ZMQ_WATCH_H

#include "common/sl_status.h"

/* What a watch saw since it was last read. */
typedef enum {
    SL_ZMQ_WATCH_QUIET = 0, /* nothing */
    SL_ZMQ_WATCH_LOST,      /* the connection went and is not back */
    SL_ZMQ_WATCH_UP         /* (again) connected */
} sl_zmq_watch_news_t;

/* Starts watching socket s (of ZeroMQ context ctx; before its zmq_connect) under the
 * in-process name tag (unique within ctx): *pair is the socket to read the events from.
 * SL_ERR_TRANSPORT when ZeroMQ refuses. */
sl_status_t sl_zmq_watch_start(void *ctx, void *s, const char *tag, void **pair);

/* Reads every event waiting on pair, never blocking: the last change it shows. */
sl_zmq_watch_news_t sl_zmq_watch_read(void *pair);

/* Stops watching s and closes *pair (NULLed); accepts a NULL *pair. Before s closes. */
void sl_zmq_watch_stop(void *s, void **pair);

#endif
