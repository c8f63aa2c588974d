/* The LSTM language model: the flat parameter buffer and its components, forward and
 * backward of embedding -> LSTM(P) layers -> output layer with full or sampled softmax.
 * Every computation goes through the backend's ops table, so the same code drives the
 * CPU and the CUDA backend; only the small id lists (uniques, negatives) are built on
 * the host and uploaded.
 *
 * Symbols: V vocabulary, E embedding, H cell, P projection, R layer output (P or H),
 * T steps, B streams, N = T*B rows (time-major: row t*B + b), S negatives. */
#include "model/sl_model.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_rng.h"
#include "model/sl_sampler.h"

#define LOGIT_BUDGET ((size_t)1 << 23) /* floats of full-softmax logits per row chunk */
#define INIT_CHUNK 65536               /* floats staged on the host per init upload */
#define MAX_DEV_ALLOCS (32 + 8 * SL_MAX_LAYERS)

/* Tensor ids that key the initialisation RNG (stable across model shapes). */
enum { T_EMBEDDING = 1, T_SOFTMAX = 2, T_LAYER = 16 };

typedef struct {
    int in, h, p, r; /* input size, cell size H, projection P (0 = none), output R */
    size_t w_ih;     /* offsets into params/grads: (4H, in) */
    size_t w_hh;     /* (4H, R) */
    size_t b;        /* (4H): PyTorch's b_ih + b_hh */
    size_t w_proj;   /* (P, H), when p > 0 */
    float *gates;    /* (N, 4H) gate activations i, f, g, o kept for backward */
    float *c;        /* (N, H) cell states */
    float *m;        /* (N, H) cell outputs o * tanh(c) */
    float *rs;       /* (N, R) layer outputs r = W_proj m (== m without projection) */
    float *drop;     /* (N, R) dropout(r), the next layer's input; NULL if no dropout */
    float *h0, *c0;  /* (max_batch, R), (max_batch, H) state the step started from */
} layer_t;

struct sl_lm {
    sl_backend_t *be;
    int V, E, L, shards;
    int max_batch, max_bptt, max_rows; /* max_rows = max_batch * max_bptt */
    int sampled, S;
    float dropout;
    float loss_scale; /* multiplies d loss / d logits (mixed precision); 1 = off */
    double init_range;
    layer_t layer[SL_MAX_LAYERS];
    size_t emb;   /* offset of the input embedding (V, E) */
    size_t out;   /* offset of the output embedding W_out (V, R_L) */
    size_t out_b; /* offset of the output bias (V) */
    size_t nparams;
    float *params, *grads;
    sl_component_t *comp;
    int ncomp;

    /* device workspace */
    float *x0;        /* (N, E) embedded input, dropout applied */
    const float *top; /* (N, R_L) input of the output layer (last r or its dropout) */
    float *dgates;    /* (N, 4 Hmax) */
    float *dbuf[2];   /* (N, max(E, Rmax)) gradients w.r.t. layer outputs / inputs */
    float *dm, *dc;   /* (max_batch, Hmax) */
    float *logits;    /* (chunk, V) full softmax, or (N, 1+S) sampled */
    int chunk;        /* rows of a full-softmax chunk */
    float *ones;      /* (max_rows) all 1: rank-1 gemms for biases and columns */
    float *wg;        /* sampled: (N+S, R_L) gathered W_out rows, targets then negatives;
                         reused for their gradients */
    float *bg, *dbg;  /* sampled: (N+S) gathered output biases and their gradients */
    float *logq;      /* sampled: (N+S) log expected counts, targets then negatives */
    int32_t *d_x;     /* (N) input ids */
    int32_t *d_out;   /* (N+S) targets, then the negatives */
    int32_t *d_rows_in, *d_off_in, *d_pos_in;    /* unique input rows, offsets, positions */
    int32_t *d_rows_out, *d_off_out, *d_pos_out; /* same for output rows (sampled) */
    void *dev[MAX_DEV_ALLOCS];
    int ndev;

    /* host */
    int32_t *h_out;  /* (N+S) targets then negatives */
    float *h_logq;   /* (N+S) */
    uint32_t *stamp; /* (V) generation marks for unique ids */
    int32_t *slot;   /* (V) index of a row in the current unique list */
    uint32_t gen;
    int32_t *rows_in, *off_in, *pos_in; /* (min(N,V)), (+1), (N) */
    int nrows_in;
    int32_t *rows_out, *off_out, *pos_out; /* (V), (V+1), (N+S) */
    int nrows_out;
    int stepped; /* a train step has run: touched rows are valid */
    sl_sampler_t sampler;
    float *stage; /* (INIT_CHUNK) host staging for initialisation */
};

struct sl_lm_state {
    const sl_lm_t *lm;
    sl_backend_t *be;
    int batch;
    size_t count; /* floats: batch * sum over layers of (R + H) */
    float *buf;
    float *h[SL_MAX_LAYERS]; /* (batch, R) last layer output r */
    float *c[SL_MAX_LAYERS]; /* (batch, H) last cell state */
};

static sl_status_t
dev_alloc(sl_lm_t *lm, void **p, size_t count, size_t size, const char *what)
{
    sl_status_t st;

    *p = NULL;
    SL_ASSERT(lm->ndev < MAX_DEV_ALLOCS);
    if (count > SIZE_MAX / size)
        return sl_err_set(SL_ERR_NOMEM, "sl_model: %s: size overflow", what);
    st = lm->be->ops->alloc(lm->be->ctx, p, count * size);
    if (st != SL_OK)
        return sl_err_prefix(st, "sl_model: %s", what);
    lm->dev[lm->ndev++] = *p;
    return SL_OK;
}

#define DEV_ALLOC(lm, pp, count, what)                                                             \
    dev_alloc((lm), (void **)(pp), (count), sizeof **(pp), (what))

/* Unsigned-safe product of sizes that must also fit an int (gemm dimensions). */
static int
fits_int(size_t a, size_t b)
{
    return b == 0 || a <= (size_t)INT_MAX / b;
}

static void
add_component(sl_lm_t *lm, const char *name, size_t offset, size_t count, long row_begin, long rows,
              int row_len)
{
    sl_component_t *c = &lm->comp[lm->ncomp++];

    snprintf(c->name, sizeof c->name, "%s", name);
    c->offset = offset;
    c->count = count;
    c->sparse = rows > 0;
    c->row_begin = row_begin;
    c->rows = rows;
    c->row_len = row_len;
}

/* Row shards of a (V, d) table at offset: sizes V/S, the first V%S one row longer. */
static void
add_sharded(sl_lm_t *lm, const char *prefix, size_t offset, int d)
{
    long begin = 0;

    for (int s = 0; s < lm->shards; s++) {
        long rows = lm->V / lm->shards + (s < lm->V % lm->shards);
        char name[32];

        snprintf(name, sizeof name, "%s.%d", prefix, s);
        add_component(lm, name, offset + (size_t)begin * (size_t)d, (size_t)rows * (size_t)d, begin,
                      rows, d);
        begin += rows;
    }
}

/* Lays out parameters: embedding, then per layer its LSTM weights and projection, then
 * the output embedding and bias; every component contiguous, no gaps. */
static void
layout(sl_lm_t *lm)
{
    size_t off = 0;
    char name[32];

    lm->emb = off;
    off += (size_t)lm->V * (size_t)lm->E;
    for (int l = 0; l < lm->L; l++) {
        layer_t *ly = &lm->layer[l];
        size_t g = 4 * (size_t)ly->h;

        ly->w_ih = off;
        ly->w_hh = ly->w_ih + g * (size_t)ly->in;
        ly->b = ly->w_hh + g * (size_t)ly->r;
        off = ly->b + g;
        if (ly->p > 0) {
            ly->w_proj = off;
            off += (size_t)ly->p * (size_t)ly->h;
        }
    }
    lm->out = off;
    off += (size_t)lm->V * (size_t)lm->layer[lm->L - 1].r;
    lm->out_b = off;
    off += (size_t)lm->V;
    lm->nparams = off;

    lm->ncomp = 0;
    add_sharded(lm, "embedding", lm->emb, lm->E);
    for (int l = 0; l < lm->L; l++) {
        layer_t *ly = &lm->layer[l];

        snprintf(name, sizeof name, "lstm.%d", l);
        add_component(lm, name, ly->w_ih, ly->b + 4 * (size_t)ly->h - ly->w_ih, 0, 0, 0);
        if (ly->p > 0) {
            snprintf(name, sizeof name, "proj.%d", l);
            add_component(lm, name, ly->w_proj, (size_t)ly->p * (size_t)ly->h, 0, 0, 0);
        }
    }
    add_sharded(lm, "softmax", lm->out, lm->layer[lm->L - 1].r);
    add_component(lm, "softmax_bias", lm->out_b, (size_t)lm->V, 0, 0, 0);
}

static sl_status_t
check_config(const sl_config_t *cfg, int vocab_size, int shards, int max_batch)
{
    const char *w = "sl_lm_new";

    if (vocab_size < 2)
        return sl_err_set(SL_ERR_INVALID, "%s: vocabulary size %d must be at least 2", w,
                          vocab_size);
    if (cfg->model.embedding < 1)
        return sl_err_set(SL_ERR_INVALID, "%s: model.embedding %d must be positive", w,
                          cfg->model.embedding);
    if (cfg->model.nlayers < 1 || cfg->model.nlayers > SL_MAX_LAYERS)
        return sl_err_set(SL_ERR_INVALID, "%s: %d layers, need 1..%d", w, cfg->model.nlayers,
                          SL_MAX_LAYERS);
    for (int l = 0; l < cfg->model.nlayers; l++) {
        const sl_layer_config_t *lc = &cfg->model.layers[l];

        if (lc->hidden < 1 || lc->projection < 0 || lc->hidden > INT_MAX / 4)
            return sl_err_set(SL_ERR_INVALID,
                              "%s: layer %d: hidden %d / projection %d out "
                              "of range",
                              w, l, lc->hidden, lc->projection);
    }
    if (!(cfg->model.dropout >= 0.0 && cfg->model.dropout < 1.0))
        return sl_err_set(SL_ERR_INVALID, "%s: model.dropout %g must be in [0, 1)", w,
                          cfg->model.dropout);
    if (!(cfg->model.init_range >= 0.0))
        return sl_err_set(SL_ERR_INVALID, "%s: model.init_range %g must be >= 0", w,
                          cfg->model.init_range);
    if (cfg->model.output == SL_OUTPUT_SAMPLED &&
        (cfg->model.samples < 1 || cfg->model.samples >= vocab_size))
        return sl_err_set(SL_ERR_INVALID,
                          "%s: model.samples %d must be in [1, %d) (the "
                          "vocabulary size)",
                          w, cfg->model.samples, vocab_size);
    if (shards < 1 || shards > vocab_size)
        return sl_err_set(SL_ERR_INVALID, "%s: %d embedding shards for %d rows", w, shards,
                          vocab_size);
    if (max_batch < 1 || cfg->train.bptt < 1 ||
        !fits_int((size_t)max_batch, (size_t)cfg->train.bptt))
        return sl_err_set(SL_ERR_INVALID, "%s: batch %d x bptt %d out of range", w, max_batch,
                          cfg->train.bptt);
    return SL_OK;
}

/* Device and host buffers for max_rows rows; every later step only reuses them. */
static sl_status_t
alloc_workspace(sl_lm_t *lm)
{
    size_t n = (size_t)lm->max_rows, mb = (size_t)lm->max_batch;
    size_t hmax = 0, dmax = (size_t)lm->E, ns = n + (size_t)lm->S;
    int rl = lm->layer[lm->L - 1].r;
    size_t logit_floats;

    for (int l = 0; l < lm->L; l++) {
        layer_t *ly = &lm->layer[l];
        size_t h = (size_t)ly->h, r = (size_t)ly->r;

        if (!fits_int(n, 4 * h) || !fits_int(n, r))
            return sl_err_set(SL_ERR_INVALID, "sl_lm_new: layer %d too large for %zu rows", l, n);
        hmax = h > hmax ? h : hmax;
        dmax = r > dmax ? r : dmax;
        SL_TRY(DEV_ALLOC(lm, &ly->gates, n * 4 * h, "gates"));
        SL_TRY(DEV_ALLOC(lm, &ly->c, n * h, "cell states"));
        SL_TRY(DEV_ALLOC(lm, &ly->m, n * h, "cell outputs"));
        if (ly->p > 0)
            SL_TRY(DEV_ALLOC(lm, &ly->rs, n * r, "projections"));
        else
            ly->rs = ly->m;
        if (lm->dropout > 0)
            SL_TRY(DEV_ALLOC(lm, &ly->drop, n * r, "dropout outputs"));
        SL_TRY(DEV_ALLOC(lm, &ly->h0, mb * r, "initial h"));
        SL_TRY(DEV_ALLOC(lm, &ly->c0, mb * h, "initial c"));
    }
    if (!fits_int(n, (size_t)lm->E) || !fits_int(n, dmax) || ns > INT_MAX)
        return sl_err_set(SL_ERR_INVALID, "sl_lm_new: %zu rows too many for these sizes", n);
    SL_TRY(DEV_ALLOC(lm, &lm->x0, n * (size_t)lm->E, "embedded input"));
    SL_TRY(DEV_ALLOC(lm, &lm->dgates, n * 4 * hmax, "gate gradients"));
    SL_TRY(DEV_ALLOC(lm, &lm->dbuf[0], n * dmax, "output gradients"));
    SL_TRY(DEV_ALLOC(lm, &lm->dbuf[1], n * dmax, "input gradients"));
    SL_TRY(DEV_ALLOC(lm, &lm->dm, mb * hmax, "dm"));
    SL_TRY(DEV_ALLOC(lm, &lm->dc, mb * hmax, "dc"));

    lm->chunk = (int)(LOGIT_BUDGET / (size_t)lm->V);
    if (lm->chunk < 1)
        lm->chunk = 1;
    if (lm->chunk > lm->max_rows)
        lm->chunk = lm->max_rows;
    logit_floats = (size_t)lm->chunk * (size_t)lm->V;
    if (lm->sampled) {
        if (!fits_int(n, (size_t)lm->S + 1) || !fits_int(ns, (size_t)rl))
            return sl_err_set(SL_ERR_INVALID, "sl_lm_new: %d samples too many for %zu rows", lm->S,
                              n);
        if (n * ((size_t)lm->S + 1) > logit_floats)
            logit_floats = n * ((size_t)lm->S + 1);
        SL_TRY(DEV_ALLOC(lm, &lm->wg, ns * (size_t)rl, "gathered output rows"));
        SL_TRY(DEV_ALLOC(lm, &lm->bg, ns, "gathered output biases"));
        SL_TRY(DEV_ALLOC(lm, &lm->dbg, ns, "output bias gradients"));
        SL_TRY(DEV_ALLOC(lm, &lm->logq, ns, "log expected counts"));
        SL_TRY(DEV_ALLOC(lm, &lm->d_rows_out, ns, "output rows"));
        SL_TRY(DEV_ALLOC(lm, &lm->d_off_out, ns + 1, "output row offsets"));
        SL_TRY(DEV_ALLOC(lm, &lm->d_pos_out, ns, "output row positions"));
        SL_TRY(SL_ALLOC(&lm->h_logq, ns, "log expected counts"));
        SL_TRY(SL_ALLOC(&lm->off_out, ns + 1, "output row offsets"));
        SL_TRY(SL_ALLOC(&lm->pos_out, ns, "output row positions"));
        SL_TRY(sl_sampler_init(&lm->sampler, lm->V));
    }
    SL_TRY(DEV_ALLOC(lm, &lm->logits, logit_floats, "logits"));
    SL_TRY(DEV_ALLOC(lm, &lm->ones, n, "ones"));
    SL_TRY(DEV_ALLOC(lm, &lm->d_x, n, "input ids"));
    SL_TRY(DEV_ALLOC(lm, &lm->d_out, ns, "target ids"));
    SL_TRY(DEV_ALLOC(lm, &lm->d_rows_in, n, "input rows"));
    SL_TRY(DEV_ALLOC(lm, &lm->d_off_in, n + 1, "input row offsets"));
    SL_TRY(DEV_ALLOC(lm, &lm->d_pos_in, n, "input row positions"));

    SL_TRY(SL_ALLOC(&lm->h_out, ns, "target ids"));
    SL_TRY(SL_CALLOC(&lm->stamp, (size_t)lm->V, "id stamps"));
    SL_TRY(SL_ALLOC(&lm->slot, (size_t)lm->V, "id slots"));
    SL_TRY(SL_ALLOC(&lm->rows_in, n, "input rows"));
    SL_TRY(SL_ALLOC(&lm->off_in, n + 1, "input row offsets"));
    SL_TRY(SL_ALLOC(&lm->pos_in, n, "input row positions"));
    SL_TRY(SL_ALLOC(&lm->rows_out, (size_t)lm->V, "output rows"));
    SL_TRY(SL_ALLOC(&lm->stage, INIT_CHUNK, "init staging"));
    for (size_t i = 0; i < INIT_CHUNK; i++)
        lm->stage[i] = 1.0f;
    for (size_t i = 0; i < n; i += INIT_CHUNK) {
        size_t k = n - i < INIT_CHUNK ? n - i : INIT_CHUNK;
        SL_TRY(lm->be->ops->to_device(lm->be->ctx, lm->ones + i, lm->stage, k * sizeof(float)));
    }
    if (!lm->sampled)
        for (int k = 0; k < lm->V; k++)
            lm->rows_out[k] = k;
    return SL_OK;
}

sl_status_t
sl_lm_new(sl_lm_t **out, const sl_config_t *cfg, int vocab_size, int embedding_shards,
          int max_batch, sl_backend_t *be)
{
    sl_status_t st;
    sl_lm_t *lm;

    *out = NULL;
    SL_TRY(check_config(cfg, vocab_size, embedding_shards, max_batch));
    SL_TRY(SL_CALLOC(&lm, 1, "model"));
    lm->be = be;
    lm->V = vocab_size;
    lm->E = cfg->model.embedding;
    lm->L = cfg->model.nlayers;
    lm->shards = embedding_shards;
    lm->max_batch = max_batch;
    lm->max_bptt = cfg->train.bptt;
    lm->max_rows = max_batch * cfg->train.bptt;
    lm->sampled = cfg->model.output == SL_OUTPUT_SAMPLED;
    lm->S = lm->sampled ? cfg->model.samples : 0;
    lm->dropout = (float)cfg->model.dropout;
    lm->loss_scale = 1.0f;
    lm->init_range = cfg->model.init_range;
    for (int l = 0; l < lm->L; l++) {
        layer_t *ly = &lm->layer[l];

        ly->in = l == 0 ? lm->E : lm->layer[l - 1].r;
        ly->h = cfg->model.layers[l].hidden;
        ly->p = cfg->model.layers[l].projection;
        ly->r = ly->p > 0 ? ly->p : ly->h;
    }
    SL_TRY_GOTO(
        SL_CALLOC(&lm->comp, 2 * (size_t)embedding_shards + 2 * (size_t)lm->L + 1, "components"),
        st, fail);
    layout(lm);
    SL_TRY_GOTO(DEV_ALLOC(lm, &lm->params, lm->nparams, "parameters"), st, fail);
    SL_TRY_GOTO(DEV_ALLOC(lm, &lm->grads, lm->nparams, "gradients"), st, fail);
    SL_TRY_GOTO(alloc_workspace(lm), st, fail);
    SL_TRY_GOTO(sl_lm_init_params(lm, cfg->run.seed), st, fail);
    *out = lm;
    return SL_OK;
fail:
    sl_lm_destroy(&lm);
    return st;
}

void
sl_lm_destroy(sl_lm_t **plm)
{
    sl_lm_t *lm = plm ? *plm : NULL;

    if (!lm)
        return;
    for (int i = 0; i < lm->ndev; i++)
        lm->be->ops->free(lm->be->ctx, lm->dev[i]);
    sl_sampler_fini(&lm->sampler);
    sl_free(lm->comp);
    sl_free(lm->h_out);
    sl_free(lm->h_logq);
    sl_free(lm->stamp);
    sl_free(lm->slot);
    sl_free(lm->rows_in);
    sl_free(lm->off_in);
    sl_free(lm->pos_in);
    sl_free(lm->rows_out);
    sl_free(lm->off_out);
    sl_free(lm->pos_out);
    sl_free(lm->stage);
    sl_free(lm);
    *plm = NULL;
}

size_t
sl_lm_nparams(const sl_lm_t *lm)
{
    return lm->nparams;
}

float *
sl_lm_params(sl_lm_t *lm)
{
    return lm->params;
}

float *
sl_lm_grads(sl_lm_t *lm)
{
    return lm->grads;
}

int
sl_lm_ncomponents(const sl_lm_t *lm)
{
    return lm->ncomp;
}

const sl_component_t *
sl_lm_component(const sl_lm_t *lm, int i)
{
    return i >= 0 && i < lm->ncomp ? &lm->comp[i] : NULL;
}

/* uniform(-range, range) at (seed, tensor, i), staged through the host in chunks. */
static sl_status_t
init_uniform(sl_lm_t *lm, uint64_t seed, uint64_t tensor, size_t off, size_t count)
{
    uint64_t words[2] = {seed, tensor};
    uint64_t key = sl_hash_u64s(words, 2);
    float a = (float)lm->init_range;

    for (size_t i = 0; i < count; i += INIT_CHUNK) {
        size_t k = count - i < INIT_CHUNK ? count - i : INIT_CHUNK;

        for (size_t j = 0; j < k; j++)
            lm->stage[j] = a * (2.0f * sl_rng_float_at(key, i + j) - 1.0f);
        SL_TRY(lm->be->ops->to_device(lm->be->ctx, lm->params + off + i, lm->stage,
                                      k * sizeof(float)));
    }
    return SL_OK;
}

sl_status_t
sl_lm_init_params(sl_lm_t *lm, uint64_t seed)
{
    const sl_backend_ops_t *o = lm->be->ops;
    int rl = lm->layer[lm->L - 1].r;

    o->zero(lm->be->ctx, lm->nparams, lm->params); /* biases stay zero */
    SL_TRY(init_uniform(lm, seed, T_EMBEDDING, lm->emb, (size_t)lm->V * (size_t)lm->E));
    for (int l = 0; l < lm->L; l++) {
        layer_t *ly = &lm->layer[l];
        uint64_t t = T_LAYER + 4 * (uint64_t)l;
        size_t g = 4 * (size_t)ly->h;

        SL_TRY(init_uniform(lm, seed, t, ly->w_ih, g * (size_t)ly->in));
        SL_TRY(init_uniform(lm, seed, t + 1, ly->w_hh, g * (size_t)ly->r));
        if (ly->p > 0)
            SL_TRY(init_uniform(lm, seed, t + 3, ly->w_proj, (size_t)ly->p * (size_t)ly->h));
    }
    return init_uniform(lm, seed, T_SOFTMAX, lm->out, (size_t)lm->V * (size_t)rl);
}

/* ---- recurrent state ---- */

sl_status_t
sl_lm_state_new(sl_lm_t *lm, int batch, sl_lm_state_t **out)
{
    sl_lm_state_t *st;
    sl_status_t rc;
    size_t off = 0;

    *out = NULL;
    if (batch < 1 || batch > lm->max_batch)
        return sl_err_set(SL_ERR_INVALID, "sl_lm_state_new: batch %d outside [1, %d]", batch,
                          lm->max_batch);
    SL_TRY(SL_CALLOC(&st, 1, "model state"));
    st->lm = lm;
    st->be = lm->be;
    st->batch = batch;
    for (int l = 0; l < lm->L; l++)
        st->count += (size_t)batch * (size_t)(lm->layer[l].r + lm->layer[l].h);
    rc = lm->be->ops->alloc(lm->be->ctx, (void **)&st->buf, st->count * sizeof(float));
    if (rc != SL_OK) {
        sl_free(st);
        return sl_err_prefix(rc, "sl_lm_state_new");
    }
    for (int l = 0; l < lm->L; l++) {
        st->h[l] = st->buf + off;
        off += (size_t)batch * (size_t)lm->layer[l].r;
        st->c[l] = st->buf + off;
        off += (size_t)batch * (size_t)lm->layer[l].h;
    }
    *out = st;
    return SL_OK;
}

void
sl_lm_state_destroy(sl_lm_state_t **pst)
{
    sl_lm_state_t *st = pst ? *pst : NULL;

    if (!st)
        return;
    st->be->ops->free(st->be->ctx, st->buf);
    sl_free(st);
    *pst = NULL;
}

void
sl_lm_state_reset(sl_lm_state_t *st)
{
    st->be->ops->zero(st->be->ctx, st->count, st->buf);
}

size_t
sl_lm_state_size(const sl_lm_state_t *st)
{
    return st->count;
}

sl_status_t
sl_lm_state_save(const sl_lm_state_t *st, float *host)
{
    return st->be->ops->to_host(st->be->ctx, host, st->buf, st->count * sizeof(float));
}

sl_status_t
sl_lm_state_load(sl_lm_state_t *st, const float *host)
{
    return st->be->ops->to_device(st->be->ctx, st->buf, host, st->count * sizeof(float));
}

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

/* Forward through embedding and layers for the ids in d_x. Per layer, the input
 * projection of all T steps is one (N, in) x (in, 4H) gemm; each step then adds only
 * r_{t-1} W_hh^T and runs the fused cell. Activations stay for backward; the state
 * advances to the last step. drop: apply dropout with keys from dkey. */
static void
forward(sl_lm_t *lm, sl_lm_state_t *st, int T, int drop, uint64_t dkey)
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
        layer_t *ly = &lm->layer[l];
        int h = ly->h, g4 = 4 * ly->h, r = ly->r;

        o->copy(ctx, (size_t)B * (size_t)r, st->h[l], ly->h0);
        o->copy(ctx, (size_t)B * (size_t)h, st->c[l], ly->c0);
        o->gemm(ctx, 0, 1, N, g4, ly->in, 1.0f, in, ly->in, w + ly->w_ih, ly->in, 0.0f, ly->gates,
                g4);
        o->add_bias(ctx, N, g4, w + ly->b, ly->gates);
        for (int t = 0; t < T; t++) {
            size_t row = (size_t)t * (size_t)B;
            float *gt = ly->gates + row * (size_t)g4;
            const float *rp = t ? ly->rs + (row - (size_t)B) * (size_t)r : ly->h0;
            const float *cp = t ? ly->c + (row - (size_t)B) * (size_t)h : ly->c0;
            float *mt = ly->m + row * (size_t)h;

            o->gemm(ctx, 0, 1, B, g4, r, 1.0f, rp, r, w + ly->w_hh, r, 1.0f, gt, g4);
            o->lstm_cell_forward(ctx, B, h, gt, cp, ly->c + row * (size_t)h, mt);
            if (ly->p > 0)
                o->gemm(ctx, 0, 1, B, r, h, 1.0f, mt, h, w + ly->w_proj, h, 0.0f,
                        ly->rs + row * (size_t)r, r);
        }
        o->copy(ctx, (size_t)B * (size_t)r, ly->rs + (size_t)(N - B) * (size_t)r, st->h[l]);
        o->copy(ctx, (size_t)B * (size_t)h, ly->c + (size_t)(N - B) * (size_t)h, st->c[l]);
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

/* Full softmax over row chunks: logits = top W_out^T + b. With grad_scale != 0 also
 * backward: dtop = dlogits W_out, dW_out += dlogits^T top, db_out += column sums. */
static void
output_full(sl_lm_t *lm, int N, const int32_t *d_y, float grad_scale, float *dtop, double *loss_sum)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    int V = lm->V, R = lm->layer[lm->L - 1].r;
    const float *W = lm->params + lm->out, *b = lm->params + lm->out_b;

    *loss_sum = 0.0;
    for (int r0 = 0; r0 < N; r0 += lm->chunk) {
        int n = N - r0 < lm->chunk ? N - r0 : lm->chunk;
        const float *y = lm->top + (size_t)r0 * (size_t)R;
        double ls = 0.0;

        o->gemm(ctx, 0, 1, n, V, R, 1.0f, y, R, W, R, 0.0f, lm->logits, V);
        o->add_bias(ctx, n, V, b, lm->logits);
        o->softmax_xent(ctx, n, V, lm->logits, V, d_y + r0, grad_scale, &ls);
        *loss_sum += ls;
        if (grad_scale == 0.0f)
            continue;
        o->gemm(ctx, 0, 0, n, R, V, 1.0f, lm->logits, V, W, R, 0.0f, dtop + (size_t)r0 * (size_t)R,
                R);
        o->gemm(ctx, 1, 0, V, R, n, 1.0f, lm->logits, V, y, R, 1.0f, lm->grads + lm->out, R);
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

/* Backward through the layers (top down) and the embedding, from dbuf[0] = d loss /
 * d top. Per layer the steps run in reverse: dr_t (from above, plus dgates_{t+1} W_hh
 * accumulated into it in place) -> projection -> cell -> dgates_t. Then the weight
 * gradients of all T steps at once: dW_ih = dG^T X, dW_hh = dG[1..]^T r[..T-1] + the
 * t = 0 term with the carried state, db = column sums, dW_proj = dR^T M, and the input
 * gradient dX = dG W_ih. The gradient into the carried state is dropped (truncated
 * BPTT). */
static void
backward(sl_lm_t *lm, const sl_lm_state_t *st, int T, int drop, uint64_t dkey)
{
    const sl_backend_ops_t *o = lm->be->ops;
    void *ctx = lm->be->ctx;
    const float *w = lm->params;
    float *gw = lm->grads;
    int B = st->batch, N = T * B, cur = 0;

    for (int l = lm->L - 1; l >= 0; l--) {
        layer_t *ly = &lm->layer[l];
        int h = ly->h, g4 = 4 * ly->h, r = ly->r, in = ly->in;
        float *dr = lm->dbuf[cur];
        const float *x;

        if (drop)
            o->dropout(ctx, (size_t)N * (size_t)r, lm->dropout, dropout_key(dkey, l + 1), dr);
        o->zero(ctx, (size_t)B * (size_t)h, lm->dc);
        for (int t = T - 1; t >= 0; t--) {
            size_t row = (size_t)t * (size_t)B;
            float *drt = dr + row * (size_t)r;
            float *dgt = lm->dgates + row * (size_t)g4;
            const float *cp = t ? ly->c + (row - (size_t)B) * (size_t)h : ly->c0;
            const float *dmt = drt;

            if (ly->p > 0) {
                o->gemm(ctx, 0, 0, B, h, r, 1.0f, drt, r, w + ly->w_proj, h, 0.0f, lm->dm, h);
                dmt = lm->dm;
            }
            o->lstm_cell_backward(ctx, B, h, ly->gates + row * (size_t)g4, cp,
                                  ly->c + row * (size_t)h, dmt, lm->dc, dgt);
            if (t > 0)
                o->gemm(ctx, 0, 0, B, r, g4, 1.0f, dgt, g4, w + ly->w_hh, r, 1.0f,
                        drt - (size_t)B * (size_t)r, r);
        }
        x = l == 0 ? lm->x0 : (drop ? lm->layer[l - 1].drop : lm->layer[l - 1].rs);
        o->gemm(ctx, 1, 0, g4, in, N, 1.0f, lm->dgates, g4, x, in, 1.0f, gw + ly->w_ih, in);
        if (T > 1)
            o->gemm(ctx, 1, 0, g4, r, N - B, 1.0f, lm->dgates + (size_t)B * (size_t)g4, g4, ly->rs,
                    r, 1.0f, gw + ly->w_hh, r);
        o->gemm(ctx, 1, 0, g4, r, B, 1.0f, lm->dgates, g4, ly->h0, r, 1.0f, gw + ly->w_hh, r);
        o->bias_grad(ctx, N, g4, lm->dgates, gw + ly->b);
        if (ly->p > 0)
            o->gemm(ctx, 1, 0, r, h, N, 1.0f, dr, r, ly->m, h, 1.0f, gw + ly->w_proj, h);
        cur = 1 - cur;
        o->gemm(ctx, 0, 0, N, in, g4, 1.0f, lm->dgates, g4, w + ly->w_ih, in, 0.0f, lm->dbuf[cur],
                in);
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

sl_status_t
sl_lm_train_step(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, const int32_t *y, int bptt,
                 const sl_step_keys_t *keys, double *loss_sum)
{
    const sl_backend_ops_t *o = lm->be->ops;
    int N, drop = lm->dropout > 0.0f;
    sl_status_t rc;

    SL_TRY(check_step(lm, st, x, y, bptt, "sl_lm_train_step"));
    N = bptt * st->batch;
    lm->stepped = 0;
    rc = prepare_ids(lm, x, y, N, keys->sample_key);
    if (rc != SL_OK)
        return sl_err_prefix(rc, "sl_lm_train_step");
    o->zero(lm->be->ctx, lm->nparams, lm->grads);
    forward(lm, st, bptt, drop, keys->dropout_key);
    if (lm->sampled)
        output_sampled(lm, N, lm->dbuf[0], loss_sum);
    else
        output_full(lm, N, lm->d_out, lm->loss_scale / (float)N, lm->dbuf[0], loss_sum);
    backward(lm, st, bptt, drop, keys->dropout_key);
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

    SL_TRY(check_step(lm, st, x, y, bptt, "sl_lm_eval_batch"));
    N = bptt * st->batch;
    SL_TRY(o->to_device(ctx, lm->d_x, x, (size_t)N * sizeof(int32_t)));
    SL_TRY(o->to_device(ctx, lm->d_out, y, (size_t)N * sizeof(int32_t)));
    forward(lm, st, bptt, 0, 0);
    output_full(lm, N, lm->d_out, 0.0f, NULL, loss_sum);
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
