/* Non-cryptographic 64-bit hashing of byte ranges: sl_hash_* for checksums of
 * checkpoints and token caches (incremental, so files can be hashed in pieces), and
 * sl_hash_bulk for the payloads of wire frames, where every byte sent and received is
 * hashed and speed matters most. */
#ifndef SL_HASH_H
#define SL_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t lane[4];       /* four independent accumulators, one per 8-byte word of a stripe */
    uint64_t len;           /* bytes fed so far */
    unsigned char tail[32]; /* the last len % 32 bytes, not yet mixed in */
} sl_hash_t;

void sl_hash_init(sl_hash_t *s, uint64_t seed);
/* Feeds bytes bytes at data; data may be NULL when bytes is 0 (an empty file's ids). */
void sl_hash_update(sl_hash_t *s, const void *data, size_t bytes);
uint64_t sl_hash_final(const sl_hash_t *s);
/* One-shot hash of a byte range. */
uint64_t sl_hash_bytes(const void *data, size_t bytes, uint64_t seed);

/* One-shot hash of a byte range built for bulk data: eight 32x32->64-bit multiply
 * lanes over 64-byte blocks, several times faster than sl_hash_bytes (AVX2 when the
 * CPU has it; the portable path gives the same value). Keyed by the block's position,
 * so moved blocks change it. A different function from sl_hash_bytes. */
uint64_t sl_hash_bulk(const void *data, size_t bytes, uint64_t seed);

/* sl_hash_bulk of bytes bytes that come in pieces, in any order, each hashed once (while
 * it is still in the cache from being copied, say): its blocks add to the same sums as
 * in one pass. sl_hash_bulk_add takes the bytes [at, at + len) of the whole: at a
 * multiple of 64, at + len a multiple of 64 or the end. */
typedef struct {
    uint64_t acc[8], key0[8];
    uint64_t seed, bytes;
} sl_hash_bulk_t;

void sl_hash_bulk_init(sl_hash_bulk_t *s, uint64_t seed, uint64_t bytes);
void sl_hash_bulk_add(sl_hash_bulk_t *s, const void *data, size_t len, uint64_t at);
/* sl_hash_bulk_add of the bytes [at, at + len) of the whole, copied from src to dst on
 * the way: a block at a time, each hashed from dst while it is still in L1, so that
 * src is read once where a copy and a hash would read it twice (a third less time for
 * a payload not in the cache; bench/README.md). src and dst do not overlap. */
void sl_hash_bulk_add_copy(sl_hash_bulk_t *s, void *dst, const void *src, size_t len, uint64_t at);
/* Once every byte was added: sl_hash_bulk of the whole. */
uint64_t sl_hash_bulk_final(const sl_hash_bulk_t *s);
/* The loop sl_hash_bulk takes on this CPU: "avx2" or "portable" (for benchmarks). */
const char *sl_hash_bulk_path(void);

#endif
