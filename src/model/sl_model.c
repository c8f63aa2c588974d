/* The LSTM language model's parameters: the flat parameter buffer and its components,
 * allocation of the parameters and the device workspace the step reuses, initialisation,
 * and the recurrent state carried between steps. The step itself (forward, output
 * layer, backward) is in sl_lm_step.c; the structs both share are in
 * sl_model_internal.h, which also names the symbols (V, E, H, P, R, T, B, N, S). */
#include "model/sl_model.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_log.h"
#include "common/sl_rng.h"
#include "model/sl_model_internal.h"
#include "model/sl_sampler.h"

/* Floats of full-softmax logits per row chunk: 8 MB on the CPU (W_out is packed once
 * for all of a window's chunks, so smaller ones cost no packing: the word model's 1,120
 * rows in chunks of 209, not 838, the same speed in 24 MB less); 128 MB on a device,
 * whose memory has room and whose output products run faster over all of a window's
 * rows than in chunks (the LSTMP model's 2,240 rows x 10,002 words in one chunk, not
 * three: 4% more tokens/s on an H200 between two device runs, not side by side;
 * bench/README.md). But on the CPU never fewer than LOGIT_MIN_ROWS rows: each chunk's
 * three output products stream all of W_out and dW_out from memory once, so a chunk of
 * few rows is bound by memory, whatever the vocabulary (the budget alone gave 63 rows
 * at 33,000 words and 20 at 100,000, where the products ran 1.3-1.4x and 2.0-2.2x
 * slower than at 192; 192 rows run within 4% of a whole window's 1,120 rows at 10,002,
 * 40,002 and 100,002 words, v3 and v4 loops, an Intel Xeon: bench/bench_logit_chunks). */
#define LOGIT_BUDGET ((size_t)1 << 21)
#define LOGIT_BUDGET_DEVICE ((size_t)1 << 25)
#define LOGIT_MIN_ROWS 192
#define INIT_CHUNK 65536 /* floats staged on the host per init upload */

/* Tensor ids that key the initialisation RNG (stable across model shapes). */
enum { T_EMBEDDING = 1, T_SOFTMAX = 2, T_LAYER = 16 };

static sl_status_t
dev_alloc(sl_lm_t *lm, void **p, size_t count, size_t size, const char *what)
{
    sl_status_t st;

    *p = NULL;
    SL_ASSERT(lm->ndev < SL_LM_MAX_DEV_ALLOCS);
    if (count > SIZE_MAX / size)
        return sl_err_set(SL_ERR_NOMEM, "model: %s: size overflow", what);
    st = lm->be->ops->alloc(lm->be->ctx, p, count * size);
    if (st != SL_OK) /* say which keys make it that large */
        return sl_err_prefix(st, "model %s (sized by %s)", what,
                             strcmp(what, "parameters") == 0
                                 ? "data.vocab_size, model.embedding, model.layers"
                                 : "train.batch x train.bptt, model.embedding, model.layers, "
                                   "data.vocab_size");
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
        sl_lm_layer_t *ly = &lm->layer[l];
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
        sl_lm_layer_t *ly = &lm->layer[l];

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
    const char *w = "model";

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
                          "%s: model.output.samples %d must be in [1, %d) (the "
                          "vocabulary size: data.vocab_size and the special tokens)",
                          w, cfg->model.samples, vocab_size);
    if (shards < 1 || shards > vocab_size)
        return sl_err_set(SL_ERR_INVALID, "%s: sync.embedding_shards %d for %d rows", w, shards,
                          vocab_size);
    if (max_batch < 1 || cfg->train.bptt < 1 ||
        !fits_int((size_t)max_batch, (size_t)cfg->train.bptt))
        return sl_err_set(SL_ERR_INVALID, "%s: train.batch %d x train.bptt %d out of range", w,
                          max_batch, cfg->train.bptt);
    return SL_OK;
}

/* Device and host buffers for max_rows rows; every later step only reuses them. */
static sl_status_t
alloc_workspace(sl_lm_t *lm)
{
    size_t n = (size_t)lm->max_rows, mb = (size_t)lm->max_batch;
    size_t hmax = 0, dmax = (size_t)lm->E, ns = n + (size_t)lm->S, packed = 0;
    const sl_backend_ops_t *o = lm->be->ops;
    int rl = lm->layer[lm->L - 1].r;
    size_t logit_floats;

    lm->chunk = sl_lm_logit_chunk(lm->V, lm->max_rows, sl_backend_on_host(lm->be));
    for (int l = 0; l < lm->L; l++) {
        sl_lm_layer_t *ly = &lm->layer[l];
        size_t h = (size_t)ly->h, r = (size_t)ly->r;

        if (!fits_int(n, 4 * h) || !fits_int(n, r))
            return sl_err_set(SL_ERR_INVALID, "model: layer %d too large for %zu rows", l, n);
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
        if (o->gemm_packed) { /* W_hh, W_ih either way round, the inputs (N, in), (N, R) */
            size_t sizes[6] = {o->packed_floats(lm->be->ctx, ly->r, 4 * ly->h),
                               o->packed_floats(lm->be->ctx, 4 * ly->h, ly->r),
                               o->packed_floats(lm->be->ctx, ly->in, 4 * ly->h),
                               o->packed_floats(lm->be->ctx, 4 * ly->h, ly->in),
                               o->packed_floats(lm->be->ctx, lm->max_rows, ly->in),
                               o->packed_floats(lm->be->ctx, lm->max_rows, ly->r)};

            for (int i = 0; i < 6; i++)
                packed = sizes[i] > packed ? sizes[i] : packed;
        }
    }
    if (o->gemm_packed) { /* W_out either way round */
        size_t fwd = o->packed_floats(lm->be->ctx, rl, lm->V);
        size_t bwd = o->packed_floats(lm->be->ctx, lm->V, rl);

        if (lm->chunk < lm->max_rows) { /* several chunks: packed once for all of them */
            lm->nout_fwd = fwd;
            lm->nout_bwd = lm->sampled ? 0 : bwd; /* dtop of a full softmax's training */
            if (fwd > 0)
                SL_TRY(DEV_ALLOC(lm, &lm->packed_out, lm->nout_fwd + lm->nout_bwd,
                                 "packed output weights"));
        } else {
            packed = fwd > packed ? fwd : packed;
            packed = bwd > packed ? bwd : packed;
        }
    }
    if (packed > 0)
        SL_TRY(DEV_ALLOC(lm, &lm->packed, packed, "packed gemm operands"));
    lm->npacked = packed;
    for (int l = 0; l < lm->L && o->gemm_packed; l++) { /* W_proj either way round */
        const sl_lm_layer_t *ly = &lm->layer[l];
        size_t fwd = ly->p > 0 ? o->packed_floats(lm->be->ctx, ly->h, ly->p) : 0;
        size_t bwd = ly->p > 0 ? o->packed_floats(lm->be->ctx, ly->p, ly->h) : 0;

        lm->nproj = fwd > lm->nproj ? fwd : lm->nproj;
        lm->nproj = bwd > lm->nproj ? bwd : lm->nproj;
    }
    if (lm->nproj > 0)
        SL_TRY(DEV_ALLOC(lm, &lm->packed_proj, lm->nproj, "packed projection"));
    if (!fits_int(n, (size_t)lm->E) || !fits_int(n, dmax) || ns > INT_MAX)
        return sl_err_set(SL_ERR_INVALID, "model: %zu rows too many for these sizes", n);
    SL_TRY(DEV_ALLOC(lm, &lm->x0, n * (size_t)lm->E, "embedded input"));
    lm->nsym = (size_t)lm->V < n / 2 ? lm->V : (int)(n / 2);
    if (lm->nsym > 0) {
        SL_TRY(DEV_ALLOC(lm, &lm->sym, (size_t)lm->nsym * 4 * (size_t)lm->layer[0].h,
                         "input projection per id"));
        SL_TRY(DEV_ALLOC(lm, &lm->sym_in, (size_t)lm->nsym * (size_t)lm->E, "input rows per id"));
        SL_TRY(DEV_ALLOC(lm, &lm->d_slot_in, n, "input slots"));
        SL_TRY(DEV_ALLOC(lm, &lm->d_iota, n, "0, 1, 2, ..."));
    }
    SL_TRY(DEV_ALLOC(lm, &lm->dgates, n * 4 * hmax, "gate gradients"));
    SL_TRY(DEV_ALLOC(lm, &lm->dbuf[0], n * dmax, "output gradients"));
    SL_TRY(DEV_ALLOC(lm, &lm->dbuf[1], n * dmax, "input gradients"));
    SL_TRY(DEV_ALLOC(lm, &lm->dm, mb * hmax, "dm"));
    SL_TRY(DEV_ALLOC(lm, &lm->dc, mb * hmax, "dc"));

    logit_floats = (size_t)lm->chunk * (size_t)lm->V;
    if (lm->sampled) {
        if (!fits_int(n, (size_t)lm->S + 1) || !fits_int(ns, (size_t)rl))
            return sl_err_set(SL_ERR_INVALID,
                              "model: model.output.samples %d too many for %zu rows", lm->S, n);
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
    SL_TRY(SL_ALLOC(&lm->h_slot, n, "input slots"));
    if (lm->d_iota) {
        for (size_t i = 0; i < n; i++)
            lm->h_slot[i] = (int32_t)i;
        SL_TRY(o->to_device(lm->be->ctx, lm->d_iota, lm->h_slot, n * sizeof(int32_t)));
    }
    SL_TRY(SL_ALLOC(&lm->rows_in, n, "input rows"));
    SL_TRY(SL_ALLOC(&lm->off_in, n + 1, "input row offsets"));
    SL_TRY(SL_ALLOC(&lm->pos_in, n, "input row positions"));
    SL_TRY(SL_ALLOC(&lm->rows_out, (size_t)lm->V, "output rows"));
    SL_TRY(SL_ALLOC(&lm->spans, 2 * (n + (lm->sampled ? ns : 0) + 3), "gradient spans"));
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

/* V, E, the layers' sizes and the shard count: what layout() needs. */
static void
set_shape(sl_lm_t *lm, const sl_config_t *cfg, int vocab_size, int embedding_shards)
{
    lm->V = vocab_size;
    lm->E = cfg->model.embedding;
    lm->L = cfg->model.nlayers;
    lm->shards = embedding_shards;
    for (int l = 0; l < lm->L; l++) {
        sl_lm_layer_t *ly = &lm->layer[l];

        ly->in = l == 0 ? lm->E : lm->layer[l - 1].r;
        ly->h = cfg->model.layers[l].hidden;
        ly->p = cfg->model.layers[l].projection;
        ly->r = ly->p > 0 ? ly->p : ly->h;
    }
}

sl_status_t
sl_lm_layout(const sl_config_t *cfg, int vocab_size, int embedding_shards, sl_component_t *comp,
             int cap, int *ncomp, size_t *nparams)
{
    sl_lm_t lm;

    *ncomp = 0;
    *nparams = 0;
    SL_TRY(check_config(cfg, vocab_size, embedding_shards, cfg->train.batch));
    if (cap < 0 || (size_t)cap < SL_LM_MAX_COMPONENTS(embedding_shards))
        return sl_err_set(SL_ERR_INVALID, "model: room for %d components, need %zu", cap,
                          SL_LM_MAX_COMPONENTS(embedding_shards));
    memset(&lm, 0, sizeof lm);
    set_shape(&lm, cfg, vocab_size, embedding_shards);
    lm.comp = comp;
    layout(&lm);
    *ncomp = lm.ncomp;
    *nparams = lm.nparams;
    return SL_OK;
}

sl_status_t
sl_lm_lstm_layers_new(sl_lm_t *lm)
{
    const sl_backend_ops_t *o = lm->be->ops;

    for (int l = 0; l < lm->L; l++) {
        sl_lm_layer_t *ly = &lm->layer[l];
        sl_status_t rc;

        if (ly->dnn)
            continue;
        rc = o->lstm_layer_new(lm->be->ctx, &ly->dnn, ly->in, ly->h, ly->p, lm->max_bptt,
                               lm->max_batch);
        if (rc != SL_OK) {
            sl_lm_lstm_layers_free(lm);
            return sl_err_prefix(rc, "layer %d", l + 1);
        }
    }
    return SL_OK;
}

void
sl_lm_lstm_layers_free(sl_lm_t *lm)
{
    for (int l = 0; l < lm->L; l++) {
        if (lm->layer[l].dnn)
            lm->be->ops->lstm_layer_free(lm->be->ctx, lm->layer[l].dnn);
        lm->layer[l].dnn = NULL;
    }
    lm->lstm_cudnn = 0;
}

/* device_options.lstm, a GPU's setting: the CPU backend runs fused whatever it says
 * (so a GPU run's configuration evaluates on the CPU). On a device: fused; cudnn: the
 * backend's whole-layer op for every layer, made now, so that a module without it
 * (built without cuDNN) or a precision it refuses (bf16) is this call's one-line error;
 * auto: fused where the backend has no such op, else decided at the first training
 * step (sl_lm_step.c). */
static sl_status_t
lstm_setup(sl_lm_t *lm, const sl_config_t *cfg)
{
    const char *mode = cfg->device_options.lstm;
    sl_status_t rc;

    if (strcmp(mode, "fused") == 0 || sl_backend_on_host(lm->be))
        return SL_OK;
    if (!lm->be->ops->lstm_layer_new) {
        if (strcmp(mode, "cudnn") == 0)
            return sl_err_set(SL_ERR_UNSUPPORTED,
                              "device_options.lstm: cudnn: device %s has no cuDNN LSTM layers "
                              "(its shoal-cuda.so was built without cuDNN): use fused or auto",
                              lm->be->name);
        sl_log_debug("model", "device_options.lstm auto: fused (shoal-cuda.so has no cuDNN)");
        return SL_OK;
    }
    if (strcmp(mode, "cudnn") != 0) {
        lm->lstm_pending = 1;
        return SL_OK;
    }
    rc = sl_lm_lstm_layers_new(lm);
    if (rc != SL_OK)
        return sl_err_prefix(rc, "device_options.lstm: cudnn");
    lm->lstm_cudnn = 1;
    return SL_OK;
}

const char *
sl_lm_lstm_path(const sl_lm_t *lm)
{
    return lm->lstm_pending ? "auto" : lm->lstm_cudnn ? "cudnn" : "fused";
}

int
sl_lm_logit_rows(const sl_lm_t *lm)
{
    return lm->chunk;
}

int
sl_lm_logit_chunk(int V, int max_rows, int on_host)
{
    size_t rows = (on_host ? LOGIT_BUDGET : LOGIT_BUDGET_DEVICE) / (size_t)(V > 0 ? V : 1);

    if (on_host && rows < LOGIT_MIN_ROWS)
        rows = LOGIT_MIN_ROWS;
    if (rows > (size_t)max_rows)
        rows = (size_t)max_rows;
    return rows < 1 ? 1 : (int)rows;
}

/* Appends [off, off + count) to the n pairs at spans, joined to the last one when they
 * meet; returns the new n. */
static size_t
add_span(size_t *spans, size_t n, size_t off, size_t count)
{
    if (count == 0)
        return n;
    if (n > 0 && spans[2 * n - 2] + spans[2 * n - 1] == off) {
        spans[2 * n - 1] += count;
        return n;
    }
    spans[2 * n] = off;
    spans[2 * n + 1] = count;
    return n + 1;
}

/* Appends the rows (sorted, distinct) of the table at off whose rows are len floats. */
static size_t
add_rows(size_t *spans, size_t n, size_t off, size_t len, const int32_t *rows, int nrows)
{
    for (int r = 0; r < nrows; r++)
        n = add_span(spans, n, off + (size_t)rows[r] * len, len);
    return n;
}

/* The last train step's spans in lm->spans (sl_lm_grad_spans), built once a step (the
 * trainer asks for them, then the next step's clear); returns their number. */
static size_t
step_spans(sl_lm_t *lm)
{
    size_t E = (size_t)lm->E, R = (size_t)lm->layer[lm->L - 1].r, V = (size_t)lm->V;
    size_t n, pos = lm->emb + V * E;

    if (lm->nspans > 0)
        return lm->nspans;
    SL_ASSERT(pos <= lm->out); /* layout(): the input embedding first, W_out near the end */
    n = add_span(lm->spans, 0, 0, lm->emb);
    n = add_rows(lm->spans, n, lm->emb, E, lm->rows_in, lm->nrows_in);
    if (lm->sampled) { /* a full softmax writes every row of W_out */
        n = add_span(lm->spans, n, pos, lm->out - pos);
        n = add_rows(lm->spans, n, lm->out, R, lm->rows_out, lm->nrows_out);
        pos = lm->out + V * R;
    }
    lm->nspans = add_span(lm->spans, n, pos, lm->nparams - pos);
    return lm->nspans;
}

size_t
sl_lm_grad_spans(sl_lm_t *lm, const size_t **spans)
{
    SL_ASSERT(lm->stepped);
    *spans = NULL;
    if (!sl_backend_on_host(lm->be))
        return 0;
    *spans = lm->spans;
    return step_spans(lm);
}

void
sl_lm_clear_grads(sl_lm_t *lm)
{
    const sl_backend_ops_t *o = lm->be->ops;
    size_t n = lm->stepped && lm->grads_in_spans ? step_spans(lm) : 0;

    if (n == 0)
        o->zero(lm->be->ctx, lm->nparams, lm->grads);
    for (size_t i = 0; i < n; i++)
        o->zero(lm->be->ctx, lm->spans[2 * i + 1], lm->grads + lm->spans[2 * i]);
    lm->grads_in_spans = sl_backend_on_host(lm->be);
    lm->nspans = 0; /* the step about to run touches other rows */
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
    set_shape(lm, cfg, vocab_size, embedding_shards);
    lm->max_batch = max_batch;
    lm->max_bptt = cfg->train.bptt;
    lm->max_rows = max_batch * cfg->train.bptt;
    lm->sampled = cfg->model.output == SL_OUTPUT_SAMPLED;
    lm->S = lm->sampled ? cfg->model.samples : 0;
    lm->dropout = (float)cfg->model.dropout;
    lm->loss_scale = 1.0f;
    lm->init_range = cfg->model.init_range;
    SL_TRY_GOTO(SL_CALLOC(&lm->comp, SL_LM_MAX_COMPONENTS(embedding_shards), "components"), st,
                fail);
    layout(lm);
    SL_TRY_GOTO(DEV_ALLOC(lm, &lm->params, lm->nparams, "parameters"), st, fail);
    SL_TRY_GOTO(DEV_ALLOC(lm, &lm->grads, lm->nparams, "gradients"), st, fail);
    SL_TRY_GOTO(alloc_workspace(lm), st, fail);
    SL_TRY_GOTO(sl_lm_init_params(lm, cfg->run.seed), st, fail);
    SL_TRY_GOTO(lstm_setup(lm, cfg), st, fail);
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
    for (int l = 0; l < lm->L; l++) /* before the memory they use */
        for (int d = 0; d < 2; d++)
            if (lm->layer[l].loop[d].rec)
                lm->be->ops->record_free(lm->be->ctx, lm->layer[l].loop[d].rec);
    sl_lm_lstm_layers_free(lm);
    for (int i = 0; i < lm->ndev; i++)
        lm->be->ops->free(lm->be->ctx, lm->dev[i]);
    sl_sampler_fini(&lm->sampler);
    sl_free(lm->comp);
    sl_free(lm->h_out);
    sl_free(lm->h_logq);
    sl_free(lm->stamp);
    sl_free(lm->slot);
    sl_free(lm->h_slot);
    sl_free(lm->rows_in);
    sl_free(lm->off_in);
    sl_free(lm->pos_in);
    sl_free(lm->rows_out);
    sl_free(lm->spans);
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
    lm->grads_in_spans = 0; /* the caller may write anywhere */
    return lm->grads;
}

float *
sl_lm_grads_within_spans(sl_lm_t *lm)
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
        sl_lm_layer_t *ly = &lm->layer[l];
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
        return sl_err_set(SL_ERR_INVALID, "model state: batch %d outside [1, %d]", batch,
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
        return sl_err_prefix(rc, "model state");
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
