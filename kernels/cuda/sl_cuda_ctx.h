/* Internal to kernels/cuda/: the CUDA backend's context, shared by sl_cuda.cu (context,
 * memory, cuBLAS) and sl_cuda_kernels.cu (the fused kernels), the error recording that
 * turns CUDA failures into statuses, and the ops each file implements. C++ (nvcc). */
#ifndef SL_CUDA_CTX_H
#define SL_CUDA_CTX_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "common/sl_status.h"
#include "kernels/sl_backend.h"
}

enum {
    SL_CUDA_THREADS = 256,    /* block size of the element-wise and row kernels */
    SL_CUDA_MAX_BLOCKS = 1024 /* grid cap of the kernels that reduce (one partial each) */
};

/* What a reduction brings back to the host in one copy. */
typedef struct {
    double sum; /* loss or sum of squares */
    int bad;    /* softmax_xent: 1 + the first row whose target is outside [0, v) */
} sl_cuda_result_t;

typedef struct {
    int device;
    char name[24]; /* "cuda:N", the backend's name */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws; /* cuBLAS's workspace (BLAS_WORKSPACE bytes) */
    sl_precision_t prec;
    void *half_buf; /* gemm operands rounded to 16 bits, grown on demand */
    size_t half_bytes;
    unsigned scratch_gen; /* bumped when half_buf moves: recordings that use it go stale */
    int graphs;           /* record_begin records (SHOAL_CUDA_GRAPHS is not 0) */
    int recording;        /* between record_begin and record_end */
    float *ones;          /* (ones_n) all 1, for bias_grad's gemv, grown on demand */
    size_t ones_n;
    double *partial;            /* (SL_CUDA_MAX_BLOCKS) per-block sums of the reductions */
    sl_cuda_result_t *d_result; /* device side of a reduction's result */
    sl_cuda_result_t *h_result; /* pinned host copy */
    void *dnn;                  /* cudnnHandle_t on stream, made by the first lstm_layer_new
                                   (sl_cuda_rnn.cu, HAVE_CUDNN); NULL until then */
    sl_status_t err;            /* first failure of an op that returns no status; SL_OK if none */
    char err_msg[384];
    char desc[384]; /* describe() */
} sl_cuda_t;

/* Records the failure of an op that returns no status; the first one is kept until an
 * op with a status returns it (sl_cuda_take_error). Messages start "cuda:N: op: ". */
void sl_cuda_fail(sl_cuda_t *cu, sl_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 1 if e is cudaSuccess, else records "cuda:N: what: <CUDA error>" and returns 0. */
int sl_cuda_check(sl_cuda_t *cu, cudaError_t e, const char *what);
/* In a function returning sl_status_t: a failing CUDA call returns its status. */
#define SL_CUDA_TRY(cu, expr, what)                                                                \
    do {                                                                                           \
        if (!sl_cuda_check((cu), (expr), (what)))                                                  \
            return sl_cuda_take_error(cu);                                                         \
    } while (0)
/* After a kernel launch: cudaGetLastError through sl_cuda_check. */
int sl_cuda_launched(sl_cuda_t *cu, const char *what);
/* Makes cu's device current for the calling thread (a thread starts on device 0). */
int sl_cuda_enter(sl_cuda_t *cu, const char *what);
/* The recorded failure as a status (with its message set for this thread), clearing
 * it; SL_OK when there is none. */
sl_status_t sl_cuda_take_error(sl_cuda_t *cu);
/* Blocks for a grid-stride loop over n items: at most cap, at least 1. */
int sl_cuda_blocks(size_t n, int cap);
/* Adds partial[0..nparts) in a fixed order on the device, brings the sum (and the
 * bad-row flag) back, waiting for the stream. 0 on failure (recorded). */
int sl_cuda_finish_sum(sl_cuda_t *cu, int nparts, sl_cuda_result_t *out, const char *what);

/* Launch helpers of the kernel files. Element-wise grids: a grid-stride loop
 * (FOR_EACH) covers what 65535 blocks of SL_CUDA_THREADS do not. */
#define NT SL_CUDA_THREADS
static inline int
grid_for(size_t n)
{
    return sl_cuda_blocks(n, 65535);
}
/* Grid-stride index over [0, n) in size_t. */
#define FOR_EACH(i, n)                                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)blockDim.x * gridDim.x)

/* The ops in sl_cuda_kernels.cu, same contracts as sl_backend.h. */
void sl_cuda_axpy(void *ctx, size_t n, float alpha, const float *x, float *y);
void sl_cuda_scale(void *ctx, size_t n, float alpha, float *x);
double sl_cuda_sumsq(void *ctx, size_t n, const float *x);
void sl_cuda_add_bias(void *ctx, int rows, int cols, const float *bias, float *x);
void sl_cuda_lstm_cell_forward(void *ctx, int b, int h, float *gates, const float *c_prev, float *c,
                               float *m);
void sl_cuda_lstm_cell_backward(void *ctx, int b, int h, const float *gates, const float *c_prev,
                                const float *c, const float *dm, float *dc, float *dgates);
void sl_cuda_embedding_gather(void *ctx, int n, int d, const float *table, const int32_t *ids,
                              float *out);
void sl_cuda_embedding_scatter_add(void *ctx, int nrows, int d, const int32_t *rows,
                                   const int32_t *off, const int32_t *pos, const float *src,
                                   float *grad);
void sl_cuda_softmax_xent(void *ctx, int n, int v, float *logits, int ld, const float *bias,
                          const int32_t *targets, float grad_scale, double *loss_sum);
void sl_cuda_sampled_softmax_xent(void *ctx, int n, int s, float *logits, const int32_t *targets,
                                  const int32_t *samples, const float *logq_true,
                                  const float *logq_samp, float grad_scale, double *loss_sum);
void sl_cuda_dropout(void *ctx, size_t n, float p, uint64_t key, float *x);
void sl_cuda_sgd_update(void *ctx, size_t n, float lr, const float *g, float *w);
void sl_cuda_adagrad_update(void *ctx, size_t n, float lr, float eps, const float *g, float *acc,
                            float *w);
void sl_cuda_adam_update(void *ctx, size_t n, float lr, float b1, float b2, float eps, long t,
                         const float *g, float *m, float *v, float *w);
/* x[0..n) = value. */
void sl_cuda_fill(sl_cuda_t *cu, size_t n, float value, float *x);
/* The device RNG over [0, n) into out (sl_cuda_rng_floats). */
void sl_cuda_rng_fill(sl_cuda_t *cu, uint64_t key, size_t n, float *out);

/* sl_cuda_half.cu: the to_half / from_half ops, and gemm's operand packing into 16-bit
 * words: dst (rows, ldp) = fmt(src (rows, ld)), first cols columns; the _t form
 * transposes, dst (cols, ldp) = fmt(src (rows, ld))^T. */
void sl_cuda_to_half(void *ctx, size_t n, sl_precision_t fmt, float scale, const float *src,
                     uint16_t *dst);
void sl_cuda_from_half(void *ctx, size_t n, sl_precision_t fmt, float inv_scale,
                       const uint16_t *src, float *dst);
void sl_cuda_pack_half(sl_cuda_t *cu, sl_precision_t fmt, int rows, int cols, const float *src,
                       int ld, void *dst, int ldp);
void sl_cuda_pack_half_t(sl_cuda_t *cu, sl_precision_t fmt, int rows, int cols, const float *src,
                         int ld, void *dst, int ldp);

/* The whole-layer LSTM ops through cuDNN (sl_cuda_rnn.cu, built with HAVE_CUDNN only),
 * same contracts as sl_backend.h; sl_cuda_rnn_fini destroys the cuDNN handle (any
 * build: nothing to do without cuDNN). */
void sl_cuda_rnn_fini(sl_cuda_t *cu);
#ifdef HAVE_CUDNN
sl_status_t sl_cuda_lstm_layer_new(void *ctx, void **layer, int in, int h, int p, int max_t,
                                   int max_b);
void sl_cuda_lstm_layer_free(void *ctx, void *layer);
void sl_cuda_lstm_layer_forward(void *ctx, void *layer, int train, int t, int b, const float *x,
                                const float *w_ih, const float *w_hh, const float *bias,
                                const float *w_proj, const float *h0, const float *c0, float *y,
                                float *h_t, float *c_t);
void sl_cuda_lstm_layer_backward(void *ctx, void *layer, int t, int b, const float *x,
                                 const float *h0, const float *c0, const float *y, const float *dy,
                                 float *dx, float *dw_ih, float *dw_hh, float *db, float *dw_proj);
#endif

/* The recording ops (sl_cuda_replay.cu), same contracts as sl_backend.h. */
int sl_cuda_record_begin(void *ctx);
void sl_cuda_record_end(void *ctx, void **rec);
int sl_cuda_replay(void *ctx, void *rec);
void sl_cuda_record_free(void *ctx, void *rec);

#endif
