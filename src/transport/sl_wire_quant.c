/* Layout and validation of int8 / int4 payloads (sl_wire_quant.h). Reads and writes
 * field by field as little-endian, so nothing depends on alignment or padding. */
#include "transport/sl_wire_quant.h"

#include <math.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_half.h"
#include "transport/sl_wire.h"

int
sl_wire_quant_max(unsigned encoding)
{
    return encoding == SL_WIRE_INT8 ? 127 : encoding == SL_WIRE_INT4 ? 7 : 0;
}

size_t
sl_wire_quant_value_bytes(unsigned encoding, size_t entries)
{
    if (encoding == SL_WIRE_INT8)
        return entries;
    if (encoding == SL_WIRE_INT4)
        return entries / 2 + entries % 2;
    return 0;
}

size_t
sl_wire_quant_bytes(unsigned encoding, uint32_t block, uint32_t entries, size_t index_bytes)
{
    size_t nblocks = block ? ((size_t)entries + block - 1) / block : 0;

    return SL_WIRE_QUANT_HEAD_BYTES + index_bytes + 4 * nblocks +
           sl_wire_quant_value_bytes(encoding, entries);
}

void
sl_wire_quant_put_head(unsigned char *p, const sl_wire_quant_t *q)
{
    sl_put_u32(p + 0, q->n);
    sl_put_u32(p + 4, q->block);
    sl_put_u32(p + 8, q->entries);
    sl_put_u32(p + 12, q->index_bytes);
    sl_put_u64(p + 16, q->base);
}

size_t
sl_wire_quant_put_gap(unsigned char *p, uint32_t gap)
{
    size_t k = 0;

    while (gap >= 0x80) {
        p[k++] = (unsigned char)(gap | 0x80);
        gap >>= 7;
    }
    p[k++] = (unsigned char)gap;
    return k;
}

/* The index stream: entries gaps in exactly index_bytes bytes, each index < n. */
static sl_status_t
parse_index(const char *what, const sl_wire_quant_t *q, uint32_t *idx)
{
    size_t at = 0;
    uint64_t next = 0; /* index_(j-1) + 1 */

    for (uint32_t j = 0; j < q->entries; j++) {
        uint64_t gap = 0;
        unsigned shift = 0;

        for (;;) {
            unsigned char b;

            if (at == q->index_bytes)
                return sl_err_set(SL_ERR_FORMAT, "%s payload: index stream ends at entry %u of %u",
                                  what, (unsigned)j, (unsigned)q->entries);
            if (shift >= 7 * SL_WIRE_QUANT_MAX_GAP_BYTES)
                return sl_err_set(SL_ERR_FORMAT, "%s payload: index gap %u longer than %u bytes",
                                  what, (unsigned)j, SL_WIRE_QUANT_MAX_GAP_BYTES);
            b = q->index[at++];
            gap |= (uint64_t)(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80))
                break;
        }
        if (next + gap >= q->n)
            return sl_err_set(SL_ERR_FORMAT, "%s payload: index %llu of entry %u is not below %u",
                              what, (unsigned long long)(next + gap), (unsigned)j, (unsigned)q->n);
        if (idx)
            idx[j] = (uint32_t)(next + gap);
        next += gap + 1;
    }
    if (at != q->index_bytes)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: %zu index bytes left over", what,
                          (size_t)q->index_bytes - at);
    return SL_OK;
}

/* Every scale finite and > 0, every value within +-max, an odd int4 tail's nibble 0. */
static sl_status_t
check_values(const char *what, unsigned encoding, const sl_wire_quant_t *q, size_t nblocks)
{
    int max = sl_wire_quant_max(encoding);

    for (size_t b = 0; b < nblocks; b++) {
        float s = sl_f32_from_bits(sl_get_u32(q->scales + 4 * b));
        if (!(isfinite(s) && s > 0.0f))
            return sl_err_set(SL_ERR_FORMAT, "%s payload: scale %zu is %g, not finite and > 0",
                              what, b, (double)s);
    }
    if (encoding == SL_WIRE_INT8) {
        for (uint32_t j = 0; j < q->entries; j++)
            if ((int8_t)q->values[j] < -max)
                return sl_err_set(SL_ERR_FORMAT, "%s payload: value %u is -128, outside +-127",
                                  what, (unsigned)j);
        return SL_OK;
    }
    for (uint32_t j = 0; j < q->entries; j++) {
        unsigned nib = (q->values[j / 2] >> (4 * (j % 2))) & 0xf;
        if (nib == 8)
            return sl_err_set(SL_ERR_FORMAT, "%s payload: value %u is -8, outside +-7", what,
                              (unsigned)j);
    }
    if (q->entries % 2 && (q->values[q->entries / 2] >> 4) != 0)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: the padding nibble is not 0", what);
    return SL_OK;
}

sl_status_t
sl_wire_quant_parse(unsigned encoding, const void *payload, size_t bytes, uint32_t n,
                    sl_wire_quant_t *q, uint32_t *idx)
{
    const unsigned char *p = payload;
    const char *what = sl_wire_encoding_name(encoding);
    size_t nblocks, want;

    if (!sl_wire_quant_max(encoding))
        return sl_err_set(SL_ERR_FORMAT, "quantized payload: encoding %s is not int8 or int4",
                          what);
    if (bytes < SL_WIRE_QUANT_HEAD_BYTES)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: %zu bytes, shorter than its %u-byte head",
                          what, bytes, SL_WIRE_QUANT_HEAD_BYTES);
    q->n = sl_get_u32(p + 0);
    q->block = sl_get_u32(p + 4);
    q->entries = sl_get_u32(p + 8);
    q->index_bytes = sl_get_u32(p + 12);
    q->base = sl_get_u64(p + 16);
    if (q->n != n)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: %u values, expected %u", what, (unsigned)q->n,
                          (unsigned)n);
    if (q->block < 1 || q->block > SL_WIRE_QUANT_MAX_BLOCK)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: block of %u values, not in 1..%u", what,
                          (unsigned)q->block, SL_WIRE_QUANT_MAX_BLOCK);
    if (q->entries > n)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: %u entries of %u values", what,
                          (unsigned)q->entries, (unsigned)n);
    if (q->entries == n && q->index_bytes != 0)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: dense, yet %u index bytes", what,
                          (unsigned)q->index_bytes);
    if (q->index_bytes > (uint64_t)q->entries * SL_WIRE_QUANT_MAX_GAP_BYTES ||
        q->index_bytes > bytes)
        return sl_err_set(SL_ERR_FORMAT, "%s payload: %u index bytes for %u entries", what,
                          (unsigned)q->index_bytes, (unsigned)q->entries);
    want = sl_wire_quant_bytes(encoding, q->block, q->entries, q->index_bytes);
    if (bytes != want)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s payload: %zu bytes, but %u entries in blocks of %u with %u "
                          "index bytes take %zu",
                          what, bytes, (unsigned)q->entries, (unsigned)q->block,
                          (unsigned)q->index_bytes, want);
    nblocks = ((size_t)q->entries + q->block - 1) / q->block;
    q->index = p + SL_WIRE_QUANT_HEAD_BYTES;
    q->scales = q->index + q->index_bytes;
    q->values = q->scales + 4 * nblocks;
    if (q->entries < n)
        SL_TRY(parse_index(what, q, idx));
    return check_values(what, encoding, q, nblocks);
}
