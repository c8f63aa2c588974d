/* The LSTM language model: embedding (V,E) -> LSTM/LSTMP layers -> dropout -> output
 * layer (V,R) + bias (V) with full or sampled softmax.
 *
 * Parameters live in one flat buffer (and gradients in a second of the same layout);
 * tensors and components are views (offset, count) into it. Components are the units
 * the sync algorithms exchange, each contiguous in the buffer so that a component (or
 * a row shard of an embedding) is exactly what goes into a frame:
 *   "embedding.<s>"  input embedding rows, S row shards (S = embedding_shards)
 *   "lstm.<l>"       W_ih (4H, in), W_hh (4H, R), b (4H) of layer l
 *   "proj.<l>"       W_proj (P, H) of layer l when it has a projection
 *   "softmax.<s>"    output embedding rows (V, R), S row shards
 *   "softmax_bias"   output bias (V)
 * where R is the layer's output size (P with a projection, else H).
 *
 * Forward/backward follow PyTorch's nn.LSTM exactly (gate order i,f,g,o; with proj_size
 * for LSTMP: r_t = W_proj m_t and the recurrence uses r), so a model can be compared with
 * a PyTorch one step for step. Differences, on purpose: one bias b (4H) per layer, which
 * is PyTorch's b_ih + b_hh merged (load their sum); every weight, LSTM ones included, is
 * initialised uniform(-init_range, init_range) (PyTorch uses +-1/sqrt(H) for LSTM
 * weights) and every bias zero. Dropout p = model.dropout sits where PyTorch's
 * word_language_model puts it: on the embedding output, between layers and on the last
 * layer's output; masks come from the step's dropout_key, the tensor and the element
 * index, so they are reproducible. */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"

typedef struct {
    char name[32];
    size_t offset;  /* first element in the flat buffer */
    size_t count;   /* elements */
    int sparse;     /* 1: rows of an embedding (exchanged by row), 0: dense */
    long row_begin; /* sparse: first vocabulary row of this shard */
    long rows;      /* sparse: rows in the shard; dense: 0 */
    int row_len;    /* sparse: elements per row */
} sl_component_t;

typedef struct sl_lm sl_lm_t;
typedef struct sl_lm_state sl_lm_state_t;

/* Builds the model for a vocabulary of vocab_size on backend be (borrowed; must
 * outlive the model); parameters initialised uniform(-init_range, init_range) from a
 * counter RNG keyed by cfg->run.seed, so every node and every backend starts identical.
 * embedding_shards: row shards per embedding (1 = whole; shard sizes differ by at most
 * one row). max_batch: the largest number of streams forward will see (train batch or
 * eval batch); cfg->train.bptt is the largest T a step accepts. All buffers are sized
 * here, so steps allocate nothing. cfg is only read during the call. SL_ERR_INVALID for
 * sizes out of range (sampled softmax needs 1 <= samples < vocab_size), SL_ERR_NOMEM. */
sl_status_t sl_lm_new(sl_lm_t **out, const sl_config_t *cfg, int vocab_size, int embedding_shards,
                      int max_batch, sl_backend_t *be);
void sl_lm_destroy(sl_lm_t **lm);

/* The most components a model with embedding_shards row shards per embedding has:
 * S + S shards, a layer and a projection for each of SL_MAX_LAYERS layers, the bias. */
#define SL_LM_MAX_COMPONENTS(embedding_shards)                                                     \
    (2 * (size_t)(embedding_shards) + 2 * (size_t)SL_MAX_LAYERS + 1)
/* The components (offsets, counts, row shards) and the parameter count sl_lm_new would
 * lay out for cfg and vocab_size, without allocating or initialising anything: for tools
 * that only need sizes (shoal-scale). comp (caller's) has cap entries, at least
 * SL_LM_MAX_COMPONENTS(embedding_shards). SL_ERR_INVALID as sl_lm_new for sizes out of
 * range, or for cap too small. */
sl_status_t sl_lm_layout(const sl_config_t *cfg, int vocab_size, int embedding_shards,
                         sl_component_t *comp, int cap, int *ncomp, size_t *nparams);

size_t sl_lm_nparams(const sl_lm_t *lm);
float *sl_lm_params(sl_lm_t *lm); /* backend memory, nparams floats */
float *sl_lm_grads(sl_lm_t *lm);  /* same layout */
/* The gradient, for a caller that writes it only within sl_lm_grad_spans' spans or
 * scales it by a finite factor: the next train step then zeroes those spans alone, not
 * every parameter (sl_lm_grads, for any other use, makes it zero all). */
float *sl_lm_grads_within_spans(sl_lm_t *lm);
int sl_lm_ncomponents(const sl_lm_t *lm);
const sl_component_t *sl_lm_component(const sl_lm_t *lm, int i);
/* Deterministic re-initialisation (same result as at sl_lm_new with cfg->run.seed ==
 * seed): every element is a function of (seed, tensor, element index) only, so shards
 * and backends do not change it. SL_ERR_DEVICE if the upload fails. */
sl_status_t sl_lm_init_params(sl_lm_t *lm, uint64_t seed);

/* Recurrent state (h, c of every layer) for `batch` streams (1..max_batch); carried
 * across the batches of an epoch, zeroed at its start (new states start zeroed).
 * Stored in host-visible form for checkpoints via sl_lm_state_{size,save,load}
 * (floats; per layer, bottom first: h (batch, R) = the layer output r, then
 * c (batch, H)). A state belongs to the model that made it and must be destroyed
 * before the backend. */
sl_status_t sl_lm_state_new(sl_lm_t *lm, int batch, sl_lm_state_t **out);
void sl_lm_state_destroy(sl_lm_state_t **st);
void sl_lm_state_reset(sl_lm_state_t *st);
size_t sl_lm_state_size(const sl_lm_state_t *st);
sl_status_t sl_lm_state_save(const sl_lm_state_t *st, float *host);
sl_status_t sl_lm_state_load(sl_lm_state_t *st, const float *host);

/* Randomness of one training step: dropout masks and sampled-softmax negatives. */
typedef struct {
    uint64_t dropout_key; /* per step (and node) */
    uint64_t sample_key;  /* per step and seed group: nodes of a group share negatives */
} sl_step_keys_t;

/* One training step's forward and backward on x, y (T*B time-major, B = the state's
 * batch): zeroes and fills the gradients of the mean loss over T*B tokens, advances
 * the state, returns the summed loss (nats) in *loss_sum. Sampled or full softmax as
 * configured. Also records the embedding rows touched (see sl_lm_touched_rows).
 * x, y, keys are host memory. SL_ERR_INVALID when bptt is outside [1, train.bptt], an
 * id is outside [0, V), or st belongs to another model; nothing is changed then. With
 * device_options.lstm auto on a backend that has both LSTM paths, the first call first
 * times a few windows of each on these x, y (the state restored after each) and logs
 * one line with both times and the choice. */
sl_status_t sl_lm_train_step(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, const int32_t *y,
                             int bptt, const sl_step_keys_t *keys, double *loss_sum);
/* Forward only, full softmax, no dropout: summed loss of T*B tokens; advances state. */
sl_status_t sl_lm_eval_batch(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, const int32_t *y,
                             int bptt, double *loss_sum);

/* Forward one step, no dropout: feeds x (B ids, B = the state's batch, host memory),
 * advances the state and writes the output layer's logits (B, V) to host memory
 * (caller's): log-probabilities of the next token up to a constant. SL_ERR_INVALID as
 * sl_lm_eval_batch for an id outside [0, V); SL_ERR_DEVICE when a copy fails. */
sl_status_t sl_lm_next_logits(sl_lm_t *lm, sl_lm_state_t *st, const int32_t *x, float *logits);

/* Mixed precision: the gradient of the loss is multiplied by scale before backward, so
 * every parameter gradient comes out multiplied by it (the caller divides and checks for
 * overflow). 1 = off, the default. The loss returned by sl_lm_train_step stays unscaled.
 * scale must be > 0 (asserted: it is the trainer's own value, not input). */
void sl_lm_set_loss_scale(sl_lm_t *lm, float scale);

/* Distinct input-embedding rows (output == 0) / output-embedding rows (output != 0)
 * touched by the last train step, sorted ascending (borrowed host memory, valid until
 * the next train step; count 0 before the first). Output rows are the targets and the
 * negatives with sampled softmax, all V rows with full softmax. Only these rows of the
 * embedding / softmax gradients can be nonzero. */
const int32_t *sl_lm_touched_rows(const sl_lm_t *lm, int output, int *count);

/* The path the LSTM layers run (device_options.lstm): "cudnn" (the backend's whole-layer
 * op, cuDNN's RNN API), "fused" (per-step gemms and the fused cell), or "auto" while
 * auto has not yet timed the two (at the first training step; until then evaluation
 * runs fused). */
const char *sl_lm_lstm_path(const sl_lm_t *lm);

/* Rows of the full softmax's logits computed at a time (the output layer's chunk): a
 * fixed budget of floats over the vocabulary, at least LOGIT_MIN_ROWS on the CPU
 * (sl_model.c), at most the rows of a window. */
int sl_lm_logit_rows(const sl_lm_t *lm);
/* The rows a model of V words takes per chunk with windows of max_rows rows, on the host
 * (on_host) or on a device (bench/bench_logit_chunks sweeps the alternatives). */
int sl_lm_logit_chunk(int V, int max_rows, int on_host);

/* Where the last train step may have left its gradient nonzero, as (offset, count) pairs
 * in ascending order, joined where they meet (borrowed, valid until the next train
 * step): every parameter but the input embedding's rows and, with a sampled softmax,
 * the output embedding's, and of those tables the rows the step touched
 * (sl_lm_touched_rows). Everything else the step left zero. Returns the pairs; only
 * after a train step (asserted). On a device, where a kernel per row would cost more
 * than it saves: 0 and NULL, for all of it. */
size_t sl_lm_grad_spans(sl_lm_t *lm, const size_t **spans);

#endif
