/* The CUDA backend's 16-bit conversions: to_half / from_half (the ops) and the packing
 * of gemm's operands into bf16 / fp16 words, as stored (sl_cuda_pack_half) or transposed
 * (sl_cuda_pack_half_t, for gemm_packed's one layout of op(B)). */
#include "config.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/sl_cuda_ctx.h"

/* The same rounding as src/common/sl_half.h: nearest even, fp16 overflow to inf. */
template <int BF16>
__device__ __forceinline__ uint16_t
to_bits(float f)
{
    if (BF16)
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    return __half_as_ushort(__float2half_rn(f));
}

template <int BF16>
__device__ __forceinline__ float
from_bits(uint16_t h)
{
    if (BF16)
        return __bfloat162float(__ushort_as_bfloat16(h));
    return __half2float(__ushort_as_half(h));
}

template <int BF16>
__global__ void
to_half_kernel(size_t n, float scale, const float *__restrict__ src, uint16_t *__restrict__ dst)
{
    FOR_EACH(i, n)
    {
        dst[i] = to_bits<BF16>(src[i] * scale);
    }
}

template <int BF16>
__global__ void
from_half_kernel(size_t n, float inv_scale, const uint16_t *__restrict__ src,
                 float *__restrict__ dst)
{
    FOR_EACH(i, n)
    {
        dst[i] = from_bits<BF16>(src[i]) * inv_scale;
    }
}

static int
half_format_ok(sl_cuda_t *cu, sl_precision_t fmt, const char *what)
{
    if (fmt == SL_PREC_BF16 || fmt == SL_PREC_FP16)
        return 1;
    sl_cuda_fail(cu, SL_ERR_INVALID, "%s: %s: format %d is not bf16 or fp16", cu->name, what,
                 (int)fmt);
    return 0;
}

void
sl_cuda_to_half(void *ctx, size_t n, sl_precision_t fmt, float scale, const float *src,
                uint16_t *dst)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (!half_format_ok(cu, fmt, "to_half") || n == 0 || !sl_cuda_enter(cu, "to_half"))
        return;
    if (fmt == SL_PREC_BF16)
        to_half_kernel<1><<<grid_for(n), NT, 0, cu->stream>>>(n, scale, src, dst);
    else
        to_half_kernel<0><<<grid_for(n), NT, 0, cu->stream>>>(n, scale, src, dst);
    sl_cuda_launched(cu, "to_half");
}

void
sl_cuda_from_half(void *ctx, size_t n, sl_precision_t fmt, float inv_scale, const uint16_t *src,
                  float *dst)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    if (!half_format_ok(cu, fmt, "from_half") || n == 0 || !sl_cuda_enter(cu, "from_half"))
        return;
    if (fmt == SL_PREC_BF16)
        from_half_kernel<1><<<grid_for(n), NT, 0, cu->stream>>>(n, inv_scale, src, dst);
    else
        from_half_kernel<0><<<grid_for(n), NT, 0, cu->stream>>>(n, inv_scale, src, dst);
    sl_cuda_launched(cu, "from_half");
}

/* Packs the first cols columns of a (rows, ld) matrix into (rows, ldp) 16-bit words:
 * blockIdx.y walks the rows, the threads of blockIdx.x the columns (no division per
 * element: an operand is packed at every gemm). */
template <int BF16>
__global__ void
pack_half_kernel(int rows, int cols, const float *__restrict__ src, int ld,
                 uint16_t *__restrict__ dst, int ldp)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *s = src + (size_t)r * (size_t)ld;
        uint16_t *t = dst + (size_t)r * (size_t)ldp;

        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += blockDim.x * gridDim.x)
            t[c] = to_bits<BF16>(s[c]);
    }
}

void
sl_cuda_pack_half(sl_cuda_t *cu, sl_precision_t fmt, int rows, int cols, const float *src, int ld,
                  void *dst, int ldp)
{
    int bx = (cols + NT - 1) / NT;
    dim3 grid((unsigned)(bx < 32 ? bx : 32), (unsigned)(rows < 65535 ? rows : 65535));

    if (rows <= 0 || cols <= 0)
        return;
    if (fmt == SL_PREC_BF16)
        pack_half_kernel<1><<<grid, NT, 0, cu->stream>>>(rows, cols, src, ld, (uint16_t *)dst, ldp);
    else
        pack_half_kernel<0><<<grid, NT, 0, cu->stream>>>(rows, cols, src, ld, (uint16_t *)dst, ldp);
    sl_cuda_launched(cu, "gemm (16-bit operands)");
}

/* Transposes while it packs: dst (cols, ldp) row j = column j of src (rows, ld), in
 * 16-bit words. Tiles of 32 x 32 through shared memory, so that reads and writes both
 * go along rows; blockIdx.x walks src's rows (any count), blockIdx.y its columns. */
enum { TILE = 32, TILE_ROWS = 8 };

template <int BF16>
__global__ void
pack_half_t_kernel(int rows, int cols, const float *__restrict__ src, int ld,
                   uint16_t *__restrict__ dst, int ldp)
{
    __shared__ float tile[TILE][TILE + 1];
    int r0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;

    for (int y = threadIdx.y; y < TILE; y += TILE_ROWS) {
        int r = r0 + y, c = c0 + threadIdx.x;

        if (r < rows && c < cols)
            tile[y][threadIdx.x] = src[(size_t)r * (size_t)ld + c];
    }
    __syncthreads();
    for (int y = threadIdx.y; y < TILE; y += TILE_ROWS) {
        int c = c0 + y, r = r0 + threadIdx.x;

        if (r < rows && c < cols)
            dst[(size_t)c * (size_t)ldp + r] = to_bits<BF16>(tile[threadIdx.x][y]);
    }
}

void
sl_cuda_pack_half_t(sl_cuda_t *cu, sl_precision_t fmt, int rows, int cols, const float *src, int ld,
                    void *dst, int ldp)
{
    dim3 grid((unsigned)((rows + TILE - 1) / TILE), (unsigned)((cols + TILE - 1) / TILE));
    dim3 block(TILE, TILE_ROWS);

    if (rows <= 0 || cols <= 0)
        return;
    if (grid.y > 65535) {
        sl_cuda_fail(cu, SL_ERR_INVALID, "%s: pack_b: %d columns, at most %d", cu->name, cols,
                     65535 * TILE);
        return;
    }
    if (fmt == SL_PREC_BF16)
        pack_half_t_kernel<1>
            <<<grid, block, 0, cu->stream>>>(rows, cols, src, ld, (uint16_t *)dst, ldp);
    else
        pack_half_t_kernel<0>
            <<<grid, block, 0, cu->stream>>>(rows, cols, src, ld, (uint16_t *)dst, ldp);
    sl_cuda_launched(cu, "pack_b");
}
