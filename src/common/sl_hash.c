/* 64-bit hash over 32-byte stripes with four independent multiply-rotate lanes, so
 * that the multiplications of a stripe overlap and checksumming runs near memory speed
 * (every frame and checkpoint is hashed). A partial stripe is kept in the state, so the
 * result does not depend on how the bytes were split between sl_hash_update calls. */
#include "sl_hash.h"

#include <string.h>

#include "sl_rng.h"

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
