/* The ZeroMQ link's sending side (sl_link_zmq_internal.h): the DEALER to each peer and
 * stripe, made on first use, the I/O threads they write from, and queueing a frame on
 * them, copied or lent, whole or in pieces. sl_link_zmq.c owns the link, closes the
 * DEALERs and reads what comes in.
 *
 * Stripes (o->stripes > 1): a node opens that many DEALERs to each peer, stripe j's on
 * sending I/O thread j (modulo their number), and its frames of
 * SL_TRANSPORT_STRIPE_MIN_BYTES and more of the kinds that carry a whole snapshot or
 * state to a peer (sl_transport_striped_kind: gossip snapshots, not ring segments)
 * take them in turn, so that several threads and TCP connections carry one peer's
 * large frames at once (one connection is bound by the one thread that writes it); a
 * frame large enough goes in pieces, one on each stripe (sl_zmq_pieces.h), so that even
 * a single frame is carried by several connections, and is put together by the
 * receiver (sl_link_zmq.c). Smaller frames, and the collectives' frames of any size,
 * all take stripe 0, whole and in order. Each stripe's DEALERs have a routing id of
 * their own (a ROUTER drops a second connection with an id it holds: the stripe is
 * mixed into the nonce's last byte), and with frame MACs count their own sequence
 * numbers (sl_frame_mac.h). */
#include "transport/sl_link_zmq_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_hash.h"
#include "transport/sl_curve.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_lent.h"
#include "transport/sl_zmq_pieces.h"
#include "transport/sl_zmq_status.h"
#include "transport/sl_zmq_watch.h"

_Static_assert(SL_PIECE_MAX >= SL_TRANSPORT_MAX_STRIPES, "a frame goes in a piece a stripe");

/* Which frames take the stripes: those of the exchanges that send a whole snapshot or
 * state to one peer, one large frame to it at a time: gossip snapshots (gossip, and MA
 * and BMUF over a neighbourhood: gossip-*, local-*, the delta snapshots too), the
 * sparse exchange's row sets and values, a rejoining node's state, point-to-point data
 * (the final gathering's models and averages, sl_transport_send by hand). The frames
 * of the collectives (ring allreduce and allgather, chain broadcast: sl_collective.c)
 * keep to stripe 0, whole, whatever their size, as do the control frames and any kind
 * added later. Measured on a 16-core Intel Xeon (bench/README.md, "Stripes"), two
 * stripes with pieces carried a gossip exchange 7-25% faster than one connection in 8
 * of 9 cells, but slowed the ring allreduce's 16 MiB by 18-43% (a ring step streams a
 * segment as a window of chunks, which presumably keeps its link busy already, and
 * pieces add a copy on the receiving side). On one stripe a ring's chunks also arrive
 * in the order its receiver asks for them (recv_chunk waits for chunk j; one that
 * overtakes it is filed in the mailbox first). The collectives' results need no order
 * (every chunk is found by its key): this rule changes how bytes travel, never which
 * bytes arrive. */
int
sl_transport_striped_kind(unsigned kind)
{
    switch (kind) {
    case SL_WIRE_GOSSIP_SNAPSHOT:
    case SL_WIRE_SPARSE_INDEX:
    case SL_WIRE_SPARSE_VALUES:
    case SL_WIRE_STATE:
    case SL_WIRE_DATA:
        return 1;
    default:
        return 0;
    }
}

/* Called by ZeroMQ (usually its I/O thread) when it no longer needs a lent payload. */
static void
give_back(void *data, void *hint)
{
    sl_link_zmq_t *z = hint;

    (void)data;
    sl_lent_give_back(&z->lent);
}

/* The ZMQ_AFFINITY masks of the ROUTER (receiving) and of the DEALERs (sending) with
 * threads I/O threads: the first half, rounded up, and the rest; 0 (any thread) when
 * there is one. ZeroMQ places each new connection on the least loaded thread its
 * socket's mask allows, so a node's reading and writing never wait for each other.
 * With several stripes, stripe j's DEALERs get sending thread j alone (modulo their
 * number): left to ZeroMQ, a peer's stripes, connected at once, could share one. */
void
sl_link_zmq_affinity_masks(unsigned threads, unsigned stripes, uint64_t *recv_mask,
                           uint64_t *send_masks)
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
        send_masks[j] =
            stripes == 1 ? all & ~*recv_mask : (uint64_t)1 << (half + j % (threads - half));
}

/* The DEALER to peer on stripe, connected on first use. It queues frames before the
 * connection is up and while a dead peer is being retried (ZMQ_IMMEDIATE off), so a
 * send blocks only when that queue is full. Stripe 0's is watched for the loss of its
 * connection (zmq_watch in sl_link_zmq.c); a DEALER that cannot be watched still works,
 * its peer's death found by timeouts. */
static sl_status_t
peer_socket(sl_link_zmq_t *z, uint32_t peer, unsigned stripe, void **out)
{
    void **slot = &z->peers[(size_t)peer * z->stripes + stripe];
    void *s;
    sl_status_t st;
    int hb = z->o->heartbeat_ms;
    char tag[32];
    unsigned char id[SL_LINK_ZMQ_ID_BYTES];

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
    id[SL_LINK_ZMQ_ID_BYTES - 1] ^= (unsigned char)stripe;
    if (zmq_setsockopt(s, ZMQ_ROUTING_ID, id, sizeof id) != 0) {
        st = sl_zmq_fail("transport: setting ZMQ_ROUTING_ID");
        goto fail;
    }
    SL_TRY_GOTO(sl_link_zmq_set_int(s, ZMQ_LINGER, z->o->linger_ms, "ZMQ_LINGER"), st, fail);
    SL_TRY_GOTO(sl_link_zmq_set_u64(s, ZMQ_AFFINITY, z->send_masks[stripe], "ZMQ_AFFINITY"), st,
                fail);
    if (z->curve)
        SL_TRY_GOTO(sl_curve_client(z->curve, s, peer), st, fail);
    if (hb > 0) {
        SL_TRY_GOTO(sl_link_zmq_set_int(s, ZMQ_HEARTBEAT_IVL, hb, "ZMQ_HEARTBEAT_IVL"), st, fail);
        SL_TRY_GOTO(sl_link_zmq_set_int(s, ZMQ_HEARTBEAT_TIMEOUT, 3 * hb, "ZMQ_HEARTBEAT_TIMEOUT"),
                    st, fail);
        SL_TRY_GOTO(sl_link_zmq_set_int(s, ZMQ_HEARTBEAT_TTL, 3 * hb, "ZMQ_HEARTBEAT_TTL"), st,
                    fail);
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

/* m made to carry len bytes at p without a copy: lent to ZeroMQ until give_back. */
static sl_status_t
lend_body(sl_link_zmq_t *z, zmq_msg_t *m, const void *p, uint64_t len)
{
    sl_lent_take(&z->lent);
    /* ZeroMQ only reads it; the cast drops const for its signature */
    if (zmq_msg_init_data(m, (void *)(uintptr_t)p, len, give_back, z) != 0) {
        give_back(NULL, z);
        return sl_zmq_fail("transport: lending %" PRIu64 " bytes", len);
    }
    return SL_OK;
}

/* The payload's bytes [off, off + len) copied to dst, hashed on the way into sum when
 * the frame's checksum covers its payload (sum not NULL; sl_hash_bulk_add_copy). */
static void
copy_payload(sl_hash_bulk_t *sum, void *dst, const unsigned char *payload, uint64_t off,
             uint64_t len)
{
    if (sum)
        sl_hash_bulk_add_copy(sum, dst, payload + off, len, off);
    else
        memcpy(dst, payload + off, len);
}

/* The checksum into header hb (sl_wire_encode_head's) once the payload was copied into
 * sum, or, lent, from the payload where it lies. */
static void
set_payload_hash(unsigned char *hb, const sl_hash_bulk_t *sum, int lend, const void *payload,
                 uint64_t payload_bytes)
{
    sl_wire_set_checksum(hb, lend ? sl_wire_checksum(hb, payload, payload_bytes)
                                  : sl_hash_bulk_final(sum));
}

/* Queues piece j of n of frame id (header hb, body: its bytes, lent or copied) on
 * peer's stripe j; s has room. body is closed either way. */
static sl_status_t
send_piece(sl_link_zmq_t *z, void *s, uint32_t peer, const unsigned char *hb, uint64_t id,
           unsigned j, unsigned n, zmq_msg_t *body)
{
    zmq_msg_t head;
    unsigned char *hd, trailer[SL_MAC_TRAILER_BYTES];
    int more = z->mac ? ZMQ_SNDMORE : 0;

    if (zmq_msg_init_size(&head, SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES) != 0) {
        zmq_msg_close(body);
        return sl_zmq_fail("transport: a piece's header");
    }
    hd = zmq_msg_data(&head);
    memcpy(hd, hb, SL_WIRE_HEADER_BYTES);
    sl_pieces_desc(hd + SL_WIRE_HEADER_BYTES, id, j, n);
    if (z->mac)
        sl_frame_mac_seal(z->mac, peer, j, hd, SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES,
                          zmq_msg_data(body), zmq_msg_size(body), trailer);
    /* once the first part is queued the rest of the message always is */
    if (zmq_msg_send(&head, s, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
        zmq_msg_send(body, s, ZMQ_DONTWAIT | more) < 0 ||
        (z->mac && zmq_send(s, trailer, sizeof trailer, ZMQ_DONTWAIT) < 0)) {
        sl_status_t st =
            sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank, (unsigned)peer);
        zmq_msg_close(&head);
        zmq_msg_close(body);
        return st;
    }
    zmq_msg_close(&head);
    zmq_msg_close(body);
    z->stripe_sent[j]++;
    return SL_OK;
}

/* Queues the frame (h, header hb, payload) in n pieces to h->receiver, piece j on
 * stripe j, once every stripe has room within wait_ms (< 0: no limit): a frame goes
 * out whole or not at all. The pieces' bodies are made first (lent, or copied and
 * hashed on the way when sum is not NULL), since every piece's header carries the
 * checksum of the whole. */
static sl_status_t
send_pieces(sl_link_zmq_t *z, const sl_wire_header_t *h, unsigned char *hb, const void *payload,
            unsigned n, int lend, sl_hash_bulk_t *sum, int wait_ms)
{
    uint32_t peer = h->receiver;
    void *s[SL_PIECE_MAX];
    zmq_msg_t body[SL_PIECE_MAX];
    double deadline = sl_clock_now() + wait_ms / 1e3;
    sl_status_t st = SL_OK;
    unsigned made = 0;
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
    for (; made < n; made++) {
        uint64_t off, len;

        sl_pieces_span(h->payload_bytes, n, made, &off, &len);
        if (lend) {
            st = lend_body(z, &body[made], (const unsigned char *)payload + off, len);
            if (st != SL_OK)
                break;
        } else if (zmq_msg_init_size(&body[made], len) != 0) {
            st = sl_zmq_fail("transport: %" PRIu64 " bytes", len);
            break;
        } else {
            copy_payload(sum, zmq_msg_data(&body[made]), payload, off, len);
        }
    }
    if (st != SL_OK) {
        while (made > 0)
            zmq_msg_close(&body[--made]);
        return st;
    }
    if (sum)
        set_payload_hash(hb, sum, lend, payload, h->payload_bytes);
    id = z->piece_ids[peer]++;
    for (unsigned j = 0; j < n; j++) {
        st = send_piece(z, s[j], peer, hb, id, j, n, &body[j]);
        if (st != SL_OK) { /* the pieces not handed to send_piece yet */
            for (unsigned k = j + 1; k < n; k++)
                zmq_msg_close(&body[k]);
            return st;
        }
    }
    z->sent++;
    return SL_OK;
}

/* Queues the frame (h, payload) on the DEALER to h->receiver, lending the payload
 * (SL_SEND_LEND) or copying it; a frame large enough for several stripes in pieces. */
sl_status_t
sl_link_zmq_send_frame(void *ctx, const sl_wire_header_t *h, const void *payload, int flags,
                       int wait_ms)
{
    sl_link_zmq_t *z = ctx;
    unsigned char hb[SL_WIRE_HEADER_BYTES];
    uint64_t payload_bytes = h->payload_bytes;
    uint32_t peer = h->receiver;
    zmq_msg_t head, body;
    void *s = NULL;
    sl_status_t st;
    int lend, body_live = 0;
    unsigned char trailer[SL_MAC_TRAILER_BYTES];
    unsigned stripe = 0, pieces;
    sl_hash_bulk_t sum, *hashing = NULL;
    /* takes the stripes: in pieces, or whole and in turn (sl_transport_striped_kind) */
    int striped = z->stripes > 1 && sl_transport_striped_kind(h->kind) &&
                  payload_bytes >= SL_TRANSPORT_STRIPE_MIN_BYTES;

    /* validates before anything is allocated. The checksum covers the payload, but on
     * a link whose messages CURVE or MACs prove (sl_wire.h: a local frame): its hash is
     * taken as the payload is copied, or from a lent payload itself, and put in the
     * header before it leaves. */
    SL_TRY(sl_wire_encode_head(h, hb));
    if (!sl_link_zmq_proven(z)) {
        sl_hash_bulk_init(&sum, sl_wire_checksum_seed(hb), payload_bytes);
        hashing = &sum;
    }
    if (z->mac && !sl_frame_mac_ready(z->mac))
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: no session keys yet",
                          (unsigned)z->o->rank);
    lend = (flags & SL_SEND_LEND) && payload_bytes >= SL_TRANSPORT_ZEROCOPY_BYTES;
    pieces = striped && !z->o->whole_frames ? sl_pieces_count(payload_bytes, z->stripes) : 1;
    if (pieces > 1)
        return send_pieces(z, h, hb, payload, pieces, lend, hashing, wait_ms);
    if (striped)
        stripe = z->next_stripe[peer]; /* moves on once the frame is queued */
    SL_TRY(peer_socket(z, peer, stripe, &s));
    if (zmq_msg_init_size(&head, SL_WIRE_HEADER_BYTES + (lend ? 0 : payload_bytes)) != 0)
        return sl_zmq_fail("transport: %" PRIu64 " bytes", payload_bytes);
    if (!lend && payload_bytes)
        copy_payload(hashing, (char *)zmq_msg_data(&head) + SL_WIRE_HEADER_BYTES, payload, 0,
                     payload_bytes);
    if (hashing)
        set_payload_hash(hb, hashing, lend, payload, payload_bytes);
    memcpy(zmq_msg_data(&head), hb, SL_WIRE_HEADER_BYTES);
    if (lend) {
        st = lend_body(z, &body, payload, payload_bytes);
        if (st != SL_OK) {
            zmq_msg_close(&head);
            return st;
        }
        body_live = 1;
    }
    st = room_to_send(s, wait_ms);
    if (st == SL_OK && z->mac) /* a sequence number is used only by a frame that leaves */
        sl_frame_mac_seal(z->mac, peer, stripe, hb, SL_WIRE_HEADER_BYTES, payload, payload_bytes,
                          trailer);
    if (st == SL_OK &&
        zmq_msg_send(&head, s, ZMQ_DONTWAIT | (lend || z->mac ? ZMQ_SNDMORE : 0)) < 0)
        st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank, (unsigned)peer);
    /* once the first part is queued the rest of the message always is */
    if (st == SL_OK && lend) {
        if (zmq_msg_send(&body, s, ZMQ_DONTWAIT | (z->mac ? ZMQ_SNDMORE : 0)) < 0)
            st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank, (unsigned)peer);
        else
            body_live = 0;
    }
    if (st == SL_OK && z->mac && zmq_send(s, trailer, sizeof trailer, ZMQ_DONTWAIT) < 0)
        st = sl_zmq_fail("transport: rank %u to rank %u", (unsigned)z->o->rank, (unsigned)peer);
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
        if (striped)
            z->next_stripe[peer] = (stripe + 1) % z->stripes;
    }
    return st;
}
