/* Allreduce-mode exchange of a row-shard gradient: Zipf-unique (Baidu, section III-A:
 * J^, I, I^, U_g, M_i, M^), the allgather baseline and the dense ring allreduce. See
 * sl_sparse_allreduce.h for the contract.
 *
 * Index words travel shard-relative (row - row_begin) as uint32 bit patterns in fp32
 * frames: the collectives only copy them, so they arrive bit-exact, and a receiver
 * checks them before any use. */
#include "embed/sl_sparse_allreduce.h"

#include <inttypes.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "transport/sl_collective.h"

/* Rounds of one call: 3 round + phase. */
enum { PHASE_COUNTS, PHASE_INDICES, PHASE_VALUES };

/* A buffer that grows geometrically up to a worst case; its contents are not kept. */
typedef struct {
    void *p;
    size_t cap;  /* elements */
    size_t most; /* worst case, elements */
    size_t elem; /* bytes per element */
} grow_t;

struct sl_sparse_allreduce {
    long row_begin, rows;  /* the shard: vocabulary rows [row_begin, row_begin + rows) */
    int row_len;           /* D */
    int nodes;             /* the most taking part */
    int n;                 /* taking part in this call: the group's, or every rank */
    uint32_t me;           /* this node's place among them */
    int broken;            /* a call failed: buffers may be lent to ZeroMQ */
    float *count_words;    /* (nodes) U_k as bit patterns */
    size_t *ones;          /* (nodes) all 1: the counts allgather */
    size_t *counts;        /* (nodes) U_k, then floats per block */
    size_t *off, *len;     /* (nodes) node k's rows in list_a, then the lists being merged */
    grow_t words;          /* (sum U_k) index words */
    grow_t list_a, list_b; /* (sum U_k) int32: the nodes' rows, then their union I^ */
    grow_t vals;           /* unique: (U_g, D) M_i, then M^; allgather: (sum U_k, D) */
    sl_sparse_stats_t last;
};

static size_t
held_bytes(const sl_sparse_allreduce_t *sa)
{
    const grow_t *g[] = {&sa->words, &sa->list_a, &sa->list_b, &sa->vals};
    size_t total = 0;
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        total += g[i]->cap * g[i]->elem;
    return total;
}

/* Makes room for need elements, with a quarter more for the next steps (bounded by the
 * worst case): each reallocation grows the buffer by at least 25%, so a run reallocates
 * a few times in its first steps, then never, and holds at most 1.25 x its largest
 * need. */
static sl_status_t
grow(grow_t *g, size_t need, const char *what)
{
    size_t cap;

    if (need == 0)
        need = 1; /* never NULL: no pointer arithmetic on NULL when nothing moves */
    if (need <= g->cap)
        return SL_OK;
    SL_ASSERT(need <= g->most); /* counts are checked against the shard before */
    cap = need > g->most - need / 4 ? g->most : need + need / 4;
    sl_free(g->p);
    g->p = NULL;
    g->cap = 0;
    SL_TRY(sl_alloc(&g->p, cap, g->elem, 0, what));
    g->cap = cap;
    return SL_OK;
}

sl_status_t
sl_sparse_allreduce_new(sl_sparse_allreduce_t **out, const sl_component_t *c, int nodes)
{
    sl_sparse_allreduce_t *sa = NULL;
    size_t n;
    sl_status_t st;

    *out = NULL;
    if (!c->sparse || c->rows < 1 || c->row_len < 1 || c->row_begin < 0 || nodes < 1 ||
        c->rows > INT32_MAX || c->row_begin > INT32_MAX - c->rows)
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %s: sparse %d, rows %ld from %ld, "
                          "row_len %d, nodes %d: not a row shard",
                          c->name, c->sparse, c->rows, c->row_begin, c->row_len, nodes);
    n = (size_t)nodes;
    /* worst cases: every node touches every row */
    if ((size_t)c->rows > SIZE_MAX / n / ((size_t)c->row_len + 1) / sizeof(float))
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %s: %d nodes x %ld rows x %d "
                          "floats overflow",
                          c->name, nodes, c->rows, c->row_len);
    SL_TRY(SL_CALLOC(&sa, 1, "sparse allreduce"));
    sa->row_begin = c->row_begin;
    sa->rows = c->rows;
    sa->row_len = c->row_len;
    sa->nodes = nodes;
    sa->words = (grow_t){NULL, 0, n * (size_t)c->rows, sizeof(float)};
    sa->list_a = (grow_t){NULL, 0, n * (size_t)c->rows, sizeof(int32_t)};
    sa->list_b = sa->list_a;
    sa->vals = (grow_t){NULL, 0, n * (size_t)c->rows * (size_t)c->row_len, sizeof(float)};
    SL_TRY_GOTO(SL_ALLOC(&sa->count_words, n, "sparse allreduce counts"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sa->ones, n, "sparse allreduce counts"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sa->counts, n, "sparse allreduce counts"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sa->off, n, "sparse allreduce lists"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sa->len, n, "sparse allreduce lists"), st, fail);
    for (size_t k = 0; k < n; k++)
        sa->ones[k] = 1;
    *out = sa;
    return SL_OK;
fail:
    sl_sparse_allreduce_destroy(&sa);
    return st;
}

void
sl_sparse_allreduce_destroy(sl_sparse_allreduce_t **sa)
{
    if (!sa || !*sa)
        return;
    sl_free((*sa)->count_words);
    sl_free((*sa)->ones);
    sl_free((*sa)->counts);
    sl_free((*sa)->off);
    sl_free((*sa)->len);
    sl_free((*sa)->words.p);
    sl_free((*sa)->list_a.p);
    sl_free((*sa)->list_b.p);
    sl_free((*sa)->vals.p);
    sl_free(*sa);
    *sa = NULL;
}

void
sl_sparse_allreduce_stats(const sl_sparse_allreduce_t *sa, sl_sparse_stats_t *out)
{
    *out = sa->last;
}

static float
word_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t
u32_of(const float *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u;
}

/* The part of rows (absolute, must be strictly ascending) inside the shard:
 * rows[*lo .. *hi). */
static sl_status_t
own_rows(const sl_sparse_allreduce_t *sa, const int32_t *rows, int nrows, int *lo, int *hi)
{
    long end = sa->row_begin + sa->rows;

    if (nrows < 0 || (nrows > 0 && !rows))
        return sl_err_set(SL_ERR_INVALID, "sparse allreduce: %d rows", nrows);
    for (int i = 1; i < nrows; i++)
        if (rows[i] <= rows[i - 1])
            return sl_err_set(SL_ERR_INVALID,
                              "sparse allreduce: own rows not strictly ascending: row %d "
                              "after %d at %d",
                              (int)rows[i], (int)rows[i - 1], i);
    *lo = 0;
    while (*lo < nrows && rows[*lo] < sa->row_begin)
        ++*lo;
    *hi = *lo;
    while (*hi < nrows && rows[*hi] < end)
        ++*hi;
    return SL_OK;
}

/* st; a collective's failure gets the component, round and phase in front. */
static sl_status_t
failed(sl_status_t st, uint32_t component, uint64_t round, const char *what)
{
    if (st == SL_OK)
        return SL_OK;
    return sl_err_prefix(st, "sparse allreduce: component %u, round %" PRIu64 ", %s",
                         (unsigned)component, round, what);
}

/* Checks node k's index block (n words at w) and decodes it into out: each word a row
 * of the shard, strictly ascending. */
static sl_status_t
check_block(const sl_sparse_allreduce_t *sa, uint32_t component, uint64_t round, int k,
            const float *w, size_t n, int32_t *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = u32_of(w + i);
        if (u >= (uint32_t)sa->rows || (i > 0 && (int32_t)u <= out[i - 1]))
            return sl_err_set(SL_ERR_INVALID,
                              "sparse allreduce: component %u, round %" PRIu64
                              ": rank %d sent row %" PRIu32 " at %zu (shard of %ld rows, "
                              "strictly ascending rows expected)",
                              (unsigned)component, round, k, u, i, sa->rows);
        out[i] = (int32_t)u;
    }
    return SL_OK;
}

/* Steps 3 of the paper, for unique and allgather: every node's U_k (sa->counts, checked
 * against the shard), then every node's rows (shard-relative, checked) into list_a,
 * node k's at off[k], len[k]. o has no codec: the words must arrive bit-exact. */
static sl_status_t
gather_rows(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component, uint64_t round,
            const sl_collective_opts_t *o, const int32_t *mine, size_t ui)
{
    uint32_t me = sa->me;
    size_t total = 0, at = 0;
    float *w;

    sa->count_words[me] = word_of((uint32_t)ui);
    SL_TRY(failed(sl_allgather(tr, component, 3 * round + PHASE_COUNTS, sa->count_words + me,
                               sa->count_words, sa->ones, o),
                  component, round, "row counts"));
    for (int k = 0; k < sa->n; k++) {
        uint32_t u = u32_of(sa->count_words + k);
        if (u > (uint32_t)sa->rows)
            return sl_err_set(SL_ERR_INVALID,
                              "sparse allreduce: component %u, round %" PRIu64
                              ": rank %d claims %" PRIu32 " rows of a shard of %ld",
                              (unsigned)component, round, k, u, sa->rows);
        sa->counts[k] = u;
        sa->off[k] = total;
        sa->len[k] = u;
        total += u;
    }
    sa->last.gather_rows = total;
    SL_TRY(grow(&sa->words, total, "sparse allreduce indices"));
    SL_TRY(grow(&sa->list_a, total, "sparse allreduce indices"));
    w = sa->words.p;
    at = sa->off[me];
    for (size_t j = 0; j < ui; j++)
        w[at + j] = word_of((uint32_t)(mine[j] - sa->row_begin));
    SL_TRY(failed(sl_allgather(tr, component, 3 * round + PHASE_INDICES, w + at, w, sa->counts, o),
                  component, round, "row indices"));
    for (int k = 0; k < sa->n; k++)
        SL_TRY(check_block(sa, component, round, k, w + sa->off[k], sa->len[k],
                           (int32_t *)sa->list_a.p + sa->off[k]));
    return SL_OK;
}

/* Merges two strictly ascending lists into out without duplicates; returns its length. */
static size_t
merge_unique(const int32_t *a, size_t na, const int32_t *b, size_t nb, int32_t *out)
{
    size_t i = 0, j = 0, m = 0;

    while (i < na && j < nb) {
        if (a[i] < b[j])
            out[m++] = a[i++];
        else if (b[j] < a[i])
            out[m++] = b[j++];
        else {
            out[m++] = a[i++];
            j++;
        }
    }
    while (i < na)
        out[m++] = a[i++];
    while (j < nb)
        out[m++] = b[j++];
    return m;
}

/* Step 4: I^ = the sorted union of the nodes' lists (list_a at off[k], len[k]), merged
 * in pairs level by level between list_a and list_b: O(sum U_k log n). Returns I^ and
 * sets *ug = U_g. off and len are used up. */
static const int32_t *
union_rows(sl_sparse_allreduce_t *sa, size_t *ug)
{
    int32_t *a = sa->list_a.p, *b = sa->list_b.p, *swap;
    int m = sa->n;

    while (m > 1) {
        size_t at = 0;
        int out = 0;
        for (int k = 0; k < m; k += 2, out++) {
            size_t got = k + 1 < m ? merge_unique(a + sa->off[k], sa->len[k], a + sa->off[k + 1],
                                                  sa->len[k + 1], b + at)
                                   : merge_unique(a + sa->off[k], sa->len[k], NULL, 0, b + at);
            sa->off[out] = at;
            sa->len[out] = got;
            at += got;
        }
        swap = a;
        a = b;
        b = swap;
        m = out;
    }
    *ug = sa->len[0];
    return a + sa->off[0];
}

/* The paper's steps 3-7 (steps 1-2, the local unique rows with summed gradients, are
 * the model's). */
static sl_status_t
exchange_unique(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component, uint64_t round,
                const sl_collective_opts_t *raw, const sl_collective_opts_t *o, const int32_t *mine,
                size_t ui, float *grad)
{
    size_t d = (size_t)sa->row_len, ug, i = 0;
    const int32_t *uni;
    float *m;

    SL_TRY(gather_rows(sa, tr, component, round, raw, mine, ui));
    SL_TRY(grow(&sa->list_b, sa->last.gather_rows, "sparse allreduce union"));
    uni = union_rows(sa, &ug);
    sa->last.union_rows = ug;
    /* step 5: M_i (U_g, D), the own rows in their places in I^, zeros elsewhere */
    SL_TRY(grow(&sa->vals, ug * d, "sparse allreduce rows"));
    m = sa->vals.p;
    for (size_t j = 0; j < ug; j++) {
        if (i < ui && mine[i] - sa->row_begin == uni[j]) {
            memcpy(m + j * d, grad + (size_t)uni[j] * d, d * sizeof *m);
            i++;
        } else {
            memset(m + j * d, 0, d * sizeof *m);
        }
    }
    SL_ASSERT(i == ui); /* the own rows are part of the union */
    /* step 6: M^ */
    SL_TRY(failed(sl_allreduce_sum(tr, component, 3 * round + PHASE_VALUES, m, ug * d, o),
                  component, round, "row values"));
    /* step 7: the summed rows into the shard */
    for (size_t j = 0; j < ug; j++)
        memcpy(grad + (size_t)uni[j] * d, m + j * d, d * sizeof *m);
    return SL_OK;
}

/* The baseline: every node's indices, then its U_k x D values gathered, then summed
 * into the shard in rank order from zero, the same order on every node. */
static sl_status_t
exchange_allgather(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                   uint64_t round, const sl_collective_opts_t *raw, const sl_collective_opts_t *o,
                   const int32_t *mine, size_t ui, float *grad)
{
    uint32_t me = sa->me;
    size_t d = (size_t)sa->row_len, total;
    const int32_t *idx;
    float *v;

    SL_TRY(gather_rows(sa, tr, component, round, raw, mine, ui));
    total = sa->last.gather_rows;
    SL_TRY(grow(&sa->vals, total * d, "sparse allreduce gathered rows"));
    v = sa->vals.p;
    for (int k = 0; k < sa->n; k++)
        sa->counts[k] *= d; /* floats per block now */
    for (size_t j = 0; j < ui; j++)
        memcpy(v + (sa->off[me] + j) * d, grad + (size_t)(mine[j] - sa->row_begin) * d,
               d * sizeof *v);
    SL_TRY(failed(sl_allgather(tr, component, 3 * round + PHASE_VALUES, v + sa->off[me] * d, v,
                               sa->counts, o),
                  component, round, "row values"));
    for (size_t j = 0; j < ui; j++)
        memset(grad + (size_t)(mine[j] - sa->row_begin) * d, 0, d * sizeof *grad);
    idx = sa->list_a.p; /* the nodes' lists one after the other, in rank order */
    for (size_t j = 0; j < total; j++) {
        float *dst = grad + (size_t)idx[j] * d;
        const float *src = v + j * d;
        for (size_t e = 0; e < d; e++)
            dst[e] += src[e];
    }
    return SL_OK;
}

/* Adds the frames and bytes of (kind, component) on tr to (or, sign < 0, from) s. */
static void
tally(sl_sparse_stats_t *s, const sl_transport_t *tr, uint32_t component, int sign)
{
    static const unsigned kinds[] = {SL_WIRE_ALLGATHER, SL_WIRE_ALLREDUCE};

    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        sl_transport_stat_t t;
        sl_transport_stat(tr, kinds[i], component, &t);
        uint64_t sb = t.sent_bytes + t.sent_msgs * SL_WIRE_HEADER_BYTES;
        uint64_t rb = t.recv_bytes + t.recv_msgs * SL_WIRE_HEADER_BYTES;
        if (sign > 0) {
            s->sent_bytes += sb, s->recv_bytes += rb;
            s->sent_frames += t.sent_msgs, s->recv_frames += t.recv_msgs;
        } else {
            s->sent_bytes -= sb, s->recv_bytes -= rb;
            s->sent_frames -= t.sent_msgs, s->recv_frames -= t.recv_msgs;
        }
    }
}

sl_status_t
sl_sparse_allreduce(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                    uint64_t round, sl_exchange_t mode, const int32_t *rows, int nrows,
                    float *shard_grad, const sl_collective_opts_t *o)
{
    sl_collective_opts_t raw = {0}; /* the same without codec, for the index words */
    double t0 = sl_clock_now();
    int lo = 0, hi = 0;
    sl_status_t st;

    memset(&sa->last, 0, sizeof sa->last);
    if (sa->broken)
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %u: an earlier call "
                          "failed; the context is unusable",
                          (unsigned)component);
    sa->n = o && o->group ? (int)o->group->n : (int)sl_transport_size(tr);
    sa->me = sl_transport_rank(tr);
    for (uint32_t k = 0; o && o->group && k < o->group->n; k++)
        if (o->group->ranks[k] == sl_transport_rank(tr))
            sa->me = k;
    if ((o && o->group ? sa->n > sa->nodes : sa->n != sa->nodes) || sa->me >= (uint32_t)sa->n ||
        round > (UINT64_MAX - 2) / 3 ||
        (mode != SL_EXCHANGE_UNIQUE && mode != SL_EXCHANGE_ALLGATHER && mode != SL_EXCHANGE_DENSE))
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %u: %u nodes (context for %d), "
                          "round %" PRIu64 ", mode %d",
                          (unsigned)component, (unsigned)sa->n, sa->nodes, round, (int)mode);
    SL_TRY(own_rows(sa, rows, nrows, &lo, &hi));
    sa->last.local_rows = (size_t)(hi - lo);
    if (sa->n == 1) {
        sa->last.gather_rows = mode == SL_EXCHANGE_DENSE ? 0 : (size_t)(hi - lo);
        sa->last.union_rows = mode == SL_EXCHANGE_UNIQUE  ? (size_t)(hi - lo)
                              : mode == SL_EXCHANGE_DENSE ? (size_t)sa->rows
                                                          : 0;
        sa->last.time_s = sl_clock_now() - t0;
        return SL_OK;
    }
    if (o)
        raw = *o;
    raw.codec = NULL;
    tally(&sa->last, tr, component, -1);
    switch (mode) {
    case SL_EXCHANGE_UNIQUE:
        st = exchange_unique(sa, tr, component, round, &raw, o, rows + lo, (size_t)(hi - lo),
                             shard_grad);
        break;
    case SL_EXCHANGE_ALLGATHER:
        st = exchange_allgather(sa, tr, component, round, &raw, o, rows + lo, (size_t)(hi - lo),
                                shard_grad);
        break;
    default:
        sa->last.union_rows = (size_t)sa->rows;
        st = failed(sl_allreduce_sum(tr, component, 3 * round + PHASE_VALUES, shard_grad,
                                     (size_t)sa->rows * (size_t)sa->row_len, o),
                    component, round, "dense shard");
        break;
    }
    tally(&sa->last, tr, component, 1);
    sa->last.buffer_bytes = held_bytes(sa);
    sa->last.time_s = sl_clock_now() - t0;
    /* a timeout over a group is its members' to handle (src/sync/sl_members.h: they
     * give the lent payloads back before the next attempt) */
    if (st != SL_OK && !(st == SL_ERR_TIMEOUT && o && o->group))
        sa->broken = 1;
    return st;
}
