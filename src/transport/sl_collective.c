/* Collectives on top of sl_transport: allreduce and allgather around the ring or by
 * halving and doubling (one streaming step routine), chain broadcast, dissemination
 * barrier.
 *
 * Every step streams (pass_step): a node sends one range to a peer and receives another
 * (around the ring from its right and left neighbours, else from one partner), chunk
 * by chunk, keeping `window` chunks in flight ahead of what it has received. Sends
 * never run more than the window (plus the difference between the two ranges' sizes)
 * ahead of receives, far below ZeroMQ's high-water mark, so a ring of blocked senders
 * cannot form; and every node that waits keeps reading its socket, filing early chunks
 * in the mailbox.
 *
 * With a codec (compression) chunks go as encoded copies: partial sums are encoded with
 * a fresh scale at every hop and added in fp32 by the receiver; a finished value (the
 * owner's segment in the allgather half) is encoded once, kept decoded by its owner too,
 * and passed on with the scale it came with, so all nodes end with the same bits. */
#include "transport/sl_collective.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_rng.h"

#define DEFAULT_WINDOW 8u

typedef struct {
    sl_transport_t *t;
    uint64_t round;
    size_t chunk; /* floats per frame */
    uint32_t component;
    uint32_t rank, n;      /* this node's transport rank; the ring's nodes */
    uint32_t pos;          /* this node's place in the ring */
    const uint32_t *ranks; /* (n) the ring's ranks (a group); NULL: 0 .. n-1 */
    uint32_t tag;          /* sl_group_tag, shifted into the top bits of seq */
    uint32_t seq_max;      /* the largest chunk seq before the tag */
    unsigned window;
    int timeout_ms;
    uint8_t kind;
    const sl_codec_t *codec; /* NULL: fp32 frames, lent */
    size_t elem;             /* bytes per encoded value */
    unsigned char *enc;      /* (chunk * elem) encode scratch, codec only */
    float *dec;              /* (chunk) decode scratch, codec only */
    float *scales;           /* (2, chunks_max) scales received in the last two steps */
} ring_t;

/* The allreduce's default frame. A segment below
 * SL_COLLECTIVE_CHUNK_ELEMS goes as one frame; a larger one in about
 * FRAMES_PER_SEGMENT frames of at least MIN_CHUNK_ELEMS, so that within a ring step
 * the transfer, the add and the next send overlap: over ZeroMQ on 16 cores, 4 MiB on 4
 * nodes (1 MiB segments) went from 1.66 to 2.58 GB/s bus bandwidth (bench/README.md).
 * Smaller segments keep one frame: through shared memory on 8 nodes, splitting 512 KiB
 * segments in two lost 27%. Every node derives it from the count and n alone. */
#define FRAMES_PER_SEGMENT 8u
#define MIN_CHUNK_ELEMS 65536u

size_t
sl_allreduce_chunk(size_t count, uint32_t n)
{
    size_t seg = n ? count / n + (count % n != 0) : count;
    size_t c = seg / FRAMES_PER_SEGMENT + (seg % FRAMES_PER_SEGMENT != 0);

    if (seg < SL_COLLECTIVE_CHUNK_ELEMS)
        return SL_COLLECTIVE_CHUNK_ELEMS;
    return c < MIN_CHUNK_ELEMS             ? MIN_CHUNK_ELEMS
           : c > SL_COLLECTIVE_CHUNK_ELEMS ? SL_COLLECTIVE_CHUNK_ELEMS
                                           : c;
}

/* Folded over the ranks as numbers, not their bytes: hosts of either byte order agree. */
uint32_t
sl_group_tag(const sl_group_t *g)
{
    uint64_t h;

    if (!g)
        return 0;
    h = g->epoch;
    for (uint32_t k = 0; k < g->n; k++) {
        uint64_t w[3] = {0x6d656d62u, h, g->ranks[k]};
        h = sl_hash_u64s(w, 3);
    }
    return (uint32_t)(h >> (64 - SL_COLLECTIVE_TAG_BITS));
}

/* The transport rank of the ring's node at place k. */
static uint32_t
peer_at(const ring_t *r, uint32_t k)
{
    return r->ranks ? r->ranks[k] : k;
}

/* r's nodes from group g (NULL: every rank): SL_ERR_INVALID unless its ranks increase,
 * are ranks of the transport and hold this node. */
static sl_status_t
ring_group(ring_t *r, const sl_group_t *g, uint8_t kind)
{
    uint32_t size = sl_transport_size(r->t);

    r->ranks = NULL;
    r->tag = 0;
    r->seq_max = UINT32_MAX;
    r->n = size;
    r->pos = r->rank;
    if (!g)
        return SL_OK;
    r->ranks = g->ranks;
    r->n = g->n;
    r->tag = sl_group_tag(g) << (32 - SL_COLLECTIVE_TAG_BITS);
    r->seq_max = UINT32_MAX >> SL_COLLECTIVE_TAG_BITS;
    r->pos = UINT32_MAX;
    for (uint32_t k = 0; k < g->n; k++) {
        if (!g->ranks || g->ranks[k] >= size || (k > 0 && g->ranks[k] <= g->ranks[k - 1]))
            return sl_err_set(
                SL_ERR_INVALID, "%s: rank %u: group of %u nodes is not increasing ranks below %u",
                sl_wire_kind_name(kind), (unsigned)r->rank, (unsigned)g->n, (unsigned)size);
        if (g->ranks[k] == r->rank)
            r->pos = k;
    }
    if (r->pos == UINT32_MAX)
        return sl_err_set(SL_ERR_INVALID, "%s: rank %u is not in the group of %u nodes",
                          sl_wire_kind_name(kind), (unsigned)r->rank, (unsigned)g->n);
    return SL_OK;
}

/* count: the allreduce's, for its default chunk; 0: the fixed default. */
static sl_status_t
ring_init(ring_t *r, sl_transport_t *t, uint8_t kind, uint32_t component, uint64_t round,
          const sl_collective_opts_t *o, size_t count)
{
    r->t = t;
    r->kind = kind;
    r->component = component;
    r->round = round;
    r->rank = sl_transport_rank(t);
    SL_TRY(ring_group(r, o ? o->group : NULL, kind));
    r->chunk = o && o->chunk_elems ? o->chunk_elems
               : count             ? sl_allreduce_chunk(count, r->n)
                                   : SL_COLLECTIVE_CHUNK_ELEMS;
    r->window = o && o->window ? o->window : DEFAULT_WINDOW;
    r->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : sl_transport_timeout_ms(t);
    r->codec = o ? o->codec : NULL;
    r->elem = sizeof(float);
    r->enc = NULL;
    r->dec = r->scales = NULL;
    if (r->chunk > SL_WIRE_MAX_PAYLOAD / sizeof(float) || r->window > 256)
        return sl_err_set(
            SL_ERR_INVALID, "%s: chunk of %zu floats (max %" PRIu64 "), window %u (max 256)",
            sl_wire_kind_name(kind), r->chunk, SL_WIRE_MAX_PAYLOAD / sizeof(float), r->window);
    if (r->codec) {
        r->elem = sl_wire_element_bytes(r->codec->encoding);
        if (r->elem == 0 || r->elem > sizeof(float) || !r->codec->scale || !r->codec->encode ||
            !r->codec->decode)
            return sl_err_set(SL_ERR_INVALID, "%s: codec of encoding %u is incomplete",
                              sl_wire_kind_name(kind), r->codec->encoding);
        r->enc = malloc(r->chunk * r->elem);
        r->dec = malloc(r->chunk * sizeof *r->dec);
        if (!r->enc || !r->dec) {
            free(r->enc);
            free(r->dec);
            return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", sl_wire_kind_name(kind));
        }
    }
    return SL_OK;
}

static void
ring_fini(ring_t *r)
{
    free(r->enc);
    free(r->dec);
    free(r->scales);
    r->enc = NULL;
    r->dec = r->scales = NULL;
}

static size_t
nchunks(const ring_t *r, size_t len)
{
    return len / r->chunk + (len % r->chunk != 0);
}

/* dst[i] += the i-th float of src (unaligned little-endian bytes). In blocks of 8,
 * which gcc -O2 turns into vector adds; its cost model leaves the plain loop scalar,
 * and this add is a third of a shared-memory allreduce's time. */
static void
add_into(float *restrict dst, const unsigned char *restrict src, size_t n)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        float v[8];
        memcpy(v, src + 4 * i, sizeof v);
        for (int k = 0; k < 8; k++)
            dst[i + k] += v[k];
    }
    for (; i < n; i++) {
        float v;
        memcpy(&v, src + 4 * i, sizeof v);
        dst[i] += v;
    }
}

/* Sends n floats at p as chunk seq. With a codec: scale > 0 re-encodes a value passed
 * on with the scale it came with; scale 0 picks a fresh one, and own then also keeps
 * the decoded values in p, as the other nodes will see them. */
static sl_status_t
send_chunk(const ring_t *r, uint32_t to, uint32_t seq, float *p, size_t n, float scale, int own)
{
    sl_wire_key_t key = {r->round, r->component, seq | r->tag, to, r->kind};
    const sl_codec_t *c = r->codec;

    if (!c)
        return sl_transport_send(r->t, &key, p, (uint32_t)n, SL_WIRE_FP32, 1.0f, SL_SEND_LEND,
                                 r->timeout_ms);
    if (scale <= 0.0f)
        scale = c->scale(c->ctx, p, n);
    c->encode(c->ctx, scale, p, n, r->enc);
    if (own)
        SL_TRY(c->decode(c->ctx, scale, r->enc, n * r->elem, p, n));
    /* copied: the scratch is reused for the next chunk */
    return sl_transport_send(r->t, &key, r->enc, (uint32_t)n, c->encoding, scale, 0, r->timeout_ms);
}

/* Receives chunk seq (n floats) from `from` into dst, adding or copying; *scale (may be
 * NULL) = the frame's scale. */
static sl_status_t
recv_chunk(const ring_t *r, uint32_t from, uint32_t seq, float *dst, size_t n, int add,
           float *scale)
{
    sl_wire_key_t key = {r->round, r->component, seq | r->tag, from, r->kind};
    unsigned want = r->codec ? r->codec->encoding : SL_WIRE_FP32;
    sl_transport_frame_t *f;
    sl_status_t st = SL_OK;

    SL_TRY(sl_transport_recv_any(r->t, &key, 1, r->timeout_ms, &f, NULL));
    if (f->h.encoding != want || f->h.count != n) {
        st = sl_err_set(SL_ERR_INVALID,
                        "%s: rank %u: chunk %u of round %" PRIu64 " from rank %u has %u %s "
                        "elements, expected %zu %s: the nodes disagree on sizes or options",
                        sl_wire_kind_name(r->kind), (unsigned)r->rank, (unsigned)seq, r->round,
                        (unsigned)from, (unsigned)f->h.count, sl_wire_encoding_name(f->h.encoding),
                        n, sl_wire_encoding_name(want));
    } else if (r->codec) {
        st = r->codec->decode(r->codec->ctx, f->h.scale, f->payload, f->h.payload_bytes,
                              add ? r->dec : dst, n);
        if (st == SL_OK && add)
            for (size_t i = 0; i < n; i++)
                dst[i] += r->dec[i];
        if (st != SL_OK)
            st = sl_err_prefix(st, "%s: rank %u: chunk %u from rank %u", sl_wire_kind_name(r->kind),
                               (unsigned)r->rank, (unsigned)seq, (unsigned)from);
    } else if (add) {
        add_into(dst, f->payload, n);
    } else {
        memcpy(dst, f->payload, n * sizeof(float));
    }
    if (scale)
        *scale = f->h.scale;
    sl_transport_frame_release(&f);
    return st;
}

/* The chunks a step sends or receives, in frames of r->chunk: of blocks q, q + stride,
 * ... below end, block q being len[q] floats at buf + off[q] (len NULL: one block of
 * `range` floats at buf); chunk j of block q travels as seq seq0 + q * per_block + j. */
typedef struct {
    float *buf;
    const size_t *off, *len;
    size_t range;
    uint32_t q, stride, end;
    uint32_t seq0, per_block;
    size_t j; /* the next chunk of block q */
} chunks_t;

/* The floats of segments lo .. lo + cnt - 1. */
static size_t
span(const size_t *off, const size_t *len, uint32_t lo, uint32_t cnt)
{
    return off[lo + cnt - 1] + len[lo + cnt - 1] - off[lo];
}

/* Segments lo .. lo + cnt - 1 of buf (off, len) as one range, its chunk j as seq0 + j. */
static chunks_t
segments(float *buf, const size_t *off, const size_t *len, uint32_t lo, uint32_t cnt, uint32_t seq0)
{
    return (chunks_t){.buf = buf + off[lo],
                      .range = span(off, len, lo, cnt),
                      .stride = 1,
                      .end = 1,
                      .seq0 = seq0};
}

/* The next chunk of c: *m floats at *p, travelling as *seq, chunk *j of its block; 0
 * when none is left. */
static int
chunks_next(const ring_t *r, chunks_t *c, float **p, size_t *m, uint32_t *seq, size_t *j)
{
    for (; c->q < c->end; c->q += c->stride, c->j = 0) {
        size_t at = c->j * r->chunk, len = c->len ? c->len[c->q] : c->range;
        if (at < len) {
            *p = c->buf + (c->len ? c->off[c->q] : 0) + at;
            *m = len - at < r->chunk ? len - at : r->chunk;
            *seq = c->seq0 + c->q * c->per_block + (uint32_t)c->j;
            *j = c->j++;
            return 1;
        }
    }
    return 0;
}

/* Sends out's next chunk to `to`, if one is left (*more 0 when none was): with the
 * scale it arrived with (prev, a value passed on) or a fresh one (prev NULL), and own
 * as send_chunk takes it. */
static sl_status_t
send_next(const ring_t *r, uint32_t to, chunks_t *out, const float *prev, int own, int *more)
{
    float *p;
    size_t m, j;
    uint32_t seq;

    *more = chunks_next(r, out, &p, &m, &seq, &j);
    return *more ? send_chunk(r, to, seq, p, m, prev ? prev[j] : 0.0f, own) : SL_OK;
}

/* One step's exchange, chunk by chunk: sends out to `to` while receiving in from
 * `from`, adding or copying, one chunk out for each one in so that `window` chunks stay
 * in flight. prev, cur and own: the scales passed on, those received (by chunk of a
 * one-block out and in), and whether the sender keeps its decoded values (as send_next
 * and recv_chunk take them; NULL, NULL, 0 without a codec). */
static sl_status_t
pass_step(const ring_t *r, uint32_t to, uint32_t from, chunks_t out, chunks_t in, int add,
          const float *prev, float *cur, int own)
{
    float *p;
    size_t m, j;
    uint32_t seq;
    int more = 1;

    for (unsigned k = 0; k < r->window && more; k++)
        SL_TRY(send_next(r, to, &out, prev, own, &more));
    while (chunks_next(r, &in, &p, &m, &seq, &j)) {
        SL_TRY(recv_chunk(r, from, seq, p, m, add, cur ? &cur[j] : NULL));
        if (more)
            SL_TRY(send_next(r, to, &out, prev, own, &more));
    }
    while (more)
        SL_TRY(send_next(r, to, &out, prev, own, &more));
    return SL_OK;
}

/* A ring over m of the nodes: member j is the node at place low + (j << shift) and holds
 * segment seg0 + j * seg_step; this node is member k. The whole ring: m = n, k = its
 * place, low = shift = seg0 = 0, seg_step = 1. */
typedef struct {
    uint32_t m, k, low, shift, seg0, seg_step;
} circle_t;

static circle_t
whole_ring(const ring_t *r)
{
    return (circle_t){.m = r->n, .k = r->pos, .seg_step = 1};
}

/* On n = 2^L m (m odd): the ring of the m places that agree with this node's below bit
 * L, its segments left for the caller to set. */
static circle_t
odd_ring(const ring_t *r)
{
    uint32_t levels = (uint32_t)__builtin_ctz(r->n);

    return (circle_t){.m = r->n >> levels,
                      .k = r->pos >> levels,
                      .low = r->pos & ((1u << levels) - 1),
                      .shift = levels};
}

/* m - 1 steps around circle c: at step s send member (start - s)'s segment to the right
 * and receive member (start - s - 1)'s from the left, adding it into buf
 * (reduce-scatter) or copying it (allgather). Segment q is buf[off[q] .. off[q] +
 * len[q]). Chunk j of step s travels as seq seq_base + s * chunks_max + j. With a codec,
 * a copying pass sends at step 0 the node's own finished segment (fresh scales, kept
 * decoded) and later the segment it received the step before, with the scales it came
 * with (kept in r->scales, chunks_max per step). */
static sl_status_t
ring_pass(ring_t *r, const circle_t *c, float *buf, const size_t *off, const size_t *len,
          uint32_t start, uint32_t seq_base, uint32_t chunks_max, int add)
{
    uint32_t m = c->m, right = peer_at(r, c->low + (((c->k + 1) % m) << c->shift)),
             left = peer_at(r, c->low + (((c->k + m - 1) % m) << c->shift));

    if (r->codec && !add) {
        free(r->scales);
        r->scales = malloc(2 * (chunks_max ? chunks_max : 1) * sizeof *r->scales);
        if (!r->scales)
            return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", sl_wire_kind_name(r->kind));
    }
    for (uint32_t s = 0; s + 1 < m; s++) {
        uint32_t sseg = c->seg0 + (start + m - s) % m * c->seg_step,
                 rseg = c->seg0 + (start + 2 * m - s - 1) % m * c->seg_step;
        /* scales of the chunks received the step before (sent now), and of this step's */
        const float *prev = r->scales && s > 0 ? r->scales + (s % 2) * chunks_max : NULL;
        float *cur = r->scales ? r->scales + ((s + 1) % 2) * chunks_max : NULL;
        uint32_t seq0 = seq_base + s * chunks_max;

        SL_TRY(pass_step(r, right, left, segments(buf, off, len, sseg, 1, seq0),
                         segments(buf, off, len, rseg, 1, seq0), add, prev, cur,
                         r->scales && s == 0));
    }
    return SL_OK;
}

/* Recursive halving, then doubling, over n = 2^L m (m odd; fp32 frames), with rings of
 * m in the middle. Halving step s < L pairs the nodes whose places differ in bit s: each
 * sends its partner half of its range of segments and adds the other half, the one its
 * own bit s picks, into buf, down to m segments, summed over the 2^L nodes that agree
 * with it above bit L. The m nodes that agree with it below bit L hold the same m
 * segments: a ring among them (places 2^L apart) sums and spreads those. The doubling
 * steps pair the nodes again in the reverse order and swap finished ranges, twice as
 * large each time. The ring's bytes in 2 (L + m - 1) steps rather than 2 (n - 1): 2
 * log2 n for a power of two, 6 rather than 10 on 6 nodes, 8 rather than 22 on 12. The
 * largest halves go to the nearest places, which hold the same host's nodes when a
 * run's hosts hold runs of consecutive ranks, so that no more crosses hosts than around
 * the ring. */
static sl_status_t
halving_passes(ring_t *r, float *buf, const size_t *off, const size_t *len, uint32_t chunks_max)
{
    circle_t c = odd_ring(r);
    uint32_t m = c.m, lo = 0, cnt = r->n, bit = 1, s = 0;

    for (; cnt > m; cnt /= 2, bit *= 2, s++) {
        uint32_t keep = r->pos & bit ? lo + cnt / 2 : lo, give = r->pos & bit ? lo : lo + cnt / 2;
        uint32_t peer = peer_at(r, r->pos ^ bit);
        SL_TRY(pass_step(r, peer, peer, segments(buf, off, len, give, cnt / 2, s * chunks_max),
                         segments(buf, off, len, keep, cnt / 2, s * chunks_max), 1, NULL, NULL, 0));
        lo = keep;
    }
    c.seg0 = lo;
    c.seg_step = 1;
    SL_TRY(ring_pass(r, &c, buf, off, len, c.k, s * chunks_max, chunks_max, 1));
    s += m - 1;
    /* the ring's allgather and the doubling overwrite ranges lent to ZeroMQ before */
    SL_TRY(sl_transport_wait_sent(r->t, r->timeout_ms));
    SL_TRY(ring_pass(r, &c, buf, off, len, (c.k + 1) % m, s * chunks_max, chunks_max, 0));
    s += m - 1;
    for (; cnt < r->n; cnt *= 2, s++) {
        uint32_t other, peer;
        bit /= 2;
        other = r->pos & bit ? lo - cnt : lo + cnt;
        peer = peer_at(r, r->pos ^ bit);
        SL_TRY(pass_step(r, peer, peer, segments(buf, off, len, lo, cnt, s * chunks_max),
                         segments(buf, off, len, other, cnt, s * chunks_max), 0, NULL, NULL, 0));
        lo = lo < other ? lo : other;
    }
    return SL_OK;
}

/* The largest number of chunks of the k parts of len, checked so that every seq of
 * `steps` steps fits. */
static sl_status_t
seq_space(const ring_t *r, const size_t *len, uint32_t k, uint32_t steps, uint32_t *chunks_max)
{
    size_t most = 0;

    for (uint32_t i = 0; i < k; i++)
        if (nchunks(r, len[i]) > most)
            most = nchunks(r, len[i]);
    if (most > r->seq_max / (steps ? steps : 1))
        return sl_err_set(SL_ERR_INVALID,
                          "%s: %zu chunks per segment over %u steps do not fit the 32-bit "
                          "sequence: use larger chunks",
                          sl_wire_kind_name(r->kind), most, (unsigned)steps);
    *chunks_max = (uint32_t)most;
    return SL_OK;
}

int
sl_allreduce_halves(uint32_t n, int coded, int ring)
{
    return !coded && n >= 4 && n % 2 == 0 && !ring;
}

/* The steps of halving_passes's halving and its ring's reduce-scatter on n nodes, L +
 * m - 1 for n = 2^L m (m odd); the doubling and the ring's allgather as many again. */
static uint32_t
halving_steps(uint32_t n)
{
    uint32_t levels = (uint32_t)__builtin_ctz(n);

    return levels + (n >> levels) - 1;
}

/* Both halves of the ring's allreduce, or halving_passes: the caller's ring, n
 * segments at off, len. */
static sl_status_t
allreduce_passes(ring_t *r, float *buf, const size_t *off, const size_t *len)
{
    uint32_t chunks_max = 0;
    circle_t c = whole_ring(r);

    if (sl_allreduce_halves(r->n, r->codec != NULL, sl_transport_allreduce_ring(r->t))) {
        size_t halves[2] = {span(off, len, 0, r->n / 2), span(off, len, r->n / 2, r->n / 2)};

        SL_TRY(seq_space(r, halves, 2, 2 * halving_steps(r->n), &chunks_max));
        return halving_passes(r, buf, off, len, chunks_max);
    }
    SL_TRY(seq_space(r, len, r->n, 2 * (r->n - 1), &chunks_max));
    SL_TRY(ring_pass(r, &c, buf, off, len, r->pos, 0, chunks_max, 1));
    /* the allgather overwrites segments that reduce-scatter lent to ZeroMQ */
    SL_TRY(sl_transport_wait_sent(r->t, r->timeout_ms));
    return ring_pass(r, &c, buf, off, len, (r->pos + 1) % r->n, (r->n - 1) * chunks_max, chunks_max,
                     0);
}

sl_status_t
sl_allreduce_sum(sl_transport_t *t, uint32_t component, uint64_t round, float *buf, size_t count,
                 const sl_collective_opts_t *o)
{
    ring_t r;
    size_t *off = NULL, *len;
    sl_status_t st;

    SL_TRY(ring_init(&r, t, SL_WIRE_ALLREDUCE, component, round, o, count));
    if (r.n == 1 || count == 0) {
        ring_fini(&r);
        return SL_OK;
    }
    off = malloc(2 * (size_t)r.n * sizeof *off);
    if (!off) {
        st = sl_err_set(SL_ERR_NOMEM, "allreduce: out of memory");
        goto out;
    }
    len = off + r.n;
    /* n near-equal segments: the first count % n get one float more */
    for (uint32_t k = 0; k < r.n; k++) {
        len[k] = count / r.n + (k < count % r.n);
        off[k] = k ? off[k - 1] + len[k - 1] : 0;
    }
    SL_TRY_GOTO(allreduce_passes(&r, buf, off, len), st, out);
    st = sl_transport_wait_sent(t, r.timeout_ms);
out:
    free(off);
    ring_fini(&r);
    return st;
}

/* The floats on the critical path of doubling_pass (the most any node sends at each
 * step, summed) may exceed the ring's (every block but the smallest, down each link) by
 * as much as the hand-overs shrink, from n - 1 to L + m - 1 for n = 2^L m (m odd). */
int
sl_allgather_doubles(uint32_t n, const size_t *counts, int coded, int ring)
{
    double total = 0, least = 0, doubling = 0;
    uint32_t levels, m;

    if (!sl_allreduce_halves(n, coded, ring))
        return 0;
    levels = (uint32_t)__builtin_ctz(n);
    m = n >> levels;
    for (uint32_t q = 0; q < n; q++) {
        total += (double)counts[q];
        least = q == 0 || (double)counts[q] < least ? (double)counts[q] : least;
    }
    /* ring step s: the node at place p sends the block of place p - s 2^L */
    for (uint32_t s = 0; s + 1 < m; s++) {
        double most = 0;
        for (uint32_t p = 0; p < n; p++) {
            double c = (double)counts[(p + (m - s) * (n / m)) % n];
            most = c > most ? c : most;
        }
        doubling += most;
    }
    for (uint32_t b = n / m / 2; b > 0; b /= 2) {
        double most = 0;
        for (uint32_t first = 0; first < 2 * b; first++) {
            double held = 0;
            for (uint32_t q = first; q < n; q += 2 * b)
                held += (double)counts[q];
            most = held > most ? held : most;
        }
        doubling += most;
    }
    return doubling * halving_steps(n) <= (total - least) * (n - 1);
}

/* Recursive doubling over n = 2^L m (m odd; fp32 frames). First a ring among the m
 * places that agree with this node's below bit L gathers their blocks; then step b =
 * 2^(L-1), ..., 1 pairs the places that differ in bit b, and each sends its partner the
 * blocks it holds, those of the places that agree with its own below bit 2b, receiving
 * as many. L + m - 1 steps rather than n - 1 (log2 n for a power of two), the ring's
 * bytes where the blocks are of one size; the first doubling step, between the farthest
 * places, moves m blocks, the last, between neighbours (the same host's nodes where
 * hosts hold consecutive ranks), half of them. A block goes from one node to another
 * once: in the doubling its chunk j travels as seq q * chunks_max + j, around the ring
 * as the step's chunk (the ring's pairs are not the doubling's). */
static sl_status_t
doubling_pass(ring_t *r, float *buf, const size_t *off, const size_t *len, uint32_t chunks_max)
{
    circle_t c = odd_ring(r);

    c.seg0 = c.low; /* the blocks of the ring's places */
    c.seg_step = 1u << c.shift;
    SL_TRY(ring_pass(r, &c, buf, off, len, c.k, 0, chunks_max, 0));
    for (uint32_t b = c.seg_step / 2; b > 0; b /= 2) {
        uint32_t peer = peer_at(r, r->pos ^ b);
        chunks_t out = {.buf = buf,
                        .off = off,
                        .len = len,
                        .q = r->pos % (2 * b),
                        .stride = 2 * b,
                        .end = r->n,
                        .per_block = chunks_max},
                 in = out;

        in.q = (r->pos ^ b) % (2 * b);
        SL_TRY(pass_step(r, peer, peer, out, in, 0, NULL, NULL, 0));
    }
    return SL_OK;
}

sl_status_t
sl_allgather(sl_transport_t *t, uint32_t component, uint64_t round, const float *mine, float *out,
             const size_t *counts, const sl_collective_opts_t *o)
{
    ring_t r;
    size_t *off;
    uint32_t chunks_max;
    int doubles;
    circle_t c;
    sl_status_t st;

    SL_TRY(ring_init(&r, t, SL_WIRE_ALLGATHER, component, round, o, 0));
    c = whole_ring(&r);
    off = malloc(r.n * sizeof *off);
    if (!off) {
        ring_fini(&r);
        return sl_err_set(SL_ERR_NOMEM, "allgather: out of memory");
    }
    for (uint32_t k = 0; k < r.n; k++)
        off[k] = k ? off[k - 1] + counts[k - 1] : 0;
    if (out + off[r.pos] != mine)
        memmove(out + off[r.pos], mine, counts[r.pos] * sizeof *out);
    doubles = sl_allgather_doubles(r.n, counts, r.codec != NULL, sl_transport_allreduce_ring(t));
    SL_TRY_GOTO(seq_space(&r, counts, r.n, doubles ? r.n : r.n - 1, &chunks_max), st, done);
    SL_TRY_GOTO(doubles ? doubling_pass(&r, out, off, counts, chunks_max)
                        : ring_pass(&r, &c, out, off, counts, r.pos, 0, chunks_max, 0),
                st, done);
    st = sl_transport_wait_sent(t, r.timeout_ms);
done:
    free(off);
    ring_fini(&r);
    return st;
}

sl_status_t
sl_broadcast(sl_transport_t *t, uint32_t component, uint64_t round, uint32_t root, float *buf,
             size_t count, const sl_collective_opts_t *o)
{
    ring_t r;
    uint32_t pos, left, right;
    size_t nch;
    sl_status_t st = SL_OK;

    SL_TRY(ring_init(&r, t, SL_WIRE_BROADCAST, component, round, o, 0));
    nch = nchunks(&r, count);
    if (root >= r.n || nch > r.seq_max) {
        ring_fini(&r);
        return sl_err_set(SL_ERR_INVALID,
                          "broadcast: root %u of %u nodes, %zu chunks (use larger ones)",
                          (unsigned)root, (unsigned)r.n, nch);
    }
    pos = (r.pos + r.n - root) % r.n; /* place in the chain root -> root+1 -> ... */
    left = peer_at(&r, (r.pos + r.n - 1) % r.n);
    right = peer_at(&r, (r.pos + 1) % r.n);
    for (size_t j = 0; j < nch && st == SL_OK; j++) {
        size_t at = j * r.chunk, m = count - at < r.chunk ? count - at : r.chunk;
        float scale = 0.0f; /* the root encodes afresh (and keeps what it sent) */
        if (pos > 0)
            st = recv_chunk(&r, left, (uint32_t)j, buf + at, m, 0, &scale);
        if (st == SL_OK && pos + 1 < r.n)
            st = send_chunk(&r, right, (uint32_t)j, buf + at, m, scale, pos == 0);
    }
    ring_fini(&r);
    return st != SL_OK ? st : sl_transport_wait_sent(t, r.timeout_ms);
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
