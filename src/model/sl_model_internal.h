/* Internals of src/model's language model shared by its two files: the model and
 * state structs. Private to src/model: nothing outside it includes this header; callers
 * use the opaque sl_lm_t / sl_lm_state_t of model/sl_model.h.
 *   sl_model.c    parameter layout and components, allocation of the parameters and the
 *                 device workspace, initialisation, the recurrent state
 *   sl_lm_step.c  the step: unique rows, forward, full or sampled output layer,
 *                 backward, train step, eval batch, touched rows
 *
 * Symbols: V vocabulary, E embedding, H cell, P projection, R layer output (P or H),
 * T steps, B streams, N = T*B rows (time-major: row t*B + b), S negatives. */
#ifndef SL_MODEL_INTERNAL_H
#define SL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_sampler.h"

/* Device allocations one model may hold (sl_lm_destroy frees them all). */
#define SL_LM_MAX_DEV_ALLOCS (32 + 8 * SL_MAX_LAYERS)

/* A recurrent loop's recording by the backend (sl_lm_step.c, loop_replayed): the window
 * it is for (T, B and the W_hh and W_proj copies the products read) and the recording,
 * NULL until the second window of that shape. */
typedef struct {
    int T, B;
    const float *whh, *proj;
    void *rec;
} sl_lm_loop_t;

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
    /* the recordings of the forward and the backward recurrent loop */
    sl_lm_loop_t loop[2];
    void *dnn; /* the backend's whole-layer op (lstm_layer_new), while the model
                  runs the cudnn path or is about to time it; else NULL */
} sl_lm_layer_t;

struct sl_lm {
    sl_backend_t *be;
    int V, E, L, shards;
    int max_batch, max_bptt, max_rows; /* max_rows = max_batch * max_bptt */
    int sampled, S;
    float dropout;
    float loss_scale; /* multiplies d loss / d logits (mixed precision); 1 = off */
    double init_range;
    sl_lm_layer_t layer[SL_MAX_LAYERS];
    size_t emb;   /* offset of the input embedding (V, E) */
    size_t out;   /* offset of the output embedding W_out (V, R_L) */
    size_t out_b; /* offset of the output bias (V) */
    size_t nparams;
    float *params, *grads;
    sl_component_t *comp;
    int ncomp;
    /* device_options.lstm: the layers run the backend's whole-layer op (lstm_cudnn, the
       cudnn path) or the per-step gemms and fused cell; lstm_pending: auto, decided by
       timing both at the first training step (sl_lm_step.c) */
    int lstm_cudnn, lstm_pending;

    /* device workspace */
    float *x0;         /* (N, E) embedded input, dropout applied */
    const float *top;  /* (N, R_L) input of the output layer (last r or its dropout) */
    float *dgates;     /* (N, 4 Hmax) */
    float *dbuf[2];    /* (N, max(E, Rmax)) gradients w.r.t. layer outputs / inputs */
    float *dm, *dc;    /* (max_batch, Hmax) */
    float *packed;     /* (npacked) one operand packed by pack_b for gemm_packed: a layer's
                          W_hh either way round, or a weight gradient's input (sl_lm_step.c);
                          NULL where the backend has no gemm_packed */
    size_t npacked;    /* floats */
    float *packed_out; /* where a window's output layer runs in several chunks (chunk <
                          max_rows): W_out^T (nout_fwd floats) then W_out (nout_bwd, 0 for
                          a sampled softmax) packed once for all chunks; else NULL, and
                          W_out goes through packed */
    size_t nout_fwd, nout_bwd;
    float *packed_proj; /* (nproj) a layer's W_proj packed for the projections of the
                         recurrent loops, either way round; NULL where not packed */
    size_t nproj;       /* floats */
    float *sym;         /* (nsym, 4 H_0) layer 0's input projection per distinct input id
                           of a training window, forward, and its gate gradients summed per
                           id, backward (sl_lm_step.c, per_symbol) */
    float *sym_in;      /* (nsym, E) their embedding rows, then those rows' gradients */
    int nsym;           /* min(V, max_rows / 2): distinct ids at most where it pays */
    int32_t *d_slot_in; /* (N) each position's index in the unique input rows */
    int32_t *d_iota;    /* (max_rows) 0, 1, 2, ...: unit offsets and positions */
    float *logits;      /* (chunk, V) full softmax, or (N, 1+S) sampled */
    int chunk;          /* rows of a full-softmax chunk */
    float *ones;        /* (max_rows) all 1: rank-1 gemms for biases and columns */
    float *wg;          /* sampled: (N+S, R_L) gathered W_out rows, targets then negatives;
                           reused for their gradients */
    float *bg, *dbg;    /* sampled: (N+S) gathered output biases and their gradients */
    float *logq;        /* sampled: (N+S) log expected counts, targets then negatives */
    int32_t *d_x;       /* (N) input ids */
    int32_t *d_out;     /* (N+S) targets, then the negatives */
    int32_t *d_rows_in, *d_off_in, *d_pos_in;    /* unique input rows, offsets, positions */
    int32_t *d_rows_out, *d_off_out, *d_pos_out; /* same for output rows (sampled) */
    void *dev[SL_LM_MAX_DEV_ALLOCS];
    int ndev;

    /* host */
    int32_t *h_out;  /* (N+S) targets then negatives */
    float *h_logq;   /* (N+S) */
    uint32_t *stamp; /* (V) generation marks for unique ids */
    int32_t *slot;   /* (V) index of a row in the current unique list */
    int32_t *h_slot; /* (max_rows) slot of each position's id, for d_slot_in */
    uint32_t gen;
    int32_t *rows_in, *off_in, *pos_in; /* (min(N,V)), (+1), (N) */
    int nrows_in;
    int32_t *rows_out, *off_out, *pos_out; /* (V), (V+1), (N+S) */
    int nrows_out;
    int stepped; /* a train step has run: touched rows are valid */
    /* the gradient is zero outside that step's spans: a host step's, not handed out
     * since through sl_lm_grads (sl_lm_clear_grads then zeroes the spans alone) */
    int grads_in_spans;
    size_t *spans; /* (2 (max_rows + N + S + 3)) sl_lm_grad_spans' (offset, count) pairs */
    size_t nspans; /* of them; 0 until built for the last step */
    sl_sampler_t sampler;
    float *stage; /* (INIT_CHUNK, sl_model.c) host staging for initialisation */
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

/* sl_model.c: zeroes the gradient before a train step: the last step's spans where
 * nothing else can have written outside them (grads_in_spans), else all of it. */
void sl_lm_clear_grads(sl_lm_t *lm);
/* sl_model.c: the backend's whole-layer LSTM op for every layer (ly->dnn), and their
 * release (the model then runs the fused path). */
sl_status_t sl_lm_lstm_layers_new(sl_lm_t *lm);
void sl_lm_lstm_layers_free(sl_lm_t *lm);

#endif /* SL_MODEL_INTERNAL_H */
