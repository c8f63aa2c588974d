/* Frame header encoding and validation. Fields are written and read one at a time as
 * little-endian integers (never a struct memcpy), so the layout does not depend on the
 * compiler's padding or the host's byte order. */
#include "transport/sl_wire.h"

#include <math.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_hash.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shoal's wire payloads are host floats: a big-endian host needs byte swapping"
#endif

#define ENC_BIT(e) (1u << (e))
#define FLOAT_ENCS (ENC_BIT(SL_WIRE_FP32) | ENC_BIT(SL_WIRE_FP16) | ENC_BIT(SL_WIRE_BF16))
#define QUANT_ENCS (ENC_BIT(SL_WIRE_INT8) | ENC_BIT(SL_WIRE_INT4))

/* What each kind may carry: a payload cap and the encodings allowed. */
static const struct {
    const char *name;
    uint64_t max_payload;
    unsigned encodings; /* bit per sl_wire_encoding_t */
} kinds[SL_WIRE_NKINDS] = {
    [SL_WIRE_DATA] = {"data", SL_WIRE_MAX_PAYLOAD, FLOAT_ENCS | ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_GOSSIP_SNAPSHOT] = {"gossip snapshot", SL_WIRE_MAX_PAYLOAD, FLOAT_ENCS | QUANT_ENCS},
    [SL_WIRE_GOSSIP_REQUEST] = {"gossip request", 0, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_ALLREDUCE] = {"allreduce", SL_WIRE_MAX_PAYLOAD, FLOAT_ENCS},
    [SL_WIRE_ALLGATHER] = {"allgather", SL_WIRE_MAX_PAYLOAD, FLOAT_ENCS},
    [SL_WIRE_BROADCAST] = {"broadcast", SL_WIRE_MAX_PAYLOAD, FLOAT_ENCS},
    [SL_WIRE_BARRIER] = {"barrier", 0, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_ABORT] = {"abort", SL_WIRE_MAX_ABORT, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_HEARTBEAT] = {"heartbeat", 0, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_SPARSE_INDEX] = {"sparse index", SL_WIRE_MAX_PAYLOAD, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_SPARSE_VALUES] = {"sparse values", SL_WIRE_MAX_PAYLOAD, FLOAT_ENCS},
    [SL_WIRE_SHM_OFFER] = {"shared-memory offer", SL_WIRE_SHM_OFFER_BYTES, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_SHM_ACCEPT] = {"shared-memory accept", 8, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_SHM_WAKE] = {"shared-memory wake-up", 0, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_HELLO] = {"hello", SL_WIRE_MAX_HELLO, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_STATE_REQUEST] = {"state request", 0, ENC_BIT(SL_WIRE_BYTES)},
    [SL_WIRE_STATE] = {"state", SL_WIRE_MAX_PAYLOAD,
                       ENC_BIT(SL_WIRE_FP32) | ENC_BIT(SL_WIRE_BYTES)},
};

sl_wire_key_t
sl_wire_key_of(const sl_wire_header_t *h)
{
    sl_wire_key_t k = {h->round, h->component, h->seq, h->sender, h->kind};
    return k;
}

sl_wire_header_t
sl_wire_header_for(uint64_t run_id, uint32_t sender, const sl_wire_key_t *key, uint32_t count,
                   unsigned encoding, float scale)
{
    sl_wire_header_t h;

    memset(&h, 0, sizeof h);
    h.run_id = run_id;
    h.round = key->round;
    h.payload_bytes = (uint64_t)count * sl_wire_element_bytes(encoding);
    h.sender = sender;
    h.receiver = key->peer;
    h.component = key->component;
    h.seq = key->seq;
    h.count = count;
    h.scale = scale;
    h.kind = key->kind;
    h.encoding = (uint8_t)(encoding < 256 ? encoding : 0);
    return h;
}

size_t
sl_wire_element_bytes(unsigned encoding)
{
    switch (encoding) {
    case SL_WIRE_FP32:
        return 4;
    case SL_WIRE_FP16:
        return 2;
    case SL_WIRE_BF16:
        return 2;
    case SL_WIRE_BYTES:
    case SL_WIRE_INT8: /* counted in bytes: the layout is sl_wire_quant.h's */
    case SL_WIRE_INT4:
        return 1;
    default:
        return 0;
    }
}

const char *
sl_wire_kind_name(unsigned kind)
{
    return kind > 0 && kind < SL_WIRE_NKINDS ? kinds[kind].name : "unknown kind";
}

const char *
sl_wire_encoding_name(unsigned encoding)
{
    switch (encoding) {
    case SL_WIRE_FP32:
        return "fp32";
    case SL_WIRE_FP16:
        return "fp16";
    case SL_WIRE_BF16:
        return "bf16";
    case SL_WIRE_BYTES:
        return "bytes";
    case SL_WIRE_INT8:
        return "int8";
    case SL_WIRE_INT4:
        return "int4";
    default:
        return "unknown encoding";
    }
}

const char *
sl_wire_reason_name(unsigned reason)
{
    static const char *names[SL_WIRE_NREASONS] = {"ok",
                                                  "truncated",
                                                  "bad magic",
                                                  "bad version",
                                                  "wrong run id",
                                                  "bad sender",
                                                  "wrong receiver",
                                                  "unknown kind",
                                                  "bad encoding",
                                                  "bad scale",
                                                  "too large",
                                                  "count does not match size",
                                                  "length does not match",
                                                  "bad checksum"};
    return reason < SL_WIRE_NREASONS ? names[reason] : "unknown reason";
}

static uint32_t
float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float
bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint64_t
sl_wire_checksum(const unsigned char *head, const void *payload, size_t payload_bytes)
{
    /* the payload's hash is keyed by the header's */
    return sl_hash_bulk(payload, payload_bytes, sl_wire_checksum_seed(head));
}

uint64_t
sl_wire_checksum_seed(const unsigned char *head)
{
    return sl_hash_bytes(head, SL_WIRE_CHECKSUM_OFFSET, SL_WIRE_MAGIC);
}

/* The checks that need only the header's own fields (kind, encoding, scale, sizes),
 * shared by the encoder and the decoder so that what we send always decodes. */
static sl_wire_reason_t
check_fields(const sl_wire_header_t *h)
{
    size_t elem;

    if (h->kind == 0 || h->kind >= SL_WIRE_NKINDS)
        return SL_WIRE_BAD_KIND;
    elem = sl_wire_element_bytes(h->encoding);
    if (elem == 0 || !(kinds[h->kind].encodings & ENC_BIT(h->encoding)))
        return SL_WIRE_BAD_ENCODING;
    if (h->encoding == SL_WIRE_FP32 || h->encoding == SL_WIRE_BYTES ||
        h->encoding == SL_WIRE_INT8 || h->encoding == SL_WIRE_INT4) {
        if (h->scale != 1.0f)
            return SL_WIRE_BAD_SCALE;
    } else if (!(isfinite(h->scale) && h->scale > 0.0f)) {
        return SL_WIRE_BAD_SCALE;
    }
    if (h->payload_bytes > kinds[h->kind].max_payload)
        return SL_WIRE_TOO_LARGE;
    if ((uint64_t)h->count * elem != h->payload_bytes)
        return SL_WIRE_BAD_COUNT;
    return SL_WIRE_OK;
}

/* The header's fields, checksum not yet, after the checks sl_wire_decode makes. */
static sl_status_t
encode_fields(const sl_wire_header_t *h, unsigned char out[SL_WIRE_HEADER_BYTES])
{
    sl_wire_reason_t why = check_fields(h);

    if (why != SL_WIRE_OK)
        return sl_err_set(SL_ERR_INVALID, "frame encoding: %s frame to rank %u: %s",
                          sl_wire_kind_name(h->kind), (unsigned)h->receiver,
                          sl_wire_reason_name(why));
    sl_put_u32(out + 0, SL_WIRE_MAGIC);
    sl_put_u16(out + 4, SL_WIRE_VERSION);
    out[6] = h->kind;
    out[7] = h->encoding;
    sl_put_u64(out + 8, h->run_id);
    sl_put_u32(out + 16, h->sender);
    sl_put_u32(out + 20, h->receiver);
    sl_put_u32(out + 24, h->component);
    sl_put_u32(out + 28, h->seq);
    sl_put_u64(out + 32, h->round);
    sl_put_u32(out + 40, h->count);
    sl_put_u32(out + 44, float_bits(h->scale));
    sl_put_u64(out + 48, h->payload_bytes);
    return SL_OK;
}

sl_status_t
sl_wire_encode(const sl_wire_header_t *h, const void *payload,
               unsigned char out[SL_WIRE_HEADER_BYTES])
{
    SL_TRY(encode_fields(h, out));
    sl_put_u64(out + SL_WIRE_CHECKSUM_OFFSET, sl_wire_checksum(out, payload, h->payload_bytes));
    return SL_OK;
}

sl_status_t
sl_wire_encode_head(const sl_wire_header_t *h, unsigned char out[SL_WIRE_HEADER_BYTES])
{
    SL_TRY(encode_fields(h, out));
    sl_put_u64(out + SL_WIRE_CHECKSUM_OFFSET, sl_wire_checksum(out, NULL, 0));
    return SL_OK;
}

void
sl_wire_set_checksum(unsigned char head[SL_WIRE_HEADER_BYTES], uint64_t checksum)
{
    sl_put_u64(head + SL_WIRE_CHECKSUM_OFFSET, checksum);
}

sl_status_t
sl_wire_encode_local(const sl_wire_header_t *h, const void *payload, unsigned char *out)
{
    SL_TRY(sl_wire_encode_head(h, out));
    if (h->payload_bytes)
        memcpy(out + SL_WIRE_HEADER_BYTES, payload, h->payload_bytes);
    return SL_OK;
}

/* Every check of a header (SL_WIRE_HEADER_BYTES at head) but its length and checksum. */
static sl_wire_reason_t
decode_fields(const unsigned char *p, uint64_t run_id, uint32_t me, uint32_t nranks,
              sl_wire_header_t *h)
{
    if (sl_get_u32(p) != SL_WIRE_MAGIC)
        return SL_WIRE_BAD_MAGIC;
    if (sl_get_u16(p + 4) != SL_WIRE_VERSION)
        return SL_WIRE_BAD_VERSION;
    h->kind = p[6];
    h->encoding = p[7];
    h->run_id = sl_get_u64(p + 8);
    h->sender = sl_get_u32(p + 16);
    h->receiver = sl_get_u32(p + 20);
    h->component = sl_get_u32(p + 24);
    h->seq = sl_get_u32(p + 28);
    h->round = sl_get_u64(p + 32);
    h->count = sl_get_u32(p + 40);
    h->scale = bits_float(sl_get_u32(p + 44));
    h->payload_bytes = sl_get_u64(p + 48);
    if (h->run_id != run_id)
        return SL_WIRE_BAD_RUN;
    if (h->sender >= nranks || h->sender == me)
        return SL_WIRE_BAD_SENDER;
    if (h->receiver != me)
        return SL_WIRE_BAD_RECEIVER;
    return check_fields(h);
}

sl_wire_reason_t
sl_wire_decode_head(const void *head, uint64_t run_id, uint32_t me, uint32_t nranks,
                    sl_wire_header_t *h)
{
    return decode_fields(head, run_id, me, nranks, h);
}

sl_wire_reason_t
sl_wire_decode_hashed(const void *head, uint64_t payload_len, uint64_t payload_hash,
                      uint64_t run_id, uint32_t me, uint32_t nranks, sl_wire_header_t *h)
{
    const unsigned char *p = head;
    sl_wire_reason_t why = decode_fields(p, run_id, me, nranks, h);

    if (why != SL_WIRE_OK)
        return why;
    if (h->payload_bytes != payload_len)
        return SL_WIRE_BAD_LENGTH;
    if (sl_get_u64(p + SL_WIRE_CHECKSUM_OFFSET) != payload_hash)
        return SL_WIRE_BAD_CHECKSUM;
    return SL_WIRE_OK;
}

/* sl_wire_decode_parts; local: the checksum covers the header only */
static sl_wire_reason_t
decode_parts(const void *head, size_t head_len, const void *payload, size_t payload_len,
             uint64_t run_id, uint32_t me, uint32_t nranks, int local, sl_wire_header_t *h)
{
    const unsigned char *p = head;
    sl_wire_reason_t why;

    if (head_len < SL_WIRE_HEADER_BYTES)
        return SL_WIRE_TRUNCATED;
    why = decode_fields(p, run_id, me, nranks, h);
    if (why != SL_WIRE_OK)
        return why;
    if (head_len != SL_WIRE_HEADER_BYTES || h->payload_bytes != payload_len)
        return SL_WIRE_BAD_LENGTH;
    if (sl_get_u64(p + SL_WIRE_CHECKSUM_OFFSET) !=
        sl_wire_checksum(p, payload, local ? 0 : payload_len))
        return SL_WIRE_BAD_CHECKSUM;
    return SL_WIRE_OK;
}

sl_wire_reason_t
sl_wire_decode_parts(const void *head, size_t head_len, const void *payload, size_t payload_len,
                     uint64_t run_id, uint32_t me, uint32_t nranks, sl_wire_header_t *h)
{
    return decode_parts(head, head_len, payload, payload_len, run_id, me, nranks, 0, h);
}

sl_wire_reason_t
sl_wire_decode_parts_local(const void *head, size_t head_len, const void *payload,
                           size_t payload_len, uint64_t run_id, uint32_t me, uint32_t nranks,
                           sl_wire_header_t *h)
{
    return decode_parts(head, head_len, payload, payload_len, run_id, me, nranks, 1, h);
}

static sl_wire_reason_t
decode_whole(const void *buf, size_t len, uint64_t run_id, uint32_t me, uint32_t nranks, int local,
             sl_wire_header_t *h, const void **payload)
{
    const unsigned char *p = buf;

    if (len < SL_WIRE_HEADER_BYTES)
        return SL_WIRE_TRUNCATED;
    *payload = p + SL_WIRE_HEADER_BYTES;
    return decode_parts(p, SL_WIRE_HEADER_BYTES, p + SL_WIRE_HEADER_BYTES,
                        len - SL_WIRE_HEADER_BYTES, run_id, me, nranks, local, h);
}

sl_wire_reason_t
sl_wire_decode(const void *buf, size_t len, uint64_t run_id, uint32_t me, uint32_t nranks,
               sl_wire_header_t *h, const void **payload)
{
    return decode_whole(buf, len, run_id, me, nranks, 0, h, payload);
}

sl_wire_reason_t
sl_wire_decode_local(const void *buf, size_t len, uint64_t run_id, uint32_t me, uint32_t nranks,
                     sl_wire_header_t *h, const void **payload)
{
    return decode_whole(buf, len, run_id, me, nranks, 1, h, payload);
}
