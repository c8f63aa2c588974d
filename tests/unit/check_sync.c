/* Tests of src/sync: the BMUF maths worked by hand on 3 nodes for every algorithm (a
 * gossip round with a missing peer included), gossip-MA consensus against the spectral
 * gap, and 4-node `shoal run` integration runs: every algorithm lowers the loss and
 * writes the final model, allreduce on 2 nodes equals one node with a 2x batch, and a
 * gossip-bmuf run survives a node killed with SIGKILL. */
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sl_bmuf.h"
#include "sl_config.h"
#include "sl_file.h"
#include "sl_mixing.h"
#include "sl_ring.h"
#include "sl_schedule.h"
#include "sl_sync.h"

static void
assert_floats(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %zu: got %.9g, want %.9g", i, got[i], want[i]);
}

/* ------------------------------------------------------------ maths by hand */

/* Three nodes, a component of two floats:
 *   node 0: theta = [1, -2]   node 1: [3, 0]   node 2: [8, 5]
 * ma (allreduce over n = 3) and local-ma (n = 3, k = 1: both other nodes are
 * neighbours) give every node the mean [(1+3+8)/3, (-2+0+5)/3] = [4, 1]. */
START_TEST(test_ma_three_nodes)
{
    float th[3][2] = {{1, -2}, {3, 0}, {8, 5}}, rows[2][2], bar[2];
    const float want[2] = {4, 1};

    for (int i = 0; i < 3; i++) {
        for (int j = 0, r = 0; j < 3; j++)
            if (j != i)
                memcpy(rows[r++], th[j], sizeof rows[0]);
        sl_bmuf_mean(bar, th[i], &rows[0][0], 2, 2);
        assert_floats(bar, want, 2);
    }
    /* the neighbourhood of local-* on 3 nodes is everyone */
    {
        int nb[4], cnt;
        ck_assert_int_eq(sl_ring_neighbours(3, 1, 0, nb, 4, &cnt), SL_OK);
        ck_assert_int_eq(cnt, 2);
        ck_assert_int_eq(nb[0], 1);
        ck_assert_int_eq(nb[1], 2);
    }
    /* distance of node 2 to the mean: ||[8,5] - [4,1]|| = sqrt(32) */
    ck_assert(fabs(sl_bmuf_distance(th[2], want, 2) - sqrt(32.0)) < 1e-12);
}
END_TEST

/* gossip-MA, q = 1 on the same three nodes, one round, pulls chosen by hand:
 * node 0 pulls from 2, node 1 from 0, node 2 from 1:
 *   node 0: ([1,-2] + [8,5]) / 2 = [4.5, 1.5]
 *   node 1: ([3, 0] + [1,-2]) / 2 = [2, -1]
 *   node 2: ([8, 5] + [3, 0]) / 2 = [5.5, 2.5]
 * Then a round where node 0 pulls from 1 and 2 (q = 2) but node 2 does not answer:
 * the average is over self and node 1 only: ([4.5,1.5] + [2,-1]) / 2 = [3.25, 0.25]. */
START_TEST(test_gossip_ma_missing_peer)
{
    float th[3][2] = {{1, -2}, {3, 0}, {8, 5}}, next[3][2];
    const int pull[3] = {2, 0, 1};
    const float want[3][2] = {{4.5f, 1.5f}, {2, -1}, {5.5f, 2.5f}}, want2[2] = {3.25f, 0.25f};

    for (int i = 0; i < 3; i++)
        sl_bmuf_mean(next[i], th[i], th[pull[i]], 1, 2);
    for (int i = 0; i < 3; i++)
        assert_floats(next[i], want[i], 2);
    /* received: only node 1's snapshot (node 2 timed out) */
    sl_bmuf_mean(th[0], next[0], next[1], 1, 2);
    assert_floats(th[0], want2, 2);
    /* nobody answered: the average is the node itself */
    sl_bmuf_mean(th[1], next[1], NULL, 0, 2);
    assert_floats(th[1], want[1], 2);
}
END_TEST

/* BMUF block update, eta 0.5, zeta 1, Nesterov, on one node of the three after an MA
 * average bar = [3, 0] (all values exact in binary):
 *   state: theta (after local steps, unused by the maths) [2, 1], omega [1, 1],
 *          Delta [0.5, 0], block start [1.5, 0.5]
 * reference blockstart: G = bar - start = [1.5, -0.5]
 *   Delta = 0.5*[0.5,0] + [1.5,-0.5] = [1.75, -0.5]; omega = [2.75, 0.5]
 *   theta = omega + 0.5*Delta = [3.625, 0.25]; start = theta
 * reference omega: G = bar - omega = [2, -1]
 *   Delta = [2.25, -1]; omega = [3.25, 0]; theta = [4.375, -0.5]
 * plain momentum (no Nesterov), blockstart: theta = omega = [2.75, 0.5]
 * zeta 0.5, blockstart: Delta = [0.25+0.75, -0.25] = [1, -0.25]; omega = [2, 0.75];
 *   theta = [2.5, 0.625] */
static void
bmuf_case(float eta, float zeta, int nesterov, sl_block_ref_t ref, const float *want_theta,
          const float *want_omega, const float *want_delta)
{
    sl_bmuf_opts_t o = {eta, zeta, nesterov, ref};
    float theta[2] = {2, 1}, bar[2] = {3, 0}, omega[2] = {1, 1}, delta[2] = {0.5f, 0},
          start[2] = {1.5f, 0.5f};

    sl_bmuf_update(&o, theta, bar, omega, delta, start, 2);
    assert_floats(theta, want_theta, 2);
    assert_floats(omega, want_omega, 2);
    assert_floats(delta, want_delta, 2);
    assert_floats(start, want_theta, 2);
}

START_TEST(test_bmuf_by_hand)
{
    bmuf_case(0.5f, 1, 1, SL_BLOCK_REF_BLOCKSTART, (const float[]){3.625f, 0.25f},
              (const float[]){2.75f, 0.5f}, (const float[]){1.75f, -0.5f});
    bmuf_case(0.5f, 1, 1, SL_BLOCK_REF_OMEGA, (const float[]){4.375f, -0.5f},
              (const float[]){3.25f, 0}, (const float[]){2.25f, -1});
    bmuf_case(0.5f, 1, 0, SL_BLOCK_REF_BLOCKSTART, (const float[]){2.75f, 0.5f},
              (const float[]){2.75f, 0.5f}, (const float[]){1.75f, -0.5f});
    bmuf_case(0.5f, 0.5f, 1, SL_BLOCK_REF_BLOCKSTART, (const float[]){2.5f, 0.625f},
              (const float[]){2, 0.75f}, (const float[]){1, -0.25f});
}
END_TEST

/* gossip-BMUF on three nodes, two blocks, eta 0.5, zeta 1, Nesterov, blockstart, every
 * node starting at omega = start = its theta0 and Delta = 0; a one-float component.
 *   theta0 = [0, 0, 0]; local steps move the nodes to [2, 4, 6]
 *   block 1, pulls 0<-1, 1<-2, 2<-0: bar = [3, 5, 4]; G = bar - 0 = bar
 *     Delta = [3, 5, 4]; omega = [3, 5, 4]; theta = omega + Delta/2 = [4.5, 7.5, 6]
 *   local steps add +1 to every node: [5.5, 8.5, 7]
 *   block 2, node 1 pulls from 0, node 0 from 2 but node 2 is missing (node 0 averages
 *     with itself only), node 2 from 1:
 *     bar = [5.5, (8.5+5.5)/2 = 7, (7+8.5)/2 = 7.75]
 *     G = bar - start = [5.5-4.5, 7-7.5, 7.75-6] = [1, -0.5, 1.75]
 *     Delta = 0.5*[3,5,4] + G = [2.5, 2, 3.75]; omega = [5.5, 7, 7.75]
 *     theta = omega + Delta/2 = [6.75, 8, 9.625] */
START_TEST(test_gossip_bmuf_two_blocks)
{
    sl_bmuf_opts_t o = {0.5f, 1, 1, SL_BLOCK_REF_BLOCKSTART};
    float th[3] = {0, 0, 0}, om[3] = {0, 0, 0}, de[3] = {0, 0, 0}, st[3] = {0, 0, 0};
    float bar[3];
    const int pull1[3] = {1, 2, 0};
    const float want1[3] = {4.5f, 7.5f, 6}, want2[3] = {6.75f, 8, 9.625f};

    for (int i = 0; i < 3; i++)
        th[i] = 2.0f * (float)(i + 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_mean(&bar[i], &th[i], &th[pull1[i]], 1, 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_update(&o, &th[i], &bar[i], &om[i], &de[i], &st[i], 1);
    assert_floats(th, want1, 3);
    for (int i = 0; i < 3; i++)
        th[i] += 1;
    sl_bmuf_mean(&bar[0], &th[0], NULL, 0, 1); /* node 2 did not answer node 0 */
    sl_bmuf_mean(&bar[1], &th[1], &th[0], 1, 1);
    sl_bmuf_mean(&bar[2], &th[2], &th[1], 1, 1);
    for (int i = 0; i < 3; i++)
        sl_bmuf_update(&o, &th[i], &bar[i], &om[i], &de[i], &st[i], 1);
    assert_floats(th, want2, 3);
}
END_TEST

/* Config -> options, and a single node's sync object does nothing. */
START_TEST(test_sync_single_node)
{
    sl_config_t c;
    sl_bmuf_opts_t o;
    sl_sync_t *s = NULL;
    sl_component_t comp = {"w", 0, 4, 0, 0, 0, 0};
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
    const float *avg;
    int writer, nmodels;

    sl_config_init(&c);
    ck_assert_int_eq(sl_config_set(&c, "sync={algorithm: gossip-bmuf, block_momentum: 0.5, "
                                       "block_lr: 0.25, nesterov: false, block_reference: omega}"),
                     SL_OK);
    sl_bmuf_opts_from_config(&o, &c);
    ck_assert(o.eta == 0.5f && o.zeta == 0.25f && o.nesterov == 0 && o.ref == SL_BLOCK_REF_OMEGA);
    ck_assert_int_eq(sl_sync_new(&s, &c, NULL, 0, 1, &comp, 1, p, 4), SL_OK);
    ck_assert_int_eq(sl_sync_algorithm(s), SL_SYNC_NONE);
    ck_assert_int_eq(sl_sync_gradients(s, g, 0), SL_OK);
    ck_assert_int_eq(sl_sync_after_step(s, p, 16), SL_OK);
    ck_assert_int_eq(sl_sync_final(s, p, &avg, &writer, &nmodels), SL_OK);
    ck_assert_ptr_null(avg);
    ck_assert_int_eq(writer, 0);
    ck_assert(p[0] == 1 && p[3] == 4 && g[0] == 1);
    sl_sync_destroy(&s);
    ck_assert_ptr_null(s);
    sl_sync_destroy(&s);
    /* several nodes need a transport; a component outside the buffer is refused */
    ck_assert_int_eq(sl_sync_new(&s, &c, NULL, 0, 4, &comp, 1, p, 4), SL_ERR_INVALID);
    comp.count = 5;
    ck_assert_int_eq(sl_sync_new(&s, &c, NULL, 0, 1, &comp, 1, p, 4), SL_ERR_INVALID);
    ck_assert_ptr_null(s);
    sl_config_fini(&c);
}
END_TEST

/* ------------------------------------------------------------ consensus rate */

/* Gossip-MA with q = 1 on n = 8 nodes (k = 2) minimising the shared quadratic
 * f(x) = |x|^2 / 2 by one gradient step (lr) per round, then the gossip average. The
 * expected iterate E[x] disagrees by |lambda_2| (1 - lr) less each round. Averaged
 * over many independent schedules (seeds) the mean trajectory follows that expectation,
 * so its disagreement must shrink at that rate. */
START_TEST(test_gossip_ma_consensus_rate)
{
    enum { N = 8, SEEDS = 4000, T = 12 };
    const double lr = 0.05;
    static double mean[T + 1][N];
    sl_schedule_t s;
    sl_mixing_t m;
    double x0[N] = {3, -1, 4, -1, 5, -9, 2, -6}, pred, rate, d0, dt;

    memset(mean, 0, sizeof mean);
    for (int seed = 0; seed < SEEDS; seed++) {
        float x[N], nx[N];
        ck_assert_int_eq(sl_schedule_init(&s, N, 2, 1, (uint64_t)seed + 1), SL_OK);
        for (int i = 0; i < N; i++)
            x[i] = (float)x0[i];
        for (int i = 0; i < N; i++)
            mean[0][i] += x[i] / SEEDS;
        for (int t = 1; t <= T; t++) {
            for (int i = 0; i < N; i++)
                x[i] -= (float)lr * x[i];
            for (int i = 0; i < N; i++) {
                int ch[4], cnt;
                float rows[4];
                ck_assert_int_eq(sl_schedule_chosen(&s, (uint64_t)t, 0, i, ch, 4, &cnt), SL_OK);
                for (int j = 0; j < cnt; j++)
                    rows[j] = x[ch[j]];
                sl_bmuf_mean(&nx[i], &x[i], rows, (size_t)cnt, 1);
            }
            memcpy(x, nx, sizeof x);
            for (int i = 0; i < N; i++)
                mean[t][i] += x[i] / SEEDS;
        }
    }
    ck_assert_int_eq(sl_schedule_init(&s, N, 2, 1, 1), SL_OK);
    ck_assert_int_eq(sl_mixing_analyse(&s, &m), SL_OK);
    pred = m.lambda2 * (1 - lr);
    /* disagreement ||x - mean(x)|| of the mean trajectory, rounds 4 -> T */
    {
        double a = 0, b = 0, ma = 0, mb = 0;
        for (int i = 0; i < N; i++) {
            ma += mean[4][i] / N;
            mb += mean[T][i] / N;
        }
        for (int i = 0; i < N; i++) {
            a += (mean[4][i] - ma) * (mean[4][i] - ma);
            b += (mean[T][i] - mb) * (mean[T][i] - mb);
        }
        d0 = sqrt(a);
        dt = sqrt(b);
    }
    rate = pow(dt / d0, 1.0 / (T - 4));
    ck_assert_msg(fabs(rate - pred) < 0.025, "measured %.4f per round, predicted %.4f", rate, pred);
    ck_assert(dt < d0);
}
END_TEST

/* ------------------------------------------------------------ shoal run */

static char tmp_root[512];
static char shoal_bin[1024];
static const char *data_dir;

static int
have_shoal(void)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    data_dir = getenv("SHOAL_DATA");
    snprintf(shoal_bin, sizeof shoal_bin, "%s/shoal", b ? b : ".");
    if (access(shoal_bin, X_OK) != 0 || !data_dir) {
        fprintf(stderr, "check_sync: %s or SHOAL_DATA missing; skipping\n", shoal_bin);
        return 0;
    }
    return 1;
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* <tmp>/<run>.yaml: a tiny model on 20000 Brown tokens; extra: more YAML lines. */
static void
tiny_yaml(char *path, size_t size, const char *run, const char *extra)
{
    char yaml[4096];
    FILE *f;

    snprintf(path, size, "%s/%s.yaml", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 0}\n"
             "data: {train: %s/brown/train.txt, valid: %s/brown/valid.txt,\n"
             "       vocab_size: 500, max_tokens: 20000, cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}]}\n"
             "train: {batch: 4, bptt: 8, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "cluster: {rendezvous_timeout_ms: 20000}\n"
             "%s",
             run, tmp_root, run, data_dir, data_dir, tmp_root, extra);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(yaml, f);
    fclose(f);
}

/* Starts `shoal ARGS...` with stdout and stderr into <tmp>/<run>.log. */
static pid_t
start_shoal(const char *run, const char *const *args)
{
    char log[700];
    const char *argv[32];
    int n = 0;
    pid_t pid;

    snprintf(log, sizeof log, "%s/%s.log", tmp_root, run);
    argv[n++] = shoal_bin;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(fileno(stdout), 2) < 0)
            _exit(127);
        execv(shoal_bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits (at most limit_s, then kills the group) and returns the exit status. */
static int
wait_shoal(pid_t pid, double limit_s)
{
    double t0 = now_s();
    int ws;

    while (waitpid(pid, &ws, WNOHANG) == 0) {
        if (now_s() - t0 > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            ck_abort_msg("shoal did not finish in %.0f s", limit_s);
        }
        usleep(20000);
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static char *
slurp(const char *path)
{
    char *data = NULL;
    size_t len;

    ck_assert_msg(sl_file_read_all(path, &data, &len) == SL_OK, "%s: %s", path, sl_err_msg());
    return data;
}

/* The number after "key": in a JSON text (first occurrence after from). */
static double
json_num(const char *text, const char *key)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof pat, "\"%s\": ", key);
    p = strstr(text, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\":", key);
        p = strstr(text, pat);
    }
    ck_assert_msg(p != NULL, "no %s in %s", key, text);
    return strtod(p + strlen(pat), NULL);
}

/* First and last training loss of a node's metrics.jsonl. */
static void
loss_first_last(const char *run, int rank, double *first, double *last)
{
    char path[700], *text, *line;
    int n = 0;

    snprintf(path, sizeof path, "%s/%s/node-%d/metrics.jsonl", tmp_root, run, rank);
    text = slurp(path);
    for (line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "{\"step\"", 7) != 0)
            continue;
        *last = json_num(line, "loss");
        if (n++ == 0)
            *first = *last;
    }
    ck_assert_int_ge(n, 2);
    free(text);
}

static const char *const algorithms[] = {"allreduce",  "ma",        "bmuf",       "local-ma",
                                         "local-bmuf", "gossip-ma", "gossip-bmuf"};

/* Every algorithm on 4 nodes: exit 0, every node's loss falls, rank 0 writes the run's
 * model.bin and a summary.json that evaluates the average of all 4 nodes; the metrics
 * carry sync lines. */
START_TEST(test_run_each_algorithm)
{
    const char *a = algorithms[_i];
    char run[64], conf[700], extra[256], path[800], *text;
    double first, last;

    if (!have_shoal())
        return;
    snprintf(run, sizeof run, "alg-%s", a);
    /* ma also drops the nodes' own models */
    snprintf(extra, sizeof extra,
             "sync: {algorithm: %s, period: 4, embedding_period: 8, timeout_ms: 10000%s}\n", a,
             strcmp(a, "ma") == 0 ? ", keep_node_models: false" : "");
    tiny_yaml(conf, sizeof conf, run, extra);
    ck_assert_int_eq(
        wait_shoal(start_shoal(run, (const char *[]){"run", conf, "-n", "4", "--quiet", "--set",
                                                     "train.max_steps=120", NULL}),
                   60),
        0);
    for (int r = 0; r < 4; r++) {
        loss_first_last(run, r, &first, &last);
        ck_assert_msg(last < first, "%s node %d: loss %.4f -> %.4f", a, r, first, last);
    }
    snprintf(path, sizeof path, "%s/%s/model.bin", tmp_root, run);
    ck_assert_int_eq(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/%s/node-1/model.bin", tmp_root, run);
    ck_assert_int_eq(access(path, F_OK), strcmp(a, "ma") == 0 ? -1 : 0);
    snprintf(path, sizeof path, "%s/%s/summary.json", tmp_root, run);
    text = slurp(path);
    ck_assert_ptr_nonnull(strstr(text, a));
    ck_assert_int_eq((int)json_num(text, "models_averaged"), 4);
    ck_assert(json_num(text, "valid_ppl") > 1 && json_num(text, "valid_ppl") < 500);
    free(text);
    snprintf(path, sizeof path, "%s/%s/node-1/metrics.jsonl", tmp_root, run);
    text = slurp(path);
    ck_assert_ptr_nonnull(strstr(text, "\"event\":\"sync\""));
    free(text);
}
END_TEST

/* The parameters of a model file (after the 192-byte header). */
static float *
model_params(const char *path, size_t n)
{
    char *data = NULL;
    size_t len;
    float *p = malloc(n * sizeof *p);

    ck_assert_int_eq(sl_file_read_all(path, &data, &len), SL_OK);
    ck_assert_uint_ge(len, 192 + n * sizeof(float));
    memcpy(p, data + 192, n * sizeof *p);
    free(data);
    return p;
}

/* allreduce on 4 nodes of batch 4 == one node of batch 16: each node's quarter of the
 * 20000 tokens cut into 4 streams of 1250 is exactly 4 of the single node's 16 streams
 * of 1250, and the mean of the 4 mean gradients is the mean over all 16 streams. */
START_TEST(test_allreduce_equals_big_batch)
{
    char conf1[700], conf2[700], path[800], *text;
    float *a, *b;
    size_t n;
    double worst = 0;

    if (!have_shoal())
        return;
    tiny_yaml(conf2, sizeof conf2, "ar-four", "sync: {algorithm: allreduce}\n");
    tiny_yaml(conf1, sizeof conf1, "ar-one", "");
    ck_assert_int_eq(
        wait_shoal(start_shoal("ar-four", (const char *[]){"run", conf2, "-n", "4", "--quiet",
                                                           "--set", "train.max_steps=30", NULL}),
                   60),
        0);
    ck_assert_int_eq(
        wait_shoal(start_shoal("ar-one", (const char *[]){"train", conf1, "--quiet", "--set",
                                                          "train.batch=16", "--set",
                                                          "train.max_steps=30", NULL}),
                   60),
        0);
    snprintf(path, sizeof path, "%s/ar-one/summary.json", tmp_root);
    text = slurp(path);
    n = (size_t)json_num(text, "params");
    free(text);
    snprintf(path, sizeof path, "%s/ar-one/model.bin", tmp_root);
    a = model_params(path, n);
    snprintf(path, sizeof path, "%s/ar-four/model.bin", tmp_root);
    b = model_params(path, n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst)
            worst = d;
    }
    /* 30 Adam steps of lr 0.01 move weights by up to 0.3; only the rounding of the
     * gradient sums differs (about 3e-6 seen) */
    ck_assert_msg(worst < 1e-4, "largest difference %g", worst);
    ck_assert_uint_gt(n, 1000);
    free(a);
    free(b);
}
END_TEST

/* The pid of the child of parent named comm ("shoal node 2"), 0 if none. */
static pid_t
child_named(pid_t parent, const char *comm)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;

    ck_assert_ptr_nonnull(d);
    while (!found && (e = readdir(d)) != NULL) {
        char path[300], buf[512], *lp, *rp;
        FILE *f;
        size_t k;
        int ppid;

        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        lp = strchr(buf, '(');
        rp = strrchr(buf, ')');
        if (!lp || !rp || sscanf(rp + 1, " %*c %d", &ppid) != 1 || ppid != parent)
            continue;
        if ((size_t)(rp - lp - 1) == strlen(comm) && strncmp(lp + 1, comm, strlen(comm)) == 0)
            found = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* SIGKILL of node 2 in the middle of a 4-node gossip-bmuf run: the other three finish,
 * rank 0 writes the final model averaged over the 3 live nodes, and shoal run exits
 * non-zero naming the dead node. */
START_TEST(test_gossip_bmuf_survives_kill)
{
    char conf[700], path[800], *text, *log;
    pid_t pid, victim = 0;
    double t0;
    struct stat sb;

    if (!have_shoal())
        return;
    tiny_yaml(conf, sizeof conf, "kill",
              "sync: {algorithm: gossip-bmuf, period: 4, timeout_ms: 2000}\n");
    pid = start_shoal("kill", (const char *[]){"run", conf, "-n", "4", "--quiet", "--set",
                                               "train.epochs=4", NULL});
    snprintf(path, sizeof path, "%s/kill/node-2/metrics.jsonl", tmp_root);
    t0 = now_s();
    while ((stat(path, &sb) != 0 || sb.st_size < 400) && now_s() - t0 < 30)
        usleep(10000);
    while (!(victim = child_named(pid, "shoal node 2")) && now_s() - t0 < 30)
        usleep(10000);
    ck_assert_int_gt(victim, 0);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_shoal(pid, 60), 1);
    snprintf(path, sizeof path, "%s/kill.log", tmp_root);
    log = slurp(path);
    ck_assert_msg(strstr(log, "shoal: node 2 killed by signal 9 (the other nodes finished "
                              "without it)") != NULL,
                  "%s", log);
    ck_assert_msg(strstr(log, "node 2 missed 3 rounds in a row") != NULL, "%s", log);
    free(log);
    snprintf(path, sizeof path, "%s/kill/summary.json", tmp_root);
    text = slurp(path);
    ck_assert_int_eq((int)json_num(text, "models_averaged"), 3);
    ck_assert_int_eq((int)json_num(text, "steps"), 4 * 156); /* 5000 tokens, 4 x 8 */
    free(text);
    snprintf(path, sizeof path, "%s/kill/model.bin", tmp_root);
    ck_assert_int_eq(access(path, F_OK), 0);
    for (int r = 0; r < 4; r += r == 1 ? 2 : 1) {
        snprintf(path, sizeof path, "%s/kill/node-%d/summary.json", tmp_root, r);
        ck_assert_int_eq(access(path, F_OK), 0);
    }
}
END_TEST

static Suite *
sync_suite(void)
{
    Suite *s = suite_create("sync");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_add_test(core, test_ma_three_nodes);
    tcase_add_test(core, test_gossip_ma_missing_peer);
    tcase_add_test(core, test_bmuf_by_hand);
    tcase_add_test(core, test_gossip_bmuf_two_blocks);
    tcase_add_test(core, test_sync_single_node);
    tcase_add_test(core, test_gossip_ma_consensus_rate);
    tcase_add_loop_test(core, test_run_each_algorithm, 0,
                        (int)(sizeof algorithms / sizeof algorithms[0]));
    tcase_add_test(core, test_allreduce_equals_big_batch);
    tcase_set_timeout(core, 120);
    tcase_add_test(limits, test_gossip_bmuf_survives_kill);
    tcase_set_timeout(limits, 120);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

static int
remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int
main(void)
{
    SRunner *r = srunner_create(sync_suite());
    int failed;

    snprintf(tmp_root, sizeof tmp_root, "/tmp/check_sync.XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("check_sync: mkdtemp");
        return EXIT_FAILURE;
    }
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
