/* IEEE half (fp16) and bfloat16 <-> fp32 conversion on the host, rounding to nearest
 * even, as the GPU's conversions do: finite values too large for fp16 become +-inf,
 * NaN stays NaN (quiet), fp16 subnormals are kept. bf16 is the top half of an fp32, so
 * it has fp32's range and 8 bits of mantissa. */
#ifndef SL_HALF_H
#define SL_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t
sl_f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float
sl_f32_from_bits(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t
sl_fp32_to_bf16(float f)
{
    uint32_t u = sl_f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static inline float
sl_bf16_to_fp32(uint16_t h)
{
    return sl_f32_from_bits((uint32_t)h << 16);
}

/* Why the bit work: fp16's 5-bit exponent covers 2^-24 (smallest subnormal) to 65504;
 * values below half the smallest subnormal round to zero, values at or above 65520 round
 * to infinity. */
static inline uint16_t
sl_fp32_to_fp16(float f)
{
    uint32_t u = sl_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;

    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (rounds past 65504) or inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
        uint32_t shift, mant, half, rest;

        if (a < 0x33000000u) /* below 2^-25: rounds to zero */
            return (uint16_t)sign;
        shift = 126u - (a >> 23);        /* 14 .. 24 */
        mant = (a & 0x7fffffu) | 0x800000u;
        half = mant >> shift;
        rest = mant & ((1u << shift) - 1u);
        if (rest > (1u << (shift - 1u)) || (rest == (1u << (shift - 1u)) && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    a += 0xfffu + ((a >> 13) & 1u); /* round the 13 dropped bits, ties to even */
    return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
}

static inline float
sl_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;

    if (exp == 0x1fu) /* inf or NaN */
        return sl_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return sl_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

#endif
