/* Stripes (cluster.stripes: several ZeroMQ connections per peer, sl_link_zmq.c) in one
 * process: a pair under each security mode moves the same bits with one stripe and with
 * three, its large frames in pieces over every stripe (sl_zmq_pieces.h), its mid-sized
 * ones over the stripes in turn and its small ones on the first; the kinds that take
 * the stripes (sl_transport_striped_kind): a ring allreduce's chunks all on the first,
 * whole, gossip snapshots over every stripe, the same bits either way; the automatic
 * count and the bound. The pieces' rule and a receiver's checks of them are in
 * check_pieces.c. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "transport/sl_collective.h"
#include "transport/sl_gossip.h"
#include "transport/sl_transport.h"
#include "transport/sl_zmq_pieces.h"

#include "test_tool.h"
#include "test_util.h"

#define RUN 0xfeed0000beefULL

/* A connected pair with io_threads I/O threads and stripes stripes: CURVE under secret
 * (NULL: none), or frame MACs with the session keys exchanged as the rendezvous would. */
static void
pair_open(sl_transport_t *t[2], unsigned io_threads, unsigned stripes, int whole_frames,
          const sl_secret_t *secret, int frame_mac)
{
    for (uint32_t r = 0; r < 2; r++) {
        sl_transport_opts_t o;
        sl_transport_opts_default(&o);
        o.secret = secret;
        o.frame_mac = frame_mac;
        o.run_id = RUN;
        o.rank = r;
        o.size = 2;
        o.timeout_ms = TEST_WAIT_MS;
        o.linger_ms = 0;
        o.io_threads = io_threads;
        o.stripes = stripes;
        o.whole_frames = whole_frames;
        o.shm = 0; /* everything over ZeroMQ, as between hosts */
        ck_assert_msg(sl_transport_new(&t[r], &o) == SL_OK, "%s", sl_err_msg());
    }
    test_pair_connect(t, frame_mac);
}

/* floats of a frame in pieces (3 with 3 stripes), of one that takes a stripe whole (64
 * to 128 KiB), of a small one */
enum { BIG = 70001, MID = 20000, SMALL = 100, FRAMES = 12, EACH = BIG + MID + SMALL };

/* Every frame in flight both ways before any is received (a large, a mid-sized and a
 * small one at a time, odd ones lent), then all received last first into got (laid out
 * as src: per sender and round, the large, mid-sized and small payloads); whole_frames:
 * large frames whole too, in turn. Checks that nothing was dropped and how many messages
 * each stripe carried. */
static void
exchange(unsigned stripes, int whole_frames, int mode, const sl_secret_t *secret, const float *src,
         float *got)
{
    sl_transport_t *t[2];
    size_t n;

    pair_open(t, 4, stripes, whole_frames, mode == 1 ? secret : NULL, mode == 2);
    for (uint32_t r = 0; r < 2; r++) {
        ck_assert_uint_eq(sl_transport_stripes(t[r]), stripes);
        for (uint32_t j = 0; j < FRAMES; j++) {
            const float *p = src + ((size_t)r * FRAMES + j) * EACH;
            sl_wire_key_t big = {1, 4, j, 1 - r, SL_WIRE_DATA};
            sl_wire_key_t mid = {1, 5, j, 1 - r, SL_WIRE_DATA};
            sl_wire_key_t small = {1, 6, j, 1 - r, SL_WIRE_DATA};
            int lend = j % 2 ? SL_SEND_LEND : 0;
            ck_assert_msg(sl_transport_send(t[r], &big, p, BIG, SL_WIRE_FP32, 1.0f, lend, -1) ==
                              SL_OK,
                          "%s", sl_err_msg());
            ck_assert_msg(
                sl_transport_send(t[r], &mid, p + BIG, MID, SL_WIRE_FP32, 1.0f, lend, -1) == SL_OK,
                "%s", sl_err_msg());
            ck_assert_msg(sl_transport_send(t[r], &small, p + BIG + MID, SMALL, SL_WIRE_FP32, 1.0f,
                                            0, -1) == SL_OK,
                          "%s", sl_err_msg());
        }
    }
    for (uint32_t r = 0; r < 2; r++)
        for (uint32_t j = FRAMES; j-- > 0;) {
            float *q = got + ((size_t)(1 - r) * FRAMES + j) * EACH; /* as src */
            const uint32_t floats[3] = {SMALL, MID, BIG}, at[3] = {BIG + MID, BIG, 0};
            for (int k = 0; k < 3; k++) { /* small, mid-sized, large */
                sl_wire_key_t key = {1, 6 - (uint32_t)k, j, 1 - r, SL_WIRE_DATA};
                ck_assert_msg(sl_transport_recv(t[r], &key, q + at[k], floats[k] * sizeof *q, &n,
                                                TEST_WAIT_MS) == SL_OK,
                              "%u stripes, mode %d: %s", stripes, mode, sl_err_msg());
                ck_assert_uint_eq(n, floats[k] * sizeof *q);
            }
        }
    for (uint32_t r = 0; r < 2; r++) {
        ck_assert_int_eq(sl_transport_wait_sent(t[r], TEST_WAIT_MS), SL_OK);
        for (unsigned d = 1; d < SL_DROP_NREASONS; d++)
            ck_assert_uint_eq(sl_transport_dropped(t[r], d), 0);
        /* a piece of each large frame on every stripe (or those whole in turn too),
         * mid-sized frames in turn, small ones on stripe 0 */
        for (unsigned s = 0; s < stripes; s++)
            ck_assert_uint_eq(sl_transport_stripe_frames(t[r], s),
                              stripes == 1   ? 3 * FRAMES
                              : whole_frames ? 2 * FRAMES / stripes + (s == 0 ? FRAMES : 0)
                                             : FRAMES + FRAMES / stripes + (s == 0 ? FRAMES : 0));
        ck_assert_uint_eq(sl_transport_stripe_frames(t[r], stripes), 0);
    }
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}

/* Under each security mode (none, CURVE, frame MACs), with four I/O threads (two of
 * them sending): the exchange over three stripes, large frames in pieces or whole,
 * gives the same bits as over one, and each gives what was sent. */
START_TEST(test_pair_stripes)
{
    size_t total = 2 * FRAMES * (size_t)EACH;
    float *src = malloc(total * sizeof *src), *one = malloc(total * sizeof *one),
          *three = malloc(total * sizeof *three), *whole = malloc(total * sizeof *whole);
    sl_secret_t secret;

    ck_assert_int_eq(sl_secret_make(&secret), SL_OK);
    for (size_t i = 0; i < total; i++)
        src[i] = test_node_input(7, i);
    for (int mode = 0; mode < 3; mode++) {
        memset(one, 0, total * sizeof *one);
        memset(three, 0xff, total * sizeof *three);
        memset(whole, 0xfe, total * sizeof *whole);
        exchange(1, 0, mode, &secret, src, one);
        exchange(3, 0, mode, &secret, src, three);
        exchange(3, 1, mode, &secret, src, whole);
        ck_assert_msg(memcmp(one, three, total * sizeof *one) == 0,
                      "mode %d: three stripes moved other bits than one", mode);
        ck_assert_msg(memcmp(one, whole, total * sizeof *one) == 0,
                      "mode %d: three stripes of whole frames moved other bits than one", mode);
        ck_assert_msg(memcmp(one, src, total * sizeof *one) == 0, "mode %d: not what was sent",
                      mode);
    }
    free(src);
    free(one);
    free(three);
    free(whole);
}
END_TEST

/* What kinds_exchange runs: a ring allreduce of RING floats (chunks of 256 KiB, which
 * would go in pieces if ring segments took the stripes) and one of RING_MID (one frame a
 * segment, 64 to 128 KiB, which would take the stripes in turn), then a gossip exchange
 * of a SNAP-float snapshot (in pieces over every stripe) and two of SNAP_MID floats (in
 * turn: stripes 0 then 1, the ring's frames having moved no turn). */
enum { RING = 1 << 20, RING_MID = 40000, SNAP = 100000, SNAP_MID = 20000 };
/* each rank's floats: both allreduces, then its snapshots as sent and as received */
enum { KIND_EACH = RING + RING_MID + 2 * (SNAP + 2 * SNAP_MID) };

/* One rank's part of kinds_exchange, on its own transport in its own thread; counts: the
 * messages on each stripe after the allreduces and at the end. */
typedef struct {
    sl_transport_t *t;
    float *buf; /* (KIND_EACH) */
    sl_status_t st;
    uint64_t ring_counts[3], counts[3];
} side_t;

static void *
side_run(void *arg)
{
    side_t *d = arg;
    uint32_t peer = 1 - sl_transport_rank(d->t);
    float *ring = d->buf, *mid = ring + RING, *snap = mid + RING_MID, *got = snap + SNAP;
    size_t n;
    sl_status_t st;

    st = sl_allreduce_sum(d->t, 1, 1, ring, RING, NULL);
    if (st == SL_OK)
        st = sl_allreduce_sum(d->t, 2, 1, mid, RING_MID, NULL);
    for (unsigned j = 0; j < 3 && st == SL_OK; j++)
        d->ring_counts[j] = sl_transport_stripe_frames(d->t, j);
    if (st == SL_OK)
        st = sl_gossip_exchange(d->t, 3, 1, snap, SNAP, &peer, 1, &peer, 1, got, NULL, &n,
                                TEST_WAIT_MS);
    snap = got + SNAP; /* the mid-sized ones as sent, then as received */
    got = snap + 2 * SNAP_MID;
    for (uint64_t round = 1; round <= 2 && st == SL_OK; round++, snap += SNAP_MID) {
        st = sl_gossip_exchange(d->t, 4, round, snap, SNAP_MID, &peer, 1, &peer, 1, got, NULL, &n,
                                TEST_WAIT_MS);
        got += SNAP_MID;
    }
    if (st == SL_OK)
        st = sl_transport_wait_sent(d->t, TEST_WAIT_MS);
    for (unsigned j = 0; j < 3; j++)
        d->counts[j] = sl_transport_stripe_frames(d->t, j);
    d->st = st;
    return NULL;
}

/* The two ranks run side_run at once, rank 1 in a thread, over stripes stripes (1 or 3)
 * under mode (as exchange's); in[r] is rank r's KIND_EACH floats, laid out as side_run
 * reads them, where the sums and the snapshots received end. Checks that nothing was
 * dropped and, with three stripes, that the ring's frames, of any size, all went on
 * stripe 0, and the snapshots over every stripe. */
static void
kinds_exchange(unsigned stripes, int mode, const sl_secret_t *secret, float *in[2])
{
    sl_transport_t *t[2];
    side_t d[2];
    pthread_t th;
    size_t ring_frames = 2 * ((RING / 2 + sl_allreduce_chunk(RING, 2) - 1) /
                              sl_allreduce_chunk(RING, 2)); /* both passes */

    /* the test means something only if the old rule would have cut these in pieces */
    ck_assert_uint_ge(sl_allreduce_chunk(RING, 2) * sizeof(float), 2 * SL_PIECE_MIN_BYTES);
    pair_open(t, 4, stripes, 0, mode == 1 ? secret : NULL, mode == 2);
    for (int r = 0; r < 2; r++)
        d[r] = (side_t){.t = t[r], .buf = in[r]};
    ck_assert_int_eq(pthread_create(&th, NULL, side_run, &d[1]), 0);
    side_run(&d[0]);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(d[r].st == SL_OK, "rank %d, %u stripes, mode %d: %s", r, stripes, mode,
                      sl_status_str(d[r].st));
        for (unsigned k = 1; k < SL_DROP_NREASONS; k++)
            ck_assert_uint_eq(sl_transport_dropped(t[r], k), 0);
        if (stripes == 1)
            continue;
        /* ring: every frame, one per chunk (RING's two passes, RING_MID's one frame in
         * each), whole on stripe 0 */
        ck_assert_uint_eq(d[r].ring_counts[0], ring_frames + 2);
        ck_assert_uint_eq(d[r].ring_counts[1], 0);
        ck_assert_uint_eq(d[r].ring_counts[2], 0);
        /* snapshots: a piece of the large one on each stripe, the mid-sized ones whole in
         * turn from stripe 0 */
        ck_assert_uint_eq(d[r].counts[0] - d[r].ring_counts[0], 2);
        ck_assert_uint_eq(d[r].counts[1] - d[r].ring_counts[1], 2);
        ck_assert_uint_eq(d[r].counts[2] - d[r].ring_counts[2], 1);
    }
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}

/* Under each security mode, a ring allreduce and gossip exchanges over three stripes:
 * the ring's chunks keep to stripe 0 whole, the snapshots are split over the stripes or
 * take them in turn (sl_transport_striped_kind), and the bits are those of one stripe:
 * the exact sums on both ranks, each snapshot as its sender had it. */
START_TEST(test_stripes_by_kind)
{
    float *src[2], *one[2], *three[2];
    sl_secret_t secret;

    ck_assert_int_eq(sl_secret_make(&secret), SL_OK);
    for (int r = 0; r < 2; r++) {
        src[r] = malloc(KIND_EACH * sizeof(float));
        one[r] = malloc(KIND_EACH * sizeof(float));
        three[r] = malloc(KIND_EACH * sizeof(float));
        ck_assert(src[r] && one[r] && three[r]);
        for (size_t i = 0; i < KIND_EACH; i++)
            src[r][i] = test_node_input((uint32_t)r, i);
        /* the snapshots received: zero until they come */
        memset(src[r] + RING + RING_MID + SNAP, 0, SNAP * sizeof(float));
        memset(src[r] + RING + RING_MID + 2 * SNAP + 2 * SNAP_MID, 0, 2 * SNAP_MID * sizeof(float));
    }
    for (int mode = 0; mode < 3; mode++) {
        for (int r = 0; r < 2; r++) {
            memcpy(one[r], src[r], KIND_EACH * sizeof(float));
            memcpy(three[r], src[r], KIND_EACH * sizeof(float));
        }
        kinds_exchange(1, mode, &secret, one);
        kinds_exchange(3, mode, &secret, three);
        for (int r = 0; r < 2; r++) {
            const float *peer = src[1 - r] + RING + RING_MID;
            const float *got = one[r] + RING + RING_MID;
            ck_assert_msg(memcmp(one[r], three[r], KIND_EACH * sizeof(float)) == 0,
                          "mode %d, rank %d: three stripes gave other bits than one", mode, r);
            for (size_t i = 0; i < RING + RING_MID; i++) /* sums of 2 inputs: exact */
                if (one[r][i] != src[0][i] + src[1][i])
                    ck_abort_msg("mode %d, rank %d: float %zu is %g, not %g", mode, r, i,
                                 (double)one[r][i], (double)(src[0][i] + src[1][i]));
            ck_assert(memcmp(got + SNAP, peer, SNAP * sizeof(float)) == 0);
            ck_assert(memcmp(got + 2 * SNAP + 2 * SNAP_MID, peer + 2 * SNAP,
                             2 * SNAP_MID * sizeof(float)) == 0);
        }
    }
    for (int r = 0; r < 2; r++) {
        free(src[r]);
        free(one[r]);
        free(three[r]);
    }
}
END_TEST

/* The kinds that take the stripes: those of whole snapshots and states to a peer, not
 * the collectives' nor the control frames. */
START_TEST(test_striped_kinds)
{
    const unsigned yes[] = {SL_WIRE_GOSSIP_SNAPSHOT, SL_WIRE_SPARSE_INDEX, SL_WIRE_SPARSE_VALUES,
                            SL_WIRE_STATE, SL_WIRE_DATA};
    const unsigned no[] = {SL_WIRE_ALLREDUCE, SL_WIRE_ALLGATHER, SL_WIRE_BROADCAST, SL_WIRE_BARRIER,
                           SL_WIRE_ABORT,     SL_WIRE_HELLO,     SL_WIRE_SHM_OFFER, 0,
                           SL_WIRE_NKINDS};

    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        ck_assert_msg(sl_transport_striped_kind(yes[i]), "%s", sl_wire_kind_name(yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        ck_assert_msg(!sl_transport_striped_kind(no[i]), "%s", sl_wire_kind_name(no[i]));
}
END_TEST

/* 0 stands for one stripe per sending I/O thread (at least 1, at most the bound); more
 * than SL_TRANSPORT_MAX_STRIPES is refused with the key's name; link emulation keeps
 * one. */
START_TEST(test_stripes_auto)
{
    sl_transport_opts_t o;
    sl_transport_t *t;

    ck_assert_uint_eq(sl_transport_stripes_auto(1), 1);
    ck_assert_uint_eq(sl_transport_stripes_auto(2), 1);
    ck_assert_uint_eq(sl_transport_stripes_auto(3), 1);
    ck_assert_uint_eq(sl_transport_stripes_auto(4), 2);
    ck_assert_uint_eq(sl_transport_stripes_auto(9), 4);
    ck_assert_uint_eq(sl_transport_stripes_auto(SL_TRANSPORT_MAX_IO_THREADS),
                      SL_TRANSPORT_MAX_STRIPES);
    sl_transport_opts_default(&o);
    o.size = 2;
    o.linger_ms = 0;
    o.io_threads = 4;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    ck_assert_uint_eq(sl_transport_stripes(t), 2);
    sl_transport_destroy(&t);
    o.stripes = SL_TRANSPORT_MAX_STRIPES + 1;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_INVALID);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "cluster.stripes 17"));
    o.stripes = 3;
    o.emulate_latency_ms = 1;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
    ck_assert_uint_eq(sl_transport_stripes(t), 1);
    sl_transport_destroy(&t);
}
END_TEST

static Suite *
stripes_suite(void)
{
    Suite *s = suite_create("stripes");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_set_timeout(core, 240); /* a hang guard */
    tcase_add_test(core, test_pair_stripes);
    tcase_add_test(core, test_stripes_by_kind);
    suite_add_tcase(s, core);
    tcase_add_test(limits, test_stripes_auto);
    tcase_add_test(limits, test_striped_kinds);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(stripes_suite());
}
