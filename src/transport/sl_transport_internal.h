/* The transport's state, shared by the dispatcher (sl_transport.c) and its control
 * frames (sl_transport_control.c: aborts and hellos); internal to src/transport. */
#ifndef SL_TRANSPORT_INTERNAL_H
#define SL_TRANSPORT_INTERNAL_H

#include <stdint.h>

#include "transport/sl_link.h"
#include "transport/sl_mailbox.h"
#include "transport/sl_transport.h"

#define SL_TRANSPORT_ENDPOINT_MAX 1024
#define SL_TRANSPORT_NLINKS 3 /* the media: ZeroMQ (the base), emulated, shared memory */
#define SL_TRANSPORT_BASE 0

struct sl_transport {
    sl_transport_opts_t o;
    char bind[SL_TRANSPORT_ENDPOINT_MAX];
    sl_link_t links[SL_TRANSPORT_NLINKS]; /* one per medium */
    sl_link_t **route;                    /* (size) the link that carries frames to each peer */
    sl_mailbox_t *mb;
    sl_transport_stat_t *stats; /* (nstats) */
    size_t nstats, stats_cap;
    uint64_t drops[SL_DROP_NREASONS];
    int aborted; /* a peer said it stops */
    uint32_t abort_rank;
    char abort_msg[256];
    /* (size) per rank: sl_clock_now() when a frame of a current or later round was last
     * accepted from it (0: never), that frame's key, and the time before it, put back
     * when that frame is refused after all (sl_transport_refuse) */
    double *heard, *heard_before;
    sl_wire_key_t *heard_key;
    sl_wire_key_t *missed; /* (size) per rank: the last key waited for in vain (kind 0:
                              none); the frame, coming late, proves it alive */
    uint32_t *comebacks;   /* (size) per rank: hellos taken (sl_transport_comebacks) */
    double *down_at;       /* (size) per rank: sl_clock_now() when the connection to it
                              went, 0 while it is up (sl_transport_gone) */
};

/* Counts one frame of (kind, component) sent (sent = 1) or received. SL_ERR_NOMEM. */
sl_status_t sl_transport_count_msg(sl_transport_t *t, unsigned kind, uint32_t component,
                                   unsigned encoding, uint64_t bytes, int sent);
/* Counts a dropped frame and logs the first of each reason (detail may be NULL). */
void sl_transport_note_drop(sl_transport_t *t, unsigned reason, uint64_t n, const char *detail);

/* SL_ERR_SHUTDOWN with the reason of the abort taken. */
sl_status_t sl_transport_abort_status(const sl_transport_t *t);
/* Takes a peer's abort frame: keeps its reason (the first abort only). */
void sl_transport_note_abort(sl_transport_t *t, const sl_link_frame_t *f);
/* Takes a peer's hello: every link forgets what it kept for the old process of that
 * rank; a hello that is not an endpoint is dropped. */
void sl_transport_take_hello(sl_transport_t *t, const sl_link_frame_t *f);

#endif
