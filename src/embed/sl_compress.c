/* Compression of exchanged values: fp32 / fp16 / bf16 payloads with the scaling
 * factor F (Baidu, "Language Modeling at Scale", section III). */
#include "embed/sl_compress.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_half.h"
#include "transport/sl_wire.h"

/* Powers of two that F may take in automatic mode: 1 / F stays a normal float. */
#define MIN_EXP (-126)
#define MAX_EXP 126

size_t
sl_compress_element_bytes(sl_compress_t enc)
{
    switch (enc) {
    case SL_COMPRESS_FP32:
        return 4;
    case SL_COMPRESS_FP16:
    case SL_COMPRESS_BF16:
        return 2;
    case SL_COMPRESS_INT8: /* blocks with scales: src/embed/sl_quant.h */
    case SL_COMPRESS_INT4:
        return 0;
    }
    return 0;
}

size_t
sl_compress_bytes(sl_compress_t enc, size_t n)
{
    return sl_compress_element_bytes(enc) * n;
}

/* F = 2^k for the largest k with m * 2^k < H (m = max|x|, H the headroom). Why the
 * loops: frexp of H / m gives k within one step, but H / m is rounded, so the exact
 * test m * 2^k < H (exact in double) settles it, also at exact powers of two where a
 * log2 would round either way. */
static float
fp16_auto_scale(const float *x, size_t n)
{
    float m = 0.0f;
    int e, k;

    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);

        if (!isfinite(a))
            return 1.0f;
        if (a > m)
            m = a;
    }
    if (m == 0.0f)
        return 1.0f;
    (void)frexpf(SL_COMPRESS_FP16_HEADROOM / m, &e);
    k = e;
    while (k > MIN_EXP && ldexp((double)m, k) >= (double)SL_COMPRESS_FP16_HEADROOM)
        k--;
    while (k < MAX_EXP && ldexp((double)m, k + 1) < (double)SL_COMPRESS_FP16_HEADROOM)
        k++;
    if (k < MIN_EXP)
        k = MIN_EXP;
    if (k > MAX_EXP)
        k = MAX_EXP;
    return ldexpf(1.0f, k);
}

float
sl_compress_scale(sl_compress_t enc, double cfg_scale, const float *x, size_t n)
{
    if (enc == SL_COMPRESS_FP32)
        return 1.0f;
    if (cfg_scale > 0.0) {
        if (cfg_scale > FLT_MAX)
            return FLT_MAX;
        if (cfg_scale < FLT_MIN)
            return FLT_MIN;
        return (float)cfg_scale;
    }
    if (enc == SL_COMPRESS_FP16)
        return fp16_auto_scale(x, n);
    return 1.0f;
}

void
sl_compress_encode(sl_compress_t enc, float scale, const float *x, size_t n, void *dst)
{
    unsigned char *p = dst;

    switch (enc) {
    case SL_COMPRESS_FP32:
        for (size_t i = 0; i < n; i++)
            sl_put_u32(p + 4 * i, sl_f32_bits(x[i]));
        break;
    case SL_COMPRESS_FP16:
        for (size_t i = 0; i < n; i++)
            sl_put_u16(p + 2 * i, sl_fp32_to_fp16(x[i] * scale));
        break;
    case SL_COMPRESS_BF16:
        for (size_t i = 0; i < n; i++)
            sl_put_u16(p + 2 * i, sl_fp32_to_bf16(x[i] * scale));
        break;
    case SL_COMPRESS_INT8: /* no element encoding: sl_quant.h */
    case SL_COMPRESS_INT4:
        break;
    }
}

sl_status_t
sl_compress_decode(sl_compress_t enc, float scale, const void *src, size_t bytes, float *x,
                   size_t n)
{
    const unsigned char *p = src;
    size_t eb = sl_compress_element_bytes(enc), want = eb * n;

    if (eb == 0)
        return sl_err_set(SL_ERR_FORMAT, "compressed values: unknown encoding %d", (int)enc);
    if (n > SIZE_MAX / eb)
        return sl_err_set(SL_ERR_FORMAT, "compressed values: %zu values overflow", n);
    if (bytes != want)
        return sl_err_set(SL_ERR_FORMAT,
                          "compressed values: %s payload of %zu bytes for %zu values "
                          "(want %zu)",
                          sl_compress_name(enc), bytes, n, want);
    if (!isfinite(scale) || !(scale > 0.0f))
        return sl_err_set(SL_ERR_FORMAT, "compressed values: %s scale %g is not finite and > 0",
                          sl_compress_name(enc), (double)scale);
    if (enc == SL_COMPRESS_FP32 && scale != 1.0f)
        return sl_err_set(SL_ERR_FORMAT, "compressed values: fp32 scale %g, must be 1",
                          (double)scale);
    switch (enc) {
    case SL_COMPRESS_FP32:
        for (size_t i = 0; i < n; i++)
            x[i] = sl_f32_from_bits(sl_get_u32(p + 4 * i));
        break;
    case SL_COMPRESS_FP16:
        for (size_t i = 0; i < n; i++)
            x[i] = sl_fp16_to_fp32(sl_get_u16(p + 2 * i)) / scale;
        break;
    case SL_COMPRESS_BF16:
        for (size_t i = 0; i < n; i++)
            x[i] = sl_bf16_to_fp32(sl_get_u16(p + 2 * i)) / scale;
        break;
    case SL_COMPRESS_INT8: /* refused above: element bytes 0 */
    case SL_COMPRESS_INT4:
        break;
    }
    return SL_OK;
}

int
sl_compress_wire_encoding(sl_compress_t enc)
{
    switch (enc) {
    case SL_COMPRESS_FP32:
        return SL_WIRE_FP32;
    case SL_COMPRESS_FP16:
        return SL_WIRE_FP16;
    case SL_COMPRESS_BF16:
        return SL_WIRE_BF16;
    case SL_COMPRESS_INT8:
        return SL_WIRE_INT8;
    case SL_COMPRESS_INT4:
        return SL_WIRE_INT4;
    }
    return 0;
}

sl_status_t
sl_compress_from_wire(unsigned wire_encoding, sl_compress_t *enc)
{
    switch (wire_encoding) {
    case SL_WIRE_FP32:
        *enc = SL_COMPRESS_FP32;
        return SL_OK;
    case SL_WIRE_FP16:
        *enc = SL_COMPRESS_FP16;
        return SL_OK;
    case SL_WIRE_BF16:
        *enc = SL_COMPRESS_BF16;
        return SL_OK;
    }
    return sl_err_set(SL_ERR_FORMAT,
                      "compressed values: encoding %u is not fp32, fp16 "
                      "or bf16",
                      wire_encoding);
}
