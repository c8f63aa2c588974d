/* 64-bit hash over 32-byte stripes with four independent multiply-rotate lanes, so
 * that the multiplications of a stripe overlap and checksumming runs near memory speed
 * (every frame and checkpoint is hashed). A partial stripe is kept in the state, so the
 * result does not depend on how the bytes were split between sl_hash_update calls. */
#include "common/sl_hash.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

#include "common/sl_rng.h"

#define P1 0x9e3779b185ebca87ULL
#define P2 0xc2b2ae3d27d4eb4fULL

static inline uint64_t
rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t
lane_step(uint64_t acc, uint64_t w)
{
    return rotl(acc + w * P2, 31) * P1;
}

static inline void
mix_stripe(uint64_t lane[4], const unsigned char *p)
{
    uint64_t w[4];

    memcpy(w, p, sizeof w);
    for (int i = 0; i < 4; i++)
        lane[i] = lane_step(lane[i], w[i]);
}

void
sl_hash_init(sl_hash_t *s, uint64_t seed)
{
    uint64_t base = sl_mix64(seed ^ 0x243f6a8885a308d3ULL);

    for (int i = 0; i < 4; i++)
        s->lane[i] = base + (uint64_t)i * P1;
    s->len = 0;
    memset(s->tail, 0, sizeof s->tail);
}

void
sl_hash_update(sl_hash_t *s, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    size_t fill = s->len & 31;

    if (bytes == 0) /* data may be NULL then, which memcpy must not be given */
        return;
    s->len += bytes;
    if (fill) {
        size_t take = 32 - fill < bytes ? 32 - fill : bytes;
        memcpy(s->tail + fill, p, take);
        p += take;
        bytes -= take;
        if (fill + take < 32)
            return;
        mix_stripe(s->lane, s->tail);
    }
    for (; bytes >= 32; p += 32, bytes -= 32)
        mix_stripe(s->lane, p);
    memcpy(s->tail, p, bytes);
}

uint64_t
sl_hash_final(const sl_hash_t *s)
{
    uint64_t h = s->len, w;
    size_t fill = s->len & 31, i = 0;

    for (int l = 0; l < 4; l++)
        h = sl_mix64(h ^ rotl(s->lane[l], 7 * l + 1));
    for (; i + 8 <= fill; i += 8) {
        memcpy(&w, s->tail + i, 8);
        h = lane_step(h, w);
    }
    if (i < fill) {
        w = 0;
        memcpy(&w, s->tail + i, fill - i);
        h = lane_step(h ^ (uint64_t)(fill - i), w);
    }
    return sl_mix64(h);
}

uint64_t
sl_hash_bytes(const void *data, size_t bytes, uint64_t seed)
{
    sl_hash_t s;

    sl_hash_init(&s, seed);
    sl_hash_update(&s, data, bytes);
    return sl_hash_final(&s);
}

/* sl_hash_bulk. Block b (64 bytes, words d[0..7]) with lane keys k[i] = key0[i] +
 * (b + 1) * BULK_STEP and x = d[i] ^ k[i] does, for every lane i,
 *   acc[i] += (x mod 2^32) * (x div 2^32);   acc[i ^ 1] += d[i];
 * the product mixes a word's halves, the plain sum keeps every bit of it, and the
 * position in the key makes swapped blocks count. Words after the last whole block go
 * through the same step as a partial block; the final 1..7 bytes as one zero-padded
 * word, with the length mixed into the result. */
#define BULK_STEP 0x9e3779b97f4a7c15ULL

static inline void
bulk_word(uint64_t acc[8], unsigned i, uint64_t d, uint64_t k)
{
    uint64_t x = d ^ k;

    acc[i] += (x & 0xffffffffu) * (x >> 32);
    acc[i ^ 1] += d;
}

static void
bulk_blocks_portable(uint64_t acc[8], const unsigned char *p, size_t nblocks,
                     const uint64_t key0[8])
{
    for (size_t b = 0; b < nblocks; b++, p += 64)
        for (unsigned i = 0; i < 8; i++) {
            uint64_t d;
            memcpy(&d, p + 8 * i, sizeof d);
            bulk_word(acc, i, d, key0[i] + (uint64_t)(b + 1) * BULK_STEP);
        }
}

#ifdef HAVE_AVX2_PATH
/* The plain sums go into accumulators of their own (s0, s1), swapped into acc once at the
 * end: the same sums mod 2^64 as adding each block's words swapped, without a shuffle per
 * block; the halves of x are swapped by a shuffle (port 5 on Intel) rather than a shift,
 * which would compete with the multiply. */
__attribute__((target("avx2"))) static void
bulk_blocks_avx2(uint64_t acc[8], const unsigned char *p, size_t nblocks, const uint64_t key0[8])
{
    __m256i a0 = _mm256_loadu_si256((const __m256i *)(const void *)acc);
    __m256i a1 = _mm256_loadu_si256((const __m256i *)(const void *)(acc + 4));
    __m256i k0 = _mm256_loadu_si256((const __m256i *)(const void *)key0);
    __m256i k1 = _mm256_loadu_si256((const __m256i *)(const void *)(key0 + 4));
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    const __m256i step = _mm256_set1_epi64x((long long)BULK_STEP);

    for (size_t b = 0; b < nblocks; b++, p += 64) {
        __m256i d0 = _mm256_loadu_si256((const __m256i *)(const void *)p);
        __m256i d1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
        __m256i x0, x1;

        k0 = _mm256_add_epi64(k0, step);
        k1 = _mm256_add_epi64(k1, step);
        x0 = _mm256_xor_si256(d0, k0);
        x1 = _mm256_xor_si256(d1, k1);
        a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(x0, _mm256_shuffle_epi32(x0, 0xb1)));
        a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(x1, _mm256_shuffle_epi32(x1, 0xb1)));
        s0 = _mm256_add_epi64(s0, d0);
        s1 = _mm256_add_epi64(s1, d1);
    }
    /* acc[i ^ 1] += sum of d[i]: swap the 64-bit words of each 128-bit half */
    a0 = _mm256_add_epi64(a0, _mm256_shuffle_epi32(s0, 0x4e));
    a1 = _mm256_add_epi64(a1, _mm256_shuffle_epi32(s1, 0x4e));
    _mm256_storeu_si256((__m256i *)(void *)acc, a0);
    _mm256_storeu_si256((__m256i *)(void *)(acc + 4), a1);
}

/* Asked each time: a cached answer would be a race between the threads that hash (the
 * builtin only reads what the runtime found at start). */
static int
have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#endif

void
sl_hash_bulk_init(sl_hash_bulk_t *s, uint64_t seed, uint64_t bytes)
{
    for (unsigned i = 0; i < 8; i++) {
        s->acc[i] = sl_mix64(seed + i);
        s->key0[i] = sl_mix64(seed ^ (P2 + i));
    }
    s->seed = seed;
    s->bytes = bytes;
}

void
sl_hash_bulk_add(sl_hash_bulk_t *s, const void *data, size_t len, uint64_t at)
{
    const unsigned char *p = data;
    uint64_t key[8], first = at / 64, kb, d;
    size_t nblocks = len / 64, rest = len % 64;
    unsigned i;

    for (i = 0; i < 8; i++) /* block `first`'s keys as block 0's */
        key[i] = s->key0[i] + first * BULK_STEP;
#ifdef HAVE_AVX2_PATH
    if (have_avx2())
        bulk_blocks_avx2(s->acc, p, nblocks, key);
    else
#endif
        bulk_blocks_portable(s->acc, p, nblocks, key);
    p += 64 * nblocks;
    kb = (first + nblocks + 1) * BULK_STEP;
    for (i = 0; rest >= 8; i++, p += 8, rest -= 8) {
        memcpy(&d, p, sizeof d);
        bulk_word(s->acc, i, d, s->key0[i] + kb);
    }
    if (rest) {
        d = 0;
        memcpy(&d, p, rest);
        bulk_word(s->acc, i, d, s->key0[i] + kb);
    }
}

/* 16 KiB: the copy and the hash of a block share L1 on every x86-64 of the last decade
 * (32 KiB and up); 4 and 64 KiB blocks were slower (bench/README.md). */
enum { COPY_BLOCK_BYTES = 16384 };

void
sl_hash_bulk_add_copy(sl_hash_bulk_t *s, void *dst, const void *src, size_t len, uint64_t at)
{
    unsigned char *d = dst;
    const unsigned char *p = src;

    for (size_t done = 0; done < len; done += COPY_BLOCK_BYTES) {
        size_t block = len - done < COPY_BLOCK_BYTES ? len - done : COPY_BLOCK_BYTES;

        memcpy(d + done, p + done, block);
        sl_hash_bulk_add(s, d + done, block, at + done); /* a multiple of 64 from at */
    }
}

uint64_t
sl_hash_bulk_final(const sl_hash_bulk_t *s)
{
    uint64_t h = sl_mix64(s->seed ^ s->bytes * P1);

    for (unsigned i = 0; i < 8; i++)
        h = sl_mix64(h + s->acc[i]);
    return h;
}

uint64_t
sl_hash_bulk(const void *data, size_t bytes, uint64_t seed)
{
    sl_hash_bulk_t s;

    sl_hash_bulk_init(&s, seed, bytes);
    sl_hash_bulk_add(&s, data, bytes, 0);
    return sl_hash_bulk_final(&s);
}

const char *
sl_hash_bulk_path(void)
{
#ifdef HAVE_AVX2_PATH
    if (have_avx2())
        return "avx2";
#endif
    return "portable";
}
