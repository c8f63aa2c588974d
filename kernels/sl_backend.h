/* The compute backend interface: a table of operations plus a context. All pointers
 * are device pointers of that backend (host memory for cpu). Matrices are row-major;
 * shapes are given in comments as (rows, cols). Operations are synchronous on the
 * calling thread for cpu; a device backend queues them on one stream in call order, and
 * the ops that return a value to the host (sync, to_host, sumsq, the softmax losses)
 * wait for what is queued. An op without a status that fails records its first failure
 * in the backend (sumsq and the softmax losses then give NaN); the next op with a status
 * (alloc, to_device, to_host, host_alloc, sync, set_precision) returns it with its
 * message and clears it: SL_ERR_DEVICE for CUDA/cuBLAS failures, SL_ERR_INVALID for bad
 * arguments.
 *
 * Only kernels/sl_backend.c (the registry) knows which backends exist. */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"

typedef struct sl_backend_ops sl_backend_ops_t;

/* Floats of a block of sumsq_blocks (64 kB). */
enum { SL_SUMSQ_BLOCK = 1024 };

/* Precision of gemm inputs: fp32, or rounded to bf16 / fp16 (nearest even) with fp32
 * accumulation and fp32 output. Also the 16-bit formats of to_half / from_half. */
typedef enum { SL_PREC_FP32, SL_PREC_BF16, SL_PREC_FP16 } sl_precision_t;

typedef struct {
    const sl_backend_ops_t *ops;
    void *ctx;
    const char *name; /* "cpu", "cuda:0" */
} sl_backend_t;

struct sl_backend_ops {
    void (*destroy)(void *ctx);
    /* Threads for BLAS and fused loops (cpu); ignored by device backends. */
    void (*set_threads)(void *ctx, int threads);
    /* Human-readable description of the math libraries in use ("OpenBLAS 0.3.21 ..."). */
    const char *(*describe)(void *ctx);

    sl_status_t (*alloc)(void *ctx, void **ptr, size_t bytes); /* zeroed */
    void (*free)(void *ctx, void *ptr);
    sl_status_t (*to_device)(void *ctx, void *dst, const void *host_src, size_t bytes);
    sl_status_t (*to_host)(void *ctx, void *host_dst, const void *src, size_t bytes);
    /* Host memory for staging copies to and from this backend: *ptr gets bytes (at least
     * 1) of zeroed memory the caller reads and writes directly and passes to to_device /
     * to_host. Page-locked where the backend has such memory (cuda: cudaMallocHost, so
     * copies run at full bandwidth and may later run asynchronously on a stream of
     * their own); ordinary SL_ALIGN-aligned memory on cpu. Never a device pointer: it
     * must not go to any other op. *ptr is NULL on failure: SL_ERR_NOMEM, or
     * SL_ERR_DEVICE for a CUDA failure (message set). Page-locked memory is scarce:
     * allocate it at start-up, sized from the config, never in a hot loop. */
    sl_status_t (*host_alloc)(void *ctx, void **ptr, size_t bytes);
    /* Frees what host_alloc of the same backend gave (NULL accepted), after the copies
     * queued with it have finished; before the backend is destroyed. */
    void (*host_free)(void *ctx, void *ptr);
    sl_status_t (*sync)(void *ctx);
    /* Precision of gemm's inputs from now on (fp32 at creation): bf16 / fp16 round A and B
     * to that format (nearest even) and multiply with fp32 accumulation into fp32 C (tensor
     * cores on CUDA). Every other op stays fp32. SL_ERR_UNSUPPORTED (with a message) when
     * the backend cannot: cpu is fp32 only. */
    sl_status_t (*set_precision)(void *ctx, sl_precision_t p);

    /* C (m,n) = alpha * op(A) op(B) + beta * C; op(A) is (m,k), op(B) is (k,n).
     * trans_a / trans_b nonzero mean A / B are stored transposed. lda/ldb/ldc are
     * row strides in elements, as in cblas row-major. */
    void (*gemm)(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* Optional (NULL where a backend has none: use gemm): products with a B that stays
     * the same over many calls, the recurrent W_hh over a BPTT window, or one that is
     * used once but whose packing pays, a weight gradient's. packed_floats is the size
     * in floats of op(B)'s packed copy for a (k,n) op(B) at the backend's precision of
     * the moment; 0 when k or n is 0, or when packing gains nothing at that precision
     * (cuda in fp32: cuBLAS reads B in place; in bf16 / fp16 the copy is B rounded once
     * instead of at every product), and then the caller uses gemm. pack_b
     * writes it into packed (memory from alloc), op(B) as in gemm; gemm_packed then
     * computes C (m,n) = op(A) op(B) + beta C from it, op(A) and lda as in gemm, beta 0
     * (C is not read) or 1, ldc >= n. The layout is the backend's own; the copy is valid
     * until B changes. */
    size_t (*packed_floats)(void *ctx, int k, int n);
    void (*pack_b)(void *ctx, int trans_b, int k, int n, const float *b, int ldb, float *packed);
    void (*gemm_packed)(void *ctx, int trans_a, int m, int n, int k, const float *a, int lda,
                        const float *packed, float beta, float *c, int ldc);

    /* Optional (NULL where a backend has none, cpu: the ops always run one by one): a
     * sequence of ops recorded once and then replayed as one launch (CUDA graphs), for
     * the recurrent loops, whose small ops each cost more to launch than to run.
     * record_begin: the ops called from now until record_end are recorded, not run; they
     * must be ops without a status and without a value for the host (gemm, gemm_packed,
     * the cell, add_bias, copy, zero, axpy), on memory that stays allocated while the
     * recording lives. record_end: ends it and runs it once; *rec gets the recording, or
     * NULL when it failed (then nothing ran, and the failure is recorded in the backend
     * as any op's). replay(rec): runs the same ops with the same pointers and arguments
     * again, on what the memory holds then, and returns 1; returns 0 and runs nothing
     * when the recording no longer applies (the precision or the backend's own scratch
     * memory changed since): free it and record again. record_free accepts NULL. A
     * backend may decline to record (SHOAL_CUDA_GRAPHS=0): record_begin then returns 0,
     * the ops run as usual, and no record_end follows; else it returns 1. */
    int (*record_begin)(void *ctx);
    void (*record_end)(void *ctx, void **rec);
    int (*replay)(void *ctx, void *rec);
    void (*record_free)(void *ctx, void *rec);

    /* y += alpha * x;  x *= alpha;  dst = src;  x = 0 (n elements each). */
    void (*axpy)(void *ctx, size_t n, float alpha, const float *x, float *y);
    void (*scale)(void *ctx, size_t n, float alpha, float *x);
    void (*copy)(void *ctx, size_t n, const float *src, float *dst);
    void (*zero)(void *ctx, size_t n, float *x);
    /* Sum of squares in double (for global-norm clipping). */
    double (*sumsq)(void *ctx, size_t n, const float *x);
    /* The sums of squares in double of the blocks of SL_SUMSQ_BLOCK floats of x (n
     * floats, the last block the shorter) numbered in blocks (nblocks): out[i] that of
     * block blocks[i], each alone, so that out added in order gives the same bits
     * whichever other blocks were summed, on any number of threads. NULL where the
     * backend has none (CUDA: callers use sumsq). */
    void (*sumsq_blocks)(void *ctx, size_t n, const float *x, const size_t *blocks, size_t nblocks,
                         double *out);

    /* 16-bit conversion with a scale (fmt SL_PREC_BF16 or SL_PREC_FP16, both buffers of
     * this backend): dst[i] = half(src[i] * scale), rounded to nearest even, overflow to
     * +-inf (fp16 above 65504), NaN kept; from_half: dst[i] = float(src[i]) * inv_scale. */
    void (*to_half)(void *ctx, size_t n, sl_precision_t fmt, float scale, const float *src,
                    uint16_t *dst);
    void (*from_half)(void *ctx, size_t n, sl_precision_t fmt, float inv_scale, const uint16_t *src,
                      float *dst);

    /* x (rows, cols) += bias (cols) on every row. */
    void (*add_bias)(void *ctx, int rows, int cols, const float *bias, float *x);
    /* db (cols) += sum over rows of dx (rows, cols). */
    void (*bias_grad)(void *ctx, int rows, int cols, const float *dx, float *db);

    /* LSTM cell, gates fused, gate order i, f, g, o (PyTorch's). For a batch of b rows:
     *   gates (b, 4h) on entry holds the pre-activations x W_ih^T + r W_hh^T + bias;
     *   on return it holds the activations (sigmoid i, f, o; tanh g), kept for backward.
     *   c_prev (b, h) -> c (b, h) = f*c_prev + i*g;  m (b, h) = o * tanh(c).
     * m is the cell output (before any projection). */
    void (*lstm_cell_forward)(void *ctx, int b, int h, float *gates, const float *c_prev, float *c,
                              float *m);
    /* Backward of the cell for one time step. Given dm (b,h) and dc (b,h) (gradient
     * flowing into c from step t+1; updated in place to the gradient w.r.t. c_prev),
     * gates (activations from forward), c_prev and c: writes dgates (b,4h), the
     * gradient w.r.t. the pre-activations. dgates may alias nothing else. */
    void (*lstm_cell_backward)(void *ctx, int b, int h, const float *gates, const float *c_prev,
                               const float *c, const float *dm, float *dc, float *dgates);

    /* Optional (NULL where a backend has none: cpu, and cuda built without cuDNN; the
     * model then runs the cell above step by step): a whole LSTM(P) layer over a window
     * in one library call (cuDNN's RNN API), the same function as the model's per-cell
     * path within fp32 rounding. lstm_layer_new: a layer of input size in, cell H, projection
     * P (0 = none) for windows of up to max_t steps of max_b streams; SL_ERR_UNSUPPORTED
     * (message set) where it cannot run them (a precision other than fp32, P > H), SL_ERR_DEVICE
     * for a library failure. lstm_layer_free accepts NULL.
     * lstm_layer_forward: x (T*B, in) time-major (row t*B + b), the model's weights w_ih
     * (4H, in), w_hh (4H, R), b (4H) (gate order i, f, g, o), w_proj (P, H) or NULL, the
     * state h0 (B, R), c0 (B, H) -> y (T*B, R), the last step's h_t (B, R) and c_t (B, H).
     * train: keep what backward needs in the layer, until its next forward.
     * lstm_layer_backward, after a train forward of the same T, B, x, h0, c0, y and weights:
     * dy (T*B, R) -> dx (T*B, in) (written), the weight gradients added into dw_ih, dw_hh,
     * db, dw_proj (NULL without projection). The gradient into h0 and c0 is not
     * computed (truncated BPTT). They fail as any op does (recorded in the backend),
     * and are never recorded (record_begin). */
    sl_status_t (*lstm_layer_new)(void *ctx, void **layer, int in, int h, int p, int max_t,
                                  int max_b);
    void (*lstm_layer_free)(void *ctx, void *layer);
    void (*lstm_layer_forward)(void *ctx, void *layer, int train, int t, int b, const float *x,
                               const float *w_ih, const float *w_hh, const float *bias,
                               const float *w_proj, const float *h0, const float *c0, float *y,
                               float *h_t, float *c_t);
    void (*lstm_layer_backward)(void *ctx, void *layer, int t, int b, const float *x,
                                const float *h0, const float *c0, const float *y, const float *dy,
                                float *dx, float *dw_ih, float *dw_hh, float *db, float *dw_proj);

    /* out (n, d) row i = table row ids[i]. */
    void (*embedding_gather)(void *ctx, int n, int d, const float *table, const int32_t *ids,
                             float *out);
    /* Scatter-add over unique rows, so no atomics and no serialisation on frequent
     * words: for u = 0..nrows-1, grad row rows[u] += sum of src rows pos[off[u]..off[u+1]).
     * rows are distinct; off has nrows+1 entries; src is (n, d). */
    void (*embedding_scatter_add)(void *ctx, int nrows, int d, const int32_t *rows,
                                  const int32_t *off, const int32_t *pos, const float *src,
                                  float *grad);

    /* Full softmax cross-entropy over logits (n, v) with row stride ld, bias (v, or NULL)
     * first added to every row in place (the output layer's bias: one pass over rows the
     * op reads anyway, not a pass of add_bias over the whole block). Returns the sum of
     * -log p(target) over the n rows in *loss_sum. If grad_scale != 0 the logits are
     * replaced by grad_scale * (softmax - onehot(target)); otherwise left with the bias
     * added. */
    void (*softmax_xent)(void *ctx, int n, int v, float *logits, int ld, const float *bias,
                         const int32_t *targets, float grad_scale, double *loss_sum);

    /* Sampled softmax cross-entropy. logits (n, 1+s): column 0 is each row's true-class
     * logit, columns 1..s the shared negatives samples[0..s). In place: subtract logq
     * (logq_true[i] for column 0, logq_samp[j] for column 1+j; log of expected counts),
     * mask accidental hits (samples[j] == targets[i] -> logit -inf), softmax with label 0.
     * Loss sum into *loss_sum; if grad_scale != 0 logits become grad_scale * d loss/d logit
     * (of the raw logits; masked entries get 0). */
    void (*sampled_softmax_xent)(void *ctx, int n, int s, float *logits, const int32_t *targets,
                                 const int32_t *samples, const float *logq_true,
                                 const float *logq_samp, float grad_scale, double *loss_sum);

    /* Inverted dropout, deterministic: element i is kept when sl_rng_float_at(key, i) >= p,
     * kept values scaled by 1/(1-p), dropped set to 0. The same (key, n, p) on backward
     * applies the same mask to the gradient. */
    void (*dropout)(void *ctx, size_t n, float p, uint64_t key, float *x);

    /* Optimizer updates, element-wise over n parameters, g the gradient.
     * sgd:     w -= lr * g
     * adagrad: acc += g^2;  w -= lr * g / (sqrt(acc) + eps)
     * adam:    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *          w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps), t >= 1 (PyTorch's). */
    void (*sgd_update)(void *ctx, size_t n, float lr, const float *g, float *w);
    void (*adagrad_update)(void *ctx, size_t n, float lr, float eps, const float *g, float *acc,
                           float *w);
    void (*adam_update)(void *ctx, size_t n, float lr, float b1, float b2, float eps, long t,
                        const float *g, float *m, float *v, float *w);
};

/* Creates a backend by name: "cpu" (always), "cuda", "cuda:N" (when built with CUDA,
 * from the CUDA module, loaded then: kernels/sl_cuda_loader.h). SL_ERR_UNSUPPORTED with
 * a message saying how to get it otherwise; SL_ERR_DEVICE when the module or the GPU
 * is missing. Destroy with sl_backend_destroy, which accepts NULL and NULLs the
 * pointer. */
sl_status_t sl_backend_new(sl_backend_t **out, const char *name, int threads);
void sl_backend_destroy(sl_backend_t **b);

/* One line on the CUDA backend for shoal --version into buf: the module's path and GPU
 * code, or why there is none. Needs no GPU. */
void sl_backend_cuda_describe(char *buf, size_t size);

/* 1 where be computes in host memory (cpu), 0 for a device's (cuda): what a caller
 * decides by it is whether its buffers need a host copy, and how much memory it may
 * take (a device's is ample next to a window's logits). */
int sl_backend_on_host(const sl_backend_t *be);

/* be's host_alloc / host_free (above): *ptr gets zeroed staging memory of bytes; free
 * with sl_backend_host_free, which accepts a NULL *ptr and sets *ptr to NULL. */
sl_status_t sl_backend_host_alloc(sl_backend_t *be, void **ptr, size_t bytes);
void sl_backend_host_free(sl_backend_t *be, void **ptr);

/* The CPU backend, for tests that compare against it; its loops are the build that
 * kernels/cpu/sl_cpu_isa.h's sl_cpu_isa_pick(isa, ...) chooses (isa NULL: SHOAL_CPU_ISA,
 * else the highest level this CPU runs), and an isa it refuses is this call's error. */
sl_status_t sl_backend_cpu_new(sl_backend_t **out, int threads);
sl_status_t sl_backend_cpu_new_isa(sl_backend_t **out, int threads, const char *isa);

#endif
