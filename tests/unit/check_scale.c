/* tests/unit/check_scale.c: the scaling model of shoal-scale (tools/sl_scale.c) against
 * hand-computed wall times and bytes (ring and halving allreduce, BMUF periods, gossip, local,
 * overlap, the row exchange), the component sizes it takes from the model, and the
 * shoal-scale command line. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "config/sl_config.h"
#include "tests/unit/test_tool.h"
#include "tools/sl_scale.h"
#include "topology/sl_schedule.h"
#include "transport/sl_collective.h"

#define EPS 1e-9

/* One dense component of count floats syncing every period steps; 1 Gbit/s, 10 ms,
 * 100 ms a step, fp32. */
static sl_scale_component_t dense_comp;

static sl_scale_params_t
params(sl_sync_algorithm_t algorithm, int nodes, size_t count, int period, long steps)
{
    sl_scale_params_t p = {
        .nodes = nodes,
        .degree = 0,
        .neighbours = 1,
        .algorithm = algorithm,
        .exchange = SL_EXCHANGE_DENSE,
        .value_bytes = 4,
        .zipf_exponent = 0.64,
        .step_ms = 100,
        .bits_per_s = 1e9,
        .latency_ms = 10,
        .overlap = 0,
        .steps = steps,
        .seed = 1234,
        .ncomps = 1,
        .comps = &dense_comp,
    };

    memset(&dense_comp, 0, sizeof dense_comp);
    strcpy(dense_comp.name, "lstm.0");
    dense_comp.count = count;
    dense_comp.period = period;
    return p;
}

/* embedding.0: a row shard of rows x row_len, synced every step, unique_rows of it
 * touched by a node between syncs. */
static sl_scale_component_t
row_shard(long rows, int row_len, double unique_rows)
{
    sl_scale_component_t c;

    memset(&c, 0, sizeof c);
    strcpy(c.name, "embedding.0");
    c.sparse = 1;
    c.rows = rows;
    c.row_len = row_len;
    c.count = (size_t)rows * (size_t)row_len;
    c.period = 1;
    c.unique_rows = unique_rows;
    return c;
}

static sl_scale_result_t
run(const sl_scale_params_t *p)
{
    sl_scale_result_t r;

    ck_assert_msg(sl_scale_run(p, &r) == SL_OK, "%s", sl_err_msg());
    return r;
}

/* ------------------------------------------------------------------------ core */

/* Gradient allreduce, unchunked ring: every step T + 2(n-1)(S/n * 8/bw + latency),
 * and each node sends 2(n-1)/n S bytes a step. S = 4e6 bytes. */
START_TEST(test_allreduce_ring)
{
    sl_scale_params_t p = params(SL_SYNC_ALLREDUCE, 2, 1000000, 1, 10);
    sl_scale_result_t r = run(&p);

    /* n = 2: 2 x (2e6 B x 8 / 1e9 = 16 ms + 10 ms) */
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 2 * (16 + 10)), EPS);
    ck_assert_double_eq_tol(r.wait_ms_per_step, 52, EPS);
    ck_assert_double_eq_tol(r.utilization, 100.0 / 152, EPS);
    ck_assert_double_eq_tol(r.speedup, 2 * 100.0 / 152, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 4e6, 1e-3);
    /* n = 4 around the ring: 6 x (1e6 B: 8 ms + 10 ms) */
    p = params(SL_SYNC_ALLREDUCE, 4, 1000000, 1, 10);
    p.allreduce_ring = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 6 * 18), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 6e6, 1e-3);
    /* by default halving and doubling: 2e6 B (16 ms + 10) to rank ^ 1, 1e6 B (8 + 10)
     * to rank ^ 2, then back: the same bytes */
    p.allreduce_ring = 0;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 26 + 18 + 18 + 26), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 6e6, 1e-3);
    /* n = 8: 2e6, 1e6, 5e5 B (4 + 10) and back, against the ring's 14 x (5e5 B) */
    p = params(SL_SYNC_ALLREDUCE, 8, 1000000, 1, 10);
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 2 * (26 + 18 + 14)), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 7e6, 1e-3);
    p.allreduce_ring = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 14 * 14), EPS);
    /* n = 6 = 2 x 3: 2e6 B to rank ^ 1, then 4 steps of S/6 = 666,667 B (5.333 ms + 10)
     * round the rings of 3 (ranks 2 apart), then 2e6 B back; the ring's bytes, against
     * its 10 steps */
    p = params(SL_SYNC_ALLREDUCE, 6, 1000000, 1, 10);
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 26 + 4 * (16.0 / 3 + 10) + 26), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 4e6 * 10 / 6, 1e-3);
    p.allreduce_ring = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 10 * (16.0 / 3 + 10)), EPS);
    /* n = 12 = 4 x 3: 2e6 and 1e6 B, 4 steps of 333,333 B (2.667 ms + 10), 1e6 and 2e6 */
    p = params(SL_SYNC_ALLREDUCE, 12, 1000000, 1, 10);
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 26 + 18 + 4 * (8.0 / 3 + 10) + 18 + 26), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 4e6 * 22 / 12, 1e-3);
    /* one node: nothing to exchange */
    p = params(SL_SYNC_ALLREDUCE, 1, 1000000, 1, 10);
    r = run(&p);
    ck_assert_double_eq_tol(r.utilization, 1.0, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 0, EPS);
}
END_TEST

/* The transport streams a ring step in frames: node i forwards frame c as soon as it
 * has it, so the link's time and the latencies overlap. n = 2, S = 4e6 B in frames of
 * 1e6 B (8 ms): step 0's frames arrive at T+18, T+26; step 1's leave at T+26 (the
 * frame that came at T+18, sent after the link's last frame left at T+16 ... 18) and
 * T+34 and arrive at T+36, T+44. Every frame carries a header. */
START_TEST(test_ring_frames)
{
    sl_scale_params_t p = params(SL_SYNC_ALLREDUCE, 2, 1000000, 1, 1);
    sl_scale_result_t r;

    p.chunk_values = 250000;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 100 + 44, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 4e6, 1e-3);
    /* a header of 1000 B makes a frame 8.008 ms: arrivals T+18.008, T+26.016, then
     * T+36.016 and T+44.024 (the second frame of step 1 waits for the link) */
    p.header_bytes = 1000;
    r = run(&p);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 4e6 + 4 * 1000, 1e-3);
    ck_assert_double_eq_tol(r.wall_ms, 100 + 44.024, 1e-9);
}
END_TEST

/* The frames shoal's allreduce sends by default (sl_allreduce_chunk), in the model too:
 * the same n = 2, S = 4e6 B, whose segments of 500,000 values go in frames of 65,536
 * (62,500 is below the floor): seven of 262,144 B (2.097152 ms) and one of 164,992 B
 * (1.319936 ms). Step 0 keeps the link busy from T to T+16; step 1's frames each come
 * in before the link is free, so it sends from T+16 to T+32 back to back, the last
 * arriving at T+42. */
START_TEST(test_ring_frames_as_shoal)
{
    sl_scale_params_t p = params(SL_SYNC_ALLREDUCE, 2, 1000000, 1, 1);
    sl_scale_result_t r;

    ck_assert_uint_eq(sl_allreduce_chunk(1000000, 2), 65536);
    ck_assert_uint_eq(sl_allreduce_chunk(2000000, 2), 125000);
    ck_assert_uint_eq(sl_allreduce_chunk(1048576, 8), SL_COLLECTIVE_CHUNK_ELEMS);
    ck_assert_uint_eq(sl_allreduce_chunk(1048576, 4), 65536);
    ck_assert_uint_eq(sl_allreduce_chunk(64u << 20, 2), SL_COLLECTIVE_CHUNK_ELEMS);
    p.chunk_values = 250000; /* the allgathers' only: none here */
    p.allreduce_chunk_auto = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 100 + 42, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 4e6, 1e-3);
}
END_TEST

/* BMUF with H = 4: one allreduce (108 ms on 4 nodes around the ring) every 4 steps. */
START_TEST(test_bmuf_period)
{
    sl_scale_params_t p = params(SL_SYNC_BMUF, 4, 1000000, 4, 8);
    sl_scale_result_t r;

    p.allreduce_ring = 1;
    r = run(&p);

    ck_assert_double_eq_tol(r.wall_ms, 8 * 100 + 2 * 108, EPS);
    ck_assert_double_eq_tol(r.wait_ms_per_step, 2 * 108 / 8.0, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 6e6 / 4, 1e-3);
    /* 7 steps: the sync at step 4 only */
    p.steps = 7;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 7 * 100 + 108, EPS);
}
END_TEST

/* Gossip, q = 1, no bandwidth limit: every node waits one latency per sync, and sends
 * q snapshots a round on average (every pull is one push). */
START_TEST(test_gossip_latency_bound)
{
    sl_scale_params_t p = params(SL_SYNC_GOSSIP_BMUF, 8, 1000000, 2, 16);
    sl_scale_result_t r;

    p.bits_per_s = 0;
    p.latency_ms = 5;
    r = run(&p);
    ck_assert_int_eq(r.picks, 1);
    ck_assert_int_eq(r.degree, 2); /* the paper's p = log2(8) - 1 */
    ck_assert_double_eq_tol(r.wall_ms, 16 * 100 + 8 * 5, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 1 * 4e6 / 2, 1e-3);
    /* q = 2 sends twice the bytes and still waits one latency (pushes go in parallel) */
    p.neighbours = 2;
    r = run(&p);
    ck_assert_int_eq(r.picks, 2);
    ck_assert_double_eq_tol(r.wall_ms, 16 * 100 + 8 * 5, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 2 * 4e6 / 2, 1e-3);
}
END_TEST

/* A shared uplink serialises a node's pushes: local-ma on 5 nodes sends two 32 ms
 * frames one after the other, the second arriving at 64 + 10 ms. */
START_TEST(test_shared_uplink)
{
    sl_scale_params_t p = params(SL_SYNC_LOCAL_MA, 5, 1000000, 4, 8);
    sl_scale_result_t r;

    p.shared_uplink = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 8 * 100 + 2 * (64 + 10), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 2 * 4e6 / 4, 1e-3);
    /* a ring uses one link per node anyway */
    p = params(SL_SYNC_ALLREDUCE, 4, 1000000, 1, 10);
    p.shared_uplink = 1;
    p.allreduce_ring = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + 6 * 18), EPS);
}
END_TEST

/* Who pushes to whom comes from the schedule: with one uplink per node, the node the
 * most nodes chose in round 1 (in-degree in_max) sends its snapshot in_max times, one
 * frame (32 ms) after the other, and the node waiting for the last of them finishes
 * at T + in_max x 32 + 10. */
START_TEST(test_gossip_follows_schedule)
{
    sl_scale_params_t p = params(SL_SYNC_GOSSIP_MA, 8, 1000000, 1, 1);
    sl_schedule_t sched;
    sl_schedule_stats_t st;
    sl_scale_result_t r;

    p.shared_uplink = 1;
    ck_assert(sl_schedule_init(&sched, 8, 2, 1, p.seed) == SL_OK);
    ck_assert(sl_schedule_stats(&sched, 0, 1, 1, &st) == SL_OK);
    ck_assert_int_ge(st.in_max, 2); /* else this case would not tell */
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 100 + st.in_max * 32 + 10, EPS);
}
END_TEST

/* local-*: every neighbour (2k = 2 on 5 nodes), one frame time plus latency per sync,
 * whatever the schedule says about q. */
START_TEST(test_local_every_neighbour)
{
    sl_scale_params_t p = params(SL_SYNC_LOCAL_MA, 5, 1000000, 4, 8);
    sl_scale_result_t r = run(&p);

    ck_assert_int_eq(r.picks, 2);
    ck_assert_double_eq_tol(r.wall_ms, 8 * 100 + 2 * (32 + 10), EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 2 * 4e6 / 4, 1e-3);
}
END_TEST

/* Overlap: the 108 ms exchange (the ring's) begun after step 4 is waited for after step
 * 4 + tau. tau = 2 hides it (step 6 ends at 600 > 508), tau = 1 does not (step 5 waits to
 * 508). */
START_TEST(test_overlap)
{
    sl_scale_params_t p = params(SL_SYNC_BMUF, 4, 1000000, 4, 6);
    sl_scale_result_t r;

    p.allreduce_ring = 1;
    p.overlap = 2;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 600, EPS);
    ck_assert_double_eq_tol(r.utilization, 1.0, EPS);
    ck_assert_double_eq_tol(r.wait_ms_per_step, 0, EPS);
    p.overlap = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 508 + 100, EPS);
    /* the last exchange is waited for at the end */
    p.overlap = 2;
    p.steps = 8;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 800 + 108, EPS);
}
END_TEST

/* Two components due at the same step go one after the other where their periods
 * differ; with one period, in one allreduce (ma, bmuf), side by side or not. */
START_TEST(test_components_in_sequence)
{
    sl_scale_component_t c[3];
    sl_scale_params_t p = params(SL_SYNC_MA, 2, 1000000, 2, 2);
    sl_scale_result_t r;

    c[0] = dense_comp;
    c[1] = dense_comp;
    c[1].count = 500000; /* 1e6 B a chunk: 8 ms + 10 */
    p.comps = c;
    p.ncomps = 2;
    /* one allreduce of 6e6 B: 2 x (3e6 B: 24 ms + 10) */
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 200 + 2 * 34, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, (4e6 + 2e6) / 2, 1e-3);
    /* c[1] every step: alone after step 1, after c[0] at step 2 */
    c[1].period = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 200 + 2 * 18 + 2 * 26 + 2 * 18, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, (4e6 + 2 * 2e6) / 2, 1e-3);
    /* c[2] of c[0]'s period after c[1]: with c[0] (6e6 B), then c[1] */
    c[2] = c[1];
    c[2].period = 2;
    p.ncomps = 3;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 200 + 2 * 18 + 2 * 34 + 2 * 18, EPS);
    ck_assert_double_eq_tol(r.bytes_per_node_step, (6e6 + 2 * 2e6) / 2, 1e-3);
}
END_TEST

/* Allreduce mode by rows: one call a step, wherever the shard lies. lstm.0 and lstm.1
 * (500,000 floats each) and a shard of 4 rows of 1 float, all touched, on 4 nodes at
 * 1 Gbit/s (125,000 B a ms) and 10 ms: the counts gathered by doubling (4 B, then 8 B),
 * the rows (16 B, then 32 B), then one allreduce of the union's 16 B and the 4e6 B of
 * the LSTM by halving and doubling (halves of 2,000,008 B, quarters of 1,000,004 B). */
START_TEST(test_allreduce_by_rows_one_call)
{
    sl_scale_component_t c[3], shard = row_shard(4, 1, 4);
    sl_scale_params_t p = params(SL_SYNC_ALLREDUCE, 4, 500000, 1, 10);
    sl_scale_result_t r;
    double step = 0;

    c[0] = c[2] = dense_comp;
    strcpy(c[2].name, "lstm.1");
    c[1] = shard;
    p.exchange = SL_EXCHANGE_UNIQUE;
    p.comps = c;
    p.ncomps = 3;
    r = run(&p);
    for (int i = 0; i < 2; i++) /* counts, rows: each two steps of doubling */
        step += 2 * 10 + (3 << (2 * i + 2)) / 125000.0;
    step += 2 * (2 * 10 + 2000008 / 125000.0 + 1000004 / 125000.0);
    ck_assert_double_eq_tol(r.wall_ms, 10 * (100 + step), 1e-6);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 12 + 48 + 2 * (2000008 + 1000004), 1e-6);
    /* the shard first: the same */
    c[0] = shard;
    c[1] = dense_comp;
    ck_assert_double_eq_tol(run(&p).wall_ms, r.wall_ms, 1e-9);
}
END_TEST

/* Rows: ma/bmuf allgather the row sets (4 B a row; by doubling, log2 n steps, or round
 * the ring, n - 1) and allreduce the union R n^b; gossip sends its set to the chosen
 * node and gets the union of two sets back with ids. 2 shards of 1000 rows x 10,
 * R = 100, b = 0.5, fp16. */
START_TEST(test_unique_rows)
{
    sl_scale_component_t c = row_shard(1000, 10, 100);
    sl_scale_params_t p = params(SL_SYNC_BMUF, 4, 1, 1, 1);
    sl_scale_result_t r;
    double ug = 100 * 2.0; /* 100 x 4^0.5 */

    p.comps = &c;
    p.exchange = SL_EXCHANGE_UNIQUE;
    p.value_bytes = 2;
    p.zipf_exponent = 0.5;
    p.bits_per_s = 8e6; /* 1 byte = 1 us */
    p.latency_ms = 1;
    r = run(&p);
    /* allgathers by doubling: sizes 4 B (0.004 ms + 1) to rank ^ 2, then 2 x 4 B (0.008 +
     * 1) to rank ^ 1; sets 400 B (0.4 + 1), then 2 x 400 B (0.8 + 1); allreduce (fp16:
     * round the ring): 6 x (ug x 20 B / 4 = 1 ms + 1) */
    ck_assert_double_eq_tol(r.wall_ms,
                            100 + 1.004 + 1.008 + 1.4 + 1.8 + 6 * (ug * 20 / 4 / 1000 + 1), 1e-9);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 3 * 4 + 3 * 400 + 6 * ug * 20 / 4, 1e-6);
    /* round the ring, asked for: sizes 3 x (4 B + 1), sets 3 x (400 B + 1), the same bytes */
    p.allreduce_ring = 1;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 100 + 3 * 1.004 + 3 * 1.4 + 6 * (ug * 20 / 4 / 1000 + 1),
                            1e-9);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 3 * 4 + 3 * 400 + 6 * ug * 20 / 4, 1e-6);
    p.allreduce_ring = 0;
    /* gossip, 2 nodes: request 400 B; reply: the ids of the other's rows the requester
     * lacks, u2 - 100 of them, then the values of u2 = 100 x 2^0.5 rows (20 B each) */
    p.algorithm = SL_SYNC_GOSSIP_MA;
    p.nodes = 2;
    r = run(&p);
    double u2 = 100 * sqrt(2.0), reply = (u2 - 100) * 4 + u2 * 20;
    ck_assert_double_eq_tol(r.wall_ms, 100 + 0.4 + 1 + reply / 1000 + 1, 1e-9);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 400 + reply, 1e-6);
    /* dense rows: the whole shard */
    p.exchange = SL_EXCHANGE_DENSE;
    r = run(&p);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 10000 * 2, 1e-6);
    /* allreduce mode's allgather baseline, fp32, 4 nodes: sizes and sets as above, then
     * the rows' values by doubling, 4,000 B (4 ms + 1), then 2 x 4,000 B (8 + 1) */
    p.algorithm = SL_SYNC_ALLREDUCE;
    p.nodes = 4;
    p.exchange = SL_EXCHANGE_ALLGATHER;
    p.value_bytes = 4;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 100 + 1.004 + 1.008 + 1.4 + 1.8 + 5 + 9, 1e-9);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 3 * 4 + 3 * 400 + 3 * 4000, 1e-6);
    /* 6 nodes: each allgather 2 steps of a block round the rings of 3 (ranks 2 apart),
     * then 3 blocks to rank ^ 1: sizes 2 x (0.004 + 1) + 0.012 + 1, sets 2 x (0.4 + 1) +
     * 1.2 + 1, values 2 x (4 + 1) + 12 + 1; the ring's bytes, 5 blocks each */
    p.nodes = 6;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 100 + 2 * 1.004 + 1.012 + 2 * 1.4 + 2.2 + 2 * 5 + 13, 1e-9);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 5 * 4 + 5 * 400 + 5 * 4000, 1e-6);
}
END_TEST

/* ma, bmuf by rows: the row shards of one period in one exchange. Two shards as
 * test_unique_rows's (R = 100 of 1000 rows x 10, b = 0.5, fp16, 1 byte = 1 us, 1 ms),
 * BMUF on 4 nodes: the sizes, 2 x 4 B (0.008 ms + 1) to rank ^ 2, then 4 x 4 B; the sets,
 * 800 B (0.8 + 1), then 1600 B; then one allreduce of both unions round the ring
 * (fp16), 6 x (2 ug x 20 B / 4 + 1). With overlap each goes alone, one after the
 * other, after the last step. */
START_TEST(test_row_shards_together)
{
    sl_scale_component_t c[2] = {row_shard(1000, 10, 100), row_shard(1000, 10, 100)};
    sl_scale_params_t p = params(SL_SYNC_BMUF, 4, 1, 1, 1);
    sl_scale_result_t r;
    double ug = 100 * 2.0, alone;

    strcpy(c[1].name, "softmax.0");
    p.comps = c;
    p.ncomps = 2;
    p.exchange = SL_EXCHANGE_UNIQUE;
    p.value_bytes = 2;
    p.zipf_exponent = 0.5;
    p.bits_per_s = 8e6;
    p.latency_ms = 1;
    r = run(&p);
    ck_assert_double_eq_tol(
        r.wall_ms, 100 + 1.008 + 1.016 + 1.8 + 2.6 + 6 * (2 * ug * 20 / 4 / 1000 + 1), 1e-9);
    ck_assert_double_eq_tol(r.bytes_per_node_step, 3 * 8 + 3 * 800 + 6 * 2 * ug * 20 / 4, 1e-6);
    p.ncomps = 1;
    alone = run(&p).wall_ms - 100;
    p.ncomps = 2;
    p.overlap = 1;
    p.steps = 2;
    c[0].period = c[1].period = 2;
    r = run(&p);
    ck_assert_double_eq_tol(r.wall_ms, 200 + 2 * alone, 1e-9);
}
END_TEST

/* Components and periods from the config through the model's layout. */
START_TEST(test_components_from_config)
{
    static const char yaml[] = "data: {train: t.txt}\n"
                               "model: {embedding: 16, layers: [{lstm: 8}]}\n"
                               "sync: {algorithm: gossip-bmuf, period: 16, embedding_period: "
                               "128, embedding_shards: 2,\n"
                               "       periods: [{match: \"lstm.*\", period: 4}]}\n";
    sl_config_t cfg;
    sl_scale_component_t *c;
    int n;

    sl_config_init(&cfg);
    ck_assert_msg(sl_config_load_string(&cfg, yaml, "t.yaml") == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_scale_components(&cfg, 100, 20, &c, &n) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(n, 6);
    ck_assert_str_eq(c[0].name, "embedding.0");
    ck_assert_uint_eq(c[0].count, 50 * 16);
    ck_assert_int_eq(c[0].period, 128);
    ck_assert_double_eq_tol(c[0].unique_rows, 10, EPS);
    ck_assert_str_eq(c[2].name, "lstm.0");
    ck_assert_uint_eq(c[2].count, 4 * 8 * (16 + 8) + 4 * 8);
    ck_assert_int_eq(c[2].period, 4);
    ck_assert_str_eq(c[3].name, "softmax.0");
    ck_assert_int_eq(c[3].period, 128);
    ck_assert_double_eq_tol(c[3].unique_rows, 50, EPS); /* full softmax: every row */
    ck_assert_str_eq(c[5].name, "softmax_bias");
    ck_assert_int_eq(c[5].period, 16);
    sl_free(c);
    ck_assert(sl_config_set(&cfg, "sync.algorithm=allreduce") == SL_OK);
    ck_assert(sl_scale_components(&cfg, 100, 20, &c, &n) == SL_OK);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(c[i].period, 1);
    sl_free(c);
    /* a model the layout refuses */
    ck_assert(sl_scale_components(&cfg, 1, 20, &c, &n) == SL_ERR_INVALID);
    ck_assert_ptr_null(c);
    sl_config_fini(&cfg);
}
END_TEST

/* ---------------------------------------------------------------------- limits */

START_TEST(test_bad_params)
{
    sl_scale_params_t p = params(SL_SYNC_BMUF, 4, 1000, 4, 8);
    sl_scale_result_t r;
    sl_scale_params_t bad[8];

    for (int i = 0; i < 8; i++)
        bad[i] = p;
    bad[0].nodes = 0;
    bad[1].nodes = 5000;
    bad[2].step_ms = 0;
    bad[3].bits_per_s = -1;
    bad[4].steps = 0;
    bad[5].value_bytes = 3;
    bad[6].algorithm = SL_SYNC_ALLREDUCE;
    bad[6].overlap = 1;
    bad[7].zipf_exponent = 0;
    for (int i = 0; i < 8; i++)
        ck_assert_msg(sl_scale_run(&bad[i], &r) == SL_ERR_INVALID, "case %d", i);
    ck_assert_ptr_nonnull(strstr(sl_err_msg(), "Zipf"));
}
END_TEST

static char scale_bin[4096];

static void
conf_path(char *buf, size_t cap, const char *name)
{
    const char *src = getenv("SHOAL_SRCDIR");

    snprintf(buf, cap, "%s/conf/%s", src ? src : "..", name);
}

START_TEST(test_cli)
{
    char out[16384], err[4096], conf[4096];

    if (!test_tool_find("shoal-scale", scale_bin, sizeof scale_bin))
        return;
    conf_path(conf, sizeof conf, "brown-4nodes-bmuf.yaml");
    ck_assert_int_eq(test_tool_run(scale_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--help", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(out, "Usage: shoal-scale"));
    ck_assert_int_eq(test_tool_run(scale_bin, out, sizeof out, err, sizeof err, NULL,
                                   (const char *const[]){"--config", conf, "--step-ms", "100",
                                                         "--nodes", "1,4", "--bandwidth", "0",
                                                         "--latency-ms", "0", "--json", NULL}),
                     0);
    /* no cost on the wire: every node computes all the time */
    ck_assert_double_eq_tol(test_json_num(out, "speedup"), 1.0, EPS);
    ck_assert_double_eq_tol(test_json_num(strstr(out, "\"nodes\": 4"), "speedup"), 4.0, EPS);
    ck_assert_int_eq(
        test_tool_run(scale_bin, out, sizeof out, err, sizeof err, NULL,
                      (const char *const[]){"--config", conf, "--tokens-per-s", "10000",
                                            "--bandwidth", "1gbit", "--latency-ms", "10", NULL}),
        0);
    ck_assert_ptr_nonnull(strstr(out, "  1024 "));
    ck_assert_ptr_nonnull(strstr(out, "bmuf"));
}
END_TEST

START_TEST(test_cli_errors)
{
    char out[16384], err[4096], conf[4096];
    static const char *const expect[] = {
        "missing --config",
        "exactly one of --step-ms",
        "exactly one of --step-ms",
        "'fast' is not a rate",
        "--nodes: 0 is out of range",
        "--nodes: '4,,8' is not",
        "unknown option '--frobnicate'",
        "overlap needs a periodic sync",
        "nope.yaml",
    };

    if (!test_tool_find("shoal-scale", scale_bin, sizeof scale_bin))
        return;
    conf_path(conf, sizeof conf, "brown-4nodes-allreduce.yaml");
    const char *const *bad[] = {
        (const char *const[]){"--step-ms", "1", NULL},
        (const char *const[]){"--config", conf, NULL},
        (const char *const[]){"--config", conf, "--step-ms", "1", "--tokens-per-s", "5", NULL},
        (const char *const[]){"--config", conf, "--step-ms", "1", "--bandwidth", "fast", NULL},
        (const char *const[]){"--config", conf, "--step-ms", "1", "--nodes", "0", NULL},
        (const char *const[]){"--config", conf, "--step-ms", "1", "--nodes", "4,,8", NULL},
        (const char *const[]){"--config", conf, "--step-ms", "1", "--frobnicate", NULL},
        (const char *const[]){"--config", conf, "--step-ms", "1", "--overlap", "2", NULL},
        (const char *const[]){"--config", "nope.yaml", "--step-ms", "1", NULL},
    };
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        ck_assert_int_eq(test_tool_run(scale_bin, out, sizeof out, err, sizeof err, NULL, bad[b]),
                         2);
        ck_assert_msg(strstr(err, expect[b]) && strncmp(err, "shoal-scale: ", 13) == 0 &&
                          strchr(err, '\n') == err + strlen(err) - 1,
                      "case %zu: %s", b, err);
    }
}
END_TEST

static Suite *
scale_suite(void)
{
    Suite *s = suite_create("scale");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_allreduce_ring);
    tcase_add_test(core, test_ring_frames);
    tcase_add_test(core, test_ring_frames_as_shoal);
    tcase_add_test(core, test_bmuf_period);
    tcase_add_test(core, test_gossip_latency_bound);
    tcase_add_test(core, test_gossip_follows_schedule);
    tcase_add_test(core, test_local_every_neighbour);
    tcase_add_test(core, test_shared_uplink);
    tcase_add_test(core, test_overlap);
    tcase_add_test(core, test_components_in_sequence);
    tcase_add_test(core, test_allreduce_by_rows_one_call);
    tcase_add_test(core, test_unique_rows);
    tcase_add_test(core, test_row_shards_together);
    tcase_add_test(core, test_components_from_config);
    tcase_add_test(core, test_cli);
    tcase_set_timeout(core, 60);
    tcase_add_test(limits, test_bad_params);
    tcase_add_test(limits, test_cli_errors);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(scale_suite());
}
