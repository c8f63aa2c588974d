/* The CUDA backend's own kernels: LSTM cell forward/backward, embedding gather and
 * unique-row scatter-add, full and sampled softmax cross-entropy, dropout (the CPU's
 * counter RNG, ported bit for bit), optimizer updates, element-wise ops, sums of
 * squares (the 16-bit conversions are in sl_cuda_half.cu). Each op queues on the
 * backend's stream; the ones that return a number to the host (sumsq, the softmax
 * losses) wait for it.
 *
 * The cell here is per time step (the model interleaves the recurrent gemm, the cell
 * and the projection, and backward takes dc in and out per step); cuDNN's RNN API runs
 * whole layers over all T steps with its own weight layout, so it is a separate op,
 * lstm_layer_* in sl_cuda_rnn.cu (device_options.lstm picks one or the other). cuDNN's
 * softmax would only replace the max/sum passes that are fused here with the loss and
 * the gradient. */
#include "config.h"

#include <math.h>

#include "kernels/cuda/sl_cuda_ctx.h"

/* Row kernels (one block per row, grid-stride over rows): n blocks up to cap. */
static int
rows_grid(int n, int cap)
{
    return n < 1 ? 1 : n > cap ? cap : n;
}

/* Sum (or max) over the block, every thread gets the result. blockDim.x is a multiple
 * of 32; red holds 32 values. The leading barrier lets red be reused call after call. */
template <typename T>
__device__ T
block_sum(T v, T *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;

    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float
block_max(float v, float *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;

    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- element-wise ------------------------------------------------------------------ */

__global__ void
axpy_kernel(size_t n, float alpha, const float *__restrict__ x, float *__restrict__ y)
{
    FOR_EACH(i, n)
    {
        y[i] += alpha * x[i];
    }
}

__global__ void
scale_kernel(size_t n, float alpha, float *x)
{
    FOR_EACH(i, n)
    {
        x[i] *= alpha;
    }
}

void
sl_cuda_axpy(void *ctx, size_t n, float alpha, const float *x, float *y)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (n == 0 || !sl_cuda_enter(cu, "axpy"))
        return;
    axpy_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, alpha, x, y);
    sl_cuda_launched(cu, "axpy");
}

void
sl_cuda_scale(void *ctx, size_t n, float alpha, float *x)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (n == 0 || !sl_cuda_enter(cu, "scale"))
        return;
    scale_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, alpha, x);
    sl_cuda_launched(cu, "scale");
}

/* Per-block sums of squares in double, one partial per block (fixed grid: repeatable). */
__global__ void
sumsq_kernel(size_t n, const float *__restrict__ x, double *partial)
{
    __shared__ double red[32];
    double s = 0;

    FOR_EACH(i, n)
    {
        s += (double)x[i] * (double)x[i];
    }
    s = block_sum(s, red);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

double
sl_cuda_sumsq(void *ctx, size_t n, const float *x)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    int blocks = sl_cuda_blocks(n, SL_CUDA_MAX_BLOCKS);
    sl_cuda_result_t r;

    if (n == 0)
        return 0.0;
    if (!sl_cuda_enter(cu, "sumsq"))
        return NAN;
    sumsq_kernel<<<blocks, NT, 0, cu->stream>>>(n, x, cu->partial);
    if (!sl_cuda_launched(cu, "sumsq") || !sl_cuda_finish_sum(cu, blocks, &r, "sumsq"))
        return NAN;
    return r.sum;
}

/* Partials added by one block in a fixed order, for every reduction. */
__global__ void
finish_sum_kernel(int nparts, const double *partial, sl_cuda_result_t *res)
{
    __shared__ double red[32];
    double s = 0;

    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += partial[i];
    s = block_sum(s, red);
    if (threadIdx.x == 0)
        res->sum = s;
}

int
sl_cuda_finish_sum(sl_cuda_t *cu, int nparts, sl_cuda_result_t *out, const char *what)
{
    finish_sum_kernel<<<1, NT, 0, cu->stream>>>(nparts, cu->partial, cu->d_result);
    if (!sl_cuda_launched(cu, what) ||
        !sl_cuda_check(cu,
                       cudaMemcpyAsync(cu->h_result, cu->d_result, sizeof *cu->h_result,
                                       cudaMemcpyDeviceToHost, cu->stream),
                       what) ||
        !sl_cuda_check(cu, cudaStreamSynchronize(cu->stream), what))
        return 0;
    *out = *cu->h_result;
    return 1;
}

/* ---- bias -------------------------------------------------------------------------- */

__global__ void
add_bias_kernel(int rows, int cols, const float *__restrict__ bias, float *__restrict__ x)
{
    size_t n = (size_t)rows * (size_t)cols;

    FOR_EACH(i, n)
    {
        x[i] += bias[i % (size_t)cols];
    }
}

void
sl_cuda_add_bias(void *ctx, int rows, int cols, const float *bias, float *x)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    size_t n = (size_t)rows * (size_t)cols;

    if (rows <= 0 || cols <= 0 || !sl_cuda_enter(cu, "add_bias"))
        return;
    add_bias_kernel<<<grid_for(n), NT, 0, cu->stream>>>(rows, cols, bias, x);
    sl_cuda_launched(cu, "add_bias");
}

__global__ void
fill_kernel(size_t n, float value, float *x)
{
    FOR_EACH(i, n)
    {
        x[i] = value;
    }
}

void
sl_cuda_fill(sl_cuda_t *cu, size_t n, float value, float *x)
{
    if (n == 0)
        return;
    fill_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, value, x);
    sl_cuda_launched(cu, "fill");
}

/* ---- LSTM cell --------------------------------------------------------------------- */

__device__ __forceinline__ float
sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Element (r, j) of a (b, h) cell; gates row r holds the blocks i, f, g, o (h each). */
__global__ void
lstm_fwd_kernel(int b, int h, float *__restrict__ gates, const float *__restrict__ c_prev,
                float *__restrict__ c, float *__restrict__ m)
{
    size_t n = (size_t)b * (size_t)h;

    FOR_EACH(e, n)
    {
        size_t r = e / (size_t)h, j = e % (size_t)h;
        float *gt = gates + r * 4 * (size_t)h;
        float i = sigmoidf(gt[j]), f = sigmoidf(gt[h + j]);
        float g = tanhf(gt[2 * h + j]), o = sigmoidf(gt[3 * h + j]);
        float cc = f * c_prev[e] + i * g;

        gt[j] = i;
        gt[h + j] = f;
        gt[2 * h + j] = g;
        gt[3 * h + j] = o;
        c[e] = cc;
        m[e] = o * tanhf(cc);
    }
}

void
sl_cuda_lstm_cell_forward(void *ctx, int b, int h, float *gates, const float *c_prev, float *c,
                          float *m)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    size_t n = (size_t)b * (size_t)h;

    if (b <= 0 || h <= 0 || !sl_cuda_enter(cu, "lstm_cell_forward"))
        return;
    lstm_fwd_kernel<<<grid_for(n), NT, 0, cu->stream>>>(b, h, gates, c_prev, c, m);
    sl_cuda_launched(cu, "lstm_cell_forward");
}

/* The CPU's formulas (kernels/cpu/sl_cpu_lstm.c, lstm_bwd_row), tanh(c) recomputed. */
__global__ void
lstm_bwd_kernel(int b, int h, const float *__restrict__ acts, const float *__restrict__ c_prev,
                const float *__restrict__ c, const float *__restrict__ dm, float *__restrict__ dc,
                float *__restrict__ dgates)
{
    size_t n = (size_t)b * (size_t)h;

    FOR_EACH(e, n)
    {
        size_t r = e / (size_t)h, j = e % (size_t)h;
        const float *a = acts + r * 4 * (size_t)h;
        float *d = dgates + r * 4 * (size_t)h;
        float i = a[j], f = a[h + j], g = a[2 * h + j], o = a[3 * h + j];
        float tc = tanhf(c[e]);
        float dct = dc[e] + dm[e] * o * (1.0f - tc * tc);

        d[j] = dct * g * i * (1.0f - i);
        d[h + j] = dct * c_prev[e] * f * (1.0f - f);
        d[2 * h + j] = dct * i * (1.0f - g * g);
        d[3 * h + j] = dm[e] * tc * o * (1.0f - o);
        dc[e] = dct * f;
    }
}

void
sl_cuda_lstm_cell_backward(void *ctx, int b, int h, const float *gates, const float *c_prev,
                           const float *c, const float *dm, float *dc, float *dgates)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    size_t n = (size_t)b * (size_t)h;

    if (b <= 0 || h <= 0 || !sl_cuda_enter(cu, "lstm_cell_backward"))
        return;
    lstm_bwd_kernel<<<grid_for(n), NT, 0, cu->stream>>>(b, h, gates, c_prev, c, dm, dc, dgates);
    sl_cuda_launched(cu, "lstm_cell_backward");
}

/* ---- embeddings -------------------------------------------------------------------- */

__global__ void
gather_kernel(int n, int d, const float *__restrict__ table, const int32_t *__restrict__ ids,
              float *__restrict__ out)
{
    size_t total = (size_t)n * (size_t)d;

    FOR_EACH(e, total)
    {
        size_t r = e / (size_t)d, j = e % (size_t)d;

        out[e] = table[(size_t)ids[r] * (size_t)d + j];
    }
}

void
sl_cuda_embedding_gather(void *ctx, int n, int d, const float *table, const int32_t *ids,
                         float *out)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    size_t total = (size_t)n * (size_t)d;

    if (n <= 0 || d <= 0 || !sl_cuda_enter(cu, "embedding_gather"))
        return;
    gather_kernel<<<grid_for(total), NT, 0, cu->stream>>>(n, d, table, ids, out);
    sl_cuda_launched(cu, "embedding_gather");
}

/* A block per unique row (grid-stride over them) and column tile (blockIdx.y): each
 * thread owns one column of grad row rows[u] and adds its source rows in list order,
 * so no atomics, nothing serialised on a frequent word beyond its own column, and the
 * CPU's order of additions. The loads of four source rows are issued before their
 * additions: a frequent word's sum is a chain of loads, and this keeps four in flight. */
__global__ void
scatter_kernel(int nrows, int d, const int32_t *__restrict__ rows, const int32_t *__restrict__ off,
               const int32_t *__restrict__ pos, const float *__restrict__ src,
               float *__restrict__ grad)
{
    int j = blockIdx.y * blockDim.x + threadIdx.x;

    if (j >= d)
        return;
    for (int u = blockIdx.x; u < nrows; u += gridDim.x) {
        float *g = grad + (size_t)rows[u] * (size_t)d + j;
        const float *s = src + j;
        int32_t p = off[u], p1 = off[u + 1];
        float acc = *g;

        for (; p + 4 <= p1; p += 4) {
            float v0 = s[(size_t)pos[p] * (size_t)d], v1 = s[(size_t)pos[p + 1] * (size_t)d];
            float v2 = s[(size_t)pos[p + 2] * (size_t)d], v3 = s[(size_t)pos[p + 3] * (size_t)d];

            acc += v0;
            acc += v1;
            acc += v2;
            acc += v3;
        }
        for (; p < p1; p++)
            acc += s[(size_t)pos[p] * (size_t)d];
        *g = acc;
    }
}

void
sl_cuda_embedding_scatter_add(void *ctx, int nrows, int d, const int32_t *rows, const int32_t *off,
                              const int32_t *pos, const float *src, float *grad)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    int threads = d >= NT ? NT : (d + 31) / 32 * 32;
    dim3 grid((unsigned)rows_grid(nrows, 65535), (unsigned)((d + threads - 1) / threads));

    if (nrows <= 0 || d <= 0 || !sl_cuda_enter(cu, "embedding_scatter_add"))
        return;
    if (grid.y > 65535) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: embedding_scatter_add: rows of %d, at most %d",
                     cu->name, d, 65535 * NT);
        return;
    }
    scatter_kernel<<<grid, threads, 0, cu->stream>>>(nrows, d, rows, off, pos, src, grad);
    sl_cuda_launched(cu, "embedding_scatter_add");
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

/* One block per row (grid-stride over rows): the bias added in place and the max, then
 * sum of exp, both reduced over the block; the row's loss log(sum) + max - x[t] in
 * double by thread 0, which keeps its block's total; with a gradient, a third pass
 * writes gs * softmax - gs * onehot (exp recomputed rather than stored: one write pass
 * fewer). Each thread reads back only the columns it wrote, and x[t] is read (biased)
 * after the barriers of block_max. A target outside [0, v) skips its row and is
 * reported (the CPU asserts; here the host learns it after the copy-back). */
__global__ void
xent_kernel(int n, int v, float *logits, int ld, const float *__restrict__ bias,
            const int32_t *__restrict__ targets, float gs, double *partial, sl_cuda_result_t *res)
{
    __shared__ float red[32];
    double acc = 0;

    for (int row = blockIdx.x; row < n; row += gridDim.x) {
        float *x = logits + (size_t)row * (size_t)ld;
        int t = targets[row];
        float xt, m = -INFINITY, s = 0.0f;

        if (t < 0 || t >= v) {
            if (threadIdx.x == 0)
                atomicCAS(&res->bad, 0, row + 1);
            continue;
        }
        for (int j = threadIdx.x; j < v; j += blockDim.x) {
            float z = x[j];

            if (bias) {
                z += bias[j];
                x[j] = z;
            }
            m = fmaxf(m, z);
        }
        m = block_max(m, red);
        xt = x[t];
        for (int j = threadIdx.x; j < v; j += blockDim.x)
            s += expf(x[j] - m);
        s = block_sum(s, red); /* its barriers also order the reads of x[t] before writes */
        if (threadIdx.x == 0)
            acc += log((double)s) + (double)m - (double)xt;
        if (gs != 0.0f) {
            float k = gs / s;

            for (int j = threadIdx.x; j < v; j += blockDim.x) {
                float e = expf(x[j] - m) * k;

                x[j] = j == t ? e - gs : e;
            }
        }
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = acc;
}

void
sl_cuda_softmax_xent(void *ctx, int n, int v, float *logits, int ld, const float *bias,
                     const int32_t *targets, float grad_scale, double *loss_sum)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    int blocks = rows_grid(n, SL_CUDA_MAX_BLOCKS);
    sl_cuda_result_t r;

    *loss_sum = 0.0;
    if (n <= 0 || v <= 0)
        return;
    *loss_sum = NAN;
    if (!sl_cuda_enter(cu, "softmax_xent") ||
        !sl_cuda_check(cu, cudaMemsetAsync(cu->d_result, 0, sizeof *cu->d_result, cu->stream),
                       "softmax_xent"))
        return;
    xent_kernel<<<blocks, NT, 0, cu->stream>>>(n, v, logits, ld, bias, targets, grad_scale,
                                               cu->partial, cu->d_result);
    if (!sl_cuda_launched(cu, "softmax_xent") ||
        !sl_cuda_finish_sum(cu, blocks, &r, "softmax_xent"))
        return;
    if (r.bad) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: softmax_xent: target of row %d outside [0, %d)",
                     cu->name, r.bad - 1, v);
        return;
    }
    *loss_sum = r.sum;
}

/* Sampled softmax, one block per row of w = 1 + s columns, as the CPU: column 0 is the
 * label, logq subtracted, accidental hits (samples[j] == target) set to -inf in place,
 * whose exp is exactly 0, so they get no probability and a zero gradient. Each thread
 * owns the columns j = tid + k * blockDim.x through all passes, so the adjusted
 * logits it writes in the first pass are its own to read later. */
__global__ void
sampled_kernel(int n, int s, float *logits, const int32_t *__restrict__ targets,
               const int32_t *__restrict__ samples, const float *__restrict__ logq_true,
               const float *__restrict__ logq_samp, float gs, double *partial)
{
    __shared__ float red[32];
    const int w = s + 1;
    double acc = 0;

    for (int row = blockIdx.x; row < n; row += gridDim.x) {
        float *x = logits + (size_t)row * (size_t)w;
        int32_t t = targets[row];
        float x0 = 0.0f, m = -INFINITY, sum = 0.0f;

        for (int j = threadIdx.x; j < w; j += blockDim.x) {
            float a;

            if (j == 0)
                a = x0 = x[0] - logq_true[row];
            else
                a = samples[j - 1] == t ? -INFINITY : x[j] - logq_samp[j - 1];
            x[j] = a;
            m = fmaxf(m, a);
        }
        m = block_max(m, red);
        for (int j = threadIdx.x; j < w; j += blockDim.x)
            sum += expf(x[j] - m);
        sum = block_sum(sum, red);
        if (threadIdx.x == 0) /* thread 0 owns column 0, so x0 is its own */
            acc += log((double)sum) + (double)m - (double)x0;
        if (gs != 0.0f) {
            float k = gs / sum;

            for (int j = threadIdx.x; j < w; j += blockDim.x) {
                float e = expf(x[j] - m) * k;

                x[j] = j == 0 ? e - gs : e;
            }
        }
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = acc;
}

void
sl_cuda_sampled_softmax_xent(void *ctx, int n, int s, float *logits, const int32_t *targets,
                             const int32_t *samples, const float *logq_true, const float *logq_samp,
                             float grad_scale, double *loss_sum)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    int blocks = rows_grid(n, SL_CUDA_MAX_BLOCKS);
    int threads = s + 1 >= NT ? NT : (s + 1 + 31) / 32 * 32;
    sl_cuda_result_t r;

    *loss_sum = 0.0;
    if (n <= 0 || s < 0)
        return;
    *loss_sum = NAN;
    if (!sl_cuda_enter(cu, "sampled_softmax_xent"))
        return;
    sampled_kernel<<<blocks, threads, 0, cu->stream>>>(n, s, logits, targets, samples, logq_true,
                                                       logq_samp, grad_scale, cu->partial);
    if (!sl_cuda_launched(cu, "sampled_softmax_xent") ||
        !sl_cuda_finish_sum(cu, blocks, &r, "sampled_softmax_xent"))
        return;
    *loss_sum = r.sum;
}

/* ---- dropout ----------------------------------------------------------------------- */

/* src/common/sl_rng.h's sl_mix64 / sl_rng_at / sl_rng_float_at on the device, the same
 * integer operations, so masks match the CPU's bit for bit. mixed_key is sl_mix64(key),
 * computed once on the host. */
__device__ __forceinline__ uint64_t
mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

__device__ __forceinline__ float
rng_float_at(uint64_t mixed_key, uint64_t i)
{
    return (float)(mix64(mixed_key ^ (i * 0xd1342543de82ef95ULL + 1)) >> 40) * (1.0f / 16777216.0f);
}

__global__ void
dropout_kernel(size_t n, float p, float keep_scale, uint64_t mixed_key, float *x)
{
    FOR_EACH(i, n)
    {
        x[i] = rng_float_at(mixed_key, i) >= p ? x[i] * keep_scale : 0.0f;
    }
}

__global__ void
rng_kernel(size_t n, uint64_t mixed_key, float *out)
{
    FOR_EACH(i, n)
    {
        out[i] = rng_float_at(mixed_key, i);
    }
}

/* The host side of sl_mix64, the same constants (a copy: sl_rng.h is C, not device). */
static uint64_t
host_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void
sl_cuda_dropout(void *ctx, size_t n, float p, uint64_t key, float *x)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (n == 0 || p <= 0.0f || !sl_cuda_enter(cu, "dropout"))
        return;
    if (p >= 1.0f) { /* every draw is < 1 */
        sl_cuda_check(cu, cudaMemsetAsync(x, 0, n * sizeof(float), cu->stream), "dropout");
        return;
    }
    dropout_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, p, 1.0f / (1.0f - p), host_mix64(key), x);
    sl_cuda_launched(cu, "dropout");
}

void
sl_cuda_rng_fill(sl_cuda_t *cu, uint64_t key, size_t n, float *out)
{
    if (n == 0 || !sl_cuda_enter(cu, "rng"))
        return;
    rng_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, host_mix64(key), out);
    sl_cuda_launched(cu, "rng");
}

/* ---- optimizers -------------------------------------------------------------------- */

void
sl_cuda_sgd_update(void *ctx, size_t n, float lr, const float *g, float *w)
{
    sl_cuda_axpy(ctx, n, -lr, g, w); /* negation is exact: the CPU does the same */
}

__global__ void
adagrad_kernel(size_t n, float lr, float eps, const float *__restrict__ g, float *__restrict__ acc,
               float *__restrict__ w)
{
    FOR_EACH(i, n)
    {
        float a = acc[i] + g[i] * g[i];

        acc[i] = a;
        w[i] -= lr * g[i] / (sqrtf(a) + eps);
    }
}

void
sl_cuda_adagrad_update(void *ctx, size_t n, float lr, float eps, const float *g, float *acc,
                       float *w)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (n == 0 || !sl_cuda_enter(cu, "adagrad_update"))
        return;
    adagrad_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, lr, eps, g, acc, w);
    sl_cuda_launched(cu, "adagrad_update");
}

/* PyTorch's form as on the CPU: w -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps). */
__global__ void
adam_kernel(size_t n, float b1, float b2, float eps, float step, float isb,
            const float *__restrict__ g, float *__restrict__ m, float *__restrict__ v,
            float *__restrict__ w)
{
    FOR_EACH(i, n)
    {
        float mi = b1 * m[i] + (1.0f - b1) * g[i];
        float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];

        m[i] = mi;
        v[i] = vi;
        w[i] -= step * mi / (sqrtf(vi) * isb + eps);
    }
}

void
sl_cuda_adam_update(void *ctx, size_t n, float lr, float b1, float b2, float eps, long t,
                    const float *g, float *m, float *v, float *w)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);

    if (n == 0 || !sl_cuda_enter(cu, "adam_update"))
        return;
    adam_kernel<<<grid_for(n), NT, 0, cu->stream>>>(n, b1, b2, eps, (float)(lr / bc1),
                                                    (float)(1.0 / sqrt(bc2)), g, m, v, w);
    sl_cuda_launched(cu, "adam_update");
}
