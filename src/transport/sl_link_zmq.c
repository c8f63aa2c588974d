/* The ZeroMQ link (sl_link_zmq.h): the context, the bound ROUTER, closing the DEALERs to
 * the peers (sl_link_zmq_send.c makes them and sends), and reading one message off the
 * ROUTER into a validated frame, putting frames sent in pieces together. It owns the
 * sockets and the routing ids; it must not touch the mailbox, the counters per kind or
 * the lanes (the dispatcher and sl_link_shm.c do).
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
 * Stripes (o->stripes > 1; sl_link_zmq_send.c sends on them): a receiver takes any number
 * of stripes: its ROUTER takes every connection, and each frame or piece is checked on
 * its own. */
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
#include "transport/sl_link_zmq_internal.h"
#include "transport/sl_zmq_pieces.h"
#include "transport/sl_zmq_status.h"
#include "transport/sl_zmq_watch.h"

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

sl_status_t
sl_link_zmq_set_int(void *s, int opt, int v, const char *what)
{
    if (zmq_setsockopt(s, opt, &v, sizeof v) != 0)
        return sl_zmq_fail("transport: setting %s", what);
    return SL_OK;
}

sl_status_t
sl_link_zmq_set_u64(void *s, int opt, uint64_t v, const char *what)
{
    if (zmq_setsockopt(s, opt, &v, sizeof v) != 0)
        return sl_zmq_fail("transport: setting %s", what);
    return SL_OK;
}

static void zmq_close_link(void **ctx);

static sl_status_t
zmq_open(void **out, const sl_link_env_t *env)
{
    const sl_transport_opts_t *o = env->o;
    sl_link_zmq_t *z;
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
    SL_TRY_GOTO(sl_pieces_new(&z->pieces, o->size, o->mailbox_frames, o->mailbox_bytes,
                              !sl_link_zmq_proven(z)),
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
    sl_link_zmq_affinity_masks(o->io_threads, z->stripes, &recv_mask, z->send_masks);
    z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
    if (!z->router) {
        st = sl_zmq_fail("transport: creating a ZeroMQ socket");
        goto fail;
    }
    SL_TRY_GOTO(sl_link_zmq_set_int(z->router, ZMQ_LINGER, 0, "ZMQ_LINGER"), st, fail);
    SL_TRY_GOTO(sl_link_zmq_set_u64(z->router, ZMQ_AFFINITY, recv_mask, "ZMQ_AFFINITY"), st, fail);
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
    sl_link_zmq_t *z = ctx ? *ctx : NULL;

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
    const sl_link_zmq_t *z = ctx;

    return z->endpoint;
}

sl_status_t
sl_link_zmq_connect(void *ctx, const char *const *endpoints)
{
    sl_link_zmq_t *z = ctx;

    if (z->endpoints)
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: called twice", (unsigned)z->o->rank);
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
    const sl_link_zmq_t *z = ctx;

    return z->mac ? sl_frame_mac_session(z->mac) : NULL;
}

void
sl_link_zmq_learn_sessions(void *ctx, const unsigned char *sessions)
{
    sl_link_zmq_t *z = ctx;

    if (z->mac)
        sl_frame_mac_learn(z->mac, sessions);
}

int
sl_link_zmq_set_session(void *ctx, uint32_t peer, const unsigned char *session)
{
    sl_link_zmq_t *z = ctx;

    return z->mac ? sl_frame_mac_set_session(z->mac, peer, session) : -1;
}

uint64_t
sl_link_zmq_refused(const void *ctx)
{
    const sl_link_zmq_t *z = ctx;

    return z->curve ? sl_curve_refused(z->curve) : 0;
}

int
sl_link_zmq_known(const void *ctx, uint32_t peer)
{
    const sl_link_zmq_t *z = ctx;

    return z->endpoints && peer < z->o->size && z->endpoints[peer];
}

uint64_t
sl_link_zmq_stripe_frames(const void *ctx, unsigned stripe)
{
    const sl_link_zmq_t *z = ctx;

    return stripe < z->stripes ? z->stripe_sent[stripe] : 0;
}

static int
zmq_serves(void *ctx, uint32_t peer)
{
    (void)ctx;
    (void)peer;
    return 1;
}

/* With frame MACs: checks the last part, the trailer, against the frame before it
 * (header and payload in one part or two) and the sender its header claims, and takes
 * the trailer off. SL_OK with *sender proven, else the drop reason (SL_DROP_FRAMING,
 * SL_DROP_MAC, SL_DROP_REPLAY). */
static unsigned
check_trailer(sl_link_zmq_t *z, zframe_t *f, uint32_t *sender)
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
drop_frame(sl_link_zmq_t *z, zframe_t *f, unsigned reason, uint32_t idrank)
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
take_piece(sl_link_zmq_t *z, zframe_t *f, uint32_t idrank, sl_link_frame_t **out)
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
                           zmq_msg_data(&f->part[1]), zmq_msg_size(&f->part[1]), &whole, &hash)) {
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
    /* unproven, its checksum was computed as the pieces were copied */
    why = sl_link_zmq_proven(z)
              ? sl_wire_decode_parts_local(head, sizeof head, whole, h.payload_bytes, o->run_id,
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
    sl_link_zmq_t *z = ctx;
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
        return zmq_errno() == EAGAIN ? SL_OK : sl_zmq_fail("transport: rank %u", (unsigned)o->rank);
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
    } else if (zmq_msg_size(&id) == SL_LINK_ZMQ_ID_BYTES && idb[0] == 'S') {
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
    if (f->nparts == 2 && zmq_msg_size(&f->part[0]) == SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES) {
        take_piece(z, f, idrank, out);
        return SL_OK;
    }
    if (f->nparts == 1) {
        why = (sl_link_zmq_proven(z) ? sl_wire_decode_local : sl_wire_decode)(
            zmq_msg_data(&f->part[0]), zmq_msg_size(&f->part[0]), o->run_id, o->rank, o->size,
            &f->f.pub.h, &f->f.pub.payload);
    } else {
        f->f.pub.payload = zmq_msg_data(&f->part[1]);
        why = (sl_link_zmq_proven(z) ? sl_wire_decode_parts_local : sl_wire_decode_parts)(
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
    sl_link_zmq_t *z = ctx;

    if (z->have_first)
        return SL_OK;
    if (timeout_ms != z->rcvtimeo_ms) {
        SL_TRY(sl_link_zmq_set_int(z->router, ZMQ_RCVTIMEO, timeout_ms, "ZMQ_RCVTIMEO"));
        z->rcvtimeo_ms = timeout_ms;
    }
    zmq_msg_init(&z->first);
    if (zmq_msg_recv(&z->first, z->router, 0) >= 0) {
        z->have_first = 1;
        return SL_OK;
    }
    zmq_msg_close(&z->first);
    return zmq_errno() == EAGAIN ? SL_OK : sl_zmq_fail("transport: rank %u", (unsigned)z->o->rank);
}

static sl_status_t
zmq_wait_sent(void *ctx, int timeout_ms)
{
    sl_link_zmq_t *z = ctx;
    uint64_t left = sl_lent_wait(&z->lent, timeout_ms);

    if (left)
        return sl_err_set(SL_ERR_TIMEOUT,
                          "transport: rank %u: %" PRIu64 " lent payloads still queued after %d ms",
                          (unsigned)z->o->rank, left, timeout_ms);
    return SL_OK;
}

static void
zmq_stats(const void *ctx, uint64_t *sent, uint64_t *received)
{
    const sl_link_zmq_t *z = ctx;

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
    sl_link_zmq_t *z = ctx;
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
    for (int i = 5; i < SL_LINK_ZMQ_ID_BYTES && ++z->id[i] == 0; i++)
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
    sl_link_zmq_t *z = ctx;

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
    .send = sl_link_zmq_send_frame,
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
