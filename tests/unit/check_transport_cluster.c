/* Tests of src/transport on real clusters of 1..7 forked node processes on
 * tcp://127.0.0.1:* and ipc://: every collective against locally computed results,
 * frames with bad fields injected into a node's socket, a peer killed with SIGKILL
 * mid-run and a peer that aborts. The clusters run on test_util.c's harness. Nothing
 * here waits on the clock: waits end on a frame, a counter or a node's exit, under
 * generous limits that only guard against hangs; short timeouts appear only where a
 * timeout is the behaviour under test, and then only their lower bound is checked
 * exactly. Two transports in one process are in check_transport.c. */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sl_clock.h"
#include "common/sl_hash.h"
#include "transport/sl_collective.h"
#include "transport/sl_gossip.h"
#include "transport/sl_transport.h"

#include "test_tool.h"
#include "test_util.h"

#define RUN 0xfeed0000beefULL

/* ---------------------------------------------------------------- forked clusters */

/* The harness (fork, endpoints through pipes, kill-all, hang guard) is test_util.c's;
 * every node function returns 0 when its checks passed. */

/* ---- allreduce: several sizes and chunkings in a row, rounds increasing */

typedef struct {
    size_t count, chunk;
    unsigned window;
} shape_t;

/* The large shape runs twice: in the first the nodes offer and accept shared-memory
 * lanes; test_settle then makes sure every offer and accept has been read, so the
 * second certainly goes through them. */
static const shape_t ar_shapes[] = {{1, 0, 0},       {7, 3, 0},           {1000, 7, 1},
                                    {1000, 1000, 3}, {1000003, 65537, 0}, {1000003, 65537, 0},
                                    {0, 0, 0}};

/* Fewer shapes for 8 nodes, with either algorithm; the large one still twice, since
 * only the second is sure to find the lanes accepted. */
static const shape_t ar8_shapes[] = {{1, 0, 0},           {7, 3, 0},           {1000, 7, 1},
                                     {1000003, 65537, 0}, {1000003, 65537, 0}, {0, 0, 0}};

/* 2,000,000 floats with the default chunk, on component 4: segments of 1 MiB and more
 * go in about 8 frames of at least 65,536 floats (n = 2: 1,000,000-float segments in 8
 * of 125,000; n = 5: 400,000 in 7 of 65,536; n = 7: 285,715 in 5), smaller ones in
 * one (n = 8: 250,000, in frames of up to 262,144). The ring sends 2 (n - 1) segments.
 * n = 4, 6, 8 and 12 halve and double by default: n = 4 sends 1,000,000 then 500,000
 * floats each way (16 + 8 frames of 65,536), as many frames as the ring would take;
 * n = 8 1,000,000, 500,000 and 250,000 (4 + 2 + 1 of 262,144), half the ring's; n = 6
 * 1,000,000 in 16 frames of 65,536 to its neighbour, then 2 + 2 segments of 333,333 in
 * 6 round a ring of 3, and the same 16 back, 56 in all where the ring sends 60; n =
 * 12 1,000,000 and 500,000 (4 + 2 of 262,144), then 2 + 2 segments of 166,667 in one,
 * 16 in all against 22. Returns 0 when the sums and the frame count are right. */
static int
node_allreduce_default_chunk(sl_transport_t *t)
{
    static const unsigned frames_sent[] = {0, 0, 16, 32, 48, 56, 56, 60, 14, 0, 0, 0, 16};
    enum { COUNT = 2000000 };
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    float *buf = malloc(COUNT * sizeof *buf);
    sl_transport_stat_t st;
    int bad = 0;

    if (!buf || n >= sizeof frames_sent / sizeof *frames_sent) {
        free(buf);
        return 1;
    }
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = (float)(me + i % 3);
    if (sl_allreduce_sum(t, 4, 0, buf, COUNT, NULL) != SL_OK)
        bad = 2;
    for (size_t i = 0; !bad && i < COUNT; i++)
        if (buf[i] != (float)(n * (n - 1) / 2 + n * (i % 3)))
            bad = 3;
    free(buf);
    sl_transport_stat(t, SL_WIRE_ALLREDUCE, 4, &st);
    if (!bad && st.sent_msgs != frames_sent[n])
        bad = 4;
    if (bad)
        fprintf(stderr, "rank %u of %u: default chunk check %d (%" PRIu64 " frames sent)\n", me, n,
                bad, st.sent_msgs);
    return bad;
}

static int
node_allreduce(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    const shape_t *shapes = c->arg;
    sl_hash_t h;

    sl_hash_init(&h, 1);
    for (int s = 0; shapes[s].count; s++) {
        size_t count = shapes[s].count;
        float *buf = malloc(count * sizeof *buf);
        sl_collective_opts_t o = {.chunk_elems = shapes[s].chunk, .window = shapes[s].window};
        for (size_t i = 0; i < count; i++)
            buf[i] = test_node_input(me, i) * (float)(s + 1);
        if (shapes[s + 1].count == 0 && test_settle(t, 90, 0) != SL_OK)
            return 9; /* before the last shape: the lanes are up */
        if (sl_allreduce_sum(t, 3, (uint64_t)s, buf, count, &o) != SL_OK)
            return 10 + s;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (uint32_t k = 0; k < n; k++)
                want += test_node_input(k, i) * (float)(s + 1);
            if (buf[i] != want) {
                fprintf(stderr, "allreduce shape %d: [%zu] = %g, want %g\n", s, i, buf[i], want);
                return 20 + s;
            }
        }
        sl_hash_update(&h, buf, count * sizeof *buf);
        free(buf);
    }
    sl_transport_stat_t st;
    size_t sent = 0, recvd = 0;
    sl_transport_stat(t, SL_WIRE_ALLREDUCE, 3, &st);
    for (int s = 0; shapes[s].count; s++)
        test_allreduce_floats(shapes[s].count, n, me, c->ring, &sent, &recvd);
    if (st.sent_bytes != sent * sizeof(float) || st.recv_bytes != recvd * sizeof(float))
        return 30;
    /* the large shape's chunks went through shared memory (once the lanes were
     * accepted), unless it was off */
    uint64_t shm_sent, shm_recv;
    sl_transport_shm_frames(t, &shm_sent, &shm_recv);
    if (n > 1 && (!c->shm ? shm_sent + shm_recv != 0 : shm_sent == 0 || shm_recv == 0))
        return 31;
    if (c->shm && node_allreduce_default_chunk(t) != 0)
        return 32;
    *result = sl_hash_final(&h);
    return 0;
}

static void
check_same_results(test_cluster_t *c)
{
    for (int i = 1; i < c->n; i++)
        ck_assert_msg(c->res[i][0] == c->res[0][0], "rank %d's result differs from rank 0's", i);
}

START_TEST(test_allreduce)
{
    static const int sizes[] = {1, 2, 3, 4, 5, 7};
    test_cluster_t c;
    uint64_t with_shm = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        test_cluster_init(&c, sizes[i], (int)(i % 2), RUN, node_allreduce, ar_shapes);
        test_cluster_assert_ok(&c, "allreduce");
        check_same_results(&c);
        if (sizes[i] == 3)
            with_shm = c.res[0][0];
    }
    /* all over ZeroMQ: the same bits */
    test_cluster_init(&c, 3, 0, RUN, node_allreduce, ar_shapes);
    c.shm = 0;
    test_cluster_assert_ok(&c, "allreduce without shared memory");
    check_same_results(&c);
    ck_assert(c.res[0][0] == with_shm);
}
END_TEST

/* Halving and doubling on 8 nodes, and on 6 and 12 with rings of 3 in the middle; the
 * ring where it would halve, the transport asking for it (cluster.allreduce: ring), on
 * 8 and 4 nodes: the sums, and each node's traffic as its algorithm moves it. */
START_TEST(test_allreduce_halving)
{
    static const int sizes[] = {8, 6, 12};
    test_cluster_t c;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        test_cluster_init(&c, sizes[i], 1, RUN, node_allreduce, i ? ar_shapes : ar8_shapes);
        test_cluster_assert_ok(&c, "allreduce halving");
        check_same_results(&c);
    }
    test_cluster_init(&c, 8, 1, RUN, node_allreduce, ar8_shapes);
    c.ring = 1;
    test_cluster_assert_ok(&c, "allreduce on 8 nodes, the transport asking for the ring");
    check_same_results(&c);
    test_cluster_init(&c, 4, 0, RUN, node_allreduce, ar_shapes);
    c.ring = 1;
    test_cluster_assert_ok(&c, "allreduce on 4 nodes, the transport asking for the ring");
    check_same_results(&c);
}
END_TEST

/* ---- allgather with odd per-node counts, some zero */

/* Pass 0's blocks of 1,000,003 floats (ranks 3 and 10) and pass 1's of 1 to 27 floats,
 * each pass as sl_allgather_doubles says (test_allgather_doubles_when works its choice
 * out by hand): pass 0 goes round the ring up to 8 nodes, which sends a large block
 * once down each link where doubling would send it on each of its steps, and doubles
 * on 12, where the ring would send two of them; pass 1 doubles where n is even, 4 or
 * more, unless the transport asks for the ring. */
static size_t
ag_count(uint32_t k, int pass)
{
    static const size_t counts[] = {5, 0, 1, 1000003, 13, 2, 0};
    return pass == 0 ? counts[k % 7] : (k * 37 + 11) % 29;
}

static int
node_allgather(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    size_t counts[TEST_CLUSTER_MAXN], total = 0, sent = 0, recvd = 0;
    sl_transport_stat_t st;

    for (int pass = 0; pass < 2; pass++) {
        total = 0;
        for (uint32_t k = 0; k < n; k++)
            total += counts[k] = ag_count(k, pass);
        float *out = malloc((total ? total : 1) * sizeof *out),
              *mine = malloc((counts[me] + 1) * sizeof *mine);
        for (size_t i = 0; i < counts[me]; i++)
            mine[i] = test_node_input(me, i);
        sl_collective_opts_t o = {.chunk_elems = pass ? 3 : 4099, .window = 2};
        if (sl_allgather(t, 9, (uint64_t)pass, mine, out, counts, &o) != SL_OK)
            return 10 + pass;
        size_t at = 0;
        for (uint32_t k = 0; k < n; k++)
            for (size_t i = 0; i < counts[k]; i++, at++)
                if (out[at] != test_node_input(k, i))
                    return 20 + pass;
        *result ^= sl_hash_bytes(out, total * sizeof *out, (uint64_t)pass);
        free(out);
        free(mine);
        test_allgather_floats(counts, n, me, sl_allgather_doubles(n, counts, 0, c->ring), &sent,
                              &recvd);
    }
    sl_transport_stat(t, SL_WIRE_ALLGATHER, 9, &st);
    if (st.sent_bytes != sent * sizeof(float) || st.recv_bytes != recvd * sizeof(float)) {
        fprintf(stderr,
                "rank %u of %u: allgather sent %" PRIu64 " and received %" PRIu64
                " bytes, want %zu and %zu\n",
                me, n, st.sent_bytes, st.recv_bytes, sent * sizeof(float), recvd * sizeof(float));
        return 30;
    }
    return 0;
}

/* Around the ring, and by doubling on 4 and 8 nodes, on 6 and 12 after rings of 3 (on 8
 * also with the transport asking for the ring): every block in its place, and each
 * node's traffic as its algorithm moves it. */
START_TEST(test_allgather)
{
    static const int sizes[] = {2, 3, 4, 7, 8, 6, 12};
    test_cluster_t c;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        test_cluster_init(&c, sizes[i], (int)(i % 2 == 0), RUN, node_allgather, NULL);
        test_cluster_assert_ok(&c, "allgather");
        check_same_results(&c);
    }
    test_cluster_init(&c, 8, 0, RUN, node_allgather, NULL);
    c.ring = 1;
    test_cluster_assert_ok(&c, "allgather on 8 nodes, the transport asking for the ring");
    check_same_results(&c);
}
END_TEST

/* Doubling's critical path against the ring's busiest link, worked out by hand: {4, 1,
 * 1, 1} on 4 nodes sends 4 + 5 floats one step after the other, 9, against the ring's
 * 7 - 1 = 6, just the (n - 1) / log2 n = 1.5 times allowed; {5, 1, 1, 1} 11 against 7,
 * too many. On 8 nodes ag_count's pass 1 (11, 19, 27, 6, 14, 22, 1, 9) sends 27 + 41 +
 * 56 = 124 against 109 - 1 = 108, well within 7/3; pass 0's 3,000,021 against
 * 1,000,029 is not. On 6 nodes a ring of 3 comes first, whose 2 steps each carry the
 * largest block: {3, 1, 1, 1, 1, 1} sends 3 + 3 + 5 = 11 in 3 steps against the ring's
 * 7 in 5, just within 5/3; {4, 1, 1, 1, 1, 1} 14 against 8, too many; pass 0 of 6
 * nodes 1,000,003 + 1,000,003 + 1,000,005 against 1,000,024, too many. On 12 nodes
 * (rings of 3, then 2 steps) pass 0 sends 2 x 1,000,003 + 1,000,021 + 1,000,024 =
 * 4,000,051 in 4 steps against 2,000,046 in 11, within 11/4; on 4 nodes 2,000,006
 * against 1,000,009 in 3 steps, not within 3/2. */
START_TEST(test_allgather_doubles_when)
{
    size_t four[4] = {4, 1, 1, 1}, five[4] = {5, 1, 1, 1}, ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    size_t three[6] = {3, 1, 1, 1, 1, 1}, four6[6] = {4, 1, 1, 1, 1, 1};
    size_t pass0[12], pass1[12];

    for (uint32_t k = 0; k < 12; k++) {
        pass0[k] = ag_count(k, 0);
        pass1[k] = ag_count(k, 1);
    }
    ck_assert(sl_allgather_doubles(4, four, 0, 0));
    ck_assert(!sl_allgather_doubles(4, five, 0, 0));
    ck_assert(sl_allgather_doubles(8, pass1, 0, 0));
    ck_assert(!sl_allgather_doubles(8, pass0, 0, 0));
    ck_assert(sl_allgather_doubles(8, ones, 0, 0));
    ck_assert(sl_allgather_doubles(6, three, 0, 0));
    ck_assert(!sl_allgather_doubles(6, four6, 0, 0));
    ck_assert(!sl_allgather_doubles(6, pass0, 0, 0));
    ck_assert(sl_allgather_doubles(12, pass0, 0, 0));
    ck_assert(!sl_allgather_doubles(4, pass0, 0, 0));
    ck_assert(sl_allgather_doubles(12, pass1, 0, 0));
    ck_assert(sl_allgather_doubles(6, ones, 0, 0));
    /* sl_allreduce_halves's conditions: n, a codec, the ring asked for */
    ck_assert(!sl_allgather_doubles(2, ones, 0, 0));
    ck_assert(!sl_allgather_doubles(7, ones, 0, 0));
    ck_assert(!sl_allgather_doubles(8, ones, 1, 0));
    ck_assert(!sl_allgather_doubles(8, ones, 0, 1));
}
END_TEST

/* ---- broadcast of odd sizes from every root, odd chunks */

static int
node_broadcast(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    static const shape_t shapes[] = {{1, 0, 0}, {7, 3, 0}, {1000003, 65537, 0}, {1000, 1, 0}};
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    uint64_t round = 0;

    for (size_t s = 0; s < 4; s++)
        for (uint32_t root = 0; root < n; root++, round++) {
            size_t count = shapes[s].count;
            float *buf = malloc(count * sizeof *buf);
            for (size_t i = 0; i < count; i++)
                buf[i] = me == root ? test_node_input(root, i) : -99.0f;
            sl_collective_opts_t o = {.chunk_elems = shapes[s].chunk};
            if (sl_broadcast(t, 1, round, root, buf, count, &o) != SL_OK)
                return 10 + (int)s;
            for (size_t i = 0; i < count; i++)
                if (buf[i] != test_node_input(root, i))
                    return 20 + (int)s;
            free(buf);
            if (count > 100000)
                break; /* the large one from one root is enough */
        }
    *result = 1;
    return 0;
}

START_TEST(test_broadcast)
{
    test_cluster_t c;
    test_cluster_init(&c, 3, 0, RUN, node_broadcast, NULL);
    test_cluster_assert_ok(&c, "broadcast");
    test_cluster_init(&c, 4, 1, RUN, node_broadcast, NULL);
    test_cluster_assert_ok(&c, "broadcast");
}
END_TEST

/* ---- barrier: nobody leaves before everybody has entered */

static int
node_barrier(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    char path[128];

    for (uint64_t round = 0; round < 3; round++) {
        /* arrive at different times (only the order varies: no result depends on it) */
        usleep(((me * 7 + round * 3) % 5) * 20000);
        snprintf(path, sizeof path, "%s/enter-%u", c->dir, (unsigned)me);
        FILE *f = fopen(path, "a");
        if (!f)
            return 10;
        fputc('x', f);
        fclose(f);
        /* rounds just below the harness's final barrier, the next one */
        if (sl_barrier(t, TEST_FINAL_BARRIER_ROUND - 3 + round, 0) != SL_OK)
            return 11;
        for (uint32_t k = 0; k < n; k++) {
            snprintf(path, sizeof path, "%s/enter-%u", c->dir, (unsigned)k);
            f = fopen(path, "r");
            if (!f)
                return 12;
            fseek(f, 0, SEEK_END);
            long size = ftell(f);
            fclose(f);
            if (size < (long)round + 1)
                return 13; /* node k has not entered this round yet */
        }
    }
    *result = 1;
    return 0;
}

START_TEST(test_barrier)
{
    test_cluster_t c;
    test_cluster_init(&c, 5, 0, RUN, node_barrier, NULL);
    test_cluster_assert_ok(&c, "barrier");
    test_cluster_init(&c, 4, 1, RUN, node_barrier, NULL);
    test_cluster_assert_ok(&c, "barrier");
}
END_TEST

/* ---- gossip following a hand-made schedule: in round r node i pulls from i + d for
 * d in offsets[r] (mod n), so its pullers are i - d. Every pull has exactly one push. */

#define GOSSIP_N 5
#define GOSSIP_COUNT 1001
static const uint32_t gossip_offsets[3][2] = {{1, 3}, {2, 4}, {1, 2}};

static int
node_gossip(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    float mine[GOSSIP_COUNT], recv[2 * GOSSIP_COUNT];
    int silent = c->arg ? *(const int *)c->arg : -1;

    for (uint64_t r = 0; r < 3; r++) {
        uint32_t chosen[2], pullers[2], from[2];
        size_t got;
        for (int j = 0; j < 2; j++) {
            chosen[j] = (me + gossip_offsets[r][j]) % n;
            pullers[j] = (me + n - gossip_offsets[r][j]) % n;
        }
        for (size_t i = 0; i < GOSSIP_COUNT; i++)
            mine[i] = test_node_input(me, i) + (float)r;
        if ((int)me == silent && r == 2)
            return 0; /* leaves without pushing its last round */
        int expect_silent = silent >= 0 && r == 2 &&
                            (chosen[0] == (uint32_t)silent || chosen[1] == (uint32_t)silent);
        if (expect_silent) {
            /* the other chosen node's push first (the only frame this node can be sent
             * now), so that the 1 s timeout below only has the silent one to wait for */
            double dl = test_deadline();
            while (sl_transport_pending(t) < 1)
                if (sl_transport_poll(t) != SL_OK || !test_wait_more(dl))
                    return 16;
        }
        double t0 = sl_clock_now();
        sl_status_t st = sl_gossip_exchange(t, 4, r, mine, GOSSIP_COUNT, pullers, 2, chosen, 2,
                                            recv, from, &got, expect_silent ? 1000 : TEST_WAIT_MS);
        if (expect_silent) {
            double dt = sl_clock_now() - t0;
            if (st != SL_ERR_TIMEOUT || got != 1 || dt < 0.9 || dt > 1.0 + TEST_LATE_S)
                return 10;
        } else if (st != SL_OK || got != 2) {
            return 11;
        }
        for (size_t j = 0; j < got; j++) {
            if (from[j] != chosen[0] && from[j] != chosen[1])
                return 12;
            for (size_t i = 0; i < GOSSIP_COUNT; i++)
                if (recv[j * GOSSIP_COUNT + i] != test_node_input(from[j], i) + (float)r)
                    return 13;
        }
        if (got == 2 && from[0] == from[1])
            return 14;
    }
    sl_transport_stat_t st;
    sl_transport_stat(t, SL_WIRE_GOSSIP_SNAPSHOT, 4, &st);
    if (silent < 0 && (st.sent_msgs != 6 || st.recv_msgs != 6 ||
                       st.sent_bytes != 6 * GOSSIP_COUNT * sizeof(float)))
        return 15;
    *result = 1;
    return 0;
}

START_TEST(test_gossip)
{
    test_cluster_t c;
    static const int silent = 3;
    test_cluster_init(&c, GOSSIP_N, 0, RUN, node_gossip, NULL);
    test_cluster_assert_ok(&c, "gossip");
    test_cluster_init(&c, GOSSIP_N, 1, RUN, node_gossip, &silent);
    c.final_barrier = 0; /* the silent node is gone */
    test_cluster_assert_ok(&c, "gossip with a silent peer");
}
END_TEST

/* ---- bad frames injected into rank 0's socket before the real exchange */

/* Sends [header + payload] parts over socket s, after optional damage. */
static void
inject_frame(void *s, const sl_wire_header_t *h, const float *payload, int damage)
{
    unsigned char buf[SL_WIRE_HEADER_BYTES + 64];
    size_t len = SL_WIRE_HEADER_BYTES + h->payload_bytes;

    ck_assert_int_eq(sl_wire_encode(h, payload, buf), SL_OK);
    memcpy(buf + SL_WIRE_HEADER_BYTES, payload, h->payload_bytes);
    if (damage == 1)
        buf[len - 1] ^= 0x40; /* checksum no longer matches */
    if (damage == 2)
        len = 30;      /* truncated header */
    if (damage == 3) { /* three parts */
        ck_assert_int_ge(zmq_send(s, buf, 8, ZMQ_SNDMORE), 0);
        ck_assert_int_ge(zmq_send(s, buf, 8, ZMQ_SNDMORE), 0);
    }
    ck_assert_int_ge(zmq_send(s, buf, len, 0), 0);
}

static void
inject_bad(test_cluster_t *c, char eps[][TEST_CLUSTER_EP_BYTES])
{
    void *ctx = zmq_ctx_new();
    void *as_one = zmq_socket(ctx, ZMQ_DEALER), *anon = zmq_socket(ctx, ZMQ_DEALER);
    unsigned char id[9] = {'S', 1, 0, 0, 0, 0x77, 0x77, 0x77, 0x77}; /* rank 1, other nonce */
    float v[4] = {9, 9, 9, 9};
    sl_wire_header_t h = {0};
    int linger = 2000;

    zmq_setsockopt(as_one, ZMQ_ROUTING_ID, id, sizeof id);
    zmq_setsockopt(as_one, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(anon, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_connect(as_one, eps[0]), 0);
    ck_assert_int_eq(zmq_connect(anon, eps[0]), 0);
    h.run_id = RUN;
    h.sender = 1;
    h.receiver = 0;
    h.kind = SL_WIRE_DATA;
    h.encoding = SL_WIRE_FP32;
    h.scale = 1.0f;
    h.component = 1;
    h.count = 4;
    h.payload_bytes = 16;
    h.round = 3; /* older than the real exchange (round 5): stale */
    inject_frame(as_one, &h, v, 0);
    h.round = 5;
    h.run_id = RUN + 1; /* another run */
    inject_frame(as_one, &h, v, 0);
    h.run_id = RUN;
    inject_frame(as_one, &h, v, 1); /* bad checksum */
    inject_frame(as_one, &h, v, 2); /* truncated */
    inject_frame(as_one, &h, v, 3); /* three parts */
    h.receiver = 1;
    inject_frame(as_one, &h, v, 0); /* not for rank 0 */
    h.receiver = 0;
    inject_frame(anon, &h, v, 0); /* valid, but not from a node's connection */
    h.component = 2;              /* the same key twice: one filed, one duplicate */
    inject_frame(as_one, &h, v, 0);
    inject_frame(as_one, &h, v, 0);
    zmq_close(as_one);
    zmq_close(anon);
    zmq_ctx_term(ctx); /* returns once everything left (linger) */
    (void)c;
}

static int
node_after_injection(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    uint32_t me = sl_transport_rank(t);
    float buf[1000], v[4];
    size_t got;

    if (me == 1) {
        for (size_t i = 0; i < 1000; i++)
            buf[i] = test_node_input(1, i);
        sl_wire_key_t k = {5, 1, 0, 0, SL_WIRE_DATA};
        if (sl_transport_send(t, &k, buf, 1000, SL_WIRE_FP32, 1.0f, 0, -1) != SL_OK)
            return 10;
    } else {
        /* first let everything injected arrive, so that the stale and duplicate frames
         * are filed or refused in a known order: the duplicate is the last frame on its
         * connection (ZeroMQ keeps a connection's order), the anonymous frame the only
         * one on its own */
        double dl = test_deadline();
        while (sl_transport_dropped(t, SL_DROP_DUPLICATE) < 1 ||
               sl_transport_dropped(t, SL_DROP_IDENTITY) < 1)
            if (sl_transport_poll(t) != SL_OK || !test_wait_more(dl))
                return 14;
        sl_wire_key_t k = {5, 1, 0, 1, SL_WIRE_DATA};
        if (sl_transport_recv(t, &k, buf, sizeof buf, &got, TEST_WAIT_MS) != SL_OK ||
            got != sizeof buf)
            return 11;
        for (size_t i = 0; i < 1000; i++)
            if (buf[i] != test_node_input(1, i))
                return 12;
        k.component = 2;
        if (sl_transport_recv(t, &k, v, sizeof v, &got, 0) != SL_OK || v[0] != 9.0f)
            return 13;
        static const struct {
            unsigned reason;
            uint64_t n;
        } want[] = {{SL_DROP_OLD_ROUND, 1}, {SL_WIRE_BAD_RUN, 1},   {SL_WIRE_BAD_CHECKSUM, 1},
                    {SL_WIRE_TRUNCATED, 1}, {SL_DROP_FRAMING, 1},   {SL_WIRE_BAD_RECEIVER, 1},
                    {SL_DROP_IDENTITY, 1},  {SL_DROP_DUPLICATE, 1}, {SL_WIRE_BAD_MAGIC, 0}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            if (sl_transport_dropped(t, want[i].reason) != want[i].n) {
                fprintf(stderr, "dropped for %s: %llu, want %llu\n",
                        sl_transport_drop_name(want[i].reason),
                        (unsigned long long)sl_transport_dropped(t, want[i].reason),
                        (unsigned long long)want[i].n);
                return 15;
            }
    }
    /* and a real collective still works */
    for (size_t i = 0; i < 1000; i++)
        buf[i] = test_node_input(me, i);
    sl_collective_opts_t o = {.chunk_elems = 64};
    if (sl_allreduce_sum(t, 0, 0, buf, 1000, &o) != SL_OK)
        return 16;
    for (size_t i = 0; i < 1000; i++)
        if (buf[i] != test_node_input(0, i) + test_node_input(1, i))
            return 17;
    (void)c;
    *result = 1;
    return 0;
}

START_TEST(test_bad_frames_dropped)
{
    test_cluster_t c;
    test_cluster_init(&c, 2, 0, RUN, node_after_injection, NULL);
    c.inject = inject_bad;
    test_cluster_assert_ok(&c, "injection");
    test_cluster_init(&c, 2, 1, RUN, node_after_injection, NULL);
    c.inject = inject_bad;
    test_cluster_assert_ok(&c, "injection");
}
END_TEST

/* ---- a wait keeps its deadline under a stream of frames */

#define STREAM_COMPONENT 11u
#define STREAM_WAIT_MS 300
#define STREAM_KEYS 65536

/* Ranks 0 and 2 send rank 1 empty stale frames as fast as they go until rank 1 says
 * stop, or for 2 x TEST_LATE_S. Rank 1 waits STREAM_WAIT_MS for any of STREAM_KEYS
 * frames that never come: the wait must end on time, not when the stream does (it used
 * to go on reading as long as frames came). Comparing each frame with that many keys
 * makes rank 1 slower than its two senders, so its socket is never empty during the
 * wait. The stream's frames are counted as stale drops, and none makes the wait
 * longer. */
/* The streams are over: each streamer sends a last frame behind its junk, and rank 1
 * answers once it has both, so no queue still holds junk when the harness's final barrier
 * starts (a barrier's last frames, stuck behind thousands of junk frames on a loaded
 * machine, could outlast their sender's linger). 1 when done. */
static int
drained(sl_transport_t *t, uint32_t me)
{
    sl_transport_frame_t *f;

    if (me != 1) {
        sl_wire_key_t done = {0, STREAM_COMPONENT + 2, 0, 1, SL_WIRE_DATA};
        sl_wire_key_t bye = {0, STREAM_COMPONENT + 3, 0, 1, SL_WIRE_DATA};
        if (sl_transport_send(t, &done, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, -1) != SL_OK ||
            sl_transport_recv_any(t, &bye, 1, TEST_WAIT_MS, &f, NULL) != SL_OK)
            return 0;
        sl_transport_frame_release(&f);
        return 1;
    }
    for (uint32_t p = 0; p < 3; p += 2) {
        sl_wire_key_t done = {0, STREAM_COMPONENT + 2, 0, p, SL_WIRE_DATA};
        if (sl_transport_recv_any(t, &done, 1, TEST_WAIT_MS, &f, NULL) != SL_OK)
            return 0;
        sl_transport_frame_release(&f);
    }
    for (uint32_t p = 0; p < 3; p += 2) {
        sl_wire_key_t bye = {0, STREAM_COMPONENT + 3, 0, p, SL_WIRE_DATA};
        if (sl_transport_send(t, &bye, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, -1) != SL_OK)
            return 0;
    }
    return 1;
}

static int
node_stream(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    uint32_t me = sl_transport_rank(t);
    sl_wire_key_t stop = {0, STREAM_COMPONENT + 1, 0, 1, SL_WIRE_DATA};
    sl_wire_key_t never = {1, STREAM_COMPONENT, UINT32_MAX, 0, SL_WIRE_DATA};
    static sl_wire_key_t keys[STREAM_KEYS];
    sl_transport_frame_t *f;
    sl_status_t st;
    double dl = test_deadline(), t0, waited;

    (void)c;
    if (me != 1) {
        sl_wire_key_t junk = {0, STREAM_COMPONENT, 0, 1, SL_WIRE_DATA};
        double end = sl_clock_now() + 2 * TEST_LATE_S;

        for (uint32_t i = 0;; i++) {
            junk.seq = i;
            st = sl_transport_send(t, &junk, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, 0);
            if (st != SL_OK && st != SL_ERR_TIMEOUT) /* TIMEOUT: the queue is full */
                return 20;
            if (i % 64 != 0)
                continue;
            st = sl_transport_recv_any(t, &stop, 1, 0, &f, NULL);
            if (st == SL_OK) {
                sl_transport_frame_release(&f);
                return drained(t, me) ? 0 : 30;
            }
            if (st != SL_ERR_TIMEOUT)
                return 21;
            if (sl_clock_now() > end)
                return 22; /* never told to stop */
        }
    }
    /* round 1 asked for: the stream's round-0 frames are stale from now on */
    if (sl_transport_recv_any(t, &never, 1, 0, &f, NULL) != SL_ERR_TIMEOUT)
        return 23;
    while (sl_transport_dropped(t, SL_DROP_OLD_ROUND) < 20000) { /* the stream flows */
        if (sl_transport_recv_any(t, &never, 1, 0, &f, NULL) != SL_ERR_TIMEOUT)
            return 24;
        if (!test_wait_more(dl))
            return 25;
    }
    for (uint32_t i = 0; i < STREAM_KEYS; i++) {
        keys[i] = never;
        keys[i].seq = UINT32_MAX - i;
    }
    result[1] = sl_transport_dropped(t, SL_DROP_OLD_ROUND);
    t0 = sl_clock_now();
    st = sl_transport_recv_any(t, keys, STREAM_KEYS, STREAM_WAIT_MS, &f, NULL);
    waited = sl_clock_now() - t0;
    result[0] = (uint64_t)(waited * 1000.0);
    result[1] = sl_transport_dropped(t, SL_DROP_OLD_ROUND) - result[1];
    if (st != SL_ERR_TIMEOUT)
        return 26;
    if (waited < STREAM_WAIT_MS / 1000.0)
        return 27; /* no wait may end before its time */
    if (waited > TEST_LATE_S)
        return 28; /* the stream held it */
    for (uint32_t p = 0; p < 3; p += 2) {
        sl_wire_key_t k = {0, STREAM_COMPONENT + 1, 0, p, SL_WIRE_DATA};
        if (sl_transport_send(t, &k, NULL, 0, SL_WIRE_BYTES, 1.0f, 0, -1) != SL_OK)
            return 29;
    }
    return drained(t, me) ? 0 : 31;
}

START_TEST(test_deadline_under_stream)
{
    test_cluster_t c;

    test_cluster_init(&c, 3, 1, RUN, node_stream, NULL);
    c.shm = 0;
    /* no heartbeats: while rank 1's queue from a streamer is full, ZeroMQ stops reading
     * that connection, PINGs included, and the streamer's heartbeat timeout would drop
     * the connection with the frames in flight on it */
    c.heartbeat_ms = 0;
    test_cluster_assert_ok(&c, "a wait under a stream of frames");
    ck_assert_uint_gt(c.res[1][1], 0); /* frames came during the wait */
}
END_TEST

/* ---- a peer killed with SIGKILL while allreduces run: the others fail in time */

#define KILL_TIMEOUT_MS 3000

/* The victim runs allreduces until the parent kills it, telling it of each one done;
 * the others run them until one fails, as it must once the victim is gone. */
static int
node_until_killed(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    enum { COUNT = 200000 };
    float *buf = malloc(COUNT * sizeof *buf);
    int victim = (int)sl_transport_rank(t) == c->kill_rank;

    for (uint64_t round = 0;; round++) {
        for (size_t i = 0; i < COUNT; i++)
            buf[i] = 1.0f;
        double t0 = sl_clock_now();
        sl_status_t st = sl_allreduce_sum(t, 0, round, buf, COUNT, NULL);
        double dt = sl_clock_now() - t0;
        if (victim) {
            if (st == SL_OK)
                test_cluster_signal(c);
            continue; /* until killed */
        }
        if (st == SL_OK)
            continue;
        /* the buffer may still be lent to a dead peer: leave it to destroy */
        if (st != SL_ERR_TIMEOUT)
            return 10;
        if (dt > KILL_TIMEOUT_MS / 1000.0 + TEST_LATE_S) {
            fprintf(stderr, "allreduce took %.2f s to fail\n", dt);
            return 11;
        }
        *result = round;
        return round > 0 ? 0 : 12; /* some rounds went through before the kill */
    }
}

START_TEST(test_killed_peer)
{
    test_cluster_t c;
    for (int ipc = 0; ipc < 2; ipc++) {
        test_cluster_init(&c, 3, ipc, RUN, node_until_killed, NULL);
        c.timeout_ms = KILL_TIMEOUT_MS;
        c.kill_rank = 2;
        c.kill_after = 3; /* allreduces the victim finished */
        c.final_barrier = 0;
        test_cluster_run(&c);
        ck_assert_msg(
            c.status[2] >= 0 && WIFSIGNALED(c.status[2]) && WTERMSIG(c.status[2]) == SIGKILL,
            "%s: the victim was not killed (status %d)", ipc ? "ipc" : "tcp", c.status[2]);
        for (int i = 0; i < 2; i++)
            ck_assert_msg(c.status[i] >= 0 && WIFEXITED(c.status[i]) &&
                              WEXITSTATUS(c.status[i]) == 0,
                          "%s: rank %d: status %d", ipc ? "ipc" : "tcp", i, c.status[i]);
    }
}
END_TEST

/* ---- a peer that aborts: the others stop at once with SL_ERR_SHUTDOWN */

#define ABORT_TIMEOUT_MS 60000 /* without the abort the others would wait this long */

static int
node_abort(sl_transport_t *t, test_cluster_t *c, uint64_t *result)
{
    float buf[100] = {0};
    size_t got;
    sl_wire_key_t done = {0, 7, 0, 2, SL_WIRE_DATA}; /* "your abort came" */

    if (sl_transport_rank(t) == 2) {
        if (sl_transport_abort(t, "disk full\n", TEST_WAIT_MS) != SL_OK)
            return 10;
        /* stay until both have it: a frame still queued at exit could be lost */
        for (done.peer = 0; done.peer < 2; done.peer++)
            if (sl_transport_recv(t, &done, buf, sizeof buf, &got, TEST_WAIT_MS) != SL_OK)
                return 14;
        return 0;
    }
    double t0 = sl_clock_now();
    if (sl_allreduce_sum(t, 0, 0, buf, 100, NULL) != SL_ERR_SHUTDOWN)
        return 11;
    if (sl_clock_now() - t0 > ABORT_TIMEOUT_MS / 2000.0 ||
        !strstr(sl_err_msg(), "rank 2 aborted: disk full?"))
        return 12;
    /* and it stays that way */
    if (sl_barrier(t, 1, 100) != SL_ERR_SHUTDOWN)
        return 13;
    if (sl_transport_send(t, &done, NULL, 0, SL_WIRE_FP32, 1.0f, 0, -1) != SL_OK)
        return 15;
    (void)c;
    *result = 1;
    return 0;
}

START_TEST(test_abort)
{
    test_cluster_t c;
    test_cluster_init(&c, 3, 0, RUN, node_abort, NULL);
    c.timeout_ms = ABORT_TIMEOUT_MS;
    c.final_barrier = 0;
    test_cluster_assert_ok(&c, "abort");
}
END_TEST

static Suite *
transport_cluster_suite(void)
{
    Suite *s = suite_create("transport_cluster");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 300); /* a hang guard: each cluster has its own */
    tcase_add_test(core, test_allreduce);
    tcase_add_test(core, test_allreduce_halving);
    tcase_add_test(core, test_allgather);
    tcase_add_test(core, test_allgather_doubles_when);
    tcase_add_test(core, test_broadcast);
    tcase_add_test(core, test_barrier);
    tcase_add_test(core, test_gossip);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 300);
    tcase_add_test(limits, test_bad_frames_dropped);
    tcase_add_test(limits, test_deadline_under_stream);
    tcase_add_test(limits, test_killed_peer);
    tcase_add_test(limits, test_abort);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(transport_cluster_suite());
}
