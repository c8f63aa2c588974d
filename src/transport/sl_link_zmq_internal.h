/* The ZeroMQ link's state, shared by the link (sl_link_zmq.c: opening, closing,
 * receiving) and its sending side (sl_link_zmq_send.c: DEALERs, stripes, pieces);
 * internal to src/transport. */
#ifndef SL_LINK_ZMQ_INTERNAL_H
#define SL_LINK_ZMQ_INTERNAL_H

#include <stdint.h>
#include <zmq.h>

#include "common/sl_status.h"
#include "transport/sl_curve.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_lent.h"
#include "transport/sl_link.h"
#include "transport/sl_zmq_pieces.h"

/* a DEALER's routing id: 'S', rank u32 le, nonce u32 le (a routing id must not start
 * with 0) */
#define SL_LINK_ZMQ_ID_BYTES 9
#define SL_LINK_ZMQ_ENDPOINT_MAX 1024

typedef struct sl_link_zmq {
    sl_link_env_t env;
    const sl_transport_opts_t *o;
    char bind[SL_LINK_ZMQ_ENDPOINT_MAX];
    char endpoint[SL_LINK_ZMQ_ENDPOINT_MAX]; /* as bound, wildcards resolved */
    void *ctx;
    sl_curve_t *curve;   /* NULL unless CURVE */
    sl_frame_mac_t *mac; /* NULL unless frame MACs */
    void *router;
    unsigned stripes;      /* DEALERs per peer (o->stripes) */
    void **peers;          /* (size, stripes) DEALER per peer and stripe, NULL until
                              the first send on it */
    void **watches;        /* (size) the watch of each peer's stripe 0 DEALER
                              (sl_zmq_watch.h): its loss is the peer's */
    unsigned *next_stripe; /* (size) the stripe of the next large frame to a peer */
    uint64_t *piece_ids;   /* (size) frames sent in pieces to a peer: their ids */
    sl_pieces_t *pieces;   /* frames coming in pieces, being put together */
    unsigned nwatches;     /* watches started: their unique names */
    char **endpoints;      /* (size) copies, NULL before sl_link_zmq_connect */
    unsigned char id[SL_LINK_ZMQ_ID_BYTES]; /* routing id of our DEALERs (of stripe 0) */
    uint64_t *send_masks;                   /* (stripes) ZMQ_AFFINITY of each stripe's DEALERs */
    uint64_t sent, received;                /* frames through the socket */
    uint64_t *stripe_sent;                  /* (stripes) frames sent on each stripe */
    /* the first part (routing id) of a message that zmq_wait received while blocking,
     * for zmq_recv_frame to go on from; rcvtimeo_ms: the ROUTER's ZMQ_RCVTIMEO */
    zmq_msg_t first;
    int have_first, rcvtimeo_ms;
    sl_lent_t lent; /* payloads still held by ZeroMQ; its I/O thread gives them back */
} sl_link_zmq_t;

/* Whether CURVE or frame MACs authenticate every message of z, payload included: its
 * frames are then local (sl_wire.h), their checksums over the header only. */
static inline int
sl_link_zmq_proven(const sl_link_zmq_t *z)
{
    return z->o->frame_mac || z->o->secret;
}

/* zmq_setsockopt of an int or a uint64_t option (what names it in the error);
 * SL_ERR_TRANSPORT etc. as sl_zmq_fail. */
sl_status_t sl_link_zmq_set_int(void *s, int opt, int v, const char *what);
sl_status_t sl_link_zmq_set_u64(void *s, int opt, uint64_t v, const char *what);

/* The ZMQ_AFFINITY masks for threads I/O threads: *recv_mask for the ROUTER, send_masks
 * (stripes of them) for each stripe's DEALERs. */
void sl_link_zmq_affinity_masks(unsigned threads, unsigned stripes, uint64_t *recv_mask,
                                uint64_t *send_masks);
/* The link's send op (sl_link_ops_t.send; ctx a sl_link_zmq_t): queues the frame
 * (h, payload; borrowed, or lent with SL_SEND_LEND until ZeroMQ gives it back) to
 * h->receiver within wait_ms. SL_ERR_TIMEOUT when there is no room, SL_ERR_INVALID
 * (no endpoint or no session keys yet), SL_ERR_TRANSPORT. */
sl_status_t sl_link_zmq_send_frame(void *ctx, const sl_wire_header_t *h, const void *payload,
                                   int flags, int wait_ms);

#endif
