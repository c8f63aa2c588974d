/* The transport's dispatcher: the peer table, the choice of a medium per peer, sends
 * through that medium's link, the receive loop over every link that files the frames
 * nobody asked for yet, counters, abort. It owns the mailbox, the counters and the
 * order in which links are polled and blocked on; it must not touch a socket or a lane
 * itself (the links in sl_link_zmq.c, sl_link_emu.c and sl_link_shm.c do, behind
 * sl_link.h). */
#include "transport/sl_transport.h"

#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "transport/sl_link.h"
#include "transport/sl_transport_internal.h"
#include "transport/sl_link_emu.h"
#include "transport/sl_link_shm.h"
#include "transport/sl_link_zmq.h"
#include "transport/sl_mailbox.h"
#include "transport/sl_shm_lane.h" /* the bounds of the shared-memory options */

/* The media. The first is the base, ZeroMQ: opened first and given to the others
 * (they send their own frames, and those they do not carry, through it), serves every
 * peer and is the one blocked on. Each peer's frames go to the first of the others
 * that serves it, else to the base: the emulated link, when on, before the lanes (it
 * stands for a network). A new medium is one more entry. */
static const sl_link_ops_t *const media[] = {&sl_link_zmq_ops, &sl_link_emu_ops, &sl_link_shm_ops};
_Static_assert(sizeof media / sizeof media[0] == SL_TRANSPORT_NLINKS, "one link per medium");
#define NLINKS SL_TRANSPORT_NLINKS
#define BASE SL_TRANSPORT_BASE

static const char *drop_names[SL_DROP_NREASONS - SL_WIRE_NREASONS] = {
    "not 1 or 2 parts",
    "sender is not the connection's rank",
    "old round",
    "duplicate",
    "mailbox full",
    "bad shared-memory frame",
    "lane offer naming no lane",
    "bad MAC",
    "replayed frame",
    "round too far ahead",
    "hello that names no endpoint",
    "wrong element count or encoding",
    "non-finite values"};

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

unsigned
sl_transport_io_threads_auto(long cores, int snapshots)
{
    if (snapshots && cores >= SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS)
        return 4u;
    return cores >= SL_TRANSPORT_IO_THREAD_CORES ? 2u : 1u;
}

unsigned
sl_transport_stripes_auto(unsigned io_threads)
{
    unsigned sending = io_threads - (io_threads + 1) / 2;

    return sending < 1                          ? 1u
           : sending > SL_TRANSPORT_MAX_STRIPES ? SL_TRANSPORT_MAX_STRIPES
                                                : sending;
}

/* Mailbox release callback for frames it holds, and for frames handed out. */
static void
release_frame(void *owner)
{
    sl_link_frame_t *f = owner;

    f->release(f);
}

void
sl_transport_frame_release(sl_transport_frame_t **f)
{
    if (!f || !*f)
        return;
    release_frame(*f); /* pub is a link frame's first member */
    *f = NULL;
}

/* Counts a dropped frame and logs the first one of each reason (a flood of bad frames
 * must not flood the log too). */
void
sl_transport_note_drop(sl_transport_t *t, unsigned reason, uint64_t n, const char *detail)
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

/* sl_link_env_t.drop */
static void
link_drop(void *host, unsigned reason, const char *detail)
{
    sl_transport_note_drop(host, reason, 1, detail);
}

/* sl_link_env_t.link_down */
static void
link_down(void *host, uint32_t peer, int down)
{
    sl_transport_t *t = host;

    if (peer < t->o.size)
        t->down_at[peer] = down ? sl_clock_now() : 0.0;
}

sl_status_t
sl_transport_new(sl_transport_t **out, const sl_transport_opts_t *o)
{
    sl_transport_t *t;
    sl_status_t st;

    *out = NULL;
    if (o->size == 0 || o->rank >= o->size || o->timeout_ms <= 0 || o->heartbeat_ms < 0 ||
        o->linger_ms < 0 || o->mailbox_frames == 0 || o->mailbox_bytes == 0 ||
        (o->shm &&
         (o->shm_slots == 0 || o->shm_slots > SL_SHM_MAX_SLOTS ||
          o->shm_slot_bytes <= SL_WIRE_HEADER_BYTES || o->shm_slot_bytes > SL_SHM_MAX_SLOT_BYTES)))
        return sl_err_set(SL_ERR_INVALID,
                          "transport: rank %u of %u, timeout %d ms, heartbeat %d ms, "
                          "linger %d ms: need rank < size, timeout > 0, others >= 0, "
                          "mailbox caps > 0, shared-memory slots and sizes in range",
                          (unsigned)o->rank, (unsigned)o->size, o->timeout_ms, o->heartbeat_ms,
                          o->linger_ms);
    if (o->io_threads > SL_TRANSPORT_MAX_IO_THREADS)
        return sl_err_set(SL_ERR_INVALID,
                          "transport: cluster.io_threads %u: need 0 (from the cores) "
                          "to %u",
                          o->io_threads, SL_TRANSPORT_MAX_IO_THREADS);
    if (o->stripes > SL_TRANSPORT_MAX_STRIPES)
        return sl_err_set(SL_ERR_INVALID,
                          "transport: cluster.stripes %u: need 0 (from the I/O threads) to %u",
                          o->stripes, SL_TRANSPORT_MAX_STRIPES);
    if (!(o->emulate_bits_per_s >= 0 && o->emulate_latency_ms >= 0 && o->emulate_jitter_ms >= 0 &&
          isfinite(o->emulate_bits_per_s) && isfinite(o->emulate_latency_ms) &&
          isfinite(o->emulate_jitter_ms)))
        return sl_err_set(SL_ERR_INVALID,
                          "transport: link emulation of %g bit/s, latency %g ms, jitter "
                          "%g ms: each must be finite and >= 0",
                          o->emulate_bits_per_s, o->emulate_latency_ms, o->emulate_jitter_ms);
    if (o->bind_endpoint && strlen(o->bind_endpoint) >= SL_TRANSPORT_ENDPOINT_MAX)
        return sl_err_set(SL_ERR_INVALID, "transport: bind endpoint too long");
    t = calloc(1, sizeof *t);
    if (!t)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    t->o = *o;
    snprintf(t->bind, sizeof t->bind, "%s",
             o->bind_endpoint ? o->bind_endpoint : "tcp://127.0.0.1:*");
    t->o.bind_endpoint = t->bind;
    if (t->o.io_threads == 0)
        t->o.io_threads = sl_transport_io_threads_auto(sysconf(_SC_NPROCESSORS_ONLN), 0);
    if (t->o.stripes == 0)
        t->o.stripes = sl_transport_stripes_auto(t->o.io_threads);
    if (o->emulate_bits_per_s > 0 || o->emulate_latency_ms > 0 || o->emulate_jitter_ms > 0) {
        t->o.shm = 0;     /* an emulated link stands for a network: no lanes either way */
        t->o.stripes = 1; /* and keeps its frames in order */
    }
    t->route = calloc(o->size, sizeof *t->route);
    t->heard = calloc(o->size, sizeof *t->heard);
    t->heard_before = calloc(o->size, sizeof *t->heard_before);
    t->heard_key = calloc(o->size, sizeof *t->heard_key);
    t->missed = calloc(o->size, sizeof *t->missed);
    t->comebacks = calloc(o->size, sizeof *t->comebacks);
    t->down_at = calloc(o->size, sizeof *t->down_at);
    if (!t->route || !t->heard || !t->heard_before || !t->heard_key || !t->missed ||
        !t->comebacks || !t->down_at) {
        st = sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
        goto fail;
    }
    SL_TRY_GOTO(sl_mailbox_new(&t->mb, o->mailbox_frames, o->mailbox_bytes, SL_MAILBOX_AHEAD_ROUNDS,
                               release_frame),
                st, fail);
    for (size_t i = 0; i < NLINKS; i++) {
        sl_link_env_t env = {&t->o, {NULL, NULL}, link_drop, link_down, t};
        if (i != BASE)
            env.base = t->links[BASE];
        t->links[i].ops = media[i];
        SL_TRY_GOTO(media[i]->open(&t->links[i].ctx, &env), st, fail);
    }
    for (uint32_t p = 0; p < o->size; p++) {
        t->route[p] = &t->links[BASE];
        for (size_t i = 0; i < NLINKS; i++)
            if (i != BASE && media[i]->serves(t->links[i].ctx, p)) {
                t->route[p] = &t->links[i];
                break;
            }
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
    for (size_t i = NLINKS; i-- > 0;) /* the others before the base they use */
        if (t->links[i].ops)
            t->links[i].ops->close(&t->links[i].ctx);
    free(t->heard);
    free(t->heard_before);
    free(t->heard_key);
    free(t->missed);
    free(t->comebacks);
    free(t->down_at);
    free(t->route);
    free(t->stats);
    free(t);
    *tp = NULL;
}

const char *
sl_transport_endpoint(const sl_transport_t *t)
{
    return sl_link_zmq_endpoint(t->links[BASE].ctx);
}

const unsigned char *
sl_transport_session(const sl_transport_t *t)
{
    return sl_link_zmq_session(t->links[BASE].ctx);
}

void
sl_transport_learn_sessions(sl_transport_t *t, const unsigned char *sessions)
{
    sl_link_zmq_learn_sessions(t->links[BASE].ctx, sessions);
}

uint64_t
sl_transport_refused(const sl_transport_t *t)
{
    return sl_link_zmq_refused(t->links[BASE].ctx);
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

int
sl_transport_allreduce_ring(const sl_transport_t *t)
{
    return t->o.allreduce_ring;
}

unsigned
sl_transport_io_threads(const sl_transport_t *t)
{
    return t->o.io_threads;
}

unsigned
sl_transport_stripes(const sl_transport_t *t)
{
    return t->o.stripes;
}

sl_status_t
sl_transport_connect(sl_transport_t *t, const char *const *endpoints)
{
    return sl_link_zmq_connect(t->links[BASE].ctx, endpoints);
}

static sl_transport_stat_t *
find_stat(const sl_transport_t *t, unsigned kind, uint32_t component)
{
    for (size_t i = 0; i < t->nstats; i++)
        if (t->stats[i].kind == kind && t->stats[i].component == component)
            return &t->stats[i];
    return NULL;
}

/* The counters of (kind, component), a zeroed row added when there is none; NULL (the
 * error set) when out of memory. */
static sl_transport_stat_t *
stat_row(sl_transport_t *t, unsigned kind, uint32_t component)
{
    sl_transport_stat_t *s = find_stat(t, kind, component);

    if (s)
        return s;
    if (t->nstats == t->stats_cap) {
        size_t ncap = t->stats_cap ? 2 * t->stats_cap : 16;
        sl_transport_stat_t *ns = realloc(t->stats, ncap * sizeof *ns);
        if (!ns) {
            sl_err_set(SL_ERR_NOMEM, "transport: out of memory for counters");
            return NULL;
        }
        t->stats = ns;
        t->stats_cap = ncap;
    }
    s = &t->stats[t->nstats++];
    memset(s, 0, sizeof *s);
    s->kind = (uint8_t)kind;
    s->component = component;
    return s;
}

/* One message of bytes (payload) in encoding, sent or received, counted in row s. */
static void
count_in_row(sl_transport_stat_t *s, unsigned encoding, uint64_t bytes, int sent)
{
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
}

sl_status_t
sl_transport_count_msg(sl_transport_t *t, unsigned kind, uint32_t component, unsigned encoding,
                       uint64_t bytes, int sent)
{
    sl_transport_stat_t *s = stat_row(t, kind, component);

    if (!s)
        return SL_ERR_NOMEM;
    count_in_row(s, encoding, bytes, sent);
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
sl_transport_watch(sl_transport_t *t)
{
    for (size_t i = 0; i < NLINKS; i++)
        if (t->links[i].ops->watch)
            t->links[i].ops->watch(t->links[i].ctx);
}

int
sl_transport_gone(const sl_transport_t *t, uint32_t rank)
{
    return rank < t->o.size && t->down_at[rank] > 0 && t->down_at[rank] >= t->heard[rank];
}

void
sl_transport_shm_frames(const sl_transport_t *t, uint64_t *sent, uint64_t *received)
{
    *sent = *received = 0;
    for (size_t i = 0; i < NLINKS; i++)
        if (media[i] == &sl_link_shm_ops)
            media[i]->stats(t->links[i].ctx, sent, received);
}

uint64_t
sl_transport_stripe_frames(const sl_transport_t *t, unsigned stripe)
{
    return sl_link_zmq_stripe_frames(t->links[BASE].ctx, stripe);
}

sl_status_t
sl_transport_send(sl_transport_t *t, const sl_wire_key_t *key, const void *payload, uint32_t count,
                  unsigned encoding, float scale, int flags, int timeout_ms)
{
    sl_wire_header_t h;
    sl_link_t *l;
    int wait_ms = timeout_ms < 0 ? t->o.timeout_ms : timeout_ms;

    if (key->peer >= t->o.size || key->peer == t->o.rank)
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: bad destination %u",
                          (unsigned)t->o.rank, (unsigned)key->peer);
    h = sl_wire_header_for(t->o.run_id, t->o.rank, key, count, encoding, scale);
    if (h.payload_bytes && !payload)
        return sl_err_set(SL_ERR_INVALID, "transport: no payload for %u elements", (unsigned)count);
    l = t->route[key->peer];
    SL_TRY(l->ops->send(l->ctx, &h, payload, flags, wait_ms));
    return sl_transport_count_msg(t, key->kind, key->component, h.encoding, h.payload_bytes, 1);
}

sl_status_t
sl_transport_wait_sent(sl_transport_t *t, int timeout_ms)
{
    double start = sl_clock_now();

    for (size_t i = 0; i < NLINKS; i++) {
        sl_link_t *l = &t->links[i];
        int left = timeout_ms - (int)((sl_clock_now() - start) * 1000.0);
        if (l->ops->wait_sent)
            SL_TRY(l->ops->wait_sent(l->ctx, left > 0 ? left : 0));
    }
    return SL_OK;
}

void
sl_transport_forget(sl_transport_t *t, uint32_t rank)
{
    sl_transport_learn_endpoint(t, rank, NULL);
}

/* The next frame from any link, if one is waiting: the others first (a lane costs no
 * system call), the base last. *out is a frame for the mailbox or the caller, NULL
 * when it was dropped or was a link's own (handed to it); *got whether there was a
 * frame at all. */
static sl_status_t
next_frame(sl_transport_t *t, sl_link_frame_t **out, int *got)
{
    sl_link_frame_t *f = NULL;

    *out = NULL;
    *got = 0;
    for (size_t i = 1; i <= NLINKS && !*got; i++) { /* BASE is 0: it comes last */
        sl_link_t *l = &t->links[i % NLINKS];
        if (l->ops->recv)
            SL_TRY(l->ops->recv(l->ctx, &f, got));
    }
    if (!f)
        return SL_OK;
    for (size_t i = 0; i < NLINKS; i++)
        if ((media[i]->kinds >> f->pub.h.kind) & 1u) {
            media[i]->take(t->links[i].ctx, f);
            f->release(f);
            return SL_OK;
        }
    if (f->pub.h.kind == SL_WIRE_HELLO) {
        sl_transport_take_hello(t, f);
        f->release(f);
        return SL_OK;
    }
    *out = f;
    return SL_OK;
}

/* Whether a link delivers frames without waking the base: then the receive loop spins
 * before it blocks. */
static int
links_polled(const sl_transport_t *t)
{
    for (size_t i = 0; i < NLINKS; i++)
        if (media[i]->nap_ms && media[i]->nap_ms(t->links[i].ctx) != SL_LINK_NO_NAP)
            return 1;
    return 0;
}

/* Blocks in the base link's wait up to timeout_ms, or less when another link must be
 * polled sooner; first tells the links (whose senders then wake us through the base),
 * and does not block when one already has a frame. Returning is no promise that
 * anything arrived. */
static sl_status_t
block(sl_transport_t *t, int timeout_ms)
{
    sl_status_t st = SL_OK;
    int ready = 0;

    for (size_t i = 0; i < NLINKS; i++) {
        sl_link_t *l = &t->links[i];
        int nap = l->ops->nap_ms ? l->ops->nap_ms(l->ctx) : SL_LINK_NO_NAP;
        if (l->ops->sleep)
            ready |= l->ops->sleep(l->ctx, 1);
        if (nap != SL_LINK_NO_NAP && nap < timeout_ms)
            timeout_ms = nap;
    }
    if (!ready)
        st = t->links[BASE].ops->wait(t->links[BASE].ctx, timeout_ms);
    for (size_t i = 0; i < NLINKS; i++)
        if (t->links[i].ops->sleep)
            t->links[i].ops->sleep(t->links[i].ctx, 0);
    return st;
}

static int
key_eq(const sl_wire_key_t *a, const sl_wire_key_t *b)
{
    return a->round == b->round && a->component == b->component && a->seq == b->seq &&
           a->peer == b->peer && a->kind == b->kind;
}

/* A frame filed while this node's connection to its sender is lost (and not come
 * again) was sent before it went: the last of a killed process, still in the socket
 * when the loss was noticed. It proves nothing alive, and must not bring back a rank
 * already taken for dead (sl_transport_gone stays true). */
static void
mark_heard(sl_transport_t *t, const sl_wire_key_t *k)
{
    if (t->down_at[k->peer] > 0)
        return;
    t->heard_before[k->peer] = t->heard[k->peer];
    t->heard[k->peer] = sl_clock_now();
    t->heard_key[k->peer] = *k;
}

/* A frame of key k from k.peer was accepted: it proves the peer alive when its round is
 * the current one of its (kind, component) or one ahead that the mailbox took (a node
 * come back starts a round or two ahead of the others, sl_rejoin.h). A stale frame, or
 * one for a (kind, component) nobody asked for yet, does not: a peer that talks but
 * never answers what is asked is to be taken for dead like a silent one. */
static void
note_heard(sl_transport_t *t, const sl_wire_key_t *k)
{
    uint64_t cur;

    if (sl_mailbox_current(t->mb, k->kind, k->component, &cur) && k->round >= cur)
        mark_heard(t, k);
}

void
sl_transport_refuse(sl_transport_t *t, sl_transport_frame_t **f, unsigned reason,
                    const char *detail)
{
    char where[224];
    uint32_t from = (*f)->h.sender;
    sl_wire_key_t k = sl_wire_key_of(&(*f)->h);

    snprintf(where, sizeof where, "%s component %u round %" PRIu64 " from rank %u%s%s",
             sl_wire_kind_name((*f)->h.kind), (unsigned)(*f)->h.component, (*f)->h.round,
             (unsigned)from, detail ? ", " : "", detail ? detail : "");
    sl_transport_note_drop(t, reason < SL_DROP_NREASONS ? reason : SL_DROP_BAD_SIZE, 1, where);
    /* keys are unique per sender while a frame lives: the last one heard is this one */
    if (from < t->o.size && t->heard[from] > 0 && key_eq(&t->heard_key[from], &k))
        t->heard[from] = t->heard_before[from];
    sl_transport_frame_release(f);
}

/* Hands f out if it matches a key (1), else files it (0). */
static sl_status_t
dispatch(sl_transport_t *t, sl_link_frame_t *f, const sl_wire_key_t *keys, size_t nkeys,
         size_t *which, int *matched)
{
    sl_wire_key_t k = sl_wire_key_of(&f->pub.h);
    sl_mailbox_verdict_t v;
    uint64_t bytes = f->pub.h.payload_bytes;
    unsigned enc = f->pub.h.encoding; /* f belongs to the mailbox once filed */
    sl_transport_stat_t *row = stat_row(t, k.kind, k.component);
    char detail[160];

    if (!row)
        return SL_ERR_NOMEM;
    if (k.round > row->recv_newest_round)
        row->recv_newest_round = k.round;
    *matched = 0;
    for (size_t i = 0; i < nkeys; i++)
        if (key_eq(&keys[i], &k)) {
            *which = i;
            *matched = 1;
            note_heard(t, &k);
            count_in_row(row, enc, bytes, 0);
            return SL_OK;
        }
    v = sl_mailbox_file(t->mb, &k, bytes, f);
    if (v == SL_MAILBOX_FILED) {
        note_heard(t, &k);
        count_in_row(row, enc, bytes, 0);
        return SL_OK;
    }
    /* the one stale frame that proves its sender alive: the answer waited for in vain,
     * come late (late is not dead, sl_liveness.h) */
    if (v == SL_MAILBOX_OLD_ROUND && key_eq(&t->missed[k.peer], &k)) {
        mark_heard(t, &k);
        t->missed[k.peer].kind = 0;
    }
    snprintf(detail, sizeof detail, "%s component %u round %" PRIu64 " seq %u from rank %u",
             sl_wire_kind_name(k.kind), (unsigned)k.component, k.round, (unsigned)k.seq,
             (unsigned)k.peer);
    sl_transport_note_drop(t,
                           v == SL_MAILBOX_OLD_ROUND      ? SL_DROP_OLD_ROUND
                           : v == SL_MAILBOX_FUTURE_ROUND ? SL_DROP_FUTURE_ROUND
                           : v == SL_MAILBOX_DUPLICATE    ? SL_DROP_DUPLICATE
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
    unsigned late = 0;
    sl_status_t st;

    *frame = NULL;
    if (nkeys == 0 || timeout_ms < 0)
        return sl_err_set(SL_ERR_INVALID, "transport: %zu keys, timeout %d ms", nkeys, timeout_ms);
    for (size_t i = 0; i < nkeys; i++) {
        if (keys[i].peer >= t->o.size || keys[i].peer == t->o.rank || keys[i].kind == 0 ||
            keys[i].kind >= SL_WIRE_NKINDS)
            return sl_err_set(SL_ERR_INVALID,
                              "transport: rank %u: bad key (kind %u, "
                              "sender %u)",
                              (unsigned)t->o.rank, (unsigned)keys[i].kind, (unsigned)keys[i].peer);
        SL_TRY(sl_mailbox_advance(t->mb, keys[i].kind, keys[i].component, keys[i].round, &purged));
    }
    sl_transport_note_drop(t, SL_DROP_OLD_ROUND, purged, "purged from the mailbox");
    if (t->aborted)
        return sl_transport_abort_status(t);
    for (size_t i = 0; i < nkeys; i++) {
        sl_link_frame_t *f = sl_mailbox_take(t->mb, &keys[i]);
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
        sl_link_frame_t *f;
        int got, matched;
        double now, left;

        SL_TRY(next_frame(t, &f, &got));
        if (f && f->pub.h.kind == SL_WIRE_ABORT) {
            sl_transport_note_abort(t, f);
            st = sl_transport_count_msg(t, SL_WIRE_ABORT, f->pub.h.component, f->pub.h.encoding,
                                        f->pub.h.payload_bytes, 0);
            f->release(f);
            return st != SL_OK ? st : sl_transport_abort_status(t);
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
        now = sl_clock_now();
        left = deadline - now;
        /* frames that keep coming must not hold the wait past its deadline: once it has
         * passed, only SL_TRANSPORT_DRAIN_FRAMES more are read (what had arrived when a
         * wait of 0 ms began, as far as that goes) */
        if (got && (left > 0 || late++ < SL_TRANSPORT_DRAIN_FRAMES))
            continue;
        if (left <= 0) {
            for (size_t i = 0; i < nkeys; i++)
                t->missed[keys[i].peer] = keys[i];
            return sl_err_set(SL_ERR_TIMEOUT,
                              "rank %u: no %s (component %u, round %" PRIu64
                              ", seq %u) from rank %u%s within %d ms",
                              (unsigned)t->o.rank, sl_wire_kind_name(keys[0].kind),
                              (unsigned)keys[0].component, keys[0].round, (unsigned)keys[0].seq,
                              (unsigned)keys[0].peer,
                              nkeys > 1 ? " or the other peers asked for" : "", timeout_ms);
        }
        if (now < spin_end && links_polled(t)) {
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
    /* bounded: a stream of frames must not hold the caller (a training step) for good */
    for (unsigned n = 0; n < SL_TRANSPORT_POLL_FRAMES; n++) {
        sl_link_frame_t *f;
        size_t idx;
        int got, matched;

        if (t->aborted)
            return sl_transport_abort_status(t);
        SL_TRY(next_frame(t, &f, &got));
        if (!got)
            return SL_OK;
        if (!f)
            continue; /* dropped and counted, or a link's own */
        if (f->pub.h.kind == SL_WIRE_ABORT) {
            sl_transport_note_abort(t, f);
            SL_TRY(sl_transport_count_msg(t, SL_WIRE_ABORT, f->pub.h.component, f->pub.h.encoding,
                                          f->pub.h.payload_bytes, 0));
            f->release(f);
            continue;
        }
        SL_TRY(dispatch(t, f, NULL, 0, &idx, &matched));
    }
    return t->aborted ? sl_transport_abort_status(t) : SL_OK;
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
                          "transport: rank %u: %zu bytes of %s from rank %u do not fit "
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
