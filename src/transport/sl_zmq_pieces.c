/* Frames in pieces (sl_zmq_pieces.h): the split rule, descriptors, and the frames being
 * put together, kept in one small array searched by (sender, id): a receiver holds a
 * few at a time, those whose pieces on the other stripes are still on their way. */
#include "transport/sl_zmq_pieces.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_hash.h"

typedef struct {
    uint64_t id;
    uint32_t sender;
    unsigned n;     /* pieces of the frame */
    uint32_t have;  /* bit j: piece j is in */
    unsigned char head[SL_WIRE_HEADER_BYTES];
    unsigned char *buf; /* (payload_bytes) */
    uint64_t bytes;
    sl_hash_bulk_t sum; /* of the pieces in, when hashing */
} held_t;

struct sl_pieces {
    uint32_t size;
    int hash;
    size_t max_frames;
    uint64_t max_bytes, bytes;
    held_t *held;
    size_t nheld, cap;
};

unsigned
sl_pieces_count(uint64_t payload_bytes, unsigned stripes)
{
    uint64_t n = payload_bytes / SL_PIECE_MIN_BYTES;

    if (stripes > SL_PIECE_MAX)
        stripes = SL_PIECE_MAX;
    if (n > stripes)
        n = stripes;
    return n < 2 ? 1u : (unsigned)n;
}

void
sl_pieces_span(uint64_t payload_bytes, unsigned n, unsigned j, uint64_t *offset, uint64_t *len)
{
    uint64_t l = (payload_bytes + n - 1) / n;

    l = (l + 63) & ~(uint64_t)63; /* pieces start on cache lines */
    *offset = (uint64_t)j * l;
    if (*offset > payload_bytes)
        *offset = payload_bytes;
    *len = payload_bytes - *offset < l ? payload_bytes - *offset : l;
}

void
sl_pieces_desc(unsigned char out[SL_PIECE_DESC_BYTES], uint64_t id, unsigned j, unsigned n)
{
    sl_put_u32(out, SL_PIECE_MAGIC);
    sl_put_u16(out + 4, (uint16_t)j);
    sl_put_u16(out + 6, (uint16_t)n);
    sl_put_u64(out + 8, id);
}

sl_status_t
sl_pieces_new(sl_pieces_t **out, uint32_t size, size_t max_frames, uint64_t max_bytes, int hash)
{
    sl_pieces_t *p = calloc(1, sizeof *p);

    *out = NULL;
    if (!p)
        return sl_err_set(SL_ERR_NOMEM, "transport: out of memory");
    p->size = size;
    p->hash = hash;
    p->max_frames = max_frames;
    p->max_bytes = max_bytes;
    *out = p;
    return SL_OK;
}

static void
drop_at(sl_pieces_t *p, size_t i)
{
    p->bytes -= p->held[i].bytes;
    free(p->held[i].buf);
    p->held[i] = p->held[--p->nheld];
}

void
sl_pieces_destroy(sl_pieces_t **pp)
{
    sl_pieces_t *p = pp ? *pp : NULL;

    if (!p)
        return;
    while (p->nheld)
        drop_at(p, 0);
    free(p->held);
    free(p);
    *pp = NULL;
}

/* The frame (sender, id) held, a new one for it (NULL: over the caps or out of
 * memory), made from the piece's header. */
static held_t *
find_or_add(sl_pieces_t *p, uint32_t sender, uint64_t id, unsigned n, const unsigned char *head,
            uint64_t payload_bytes)
{
    held_t *e;

    for (size_t i = 0; i < p->nheld; i++)
        if (p->held[i].sender == sender && p->held[i].id == id)
            return &p->held[i];
    if (p->nheld >= p->max_frames || payload_bytes > p->max_bytes - p->bytes)
        return NULL;
    if (p->nheld == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        held_t *more = realloc(p->held, cap * sizeof *more);
        if (!more)
            return NULL;
        p->held = more;
        p->cap = cap;
    }
    e = &p->held[p->nheld];
    memset(e, 0, sizeof *e);
    e->buf = malloc(payload_bytes);
    if (!e->buf)
        return NULL;
    e->sender = sender;
    e->id = id;
    e->n = n;
    e->bytes = payload_bytes;
    memcpy(e->head, head, SL_WIRE_HEADER_BYTES);
    if (p->hash)
        sl_hash_bulk_init(&e->sum, sl_wire_checksum_seed(head), payload_bytes);
    p->bytes += payload_bytes;
    p->nheld++;
    return e;
}

sl_pieces_verdict_t
sl_pieces_take(sl_pieces_t *p, uint32_t sender, const unsigned char *head,
               const sl_wire_header_t *h, const unsigned char *desc, const void *data, size_t len,
               void **whole, uint64_t *hash)
{
    unsigned j = sl_get_u16(desc + 4), n = sl_get_u16(desc + 6);
    uint64_t id = sl_get_u64(desc + 8), off, want;
    held_t *e;

    *whole = NULL;
    *hash = 0;
    /* only what the sender's rule could have made: n pieces of at least the minimum */
    if (sl_get_u32(desc) != SL_PIECE_MAGIC || sender >= p->size || n < 2 || n > SL_PIECE_MAX ||
        j >= n || sl_pieces_count(h->payload_bytes, n) != n)
        return SL_PIECES_BAD;
    sl_pieces_span(h->payload_bytes, n, j, &off, &want);
    if (len != want)
        return SL_PIECES_BAD;
    e = find_or_add(p, sender, id, n, head, h->payload_bytes);
    if (!e)
        return SL_PIECES_FULL;
    if (e->n != n || memcmp(e->head, head, SL_WIRE_HEADER_BYTES) != 0 || (e->have >> j & 1u))
        return SL_PIECES_BAD; /* the frame held stays: its own pieces may still come */
    /* off is a multiple of 64, as sl_hash_bulk_add's blocks need */
    if (p->hash)
        sl_hash_bulk_add_copy(&e->sum, e->buf + off, data, len, off);
    else
        memcpy(e->buf + off, data, len);
    e->have |= 1u << j;
    if (e->have != (1u << n) - 1)
        return SL_PIECES_HELD;
    *whole = e->buf;
    *hash = p->hash ? sl_hash_bulk_final(&e->sum) : 0;
    e->buf = NULL;
    drop_at(p, (size_t)(e - p->held));
    return SL_PIECES_WHOLE;
}

void
sl_pieces_forget(sl_pieces_t *p, uint32_t sender)
{
    for (size_t i = p->nheld; i-- > 0;)
        if (p->held[i].sender == sender)
            drop_at(p, i);
}

size_t
sl_pieces_held(const sl_pieces_t *p)
{
    return p->nheld;
}
