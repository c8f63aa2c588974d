/* The scaling model's replay (sl_scale.h): per-node clocks, one FIFO per directed link,
 * and the exchanges of the sync algorithms built from frames on those links. Times are
 * in ms, sizes in bytes, both as doubles (chunks of S/n bytes need not be whole). */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include "tools/sl_scale.h"

#include <fnmatch.h>
#include <math.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "model/sl_model.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "transport/sl_collective.h"

#define MAX_NODES 4096    /* a ring allreduce replays 2(n-1) x n frames */
#define MAX_OVERLAP 10000 /* the replay keeps TAU + 1 deadlines per node */

typedef struct {
    const sl_scale_params_t *p;
    sl_schedule_t sched;
    int n, slots, tau;
    int levels;          /* L of halving on n = 2^L m (m odd), 0 where it does not halve */
    double ms_per_byte;  /* 8000 / bits_per_s; 0 with no limit */
    double *link_free;   /* (n, slots) when each directed link has sent its last frame */
    double *clock;       /* (n) where each node's training thread is */
    double *worker;      /* (n) when each node's sync worker is free */
    double *pending;     /* (n, tau + 1) exchanges due at step s, by s mod (tau + 1) */
    double *start;       /* (n) when the exchange at hand starts on each node */
    double *done;        /* (n) when it has ended on each node */
    double chunk_bytes;  /* payload of a ring frame; 0 = a whole ring step */
    long max_frames;     /* most frames in one ring step */
    double *recv, *next; /* (n, max_frames) arrivals of one ring step's frames, the next's */
    double *asked;       /* (n, links) arrival of each row-set request */
    int *list;           /* (links + 1) a node's chosen or pullers */
    double bytes;        /* sent by all nodes, headers included */
} sim_t;

static double
max2(double a, double b)
{
    return a > b ? a : b;
}

/* Directed link src -> dst as an index among src's slots: the offset d = dst - src mod n
 * when every node is a neighbour (n <= 2k + 1), else 1..k forward, k+1..2k backward,
 * then the halving partners and the two on src's ring of m beyond those; src's one slot
 * with a shared uplink. */
static size_t
link_index(const sim_t *s, int src, int dst)
{
    int d = (dst - src + s->n) % s->n, k = s->sched.degree, slot;

    if (s->p->shared_uplink)
        return (size_t)src;
    if (s->slots == s->n)
        slot = d;
    else if (d <= k || s->n - d <= k)
        slot = d <= k ? d : 2 * k + 1 - (s->n - d);
    else if (__builtin_ctz((unsigned)(src ^ dst)) < s->levels) /* a halving partner */
        slot = 2 * k + 1 + __builtin_ctz((unsigned)(src ^ dst));
    else /* the next or the one before on a ring of m, halving's odd factor */
        slot = 2 * k + 1 + s->levels + (d == 1 << s->levels);
    SL_ASSERT(d != 0 && slot > 0 && slot < s->slots);
    return (size_t)src * (size_t)s->slots + (size_t)slot;
}

/* A frame of payload bytes handed to link src -> dst at t: it leaves when the link has
 * sent what was queued before it, takes (header + payload) * 8 / bandwidth, arrives
 * latency later. */
static double
send(sim_t *s, int src, int dst, double payload, double t)
{
    double *free_at = &s->link_free[link_index(s, src, dst)];
    double bytes = payload + s->p->header_bytes;
    double left = max2(t, *free_at) + bytes * s->ms_per_byte;

    *free_at = left;
    s->bytes += bytes;
    return left + s->p->latency_ms;
}

/* Frames of a ring step of step_bytes: chunk_bytes each, the last one shorter. */
static long
frames_of(const sim_t *s, double step_bytes)
{
    double f = s->chunk_bytes > 0 ? ceil(step_bytes / s->chunk_bytes) : 1;

    return f < 1 ? 1 : (long)f;
}

/* nsteps ring steps of step_bytes each, in frames, on the rings of the nodes that agree
 * below bit `shift` (the whole ring: shift 0): node i sends frame c of step j to the next
 * on its ring, i + 2^shift, once it has frame c of step j-1 from i - 2^shift (step 0 at
 * its start). An allreduce is 2(n-1) steps of S/n (reduce-scatter, allgather), an
 * allgather n-1 steps of one node's share. start -> done. */
static void
ring(sim_t *s, double step_bytes, int nsteps, int shift)
{
    int n = s->n, low = (1 << shift) - 1;
    long m = frames_of(s, step_bytes);
    double last = step_bytes - (double)(m - 1) * s->chunk_bytes;

    SL_ASSERT(m <= s->max_frames);
    for (int i = 0; i < n; i++)
        for (long c = 0; c < m; c++)
            s->recv[(size_t)i * m + c] = s->start[i];
    for (int j = 0; j < nsteps; j++) {
        double *t;

        for (int i = 0; i < n; i++) {
            int to = (i & low) + ((((i >> shift) + 1) % (n >> shift)) << shift);

            for (long c = 0; c < m; c++)
                s->next[(size_t)to * m + c] = send(s, i, to, c < m - 1 ? s->chunk_bytes : last,
                                                   max2(s->recv[(size_t)i * m + c], s->start[i]));
        }
        t = s->recv;
        s->recv = s->next;
        s->next = t;
    }
    for (int i = 0; i < n; i++)
        s->done[i] = max2(s->start[i], nsteps > 0 ? s->recv[(size_t)i * m + m - 1] : 0);
}

/* One step of a pairwise exchange: node i, beginning it at at[i], hands its partner
 * i ^ bit `blocks` blocks of `bytes` each, every block in its own frames; next[i] =
 * when node i has what its partner sent, or at[i] if later. */
static void
pair_step(sim_t *s, const double *at, double *next, int bit, double bytes, long blocks)
{
    long m = frames_of(s, bytes);
    double last = bytes - (double)(m - 1) * s->chunk_bytes;

    for (int i = 0; i < s->n; i++) {
        int to = i ^ bit;
        double t = at[i];

        for (long b = 0; b < blocks; b++)
            for (long c = 0; c < m; c++)
                t = send(s, i, to, c < m - 1 ? s->chunk_bytes : last, at[i]);
        next[to] = max2(at[to], t);
    }
}

/* Halving then doubling (sl_collective.c's halving_passes) on n = 2^L m nodes (m odd):
 * halving step j pairs node i with i ^ 2^j and sends bytes / 2^(j+1) as one range, then
 * the rings of m (2 (m - 1) steps of bytes / n), then doubling step j pairs the nodes
 * at the reverse levels and sends bytes m 2^j / n, each step's range handed to the link
 * once the node has what its partner sent in the step before. start -> done. */
static void
halving(sim_t *s, double bytes)
{
    int n = s->n, levels = __builtin_ctz((unsigned)n), m = n >> levels;
    double *at = s->recv, *next = s->next; /* (n) when each node begins the step */

    memcpy(at, s->start, (size_t)n * sizeof *at);
    for (int j = 0; j < levels; j++) {
        pair_step(s, at, next, 1 << j, bytes / (double)(2 << j), 1);
        memcpy(at, next, (size_t)n * sizeof *at);
    }
    memcpy(s->start, at, (size_t)n * sizeof *at);
    ring(s, bytes / n, 2 * (m - 1), levels); /* uses, and swaps, recv and next */
    at = s->recv;
    next = s->next;
    memcpy(at, s->done, (size_t)n * sizeof *at);
    for (int j = 0; j < levels; j++) {
        pair_step(s, at, next, 1 << (levels - 1 - j), bytes * m * (1 << j) / n, 1);
        memcpy(at, next, (size_t)n * sizeof *at);
    }
    memcpy(s->done, at, (size_t)n * sizeof *at);
}

/* Recursive doubling (sl_collective.c's doubling_pass) of blocks of `block` bytes on
 * n = 2^L m nodes (m odd): first m - 1 steps round the rings of m, then doubling step j
 * pairs node i with i ^ 2^(L-1-j) and sends m 2^j blocks, each in its own frames.
 * start -> done. */
static void
doubling(sim_t *s, double block)
{
    int n = s->n, levels = __builtin_ctz((unsigned)n), m = n >> levels;
    double *at, *next;

    ring(s, block, m - 1, levels);
    at = s->recv;
    next = s->next;
    memcpy(at, s->done, (size_t)n * sizeof *at);
    for (int j = 0; j < levels; j++) {
        pair_step(s, at, next, 1 << (levels - 1 - j), block, (long)m << j);
        memcpy(at, next, (size_t)n * sizeof *at);
    }
    memcpy(s->done, at, (size_t)n * sizeof *at);
}

/* As sl_allreduce_sum takes it: halving and doubling where the default does, else the
 * ring, in frames of the set chunk or of sl_allreduce_chunk's. */
static void
allreduce(sim_t *s, double bytes)
{
    double chunk = s->chunk_bytes;

    if (s->p->allreduce_chunk_auto)
        s->chunk_bytes =
            (double)sl_allreduce_chunk((size_t)ceil(bytes / s->p->value_bytes), (uint32_t)s->n) *
            s->p->value_bytes;
    if (sl_allreduce_halves((uint32_t)s->n, s->p->value_bytes != 4, s->p->allreduce_ring))
        halving(s, bytes);
    else
        ring(s, bytes / s->n, 2 * (s->n - 1), 0);
    s->chunk_bytes = chunk;
}

/* Two collectives in a row: the second starts where the first ended. */
static void
chain(sim_t *s)
{
    memcpy(s->start, s->done, (size_t)s->n * sizeof *s->start);
}

/* An allgather of `block` bytes from each node (coded: a codec's frames), as
 * sl_allgather takes it: blocks of one size double where sl_allreduce_halves would
 * halve, else go round the ring. */
static void
allgather(sim_t *s, double block, int coded)
{
    if (sl_allreduce_halves((uint32_t)s->n, coded, s->p->allreduce_ring))
        doubling(s, block);
    else
        ring(s, block, s->n - 1, 0);
}

/* The sizes (one int32 a shard from each node), then each node's rows (rows int32 ids
 * of all the shards) in a second allgather, both in fp32 frames. */
static void
gather_rows(sim_t *s, double shards, double rows)
{
    allgather(s, 4.0 * shards, 0);
    chain(s);
    allgather(s, rows * 4.0, 0);
}

static int
nodes_of(sim_t *s, int pullers, long round, int comp, int node)
{
    int count = 0;
    sl_status_t st;

    if (pullers)
        st = sl_schedule_pullers(&s->sched, (uint64_t)round, comp, node, s->list,
                                 s->sched.links + 1, &count);
    else
        st = sl_schedule_chosen(&s->sched, (uint64_t)round, comp, node, s->list, s->sched.links + 1,
                                &count);
    SL_ASSERT(st == SL_OK);
    return count;
}

/* Gossip and local, dense: each node pushes bytes to the nodes that chose it and is done
 * when the snapshots of the nodes it chose have arrived (a push always goes to a node
 * that waits for it). */
static void
gossip_push(sim_t *s, double bytes, long round, int comp)
{
    for (int i = 0; i < s->n; i++)
        s->done[i] = s->start[i];
    for (int i = 0; i < s->n; i++) {
        int c = nodes_of(s, 1, round, comp, i);

        for (int m = 0; m < c; m++) {
            int to = s->list[m];

            s->done[to] = max2(s->done[to], send(s, i, to, bytes, s->start[i]));
        }
    }
}

/* Gossip and local, rows: each node sends its row set (request bytes) to each node it
 * chose, which answers once it has reached its own sync: the ids the requester lacks
 * (reply_ids bytes), then the values (reply bytes), two frames. */
static void
gossip_request(sim_t *s, double request, double reply_ids, double reply, long round, int comp)
{
    int links = s->sched.links;

    for (int i = 0; i < s->n; i++) {
        int c = nodes_of(s, 0, round, comp, i);

        for (int m = 0; m < c; m++)
            s->asked[(size_t)i * links + m] = send(s, i, s->list[m], request, s->start[i]);
    }
    for (int i = 0; i < s->n; i++) {
        int c = nodes_of(s, 0, round, comp, i);

        s->done[i] = s->start[i];
        for (int m = 0; m < c; m++) {
            int from = s->list[m];
            double t = max2(s->asked[(size_t)i * links + m], s->start[from]);

            send(s, from, i, reply_ids, t);
            s->done[i] = max2(s->done[i], send(s, from, i, reply, t));
        }
    }
}

/* Rows in the union of m nodes' row sets of R rows each: R m^b, at most the shard. */
static double
union_rows(const sim_t *s, const sl_scale_component_t *c, int m)
{
    double r = fmin(c->unique_rows, (double)c->rows);

    return fmin((double)c->rows, r * pow(m, s->p->zipf_exponent));
}

/* Gossip and local: one component's exchange with the neighbourhood, start -> done. */
static void
exchange(sim_t *s, const sl_scale_component_t *c, long round, int comp)
{
    const sl_scale_params_t *p = s->p;
    double vb = p->value_bytes, r = fmin(c->unique_rows, (double)c->rows), u2;

    if (!c->sparse || p->exchange == SL_EXCHANGE_DENSE) {
        gossip_push(s, (double)c->count * vb, round, comp);
        return;
    }
    u2 = union_rows(s, c, 2);
    gossip_request(s, r * 4.0, (u2 - r) * 4.0, u2 * c->row_len * vb, round, comp);
}

static sl_status_t
check_params(const sl_scale_params_t *p)
{
    const char *w = "scaling model";

    if (p->nodes < 1 || p->nodes > MAX_NODES)
        return sl_err_set(SL_ERR_INVALID, "%s: %d nodes, need 1..%d", w, p->nodes, MAX_NODES);
    if (p->degree < 0 || p->neighbours < 1)
        return sl_err_set(SL_ERR_INVALID, "%s: degree %d must be >= 0 and neighbours %d >= 1", w,
                          p->degree, p->neighbours);
    if (!(p->step_ms > 0 && isfinite(p->step_ms)))
        return sl_err_set(SL_ERR_INVALID, "%s: step time %g ms must be positive", w, p->step_ms);
    if (p->chunk_values < 0 || p->header_bytes < 0)
        return sl_err_set(SL_ERR_INVALID, "%s: %ld values a frame, %d header bytes", w,
                          p->chunk_values, p->header_bytes);
    if (!(p->bits_per_s >= 0 && isfinite(p->bits_per_s)) ||
        !(p->latency_ms >= 0 && isfinite(p->latency_ms)))
        return sl_err_set(SL_ERR_INVALID, "%s: bandwidth %g bit/s and latency %g ms must be >= 0",
                          w, p->bits_per_s, p->latency_ms);
    if (p->overlap < 0 || p->overlap > MAX_OVERLAP)
        return sl_err_set(SL_ERR_INVALID, "%s: overlap %d out of range 0..%d", w, p->overlap,
                          MAX_OVERLAP);
    if (p->overlap > 0 && p->algorithm == SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_INVALID,
                          "%s: overlap needs a periodic sync: allreduce needs every step's "
                          "gradients before the step's update",
                          w);
    if (p->steps < 1)
        return sl_err_set(SL_ERR_INVALID, "%s: %ld steps, need at least 1", w, p->steps);
    if (p->value_bytes != 2 && p->value_bytes != 4)
        return sl_err_set(SL_ERR_INVALID, "%s: %d bytes a value, need 2 or 4", w, p->value_bytes);
    if (!(p->zipf_exponent > 0 && p->zipf_exponent <= 1))
        return sl_err_set(SL_ERR_INVALID, "%s: Zipf exponent %g must be in (0, 1]", w,
                          p->zipf_exponent);
    if (p->ncomps < 1 || !p->comps)
        return sl_err_set(SL_ERR_INVALID, "%s: no components", w);
    for (int c = 0; c < p->ncomps; c++)
        if (p->comps[c].period < 1 || !(p->comps[c].unique_rows >= 0))
            return sl_err_set(SL_ERR_INVALID, "%s: component %s: period %d, %g unique rows", w,
                              p->comps[c].name, p->comps[c].period, p->comps[c].unique_rows);
    return SL_OK;
}

static void
sim_fini(sim_t *s)
{
    sl_free(s->link_free);
    sl_free(s->clock);
    sl_free(s->worker);
    sl_free(s->pending);
    sl_free(s->start);
    sl_free(s->done);
    sl_free(s->recv);
    sl_free(s->next);
    sl_free(s->asked);
    sl_free(s->list);
}

/* The largest ring step any exchange has: the fused gradient over n, a component over
 * n, or one node's rows in an allgather (at most the shard). */
static long
max_frames(const sim_t *s)
{
    const sl_scale_params_t *p = s->p;
    double fused = 0, most = 4.0;

    for (int c = 0; c < p->ncomps; c++) {
        const sl_scale_component_t *comp = &p->comps[c];
        double bytes = (double)comp->count * p->value_bytes;

        fused += bytes;
        most = max2(most, bytes / s->n);
        if (comp->sparse)
            most = max2(most, (double)comp->rows * (4.0 + comp->row_len * p->value_bytes));
    }
    /* sl_allreduce_chunk splits a segment in at most 8 frames, or in frames of
     * SL_COLLECTIVE_CHUNK_ELEMS like a fixed chunk of that size */
    return frames_of(s, max2(most, fused / s->n)) + (s->p->allreduce_chunk_auto ? (long)8 : 0);
}

static sl_status_t
sim_init(sim_t *s, const sl_scale_params_t *p)
{
    int n = p->nodes, k = p->degree > 0 ? p->degree : sl_ring_default_degree(n);
    int links, q = p->neighbours;
    size_t un = (size_t)n;

    memset(s, 0, sizeof *s);
    s->p = p;
    s->n = n;
    s->tau = p->overlap;
    SL_TRY(sl_ring_links(n, k, &links));
    if (p->algorithm == SL_SYNC_LOCAL_MA || p->algorithm == SL_SYNC_LOCAL_BMUF)
        q = links > 0 ? links : 1;
    SL_TRY(sl_schedule_init(&s->sched, n, k, q, p->seed));
    /* beyond the ring's links, one to each halving partner and two on its ring of m */
    s->levels = n >= 4 && n % 2 == 0 ? __builtin_ctz((unsigned)n) : 0;
    s->slots = p->shared_uplink ? 1
               : n <= 2 * k + 1 ? n
                                : 2 * k + 1 + s->levels + (s->levels && n >> s->levels > 1) * 2;
    s->ms_per_byte = p->bits_per_s > 0 ? 8000.0 / p->bits_per_s : 0.0;
    SL_TRY(SL_CALLOC(&s->link_free, un * (size_t)s->slots, "scale links"));
    SL_TRY(SL_CALLOC(&s->clock, un, "scale clocks"));
    SL_TRY(SL_CALLOC(&s->worker, un, "scale clocks"));
    SL_TRY(SL_CALLOC(&s->pending, un * ((size_t)s->tau + 1), "scale clocks"));
    SL_TRY(SL_CALLOC(&s->start, un, "scale clocks"));
    SL_TRY(SL_CALLOC(&s->done, un, "scale clocks"));
    s->chunk_bytes = (double)p->chunk_values * p->value_bytes;
    s->max_frames = max_frames(s);
    if ((double)s->max_frames * n > 1e8)
        return sl_err_set(SL_ERR_INVALID,
                          "scaling model: %ld frames a ring step on %d nodes: "
                          "too many, raise the values a frame",
                          s->max_frames, n);
    SL_TRY(SL_CALLOC(&s->recv, un * (size_t)s->max_frames, "scale frames"));
    SL_TRY(SL_CALLOC(&s->next, un * (size_t)s->max_frames, "scale frames"));
    SL_TRY(SL_CALLOC(&s->asked, un * ((size_t)links + 1), "scale requests"));
    SL_TRY(SL_CALLOC(&s->list, (size_t)links + 1, "scale lists"));
    return SL_OK;
}

/* Allreduce mode by rows, as sl_sparse_allreduce_shards takes a step: every row shard's
 * count, then its rows, gathered; then unique: one allreduce of the shards' unions and
 * the other components; allgather: the shards' rows gathered, then one allreduce of
 * the others. */
static void
gradients_by_rows(sim_t *s)
{
    const sl_scale_params_t *p = s->p;
    double vb = p->value_bytes, shards = 0, rows = 0, unions = 0, gathered = 0, dense = 0;

    for (int c = 0; c < p->ncomps; c++) {
        const sl_scale_component_t *comp = &p->comps[c];
        double r = fmin(comp->unique_rows, (double)comp->rows);

        if (!comp->sparse) {
            dense += (double)comp->count * vb;
            continue;
        }
        shards++;
        rows += r;
        unions += union_rows(s, comp, s->n) * comp->row_len * vb;
        gathered += r * comp->row_len * vb;
    }
    gather_rows(s, shards, rows);
    chain(s);
    if (p->exchange == SL_EXCHANGE_UNIQUE) {
        allreduce(s, unions + dense);
        return;
    }
    allgather(s, gathered, vb != 4);
    if (dense > 0) {
        chain(s);
        allreduce(s, dense);
    }
}

/* Whether ma or bmuf averages component c whole (not by rows) in an allreduce. */
static int
averages_whole(const sl_scale_params_t *p, const sl_scale_component_t *c)
{
    return (p->algorithm == SL_SYNC_MA || p->algorithm == SL_SYNC_BMUF) &&
           (!c->sparse || p->exchange == SL_EXCHANGE_DENSE);
}

/* Whether ma or bmuf averages row shard c by its rows with all nodes. */
static int
averages_rows(const sl_scale_params_t *p, const sl_scale_component_t *c)
{
    return (p->algorithm == SL_SYNC_MA || p->algorithm == SL_SYNC_BMUF) && c->sparse &&
           p->exchange != SL_EXCHANGE_DENSE;
}

/* The row shards of c's period (ma, bmuf by rows) in one exchange, at the first of
 * them, or c alone when overlapped (the worker takes them one by one): every shard's
 * size, then rows, gathered, then one allreduce of their unions. Returns 0 when c is
 * not the first. */
static int
rows_together(sim_t *s, int c)
{
    const sl_scale_params_t *p = s->p;
    double shards = 0, rows = 0, unions = 0;

    for (int d = 0; d < p->ncomps; d++) {
        const sl_scale_component_t *comp = &p->comps[d];

        if (!averages_rows(p, comp) || comp->period != p->comps[c].period ||
            (p->overlap > 0 && d != c))
            continue;
        if (d < c)
            return 0;
        shards++;
        rows += fmin(comp->unique_rows, (double)comp->rows);
        unions += union_rows(s, comp, s->n) * comp->row_len * p->value_bytes;
    }
    gather_rows(s, shards, rows);
    chain(s);
    allreduce(s, unions);
    return 1;
}

/* Every node hands the due components to its worker at the end of step `step`. */
static int
sync_due(sim_t *s, long step)
{
    const sl_scale_params_t *p = s->p;
    int any = 0;
    double fused = 0;

    for (int c = 0; c < p->ncomps; c++)
        fused += (double)p->comps[c].count * p->value_bytes;
    for (int c = 0; c < p->ncomps; c++) {
        const sl_scale_component_t *comp = &p->comps[c];

        if (step % comp->period != 0)
            continue;
        for (int i = 0; i < s->n; i++)
            s->start[i] = max2(s->clock[i], s->worker[i]);
        /* allreduce sums the whole gradient buffer at once, or by rows every shard
         * and the rest in one call */
        if (p->algorithm == SL_SYNC_ALLREDUCE) {
            if (p->exchange == SL_EXCHANGE_DENSE)
                allreduce(s, fused);
            else
                gradients_by_rows(s);
            c = p->ncomps;
        } else if (averages_whole(p, comp)) {
            /* ma, bmuf: the whole components of one period at once, with the first */
            double bytes = 0;
            int first = 1;

            for (int d = 0; d < p->ncomps; d++)
                if (averages_whole(p, &p->comps[d]) && p->comps[d].period == comp->period) {
                    first &= d >= c;
                    bytes += (double)p->comps[d].count * p->value_bytes;
                }
            if (!first)
                continue;
            allreduce(s, bytes);
        } else if (averages_rows(p, comp)) {
            if (!rows_together(s, c))
                continue;
        } else {
            exchange(s, comp, step / comp->period, c);
        }
        memcpy(s->worker, s->done, (size_t)s->n * sizeof *s->worker);
        any = 1;
    }
    return any;
}

sl_status_t
sl_scale_run(const sl_scale_params_t *p, sl_scale_result_t *r)
{
    sim_t s;
    sl_status_t st;
    size_t slots;

    memset(r, 0, sizeof *r);
    SL_TRY(check_params(p));
    st = sim_init(&s, p);
    if (st != SL_OK) {
        sim_fini(&s);
        return st;
    }
    slots = (size_t)s.tau + 1;
    for (long step = 1; step <= p->steps; step++) {
        size_t due = (size_t)step % slots, later = ((size_t)step + (size_t)s.tau) % slots;

        for (int i = 0; i < s.n; i++) {
            s.clock[i] += p->step_ms;
            if (s.tau > 0) { /* the exchanges begun tau steps ago must be in now */
                s.clock[i] = max2(s.clock[i], s.pending[i * slots + due]);
                s.pending[i * slots + due] = 0;
            }
        }
        if (p->algorithm == SL_SYNC_NONE || s.n == 1 || !sync_due(&s, step))
            continue;
        for (int i = 0; i < s.n; i++) {
            if (s.tau == 0)
                s.clock[i] = max2(s.clock[i], s.worker[i]);
            else
                s.pending[i * slots + later] = max2(s.pending[i * slots + later], s.worker[i]);
        }
    }
    for (int i = 0; i < s.n; i++) {
        for (size_t d = 0; d < slots; d++)
            s.clock[i] = max2(s.clock[i], s.pending[i * slots + d]);
        r->wall_ms = max2(r->wall_ms, s.clock[i]);
    }
    r->nodes = s.n;
    r->degree = s.sched.degree;
    r->picks = s.sched.picks;
    r->compute_ms = (double)p->steps * p->step_ms;
    r->utilization = r->compute_ms / r->wall_ms;
    r->speedup = s.n * r->utilization;
    r->wait_ms_per_step = (r->wall_ms - r->compute_ms) / (double)p->steps;
    r->bytes_per_node_step = s.bytes / s.n / (double)p->steps;
    sim_fini(&s);
    return SL_OK;
}

sl_status_t
sl_scale_components(const sl_config_t *cfg, int vocab_size, double unique_rows,
                    sl_scale_component_t **out, int *ncomps)
{
    int shards = cfg->sync.embedding_shards, n = 0;
    int emb = cfg->sync.embedding_period > 0 ? cfg->sync.embedding_period : cfg->sync.period;
    size_t cap = SL_LM_MAX_COMPONENTS(shards > 0 ? shards : 1), nparams;
    sl_component_t *mc = NULL;
    sl_scale_component_t *sc = NULL;
    sl_status_t st;

    *out = NULL;
    *ncomps = 0;
    if (!(unique_rows >= 0))
        return sl_err_set(SL_ERR_INVALID, "unique rows %g must be >= 0", unique_rows);
    SL_TRY(SL_CALLOC(&mc, cap, "model components"));
    SL_TRY_GOTO(sl_lm_layout(cfg, vocab_size, shards, mc, (int)cap, &n, &nparams), st, out);
    SL_TRY_GOTO(SL_CALLOC(&sc, (size_t)n, "scale components"), st, out);
    for (int c = 0; c < n; c++) {
        sl_scale_component_t *d = &sc[c];

        memcpy(d->name, mc[c].name, sizeof d->name);
        d->count = mc[c].count;
        d->sparse = mc[c].sparse;
        d->rows = mc[c].rows;
        d->row_len = mc[c].row_len;
        d->period = d->sparse ? emb : cfg->sync.period;
        for (int k = 0; k < cfg->sync.nperiod_rules; k++) {
            const sl_period_rule_t *rule = &cfg->sync.period_rule[k];

            if (rule->match && fnmatch(rule->match, d->name, 0) == 0) {
                d->period = rule->period;
                break;
            }
        }
        if (cfg->sync.algorithm == SL_SYNC_ALLREDUCE)
            d->period = 1;
        if (d->period < 1) {
            st = sl_err_set(SL_ERR_CONFIG, "component %s would sync every %d steps", d->name,
                            d->period);
            goto out;
        }
        if (d->sparse) {
            int full_softmax =
                cfg->model.output == SL_OUTPUT_FULL && strncmp(d->name, "softmax.", 8) == 0;

            d->unique_rows =
                full_softmax ? (double)d->rows
                             : fmin((double)d->rows, unique_rows * (double)d->rows / vocab_size);
        }
    }
    *out = sc;
    *ncomps = n;
    sc = NULL;
    st = SL_OK;
out:
    sl_free(mc);
    sl_free(sc);
    return st;
}
