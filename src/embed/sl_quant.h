/* Quantized values for the delta exchange: int8 or int4 with one fp32 scale per block of
 * values (scale = max|x| / 127 or / 7 over the block), rounded to nearest (ties to even)
 * or stochastically from a counter RNG stream (src/common/sl_rng.h), optionally only the
 * top-k entries by magnitude (ties broken by the lower index, so that every node picks
 * the same ones), and error feedback: what a message dropped (rounding, the entries top-k
 * left out) is kept and added to the next message of the same vector. Payloads are
 * transport/sl_wire_quant.h's; the decoder never trusts them.
 *
 * Bound of a round trip, per block of scale s (entries sent): nearest |x - x'| <= s / 2,
 * stochastic |x - x'| < s, both up to one fp32 rounding of the multiply (relative 2^-23);
 * entries top-k left out decode as 0. */
#ifndef SL_QUANT_H
#define SL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

typedef struct sl_quant sl_quant_t;

typedef struct {
    sl_compress_t enc;      /* SL_COMPRESS_INT8 or SL_COMPRESS_INT4 */
    uint32_t block;         /* values per scale, 1 .. SL_WIRE_QUANT_MAX_BLOCK */
    sl_rounding_t rounding; /* nearest or stochastic */
    double topk;            /* fraction of entries sent; 0 or >= 1: all */
} sl_quant_opts_t;

/* The options of cfg->sync (compression, quant_block, rounding, topk). */
sl_quant_opts_t sl_quant_opts_from_config(const sl_config_t *cfg);

/* A quantizer for vectors of up to max_n values (its buffers: no allocation per call).
 * SL_ERR_INVALID for a bad encoding or block, or max_n over UINT32_MAX; SL_ERR_NOMEM. */
sl_status_t sl_quant_new(sl_quant_t **out, const sl_quant_opts_t *o, size_t max_n);
/* Frees; accepts NULL, NULLs *q. */
void sl_quant_destroy(sl_quant_t **q);

/* The wire encoding (SL_WIRE_INT8 / SL_WIRE_INT4). */
unsigned sl_quant_wire_encoding(const sl_quant_t *q);
/* Entries sent of a vector of n: ceil(topk * n) (at least 1 when n > 0), or n. */
size_t sl_quant_entries(const sl_quant_t *q, size_t n);
/* Room a payload of n values may need at most (top-k or all of them). */
size_t sl_quant_max_bytes(const sl_quant_t *q, size_t n);

/* idx (k, caller's): the k indices of x (n floats, finite) of largest |x|, the lower
 * index first among equal magnitudes, in ascending order. keys (n, caller's) is work
 * space. k <= n. */
void sl_quant_topk(const float *x, size_t n, size_t k, uint64_t *keys, uint32_t *idx);

/* Encodes x (n floats, borrowed; n <= max_n) into out (cap bytes, caller's; at least
 * sl_quant_max_bytes) as a payload with the given base (sl_wire_quant.h), *bytes its
 * length. resid (n floats) or
 * NULL: error feedback: x + resid is what is encoded, and resid becomes (x + resid) - what the
 * receiver decodes. key: the stochastic rounding's stream (value i draws at counter i); unused with
 * nearest. SL_ERR_INVALID when a value (after feedback) is NaN or infinite (nothing written, resid
 * unchanged) or cap is short. */
sl_status_t sl_quant_encode(sl_quant_t *q, const float *x, float *resid, size_t n, uint64_t base,
                            uint64_t key, void *out, size_t cap, size_t *bytes);

/* Decodes payload (bytes bytes of wire encoding, borrowed: a received frame's) as a
 * vector of n values into x (n floats, caller's): x = the values (0 where an entry was
 * not sent), or with add x += them; the sender's own call on its payload gives the
 * very bits the receiver gets. *base (may be NULL) the payload's base. SL_ERR_FORMAT
 * for an encoding other than q's or a payload sl_wire_quant_parse refuses: x is then
 * unchanged. */
sl_status_t sl_quant_decode(sl_quant_t *q, unsigned encoding, const void *payload, size_t bytes,
                            size_t n, float *x, int add, uint64_t *base);

#endif
