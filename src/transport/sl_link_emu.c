/* The emulated link (sl_link_emu.h): per peer a queue of frames with their arrival
 * times, and one thread that hands each to the base link when its time has come. It
 * owns the queues and the link model; it must not touch sockets (the base does), the
 * mailbox or the counters per kind.
 *
 * Threads: the dispatcher's thread queues frames (send) and waits for lent payloads
 * (wait_sent); the link's thread is then the only one that sends through the base (the
 * transport has no lanes while emulating, so nothing else does), while the
 * dispatcher's thread only receives through it: a ZeroMQ socket is used by one thread
 * each, and the base's frame MACs keep what sealing and checking use apart. */
#include "transport/sl_link_emu.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "transport/sl_lent.h"
#include "transport/sl_link_zmq.h"

/* How long the thread waits before it offers a frame again to a base that had no room
 * for it (a slow or dead receiver), serving the other links meanwhile. */
#define RETRY_S 0.001

/* A frame on its way: its header, its payload (the copy, or the caller's lent one)
 * and when it arrives. */
typedef struct frame {
    struct frame *next;
    sl_wire_header_t h;
    const void *payload;
    void *copy; /* owned; NULL when lent or empty */
    int flags;  /* SL_SEND_LEND when lent */
    double due; /* sl_clock_now() time at which the base sends it */
} frame_t;

/* One directed link, this node to a peer. */
typedef struct {
    frame_t *head, *tail;
    uint32_t frames;
    double free_at;  /* when the last frame queued has left */
    double last_due; /* its arrival: no later frame arrives before */
    double retry_at; /* the base had no room for head: not before then */
    sl_rng_t jitter;
} queue_t;

typedef struct {
    sl_link_env_t env;
    const sl_transport_opts_t *o;
    sl_link_t base;
    int on;
    double bytes_per_s; /* 0: unlimited */
    double latency_s, jitter_s;
    queue_t *queues; /* (size) by peer */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a frame queued or handed on, or stop */
    pthread_t thread;
    int thread_live, stop;
    sl_lent_t lent; /* payloads lent to this link, still queued here */
    uint64_t lost;  /* frames the base refused: said once */
} emu_t;

static void emu_close(void **ctx);
static void *run_links(void *arg);

/* sl_clock_now() time t as an absolute CLOCK_MONOTONIC deadline. */
static struct timespec
deadline_at(double t)
{
    struct timespec ts;
    double s = floor(t);

    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((t - s) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    return ts;
}

static sl_status_t
emu_open(void **out, const sl_link_env_t *env)
{
    const sl_transport_opts_t *o = env->o;
    pthread_condattr_t ca;
    emu_t *e;

    *out = NULL;
    e = calloc(1, sizeof *e);
    if (!e)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    e->env = *env;
    e->o = o;
    e->base = env->base;
    e->on = o->emulate_bits_per_s > 0 || o->emulate_latency_ms > 0 || o->emulate_jitter_ms > 0;
    e->bytes_per_s = o->emulate_bits_per_s / 8.0;
    e->latency_s = o->emulate_latency_ms / 1000.0;
    e->jitter_s = o->emulate_jitter_ms / 1000.0;
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cond, &ca);
    pthread_condattr_destroy(&ca);
    sl_lent_init(&e->lent);
    *out = e;
    if (!e->on)
        return SL_OK;
    e->queues = calloc(o->size, sizeof *e->queues);
    if (!e->queues) {
        emu_close(out);
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    }
    for (uint32_t p = 0; p < o->size; p++) {
        uint64_t words[3] = {o->run_id, o->rank, p};
        sl_rng_init(&e->queues[p].jitter, sl_hash_u64s(words, 3));
    }
    if (pthread_create(&e->thread, NULL, run_links, e) != 0) {
        emu_close(out);
        return sl_err_set(SL_ERR_TRANSPORT, "transport: cannot start the link thread");
    }
    e->thread_live = 1;
    return SL_OK;
}

static int
queued(const emu_t *e)
{
    for (uint32_t p = 0; e->queues && p < e->o->size; p++)
        if (e->queues[p].head)
            return 1;
    return 0;
}

static void
free_frame(emu_t *e, frame_t *f)
{
    if (f->flags & SL_SEND_LEND)
        sl_lent_give_back(&e->lent);
    free(f->copy);
    free(f);
}

/* Frames still queued get linger_ms to be handed on, as the base gives its own; the
 * rest are dropped (their lent payloads given back). */
static void
emu_close(void **ctx)
{
    emu_t *e = ctx ? *ctx : NULL;

    if (!e)
        return;
    if (e->thread_live) {
        struct timespec until = deadline_at(sl_clock_now() + e->o->linger_ms / 1000.0);
        int rc = 0;

        pthread_mutex_lock(&e->lock);
        while (queued(e) && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&e->cond, &e->lock, &until);
        e->stop = 1;
        pthread_cond_broadcast(&e->cond);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    for (uint32_t p = 0; e->queues && p < e->o->size; p++)
        while (e->queues[p].head) {
            frame_t *f = e->queues[p].head;
            e->queues[p].head = f->next;
            free_frame(e, f);
        }
    free(e->queues);
    sl_lent_fini(&e->lent);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
    *ctx = NULL;
}

static int
emu_serves(void *ctx, uint32_t peer)
{
    emu_t *e = ctx;

    (void)peer;
    return e->on;
}

/* Hands the head of q on to the base when its time has come (called with the lock
 * held, which it lets go while the base sends). */
static void
hand_on(emu_t *e, queue_t *q)
{
    frame_t *f = q->head;
    sl_status_t st;

    pthread_mutex_unlock(&e->lock);
    st = e->base.ops->send(e->base.ctx, &f->h, f->payload, f->flags, 0);
    pthread_mutex_lock(&e->lock);
    if (st == SL_ERR_TIMEOUT) { /* no room at the base: keep it, and its place */
        q->retry_at = sl_clock_now() + RETRY_S;
        return;
    }
    if (st != SL_OK && e->lost++ == 0)
        sl_log_warn("transport", "rank %u: an emulated link lost a frame to rank %u: %s",
                    (unsigned)e->o->rank, (unsigned)f->h.receiver, sl_err_msg());
    q->head = f->next;
    if (!q->head)
        q->tail = NULL;
    q->frames--;
    free_frame(e, f);
    pthread_cond_broadcast(&e->cond); /* room for senders, lent given back, close */
}

/* The link thread: hands each frame on at its arrival time, the earliest first. */
static void *
run_links(void *arg)
{
    emu_t *e = arg;

    pthread_mutex_lock(&e->lock);
    while (!e->stop) {
        queue_t *next = NULL;
        double when = 0, now;

        for (uint32_t p = 0; p < e->o->size; p++) {
            queue_t *q = &e->queues[p];
            double t;
            if (!q->head)
                continue;
            t = q->head->due > q->retry_at ? q->head->due : q->retry_at;
            if (!next || t < when) {
                next = q;
                when = t;
            }
        }
        now = sl_clock_now();
        if (!next) {
            pthread_cond_wait(&e->cond, &e->lock);
        } else if (when > now) {
            struct timespec until = deadline_at(when);
            pthread_cond_timedwait(&e->cond, &e->lock, &until);
        } else {
            hand_on(e, next);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* Queues the frame with its arrival time on the link to h->receiver, waiting up to
 * wait_ms for room. Checked as the base would check it, now: it is sent later. */
static sl_status_t
emu_send(void *ctx, const sl_wire_header_t *h, const void *payload, int flags, int wait_ms)
{
    emu_t *e = ctx;
    uint32_t peer = h->receiver;
    queue_t *q = &e->queues[peer];
    unsigned char hb[SL_WIRE_HEADER_BYTES];
    uint64_t bytes = SL_WIRE_HEADER_BYTES + h->payload_bytes;
    int lend = (flags & SL_SEND_LEND) && h->payload_bytes >= SL_TRANSPORT_ZEROCOPY_BYTES;
    struct timespec until = deadline_at(sl_clock_now() + wait_ms / 1000.0);
    frame_t *f;
    double now, start;
    int rc = 0;

    SL_TRY(sl_wire_encode_head(h, hb));
    if (!sl_link_zmq_known(e->base.ctx, peer))
        return sl_err_set(SL_ERR_INVALID, "transport: rank %u: no endpoint for rank %u",
                          (unsigned)e->o->rank, (unsigned)peer);
    f = calloc(1, sizeof *f);
    if (!f || (!lend && h->payload_bytes && !(f->copy = malloc(h->payload_bytes)))) {
        free(f);
        return sl_err_set(SL_ERR_NOMEM, "transport: %" PRIu64 " bytes", h->payload_bytes);
    }
    f->h = *h;
    f->flags = lend ? SL_SEND_LEND : 0;
    if (f->copy)
        memcpy(f->copy, payload, h->payload_bytes);
    f->payload = lend ? payload : f->copy;
    pthread_mutex_lock(&e->lock);
    while (q->frames >= SL_LINK_EMU_QUEUE_FRAMES && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&e->cond, &e->lock, &until);
    if (q->frames >= SL_LINK_EMU_QUEUE_FRAMES) {
        pthread_mutex_unlock(&e->lock);
        free(f->copy);
        free(f);
        return sl_err_set(SL_ERR_TIMEOUT,
                          "transport: rank %u: no room to send %s to rank %u within "
                          "%d ms",
                          (unsigned)e->o->rank, sl_wire_kind_name(h->kind), (unsigned)peer,
                          wait_ms);
    }
    /* the link model: leave when free, take the rate's time, arrive latency later */
    now = sl_clock_now();
    start = q->free_at > now ? q->free_at : now;
    q->free_at = start + (e->bytes_per_s > 0 ? (double)bytes / e->bytes_per_s : 0.0);
    f->due = q->free_at + e->latency_s + e->jitter_s * sl_rng_double(&q->jitter);
    if (f->due < q->last_due)
        f->due = q->last_due;
    q->last_due = f->due;
    if (q->tail)
        q->tail->next = f;
    else
        q->head = f;
    q->tail = f;
    q->frames++;
    if (lend)
        sl_lent_take(&e->lent);
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    return SL_OK;
}

/* Lent payloads are the caller's again once this link has handed them on and the base
 * has given them back. */
static sl_status_t
emu_wait_sent(void *ctx, int timeout_ms)
{
    emu_t *e = ctx;
    double end = sl_clock_now() + timeout_ms / 1000.0, left;
    uint64_t held;

    if (!e->on)
        return SL_OK;
    held = sl_lent_wait(&e->lent, timeout_ms);
    if (held)
        return sl_err_set(SL_ERR_TIMEOUT,
                          "transport: rank %u: %" PRIu64
                          " lent payloads still on emulated links after %d ms",
                          (unsigned)e->o->rank, held, timeout_ms);
    left = end - sl_clock_now();
    return e->base.ops->wait_sent(e->base.ctx, left > 0 ? (int)(left * 1000.0) : 0);
}

/* Every frame goes on through the base, which counts it. */
static void
emu_stats(const void *ctx, uint64_t *sent, uint64_t *received)
{
    (void)ctx;
    *sent = *received = 0;
}

const sl_link_ops_t sl_link_emu_ops = {
    .name = "emu",
    .kinds = 0,
    .open = emu_open,
    .close = emu_close,
    .serves = emu_serves,
    .send = emu_send,
    .recv = NULL,
    .take = NULL,
    .nap_ms = NULL,
    .sleep = NULL,
    .wait = NULL,
    .wait_sent = emu_wait_sent,
    .stats = emu_stats,
    .watch = NULL,
};
