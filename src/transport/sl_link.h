/* The link interface: how the transport (sl_transport.c, the dispatcher) moves whole
 * wire frames through one medium. Each medium is one file behind one table of
 * operations: ZeroMQ (sl_link_zmq.c, the base: any host, and the only one the
 * dispatcher blocks on) and shared-memory lanes (sl_link_shm.c: the same host only).
 * This header owns the contract between the dispatcher and the media; it must not
 * know any one medium.
 *
 * A link serves every peer of one medium at once (one socket, or all lanes of the
 * node). The dispatcher picks, per peer, the first link that serves it and hands it
 * every frame to that peer; a link that does not carry a given frame itself (too small
 * for a lane, no lane yet) hands it on to its base link, the ZeroMQ one. Frames come in
 * from every link; the dispatcher validates nothing more, files them in the mailbox,
 * counts them per kind and answers aborts, so mailbox, collectives and sync never know
 * which medium carried a frame.
 *
 * A link may need frames of its own (a lane's offer, accept and wake-up): it names
 * their kinds in `kinds`, sends them through its base link, and the dispatcher hands
 * them to its `take` whichever medium they came through; they never reach the mailbox.
 *
 * Adding a medium (an emulated link, say: ZeroMQ plus a departure queue) is one file
 * with its table and one entry in the dispatcher's list of media. */
#ifndef SL_LINK_H
#define SL_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "transport/sl_transport.h"
#include "transport/sl_wire.h"

/* A received frame: the public view first (the dispatcher hands out &pub and finds the
 * frame again from it), then how to give its bytes back. A link allocates its frames
 * with more fields after these. */
typedef struct sl_link_frame {
    sl_transport_frame_t pub;
    void (*release)(struct sl_link_frame *f); /* frees f and what holds its bytes */
} sl_link_frame_t;

typedef struct sl_link_ops sl_link_ops_t;

/* A link: its operations and its private state. */
typedef struct {
    const sl_link_ops_t *ops;
    void *ctx;
} sl_link_t;

/* What a link is opened with. Everything is borrowed for the link's life. */
typedef struct {
    const sl_transport_opts_t *o; /* the transport's options (validated) */
    sl_link_t base;               /* the ZeroMQ link; {NULL, NULL} when opening it */
    /* Counts a dropped frame (reason: a sl_wire_reason_t or SL_DROP_*) and logs the
     * first of each reason with detail (may be NULL). */
    void (*drop)(void *host, unsigned reason, const char *detail);
    /* The link's connection to peer went (down 1: its process is most likely gone) or
     * came (again, down 0); called from the link's watch only. */
    void (*link_down)(void *host, uint32_t peer, int down);
    void *host;
} sl_link_env_t;

/* The longest the dispatcher blocks before it polls a link again: no limit. */
#define SL_LINK_NO_NAP (-1)

struct sl_link_ops {
    const char *name; /* "zmq", "shm": for logs */
    /* Bit (1u << kind) for each sl_wire_kind_t of the link's own frames; 0 if none. */
    uint32_t kinds;
    /* SL_OK with *ctx set; the link's own status (SL_ERR_NOMEM, SL_ERR_TRANSPORT, ...)
     * when it cannot open. */
    sl_status_t (*open)(void **ctx, const sl_link_env_t *env);
    /* Frees everything; accepts a NULL *ctx and NULLs it. Frames it handed out must
     * have been released. */
    void (*close)(void **ctx);
    /* Whether frames to peer go through this link (the base serves every peer). */
    int (*serves)(void *ctx, uint32_t peer);
    /* Carries one frame (header h, valid apart from what sl_wire_encode checks;
     * payload of h->payload_bytes) to h->receiver, itself or through its base link:
     * flags and wait_ms as for sl_transport_send. SL_OK when it went out (or is
     * queued), SL_ERR_TIMEOUT when there was no room within wait_ms (then it did not),
     * SL_ERR_INVALID when sl_wire_encode refuses h. */
    sl_status_t (*send)(void *ctx, const sl_wire_header_t *h, const void *payload, int flags,
                        int wait_ms);
    /* Takes one frame that has arrived, never waiting: *got = 0 when none had; *got = 1
     * with *f the caller's validated frame (sender and receiver checked), or *f = NULL
     * when it was dropped (counted through env->drop). NULL: the link receives nothing
     * of its own (everything comes through the base). */
    sl_status_t (*recv)(void *ctx, sl_link_frame_t **f, int *got);
    /* A frame of one of `kinds` from f->pub.h.sender, on any medium: act on it (an
     * offer, an accept). The dispatcher releases it after. NULL when kinds is 0. */
    void (*take)(void *ctx, const sl_link_frame_t *f);
    /* How long (ms) the dispatcher may block in the base's wait before it must call
     * recv again, because frames can arrive here without waking the base; the
     * dispatcher also spins (SL_TRANSPORT_SPIN_US) before it blocks while a link has a
     * bound. SL_LINK_NO_NAP when nothing comes without the base. NULL: no bound. */
    int (*nap_ms)(void *ctx);
    /* on = 1 just before the dispatcher blocks: ask senders to wake it through the base
     * (a doorbell), and return 1 when a frame came meanwhile (the dispatcher then does
     * not block); on = 0 after it woke (return ignored). NULL: nothing to tell. */
    int (*sleep)(void *ctx, int on);
    /* Blocks up to timeout_ms until frames may have come (not a promise that they did).
     * SL_OK either way; SL_ERR_TRANSPORT or SL_ERR_SHUTDOWN when waiting fails. The
     * base's only; NULL for the others. */
    sl_status_t (*wait)(void *ctx, int timeout_ms);
    /* Waits up to timeout_ms until every payload lent to the link (SL_SEND_LEND) is
     * given back: SL_ERR_TIMEOUT when some are still held. NULL: it never holds one. */
    sl_status_t (*wait_sent)(void *ctx, int timeout_ms);
    /* Frames this link carried itself (not those it handed to its base). */
    void (*stats)(const void *ctx, uint64_t *sent, uint64_t *received);
    /* peer is taken out of the run (endpoint NULL: sl_transport_forget), or is a new
     * process come back to the run at endpoint (a hello frame; the endpoint checked
     * printable): drop what was kept for it (its connection and the frames queued to
     * it, their lent payloads given back; its lanes), so that the next frames go to the
     * new one. NULL: the link keeps nothing per peer. */
    void (*forget)(void *ctx, uint32_t peer, const char *endpoint);
    /* Tells env->link_down what the link learnt about its connections since the last
     * call, never waiting. NULL: it has no connections of its own. */
    void (*watch)(void *ctx);
};

#endif
