/* Collectives on top of sl_transport: ring allreduce and allgather (one ring pass
 * routine), chain broadcast, dissemination barrier, gossip push/collect.
 *
 * A ring pass streams: in each of its n-1 steps a node sends one segment to its right
 * neighbour and receives another from its left, chunk by chunk, keeping `window`
 * chunks in flight ahead of what it has received. Sends never run more than the window
 * (plus the difference between the two segments' sizes) ahead of receives, far below
 * ZeroMQ's high-water mark, so a ring of blocked senders cannot form; and every node
 * that waits keeps reading its socket, filing early chunks in the mailbox. */
#include "sl_collective.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sl_clock.h"
#include "sl_log.h"

#define DEFAULT_CHUNK 65536u
#define DEFAULT_WINDOW 8u

typedef struct {
    sl_transport_t *t;
    uint64_t round;
    size_t chunk; /* floats per frame */
    uint32_t component;
    uint32_t rank, n;
    unsigned window;
    int timeout_ms;
    uint8_t kind;
} ring_t;

static sl_status_t
ring_init(ring_t *r, sl_transport_t *t, uint8_t kind, uint32_t component, uint64_t round,
          const sl_collective_opts_t *o)
{
    r->t = t;
    r->kind = kind;
    r->component = component;
    r->round = round;
    r->rank = sl_transport_rank(t);
    r->n = sl_transport_size(t);
    r->chunk = o && o->chunk_elems ? o->chunk_elems : DEFAULT_CHUNK;
    r->window = o && o->window ? o->window : DEFAULT_WINDOW;
    r->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : sl_transport_timeout_ms(t);
    if (r->chunk > SL_WIRE_MAX_PAYLOAD / sizeof(float) || r->window > 256)
        return sl_err_set(
            SL_ERR_INVALID, "%s: chunk of %zu floats (max %" PRIu64 "), window %u (max 256)",
            sl_wire_kind_name(kind), r->chunk, SL_WIRE_MAX_PAYLOAD / sizeof(float), r->window);
    return SL_OK;
}

static size_t
nchunks(const ring_t *r, size_t len)
{
    return len / r->chunk + (len % r->chunk != 0);
}

/* dst[i] += the i-th float of src (unaligned little-endian bytes). */
static void
add_into(float *restrict dst, const unsigned char *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, src + 4 * i, sizeof v);
        dst[i] += v;
    }
}

static sl_status_t
send_chunk(const ring_t *r, uint32_t to, uint32_t seq, const float *p, size_t n)
{
    sl_wire_key_t key = {r->round, r->component, seq, to, r->kind};
    return sl_transport_send(r->t, &key, p, (uint32_t)n, SL_WIRE_FP32, 1.0f, SL_SEND_LEND,
                             r->timeout_ms);
}

/* Receives chunk seq (n floats) from `from` into dst, adding or copying. */
static sl_status_t
recv_chunk(const ring_t *r, uint32_t from, uint32_t seq, float *dst, size_t n, int add)
{
    sl_wire_key_t key = {r->round, r->component, seq, from, r->kind};
    sl_transport_frame_t *f;

    SL_TRY(sl_transport_recv_any(r->t, &key, 1, r->timeout_ms, &f, NULL));
    if (f->h.encoding != SL_WIRE_FP32 || f->h.count != n) {
        sl_status_t st = sl_err_set(
            SL_ERR_INVALID,
            "%s: rank %u: chunk %u of round %" PRIu64 " from rank %u has %u %s elements, "
            "expected %zu fp32: the nodes disagree on sizes or options",
            sl_wire_kind_name(r->kind), (unsigned)r->rank, (unsigned)seq, r->round, (unsigned)from,
            (unsigned)f->h.count, sl_wire_encoding_name(f->h.encoding), n);
        sl_transport_frame_release(&f);
        return st;
    }
    if (add)
        add_into(dst, f->payload, n);
    else
        memcpy(dst, f->payload, n * sizeof(float));
    sl_transport_frame_release(&f);
    return SL_OK;
}

/* Sends chunk j of segment [p, p + len) to `to` as seq. */
static sl_status_t
send_seg_chunk(const ring_t *r, uint32_t to, uint32_t seq, const float *p, size_t len, size_t j)
{
    size_t at = j * r->chunk, m = len - at;
    return send_chunk(r, to, seq, p + at, m < r->chunk ? m : r->chunk);
}

/* n-1 steps around the ring: at step s send segment (start - s) to the right and
 * receive segment (start - s - 1) from the left, adding it into buf (reduce-scatter)
 * or copying it (allgather). Segment k is buf[off[k] .. off[k] + len[k]). Chunk j of
 * step s travels as seq seq_base + s * chunks_max + j. */
static sl_status_t
ring_pass(const ring_t *r, float *buf, const size_t *off, const size_t *len, uint32_t start,
          uint32_t seq_base, uint32_t chunks_max, int add)
{
    uint32_t n = r->n, right = (r->rank + 1) % n, left = (r->rank + n - 1) % n;

    for (uint32_t s = 0; s + 1 < n; s++) {
        uint32_t sseg = (start + n - s) % n, rseg = (start + 2 * n - s - 1) % n;
        uint32_t seq0 = seq_base + s * chunks_max;
        size_t nsend = nchunks(r, len[sseg]), nrecv = nchunks(r, len[rseg]), sent = 0;
        const float *out = buf + off[sseg];

        for (; sent < nsend && sent < r->window; sent++)
            SL_TRY(send_seg_chunk(r, right, seq0 + (uint32_t)sent, out, len[sseg], sent));
        for (size_t j = 0; j < nrecv; j++) {
            size_t at = j * r->chunk, m = len[rseg] - at;
            SL_TRY(recv_chunk(r, left, seq0 + (uint32_t)j, buf + off[rseg] + at,
                              m < r->chunk ? m : r->chunk, add));
            if (sent < nsend) { /* one out for each one in: the window stays full */
                SL_TRY(send_seg_chunk(r, right, seq0 + (uint32_t)sent, out, len[sseg], sent));
                sent++;
            }
        }
        for (; sent < nsend; sent++)
            SL_TRY(send_seg_chunk(r, right, seq0 + (uint32_t)sent, out, len[sseg], sent));
    }
    return SL_OK;
}

/* The largest number of chunks of any segment, checked so that every seq fits. */
static sl_status_t
seq_space(const ring_t *r, const size_t *len, uint32_t steps, uint32_t *chunks_max)
{
    size_t most = 0;

    for (uint32_t k = 0; k < r->n; k++)
        if (nchunks(r, len[k]) > most)
            most = nchunks(r, len[k]);
    if (most > UINT32_MAX / (steps ? steps : 1))
        return sl_err_set(SL_ERR_INVALID,
                          "%s: %zu chunks per segment over %u steps do not fit the 32-bit "
                          "sequence: use larger chunks",
                          sl_wire_kind_name(r->kind), most, (unsigned)steps);
    *chunks_max = (uint32_t)most;
    return SL_OK;
}

sl_status_t
sl_allreduce_sum(sl_transport_t *t, uint32_t component, uint64_t round, float *buf, size_t count,
                 const sl_collective_opts_t *o)
{
    ring_t r;
    size_t *off = NULL, *len;
    uint32_t chunks_max;
    sl_status_t st;

    SL_TRY(ring_init(&r, t, SL_WIRE_ALLREDUCE, component, round, o));
    if (r.n == 1 || count == 0)
        return SL_OK;
    off = malloc(2 * (size_t)r.n * sizeof *off);
    if (!off)
        return sl_err_set(SL_ERR_NOMEM, "sl_allreduce_sum: out of memory");
    len = off + r.n;
    /* n near-equal segments: the first count % n get one float more */
    for (uint32_t k = 0; k < r.n; k++) {
        len[k] = count / r.n + (k < count % r.n);
        off[k] = k ? off[k - 1] + len[k - 1] : 0;
    }
    SL_TRY_GOTO(seq_space(&r, len, 2 * (r.n - 1), &chunks_max), st, out);
    SL_TRY_GOTO(ring_pass(&r, buf, off, len, r.rank, 0, chunks_max, 1), st, out);
    /* the allgather overwrites segments that reduce-scatter lent to ZeroMQ */
    SL_TRY_GOTO(sl_transport_wait_sent(t, r.timeout_ms), st, out);
    SL_TRY_GOTO(
        ring_pass(&r, buf, off, len, (r.rank + 1) % r.n, (r.n - 1) * chunks_max, chunks_max, 0), st,
        out);
    st = sl_transport_wait_sent(t, r.timeout_ms);
out:
    free(off);
    return st;
}

sl_status_t
sl_allgather(sl_transport_t *t, uint32_t component, uint64_t round, const float *mine, float *out,
             const size_t *counts, const sl_collective_opts_t *o)
{
    ring_t r;
    size_t *off;
    uint32_t chunks_max;
    sl_status_t st;

    SL_TRY(ring_init(&r, t, SL_WIRE_ALLGATHER, component, round, o));
    off = malloc(r.n * sizeof *off);
    if (!off)
        return sl_err_set(SL_ERR_NOMEM, "sl_allgather: out of memory");
    for (uint32_t k = 0; k < r.n; k++)
        off[k] = k ? off[k - 1] + counts[k - 1] : 0;
    if (out + off[r.rank] != mine)
        memmove(out + off[r.rank], mine, counts[r.rank] * sizeof *out);
    SL_TRY_GOTO(seq_space(&r, counts, r.n - 1, &chunks_max), st, done);
    SL_TRY_GOTO(ring_pass(&r, out, off, counts, r.rank, 0, chunks_max, 0), st, done);
    st = sl_transport_wait_sent(t, r.timeout_ms);
done:
    free(off);
    return st;
}

sl_status_t
sl_broadcast(sl_transport_t *t, uint32_t component, uint64_t round, uint32_t root, float *buf,
             size_t count, const sl_collective_opts_t *o)
{
    ring_t r;
    uint32_t pos, left, right;
    size_t nch;

    SL_TRY(ring_init(&r, t, SL_WIRE_BROADCAST, component, round, o));
    if (root >= r.n)
        return sl_err_set(SL_ERR_INVALID, "sl_broadcast: root %u of %u nodes", (unsigned)root,
                          (unsigned)r.n);
    nch = nchunks(&r, count);
    if (nch > UINT32_MAX)
        return sl_err_set(SL_ERR_INVALID, "sl_broadcast: %zu chunks: use larger chunks", nch);
    pos = (r.rank + r.n - root) % r.n; /* place in the chain root -> root+1 -> ... */
    left = (r.rank + r.n - 1) % r.n;
    right = (r.rank + 1) % r.n;
    for (size_t j = 0; j < nch; j++) {
        size_t at = j * r.chunk, m = count - at < r.chunk ? count - at : r.chunk;
        if (pos > 0)
            SL_TRY(recv_chunk(&r, left, (uint32_t)j, buf + at, m, 0));
        if (pos + 1 < r.n)
            SL_TRY(send_chunk(&r, right, (uint32_t)j, buf + at, m));
    }
    return sl_transport_wait_sent(t, r.timeout_ms);
}

sl_status_t
sl_barrier(sl_transport_t *t, uint64_t round, int timeout_ms)
{
    uint32_t n = sl_transport_size(t), rank = sl_transport_rank(t), stage = 0;
    size_t got;

    if (timeout_ms <= 0)
        timeout_ms = sl_transport_timeout_ms(t);
    /* after stage k every node has heard, directly or not, from the 2^(k+1) - 1 nodes
     * before it: ceil(log2 n) stages cover everyone */
    for (uint64_t d = 1; d < n; d <<= 1, stage++) {
        sl_wire_key_t to = {round, 0, stage, (uint32_t)((rank + d) % n), SL_WIRE_BARRIER};
        sl_wire_key_t from = {round, 0, stage, (uint32_t)((rank + n - d) % n), SL_WIRE_BARRIER};
        SL_TRY(sl_transport_send(t, &to, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, timeout_ms));
        SL_TRY(sl_transport_recv(t, &from, NULL, 0, &got, timeout_ms));
    }
    return SL_OK;
}

/* Ranks in list are < n, not me, and distinct. */
static sl_status_t
check_ranks(const uint32_t *list, size_t len, uint32_t me, uint32_t n, const char *what)
{
    for (size_t i = 0; i < len; i++) {
        if (list[i] >= n || list[i] == me)
            return sl_err_set(SL_ERR_INVALID, "sl_gossip_exchange: rank %u: %s[%zu] = %u",
                              (unsigned)me, what, i, (unsigned)list[i]);
        for (size_t j = 0; j < i; j++)
            if (list[j] == list[i])
                return sl_err_set(SL_ERR_INVALID,
                                  "sl_gossip_exchange: rank %u: rank %u twice in %s", (unsigned)me,
                                  (unsigned)list[i], what);
    }
    return SL_OK;
}

sl_status_t
sl_gossip_exchange(sl_transport_t *t, uint32_t component, uint64_t round, const float *mine,
                   size_t count, const uint32_t *pullers, size_t npullers, const uint32_t *chosen,
                   size_t nchosen, float *recv, uint32_t *from, size_t *got, int timeout_ms)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    sl_wire_key_t *keys = NULL;
    size_t left = nchosen;
    double deadline = sl_clock_now() + timeout_ms / 1000.0;
    sl_status_t st = SL_OK;

    *got = 0;
    if (count > SL_WIRE_MAX_PAYLOAD / sizeof(float) || timeout_ms < 0)
        return sl_err_set(SL_ERR_INVALID,
                          "sl_gossip_exchange: %zu floats (max %" PRIu64 " per frame), "
                          "timeout %d ms",
                          count, SL_WIRE_MAX_PAYLOAD / sizeof(float), timeout_ms);
    SL_TRY(check_ranks(pullers, npullers, me, n, "pullers"));
    SL_TRY(check_ranks(chosen, nchosen, me, n, "chosen"));
    for (size_t i = 0; i < npullers; i++) {
        sl_wire_key_t key = {round, component, 0, pullers[i], SL_WIRE_GOSSIP_SNAPSHOT};
        /* copied, not lent: a push to a dead puller may stay queued */
        st = sl_transport_send(t, &key, mine, (uint32_t)count, SL_WIRE_FP32, 1.0f, 0, 0);
        if (st == SL_ERR_TIMEOUT)
            sl_log_warn("gossip", "rank %u: push to rank %u skipped: %s", (unsigned)me,
                        (unsigned)pullers[i], sl_err_msg());
        else if (st != SL_OK)
            return st;
    }
    if (nchosen == 0)
        return SL_OK;
    keys = malloc(nchosen * sizeof *keys);
    if (!keys)
        return sl_err_set(SL_ERR_NOMEM, "sl_gossip_exchange: out of memory");
    for (size_t i = 0; i < nchosen; i++)
        keys[i] = (sl_wire_key_t){round, component, 0, chosen[i], SL_WIRE_GOSSIP_SNAPSHOT};
    while (left > 0) {
        sl_transport_frame_t *f;
        size_t which;
        double wait = deadline - sl_clock_now();

        st = sl_transport_recv_any(t, keys, left, wait > 0 ? (int)(wait * 1000.0) : 0, &f, &which);
        if (st == SL_ERR_TIMEOUT)
            break;
        if (st != SL_OK)
            goto out;
        if (f->h.encoding != SL_WIRE_FP32 || f->h.count != count) {
            st = sl_err_set(SL_ERR_INVALID,
                            "sl_gossip_exchange: rank %u: snapshot of component %u from rank "
                            "%u has %u %s elements, expected %zu fp32",
                            (unsigned)me, (unsigned)component, (unsigned)f->h.sender,
                            (unsigned)f->h.count, sl_wire_encoding_name(f->h.encoding), count);
            sl_transport_frame_release(&f);
            goto out;
        }
        memcpy(recv + *got * count, f->payload, count * sizeof(float));
        if (from)
            from[*got] = f->h.sender;
        ++*got;
        sl_transport_frame_release(&f);
        keys[which] = keys[--left];
    }
    st = left == 0
             ? SL_OK
             : sl_err_set(SL_ERR_TIMEOUT,
                          "sl_gossip_exchange: rank %u, component %u, round %" PRIu64
                          ": %zu of %zu chosen peers answered within %d ms",
                          (unsigned)me, (unsigned)component, round, *got, nchosen, timeout_ms);
out:
    free(keys);
    return st;
}
