/* Frame MACs (cluster.security: mac) when a rank's process is new, come back to the
 * run: the session keys by hand (sl_frame_mac.h), then two transports and a third, the
 * new process for rank 1, whose key the rendezvous would hand over
 * (sl_transport_set_session_key); and sequence numbers counted per stripe. The rest of
 * frame MACs is in check_transport.c. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_clock.h"
#include "transport/sl_frame_mac.h"
#include "transport/sl_transport.h"

#include "test_tool.h"
#include "test_util.h"

#define RUN 0xfeed0000beefULL

/* Rank rank of 2 with frame MACs, on tcp://127.0.0.1:*. */
static sl_transport_t *
node_new(uint32_t rank)
{
    sl_transport_opts_t o;
    sl_transport_t *t;

    sl_transport_opts_default(&o);
    o.frame_mac = 1;
    o.run_id = RUN;
    o.rank = rank;
    o.size = 2;
    o.timeout_ms = TEST_WAIT_MS;
    o.linger_ms = 0;
    ck_assert_msg(sl_transport_new(&t, &o) == SL_OK, "%s", sl_err_msg());
    return t;
}

/* Frame MACs of ranks 0 and 1 of 2, each knowing both session keys (held in sessions,
 * 2 * SL_MAC_SESSION_BYTES). */
static void
macs_new(sl_frame_mac_t *m[2], unsigned char *sessions)
{
    for (uint32_t r = 0; r < 2; r++) {
        ck_assert_int_eq(sl_frame_mac_new(&m[r], r, 2), SL_OK);
        memcpy(sessions + r * SL_MAC_SESSION_BYTES, sl_frame_mac_session(m[r]),
               SL_MAC_SESSION_BYTES);
    }
    for (uint32_t r = 0; r < 2; r++)
        sl_frame_mac_learn(m[r], sessions);
}

/* A new process for rank 1: its frame MAC, which learns rank 0's key from sessions and
 * leaves its own there in rank 1's place. */
static sl_frame_mac_t *
mac_reborn(unsigned char *sessions)
{
    sl_frame_mac_t *reborn;

    ck_assert_int_eq(sl_frame_mac_new(&reborn, 1, 2), SL_OK);
    memcpy(sessions + SL_MAC_SESSION_BYTES, sl_frame_mac_session(reborn), SL_MAC_SESSION_BYTES);
    sl_frame_mac_learn(reborn, sessions);
    return reborn;
}

static void
macs_destroy(sl_frame_mac_t *m[2], sl_frame_mac_t **reborn)
{
    sl_frame_mac_destroy(reborn);
    for (int r = 0; r < 2; r++)
        sl_frame_mac_destroy(&m[r]);
}

/* Frame MACs when a rank's process is new: once rank 1's new session key is installed
 * its old process's frames are refused, the new one's are taken, and the peer's frames
 * to the new process prove nothing to the old one (the pair keys changed). The key held
 * already, installed again, changes nothing: a replay stays a replay. */
START_TEST(test_frame_mac_new_session)
{
    sl_frame_mac_t *m[3], *reborn;
    unsigned char sessions[2 * SL_MAC_SESSION_BYTES], head[64], old[24], fresh[24], to[24];

    macs_new(m, sessions);
    memset(head, 0x33, sizeof head);
    sl_frame_mac_seal(m[1], 0, 0, head, sizeof head, NULL, 0, old);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, NULL, 0, old), SL_MAC_OK);
    /* rank 1 again, a new process: it learns rank 0's key, rank 0 installs its new one */
    reborn = mac_reborn(sessions);
    sl_frame_mac_seal(m[1], 0, 0, head, sizeof head, NULL, 0, old); /* the dead one's next */
    sl_frame_mac_seal(reborn, 0, 0, head, sizeof head, NULL, 0, fresh);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, NULL, 0, fresh), SL_MAC_BAD);
    ck_assert_int_eq(sl_frame_mac_set_session(m[0], 1, sl_frame_mac_session(reborn)), 1);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, NULL, 0, old), SL_MAC_BAD);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, NULL, 0, fresh), SL_MAC_OK);
    ck_assert_int_eq(sl_frame_mac_set_session(m[0], 1, sl_frame_mac_session(reborn)), 0);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, NULL, 0, fresh), SL_MAC_REPLAY);
    /* rank 0 to the new process: the old one cannot check it, the new one can */
    sl_frame_mac_seal(m[0], 1, 0, head, sizeof head, NULL, 0, to);
    ck_assert_int_eq(sl_frame_mac_check(m[1], 0, head, 64, NULL, 0, to), SL_MAC_BAD);
    ck_assert_int_eq(sl_frame_mac_check(reborn, 0, head, 64, NULL, 0, to), SL_MAC_OK);
    macs_destroy(m, &reborn);
}
END_TEST

/* Sequence numbers per stripe (cluster.stripes): frames of different stripes are taken
 * in any order, but on one stripe a replay, or a frame older than one already taken, is
 * refused; a trailer moved to another stripe (its number's top byte changed) does not
 * check; a new process for the sender counts every stripe from 1 again. */
START_TEST(test_frame_mac_stripes)
{
    sl_frame_mac_t *m[2], *reborn;
    unsigned char sessions[2 * SL_MAC_SESSION_BYTES], head[64], body[300];
    unsigned char t[3][2][SL_MAC_TRAILER_BYTES], moved[SL_MAC_TRAILER_BYTES], fresh[24];

    macs_new(m, sessions);
    memset(head, 0x5a, sizeof head);
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (unsigned char)(i * 11);
    /* two frames on each of stripes 0, 1 and SL_MAC_MAX_STRIPES - 1 */
    for (int k = 0; k < 2; k++)
        for (unsigned j = 0; j < 3; j++)
            sl_frame_mac_seal(m[1], 0, j == 2 ? SL_MAC_MAX_STRIPES - 1 : j, head, sizeof head, body,
                              sizeof body, t[j][k]);
    ck_assert_uint_eq(t[1][0][7], 1); /* the stripe in the top byte */
    ck_assert_uint_eq(t[1][0][0], 1); /* its own count from 1 */
    /* the stripes' second frames first, then stripe 0's first: each taken */
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[2][1]), SL_MAC_OK);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[1][1]), SL_MAC_OK);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[0][0]), SL_MAC_OK);
    /* older than what its stripe took, or a replay: refused */
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[1][0]), SL_MAC_REPLAY);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[2][0]), SL_MAC_REPLAY);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[1][1]), SL_MAC_REPLAY);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[0][0]), SL_MAC_REPLAY);
    /* stripe 1's first frame claimed for stripe 3, whose count is still 0: the tag says no */
    memcpy(moved, t[1][0], sizeof moved);
    moved[7] = 3;
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, moved), SL_MAC_BAD);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, t[0][1]), SL_MAC_OK);
    /* a new process for rank 1: stripe 1 counts from 1 again */
    reborn = mac_reborn(sessions);
    ck_assert_int_eq(sl_frame_mac_set_session(m[0], 1, sl_frame_mac_session(reborn)), 1);
    sl_frame_mac_seal(reborn, 0, 1, head, sizeof head, body, sizeof body, fresh);
    ck_assert_int_eq(sl_frame_mac_check(m[0], 1, head, 64, body, 300, fresh), SL_MAC_OK);
    macs_destroy(m, &reborn);
}
END_TEST

/* A transport with frame MACs takes a new process for rank 1 (sl_transport_set_session_key,
 * as the rendezvous hands it over): a frame from the new process before the key is
 * dropped, after it taken; a frame under the dead process's key is dropped from then
 * on, and counted. */
START_TEST(test_pair_mac_new_key)
{
    sl_transport_t *t[2], *reborn;
    unsigned char sessions[2 * SL_MAC_SESSION_BYTES];
    float v[3] = {1, 2, 3}, back[3];
    size_t got;
    sl_wire_key_t to0 = {1, 2, 0, 0, SL_WIRE_DATA}, from1 = {1, 2, 0, 1, SL_WIRE_DATA};
    sl_wire_key_t never = {99, 0, 0, 1, SL_WIRE_DATA};
    double deadline;

    for (uint32_t r = 0; r < 2; r++)
        t[r] = node_new(r);
    test_pair_connect(t, 1);
    ck_assert_int_eq(sl_transport_send(t[1], &to0, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_int_eq(sl_transport_recv(t[0], &from1, back, sizeof back, &got, TEST_WAIT_MS), SL_OK);
    reborn = node_new(1);
    test_pair_join(t[0], reborn, sessions);
    /* before the key: dropped */
    to0.round = from1.round = 2;
    ck_assert_int_eq(sl_transport_send(reborn, &to0, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    deadline = sl_clock_now() + TEST_WAIT_MS / 1000.0;
    while (sl_transport_dropped(t[0], SL_DROP_MAC) == 0 && sl_clock_now() < deadline)
        ck_assert_int_eq(sl_transport_recv(t[0], &never, back, sizeof back, &got, 20),
                         SL_ERR_TIMEOUT);
    ck_assert_uint_eq(sl_transport_dropped(t[0], SL_DROP_MAC), 1);
    ck_assert_int_eq(sl_transport_set_session_key(t[0], 0, sessions), SL_ERR_INVALID);
    ck_assert_int_eq(sl_transport_set_session_key(t[0], 1, sl_transport_session(reborn)), SL_OK);
    /* the dead process's frame, under its old key: dropped */
    to0.round = from1.round = 3;
    ck_assert_int_eq(sl_transport_send(t[1], &to0, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    deadline = sl_clock_now() + TEST_WAIT_MS / 1000.0;
    while (sl_transport_dropped(t[0], SL_DROP_MAC) == 1 && sl_clock_now() < deadline)
        ck_assert_int_eq(sl_transport_recv(t[0], &never, back, sizeof back, &got, 20),
                         SL_ERR_TIMEOUT);
    ck_assert_uint_eq(sl_transport_dropped(t[0], SL_DROP_MAC), 2);
    ck_assert_int_eq(sl_transport_recv(t[0], &from1, back, sizeof back, &got, 0), SL_ERR_TIMEOUT);
    /* the new process's: taken */
    to0.round = from1.round = 4;
    ck_assert_int_eq(sl_transport_send(reborn, &to0, v, 3, SL_WIRE_FP32, 1.0f, 0, -1), SL_OK);
    ck_assert_msg(sl_transport_recv(t[0], &from1, back, sizeof back, &got, TEST_WAIT_MS) == SL_OK,
                  "%s", sl_err_msg());
    ck_assert(got == sizeof v && memcmp(back, v, got) == 0);
    ck_assert_uint_eq(sl_transport_dropped(t[0], SL_DROP_MAC), 2);
    sl_transport_destroy(&reborn);
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}
END_TEST

static Suite *
frame_mac_suite(void)
{
    Suite *s = suite_create("frame_mac");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 120); /* a hang guard */
    tcase_add_test(core, test_frame_mac_new_session);
    tcase_add_test(core, test_frame_mac_stripes);
    tcase_add_test(core, test_pair_mac_new_key);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_main(frame_mac_suite());
}
