/* Frames in pieces (sl_zmq_pieces.h): the split rule, a receiver putting frames
 * together from pieces in any order, and everything it refuses (a piece the rule does
 * not give, a header unlike the frame's other pieces', a piece twice, more than the
 * caps); then a transport fed pieces by hand over a plain DEALER, as a peer would send
 * them: a good frame comes out whole, bad pieces and a frame whose checksum fails once
 * put together are dropped and counted, and nothing of them reaches the mailbox. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_hash.h"
#include "transport/sl_transport.h"
#include "transport/sl_wire.h"
#include "transport/sl_zmq_pieces.h"

#include "test_tool.h"
#include "test_util.h"

#define RUN 0xfeed0000beefULL

/* The rule: whole below two minimal pieces, then as many pieces as stripes allow, each of
 * at least the minimum; the pieces tile the payload exactly. */
START_TEST(test_pieces_rule)
{
    const uint64_t sizes[] = {2 * SL_PIECE_MIN_BYTES - 4, 2 * SL_PIECE_MIN_BYTES, 280004,
                              (uint64_t)1 << 30, 1000004};

    ck_assert_uint_eq(sl_pieces_count(2 * SL_PIECE_MIN_BYTES - 4, 4), 1);
    ck_assert_uint_eq(sl_pieces_count(2 * SL_PIECE_MIN_BYTES, 4), 2);
    ck_assert_uint_eq(sl_pieces_count(2 * SL_PIECE_MIN_BYTES, 1), 1);
    ck_assert_uint_eq(sl_pieces_count(280004, 3), 3);
    ck_assert_uint_eq(sl_pieces_count(280004, 16), 4);
    ck_assert_uint_eq(sl_pieces_count((uint64_t)1 << 30, 64), SL_PIECE_MAX);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (unsigned stripes = 1; stripes <= SL_PIECE_MAX; stripes++) {
            unsigned n = sl_pieces_count(sizes[i], stripes);
            uint64_t next = 0, off, len;
            for (unsigned j = 0; j < n && n > 1; j++) {
                sl_pieces_span(sizes[i], n, j, &off, &len);
                ck_assert_uint_eq(off, next);
                ck_assert_uint_eq(off % 64, 0);
                ck_assert_uint_ge(len, SL_PIECE_MIN_BYTES - 64);
                next = off + len;
            }
            if (n > 1)
                ck_assert_uint_eq(next, sizes[i]);
        }
}
END_TEST

/* A header (validated as a receiver would) of a frame of count floats from rank 1. */
static sl_wire_header_t
header_of(uint32_t count, uint64_t round, const void *payload, unsigned char hb[64])
{
    sl_wire_key_t key = {round, 3, 0, 0, SL_WIRE_DATA};
    sl_wire_header_t h = sl_wire_header_for(RUN, 1, &key, count, SL_WIRE_FP32, 1.0f), back;

    ck_assert_int_eq(sl_wire_encode(&h, payload, hb), SL_OK);
    ck_assert_int_eq(sl_wire_decode_head(hb, RUN, 0, 2, &back), SL_WIRE_OK);
    return back;
}

enum { COUNT = 100001 }; /* 400,004 bytes: 3 pieces with 3 stripes */

/* Pieces put together in any order give the payload; what the rule does not give, a
 * mismatched header, a piece twice and frames over the caps are refused; forgetting a
 * sender drops its frames. */
START_TEST(test_pieces_take)
{
    float *v = malloc(COUNT * sizeof *v);
    unsigned char hb[64], other[64], desc[SL_PIECE_DESC_BYTES];
    sl_wire_header_t h, h2;
    sl_pieces_t *p;
    uint64_t off[3], len[3], bytes = COUNT * sizeof *v, sum;
    void *whole;

    for (size_t i = 0; i < COUNT; i++)
        v[i] = test_node_input(3, i);
    h = header_of(COUNT, 1, v, hb);
    h2 = header_of(COUNT, 2, v, other);
    ck_assert_int_eq(sl_pieces_new(&p, 2, 2, 3 * bytes, 1), SL_OK);
    for (unsigned j = 0; j < 3; j++)
        sl_pieces_span(bytes, 3, j, &off[j], &len[j]);
    /* pieces 2, 0, 1 of frame 7 */
    sl_pieces_desc(desc, 7, 2, 3);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v + off[2], len[2], &whole, &sum),
                     SL_PIECES_HELD);
    ck_assert_ptr_null(whole);
    /* the same piece again, a header of another frame, a length the rule does not give,
     * a count of pieces it does not give (5 of at least 64 KiB do not fit), a piece out
     * of range, a bad magic: refused, and the frame held stays as it was */
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v + off[2], len[2], &whole, &sum),
                     SL_PIECES_BAD);
    sl_pieces_desc(desc, 7, 0, 3);
    ck_assert_int_eq(sl_pieces_take(p, 1, other, &h2, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_BAD);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0] - 4, &whole, &sum),
                     SL_PIECES_BAD);
    sl_pieces_desc(desc, 7, 0, 7);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_BAD);
    sl_pieces_desc(desc, 7, 3, 3);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_BAD);
    sl_pieces_desc(desc, 7, 0, 3);
    desc[0] ^= 1;
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_BAD);
    ck_assert_uint_eq(sl_pieces_held(p), 1);
    sl_pieces_desc(desc, 7, 0, 3);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v + off[0], len[0], &whole, &sum),
                     SL_PIECES_HELD);
    sl_pieces_desc(desc, 7, 1, 3);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v + off[1], len[1], &whole, &sum),
                     SL_PIECES_WHOLE);
    ck_assert_ptr_nonnull(whole);
    ck_assert(memcmp(whole, v, bytes) == 0);
    ck_assert_uint_eq(sum, sl_hash_bulk(v, bytes, sl_wire_checksum_seed(hb))); /* as copied */
    ck_assert_uint_eq(sl_wire_decode_hashed(hb, bytes, sum, RUN, 0, 2, &h2), SL_WIRE_OK);
    ck_assert_uint_eq(sl_wire_decode_hashed(hb, bytes, sum + 1, RUN, 0, 2, &h2),
                      SL_WIRE_BAD_CHECKSUM);
    free(whole);
    ck_assert_uint_eq(sl_pieces_held(p), 0);
    /* caps: two frames held at most */
    for (uint64_t id = 10; id < 12; id++) {
        sl_pieces_desc(desc, id, 0, 3);
        ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                         SL_PIECES_HELD);
    }
    sl_pieces_desc(desc, 12, 0, 3);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_FULL);
    /* a sender out of range */
    ck_assert_int_eq(sl_pieces_take(p, 2, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_BAD);
    sl_pieces_forget(p, 1);
    ck_assert_uint_eq(sl_pieces_held(p), 0);
    ck_assert_int_eq(sl_pieces_take(p, 1, hb, &h, desc, (char *)v, len[0], &whole, &sum),
                     SL_PIECES_HELD);
    sl_pieces_destroy(&p);
    ck_assert_ptr_null(p);
    sl_pieces_destroy(&p);
    free(v);
}
END_TEST

/* Sends one piece (header hb, piece j of n of frame id of payload) on dealer. */
static void
send_piece(void *dealer, const unsigned char *hb, uint64_t id, unsigned j, unsigned n,
           const void *payload, uint64_t bytes, int len_delta)
{
    unsigned char first[SL_WIRE_HEADER_BYTES + SL_PIECE_DESC_BYTES];
    uint64_t off, len;

    memcpy(first, hb, SL_WIRE_HEADER_BYTES);
    sl_pieces_desc(first + SL_WIRE_HEADER_BYTES, id, j, n);
    sl_pieces_span(bytes, n, j, &off, &len);
    ck_assert_int_eq(zmq_send(dealer, first, sizeof first, ZMQ_SNDMORE), (int)sizeof first);
    ck_assert_int_eq(zmq_send(dealer, (const char *)payload + off, len + len_delta, 0),
                     (int)(len + len_delta));
}

/* Polls t until dropped(reason) reaches want or the wait runs out. */
static void
wait_drops(sl_transport_t *t, unsigned reason, uint64_t want)
{
    double dl = test_deadline();

    while (sl_transport_dropped(t, reason) < want) {
        ck_assert_int_eq(sl_transport_poll(t), SL_OK);
        ck_assert_msg(test_wait_more(dl), "%s drops: %llu, not %llu",
                      sl_transport_drop_name(reason),
                      (unsigned long long)sl_transport_dropped(t, reason),
                      (unsigned long long)want);
    }
}

/* A transport (rank 0 of 2, no security) fed by hand, over a DEALER with rank 1's
 * routing id: a frame in three pieces, sent out of order, comes out whole; a piece of
 * the wrong length and a piece whose header names the receiver as its sender are
 * dropped; a frame whose bytes changed on the way fails its checksum once whole. */
START_TEST(test_transport_takes_pieces)
{
    sl_transport_opts_t o;
    sl_transport_t *t;
    float *v = malloc(COUNT * sizeof *v), *back = malloc(COUNT * sizeof *back);
    unsigned char hb[64], id[9] = {'S', 1, 0, 0, 0, 7, 7, 7, 7};
    uint64_t bytes = COUNT * sizeof *v;
    void *ctx = zmq_ctx_new(), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    size_t got;
    sl_wire_key_t want = {1, 3, 0, 1, SL_WIRE_DATA};

    sl_transport_opts_default(&o);
    o.run_id = RUN;
    o.size = 2;
    o.shm = 0;
    o.linger_ms = 0;
    o.timeout_ms = TEST_WAIT_MS;
    ck_assert_msg(sl_transport_new(&t, &o) == SL_OK, "%s", sl_err_msg());
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, id, sizeof id);
    ck_assert_int_eq(zmq_connect(dealer, sl_transport_endpoint(t)), 0);
    for (size_t i = 0; i < COUNT; i++)
        v[i] = test_node_input(5, i);
    header_of(COUNT, 1, v, hb);
    send_piece(dealer, hb, 0, 1, 3, v, bytes, 0);
    send_piece(dealer, hb, 0, 2, 3, v, bytes, 0);
    send_piece(dealer, hb, 0, 0, 3, v, bytes, 0);
    ck_assert_msg(sl_transport_recv(t, &want, back, bytes, &got, TEST_WAIT_MS) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_uint_eq(got, bytes);
    ck_assert(memcmp(back, v, bytes) == 0);
    /* a piece 4 bytes short: the rule gives another length */
    header_of(COUNT, 2, v, hb);
    send_piece(dealer, hb, 1, 0, 3, v, bytes, -4);
    wait_drops(t, SL_DROP_FRAMING, 1);
    /* every piece of frame 2, one byte changed on the way: whole, then refused */
    header_of(COUNT, 3, v, hb);
    send_piece(dealer, hb, 2, 0, 3, v, bytes, 0);
    send_piece(dealer, hb, 2, 1, 3, v, bytes, 0);
    ((unsigned char *)v)[bytes - 1] ^= 0x40;
    send_piece(dealer, hb, 2, 2, 3, v, bytes, 0);
    wait_drops(t, SL_WIRE_BAD_CHECKSUM, 1);
    /* the routing id of rank 1, a header of rank 0 (itself): a bad sender */
    hb[16] = 0;
    send_piece(dealer, hb, 3, 0, 3, v, bytes, 0);
    wait_drops(t, SL_WIRE_BAD_SENDER, 1);
    ck_assert_uint_eq(sl_transport_pending(t), 0);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    sl_transport_destroy(&t);
    free(v);
    free(back);
}
END_TEST

static Suite *
pieces_suite(void)
{
    Suite *s = suite_create("pieces");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_set_timeout(core, 120); /* a hang guard */
    tcase_add_test(core, test_pieces_rule);
    tcase_add_test(core, test_transport_takes_pieces);
    suite_add_tcase(s, core);
    tcase_add_test(limits, test_pieces_take);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(pieces_suite());
}
