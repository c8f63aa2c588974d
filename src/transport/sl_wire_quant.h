/* The payload of an int8 or int4 frame (SL_WIRE_INT8 / SL_WIRE_INT4, sl_wire.h): values
 * quantized in blocks with one fp32 scale per block, optionally only some entries of
 * the vector (top-k) with their indices as gaps. The header's count is the payload's
 * bytes; what the bytes mean is checked here, never trusted.
 *
 * Layout (little-endian):
 *    0 u32 n            values of the whole vector (the receiver knows it: must match)
 *    4 u32 block        values per scale, 1 .. SL_WIRE_QUANT_MAX_BLOCK
 *    8 u32 entries      values sent, 0 .. n: n = dense, fewer = sparse with indices
 *   12 u32 index_bytes  bytes of the index stream; 0 when dense
 *   16 u64 base         what the values are a change against (the sender's meaning)
 *   24 index stream     sparse: entries LEB128 gaps, index_j = index_(j-1) + 1 + gap_j
 *                       from index_(-1) = -1: sorted and unique by construction, each
 *                       checked < n, at most 5 bytes each, no byte left over
 *      scales           ceil(entries / block) f32, each finite and > 0
 *      values           int8: entries bytes in [-127, 127]; int4: ceil(entries / 2) bytes,
 *                       two nibbles each (low first) in [-7, 7], an odd count's last high
 *                       nibble 0
 * The value of entry j is q_j * scale_(j / block). */
#ifndef SL_WIRE_QUANT_H
#define SL_WIRE_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"

#define SL_WIRE_QUANT_HEAD_BYTES 24u
#define SL_WIRE_QUANT_MAX_BLOCK 65536u
/* Largest bytes of one index gap in the stream (LEB128 of a u32). */
#define SL_WIRE_QUANT_MAX_GAP_BYTES 5u

/* A payload's fields; the pointers point into it (unaligned). */
typedef struct {
    uint32_t n, block, entries, index_bytes;
    uint64_t base;
    const unsigned char *index;  /* (index_bytes) */
    const unsigned char *scales; /* (ceil(entries / block) x 4) */
    const unsigned char *values;
} sl_wire_quant_t;

/* Largest magnitude of a quantized value: 127 (int8), 7 (int4); 0 for other encodings. */
int sl_wire_quant_max(unsigned encoding);
/* Bytes of the values of entries quantized values; 0 for other encodings. */
size_t sl_wire_quant_value_bytes(unsigned encoding, size_t entries);
/* Bytes of a payload with these fields (head, index stream, scales, values). */
size_t sl_wire_quant_bytes(unsigned encoding, uint32_t block, uint32_t entries, size_t index_bytes);

/* Writes q's first five fields as the payload's head (SL_WIRE_QUANT_HEAD_BYTES at p). */
void sl_wire_quant_put_head(unsigned char *p, const sl_wire_quant_t *q);
/* Writes gap as LEB128 at p (room for SL_WIRE_QUANT_MAX_GAP_BYTES); returns its bytes. */
size_t sl_wire_quant_put_gap(unsigned char *p, uint32_t gap);

/* Checks payload (bytes bytes, borrowed, any alignment) of encoding (SL_WIRE_INT8 or
 * SL_WIRE_INT4) as the values of a vector of n: every rule of the layout above. On SL_OK
 * fills *q and, when idx is not NULL and the payload is sparse, idx (room for n) with
 * the entries' indices. SL_ERR_FORMAT ("int8 payload: ...") for anything else; *q and
 * idx are then undefined. */
sl_status_t sl_wire_quant_parse(unsigned encoding, const void *payload, size_t bytes, uint32_t n,
                                sl_wire_quant_t *q, uint32_t *idx);

#endif
