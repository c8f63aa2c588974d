/* tests/unit/test_util.c: the forked-cluster harness and event waits (test_util.h).
 *
 * Pipes: each node has an up pipe (node -> parent: its endpoint, then tagged messages,
 * 'S' for test_cluster_signal, 'B' for test_cluster_barrier and 'R' + the result words
 * + the result blob, then end of file when it exits) and a down pipe (parent -> node:
 * the endpoint table, then a 'G' that ends each barrier). The parent sleeps in poll()
 * on the up pipes until one of them has something or the hang guard expires, so it
 * learns of every signal, barrier and exit as it happens.
 *
 * The three sync nodes in one process (test_trio_*): a thread each, over loopback
 * transports that all connect before any thread starts; the nodes wait for one another
 * under a mutex and a condition variable, never on the clock. */
#include "test_util.h"

#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "transport/sl_collective.h"
#include "transport/sl_frame_mac.h"

#define FINAL_BARRIER_ROUND TEST_FINAL_BARRIER_ROUND

void
test_cluster_init(test_cluster_t *c, int n, int ipc, uint64_t run_id, test_node_fn fn,
                  const void *arg)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->ipc = ipc;
    c->run_id = run_id;
    c->timeout_ms = TEST_WAIT_MS;
    c->shm = 1;
    c->heartbeat_ms = 200;
    c->node = fn;
    c->arg = arg;
    c->final_barrier = 1;
    c->kill_rank = -1;
    c->hang_s = TEST_HANG_S;
    c->failed_rank = -1;
    c->up_fd = -1;
    c->down_fd = -1;
}

double
test_deadline(void)
{
    return sl_clock_now() + TEST_HANG_S;
}

int
test_wait_more(double deadline)
{
    if (sl_clock_now() > deadline)
        return 0;
    usleep(1000);
    return 1;
}

/* Reads len bytes, waiting at most until deadline (sl_clock_now time). 0, or -1 at end
 * of file, an error or the deadline. */
static int
read_full(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;

    while (len) {
        double left_ms = (deadline - sl_clock_now()) * 1000.0;
        struct pollfd pf = {fd, POLLIN, 0};
        if (left_ms < 0 || poll(&pf, 1, (int)left_ms + 1) <= 0)
            return -1;
        ssize_t r = read(fd, p, len);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int
write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t w = write(fd, p, len);
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

void
test_cluster_signal(test_cluster_t *c)
{
    if (c->up_fd >= 0)
        write_full(c->up_fd, "S", 1);
}

int
test_cluster_barrier(test_cluster_t *c)
{
    char go = 0;

    if (c->up_fd < 0 || write_full(c->up_fd, "B", 1) != 0 ||
        read_full(c->down_fd, &go, 1, sl_clock_now() + c->hang_s) != 0)
        return -1;
    return go == 'G' ? 0 : -1;
}

void *
test_cluster_out(test_cluster_t *c)
{
    return c->out ? (char *)c->out + (size_t)c->rank * c->out_bytes : NULL;
}

sl_status_t
test_settle(sl_transport_t *t, uint32_t component, uint64_t round)
{
    uint32_t me = sl_transport_rank(t), n = sl_transport_size(t);
    float x = 0.0f;
    size_t got;

    for (uint64_t r = round; r < round + 2; r++) {
        for (uint32_t p = 0; p < n; p++) {
            sl_wire_key_t k = {r, component, 0, p, SL_WIRE_DATA};
            if (p != me)
                SL_TRY(sl_transport_send(t, &k, &x, 1, SL_WIRE_FP32, 1.0f, 0, -1));
        }
        for (uint32_t p = 0; p < n; p++) {
            sl_wire_key_t k = {r, component, 0, p, SL_WIRE_DATA};
            if (p != me)
                SL_TRY(sl_transport_recv(t, &k, &x, sizeof x, &got, TEST_WAIT_MS));
        }
    }
    return SL_OK;
}

/* A node process: never returns. */
static void
node_main(test_cluster_t *c, int rank, int up, int down, pid_t parent)
{
    sl_transport_t *t = NULL;
    sl_transport_opts_t o;
    char bind[128], eps[TEST_CLUSTER_MAXN][TEST_CLUSTER_EP_BYTES];
    const char *table[TEST_CLUSTER_MAXN];
    unsigned char msg[1 + sizeof c->res[0]];
    uint64_t res[TEST_CLUSTER_NRES] = {0};
    int rc;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(97); /* the parent died before the line above */
    sl_log_set_level(SL_LOG_ERROR);
    sl_transport_opts_default(&o);
    o.run_id = c->run_id;
    o.rank = (uint32_t)rank;
    o.size = (uint32_t)c->n;
    if (c->ipc)
        snprintf(bind, sizeof bind, "ipc://%s/rank-%d", c->dir, rank);
    else
        snprintf(bind, sizeof bind, "tcp://127.0.0.1:*");
    o.bind_endpoint = bind;
    o.timeout_ms = c->timeout_ms;
    o.heartbeat_ms = c->heartbeat_ms;
    o.linger_ms = 500;
    o.shm = c->shm;
    o.allreduce_ring = c->ring;
    if (sl_transport_new(&t, &o) != SL_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, sl_err_msg());
        _exit(90);
    }
    memset(eps, 0, sizeof eps);
    snprintf(eps[0], sizeof eps[0], "%s", sl_transport_endpoint(t));
    if (write_full(up, eps[0], sizeof eps[0]) != 0 ||
        read_full(down, eps, sizeof eps[0] * (size_t)c->n, sl_clock_now() + c->hang_s) != 0)
        _exit(91);
    for (int k = 0; k < c->n; k++)
        table[k] = eps[k];
    if (sl_transport_connect(t, table) != SL_OK)
        _exit(92);
    c->up_fd = up;
    c->down_fd = down;
    c->rank = rank;
    rc = c->node(t, c, res);
    if (rc == 0 && c->final_barrier && c->n > 1 && sl_barrier(t, FINAL_BARRIER_ROUND, 0) != SL_OK)
        rc = 80;
    if (rc != 0)
        fprintf(stderr, "rank %d of %d (%s): check %d failed; last error: %s\n", rank, c->n,
                c->ipc ? "ipc" : "tcp", rc, sl_err_msg());
    msg[0] = 'R';
    memcpy(msg + 1, res, sizeof res);
    if (write_full(up, msg, sizeof msg) == 0 && c->out)
        write_full(up, test_cluster_out(c), c->out_bytes);
    sl_transport_destroy(&t);
    if (c->node_exit)
        c->node_exit();
    _exit(rc);
}

/* Whether node i's end is what the case expects: exit 0, or SIGKILL for the node the
 * parent killed on purpose. */
static int
ended_well(const test_cluster_t *c, int i, int killed)
{
    int st = c->status[i];

    if (i == c->kill_rank && killed)
        return st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Reaps every node not reaped yet: one that has already exited keeps its status, the
 * others are killed and marked with mark. */
static void
stop_all(test_cluster_t *c, const pid_t *pids, int *reaped, int mark)
{
    for (int i = 0; i < c->n; i++) {
        int st;
        if (reaped[i])
            continue;
        if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
            c->status[i] = st;
        } else {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            c->status[i] = mark;
        }
        reaped[i] = 1;
    }
}

/* Empties and removes the cluster's folder (endpoints, files a case wrote). */
static void
remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];

    if (d) {
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Reads one tagged message of node i (a barrier call: waiting[i] = 1). 0, or -1 at end
 * of file (the node is gone). */
static int
take_message(test_cluster_t *c, int i, int fd, int *waiting, double deadline)
{
    unsigned char tag;

    if (read(fd, &tag, 1) != 1)
        return -1;
    if (tag == 'S')
        c->signals[i]++;
    else if (tag == 'B')
        waiting[i] = 1;
    else if (tag != 'R' || read_full(fd, c->res[i], sizeof c->res[i], deadline) != 0 ||
             (c->out && read_full(fd, (char *)c->out + (size_t)i * c->out_bytes, c->out_bytes,
                                  deadline) != 0))
        return -1;
    return 0;
}

/* Ends the barrier once every node still running (not reaped) waits in it. */
static void
relay_barrier(const test_cluster_t *c, int down[][2], const int *reaped, int *waiting)
{
    int some = 0;

    for (int i = 0; i < c->n; i++) {
        if (!reaped[i] && !waiting[i])
            return;
        some |= waiting[i];
    }
    for (int i = 0; i < c->n && some; i++)
        if (waiting[i]) {
            write_full(down[i][1], "G", 1); /* a node that died meanwhile: its EOF comes */
            waiting[i] = 0;
        }
}

int
test_cluster_run(test_cluster_t *c)
{
    pid_t pids[TEST_CLUSTER_MAXN], me = getpid();
    int up[TEST_CLUSTER_MAXN][2], down[TEST_CLUSTER_MAXN][2], reaped[TEST_CLUSTER_MAXN];
    int waiting[TEST_CLUSTER_MAXN];
    int bad = 0, killed = 0, left = c->n;
    char eps[TEST_CLUSTER_MAXN][TEST_CLUSTER_EP_BYTES];
    double deadline = sl_clock_now() + c->hang_s;
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN); /* a node that died early */

    ck_assert(c->n >= 1 && c->n <= TEST_CLUSTER_MAXN);
    snprintf(c->dir, sizeof c->dir, "/tmp/shoal-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(c->dir));
    c->failed_rank = -1;
    if (c->out)
        memset(c->out, 0, (size_t)c->n * c->out_bytes);
    for (int i = 0; i < c->n; i++) {
        ck_assert_int_eq(pipe(up[i]), 0);
        ck_assert_int_eq(pipe(down[i]), 0);
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            for (int j = 0; j < i; j++) {
                close(up[j][0]);
                close(down[j][1]);
            }
            close(up[i][0]);
            close(down[i][1]);
            node_main(c, i, up[i][1], down[i][0], me);
        }
        close(up[i][1]);
        close(down[i][0]);
        c->status[i] = -1;
        c->signals[i] = 0;
        reaped[i] = 0;
        waiting[i] = 0;
        memset(c->res[i], 0, sizeof c->res[i]);
    }
    for (int i = 0; i < c->n && !bad; i++)
        bad = read_full(up[i][0], eps[i], sizeof eps[i], deadline) != 0;
    if (!bad && c->inject)
        c->inject(c, eps);
    for (int i = 0; i < c->n && !bad; i++)
        bad = write_full(down[i][1], eps, sizeof eps[0] * (size_t)c->n) != 0;
    if (bad) {
        stop_all(c, pids, reaped, TEST_CLUSTER_STOPPED);
        left = 0;
    }
    while (left > 0) {
        struct pollfd pf[TEST_CLUSTER_MAXN];
        int who[TEST_CLUSTER_MAXN], m = 0;
        double left_ms = (deadline - sl_clock_now()) * 1000.0;

        for (int i = 0; i < c->n; i++)
            if (!reaped[i]) {
                pf[m] = (struct pollfd){up[i][0], POLLIN, 0};
                who[m++] = i;
            }
        int ready = left_ms > 0 ? poll(pf, (nfds_t)m, (int)left_ms + 1) : 0;
        if (ready < 0)
            continue; /* EINTR */
        if (ready == 0) {
            stop_all(c, pids, reaped, TEST_CLUSTER_HUNG);
            bad = 1;
            break;
        }
        for (int k = 0; k < m; k++) {
            int i = who[k];
            if (!pf[k].revents)
                continue;
            if (take_message(c, i, up[i][0], waiting, deadline) == 0) {
                if (i == c->kill_rank && !killed && c->signals[i] >= c->kill_after) {
                    kill(pids[i], SIGKILL);
                    killed = 1;
                }
                continue;
            }
            /* end of file: the node has exited (or is exiting) */
            waitpid(pids[i], &c->status[i], 0);
            reaped[i] = 1;
            waiting[i] = 0;
            left--;
            if (!ended_well(c, i, killed)) {
                c->failed_rank = i;
                stop_all(c, pids, reaped, TEST_CLUSTER_STOPPED);
                bad = 1;
                left = 0;
                break;
            }
        }
        if (left > 0)
            relay_barrier(c, down, reaped, waiting);
    }
    for (int i = 0; i < c->n; i++) {
        close(up[i][0]);
        close(down[i][1]);
        if (!ended_well(c, i, killed))
            bad = 1;
    }
    if (c->kill_rank >= 0 && !killed)
        bad = 1;
    remove_dir(c->dir);
    signal(SIGPIPE, old_pipe);
    return bad;
}

void
test_cluster_assert_ok(test_cluster_t *c, const char *what)
{
    int r;

    test_cluster_run(c);
    r = c->failed_rank;
    for (int i = 0; i < c->n && r < 0; i++)
        if (c->status[i] < 0 || !WIFEXITED(c->status[i]) || WEXITSTATUS(c->status[i]) != 0)
            r = i;
    if (r < 0)
        return;
    int st = c->status[r];
    char how[96];
    if (st == TEST_CLUSTER_HUNG)
        snprintf(how, sizeof how, "still ran after the %.0f s hang guard", c->hang_s);
    else if (st == TEST_CLUSTER_STOPPED)
        snprintf(how, sizeof how, "was stopped when another node failed");
    else if (WIFSIGNALED(st))
        snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(st));
    else
        snprintf(how, sizeof how, "exited with %d (the check that failed)", WEXITSTATUS(st));
    ck_abort_msg("%s, %d nodes on %s: rank %d %s", what, c->n, c->ipc ? "ipc" : "tcp", r, how);
}

void
test_pair_connect(sl_transport_t *t[2], int frame_mac)
{
    unsigned char sessions[2 * SL_MAC_SESSION_BYTES];
    const char *eps[2];

    for (uint32_t r = 0; r < 2; r++) {
        if (frame_mac)
            memcpy(sessions + r * SL_MAC_SESSION_BYTES, sl_transport_session(t[r]),
                   SL_MAC_SESSION_BYTES);
        eps[r] = sl_transport_endpoint(t[r]);
    }
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(sl_transport_connect(t[r], eps), SL_OK);
        if (frame_mac)
            sl_transport_learn_sessions(t[r], sessions);
    }
}

void
test_pair_join(sl_transport_t *t0, sl_transport_t *late, unsigned char *sessions)
{
    const char *eps[2];

    if (sessions) {
        memcpy(sessions, sl_transport_session(t0), SL_MAC_SESSION_BYTES);
        memcpy(sessions + SL_MAC_SESSION_BYTES, sl_transport_session(late), SL_MAC_SESSION_BYTES);
        sl_transport_learn_sessions(late, sessions);
    }
    eps[0] = sl_transport_endpoint(t0);
    eps[1] = sl_transport_endpoint(late);
    ck_assert_int_eq(sl_transport_connect(late, eps), SL_OK);
}

float
test_node_input(uint32_t k, size_t i)
{
    return (float)((k * 131 + i * 17 + (i >> 7)) % 1024) / 64.0f - 8.0f;
}

/* Adds to *sent and *recvd the floats node me of n sends and receives in an allreduce
 * of count floats (segment k: count / n floats, one more for the first count % n).
 * Ring: in step s of reduce-scatter a node sends segment me - s and receives me - s - 1;
 * in allgather it sends me + 1 - s and receives me - s. Halving and doubling on n =
 * 2^L m (m odd) see the segments as 2^L blocks of m, block B holding segments Bm ..
 * Bm + m - 1. They end with node me holding block R, the L low bits of me reversed; at
 * each level h = 2^(L-1), ..., 1 the node sends the blocks that differ from R at bit h
 * and at no higher one, and receives those that differ at no bit from h up (halving;
 * doubling the other way round). In between, the m nodes that share me's low L bits
 * (me >> L their places on a ring) go round their ring over block R's m segments. */
void
test_allreduce_floats(size_t count, uint32_t n, uint32_t me, int ring, size_t *sent, size_t *recvd)
{
#define SEG(k) (count / n + ((k) < count % n))
    uint32_t levels = 0, m = n, at = 0, rev = 0;

    if (!ring && n >= 4 && n % 2 == 0)
        while (m % 2 == 0) {
            m /= 2;
            levels++;
        }
    for (uint32_t b = 0; b < levels; b++)
        rev |= (me >> b & 1u) << (levels - 1 - b);
    for (uint32_t h = (1u << levels) / 2; h > 0; h /= 2)
        for (uint32_t blk = 0; blk < n / m; blk++) {
            uint32_t above = (blk ^ rev) & ~(h - 1);
            for (uint32_t i = 0; i < m && (above == h || above == 0); i++) {
                *sent += SEG(blk * m + i);
                *recvd += SEG(blk * m + i);
            }
        }
    /* the ring of the m nodes at me's place among them, over block R (the whole ring:
     * m = n, place me, R = 0) */
    at = rev * m;
    me >>= levels;
    for (uint32_t step = 0; step + 1 < m; step++) {
        *sent += SEG(at + (me + m - step) % m) + SEG(at + (me + 1 + m - step) % m);
        *recvd += SEG(at + (me + 2 * m - step - 1) % m) + SEG(at + (me + m - step) % m);
    }
#undef SEG
}

/* Ring: a node sends every block but its right neighbour's, once. Doubling on n = 2^L m
 * (m odd): first round the ring of the m nodes that share me's low L bits, sending
 * their blocks but its right neighbour's (me + 2^L); then at level h = 2^(L-1), ..., 1
 * a node sends the blocks of the nodes whose ranks agree with its own on the bits below
 * 2h, so block q goes out once for each low bit that q and me share below the lowest in
 * which they differ, at most L times. Either way a node receives every block but its
 * own, once. */
void
test_allgather_floats(const size_t *counts, uint32_t n, uint32_t me, int doubles, size_t *sent,
                      size_t *recvd)
{
    uint32_t levels = 0;

    while (doubles && (n >> levels) % 2 == 0)
        levels++;
    for (uint32_t q = 0; q < n; q++) {
        uint32_t agree = 0, step = doubles ? 1u << levels : 1u;
        while (agree < levels && !(((q ^ me) >> agree) & 1u))
            agree++;
        *sent += agree * counts[q];
        if ((q - me) % step == 0 && q != (me + step) % n)
            *sent += counts[q];
        if (q != me)
            *recvd += counts[q];
    }
}

/* ------------------------------------------------ three sync nodes in one process */

const sl_component_t test_trio_comps[TEST_TRIO_NC] = {
    {"embedding.0", 0, 12, 1, 0, 6, 2},
    {"embedding.1", 12, 8, 1, 6, 4, 2},
    {"lstm.0", 20, 5, 0, 0, 0, 0},
    {"softmax.0", 25, 20, 1, 0, 10, 2},
};

typedef struct {
    test_trio_t *tr;
    int k;
} trio_arg_t;

/* Records that node k has finished block b (INT_MAX: it stopped) or, with final, its
 * sl_sync_final, and wakes the nodes waiting for it. */
static void
trio_mark(test_trio_t *tr, int k, int b, int final)
{
    pthread_mutex_lock(&tr->mu);
    tr->blocks_done[k] = b;
    tr->final_done[k] |= final;
    pthread_cond_broadcast(&tr->cv);
    pthread_mutex_unlock(&tr->mu);
}

void
test_trio_wait(test_trio_t *tr, int k, int b, int final)
{
    pthread_mutex_lock(&tr->mu);
    while (final ? !tr->final_done[k] : tr->blocks_done[k] < b)
        pthread_cond_wait(&tr->cv, &tr->mu);
    pthread_mutex_unlock(&tr->mu);
}

static void *
trio_node(void *arg)
{
    test_trio_t *tr = ((trio_arg_t *)arg)->tr;
    int k = ((trio_arg_t *)arg)->k;
    sl_sync_t *s = NULL;
    sl_status_t st;

    int first = tr->first > 0 ? tr->first : 1;

    st = sl_sync_new(&s, &tr->cfg, tr->t[k], k, TEST_TRIO_N, tr->comps, tr->ncomps, tr->p[k],
                     (size_t)tr->np);
    if (st == SL_OK && tr->state_in[k])
        st = sl_sync_state_load(s, tr->state_in[k], tr->state_in_len[k]);
    for (int b = first; st == SL_OK && b < first + tr->blocks; b++) {
        if (tr->step)
            tr->step(tr, s, k, b, tr->p[k]);
        st = sl_sync_after_step(s, tr->p[k], b);
        trio_mark(tr, k, b, 0);
    }
    trio_mark(tr, k, INT_MAX, 0);
    if (st == SL_OK && tr->save_state) {
        tr->state_out_len[k] = sl_sync_state_bytes(s);
        tr->state_out[k] = malloc(tr->state_out_len[k] + 1);
        st = sl_sync_state_save(s, tr->state_out[k], tr->state_out_len[k]);
    }
    for (int c = 0; st == SL_OK && c < tr->ncomps; c++)
        tr->stat[k][c] = *sl_sync_stat(s, c);
    tr->ndead[k] = s ? sl_sync_ndead(s) : 0;
    if (st == SL_OK && tr->final) {
        const float *avg;

        if (tr->late[k])
            test_trio_wait(tr, 0, 0, 1);
        tr->final_t0[k] = sl_clock_now();
        st = sl_sync_final(s, tr->p[k], &avg, &tr->writer[k], &tr->nmodels[k]);
        tr->final_t1[k] = sl_clock_now();
        tr->has_avg[k] = avg != NULL;
        if (avg)
            memcpy(tr->avg[k], avg, (size_t)tr->np * sizeof *avg);
        tr->dead0[k] = sl_sync_is_dead(s, 0);
    }
    trio_mark(tr, k, INT_MAX, 1);
    tr->st[k] = st;
    snprintf(tr->err[k], sizeof tr->err[k], "%s", st == SL_OK ? "" : sl_err_msg());
    sl_sync_destroy(&s);
    return NULL;
}

/* A node the test plays (test_trio_t's stand_in). */
static void *
trio_stand_in(void *arg)
{
    test_trio_t *tr = ((trio_arg_t *)arg)->tr;
    int k = ((trio_arg_t *)arg)->k;

    tr->stand_in[k](tr, k);
    trio_mark(tr, k, INT_MAX, 1);
    return NULL;
}

/* Runs the alive nodes of tr (period 1: every block syncs every component) and checks
 * that each returned SL_OK (an error where fails[k]). */
void
test_trio_run(test_trio_t *tr)
{
    pthread_t th[TEST_TRIO_N];
    trio_arg_t args[TEST_TRIO_N];
    const char *eps[TEST_TRIO_N];

    sl_log_set_level(SL_LOG_ERROR);
    pthread_mutex_init(&tr->mu, NULL);
    pthread_cond_init(&tr->cv, NULL);
    sl_config_init(&tr->cfg);
    ck_assert_msg(sl_config_set(&tr->cfg, tr->conf) == SL_OK, "%s", sl_err_msg());
    if (tr->conf2)
        ck_assert_msg(sl_config_set(&tr->cfg, tr->conf2) == SL_OK, "%s", sl_err_msg());
    for (int k = 0; k < TEST_TRIO_N; k++) {
        sl_transport_opts_t o;
        sl_transport_opts_default(&o);
        o.run_id = 77;
        o.rank = (uint32_t)k;
        o.size = TEST_TRIO_N;
        o.linger_ms = 100;
        o.timeout_ms = 5000;
        ck_assert_int_eq(sl_transport_new(&tr->t[k], &o), SL_OK);
        eps[k] = sl_transport_endpoint(tr->t[k]);
    }
    for (int k = 0; k < TEST_TRIO_N; k++)
        ck_assert_int_eq(sl_transport_connect(tr->t[k], eps), SL_OK);
    for (int k = 0; k < TEST_TRIO_N; k++) {
        args[k] = (trio_arg_t){tr, k};
        if (tr->alive[k])
            ck_assert_int_eq(
                pthread_create(&th[k], NULL, tr->stand_in[k] ? trio_stand_in : trio_node, &args[k]),
                0);
        else
            trio_mark(tr, k, INT_MAX, 1); /* nobody waits for a node that never runs */
    }
    for (int k = 0; k < TEST_TRIO_N; k++)
        if (tr->alive[k])
            pthread_join(th[k], NULL);
    for (int k = 0; k < TEST_TRIO_N; k++)
        sl_transport_destroy(&tr->t[k]);
    sl_config_fini(&tr->cfg);
    pthread_cond_destroy(&tr->cv);
    pthread_mutex_destroy(&tr->mu);
    for (int k = 0; k < TEST_TRIO_N; k++)
        ck_assert_msg(!tr->alive[k] || (tr->st[k] != SL_OK) == tr->fails[k], "node %d: %s", k,
                      tr->fails[k] ? "no error" : tr->err[k]);
}

void
test_trio_init(test_trio_t *tr, const char *conf, float (*value)(int, int))
{
    memset(tr, 0, sizeof *tr);
    tr->conf = conf;
    tr->comps = test_trio_comps;
    tr->ncomps = TEST_TRIO_NC;
    tr->np = TEST_TRIO_NP;
    tr->blocks = 1;
    for (int k = 0; k < TEST_TRIO_N; k++) {
        tr->alive[k] = 1;
        for (int i = 0; i < TEST_TRIO_NP; i++)
            tr->p[k][i] = value(k, i);
    }
}

float
test_trio_zero(int k, int i)
{
    (void)k;
    (void)i;
    return 0;
}

void
test_assert_floats(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}
