/* Unit tests of src/transport's frame format (sl_wire) and mailbox: every header field
 * corrupted in turn, every truncation, oversizing, round trips; mailbox filing, stale
 * rounds, duplicates, caps, and many colliding keys. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "transport/sl_mailbox.h"
#include "transport/sl_wire.h"

#include "test_tool.h"

#define RUN 0x0123456789abcdefULL
#define ME 2
#define NRANKS 5

/* A good allreduce frame from rank 4 to rank ME: 4 fp32 values, header then payload. */
static size_t
good_frame(unsigned char *buf, sl_wire_header_t *h)
{
    static const float vals[4] = {1.5f, -2.0f, 3.25f, 1e-3f};

    memset(h, 0, sizeof *h);
    h->run_id = RUN;
    h->round = 0x1122334455667788ULL;
    h->sender = 4;
    h->receiver = ME;
    h->component = 77;
    h->seq = 9;
    h->count = 4;
    h->scale = 1.0f;
    h->kind = SL_WIRE_ALLREDUCE;
    h->encoding = SL_WIRE_FP32;
    h->payload_bytes = sizeof vals;
    ck_assert_int_eq(sl_wire_encode(h, vals, buf), SL_OK);
    memcpy(buf + SL_WIRE_HEADER_BYTES, vals, sizeof vals);
    return SL_WIRE_HEADER_BYTES + sizeof vals;
}

static void
put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes the checksum, so that only the field under test is wrong. */
static void
reseal(unsigned char *buf, size_t len)
{
    put_le(buf + SL_WIRE_CHECKSUM_OFFSET,
           sl_wire_checksum(buf, buf + SL_WIRE_HEADER_BYTES, len - SL_WIRE_HEADER_BYTES), 8);
}

static uint32_t
fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

START_TEST(test_round_trip)
{
    unsigned char buf[256];
    sl_wire_header_t h, d;
    const void *payload;
    size_t len = good_frame(buf, &h);

    ck_assert_uint_eq(len, 80);
    /* the documented layout, byte for byte */
    ck_assert_uint_eq(buf[0], 'S');
    ck_assert_uint_eq(buf[3], 'L');
    ck_assert_uint_eq(buf[4], SL_WIRE_VERSION);
    ck_assert_uint_eq(buf[6], SL_WIRE_ALLREDUCE);
    ck_assert_uint_eq(buf[8], 0xef);
    ck_assert_uint_eq(buf[16], 4);
    ck_assert_uint_eq(buf[20], ME);
    ck_assert_uint_eq(buf[24], 77);
    ck_assert_uint_eq(buf[28], 9);
    ck_assert_uint_eq(buf[32], 0x88);
    ck_assert_uint_eq(buf[40], 4);
    ck_assert_uint_eq(buf[47], 0x3f); /* 1.0f = 0x3f800000 */
    ck_assert_uint_eq(buf[48], 16);

    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload), SL_WIRE_OK);
    ck_assert_ptr_eq(payload, buf + SL_WIRE_HEADER_BYTES);
    ck_assert_uint_eq(d.run_id, RUN);
    ck_assert_uint_eq(d.round, h.round);
    ck_assert_uint_eq(d.sender, 4);
    ck_assert_uint_eq(d.receiver, ME);
    ck_assert_uint_eq(d.component, 77);
    ck_assert_uint_eq(d.seq, 9);
    ck_assert_uint_eq(d.count, 4);
    ck_assert_uint_eq(d.payload_bytes, 16);
    ck_assert_uint_eq(d.kind, SL_WIRE_ALLREDUCE);
    ck_assert_uint_eq(d.encoding, SL_WIRE_FP32);
    ck_assert(d.scale == 1.0f);
    sl_wire_key_t k = sl_wire_key_of(&d);
    ck_assert_uint_eq(k.peer, 4);
    ck_assert_uint_eq(k.round, h.round);
    ck_assert_uint_eq(k.seq, 9);

    /* the same frame in two parts */
    ck_assert_int_eq(sl_wire_decode_parts(buf, SL_WIRE_HEADER_BYTES, buf + SL_WIRE_HEADER_BYTES, 16,
                                          RUN, ME, NRANKS, &d),
                     SL_WIRE_OK);
    ck_assert_int_eq(sl_wire_decode_parts(buf, SL_WIRE_HEADER_BYTES + 1, buf + SL_WIRE_HEADER_BYTES,
                                          16, RUN, ME, NRANKS, &d),
                     SL_WIRE_BAD_LENGTH);

    /* every kind with what it may carry, fp16 with a scale, an empty barrier */
    sl_wire_header_t e = h;
    e.kind = SL_WIRE_GOSSIP_SNAPSHOT;
    e.encoding = SL_WIRE_FP16;
    e.scale = 1024.0f;
    e.count = 8;
    ck_assert_int_eq(sl_wire_encode(&e, buf + SL_WIRE_HEADER_BYTES, buf), SL_OK);
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload), SL_WIRE_OK);
    ck_assert(d.scale == 1024.0f);
    ck_assert_uint_eq(d.count, 8);
    e.kind = SL_WIRE_BARRIER;
    e.encoding = SL_WIRE_BYTES;
    e.scale = 1.0f;
    e.count = 0;
    e.payload_bytes = 0;
    ck_assert_int_eq(sl_wire_encode(&e, NULL, buf), SL_OK);
    ck_assert_int_eq(sl_wire_decode(buf, SL_WIRE_HEADER_BYTES, RUN, ME, NRANKS, &d, &payload),
                     SL_WIRE_OK);
    ck_assert_uint_eq(d.kind, SL_WIRE_BARRIER);

    /* local frames (shared-memory lanes): the network frame's header fields, a checksum
     * of the header only; a changed payload still decodes as local, never as a network
     * frame; a changed header field decodes as neither */
    unsigned char whole[SL_WIRE_HEADER_BYTES + 300], vals[300];
    for (int i = 0; i < 300; i++)
        vals[i] = (unsigned char)(i * 13 + 1);
    e.kind = SL_WIRE_DATA;
    for (uint32_t n = 0; n <= 300; n += 7) {
        e.count = n;
        e.payload_bytes = n;
        ck_assert_int_eq(sl_wire_encode(&e, vals, buf), SL_OK);
        memset(whole, 0xaa, sizeof whole);
        ck_assert_int_eq(sl_wire_encode_local(&e, vals, whole), SL_OK);
        ck_assert_int_eq(memcmp(whole, buf, SL_WIRE_CHECKSUM_OFFSET), 0);
        ck_assert_uint_eq(sl_get_u64(whole + SL_WIRE_CHECKSUM_OFFSET),
                          sl_wire_checksum(whole, NULL, 0));
        ck_assert_int_eq(memcmp(whole + SL_WIRE_HEADER_BYTES, vals, n), 0);
        ck_assert_uint_eq(whole[SL_WIRE_HEADER_BYTES + n], 0xaa); /* nothing past it */
        ck_assert_int_eq(
            sl_wire_decode_local(whole, SL_WIRE_HEADER_BYTES + n, RUN, ME, NRANKS, &d, &payload),
            SL_WIRE_OK);
        ck_assert_uint_eq(d.count, n);
        ck_assert_ptr_eq(payload, whole + SL_WIRE_HEADER_BYTES);
        if (n == 0)
            continue;
        ck_assert_int_eq(
            sl_wire_decode(whole, SL_WIRE_HEADER_BYTES + n, RUN, ME, NRANKS, &d, &payload),
            SL_WIRE_BAD_CHECKSUM);
        ck_assert_int_eq(
            sl_wire_decode_local(buf, SL_WIRE_HEADER_BYTES, RUN, ME, NRANKS, &d, &payload),
            SL_WIRE_BAD_LENGTH);
        whole[SL_WIRE_HEADER_BYTES + n - 1] ^= 1;
        ck_assert_int_eq(
            sl_wire_decode_local(whole, SL_WIRE_HEADER_BYTES + n, RUN, ME, NRANKS, &d, &payload),
            SL_WIRE_OK);
        whole[28] ^= 1; /* seq */
        ck_assert_int_eq(
            sl_wire_decode_local(whole, SL_WIRE_HEADER_BYTES + n, RUN, ME, NRANKS, &d, &payload),
            SL_WIRE_BAD_CHECKSUM);
        ck_assert_int_eq(sl_wire_decode_local(whole, SL_WIRE_HEADER_BYTES + n - 1, RUN, ME, NRANKS,
                                              &d, &payload),
                         SL_WIRE_BAD_LENGTH);
    }
    e.kind = 0;
    ck_assert_int_eq(sl_wire_encode_local(&e, vals, whole), SL_ERR_INVALID);
}
END_TEST

/* One header field set to a bad value, checksum resealed: exactly that reason. */
typedef struct {
    const char *what;
    unsigned offset, bytes;
    uint64_t value;
    sl_wire_reason_t want;
} field_case_t;

START_TEST(test_each_field_rejected)
{
    static const field_case_t cases[] = {
        {"magic", 0, 4, 0x4c4f4854u, SL_WIRE_BAD_MAGIC},
        {"magic byte", 3, 1, 0, SL_WIRE_BAD_MAGIC},
        {"version 0", 4, 2, 0, SL_WIRE_BAD_VERSION},
        {"version 1 (payloads hashed with sl_hash)", 4, 2, 1, SL_WIRE_BAD_VERSION},
        {"next version", 4, 2, SL_WIRE_VERSION + 1, SL_WIRE_BAD_VERSION},
        {"kind 0", 6, 1, 0, SL_WIRE_BAD_KIND},
        {"kind past the last", 6, 1, SL_WIRE_NKINDS, SL_WIRE_BAD_KIND},
        {"kind 255", 6, 1, 255, SL_WIRE_BAD_KIND},
        {"encoding 0", 7, 1, 0, SL_WIRE_BAD_ENCODING},
        {"encoding 5", 7, 1, 5, SL_WIRE_BAD_ENCODING},
        {"bytes in an allreduce", 7, 1, SL_WIRE_BYTES, SL_WIRE_BAD_ENCODING},
        {"run id", 8, 8, RUN ^ 1, SL_WIRE_BAD_RUN},
        {"run id high byte", 15, 1, 0, SL_WIRE_BAD_RUN},
        {"sender == nranks", 16, 4, NRANKS, SL_WIRE_BAD_SENDER},
        {"sender huge", 16, 4, 0xffffffffu, SL_WIRE_BAD_SENDER},
        {"sender is me", 16, 4, ME, SL_WIRE_BAD_SENDER},
        {"receiver other", 20, 4, 3, SL_WIRE_BAD_RECEIVER},
        {"receiver out of range", 20, 4, NRANKS + 7, SL_WIRE_BAD_RECEIVER},
        {"scale 2 for fp32", 44, 4, 0x40000000u, SL_WIRE_BAD_SCALE},
        {"scale NaN", 44, 4, 0x7fc00000u, SL_WIRE_BAD_SCALE},
        {"count + 1", 40, 4, 5, SL_WIRE_BAD_COUNT},
        {"count 0", 40, 4, 0, SL_WIRE_BAD_COUNT},
        {"payload length 20", 48, 8, 20, SL_WIRE_BAD_COUNT},
        {"payload length over the cap", 48, 8, SL_WIRE_MAX_PAYLOAD + 4, SL_WIRE_TOO_LARGE},
        {"payload length 2^63", 48, 8, (uint64_t)1 << 63, SL_WIRE_TOO_LARGE},
    };
    unsigned char buf[256];
    sl_wire_header_t h, d;
    const void *payload;

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len = good_frame(buf, &h);
        put_le(buf + cases[c].offset, cases[c].value, (int)cases[c].bytes);
        reseal(buf, len);
        ck_assert_msg(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload) == cases[c].want,
                      "%s: got %s, want %s", cases[c].what,
                      sl_wire_reason_name(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload)),
                      sl_wire_reason_name(cases[c].want));
    }

    /* count and length agree with each other but not with the bytes that follow */
    size_t len = good_frame(buf, &h);
    put_le(buf + 40, 5, 4);
    put_le(buf + 48, 20, 8);
    reseal(buf, len);
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload), SL_WIRE_BAD_LENGTH);

    /* checksum field or a payload byte changed */
    len = good_frame(buf, &h);
    buf[SL_WIRE_CHECKSUM_OFFSET + 3] ^= 0x10;
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload), SL_WIRE_BAD_CHECKSUM);
    len = good_frame(buf, &h);
    buf[len - 1] ^= 1;
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload), SL_WIRE_BAD_CHECKSUM);

    /* any flipped bit anywhere, not resealed, is refused (the checksum at the latest) */
    for (size_t byte = 0; byte < 80; byte++)
        for (int bit = 0; bit < 8; bit++) {
            len = good_frame(buf, &h);
            buf[byte] ^= (unsigned char)(1 << bit);
            ck_assert_msg(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload) != SL_WIRE_OK,
                          "bit %d of byte %zu", bit, byte);
        }

    /* the same frame judged by another node or run */
    len = good_frame(buf, &h);
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN + 1, ME, NRANKS, &d, &payload), SL_WIRE_BAD_RUN);
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, 3, NRANKS, &d, &payload), SL_WIRE_BAD_RECEIVER);
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, 4, &d, &payload), SL_WIRE_BAD_SENDER);
}
END_TEST

START_TEST(test_truncated_and_oversized)
{
    unsigned char buf[256];
    sl_wire_header_t h, d;
    const void *payload;
    size_t len = good_frame(buf, &h);

    for (size_t n = 0; n < SL_WIRE_HEADER_BYTES; n++) {
        unsigned char *copy = malloc(n ? n : 1); /* exact size: nothing read past it */
        memcpy(copy, buf, n);
        ck_assert_int_eq(sl_wire_decode(copy, n, RUN, ME, NRANKS, &d, &payload), SL_WIRE_TRUNCATED);
        ck_assert_int_eq(sl_wire_decode_parts(copy, n, NULL, 0, RUN, ME, NRANKS, &d),
                         SL_WIRE_TRUNCATED);
        free(copy);
    }
    for (size_t n = SL_WIRE_HEADER_BYTES; n < len; n++)
        ck_assert_int_eq(sl_wire_decode(buf, n, RUN, ME, NRANKS, &d, &payload), SL_WIRE_BAD_LENGTH);
    ck_assert_int_eq(sl_wire_decode(buf, len, RUN, ME, NRANKS, &d, &payload), SL_WIRE_OK);
    for (size_t n = len + 1; n < len + 9; n++)
        ck_assert_int_eq(sl_wire_decode(buf, n, RUN, ME, NRANKS, &d, &payload), SL_WIRE_BAD_LENGTH);
}
END_TEST

START_TEST(test_kind_limits)
{
    unsigned char buf[SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_ABORT + 8];
    char text[SL_WIRE_MAX_ABORT + 1];
    sl_wire_header_t h = {0}, d;
    const void *payload;

    memset(text, 'x', sizeof text);
    h.run_id = RUN;
    h.sender = 0;
    h.receiver = ME;
    h.scale = 1.0f;
    h.kind = SL_WIRE_ABORT;
    h.encoding = SL_WIRE_BYTES;
    h.count = SL_WIRE_MAX_ABORT;
    h.payload_bytes = SL_WIRE_MAX_ABORT;
    ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_OK);
    memcpy(buf + SL_WIRE_HEADER_BYTES, text, SL_WIRE_MAX_ABORT);
    ck_assert_int_eq(sl_wire_decode(buf, SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_ABORT, RUN, ME, NRANKS,
                                    &d, &payload),
                     SL_WIRE_OK);
    /* one byte more than an abort may carry: refused by both ends */
    h.count = h.payload_bytes = SL_WIRE_MAX_ABORT + 1;
    ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_ERR_INVALID);
    put_le(buf + 40, SL_WIRE_MAX_ABORT + 1, 4);
    put_le(buf + 48, SL_WIRE_MAX_ABORT + 1, 8);
    buf[SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_ABORT] = 'x';
    reseal(buf, SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_ABORT + 1);
    ck_assert_int_eq(sl_wire_decode(buf, SL_WIRE_HEADER_BYTES + SL_WIRE_MAX_ABORT + 1, RUN, ME,
                                    NRANKS, &d, &payload),
                     SL_WIRE_TOO_LARGE);
    /* control kinds carry nothing */
    h.kind = SL_WIRE_BARRIER;
    h.count = h.payload_bytes = 1;
    ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_ERR_INVALID);
    h.kind = SL_WIRE_HEARTBEAT;
    ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_ERR_INVALID);
    /* fp16 scale must be finite and positive; fp32 scale must be 1 */
    h.kind = SL_WIRE_DATA;
    h.encoding = SL_WIRE_FP16;
    h.count = 2;
    h.payload_bytes = 4;
    float bad[] = {0.0f, -1.0f, INFINITY, NAN};
    for (size_t i = 0; i < 4; i++) {
        h.scale = bad[i];
        ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_ERR_INVALID);
    }
    h.scale = 0.5f;
    ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_OK);
    h.encoding = SL_WIRE_FP32;
    h.count = 1;
    ck_assert_int_eq(sl_wire_encode(&h, text, buf), SL_ERR_INVALID);
    ck_assert_uint_eq(fbits(1.0f), 0x3f800000u);
    /* names exist and differ */
    for (unsigned a = 0; a < SL_WIRE_NREASONS; a++)
        for (unsigned b = 0; b < a; b++)
            ck_assert_str_ne(sl_wire_reason_name(a), sl_wire_reason_name(b));
    ck_assert_str_eq(sl_wire_kind_name(SL_WIRE_BROADCAST), "broadcast");
    ck_assert_str_eq(sl_wire_kind_name(0), "unknown kind");
    ck_assert_uint_eq(sl_wire_element_bytes(SL_WIRE_BF16), 2);
    ck_assert_uint_eq(sl_wire_element_bytes(99), 0);
}
END_TEST

/* ---- mailbox ---- */

static int released;

static void
count_release(void *owner)
{
    released++;
    free(owner);
}

static void *
owner_of(int v)
{
    int *p = malloc(sizeof *p);
    *p = v;
    return p;
}

START_TEST(test_mailbox_filing)
{
    sl_mailbox_t *mb;
    size_t purged = 0;
    sl_wire_key_t a = {5, 1, 0, 3, SL_WIRE_ALLREDUCE}, b = a, c = a;
    int *got;

    released = 0;
    ck_assert_int_eq(sl_mailbox_new(&mb, 4, 1000, 8, count_release), SL_OK);
    b.seq = 1;
    c.peer = 4;
    /* round 5 is current: frames of a (kind, component) never asked for would get only
     * half of each cap (test_mailbox_window) */
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_ALLREDUCE, 1, 5, &purged), SL_OK);
    ck_assert_uint_eq(purged, 0);
    ck_assert_int_eq(sl_mailbox_file(mb, &a, 100, owner_of(1)), SL_MAILBOX_FILED);
    ck_assert_int_eq(sl_mailbox_file(mb, &b, 100, owner_of(2)), SL_MAILBOX_FILED);
    ck_assert_int_eq(sl_mailbox_file(mb, &c, 100, owner_of(3)), SL_MAILBOX_FILED);
    ck_assert_int_eq(sl_mailbox_file(mb, &a, 100, owner_of(9)), SL_MAILBOX_DUPLICATE);
    ck_assert_int_eq(released, 1);
    ck_assert_uint_eq(sl_mailbox_frames(mb), 3);
    ck_assert_uint_eq(sl_mailbox_bytes(mb), 300);
    /* handed out by exact key, in any order */
    got = sl_mailbox_take(mb, &c);
    ck_assert_int_eq(*got, 3);
    free(got);
    ck_assert_ptr_null(sl_mailbox_take(mb, &c));
    got = sl_mailbox_take(mb, &a);
    ck_assert_int_eq(*got, 1);
    free(got);
    ck_assert_uint_eq(sl_mailbox_frames(mb), 1);
    ck_assert_uint_eq(sl_mailbox_bytes(mb), 100);
    /* asking for round 6 makes round 5 stale: b is purged, new round-5 frames refused */
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_ALLREDUCE, 1, 6, &purged), SL_OK);
    ck_assert_uint_eq(purged, 1);
    ck_assert_int_eq(released, 2);
    ck_assert_int_eq(sl_mailbox_is_old(mb, SL_WIRE_ALLREDUCE, 1, 5), 1);
    ck_assert_int_eq(sl_mailbox_is_old(mb, SL_WIRE_ALLREDUCE, 1, 6), 0);
    ck_assert_int_eq(sl_mailbox_is_old(mb, SL_WIRE_ALLREDUCE, 2, 0), 0);
    ck_assert_int_eq(sl_mailbox_is_old(mb, SL_WIRE_BROADCAST, 1, 5), 0);
    ck_assert_int_eq(sl_mailbox_file(mb, &a, 1, owner_of(4)), SL_MAILBOX_OLD_ROUND);
    /* rounds never go back */
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_ALLREDUCE, 1, 2, &purged), SL_OK);
    ck_assert_int_eq(sl_mailbox_is_old(mb, SL_WIRE_ALLREDUCE, 1, 5), 1);
    /* caps: frames, then bytes */
    sl_wire_key_t k = {7, 1, 0, 0, SL_WIRE_ALLREDUCE};
    for (uint32_t i = 0; i < 4; i++) {
        k.seq = i;
        ck_assert_int_eq(sl_mailbox_file(mb, &k, 10, owner_of((int)i)), SL_MAILBOX_FILED);
    }
    k.seq = 4;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 10, owner_of(4)), SL_MAILBOX_FULL);
    for (uint32_t i = 0; i < 4; i++) {
        k.seq = i;
        free(sl_mailbox_take(mb, &k));
    }
    k.seq = 10;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 1000, owner_of(0)), SL_MAILBOX_FILED);
    k.seq = 11;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 1, owner_of(0)), SL_MAILBOX_FULL);
    released = 0;
    sl_mailbox_destroy(&mb);
    ck_assert_ptr_null(mb);
    ck_assert_int_eq(released, 1);
    sl_mailbox_destroy(&mb); /* NULL is fine */
}
END_TEST

/* Thousands of keys (long probe clusters, removals in the middle of them, growth,
 * purges mixed in): every filed frame must stay reachable by its key. */
START_TEST(test_mailbox_many_keys)
{
    enum { N = 6000 };
    sl_mailbox_t *mb;
    static int live[N];
    size_t purged = 0;

    released = 0;
    ck_assert_int_eq(sl_mailbox_new(&mb, N, (uint64_t)N * 8, 2, count_release), SL_OK);
    for (uint32_t c = 0; c < 2; c++) { /* round 0 current: rounds 0..2 may be filed */
        ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_GOSSIP_SNAPSHOT, c, 0, &purged), SL_OK);
        ck_assert_uint_eq(purged, 0);
    }
    for (int i = 0; i < N; i++) {
        sl_wire_key_t k = {(uint64_t)(i % 3), (uint32_t)(i % 2), (uint32_t)(i / 6),
                           (uint32_t)(i % 5), SL_WIRE_GOSSIP_SNAPSHOT};
        ck_assert_int_eq(sl_mailbox_file(mb, &k, 8, owner_of(i)), SL_MAILBOX_FILED);
        live[i] = 1;
    }
    /* take every third, in a scrambled order */
    for (int j = 0; j < N; j++) {
        int i = (int)(((uint64_t)j * 2654435761u) % N);
        if (i % 3 != 1)
            continue;
        sl_wire_key_t k = {(uint64_t)(i % 3), (uint32_t)(i % 2), (uint32_t)(i / 6),
                           (uint32_t)(i % 5), SL_WIRE_GOSSIP_SNAPSHOT};
        int *o = sl_mailbox_take(mb, &k);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(*o, i);
        free(o);
        live[i] = 0;
    }
    /* round 1 of component 0 is asked for: its round-0 frames go */
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_GOSSIP_SNAPSHOT, 0, 1, &purged), SL_OK);
    size_t want = 0;
    for (int i = 0; i < N; i++)
        if (live[i] && i % 3 == 0 && i % 2 == 0) {
            live[i] = 0;
            want++;
        }
    ck_assert_uint_eq(purged, want);
    size_t left = 0;
    for (int i = 0; i < N; i++) {
        sl_wire_key_t k = {(uint64_t)(i % 3), (uint32_t)(i % 2), (uint32_t)(i / 6),
                           (uint32_t)(i % 5), SL_WIRE_GOSSIP_SNAPSHOT};
        int *o = sl_mailbox_take(mb, &k);
        if (!live[i]) {
            ck_assert_ptr_null(o);
            continue;
        }
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(*o, i);
        free(o);
        left++;
    }
    ck_assert_uint_eq(sl_mailbox_frames(mb), 0);
    ck_assert_uint_eq(sl_mailbox_bytes(mb), 0);
    ck_assert_uint_eq(left + want + N / 3, N);
    sl_mailbox_destroy(&mb);
}
END_TEST

/* The window of rounds ahead: with round 10 current and a window of 3, rounds 10..13
 * are filed, 14 and beyond refused; a flood of 70,000 future-round frames (the attack:
 * one member filling the mailbox for good) is refused frame by frame and leaves the
 * mailbox empty, so the current round is still filed and handed out. Frames of a
 * (kind, component) nobody asked for yet take half of each cap at most, and the first
 * ask purges those outside its window. */
START_TEST(test_mailbox_window)
{
    enum { CAP = 64, FLOOD = 70000 };
    sl_mailbox_t *mb;
    size_t purged = 0;
    sl_wire_key_t k = {10, 3, 0, 2, SL_WIRE_GOSSIP_SNAPSHOT};
    uint64_t cur = 0;
    int *got;

    released = 0;
    ck_assert_int_eq(sl_mailbox_new(&mb, CAP, (uint64_t)CAP * 100, 3, count_release), SL_OK);
    ck_assert_int_eq(sl_mailbox_current(mb, SL_WIRE_GOSSIP_SNAPSHOT, 3, &cur), 0);
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_GOSSIP_SNAPSHOT, 3, 10, &purged), SL_OK);
    ck_assert_int_eq(sl_mailbox_current(mb, SL_WIRE_GOSSIP_SNAPSHOT, 3, &cur), 1);
    ck_assert_uint_eq(cur, 10);
    k.round = 13;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 1, owner_of(13)), SL_MAILBOX_FILED);
    k.round = 14;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 1, owner_of(14)), SL_MAILBOX_FUTURE_ROUND);
    ck_assert_int_eq(released, 1);
    /* the flood: every future round once, empty frames, from one peer */
    for (uint32_t i = 0; i < FLOOD; i++) {
        sl_wire_key_t f = {14 + (uint64_t)i, 3, i, 2, SL_WIRE_GOSSIP_SNAPSHOT};
        ck_assert_int_eq(sl_mailbox_file(mb, &f, 0, owner_of(0)), SL_MAILBOX_FUTURE_ROUND);
    }
    ck_assert_int_eq(released, 1 + FLOOD);
    ck_assert_uint_eq(sl_mailbox_frames(mb), 1);
    /* the current round from another peer is filed and handed out */
    k.round = 10;
    k.peer = 1;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 100, owner_of(10)), SL_MAILBOX_FILED);
    got = sl_mailbox_take(mb, &k);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(*got, 10);
    free(got);
    /* round 13 stays until it is asked for or passed */
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_GOSSIP_SNAPSHOT, 3, 14, &purged), SL_OK);
    ck_assert_uint_eq(purged, 1);
    ck_assert_uint_eq(sl_mailbox_frames(mb), 0);

    /* never asked for: half the frames, then refused as full */
    for (uint32_t i = 0; i < CAP / 2; i++) {
        sl_wire_key_t f = {1000 + (uint64_t)i, 9, 0, 2, SL_WIRE_DATA};
        ck_assert_int_eq(sl_mailbox_file(mb, &f, 1, owner_of(0)), SL_MAILBOX_FILED);
    }
    sl_wire_key_t f = {5, 9, 0, 1, SL_WIRE_DATA};
    ck_assert_int_eq(sl_mailbox_file(mb, &f, 1, owner_of(0)), SL_MAILBOX_FULL);
    /* ... while a (kind, component) with a current round still gets the other half */
    k.round = 14;
    ck_assert_int_eq(sl_mailbox_file(mb, &k, 1, owner_of(14)), SL_MAILBOX_FILED);
    /* the first ask for DATA 9 at round 1010 purges rounds 1000..1009 and 1014.. */
    purged = 0;
    ck_assert_int_eq(sl_mailbox_advance(mb, SL_WIRE_DATA, 9, 1010, &purged), SL_OK);
    ck_assert_uint_eq(purged, 10 + (CAP / 2 - 14));
    ck_assert_uint_eq(sl_mailbox_frames(mb), 1 + 4);
    /* half the bytes at most too */
    f.component = 8;
    ck_assert_int_eq(sl_mailbox_file(mb, &f, (uint64_t)CAP * 50 + 1, owner_of(0)), SL_MAILBOX_FULL);
    /* they now count against the whole caps: another unasked component gets its half */
    for (uint32_t i = 0; i < CAP / 2; i++) {
        sl_wire_key_t u = {i, 7, 0, 2, SL_WIRE_DATA};
        ck_assert_int_eq(sl_mailbox_file(mb, &u, 1, owner_of(0)), SL_MAILBOX_FILED);
    }
    sl_mailbox_destroy(&mb);
}
END_TEST

START_TEST(test_mailbox_bad_args)
{
    sl_mailbox_t *mb = (sl_mailbox_t *)1;
    ck_assert_int_eq(sl_mailbox_new(&mb, 0, 10, 1, count_release), SL_ERR_INVALID);
    ck_assert_ptr_null(mb);
    ck_assert_int_eq(sl_mailbox_new(&mb, 10, 0, 1, count_release), SL_ERR_INVALID);
    ck_assert_int_eq(sl_mailbox_new(&mb, 10, 10, 0, count_release), SL_ERR_INVALID);
    ck_assert_int_eq(sl_mailbox_new(&mb, 10, 10, 1, NULL), SL_ERR_INVALID);
}
END_TEST

static Suite *
wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_round_trip);
    tcase_add_test(core, test_mailbox_filing);
    tcase_add_test(core, test_mailbox_many_keys);
    tcase_add_test(core, test_mailbox_window);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_each_field_rejected);
    tcase_add_test(limits, test_truncated_and_oversized);
    tcase_add_test(limits, test_kind_limits);
    tcase_add_test(limits, test_mailbox_bad_args);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(wire_suite());
}
