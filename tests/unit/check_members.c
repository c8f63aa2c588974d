/* The member set of the collective algorithms (src/sync/sl_members.h), nodes as threads
 * over loopback transports: the agreement drops a member that does not answer; a second
 * failure during the re-forming (a node that sent its proposal to one survivor only,
 * then stopped) leaves the survivors with different sets, whose collective times out
 * rather than mixing frames, and the next agreement brings them together; a survivor
 * that missed the end of a collective the other completed takes its result; collectives
 * over a group use only its members; a rank dropped and started again is admitted at a
 * block boundary and takes part from the next collective. Timeouts are short (the silent
 * nodes make every survivor wait them out); results are checked exactly. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "sync/sl_members.h"
#include "test_tool.h"
#include "test_util.h"
#include "transport/sl_collective.h"

enum { MAXN = 7, COUNT = 37, WAIT_MS = 300, BIG = 3 * 65536 };

typedef struct net net_t;

/* What node k does, on its own thread. */
typedef void (*node_fn)(net_t *net, int k);

struct net {
    int n;
    sl_transport_t *t[MAXN];
    node_fn fn[MAXN]; /* NULL: the node is silent (dead) */
    /* results */
    sl_status_t st[MAXN];
    char err[MAXN][256];
    int count[MAXN], epoch[MAXN], nodes[MAXN];
    uint32_t ranks[MAXN][MAXN];
    float out[MAXN][COUNT], first[MAXN][COUNT];
    float *big[MAXN]; /* (BIG) for the lent frames case */
    sl_members_event_t ev[MAXN][MAXN];
    int nev[MAXN];
};

typedef struct {
    net_t *net;
    int k;
} node_arg_t;

static void *
node_main(void *arg)
{
    node_arg_t *a = arg;
    a->net->fn[a->k](a->net, a->k);
    return NULL;
}

/* Runs net's nodes (n transports on loopback, timeout WAIT_MS) to the end. */
static void
net_run(net_t *net)
{
    pthread_t th[MAXN];
    node_arg_t args[MAXN];
    const char *eps[MAXN];

    sl_log_set_level(SL_LOG_ERROR);
    for (int k = 0; k < net->n; k++) {
        sl_transport_opts_t o;
        sl_transport_opts_default(&o);
        o.run_id = 16;
        o.rank = (uint32_t)k;
        o.size = (uint32_t)net->n;
        o.linger_ms = 0;
        o.timeout_ms = WAIT_MS;
        ck_assert_int_eq(sl_transport_new(&net->t[k], &o), SL_OK);
        eps[k] = sl_transport_endpoint(net->t[k]);
    }
    for (int k = 0; k < net->n; k++)
        ck_assert_int_eq(sl_transport_connect(net->t[k], eps), SL_OK);
    for (int k = 0; k < net->n; k++) {
        args[k] = (node_arg_t){net, k};
        if (net->fn[k])
            ck_assert_int_eq(pthread_create(&th[k], NULL, node_main, &args[k]), 0);
    }
    for (int k = 0; k < net->n; k++)
        if (net->fn[k])
            pthread_join(th[k], NULL);
    for (int k = 0; k < net->n; k++)
        sl_transport_destroy(&net->t[k]);
}

/* Node k's results from m: status, set, events. */
static void
record(net_t *net, int k, sl_members_t *m, sl_status_t st)
{
    net->st[k] = st;
    snprintf(net->err[k], sizeof net->err[k], "%s", st == SL_OK ? "" : sl_err_msg());
    if (!m)
        return;
    net->count[k] = sl_members_count(m);
    net->epoch[k] = (int)sl_members_epoch(m);
    memcpy(net->ranks[k], sl_members_group(m)->ranks, (size_t)net->count[k] * sizeof(uint32_t));
    while (net->nev[k] < MAXN && sl_members_next_event(m, &net->ev[k][net->nev[k]]))
        net->nev[k]++;
}

static void
agree_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    sl_status_t st = sl_members_new(&m, net->t[k], k, net->n, WAIT_MS);

    if (st == SL_OK)
        st = sl_members_agree(m, "a test collective");
    record(net, k, m, st);
    sl_members_destroy(&m);
}

/* Node 3 of 4 never answers: the three others agree on {0, 1, 2} at epoch 1, each with
 * one event naming rank 3, and 3 members left. */
START_TEST(test_agree_drops_silent)
{
    static net_t net;

    memset(&net, 0, sizeof net);
    net.n = 4;
    net.fn[0] = net.fn[1] = net.fn[2] = agree_node;
    net_run(&net);
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], 3);
        ck_assert_int_eq(net.epoch[k], 1);
        for (int i = 0; i < 3; i++)
            ck_assert_uint_eq(net.ranks[k][i], (uint32_t)i);
        ck_assert_int_eq(net.nev[k], 1);
        ck_assert_int_eq(net.ev[k][0].rank, 3);
        ck_assert_int_eq(net.ev[k][0].members, 3);
        ck_assert_msg(strstr(net.ev[k][0].why, "a test collective timed out") != NULL, "%s",
                      net.ev[k][0].why);
    }
}
END_TEST

/* The mean of COUNT floats over the group: the inputs test_node_input(rank, i), so that
 * the sums are exact; then the group's ranks, one float from each node, gathered and
 * checked against g's. */
typedef struct {
    net_t *net;
    int k;
    uint64_t round;
} mean_t;

static sl_status_t
mean_over(void *ctx, const sl_group_t *g, size_t *count)
{
    const mean_t *j = ctx;
    sl_collective_opts_t o = {.timeout_ms = WAIT_MS, .group = g};
    float *out = j->net->out[j->k], ranks[MAXN], me = (float)j->k;
    size_t ones[MAXN];

    (void)count; /* all COUNT */
    for (int r = 0; r < MAXN; r++)
        ones[r] = 1;
    for (int i = 0; i < COUNT; i++)
        out[i] = test_node_input((uint32_t)j->k, (size_t)i);
    SL_TRY(sl_allreduce_sum(j->net->t[j->k], 5, j->round, out, COUNT, &o));
    for (int i = 0; i < COUNT; i++)
        out[i] /= (float)g->n;
    SL_TRY(sl_allgather(j->net->t[j->k], 5, j->round, &me, ranks, ones, &o));
    for (uint32_t p = 0; p < g->n; p++)
        if (ranks[p] != (float)g->ranks[p])
            return sl_err_set(SL_ERR_INVALID, "place %u of the gather holds rank %g, not %u",
                              (unsigned)p, (double)ranks[p], (unsigned)g->ranks[p]);
    return SL_OK;
}

static void
mean_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    mean_t j = {net, k, 1};
    size_t count = COUNT;
    sl_status_t st = sl_members_new(&m, net->t[k], k, net->n, WAIT_MS);

    if (st == SL_OK)
        st = sl_members_run(m, mean_over, &j, net->out[k], &count, &net->nodes[k], "a mean");
    record(net, k, m, st);
    sl_members_destroy(&m);
}

/* Of n nodes, rank `silent` never answers: the mean over all of them times out, and
 * the n - 1 left halve and double over their places, each pairing with the place whose
 * bit differs (and with n - 1 = 2^L m, going round the rings of the m places that agree
 * below bit L): the mean over them, exactly, on every one; and their ranks gathered by
 * doubling, each in its place. */
static void
check_mean_over_survivors(int n, int silent)
{
    static net_t net;
    uint32_t left[MAXN];
    int nl = 0;

    memset(&net, 0, sizeof net);
    net.n = n;
    for (int k = 0; k < n; k++)
        if (k != silent) {
            net.fn[k] = mean_node;
            left[nl++] = (uint32_t)k;
        }
    net_run(&net);
    ck_assert(sl_allreduce_halves((uint32_t)nl, 0, 0));
    for (int j = 0; j < nl; j++) {
        int k = (int)left[j];
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], nl);
        ck_assert_int_eq(net.epoch[k], 1);
        ck_assert_int_eq(net.nodes[k], nl);
        for (int r = 0; r < nl; r++)
            ck_assert_uint_eq(net.ranks[k][r], left[r]);
        for (int i = 0; i < COUNT; i++) {
            float want = 0;
            for (int r = 0; r < nl; r++)
                want += test_node_input(left[r], (size_t)i);
            ck_assert_msg(net.out[k][i] == want / (float)nl, "node %d, float %d: %g, want %g", k, i,
                          (double)net.out[k][i], (double)(want / (float)nl));
        }
    }
}

/* Of 5 nodes rank 1 stops: ranks {0, 2, 3, 4} halve and double (a power of two). Of 7
 * rank 5 stops: {0, 1, 2, 3, 4, 6} halve once, places {0, 2, 4} and {1, 3, 5} (ranks
 * {0, 2, 4} and {1, 3, 6}) go round their rings of 3, and double once. */
START_TEST(test_mean_halves_over_survivors)
{
    check_mean_over_survivors(5, 1);
    check_mean_over_survivors(7, 5);
}
END_TEST

/* Node 2's second failure: it sends its proposal for epoch 1 (it completed no
 * collective; its view: all four) to node 0 only, then stops. */
static void
half_proposal_node(net_t *net, int k)
{
    unsigned char p[4 * (1 + MAXN)];
    sl_wire_key_t key = {1, SL_MEMBERS_COMPONENT, 0, 0, SL_WIRE_DATA};

    sl_put_u32(p, 0);
    for (int r = 0; r < net->n; r++)
        sl_put_u32(p + 4 * (r + 1), (uint32_t)r);
    net->st[k] = sl_transport_send(net->t[k], &key, p, 4 * (uint32_t)(net->n + 1), SL_WIRE_BYTES,
                                   1.0f, 0, WAIT_MS);
}

/* Of 4 nodes, 3 never answers and 2 fails during the re-forming, having reached node 0
 * only: node 0 agrees on {0, 1, 2}, node 1 on {0, 1}; their means over these sets carry
 * different tags and time out, and the second agreement (epoch 2) gives both {0, 1},
 * over which the mean is done: exactly (x0 + x1) / 2 on both. */
START_TEST(test_second_failure_while_reforming)
{
    static net_t net;

    memset(&net, 0, sizeof net);
    net.n = 4;
    net.fn[0] = net.fn[1] = mean_node;
    net.fn[2] = half_proposal_node;
    net_run(&net);
    ck_assert_int_eq(net.st[2], SL_OK);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], 2);
        ck_assert_int_eq(net.epoch[k], 2);
        ck_assert_int_eq(net.nodes[k], 2);
        ck_assert_uint_eq(net.ranks[k][0], 0);
        ck_assert_uint_eq(net.ranks[k][1], 1);
        for (int i = 0; i < COUNT; i++)
            ck_assert_msg(net.out[k][i] ==
                              (test_node_input(0, (size_t)i) + test_node_input(1, (size_t)i)) /
                                  2.0f,
                          "node %d, float %d: %g", k, i, (double)net.out[k][i]);
    }
    /* node 0 dropped 3, then 2; node 1 both at once */
    ck_assert_int_eq(net.nev[0], 2);
    ck_assert_int_eq(net.ev[0][0].rank, 3);
    ck_assert_int_eq(net.ev[0][0].members, 3);
    ck_assert_int_eq(net.ev[0][1].rank, 2);
    ck_assert_int_eq(net.ev[0][1].members, 2);
    ck_assert_int_eq(net.nev[1], 2);
    ck_assert_int_eq(net.ev[1][1].members, 2);
}
END_TEST

/* The first collective of the behind test: node 0 completes it (result 42 + i), node 1
 * misses its end (a timeout, as when the dead node's last frames reached only node 0). */
static sl_status_t
first_over(void *ctx, const sl_group_t *g, size_t *count)
{
    const mean_t *j = ctx;

    (void)g;
    (void)count;
    if (j->k == 1)
        return sl_err_set(SL_ERR_TIMEOUT, "the end of the first collective did not come");
    for (int i = 0; i < COUNT; i++)
        j->net->first[j->k][i] = 42.0f + (float)i;
    return SL_OK;
}

static void
behind_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    mean_t j = {net, k, 2};
    size_t count = COUNT;
    int nodes = 0;
    sl_status_t st = sl_members_new(&m, net->t[k], k, net->n, WAIT_MS);

    if (st == SL_OK)
        st = sl_members_run(m, first_over, &j, net->first[k], &count, &nodes, "the first");
    if (st == SL_OK && (nodes != 3 || count != COUNT))
        st = sl_err_set(SL_ERR_INVALID, "the first collective's result: %zu floats over %d nodes",
                        count, nodes);
    if (st == SL_OK)
        st = sl_members_run(m, mean_over, &j, net->out[k], &count, &net->nodes[k], "the second");
    record(net, k, m, st);
    sl_members_destroy(&m);
}

/* Of 3 nodes, 2 is dead; node 0 completed the first collective, node 1 did not. At the
 * agreement node 1 is one behind and takes node 0's result (over the 3 nodes it was
 * done by); the second collective is then the mean of nodes 0 and 1. */
START_TEST(test_behind_takes_result)
{
    static net_t net;

    memset(&net, 0, sizeof net);
    net.n = 3;
    net.fn[0] = net.fn[1] = behind_node;
    net_run(&net);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], 2);
        ck_assert_int_eq(net.nodes[k], 2);
        for (int i = 0; i < COUNT; i++) {
            ck_assert(net.first[k][i] == 42.0f + (float)i);
            ck_assert(net.out[k][i] ==
                      (test_node_input(0, (size_t)i) + test_node_input(1, (size_t)i)) / 2.0f);
        }
    }
}
END_TEST

/* The mean of BIG floats: segments of 256 KiB, lent to ZeroMQ (SL_SEND_LEND). */
static sl_status_t
big_over(void *ctx, const sl_group_t *g, size_t *count)
{
    const mean_t *j = ctx;
    sl_collective_opts_t o = {.timeout_ms = WAIT_MS, .group = g};
    float *out = j->net->big[j->k];

    (void)count;
    for (size_t i = 0; i < BIG; i++)
        out[i] = test_node_input((uint32_t)j->k, i);
    SL_TRY(sl_allreduce_sum(j->net->t[j->k], 6, j->round, out, BIG, &o));
    for (size_t i = 0; i < BIG; i++)
        out[i] /= (float)g->n;
    return SL_OK;
}

static void
big_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    mean_t j = {net, k, 1};
    size_t count = BIG;
    sl_status_t st = sl_members_new(&m, net->t[k], k, net->n, WAIT_MS);

    if (st == SL_OK)
        st = sl_members_run(m, big_over, &j, net->big[k], &count, &net->nodes[k], "a big mean");
    record(net, k, m, st);
    sl_members_destroy(&m);
}

/* A node that is gone: its transport closed, as a killed process's. */
static void
gone_node(net_t *net, int k)
{
    sl_transport_destroy(&net->t[k]);
}

/* Of 3 nodes, 2 is gone (its sockets closed) while the others send it frames they lend
 * to ZeroMQ: they stay queued for it until the agreement forgets it
 * (sl_transport_forget); without that, every later collective would wait for them to
 * come back and time out. The mean over nodes 0 and 1 then goes through. */
START_TEST(test_lent_frames_to_the_dead)
{
    static net_t net;

    memset(&net, 0, sizeof net);
    net.n = 3;
    net.fn[0] = net.fn[1] = big_node;
    net.fn[2] = gone_node;
    for (int k = 0; k < 2; k++)
        ck_assert_ptr_nonnull(net.big[k] = malloc(BIG * sizeof(float)));
    net_run(&net);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], 2);
        for (size_t i = 0; i < BIG; i++)
            ck_assert(net.big[k][i] == (test_node_input(0, i) + test_node_input(1, i)) / 2.0f);
        free(net.big[k]);
    }
}
END_TEST

/* Collectives over a group: the ranks must increase and hold this node; a group of one
 * is a no-op; a group of {0, 2} of 3 nodes sums only theirs, node 1 not taking part. */
static void
group_node(net_t *net, int k)
{
    static const uint32_t pair[2] = {0, 2}, bad[2] = {2, 0};
    sl_group_t g = {pair, 2, 7}, wrong = {bad, 2, 7}, alone = {pair + (k == 2), 1, 7};
    sl_collective_opts_t o = {.timeout_ms = WAIT_MS, .group = &wrong};
    float *out = net->out[k];
    sl_status_t st;

    for (int i = 0; i < COUNT; i++)
        out[i] = test_node_input((uint32_t)k, (size_t)i);
    st = sl_allreduce_sum(net->t[k], 1, 0, out, COUNT, &o) == SL_ERR_INVALID
             ? SL_OK
             : sl_err_set(SL_ERR_INVALID, "a group of decreasing ranks was taken");
    o.group = &alone;
    if (st == SL_OK)
        st = sl_allreduce_sum(net->t[k], 1, 1, out, COUNT, &o);
    o.group = &g;
    if (st == SL_OK)
        st = sl_allreduce_sum(net->t[k], 1, 2, out, COUNT, &o);
    net->st[k] = st;
    snprintf(net->err[k], sizeof net->err[k], "%s", st == SL_OK ? "" : sl_err_msg());
}

START_TEST(test_group_collective)
{
    static net_t net;

    memset(&net, 0, sizeof net);
    net.n = 3;
    net.fn[0] = net.fn[2] = group_node;
    net_run(&net);
    for (int k = 0; k < 3; k += 2) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        for (int i = 0; i < COUNT; i++)
            ck_assert(net.out[k][i] ==
                      test_node_input(0, (size_t)i) + test_node_input(2, (size_t)i));
    }
}
END_TEST

/* Admission: nodes 0 and 1 drop the silent node 2, then step on with a mean per step
 * (round = step), polling for admissions between steps (blocks of ADMIT_BLOCK steps);
 * node 2 then asks to come back, enters at the step it is given and takes part in the
 * means after it. Every node stops ADMIT_AFTER steps past its admission step. */
enum { ADMIT_BLOCK = 4, ADMIT_AFTER = 3, ADMIT_END = 100000 };

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int dropped; /* nodes 0 and 1 that have dropped node 2 */
    int deaf;    /* node 1 misses the admission */
    int stale;   /* node 0 sent node 2 a notice of node 1's admission first */
    long at[MAXN];
} admit_t;

static admit_t adm = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, {0}};

/* What node 2's earlier process, a member then, was sent before it was killed and never
 * read: the coordinator's notice of node 1's admission (sl_members.c's frame), waiting
 * at node 2's endpoint for the new process. */
static void
send_stale_notice(net_t *net)
{
    sl_wire_key_t key = {0, SL_MEMBERS_COMPONENT + 4, 0, 2, SL_WIRE_DATA};
    unsigned char buf[12];

    sl_put_u32(buf, 1);
    sl_put_u64(buf + 4, 96);
    ck_assert_int_eq(
        sl_transport_send(net->t[0], &key, buf, sizeof buf, SL_WIRE_BYTES, 1.0f, 0, WAIT_MS),
        SL_OK);
}

/* Means at rounds from + 1 to ADMIT_AFTER past the admission (polling between them
 * until it comes, when at is -1). */
static sl_status_t
admit_steps(net_t *net, int k, sl_members_t *m, long from, long *at)
{
    mean_t j = {net, k, 0};
    const uint32_t *give;
    int ngive;

    for (long step = from + 1; *at < 0 || step <= *at + ADMIT_AFTER; step++) {
        size_t count = COUNT;

        if (step == ADMIT_END)
            return sl_err_set(SL_ERR_TIMEOUT, "node 2 was never admitted");
        j.round = (uint64_t)step;
        SL_TRY(sl_members_run(m, mean_over, &j, net->out[k], &count, &net->nodes[k], "a mean"));
        SL_TRY(sl_members_poll(m, step, ADMIT_BLOCK, ADMIT_END, &give, &ngive));
        if (*at < 0 && sl_members_count(m) == 3) {
            pthread_mutex_lock(&adm.lock);
            *at = step;
            pthread_mutex_unlock(&adm.lock);
        }
        if (ngive != (k == 0 && *at == step))
            return sl_err_set(SL_ERR_INVALID, "node %d has %d ranks to give the state at step %ld",
                              k, ngive, step);
    }
    return SL_OK;
}

/* Node 1 of the missed-notice case: never polls, so it never hears of the admission;
 * it stops ADMIT_AFTER steps after the one node 0 admitted node 2 at. */
static sl_status_t
deaf_steps(net_t *net, int k, sl_members_t *m)
{
    mean_t j = {net, k, 0};

    for (long step = 1;; step++) {
        size_t count = COUNT;
        long at;

        pthread_mutex_lock(&adm.lock);
        at = adm.at[0];
        pthread_mutex_unlock(&adm.lock);
        if (at >= 0 && step > at + ADMIT_AFTER)
            return SL_OK;
        if (step == ADMIT_END)
            return sl_err_set(SL_ERR_TIMEOUT, "node 2 was never admitted");
        j.round = (uint64_t)step;
        SL_TRY(sl_members_run(m, mean_over, &j, net->out[k], &count, &net->nodes[k], "a mean"));
    }
}

/* Nodes 0 and 1: their members state, agreed on without the silent node 2, which then
 * may ask to come back (adm.dropped). */
static sl_status_t
agree_without_node2(net_t *net, int k, sl_members_t **m)
{
    sl_status_t st = sl_members_new(m, net->t[k], k, net->n, WAIT_MS);

    if (st == SL_OK)
        st = sl_members_agree(*m, "a test collective");
    if (k == 0 && adm.stale)
        send_stale_notice(net); /* before node 2 asks */
    pthread_mutex_lock(&adm.lock);
    adm.dropped++;
    pthread_cond_broadcast(&adm.cond);
    pthread_mutex_unlock(&adm.lock);
    return st;
}

/* Node 2: its members state and, once nodes 0 and 1 have dropped it, its request to
 * come back. */
static sl_status_t
ask_comeback(net_t *net, int k, sl_members_t **m, long *at, int *coordinator)
{
    sl_status_t st = sl_members_new(m, net->t[k], k, net->n, WAIT_MS);

    pthread_mutex_lock(&adm.lock);
    while (adm.dropped < 2)
        pthread_cond_wait(&adm.cond, &adm.lock);
    pthread_mutex_unlock(&adm.lock);
    if (st == SL_OK)
        st = sl_members_join(*m, 20 * WAIT_MS, at, coordinator);
    return st;
}

static void
member_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    sl_status_t st = agree_without_node2(net, k, &m);

    if (st == SL_OK && k == 1 && adm.deaf)
        st = deaf_steps(net, k, m);
    else if (st == SL_OK)
        st = admit_steps(net, k, m, 0, &adm.at[k]);
    record(net, k, m, st);
    sl_members_destroy(&m);
}

static void
newcomer_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    int coordinator = -1;
    sl_status_t st = ask_comeback(net, k, &m, &adm.at[k], &coordinator);

    if (st == SL_OK && coordinator != 0)
        st = sl_err_set(SL_ERR_INVALID, "admitted by node %d", coordinator);
    if (st == SL_OK)
        st = sl_members_enter(m, coordinator, 20 * WAIT_MS);
    if (st == SL_OK)
        st = admit_steps(net, k, m, adm.at[k], &adm.at[k]);
    record(net, k, m, st);
    sl_members_destroy(&m);
}

/* The admission cases' three nodes, on a net cleared first: member for nodes 0 and 1,
 * newcomer for node 2. */
static void
run_admission(net_t *net, node_fn member, node_fn newcomer)
{
    memset(net, 0, sizeof *net);
    net->n = 3;
    net->fn[0] = net->fn[1] = member;
    net->fn[2] = newcomer;
    /* before the threads: node 1 may read node 0's before node 0 has run */
    for (int k = 0; k < MAXN; k++)
        adm.at[k] = -1;
    net_run(net);
}

/* Node k of an admission that went through: admitted at node 0's step, and its last
 * mean over the three nodes. */
static void
assert_admitted(const net_t *net, int k)
{
    ck_assert_msg(net->st[k] == SL_OK, "node %d: %s", k, net->err[k]);
    ck_assert_int_eq(adm.at[k], adm.at[0]);
    ck_assert_int_eq(net->count[k], 3);
    ck_assert_int_eq(net->nodes[k], 3);
}

/* Nodes 0 and 1 agree on {0, 1} (epoch 1) without node 2; node 2 asks node 0 to come
 * back and is admitted at a multiple of ADMIT_BLOCK: all three then hold {0, 1, 2} at
 * epoch 1 and the last means are over the three. */
START_TEST(test_admit_comeback)
{
    static net_t net;

    run_admission(&net, member_node, newcomer_node);
    for (int k = 0; k < 3; k++) {
        assert_admitted(&net, k);
        ck_assert_int_eq(adm.at[k] % ADMIT_BLOCK, 0);
        ck_assert_int_eq(net.epoch[k], 1);
        for (int i = 0; i < COUNT; i++)
            ck_assert_msg(net.out[k][i] ==
                              (test_node_input(0, (size_t)i) + test_node_input(1, (size_t)i) +
                               test_node_input(2, (size_t)i)) /
                                  3.0f,
                          "node %d, float %d: %g", k, i, (double)net.out[k][i]);
    }
}
END_TEST

/* As above, but node 1 misses the notice: it averages over {0, 1} after the admission
 * step, nodes 0 and 2 over {0, 1, 2}; that times out, the agreement drops node 2 (node
 * 1's view lacks it), nodes 0 and 1 go on together, and node 2, left alone, fails with
 * one line instead of going on by itself. */
START_TEST(test_admit_missed)
{
    static net_t net;

    adm.deaf = 1;
    run_admission(&net, member_node, newcomer_node);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], 2);
        ck_assert_int_eq(net.nodes[k], 2);
        for (int i = 0; i < COUNT; i++)
            ck_assert(net.out[k][i] ==
                      (test_node_input(0, (size_t)i) + test_node_input(1, (size_t)i)) / 2.0f);
    }
    ck_assert_int_eq(net.st[2], SL_ERR_DROPPED);
    ck_assert_msg(strstr(net.err[2], "no member answers it any more"), "%s", net.err[2]);
}
END_TEST

/* Nodes 0 and 1 at the run's end (every step is fewer than SL_MEMBERS_ADMIT_LEAD from
 * it): node 2 asks to come back and is told it is too late, as SL_ERR_DROPPED, which
 * shoal run takes for a node left out, not for a failure of the run. */
static volatile int late_asked;

static void
late_member(net_t *net, int k)
{
    sl_members_t *m = NULL;
    sl_status_t st = agree_without_node2(net, k, &m);
    mean_t j = {net, k, 0};

    for (long step = 1; st == SL_OK; step++) {
        size_t count = COUNT;
        const uint32_t *give;
        int ngive, done;

        pthread_mutex_lock(&adm.lock);
        done = late_asked;
        pthread_mutex_unlock(&adm.lock);
        if (done)
            break;
        j.round = (uint64_t)step;
        st = sl_members_run(m, mean_over, &j, net->out[k], &count, &net->nodes[k], "a mean");
        if (st == SL_OK)
            st = sl_members_poll(m, step, ADMIT_BLOCK, step + 1, &give, &ngive);
    }
    record(net, k, m, st);
    sl_members_destroy(&m);
}

static void
late_newcomer(net_t *net, int k)
{
    sl_members_t *m = NULL;
    int coordinator = -1;
    long at = -1;
    sl_status_t st = ask_comeback(net, k, &m, &at, &coordinator);

    record(net, k, NULL, st);
    pthread_mutex_lock(&adm.lock);
    late_asked = 1;
    pthread_mutex_unlock(&adm.lock);
    sl_members_destroy(&m);
}

START_TEST(test_admit_too_late)
{
    static net_t net;

    run_admission(&net, late_member, late_newcomer);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
    ck_assert_int_eq(net.st[2], SL_ERR_DROPPED);
    ck_assert_str_eq(net.err[2],
                     "rejoin: node 0 says the run is at its end: too late to come back");
}
END_TEST

/* As test_admit_comeback, but node 2's endpoint holds a notice of another admission, sent to its
 * earlier process (a fast churn: bench/README.md, "Churn"): node 2 passes over it, takes
 * its own, and is admitted as above. */
START_TEST(test_admit_stale_notice)
{
    static net_t net;

    adm.stale = 1;
    run_admission(&net, member_node, newcomer_node);
    for (int k = 0; k < 3; k++)
        assert_admitted(&net, k);
}
END_TEST

/* Two comebacks, the second admitted while the first waits for its step: nodes 0 and 1
 * drop the silent nodes 2 and 3; node 2 is admitted at K2; node 3 asks once the members
 * are at K2 - 1 and is admitted at a K3 past K2. Node 2 enters at K2, so it never gets
 * the notice of node 3, which went out before: the set it is handed carries that
 * admission, and all four then hold {0, 1, 2, 3} and average over them. The members step
 * only as far as the test allows (two.allowed), node 0 taking requests meanwhile. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int dropped;
    long allowed, at[MAXN], done[MAXN];
} two = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, {0}, {0}};

static long
two_get(const long *v)
{
    long x;

    pthread_mutex_lock(&two.lock);
    x = *v;
    pthread_mutex_unlock(&two.lock);
    return x;
}

static void
two_set(long *v, long x)
{
    pthread_mutex_lock(&two.lock);
    *v = x;
    pthread_cond_broadcast(&two.cond);
    pthread_mutex_unlock(&two.lock);
}

/* Waits until *v >= x (the other threads move it), failing after a while. */
static void
two_wait(const long *v, long x)
{
    double deadline = test_deadline();

    while (two_get(v) < x)
        ck_assert_msg(test_wait_more(deadline), "waited in vain for %ld", x);
}

/* Means from step from + 1, polling between steps, each step once the test allows it;
 * ends ADMIT_AFTER steps after the set holds all four. */
static sl_status_t
two_steps(net_t *net, int k, sl_members_t *m, long from)
{
    mean_t j = {net, k, 0};
    const uint32_t *give;
    int ngive;
    long all = sl_members_count(m) == 4 ? from : -1; /* node 3 enters with all four */

    for (long step = from + 1; all < 0 || step <= all + ADMIT_AFTER; step++) {
        size_t count = COUNT;

        if (step == ADMIT_END)
            return sl_err_set(SL_ERR_TIMEOUT, "node 3 was never admitted");
        while (two_get(&two.allowed) < step) /* node 0 takes requests meanwhile */
            SL_TRY(sl_members_poll(m, step - 1, ADMIT_BLOCK, ADMIT_END, &give, &ngive));
        j.round = (uint64_t)step;
        SL_TRY(sl_members_run(m, mean_over, &j, net->out[k], &count, &net->nodes[k], "a mean"));
        SL_TRY(sl_members_poll(m, step, ADMIT_BLOCK, ADMIT_END, &give, &ngive));
        two_set(&two.done[k], step);
        if (all < 0 && sl_members_count(m) == 4)
            all = step;
    }
    return SL_OK;
}

static void
two_node(net_t *net, int k)
{
    sl_members_t *m = NULL;
    sl_status_t st = sl_members_new(&m, net->t[k], k, net->n, WAIT_MS);
    int coordinator = -1;
    long at = 0;

    if (k < 2) {
        if (st == SL_OK)
            st = sl_members_agree(m, "a test collective");
        pthread_mutex_lock(&two.lock);
        two.dropped++;
        pthread_cond_broadcast(&two.cond);
        pthread_mutex_unlock(&two.lock);
    } else {
        pthread_mutex_lock(&two.lock);
        while (two.dropped < 2)
            pthread_cond_wait(&two.cond, &two.lock);
        pthread_mutex_unlock(&two.lock);
        if (k == 3) { /* the members at K2 - 1, waiting */
            two_wait(&two.at[2], 1);
            two_set(&two.allowed, two_get(&two.at[2]) - 1);
            two_wait(&two.done[0], two_get(&two.at[2]) - 1);
            two_wait(&two.done[1], two_get(&two.at[2]) - 1);
        }
        if (st == SL_OK)
            st = sl_members_join(m, 20 * WAIT_MS, &at, &coordinator);
        two_set(&two.at[k], at);
        if (k == 3)
            two_set(&two.allowed, ADMIT_END);
        if (st == SL_OK)
            st = sl_members_enter(m, coordinator, 40 * WAIT_MS);
    }
    if (st == SL_OK)
        st = two_steps(net, k, m, at);
    record(net, k, m, st);
    sl_members_destroy(&m);
}

START_TEST(test_admit_two_comebacks)
{
    static net_t net;

    memset(&net, 0, sizeof net);
    net.n = 4;
    for (int k = 0; k < 4; k++)
        net.fn[k] = two_node;
    net_run(&net);
    ck_assert_msg(two.at[3] > two.at[2] && two.at[2] > 0, "K2 %ld, K3 %ld", two.at[2], two.at[3]);
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(net.st[k] == SL_OK, "node %d: %s", k, net.err[k]);
        ck_assert_int_eq(net.count[k], 4);
        ck_assert_int_eq(net.nodes[k], 4);
        ck_assert_int_eq(net.epoch[k], net.epoch[0]);
        for (int i = 0; i < COUNT; i++)
            ck_assert_msg(net.out[k][i] ==
                              (test_node_input(0, (size_t)i) + test_node_input(1, (size_t)i) +
                               test_node_input(2, (size_t)i) + test_node_input(3, (size_t)i)) /
                                  4.0f,
                          "node %d, float %d: %g", k, i, (double)net.out[k][i]);
    }
}
END_TEST

static Suite *
members_suite(void)
{
    Suite *s = suite_create("members");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_group_collective);
    tcase_add_test(core, test_agree_drops_silent);
    tcase_add_test(core, test_mean_halves_over_survivors);
    tcase_add_test(limits, test_second_failure_while_reforming);
    tcase_add_test(limits, test_behind_takes_result);
    tcase_add_test(limits, test_lent_frames_to_the_dead);
    tcase_add_test(limits, test_admit_comeback);
    tcase_add_test(limits, test_admit_stale_notice);
    tcase_add_test(limits, test_admit_too_late);
    tcase_add_test(limits, test_admit_missed);
    tcase_add_test(limits, test_admit_two_comebacks);
    tcase_set_timeout(core, 60);
    tcase_set_timeout(limits, 60);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(members_suite());
}
