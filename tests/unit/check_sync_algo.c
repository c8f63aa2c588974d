/* Tests of src/sync through the real sync object: n = 3 to 5 forked nodes, each with its
 * own sl_transport_t over ipc:// in a temporary directory and its own sl_sync_t over a
 * small flat buffer of three components (two dense ones and an embedding row shard that
 * goes whole, sync.exchange dense) with three periods H_i. Every node starts from
 * distinct known values, moves them by known local steps, calls sl_sync_after_step (or
 * sl_sync_gradients, sl_sync_final), and the parent compares every node's result with
 * values computed here in double from DESIGN.md's formulas (theta_bar over self and the
 * neighbourhood, then MA or the BMUF block update with eta, zeta, Nesterov and the block
 * reference). Only who is in a neighbourhood comes from the topology: the k-symmetric
 * ring (topology/sl_ring.h) for local-*, the gossip schedule (topology/sl_schedule.h)
 * for gossip-*; both are tested in check_topology. Covered: every model-averaging
 * algorithm on 4 and 5 nodes, several blocks in a row (BMUF state carries), q = 1 and
 * q > 1 on a degree-2 ring, the final model, a node that leaves after the rendezvous
 * (the others average without it, a sync that gets no copy at all changes nothing, and
 * the final model is the mean of the survivors), a
 * node that skips one round and comes back, one that pushes a snapshot with a NaN or of
 * the wrong size instead (refused, left out), and the allreduce of gradients (a mean, not
 * a sum, whole or by touched rows).
 * The nodes are a forked cluster of test_util.h; they pass its barrier (relayed by the
 * parent, without the node that left) before every step, so a timeout only ever decides
 * about the node that left; nothing here sleeps. Must not touch: the trio (in-process)
 * tests and the `shoal run` integration tests (check_sync.c). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config/sl_config.h"
#include "sync/sl_grad_allreduce.h"
#include "sync/sl_sync.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "transport/sl_gossip.h"
#include "transport/sl_transport.h"
#include "test_tool.h"
#include "test_util.h"

enum { MAXN = 5, NP = 11, NCOMP = 3, MAXSTEPS = 6, SEED = 4321 };

/* The layout: lstm.0 syncs every step (sync.period 1), the row shard every 2 steps
 * (sync.embedding_period), lstm.1 every 3 (a sync.periods rule). */
static const sl_component_t comps[NCOMP] = {
    {"lstm.0", 0, 3, 0, 0, 0, 0},
    {"embedding.0", 3, 6, 1, 0, 3, 2},
    {"lstm.1", 9, 2, 0, 0, 0, 0},
};
static const int period[NCOMP] = {1, 2, 3};
/* For the allreduce of gradients: the row shard first, the dense components side by
 * side after it, one allreduce for both. */
static const sl_component_t side_comps[NCOMP] = {
    {"embedding.0", 0, 6, 1, 0, 3, 2},
    {"lstm.0", 6, 3, 0, 0, 0, 0},
    {"lstm.1", 9, 2, 0, 0, 0, 0},
};
static const char layout_conf[] =
    "sync={period: 1, embedding_period: 2, exchange: dense, periods: [{match: lstm.1, period: 3}]}";
/* The same with lstm.0 alone syncing in the first 6 steps. */
static const int period_one[NCOMP] = {1, 100, 100};
static const char one_conf[] = "sync={period: 1, embedding_period: 100, exchange: dense, "
                               "periods: [{match: lstm.1, period: 100}]}";

/* Node k's starting value of parameter i: multiples of 1/8 in [-4, 4), distinct. */
static double
start_value(int k, int i)
{
    return (double)((k * 37 + i * 11 + 5) % 64 - 32) / 8.0;
}

/* What node k's local steps add to parameter i before step t: a multiple of 1/4. */
static double
drift(int k, long t, int i)
{
    return (double)((k * 5 + t * 3 + i) % 7 - 3) / 4.0;
}

/* The one row of the shard embedding.0 (rows 0..2) node k touches at step t. */
static int32_t
touched_row(int k, long t)
{
    return (int32_t)((k + t) % 3);
}

/* Node k's gradient of parameter i at step t (allreduce) in layout cs: multiples of
 * 1/4, 0 on the rows of the shard it did not touch (as a real step leaves them), else
 * never 0. */
static double
grad_value(const sl_component_t *cs, int k, long t, int i)
{
    const sl_component_t *e = cs;

    while (!e->sparse) /* the layout's row shard */
        e++;
    if ((size_t)i >= e->offset && (size_t)i < e->offset + e->count &&
        ((size_t)i - e->offset) / (size_t)e->row_len != (size_t)touched_row(k, t))
        return 0;
    return (double)((k * 13 + t * 7 + i * 3) % 17 + 1) / 4.0;
}

/* ------------------------------------------------------------ the nodes */

typedef struct {
    const char *layout;    /* layout_conf or one_conf */
    const char *algo_conf; /* sync={algorithm: ..., ...} */
    const char *more_conf; /* another setting or NULL */
    int n;
    int steps;     /* sl_sync_after_step(1..steps), or sl_sync_gradients(0..steps-1) */
    int gradients; /* 1: sl_sync_gradients instead */
    int absent;    /* this rank leaves right after the rendezvous; -1: none */
    int final;     /* sl_sync_final after the steps */
    int timeout_ms;
    int skip, skip_step;         /* rank skip makes its local step but no sl_sync_after_step at
                                    step skip_step (0: nobody skips) */
    int poison;                  /* instead, rank skip pushes lstm.0 snapshots its pullers cannot
                                    use: POISON_NAN or POISON_SIZE (0: none) */
    int poison_q;                /* the q of the gossip schedule that says who its pullers are */
    const sl_component_t *comps; /* the layout: comps or side_comps (NULL: comps) */
} plan_t;

enum { POISON_NAN = 1, POISON_SIZE };

/* What a node hands the parent (its test_cluster_out blob). */
typedef struct {
    float p[MAXSTEPS][NP]; /* params after each step (gradients: the grads) */
    float avg[NP];
    int has_avg, writer, nmodels;
    long rounds[NCOMP];
    unsigned char dead[MAXN]; /* sl_sync_is_dead after the steps */
    uint64_t refused;         /* snapshots refused (the plan's poison) */
    /* allreduce and allgather frames sent as component c (NCOMP: the gradients') */
    uint64_t grad_frames[NCOMP + 1][2];
} node_out_t;

/* The check that failed in a node (its exit status). */
enum {
    FAIL_CONFIG = 1,
    FAIL_NEW,
    FAIL_BARRIER,
    FAIL_GRADIENTS,
    FAIL_STEP,
    FAIL_FINAL,
    FAIL_POISON
};

/* Rank k's bad lstm.0 snapshots of round step (lstm.0 syncs every step) to the nodes
 * that pull from it then: a NaN among 3 floats, or 2 floats where 3 are due. */
static int
push_poison(sl_transport_t *t, const plan_t *pl, int k, long step)
{
    sl_schedule_t sch;
    int pul[MAXN], np;
    uint32_t to[MAXN];
    float bad[3] = {1.0f, NAN, 1.0f};
    size_t got;

    if (sl_schedule_init(&sch, pl->n, 1, pl->poison_q, SEED) != SL_OK ||
        sl_schedule_pullers(&sch, (uint64_t)step, 0, k, pul, MAXN, &np) != SL_OK)
        return FAIL_POISON;
    for (int i = 0; i < np; i++)
        to[i] = (uint32_t)pul[i];
    if (sl_gossip_exchange(t, 0, (uint64_t)step, bad, pl->poison == POISON_NAN ? 3 : 2, to,
                           (size_t)np, NULL, 0, NULL, NULL, &got, 0) != SL_OK)
        return FAIL_POISON;
    return 0;
}

/* The steps of plan c->arg on node k: gradients (sl_sync_gradients) or local steps and
 * sl_sync_after_step, each after a barrier, into out. 0 or a FAIL_*. */
static int
node_steps(test_cluster_t *c, sl_transport_t *t, sl_sync_t *s, int k, float *p, node_out_t *out)
{
    const plan_t *pl = c->arg;
    const sl_component_t *cs = pl->comps ? pl->comps : comps;
    float g[NP];

    for (long step = 1; step <= pl->steps; step++) {
        if (test_cluster_barrier(c) != 0)
            return FAIL_BARRIER;
        if (pl->gradients) {
            int32_t row = touched_row(k, step);

            for (int i = 0; i < NP; i++)
                g[i] = (float)grad_value(cs, k, step, i);
            if (sl_sync_note_rows(s, 0, &row, 1) != SL_OK ||
                sl_sync_gradients(s, g, step - 1) != SL_OK)
                return FAIL_GRADIENTS;
            memcpy(out->p[step - 1], g, sizeof g);
            continue;
        }
        for (int i = 0; i < NP; i++)
            p[i] += (float)drift(k, step, i);
        if (k == pl->skip && step == pl->skip_step) {
            if (pl->poison && push_poison(t, pl, k, step) != 0)
                return FAIL_POISON;
        } else if (sl_sync_after_step(s, p, step) != SL_OK) {
            return FAIL_STEP;
        }
        memcpy(out->p[step - 1], p, NP * sizeof *p);
    }
    return 0;
}

/* A node of plan c->arg (test_node_fn): the absent node leaves at once; the others
 * make the steps, then sl_sync_final after a barrier, and pass a last barrier before
 * the harness destroys their transport (everybody is done with the exchanges). */
static int
node(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    const plan_t *pl = c->arg;
    node_out_t *out = test_cluster_out(c);
    int k = (int)sl_transport_rank(t), rc = 0;
    sl_config_t cfg;
    sl_sync_t *s = NULL;
    float p[NP];

    if (k == pl->absent) /* gone before the first step */
        return 0;
    sl_config_init(&cfg);
    if (sl_config_set(&cfg, pl->layout) != SL_OK || sl_config_set(&cfg, pl->algo_conf) != SL_OK ||
        (pl->more_conf && sl_config_set(&cfg, pl->more_conf) != SL_OK) ||
        sl_config_set(&cfg, "run.seed=4321") != SL_OK) {
        sl_config_fini(&cfg);
        return FAIL_CONFIG;
    }
    cfg.sync.timeout_ms = pl->timeout_ms;
    cfg.cluster.nodes = pl->n;
    for (int i = 0; i < NP; i++)
        p[i] = (float)start_value(k, i);
    if (sl_sync_new(&s, &cfg, t, k, pl->n, pl->comps ? pl->comps : comps, NCOMP, p, NP) != SL_OK)
        rc = FAIL_NEW;
    if (rc == 0)
        rc = node_steps(c, t, s, k, p, out);
    out->refused =
        sl_transport_dropped(t, pl->poison == POISON_SIZE ? SL_DROP_BAD_SIZE : SL_DROP_NONFINITE);
    for (int j = 0; j <= NCOMP && rc == 0; j++) {
        sl_transport_stat_t ts;

        if (j < NCOMP)
            out->rounds[j] = sl_sync_stat(s, j)->rounds;
        for (int g = 0; g < 2; g++) {
            sl_transport_stat(t, g ? SL_WIRE_ALLGATHER : SL_WIRE_ALLREDUCE, (uint32_t)j, &ts);
            out->grad_frames[j][g] = ts.sent_msgs;
        }
    }
    for (int j = 0; j < pl->n && rc == 0; j++)
        out->dead[j] = (unsigned char)sl_sync_is_dead(s, j);
    if (rc == 0 && pl->final) {
        const float *avg;

        if (test_cluster_barrier(c) != 0)
            rc = FAIL_BARRIER;
        else if (sl_sync_final(s, p, &avg, &out->writer, &out->nmodels) != SL_OK)
            rc = FAIL_FINAL;
        else if (avg) {
            out->has_avg = 1;
            memcpy(out->avg, avg, sizeof out->avg);
        }
    }
    sl_sync_destroy(&s);
    sl_config_fini(&cfg);
    if (rc == 0 && test_cluster_barrier(c) != 0)
        rc = FAIL_BARRIER;
    return rc;
}

/* Runs plan pl on pl->n forked nodes over ipc:// (test_util.h); every node's result
 * into out[k] (the absent node's is empty). Fails the test when a node failed, naming
 * it and its check (a FAIL_*). */
static void
run_nodes(const plan_t *pl, node_out_t *out)
{
    test_cluster_t c;

    ck_assert_int_le(pl->n, MAXN);
    ck_assert_int_le(pl->steps, MAXSTEPS);
    test_cluster_init(&c, pl->n, 1, 99, node, pl);
    c.timeout_ms = pl->timeout_ms;
    c.shm = 0;
    c.final_barrier = 0; /* node() ends on test_cluster_barrier, without the absent node */
    c.out = out;
    c.out_bytes = sizeof *out;
    test_cluster_assert_ok(&c, pl->algo_conf);
}

/* ------------------------------------------------------------ the values by hand */

typedef enum { ALL, RING, GOSSIP } hood_t;

typedef struct {
    hood_t hood;
    int bmuf;
    int degree, q; /* RING, GOSSIP: k of the ring; GOSSIP: q */
    double eta, zeta;
    int nesterov, ref_omega;
} algo_t;
/* eta 0.5, zeta 1, Nesterov, against the block start: every value a short binary
 * fraction */
#define PAPER 0.5, 1, 1, 0
#define NO_BMUF 0, 0, 0, 0
/* block_momentum auto, zeta 1, Nesterov, against the block start */
#define ETA_AUTO -1, 1, 1, 0

/* A plan of steps steps of a on n nodes over layout, then sl_sync_final; sync and topo
 * (nsync, ntopo bytes) receive its settings and must outlive it. */
static plan_t
model_plan(const algo_t *a, const char *layout, int n, int steps, int timeout_ms, char *sync,
           size_t nsync, char *topo, size_t ntopo)
{
    plan_t pl = {.layout = layout,
                 .n = n,
                 .steps = steps,
                 .absent = -1,
                 .final = 1,
                 .timeout_ms = timeout_ms,
                 .algo_conf = sync,
                 .more_conf = topo};
    static const char *const names[3][2] = {
        {"ma", "bmuf"}, {"local-ma", "local-bmuf"}, {"gossip-ma", "gossip-bmuf"}};
    int used = snprintf(sync, nsync, "sync={algorithm: %s, neighbours: %d", names[a->hood][a->bmuf],
                        a->q > 0 ? a->q : 1);

    char eta[32] = "auto";

    if (a->eta >= 0)
        snprintf(eta, sizeof eta, "%g", a->eta);
    if (a->bmuf)
        used += snprintf(sync + used, nsync - (size_t)used,
                         ", block_momentum: %s, block_lr: %g, nesterov: %s, block_reference: %s",
                         eta, a->zeta, a->nesterov ? "true" : "false",
                         a->ref_omega ? "omega" : "blockstart");
    ck_assert_int_lt(snprintf(sync + used, nsync - (size_t)used, "}"), (int)(nsync - (size_t)used));
    snprintf(topo, ntopo, "topology.degree=%d", a->degree);
    return pl;
}

/* The ranks node k averages component c with at round (self not included). */
static int
neighbourhood(const algo_t *a, int n, int k, int c, uint64_t round, int *out)
{
    int cnt = 0;

    if (a->hood == ALL) {
        for (int j = 0; j < n; j++)
            if (j != k)
                out[cnt++] = j;
    } else if (a->hood == RING) {
        ck_assert_int_eq(sl_ring_neighbours(n, a->degree, k, out, MAXN, &cnt), SL_OK);
    } else {
        sl_schedule_t sch;
        ck_assert_int_eq(sl_schedule_init(&sch, n, a->degree, a->q, SEED), SL_OK);
        ck_assert_int_eq(sl_schedule_chosen(&sch, round, c, k, out, MAXN, &cnt), SL_OK);
    }
    return cnt;
}

/* part[t][k]: whether node k takes part in the sync of step t + 1 (it is there and
 * does not skip it). */
static void
fill_part(const plan_t *pl, int part[][MAXN])
{
    for (int t = 1; t <= pl->steps; t++)
        for (int k = 0; k < MAXN; k++)
            part[t - 1][k] = k < pl->n && k != pl->absent && (k != pl->skip || t != pl->skip_step);
}

/* want[t][k][i]: node k's parameter i after step t + 1, as far as it took part:
 *   before step t every node adds drift(k, t, i);
 *   after it, component c with H_c = per[c] | t at round t / H_c, on every node that
 *   takes part (part[t - 1][k]) at once:
 *     bar = (theta_k + sum of theta_j over the neighbourhood's nodes that take part) /
 *           (1 + how many)
 *     none of a neighbourhood took part: no sync, everything stays (the next block
 *           gradient G spans both blocks; a survivor alone trains as one node)
 *     MA:   theta = bar
 *     BMUF: G = bar - (block start, or omega); Delta = eta Delta + zeta G;
 *           omega += Delta; theta = omega + eta Delta (Nesterov) or omega; start = theta
 * with omega = start = theta and Delta = 0 at the start. */
static void
by_hand(const algo_t *a, const int *per, int n, int steps, const int part[][MAXN],
        double want[][MAXN][NP])
{
    double th[MAXN][NP], om[MAXN][NP], de[MAXN][NP] = {{0}}, st[MAXN][NP];
    int some[MAXN];
    /* auto: 1 - 1/m for the m models of an average (node 0's first, as every one),
       rounded to float as the nodes hold it */
    double eta = a->eta >= 0
                     ? a->eta
                     : (double)(float)(1.0 - 1.0 / (neighbourhood(a, n, 0, 0, 1, some) + 1));

    for (int k = 0; k < n; k++)
        for (int i = 0; i < NP; i++)
            th[k][i] = om[k][i] = st[k][i] = start_value(k, i);
    for (int t = 1; t <= steps; t++) {
        for (int k = 0; k < n; k++)
            for (int i = 0; i < NP; i++)
                th[k][i] += drift(k, t, i);
        for (int c = 0; c < NCOMP; c++) {
            double before[MAXN][NP];

            if (t % per[c] != 0)
                continue;
            memcpy(before, th, sizeof th);
            for (int k = 0; k < n; k++) {
                int nb[MAXN], cnt, used = 0;

                if (!part[t - 1][k])
                    continue;
                cnt = neighbourhood(a, n, k, c, (uint64_t)(t / per[c]), nb);
                for (size_t i = comps[c].offset; i < comps[c].offset + comps[c].count; i++) {
                    double bar = before[k][i], g;
                    used = 0;
                    for (int j = 0; j < cnt; j++)
                        if (part[t - 1][nb[j]]) {
                            bar += before[nb[j]][i];
                            used++;
                        }
                    bar /= used + 1;
                    if (a->hood != ALL && used == 0)
                        continue; /* no copy came: no sync, the block goes on */
                    if (!a->bmuf) {
                        th[k][i] = bar;
                        continue;
                    }
                    g = bar - (a->ref_omega ? om[k][i] : st[k][i]);
                    de[k][i] = eta * de[k][i] + a->zeta * g;
                    om[k][i] += de[k][i];
                    th[k][i] = a->nesterov ? om[k][i] + eta * de[k][i] : om[k][i];
                    st[k][i] = th[k][i];
                }
            }
        }
        memcpy(want[t - 1], th, sizeof th);
    }
}

/* got within tol (relative, at least absolute tol) of want; tol 0: equal. */
static void
assert_close(const char *what, int k, int i, float got, double want, double tol)
{
    ck_assert_msg(tol == 0 ? (double)got == want
                           : fabs((double)got - want) <= tol * (fabs(want) > 1 ? fabs(want) : 1),
                  "%s node %d parameter %d: got %.9g, want %.9g", what, k, i, got, want);
}

/* After sl_sync_final on the nodes with live[k] after steps steps: node writer alone
 * writes, the average of every live node's final parameters (within tol) over as many
 * models, held by every live node bit for bit (the collective algorithms' allreduce, or
 * the gatherer's average sent back to each node in it). */
static void
assert_final(const node_out_t *out, int n, int steps, const int *live, int writer, double tol)
{
    int nlive = 0;

    for (int k = 0; k < n; k++) {
        if (!live[k])
            continue;
        nlive++;
        ck_assert_msg(out[k].writer == (k == writer), "node %d: writer %d", k, out[k].writer);
        ck_assert_msg(out[k].has_avg, "node %d: no average", k);
        ck_assert_msg(memcmp(out[k].avg, out[writer].avg, sizeof out[k].avg) == 0,
                      "node %d: not the writer's average bit for bit", k);
    }
    for (int k = 0; k < n; k++) {
        if (!out[k].has_avg)
            continue;
        ck_assert_int_eq(out[k].nmodels, nlive);
        for (int i = 0; i < NP; i++) {
            double mean = 0;
            for (int j = 0; j < n; j++)
                if (live[j])
                    mean += out[j].p[steps - 1][i];
            assert_close("final average", k, i, out[k].avg[i], mean / nlive, tol);
        }
    }
}

/* ------------------------------------------------------------ every algorithm */

static const struct {
    const char *name;
    int n;
    algo_t a;
    double tol; /* 0: every value is exact in float (means over 2 or 4) */
} cases[] = {
    /* q = 1: mean of 2 */
    {"gossip-bmuf n=4 q=1", 4, {GOSSIP, 1, 1, 1, PAPER}, 0},
    {"gossip-bmuf n=5 q=1", 5, {GOSSIP, 1, 1, 1, PAPER}, 0},
    {"gossip-ma n=4 q=1", 4, {GOSSIP, 0, 1, 1, NO_BMUF}, 0},
    /* degree 2 on 5 nodes: 4 links, q = 3 of them (mean of 4), or q = 2 (mean of 3) */
    {"gossip-bmuf n=5 k=2 q=3", 5, {GOSSIP, 1, 2, 3, PAPER}, 0},
    {"gossip-ma n=5 k=2 q=2", 5, {GOSSIP, 0, 2, 2, NO_BMUF}, 1e-6},
    /* k = 1: i-1, i+1, not everyone (mean of 3) */
    {"local-ma n=4", 4, {RING, 0, 1, 0, NO_BMUF}, 1e-6},
    {"local-ma n=5", 5, {RING, 0, 1, 0, NO_BMUF}, 1e-6},
    {"local-bmuf n=5", 5, {RING, 1, 1, 0, PAPER}, 1e-6},
    /* all n: mean of 4 exact, of 5 not; classic BMUF (against omega), no Nesterov */
    {"ma n=4", 4, {ALL, 0, 0, 0, NO_BMUF}, 0},
    {"ma n=5", 5, {ALL, 0, 0, 0, NO_BMUF}, 1e-6},
    {"bmuf n=4", 4, {ALL, 1, 0, 0, PAPER}, 0},
    {"bmuf n=4 omega", 4, {ALL, 1, 0, 0, 0.75, 0.5, 0, 1}, 0},
    {"bmuf n=5", 5, {ALL, 1, 0, 0, PAPER}, 1e-6},
    /* block momentum auto: 1 - 1/m for the m models of an average: 0.5 for gossip's 2
     * (not 1 - 1/n), 2/3 for a ring's 3, 0.75 for all 4 */
    {"gossip-bmuf n=5 q=1 eta auto", 5, {GOSSIP, 1, 1, 1, ETA_AUTO}, 0},
    {"local-bmuf n=5 eta auto", 5, {RING, 1, 1, 0, ETA_AUTO}, 1e-6},
    {"bmuf n=4 eta auto", 4, {ALL, 1, 0, 0, ETA_AUTO}, 0},
};

/* Six steps of each algorithm: every node's parameters after every step equal the
 * values by hand (exact or within 1e-6 relative, as the case says), and each component
 * synced as often as its period says (6, 3 and 2 rounds). Then sl_sync_final: rank 0
 * writes the mean of the n final models (within 1e-6: sums of values with many bits),
 * which ma and bmuf give every node and gossip and local only the gatherer. */
START_TEST(test_algorithm_by_hand)
{
    static node_out_t out[MAXN];
    static double want[MAXSTEPS][MAXN][NP];
    static int part[MAXSTEPS][MAXN];
    const int live[MAXN] = {1, 1, 1, 1, 1};
    char sync[256], topo[64];
    plan_t pl = model_plan(&cases[_i].a, layout_conf, cases[_i].n, MAXSTEPS, 30000, sync,
                           sizeof sync, topo, sizeof topo);

    run_nodes(&pl, out);
    fill_part(&pl, part);
    by_hand(&cases[_i].a, period, pl.n, pl.steps, part, want);
    for (int k = 0; k < pl.n; k++) {
        for (int t = 0; t < pl.steps; t++)
            for (int i = 0; i < NP; i++) {
                char what[96];
                snprintf(what, sizeof what, "%s step %d", cases[_i].name, t + 1);
                assert_close(what, k, i, out[k].p[t][i], want[t][k][i], cases[_i].tol);
            }
        for (int c = 0; c < NCOMP; c++)
            ck_assert_int_eq(out[k].rounds[c], MAXSTEPS / period[c]);
    }
    assert_final(out, pl.n, pl.steps, live, 0, 1e-6);
}
END_TEST

/* ------------------------------------------------------------ a node that left */

/* The rank node 0 pulls from at round r of lstm.0 (gossip, n, q = 1, k = 1). */
static int
first_pull(int n, uint64_t r)
{
    int nb[MAXN];
    const algo_t a = {GOSSIP, 1, 1, 1, 0.5, 1, 1, 0};

    ck_assert_int_eq(neighbourhood(&a, n, 0, 0, r, nb), 1);
    return nb[0];
}

static const struct {
    const char *name;
    int n, absent; /* -1: node 0's first pull (so someone misses it) */
    int steps;
    algo_t a;
    double tol;
    int writer;
} absent_cases[] = {
    /* 2 blocks of lstm.0, final of 4: exact */
    {"gossip-bmuf n=5", 5, -1, 2, {GOSSIP, 1, 1, 1, PAPER}, 0, 0},
    /* node 3's neighbours 2 and 4 miss it 3 times: they hold it for dead */
    {"local-ma n=5", 5, 3, 3, {RING, 0, 1, 0, NO_BMUF}, 1e-6, 0},
    /* rank 0 gone: its neighbours 1 and 3 hold it for dead, node 1 gathers */
    {"local-bmuf n=4", 4, 0, 3, {RING, 1, 1, 0, PAPER}, 1e-6, 1},
    /* nodes 1 and 3 pull from node 2 in some rounds (no copy: no sync) and from node 0
     * in others (G over the blocks since their last sync), with the default eta */
    {"gossip-bmuf n=4 eta 0.9", 4, 2, 6, {GOSSIP, 1, 1, 1, 0.9, 1, 1, 0}, 1e-6, 0},
    /* the survivor of 2 trains alone: start plus its local steps, as one node */
    {"gossip-bmuf n=2 eta 0.9", 2, 1, 4, {GOSSIP, 1, 1, 1, 0.9, 1, 1, 0}, 1e-6, 0},
};

/* One node leaves right after the rendezvous; the others run a few steps in which only
 * lstm.0 syncs (one timeout of sync.timeout_ms per step for those that wait for the
 * node that left; the others passed the parent's barrier together, so only it can be
 * missed. With two components due in one step a node that waited for it would push
 * its second component late, and whether a live peer still waits then is a race) and
 * then sl_sync_final:
 *   - every live node's parameters after every step equal the values by hand with the
 *     node left out of every average it would have been in (a sync that gets no copy
 *     at all is none: parameters and BMUF state stay as they were);
 *   - a node that missed it in SL_SYNC_DEAD_ROUNDS steps (it never answers, so each
 *     step that waits for it counts) holds it for dead;
 *   - exactly one live node writes the final model (rank 0, or 1 when 0 left), of
 *     n - 1 models: the mean of the survivors' final parameters, computed in double. */
START_TEST(test_absent_node)
{
    static node_out_t out[MAXN];
    static double want[MAXSTEPS][MAXN][NP];
    static int part[MAXSTEPS][MAXN];
    int n = absent_cases[_i].n, gone = absent_cases[_i].absent, live[MAXN];
    int steps = absent_cases[_i].steps;
    char sync[256], topo[64];
    plan_t pl = model_plan(&absent_cases[_i].a, one_conf, n, steps, 2000, sync, sizeof sync, topo,
                           sizeof topo);

    if (gone < 0)
        gone = first_pull(n, 1);
    pl.absent = gone;
    for (int k = 0; k < MAXN; k++)
        live[k] = k < n && k != gone;
    run_nodes(&pl, out);
    fill_part(&pl, part);
    by_hand(&absent_cases[_i].a, period_one, n, steps, part, want);
    for (int k = 0; k < n; k++) {
        int nb[MAXN], cnt, missed = 0;

        if (!live[k])
            continue;
        for (int t = 0; t < steps; t++)
            for (int i = 0; i < NP; i++) {
                char what[96];
                snprintf(what, sizeof what, "%s without node %d, step %d", absent_cases[_i].name,
                         gone, t + 1);
                assert_close(what, k, i, out[k].p[t][i], want[t][k][i], absent_cases[_i].tol);
            }
        /* lstm.0 syncs every step: in how many was it waited for? */
        for (int t = 1; t <= steps; t++) {
            cnt = neighbourhood(&absent_cases[_i].a, n, k, 0, (uint64_t)t, nb);
            for (int j = 0; j < cnt; j++)
                missed += nb[j] == gone;
        }
        ck_assert_msg(out[k].dead[gone] == (missed >= SL_SYNC_DEAD_ROUNDS),
                      "node %d: holds node %d for dead: %d", k, gone, out[k].dead[gone]);
    }
    assert_final(out, n, steps, live, absent_cases[_i].writer, absent_cases[_i].tol);
}
END_TEST

static const struct {
    const char *name;
    int n, skip; /* -1: node 0's pull of round 2 (so someone misses it) */
    algo_t a;
    double tol;
} skip_cases[] = {
    {"gossip-bmuf n=5", 5, -1, {GOSSIP, 1, 1, 1, PAPER}, 0},
    {"local-bmuf n=4", 4, 2, {RING, 1, 1, 0, PAPER}, 1e-6},
};

/* A node that skips one round and comes back: it makes its local step 2 but does not
 * call sl_sync_after_step, so the others average without it in step 2 (one timeout for
 * those that wait for it), and it keeps its parameters and BMUF state as they were;
 * in step 3 everybody takes part again (its stale frames of round 2 dropped). Every
 * node's parameters after every step equal the values by hand, nobody holds it for
 * dead, and rank 0 writes the mean of all n final models. Only lstm.0 syncs, for the
 * reason test_absent_node gives. */
START_TEST(test_skipped_round)
{
    static node_out_t out[MAXN];
    static double want[MAXSTEPS][MAXN][NP];
    static int part[MAXSTEPS][MAXN];
    const int live[MAXN] = {1, 1, 1, 1, 1};
    int n = skip_cases[_i].n, skip = skip_cases[_i].skip;
    char sync[256], topo[64];
    plan_t pl =
        model_plan(&skip_cases[_i].a, one_conf, n, 3, 2000, sync, sizeof sync, topo, sizeof topo);

    if (skip < 0)
        skip = first_pull(n, 2);
    pl.skip = skip;
    pl.skip_step = 2;
    run_nodes(&pl, out);
    fill_part(&pl, part);
    by_hand(&skip_cases[_i].a, period_one, n, pl.steps, part, want);
    for (int k = 0; k < n; k++) {
        for (int t = 0; t < pl.steps; t++)
            for (int i = 0; i < NP; i++) {
                char what[96];
                snprintf(what, sizeof what, "%s, node %d skipping step 2, step %d",
                         skip_cases[_i].name, skip, t + 1);
                assert_close(what, k, i, out[k].p[t][i], want[t][k][i], skip_cases[_i].tol);
            }
        ck_assert_int_eq(out[k].rounds[0], k == skip ? 2 : 3);
        ck_assert_int_eq(out[k].dead[skip], 0);
    }
    assert_final(out, n, pl.steps, live, 0, skip_cases[_i].tol ? skip_cases[_i].tol : 1e-6);
}
END_TEST

static const struct {
    const char *name;
    int n, skip; /* -1: node 0's pull of round 2 */
    algo_t a;
    double tol;
    int poison, q;
} poison_cases[] = {
    {"local-bmuf n=4 NaN", 4, 2, {RING, 1, 1, 0, PAPER}, 1e-6, POISON_NAN, 2},
    {"gossip-bmuf n=5 NaN", 5, -1, {GOSSIP, 1, 1, 1, PAPER}, 0, POISON_NAN, 1},
    {"local-ma n=4 wrong size", 4, 1, {RING, 0, 1, 0, NO_BMUF}, 1e-6, POISON_SIZE, 2},
};

/* A member's bad snapshot must neither stop nor poison the run: in step 2 one node
 * pushes lstm.0 snapshots with a NaN (or of the wrong size) instead of syncing. Its
 * pullers refuse them (counted: one each) and average without it, as if it had not
 * answered; so every node's parameters after every step equal the values by hand with
 * that node left out of step 2's averages (test_skipped_round's figures: a NaN taken
 * would make them NaN, a wrong size used to stop the run), nobody holds it for dead,
 * and rank 0 writes the mean of all n final models. */
START_TEST(test_bad_snapshot)
{
    static node_out_t out[MAXN];
    static double want[MAXSTEPS][MAXN][NP];
    static int part[MAXSTEPS][MAXN];
    const int live[MAXN] = {1, 1, 1, 1, 1};
    int n = poison_cases[_i].n, skip = poison_cases[_i].skip;
    char sync[256], topo[64];
    plan_t pl = model_plan(&poison_cases[_i].a, one_conf, n, 3, TEST_WAIT_MS, sync, sizeof sync,
                           topo, sizeof topo);

    if (skip < 0)
        skip = first_pull(n, 2);
    pl.skip = skip;
    pl.skip_step = 2;
    pl.poison = poison_cases[_i].poison;
    pl.poison_q = poison_cases[_i].q;
    run_nodes(&pl, out);
    fill_part(&pl, part);
    by_hand(&poison_cases[_i].a, period_one, n, pl.steps, part, want);
    for (int k = 0; k < n; k++) {
        int nb[MAXN], cnt = neighbourhood(&poison_cases[_i].a, n, k, 0, 2, nb), pulls = 0;

        for (int t = 0; t < pl.steps; t++)
            for (int i = 0; i < NP; i++) {
                char what[96];
                snprintf(what, sizeof what, "%s from node %d, step %d", poison_cases[_i].name, skip,
                         t + 1);
                assert_close(what, k, i, out[k].p[t][i], want[t][k][i], poison_cases[_i].tol);
            }
        for (int j = 0; j < cnt; j++)
            pulls |= nb[j] == skip;
        ck_assert_msg(out[k].refused == (uint64_t)(k != skip && pulls),
                      "%s: node %d refused %d snapshots", poison_cases[_i].name, k,
                      (int)out[k].refused);
        ck_assert_int_eq(out[k].dead[skip], 0);
    }
    assert_final(out, n, pl.steps, live, 0, poison_cases[_i].tol ? poison_cases[_i].tol : 1e-6);
}
END_TEST

/* ------------------------------------------------------------ allreduce */

static const struct {
    int n;
    const char *exchange;
    const sl_component_t *comps;
} grad_cases[] = {{3, "sync.exchange=dense", comps},
                  {4, "sync.exchange=dense", comps},
                  {4, "sync.exchange=unique", comps},
                  {3, "sync.exchange=allgather", comps},
                  {3, "sync.exchange=unique", side_comps}};

/* sl_sync_gradients over 3 and 4 nodes, three steps, each node touching one row of the
 * shard per step (sl_sync_note_rows): every node's gradient becomes the mean of the
 * nodes' gradients (a sum would be 3 or 4 times too large), the shard's too, whether
 * it goes whole or by the touched rows (unique: their union summed; allgather): exact
 * on 4 nodes (multiples of 1/4 divided by 4), within 1e-6 on 3. By rows, every frame
 * is the gradients' (component NCOMP), the dense components' values among the shard's:
 * one call a step, whatever the layout (side_comps: the dense components side by side). */
START_TEST(test_gradients_mean)
{
    static node_out_t out[MAXN];
    int n = grad_cases[_i].n, rows = strstr(grad_cases[_i].exchange, "dense") == NULL;
    const sl_component_t *cs = grad_cases[_i].comps;
    double tol = n == 4 ? 0 : 1e-6;
    plan_t pl = {.layout = layout_conf,
                 .algo_conf = "sync={algorithm: allreduce}",
                 .more_conf = grad_cases[_i].exchange,
                 .n = n,
                 .steps = 3,
                 .gradients = 1,
                 .absent = -1,
                 .timeout_ms = 30000,
                 .comps = cs};

    run_nodes(&pl, out);
    for (int k = 0; k < n; k++) {
        for (int t = 0; t < pl.steps; t++)
            for (int i = 0; i < NP; i++) {
                double mean = 0;
                for (int j = 0; j < n; j++)
                    mean += grad_value(cs, j, t + 1, i);
                assert_close(grad_cases[_i].exchange, k, i, out[k].p[t][i], mean / n, tol);
            }
        for (int c = 0; c <= NCOMP; c++)
            for (int g = 0; g < 2; g++) {
                /* every frame is the gradients': by rows, the shard's counts and rows
                 * gathered and the values summed with the dense components' */
                int own = c == NCOMP && (g == 0 || rows);
                ck_assert_msg(
                    (out[k].grad_frames[c][g] > 0) == own,
                    "%s, node %d: %llu %s frames as component %d's", grad_cases[_i].exchange, k,
                    (unsigned long long)out[k].grad_frames[c][g], g ? "allgather" : "allreduce", c);
            }
    }
}
END_TEST

static Suite *
sync_algo_suite(void)
{
    Suite *s = suite_create("sync_algo");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_loop_test(core, test_algorithm_by_hand, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(core, test_gradients_mean, 0,
                        (int)(sizeof grad_cases / sizeof grad_cases[0]));
    tcase_add_loop_test(limits, test_absent_node, 0,
                        (int)(sizeof absent_cases / sizeof absent_cases[0]));
    tcase_add_loop_test(limits, test_skipped_round, 0,
                        (int)(sizeof skip_cases / sizeof skip_cases[0]));
    tcase_add_loop_test(limits, test_bad_snapshot, 0,
                        (int)(sizeof poison_cases / sizeof poison_cases[0]));
    tcase_set_timeout(core, 300); /* a hang guard: each cluster has its own */
    tcase_set_timeout(limits, 300);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sync_algo_suite());
}
