/* The CUDA backend: context (one device, one stream, one cuBLAS handle), device memory
 * and copies, gemm through cuBLAS (fp32 without TF32, or bf16/fp16 operands on tensor
 * cores with fp32 accumulation), error recording, describe(), and the ops table. The
 * fused kernels are in sl_cuda_kernels.cu; the CPU backend (kernels/cpu/) is the
 * reference every op is checked against (tests/unit/check_cuda.c).
 *
 * In bf16 / fp16 a B used many times (the recurrent W_hh) is rounded once by pack_b for
 * gemm_packed. The recordings (CUDA graphs) are in sl_cuda_replay.cu, the 16-bit
 * conversion kernels in sl_cuda_half.cu.
 *
 * Where configure found cuDNN (HAVE_CUDNN), the whole-layer LSTM ops come from cuDNN's
 * RNN API (sl_cuda_rnn.cu), beside the per-cell kernels (device_options.lstm). */
#include "config.h"

#ifdef HAVE_CUDNN
#include <cudnn.h>
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/sl_cuda_ctx.h"

extern "C" {
#include "common/sl_alloc.h"
#include "kernels/cuda/sl_cuda.h"
}

/* ---- errors ------------------------------------------------------------------------ */

void
sl_cuda_fail(sl_cuda_t *cu, sl_status_t code, const char *fmt, ...)
{
    va_list ap;

    if (cu->err != SL_OK)
        return;
    cu->err = code;
    va_start(ap, fmt);
    vsnprintf(cu->err_msg, sizeof cu->err_msg, fmt, ap);
    va_end(ap);
}

int
sl_cuda_check(sl_cuda_t *cu, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    sl_cuda_fail(cu, SL_ERR_DEVICE, "%s: %s: %s (%s)", cu->name, what, cudaGetErrorString(e),
                 cudaGetErrorName(e));
    return 0;
}

int
sl_cuda_launched(sl_cuda_t *cu, const char *what)
{
    return sl_cuda_check(cu, cudaGetLastError(), what);
}

int
sl_cuda_enter(sl_cuda_t *cu, const char *what)
{
    return sl_cuda_check(cu, cudaSetDevice(cu->device), what);
}

static int
blas_check(sl_cuda_t *cu, cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 1;
    sl_cuda_fail(cu, SL_ERR_DEVICE, "%s: %s: cuBLAS: %s", cu->name, what,
                 cublasGetStatusString(st));
    return 0;
}

#define SL_CUBLAS_TRY(cu, expr, what)                                                              \
    do {                                                                                           \
        if (!blas_check((cu), (expr), (what)))                                                     \
            return sl_cuda_take_error(cu);                                                         \
    } while (0)

sl_status_t
sl_cuda_take_error(sl_cuda_t *cu)
{
    sl_status_t code = cu->err;

    if (code == SL_OK)
        return SL_OK;
    cu->err = SL_OK;
    return sl_err_set(code, "%s", cu->err_msg);
}

int
sl_cuda_blocks(size_t n, int cap)
{
    size_t b = (n + SL_CUDA_THREADS - 1) / SL_CUDA_THREADS;

    return b < 1 ? 1 : b > (size_t)cap ? cap : (int)b;
}

/* ---- memory ------------------------------------------------------------------------ */

static sl_status_t
cuda_alloc(void *ctx, void **ptr, size_t bytes)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    void *p = NULL;
    cudaError_t e;

    *ptr = NULL;
    SL_TRY(sl_cuda_take_error(cu));
    SL_CUDA_TRY(cu, cudaSetDevice(cu->device), "alloc");
    e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* out of memory is not sticky: clear it */
        return sl_err_set(SL_ERR_NOMEM, "%s: alloc: out of device memory for %zu bytes", cu->name,
                          bytes);
    }
    SL_CUDA_TRY(cu, e, "alloc");
    if (!sl_cuda_check(cu, cudaMemsetAsync(p, 0, bytes, cu->stream), "alloc")) {
        cudaFree(p);
        return sl_cuda_take_error(cu);
    }
    *ptr = p;
    return SL_OK;
}

/* cudaFree waits for the device, so nothing queued can still use ptr. */
static void
cuda_free(void *ctx, void *ptr)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (ptr && sl_cuda_enter(cu, "free"))
        sl_cuda_check(cu, cudaFree(ptr), "free");
}

/* Page-locked host memory, so that to_device / to_host copy at full bandwidth (and a
 * later stream of their own may run them asynchronously). */
static sl_status_t
cuda_host_alloc(void *ctx, void **ptr, size_t bytes)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    void *p = NULL;
    cudaError_t e;

    *ptr = NULL;
    SL_TRY(sl_cuda_take_error(cu));
    SL_CUDA_TRY(cu, cudaSetDevice(cu->device), "host_alloc");
    e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* not sticky: clear it */
        return sl_err_set(SL_ERR_NOMEM, "%s: host_alloc: out of page-locked memory for %zu bytes",
                          cu->name, bytes);
    }
    SL_CUDA_TRY(cu, e, "host_alloc");
    memset(p, 0, bytes);
    *ptr = p;
    return SL_OK;
}

/* cudaFreeHost waits for the device, so no queued copy can still use ptr. */
static void
cuda_host_free(void *ctx, void *ptr)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (ptr && sl_cuda_enter(cu, "host_free"))
        sl_cuda_check(cu, cudaFreeHost(ptr), "host_free");
}

/* host_src may be reused as soon as this returns: pageable memory is staged by the
 * copy call itself, and for page-locked memory (which the copy reads later, in stream
 * order) it waits for the stream. */
static sl_status_t
cuda_to_device(void *ctx, void *dst, const void *host_src, size_t bytes)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    cudaPointerAttributes attr;
    int pinned;

    SL_TRY(sl_cuda_take_error(cu));
    if (bytes == 0)
        return SL_OK;
    SL_CUDA_TRY(cu, cudaSetDevice(cu->device), "to_device");
    pinned =
        cudaPointerGetAttributes(&attr, host_src) == cudaSuccess && attr.type == cudaMemoryTypeHost;
    cudaGetLastError(); /* an unknown pointer is pageable memory, not an error */
    SL_CUDA_TRY(cu, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cu->stream),
                "to_device");
    if (pinned)
        SL_CUDA_TRY(cu, cudaStreamSynchronize(cu->stream), "to_device");
    return SL_OK;
}

static sl_status_t
cuda_to_host(void *ctx, void *host_dst, const void *src, size_t bytes)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    SL_TRY(sl_cuda_take_error(cu));
    if (bytes == 0)
        return SL_OK;
    SL_CUDA_TRY(cu, cudaSetDevice(cu->device), "to_host");
    SL_CUDA_TRY(cu, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cu->stream),
                "to_host");
    SL_CUDA_TRY(cu, cudaStreamSynchronize(cu->stream), "to_host");
    return sl_cuda_take_error(cu); /* what the queued ops recorded meanwhile */
}

static sl_status_t
cuda_sync(void *ctx)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (sl_cuda_enter(cu, "sync"))
        sl_cuda_check(cu, cudaStreamSynchronize(cu->stream), "sync");
    return sl_cuda_take_error(cu);
}

/* Device-to-device, in stream order. The model never copies between overlapping
 * ranges (the CPU's memmove would allow it). */
static void
cuda_copy(void *ctx, size_t n, const float *src, float *dst)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (n == 0 || src == dst || !sl_cuda_enter(cu, "copy"))
        return;
    sl_cuda_check(
        cu, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, cu->stream),
        "copy");
}

static void
cuda_zero(void *ctx, size_t n, float *x)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (n == 0 || !sl_cuda_enter(cu, "zero"))
        return;
    sl_cuda_check(cu, cudaMemsetAsync(x, 0, n * sizeof(float), cu->stream), "zero");
}

/* ---- gemm -------------------------------------------------------------------------- */

static sl_status_t
cuda_set_precision(void *ctx, sl_precision_t p)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    SL_TRY(sl_cuda_take_error(cu));
    if (p != SL_PREC_FP32 && p != SL_PREC_BF16 && p != SL_PREC_FP16)
        return sl_err_set(SL_ERR_INVALID, "%s: precision %d unknown", cu->name, (int)p);
    cu->prec = p;
    return SL_OK;
}

/* The 16-bit operand buffer, grown in stream order (allocations and frees are queued,
 * so gemms still in flight keep the old one). Grows only until the largest gemm has
 * been seen, i.e. during the first step; never inside a recording, whose ops must
 * have run once before (sl_backend.h), and a move makes the recordings stale. */
static int
half_space(sl_cuda_t *cu, size_t bytes)
{
    void *p;

    if (bytes <= cu->half_bytes)
        return 1;
    if (cu->recording) {
        sl_cuda_fail(cu, SL_ERR_INVALID,
                     "%s: gemm: 16-bit operands of %zu bytes first seen in a "
                     "recording",
                     cu->name, bytes);
        return 0;
    }
    cu->scratch_gen++;
    bytes += bytes / 4;
    if (cu->half_buf && !sl_cuda_check(cu, cudaFreeAsync(cu->half_buf, cu->stream), "gemm"))
        return 0;
    cu->half_buf = NULL;
    cu->half_bytes = 0;
    if (!sl_cuda_check(cu, cudaMallocAsync(&p, bytes, cu->stream), "gemm (16-bit operands)"))
        return 0;
    cu->half_buf = p;
    cu->half_bytes = bytes;
    return 1;
}

static size_t
round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major
 * matrix read column-major is its transpose: so cuBLAS gets B first, the dimensions
 * (n, m, k) and the same leading dimensions. With bf16/fp16 the stored operands are
 * first rounded into the half buffer, rows padded to 8 elements so tensor cores take
 * any shape; accumulation and C stay fp32 (CUBLAS_COMPUTE_32F). The shape checks are
 * the CPU's: breaking them is a bug in the caller. */
static void
cuda_gemm(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
          int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ar = trans_a ? k : m, ac = trans_a ? m : k, br = trans_b ? n : k, bc = trans_b ? k : n;
    int lpa, lpb;
    size_t abytes, bbytes;
    cudaDataType_t t;
    char *ah, *bh;

    SL_ASSERT(m >= 0 && n >= 0 && k >= 0);
    SL_ASSERT(lda >= ac && lda >= 1);
    SL_ASSERT(ldb >= bc && ldb >= 1);
    SL_ASSERT(ldc >= n && ldc >= 1);
    if (m == 0 || n == 0 || !sl_cuda_enter(cu, "gemm"))
        return;
    if (cu->prec == SL_PREC_FP32 || k == 0) {
        blas_check(cu,
                   cublasSgemm(cu->blas, opb, opa, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
                   "gemm");
        return;
    }
    lpa = (int)round_up((size_t)ac, 8);
    lpb = (int)round_up((size_t)bc, 8);
    abytes = round_up((size_t)ar * (size_t)lpa * 2, 256);
    bbytes = (size_t)br * (size_t)lpb * 2;
    if (!half_space(cu, abytes + bbytes))
        return;
    ah = (char *)cu->half_buf;
    bh = ah + abytes;
    sl_cuda_pack_half(cu, cu->prec, ar, ac, a, lda, ah, lpa);
    sl_cuda_pack_half(cu, cu->prec, br, bc, b, ldb, bh, lpb);
    t = cu->prec == SL_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    blas_check(cu,
               cublasGemmEx(cu->blas, opb, opa, n, m, k, &alpha, bh, t, lpb, ah, t, lpa, &beta, c,
                            CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "gemm (16-bit operands)");
}

/* pack_b's copy of a (k,n) op(B) in 16 bits: op(B)^T, (n, lpk) words with rows padded to
 * 8 elements, which is what gemm makes of a B stored transposed (so a packed product of
 * that B gives gemm's bits); a B stored as is gets transposed into it. In fp32 there is
 * nothing to pack: cuBLAS reads B in place (an fp32 copy in the layout its kernels take
 * without a transpose measured the same on the LSTMP model). */
static size_t
cuda_packed_floats(void *ctx, int k, int n)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (cu->prec == SL_PREC_FP32 || k <= 0 || n <= 0)
        return 0;
    return ((size_t)n * round_up((size_t)k, 8) * 2 + sizeof(float) - 1) / sizeof(float);
}

static void
cuda_pack_b(void *ctx, int trans_b, int k, int n, const float *b, int ldb, float *packed)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    int lpk = (int)round_up((size_t)k, 8);

    SL_ASSERT(k >= 0 && n >= 0 && ldb >= 1 && ldb >= (trans_b ? k : n));
    if (k == 0 || n == 0 || !sl_cuda_enter(cu, "pack_b"))
        return;
    if (cu->prec == SL_PREC_FP32) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: pack_b: nothing to pack in fp32", cu->name);
        return;
    }
    if (trans_b)
        sl_cuda_pack_half(cu, cu->prec, n, k, b, ldb, packed, lpk);
    else
        sl_cuda_pack_half_t(cu, cu->prec, k, n, b, ldb, packed, lpk);
}

/* C = op(A) op(B) + beta C from pack_b's copy: as cuda_gemm with a B stored transposed,
 * only A rounded here. */
static void
cuda_gemm_packed(void *ctx, int trans_a, int m, int n, int k, const float *a, int lda,
                 const float *packed, float beta, float *c, int ldc)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    cublasOperation_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ar = trans_a ? k : m, ac = trans_a ? m : k, lpa = (int)round_up((size_t)ac, 8);
    int lpk = (int)round_up((size_t)k, 8);
    const float one = 1.0f;
    cudaDataType_t t = cu->prec == SL_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;

    SL_ASSERT(m >= 0 && n >= 0 && k >= 0 && (beta == 0.0f || beta == 1.0f));
    SL_ASSERT(lda >= ac && lda >= 1 && ldc >= n && ldc >= 1);
    if (m == 0 || n == 0 || !sl_cuda_enter(cu, "gemm_packed"))
        return;
    if (cu->prec == SL_PREC_FP32) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: gemm_packed: nothing was packed in fp32", cu->name);
        return;
    }
    if (k == 0) {
        if (beta == 0.0f) /* C (m, n) = 0 */
            sl_cuda_check(cu,
                          cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0,
                                            (size_t)n * sizeof(float), (size_t)m, cu->stream),
                          "gemm_packed");
        return;
    }
    if (!half_space(cu, round_up((size_t)ar * (size_t)lpa * 2, 256)))
        return;
    sl_cuda_pack_half(cu, cu->prec, ar, ac, a, lda, cu->half_buf, lpa);
    blas_check(cu,
               cublasGemmEx(cu->blas, CUBLAS_OP_T, opa, n, m, k, &one, packed, t, lpk, cu->half_buf,
                            t, lpa, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "gemm_packed (16-bit operands)");
}

/* db += dx^T 1 as a cuBLAS gemv: dx (rows, cols) row-major is (cols, rows) column-major.
 * A kernel with one thread per column and the rows in order keeps only a few loads in
 * flight per SM (cols threads in all), where gemv streams dx at memory speed; its
 * order of additions differs from the CPU's, within fp32 rounding. The ones vector
 * grows like the half buffer, during the first step. */
static void
cuda_bias_grad(void *ctx, int rows, int cols, const float *dx, float *db)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    const float one = 1.0f;

    if (rows <= 0 || cols <= 0 || !sl_cuda_enter(cu, "bias_grad"))
        return;
    if ((size_t)rows > cu->ones_n) {
        size_t n = (size_t)rows + (size_t)rows / 4;
        void *p;

        if (cu->ones && !sl_cuda_check(cu, cudaFreeAsync(cu->ones, cu->stream), "bias_grad"))
            return;
        cu->ones = NULL;
        cu->ones_n = 0;
        if (!sl_cuda_check(cu, cudaMallocAsync(&p, n * sizeof(float), cu->stream), "bias_grad"))
            return;
        cu->ones = (float *)p;
        cu->ones_n = n;
        sl_cuda_fill(cu, n, 1.0f, cu->ones);
    }
    blas_check(
        cu,
        cublasSgemv(cu->blas, CUBLAS_OP_N, cols, rows, &one, dx, cols, cu->ones, 1, &one, db, 1),
        "bias_grad");
}

/* ---- backend ----------------------------------------------------------------------- */

static void
cuda_set_threads(void *ctx, int threads)
{
    (void)ctx;
    (void)threads; /* the device has its own parallelism */
}

static const char *
cuda_describe(void *ctx)
{
    return ((sl_cuda_t *)ctx)->desc;
}

static void
cuda_destroy(void *ctx)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (!cu)
        return;
    cudaSetDevice(cu->device);
    if (cu->stream)
        cudaStreamSynchronize(cu->stream);
    sl_cuda_rnn_fini(cu);
    if (cu->half_buf)
        cudaFree(cu->half_buf);
    if (cu->blas_ws)
        cudaFree(cu->blas_ws);
    if (cu->ones)
        cudaFree(cu->ones);
    if (cu->partial)
        cudaFree(cu->partial);
    if (cu->d_result)
        cudaFree(cu->d_result);
    if (cu->h_result)
        cudaFreeHost(cu->h_result);
    if (cu->blas)
        cublasDestroy(cu->blas);
    if (cu->stream)
        cudaStreamDestroy(cu->stream);
    cudaGetLastError();
    sl_free(cu);
}

static const sl_backend_ops_t cuda_ops = {
    .destroy = cuda_destroy,
    .set_threads = cuda_set_threads,
    .describe = cuda_describe,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .sync = cuda_sync,
    .set_precision = cuda_set_precision,
    .gemm = cuda_gemm,
    .packed_floats = cuda_packed_floats,
    .pack_b = cuda_pack_b,
    .gemm_packed = cuda_gemm_packed,
    .record_begin = sl_cuda_record_begin,
    .record_end = sl_cuda_record_end,
    .replay = sl_cuda_replay,
    .record_free = sl_cuda_record_free,
    .axpy = sl_cuda_axpy,
    .scale = sl_cuda_scale,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sumsq = sl_cuda_sumsq,
    .sumsq_blocks = NULL, /* clipping uses sumsq over all */
    .to_half = sl_cuda_to_half,
    .from_half = sl_cuda_from_half,
    .add_bias = sl_cuda_add_bias,
    .bias_grad = cuda_bias_grad,
    .lstm_cell_forward = sl_cuda_lstm_cell_forward,
    .lstm_cell_backward = sl_cuda_lstm_cell_backward,
#ifdef HAVE_CUDNN
    .lstm_layer_new = sl_cuda_lstm_layer_new,
    .lstm_layer_free = sl_cuda_lstm_layer_free,
    .lstm_layer_forward = sl_cuda_lstm_layer_forward,
    .lstm_layer_backward = sl_cuda_lstm_layer_backward,
#else /* spelt out: C++ warns of a member left out */
    .lstm_layer_new = NULL,
    .lstm_layer_free = NULL,
    .lstm_layer_forward = NULL,
    .lstm_layer_backward = NULL,
#endif
    .embedding_gather = sl_cuda_embedding_gather,
    .embedding_scatter_add = sl_cuda_embedding_scatter_add,
    .softmax_xent = sl_cuda_softmax_xent,
    .sampled_softmax_xent = sl_cuda_sampled_softmax_xent,
    .dropout = sl_cuda_dropout,
    .sgd_update = sl_cuda_sgd_update,
    .adagrad_update = sl_cuda_adagrad_update,
    .adam_update = sl_cuda_adam_update,
};

/* "CUDA 13.0 (driver 13.0), cuBLAS 13.1.0, cuDNN 9.19 (LSTM layers), device NVIDIA H100,
 * sm_90": the cuDNN the module links (its version at run time), or "cuDNN not linked". */
static void
describe_init(sl_cuda_t *cu, const cudaDeviceProp *prop)
{
    int rt = 0, drv = 0, blas = 0;
    char dnn[48] = "cuDNN not linked";

#ifdef HAVE_CUDNN
    {
        size_t v = cudnnGetVersion(); /* 91900 for 9.19.0 */
        snprintf(dnn, sizeof dnn, "cuDNN %zu.%zu.%zu (LSTM layers)", v / 10000, v % 10000 / 100,
                 v % 100);
    }
#endif
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    cublasGetVersion(cu->blas, &blas);
    snprintf(cu->desc, sizeof cu->desc,
             "CUDA %d.%d (driver %d.%d), cuBLAS %d.%d.%d, %s, device %s, sm_%d%d", rt / 1000,
             rt % 1000 / 10, drv / 1000, drv % 1000 / 10, blas / 10000, blas % 10000 / 100,
             blas % 100, dnn, prop->name, prop->major, prop->minor);
}

/* SHOAL_CUDA_GRAPHS: 1 (or unset) records the recurrent loops as CUDA graphs, 0 runs
 * every op on its own (to compare, or where a driver's capture fails). */
static sl_status_t
graphs_setting(sl_cuda_t *cu)
{
    const char *v = getenv("SHOAL_CUDA_GRAPHS");

    cu->graphs = 1;
    if (v == NULL || strcmp(v, "1") == 0)
        return SL_OK;
    if (strcmp(v, "0") == 0) {
        cu->graphs = 0;
        return SL_OK;
    }
    return sl_err_set(SL_ERR_INVALID, "SHOAL_CUDA_GRAPHS: '%s' is not 0 or 1", v);
}

/* cuBLAS's workspace, set by us: it must not allocate while a graph is being captured.
 * 32 MiB is what it takes by itself on Hopper, so its choice of kernels stays. */
enum { BLAS_WORKSPACE = 32 << 20 };

/* Everything the ops need, made once: a non-blocking stream (it never waits for the
 * legacy default stream), cuBLAS on it with TF32 off (fp32 gemms stay fp32, so they
 * match the CPU) and its workspace, the reduction buffers. */
static sl_status_t
cuda_init(sl_cuda_t *cu)
{
    cudaDeviceProp prop;

    SL_TRY(graphs_setting(cu));
    SL_CUDA_TRY(cu, cudaSetDevice(cu->device), "init");
    SL_CUDA_TRY(cu, cudaGetDeviceProperties(&prop, cu->device), "init");
    SL_CUDA_TRY(cu, cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), "init");
    SL_CUBLAS_TRY(cu, cublasCreate(&cu->blas), "init");
    SL_CUBLAS_TRY(cu, cublasSetStream(cu->blas, cu->stream), "init");
    SL_CUBLAS_TRY(cu, cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH), "init");
    SL_CUDA_TRY(cu, cudaMalloc(&cu->blas_ws, BLAS_WORKSPACE), "init");
    SL_CUBLAS_TRY(cu, cublasSetWorkspace(cu->blas, cu->blas_ws, BLAS_WORKSPACE), "init");
    SL_CUDA_TRY(cu, cudaMalloc(&cu->partial, SL_CUDA_MAX_BLOCKS * sizeof(double)), "init");
    SL_CUDA_TRY(cu, cudaMalloc(&cu->d_result, sizeof *cu->d_result), "init");
    SL_CUDA_TRY(cu, cudaMallocHost(&cu->h_result, sizeof *cu->h_result), "init");
    describe_init(cu, &prop);
    return SL_OK;
}

sl_status_t
sl_backend_cuda_new(sl_backend_t **out, int device)
{
    sl_backend_t *b;
    sl_cuda_t *cu;
    sl_status_t st;
    int count;

    *out = NULL;
    st = sl_cuda_device_count(&count);
    if (st != SL_OK)
        return sl_err_prefix(st, "device 'cuda:%d'", device);
    if (count == 0)
        return sl_err_set(SL_ERR_DEVICE, "device 'cuda:%d': no GPU: no CUDA device visible",
                          device);
    if (device < 0 || device >= count)
        return sl_err_set(SL_ERR_DEVICE, "device 'cuda:%d': %d CUDA device%s visible", device,
                          count, count == 1 ? "" : "s");
    SL_TRY(SL_CALLOC(&b, 1, "cuda backend"));
    if (SL_CALLOC(&cu, 1, "cuda backend context") != SL_OK) {
        sl_free(b);
        return SL_ERR_NOMEM;
    }
    cu->device = device;
    cu->prec = SL_PREC_FP32;
    snprintf(cu->name, sizeof cu->name, "cuda:%d", device);
    st = cuda_init(cu);
    if (st != SL_OK) {
        cuda_destroy(cu);
        sl_free(b);
        return st;
    }
    b->ops = &cuda_ops;
    b->ctx = cu;
    b->name = cu->name;
    *out = b;
    return SL_OK;
}

sl_status_t
sl_cuda_rng_floats(sl_backend_t *b, uint64_t key, size_t n, float *out)
{
    if (b == NULL || b->ops != &cuda_ops)
        return sl_err_set(SL_ERR_INVALID, "CUDA random numbers: not a CUDA backend");
    sl_cuda_rng_fill((sl_cuda_t *)b->ctx, key, n, out);
    return cuda_sync(b->ctx);
}
