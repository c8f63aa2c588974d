/* Zipf-unique sparse exchange of a row shard: row sets and the neighbourhood exchange
 * (request, answer with the union's values, per-row mean); see sl_sparse.h. */
#include "embed/sl_sparse.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "common/sl_sort.h"
#include "transport/sl_gossip.h"

#define MAX_LINKS 64 /* peers in one list of an exchange: the ring's 2k links, k <= 32 */

struct sl_sparse {
    long max_rows;
    int max_len, answers;
    int32_t *lists;     /* (answers, max_rows) rows of each answer, L = E_k u E_j */
    size_t *nlist;      /* (answers) */
    float *vals;        /* (answers, max_rows, max_len) values of each answer */
    int32_t *req;       /* (max_rows) a puller's set, or the answerer's extra rows */
    int32_t *uni;       /* (max_rows) a union being built */
    int32_t *extra;     /* (max_rows) E_j \ E_k */
    unsigned char *ids; /* (max_rows * 4) row ids as wire bytes */
    float *pack;        /* (max_rows, max_len) values of the rows sent or allreduced */
    unsigned char *enc; /* (max_rows * max_len * 4) encoded values */
    int32_t *out_rows;  /* (max_rows) the result */
    float *out_mean;    /* (max_rows, max_len) */
    size_t nout;
};

sl_status_t
sl_rowset_init(sl_rowset_t *rs, long rows)
{
    rs->bits = NULL;
    rs->rows = 0;
    if (rows < 1)
        return sl_err_set(SL_ERR_INVALID, "row set: %ld rows", rows);
    SL_TRY(SL_CALLOC(&rs->bits, (size_t)(rows + 63) / 64, "row set"));
    rs->rows = rows;
    return SL_OK;
}

void
sl_rowset_fini(sl_rowset_t *rs)
{
    sl_free(rs->bits);
    rs->bits = NULL;
    rs->rows = 0;
}

void
sl_rowset_clear(sl_rowset_t *rs)
{
    memset(rs->bits, 0, (size_t)(rs->rows + 63) / 64 * sizeof *rs->bits);
}

size_t
sl_sparse_select(const sl_rowset_t *touched, long ntop, double random_frac, uint64_t random_key,
                 int32_t *out)
{
    size_t n = 0;
    float q = (float)random_frac;

    for (long r = 0; r < touched->rows; r++)
        if (r < ntop || sl_rowset_has(touched, r) ||
            (q > 0.0f && sl_rng_float_at(random_key, (uint64_t)r) < q))
            out[n++] = (int32_t)r;
    return n;
}

sl_status_t
sl_sparse_new(sl_sparse_t **out, long max_rows, int max_row_len, int answers)
{
    sl_sparse_t *sp;
    sl_status_t st;
    size_t r, d, nl;

    *out = NULL;
    if (max_rows < 1 || max_row_len < 1 || answers < 1 || answers > MAX_LINKS ||
        max_rows > INT32_MAX || (uint64_t)max_rows * (uint64_t)max_row_len > UINT32_MAX)
        return sl_err_set(SL_ERR_INVALID,
                          "sparse exchange: %ld rows of %d, %d answers: need sizes >= 1, "
                          "at most %d answers and 2^32 values per shard",
                          max_rows, max_row_len, answers, MAX_LINKS);
    SL_TRY(SL_CALLOC(&sp, 1, "sparse exchange"));
    r = (size_t)max_rows;
    d = (size_t)max_row_len;
    nl = (size_t)answers;
    sp->max_rows = max_rows;
    sp->max_len = max_row_len;
    sp->answers = answers;
    SL_TRY_GOTO(SL_ALLOC(&sp->lists, nl * r, "sparse answers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&sp->nlist, nl, "sparse answers"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->vals, nl * r * d, "sparse answers"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->req, r, "sparse rows"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->uni, r, "sparse rows"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->extra, r, "sparse rows"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->ids, r * 4, "sparse rows"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->pack, r * d, "sparse values"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->enc, r * d * sizeof(float), "sparse values"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->out_rows, r, "sparse result"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&sp->out_mean, r * d, "sparse result"), st, fail);
    *out = sp;
    return SL_OK;
fail:
    sl_sparse_destroy(&sp);
    return st;
}

void
sl_sparse_destroy(sl_sparse_t **spp)
{
    sl_sparse_t *sp = spp ? *spp : NULL;

    if (!sp)
        return;
    sl_free(sp->lists);
    sl_free(sp->nlist);
    sl_free(sp->vals);
    sl_free(sp->req);
    sl_free(sp->uni);
    sl_free(sp->extra);
    sl_free(sp->ids);
    sl_free(sp->pack);
    sl_free(sp->enc);
    sl_free(sp->out_rows);
    sl_free(sp->out_mean);
    sl_free(sp);
    *spp = NULL;
}

size_t
sl_sparse_result(const sl_sparse_t *sp, const int32_t **rows, const float **mean)
{
    *rows = sp->out_rows;
    *mean = sp->out_mean;
    return sp->nout;
}

/* a u b of two strictly ascending lists into out; returns its size. */
static size_t
merge_union(const int32_t *a, size_t na, const int32_t *b, size_t nb, int32_t *out)
{
    size_t i = 0, j = 0, n = 0;

    while (i < na || j < nb) {
        if (j == nb || (i < na && a[i] < b[j]))
            out[n++] = a[i++];
        else if (i == na || b[j] < a[i])
            out[n++] = b[j++];
        else {
            out[n++] = a[i++];
            j++;
        }
    }
    return n;
}

/* a \ b of two strictly ascending lists into out; returns its size. */
static size_t
merge_minus(const int32_t *a, size_t na, const int32_t *b, size_t nb, int32_t *out)
{
    size_t j = 0, n = 0;

    for (size_t i = 0; i < na; i++) {
        while (j < nb && b[j] < a[i])
            j++;
        if (j == nb || b[j] != a[i])
            out[n++] = a[i];
    }
    return n;
}

/* 1 when list holds n rows strictly ascending within [0, rows). */
static int
rows_ok(const int32_t *list, size_t n, long rows)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] < 0 || list[i] >= rows || (i > 0 && list[i] <= list[i - 1]))
            return 0;
    return 1;
}

/* Sends n row ids as an index frame (seq) to peer: copied, never waiting for room. */
static sl_status_t
send_ids(sl_sparse_t *sp, sl_transport_t *t, const sl_sparse_args_t *a, uint32_t peer, uint32_t seq,
         const int32_t *list, size_t n)
{
    sl_wire_key_t key = {a->round, a->component, seq, peer, SL_WIRE_SPARSE_INDEX};

    for (size_t i = 0; i < n; i++)
        sl_put_u32(sp->ids + 4 * i, (uint32_t)list[i]);
    return sl_transport_send(t, &key, sp->ids, (uint32_t)(4 * n), SL_WIRE_BYTES, 1.0f, 0, 0);
}

/* The row ids of an index frame into out (at most a->rows), checked. */
static sl_status_t
read_ids(const sl_transport_frame_t *f, const sl_sparse_args_t *a, int32_t *out, size_t *n)
{
    const unsigned char *p = f->payload;
    size_t bytes = f->h.payload_bytes;

    if (f->h.encoding != SL_WIRE_BYTES || bytes % 4 != 0 || bytes / 4 > (size_t)a->rows)
        return sl_err_set(SL_ERR_INVALID,
                          "sparse exchange: rank %u sent %zu bytes of row ids for component %u "
                          "(%ld rows)",
                          (unsigned)f->h.sender, bytes, (unsigned)a->component, a->rows);
    *n = bytes / 4;
    for (size_t i = 0; i < *n; i++)
        out[i] = (int32_t)sl_get_u32(p + 4 * i);
    if (!rows_ok(out, *n, a->rows))
        return sl_err_set(SL_ERR_INVALID,
                          "sparse exchange: rank %u sent row ids for component %u that are "
                          "not strictly ascending within its %ld rows",
                          (unsigned)f->h.sender, (unsigned)a->component, a->rows);
    return SL_OK;
}

/* Copies the values of rows list (n) of the shard into sp->pack. */
static void
pack_rows(sl_sparse_t *sp, const sl_sparse_args_t *a, const int32_t *list, size_t n)
{
    size_t d = (size_t)a->row_len;

    for (size_t i = 0; i < n; i++)
        memcpy(sp->pack + i * d, a->shard + (size_t)list[i] * d, d * sizeof(float));
}

/* Answers puller `to`, whose set is in sp->req (nreq): the rows of E_j \ E_k, then the
 * values of E_k u E_j. An answer that cannot be queued at once is skipped. */
static sl_status_t
answer(sl_sparse_t *sp, sl_transport_t *t, const sl_sparse_args_t *a, uint32_t to, size_t nreq)
{
    sl_wire_key_t key = {a->round, a->component, 0, to, SL_WIRE_SPARSE_VALUES};
    size_t nu = merge_union(sp->req, nreq, a->mine, a->nmine, sp->uni);
    size_t nx = merge_minus(a->mine, a->nmine, sp->req, nreq, sp->extra);
    size_t count = nu * (size_t)a->row_len;
    unsigned enc = a->codec ? a->codec->encoding : SL_WIRE_FP32;
    const void *payload = sp->pack;
    float scale = 1.0f;
    sl_status_t st;

    pack_rows(sp, a, sp->uni, nu);
    if (a->codec) {
        scale = a->codec->scale(a->codec->ctx, sp->pack, count);
        a->codec->encode(a->codec->ctx, scale, sp->pack, count, sp->enc);
        payload = sp->enc;
    }
    st = send_ids(sp, t, a, to, 1, sp->extra, nx);
    if (st == SL_OK)
        st = sl_transport_send(t, &key, payload, (uint32_t)count, enc, scale, 0, 0);
    if (st == SL_ERR_TIMEOUT) {
        sl_log_warn("sparse", "rank %u: answer to rank %u skipped: %s",
                    (unsigned)sl_transport_rank(t), (unsigned)to, sl_err_msg());
        return SL_OK;
    }
    return st;
}

/* An answer of chosen node j: its extra rows are in frame *f; the values frame follows
 * (waited for until deadline). Fills answer slot sp->lists/vals[slot] and sets *taken.
 * An answer this node cannot use (bad row ids, values of another size or encoding, or
 * that do not decode, or are not finite) is refused (sl_transport_refuse; *f may be
 * NULLed) and, like values that do not come, leaves j out: SL_OK with *taken 0. */
static sl_status_t
take_answer(sl_sparse_t *sp, sl_transport_t *t, const sl_sparse_args_t *a, sl_transport_frame_t **f,
            size_t slot, double deadline, int *taken)
{
    sl_wire_key_t key = {a->round, a->component, 0, (*f)->h.sender, SL_WIRE_SPARSE_VALUES};
    int32_t *list = sp->lists + slot * (size_t)sp->max_rows;
    float *vals = sp->vals + slot * (size_t)sp->max_rows * (size_t)sp->max_len;
    unsigned enc = a->codec ? a->codec->encoding : SL_WIRE_FP32;
    sl_transport_frame_t *v;
    size_t nx, count;
    double wait = deadline - sl_clock_now();
    char what[96];
    sl_status_t st;

    *taken = 0;
    if (read_ids(*f, a, sp->req, &nx) != SL_OK) {
        sl_transport_refuse(t, f, SL_DROP_BAD_SIZE, sl_err_msg());
        return SL_OK;
    }
    sp->nlist[slot] = merge_union(a->mine, a->nmine, sp->req, nx, list);
    count = sp->nlist[slot] * (size_t)a->row_len;
    st = sl_transport_recv_any(t, &key, 1, wait > 0 ? (int)(wait * 1000.0) : 0, &v, NULL);
    if (st != SL_OK)
        return st == SL_ERR_TIMEOUT ? SL_OK : st; /* values that did not come: left out */
    if (v->h.encoding != enc || v->h.count != count) {
        snprintf(what, sizeof what, "%u %s values, expected %zu rows of %d %s",
                 (unsigned)v->h.count, sl_wire_encoding_name(v->h.encoding), sp->nlist[slot],
                 a->row_len, sl_wire_encoding_name(enc));
        sl_transport_refuse(t, &v, SL_DROP_BAD_SIZE, what);
        return SL_OK;
    }
    if (a->codec)
        st = a->codec->decode(a->codec->ctx, v->h.scale, v->payload, v->h.payload_bytes, vals,
                              count);
    else
        memcpy(vals, v->payload, count * sizeof(float));
    if (st != SL_OK) {
        sl_transport_refuse(t, &v, SL_DROP_BAD_SIZE, sl_err_msg());
        return SL_OK;
    }
    if (!sl_floats_finite(vals, count)) {
        sl_transport_refuse(t, &v, SL_DROP_NONFINITE, "rows left out of the average");
        return SL_OK;
    }
    sl_transport_frame_release(&v);
    *taken = 1;
    return SL_OK;
}

/* The result of a neighbourhood exchange: every row of E_k or of an answer, averaged
 * over the own copy and the answers that hold it, summed in double in that order (as
 * sl_bmuf_mean does for whole components), the answers in their senders' rank order
 * (from, got), not in the order they came: the bits must not depend on the network's
 * timing (sync.overlap_steps relies on it). */
static void
mean_rows(sl_sparse_t *sp, const sl_sparse_args_t *a, const uint32_t *from, size_t got)
{
    size_t d = (size_t)a->row_len, pos[MAX_LINKS], order[MAX_LINKS], n;
    const float *use[MAX_LINKS];

    sl_order_by_key(from, got, order);

    n = a->nmine;
    memcpy(sp->out_rows, a->mine, n * sizeof *a->mine);
    for (size_t k = 0; k < got; k++) {
        n = merge_union(sp->out_rows, n, sp->lists + k * (size_t)sp->max_rows, sp->nlist[k],
                        sp->uni);
        memcpy(sp->out_rows, sp->uni, n * sizeof *sp->uni);
    }
    sp->nout = n;
    memset(pos, 0, sizeof pos);
    for (size_t i = 0; i < n; i++) {
        int32_t r = sp->out_rows[i];
        const float *self = a->shard + (size_t)r * d;
        size_t m = 0;
        double inv;

        for (size_t o = 0; o < got; o++) {
            size_t k = order[o];
            const int32_t *list = sp->lists + k * (size_t)sp->max_rows;
            while (pos[k] < sp->nlist[k] && list[pos[k]] < r)
                pos[k]++;
            if (pos[k] < sp->nlist[k] && list[pos[k]] == r)
                use[m++] = sp->vals + (k * (size_t)sp->max_rows + pos[k]) * d;
        }
        inv = 1.0 / (double)(m + 1);
        for (size_t e = 0; e < d; e++) {
            double s = self[e];
            for (size_t k = 0; k < m; k++)
                s += use[k][e];
            sp->out_mean[i * d + e] = (float)(s * inv);
        }
    }
}

/* The arguments fit the buffers: nchosen answers (room for sp->answers), npullers. */
static sl_status_t
check_args(const sl_sparse_t *sp, const sl_sparse_args_t *a, size_t nchosen, size_t npullers)
{
    if (a->rows < 1 || a->rows > sp->max_rows || a->row_len < 1 || a->row_len > sp->max_len ||
        nchosen > (size_t)sp->answers || npullers > MAX_LINKS || a->nmine > (size_t)a->rows ||
        a->timeout_ms <= 0 || !rows_ok(a->mine, a->nmine, a->rows))
        return sl_err_set(SL_ERR_INVALID,
                          "sparse exchange of component %u: %ld rows of %d (room for %ld of %d), "
                          "%zu chosen (room for %d), %zu pullers (at most %d), %zu own rows, "
                          "timeout %d ms",
                          (unsigned)a->component, a->rows, a->row_len, sp->max_rows, sp->max_len,
                          nchosen, sp->answers, npullers, MAX_LINKS, a->nmine, a->timeout_ms);
    return SL_OK;
}

/* Serves frame *f, which matched an expected key: a puller's set (seq 0: answered) or
 * a chosen node's answer (seq 1: taken, its values waited for until deadline). *done =
 * 1 when the peer was served (answered, or its answer averaged). A set with bad row ids
 * is refused (*f NULLed) and not answered, an answer as take_answer says: that peer is
 * left out of this round. */
static sl_status_t
serve(sl_sparse_t *sp, sl_transport_t *t, const sl_sparse_args_t *a, sl_sparse_peers_t *p,
      sl_transport_frame_t **f, double deadline, int *done)
{
    uint32_t from = (*f)->h.sender;
    size_t nr;

    *done = 0;
    if ((*f)->h.seq == 0) {
        if (read_ids(*f, a, sp->req, &nr) != SL_OK) {
            sl_transport_refuse(t, f, SL_DROP_BAD_SIZE, sl_err_msg());
            return SL_OK;
        }
        SL_TRY(answer(sp, t, a, from, nr));
        p->asked[p->nasked++] = from;
        *done = 1;
        return SL_OK;
    }
    SL_TRY(take_answer(sp, t, a, f, p->nanswered, deadline, done));
    if (*done)
        p->answered[p->nanswered++] = from;
    return SL_OK;
}

sl_status_t
sl_sparse_gossip(sl_sparse_t *sp, sl_transport_t *t, const sl_sparse_args_t *a,
                 sl_sparse_peers_t *p)
{
    uint32_t me = sl_transport_rank(t);
    sl_wire_key_t keys[2 * MAX_LINKS];
    size_t map[2 * MAX_LINKS]; /* key -> puller i, or MAX_LINKS + chosen i */
    /* per puller i, then per chosen MAX_LINKS + i: a frame still expected; served */
    unsigned char pend[2 * MAX_LINKS] = {0}, served[2 * MAX_LINKS] = {0};
    size_t missing = 0;
    double deadline = sl_clock_now() + a->timeout_ms / 1000.0;
    sl_status_t st;

    p->nanswered = p->nasked = 0;
    sp->nout = 0;
    SL_TRY(check_args(sp, a, p->nchosen, p->npullers));
    if (p->chosen_wait > p->nchosen || p->pullers_wait > p->npullers)
        return sl_err_set(SL_ERR_INVALID,
                          "sparse exchange: waiting for %zu of %zu chosen, %zu of %zu pullers",
                          p->chosen_wait, p->nchosen, p->pullers_wait, p->npullers);
    /* our set to every chosen node first, so that they can answer while we do */
    for (size_t i = 0; i < p->nchosen; i++) {
        st = send_ids(sp, t, a, p->chosen[i], 0, a->mine, a->nmine);
        if (st == SL_ERR_TIMEOUT)
            sl_log_warn("sparse", "rank %u: request to rank %u skipped: %s", (unsigned)me,
                        (unsigned)p->chosen[i], sl_err_msg());
        else if (st != SL_OK)
            return st;
        pend[MAX_LINKS + i] = st == SL_OK;
    }
    memset(pend, 1, p->npullers);
    /* pass 0 waits (until the deadline) for the peers to wait for; pass 1 serves
     * whatever else has already arrived, without waiting */
    for (int pass = 0; pass < 2; pass++) {
        for (;;) {
            sl_transport_frame_t *f;
            size_t which, nk = 0;
            double wait = pass ? 0 : deadline - sl_clock_now();
            int done;

            for (size_t i = 0; i < p->npullers; i++)
                if (pend[i] && (pass || i < p->pullers_wait)) {
                    keys[nk] = (sl_wire_key_t){a->round, a->component, 0, p->pullers[i],
                                               SL_WIRE_SPARSE_INDEX};
                    map[nk++] = i;
                }
            for (size_t i = 0; i < p->nchosen; i++)
                if (pend[MAX_LINKS + i] && (pass || i < p->chosen_wait)) {
                    keys[nk] = (sl_wire_key_t){a->round, a->component, 1, p->chosen[i],
                                               SL_WIRE_SPARSE_INDEX};
                    map[nk++] = MAX_LINKS + i;
                }
            if (nk == 0)
                break;
            st =
                sl_transport_recv_any(t, keys, nk, wait > 0 ? (int)(wait * 1000.0) : 0, &f, &which);
            if (st == SL_ERR_TIMEOUT)
                break;
            if (st != SL_OK)
                return st;
            st = serve(sp, t, a, p, &f, deadline, &done);
            sl_transport_frame_release(&f);
            if (st != SL_OK)
                return st;
            pend[map[which]] = 0;
            served[map[which]] = (unsigned char)done;
        }
    }
    mean_rows(sp, a, p->answered, p->nanswered);
    for (size_t i = 0; i < p->pullers_wait; i++)
        missing += !served[i];
    for (size_t i = 0; i < p->chosen_wait; i++)
        missing += !served[MAX_LINKS + i];
    if (missing == 0)
        return SL_OK;
    return sl_err_set(SL_ERR_TIMEOUT,
                      "sparse exchange: rank %u, component %u, round %" PRIu64
                      ": %zu of the %zu peers waited for did not answer or ask within %d ms",
                      (unsigned)me, (unsigned)a->component, a->round, missing,
                      p->pullers_wait + p->chosen_wait, a->timeout_ms);
}
