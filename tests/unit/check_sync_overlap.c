/* Tests of overlapped sync (sync.overlap_steps tau > 0, src/sync/sl_overlap.h) through
 * the real sync object on 4 forked nodes (test_util.h) over ipc://, each with its own
 * transport and a small flat buffer of three components: two row shards (an input and
 * an output embedding) and a dense one, the shards syncing every 6 steps, the dense one
 * every 4. Every node starts from distinct values and moves them by known local steps.
 * What overlap must compute is worked here by a reference of the same semantics on the
 * synchronous path (tau 0): at a sync point t the reference syncs a copy of the
 * parameters at once and adds (synced copy - copy) to the parameters after step t + tau
 * (or at the end, for those still pending: sl_sync_flush), for the row shards and, with
 * sync.overlap_dense, the dense component; without it the dense component takes its
 * synced copy at t. The threaded runs must equal it bit for bit, whatever the timing: as
 * they come, with node 1 held back at sync points of an overlapped component (those of
 * the dense one, or of the row shards alone) until node 0 has seen that its exchange is
 * still in flight (so node 0's training thread provably ran on while its worker waited), and
 * with every node's sync object checkpointed (sl_sync_state_save) while an exchange is
 * in flight, destroyed, and a new one resumed from the bytes. Also: tau values the
 * configuration refuses. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/sl_config.h"
#include "sync/sl_sync.h"
#include "transport/sl_transport.h"
#include "test_tool.h"
#include "test_util.h"

enum { N = 4, NP = 12 + 5 + 20, NCOMP = 3, DENSE_PERIOD = 4, ROWS_PERIOD = 6 };

static const sl_component_t comps[NCOMP] = {
    {"embedding.0", 0, 12, 1, 0, 6, 2},
    {"lstm.0", 12, 5, 0, 0, 0, 0},
    {"softmax.0", 17, 20, 1, 0, 10, 2},
};

typedef enum {
    RUN_REFERENCE, /* tau 0, the correction applied by hand tau steps later */
    RUN_OVERLAP,   /* the worker thread, as the nodes come */
    RUN_DELAYED,   /* node 1 held back at the dense component's sync points */
    RUN_RESUMED,   /* checkpointed and resumed at step resume_at */
    RUN_OTHER      /* resumed with sync.period 2 and tau 1: must stop at the next sync */
} run_t;

typedef struct {
    const char *sync; /* sync={...} without overlap_steps */
    int tau, steps, resume_at;
    run_t run;
    int dense; /* sync.overlap_dense in sync */
} plan_t;

typedef struct {
    float p[NP];
    int in_flight; /* node 0, RUN_DELAYED: hand-overs it saw still running */
    int refused;   /* RUN_OTHER: the step at which the resumed sync stopped */
    char msg[256]; /* and its message */
} node_out_t;

enum { FAIL_CONFIG = 1, FAIL_NEW, FAIL_STEP, FAIL_BARRIER, FAIL_STATE, FAIL_IDLE };

/* Node k's starting value of parameter i: multiples of 1/8 in [-4, 4). */
static float
start_value(int k, int i)
{
    return (float)((k * 37 + i * 11 + 5) % 64 - 32) / 8.0f;
}

/* One local step of node k: a decay and a pull that differ by node, step and
 * parameter; the rows it touches go to the sync object (sync.exchange unique). */
static sl_status_t
local_step(sl_sync_t *s, int k, long step, float *p)
{
    int32_t in[2] = {(int32_t)((step + k) % 6), (int32_t)((3 * step + 1) % 6)};
    int32_t out[3] = {(int32_t)((step * (k + 1)) % 10), (int32_t)(k + 5), (int32_t)(step % 10)};

    for (int i = 0; i < NP; i++)
        p[i] = 0.97f * p[i] + 0.01f * (float)((i * 7 + k * 3 + (int)step * 5) % 17 - 8);
    SL_TRY(sl_sync_note_rows(s, 0, in, 2));
    return sl_sync_note_rows(s, 1, out, 3);
}

/* RUN_DELAYED: whether node 1 is held back after step: at the dense component's sync
 * points when it overlaps, else at those of the row shards alone (at a dense sync point
 * node 0 would wait for node 1 in its own, synchronous, exchange). */
static int
held_step(const plan_t *pl, long step)
{
    if (pl->run != RUN_DELAYED)
        return 0;
    if (pl->dense)
        return step % DENSE_PERIOD == 0;
    return step % ROWS_PERIOD == 0 && step % DENSE_PERIOD != 0;
}

/* The reference: what overlap must compute, on the synchronous path. */
typedef struct {
    int tau, dense;
    long due[NCOMP];
    float corr[NP], work[NP];
} reference_t;

/* The reference's updates due at step (any step: -1) applied. */
static void
reference_apply(reference_t *r, float *p, long step)
{
    for (int c = 0; c < NCOMP; c++) {
        if (r->due[c] < 0 || (step >= 0 && r->due[c] != step))
            continue;
        for (size_t j = comps[c].offset; j < comps[c].offset + comps[c].count; j++)
            p[j] += r->corr[j];
        r->due[c] = -1;
    }
}

static sl_status_t
reference_after_step(reference_t *r, sl_sync_t *s, float *p, long step)
{
    int any = 0;

    reference_apply(r, p, step);
    for (int c = 0; c < NCOMP; c++)
        any |= sl_sync_due(s, c, step);
    if (!any)
        return sl_sync_after_step(s, p, step);
    memcpy(r->work, p, sizeof r->work);
    SL_TRY(sl_sync_after_step(s, r->work, step));
    for (int c = 0; c < NCOMP; c++) {
        size_t from = comps[c].offset, n = comps[c].count;

        if (!sl_sync_due(s, c, step))
            continue;
        if (!comps[c].sparse && !r->dense) { /* synced at once */
            memcpy(p + from, r->work + from, n * sizeof *p);
            continue;
        }
        for (size_t j = from; j < from + n; j++)
            r->corr[j] = r->work[j] - p[j];
        r->due[c] = step + r->tau;
    }
    return SL_OK;
}

/* Checkpoint and resume of node k's sync object at a step: the state saved (waiting
 * for what is in flight), the object destroyed, a new one from cfg loaded. */
static int
resume_here(sl_sync_t **s, const sl_config_t *cfg, sl_transport_t *t, int k, const float *p)
{
    size_t len = sl_sync_state_bytes(*s);
    unsigned char *buf = malloc(len ? len : 1);
    int rc = 0;

    if (!buf || sl_sync_state_save(*s, buf, len) != SL_OK)
        rc = FAIL_STATE;
    sl_sync_destroy(s);
    if (rc == 0 && (sl_sync_new(s, cfg, t, k, N, comps, NCOMP, p, NP) != SL_OK ||
                    sl_sync_state_load(*s, buf, len) != SL_OK))
        rc = FAIL_STATE;
    free(buf);
    return rc;
}

static int
node(sl_transport_t *t, test_cluster_t *c, uint64_t *res)
{
    const plan_t *pl = c->arg;
    node_out_t *out = test_cluster_out(c);
    int k = (int)sl_transport_rank(t), rc = 0;
    int tau = pl->run == RUN_REFERENCE ? 0 : pl->tau;
    char conf[64];
    sl_config_t cfg;
    sl_sync_t *s = NULL;
    reference_t ref = {.tau = pl->tau, .dense = pl->dense, .due = {-1, -1, -1}};
    float *p = out->p;

    (void)res;
    snprintf(conf, sizeof conf, "sync.overlap_steps=%d", tau);
    sl_config_init(&cfg);
    if (sl_config_set(&cfg, pl->sync) != SL_OK || sl_config_set(&cfg, conf) != SL_OK ||
        sl_config_set(&cfg, "run.seed=4321") != SL_OK) {
        sl_config_fini(&cfg);
        return FAIL_CONFIG;
    }
    cfg.sync.timeout_ms = TEST_WAIT_MS;
    cfg.cluster.nodes = N;
    for (int i = 0; i < NP; i++)
        p[i] = start_value(k, i);
    if (sl_sync_new(&s, &cfg, t, k, N, comps, NCOMP, p, NP) != SL_OK)
        rc = FAIL_NEW;
    for (long step = 1; step <= pl->steps && rc == 0; step++) {
        int held = held_step(pl, step);
        sl_status_t st;

        if (local_step(s, k, step, p) != SL_OK) {
            rc = FAIL_STEP;
            break;
        }
        if (held && k == 1 && test_cluster_barrier(c) != 0)
            rc = FAIL_BARRIER;
        if (rc)
            break;
        st = pl->run == RUN_REFERENCE ? reference_after_step(&ref, s, p, step)
                                      : sl_sync_after_step(s, p, step);
        if (st != SL_OK && pl->run == RUN_OTHER) {
            out->refused = st == SL_ERR_CONFIG ? (int)step : -1;
            snprintf(out->msg, sizeof out->msg, "%s", sl_err_msg());
            break;
        }
        if (st != SL_OK) {
            rc = FAIL_STEP;
            break;
        }
        /* node 0 pulls from node 1 (its ring neighbour): its exchange cannot end before
         * node 1 passes the barrier and hands its block over */
        if (held && k == 0)
            out->in_flight += !sl_sync_transport_free(s);
        if (held && k != 1 && test_cluster_barrier(c) != 0)
            rc = FAIL_BARRIER;
        if (rc == 0 && pl->run == RUN_RESUMED && step == pl->resume_at)
            rc = resume_here(&s, &cfg, t, k, p);
        if (rc == 0 && pl->run == RUN_OTHER && step == pl->resume_at) {
            if (sl_config_set(&cfg, "sync.period=2") != SL_OK ||
                sl_config_set(&cfg, "sync.overlap_steps=1") != SL_OK)
                rc = FAIL_CONFIG;
            else
                rc = resume_here(&s, &cfg, t, k, p);
        }
    }
    /* the end of the run: the updates still pending applied, nothing left in flight */
    if (rc == 0 && out->refused) {
        /* stopped */
    } else if (rc == 0 && pl->run == RUN_REFERENCE)
        reference_apply(&ref, p, -1);
    else if (rc == 0 && sl_sync_flush(s, p) != SL_OK)
        rc = FAIL_STEP;
    if (rc == 0 && !sl_sync_transport_free(s))
        rc = FAIL_IDLE;
    sl_sync_destroy(&s);
    sl_config_fini(&cfg);
    return rc;
}

static void
run_nodes(const plan_t *pl, node_out_t *out)
{
    test_cluster_t c;

    test_cluster_init(&c, N, 1, 77, node, pl);
    c.shm = 0;
    c.out = out;
    c.out_bytes = sizeof *out;
    test_cluster_assert_ok(&c, pl->sync);
}

/* ------------------------------------------------------------------ core */

static const struct {
    const char *sync;
    int tau, steps, resume_at, dense;
} cases[] = {
    /* q = 2 of 2 links: a mean of three, summed in rank order whatever came first; the
     * last syncs (24) are still pending after the last step */
    {"sync={algorithm: gossip-bmuf, neighbours: 2, period: 4, embedding_period: 6, "
     "overlap_dense: true}",
     2, 24, 12, 1},
    /* touched rows handed over with the block; the dense component synced at once (at
     * 12 beside the rows' hand-over); the last row sync (18) is due after the last step
     * (20) */
    {"sync={algorithm: local-bmuf, exchange: unique, period: 4, embedding_period: 6}", 3, 20, 13,
     0},
    /* the ring allreduce of every node on the worker, the dense one's on the training
     * thread */
    {"sync={algorithm: bmuf, period: 4, embedding_period: 6}", 1, 23, 18, 0},
    {"sync={algorithm: gossip-ma, neighbours: 2, exchange: unique, period: 4, "
     "embedding_period: 6, overlap_dense: true}",
     3, 24, 16, 1},
};

static int
same_params(const node_out_t *a, const node_out_t *b)
{
    for (int k = 0; k < N; k++)
        if (memcmp(a[k].p, b[k].p, sizeof a[k].p) != 0)
            return 0;
    return 1;
}

/* The threaded runs against the reference, bit for bit, however the nodes are timed and
 * with a checkpoint taken while an exchange is in flight; and the reference is not the
 * synchronous sync (tau matters). */
START_TEST(test_overlap_equals_reference)
{
    plan_t pl = {cases[_i].sync, cases[_i].tau, cases[_i].steps, cases[_i].resume_at, 0,
                 cases[_i].dense};
    node_out_t ref[N], run[N], sync0[N];
    int held = 0;

    pl.run = RUN_REFERENCE;
    run_nodes(&pl, ref);
    pl.run = RUN_OVERLAP;
    run_nodes(&pl, run);
    ck_assert_msg(same_params(ref, run), "%s tau %d: overlap differs from the reference", pl.sync,
                  pl.tau);
    pl.run = RUN_DELAYED;
    for (long step = 1; step <= pl.steps; step++)
        held += held_step(&pl, step);
    run_nodes(&pl, run);
    ck_assert_msg(run[0].in_flight == held, "node 0 saw %d of %d exchanges in flight",
                  run[0].in_flight, held);
    ck_assert_msg(same_params(ref, run), "%s tau %d: a delayed node changes the result", pl.sync,
                  pl.tau);
    pl.run = RUN_RESUMED;
    run_nodes(&pl, run);
    ck_assert_msg(same_params(ref, run), "%s tau %d: resumed at %d, the result differs", pl.sync,
                  pl.tau, pl.resume_at);
    pl.run = RUN_REFERENCE;
    pl.tau = 0;
    run_nodes(&pl, sync0);
    ck_assert_msg(!same_params(ref, sync0), "tau %d gives the synchronous result", cases[_i].tau);
}
END_TEST

/* ------------------------------------------------------------------ limits */

static void
assert_config_error(const char *set, const char *want)
{
    sl_config_t cfg;

    sl_config_init(&cfg);
    test_config_set_ok(&cfg, "data.train=x.txt");
    test_config_set_ok(&cfg, set);
    ck_assert_int_eq(sl_config_validate(&cfg), SL_ERR_CONFIG);
    ck_assert_msg(strstr(sl_err_msg(), want), "%s: got '%s'", set, sl_err_msg());
    sl_config_fini(&cfg);
}

/* tau below every period, and not with allreduce; sl_sync_new checks the resolved
 * periods as well. */
START_TEST(test_overlap_refused)
{
    sl_config_t cfg;
    sl_sync_t *s = NULL;
    float p[NP] = {0};

    assert_config_error("sync={algorithm: bmuf, period: 4, overlap_steps: 4}",
                        "'sync.overlap_steps' (4) must be less than 'sync.period' (4)");
    assert_config_error("sync={algorithm: bmuf, embedding_period: 2, overlap_steps: 2}",
                        "'sync.overlap_steps' (2) must be less than 'sync.embedding_period' (2)");
    assert_config_error("sync={algorithm: gossip-bmuf, overlap_steps: 3, "
                        "periods: [{match: lstm.*, period: 3}]}",
                        "'sync.overlap_steps' (3) must be less than 'sync.periods[0].period' (3)");
    assert_config_error("sync={algorithm: allreduce, overlap_steps: 1}",
                        "allreduce averages the gradients within each step");
    sl_config_init(&cfg);
    ck_assert_int_eq(sl_config_set(&cfg, "sync.overlap_steps=-1"), SL_ERR_CONFIG);
    ck_assert_msg(strstr(sl_err_msg(), "'sync.overlap_steps' must be at least 0, got -1"), "%s",
                  sl_err_msg());
    test_config_set_ok(&cfg, "sync={algorithm: bmuf, period: 2, overlap_steps: 2}");
    ck_assert_int_eq(sl_sync_new(&s, &cfg, NULL, 0, 1, comps, NCOMP, p, NP), SL_OK);
    sl_sync_destroy(&s); /* one node: nothing to overlap, nothing checked */
    {
        /* a real transport, never connected: sl_sync_new reads it (which ranks it knows)
         * before it checks the periods */
        sl_transport_opts_t o;
        sl_transport_t *t = NULL;

        sl_transport_opts_default(&o);
        o.rank = 0;
        o.size = 2;
        o.linger_ms = 0;
        ck_assert_int_eq(sl_transport_new(&t, &o), SL_OK);
        ck_assert_int_eq(sl_sync_new(&s, &cfg, t, 0, 2, comps, NCOMP, p, NP), SL_ERR_CONFIG);
        sl_transport_destroy(&t);
    }
    ck_assert_msg(strstr(sl_err_msg(), "sync.overlap_steps 2 must be less than the period of "
                                       "every component, but embedding.0 syncs every 2 steps"),
                  "%s", sl_err_msg());
    ck_assert_ptr_null(s);
    sl_config_fini(&cfg);
}
END_TEST

/* A checkpoint of tau 3 taken with the update of step 12 due at 15, resumed with
 * sync.period 2 and tau 1: the next sync point (14) comes before that update; each node
 * stops there with a message that says why, none asserts or hangs. */
START_TEST(test_overlap_resume_other_periods)
{
    plan_t pl = {.sync = "sync={algorithm: gossip-bmuf, neighbours: 2, period: 4, "
                         "embedding_period: 6, overlap_dense: true}",
                 .tau = 3,
                 .steps = 24,
                 .resume_at = 13,
                 .run = RUN_OTHER,
                 .dense = 1};
    node_out_t out[N];

    run_nodes(&pl, out);
    for (int k = 0; k < N; k++) {
        ck_assert_msg(out[k].refused == 14, "node %d stopped at %d: %s", k, out[k].refused,
                      out[k].msg);
        ck_assert_msg(strstr(out[k].msg, "lstm.0 reaches its sync point at step 14 with the "
                                         "update of the last one still pending (due at step "
                                         "15): the checkpoint was written with other sync "
                                         "periods or sync.overlap_steps"),
                      "%s", out[k].msg);
    }
}
END_TEST

static Suite *
sync_overlap_suite(void)
{
    Suite *s = suite_create("sync_overlap");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_loop_test(core, test_overlap_equals_reference, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(limits, test_overlap_refused);
    tcase_add_test(limits, test_overlap_resume_other_periods);
    tcase_set_timeout(core, 300); /* a hang guard: each cluster has its own */
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(sync_overlap_suite());
}
