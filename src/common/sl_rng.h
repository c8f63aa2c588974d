/* Counter-based random numbers: every value is a pure function of (key, counter), so
 * runs are reproducible, resumable from a saved counter, and identical on any backend
 * or node that knows the key. SplitMix64 finalizer over a keyed counter; never rand(). */
#ifndef SL_RNG_H
#define SL_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t key;     /* stream identity, e.g. sl_hash_u64s(seed, purpose, rank) */
    uint64_t counter; /* next position in the stream; save it to resume */
} sl_rng_t;

/* Mixes a 64-bit value (SplitMix64 finalizer). Inline: dropout masks call it per element. */
static inline uint64_t
sl_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Hash of several 64-bit words: key derivation for (seed, round, component, node)... */
uint64_t sl_hash_u64s(const uint64_t *words, int n);
/* The value at position counter of stream key, without state. */
static inline uint64_t
sl_rng_at(uint64_t key, uint64_t counter)
{
    return sl_mix64(sl_mix64(key) ^ (counter * 0xd1342543de82ef95ULL + 1));
}

void sl_rng_init(sl_rng_t *r, uint64_t key);
uint64_t sl_rng_u64(sl_rng_t *r);
/* Uniform in [0, 1) with 24 random bits (float) or 53 (double). */
float sl_rng_float(sl_rng_t *r);
double sl_rng_double(sl_rng_t *r);
/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, negligible bias). */
uint64_t sl_rng_below(sl_rng_t *r, uint64_t n);
/* Standard normal (Box-Muller), for initialisation. */
double sl_rng_normal(sl_rng_t *r);

/* Stateless helpers for element-wise use (dropout masks): uniform [0,1) at (key, i). */
static inline float
sl_rng_float_at(uint64_t key, uint64_t i)
{
    return (float)(sl_rng_at(key, i) >> 40) * (1.0f / 16777216.0f);
}

#endif
