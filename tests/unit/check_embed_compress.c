/* Unit tests of src/embed/sl_compress.c: compression of exchanged values (fp32, fp16
 * and bf16 with the scaling factor F): sizes and wire encodings, byte order, round
 * trips within their bounds, the automatic scale worked by hand, non-finite values and
 * refused decodes. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "embed/sl_compress.h"
#include "transport/sl_wire.h"

#include "test_tool.h"

/* --------------------------------------------------------------- compress */

/* n values with random sign whose magnitudes are log-uniform in [lo, hi). */
static void
fill_log_uniform(float *x, size_t n, double lo, double hi, uint64_t key)
{
    sl_rng_t r;

    sl_rng_init(&r, key);
    for (size_t i = 0; i < n; i++) {
        double m = lo * pow(hi / lo, sl_rng_double(&r));
        x[i] = (float)(sl_rng_u64(&r) & 1 ? -m : m);
    }
}

/* Encodes x with the automatic (or given) scale, decodes, and returns the largest
 * relative error |y - x| / |x|; *scale_out gets the F used. */
static double
round_trip(sl_compress_t enc, double cfg_scale, const float *x, size_t n, float *scale_out)
{
    unsigned char *buf = malloc(sl_compress_bytes(enc, n));
    float *y = malloc(n * sizeof *y), scale;
    double worst = 0.0;

    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(y);
    scale = sl_compress_scale(enc, cfg_scale, x, n);
    sl_compress_encode(enc, scale, x, n, buf);
    ck_assert_int_eq(sl_compress_decode(enc, scale, buf, sl_compress_bytes(enc, n), y, n), SL_OK);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)y[i] - (double)x[i]) / fabs((double)x[i]);
        if (e > worst)
            worst = e;
    }
    free(buf);
    free(y);
    if (scale_out)
        *scale_out = scale;
    return worst;
}

START_TEST(test_compress_sizes_and_wire)
{
    sl_compress_t enc;

    ck_assert_uint_eq(sl_compress_bytes(SL_COMPRESS_FP32, 10), 40);
    ck_assert_uint_eq(sl_compress_bytes(SL_COMPRESS_FP16, 10), 20);
    ck_assert_uint_eq(sl_compress_bytes(SL_COMPRESS_BF16, 10), 20);
    ck_assert_uint_eq(sl_compress_bytes(SL_COMPRESS_FP16, 0), 0);
    ck_assert_int_eq(sl_compress_wire_encoding(SL_COMPRESS_FP32), SL_WIRE_FP32);
    ck_assert_int_eq(sl_compress_wire_encoding(SL_COMPRESS_FP16), SL_WIRE_FP16);
    ck_assert_int_eq(sl_compress_wire_encoding(SL_COMPRESS_BF16), SL_WIRE_BF16);
    /* The wire's element size agrees with ours for every encoding. */
    for (int e = SL_COMPRESS_FP32; e <= SL_COMPRESS_BF16; e++) {
        ck_assert_uint_eq(sl_wire_element_bytes((unsigned)sl_compress_wire_encoding(e)),
                          sl_compress_element_bytes(e));
        ck_assert_int_eq(sl_compress_from_wire((unsigned)sl_compress_wire_encoding(e), &enc),
                         SL_OK);
        ck_assert_int_eq(enc, e);
    }
    ck_assert_int_eq(sl_compress_from_wire(SL_WIRE_BYTES, &enc), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_from_wire(0, &enc), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_from_wire(200, &enc), SL_ERR_FORMAT);
}
END_TEST

/* The bytes on the wire, by hand: 1.0 and -2.0 are 0x3c00 / 0xc000 in fp16, 0x3f80 /
 * 0xc000 in bf16, 0x3f800000 / 0xc0000000 in fp32, low byte first. */
START_TEST(test_compress_little_endian)
{
    const float x[2] = {1.0f, -2.0f};
    const unsigned char fp16[4] = {0x00, 0x3c, 0x00, 0xc0};
    const unsigned char bf16[4] = {0x80, 0x3f, 0x00, 0xc0};
    const unsigned char fp32[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
    unsigned char buf[8];
    float y[2];

    sl_compress_encode(SL_COMPRESS_FP16, 1.0f, x, 2, buf);
    ck_assert_mem_eq(buf, fp16, 4);
    sl_compress_encode(SL_COMPRESS_BF16, 1.0f, x, 2, buf);
    ck_assert_mem_eq(buf, bf16, 4);
    sl_compress_encode(SL_COMPRESS_FP32, 1.0f, x, 2, buf);
    ck_assert_mem_eq(buf, fp32, 8);
    /* Scale 4: 1.0 * 4 = 4.0 is 0x4400 in fp16; decoding divides by 4 again. */
    sl_compress_encode(SL_COMPRESS_FP16, 4.0f, x, 2, buf);
    ck_assert_uint_eq(buf[0], 0x00);
    ck_assert_uint_eq(buf[1], 0x44);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 4.0f, buf, 4, y, 2), SL_OK);
    ck_assert(y[0] == 1.0f && y[1] == -2.0f);
}
END_TEST

/* fp32 is a bitwise copy: -0, NaN payloads, subnormals and infinities survive. */
START_TEST(test_compress_fp32_copy)
{
    float x[6] = {-0.0f, 1e-40f, 3.14159f, -1e38f, INFINITY, 0.0f}, y[6];
    unsigned char buf[24];
    uint32_t nan_bits = 0x7fc12345u;

    memcpy(&x[5], &nan_bits, 4);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP32, 0.0, x, 6) == 1.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP32, 8.0, x, 6) == 1.0f);
    sl_compress_encode(SL_COMPRESS_FP32, 1.0f, x, 6, buf);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP32, 1.0f, buf, 24, y, 6), SL_OK);
    ck_assert_mem_eq(x, y, sizeof x);
}
END_TEST

/* Automatic F by hand: the largest power of two with max|x| * F < 32752. */
START_TEST(test_compress_auto_scale_by_hand)
{
    const float one[3] = {0.5f, -1.0f, 0.25f}, two[1] = {-2.0f};
    const float edge[1] = {1.9990234375f}; /* 32752 / 2^14: m * 2^14 == 32752 exactly */
    const float big[2] = {1e6f, -3.0f}, small[2] = {1e-7f, -5e-8f};
    const float zeros[4] = {0.0f, -0.0f, 0.0f, 0.0f};
    float inf[2] = {1.0f, INFINITY}, nan[2] = {NAN, 1e-7f};

    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, one, 3) == 16384.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, two, 1) == 8192.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, edge, 1) == 8192.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, big, 2) == 0.03125f); /* 2^-5 */
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, small, 2) == ldexpf(1.0f, 38));
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, zeros, 4) == 1.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, NULL, 0) == 1.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, inf, 2) == 1.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, nan, 2) == 1.0f);
    /* bf16 has fp32's range: no automatic scaling. A configured F is used as given. */
    ck_assert(sl_compress_scale(SL_COMPRESS_BF16, 0.0, small, 2) == 1.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_BF16, 128.0, small, 2) == 128.0f);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 1000.0, big, 2) == 1000.0f);
    /* Extremes stay finite powers of two whose inverse is a normal float. */
    const float tiny[1] = {1e-44f}, huge[1] = {3e38f};
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, tiny, 1) == ldexpf(1.0f, 126));
    /* 3e38 * 2^-113 = 28885 < 32752 <= 3e38 * 2^-112 */
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 0.0, huge, 1) == ldexpf(1.0f, -113));
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 1e300, huge, 1) == FLT_MAX);
    ck_assert(sl_compress_scale(SL_COMPRESS_FP16, 1e-300, huge, 1) == FLT_MIN);
}
END_TEST

/* fp16: after automatic scaling every value of a 3-decade spread sits in fp16's normal
 * range, so round to nearest keeps the relative error within 2^-11; the same at the
 * magnitudes of large activations (1e6) and of small gradients (1e-7). */
START_TEST(test_compress_fp16_round_trip)
{
    enum { N = 4096 };
    static float x[N];
    const double bound = ldexp(1.0, -11);
    const double centre[] = {1e-7, 1e-3, 1.0, 1e3, 1e6};
    float scale;

    for (size_t c = 0; c < sizeof centre / sizeof centre[0]; c++) {
        fill_log_uniform(x, N, centre[c] * 1e-3, centre[c], 100 + c);
        ck_assert_double_le(round_trip(SL_COMPRESS_FP16, 0.0, x, N, &scale), bound);
        ck_assert(scale > 0.0f && frexpf(scale, &(int){0}) == 0.5f); /* a power of two */
    }
}
END_TEST

/* bf16: 8 significant bits, relative error within 2^-8 over fp32's whole normal range,
 * no scaling needed. */
START_TEST(test_compress_bf16_round_trip)
{
    enum { N = 4096 };
    static float x[N];
    float scale;

    fill_log_uniform(x, N, 1e-30, 1e30, 7);
    ck_assert_double_le(round_trip(SL_COMPRESS_BF16, 0.0, x, N, &scale), ldexp(1.0, -8));
    ck_assert(scale == 1.0f);
    /* A configured F (not a power of two) costs at most one more rounding each way. */
    fill_log_uniform(x, N, 1e-3, 1e3, 8);
    ck_assert_double_le(round_trip(SL_COMPRESS_BF16, 3.0, x, N, NULL),
                        ldexp(1.0, -8) + ldexp(1.0, -22));
}
END_TEST

/* Why F matters: without it fp16 overflows at 65520 and keeps 1e-7 as a subnormal with
 * two significant bits; with the automatic F both travel within 2^-11. */
START_TEST(test_compress_fp16_scaling_matters)
{
    const float big[3] = {1e6f, -7e5f, 65520.0f}, small[3] = {1e-7f, -1.3e-7f, 2e-8f};
    unsigned char buf[6];
    float y[3], scale;

    sl_compress_encode(SL_COMPRESS_FP16, 1.0f, big, 3, buf);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 6, y, 3), SL_OK);
    ck_assert(isinf(y[0]) && isinf(y[1]) && isinf(y[2]));
    scale = sl_compress_scale(SL_COMPRESS_FP16, 0.0, big, 3);
    sl_compress_encode(SL_COMPRESS_FP16, scale, big, 3, buf);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, scale, buf, 6, y, 3), SL_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert(isfinite(y[i]));
        ck_assert_double_le(fabs(y[i] - big[i]) / fabs(big[i]), ldexp(1.0, -11));
    }

    sl_compress_encode(SL_COMPRESS_FP16, 1.0f, small, 3, buf);
    ck_assert_uint_eq(buf[1] & 0x7c, 0); /* exponent 0: subnormal */
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 6, y, 3), SL_OK);
    ck_assert_double_gt(fabs(y[0] - small[0]) / small[0], 0.1);
    scale = sl_compress_scale(SL_COMPRESS_FP16, 0.0, small, 3);
    sl_compress_encode(SL_COMPRESS_FP16, scale, small, 3, buf);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_ne(buf[2 * i + 1] & 0x7c, 0); /* all normal after scaling */
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, scale, buf, 6, y, 3), SL_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_double_le(fabs(y[i] - small[i]) / fabs(small[i]), ldexp(1.0, -11));
}
END_TEST

/* Non-finite values travel as such, so the receiver sees a diverged peer. */
START_TEST(test_compress_non_finite)
{
    const float x[3] = {INFINITY, -INFINITY, NAN};
    unsigned char buf[6];
    float y[3];

    for (int e = SL_COMPRESS_FP16; e <= SL_COMPRESS_BF16; e++) {
        float scale = sl_compress_scale(e, 0.0, x, 3);

        ck_assert(scale == 1.0f);
        sl_compress_encode(e, scale, x, 3, buf);
        ck_assert_int_eq(sl_compress_decode(e, scale, buf, 6, y, 3), SL_OK);
        ck_assert(isinf(y[0]) && y[0] > 0);
        ck_assert(isinf(y[1]) && y[1] < 0);
        ck_assert(isnan(y[2]));
    }
}
END_TEST

/* decode never trusts its input: wrong sizes, bad scales, unknown encodings. */
START_TEST(test_compress_decode_refuses)
{
    const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    unsigned char buf[16];
    float y[4] = {9.0f, 9.0f, 9.0f, 9.0f};
    const float bad_scales[] = {0.0f, -1.0f, -0.0f, INFINITY, -INFINITY, NAN};

    sl_compress_encode(SL_COMPRESS_FP16, 1.0f, x, 4, buf);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 7, y, 4), SL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "7 bytes"));
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 10, y, 4), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 0, y, 4), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 8, y, 3), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP32, 1.0f, buf, 8, y, 4), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_BF16, 1.0f, buf, 16, y, 4), SL_ERR_FORMAT);
    /* n so large that n * 2 wraps around to a plausible size */
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 8, y, SIZE_MAX / 2 + 5),
                     SL_ERR_FORMAT);
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, bad_scales[i], buf, 8, y, 4),
                         SL_ERR_FORMAT);
        ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_BF16, bad_scales[i], buf, 8, y, 4),
                         SL_ERR_FORMAT);
    }
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "scale"));
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP32, 2.0f, buf, 16, y, 4), SL_ERR_FORMAT);
    ck_assert_int_eq(sl_compress_decode((sl_compress_t)7, 1.0f, buf, 8, y, 4), SL_ERR_FORMAT);
    for (int i = 0; i < 4; i++)
        ck_assert(y[i] == 9.0f); /* left unchanged */
    /* The good call still works, and n == 0 with 0 bytes is a valid empty payload. */
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 8, y, 4), SL_OK);
    ck_assert(y[3] == 4.0f);
    ck_assert_int_eq(sl_compress_decode(SL_COMPRESS_FP16, 1.0f, buf, 0, y, 0), SL_OK);
}
END_TEST

static void
add_compress_tests(TCase *core, TCase *limits)
{
    tcase_add_test(core, test_compress_sizes_and_wire);
    tcase_add_test(core, test_compress_little_endian);
    tcase_add_test(core, test_compress_fp32_copy);
    tcase_add_test(core, test_compress_auto_scale_by_hand);
    tcase_add_test(core, test_compress_fp16_round_trip);
    tcase_add_test(core, test_compress_bf16_round_trip);
    tcase_add_test(core, test_compress_fp16_scaling_matters);
    tcase_add_test(limits, test_compress_non_finite);
    tcase_add_test(limits, test_compress_decode_refuses);
}

/* ------------------------------------------------------------------ suite */

static Suite *
embed_compress_suite(void)
{
    Suite *s = suite_create("embed_compress");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    add_compress_tests(core, limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(embed_compress_suite());
}
