/* The ZeroMQ link (sl_link_zmq.h): the context, the bound ROUTER and the DEALERs to the
 * peers, sends (copied or lent), and reading one message off the ROUTER into a
 * validated frame. It owns the sockets and the routing ids; it must not touch the
 * mailbox, the counters per kind or the lanes (the dispatcher and sl_link_shm.c do).
 *
 * Who sent a frame: with CURVE (o->secret set; sl_curve.h), the rank whose key the
 * connection authenticated, which the ROUTER hands over with each message; a frame whose
 * header names another sender is dropped. Without it (cluster.security: none), the
 * routing id of the connection: our DEALERs set it to "S" + their rank + a per-process
 * nonce, which keeps a misconfigured process from speaking for another rank but proves
 * nothing. With frame MACs instead (o->frame_mac, cluster.security: mac; sl_frame_mac.h)
 * the sockets are plain and every message ends in a trailer part, checked against the
 * claimed sender's key before anything else of the frame is read. ROUTER/DEALER rather
 * than PULL/PUSH for the per-connection identity; both pairs fair-queue the input and
 * block (or time out) at the high-water mark.
 *
 * Stripes (o->stripes > 1): a node opens that many DEALERs to each peer, stripe j's on
 * sending I/O thread j (modulo their number), and its frames of
 * SL_TRANSPORT_STRIPE_MIN_BYTES and more take them in turn, so that several threads
 * and TCP connections carry one peer's large frames at once (one connection is bound
 * by the one thread that writes it); a frame large enough goes in pieces, one on each
 * stripe (sl_zmq_pieces.h), so that even a single frame is carried by several
 * connections, and is put together by the receiver. Smaller frames all take stripe 0,
 * in order. Each
 * stripe's DEALERs have a routing id of their own (a ROUTER drops a second connection
 * with an id it holds: the stripe is mixed into the nonce's last byte), and with frame
 * MACs count their own sequence numbers
 * (sl_frame_mac.h). A receiver takes any number of stripes: its ROUTER takes every
 * connection, and each frame or piece is checked on its own. */
#include "transport/sl_link_zmq.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_rng.h"
#include "transport/sl_curve.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_lent.h"
#include "transport/sl_zmq_pieces.h"
#include "transport/sl_zmq_status.h"
#include "transport/sl_zmq_watch.h"

#define ID_BYTES 9 /* 'S', rank u32 le, nonce u32 le: a routing id must not start with 0 */
_Static_assert(SL_PIECE_MAX >= SL_TRANSPORT_MAX_STRIPES, "a frame goes in a piece a stripe");
#define ENDPOINT_MAX 1024

typedef struct {
    sl_link_env_t env;
    const sl_transport_opts_t *o;
    char bind[ENDPOINT_MAX];
    char endpoint[ENDPOINT_MAX]; /* as bound, wildcards resolved */
    void *ctx;
    sl_curve_t *curve;   /* NULL unless CURVE */
    sl_frame_mac_t *mac; /* NULL unless frame MACs */
    void *router;
    unsigned stripes;           /* DEALERs per peer (o->stripes) */
    void **peers;               /* (size, stripes) DEALER per peer and stripe, NULL until
                                   the first send on it */
    void **watches;             /* (size) the watch of each peer's stripe 0 DEALER
                                   (sl_zmq_watch.h): its loss is the peer's */
    unsigned *next_stripe;      /* (size) the stripe of the next large frame to a peer */
    uint64_t *piece_ids;        /* (size) frames sent in pieces to a peer: their ids */
    sl_pieces_t *pieces;        /* frames coming in pieces, being put together */
    unsigned nwatches;          /* watches started: their unique names */
    char **endpoints;           /* (size) copies, NULL before sl_link_zmq_connect */
    unsigned char id[ID_BYTES]; /* routing id of our DEALERs (of stripe 0) */
    uint64_t *send_masks;       /* (stripes) ZMQ_AFFINITY of each stripe's DEALERs */
    uint64_t sent, received;    /* frames through the socket */
    uint64_t *stripe_sent;      /* (stripes) frames sent on each stripe */
    /* the first part (routing id) of a message that zmq_wait received while blocking,
     * for zmq_recv_frame to go on from; rcvtimeo_ms: the ROUTER's ZMQ_RCVTIMEO */
    zmq_msg_t first;
    int have_first, rcvtimeo_ms;
    sl_lent_t lent; /* payloads still held by ZeroMQ; its I/O thread gives them back */
} zlink_t;

/* A frame read off the ROUTER: the messages that hold its bytes (header and payload,
 * in one part or two; with frame MACs, then the trailer), or, for a frame that came in
 * pieces, its payload put together. */
#define MAX_PARTS 3
typedef struct {
    sl_link_frame_t f;
    zmq_msg_t part[MAX_PARTS];
    int nparts;
    void *whole; /* the payload of a frame put together from pieces, else NULL */
} zframe_t;

static void
release_frame(sl_link_frame_t *lf)
{
    zframe_t *z = (zframe_t *)lf;

    for (int i = 0; i < z->nparts; i++)
        zmq_msg_close(&z->part[i]);
    free(z->whole);
    free(z);
}

/* Called by ZeroMQ (usually its I/O thread) when it no longer needs a lent payload. */
static void
give_back(void *data, void *hint)
{
    zlink_t *z = hint;

    (void)data;
    sl_lent_give_back(&z->lent);
}

static sl_status_t
set_int(void *s, int opt, int v, const char *what)
{
    if (zmq_setsockopt(s, opt, &v, sizeof v) != 0)
        return sl_zmq_fail("transport: setting %s", what);
    return SL_OK;
}

static sl_status_t
set_u64(void *s, int opt, uint64_t v, const char *what)
{
    if (zmq_setsockopt(s, opt, &v, sizeof v) != 0)
        return sl_zmq_fail("transport: setting %s", what);
    return SL_OK;
}

static void zmq_close_link(void **ctx);

/* The ZMQ_AFFINITY masks of the ROUTER (receiving) and of the DEALERs (sending) with
 * threads I/O threads: the first half, rounded up, and the rest; 0 (any thread) when
 * there is one. ZeroMQ places each new connection on the least loaded thread its
 * socket's mask allows, so a node's reading and writing never wait for each other.
 * With several stripes, stripe j's DEALERs get sending thread j alone (modulo their
 * number): left to ZeroMQ, a peer's stripes, connected at once, could share one. */
static void
affinity_masks(unsigned threads, unsigned stripes, uint64_t *recv_mask, uint64_t *send_masks)
{
    unsigned half = (threads + 1) / 2;
    uint64_t all = threads >= 64 ? UINT64_MAX : ((uint64_t)1 << threads) - 1;

    *recv_mask = 0;
    for (unsigned j = 0; j < stripes; j++)
        send_masks[j] = 0;
    if (threads < 2)
        return;
    *recv_mask = half >= 64 ? UINT64_MAX : ((uint64_t)1 << half) - 1;
    for (unsigned j = 0; j < stripes; j++)
        send_masks[j] = stripes == 1 ? all & ~*recv_mask
                                     : (uint64_t)1 << (half + j % (threads - half));
}

static sl_status_t
zmq_open(void **out, const sl_link_env_t *env)
{
    const sl_transport_opts_t *o = env->o;
    zlink_t *z;
    sl_status_t st;
    size_t len;
    int64_t maxmsg = (int64_t)(SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_PAYLOAD);
    uint64_t recv_mask;
    uint32_t nonce;

    *out = NULL;
    z = calloc(1, sizeof *z);
    if (!z)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    z->env = *env;
    z->o = o;
    z->rcvtimeo_ms = -1; /* ZeroMQ's default: block */
    snprintf(z->bind, sizeof z->bind, "%s", o->bind_endpoint);
    sl_lent_init(&z->lent);
    nonce = (uint32_t)sl_mix64((uint64_t)getpid() << 32 ^ (uint64_t)(sl_clock_now() * 1e9) ^
                               (uintptr_t)z);
    z->id[0] = 'S';
    for (int i = 0; i < 4; i++) {
        z->id[1 + i] = (unsigned char)(o->rank >> (8 * i));
        z->id[5 + i] = (unsigned char)(nonce >> (8 * i));
    }
    z->stripes = o->stripes ? o->stripes : 1;
    z->peers = calloc((size_t)o->size * z->stripes, sizeof *z->peers);
    z->watches = calloc(o->size, sizeof *z->watches);
    z->next_stripe = calloc(o->size, sizeof *z->next_stripe);
    z->send_masks = calloc(z->stripes, sizeof *z->send_masks);
    z->stripe_sent = calloc(z->stripes, sizeof *z->stripe_sent);
    z->piece_ids = calloc(o->size, sizeof *z->piece_ids);
    if (!z->peers || !z->watches || !z->next_stripe || !z->send_masks || !z->stripe_sent ||
        !z->piece_ids) {
        st = sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
        goto fail;
    }
    /* a MAC'd frame's checksum covers its header only (sl_wire.h: a local frame) */
    SL_TRY_GOTO(sl_pieces_new(&z->pieces, o->size, o->mailbox_frames, o->mailbox_bytes,
                              !o->frame_mac),
                st, fail);
    z->ctx = zmq_ctx_new();
    if (!z->ctx) {
        st = sl_zmq_fail("transport: creating the ZeroMQ context");
        goto fail;
    }
    if (zmq_ctx_set(z->ctx, ZMQ_IO_THREADS, (int)o->io_threads) != 0) {
        st = sl_zmq_fail("transport: %u ZeroMQ I/O threads", o->io_threads);
        goto fail;
    }
    affinity_masks(o->io_threads, z->stripes, &recv_mask, z->send_masks);
    z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
    if (!z->router) {
        st = sl_zmq_fail("transport: creating a ZeroMQ socket");
        goto fail;
    }
    SL_TRY_GOTO(set_int(z->router, ZMQ_LINGER, 0, "ZMQ_LINGER"), st, fail);
    SL_TRY_GOTO(set_u64(z->router, ZMQ_AFFINITY, recv_mask, "ZMQ_AFFINITY"), st, fail);
    if (o->frame_mac) {
        SL_TRY_GOTO(sl_frame_mac_new(&z->mac, o->rank, o->size), st, fail);
    } else if (o->secret) {
        SL_TRY_GOTO(sl_curve_new(&z->curve, z->ctx, o->secret, o->rank, o->size), st, fail);
        SL_TRY_GOTO(sl_curve_server(z->curve, z->router), st, fail);
    }
    if (zmq_setsockopt(z->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
        st = sl_zmq_fail("transport: setting ZMQ_MAXMSGSIZE");
        goto fail;
    }
    if (zmq_bind(z->router, z->bind) != 0) {
        st = sl_zmq_fail("transport: rank %u: binding %s", (unsigned)o->rank, z->bind);
        goto fail;
    }
    len = sizeof z->endpoint;
    if (zmq_getsockopt(z->router, ZMQ_LAST_ENDPOINT, z->endpoint, &len) != 0) {
        st = sl_zmq_fail("transport: reading the bound endpoint");
        goto fail;
    }
    *out = z;
    return SL_OK;
fail:
    zmq_close_link((void **)&z);
    return st;
}

static void
zmq_close_link(void **ctx)
{
    zlink_t *z = ctx ? *ctx : NULL;

    if (!z)
        return;
    if (z->have_first)
        zmq_msg_close(&z->first);
    if (z->router)
        zmq_close(z->router);
    for (size_t i = 0; z->peers && i < (size_t)z->o->size * z->stripes; i++)
        if (z->peers[i]) {
            if (i % z->stripes == 0)
                sl_zmq_watch_stop(z->peers[i], &z->watches[i / z->stripes]);
            zmq_setsockopt(z->peers[i], ZMQ_LINGER, &z->o->linger_ms, sizeof z->o->linger_ms);
            zmq_close(z->peers[i]);
        }
    sl_curve_destroy(&z->curve); /* its ZAP socket must close before the context ends */
    sl_frame_mac_destroy(&z->mac);
    if (z->ctx) /* blocks until queued frames left or linger_ms passed; gives lent back */
        while (zmq_ctx_term(z->ctx) != 0 && zmq_errno() == EINTR)
            ;
    for (uint32_t p = 0; z->endpoints && p < z->o->size; p++)
        free(z->endpoints[p]);
    free(z->endpoints);
    free(z->peers);
    free(z->watches);
    free(z->next_stripe);
    free(z->send_masks);
    free(z->stripe_sent);
    free(z->piece_ids);
    sl_pieces_destroy(&z->pieces);
    sl_lent_fini(&z->lent);
    free(z);
    *ctx = NULL;
}

const char *
sl_link_zmq_endpoint(const void *ctx)
{
    const zlink_t *z = ctx;

    return z->endpoint;
}

sl_status_t
sl_link_zmq_connect(void *ctx, const char *const *endpoints)
{
    zlink_t *z = ctx;

    if (z->endpoints)
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: called twice",
                          (unsigned)z->o->rank);
    z->endpoints = calloc(z->o->size, sizeof *z->endpoints);
    if (!z->endpoints)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    for (uint32_t p = 0; p < z->o->size; p++) {
        if (p == z->o->rank || !endpoints[p])
            continue;
        z->endpoints[p] = strdup(endpoints[p]);
        if (!z->endpoints[p])
            return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    }
    return SL_OK;
}

const unsigned char *
sl_link_zmq_session(const void *ctx)
{
    const zlink_t *z = ctx;

    return z->mac ? sl_frame_mac_session(z->mac) : NULL;
}

void
sl_link_zmq_learn_sessions(void *ctx, const unsigned char *sessions)
{
    zlink_t *z = ctx;

    if (z->mac)
        sl_frame_mac_learn(z->mac, sessions);
}

int
sl_link_zmq_set_session(void *ctx, uint32_t peer, const unsigned char *session)
{
    zlink_t *z = ctx;

    return z->mac ? sl_frame_mac_set_session(z->mac, peer, session) : -1;
}

uint64_t
sl_link_zmq_refused(const void *ctx)
{
    const zlink_t *z = ctx;

    return z->curve ? sl_curve_refused(z->curve) : 0;
}

int
sl_link_zmq_known(const void *ctx, uint32_t peer)
{
    const zlink_t *z = ctx;

    return z->endpoints && peer < z->o->size && z->endpoints[peer];
}

uint64_t
sl_link_zmq_stripe_frames(const void *ctx, unsigned stripe)
{
    const zlink_t *z = ctx;

    return stripe < z->stripes ? z->stripe_sent[stripe] : 0;
}

static int
zmq_serves(void *ctx, uint32_t peer)
{
    (void)ctx;
    (void)peer;
    return 1;
}

/* The DEALER to peer on stripe, connected on first use. It queues frames before the
 * connection is up and while a dead peer is being retried (ZMQ_IMMEDIATE off), so a
 * send blocks only when that queue is full. Stripe 0's is watched for the loss of its
 * connection (zmq_watch); a DEALER that cannot be watched still works, its peer's death
 * found by timeouts. */
static sl_status_t
peer_socket(zlink_t *z, uint32_t peer, unsigned stripe, void **out)
{
    void **slot = &z->peers[(size_t)peer * z->stripes + stripe];
    void *s;
    sl_status_t st;
    int hb = z->o->heartbeat_ms;
    char tag[32];
    unsigned char id[ID_BYTES];

    if (*slot) {
        *out = *slot;
        return SL_OK;
    }
    if (!z->endpoints || !z->endpoints[peer])
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: no endpoint for rank %u",
                          (unsigned)z->o->rank, (unsigned)peer);
    s = zmq_socket(z->ctx, ZMQ_DEALER);
    if (!s)
        return sl_zmq_fail("transport: rank %u: socket to rank %u", (unsigned)z->o->rank,
                           (unsigned)peer);
    memcpy(id, z->id, sizeof id);
    id[ID_BYTES - 1] ^= (unsigned char)stripe;
    if (zmq_setsockopt(s, ZMQ_ROUTING_ID, id, sizeof id) != 0) {
        st = sl_zmq_fail("transport: setting ZMQ_ROUTING_ID");
        goto fail;
    }
    SL_TRY_GOTO(set_int(s, ZMQ_LINGER, z->o->linger_ms, "ZMQ_LINGER"), st, fail);
    SL_TRY_GOTO(set_u64(s, ZMQ_AFFINITY, z->send_masks[stripe], "ZMQ_AFFINITY"), st, fail);
    if (z->curve)
        SL_TRY_GOTO(sl_curve_client(z->curve, s, peer), st, fail);
    if (hb > 0) {
        SL_TRY_GOTO(set_int(s, ZMQ_HEARTBEAT_IVL, hb, "ZMQ_HEARTBEAT_IVL"), st, fail);
        SL_TRY_GOTO(set_int(s, ZMQ_HEARTBEAT_TIMEOUT, 3 * hb, "ZMQ_HEARTBEAT_TIMEOUT"), st, fail);
        SL_TRY_GOTO(set_int(s, ZMQ_HEARTBEAT_TTL, 3 * hb, "ZMQ_HEARTBEAT_TTL"), st, fail);
    }
    if (stripe == 0) {
        snprintf(tag, sizeof tag, "%u-%u", (unsigned)peer, z->nwatches++);
        if (sl_zmq_watch_start(z->ctx, s, tag, &z->watches[peer]) != SL_OK)
            z->watches[peer] = NULL;
    }
    if (zmq_connect(s, z->endpoints[peer]) != 0) {
        if (stripe == 0)
            sl_zmq_watch_stop(s, &z->watches[peer]);
        st = sl_zmq_fail("transport: rank %u: connecting to rank %u at %s", (unsigned)z->o->rank,
                         (unsigned)peer, z->endpoints[peer]);
        goto fail;
    }
    *slot = s;
    *out = s;
    return SL_OK;
fail:
    zmq_close(s);
    return st;
}

/* Waits up to timeout_ms for socket s to be ready for events (ZMQ_POLLIN/POLLOUT).
 * SL_ERR_TIMEOUT when it is not. */
static sl_status_t
wait_ready(void *s, short events, int timeout_ms, const char *what)
{
    zmq_pollitem_t it = {s, 0, events, 0};
    int rc = zmq_poll(&it, 1, timeout_ms);

    if (rc < 0)
        return sl_zmq_fail("%s", what);
    return rc == 0 ? SL_ERR_TIMEOUT : SL_OK;
}

/* Waits up to wait_ms for room to send on s, asking the socket first (ZMQ_EVENTS makes
 * no system call, where a zmq_poll makes two). */
static sl_status_t
room_to_send(void *s, int wait_ms)
{
    int events = 0;
    size_t len = sizeof events;

    if (zmq_getsockopt(s, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLOUT))
        return SL_OK;
    return wait_ready(s, ZMQ_POLLOUT, wait_ms, "transport: polling");
}

/* Queues piece j of n of frame id (header hb, payload) on peer's stripe j, lending its
 * bytes (lend) or copying them; s has room. */
static sl_status_t
send_piece(zlink_t *z, void *s, uint32_t peer, const unsigned char *hb, uint64_t id, unsigned j,
           unsigned n, const unsigned char *payload, uint64_t payload_bytes, int lend)
{
    zmq_msg_t head, body;
    unsigned char *hd, trailer[SL_MAC_TRAILER_BYTES];
    uint64_t off, len;
    int more = z->mac ? ZMQ_SNDMORE : 0;

    sl_pieces_span(payload_bytes, n, j, &off, &len);
    if (zmq_msg_init_size(&head, SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES) != 0)
        return sl_zmq_fail("transport: a piece's header");
    hd = zmq_msg_data(&head);
    memcpy(hd, hb, SL_WIRE_HEADER_BYTES);
    sl_pieces_desc(hd + SL_WIRE_HEADER_BYTES, id, j, n);
    if (lend) {
        sl_lent_take(&z->lent);
        /* ZeroMQ only reads it; the cast drops const for its signature */
        if (zmq_msg_init_data(&body, (void *)(uintptr_t)(payload + off), len, give_back, z) != 0) {
            give_back(NULL, z);
            zmq_msg_close(&head);
            return sl_zmq_fail("transport: lending %" PRIu64 " bytes", len);
        }
    } else if (zmq_msg_init_size(&body, len) != 0) {
        zmq_msg_close(&head);
        return sl_zmq_fail("transport: %" PRIu64 " bytes", len);
    } else {
        memcpy(zmq_msg_data(&body), payload + off, len);
    }
    if (z->mac)
        sl_frame_mac_seal(z->mac, peer, j, hd, SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES,
                          payload + off, len, trailer);
    /* once the first part is queued the rest of the message always is */
    if (zmq_msg_send(&head, s, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
        zmq_msg_send(&body, s, ZMQ_DONTWAIT | more) < 0 ||
        (z->mac && zmq_send(s, trailer, sizeof trailer, ZMQ_DONTWAIT) < 0)) {
        sl_status_t st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank,
                                     (unsigned)peer);
        zmq_msg_close(&head);
        zmq_msg_close(&body);
        return st;
    }
    zmq_msg_close(&head);
    zmq_msg_close(&body);
    z->stripe_sent[j]++;
    return SL_OK;
}

/* Queues the frame (h, header hb, payload) in n pieces to h->receiver, piece j on
 * stripe j, once every stripe has room within wait_ms (< 0: no limit): a frame goes
 * out whole or not at all. */
static sl_status_t
send_pieces(zlink_t *z, const sl_wire_header_t *h, const unsigned char *hb, const void *payload,
            unsigned n, int lend, int wait_ms)
{
    uint32_t peer = h->receiver;
    void *s[SL_PIECE_MAX];
    double deadline = sl_clock_now() + wait_ms / 1e3;
    sl_status_t st = SL_OK;
    uint64_t id;

    for (unsigned j = 0; j < n; j++)
        SL_TRY(peer_socket(z, peer, j, &s[j]));
    for (unsigned j = 0; j < n && st == SL_OK; j++) {
        double left_ms = (deadline - sl_clock_now()) * 1e3;
        st = room_to_send(s[j], wait_ms < 0 ? -1 : left_ms > 0 ? (int)left_ms : 0);
    }
    if (st == SL_ERR_TIMEOUT)
        return sl_err_set(st, "transport: rank %u: no room to send %s to rank %u within %d ms",
                          (unsigned)z->o->rank, sl_wire_kind_name(h->kind), (unsigned)peer,
                          wait_ms);
    SL_TRY(st);
    id = z->piece_ids[peer]++;
    for (unsigned j = 0; j < n; j++)
        SL_TRY(send_piece(z, s[j], peer, hb, id, j, n, payload, h->payload_bytes, lend));
    z->sent++;
    return SL_OK;
}

/* Queues the frame (h, payload) on the DEALER to h->receiver, lending the payload
 * (SL_SEND_LEND) or copying it; a frame large enough for several stripes in pieces. */
static sl_status_t
zmq_send_frame(void *ctx, const sl_wire_header_t *h, const void *payload, int flags, int wait_ms)
{
    zlink_t *z = ctx;
    unsigned char hb[SL_WIRE_HEADER_BYTES];
    uint64_t payload_bytes = h->payload_bytes;
    uint32_t peer = h->receiver;
    zmq_msg_t head, body;
    void *s = NULL;
    sl_status_t st;
    int lend, body_live = 0;
    unsigned char trailer[SL_MAC_TRAILER_BYTES];
    unsigned stripe = 0, pieces;

    /* validates before anything is allocated; a MAC'd frame's checksum covers the
     * header only (sl_wire.h: a local frame) */
    SL_TRY(z->mac ? sl_wire_encode_head(h, hb) : sl_wire_encode(h, payload, hb));
    if (z->mac && !sl_frame_mac_ready(z->mac))
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: no session keys yet",
                          (unsigned)z->o->rank);
    pieces = z->o->whole_frames ? 1 : sl_pieces_count(payload_bytes, z->stripes);
    if (pieces > 1)
        return send_pieces(z, h, hb, payload, pieces,
                           (flags & SL_SEND_LEND) && payload_bytes >= SL_TRANSPORT_ZEROCOPY_BYTES,
                           wait_ms);
    if (z->stripes > 1 && payload_bytes >= SL_TRANSPORT_STRIPE_MIN_BYTES)
        stripe = z->next_stripe[peer]; /* moves on once the frame is queued */
    SL_TRY(peer_socket(z, peer, stripe, &s));
    lend = (flags & SL_SEND_LEND) && payload_bytes >= SL_TRANSPORT_ZEROCOPY_BYTES;
    if (zmq_msg_init_size(&head, SL_WIRE_HEADER_BYTES + (lend ? 0 : payload_bytes)) != 0)
        return sl_zmq_fail("transport: %" PRIu64 " bytes", payload_bytes);
    memcpy(zmq_msg_data(&head), hb, SL_WIRE_HEADER_BYTES);
    if (!lend && payload_bytes)
        memcpy((char *)zmq_msg_data(&head) + SL_WIRE_HEADER_BYTES, payload, payload_bytes);
    if (lend) {
        sl_lent_take(&z->lent);
        /* ZeroMQ only reads it; the cast drops const for its signature */
        if (zmq_msg_init_data(&body, (void *)(uintptr_t)payload, payload_bytes, give_back, z) !=
            0) {
            give_back(NULL, z);
            zmq_msg_close(&head);
            return sl_zmq_fail("transport: lending %" PRIu64 " bytes", payload_bytes);
        }
        body_live = 1;
    }
    st = room_to_send(s, wait_ms);
    if (st == SL_OK && z->mac) /* a sequence number is used only by a frame that leaves */
        sl_frame_mac_seal(z->mac, peer, stripe, hb, SL_WIRE_HEADER_BYTES, payload, payload_bytes,
                          trailer);
    if (st == SL_OK &&
        zmq_msg_send(&head, s, ZMQ_DONTWAIT | (lend || z->mac ? ZMQ_SNDMORE : 0)) < 0)
        st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank,
                         (unsigned)peer);
    /* once the first part is queued the rest of the message always is */
    if (st == SL_OK && lend) {
        if (zmq_msg_send(&body, s, ZMQ_DONTWAIT | (z->mac ? ZMQ_SNDMORE : 0)) < 0)
            st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank,
                             (unsigned)peer);
        else
            body_live = 0;
    }
    if (st == SL_OK && z->mac && zmq_send(s, trailer, sizeof trailer, ZMQ_DONTWAIT) < 0)
        st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank,
                         (unsigned)peer);
    zmq_msg_close(&head); /* empty after a successful send */
    if (body_live)
        zmq_msg_close(&body); /* gives the payload back */
    if (st == SL_ERR_TIMEOUT)
        return sl_err_set(st,
                          "transport: rank %u: no room to send %s to rank %u within "
                          "%d ms",
                          (unsigned)z->o->rank, sl_wire_kind_name(h->kind), (unsigned)peer,
                          wait_ms);
    if (st == SL_OK) {
        z->sent++;
        z->stripe_sent[stripe]++;
        if (payload_bytes >= SL_TRANSPORT_STRIPE_MIN_BYTES)
            z->next_stripe[peer] = (stripe + 1) % z->stripes;
    }
    return st;
}

/* With frame MACs: checks the last part, the trailer, against the frame before it
 * (header and payload in one part or two) and the sender its header claims, and takes
 * the trailer off. SL_OK with *sender proven, else the drop reason (SL_DROP_FRAMING,
 * SL_DROP_MAC, SL_DROP_REPLAY). */
static unsigned
check_trailer(zlink_t *z, zframe_t *f, uint32_t *sender)
{
    zmq_msg_t *t;
    const unsigned char *head;
    const void *payload = NULL;
    size_t head_len, payload_len = 0;
    sl_mac_verdict_t v;

    if (f->nparts < 2)
        return SL_DROP_FRAMING;
    t = &f->part[f->nparts - 1];
    if (zmq_msg_size(t) != SL_MAC_TRAILER_BYTES)
        return SL_DROP_FRAMING;
    head = zmq_msg_data(&f->part[0]);
    head_len = zmq_msg_size(&f->part[0]);
    if (head_len < SL_WIRE_HEADER_BYTES)
        return SL_DROP_MAC;
    if (f->nparts == 3) {
        payload = zmq_msg_data(&f->part[1]);
        payload_len = zmq_msg_size(&f->part[1]);
    }
    *sender = sl_get_u32(head + 16); /* claimed: the tag proves it or not */
    v = sl_frame_mac_check(z->mac, *sender, head, head_len, payload, payload_len, zmq_msg_data(t));
    if (v != SL_MAC_OK)
        return v == SL_MAC_REPLAY ? SL_DROP_REPLAY : SL_DROP_MAC;
    zmq_msg_close(t);
    f->nparts--;
    return SL_OK;
}

/* Drops frame f (reason: a sl_wire_reason_t or SL_DROP_*) that came through the
 * connection of rank idrank (UINT32_MAX: not a shoal node's). */
static void
drop_frame(zlink_t *z, zframe_t *f, unsigned reason, uint32_t idrank)
{
    char detail[160];

    if (idrank == UINT32_MAX)
        snprintf(detail, sizeof detail, "from a connection that is not a shoal node");
    else
        snprintf(detail, sizeof detail, "from the connection of rank %u", (unsigned)idrank);
    z->env.drop(z->env.host, reason, detail);
    release_frame(&f->f);
}

/* f is a piece of a frame (sl_zmq_pieces.h) through the connection of rank idrank: kept
 * until its frame is whole, which then becomes *out once it passes every check a frame
 * in one message passes; *out stays NULL meanwhile. */
static void
take_piece(zlink_t *z, zframe_t *f, uint32_t idrank, sl_link_frame_t **out)
{
    const sl_transport_opts_t *o = z->o;
    unsigned char head[SL_WIRE_HEADER_BYTES];
    const unsigned char *p0 = zmq_msg_data(&f->part[0]);
    sl_wire_header_t h;
    sl_wire_reason_t why = sl_wire_decode_head(p0, o->run_id, o->rank, o->size, &h);
    void *whole;
    uint64_t hash;

    if (why != SL_WIRE_OK || idrank != h.sender) {
        drop_frame(z, f, why != SL_WIRE_OK ? (unsigned)why : SL_DROP_IDENTITY, idrank);
        return;
    }
    memcpy(head, p0, sizeof head);
    switch (sl_pieces_take(z->pieces, h.sender, head, &h, p0 + SL_WIRE_HEADER_BYTES,
                           zmq_msg_data(&f->part[1]), zmq_msg_size(&f->part[1]), &whole,
                           &hash)) {
    case SL_PIECES_HELD:
        release_frame(&f->f);
        return;
    case SL_PIECES_BAD:
        z->env.drop(z->env.host, SL_DROP_FRAMING, "a piece that fits no frame in pieces");
        release_frame(&f->f);
        return;
    case SL_PIECES_FULL:
        z->env.drop(z->env.host, SL_DROP_MAILBOX_FULL, "pieces of too many frames held");
        release_frame(&f->f);
        return;
    case SL_PIECES_WHOLE:
        break;
    }
    for (int i = 0; i < f->nparts; i++)
        zmq_msg_close(&f->part[i]);
    f->nparts = 0;
    f->whole = whole;
    f->f.pub.payload = whole;
    /* the checksum was computed as the pieces were copied */
    why = z->mac ? sl_wire_decode_parts_local(head, sizeof head, whole, h.payload_bytes, o->run_id,
                                              o->rank, o->size, &f->f.pub.h)
                 : sl_wire_decode_hashed(head, h.payload_bytes, hash, o->run_id, o->rank, o->size,
                                         &f->f.pub.h);
    if (why != SL_WIRE_OK) {
        drop_frame(z, f, why, idrank);
        return;
    }
    z->received++;
    *out = &f->f;
}

/* Reads one message if one is waiting: *out is then a validated frame, or NULL when it
 * was dropped or was a piece of a frame not yet whole; *got says whether there was a
 * message at all. */
static sl_status_t
zmq_recv_frame(void *ctx, sl_link_frame_t **out, int *got)
{
    zlink_t *z = ctx;
    const sl_transport_opts_t *o = z->o;
    zmq_msg_t id, m;
    zframe_t *f;
    sl_wire_reason_t why;
    const unsigned char *idb;
    int more, extra = 0;
    uint32_t idrank = 0;
    char detail[160];

    *out = NULL;
    *got = 0;
    zmq_msg_init(&id);
    if (z->have_first) {
        zmq_msg_move(&id, &z->first);
        zmq_msg_close(&z->first);
        z->have_first = 0;
    } else if (zmq_msg_recv(&id, z->router, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&id);
        return zmq_errno() == EAGAIN ? SL_OK
                                     : sl_zmq_fail("transport: rank %u", (unsigned)o->rank);
    }
    *got = 1;
    more = zmq_msg_more(&id);
    f = calloc(1, sizeof *f);
    if (f)
        f->f.release = release_frame;
    /* the rest of a multipart message is already here: these reads do not block */
    while (more) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->router, 0) < 0) {
            sl_status_t st = sl_zmq_fail("transport: rank %u", (unsigned)o->rank);
            zmq_msg_close(&m);
            zmq_msg_close(&id);
            if (f)
                release_frame(&f->f);
            return st;
        }
        more = zmq_msg_more(&m);
        if (f && f->nparts < (z->mac ? 3 : 2)) {
            zmq_msg_init(&f->part[f->nparts]);
            zmq_msg_move(&f->part[f->nparts++], &m);
        } else {
            extra = 1;
        }
        zmq_msg_close(&m);
    }
    idb = zmq_msg_data(&id);
    if (z->mac) {
        idrank = UINT32_MAX; /* until the trailer proves a sender */
    } else if (z->curve) {
        if (!f || f->nparts == 0 || sl_curve_sender(&f->part[0], &idrank) != 0)
            idrank = UINT32_MAX;
    } else if (zmq_msg_size(&id) == ID_BYTES && idb[0] == 'S') {
        for (int i = 3; i >= 0; i--)
            idrank = idrank << 8 | idb[1 + i];
    } else {
        idrank = UINT32_MAX;
    }
    zmq_msg_close(&id);
    if (!f)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    if (extra || f->nparts == 0) {
        snprintf(detail, sizeof detail, "%s parts", extra ? "too many" : "no");
        z->env.drop(z->env.host, SL_DROP_FRAMING, detail);
        release_frame(&f->f);
        return SL_OK;
    }
    if (z->mac) {
        unsigned verdict = check_trailer(z, f, &idrank);
        if (verdict != SL_OK) {
            z->env.drop(z->env.host, verdict, "not proven by the claimed sender's session key");
            release_frame(&f->f);
            return SL_OK;
        }
    }
    if (f->nparts == 2 &&
        zmq_msg_size(&f->part[0]) == SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES) {
        take_piece(z, f, idrank, out);
        return SL_OK;
    }
    if (f->nparts == 1) {
        why = (z->mac ? sl_wire_decode_local : sl_wire_decode)(
            zmq_msg_data(&f->part[0]), zmq_msg_size(&f->part[0]), o->run_id, o->rank, o->size,
            &f->f.pub.h, &f->f.pub.payload);
    } else {
        f->f.pub.payload = zmq_msg_data(&f->part[1]);
        why = (z->mac ? sl_wire_decode_parts_local : sl_wire_decode_parts)(
            zmq_msg_data(&f->part[0]), zmq_msg_size(&f->part[0]), f->f.pub.payload,
            zmq_msg_size(&f->part[1]), o->run_id, o->rank, o->size, &f->f.pub.h);
    }
    if (why != SL_WIRE_OK || idrank != f->f.pub.h.sender) {
        drop_frame(z, f, why != SL_WIRE_OK ? (unsigned)why : SL_DROP_IDENTITY, idrank);
        return SL_OK;
    }
    z->received++;
    *out = &f->f;
    return SL_OK;
}

/* Blocks in a receive rather than a zmq_poll (one system call to sleep, not three),
 * keeping the first part of what came for zmq_recv_frame. */
static sl_status_t
zmq_wait(void *ctx, int timeout_ms)
{
    zlink_t *z = ctx;

    if (z->have_first)
        return SL_OK;
    if (timeout_ms != z->rcvtimeo_ms) {
        SL_TRY(set_int(z->router, ZMQ_RCVTIMEO, timeout_ms, "ZMQ_RCVTIMEO"));
        z->rcvtimeo_ms = timeout_ms;
    }
    zmq_msg_init(&z->first);
    if (zmq_msg_recv(&z->first, z->router, 0) >= 0) {
        z->have_first = 1;
        return SL_OK;
    }
    zmq_msg_close(&z->first);
    return zmq_errno() == EAGAIN ? SL_OK
                                 : sl_zmq_fail("transport: rank %u", (unsigned)z->o->rank);
}

static sl_status_t
zmq_wait_sent(void *ctx, int timeout_ms)
{
    zlink_t *z = ctx;
    uint64_t left = sl_lent_wait(&z->lent, timeout_ms);

    if (left)
        return sl_err_set(SL_ERR_TIMEOUT,
                          "transport: rank %u: %" PRIu64
                          " lent payloads still queued after %d ms",
                          (unsigned)z->o->rank, left, timeout_ms);
    return SL_OK;
}

static void
zmq_stats(const void *ctx, uint64_t *sent, uint64_t *received)
{
    const zlink_t *z = ctx;

    *sent = z->sent;
    *received = z->received;
}

/* peer is taken out of the run, or is a new process: the DEALER to it goes with the
 * frames still queued to it (no linger: they were for a process that is gone, or one the
 * run no longer counts on; their lent payloads come back, so that they cannot hold
 * sl_transport_wait_sent for ever); the next send connects again, to endpoint when it is
 * given. */
static void
zmq_forget(void *ctx, uint32_t peer, const char *endpoint)
{
    zlink_t *z = ctx;
    int no_linger = 0;

    if (peer >= z->o->size || !z->peers)
        return;
    for (unsigned j = 0; j < z->stripes; j++) {
        void **slot = &z->peers[(size_t)peer * z->stripes + j];
        if (!*slot)
            continue;
        if (j == 0)
            sl_zmq_watch_stop(*slot, &z->watches[peer]);
        zmq_setsockopt(*slot, ZMQ_LINGER, &no_linger, sizeof no_linger);
        zmq_close(*slot);
        *slot = NULL;
    }
    z->next_stripe[peer] = 0;
    sl_pieces_forget(z->pieces, peer); /* its frames in pieces will not be finished */
    /* the next DEALERs get another routing id: the new process's ROUTER may already hold
     * the old DEALER's connection (it reconnected to the same endpoint) and would refuse
     * a second one with the same id, silently */
    for (int i = 5; i < ID_BYTES && ++z->id[i] == 0; i++)
        ;
    if (endpoint && z->endpoints &&
        (!z->endpoints[peer] || strcmp(z->endpoints[peer], endpoint) != 0)) {
        char *copy = strdup(endpoint);
        if (!copy)
            return; /* out of memory: the old endpoint stays, the best there is */
        free(z->endpoints[peer]);
        z->endpoints[peer] = copy;
    }
}

static void
zmq_watch(void *ctx)
{
    zlink_t *z = ctx;

    for (uint32_t p = 0; p < z->o->size; p++) {
        sl_zmq_watch_news_t news =
            z->watches[p] ? sl_zmq_watch_read(z->watches[p]) : SL_ZMQ_WATCH_QUIET;
        if (news != SL_ZMQ_WATCH_QUIET && z->env.link_down)
            z->env.link_down(z->env.host, p, news == SL_ZMQ_WATCH_LOST);
    }
}

const sl_link_ops_t sl_link_zmq_ops = {
    .name = "zmq",
    .kinds = 0,
    .open = zmq_open,
    .close = zmq_close_link,
    .serves = zmq_serves,
    .send = zmq_send_frame,
    .recv = zmq_recv_frame,
    .take = NULL,
    .nap_ms = NULL,
    .sleep = NULL,
    .wait = zmq_wait,
    .wait_sent = zmq_wait_sent,
    .stats = zmq_stats,
    .forget = zmq_forget,
    .watch = zmq_watch,
};
