/* Counter-based RNG (SplitMix64 over key-whitened counters). */
#include "common/sl_rng.h"

#include <math.h>

uint64_t
sl_hash_u64s(const uint64_t *words, int n)
{
    uint64_t h = 0x6a09e667f3bcc909ULL;

    for (int i = 0; i < n; i++)
        h = sl_mix64(h ^ sl_mix64(words[i] + (uint64_t)i));
    return h;
}

void
sl_rng_init(sl_rng_t *r, uint64_t key)
{
    r->key = key;
    r->counter = 0;
}

uint64_t
sl_rng_u64(sl_rng_t *r)
{
    return sl_rng_at(r->key, r->counter++);
}

float
sl_rng_float(sl_rng_t *r)
{
    return (float)(sl_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

double
sl_rng_double(sl_rng_t *r)
{
    return (double)(sl_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t
sl_rng_below(sl_rng_t *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)sl_rng_u64(r) * n) >> 64);
}

double
sl_rng_normal(sl_rng_t *r)
{
    double u1 = sl_rng_double(r), u2 = sl_rng_double(r);

    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
