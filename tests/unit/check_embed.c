/* Unit tests of src/embed/: compression of exchanged values (fp32/fp16/bf16 with the
 * scaling factor F), sampled-softmax seed groups, Zipf statistics (unique types in
 * windows, the power-law fit) and the shoal-corpus-stats tool. Each area adds its tests
 * to the "core" and "limits" cases from its own add_*_tests function. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_rng.h"
#include "common/sl_status.h"
#include "embed/sl_compress.h"
#include "embed/sl_seed_groups.h"
#include "embed/sl_zipf.h"
#include "model/sl_sampler.h"
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

/* ------------------------------------------------------------ seed groups */

/* Group of each rank, as "0 0 1 2", for a mode at n nodes. */
static const char *
group_map(const char *mode, int n)
{
    static char s[256];
    size_t len = 0;
    int groups = -1;

    ck_assert_int_eq(sl_seed_groups_count(mode, n, &groups), SL_OK);
    s[0] = '\0';
    for (int r = 0; r < n; r++)
        len += (size_t)snprintf(s + len, sizeof s - len, "%s%d", r ? " " : "",
                                sl_seed_group_of(r, n, groups));
    return s;
}

/* Counts and rank maps for n = 1..9, by hand: zipf is ceil(n^0.64) (1.56, 2.02, 2.43,
 * 2.80, 3.15, 3.47, 3.78, 4.08 for n = 2..9), log2 is floor(log2 n) but at least 1,
 * the first n % G groups get the extra rank. */
START_TEST(test_seed_groups_by_hand)
{
    static const struct {
        const char *mode;
        int count[9];
        const char *map[9];
    } t[] = {
        {"per-node",
         {1, 2, 3, 4, 5, 6, 7, 8, 9},
         {"0", "0 1", "0 1 2", "0 1 2 3", "0 1 2 3 4", "0 1 2 3 4 5", "0 1 2 3 4 5 6",
          "0 1 2 3 4 5 6 7", "0 1 2 3 4 5 6 7 8"}},
        {"one",
         {1, 1, 1, 1, 1, 1, 1, 1, 1},
         {"0", "0 0", "0 0 0", "0 0 0 0", "0 0 0 0 0", "0 0 0 0 0 0", "0 0 0 0 0 0 0",
          "0 0 0 0 0 0 0 0", "0 0 0 0 0 0 0 0 0"}},
        {"zipf",
         {1, 2, 3, 3, 3, 4, 4, 4, 5},
         {"0", "0 1", "0 1 2", "0 0 1 2", "0 0 1 1 2", "0 0 1 1 2 3", "0 0 1 1 2 2 3",
          "0 0 1 1 2 2 3 3", "0 0 1 1 2 2 3 3 4"}},
        {"log2",
         {1, 1, 1, 2, 2, 2, 2, 3, 3},
         {"0", "0 0", "0 0 0", "0 0 1 1", "0 0 0 1 1", "0 0 0 1 1 1", "0 0 0 0 1 1 1",
          "0 0 0 1 1 1 2 2", "0 0 0 1 1 1 2 2 2"}},
        {"3",
         {1, 2, 3, 3, 3, 3, 3, 3, 3},
         {"0", "0 1", "0 1 2", "0 0 1 2", "0 0 1 1 2", "0 0 1 1 2 2", "0 0 0 1 1 2 2",
          "0 0 0 1 1 1 2 2", "0 0 0 1 1 1 2 2 2"}},
    };

    for (size_t m = 0; m < sizeof t / sizeof t[0]; m++)
        for (int n = 1; n <= 9; n++) {
            int g = -1;

            ck_assert_int_eq(sl_seed_groups_count(t[m].mode, n, &g), SL_OK);
            ck_assert_msg(g == t[m].count[n - 1], "%s at n=%d: %d groups, want %d", t[m].mode, n, g,
                          t[m].count[n - 1]);
            ck_assert_str_eq(group_map(t[m].mode, n), t[m].map[n - 1]);
        }
}
END_TEST

/* Larger runs: exact group counts at known points, and every split is contiguous,
 * covers all groups in order, and has sizes differing by at most one. */
START_TEST(test_seed_groups_balanced)
{
    int g;

    ck_assert_int_eq(sl_seed_groups_count("zipf", 64, &g), SL_OK);
    ck_assert_int_eq(g, 15); /* 64^0.64 = 2^3.84 = 14.3 */
    ck_assert_int_eq(sl_seed_groups_count("zipf", 1 << 25, &g), SL_OK);
    ck_assert_int_eq(g, 65536); /* (2^25)^0.64 = 2^16 exactly: no ceil past it */
    ck_assert_int_eq(sl_seed_groups_count("log2", 1024, &g), SL_OK);
    ck_assert_int_eq(g, 10);
    ck_assert_int_eq(sl_seed_groups_count("log2", 1023, &g), SL_OK);
    ck_assert_int_eq(g, 9);
    ck_assert_int_eq(sl_seed_groups_count("100", 64, &g), SL_OK);
    ck_assert_int_eq(g, 64);
    for (int n = 1; n <= 64; n++)
        for (int groups = 1; groups <= n; groups++) {
            int size[64] = {0}, prev = 0, lo = n, hi = 0;

            for (int r = 0; r < n; r++) {
                int k = sl_seed_group_of(r, n, groups);

                ck_assert(k == prev || k == prev + 1 || (r == 0 && k == 0));
                prev = k;
                size[k]++;
            }
            ck_assert_int_eq(prev, groups - 1);
            for (int k = 0; k < groups; k++) {
                lo = size[k] < lo ? size[k] : lo;
                hi = size[k] > hi ? size[k] : hi;
            }
            ck_assert_int_ge(lo, 1);
            ck_assert_int_le(hi - lo, 1);
        }
}
END_TEST

/* Negatives drawn as the trainer draws them (sl_sampler_draw_unique from the step's
 * key): the same within a group, different across groups and steps; group 0's key is
 * the one every node used before seed groups. */
START_TEST(test_seed_groups_negatives)
{
    enum { V = 1000, S = 64, NODES = 8 };
    const uint64_t seed = 1234;
    const long steps[3] = {0, 7, 100000};
    static int32_t neg[NODES][S];
    sl_sampler_t smp;
    int groups;

    ck_assert_int_eq(sl_sampler_init(&smp, V), SL_OK);
    ck_assert_int_eq(sl_seed_groups_count("zipf", NODES, &groups), SL_OK);
    ck_assert_int_eq(groups, 4); /* ranks 0 0 1 1 2 2 3 3 */
    for (int s = 0; s < 3; s++) {
        uint64_t old[3] = {seed, 'S', (uint64_t)steps[s]};

        ck_assert_uint_eq(sl_seed_group_sample_key(seed, steps[s], 0), sl_hash_u64s(old, 3));
        for (int r = 0; r < NODES; r++) {
            sl_rng_t rng;
            long tries;

            sl_rng_init(
                &rng, sl_seed_group_sample_key(seed, steps[s], sl_seed_group_of(r, NODES, groups)));
            ck_assert_int_eq(sl_sampler_draw_unique(&smp, &rng, S, neg[r], &tries), SL_OK);
        }
        for (int r = 0; r < NODES; r++)
            for (int q = r + 1; q < NODES; q++) {
                int same = memcmp(neg[r], neg[q], sizeof neg[r]) == 0;

                ck_assert_msg(same == (r / 2 == q / 2), "step %ld: ranks %d and %d", steps[s], r,
                              q);
            }
        /* A step later, group 0 draws something else. */
        {
            sl_rng_t rng;
            int32_t next[S];
            long tries;

            sl_rng_init(&rng, sl_seed_group_sample_key(seed, steps[s] + 1, 0));
            ck_assert_int_eq(sl_sampler_draw_unique(&smp, &rng, S, next, &tries), SL_OK);
            ck_assert(memcmp(next, neg[0], sizeof next) != 0);
        }
    }
    /* Keys of distinct groups and seeds are distinct. */
    for (int a = 0; a < 64; a++)
        for (int b = a + 1; b < 64; b++)
            ck_assert_uint_ne(sl_seed_group_sample_key(seed, 3, a),
                              sl_seed_group_sample_key(seed, 3, b));
    ck_assert_uint_ne(sl_seed_group_sample_key(1, 3, 0), sl_seed_group_sample_key(2, 3, 0));
    sl_sampler_fini(&smp);
}
END_TEST

START_TEST(test_seed_groups_bad_input)
{
    const char *bad[] = {"",   "two", "0",     "-1",       "+3",
                         "3x", " 3",  "zipf ", "PER-NODE", "99999999999999999999"};
    int g = 42;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sl_seed_groups_count(bad[i], 4, &g), SL_ERR_INVALID);
        ck_assert_int_eq(g, 42);
    }
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "per-node, one, zipf, log2"));
    ck_assert_int_eq(sl_seed_groups_count(NULL, 4, &g), SL_ERR_INVALID);
    ck_assert_int_eq(sl_seed_groups_count("one", 0, &g), SL_ERR_INVALID);
    ck_assert_int_eq(sl_seed_groups_count("zipf", -3, &g), SL_ERR_INVALID);
    ck_assert_int_eq(g, 42);
    ck_assert_int_eq(sl_seed_group_of(-1, 4, 2), -1);
    ck_assert_int_eq(sl_seed_group_of(4, 4, 2), -1);
    ck_assert_int_eq(sl_seed_group_of(0, 4, 0), -1);
    ck_assert_int_eq(sl_seed_group_of(0, 4, 5), -1);
    ck_assert_int_eq(sl_seed_group_of(0, 0, 1), -1);
}
END_TEST

static void
add_seed_group_tests(TCase *core, TCase *limits)
{
    tcase_add_test(core, test_seed_groups_by_hand);
    tcase_add_test(core, test_seed_groups_balanced);
    tcase_add_test(core, test_seed_groups_negatives);
    tcase_add_test(limits, test_seed_groups_bad_input);
}

/* ------------------------------------------------------------------- zipf */

/* "a a b a c c": every window by hand. N = 2: aa ab ba ac cc -> 1 2 2 2 1;
 * N = 3: aab aba bac acc -> 2 2 3 2; N = 4: aaba abac bacc -> 2 3 3; N = 5, 6: 3. */
START_TEST(test_zipf_windows_by_hand)
{
    const int32_t ids[6] = {0, 0, 1, 0, 2, 2};
    const int32_t tobe[6] = {0, 1, 2, 3, 0, 1}; /* to be or not to be */
    const double mean[7] = {0, 1.0, 8.0 / 5, 9.0 / 4, 8.0 / 3, 3.0, 3.0};
    const long lo[7] = {0, 1, 1, 2, 2, 3, 3}, hi[7] = {0, 1, 2, 3, 3, 3, 3};
    sl_zipf_window_t w;

    for (size_t n = 1; n <= 6; n++) {
        ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, n, 100, &w), SL_OK);
        ck_assert_uint_eq(w.window, n);
        ck_assert_int_eq(w.windows, (long)(7 - n)); /* every start */
        ck_assert_double_eq_tol(w.u_mean, mean[n], 1e-12);
        ck_assert_int_eq(w.u_min, lo[n]);
        ck_assert_int_eq(w.u_max, hi[n]);
        ck_assert_int_eq(sl_zipf_unique_windows(tobe, 6, 4, n, 100, &w), SL_OK);
        ck_assert_double_eq(w.u_mean, n < 4 ? (double)n : 4.0);
    }
    /* Fewer windows than starts: evenly spaced, floor(i * (6 - N) / (W - 1)).
     * N = 2, W = 2: starts 0 4 (aa cc) -> 1; W = 3: 0 2 4 (aa ba cc) -> 4/3;
     * N = 3, W = 2: starts 0 3 (aab acc) -> 2; W = 3: 0 1 3 (aab aba acc) -> 2. */
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 2, 2, &w), SL_OK);
    ck_assert_int_eq(w.windows, 2);
    ck_assert_double_eq(w.u_mean, 1.0);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 2, 3, &w), SL_OK);
    ck_assert_double_eq_tol(w.u_mean, 4.0 / 3, 1e-12);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 3, 2, &w), SL_OK);
    ck_assert_double_eq(w.u_mean, 2.0);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 6, 3, 4, 1, &w), SL_OK);
    ck_assert_int_eq(w.windows, 1);
    ck_assert_double_eq(w.u_mean, 2.0); /* only the first window, aaba */
}
END_TEST

/* The sliding count agrees with counting every window from scratch. */
START_TEST(test_zipf_windows_brute_force)
{
    enum { LEN = 3000, RANGE = 200 };
    static int32_t ids[LEN];
    sl_rng_t r;

    sl_rng_init(&r, 99);
    for (int i = 0; i < LEN; i++) /* skewed: small ids are frequent */
        ids[i] = (int32_t)(sl_rng_below(&r, RANGE) * sl_rng_below(&r, RANGE) / RANGE);
    for (size_t n = 1; n <= LEN; n = n * 3 + 1)
        for (long mw = 1; mw <= 4000; mw = mw * 7 + 2) {
            sl_zipf_window_t w;
            long nw = mw < (long)(LEN - n + 1) ? mw : (long)(LEN - n + 1), umin = LEN, umax = 0;
            double sum = 0.0;

            ck_assert_int_eq(sl_zipf_unique_windows(ids, LEN, RANGE, n, mw, &w), SL_OK);
            ck_assert_int_eq(w.windows, nw);
            for (long i = 0; i < nw; i++) {
                size_t p = nw == 1 ? 0 : (size_t)(i * (long)(LEN - n) / (nw - 1));
                char seen[RANGE] = {0};
                long u = 0;

                for (size_t t = p; t < p + n; t++)
                    if (!seen[ids[t]]++)
                        u++;
                sum += (double)u;
                umin = u < umin ? u : umin;
                umax = u > umax ? u : umax;
            }
            ck_assert_double_eq_tol(w.u_mean, sum / (double)nw, 1e-9);
            ck_assert_int_eq(w.u_min, umin);
            ck_assert_int_eq(w.u_max, umax);
        }
}
END_TEST

/* Exact power laws give their parameters back; a line in log-log has R^2 = 1. */
START_TEST(test_zipf_fit_exact)
{
    const double n[5] = {10, 100, 1000, 1e4, 1e5};
    double u[5];
    sl_zipf_fit_t f;

    for (int i = 0; i < 5; i++)
        u[i] = 3.0 * pow(n[i], 0.5);
    ck_assert_int_eq(sl_zipf_fit(n, u, 5, &f), SL_OK);
    ck_assert_double_eq_tol(f.b, 0.5, 1e-12);
    ck_assert_double_eq_tol(f.a, 3.0, 1e-10);
    ck_assert_double_eq_tol(f.r2, 1.0, 1e-12);
    ck_assert_int_eq(f.points, 5);
    /* Two points: the line through them, b = ln(8/2) / ln(4/1) = 1. */
    ck_assert_int_eq(sl_zipf_fit((const double[]){1, 4}, (const double[]){2, 8}, 2, &f), SL_OK);
    ck_assert_double_eq_tol(f.b, 1.0, 1e-12);
    ck_assert_double_eq_tol(f.a, 2.0, 1e-12);
    /* Off the line: (1,1) (2,4) (4,4) in log2 units are x = 0 1 2, y = 0 2 2: slope 1,
     * intercept 4/3 - 1 = 1/3, residuals -1/3 2/3 -1/3, SSres 2/3, SStot 8/3. */
    ck_assert_int_eq(sl_zipf_fit((const double[]){1, 2, 4}, (const double[]){1, 4, 4}, 3, &f),
                     SL_OK);
    ck_assert_double_eq_tol(f.b, 1.0, 1e-12);
    ck_assert_double_eq_tol(f.a, pow(2.0, 1.0 / 3), 1e-12);
    ck_assert_double_eq_tol(f.r2, 0.75, 1e-12);
}
END_TEST

/* A synthetic Zipf stream, P(k) ~ k^-s over 2^20 ids, has E[U(N)] = sum_k 1 - (1 - P(k))^N
 * growing as N^(1/s) (Heaps' law); for s = 1/0.64 that sum, fitted over N = 100 ..
 * 1e5, has slope 0.6404. The sampled stream must fit within 0.015 of it. */
START_TEST(test_zipf_stream_exponent)
{
    enum { V = 1 << 20, LEN = 1000000 };
    const double s = 1.0 / 0.64;
    const size_t sizes[10] = {100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
    double *cdf = malloc(V * sizeof *cdf), n[10], u[10], z = 0.0;
    int32_t *ids = malloc(LEN * sizeof *ids);
    sl_zipf_fit_t f;
    sl_rng_t r;

    ck_assert_ptr_nonnull(cdf);
    ck_assert_ptr_nonnull(ids);
    for (int k = 0; k < V; k++)
        cdf[k] = z += pow(k + 1.0, -s);
    sl_rng_init(&r, 2024);
    for (int i = 0; i < LEN; i++) { /* inverse CDF by bisection */
        double x = sl_rng_double(&r) * z;
        int lo = 0, hi = V - 1;

        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (cdf[mid] > x)
                hi = mid;
            else
                lo = mid + 1;
        }
        ids[i] = lo;
    }
    for (int i = 0; i < 10; i++) {
        sl_zipf_window_t w;

        ck_assert_int_eq(sl_zipf_unique_windows(ids, LEN, V, sizes[i], 50, &w), SL_OK);
        n[i] = (double)sizes[i];
        u[i] = w.u_mean;
    }
    ck_assert_int_eq(sl_zipf_fit(n, u, 10, &f), SL_OK);
    ck_assert_msg(fabs(f.b - 0.6404) < 0.015, "fitted exponent %.4f, want 0.6404", f.b);
    ck_assert_double_gt(f.r2, 0.999);
    free(cdf);
    free(ids);
}
END_TEST

START_TEST(test_zipf_bad_input)
{
    const int32_t ids[4] = {0, 1, 2, 3}, bad[3] = {0, 5, 1}, neg[2] = {0, -1};
    sl_zipf_window_t w;
    sl_zipf_fit_t f;

    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 4, 0, 10, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 4, 5, 10, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 4, 2, 0, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 4, 0, 2, 1, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(ids, 0, 4, 1, 1, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_unique_windows(bad, 3, 4, 2, 1, &w), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "token 1 has id 5"));
    ck_assert_int_eq(sl_zipf_unique_windows(neg, 2, 4, 1, 1, &w), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){5, 5}, (const double[]){1, 2}, 2, &f),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){5}, (const double[]){1}, 1, &f), SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){1, 2}, (const double[]){0, 2}, 2, &f),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){-1, 2}, (const double[]){1, 2}, 2, &f),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_zipf_fit((const double[]){NAN, 2}, (const double[]){1, 2}, 2, &f),
                     SL_ERR_INVALID);
}
END_TEST

/* ----------------------------------------------------- shoal-corpus-stats CLI */

static char stats_bin[1024];

/* The tool reads the text through src/data: "a a b\na c c\n" is a a b <eos> a c c <eos>.
 * N = 2: aa ab bE Ea ac cc cE -> 12/7; N = 4: aabE abEa bEac Eacc accE -> 16/5. */
START_TEST(test_corpus_stats_cli)
{
    static char out[1 << 14], err[4096];
    char dir[] = "/tmp/shoal-embed-XXXXXX", file[256], png[256];
    FILE *f;

    if (!test_tool_find("shoal-corpus-stats", stats_bin, sizeof stats_bin))
        return;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XDG_CACHE_HOME", dir, 1); /* the token cache goes there, not to $HOME */
    snprintf(file, sizeof file, "%s/tiny.txt", dir);
    snprintf(png, sizeof png, "%s/u.png", dir);
    f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("a a b\na c c\n", f);
    fclose(f);

    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--help", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "Usage: shoal-corpus-stats"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--nodes", "1,2,16",
                                                         "--tokens=2", "--format", "csv", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "G,K,N,windows,U_mean,U_min,U_max,U_over_N,U_fit\n"));
    ck_assert_ptr_nonnull(strstr(out, "\n1,2,2,7,1.7142857142857142,1,2,"));
    ck_assert_ptr_nonnull(strstr(out, "\n2,2,4,5,3.2000000000000002,3,4,"));
    ck_assert_ptr_null(strstr(out, "\n16,2,"));
    ck_assert_ptr_nonnull(strstr(err, "skipped N = 16x2: more than the corpus's 8 tokens"));
    /* the JSON fit is the line through the two points: b = ln(3.2 / (12/7)) / ln 2 */
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--nodes", "2,1",
                                                         "--tokens", "2", "--format=json", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "\"tokens\": 8, \"types\": 4"));
    {
        const char *b = strstr(out, "\"b\": ");

        ck_assert_ptr_nonnull(b);
        ck_assert_double_eq_tol(strtod(b + 5, NULL), log2(3.2 * 7 / 12), 1e-12);
    }
    /* character level: 12 code points incl. newlines, types a b c space newline */
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--level", "char",
                                                         "--nodes", "12", "--tokens", "1", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "12 tokens, 5 types"));
    ck_assert_ptr_nonnull(strstr(out, "no fit"));

    /* errors: usage 2, runtime 1, one line naming the problem */
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){NULL}),
                     2);
    ck_assert_ptr_nonnull(strstr(err, "missing --corpus"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--nodes", "1,x", NULL}),
                     2);
    ck_assert_ptr_nonnull(strstr(err, "--nodes: 'x' is not an integer"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--windows", "0", NULL}),
                     2);
    ck_assert_int_eq(
        test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                      (const char *const[]){"--corpus", file, "--level", "byte", NULL}),
        2);
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", "/nonexistent/x.txt", NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.txt: No such file or directory"));
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, "--tokens", "9", NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "fewer than every N"));
    ck_assert_int_eq(
        test_tool_run(stats_bin, out, sizeof out, err, sizeof err, "/nonexistent",
                      (const char *const[]){"--corpus", file, "--tokens", "2", "--png", png, NULL}),
        1);
    ck_assert_ptr_nonnull(strstr(err, "gnuplot is not on PATH"));
    if (system("gnuplot --version >/dev/null 2>&1") == 0) {
        unsigned char magic[4] = {0};

        ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                       (const char *const[]){"--corpus", file, "--nodes", "1,2",
                                                             "--tokens", "2", "--png", png, NULL}),
                         0);
        f = fopen(png, "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(magic, 1, 4, f), 4);
        fclose(f);
        ck_assert_mem_eq(magic, "\x89PNG", 4);
    }
    f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(test_tool_run(stats_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--corpus", file, NULL}),
                     1);
    ck_assert_ptr_nonnull(strstr(err, "corpus is empty"));
    snprintf(png, sizeof png, "rm -rf '%s'", dir); /* the text, the plot, the token cache */
    ck_assert_int_eq(system(png), 0);
}
END_TEST

static void
add_zipf_tests(TCase *core, TCase *limits)
{
    tcase_add_test(core, test_zipf_windows_by_hand);
    tcase_add_test(core, test_zipf_windows_brute_force);
    tcase_add_test(core, test_zipf_fit_exact);
    tcase_add_test(core, test_zipf_stream_exponent);
    tcase_add_test(core, test_corpus_stats_cli);
    tcase_add_test(limits, test_zipf_bad_input);
}

/* ------------------------------------------------------------------ suite */

static Suite *
embed_suite(void)
{
    Suite *s = suite_create("embed");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    add_compress_tests(core, limits);
    add_seed_group_tests(core, limits);
    add_zipf_tests(core, limits);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(embed_suite());
    int failed;

    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
