/* The shared-memory link (sl_link_shm.h): offers each peer it sends large frames to a
 * lane, maps the lanes peers offer, writes frames into lanes and takes them out by
 * polling the doorbells. It owns the lanes' handshake (offer, accept, wake-up frames)
 * and which lanes are in use; the lane's memory layout stays sl_shm_lane.c's, and it
 * must not touch sockets (its frames to peers go through the base link), the mailbox
 * or the counters per kind.
 *
 * Handshake: after a valid frame of at least SL_TRANSPORT_SHM_MIN_BYTES went to a peer
 * over ZeroMQ, the sender creates a lane and offers it; a receiver on the same machine
 * maps it and accepts with the lane's nonce; from then on such frames go into free
 * slots of the lane, and the rest (a full lane, a frame larger than a slot) still over
 * ZeroMQ. A receiver about to block raises the doorbell flag; a sender that publishes
 * while it is raised wakes it with a small frame over ZeroMQ. */
#include "transport/sl_link_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "transport/sl_shm_lane.h"

_Static_assert(SL_SHM_OFFER_BYTES == SL_WIRE_SHM_OFFER_BYTES,
               "the wire's offer size is the lane's offer encoding");

/* Where a peer stands with our lane to it. */
enum { LANE_NONE, LANE_OFFERED, LANE_ACCEPTED, LANE_UNUSABLE };

typedef struct {
    sl_link_env_t env;
    const sl_transport_opts_t *o;
    sl_link_t base;
    /* our lanes to peers, theirs to us (mapped), per peer */
    sl_shm_lane_t **out_lanes, **in_lanes;
    unsigned char *lane_state;     /* LANE_* of out_lanes */
    uint64_t *lane_seen;           /* (size) publications of in_lanes looked for */
    uint32_t nin_lanes, lane_next; /* in_lanes mapped; where the next poll starts */
    /* lanes of peers that came back as new processes: frames taken from them may still
     * be held (in the mailbox), so they stay mapped until the link closes */
    sl_shm_lane_t **retired;
    size_t nretired;
    uint64_t sent, received;
    int refused_logged;
} shm_t;

/* A frame in a lane slot, held until released. */
typedef struct {
    sl_link_frame_t f;
    sl_shm_lane_t *lane; /* borrowed from in_lanes */
    uint32_t slot;
} lane_frame_t;

static void
release_frame(sl_link_frame_t *lf)
{
    lane_frame_t *lfr = (lane_frame_t *)lf;

    sl_shm_lane_release(lfr->lane, lfr->slot);
    free(lfr);
}

static void shm_close(void **ctx);

static sl_status_t
shm_open(void **out, const sl_link_env_t *env)
{
    uint32_t n = env->o->size;
    shm_t *s = calloc(1, sizeof *s);

    *out = NULL;
    if (!s)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    s->env = *env;
    s->o = env->o;
    s->base = env->base;
    s->out_lanes = calloc(n, sizeof *s->out_lanes);
    s->in_lanes = calloc(n, sizeof *s->in_lanes);
    s->lane_state = calloc(n, sizeof *s->lane_state);
    s->lane_seen = calloc(n, sizeof *s->lane_seen);
    if (!s->out_lanes || !s->in_lanes || !s->lane_state || !s->lane_seen) {
        shm_close((void **)&s);
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    }
    *out = s;
    return SL_OK;
}

static void
shm_close(void **ctx)
{
    shm_t *s = ctx ? *ctx : NULL;

    if (!s)
        return;
    for (uint32_t p = 0; s->out_lanes && p < s->o->size; p++)
        sl_shm_lane_destroy(&s->out_lanes[p]);
    for (uint32_t p = 0; s->in_lanes && p < s->o->size; p++)
        sl_shm_lane_destroy(&s->in_lanes[p]);
    for (size_t i = 0; i < s->nretired; i++)
        sl_shm_lane_destroy(&s->retired[i]);
    free(s->retired);
    free(s->out_lanes);
    free(s->in_lanes);
    free(s->lane_state);
    free(s->lane_seen);
    free(s);
    *ctx = NULL;
}

static int
shm_serves(void *ctx, uint32_t peer)
{
    shm_t *s = ctx;

    (void)peer;
    return s->o->shm;
}

/* Sends one of the link's own frames (bytes) through the base link. */
static sl_status_t
send_control(shm_t *s, const sl_wire_key_t *key, const void *payload, uint32_t bytes, int wait_ms)
{
    sl_wire_header_t h =
        sl_wire_header_for(s->o->run_id, s->o->rank, key, bytes, SL_WIRE_BYTES, 1.0f);

    return s->base.ops->send(s->base.ctx, &h, payload, 0, wait_ms);
}

/* Creates our lane to peer and offers it, best effort: a lane that cannot be made
 * leaves that peer's frames on ZeroMQ (said once); an offer that cannot be sent now is
 * made again with the next large frame. */
static void
offer_lane(shm_t *s, uint32_t peer, int wait_ms)
{
    sl_shm_offer_t offer;
    unsigned char ob[SL_SHM_OFFER_BYTES];
    sl_wire_key_t key = {0, 0, 0, peer, SL_WIRE_SHM_OFFER};

    s->lane_state[peer] = LANE_UNUSABLE;
    if (sl_shm_lane_create(&s->out_lanes[peer], s->o->run_id, s->o->rank, peer, s->o->shm_slots,
                           s->o->shm_slot_bytes, &offer) != SL_OK) {
        if (!s->refused_logged++)
            sl_log_info("transport", "rank %u: no shared memory, frames stay on ZeroMQ: %s",
                        (unsigned)s->o->rank, sl_err_msg());
        return;
    }
    sl_shm_offer_encode(&offer, ob);
    if (send_control(s, &key, ob, SL_SHM_OFFER_BYTES, wait_ms) != SL_OK) {
        sl_shm_lane_destroy(&s->out_lanes[peer]);
        s->lane_state[peer] = LANE_NONE;
        return;
    }
    s->lane_state[peer] = LANE_OFFERED;
}

/* Encodes the frame (h, payload) into a free slot of the lane to h->receiver and
 * publishes it, waking the peer if it blocks. *used = 0, and nothing published, when
 * the peer has not accepted a lane, the frame is larger than a slot or every slot is
 * still held. */
static sl_status_t
send_lane(shm_t *s, const sl_wire_header_t *h, const void *payload, int wait_ms, int *used)
{
    uint32_t peer = h->receiver;
    sl_shm_lane_t *lane = s->out_lanes[peer];
    sl_wire_key_t wkey = {0, 0, 0, peer, SL_WIRE_SHM_WAKE};
    unsigned char *mem;
    int slot;

    *used = 0;
    if (s->lane_state[peer] != LANE_ACCEPTED ||
        SL_WIRE_HEADER_BYTES + h->payload_bytes > sl_shm_lane_slot_bytes(lane))
        return SL_OK;
    slot = sl_shm_lane_acquire(lane, &mem);
    if (slot < 0)
        return SL_OK;
    SL_TRY(sl_wire_encode_local(h, payload, mem)); /* the slot stays free on failure */
    s->sent++;
    *used = 1;
    /* best effort: unwoken, the peer finds the frame within SL_TRANSPORT_LANE_NAP_MS */
    if (sl_shm_lane_publish(lane, slot) && send_control(s, &wkey, NULL, 0, wait_ms) != SL_OK)
        sl_log_debug("transport", "rank %u: could not wake rank %u: %s", (unsigned)s->o->rank,
                     (unsigned)peer, sl_err_msg());
    return SL_OK;
}

static sl_status_t
shm_send(void *ctx, const sl_wire_header_t *h, const void *payload, int flags, int wait_ms)
{
    shm_t *s = ctx;
    int used = 0, large = h->payload_bytes >= SL_TRANSPORT_SHM_MIN_BYTES;

    if (large)
        SL_TRY(send_lane(s, h, payload, wait_ms, &used));
    if (!used)
        SL_TRY(s->base.ops->send(s->base.ctx, h, payload, flags, wait_ms));
    /* a valid large frame went out: offer a lane for the next ones */
    if (large && s->lane_state[h->receiver] == LANE_NONE)
        offer_lane(s, h->receiver, wait_ms);
    return SL_OK;
}

/* A peer offers its lane: map it and say so. Refusals are not errors: that peer's
 * frames stay on ZeroMQ. An offer from another machine or network namespace (another
 * host), or with shared memory off here, is refused quietly; one that names something
 * other than the peer's lane (a forged offer: sl_shm_lane_open opens nothing it has not
 * identified) is a counted drop. */
static void
take_offer(shm_t *s, const sl_link_frame_t *f)
{
    uint32_t from = f->pub.h.sender;
    sl_wire_key_t key = {0, 0, 0, from, SL_WIRE_SHM_ACCEPT};
    unsigned char nb[8];
    sl_shm_offer_t offer;
    sl_status_t st;

    if (!s->o->shm)
        return;
    if (f->pub.h.payload_bytes != SL_SHM_OFFER_BYTES || s->in_lanes[from]) {
        s->env.drop(s->env.host, SL_DROP_SHM,
                    s->in_lanes[from] ? "a second lane offer" : "a lane offer of the wrong size");
        return;
    }
    sl_shm_offer_decode(f->pub.payload, &offer);
    st = sl_shm_lane_open(&s->in_lanes[from], &offer, s->o->run_id, from, s->o->rank);
    if (st == SL_ERR_INVALID) {
        s->env.drop(s->env.host, SL_DROP_SHM_OFFER, sl_err_msg());
        return;
    }
    if (st != SL_OK) {
        sl_log_debug("transport", "rank %u: frames from rank %u stay on ZeroMQ: %s",
                     (unsigned)s->o->rank, (unsigned)from, sl_err_msg());
        return;
    }
    s->nin_lanes++;
    sl_put_u64(nb, offer.nonce);
    /* best effort: unanswered, the peer keeps sending over ZeroMQ */
    if (send_control(s, &key, nb, sizeof nb, 0) != SL_OK)
        sl_log_debug("transport", "rank %u: could not accept the lane of rank %u: %s",
                     (unsigned)s->o->rank, (unsigned)from, sl_err_msg());
}

/* A peer mapped our lane: large frames to it go through it from now on. */
static void
take_accept(shm_t *s, const sl_link_frame_t *f)
{
    uint32_t from = f->pub.h.sender;

    if (f->pub.h.payload_bytes != 8 || s->lane_state[from] != LANE_OFFERED ||
        sl_get_u64(f->pub.payload) != sl_shm_lane_nonce(s->out_lanes[from])) {
        s->env.drop(s->env.host, SL_DROP_SHM, "an accept for no lane offered");
        return;
    }
    s->lane_state[from] = LANE_ACCEPTED;
}

static void
shm_take(void *ctx, const sl_link_frame_t *f)
{
    shm_t *s = ctx;

    switch (f->pub.h.kind) {
    case SL_WIRE_SHM_OFFER:
        take_offer(s, f);
        break;
    case SL_WIRE_SHM_ACCEPT:
        take_accept(s, f);
        break;
    default: /* SL_WIRE_SHM_WAKE: its work is done, this thread is awake */
        break;
    }
}

/* The frame in slot of the lane from `from`, validated like one from the socket (a
 * local frame: sl_wire.h), holding its slot until released; NULL when it is dropped
 * (counted, and the slot freed). */
static sl_link_frame_t *
take_lane_frame(shm_t *s, uint32_t from, uint32_t slot, const unsigned char *mem)
{
    sl_shm_lane_t *lane = s->in_lanes[from];
    uint64_t room = sl_shm_lane_slot_bytes(lane) - SL_WIRE_HEADER_BYTES;
    uint64_t claimed = sl_get_u64(mem + 48); /* the header's payload_bytes, unchecked */
    sl_wire_reason_t why = SL_WIRE_OK;
    const char *bad = NULL;
    const void *payload;
    sl_wire_header_t h;
    char detail[160];
    lane_frame_t *f = NULL;

    if (claimed > room) {
        bad = "a frame longer than its slot";
    } else {
        why = sl_wire_decode_local(mem, SL_WIRE_HEADER_BYTES + claimed, s->o->run_id, s->o->rank,
                                   s->o->size, &h, &payload);
        if (why == SL_WIRE_OK && (h.sender != from || ((sl_link_shm_ops.kinds >> h.kind) & 1u)))
            bad = "a frame that is not the lane's to carry";
    }
    if (!bad && why == SL_WIRE_OK && !(f = calloc(1, sizeof *f)))
        bad = "out of memory";
    if (bad || why != SL_WIRE_OK) {
        snprintf(detail, sizeof detail, "from rank %u, slot %u: %s", (unsigned)from, (unsigned)slot,
                 bad ? bad : "in shared memory");
        s->env.drop(s->env.host, bad ? SL_DROP_SHM : (unsigned)why, detail);
        sl_shm_lane_release(lane, slot);
        return NULL;
    }
    f->f.pub.h = h;
    f->f.pub.payload = payload;
    f->f.release = release_frame;
    f->lane = lane;
    f->slot = slot;
    s->received++;
    return &f->f;
}

/* Takes one frame published in a lane to us, if any, starting after the lane that gave
 * the last one so that no peer is starved. */
static sl_status_t
shm_recv(void *ctx, sl_link_frame_t **out, int *got)
{
    shm_t *s = ctx;

    *out = NULL;
    *got = 0;
    for (uint32_t i = 0; i < s->o->size && s->nin_lanes; i++) {
        uint32_t p = (s->lane_next + i) % s->o->size;
        const unsigned char *mem;
        int slot;

        if (!s->in_lanes[p])
            continue;
        slot = sl_shm_lane_take(s->in_lanes[p], &s->lane_seen[p], &mem);
        if (slot >= 0) {
            s->lane_next = (p + 1) % s->o->size;
            *out = take_lane_frame(s, p, (uint32_t)slot, mem);
            *got = 1;
            return SL_OK;
        }
    }
    return SL_OK;
}

/* Lanes deliver without waking the socket: with any mapped, the dispatcher spins, and
 * blocks no longer than a lost wake-up may cost. */
static int
shm_nap_ms(void *ctx)
{
    shm_t *s = ctx;

    return s->nin_lanes ? SL_TRANSPORT_LANE_NAP_MS : SL_LINK_NO_NAP;
}

/* Whether a lane to us has publications not looked for yet. */
static int
lanes_pending(const shm_t *s)
{
    for (uint32_t p = 0; p < s->o->size && s->nin_lanes; p++)
        if (s->in_lanes[p] && sl_shm_lane_pending(s->in_lanes[p], s->lane_seen[p]))
            return 1;
    return 0;
}

/* Raises or lowers the doorbell flag of every lane to us; raising, says whether a frame
 * was published before the senders could see the flag. */
static int
shm_sleep(void *ctx, int on)
{
    shm_t *s = ctx;

    if (!s->nin_lanes)
        return 0;
    for (uint32_t p = 0; p < s->o->size; p++)
        if (s->in_lanes[p])
            sl_shm_lane_sleep(s->in_lanes[p], on);
    return on && lanes_pending(s);
}

static void
shm_stats(const void *ctx, uint64_t *sent, uint64_t *received)
{
    const shm_t *s = ctx;

    *sent = s->sent;
    *received = s->received;
}

/* A new process for peer: our lane to the old one goes (the slots it held are lost with
 * it), the next large frame offers the new one a lane; its lane to us is retired, and
 * the new one's offer is taken like a first. */
static void
shm_forget(void *ctx, uint32_t peer, const char *endpoint)
{
    shm_t *s = ctx;
    sl_shm_lane_t **more;

    (void)endpoint;
    if (peer >= s->o->size)
        return;
    sl_shm_lane_destroy(&s->out_lanes[peer]);
    s->lane_state[peer] = LANE_NONE;
    if (!s->in_lanes[peer])
        return;
    more = realloc(s->retired, (s->nretired + 1) * sizeof *more);
    if (!more)
        return; /* out of memory: the new one's offer is refused, its frames stay on ZeroMQ */
    s->retired = more;
    s->retired[s->nretired++] = s->in_lanes[peer];
    s->in_lanes[peer] = NULL;
    s->lane_seen[peer] = 0;
    s->nin_lanes--;
}

const sl_link_ops_t sl_link_shm_ops = {
    .name = "shm",
    .kinds = 1u << SL_WIRE_SHM_OFFER | 1u << SL_WIRE_SHM_ACCEPT | 1u << SL_WIRE_SHM_WAKE,
    .open = shm_open,
    .close = shm_close,
    .serves = shm_serves,
    .send = shm_send,
    .recv = shm_recv,
    .take = shm_take,
    .nap_ms = shm_nap_ms,
    .sleep = shm_sleep,
    .wait = NULL,
    .wait_sent = NULL,
    .stats = shm_stats,
    .forget = shm_forget,
    .watch = NULL,
};
