/* Compression of exchanged values: fp32 (a copy), fp16 or bf16 with the
 * compression-scaling factor F of the Baidu paper (section III): values are multiplied
 * by F before the down-cast and divided by F after, so that small gradients keep their
 * precision and large ones do not overflow fp16. Payloads are little-endian. */
#ifndef SL_COMPRESS_H
#define SL_COMPRESS_H

#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

/* Largest |x| * F that the automatic fp16 scale allows: half of fp16's largest finite
 * value (65504), headroom for sums of a few scaled values. */
#define SL_COMPRESS_FP16_HEADROOM 32752.0f

/* Bytes per value of an encoding (4, 2, 2); 0 for int8 / int4 (blocks with scales,
 * sl_quant.h) and an unknown encoding. */
size_t sl_compress_element_bytes(sl_compress_t enc);

/* Payload bytes of n values; 0 for an unknown encoding. */
size_t sl_compress_bytes(sl_compress_t enc, size_t n);

/* The scale F to send n values x (borrowed) with.
 *  - fp32: always 1 (the wire requires scale 1 for fp32 frames).
 *  - cfg_scale > 0 (sync.compression_scale set): cfg_scale, clamped to the finite
 *    positive float range.
 *  - cfg_scale == 0 (automatic), bf16: 1 (bf16 has fp32's exponent range).
 *  - cfg_scale == 0, fp16: with m = max|x|, the largest power of two F such that
 *    m * F < SL_COMPRESS_FP16_HEADROOM (= 65504 / 2), capped to [2^-126, 2^126].
 *    Large values are scaled down so that nothing overflows; small ones (gradients of
 *    1e-7, below fp16's normal range 2^-14) are scaled up out of the subnormal range,
 *    where fp16 would keep only a few bits. A power of two makes the multiply and the
 *    divide exact, so the only rounding is the down-cast itself. F = 1 when all x are
 *    zero (or n == 0), and when some x is inf or NaN: those travel as inf/NaN so the
 *    receiver sees them. */
float sl_compress_scale(sl_compress_t enc, double cfg_scale, const float *x, size_t n);

/* Writes n values x (borrowed), each multiplied by scale and rounded to nearest even,
 * into dst (sl_compress_bytes(enc, n) bytes, caller's, any alignment). fp32 is a plain
 * copy (scale ignored). fp16 values whose scaled magnitude is 65520 or more become
 * +-inf; NaN stays NaN. */
void sl_compress_encode(sl_compress_t enc, float scale, const float *x, size_t n, void *dst);

/* Reads n values from src (bytes bytes, e.g. a received frame's payload: any alignment)
 * into x (caller's, n floats), dividing by scale. Never trusts its input: SL_ERR_FORMAT
 * when bytes != sl_compress_bytes(enc, n), when the encoding is unknown, when scale is
 * not finite and > 0, or when scale != 1 for fp32; x is then left unchanged. */
sl_status_t sl_compress_decode(sl_compress_t enc, float scale, const void *src, size_t bytes,
                               float *x, size_t n);

/* The wire header's encoding (sl_wire_encoding_t: SL_WIRE_FP32/FP16/BF16/INT8/INT4) for enc;
 * 0 for an unknown encoding. */
int sl_compress_wire_encoding(sl_compress_t enc);

/* The inverse, for a received header: *enc for a wire encoding, SL_ERR_FORMAT when it
 * is not fp32, fp16 or bf16. */
sl_status_t sl_compress_from_wire(unsigned wire_encoding, sl_compress_t *enc);

#endif
