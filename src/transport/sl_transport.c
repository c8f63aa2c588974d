/* The ZeroMQ transport: sockets, sends (copied or lent), the receive loop that
 * validates every frame and files the ones nobody asked for yet, counters, abort. */
#include "transport/sl_transport.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "transport/sl_mailbox.h"
#include "transport/sl_shm_lane.h"
#include "transport/sl_zmq_status.h"

_Static_assert(SL_SHM_OFFER_BYTES == SL_WIRE_SHM_OFFER_BYTES,
               "the wire's offer size is the lane's offer encoding");

#define ID_BYTES 9 /* 'S', rank u32 le, nonce u32 le: a routing id must not start with 0 */
#define ENDPOINT_MAX 1024

/* Where a peer stands with our lane to it. */
enum { LANE_NONE, LANE_OFFERED, LANE_ACCEPTED, LANE_UNUSABLE };

struct sl_transport {
    sl_transport_opts_t o;
    char bind[ENDPOINT_MAX];
    char endpoint[ENDPOINT_MAX]; /* as bound, wildcards resolved */
    void *ctx;
    void *router;
    void **peers;               /* (size) DEALER per peer, NULL until the first send */
    char **endpoints;           /* (size) copies, NULL before sl_transport_connect */
    unsigned char id[ID_BYTES]; /* routing id of our DEALERs */
    sl_mailbox_t *mb;
    sl_transport_stat_t *stats; /* (nstats) */
    size_t nstats, stats_cap;
    uint64_t drops[SL_DROP_NREASONS];
    int aborted; /* a peer said it stops */
    uint32_t abort_rank;
    char abort_msg[256];
    /* lent payloads still held by ZeroMQ; its I/O thread gives them back */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t lent;
    /* shared memory: our lanes to peers, theirs to us (mapped), per peer */
    sl_shm_lane_t **out_lanes, **in_lanes;
    unsigned char *lane_state;     /* LANE_* of out_lanes */
    uint64_t *lane_seen;           /* (size) publications of in_lanes looked for */
    uint32_t nin_lanes, lane_next; /* in_lanes mapped; where the next poll starts */
    uint64_t shm_sent, shm_recv;
    int shm_refused_logged;
    double *heard; /* (size) sl_clock_now() of the last valid frame from each rank; 0 */
};

/* A received frame: the public part first, then the messages that hold its bytes, or
 * the lane slot that does. */
typedef struct {
    sl_transport_frame_t pub;
    zmq_msg_t part[2];
    int nparts;
    sl_shm_lane_t *lane; /* borrowed from in_lanes; NULL for a frame from the socket */
    uint32_t slot;
} frame_t;

static const char *drop_names[SL_DROP_NREASONS - SL_WIRE_NREASONS] = {
    "not 1 or 2 parts", "sender is not the connection's rank", "old round", "duplicate",
    "mailbox full", "bad shared-memory frame"};

const char *
sl_transport_drop_name(unsigned reason)
{
    if (reason < SL_WIRE_NREASONS)
        return sl_wire_reason_name(reason);
    return reason < SL_DROP_NREASONS ? drop_names[reason - SL_WIRE_NREASONS] : "unknown reason";
}

void
sl_transport_opts_default(sl_transport_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->timeout_ms = 30000;
    o->heartbeat_ms = 1000;
    o->linger_ms = 1000;
    o->mailbox_frames = 65536;
    o->mailbox_bytes = (uint64_t)4 << 30;
    o->shm = 1;
    o->shm_slots = 16;
    o->shm_slot_bytes = ((uint64_t)64 << 20) + SL_WIRE_HEADER_BYTES;
}

static void
release_frame(void *owner)
{
    frame_t *f = owner;

    for (int i = 0; i < f->nparts; i++)
        zmq_msg_close(&f->part[i]);
    if (f->lane)
        sl_shm_lane_release(f->lane, f->slot);
    free(f);
}

void
sl_transport_frame_release(sl_transport_frame_t **f)
{
    if (!f || !*f)
        return;
    release_frame(*f);
    *f = NULL;
}

/* Called by ZeroMQ (usually its I/O thread) when it no longer needs a lent payload. */
static void
give_back(void *data, void *hint)
{
    sl_transport_t *t = hint;

    (void)data;
    pthread_mutex_lock(&t->lock);
    if (--t->lent == 0)
        pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

static sl_status_t
set_int(void *s, int opt, int v, const char *what)
{
    if (zmq_setsockopt(s, opt, &v, sizeof v) != 0)
        return sl_zmq_fail("sl_transport: setting %s", what);
    return SL_OK;
}

sl_status_t
sl_transport_new(sl_transport_t **out, const sl_transport_opts_t *o)
{
    sl_transport_t *t;
    sl_status_t st;
    pthread_condattr_t ca;
    size_t len;
    int64_t maxmsg = (int64_t)(SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_PAYLOAD);
    uint32_t nonce;

    *out = NULL;
    if (o->size == 0 || o->rank >= o->size || o->timeout_ms <= 0 || o->heartbeat_ms < 0 ||
        o->linger_ms < 0 || o->mailbox_frames == 0 || o->mailbox_bytes == 0 ||
        (o->shm && (o->shm_slots == 0 || o->shm_slots > SL_SHM_MAX_SLOTS ||
                    o->shm_slot_bytes <= SL_WIRE_HEADER_BYTES ||
                    o->shm_slot_bytes > SL_SHM_MAX_SLOT_BYTES)))
        return sl_err_set(SL_ERR_INVALID,
                          "sl_transport_new: rank %u of %u, timeout %d ms, heartbeat %d ms, "
                          "linger %d ms: need rank < size, timeout > 0, others >= 0, "
                          "mailbox caps > 0, shared-memory slots and sizes in range",
                          (unsigned)o->rank, (unsigned)o->size, o->timeout_ms, o->heartbeat_ms,
                          o->linger_ms);
    if (o->bind_endpoint && strlen(o->bind_endpoint) >= ENDPOINT_MAX)
        return sl_err_set(SL_ERR_INVALID, "sl_transport_new: bind endpoint too long");
    t = calloc(1, sizeof *t);
    if (!t)
        return sl_err_set(SL_ERR_NOMEM, "sl_transport_new: out of memory");
    t->o = *o;
    snprintf(t->bind, sizeof t->bind, "%s",
             o->bind_endpoint ? o->bind_endpoint : "tcp://127.0.0.1:*");
    t->o.bind_endpoint = t->bind;
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cond, &ca);
    pthread_condattr_destroy(&ca);
    nonce = (uint32_t)sl_mix64((uint64_t)getpid() << 32 ^ (uint64_t)(sl_clock_now() * 1e9) ^
                               (uintptr_t)t);
    t->id[0] = 'S';
    for (int i = 0; i < 4; i++) {
        t->id[1 + i] = (unsigned char)(o->rank >> (8 * i));
        t->id[5 + i] = (unsigned char)(nonce >> (8 * i));
    }
    t->peers = calloc(o->size, sizeof *t->peers);
    t->out_lanes = calloc(o->size, sizeof *t->out_lanes);
    t->in_lanes = calloc(o->size, sizeof *t->in_lanes);
    t->lane_state = calloc(o->size, sizeof *t->lane_state);
    t->lane_seen = calloc(o->size, sizeof *t->lane_seen);
    t->heard = calloc(o->size, sizeof *t->heard);
    if (!t->peers || !t->out_lanes || !t->in_lanes || !t->lane_state || !t->lane_seen ||
        !t->heard) {
        st = sl_err_set(SL_ERR_NOMEM, "sl_transport_new: out of memory");
        goto fail;
    }
    SL_TRY_GOTO(sl_mailbox_new(&t->mb, o->mailbox_frames, o->mailbox_bytes, release_frame), st,
                fail);
    t->ctx = zmq_ctx_new();
    if (!t->ctx) {
        st = sl_zmq_fail("sl_transport_new: zmq_ctx_new");
        goto fail;
    }
    t->router = zmq_socket(t->ctx, ZMQ_ROUTER);
    if (!t->router) {
        st = sl_zmq_fail("sl_transport_new: zmq_socket");
        goto fail;
    }
    SL_TRY_GOTO(set_int(t->router, ZMQ_LINGER, 0, "ZMQ_LINGER"), st, fail);
    if (zmq_setsockopt(t->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) {
        st = sl_zmq_fail("sl_transport_new: setting ZMQ_MAXMSGSIZE");
        goto fail;
    }
    if (zmq_bind(t->router, t->bind) != 0) {
        st = sl_zmq_fail("sl_transport_new: rank %u: binding %s", (unsigned)o->rank, t->bind);
        goto fail;
    }
    len = sizeof t->endpoint;
    if (zmq_getsockopt(t->router, ZMQ_LAST_ENDPOINT, t->endpoint, &len) != 0) {
        st = sl_zmq_fail("sl_transport_new: reading the bound endpoint");
        goto fail;
    }
    *out = t;
    return SL_OK;
fail:
    sl_transport_destroy(&t);
    return st;
}

void
sl_transport_destroy(sl_transport_t **tp)
{
    sl_transport_t *t = tp ? *tp : NULL;

    if (!t)
        return;
    sl_mailbox_destroy(&t->mb);
    if (t->router)
        zmq_close(t->router);
    for (uint32_t p = 0; t->peers && p < t->o.size; p++)
        if (t->peers[p]) {
            zmq_setsockopt(t->peers[p], ZMQ_LINGER, &t->o.linger_ms, sizeof t->o.linger_ms);
            zmq_close(t->peers[p]);
        }
    if (t->ctx) /* blocks until queued frames left or linger_ms passed; gives lent back */
        while (zmq_ctx_term(t->ctx) != 0 && zmq_errno() == EINTR)
            ;
    for (uint32_t p = 0; t->out_lanes && p < t->o.size; p++)
        sl_shm_lane_destroy(&t->out_lanes[p]);
    for (uint32_t p = 0; t->in_lanes && p < t->o.size; p++)
        sl_shm_lane_destroy(&t->in_lanes[p]);
    free(t->out_lanes);
    free(t->in_lanes);
    free(t->lane_state);
    free(t->lane_seen);
    free(t->heard);
    for (uint32_t p = 0; t->endpoints && p < t->o.size; p++)
        free(t->endpoints[p]);
    free(t->endpoints);
    free(t->peers);
    free(t->stats);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
    free(t);
    *tp = NULL;
}

const char *
sl_transport_endpoint(const sl_transport_t *t)
{
    return t->endpoint;
}

uint32_t
sl_transport_rank(const sl_transport_t *t)
{
    return t->o.rank;
}

uint32_t
sl_transport_size(const sl_transport_t *t)
{
    return t->o.size;
}

int
sl_transport_timeout_ms(const sl_transport_t *t)
{
    return t->o.timeout_ms;
}

sl_status_t
sl_transport_connect(sl_transport_t *t, const char *const *endpoints)
{
    if (t->endpoints)
        return sl_err_set(SL_ERR_INVALID, "sl_transport_connect: rank %u: called twice",
                          (unsigned)t->o.rank);
    t->endpoints = calloc(t->o.size, sizeof *t->endpoints);
    if (!t->endpoints)
        return sl_err_set(SL_ERR_NOMEM, "sl_transport_connect: out of memory");
    for (uint32_t p = 0; p < t->o.size; p++) {
        if (p == t->o.rank || !endpoints[p])
            continue;
        t->endpoints[p] = strdup(endpoints[p]);
        if (!t->endpoints[p])
            return sl_err_set(SL_ERR_NOMEM, "sl_transport_connect: out of memory");
    }
    return SL_OK;
}

/* The DEALER to peer, connected on first use. It queues frames before the connection
 * is up and while a dead peer is being retried (ZMQ_IMMEDIATE off), so a send blocks
 * only when that queue is full. */
static sl_status_t
peer_socket(sl_transport_t *t, uint32_t peer, void **out)
{
    void *s;
    sl_status_t st;
    int hb = t->o.heartbeat_ms;

    if (t->peers[peer]) {
        *out = t->peers[peer];
        return SL_OK;
    }
    if (!t->endpoints || !t->endpoints[peer])
        return sl_err_set(SL_ERR_INVALID, "sl_transport: rank %u: no endpoint for rank %u",
                          (unsigned)t->o.rank, (unsigned)peer);
    s = zmq_socket(t->ctx, ZMQ_DEALER);
    if (!s)
        return sl_zmq_fail("sl_transport: rank %u: socket to rank %u", (unsigned)t->o.rank,
                           (unsigned)peer);
    if (zmq_setsockopt(s, ZMQ_ROUTING_ID, t->id, sizeof t->id) != 0) {
        st = sl_zmq_fail("sl_transport: setting ZMQ_ROUTING_ID");
        goto fail;
    }
    SL_TRY_GOTO(set_int(s, ZMQ_LINGER, t->o.linger_ms, "ZMQ_LINGER"), st, fail);
    if (hb > 0) {
        SL_TRY_GOTO(set_int(s, ZMQ_HEARTBEAT_IVL, hb, "ZMQ_HEARTBEAT_IVL"), st, fail);
        SL_TRY_GOTO(set_int(s, ZMQ_HEARTBEAT_TIMEOUT, 3 * hb, "ZMQ_HEARTBEAT_TIMEOUT"), st, fail);
        SL_TRY_GOTO(set_int(s, ZMQ_HEARTBEAT_TTL, 3 * hb, "ZMQ_HEARTBEAT_TTL"), st, fail);
    }
    if (zmq_connect(s, t->endpoints[peer]) != 0) {
        st = sl_zmq_fail("sl_transport: rank %u: connecting to rank %u at %s", (unsigned)t->o.rank,
                         (unsigned)peer, t->endpoints[peer]);
        goto fail;
    }
    t->peers[peer] = s;
    *out = s;
    return SL_OK;
fail:
    zmq_close(s);
    return st;
}

static sl_transport_stat_t *
find_stat(const sl_transport_t *t, unsigned kind, uint32_t component)
{
    for (size_t i = 0; i < t->nstats; i++)
        if (t->stats[i].kind == kind && t->stats[i].component == component)
            return &t->stats[i];
    return NULL;
}

static sl_status_t
count_msg(sl_transport_t *t, unsigned kind, uint32_t component, unsigned encoding, uint64_t bytes,
          int sent)
{
    sl_transport_stat_t *s = find_stat(t, kind, component);

    if (!s) {
        if (t->nstats == t->stats_cap) {
            size_t ncap = t->stats_cap ? 2 * t->stats_cap : 16;
            sl_transport_stat_t *ns = realloc(t->stats, ncap * sizeof *ns);
            if (!ns)
                return sl_err_set(SL_ERR_NOMEM, "sl_transport: out of memory for counters");
            t->stats = ns;
            t->stats_cap = ncap;
        }
        s = &t->stats[t->nstats++];
        memset(s, 0, sizeof *s);
        s->kind = (uint8_t)kind;
        s->component = component;
    }
    if (encoding >= SL_WIRE_NENCODINGS) /* frames are validated: only abort reasons */
        encoding = 0;
    if (sent) {
        s->sent_msgs++;
        s->sent_bytes += bytes;
        s->sent_enc_bytes[encoding] += bytes;
    } else {
        s->recv_msgs++;
        s->recv_bytes += bytes;
        s->recv_enc_bytes[encoding] += bytes;
    }
    return SL_OK;
}

void
sl_transport_stat(const sl_transport_t *t, unsigned kind, uint32_t component,
                  sl_transport_stat_t *out)
{
    const sl_transport_stat_t *s = find_stat(t, kind, component);

    memset(out, 0, sizeof *out);
    out->kind = (uint8_t)kind;
    out->component = component;
    if (s)
        *out = *s;
}

size_t
sl_transport_stats(const sl_transport_t *t, const sl_transport_stat_t **rows)
{
    *rows = t->stats;
    return t->nstats;
}

uint64_t
sl_transport_dropped(const sl_transport_t *t, unsigned reason)
{
    return reason > 0 && reason < SL_DROP_NREASONS ? t->drops[reason] : 0;
}

size_t
sl_transport_pending(const sl_transport_t *t)
{
    return sl_mailbox_frames(t->mb);
}

double
sl_transport_last_heard(const sl_transport_t *t, uint32_t rank)
{
    return rank < t->o.size ? t->heard[rank] : 0.0;
}

void
sl_transport_shm_frames(const sl_transport_t *t, uint64_t *sent, uint64_t *received)
{
    *sent = t->shm_sent;
    *received = t->shm_recv;
}

/* Counts a dropped frame and logs the first one of each reason (a flood of bad frames
 * must not flood the log too). */
static void
note_drop(sl_transport_t *t, unsigned reason, uint64_t n, const char *detail)
{
    if (n == 0)
        return;
    if (t->drops[reason] == 0)
        sl_log_warn("transport",
                    "rank %u: dropped a frame: %s%s%s (later drops for this reason are only "
                    "counted)",
                    (unsigned)t->o.rank, sl_transport_drop_name(reason), detail ? ": " : "",
                    detail ? detail : "");
    t->drops[reason] += n;
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

/* The header of a frame from this node with key (key->peer = the receiver). */
static void
fill_header(const sl_transport_t *t, const sl_wire_key_t *key, uint32_t count, unsigned encoding,
            float scale, sl_wire_header_t *h)
{
    memset(h, 0, sizeof *h);
    h->run_id = t->o.run_id;
    h->round = key->round;
    h->payload_bytes = (uint64_t)count * sl_wire_element_bytes(encoding);
    h->sender = t->o.rank;
    h->receiver = key->peer;
    h->component = key->component;
    h->seq = key->seq;
    h->count = count;
    h->scale = scale;
    h->kind = key->kind;
    h->encoding = (uint8_t)(encoding < 256 ? encoding : 0);
}

/* Queues an encoded frame (header hb, then payload_bytes of payload) on the DEALER to
 * peer, lending the payload (SL_SEND_LEND) or copying it. */
static sl_status_t
send_zmq(sl_transport_t *t, uint32_t peer, const unsigned char *hb, const void *payload,
         uint64_t payload_bytes, int flags, int wait_ms, unsigned kind)
{
    zmq_msg_t head, body;
    void *s = NULL;
    sl_status_t st;
    int lend, body_live = 0;

    SL_TRY(peer_socket(t, peer, &s));
    lend = (flags & SL_SEND_LEND) && payload_bytes >= SL_TRANSPORT_ZEROCOPY_BYTES;
    if (zmq_msg_init_size(&head, SL_WIRE_HEADER_BYTES + (lend ? 0 : payload_bytes)) != 0)
        return sl_zmq_fail("sl_transport_send: %" PRIu64 " bytes", payload_bytes);
    memcpy(zmq_msg_data(&head), hb, SL_WIRE_HEADER_BYTES);
    if (!lend && payload_bytes)
        memcpy((char *)zmq_msg_data(&head) + SL_WIRE_HEADER_BYTES, payload, payload_bytes);
    if (lend) {
        pthread_mutex_lock(&t->lock);
        t->lent++;
        pthread_mutex_unlock(&t->lock);
        /* ZeroMQ only reads it; the cast drops const for its signature */
        if (zmq_msg_init_data(&body, (void *)(uintptr_t)payload, payload_bytes, give_back, t) !=
            0) {
            give_back(NULL, t);
            zmq_msg_close(&head);
            return sl_zmq_fail("sl_transport_send: lending %" PRIu64 " bytes", payload_bytes);
        }
        body_live = 1;
    }
    st = wait_ready(s, ZMQ_POLLOUT, wait_ms, "sl_transport_send: polling");
    if (st == SL_OK && zmq_msg_send(&head, s, ZMQ_DONTWAIT | (lend ? ZMQ_SNDMORE : 0)) < 0)
        st = sl_zmq_fail("sl_transport_send: rank %u to rank %u", (unsigned)t->o.rank,
                         (unsigned)peer);
    /* once the first part is queued the rest of the message always is */
    if (st == SL_OK && lend) {
        if (zmq_msg_send(&body, s, ZMQ_DONTWAIT) < 0)
            st = sl_zmq_fail("sl_transport_send: rank %u to rank %u", (unsigned)t->o.rank,
                             (unsigned)peer);
        else
            body_live = 0;
    }
    zmq_msg_close(&head); /* empty after a successful send */
    if (body_live)
        zmq_msg_close(&body); /* gives the payload back */
    if (st == SL_ERR_TIMEOUT)
        return sl_err_set(st,
                          "sl_transport_send: rank %u: no room to send %s to rank %u within "
                          "%d ms",
                          (unsigned)t->o.rank, sl_wire_kind_name(kind), (unsigned)peer, wait_ms);
    return st;
}

/* Sends one of the transport's own frames (bytes; not in the counters). */
static sl_status_t
send_control(sl_transport_t *t, const sl_wire_key_t *key, const void *payload, uint32_t bytes,
             int wait_ms)
{
    sl_wire_header_t h;
    unsigned char hb[SL_WIRE_HEADER_BYTES];

    fill_header(t, key, bytes, SL_WIRE_BYTES, 1.0f, &h);
    SL_TRY(sl_wire_encode(&h, payload, hb));
    return send_zmq(t, key->peer, hb, payload, bytes, 0, wait_ms, key->kind);
}

/* Creates our lane to peer and offers it, best effort: a lane that cannot be made
 * leaves that peer's frames on ZeroMQ (said once); an offer that cannot be sent now is
 * made again with the next large frame. */
static void
offer_lane(sl_transport_t *t, uint32_t peer, int wait_ms)
{
    sl_shm_offer_t offer;
    unsigned char ob[SL_SHM_OFFER_BYTES];
    sl_wire_key_t key = {0, 0, 0, peer, SL_WIRE_SHM_OFFER};

    t->lane_state[peer] = LANE_UNUSABLE;
    if (sl_shm_lane_create(&t->out_lanes[peer], t->o.run_id, t->o.rank, peer, t->o.shm_slots,
                           t->o.shm_slot_bytes, &offer) != SL_OK) {
        if (!t->shm_refused_logged++)
            sl_log_info("transport", "rank %u: no shared memory, frames stay on ZeroMQ: %s",
                        (unsigned)t->o.rank, sl_err_msg());
        return;
    }
    sl_shm_offer_encode(&offer, ob);
    if (send_control(t, &key, ob, SL_SHM_OFFER_BYTES, wait_ms) != SL_OK) {
        sl_shm_lane_destroy(&t->out_lanes[peer]);
        t->lane_state[peer] = LANE_NONE;
        return;
    }
    t->lane_state[peer] = LANE_OFFERED;
}

/* Encodes the frame (h, payload) into a free slot of the lane to key->peer and
 * publishes it, waking the peer if it blocks. *used = 0, and nothing published, when
 * the peer has not accepted a lane, the frame is larger than a slot or every slot is
 * still held. */
static sl_status_t
send_lane(sl_transport_t *t, const sl_wire_key_t *key, const sl_wire_header_t *h,
          const void *payload, int wait_ms, int *used)
{
    sl_shm_lane_t *lane = t->out_lanes[key->peer];
    sl_wire_key_t wkey = {0, 0, 0, key->peer, SL_WIRE_SHM_WAKE};
    unsigned char *mem;
    int slot;

    *used = 0;
    if (t->lane_state[key->peer] != LANE_ACCEPTED ||
        SL_WIRE_HEADER_BYTES + h->payload_bytes > sl_shm_lane_slot_bytes(lane))
        return SL_OK;
    slot = sl_shm_lane_acquire(lane, &mem);
    if (slot < 0)
        return SL_OK;
    SL_TRY(sl_wire_encode_local(h, payload, mem)); /* the slot stays free on failure */
    t->shm_sent++;
    *used = 1;
    /* best effort: unwoken, the peer finds the frame within SL_TRANSPORT_LANE_NAP_MS */
    if (sl_shm_lane_publish(lane, slot) && send_control(t, &wkey, NULL, 0, wait_ms) != SL_OK)
        sl_log_debug("transport", "rank %u: could not wake rank %u: %s", (unsigned)t->o.rank,
                     (unsigned)key->peer, sl_err_msg());
    return SL_OK;
}

sl_status_t
sl_transport_send(sl_transport_t *t, const sl_wire_key_t *key, const void *payload, uint32_t count,
                  unsigned encoding, float scale, int flags, int timeout_ms)
{
    sl_wire_header_t h;
    unsigned char hb[SL_WIRE_HEADER_BYTES];
    int used = 0, wait_ms = timeout_ms < 0 ? t->o.timeout_ms : timeout_ms;

    if (key->peer >= t->o.size || key->peer == t->o.rank)
        return sl_err_set(SL_ERR_INVALID, "sl_transport_send: rank %u: bad destination %u",
                          (unsigned)t->o.rank, (unsigned)key->peer);
    fill_header(t, key, count, encoding, scale, &h);
    if (h.payload_bytes && !payload)
        return sl_err_set(SL_ERR_INVALID, "sl_transport_send: no payload for %u elements",
                          (unsigned)count);
    if (t->o.shm && h.payload_bytes >= SL_TRANSPORT_SHM_MIN_BYTES)
        SL_TRY(send_lane(t, key, &h, payload, wait_ms, &used));
    if (!used) {
        SL_TRY(sl_wire_encode(&h, payload, hb)); /* validates before anything is allocated */
        SL_TRY(send_zmq(t, key->peer, hb, payload, h.payload_bytes, flags, wait_ms, key->kind));
    }
    /* a valid large frame went out: offer a lane for the next ones */
    if (t->o.shm && h.payload_bytes >= SL_TRANSPORT_SHM_MIN_BYTES &&
        t->lane_state[key->peer] == LANE_NONE)
        offer_lane(t, key->peer, wait_ms);
    return count_msg(t, key->kind, key->component, h.encoding, h.payload_bytes, 1);
}

sl_status_t
sl_transport_wait_sent(sl_transport_t *t, int timeout_ms)
{
    struct timespec until;
    uint64_t left;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&t->lock);
    while (t->lent > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&t->cond, &t->lock, &until);
    left = t->lent;
    pthread_mutex_unlock(&t->lock);
    if (left)
        return sl_err_set(SL_ERR_TIMEOUT,
                          "sl_transport_wait_sent: rank %u: %" PRIu64
                          " lent payloads still queued after %d ms",
                          (unsigned)t->o.rank, left, timeout_ms);
    return SL_OK;
}

/* A peer offers its lane: map it and say so. Refusals (another machine, shared memory
 * off here, a file that is not a lane) are not errors: that peer's frames stay on
 * ZeroMQ. */
static void
take_offer(sl_transport_t *t, const frame_t *f)
{
    uint32_t from = f->pub.h.sender;
    sl_wire_key_t key = {0, 0, 0, from, SL_WIRE_SHM_ACCEPT};
    unsigned char nb[8];
    sl_shm_offer_t offer;

    if (!t->o.shm)
        return;
    if (f->pub.h.payload_bytes != SL_SHM_OFFER_BYTES || t->in_lanes[from]) {
        note_drop(t, SL_DROP_SHM, 1,
                  t->in_lanes[from] ? "a second lane offer" : "a lane offer of the wrong size");
        return;
    }
    sl_shm_offer_decode(f->pub.payload, &offer);
    if (sl_shm_lane_open(&t->in_lanes[from], &offer, t->o.run_id, from, t->o.rank) != SL_OK) {
        sl_log_debug("transport", "rank %u: frames from rank %u stay on ZeroMQ: %s",
                     (unsigned)t->o.rank, (unsigned)from, sl_err_msg());
        return;
    }
    t->nin_lanes++;
    sl_put_u64(nb, offer.nonce);
    /* best effort: unanswered, the peer keeps sending over ZeroMQ */
    if (send_control(t, &key, nb, sizeof nb, 0) != SL_OK)
        sl_log_debug("transport", "rank %u: could not accept the lane of rank %u: %s",
                     (unsigned)t->o.rank, (unsigned)from, sl_err_msg());
}

/* A peer mapped our lane: large frames to it go through it from now on. */
static void
take_accept(sl_transport_t *t, const frame_t *f)
{
    uint32_t from = f->pub.h.sender;

    if (f->pub.h.payload_bytes != 8 || t->lane_state[from] != LANE_OFFERED ||
        sl_get_u64(f->pub.payload) != sl_shm_lane_nonce(t->out_lanes[from])) {
        note_drop(t, SL_DROP_SHM, 1, "an accept for no lane offered");
        return;
    }
    t->lane_state[from] = LANE_ACCEPTED;
}

/* The frame in slot of the lane from `from`, validated like one from the socket (a
 * local frame: sl_wire.h), holding its slot until released; NULL when it is dropped
 * (counted, and the slot freed). */
static frame_t *
take_lane_frame(sl_transport_t *t, uint32_t from, uint32_t slot, const unsigned char *mem)
{
    sl_shm_lane_t *lane = t->in_lanes[from];
    uint64_t room = sl_shm_lane_slot_bytes(lane) - SL_WIRE_HEADER_BYTES;
    uint64_t claimed = sl_get_u64(mem + 48); /* the header's payload_bytes, unchecked */
    sl_wire_reason_t why = SL_WIRE_OK;
    const char *bad = NULL;
    const void *payload;
    sl_wire_header_t h;
    char detail[160];
    frame_t *f = NULL;

    if (claimed > room) {
        bad = "a frame longer than its slot";
    } else {
        why = sl_wire_decode_local(mem, SL_WIRE_HEADER_BYTES + claimed, t->o.run_id, t->o.rank,
                                   t->o.size, &h, &payload);
        if (why == SL_WIRE_OK && (h.sender != from || h.kind == SL_WIRE_SHM_OFFER ||
                                  h.kind == SL_WIRE_SHM_ACCEPT || h.kind == SL_WIRE_SHM_WAKE))
            bad = "a frame that is not the lane's to carry";
    }
    if (!bad && why == SL_WIRE_OK && !(f = calloc(1, sizeof *f)))
        bad = "out of memory";
    if (bad || why != SL_WIRE_OK) {
        snprintf(detail, sizeof detail, "from rank %u, slot %u: %s", (unsigned)from,
                 (unsigned)slot, bad ? bad : "in shared memory");
        note_drop(t, bad ? SL_DROP_SHM : (unsigned)why, 1, detail);
        sl_shm_lane_release(lane, slot);
        return NULL;
    }
    f->pub.h = h;
    f->pub.payload = payload;
    f->lane = lane;
    f->slot = slot;
    t->heard[from] = sl_clock_now();
    t->shm_recv++;
    return f;
}

/* Takes one frame published in a lane to us, if any, starting after the lane that gave
 * the last one so that no peer is starved: *out as read_one says, *got whether a slot
 * was taken. */
static void
poll_lanes(sl_transport_t *t, frame_t **out, int *got)
{
    *out = NULL;
    *got = 0;
    for (uint32_t i = 0; i < t->o.size && t->nin_lanes; i++) {
        uint32_t p = (t->lane_next + i) % t->o.size;
        const unsigned char *mem;
        int slot;

        if (!t->in_lanes[p])
            continue;
        slot = sl_shm_lane_take(t->in_lanes[p], &t->lane_seen[p], &mem);
        if (slot >= 0) {
            t->lane_next = (p + 1) % t->o.size;
            *out = take_lane_frame(t, p, (uint32_t)slot, mem);
            *got = 1;
            return;
        }
    }
}

/* Whether a lane to us has publications not looked for yet. */
static int
lanes_pending(const sl_transport_t *t)
{
    for (uint32_t p = 0; p < t->o.size && t->nin_lanes; p++)
        if (t->in_lanes[p] && sl_shm_lane_pending(t->in_lanes[p], t->lane_seen[p]))
            return 1;
    return 0;
}

/* Reads one message if one is waiting: *out is then a validated frame, or NULL when it
 * was dropped; *got says whether there was a message at all. */
static sl_status_t
read_one(sl_transport_t *t, frame_t **out, int *got)
{
    zmq_msg_t id, m;
    frame_t *f;
    sl_wire_reason_t why;
    const unsigned char *idb;
    int more, extra = 0;
    uint32_t idrank = 0;
    char detail[160];

    *out = NULL;
    *got = 0;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, t->router, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&id);
        return zmq_errno() == EAGAIN
                   ? SL_OK
                   : sl_zmq_fail("sl_transport_recv: rank %u", (unsigned)t->o.rank);
    }
    *got = 1;
    more = zmq_msg_more(&id);
    f = calloc(1, sizeof *f);
    /* the rest of a multipart message is already here: these reads do not block */
    while (more) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, t->router, 0) < 0) {
            sl_status_t st = sl_zmq_fail("sl_transport_recv: rank %u", (unsigned)t->o.rank);
            zmq_msg_close(&m);
            zmq_msg_close(&id);
            if (f)
                release_frame(f);
            return st;
        }
        more = zmq_msg_more(&m);
        if (f && f->nparts < 2) {
            zmq_msg_init(&f->part[f->nparts]);
            zmq_msg_move(&f->part[f->nparts++], &m);
        } else {
            extra = 1;
        }
        zmq_msg_close(&m);
    }
    idb = zmq_msg_data(&id);
    if (zmq_msg_size(&id) == ID_BYTES && idb[0] == 'S')
        for (int i = 3; i >= 0; i--)
            idrank = idrank << 8 | idb[1 + i];
    else
        idrank = UINT32_MAX;
    zmq_msg_close(&id);
    if (!f)
        return sl_err_set(SL_ERR_NOMEM, "sl_transport_recv: out of memory");
    if (extra || f->nparts == 0) {
        snprintf(detail, sizeof detail, "%s parts", extra ? "more than 2" : "no");
        note_drop(t, SL_DROP_FRAMING, 1, detail);
        release_frame(f);
        return SL_OK;
    }
    if (f->nparts == 1) {
        why = sl_wire_decode(zmq_msg_data(&f->part[0]), zmq_msg_size(&f->part[0]), t->o.run_id,
                             t->o.rank, t->o.size, &f->pub.h, &f->pub.payload);
    } else {
        f->pub.payload = zmq_msg_data(&f->part[1]);
        why = sl_wire_decode_parts(zmq_msg_data(&f->part[0]), zmq_msg_size(&f->part[0]),
                                   f->pub.payload, zmq_msg_size(&f->part[1]), t->o.run_id,
                                   t->o.rank, t->o.size, &f->pub.h);
    }
    if (why != SL_WIRE_OK || idrank != f->pub.h.sender) {
        unsigned reason = why != SL_WIRE_OK ? (unsigned)why : SL_DROP_IDENTITY;
        if (idrank == UINT32_MAX)
            snprintf(detail, sizeof detail, "from a connection that is not a shoal node");
        else
            snprintf(detail, sizeof detail, "from the connection of rank %u", (unsigned)idrank);
        note_drop(t, reason, 1, detail);
        release_frame(f);
        return SL_OK;
    }
    t->heard[f->pub.h.sender] = sl_clock_now();
    switch (f->pub.h.kind) {
    case SL_WIRE_SHM_OFFER:
        take_offer(t, f);
        release_frame(f);
        return SL_OK;
    case SL_WIRE_SHM_ACCEPT:
        take_accept(t, f);
        release_frame(f);
        return SL_OK;
    case SL_WIRE_SHM_WAKE: /* its work is done: this thread is awake */
        release_frame(f);
        return SL_OK;
    default:
        *out = f;
        return SL_OK;
    }
}

/* The next frame from a lane or the socket, if one is waiting (as read_one). */
static sl_status_t
next_frame(sl_transport_t *t, frame_t **out, int *got)
{
    poll_lanes(t, out, got);
    return *got ? SL_OK : read_one(t, out, got);
}

static void
set_sleeping(sl_transport_t *t, int on)
{
    for (uint32_t p = 0; p < t->o.size; p++)
        if (t->in_lanes[p])
            sl_shm_lane_sleep(t->in_lanes[p], on);
}

/* Blocks until the socket has a message, up to timeout_ms; with lanes, first says so
 * to their senders (who then wake us with a frame) and blocks at most
 * SL_TRANSPORT_LANE_NAP_MS. Returning is no promise that anything arrived. */
static sl_status_t
block(sl_transport_t *t, int timeout_ms)
{
    sl_status_t st;

    if (t->nin_lanes) {
        set_sleeping(t, 1);
        if (lanes_pending(t)) { /* published before the senders could see the flag */
            set_sleeping(t, 0);
            return SL_OK;
        }
        if (timeout_ms > SL_TRANSPORT_LANE_NAP_MS)
            timeout_ms = SL_TRANSPORT_LANE_NAP_MS;
    }
    st = wait_ready(t->router, ZMQ_POLLIN, timeout_ms, "sl_transport_recv: polling");
    if (t->nin_lanes)
        set_sleeping(t, 0);
    return st == SL_ERR_TIMEOUT ? SL_OK : st;
}

static int
key_eq(const sl_wire_key_t *a, const sl_wire_key_t *b)
{
    return a->round == b->round && a->component == b->component && a->seq == b->seq &&
           a->peer == b->peer && a->kind == b->kind;
}

static sl_status_t
abort_status(const sl_transport_t *t)
{
    return sl_err_set(SL_ERR_SHUTDOWN, "rank %u: rank %u aborted: %s", (unsigned)t->o.rank,
                      (unsigned)t->abort_rank, t->abort_msg);
}

/* Takes a peer's abort frame: keep its reason (printable characters only). */
static void
note_abort(sl_transport_t *t, const frame_t *f)
{
    const unsigned char *p = f->pub.payload;
    size_t n = f->pub.h.payload_bytes, i;

    if (t->aborted)
        return;
    t->aborted = 1;
    t->abort_rank = f->pub.h.sender;
    for (i = 0; i < n && i + 1 < sizeof t->abort_msg; i++)
        t->abort_msg[i] = p[i] >= 32 && p[i] < 127 ? (char)p[i] : '?';
    t->abort_msg[i] = '\0';
}

/* Hands f out if it matches a key (1), else files it (0). */
static sl_status_t
dispatch(sl_transport_t *t, frame_t *f, const sl_wire_key_t *keys, size_t nkeys, size_t *which,
         int *matched)
{
    sl_wire_key_t k = sl_wire_key_of(&f->pub.h);
    sl_mailbox_verdict_t v;
    uint64_t bytes = f->pub.h.payload_bytes;
    unsigned enc = f->pub.h.encoding; /* f belongs to the mailbox once filed */
    char detail[160];

    *matched = 0;
    for (size_t i = 0; i < nkeys; i++)
        if (key_eq(&keys[i], &k)) {
            *which = i;
            *matched = 1;
            return count_msg(t, k.kind, k.component, enc, bytes, 0);
        }
    v = sl_mailbox_file(t->mb, &k, bytes, f);
    if (v == SL_MAILBOX_FILED)
        return count_msg(t, k.kind, k.component, enc, bytes, 0);
    snprintf(detail, sizeof detail, "%s component %u round %" PRIu64 " seq %u from rank %u",
             sl_wire_kind_name(k.kind), (unsigned)k.component, k.round, (unsigned)k.seq,
             (unsigned)k.peer);
    note_drop(t,
              v == SL_MAILBOX_OLD_ROUND   ? SL_DROP_OLD_ROUND
              : v == SL_MAILBOX_DUPLICATE ? SL_DROP_DUPLICATE
                                          : SL_DROP_MAILBOX_FULL,
              1, detail);
    return SL_OK;
}

sl_status_t
sl_transport_recv_any(sl_transport_t *t, const sl_wire_key_t *keys, size_t nkeys, int timeout_ms,
                      sl_transport_frame_t **frame, size_t *which)
{
    double deadline, spin_end;
    size_t idx = 0, purged = 0;
    sl_status_t st;

    *frame = NULL;
    if (nkeys == 0 || timeout_ms < 0)
        return sl_err_set(SL_ERR_INVALID, "sl_transport_recv: %zu keys, timeout %d ms", nkeys,
                          timeout_ms);
    for (size_t i = 0; i < nkeys; i++) {
        if (keys[i].peer >= t->o.size || keys[i].peer == t->o.rank || keys[i].kind == 0 ||
            keys[i].kind >= SL_WIRE_NKINDS)
            return sl_err_set(SL_ERR_INVALID,
                              "sl_transport_recv: rank %u: bad key (kind %u, "
                              "sender %u)",
                              (unsigned)t->o.rank, (unsigned)keys[i].kind, (unsigned)keys[i].peer);
        SL_TRY(sl_mailbox_advance(t->mb, keys[i].kind, keys[i].component, keys[i].round, &purged));
    }
    note_drop(t, SL_DROP_OLD_ROUND, purged, "purged from the mailbox");
    if (t->aborted)
        return abort_status(t);
    for (size_t i = 0; i < nkeys; i++) {
        frame_t *f = sl_mailbox_take(t->mb, &keys[i]);
        if (f) {
            *frame = &f->pub;
            if (which)
                *which = i;
            return SL_OK;
        }
    }
    deadline = sl_clock_now() + timeout_ms / 1000.0;
    spin_end = sl_clock_now() + SL_TRANSPORT_SPIN_US * 1e-6;
    for (;;) {
        frame_t *f;
        int got, matched;
        double now, left;

        SL_TRY(next_frame(t, &f, &got));
        if (f && f->pub.h.kind == SL_WIRE_ABORT) {
            note_abort(t, f);
            st = count_msg(t, SL_WIRE_ABORT, f->pub.h.component, f->pub.h.encoding,
                           f->pub.h.payload_bytes, 0);
            release_frame(f);
            return st != SL_OK ? st : abort_status(t);
        }
        if (f) {
            SL_TRY(dispatch(t, f, keys, nkeys, &idx, &matched));
            if (matched) {
                *frame = &f->pub;
                if (which)
                    *which = idx;
                return SL_OK;
            }
        }
        if (got)
            continue;
        now = sl_clock_now();
        left = deadline - now;
        if (left <= 0)
            return sl_err_set(SL_ERR_TIMEOUT,
                              "rank %u: no %s (component %u, round %" PRIu64
                              ", seq %u) from rank %u%s within %d ms",
                              (unsigned)t->o.rank, sl_wire_kind_name(keys[0].kind),
                              (unsigned)keys[0].component, keys[0].round, (unsigned)keys[0].seq,
                              (unsigned)keys[0].peer,
                              nkeys > 1 ? " or the other peers asked for" : "", timeout_ms);
        if (t->nin_lanes && now < spin_end) {
            sched_yield(); /* to a node sharing this core, if any */
            continue;
        }
        SL_TRY(block(t, (int)(left * 1000.0) + 1));
        spin_end = sl_clock_now() + SL_TRANSPORT_SPIN_US * 1e-6; /* frames come in bursts */
    }
}

sl_status_t
sl_transport_poll(sl_transport_t *t)
{
    for (;;) {
        frame_t *f;
        size_t idx;
        int got, matched;

        if (t->aborted)
            return abort_status(t);
        SL_TRY(next_frame(t, &f, &got));
        if (!got)
            return SL_OK;
        if (!f)
            continue; /* dropped and counted by read_one */
        if (f->pub.h.kind == SL_WIRE_ABORT) {
            note_abort(t, f);
            SL_TRY(count_msg(t, SL_WIRE_ABORT, f->pub.h.component, f->pub.h.encoding,
                             f->pub.h.payload_bytes, 0));
            release_frame(f);
            continue;
        }
        SL_TRY(dispatch(t, f, NULL, 0, &idx, &matched));
    }
}

const char *
sl_transport_abort_reason(const sl_transport_t *t)
{
    return t->aborted ? t->abort_msg : NULL;
}

sl_status_t
sl_transport_recv(sl_transport_t *t, const sl_wire_key_t *key, void *buf, size_t cap, size_t *got,
                  int timeout_ms)
{
    sl_transport_frame_t *f;
    size_t n;

    *got = 0;
    SL_TRY(sl_transport_recv_any(t, key, 1, timeout_ms, &f, NULL));
    n = f->h.payload_bytes;
    if (n > cap) {
        sl_transport_frame_release(&f);
        return sl_err_set(SL_ERR_INVALID,
                          "sl_transport_recv: rank %u: %zu bytes of %s from rank %u do not fit "
                          "in %zu",
                          (unsigned)t->o.rank, n, sl_wire_kind_name(key->kind), (unsigned)key->peer,
                          cap);
    }
    if (n)
        memcpy(buf, f->payload, n);
    *got = n;
    sl_transport_frame_release(&f);
    return SL_OK;
}

sl_status_t
sl_transport_abort(sl_transport_t *t, const char *reason, int timeout_ms)
{
    size_t len = strlen(reason);
    uint32_t n = t->o.size, untold = 0;
    sl_wire_key_t key = {0, 0, 0, 0, SL_WIRE_ABORT};
    double deadline = sl_clock_now() + timeout_ms / 1000.0;

    if (len > SL_WIRE_MAX_ABORT)
        len = SL_WIRE_MAX_ABORT;
    for (uint32_t p = 0; p < n; p++) {
        if (p == t->o.rank || !t->endpoints || !t->endpoints[p])
            continue;
        double left = deadline - sl_clock_now();
        key.peer = p;
        sl_status_t st = sl_transport_send(t, &key, reason, (uint32_t)len, SL_WIRE_BYTES, 1.0f, 0,
                                           left > 0 ? (int)(left * 1000.0) : 0);
        if (st == SL_ERR_TIMEOUT)
            untold++;
        else if (st != SL_OK)
            return st;
    }
    if (untold)
        return sl_err_set(SL_ERR_TIMEOUT, "sl_transport_abort: rank %u: %u peers not told",
                          (unsigned)t->o.rank, (unsigned)untold);
    return SL_OK;
}
