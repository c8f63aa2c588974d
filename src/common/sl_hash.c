/* 64-bit hash over 8-byte words with a multiply-xorshift mix. A partial word is kept
 * in the state, so the result does not depend on how the bytes were split between
 * sl_hash_update calls. */
#include "sl_hash.h"

#include <string.h>

#include "sl_rng.h"

static uint64_t
mix_word(uint64_t h, uint64_t w)
{
    h = (h ^ sl_mix64(w)) * 0x9fb21c651e98df25ULL;
    return h ^ (h >> 29);
}

void
sl_hash_init(sl_hash_t *s, uint64_t seed)
{
    s->h = sl_mix64(seed ^ 0x243f6a8885a308d3ULL);
    s->len = 0;
    memset(s->tail, 0, sizeof s->tail);
}

void
sl_hash_update(sl_hash_t *s, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    size_t fill = s->len & 7;
    uint64_t w;

    s->len += bytes;
    if (fill) {
        size_t take = 8 - fill < bytes ? 8 - fill : bytes;
        memcpy(s->tail + fill, p, take);
        p += take;
        bytes -= take;
        if (fill + take < 8)
            return;
        memcpy(&w, s->tail, 8);
        s->h = mix_word(s->h, w);
    }
    for (; bytes >= 8; p += 8, bytes -= 8) {
        memcpy(&w, p, 8);
        s->h = mix_word(s->h, w);
    }
    memcpy(s->tail, p, bytes);
}

uint64_t
sl_hash_final(const sl_hash_t *s)
{
    uint64_t w = 0, h = s->h;
    size_t fill = s->len & 7;

    if (fill) {
        memcpy(&w, s->tail, fill);
        h = mix_word(h, w);
    }
    return sl_mix64(h ^ s->len);
}

uint64_t
sl_hash_bytes(const void *data, size_t bytes, uint64_t seed)
{
    sl_hash_t s;

    sl_hash_init(&s, seed);
    sl_hash_update(&s, data, bytes);
    return sl_hash_final(&s);
}
