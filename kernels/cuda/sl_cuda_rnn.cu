/* The CUDA backend's whole-layer LSTM(P) ops (sl_backend.h's lstm_layer_*) through
 * cuDNN's RNN API: cudnnRNNForward, cudnnRNNBackwardData_v8 and
 * cudnnRNNBackwardWeights_v8 (cuDNN 9; configure's HAVE_CUDNN), one call each per
 * layer and window instead of the model's T steps of gemm + fused cell.
 *
 * The layer is one cuDNN LSTM layer, unidirectional, fp32 data and fp32 math with
 * CUDNN_FMA_MATH (no TF32, as cuBLAS's fp32 gemms here), a linear input, one bias per
 * gate on the input product (CUDNN_RNN_SINGLE_INP_BIAS: the model's b, PyTorch's b_ih +
 * b_hh), no cell clipping, the projection P through projSize (projSize = H without),
 * no dropout inside (the model's dropout is between layers). Inputs and outputs are
 * time-major rows t*B + b, every stream T steps long: CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED
 * with padded I/O off, where equal lengths make the packed layout the plain (T, B, width)
 * array.
 *
 * Weights: cuDNN keeps them in a weight space of its own layout. Where each matrix and
 * bias lives in it comes from cudnnGetRNNWeightParams (its address, and the shape and
 * strides of its tensor descriptor), never from an assumed layout: cuDNN's linLayerID
 * 0-3 are the input matrices of the gates i, f, g (cuDNN's "c'"), o, 4-7 the recurrent
 * ones, 8 the projection; that is shoal's gate order, so gate k is rows [kH, (k+1)H) of
 * w_ih, w_hh and b. Each forward copies the model's weights in (one strided copy per
 * matrix or bias, 9 or 13 launches), each backward adds cuDNN's weight gradients out into
 * the model's gradients the same way; a bias cuDNN has that the model lacks stays 0.
 *
 * The state carried between windows is detached (truncated BPTT): backward passes no
 * dhy / dcy (zero) and asks for no dhx / dcx. None of these ops is recordable (a CUDA
 * graph): the model runs them outside its recorded loops. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels/cuda/sl_cuda_ctx.h"

extern "C" {
#include "common/sl_alloc.h"
}

#ifndef HAVE_CUDNN

void
sl_cuda_rnn_fini(sl_cuda_t *cu)
{
    (void)cu;
}

#else

#include <cudnn.h>

enum { MAX_PIECES = 13 }; /* 4 + 4 matrices, 4 biases, the projection */

/* One of the model's matrices (or a bias: cols 1) for one gate, inside the weight
 * space: element (i, j) of the model's row-major block (rows, cols) at model_off in its
 * tensor is weight-space element off + i * s_row + j * s_col. */
typedef struct {
    int which; /* 0 w_ih, 1 w_hh, 2 b, 3 w_proj */
    int rows, cols;
    size_t model_off;
    size_t off;
    long long s_row, s_col;
    int turned; /* cuDNN's shape: 0 {1, rows, cols}, 1 {1, cols, rows}, -1 square */
} piece_t;

typedef struct {
    int in, h, p, r, max_b;
    int t, b; /* the window the descriptors and temporary sizes are set for; 0: none */
    cudnnRNNDescriptor_t rnn;
    cudnnDropoutDescriptor_t drop;
    cudnnRNNDataDescriptor_t xd, yd;
    cudnnTensorDescriptor_t hd, cd;
    size_t ws_bytes;
    float *ws, *dws; /* the weights in cuDNN's layout, and their gradients */
    size_t work_bytes, reserve_bytes;
    void *work, *reserve;
    int32_t *seq;   /* (max_b) device: every stream's length, T */
    int *host_seq;  /* (max_b) the same on the host, for the data descriptors */
    float *hy, *cy; /* (max_b, R), (max_b, H): the last h and c where the caller's memory is
                       not 16-byte aligned (a model state's layers lie end to end) */
    piece_t piece[MAX_PIECES];
    int npiece;
} layer_t;

/* 1 on success, else records "cuda:N: what: fn: CUDNN_STATUS_..." (fn, the cuDNN
 * function, so that a device log says which call refused what) and returns 0. */
static int
dnn_check(sl_cuda_t *cu, cudnnStatus_t s, const char *what, const char *fn)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return 1;
    sl_cuda_fail(cu, SL_ERR_DEVICE, "%s: %s: %s: %s", cu->name, what, fn, cudnnGetErrorString(s));
    return 0;
}

/* DNN(cu, what, fn, (args)): fn args through dnn_check; DNN_TRY returns its status. */
#define DNN(cu, what, fn, args) dnn_check((cu), fn args, (what), #fn)
#define DNN_TRY(cu, what, fn, args)                                                                \
    do {                                                                                           \
        if (!DNN(cu, what, fn, args))                                                              \
            return sl_cuda_take_error(cu);                                                         \
    } while (0)

/* ---- kernels ------------------------------------------------------------------------ */

__global__ void
fill_i32_kernel(int n, int32_t value, int32_t *x)
{
    FOR_EACH(i, (size_t)n)
    {
        x[i] = value;
    }
}

/* to_space: ws[off + i s_row + j s_col] = w[i cols + j]; else g[i cols + j] +=
 * dws[off + i s_row + j s_col]. */
__global__ void
piece_kernel(int to_space, int rows, int cols, long long s_row, long long s_col, float *space,
             float *model)
{
    size_t n = (size_t)rows * (size_t)cols;

    FOR_EACH(k, n)
    {
        size_t i = k / (size_t)cols, j = k % (size_t)cols;
        float *s = space + (long long)i * s_row + (long long)j * s_col;

        if (to_space)
            *s = model[k];
        else
            model[k] += *s;
    }
}

/* ---- weight space ------------------------------------------------------------------- */

/* The block of a piece in cuDNN's descriptor d (from cudnnGetRNNWeightParams): its
 * element count must be rows * cols; its strides say where (i, j) is. A matrix is
 * {1, rows, cols} as documented; {1, cols, rows} (the transpose) is taken too, by its
 * strides, where rows != cols. */
static sl_status_t
piece_strides(sl_cuda_t *cu, cudnnTensorDescriptor_t d, piece_t *pc, const char *what)
{
    cudnnDataType_t dt;
    int nb = 0, dims[8], strides[8];
    long long count = 1;

    DNN_TRY(cu, what, cudnnGetTensorNdDescriptor, (d, 8, &dt, &nb, dims, strides));
    for (int i = 0; i < nb && i < 8; i++)
        count *= dims[i];
    if (nb < 1 || nb > 8 || dt != CUDNN_DATA_FLOAT || count != (long long)pc->rows * pc->cols)
        return sl_err_set(SL_ERR_DEVICE,
                          "%s: lstm_layer_new: %s: cuDNN describes %d dimensions (%d x %d x %d), "
                          "type %d; expected %d x %d floats",
                          cu->name, what, nb, nb > 0 ? dims[0] : 0, nb > 1 ? dims[1] : 0,
                          nb > 2 ? dims[2] : 0, (int)dt, pc->rows, pc->cols);
    if (pc->cols == 1) { /* a bias: the stride of its one dimension above 1 */
        pc->s_row = 1;
        pc->s_col = 0;
        for (int i = 0; i < nb; i++)
            if (dims[i] == pc->rows && pc->rows > 1) {
                pc->s_row = strides[i];
                break;
            }
        return SL_OK;
    }
    if (nb == 3 && dims[1] == pc->rows && dims[2] == pc->cols) {
        pc->s_row = strides[1];
        pc->s_col = strides[2];
        pc->turned = pc->rows == pc->cols ? -1 : 0;
    } else if (nb == 3 && dims[1] == pc->cols && dims[2] == pc->rows) {
        pc->s_row = strides[2];
        pc->s_col = strides[1];
        pc->turned = 1;
    } else {
        return sl_err_set(SL_ERR_DEVICE,
                          "%s: lstm_layer_new: %s: cuDNN's shape %d x %d x %d is not %d x %d",
                          cu->name, what, dims[0], nb > 1 ? dims[1] : 0, nb > 2 ? dims[2] : 0,
                          pc->rows, pc->cols);
    }
    return SL_OK;
}

/* One piece from linLayerID id: its matrix (bias 0) or its bias (bias 1). *found 0
 * where cuDNN has none there. */
static sl_status_t
find_piece(sl_cuda_t *cu, layer_t *L, int id, int bias, piece_t *pc, int *found)
{
    cudnnTensorDescriptor_t md = NULL, bd = NULL;
    void *m = NULL, *b = NULL, *at;
    char what[64];
    sl_status_t st = SL_OK;

    *found = 0;
    snprintf(what, sizeof what, "weight params of linLayerID %d (%s)", id,
             bias ? "bias" : "matrix");
    if (!DNN(cu, what, cudnnCreateTensorDescriptor, (&md)) ||
        !DNN(cu, what, cudnnCreateTensorDescriptor, (&bd)) ||
        !DNN(cu, what, cudnnGetRNNWeightParams,
             ((cudnnHandle_t)cu->dnn, L->rnn, 0, L->ws_bytes, L->ws, id, md, &m, bd, &b))) {
        st = sl_cuda_take_error(cu);
        goto out;
    }
    at = bias ? b : m;
    if (at) {
        size_t off = (size_t)((const float *)at - L->ws);

        if ((const float *)at < L->ws || ((uintptr_t)at - (uintptr_t)L->ws) % sizeof(float) ||
            (off + (size_t)pc->rows * (size_t)pc->cols) * sizeof(float) > L->ws_bytes) {
            st = sl_err_set(SL_ERR_DEVICE, "%s: lstm_layer_new: %s: outside the weight space",
                            cu->name, what);
            goto out;
        }
        pc->off = off;
        st = piece_strides(cu, bias ? bd : md, pc, what);
        *found = st == SL_OK;
    }
out:
    if (md)
        cudnnDestroyTensorDescriptor(md);
    if (bd)
        cudnnDestroyTensorDescriptor(bd);
    return st;
}

/* The layer's pieces: gate k's input and recurrent matrices (linLayerID k, 4 + k), its
 * bias (on linLayerID k, where SINGLE_INP_BIAS puts it; on 4 + k if cuDNN has it there
 * instead), the projection (8). A square matrix's shape cannot tell {1, rows, cols}
 * from its transpose: it follows the others (the documented order when all are square). */
static sl_status_t
map_weights(sl_cuda_t *cu, layer_t *L)
{
    int found, turned[2] = {0, 0};

    L->npiece = 0;
    for (int k = 0; k < 4; k++) {
        piece_t in = {0, L->h, L->in, (size_t)k * L->h * L->in, 0, 0, 0, 0};
        piece_t rec = {1, L->h, L->r, (size_t)k * L->h * L->r, 0, 0, 0, 0};
        piece_t bias = {2, L->h, 1, (size_t)k * L->h, 0, 0, 0, 0};

        SL_TRY(find_piece(cu, L, k, 0, &in, &found));
        if (!found)
            return sl_err_set(SL_ERR_DEVICE, "%s: lstm_layer_new: cuDNN has no input matrix %d",
                              cu->name, k);
        L->piece[L->npiece++] = in;
        SL_TRY(find_piece(cu, L, 4 + k, 0, &rec, &found));
        if (!found)
            return sl_err_set(SL_ERR_DEVICE, "%s: lstm_layer_new: cuDNN has no recurrent matrix %d",
                              cu->name, k);
        L->piece[L->npiece++] = rec;
        SL_TRY(find_piece(cu, L, k, 1, &bias, &found));
        if (!found)
            SL_TRY(find_piece(cu, L, 4 + k, 1, &bias, &found));
        if (!found)
            return sl_err_set(SL_ERR_DEVICE, "%s: lstm_layer_new: cuDNN has no bias for gate %d",
                              cu->name, k);
        L->piece[L->npiece++] = bias;
    }
    if (L->p > 0) {
        piece_t proj = {3, L->p, L->h, 0, 0, 0, 0, 0};

        SL_TRY(find_piece(cu, L, 8, 0, &proj, &found));
        if (!found)
            return sl_err_set(SL_ERR_DEVICE, "%s: lstm_layer_new: cuDNN has no projection matrix",
                              cu->name);
        L->piece[L->npiece++] = proj;
    }
    for (int i = 0; i < L->npiece; i++)
        if (L->piece[i].cols > 1 && L->piece[i].turned >= 0)
            turned[L->piece[i].turned]++;
    if (turned[0] && turned[1])
        return sl_err_set(SL_ERR_DEVICE,
                          "%s: lstm_layer_new: cuDNN's matrices are of two orientations (%d "
                          "rows x cols, %d cols x rows)",
                          cu->name, turned[0], turned[1]);
    for (int i = 0; i < L->npiece; i++) {
        piece_t *pc = &L->piece[i];

        if (pc->turned < 0 && turned[1]) {
            long long st = pc->s_row;

            pc->s_row = pc->s_col;
            pc->s_col = st;
        }
    }
    return SL_OK;
}

/* Copies the model's tensors into the weight space (to_space), or adds the weight
 * space's gradients into the model's gradient tensors. */
static int
move_pieces(sl_cuda_t *cu, layer_t *L, int to_space, float *const tensors[4])
{
    for (int i = 0; i < L->npiece; i++) {
        const piece_t *pc = &L->piece[i];
        size_t n = (size_t)pc->rows * (size_t)pc->cols;

        piece_kernel<<<grid_for(n), NT, 0, cu->stream>>>(
            to_space, pc->rows, pc->cols, pc->s_row, pc->s_col,
            (to_space ? L->ws : L->dws) + pc->off, tensors[pc->which] + pc->model_off);
        if (!sl_cuda_launched(cu, to_space ? "lstm_layer_forward: weights"
                                           : "lstm_layer_backward: weight gradients"))
            return 0;
    }
    return 1;
}

/* ---- the window's shape ------------------------------------------------------------- */

/* Grows *buf to bytes (at least 1), after the stream has finished with the old one. */
static int
grow(sl_cuda_t *cu, void **buf, size_t *have, size_t bytes, const char *what)
{
    if (bytes <= *have && *buf)
        return 1;
    if (*buf) {
        if (!sl_cuda_check(cu, cudaStreamSynchronize(cu->stream), what))
            return 0;
        cudaFree(*buf);
        *buf = NULL;
        *have = 0;
    }
    if (!sl_cuda_check(cu, cudaMalloc(buf, bytes ? bytes : 1), what))
        return 0;
    *have = bytes;
    return 1;
}

/* The descriptors, the device lengths and the temporary spaces for a window of t steps
 * of b streams; nothing to do when the last window had that shape. */
static int
set_window(sl_cuda_t *cu, layer_t *L, int t, int b, const char *what)
{
    cudnnHandle_t dnn = (cudnnHandle_t)cu->dnn;
    int hdims[3] = {1, b, L->r}, hstrides[3] = {b * L->r, L->r, 1};
    int cdims[3] = {1, b, L->h}, cstrides[3] = {b * L->h, L->h, 1};
    size_t work_train = 0, reserve = 0, work_infer = 0, unused = 0;
    float fill = 0.0f; /* padding: none with equal lengths */

    if (t == L->t && b == L->b)
        return 1;
    if (t < 1 || b < 1 || b > L->max_b) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: %s: window of %d steps of %d streams (at most %d)",
                     cu->name, what, t, b, L->max_b);
        return 0;
    }
    L->t = L->b = 0;
    for (int i = 0; i < b; i++)
        L->host_seq[i] = t;
    if (!DNN(cu, what, cudnnSetRNNDataDescriptor,
             (L->xd, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, t, b, L->in,
              L->host_seq, &fill)) ||
        !DNN(cu, what, cudnnSetRNNDataDescriptor,
             (L->yd, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, t, b, L->r,
              L->host_seq, &fill)) ||
        !DNN(cu, what, cudnnSetTensorNdDescriptor, (L->hd, CUDNN_DATA_FLOAT, 3, hdims, hstrides)) ||
        !DNN(cu, what, cudnnSetTensorNdDescriptor, (L->cd, CUDNN_DATA_FLOAT, 3, cdims, cstrides)) ||
        !DNN(cu, what, cudnnGetRNNTempSpaceSizes,
             (dnn, L->rnn, CUDNN_FWD_MODE_TRAINING, L->xd, &work_train, &reserve)) ||
        !DNN(cu, what, cudnnGetRNNTempSpaceSizes,
             (dnn, L->rnn, CUDNN_FWD_MODE_INFERENCE, L->xd, &work_infer, &unused)))
        return 0;
    fill_i32_kernel<<<grid_for((size_t)b), NT, 0, cu->stream>>>(b, t, L->seq);
    if (!sl_cuda_launched(cu, what) ||
        !grow(cu, &L->work, &L->work_bytes, work_train > work_infer ? work_train : work_infer,
              what) ||
        !grow(cu, &L->reserve, &L->reserve_bytes, reserve, what))
        return 0;
    L->t = t;
    L->b = b;
    return 1;
}

/* ---- the ops ------------------------------------------------------------------------ */

void
sl_cuda_rnn_fini(sl_cuda_t *cu)
{
    if (cu->dnn)
        cudnnDestroy((cudnnHandle_t)cu->dnn);
    cu->dnn = NULL;
}

void
sl_cuda_lstm_layer_free(void *ctx, void *layer)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    layer_t *L = (layer_t *)layer;

    if (!L)
        return;
    cudaSetDevice(cu->device);
    cudaStreamSynchronize(cu->stream); /* its buffers may still be in use */
    if (L->rnn)
        cudnnDestroyRNNDescriptor(L->rnn);
    if (L->drop)
        cudnnDestroyDropoutDescriptor(L->drop);
    if (L->xd)
        cudnnDestroyRNNDataDescriptor(L->xd);
    if (L->yd)
        cudnnDestroyRNNDataDescriptor(L->yd);
    if (L->hd)
        cudnnDestroyTensorDescriptor(L->hd);
    if (L->cd)
        cudnnDestroyTensorDescriptor(L->cd);
    cudaFree(L->ws);
    cudaFree(L->dws);
    cudaFree(L->work);
    cudaFree(L->reserve);
    cudaFree(L->seq);
    cudaFree(L->hy);
    cudaFree(L->cy);
    sl_free(L->host_seq);
    sl_free(L);
}

static sl_status_t
layer_init(sl_cuda_t *cu, layer_t *L, int max_t)
{
    const char *what = "lstm_layer_new";
    cudnnHandle_t dnn;
    cudnnStatus_t st;

    if (!cu->dnn) { /* the backend's handle, on its stream */
        cudnnHandle_t h = NULL;

        DNN_TRY(cu, what, cudnnCreate, (&h));
        cu->dnn = h;
        DNN_TRY(cu, what, cudnnSetStream, (h, cu->stream));
    }
    dnn = (cudnnHandle_t)cu->dnn;
    DNN_TRY(cu, what, cudnnCreateRNNDescriptor, (&L->rnn));
    DNN_TRY(cu, what, cudnnCreateDropoutDescriptor, (&L->drop));
    DNN_TRY(cu, what, cudnnCreateRNNDataDescriptor, (&L->xd));
    DNN_TRY(cu, what, cudnnCreateRNNDataDescriptor, (&L->yd));
    DNN_TRY(cu, what, cudnnCreateTensorDescriptor, (&L->hd));
    DNN_TRY(cu, what, cudnnCreateTensorDescriptor, (&L->cd));
    /* no dropout: no random states (PyTorch's set_no_dropout does the same) */
    DNN_TRY(cu, what, cudnnSetDropoutDescriptor, (L->drop, dnn, 0.0f, NULL, 0, 0));
    /* fp32 without TF32: CUDNN_FMA_MATH. Should a cuDNN refuse it for RNNs, its default
     * math, said on stderr (on Ampere and later that may round products to TF32, which
     * the comparison with the CPU in check_cuda_train would then show) */
    st = cudnnSetRNNDescriptor_v8(
        L->rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_SINGLE_INP_BIAS,
        CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
        CUDNN_FMA_MATH, L->in, L->h, L->r, 1, L->drop, CUDNN_RNN_PADDED_IO_DISABLED);
    if (st == CUDNN_STATUS_BAD_PARAM || st == CUDNN_STATUS_NOT_SUPPORTED) {
        fprintf(stderr,
                "shoal-cuda: %s: cudnnSetRNNDescriptor_v8 refused CUDNN_FMA_MATH (%s): "
                "CUDNN_DEFAULT_MATH instead (TF32 possible)\n",
                cu->name, cudnnGetErrorString(st));
        st = cudnnSetRNNDescriptor_v8(
            L->rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_SINGLE_INP_BIAS,
            CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
            CUDNN_DEFAULT_MATH, L->in, L->h, L->r, 1, L->drop, CUDNN_RNN_PADDED_IO_DISABLED);
    }
    if (!dnn_check(cu, st, what, "cudnnSetRNNDescriptor_v8"))
        return sl_cuda_take_error(cu);
    DNN_TRY(cu, what, cudnnGetRNNWeightSpaceSize, (dnn, L->rnn, &L->ws_bytes));
    SL_CUDA_TRY(cu, cudaMalloc(&L->ws, L->ws_bytes), what);
    SL_CUDA_TRY(cu, cudaMalloc(&L->dws, L->ws_bytes), what);
    SL_CUDA_TRY(cu, cudaMemsetAsync(L->ws, 0, L->ws_bytes, cu->stream), what);
    SL_CUDA_TRY(cu, cudaMalloc(&L->seq, (size_t)L->max_b * sizeof(int32_t)), what);
    SL_CUDA_TRY(cu, cudaMalloc(&L->hy, (size_t)L->max_b * (size_t)L->r * sizeof(float)), what);
    SL_CUDA_TRY(cu, cudaMalloc(&L->cy, (size_t)L->max_b * (size_t)L->h * sizeof(float)), what);
    SL_TRY(SL_CALLOC(&L->host_seq, (size_t)L->max_b, "LSTM layer lengths"));
    SL_TRY(map_weights(cu, L));
    /* the temporary spaces of the largest window, so that training allocates none */
    if (!set_window(cu, L, max_t, L->max_b, what))
        return sl_cuda_take_error(cu);
    SL_CUDA_TRY(cu, cudaStreamSynchronize(cu->stream), what);
    return SL_OK;
}

sl_status_t
sl_cuda_lstm_layer_new(void *ctx, void **layer, int in, int h, int p, int max_t, int max_b)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    layer_t *L;
    sl_status_t st;

    *layer = NULL;
    SL_TRY(sl_cuda_take_error(cu));
    if (cu->prec != SL_PREC_FP32)
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "%s: cuDNN's LSTM layers run fp32 here, not %s (cuDNN's RNNs have no "
                          "bf16): device_options.lstm fused or auto",
                          cu->name, cu->prec == SL_PREC_BF16 ? "bf16" : "fp16");
    if (in < 1 || h < 1 || p < 0 || max_t < 1 || max_b < 1)
        return sl_err_set(SL_ERR_INVALID, "%s: lstm_layer_new: sizes in %d, H %d, P %d, T %d, B %d",
                          cu->name, in, h, p, max_t, max_b);
    if (p > h)
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "%s: cuDNN's LSTM projects down only: projection %d > cell %d: "
                          "device_options.lstm fused or auto",
                          cu->name, p, h);
    if (!sl_cuda_enter(cu, "lstm_layer_new"))
        return sl_cuda_take_error(cu);
    SL_TRY(SL_CALLOC(&L, 1, "LSTM layer"));
    L->in = in;
    L->h = h;
    L->p = p;
    L->r = p > 0 ? p : h;
    L->max_b = max_b;
    st = layer_init(cu, L, max_t);
    if (st != SL_OK) {
        sl_cuda_lstm_layer_free(ctx, L);
        cudaGetLastError();
        return st;
    }
    *layer = L;
    return SL_OK;
}

/* Shared entry checks of forward and backward: the device, no recording, fp32. */
static int
layer_enter(sl_cuda_t *cu, const char *what)
{
    if (cu->err != SL_OK || !sl_cuda_enter(cu, what))
        return 0;
    if (cu->recording) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: %s: cuDNN's layers cannot be recorded", cu->name,
                     what);
        return 0;
    }
    if (cu->prec != SL_PREC_FP32) {
        sl_cuda_fail(cu, SL_ERR_UNSUPPORTED, "%s: %s: cuDNN's LSTM layers run fp32 only", cu->name,
                     what);
        return 0;
    }
    return 1;
}

void
sl_cuda_lstm_layer_forward(void *ctx, void *layer, int train, int t, int b, const float *x,
                           const float *w_ih, const float *w_hh, const float *bias,
                           const float *w_proj, const float *h0, const float *c0, float *y,
                           float *h_t, float *c_t)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    layer_t *L = (layer_t *)layer;
    const char *what = "lstm_layer_forward";
    float *const tensors[4] = {(float *)w_ih, (float *)w_hh, (float *)bias, (float *)w_proj};
    float *hy, *cy;

    if (!layer_enter(cu, what))
        return;
    if (L->p > 0 && !w_proj) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: %s: no projection weights", cu->name, what);
        return;
    }
    if (!set_window(cu, L, t, b, what) || !move_pieces(cu, L, 1, tensors))
        return;
    hy = (uintptr_t)h_t % 16 ? L->hy : h_t;
    cy = (uintptr_t)c_t % 16 ? L->cy : c_t;
    if (DNN(cu, what, cudnnRNNForward,
            ((cudnnHandle_t)cu->dnn, L->rnn,
             train ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, L->seq, L->xd, x, L->yd, y,
             L->hd, h0, hy, L->cd, c0, cy, L->ws_bytes, L->ws, L->work_bytes, L->work,
             L->reserve_bytes, L->reserve)) &&
        hy != h_t)
        sl_cuda_check(cu,
                      cudaMemcpyAsync(h_t, hy, (size_t)b * L->r * sizeof(float),
                                      cudaMemcpyDeviceToDevice, cu->stream),
                      what);
    if (cu->err == SL_OK && cy != c_t)
        sl_cuda_check(cu,
                      cudaMemcpyAsync(c_t, cy, (size_t)b * L->h * sizeof(float),
                                      cudaMemcpyDeviceToDevice, cu->stream),
                      what);
}

void
sl_cuda_lstm_layer_backward(void *ctx, void *layer, int t, int b, const float *x, const float *h0,
                            const float *c0, const float *y, const float *dy, float *dx,
                            float *dw_ih, float *dw_hh, float *db, float *dw_proj)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    layer_t *L = (layer_t *)layer;
    cudnnHandle_t dnn = (cudnnHandle_t)cu->dnn;
    const char *what = "lstm_layer_backward";
    float *const tensors[4] = {dw_ih, dw_hh, db, dw_proj};

    if (!layer_enter(cu, what))
        return;
    if (t != L->t || b != L->b || (L->p > 0 && !dw_proj)) {
        sl_cuda_fail(cu, SL_ERR_INVALID,
                     "%s: %s: window %d x %d is not the forward's %d x %d, or no projection",
                     cu->name, what, t, b, L->t, L->b);
        return;
    }
    /* dx; no dhy, dcy (zero) and no dhx, dcx: the carried state is detached */
    if (!DNN(cu, what, cudnnRNNBackwardData_v8,
             (dnn, L->rnn, L->seq, L->yd, y, dy, L->xd, dx, L->hd, h0, NULL, NULL, L->cd, c0, NULL,
              NULL, L->ws_bytes, L->ws, L->work_bytes, L->work, L->reserve_bytes, L->reserve)) ||
        !sl_cuda_check(cu, cudaMemsetAsync(L->dws, 0, L->ws_bytes, cu->stream), what) ||
        !DNN(cu, what, cudnnRNNBackwardWeights_v8,
             (dnn, L->rnn, CUDNN_WGRAD_MODE_ADD, L->seq, L->xd, x, L->hd, h0, L->yd, y, L->ws_bytes,
              L->dws, L->work_bytes, L->work, L->reserve_bytes, L->reserve)))
        return;
    move_pieces(cu, L, 0, tensors);
}

#endif /* HAVE_CUDNN */
