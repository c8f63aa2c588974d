/* tests/unit/test_util.h: the forked-cluster harness of the multi-process tests, and
 * waiting on events instead of the clock.
 *
 * A cluster is n node processes forked from the Check test process. Each binds a
 * transport on ipc:// in the cluster's private temporary folder or on
 * tcp://127.0.0.1:*, sends its bound endpoint to the parent through a pipe, receives
 * the full endpoint table, connects, and runs the case's node function; its exit status
 * is the function's result (0: every check passed). The parent waits on the nodes'
 * pipes and on waitpid, never on a sleep. When a node fails (non-zero exit, a signal,
 * a broken endpoint exchange) the parent kills and reaps all the others at once; a
 * cluster that runs past its hang guard is killed and reaped too; nodes also die with
 * the test process (PR_SET_PDEATHSIG). Nothing is left running and the folder is
 * removed, pass or fail.
 *
 * Besides its exit status a node hands the parent a few words (res) and, when the case
 * gives one, a result blob of the case's own shape (out). Nodes can keep in step
 * through the parent (test_cluster_barrier), which waits only for the nodes still
 * running: a node may leave early on purpose by returning 0 (with final_barrier 0), and
 * the others go on without it.
 *
 * Timing: a test must not depend on how fast a loaded machine runs. Waits for
 * something that will come use TEST_WAIT_MS (they return as soon as it comes); loops
 * that poll a counter use test_deadline / test_wait_more, a hang guard that fails the
 * case only when nothing happened for TEST_HANG_S. A short timeout belongs only where
 * the timeout itself is what is tested, and then only its lower bound is exact.
 *
 * Three sync nodes in one process, threads over loopback transports (test_trio_*), are
 * the harness of check_sync, check_sync_rows and check_sync_final.
 *
 * Used by check_transport, check_transport_cluster, check_shm, check_sparse and
 * check_sync_algo; any test that forks nodes on transports should use it rather than a
 * copy (every test program links it, through TEST_LIBS in tests/Makemodule.am: #include
 * "test_util.h"). Owns nothing of the library; it must not reach into a transport's
 * internals (only sl_transport.h's calls). */
#ifndef SL_TEST_UTIL_H
#define SL_TEST_UTIL_H

#include <check.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "sync/sl_sync.h"
#include "transport/sl_transport.h"

#define TEST_CLUSTER_MAXN 12
#define TEST_CLUSTER_NRES 3       /* words of result a node hands back */
#define TEST_CLUSTER_EP_BYTES 256 /* room for one endpoint */
#define TEST_CLUSTER_HUNG (-2)    /* status: killed by the hang guard */
#define TEST_CLUSTER_STOPPED (-3) /* status: killed because another node failed */

/* A generous wait for something that will come (a frame, a collective's progress). */
#define TEST_WAIT_MS 60000
/* How long a polling loop or a whole cluster may go on before it counts as hung. */
#define TEST_HANG_S 120.0
/* How late a timeout under test may return before it counts as ignored (a loaded
 * machine can be seconds late): checks of timeouts are exact only in their lower bound,
 * since no wait may end before its time. */
#define TEST_LATE_S 20.0
/* The round of the barrier every node passes before its transport goes (final_barrier):
 * above every other round a case uses. A case that runs barriers of its own numbers
 * them up to it, since a frame more than SL_MAILBOX_AHEAD_ROUNDS beyond the last
 * round asked for is refused. */
#define TEST_FINAL_BARRIER_ROUND ((uint64_t)1 << 40)

typedef struct test_cluster test_cluster_t;

/* One node's part, run in its own process on a connected transport t. Returns 0 when
 * all its checks passed, else a small number naming the failed check (the node's exit
 * status). res[0 .. TEST_CLUSTER_NRES) start at 0 and go to the parent. */
typedef int (*test_node_fn)(sl_transport_t *t, test_cluster_t *c, uint64_t *res);

struct test_cluster {
    /* What to run: test_cluster_init sets every field; change them before running. */
    int n;             /* nodes, 1 .. TEST_CLUSTER_MAXN */
    int ipc;           /* 1: ipc:// endpoints in dir; 0: tcp://127.0.0.1:* */
    uint64_t run_id;   /* the nodes' sl_transport_opts_t.run_id */
    int timeout_ms;    /* their transport timeout (TEST_WAIT_MS) */
    int shm;           /* shared-memory lanes (sl_transport_opts_t.shm, 1) */
    int heartbeat_ms;  /* ZMTP heartbeats of their DEALERs (200; 0 off) */
    int ring;          /* sl_transport_opts_t.allreduce_ring (0) */
    test_node_fn node; /* the node's part */
    const void *arg;   /* for node, borrowed */
    int final_barrier; /* 1: a node that passed passes a barrier before it destroys its
                          transport (what it sent last may still be queued); 0 when a
                          node leaves early or dies */
    /* In the parent, once every endpoint is known and before the table goes out. */
    void (*inject)(test_cluster_t *c, char eps[][TEST_CLUSTER_EP_BYTES]);
    /* In each node, after its transport is destroyed (to free what must outlive it). */
    void (*node_exit)(void);
    int kill_rank; /* -1, or a node to SIGKILL once it has called
                      test_cluster_signal kill_after times (its death is expected) */
    int kill_after;
    double hang_s; /* the cluster's hang guard (TEST_HANG_S) */
    /* NULL, or out_bytes for each node (borrowed): node k's result blob, zeroed before
       the nodes start, filled by the node (test_cluster_out), lands at
       (char *)out + k * out_bytes when the node returns */
    void *out;
    size_t out_bytes;
    /* Filled by test_cluster_run. */
    char dir[64];                  /* the private temporary folder */
    int status[TEST_CLUSTER_MAXN]; /* waitpid status, or HUNG / STOPPED */
    uint64_t res[TEST_CLUSTER_MAXN][TEST_CLUSTER_NRES];
    int signals[TEST_CLUSTER_MAXN]; /* test_cluster_signal calls seen */
    int failed_rank;                /* first node that failed, else -1 */
    /* Private to a node process. */
    int up_fd, down_fd, rank;
};

/* Defaults for n nodes running fn(arg) with run id run_id: tcp unless ipc, timeout
 * TEST_WAIT_MS, lanes on, final barrier on, nobody killed, hang guard TEST_HANG_S. */
void test_cluster_init(test_cluster_t *c, int n, int ipc, uint64_t run_id, test_node_fn fn,
                       const void *arg);

/* Forks the nodes, runs them, reaps them all and removes the folder. Returns 0 when
 * every node exited 0 (the killed kill_rank excepted, which must have died of SIGKILL),
 * else 1. Fails the case (ck_assert) only when it cannot fork or make its folder. */
int test_cluster_run(test_cluster_t *c);

/* test_cluster_run, then asserts that every node exited 0, naming the first that did
 * not, how (exit status, signal, hang guard) and what (a few words on the case). Not
 * for a case with kill_rank (check its statuses after test_cluster_run). */
void test_cluster_assert_ok(test_cluster_t *c, const char *what);

/* In a node: tells the parent one more step is done (see kill_rank). */
void test_cluster_signal(test_cluster_t *c);

/* In a node: a barrier relayed by the parent, through the pipes (no frames). Returns 0
 * once every node still running has called it; a node that has exited (left early,
 * killed) is not waited for. -1 when the parent is gone or hung. Every node still
 * running must call it as often as the others. */
int test_cluster_barrier(test_cluster_t *c);

/* In a node: its own result blob (out_bytes, zero at the start), NULL without out. */
void *test_cluster_out(test_cluster_t *c);

/* In a node: a small frame (kind DATA, this component, payload one float) to every other
 * node and one from each, twice (rounds round and round + 1). Frames over ZeroMQ keep
 * their order, so afterwards every frame a peer sent this node over ZeroMQ before the
 * call has been read, and every answer such a frame called for (a lane's accept) has
 * been read by the node it answered: e.g. lanes offered so far are in use. A collective
 * step of its own: every node must call it. SL_OK, or the first failing status. */
sl_status_t test_settle(sl_transport_t *t, uint32_t component, uint64_t round);

/* Connects t[0] and t[1], ranks 0 and 1 of a run of 2, to each other; with frame_mac,
 * each first learns both session keys, as the rendezvous would hand them over. */
void test_pair_connect(sl_transport_t *t[2], int frame_mac);

/* Connects late, a second transport for rank 1 (its new process, or an outsider), to t0
 * alone; with sessions (2 * SL_MAC_SESSION_BYTES; NULL: no frame MACs) late first learns
 * t0's session key and its own, which sessions holds afterwards. */
void test_pair_join(sl_transport_t *t0, sl_transport_t *late, unsigned char *sessions);

/* Adds to *sent and *recvd the floats node me of n sends and receives in an
 * sl_allreduce_sum of count floats in fp32, ring as sl_transport_opts_t.allreduce_ring; worked
 * out apart from sl_collective.c, from where each algorithm moves the segments. */
void test_allreduce_floats(size_t count, uint32_t n, uint32_t me, int ring, size_t *sent,
                           size_t *recvd);

/* Adds to *sent and *recvd the floats node me of n sends and receives in an
 * sl_allgather of counts (fp32), by recursive doubling (doubles) or around the ring,
 * worked out apart from sl_collective.c as test_allreduce_floats is. */
void test_allgather_floats(const size_t *counts, uint32_t n, uint32_t me, int doubles, size_t *sent,
                           size_t *recvd);

/* Node k's i-th input: a multiple of 1/64 in [-8, 8), so sums of up to 12 of them are
 * exact in float whatever the order of addition. */
float test_node_input(uint32_t k, size_t i);

/* A hang guard for a polling loop: the time TEST_HANG_S from now. */
double test_deadline(void);

/* Gives the CPU away for a moment; 1 while deadline is ahead, 0 once it has passed:
 *   double dl = test_deadline();
 *   while (!event_seen())
 *       ck_assert_msg(test_wait_more(dl), "no event in %g s", TEST_HANG_S); */
int test_wait_more(double deadline);

/* Three sync nodes in one process (check_sync*.c): a thread each, over loopback
 * transports. The model is laid out as the trainer's (sl_model.h): row shards of a
 * 10-word vocabulary, 2 floats a row, and a dense component:
 *   embedding.0  input rows 0..5      embedding.1  input rows 6..9
 *   lstm.0       5 floats             softmax.0    output rows 0..9 */
enum { TEST_TRIO_N = 3, TEST_TRIO_NP = 12 + 8 + 5 + 20, TEST_TRIO_NC = 4 };
extern const sl_component_t test_trio_comps[TEST_TRIO_NC];

typedef struct test_trio test_trio_t;
/* What node k does before sync block b (1-based): change params, note rows. */
typedef void (*test_trio_step_fn)(test_trio_t *tr, sl_sync_t *s, int k, int b, float *p);

struct test_trio {
    const char *conf;  /* sync={...} for sl_config_set */
    const char *conf2; /* another setting, or NULL */
    const sl_component_t *comps;
    int ncomps, np, blocks;
    int first; /* the first block's number (0: 1) */
    /* sync state: loaded before the first block when state_in[k] is set (a resume);
     * saved after the last into state_out[k] (malloc'd) when save_state is */
    const unsigned char *state_in[TEST_TRIO_N];
    size_t state_in_len[TEST_TRIO_N];
    int save_state;
    unsigned char *state_out[TEST_TRIO_N];
    size_t state_out_len[TEST_TRIO_N];
    int alive[TEST_TRIO_N]; /* the node takes part */
    /* a node the test plays: stand_in[k](tr, k) runs on tr->t[k] instead of the sync
     * (NULL: the sync) and sets st[k] and err[k] */
    void (*stand_in[TEST_TRIO_N])(test_trio_t *tr, int k);
    int fails[TEST_TRIO_N]; /* 1: node k must end with an error (err[k]), not SL_OK */
    test_trio_step_fn step;
    /* final: after the blocks each alive node calls sl_sync_final; its results, when
     * it entered and left it (sl_clock_now()) and whether it then held node 0 for dead */
    int final;
    int late[TEST_TRIO_N]; /* 1: sl_sync_final only once node 0's has returned */
    int writer[TEST_TRIO_N], nmodels[TEST_TRIO_N], has_avg[TEST_TRIO_N], dead0[TEST_TRIO_N];
    float avg[TEST_TRIO_N][TEST_TRIO_NP];
    double final_t0[TEST_TRIO_N], final_t1[TEST_TRIO_N];
    /* events between the nodes: blocks each has finished (INT_MAX once it stopped), and
     * whether its sl_sync_final has returned (or it stopped); under mu, cv signalled */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int blocks_done[TEST_TRIO_N], final_done[TEST_TRIO_N];
    float p[TEST_TRIO_N][TEST_TRIO_NP]; /* in: the start; out: after the last block */
    sl_sync_stat_t stat[TEST_TRIO_N][TEST_TRIO_NC];
    int ndead[TEST_TRIO_N]; /* peers each node holds for dead after the blocks */
    sl_status_t st[TEST_TRIO_N];
    char err[TEST_TRIO_N][256];
    sl_config_t cfg;
    sl_transport_t *t[TEST_TRIO_N];
};

/* Fills tr for the sync settings conf ("sync={...}"): the layout above, one block, every
 * node alive, node k's parameter i value(k, i). */
void test_trio_init(test_trio_t *tr, const char *conf, float (*value)(int, int));

/* Runs the alive nodes of tr (period 1: every block syncs every component) and checks
 * that each returned SL_OK (an error where fails[k]). */
void test_trio_run(test_trio_t *tr);

/* Waits until node k has finished block b (or stopped) or, with final, its
 * sl_sync_final. No time limit: the test case's timeout is the hang guard. */
void test_trio_wait(test_trio_t *tr, int k, int b, int final);

/* 0 for every node and parameter, a test_trio_init value. */
float test_trio_zero(int k, int i);

/* got[i] == want[i] for i < n, bit for bit; fails the test at the first that is not. */
void test_assert_floats(const float *got, const float *want, size_t n);

#endif
