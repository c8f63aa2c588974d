/* Allreduce-mode exchange of row-shard gradients: Zipf-unique (Baidu, section III-A:
 * J^, I, I^, U_g, M_i, M^), the allgather baseline and the dense ring allreduce, for
 * one shard or several in the same three collectives. See sl_sparse_allreduce.h for the
 * contract.
 *
 * Index words travel shard-relative (row - row_begin) as uint32 bit patterns in fp32
 * frames: the collectives only copy them, so they arrive bit-exact, and a receiver
 * checks them before any use. A node's block of a collective holds its part of every
 * shard, shard by shard. */
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

/* One row shard of the context and its part of the call under way. */
typedef struct {
    long row_begin, rows;  /* the shard: vocabulary rows [row_begin, row_begin + rows) */
    int row_len;           /* D */
    size_t *off, *len;     /* (nodes) node k's rows in list_a, then the lists being merged */
    grow_t list_a, list_b; /* (sum U_k) int32: the nodes' rows, then their union I^ */
    const int32_t *mine;   /* the call's own rows inside the shard (absolute), ui of them */
    size_t ui;
    float *grad;        /* the call's shard gradient */
    const int32_t *uni; /* unique: I^ (in list_a or list_b), ug rows */
    size_t ug;
    size_t at;              /* unique: the shard's first float in vals */
    sl_sparse_stats_t last; /* its rows in the last call */
} shard_t;

struct sl_sparse_allreduce {
    int k;              /* shards */
    shard_t *shard;     /* (k) */
    size_t dense_most;  /* dense floats a call may add */
    int nodes;          /* the most taking part */
    int n;              /* taking part in this call: the group's, or every rank */
    uint32_t me;        /* this node's place among them */
    int broken;         /* a call failed: buffers may be lent to ZeroMQ */
    float *count_words; /* (nodes x k) U_k of each shard as bit patterns, node by node */
    size_t *per_node;   /* (nodes) all k: the counts allgather */
    size_t *blocks;     /* (nodes) node k's index words, then floats, in the allgather */
    grow_t words;       /* (sum U_k over the shards) index words */
    grow_t vals;        /* unique: M_i, then M^, of every shard, then the dense floats;
                           allgather: the gathered rows, then the dense floats */
    sl_sparse_stats_t last;
};

static size_t
held_bytes(const sl_sparse_allreduce_t *sa)
{
    size_t total = sa->words.cap * sa->words.elem + sa->vals.cap * sa->vals.elem;
    for (int p = 0; p < sa->k; p++)
        total += sa->shard[p].list_a.cap * sa->shard[p].list_a.elem +
                 sa->shard[p].list_b.cap * sa->shard[p].list_b.elem;
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

/* Shard p from component c; adds its worst cases (every node touches every row) to
 * *words and *vals. */
static sl_status_t
shard_init(sl_sparse_allreduce_t *sa, int p, const sl_component_t *c, size_t *words, size_t *vals)
{
    shard_t *s = &sa->shard[p];
    size_t n = (size_t)sa->nodes;

    if (!c->sparse || c->rows < 1 || c->row_len < 1 || c->row_begin < 0 || c->rows > INT32_MAX ||
        c->row_begin > INT32_MAX - c->rows)
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %s: sparse %d, rows %ld from %ld, "
                          "row_len %d: not a row shard",
                          c->name, c->sparse, c->rows, c->row_begin, c->row_len);
    if ((size_t)c->rows > (SIZE_MAX / 4 - *vals) / n / ((size_t)c->row_len + 1) / sizeof(float))
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %s: %zu nodes x %ld rows x %d "
                          "floats overflow",
                          c->name, n, c->rows, c->row_len);
    s->row_begin = c->row_begin;
    s->rows = c->rows;
    s->row_len = c->row_len;
    s->list_a = (grow_t){NULL, 0, n * (size_t)c->rows, sizeof(int32_t)};
    s->list_b = s->list_a;
    *words += n * (size_t)c->rows;
    *vals += n * (size_t)c->rows * (size_t)c->row_len;
    SL_TRY(SL_ALLOC(&s->off, n, "sparse allreduce lists"));
    return SL_ALLOC(&s->len, n, "sparse allreduce lists");
}

sl_status_t
sl_sparse_allreduce_new_shards(sl_sparse_allreduce_t **out, const sl_component_t *const *shards,
                               int k, size_t dense, int nodes)
{
    sl_sparse_allreduce_t *sa = NULL;
    size_t n = nodes > 0 ? (size_t)nodes : 0, words = 0, vals = 0;
    sl_status_t st;

    *out = NULL;
    if (nodes < 1 || k < 1 || dense > SIZE_MAX / 4 / sizeof(float))
        return sl_err_set(SL_ERR_INVALID, "sparse allreduce: %d shards, %zu dense floats, nodes %d",
                          k, dense, nodes);
    SL_TRY(SL_CALLOC(&sa, 1, "sparse allreduce"));
    sa->nodes = nodes;
    sa->dense_most = dense;
    SL_TRY_GOTO(SL_CALLOC(&sa->shard, (size_t)k, "sparse allreduce shards"), st, fail);
    sa->k = k;
    for (int p = 0; p < k; p++)
        SL_TRY_GOTO(shard_init(sa, p, shards[p], &words, &vals), st, fail);
    sa->words = (grow_t){NULL, 0, words, sizeof(float)};
    /* unique: the shards' unions and the dense floats; allgather: every node's rows, then
     * the dense floats in the same buffer (shard_init bounds vals, new's check dense) */
    sa->vals = (grow_t){NULL, 0, vals / n + dense > vals ? vals / n + dense : vals, sizeof(float)};
    SL_TRY_GOTO(SL_ALLOC(&sa->count_words, n * (size_t)k, "sparse allreduce counts"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sa->per_node, n, "sparse allreduce counts"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sa->blocks, n, "sparse allreduce counts"), st, fail);
    for (size_t j = 0; j < n; j++)
        sa->per_node[j] = (size_t)k;
    *out = sa;
    return SL_OK;
fail:
    sl_sparse_allreduce_destroy(&sa);
    return st;
}

sl_status_t
sl_sparse_allreduce_new(sl_sparse_allreduce_t **out, const sl_component_t *c, int nodes)
{
    return sl_sparse_allreduce_new_shards(out, &c, 1, 0, nodes);
}

void
sl_sparse_allreduce_destroy(sl_sparse_allreduce_t **sa)
{
    if (!sa || !*sa)
        return;
    for (int p = 0; (*sa)->shard && p < (*sa)->k; p++) {
        shard_t *s = &(*sa)->shard[p];
        sl_free(s->off);
        sl_free(s->len);
        sl_free(s->list_a.p);
        sl_free(s->list_b.p);
    }
    sl_free((*sa)->shard);
    sl_free((*sa)->count_words);
    sl_free((*sa)->per_node);
    sl_free((*sa)->blocks);
    sl_free((*sa)->words.p);
    sl_free((*sa)->vals.p);
    sl_free(*sa);
    *sa = NULL;
}

void
sl_sparse_allreduce_stats(const sl_sparse_allreduce_t *sa, sl_sparse_stats_t *out)
{
    *out = sa->last;
}

void
sl_sparse_allreduce_shard_stats(const sl_sparse_allreduce_t *sa, int p, sl_sparse_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (p >= 0 && p < sa->k)
        *out = sa->shard[p].last;
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

/* The part of part->rows (absolute, must be strictly ascending) inside shard s: its mine
 * and ui. */
static sl_status_t
own_rows(shard_t *s, const sl_sparse_part_t *part)
{
    const int32_t *rows = part->rows;
    int nrows = part->nrows, lo = 0, hi;
    long end = s->row_begin + s->rows;

    if (nrows < 0 || (nrows > 0 && !rows) || !part->grad)
        return sl_err_set(SL_ERR_INVALID, "sparse allreduce: %d rows%s", nrows,
                          part->grad ? "" : ", no gradient");
    for (int i = 1; i < nrows; i++)
        if (rows[i] <= rows[i - 1])
            return sl_err_set(SL_ERR_INVALID,
                              "sparse allreduce: own rows not strictly ascending: row %d "
                              "after %d at %d",
                              (int)rows[i], (int)rows[i - 1], i);
    while (lo < nrows && rows[lo] < s->row_begin)
        lo++;
    hi = lo;
    while (hi < nrows && rows[hi] < end)
        hi++;
    s->mine = rows ? rows + lo : NULL;
    s->ui = (size_t)(hi - lo);
    s->grad = part->grad;
    memset(&s->last, 0, sizeof s->last);
    s->last.local_rows = s->ui;
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

/* Checks node k's index block of shard p (n words at w) and decodes it into out: each
 * word a row of the shard, strictly ascending. */
static sl_status_t
check_block(const sl_sparse_allreduce_t *sa, int p, uint32_t component, uint64_t round, int k,
            const float *w, size_t n, int32_t *out)
{
    const shard_t *s = &sa->shard[p];

    for (size_t i = 0; i < n; i++) {
        uint32_t u = u32_of(w + i);
        if (u >= (uint32_t)s->rows || (i > 0 && (int32_t)u <= out[i - 1]))
            return sl_err_set(SL_ERR_INVALID,
                              "sparse allreduce: component %u, round %" PRIu64
                              ": rank %d sent row %" PRIu32 " at %zu of shard %d (%ld rows, "
                              "strictly ascending rows expected)",
                              (unsigned)component, round, k, u, i, p, s->rows);
        out[i] = (int32_t)u;
    }
    return SL_OK;
}

/* Step 3 of the paper, for unique and allgather: every node's U_k of every shard
 * (checked against the shard), then every node's rows (shard-relative, checked) into
 * each shard's list_a, node k's at off[k], len[k]. Node k's block of the indices is its
 * rows of shard 0, then of shard 1, ... o has no codec: the words must arrive
 * bit-exact. */
static sl_status_t
gather_rows(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component, uint64_t round,
            const sl_collective_opts_t *o)
{
    uint32_t me = sa->me;
    size_t total = 0, at;
    float *w, *mine_at;

    for (int p = 0; p < sa->k; p++)
        sa->count_words[(size_t)me * sa->k + p] = word_of((uint32_t)sa->shard[p].ui);
    SL_TRY(
        failed(sl_allgather(tr, component, 3 * round + PHASE_COUNTS,
                            sa->count_words + (size_t)me * sa->k, sa->count_words, sa->per_node, o),
               component, round, "row counts"));
    for (int p = 0; p < sa->k; p++)
        sa->shard[p].last.gather_rows = 0;
    for (int j = 0; j < sa->n; j++) {
        sa->blocks[j] = 0;
        for (int p = 0; p < sa->k; p++) {
            shard_t *s = &sa->shard[p];
            uint32_t u = u32_of(sa->count_words + (size_t)j * sa->k + p);
            if (u > (uint32_t)s->rows)
                return sl_err_set(SL_ERR_INVALID,
                                  "sparse allreduce: component %u, round %" PRIu64
                                  ": rank %d claims %" PRIu32 " rows of shard %d, of %ld",
                                  (unsigned)component, round, j, u, p, s->rows);
            s->off[j] = s->last.gather_rows;
            s->len[j] = u;
            s->last.gather_rows += u;
            sa->blocks[j] += u;
        }
        total += sa->blocks[j];
    }
    SL_TRY(grow(&sa->words, total, "sparse allreduce indices"));
    w = sa->words.p;
    at = 0;
    for (uint32_t j = 0; j < me; j++)
        at += sa->blocks[j];
    mine_at = w + at;
    for (int p = 0; p < sa->k; p++) {
        const shard_t *s = &sa->shard[p];
        for (size_t i = 0; i < s->ui; i++)
            *mine_at++ = word_of((uint32_t)(s->mine[i] - s->row_begin));
    }
    SL_TRY(failed(sl_allgather(tr, component, 3 * round + PHASE_INDICES, w + at, w, sa->blocks, o),
                  component, round, "row indices"));
    for (int p = 0; p < sa->k; p++)
        SL_TRY(
            grow(&sa->shard[p].list_a, sa->shard[p].last.gather_rows, "sparse allreduce indices"));
    at = 0;
    for (int j = 0; j < sa->n; j++)
        for (int p = 0; p < sa->k; p++) {
            shard_t *s = &sa->shard[p];
            SL_TRY(check_block(sa, p, component, round, j, w + at, s->len[j],
                               (int32_t *)s->list_a.p + s->off[j]));
            at += s->len[j];
        }
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

/* Step 4: I^ of shard s = the sorted union of the n nodes' lists (list_a at off[k],
 * len[k]), merged in pairs level by level between list_a and list_b: O(sum U_k log n).
 * Sets s->uni and s->ug. off and len are used up. */
static void
union_rows(shard_t *s, int n)
{
    int32_t *a = s->list_a.p, *b = s->list_b.p, *swap;
    int m = n;

    while (m > 1) {
        size_t at = 0;
        int out = 0;
        for (int k = 0; k < m; k += 2, out++) {
            size_t got = k + 1 < m ? merge_unique(a + s->off[k], s->len[k], a + s->off[k + 1],
                                                  s->len[k + 1], b + at)
                                   : merge_unique(a + s->off[k], s->len[k], NULL, 0, b + at);
            s->off[out] = at;
            s->len[out] = got;
            at += got;
        }
        swap = a;
        a = b;
        b = swap;
        m = out;
    }
    s->ug = s->len[0];
    s->uni = a + s->off[0];
}

/* The dense spans one after the other into (to_buf) or back out of buf. */
static void
pack_spans(float *buf, const sl_sparse_span_t *dense, int ndense, int to_buf)
{
    for (int i = 0; i < ndense; i++) {
        if (to_buf)
            memcpy(buf, dense[i].x, dense[i].count * sizeof *buf);
        else
            memcpy(dense[i].x, buf, dense[i].count * sizeof *buf);
        buf += dense[i].count;
    }
}

/* The paper's steps 3-7 (steps 1-2, the local unique rows with summed gradients, are
 * the model's), every shard's M_i and the dense spans in one allreduce; with keep
 * (sl_sparse_allreduce_union_sums) M_i of every union row, and the sums stay in vals. */
static sl_status_t
exchange_unique(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component, uint64_t round,
                const sl_collective_opts_t *raw, const sl_collective_opts_t *o,
                const sl_sparse_span_t *dense, int ndense, size_t dense_count, int keep)
{
    size_t total = 0;
    float *m;

    SL_TRY(gather_rows(sa, tr, component, round, raw));
    for (int p = 0; p < sa->k; p++) {
        shard_t *s = &sa->shard[p];
        SL_TRY(grow(&s->list_b, s->last.gather_rows, "sparse allreduce union"));
        union_rows(s, sa->n);
        s->last.union_rows = s->ug;
        s->at = total;
        total += s->ug * (size_t)s->row_len;
    }
    SL_TRY(grow(&sa->vals, total + dense_count, "sparse allreduce rows"));
    m = sa->vals.p;
    /* step 5: M_i (U_g, D), the own rows in their places in I^, zeros elsewhere (or,
     * keep, the shard's values in every row of I^) */
    for (int p = 0; p < sa->k; p++) {
        const shard_t *s = &sa->shard[p];
        size_t d = (size_t)s->row_len, i = 0;
        float *mp = m + s->at;
        for (size_t j = 0; j < s->ug; j++) {
            if (keep) {
                memcpy(mp + j * d, s->grad + (size_t)s->uni[j] * d, d * sizeof *mp);
                i += i < s->ui && s->mine[i] - s->row_begin == s->uni[j];
            } else if (i < s->ui && s->mine[i] - s->row_begin == s->uni[j]) {
                memcpy(mp + j * d, s->grad + (size_t)s->uni[j] * d, d * sizeof *mp);
                i++;
            } else {
                memset(mp + j * d, 0, d * sizeof *mp);
            }
        }
        SL_ASSERT(i == s->ui); /* the own rows are part of the union */
    }
    pack_spans(m + total, dense, ndense, 1);
    /* step 6: M^ */
    SL_TRY(
        failed(sl_allreduce_sum(tr, component, 3 * round + PHASE_VALUES, m, total + dense_count, o),
               component, round, "row values"));
    /* step 7: the summed rows into the shards */
    for (int p = 0; p < sa->k && !keep; p++) {
        const shard_t *s = &sa->shard[p];
        size_t d = (size_t)s->row_len;
        for (size_t j = 0; j < s->ug; j++)
            memcpy(s->grad + (size_t)s->uni[j] * d, m + s->at + j * d, d * sizeof *m);
    }
    pack_spans(m + total, dense, ndense, 0);
    return SL_OK;
}

/* The baseline: every node's indices, then its U_k x D values of every shard gathered,
 * then summed into each shard in rank order from zero, the same order on every node;
 * the dense spans after, in an allreduce of their own. */
static sl_status_t
exchange_allgather(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                   uint64_t round, const sl_collective_opts_t *raw, const sl_collective_opts_t *o,
                   const sl_sparse_span_t *dense, int ndense, size_t dense_count)
{
    size_t total = 0, at = 0;
    float *v, *own;

    SL_TRY(gather_rows(sa, tr, component, round, raw));
    for (int j = 0; j < sa->n; j++) {
        sa->blocks[j] = 0; /* floats per block now */
        for (int p = 0; p < sa->k; p++)
            sa->blocks[j] += sa->shard[p].len[j] * (size_t)sa->shard[p].row_len;
        if ((uint32_t)j < sa->me)
            at += sa->blocks[j];
        total += sa->blocks[j];
    }
    SL_TRY(grow(&sa->vals, total > dense_count ? total : dense_count,
                "sparse allreduce gathered rows"));
    v = sa->vals.p;
    own = v + at;
    for (int p = 0; p < sa->k; p++) {
        const shard_t *s = &sa->shard[p];
        size_t d = (size_t)s->row_len;
        for (size_t j = 0; j < s->ui; j++, own += d)
            memcpy(own, s->grad + (size_t)(s->mine[j] - s->row_begin) * d, d * sizeof *v);
    }
    SL_TRY(failed(sl_allgather(tr, component, 3 * round + PHASE_VALUES, v + at, v, sa->blocks, o),
                  component, round, "row values"));
    for (int p = 0; p < sa->k; p++) {
        const shard_t *s = &sa->shard[p];
        for (size_t j = 0; j < s->ui; j++)
            memset(s->grad + (size_t)(s->mine[j] - s->row_begin) * (size_t)s->row_len, 0,
                   (size_t)s->row_len * sizeof *v);
    }
    for (int j = 0; j < sa->n; j++)
        for (int p = 0; p < sa->k; p++) {
            const shard_t *s = &sa->shard[p];
            const int32_t *idx = (const int32_t *)s->list_a.p + s->off[j];
            size_t d = (size_t)s->row_len;
            for (size_t r = 0; r < s->len[j]; r++, v += d) {
                float *dst = s->grad + (size_t)idx[r] * d;
                for (size_t e = 0; e < d; e++)
                    dst[e] += v[e];
            }
        }
    if (ndense == 0)
        return SL_OK;
    v = sa->vals.p;
    pack_spans(v, dense, ndense, 1);
    SL_TRY(failed(sl_allreduce_sum(tr, component, 3 * round + PHASE_VALUES, v, dense_count, o),
                  component, round, "dense values"));
    pack_spans(v, dense, ndense, 0);
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

/* The call's arguments against the context (over a group, grouped: at most its nodes;
 * else exactly): SL_ERR_INVALID when they do not fit. *dense_count: the spans' floats. */
static sl_status_t
check_call(const sl_sparse_allreduce_t *sa, int grouped, uint32_t component, uint64_t round,
           sl_exchange_t mode, const sl_sparse_span_t *dense, int ndense, size_t *dense_count)
{
    *dense_count = 0;
    for (int i = 0; ndense > 0 && i < ndense; i++) {
        if (!dense || (dense[i].count > 0 && !dense[i].x) ||
            dense[i].count > sa->dense_most - *dense_count)
            return sl_err_set(SL_ERR_INVALID,
                              "sparse allreduce: component %u: dense span %d of %zu floats "
                              "(context for %zu in all)",
                              (unsigned)component, i, dense ? dense[i].count : 0, sa->dense_most);
        *dense_count += dense[i].count;
    }
    if ((grouped ? sa->n > sa->nodes : sa->n != sa->nodes) || sa->me >= (uint32_t)sa->n ||
        round > (UINT64_MAX - 2) / 3 || ndense < 0 ||
        (mode != SL_EXCHANGE_UNIQUE && mode != SL_EXCHANGE_ALLGATHER &&
         (mode != SL_EXCHANGE_DENSE || sa->k != 1 || ndense != 0)))
        return sl_err_set(SL_ERR_INVALID,
                          "sparse allreduce: component %u: %u nodes (context for %d), "
                          "round %" PRIu64 ", mode %d, %d shards, %d dense spans",
                          (unsigned)component, (unsigned)sa->n, sa->nodes, round, (int)mode, sa->k,
                          ndense);
    return SL_OK;
}

/* A call of sl_sparse_allreduce_shards, or with keep of sl_sparse_allreduce_union_sums. */
static sl_status_t
run_call(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component, uint64_t round,
         sl_exchange_t mode, const sl_sparse_part_t *parts, const sl_sparse_span_t *dense,
         int ndense, const sl_collective_opts_t *o, int keep)
{
    sl_collective_opts_t raw = {0}; /* the same without codec, for the index words */
    double t0 = sl_clock_now();
    size_t dense_count;
    sl_status_t st;

    memset(&sa->last, 0, sizeof sa->last);
    for (int p = 0; p < sa->k; p++)
        sa->shard[p].ug = 0;
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
    SL_TRY(check_call(sa, o && o->group, component, round, mode, dense, ndense, &dense_count));
    for (int p = 0; p < sa->k; p++)
        SL_TRY(own_rows(&sa->shard[p], &parts[p]));
    if (sa->n == 1 && !keep) {
        for (int p = 0; p < sa->k; p++) {
            sl_sparse_stats_t *l = &sa->shard[p].last;
            l->gather_rows = mode == SL_EXCHANGE_DENSE ? 0 : l->local_rows;
            l->union_rows = mode == SL_EXCHANGE_UNIQUE  ? l->local_rows
                            : mode == SL_EXCHANGE_DENSE ? (size_t)sa->shard[p].rows
                                                        : 0;
        }
        st = SL_OK;
        goto done;
    }
    if (o)
        raw = *o;
    raw.codec = NULL;
    tally(&sa->last, tr, component, -1);
    switch (mode) {
    case SL_EXCHANGE_UNIQUE:
        st = exchange_unique(sa, tr, component, round, &raw, o, dense, ndense, dense_count, keep);
        break;
    case SL_EXCHANGE_ALLGATHER:
        st = exchange_allgather(sa, tr, component, round, &raw, o, dense, ndense, dense_count);
        break;
    default:
        sa->shard[0].last.union_rows = (size_t)sa->shard[0].rows;
        st = failed(sl_allreduce_sum(tr, component, 3 * round + PHASE_VALUES, sa->shard[0].grad,
                                     (size_t)sa->shard[0].rows * (size_t)sa->shard[0].row_len, o),
                    component, round, "dense shard");
        break;
    }
    tally(&sa->last, tr, component, 1);
    sa->last.buffer_bytes = held_bytes(sa);
    /* a timeout over a group is its members' to handle (src/sync/sl_members.h: they
     * give the lent payloads back before the next attempt) */
    if (st != SL_OK && !(st == SL_ERR_TIMEOUT && o && o->group))
        sa->broken = 1;
done:
    for (int p = 0; p < sa->k; p++) {
        sa->last.local_rows += sa->shard[p].last.local_rows;
        sa->last.gather_rows += sa->shard[p].last.gather_rows;
        sa->last.union_rows += sa->shard[p].last.union_rows;
    }
    sa->last.time_s = sl_clock_now() - t0;
    return st;
}

sl_status_t
sl_sparse_allreduce_shards(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                           uint64_t round, sl_exchange_t mode, const sl_sparse_part_t *parts,
                           const sl_sparse_span_t *dense, int ndense, const sl_collective_opts_t *o)
{
    return run_call(sa, tr, component, round, mode, parts, dense, ndense, o, 0);
}

sl_status_t
sl_sparse_allreduce_union_sums(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                               uint64_t round, const sl_sparse_part_t *parts,
                               const sl_collective_opts_t *o)
{
    return run_call(sa, tr, component, round, SL_EXCHANGE_UNIQUE, parts, NULL, 0, o, 1);
}

size_t
sl_sparse_allreduce_union(const sl_sparse_allreduce_t *sa, int p, const int32_t **rows,
                          const float **sums)
{
    const shard_t *s = &sa->shard[p];

    *rows = s->uni;
    *sums = (const float *)sa->vals.p + s->at;
    return s->ug;
}

sl_status_t
sl_sparse_allreduce(sl_sparse_allreduce_t *sa, sl_transport_t *tr, uint32_t component,
                    uint64_t round, sl_exchange_t mode, const int32_t *rows, int nrows,
                    float *shard_grad, const sl_collective_opts_t *o)
{
    sl_sparse_part_t part = {rows, nrows, shard_grad};

    return sl_sparse_allreduce_shards(sa, tr, component, round, mode, &part, NULL, 0, o);
}
