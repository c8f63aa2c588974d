/* The LSTM language model's step: forward of embedding -> LSTM(P) layers -> output
 * layer with full or sampled softmax, and backward into the flat gradient buffer. Every
 * computation goes through the backend's ops table, so the same code drives the CPU and
 * the CUDA backend; only the small id lists (uniques, negatives) are built on the host
 * and uploaded. The model's layout and buffers come from sl_model.c (structs in
 * sl_model_internal.h, which also names the symbols V, E, H, P, R, T, B, N, S). */
#include "model/sl_model.h"

#include <math.h>
#include <string.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "model/sl_model_internal.h"
#include "model/sl_sampler.h"

/* ---- unique rows ---- */

/* In-place heapsort: the unique lists are small and steps must not allocate. */
static void
sort_i32(int32_t *a, int n)
{
    for (int end = n, start = n / 2; end > 1;) {
        int root;
        int32_t v;

        if (start > 0) {
            v = a[--start];
            root = start;
        } else {
            v = a[--end];
            a[end] = a[0];
            root = 0;
        }
        for (int child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && a[child + 1] > a[child])
                child++;
            if (a[child] <= v)
                break;
            a[root] = a[child];
        }
        a[root] = v;
    }
}

/* Distinct ids of ids[0..n) sorted ascending into rows[0..u) (returns u), and the
 * positions of each row grouped by a counting sort: positions of rows[j] are
 * pos[off[j]..off[j+1]). O(n + u log u) with the stamp array instead of sorting n ids. */
static int
unique_rows(sl_lm_t *lm, const int32_t *ids, int n, int32_t *rows, int32_t *off, int32_t *pos)
{
    int u = 0;

    if (++lm->gen == 0) {
        memset(lm->stamp, 0, (size_t)lm->V * sizeof *lm->stamp);
        lm->gen = 1;
    }
    for (int i = 0; i < n; i++)
        if (lm->stamp[ids[i]] != lm->gen) {
            lm->stamp[ids[i]] = lm->gen;
            rows[u++] = ids[i];
        }
    sort_i32(rows, u);
    for (int j = 0; j < u; j++) {
        lm->slot[rows[j]] = j;
        off[j] = 0;
    }
    off[u] = 0;
    for (int i = 0; i < n; i++)
        off[lm->slot[ids[i]] + 1]++;
    for (int j = 0; j < u; j++)
        off[j + 1] += off[j];
    for (int i = 0; i < n; i++) /* off[j] walks from the start of row j to its end */
        pos[off[lm->slot[ids[i]]]++] = i;
    for (int j = u; j > 0; j--)
        off[j] = off[j - 1];
    off[0] = 0;
    return u;
}

/* ---- forward / backward ---- */

static uint64_t
dropout_key(uint64_t key, int tensor)
{
    uint64_t words[2] = {key, (uint64_t)tensor};

    return sl_hash_u64s(words, 2);
}

static sl_status_t
check_step(const sl_lm_t *lm, const sl_lm_state_t *st, const int32_t *x, const int32_t *y, int bptt,
           const char *who)
{
    int n;

    if (st->lm != lm)
        return sl_err_set(SL_ERR_INVALID, "%s: the state belongs to another model", who);
    if (bptt < 1 || bptt > lm->max_bptt)
        return sl_err_set(SL_ERR_INVALID,
                          "%s: bptt %d outside [1, %d] (train.bptt sizes "
                          "the model's buffers)",
                          who, bptt, lm->max_bptt);
    n = bptt * st->batch;
    for (int i = 0; i < n; i++) {
        if (x[i] < 0 || x[i] >= lm->V)
            return sl_err_set(SL_ERR_INVALID, "%s: input id %d at %d outside [0, %d)", who,
                              (int)x[i], i, lm->V);
        if (y[i] < 0 || y[i] >= lm->V)
            return sl_err_set(SL_ERR_INVALID, "%s: target id %d at %d outside [0, %d)", who,
                              (int)y[i], i, lm->V);
    }
    return SL_OK;
}

/* op(B) (k, n) packed into buf (nbuf floats) for gemm_packed, where packing pays for the
 * caller (pays), the backend packs at its precision and the copy fits; returns buf, or
 * NULL: use gemm. */
static const float *
pack_operand(sl_lm_t *lm, float *buf, size_t nbuf, int trans, int k, int n, const float *b, int ldb,
             int pays)
{
    const sl_backend_ops_t *o = lm->be->ops;
    size_t pf;

    if (!buf || !pays)
        return NULL;
    pf = o->packed_floats(lm->be->ctx, k, n);
    if (pf == 0 || pf > nbuf)
        return NULL;
    o->pack_b(lm->be->ctx, trans, k, n, b, ldb, buf);
    return buf;
}

/* The recurrent loop's products of a window all use the same W_hh, and with a
 * projection the same W_proj. Where the backend has gemm_packed and packs at its
 * precision, such a weight is packed once for the window (pack_b costs about one
 * product) instead of inside every one of the T products, as a plain gemm does; a
 * window of one step, a generated token's, keeps the plain gemm. */
enum { PACK_MIN_T = 2 };

/* op(W_hh): trans, W_hh^T (R, 4H); else W_hh (4H, R). */
static const float *
pack_recurrent(sl_lm_t *lm, const sl_lm_layer_t *ly, int trans, int T)
{
    int g4 = 4 * ly->h;

    return pack_operand(lm, lm->packed, lm->npacked, trans, trans ? ly->r : g4, trans ? g4 : ly->r,
                        lm->params + ly->w_hh, ly->r, T >= PACK_MIN_T);
}

/* op(W_proj): trans, W_proj^T (H, P); else W_proj (P, H). */
static const float *
pack_projection(sl_lm_t *lm, const sl_lm_layer_t *ly, int trans, int T)
{
    if (ly->p == 0)
        return NULL;
    return pack_operand(lm, lm->packed_proj, lm->nproj, trans, trans ? ly->h : ly->p,
                        trans ? ly->p : ly->h, lm->params + ly->w_proj, ly->h, T >= PACK_MIN_T);
}

/* C (m, n) = A (m, k) op(B) + beta C, beta 0 or 1: from pack_operand's copy, else gemm
 * on b (ldb) as stored. */
static void
window_product(sl_lm_t *lm, const float *packed, int trans, int m, int n, int k, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    const sl_backend_ops_t *o = lm->be->ops;

    if (packed)
        o->gemm_packed(lm->be->ctx, 0, m, n, k, a, lda, packed, beta, c, ldc);
    else
        o->gemm(lm->be->ctx, 0, trans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* C (m, n) = op(A) op(B) + beta C, beta 0 or 1, for the products over the N rows of a
 * window (input projection, weight gradients, output layer): op(B) packed into
 * lm->packed for gemm_packed where the backend has it and the window has the rows to
 * pay for the packing (about one pass over op(B), as much as a product of ~32 rows);
 * else gemm. The choice depends on the model's shapes and N only (lm->packed holds
 * every weight either way round, or packed_out W_out: pack_output packs on the same
 * condition), so that an evaluation gives the same bits in every model object of any
 * max_batch, as shoal score relies on. lm->packed is free outside the recurrent
 * loops. */
enum { PACK_MIN_ROWS = 64 };

static void
packed_product(sl_lm_t *lm, int N, int trans_a, int trans_b, int m, int n, int k, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const float *p =
        pack_operand(lm, lm->packed, lm->npacked, trans_b, k, n, b, ldb, N >= PACK_MIN_ROWS);

    if (p)
        o->gemm_packed(ctx, trans_a, m, n, k, a, lda, p, beta, c, ldc);
    else
        o->gemm(ctx, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* The recurrent loops replay the backend's recording of themselves where it records
 * (CUDA graphs; sl_backend.h): a loop whose window has the same T, B and weight copies
 * as the one before in that layer and direction. The first window of a shape runs op by
 * op (its gemms size the backend's scratch memory), the second is recorded, the later
 * ones replay it. Every other pointer a loop uses is the model's, fixed for its life.
 * Returns 1 where the loop ran from the recording (skip it); else 0, and *recording
 * says whether the ops that follow are recorded (loop_recorded ends it). */
enum { REPLAY_MIN_T = 2 };

static int
loop_replayed(sl_lm_t *lm, sl_lm_loop_t *lp, int T, int B, const float *whh, const float *proj,
              int *recording)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;

    *recording = 0;
    if (!o->record_begin || T < REPLAY_MIN_T)
        return 0;
    if (lp->T != T || lp->B != B || lp->whh != whh || lp->proj != proj) {
        o->record_free(ctx, lp->rec);
        *lp = (sl_lm_loop_t){.T = T, .B = B, .whh = whh, .proj = proj};
        return 0;
    }
    if (lp->rec) {
        if (o->replay(ctx, lp->rec))
            return 1;
        o->record_free(ctx, lp->rec); /* stale: op by op once more, then record */
        lp->rec = NULL;
        return 0;
    }
    *recording = o->record_begin(ctx);
    return 0;
}

static void
loop_recorded(sl_lm_t *lm, sl_lm_loop_t *lp, int recording)
{
    if (recording)
        lm->be->ops->record_end(lm->be->ctx, &lp->rec);
}

/* Layer 0's input is an embedding row per position, so without dropout on it its input
 * projection takes one value per distinct input id of the window: where a training
 * window has at least twice as many rows as distinct ids (U: the char model's 66
 * symbols in 3,200 rows; about half of a Brown window's 1,120 words), it is computed
 * once per id, P = Emb[rows] W_ih^T + b (U, 4H), and gathered per position: the same
 * bits as the product over the window's rows (one sum in k order per element, then
 * + b). Backward sums the gate gradients per id first, dGv (U, 4H), so that dW_ih =
 * dGv^T Emb[rows], db = the column sums of dGv and dEmb[rows] = dGv W_ih take U rows
 * instead of N (other bits than the products over N rows: sums in another order).
 * Returns U where this applies, else 0; evaluation (no unique rows) keeps the product
 * over its rows, whose bits are the same. */
static int
per_symbol(const sl_lm_t *lm, int N, int drop)
{
    return lm->sym && !drop && lm->nrows_in <= lm->nsym && 2 * lm->nrows_in <= N ? lm->nrows_in : 0;
}

static void
symbol_projection_forward(sl_lm_t *lm, int N, int U)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const sl_lm_layer_t *ly = &lm->layer[0];
    const float *w = lm->params;
    int g4 = 4 * ly->h, E = lm->E;

    o->embedding_gather(ctx, U, E, w + lm->emb, lm->d_rows_in, lm->sym_in);
    packed_product(lm, N, 0, 1, U, g4, E, lm->sym_in, E, w + ly->w_ih, E, 0.0f, lm->sym, g4);
    o->add_bias(ctx, U, g4, w + ly->b, lm->sym);
    o->embedding_gather(ctx, N, g4, lm->sym, lm->d_slot_in, ly->gates);
}

/* dW_ih, db and the embedding rows' gradients from lm->dgates (N, 4H) through dGv. */
static void
symbol_projection_backward(sl_lm_t *lm, int N, int U)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const sl_lm_layer_t *ly = &lm->layer[0];
    const float *w = lm->params;
    float *gw = lm->grads;
    int g4 = 4 * ly->h, E = lm->E;

    o->zero(ctx, (size_t)U * (size_t)g4, lm->sym);
    o->embedding_scatter_add(ctx, U, g4, lm->d_iota, lm->d_off_in, lm->d_pos_in, lm->dgates,
                             lm->sym);
    packed_product(lm, N, 1, 0, g4, E, U, lm->sym, g4, lm->sym_in, E, 1.0f, gw + ly->w_ih, E);
    o->bias_grad(ctx, U, g4, lm->sym, gw + ly->b);
    packed_product(lm, N, 0, 0, U, E, g4, lm->sym, g4, w + ly->w_ih, E, 0.0f, lm->sym_in, E);
    o->embedding_scatter_add(ctx, U, E, lm->d_rows_in, lm->d_iota, lm->d_iota, lm->sym_in,
                             gw + lm->emb);
}

/* The T steps of a layer's forward over the window: r_{t-1} W_hh^T into the gates,
 * the cell, the projection. */
static void
forward_steps(sl_lm_t *lm, sl_lm_layer_t *ly, int T, int B, const float *whh, const float *proj)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int h = ly->h, g4 = 4 * ly->h, r = ly->r;
    const float *w = lm->params;

    for (int t = 0; t < T; t++) {
        size_t row = (size_t)t * (size_t)B;
        float *gt = ly->gates + row * (size_t)g4;
        const float *rp = t ? ly->rs + (row - (size_t)B) * (size_t)r : ly->h0;
        const float *cp = t ? ly->c + (row - (size_t)B) * (size_t)h : ly->c0;
        float *mt = ly->m + row * (size_t)h;

        window_product(lm, whh, 1, B, g4, r, rp, r, w + ly->w_hh, r, 1.0f, gt, g4);
        o->lstm_cell_forward(ctx, B, h, gt, cp, ly->c + row * (size_t)h, mt);
        if (ly->p > 0)
            window_product(lm, proj, 1, B, r, h, mt, h, w + ly->w_proj, h, 0.0f,
                           ly->rs + row * (size_t)r, r);
    }
}

/* Layer l over the window by the per-step path: its input projection, the recurrent
 * loop (replayed where recorded), the state advanced to the last step. */
static void
fused_layer_forward(sl_lm_t *lm, sl_lm_state_t *st, int l, int T, int B, const float *in, int sym)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const float *w = lm->params;
    sl_lm_layer_t *ly = &lm->layer[l];
    int h = ly->h, g4 = 4 * ly->h, r = ly->r, N = T * B;
    const float *whh, *proj;
    int recording;

    if (l == 0 && sym) {
        symbol_projection_forward(lm, N, sym);
    } else {
        packed_product(lm, N, 0, 1, N, g4, ly->in, in, ly->in, w + ly->w_ih, ly->in, 0.0f,
                       ly->gates, g4);
        o->add_bias(ctx, N, g4, w + ly->b, ly->gates);
    }
    whh = pack_recurrent(lm, ly, 1, T);
    proj = pack_projection(lm, ly, 1, T);
    if (!loop_replayed(lm, &ly->loop[0], T, B, whh, proj, &recording)) {
        forward_steps(lm, ly, T, B, whh, proj);
        loop_recorded(lm, &ly->loop[0], recording);
    }
    o->copy(ctx, (size_t)B * (size_t)r, ly->rs + (size_t)(N - B) * (size_t)r, st->h[l]);
    o->copy(ctx, (size_t)B * (size_t)h, ly->c + (size_t)(N - B) * (size_t)h, st->c[l]);
}

/* Forward through embedding and layers for the ids in d_x. Per layer (fused path), the
 * input projection of all T steps is one (N, in) x (in, 4H) gemm; each step then adds
 * only r_{t-1} W_hh^T and runs the fused cell; or (cudnn path) the backend's
 * whole-layer op (train: keeping what its backward needs). Activations stay for
 * backward; the state advances to the last step. drop: apply dropout with keys from
 * dkey. */
static void
forward(sl_lm_t *lm, sl_lm_state_t *st, int T, int drop, uint64_t dkey, int sym, int train)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const float *w = lm->params;
    int B = st->batch, N = T * B;
    const float *in = lm->x0;

    o->embedding_gather(ctx, N, lm->E, w + lm->emb, lm->d_x, lm->x0);
    if (drop)
        o->dropout(ctx, (size_t)N * (size_t)lm->E, lm->dropout, dropout_key(dkey, 0), lm->x0);
    for (int l = 0; l < lm->L; l++) {
        sl_lm_layer_t *ly = &lm->layer[l];
        int h = ly->h, r = ly->r;

        o->copy(ctx, (size_t)B * (size_t)r, st->h[l], ly->h0);
        o->copy(ctx, (size_t)B * (size_t)h, st->c[l], ly->c0);
        if (lm->lstm_cudnn)
            o->lstm_layer_forward(ctx, ly->dnn, train, T, B, in, w + ly->w_ih, w + ly->w_hh,
                                  w + ly->b, ly->p > 0 ? w + ly->w_proj : NULL, ly->h0, ly->c0,
                                  ly->rs, st->h[l], st->c[l]);
        else
            fused_layer_forward(lm, st, l, T, B, in, sym);
        if (drop) {
            o->copy(ctx, (size_t)N * (size_t)r, ly->rs, ly->drop);
            o->dropout(ctx, (size_t)N * (size_t)r, lm->dropout, dropout_key(dkey, l + 1), ly->drop);
            in = ly->drop;
        } else {
            in = ly->rs;
        }
    }
    lm->top = in;
}

/* W_out^T (trans) or W_out packed into packed_out once for a window's chunks, as
 * packed_product would for each (same bits); NULL without packed_out or where it would not. */
static const float *
pack_output(sl_lm_t *lm, int N, int trans)
{
    int V = lm->V, R = lm->layer[lm->L - 1].r;

    if (!lm->packed_out)
        return NULL;
    return pack_operand(lm, trans ? lm->packed_out : lm->packed_out + lm->nout_fwd,
                        trans ? lm->nout_fwd : lm->nout_bwd, trans, trans ? R : V, trans ? V : R,
                        lm->params + lm->out, R, N >= PACK_MIN_ROWS);
}

/* C = A op(W_out), from pack_output's copy (packed) where there is one, else packed_product. */
static void
output_product(sl_lm_t *lm, int N, const float *packed, int trans, int m, int n, int k,
               const float *a, int lda, float *c, int ldc)
{
    const float *W = lm->params + lm->out;
    int R = lm->layer[lm->L - 1].r;

    if (packed)
        window_product(lm, packed, trans, m, n, k, a, lda, W, R, 0.0f, c, ldc);
    else
        packed_product(lm, N, 0, trans, m, n, k, a, lda, W, R, 0.0f, c, ldc);
}

/* Full softmax over row chunks: logits = top W_out^T + b. With grad_scale != 0 also
 * backward: dtop = dlogits W_out, dW_out += dlogits^T top, db_out += column sums. */
static void
output_full(sl_lm_t *lm, int N, const int32_t *d_y, float grad_scale, float *dtop, double *loss_sum)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int V = lm->V, R = lm->layer[lm->L - 1].r;
    const float *b = lm->params + lm->out_b, *wt = pack_output(lm, N, 1);
    const float *wn = grad_scale != 0.0f ? pack_output(lm, N, 0) : NULL;

    *loss_sum = 0.0;
    for (int r0 = 0; r0 < N; r0 += lm->chunk) {
        int n = N - r0 < lm->chunk ? N - r0 : lm->chunk;
        const float *y = lm->top + (size_t)r0 * (size_t)R;
        double ls = 0.0;

        output_product(lm, N, wt, 1, n, V, R, y, R, lm->logits, V);
        o->softmax_xent(ctx, n, V, lm->logits, V, b, d_y + r0, grad_scale, &ls);
        *loss_sum += ls;
        if (grad_scale == 0.0f)
            continue; /* dtop is NULL then */
        output_product(lm, N, wn, 0, n, R, V, lm->logits, V, dtop + (size_t)r0 * (size_t)R, R);
        packed_product(lm, N, 1, 0, V, R, n, lm->logits, V, y, R, 1.0f, lm->grads + lm->out, R);
        o->bias_grad(ctx, n, V, lm->logits, lm->grads + lm->out_b);
    }
}

/* Sampled softmax forward and backward. d_out holds the N targets then the S negatives;
 * their W_out rows and biases are gathered into wg/bg (N+S rows). Logits (N, 1+S):
 * column 0 the true logit dot(top_i, W_out[t_i]) + b[t_i] (a row-wise dot, done as
 * one tiny gemm per row since the backend has no row-dot op), columns 1.. the
 * negatives top W_S^T + b_S. Gradients land in the touched rows of W_out and b_out
 * through the unique-row scatter-add. */
static void
output_sampled(sl_lm_t *lm, int N, float *dtop, double *loss_sum)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int R = lm->layer[lm->L - 1].r, S = lm->S, ld = S + 1, ns = N + S;
    float *L = lm->logits, *wt = lm->wg, *ws = lm->wg + (size_t)N * (size_t)R;
    const float *y = lm->top;
    double ls = 0.0;

    o->embedding_gather(ctx, ns, R, lm->params + lm->out, lm->d_out, lm->wg);
    o->embedding_gather(ctx, ns, 1, lm->params + lm->out_b, lm->d_out, lm->bg);
    /* column 0: b_T, then += top_i . W_T_i; columns 1..S: 1 b_S^T + top W_S^T */
    o->gemm(ctx, 0, 0, N, 1, 1, 1.0f, lm->bg, 1, lm->ones, 1, 0.0f, L, ld);
    for (int i = 0; i < N; i++)
        o->gemm(ctx, 0, 1, 1, 1, R, 1.0f, y + (size_t)i * (size_t)R, R, wt + (size_t)i * (size_t)R,
                R, 1.0f, L + (size_t)i * (size_t)ld, ld);
    o->gemm(ctx, 0, 0, N, S, 1, 1.0f, lm->ones, 1, lm->bg + N, S, 0.0f, L + 1, ld);
    o->gemm(ctx, 0, 1, N, S, R, 1.0f, y, R, ws, R, 1.0f, L + 1, ld);
    o->sampled_softmax_xent(ctx, N, S, L, lm->d_out, lm->d_out + N, lm->logq, lm->logq + N,
                            lm->loss_scale / (float)N, &ls);
    *loss_sum = ls;

    /* bias gradients: column 0 as is, column sums of the negatives */
    o->gemm(ctx, 0, 0, N, 1, 1, 1.0f, L, ld, lm->ones, 1, 0.0f, lm->dbg, 1);
    o->gemm(ctx, 1, 0, 1, S, N, 1.0f, lm->ones, 1, L + 1, ld, 0.0f, lm->dbg + N, S);
    /* dtop = dL_S W_S + g_i W_T_i */
    o->gemm(ctx, 0, 0, N, R, S, 1.0f, L + 1, ld, ws, R, 0.0f, dtop, R);
    for (int i = 0; i < N; i++)
        o->gemm(ctx, 0, 0, 1, R, 1, 1.0f, L + (size_t)i * (size_t)ld, 1, wt + (size_t)i * (size_t)R,
                R, 1.0f, dtop + (size_t)i * (size_t)R, R);
    /* the gathered rows are no longer needed: wg becomes their gradients */
    o->gemm(ctx, 1, 0, S, R, N, 1.0f, L + 1, ld, y, R, 0.0f, ws, R);
    for (int i = 0; i < N; i++)
        o->gemm(ctx, 0, 0, 1, R, 1, 1.0f, L + (size_t)i * (size_t)ld, 1, y + (size_t)i * (size_t)R,
                R, 0.0f, wt + (size_t)i * (size_t)R, R);
    o->embedding_scatter_add(ctx, lm->nrows_out, R, lm->d_rows_out, lm->d_off_out, lm->d_pos_out,
                             lm->wg, lm->grads + lm->out);
    o->embedding_scatter_add(ctx, lm->nrows_out, 1, lm->d_rows_out, lm->d_off_out, lm->d_pos_out,
                             lm->dbg, lm->grads + lm->out_b);
}

/* The T steps of a layer's backward, last to first, from dr (N, R), the gradient of its
 * outputs, which each step adds dG_t W_hh to for the step before: dm through the
 * projection, the cell (dc carried in lm->dc), dgates (N, 4H). */
static void
backward_steps(sl_lm_t *lm, sl_lm_layer_t *ly, int T, int B, const float *whh, const float *proj,
               float *dr)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int h = ly->h, g4 = 4 * ly->h, r = ly->r;
    const float *w = lm->params;

    for (int t = T - 1; t >= 0; t--) {
        size_t row = (size_t)t * (size_t)B;
        float *drt = dr + row * (size_t)r;
        float *dgt = lm->dgates + row * (size_t)g4;
        const float *cp = t ? ly->c + (row - (size_t)B) * (size_t)h : ly->c0;
        const float *dmt = drt;

        if (ly->p > 0) {
            window_product(lm, proj, 0, B, h, r, drt, r, w + ly->w_proj, h, 0.0f, lm->dm, h);
            dmt = lm->dm;
        }
        o->lstm_cell_backward(ctx, B, h, ly->gates + row * (size_t)g4, cp, ly->c + row * (size_t)h,
                              dmt, lm->dc, dgt);
        if (t > 0)
            window_product(lm, whh, 0, B, r, g4, dgt, g4, w + ly->w_hh, r, 1.0f,
                           drt - (size_t)B * (size_t)r, r);
    }
}

/* Backward through the layers (top down) and the embedding, from dbuf[0] = d loss /
 * d top. Per layer, on the cudnn path, the backend's whole-layer backward; on the fused
 * path the steps run in reverse: dr_t (from above, plus dgates_{t+1} W_hh
 * accumulated into it in place) -> projection -> cell -> dgates_t. Then the weight
 * gradients of all T steps at once: dW_ih = dG^T X, dW_hh = dG[1..]^T r[..T-1] + the
 * t = 0 term with the carried state, db = column sums, dW_proj = dR^T M, and the input
 * gradient dX = dG W_ih. The gradient into the carried state is dropped (truncated
 * BPTT). */
static void
backward(sl_lm_t *lm, const sl_lm_state_t *st, int T, int drop, uint64_t dkey, int sym)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const float *w = lm->params;
    float *gw = lm->grads;
    int B = st->batch, N = T * B, cur = 0;

    for (int l = lm->L - 1; l >= 0; l--) {
        sl_lm_layer_t *ly = &lm->layer[l];
        int h = ly->h, g4 = 4 * ly->h, r = ly->r, in = ly->in;
        float *dr = lm->dbuf[cur];
        const float *x, *whh, *proj;
        int recording;

        if (drop)
            o->dropout(ctx, (size_t)N * (size_t)r, lm->dropout, dropout_key(dkey, l + 1), dr);
        x = l == 0 ? lm->x0 : (drop ? lm->layer[l - 1].drop : lm->layer[l - 1].rs);
        if (lm->lstm_cudnn) { /* dX into the other buffer, the weight gradients added */
            cur = 1 - cur;
            o->lstm_layer_backward(ctx, ly->dnn, T, B, x, ly->h0, ly->c0, ly->rs, dr, lm->dbuf[cur],
                                   gw + ly->w_ih, gw + ly->w_hh, gw + ly->b,
                                   ly->p > 0 ? gw + ly->w_proj : NULL);
            continue;
        }
        whh = pack_recurrent(lm, ly, 0, T);
        proj = pack_projection(lm, ly, 0, T);
        o->zero(ctx, (size_t)B * (size_t)h, lm->dc);
        if (!loop_replayed(lm, &ly->loop[1], T, B, whh, proj, &recording)) {
            backward_steps(lm, ly, T, B, whh, proj, dr);
            loop_recorded(lm, &ly->loop[1], recording);
        }
        if (l == 0 && sym)
            symbol_projection_backward(lm, N, sym);
        else
            packed_product(lm, N, 1, 0, g4, in, N, lm->dgates, g4, x, in, 1.0f, gw + ly->w_ih, in);
        if (T > 1)
            packed_product(lm, N, 1, 0, g4, r, N - B, lm->dgates + (size_t)B * (size_t)g4, g4,
                           ly->rs, r, 1.0f, gw + ly->w_hh, r);
        o->gemm(ctx, 1, 0, g4, r, B, 1.0f, lm->dgates, g4, ly->h0, r, 1.0f, gw + ly->w_hh, r);
        if (l > 0 || !sym)
            o->bias_grad(ctx, N, g4, lm->dgates, gw + ly->b);
        if (ly->p > 0)
            o->gemm(ctx, 1, 0, r, h, N, 1.0f, dr, r, ly->m, h, 1.0f, gw + ly->w_proj, h);
        if (l == 0 && sym)
            return; /* the embedding's gradients done per id */
        cur = 1 - cur;
        packed_product(lm, N, 0, 0, N, in, g4, lm->dgates, g4, w + ly->w_ih, in, 0.0f,
                       lm->dbuf[cur], in);
    }
    if (drop)
        o->dropout(ctx, (size_t)N * (size_t)lm->E, lm->dropout, dropout_key(dkey, 0),
                   lm->dbuf[cur]);
    o->embedding_scatter_add(ctx, lm->nrows_in, lm->E, lm->d_rows_in, lm->d_off_in, lm->d_pos_in,
                             lm->dbuf[cur], gw + lm->emb);
}

/* Host-side id lists of a train step (uniques, negatives, log expected counts),
 * uploaded to the device. */
static sl_status_t
prepare_ids(sl_lm_t *lm, const int32_t *x, const int32_t *y, int N, uint64_t sample_key)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    size_t i4 = sizeof(int32_t);
    int ns = N;

    lm->nrows_in = unique_rows(lm, x, N, lm->rows_in, lm->off_in, lm->pos_in);
    if (lm->d_slot_in && lm->nrows_in <= lm->nsym) { /* per_symbol's gather, before the */
        for (int i = 0; i < N; i++)                  /* output rows reuse lm->slot */
            lm->h_slot[i] = lm->slot[x[i]];
        SL_TRY(o->to_device(ctx, lm->d_slot_in, lm->h_slot, (size_t)N * i4));
    }
    memcpy(lm->h_out, y, (size_t)N * i4);
    if (lm->sampled) {
        sl_rng_t rng;
        long tries;

        sl_rng_init(&rng, sample_key);
        SL_TRY(sl_sampler_draw_unique(&lm->sampler, &rng, lm->S, lm->h_out + N, &tries));
        ns = N + lm->S;
        for (int i = 0; i < ns; i++)
            lm->h_logq[i] = (float)sl_sampler_log_expected(&lm->sampler, lm->h_out[i], tries);
        lm->nrows_out = unique_rows(lm, lm->h_out, ns, lm->rows_out, lm->off_out, lm->pos_out);
        SL_TRY(o->to_device(ctx, lm->logq, lm->h_logq, (size_t)ns * sizeof(float)));
        SL_TRY(o->to_device(ctx, lm->d_rows_out, lm->rows_out, (size_t)lm->nrows_out * i4));
        SL_TRY(o->to_device(ctx, lm->d_off_out, lm->off_out, (size_t)(lm->nrows_out + 1) * i4));
        SL_TRY(o->to_device(ctx, lm->d_pos_out, lm->pos_out, (size_t)ns * i4));
    } else {
        lm->nrows_out = lm->V;
    }
    SL_TRY(o->to_device(ctx, lm->d_x, x, (size_t)N * i4));
    SL_TRY(o->to_device(ctx, lm->d_out, lm->h_out, (size_t)ns * i4));
    SL_TRY(o->to_device(ctx, lm->d_rows_in, lm->rows_in, (size_t)lm->nrows_in * i4));
    SL_TRY(o->to_device(ctx, lm->d_off_in, lm->off_in, (size_t)(lm->nrows_in + 1) * i4));
    return o->to_device(ctx, lm->d_pos_in, lm->pos_in, (size_t)N * i4);
}

/* The compute of a training step on the ids prepare_ids uploaded, into a zero gradient:
 * forward, output layer, backward. */
static void
train_compute(sl_lm_t *lm, sl_lm_state_t *st, int T, const sl_step_keys_t *keys, double *loss_sum)
{
    int N = T * st->batch, drop = lm->dropout > 0.0f;
    int sym = lm->lstm_cudnn ? 0 : per_symbol(lm, N, drop);

    forward(lm, st, T, drop, keys->dropout_key, sym, 1);
    if (lm->sampled)
        output_sampled(lm, N, lm->dbuf[0], loss_sum);
    else
        output_full(lm, N, lm->d_out, lm->loss_scale / (float)N, lm->dbuf[0], loss_sum);
    backward(lm, st, T, drop, keys->dropout_key, sym);
}

/* device_options.lstm auto: PICK_RUNS training windows on each path, the state put
 * back and the gradient zeroed after each (forward kept the window's start in h0, c0;
 * the step's own window runs on a zero gradient), the best of the last
 * PICK_TIMED as its time; the fused path's first windows run op by op and record its
 * loops, the later ones replay them, as training will. */
enum { PICK_RUNS = 5, PICK_TIMED = 2 };

static sl_status_t
time_path(sl_lm_t *lm, sl_lm_state_t *st, int T, const sl_step_keys_t *keys, double *best)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int B = st->batch;

    *best = HUGE_VAL;
    for (int i = 0; i < PICK_RUNS; i++) {
        double t0, dt, loss;
        sl_status_t rc;

        SL_TRY(o->sync(ctx));
        t0 = sl_clock_now();
        train_compute(lm, st, T, keys, &loss);
        rc = o->sync(ctx);
        dt = sl_clock_now() - t0;
        if (i >= PICK_RUNS - PICK_TIMED && dt < *best)
            *best = dt;
        for (int l = 0; l < lm->L; l++) {
            const sl_lm_layer_t *ly = &lm->layer[l];

            o->copy(ctx, (size_t)B * (size_t)ly->r, ly->h0, st->h[l]);
            o->copy(ctx, (size_t)B * (size_t)ly->h, ly->c0, st->c[l]);
        }
        o->zero(ctx, lm->nparams, lm->grads);
        SL_TRY(rc);
    }
    return o->sync(ctx);
}

static sl_status_t
pick_lstm(sl_lm_t *lm, sl_lm_state_t *st, int T, const sl_step_keys_t *keys)
{
    double fused, cudnn;
    sl_status_t rc;

    lm->lstm_pending = 0;
    lm->lstm_cudnn = 0;
    if (sl_lm_lstm_layers_new(lm) != SL_OK) {
        sl_log_info("model", "device_options.lstm auto: fused (cudnn: %s)", sl_err_msg());
        return SL_OK;
    }
    SL_TRY(time_path(lm, st, T, keys, &fused));
    lm->lstm_cudnn = 1;
    rc = time_path(lm, st, T, keys, &cudnn);
    if (rc != SL_OK) {
        sl_log_warn("model", "device_options.lstm auto: fused (cudnn failed: %s)", sl_err_msg());
        sl_lm_lstm_layers_free(lm);
        return SL_OK;
    }
    sl_log_info("model",
                "device_options.lstm auto: cudnn %.3f ms, fused %.3f ms a training window "
                "(T %d, B %d): %s",
                1e3 * cudnn, 1e3 * fused, T, st->batch, cudnn < fused ? "cudnn" : "fused");
    if (cudnn >= fused)
        sl_lm_lstm_layers_free(lm);
    return SL_OK;
}

sl_status_t
sl_lm_train_step(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, const int32_t *y, int bptt,
                 const sl_step_keys_t *keys, double *loss_sum)
{
    sl_status_t rc;

    SL_TRY(check_step(lm, st, x, y, bptt, "training step"));
    sl_lm_clear_grads(lm); /* while the last step's rows are known */
    lm->stepped = 0;
    rc = prepare_ids(lm, x, y, bptt * st->batch, keys->sample_key);
    if (rc != SL_OK)
        return sl_err_prefix(rc, "training step");
    if (lm->lstm_pending)
        SL_TRY(pick_lstm(lm, st, bptt, keys));
    train_compute(lm, st, bptt, keys, loss_sum);
    lm->stepped = 1;
    return SL_OK;
}

sl_status_t
sl_lm_eval_batch(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, const int32_t *y, int bptt,
                 double *loss_sum)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int N;

    SL_TRY(check_step(lm, st, x, y, bptt, "evaluation batch"));
    N = bptt * st->batch;
    SL_TRY(o->to_device(ctx, lm->d_x, x, (size_t)N * sizeof(int32_t)));
    SL_TRY(o->to_device(ctx, lm->d_out, y, (size_t)N * sizeof(int32_t)));
    forward(lm, st, bptt, 0, 0, 0, 0);
    output_full(lm, N, lm->d_out, 0.0f, NULL, loss_sum);
    return SL_OK;
}

sl_status_t
sl_lm_next_logits(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, float *logits)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int B = st->batch, V = lm->V, R = lm->layer[lm->L - 1].r;

    SL_TRY(check_step(lm, st, x, x, 1, "next-token step"));
    SL_TRY(o->to_device(ctx, lm->d_x, x, (size_t)B * sizeof(int32_t)));
    forward(lm, st, 1, 0, 0, 0, 0);
    for (int r0 = 0; r0 < B; r0 += lm->chunk) {
        int n = B - r0 < lm->chunk ? B - r0 : lm->chunk;
        o->gemm(ctx, 0, 1, n, V, R, 1.0f, lm->top + (size_t)r0 * (size_t)R, R, lm->params + lm->out,
                R, 0.0f, lm->logits, V);
        o->add_bias(ctx, n, V, lm->params + lm->out_b, lm->logits);
        SL_TRY(o->to_host(ctx, logits + (size_t)r0 * (size_t)V, lm->logits,
                          (size_t)n * (size_t)V * sizeof(float)));
    }
    return SL_OK;
}

void
sl_lm_set_loss_scale(sl_lm_t *lm, float scale)
{
    SL_ASSERT(scale > 0.0f);
    lm->loss_scale = scale;
}

const int32_t *
sl_lm_touched_rows(const sl_lm_t *lm, int output, int *count)
{
    if (!lm->stepped) {
        *count = 0;
        return output ? lm->rows_out : lm->rows_in;
    }
    *count = output ? lm->nrows_out : lm->nrows_in;
    return output ? lm->rows_out : lm->rows_in;
}
