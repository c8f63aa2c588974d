/* Tests of src/transport in one process: two transports (sends, lent payloads, the
 * mailbox at work, old rounds), bad arguments, and the one ZeroMQ error mapping. The
 * forked clusters (every collective, bad frames, a killed and an aborting peer) are in
 * check_transport_cluster.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "transport/sl_collective.h"
#include "transport/sl_gossip.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_mailbox.h"
#include "transport/sl_transport.h"
#include "transport/sl_zmq_status.h"

#include "test_tool.h"
#include "test_util.h"

#define RUN 0xfeed0000beefULL

/* ---------------------------------------------------------------- two in one process */

/* ZeroMQ I/O threads of the transports node_new makes (0: from the cores). */
static unsigned io_threads;
static int linger_ms; /* the DEALERs' ZMQ_LINGER: 0, or enough to flush a last frame */

/* Rank `rank` of 2 (bind NULL: the default), with CURVE under secret (NULL: none) or
 * frame MACs. */
static sl_transport_t *
node_new(uint32_t rank, const char *bind, const sl_secret_t *secret, int frame_mac)
{
    sl_transport_opts_t o;
    sl_transport_t *t;

    sl_transport_opts_default(&o);
    o.secret = secret;
    o.frame_mac = frame_mac;
    o.run_id = RUN;
    o.rank = rank;
    o.size = 2;
    if (bind)
        o.bind_endpoint = bind;
    o.timeout_ms = TEST_WAIT_MS;
    o.linger_ms = linger_ms;
    o.io_threads = io_threads;
    ck_assert_msg(sl_transport_new(&t, &o) == SL_OK, "%s", sl_err_msg());
    return t;
}

/* A connected pair: CURVE under secret (NULL: none), or frame MACs with the session
 * keys exchanged as the rendezvous would. */
static void
pair_open(sl_transport_t *t[2], const char *bind, const sl_secret_t *secret, int frame_mac)
{
    for (uint32_t r = 0; r < 2; r++)
        t[r] = node_new(r, bind, secret, frame_mac);
    test_pair_connect(t, frame_mac);
}

static void
pair_new(sl_transport_t *t[2], const char *bind)
{
    pair_open(t, bind, NULL, 0);
}

START_TEST(test_pair_send_recv)
{
    sl_transport_t *t[2];
    enum { BIG = 300001 };
    float *big = malloc(BIG * sizeof *big), *back = malloc(BIG * sizeof *back), small[5];
    size_t got;

    pair_new(t, NULL);
    ck_assert(strncmp(sl_transport_endpoint(t[0]), "tcp://127.0.0.1:", 16) == 0);
    ck_assert(strcmp(sl_transport_endpoint(t[0]) + 16, "*") != 0); /* real port read back */
    for (size_t i = 0; i < BIG; i++)
        big[i] = test_node_input(0, i);
    for (int i = 0; i < 5; i++)
        small[i] = (float)i;
    /* three frames sent in one order, asked for in another: the mailbox holds the rest */
    sl_wire_key_t kb = {3, 7, 0, 1, SL_WIRE_DATA}, ks = {3, 7, 1, 1, SL_WIRE_DATA},
                  kc = {3, 8, 0, 1, SL_WIRE_GOSSIP_SNAPSHOT};
    ck_assert_int_eq(sl_transport_send(t[0], &kb, big, BIG, SL_WIRE_FP32, 1.0f, SL_SEND_LEND, -1),
                     SL_OK);
    ck_assert_int_eq(sl_transport_send(t[0], &ks, small, 5, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_int_eq(sl_transport_send(t[0], &kc, small, 2, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_msg(sl_transport_wait_sent(t[0], TEST_WAIT_MS) == SL_OK, "%s", sl_err_msg());
    memset(big, 0, BIG * sizeof *big); /* given back: ours to change */

    sl_wire_key_t rc = kc, rs = ks, rb = kb;
    rc.peer = rs.peer = rb.peer = 0;
    ck_assert_msg(sl_transport_recv(t[1], &rc, back, 8, &got, TEST_WAIT_MS) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_uint_eq(got, 8);
    ck_assert(back[0] == 0.0f && back[1] == 1.0f);
    ck_assert_uint_eq(sl_transport_pending(t[1]), 2); /* the big and the small one */
    ck_assert_int_eq(sl_transport_recv(t[1], &rs, back, sizeof small, &got, 0), SL_OK);
    ck_assert_uint_eq(got, sizeof small);
    ck_assert(back[4] == 4.0f);
    /* too small a buffer is an error, the frame is gone */
    ck_assert_int_eq(sl_transport_recv(t[1], &rb, back, 100, &got, 0), SL_ERR_INVALID);
    ck_assert_int_eq(sl_transport_recv(t[1], &rb, back, 100, &got, 0), SL_ERR_TIMEOUT);

    /* again, this time the lent frame arrives whole */
    for (size_t i = 0; i < BIG; i++)
        big[i] = test_node_input(1, i);
    kb.round = 4;
    ck_assert_int_eq(sl_transport_send(t[0], &kb, big, BIG, SL_WIRE_FP32, 1.0f, SL_SEND_LEND, -1),
                     SL_OK);
    rb.round = 4;
    ck_assert_int_eq(sl_transport_recv(t[1], &rb, back, BIG * sizeof *back, &got, TEST_WAIT_MS),
                     SL_OK);
    ck_assert_uint_eq(got, BIG * sizeof *back);
    ck_assert_int_eq(memcmp(back, big, got), 0);
    ck_assert_int_eq(sl_transport_wait_sent(t[0], TEST_WAIT_MS), SL_OK);

    /* counters: payload bytes and messages per kind and component */
    sl_transport_stat_t st;
    sl_transport_stat(t[0], SL_WIRE_DATA, 7, &st);
    ck_assert_uint_eq(st.sent_msgs, 3);
    ck_assert_uint_eq(st.sent_bytes, 2 * BIG * 4 + 20);
    sl_transport_stat(t[1], SL_WIRE_DATA, 7, &st);
    ck_assert_uint_eq(st.recv_msgs, 3);
    ck_assert_uint_eq(st.recv_bytes, 2 * BIG * 4 + 20);
    sl_transport_stat(t[1], SL_WIRE_GOSSIP_SNAPSHOT, 8, &st);
    ck_assert_uint_eq(st.recv_msgs, 1);
    ck_assert_uint_eq(st.recv_bytes, 8);
    sl_transport_stat(t[1], SL_WIRE_BARRIER, 0, &st);
    ck_assert_uint_eq(st.recv_msgs, 0);
    const sl_transport_stat_t *rows;
    ck_assert_uint_eq(sl_transport_stats(t[1], &rows), 2);
    for (unsigned r = 1; r < SL_DROP_NREASONS; r++)
        ck_assert_uint_eq(sl_transport_dropped(t[1], r), 0);

    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
    ck_assert_ptr_null(t[0]);
    free(big);
    free(back);
}
END_TEST

/* The DEALER to a peer is watched: while the peer's process lives its connection is not
 * gone; once it closes (the process died) sl_transport_watch finds it gone, unless the
 * peer was heard from since; its last frame, sent before it died and filed after the
 * loss was seen, does not count as heard; a hello from its new process forgets it. */
START_TEST(test_pair_gone)
{
    sl_transport_t *t[2];
    sl_wire_key_t k = {1, 2, 0, 1, SL_WIRE_DATA}, back = k, last = k, last_in;
    float v = 1.0f, got_v;
    size_t got;
    char ep1[256];
    double deadline;

    linger_ms = 5000; /* rank 1's last frame leaves before its sockets close */
    pair_new(t, NULL);
    linger_ms = 0;
    snprintf(ep1, sizeof ep1, "%s", sl_transport_endpoint(t[1]));
    ck_assert_int_eq(sl_transport_send(t[0], &k, &v, 1, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    back.peer = 0;
    ck_assert_int_eq(sl_transport_recv(t[1], &back, &got_v, sizeof got_v, &got, TEST_WAIT_MS),
                     SL_OK);
    sl_transport_watch(t[0]);
    ck_assert(!sl_transport_gone(t[0], 1));
    ck_assert(!sl_transport_gone(t[0], 7)); /* out of range: never */
    last.round = 2;
    last.peer = 0;
    ck_assert_int_eq(sl_transport_send(t[1], &last, &v, 1, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_int_eq(sl_transport_wait_sent(t[1], TEST_WAIT_MS), SL_OK);
    sl_transport_destroy(&t[1]);
    deadline = sl_clock_now() + TEST_WAIT_MS / 1000.0;
    while (!sl_transport_gone(t[0], 1) && sl_clock_now() < deadline) {
        usleep(1000);
        sl_transport_watch(t[0]);
    }
    ck_assert_msg(sl_transport_gone(t[0], 1), "the closed connection was not seen");
    last_in = last;
    last_in.peer = 1;
    ck_assert_msg(sl_transport_recv(t[0], &last_in, &got_v, sizeof got_v, &got, TEST_WAIT_MS) ==
                      SL_OK,
                  "%s", sl_err_msg());
    ck_assert(sl_transport_gone(t[0], 1));  /* a dead process's last frame: still gone */
    ck_assert(!sl_transport_gone(t[0], 0)); /* itself: never */
    /* its new process said hello: not gone any more */
    sl_transport_learn_endpoint(t[0], 1, ep1);
    ck_assert(!sl_transport_gone(t[0], 1));
    sl_transport_destroy(&t[0]);
}
END_TEST

/* With the run's secret the pair talks as before, each frame's
 * sender the rank of the key that proved itself; a process with another secret that
 * claims rank 1 is refused at the handshake and gets no frame into rank 0's mailbox. */
START_TEST(test_pair_curve)
{
    sl_transport_t *t[2], *outsider;
    sl_secret_t secret, other;
    float v[3] = {1, 2, 3}, back[3];
    size_t got;
    sl_wire_key_t to1 = {5, 2, 0, 1, SL_WIRE_DATA}, from0 = {5, 2, 0, 0, SL_WIRE_DATA};
    sl_wire_key_t to0 = {6, 2, 0, 0, SL_WIRE_DATA}, from1 = {6, 2, 0, 1, SL_WIRE_DATA};
    sl_wire_key_t never = {99, 0, 0, 1, SL_WIRE_DATA};
    double deadline;

    ck_assert_int_eq(sl_secret_make(&secret), SL_OK);
    ck_assert_int_eq(sl_secret_make(&other), SL_OK);
    pair_open(t, NULL, &secret, 0);
    ck_assert_int_eq(sl_transport_send(t[0], &to1, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_msg(sl_transport_recv(t[1], &from0, back, sizeof back, &got, TEST_WAIT_MS) == SL_OK,
                  "%s", sl_err_msg());
    ck_assert(got == sizeof v && memcmp(back, v, got) == 0);
    ck_assert_int_eq(sl_transport_send(t[1], &to0, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_int_eq(sl_transport_recv(t[0], &from1, back, sizeof back, &got, TEST_WAIT_MS), SL_OK);

    outsider = node_new(1, NULL, &other, 0);
    test_pair_join(t[0], outsider, NULL);
    to0.round = 7;
    ck_assert_int_eq(sl_transport_send(outsider, &to0, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    deadline = sl_clock_now() + TEST_WAIT_MS / 1000.0;
    while (sl_transport_refused(t[0]) == 0 && sl_clock_now() < deadline)
        ck_assert_int_eq(sl_transport_recv(t[0], &never, back, sizeof back, &got, 20),
                         SL_ERR_TIMEOUT);
    ck_assert_uint_ge(sl_transport_refused(t[0]), 1);
    from1.round = 7;
    ck_assert_int_eq(sl_transport_recv(t[0], &from1, back, sizeof back, &got, 0), SL_ERR_TIMEOUT);
    ck_assert_uint_eq(sl_transport_pending(t[0]), 0);
    for (unsigned r = 1; r < SL_DROP_NREASONS; r++)
        ck_assert_uint_eq(sl_transport_dropped(t[0], r), 0); /* nothing even reached a check */
    ck_assert_uint_eq(sl_transport_refused(t[1]), 0);
    sl_transport_destroy(&outsider);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}
END_TEST

/* Frame MACs by hand: a sealed frame checks once, a replay and any changed byte of
 * header, payload or trailer are refused, and so is a sender other than the one whose
 * key sealed it. */
START_TEST(test_frame_mac)
{
    sl_frame_mac_t *m[3];
    unsigned char sessions[3 * SL_MAC_SESSION_BYTES], head[64], body[1000], trailer[24], t2[24];

    for (uint32_t r = 0; r < 3; r++) {
        ck_assert_int_eq(sl_frame_mac_new(&m[r], r, 3), SL_OK);
        memcpy(sessions + r * SL_MAC_SESSION_BYTES, sl_frame_mac_session(m[r]),
               SL_MAC_SESSION_BYTES);
    }
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, body, 0, trailer), SL_MAC_BAD);
    for (uint32_t r = 0; r < 3; r++)
        sl_frame_mac_learn(m[r], sessions);
    for (size_t i = 0; i < sizeof head; i++)
        head[i] = (unsigned char)(i * 7);
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (unsigned char)(i * 13);
    sl_frame_mac_seal(m[0], 1, 0, head, sizeof head, body, sizeof body, trailer);
    ck_assert_int_eq(sl_frame_mac_check(m[1], 2, head, 64, body, 1000, trailer), SL_MAC_BAD);
    ck_assert_int_eq(sl_frame_mac_check(m[2], 0, head, 64, body, 1000, trailer), SL_MAC_BAD);
    body[999] ^= 1;
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, body, 1000, trailer), SL_MAC_BAD);
    body[999] ^= 1;
    head[20] ^= 0x80;
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, body, 1000, trailer), SL_MAC_BAD);
    head[20] ^= 0x80;
    memcpy(t2, trailer, sizeof t2);
    t2[0] ^= 1; /* another sequence number: another one-time key */
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, body, 1000, t2), SL_MAC_BAD);
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, body, 1000, trailer), SL_MAC_OK);
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, body, 1000, trailer), SL_MAC_REPLAY);
    sl_frame_mac_seal(m[0], 1, 0, head, sizeof head, NULL, 0, t2); /* the next one */
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, NULL, 0, t2), SL_MAC_OK);
    for (int r = 0; r < 3; r++)
        sl_frame_mac_destroy(&m[r]);
    ck_assert_ptr_null(m[0]);
}
END_TEST

/* A pair with frame MACs (cluster.security: mac) moves copied and lent frames both
 * ways; a process that does not know the session keys gets no frame into the mailbox:
 * each of its frames is dropped as a bad MAC. */
START_TEST(test_pair_mac)
{
    sl_transport_t *t[2], *outsider;
    unsigned char sessions[2 * SL_MAC_SESSION_BYTES];
    enum { BIG = 200000 };
    float *big = malloc(BIG * sizeof *big), *back = malloc(BIG * sizeof *back);
    size_t got;
    sl_wire_key_t to1 = {5, 2, 0, 1, SL_WIRE_DATA}, from0 = {5, 2, 0, 0, SL_WIRE_DATA};
    sl_wire_key_t to0 = {6, 2, 0, 0, SL_WIRE_DATA}, from1 = {6, 2, 0, 1, SL_WIRE_DATA};
    sl_wire_key_t never = {99, 0, 0, 1, SL_WIRE_DATA};
    double deadline;

    pair_open(t, NULL, NULL, 1);
    for (size_t i = 0; i < BIG; i++)
        big[i] = test_node_input(0, i);
    ck_assert_int_eq(sl_transport_send(t[0], &to1, big, BIG, SL_WIRE_FP32, 1.0f, SL_SEND_LEND, -1),
                     SL_OK);
    ck_assert_msg(sl_transport_recv(t[1], &from0, back, BIG * sizeof *back, &got, TEST_WAIT_MS) ==
                      SL_OK,
                  "%s", sl_err_msg());
    ck_assert(got == BIG * sizeof *back && memcmp(back, big, got) == 0);
    ck_assert_int_eq(sl_transport_wait_sent(t[0], TEST_WAIT_MS), SL_OK);
    ck_assert_int_eq(sl_transport_send(t[1], &to0, big, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_int_eq(sl_transport_recv(t[0], &from1, back, 12, &got, TEST_WAIT_MS), SL_OK);
    ck_assert(got == 12 && memcmp(back, big, 12) == 0);

    /* an outsider with session keys of its own, speaking as rank 1 */
    outsider = node_new(1, NULL, NULL, 1);
    test_pair_join(t[0], outsider, sessions);
    to0.round = from1.round = 7;
    ck_assert_int_eq(sl_transport_send(outsider, &to0, big, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    deadline = sl_clock_now() + TEST_WAIT_MS / 1000.0;
    while (sl_transport_dropped(t[0], SL_DROP_MAC) == 0 && sl_clock_now() < deadline)
        ck_assert_int_eq(sl_transport_recv(t[0], &never, back, 12, &got, 20), SL_ERR_TIMEOUT);
    ck_assert_uint_eq(sl_transport_dropped(t[0], SL_DROP_MAC), 1);
    ck_assert_int_eq(sl_transport_recv(t[0], &from1, back, 12, &got, 0), SL_ERR_TIMEOUT);
    ck_assert_uint_eq(sl_transport_pending(t[0]), 0);
    sl_transport_destroy(&outsider);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
    free(big);
    free(back);
}
END_TEST

/* With three I/O threads (two receiving, one sending) under each security mode, a
 * pair moves lent and copied frames both ways at once, each whole and in its place,
 * whatever order they are asked for in. */
START_TEST(test_pair_io_threads)
{
    enum { BIG = 70001, FRAMES = 12 };
    float *big = malloc(2 * FRAMES * (size_t)BIG * sizeof *big), *back = malloc(BIG * sizeof *back);
    sl_secret_t secret;

    ck_assert_int_eq(sl_secret_make(&secret), SL_OK);
    io_threads = 3;
    for (int mode = 0; mode < 3; mode++) { /* none, curve, mac */
        sl_transport_t *t[2];
        size_t got;

        pair_open(t, NULL, mode == 1 ? &secret : NULL, mode == 2);
        for (uint32_t r = 0; r < 2; r++)
            ck_assert_uint_eq(sl_transport_io_threads(t[r]), 3);
        /* every frame in flight both ways before any is received: odd seqs lent */
        for (uint32_t r = 0; r < 2; r++)
            for (uint32_t j = 0; j < FRAMES; j++) {
                float *p = big + ((size_t)r * FRAMES + j) * BIG;
                sl_wire_key_t k = {1, 4, j, 1 - r, SL_WIRE_DATA};
                for (size_t i = 0; i < BIG; i++)
                    p[i] = test_node_input(r * FRAMES + j, i);
                ck_assert_msg(sl_transport_send(t[r], &k, p, BIG, SL_WIRE_FP32, 1.0f,
                                                j % 2 ? SL_SEND_LEND : 0, -1) == SL_OK,
                              "%s", sl_err_msg());
            }
        for (uint32_t r = 0; r < 2; r++)
            for (uint32_t j = FRAMES; j-- > 0;) { /* last first */
                sl_wire_key_t k = {1, 4, j, 1 - r, SL_WIRE_DATA};
                ck_assert_msg(sl_transport_recv(t[r], &k, back, BIG * sizeof *back, &got,
                                                TEST_WAIT_MS) == SL_OK,
                              "mode %d: %s", mode, sl_err_msg());
                ck_assert_uint_eq(got, BIG * sizeof *back);
                ck_assert_msg(memcmp(back, big + ((size_t)(1 - r) * FRAMES + j) * BIG, got) == 0,
                              "mode %d: frame %u to rank %u differs", mode, (unsigned)j,
                              (unsigned)r);
            }
        for (uint32_t r = 0; r < 2; r++) {
            ck_assert_int_eq(sl_transport_wait_sent(t[r], TEST_WAIT_MS), SL_OK);
            for (unsigned d = 1; d < SL_DROP_NREASONS; d++)
                ck_assert_uint_eq(sl_transport_dropped(t[r], d), 0);
        }
        sl_transport_destroy(&t[0]);
        sl_transport_destroy(&t[1]);
    }
    free(big);
    free(back);
}
END_TEST

/* A frame for an old round is dropped even when it arrives after the round moved on,
 * and a late gossip snapshot does not leak into the next round. */
START_TEST(test_pair_old_rounds)
{
    sl_transport_t *t[2];
    float v[3] = {1, 2, 3}, out[6];
    uint32_t from[1], one = 1, zero = 0;
    size_t got;

    pair_new(t, "ipc://*");
    ck_assert(strncmp(sl_transport_endpoint(t[0]), "ipc://", 6) == 0);
    sl_wire_key_t k = {10, 2, 0, 1, SL_WIRE_DATA};
    ck_assert_int_eq(sl_transport_send(t[0], &k, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    k.round = 11;
    ck_assert_int_eq(sl_transport_send(t[0], &k, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    /* rounds 10 and 11 (seq 0) are filed as they come; round 10 seq 5 never comes */
    double dl = test_deadline();
    while (sl_transport_pending(t[1]) < 2) {
        ck_assert_int_eq(sl_transport_poll(t[1]), SL_OK);
        ck_assert_msg(test_wait_more(dl), "the two frames never arrived");
    }
    k.peer = 0;
    k.round = 10;
    k.seq = 5;
    ck_assert_int_eq(sl_transport_recv(t[1], &k, out, sizeof out, &got, 0), SL_ERR_TIMEOUT);
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_OLD_ROUND), 0);
    ck_assert_uint_eq(sl_transport_pending(t[1]), 2);
    /* asking for round 12 purges both; round 9 sent now is refused on arrival (or,
     * arriving before, as older than round 10) */
    k.peer = 1;
    k.round = 9;
    k.seq = 0;
    ck_assert_int_eq(sl_transport_send(t[0], &k, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    k.peer = 0;
    k.round = 12;
    ck_assert_int_eq(sl_transport_recv(t[1], &k, out, sizeof out, &got, 0), SL_ERR_TIMEOUT);
    while (sl_transport_dropped(t[1], SL_DROP_OLD_ROUND) < 3) {
        ck_assert_int_eq(sl_transport_poll(t[1]), SL_OK);
        ck_assert_msg(test_wait_more(dl), "round 9 never arrived");
    }
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_OLD_ROUND), 3);
    ck_assert_uint_eq(sl_transport_pending(t[1]), 0);

    /* gossip: rank 1 is silent in round 0 and answers late; round 1 gets only round 1's */
    ck_assert_int_eq(sl_gossip_exchange(t[0], 5, 0, v, 3, &one, 1, &one, 1, out, from, &got, 200),
                     SL_ERR_TIMEOUT);
    ck_assert_uint_eq(got, 0);
    ck_assert_int_eq(
        sl_gossip_exchange(t[1], 5, 0, v, 3, &zero, 1, &zero, 1, out, from, &got, TEST_WAIT_MS),
        SL_OK); /* rank 0's push of round 0 was waiting for it */
    ck_assert_uint_eq(got, 1);
    ck_assert_uint_eq(from[0], 0);
    ck_assert(out[2] == 3.0f);
    v[0] = 42;
    ck_assert_int_eq(sl_gossip_exchange(t[1], 5, 1, v, 3, &zero, 1, &zero, 1, out, from, &got, 0),
                     SL_ERR_TIMEOUT);
    /* rank 0 has heard nothing from rank 1 yet (its round-0 frame came late, stale);
     * round 1's frame, of the current round, proves rank 1 alive */
    ck_assert(sl_transport_last_heard(t[0], 1) == 0.0);
    double before = sl_clock_now();
    ck_assert_int_eq(
        sl_gossip_exchange(t[0], 5, 1, v, 3, &one, 1, &one, 1, out, from, &got, TEST_WAIT_MS),
        SL_OK);
    ck_assert(out[0] == 42.0f);
    ck_assert_uint_eq(sl_transport_dropped(t[0], SL_DROP_OLD_ROUND), 1); /* the late round 0 */
    ck_assert(sl_transport_last_heard(t[0], 1) >= before);
    ck_assert(sl_transport_last_heard(t[0], 1) <= sl_clock_now());
    ck_assert(sl_transport_last_heard(t[0], 0) == 0.0); /* itself, and out of range: 0 */
    ck_assert(sl_transport_last_heard(t[0], 7) == 0.0);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}
END_TEST

/* Lines of the file at fd that contain what. */
static int
count_lines(int fd, const char *what)
{
    char line[512];
    int n = 0;
    FILE *f = fdopen(dup(fd), "r");

    ck_assert_ptr_nonnull(f);
    rewind(f);
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* Which frames prove a peer alive, and what a receiver refuses. Rank 1 asks for round 5
 * of a component: rank 0's frames of round 4 (stale), of a round beyond the window, and
 * of a component nobody asked for are dropped or filed but do not count as hearing from
 * rank 0; round 6 (the next) does. Then rank 0 pushes gossip snapshots rank 1 cannot
 * use, a NaN one, an infinite one, one of the wrong size: each is refused and counted,
 * rank 0 is left out of that round (got 0) and not heard by it, and each reason is
 * logged once; the good snapshot of the next round is taken. The newest round received
 * of each (kind, component) counts the refused frames too: how far the peers are. */
START_TEST(test_pair_heard_and_refused)
{
    sl_transport_t *t[2];
    float good[3] = {1, 2, 3}, snap[4][3] = {{1, NAN, 3}, {INFINITY, 2, 3}, {1, 2, 3}, {4, 5, 6}};
    float out[3];
    uint32_t from[1], zero = 0, one = 1;
    size_t got;
    sl_transport_stat_t st2, st3;
    double dl = test_deadline(), h;
    char name[] = "/tmp/shoal-refused-XXXXXX";
    int log = mkstemp(name), saved = dup(2);

    ck_assert_int_ge(log, 0);
    unlink(name);
    dup2(log, 2); /* the warnings, counted below */
    sl_log_set_level(SL_LOG_WARN);
    pair_new(t, "ipc://*");
    sl_wire_key_t k = {5, 2, 0, 0, SL_WIRE_DATA};
    ck_assert_int_eq(sl_transport_recv(t[1], &k, out, sizeof out, &got, 0), SL_ERR_TIMEOUT);
    k.peer = 1;
    k.round = 4;
    ck_assert_int_eq(sl_transport_send(t[0], &k, good, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    k.round = 5 + SL_MAILBOX_AHEAD_ROUNDS + 1;
    ck_assert_int_eq(sl_transport_send(t[0], &k, good, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    k.round = 5;
    k.component = 3;
    ck_assert_int_eq(sl_transport_send(t[0], &k, good, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    while (sl_transport_pending(t[1]) < 1 || sl_transport_dropped(t[1], SL_DROP_FUTURE_ROUND) +
                                                     sl_transport_dropped(t[1], SL_DROP_OLD_ROUND) <
                                                 2) {
        ck_assert_int_eq(sl_transport_poll(t[1]), SL_OK);
        ck_assert_msg(test_wait_more(dl), "the three frames never arrived");
    }
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_FUTURE_ROUND), 1);
    ck_assert(sl_transport_last_heard(t[1], 0) == 0.0);
    sl_transport_stat(t[1], SL_WIRE_DATA, 2, &st2);
    sl_transport_stat(t[1], SL_WIRE_DATA, 3, &st3);
    ck_assert_uint_eq(st2.recv_newest_round, 5 + SL_MAILBOX_AHEAD_ROUNDS + 1);
    ck_assert_uint_eq(st3.recv_newest_round, 5);
    k.component = 2;
    k.round = 6;
    ck_assert_int_eq(sl_transport_send(t[0], &k, good, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    while (sl_transport_pending(t[1]) < 2) {
        ck_assert_int_eq(sl_transport_poll(t[1]), SL_OK);
        ck_assert_msg(test_wait_more(dl), "round 6 never arrived");
    }
    h = sl_transport_last_heard(t[1], 0);
    ck_assert(h > 0.0);

    for (uint64_t r = 0; r < 4; r++) {
        /* round 2 goes as 2 floats where 3 are expected */
        ck_assert_int_eq(sl_gossip_exchange(t[0], 7, r, snap[r], r == 2 ? 2 : 3, &one, 1, NULL, 0,
                                            NULL, NULL, &got, 0),
                         SL_OK);
        sl_status_t st = sl_gossip_exchange(t[1], 7, r, good, 3, NULL, 0, &zero, 1, out, from, &got,
                                            TEST_WAIT_MS);
        if (r < 3) {
            ck_assert_int_eq(st, SL_ERR_TIMEOUT); /* at once: nothing more to wait for */
            ck_assert_uint_eq(got, 0);
            ck_assert_msg(sl_transport_last_heard(t[1], 0) == h,
                          "round %d: a refused frame "
                          "counts as hearing from its sender",
                          (int)r);
            continue;
        }
        ck_assert_int_eq(st, SL_OK);
        ck_assert_uint_eq(got, 1);
        ck_assert_uint_eq(from[0], 0);
        ck_assert(out[0] == 4.0f && out[2] == 6.0f);
        ck_assert(sl_transport_last_heard(t[1], 0) > h); /* round 3 came after round 2 */
    }
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_NONFINITE), 2);
    ck_assert_uint_eq(sl_transport_dropped(t[1], SL_DROP_BAD_SIZE), 1);
    fflush(stderr);
    ck_assert_int_eq(count_lines(log, "non-finite values"), 1);
    ck_assert_int_eq(count_lines(log, "wrong element count"), 1);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
    dup2(saved, 2);
    close(saved);
    close(log);
}
END_TEST

START_TEST(test_bad_arguments)
{
    sl_transport_t *t;
    sl_transport_opts_t o;
    float v[2] = {0};
    size_t got;
    uint32_t list[2] = {1, 1}, self = 0;

    sl_transport_opts_default(&o);
    o.size = 2;
    o.rank = 2;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_INVALID);
    ck_assert_ptr_null(t);
    o.rank = 0;
    o.timeout_ms = 0;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_INVALID);
    o.timeout_ms = 500;
    o.bind_endpoint = "tcp://256.1.1.1:1";
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_TRANSPORT);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "binding"));
    o.bind_endpoint = "bogus://x";
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_TRANSPORT);
    o.bind_endpoint = NULL;
    o.io_threads = SL_TRANSPORT_MAX_IO_THREADS + 1;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "cluster.io_threads 65"));
    /* 0: from the cores, one I/O thread below SL_TRANSPORT_IO_THREAD_CORES, two from it
     * on, and with snapshots four from SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS on */
    for (int snapshots = 0; snapshots <= 1; snapshots++) {
        ck_assert_uint_eq(sl_transport_io_threads_auto(1, snapshots), 1);
        ck_assert_uint_eq(sl_transport_io_threads_auto(SL_TRANSPORT_IO_THREAD_CORES - 1, snapshots),
                          1);
        ck_assert_uint_eq(sl_transport_io_threads_auto(SL_TRANSPORT_IO_THREAD_CORES, snapshots), 2);
        ck_assert_uint_eq(
            sl_transport_io_threads_auto(SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS - 1, snapshots), 2);
    }
    ck_assert_uint_eq(sl_transport_io_threads_auto(SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS, 0), 2);
    ck_assert_uint_eq(sl_transport_io_threads_auto(SL_TRANSPORT_IO_THREAD_CORES_SNAPSHOTS, 1), 4);
    ck_assert_uint_eq(sl_transport_io_threads_auto(256, 0), 2);
    ck_assert_uint_eq(sl_transport_io_threads_auto(256, 1), 4);
    ck_assert_uint_eq(sl_transport_stripes_auto(4), 2);
    o.io_threads = 0;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    ck_assert_uint_eq(sl_transport_io_threads(t),
                      sl_transport_io_threads_auto(sysconf(_SC_NPROCESSORS_ONLN), 0));

    sl_wire_key_t k = {0, 0, 0, 0, SL_WIRE_DATA};
    ck_assert_int_eq(sl_transport_send(t, &k, v, 2, SL_WIRE_FP32, 1.0f, 0, -1), SL_ERR_INVALID);
    k.peer = 1; /* no endpoint known yet */
    ck_assert_int_eq(sl_transport_send(t, &k, v, 2, SL_WIRE_FP32, 1.0f, 0, -1), SL_ERR_INVALID);
    const char *eps[2] = {NULL, "tcp://127.0.0.1:1"};
    ck_assert_int_eq(sl_transport_connect(t, eps), SL_OK);
    ck_assert_int_eq(sl_transport_connect(t, eps), SL_ERR_INVALID);
    ck_assert_int_eq(sl_transport_send(t, &k, v, 2, 77, 1.0f, 0, -1), SL_ERR_INVALID);
    ck_assert_int_eq(sl_transport_send(t, &k, v, 2, SL_WIRE_FP32, 3.0f, 0, -1), SL_ERR_INVALID);
    k.kind = SL_WIRE_BARRIER;
    ck_assert_int_eq(sl_transport_send(t, &k, v, 2, SL_WIRE_BYTES, 1.0f, 0, -1), SL_ERR_INVALID);
    /* over the frame cap: refused before anything is read or allocated */
    k.kind = SL_WIRE_DATA;
    ck_assert_int_eq(sl_transport_send(t, &k, v, (1u << 28) + 1, SL_WIRE_FP32, 1.0f, 0, -1),
                     SL_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "too large"));
    /* a peer that does not exist: the frame is queued, receiving times out on time */
    k.kind = SL_WIRE_DATA;
    ck_assert_int_eq(sl_transport_send(t, &k, v, 2, SL_WIRE_FP32, 1.0f, 0, 0), SL_OK);
    double t0 = sl_clock_now();
    ck_assert_int_eq(sl_transport_recv(t, &k, v, sizeof v, &got, 250), SL_ERR_TIMEOUT);
    double dt = sl_clock_now() - t0;
    ck_assert_msg(dt >= 0.249 && dt < 0.25 + TEST_LATE_S, "recv took %.3f s", dt);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "within 250 ms"));
    ck_assert_int_eq(sl_transport_recv(t, &k, v, sizeof v, &got, -1), SL_ERR_INVALID);
    k.peer = 0;
    ck_assert_int_eq(sl_transport_recv(t, &k, v, sizeof v, &got, 0), SL_ERR_INVALID);
    k.peer = 1;
    k.kind = 0;
    ck_assert_int_eq(sl_transport_recv(t, &k, v, sizeof v, &got, 0), SL_ERR_INVALID);
    /* gossip lists must be distinct other ranks */
    ck_assert_int_eq(sl_gossip_exchange(t, 0, 0, v, 2, list, 2, NULL, 0, v, NULL, &got, 10),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_gossip_exchange(t, 0, 0, v, 2, NULL, 0, &self, 1, v, NULL, &got, 10),
                     SL_ERR_INVALID);
    ck_assert_int_eq(sl_broadcast(t, 0, 0, 2, v, 2, NULL), SL_ERR_INVALID);
    sl_collective_opts_t co = {.window = 1000};
    ck_assert_int_eq(sl_allreduce_sum(t, 0, 0, v, 2, &co), SL_ERR_INVALID);
    co = (sl_collective_opts_t){.chunk_elems = 1};
    /* 2^32 chunks of one float cannot be numbered */
    ck_assert_int_eq(sl_broadcast(t, 0, 0, 0, v, (size_t)1 << 33, &co), SL_ERR_INVALID);
    sl_transport_destroy(&t);
    sl_transport_destroy(&t);

    /* one node alone: collectives are no-ops */
    sl_transport_opts_default(&o);
    o.size = 1;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    v[0] = 5;
    ck_assert_int_eq(sl_allreduce_sum(t, 0, 0, v, 2, NULL), SL_OK);
    ck_assert(v[0] == 5.0f);
    ck_assert_int_eq(sl_barrier(t, 0, 0), SL_OK);
    size_t one = 2;
    float out[2];
    ck_assert_int_eq(sl_allgather(t, 0, 0, v, out, &one, NULL), SL_OK);
    ck_assert(out[0] == 5.0f);
    ck_assert_int_eq(sl_broadcast(t, 0, 0, 0, v, 2, NULL), SL_OK);
    sl_transport_destroy(&t);
}
END_TEST

/* The finiteness checks, plain and fused with a copy: every length around the blocks
 * they work in, Inf, -Inf and NaN found wherever they are, the largest finite values,
 * subnormals and -0 taken, and the copy exact (from an unaligned source too). */
START_TEST(test_floats_finite)
{
    enum { MAX = 2100 };
    static const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu, 0x7f800001u};
    static const uint32_t good[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u};
    unsigned char *src = malloc(MAX * sizeof(float) + 1);
    float *x = malloc(MAX * sizeof *x), *dst = malloc(MAX * sizeof *dst);

    for (size_t n = 0; n <= MAX; n += n < 40 ? 1 : n < 1000 ? 97 : 1) {
        for (size_t i = 0; i < n; i++)
            x[i] = test_node_input(1, i);
        for (size_t g = 0; g < n && g < sizeof good / sizeof *good; g++)
            memcpy(&x[(g * 613) % n], &good[g], sizeof(float));
        memcpy(src + 1, x, n * sizeof *x);
        ck_assert(sl_floats_finite(x, n));
        ck_assert(sl_floats_copy_finite(dst, src + 1, n));
        ck_assert(n == 0 || memcmp(dst, x, n * sizeof *x) == 0);
        if (n == 0 || (n > 1100 && n != MAX && n % 2 == 1))
            continue; /* the long lengths once each, with a bad value everywhere below */
        for (size_t at = 0; at < n; at += at < 8 || at + 9 > n ? 1 : n / 7 + 1) {
            uint32_t b = bad[at % (sizeof bad / sizeof *bad)];
            float keep = x[at];
            memcpy(&x[at], &b, sizeof b);
            memcpy(src + 1, x, n * sizeof *x);
            ck_assert_msg(!sl_floats_finite(x, n), "n %zu: 0x%08x at %zu not found", n, (unsigned)b,
                          at);
            ck_assert_msg(!sl_floats_copy_finite(dst, src + 1, n), "n %zu: copied 0x%08x at %zu", n,
                          (unsigned)b, at);
            x[at] = keep;
        }
    }
    free(src);
    free(x);
    free(dst);
}
END_TEST

/* One ZeroMQ error mapping for the transport and the rendezvous (STYLE.md "Errors"). */
START_TEST(test_zmq_status)
{
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_PULL);
    char want[256];
    zmq_msg_t m;
    int linger = 0, e;

    ck_assert_int_eq(sl_zmq_status(EAGAIN), SL_ERR_TIMEOUT);
    ck_assert_int_eq(sl_zmq_status(ETERM), SL_ERR_SHUTDOWN);
    ck_assert_int_eq(sl_zmq_status(EINTR), SL_ERR_SHUTDOWN);
    ck_assert_int_eq(sl_zmq_status(EPROTONOSUPPORT), SL_ERR_TRANSPORT);
    /* the last error, what failed and zmq_strerror's words */
    ck_assert_int_ne(zmq_bind(s, "nope://x"), 0);
    e = zmq_errno();
    snprintf(want, sizeof want, "binding nope://x: %s", zmq_strerror(e));
    errno = e;
    ck_assert_int_eq(sl_zmq_fail("binding %s", "nope://x"), SL_ERR_TRANSPORT);
    ck_assert_str_eq(sl_err_msg(), want);
    zmq_msg_init(&m);
    ck_assert_int_lt(zmq_msg_recv(&m, s, ZMQ_DONTWAIT), 0); /* nothing there: EAGAIN */
    ck_assert_int_eq(sl_zmq_fail("receiving"), SL_ERR_TIMEOUT);
    zmq_msg_close(&m);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(s);
    zmq_ctx_term(ctx);
}
END_TEST

static Suite *
transport_suite(void)
{
    Suite *s = suite_create("transport");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 300); /* a hang guard: each cluster has its own */
    tcase_add_test(core, test_pair_send_recv);
    tcase_add_test(core, test_pair_old_rounds);
    tcase_add_test(core, test_pair_curve);
    tcase_add_test(core, test_frame_mac);
    tcase_add_test(core, test_pair_mac);
    tcase_add_test(core, test_pair_heard_and_refused);
    tcase_add_test(core, test_pair_gone);
    tcase_add_test(core, test_pair_io_threads);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 300);
    tcase_add_test(limits, test_bad_arguments);
    tcase_add_test(limits, test_zmq_status);
    tcase_add_test(limits, test_floats_finite);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(transport_suite());
}
