/* A node of a collective algorithm (bmuf, allreduce) stops answering, at the library
 * level: three sync nodes as threads over loopback transports run a tiny model (an
 * embedding row shard and a dense component, a deterministic local update that pulls
 * each node's copy towards its own target, on the rows it touched), and node 2 stops
 * after step DROP; dense and by-rows exchanges (sync.exchange unique, allgather). Nodes 0 and 1
 * drop it (one agreement), finish every step and the final average, and end with exactly the models
 * of a run of two nodes resumed at step DROP from their own states (parameters and sync state, as a
 * checkpoint would have them): the averages, the gradients and BMUF's auto block
 * momentum (1 - 1/n) are those of 2 nodes from the drop point. A first step of the
 * 3-node run is checked by hand. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_log.h"
#include "config/sl_config.h"
#include "sync/sl_sync.h"
#include "test_tool.h"
#include "test_util.h"

enum { N = 3, NP = 23, SHARD = 12, ROWS = 6, STEPS = 7, DROP = 3, VICTIM = 2, WAIT_MS = 300 };

/* an input embedding of 6 rows of 2 floats, then 11 dense floats */
static const sl_component_t comps[2] = {
    {"embedding.0", 0, SHARD, 1, 0, ROWS, 2},
    {"lstm.0", SHARD, NP - SHARD, 0, 0, 0, 0},
};

/* One run: size nodes over steps first .. last; node `stop` (-1: none) stops answering
 * after step stop_after. */
typedef struct {
    const char *conf;
    int size, first, last, stop, stop_after;
    float p[N][NP];             /* in: the start; out: at the end */
    unsigned char *state_in[N]; /* sync state to load first, or NULL */
    size_t state_in_len[N];
    int save_at;                 /* save state and params after this step (0: never) */
    unsigned char *state_out[N]; /* malloc'd */
    size_t state_out_len[N];
    float saved_p[N][NP];
    float avg[N][NP];
    int writer[N], nmodels[N], ndead[N], nev[N];
    sl_members_event_t ev[N][N];
    sl_status_t st[N];
    char err[N][256];
    sl_config_t cfg;
    sl_transport_t *t[N];
} run_t;

typedef struct {
    run_t *r;
    int k;
} arg_t;

/* Node k's local work of a step: its copy pulled towards its own target by a tenth
 * (model averaging), or the gradient of 1/2 |p - target|^2 (allreduce). */
static float
target(int k, int i)
{
    return test_node_input((uint32_t)k, (size_t)i) + 0.25f * (float)k;
}

/* Whether node k touches embedding row row at step step_no: its own and one more. */
static int
touches(int k, int step_no, int row)
{
    return row == k || row == (step_no + 2 * k) % ROWS;
}

/* Whether float i is one node k works on at step_no: a touched row's, or a dense one. */
static int
works_on(int k, int step_no, int i)
{
    return i >= SHARD || touches(k, step_no, i / 2);
}

static sl_status_t
step(run_t *r, sl_sync_t *s, int k, int step_no)
{
    float *p = r->p[k], g[NP];
    int32_t rows[ROWS];
    int n = 0;

    for (int row = 0; row < ROWS; row++)
        if (touches(k, step_no, row))
            rows[n++] = row;
    SL_TRY(sl_sync_note_rows(s, 0, rows, n));
    if (sl_sync_algorithm(s) != SL_SYNC_ALLREDUCE) {
        for (int i = 0; i < NP; i++)
            if (works_on(k, step_no, i))
                p[i] += 0.1f * (target(k, i) - p[i]);
        return sl_sync_after_step(s, p, step_no);
    }
    /* an untouched row's gradient is 0, as the model's (sl_sparse_allreduce.h) */
    for (int i = 0; i < NP; i++)
        g[i] = works_on(k, step_no, i) ? p[i] - target(k, i) : 0.0f;
    SL_TRY(sl_sync_gradients(s, g, step_no - 1));
    for (int i = 0; i < NP; i++)
        p[i] -= 0.5f * g[i];
    return SL_OK;
}

static void *
node_main(void *arg)
{
    run_t *r = ((arg_t *)arg)->r;
    int k = ((arg_t *)arg)->k;
    sl_sync_t *s = NULL;
    const float *avg;
    sl_status_t st;

    st = sl_sync_new(&s, &r->cfg, r->t[k], k, r->size, comps, 2, r->p[k], NP);
    if (st == SL_OK && r->state_in[k])
        st = sl_sync_state_load(s, r->state_in[k], r->state_in_len[k]);
    for (int b = r->first; st == SL_OK && b <= r->last; b++) {
        if (k == r->stop && b > r->stop_after)
            goto out; /* stops answering; its transport stays, silent */
        st = step(r, s, k, b);
        if (st == SL_OK && b == r->save_at) {
            r->state_out_len[k] = sl_sync_state_bytes(s);
            r->state_out[k] = malloc(r->state_out_len[k] + 1);
            st = sl_sync_state_save(s, r->state_out[k], r->state_out_len[k]);
            memcpy(r->saved_p[k], r->p[k], sizeof r->p[k]);
        }
    }
    if (st == SL_OK)
        st = sl_sync_final(s, r->p[k], &avg, &r->writer[k], &r->nmodels[k]);
    if (st == SL_OK && avg)
        memcpy(r->avg[k], avg, sizeof r->avg[k]);
    if (s) {
        r->ndead[k] = sl_sync_ndead(s);
        while (r->nev[k] < N && sl_sync_next_membership(s, &r->ev[k][r->nev[k]]))
            r->nev[k]++;
    }
out:
    r->st[k] = st;
    snprintf(r->err[k], sizeof r->err[k], "%s", st == SL_OK ? "" : sl_err_msg());
    sl_sync_destroy(&s);
    return NULL;
}

static void
run_nodes(run_t *r)
{
    pthread_t th[N];
    arg_t args[N];
    const char *eps[N];

    sl_log_set_level(SL_LOG_ERROR);
    sl_config_init(&r->cfg);
    ck_assert_msg(sl_config_set(&r->cfg, r->conf) == SL_OK, "%s", sl_err_msg());
    for (int k = 0; k < r->size; k++) {
        sl_transport_opts_t o;
        sl_transport_opts_default(&o);
        o.run_id = 2;
        o.rank = (uint32_t)k;
        o.size = (uint32_t)r->size;
        o.linger_ms = 0;
        o.timeout_ms = 5000;
        ck_assert_int_eq(sl_transport_new(&r->t[k], &o), SL_OK);
        eps[k] = sl_transport_endpoint(r->t[k]);
    }
    for (int k = 0; k < r->size; k++)
        ck_assert_int_eq(sl_transport_connect(r->t[k], eps), SL_OK);
    for (int k = 0; k < r->size; k++) {
        args[k] = (arg_t){r, k};
        ck_assert_int_eq(pthread_create(&th[k], NULL, node_main, &args[k]), 0);
    }
    for (int k = 0; k < r->size; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < r->size; k++)
        sl_transport_destroy(&r->t[k]);
    sl_config_fini(&r->cfg);
    for (int k = 0; k < r->size; k++)
        ck_assert_msg(r->st[k] == SL_OK, "node %d: %s", k, r->err[k]);
}

static void
run_init(run_t *r, const char *conf, int size, int first, int last)
{
    memset(r, 0, sizeof *r);
    r->conf = conf;
    r->size = size;
    r->first = first;
    r->last = last;
    r->stop = -1;
    for (int k = 0; k < size; k++)
        for (int i = 0; i < NP; i++)
            r->p[k][i] = 0.5f;
}

static const char *const confs[] = {
    "sync={algorithm: bmuf, period: 1, block_momentum: auto, timeout_ms: 300}",
    "sync={algorithm: allreduce, timeout_ms: 300}",
    "sync={algorithm: bmuf, period: 1, block_momentum: auto, exchange: unique, timeout_ms: 300}",
    "sync={algorithm: ma, period: 1, exchange: unique, timeout_ms: 300}",
    "sync={algorithm: allreduce, exchange: unique, timeout_ms: 300}",
    "sync={algorithm: allreduce, exchange: allgather, timeout_ms: 300}",
    "sync={algorithm: bmuf, period: 2, overlap_steps: 1, overlap_dense: true, "
    "block_momentum: auto, timeout_ms: 300}",
};

/* 3 nodes, node 2 stopping after step DROP, against 3 nodes to DROP then 2 resumed. */
START_TEST(test_drop_equals_two_nodes)
{
    static run_t drop, head, tail;

    run_init(&drop, confs[_i], N, 1, STEPS);
    drop.stop = VICTIM;
    drop.stop_after = DROP;
    run_nodes(&drop);

    run_init(&head, confs[_i], N, 1, DROP);
    head.save_at = DROP;
    run_nodes(&head);
    run_init(&tail, confs[_i], 2, DROP + 1, STEPS);
    for (int k = 0; k < 2; k++) {
        memcpy(tail.p[k], head.saved_p[k], sizeof tail.p[k]);
        tail.state_in[k] = head.state_out[k];
        tail.state_in_len[k] = head.state_out_len[k];
    }
    run_nodes(&tail);

    for (int k = 0; k < 2; k++) {
        test_assert_floats(drop.p[k], tail.p[k], NP);
        test_assert_floats(drop.avg[k], tail.avg[k], NP);
        ck_assert_int_eq(drop.nmodels[k], 2);
        ck_assert_int_eq(drop.writer[k], k == 0);
        ck_assert_int_eq(drop.ndead[k], 1);
        ck_assert_int_eq(drop.nev[k], 1);
        ck_assert_int_eq(drop.ev[k][0].rank, VICTIM);
        ck_assert_int_eq(drop.ev[k][0].members, 2);
        free(head.state_out[k]);
    }
    free(head.state_out[2]);
    /* the drop changed the result: 2 nodes from DROP on are not 3 */
    run_init(&head, confs[_i], N, 1, STEPS);
    run_nodes(&head);
    ck_assert(memcmp(head.avg[0], drop.avg[0], sizeof head.avg[0]) != 0);
}
END_TEST

/* By hand, bmuf's first step on 3 nodes for the dense floats (every p 0.5, auto eta
 * 2/3, zeta 1, Nesterov, block start reference): theta_k = 0.5 + 0.1 (t_k - 0.5),
 * theta_bar their mean, G = theta_bar - 0.5, Delta = G, omega = 0.5 + G, theta = omega
 * + 2/3 Delta; and with node 2 silent from the first step, the same over nodes 0 and 1
 * with eta 1/2. */
START_TEST(test_first_step_by_hand)
{
    static run_t r;

    for (int silent = 0; silent < 2; silent++) {
        int n = silent ? 2 : 3;
        run_init(&r, confs[0], N, 1, 1);
        if (silent) {
            r.stop = VICTIM;
            r.stop_after = 0;
        }
        run_nodes(&r);
        for (int i = SHARD; i < NP; i++) {
            double bar = 0, g, want;
            for (int k = 0; k < n; k++)
                bar += 0.5 + 0.1 * ((double)target(k, i) - 0.5);
            bar /= n;
            g = bar - 0.5;
            want = 0.5 + g + (1.0 - 1.0 / n) * g;
            for (int k = 0; k < n; k++)
                ck_assert_msg(r.p[k][i] > want - 1e-5 && r.p[k][i] < want + 1e-5,
                              "%d nodes, node %d, float %d: %.7f, by hand %.7f", n, k, i,
                              (double)r.p[k][i], want);
        }
    }
}
END_TEST

static Suite *
reform_suite(void)
{
    Suite *s = suite_create("sync_reform");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_first_step_by_hand);
    tcase_add_loop_test(limits, test_drop_equals_two_nodes, 0,
                        (int)(sizeof confs / sizeof confs[0]));
    tcase_set_timeout(core, 60);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(reform_suite());
}
