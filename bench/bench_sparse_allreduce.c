/* bench_sparse_allreduce: the embedding exchange of allreduce mode (sl_sparse_allreduce)
 * on Brown's real token stream, unique against allgather against dense, for n local node
 * processes over ipc:// and batches of B x T tokens per node. Figures only.
 *
 *   bench_sparse_allreduce [--train FILE] [--nodes "2 4 8"] [--batches "32 128"]
 *                          [--bptt 35] [--dim 256] [--steps 10] [--cache DIR]
 *
 * Each node takes its share of the training tokens as the trainer does (sl_batcher:
 * rank k of n, B streams, T steps), so step s sees batch s of every node: K = B x T
 * tokens per node, U_i distinct ones, U_g distinct over all n. The gradient is the
 * whole input embedding (V x D, one shard) with nonzero rows U_i. Per (n, B, mode) the
 * nodes are forked afresh, so peak RSS belongs to that mode alone; each step is one
 * barrier then one timed sl_sparse_allreduce, after one warm-up step. Columns:
 *   U_g, sum_Ui    distinct rows over all nodes, and the sum of each node's (per step)
 *   nK             tokens over all nodes per step
 *   sent_MB        bytes one node sends per step (payload + 64-byte frame headers),
 *                  the mean over nodes: exact, from the transport's counters
 *   ms             time of one exchange (the slowest node's mean; noisy on a shared host)
 *   buf_MB         the exchange's buffers (sl_sparse_stats_t.buffer_bytes), largest node
 *   rss_MB         peak resident set of the largest node process: the corpus (shared
 *                  with the parent), the V x D gradient and ZeroMQ's queues included
 * and per (n, B): unique/allgather = the ratio of their sent bytes, beside U_g / sum_Ui
 * (what it should follow: our allgather ships deduplicated rows) and U_g / (n K) (the
 * ratio against the paper's K x D allgather, which does not deduplicate).
 * The parent checks U_g and sum_Ui against its own count from the same batches. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "embed/sl_sparse_allreduce.h"
#include "transport/sl_collective.h"
#include "transport/sl_transport.h"

#define MAXN 16
#define EP 256
#define RUN_ID 0x5ba5e0001ULL

typedef struct {
    const sl_tokens_t *tokens;
    int vocab, n, batch, bptt, dim, steps;
    sl_exchange_t mode;
    char dir[64];
} bench_t;

/* What a node reports to the parent. */
typedef struct {
    double time_s;     /* summed over the timed steps */
    double sent_bytes; /* summed */
    double union_rows, gather_rows;
    double buffer_bytes, rss_kb;
} report_t;

static int
io_full(int fd, void *buf, size_t len, int writing)
{
    char *p = buf;
    while (len) {
        ssize_t r = writing ? write(fd, p, len) : read(fd, p, len);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static void
die(int rank, const char *what)
{
    fprintf(stderr, "bench_sparse_allreduce: rank %d: %s: %s\n", rank, what, sl_err_msg());
    _exit(1);
}

/* The distinct ids of x (k tokens), ascending, into rows; mark (vocab) is left zeroed. */
static int
distinct(const int32_t *x, int k, unsigned char *mark, int vocab, int32_t *rows)
{
    int n = 0;
    for (int i = 0; i < k; i++)
        mark[x[i]] = 1;
    for (int r = 0; r < vocab; r++)
        if (mark[r]) {
            rows[n++] = r;
            mark[r] = 0;
        }
    return n;
}

static void
node(const bench_t *b, int rank, int up, int down)
{
    sl_transport_t *t;
    sl_transport_opts_t o;
    sl_batcher_t bt;
    sl_sparse_allreduce_t *sa;
    sl_component_t comp = {
        .name = "embedding.0", .sparse = 1, .row_begin = 0, .rows = b->vocab, .row_len = b->dim};
    char bind[128], eps[MAXN][EP];
    const char *table[MAXN];
    int k = b->batch * b->bptt;
    size_t d = (size_t)b->dim, cells = (size_t)b->vocab * d;
    int32_t *x = malloc((size_t)k * sizeof *x), *y = malloc((size_t)k * sizeof *y),
            *rows = malloc((size_t)b->vocab * sizeof *rows);
    unsigned char *mark = calloc((size_t)b->vocab, 1);
    float *grad = calloc(cells, sizeof *grad);
    report_t rep = {0};
    struct rusage ru;
    uint64_t round = 1;

    if (!x || !y || !rows || !mark || !grad)
        die(rank, "out of memory");
    comp.count = cells;
    sl_log_set_level(SL_LOG_ERROR);
    sl_transport_opts_default(&o);
    o.run_id = RUN_ID;
    o.rank = (uint32_t)rank;
    o.size = (uint32_t)b->n;
    o.timeout_ms = 120000;
    snprintf(bind, sizeof bind, "ipc://%s/rank-%d", b->dir, rank);
    o.bind_endpoint = bind;
    if (sl_transport_new(&t, &o) != SL_OK)
        die(rank, "transport");
    memset(eps, 0, sizeof eps);
    snprintf(eps[0], EP, "%s", sl_transport_endpoint(t));
    if (io_full(up, eps[0], EP, 1) || io_full(down, eps, (size_t)b->n * EP, 0))
        die(rank, "endpoint exchange");
    for (int i = 0; i < b->n; i++)
        table[i] = eps[i];
    if (sl_transport_connect(t, table) != SL_OK)
        die(rank, "connect");
    if (sl_batcher_init(&bt, b->tokens, rank, b->n, b->batch, b->bptt) != SL_OK)
        die(rank, "batcher");
    if (bt.batches_per_epoch < b->steps + 1)
        die(rank, "too few batches for --steps");
    if (sl_sparse_allreduce_new(&sa, &comp, b->n) != SL_OK)
        die(rank, "context");
    for (int s = 0; s <= b->steps; s++) {
        sl_sparse_stats_t st;
        int nrows;

        sl_batcher_get(&bt, s, x, y);
        nrows = distinct(x, k, mark, b->vocab, rows);
        memset(grad, 0, cells * sizeof *grad);
        for (int i = 0; i < nrows; i++)
            for (size_t e = 0; e < d; e++)
                grad[(size_t)rows[i] * d + e] = 1e-3f * (float)(rank + 1);
        if (sl_barrier(t, round, 0) != SL_OK)
            die(rank, "barrier");
        if (sl_sparse_allreduce(sa, t, 0, round++, b->mode, rows, nrows, grad, NULL) != SL_OK)
            die(rank, "sparse allreduce");
        sl_sparse_allreduce_stats(sa, &st);
        if (s == 0)
            continue; /* warm-up: buffers grow, sockets connect */
        rep.time_s += st.time_s;
        rep.sent_bytes += (double)st.sent_bytes;
        rep.union_rows += (double)st.union_rows;
        rep.gather_rows += (double)st.gather_rows;
        rep.buffer_bytes = (double)st.buffer_bytes;
    }
    if (sl_barrier(t, round, 0) != SL_OK)
        die(rank, "barrier");
    getrusage(RUSAGE_SELF, &ru);
    rep.rss_kb = (double)ru.ru_maxrss;
    if (io_full(up, &rep, sizeof rep, 1))
        die(rank, "report");
    sl_transport_destroy(&t);
    sl_sparse_allreduce_destroy(&sa);
    _exit(0);
}

/* Forks b->n nodes, collects their reports; 0 when all succeeded. */
static int
run(bench_t *b, report_t *reps)
{
    pid_t pids[MAXN];
    int up[MAXN][2], down[MAXN][2], failed = 0;
    char eps[MAXN][EP];

    snprintf(b->dir, sizeof b->dir, "/tmp/shoal-XXXXXX");
    if (!mkdtemp(b->dir)) {
        perror("bench_sparse_allreduce: mkdtemp");
        return 1;
    }
    fflush(stdout);
    for (int i = 0; i < b->n; i++) {
        if (pipe(up[i]) || pipe(down[i]))
            return 1;
        pids[i] = fork();
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(up[i][0]);
            close(down[i][1]);
            node(b, i, up[i][1], down[i][0]);
        }
        close(up[i][1]);
        close(down[i][0]);
    }
    for (int i = 0; i < b->n && !failed; i++)
        failed = io_full(up[i][0], eps[i], EP, 0) != 0;
    for (int i = 0; i < b->n && !failed; i++)
        failed = io_full(down[i][1], eps, (size_t)b->n * EP, 1) != 0;
    for (int i = 0; i < b->n && !failed; i++)
        failed = io_full(up[i][0], &reps[i], sizeof reps[i], 0) != 0;
    for (int left = b->n; left > 0; left--) {
        int st;
        pid_t w = wait(&st);
        for (int i = 0; i < b->n; i++)
            if (pids[i] == w)
                pids[i] = 0;
        if (failed || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed = 1; /* one node failed: stop the others */
            for (int j = 0; j < b->n; j++)
                if (pids[j] > 0)
                    kill(pids[j], SIGKILL);
        }
    }
    for (int i = 0; i < b->n; i++) {
        char path[128];
        close(up[i][0]);
        close(down[i][1]);
        snprintf(path, sizeof path, "%s/rank-%d", b->dir, i);
        unlink(path);
    }
    rmdir(b->dir);
    return failed;
}

/* The parent's own count of U_g and sum U_i over the timed steps (means). */
static int
expected_rows(const bench_t *b, double *ug, double *sum_ui)
{
    int k = b->batch * b->bptt;
    int32_t *x = malloc((size_t)k * sizeof *x), *y = malloc((size_t)k * sizeof *y);
    unsigned char *all = calloc((size_t)b->vocab, 1), *one = calloc((size_t)b->vocab, 1);
    sl_batcher_t bt;

    *ug = *sum_ui = 0;
    if (!x || !y || !all || !one)
        return -1;
    for (int s = 1; s <= b->steps; s++) {
        for (int r = 0; r < b->n; r++) {
            if (sl_batcher_init(&bt, b->tokens, r, b->n, b->batch, b->bptt) != SL_OK)
                return -1;
            sl_batcher_get(&bt, s, x, y);
            memset(one, 0, (size_t)b->vocab);
            for (int i = 0; i < k; i++) {
                *sum_ui += !one[x[i]];
                one[x[i]] = 1;
                all[x[i]] = 1;
            }
        }
        for (int v = 0; v < b->vocab; v++) {
            *ug += all[v];
            all[v] = 0;
        }
    }
    *ug /= b->steps;
    *sum_ui /= b->steps;
    free(x);
    free(y);
    free(all);
    free(one);
    return 0;
}

static int
parse_list(const char *s, int *out, int most)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, " ,", &save); tok && n < most;
         tok = strtok_r(NULL, " ,", &save))
        out[n++] = atoi(tok);
    free(copy);
    return n;
}

int
main(int argc, char **argv)
{
    static const sl_exchange_t modes[3] = {SL_EXCHANGE_UNIQUE, SL_EXCHANGE_ALLGATHER,
                                           SL_EXCHANGE_DENSE};
    const char *data = getenv("SHOAL_DATA");
    char train[1024], cache[1024], set[1200];
    int nodes[8], nn, batches[8], nb, failed = 0;
    bench_t b = {.bptt = 35, .dim = 256, .steps = 10};
    sl_config_t cfg;
    sl_corpus_t corpus;
    double loads[3] = {0};

    snprintf(train, sizeof train, "%s/brown/train.txt", data ? data : "../shared/data");
    snprintf(cache, sizeof cache, "/tmp/shoal-bench-cache");
    nn = parse_list("2 4 8", nodes, 8);
    nb = parse_list("32 128", batches, 8);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--train") && v)
            snprintf(train, sizeof train, "%s", v);
        else if (!strcmp(argv[i], "--cache") && v)
            snprintf(cache, sizeof cache, "%s", v);
        else if (!strcmp(argv[i], "--nodes") && v)
            nn = parse_list(v, nodes, 8);
        else if (!strcmp(argv[i], "--batches") && v)
            nb = parse_list(v, batches, 8);
        else if (!strcmp(argv[i], "--bptt") && v)
            b.bptt = atoi(v);
        else if (!strcmp(argv[i], "--dim") && v)
            b.dim = atoi(v);
        else if (!strcmp(argv[i], "--steps") && v)
            b.steps = atoi(v);
        else {
            fprintf(stderr, "usage: bench_sparse_allreduce [--train FILE] [--nodes \"2 4 8\"] "
                            "[--batches \"32 128\"] [--bptt 35] [--dim 256] [--steps 10] "
                            "[--cache DIR]\n");
            return 2;
        }
        i++;
    }
    for (int i = 0; i < nn; i++)
        if (nodes[i] < 2 || nodes[i] > MAXN) {
            fprintf(stderr, "bench_sparse_allreduce: --nodes: 2..%d\n", MAXN);
            return 2;
        }
    if (b.bptt < 1 || b.dim < 1 || b.steps < 1) {
        fprintf(stderr, "bench_sparse_allreduce: --bptt, --dim, --steps must be >= 1\n");
        return 2;
    }
    sl_log_set_level(SL_LOG_ERROR);
    sl_config_init(&cfg);
    snprintf(set, sizeof set, "data.train=%s", train);
    if (sl_config_set(&cfg, set) != SL_OK)
        goto config_failed;
    snprintf(set, sizeof set, "data.cache_dir=%s", cache);
    if (sl_config_set(&cfg, set) != SL_OK)
        goto config_failed;
    if (sl_corpus_load(&corpus, &cfg) != SL_OK) {
        fprintf(stderr, "bench_sparse_allreduce: %s\n", sl_err_msg());
        sl_config_fini(&cfg);
        return 1;
    }
    b.tokens = &corpus.train;
    b.vocab = sl_vocab_size(corpus.vocab);
    getloadavg(loads, 3);
    printf("# sl_sparse_allreduce on %s: %zu tokens, V = %d, D = %d, T = %d, %d timed steps "
           "after 1 warm-up; ipc, load before %.2f on %ld cpus\n",
           train, corpus.train.len, b.vocab, b.dim, b.bptt, b.steps, loads[0],
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("%2s %4s %6s %-9s %7s %7s %7s %9s %9s %8s %8s\n", "n", "B", "K", "mode", "U_g", "sum_Ui",
           "nK", "sent_MB", "ms", "buf_MB", "rss_MB");
    for (int i = 0; i < nn && !failed; i++) {
        for (int j = 0; j < nb && !failed; j++) {
            double sent[3] = {0}, ug = 0, sum_ui = 0, want_ug, want_sum;
            b.n = nodes[i];
            b.batch = batches[j];
            if (expected_rows(&b, &want_ug, &want_sum) != 0) {
                fprintf(stderr, "bench_sparse_allreduce: %d nodes x B %d: too few tokens\n", b.n,
                        b.batch);
                failed = 1;
                break;
            }
            for (int m = 0; m < 3 && !failed; m++) {
                report_t reps[MAXN];
                double ms = 0, buf = 0, rss = 0;
                b.mode = modes[m];
                if (run(&b, reps) != 0) {
                    fprintf(stderr, "bench_sparse_allreduce: %d nodes, B %d, %s: a node failed\n",
                            b.n, b.batch, sl_exchange_name(b.mode));
                    failed = 1;
                    break;
                }
                for (int r = 0; r < b.n; r++) {
                    sent[m] += reps[r].sent_bytes / b.steps / b.n;
                    if (reps[r].time_s / b.steps * 1e3 > ms)
                        ms = reps[r].time_s / b.steps * 1e3;
                    if (reps[r].buffer_bytes > buf)
                        buf = reps[r].buffer_bytes;
                    if (reps[r].rss_kb > rss)
                        rss = reps[r].rss_kb;
                }
                if (m == 0)
                    ug = reps[0].union_rows / b.steps;
                if (m == 1)
                    sum_ui = reps[0].gather_rows / b.steps;
                printf("%2d %4d %6d %-9s %7.0f %7.0f %7d %9.3f %9.2f %8.3f %8.1f\n", b.n, b.batch,
                       b.batch * b.bptt, sl_exchange_name(b.mode), want_ug, want_sum,
                       b.n * b.batch * b.bptt, sent[m] / 1e6, ms, buf / 1e6, rss / 1024.0);
                fflush(stdout);
            }
            if (failed)
                break;
            if (ug != want_ug || sum_ui != want_sum) {
                fprintf(stderr,
                        "bench_sparse_allreduce: the exchange counted U_g %.1f, sum U_i %.1f; "
                        "the batches have %.1f, %.1f\n",
                        ug, sum_ui, want_ug, want_sum);
                failed = 1;
                break;
            }
            printf("#  n %d B %d: unique/allgather bytes %.3f (2 U_g/sum_Ui %.3f: the ring "
                   "allreduce sends each value twice), U_g/(nK) %.3f, unique/dense %.3f\n",
                   b.n, b.batch, sent[0] / sent[1], 2 * want_ug / want_sum,
                   want_ug / (b.n * b.batch * b.bptt), sent[0] / sent[2]);
        }
    }
    getloadavg(loads, 3);
    printf("# load after %.2f\n", loads[0]);
    sl_corpus_fini(&corpus);
    sl_config_fini(&cfg);
    return failed;
config_failed:
    fprintf(stderr, "bench_sparse_allreduce: %s\n", sl_err_msg());
    sl_config_fini(&cfg);
    return 1;
}
